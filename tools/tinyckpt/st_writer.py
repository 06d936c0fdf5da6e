"""Safetensors / sharded-checkpoint writing helpers shared by the tiny-checkpoint generators.

Owns: the on-disk container layout of a released Hugging Face checkpoint, as the reference
writers produce it:
  - huggingface/safetensors `safetensors/src/tensor.rs` (`prepare`/`serialize`): u64 LE header
    length, compact JSON header (`__metadata__` first when present), header padded with spaces
    to a multiple of 8, tensors sorted by dtype (widest first, so each is naturally aligned)
    then by name, data_offsets relative to the data section.
  - transformers sharded checkpoints: `model.safetensors.index.json`
    {"metadata": {"total_size": sum of tensor bytes}, "weight_map": {name: file}} with sorted
    keys and indent 2; tensors cut into shards in model order.
  - shard names: `model-{i:05d}-of-{N:05d}` numbered from 1 (save_pretrained), or numbered from
    0 with N = count - 1 (transformers convert_gpt_oss_weights_to_hf.py save_sharded_model,
    which is how openai/gpt-oss-20b ships: model-00000-of-00002 .. model-00002-of-00002).

A tensor is given as (name, dtype, shape, make) where `make()` returns the raw array (BF16 as
uint16 bits, U8 as uint8, ...) only when it is written, so large checkpoints stream to disk.

Also owns what several generators share above the container: the random tensor makers (one
stream per tensor name), the transformers-style MLP and DeepSeek-V3-style MTP layer tensor sets
(as makers and as expected {name: (dtype, shape)} entries), --drop, and writing a model folder
(config.json, generation_config.json, shards).
"""
import functools
import json
import math
import os
import struct
import sys
import time
import zlib

import numpy as np

NP_RAW = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "F64": np.float64,
          "U8": np.uint8, "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
          "F8_E4M3": np.uint8, "BOOL": np.bool_}


def itemsize(dtype):
    return np.dtype(NP_RAW[dtype]).itemsize


def nbytes(dtype, shape):
    return int(np.prod(shape, dtype=np.int64)) * itemsize(dtype)


def f32_to_bf16(x):
    """float32 -> bf16 bits, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = u >> 16            # in-place steps: this runs over the whole embedding table
    r &= 1
    r += 0x7FFF
    r += u
    r >>= 16
    return r.astype(np.uint16)


def tensor_rng(seed, name):
    """An independent stream per tensor, so a tensor's values do not depend on sharding,
    --drop or the order in which tensors are written."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


E4M3_MAX = 448.0


