"""The producer client (producer/producer.h): an in-workload collector with
a device and a clock of its own, and the rings producers keep across a
daemon restart (docs/api.md, "Producer client")."""

import array
import errno
import fcntl
import json
import mmap
import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

# conftest also puts this tree's Python package on PYTHONPATH; its daemon
# config's 16 MiB producer rings hold every event the producers below
# write while no daemon drains them.
from conftest import CONFIG
from daemon_harness import (BUILD, Daemon, dump, finish_producer, producer_hello, seq_values,
                            start_producer)

FOREIGN_PRODUCER = os.environ.get("RINGPROF_FOREIGN_PRODUCER",
                                  os.path.join(BUILD, "tests", "foreign-producer"))


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


def offer_ring(daemon, fd, device="host"):
    """A version-2 hello offering fd as the producer's ring: (status, message)."""
    hello = struct.pack("<8sIIII64s56sIIq64s", b"RPHELLO1", 2, os.getpid(), threading.get_native_id(),
                        0, device.encode(), b"offer", 0, 1, 0, b"")
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(10)
        s.connect(daemon.socket + ".producers")
        s.sendmsg([hello], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        msg, anc, _, _ = s.recvmsg(264, socket.CMSG_SPACE(4))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            os.close(array.array("i", data[:4])[0])
    status, = struct.unpack_from("<i", msg, 8)
    return status, msg[16:].split(b"\0")[0].decode()


def producer_rings(daemon):
    return daemon.ok("GET", "/v1/status")["producers"]["rings"]


def test_offered_rings_are_checked_as_untrusted(tmp_path):
    d = Daemon(tmp_path, config=CONFIG).start()
    try:
        # Not a ring at all: a pipe, an unsealed memfd, a sealed one with
        # a bad header.
        r, w = os.pipe()
        assert offer_ring(d, r)[0] == -errno.EINVAL
        os.close(r)
        os.close(w)
        fake = os.memfd_create("fake", os.MFD_ALLOW_SEALING)
        os.ftruncate(fake, 4096 + 65536)
        assert offer_ring(d, fake)[0] == -errno.EINVAL
        fcntl.fcntl(fake, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        status, message = offer_ring(d, fake)
        assert status == -errno.EINVAL and "magic" in message
        os.close(fake)

        # A ring this daemon drains already is not attached twice.
        status, _, fd = producer_hello(d)
        assert status == 0
        before = producer_rings(d)
        assert offer_ring(d, fd) == (0, "ok")
        assert producer_rings(d) == before

        # A ring of an earlier daemon with forged positions: taken, its
        # garbage counted as corrupt, and the daemon keeps recording.
        d.kill()
        hdr = mmap.mmap(fd, 4096)
        hdr[128:136] = struct.pack("<Q", 1 << 40)  # head far past tail
        d.start()
        assert offer_ring(d, fd) == (0, "ok")
        finish_producer(start_producer(d, 1000, 1))
        assert d.alive()
        assert [v for v, _ in seq_values(snapshot(d, "after"))] == list(range(1000))
        host = [r for r in d.ok("GET", "/v1/status")["rings"] if r["device"] == "host"]
        assert host[0]["corrupt_records"] >= 1
        hdr.close()
        os.close(fd)
    finally:
        d.stop()
