#!/usr/bin/env bash
# moestream serve, end to end on tiny gpt_oss checkpoints over the real o200k
# tokenizer: the official `openai` npm client (tests/server/client.mjs) for
# chat and completions, streaming and not, checked against `moestream run` /
# `chat` with --temp 0; raw HTTP (curl) for every error status; a client that
# hangs up cancels its generation (running or still queued); SIGTERM stops
# the server cleanly (exit 0, so ASan's leak check runs).
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
own_tmp=; if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); own_tmp=1; fi
W=$MS_TMP/serve; rm -rf "$W"; mkdir -p "$W"
. tests/server/lib.sh
trap 'kill_servers; [ -z "$own_tmp" ] || rm -rf "$MS_TMP"' EXIT
need_node_openai

M=$W/model S=$W/scripted
if ! make_model "$M" || ! make_scripted "$S" "$M"; then fail models "cannot write the test checkpoints"; exit 1; fi

# ---- what the command line gives for the same requests --------------------------
Q="What is the capital of France? Answer in one word."
Q2="And the capital of Germany?"
echo "[{\"role\": \"user\", \"content\": \"$Q\"}]" >"$W/m.json"
"$BIN" render --family gpt_oss --messages "$W/m.json" >"$W/prompt.txt"
"$BIN" tokenize "$M" --text-file "$W/prompt.txt" >"$W/prompt.ids" 2>/dev/null
"$BIN" run "$M" -p "$Q" -n 16 --temp 0 --ids >"$W/chat.ids" 2>/dev/null
"$BIN" run "$M" -p "$Q" -n 16 --temp 0 >"$W/chat.txt" 2>/dev/null
printf '%s\n%s\n' "$Q" "$Q2" | "$BIN" chat "$M" -n 16 --temp 0 --ids >"$W/chat2.ids" 2>/dev/null
CP="Once upon a time"
"$BIN" run "$M" -p "$CP" --raw -n 12 --temp 0 --ids >"$W/comp.ids" 2>/dev/null
"$BIN" run "$M" -p "$CP" --raw -n 12 --temp 0 >"$W/comp.txt" 2>/dev/null
"$BIN" run "$S" -p "What is the capital of France?" -n 64 --temp 0 >"$W/script.out" 2>"$W/script.err"

# ---- servers: the random model, and the scripted one behind an API key ----------
start_server main "$M" --max-body 64K --parallel 2 || exit 1
start_server keyed "$S" --api-key sekret --ctx 160 || exit 1
grep -q "^moestream serve: listening on http://127.0.0.1:[0-9]* (model model, gpt_oss, context 8192 tokens, 2 parallel slots)" "$W/main.log" &&
  grep -Eq "\(model scripted, gpt_oss, context 160 tokens, [0-9]+ parallel slots?, API key required\)" "$W/keyed.log" &&
  pass listening_line_loopback_by_default || fail listening_line_loopback_by_default "$(cat "$W/main.log" "$W/keyed.log")"

$PY - "$W" "$main_url" "$keyed_url" "$Q" "$Q2" "$CP" "$SCRIPT_ANSWER" "$SCRIPT_REASONING" >"$W/cfg.json" <<'P'
import json, sys
w, main, keyed, q, q2, cp, ans, rsn = sys.argv[1:]
ids = lambda f: [int(x) for x in open(f"{w}/{f}").read().split()]
text = lambda f: open(f"{w}/{f}", encoding="utf-8", errors="replace").read()[:-1]  # run ends with "\n"
lines = open(f"{w}/chat2.ids").read().splitlines()
err = [l for l in open(f"{w}/script.err").read().splitlines() if not l.startswith("moestream:")]
json.dump(dict(main=main, keyed=keyed, key="sekret", model_name="model", question=q, question2=q2,
               chat_ids=ids("chat.ids"), chat_text=text("chat.txt"),
               prompt_tokens=len(ids("prompt.ids")),
               chat2_ids=[int(x) for x in lines[1].split()] if len(lines) > 1 else [],
               comp_prompt=cp, comp_ids=ids("comp.ids"), comp_text=text("comp.txt"),
               script_answer=ans, script_reasoning=rsn, script_run_answer=text("script.out"),
               script_run_reasoning="\n".join(err)), sys.stdout)
