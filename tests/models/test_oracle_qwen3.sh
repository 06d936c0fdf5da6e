#!/usr/bin/env bash
# Checks the independent NumPy qwen3_moe oracle (tools/oracle/qwen3_moe.py) against the upstream
# qwen3_moe and qwen3_moe_fp8 fixtures, and the tiny-checkpoint generator
# (tools/tinyckpt/qwen3_moe.py, bf16 and --fp8) against the fixtures' layout.
# Prints "PASS name" / "FAIL name: why" per case; exits 1 when any case fails.
# Env: MOESTREAM_FIXTURES (default ../shared/fixtures), MS_TMP (default: a fresh mktemp -d).
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
FIXROOT=${MOESTREAM_FIXTURES:-../shared/fixtures}
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/oracle_qwen3
rm -rf "$W"; mkdir -p "$W"
ORACLE=tools/oracle/qwen3_moe.py
GEN=tools/tinyckpt/qwen3_moe.py
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
# check NAME CMD...: PASS when CMD succeeds, else FAIL with its last output lines
check() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$(printf '%s' "$out" | tail -3 | tr '\n' ' ')"; fi
}
vocab_of() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$1/config.json"; }
same_ids() { [ "$(tr -s ' \n' ' ' <"$1" | xargs)" = "$(tr -s ' \n' ' ' <"$2" | xargs)" ]; }

# dump_ok DUMP LOGITS CONFIG: manifest names/dtypes/shapes (router entries on MoE layers only),
# dump logits == --out logits, top-k weights sorted descending and summing to 1
dump_ok() {
  $PY - "$@" <<'EOF'
import json, sys, numpy as np
d, logits, cfg = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
man = json.load(open(d + "/manifest.json"))
n = np.fromfile(logits, "<f4").size // cfg["vocab_size"]
H, E, K = cfg["hidden_size"], cfg["num_experts"], cfg["num_experts_per_tok"]
dense = set(cfg.get("mlp_only_layers") or [])
step = cfg.get("decoder_sparse_step", 1)
want = {"final_norm": ("f32", [n, H]), "logits": ("f32", [n, cfg["vocab_size"]])}
moe = []
for l in range(cfg["num_hidden_layers"]):
    want.update({f"L{l}.attn_out": ("f32", [n, H]), f"L{l}.moe_out": ("f32", [n, H])})
    if l not in dense and E > 0 and (l + 1) % step == 0:
        moe.append(l)
        want.update({f"L{l}.router_logits": ("f32", [n, E]), f"L{l}.topk_ids": ("i32", [n, K]),
                     f"L{l}.topk_w": ("f32", [n, K])})
got = {k: (v["dtype"], v["shape"]) for k, v in man.items()}
assert got == want, f"manifest differs: {sorted(set(got) ^ set(want))}"
assert np.array_equal(np.fromfile(d + "/logits.f32", "<f4"), np.fromfile(logits, "<f4")), \
    "dump logits != --out logits"
for l in moe:
    w = np.fromfile(d + f"/L{l}.topk_w.f32", "<f4").reshape(n, K)
    ids = np.fromfile(d + f"/L{l}.topk_ids.i32", "<i4").reshape(n, K)
    rl = np.fromfile(d + f"/L{l}.router_logits.f32", "<f4").reshape(n, E)
    assert np.allclose(w.sum(1), 1, atol=1e-5) and np.all(np.diff(w, axis=1) <= 0), "topk_w"
    assert np.all(np.diff(np.take_along_axis(rl, ids, 1), axis=1) <= 0), "topk_ids order"
    assert all(len(set(r)) == K for r in ids.tolist()), "duplicate expert ids"
EOF
}

