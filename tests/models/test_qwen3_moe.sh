#!/usr/bin/env bash
# qwen3_moe end to end, bf16 and FP8: L0 (inspect), L1 (engine vs the NumPy
# oracle on generated tiny checkpoints in both released layouts, incl. a dense
# mlp_only layer), L2 (the two upstream fixtures).
# Prints "PASS name" / "FAIL name: why"; exits 1 when any case fails.
# Env: MS_BIN (default ./moestream), MOESTREAM_FIXTURES, MS_TMP.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
FIXROOT=${MOESTREAM_FIXTURES:-../shared/fixtures}
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/qwen3_moe
rm -rf "$W"; mkdir -p "$W"
ORACLE=tools/oracle/qwen3_moe.py
GEN=tools/tinyckpt/qwen3_moe.py
. tests/models/lib.sh

for cfg in "tiny 8 bf16" "tiny2 30 bf16" "tiny 8 fp8" "tiny2 30 fp8"; do
  set -- $cfg; preset=$1; seed=$2; fmt=$3
  C=$W/$preset.$fmt
  flags=(); [ "$fmt" = fp8 ] && flags=(--fp8)
  if ! $PY $GEN --out "$C" --preset "$preset" --seed "$seed" "${flags[@]}" >/dev/null 2>"$W/err"; then
    fail ${preset}_${fmt}_generate "$(tail -1 "$W/err")"; continue
  fi
  l0_inspect l0_${preset}_${fmt} "$C"
  prompt_ids "$(vocab_of "$C")" "$seed" >"$W/$preset.$fmt.ids"
  l1_oracle l1_${preset}_${fmt} "$C" $ORACLE "$W/$preset.$fmt.ids"
done

$PY $GEN --out "$W/drop" --preset tiny --seed 8 --fp8 \
  --drop model.layers.2.mlp.experts.5.up_proj.weight_scale_inv >/dev/null 2>&1
l0_missing l0_flags_missing_fp8_scale "$W/drop" model.layers.2.mlp.experts.5.up_proj.weight_scale_inv

l2_fixture l2_bf16 "$FIXROOT/qwen3_moe"
l2_fixture l2_fp8 "$FIXROOT/qwen3_moe_fp8"

[ "$fails" -eq 0 ]
