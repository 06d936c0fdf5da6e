#!/usr/bin/env bash
# Checks the independent NumPy oracles of the two MLA families (tools/oracle/deepseek_v3.py,
# tools/oracle/longcat_flash.py) against the upstream fixtures deepseek_v3, longcat_flash and
# longcat_flash_fp8 (logits, greedy, dump manifest, absorbed == expanded MLA, chunked prefill),
# and the tiny-checkpoint generators (tools/tinyckpt/deepseek_v3.py, longcat_flash.py): layout
# like the fixtures, every feature active, oracle runs, float32 == float64, KV cache ==
# recompute, one file == shards, --drop refused.
# Prints "PASS name" / "FAIL name: why" per case; exits 1 when any case fails.
# Env: MOESTREAM_FIXTURES (default ../shared/fixtures), MS_TMP (default: a fresh mktemp -d).
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
FIXROOT=${MOESTREAM_FIXTURES:-../shared/fixtures}
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/oracle_mla
rm -rf "$W"; mkdir -p "$W"
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
oracle_of() { case $1 in deepseek*) echo tools/oracle/deepseek_v3.py ;; *) echo tools/oracle/longcat_flash.py ;; esac; }
gen_of() { case $1 in deepseek*) echo tools/tinyckpt/deepseek_v3.py ;; *) echo tools/tinyckpt/longcat_flash.py ;; esac; }
# the JSON line --stats writes to stderr
stats_of() { grep '^{' "$1" | tail -1; }
# shared_layout DIR [--like FIX]: the shared checker tools/tinyckpt/check_layout.py (tensor set
# from the family generator's expected_tensors). Known gap while it lacks the deepseek_v3 shard
# rules (six-digit shard total; the MTP layer alone in the last shard, after lm_head): exactly
# those two lines are tolerated for deepseek_v3; the family's own --check enforces both rules.
shared_layout() {
  local out mt
  out=$($PY tools/tinyckpt/check_layout.py "$@" 2>&1)
  mt=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_type"])' "$1/config.json")
  if [ "$mt" = deepseek_v3 ]; then
    out=$(printf '%s\n' "$out" | grep -v -x -e "lm_head not in the last shard" \
          -e "shard naming 'other' differs from the fixture's 'one'")
  fi
  [ -z "$out" ] || { printf '%s\n' "$out"; return 1; }
}

