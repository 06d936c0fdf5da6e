#!/usr/bin/python3
"""Independent NumPy forward of DeepSeek-V3 (float32, or float64 with --f64), from the HF folder.

Owns: the reference math for the deepseek_v3 family (released block-FP8 checkpoints, and bf16
ones), written from the upstream code, never from this project's C sources. Lines followed:
  - huggingface/transformers src/transformers/models/deepseek_v3/modeling_deepseek_v3.py:
    DeepseekV3RMSNorm (float32, eps rms_norm_eps for the layer/final norms, default 1e-6 for
    q_a_layernorm / kv_a_layernorm); DeepseekV3Attention (MLA, see mla_common.mla: q_a_proj ->
    q_a_layernorm -> q_b_proj, or q_proj when q_lora_rank is null; kv_a_proj_with_mqa split
    [kv_lora_rank | qk_rope_head_dim]; kv_a_layernorm; kv_b_proj -> [k_nope | v] per head;
    k_rot shared by all heads; rope_interleave (default true) -> apply_rotary_pos_emb_interleave;
    self.scaling = qk_head_dim^-0.5 * yarn_get_mscale(factor, mscale_all_dim)^2 when
    rope_scaling has a non-zero mscale_all_dim); DeepseekV3RotaryEmbedding +
    modeling_rope_utils._compute_yarn_parameters (rope dim = qk_rope_head_dim = config.head_dim;
    cos/sin times attention_factor = get_mscale(factor, mscale)/get_mscale(factor,
    mscale_all_dim)); DeepseekV3TopkRouter (router logits = x @ gate.weight.T in float32,
    scores = sigmoid, scores_for_choice = scores + e_score_correction_bias (selection only),
    group score = sum of the top-2 scores_for_choice in each of n_group groups, keep the
    topk_group best groups, top-k experts among them, weights = unbiased scores gathered,
    / (sum + 1e-20) when norm_topk_prob, * routed_scaling_factor); DeepseekV3MoE (routed sum +
    shared_experts MLP with moe_intermediate_size * n_shared_experts on the same input);
    DeepseekV3DecoderLayer (dense DeepseekV3MLP(intermediate_size) for layer <
    first_k_dense_replace); DeepseekV3Model._keys_to_ignore_on_load_unexpected (the MTP layer
    model.layers.<num_hidden_layers>.* is not part of the main model: ignored and counted).
  - deepseek-ai/DeepSeek-V3 inference/model.py (the official code): Gate.forward (same routing,
    excluded groups masked with -inf - used here - where transformers masks with 0.0; both
    select the same experts while every biased score is > 0; --stats counts the tokens where
    they would differ; torch.topk sorted=True order); MLA.forward attn_impl "absorb" for
    --absorbed; MLA.__init__ softmax_scale = qk_head_dim^-0.5 * (0.1 * mscale * ln(rope_factor)
    + 1)^2 when max_seq_len > original_seq_len (its config's "mscale" plays the role of HF's
    mscale_all_dim; both 1.0 in the release).
  - FP8: weight W[i][j] = e4m3(W[i][j]) * weight_scale_inv[i // 128][j // 128] (weight-only,
    activations stay float32), as inference/kernel.py weight_dequant / fp8_cast_bf16.py.

Dump names (--dump): L{l}.attn_out (residual after attention), L{l}.moe_out (residual at the
end of layer l, dense layers included), for MoE layers L{l}.router_logits f32 [n, n_routed]
(raw, before sigmoid), L{l}.topk_ids i32 [n, k] and L{l}.topk_w f32 [n, k] (final weights incl.
routed_scaling_factor); final_norm, logits. topk_ids order: that of the official Gate
(torch.topk sorted=True over the group-masked biased scores): descending score + bias, ties to
the lower id; transformers uses sorted=False (order unspecified, same set).

The forward keeps its own KV cache (expanded k/v per head, or with --absorbed only the normed
latent + roped k_rot per token) so greedy decoding feeds one token per step; the prompt logits
come from one causal pass (or --chunk N tokens at a time through the cache).

CLI:
  deepseek_v3.py MODEL_DIR --prompt-ids FILE [--out logits.f32] [--greedy N --greedy-out ids.txt]
                 [--dump DIR] [--f64] [--stats] [--chunk N] [--absorbed]
"""
import os
import re
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mla_common as mc  # noqa: E402


