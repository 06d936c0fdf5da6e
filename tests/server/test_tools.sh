#!/usr/bin/env bash
# Tool calls, logprobs and the field policy of `moestream serve`, seen
# through the official openai npm client, on a tiny gpt_oss model with the
# released gpt-oss chat template, scripted (tests/server/model.py) to answer
# every chat with a Harmony call of get_weather.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/tools; rm -rf "$W"; mkdir -p "$W"
. tests/server/lib.sh
need_node_openai
find_templates

make_model "$W/base" || { fail model "tiny checkpoint"; exit 1; }
make_tool_model "$W/m" "$W/base" || { fail script "model.py"; exit 1; }

start_server tools "$W/m" || exit 1
run_node tools_client tests/server/tools.mjs "$tools_url"
stop_server tools
[ "$fails" -eq 0 ]
