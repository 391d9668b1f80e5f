#!/bin/bash
# The GPU check of docs/gpu.md, for a lent GPU machine.  Nothing is built
# there: carry a build (RINGPROF_BUILD, default build/) and .devlibs (see
# ../shared/notes/devices.md).  About 3 minutes on an H100.  The log,
# figures.json, pm_figures.json and everything else packed in
# gpucheck.tar.gz go to $OUT (default ./gpu-out).  In order:
#   1. the workload (workload.py) with no profiler and no daemon;
#   2. ringprofd from the build, PM sampling on (its defaults);
#   3. the workload again: three times plain and three times with
#      CUDA_INJECTION64_PATH = libringprof-cupti.so, alternated, then under
#      torch.profiler;
#   4. with the injection: torch.profiler in the middle of a run (coexist),
#      NVTX ranges through CUPTI (RINGPROF_NVTX=1), and a JAX program on the
#      GPU whose profiler server the daemon pulls (collectors/xla);
#   5. one snapshot, exported, judged by analyze.py: kernel names, counts
#      and durations against torch.profiler's (10%), step-time slowdowns,
#      what each of the runs in 4 left in the session;
#   6. pm_check.sh once this daemon is gone (one PM session per GPU).
# Every step runs even when one before it failed; the exit status says
# whether all passed.  On a host without a GPU it says "no GPU" and exits
# 0 (the rehearsal).
set -uo pipefail
OUT=${OUT:-$(cd "$(dirname "$0")/../.." && pwd)/gpu-out}
export GPU_WORK=${GPU_WORK:-$(mktemp -d /tmp/gpucheck.XXXXXX)}
LOG=run.log TAG=""
# shellcheck source=tests/gpu/common.sh
source "$(dirname "$0")/common.sh"
STEPS=${STEPS:-2000}
W=$ROOT/tests/gpu/workload.py
SO=$BUILD/collectors/cupti/libringprof-cupti.so
[ -f "$SO" ] || fail "$SO is missing: build with the CUDA headers (meson -Dcupti=enabled)"

{
	nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version --format=csv
	nvidia-smi -L
	uname -r
	"$PY" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
	echo "libcupti: $CUPTI"
	ls /proc/driver/nvidia/gpus/ && cat /proc/driver/nvidia/gpus/*/information
	grep -i profil /proc/driver/nvidia/params || true
} >"$WORK/host.txt" 2>&1
cat "$WORK/host.txt"

# workload TAG MODE [VAR=VALUE...]: one run, its JSON line in TAG.json.
workload() {
	local tag=$1 mode=$2
	shift 2
	say "workload $tag ($mode) $*"
	env "$@" timeout 60 "$PY" "$W" "$mode" "$STEPS" >"$WORK/$tag.json" 2>"$WORK/$tag.stderr"
	local rc=$?
	echo "$rc" >"$WORK/$tag.rc"
	[ "$rc" = 0 ] || say "workload $tag exited $rc: $(tail -3 "$WORK/$tag.stderr")"
}
INJECT=(RINGPROF_CUPTI_LIB="$CUPTI" CUDA_INJECTION64_PATH="$SO")

workload plain0 plain
workload plain0b plain
start_daemon "" ringprofd.log
export RINGPROF_SOCKET=$SOCK
"${CLI[@]}" status >"$WORK/status-start.txt" 2>&1
grep -E "gpu|cpu|sampler" "$WORK/status-start.txt" | head -20
# Alternated, so that drift of the machine falls on both.
workload plain1 plain
workload ringprof1 plain "${INJECT[@]}"
"${CLI[@]}" status >"$WORK/status-ringprof.txt" 2>&1
workload plain2 plain
workload ringprof2 plain "${INJECT[@]}"
workload plain3 plain
workload ringprof3 plain "${INJECT[@]}"
workload torch torch
workload coexist coexist "${INJECT[@]}"
workload coexist_shared coexist "${INJECT[@]}" RINGPROF_SHARE=1
workload nvtx nvtx "${INJECT[@]}" RINGPROF_NVTX=1 NVTX_INJECTION64_PATH="$CUPTI"
workload torchfirst torch-first "${INJECT[@]}"
workload torchfirst_shared torch-first "${INJECT[@]}" RINGPROF_SHARE=1
say "JAX on the GPU, pulled by the daemon"
timeout 90 "$PY" "$ROOT/tests/gpu/xla_gpu.py" 8 >"$WORK/xla.json" 2>"$WORK/xla.stderr"
echo $? >"$WORK/xla.rc"
sleep 2 # the XLA collector's last window, the last CUPTI buffers
"${CLI[@]}" status >"$WORK/status-end.txt" 2>&1
cat "$WORK/status-end.txt"
"${CLI[@]}" snapshot --last 10m --name gpucheck --json >"$WORK/snapshot.json"
SESSION=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["path"])' "$WORK/snapshot.json")
for f in json:session.json perfetto:session.pftrace xplane:session.xplane.pb; do
	"${CLI[@]}" export "$SESSION" --format "${f%%:*}" -o "$WORK/${f#*:}" ||
		say "FAIL: export ${f%%:*}"
done
"${CLI[@]}" summary "$SESSION" >"$WORK/summary.txt" 2>&1
# Where the daemon's own CPU goes (PM sampling at 1 ms among it).
"${CLI[@]}" export "$SESSION" --format folded --pid "$DAEMON" -o "$WORK/daemon.folded" ||
	say "FAIL: export folded"
head -60 "$WORK/summary.txt"
stop_daemon
unset RINGPROF_SOCKET

"$PY" "$ROOT/tests/gpu/analyze.py" "$WORK" >"$WORK/analyze.txt" 2>&1
RC=$?
cat "$WORK/analyze.txt"
cp "$WORK/figures.json" "$OUT/" 2>/dev/null

bash "$ROOT/tests/gpu/pm_check.sh" || RC=1
cp "$WORK/pm_figures.json" "$OUT/" 2>/dev/null
# The session itself stays behind: only what the figures came from travels.
tar -czf "$OUT/gpucheck.tar.gz" -C "$WORK" --exclude=cupti . &&
	[ "$(stat -c %s "$OUT/gpucheck.tar.gz")" -lt 15000000 ] ||
	tar -czf "$OUT/gpucheck.tar.gz" -C "$WORK" --exclude=cupti --exclude='session.*' .
ls -l "$OUT"
say "done ($([ "$RC" = 0 ] && echo passed || echo FAILED)): $OUT/figures.json"
exit "$RC"
