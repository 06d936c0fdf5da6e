"""Shared NumPy pieces of the two MLA-family oracles (deepseek_v3.py, longcat_flash.py).

Owns: the YaRN / default RoPE tables and softmax scale of the MLA families, the interleaved-pair
rotary embedding, Multi-head Latent Attention in its expanded form (transformers) and its
absorbed form (DeepSeek inference/model.py, attn_impl "absorb"), and the common CLI driver
(prompt pass, chunked prefill, --tail, greedy with KV cache, stats). Family-independent blocks
(weights with block-FP8 dequantisation, RMSNorm, SwiGLU, the decoder stack) are in blocks.py,
the CLI glue in dump.py. Written from the upstream code named below, never from this project's C.

Upstream lines followed (see each function's docstring for the exact formula):
  - huggingface/transformers src/transformers/models/deepseek_v3/modeling_deepseek_v3.py
    DeepseekV3Attention.__init__/forward, apply_rotary_pos_emb_interleave, rotate_half,
    eager_attention_forward.
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
    precompute_freqs_cis / apply_rotary_emb (complex pairs (x[2i], x[2i+1])).
"""
import json
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
import blocks as bl  # noqa: E402
import dump as du  # noqa: E402
from blocks import rmsnorm, softmax  # noqa: E402


class MlaConfig:
    """The config keys DeepseekV3Config and LongcatFlashConfig share (same names, same meaning):
    hidden_size, the layer count (layers_key), num_attention_heads, num_key_value_heads
    (default: heads), kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, vocab_size,
    rms_norm_eps, rope_theta, max_position_embeddings (with the family's defaults),
    rope_scaling, attention_bias, tie_word_embeddings."""

    def __init__(self, cfg, layers_key, eps, theta, max_pos):
        self.raw = cfg
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg[layers_key]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        self.kv_lora = cfg["kv_lora_rank"]
        self.nope = cfg["qk_nope_head_dim"]
        self.rope = cfg["qk_rope_head_dim"]
        self.v = cfg["v_head_dim"]
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", eps)
        self.theta = cfg.get("rope_theta", theta)
        self.rope_scaling = cfg.get("rope_scaling") or None
        self.max_pos = cfg.get("max_position_embeddings", max_pos)
        self.bias = bool(cfg.get("attention_bias", False))
        self.tie = bool(cfg.get("tie_word_embeddings", False))


# --- RoPE ----------------------------------------------------------------------------------
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
    pos_freqs, inv = bl.rope_inv_freq(dim, theta)
    rt = bl.rope_type(rope_scaling)
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
    return bl.yarn(dim, theta, pos_freqs, inv, factor, orig, rs)


def softmax_scale(qk_head_dim, rope_scaling):
    """DeepseekV3Attention.__init__ / LongcatFlashMLA.__init__ (yarn_apply_mscale):
    qk_head_dim^-0.5, times yarn_get_mscale(factor, mscale_all_dim)^2 when rope scaling is
    on (not "default") and mscale_all_dim is set and non-zero."""
    s = qk_head_dim ** -0.5
    if bl.rope_type(rope_scaling) != "default":
        msa = rope_scaling.get("mscale_all_dim", 0)
        if msa:
            m = bl.yarn_get_mscale(rope_scaling["factor"], msa)
            s = s * m * m
    return s


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
    rot = rope_interleaved if d.interleave else bl.rope_half
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


# --- CLI -----------------------------------------------------------------------------------
def run_cli(doc, make_model, absorbed_help):
    """The common CLI: MODEL_DIR --prompt-ids FILE [--out] [--greedy N --greedy-out]
    [--dump DIR] [--f64] [--stats] [--chunk N] [--absorbed] [--tail N]."""
    ap = du.arg_parser(doc)
    ap.add_argument("--chunk", type=int, default=0, help=du.CHUNK_HELP)
    ap.add_argument("--absorbed", action="store_true", help=absorbed_help)
    ap.add_argument("--tail", type=int, default=0,
                    help="logits of the last N positions only; the prompt before them only "
                    "fills the cache (exact for one-layer models)")
    ap.add_argument("--stats", action="store_true", help=du.STATS_ROUTING_HELP)
    a = ap.parse_args()

    ids = du.read_prompt(a.prompt_ids)
    m = du.load_model(lambda: make_model(a.model_dir, du.compute_dtype(a), a.absorbed),
                      preload=True)
    du.check_prompt(ids, m.c.vocab)
    cache = m.new_cache()
    start = 0
    if a.tail:
        if m.c.n_layers != 1:
            sys.exit("--tail needs a one-layer model")
        start = max(len(ids) - a.tail, 0)
        for s in range(0, start, 4096):
            m.forward(ids[s:min(s + 4096, start)], s, cache, kv_only_last=True)
    logits, dump, greedy_margins, greedy_dumps = du.run(a, m, ids, cache, a.chunk, start)
    wts = m.wts
    if a.stats:
        stats = du.margin_stats(logits, greedy_margins)
        stats.update({"fp8_linears_dequantised": wts.n_fp8,
                      "tensors_in_checkpoint": len(wts.st.keys()),
                      "tensors_used": len(wts.used),
                      "tensors_ignored": len(wts.ignored)})
        stats.update(m.routing_stats(dump, greedy_dumps))
        print(json.dumps(stats), file=sys.stderr)
    du.report_tensors(wts, m.ignored_what)
