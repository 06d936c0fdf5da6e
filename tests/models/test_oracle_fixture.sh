#!/usr/bin/env bash
# Checks the independent NumPy oracle (tools/oracle) against the upstream gpt_oss fixture, and
# the tiny-checkpoint generator (tools/tinyckpt) against the fixture's layout.
# Prints "PASS name" / "FAIL name: why" per case; exits 1 when any case fails.
# Env: MOESTREAM_FIXTURES (default ../shared/fixtures), MS_TMP (default: a fresh mktemp -d).
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
FIX=${MOESTREAM_FIXTURES:-../shared/fixtures}/gpt_oss
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/oracle_fixture
rm -rf "$W"; mkdir -p "$W"
ORACLE=tools/oracle/gpt_oss.py
GEN=tools/tinyckpt/gpt_oss.py
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
# check NAME CMD...: PASS when CMD succeeds, else FAIL with its last output line
check() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$(printf '%s' "$out" | tail -3 | tr '\n' ' ')"; fi
}
vocab_of() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$1/config.json"; }

# --- upstream fixture ----------------------------------------------------------------------
if [ ! -d "$FIX" ]; then
  fail oracle_fixture_present "no fixture folder $FIX"
else
  V=$(vocab_of "$FIX")
  if $PY $ORACLE "$FIX" --prompt-ids "$FIX/tokens.txt" --out "$W/fx.f32" --greedy 16 \
       --greedy-out "$W/fx_greedy.txt" --dump "$W/fx_dump" 2>"$W/fx.err"; then
    pass oracle_fixture_runs
    check oracle_fixture_logits $PY tools/oracle/compare.py "$W/fx.f32" "$FIX/ref_logits.f32" --vocab "$V"
    if [ "$(tr -s ' \n' ' ' <"$W/fx_greedy.txt" | xargs)" = "$(tr -s ' \n' ' ' <"$FIX/ref_greedy.txt" | xargs)" ]; then
      pass oracle_fixture_greedy
    else
      fail oracle_fixture_greedy "got $(cat "$W/fx_greedy.txt") want $(cat "$FIX/ref_greedy.txt")"
    fi
    # the dump's logits are the --out logits, and every named intermediate is there
    check oracle_fixture_dump $PY - "$W/fx_dump" "$W/fx.f32" "$FIX/config.json" <<'EOF'
import json, sys, numpy as np
d, logits, cfg = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
man = json.load(open(d + "/manifest.json"))
n = np.fromfile(logits, "<f4").size // cfg["vocab_size"]
H, E, K = cfg["hidden_size"], cfg["num_local_experts"], cfg["num_experts_per_tok"]
want = {"final_norm": ("f32", [n, H]), "logits": ("f32", [n, cfg["vocab_size"]])}
for l in range(cfg["num_hidden_layers"]):
    want.update({f"L{l}.attn_out": ("f32", [n, H]), f"L{l}.moe_out": ("f32", [n, H]),
                 f"L{l}.router_logits": ("f32", [n, E]), f"L{l}.topk_ids": ("i32", [n, K]),
                 f"L{l}.topk_w": ("f32", [n, K])})
got = {k: (v["dtype"], v["shape"]) for k, v in man.items()}
assert got == want, f"manifest differs: {set(got) ^ set(want)}"
a = np.fromfile(d + "/logits.f32", "<f4")
assert np.array_equal(a, np.fromfile(logits, "<f4")), "dump logits != --out logits"
w = np.fromfile(d + "/L0.topk_w.f32", "<f4").reshape(n, K)
assert np.allclose(w.sum(1), 1, atol=1e-5) and np.all(np.diff(w, axis=1) <= 0), "topk_w"
EOF
  else
    fail oracle_fixture_runs "$(tail -3 "$W/fx.err" | tr '\n' ' ')"
  fi
  check ckpt_layout_fixture $PY tools/tinyckpt/check_layout.py "$FIX" --like "$FIX"
fi

