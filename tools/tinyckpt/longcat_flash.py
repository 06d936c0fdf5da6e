#!/usr/bin/python3
"""Writes a random tiny LongCat-Flash checkpoint in the released meituan-longcat layout.

Owns: the longcat_flash tiny-checkpoint generator (tensor names, dtypes, shapes, config keys,
shard naming) and its layout check (--check). Shared writing / FP8 / check / command-line
helpers live in tools/tinyckpt/deepseek_v3.py (MLA families) and st_writer.py (all generators).

Layout (as /work/shared/fixtures/longcat_flash and longcat_flash_fp8, whose meta.json
format_sources cite the transformers modeling_longcat_flash.py module tree, vLLM / sglang
longcat_flash.py load_weights and config classes):
  - per layer: input_layernorm.{0,1}, post_attention_layernorm.{0,1}, self_attn.{0,1}.
    {q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj,
    o_proj}, mlps.{0,1}.{gate,up,down}_proj, mlp.router.classifier.weight (F32,
    [n_routed + zero_expert_num, H]), mlp.router.e_score_correction_bias (F32),
    mlp.experts.E.{gate,up,down}_proj for the n_routed real experts only (the zero experts
    have no weights); no MTP tensors (as the fixtures).
  - bf16 (LongCat-Flash-Chat), or with --fp8 (LongCat-Flash-Chat-FP8 as the fixture infers it):
    every Linear of self_attn, mlps and experts F8_E4M3 + F32 weight_scale_inv per 128x128
    block, quantization_config {activation_scheme dynamic, fmt e4m3, quant_method fp8,
    weight_block_size [128, 128]}; router, norms, embed_tokens, lm_head unquantised.
  - shards model-0000k-of-0000N (five-digit total), __metadata__ {"format": "pt"}.
Every feature is active: odd head counts; mla_scale_q_lora / mla_scale_kv_lora derived from
the dims (sqrt(hidden / q_lora_rank), sqrt(hidden / kv_lora_rank)) and unlike the released
2 and 2*sqrt(3); qk_rope_head_dim 64 (= transformers' rotary head_dim); softmax router over
real + zero experts whose correction bias changes the selection and puts identity experts in a
good share of slots (+0.03 on the zero experts); routed_scaling_factor; two dense MLPs per
layer; ragged 128-blocks and per-block gains with --fp8.

CLI:
  longcat_flash.py --out DIR [--seed S] [--preset tiny|tiny2] [--fp8] [--shards N]
                   [--drop TENSOR]
  longcat_flash.py --check DIR [--like FIXTURE_DIR]     (layout check; exit 1 on problems)
"""
import functools
import importlib.util
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, HERE)
import st_writer as sw  # noqa: E402
from st_writer import bf16_uniform, f32_array, tensor_rng  # noqa: E402