class Config:
    """Every dimension from config.json (transformers DeepseekV3Config key names / defaults)."""

    def __init__(self, cfg):
        self.raw = cfg
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        self.q_lora = cfg.get("q_lora_rank") or None          # null / 0: q_proj
        self.kv_lora = cfg["kv_lora_rank"]
        self.nope = cfg["qk_nope_head_dim"]
        self.rope = cfg["qk_rope_head_dim"]
        self.v = cfg["v_head_dim"]
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.rope_scaling = cfg.get("rope_scaling") or None
        self.max_pos = cfg.get("max_position_embeddings", 4096)
        self.interleave = cfg.get("rope_interleave", True)
        self.inter = cfg["intermediate_size"]
        self.moe_inter = cfg["moe_intermediate_size"]
        self.n_routed = cfg.get("n_routed_experts") or 0
        self.n_shared = cfg.get("n_shared_experts") or 0
        self.top_k = cfg["num_experts_per_tok"]
        self.n_group = cfg.get("n_group") or 1
        self.topk_group = cfg.get("topk_group") or 1
        self.norm_topk = bool(cfg.get("norm_topk_prob", True))
        self.rsf = float(cfg.get("routed_scaling_factor", 1.0))
        self.first_dense = cfg.get("first_k_dense_replace", 0)
        self.bias = bool(cfg.get("attention_bias", False))
        self.tie = bool(cfg.get("tie_word_embeddings", False))
        self.block = mc.quant_block(cfg)
        if cfg.get("hidden_act", "silu") != "silu":
            raise NotImplementedError(f"hidden_act {cfg.get('hidden_act')}")
        if cfg.get("scoring_func", "sigmoid") != "sigmoid":
            raise NotImplementedError(f"scoring_func {cfg.get('scoring_func')}")
        if cfg.get("topk_method", "noaux_tc") != "noaux_tc":
            raise NotImplementedError(f"topk_method {cfg.get('topk_method')}")
        if cfg.get("moe_layer_freq", 1) != 1:
            raise NotImplementedError("moe_layer_freq != 1 (ignored by transformers' V3 code)")
        if self.n_kv != self.n_heads:
            raise NotImplementedError("num_key_value_heads != num_attention_heads")
        if self.n_routed % self.n_group:
            raise ValueError("n_routed_experts not a multiple of n_group")
        per_group = self.n_routed // self.n_group
        if self.n_routed and not (self.topk_group <= self.n_group
                                  and self.top_k <= self.topk_group * per_group):
            raise ValueError("num_experts_per_tok exceeds the experts of topk_group groups")
        if self.rope % 2:
            raise ValueError("qk_rope_head_dim must be even")

    def is_moe(self, l):
        return self.n_routed > 0 and l >= self.first_dense


