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

The pieces shared with the other oracles (weights and FP8 dequantisation, RMSNorm, SwiGLU, the
decoder stack, the sigmoid group-limited router, MLA, the CLI driver) are in blocks.py,
mla_common.py and dump.py; this file holds what is DeepSeek-V3's own.

CLI:
  deepseek_v3.py MODEL_DIR --prompt-ids FILE [--out logits.f32] [--greedy N --greedy-out ids.txt]
                 [--dump DIR] [--f64] [--stats] [--chunk N] [--absorbed]
"""
import json
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import blocks as bl  # noqa: E402
import mla_common as mc  # noqa: E402


class Config(mc.MlaConfig):
    """Every dimension from config.json (transformers DeepseekV3Config key names / defaults)."""

    def __init__(self, cfg):
        super().__init__(cfg, "num_hidden_layers", eps=1e-6, theta=10000.0, max_pos=4096)
        self.q_lora = cfg.get("q_lora_rank") or None          # null / 0: q_proj
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
        self.block = bl.quant_block(cfg)
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


class DeepseekV3(bl.Decoder):
    """DeepseekV3ForCausalLM over the blocks.Decoder stack, MLA attention (mla_common.mla)."""
    ignored_what = "MTP layer: model.layers.<num_hidden_layers>.* (not part of the main model)"

    def __init__(self, model_dir, dtype=np.float32, absorbed=False):
        with open(os.path.join(model_dir, "config.json")) as f:
            c = Config(json.load(f))
        super().__init__(c, bl.Weights(model_dir, dtype, c.block), dtype)
        self.absorbed = absorbed
        self.expert_inter = c.moe_inter
        self.inv_freq, self.attn_factor = mc.rope_tables(c.rope, c.theta, c.rope_scaling,
                                                         c.max_pos)
        self.d = mc.MLADims(c.hidden, c.n_heads, c.q_lora, c.kv_lora, c.nope, c.rope, c.v,
                            scale=mc.softmax_scale(c.nope + c.rope, c.rope_scaling),
                            lora_eps=1e-6, bias=c.bias, interleave=c.interleave)
        bl.ignore_extra_layers(self.wts, c.n_layers)   # MTP / extra layers

    # --- weights ---------------------------------------------------------------------------
    def load_layer(self, l):
        c, W = self.c, self.wts
        p = f"model.layers.{l}."
        H = c.hidden
        lw = {"in_ln": W.w(p + "input_layernorm.weight", [H]),
              "post_ln": W.w(p + "post_attention_layernorm.weight", [H]),
              "attn": mc.load_mla(W, p + "self_attn.", self.d)}
        if c.is_moe(l):
            self.load_biased_moe(lw, p)
        else:
            lw["mlp"] = bl.load_mlp(W, p + "mlp.", c.inter, H)
        return lw

    # --- blocks ----------------------------------------------------------------------------
    def attention(self, l, lw, t, pos, cs, cache, kv_only=False):
        return mc.mla(lw["attn"], self.d, t, pos, cs, cache, l, self.absorbed, kv_only=kv_only)

    def route(self, g, lw):
        """DeepseekV3TopkRouter.forward / get_topk_indices (noaux_tc) with the official Gate's
        -inf group mask and sorted order. g: raw router logits [n, E] -> (ids, weights, info)."""
        c = self.c
        return bl.group_limited_topk(g, lw["bias"], c.n_group, c.topk_group, c.top_k,
                                     c.norm_topk, c.rsf, -np.inf, 0.0)

    def routing_stats(self, dump, greedy_dumps):
        c = self.c
        moe_layers = [l for l in range(c.n_layers) if c.is_moe(l)]
        infos = self.route_infos
        gaps = [bl.kth_gap(inf["masked"], c.top_k, finite_only=True) for _, inf in infos]
        ggaps = [bl.kth_gap(inf["group_scores"], c.topk_group) for _, inf in infos]
        n_prompt = self.n_prompt_routes if self.n_prompt_routes is not None else len(infos)
        return {"moe_layers": moe_layers,
                "routing_prompt": bl.route_changes(infos[:n_prompt], c.top_k,
                                                   "hf_zero_fill_would_differ"),
                "routing_all_calls": bl.route_changes(infos, c.top_k,
                                                      "hf_zero_fill_would_differ"),
                "router_topk_boundary_gap_min": min((x for x in gaps if x is not None),
                                                    default=None),
                "router_group_topk_boundary_gap_min": min((x for x in ggaps if x is not None),
                                                          default=None),
                "distinct_experts_selected_prompt_per_layer": [
                    int(np.unique(dump[f"L{l}.topk_ids"]).size) for l in moe_layers],
                "absorbed": self.absorbed,
                "softmax_scale": self.d.scale, "rope_attention_factor": self.attn_factor,
                "mtp_tensors_ignored": len(self.wts.ignored)}


def main():
    mc.run_cli(__doc__, DeepseekV3,
               "attention in the absorbed form of DeepSeek inference/model.py (cache only the "
               "normed latent + roped k_rot per token; kv_b folded into q and the output)")


if __name__ == "__main__":
    main()
