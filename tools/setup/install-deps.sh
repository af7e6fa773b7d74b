#!/usr/bin/env bash
# Installs every Debian 12 package heddle needs to build, test, run the demo and benchmark.
# Idempotent: only missing packages are installed. Run as root (or with sudo available).
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang libclang-rt-14-dev
  dpdk dpdk-dev libdpdk-dev libpcap-dev
  libibverbs-dev rdma-core ibverbs-providers
  libabsl-dev prometheus-cpp-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libcli11-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev
  python3-matplotlib
  tshark python3 python3-scapy curl procps iproute2 valgrind
  python3-dev pybind11-dev python3-numpy python3-torch
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1
  fi
fi
echo "install-deps: installing ${missing[*]}"
# tshark asks whether non-root users may capture; answer no, non-interactively.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