P
run_node client tests/server/client.mjs "$W/cfg.json"

# ---- raw HTTP: statuses and OpenAI-style error bodies ---------------------------
# expect NAME STATUS [CODE] -- curl args: the status, and {"error": {message, type, param,
# code}} with that code when one is given
expect() {
  local name=$1 want=$2 code=$3 got; shift 4
  got=$(curl -s -o "$W/body" -D "$W/headers" -w '%{http_code}' --max-time 60 "$@")
  if [ "$got" != "$want" ]; then fail "$name" "status $got, want $want: $(head -c 300 "$W/body")"; return; fi
  if [ "$want" != 200 ] && ! $PY - "$W/body" "$code" <<'P'; then
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert set(e) == {"message", "type", "param", "code"}, e
assert isinstance(e["message"], str) and e["message"] and isinstance(e["type"], str), e
assert not sys.argv[2] or e["code"] == sys.argv[2], e
P
    fail "$name" "error body $(head -c 300 "$W/body")"; return
  fi
  pass "$name"
}
U=$main_url
J=(-H 'Content-Type: application/json')
MSG='"messages": [{"role": "user", "content": "Hi"}]'
expect health 200 "" -- "$U/health"
expect unknown_path_404 404 unknown_url -- "$U/v1/nothing"
expect unknown_path_post_404 404 unknown_url -- "$U/v2/chat/completions" -d '{}'
expect wrong_method_405 405 method_not_allowed -- -X DELETE "$U/v1/chat/completions"
grep -qi '^Allow: POST' "$W/headers" && pass allow_header || fail allow_header "$(cat "$W/headers")"
expect get_on_post_route_405 405 method_not_allowed -- "$U/v1/completions"
expect post_on_models_405 405 method_not_allowed -- "$U/v1/models" -d '{}'
expect malformed_json_400 400 invalid_json -- "${J[@]}" "$U/v1/chat/completions" -d '{"messages": [}'
expect empty_body_400 400 invalid_json -- "${J[@]}" "$U/v1/chat/completions" -X POST
expect not_an_object_400 400 invalid_json -- "$U/v1/chat/completions" -d '[1, 2]'
expect invalid_utf8_400 400 invalid_json -- "$U/v1/completions" --data-binary $'{"prompt": "\xff\xfe"}'
expect missing_messages_400 400 missing_required_parameter -- "$U/v1/chat/completions" -d '{"max_tokens": 4}'
grep -q '"param":"messages"' "$W/body" && pass missing_messages_param || fail missing_messages_param "$(cat "$W/body")"
expect empty_messages_400 400 invalid_value -- "$U/v1/chat/completions" -d '{"messages": []}'
expect missing_prompt_400 400 missing_required_parameter -- "$U/v1/completions" -d '{"max_tokens": 4}'
expect messages_wrong_type_400 400 invalid_type -- "$U/v1/chat/completions" -d '{"messages": "Hi"}'
expect max_tokens_wrong_type_400 400 invalid_type -- "$U/v1/chat/completions" -d "{$MSG, \"max_tokens\": \"5\"}"
expect temperature_range_400 400 invalid_value -- "$U/v1/chat/completions" -d "{$MSG, \"temperature\": 3}"
expect stop_wrong_type_400 400 invalid_type -- "$U/v1/chat/completions" -d "{$MSG, \"stop\": [\"a\", 5]}"
expect stream_wrong_type_400 400 invalid_type -- "$U/v1/chat/completions" -d "{$MSG, \"stream\": \"yes\"}"
expect role_unsupported_400 400 invalid_value -- "$U/v1/chat/completions" -d '{"messages": [{"role": "function", "content": "x"}]}'
# a folder without a template: the built-in format cannot render tool results
expect tool_role_without_template_400 400 "" -- "$U/v1/chat/completions" -d '{"messages": [{"role": "tool", "content": "x"}]}'
expect content_part_not_text_400 400 invalid_value -- "$U/v1/chat/completions" -d '{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}'
expect n_2_400 400 invalid_value -- "$U/v1/chat/completions" -d "{$MSG, \"n\": 2}"
expect unknown_fields_tolerated 200 "" -- "$U/v1/chat/completions" -d "{$MSG, \"max_tokens\": 2, \"frobnicate\": {\"x\": [1, null]}, \"user\": \"me\", \"tools\": [], \"metadata\": null}"
expect content_parts_accepted 200 "" -- "$U/v1/chat/completions" -d '{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_tokens": 2}'
head -c 100000 /dev/zero | tr '\0' a >"$W/big"
expect body_over_limit_413 413 request_too_large -- "$U/v1/completions" --data-binary @"$W/big"
expect chunked_body_over_limit_413 413 request_too_large -- "$U/v1/completions" -H 'Transfer-Encoding: chunked' --data-binary @"$W/big"
K=$keyed_url
expect api_key_missing_401 401 invalid_api_key -- "$K/v1/models"
expect api_key_wrong_401 401 invalid_api_key -- -H 'Authorization: Bearer nope' "$K/v1/chat/completions" -d "{$MSG}"
expect api_key_right_200 200 "" -- -H 'Authorization: Bearer sekret' "$K/v1/models"
expect health_needs_no_key 200 "" -- "$K/health"
LONG=$(printf 'word %.0s' $(seq 1 300))
expect prompt_over_context_400 400 context_length_exceeded -- -H 'Authorization: Bearer sekret' "$K/v1/chat/completions" -d "{\"messages\": [{\"role\": \"user\", \"content\": \"$LONG\"}]}"
grep -q "maximum context length is 160 tokens. However, your messages resulted in [0-9]* tokens" "$W/body" &&
  pass prompt_over_context_numbers || fail prompt_over_context_numbers "$(cat "$W/body")"
