#!/usr/bin/python3
"""Writes a random tiny Qwen3-MoE checkpoint in the released Qwen/Qwen3-30B-A3B layout (bf16),
or with --fp8 in the Qwen/Qwen3-30B-A3B-FP8 layout.

Owns: the qwen3_moe tiny-checkpoint generator (tensor names, dtypes, shapes, config keys, shard
naming) and `expected_tensors(cfg)`, the family's tensor set derived from a config.json (used by
check_layout.py). Layout follows the transformers Qwen3MoeForCausalLM state dict (= the released
names): model.embed_tokens, per layer self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm [head_dim],
mlp.gate [experts, hidden] (router), mlp.experts.E.{gate,up,down}_proj per expert (dense
mlp.{gate,up,down}_proj on mlp_only_layers / decoder_sparse_step gaps), input_layernorm,
post_attention_layernorm; model.norm; lm_head (absent with --tie). bf16 everywhere, `__metadata__`
{"format": "pt"}, shards model-0000i-of-0000N numbered from 1, tensors in model order (the order
above), index.json as transformers writes it. The config key set is the released config.json's
(as /work/shared/fixtures/qwen3_moe*/config.json).

--fp8 (Qwen3-*-FP8 release): every attention and expert (and dense MLP) linear is F8_E4M3 with
`<name>_scale_inv` [ceil(out/128), ceil(in/128)] (BF16 by default, --scale-dtype F32/F16 for the
variants other Qwen3 FP8 files use), quantization_config {"quant_method": "fp8", "fmt": "e4m3",
"weight_block_size": [128, 128], "activation_scheme": "dynamic"}; embed, lm_head, norms and the
router stay bf16. The fp8 weights are the bf16 checkpoint's (same seed) quantised per block
(scale = amax/448 rounded up to the scale dtype), so the two are close but not identical.

Weights are scaled so activations stay O(1) (logit std ~2, router logits std ~1, attention
scores std ~1); about 1/256 of every linear's entries are multiplied by 10^U(-7,-3) so that
FP8 blocks contain subnormal and zero codes.

CLI:
  qwen3_moe.py --out DIR [--seed S] [--preset tiny|tiny2|small] [--fp8 [--scale-dtype BF16]]
               [--shards N] [--tie] [--drop TENSOR ...]
               [--hidden H --layers L --heads Q --kv-heads KV --head-dim D --experts E --topk K
                --moe-intermediate I --intermediate DI --vocab V --mlp-only-layers 1,3
                --sparse-step S]
"""
import argparse
import functools
import math
import os
import sys
import time

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_writer as sw  # noqa: E402
from st_writer import (bf16_normal, bf16_uniform, f32_to_bf16,  # noqa: E402
                       fp8_block_quantize, tensor_rng)

RELEASED_INTERMEDIATE = 6144   # Qwen3-30B-A3B intermediate_size: unused when no layer is dense
PRESETS = {
    # q width 128 != hidden 64; moe_intermediate 48 -> ragged FP8 blocks
    "tiny": dict(hidden=64, layers=3, heads=4, kv_heads=2, head_dim=32, experts=8, topk=2,
                 moe_intermediate=48, intermediate=RELEASED_INTERMEDIATE, vocab=256,
                 mlp_only_layers=[], sparse_step=1, seed=8),
    # a dense layer (mlp_only_layers [1], intermediate 128), hidden 160 ragged in FP8 blocks
    "tiny2": dict(hidden=160, layers=4, heads=8, kv_heads=4, head_dim=32, experts=6, topk=3,
                  moe_intermediate=96, intermediate=128, vocab=384, mlp_only_layers=[1],
                  sparse_step=1, seed=30),
    # for benchmarks: ~1.4 GB bf16, ~0.77 GB fp8
    "small": dict(hidden=1024, layers=8, heads=16, kv_heads=4, head_dim=64, experts=64, topk=8,
                  moe_intermediate=384, intermediate=RELEASED_INTERMEDIATE, vocab=32000,
                  mlp_only_layers=[], sparse_step=1, seed=0),
}
QUANT_CONFIG = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                "weight_block_size": [128, 128]}


def special_ids(vocab):
    # released: <|endoftext|> 151643 (bos, pad), <|im_end|> 151645 (eos) near the top of the
    # vocabulary; here 40 ids below the top, im_end = endoftext + 2 as released
    return dict(bos=vocab - 40, eos=vocab - 38)


def is_moe(d, l):
    return (l not in d["mlp_only_layers"] and d["experts"] > 0
            and (l + 1) % d["sparse_step"] == 0)


