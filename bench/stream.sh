#!/usr/bin/env bash
# Streaming benchmark (MISSION.md "Performance: how we measure").
#
#   bench/stream.sh [MODEL_DIR]      default: a synthetic gpt-oss-20b in /tmp/moestream-bench
#
# Runs, on the same model and prompt:
#   1. resident: page-cache placement, no memory limit, warm (decode floor of compute);
#   2. streaming: under shared/tools/memlimit $LIMIT (default 6G) with the shards
#      evicted first (cold), engine cache + prefetch, routing trace recorded;
#   3. the same without prefetch;
# plus the disk's bandwidth reading experts as the engine cache does, and
# prints the two ratios:
#   decode time / max(IO floor, resident decode time)   (target <= 1.25)
#   hit rate - optimum (Belady, same trace, same budget) (target within 5 points)
# IO floor = bytes that must come from disk per token (the optimum's misses x
# expert bytes) / disk bandwidth. Then a cold prefill of PREFILL tokens under
# the same limit: its bytes against those of the distinct experts it routes
# to (target <= 1.2x) and its speed (target >= 38 tok/s, 2x llama.cpp's 19).
# Env: LIMIT, PROMPT (tokens), N (decode tokens), PREFILL (tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-/tmp/moestream-bench/gpt-oss-20b}
LIMIT=${LIMIT:-6G}
PROMPT=${PROMPT:-32}
N=${N:-32}
PREFILL=${PREFILL:-256}
MEMLIMIT=${MEMLIMIT:-../shared/tools/memlimit}
BIN=${BIN:-./moestream} # another build for an A/B
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

[ -x "$BIN" ] || make -j2 >/dev/null
if [ ! -f "$MODEL/config.json" ]; then
  echo "writing a synthetic gpt-oss-20b to $MODEL (13.8 GB)..."
  mkdir -p "$(dirname "$MODEL")"
  $BIN synth --like gpt-oss-20b --out "$MODEL" --seed 1 --force
