#!/usr/bin/python3
"""Writes a random tiny DeepSeek-V3 checkpoint in the released deepseek-ai/DeepSeek-V3 layout.

Owns: the deepseek_v3 tiny-checkpoint generator (tensor names, dtypes, shapes, config keys,
shard naming), its layout check (--check), and the helpers the longcat_flash generator shares
(own block-FP8 quantiser, release-style shard writing, MLA-family layout check, the --out /
--check command line). Tensor makers and the MLP / MTP layouts shared with the other
generators are in st_writer.py, the container checks in check_layout.py.

Layout (as /work/shared/fixtures/deepseek_v3, whose meta.json format_sources cite
deepseek-ai/DeepSeek-V3 README_WEIGHTS.md, inference/convert.py and vLLM deepseek_mtp.py):
  - every Linear weight of attention (q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj,
    o_proj), of the dense MLPs, routed and shared experts: F8_E4M3 `X.weight` [out, in] +
    F32 `X.weight_scale_inv` [ceil(out/128), ceil(in/128)] (W = fp8 * scale per block, edge
    blocks partial); BF16: embed_tokens, lm_head, all norms, mlp.gate.weight (router), MTP
    eh_proj / enorm / hnorm / shared_head.*; F32: mlp.gate.e_score_correction_bias.
  - the MTP layer model.layers.<num_hidden_layers>.* (a full MoE decoder layer plus
    embed_tokens, enorm, hnorm, eh_proj [H, 2H], shared_head.norm, shared_head.head) stored
    after lm_head, alone in the last shard; shards model-0000k-of-00000N with a SIX-digit
    total (model-00001-of-000163 in the release); __metadata__ {"format": "pt"}.
  - config.json / generation_config.json: the fixture's key sets (the released ones).
Dimensions are deliberately unlike the release and every feature is active: first dense
layers, odd head counts, YaRN (factor, small original context so the ramp covers the fast
dims, mscale = mscale_all_dim), sigmoid router whose group limit (n_group / topk_group, group
score = top-2 sum) and non-negative correction bias both change the selected sets, shared
experts, dimensions not multiples of 128 (ragged FP8 blocks in both directions), per-block
gains so a wrong scale index is visible, and fp8 subnormal / zero codes.

CLI:
  deepseek_v3.py --out DIR [--seed S] [--preset tiny|tiny2|wide] [--shards N] [--drop TENSOR]
                 [--no-q-lora]
  deepseek_v3.py --check DIR [--like FIXTURE_DIR]     (layout check; exit 1 on problems)
  --no-q-lora: q_lora_rank null and a q_proj (DeepSeek-V2-Lite style, NOT the V3 release;
               for exercising that branch of the oracle/engine; fails --check --like).
"""
import argparse
import functools
import json
import math
import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", "oracle"))
import st_writer as sw  # noqa: E402
from st_writer import (bf16_uniform, f32_array, f32_to_bf16, plan_shards,  # noqa: E402
                       tensor_rng, write_json, write_safetensors)
from safetensors_np import E4M3_TABLE  # noqa: E402

bf16_normal = sw.bf16_normal_mean0   # this generator adds the mean (0.0) in float32