def make_config(d, fp8, tie):
    sp = special_ids(d["vocab"])
    cfg = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": sp["bos"],
        "decoder_sparse_step": d["sparse_step"],
        "eos_token_id": sp["eos"],
        "head_dim": d["head_dim"],
        "hidden_act": "silu",
        "hidden_size": d["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": d["intermediate"],
        "max_position_embeddings": 40960,
        "max_window_layers": d["layers"],
        "mlp_only_layers": list(d["mlp_only_layers"]),
        "model_type": "qwen3_moe",
        "moe_intermediate_size": d["moe_intermediate"],
        "norm_topk_prob": True,
        "num_attention_heads": d["heads"],
        "num_experts": d["experts"],
        "num_experts_per_tok": d["topk"],
        "num_hidden_layers": d["layers"],
        "num_key_value_heads": d["kv_heads"],
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001,
        "sliding_window": None,
        "tie_word_embeddings": bool(tie),
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": d["vocab"],
    }
    if fp8:
        cfg["quantization_config"] = dict(QUANT_CONFIG)
    return cfg


def generation_config(d):
    sp = special_ids(d["vocab"])
    return {"bos_token_id": sp["bos"], "do_sample": True, "eos_token_id": [sp["eos"], sp["bos"]],
            "pad_token_id": sp["bos"], "temperature": 0.6, "top_k": 20, "top_p": 0.95,
            "transformers_version": "4.51.0"}


def check_dims(d):
    errs = []
    if min(d[k] for k in ("hidden", "layers", "heads", "kv_heads", "head_dim", "moe_intermediate",
                          "intermediate")) < 1:
        errs.append("dimensions must be positive")
    elif d["heads"] % d["kv_heads"]:
        errs.append("heads must be a multiple of kv-heads")
    if d["head_dim"] % 2:
        errs.append("head-dim must be even")
    if d["experts"] < 0 or (d["experts"] > 0 and not 0 < d["topk"] <= d["experts"]):
        errs.append("need 0 < topk <= experts")
    if d["vocab"] < 64:
        errs.append("vocab must be >= 64 (special ids live 40 below the top)")
    if d["sparse_step"] < 1:
        errs.append("sparse-step must be >= 1")
    if any(not 0 <= l < d["layers"] for l in d["mlp_only_layers"]):
        errs.append("mlp-only-layers out of range")
    if errs:
        sys.exit("bad dimensions: " + "; ".join(errs))


def expected_tensors(cfg):
    """{name: (dtype, shape)} of a released-layout qwen3_moe checkpoint for this config.json
    (FP8 when it has a quantization_config; its scale dtype is taken as BF16 unless told)."""
    return _expected(cfg, None)


def _expected(cfg, scale_dtype):
    H, V, D = cfg["hidden_size"], cfg["vocab_size"], cfg["head_dim"]
    Q, KV = cfg["num_attention_heads"] * D, cfg["num_key_value_heads"] * D
    E, I, DI = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["intermediate_size"]
    q = cfg.get("quantization_config")
    bo, bi = (q or {}).get("weight_block_size", [128, 128])
    sd = scale_dtype or "BF16"
    d = dict(mlp_only_layers=cfg.get("mlp_only_layers") or [], experts=E,
             sparse_step=cfg.get("decoder_sparse_step", 1))
    t = {"model.embed_tokens.weight": ("BF16", [V, H]), "model.norm.weight": ("BF16", [H])}
    if not cfg.get("tie_word_embeddings"):
        t["lm_head.weight"] = ("BF16", [V, H])

    lin = functools.partial(sw.expect_linear, t, fp8=bool(q), scale_dtype=sd, block=(bo, bi))
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        lin(p + "self_attn.q_proj.weight", Q, H)
        lin(p + "self_attn.k_proj.weight", KV, H)
        lin(p + "self_attn.v_proj.weight", KV, H)
        lin(p + "self_attn.o_proj.weight", H, Q)
        t[p + "self_attn.q_norm.weight"] = ("BF16", [D])
        t[p + "self_attn.k_norm.weight"] = ("BF16", [D])
        t[p + "input_layernorm.weight"] = ("BF16", [H])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [H])
        if is_moe(d, l):
            t[p + "mlp.gate.weight"] = ("BF16", [E, H])
            for e in range(E):
                sw.expect_mlp(lin, p + f"mlp.experts.{e}.", I, H)
        else:
            sw.expect_mlp(lin, p + "mlp.", DI, H)
    return t


