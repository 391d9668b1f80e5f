#!/usr/bin/env bash
# Runs inside test_service.sh's container, under systemd, as a oneshot
# unit: installs the packages from /debs and checks ringprofd.service
# there.  Writes PASS or "FAIL: why" to /out/result; its log to /out/log.
set -euo pipefail
exec >/out/log 2>&1
trap 'echo "FAIL: line $LINENO: $BASH_COMMAND" >/out/result; journalctl -u ringprofd --no-pager | tail -n 20' ERR
sock=/run/ringprof/ringprofd.sock
show() { systemctl show -p "$1" --value ringprofd; }
expect() { # what actual pattern
	# shellcheck disable=SC2053 # $3 is a glob pattern
	if [[ $2 != $3 ]]; then
		echo "FAIL: $1 is '$2', expected '$3'" | tee /out/result
		journalctl -u ringprofd --no-pager | tail -n 20
		exit 1
	fi
	echo "ok: $1: $2"
}

dpkg -i /debs/ringprof_*.deb /debs/libringprof0_*.deb /debs/libringprof-dev_*.deb
expect "unit enabled" "$(systemctl is-enabled ringprofd)" enabled
# The postinst starts it only where policy-rc.d allows: start it here.
# Type=notify: this returns once READY=1 came.
systemctl start ringprofd
expect "state" "$(show ActiveState)/$(show SubState)" active/running
expect "STATUS" "$(show StatusText)" "Recording: 1 ring, * events held, * dropped, 0 open sessions; cpu_sampler running; host_metrics running; psi running; gpu_pm disabled; xla running"
pid=$(show MainPID)
expect "bounding set" "$(awk '/^CapBnd/ { print $2 }' /proc/"$pid"/status)" 000000c000280004
expect "no_new_privs" "$(awk '/^NoNewPrivs/ { print $2 }' /proc/"$pid"/status)" 1
expect "seccomp" "$(awk '/^Seccomp:/ { print $2 }' /proc/"$pid"/status)" 2
expect "gid" "$(awk '/^Gid/ { print $2 }' /proc/"$pid"/status)" "$(getent group ringprof | cut -d: -f3)"
expect "runtime dir" "$(stat -c '%A %U %G' /run/ringprof)" "drwxr-x--- root ringprof"
expect "control socket" "$(stat -c '%A %U %G' $sock)" "srw-rw---- root ringprof"
expect "producer socket" "$(stat -c '%A %U %G' $sock.producers)" "srw-rw---- root ringprof"

# A member of ringprof drives it and annotates into it; others cannot.
useradd -M -G ringprof member
useradd -M outsider
runuser -u member -- ringprof --socket $sock status
if runuser -u outsider -- ringprof --socket $sock status; then
	echo "FAIL: a user outside group ringprof reached the daemon" | tee /out/result
	exit 1
fi
# shellcheck disable=SC2046 # pkg-config prints several words
cc -std=c17 -o /tmp/annotate /src/lib/examples/annotate.c $(pkg-config --cflags --libs ringprof)
out=$(runuser -u member -- env RINGPROF_SOCKET=$sock /tmp/annotate 200)
expect "annotate" "$out" "200 steps, result *, connected 1, dropped 0"
session=$(runuser -u member -- ringprof --socket $sock --json snapshot --last 30s --reason service-test)
path=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["path"])' <<<"$session")
expect "session group" "$(stat -c %G "$path" "$path"/*.manifest.json | sort -u)" ringprof
runuser -u member -- ringprof --socket $sock summary "$path" | tee /tmp/summary
grep -q '^step  *200 ' /tmp/summary
# The CPU sampler ran inside the sandbox: the compiler above, at least.
grep -Eq ' [1-9][0-9]* CPU samples' /tmp/summary
# The exports, written inside the sandbox too (ProtectSystem=strict: only
# /var/lib/ringprof is writable, so XSpace spills beside its file).
for _ in $(seq 150); do
	compgen -G "$path/*.summary.txt" >/dev/null && break
	sleep 0.2
done
host=$(basename "$path"/*.manifest.json .manifest.json)
for suffix in xplane.pb pftrace cpu.pb.gz json summary.txt; do
	expect "export $suffix" "$(stat -c %s "$path/$host.$suffix")" "[1-9]*"
done
expect "exports failed" "$(curl -s --unix-socket $sock http://localhost/metrics |
	awk '/^ringprof_exports_total\{result="failed"\}/ { print $2 }')" 0

# The watchdog: pings keep a working daemon alive at WatchdogSec=2s; a
# stopped one is killed and restarted.
mkdir -p /run/systemd/system/ringprofd.service.d
printf '[Service]\nWatchdogSec=2s\n' >/run/systemd/system/ringprofd.service.d/watchdog.conf
systemctl daemon-reload
systemctl restart ringprofd
sleep 5
expect "restarts after 5 s of pings" "$(show NRestarts)" 0
pid=$(show MainPID)
kill -STOP "$pid"
for _ in $(seq 100); do
	[[ $(show NRestarts) == 1 && $(show SubState) == running ]] && break
	sleep 0.2
done
expect "restarts after SIGSTOP" "$(show NRestarts)" 1
journalctl -u ringprofd --no-pager | grep -q "Watchdog timeout"
[[ $(show MainPID) != "$pid" ]]
runuser -u member -- ringprof --socket $sock status >/dev/null

systemctl stop ringprofd
expect "stop" "$(show Result)/$(show ExecMainStatus)" success/0
journalctl -u ringprofd --no-pager | tail -n 30
echo PASS >/out/result
