#!/usr/bin/env bash
# deploy/ringprofd.service under a real systemd, on a machine whose PID 1
# need not be systemd: boots a container (systemd-nspawn) whose root is
# this machine's root under a throwaway overlay, installs the packages
# there and checks the sandboxed daemon (service_inside.sh): readiness,
# STATUS, capabilities, socket group, a group member annotating and
# reading sessions, the watchdog restarting a stopped daemon, a clean
# stop.  Nothing of it outlives the test: the overlay and every mount are
# in a private mount namespace.
#   test_service.sh SOURCE_ROOT
set -euo pipefail
src=$(realpath "$1")

if [[ $(id -u) -ne 0 ]]; then
	echo "SKIP: needs root to boot a container"
	exit 77
fi
for tool in systemd-nspawn unshare git; do
	if ! command -v $tool >/dev/null; then
		echo "SKIP: $tool is missing (systemd-nspawn: Debian package systemd-container)"
		exit 77
	fi
done
# Mounts from here on stay in this process's own mount namespace.
if [[ ${RINGPROF_TEST_NS:-} != "$$" ]]; then
	RINGPROF_TEST_NS=$$ exec unshare -m --propagation private "$0" "$@"
fi

tmp=$(mktemp -d)
# Unmount first: never delete through the overlay of /.
trap 'umount -R "$tmp/ov" 2>/dev/null; rm -rf --one-file-system "$tmp"' EXIT
start=$SECONDS
"$src/scripts/build-deb.sh" "$tmp/debs" >"$tmp/build.log" 2>&1 || {
	tail -n 50 "$tmp/build.log"
	exit 1
}
echo "packages built in $((SECONDS - start)) s"

mkdir "$tmp/ov" "$tmp/out"
mount -t tmpfs -o size=2G tmpfs "$tmp/ov"
mkdir "$tmp/ov/upper" "$tmp/ov/work" "$tmp/ov/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$tmp/ov/upper,workdir=$tmp/ov/work" "$tmp/ov/root"
# nspawn keeps its locks under /run/systemd: not on this machine's.
mount -t tmpfs tmpfs /run
root=$tmp/ov/root
# As on a fresh machine: its own machine id, no ringprof state, none of
# this machine's services, and one unit that runs the checks and powers off.
rm -f "$root/etc/machine-id"
systemd-machine-id-setup --root="$root" >/dev/null
rm -rf "$root/var/lib/ringprof" "$root/etc/systemd/system/multi-user.target.wants"
mkdir "$root/etc/systemd/system/multi-user.target.wants"
cp "$src/tests/deploy/service_inside.sh" "$root/service_inside.sh"
cat >"$root/etc/systemd/system/ringprof-check.service" <<'UNIT'
[Unit]
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/service_inside.sh
ExecStopPost=/bin/systemctl poweroff --no-block
UNIT
ln -s /etc/systemd/system/ringprof-check.service "$root/etc/systemd/system/multi-user.target.wants/"

# nspawn's own sandbox lacks CAP_BPF and CAP_PERFMON and filters bpf and
# perf_event_open, all of which the unit grants the CPU sampler.
timeout 300 systemd-nspawn -D "$root" --boot --private-network --register=no --keep-unit \
	--capability=CAP_BPF,CAP_PERFMON --system-call-filter="bpf perf_event_open" \
	--link-journal=no --quiet --bind-ro="$tmp/debs:/debs" --bind-ro="$src:/src" \
	--bind="$tmp/out:/out" >"$tmp/console.log" 2>&1 || true
cat "$tmp/out/log" 2>/dev/null || tail -n 50 "$tmp/console.log"
result=$(cat "$tmp/out/result" 2>/dev/null || echo "FAIL: the container wrote no result")
echo "$result; total $((SECONDS - start)) s"
[[ $result == PASS ]]
