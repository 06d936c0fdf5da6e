#!/usr/bin/env bash
# moestream parse splits model output into the OpenAI assistant message for
# every tool-call syntax: several calls in one turn, arguments with nested
# JSON and non-ASCII text, text before a call, reasoning kept apart, and
# malformed calls kept as text with a note. Each case in
# tests/runtime/toolcalls/ is NAME.txt (the model's output), NAME.want.json
# (written by hand from the format: content, reasoning_content, tool_calls as
# [name, arguments], arguments as the raw string or as the JSON it must
# parse to), optionally NAME.tools.json. The format is the name's prefix.
# Then the format a model folder implies (family + its chat template).
set -u
cd "$(dirname "$0")/../.." && . tests/init.sh toolcall
D=tests/runtime/toolcalls

for t in "$D"/*.txt; do
  name=$(basename "$t" .txt)
  case $name in
    harmony_*) fmt=harmony ;; qwen3_coder_*) fmt=qwen3_coder ;; qwen3_*) fmt=qwen3 ;;
    deepseek_v3_1_*) fmt=deepseek_v3_1 ;; deepseek_v3_*) fmt=deepseek_v3 ;; longcat_*) fmt=longcat ;;
    glm45_*) fmt=glm45 ;;
    *) fail "$name" "no format for this name"; continue ;;
  esac
  args=(--format "$fmt" --text-file "$t")
  [ -f "$D/$name.tools.json" ] && args+=(--tools "$D/$name.tools.json")
  grep -q '"opens_reasoning": true' "$D/$name.want.json" && args+=(--opens-reasoning)
  if ! "$BIN" parse "${args[@]}" >"$W/got.json" 2>"$W/err"; then
    fail "parse_$name" "exit status $?: $(cat "$W/err")"; continue
  fi
  why=$($PY - "$W/got.json" "$D/$name.want.json" "$W/err" <<'P'
import json, sys
got = json.load(open(sys.argv[1], encoding="utf-8"))
want = json.load(open(sys.argv[2], encoding="utf-8"))
note = "note:" in open(sys.argv[3], encoding="utf-8").read()
bad = []
if got.get("role") != "assistant": bad.append("role %r" % got.get("role"))
if got.get("content") != want["content"]: bad.append("content %r, want %r" % (got.get("content"), want["content"]))
if got.get("reasoning_content") != want.get("reasoning_content"):
    bad.append("reasoning %r, want %r" % (got.get("reasoning_content"), want.get("reasoning_content")))
calls = got.get("tool_calls", [])
if len(calls) != len(want["tool_calls"]): bad.append("%d calls, want %d" % (len(calls), len(want["tool_calls"])))
ids = set()
for c, (name, args) in zip(calls, want["tool_calls"]):
    f = c.get("function", {})
    if c.get("type") != "function" or not c.get("id"): bad.append("call without id/type: %r" % c)
    ids.add(c.get("id"))
    if f.get("name") != name: bad.append("name %r, want %r" % (f.get("name"), name))
    a = f.get("arguments")
    if not isinstance(a, str): bad.append("arguments not a string: %r" % a)
    elif isinstance(args, str):
        if a != args: bad.append("arguments %r, want %r" % (a, args))
    elif json.loads(a) != args: bad.append("arguments %r, want %r" % (a, args))
if len(ids) != len(calls): bad.append("call ids not unique")
if want.get("note", False) != note: bad.append("note on stderr: %s, want %s" % (note, want.get("note", False)))
print("; ".join(bad))
P
)
  [ -z "$why" ] && pass "parse_$name" || fail "parse_$name" "$why"
done

# streaming: over prefixes of each well-formed case, --partial gives content
# and reasoning that are prefixes of the final ones (they only grow), and
# tool calls only once closed, as a prefix of the final list
for t in "$D"/*.txt; do
  name=$(basename "$t" .txt)
  grep -q '"note": true' "$D/$name.want.json" && continue
  case $name in
    harmony_*) fmt=harmony ;; qwen3_coder_*) fmt=qwen3_coder ;; qwen3_*) fmt=qwen3 ;;
    deepseek_v3_1_*) fmt=deepseek_v3_1 ;; deepseek_v3_*) fmt=deepseek_v3 ;; longcat_*) fmt=longcat ;;
    glm45_*) fmt=glm45 ;;
  esac
  extra=()
  [ -f "$D/$name.tools.json" ] && extra+=(--tools "$D/$name.tools.json")
  grep -q '"opens_reasoning": true' "$D/$name.want.json" && extra+=(--opens-reasoning)
  why=$($PY - "$BIN" "$fmt" "$t" "$W/prefix.txt" "${extra[@]}" <<'P'
import json, subprocess, sys
bin_, fmt, path, tmp, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
data = open(path, "rb").read()
def parse(b, partial):
    open(tmp, "wb").write(b)
    r = subprocess.run([bin_, "parse", "--format", fmt, "--text-file", tmp] + extra +
                       (["--partial"] if partial else []), capture_output=True)
    if r.returncode:
        raise SystemExit("exit %d on a prefix: %s" % (r.returncode, r.stderr.decode()))
    return json.loads(r.stdout)
final = parse(data, False)
cuts = [i for i in range(len(data) + 1) if i == len(data) or (data[i] & 0xC0) != 0x80]
for i in cuts[::5] + [len(data)]:
    m = parse(data[:i], True)
    for k in ("content", "reasoning_content"):
        a, b = m.get(k) or "", final.get(k) or ""
        if not b.startswith(a):
            raise SystemExit("at byte %d %s %r is not a prefix of %r" % (i, k, a, b))
    calls, fc = m.get("tool_calls", []), final.get("tool_calls", [])
    if calls != fc[:len(calls)]:
        raise SystemExit("at byte %d calls %r are not a prefix of %r" % (i, calls, fc))
P
)
  [ -z "$why" ] && pass "partial_prefixes_$name" || fail "partial_prefixes_$name" "$why"
done

# the format of a folder: family + chat template
TD=
for d in ${MS_TEMPLATES:-} ../shared/templates /work/shared/templates; do [ -d "$d" ] && { TD=$d; break; }; done
folder() { # NAME MODEL_TYPE TEMPLATE_FILE|-
  mkdir -p "$W/$1"; echo "{\"model_type\": \"$2\"}" >"$W/$1/config.json"
  [ "$3" != - ] && cp "$3" "$W/$1/chat_template.jinja"
  return 0
}
printf '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>' >"$W/q.txt"
if [ -n "$TD" ]; then
  folder q3 qwen3_moe "$TD/Qwen-Qwen3-0.6B.jinja"
  folder coder qwen3_moe "$TD/Qwen3-Coder.jinja"
  folder ds31 deepseek_v3 "$TD/deepseek-ai-DeepSeek-V3.1.jinja"
  folder r1 deepseek_v3 "$TD/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
  folder goss gpt_oss "$TD/openai-gpt-oss-120b.jinja"
  folder glm glm4_moe "$TD/GLM-4.6.jinja"
  for c in "q3 qwen3" "coder qwen3_coder" "ds31 deepseek_v3_1" "r1 deepseek_v3" "goss harmony" \
           "glm glm45"; do
    set -- $c
    "$BIN" parse "$W/$1" --text-file "$W/q.txt" >"$W/a.json" 2>"$W/a.err"
    grep -q "^moestream parse: $2 tool-call format$" "$W/a.err" && [ -s "$W/a.json" ] &&
      pass "folder_format_$1_is_$2" || fail "folder_format_$1_is_$2" "$(cat "$W/a.err")"
  done
else
  fail folder_formats "no ../shared/templates"
fi
out=$("$BIN" parse --format nope --text-file "$W/q.txt" 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q 'qwen3_coder' && pass refuses_unknown_format || fail refuses_unknown_format "$out"

[ "$fails" -eq 0 ]
