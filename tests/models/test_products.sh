#!/usr/bin/env bash
# bench --products: the decode's products by kind (format and shape of a
# dispatch's first matrix, its products, its tokens), checked against a
# count made here from config.json and the safetensors headers alone: per
# decoded token, one q/k/v dispatch and one o_proj per layer, the top-k
# experts' first and second products per MoE layer, one lm_head, a router
# per MoE layer and up to one prediction of the next MoE layer's from each
# layer before it; each kind's
# bytes per token as the headers size its matrices (MXFP4 blocks with
# their scales, a routed expert's share of a stacked tensor). And the
# prefill's attention and head, whose tokens the kind names. For gpt_oss
# (MXFP4 experts stacked in one tensor a layer), qwen3_moe (BF16 experts,
# gate and up apart, a dense MLP layer) and deepseek_v3 (FP8; MLA's kv_b
# absorbed into products per head, run outside the shared dispatch: their
# bytes must reach the profile and the decode floor's count too).
# Env: MS_BIN, MS_TMP.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/products
rm -rf "$W"; mkdir -p "$W"
. tests/models/lib.sh

P=4 N=4 # prompt tokens, decoded tokens

# compare DIR BENCH_OUTPUT: prints "ok" lines or "bad: why" lines
compare() {
  $PY - "$1" "$2" "$P" "$N" <<'PY'
import json, struct, sys, os, glob
d, out, P, N = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = json.load(open(os.path.join(d, "config.json")))
hdr = {}
for f in glob.glob(os.path.join(d, "*.safetensors")):
    with open(f, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        for k, v in json.loads(fh.read(n)).items():
            if k != "__metadata__":
                hdr[k] = v
def nbytes(name):
    a, b = hdr[name]["data_offsets"]
    return b - a
def shape(name):
    return hdr[name]["shape"]
fmt_of = {"BF16": "bf16", "F32": "f32", "F16": "f16"}
L, k = c["num_hidden_layers"], c.get("num_experts_per_tok") or c["experts_per_token"]
want = {}   # (fmt, rows, cols, products, tokens) -> [dispatches per token (lo, hi), bytes a dispatch]
def add(key, count, nb, hi=None):
    if key in want:
        sys.exit("bad: the oracle's kinds collide at %s (choose other dims)" % (key,))
    want[key] = [(count, hi if hi is not None else count), nb]
def mat(name):  # (format, rows, cols, bytes with the scales)
    s = name.replace(".weight", ".weight_scale_inv")
    f = "fp8_block" if hdr[name]["dtype"] == "F8_E4M3" else fmt_of[hdr[name]["dtype"]]
    return f, shape(name)[0], shape(name)[1], nbytes(name) + (nbytes(s) if s in hdr else 0)
def add_mats(names, count):  # one dispatch of these matrices; returns its kind
    f, r, cc, _ = mat(names[0])
    add((f, r, cc, len(names), 1), count, sum(mat(x)[3] for x in names))
    return (f, r, cc, len(names), 1)
a = "model.layers.0.self_attn.%s_proj.weight"
head = "lm_head.weight"
add_mats([head], 1)
uk = None
if c["model_type"] == "deepseek_v3":
    # MLA: q_a and kv_a in one dispatch, q_b, o; kv_b absorbed into a
    # product per head on each side of the attention: its key rows
    # transposed (each head's rows realigned to a scale block, so its pad
    # columns are read too: its bytes are bounded), then its value rows
    H, nope, vd, kvl = (c[x] for x in ("num_attention_heads", "qk_nope_head_dim",
                                         "v_head_dim", "kv_lora_rank"))
    att = add_mats([a % "q_a", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight"], L)
    add_mats([a % "q_b"], L)
    add_mats([a % "o"], L)
    f = mat(a % "kv_b")[0]
    br, bc = c["quantization_config"]["weight_block_size"]
    vb = 0
    for h in range(H):
        r0 = h * (nope + vd) + nope
        vb += vd * kvl + ((r0 + vd - 1) // br - r0 // br + 1) * (-(-kvl // bc)) * 4
    add((f, vd, kvl, H, 1), L, vb)
    uk_low = H * nope * kvl
    uk = (f, kvl, nope, H, 1)
    # the first_k_dense_replace layers have a dense MLP, the rest experts
    # (k routed, gate and up apart) and shared experts
    first = c["first_k_dense_replace"]
    moe = L - first
    m = "model.layers.0.mlp.%s_proj.weight"
    if first:
        add_mats([m % "gate", m % "up"], first)
        add_mats([m % "down"], first)
    x = "model.layers.%d.mlp.experts.0.%%s_proj.weight" % first
    gf, gr, gc, gb = mat(x % "gate")
    add((gf, gr, gc, 2 * k, 1), moe, k * (gb + mat(x % "up")[3]))
    df, dr, dc, db = mat(x % "down")
    add((df, dr, dc, k, 1), moe, k * db)
    sh = "model.layers.%d.mlp.shared_experts.%%s_proj.weight" % first
    add_mats([sh % "gate", sh % "up"], moe)
    add_mats([sh % "down"], moe)
    r = "model.layers.%d.mlp.gate.weight" % first
elif c["model_type"] == "gpt_oss":
    att = add_mats([a % "q", a % "k", a % "v"], L)
    add_mats([a % "o"], L)
    E = c["num_local_experts"]
    r = "model.layers.0.mlp.router.weight"
    e = "model.layers.0.mlp.experts.%s_proj_%s"
    gu, dn = shape(e % ("gate_up", "blocks")), shape(e % ("down", "blocks"))
    add(("mxfp4", gu[1], gu[2] * 32, k, 1), L,
        k * (nbytes(e % ("gate_up", "blocks")) + nbytes(e % ("gate_up", "scales"))) // E)
    add(("mxfp4", dn[1], dn[2] * 32, k, 1), L,
        k * (nbytes(e % ("down", "blocks")) + nbytes(e % ("down", "scales"))) // E)
    moe = L
else:
    att = add_mats([a % "q", a % "k", a % "v"], L)
    add_mats([a % "o"], L)
    # layers listed in mlp_only_layers have a dense MLP (gate and up in one
    # dispatch, then down)
    moe_layers = [l for l in range(L) if "model.layers.%d.mlp.gate.weight" % l in hdr]
    moe, dense = len(moe_layers), [l for l in range(L) if l not in moe_layers]
    r = "model.layers.%d.mlp.gate.weight" % moe_layers[0]
    e = "model.layers.%d.mlp.experts.0.%%s_proj.weight" % moe_layers[0]
    g, dn = e % "gate", e % "down"
    fe = fmt_of[hdr[g]["dtype"]]
    add((fe, shape(g)[0], shape(g)[1], 2 * k, 1), moe, k * (nbytes(g) + nbytes(e % "up")))
    add((fe, shape(dn)[0], shape(dn)[1], k, 1), moe, k * nbytes(dn))
    if dense:
        m = "model.layers.%d.mlp.%%s_proj.weight" % dense[0]
        add_mats([m % "gate", m % "up"], len(dense))
        add_mats([m % "down"], len(dense))
# each MoE layer's routing, and at most one prediction of the next MoE
# layer from each layer before it
add((fmt_of[hdr[r]["dtype"]], shape(r)[0], shape(r)[1], 1, 1), moe, nbytes(r), moe + L - 1)

def table(title):
    rows, on = {}, False
    for line in open(out):
        if line.startswith("| %s by product" % title):
            on = True
            continue
        if on and line.startswith("| all products"):
            cells = [x.strip() for x in line.strip().strip("|").split("|")]
            return rows, float(cells[2])
        if on and not line.startswith("|---") and not line.startswith("| the "):
            cells = [x.strip() for x in line.strip().strip("|").split("|")]
            what, rest = cells[0].split(", ", 1)
            fmt, dims = what.split(" ", 1)
            rr, cc = (int(x) for x in dims.split(" x "))
            prods, toks = (int(x) for x in rest.split(", "))
            rows[(fmt, rr, cc, prods, toks)] = (float(cells[1]), float(cells[2]))
    sys.exit("bad: no '%s by product' table in the output" % title)

dec, total = table("decode")
ok = True
def bad(msg):
    global ok
    ok = False
    print("bad: " + msg)
for key, ((lo, hi), nb) in want.items():
    if key not in dec:
        bad("decode: no row %s %d x %d, %d, %d" % key)
        continue
    per, mb = dec[key]
    count = round(per * N)
    if abs(per * N - count) > 1e-6 or not (lo * N <= count <= hi * N):
        bad("decode: %s %d x %d, %d, %d: %.2f dispatches a token, expected %s" %
            (key + (per, lo if lo == hi else "%d-%d" % (lo, hi))))
    elif abs(mb - nb * count / N / 1e6) > 0.0006:
        bad("decode: %s %d x %d, %d, %d: %.3f MB/token, expected %.4f" %
            (key + (mb, nb * count / N / 1e6)))
    else:
        print("ok: %s %d x %d, %d, %d: %.2f a token, %.3f MB/token" % (key + (per, mb)))
uk_mb = 0
if uk:
    if uk not in dec:
        bad("decode: no row %s %d x %d, %d, %d (MLA's key side)" % uk)
    else:
        per, uk_mb = dec[uk]
        hi = (uk_low + H * (br - 1) * kvl + H * 2 * 4 * (-(-kvl // bc))) / 1e6
        if round(per * N) != L * N or not (uk_low / 1e6 - 0.0006 <= uk_mb <= hi * L + 0.0006):
            bad("decode: MLA's key side %.2f a token, %.3f MB/token: expected %d, %.4f-%.4f" %
                (per, uk_mb, L, uk_low * L / 1e6, hi * L))
        else:
            print("ok: %s %d x %d, %d, %d: %.2f a token, %.3f MB/token" % (uk + (per, uk_mb)))
for key in dec:
    if key not in want and key != uk:
        bad("decode: a kind the count does not know: %s %d x %d, %d, %d" % key)
expected_total = uk_mb + sum(nb * round(dec[key][0] * N) / N for key, (_, nb) in want.items() if key in dec) / 1e6
if abs(total - expected_total) > 0.002:
    bad("decode: all products %.3f MB/token, the kinds' sum %.3f" % (total, expected_total))
# the prefill: its attention takes the whole prompt (tokens P, once a layer),
# its head only the last position
pre, _ = table("prefill")
for key, per in ((att[:4] + (min(P, 5),), L / P),
                 ((fmt_of[hdr[head]["dtype"]], shape(head)[0], shape(head)[1], 1, 1), 1 / P)):
    if key not in pre or abs(pre[key][0] - per) > 0.006:
        bad("prefill: %s %d x %d, %d, %d: %s dispatches a token, expected %.2f" %
            (key + (pre[key][0] if key in pre else "none", per)))
    else:
        print("ok: prefill %s %d x %d, %d, %d: %.2f a token" % (key + (pre[key][0],)))
# with --floor, the decode's weight bytes (the floor's numerator) are the
# products' total
for line in open(out):
    if line.startswith("| decode: weight bytes read"):
        fb = float(line.split("|")[2].split()[0])
        if abs(fb - total) > 0.06:
            bad("decode: the floor counts %.1f MB/token, the products %.3f" % (fb, total))
        else:
            print("ok: the floor's %.1f MB/token are the products' %.3f" % (fb, total))
sys.exit(0 if ok else 1)
PY
}

G=$W/gpt_oss Q=$W/qwen3 D=$W/deepseek
$PY tools/tinyckpt/gpt_oss.py --out "$G" --preset tiny2 --seed 7 >/dev/null 2>&1 ||
  fail products_setup "gpt_oss tiny2 checkpoint not written"
$PY tools/tinyckpt/qwen3_moe.py --out "$Q" --preset tiny2 --seed 7 >/dev/null 2>&1 ||
  fail products_setup "qwen3_moe tiny2 checkpoint not written"
$PY tools/tinyckpt/deepseek_v3.py --out "$D" --preset tiny2 --seed 7 >/dev/null 2>&1 ||
  fail products_setup "deepseek_v3 tiny2 checkpoint not written"

for m in gpt_oss:$G qwen3_moe:$Q deepseek_v3:$D; do
  name=${m%%:*} dir=${m#*:}
  floor=
  [ "$name" = deepseek_v3 ] && floor=--floor # MLA's products per head, counted apart
  if ! "$BIN" bench "$dir" --prompt $P -n $N --products $floor >"$W/$name.out" 2>"$W/$name.err"; then
    fail "products_$name" "bench failed: $(tail -2 "$W/$name.err" | tr '\n' ' ')"
    continue
  fi
  if res=$(compare "$dir" "$W/$name.out"); then
    printf '%s\n' "$res" | sed 's/^/     /'
    pass "products_$name"
  else
    fail "products_$name" "$(printf '%s' "$res" | grep '^bad' | head -3 | tr '\n' ' ')"
  fi
  # off by default: no table without the flag
  if "$BIN" bench "$dir" --prompt $P -n 2 2>/dev/null | grep -q "by product"; then
    fail "products_off_$name" "a product table without --products"
  else
    pass "products_off_$name"
  fi
done

[ "$fails" -eq 0 ]