# dump_ok DUMP LOGITS CONFIG: the manifest has exactly the family's names and shapes, the dump
# logits are the --out logits, and topk_w is consistent with router_logits / topk_ids
dump_ok() {
  $PY - "$@" <<'EOF'
import json, sys, numpy as np
d, logits, cfg = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
man = json.load(open(d + "/manifest.json"))
V, H = cfg["vocab_size"], cfg["hidden_size"]
n = np.fromfile(logits, "<f4").size // V
want = {"final_norm": ("f32", [n, H]), "logits": ("f32", [n, V])}
def load(name):
    m = man[name]
    return np.fromfile(f"{d}/{name}.{m['dtype']}", "<f4" if m["dtype"] == "f32" else "<i4").reshape(m["shape"])
if cfg["model_type"] == "deepseek_v3":
    E, K = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    for l in range(cfg["num_hidden_layers"]):
        want.update({f"L{l}.attn_out": ("f32", [n, H]), f"L{l}.moe_out": ("f32", [n, H])})
        if l >= cfg["first_k_dense_replace"]:
            want.update({f"L{l}.router_logits": ("f32", [n, E]), f"L{l}.topk_ids": ("i32", [n, K]),
                         f"L{l}.topk_w": ("f32", [n, K])})
else:
    E, K = cfg["n_routed_experts"] + cfg["zero_expert_num"], cfg["moe_topk"]
    for l in range(cfg["num_layers"]):
        want.update({f"L{l}.attn0_out": ("f32", [n, H]), f"L{l}.attn1_out": ("f32", [n, H]),
                     f"L{l}.moe_out": ("f32", [n, H]), f"L{l}.router_logits": ("f32", [n, E]),
                     f"L{l}.topk_ids": ("i32", [n, K]), f"L{l}.topk_w": ("f32", [n, K])})
got = {k: (v["dtype"], v["shape"]) for k, v in man.items()}
assert got == want, f"manifest differs: {sorted(set(got) ^ set(want))} {[(k, got.get(k), want[k]) for k in want if got.get(k) != want[k]][:3]}"
assert np.array_equal(load("logits").reshape(-1), np.fromfile(logits, "<f4")), "dump logits != --out logits"
rsf = cfg["routed_scaling_factor"]
for k in [k for k in man if k.endswith(".topk_ids")]:
    l = k[:-len(".topk_ids")]
    ids, w, g = load(k), load(l + ".topk_w"), load(l + ".router_logits")
    assert ids.min() >= 0 and ids.max() < E and all(len(set(r)) == K for r in ids.tolist()), k
    if cfg["model_type"] == "deepseek_v3":   # sigmoid, renormalised, * routed_scaling_factor
        s = np.take_along_axis(1 / (1 + np.exp(-g.astype(np.float64))), ids, 1)
        ref = s / s.sum(1, keepdims=True) * rsf
    else:                                    # softmax over real + zero experts, * rsf
        p = np.exp(g - g.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
        ref = np.take_along_axis(p, ids, 1) * rsf
    assert np.allclose(w, ref, rtol=1e-5, atol=1e-6), f"{l}.topk_w inconsistent with router_logits"
EOF
}

# --- upstream fixtures -----------------------------------------------------------------------
for fx in deepseek_v3 longcat_flash longcat_flash_fp8; do
  FIX=$FIXROOT/$fx
  ORACLE=$(oracle_of $fx)
  if [ ! -d "$FIX" ]; then fail ${fx}_fixture_present "no fixture folder $FIX"; continue; fi
  V=$(vocab_of "$FIX")
  if $PY $ORACLE "$FIX" --prompt-ids "$FIX/tokens.txt" --out "$W/$fx.f32" --greedy 16 \
       --greedy-out "$W/$fx.greedy" --dump "$W/$fx.dump" --stats 2>"$W/$fx.err"; then
    pass ${fx}_oracle_runs
    check ${fx}_oracle_logits $PY tools/oracle/compare.py "$W/$fx.f32" "$FIX/ref_logits.f32" --vocab "$V"
    if same_ids "$W/$fx.greedy" "$FIX/ref_greedy.txt"; then pass ${fx}_oracle_greedy
    else fail ${fx}_oracle_greedy "got $(cat "$W/$fx.greedy") want $(cat "$FIX/ref_greedy.txt")"; fi
    check ${fx}_oracle_dump dump_ok "$W/$fx.dump" "$W/$fx.f32" "$FIX/config.json"
    # the routing coverage the fixture's meta.json reports, and the tensor accounting
    check ${fx}_oracle_coverage $PY - "$(stats_of "$W/$fx.err")" "$FIX/meta.json" <<'EOF'
import json, sys
s, meta = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))
cov = meta["coverage"]["routing_stats_prompt_forward"]
r = s["routing_prompt"]
for k in ("group_limit_changed", "bias_changed", "identity_slots", "slots"):
    if k in cov:
        assert r[k] == cov[k], (k, r[k], cov[k])
ignored = 136 if meta["family"] == "deepseek_v3" else 0
assert s["tensors_ignored"] == ignored and s["tensors_used"] + ignored == s["tensors_in_checkpoint"], s
if meta["family"] == "deepseek_v3":
    assert s["routing_all_calls"]["hf_zero_fill_would_differ"] == 0, s
EOF
  else
    fail ${fx}_oracle_runs "$(tail -3 "$W/$fx.err" | tr '\n' ' ')"
  fi
  check ${fx}_layout $PY $(gen_of $fx) --check "$FIX" --like "$FIX"
  check ${fx}_layout_shared shared_layout "$FIX" --like "$FIX"
  # absorbed MLA (latent + k_rot cache, kv_b folded into q and output) == expanded MLA
  check ${fx}_absorbed bash -c "
    $PY $ORACLE '$FIX' --prompt-ids '$FIX/tokens.txt' --out '$W/$fx.abs.f32' --absorbed --greedy 16 --greedy-out '$W/$fx.abs.greedy' 2>/dev/null &&
    $PY tools/oracle/compare.py '$W/$fx.abs.f32' '$W/$fx.f32' --vocab $V --tol 1e-5 &&
    test \"\$(cat '$W/$fx.abs.greedy')\" = \"\$(cat '$W/$fx.greedy')\""
  # in float64 the two forms are the same algebra: equal up to the final float32 rounding
  check ${fx}_absorbed_f64 bash -c "
    $PY $ORACLE '$FIX' --prompt-ids '$FIX/tokens.txt' --out '$W/$fx.64.f32' --f64 2>/dev/null &&
    $PY $ORACLE '$FIX' --prompt-ids '$FIX/tokens.txt' --out '$W/$fx.abs64.f32' --f64 --absorbed 2>/dev/null &&
    $PY tools/oracle/compare.py '$W/$fx.64.f32' '$FIX/ref_logits.f32' --vocab $V &&
    $PY -c 'import numpy as np,sys; d=np.abs(np.fromfile(sys.argv[1],\"<f4\").astype(float)-np.fromfile(sys.argv[2],\"<f4\")).max(); print(\"f64 absorbed vs expanded\", d); assert d<=2e-6' '$W/$fx.abs64.f32' '$W/$fx.64.f32'"
  # the prompt fed 7 tokens at a time through the (absorbed) cache reproduces the rows
  check ${fx}_chunked bash -c "
    $PY $ORACLE '$FIX' --prompt-ids '$FIX/tokens.txt' --out '$W/$fx.chunk.f32' --chunk 7 --absorbed 2>/dev/null &&
    $PY tools/oracle/compare.py '$W/$fx.chunk.f32' '$W/$fx.f32' --vocab $V --tol 1e-5"
