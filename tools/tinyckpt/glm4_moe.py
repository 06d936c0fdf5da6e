#!/usr/bin/python3
"""Writes a random tiny glm4_moe checkpoint in the released zai-org/GLM-4.5-Air layout (bf16),
or with --fp8 as the FP8 releases (compressed-tensors, per-channel FP8).

Owns: the glm4_moe tiny-checkpoint generator (tensor names, dtypes, shapes, config keys, shard
naming) and `expected_tensors(cfg)`, the family's tensor set derived from a config.json (used by
check_layout.py). Layout follows the released names (= the transformers Glm4MoeForCausalLM
state dict before its expert fusing, plus the MTP layer):
  - model.embed_tokens [V, H]; per layer input_layernorm, post_attention_layernorm [H];
    self_attn.{q,k,v}_proj.weight and .bias (bias only when attention_bias), o_proj.weight (no
    bias ever), self_attn.{q,k}_norm [head_dim] only when use_qk_norm; dense layers
    (l < first_k_dense_replace) mlp.{gate,up,down}_proj; MoE layers mlp.gate.weight [E, H]
    BF16 (router), mlp.gate.e_score_correction_bias [E] F32, mlp.experts.E.{gate,up,down}_proj,
    mlp.shared_experts.{gate,up,down}_proj (moe_intermediate_size * n_shared_experts wide);
    model.norm; lm_head (absent with --tie).
  - the MTP layer(s) model.layers.<num_hidden_layers + i>.* (num_nextn_predict_layers of them):
    a full MoE decoder layer as above plus embed_tokens [V, H], enorm, hnorm [H], eh_proj
    [H, 2H], shared_head.norm [H], shared_head.head [V, H]; random values (the forward ignores
    them, as transformers' _keys_to_ignore_on_load_unexpected does).
  - everything BF16 except the F32 e_score_correction_bias; `__metadata__` {"format": "pt"};
    shards model-0000i-of-0000N numbered from 1, tensors cut in model order (embed_tokens,
    layers 0..L-1, the MTP layer(s), model.norm, lm_head: embed in the first shard, lm_head in
    the last); index.json as transformers writes it.
  - config.json: the released GLM-4.5-Air key set (architectures Glm4MoeForCausalLM,
    partial_rotary_factor, n_routed_experts, n_group / topk_group, first_k_dense_replace,
    use_qk_norm, num_nextn_predict_layers, rope_scaling null, eos_token_id a list, ...);
    special ids keep the release's distance from the top of the vocabulary (pad = eos[0] =
    V - 223, eos = [V - 223, V - 216, V - 214], as 151329 / 151336 / 151338 of 151552).

--fp8 (zai-org/GLM-4.5-FP8, -Air-FP8, GLM-4.6-FP8: compressed-tensors checkpoints): every
attention, dense MLP, expert and shared-expert linear is F8_E4M3 with `<name>_scale` [out, 1]
(one scale per output channel; BF16 by default, --scale-dtype F32/F16), quantization_config
{"quant_method": "compressed-tensors", "format": "float-quantized", one config group of 8-bit
symmetric float weights with strategy "channel" and dynamic per-token float activations,
"ignore": lm_head and the routers}, as llm-compressor's FP8_DYNAMIC scheme writes it; the
routers (mlp.gate.weight), embeddings, norms, biases and lm_head stay bf16. The fp8 weights are
the bf16 checkpoint's (same seed) quantised per row (amax / 448, the scale rounded up to its
dtype). This layout was not read off a real index (none was reachable offline).

Weights are scaled so activations stay O(1) (router logits std ~1.5, attention scores std ~1,
logits std ~2); q/k/v biases are large enough to matter; the e_score_correction_bias is drawn
from U(-0.05, 0.35) so it changes a share of the selected experts (slightly negative entries
included, but score + bias stays > 0 in practice, where transformers' 0.0 group-mask fill and
a -inf fill select the same experts); the presets with n_group > 1 make the group limit change
selections too.

CLI:
  glm4_moe.py --out DIR [--seed S] [--preset tiny|tiny2] [--shards N] [--tie] [--nextn N]
              [--fp8 [--scale-dtype BF16|F32|F16]] [--drop TENSOR ...]
              [--hidden H --layers L --dense D --heads Q --kv-heads KV --head-dim HD
               --experts E --topk K --groups G --topk-group TG --shared S --moe-intermediate I
               --intermediate DI --vocab V --partial F --rsf F --rope-theta T
               --qk-norm 0|1 --attn-bias 0|1 --norm-topk 0|1]
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
from st_writer import bf16_normal, bf16_uniform, fp8_channel_quantize, tensor_rng  # noqa: E402

PRESETS = {
    # GQA 4/2, rotary 8 of head_dim 16, 2 groups of 4 experts (1 kept), attention biases
    "tiny": dict(hidden=64, layers=3, dense=1, heads=4, kv_heads=2, head_dim=16, partial=0.5,
                 experts=8, topk=2, groups=2, topk_group=1, shared=1, moe_intermediate=32,
                 intermediate=96, vocab=512, qk_norm=0, attn_bias=1, rsf=1.0, norm_topk=1,
                 rope_theta=1000000.0, seed=4),
    # q width 192 != hidden 96, qk norm, 4 groups (2 kept), 2 shared, 2 dense layers,
    # unnormalised top-k weights times 2.5
    "tiny2": dict(hidden=96, layers=4, dense=2, heads=6, kv_heads=2, head_dim=32, partial=0.5,
                  experts=16, topk=4, groups=4, topk_group=2, shared=2, moe_intermediate=24,
                  intermediate=128, vocab=640, qk_norm=1, attn_bias=1, rsf=2.5, norm_topk=0,
                  rope_theta=1000000.0, seed=10),
}
INT_KEYS = ("hidden", "layers", "dense", "heads", "kv_heads", "head_dim", "experts", "topk",
            "groups", "topk_group", "shared", "moe_intermediate", "intermediate", "vocab",
            "qk_norm", "attn_bias", "norm_topk")
FLOAT_KEYS = ("partial", "rsf", "rope_theta")


def special_ids(vocab):
    # released: pad 151329 = eos[0] (<|endoftext|>), eos [151329, 151336, 151338] of 151552
    return dict(pad=vocab - 223, eos=[vocab - 223, vocab - 216, vocab - 214])


def quant_config(d, nextn):
    """compressed-tensors FP8_DYNAMIC: per-channel weights, dynamic per-token activations."""
    gates = [f"model.layers.{l}.mlp.gate" for l in range(d["dense"], d["layers"] + nextn)]
    return {
        "config_groups": {"group_0": {
            "input_activations": {"actorder": None, "block_structure": None, "dynamic": True,
                                  "group_size": None, "num_bits": 8, "observer": None,
                                  "observer_kwargs": {}, "strategy": "token", "symmetric": True,
                                  "type": "float"},
            "output_activations": None, "targets": ["Linear"],
            "weights": {"actorder": None, "block_structure": None, "dynamic": False,
                        "group_size": None, "num_bits": 8, "observer": "minmax",
                        "observer_kwargs": {}, "strategy": "channel", "symmetric": True,
                        "type": "float"}}},
        "format": "float-quantized", "global_compression_ratio": None,
        "ignore": ["lm_head"] + gates, "kv_cache_scheme": None,
        "quant_method": "compressed-tensors", "quantization_status": "compressed"}


def make_config(d, tie, nextn, fp8=False):
    sp = special_ids(d["vocab"])
    c = {
        "architectures": ["Glm4MoeForCausalLM"],
        "attention_bias": bool(d["attn_bias"]),
        "attention_dropout": 0.0,
        "eos_token_id": sp["eos"],
        "first_k_dense_replace": d["dense"],
        "head_dim": d["head_dim"],
        "hidden_act": "silu",
        "hidden_size": d["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": d["intermediate"],
        "max_position_embeddings": 131072,
        "model_type": "glm4_moe",
        "moe_intermediate_size": d["moe_intermediate"],
        "n_group": d["groups"],
        "n_routed_experts": d["experts"],
        "n_shared_experts": d["shared"],
        "norm_topk_prob": bool(d["norm_topk"]),
        "num_attention_heads": d["heads"],
        "num_experts_per_tok": d["topk"],
        "num_hidden_layers": d["layers"],
        "num_key_value_heads": d["kv_heads"],
        "num_nextn_predict_layers": nextn,
        "pad_token_id": sp["pad"],
        "partial_rotary_factor": d["partial"],
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": d["rope_theta"],
        "routed_scaling_factor": d["rsf"],
        "tie_word_embeddings": bool(tie),
        "topk_group": d["topk_group"],
        "torch_dtype": "bfloat16",
        "transformers_version": "4.54.0",
        "use_cache": True,
        "use_qk_norm": bool(d["qk_norm"]),
        "vocab_size": d["vocab"],
    }
    if fp8:
        c["quantization_config"] = quant_config(d, nextn)
    return c


def generation_config(d):
    sp = special_ids(d["vocab"])
    return {"_from_model_config": True, "eos_token_id": sp["eos"], "pad_token_id": sp["pad"],
            "transformers_version": "4.54.0"}


def check_dims(d):
    errs = []
    if min(d[k] for k in ("hidden", "layers", "heads", "kv_heads", "head_dim", "experts", "topk",
                          "groups", "topk_group", "moe_intermediate", "intermediate")) < 1:
        errs.append("dimensions must be positive")
    elif d["heads"] % d["kv_heads"]:
        errs.append("heads must be a multiple of kv-heads")
    rot = int(d["head_dim"] * d["partial"])
    if rot % 2 or not 0 < rot <= d["head_dim"]:
        errs.append(f"rotary dim int(head_dim * partial) = {rot} must be even, in (0, head_dim]")
    if d["experts"] % d["groups"] or d["experts"] // d["groups"] < 2:
        errs.append("experts must be a multiple of groups, >= 2 per group")
    elif not (d["topk_group"] <= d["groups"]
              and d["topk"] <= d["topk_group"] * d["experts"] // d["groups"]):
        errs.append("topk must fit in topk_group groups")
    if not 0 <= d["dense"] < d["layers"]:
        errs.append("need 0 <= dense < layers (some MoE layer)")
    if d["shared"] < 0:
        errs.append("shared must be >= 0")
    if d["vocab"] < 256:
        errs.append("vocab must be >= 256 (special ids live 223 below the top)")
    if errs:
        sys.exit("bad dimensions: " + "; ".join(errs))


def expected_tensors(cfg, scale_dtype="BF16"):
    """{name: (dtype, shape)} of a released-layout glm4_moe checkpoint for this config.json
    (main layers, then the num_nextn_predict_layers MTP layers); with a compressed-tensors
    quantization_config the linears are F8_E4M3 + weight_scale [out, 1] in scale_dtype."""
    H, V, D = cfg["hidden_size"], cfg["vocab_size"], cfg.get("head_dim") or \
        cfg["hidden_size"] // cfg["num_attention_heads"]
    Q, KV = cfg["num_attention_heads"] * D, cfg["num_key_value_heads"] * D
    E, I, DI = cfg["n_routed_experts"], cfg["moe_intermediate_size"], cfg["intermediate_size"]
    SI = I * (cfg.get("n_shared_experts") or 0)
    L = cfg["num_hidden_layers"]
    t = {"model.embed_tokens.weight": ("BF16", [V, H])}
    q = cfg.get("quantization_config")
    lin = functools.partial(sw.expect_linear, t, fp8=bool(q), scale_dtype=scale_dtype,
                            channel=True)

    def layer(l):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = ("BF16", [H])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [H])
        for n, rows in (("q", Q), ("k", KV), ("v", KV)):
            lin(p + f"self_attn.{n}_proj.weight", rows, H)
            if cfg.get("attention_bias"):
                t[p + f"self_attn.{n}_proj.bias"] = ("BF16", [rows])
        lin(p + "self_attn.o_proj.weight", H, Q)
        if cfg.get("use_qk_norm"):
            t[p + "self_attn.q_norm.weight"] = ("BF16", [D])
            t[p + "self_attn.k_norm.weight"] = ("BF16", [D])
        if l < cfg["first_k_dense_replace"]:
            sw.expect_mlp(lin, p + "mlp.", DI, H)
            return
        sw.expect_biased_moe(t, lin, p, E, I, SI, H)

    for l in range(L):
        layer(l)
    sw.expect_mtp_layers(t, cfg, layer)
    t["model.norm.weight"] = ("BF16", [H])
    if not cfg.get("tie_word_embeddings"):
        t["lm_head.weight"] = ("BF16", [V, H])
    return t


# --- tensor makers (each draws from its own per-name stream) -------------------------------
def bf16_linear(seed):
    """lin(name, rows, cols, std): a BF16 linear weight."""
    return lambda name, rows, cols, std: bf16_normal(seed, name, (rows, cols), std)


def fp8_linear(seed, scale_dtype):
    """lin(name, rows, cols, std): the BF16 weight of the same seed quantised per channel,
    as F8_E4M3 `name` + `name_scale` [rows, 1]."""
    def lin(name, rows, cols, std):
        memo = {}

        def quant(part):
            if not memo:
                (_, _, _, make), = bf16_normal(seed, name, (rows, cols), std)
                w = (make().astype(np.uint32) << 16).view(np.float32)
                memo["codes"], memo["raw"] = fp8_channel_quantize(w, scale_dtype)
            return memo.pop(part)
        return [(name, "F8_E4M3", [rows, cols], lambda: quant("codes")),
                (name + "_scale", scale_dtype, [rows, 1], lambda: quant("raw"))]
    return lin


def layer_tensors(d, seed, l, lin=None):
    H, D = d["hidden"], d["head_dim"]
    Q, KV = d["heads"] * D, d["kv_heads"] * D
    E, I, DI = d["experts"], d["moe_intermediate"], d["intermediate"]
    p = f"model.layers.{l}."
    a = p + "self_attn."
    lin = lin or bf16_linear(seed)
    t = bf16_uniform(seed, p + "input_layernorm.weight", (H,), 0.8, 1.2)
    # q/k rms ~1.2 per channel (x the per-head norm when used) -> scores std ~1
    for n, rows in (("q", Q), ("k", KV), ("v", KV)):
        t += lin(a + f"{n}_proj.weight", rows, H, 1.2 / math.sqrt(H))
        if d["attn_bias"]:
            t += bf16_normal(seed, a + f"{n}_proj.bias", (rows,), 0.5)
    t += lin(a + "o_proj.weight", H, Q, 1.0 / math.sqrt(Q))
    if d["qk_norm"]:
        t += bf16_uniform(seed, a + "q_norm.weight", (D,), 0.8, 1.6)
        t += bf16_uniform(seed, a + "k_norm.weight", (D,), 0.8, 1.6)
    t += bf16_uniform(seed, p + "post_attention_layernorm.weight", (H,), 0.8, 1.2)
    if l < d["dense"]:
        return t + sw.mlp_tensors(lin, p + "mlp.", DI, H, 1.0 / math.sqrt(DI))
    t += bf16_normal(seed, p + "mlp.gate.weight", (E, H), 1.5 / math.sqrt(H))
    name = p + "mlp.gate.e_score_correction_bias"
    t += sw.f32_array(name, (E,), lambda name=name: tensor_rng(seed, name)
                      .uniform(-0.05, 0.35, (E,)))
    # routed outputs summed with total weight ~rsf (normalised) or ~rsf * topk * 0.6
    mass = d["rsf"] * (1.0 if d["norm_topk"] else 0.6 * d["topk"])
    for e in range(E):
        t += sw.mlp_tensors(lin, p + f"mlp.experts.{e}.", I, H, 1.5 / math.sqrt(I) / mass)
    SI = I * d["shared"]
    if SI:
        t += sw.mlp_tensors(lin, p + "mlp.shared_experts.", SI, H, 1.0 / math.sqrt(SI))
    return t


def model_tensors(d, seed, tie, nextn, scale_dtype=None):
    """All tensors in the order the shards are cut in (see the module docstring); with a
    scale_dtype the linears are per-channel FP8."""
    H, V, L = d["hidden"], d["vocab"], d["layers"]
    lin = fp8_linear(seed, scale_dtype) if scale_dtype else None
    t = bf16_normal(seed, "model.embed_tokens.weight", (V, H), 1.0)
    for l in range(L):
        t += layer_tensors(d, seed, l, lin)
    for l in range(L, L + nextn):
        t += sw.mtp_layer_tensors(seed, l, V, H, layer_tensors(d, seed, l, lin))
    return t + sw.final_tensors(seed, V, H, tie)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int,
                    help="default: the preset's seed (tiny 4, tiny2 10), chosen so that with "
                         "tests/models/lib.sh prompt_ids V SEED and 32 greedy steps the top1-top2 "
                         "logit margins are >= 0.0079 and the router / group top-k boundary gaps "
                         ">= 1.9e-3")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--shards", type=int, default=3, help="1 = single model.safetensors")
    ap.add_argument("--tie", action="store_true",
                    help="tie_word_embeddings true, no lm_head.weight (not the released layout)")
    ap.add_argument("--nextn", type=int, default=1,
                    help="num_nextn_predict_layers: MTP layers written (released: 1)")
    ap.add_argument("--fp8", action="store_true",
                    help="the FP8 releases' layout: compressed-tensors, per-channel FP8 linears")
    ap.add_argument("--scale-dtype", choices=("BF16", "F32", "F16"), default="BF16",
                    help="with --fp8: dtype of weight_scale")
    for k in INT_KEYS:
        ap.add_argument("--" + k.replace("_", "-"), type=int, dest=k)
    for k in FLOAT_KEYS:
        ap.add_argument("--" + k.replace("_", "-"), type=float, dest=k)
    sw.add_drop_arg(ap)
    a = ap.parse_args()
    d = dict(PRESETS[a.preset])
    d.update({k: getattr(a, k) for k in INT_KEYS + FLOAT_KEYS if getattr(a, k) is not None})
    seed = d.pop("seed") if a.seed is None else a.seed
    d.pop("seed", None)
    check_dims(d)
    if a.shards < 1:
        sys.exit("--shards must be >= 1")
    if a.nextn < 0:
        sys.exit("--nextn must be >= 0")

    t0 = time.time()
    tensors = model_tensors(d, seed, a.tie, a.nextn, a.scale_dtype if a.fp8 else None)
    cfg = make_config(d, a.tie, a.nextn, a.fp8)
    expected = expected_tensors(cfg, a.scale_dtype)
    sw.write_model(a, tensors, cfg, generation_config(d), t0, {"format": "pt"},
                   expected=expected)


if __name__ == "__main__":
    main()
