"""Shared NumPy pieces of the grouped-query-attention oracles (qwen3_moe.py, glm4_moe.py, and
the KV cache / attention core of gpt_oss.py).

Owns: the config keys both transformers GQA families read (GqaConfig), the rotate-half rotary
embedding on the first rotary_dim channels, the KV cache append, GQA attention (optionally with
gpt-oss attention sinks), and GqaDecoder, the attention block of Qwen3MoeAttention /
Glm4MoeAttention over the blocks.Decoder stack. Written from the upstream code named in each
docstring, never from this project's C sources; the float32 operation order is the references'.
"""
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
import blocks as bl  # noqa: E402


class GqaConfig:
    """The keys Qwen3MoeConfig and Glm4MoeConfig share (same names, same meaning): hidden_size,
    num_hidden_layers, num_attention_heads, num_key_value_heads (default: heads), head_dim
    (default hidden / heads), vocab_size, rms_norm_eps (the family's default), rope_theta,
    rope_scaling, attention_bias, tie_word_embeddings; hidden_act must be silu."""

    def __init__(self, cfg, eps):
        self.raw = cfg
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        self.head_dim = cfg.get("head_dim") or self.hidden // self.n_heads
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", eps)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.rope_scaling = cfg.get("rope_scaling") or None
        self.bias = bool(cfg.get("attention_bias", False))
        self.tie = bool(cfg.get("tie_word_embeddings", False))
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise NotImplementedError(f"hidden_act {act}")


def rope(x, cos, sin):
    """transformers apply_rotary_pos_emb on x [n, heads, head_dim] with cos/sin [n, rotary_dim]
    (cat(freqs, freqs)): the first rotary_dim channels become x*cos + rotate_half(x)*sin
    (rotate_half = cat(-x2, x1) of their two halves), the rest pass through (Qwen3Moe: all
    channels; Glm4Moe: partial_rotary_factor, the gpt_neox form)."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    r = cos.shape[-1]
    x_rot, x_pass = x[..., :r], x[..., r:]
    h = r // 2
    rot_half = np.concatenate([-x_rot[..., h:], x_rot[..., :h]], axis=-1)
    return np.concatenate([x_rot * cos + rot_half * sin, x_pass], axis=-1)


def kv_append(entry, k, v, pos):
    """The layer's cache (keys, values, positions) extended by this call's tokens."""
    if entry is None:
        return k, v, pos
    ck, cv, cp = entry
    return np.concatenate([ck, k]), np.concatenate([cv, v]), np.concatenate([cp, pos])


def attend(q, ck, cv, visible, scale, sinks=None):
    """repeat_kv + eager_attention_forward (transformers) / sdpa (openai/gpt-oss model.py):
    q [n, heads, d] against the cached ck, cv [t, kv_heads, d]; q head h reads kv head
    h // (heads / kv_heads); scores * scale, masked where not visible [n, t], softmax in the
    compute dtype; with sinks [heads], one extra (unscaled) logit per head joins the softmax
    denominator. Returns [n, heads * d] (before o_proj)."""
    dt = q.dtype.type
    rep = q.shape[1] // ck.shape[1]
    kh = np.repeat(ck, rep, axis=1)                 # q head h -> kv head h // rep
    vh = np.repeat(cv, rep, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, kh) * dt(scale)
    scores = np.where(visible[None], scores, dt(-np.inf))
    if sinks is None:
        p = bl.softmax(scores)
    else:
        s = sinks[:, None, None]
        m = np.maximum(scores.max(axis=-1, keepdims=True), s)
        p = np.exp(scores - m)
        p = p / (p.sum(axis=-1, keepdims=True) + np.exp(s - m))
    return np.einsum("hqk,khd->qhd", p, vh).reshape(q.shape[0], -1)


class GqaDecoder(bl.Decoder):
    """Qwen3MoeAttention / Glm4MoeAttention.forward over the blocks.Decoder stack: q/k/v_proj
    (+ bias when attention_bias), viewed [n, heads, head_dim]; q_norm / k_norm (RMSNorm over
    head_dim per head, BEFORE RoPE; v not normed) when the layer has them; RoPE (gqa_common.rope,
    emb = cat(freqs, freqs)); causal attention through the KV cache with scaling head_dim^-0.5;
    o_proj (+ bias when loaded)."""

    def cos_sin(self, pos):
        return bl.cos_sin(pos, self.inv_freq, self.dt, self.attn_factor, duplicate=True)

    def load_attention(self, p):
        """input / post-attention norms and the q/k/v/o projections of layer prefix p."""
        c, W = self.c, self.wts
        H, Q, KV = c.hidden, c.n_heads * c.head_dim, c.n_kv * c.head_dim
        return {"in_ln": W.w(p + "input_layernorm.weight", [H]),
                "post_ln": W.w(p + "post_attention_layernorm.weight", [H]),
                "q": W.linear(p + "self_attn.q_proj.weight", Q, H),
                "k": W.linear(p + "self_attn.k_proj.weight", KV, H),
                "v": W.linear(p + "self_attn.v_proj.weight", KV, H),
                "o": W.linear(p + "self_attn.o_proj.weight", H, Q)}

    def load_optional(self, lw, on, key, items):
        """items (lw key, tensor name, shape): read when config flag `key` is on, refused when
        present while it is off."""
        for k, name, shape in items:
            if on:
                lw[k] = self.wts.w(name, shape)
            elif name in self.wts:
                raise ValueError(f"{name} present but {key} is false")

    def load_biases(self, lw, p, projs):
        c = self.c
        width = {"q": c.n_heads * c.head_dim, "k": c.n_kv * c.head_dim,
                 "v": c.n_kv * c.head_dim, "o": c.hidden}
        self.load_optional(lw, c.bias, "attention_bias",
                           [(n + "_b", p + f"self_attn.{n}_proj.bias", [width[n]]) for n in projs])

    def attention(self, l, lw, t, pos, cs, cache, kv_only=False):
        c = self.c
        n = t.shape[0]
        q, k, v = t @ lw["q"].T, t @ lw["k"].T, t @ lw["v"].T
        if "q_b" in lw:
            q, k, v = q + lw["q_b"], k + lw["k_b"], v + lw["v_b"]
        q = q.reshape(n, c.n_heads, c.head_dim)
        k = k.reshape(n, c.n_kv, c.head_dim)
        v = v.reshape(n, c.n_kv, c.head_dim)
        if "q_norm" in lw:
            q = self.norm(q, lw["q_norm"])
            k = self.norm(k, lw["k_norm"])
        q, k = rope(q, *cs), rope(k, *cs)
        ck, cv, cp = cache[l] = kv_append(cache.get(l), k, v, pos)
        if kv_only:
            return None
        visible = cp[None, :] <= pos[:, None]           # causal
        out = attend(q, ck, cv, visible, c.head_dim ** -0.5) @ lw["o"].T
        if "o_b" in lw:
            out = out + lw["o_b"]
        return out
