#!/usr/bin/env python3
"""What ringprof's XLA pull costs (issue 16), in one run:

decode  jax.profiler.trace's own XSpace of a jitted training loop (the
        tests' xla_train.py, about 1 s), decoded by the pull collector's
        decoder (ringprof-xla-probe --decode --repeat) against the same
        bytes parsed by Python's protobuf (upb, classes generated from
        storage/proto/xplane.proto) walking every event with its name and
        stat names, as the decoder resolves them, and against XProf's own
        converter (trace_viewer) of that file.  Events per CPU second of
        the process: robust to a busy host.  Target: >= 2 M events/s.

steps   one JAX process (this file, --workload) serving its profiler
        (jax.profiler.start_server) runs the train step in phases, the
        phases taking turns for --rounds rounds: plain (nobody profiles,
        --seconds), pulled (a private ringprofd from the build tree pulls
        it at the [xla] defaults, the CPU sampler off, so that the figure
        is the pull's alone; --seconds from the daemon's start, so that the
        phase holds several of the duty cycle's windows and pauses when the
        budget makes one), continuous (the same with [xla] overhead_budget
        = 0: every window, measured for --short-seconds once two windows
        arrived) and traced (jax.profiler.trace to a directory around the
        phase for --short-seconds, the peer, counted until its file is
        written: the pulled phases pay for the server's serializing of
        their windows too).  Steps per second are the median over rounds;
        slowdown = plain / phase - 1.  Also the daemon's CPU time while it
        pulled.  Target: <= 3% at the defaults.

Needs CPU JAX and xprof (scripts/install-deps.sh) and protoc.  Not
pass/fail on a shared host: the targets are printed beside."""

import argparse
import contextlib
import http.client
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRAIN = ROOT / "tests" / "integration" / "xla_train.py"
sys.path.insert(0, str(TRAIN.parent))
import xplane_py  # noqa: E402  (the tests' protobuf reader of XSpace)
DECODE_MIN = 2e6
SLOWDOWN_MAX = 0.03
PHASES = ("plain", "pulled", "continuous", "traced")


# ---- the workload ---------------------------------------------------------