# --- upstream fixtures ---------------------------------------------------------------------
for fx in qwen3_moe qwen3_moe_fp8; do
  FIX=$FIXROOT/$fx
  if [ ! -d "$FIX" ]; then fail ${fx}_fixture_present "no fixture folder $FIX"; continue; fi
  V=$(vocab_of "$FIX")
  if $PY $ORACLE "$FIX" --prompt-ids "$FIX/tokens.txt" --out "$W/$fx.f32" --greedy 16 \
       --greedy-out "$W/$fx.greedy" --dump "$W/$fx.dump" 2>"$W/$fx.err"; then
    pass ${fx}_oracle_runs
    check ${fx}_oracle_logits $PY tools/oracle/compare.py "$W/$fx.f32" "$FIX/ref_logits.f32" --vocab "$V"
    if same_ids "$W/$fx.greedy" "$FIX/ref_greedy.txt"; then pass ${fx}_oracle_greedy
    else fail ${fx}_oracle_greedy "got $(cat "$W/$fx.greedy") want $(cat "$FIX/ref_greedy.txt")"; fi
    check ${fx}_oracle_dump dump_ok "$W/$fx.dump" "$W/$fx.f32" "$FIX/config.json"
    if [ -s "$W/$fx.err" ]; then fail ${fx}_oracle_all_tensors_used "$(tail -1 "$W/$fx.err")"
    else pass ${fx}_oracle_all_tensors_used; fi
    # float64 forward and a prompt fed 5 tokens at a time through the KV cache agree too
    check ${fx}_oracle_f64 bash -c "$PY $ORACLE '$FIX' --prompt-ids '$FIX/tokens.txt' --f64 --out '$W/$fx.64.f32' &&
      $PY tools/oracle/compare.py '$W/$fx.64.f32' '$FIX/ref_logits.f32' --vocab $V --tol 1e-5"
    check ${fx}_oracle_chunked bash -c "$PY $ORACLE '$FIX' --prompt-ids '$FIX/tokens.txt' --chunk 5 --out '$W/$fx.ch.f32' &&
      $PY tools/oracle/compare.py '$W/$fx.ch.f32' '$FIX/ref_logits.f32' --vocab $V --tol 1e-5"
  else
    fail ${fx}_oracle_runs "$(tail -3 "$W/$fx.err" | tr '\n' ' ')"
  fi
  check ${fx}_layout_fixture $PY tools/tinyckpt/check_layout.py "$FIX" --like "$FIX"
done

# --- generated tiny checkpoints ------------------------------------------------------------
# 32 prompt ids below the special ids (which sit 40 below the top of the vocabulary)
prompt() { awk -v v="$1" 'BEGIN { for (i = 0; i < 32; i++) printf "%d ", (i * 37 + 11) % (v - 40); print "" }'; }
for preset in tiny tiny2; do
  for q in bf16 fp8; do
    name=${preset}_$q
    C=$W/$name
    if [ $q = fp8 ]; then FLAG=(--fp8); FIX=$FIXROOT/qwen3_moe_fp8; else FLAG=(); FIX=$FIXROOT/qwen3_moe; fi
    if ! out=$($PY $GEN --out "$C" --preset $preset "${FLAG[@]}" 2>&1); then
      fail tinyckpt_${name}_generate "$out"; continue
    fi
    pass tinyckpt_${name}_generate
    V=$(vocab_of "$C")
    prompt "$V" >"$W/$name.ids"
    if [ -d "$FIX" ]; then LIKE=(--like "$FIX"); else LIKE=(); fi
    check tinyckpt_${name}_layout $PY tools/tinyckpt/check_layout.py "$C" "${LIKE[@]}"
    # runs, every tensor used, every expert of every MoE layer selected on the 32-token prompt
    check oracle_${name}_runs bash -c "$PY $ORACLE '$C' --prompt-ids '$W/$name.ids' --out '$W/$name.f32' \
        --greedy 8 --greedy-out '$W/$name.greedy' --dump '$W/$name.dump' --stats 2>'$W/$name.stats' &&
      ! grep -q warning '$W/$name.stats' &&
      $PY -c 'import json,sys; s=json.loads(open(sys.argv[1]).read());
