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
TD=
for d in ${MS_TEMPLATES:-} ../shared/templates /work/shared/templates; do [ -d "$d" ] && { TD=$d; break; }; done
[ -n "$TD" ] || { fail templates_present "no ../shared/templates"; exit 1; }

make_model "$W/base" || { fail model "tiny checkpoint"; exit 1; }
cp -r "$W/base" "$W/m"
cp "$TD/openai-gpt-oss-120b.jinja" "$W/m/chat_template.jinja"
ids=$("$BIN" tokenize "$W/m" --text 'assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>')
$PY tests/server/model.py script-ids "$W/m" $ids || { fail script "model.py"; exit 1; }

start_server tools "$W/m" || exit 1
run_node tools_client tests/server/tools.mjs "$tools_url"
stop_server tools
[ "$fails" -eq 0 ]