# --- tensor makers (each draws from its own per-name stream) -------------------------------
def linear_base(seed, name, shape, std):
    """The bf16 bits of a linear's weight; ~1/256 of the entries shrunk by 10^U(-7,-3) (same
    in the bf16 and fp8 variants) so that FP8 blocks hold subnormal and zero codes."""
    r = tensor_rng(seed, name)
    w = r.standard_normal(shape, dtype=np.float32)
    w *= np.float32(std)
    flat = w.reshape(-1)
    k = max(1, flat.size // 256)
    at = r.integers(0, flat.size, k)
    flat[at] *= np.power(10.0, r.uniform(-7, -3, k)).astype(np.float32)
    return f32_to_bf16(w)


def linear(seed, name, shape, std, fp8, scale_dtype):
    if not fp8:
        return [(name, "BF16", list(shape), lambda: linear_base(seed, name, shape, std))]
    memo = {}

    def quant():
        if not memo:
            bits = linear_base(seed, name, shape, std)
            w = (bits.astype(np.uint32) << 16).view(np.float32)
            codes, raw, _ = fp8_block_quantize(w, (128, 128), scale_dtype)
            memo.update(codes=codes, raw=raw, left=2)
        memo["left"] -= 1
        out = memo
        if memo["left"] == 0:            # both written: free the memory
            out = dict(memo)
            memo.clear()
        return out

    rows, cols = shape
    sshape = [-(-rows // 128), -(-cols // 128)]
    return [(name, "F8_E4M3", list(shape), lambda: quant()["codes"]),
            (name + "_scale_inv", scale_dtype, sshape, lambda: quant()["raw"])]


def model_tensors(d, seed, fp8=False, scale_dtype="BF16", tie=False):
    """All tensors in model order (the order a release cuts shards in)."""
    H, V, E, I, DI = d["hidden"], d["vocab"], d["experts"], d["moe_intermediate"], d["intermediate"]
    D = d["head_dim"]
    Q, KV = d["heads"] * D, d["kv_heads"] * D

    def lin(name, rows, cols, std):
        return linear(seed, name, (rows, cols), std, fp8, scale_dtype)

    t = bf16_normal(seed, "model.embed_tokens.weight", (V, H), 1.0)
    for l in range(d["layers"]):
        p = f"model.layers.{l}."
        t += lin(p + "self_attn.q_proj.weight", Q, H, 1.0 / math.sqrt(H))
        t += lin(p + "self_attn.k_proj.weight", KV, H, 1.0 / math.sqrt(H))
        t += lin(p + "self_attn.v_proj.weight", KV, H, 1.0 / math.sqrt(H))
        t += lin(p + "self_attn.o_proj.weight", H, Q, 1.0 / math.sqrt(Q))
        # per-head norms: |q|, |k| rms ~1.2 -> attention scores std ~1.5
        t += bf16_uniform(seed, p + "self_attn.q_norm.weight", (D,), 0.8, 1.6)
        t += bf16_uniform(seed, p + "self_attn.k_norm.weight", (D,), 0.8, 1.6)
        if is_moe(d, l):
            t += bf16_normal(seed, p + "mlp.gate.weight", (E, H), 1.0 / math.sqrt(H))
            for e in range(E):
                t += sw.mlp_tensors(lin, p + f"mlp.experts.{e}.", I, H, 1.0 / math.sqrt(I))
        else:
            t += sw.mlp_tensors(lin, p + "mlp.", DI, H, 1.0 / math.sqrt(DI))
        t += bf16_uniform(seed, p + "input_layernorm.weight", (H,), 0.8, 1.2)
        t += bf16_uniform(seed, p + "post_attention_layernorm.weight", (H,), 0.8, 1.2)
    return t + sw.final_tensors(seed, V, H, tie)


def parse_layers(s):
    return [int(x) for x in s.split(",") if x.strip()] if s else []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int,
                    help="default: the preset's seed (tiny 8, tiny2 30, small 0), chosen so that "
                         "the bf16 and fp8 variants have wide argmax margins on the test prompt")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--fp8", action="store_true", help="Qwen3-30B-A3B-FP8 layout")
    ap.add_argument("--scale-dtype", choices=["BF16", "F32", "F16"], default="BF16",
                    help="dtype of weight_scale_inv with --fp8 (released: BF16)")
    ap.add_argument("--shards", type=int, default=3, help="1 = single model.safetensors")
    ap.add_argument("--tie", action="store_true",
                    help="tie_word_embeddings true, no lm_head.weight (not the released layout)")
    for k in PRESETS["tiny"]:
        if k not in ("mlp_only_layers", "seed"):
            ap.add_argument("--" + k.replace("_", "-"), type=int, dest=k)
    ap.add_argument("--mlp-only-layers", dest="mlp_only_layers", type=parse_layers,
                    help="comma-separated dense layer indices ('' for none)")
    sw.add_drop_arg(ap)
    a = ap.parse_args()
    d = dict(PRESETS[a.preset])
    d.update({k: getattr(a, k) for k in d if getattr(a, k) is not None})
    seed = d.pop("seed")
    check_dims(d)
    if a.shards < 1:
        sys.exit("--shards must be >= 1")

    t0 = time.time()
    tensors = model_tensors(d, seed, a.fp8, a.scale_dtype, a.tie)
    cfg = make_config(d, a.fp8, a.tie)
    sw.write_model(a, tensors, cfg, generation_config(d), t0, {"format": "pt"},
                   expected=_expected(cfg, a.scale_dtype))


if __name__ == "__main__":
    main()
