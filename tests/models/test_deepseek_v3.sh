#!/usr/bin/env bash
# deepseek_v3 end to end: L0 (inspect, MTP layer knowingly ignored, a missing FP8
# scale flagged), L1 (engine vs the NumPy oracle on generated tiny block-FP8
# checkpoints: per-layer states, group-limited routing, logits, 32 greedy ids,
# absorbed decode through the compressed cache == one batch, == the oracle's
# expanded-form MLA within 1e-5, forced-eviction cache), L2 (the upstream fixture).
# Prints "PASS name" / "FAIL name: why"; exits 1 when any case fails.
# Env: MS_BIN (default ./moestream), MOESTREAM_FIXTURES, MS_TMP.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
FIXROOT=${MOESTREAM_FIXTURES:-../shared/fixtures}
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/deepseek_v3
rm -rf "$W"; mkdir -p "$W"
ORACLE=tools/oracle/deepseek_v3.py
GEN=tools/tinyckpt/deepseek_v3.py
. tests/models/lib.sh

# kv_row_ok DIR: inspect reports the compressed cache, (kv_lora + rope) floats per layer
kv_row_ok() {
  local want
  want=$($PY -c 'import json,sys; c=json.load(open(sys.argv[1]));
print(4 * c["num_hidden_layers"] * (c["kv_lora_rank"] + c["qk_rope_head_dim"]))' "$1/config.json")
  "$BIN" inspect "$1" | grep -q "^KV cache: $want bytes/token"
}

# absorbed_vs_expanded NAME DIR IDS: the engine's token-by-token logits (absorbed MLA over
# the latent cache) against the oracle's one-pass expanded-form MLA, 1e-5 of max|ref|
absorbed_vs_expanded() {
  local name=$1 C=$2 ids=$3
  "$BIN" logits "$C" --prompt-ids "$ids" --out "$W/$name.feed1.f32" --feed 1 2>"$W/err" &&
    $PY tools/oracle/compare.py "$W/$name.feed1.f32" "$W/$name.oracle.f32" --vocab "$(vocab_of "$C")" --tol 1e-5
}

for cfg in "tiny 7" "tiny2 11" "tiny 5 --no-q-lora" "wide 13"; do
  set -- $cfg; preset=$1; seed=$2; shift 2
  name=$preset$( [ $# -gt 0 ] && echo _noqlora )
  C=$W/$name
  if ! $PY $GEN --out "$C" --preset "$preset" --seed "$seed" "$@" >/dev/null 2>"$W/err"; then
    fail ${name}_generate "$(tail -1 "$W/err")"; continue
  fi
  l0_inspect l0_$name "$C"
  check l0_${name}_kv_bytes_compressed kv_row_ok "$C"
  prompt_ids "$(vocab_of "$C")" "$seed" >"$W/$name.ids"
  l1_oracle l1_$name "$C" $ORACLE "$W/$name.ids"
  check l1_${name}_absorbed_decode_vs_expanded absorbed_vs_expanded l1_$name "$C" "$W/$name.ids"
done

# the MTP layer is stored and knowingly ignored (never "unexpected")
C=$W/tiny
if "$BIN" inspect "$C" >"$W/inspect.out" 2>&1 && grep -q "MTP layers ignored: 1" "$W/inspect.out" &&
   grep -q "none unexpected" "$W/inspect.out" && grep -q '"model.layers.3.mlp.gate.weight"' "$C/model.safetensors.index.json"; then
  pass l0_mtp_layer_ignored
else
  fail l0_mtp_layer_ignored "$(tail -3 "$W/inspect.out" | tr '\n' ' ')"
fi
$PY $GEN --out "$W/drop" --preset tiny --seed 7 \
  --drop model.layers.1.self_attn.kv_b_proj.weight_scale_inv >/dev/null 2>&1
l0_missing l0_flags_missing_fp8_scale "$W/drop" model.layers.1.self_attn.kv_b_proj.weight_scale_inv

l2_fixture l2 "$FIXROOT/deepseek_v3"

[ "$fails" -eq 0 ]
