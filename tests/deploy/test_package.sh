#!/usr/bin/env bash
# The Debian packages, end to end on this machine: build them
# (scripts/build-deb.sh), install them with dpkg -i, check what the
# maintainer scripts did (group, directories, enabled unit), run the
# installed daemon by hand (PID 1 may not be systemd) on scratch paths
# with the unit's group, annotate a program built against the installed
# libringprof, query and snapshot with the installed CLI, then purge
# every package and the group this test created.
#   test_package.sh SOURCE_ROOT
set -euo pipefail
src=$1
packages=(ringprof libringprof0 libringprof-dev)

if [[ $(id -u) -ne 0 ]]; then
	echo "SKIP: needs root to install packages"
	exit 77
fi
for tool in dpkg apt-get git systemd-analyze setpriv cc; do
	if ! command -v $tool >/dev/null; then
		echo "SKIP: $tool is missing"
		exit 77
	fi
done
# The package owns /var/lib/ringprof: its postinst re-owns it, its purge
# deletes the rings there, so a daemon started as root with the default
# paths (scripts/run.sh) would lose its history.
if [[ -e /var/lib/ringprof ]]; then
	echo "/var/lib/ringprof exists (a ringprofd run as root with default paths, e.g." \
		"scripts/run.sh?): installing and purging the package would change it; stop that" \
		"daemon and remove /var/lib/ringprof, or run this test on a clean machine: skipped" >&2
	exit 77 # meson: skipped
fi
# Installed, or removed with its configuration left.
present() {
	local status
	status=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) && [[ $status != *not-installed ]]
}
for p in "${packages[@]}"; do
	if present "$p"; then
		echo "$p is already installed: this test would remove it; run dpkg -P ${packages[*]} first" >&2
		exit 1
	fi
done

tmp=$(mktemp -d)
had_group=$(getent group ringprof >/dev/null && echo yes || echo no)
daemon=
cleanup() {
	if [[ -n $daemon ]] && kill -0 "$daemon" 2>/dev/null; then
		kill -KILL "$daemon"
	fi
	local left=()
	for p in "${packages[@]}"; do
		if present "$p"; then
			left+=("$p")
		fi
	done
	if ((${#left[@]})); then
		dpkg -P "${left[@]}" >/dev/null
	fi
	if [[ $had_group == no ]] && getent group ringprof >/dev/null; then
		groupdel ringprof
	fi
	rm -rf /var/lib/ringprof
	rm -rf "$tmp"
}
trap cleanup EXIT

start=$SECONDS
"$src/scripts/build-deb.sh" "$tmp/debs" >"$tmp/build.log" 2>&1 || {
	tail -n 50 "$tmp/build.log"
	exit 1
}
echo "built in $((SECONDS - start)) s: $(cd "$tmp/debs" && echo *.deb)"
debs=()
for p in "${packages[@]}"; do
	debs+=("$tmp"/debs/"$p"_*.deb)
done
dpkg -i "${debs[@]}"

# What the maintainer scripts did.
getent group ringprof
gid=$(getent group ringprof | cut -d: -f3)
check() { # path "mode uid gid"
	local got
	got=$(stat -c '%a %u %g' "$1")
	[[ $got == "$2" ]] || { echo "$1: mode, uid, gid are $got, expected $2" >&2; exit 1; }
}
check /var/lib/ringprof "750 0 $gid"
check /var/lib/ringprof/rings "750 0 $gid"
check /var/lib/ringprof/sessions "2770 0 $gid"
[[ -L /etc/systemd/system/multi-user.target.wants/ringprofd.service ]]
echo "postinst: group ringprof ($gid), /var/lib/ringprof, unit enabled"
unit=/lib/systemd/system/ringprofd.service
if ! out=$(systemd-analyze verify "$unit" 2>&1) || [[ -n $out ]]; then
	echo "systemd-analyze verify: $out" >&2
	exit 1
fi
systemd-analyze security --offline=true "$unit" | tail -n 1

# The daemon as the unit runs it: root with group ringprof, umask 0027.
sock=$tmp/run/ringprofd.sock
(umask 0027; exec setpriv --regid=ringprof --clear-groups /usr/sbin/ringprofd --foreground \
	--socket "$sock" --state-dir "$tmp/state" --logdir "$tmp/logs") 2>"$tmp/daemon.log" &
daemon=$!
for _ in $(seq 100); do
	[[ -S $sock ]] && /usr/bin/ringprof --socket "$sock" status >/dev/null 2>&1 && break
	kill -0 $daemon 2>/dev/null || { cat "$tmp/daemon.log" >&2; exit 1; }
	sleep 0.1
done
/usr/bin/ringprof --socket "$sock" status
[[ $(stat -c %g "$sock") == "$gid" ]] || { echo "$sock is not group ringprof" >&2; exit 1; }

# A program built against the installed libringprof-dev.
# shellcheck disable=SC2046
cc -std=c17 -Wall -Wextra -Werror -o "$tmp/annotate" "$src/lib/examples/annotate.c" \
	$(pkg-config --cflags --libs ringprof)
RINGPROF_SOCKET=$sock "$tmp/annotate" 200
session=$(/usr/bin/ringprof --socket "$sock" --json snapshot --last 30s --reason package-test)
path=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["path"])' <<<"$session")
summary=$(/usr/bin/ringprof --socket "$sock" summary "$path")
echo "$summary"
grep -q step <<<"$summary"

kill -TERM $daemon
wait $daemon
daemon=
echo "daemon stopped cleanly"

dpkg -P "${packages[@]}"
for f in /usr/sbin/ringprofd /usr/bin/ringprof "$unit" /usr/include/ringprof/ringprof.h \
	/etc/systemd/system/multi-user.target.wants/ringprofd.service; do
	if [[ -e $f || -L $f ]]; then
		echo "$f is left after dpkg -P" >&2
		exit 1
	fi
done
echo "purged; total $((SECONDS - start)) s"