expect completion_over_context_400 400 context_length_exceeded -- -H 'Authorization: Bearer sekret' "$K/v1/completions" -d "{\"prompt\": \"$LONG\"}"

# ---- a client that hangs up cancels its generation --------------------------------
LONGGEN="\"max_tokens\": 100000, \"ignore_eos\": true, \"temperature\": 0"
cancelled() { grep -c "cancelled" "$W/main.log"; }
wait_cancelled() { # N: wait until N generations were cancelled (10 s at most)
  local i; for i in $(seq 1 100); do [ "$(cancelled)" -ge "$1" ] && return 0; sleep 0.1; done; return 1
}
curl -sN --max-time 2 "$U/v1/chat/completions" -d "{$MSG, $LONGGEN, \"stream\": true}" >"$W/s1" 2>/dev/null
if wait_cancelled 1 && grep -q '^data: {' "$W/s1"; then pass stream_hangup_cancels
else fail stream_hangup_cancels "$(tail -3 "$W/main.log")"; fi
curl -s --max-time 2 "$U/v1/completions" -d "{\"prompt\": \"Hi\", $LONGGEN}" >/dev/null 2>&1
wait_cancelled 2 && pass nonstream_hangup_cancels || fail nonstream_hangup_cancels "$(tail -3 "$W/main.log")"
# a queued request whose client leaves never runs (both slots busy)
curl -sN --max-time 4 "$U/v1/completions" -d "{\"prompt\": \"Hi\", $LONGGEN, \"stream\": true}" >/dev/null 2>&1 &
cpid=$!
curl -sN --max-time 4 "$U/v1/completions" -d "{\"prompt\": \"Ho\", $LONGGEN, \"stream\": true}" >/dev/null 2>&1 &
cpid2=$!
sleep 1
curl -s --max-time 1 "$U/v1/completions" -d "{\"prompt\": \"Queued\", \"max_tokens\": 4}" >/dev/null 2>&1
wait $cpid $cpid2
if wait_cancelled 5 && grep -q "cancelled before it started" "$W/main.log"; then pass queued_hangup_never_runs
else fail queued_hangup_never_runs "$(tail -3 "$W/main.log")"; fi
expect alive_after_hangups 200 "" -- "$U/v1/completions" -d '{"prompt": "Hi", "max_tokens": 2}'

