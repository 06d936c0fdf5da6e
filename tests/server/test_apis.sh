#!/usr/bin/env bash
# The APIs of `moestream serve` beside chat completions, each through the clients that
# speak it: OpenAI's Responses API (tests/server/responses.mjs: the openai npm client, the
# Vercel AI SDK's OpenAI provider, LangChain with useResponsesApi) and Anthropic's Messages
# API (tests/server/messages.mjs: @anthropic-ai/sdk) and Ollama's API
# (tests/server/ollama.mjs: the ollama client), on tiny gpt_oss models with the
# released gpt-oss chat template, scripted (tests/server/model.py) to reason then answer,
# to call get_weather (or weather__get: a tool of namespace "weather"), or to answer
# {"city":"Paris"}. Hosted tools' notes must reach the server's log.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
own_tmp=; if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); own_tmp=1; fi
W=$MS_TMP/apis; rm -rf "$W"; mkdir -p "$W"
. tests/server/lib.sh
trap 'kill_servers; [ -z "$own_tmp" ] || rm -rf "$MS_TMP"' EXIT
need_node_modules ai @ai-sdk/openai @langchain/openai @langchain/core zod @anthropic-ai/sdk ollama
find_templates

make_model "$W/base" || { fail model "tiny checkpoint"; exit 1; }
make_answer_model "$W/answer" "$W/base" || { fail script_answer "model.py"; exit 1; }
make_tool_model "$W/tool" "$W/base" || { fail script_tool "model.py"; exit 1; }
make_json_model "$W/json" "$W/base" || { fail script_json "model.py"; exit 1; }
make_chain "$W/nstool" "$W/base" "${TOOL_CALL_TEXT/get_weather/weather__get}" ||
  { fail script_nstool "model.py"; exit 1; }

start_server ranswer "$W/answer" || exit 1
start_server rtool "$W/tool" || exit 1
start_server rjson "$W/json" || exit 1
start_server rkeyed "$W/answer" --api-key k || exit 1
start_server rnstool "$W/nstool" || exit 1
run_node responses tests/server/responses.mjs "$ranswer_url" "$rtool_url" "$rjson_url" \
  "$rnstool_url" "$SCRIPT_ANSWER" "$SCRIPT_REASONING"
run_node messages tests/server/messages.mjs "$ranswer_url" "$rtool_url" "$rkeyed_url" \
  "$SCRIPT_ANSWER" "$SCRIPT_REASONING"
run_node ollama tests/server/ollama.mjs "$ranswer_url" "$rtool_url" "$rjson_url" \
  "$SCRIPT_ANSWER" "$SCRIPT_REASONING"
if grep -q 'tools\[0\] ("web_search") is not offered to the model' "$W/ranswer.log"; then
  pass hosted_tool_noted
else
  fail hosted_tool_noted "no note of the web_search tool left out in $W/ranswer.log"
fi
if grep -q 'a system message ("Environment: the test suite") is not in the prompt: the chat template leaves it out' "$W/ranswer.log"; then
  pass left_out_message_noted
else
  fail left_out_message_noted "no note of the system message gpt-oss's template left out in $W/ranswer.log"
fi
stop_server ranswer
stop_server rtool
stop_server rjson
stop_server rkeyed
stop_server rnstool
[ "$fails" -eq 0 ]
