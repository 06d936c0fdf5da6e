#!/usr/bin/env bash
# The attention counters behind bench's floors (--stats "attention over the
# KV cache"): the cache bytes read and the FLOPs, against a count made here
# from config.json alone, for every row the engine was fed (prompt positions
# and decoded tokens): GQA with sliding and full layers (gpt_oss, window 8
# over 23 positions), GQA without windows (qwen3_moe), MLA's shared latent
# (deepseek_v3: one 'KV head' whose value is the front of its key), in f32
# and bf16.
# Env: MS_BIN, MS_TMP.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/attn_counts
rm -rf "$W"; mkdir -p "$W"
. tests/models/lib.sh

P=20 N=4 # rows fed: positions 0 .. P + N - 2 (the last token is not fed)

# expected "BYTES FLOPS" for DIR, KV element size ESIZE, ROWS rows fed
expected() {
  $PY - "$1/config.json" "$2" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); esize = int(sys.argv[2]); rows = int(sys.argv[3])
L = c["num_hidden_layers"]; H = c["num_attention_heads"]
if c["model_type"] == "deepseek_v3":
    kl, rope = c["kv_lora_rank"], c["qk_rope_head_dim"]
    per_bytes, per_flops = (kl + rope) * esize, H * 2 * (kl + rope + kl)
    windows = [0] * L
else:
    hd = c.get("head_dim") or c["hidden_size"] // H
    per_bytes = c["num_key_value_heads"] * 2 * hd * esize
    per_flops = H * 2 * 2 * hd
    types = c.get("layer_types") or ["full_attention"] * L
    windows = [c["sliding_window"] if t == "sliding_attention" else 0 for t in types]
b = f = 0
for w in windows:
    for pos in range(rows):
        n = min(pos + 1, w) if w else pos + 1
        b += n * per_bytes; f += n * per_flops
print(b, f)
PY
}

counts() { # DIR KV -> "BYTES FLOPS" from --stats
  prompt_ids "$(vocab_of "$1")" 5 | tr ' ' '\n' | head -n $P | xargs >"$W/ids"
  "$BIN" run "$1" --prompt-ids "$W/ids" -n $N --ignore-eos --kv "$2" --stats 2>&1 >/dev/null |
    sed -n 's/^attention over the KV cache: .* s, \([0-9]*\) bytes read, \([0-9]*\) FLOP$/\1 \2/p'
}

G=$W/gpt_oss Q=$W/qwen3 D=$W/deepseek
$PY tools/tinyckpt/gpt_oss.py --out "$G" --preset tiny --layers 2 --sliding-window 8 --seed 5 >/dev/null 2>&1 ||
  fail attn_counts_setup "gpt_oss tiny checkpoint not written"
$PY tools/tinyckpt/qwen3_moe.py --out "$Q" --preset tiny --seed 5 >/dev/null 2>&1 ||
  fail attn_counts_setup "qwen3_moe tiny checkpoint not written"
$PY tools/tinyckpt/deepseek_v3.py --out "$D" --preset tiny --seed 5 >/dev/null 2>&1 ||
  fail attn_counts_setup "deepseek_v3 tiny checkpoint not written"

for m in gpt_oss:$G qwen3_moe:$Q deepseek_v3:$D; do
  name=${m%%:*} dir=${m#*:}
  for kv in f32:4 bf16:2; do
    fmt=${kv%%:*} esize=${kv#*:}
    got=$(counts "$dir" "$fmt") want=$(expected "$dir" "$esize" $((P + N - 1)))
    if [ -n "$got" ] && [ "$got" = "$want" ]; then
      pass "attn_counts_${name}_$fmt"
      echo "  $name $fmt: $got (bytes, FLOP)"
    else
      fail "attn_counts_${name}_$fmt" "--stats said '${got:-nothing}', config.json gives '$want'"
    fi
  done
done
[ "$fails" -eq 0 ]
