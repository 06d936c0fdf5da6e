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

The pieces shared with the other oracles (weights and FP8 dequantisation, RMSNorm, SwiGLU,
RoPE tables, the decoder stack, GQA attention with its KV cache, the CLI driver) are in
blocks.py, gqa_common.py and dump.py; this file holds what is Qwen3-MoE's own.

CLI:
  qwen3_moe.py MODEL_DIR --prompt-ids FILE [--out logits.f32] [--greedy N --greedy-out ids.txt]
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
    """Every dimension from config.json (transformers Qwen3MoeConfig key names and defaults)."""

    def __init__(self, cfg):
        super().__init__(cfg, eps=1e-6)
        self.n_experts = cfg.get("num_experts", 128)
        self.top_k = cfg.get("num_experts_per_tok", 8)
        self.moe_inter = cfg.get("moe_intermediate_size", 768)
        self.inter = cfg.get("intermediate_size", 6144)
        self.norm_topk = bool(cfg.get("norm_topk_prob", False))
        self.sparse_step = cfg.get("decoder_sparse_step", 1)
        self.mlp_only = list(cfg.get("mlp_only_layers") or [])
        self.max_pos = cfg.get("max_position_embeddings", 32768)
        if cfg.get("use_sliding_window"):
            raise NotImplementedError("use_sliding_window true (no Qwen3-MoE release uses it)")
        if self.n_heads % self.n_kv:
            raise ValueError("num_attention_heads not a multiple of num_key_value_heads")
        self.block = bl.quant_block(cfg)

    def is_moe(self, l):
        # Qwen3MoeDecoderLayer.__init__
        return (l not in self.mlp_only and self.n_experts > 0
                and (l + 1) % self.sparse_step == 0)


def rope_params(c):
    """(inv_freq float32 [head_dim/2], attention_scaling), float32 like torch: default,
    "linear" (inv_freq / factor) or "yarn" with factor = max_position_embeddings /
    original_max_position_embeddings when the latter is given (blocks.yarn)."""
    dim = c.head_dim
    pos_freqs, inv = bl.rope_inv_freq(dim, c.theta)
    rs, rtype = c.rope_scaling, bl.rope_type(c.rope_scaling)
    if rtype == "default":
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
    return bl.yarn(dim, c.theta, pos_freqs, inv, factor, orig, rs)


class Qwen3Moe(gqa.GqaDecoder):
    """Qwen3MoeForCausalLM over gqa_common.GqaDecoder (q_norm / k_norm on every layer)."""

    def __init__(self, model_dir, dtype=np.float32):
        with open(os.path.join(model_dir, "config.json")) as f:
            c = Config(json.load(f))
        super().__init__(c, bl.Weights(model_dir, dtype, c.block, plain_dtypes=None), dtype)
        self.inv_freq, self.attn_factor = rope_params(c)
        self.expert_inter = c.moe_inter
        self.fit_expert_cache(c.n_experts)

    # --- weights ---------------------------------------------------------------------------
    def check_expert(self, name, rows, cols):
        """An expert's weight (and, when F8_E4M3, its scale's) shape, without decoding it."""
        st, shape = self.wts.st, [rows, cols]
        if list(st.info(name)["shape"]) != shape:
            raise ValueError(f"{name}: shape {st.info(name)['shape']}, expected {shape}")
        if st.info(name)["dtype"] == "F8_E4M3":
            bo, bi = self.c.block
            want = [-(-shape[0] // bo), -(-shape[1] // bi)]
            got = st.info(name + "_scale_inv")["shape"]  # KeyError if missing
            if list(got) != want:
                raise ValueError(f"{name}_scale_inv: shape {got}, expected {want}")
            self.wts.used.add(name + "_scale_inv")
        self.wts.used.add(name)

    def load_layer(self, l):
        c, W = self.c, self.wts
        p = f"model.layers.{l}."
        D = c.head_dim
        lw = self.load_attention(p)
        lw["q_norm"] = W.w(p + "self_attn.q_norm.weight", [D])
        lw["k_norm"] = W.w(p + "self_attn.k_norm.weight", [D])
        self.load_biases(lw, p, ("q", "k", "v", "o"))
        if c.is_moe(l):
            lw["gate"] = W.w(p + "mlp.gate.weight", [c.n_experts, c.hidden])
            self.check_experts(p, c.n_experts, c.moe_inter)
        else:
            lw["mlp"] = bl.load_mlp(W, p + "mlp.", c.inter, c.hidden)
        return lw

    # --- blocks ----------------------------------------------------------------------------
    def route(self, g, lw):
        """Qwen3MoeSparseMoeBlock.forward: softmax over ALL experts, top-k of the probabilities
        (torch.topk sorted=True: descending, the lower index first on ties), divided by their
        sum when norm_topk_prob."""
        c = self.c
        pr = bl.softmax(g)
        idx = bl.topk_desc(pr, c.top_k)
        wts = np.take_along_axis(pr, idx, axis=-1)
        if c.norm_topk:
            wts = wts / wts.sum(axis=-1, keepdims=True)
        return idx, wts, None


def main():
    ap = du.arg_parser(__doc__)
    ap.add_argument("--chunk", type=int, default=0, help=du.CHUNK_HELP)
    ap.add_argument("--stats", action="store_true", help=du.STATS_MARGINS_HELP)
    a = ap.parse_args()

    ids = du.read_prompt(a.prompt_ids)
    m = du.load_model(lambda: Qwen3Moe(a.model_dir, du.compute_dtype(a)))
    du.check_prompt(ids, m.c.vocab)
    logits, dump, greedy_margins, greedy_dumps = du.run(a, m, ids, m.new_cache(), a.chunk,
                                                        errors=(KeyError, ValueError))
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
        stats = du.margin_stats(logits, greedy_margins)
        stats.update({"router_topk_boundary_gap_min_logit": gl,
                      "router_topk_boundary_gap_min_prob": gp,
                      "router_topk_boundary_gap_min_logit_greedy": ggl,
                      "router_topk_boundary_gap_min_prob_greedy": ggp,
                      "moe_layers": moe_layers,
                      "distinct_experts_per_layer": [
                          int(np.unique(dump[f"L{l}.topk_ids"]).size) for l in moe_layers],
                      "n_experts": c.n_experts,
                      "fp8_linears_dequantised": m.wts.n_fp8})
        print(json.dumps(stats), file=sys.stderr)
    du.report_tensors(m.wts)


if __name__ == "__main__":
    main()