# --- generated tiny checkpoints ------------------------------------------------------------
# 32 prompt ids, enough to cross every preset's sliding window
prompt() { awk -v v="$1" 'BEGIN { for (i = 0; i < 32; i++) printf "%d ", (i * 37 + 11) % (v - 20); print "" }'; }
for preset in tiny tiny2; do
  C=$W/$preset
  if ! out=$($PY $GEN --out "$C" --preset $preset --seed 7 2>&1); then
    fail tinyckpt_${preset}_generate "$out"; continue
  fi
  pass tinyckpt_${preset}_generate
  V=$(vocab_of "$C")
  prompt "$V" >"$W/$preset.ids"
  if [ -d "$FIX" ]; then LIKE=(--like "$FIX"); else LIKE=(); fi
  check tinyckpt_${preset}_layout $PY tools/tinyckpt/check_layout.py "$C" "${LIKE[@]}"
  check oracle_${preset}_runs $PY $ORACLE "$C" --prompt-ids "$W/$preset.ids" --out "$W/$preset.f32" \
    --greedy 8 --greedy-out "$W/$preset.greedy"
  # float32 and float64 forwards agree within the fixture tolerance
  check oracle_${preset}_f64 bash -c "$PY $ORACLE '$C' --prompt-ids '$W/$preset.ids' --out '$W/$preset.64.f32' --f64 &&
    $PY tools/oracle/compare.py '$W/$preset.f32' '$W/$preset.64.f32' --vocab $V"
done

C=$W/tiny
if [ -f "$W/tiny.greedy" ]; then
  # greedy through the KV cache == argmax of one full recompute over prompt + greedy ids
  check oracle_tiny_cache_vs_recompute bash -c "
    echo \$(cat '$W/tiny.ids') \$(cut -d' ' -f1-7 '$W/tiny.greedy') >'$W/tiny.full.ids' &&
    $PY $ORACLE '$C' --prompt-ids '$W/tiny.full.ids' --out '$W/tiny.full.f32' &&
    $PY -c 'import numpy as np,sys; l=np.fromfile(sys.argv[1],\"<f4\").reshape(-1,int(sys.argv[3]));
g=[int(x) for x in open(sys.argv[2]).read().split()]
assert list(l[-len(g):].argmax(1))==g, (list(l[-len(g):].argmax(1)),g)' '$W/tiny.full.f32' '$W/tiny.greedy' $(vocab_of "$C")"
  # one model.safetensors with the same seed holds the same tensors: identical logits
  check tinyckpt_single_file bash -c "
    $PY $GEN --out '$W/tiny1' --preset tiny --seed 7 --shards 1 2>/dev/null &&
    test -f '$W/tiny1/model.safetensors' && test ! -e '$W/tiny1/model.safetensors.index.json' &&
    $PY $ORACLE '$W/tiny1' --prompt-ids '$W/tiny.ids' --out '$W/tiny1.f32' &&
    cmp '$W/tiny1.f32' '$W/tiny.f32'"
  # --drop leaves the tensor out of shards and index; the oracle must refuse to run
  $PY $GEN --out "$W/tinydrop" --preset tiny --seed 7 --drop model.layers.1.mlp.experts.down_proj_scales 2>/dev/null
  if $PY $ORACLE "$W/tinydrop" --prompt-ids "$W/tiny.ids" >/dev/null 2>&1; then
    fail tinyckpt_drop "oracle ran without model.layers.1.mlp.experts.down_proj_scales"
  elif grep -qF "\"model.layers.1.mlp.experts.down_proj_scales\"" "$W/tinydrop/model.safetensors.index.json" ||
       ! $PY tools/tinyckpt/check_layout.py "$W/tinydrop" | grep -q "missing tensor model.layers.1.mlp.experts.down_proj_scales"; then
    fail tinyckpt_drop "dropped tensor still listed or not reported missing"
  else
    pass tinyckpt_drop
  fi
fi

[ "$fails" -eq 0 ]