# ---- malformed HTTP never takes the server down ---------------------------------------
garbage_http "$U" 200
expect alive_after_garbage 200 "" -- "$U/v1/completions" -d '{"prompt": "Hi", "max_tokens": 2}'

# ---- browsers: DNS rebinding, cross-origin pages, CORS when allowed --------------------
port=${main_url##*:}
gens() { grep -c "generated" "$W/main.log"; }
expect host_rebinding_403 403 host_not_allowed -- -H "Host: evil.example:$port" "$U/v1/models"
expect host_localhost_ok 200 "" -- -H "Host: localhost:$port" "$U/v1/models"
expect host_ipv6_loopback_ok 200 "" -- -H "Host: [::1]:$port" "$U/v1/models"
before=$(gens)
expect cross_origin_post_403 403 origin_not_allowed -- -H "Origin: http://evil.example" \
  -H "Content-Type: text/plain" "$U/v1/completions" -d '{"prompt": "Hi", "max_tokens": 2}'
sleep 0.3
[ "$(gens)" = "$before" ] && pass cross_origin_post_runs_nothing || fail cross_origin_post_runs_nothing "a generation ran"
expect same_origin_ok 200 "" -- -H "Origin: http://127.0.0.1:$port" "$U/v1/completions" -d '{"prompt": "Hi", "max_tokens": 2}'
expect preflight_without_cors_403 403 origin_not_allowed -- -X OPTIONS -H "Origin: http://app.example" "$U/v1/chat/completions"
start_server corsy "$M" --cors http://app.example --parallel 1 || exit 1
C=$corsy_url
code=$(curl -s -o /dev/null -D "$W/pre.h" -w '%{http_code}' -X OPTIONS -H "Origin: http://app.example" \
  -H "Access-Control-Request-Method: POST" -H "Access-Control-Request-Headers: content-type, authorization" \
  "$C/v1/chat/completions")
[ "$code" = 204 ] && grep -qi "^access-control-allow-origin: http://app.example" "$W/pre.h" &&
  grep -qi "^access-control-allow-headers: content-type, authorization" "$W/pre.h" &&
  pass cors_preflight_allowed || fail cors_preflight_allowed "$code $(cat "$W/pre.h")"
code=$(curl -s -o "$W/cors.b" -D "$W/cors.h" -w '%{http_code}' -H "Origin: http://app.example" \
  "$C/v1/completions" -d '{"prompt": "Hi", "max_tokens": 2}')
[ "$code" = 200 ] && grep -qi "^access-control-allow-origin: http://app.example" "$W/cors.h" &&
  pass cors_post_allowed || fail cors_post_allowed "$code $(cat "$W/cors.h")"
expect cors_other_origin_403 403 origin_not_allowed -- -H "Origin: http://evil.example" "$C/v1/models"
stop_server corsy
# the Authorization scheme in any case; ids nobody can guess
expect auth_scheme_case_insensitive 200 "" -- -H "Authorization: bearer sekret" "$K/v1/models"
id1=$(curl -s "$U/v1/completions" -d '{"prompt": "Hi", "max_tokens": 1}' | $PY -c 'import json,sys; print(json.load(sys.stdin)["id"])')
id2=$(curl -s "$U/v1/completions" -d '{"prompt": "Hi", "max_tokens": 1}' | $PY -c 'import json,sys; print(json.load(sys.stdin)["id"])')
same=$($PY -c "import sys; a, b = sys.argv[1][-16:], sys.argv[2][-16:]; print(sum(x == y for x, y in zip(a, b)))" "$id1" "$id2")
[ -n "$id1" ] && [ "$same" -lt 8 ] && pass ids_random || fail ids_random "$id1 $id2 share $same of 16 hex digits"
# beyond loopback without a key: said on stderr
"$BIN" serve "$M" --host 0.0.0.0 --port 0 --parallel 1 2>"$W/open.log" & opid=$!
for _ in $(seq 1 300); do grep -q "listening on" "$W/open.log" && break; sleep 0.1; done
kill -TERM $opid; wait $opid
grep -q "warning: listening on 0.0.0.0, beyond this machine, without --api-key" "$W/open.log" &&
  pass warns_open_without_key || fail warns_open_without_key "$(head -5 "$W/open.log")"

# ---- /health while the model loads (the tokenizer and its vocabulary index take a
# few hundred ms on o200k): 503 {"status": "loading"}, then 200
"$BIN" serve "$M" --port 0 --parallel 1 2>"$W/ld.log" & ldpid=$!
for _ in $(seq 1 500); do grep -q "loading" "$W/ld.log" && break; sleep 0.01; done
ldport=$(sed -n 's/.*\/health answers on port \([0-9]*\) meanwhile/\1/p' "$W/ld.log")
seen=""
for _ in $(seq 1 500); do
  code=$(curl -s -o "$W/ld.body" -w '%{http_code}' "http://127.0.0.1:$ldport/health")
  [ "$code" = 503 ] && grep -q '"status":"loading"' "$W/ld.body" && seen="$seen loading"
  [ "$code" = 200 ] && { seen="$seen ok"; break; }
  sleep 0.01
done
kill -TERM $ldpid; wait $ldpid
case "$seen" in *loading*ok) pass health_while_loading ;; *) fail health_while_loading "seen:$seen $(cat "$W/ld.log")" ;; esac

