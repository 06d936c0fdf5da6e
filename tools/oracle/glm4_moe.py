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

The pieces shared with the other oracles (RMSNorm, SwiGLU, RoPE tables, the decoder stack,
the sigmoid group-limited router, GQA attention with its KV cache, the CLI driver) are in
blocks.py, gqa_common.py and dump.py; this file holds what is glm4_moe's own.

CLI:
  glm4_moe.py MODEL_DIR --prompt-ids FILE [--out logits.f32] [--greedy N --greedy-out ids.txt]
              [--dump DIR] [--f64] [--stats] [--chunk N]
"""
import json
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import blocks as bl  # noqa: E402
import dump as du  # noqa: E402
import gqa_common as gqa  # noqa: E402


class Config(gqa.GqaConfig):
    """Every dimension from config.json (transformers Glm4MoeConfig key names and defaults)."""

    def __init__(self, cfg):
        super().__init__(cfg, eps=1e-5)
        self.partial = float(cfg.get("partial_rotary_factor", 0.5))
        self.rot_dim = int(self.head_dim * self.partial)
        self.qk_norm = bool(cfg.get("use_qk_norm", False))
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


class Glm4Weights(bl.Weights):
    """bf16 / f16 / f32 tensors widened exactly; in the FP8 releases (compressed-tensors
    "float-quantized", weights strategy "channel") a linear is F8_E4M3 codes with
    `<name>_scale` [out, 1], dequantised as compressed-tensors' FloatQuantizationCompressor
    does: W[i][j] = e4m3(codes[i][j]) * scale[i] (scale widened exactly first)."""

    PLAIN = ("BF16", "F16", "F32", "F64")

    def __init__(self, model_dir, dtype, cfg):
        super().__init__(model_dir, dtype)
        q = cfg.get("quantization_config") or {}
        if q:
            groups = list((q.get("config_groups") or {}).values())
            wq = groups[0].get("weights", {}) if len(groups) == 1 else {}
            if (q.get("quant_method") != "compressed-tensors"
                    or q.get("format") != "float-quantized" or wq.get("num_bits") != 8
                    or wq.get("type") != "float" or wq.get("strategy") != "channel"):
                raise NotImplementedError("quantization_config other than compressed-tensors "
                                          "per-channel FP8")

    def w(self, name, shape=None):
        info = self.st.info(name)
        if info["dtype"] not in self.PLAIN:
            raise ValueError(f"{name}: dtype {info['dtype']} (want BF16/F16/F32)")
        return self.read(name, info, shape)

    def linear(self, name, rows, cols):
        if self.check_linear(name, rows, cols) != "F8_E4M3":
            return self.st.get(name).astype(self.dt)
        codes = self.fp8_codes(name)
        scale = self.st.get(name + "_scale").astype(np.float32)
        return (codes * scale).astype(self.dt)

    def check_linear(self, name, rows, cols):
        info = self.st.info(name)  # KeyError when missing
        if list(info["shape"]) != [rows, cols]:
            raise ValueError(f"{name}: shape {info['shape']}, expected {[rows, cols]}")
        if info["dtype"] in self.PLAIN:
            self.used.add(name)
            return info["dtype"]
        if info["dtype"] != "F8_E4M3":
            raise ValueError(f"{name}: dtype {info['dtype']} (want BF16/F16/F32 or F8_E4M3)")
        sinfo = self.st.info(name + "_scale")
        if list(sinfo["shape"]) != [rows, 1] or sinfo["dtype"] not in ("BF16", "F16", "F32"):
            raise ValueError(f"{name}_scale: {sinfo['dtype']} {sinfo['shape']}, expected a "
                             f"float [{rows}, 1]")
        self.used.update((name, name + "_scale"))
        return "F8_E4M3"


class Glm4Moe(gqa.GqaDecoder):
    """Glm4MoeForCausalLM over gqa_common.GqaDecoder (partial rotary, optional q/k norm, no
    o_proj bias), sigmoid group-limited router (blocks.group_limited_topk, 0.0 group mask)."""

    def __init__(self, model_dir, dtype=np.float32):
        with open(os.path.join(model_dir, "config.json")) as f:
            raw = json.load(f)
        c = Config(raw)
        super().__init__(c, Glm4Weights(model_dir, dtype, raw), dtype)
        # compute_default_rope_parameters (dim = rot_dim), float32 like torch; cos/sin not scaled
        self.inv_freq = bl.rope_inv_freq(c.rot_dim, c.theta)[1]
        bl.ignore_extra_layers(self.wts, c.n_layers)   # the MTP layer(s)
        self.expert_inter = c.moe_inter
        self.fit_expert_cache(c.n_routed)

    # --- weights ---------------------------------------------------------------------------
    def load_layer(self, l):
        c, W = self.c, self.wts
        p = f"model.layers.{l}."
        lw = self.load_attention(p)
        self.load_biases(lw, p, ("q", "k", "v"))
        if p + "self_attn.o_proj.bias" in W:
            raise ValueError(f"{p}self_attn.o_proj.bias present (o_proj has no bias upstream)")
        self.load_optional(lw, c.qk_norm, "use_qk_norm",
                           [(n, p + f"self_attn.{n}.weight", [c.head_dim])
                            for n in ("q_norm", "k_norm")])
        if c.is_moe(l):
            self.load_biased_moe(lw, p)
        else:
            lw["mlp"] = bl.load_mlp(W, p + "mlp.", c.inter, c.hidden)
        return lw

    # --- blocks ----------------------------------------------------------------------------
    def route(self, g, lw):
        """Glm4MoeMoE.route_tokens_to_experts on raw router logits g [n, E] ->
        (ids [n, k], weights [n, k], info for --stats)."""
        c = self.c
        dt = g.dtype.type
        idx, w, info = bl.group_limited_topk(g, lw["bias"], c.n_group, c.topk_group, c.top_k,
                                             c.norm_topk, c.rsf, dt(0.0), dt(-np.inf))
        picked_masked = ~np.take_along_axis(info["kept"], idx, axis=1)
        if picked_masked.any():
            print(f"warning: {int(picked_masked.any(axis=1).sum())} token(s) select a "
                  f"group-masked (0.0-filled) expert: upstream's choice among the tied zeros "
                  f"is unspecified", file=sys.stderr)
        return idx, w, info

    def routing_stats(self, infos):
        c = self.c
        r = bl.route_changes(infos, c.top_k, "neg_inf_fill_would_differ")
        gaps = [bl.kth_gap(inf["masked"], c.top_k) for _, inf in infos]
        ggaps = [bl.kth_gap(inf["group_scores"], c.topk_group) for _, inf in infos]
        r["router_topk_boundary_gap_min"] = min((x for x in gaps if x is not None),
                                                default=None)
        r["router_group_topk_boundary_gap_min"] = min((x for x in ggaps if x is not None),
                                                      default=None)
        return r


def main():
    ap = du.arg_parser(__doc__)
    ap.add_argument("--chunk", type=int, default=0, help=du.CHUNK_HELP)
    ap.add_argument("--stats", action="store_true", help=du.STATS_ROUTING_HELP)
    a = ap.parse_args()

    ids = du.read_prompt(a.prompt_ids)
    m = du.load_model(lambda: Glm4Moe(a.model_dir, du.compute_dtype(a)), preload=True)
    du.check_prompt(ids, m.c.vocab)
    logits, dump, greedy_margins, _ = du.run(a, m, ids, m.new_cache(), a.chunk)
    if a.stats:
        c, W = m.c, m.wts
        moe_layers = [l for l in range(c.n_layers) if c.is_moe(l)]
        stats = du.margin_stats(logits, greedy_margins)
        stats.update({"moe_layers": moe_layers,
                      "routing_prompt": m.routing_stats(m.route_infos[:m.n_prompt_routes]),
                      "routing_all_calls": m.routing_stats(m.route_infos),
                      "distinct_experts_selected_prompt_per_layer": [
                          int(np.unique(dump[f"L{l}.topk_ids"]).size) for l in moe_layers],
                      "n_routed_experts": c.n_routed, "rotary_dim": c.rot_dim,
                      "tensors_in_checkpoint": len(W.st.keys()), "tensors_used": len(W.used),
                      "tensors_ignored": len(W.ignored)})
        print(json.dumps(stats), file=sys.stderr)
    du.report_tensors(m.wts, "MTP layer: model.layers.<n >= num_hidden_layers>.*, not part of "
                      "the main model")


if __name__ == "__main__":
    main()
