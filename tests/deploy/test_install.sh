#!/usr/bin/env bash
# `meson install` into a DESTDIR: every file lands where it should, the
# installed unit passes `systemd-analyze verify` and keeps its exposure
# (`systemd-analyze security`) at or below docs/deployment.md's figure,
# and the sysusers.d and tmpfiles.d files create the ringprof group and
# directories in a scratch root.
#   test_install.sh MESON BUILD_DIR PREFIX LIBDIR SBINDIR UNITDIR SYSUSERSDIR TMPFILESDIR DOCDIR
# (absolute installation directories, as deploy/meson.build has them)
set -euo pipefail
meson=$1 build=$2 prefix=$3 libdir=$4 sbindir=$5 unitdir=$6 sysusersdir=$7 tmpfilesdir=$8 docdir=$9
# Exposure x 10, as --threshold takes it: the figure docs/deployment.md gives.
max_exposure=33

if [[ $(id -u) -ne 0 ]]; then
	echo "SKIP: needs root (the tmpfiles.d check creates files owned by the ringprof group)"
	exit 77
fi
for tool in systemd-analyze systemd-sysusers systemd-tmpfiles; do
	if ! command -v $tool >/dev/null; then
		echo "SKIP: $tool is missing (Debian package systemd)"
		exit 77
	fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest
"$meson" install -C "$build" --destdir "$dest" --no-rebuild --quiet

fail=0
expect() { # path below DESTDIR
	if [[ -e $dest$1 || -L $dest$1 ]]; then
		echo "installed: $1"
	else
		echo "MISSING: $1" >&2
		fail=1
	fi
}
expect "$sbindir/ringprofd"
expect "$prefix/bin/ringprof"
expect "$libdir/libringprof.so"
expect "$libdir/libringprof.so.0"
expect "$libdir/libringprof.a"
expect "$libdir/pkgconfig/ringprof.pc"
expect "$prefix/include/ringprof/ringprof.h"
expect "$unitdir/ringprofd.service"
expect "$sysusersdir/ringprof.conf"
expect "$tmpfilesdir/ringprof.conf"
expect "$docdir/deployment.md"
expect "$docdir/ringprofd.conf.example"
((fail == 0))

unit=$dest$unitdir/ringprofd.service
grep -qx "ExecStart=$sbindir/ringprofd --foreground" "$unit"
# verify wants ExecStart's binary: the same unit, pointed into DESTDIR.
sed "s|^ExecStart=/|ExecStart=$dest/|" "$unit" >"$tmp/ringprofd.service"
# It exits 0 on unknown keys and other warnings: any output fails.
if ! out=$(systemd-analyze verify "$tmp/ringprofd.service" 2>&1) || [[ -n $out ]]; then
	echo "systemd-analyze verify: $out" >&2
	exit 1
fi
echo "systemd-analyze verify: ok"
systemd-analyze security --offline=true "$unit" | tail -n 1
if ! systemd-analyze security --offline=true --threshold=$max_exposure "$unit" >/dev/null; then
	echo "exposure is above $((max_exposure / 10)).$((max_exposure % 10)) (docs/deployment.md):" \
		"keep the sandboxing, or justify the change there and here" >&2
	exit 1
fi

# The group first (tmpfiles.d names it), as the Debian postinst does.
root=$tmp/root
mkdir -p "$root/etc"
systemd-sysusers --root="$root" "$dest$sysusersdir/ringprof.conf"
gid=$(awk -F: '$1 == "ringprof" { print $3 }' "$root/etc/group")
[[ -n $gid ]] || { echo "sysusers.d did not create the ringprof group" >&2; exit 1; }
systemd-tmpfiles --root="$root" --create "$dest$tmpfilesdir/ringprof.conf"
check_dir() { # path mode
	local got
	got=$(stat -c '%a %u %g' "$root$1")
	if [[ $got != "$2 0 $gid" ]]; then
		echo "$1: mode, uid, gid are $got, expected $2 0 $gid" >&2
		exit 1
	fi
	echo "tmpfiles.d: $1 $got"
}
check_dir /var/lib/ringprof 750
check_dir /var/lib/ringprof/rings 750
check_dir /var/lib/ringprof/sessions 2770
