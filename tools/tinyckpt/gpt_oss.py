#!/usr/bin/python3
"""Writes a random tiny gpt-oss checkpoint in the released openai/gpt-oss-20b HF layout.

Owns: the gpt_oss tiny-checkpoint generator (tensor names, dtypes, shapes, config keys, shard
naming). Layout follows huggingface/transformers models/gpt_oss/convert_gpt_oss_weights_to_hf.py
(write_model, mxfp4 branch, save_sharded_model): q/k/v split from qkv, bf16 dense weights,
biases and sinks; experts kept as MXFP4 `*_blocks` U8 [E, rows, cols/32, 16] and `*_scales` U8
[E, rows, cols/32] with gate_up rows interleaved (row 2j = gate j, row 2j+1 = up j, as
openai/gpt-oss gpt_oss/torch/model.py swiglu reads x[..., ::2] / x[..., 1::2]); no
`__metadata__`; shards numbered from zero (model-00000-of-0000{N-1}). The config key set is the
released config.json's (as in /work/shared/fixtures/gpt_oss/config.json).

Weights are scaled so activations stay O(1) and every feature matters: non-zero sinks and
biases, YaRN on (factor 32, beta 32/1, truncate false, original context 256 so the ramp falls
on fast-rotating dims), ~8 % of gate_up biases beyond +-swiglu_limit so the clamp fires, a
small sliding window, top-k < experts.

CLI:
  gpt_oss.py --out DIR [--seed S] [--preset tiny|tiny2|small] [--shards N]
             [--hidden H --layers L --heads Q --kv-heads KV --head-dim D --experts E --topk K
              --intermediate I --vocab V --sliding-window W] [--orig-ctx C] [--drop TENSOR]
"""
import argparse
import math
import os
import sys
import time

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_writer as sw  # noqa: E402
from st_writer import bf16_uniform, f32_to_bf16, tensor_rng  # noqa: E402

bf16_normal = sw.bf16_normal_mean0   # this generator adds the mean (0.0) in float32

PRESETS = {
    "tiny": dict(hidden=64, layers=3, heads=4, kv_heads=2, head_dim=16, experts=6, topk=2,
                 intermediate=32, vocab=256, sliding_window=4),
    # q width 192 != hidden 96, intermediate 64 != hidden
    "tiny2": dict(hidden=96, layers=4, heads=6, kv_heads=2, head_dim=32, experts=8, topk=3,
                  intermediate=64, vocab=320, sliding_window=6),
    # ~0.55 GB on disk, for benchmarks
    "small": dict(hidden=1024, layers=8, heads=16, kv_heads=4, head_dim=64, experts=32, topk=4,
                  intermediate=1024, vocab=32000, sliding_window=128),
}

ROPE_THETA = 150000
# Released: initial_context_length = original_max_position_embeddings = 4096. Here 256 by
# default: the YaRN ramp then covers the fast-rotating dims (low ~0.2, high ~2.5 of 8 for
# head_dim 16), so it and truncate:false visibly change a 32-token prompt, while upstream's
# assert 0 < low < high < d_half - 1 (needs > 2*pi*32 = 201) still holds.
ORIG_CTX = 256
YARN_FACTOR = 32.0
SWIGLU_LIMIT = 7.0
FP4_RMS = math.sqrt(sum(v * v for v in [0, .5, 1, 1.5, 2, 3, 4, 6]) / 8)  # random codes


def special_ids(vocab):
    # The released ids sit at the top of the vocabulary (<|startoftext|> 199998,
    # <|endoftext|> 199999, <|return|> 200002, <|call|> 200012 of 201088); keep the same
    # distances from the end, as the fixture does.
    return dict(bos=vocab - 20, pad=vocab - 19, eos=vocab - 16, call=vocab - 6)


def yarn(d):
    return dict(beta_fast=32.0, beta_slow=1.0, factor=YARN_FACTOR,
                original_max_position_embeddings=d["orig_ctx"], rope_type="yarn",
                truncate=False)


