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
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
check() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$(printf '%s' "$out" | tail -4 | tr '\n' ' ')"; fi
}
vocab_of() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$1/config.json"; }
same_ids() { [ "$(xargs <"$1")" = "$(xargs <"$2")" ]; }

# --- L0 --------------------------------------------------------------------------------
C=$W/tiny
$PY $GEN --out "$C" --preset tiny --seed 1 >/dev/null 2>&1 || fail tiny_generate "generator failed"
check l0_inspect_tiny "$BIN" inspect "$C"
$PY $GEN --out "$W/drop" --preset tiny --seed 1 --drop model.layers.1.mlp.experts.gate_up_proj_scales >/dev/null 2>&1
out=$("$BIN" inspect "$W/drop" 2>&1); rc=$?
if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q "missing tensor model.layers.1.mlp.experts.gate_up_proj_scales" &&
   printf '%s' "$out" | grep -q "L0: FAIL (1 problem)"; then
  pass l0_inspect_flags_missing_scale
else
  fail l0_inspect_flags_missing_scale "rc=$rc: $(printf '%s' "$out" | tail -3 | tr '\n' ' ')"
fi
printf '1 2 3\n' >"$W/three.ids"
out=$("$BIN" run "$W/drop" --prompt-ids "$W/three.ids" -n 1 2>&1); rc=$?
if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q "gate_up_proj_scales"; then
  pass l0_run_refuses_incomplete_model
else
  fail l0_run_refuses_incomplete_model "rc=$rc: $out"
fi

# --- L1 against the oracle, two configs and seeds ---------------------------------------
prompt() { awk -v v="$1" -v s="$2" 'BEGIN { for (i = 0; i < 32; i++) printf "%d ", (i * 37 + s * 11) % (v - 20); print "" }'; }
for cfg in "tiny 1" "tiny2 2"; do
  set -- $cfg; preset=$1; seed=$2
  C=$W/$preset
  [ -d "$C/" ] && [ -f "$C/config.json" ] || $PY $GEN --out "$C" --preset "$preset" --seed "$seed" >/dev/null 2>&1
  V=$(vocab_of "$C")
  prompt "$V" "$seed" >"$W/$preset.ids"
  if ! $PY $ORACLE "$C" --prompt-ids "$W/$preset.ids" --out "$W/$preset.oracle.f32" --greedy 32 \
        --greedy-out "$W/$preset.oracle.greedy" --dump "$W/$preset.oracle.dump" >/dev/null 2>"$W/err"; then
    fail l1_${preset}_oracle "$(tail -2 "$W/err")"; continue
  fi
  if ! "$BIN" logits "$C" --prompt-ids "$W/$preset.ids" --out "$W/$preset.f32" \
        --dump "$W/$preset.dump" 2>"$W/err"; then
    fail l1_${preset}_logits "$(tail -2 "$W/err")"; continue
  fi
  check l1_${preset}_states_and_logits $PY tools/oracle/compare_dump.py "$W/$preset.dump" "$W/$preset.oracle.dump" \
    --float L0.attn_out L0.moe_out 'L*.moe_out' final_norm logits --ints 'L*.topk_ids' --tol 1e-4
  check l1_${preset}_argmax $PY tools/oracle/compare.py "$W/$preset.f32" "$W/$preset.oracle.f32" --vocab "$V" --tol 1e-4
  "$BIN" run "$C" --prompt-ids "$W/$preset.ids" -n 32 --temp 0 --ids --ignore-eos >"$W/$preset.greedy" 2>"$W/err"
  if same_ids "$W/$preset.greedy" "$W/$preset.oracle.greedy"; then
    pass l1_${preset}_greedy32
  else
    fail l1_${preset}_greedy32 "got $(cat "$W/$preset.greedy") want $(cat "$W/$preset.oracle.greedy") $(tail -1 "$W/err")"
  fi
  # decode through the KV cache (one token at a time, and in ragged pieces) == one batch
  for feed in 1 7; do
    "$BIN" logits "$C" --prompt-ids "$W/$preset.ids" --out "$W/$preset.feed$feed.f32" --feed $feed 2>"$W/err"
    check l1_${preset}_cache_feed${feed}_equals_batch cmp "$W/$preset.feed$feed.f32" "$W/$preset.f32"
  done
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
check threads_do_not_change_logits cmp "$W/t1.f32" "$W/tiny.f32"

# --- L2: the upstream fixture ------------------------------------------------------------
if [ ! -d "$FIX" ]; then
  fail l2_fixture_present "no fixture folder $FIX (set MOESTREAM_FIXTURES)"
else
  V=$(vocab_of "$FIX")
  check l2_inspect "$BIN" inspect "$FIX"
  if "$BIN" logits "$FIX" --prompt-ids "$FIX/tokens.txt" --out "$W/fx.f32" 2>"$W/err"; then
    check l2_logits $PY tools/oracle/compare.py "$W/fx.f32" "$FIX/ref_logits.f32" --vocab "$V" --tol 1e-3
  else
    fail l2_logits "$(tail -2 "$W/err")"
  fi
  "$BIN" run "$FIX" --prompt-ids "$FIX/tokens.txt" -n 16 --temp 0 --ids --ignore-eos >"$W/fx.greedy" 2>"$W/err"
  if same_ids "$W/fx.greedy" "$FIX/ref_greedy.txt"; then
    pass l2_greedy16
  else
    fail l2_greedy16 "got $(cat "$W/fx.greedy") want $(cat "$FIX/ref_greedy.txt")"
  fi
fi

[ "$fails" -eq 0 ]