PRESETS = {
    # hidden 192, q_lora 160, kv_a rows 176, q_b rows 192, kv_b rows 168, o in 72,
    # moe_inter 40, inter 200: ragged 128-blocks everywhere; 3 heads
    "tiny": dict(hidden=192, layers=3, dense=1, heads=3, q_lora=160, kv_lora=144, nope=32,
                 rope=32, v=24, experts=12, groups=4, topk_group=2, topk=3, shared=1,
                 moe_inter=40, inter=200, vocab=384, factor=40.0, orig_ctx=256, mscale=1.0,
                 rsf=2.5),
    # one MoE layer at the released context (4096 * 40 = 163840): long-position tests
    "long": dict(hidden=192, layers=1, dense=0, heads=3, q_lora=160, kv_lora=144, nope=32,
                 rope=32, v=24, experts=12, groups=4, topk_group=2, topk=3, shared=1,
                 moe_inter=40, inter=200, vocab=384, factor=40.0, orig_ctx=4096, mscale=1.0,
                 rsf=2.5),
    # 64 heads: decode and prefill attention take MLA's heads 16 at a time, as the
    # released model's 128 do (the kernel's wide path, x86_attn.h)
    "wide": dict(hidden=192, layers=2, dense=1, heads=64, q_lora=160, kv_lora=144, nope=32,
                 rope=32, v=24, experts=12, groups=4, topk_group=2, topk=3, shared=1,
                 moe_inter=40, inter=200, vocab=384, factor=40.0, orig_ctx=256, mscale=1.0,
                 rsf=2.5),
    # 5 heads, rope 48, 2 shared experts, 2 dense layers, mscale 0.707 (V2 style)
    "tiny2": dict(hidden=288, layers=4, dense=2, heads=5, q_lora=136, kv_lora=96, nope=16,
                  rope=48, v=40, experts=16, groups=4, topk_group=2, topk=5, shared=2,
                  moe_inter=24, inter=160, vocab=448, factor=16.0, orig_ctx=128, mscale=0.707,
                  rsf=1.5),
}

E4M3_MAX = 448.0
_POS_VALUES = E4M3_TABLE[:127].astype(np.float64)   # codes 0x00..0x7E, increasing


