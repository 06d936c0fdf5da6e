#!/usr/bin/python3
"""Checks that a gpt_oss checkpoint folder has the released on-disk layout.

Owns: the layout assertions used by tests/models/test_oracle_fixture.sh for generated tiny
checkpoints (and runnable on the fixture itself, which it must pass), and the folder / index /
tensor-set checks that the MLA families' check (tinyckpt/deepseek_v3.py check_layout) shares.
Rules are those of st_writer.py (safetensors `serialize`, transformers sharded index, gpt-oss
shard naming) and the expected gpt_oss tensor set derived from config.json as in
transformers models/gpt_oss/convert_gpt_oss_weights_to_hf.py (mxfp4 branch).

Other families: when config.json's model_type is not gpt_oss, the expected tensor set comes from
`expected_tensors(cfg)` of the family's generator tools/tinyckpt/<model_type>.py.

CLI: check_layout.py DIR [--like FIXTURE_DIR]
  --like: also require the same config.json / generation_config.json key sets, the same
          shard naming scheme, no __metadata__ when the fixture has none (the same one when it
          has one), and, where the fixture's meta.json lists tensor_patterns, every fixture
          pattern present with the same dtype.
Prints one line per problem; exit 1 if any.
"""
import argparse
import importlib.util
import json
import os
import re
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
from safetensors_np import ITEMSIZE, ModelFolder  # noqa: E402


