#!/usr/bin/env bash
# Resident decode and prefill speed against the memory floor (docs/perf.md,
# "Resident decode and prefill"): for each model, `moestream bench --floor`
# with 2 threads and 1 thread, ROUNDS times interleaved; each run measures
# the read-stream bandwidth between its own phases, and the floor is
#   weight bytes read per decode token / best read-stream bandwidth.
# Prints one table line per run, then min / median / max per model and
# thread count, against each run's own stream and against the best stream
# of the whole invocation.
#   bench/decode.sh [MODEL_DIR...]      default: build/demo-model (603 MB)
#   SYNTH=DIR bench/decode.sh           the synthetic release-sized models,
#       written to DIR if absent: gpt-oss-20b (MXFP4 experts, 13.8 GB),
#       qwen3-30b-a3b with 12 of its 48 layers (bf16, ~16 GB: the whole
#       model does not fit this 24 GB machine) and deepseek-v3 with 4
#       layers (FP8, ~17 GB).
# Env: ROUNDS (3), PROMPT (64), N (32), THREADS ("2 1"), BASE (another
# moestream binary, e.g. an older build: each run of ./moestream is then
# preceded by the same run of BASE, for an interleaved A/B; a BASE without
# --floor prints no floor columns), PRECISIONS ("exact"; e.g. "exact int8":
# each run in every precision in turn, interleaved, named with the binary;
# int8 is llama.cpp's own arithmetic for MXFP4 weights).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
ROUNDS=${ROUNDS:-3}
PROMPT=${PROMPT:-64}
N=${N:-32}
THREADS=${THREADS:-"2 1"}
PRECISIONS=${PRECISIONS:-exact}
[ -x ./moestream ] || make -j2 >/dev/null

models=("$@")
if [ ${#models[@]} -eq 0 ] && [ -n "${SYNTH:-}" ]; then
  mkdir -p "$SYNTH"
  for spec in "gpt-oss-20b" "qwen3-30b-a3b --layers 12" "deepseek-v3 --layers 4"; do
    set -- $spec
    dir="$SYNTH/$1${3:+-L$3}"
    [ -f "$dir/config.json" ] || ./moestream synth --like $spec --out "$dir" --force >&2
    models+=("$dir")
  done
fi
if [ ${#models[@]} -eq 0 ]; then
  models=(build/demo-model)
  [ -f build/demo-model/config.json ] ||
    /usr/bin/python3 tools/tinyckpt/gpt_oss.py --preset small --seed 1 --out build/demo-model
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
bins=(${BASE:-} ./moestream)
printf "| %-28s | thr | prefill tok/s | decode ms/tok | read GB/s | MB/token | floor ms | x floor | binary\n" model
printf "|%s|-----|---------------|---------------|-----------|----------|----------|---------|\n" "------------------------------"
for m in "${models[@]}"; do
  cat "$m"/*.safetensors >/dev/null # warm the page cache
  for r in $(seq "$ROUNDS"); do
    for t in $THREADS; do
     for b in "${bins[@]}"; do
      for pr in $PRECISIONS; do
      floor=--floor
      "$b" bench --help 2>&1 | grep -q -- --floor || floor=
      prec=--precision=$pr
      [ "$pr" = exact ] && prec= # builds before --precision
      "$b" bench "$m" --prompt "$PROMPT" -n "$N" --threads "$t" $floor $prec 2>/dev/null |
        bench_figures |
        awk -v m="$(basename "$m")" -v t="$t" -v b="$b${prec:+:$pr}" '
          { printf "| %-28s | %3s | %13s | %13s | %9s | %8s | %8s | %7s | %s\n", m, t, $1, $2, $3, $4, $5, $6, b }' |
        tee -a "$out"
      done
     done
    done
  done
done
echo
echo "min / median / max of x floor and of decode ms/token:"
awk -F'|' '{ k = $2 "|" $3 "|" $10; gsub(/ /, "", k); x[k] = x[k] " " $9; d[k] = d[k] " " $5 }
  END { for (k in x) print k, x[k], "#", d[k] }' "$out" | sort |
  while read -r k rest; do
    printf "  %-34s x floor %s   decode %s ms\n" "$k" "$(mmm ${rest%%#*})" "$(mmm ${rest#*#})"
  done
# A run whose stream sample caught a slow moment gets a long floor and a
# flattering ratio; judged against the best stream of the whole invocation
# (per thread count) the same runs read as they are.
echo
echo "the same against the best read stream of this invocation (per thread count):"
awk -F'|' 'NR == FNR { t = $3; gsub(/ /, "", t); if ($6 + 0 > best[t]) best[t] = $6 + 0; next }
  { k = $2 "|" $3 "|" $10; gsub(/ /, "", k); t = $3; gsub(/ /, "", t)
    if ($7 + 0 > 0 && best[t] > 0) { x[k] = x[k] " " sprintf("%.2f", $5 / ($7 / best[t])); bw[k] = best[t] } }
  END { for (k in x) print k, bw[k], x[k] }' "$out" "$out" | sort |
  while read -r k bw rest; do
    printf "  %-34s x floor %s at %s GB/s\n" "$k" "$(mmm $rest)" "$bw"
  done
