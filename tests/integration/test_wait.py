"""--wait: snapshot, stop and capture return once the session's exports
are written or failed (the Python package's wait= the same), so that a
script can open the .xplane.pb at once; a failed export is named and the
exit status says so; a wait that runs out says what is still pending."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from daemon_harness import Daemon, manifest

HOST = "waithost"
CONFIG = f"""
[daemon]
seal_interval = 100ms
host_name = {HOST}
"""
# The daemon's default exports: the five formats, not the flame graphs.
DEFAULT = {"xplane": ".xplane.pb", "perfetto": ".pftrace", "pprof": ".cpu.pb.gz",
           "json": ".json", "summary": ".summary.txt"}

PROGRAM = """
import time, ringprof
for i in range(10):
    with ringprof.annotate("wait.step"):
        time.sleep(0.002)
time.sleep(0.3)
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("wait"), config=CONFIG).start()
    subprocess.run([sys.executable, "-c", PROGRAM], env=d.env(), check=True, timeout=60)
    try:
        yield d
    finally:
        d.stop()


def wrote(stdout):
    """{path: size text} of the "wrote PATH (SIZE)" lines."""
    return dict(re.findall(r"^wrote (\S+) \(([^)]+)\)$", stdout, re.M))


def assert_written(path, exports):
    """Every default export of the session at path is in place, as big
    as the manifest says, right now."""
    assert set(exports) == set(DEFAULT), exports
    for fmt, suffix in DEFAULT.items():
        assert exports[fmt]["state"] == "written", (fmt, exports)
        size = os.path.getsize(os.path.join(path, HOST + suffix))
        assert size > 0 and size == exports[fmt]["bytes"], (fmt, size, exports[fmt])


def test_snapshot_wait_then_read_the_xplane(daemon):
    r = daemon.cli("snapshot", "--last", "10s", "--name", "w1", "--wait", check=True)
    path = re.search(r"^path\s+(\S+)$", r.stdout, re.M).group(1)
    # Read at once: no sleep, no retry.
    xplane = os.path.join(path, HOST + ".xplane.pb")
    with open(xplane, "rb") as f:
        data = f.read()
    assert data and data[0] == 0x0a, "an XSpace starts with its planes (field 1)"
    files = wrote(r.stdout)
    assert set(files) == {os.path.join(path, HOST + s) for s in DEFAULT.values()}, r.stdout
    m = manifest(path)
    assert_written(path, m["exports"])


def test_snapshot_wait_json_carries_the_states(daemon):
    r = daemon.cli("--json", "snapshot", "--last", "5s", "--name", "w2", "--wait", check=True)
    s = json.loads(r.stdout)  # nothing but the JSON on stdout
    assert_written(s["path"], s["exports"])


def test_without_wait_the_answer_says_pending(daemon):
    r = daemon.cli("--json", "snapshot", "--last", "5s", "--name", "w3", check=True)
    s = json.loads(r.stdout)
    assert {st["state"] for st in s["exports"].values()} == {"pending"}, s["exports"]


def test_stop_and_capture_wait(daemon):
    sid = daemon.cli("start", "--name", "w4", check=True).stdout.strip()
    time.sleep(0.2)
    r = daemon.cli("stop", sid, "--wait", check=True)
    assert len(wrote(r.stdout)) == len(DEFAULT), r.stdout
    assert_written(manifest_path(daemon, "w4"), manifest(manifest_path(daemon, "w4"))["exports"])
    r = daemon.cli("capture", "--duration", "300ms", "--name", "w5", "--wait", check=True)
    assert len(wrote(r.stdout)) == len(DEFAULT), r.stdout
    assert_written(manifest_path(daemon, "w5"), manifest(manifest_path(daemon, "w5"))["exports"])


def manifest_path(daemon, name):
    return os.path.join(daemon.logdir, "default", "plugins", "profile", name)


def test_wait_times_out_with_what_is_pending(daemon):
    # 1 ns: the answer to the snapshot is taken at close, before any
    # export, so the wait has run out at its first look.
    r = daemon.cli("snapshot", "--last", "5s", "--name", "w6", "--wait", "--wait-timeout", "1ns")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "still pending after 1ns" in r.stderr and "xplane" in r.stderr, r.stderr
    assert "--wait-timeout" in r.stderr
    assert re.search(r"^path\s+", r.stdout, re.M), "the session is shown all the same"


def test_failed_export_is_named_and_fails_the_command(daemon):
    # A directory where the JSON export goes: its rename into place fails.
    path = manifest_path(daemon, "w7")
    os.makedirs(os.path.join(path, HOST + ".json"))
    r = daemon.cli("snapshot", "--last", "5s", "--name", "w7", "--wait")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert re.search(r"the json export of session w7 failed: .+\(retry: ringprof export \S+ "
                     r"--format json\)", r.stderr), r.stderr
    assert os.path.join(path, HOST + ".xplane.pb") in wrote(r.stdout), r.stdout
    assert manifest(path)["exports"]["json"]["state"] == "failed"


def test_python_snapshot_and_trace_wait(daemon):
    program = f"""
import json, os, ringprof
s = ringprof.snapshot(last=5, name="w8", wait=True)
x = os.path.join(s["path"], "{HOST}.xplane.pb")
print(json.dumps({{"session": s, "xplane_bytes": os.path.getsize(x)}}))
with ringprof.trace(name="w9", wait=30) as t:
    pass
print(json.dumps({{"session": t.session}}))
try:
    ringprof.snapshot(last=5, name="w10", wait=1e-9)
except ringprof.RingprofError as e:
    print(json.dumps({{"error": str(e), "id": e.session["id"]}}))
"""
    out = subprocess.run([sys.executable, "-c", program], env=daemon.env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, second, third = (json.loads(line) for line in out.stdout.splitlines())
    s = first["session"]
    assert_written(s["path"], s["exports"])
    assert first["xplane_bytes"] == s["exports"]["xplane"]["bytes"]
    assert_written(second["session"]["path"], second["session"]["exports"])
    assert "still pending" in third["error"] and third["id"] == "w10", third