def workload(port, size):
    """Serves the profiler on port, then runs one phase per line of stdin
    ("plain SECONDS" or "trace SECONDS DIR"), answering "steps N NS CPU_NS"
    (the process's CPU time, the profiler's own threads included)."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def train_step(w, x, y):
        def loss(w):
            return jnp.mean((jnp.tanh(x @ w) - y) ** 2)
        return w - 0.01 * jax.grad(loss)(w)

    jax.profiler.start_server(port)
    key = jax.random.PRNGKey(0)
    w, x = jax.random.normal(key, (size, size)), jax.random.normal(key, (2 * size, size))
    y = jnp.zeros((2 * size, size))
    w = train_step(w, x, y).block_until_ready()
    print("ready", flush=True)

    def steps(seconds):
        nonlocal w
        n, start, cpu = 0, time.monotonic_ns(), time.process_time_ns()
        end = start + int(seconds * 1e9)
        while time.monotonic_ns() < end:
            with jax.profiler.StepTraceAnnotation("train", step_num=n):
                w = train_step(w, x, y).block_until_ready()
            n += 1
        return n, time.monotonic_ns() - start, time.process_time_ns() - cpu

    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "trace":
            # Counted to the file written: always on, the trace would
            # write each window out in the process too.
            start, cpu0 = time.monotonic_ns(), time.process_time_ns()
            with jax.profiler.trace(cmd[2]):
                n, _, _ = steps(float(cmd[1]))
            ns, cpu = time.monotonic_ns() - start, time.process_time_ns() - cpu0
        else:
            n, ns, cpu = steps(float(cmd[1]))
        print(f"steps {n} {ns} {cpu}", flush=True)


# ---- decode ---------------------------------------------------------------

def protobuf_walk(xplane_pb2, data):
    """Parses and visits every timed event with its name and stat names."""
    n = 0
    for p in xplane_pb2.XSpace.FromString(data).planes:
        names = {k: m.name for k, m in p.stat_metadata.items()}
        meta = p.event_metadata
        for line in p.lines:
            for e in line.events:
                if e.WhichOneof("data") == "num_occurrences":
                    continue
                m = meta[e.metadata_id]
                _ = (m.name, [names.get(s.metadata_id) for s in e.stats],
                     [names.get(s.metadata_id) for s in m.stats])
                n += 1
    return n


def per_cpu_second(fn, repeat, warm=True):
    """fn's result (a count) and that count per CPU second of this process
    over repeat calls, after one untimed call when warm."""
    if warm:
        fn()
    n, t0 = 0, time.process_time()
    for _ in range(repeat):
        n = fn()
    return n, n * repeat / (time.process_time() - t0)


@contextlib.contextmanager
def quiet_stderr():
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def bench_decode(args, tmp):
    trace = tmp / "trace"
    subprocess.run([sys.executable, str(TRAIN), "0", str(args.trace_seconds), os.devnull,
                    str(trace)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=300)
    (path,) = trace.glob("plugins/profile/*/*.xplane.pb")
    data = path.read_bytes()
    out = subprocess.run([str(args.build / "collectors" / "xla" / "ringprof-xla-probe"),
                          "--decode", str(path), "--repeat", str(args.repeat + 1), "--json"],
                         check=True, capture_output=True, text=True, timeout=300)
    ours = json.loads(out.stdout)
    events, rate = ours["events"], ours["decode_events_per_cpu_s"]

    xplane_pb2 = xplane_py.xplane_pb2(tmp)
    pb_events, pb_rate = per_cpu_second(lambda: protobuf_walk(xplane_pb2, data), args.repeat)
    if pb_events != events:
        sys.exit(f"xla: the decoder gave {events} events, Python's protobuf {pb_events}")

    from xprof.convert import raw_to_tool_data
    xdir = tmp / "xprof" / "plugins" / "profile" / "run"
    xdir.mkdir(parents=True)
    shutil.copy(path, xdir / "host.xplane.pb")

    def xprof_convert():
        raw_to_tool_data.xspace_to_tool_data([str(xdir / "host.xplane.pb")], "trace_viewer",
                                             {"use_saved_result": False})
        return events
    with quiet_stderr():  # the converter logs every pass
        _, xprof_rate = per_cpu_second(xprof_convert, 1, warm=False)

    print(f"decode: jax.profiler.trace of {args.trace_seconds} s, {len(data) / 1e6:.1f} MB, "
          f"{events} events ({ours['hlo_events']} XLA ops), M events per CPU second")
    print(f"  ringprof decoder (xspace.h)          {rate / 1e6:6.2f}   target >= "
          f"{DECODE_MIN / 1e6:.0f}")
    print(f"  Python protobuf (upb) parse + walk   {pb_rate / 1e6:6.2f}   ratio {rate / pb_rate:.2f}")
    print(f"  XProf trace_viewer converter         {xprof_rate / 1e6:6.2f}   ratio "
          f"{rate / xprof_rate:.2f}")
    return {"decode_meps": rate / 1e6, "protobuf_meps": pb_rate / 1e6,
            "xprof_meps": xprof_rate / 1e6, "decode_ok": rate >= DECODE_MIN}


# ---- steps ----------------------------------------------------------------

def status(sock):
    conn = http.client.HTTPConnection("localhost", timeout=10)
    conn.sock = socket.socket(socket.AF_UNIX)
    conn.sock.settimeout(10)
    conn.sock.connect(sock)
    conn.request("GET", "/v1/status")
    body = json.loads(conn.getresponse().read())
    conn.close()
    return next(c for c in body["collectors"] if c["name"] == "xla")


def cpu_ns(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1e9 / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def puller(ringprofd, tmp, addr, xla_conf, windows):
    """A private ringprofd pulling addr with [xla] xla_conf added to the
    defaults, once it has pulled that many windows (two: the session runs
    and its snapshots follow each other, the first holding only the
    session's start; zero: as soon as it answers)."""
    d = tmp / "daemon"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    sock = str(d / "ctl.sock")
    (d / "conf").write_text(f"[sampler]\nenabled = false\n[xla]\nendpoints = {addr}\n{xla_conf}")
    proc = subprocess.Popen([ringprofd, "--foreground", "--socket", sock, "--state-dir",
                             str(d / "state"), "--logdir", str(d / "logs"), "--config",
                             str(d / "conf")], stdout=subprocess.DEVNULL,
                            stderr=open(d / "log", "w"))
    try:
        deadline = time.monotonic() + 60
        while not (os.path.exists(sock) and status(sock).get("windows", 0) >= windows):
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"xla: ringprofd pulled nothing from {addr}: {(d / 'log').read_text()}")
            time.sleep(0.2)
        yield proc, sock
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def bench_steps(args, tmp, size):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = subprocess.Popen([sys.executable, __file__, "--workload", str(port), "--size",
                             str(size)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rates = {p: [] for p in PHASES}
    cpu_us = {p: [] for p in PHASES}
    daemon_cpu, pulled = [], {}
    ringprofd = str(args.build / "daemon" / "ringprofd")
    addr = f"127.0.0.1:{port}"
    try:
        if work.stdout.readline().strip() != "ready":
            sys.exit("xla: the JAX workload did not start")

        def phase(cmd):
            work.stdin.write(cmd + "\n")
            work.stdin.flush()
            _, n, ns, cpu = work.stdout.readline().split()
            return int(n) * 1e9 / int(ns), int(cpu) / 1e3 / int(n)

        def record(name, cmd):
            rate, cpu = phase(cmd)
            rates[name].append(rate)
            cpu_us[name].append(cpu)

        for r in range(args.rounds):
            record("plain", f"plain {args.seconds}")
            with puller(ringprofd, tmp, addr, "", 0) as (d, sock):
                c0 = cpu_ns(d.pid)
                record("pulled", f"plain {args.seconds}")
                daemon_cpu.append((cpu_ns(d.pid) - c0) / (args.seconds * 1e9))
                pulled = status(sock)
            with puller(ringprofd, tmp, addr, "overhead_budget = 0\n", 2):
                record("continuous", f"plain {args.short_seconds}")
            record("traced", f"trace {args.short_seconds} {tmp / f'trace{size}.{r}'}")
    finally:
        work.stdin.close()
        work.wait(timeout=60)

    med = {p: statistics.median(v) for p, v in rates.items()}
    cpu = {p: statistics.median(v) for p, v in cpu_us.items()}
    slowdown = med["plain"] / med["pulled"] - 1
    continuous = med["plain"] / med["continuous"] - 1
    traced = med["plain"] / med["traced"] - 1
    print(f"steps of a {size}x{size} train step: {args.rounds} rounds of {args.seconds} s "
          f"(plain, pulled) and {args.short_seconds} s (continuous, traced), medians (each round)")
    print(f"  {'':8} {'steps/s':>9}   {'':28} {'CPU us/step':>11}")
    for p in PHASES:
        print(f"  {p:<8} {med[p]:9.0f}   {'(' + ', '.join(f'{v:.0f}' for v in rates[p]) + ')':28} "
              f"{cpu[p]:11.1f}")
    print(f"  slowdown pulled  {100 * slowdown:+6.1f}%  CPU per step {cpu['pulled'] / cpu['plain'] - 1:+.1%}"
          f"   target <= {100 * SLOWDOWN_MAX:.0f}%")
    print(f"  slowdown continuous {100 * continuous:+6.1f}%  CPU per step "
          f"{cpu['continuous'] / cpu['plain'] - 1:+.1%}   ([xla] overhead_budget = 0)")
    print(f"  slowdown traced  {100 * traced:+6.1f}%  CPU per step {cpu['traced'] / cpu['plain'] - 1:+.1%}"
          f"   (jax.profiler.trace, the peer)")
    print(f"  ringprofd CPU while pulling: {100 * statistics.median(daemon_cpu):.1f}% of a core; "
          f"last round: {pulled.get('windows')} windows, {pulled.get('events')} events, "
          f"recorded {pulled.get('recorded_pct')}% of the time")
    print(f"  {pulled.get('detail')}")
    return {f"slowdown{size}": slowdown, f"continuous_slowdown{size}": continuous,
            f"traced_slowdown{size}": traced,
            f"cpu_per_step{size}": cpu["pulled"] / cpu["plain"] - 1,
            f"daemon_cpu{size}": statistics.median(daemon_cpu),
            f"steps{size}_ok": slowdown <= SLOWDOWN_MAX}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    ap.add_argument("--only", choices=["decode", "steps"])
    ap.add_argument("--trace-seconds", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3, help="decodes measured")
    ap.add_argument("--sizes", default="64",
                    help="train step sizes (N: an NxN weight, a 2NxN batch)")
    ap.add_argument("--seconds", type=float, default=60.0,
                    help="per plain and pulled phase: several duty cycles")
    ap.add_argument("--short-seconds", type=float, default=2.0,
                    help="per continuous and traced phase")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workload", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.workload is not None:
        return workload(args.workload, args.size)
    res = {}
    with tempfile.TemporaryDirectory(prefix="rpbench-xla-") as tmp:
        if args.only != "steps":
            res.update(bench_decode(args, pathlib.Path(tmp)))
        if args.only != "decode":
            for size in map(int, args.sizes.split(",")):
                res.update(bench_steps(args, pathlib.Path(tmp), size))
    ok = all(v for k, v in res.items() if k.endswith("_ok"))
    print("result: " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={int(v)}"
                                for k, v in res.items()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
