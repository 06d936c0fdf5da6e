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

CLI:
  gpt_oss.py MODEL_DIR --prompt-ids FILE [--out logits.f32] [--greedy N --greedy-out ids.txt]
             [--dump DIR] [--f64]
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


def rope_params(c):
    """(inv_freq float32 [head_dim/2], attention_factor): _compute_yarn_parameters /
    RotaryEmbedding._compute_concentration_and_inv_freq, in float32 like torch."""
    dim = c.head_dim
    base = float(c.theta)
    # torch: base ** (arange(0, dim, 2).float() / dim), float32 throughout
    pos_freqs = np.power(np.float32(base),
                         np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))
    rs = c.rope_scaling
    rtype = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
    if rs is None or rtype == "default":
        return (np.float32(1.0) / pos_freqs).astype(np.float32), 1.0
    if rtype != "yarn":
        raise NotImplementedError(f"rope_type {rtype}")
    factor = float(rs["factor"])
    orig = rs.get("original_max_position_embeddings") or c.raw.get(
        "initial_context_length") or c.raw["max_position_embeddings"]

    def get_mscale(scale, mscale=1.0):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attn_factor = rs.get("attention_factor")
    if attn_factor is None:
        ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
        attn_factor = (get_mscale(factor, ms) / get_mscale(factor, msa)) if (ms and msa) \
            else get_mscale(factor)
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
    extrap_factor = np.float32(1) - ramp
    inv_extra = np.float32(1) / pos_freqs
    inv_inter = np.float32(1) / (np.float32(factor) * pos_freqs)
    inv_freq = inv_inter * (np.float32(1) - extrap_factor) + inv_extra * extrap_factor
    return inv_freq.astype(np.float32), float(attn_factor)


