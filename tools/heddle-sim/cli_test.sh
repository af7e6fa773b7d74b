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
echo "cli ok"