# ---- prompt caches: with one slot and two cached conversations, a returning
# conversation continues from its own KV prefix; without caches it does not
convo_reuse() { # URL -> "first-prompt-tokens reused-when-A-returns"
  $PY - "$1" <<'P'
import json, sys, urllib.request
url = sys.argv[1]
def chat(msgs):
    r = urllib.request.urlopen(urllib.request.Request(url + "/v1/chat/completions",
        data=json.dumps({"messages": msgs, "max_tokens": 3, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"}), timeout=60)
    return json.load(r)
a = [{"role": "user", "content": "Conversation A: tell me about apples and their many uses in cooking."}]
ra = chat(a)
for who in ("B: bananas", "C: cherries"):
    chat([{"role": "user", "content": "Conversation " + who + " and where they grow best."}])
a2 = a + [{"role": "assistant", "content": ra["choices"][0]["message"]["content"] or ""},
          {"role": "user", "content": "And pears?"}]
r2 = chat(a2)
print(ra["usage"]["prompt_tokens"], r2["usage"]["prompt_tokens_details"]["cached_tokens"])
P
}
start_server pc "$M" --parallel 1 --prompt-cache 2 || exit 1
read -r n1 reuse_c <<<"$(convo_reuse "$pc_url")"
stop_server pc
start_server nopc "$M" --parallel 1 || exit 1
read -r _ reuse_n <<<"$(convo_reuse "$nopc_url")"
stop_server nopc
[ -n "$n1" ] && [ "$reuse_c" -ge $((n1 - 1)) ] && [ "$reuse_n" -lt $((n1 - 1)) ] &&
  pass "prompt_cache_keeps_conversations (first prompt $n1 tokens; reused $reuse_c with caches, $reuse_n without)" ||
  fail prompt_cache_keeps_conversations "first prompt ${n1:-?}, reused ${reuse_c:-?} with caches, ${reuse_n:-?} without"

# ---- prompt caches on disk: no cache in memory, conversations spilled to disk
# when their session is reused; A comes back from the disk, with the answer it
# gets without any cache; after a restart the files are found again
start_server pd "$M" --parallel 1 --prompt-cache-disk 64M --prompt-cache-dir "$W/pcd" || exit 1
read -r reuse_d ans_d <<<"$(convo_answer "$pd_url")"
curl -s "$pd_url/metrics" >"$W/pd.metrics"
stop_server pd
start_server pdn "$M" --parallel 1 || exit 1
read -r reuse_dn ans_dn <<<"$(convo_answer "$pdn_url")"
stop_server pdn
loaded=$(sed -n 's/^moestream_prompt_cache_disk_loaded_total \([0-9]*\)/\1/p' "$W/pd.metrics")
[ "${reuse_d:-0}" -ge 32 ] && [ "${reuse_dn:-0}" -lt "${reuse_d:-0}" ] &&
  [ "${loaded:-0}" -ge 1 ] && [ -n "$ans_d" ] && [ "$ans_d" = "$ans_dn" ] &&
  pass "prompt_cache_on_disk (reused $reuse_d of A's return from disk, $reuse_dn without; the same answer $ans_d)" ||
  fail prompt_cache_on_disk "reused ${reuse_d:-?} (without ${reuse_dn:-?}), loaded ${loaded:-?}, answers $ans_d / $ans_dn; $(grep -i 'prompt cache' "$W/pd.log" | tail -2)"
nfiles=$(ls "$W/pcd"/*.kv 2>/dev/null | wc -l)
start_server pdr "$M" --parallel 1 --prompt-cache-disk 64M --prompt-cache-dir "$W/pcd" || exit 1
read -r reuse_r ans_r <<<"$(convo_answer "$pdr_url" second-only)"
stop_server pdr
[ "$nfiles" -ge 1 ] && grep -q "conversations found" "$W/pdr.log" && [ "${reuse_r:-0}" -ge "${reuse_d:-1}" ] &&
  [ "$ans_r" = "$ans_d" ] &&
  pass "prompt_cache_survives_restart ($nfiles files; the second run reused $reuse_r)" ||
  fail prompt_cache_survives_restart "$nfiles files, reused ${reuse_r:-?}: $(grep -i 'prompt cache' "$W/pdr.log" | tail -2)"

# ---- slow clients: 1100 connections that send their headers a line every half second
# (more than the server's 1024 connections) hold nothing past --read-timeout
start_server slowl "$M" --read-timeout 1 --parallel 1 || exit 1
slport=${slowl_url##*:}
$PY - "$slport" >"$W/slowloris.out" 2>&1 <<'P' &
import socket, sys, time
port = int(sys.argv[1])
socks = []
for i in range(1100):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
        socks.append(s)
    except OSError:
        pass
end = time.time() + 6
while time.time() < end:
    for s in socks:
        try:
            s.sendall(b"X-Slow: 1\r\n")
        except OSError:
            pass
    time.sleep(0.5)
P
slpid=$!
sleep 2.5
t0=$(date +%s.%N)
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$slowl_url/v1/models")
t1=$(date +%s.%N)
wait $slpid
[ "$code" = 200 ] && pass "slow_clients_do_not_starve_others ($(echo "$t1 - $t0" | bc) s)" ||
  fail slow_clients_do_not_starve_others "status $code after slow clients: $(tail -3 "$W/slowl.log")"
stop_server slowl

# ---- a client that disconnects mid-stream frees its slot at once: on one slot, the
# next request starts right after the hang-up, not after the abandoned generation
start_server oneslot "$M" --parallel 1 || exit 1
curl -sN --max-time 1 "$oneslot_url/v1/completions" -d "{\"prompt\": \"Hi\", $LONGGEN, \"stream\": true}" >/dev/null 2>&1
t0=$(date +%s.%N)
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 "$oneslot_url/v1/completions" -d '{"prompt": "Next", "max_tokens": 2}')
t1=$(date +%s.%N)
dt=$(echo "$t1 - $t0" | bc)
[ "$code" = 200 ] && [ "$(echo "$dt < 2" | bc)" = 1 ] && grep -q cancelled "$W/oneslot.log" &&
  pass "hangup_frees_slot_at_once (next request in $dt s)" ||
  fail hangup_frees_slot_at_once "status $code after $dt s: $(tail -2 "$W/oneslot.log")"
stop_server oneslot

# ---- limits: OpenAI's 16 for completions, the cap, the per-request timeout -------------
nids() { $PY -c 'import json,sys; print(len(json.load(sys.stdin)["moestream"]["ids"]))'; }
n=$(curl -s "$U/v1/completions" -d '{"prompt": "Hi", "ignore_eos": true}' | nids)
[ "$n" = 16 ] && pass completions_default_16_tokens || fail completions_default_16_tokens "$n ids"
start_server capped "$M" --max-tokens-cap 5 --parallel 1 || exit 1
n=$(curl -s "$capped_url/v1/chat/completions" -d "{$MSG, \"max_tokens\": 50, \"ignore_eos\": true}" | nids)
[ "$n" = 5 ] && pass max_tokens_cap || fail max_tokens_cap "$n ids"
stop_server capped
start_server slow "$M" --request-timeout 0.5 --parallel 1 || exit 1
fin=$(curl -s --max-time 30 "$slow_url/v1/completions" -d "{\"prompt\": \"Hi\", $LONGGEN}" |
      $PY -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["finish_reason"])')
[ "$fin" = length ] && grep -q "timed out" "$W/slow.log" && pass request_timeout ||
  fail request_timeout "finish $fin: $(tail -2 "$W/slow.log")"
# /metrics, read by the Prometheus client's own parser
curl -s -D "$W/m.h" "$U/metrics" >"$W/metrics.txt"
why=$($PY - "$W/metrics.txt" <<'P'
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
def val(name, **labels):
    for s in fams[name].samples:
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError(name)
try:
    assert val("moestream_requests", endpoint="chat") > 0 and val("moestream_requests", endpoint="completions") > 0
    assert val("moestream_generated_tokens") > 0 and val("moestream_prompt_tokens") > 0
    assert val("moestream_slots") == 2 and val("moestream_decode_steps") > 0
    assert val("moestream_requests_finished", how="cancelled") >= 3
    assert val("moestream_requests_rejected") > 0
    for n in ("moestream_queue_length", "moestream_slots_busy", "moestream_expert_hits",
              "moestream_uptime_seconds", "moestream_prompt_cache_tokens"):
        val(n)
except (AssertionError, KeyError) as e:
    print("metrics: %r" % (e,))
P
)
[ -z "$why" ] && grep -qi "^content-type: text/plain; version=0.0.4" "$W/m.h" && pass metrics_prometheus_text ||
  fail metrics_prometheus_text "$why $(head -c 300 "$W/metrics.txt")"
stop_server slow

# ---- command line ---------------------------------------------------------------------
"$BIN" serve >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && pass cli_missing_model || fail cli_missing_model "exit $rc"
"$BIN" serve "$M" -p hi >/dev/null 2>"$W/cli.err"; rc=$?
[ $rc -eq 2 ] && grep -q "is an option of .*, not of serve" "$W/cli.err" && pass cli_run_only_option || fail cli_run_only_option "exit $rc $(cat "$W/cli.err")"
port=${main_url##*:}
"$BIN" serve "$M" --port "$port" >/dev/null 2>"$W/cli.err"; rc=$?
[ $rc -ne 0 ] && grep -q "cannot listen on 127.0.0.1 port $port" "$W/cli.err" && pass cli_port_in_use || fail cli_port_in_use "exit $rc $(tail -2 "$W/cli.err")"

stop_server main
stop_server keyed
[ "$fails" -eq 0 ]
