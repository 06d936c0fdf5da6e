#!/usr/bin/env bash
# moestream plan against measurement (issue 17): on a model (default: the
# synthetic gpt-oss-20b bench/stream.sh writes), the decode speed `plan`
# predicts at each memory size against `bench` run cold under
# shared/tools/memlimit at that size, same prompt (64 tokens), same decoded
# tokens (32), same context. Rounds interleave plan and the measurements
# (the machine is shared); prints min/median/max of each and the ratio of
# the medians (target: within 25%).
#
#   bench/plan.sh [MODEL_DIR]       env: SIZES (default "4G 6G 8G"), ROUNDS (2)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-/tmp/moestream-bench/gpt-oss-20b}
SIZES=${SIZES:-4G 6G 8G}
ROUNDS=${ROUNDS:-2}
MEMLIMIT=${MEMLIMIT:-../shared/tools/memlimit}
BIN=./moestream
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
[ -f "$MODEL/config.json" ] || { echo "no model in $MODEL (bench/stream.sh writes one)"; exit 1; }
shards=("$MODEL"/*.safetensors)
budgets=$(echo $SIZES | tr ' ' ',')
for r in $(seq 1 "$ROUNDS"); do
  "$BIN" plan "$MODEL" --budgets "$budgets" --ctx 97 >"$OUT/plan.$r" 2>/dev/null
  for s in $SIZES; do
    "$MEMLIMIT" "$s" --evict "${shards[@]}" -- "$BIN" bench "$MODEL" >"$OUT/bench.$s.$r" 2>/dev/null
  done
done
stats() { sort -g | awk '{ v[NR] = $1 } END { printf "%.2f %.2f %.2f", v[1], v[int((NR + 1) / 2)], v[NR] }'; }
printf '| %-6s | %-26s | %-26s | %-9s |\n' memory "plan tok/s (min/med/max)" "bench tok/s (min/med/max)" "plan/bench"
printf '|--------|----------------------------|----------------------------|-----------|\n'
for s in $SIZES; do
  gib=$(awk -v s="$s" 'BEGIN { sub(/G$/, "", s); printf "%.2f GiB", s }')
  p=$(cat "$OUT"/plan.* | grep "^| *$gib " | awk -F'|' '{ print $6 + 0 }' | stats)
  b=$(cat "$OUT"/bench."$s".* | sed -n 's/^| decode, [0-9]* tokens *| *\([0-9.]*\) tok\/s.*/\1/p' | stats)
  ratio=$(awk -v p="$p" -v b="$b" 'BEGIN { split(p, x, " "); split(b, y, " "); printf "%.2f", x[2] / y[2] }')
  printf '| %-6s | %-26s | %-26s | %-9s |\n' "$s" "$p" "$b" "$ratio"
done
grep -E "disk|compute" "$OUT/plan.1"
