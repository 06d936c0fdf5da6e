#!/usr/bin/env bash
# gpt_oss end to end: L0 (inspect), L1 (engine vs the independent NumPy oracle on
# generated tiny checkpoints: per-layer states, routing, logits, 32 greedy ids,
# cached decode vs full recompute), L2 (the upstream fixture).
# Prints "PASS name" / "FAIL name: why"; exits 1 when any case fails.
# Env: MS_BIN (default ./moestream), MOESTREAM_FIXTURES, MS_TMP.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
FIX=${MOESTREAM_FIXTURES:-../shared/fixtures}/gpt_oss
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/gpt_oss
rm -rf "$W"; mkdir -p "$W"
ORACLE=tools/oracle/gpt_oss.py
GEN=tools/tinyckpt/gpt_oss.py
. tests/models/lib.sh

# --- L0 --------------------------------------------------------------------------------
C=$W/tiny
$PY $GEN --out "$C" --preset tiny --seed 1 >/dev/null 2>&1 || fail tiny_generate "generator failed"
l0_inspect l0_inspect_tiny "$C"
$PY $GEN --out "$W/drop" --preset tiny --seed 1 --drop model.layers.1.mlp.experts.gate_up_proj_scales >/dev/null 2>&1
l0_missing l0_flags_missing_scale "$W/drop" model.layers.1.mlp.experts.gate_up_proj_scales

# --- L1 against the oracle, two configs and seeds ---------------------------------------
for cfg in "tiny 1" "tiny2 2"; do
  set -- $cfg; preset=$1; seed=$2
  C=$W/$preset
  [ -f "$C/config.json" ] || $PY $GEN --out "$C" --preset "$preset" --seed "$seed" >/dev/null 2>&1
  prompt_ids "$(vocab_of "$C")" "$seed" >"$W/$preset.ids"
  l1_oracle l1_$preset "$C" $ORACLE "$W/$preset.ids"
done

# --- CLI behaviour ------------------------------------------------------------------------
C=$W/tiny
out=$("$BIN" run "$C" --prompt-ids "$W/tiny.ids" -n 8 --ctx 36 --temp 0 --ids --ignore-eos 2>&1 >"$W/ctx.out"); rc=$?
if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q CONTEXT_FULL && [ "$(wc -w <"$W/ctx.out")" -eq 5 ]; then
  pass cli_context_full_stops_cleanly
else
  fail cli_context_full_stops_cleanly "rc=$rc words=$(wc -w <"$W/ctx.out") $out"
fi
out=$("$BIN" logits "$C" --prompt-ids "$W/tiny.ids" --out "$W/x.f32" --ctx 10 2>&1); rc=$?
if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q "CONTEXT_FULL: 0 positions in use + 32 new tokens exceed the context of 10"; then
  pass cli_prompt_over_context_refused
else
  fail cli_prompt_over_context_refused "rc=$rc $out"
fi
printf '1 2 999999\n' >"$W/bad.ids"
out=$("$BIN" run "$C" --prompt-ids "$W/bad.ids" 2>&1); rc=$?
if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q "token 2 of the input is id 999999, outside the vocabulary"; then
  pass cli_bad_token_id_refused
else
  fail cli_bad_token_id_refused "rc=$rc $out"
fi
printf '1 two 3\n' >"$W/bad2.ids"
out=$("$BIN" run "$C" --prompt-ids "$W/bad2.ids" 2>&1); rc=$?
if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q 'token 1 is "two"'; then
  pass cli_malformed_ids_refused
else
  fail cli_malformed_ids_refused "rc=$rc $out"
fi
out=$("$BIN" run "$C" --prompt-ids "$W/tiny.ids" -n 4 --temp 0 --ids --stats 2>&1 >/dev/null)
if printf '%s' "$out" | grep -q "decode: .* tok/s" && printf '%s' "$out" | grep -q "time split: attention"; then
  pass cli_stats
else
  fail cli_stats "$out"
fi
# same seed, same sampled tokens; thread count never changes the logits
"$BIN" run "$C" --prompt-ids "$W/tiny.ids" -n 16 --temp 0.8 --top-p 0.9 --seed 5 --ids >"$W/s1" 2>/dev/null
"$BIN" run "$C" --prompt-ids "$W/tiny.ids" -n 16 --temp 0.8 --top-p 0.9 --seed 5 --ids --threads 1 >"$W/s2" 2>/dev/null
check cli_sampling_reproducible cmp "$W/s1" "$W/s2"
"$BIN" logits "$C" --prompt-ids "$W/tiny.ids" --out "$W/t1.f32" --threads 1 2>/dev/null
check threads_do_not_change_logits cmp "$W/t1.f32" "$W/l1_tiny.f32"

# --- L2: the upstream fixture ------------------------------------------------------------
l2_fixture l2 "$FIX"

[ "$fails" -eq 0 ]
