#!/usr/bin/python3
"""Independent NumPy forward of LongCat-Flash (float32, or float64 with --f64), from the HF folder.

Owns: the reference math for the longcat_flash family (bf16 and block-FP8 checkpoints), written
from the upstream code, never from this project's C sources. Lines followed:
  - huggingface/transformers src/transformers/models/longcat_flash/modeling_longcat_flash.py:
    LongcatFlashRMSNorm (eps rms_norm_eps for input/post-attention/final norms, default 1e-6
    for q_a_layernorm / kv_a_layernorm); LongcatFlashMLA.__init__ (scaling =
    yarn_apply_mscale(rope, qk_head_dim^-0.5): qk_head_dim^-0.5, times
    yarn_get_mscale(factor, mscale_all_dim)^2 only with a non-default rope and non-zero
    mscale_all_dim; mla_scale_q_lora = sqrt(hidden_size / q_lora_rank), mla_scale_kv_lora =
    sqrt(hidden_size / kv_lora_rank)); LongcatFlashMLA.forward (q = q_b(q_a_layernorm(q_a(x)))
    split [nope | rope]; k_pass = kv_a_layernorm(latent); q_pass AND q_rot times
    mla_scale_q_lora, k_pass times mla_scale_kv_lora (after the norm, before kv_b_proj), k_rot
    not scaled; apply_rotary_pos_emb_interleave on q_rot / k_rot; expand_kv: kv_b_proj(k_pass)
    -> [k_nope | v] per head, k_rot shared; eager attention, causal, softmax float32; o_proj);
    LongcatFlashRotaryEmbedding (rotary dim = config.head_dim, default 64, which must equal
    qk_rope_head_dim; rope_theta); LongcatFlashTopkRouter (router_logits = x @ classifier.weight.T
    in float32 (+ bias if router_bias), scores = softmax over n_routed + zero_expert_num,
    top-k (moe_topk) of scores + e_score_correction_bias (selection only), weights = unbiased
    scores gathered * routed_scaling_factor, no renormalisation); LongcatFlashExperts (ids >=
    n_routed_experts are zero-computation identity experts: output = input * weight; others
    down(silu(gate(x)) * up(x))); LongcatFlashDecoderLayer (ScMoE):
        r = x + attn0(ln_in0(x))                      -> L{l}.attn0_out
        h = ln_post0(r); shortcut = moe(h); x = r + mlps0(h)
        r = x + attn1(ln_in1(x))                      -> L{l}.attn1_out
        x = r + mlps1(ln_post1(r)) + shortcut         -> L{l}.moe_out
    LongcatFlashModel (num_layers decoder layers, final norm; input ids used as given, no BOS
    added); LongcatFlashForCausalLM._keys_to_ignore_on_load_unexpected (model.mtp.* ignored).
  - config keys mla_scale_q_lora / mla_scale_kv_lora (vLLM/sglang FlashConfig): transformers
    always applies both scales; vLLM/sglang apply each only when its flag is true (folding it
    into q_a_layernorm / kv_a_layernorm weights, equivalent by linearity). Here: applied unless
    the flag is present and false.
  - FP8 (LongCat-Flash-Chat-FP8, vLLM/sglang loaders): W[i][j] = e4m3(W[i][j]) *
    weight_scale_inv[i // 128][j // 128], weight-only; the router stays unquantised (F32).

Dump names (--dump): L{l}.attn0_out / L{l}.attn1_out (residual after each attention sub-block),
L{l}.moe_out (residual at the end of layer l, shortcut MoE added), L{l}.router_logits f32
[n, n_routed + zero_expert_num] (raw, before softmax), L{l}.topk_ids i32 [n, k],
L{l}.topk_w f32 [n, k] (unbiased softmax score * routed_scaling_factor); final_norm, logits.
topk_ids order: transformers uses torch.topk(sorted=False) (order unspecified); written here in
descending order of score + e_score_correction_bias, ties to the lower id (sorted=True order).

--absorbed computes every MLA sub-block in the absorbed form of DeepSeek inference/model.py
(cache: the scaled normed latent + roped k_rot per token), which must equal the expanded form.

The pieces shared with the other oracles (weights and FP8 dequantisation, RMSNorm, SwiGLU,
experts, MLA, the CLI driver) are in blocks.py, mla_common.py and dump.py; this file holds
what is LongCat-Flash's own (the ScMoE layer, the softmax router with identity experts).

CLI:
  longcat_flash.py MODEL_DIR --prompt-ids FILE [--out logits.f32] [--greedy N --greedy-out ids.txt]
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
    """Every dimension from config.json (transformers LongcatFlashConfig key names / defaults)."""

    def __init__(self, cfg):
        super().__init__(cfg, "num_layers", eps=1e-5, theta=10000000.0, max_pos=131072)
        self.q_lora = cfg.get("q_lora_rank", 1536)
        self.qk = cfg.get("qk_head_dim") or self.nope + self.rope
        self.rot_dim = cfg.get("head_dim", 64)
        self.ffn = cfg.get("ffn_hidden_size", cfg.get("intermediate_size"))
        self.expert_ffn = cfg["expert_ffn_hidden_size"]
        self.n_routed = cfg["n_routed_experts"]
        self.n_zero = cfg.get("zero_expert_num") or 0
        self.top_k = cfg.get("moe_topk", cfg.get("num_experts_per_tok"))
        self.rsf = float(cfg.get("routed_scaling_factor", 1.0))
        self.router_bias = bool(cfg.get("router_bias", False))
        self.block = bl.quant_block(cfg)
        self.q_scale = (self.hidden / self.q_lora) ** 0.5 \
            if cfg.get("mla_scale_q_lora", True) else 1.0
        self.kv_scale = (self.hidden / self.kv_lora) ** 0.5 \
            if cfg.get("mla_scale_kv_lora", True) else 1.0
        if cfg.get("hidden_act", "silu") != "silu":
            raise NotImplementedError(f"hidden_act {cfg.get('hidden_act')}")
        if self.n_zero and cfg.get("zero_expert_type", "identity") != "identity":
            raise NotImplementedError(f"zero_expert_type {cfg.get('zero_expert_type')}")
        if cfg.get("attention_method", "MLA") != "MLA":
            raise NotImplementedError(f"attention_method {cfg.get('attention_method')}")
        if not self.q_lora:
            raise NotImplementedError("q_lora_rank null (the transformers forward always uses "
                                      "q_a_proj / q_b_proj)")
        if self.qk != self.nope + self.rope:
            raise NotImplementedError("qk_head_dim != qk_nope_head_dim + qk_rope_head_dim")
        if self.rot_dim != self.rope:
            raise ValueError(f"head_dim {self.rot_dim} (rotary table) != qk_rope_head_dim "
                             f"{self.rope}")
        if self.n_kv != self.n_heads:
            raise NotImplementedError("num_key_value_heads != num_attention_heads")
        if not 0 < self.top_k <= self.n_routed + self.n_zero:
            raise ValueError("bad moe_topk")


class LongcatFlash(bl.Decoder):
    """LongcatFlashForCausalLM: blocks.Decoder weights / experts / final norm, its own
    two-sub-block ScMoE layer (forward)."""
    ignored_what = "MTP: model.mtp.* (not part of the main model)"

    def __init__(self, model_dir, dtype=np.float32, absorbed=False):
        with open(os.path.join(model_dir, "config.json")) as f:
            c = Config(json.load(f))
        super().__init__(c, bl.Weights(model_dir, dtype, c.block), dtype)
        self.absorbed = absorbed
        self.expert_inter = c.expert_ffn
        self.inv_freq, self.attn_factor = mc.rope_tables(c.rope, c.theta, c.rope_scaling,
                                                         c.max_pos)
        self.d = mc.MLADims(c.hidden, c.n_heads, c.q_lora, c.kv_lora, c.nope, c.rope, c.v,
                            q_scale=c.q_scale, kv_scale=c.kv_scale,
                            scale=mc.softmax_scale(c.qk, c.rope_scaling), lora_eps=1e-6,
                            bias=c.bias, interleave=True)
        for name in self.wts.st.keys():
            if name.startswith("model.mtp."):
                self.wts.ignored.add(name)

    # --- weights ---------------------------------------------------------------------------
    def load_layer(self, l):
        c, W = self.c, self.wts
        p = f"model.layers.{l}."
        H, E = c.hidden, c.n_routed + c.n_zero
        lw = {}
        for i in (0, 1):
            lw[f"in_ln{i}"] = W.w(p + f"input_layernorm.{i}.weight", [H])
            lw[f"post_ln{i}"] = W.w(p + f"post_attention_layernorm.{i}.weight", [H])
            lw[f"attn{i}"] = mc.load_mla(W, p + f"self_attn.{i}.", self.d)
            lw[f"mlp{i}"] = bl.load_mlp(W, p + f"mlps.{i}.", c.ffn, H)
        lw["router"] = W.w(p + "mlp.router.classifier.weight", [E, H]).astype(self.dt)
        if c.router_bias:
            lw["router_b"] = W.w(p + "mlp.router.classifier.bias", [E])
        lw["bias"] = W.w(p + "mlp.router.e_score_correction_bias", [E])
        self.check_experts(p, c.n_routed, c.expert_ffn)
        return lw

    # --- blocks ----------------------------------------------------------------------------
    def moe(self, l, lw, t, dump):
        """LongcatFlashMoE: softmax router (float32), biased top-k, zero experts = identity."""
        c = self.c
        g = t @ lw["router"].T
        if "router_b" in lw:
            g = g + lw["router_b"]
        scores = bl.softmax(g)
        sfc = scores + lw["bias"]                                    # selection only
        idx = bl.topk_desc(sfc, c.top_k)
        wts = np.take_along_axis(scores, idx, axis=1) * g.dtype.type(c.rsf)
        out = bl.dispatch(t, idx, wts, lambda e, x: x if e >= c.n_routed      # identity expert
                          else self.expert_mlp(l, e, x))
        if dump is not None:
            bl.dump_routing(dump, l, g, idx, wts)
            self.route_infos.append((l, {"sfc": sfc, "idx": idx,
                                         "idx_nobias": bl.topk_desc(scores, c.top_k)}))
        return out

    def sub_attention(self, lw, i, x, pos, cs, cache, l):
        return mc.mla(lw[f"attn{i}"], self.d, self.norm(x, lw[f"in_ln{i}"]), pos, cs, cache,
                      (l, i), self.absorbed)

    def forward(self, ids, pos0, cache, dump=None):
        """Runs tokens `ids` at positions pos0.. through the model, extending `cache`."""
        layers, pos, cs, x = self.embed(ids, pos0)
        for l, lw in enumerate(layers):
            x = x + self.sub_attention(lw, 0, x, pos, cs, cache, l)
            if dump is not None:
                dump[f"L{l}.attn0_out"] = x
            h = self.norm(x, lw["post_ln0"])
            shortcut = self.moe(l, lw, h, dump)
            x = x + bl.swiglu(h, *lw["mlp0"])
            x = x + self.sub_attention(lw, 1, x, pos, cs, cache, l)
            if dump is not None:
                dump[f"L{l}.attn1_out"] = x
            x = x + bl.swiglu(self.norm(x, lw["post_ln1"]), *lw["mlp1"]) + shortcut
            if dump is not None:
                dump[f"L{l}.moe_out"] = x
        return self.logits(x, dump)

    def routing_stats(self, dump, greedy_dumps):
        c = self.c

        def count(infos):
            r = {"routings": 0, "slots": 0, "identity_slots": 0, "bias_changed": 0}
            for _, inf in infos:
                idx = inf["idx"]
                r["routings"] += idx.shape[0]
                r["slots"] += idx.size
                r["identity_slots"] += int(np.sum(idx >= c.n_routed))
                r["bias_changed"] += int(np.sum(np.any(
                    np.sort(inf["idx_nobias"], 1) != np.sort(idx, 1), 1)))
            return r

        infos = self.route_infos
        gaps = [bl.kth_gap(inf["sfc"], c.top_k) for _, inf in infos]
        n_prompt = self.n_prompt_routes if self.n_prompt_routes is not None else len(infos)
        return {"routing_prompt": count(infos[:n_prompt]),
                "routing_all_calls": count(infos),
                "router_topk_boundary_gap_min": min((x for x in gaps if x is not None),
                                                    default=None),
                "distinct_experts_selected_prompt_per_layer": [
                    int(np.unique(dump[f"L{l}.topk_ids"]).size) for l in range(c.n_layers)],
                "absorbed": self.absorbed, "softmax_scale": self.d.scale,
                "mla_scale_q_lora": c.q_scale, "mla_scale_kv_lora": c.kv_scale,
                "mtp_tensors_ignored": len(self.wts.ignored)}


def main():
    mc.run_cli(__doc__, LongcatFlash,
               "MLA in the absorbed form of DeepSeek inference/model.py (cache only the scaled "
               "normed latent + roped k_rot per token; kv_b folded into q and the output)")


if __name__ == "__main__":
    main()
