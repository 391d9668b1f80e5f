"""ringprofd serving tensorflow.ProfilerService ([profiler_service]): the
real XProf client (xprof's _pywrap_profiler_plugin, the code behind
XProf's CAPTURE PROFILE) captures from the rings and XProf's converter
opens what it wrote; GetSnapshot and a Profile that reaches into the past
through grpcio; and peers that misbehave (garbage, a 2 GB length prefix,
silence, too many connections) leave the daemon serving."""

import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import sys
import time

import grpc
import pytest

from daemon_harness import Daemon, free_port

SERVICE = "/tensorflow.ProfilerService/"

# The producer: annotations from libringprof's Python package, each around
# a millisecond of Python work (which the CPU sampler sees), named by phase;
# it prints the wall time at which each phase begins.
PRODUCER = r"""
import sys, time, ringprof
for phase, seconds in zip(sys.argv[1::2], sys.argv[2::2]):
    print(phase, time.time_ns(), flush=True)
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        with ringprof.annotate(phase):
            t = time.monotonic() + 0.001
            while time.monotonic() < t:
                pass
print("done", time.time_ns(), flush=True)
"""


def config(port, extra=""):
    return f"""
[daemon]
poll_interval = 10ms
seal_interval = 100ms
[sampler]
enabled = {"true" if os.geteuid() == 0 else "false"}
frequency = 299
[profiler_service]
listen = 127.0.0.1:{port}
snapshot = 2s
request_timeout = 1s
{extra}"""


@pytest.fixture
def served(tmp_path):
    port = free_port()
    d = Daemon(tmp_path, config=config(port)).start()
    d.port = port
    yield d
    d.stop()


def producer(daemon, *phases):
    """Starts the producer with (name, seconds) phases; returns it."""
    args = [str(x) for p in phases for x in p]
    return subprocess.Popen([sys.executable, "-c", PRODUCER, *args], env=daemon.env(),
                            stdout=subprocess.PIPE, text=True)


def phase_start(proc):
    """The next phase line the producer prints: (name, wall ns)."""
    name, ns = proc.stdout.readline().split()
    return name, int(ns)


# --- protobuf, just enough of it -------------------------------------------

def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def field(num, value):
    """A protobuf field: an int as a varint, bytes as length-delimited."""
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    return varint(num << 3 | 2) + varint(len(value)) + value


def fields(buf):
    """[(number, value)] of a message (varint and length-delimited fields)."""
    out, i = [], 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        if key & 7 == 0:
            v, i = read_varint(buf, i)
        else:
            n, i = read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        out.append((key >> 3, v))
    return out


def read_varint(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def tool_data(response):
    """ProfileResponse.tool_data as {name: data}."""
    out = {}
    for num, v in fields(response):
        if num == 6:
            td = dict(fields(v))
            out[td[1].decode()] = td.get(2, b"")
    return out


def call(port, method, request=b"", timeout=60):
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[
            ("grpc.max_receive_message_length", 1 << 30)]) as ch:
        return ch.unary_unary(SERVICE + method)(request, timeout=timeout)


# --- XProf's converter ----------------------------------------------------

def trace_viewer(xplane, tmp_path):
    """XProf's trace viewer events for an XSpace file (converted in a
    directory of its own: XProf writes its caches next to the file)."""
    from xprof.convert import raw_to_tool_data
    d = tmp_path / "convert" / "plugins" / "profile" / "run"
    d.mkdir(parents=True)
    shutil.copy(xplane, d / "host.xplane.pb")
    data, _ = raw_to_tool_data.xspace_to_tool_data(
        [str(d / "host.xplane.pb")], "trace_viewer",
        {"use_saved_result": False, "trace_viewer_options": {}})
    assert data is not None, f"XProf could not convert {xplane}"
    doc = json.loads(data.decode() if isinstance(data, bytes) else data)
    return [e for e in doc["traceEvents"] if e]


def names(events):
    return {e.get("name") for e in events if e.get("ph") == "X"}


def sample_threads(events):
    """tids of the lines of CPU samples, with the events on them."""
    tids = {(e["pid"], e["tid"]) for e in events if e.get("name") == "thread_name" and
            "CPU samples" in e["args"]["name"]}
    return [e for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in tids]


def sampler_running(daemon):
    st = daemon.ok("GET", "/v1/status")
    return any(c["name"] == "cpu_sampler" and c.get("state") == "running"
               for c in st.get("collectors", []))


# --- the real XProf client ------------------------------------------------

