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
import mla_common as mc  # noqa: E402


class Config:
    """Every dimension from config.json (transformers LongcatFlashConfig key names / defaults)."""

    def __init__(self, cfg):
        self.raw = cfg
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg["num_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        self.q_lora = cfg.get("q_lora_rank", 1536)
        self.kv_lora = cfg["kv_lora_rank"]
        self.nope = cfg["qk_nope_head_dim"]
        self.rope = cfg["qk_rope_head_dim"]
        self.v = cfg["v_head_dim"]
        self.qk = cfg.get("qk_head_dim") or self.nope + self.rope
        self.rot_dim = cfg.get("head_dim", 64)
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.theta = cfg.get("rope_theta", 10000000.0)
        self.rope_scaling = cfg.get("rope_scaling") or None
        self.max_pos = cfg.get("max_position_embeddings", 131072)
        self.ffn = cfg.get("ffn_hidden_size", cfg.get("intermediate_size"))
        self.expert_ffn = cfg["expert_ffn_hidden_size"]
        self.n_routed = cfg["n_routed_experts"]
        self.n_zero = cfg.get("zero_expert_num") or 0
        self.top_k = cfg.get("moe_topk", cfg.get("num_experts_per_tok"))
        self.rsf = float(cfg.get("routed_scaling_factor", 1.0))
        self.router_bias = bool(cfg.get("router_bias", False))
        self.bias = bool(cfg.get("attention_bias", False))
        self.tie = bool(cfg.get("tie_word_embeddings", False))
        self.block = mc.quant_block(cfg)
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


class LongcatFlash:
    ignored_what = "MTP: model.mtp.* (not part of the main model)"

    def __init__(self, model_dir, dtype=np.float32, absorbed=False):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.c = c = Config(json.load(f))
        self.vocab = c.vocab
        self.dt = dtype
        self.absorbed = absorbed
        self.wts = mc.Weights(model_dir, dtype, c.block)
        self.inv_freq, self.attn_factor = mc.rope_tables(c.rope, c.theta, c.rope_scaling,
                                                         c.max_pos)
        self.d = mc.MLADims(c.hidden, c.n_heads, c.q_lora, c.kv_lora, c.nope, c.rope, c.v,
                            q_scale=c.q_scale, kv_scale=c.kv_scale,
                            scale=mc.softmax_scale(c.qk, c.rope_scaling), lora_eps=1e-6,
                            bias=c.bias, interleave=True)
        for name in self.wts.st.keys():
            if name.startswith("model.mtp."):
                self.wts.ignored.add(name)
        self._expert_cache = {}
        self._route_infos = []
        self._prompt_infos = None

    # --- weights ---------------------------------------------------------------------------
    def expert(self, l, e, proj):
        key = (l, e, proj)
        if key not in self._expert_cache:
            c = self.c
            rows, cols = ((c.hidden, c.expert_ffn) if proj == "down_proj"
                          else (c.expert_ffn, c.hidden))
            self._expert_cache[key] = self.wts.linear(
                f"model.layers.{l}.mlp.experts.{e}.{proj}.weight", rows, cols)
        return self._expert_cache[key]

    def load_layer(self, l):
        c, W = self.c, self.wts
        p = f"model.layers.{l}."
        H, E = c.hidden, c.n_routed + c.n_zero
        lw = {}
        for i in (0, 1):
            lw[f"in_ln{i}"] = W.w(p + f"input_layernorm.{i}.weight", [H])
            lw[f"post_ln{i}"] = W.w(p + f"post_attention_layernorm.{i}.weight", [H])
            lw[f"attn{i}"] = mc.load_mla(W, p + f"self_attn.{i}.", self.d)
            lw[f"mlp{i}"] = (W.linear(p + f"mlps.{i}.gate_proj.weight", c.ffn, H),
                             W.linear(p + f"mlps.{i}.up_proj.weight", c.ffn, H),
                             W.linear(p + f"mlps.{i}.down_proj.weight", H, c.ffn))
        lw["router"] = W.w(p + "mlp.router.classifier.weight", [E, H]).astype(self.dt)
        if c.router_bias:
            lw["router_b"] = W.w(p + "mlp.router.classifier.bias", [E])
        lw["bias"] = W.w(p + "mlp.router.e_score_correction_bias", [E])
        # every expert tensor must exist with its shape, even if no token routes to it
        for e in range(c.n_routed):
            for proj, rows, cols in (("gate_proj", c.expert_ffn, H), ("up_proj", c.expert_ffn, H),
                                     ("down_proj", H, c.expert_ffn)):
                W.check_linear(p + f"mlp.experts.{e}.{proj}.weight", rows, cols)
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
    def moe(self, l, lw, t, dump):
        """LongcatFlashMoE: softmax router (float32), biased top-k, zero experts = identity."""
        c = self.c
        g = t @ lw["router"].T
        if "router_b" in lw:
            g = g + lw["router_b"]
        scores = mc.softmax(g)
        sfc = scores + lw["bias"]                                    # selection only
        idx = mc.topk_desc(sfc, c.top_k)
        wts = np.take_along_axis(scores, idx, axis=1) * g.dtype.type(c.rsf)
        out = np.zeros_like(t)
        for e in np.unique(idx):
            rows, slot = np.nonzero(idx == e)
            if e >= c.n_routed:
                y = t[rows]                                          # identity expert
            else:
                y = mc.swiglu(t[rows], self.expert(l, e, "gate_proj"),
                              self.expert(l, e, "up_proj"), self.expert(l, e, "down_proj"))
            out[rows] += y * wts[rows, slot][:, None]
        if dump is not None:
            dump[f"L{l}.router_logits"] = g
            dump[f"L{l}.topk_ids"] = idx.astype(np.int32)
            dump[f"L{l}.topk_w"] = wts
            self._route_infos.append((l, {"sfc": sfc, "idx": idx,
                                          "idx_nobias": mc.topk_desc(scores, c.top_k)}))
        return out

    def forward(self, ids, pos0, cache, dump=None):
        """Runs tokens `ids` at positions pos0.. through the model, extending `cache`."""
        layers = self.weights()
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.arange(pos0, pos0 + len(ids), dtype=np.int64)
        cs = mc.cos_sin(pos, self.inv_freq, self.attn_factor, self.dt)
        eps = self.c.eps
        x = self._embed[ids]
        for l, lw in enumerate(layers):
            x = x + mc.mla(lw["attn0"], self.d, mc.rmsnorm(x, lw["in_ln0"], eps), pos, cs, cache,
                           (l, 0), self.absorbed)
            if dump is not None:
                dump[f"L{l}.attn0_out"] = x
            h = mc.rmsnorm(x, lw["post_ln0"], eps)
            shortcut = self.moe(l, lw, h, dump)
            x = x + mc.swiglu(h, *lw["mlp0"])
            x = x + mc.mla(lw["attn1"], self.d, mc.rmsnorm(x, lw["in_ln1"], eps), pos, cs, cache,
                           (l, 1), self.absorbed)
            if dump is not None:
                dump[f"L{l}.attn1_out"] = x
            x = x + mc.swiglu(mc.rmsnorm(x, lw["post_ln1"], eps), *lw["mlp1"]) + shortcut
            if dump is not None:
                dump[f"L{l}.moe_out"] = x
        h = mc.rmsnorm(x, self._norm, eps)
        logits = h @ self._head.T
        if dump is not None:
            dump["final_norm"] = h
            dump["logits"] = logits
        return logits

    def end_prompt(self):
        self._prompt_infos = len(self._route_infos)

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

        gaps = []
        for _, inf in self._route_infos:
            srt = -np.sort(-inf["sfc"], axis=1)
            if c.top_k < srt.shape[1]:
                gaps.append(float(np.min(srt[:, c.top_k - 1] - srt[:, c.top_k])))
        n_prompt = self._prompt_infos if self._prompt_infos is not None else len(self._route_infos)
        return {"routing_prompt": count(self._route_infos[:n_prompt]),
                "routing_all_calls": count(self._route_infos),
                "router_topk_boundary_gap_min": min(gaps, default=None),
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
