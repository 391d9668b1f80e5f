#!/bin/bash
# The GPU check of docs/gpu.md, for a lent GPU machine (nothing is built
# there: carry build/ and .devlibs, see ../shared/notes/devices.md).  Under
# 8 minutes; the log and figures go to $OUT (default ./gpu-out):
#   1. ringprofd from build/ in the background;
#   2. the workload (workload.py) three times: plain, with
#      CUDA_INJECTION64_PATH=libringprof-cupti.so, under torch.profiler;
#   3. a snapshot of ringprof's run, exported as JSON: its kernels (names,
#      counts, total durations) against torch.profiler's, within 10%;
#   4. the step-time slowdown of ringprof and of torch.profiler against
#      the plain run, in figures.json.
# On a host without a GPU it says "no GPU" and exits 0 (the rehearsal).
set -euo pipefail
LOG=run.log TAG=""
# shellcheck source=tests/gpu/common.sh
source "$(dirname "$0")/common.sh"
STEPS=${STEPS:-300}
nvidia-smi -L | tee "$OUT/gpus.txt" || true

SO=$BUILD/collectors/cupti/libringprof-cupti.so
[ -f "$SO" ] || fail "$SO is missing: build with the CUDA headers (meson -Dcupti=enabled)"
# The torch wheel's CUPTI (nvidia-cuda-cupti) when the system has none.
CUPTI=${RINGPROF_CUPTI_LIB:-$("$PY" - <<'PY'
import glob, os
try:
    import nvidia.cuda_cupti as m
    roots = list(m.__path__)
except ImportError:
    roots = []
for r in roots + ["/usr/local/cuda/lib64"]:
    for f in sorted(glob.glob(os.path.join(r, "**", "libcupti.so*"), recursive=True)):
        print(f); raise SystemExit
PY
)}
[ -n "$CUPTI" ] || fail "no libcupti found (set RINGPROF_CUPTI_LIB)"
say "libcupti: $CUPTI"

TMP=$(mktemp -d)
SOCK=$TMP/ctl.sock
"$BUILD/daemon/ringprofd" --foreground --socket "$SOCK" --state-dir "$TMP/state" \
	--logdir "$TMP/logs" 2>"$OUT/ringprofd.log" &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null || true; wait $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$SOCK.producers" ] && break; sleep 0.1; done
[ -S "$SOCK.producers" ] || fail "ringprofd did not start (ringprofd.log)"
CLI=("$BUILD/cli/ringprof" --socket "$SOCK")

W=$ROOT/tests/gpu/workload.py
say "plain run"
timeout 120 "$PY" "$W" plain "$STEPS" | tail -1 >"$OUT/plain.json"
say "ringprof run (CUDA_INJECTION64_PATH)"
RINGPROF_SOCKET=$SOCK RINGPROF_CUPTI_LIB=$CUPTI CUDA_INJECTION64_PATH=$SO \
	timeout 120 "$PY" "$W" plain "$STEPS" 2>"$OUT/ringprof-run.stderr" | tail -1 >"$OUT/ringprof.json"
sleep 1 # the last buffers: flushed at exit, drained within a poll
"${CLI[@]}" snapshot --last 120s --name gpucheck --json >"$OUT/snapshot.json"
SESSION=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["path"])' "$OUT/snapshot.json")
"${CLI[@]}" export "$SESSION" --format json -o "$OUT/session.json"
"${CLI[@]}" export "$SESSION" --format perfetto -o "$OUT/session.pftrace"
"${CLI[@]}" export "$SESSION" --format xplane -o "$OUT/session.xplane.pb"
"${CLI[@]}" summary "$SESSION" >"$OUT/summary.txt"
"${CLI[@]}" status >"$OUT/status.txt" 2>&1 || true
say "torch.profiler run"
timeout 180 "$PY" "$W" torch "$STEPS" | tail -1 >"$OUT/torch.json"

"$PY" - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
load = lambda n: json.load(open(f"{out}/{n}"))
plain, rp, tp, session = load("plain.json"), load("ringprof.json"), load("torch.json"), load("session.json")
steps = plain["steps"]
ours = {}
for e in session["trace_events"]:
    if e["type"] == "gpu_kernel":
        k = ours.setdefault(e["name"], [0, 0.0])
        k[0] += 1
        k[1] += e["duration"] / 1e3
# Both runs executed warm-up + steps iterations; torch.profiler saw only
# the profiled steps: compare per-step counts and per-kernel mean times.
problems = []
for name, (n, us) in tp["kernels"].items():
    if name not in ours:
        problems.append(f"kernel {name} missing from ringprof")
        continue
    m, ous = ours[name]
    if abs(m / (steps + 20) - n / steps) > 0.1 * n / steps:
        problems.append(f"{name}: {m} in ringprof over {steps + 20} steps vs {n} in torch over {steps}")
    if abs(ous / m - us / n) > 0.1 * us / n:
        problems.append(f"{name}: mean {ous / m:.1f} us vs torch {us / n:.1f} us")
fig = {
    "device": open(f"{out}/gpus.txt").read().strip(),
    "step_ms": {"plain": plain["step_ms"], "ringprof": rp["step_ms"], "torch.profiler": tp["step_ms"]},
    "slowdown_pct": {"ringprof": 100 * (rp["step_ms"] / plain["step_ms"] - 1),
                     "torch.profiler": 100 * (tp["step_ms"] / plain["step_ms"] - 1)},
    "kernels": {"ringprof": ours, "torch.profiler": tp["kernels"]},
    "problems": problems,
}
json.dump(fig, open(f"{out}/figures.json", "w"), indent=1)
print(json.dumps({k: fig[k] for k in ("step_ms", "slowdown_pct", "problems")}, indent=1))
sys.exit(1 if problems or not ours else 0)
PY
say "done: $OUT/figures.json"
