"""Exports when sessions close, from the real daemon: a Python program's
annotations come out in every format, each read back by its reader, the
Perfetto trace grouped as [sessions] perfetto_grouping says; the CLI
exports a session the daemon names; [sessions] exports = none writes
none.  The formats' details are tested on known data in tests/export."""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from daemon_harness import Daemon

CONFIG = """
[daemon]
seal_interval = 100ms
host_name = exporthost
[sessions]
exports = {exports}
"""
SUFFIXES = [".xplane.pb", ".pftrace", ".cpu.pb.gz", ".json", ".summary.txt"]

# A training loop in miniature: 20 steps of 4 ms holding a 1 ms "exp.inner".
PROGRAM = """
import threading, time, ringprof
threading.current_thread().name = "exp-main"
for i in range(20):
    with ringprof.annotate("exp.step"):
        with ringprof.annotate("exp.inner"):
            time.sleep(0.001)
        time.sleep(0.003)
        ringprof.counter("exp.loss", 1.0 / (i + 1))
time.sleep(0.3)
"""


def run_program(d):
    env = d.env()  # PYTHONPATH: the built package (pypackage.py)
    subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True, timeout=60)
    time.sleep(0.3)  # sealed and in the ring


def wait_files(paths, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(os.path.exists(p) for p in paths):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    config = CONFIG.format(exports="all") + "perfetto_grouping = thread\n"
    d = Daemon(tmp_path_factory.mktemp("exports"), config=config).start()
    try:
        yield d
    finally:
        d.stop()


def test_session_is_exported_when_it_closes(daemon):
    run_program(daemon)
    r = daemon.cli("snapshot", "--last", "10s", "--name", "exp1", "--json", check=True)
    path = json.loads(r.stdout)["path"]
    files = [os.path.join(path, "exporthost" + s) for s in SUFFIXES]
    assert wait_files(files), (os.listdir(path), open(daemon.log).read())
    # As private as the session's own files.
    chunks_mode = os.stat(os.path.join(path, "exporthost.host.chunks")).st_mode & 0o777
    assert {os.stat(f).st_mode & 0o777 for f in files} == {chunks_mode}, chunks_mode

    doc = json.load(open(files[3]))
    steps = [e for e in doc["trace_events"] if e["name"] == "exp.step"]
    inner = [e for e in doc["trace_events"] if e["name"] == "exp.inner"]
    assert len(steps) == 20 and len(inner) == 20
    assert all(e["duration"] >= 4_000_000 for e in steps)
    assert all(1_000_000 <= e["duration"] < e_step["duration"] for e, e_step in zip(inner, steps))
    # Every inner range lies within its step, in wall-clock ns.
    for s, i in zip(sorted(steps, key=lambda e: e["timestamp"]), sorted(inner, key=lambda e: e["timestamp"])):
        assert s["timestamp"] <= i["timestamp"] and i["timestamp"] + i["duration"] <= s["timestamp"] + s["duration"]
    losses = [c["value"] for c in doc["counters"] if c["name"] == "exp.loss"]
    assert losses == [1.0 / (i + 1) for i in range(20)]

    summary = open(files[4]).read()
    assert "exp.step" in summary and "exp.inner" in summary

    # XProf's own converter finds the steps on the program's thread.
    from xprof.convert import raw_to_tool_data  # noqa: PLC0415
    xdir = os.path.join(daemon.tmp, "xprof", "plugins", "profile", "exp1")
    os.makedirs(xdir)  # XProf writes caches beside the file: a copy keeps the session clean
    shutil.copy(files[0], xdir)
    data, _ = raw_to_tool_data.xspace_to_tool_data(
        [os.path.join(xdir, os.path.basename(files[0]))], "trace_viewer",
        {"use_saved_result": False})
    trace = json.loads(data.decode() if isinstance(data, bytes) else data)
    names = [e.get("name") for e in trace["traceEvents"] if e]
    assert names.count("exp.step") == 20, names[:50]

    # Perfetto: a non-empty sequence of packets that the schema decodes,
    # grouped as [sessions] perfetto_grouping says: the thread on top.
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace  # noqa: PLC0415
    t = Trace()
    t.ParseFromString(open(files[1], "rb").read())
    begins = [p for p in t.packet if p.HasField("track_event") and p.track_event.type == 1]
    assert len(begins) >= 40
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in t.packet
              if p.HasField("track_descriptor")}
    for td in (tracks[u] for u in {p.track_event.track_uuid for p in begins}):
        assert re.fullmatch(r".+ \d+/\d+", td.name) and not td.HasField("parent_uuid"), td
    assert not any(td.HasField("process") or td.HasField("thread") for td in tracks.values())
    assert any(re.fullmatch(r"exp\.loss \d+", td.name) for td in tracks.values()), tracks

    status, metrics = daemon.request("GET", "/metrics")
    assert status == 200 and 'ringprof_exports_total{result="written"} 1' in metrics, metrics


def test_cli_exports_a_session_the_daemon_names(daemon, tmp_path):
    out = tmp_path / "exp1.json"
    daemon.cli("export", "exp1", "--format", "json", "-o", str(out), check=True)
    doc = json.load(open(out))
    assert sum(e["name"] == "exp.step" for e in doc["trace_events"]) == 20
    r = daemon.cli("export", "exp1", "--format", "json,pprof", "-o", str(out))
    assert r.returncode == 2 and "one --format" in r.stderr
    r = daemon.cli("export", "no_such_session", "--format", "json")
    assert r.returncode != 0 and "no_such_session" in r.stderr


def test_pprof_export_is_gzip(daemon):
    path = os.path.join(daemon.logdir, "default", "plugins", "profile", "exp1")
    data = gzip.decompress(open(os.path.join(path, "exporthost.cpu.pb.gz"), "rb").read())
    assert len(data) > 0
    if shutil.which("go"):
        r = subprocess.run(["go", "tool", "pprof", "-raw", os.path.join(path, "exporthost.cpu.pb.gz")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr


def test_exports_none_writes_no_file(tmp_path):
    d = Daemon(tmp_path, config=CONFIG.format(exports="none")).start()
    try:
        r = d.cli("snapshot", "--last", "1s", "--name", "quiet", "--json", check=True)
        path = json.loads(r.stdout)["path"]
        time.sleep(1)
        exports = [n for n in os.listdir(path)
                   if n.endswith(tuple(SUFFIXES)) and not n.endswith(".manifest.json")]
        assert not exports, os.listdir(path)
    finally:
        d.stop()


def test_bad_exports_key_is_refused(tmp_path):
    d = Daemon(tmp_path, config=CONFIG.format(exports="xplane,pdf"))
    with pytest.raises(RuntimeError) as e:
        d.start()
    assert "unknown export format 'pdf'" in str(e.value)
