#!/usr/bin/env bash
# Load test of moestream serve with 4 parallel slots: 16 concurrent clients x
# 4 requests of different lengths and sampling settings from a second process
# (tests/server/load.mjs, loopback only, bounded in count and time); every
# answer under load equals the one the same request gets alone (decoded in a
# batch with others or not), decode steps really ran batched and took in the
# prompts of requests that came while others decoded, the server is
# alive afterwards and stops cleanly. Prints a results table.
# LOAD="CLIENTS REQUESTS MAX_TOKENS" overrides the size.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
own_tmp=; if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); own_tmp=1; fi
W=$MS_TMP/load; rm -rf "$W"; mkdir -p "$W"
. tests/server/lib.sh
trap 'kill_servers; [ -z "$own_tmp" ] || rm -rf "$MS_TMP"' EXIT
need_node_openai

M=$W/model
make_model "$M" || { fail load_model "cannot write the test checkpoint"; exit 1; }
start_server load "$M" --ctx 1024 --parallel 4 || exit 1
read -r clients requests max_tokens <<<"${LOAD:-16 4 8}"
run_node load tests/server/load.mjs "$load_url" "$clients" "$requests" "$max_tokens" 900
stop_server load
line=$(grep '^serve: .* decode steps' "$W/load.log")
mean=$(sed -n 's/^serve: .* decode steps, .* rows (mean batch \([0-9.]*\)), .*/\1/p' <<<"$line")
$PY -c "import sys; sys.exit(0 if float('${mean:-0}') > 1.1 else 1)" &&
  pass "load_decode_steps_batched (mean batch $mean)" ||
  fail load_decode_steps_batched "mean batch ${mean:-?}: $line"
# requests arrive while others decode: their prompts are read in those steps
mixed=$(sed -n 's/^serve: .*, \([0-9]*\) of them beside a prompt being read$/\1/p' <<<"$line")
[ "${mixed:-0}" -gt 0 ] && pass "load_prompts_read_beside_decoding ($mixed steps)" ||
  fail load_prompts_read_beside_decoding "${mixed:-?} steps: $line"
[ "$fails" -eq 0 ]
