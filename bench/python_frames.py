#!/usr/bin/env python3
"""What walking Python frames costs the sampler's BPF program: its run
time per run (kernel.bpf_stats_enabled, set for the benchmark and
restored after) on tests/integration/py_burn.py under each CPython found
(outer -> middle -> leaf_fib(18): about 22 Python frames a sample), and
on cpu-burn, a C program of a 4-frame stack that runs no Python, as the
peer: the ratio is what the Python walk adds.  Each workload gets its
own ringprofd from the build tree, filtered to its pid ([sampler] pids),
at 999 Hz.  ns/run is over every run, those on the other CPU too (the
pid filter returns at once there); ns/sample is all of the program's
time over the workload's samples (999 a second on its CPU): an upper
bound of what one of its samples costs.

Needs root and bpftool.  Not pass/fail: the target (issue 14: at most
5 us of BPF time per sample) is printed beside."""

import argparse
import json
import os
import pathlib
import re
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY_BURN = ROOT / "tests" / "integration" / "py_burn.py"
PYENV = pathlib.Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"
TARGET_NS = 5000


def progs():
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"]: p for p in json.loads(out) if p.get("name") == "rp_on_sample"}


def ours(daemon_pid):
    """The sampler program of the daemon daemon_pid, found through the
    prog_id of its file descriptors (other ringprofds may run on the
    host, and start while this one runs)."""
    ids = set()
    for fd in pathlib.Path(f"/proc/{daemon_pid}/fdinfo").iterdir():
        try:
            m = re.search(r"^prog_id:\s*(\d+)", fd.read_text(), re.M)
        except OSError:
            continue
        if m:
            ids.add(int(m[1]))
    found = [p for i, p in progs().items() if i in ids]
    if len(found) != 1:
        raise RuntimeError(f"expected one sampler program of ringprofd {daemon_pid}, "
                           f"found {len(found)}")
    return found[0].get("run_time_ns", 0), found[0].get("run_cnt", 0)


def measure(build, cmd, seconds):
    work = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp(prefix="rp-pyframes-")
    conf = pathlib.Path(tmp) / "ringprofd.conf"
    conf.write_text(f"[sampler]\nenabled = true\nfrequency = 999\npids = {work.pid}\n")
    sock = pathlib.Path(tmp) / "ctl.sock"
    daemon = subprocess.Popen([str(build / "daemon" / "ringprofd"), "--foreground", "--socket",
                               str(sock), "--state-dir", f"{tmp}/state", "--logdir", f"{tmp}/logs",
                               "--config", str(conf)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)  # started, and the process described
        t0, c0 = ours(daemon.pid)
        start = time.monotonic()
        time.sleep(seconds)
        t1, c1 = ours(daemon.pid)
        wall = time.monotonic() - start
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        work.kill()
        work.wait()
    runs = c1 - c0
    # The workload keeps one CPU busy: 999 of the runs a second are its samples.
    samples = min(runs, 999 * wall)
    return (t1 - t0) / max(runs, 1), (t1 - t0) / max(samples, 1), runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "build"), help="the build directory")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    build = pathlib.Path(args.build)
    interpreters = [("python3.11 (Debian)", "/usr/bin/python3.11")] + [
        (f"python{v} (pyenv)", str(PYENV / v / "bin" / "python3"))
        for v in ("3.10.13", "3.11.7", "3.12.1", "3.13.0")]
    stats = "/proc/sys/kernel/bpf_stats_enabled"
    old = open(stats).read().strip()
    open(stats, "w").write("1")
    try:
        peer = measure(build, [str(build / "tests" / "cpu-burn"), str(args.seconds + 3)],
                       args.seconds)
        print(f"{'workload':24} {'ns/run':>8} {'ns/sample':>10} {'runs':>7} {'ratio':>6}")
        print(f"{'cpu-burn (C, peer)':24} {peer[0]:8.0f} {peer[1]:10.0f} {peer[2]:7}")
        for name, exe in interpreters:
            if not os.access(exe, os.X_OK):
                continue
            own = measure(build, [exe, str(PY_BURN), str(args.seconds + 3)], args.seconds)
            print(f"{name:24} {own[0]:8.0f} {own[1]:10.0f} {own[2]:7} {own[1] / peer[1]:6.2f}")
        print(f"target: at most {TARGET_NS} ns of BPF time per sample")
    finally:
        open(stats, "w").write(old)


if __name__ == "__main__":
    main()