def make_config(d):
    sp = special_ids(d["vocab"])
    return {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": sp["eos"],
        "experts_per_token": d["topk"],
        "head_dim": d["head_dim"],
        "hidden_act": "silu",
        "hidden_size": d["hidden"],
        "initial_context_length": d["orig_ctx"],
        "initializer_range": 0.02,
        "intermediate_size": d["intermediate"],
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention"
                        for i in range(d["layers"])],
        # released 131072 = 4096 * 32: keep HF's implicit factor equal to rope_scaling.factor
        "max_position_embeddings": int(d["orig_ctx"] * YARN_FACTOR),
        "model_type": "gpt_oss",
        "num_attention_heads": d["heads"],
        "num_experts_per_tok": d["topk"],
        "num_hidden_layers": d["layers"],
        "num_key_value_heads": d["kv_heads"],
        "num_local_experts": d["experts"],
        "output_router_logits": False,
        "pad_token_id": sp["pad"],
        "quantization_config": {
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"],
            "quant_method": "mxfp4",
        },
        "rms_norm_eps": 1e-05,
        "rope_scaling": yarn(d),
        "rope_theta": ROPE_THETA,
        "router_aux_loss_coef": 0.9,
        "sliding_window": d["sliding_window"],
        "swiglu_limit": SWIGLU_LIMIT,
        "tie_word_embeddings": False,
        "transformers_version": "4.55.0.dev0",
        "use_cache": True,
        "vocab_size": d["vocab"],
    }


def generation_config(d):
    sp = special_ids(d["vocab"])
    return {"bos_token_id": sp["bos"], "do_sample": True,
            "eos_token_id": [sp["eos"], sp["pad"], sp["call"]],
            "pad_token_id": sp["pad"], "transformers_version": "4.55.0.dev0"}


def check_dims(d):
    errs = []
    if d["hidden"] % 32 or d["intermediate"] % 32:
        errs.append("hidden and intermediate must be multiples of 32 (MXFP4 groups)")
    if d["heads"] % d["kv_heads"]:
        errs.append("heads must be a multiple of kv-heads")
    if d["head_dim"] % 2:
        errs.append("head-dim must be even")
    if not 0 < d["topk"] < d["experts"]:
        errs.append("need 0 < topk < experts")
    if d["vocab"] < 32:
        errs.append("vocab must be >= 32 (special ids live in the top 20)")
    # openai/gpt-oss model.py asserts 0 < low < high < d_half - 1 for the YaRN ramp
    d_half = d["head_dim"] / 2
    y = yarn(d)
    low = d_half * math.log(d["orig_ctx"] / (y["beta_fast"] * 2 * math.pi)) / math.log(ROPE_THETA)
    high = d_half * math.log(d["orig_ctx"] / (y["beta_slow"] * 2 * math.pi)) / math.log(ROPE_THETA)
    if not 0 < low < high < d_half - 1:
        errs.append(f"head-dim {d['head_dim']} / orig-ctx {d['orig_ctx']} break the YaRN "
                    f"ramp (low {low:.2f}, high "
                    f"{high:.2f}, d_half-1 {d_half - 1})")
    if errs:
        sys.exit("bad dimensions: " + "; ".join(errs))


# --- tensor makers (each draws from its own per-name stream) -------------------------------
def gate_up_bias(seed, name, shape):
    def make():
        r = tensor_rng(seed, name)
        b = r.standard_normal(shape, dtype=np.float32) * np.float32(0.5)
        # ~8 % beyond the clamp (|b| in [7.5, 10]) so both clamps really fire
        hit = r.random(shape) < 0.08
        big = r.uniform(7.5, 10.0, shape) * np.where(r.random(shape) < 0.5, -1.0, 1.0)
        return f32_to_bf16(np.where(hit, big, b).astype(np.float32))
    return [(name, "BF16", list(shape), make)]


