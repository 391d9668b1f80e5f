"""Every format of one session tells the same story: the same ranges at
the same instants (to the ns; ps in XSpace), the same CPU samples; and
several hosts writing one session give one XProf session with a file per
host.  Each format is read by its reader: the perfetto package's schema,
XSpace through our .proto and protoc's descriptors, Python's json, and
XProf's own converter for the hosts."""

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent
from synth_session import CLI, PROTO_DIR, WALL_OFFSET, export, make_session, run

REALTIME, MONOTONIC = 1, 3


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return make_session(tmp_path_factory.mktemp("formats"), "--steps", 25, "--samples-per-step", 8)


def json_ranges(path):
    """(name, wall begin ns, wall end ns) of every range."""
    doc = json.load(open(path))
    return sorted((e["name"], e["timestamp"], e["timestamp"] + e["duration"])
                  for e in doc["trace_events"] if e["type"] == "range"), doc


def perfetto_ranges(path):
    trace = Trace()
    trace.ParseFromString(open(path, "rb").read())
    offset = None
    names, open_, out, samples = {}, {}, [], []
    for p in trace.packet:
        if p.HasField("clock_snapshot"):
            clocks = {c.clock_id: c.timestamp for c in p.clock_snapshot.clocks}
            offset = clocks[REALTIME] - clocks[MONOTONIC]
        for n in p.interned_data.event_names:
            names[n.iid] = n.name
        if p.HasField("perf_sample"):
            samples.append(p.timestamp + offset)
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        if e.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_.setdefault(e.track_uuid, []).append((names.get(e.name_iid, e.name), p.timestamp))
        elif e.type == TrackEvent.TYPE_SLICE_END:
            name, begin = open_[e.track_uuid].pop()
            out.append((name, begin + offset, p.timestamp + offset))
    return out, sorted(samples)


def xspace(path, tmp):
    desc = tmp / "xplane.desc"
    run("protoc", f"--proto_path={PROTO_DIR}", f"--descriptor_set_out={desc}", "xplane.proto")
    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString(desc.read_bytes()).file:
        pool.Add(f)
    space = message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.profiler.XSpace"))()
    space.ParseFromString(open(path, "rb").read())
    return space


