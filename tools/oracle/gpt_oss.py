#!/usr/bin/python3
"""Independent NumPy forward of gpt-oss (float32, or float64 with --f64), from the HF folder.

Owns: the reference math for the gpt_oss family, written from the upstream code, never
from this project's C sources. Lines followed:
  - openai/gpt-oss gpt_oss/torch/model.py: RMSNorm.forward, _apply_rotary_emb (half split),
    RotaryEmbedding._compute_concentration_and_inv_freq (YaRN NTK-by-parts, concentration
    on cos/sin), sdpa (sinks as an extra softmax column, not scaled; sliding mask
    tril(diagonal=-sliding_window) => key j visible from i iff 0 <= i-j < window),
    AttentionBlock.forward (q head h uses kv head h // (n_q/n_kv), sink h), swiglu (interleaved
    gate/up, clamp, alpha 1.702, (up + 1)), MLPBlock.forward (topk sorted, softmax over the k
    values, einsums, biases; residual adds), Transformer.forward.
  - openai/gpt-oss gpt_oss/torch/weights.py: Checkpoint._get_mxfp4_tensor (FP4 LUT, low nibble
    = even element, ldexp by scale - 127).
  - huggingface/transformers models/gpt_oss/modeling_gpt_oss.py and
    convert_gpt_oss_weights_to_hf.py: HF tensor names, q/k/v split, *_blocks/*_scales,
    layer_types, sliding_window, eps; modeling_rope_utils._compute_yarn_parameters:
    find_correction_range without floor/ceil when rope_scaling.truncate is false, clamped to
    [0, dim-1], attention_factor = 0.1 ln(factor) + 1 unless given.

The forward keeps its own KV cache so that greedy decoding feeds one token per step; the
prompt logits come from one causal pass over the whole prompt.

The pieces shared with the other oracles (YaRN tables, half-split RoPE, the decoder stack,
expert dispatch, the KV cache and GQA attention with sinks, the CLI driver) are in blocks.py,
gqa_common.py and dump.py; this file holds what is gpt-oss's own.

CLI:
  gpt_oss.py MODEL_DIR --prompt-ids FILE [--out logits.f32] [--greedy N --greedy-out ids.txt]
             [--dump DIR] [--f64]
"""
import json
import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import blocks as bl  # noqa: E402
import dump as du  # noqa: E402
import gqa_common as gqa  # noqa: E402