class DeepseekV3:
    ignored_what = "MTP layer: model.layers.<num_hidden_layers>.* (not part of the main model)"

    def __init__(self, model_dir, dtype=np.float32, absorbed=False):
        import json
        with open(os.path.join(model_dir, "config.json")) as f:
            self.c = c = Config(json.load(f))
        self.vocab = c.vocab
        self.dt = dtype
        self.absorbed = absorbed
        self.wts = mc.Weights(model_dir, dtype, c.block)
        self.inv_freq, self.attn_factor = mc.rope_tables(c.rope, c.theta, c.rope_scaling,
                                                         c.max_pos)
        self.d = mc.MLADims(c.hidden, c.n_heads, c.q_lora, c.kv_lora, c.nope, c.rope, c.v,
                            scale=mc.softmax_scale(c.nope + c.rope, c.rope_scaling),
                            lora_eps=1e-6, bias=c.bias, interleave=c.interleave)
        # MTP / extra layers: model.layers.N.* with N >= num_hidden_layers
        for name in self.wts.st.keys():
            mt = re.match(r"model\.layers\.(\d+)\.", name)
            if mt and int(mt.group(1)) >= c.n_layers:
                self.wts.ignored.add(name)
        self._expert_cache = {}
        self._route_infos = []
        self._prompt_infos = None

    # --- weights ---------------------------------------------------------------------------
    def expert(self, l, e, proj):
        key = (l, e, proj)
        if key not in self._expert_cache:
            c = self.c
            rows, cols = (c.hidden, c.moe_inter) if proj == "down_proj" else (c.moe_inter, c.hidden)
            self._expert_cache[key] = self.wts.linear(
                f"model.layers.{l}.mlp.experts.{e}.{proj}.weight", rows, cols)
        return self._expert_cache[key]

    def load_layer(self, l):
        c, W = self.c, self.wts
        p = f"model.layers.{l}."
        H = c.hidden
        lw = {"in_ln": W.w(p + "input_layernorm.weight", [H]),
              "post_ln": W.w(p + "post_attention_layernorm.weight", [H]),
              "attn": mc.load_mla(W, p + "self_attn.", self.d)}
        if c.is_moe(l):
            lw["gate"] = W.w(p + "mlp.gate.weight", [c.n_routed, H])
            lw["bias"] = W.w(p + "mlp.gate.e_score_correction_bias", [c.n_routed])
            # every expert tensor must exist with its shape, even if no token routes to it
            for e in range(c.n_routed):
                for proj, rows, cols in (("gate_proj", c.moe_inter, H), ("up_proj", c.moe_inter, H),
                                         ("down_proj", H, c.moe_inter)):
                    W.check_linear(p + f"mlp.experts.{e}.{proj}.weight", rows, cols)
            if c.n_shared:
                si = c.moe_inter * c.n_shared
                lw["sh_gate"] = W.linear(p + "mlp.shared_experts.gate_proj.weight", si, H)
                lw["sh_up"] = W.linear(p + "mlp.shared_experts.up_proj.weight", si, H)
                lw["sh_down"] = W.linear(p + "mlp.shared_experts.down_proj.weight", H, si)
        else:
            lw["mlp_gate"] = W.linear(p + "mlp.gate_proj.weight", c.inter, H)
            lw["mlp_up"] = W.linear(p + "mlp.up_proj.weight", c.inter, H)
            lw["mlp_down"] = W.linear(p + "mlp.down_proj.weight", H, c.inter)
        return lw

    def weights(self):
        if not hasattr(self, "_layers"):
            c, W = self.c, self.wts
            self._layers = [self.load_layer(l) for l in range(c.n_layers)]
            self._embed = W.w("model.embed_tokens.weight", [c.vocab, c.hidden])
            self._norm = W.w("model.norm.weight", [c.hidden])
            if c.tie:
                self._head = self._embed
                if "lm_head.weight" in W:
                    W.ignored.add("lm_head.weight")
            else:
                self._head = W.w("lm_head.weight", [c.vocab, c.hidden])
        return self._layers

    # --- blocks ----------------------------------------------------------------------------
    def route(self, g, bias):
        """DeepseekV3TopkRouter.forward / get_topk_indices (noaux_tc) with the official Gate's
        -inf group mask and sorted order. g: raw router logits [n, E] -> (ids, weights, info)."""
        c = self.c
        scores = 1 / (1 + np.exp(-g))                                # sigmoid
        sfc = scores + bias                                          # selection only
        n, E = sfc.shape
        gs = E // c.n_group
        grouped = sfc.reshape(n, c.n_group, gs)
        top2 = -np.sort(-grouped, axis=-1)[..., :min(2, gs)]
        group_scores = top2.sum(axis=-1)                            # sum of the 2 best
        gidx = mc.topk_desc(group_scores, c.topk_group)
        keep = np.zeros((n, c.n_group), dtype=bool)
        np.put_along_axis(keep, gidx, True, axis=1)
        keep_e = np.repeat(keep, gs, axis=1)
        masked = np.where(keep_e, sfc, -np.inf)                     # official: -inf
        idx = mc.topk_desc(masked, c.top_k)
        w = np.take_along_axis(scores, idx, axis=1)
        if c.norm_topk:
            w = w / (w.sum(axis=-1, keepdims=True) + g.dtype.type(1e-20))
        w = w * g.dtype.type(c.rsf)
        info = {"idx_nogroup": mc.topk_desc(sfc, c.top_k),
                "idx_nobias": mc.topk_desc(np.where(keep_e, scores, -np.inf), c.top_k),
                "idx_hf_zero_fill": mc.topk_desc(np.where(keep_e, sfc, 0.0), c.top_k),
                "group_scores": group_scores, "masked": masked}
        return idx, w, info

    def moe(self, l, lw, t, dump):
        c = self.c
        g = t @ lw["gate"].T                                         # router logits, float32
        idx, wts, info = self.route(g, lw["bias"])
        out = np.zeros_like(t)
        for e in np.unique(idx):
            rows, slot = np.nonzero(idx == e)
            y = mc.swiglu(t[rows], self.expert(l, e, "gate_proj"), self.expert(l, e, "up_proj"),
                          self.expert(l, e, "down_proj"))
            out[rows] += y * wts[rows, slot][:, None]
        if c.n_shared:
            out = out + mc.swiglu(t, lw["sh_gate"], lw["sh_up"], lw["sh_down"])
        if dump is not None:
            dump[f"L{l}.router_logits"] = g
            dump[f"L{l}.topk_ids"] = idx.astype(np.int32)
            dump[f"L{l}.topk_w"] = wts
            self._route_infos.append((l, info))      # for --stats only
        return out

    def forward(self, ids, pos0, cache, dump=None, kv_only_last=False):
        """Runs tokens `ids` at positions pos0.. through the model, extending `cache`;
        kv_only_last: only extend the last layer's cache (returns None)."""
        layers = self.weights()
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.arange(pos0, pos0 + len(ids), dtype=np.int64)
        cs = mc.cos_sin(pos, self.inv_freq, self.attn_factor, self.dt)
        eps = self.c.eps
        x = self._embed[ids]
        for l, lw in enumerate(layers):
            a = mc.mla(lw["attn"], self.d, mc.rmsnorm(x, lw["in_ln"], eps), pos, cs, cache, l,
                       self.absorbed, kv_only=kv_only_last and l == len(layers) - 1)
            if a is None:
                return None
            x = x + a
            if dump is not None:
                dump[f"L{l}.attn_out"] = x
            h = mc.rmsnorm(x, lw["post_ln"], eps)
            if "gate" in lw:
                x = x + self.moe(l, lw, h, dump)
            else:
                x = x + mc.swiglu(h, lw["mlp_gate"], lw["mlp_up"], lw["mlp_down"])
            if dump is not None:
                dump[f"L{l}.moe_out"] = x
        h = mc.rmsnorm(x, self._norm, eps)
        logits = h @ self._head.T
        if dump is not None:
            dump["final_norm"] = h
            dump["logits"] = logits
        return logits

    def routing_stats(self, dump, greedy_dumps):
        c = self.c
        moe_layers = [l for l in range(c.n_layers) if c.is_moe(l)]

        def count(infos):
            r = {"routings": 0, "group_limit_changed": 0, "bias_changed": 0,
                 "hf_zero_fill_would_differ": 0}
            for _, inf in infos:
                sel = np.sort(mc.topk_desc(inf["masked"], c.top_k), axis=1)
                r["routings"] += sel.shape[0]
                for k, alt in (("group_limit_changed", "idx_nogroup"),
                               ("bias_changed", "idx_nobias"),
                               ("hf_zero_fill_would_differ", "idx_hf_zero_fill")):
                    r[k] += int(np.sum(np.any(np.sort(inf[alt], 1) != sel, 1)))
            return r

        gaps, ggaps = [], []
        for _, inf in self._route_infos:
            srt = -np.sort(-inf["masked"], axis=1)
            if c.top_k < srt.shape[1]:
                gp = srt[:, c.top_k - 1] - srt[:, c.top_k]
                gaps.append(float(np.min(gp[np.isfinite(gp)], initial=np.inf)))
            gsrt = -np.sort(-inf["group_scores"], axis=1)
            if c.topk_group < gsrt.shape[1]:
                ggaps.append(float(np.min(gsrt[:, c.topk_group - 1] - gsrt[:, c.topk_group])))
        n_prompt = self._prompt_infos if self._prompt_infos is not None else len(self._route_infos)
        return {"moe_layers": moe_layers,
                "routing_prompt": count(self._route_infos[:n_prompt]),
                "routing_all_calls": count(self._route_infos),
                "router_topk_boundary_gap_min": min(gaps, default=None),
                "router_group_topk_boundary_gap_min": min(ggaps, default=None),
                "distinct_experts_selected_prompt_per_layer": [
                    int(np.unique(dump[f"L{l}.topk_ids"]).size) for l in moe_layers],
                "absorbed": self.absorbed,
                "softmax_scale": self.d.scale, "rope_attention_factor": self.attn_factor,
                "mtp_tensors_ignored": len(self.wts.ignored)}

    def end_prompt(self):
        self._prompt_infos = len(self._route_infos)


def main():
    mc.run_cli(__doc__, DeepseekV3,
               "attention in the absorbed form of DeepSeek inference/model.py (cache only the "
               "normed latent + roped k_rot per token; kv_b folded into q and the output)")


if __name__ == "__main__":
    main()