def xplane_ranges(path, tmp):
    """(name, wall begin ns, wall end ns) of every event on the host plane's
    thread lines, from picoseconds since the profile start."""
    space = xspace(path, tmp)
    env = next(p for p in space.planes if p.name == "Task Environment")
    meta = {m.id: m.name for m in env.stat_metadata.values()}
    start = next(s.uint64_value for s in env.stats if meta[s.metadata_id] == "profile_start_time")
    host = next(p for p in space.planes if p.name == "/host:CPU")
    out = []
    for line in host.lines:
        for e in line.events:
            ps = line.timestamp_ns * 1000 + e.offset_ps
            assert ps % 1000 == 0 and e.duration_ps % 1000 == 0, "XSpace times are whole ns here"
            out.append((host.event_metadata[e.metadata_id].name, start + ps // 1000,
                        start + (ps + e.duration_ps) // 1000))
    return out


def test_ranges_agree_to_the_ns(session, tmp_path):
    j, doc = json_ranges(export(session, "json", tmp_path / "s.json"))
    p, p_samples = perfetto_ranges(export(session, "perfetto", tmp_path / "s.pftrace"))
    x = xplane_ranges(export(session, "xplane", tmp_path / "s.xplane.pb"), tmp_path)
    names = {"step", "forward", "backward", "load_batch"}
    j = sorted(r for r in j if r[0] in names)
    assert len(j) == 4 * 25 + 1  # and the step still open at the window's end
    assert sorted(r for r in p if r[0] in names) == j
    assert sorted(r for r in x if r[0] in names) == j
    # The same CPU samples, at the same wall-clock instants.
    assert p_samples == sorted(s["timestamp"] for s in doc["cpu_samples"])
    assert p_samples[0] == 1_000_000_000 + 2_000_000 + 1_000 + WALL_OFFSET


@contextlib.contextmanager
def xprof_server(logdir):
    """GET of XProf's profile plugin API (parsed JSON), while `xprof
    --logdir` serves logdir on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["xprof", "--logdir", str(logdir), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def get(path):
        url = f"http://127.0.0.1:{port}/data/plugin/profile/{path}"
        with urllib.request.urlopen(url, timeout=60) as r:
            body = r.read()
        return json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get("runs")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
                time.sleep(0.2)
        yield get
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_hosts_of_one_session_make_one_xprof_session(tmp_path):
    # Two hosts write the same session id into one log directory.
    a = make_session(tmp_path, "--host", "node-a", "--steps", 5)
    b = make_session(tmp_path, "--host", "node:b", "--steps", 7)
    assert a == b
    run(CLI, "export", a)  # every format of every host, into the session directory
    for host in ("node-a", "node_b"):
        for suffix in (".xplane.pb", ".pftrace", ".cpu.pb.gz", ".json", ".summary.txt"):
            assert (a / (host + suffix)).stat().st_size > 0, host + suffix
    # XProf's server, on loopback, finds one session with two hosts, and
    # shows each host's steps.
    with xprof_server(tmp_path) as get:
        assert get("runs") == ["synth"]
        hosts = get("hosts?run=synth&tag=trace_viewer")
        assert sorted(h["hostname"] for h in hosts) == ["node-a", "node_b"]
        for host, steps in (("node-a", 5), ("node_b", 7)):
            trace = get(f"data?run=synth&tag=trace_viewer&host={host}")
            assert sum(e.get("name") == "step" for e in trace["traceEvents"]) == steps + 1
    # One host's part alone, by name; a session of two hosts needs --host for -o.
    r = run(CLI, "export", a, "--host", "node:b", "--format", "summary", "-o", tmp_path / "b.txt")
    assert "node:b" in open(tmp_path / "b.txt").read()
    assert r == f"wrote {tmp_path / 'b.txt'} ({(tmp_path / 'b.txt').stat().st_size / 1024:.1f} KiB)\n", r
    bad = subprocess.run([str(CLI), "export", str(a), "--format", "json", "-o",
                                        str(tmp_path / "x.json")], capture_output=True, text=True)
    assert bad.returncode == 2 and "--host" in bad.stderr


def test_corrupt_chunk_keeps_the_rest(session, tmp_path):
    """A damaged byte in the middle of the host chunks: the export goes on
    with the intact chunks and says how many were skipped."""
    damaged = tmp_path / "damaged"
    shutil.copytree(session, damaged)
    chunks = damaged / "synthhost.host.chunks"
    data = bytearray(chunks.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunks.write_bytes(bytes(data))
    out = run(CLI, "summary", damaged)
    assert "corrupt chunks skipped" in out
    doc = json.load(open(export(damaged, "json", tmp_path / "d.json")))
    assert doc["corrupt_chunks"] >= 1 and doc["trace_events"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_full_disk_fails_cleanly_and_keeps_the_session(tmp_path):
    """Exports into a file system that fills up: a clear error, no half
    file, no temporary file, the recorded chunks and manifest untouched."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mnt)], check=True)
    try:
        session = make_session(mnt, "--steps", 300)
        before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in session.iterdir()}
        r = subprocess.run([str(CLI), "export", str(session)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "No space left on device" in r.stderr and "free space" in r.stderr, r.stderr
        after = {p.name: p for p in session.iterdir()}
        assert not [n for n in after if ".tmp" in n], sorted(after)
        for name, digest in before.items():
            assert hashlib.sha256(after[name].read_bytes()).hexdigest() == digest, name
        # Whatever was written is whole: each export file parses.
        if "synthhost.json" in after:
            json.load(open(after["synthhost.json"]))
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
