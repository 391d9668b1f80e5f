#!/usr/bin/env bash
# Install every Debian package ringprof needs to build, test and benchmark.
# Idempotent: when everything is present it only checks and returns.
set -euo pipefail

packages=(
  gcc clang meson ninja-build pkg-config python3
  python3-dev python3-venv python3-setuptools
  liburing-dev liblz4-dev libisal-dev libbpf-dev bpftool libelf-dev libdw-dev zlib1g-dev
  libcmocka-dev libprotobuf-c-dev protobuf-c-compiler
  libjansson-dev libmicrohttpd-dev libinih-dev libcurl4-openssl-dev libsystemd-dev
  systemd-container
  prometheus prometheus-alertmanager
  lttng-tools liblttng-ust-dev
  protobuf-compiler golang-go
  libnghttp2-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run this script as root (or: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python: the test runner, and the real readers the exporters' tests use
# (XProf's converter, Perfetto's trace schema), the XLA pull tests' peers (CPU JAX
# with its profiler server, grpcio for the misbehaving servers), py-spy (the Python
# frames' peer), at the versions the tests
# were written against, so that a new release cannot change a CI run.
python_pins=(pytest==9.2.0 xprof==2.24.2 perfetto==0.59.1 jax==0.10.2 jaxlib==0.10.2 grpcio==1.85.3
             py-spy==0.4.3)
for pin in "${python_pins[@]}"; do
  name=${pin%%==*} want=${pin##*==}
  have=$(python3 -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null || true)
  if [[ $have != "$want" ]]; then
    echo "install-deps: installing $pin with pip${have:+ (found $have)}"
    python3 -m pip install -q --root-user-action=ignore "$pin"
  fi
done
