#!/usr/bin/env bash
# The ringprof CLI against fake_daemon (the real API with in-memory ops):
# output, exit codes (0 ok, 1 daemon error, 2 usage), --json, capture.
# Usage: test_cli.sh RINGPROF FAKE_DAEMON
set -uo pipefail
ringprof=$1
fake=$2
tmp=$(mktemp -d /tmp/rp-cli-XXXXXX)
sock=$tmp/ringprofd.sock
"$fake" "$sock" 2>"$tmp/daemon.err" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
[[ -S $sock ]] || { echo "fake daemon did not start: $(cat "$tmp/daemon.err")"; exit 1; }
export RINGPROF_SOCKET=$sock

failures=0
out= err= rc=
run() { # args...: runs ringprof, keeps stdout, stderr and status
  "$ringprof" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  out=$(cat "$tmp/out")
  err=$(cat "$tmp/err")
}
fail() {
  echo "FAIL: $*"
  echo "  stdout: $out"
  echo "  stderr: $err"
  failures=$((failures + 1))
}
expect_rc() { # status, description
  [[ $rc == "$1" ]] || fail "$2: exit $rc, expected $1"
}
expect_out() { # text, description
  grep -qF -- "$1" <<<"$out" || fail "$2: stdout lacks '$1'"
}
expect_no_out() {
  ! grep -qF -- "$1" <<<"$out" || fail "$2: stdout has '$1'"
}
expect_err() {
  grep -qF -- "$1" <<<"$err" || fail "$2: stderr lacks '$1'"
}
is_json() { # key the object must have
  python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if sys.argv[1] in d else 1)' "$1" <<<"$out" ||
    fail "--json: not a JSON object with '$1'"
}

# status
run status
expect_rc 0 status
expect_out "ringprofd 0.1.0 on fakehost" status
expect_out "DEVICE  FILL  HORIZON" status
expect_out "7.8%" status
expect_out "41s" status
expect_out "512.0 KiB of 256.0 MiB" status
expect_out "open sessions: none" status
expect_out "collectors:" status
expect_out "  cpu_sampler: disabled: loading the CPU sampler needs CAP_BPF and CAP_PERFMON (or root): run ringprofd as root" status
run --json status
expect_rc 0 "--json status"
is_json rings
run status --json
is_json version

# snapshot: the window covered vs requested, per-device counts
run snapshot --last 10s --run short --name s1 --reason "slow step"
expect_rc 0 snapshot
expect_out "s1 (snapshot, complete)" snapshot
expect_out "/tmp/fake-sessions/short/plugins/profile/s1" snapshot
grep -qE '^requested +10s ' <<<"$out" || fail "snapshot: no requested 10s line"
grep -qE '^covered +5s ' <<<"$out" || fail "snapshot: no covered 5s line"
# The reason is on the covered line, and what was asked stays on requested.
grep -qE '^covered +5s .* \(the rings hold 5s\)$' <<<"$out" ||
  fail "snapshot: covered 5s without its reason"
expect_out "why: a ring keeps about budget" snapshot
grep -qE '^gpu0 +34 +1 +2 +2.1 KiB$' <<<"$out" || fail "snapshot: gpu0 row"
run snapshot --last 2s
expect_rc 0 "full snapshot"
expect_no_out "why: a ring keeps" "full snapshot"
run snapshot --end 2020-01-02T03:04:05Z --last 1s --json
expect_rc 0 "snapshot --end"
is_json requested
python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["requested"]["end_wall_ns"] != 1577934245000000000)' <<<"$out" ||
  fail "snapshot --end: window does not end at the time given"

# --wait: a session without exports to come returns at once; the timeout
# goes with --wait and is a duration
run snapshot --last 2s --wait
expect_rc 0 "snapshot --wait, nothing to export"
run stop open1 --wait-timeout 5s
expect_rc 2 "--wait-timeout alone"
expect_err "--wait-timeout goes with --wait" "--wait-timeout alone"
run snapshot --wait --wait-timeout soon
expect_rc 2 "--wait-timeout not a duration"
expect_err "--wait-timeout:" "--wait-timeout not a duration"

