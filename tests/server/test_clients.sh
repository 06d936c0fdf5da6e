#!/usr/bin/env bash
# Tool calls and structured output of `moestream serve` through two more real
# clients (tests/server/clients.mjs): the Vercel AI SDK (ai with
# @ai-sdk/openai-compatible) and LangChain JS (@langchain/openai), on tiny
# gpt_oss models with the released gpt-oss chat template, scripted
# (tests/server/model.py) to answer every chat with a Harmony call of
# get_weather, or with the final message {"city":"Paris"}.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
own_tmp=; if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); own_tmp=1; fi
W=$MS_TMP/clients; rm -rf "$W"; mkdir -p "$W"
. tests/server/lib.sh
trap 'kill_servers; [ -z "$own_tmp" ] || rm -rf "$MS_TMP"' EXIT
need_node_modules ai @ai-sdk/openai-compatible @langchain/openai @langchain/core zod
find_templates

make_model "$W/base" || { fail model "tiny checkpoint"; exit 1; }
make_tool_model "$W/tool" "$W/base" || { fail script_tool "model.py"; exit 1; }
make_json_model "$W/json" "$W/base" || { fail script_json "model.py"; exit 1; }

start_server ctool "$W/tool" || exit 1
start_server cjson "$W/json" || exit 1
run_node clients tests/server/clients.mjs "$ctool_url" "$cjson_url"
stop_server ctool
stop_server cjson
[ "$fails" -eq 0 ]
