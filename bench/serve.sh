#!/usr/bin/env bash
# Throughput and latency of `moestream serve --parallel N` with 1, 2, 4, 8
# concurrent streaming clients, each asking for the same number of tokens
# (ignore_eos) with its own prompt (bench/serve_clients.mjs, timed from the
# client side). Per level: min/median/max over ROUNDS of the aggregate
# generated tokens/s, per-client tok/s, time to first token p50/p95, the gap
# between a request's streamed tokens p50/p95/max, the weight and disk bytes
# read per generated token (from /metrics); then the mean batch the server
# reports. The server runs with --parallel set to the largest level.
#   bench/serve.sh MODEL_DIR [ROUNDS=3] [TOKENS=24] [LEVELS="1 2 4 8"]
# STAGGER=MS starts client k of a round MS x k after the first (default 0: at once) and
# PROMPT_WORDS=N lengthens each prompt by about N tokens, so that a late client's prompt
# is read while the others decode.
# The folder needs a tokenizer.json (synth writes none: copy one in). Use a
# model with a chat template or none (completions are used: no template).
# Under a memory limit: ../shared/tools/memlimit 6G -- bench/serve.sh ...
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-./moestream}
M=$1; ROUNDS=${2:-3}; TOK=${3:-24}; LEVELS=${4:-1 2 4 8}
W=$(mktemp -d); trap 'kill $spid 2>/dev/null; rm -rf "$W"' EXIT
max=1; for c in $LEVELS; do [ "$c" -gt "$max" ] && max=$c; done
"$BIN" serve "$M" --port 0 --parallel "$max" --ctx 512 2>"$W/log" & spid=$!
for i in $(seq 1 1200); do
  port=$(sed -n 's/^moestream serve: listening on http:\/\/127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$W/log")
  [ -n "$port" ] && break
  kill -0 $spid 2>/dev/null || break # it stopped: its log says why
  sleep 0.25
done
[ -n "$port" ] || { echo "serve did not start: $(tail -3 "$W/log")"; exit 1; }
U=http://127.0.0.1:$port
one() { curl -sN "$U/v1/completions" -d "{\"prompt\": \"Client $1 round $2 says\", \"max_tokens\": $TOK, \"ignore_eos\": true, \"temperature\": 0, \"stream\": true}" >/dev/null; }
one 0 warm
metric() { curl -s "$U/metrics" | sed -n "s/^$1 //p"; }
echo "| clients | aggregate tok/s (min / median / max) | per client tok/s (median) | first token s (p50 / p95) | token gap ms (p50 / p95 / max) | weight GB / token | disk GB / token |"
echo "|---|---|---|---|---|---|---|"
for c in $LEVELS; do
  w0=$(metric moestream_weight_read_bytes_total); d0=$(metric moestream_disk_read_bytes_total)
  g0=$(metric moestream_generated_tokens_total)
  row=$(node bench/serve_clients.mjs "$U" "$c" "$ROUNDS" "$TOK" "${STAGGER:-0}" "${PROMPT_WORDS:-0}") || { echo "clients $c: $row"; exit 1; }
  w1=$(metric moestream_weight_read_bytes_total); d1=$(metric moestream_disk_read_bytes_total)
  g1=$(metric moestream_generated_tokens_total)
  printf '| %d | %s | %.3f | %.3f |\n' "$c" "$row" \
    "$(echo "($w1 - $w0) / ($g1 - $g0) / 1000000000" | bc -l)" \
    "$(echo "($d1 - $d0) / ($g1 - $g0) / 1000000000" | bc -l)"
done
kill -TERM $spid; wait $spid 2>/dev/null
grep "decode steps" "$W/log"
