"""Sessions, exports and their limits under pressure (issue 10): exports
queued behind each other do not hold back sessions, shutdown or a crash
loses none of them and none is claimed before it is written, open
sessions are bounded, and overlapping sessions read the rings once."""

import glob
import json
import os
import signal
import time

import pytest

from daemon_harness import Daemon, finish_producer, manifest, start_producer

SUFFIXES = {"xplane": ".xplane.pb", "perfetto": ".pftrace", "pprof": ".cpu.pb.gz",
            "json": ".json", "summary": ".summary.txt", "flamegraph": ".flamegraph.svg",
            "folded": ".folded"}  # exports = all
HOST = "hardhost"
CONFIG = f"""
[daemon]
seal_interval = 100ms
host_name = {HOST}
[sessions]
exports = all
"""


def session_dirs(d):
    return sorted(glob.glob(os.path.join(d.logdir, "*", "plugins", "profile", "*")))


def export_states(path):
    """{format: state} of a session's manifest; None before it is written."""
    try:
        m = manifest(path)
    except (AssertionError, ValueError, OSError):
        return None
    return {f: e["state"] for f, e in m.get("exports", {}).items()}


def check_truthful(path):
    """Every export the manifest calls written is in place, whole (its
    size); every other state is pending or failed with a reason."""
    m = manifest(path)
    assert m["state"] == "complete", m
    assert set(m["exports"]) == set(SUFFIXES), m["exports"]
    for fmt, e in m["exports"].items():
        f = os.path.join(path, HOST + SUFFIXES[fmt])
        if e["state"] == "written":
            assert os.path.getsize(f) == e["bytes"] > 0, (f, e)
        elif e["state"] == "failed":
            assert e["error"], e
        else:
            assert e == {"state": "pending"}, e