def test_xprof_trace_captures_annotations_and_samples(served, tmp_path):
    from xprof.convert import _pywrap_profiler_plugin
    p = producer(served, ("xprof.step", 8))
    try:
        phase_start(p)
        time.sleep(0.5)
        logdir = tmp_path / "tb"
        _pywrap_profiler_plugin.trace(f"127.0.0.1:{served.port}", str(logdir), "", True, 2000, 1,
                                      {"host_tracer_level": 2, "device_tracer_level": 1,
                                       "python_tracer_level": 0})
    finally:
        p.kill()
        p.wait()
    (xplane,) = (logdir / "plugins" / "profile").glob(f"*/127.0.0.1_{served.port}.xplane.pb")
    events = trace_viewer(xplane, tmp_path)
    steps = [e for e in events if e.get("name") == "xprof.step" and e.get("ph") == "X"]
    # About 2 s of ~1 ms annotations; the loaded machine may run fewer.
    assert len(steps) > 100, names(events)
    span_us = max(e["ts"] + e["dur"] for e in steps) - min(e["ts"] for e in steps)
    assert span_us <= 2000 * 1000 + 5000, span_us
    if sampler_running(served):
        assert sample_threads(events), "no CPU samples in the captured window"
    else:
        assert os.geteuid() != 0, "the CPU sampler runs as root"
    # The capture is a session of the daemon's too, kept in its log directory.
    kept = [s for s in served.ok("GET", "/v1/sessions")["sessions"]
            if s.get("trigger", {}).get("source") == "xprof"]
    assert len(kept) == 1, kept
    assert kept[0]["trigger"]["reason"].startswith("Profile from 127.0.0.1:")
    log = open(served.log).read()
    assert "WARNING" not in log


def test_profile_reaches_into_the_past(served, tmp_path):
    """A start 3 s back returns that past window, at once."""
    p = producer(served, ("phase.a", 3), ("phase.b", 3))
    try:
        phase_start(p)
        _, b_start = phase_start(p)
        time.sleep(1)
        now = time.time_ns()
        start = now - 3 * 10**9
        assert start < b_start - 10**9  # the window [start, start + 1 s] lies in phase.a
        opts = field(8, start) + field(9, 1000)  # start_timestamp_ns, duration_ms
        req = field(1, 1000) + field(4, opts) + field(9, 1)  # duration_ms, opts, emit_xspace
        resp = call(served.port, "Profile", req)
    finally:
        p.kill()
        p.wait()
    td = tool_data(resp)
    assert set(td) == {"xplane.pb"}
    assert dict(fields(resp)).get(8) == td["xplane.pb"]  # emit_xspace: inline too
    xplane = tmp_path / "past.xplane.pb"
    xplane.write_bytes(td["xplane.pb"])
    got = names(trace_viewer(xplane, tmp_path))
    assert "phase.a" in got and "phase.b" not in got, got


def test_each_capture_writes_its_xspace_once(served):
    """The XSpace a capture answers with is its session's xplane export,
    written once: when the answer arrives the session's manifest already
    records it (with the bytes served), and the exporter, which writes the
    session's other formats, leaves that file alone."""
    now = time.time_ns()
    for back_s in (3, 2, 1):  # past windows: answered at once
        opts = field(8, now - back_s * 10**9) + field(9, 500)
        before = {s["path"] for s in served.ok("GET", "/v1/sessions")["sessions"]}
        served_bytes = tool_data(call(served.port, "Profile", field(1, 500) + field(4, opts)))
        (path,) = {s["path"] for s in served.ok("GET", "/v1/sessions")["sessions"]} - before
        (manifest,) = pathlib.Path(path).glob("*.manifest.json")
        state = json.loads(manifest.read_text())["exports"]["xplane"]
        assert state == {"state": "written", "bytes": len(served_bytes["xplane.pb"])}, state
        (xplane,) = pathlib.Path(path).glob("*.xplane.pb")
        first = os.stat(xplane)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
                e["state"] == "pending"
                for e in json.loads(manifest.read_text())["exports"].values()):
            time.sleep(0.1)
        exports = json.loads(manifest.read_text())["exports"]
        assert all(e["state"] == "written" for e in exports.values()), exports
        assert set(exports) == {"xplane", "perfetto", "pprof", "json", "summary"}, exports
        again = os.stat(xplane)
        assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns), path


def test_get_snapshot_returns_the_recent_past(served, tmp_path):
    """[profiler_service] snapshot = 2s: a marker 4 s old is out, the
    current phase in; the continuous-profiling calls are accepted."""
    assert call(served.port, "StartContinuousProfiling", field(1, 1000)) == b""
    p = producer(served, ("marker.old", 0.2), ("gap", 0), ("phase.now", 6))
    try:
        phase_start(p)
        phase_start(p)
        phase_start(p)
        time.sleep(4)
        resp = call(served.port, "GetSnapshot", field(1, b"session"))
    finally:
        p.kill()
        p.wait()
    xplane = tmp_path / "snap.xplane.pb"
    xplane.write_bytes(tool_data(resp)["xplane.pb"])
    got = names(trace_viewer(xplane, tmp_path))
    assert "phase.now" in got and "marker.old" not in got, got
    assert call(served.port, "StopContinuousProfiling") == b""
    assert call(served.port, "Terminate", field(1, b"session")) == b""


def test_xprof_get_snapshot_writes_a_session(served, tmp_path):
    from xprof.convert import _pywrap_profiler_plugin
    p = producer(served, ("snap.step", 4))
    try:
        phase_start(p)
        time.sleep(1)
        _pywrap_profiler_plugin.get_snapshot(f"127.0.0.1:{served.port}", str(tmp_path / "tb"))
    finally:
        p.kill()
        p.wait()
    (xplane,) = (tmp_path / "tb").rglob("*.xplane.pb")
    assert "snap.step" in names(trace_viewer(xplane, tmp_path))