# --- block FP8 (own quantiser; st_writer is shared with other generators) --------------------
def e4m3_encode(x):
    """float32 -> e4m3fn codes: nearest representable value (ties to the even code),
    saturating at +-448, never NaN; the sign bit kept (so -0.0 -> 0x80)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)
    hi = np.clip(np.searchsorted(_POS_VALUES, a, side="left"), 0, 126)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = a - _POS_VALUES[lo], _POS_VALUES[hi] - a
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (code.astype(np.uint8) | (np.signbit(x).astype(np.uint8) << 7)).astype(np.uint8)


def fp8_block_quantize(w, block=(128, 128)):
    """w float32 [out, in] -> (codes uint8 [out, in], F32 scale [ceil(out/bo), ceil(in/bi)])
    with w ~= e4m3(codes) * scale[i // bo][j // bi]; scale = block amax / 448 (DeepSeek
    fp8 weight quantisation), 1 for an all-zero block; edge blocks partial."""
    rows, cols = w.shape
    bo, bi = block
    nr, nc = -(-rows // bo), -(-cols // bi)
    pad = np.zeros((nr * bo, nc * bi), dtype=np.float32)
    pad[:rows, :cols] = np.abs(w)
    amax = pad.reshape(nr, bo, nc, bi).max(axis=(1, 3))
    s = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1)).astype(np.float32)
    full = np.repeat(np.repeat(s, bo, axis=0), bi, axis=1)[:rows, :cols]
    return e4m3_encode(w / full), s


# --- tensor makers (each draws from its own per-name stream) -------------------------------
def random_weight(seed, name, rows, cols, std, block=(128, 128)):
    """Gaussian [rows, cols] with a random gain in [0.5, 2] per 128x128 block, so block scales
    differ and a wrong scale index shows."""
    r = tensor_rng(seed, name)
    w = r.standard_normal((rows, cols), dtype=np.float32) * np.float32(std)
    nr, nc = -(-rows // block[0]), -(-cols // block[1])
    gain = np.exp(r.uniform(math.log(0.5), math.log(2.0), (nr, nc))).astype(np.float32)
    full = np.repeat(np.repeat(gain, block[0], axis=0), block[1], axis=1)[:rows, :cols]
    return w * full / np.float32(math.sqrt(np.mean(gain ** 2)))


def mlp_linear(seed, fp8):
    """lin(name, rows, cols, std) for st_writer.mlp_tensors: a `linear`."""
    return lambda name, rows, cols, std: linear(seed, name, rows, cols, std, fp8)


def linear(seed, name, rows, cols, std, fp8):
    """A Linear weight: F8_E4M3 + F32 weight_scale_inv (fp8) or BF16."""
    if not fp8:
        return [(name, "BF16", [rows, cols],
                 lambda: f32_to_bf16(random_weight(seed, name, rows, cols, std)))]
    memo = {}

    def q():
        if not memo:
            memo["v"] = fp8_block_quantize(random_weight(seed, name, rows, cols, std))
        return memo["v"]
    srows, scols = -(-rows // 128), -(-cols // 128)
    return [(name, "F8_E4M3", [rows, cols], lambda: q()[0]),
            (name + "_scale_inv", "F32", [srows, scols], lambda: q()[1])]


# --- writing ---------------------------------------------------------------------------------
def write_release(folder, main, tail, n_shards, total_digits, metadata=None):
    """Writes `main` (model order) cut into shards, then `tail` (e.g. the MTP layer) alone in
    the last shard when there is one: names model-{k:05d}-of-{N:0<total_digits>d}.safetensors,
    numbered from 1. n_shards == 1: one model.safetensors, no index. Returns the weight map."""
    os.makedirs(folder, exist_ok=True)
    if n_shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), main + tail, metadata)
        return {t[0]: "model.safetensors" for t in main + tail}
    n_main = n_shards - 1 if tail else n_shards
    parts = plan_shards(main, n_main) + ([tail] if tail else [])
    names = [f"model-{k + 1:05d}-of-{n_shards:0{total_digits}d}.safetensors"
             for k in range(n_shards)]
    weight_map, total = {}, 0
    for fname, part in zip(names, parts):
        total += write_safetensors(os.path.join(folder, fname), part, metadata)
        weight_map.update({t[0]: fname for t in part})
    write_json(os.path.join(folder, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": weight_map})
    return weight_map


def pattern(name):
    """model.layers.3.mlp.experts.7.up_proj.weight ->
    model.layers.{L}.mlp.experts.{E}.up_proj.weight"""
    name = re.sub(r"^model\.layers\.\d+\.", "model.layers.{L}.", name)
    return re.sub(r"\.experts\.\d+\.", ".experts.{E}.", name)


def check_layout(folder, like, expected, is_tail=lambda name: False):
    """Problems (list of str) with `folder` as a released checkpoint of this family:
    safetensors container rules (check_layout.check_file), index (sorted, indent 2,
    total_size, weight_map == headers), shard naming model-0000k-of-N numbered from 1,
    embed_tokens in the first shard, lm_head in the last shard holding main-model tensors
    (tail tensors, e.g. the MTP layer, only after it), the tensor set / dtypes / shapes of
    expected(config) and every tensor readable and finite. With `like` (a fixture): same
    config / generation_config key sets, same __metadata__, same shard-name digit count,
    the same tensor-name patterns with the same dtypes."""
    from check_layout import (check_config_keys, check_file, check_index, check_tensors,
                              read_folder)
    problems = []
    cfg = json.load(open(os.path.join(folder, "config.json")))
    files, headers, metas, total, where = read_folder(folder, problems)
    digits = None
    index_path = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index_path):
        names = check_index(index_path, total, where, problems)
        n = len(names)
        m = [re.fullmatch(r"model-(\d{5})-of-(\d+)\.safetensors", s) for s in names]
        if not all(m) or [int(x.group(1)) for x in m] != list(range(1, n + 1)) or \
                any(int(x.group(2)) != n for x in m) or len({len(x.group(2)) for x in m}) != 1:
            problems.append(f"shard names {names} are not model-0000k-of-N, k = 1..N")
        else:
            digits = len(m[0].group(2))
        if where.get("model.embed_tokens.weight") != names[0]:
            problems.append("embed_tokens not in the first shard")
        main_shards = sorted({f for k, f in where.items() if not is_tail(k)})
        if "lm_head.weight" in where and where["lm_head.weight"] != main_shards[-1]:
            problems.append("lm_head not in the last shard holding main-model tensors")
        for k, f in where.items():
            if is_tail(k) and names.index(f) < names.index(where.get("lm_head.weight", f)):
                problems.append(f"{k} stored before lm_head's shard")
                break
    elif files != ["model.safetensors"]:
        problems.append(f"no index and files {files}")
    got = check_tensors(folder, expected(cfg), headers, where, problems)
    if like:
        check_config_keys(folder, like, problems)
        fx_idx = json.load(open(os.path.join(like, "model.safetensors.index.json")))
        fx_files = sorted(set(fx_idx["weight_map"].values()))
        fx_heads = {f: check_file(os.path.join(like, f), []) for f in fx_files}

        def meta_set(metas):
            return {json.dumps(v, sort_keys=True) if v is not None else None for v in metas}
        if meta_set(metas.values()) != meta_set(h[1] for h in fx_heads.values()):
            problems.append(f"__metadata__ {meta_set(metas.values())} differs from the "
                            f"fixture's {meta_set(h[1] for h in fx_heads.values())}")
        fx_digits = len(re.fullmatch(r"model-\d{5}-of-(\d+)\.safetensors", fx_files[0]).group(1))
        if digits is not None and digits != fx_digits:
            problems.append(f"shard total has {digits} digits, the fixture's {fx_digits}")
        fx_pat, my_pat = {}, {}
        for h, _, _ in fx_heads.values():
            for k, i in h.items():
                fx_pat.setdefault(pattern(k), set()).add(i["dtype"])
        for k, (dt, _) in got.items():
            my_pat.setdefault(pattern(k), set()).add(dt)
        if set(fx_pat) != set(my_pat):
            problems.append(f"tensor patterns differ from the fixture's: "
                            f"{sorted(set(fx_pat) ^ set(my_pat))[:6]}")
        for p in sorted(set(fx_pat) & set(my_pat)):
            if fx_pat[p] != my_pat[p]:
                problems.append(f"{p}: dtypes {sorted(my_pat[p])}, fixture {sorted(fx_pat[p])}")
    return problems


# --- DeepSeek-V3 layout ------------------------------------------------------------------------
SHARD_TOTAL_DIGITS = 6   # model-00001-of-000163.safetensors


def is_tail_tensor(name, cfg):
    """True for the MTP layer (model.layers.<n >= num_hidden_layers>.*), which the release
    stores after lm_head (the last shard(s)) and the main forward ignores."""
    m = re.match(r"model\.layers\.(\d+)\.", name)
    return bool(m) and int(m.group(1)) >= cfg["num_hidden_layers"]


def fp8_of(cfg):
    return bool(cfg.get("quantization_config"))


def expected_tensors(cfg):
    """{name: (dtype, shape)} of a DeepSeek-V3 checkpoint from its config.json (main layers,
    then the num_nextn_predict_layers MTP layers)."""
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    nh, ql, kl = cfg["num_attention_heads"], cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    E, mi, I = cfg["n_routed_experts"], cfg["moe_intermediate_size"], cfg["intermediate_size"]
    si = mi * (cfg.get("n_shared_experts") or 0)
    t = {}
    lin = functools.partial(sw.expect_linear, t, fp8=fp8_of(cfg))

    def layer(l):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = ("BF16", [H])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [H])
        a = p + "self_attn."
        if ql:
            lin(a + "q_a_proj.weight", ql, H)
            t[a + "q_a_layernorm.weight"] = ("BF16", [ql])
            lin(a + "q_b_proj.weight", nh * (nope + rope), ql)
        else:
            lin(a + "q_proj.weight", nh * (nope + rope), H)
        lin(a + "kv_a_proj_with_mqa.weight", kl + rope, H)
        t[a + "kv_a_layernorm.weight"] = ("BF16", [kl])
        lin(a + "kv_b_proj.weight", nh * (nope + v), kl)
        lin(a + "o_proj.weight", H, nh * v)
        if l < cfg["first_k_dense_replace"]:
            sw.expect_mlp(lin, p + "mlp.", I, H)
            return
        sw.expect_biased_moe(t, lin, p, E, mi, si, H)

    t["model.embed_tokens.weight"] = ("BF16", [V, H])
    for l in range(cfg["num_hidden_layers"]):
        layer(l)
    t["model.norm.weight"] = ("BF16", [H])
    t["lm_head.weight"] = ("BF16", [V, H])
    sw.expect_mtp_layers(t, cfg, layer)
    return t


def make_config(d):
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                     "AutoModel": "modeling_deepseek.DeepseekV3Model",
                     "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
        "aux_loss_alpha": 0.001,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "ep_size": 1,
        "first_k_dense_replace": d["dense"],
        "hidden_act": "silu",
        "hidden_size": d["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": d["inter"],
        "kv_lora_rank": d["kv_lora"],
        # released 163840 = 4096 * 40: keep max / original == factor (older transformers
        # derive the YaRN factor from that ratio)
        "max_position_embeddings": int(d["orig_ctx"] * d["factor"]),
        "model_type": "deepseek_v3",
        "moe_intermediate_size": d["moe_inter"],
        "moe_layer_freq": 1,
        "n_group": d["groups"],
        "n_routed_experts": d["experts"],
        "n_shared_experts": d["shared"],
        "norm_topk_prob": True,
        "num_attention_heads": d["heads"],
        "num_experts_per_tok": d["topk"],
        "num_hidden_layers": d["layers"],
        "num_key_value_heads": d["heads"],
        "num_nextn_predict_layers": 1,
        "q_lora_rank": d["q_lora"] or None,
        "qk_nope_head_dim": d["nope"],
        "qk_rope_head_dim": d["rope"],
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8", "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": d["factor"],
                         "mscale": d["mscale"], "mscale_all_dim": d["mscale"],
                         "original_max_position_embeddings": d["orig_ctx"], "type": "yarn"},
        "rope_theta": 10000,
        "routed_scaling_factor": d["rsf"],
        "scoring_func": "sigmoid",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": d["topk_group"],
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.33.1",
        "use_cache": True,
        "v_head_dim": d["v"],
        "vocab_size": d["vocab"],
    }


def generation_config():
    return {"_from_model_config": True, "bos_token_id": 0, "eos_token_id": 1, "do_sample": True,
            "temperature": 0.6, "top_p": 0.95, "transformers_version": "4.46.3"}


def check_dims(d):
    errs = []
    if d["experts"] % d["groups"]:
        errs.append("experts must be a multiple of groups")
    if not d["topk_group"] < d["groups"]:
        errs.append("topk_group must be < groups (else the group limit is inactive)")
    if not 0 < d["topk"] <= d["topk_group"] * d["experts"] // d["groups"]:
        errs.append("topk must fit in topk_group groups")
    if d["rope"] % 2:
        errs.append("rope must be even")
    if not 0 <= d["dense"] < d["layers"]:
        errs.append("need 0 <= dense < layers (some MoE layer)")
    if errs:
        sys.exit("bad dimensions: " + "; ".join(errs))


def layer_tensors(d, seed, l, fp8=True):
    H, nh = d["hidden"], d["heads"]
    ql, kl, nope, rope, v = d["q_lora"], d["kv_lora"], d["nope"], d["rope"], d["v"]
    E, mi, I = d["experts"], d["moe_inter"], d["inter"]
    p = f"model.layers.{l}."
    a = p + "self_attn."
    t = bf16_uniform(seed, p + "input_layernorm.weight", (H,), 0.8, 1.2)
    if ql:
        t += linear(seed, a + "q_a_proj.weight", ql, H, 1 / math.sqrt(H), fp8)
        t += bf16_uniform(seed, a + "q_a_layernorm.weight", (ql,), 0.8, 1.2)
        t += linear(seed, a + "q_b_proj.weight", nh * (nope + rope), ql, 1.3 / math.sqrt(ql), fp8)
    else:
        t += linear(seed, a + "q_proj.weight", nh * (nope + rope), H, 1.3 / math.sqrt(H), fp8)
    t += linear(seed, a + "kv_a_proj_with_mqa.weight", kl + rope, H, 1.3 / math.sqrt(H), fp8)
    t += bf16_uniform(seed, a + "kv_a_layernorm.weight", (kl,), 0.8, 1.2)
    t += linear(seed, a + "kv_b_proj.weight", nh * (nope + v), kl, 1.3 / math.sqrt(kl), fp8)
    t += linear(seed, a + "o_proj.weight", H, nh * v, 1.0 / math.sqrt(nh * v), fp8)
    t += bf16_uniform(seed, p + "post_attention_layernorm.weight", (H,), 0.8, 1.2)
    lin = mlp_linear(seed, fp8)
    if l < d["dense"]:
        return t + sw.mlp_tensors(lin, p + "mlp.", I, H, 1.0 / math.sqrt(I))
    t += bf16_normal(seed, p + "mlp.gate.weight", (E, H), 1.5 / math.sqrt(H))
    # drawn >= 0 (as the fixture): where transformers (0.0 fill) and the official code (-inf
    # fill) provably agree; large enough to change a share of the selections
    t += f32_array(p + "mlp.gate.e_score_correction_bias", (E,),
                   lambda: tensor_rng(seed, p + "bias").uniform(0.0, 0.2, E))
    for e in range(E):
        t += sw.mlp_tensors(lin, p + f"mlp.experts.{e}.", mi, H, 1.5 / math.sqrt(mi))
    si = mi * d["shared"]
    if si:
        t += sw.mlp_tensors(lin, p + "mlp.shared_experts.", si, H, 1.0 / math.sqrt(si))
    return t


def model_tensors(d, seed):
    """(main tensors in model order, MTP layer tensors)."""
    H, V, L = d["hidden"], d["vocab"], d["layers"]
    t = bf16_normal(seed, "model.embed_tokens.weight", (V, H), 1.0)
    for l in range(L):
        t += layer_tensors(d, seed, l)
    t += sw.final_tensors(seed, V, H, normal=bf16_normal)
    return t, sw.mtp_layer_tensors(seed, L, V, H, layer_tensors(d, seed, L), normal=bf16_normal)


# --- the command line (shared with longcat_flash.py) ----------------------------------------
def arg_parser(doc, presets):
    """--out DIR | --check DIR [--like FIXTURE_DIR], --seed, --preset; the family adds its
    own options after these."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--check", metavar="DIR", help="check DIR's layout instead of writing")
    ap.add_argument("--like", metavar="FIXTURE_DIR", help="with --check: compare with a fixture")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", choices=sorted(presets), default="tiny")
    return ap


