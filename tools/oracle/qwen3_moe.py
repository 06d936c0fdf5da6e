#!/usr/bin/python3
"""Independent NumPy forward of Qwen3-MoE (float32, or float64 with --f64), from the HF folder.

Owns: the reference math for the qwen3_moe family (bf16 and block-FP8 checkpoints), written from
the upstream code, never from this project's C sources. Lines followed:
  - huggingface/transformers src/transformers/models/qwen3_moe/modeling_qwen3_moe.py:
    Qwen3MoeRMSNorm.forward (float32, x * rsqrt(mean(x^2) + eps), then weight * x);
    Qwen3MoeAttention.forward (q_proj/k_proj viewed [.., heads, head_dim], q_norm/k_norm =
    RMSNorm over head_dim per head BEFORE RoPE, v not normed; biases only if attention_bias;
    scaling head_dim^-0.5; o_proj from heads * head_dim); rotate_half / apply_rotary_pos_emb
    (q*cos + rotate_half(q)*sin, cos = cat(freqs, freqs).cos() * attention_scaling, float32);
    Qwen3MoeRotaryEmbedding + compute_default_rope_parameters (inv_freq = 1 / theta^(2i/dim));
    repeat_kv / eager_attention_forward (q head h reads kv head h // (heads / kv_heads), causal
    mask, softmax in float32); Qwen3MoeMLP (down(silu(gate(x)) * up(x)), no biases);
    Qwen3MoeSparseMoeBlock.forward (router logits = mlp.gate(x), softmax over ALL experts in
    float32, topk of the probabilities, divided by their sum when norm_topk_prob, each
    expert's output scaled by its weight and summed); Qwen3MoeDecoderLayer (pre-norm
    residuals; dense Qwen3MoeMLP(intermediate_size) on layers in mlp_only_layers or where
    (layer + 1) % decoder_sparse_step != 0, or when num_experts == 0); Qwen3MoeModel (final
    norm); Qwen3MoeForCausalLM (lm_head, tied to embed_tokens when tie_word_embeddings).
  - configuration_qwen3_moe.py: defaults (norm_topk_prob False, decoder_sparse_step 1,
    mlp_only_layers [], attention_bias False, rms_norm_eps 1e-6); sliding_window only when
    use_sliding_window (false in every release: refused here rather than guessed, since its
    per-layer meaning changed across transformers versions).
  - modeling_rope_utils.py: rope_scaling "linear" (inv_freq / factor) and "yarn"
    (_compute_yarn_parameters, incl. factor = max_position_embeddings /
    original_max_position_embeddings when the latter is given, and truncate); others refused.
  - FP8 (Qwen/Qwen3-*-FP8, transformers FineGrainedFP8 / DeepSeek weight_dequant): a linear
    stored F8_E4M3 with `<name>_scale_inv` [ceil(out/bo), ceil(in/bi)] dequantises to
    W[i][j] = e4m3(W[i][j]) * scale[i // bo][j // bi] (block = quantization_config
    .weight_block_size, edge blocks partial; scale F32, BF16 or F16 widened first). Weight-only:
    activations stay float32 (no dynamic activation quantisation).

The forward keeps its own KV cache so that greedy decoding feeds one token per step; the prompt
logits come from one causal pass over the whole prompt (or --chunk N tokens at a time through
the cache).

CLI:
  qwen3_moe.py MODEL_DIR --prompt-ids FILE [--out logits.f32] [--greedy N --greedy-out ids.txt]
               [--dump DIR] [--f64] [--stats] [--chunk N]
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


class Config:
    """Every dimension from config.json (transformers Qwen3MoeConfig key names and defaults)."""

    def __init__(self, cfg):
        self.raw = cfg
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        self.head_dim = cfg.get("head_dim") or self.hidden // self.n_heads
        self.n_experts = cfg.get("num_experts", 128)
        self.top_k = cfg.get("num_experts_per_tok", 8)
        self.moe_inter = cfg.get("moe_intermediate_size", 768)
        self.inter = cfg.get("intermediate_size", 6144)
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.tie = bool(cfg.get("tie_word_embeddings", False))
        self.norm_topk = bool(cfg.get("norm_topk_prob", False))
        self.sparse_step = cfg.get("decoder_sparse_step", 1)
        self.mlp_only = list(cfg.get("mlp_only_layers") or [])
        self.bias = bool(cfg.get("attention_bias", False))
        self.rope_scaling = cfg.get("rope_scaling") or None
        self.max_pos = cfg.get("max_position_embeddings", 32768)
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise NotImplementedError(f"hidden_act {act}")
        if cfg.get("use_sliding_window"):
            raise NotImplementedError("use_sliding_window true (no Qwen3-MoE release uses it)")
        if self.n_heads % self.n_kv:
            raise ValueError("num_attention_heads not a multiple of num_key_value_heads")
        q = cfg.get("quantization_config") or {}
        if q and q.get("quant_method") not in ("fp8", None):
            raise NotImplementedError(f"quant_method {q.get('quant_method')}")
        if q.get("fmt", "e4m3") != "e4m3":
            raise NotImplementedError(f"fp8 fmt {q.get('fmt')}")
        self.block = tuple(q.get("weight_block_size") or (128, 128))

    def is_moe(self, l):
        # Qwen3MoeDecoderLayer.__init__
        return (l not in self.mlp_only and self.n_experts > 0
                and (l + 1) % self.sparse_step == 0)


def rope_params(c):
    """(inv_freq float32 [head_dim/2], attention_scaling), float32 like torch."""
    dim = c.head_dim
    base = float(c.theta)
    pos_freqs = np.power(np.float32(base),
                         np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))
    inv = (np.float32(1.0) / pos_freqs).astype(np.float32)
    rs = c.rope_scaling
    rtype = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
    if rs is None or rtype == "default":
        return inv, 1.0
    if rtype == "linear":
        return (inv / np.float32(rs["factor"])).astype(np.float32), 1.0
    if rtype != "yarn":
        raise NotImplementedError(f"rope_type {rtype}")
    factor = float(rs["factor"])
    if "original_max_position_embeddings" in rs:
        orig = rs["original_max_position_embeddings"]
        factor = c.max_pos / orig
    else:
        orig = c.max_pos

    def get_mscale(scale, mscale=1.0):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attn = rs.get("attention_factor")
    if attn is None:
        ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
        attn = get_mscale(factor, ms) / get_mscale(factor, msa) if (ms and msa) \
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
    extrap = np.float32(1) - ramp
    inv_inter = np.float32(1) / (np.float32(factor) * pos_freqs)
    inv = inv_inter * (np.float32(1) - extrap) + inv * extrap
    return inv.astype(np.float32), float(attn)


class Qwen3Moe:
    def __init__(self, model_dir, dtype=np.float32):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.c = Config(json.load(f))
        self.dt = dtype
        self.st = ModelFolder(model_dir)
        self.used = set()
        self.ignored = set()
        self.inv_freq, self.attn_scaling = rope_params(self.c)
        self.n_fp8 = 0
        c = self.c
        n_moe = sum(c.is_moe(l) for l in range(c.n_layers))
        exp_bytes = n_moe * c.n_experts * 3 * c.moe_inter * c.hidden * np.dtype(dtype).itemsize
        self._cache_experts = exp_bytes <= (1 << 30)  # decode once when it fits in 1 GiB
        self._expert_cache = {}

    # --- weights ---------------------------------------------------------------------------
    def w(self, name, shape=None):
        """A plain (unquantised) tensor, widened exactly."""
        info = self.st.info(name)
        if info["dtype"].startswith("F8_"):
            raise ValueError(f"{name}: {info['dtype']} where an unquantised tensor is expected")
        if name + "_scale_inv" in self.st:
            raise ValueError(f"{name}: has a _scale_inv but is not a quantised linear")
        if shape is not None and list(info["shape"]) != list(shape):
            raise ValueError(f"{name}: shape {info['shape']}, expected {list(shape)}")
        self.used.add(name)
        return self.st.get(name).astype(self.dt)

    def linear(self, name, rows, cols):
        """[out, in] weight of a linear: bf16/f32 as stored, or F8_E4M3 x block scale."""
        info = self.st.info(name)
        if list(info["shape"]) != [rows, cols]:
            raise ValueError(f"{name}: shape {info['shape']}, expected {[rows, cols]}")
        sname = name + "_scale_inv"
        if sname not in self.st:
            if info["dtype"].startswith("F8_"):
                raise ValueError(f"{name}: {info['dtype']} without {sname}")
            self.used.add(name)
            return self.st.get(name).astype(self.dt)
        if info["dtype"] != "F8_E4M3":
            raise ValueError(f"{name}: {info['dtype']} with a weight_scale_inv (want F8_E4M3)")
        bo, bi = self.c.block
        want = [-(-rows // bo), -(-cols // bi)]
        sinfo = self.st.info(sname)
        if list(sinfo["shape"]) != want:
            raise ValueError(f"{sname}: shape {sinfo['shape']}, expected {want} "
                             f"(block {bo}x{bi})")
        if sinfo["dtype"] not in ("F32", "BF16", "F16"):
            raise ValueError(f"{sname}: scale dtype {sinfo['dtype']}")
        self.used.update((name, sname))
        self.n_fp8 += 1
        codes = self.st.get(name)                       # float32 via the e4m3fn table
        if np.isnan(codes).any():
            raise ValueError(f"{name}: NaN fp8 code")
        scale = self.st.get(sname).astype(self.dt)
        full = np.repeat(np.repeat(scale, bo, axis=0), bi, axis=1)[:rows, :cols]
        return codes.astype(self.dt) * full

    def expert(self, l, e, proj):
        key = (l, e, proj)
        if key in self._expert_cache:
            return self._expert_cache[key]
        c = self.c
        rows, cols = (c.hidden, c.moe_inter) if proj == "down_proj" else (c.moe_inter, c.hidden)
        wt = self.linear(f"model.layers.{l}.mlp.experts.{e}.{proj}.weight", rows, cols)
        if self._cache_experts:
            self._expert_cache[key] = wt
        return wt

    def load_layer(self, l):
        c = self.c
        p = f"model.layers.{l}."
        H, D, Q, KV = c.hidden, c.head_dim, c.n_heads * c.head_dim, c.n_kv * c.head_dim
        lw = {"in_ln": self.w(p + "input_layernorm.weight", [H]),
              "post_ln": self.w(p + "post_attention_layernorm.weight", [H]),
              "q": self.linear(p + "self_attn.q_proj.weight", Q, H),
              "k": self.linear(p + "self_attn.k_proj.weight", KV, H),
              "v": self.linear(p + "self_attn.v_proj.weight", KV, H),
              "o": self.linear(p + "self_attn.o_proj.weight", H, Q),
              "q_norm": self.w(p + "self_attn.q_norm.weight", [D]),
              "k_norm": self.w(p + "self_attn.k_norm.weight", [D])}
        for n, width in (("q", Q), ("k", KV), ("v", KV), ("o", H)):
            name = p + f"self_attn.{n}_proj.bias"
            if c.bias:
                lw[n + "_b"] = self.w(name, [width])
            elif name in self.st:
                raise ValueError(f"{name} present but attention_bias is false")
        if c.is_moe(l):
            lw["gate"] = self.w(p + "mlp.gate.weight", [c.n_experts, H])
            # every expert tensor must exist with its shape, even if no token routes to it
            for e in range(c.n_experts):
                for proj, shape in (("gate_proj", [c.moe_inter, H]), ("up_proj", [c.moe_inter, H]),
                                    ("down_proj", [H, c.moe_inter])):
                    name = p + f"mlp.experts.{e}.{proj}.weight"
                    if list(self.st.info(name)["shape"]) != shape:
                        raise ValueError(f"{name}: shape {self.st.info(name)['shape']}, "
                                         f"expected {shape}")
                    if self.st.info(name)["dtype"] == "F8_E4M3":
                        bo, bi = c.block
                        want = [-(-shape[0] // bo), -(-shape[1] // bi)]
                        got = self.st.info(name + "_scale_inv")["shape"]  # KeyError if missing
                        if list(got) != want:
                            raise ValueError(f"{name}_scale_inv: shape {got}, expected {want}")
                        self.used.add(name + "_scale_inv")
                    self.used.add(name)
        else:
            lw["mlp_gate"] = self.linear(p + "mlp.gate_proj.weight", c.inter, H)
            lw["mlp_up"] = self.linear(p + "mlp.up_proj.weight", c.inter, H)
            lw["mlp_down"] = self.linear(p + "mlp.down_proj.weight", H, c.inter)
        return lw

    def weights(self):
        if not hasattr(self, "_layers"):
            c = self.c
            self._layers = [self.load_layer(l) for l in range(c.n_layers)]
            self._embed = self.w("model.embed_tokens.weight", [c.vocab, c.hidden])
            self._norm = self.w("model.norm.weight", [c.hidden])
            if c.tie:
                self._head = self._embed
                if "lm_head.weight" in self.st:   # tied: the stored copy is not read
                    self.ignored.add("lm_head.weight")
            else:
                self._head = self.w("lm_head.weight", [c.vocab, c.hidden])
        return self._layers

    # --- blocks ----------------------------------------------------------------------------
    def rmsnorm(self, x, wt):
        var = np.mean(x * x, axis=-1, keepdims=True)
        return wt * (x / np.sqrt(var + self.dt(self.c.eps)))

    def rope(self, x, pos):
        """x [n, heads, d]: x*cos + rotate_half(x)*sin, cos/sin computed in float32."""
        if self.dt == np.float32:
            freqs = pos.astype(np.float32)[:, None] * self.inv_freq[None, :]
            emb = np.concatenate([freqs, freqs], axis=-1)
            cos = np.cos(emb) * np.float32(self.attn_scaling)
            sin = np.sin(emb) * np.float32(self.attn_scaling)
        else:
            freqs = pos.astype(self.dt)[:, None] * self.inv_freq.astype(self.dt)[None, :]
            emb = np.concatenate([freqs, freqs], axis=-1)
            cos = np.cos(emb) * self.attn_scaling
            sin = np.sin(emb) * self.attn_scaling
        cos = cos.astype(self.dt)[:, None, :]
        sin = sin.astype(self.dt)[:, None, :]
        h = x.shape[-1] // 2
        rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
        return x * cos + rot * sin

    def attention(self, l, lw, t, pos, cache):
        c = self.c
        n = t.shape[0]
        q, k, v = t @ lw["q"].T, t @ lw["k"].T, t @ lw["v"].T
        if c.bias:
            q, k, v = q + lw["q_b"], k + lw["k_b"], v + lw["v_b"]
        q = self.rmsnorm(q.reshape(n, c.n_heads, c.head_dim), lw["q_norm"])
        k = self.rmsnorm(k.reshape(n, c.n_kv, c.head_dim), lw["k_norm"])
        v = v.reshape(n, c.n_kv, c.head_dim)
        q, k = self.rope(q, pos), self.rope(k, pos)
        ck, cv, cp = cache[l]
        ck = np.concatenate([ck, k]) if ck is not None else k
        cv = np.concatenate([cv, v]) if cv is not None else v
        cp = np.concatenate([cp, pos]) if cp is not None else pos
        cache[l] = (ck, cv, cp)
        visible = cp[None, :] <= pos[:, None]           # causal
        rep = c.n_heads // c.n_kv
        kh = np.repeat(ck, rep, axis=1)                 # q head h -> kv head h // rep
        vh = np.repeat(cv, rep, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, kh) * self.dt(c.head_dim ** -0.5)
        scores = np.where(visible[None], scores, self.dt(-np.inf))
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", p, vh).reshape(n, c.n_heads * c.head_dim)
        out = attn @ lw["o"].T
        if c.bias:
            out = out + lw["o_b"]
        return out

    def swiglu(self, x, wg, wu, wd):
        g = x @ wg.T
        return ((g / (1 + np.exp(-g))) * (x @ wu.T)) @ wd.T   # silu(gate) * up -> down

    def moe(self, l, lw, t, dump):
        c = self.c
        g = t @ lw["gate"].T                                   # router logits [n, E]
        pr = np.exp(g - g.max(axis=-1, keepdims=True))
        pr = pr / pr.sum(axis=-1, keepdims=True)               # softmax over ALL experts
        # torch.topk(sorted=True): descending; stable sort keeps the lower index first on ties
        idx = np.argsort(-pr, axis=-1, kind="stable")[:, :c.top_k]
        wts = np.take_along_axis(pr, idx, axis=-1)
        if c.norm_topk:
            wts = wts / wts.sum(axis=-1, keepdims=True)
        out = np.zeros_like(t)
        for e in np.unique(idx):
            rows, slot = np.nonzero(idx == e)
            y = self.swiglu(t[rows], self.expert(l, e, "gate_proj"),
                            self.expert(l, e, "up_proj"), self.expert(l, e, "down_proj"))
            out[rows] += y * wts[rows, slot][:, None]
        if dump is not None:
            dump[f"L{l}.router_logits"] = g
            dump[f"L{l}.topk_ids"] = idx.astype(np.int32)
            dump[f"L{l}.topk_w"] = wts
        return out

    def forward(self, ids, pos0, cache, dump=None):
        """Runs tokens `ids` at positions pos0.. through the model, extending `cache`."""
        layers = self.weights()
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.arange(pos0, pos0 + len(ids), dtype=np.int64)
        x = self._embed[ids]
        for l, lw in enumerate(layers):
            x = x + self.attention(l, lw, self.rmsnorm(x, lw["in_ln"]), pos, cache)
            if dump is not None:
                dump[f"L{l}.attn_out"] = x
            h = self.rmsnorm(x, lw["post_ln"])
            if "gate" in lw:
                x = x + self.moe(l, lw, h, dump)
            else:
                x = x + self.swiglu(h, lw["mlp_gate"], lw["mlp_up"], lw["mlp_down"])
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
    ap.add_argument("--chunk", type=int, default=0,
                    help="feed the prompt N tokens at a time through the KV cache (0: one pass)")
    ap.add_argument("--stats", action="store_true",
                    help="print margins (top1-top2 logit, router top-k boundary) to stderr")
    a = ap.parse_args()

    with open(a.prompt_ids) as f:
        ids = [int(t) for t in f.read().split()]
    if not ids:
        sys.exit("empty prompt")
    try:
        m = Qwen3Moe(a.model_dir, np.float64 if a.f64 else np.float32)
    except (KeyError, ValueError, NotImplementedError) as e:
        sys.exit(f"error: {e}")
    if max(ids) >= m.c.vocab or min(ids) < 0:
        sys.exit("prompt id out of vocab range")
    cache = m.new_cache()
    dump = {} if (a.dump or a.stats) else None
    step = a.chunk if a.chunk > 0 else len(ids)
    try:
        parts, dparts = [], []
        for s in range(0, len(ids), step):
            d = {} if dump is not None else None
            parts.append(m.forward(ids[s:s + step], s, cache, d))
            dparts.append(d)
        logits = np.concatenate(parts)
        if dump is not None:
            for k in dparts[0]:
                dump[k] = np.concatenate([d[k] for d in dparts])
    except (KeyError, ValueError) as e:
        sys.exit(f"error: {e}")
    if a.out:
        logits.astype("<f4").tofile(a.out)
    if a.dump:
        write_dump(a.dump, dump)
    greedy_margins, greedy_dumps = [], []
    if a.greedy:
        out = []
        row = logits[-1]
        for step in range(a.greedy):
            nxt = int(np.argmax(row))
            out.append(nxt)
            greedy_margins.append(top2_margin(row[None])[0])
            if step + 1 < a.greedy:
                d = {} if a.stats else None
                row = m.forward([nxt], len(ids) + step, cache, d)[-1]
                if d is not None:
                    greedy_dumps.append(d)
        text = " ".join(map(str, out))
        if a.greedy_out:
            with open(a.greedy_out, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
    if a.stats:
        c = m.c
        moe_layers = [l for l in range(c.n_layers) if c.is_moe(l)]
        def router_gaps(dumps):
            """min gap between the k-th and (k+1)-th router logit / softmax probability"""
            lg, pg = [], []
            for d in dumps:
                for l in moe_layers:
                    g = np.sort(d[f"L{l}.router_logits"], axis=1)[:, ::-1]
                    p = np.exp(g - g[:, :1])
                    p /= p.sum(axis=1, keepdims=True)
                    k = c.top_k
                    lg.append(float(np.min(g[:, k - 1] - g[:, k])))
                    pg.append(float(np.min(p[:, k - 1] - p[:, k])))
            return min(lg, default=None), min(pg, default=None)

        full = c.top_k < c.n_experts
        gl, gp = router_gaps([dump]) if full else (None, None)
        ggl, ggp = router_gaps(greedy_dumps) if full else (None, None)
        stats = {"max_abs_logit": float(np.abs(logits).max()),
                 "min_top1_top2_margin_prompt": float(top2_margin(logits).min()),
                 "min_top1_top2_margin_greedy": min(greedy_margins, default=None),
                 "router_topk_boundary_gap_min_logit": gl,
                 "router_topk_boundary_gap_min_prob": gp,
                 "router_topk_boundary_gap_min_logit_greedy": ggl,
                 "router_topk_boundary_gap_min_prob_greedy": ggp,
                 "moe_layers": moe_layers,
                 "distinct_experts_per_layer": [
                     int(np.unique(dump[f"L{l}.topk_ids"]).size) for l in moe_layers],
                 "n_experts": c.n_experts,
                 "fp8_linears_dequantised": m.n_fp8}
        print(json.dumps(stats), file=sys.stderr)
    unused = set(m.st.keys()) - m.used - m.ignored
    if unused:
        print(f"warning: {len(unused)} tensors unused: {sorted(unused)[:5]}", file=sys.stderr)


if __name__ == "__main__":
    main()