def expected_tensors(cfg):
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    E, I, D = cfg["num_local_experts"], cfg["intermediate_size"], cfg["head_dim"]
    Q, KV = cfg["num_attention_heads"] * D, cfg["num_key_value_heads"] * D
    t = {"model.embed_tokens.weight": ("BF16", [V, H]), "model.norm.weight": ("BF16", [H]),
         "lm_head.weight": ("BF16", [V, H])}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t.update({
            p + "input_layernorm.weight": ("BF16", [H]),
            p + "post_attention_layernorm.weight": ("BF16", [H]),
            p + "self_attn.q_proj.weight": ("BF16", [Q, H]), p + "self_attn.q_proj.bias": ("BF16", [Q]),
            p + "self_attn.k_proj.weight": ("BF16", [KV, H]), p + "self_attn.k_proj.bias": ("BF16", [KV]),
            p + "self_attn.v_proj.weight": ("BF16", [KV, H]), p + "self_attn.v_proj.bias": ("BF16", [KV]),
            p + "self_attn.o_proj.weight": ("BF16", [H, Q]), p + "self_attn.o_proj.bias": ("BF16", [H]),
            p + "self_attn.sinks": ("BF16", [cfg["num_attention_heads"]]),
            p + "mlp.router.weight": ("BF16", [E, H]), p + "mlp.router.bias": ("BF16", [E]),
            p + "mlp.experts.gate_up_proj_blocks": ("U8", [E, 2 * I, H // 32, 16]),
            p + "mlp.experts.gate_up_proj_scales": ("U8", [E, 2 * I, H // 32]),
            p + "mlp.experts.gate_up_proj_bias": ("BF16", [E, 2 * I]),
            p + "mlp.experts.down_proj_blocks": ("U8", [E, H, I // 32, 16]),
            p + "mlp.experts.down_proj_scales": ("U8", [E, H, I // 32]),
            p + "mlp.experts.down_proj_bias": ("BF16", [E, H]),
        })
    return t


def family_expected(cfg):
    """{name: (dtype, shape)} for this config: gpt_oss here, else the family generator's."""
    mt = cfg.get("model_type", "gpt_oss")
    if mt == "gpt_oss":
        return expected_tensors(cfg)
    path = os.path.join(HERE, os.path.basename(mt) + ".py")
    if not os.path.exists(path):
        sys.exit(f"no layout rules for model_type {mt} ({path})")
    spec = importlib.util.spec_from_file_location("tinyckpt_" + mt, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.expected_tensors(cfg)


def name_pattern(name):
    """model.layers.3.mlp.experts.7.x -> model.layers.{L}.mlp.experts.{E}.x (meta.json style)"""
    name = re.sub(r"\.layers\.\d+\.", ".layers.{L}.", name)
    return re.sub(r"\.experts\.\d+\.", ".experts.{E}.", name)


def check_file(path, problems):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        raw = f.read(n)
        size = os.fstat(f.fileno()).st_size
    name = os.path.basename(path)
    if n % 8:
        problems.append(f"{name}: header length {n} not a multiple of 8")
    text = raw.decode()
    if not text.rstrip(" ").endswith("}"):  # only spaces may follow the JSON
        problems.append(f"{name}: header not padded with spaces")
    hdr = json.loads(text)
    meta = hdr.pop("__metadata__", None)
    items = list(hdr.items())
    off = 0
    for k, info in items:
        b, e = info["data_offsets"]
        if b != off:
            problems.append(f"{name}: {k} starts at {b}, expected {off} (header order = data order)")
        if b % ITEMSIZE[info["dtype"]] or (8 + n) % 8:
            problems.append(f"{name}: {k} not naturally aligned")
        off = e
    if 8 + n + off != size:
        problems.append(f"{name}: file size {size} != 8 + {n} + {off}")
    keys = [(-ITEMSIZE[i["dtype"]], k) for k, i in items]
    if keys != sorted(keys):
        problems.append(f"{name}: tensors not ordered by dtype width then name")
    return hdr, meta, off


# --- pieces shared with the MLA-family check (tinyckpt/deepseek_v3.py check_layout) ---------
def read_folder(folder, problems):
    """(safetensors files, their headers, their __metadata__, total tensor bytes, {tensor:
    file}) of `folder`; each file's container problems (check_file) appended."""
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    headers, metas, total = {}, {}, 0
    for f in files:
        headers[f], metas[f], nb = check_file(os.path.join(folder, f), problems)
        total += nb
    where = {k: f for f in files for k in headers[f]}
    return files, headers, metas, total, where


def check_index(index_path, total, where, problems):
    """model.safetensors.index.json as transformers writes it (sorted keys, indent 2, final
    newline), total_size = the tensor bytes, weight_map = the shard headers. Returns the
    sorted shard names it lists."""
    text = open(index_path).read()
    idx = json.loads(text)
    if text != json.dumps(idx, indent=2, sort_keys=True) + "\n":
        problems.append("index: not sorted / indent 2 / trailing newline")
    if idx["metadata"]["total_size"] != total:
        problems.append(f"index: total_size {idx['metadata']['total_size']} != {total}")
    if idx["weight_map"] != where:
        problems.append("index: weight_map does not match the shard headers")
    return sorted(set(idx["weight_map"].values()))


def check_tensors(folder, exp, headers, where, problems):
    """The stored tensor set against exp {name: (dtype, shape)}, then every tensor read back
    by the oracles' reader with its shape and finite. Returns {name: (dtype, shape)} stored."""
    got = {k: (headers[f][k]["dtype"], list(headers[f][k]["shape"])) for k, f in where.items()}
    for k in sorted(set(exp) | set(got)):
        if k not in got:
            problems.append(f"missing tensor {k}")
        elif k not in exp:
            problems.append(f"unexpected tensor {k}")
        elif list(exp[k][1]) != got[k][1] or exp[k][0] != got[k][0]:
            problems.append(f"{k}: {got[k]} expected {exp[k]}")
    m = ModelFolder(folder)  # the oracles' reader must read every tensor back with its shape
    for k in got:
        arr = m.get(k)
        if list(arr.shape) != got[k][1] or not np.all(np.isfinite(arr.astype(np.float64))):
            problems.append(f"reader: {k} read back as {arr.shape} / non-finite")
    return got


def check_config_keys(folder, like, problems):
    """config.json and generation_config.json with the key sets of the fixture `like`."""
    for fn in ("config.json", "generation_config.json"):
        ka = set(json.load(open(os.path.join(folder, fn))))
        kb = set(json.load(open(os.path.join(like, fn))))
        if ka != kb:
            problems.append(f"{fn}: keys differ from {like}: {sorted(ka ^ kb)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--like")
    a = ap.parse_args()
    problems = []
    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    files, headers, metas, total, where = read_folder(a.dir, problems)
    index_path = os.path.join(a.dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        names = check_index(index_path, total, where, problems)
        n = len(names)
        zero = [f"model-{i:05d}-of-{n - 1:05d}.safetensors" for i in range(n)]
        one = [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        scheme = "zero" if names == zero else "one" if names == one else "other"
        if where.get("model.embed_tokens.weight") != names[0]:
            problems.append("embed_tokens not in the first shard")
        if "lm_head.weight" in where and where["lm_head.weight"] != names[-1]:
            problems.append("lm_head not in the last shard")
    else:
        scheme = "single" if files == ["model.safetensors"] else "other"
    got = check_tensors(a.dir, family_expected(cfg), headers, where, problems)
    if a.like:
        fx = a.like
        check_config_keys(a.dir, fx, problems)
        fx_files = sorted(f for f in os.listdir(fx) if f.endswith(".safetensors"))
        fx_meta = [check_file(os.path.join(fx, f), [])[1] for f in fx_files]
        if any(v is not None for v in metas.values()) and all(v is None for v in fx_meta):
            problems.append("__metadata__ present, the fixture has none")
        for f, v in metas.items():
            if fx_meta and fx_meta[0] is not None and v != fx_meta[0]:
                problems.append(f"{f}: __metadata__ {v} differs from the fixture's {fx_meta[0]}")
        meta_path = os.path.join(fx, "meta.json")
        pats = json.load(open(meta_path)).get("tensor_patterns", {}) \
            if os.path.exists(meta_path) else {}
        ours = {}
        for k, (dt, _) in got.items():
            ours.setdefault(name_pattern(k), set()).add(dt)
        for pat, info in sorted(pats.items()):
            if pat not in ours:
                problems.append(f"fixture tensor pattern {pat} absent")
            elif ours[pat] != {info["dtype"]}:
                problems.append(f"{pat}: dtype {sorted(ours[pat])}, fixture {info['dtype']}")
        fx_names = json.load(open(os.path.join(fx, "model.safetensors.index.json")))["weight_map"]
        fx_scheme = "zero" if re.match(r"model-00000-of-", sorted(fx_names.values())[0]) else "one"
        if scheme not in (fx_scheme, "single"):
            problems.append(f"shard naming '{scheme}' differs from the fixture's '{fx_scheme}'")
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
