"""The GPU check's workload (tests/gpu/run.sh): a PyTorch matmul + copy
loop, timed per step.  Modes:
  plain     nothing else in the process (the baseline; ringprof's run is
            this mode with CUDA_INJECTION64_PATH set by run.sh)
  torch     the same loop under torch.profiler (Kineto) with CUDA activity
Prints one JSON line: mode, steps, step_ms (median), and for torch the
kernels it saw {name: [count, total_us]} during the profiled steps."""
import json
import statistics
import sys
import time

import torch

mode, steps = sys.argv[1], int(sys.argv[2])
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

times = []
kernels = {}


def loop():
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append((time.perf_counter() - t) * 1e3)


if mode == "torch":
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        loop()
    for e in prof.events():
        # Kernels only: Kineto names copies "Memcpy HtoD (Pinned -> Device)".
        if (e.device_type == torch.autograd.DeviceType.CUDA
                and not e.name.startswith(("Memcpy", "Memset"))):
            k = kernels.setdefault(e.name, [0, 0.0])
            k[0] += 1
            k[1] += e.device_time
else:
    loop()
print(json.dumps({"mode": mode, "steps": steps, "step_ms": statistics.median(times),
                  "kernels": kernels}))