def test_unimplemented_and_bad_requests(served):
    for method in ("Monitor", "NoSuchMethod"):
        with pytest.raises(grpc.RpcError) as e:
            call(served.port, method)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as e:
        call(served.port, "Profile", b"\xff\xff\xff")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        call(served.port, "Profile", field(1, 0))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "duration_ms" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:  # over the 64 KiB request cap
        call(served.port, "Profile", field(5, b"x" * 100000))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert served.ok("GET", "/v1/status")


# --- peers that misbehave -------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    """A header as a literal without indexing (no Huffman): short strings only."""
    name, value = name.encode(), value.encode()
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def grpc_headers(method):
    return b"".join(hpack_literal(n, v) for n, v in [
        (":method", "POST"), (":scheme", "http"), (":path", SERVICE + method),
        (":authority", "ringprof"), ("content-type", "application/grpc"), ("te", "trailers")])


def read_until_closed(sock, timeout=30):
    """Reads until the peer closes; returns what came, or None on timeout."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except socket.timeout:
        return None
    except ConnectionResetError:
        pass
    return data


def wait_for_log(daemon, text, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in open(daemon.log).read():
            return True
        time.sleep(0.1)
    return False


def healthy(daemon):
    """The control API answers and the service takes a call."""
    assert daemon.alive()
    assert daemon.ok("GET", "/v1/status")
    assert call(daemon.port, "StopContinuousProfiling") == b""


def test_garbage_is_closed_and_logged(served):
    with socket.create_connection(("127.0.0.1", served.port)) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(4096))
        assert read_until_closed(s) is not None
    assert wait_for_log(served, "not HTTP/2 gRPC")
    healthy(served)


def test_two_gigabyte_length_prefix_is_refused_unread(served):
    with socket.create_connection(("127.0.0.1", served.port)) as s:
        s.sendall(PREFACE + h2_frame(4, 0, 0, b"") +
                  h2_frame(1, 0x4, 1, grpc_headers("Profile")) +
                  h2_frame(0, 0, 1, b"\x00\x80\x00\x00\x00" + b"x" * 1000))
        assert wait_for_log(served, "the request announces 2147483648 bytes, more than the cap of 65536")
    healthy(served)


def test_silent_client_is_closed_at_the_deadline(served):
    with socket.create_connection(("127.0.0.1", served.port)) as s:
        # request_timeout = 1s: the daemon's SETTINGS, then the close.
        assert read_until_closed(s, timeout=30) is not None
    assert wait_for_log(served, "no complete request within 1000 ms")
    healthy(served)


def test_too_many_connections_are_refused(served):
    socks = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(24)]
    try:
        assert wait_for_log(served, "refused, 16 connections are open")
    finally:
        for s in socks:
            s.close()
    healthy(served)


def test_clients_that_leave_mid_window_cancel_it(served):
    """Clients that give up on minute-long windows: each window is
    cancelled (else the 4 workers would stay busy for a minute), and a
    short Profile is then served."""
    with grpc.insecure_channel(f"127.0.0.1:{served.port}") as ch:
        for _ in range(6):
            with pytest.raises(grpc.RpcError) as e:
                ch.unary_unary(SERVICE + "Profile")(field(1, 60000), timeout=0.3)
            assert e.value.code() in (grpc.StatusCode.DEADLINE_EXCEEDED,
                                      grpc.StatusCode.RESOURCE_EXHAUSTED)
    deadline = time.monotonic() + 20
    while True:
        try:
            assert "xplane.pb" in tool_data(call(served.port, "Profile", field(1, 100)))
            break
        except grpc.RpcError as e:  # a cancelled worker not yet gone
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert time.monotonic() < deadline, "the abandoned windows were not cancelled"
            time.sleep(0.2)
    healthy(served)


# --- start-up ---------------------------------------------------------------

def test_non_loopback_listen_is_refused_without_the_key(tmp_path):
    port = free_port()
    d = Daemon(tmp_path, config=config(port).replace("127.0.0.1", "0.0.0.0"))
    with pytest.raises(RuntimeError) as e:
        d.start()
    assert "allow_unauthenticated" in str(e.value) and "loopback" in str(e.value)


def test_allow_unauthenticated_warns(tmp_path):
    port = free_port()
    d = Daemon(tmp_path, config=config(port, "allow_unauthenticated = true").replace(
        "127.0.0.1", "0.0.0.0")).start()
    try:
        d.port = port
        assert "WARNING" in open(d.log).read()
        healthy(d)
    finally:
        d.stop()


def test_print_config_shows_the_section(tmp_path):
    port = free_port()
    d = Daemon(tmp_path, config=config(port))
    out = subprocess.run([*d.args, "--print-config"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    section = out.stdout.split("[profiler_service]\n", 1)[1].split("\n\n", 1)[0]
    assert section.splitlines() == [f"listen = 127.0.0.1:{port}", "allow_unauthenticated = false",
                                    "snapshot = 2s", "request_timeout = 1s"]