def mxfp4(seed, name, e, rows, cols, target_rms):
    """*_blocks: uniformly random FP4 codes; *_scales: E8M0 exponents around the value that
    gives an output of rms `target_rms` for unit-rms inputs of width `cols`."""
    g = cols // 32
    center = round(math.log2(target_rms / (FP4_RMS * math.sqrt(cols))))

    def blocks():
        # raw 64-bit draws viewed as bytes: uniform codes at memory speed
        raw = tensor_rng(seed, name + "_blocks").bit_generator.random_raw(e * rows * g * 2)
        return raw.view(np.uint8).reshape(e, rows, g, 16)

    def scales():
        r = tensor_rng(seed, name + "_scales")
        return (127 + center + r.integers(-1, 2, (e, rows, g))).astype(np.uint8)

    return [(name + "_blocks", "U8", [e, rows, g, 16], blocks),
            (name + "_scales", "U8", [e, rows, g], scales)]


def model_tensors(d, seed):
    """All tensors in model order (the order a release cuts shards in)."""
    H, V, E, I = d["hidden"], d["vocab"], d["experts"], d["intermediate"]
    Q, KV = d["heads"] * d["head_dim"], d["kv_heads"] * d["head_dim"]
    t = bf16_normal(seed, "model.embed_tokens.weight", (V, H), 1.0)
    for l in range(d["layers"]):
        p = f"model.layers.{l}."
        t += (bf16_uniform(seed, p + "input_layernorm.weight", (H,), 0.8, 1.2)
              + bf16_normal(seed, p + "self_attn.q_proj.weight", (Q, H), 1.2 / math.sqrt(H))
              + bf16_normal(seed, p + "self_attn.q_proj.bias", (Q,), 0.2)
              + bf16_normal(seed, p + "self_attn.k_proj.weight", (KV, H), 1.2 / math.sqrt(H))
              + bf16_normal(seed, p + "self_attn.k_proj.bias", (KV,), 0.2)
              + bf16_normal(seed, p + "self_attn.v_proj.weight", (KV, H), 1.0 / math.sqrt(H))
              + bf16_normal(seed, p + "self_attn.v_proj.bias", (KV,), 0.2)
              + bf16_normal(seed, p + "self_attn.o_proj.weight", (H, Q), 1.0 / math.sqrt(Q))
              + bf16_normal(seed, p + "self_attn.o_proj.bias", (H,), 0.2)
              + bf16_normal(seed, p + "self_attn.sinks", (d["heads"],), 1.0)
              + bf16_uniform(seed, p + "post_attention_layernorm.weight", (H,), 0.8, 1.2)
              + bf16_normal(seed, p + "mlp.router.weight", (E, H), 1.0 / math.sqrt(H))
              + bf16_normal(seed, p + "mlp.router.bias", (E,), 0.3))
        # gate/up pre-activations of rms ~2; the swiglu output (~4.5 rms with the clamped
        # bias entries) mapped back to rms ~1 by down_proj
        t += mxfp4(seed, p + "mlp.experts.gate_up_proj", E, 2 * I, H, 2.0)
        t += gate_up_bias(seed, p + "mlp.experts.gate_up_proj_bias", (E, 2 * I))
        t += mxfp4(seed, p + "mlp.experts.down_proj", E, H, I, 1.0 / 4.5)
        t += bf16_normal(seed, p + "mlp.experts.down_proj_bias", (E, H), 0.2)
    return t + sw.final_tensors(seed, V, H, normal=bf16_normal)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--shards", type=int, default=3, help="1 = single model.safetensors")
    for k in PRESETS["tiny"]:
        ap.add_argument("--" + k.replace("_", "-"), type=int, dest=k)
    ap.add_argument("--orig-ctx", type=int, default=ORIG_CTX,
                    help="initial_context_length = rope_scaling.original_max_position_embeddings")
    sw.add_drop_arg(ap)
    a = ap.parse_args()
    d = dict(PRESETS[a.preset])
    d.update({k: getattr(a, k) for k in d if getattr(a, k) is not None})
    d["orig_ctx"] = a.orig_ctx
    check_dims(d)
    if a.shards < 1:
        sys.exit("--shards must be >= 1")

    t0 = time.time()
    # gpt-oss shards are numbered from zero and carry no __metadata__ (save_sharded_model)
    sw.write_model(a, model_tensors(d, a.seed), make_config(d), generation_config(d), t0,
                   None, zero_based=True)


if __name__ == "__main__":
    main()