def check_or_require_out(a, expected, is_tail):
    """With --check: print check_layout's problems and exit (1 if any). Else --out is needed."""
    if a.check:
        cfg = json.load(open(os.path.join(a.check, "config.json")))
        problems = check_layout(a.check, a.like, expected, lambda name: is_tail(name, cfg))
        for p in problems:
            print(p)
        sys.exit(1 if problems else 0)
    if not a.out:
        sys.exit("need --out DIR (or --check DIR)")


def generate(a, d, family_tensors, config, gen_config, total_digits):
    """Shared --out path: drop, write config + generation config + shards."""
    t0 = time.time()
    main, tail = sw.apply_drop(a.drop, *family_tensors)
    if a.shards < 1 or (tail and a.shards == 2 and not main):
        sys.exit("--shards must be >= 1")
    sw.save_model(a.out, config, gen_config,
                  lambda: write_release(a.out, main, tail, a.shards, total_digits,
                                        metadata={"format": "pt"}), len(main) + len(tail), t0)


def main():
    ap = arg_parser(__doc__, PRESETS)
    ap.add_argument("--shards", type=int, default=3,
                    help="1 = single model.safetensors; else N-1 main shards + the MTP shard")
    ap.add_argument("--no-q-lora", action="store_true",
                    help="q_lora_rank null + q_proj (not the V3 release layout)")
    ap.add_argument("--vocab", type=int, help="vocabulary size (a real tokenizer's)")
    sw.add_drop_arg(ap)
    a = ap.parse_args()
    check_or_require_out(a, expected_tensors, is_tail_tensor)
    d = dict(PRESETS[a.preset])
    if a.no_q_lora:
        d["q_lora"] = None
    if a.vocab:
        d["vocab"] = a.vocab
    check_dims(d)
    generate(a, d, model_tensors(d, a.seed), make_config(d), generation_config(),
             SHARD_TOTAL_DIGITS)


if __name__ == "__main__":
    main()
