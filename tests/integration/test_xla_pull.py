"""Pulling XLA events from a workload's profiler server (collectors/xla).

The peer is real: CPU JAX from PyPI running a jitted training loop with
jax.profiler.start_server (xla_train.py), pulled with ringprof-xla-probe,
the driver of the decoder and gRPC client the daemon's XLA collector
builds on.  Misbehaving servers are grpcio servers written here, and, for
what grpcio cannot be made to send (a lying length prefix, a stream cut
short, not HTTP/2 at all), a raw socket speaking just enough HTTP/2."""

import collections
import json
import os
import pathlib
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import pytest

from daemon_harness import BUILD, SANITIZED
from xplane_py import xplane_pb2

PROBE = os.path.join(BUILD, "collectors", "xla", "ringprof-xla-probe")
WORKLOAD = pathlib.Path(__file__).with_name("xla_train.py")
PROFILE = "/tensorflow.ProfilerService/Profile"
MONO = time.CLOCK_MONOTONIC


def workload_env():
    """The JAX workload is a peer, not our code: it runs without the ASan
    runtime the sanitized pass preloads (jaxlib's C++ exceptions trip
    ASan's __cxa_throw interceptor in a Python not linked with libstdc++)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(*args, timeout=120):
    """Runs the probe; returns (exit status, parsed JSON or None, stderr)."""
    out = subprocess.run([PROBE, *map(str, args), "--json"], capture_output=True, text=True,
                         timeout=timeout)
    return out.returncode, json.loads(out.stdout) if out.returncode == 0 else None, out.stderr


@pytest.fixture(scope="module")
def jax_server(tmp_path_factory):
    """A JAX training loop serving its profiler on a free loopback port."""
    try:
        import jax  # noqa: F401  (the workload imports it; fail here, clearly)
    except ImportError:
        pytest.fail("CPU JAX is missing: scripts/install-deps.sh installs the pinned jax/jaxlib")
    port = free_port()
    log = tmp_path_factory.mktemp("xla") / "steps.log"
    proc = subprocess.Popen([sys.executable, str(WORKLOAD), str(port), "300", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=workload_env())
    try:
        assert proc.stdout.readline().strip() == "ready", "the JAX workload did not start"
        yield f"127.0.0.1:{port}", log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def step_brackets(log):
    """step_num -> (before, after): the workload's own CLOCK_MONOTONIC reads
    just outside that step's TraceAnnotation."""
    out = {}
    for line in log.read_text().splitlines():
        _, n, before, after = line.split()
        out[int(n)] = (int(before), int(after))
    return out


def test_profile_window_has_xla_ops_and_steps_in_host_time(jax_server):
    addr, log = jax_server
    t0 = time.clock_gettime_ns(MONO)
    rc, j, err = probe(addr, "--duration-ms", 1000, "--steps")
    t1 = time.clock_gettime_ns(MONO)
    assert rc == 0, err
    # XLA ops of the jitted step, with their HLO identity.
    assert j["hlo_events"] > 0
    assert j["stats"]["hlo_op"] == j["hlo_events"]
    assert j["stats"]["program_id"] >= j["hlo_events"]
    assert {op["hlo_module"] for op in j["top_ops"]} == {"jit_train_step"}
    assert "/host:CPU" in j["planes"]
    # The StepTraceAnnotations, one per step, in order.
    steps = j["steps"]
    assert steps["names"] == {"train": steps["count"]} and steps["count"] > 10
    assert steps["last"] - steps["first"] + 1 >= steps["count"] - 1
    # Host clock: every event within the test's window, and each step the
    # workload bracketed with its own monotonic clock lies inside that
    # bracket (the server stamps CLOCK_REALTIME; the decoder maps it).
    assert t0 <= j["min_start_ns"] and j["max_end_ns"] <= t1
    brackets = step_brackets(log)
    checked = 0
    for num, start, duration in j["step_events"]:
        if num in brackets:
            before, after = brackets[num]
            assert before <= start and start + duration <= after, (num, start, before, after)
            checked += 1
    assert checked > 0, "no bracketed step in the window"


