#!/usr/bin/env bash
# Load test of moestream serve: 16 concurrent clients x 4 greedy requests from a
# second process (tests/server/load.mjs, loopback only, bounded in count and
# time); every answer under load equals the one the same request gets alone,
# the server is alive afterwards and stops cleanly. Prints a results table.
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
start_server load "$M" --ctx 1024 || exit 1
read -r clients requests max_tokens <<<"${LOAD:-16 4 8}"
run_node load tests/server/load.mjs "$load_url" "$clients" "$requests" "$max_tokens" 900
stop_server load
[ "$fails" -eq 0 ]