FP4_VALUES = np.array([+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0,
                       -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)
SWIGLU_ALPHA = 1.702  # hard-coded upstream (model.py swiglu default), not a config key


def mxfp4_decode(blocks, scales):
    """[..., G, 16] u8 codes + [..., G] u8 E8M0 -> [..., G*32] float32 (weights.py)."""
    lo = FP4_VALUES[blocks & 0x0F]
    hi = FP4_VALUES[blocks >> 4]
    vals = np.stack([lo, hi], axis=-1).reshape(*blocks.shape[:-1], blocks.shape[-1] * 2)
    # ldexp is exact: an FP4 value has two significant bits.
    vals = np.ldexp(vals, scales.astype(np.int32)[..., None] - 127).astype(np.float32)
    return vals.reshape(*blocks.shape[:-2], blocks.shape[-2] * blocks.shape[-1] * 2)


class Config:
    """Every dimension from config.json (HF key names, with the original repo's as fallback)."""

    def __init__(self, cfg):
        self.raw = cfg
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg["num_key_value_heads"]
        self.head_dim = cfg.get("head_dim") or self.hidden // self.n_heads
        self.n_experts = cfg.get("num_local_experts", cfg.get("num_experts"))
        self.top_k = cfg.get("num_experts_per_tok", cfg.get("experts_per_token"))
        self.inter = cfg["intermediate_size"]
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.swiglu_limit = cfg.get("swiglu_limit", 7.0)
        self.sliding_window = cfg.get("sliding_window") or 0
        self.theta = cfg.get("rope_theta", 150000.0)
        self.tie = bool(cfg.get("tie_word_embeddings", False))
        lt = cfg.get("layer_types")
        if lt is None:  # the original repo hard-codes: even layers sliding
            lt = ["sliding_attention" if i % 2 == 0 else "full_attention"
                  for i in range(self.n_layers)]
        assert len(lt) == self.n_layers
        self.layer_types = lt
        self.rope_scaling = cfg.get("rope_scaling") or None

    def is_moe(self, l):
        return True


def rope_params(c):
    """(inv_freq float32 [head_dim/2], attention_factor): _compute_yarn_parameters /
    RotaryEmbedding._compute_concentration_and_inv_freq, in float32 like torch."""
    dim = c.head_dim
    pos_freqs, inv = bl.rope_inv_freq(dim, c.theta)
    rs, rtype = c.rope_scaling, bl.rope_type(c.rope_scaling)
    if rtype == "default":
        return inv, 1.0
    if rtype != "yarn":
        raise NotImplementedError(f"rope_type {rtype}")
    factor = float(rs["factor"])
    orig = rs.get("original_max_position_embeddings") or c.raw.get(
        "initial_context_length") or c.raw["max_position_embeddings"]
    return bl.yarn(dim, c.theta, pos_freqs, inv, factor, orig, rs)


class GptOss(bl.Decoder):
    """gpt-oss Transformer over the blocks.Decoder stack: its own RMSNorm operation order,
    half-split RoPE on float32 angles, sliding-window attention with sinks, MXFP4 experts with
    the clamped SwiGLU; every layer MoE."""

    def __init__(self, model_dir, dtype=np.float32):
        with open(os.path.join(model_dir, "config.json")) as f:
            c = Config(json.load(f))
        super().__init__(c, bl.Weights(model_dir, dtype), dtype)
        self.inv_freq, self.attn_factor = rope_params(c)
        self.expert_inter = c.inter
        self.fit_expert_cache(c.n_experts)

    def w(self, name):
        self.wts.used.add(name)
        return self.wts.st.get(name).astype(self.dt)

    def mxfp4_expert(self, layer, proj, e):
        """Decoded [out, in] weight of one expert (gate_up: [2I, H], down: [H, I])."""
        key = (layer, proj, e)
        if key in self._expert_cache:
            return self._expert_cache[key]
        p = f"model.layers.{layer}.mlp.experts.{proj}"
        self.wts.used.update((p + "_blocks", p + "_scales"))
        blocks = self.wts.st.raw(p + "_blocks")[e]
        scales = self.wts.st.raw(p + "_scales")[e]
        wt = mxfp4_decode(np.asarray(blocks), np.asarray(scales)).astype(self.dt)
        if self.cache_experts:
            self._expert_cache[key] = wt
        return wt

    def load_layer(self, l):
        p = f"model.layers.{l}."
        names = {"in_ln": "input_layernorm.weight", "post_ln": "post_attention_layernorm.weight",
                 "q": "self_attn.q_proj.weight", "q_b": "self_attn.q_proj.bias",
                 "k": "self_attn.k_proj.weight", "k_b": "self_attn.k_proj.bias",
                 "v": "self_attn.v_proj.weight", "v_b": "self_attn.v_proj.bias",
                 "o": "self_attn.o_proj.weight", "o_b": "self_attn.o_proj.bias",
                 "sinks": "self_attn.sinks",
                 "router": "mlp.router.weight", "router_b": "mlp.router.bias",
                 "gate_up_b": "mlp.experts.gate_up_proj_bias",
                 "down_b": "mlp.experts.down_proj_bias"}
        return {k: self.w(p + n) for k, n in names.items()}

    def weights(self):
        if not hasattr(self, "_layers"):
            self._layers = [self.load_layer(l) for l in range(self.c.n_layers)]
            # every expert tensor must exist with its shape, even if no token routes to it
            c = self.c
            for l in range(c.n_layers):
                for proj, rows, cols in (("gate_up_proj", 2 * c.inter, c.hidden),
                                         ("down_proj", c.hidden, c.inter)):
                    p = f"model.layers.{l}.mlp.experts.{proj}"
                    want = {"_blocks": [c.n_experts, rows, cols // 32, 16],
                            "_scales": [c.n_experts, rows, cols // 32]}
                    for suf, shape in want.items():
                        got = self.wts.st.info(p + suf)["shape"]
                        if list(got) != shape:
                            raise ValueError(f"{p + suf}: shape {got}, expected {shape}")
                        self.wts.used.add(p + suf)
            self._embed = self.w("model.embed_tokens.weight")
            self._norm = self.w("model.norm.weight")
            if self.c.tie and "lm_head.weight" not in self.wts:
                self._head = self._embed
            else:
                self._head = self.w("lm_head.weight")
        return self._layers

    # --- blocks ---------------------------------------------------------------------------
    def norm(self, x, wt):
        """model.py RMSNorm.forward: x * rsqrt(mean(x^2) + eps) * scale (this order)."""
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.dt(self.c.eps)) * wt

    def cos_sin(self, pos):
        """RotaryEmbedding._compute_cos_sin: float32 angles, cos/sin times the concentration."""
        return bl.cos_sin(pos, self.inv_freq, self.dt, self.attn_factor, f32_angles=True)

    def attention(self, l, lw, t, pos, cs, cache, kv_only=False):
        c = self.c
        n = t.shape[0]
        k = (t @ lw["k"].T + lw["k_b"])
        v = (t @ lw["v"].T + lw["v_b"])
        k = bl.rope_half(k.reshape(n, c.n_kv, c.head_dim), *cs)
        v = v.reshape(n, c.n_kv, c.head_dim)
        ck, cv, cp = gqa.kv_append(cache.get(l), k, v, pos)
        window = c.sliding_window if c.layer_types[l] == "sliding_attention" else 0
        if window > 0:  # keys no later query can see are dropped (long prompts in blocks)
            keep = cp > pos[-1] - window
            cache[l] = (ck[keep], cv[keep], cp[keep])
            seen = cp > pos[0] - window  # what this call's queries can see
            ck, cv, cp = ck[seen], cv[seen], cp[seen]
        else:
            cache[l] = (ck, cv, cp)
        if kv_only:
            return None
        q = (t @ lw["q"].T + lw["q_b"])
        q = bl.rope_half(q.reshape(n, c.n_heads, c.head_dim), *cs)
        # visible[i, j]: key j is causal and (if sliding) within the last `window` positions
        diff = pos[:, None] - cp[None, :]
        visible = diff >= 0
        if window > 0:
            visible &= diff < window
        attn = gqa.attend(q, ck, cv, visible, 1.0 / math.sqrt(c.head_dim), sinks=lw["sinks"])
        return attn @ lw["o"].T + lw["o_b"]

    def moe(self, l, lw, t, dump):
        c = self.c
        g = t @ lw["router"].T + lw["router_b"]
        # torch.topk(sorted=True): descending values; stable sort keeps lower index first
        idx = bl.topk_desc(g, c.top_k)
        wts = bl.softmax(np.take_along_axis(g, idx, axis=-1))   # softmax over the k values
        b1, b2 = lw["gate_up_b"], lw["down_b"]
        lim = self.dt(c.swiglu_limit)

        def expert_out(e, x):
            h = x @ self.mxfp4_expert(l, "gate_up_proj", e).T + b1[e]
            gate, up = h[:, 0::2], h[:, 1::2]     # interleaved: row 2j gate j, 2j+1 up j
            gate = np.minimum(gate, lim)
            up = np.clip(up, -lim, lim)
            glu = gate / (1 + np.exp(-self.dt(SWIGLU_ALPHA) * gate))  # gate * sigmoid(a*gate)
            return (glu * (up + 1)) @ self.mxfp4_expert(l, "down_proj", e).T + b2[e]

        out = bl.dispatch(t, idx, wts, expert_out)
        if dump is not None:
            bl.dump_routing(dump, l, g, idx, wts)
        return out


def main():
    ap = du.arg_parser(__doc__)
    ap.add_argument("--tail", type=int, default=0,
                    help="logits of the last N positions only: the prompt before them goes "
                    "through in blocks, attention computed only where a later logit needs it "
                    "(exact when every layer but the last is a sliding-window layer)")
    ap.add_argument("--stats", action="store_true", help=du.STATS_MARGINS_HELP)
    a = ap.parse_args()

    ids = du.read_prompt(a.prompt_ids)
    m = GptOss(a.model_dir, du.compute_dtype(a))
    du.check_prompt(ids, m.c.vocab)
    cache = m.new_cache()
    start = 0
    if a.tail:
        if any(t != "sliding_attention" for t in m.c.layer_types[:-1]):
            sys.exit("--tail needs every layer but the last to be a sliding-window layer")
        start = max(len(ids) - a.tail, 0)
        for b in range(0, start, 1024):
            m.forward(ids[b:min(b + 1024, start)], b, cache, kv_only_last=True)
    logits, dump, greedy_margins, _ = du.run(a, m, ids, cache, 0, start,
                                             errors=(KeyError, ValueError), greedy_dumps=False)
    if a.stats:
        k = m.c.top_k
        gaps = [float("inf")]  # gap between the k-th and (k+1)-th router logit
        if k < m.c.n_experts:
            gaps = [float(np.min(-np.diff(np.sort(dump[f"L{l}.router_logits"], axis=1)
                                          [:, ::-1][:, k - 1:k + 1], axis=1)))
                    for l in range(m.c.n_layers)]
        stats = du.margin_stats(logits, greedy_margins)
        stats["router_topk_boundary_gap_min"] = min(gaps)
        print(json.dumps(stats), file=sys.stderr)
    du.report_tensors(m.wts)


if __name__ == "__main__":
    main()
