"""Shared NumPy pieces of the two MLA-family oracles (deepseek_v3.py, longcat_flash.py).

Owns: weight access with block-FP8 dequantisation, RMSNorm, SwiGLU, YaRN / default RoPE
tables, the interleaved-pair rotary embedding, Multi-head Latent Attention in its expanded
form (transformers) and its absorbed form (DeepSeek inference/model.py, attn_impl "absorb"),
the dump writer and the common CLI driver (prompt pass, chunked prefill, greedy with KV
cache, stats). Written from the upstream code named below, never from this project's C.

Upstream lines followed (see each function's docstring for the exact formula):
  - huggingface/transformers src/transformers/models/deepseek_v3/modeling_deepseek_v3.py
    DeepseekV3RMSNorm.forward, DeepseekV3MLP.forward, DeepseekV3Attention.__init__/forward,
    apply_rotary_pos_emb_interleave, rotate_half, eager_attention_forward.
  - huggingface/transformers src/transformers/models/longcat_flash/modeling_longcat_flash.py
    LongcatFlashMLA.__init__/forward (mla_scale_q_lora, mla_scale_kv_lora), yarn_apply_mscale,
    apply_rotary_pos_emb_interleave (even/odd form, bit-identical to the view/transpose form).
  - huggingface/transformers src/transformers/modeling_rope_utils.py
    _compute_default_rope_parameters, _compute_yarn_parameters (get_mscale, attention_factor
    = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are set,
    find_correction_range with floor/ceil unless truncate is false, linear_ramp_factor).
  - deepseek-ai/DeepSeek-V3 inference/model.py: MLA.forward (attn_impl == "absorb": wkv_b
    viewed [heads, nope + v, kv_lora]; q_nope folded through wkv_b[:, :nope]; cache
    kv_norm(kv) and the roped k_pe only; output folded through wkv_b[:, -v:]),
    precompute_freqs_cis / apply_rotary_emb (complex pairs (x[2i], x[2i+1])), weight_dequant
    (fp8 * scale per 128x128 block, kernel.py).
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dump import top2_margin, write_dump  # noqa: E402
from safetensors_np import ModelFolder  # noqa: E402


# --- weights -------------------------------------------------------------------------------
class Weights:
    """Tensor access over a ModelFolder: plain tensors widened exactly, block-FP8 linears
    dequantised as W[i][j] = e4m3(W[i][j]) * scale[i // bo][j // bi] (DeepSeek
    inference/kernel.py weight_dequant; transformers FineGrainedFP8; edge blocks partial;
    scale F32, BF16 or F16 widened first). Records which tensors were read."""

    def __init__(self, model_dir, dtype, block=(128, 128)):
        self.st = ModelFolder(model_dir)
        self.dt = dtype
        self.block = tuple(block)
        self.used = set()
        self.ignored = set()
        self.n_fp8 = 0

    def __contains__(self, name):
        return name in self.st

    def shape(self, name):
        return list(self.st.info(name)["shape"])

    def w(self, name, shape=None):
        """A plain (unquantised) tensor."""
        info = self.st.info(name)
        if info["dtype"].startswith("F8_"):
            raise ValueError(f"{name}: {info['dtype']} where an unquantised tensor is expected")
        if name + "_scale_inv" in self.st:
            raise ValueError(f"{name}: has a _scale_inv but is not a quantised linear")
        if shape is not None and list(info["shape"]) != list(shape):
            raise ValueError(f"{name}: shape {info['shape']}, expected {list(shape)}")
        self.used.add(name)
        return self.st.get(name).astype(self.dt)

    def check_linear(self, name, rows, cols):
        """Validates a linear's weight (+ scale) without decoding it. Returns its dtype."""
        info = self.st.info(name)
        if list(info["shape"]) != [rows, cols]:
            raise ValueError(f"{name}: shape {info['shape']}, expected {[rows, cols]}")
        sname = name + "_scale_inv"
        if sname not in self.st:
            if info["dtype"].startswith("F8_"):
                raise ValueError(f"{name}: {info['dtype']} without {sname}")
            if info["dtype"] not in ("BF16", "F16", "F32"):
                raise ValueError(f"{name}: dtype {info['dtype']}")
            self.used.add(name)
            return info["dtype"]
        if info["dtype"] != "F8_E4M3":
            raise ValueError(f"{name}: {info['dtype']} with a weight_scale_inv (want F8_E4M3)")
        bo, bi = self.block
        want = [-(-rows // bo), -(-cols // bi)]
        sinfo = self.st.info(sname)
        if list(sinfo["shape"]) != want:
            raise ValueError(f"{sname}: shape {sinfo['shape']}, expected {want} (block {bo}x{bi})")
        if sinfo["dtype"] not in ("F32", "BF16", "F16"):
            raise ValueError(f"{sname}: scale dtype {sinfo['dtype']}")
        self.used.update((name, sname))
        return "F8_E4M3"

    def linear(self, name, rows, cols):
        """[out, in] weight of a linear: bf16/f16/f32 as stored, or F8_E4M3 x block scale."""
        if self.check_linear(name, rows, cols) != "F8_E4M3":
            return self.st.get(name).astype(self.dt)
        self.n_fp8 += 1
        codes = self.st.get(name)                      # exact float32 via the e4m3fn table
        if np.isnan(codes).any():
            raise ValueError(f"{name}: NaN fp8 code")
        bo, bi = self.block
        scale = self.st.get(name + "_scale_inv").astype(np.float32).astype(self.dt)
        full = np.repeat(np.repeat(scale, bo, axis=0), bi, axis=1)[:rows, :cols]
        return codes.astype(self.dt) * full


def quant_block(cfg):
    """quantization_config -> (bo, bi); refuses what the oracles do not implement."""
    q = cfg.get("quantization_config") or {}
    if q and q.get("quant_method") not in ("fp8", None):
        raise NotImplementedError(f"quant_method {q.get('quant_method')}")
    if q.get("fmt", "e4m3") != "e4m3":
        raise NotImplementedError(f"fp8 fmt {q.get('fmt')}")
    return tuple(q.get("weight_block_size") or (128, 128))


# --- elementwise blocks --------------------------------------------------------------------
def rmsnorm(x, wt, eps):
    """DeepseekV3RMSNorm / LongcatFlashRMSNorm: weight * (x * rsqrt(mean(x^2) + eps)), in the
    compute dtype (float32 like the references)."""
    var = np.mean(x * x, axis=-1, keepdims=True)
    return wt * (x / np.sqrt(var + x.dtype.type(eps)))


def silu(x):
    return x / (1 + np.exp(-x))


def swiglu(x, wg, wu, wd):
    """DeepseekV3MLP / LongcatFlashMLP: down(silu(gate(x)) * up(x)), no biases."""
    return (silu(x @ wg.T) * (x @ wu.T)) @ wd.T


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# --- RoPE ----------------------------------------------------------------------------------
def yarn_get_mscale(scale=1.0, mscale=1.0):
    """modeling_deepseek_v3.py / modeling_longcat_flash.py yarn_get_mscale."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def rope_type(rope_scaling):
    rs = rope_scaling or {}
    return rs.get("rope_type", rs.get("type", "default")) if rope_scaling else "default"


def rope_tables(dim, theta, rope_scaling, max_pos):
    """(inv_freq float32 [dim/2], attention_factor) as transformers' ROPE_INIT_FUNCTIONS:
    default: inv_freq = 1 / theta^(2i/dim); yarn (_compute_yarn_parameters):
      pos_freqs = theta^(2i/dim); extrapolation 1/pos_freqs, interpolation 1/(factor*pos_freqs);
      low/high = dim*ln(orig/(beta*2*pi)) / (2 ln theta) for beta_fast / beta_slow, floored /
      ceiled unless truncate is false, clamped to [0, dim-1]; ramp = clip((i - low)/(high -
      low), 0, 1) (high += 0.001 when equal); extrapolation_factor = 1 - ramp;
      inv_freq = interp * (1 - extrapolation_factor) + extrap * extrapolation_factor;
      attention_factor = rope_scaling.attention_factor, else get_mscale(factor, mscale) /
      get_mscale(factor, mscale_all_dim) when both are set (non-zero), else get_mscale(factor).
    The same YaRN inv_freq is DeepSeek inference/model.py precompute_freqs_cis
    (freqs / factor * (1 - smooth) + freqs * smooth, smooth = 1 - ramp), which however applies
    it only when its max_seq_len > original_seq_len and never scales cos/sin.
    Computed in float32 as torch does."""
    base = float(theta)
    pos_freqs = np.power(np.float32(base), np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))
    inv = (np.float32(1.0) / pos_freqs).astype(np.float32)
    rt = rope_type(rope_scaling)
    if rt == "default":
        return inv, 1.0
    if rt != "yarn":
        raise NotImplementedError(f"rope_scaling type {rt}")
    rs = rope_scaling
    factor = float(rs["factor"])
    orig = rs.get("original_max_position_embeddings") or max_pos
    if rs.get("original_max_position_embeddings") and max_pos and \
            abs(max_pos / orig - factor) > 1e-9:
        # transformers 4.4x-4.5x replaced factor by max_position_embeddings / original here;
        # newer versions and DeepSeek's own code use rope_scaling.factor. Say so.
        print(f"warning: max_position_embeddings / original_max_position_embeddings = "
              f"{max_pos / orig} != rope_scaling.factor {factor}; using factor",
              file=sys.stderr)
    attn = rs.get("attention_factor")
    if attn is None:
        ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
        attn = (yarn_get_mscale(factor, ms) / yarn_get_mscale(factor, msa)) if (ms and msa) \
            else yarn_get_mscale(factor)
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def corr_dim(rot):
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - np.float32(low))
                   / np.float32(high - low), 0, 1).astype(np.float32)
    extrap = np.float32(1) - ramp
    inv_inter = np.float32(1) / (np.float32(factor) * pos_freqs)
    inv = inv_inter * (np.float32(1) - extrap) + inv * extrap
    return inv.astype(np.float32), float(attn)


def softmax_scale(qk_head_dim, rope_scaling):
    """DeepseekV3Attention.__init__ / LongcatFlashMLA.__init__ (yarn_apply_mscale):
    qk_head_dim^-0.5, times yarn_get_mscale(factor, mscale_all_dim)^2 when rope scaling is
    on (not "default") and mscale_all_dim is set and non-zero."""
    s = qk_head_dim ** -0.5
    if rope_type(rope_scaling) != "default":
        msa = rope_scaling.get("mscale_all_dim", 0)
        if msa:
            m = yarn_get_mscale(rope_scaling["factor"], msa)
            s = s * m * m
    return s


def cos_sin(pos, inv_freq, attn_factor, dt):
    """[n, dim/2] cos/sin of pos * inv_freq times attention_factor; float32 like torch (the
    rotary embedding forward), float64 throughout with --f64."""
    if dt == np.float32:
        f = pos.astype(np.float32)[:, None] * inv_freq[None, :]
        return (np.cos(f) * np.float32(attn_factor)).astype(dt), \
               (np.sin(f) * np.float32(attn_factor)).astype(dt)
    f = pos.astype(dt)[:, None] * inv_freq.astype(dt)[None, :]
    return np.cos(f) * attn_factor, np.sin(f) * attn_factor


def rope_interleaved(x, cos, sin):
    """Interleaved-pair RoPE: x [n, heads, d]; pair i = (x[2i], x[2i+1]) rotated by angle i:
    (a, b) -> (a cos - b sin, b cos + a sin). Output kept in the interleaved layout, as DeepSeek
    inference/model.py apply_rotary_emb (view_as_complex on pairs) does. transformers'
    apply_rotary_pos_emb_interleave returns the same values de-interleaved
    (cat([even rotated, odd rotated])); q and k are permuted alike, so q.k is unchanged."""
    c, s = cos[:, None, :], sin[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = b * c + a * s
    return out


def rope_half(x, cos, sin):
    """rope_interleave false: apply_rotary_pos_emb with rotate_half (first half / second half)."""
    c, s = cos[:, None, :], sin[:, None, :]
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


# --- MLA -----------------------------------------------------------------------------------
class MLADims:
    def __init__(self, hidden, heads, q_lora, kv_lora, nope, rope, v, q_scale=1.0,
                 kv_scale=1.0, scale=None, lora_eps=1e-6, bias=False, interleave=True):
        self.hidden, self.heads = hidden, heads
        self.q_lora, self.kv_lora = q_lora, kv_lora
        self.nope, self.rope, self.v = nope, rope, v
        self.qk = nope + rope
        self.q_scale, self.kv_scale = q_scale, kv_scale
        self.scale = scale if scale is not None else self.qk ** -0.5
        self.lora_eps = lora_eps
        self.bias = bias
        self.interleave = interleave


def load_mla(wts, prefix, d):
    """Weights of one MLA block under `prefix` (e.g. model.layers.3.self_attn.)."""
    H, P = d.hidden, prefix
    lw = {}
    if d.q_lora:
        lw["q_a"] = wts.linear(P + "q_a_proj.weight", d.q_lora, H)
        lw["q_a_ln"] = wts.w(P + "q_a_layernorm.weight", [d.q_lora])
        lw["q_b"] = wts.linear(P + "q_b_proj.weight", d.heads * d.qk, d.q_lora)
        if d.bias:
            lw["q_a_b"] = wts.w(P + "q_a_proj.bias", [d.q_lora])
    else:
        lw["q"] = wts.linear(P + "q_proj.weight", d.heads * d.qk, H)
    lw["kv_a"] = wts.linear(P + "kv_a_proj_with_mqa.weight", d.kv_lora + d.rope, H)
    lw["kv_a_ln"] = wts.w(P + "kv_a_layernorm.weight", [d.kv_lora])
    lw["kv_b"] = wts.linear(P + "kv_b_proj.weight", d.heads * (d.nope + d.v), d.kv_lora)
    lw["o"] = wts.linear(P + "o_proj.weight", H, d.heads * d.v)
    if d.bias:
        lw["kv_a_b"] = wts.w(P + "kv_a_proj_with_mqa.bias", [d.kv_lora + d.rope])
        lw["o_b"] = wts.w(P + "o_proj.bias", [H])
    return lw


def mla(lw, d, t, pos, cs, cache, key, absorbed, kv_only=False):
    """One MLA block on normed input t [n, hidden] at positions pos, extending cache[key].

    Expanded form (transformers DeepseekV3Attention.forward / LongcatFlashMLA.forward):
      q = q_b(RMSNorm_1e-6(q_a(t))) (or q_proj(t) without q_lora), viewed [n, heads, nope+rope],
          times mla_scale_q_lora (LongCat; nope AND rope parts; 1 for DeepSeek);
      ckv = kv_a_proj_with_mqa(t) = [latent kv_lora | k_rot rope];
      lat = RMSNorm_1e-6(latent) times mla_scale_kv_lora (LongCat; 1 for DeepSeek);
      kv_b(lat) viewed [n, heads, nope + v] -> k_nope, v; k_rot shared by all heads;
      q_rot, k_rot rotated (interleaved pairs); scores = (q_nope.k_nope + q_rot.k_rot) * scale,
      causal softmax (float32), out = o_proj(p @ v).
    Absorbed form (DeepSeek inference/model.py MLA.forward, attn_impl "absorb"): cache only
      lat [t, kv_lora] and roped k_rot [t, rope] per token; W = kv_b viewed [heads, nope+v,
      kv_lora]; q_abs[h] = q_nope[h] @ W[h, :nope]; scores = (q_abs.lat + q_rot.k_rot) * scale;
      x[h] = p @ lat; out_h = x[h] @ W[h, nope:].T; o_proj."""
    n = t.shape[0]
    dt = t.dtype.type
    if d.q_lora:
        qa = t @ lw["q_a"].T
        if "q_a_b" in lw:
            qa = qa + lw["q_a_b"]
        q = rmsnorm(qa, lw["q_a_ln"], d.lora_eps) @ lw["q_b"].T
    else:
        q = t @ lw["q"].T
    q = q.reshape(n, d.heads, d.qk)
    if d.q_scale != 1.0:
        q = q * dt(d.q_scale)
    q_nope, q_rot = q[..., :d.nope], q[..., d.nope:]
    ckv = t @ lw["kv_a"].T
    if "kv_a_b" in lw:
        ckv = ckv + lw["kv_a_b"]
    lat = rmsnorm(ckv[:, :d.kv_lora], lw["kv_a_ln"], d.lora_eps)
    if d.kv_scale != 1.0:
        lat = lat * dt(d.kv_scale)
    k_rot = ckv[:, None, d.kv_lora:]
    rot = rope_interleaved if d.interleave else rope_half
    q_rot = rot(q_rot, *cs)
    k_rot = rot(k_rot, *cs)[:, 0, :]
    ent = cache.get(key)
    wkv = lw["kv_b"].reshape(d.heads, d.nope + d.v, d.kv_lora)
    if absorbed:
        new = (lat, k_rot, pos)
    else:
        kv = (lat @ lw["kv_b"].T).reshape(n, d.heads, d.nope + d.v)
        new = (kv[..., :d.nope], kv[..., d.nope:], k_rot, pos)
    ent = new if ent is None else tuple(np.concatenate([a, b]) for a, b in zip(ent, new))
    cache[key] = ent
    if kv_only:  # a long prompt's prefix: only the keys and values later tokens read
        return None
    cp = ent[-1]
    visible = cp[None, :] <= pos[:, None]                   # causal
    if absorbed:
        c_lat, c_rot = ent[0], ent[1]
        q_abs = np.einsum("qhd,hdc->qhc", q_nope, wkv[:, :d.nope])
        scores = (np.einsum("qhc,tc->hqt", q_abs, c_lat)
                  + np.einsum("qhr,tr->hqt", q_rot, c_rot)) * dt(d.scale)
    else:
        c_kn, c_v, c_rot = ent[0], ent[1], ent[2]
        scores = (np.einsum("qhd,thd->hqt", q_nope, c_kn)
                  + np.einsum("qhr,tr->hqt", q_rot, c_rot)) * dt(d.scale)
    scores = np.where(visible[None], scores, dt(-np.inf))
    p = softmax(scores)
    if absorbed:
        x = np.einsum("hqt,tc->qhc", p, c_lat)
        o = np.einsum("qhc,hdc->qhd", x, wkv[:, d.nope:])
    else:
        o = np.einsum("hqt,thd->qhd", p, c_v)
    out = o.reshape(n, d.heads * d.v) @ lw["o"].T
    if "o_b" in lw:
        out = out + lw["o_b"]
    return out


# --- dump / CLI ----------------------------------------------------------------------------
def topk_desc(x, k):
    """Indices of the k largest per row, descending; ties: lower index first (torch.topk
    sorted=True order for distinct values)."""
    return np.argsort(-x, axis=-1, kind="stable")[:, :k]


def run_cli(doc, make_model, absorbed_help):
    """The common CLI: MODEL_DIR --prompt-ids FILE [--out] [--greedy N --greedy-out]
    [--dump DIR] [--f64] [--stats] [--chunk N] [--absorbed]."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--prompt-ids", required=True, help="file of whitespace-separated ids")
    ap.add_argument("--out", help="write prompt logits, float32 LE [n_tokens, vocab]")
    ap.add_argument("--greedy", type=int, default=0, help="greedy steps after the prompt")
    ap.add_argument("--greedy-out", help="write the greedy ids, space-separated")
    ap.add_argument("--dump", help="folder for named intermediates + manifest.json")
    ap.add_argument("--f64", action="store_true", help="compute in float64")
    ap.add_argument("--chunk", type=int, default=0,
                    help="feed the prompt N tokens at a time through the KV cache (0: one pass)")
    ap.add_argument("--absorbed", action="store_true", help=absorbed_help)
    ap.add_argument("--tail", type=int, default=0,
                    help="logits of the last N positions only; the prompt before them only "
                    "fills the cache (exact for one-layer models)")
    ap.add_argument("--stats", action="store_true",
                    help="print margins, routing coverage and tensor accounting to stderr")
    a = ap.parse_args()

    with open(a.prompt_ids) as f:
        ids = [int(t) for t in f.read().split()]
    if not ids:
        sys.exit("empty prompt")
    try:
        m = make_model(a.model_dir, np.float64 if a.f64 else np.float32, a.absorbed)
        m.weights()
    except (KeyError, ValueError, NotImplementedError) as e:
        sys.exit(f"error: {e}")
    if max(ids) >= m.vocab or min(ids) < 0:
        sys.exit("prompt id out of vocab range")
    cache = {}
    dump = {} if (a.dump or a.stats) else None
    step = a.chunk if a.chunk > 0 else len(ids)
    parts, dparts = [], []
    start = 0
    if a.tail:
        if m.c.n_layers != 1:
            sys.exit("--tail needs a one-layer model")
        start = max(len(ids) - a.tail, 0)
        for s in range(0, start, 4096):
            m.forward(ids[s:min(s + 4096, start)], s, cache, kv_only_last=True)
    for s in range(start, len(ids), step):
        d = {} if dump is not None else None
        parts.append(m.forward(ids[s:s + step], s, cache, d))
        dparts.append(d)
    logits = np.concatenate(parts)
    m.end_prompt()
    if dump is not None:
        for k in dparts[0]:
            dump[k] = np.concatenate([d[k] for d in dparts])
    if a.out:
        logits.astype("<f4").tofile(a.out)
    if a.dump:
        write_dump(a.dump, dump)
    greedy_margins, greedy_dumps = [], []
    if a.greedy:
        out = []
        row = logits[-1]
        for g in range(a.greedy):
            nxt = int(np.argmax(row))
            out.append(nxt)
            greedy_margins.append(top2_margin(row[None])[0])
            if g + 1 < a.greedy:
                d = {} if a.stats else None
                row = m.forward([nxt], len(ids) + g, cache, d)[-1]
                if d is not None:
                    greedy_dumps.append(d)
        text = " ".join(map(str, out))
        if a.greedy_out:
            with open(a.greedy_out, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
    wts = m.wts
    if a.stats:
        stats = {"max_abs_logit": float(np.abs(logits).max()),
                 "min_top1_top2_margin_prompt": float(top2_margin(logits).min()),
                 "min_top1_top2_margin_greedy": min(greedy_margins, default=None),
                 "fp8_linears_dequantised": wts.n_fp8,
                 "tensors_in_checkpoint": len(wts.st.keys()),
                 "tensors_used": len(wts.used),
                 "tensors_ignored": len(wts.ignored)}
        stats.update(m.routing_stats(dump, greedy_dumps))
        print(json.dumps(stats), file=sys.stderr)
    if wts.ignored:
        print(f"note: {len(wts.ignored)} tensors ignored ({m.ignored_what})", file=sys.stderr)
    unused = set(wts.st.keys()) - wts.used - wts.ignored
    if unused:
        print(f"warning: {len(unused)} tensors unused: {sorted(unused)[:5]}", file=sys.stderr)