assert all(x == s[\"n_experts\"] for x in s[\"distinct_experts_per_layer\"]), s' '$W/$name.stats'"
    check oracle_${name}_dump dump_ok "$W/$name.dump" "$W/$name.f32" "$C/config.json"
    # float32 and float64 forwards agree within the fixture tolerance
    check oracle_${name}_f64 bash -c "$PY $ORACLE '$C' --prompt-ids '$W/$name.ids' --out '$W/$name.64.f32' --f64 &&
      $PY tools/oracle/compare.py '$W/$name.f32' '$W/$name.64.f32' --vocab $V"
  done
  # same seed: the fp8 checkpoint is the bf16 one quantised (close, not identical)
  check tinyckpt_${preset}_fp8_vs_bf16 $PY - "$W/${preset}_bf16" "$W/${preset}_fp8" "$W/${preset}_bf16.f32" "$W/${preset}_fp8.f32" <<'EOF'
import sys
sys.path.insert(0, "tools/oracle")
import numpy as np
from safetensors_np import ModelFolder
b, f = ModelFolder(sys.argv[1]), ModelFolder(sys.argv[2])
lb, lf = np.fromfile(sys.argv[3], "<f4"), np.fromfile(sys.argv[4], "<f4")
assert not np.array_equal(lb, lf), "fp8 logits identical to bf16"
assert np.corrcoef(lb, lf)[0, 1] > 0.9, np.corrcoef(lb, lf)[0, 1]
n_sub = n_zero = 0
ragged = False
for k in f.keys():
    if f.info(k)["dtype"] != "F8_E4M3":
        continue
    codes = f.raw(k) & 0x7F
    assert np.all(codes != 0x7F), f"{k}: NaN code"
    n_sub += int(np.sum((codes > 0) & (codes < 8)))
    n_zero += int(np.sum(codes == 0))
    rows, cols = f.info(k)["shape"]
    ragged |= rows % 128 != 0 or cols % 128 != 0
    w = f.get(k) * np.repeat(np.repeat(f.get(k + "_scale_inv"), 128, 0), 128, 1)[:rows, :cols]
    ref = b.get(k)
    err = np.abs(w - ref).max() / np.abs(ref).max()
    assert 0 < err <= 1 / 16 + 1e-6 or err == 0, f"{k}: fp8 vs bf16 rel err {err}"
for k in b.keys():   # unquantised tensors are bit-identical
    if k in f and f.info(k)["dtype"] == "BF16" and not k.endswith("_scale_inv"):
        assert np.array_equal(b.raw(k), f.raw(k)), k
assert n_sub > 0 and n_zero > 0 and ragged, (n_sub, n_zero, ragged)
EOF
done

C=$W/tiny_bf16
if [ -f "$W/tiny_bf16.greedy" ]; then
  V=$(vocab_of "$C")
  # greedy through the KV cache == argmax of one full recompute over prompt + greedy ids
  check oracle_tiny_cache_vs_recompute bash -c "
    echo \$(cat '$W/tiny_bf16.ids') \$(cut -d' ' -f1-7 '$W/tiny_bf16.greedy') >'$W/tiny.full.ids' &&
    $PY $ORACLE '$C' --prompt-ids '$W/tiny.full.ids' --out '$W/tiny.full.f32' &&
    $PY -c 'import numpy as np,sys; l=np.fromfile(sys.argv[1],\"<f4\").reshape(-1,int(sys.argv[3]));
g=[int(x) for x in open(sys.argv[2]).read().split()]
assert list(l[-len(g):].argmax(1))==g, (list(l[-len(g):].argmax(1)),g)' '$W/tiny.full.f32' '$W/tiny_bf16.greedy' $V"
  # one model.safetensors with the same seed holds the same tensors: identical logits
  check tinyckpt_single_file bash -c "
    $PY $GEN --out '$W/tiny1' --preset tiny --fp8 --shards 1 2>/dev/null &&
    test -f '$W/tiny1/model.safetensors' && test ! -e '$W/tiny1/model.safetensors.index.json' &&
    $PY $ORACLE '$W/tiny1' --prompt-ids '$W/tiny_fp8.ids' --out '$W/tiny1.f32' &&
    cmp '$W/tiny1.f32' '$W/tiny_fp8.f32'"
  # F32 / F16 weight_scale_inv (other Qwen3 FP8 releases) are read too
  for sd in F32 F16; do
    check oracle_tiny_fp8_scale_$sd bash -c "
      $PY $GEN --out '$W/tiny_$sd' --preset tiny --fp8 --scale-dtype $sd 2>/dev/null &&
      $PY -c 'import sys; sys.path.insert(0, \"tools/oracle\"); from safetensors_np import ModelFolder
m = ModelFolder(sys.argv[1]); assert m.info(\"model.layers.0.self_attn.q_proj.weight_scale_inv\")[\"dtype\"] == sys.argv[2]' '$W/tiny_$sd' $sd &&
      $PY $ORACLE '$W/tiny_$sd' --prompt-ids '$W/tiny_fp8.ids' --out '$W/tiny_$sd.f32' 2>&1 | { ! grep -q warning; }"
  done
  # tied embeddings: no lm_head.weight, the oracle reads embed_tokens instead
  check oracle_tiny_tied bash -c "
    $PY $GEN --out '$W/tiny_tie' --preset tiny --tie 2>/dev/null &&
    ! grep -q lm_head '$W/tiny_tie/model.safetensors.index.json' &&
    $PY $ORACLE '$W/tiny_tie' --prompt-ids '$W/tiny_bf16.ids' --out '$W/tiny_tie.f32' 2>&1 | { ! grep -q warning; }"
  # --drop leaves the tensor out of shards and index; the oracle must refuse to run
  for drop in model.layers.1.mlp.experts.3.up_proj.weight_scale_inv:--fp8 \
              model.layers.2.self_attn.k_norm.weight: model.layers.0.mlp.experts.7.down_proj.weight:; do
    t=${drop%%:*}; flag=${drop#*:}
    rm -rf "$W/drop"
    $PY $GEN --out "$W/drop" --preset tiny $flag --drop "$t" 2>/dev/null
    if $PY $ORACLE "$W/drop" --prompt-ids "$W/tiny_bf16.ids" >/dev/null 2>&1; then
      fail tinyckpt_drop_$t "oracle ran without $t"
    elif grep -qF "\"$t\"" "$W/drop/model.safetensors.index.json" ||
         ! $PY tools/tinyckpt/check_layout.py "$W/drop" | grep -q "missing tensor $t"; then
      fail tinyckpt_drop_$t "dropped tensor still listed or not reported missing"
    else
      pass tinyckpt_drop_$t
    fi
  done
fi

[ "$fails" -eq 0 ]
