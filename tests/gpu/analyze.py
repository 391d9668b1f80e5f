"""Judges what tests/gpu/run.sh recorded: analyze.py WORK.

Reads the workloads' JSON lines (WORK/TAG.json, exit status in TAG.rc) and
the session's JSON export (WORK/session.json); writes WORK/figures.json and
prints it.  Checks, each a line in "problems" when it fails:
  - ringprof's kernels of run ringprof1 against torch.profiler's of run
    torch: every kernel torch saw is there, with per-step counts and mean
    durations within 10%;
  - the step-time slowdown of ringprof (figures; target 1%) and of
    torch.profiler, each against the runs with no profiler;
  - torch.profiler in the same process, in the middle of a run and started
    before CUDA is: without sharing, what happens is a figure; with
    ringprof.cupti sharing, torch.profiler sees its kernels and ringprof
    records before and after it;
  - nvtx: the run with NVTX through CUPTI exits 0 and its kernels are
    recorded (its ranges are a figure);
  - xla: the JAX program's device ops reached the session.
Exit status 1 when a check failed."""
import collections
import json
import pathlib
import statistics
import sys

work = pathlib.Path(sys.argv[1])
problems = []
fig = {}


def run(tag):
    """The workload's JSON line, or None (with a problem) when it failed."""
    rc = (work / f"{tag}.rc").read_text().strip() if (work / f"{tag}.rc").exists() else "?"
    try:
        out = json.loads((work / f"{tag}.json").read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        out = None
    if rc != "0" or out is None:
        err = (work / f"{tag}.stderr").read_text(errors="replace")[-400:] \
            if (work / f"{tag}.stderr").exists() else ""
        problems.append(f"run {tag} failed (exit {rc}): {err.strip()}")
        return None
    return out


runs = {t: run(t) for t in ("plain0", "plain0b", "plain1", "ringprof1", "plain2", "ringprof2",
                            "plain3", "ringprof3", "torch", "coexist", "coexist_shared", "nvtx",
                            "torchfirst", "torchfirst_shared")}
fig["cupti_copies"] = {t: r.get("cupti_at_exit") for t, r in runs.items() if r}
try:
    session = json.loads((work / "session.json").read_text())
except (OSError, ValueError) as e:
    session = {"trace_events": [], "counters": []}
    problems.append(f"no session export: {e}")
events = session.get("trace_events", [])


def kernels_of(pid, lo=None, hi=None, kind="gpu_kernel"):
    """name -> [count, total us] of pid's events of kind in [lo, hi) (wall ns)."""
    out = {}
    for e in events:
        if e["type"] != kind or e["process_id"] != pid:
            continue
        if lo is not None and not lo <= e["timestamp"] < hi:
            continue
        k = out.setdefault(e["name"], [0, 0.0])
        k[0] += 1
        k[1] += e["duration"] / 1e3
    return out


def count(kmap):
    return sum(n for n, _ in kmap.values())


def base(name):
    """A kernel name without its argument list, for names the two tools
    spell differently."""
    return name.split("(")[0].strip()


# Kernels: ringprof1 (warm-up + steps, all recorded) vs torch (steps).
rp, tp = runs["ringprof1"], runs["torch"]
if rp and tp:
    steps = rp["steps"]
    ours = kernels_of(rp["pid"])
    fig["kernels"] = {"ringprof": ours, "torch.profiler": tp["kernels"]}
    by_base = collections.defaultdict(lambda: [0, 0.0])
    for name, (n, us) in ours.items():
        by_base[base(name)][0] += n
        by_base[base(name)][1] += us
    if not ours:
        problems.append("no gpu_kernel events of run ringprof1 in the session")
    for name, (n, us) in tp["kernels"].items():
        m, ous = ours.get(name) or by_base.get(base(name)) or (0, 0.0)
        if not m:
            problems.append(f"kernel {name!r} of torch.profiler missing from ringprof")
            continue
        if abs(m / (steps + 20) - n / steps) > 0.1 * n / steps:
            problems.append(f"{name}: {m} in ringprof over {steps + 20} steps vs {n} in "
                            f"torch over {steps}")
        if abs(ous / m - us / n) > 0.1 * us / n:
            problems.append(f"{name}: mean {ous / m:.2f} us vs torch {us / n:.2f} us")
    # API call -> kernel: the runtime call whose correlation id the kernel
    # carries, on a host thread of the same process.
    mine = [e for e in events if e["process_id"] == rp["pid"]]
    calls = {e["args"].get("correlation") for e in mine if e["type"] == "api_call"}
    calls.discard(None)
    calls.discard(0)
    gpu = [e for e in mine if e["type"] in ("gpu_kernel", "gpu_memcpy")]
    linked = sum(1 for e in gpu if e["args"].get("correlation") in calls)
    fig["api_to_gpu"] = {"gpu_events": len(gpu), "with_their_api_call": linked,
                         "api_calls_with_correlation": len(calls)}
    if gpu and linked < 0.9 * len(gpu):
        problems.append(f"only {linked} of {len(gpu)} kernels and copies link to their API call")
    # What the kernel events carry (launch configuration where recorded).
    one = next((e for e in mine if e["type"] == "gpu_kernel"), None)
    fig["kernel_args_sample"] = one["args"] if one else None
    copies = kernels_of(rp["pid"], kind="gpu_memcpy")
    fig["memcpy"] = copies
    if count(copies) < steps:
        problems.append(f"{count(copies)} memcpys recorded for {steps} steps")

# Slowdowns: medians of each run's step times.
step = {t: r["step_ms"] for t, r in runs.items()
        if r and not t.startswith(("coexist", "nvtx", "torchfirst"))}
fig["step_ms"] = step


def mean_of(*tags):
    v = [step[t] for t in tags if t in step]
    return statistics.fmean(v) if v else None


none = mean_of("plain0", "plain0b")
daemon = mean_of("plain1", "plain2", "plain3")
ours_ms = mean_of("ringprof1", "ringprof2", "ringprof3")
slow = {}
if none and ours_ms:
    slow["ringprof_vs_no_daemon"] = 100 * (ours_ms / none - 1)
if daemon and ours_ms:
    slow["ringprof_vs_daemon_no_injection"] = 100 * (ours_ms / daemon - 1)
if none and daemon:
    slow["daemon_only_vs_no_daemon"] = 100 * (daemon / none - 1)
if none and "torch" in step:
    slow["torch.profiler_vs_no_daemon"] = 100 * (step["torch"] / none - 1)
fig["slowdown_pct"] = slow

# torch.profiler in the same process: in the middle of a run (coexist) and
# started before CUDA is (torchfirst), each without and with ringprof.cupti
# sharing CUPTI.  Unshared, the findings are figures; shared, both tools
# must see their kernels and the run must end well.
for tag in ("coexist", "coexist_shared", "torchfirst", "torchfirst_shared"):
    r = runs[tag]
    if not r:
        fig[tag] = {"failed": True}
        continue
    err = (work / f"{tag}.stderr").read_text(errors="replace")
    f = fig[tag] = {"shared": r.get("shared"),
                    "torch.profiler_kernels": count(r["kernels"]),
                    "ringprof_kernels": count(kernels_of(r["pid"])),
                    "stood_aside_said": "another CUPTI subscriber" in err,
                    "stderr": err[-600:]}
    if "phases" in r:
        f["ringprof_kernels_by_phase"] = {p: count(kernels_of(r["pid"], *b))
                                          for p, b in r["phases"].items()}
    if tag.endswith("_shared"):
        if not r.get("shared"):
            problems.append(f"{tag}: ringprof.cupti found no injection library to share")
        if not r["kernels"]:
            problems.append(f"{tag}: torch.profiler saw no kernels though ringprof shared")
        phases = f.get("ringprof_kernels_by_phase")
        if phases and not (phases["before"] and phases["after"]):
            problems.append(f"{tag}: ringprof did not record before and after "
                            f"torch.profiler: {phases}")

# NVTX through CUPTI.
nv = runs["nvtx"]
if nv:
    ranges = [e for e in events if e["type"] == "range" and e["process_id"] == nv["pid"]]
    fig["nvtx"] = {"kernels": count(kernels_of(nv["pid"])), "ranges": len(ranges),
                   "range_names": sorted({e["name"] for e in ranges})[:8],
                   "markers_other_than_ranges": sorted({e["type"] for e in events
                                                        if e["process_id"] == nv["pid"]}),
                   "stderr": (work / "nvtx.stderr").read_text(errors="replace")[-600:]}
    if not fig["nvtx"]["kernels"]:
        problems.append("nvtx: no kernels recorded with NVTX through CUPTI")

# JAX on the GPU, pulled by the daemon.
try:
    xla = json.loads((work / "xla.json").read_text().strip().splitlines()[-1])
except (OSError, ValueError, IndexError):
    xla = None
    problems.append("xla: the JAX program failed: " +
                    (work / "xla.stderr").read_text(errors="replace")[-400:].strip())
if xla:
    ops = [e for e in events if e["type"] == "xla_op"]
    on_device = [e for e in ops if "device_index" in e.get("args", {})]
    fig["xla"] = {"jax": xla, "xla_ops": len(ops), "on_device": len(on_device),
                  "rings": dict(collections.Counter(e["device"] for e in ops)),
                  "device_op_names": sorted({e["name"] for e in on_device})[:10]}
    if not on_device:
        problems.append("xla: no device ops of the JAX program in the session")

fig["problems"] = problems
(work / "figures.json").write_text(json.dumps(fig, indent=1))
print(json.dumps({k: v for k, v in fig.items() if k != "kernels"}, indent=1))
sys.exit(1 if problems else 0)
