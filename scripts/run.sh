#!/usr/bin/env bash
# Install what is missing, build, and run ringprof's main job: the daemon
# with its embedded defaults, a fake training loop annotating its steps,
# a snapshot of the last seconds written in every export format, and a
# summary of what the session holds.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
[[ -f build/build.ninja ]] || meson setup build >/dev/null
ninja -C build >/dev/null

ringprofd=build/daemon/ringprofd
ringprof=build/cli/ringprof

# The daemon with no configuration at all; reuse one that already runs.
if ! $ringprof status >/dev/null 2>&1; then
  echo "== starting ringprofd (embedded defaults)"
  $ringprofd      # detaches once it serves
fi
$ringprof status

echo
echo "== a fake training loop (2 ranks, 4 s) annotates its steps"
build/demo/train-loop --seconds 4 --ranks 2

echo
echo "== snapshot of the last 3 s"
# --wait: back once the daemon has written the exports ([sessions] exports).
session_json=$($ringprof --json snapshot --last 3s --run demo --reason "README demo" --wait)
path=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["path"])' <<<"$session_json")
echo "session on disk: $path"
ls -l "$path"

echo
echo "== what it holds"
$ringprof summary "$path"
echo
echo "== open it"
logdir=${path%/plugins/profile/*}
echo "XProf:    xprof --logdir $logdir   (or TensorBoard's Profile tab)"
echo "Perfetto: $path/*.pftrace at https://ui.perfetto.dev"
echo "pprof:    go tool pprof -top $path/*.cpu.pb.gz"
echo "scripts:  $path/*.json"
echo
echo "ringprofd keeps running ($ringprof status); stop it with: $ringprof shutdown"
