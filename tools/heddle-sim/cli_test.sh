#!/bin/sh
# heddle-sim's command line end to end: the same seed writes the same CSV bytes, another seed
# other bytes, the report carries the speed line, and bad input exits 2 with a message naming it.
# Usage: cli_test.sh HEDDLE_SIM FABRIC_DIR
set -eu
sim=$1
fabrics=$2
dir=$(mktemp -d /tmp/heddle_sim_cli_XXXXXX)
trap 'rm -rf "$dir"' EXIT
run() {
  "$sim" --fabric "$fabrics/fat-tree-k4.yaml" --workload websearch --load 0.6 --duration 200us \
    --lb reps --pin on --storm on --transport sr --cc ecn-window --quiet "$@"
}
run --seed 3 --out "$dir/a" > "$dir/a.txt"
run --seed 3 --out "$dir/b" > "$dir/b.txt"
run --seed 4 --out "$dir/c" > "$dir/c.txt"
for f in fct.csv summary.csv uplinks.csv; do
  cmp "$dir/a/$f" "$dir/b/$f"
done
if cmp -s "$dir/a/fct.csv" "$dir/c/fct.csv"; then
  echo "seeds 3 and 4 gave the same flows" >&2
  exit 1
fi
# Trimming and a QP per message: deterministic too, and the per-port and per-level files.
run --seed 5 --trim on --qp-per-message on --buffer-pkts 8 --out "$dir/t1" > /dev/null
run --seed 5 --trim on --qp-per-message on --buffer-pkts 8 --out "$dir/t2" > /dev/null
for f in fct.csv summary.csv uplinks.csv queues.csv levels.csv; do
  cmp "$dir/t1/$f" "$dir/t2/$f"
done
head -1 "$dir/t1/queues.csv" | grep -q "^tier,switch,port,up,packets,mean_wait_ns,drops,trims$"
awk -F, 'NR > 1 { t += $8 } END { exit !(t > 0) }' "$dir/t1/queues.csv"
grep -q "M events/s" "$dir/a.txt"
grep -q "^all " "$dir/a.txt"
head -1 "$dir/a/run.csv" | grep -q "events_per_s"
expect_2() {
  if "$sim" "$@" > "$dir/out.txt" 2> "$dir/err.txt"; then
    echo "heddle-sim $*: succeeded, expected exit 2" >&2
    exit 1
  else
    code=$?
  fi
  [ "$code" -eq 2 ] || { echo "heddle-sim $*: exit $code, expected 2" >&2; exit 1; }
}
expect_2 --fabric "$dir/missing.yaml"
grep -q "missing.yaml" "$dir/err.txt"
expect_2 --fabric "$fabrics/fat-tree-k4.yaml" --duration 5parsecs
grep -q -- "--duration" "$dir/err.txt"
expect_2 --fabric "$fabrics/fat-tree-k4.yaml" --lb magic
grep -q "magic" "$dir/err.txt"
expect_2 --fabric "$fabrics/fat-tree-k4.yaml" --workload "$dir/nope.cdf"
expect_2 --fabric "$fabrics/fat-tree-k4.yaml" --degraded-link "tor[99]:0:10"
expect_2 --fabric "$fabrics/fat-tree-k4.yaml" --load 0
expect_2 --fabric "$fabrics/fat-tree-k4.yaml" --trim on --pfc on
grep -q "trimming and PFC" "$dir/err.txt"
expect_2 --fabric "$fabrics/fat-tree-k4.yaml" --trim maybe
expect_2 --fabric "$fabrics/fat-tree-k4.yaml" --ops write=1,copy=2
grep -q -- "--ops write=1,copy=2" "$dir/err.txt"
expect_2 --fabric "$fabrics/fat-tree-k4.yaml" --ops read=1 --transport sr
grep -q "go-back-N" "$dir/err.txt"
# A mix of operations: the flows carry them, the summary has their buckets.
"$sim" --fabric "$fabrics/fat-tree-k4.yaml" --duration 50us --ops write=1,send=1,read=1 \
  --storm on --quiet --out "$dir/ops" > /dev/null
for op in write send read; do
  grep -q ",$op\$" "$dir/ops/fct.csv"
  grep -q "^$op-short," "$dir/ops/summary.csv"
done
# The plots, when matplotlib is installed (tools/setup/install-deps.sh): four PNGs of the runs.
if /usr/bin/python3 -c "import matplotlib" 2> /dev/null; then
  /usr/bin/python3 "$(dirname "$0")/experiments/plot.py" --out "$dir/png" a="$dir/a" \
    trim="$dir/t1" > /dev/null
  for f in slowdown uplinks levels queues; do
    head -c 8 "$dir/png/$f.png" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a"
  done
  if /usr/bin/python3 "$(dirname "$0")/experiments/plot.py" --out "$dir/png" "$dir/nope" \
    2> "$dir/err.txt"; then
    echo "plot.py accepted a directory without summary.csv" >&2
    exit 1
  fi
  grep -q "no summary.csv" "$dir/err.txt"
fi
echo "cli ok"
