#!/usr/bin/env bash
# Build ringprof and run every test: the whole suite with -Werror, then the
# unit and integration tests again under ASan+UBSan.  Ends with "N passed, N failed".
#   --skip SUITE   leave a suite out of every pass (unit, integration, package), e.g. the
#                  package suite, which installs and purges Debian packages.
set -uo pipefail
cd "$(dirname "$0")/.."

skip=()
while (($#)); do
  case $1 in
    --skip) [[ $# -ge 2 ]] || { echo "test.sh: --skip needs a suite name (unit, integration, package)" >&2; exit 2; }
            skip+=(--no-suite "$2"); shift 2 ;;
    *) echo "test.sh: unknown argument $1 (usage: scripts/test.sh [--skip SUITE]...)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh || exit 1

setup() { # dir, options...
  local dir=$1; shift
  if [[ -f $dir/build.ninja ]]; then
    meson configure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}

status=0
setup build -Dwerror=true || exit 1
ninja -C build || exit 1
meson test -C build "${skip[@]}" --print-errorlogs --num-processes 2 || status=1
cp build/meson-logs/testlog.json build/testlog-full.json 2>/dev/null

setup build-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false || exit 1
ninja -C build-asan || exit 1
# UBSan aborts on the first report, so a finding fails its test.
ubsan=halt_on_error=1:abort_on_error=1:print_stacktrace=1
UBSAN_OPTIONS=$ubsan ASAN_OPTIONS=detect_leaks=1 \
  meson test -C build-asan --suite unit "${skip[@]}" --print-errorlogs --num-processes 2 || status=1
cp build-asan/meson-logs/testlog.json build-asan/testlog-unit.json 2>/dev/null
# The integration suite again with the sanitized daemon, CLI and library.
# Python and the compilers the tests start load the sanitized libringprof
# without being built with ASan: its runtime must be preloaded into them,
# and their own leaks are not ours (the unit pass checks for leaks).
# Sanitized, the suite runs several times slower: so may its tests.
RINGPROF_SANITIZED=1 LD_PRELOAD=$(cc -print-file-name=libasan.so) \
  UBSAN_OPTIONS=$ubsan ASAN_OPTIONS=detect_leaks=0 \
  meson test -C build-asan --suite integration "${skip[@]}" --timeout-multiplier 3 --print-errorlogs \
  --num-processes 2 || status=1

python3 - build/testlog-full.json build-asan/testlog-unit.json build-asan/meson-logs/testlog.json <<'PY'
import json, sys
passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        failed += 1
        continue
    for line in lines:
        r = json.loads(line).get("result")
        if r in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif r == "SKIP":
            skipped += 1
        else:
            failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
