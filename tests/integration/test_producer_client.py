"""The producer client (producer/producer.h): an in-workload collector with
a device and a clock of its own, and the rings producers keep across a
daemon restart (docs/api.md, "Producer client")."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import conftest  # noqa: F401  (puts this tree's Python package on PYTHONPATH)
from daemon_harness import BUILD, Daemon, dump, finish_producer, seq_values, start_producer

FOREIGN_PRODUCER = os.environ.get("RINGPROF_FOREIGN_PRODUCER",
                                  os.path.join(BUILD, "tests", "foreign-producer"))

# 16 MiB producer rings hold every event the producers below write while
# no daemon drains them.
CONFIG = """
[daemon]
poll_interval = 10ms
seal_interval = 100ms
[producers]
ring_size = 16MiB
"""


def snapshot(d, name, last="60s"):
    r = d.cli("snapshot", "--last", last, "--name", name, "--json", check=True)
    return dump(json.loads(r.stdout)["path"], all_events=True)


def test_foreign_clock_producer_gets_a_device_ring_in_host_time(tmp_path):
    d = Daemon(tmp_path, config=CONFIG).start()
    try:
        before = time.monotonic_ns()
        out = subprocess.run([FOREIGN_PRODUCER, "gpu0", "200"], env=d.env(), capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        produced = json.loads(out.stdout)
        assert produced["connected"] == 1
        evs = [e for e in snapshot(d, "foreign") if e.get("name", "").startswith("foreign.")]
    finally:
        d.stop()
    assert {e["device"] for e in evs} == {"gpu0"}
    got = sorted((int(e["name"].split(".")[1]), e["ts"]) for e in evs)
    # Exactly ts + the offset declared when written, the new offset from
    # the half on: host time, in the window the program ran.
    assert got == list(enumerate(produced["expected"]))
    assert all(before <= ts <= time.monotonic_ns() for _, ts in got)


PY_PRODUCER = textwrap.dedent("""
    import sys, time
    import ringprof
    rate, seconds = float(sys.argv[1]), float(sys.argv[2])
    start, n = time.monotonic(), int(rate * seconds)
    for i in range(n):
        due = start + i / rate
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
        ringprof.counter("pyseq", float(i))
    print(n, ringprof.dropped())
""")


def restart_keeps_every_event(tmp_path, sig):
    d = Daemon(tmp_path, config=CONFIG).start()
    c = start_producer(d, 2000, 7)
    py = subprocess.Popen([sys.executable, "-c", PY_PRODUCER, "500", "7"], env=d.env(),
                          stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
        d.kill(sig)
        time.sleep(1)
        d.start()
        stats = finish_producer(c)
        out, _ = py.communicate(timeout=120)
        assert py.returncode == 0
        py_produced, py_dropped = map(int, out.split())
        evs = snapshot(d, "restart")
    finally:
        c.kill()
        py.kill()
        d.stop()
    assert stats["dropped"] == 0 and stats["connected"] == 1
    assert py_dropped == 0
    # Every event, in order, none twice, across the whole run.
    assert [v for v, _ in seq_values(evs)] == list(range(stats["produced"]))
    assert [v for v, _ in seq_values(evs, "pyseq")] == list(range(py_produced))


def test_sigkill_restart_loses_nothing(tmp_path):
    restart_keeps_every_event(tmp_path, signal.SIGKILL)


def test_sigterm_restart_loses_nothing(tmp_path):
    restart_keeps_every_event(tmp_path, signal.SIGTERM)