class GptOss:
    def __init__(self, model_dir, dtype=np.float32):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.c = Config(json.load(f))
        self.dt = dtype
        self.st = ModelFolder(model_dir)
        self.used = set()
        self.inv_freq, self.attn_factor = rope_params(self.c)
        self._expert_cache = {}
        c = self.c
        exp_bytes = c.n_layers * c.n_experts * 3 * c.inter * c.hidden * np.dtype(dtype).itemsize
        self._cache_experts = exp_bytes <= (1 << 30)  # decode once when it fits in 1 GiB

    def w(self, name):
        self.used.add(name)
        return self.st.get(name).astype(self.dt)

    def expert(self, layer, proj, e):
        """Decoded [out, in] weight of one expert (gate_up: [2I, H], down: [H, I])."""
        key = (layer, proj, e)
        if key in self._expert_cache:
            return self._expert_cache[key]
        p = f"model.layers.{layer}.mlp.experts.{proj}"
        self.used.update((p + "_blocks", p + "_scales"))
        blocks = self.st.raw(p + "_blocks")[e]
        scales = self.st.raw(p + "_scales")[e]
        wt = mxfp4_decode(np.asarray(blocks), np.asarray(scales)).astype(self.dt)
        if self._cache_experts:
            self._expert_cache[key] = wt
        return wt

    def load_layer(self, l):
        p = f"model.layers.{l}."
        names = ["input_layernorm.weight", "post_attention_layernorm.weight",
                 "self_attn.q_proj.weight", "self_attn.q_proj.bias",
                 "self_attn.k_proj.weight", "self_attn.k_proj.bias",
                 "self_attn.v_proj.weight", "self_attn.v_proj.bias",
                 "self_attn.o_proj.weight", "self_attn.o_proj.bias", "self_attn.sinks",
                 "mlp.router.weight", "mlp.router.bias",
                 "mlp.experts.gate_up_proj_bias", "mlp.experts.down_proj_bias"]
        return {n: self.w(p + n) for n in names}

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
                        got = self.st.info(p + suf)["shape"]
                        if list(got) != shape:
                            raise ValueError(f"{p + suf}: shape {got}, expected {shape}")
                        self.used.add(p + suf)
            self._embed = self.w("model.embed_tokens.weight")
            self._norm = self.w("model.norm.weight")
            if self.c.tie and "lm_head.weight" not in self.st:
                self._head = self._embed
            else:
                self._head = self.w("lm_head.weight")
        return self._layers

    # --- blocks ---------------------------------------------------------------------------
    def rmsnorm(self, x, wt):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.dt(self.c.eps)) * wt

    def rope(self, x, pos):
        """x [n, heads, d]; half-split rotation (model.py _apply_rotary_emb)."""
        freqs = pos.astype(np.float32)[:, None] * self.inv_freq[None, :]
        if self.dt == np.float32:
            cos = np.cos(freqs) * np.float32(self.attn_factor)
            sin = np.sin(freqs) * np.float32(self.attn_factor)
        else:
            cos = np.cos(freqs.astype(self.dt)) * self.attn_factor
            sin = np.sin(freqs.astype(self.dt)) * self.attn_factor
        cos = cos.astype(self.dt)[:, None, :]
        sin = sin.astype(self.dt)[:, None, :]
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def attention(self, l, lw, t, pos, cache, kv_only=False):
        c = self.c
        n = t.shape[0]
        k = (t @ lw["self_attn.k_proj.weight"].T + lw["self_attn.k_proj.bias"])
        v = (t @ lw["self_attn.v_proj.weight"].T + lw["self_attn.v_proj.bias"])
        k = self.rope(k.reshape(n, c.n_kv, c.head_dim), pos)
        v = v.reshape(n, c.n_kv, c.head_dim)
        ck, cv, cp = cache[l]
        ck = np.concatenate([ck, k]) if ck is not None else k
        cv = np.concatenate([cv, v]) if cv is not None else v
        cp = np.concatenate([cp, pos]) if cp is not None else pos
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
        q = (t @ lw["self_attn.q_proj.weight"].T + lw["self_attn.q_proj.bias"])
        q = self.rope(q.reshape(n, c.n_heads, c.head_dim), pos)
        # visible[i, j]: key j is causal and (if sliding) within the last `window` positions
        diff = pos[:, None] - cp[None, :]
        visible = diff >= 0
        if window > 0:
            visible &= diff < window
        rep = c.n_heads // c.n_kv
        kh = np.repeat(ck, rep, axis=1)          # q head h -> kv head h // rep
        vh = np.repeat(cv, rep, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, kh) * self.dt(1.0 / math.sqrt(c.head_dim))
        scores = np.where(visible[None], scores, self.dt(-np.inf))
        sinks = lw["self_attn.sinks"][:, None, None]          # one extra logit per head
        m = np.maximum(scores.max(axis=-1, keepdims=True), sinks)
        p = np.exp(scores - m)
        denom = p.sum(axis=-1, keepdims=True) + np.exp(sinks - m)
        attn = np.einsum("hqk,khd->qhd", p / denom, vh).reshape(n, c.n_heads * c.head_dim)
        return attn @ lw["self_attn.o_proj.weight"].T + lw["self_attn.o_proj.bias"]

    def moe(self, l, lw, t, dump):
        c = self.c
        g = t @ lw["mlp.router.weight"].T + lw["mlp.router.bias"]
        # torch.topk(sorted=True): descending values; stable sort keeps lower index first
        idx = np.argsort(-g, axis=-1, kind="stable")[:, :c.top_k]
        vals = np.take_along_axis(g, idx, axis=-1)
        ev = np.exp(vals - vals.max(axis=-1, keepdims=True))
        wts = ev / ev.sum(axis=-1, keepdims=True)
        out = np.zeros_like(t)
        b1 = lw["mlp.experts.gate_up_proj_bias"]
        b2 = lw["mlp.experts.down_proj_bias"]
        lim = self.dt(c.swiglu_limit)
        for e in np.unique(idx):
            rows, slot = np.nonzero(idx == e)
            h = t[rows] @ self.expert(l, "gate_up_proj", e).T + b1[e]
            gate, up = h[:, 0::2], h[:, 1::2]     # interleaved: row 2j gate j, 2j+1 up j
            gate = np.minimum(gate, lim)
            up = np.clip(up, -lim, lim)
            glu = gate / (1 + np.exp(-self.dt(SWIGLU_ALPHA) * gate))  # gate * sigmoid(a*gate)
            y = (glu * (up + 1)) @ self.expert(l, "down_proj", e).T + b2[e]
            out[rows] += y * wts[rows, slot][:, None]
        if dump is not None:
            dump[f"L{l}.router_logits"] = g
            dump[f"L{l}.topk_ids"] = idx.astype(np.int32)
            dump[f"L{l}.topk_w"] = wts
        return out

    def forward(self, ids, pos0, cache, dump=None, kv_only_last=False):
        """Runs tokens `ids` at positions pos0.. through the model, extending `cache`.
        kv_only_last: only extend the cache (the last layer's keys and values need no
        attention; returns None), so that a long prompt costs attention for its tail."""
        layers = self.weights()
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.arange(pos0, pos0 + len(ids), dtype=np.int64)
        x = self._embed[ids]
        for l, lw in enumerate(layers):
            last = l == len(layers) - 1
            a = self.attention(l, lw, self.rmsnorm(x, lw["input_layernorm.weight"]), pos, cache,
                               kv_only=kv_only_last and last)
            if a is None:
                return None
            x = x + a
            if dump is not None:
                dump[f"L{l}.attn_out"] = x
            x = x + self.moe(l, lw, self.rmsnorm(x, lw["post_attention_layernorm.weight"]),
                             dump)
            if dump is not None:
                dump[f"L{l}.moe_out"] = x
        h = self.rmsnorm(x, self._norm)
        logits = h @ self._head.T
        if dump is not None:
            dump["final_norm"] = h
            dump["logits"] = logits
        return logits

    def new_cache(self):
        return [(None, None, None) for _ in range(self.c.n_layers)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--prompt-ids", required=True, help="file of whitespace-separated ids")
    ap.add_argument("--out", help="write prompt logits, float32 LE [n_tokens, vocab]")
    ap.add_argument("--greedy", type=int, default=0, help="greedy steps after the prompt")
    ap.add_argument("--greedy-out", help="write the greedy ids, space-separated")
    ap.add_argument("--dump", help="folder for named intermediates + manifest.json")
    ap.add_argument("--f64", action="store_true", help="compute in float64")
    ap.add_argument("--tail", type=int, default=0,
                    help="logits of the last N positions only: the prompt before them goes "
                    "through in blocks, attention computed only where a later logit needs it "
                    "(exact when every layer but the last is a sliding-window layer)")
    ap.add_argument("--stats", action="store_true",
                    help="print margins (top1-top2 logit, router top-k boundary) to stderr")
    a = ap.parse_args()

    with open(a.prompt_ids) as f:
        ids = [int(t) for t in f.read().split()]
    if not ids:
        sys.exit("empty prompt")
    m = GptOss(a.model_dir, np.float64 if a.f64 else np.float32)
    if max(ids) >= m.c.vocab or min(ids) < 0:
        sys.exit("prompt id out of vocab range")
    cache = m.new_cache()
    dump = {} if (a.dump or a.stats) else None
    start = 0
    if a.tail:
        if any(t != "sliding_attention" for t in m.c.layer_types[:-1]):
            sys.exit("--tail needs every layer but the last to be a sliding-window layer")
        start = max(len(ids) - a.tail, 0)
        for b in range(0, start, 1024):
            m.forward(ids[b:min(b + 1024, start)], b, cache, kv_only_last=True)
    try:
        logits = m.forward(ids[start:], start, cache, dump)
    except (KeyError, ValueError) as e:
        sys.exit(f"error: {e}")
    if a.out:
        logits.astype("<f4").tofile(a.out)
    if a.dump:
        write_dump(a.dump, dump)
    greedy_margins = []
    if a.greedy:
        out = []
        row = logits[-1]
        for step in range(a.greedy):
            nxt = int(np.argmax(row))
            out.append(nxt)
            greedy_margins.append(top2_margin(row[None])[0])
            if step + 1 < a.greedy:
                row = m.forward([nxt], len(ids) + step, cache)[-1]
        text = " ".join(map(str, out))
        if a.greedy_out:
            with open(a.greedy_out, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
    if a.stats:
        k = m.c.top_k
        gaps = [float("inf")]  # gap between the k-th and (k+1)-th router logit
        if k < m.c.n_experts:
            gaps = [float(np.min(-np.diff(np.sort(dump[f"L{l}.router_logits"], axis=1)
                                          [:, ::-1][:, k - 1:k + 1], axis=1)))
                    for l in range(m.c.n_layers)]
        stats = {"max_abs_logit": float(np.abs(logits).max()),
                 "min_top1_top2_margin_prompt": float(top2_margin(logits).min()),
                 "min_top1_top2_margin_greedy": min(greedy_margins, default=None),
                 "router_topk_boundary_gap_min": min(gaps)}
        print(json.dumps(stats), file=sys.stderr)
    unused = set(m.st.keys()) - m.used
    if unused:
        print(f"warning: {len(unused)} tensors unused: {sorted(unused)[:5]}", file=sys.stderr)


if __name__ == "__main__":
    main()