done

# --- generated tiny checkpoints ----------------------------------------------------------------
# 32 prompt ids away from the special ids at the bottom of the vocab
prompt() { awk -v v="$1" 'BEGIN { for (i = 0; i < 32; i++) printf "%d ", 20 + (i * 37 + 11) % (v - 20); print "" }'; }
# name family generator-args like-fixture
CASES="ds_tiny:deepseek_v3:--preset tiny:deepseek_v3
ds_tiny2:deepseek_v3:--preset tiny2:deepseek_v3
ds_noqlora:deepseek_v3:--preset tiny --no-q-lora:
lc_tiny:longcat_flash:--preset tiny:longcat_flash
lc_tiny2:longcat_flash:--preset tiny2:longcat_flash
lc_tiny_fp8:longcat_flash:--preset tiny --fp8:longcat_flash_fp8
lc_tiny2_fp8:longcat_flash:--preset tiny2 --fp8:longcat_flash_fp8"
while IFS=: read -r name fam args like; do
  C=$W/$name
  GEN=$(gen_of $fam); ORACLE=$(oracle_of $fam)
  # shellcheck disable=SC2086
  if ! out=$($PY $GEN --out "$C" $args --seed 7 2>&1); then fail ${name}_generate "$out"; continue; fi
  pass ${name}_generate
  V=$(vocab_of "$C")
  prompt "$V" >"$W/$name.ids"
  if [ -n "$like" ] && [ -d "$FIXROOT/$like" ]; then LIKE=(--like "$FIXROOT/$like"); else LIKE=(); fi
  check ${name}_layout $PY $GEN --check "$C" "${LIKE[@]}"
  check ${name}_layout_shared shared_layout "$C" "${LIKE[@]}"
  if $PY $ORACLE "$C" --prompt-ids "$W/$name.ids" --out "$W/$name.f32" --greedy 8 \
       --greedy-out "$W/$name.greedy" --dump "$W/$name.dump" --stats 2>"$W/$name.err"; then
    pass ${name}_oracle_runs
    check ${name}_dump dump_ok "$W/$name.dump" "$W/$name.f32" "$C/config.json"
    # every structural feature changes something on this prompt
    check ${name}_features $PY - "$(stats_of "$W/$name.err")" "$C/config.json" <<'EOF'
import json, math, sys
s, cfg = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))
r = s["routing_prompt"]
assert r["bias_changed"] > 0, "correction bias never changes the selection"
assert s["router_topk_boundary_gap_min"] > 1e-5, "router top-k boundary too close for float32"
if cfg.get("quantization_config"):
    assert s["fp8_linears_dequantised"] > 0
