# The prelude the GPU checks share (sourced): paths, a log in $OUT, say and
# fail, and a clean "no GPU" exit where there is no NVIDIA driver or no CUDA
# for torch.  Set LOG (the log's name) and TAG (say's prefix) first.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${RINGPROF_BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/$LOG") 2>&1
say() { echo "[$(date -u +%T)] $TAG$*"; }
fail() { say "FAIL: $*"; exit 1; }

if ! ls /proc/driver/nvidia/gpus/* >/dev/null 2>&1 && ! command -v nvidia-smi >/dev/null; then
	say "no GPU: no NVIDIA driver on this host; nothing to check here"
	exit 0
fi
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	say "no GPU: torch.cuda is not available to $PY; nothing to check here"
	exit 0
fi
