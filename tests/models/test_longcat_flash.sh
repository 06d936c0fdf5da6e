#!/usr/bin/env bash
# longcat_flash end to end, bf16 and FP8: L0 (inspect, compressed KV bytes, a missing
# expert tensor flagged), L1 (engine vs the NumPy oracle on generated tiny checkpoints:
# both attention sub-blocks and the ScMoE layer output, routing with identity experts
# actually selected, logits, 32 greedy ids, absorbed decode through the latent cache ==
# one batch, == the oracle's expanded-form MLA within 1e-5, forced-eviction cache),
# L2 (the two upstream fixtures).
# Prints "PASS name" / "FAIL name: why"; exits 1 when any case fails.
# Env: MS_BIN (default ./moestream), MOESTREAM_FIXTURES, MS_TMP.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
FIXROOT=${MOESTREAM_FIXTURES:-../shared/fixtures}
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/longcat_flash
rm -rf "$W"; mkdir -p "$W"
ORACLE=tools/oracle/longcat_flash.py
GEN=tools/tinyckpt/longcat_flash.py
. tests/models/lib.sh
# LongCat names its top-k moe_topk (lib.sh's steps size the forced-eviction cache with it)
topk_of() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["moe_topk"])' "$1/config.json"; }

# kv_row_ok DIR: two sub-blocks of (kv_lora + rope) floats per layer
kv_row_ok() {
  local want
  want=$($PY -c 'import json,sys; c=json.load(open(sys.argv[1]));
print(4 * c["num_layers"] * 2 * (c["kv_lora_rank"] + c["qk_rope_head_dim"]))' "$1/config.json")
  "$BIN" inspect "$1" | grep -q "^KV cache: $want bytes/token"
}

# identity_selected DUMP CONFIG: the zero-computation experts take routing slots
identity_selected() {
  $PY - "$@" <<'EOF'
import json, sys, numpy as np
d, cfg = sys.argv[1], json.load(open(sys.argv[2]))
man = json.load(open(d + "/manifest.json"))
ids = np.concatenate([np.fromfile(f"{d}/{k}.i32", "<i4") for k in man if k.endswith(".topk_ids")])
z = int(np.sum(ids >= cfg["n_routed_experts"]))
print(f"identity slots {z} of {ids.size}")
assert 0 < z < ids.size
EOF
}

# lc_l1_oracle NAME DIR IDS: l1_oracle with LongCat's dump names (two attention
# sub-blocks per layer) and the absorbed-vs-expanded check
lc_l1_oracle() {
  local name=$1 C=$2 ids=$3 V K feed
  V=$(vocab_of "$C"); K=$(topk_of "$C")
  if ! $PY $ORACLE "$C" --prompt-ids "$ids" --out "$W/$name.oracle.f32" --greedy 32 \
        --greedy-out "$W/$name.oracle.greedy" --dump "$W/$name.oracle.dump" >/dev/null 2>"$W/err"; then
    fail ${name}_oracle "$(tail -2 "$W/err")"; return
  fi
  if ! "$BIN" logits "$C" --prompt-ids "$ids" --out "$W/$name.f32" --dump "$W/$name.dump" 2>"$W/err"; then
    fail ${name}_logits "$(tail -2 "$W/err")"; return
  fi
  check ${name}_states_and_logits $PY tools/oracle/compare_dump.py "$W/$name.dump" "$W/$name.oracle.dump" \
    --float 'L*.attn0_out' 'L*.attn1_out' 'L*.moe_out' final_norm logits --ints 'L*.topk_ids' --tol 1e-4
  check ${name}_identity_experts_selected identity_selected "$W/$name.dump" "$C/config.json"
  check ${name}_argmax $PY tools/oracle/compare.py "$W/$name.f32" "$W/$name.oracle.f32" --vocab "$V" --tol 1e-4
  "$BIN" run "$C" --prompt-ids "$ids" -n 32 --temp 0 --ids --ignore-eos >"$W/$name.greedy" 2>"$W/err"
  if same_ids "$W/$name.greedy" "$W/$name.oracle.greedy"; then
    pass ${name}_greedy32
  else
    fail ${name}_greedy32 "got $(cat "$W/$name.greedy") want $(cat "$W/$name.oracle.greedy") $(tail -1 "$W/err")"
  fi
  for feed in 1 7; do
    "$BIN" logits "$C" --prompt-ids "$ids" --out "$W/$name.feed$feed.f32" --feed $feed 2>"$W/err"
    check ${name}_cache_feed${feed}_equals_batch cmp "$W/$name.feed$feed.f32" "$W/$name.f32"
  done
  # token-by-token absorbed MLA over the latent cache vs the oracle's expanded form
  check ${name}_absorbed_decode_vs_expanded $PY tools/oracle/compare.py "$W/$name.feed1.f32" \
    "$W/$name.oracle.f32" --vocab "$V" --tol 1e-5
  "$BIN" logits "$C" --prompt-ids "$ids" --out "$W/$name.evict.f32" --feed 3 --cache-slots "$K" 2>"$W/err"
  check ${name}_forced_eviction_bit_identical cmp "$W/$name.evict.f32" "$W/$name.f32"
}

for cfg in "tiny 7 bf16" "tiny2 13 bf16" "tiny 9 fp8" "tiny2 21 fp8"; do
  set -- $cfg; preset=$1; seed=$2; fmt=$3
  name=${preset}_$fmt
  C=$W/$name
  flags=(); [ "$fmt" = fp8 ] && flags=(--fp8)
  if ! $PY $GEN --out "$C" --preset "$preset" --seed "$seed" "${flags[@]}" >/dev/null 2>"$W/err"; then
    fail ${name}_generate "$(tail -1 "$W/err")"; continue
  fi
  l0_inspect l0_$name "$C"
  check l0_${name}_kv_bytes_compressed kv_row_ok "$C"
  prompt_ids "$(vocab_of "$C")" "$seed" >"$W/$name.ids"
  lc_l1_oracle l1_$name "$C" "$W/$name.ids"
done

$PY $GEN --out "$W/drop" --preset tiny --seed 9 \
  --drop model.layers.1.mlp.experts.5.down_proj.weight >/dev/null 2>&1
l0_missing l0_flags_missing_expert "$W/drop" model.layers.1.mlp.experts.5.down_proj.weight
$PY $GEN --out "$W/drop8" --preset tiny --seed 9 --fp8 \
  --drop model.layers.0.self_attn.1.kv_b_proj.weight_scale_inv >/dev/null 2>&1
l0_missing l0_flags_missing_fp8_scale "$W/drop8" model.layers.0.self_attn.1.kv_b_proj.weight_scale_inv

l2_fixture l2_bf16 "$FIXROOT/longcat_flash"
l2_fixture l2_fp8 "$FIXROOT/longcat_flash_fp8"

[ "$fails" -eq 0 ]
