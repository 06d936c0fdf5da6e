#!/usr/bin/env bash
# Decode at long contexts against the KV floor (docs/perf.md "Long context"):
# for each model, KV format and context length, `moestream bench --context C
# --floor` (C synthetic positions in the cache, then a short prompt and N
# decoded tokens), ROUNDS times interleaved. Prints per run the decode
# ms/token, the attention over the KV cache in ms/token and its share, the
# cache bytes it read per token and its ratio to the floor
#   KV bytes read per token / best read-stream bandwidth (same run),
# and its ratio to the compute floor
#   attention FLOPs per token / best FMA peak (same run)
# (MLA's shared latent is bound by the second), then min / median / max of
# both ratios per (model, format, context).
#   bench/context.sh MODEL_DIR...       default: build/demo-model
# Env: ROUNDS (3), N (8), CONTEXTS ("1000 8000 32000"), KV ("f32 bf16"),
#      THREADS (2), BASE (another moestream binary, e.g. an older build:
#      each run of ./moestream is then preceded by the same run of BASE, an
#      interleaved A/B; the binary is the last column and the summary is
#      per binary), PRECISIONS ("exact"; e.g. "exact fast": each run in
#      every precision in turn, interleaved, named with the binary).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
N=${N:-8}
CONTEXTS=${CONTEXTS:-"1000 8000 32000"}
KV=${KV:-"f32 bf16"}
THREADS=${THREADS:-2}
PRECISIONS=${PRECISIONS:-exact}
[ -x ./moestream ] || make -j2 >/dev/null
bins=(${BASE:-} ./moestream)
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=(build/demo-model)
  [ -f build/demo-model/config.json ] ||
    /usr/bin/python3 tools/tinyckpt/gpt_oss.py --preset small --seed 1 --out build/demo-model >/dev/null
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
printf "| %-22s | kv | context | decode ms/tok | attn KV ms/tok | share | KV MB/tok | read GB/s | x KV floor | x compute floor | binary\n" model
printf "|%s|----|---------|---------------|----------------|-------|-----------|-----------|------------|-----------------|--------|\n" "------------------------"
for m in "${models[@]}"; do
  cat "$m"/*.safetensors >/dev/null # warm the page cache
  for r in $(seq "$ROUNDS"); do
    for kv in $KV; do
      for c in $CONTEXTS; do
       for b in "${bins[@]}"; do
        for pr in $PRECISIONS; do
        "$b" bench "$m" --prompt 4 -n "$N" --context "$c" --kv "$kv" --threads "$THREADS" \
            --precision "$pr" --floor 2>/dev/null |
          awk -v m="$(basename "$m")" -v kv="$kv" -v c="$c" -v b="$b:$pr" -F'|' '
            /decode, / { d = $3; sub(/.*\(/, "", d); sub(/ ms.*/, "", d) }
            /memory read stream/ { split($3, a, " "); bw = a[1] }
            /attention over the KV cache/ { split($3, a, " "); at = a[1]; mb = a[3]; x = $3; sub(/.*: /, "", x); sub(/x its.*/, "", x) }
            /attention.s arithmetic/ { xc = $3; sub(/.*: /, "", xc); sub(/x its.*/, "", xc) }
            END { printf "| %-22s | %s | %7d | %13.1f | %14.2f | %4.0f%% | %9.1f | %9.1f | %10.2f | %15.2f | %s\n",
                         m, kv, c, d, at, 100 * at / d, mb, bw, x, xc, b }' | tee -a "$out"
        done
       done
      done
    done
  done
done
echo
echo "| model | kv | context | binary | x KV floor min / median / max | x compute floor min / median / max |"
echo "|---|---|---|---|---|---|"
awk -F'|' '{ gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $4); gsub(/ /, "", $12); print $2 "|" $3 "|" $4 "|" $12, $10, $11 }' "$out" |
  sort -t' ' -k1,1 | awk '
    function med(a) { return a[int((n + 1) / 2)] }
    function sorted(a,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t } }
    function flush() { if (n) { sorted(v); sorted(w); printf "| %s | %.2f / %.2f / %.2f | %.2f / %.2f / %.2f |\n", key, v[1], med(v), v[n], w[1], med(w), w[n] } }
    $1 != key { flush(); key = $1; n = 0 }
    { n++; v[n] = $2; w[n] = $3 }
    END { flush() }' | sed 's/|\([^ ]\)/| \1/g'