def f32_to_e4m3(x):
    """float32 -> OCP e4m3fn codes (uint8), round to nearest even, saturating at +-448 (never
    the NaN code); keeps the sign of zero. Normal range: round the float32 mantissa to 3 bits
    on its bit pattern; below 2^-6 the code is rint(|x| * 2^9) (subnormals m * 2^-9, and 8 is
    the smallest normal's code, so the two ranges join up)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    a = np.minimum(np.abs(x), np.float32(E4M3_MAX))
    u = a.view(np.uint32)
    r = u >> 20
    r &= 1
    r += np.uint32(0x7FFFF)
    r += u
    r >>= 20                     # (float32 biased exponent << 3) | 3-bit mantissa, rounded
    r -= np.uint32((127 - 7) << 3)   # rebias to e4m3 (wraps below 2^-6: fixed next)
    sub = a < np.float32(2.0 ** -6)
    r[sub] = np.rint(a[sub] * np.float32(512.0)).astype(np.uint32)   # exact, half to even
    code = r.astype(np.uint8)
    code |= (np.signbit(x).astype(np.uint8) << 7)
    return code


def round_scale_up(s, dtype):
    """Positive float32 scales -> (raw array in `dtype`'s stored form, float32 values), each
    value the nearest representable one >= s (so |w| / scale <= 448 holds for the block)."""
    s = np.ascontiguousarray(s, dtype=np.float32)
    if dtype == "F32":
        return s.copy(), s.copy()
    if dtype == "BF16":
        bits = f32_to_bf16(s)
        vals = (bits.astype(np.uint32) << 16).view(np.float32)
        bits = np.where(vals < s, bits + 1, bits).astype(np.uint16)
        return bits, (bits.astype(np.uint32) << 16).view(np.float32)
    if dtype == "F16":
        h = s.astype(np.float16)
        h = np.where(h.astype(np.float32) < s, np.nextafter(h, np.float16(np.inf)), h)
        return h.astype(np.float16), h.astype(np.float32)
    raise ValueError(f"scale dtype {dtype}")


def fp8_block_quantize(w, block=(128, 128), scale_dtype="BF16"):
    """Block FP8 (DeepSeek / transformers FineGrainedFP8 layout): w float32 [out, in] ->
    (codes uint8 [out, in], scale raw [ceil(out/bo), ceil(in/bi)] in `scale_dtype`, scale
    float32 values) with W ~= e4m3(codes) * scale[i // bo][j // bi]; edge blocks are partial.
    The scale is amax / 448 of the block rounded up to `scale_dtype` (1 for an all-zero block)."""
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape
    bo, bi = block
    nr, nc = -(-rows // bo), -(-cols // bi)
    if (rows, cols) == (nr * bo, nc * bi):
        pad = w
    else:                                   # ragged edge blocks: pad with zeros
        pad = np.zeros((nr * bo, nc * bi), dtype=np.float32)
        pad[:rows, :cols] = w
    blocks = pad.reshape(nr, bo, nc, bi)
    amax = np.abs(blocks).max(axis=(1, 3))
    s = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1)).astype(np.float32)
    raw, vals = round_scale_up(s, scale_dtype)
    codes = f32_to_e4m3(blocks / vals[:, None, :, None]).reshape(nr * bo, nc * bi)
    return np.ascontiguousarray(codes[:rows, :cols]), raw, vals


def fp8_channel_quantize(w, scale_dtype="BF16"):
    """Per-channel FP8 (compressed-tensors "float-quantized", strategy "channel", as
    llm-compressor writes it): w float32 [out, in] -> (codes uint8 [out, in], weight_scale raw
    [out, 1] in `scale_dtype`) with W ~= e4m3(codes) * scale[i]; the scale is amax / 448 of
    the row rounded up to `scale_dtype` (1 for an all-zero row)."""
    w = np.asarray(w, dtype=np.float32)
    amax = np.abs(w).max(axis=1, keepdims=True)
    s = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1)).astype(np.float32)
    raw, vals = round_scale_up(s, scale_dtype)
    return f32_to_e4m3(w / vals), raw


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape, make). Returns bytes of tensor data written."""
    order = sorted(tensors, key=lambda t: (-itemsize(t[1]), t[0]))
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, dt, shape, _ in order:
        n = nbytes(dt, shape)
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for name, dt, shape, make in order:
            arr = np.ascontiguousarray(make(), dtype=np.dtype(NP_RAW[dt]).newbyteorder("<"))
            if list(arr.shape) != list(shape):
                raise ValueError(f"{name}: made {arr.shape}, declared {shape}")
            f.write(arr.tobytes() if arr.nbytes < (1 << 20) else memoryview(arr.reshape(-1)))
    return off


def plan_shards(tensors, n_shards):
    """Cuts the model-ordered list into n_shards consecutive runs of about equal bytes (a
    tensor goes to the shard holding its midpoint). Raises if a shard would be empty."""
    sizes = [nbytes(t[1], t[2]) for t in tensors]
    total = sum(sizes)
    shards = [[] for _ in range(n_shards)]
    start = 0
    for t, n in zip(tensors, sizes):
        k = min(n_shards - 1, int((start + n / 2) * n_shards // total)) if total else 0
        shards[k].append(t)
        start += n
    if any(not s for s in shards):
        raise ValueError(f"cannot cut {len(tensors)} tensors into {n_shards} non-empty shards")
    return shards


def shard_names(n_shards, zero_based):
    if zero_based:  # convert_gpt_oss_weights_to_hf.py: f"model-{i:05d}-of-{count-1:05d}"
        return [f"model-{i:05d}-of-{n_shards - 1:05d}.safetensors" for i in range(n_shards)]
    return [f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors" for i in range(n_shards)]


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def write_checkpoint(folder, tensors, n_shards, zero_based=False, metadata=None):
    """Writes the model-ordered tensors as one model.safetensors (n_shards == 1, no index)
    or as n_shards files plus model.safetensors.index.json. Returns the weight map."""
    os.makedirs(folder, exist_ok=True)
    if n_shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), tensors, metadata)
        return {t[0]: "model.safetensors" for t in tensors}
    weight_map = {}
    total = 0
    for fname, part in zip(shard_names(n_shards, zero_based), plan_shards(tensors, n_shards)):
        total += write_safetensors(os.path.join(folder, fname), part, metadata)
        weight_map.update({t[0]: fname for t in part})
    write_json(os.path.join(folder, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": weight_map})
    return weight_map


# --- tensor makers (each draws from its own per-name stream; each returns a list of tensors) --
def bf16_uniform(seed, name, shape, lo, hi):
    def make():
        return f32_to_bf16(tensor_rng(seed, name).uniform(lo, hi, shape).astype(np.float32))
    return [(name, "BF16", list(shape), make)]


def bf16_normal(seed, name, shape, std, mean=None):
    """N(0, std^2) draws as bf16; with a mean (also 0.0) that is added in float32 afterwards,
    as the deepseek_v3 / gpt_oss generators do (+ 0.0 turns a -0.0 draw into +0.0: their
    streams need it, the others must not have it)."""
    def make():
        w = tensor_rng(seed, name).standard_normal(shape, dtype=np.float32) * np.float32(std)
        if mean is not None:
            w = w + np.float32(mean)
        return f32_to_bf16(w)
    return [(name, "BF16", list(shape), make)]


bf16_normal_mean0 = functools.partial(bf16_normal, mean=0.0)


def f32_array(name, shape, fn):
    return [(name, "F32", list(shape), lambda: np.asarray(fn(), dtype=np.float32))]


def mlp_tensors(lin, prefix, inter, hidden, down_std):
    """gate_proj, up_proj [inter, hidden] (std 1.5/sqrt(hidden)) and down_proj [hidden, inter]
    (down_std) of a SwiGLU MLP under `prefix`; lin(name, rows, cols, std) makes one linear."""
    return (lin(prefix + "gate_proj.weight", inter, hidden, 1.5 / math.sqrt(hidden))
            + lin(prefix + "up_proj.weight", inter, hidden, 1.5 / math.sqrt(hidden))
            + lin(prefix + "down_proj.weight", hidden, inter, down_std))


def mtp_layer_tensors(seed, l, vocab, hidden, layer, normal=bf16_normal):
    """The DeepSeek-V3 MTP layer model.layers.<l>.* (also GLM-4.5's): embed_tokens [V, H],
    enorm, hnorm [H], eh_proj [H, 2H], the decoder layer's tensors `layer`, shared_head.norm
    [H], shared_head.head [V, H]; `normal` is the generator's normal maker."""
    p = f"model.layers.{l}."
    H, V = hidden, vocab
    t = normal(seed, p + "embed_tokens.weight", (V, H), 1.0)
    t += bf16_uniform(seed, p + "enorm.weight", (H,), 0.8, 1.2)
    t += bf16_uniform(seed, p + "hnorm.weight", (H,), 0.8, 1.2)
    t += normal(seed, p + "eh_proj.weight", (H, 2 * H), 1 / math.sqrt(2 * H))
    t += layer
    t += bf16_uniform(seed, p + "shared_head.norm.weight", (H,), 0.8, 1.2)
    t += normal(seed, p + "shared_head.head.weight", (V, H), 2.0 / math.sqrt(H))
    return t


def final_tensors(seed, vocab, hidden, tie=False, normal=bf16_normal):
    """model.norm [H] and, unless tied, lm_head [V, H]."""
    t = bf16_uniform(seed, "model.norm.weight", (hidden,), 0.8, 1.2)
    if not tie:
        t += normal(seed, "lm_head.weight", (vocab, hidden), 2.0 / math.sqrt(hidden))
    return t


# --- expected layouts ({name: (dtype, shape)}, as check_layout.py compares) ----------------
def expect_linear(t, name, rows, cols, fp8=False, scale_dtype="F32", block=(128, 128),
                  channel=False):
    """A linear's weight: BF16 [rows, cols], or F8_E4M3 + weight_scale_inv [ceil(rows / bo),
    ceil(cols / bi)] in scale_dtype, or with channel F8_E4M3 + weight_scale [rows, 1]
    (compressed-tensors)."""
    if fp8 and channel:
        t[name] = ("F8_E4M3", [rows, cols])
        t[name + "_scale"] = (scale_dtype, [rows, 1])
    elif fp8:
        t[name] = ("F8_E4M3", [rows, cols])
        t[name + "_scale_inv"] = (scale_dtype, [-(-rows // block[0]), -(-cols // block[1])])
    else:
        t[name] = ("BF16", [rows, cols])


def expect_mlp(lin, prefix, inter, hidden):
    """The gate/up/down_proj entries of a SwiGLU MLP under `prefix`; lin(name, rows, cols)."""
    for n, r, c in (("gate_proj", inter, hidden), ("up_proj", inter, hidden),
                    ("down_proj", hidden, inter)):
        lin(prefix + f"{n}.weight", r, c)


def expect_biased_moe(t, lin, p, experts, inter, shared_inter, hidden):
    """A DeepseekV3MoE / Glm4MoeMoE layer under prefix p: router mlp.gate.weight [E, H] BF16
    and mlp.gate.e_score_correction_bias [E] F32, the experts' MLPs, and the shared experts'
    (shared_inter wide) when there are any."""
    t[p + "mlp.gate.weight"] = ("BF16", [experts, hidden])
    t[p + "mlp.gate.e_score_correction_bias"] = ("F32", [experts])
    for e in range(experts):
        expect_mlp(lin, p + f"mlp.experts.{e}.", inter, hidden)
    if shared_inter:
        expect_mlp(lin, p + "mlp.shared_experts.", shared_inter, hidden)


def expect_mtp_layers(t, cfg, layer):
    """The num_nextn_predict_layers MTP layers model.layers.<num_hidden_layers + i>.*: the
    decoder layer (layer(l) adds it) plus the entries of mtp_layer_tensors."""
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    for l in range(L, L + (cfg.get("num_nextn_predict_layers") or 0)):
        layer(l)
        p = f"model.layers.{l}."
        t.update({p + "embed_tokens.weight": ("BF16", [V, H]), p + "enorm.weight": ("BF16", [H]),
                  p + "hnorm.weight": ("BF16", [H]), p + "eh_proj.weight": ("BF16", [H, 2 * H]),
                  p + "shared_head.norm.weight": ("BF16", [H]),
                  p + "shared_head.head.weight": ("BF16", [V, H])})


def check_expected(tensors, expected):
    assert {t[0]: (t[1], t[2]) for t in tensors} == expected, \
        "generator / expected_tensors disagree"


# --- the command line ----------------------------------------------------------------------
def add_drop_arg(ap):
    ap.add_argument("--drop", action="append", default=[], metavar="TENSOR",
                    help="omit this tensor (repeatable), for negative loader tests")


def apply_drop(drop, *groups):
    """The tensor lists without the --drop tensors (each of which must exist)."""
    names = {t[0] for g in groups for t in g}
    for n in drop:
        if n not in names:
            sys.exit(f"--drop: no tensor named {n}")
    return [[t for t in g if t[0] not in drop] for g in groups]


def save_model(out, config, gen_config, write, n_tensors, t0):
    """config.json, generation_config.json, then write() (the shards; a ValueError -> exit 1)
    into folder `out`; reports the count and the time since t0."""
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "config.json"), config)
    write_json(os.path.join(out, "generation_config.json"), gen_config)
    try:
        write()
    except ValueError as e:
        sys.exit(f"error: {e}")
    print(f"wrote {n_tensors} tensors to {out} in {time.time() - t0:.2f}s", file=sys.stderr)


def write_model(a, tensors, config, gen_config, t0, metadata, zero_based=False, expected=None):
    """The --out path of a one-list generator: the tensors checked against `expected` (when
    given), --drop applied, then config, generation config and write_checkpoint into a.out
    (a.shards shards)."""
    if expected is not None:
        check_expected(tensors, expected)
    tensors, = apply_drop(a.drop, tensors)
    save_model(a.out, config, gen_config,
               lambda: write_checkpoint(a.out, tensors, a.shards, zero_based=zero_based,
                                        metadata=metadata), len(tensors), t0)
