"""ringprofd run as an unprivileged user (nobody, no capabilities): it
serves, says why the CPU sampler is off and how to fix it, and records
and snapshots what producers send.  Needs root to switch to that user."""

import os
import shutil
import tempfile

import pytest

from daemon_harness import Daemon, dump, finish_producer, seq_values, start_producer

NOBODY = 65534
SETPRIV = shutil.which("setpriv")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not SETPRIV,
                                reason="needs root and setpriv (util-linux) to run as nobody")

CONFIG = """
[daemon]
seal_interval = 100ms
"""


@pytest.fixture
def nobody_dir():
    # Not under pytest's tmp_path: its parents are root's alone.
    path = tempfile.mkdtemp(prefix="ringprof-nobody-")
    os.chown(path, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def proc_ids(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return line.split()[1:]
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_unprivileged_daemon_runs_without_sampler_and_snapshots(nobody_dir):
    d = Daemon(nobody_dir, config=CONFIG,
               prefix=[SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                       "--inh-caps=-all", "--bounding-set=-all"]).start()
    try:
        status = d.ok("GET", "/v1/status")
        pid = status["pid"]
        assert proc_ids(pid, "Uid") == [str(NOBODY)] * 4
        assert proc_ids(pid, "CapEff") == ["0000000000000000"]

        sampler = next(c for c in status["collectors"] if c["name"] == "cpu_sampler")
        assert sampler["state"] == "disabled", sampler
        reason = sampler["reason"]
        assert "CAP_BPF" in reason and "CAP_PERFMON" in reason, reason
        assert "run ringprofd as root or grant them" in reason, reason
        assert sampler["events"] == 0 and sampler["frequency_hz"] == 0
        out = d.cli("status", check=True).stdout
        assert "cpu_sampler" in out and "CAP_PERFMON" in out, out

        # A session asking for a rate starts all the same: there is no sampler to raise.
        d.ok("POST", "/v1/sessions", {"name": "fast", "cpu_sample_hz": 999})
        producer = start_producer(d, 5000, 2)
        stats = finish_producer(producer)
        assert stats["dropped"] == 0 and stats["connected"] == 1
        snap = d.ok("POST", "/v1/snapshot", {"last": "10s", "name": "nobody"})
        stopped = d.ok("POST", "/v1/sessions/fast/stop")
    finally:
        d.stop()
    assert d.proc.returncode == 0, open(d.log).read()
    for session in (snap, stopped):
        assert session["state"] == "complete", session
        values = [v for v, _ in seq_values(dump(session["path"]))]
        assert values == list(range(stats["produced"])), session["id"]
        assert os.stat(session["path"]).st_uid == NOBODY
    assert "CPU sampler disabled" in open(d.log).read()
