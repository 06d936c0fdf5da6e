# Shared steps of the family tests (sourced). Each step prints PASS/FAIL lines
# and counts failures in $fails.
#   l0_inspect NAME DIR                  inspect passes
#   l0_missing NAME DIR TENSOR           inspect flags exactly that missing tensor; run refuses
#   l1_oracle NAME DIR ORACLE IDS        engine vs oracle: states, routing, logits, 32 greedy
#                                        ids, cached decode == batch, forced-eviction cache
#   l2_fixture NAME DIR                  the upstream fixture: logits within 1e-3, 16 greedy ids
#   deviation NAME LABEL A REF V BOUND.. a rounded path's deviation, printed and bounded
# Env: BIN, PY, W (work dir).
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
check() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$(printf '%s' "$out" | tail -4 | tr '\n' ' ')"; fi
}
vocab_of() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$1/config.json"; }
topk_of() { $PY -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c.get("num_experts_per_tok") or c.get("experts_per_token") or c["moe_topk"])' "$1/config.json"; }
same_ids() { [ "$(xargs <"$1")" = "$(xargs <"$2")" ]; }
# 32 prompt ids below the vocabulary, varied with a seed
prompt_ids() { awk -v v="$1" -v s="$2" 'BEGIN { for (i = 0; i < 32; i++) printf "%d ", (i * 37 + s * 11) % (v - 20); print "" }'; }

# the upstream fixtures (folders of $MOESTREAM_FIXTURES)
FIXTURES="gpt_oss qwen3_moe qwen3_moe_fp8 deepseek_v3 longcat_flash longcat_flash_fp8"
# deviation NAME LABEL A.f32 REF.f32 VOCAB BOUND...: prints how far A's logits
# are from REF's (tools/oracle/deviation.py) after LABEL, and checks the bounds
deviation() {
  local name=$1 label=$2 a=$3 ref=$4 v=$5 dev rc
  shift 5
  dev=$($PY tools/oracle/deviation.py "$a" "$ref" --vocab "$v" "$@"); rc=$?
  printf '     %-24s %s\n' "$label" "$dev"
  if [ $rc -eq 0 ]; then pass "$name"; else fail "$name" "$dev"; fi
}

l0_inspect() { check "$1" "$BIN" inspect "$2"; }

l0_missing() {
  local name=$1 dir=$2 tensor=$3 out rc
  out=$("$BIN" inspect "$dir" 2>&1); rc=$?
  if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q "missing tensor $tensor" &&
     printf '%s' "$out" | grep -q "L0: FAIL (1 problem)"; then
    pass "$name"
  else
    fail "$name" "rc=$rc: $(printf '%s' "$out" | tail -3 | tr '\n' ' ')"
  fi
  printf '1 2 3\n' >"$W/three.ids"
  out=$("$BIN" run "$dir" --prompt-ids "$W/three.ids" -n 1 2>&1); rc=$?
  if [ $rc -ne 0 ] && printf '%s' "$out" | grep -qF "$tensor"; then
    pass "${name}_run_refuses"
  else
    fail "${name}_run_refuses" "rc=$rc: $out"
  fi
}

l1_oracle() {
  local name=$1 C=$2 oracle=$3 ids=$4 V K
  V=$(vocab_of "$C"); K=$(topk_of "$C")
  if ! $PY "$oracle" "$C" --prompt-ids "$ids" --out "$W/$name.oracle.f32" --greedy 32 \
        --greedy-out "$W/$name.oracle.greedy" --dump "$W/$name.oracle.dump" >/dev/null 2>"$W/err"; then
    fail ${name}_oracle "$(tail -2 "$W/err")"; return
  fi
  if ! "$BIN" logits "$C" --prompt-ids "$ids" --out "$W/$name.f32" --dump "$W/$name.dump" 2>"$W/err"; then
    fail ${name}_logits "$(tail -2 "$W/err")"; return
  fi
  check ${name}_states_and_logits $PY tools/oracle/compare_dump.py "$W/$name.dump" "$W/$name.oracle.dump" \
    --float L0.attn_out L0.moe_out 'L*.moe_out' final_norm logits --ints 'L*.topk_ids' --tol 1e-4
  check ${name}_argmax $PY tools/oracle/compare.py "$W/$name.f32" "$W/$name.oracle.f32" --vocab "$V" --tol 1e-4
  "$BIN" run "$C" --prompt-ids "$ids" -n 32 --temp 0 --ids --ignore-eos >"$W/$name.greedy" 2>"$W/err"
  if same_ids "$W/$name.greedy" "$W/$name.oracle.greedy"; then
    pass ${name}_greedy32
  else
    fail ${name}_greedy32 "got $(cat "$W/$name.greedy") want $(cat "$W/$name.oracle.greedy") $(tail -1 "$W/err")"
  fi
  # decode through the KV cache (one token at a time, ragged pieces) == one batch,
  # and an engine cache of only top-k experts (forced eviction) changes nothing
  local feed
  for feed in 1 7; do
    "$BIN" logits "$C" --prompt-ids "$ids" --out "$W/$name.feed$feed.f32" --feed $feed 2>"$W/err"
    check ${name}_cache_feed${feed}_equals_batch cmp "$W/$name.feed$feed.f32" "$W/$name.f32"
  done
  "$BIN" logits "$C" --prompt-ids "$ids" --out "$W/$name.evict.f32" --feed 3 --cache-slots "$K" 2>"$W/err"
  check ${name}_forced_eviction_bit_identical cmp "$W/$name.evict.f32" "$W/$name.f32"
}

l2_fixture() {
  local name=$1 FX=$2 V
  if [ ! -d "$FX" ]; then
    fail ${name}_fixture_present "no fixture folder $FX (set MOESTREAM_FIXTURES)"; return
  fi
  V=$(vocab_of "$FX")
  check ${name}_inspect "$BIN" inspect "$FX"
  if "$BIN" logits "$FX" --prompt-ids "$FX/tokens.txt" --out "$W/$name.fx.f32" 2>"$W/err"; then
    check ${name}_logits $PY tools/oracle/compare.py "$W/$name.fx.f32" "$FX/ref_logits.f32" --vocab "$V" --tol 1e-3
  else
    fail ${name}_logits "$(tail -2 "$W/err")"
  fi
  "$BIN" run "$FX" --prompt-ids "$FX/tokens.txt" -n 16 --temp 0 --ids --ignore-eos >"$W/$name.fx.greedy" 2>"$W/err"
  if same_ids "$W/$name.fx.greedy" "$FX/ref_greedy.txt"; then
    pass ${name}_greedy16
  else
    fail ${name}_greedy16 "got $(cat "$W/$name.fx.greedy") want $(cat "$FX/ref_greedy.txt")"
  fi
  "$BIN" logits "$FX" --prompt-ids "$FX/tokens.txt" --out "$W/$name.fx.evict.f32" --feed 1 \
    --cache-slots "$(topk_of "$FX")" 2>"$W/err"
  check ${name}_forced_eviction_bit_identical cmp "$W/$name.fx.evict.f32" "$W/$name.fx.f32"
}
