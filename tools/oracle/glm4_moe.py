#!/usr/bin/python3
"""Independent NumPy forward of glm4_moe (float32, or float64 with --f64), from the HF folder.

Covers zai-org/GLM-4.5, GLM-4.5-Air and GLM-4.6 (model_type glm4_moe, Glm4MoeForCausalLM).

Owns: the reference math for the glm4_moe family (bf16 checkpoints), written from the upstream
code, never from this project's C sources. Lines followed:
  - huggingface/transformers src/transformers/models/glm4_moe/modeling_glm4_moe.py:
    Glm4MoeRMSNorm.forward (float32, x * rsqrt(mean(x^2) + eps), then weight * x; eps =
    rms_norm_eps for every norm, q_norm / k_norm included); Glm4MoeAttention.__init__/forward
    (head_dim = config.head_dim, else hidden / heads; q/k/v_proj with a bias when
    attention_bias, o_proj never (bias=False); q/k/v viewed [.., heads, head_dim]; q_norm /
    k_norm = RMSNorm over head_dim per head, only when use_qk_norm, BEFORE RoPE; v not normed;
    scaling = head_dim^-0.5 (the full head_dim, not the rotary part)); rotate_half
    (cat(-x2, x1) of the two halves) and apply_rotary_pos_emb (rotary_dim = cos.shape[-1];
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]; q_rot*cos + rotate_half(q_rot)
    *sin; cat(q_embed, q_pass); the same for k) - the GPT-NeoX half-split form on the first
    rotary_dim channels (the modular file imports it from gpt_neox), NOT the interleaved form of
    the dense glm4 family; Glm4MoeRotaryEmbedding + compute_default_rope_parameters (dim =
    int(head_dim * partial_rotary_factor), inv_freq = 1 / theta^(arange(0, dim, 2) / dim),
    emb = cat(freqs, freqs), cos/sin in float32, attention_scaling 1); repeat_kv /
    eager_attention_forward (q head h reads kv head h // (heads / kv_heads), causal mask,
    softmax in float32); Glm4MoeMLP (down(silu(gate(x)) * up(x)), no biases);
    Glm4MoeTopkRouter.forward (router logits = x.float() @ weight.float().T);
    Glm4MoeMoE.route_tokens_to_experts (= the 4.55 Glm4MoeTopkRouter.get_topk_indices: scores
    = sigmoid(logits); scores_for_choice = scores + e_score_correction_bias; group score = sum
    of the top-2 scores_for_choice in each of n_group groups of n_routed_experts // n_group;
    keep the topk_group best groups; experts outside them masked_fill(0.0) - 0.0, not -inf;
    top-k of the masked scores; weights = scores (no bias) gathered there, / (sum + 1e-20) when
    norm_topk_prob, * routed_scaling_factor); Glm4MoeMoE.forward (routed sum, each expert a
    Glm4MoeMLP(moe_intermediate_size), plus shared_experts = Glm4MoeMLP(moe_intermediate_size
    * n_shared_experts) on the same input); Glm4MoeDecoderLayer (pre-norm residuals;
    Glm4MoeMoE for layer_idx >= first_k_dense_replace, else Glm4MoeMLP(intermediate_size));
    Glm4MoeModel (layers[:num_hidden_layers], final norm; _keys_to_ignore_on_load_unexpected
    names the MTP layer model.layers.46.* / .92.*: the num_nextn_predict_layers extra layers
    model.layers.<num_hidden_layers + i>.* are not part of the model; ignored here for any
    layer count and counted); Glm4MoeForCausalLM (lm_head, tied to embed_tokens when
    tie_word_embeddings).
  - configuration_glm4_moe.py: defaults (partial_rotary_factor 0.5, rms_norm_eps 1e-5,
    rope_theta 10000, attention_bias False, use_qk_norm False, n_group 1, topk_group 1,
    n_shared_experts 1, routed_scaling_factor 1.0, first_k_dense_replace 1, norm_topk_prob
    True). rope_scaling: only null / "default" (no GLM-4.5/4.6 release sets it); anything else
    is refused.

Dump names (--dump): L{l}.attn_out (residual after attention), L{l}.moe_out (residual at the
end of layer l, dense layers included), for MoE layers L{l}.router_logits f32 [n, n_routed]
(raw, before sigmoid), L{l}.topk_ids i32 [n, k] and L{l}.topk_w f32 [n, k] (final weights incl.
routed_scaling_factor); final_norm, logits. topk_ids order (as the deepseek_v3 oracle, same
router): descending masked score + bias, ties to the lower id (transformers uses topk
sorted=False: same set, order unspecified). When a 0.0-filled (group-masked) expert is
selected - only possible if some kept expert's score + bias is below 0 - a warning is printed,
since which of the tied zeros upstream picks is then unspecified.

The forward keeps its own KV cache so greedy decoding feeds one token per step; the prompt
logits come from one causal pass over the whole prompt (or --chunk N tokens at a time through
the cache).

CLI:
  glm4_moe.py MODEL_DIR --prompt-ids FILE [--out logits.f32] [--greedy N --greedy-out ids.txt]
              [--dump DIR] [--f64] [--stats] [--chunk N]
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dump import top2_margin, write_dump  # noqa: E402
from safetensors_np import ModelFolder  # noqa: E402


class Config:
    """Every dimension from config.json (transformers Glm4MoeConfig key names and defaults)."""

    def __init__(self, cfg):
        self.raw = cfg
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        self.head_dim = cfg.get("head_dim") or self.hidden // self.n_heads
        self.partial = float(cfg.get("partial_rotary_factor", 0.5))
        self.rot_dim = int(self.head_dim * self.partial)
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.rope_scaling = cfg.get("rope_scaling") or None
        self.bias = bool(cfg.get("attention_bias", False))
        self.qk_norm = bool(cfg.get("use_qk_norm", False))
        self.tie = bool(cfg.get("tie_word_embeddings", False))
        self.inter = cfg.get("intermediate_size", 10944)
        self.moe_inter = cfg.get("moe_intermediate_size", 1408)
        self.n_routed = cfg.get("n_routed_experts", 128)
        self.n_shared = cfg.get("n_shared_experts", 1) or 0
        self.top_k = cfg.get("num_experts_per_tok", 8)
        self.n_group = cfg.get("n_group", 1) or 1
        self.topk_group = cfg.get("topk_group", 1) or 1
        self.norm_topk = bool(cfg.get("norm_topk_prob", True))
        self.rsf = float(cfg.get("routed_scaling_factor", 1.0))
        self.first_dense = cfg.get("first_k_dense_replace", 1)
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise NotImplementedError(f"hidden_act {act}")
        if cfg.get("quantization_config"):
            raise NotImplementedError("quantization_config (only bf16/f16/f32 glm4_moe "
                                      "checkpoints are implemented)")
        rs = self.rope_scaling
        if rs is not None and rs.get("rope_type", rs.get("type", "default")) != "default":
            raise NotImplementedError(f"rope_scaling {rs} (only null is supported)")
        if self.n_heads % self.n_kv:
            raise ValueError("num_attention_heads not a multiple of num_key_value_heads")
        if self.rot_dim % 2 or not 0 < self.rot_dim <= self.head_dim:
            raise ValueError(f"rotary dim int(head_dim * partial_rotary_factor) = {self.rot_dim} "
                             f"must be even and in (0, head_dim]")
        if self.n_routed:
            if self.n_routed % self.n_group:
                raise ValueError("n_routed_experts not a multiple of n_group")
            gs = self.n_routed // self.n_group
            if gs < 2:  # upstream's .topk(2, dim=-1) over a group needs 2 experts
                raise ValueError("n_routed_experts // n_group < 2 (upstream's top-2 group "
                                 "score is undefined)")
            if not (0 < self.topk_group <= self.n_group
                    and 0 < self.top_k <= self.topk_group * gs):
                raise ValueError("num_experts_per_tok exceeds the experts of topk_group groups")

    def is_moe(self, l):
        # Glm4MoeDecoderLayer.__init__
        return self.n_routed > 0 and l >= self.first_dense


class Glm4Moe:
    def __init__(self, model_dir, dtype=np.float32):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.c = c = Config(json.load(f))
        self.dt = dtype
        self.st = ModelFolder(model_dir)
        self.used = set()
        self.ignored = set()
        # compute_default_rope_parameters, float32 like torch
        dim = c.rot_dim
        self.inv_freq = (np.float32(1.0) / np.power(
            np.float32(c.theta), np.arange(0, dim, 2, dtype=np.int64).astype(np.float32)
            / np.float32(dim))).astype(np.float32)
        # the MTP layer(s): model.layers.N.* with N >= num_hidden_layers
        for name in self.st.keys():
            mt = re.match(r"model\.layers\.(\d+)\.", name)
            if mt and int(mt.group(1)) >= c.n_layers:
                self.ignored.add(name)
        n_moe = sum(c.is_moe(l) for l in range(c.n_layers))
        exp_bytes = n_moe * c.n_routed * 3 * c.moe_inter * c.hidden * np.dtype(dtype).itemsize
        self._cache_experts = exp_bytes <= (1 << 30)  # decode once when it fits in 1 GiB
        self._expert_cache = {}
        self.route_infos = []

    # --- weights ---------------------------------------------------------------------------
    def w(self, name, shape=None):
        """A tensor widened exactly to the compute dtype (bf16 / f16 / f32 stored)."""
        info = self.st.info(name)
        if info["dtype"] not in ("BF16", "F16", "F32", "F64"):
            raise ValueError(f"{name}: dtype {info['dtype']} (want BF16/F16/F32)")
        if shape is not None and list(info["shape"]) != list(shape):
            raise ValueError(f"{name}: shape {info['shape']}, expected {list(shape)}")
        self.used.add(name)
        return self.st.get(name).astype(self.dt)

    def check(self, name, shape):
        info = self.st.info(name)  # KeyError when missing
        if list(info["shape"]) != list(shape):
            raise ValueError(f"{name}: shape {info['shape']}, expected {list(shape)}")
        if info["dtype"] not in ("BF16", "F16", "F32", "F64"):
            raise ValueError(f"{name}: dtype {info['dtype']} (want BF16/F16/F32)")
        self.used.add(name)

    def expert(self, l, e, proj):
        key = (l, e, proj)
        if key in self._expert_cache:
            return self._expert_cache[key]
        c = self.c
        shape = [c.hidden, c.moe_inter] if proj == "down_proj" else [c.moe_inter, c.hidden]
        wt = self.w(f"model.layers.{l}.mlp.experts.{e}.{proj}.weight", shape)
        if self._cache_experts:
            self._expert_cache[key] = wt
        return wt

    def load_layer(self, l):
        c = self.c
        p = f"model.layers.{l}."
        H, D, Q, KV = c.hidden, c.head_dim, c.n_heads * c.head_dim, c.n_kv * c.head_dim
        lw = {"in_ln": self.w(p + "input_layernorm.weight", [H]),
              "post_ln": self.w(p + "post_attention_layernorm.weight", [H]),
              "q": self.w(p + "self_attn.q_proj.weight", [Q, H]),
              "k": self.w(p + "self_attn.k_proj.weight", [KV, H]),
              "v": self.w(p + "self_attn.v_proj.weight", [KV, H]),
              "o": self.w(p + "self_attn.o_proj.weight", [H, Q])}
        for n, width in (("q", Q), ("k", KV), ("v", KV)):
            name = p + f"self_attn.{n}_proj.bias"
            if c.bias:
                lw[n + "_b"] = self.w(name, [width])
            elif name in self.st:
                raise ValueError(f"{name} present but attention_bias is false")
        if p + "self_attn.o_proj.bias" in self.st:
            raise ValueError(f"{p}self_attn.o_proj.bias present (o_proj has no bias upstream)")
        for n in ("q_norm", "k_norm"):
            name = p + f"self_attn.{n}.weight"
            if c.qk_norm:
                lw[n] = self.w(name, [D])
            elif name in self.st:
                raise ValueError(f"{name} present but use_qk_norm is false")
        if c.is_moe(l):
            E = c.n_routed
            lw["gate"] = self.w(p + "mlp.gate.weight", [E, H])
            lw["bias"] = self.w(p + "mlp.gate.e_score_correction_bias", [E])
            # every expert tensor must exist with its shape, even if no token routes to it
            for e in range(E):
                for proj, shape in (("gate_proj", [c.moe_inter, H]),
                                    ("up_proj", [c.moe_inter, H]),
                                    ("down_proj", [H, c.moe_inter])):
                    self.check(p + f"mlp.experts.{e}.{proj}.weight", shape)
            if c.n_shared:
                si = c.moe_inter * c.n_shared
                lw["sh_gate"] = self.w(p + "mlp.shared_experts.gate_proj.weight", [si, H])
                lw["sh_up"] = self.w(p + "mlp.shared_experts.up_proj.weight", [si, H])
                lw["sh_down"] = self.w(p + "mlp.shared_experts.down_proj.weight", [H, si])
        else:
            lw["mlp_gate"] = self.w(p + "mlp.gate_proj.weight", [c.inter, H])
            lw["mlp_up"] = self.w(p + "mlp.up_proj.weight", [c.inter, H])
            lw["mlp_down"] = self.w(p + "mlp.down_proj.weight", [H, c.inter])
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

    def cos_sin(self, pos):
        """[n, rot_dim] cos/sin of cat(freqs, freqs); float32 like torch (float64 with --f64)."""
        if self.dt == np.float32:
            freqs = pos.astype(np.float32)[:, None] * self.inv_freq[None, :]
        else:
            freqs = pos.astype(self.dt)[:, None] * self.inv_freq.astype(self.dt)[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)
        return np.cos(emb).astype(self.dt), np.sin(emb).astype(self.dt)

    def rope(self, x, cs):
        """apply_rotary_pos_emb on x [n, heads, head_dim]: the first rot_dim channels rotated
        with rotate_half (halves of the rotary part), the rest passed through."""
        cos, sin = cs[0][:, None, :], cs[1][:, None, :]
        r = cos.shape[-1]
        x_rot, x_pass = x[..., :r], x[..., r:]
        h = r // 2
        rot_half = np.concatenate([-x_rot[..., h:], x_rot[..., :h]], axis=-1)
        return np.concatenate([x_rot * cos + rot_half * sin, x_pass], axis=-1)

    def attention(self, l, lw, t, pos, cs, cache):
        c = self.c
        n = t.shape[0]
        q, k, v = t @ lw["q"].T, t @ lw["k"].T, t @ lw["v"].T
        if c.bias:
            q, k, v = q + lw["q_b"], k + lw["k_b"], v + lw["v_b"]
        q = q.reshape(n, c.n_heads, c.head_dim)
        k = k.reshape(n, c.n_kv, c.head_dim)
        v = v.reshape(n, c.n_kv, c.head_dim)
        if c.qk_norm:
            q = self.rmsnorm(q, lw["q_norm"])
            k = self.rmsnorm(k, lw["k_norm"])
        q, k = self.rope(q, cs), self.rope(k, cs)
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
        return attn @ lw["o"].T                         # o_proj: no bias

    def swiglu(self, x, wg, wu, wd):
        g = x @ wg.T
        return ((g / (1 + np.exp(-g))) * (x @ wu.T)) @ wd.T   # silu(gate) * up -> down

    @staticmethod
    def topk_desc(x, k):
        """Indices of the k largest per row, descending; ties: the lower index first."""
        return np.argsort(-x, axis=-1, kind="stable")[:, :k]

    def route(self, g, bias):
        """Glm4MoeMoE.route_tokens_to_experts on raw router logits g [n, E] ->
        (ids [n, k], weights [n, k], info for --stats)."""
        c = self.c
        dt = g.dtype.type
        scores = 1 / (1 + np.exp(-g))                              # sigmoid
        sfc = scores + bias                                        # selection only
        n, E = sfc.shape
        gs = E // c.n_group
        grouped = sfc.reshape(n, c.n_group, gs)
        group_scores = (-np.sort(-grouped, axis=-1)[..., :2]).sum(axis=-1)  # top-2 sum
        gidx = self.topk_desc(group_scores, c.topk_group)
        keep = np.zeros((n, c.n_group), dtype=bool)
        np.put_along_axis(keep, gidx, True, axis=1)
        keep_e = np.repeat(keep, gs, axis=1)
        masked = np.where(keep_e, sfc, dt(0.0))                    # masked_fill(~mask, 0.0)
        idx = self.topk_desc(masked, c.top_k)
        w = np.take_along_axis(scores, idx, axis=1)
        if c.norm_topk:
            w = w / (w.sum(axis=-1, keepdims=True) + dt(1e-20))
        w = w * dt(c.rsf)
        picked_masked = ~np.take_along_axis(keep_e, idx, axis=1)
        if picked_masked.any():
            print(f"warning: {int(picked_masked.any(axis=1).sum())} token(s) select a "
                  f"group-masked (0.0-filled) expert: upstream's choice among the tied zeros "
                  f"is unspecified", file=sys.stderr)
        info = {"idx_nogroup": self.topk_desc(sfc, c.top_k),
                "idx_nobias": self.topk_desc(np.where(keep_e, scores, dt(0.0)), c.top_k),
                "idx_neg_inf_fill": self.topk_desc(np.where(keep_e, sfc, dt(-np.inf)), c.top_k),
                "group_scores": group_scores, "masked": masked}
        return idx, w, info

    def moe(self, l, lw, t, dump):
        c = self.c
        g = t @ lw["gate"].T                                   # router logits [n, E]
        idx, wts, info = self.route(g, lw["bias"])
        out = np.zeros_like(t)
        for e in np.unique(idx):
            rows, slot = np.nonzero(idx == e)
            y = self.swiglu(t[rows], self.expert(l, e, "gate_proj"),
                            self.expert(l, e, "up_proj"), self.expert(l, e, "down_proj"))
            out[rows] += y * wts[rows, slot][:, None]
        if c.n_shared:
            out = out + self.swiglu(t, lw["sh_gate"], lw["sh_up"], lw["sh_down"])
        if dump is not None:
            dump[f"L{l}.router_logits"] = g
            dump[f"L{l}.topk_ids"] = idx.astype(np.int32)
            dump[f"L{l}.topk_w"] = wts
            self.route_infos.append((l, info))
        return out

    def forward(self, ids, pos0, cache, dump=None):
        """Runs tokens `ids` at positions pos0.. through the model, extending `cache`."""
        layers = self.weights()
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.arange(pos0, pos0 + len(ids), dtype=np.int64)
        cs = self.cos_sin(pos)
        x = self._embed[ids]
        for l, lw in enumerate(layers):
            x = x + self.attention(l, lw, self.rmsnorm(x, lw["in_ln"]), pos, cs, cache)
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

    def routing_stats(self, infos):
        c = self.c
        r = {"routings": 0, "group_limit_changed": 0, "bias_changed": 0,
             "neg_inf_fill_would_differ": 0}
        gaps, ggaps = [], []
        for _, inf in infos:
            sel = np.sort(self.topk_desc(inf["masked"], c.top_k), axis=1)
            r["routings"] += sel.shape[0]
            for k, alt in (("group_limit_changed", "idx_nogroup"), ("bias_changed", "idx_nobias"),
                           ("neg_inf_fill_would_differ", "idx_neg_inf_fill")):
                r[k] += int(np.sum(np.any(np.sort(inf[alt], 1) != sel, 1)))
            srt = -np.sort(-inf["masked"], axis=1)
            if c.top_k < srt.shape[1]:
                gaps.append(float(np.min(srt[:, c.top_k - 1] - srt[:, c.top_k])))
            gsrt = -np.sort(-inf["group_scores"], axis=1)
            if c.topk_group < gsrt.shape[1]:
                ggaps.append(float(np.min(gsrt[:, c.topk_group - 1] - gsrt[:, c.topk_group])))
        r["router_topk_boundary_gap_min"] = min(gaps, default=None)
        r["router_group_topk_boundary_gap_min"] = min(ggaps, default=None)
        return r


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
                    help="print margins, routing coverage and tensor accounting to stderr")
    a = ap.parse_args()

    with open(a.prompt_ids) as f:
        ids = [int(t) for t in f.read().split()]
    if not ids:
        sys.exit("empty prompt")
    try:
        m = Glm4Moe(a.model_dir, np.float64 if a.f64 else np.float32)
        m.weights()
    except (KeyError, ValueError, NotImplementedError) as e:
        sys.exit(f"error: {e}")
    if max(ids) >= m.c.vocab or min(ids) < 0:
        sys.exit("prompt id out of vocab range")
    cache = m.new_cache()
    dump = {} if (a.dump or a.stats) else None
    step = a.chunk if a.chunk > 0 else len(ids)
    parts, dparts = [], []
    for s in range(0, len(ids), step):
        d = {} if dump is not None else None
        parts.append(m.forward(ids[s:s + step], s, cache, d))
        dparts.append(d)
    logits = np.concatenate(parts)
    n_prompt_routes = len(m.route_infos)
    if dump is not None:
        for k in dparts[0]:
            dump[k] = np.concatenate([d[k] for d in dparts])
    if a.out:
        logits.astype("<f4").tofile(a.out)
    if a.dump:
        write_dump(a.dump, dump)
    greedy_margins = []
    if a.greedy:
        out = []
        row = logits[-1]
        for g in range(a.greedy):
            nxt = int(np.argmax(row))      # first maximum: the lowest id on ties
            out.append(nxt)
            greedy_margins.append(top2_margin(row[None])[0])
            if g + 1 < a.greedy:
                row = m.forward([nxt], len(ids) + g, cache, {} if a.stats else None)[-1]
        text = " ".join(map(str, out))
        if a.greedy_out:
            with open(a.greedy_out, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
    if a.stats:
        c = m.c
        moe_layers = [l for l in range(c.n_layers) if c.is_moe(l)]
        stats = {"max_abs_logit": float(np.abs(logits).max()),
                 "min_top1_top2_margin_prompt": float(top2_margin(logits).min()),
                 "min_top1_top2_margin_greedy": min(greedy_margins, default=None),
                 "moe_layers": moe_layers,
                 "routing_prompt": m.routing_stats(m.route_infos[:n_prompt_routes]),
                 "routing_all_calls": m.routing_stats(m.route_infos),
                 "distinct_experts_selected_prompt_per_layer": [
                     int(np.unique(dump[f"L{l}.topk_ids"]).size) for l in moe_layers],
                 "n_routed_experts": c.n_routed, "rotary_dim": c.rot_dim,
                 "tensors_in_checkpoint": len(m.st.keys()), "tensors_used": len(m.used),
                 "tensors_ignored": len(m.ignored)}
        print(json.dumps(stats), file=sys.stderr)
    if m.ignored:
        print(f"note: {len(m.ignored)} tensors ignored (MTP layer: model.layers."
              f"<n >= num_hidden_layers>.*, not part of the main model)", file=sys.stderr)
    unused = set(m.st.keys()) - m.used - m.ignored
    if unused:
        print(f"warning: {len(unused)} tensors unused: {sorted(unused)[:5]}", file=sys.stderr)


if __name__ == "__main__":
    main()