def wait_for(cond, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def all_written(d):
    dirs = session_dirs(d)
    return dirs and all(set((export_states(p) or {"": ""}).values()) == {"written"} for p in dirs)


def pending(d):
    return [p for p in session_dirs(d) if "pending" in (export_states(p) or {}).values()]


def record(d, seconds=3, rate=200000):
    """Data worth exporting: each snapshot of it takes the exporter a while."""
    finish_producer(start_producer(d, rate, seconds))
    time.sleep(0.3)  # sealed


def queue_snapshots(d, n):
    for i in range(n):
        d.ok("POST", "/v1/snapshot", {"name": f"snap{i:02d}", "last": "30s"})


def test_capture_completes_while_exports_wait(tmp_path):
    d = Daemon(tmp_path, config=CONFIG).start()
    try:
        record(d)
        queue_snapshots(d, 24)
        started = time.monotonic()
        cap = d.ok("POST", "/v1/sessions", {"name": "cap", "duration": "2s"})
        # Before: the capture closed only after every export ahead of it
        # (39 s behind 20).  Now it closes on time; 2 s plus a loaded
        # machine's slack.
        assert wait_for(lambda: export_states(cap["path"]) is not None, 10, 0.05), \
            open(d.log).read()
        closed_after = time.monotonic() - started
        assert manifest(cap["path"])["state"] == "complete"
        waiting = pending(d)
        print(f"capture of 2 s complete after {closed_after:.1f} s, {len(waiting)} of 24 "
              "snapshots still waiting for exports")
        assert closed_after < 6, closed_after
        # The proof that it did not wait: exports were still to be written.
        assert len(waiting) >= 5, (closed_after, waiting)
        # The API answers meanwhile, with the states.
        s = d.ok("GET", "/v1/sessions/snap23")
        assert set(s["exports"]) == set(SUFFIXES)
        assert wait_for(lambda: all_written(d), 240, 0.5), [export_states(p) for p in session_dirs(d)]
        for p in session_dirs(d):
            check_truthful(p)
    finally:
        d.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_exports_survive_stop_and_crash(tmp_path, sig):
    d = Daemon(tmp_path, config=CONFIG).start()
    record(d)
    queue_snapshots(d, 30)
    t0 = time.monotonic()
    d.kill(sig)
    took = time.monotonic() - t0
    if sig == signal.SIGTERM:
        # Before: 79 s with 30 queued, past TimeoutStopSec=60.  Now it
        # gives the export at hand 2 s and goes.
        assert d.proc.returncode == 0
        assert took < 10, took
    dirs = session_dirs(d)
    print(f"{sig.name} with 30 sessions queued for export: exited in {took:.1f} s, "
          f"{len(pending(d))} left pending")
    assert len(dirs) == 30
    for p in dirs:
        check_truthful(p)  # nothing claimed that is not there
    left = pending(d)
    assert left, "every export was written before the daemon stopped: nothing to resume"
    d.start()
    try:
        assert wait_for(lambda: all_written(d), 300, 0.5), \
            ([export_states(p) for p in session_dirs(d)], open(d.log).read()[-2000:])
        for p in session_dirs(d):
            check_truthful(p)
        # Each session exported once: the metric counts this run's (counted
        # just after the manifest's last update: waited for).
        want = f'ringprof_exports_total{{result="written"}} {len(left)}\n'
        assert wait_for(lambda: want in d.request("GET", "/metrics")[1], 10, 0.1), \
            d.request("GET", "/metrics")[1]
    finally:
        d.stop()


def test_full_export_queue_waits_on_disk(tmp_path):
    d = Daemon(tmp_path, config=CONFIG + "export_queue = 2\n").start()
    try:
        record(d, seconds=1, rate=50000)
        queue_snapshots(d, 12)
        # Ten found the queue full; they are taken up from disk.
        assert wait_for(lambda: all_written(d), 240, 0.5), \
            [export_states(p) for p in session_dirs(d)]
        for p in session_dirs(d):
            check_truthful(p)
    finally:
        d.stop()


def test_open_sessions_are_bounded(tmp_path):
    d = Daemon(tmp_path, config=CONFIG + "max_open = 3\n").start()
    try:
        for i in range(3):
            d.ok("POST", "/v1/sessions", {"name": f"open{i}"})
        status, body = d.request("POST", "/v1/sessions", {"name": "open3"})
        assert status == 503, (status, body)
        assert "max_open" in body["error"]["message"], body
        # Nothing was left of the refused one, and snapshots still work.
        assert not os.path.exists(os.path.join(d.logdir, "default", "plugins", "profile", "open3"))
        d.ok("POST", "/v1/snapshot", {"name": "snap", "last": "1s"})
        d.ok("POST", "/v1/sessions/open0/stop")
        d.ok("POST", "/v1/sessions", {"name": "open3"})
        assert len(d.ok("GET", "/v1/status")["open_sessions"]) == 3
    finally:
        d.stop()


def metric(d, name):
    _, text = d.request("GET", "/metrics")
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def disk_reads(d):
    with open(f"/proc/{d.proc.pid}/io") as f:
        return int(next(line.split()[1] for line in f if line.startswith("read_bytes:")))


def read_per_copied(d, n):
    """Bytes sessions read from the ring per byte one of them copied,
    with n sessions open over the same data; and the daemon's reads from
    disk meanwhile, per byte copied (the ring is written with O_DIRECT)."""
    before, disk = metric(d, "ringprof_session_ring_read_bytes_total"), disk_reads(d)
    ids = [f"over{n}_{i}" for i in range(n)]
    for i in ids:
        d.ok("POST", "/v1/sessions", {"name": i})
    finish_producer(start_producer(d, 200000, 2))
    time.sleep(0.5)
    copied = [sum(dev["bytes"] for dev in d.ok("POST", f"/v1/sessions/{i}/stop")["devices"])
              for i in ids]
    read = metric(d, "ringprof_session_ring_read_bytes_total") - before
    return read / max(copied), copied, read, (disk_reads(d) - disk) / max(copied)


def test_overlapping_sessions_read_the_ring_once(tmp_path):
    d = Daemon(tmp_path, config=CONFIG.replace("exports = all", "exports = none")
               + "max_open = 16\n").start()
    try:
        one, copied1, _, disk1 = read_per_copied(d, 1)
        eight, copied8, read8, disk8 = read_per_copied(d, 8)
        print(f"ring bytes read per byte copied: 1 session {one:.2f}, 8 sessions {eight:.2f} "
              f"({read8:.0f} bytes read, {copied8[0]} copied by each); read from disk per "
              f"byte copied: {disk1:.2f} and {disk8:.2f}")
        assert min(copied1) > 1 << 20 and min(copied8) > 1 << 20, (copied1, copied8)
        # Each session reading the ring itself would make it about 8.
        assert one < 2.5, one
        assert eight < 3, eight
    finally:
        d.stop()
