# The prelude the GPU checks share (sourced): paths, a log in $OUT, say and
# fail, how to run ringprof's own programs, where libcupti is, and a clean
# "no GPU" exit where there is no NVIDIA driver.  Set LOG (the log's name)
# and TAG (say's prefix) first.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${RINGPROF_BUILD:-$ROOT/build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
OUT=${OUT:-$ROOT/gpu-out}
# Where the checks write what they find; run.sh packs it into $OUT (the
# device machine returns at most 8 files from $OUT).
WORK=${GPU_WORK:-$OUT}
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/$LOG") 2>&1
say() { echo "[$(date -u +%T)] $TAG$*"; }
fail() { say "FAIL: $*"; exit 1; }

if ! ls /proc/driver/nvidia/gpus/* >/dev/null 2>&1 && ! command -v nvidia-smi >/dev/null; then
	say "no GPU: no NVIDIA driver on this host; nothing to check here"
	exit 0
fi
# A driver but no torch with CUDA is a broken check, not a host without a GPU.
PY=${PYTHON:-python3}
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
	fail "$PY has no torch with CUDA on this GPU host (set PYTHON)"

# libcupti.so.13: the torch wheel's (nvidia-cuda-cupti), the copy torch
# itself loads, else the system's.
CUPTI=${RINGPROF_CUPTI_LIB:-$("$PY" - <<'PY'
import glob, os
roots = []
try:  # nvidia-cuda-cupti: nvidia/cuda_cupti/lib (CUDA 12), nvidia/cu13/lib (13)
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    pass
for r in roots + ["/usr/local/cuda/lib64", "/usr/local/cuda/extras/CUPTI/lib64"]:
    for f in sorted(glob.glob(os.path.join(r, "**", "libcupti.so.13*"), recursive=True)):
        print(f); raise SystemExit
PY
)}
[ -n "$CUPTI" ] || fail "no libcupti.so.13 found (set RINGPROF_CUPTI_LIB)"
# The daemon's PM sampler dlopens libcupti.so.13 by name.
CUPTI_DIR=$WORK/cupti
mkdir -p "$CUPTI_DIR"
ln -sf "$CUPTI" "$CUPTI_DIR/libcupti.so.13"

# ringprof's programs run through OURS: with the Debian libraries carried
# along (../shared/tools/device-libs) and libcupti; never the workloads:
# an older libstdc++ there would shadow the machine's own.  env execs, so
# a program started in the background keeps the pid $! names.
DEVLIBS=${RINGPROF_DEVLIBS:-$ROOT/.devlibs/lib}
OURS=(env "LD_LIBRARY_PATH=$DEVLIBS:$CUPTI_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")

# ringprofd in the background on a private socket and directory, with
# config $1 (may be empty), its stderr in $WORK/$2; sets DAEMON (pid),
# SOCK and CLI.
start_daemon() {
	local tmp conf=()
	tmp=$(mktemp -d)
	SOCK=$tmp/ctl.sock
	if [ -n "${1:-}" ]; then
		printf '%b' "$1" >"$tmp/ringprofd.conf"
		conf=(--config "$tmp/ringprofd.conf")
	fi
	"${OURS[@]}" "$BUILD/daemon/ringprofd" --foreground "${conf[@]}" --socket "$SOCK" \
		--state-dir "$tmp/state" --logdir "$tmp/logs" 2>>"$WORK/$2" &
	DAEMON=$!
	for _ in $(seq 100); do [ -S "$SOCK.producers" ] && break; sleep 0.1; done
	[ -S "$SOCK.producers" ] || fail "ringprofd did not start ($2)"
	CLI=("${OURS[@]}" "$BUILD/cli/ringprof" --socket "$SOCK")
}
stop_daemon() {
	kill "$DAEMON" 2>/dev/null || true
	wait "$DAEMON" 2>/dev/null || true
}