# daemon errors: exit 1 and its message
run snapshot --name busy
expect_rc 1 "snapshot busy"
expect_err "ringprof: the log directory /tmp/fake-sessions is full" "snapshot busy"
run snapshot --last 2h
expect_rc 1 "snapshot over the limit"
expect_err "limit of 1h" "snapshot over the limit"
run --socket "$tmp/none.sock" status
expect_rc 1 "missing socket"
expect_err "no such socket: is the daemon running?" "missing socket"

# usage errors: exit 2 naming the problem, with usage
run snapshot --last -5s
expect_rc 2 "negative --last"
expect_err "--last: '-5s' is negative" "negative --last"
run snapshot --last 30
expect_rc 2 "--last without unit"
expect_err "add a unit" "--last without unit"
run snapshot --lst 3s
expect_rc 2 "unknown option"
expect_err "unknown option '--lst'" "unknown option"
expect_err "usage: ringprof snapshot" "unknown option"
run start --last 3s
expect_rc 2 "option of another command"
expect_err "unknown option '--last'" "option of another command"
run bogus
expect_rc 2 "unknown command"
expect_err "unknown command 'bogus'" "unknown command"
expect_err "usage:" "unknown command"
run --bogus status
expect_rc 2 "unknown global option"
expect_err "unknown option '--bogus'" "unknown global option"
run
expect_rc 2 "no command"
run stop
expect_rc 2 "stop without id"
run stop ../x
expect_rc 2 "stop ../x"
expect_err "'/' is not allowed" "stop ../x"
run snapshot --name 'a b'
expect_rc 2 "bad name"
expect_err "session name" "bad name"
run capture
expect_rc 2 "capture without duration"
expect_err "--duration" "capture without duration"
run capture --duration 0s
expect_rc 2 "capture 0s"
expect_err "zero" "capture 0s"
run start --cpu-sample-hz 0
expect_rc 2 "--cpu-sample-hz 0"
expect_err "--cpu-sample-hz: '0' is outside 1..10000" "--cpu-sample-hz 0"
run capture --duration 1s --cpu-sample-hz 99x
expect_rc 2 "--cpu-sample-hz 99x"
expect_err "'99x' is not a whole number" "--cpu-sample-hz 99x"
run snapshot --cpu-sample-hz 999
expect_rc 2 "--cpu-sample-hz on snapshot"
expect_err "unknown option '--cpu-sample-hz'" "--cpu-sample-hz on snapshot"

# help and version
run --help
expect_rc 0 "--help"
expect_out "usage: ringprof" "--help"
expect_out "capture" "--help"
for c in run doctor shutdown; do expect_out "  $c " "--help lists $c"; done
run run --help
expect_rc 0 "run --help"
expect_out "--no-python-perf" "run --help"
run doctor --help
expect_rc 0 "doctor --help"
expect_out "--json" "doctor --help"
run snapshot -h
expect_rc 0 "snapshot -h"
expect_out "--last DURATION" "snapshot -h"
expect_out "--hosts LIST" "snapshot -h"

# snapshot --hosts: a token is required; hosts that cannot be reached are
# reported one by one (the fan-out itself: tests/integration/test_multihost.py)
(unset RINGPROF_TOKEN; run snapshot --hosts 127.0.0.1:1; expect_rc 2 "--hosts without token"
 expect_err "give --token-file FILE or set RINGPROF_TOKEN" "--hosts without token"
 [[ $failures == 0 ]]) || failures=$((failures + 1))
run snapshot --socket "$sock" --hosts 127.0.0.1:1
expect_rc 2 "--hosts with --socket"
expect_err "give --socket or --hosts, not both" "--hosts with --socket"
echo short >"$tmp/token"
run snapshot --hosts 127.0.0.1:1 --token-file "$tmp/token"
expect_rc 2 "--hosts short token"
expect_err "shorter than 16 characters" "--hosts short token"
RINGPROF_TOKEN=0123456789abcdef0123 run snapshot --hosts 127.0.0.1:1,127.0.0.1:2 --last 1s
expect_rc 1 "--hosts all down"
grep -qE '^127\.0\.0\.1:1 +cannot reach ringprofd at http://127\.0\.0\.1:1: ' <<<"$out" ||
  fail "--hosts: row of a host down"
expect_err "2 of 2 hosts failed" "--hosts all down"
run --version
expect_rc 0 "--version"
expect_out "ringprof 0.1.0" "--version"