fi
shards=("$MODEL"/*.safetensors)

field() { sed -n "s/^| $1 *| \\(.*\\) |\$/\\1/p" "$2" | head -1; }
num() { sed -n "s/^| $1 *| *\\([0-9.]*\\).*/\\1/p" "$2" | head -1; }

echo "== resident (page cache, no limit, warm) =="
$BIN bench "$MODEL" --experts pagecache --prompt "$PROMPT" -n "$N" >/dev/null 2>&1 # warm-up
$BIN bench "$MODEL" --experts pagecache --prompt "$PROMPT" -n "$N" 2>/dev/null | tee "$OUT/resident"

echo "== streaming: memlimit $LIMIT, cold, engine cache + prefetch =="
$MEMLIMIT "$LIMIT" --evict "${shards[@]}" -- \
  $BIN bench "$MODEL" --prompt "$PROMPT" -n "$N" --disk 64 --trace "$OUT/trace" 2>"$OUT/err" |
  tee "$OUT/stream" || { cat "$OUT/err"; exit 1; }
grep -h "moestream: experts" "$OUT/err" || true

echo "== streaming: memlimit $LIMIT, cold, engine cache, no prefetch =="
$MEMLIMIT "$LIMIT" --evict "${shards[@]}" -- \
  $BIN bench "$MODEL" --prompt "$PROMPT" -n "$N" --no-prefetch --trace "$OUT/trace2" 2>/dev/null |
  tee "$OUT/stream_np"

echo "== prefill: memlimit $LIMIT, cold, $PREFILL tokens =="
$MEMLIMIT "$LIMIT" --evict "${shards[@]}" -- \
  $BIN bench "$MODEL" --prompt "$PREFILL" -n 1 --trace "$OUT/trace_pf" 2>/dev/null |
  tee "$OUT/prefill"

res_ms=$(sed -n 's/^| decode, [0-9]* tokens *| [0-9.]* tok\/s (\([0-9.]*\) ms\/token).*/\1/p' "$OUT/resident")
str_ms=$(sed -n 's/^| decode, [0-9]* tokens *| [0-9.]* tok\/s (\([0-9.]*\) ms\/token).*/\1/p' "$OUT/stream")
np_ms=$(sed -n 's/^| decode, [0-9]* tokens *| [0-9.]* tok\/s (\([0-9.]*\) ms\/token).*/\1/p' "$OUT/stream_np")
disk=$(sed -n 's/^| disk read bandwidth *| \([0-9.]*\) MB\/s.*/\1/p' "$OUT/stream")
hit=$(sed -n 's/^|   decode: expert cache hit rate *| \([0-9.]*\)%.*/\1/p' "$OUT/stream")
hit_np=$(sed -n 's/^|   decode: expert cache hit rate *| \([0-9.]*\)%.*/\1/p' "$OUT/stream_np")
read_mb=$(sed -n 's/^|   decode: bytes read from disk *| \([0-9.]*\) MB.*/\1/p' "$OUT/stream")
# decode-only optimum: replay the trace's decode batches (the last N per layer)
L=$(sed -n 's/.* layers=\([0-9]*\).*/\1/p' "$OUT/trace" | head -1)
{ head -1 "$OUT/trace"; tail -n $((N * L)) "$OUT/trace"; } >"$OUT/trace_decode"
{ head -1 "$OUT/trace2"; tail -n $((N * L)) "$OUT/trace2"; } >"$OUT/trace2_decode"
opt=$($BIN replay "$OUT/trace_decode" | sed -n 's/.*optimal (Belady) hit \([0-9.]*\)%.*/\1/p')
eng_np=$($BIN replay "$OUT/trace2_decode" | sed -n 's/.*engine policy hit \([0-9.]*\)%.*/\1/p')
opt_np=$($BIN replay "$OUT/trace2_decode" | sed -n 's/.*optimal (Belady) hit \([0-9.]*\)%.*/\1/p')
fix_np=$($BIN replay "$OUT/trace2_decode" | sed -n 's/.*fixed set hit \([0-9.]*\)%.*/\1/p')
req=$(tail -n $((N * L)) "$OUT/trace" | awk '{ n += NF - 2 } END { print n }')
eb=$(sed -n 's/.* expert_bytes=\([0-9]*\).*/\1/p' "$OUT/trace" | head -1)
pf_tps=$(sed -n 's/^| prefill, [0-9]* tokens *| \([0-9.]*\) tok\/s.*/\1/p' "$OUT/prefill")
pf_mb=$(sed -n 's/^|   prefill: bytes read from disk *| \([0-9.]*\) MB.*/\1/p' "$OUT/prefill")
# distinct experts of the prompt: the trace's batches before the one decode step
pf_distinct=$(grep '^B ' "$OUT/trace_pf" | head -n -"$L" |
  awk '{ for (i = 3; i <= NF; i++) s[$2 " " $i] = 1 } END { print length(s) }')

awk -v res="$res_ms" -v str="$str_ms" -v np="$np_ms" -v disk="$disk" -v hit="$hit" \
    -v hitnp="$hit_np" -v opt="$opt" -v engnp="$eng_np" -v optnp="$opt_np" -v fixnp="$fix_np" -v req="$req" \
    -v eb="$eb" -v n="$N" -v rd="$read_mb" -v pftps="$pf_tps" -v pfmb="$pf_mb" \
    -v pfd="$pf_distinct" -v pfn="$PREFILL" 'BEGIN {
  must = (1 - opt / 100) * req * eb / n / 1e6          # MB/token the optimum still reads
  floor_io = must / disk * 1e3                          # ms/token
  floor = floor_io > res ? floor_io : res
  printf "\n| %-52s | %-14s |\n|%s|%s|\n", "streaming summary (decode)", "value",
         "------------------------------------------------------", "----------------"
  printf "| %-52s | %11.1f ms |\n", "resident decode (page cache, warm)", res
  printf "| %-52s | %8.0f MB/s |\n", "disk bandwidth, experts read as the cache reads", disk
  printf "| %-52s | %11.1f MB |\n", "bytes read per token (measured)", rd
  printf "| %-52s | %11.1f MB |\n", "bytes that must be read per token (optimum)", must
  printf "| %-52s | %11.1f ms |\n", "IO floor = optimum bytes / disk bandwidth", floor_io
  printf "| %-52s | %11.1f ms |\n", "streaming decode, prefetch on", str
  printf "| %-52s | %11.1f ms |\n", "streaming decode, prefetch off", np
  own = rd / disk * 1e3                                 # ms/token to read what it read
  printf "| %-52s | %14.2f |\n", "ratio: decode / max(IO floor, resident)  [<= 1.25]", str / floor
  printf "| %-52s | %11.1f ms |\n", "time to read its own bytes per token", own
  printf "| %-52s | %14.2f |\n", "ratio: decode / max(own reads, resident)  [<= 1.15]",
         str / (own > res ? own : res)
  printf "| %-52s | %13.1f%% |\n", "hit rate, prefetch on (measured)", hit
  printf "| %-52s | %13.1f%% |\n", "hit rate, prefetch off (measured)", hitnp
  printf "| %-52s | %13.1f%% |\n", "optimum (Belady) on the prefetch-off trace", optnp
  printf "| %-52s | %13.1f%% |\n", "engine policy replayed on the same trace", engnp
  printf "| %-52s | %13.1f%% |\n", "best fixed set for the same trace (frequency only)", fixnp
  printf "| %-52s | %+13.1f |\n", "hit rate - optimum, prefetch off  [>= -5]", hitnp - optnp
  printf "| %-52s | %+13.1f |\n", "hit rate - optimum, prefetch on   [>= -5]", hit - opt
  printf "| %-52s | %11.1f MB |\n", "prefill: bytes read (" pfn " tokens, cold)", pfmb * pfn
  printf "| %-52s | %11.1f MB |\n", "prefill: distinct experts routed to, their bytes",
         pfd * eb / 1e6
  printf "| %-52s | %14.2f |\n", "ratio: prefill bytes / distinct experts  [<= 1.2]",
         pfmb * pfn / (pfd * eb / 1e6)
  printf "| %-52s | %10.1f tok/s |\n", "prefill speed under the limit  [>= 38]", pftps
}'
