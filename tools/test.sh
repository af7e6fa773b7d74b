#!/usr/bin/env bash
# Sets up a Debian 12 machine and runs heddle's whole test suite:
# installs missing packages, builds everything, runs every ctest (unit, golden-packet, scapy and
# tshark cross-checks, fuzz-corpus replay, whole-daemon tests on DPDK virtual devices).
#   tools/test.sh            (as root)
# Environment: BUILD_DIR (default build), JOBS (default nproc).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-$(nproc)}

"$ROOT/tools/setup/install-deps.sh"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" -j "$JOBS" --output-on-failure --timeout 600
