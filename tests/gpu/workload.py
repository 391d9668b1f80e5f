"""The GPU check's workload (tests/gpu/run.sh): a PyTorch matmul + copy
loop, timed per step.  Usage: workload.py MODE STEPS.  Modes:
  plain     nothing else in the process (the baseline; ringprof's runs are
            this mode with CUDA_INJECTION64_PATH set by run.sh)
  torch     the same loop under torch.profiler (Kineto) with CUDA activity
  coexist   STEPS plain, STEPS under torch.profiler, STEPS plain again:
            whether ringprof's CUPTI collector and Kineto get along
  nvtx      the loop with each step in a torch.cuda.nvtx range
  torch-first  torch.profiler started before CUDA is (so that Kineto holds
            CUPTI when the driver loads ringprof's injection library)
Prints one JSON line: mode, pid, steps, step_ms (median), and where a phase
matters its wall-clock bounds in ns (time.time_ns, as the JSON export stamps); for torch.profiler phases the
kernels it saw {name: [count, total_us]}."""
import json
import os
import statistics
import sys
import time

import torch



def cupti_copies():
    """The libcupti files mapped into this process (two copies of CUPTI
    in one process break each other's subscribers)."""
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libcupti" in line})


mode, steps = sys.argv[1], int(sys.argv[2])
at_import = cupti_copies()
shared = None
if os.environ.get("RINGPROF_SHARE") == "1":
    # ringprof.cupti from the source tree (the package's native part is not
    # built for this Python): torch.profiler and ringprof take turns.
    import importlib.util
    import pathlib
    src = pathlib.Path(__file__).resolve().parents[2] / "python" / "ringprof" / "cupti.py"
    spec = importlib.util.spec_from_file_location("ringprof_cupti", src)
    share = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(share)
    shared = share.share_with_torch_profiler()
if mode == "torch-first":
    from torch.profiler import ProfilerActivity, profile
    early = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    early.__enter__()
dev = torch.device("cuda")
a = torch.randn(2048, 2048, device=dev)
b = torch.randn(2048, 2048, device=dev)
host = torch.randn(1 << 20, pin_memory=True)


def step():
    c = a @ b
    d = host.to(dev, non_blocking=True)
    torch.cuda.synchronize()
    return c, d


for _ in range(20):  # warm-up: cuBLAS heuristics, allocator
    step()
torch.cuda.synchronize()


def loop(n, wrap=None):
    """n timed steps; returns the step times in ms."""
    times = []
    for i in range(n):
        t = time.perf_counter()
        if wrap:
            with wrap(i):
                step()
        else:
            step()
        times.append((time.perf_counter() - t) * 1e3)
    return times


def kernels_seen(prof):
    """{name: [count, total_us]} of the kernels a torch.profiler saw."""
    kernels = {}
    for e in prof.events():
        # Kernels only: Kineto names copies "Memcpy HtoD (Pinned -> Device)".
        if (e.device_type == torch.autograd.DeviceType.CUDA
                and not e.name.startswith(("Memcpy", "Memset"))):
            k = kernels.setdefault(e.name, [0, 0.0])
            k[0] += 1
            k[1] += e.device_time
    return kernels


def profiled(n):
    """n steps under torch.profiler; returns (times, kernels it saw)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        times = loop(n)
    return times, kernels_seen(prof)


def bounds(fn, *args):
    t0 = time.time_ns()
    r = fn(*args)
    return r, [t0, time.time_ns()]


out = {"mode": mode, "pid": os.getpid(), "steps": steps, "cupti_at_import": at_import,
       "shared": shared}
if mode == "torch":
    times, out["kernels"] = profiled(steps)
elif mode == "coexist":
    t1, b1 = bounds(loop, steps)
    (t2, out["kernels"]), b2 = bounds(profiled, steps)
    t3, b3 = bounds(loop, steps)
    times = t1 + t3
    out["phases"] = {"before": b1, "torch.profiler": b2, "after": b3}
    out["torch_step_ms"] = statistics.median(t2)
elif mode == "nvtx":
    times = loop(steps, lambda i: torch.cuda.nvtx.range(f"step {i % 4}"))
elif mode == "plain":
    times = loop(steps)
elif mode == "torch-first":
    times = loop(steps)
    early.__exit__(None, None, None)
    out["kernels"] = kernels_seen(early)
else:
    sys.exit(f"workload.py: unknown mode {mode!r} (plain, torch, coexist, nvtx, torch-first)")
out["cupti_at_exit"] = cupti_copies()
out["step_ms"] = statistics.median(times)
out["mean_ms"] = statistics.fmean(times)
print(json.dumps(out))