def _sibling(name):
    """tools/tinyckpt/<name>.py loaded by path (tools/oracle has a module of the same name)."""
    spec = importlib.util.spec_from_file_location("tinyckpt_" + name,
                                                  os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ds = _sibling("deepseek_v3")   # shared writing / FP8 / layout-check helpers

PRESETS = {
    # hidden 192; q_lora 64 -> sqrt(3), kv_lora 32 -> sqrt(6); kv_a rows 96, q_b rows 288,
    # kv_b rows 216, o in 120: ragged 128-blocks with --fp8
    "tiny": dict(hidden=192, layers=2, heads=3, q_lora=64, kv_lora=32, nope=32, v=40,
                 experts=8, zero=4, topk=3, expert_ffn=40, ffn=96, vocab=384, rsf=6.0),
    # q_lora 160 -> sqrt(2), kv_lora 48 -> sqrt(20/3)
    "tiny2": dict(hidden=320, layers=3, heads=5, q_lora=160, kv_lora=48, nope=48, v=32,
                  experts=12, zero=6, topk=4, expert_ffn=48, ffn=160, vocab=512, rsf=6.0),
}
ROPE = 64          # transformers LongcatFlashConfig.head_dim (rotary table) = qk_rope_head_dim
ZERO_BIAS = 0.03   # extra correction bias on the identity experts (as the fixtures)


SHARD_TOTAL_DIGITS = 5   # model-00001-of-00075.safetensors


def is_tail_tensor(name, cfg):
    """MTP tensors (model.mtp.*: in the release, not in the fixtures or these generators) are
    not part of the main model; transformers ignores them."""
    return name.startswith("model.mtp.")


def expected_tensors(cfg):
    """{name: (dtype, shape)} of a LongCat-Flash checkpoint from its config.json."""
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    nh, ql, kl = cfg["num_attention_heads"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    E, Z = cfg["n_routed_experts"], cfg.get("zero_expert_num") or 0
    ef, F = cfg["expert_ffn_hidden_size"], cfg["ffn_hidden_size"]
    t = {"model.embed_tokens.weight": ("BF16", [V, H]), "model.norm.weight": ("BF16", [H]),
         "lm_head.weight": ("BF16", [V, H])}
    lin = functools.partial(sw.expect_linear, t, fp8=ds.fp8_of(cfg))
    for l in range(cfg["num_layers"]):
        p = f"model.layers.{l}."
        for i in (0, 1):
            t[p + f"input_layernorm.{i}.weight"] = ("BF16", [H])
            t[p + f"post_attention_layernorm.{i}.weight"] = ("BF16", [H])
            a = p + f"self_attn.{i}."
            lin(a + "q_a_proj.weight", ql, H)
            t[a + "q_a_layernorm.weight"] = ("BF16", [ql])
            lin(a + "q_b_proj.weight", nh * (nope + rope), ql)
            lin(a + "kv_a_proj_with_mqa.weight", kl + rope, H)
            t[a + "kv_a_layernorm.weight"] = ("BF16", [kl])
            lin(a + "kv_b_proj.weight", nh * (nope + v), kl)
            lin(a + "o_proj.weight", H, nh * v)
            sw.expect_mlp(lin, p + f"mlps.{i}.", F, H)
        t[p + "mlp.router.classifier.weight"] = ("F32", [E + Z, H])
        t[p + "mlp.router.e_score_correction_bias"] = ("F32", [E + Z])
        for e in range(E):
            sw.expect_mlp(lin, p + f"mlp.experts.{e}.", ef, H)
    return t


def make_config(d, fp8):
    c = {
        "architectures": ["LongcatFlashForCausalLM"],
        "attention_method": "MLA",
        "auto_map": {"AutoConfig": "configuration_longcat_flash.LongcatFlashConfig",
                     "AutoModel": "modeling_longcat_flash.LongcatFlashModel",
                     "AutoModelForCausalLM": "modeling_longcat_flash.LongcatFlashForCausalLM"},
        "bos_token_id": 1,
        "eos_token_id": 2,
        "expert_ffn_hidden_size": d["expert_ffn"],
        "ffn_hidden_size": d["ffn"],
        "hidden_size": d["hidden"],
        "kv_lora_rank": d["kv_lora"],
        "max_position_embeddings": 131072,
        "mla_scale_kv_lora": True,
        "mla_scale_q_lora": True,
        "model_type": "longcat_flash",
        "moe_topk": d["topk"],
        "n_routed_experts": d["experts"],
        "num_attention_heads": d["heads"],
        "num_layers": d["layers"],
        "pad_token_id": 3,
        "q_lora_rank": d["q_lora"],
        "qk_nope_head_dim": d["nope"],
        "qk_rope_head_dim": ROPE,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000000.0,
        "routed_scaling_factor": d["rsf"],
        "router_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.55.0",
        "use_cache": True,
        "v_head_dim": d["v"],
        "vocab_size": d["vocab"],
        "zero_expert_num": d["zero"],
        "zero_expert_type": "identity",
    }
    if fp8:
        c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                    "quant_method": "fp8", "weight_block_size": [128, 128]}
    return c


def generation_config():
    return {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
            "transformers_version": "4.55.0"}


def check_dims(d):
    errs = []
    for k, released in (("q_lora", 2.0), ("kv_lora", 2 * math.sqrt(3))):
        if abs(math.sqrt(d["hidden"] / d[k]) - released) < 1e-9:
            errs.append(f"{k}: sqrt(hidden / {k}) equals the released constant {released:.4f}")
    if not 0 < d["topk"] < d["experts"] + d["zero"]:
        errs.append("need 0 < topk < experts + zero")
    if d["zero"] < 1:
        errs.append("zero experts must be present")
    if errs:
        sys.exit("bad dimensions: " + "; ".join(errs))


def model_tensors(d, seed, fp8):
    H, V, nh = d["hidden"], d["vocab"], d["heads"]
    ql, kl, nope, v = d["q_lora"], d["kv_lora"], d["nope"], d["v"]
    E, Z, ef, F = d["experts"], d["zero"], d["expert_ffn"], d["ffn"]
    sq, skv = math.sqrt(H / ql), math.sqrt(H / kl)
    lin, mlp_lin = ds.linear, ds.mlp_linear(seed, fp8)
    t = ds.bf16_normal(seed, "model.embed_tokens.weight", (V, H), 1.0)
    for l in range(d["layers"]):
        p = f"model.layers.{l}."
        for i in (0, 1):
            a = p + f"self_attn.{i}."
            t += bf16_uniform(seed, p + f"input_layernorm.{i}.weight", (H,), 0.8, 1.2)
            t += lin(seed, a + "q_a_proj.weight", ql, H, 1 / math.sqrt(H), fp8)
            t += bf16_uniform(seed, a + "q_a_layernorm.weight", (ql,), 0.8, 1.2)
            # q / k_nope / v compensate the mla scales so activations stay O(1)
            t += lin(seed, a + "q_b_proj.weight", nh * (nope + ROPE), ql,
                     1.3 / math.sqrt(ql) / sq, fp8)
            t += lin(seed, a + "kv_a_proj_with_mqa.weight", kl + ROPE, H, 1.3 / math.sqrt(H), fp8)
            t += bf16_uniform(seed, a + "kv_a_layernorm.weight", (kl,), 0.8, 1.2)
            t += lin(seed, a + "kv_b_proj.weight", nh * (nope + v), kl,
                     1.3 / math.sqrt(kl) / skv, fp8)
            t += lin(seed, a + "o_proj.weight", H, nh * v, 1.0 / math.sqrt(nh * v), fp8)
            t += bf16_uniform(seed, p + f"post_attention_layernorm.{i}.weight", (H,), 0.8, 1.2)
            t += sw.mlp_tensors(mlp_lin, p + f"mlps.{i}.", F, H, 1.0 / math.sqrt(F))
        name = p + "mlp.router.classifier.weight"
        t += f32_array(name, (E + Z, H), lambda name=name: tensor_rng(seed, name)
                       .standard_normal((E + Z, H)) * (1.2 / math.sqrt(H)))
        name = p + "mlp.router.e_score_correction_bias"

        def bias(name=name):
            b = tensor_rng(seed, name).uniform(-0.02, 0.02, E + Z)
            b[E:] += ZERO_BIAS
            return b
        t += f32_array(name, (E + Z,), bias)
        for e in range(E):
            # an identity expert passes the normed state (rms ~1) times its weight; keep the
            # real experts' outputs on the same scale
            t += sw.mlp_tensors(mlp_lin, p + f"mlp.experts.{e}.", ef, H, 1.5 / math.sqrt(ef))
    return t + sw.final_tensors(seed, V, H, normal=ds.bf16_normal), []


def main():
    ap = ds.arg_parser(__doc__, PRESETS)
    ap.add_argument("--fp8", action="store_true", help="LongCat-Flash-Chat-FP8 layout")
    ap.add_argument("--shards", type=int, default=3, help="1 = single model.safetensors")
    sw.add_drop_arg(ap)
    a = ap.parse_args()
    ds.check_or_require_out(a, expected_tensors, is_tail_tensor)
    d = dict(PRESETS[a.preset])
    check_dims(d)
    ds.generate(a, d, model_tensors(d, a.seed, a.fp8), make_config(d, a.fp8),
                generation_config(), SHARD_TOTAL_DIGITS)


if __name__ == "__main__":
    main()
