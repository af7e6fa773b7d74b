#!/usr/bin/env bash
# Sets up a Debian 12 machine and runs the heddled demo:
# installs missing packages, builds, starts heddled on virtual ports (net_pcap replaying bundled
# RoCEv2 traces in both directions) with deploy/examples/demo.yaml, and shows a live summary per
# port and per RoCE opcode class plus the metrics URL. Ctrl-C stops it cleanly; without a
# terminal it stops by itself after HEDDLE_DEMO_SECONDS (default 20).
#   tools/demo.sh            (as root)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
SECONDS_LIMIT=${HEDDLE_DEMO_SECONDS:-20}

"$ROOT/tools/setup/install-deps.sh"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target heddled heddlectl

cd "$ROOT"  # the demo config names the bundled traces relative to the repository
CONFIG=deploy/examples/demo.yaml
SOCK=/run/heddle-demo/heddled.sock
LOG=$(mktemp /tmp/heddled-demo.XXXXXX.log)
"$BUILD_DIR/tools/heddled/heddled" --check-config -c "$CONFIG"
"$BUILD_DIR/tools/heddled/heddled" -c "$CONFIG" >"$LOG" 2>&1 &
PID=$!
STATE=$(mktemp /tmp/heddle-demo-summary.XXXXXX.json)

# Whatever ends this script (Ctrl-C, SIGTERM, the time limit, an error) stops heddled with
# SIGTERM and reports how it exited.
stopped=0
stop() {
  [ "$stopped" = 1 ] && return
  stopped=1
  trap - INT TERM EXIT
  rm -f "$STATE"
  if kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID"
    wait "$PID" && rc=0 || rc=$?
    echo "heddled stopped (exit $rc); log: $LOG"
  else
    wait "$PID" && rc=0 || rc=$?
    echo "heddled exited by itself (exit $rc); log:"
    cat "$LOG"
    [ "$rc" = 0 ] && rc=1
  fi
  exit "$rc"
}
trap stop INT TERM EXIT

for _ in $(seq 100); do
  [ -S "$SOCK" ] && "$BUILD_DIR/tools/heddlectl/heddlectl" -s "$SOCK" show status >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || stop
  sleep 0.1
done

interactive=0
[ -t 1 ] && interactive=1
start=$(date +%s)
while kill -0 "$PID" 2>/dev/null; do
  /usr/bin/python3 "$ROOT/tools/demo_summary.py" \
    --heddlectl "$BUILD_DIR/tools/heddlectl/heddlectl" --socket "$SOCK" --state "$STATE" \
    $([ $interactive = 1 ] && echo --clear) || true
  if [ $interactive = 0 ] && [ $(( $(date +%s) - start )) -ge "$SECONDS_LIMIT" ]; then
    echo "(no terminal: stopping after ${SECONDS_LIMIT}s)"
    stop
  fi
  sleep 1 &
  wait $! || true
done
stop
