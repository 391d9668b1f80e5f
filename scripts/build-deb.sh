#!/usr/bin/env bash
# Build the Debian packages of this working tree: ringprof (daemon, CLI,
# systemd unit), libringprof0 and libringprof-dev.
#
#   scripts/build-deb.sh [OUTDIR]      default OUTDIR: build-deb/
#
# Installs what debian/control's Build-Depends names with apt-get when it
# is missing (as root), builds with dpkg-buildpackage -us -uc -b in a copy
# of the tree (it writes next to its source), and leaves the .deb files
# in OUTDIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/build-deb}")

if ! command -v dpkg-buildpackage >/dev/null || ! command -v dh >/dev/null ||
   ! dpkg-checkbuilddeps "$root/debian/control" 2>/dev/null; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "build-deb: build dependencies are missing; as root: apt-get build-dep $root" >&2
    exit 1
  fi
  echo "build-deb: installing the build dependencies"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends dpkg-dev debhelper >/dev/null
  apt-get build-dep -y -qq "$root" >/dev/null
fi

# Files of the tree as git sees them (tracked and new, not ignored): no
# build directories.  Untracked scratch files of a running test may change
# or vanish meanwhile (tar's status 1): they are not part of the build.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/ringprof"
git -C "$root" ls-files -z -c -o --exclude-standard |
  while IFS= read -r -d '' f; do if [[ -e $root/$f ]]; then printf '%s\0' "$f"; fi; done |
  { tar -C "$root" --null -T - --ignore-failed-read --warning=no-file-changed -cf - ||
    [[ $? -eq 1 ]]; } | tar -C "$tmp/ringprof" -xf -

(cd "$tmp/ringprof" && dpkg-buildpackage -us -uc -b)
mkdir -p "$out"
rm -f "$out"/ringprof*.deb "$out"/libringprof*.deb
cp "$tmp"/*.deb "$out"/
echo "build-deb: packages in $out:"
ls -1 "$out"/*.deb