def test_decoder_agrees_with_python_protobuf_on_a_jax_trace(tmp_path):
    """jax.profiler.trace's own XSpace file, decoded by the probe and by
    Python's protobuf: the same events per plane, XLA ops and steps."""
    trace = tmp_path / "trace"
    subprocess.run([sys.executable, str(WORKLOAD), "0", "1", str(tmp_path / "steps"),
                    str(trace)], check=True, capture_output=True, timeout=300,
                   env=workload_env())
    (path,) = trace.glob("plugins/profile/*/*.xplane.pb")
    rc, j, err = probe("--decode", path)
    assert rc == 0, err
    xs = xplane_pb2(tmp_path).XSpace.FromString(path.read_bytes())
    planes, hlo, steps = {}, 0, 0
    for p in xs.planes:
        names = {k: m.name for k, m in p.stat_metadata.items()}
        for line in p.lines:
            for e in line.events:
                if e.WhichOneof("data") == "num_occurrences":
                    continue
                planes[p.name] = planes.get(p.name, 0) + 1
                stats = {names.get(s.metadata_id) for s in e.stats}
                stats |= {names.get(s.metadata_id) for s in p.event_metadata[e.metadata_id].stats}
                hlo += {"hlo_op", "hlo_module"} <= stats
                steps += "step_num" in stats
    assert j["planes"] == planes and j["hlo_events"] == hlo and j["steps"]["count"] == steps
    assert hlo > 0 and steps > 0


def test_host_level_zero_leaves_annotations_only_from_device_tracer(jax_server):
    """The levels travel: at host level 0 the server records no host events
    (TraceMe, annotations and XLA ops on CPU are all host events)."""
    addr, _ = jax_server
    rc, j, err = probe(addr, "--duration-ms", 300, "--host-level", 0)
    assert rc == 0, err
    assert j["steps"]["count"] == 0 and j["hlo_events"] == 0


def test_continuous_profiling_snapshot(jax_server):
    """The stock JAX server implements StartContinuousProfiling and
    GetSnapshot: the snapshot holds what ran since the start."""
    addr, _ = jax_server
    rc, j, err = probe(addr, "--duration-ms", 500, "--continuous")
    assert rc == 0, err
    assert j["hlo_events"] > 0 and j["steps"]["count"] > 0


def test_consecutive_snapshots_follow_each_other(jax_server):
    """Two snapshots of one continuous session: each holds XLA ops and
    steps, the second's after the first's (the gap between them is what
    the server spends collecting: measured in docs/xla.md)."""
    addr, _ = jax_server
    rc, j, err = probe(addr, "--duration-ms", 500, "--continuous", "--windows", 2)
    assert rc == 0, err
    first, second = j["windows"]
    assert first["events"] > 0 and second["events"] > 0
    assert second["min_start_ns"] > first["min_start_ns"]
    assert second["max_end_ns"] > first["max_end_ns"]


def test_connection_refused():
    rc, _, err = probe(f"127.0.0.1:{free_port()}", "--duration-ms", 100)
    assert rc == 1 and "refused" in err and "start_server" in err


def test_bad_address():
    rc, _, err = probe("no-port-here", "--duration-ms", 100)
    assert rc == 1 and "HOST:PORT" in err


# --- misbehaving servers ---------------------------------------------------

def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


class Fake(grpc.GenericRpcHandler):
    """A ProfilerService whose Profile does `behaviour(request, context)`;
    every other method is UNIMPLEMENTED (grpcio's answer for None)."""

    def __init__(self, behaviour):
        self.behaviour = behaviour

    def service(self, details):
        if details.method != PROFILE:
            return None
        return grpc.unary_unary_rpc_method_handler(self.behaviour)


@pytest.fixture
def fake_server():
    servers = []

    def start(behaviour):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                             handlers=[Fake(behaviour)])
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for s in servers:
        s.stop(grace=None)


def test_hanging_server_meets_the_deadline(fake_server):
    release = threading.Event()

    def hang(request, context):
        release.wait(60)
        return b""

    addr = fake_server(hang)
    started = time.monotonic()
    rc, _, err = probe(addr, "--duration-ms", 100, "--timeout-ms", 1500)
    elapsed = time.monotonic() - started
    release.set()
    assert rc == 1 and ("deadline" in err or "DEADLINE_EXCEEDED" in err), err
    # Far from the server's 60 s: the probe's own deadline ended it.
    assert elapsed < 30


