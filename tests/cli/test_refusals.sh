#!/usr/bin/env bash
# The command line on broken model folders: a one-line error naming the file
# (and tensor or key), a non-zero exit, never a crash (the suite runs again
# under ASan). Each case breaks a copy of the upstream gpt_oss fixture.
set -u
cd "$(dirname "$0")/../.."
BIN=${MS_BIN:-./moestream}
FIX=${MOESTREAM_FIXTURES:-../shared/fixtures}/gpt_oss
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/refusals; rm -rf "$W"; mkdir -p "$W"
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
[ -d "$FIX" ] || { fail fixture_present "no $FIX"; exit 1; }

# case NAME WANT COMMAND...: runs `inspect` and `run` on a broken copy made by COMMAND
refuses() {
  local name=$1 want=$2; shift 2
  local d=$W/$name
  rm -rf "$d"; cp -r "$FIX" "$d"; chmod -R u+w "$d"
  (cd "$d" && "$@") || { fail "$name" "could not break the copy"; return; }
  local out rc
  for cmd in inspect run; do
    if [ $cmd = run ]; then out=$("$BIN" run "$d" --prompt-ids "$FIX/tokens.txt" -n 1 2>&1); rc=$?
    else out=$("$BIN" inspect "$d" 2>&1); rc=$?; fi
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && printf '%s' "$out" | grep -qF -- "$want"; then
      pass "${name}_$cmd"
    else
      fail "${name}_$cmd" "rc=$rc $(printf '%s' "$out" | tail -2 | tr '\n' ' ')"
    fi
  done
}

S0=model-00000-of-00002.safetensors
S2=model-00002-of-00002.safetensors
refuses truncated_shard "$S2: tensor" truncate -s -1000 "$S2"
refuses header_past_eof "$S0: header length" sh -c "printf '\377\377\377\377\000\000\000\000' | dd of=$S0 conv=notrunc status=none"
refuses missing_shard "shard $S2 (holding" rm "$S2"
refuses bad_config_json "config.json: invalid JSON at line" sh -c 'printf "{\"model_type\": \"gpt_oss\",," > config.json'
refuses non_utf8_header "$S0: header: invalid JSON" sh -c "printf '\\377' | dd of=$S0 bs=1 seek=12 conv=notrunc status=none"
refuses unsupported_family 'model_type "llama" is not supported' sed -i 's/"gpt_oss"/"llama"/' config.json
refuses missing_config_key 'missing required key "hidden_size"' sed -i '/"hidden_size"/d' config.json
refuses wrong_shape 'mis-shaped tensor' python3 -c "
import json; c=json.load(open('config.json')); c['head_dim']=32; json.dump(c,open('config.json','w'))"
out=$("$BIN" inspect "$W/nonexistent" 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q "not a model folder" && pass missing_folder || fail missing_folder "rc=$rc $out"
out=$("$BIN" run 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q "missing MODEL_DIR" && pass usage_error_exit_2 || fail usage_error_exit_2 "rc=$rc $out"
out=$("$BIN" frobnicate 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q 'unknown command "frobnicate"' && pass unknown_command || fail unknown_command "rc=$rc"
out=$("$BIN" run "$FIX" --prompt-ids "$FIX/tokens.txt" --temp -1 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q -- "--temp expects a number" && pass bad_flag_value || fail bad_flag_value "rc=$rc $out"
out=$("$BIN" run "$FIX" --prompt-ids "$FIX/tokens.txt" --threads 65 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q -- "--threads expects an integer in \[1, 64\]" && pass threads_over_64_refused || fail threads_over_64_refused "rc=$rc $out"
out=$("$BIN" run "$FIX" --prompt-ids "$FIX/tokens.txt" --precision fastest 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q -- '--precision expects exact, fast or int8, got "fastest"' && pass precision_value_refused || fail precision_value_refused "rc=$rc $out"
out=$("$BIN" bench "$FIX" --precision 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q -- "--precision needs a value" && pass bench_precision_needs_value || fail bench_precision_needs_value "rc=$rc $out"

# CMD --help and CMD -h: that command's usage on stdout, status 0, for every
# command `moestream help` lists
cmds=$("$BIN" help | sed -n 's/^  moestream \([a-z]*\) .*/\1/p' | sort -u | grep -v '^version$')
bad=""
for c in $cmds; do
  for h in --help -h; do
    out=$("$BIN" "$c" "$h" 2>/dev/null); rc=$?
    [ $rc -eq 0 ] && printf '%s' "$out" | grep -q "^usage: moestream $c" || bad="$bad $c$h(rc=$rc)"
  done
done
[ -n "$cmds" ] && [ -z "$bad" ] && pass "every_command_has_help ($(echo $cmds | wc -w) commands)" ||
  fail every_command_has_help "${bad:-no commands listed}"

[ "$fails" -eq 0 ]