if cfg["model_type"] == "deepseek_v3":
    assert r["group_limit_changed"] > 0, "group limit never changes the selection"
    assert s["routing_all_calls"]["hf_zero_fill_would_differ"] == 0
    assert s["mtp_tensors_ignored"] > 0, "no MTP layer"
    assert s["router_group_topk_boundary_gap_min"] > 1e-5
    assert s["rope_attention_factor"] == 1.0 and s["softmax_scale"] > (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** -0.5 * 1.1, "YaRN mscale"
else:
    assert r["identity_slots"] > 0, "zero (identity) experts never selected"
    assert min(abs(s["mla_scale_q_lora"] - 2), abs(s["mla_scale_kv_lora"] - 2 * math.sqrt(3))) > 1e-3
EOF
    # float32 and float64 forwards agree within the fixture tolerance
    check ${name}_f64 bash -c "$PY $ORACLE '$C' --prompt-ids '$W/$name.ids' --out '$W/$name.64.f32' --f64 2>/dev/null &&
      $PY tools/oracle/compare.py '$W/$name.f32' '$W/$name.64.f32' --vocab $V"
    # absorbed == expanded
    check ${name}_absorbed bash -c "$PY $ORACLE '$C' --prompt-ids '$W/$name.ids' --out '$W/$name.abs.f32' --absorbed 2>/dev/null &&
      $PY tools/oracle/compare.py '$W/$name.abs.f32' '$W/$name.f32' --vocab $V --tol 1e-5"
  else
    fail ${name}_oracle_runs "$(tail -3 "$W/$name.err" | tr '\n' ' ')"
  fi
done <<<"$CASES"

for name in ds_tiny lc_tiny_fp8; do
  C=$W/$name
  [ -f "$W/$name.greedy" ] || continue
  V=$(vocab_of "$C")
  case $name in ds_*) GEN=tools/tinyckpt/deepseek_v3.py; ORACLE=tools/oracle/deepseek_v3.py;
                      ARGS="--preset tiny"; DROP=model.layers.1.self_attn.kv_b_proj.weight_scale_inv;;
                *)    GEN=tools/tinyckpt/longcat_flash.py; ORACLE=tools/oracle/longcat_flash.py;
                      ARGS="--preset tiny --fp8"; DROP=model.layers.1.mlp.experts.5.down_proj.weight;; esac
  # greedy through the KV cache == argmax of one full recompute over prompt + greedy ids
  check ${name}_cache_vs_recompute bash -c "
    echo \$(cat '$W/$name.ids') \$(cut -d' ' -f1-7 '$W/$name.greedy') >'$W/$name.full.ids' &&
    $PY $ORACLE '$C' --prompt-ids '$W/$name.full.ids' --out '$W/$name.full.f32' 2>/dev/null &&
    $PY -c 'import numpy as np,sys; l=np.fromfile(sys.argv[1],\"<f4\").reshape(-1,int(sys.argv[3]));
g=[int(x) for x in open(sys.argv[2]).read().split()]
assert list(l[-len(g):].argmax(1))==g, (list(l[-len(g):].argmax(1)),g)' '$W/$name.full.f32' '$W/$name.greedy' $V"
  # one model.safetensors with the same seed holds the same tensors: identical logits
  # shellcheck disable=SC2086
  check ${name}_single_file bash -c "
    $PY $GEN --out '$W/${name}1' $ARGS --seed 7 --shards 1 2>/dev/null &&
    test -f '$W/${name}1/model.safetensors' && test ! -e '$W/${name}1/model.safetensors.index.json' &&
    $PY $GEN --check '$W/${name}1' &&
    $PY $ORACLE '$W/${name}1' --prompt-ids '$W/$name.ids' --out '$W/${name}1.f32' 2>/dev/null &&
    cmp '$W/${name}1.f32' '$W/$name.f32'"
  # --drop leaves the tensor out of shards and index; the oracle must refuse to run
  # shellcheck disable=SC2086
  $PY $GEN --out "$W/${name}drop" $ARGS --seed 7 --drop $DROP 2>/dev/null
  if $PY $ORACLE "$W/${name}drop" --prompt-ids "$W/$name.ids" >/dev/null 2>&1; then
    fail ${name}_drop "oracle ran without $DROP"
  elif grep -qF "\"$DROP\"" "$W/${name}drop/model.safetensors.index.json" ||
       ! $PY $GEN --check "$W/${name}drop" | grep -q "missing tensor $DROP"; then
    fail ${name}_drop "dropped tensor still listed or not reported missing"
  else
    pass ${name}_drop
  fi
done
# a wrong family's layout is reported (the checks are not vacuous)
if [ -d "$FIXROOT/longcat_flash" ]; then
  if $PY tools/tinyckpt/deepseek_v3.py --check "$FIXROOT/longcat_flash" >/dev/null 2>&1 ||
     $PY tools/tinyckpt/longcat_flash.py --check "$W/lc_tiny" --like "$FIXROOT/longcat_flash_fp8" >/dev/null 2>&1; then
    fail layout_check_negative "a mismatching layout passed --check"
  else
    pass layout_check_negative
  fi
fi

[ "$fails" -eq 0 ]
