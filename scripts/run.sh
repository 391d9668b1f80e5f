#!/usr/bin/env bash
# Install what is missing, build, and run the ringprof demo.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
[[ -f build/build.ninja ]] || meson setup build >/dev/null
ninja -C build >/dev/null
exec build/demo/ringbuf-demo "$@"
