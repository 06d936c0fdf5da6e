#!/usr/bin/env bash
# Text in, text out on a tiny gpt_oss checkpoint carrying the real o200k
# tokenizer: -p renders the chat template and tokenizes exactly like
# render + tokenize; stop ids end a response; chat reuses the KV prefix and
# gives the same tokens as a full re-prefill; Ctrl-C stops an answer, not the
# program; a conversation over the context gets a clear message.
set -u
cd "$(dirname "$0")/../.." && . tests/init.sh text
# a tiny model over the real vocabulary, with the release's special ids
M=$W/model
text_model "$M"

Q="What is the capital of France? Answer in one word."
echo "[{\"role\": \"user\", \"content\": \"$Q\"}]" >"$W/m.json"
"$BIN" render --family gpt_oss --messages "$W/m.json" >"$W/prompt.txt"
"$BIN" tokenize "$M" --text-file "$W/prompt.txt" >"$W/prompt.ids" 2>"$W/err"
"$BIN" run "$M" -p "$Q" -n 16 --temp 0 --ids >"$W/a" 2>"$W/err"
"$BIN" run "$M" --prompt-ids "$W/prompt.ids" -n 16 --temp 0 --ids >"$W/b" 2>>"$W/err"
if [ -s "$W/a" ] && cmp -s "$W/a" "$W/b"; then pass run_text_prompt_equals_render_tokenize
else fail run_text_prompt_equals_render_tokenize "$(cat "$W/a") vs $(cat "$W/b") $(tail -2 "$W/err")"; fi

out=$("$BIN" run "$M" -p "$Q" -n 16 --temp 0 2>/dev/null)
[ -n "$out" ] && pass run_prints_text || fail run_prints_text "empty answer"

# a stop id ends the response (the first greedy token made a stop id)
first=$(cut -d' ' -f1 "$W/b")
cp -r "$M" "$W/stop"
$PY - "$W/stop" "$first" <<'P'
import json, sys
g = json.load(open(sys.argv[1] + "/generation_config.json"))
g["eos_token_id"] = [200002, int(sys.argv[2])]
json.dump(g, open(sys.argv[1] + "/generation_config.json", "w"))
P
n1=$("$BIN" run "$W/stop" --prompt-ids "$W/prompt.ids" -n 16 --temp 0 --ids 2>/dev/null | wc -w)
n2=$("$BIN" run "$W/stop" --prompt-ids "$W/prompt.ids" -n 16 --temp 0 --ids --ignore-eos 2>/dev/null | wc -w)
[ "$n1" -eq 1 ] && [ "$n2" -eq 16 ] && pass stop_id_respected || fail stop_id_respected "$n1 ids with eos, $n2 with --ignore-eos"

# multi-turn: prefix reuse == full re-prefill, and it really reused
printf 'Hello there\nWhat is 2+2?\nAnd 3+3?\n' >"$W/turns"
"$BIN" chat "$M" -n 12 --temp 0 --ids --stats <"$W/turns" >"$W/c1" 2>"$W/c1.err"
"$BIN" chat "$M" -n 12 --temp 0 --ids --no-reuse <"$W/turns" >"$W/c2" 2>/dev/null
if [ "$(wc -l <"$W/c1")" -eq 3 ] && cmp -s "$W/c1" "$W/c2"; then pass chat_prefix_reuse_equals_reprefill
else fail chat_prefix_reuse_equals_reprefill "$(cat "$W/c1" "$W/c2")"; fi
reused=$(sed -n 's/.* \([0-9]*\) reused from the cache.*/\1/p' "$W/c1.err" | tail -1)
[ "${reused:-0}" -gt 50 ] && pass chat_reuses_kv_prefix || fail chat_reuses_kv_prefix "reused ${reused:-none}"

# Ctrl-C stops the answer, the conversation goes on. SIGINT is resent until
# the answer stops: a background job starts with SIGINT ignored until the
# chat installs its handler after loading. One that lands while the message
# is read stops the reading and drops the turn ("[stopped while reading the
# prompt]", tests/runtime/test_chat_tty.sh); the message is then sent again,
# so how long reading takes here (ASan) cannot fail the case.
mkfifo "$W/int.in"
"$BIN" chat "$M" -n 150000 --ignore-eos --ctx 200000 --temp 0 <"$W/int.in" >/dev/null \
  2>"$W/int.err" &
pid=$!
exec 3>"$W/int.in"
printf 'Tell me a long story\n' >&3
( sleep 120; kill -9 $pid ) >/dev/null 2>&1 & watchdog=$!
dropped=0 hold=0
for _ in $(seq 1 120); do
  sleep 0.5
  grep -q "\[stopped\]" "$W/int.err" && break
  n=$(grep -c "stopped while reading" "$W/int.err" || true)
  if [ "$n" -gt "$dropped" ]; then # asked again, with longer for reading each time
    dropped=$n hold=$((2 * n))
    printf 'Tell me a long story\n' >&3
  fi
  if [ $hold -gt 0 ]; then hold=$((hold - 1)); continue; fi
  kill -INT $pid 2>/dev/null
done
printf '/quit\n' >&3
exec 3>&-
wait $pid; rc=$?
kill $watchdog 2>/dev/null
[ $rc -eq 0 ] && grep -q "\[stopped\]" "$W/int.err" && pass chat_ctrl_c_stops_answer || fail chat_ctrl_c_stops_answer "rc=$rc $(tail -2 "$W/int.err")"

# a conversation longer than the context: a clear message, no crash
printf 'Hello there\n' | "$BIN" chat "$M" -n 4 --ctx 40 --temp 0 >/dev/null 2>"$W/ctx.err"; rc=$?
grep -q "no longer fits the context of 40 tokens" "$W/ctx.err" && pass chat_context_full_message || fail chat_context_full_message "rc=$rc $(cat "$W/ctx.err")"
out=$("$BIN" run "$M" -p "$Q" -n 4 --ctx 30 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q "CONTEXT_FULL" && pass run_prompt_over_context || fail run_prompt_over_context "rc=$rc $out"

[ "$fails" -eq 0 ]
