"""Pulling XLA events from a workload's profiler server (collectors/xla).

The peer is real: CPU JAX from PyPI running a jitted training loop with
jax.profiler.start_server (xla_train.py), pulled with ringprof-xla-probe,
the driver of the decoder and gRPC client the daemon's XLA collector
builds on.  Misbehaving servers are grpcio servers written here, and, for
what grpcio cannot be made to send (a lying length prefix, a stream cut
short, not HTTP/2 at all), a raw socket speaking just enough HTTP/2."""

import json
import os
import pathlib
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import pytest

from daemon_harness import BUILD

PROBE = os.path.join(BUILD, "collectors", "xla", "ringprof-xla-probe")
WORKLOAD = pathlib.Path(__file__).with_name("xla_train.py")
PROFILE = "/tensorflow.ProfilerService/Profile"
MONO = time.CLOCK_MONOTONIC


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
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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


def test_error_status_is_quoted(fake_server):
    def busy(request, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "another profiling session is active")

    rc, _, err = probe(fake_server(busy), "--duration-ms", 100)
    assert rc == 1 and "FAILED_PRECONDITION" in err and "another profiling session" in err


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