def test_silent_peer_meets_the_deadline():
    """A peer that takes the connection and never says a word (the kernel
    accepts it; nobody reads): the probe's own deadline ends the call, not
    a server-side one as with grpcio above."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        addr = "127.0.0.1:%d" % sock.getsockname()[1]
        rc, _, err = probe(addr, "--duration-ms", 100, "--timeout-ms", 1000, timeout=30)
    assert rc == 1 and "did not answer within the deadline" in err, err


def test_error_status_is_quoted(fake_server):
    def busy(request, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                      "another profiling session is active (100% busy, réessayez)")

    rc, _, err = probe(fake_server(busy), "--duration-ms", 100)
    # grpc-message travels percent-encoded ('%' and non-ASCII bytes).
    assert rc == 1 and "FAILED_PRECONDITION" in err
    assert "another profiling session is active (100% busy, réessayez)" in err


def test_unimplemented_continuous_profiling(fake_server):
    rc, _, err = probe(fake_server(lambda r, c: b""), "--duration-ms", 100, "--continuous")
    assert rc == 1 and "UNIMPLEMENTED" in err


def test_garbage_response(fake_server):
    rc, _, err = probe(fake_server(lambda r, c: b"\xff\xff\xff not protobuf"),
                       "--duration-ms", 100)
    assert rc == 1 and "not a ProfileResponse" in err


def test_garbage_xspace(fake_server):
    junk = b"\x0a\x64\x12\x00"  # a plane that announces 100 bytes and has 2
    response = b"\x42" + varint(len(junk)) + junk  # ProfileResponse.xspace = 8
    rc, _, err = probe(fake_server(lambda r, c: response), "--duration-ms", 100)
    assert rc == 1 and "not a serialized XSpace" in err


def test_oversized_response_is_refused(fake_server):
    xspace = b"\x22" + varint(70000) + b"w" * 70000  # XSpace.hostnames = 4
    response = b"\x42" + varint(len(xspace)) + xspace
    rc, _, err = probe(fake_server(lambda r, c: response), "--duration-ms", 100,
                       "--max-bytes", 65536)
    assert rc == 1 and "more than the cap" in err


def test_recorded_window_inline_or_as_tool_data(fake_server):
    """A recorded JAX window (the fuzz seed), served inline (xspace, field
    8) and as tool_data "xplane.pb" (field 6, as servers without
    emit_xspace answer): the same events either way."""
    root = pathlib.Path(__file__).resolve().parents[2]
    xspace = (root / "tests" / "fuzz" / "corpus" / "xspace" / "jax-cpu-window").read_bytes()[1:]
    name = b"\x0a" + varint(9) + b"xplane.pb"
    tool = name + b"\x12" + varint(len(xspace)) + xspace
    answers = {
        "inline": b"\x42" + varint(len(xspace)) + xspace,
        "tool_data": b"\x32" + varint(len(tool)) + tool,
    }
    summaries = {}
    for how, response in answers.items():
        rc, j, err = probe(fake_server(lambda r, c, response=response: response),
                           "--duration-ms", 100)
        assert rc == 0, err
        summaries[how] = (j["events"], j["hlo_events"], j["steps"]["count"], j["top_ops"])
    assert summaries["inline"] == summaries["tool_data"]
    assert summaries["inline"][1] > 0 and summaries["inline"][2] > 0


def test_request_carries_the_options(fake_server):
    """What the server receives: duration, levels and emit_xspace, decoded
    with the upstream field numbers (ProfileRequest 1, 4, 9; ProfileOptions
    2, 3, 4, 5)."""
    seen = []

    def record(request, context):
        seen.append(request)
        return b"\x38\x01"  # empty_trace = true

    rc, j, err = probe(fake_server(record), "--duration-ms", 250, "--host-level", 2,
                       "--python-level", 1)
    assert rc == 0 and j["empty_trace"] and j["events"] == 0, err
    req = seen[0]
    assert req.startswith(b"\x08" + varint(250))  # duration_ms
    assert b"\x48\x01" in req  # emit_xspace
    opts_at = req.index(b"\x22") + 2  # opts (field 4), short enough for 1 length byte
    opts = req[opts_at:opts_at + req[opts_at - 1]]
    assert b"\x10\x02" in opts and b"\x18\x01" in opts and b"\x20\x01" in opts
    assert b"\x28\x01" in opts  # version 1


class RawH2:
    """A TCP server that answers the first request on a connection with
    fixed HTTP/2 frames: server SETTINGS, a 200 application/grpc HEADERS,
    then `body` as DATA on stream 1; then it closes the connection."""

    def __init__(self, body, preface=None):
        self.body, self.preface = body, preface
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    @staticmethod
    def frame(kind, flags, stream, payload):
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
            struct.pack(">I", stream) + payload

    def serve(self):
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(5)
            got = b""
            while len(got) < 24 + 9:  # the client preface and a frame
                chunk = conn.recv(65536)
                if not chunk:
                    return
                got += chunk
            # :status 200 (static index 8), content-type (index 31) literal.
            headers = b"\x88\x0f\x10\x10application/grpc"
            conn.sendall(self.preface if self.preface is not None else
                         self.frame(4, 0, 0, b"") + self.frame(4, 1, 0, b"") +
                         self.frame(1, 4, 1, headers) + self.frame(0, 0, 1, self.body))
            # Closing with the client's bytes unread sends a reset, which can
            # overtake what was sent: let the client read first.
            time.sleep(0.5)

    def close(self):
        self.sock.close()


def test_huge_length_prefix_is_refused_without_buffering():
    server = RawH2(b"\x00\x7f\xff\xff\xff" + b"x" * 100)  # 2 GiB - 1 announced
    try:
        rc, _, err = probe(server.addr, "--duration-ms", 100)
    finally:
        server.close()
    assert rc == 1 and "announces 2147483647 bytes" in err and "more than the cap" in err


def test_stream_closed_mid_message():
    server = RawH2(b"\x00\x00\x00\x03\xe8" + b"x" * 10)  # 1000 announced, 10 sent
    try:
        rc, _, err = probe(server.addr, "--duration-ms", 100)
    finally:
        server.close()
    assert rc == 1 and "closed the connection mid-response" in err


def test_not_http2():
    server = RawH2(b"", preface=b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    try:
        rc, _, err = probe(server.addr, "--duration-ms", 100)
    finally:
        server.close()
    assert rc == 1 and "does not speak HTTP/2" in err


# ---- the daemon's XLA collector ([xla] endpoints) ---------------------------

DAEMON_CONFIG = """
[daemon]
seal_interval = 100ms
host_name = xlahost
[sampler]
enabled = false
[sessions]
exports = all
[xla]
endpoints = {endpoints}
window = 1s
# Every window: the tests count events over spans the duty cycle would
# leave out (test_overhead_budget_pauses_between_windows covers it).
overhead_budget = 0
"""


def xla_collector(d):
    return next(c for c in d.ok("GET", "/v1/status")["collectors"] if c["name"] == "xla")


def wait_session_files(path, suffixes, timeout=120):
    files = [os.path.join(path, "xlahost" + s) for s in suffixes]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(os.path.exists(f) for f in files):
        time.sleep(0.2)
    return files


def xla_snapshot(d, name, suffixes):
    """A snapshot of the last 5 s that holds jit_train_step's ops and the
    steps: (its files, the JSON's xla_op events, those of jit_train_step,
    the steps).  The events of a window reach the ring seconds after they
    happened (the server serializes, the daemon decodes; longer on a
    loaded machine or under ASan), so a snapshot taken too early holds only
    part of one: take another, a few times."""
    for attempt in range(6):
        r = d.cli("snapshot", "--last", "5s", "--name", f"{name}{attempt}", "--json", check=True)
        files = wait_session_files(json.loads(r.stdout)["path"], [".json", *suffixes])
        doc = json.load(open(files[0]))
        ops = [e for e in doc["trace_events"] if e["type"] == "xla_op"]
        hlo = [e for e in ops if e["args"].get("hlo_module", "").startswith("jit_train_step")]
        steps = [e for e in ops if e["name"] == "train"]
        if len(hlo) > 100 and len(steps) > 10:
            break
        time.sleep(2)
    assert len(hlo) > 100 and len(steps) > 10, (len(ops), len(hlo), len(steps),
                                                xla_collector(d), open(d.log).read()[-3000:])
    return files, ops, hlo, steps


def test_daemon_pulls_xla_ops_into_a_snapshot(jax_server, tmp_path):
    """The collector pulls the live JAX loop: a snapshot of the last 5 s
    holds jit_train_step's XLA ops with hlo_op/hlo_module and the steps,
    on the workload's threads, and every export carries them."""
    from daemon_harness import Daemon  # noqa: PLC0415
    addr, _ = jax_server
    d = Daemon(tmp_path, config=DAEMON_CONFIG.format(endpoints=addr)).start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and xla_collector(d).get("windows", 0) < 2:
            time.sleep(0.5)
        col = xla_collector(d)
        assert col["state"] == "running" and col["windows"] >= 2, (col, open(d.log).read())
        assert col["events"] > 1000 and col["endpoints"] == 1, col
        assert f"{addr} (pid 0): continuous" in col["detail"], col
        (_, xspace, pftrace, summary), ops, hlo, steps = xla_snapshot(
            d, "xla", [".xplane.pb", ".pftrace", ".summary.txt"])
        assert all(e["args"].get("hlo_op") for e in hlo[:50]), hlo[:3]
        assert all(e["duration"] >= 0 for e in ops)
        assert "XLA op (device: name)" in open(summary).read()

        # Against jax.profiler.trace of the same loop in another process (one
        # process cannot serve both): jit_train_step's ops per step, by op,
        # within 5%.
        ref_dir = tmp_path / "reference"
        subprocess.run([sys.executable, str(WORKLOAD), "0", "3", str(tmp_path / "ref.log"),
                        str(ref_dir)], check=True, timeout=300, env=workload_env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (ref_file,) = ref_dir.glob("plugins/profile/*/*.xplane.pb")
        rc, ref, err = probe("--decode", ref_file, "--top", 50)
        assert rc == 0, err
        ref_per_step = {o["name"]: o["count"] / ref["steps"]["count"] for o in ref["top_ops"]
                        if o["hlo_module"] == "jit_train_step"}
        ours = collections.Counter(e["args"]["hlo_op"] for e in hlo)
        assert set(ours) == set(ref_per_step), (ours, ref_per_step)
        for name, per_step in ref_per_step.items():
            assert abs(ours[name] / len(steps) - per_step) <= 0.05 * per_step, (name, ours,
                                                                              len(steps), ref)

        # XProf's converter shows them on the host plane with their stats.
        from xprof.convert import raw_to_tool_data  # noqa: PLC0415
        xdir = tmp_path / "xprof" / "plugins" / "profile" / "xla"
        xdir.mkdir(parents=True)
        shutil.copy(xspace, xdir)
        data, _ = raw_to_tool_data.xspace_to_tool_data(
            [str(xdir / os.path.basename(xspace))], "trace_viewer", {"use_saved_result": False})
        trace = json.loads(data.decode() if isinstance(data, bytes) else data)
        events = [e for e in trace["traceEvents"] if e]
        with_hlo = [e for e in events if e.get("args", {}).get("hlo_module", "")
                    .startswith("jit_train_step") and e.get("args", {}).get("hlo_op")]
        assert len(with_hlo) > 100, [e for e in events if e.get("ph") == "X"][:5]
        assert len([e for e in events if e.get("name") == "train"]) > 10

        # Perfetto: slices with the stats as args.
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace  # noqa: PLC0415
        t = Trace()
        t.ParseFromString(open(pftrace, "rb").read())
        names = {n.iid: n.name for p in t.packet if p.HasField("interned_data")
                 for n in p.interned_data.debug_annotation_names}
        args = [names.get(a.name_iid) for p in t.packet if p.HasField("track_event")
                for a in p.track_event.debug_annotations]
        assert "hlo_op" in args and "hlo_module" in args
        assert d.alive()
    finally:
        d.stop()


def test_overhead_budget_pauses_between_windows(jax_server, tmp_path):
    """At the defaults ([xla] overhead_budget = 3%, event_cost = 1us) the
    tiny-op loop's events would cost it far more than 3% of its time: the
    collector pauses after each window so that it records only a share of
    the time, and status says how much and why.  With a cost per event
    that keeps it under the budget, it records all the time."""
    from daemon_harness import Daemon  # noqa: PLC0415
    addr, _ = jax_server
    base = DAEMON_CONFIG.format(endpoints=addr).replace("window = 1s", "window = 200ms")
    for name, xla_conf in (("defaults", ""), ("cheap", "event_cost = 1ns\n")):
        conf = base.replace("overhead_budget = 0\n", xla_conf)
        (tmp_path / name).mkdir()
        d = Daemon(tmp_path / name, config=conf).start()
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and xla_collector(d).get("windows", 0) < 2:
                time.sleep(0.2)
            col = xla_collector(d)
            assert col["windows"] >= 2 and col["events"] > 1000, (col, open(d.log).read())
            if name == "cheap":
                assert col["recorded_pct"] == 100 and "recording" not in col["detail"], col
                continue
            assert 0 < col["recorded_pct"] < 50, col
            m = re.search(r"recording (\d+)% of the time \(a pause of ([\d.]+) s after each "
                          r"window: its events would cost about (\d+)% of its time, over \[xla\] "
                          r"overhead_budget = 3%\)", col["detail"])
            assert m and int(m[3]) > 3, col["detail"]
            # The windows lie that far apart.
            assert col["gap_ms"] >= 0.5 * float(m[2]) * 1000, col
        finally:
            d.stop()


def test_daemon_survives_dead_and_hanging_endpoints(tmp_path):
    """A port nobody listens on and a server that never answers: the
    daemon stays healthy, backs off, and status says what happened."""
    from daemon_harness import Daemon  # noqa: PLC0415
    dead = f"127.0.0.1:{free_port()}"
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(8)  # accepts (the kernel does) and never speaks
    hanging = f"127.0.0.1:{hang.getsockname()[1]}"
    config = DAEMON_CONFIG.format(endpoints=f"{dead},{hanging}").replace("window = 1s",
                                                                          "window = 100ms")
    d = Daemon(tmp_path, config=config).start()
    try:
        deadline = time.monotonic() + 60
        col = xla_collector(d)
        while time.monotonic() < deadline and not (
                "refused" in col.get("detail", "") and col["detail"].count("backing off") == 2):
            time.sleep(0.5)
            col = xla_collector(d)
        assert col["state"] == "running" and col["endpoints"] == 2, col
        assert col["backing_off"] == 2, col
        assert f"{dead} (pid 0): backing off" in col["detail"], col
        assert "jax.profiler.start_server" in col["detail"], col  # the refused one's fix
        assert f"{hanging} (pid 0): backing off" in col["detail"], col
        status = d.cli("status", check=True)
        assert "xla: running" in status.stdout, status.stdout
        assert f"{dead} (pid 0): backing off" in status.stdout, status.stdout
        r = d.cli("snapshot", "--last", "2s", "--name", "alive", "--json", check=True)
        assert json.loads(r.stdout)["path"]
        assert d.alive()
    finally:
        d.stop()
        hang.close()


@pytest.mark.skipif(SANITIZED, reason="the workload imports jaxlib, which cannot run with the ASan "
                    "runtime preloaded, and the ringprof package of the sanitized pass needs it: "
                    "checked in the normal pass")
def test_attach_registers_the_workload(tmp_path):
    """ringprof.xla.attach() in the workload: with no [xla] endpoints the
    daemon pulls from it, stamps its events with the workload's pid, and
    forgets it when the process exits."""
    from daemon_harness import Daemon  # noqa: PLC0415
    d = Daemon(tmp_path, config=DAEMON_CONFIG.format(endpoints="")).start()
    proc = None
    try:
        col = xla_collector(d)
        assert col["state"] == "running" and col["endpoints"] == 0, col
        assert "ringprof.xla.attach()" in col["detail"], col
        # A registration must name a live process.
        status, body = d.request("POST", "/v1/xla/endpoints",
                                 {"address": "127.0.0.1:9", "pid": 2 ** 31 - 1})
        assert status == 400 and "does not exist" in body["error"]["message"], body

        env = dict(d.env())
        env.pop("LD_PRELOAD", None)  # as workload_env(): JAX is not our code
        proc = subprocess.Popen([sys.executable, str(WORKLOAD), "attach", "300"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and xla_collector(d).get("windows", 0) < 2:
            time.sleep(0.5)
        col = xla_collector(d)
        assert col["endpoints"] == 1 and col["windows"] >= 2, (col, open(d.log).read())
        assert f"(pid {proc.pid}): continuous" in col["detail"], col
        assert os.path.exists(os.path.join(d.state_dir, "xla-endpoints", str(proc.pid)))

        _, ops, hlo, steps = xla_snapshot(d, "attached", [])
        assert {e["process_id"] for e in ops} == {proc.pid}

        proc.terminate()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and xla_collector(d)["endpoints"]:
            time.sleep(0.5)
        assert xla_collector(d)["endpoints"] == 0, xla_collector(d)
        assert not os.path.exists(os.path.join(d.state_dir, "xla-endpoints", str(proc.pid)))
        assert d.alive()
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        d.stop()


def test_detach_route(tmp_path):
    """POST /v1/xla/endpoints/PID/detach for a process that registered
    nothing, a registration whose server is gone, and no process."""
    from daemon_harness import Daemon  # noqa: PLC0415
    d = Daemon(tmp_path, config=DAEMON_CONFIG.format(endpoints="")).start()
    try:
        assert d.ok("POST", f"/v1/xla/endpoints/{os.getpid()}/detach") == {
            "pid": os.getpid(), "detached": []}
        # Registered (this process, a port nobody serves): backing off, then
        # forgotten by the detach, registration file and all.
        d.ok("POST", "/v1/xla/endpoints", {"address": f"127.0.0.1:{free_port()}",
                                            "pid": os.getpid()})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not xla_collector(d)["endpoints"]:
            time.sleep(0.2)
        assert xla_collector(d)["endpoints"] == 1, xla_collector(d)
        assert d.ok("POST", f"/v1/xla/endpoints/{os.getpid()}/detach") == {
            "pid": os.getpid(), "detached": ["xla"]}
        deadline = time.monotonic() + 10  # status is refreshed once a round
        while time.monotonic() < deadline and xla_collector(d)["endpoints"]:
            time.sleep(0.2)
        assert xla_collector(d)["endpoints"] == 0, xla_collector(d)
        assert not os.path.exists(os.path.join(d.state_dir, "xla-endpoints", str(os.getpid())))
        for bad in ("x1", "0", "99999999999"):
            status, body = d.request("POST", f"/v1/xla/endpoints/{bad}/detach")
            assert status == 400 and "not a process id" in body["error"]["message"], body
        status, _ = d.request("GET", f"/v1/xla/endpoints/{os.getpid()}/detach")
        assert status == 405
        assert d.alive()
    finally:
        d.stop()


@pytest.mark.skipif(SANITIZED, reason="the workload imports jaxlib, which cannot run with the ASan "
                    "runtime preloaded, and the ringprof package of the sanitized pass needs it: "
                    "checked in the normal pass")
def test_exit_detaches_with_the_last_window(tmp_path):
    """A workload that attached and exits says so (ringprof.xla's atexit):
    the daemon pulls its last window before it goes, so a session holds
    its steps up to the last one, and forgets the server at once rather
    than once it sees the process gone.  The window is longer than the
    run, so that the only window pulled is the one of the detach (JAX's
    continuous profiling loses what happens while it serializes a
    snapshot: a gap of a few hundred ms after each)."""
    from daemon_harness import Daemon  # noqa: PLC0415
    d = Daemon(tmp_path, config=DAEMON_CONFIG.format(endpoints="").replace(
        "exports = all", "exports = json").replace("window = 1s", "window = 60s")).start()
    try:
        d.cli("start", "--name", "whole", check=True)
        log = tmp_path / "steps.log"
        env = dict(d.env())
        env.pop("LD_PRELOAD", None)  # as workload_env(): JAX is not our code
        r = subprocess.run([sys.executable, str(WORKLOAD), "attach", "4", str(log)], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "may be lost" not in r.stderr, r.stderr
        deadline = time.monotonic() + 10  # status is refreshed once a round
        while time.monotonic() < deadline and xla_collector(d)["endpoints"]:
            time.sleep(0.2)
        col = xla_collector(d)
        assert col["endpoints"] == 0 and col["windows"] == 1, col
        assert col["events"] > 1000 and col["lost"] == 0, col

        d.cli("stop", "whole", "--wait", check=True)
        out = tmp_path / "whole.json"
        d.cli("export", "whole", "--format", "json", "-o", str(out), check=True)
        steps = [e for e in json.load(open(out))["trace_events"]
                 if e["type"] == "xla_op" and e["name"] == "train"]
        assert len(steps) > 100, len(steps)
        # The session's times are CLOCK_REALTIME, the log's CLOCK_MONOTONIC.
        wall_minus_mono = time.time_ns() - time.clock_gettime_ns(MONO)
        last, (before, after) = max(step_brackets(log).items())
        last_end = max(e["timestamp"] + e["duration"] for e in steps)
        assert last_end >= before + wall_minus_mono - 5_000_000, (
            f"the last step ({last}) ended {(before + wall_minus_mono - last_end) / 1e6:.0f} ms "
            "after the last one recorded", open(d.log).read())
        assert d.alive()
    finally:
        d.stop()


HOOK_DIR = pathlib.Path(__file__).resolve().parents[2] / "python" / "hook"
CLI = os.environ.get("RINGPROF_CLI", os.path.join(BUILD, "cli", "ringprof"))


def run_env(d):
    """ringprof run's environment: this tree's start-up hook (the installed
    one is the default), the package of this tree (conftest), no ASan
    runtime (JAX is not our code)."""
    env = dict(d.env(), RINGPROF_PYTHON_HOOK_DIR=str(HOOK_DIR))
    env.pop("LD_PRELOAD", None)
    return env


def test_ringprof_run_hook_leaves_other_programs_alone(tmp_path):
    """Under `ringprof run` a program that never imports jax gets no jax
    and no profiler server, and the sitecustomize the hook hides (here one
    on PYTHONPATH) still runs."""
    from daemon_harness import Daemon  # noqa: PLC0415
    own = tmp_path / "own"
    own.mkdir()
    d = Daemon(tmp_path, config=DAEMON_CONFIG.format(endpoints="")).start()
    try:
        (own / "sitecustomize.py").write_text("import builtins\nbuiltins.OWN_SITE = 1\n")
        # No jax here: the sanitized pass's ASan runtime stays preloaded
        # (ringprof run adds the Neuron collector, built with it, after it).
        env = dict(d.env(), RINGPROF_PYTHON_HOOK_DIR=str(HOOK_DIR))
        env["PYTHONPATH"] = os.pathsep.join([str(own), env.get("PYTHONPATH", "")])
        r = subprocess.run([CLI, "--socket", d.socket, "run", "--name", "nojax", "--",
                            sys.executable, "-c",
                            "import os, sys; print(OWN_SITE, 'jax' in sys.modules, "
                            "os.environ['PYTHONPATH'].split(os.pathsep)[0])"],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["1", "False", str(HOOK_DIR)], (r.stdout, r.stderr)
        assert xla_collector(d)["endpoints"] == 0
        r = subprocess.run([CLI, "--socket", d.socket, "run", "--no-xla", "--name", "noxla", "--",
                            sys.executable, "-c", "import os; print(os.environ.get("
                            "'RINGPROF_XLA_ATTACH'))"], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.stdout.split() == ["None"], (r.stdout, r.stderr)
    finally:
        d.stop()


@pytest.mark.skipif(SANITIZED, reason="the workload imports jaxlib, which cannot run with the ASan "
                    "runtime preloaded, and the ringprof package of the sanitized pass needs it: "
                    "checked in the normal pass")
def test_ringprof_run_attaches_jax_programs(tmp_path):
    """`ringprof run -- python train.py` with no change to the program: the
    start-up hook attaches it once it imports jax, and the run's session
    holds jit_train_step's XLA ops with hlo_op/hlo_module and the steps,
    stamped with the program's pid."""
    from daemon_harness import Daemon  # noqa: PLC0415
    d = Daemon(tmp_path, config=DAEMON_CONFIG.format(endpoints="")).start()
    try:
        r = subprocess.run([CLI, "--socket", d.socket, "run", "--name", "jaxrun", "--",
                            sys.executable, str(WORKLOAD), "0", "8"], env=run_env(d),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "imports jax, but" not in r.stderr and "cannot attach" not in r.stderr, r.stderr
        out = tmp_path / "run.json"
        d.cli("export", "jaxrun", "--format", "json", "-o", str(out), check=True)
        ops = [e for e in json.load(open(out))["trace_events"] if e["type"] == "xla_op"]
        hlo = [e for e in ops if e["args"].get("hlo_module", "").startswith("jit_train_step")
               and e["args"].get("hlo_op")]
        steps = [e for e in ops if e["name"] == "train"]
        assert len(hlo) > 100 and len(steps) > 10, (len(ops), len(hlo), len(steps),
                                                    open(d.log).read())
        (pid,) = {e["process_id"] for e in ops}
        assert pid not in (os.getpid(), d.proc.pid)
        assert d.alive()
    finally:
        d.stop()