# start / sessions / stop
run start --name open1 --run exp
expect_rc 0 start
[[ $out == open1 ]] || fail "start: prints '$out', expected the id alone"
run --json start --name hz1 --cpu-sample-hz 999
expect_rc 0 "start --cpu-sample-hz"
python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["trigger"]["cpu_sample_hz"] != 999)' <<<"$out" ||
  fail "start --cpu-sample-hz 999: the daemon was not asked for 999 Hz"
run stop hz1
expect_rc 0 "stop hz1"
run status
expect_out "open sessions: open1" "status with a session"
run sessions
expect_rc 0 sessions
grep -qE '^CREATED +ID +RUN +HOST +KIND +STATE +WINDOW +EVENTS +PATH$' <<<"$out" || fail "sessions: header"
grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}Z +open1 +exp +fakehost +session +open +- +- +/tmp/fake-sessions/exp/plugins/profile/open1$' <<<"$out" ||
  fail "sessions: open1 row"
grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}Z +s1 +short +fakehost +snapshot +complete +5s +1234 ' <<<"$out" || fail "sessions: s1 row"

# keep
run keep s1
expect_rc 0 keep
expect_out "kept s1: retention will not delete it (remove /tmp/fake-sessions/short/plugins/profile/s1/KEEP to undo)" keep
run sessions
grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}Z +s1 +short +fakehost +snapshot +complete,kept +5s ' <<<"$out" || fail "sessions: s1 kept"
run keep nosuch
expect_rc 1 "keep unknown"
expect_err "no session 'nosuch'" "keep unknown"
run keep ../x
expect_rc 2 "keep bad id"
run stop open1
expect_rc 0 stop
expect_out "open1 (session, complete)" stop
run stop open1
expect_rc 1 "stop twice"
expect_err "already complete" "stop twice"
run stop nosuch
expect_rc 1 "stop unknown"
expect_err "no session 'nosuch'" "stop unknown"
run --json sessions
is_json sessions

# capture waits until the daemon completes the session
start=$(date +%s%N)
run capture --duration 400ms --name cap1
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
expect_rc 0 capture
expect_out "cap1 (capture, complete)" capture
grep -qE '^requested +400ms ' <<<"$out" || fail "capture: requested 400ms"
((elapsed_ms >= 400)) || fail "capture returned after ${elapsed_ms}ms, before the 400ms were over"
run --json capture --duration 100ms --cpu-sample-hz 499
expect_rc 0 "--json capture"
python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["trigger"]["cpu_sample_hz"] != 499)' <<<"$out" ||
  fail "capture --cpu-sample-hz 499: the daemon was not asked for 499 Hz"
python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["state"] != "complete")' <<<"$out" ||
  fail "--json capture: not complete"

# export: usage errors before anything is read; a directory that is no session.
run export
expect_rc 2 "export without a session"
run export "$tmp" --format pdf
expect_rc 2 "export --format pdf"
expect_err "unknown export format 'pdf'" "export --format pdf"
run export "$tmp" --format json,pprof -o "$tmp/x"
expect_rc 2 "export two formats to one -o"
expect_err "one --format" "export two formats to one -o"
run export "$tmp" --group gpu
expect_rc 2 "export --group gpu"
expect_err "gpu" "export --group gpu"
run export "$tmp" --json
expect_rc 2 "export --json"
expect_err "unknown option '--json'" "export --json"
run export "$tmp"
expect_rc 1 "export of a directory without manifests"
expect_err "no readable <host>.manifest.json" "export of a directory without manifests"
[[ -z $(find "$tmp" -name '*.tmp*') ]] || fail "export left a temporary file"

# A daemon without a shutdown hook (the fake) says how to stop it instead.
run shutdown
expect_rc 1 "shutdown without a hook"
expect_err "cannot be stopped through its API" "shutdown without a hook"

# A clean shutdown (under ASan this also checks the API for leaks).
kill -TERM $daemon
wait $daemon
daemon_rc=$?
((daemon_rc == 0)) || { echo "FAIL: fake daemon exited $daemon_rc: $(cat "$tmp/daemon.err")"; failures=$((failures + 1)); }
[[ ! -e $sock ]] || { echo "FAIL: the socket outlived the daemon"; failures=$((failures + 1)); }

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all CLI checks passed"
