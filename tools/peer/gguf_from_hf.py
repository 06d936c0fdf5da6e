#!/usr/bin/python3
"""gguf_from_hf.py: a gpt_oss or qwen3_moe checkpoint folder as downloaded
(config.json, safetensors shards, the index) written as one GGUF file that
llama.cpp loads, with the very same weights: BF16 tensors stay BF16, MXFP4
experts stay MXFP4 (repacked into ggml's 17-byte blocks, every code and
scale byte kept), 1-D tensors (norms, biases, sinks) widened to F32 as
llama.cpp's own converter does. It exists so that bench/peer.sh can run
llama.cpp beside moestream on the same model (MISSION.md, "Peers");
llama.cpp's converter needs PyTorch and the gguf package, which this
machine kind cannot install (no PyPI).

The layout follows llama.cpp's convert_hf_to_gguf.py (read, not copied).
qwen3_moe: each layer's experts stacked into one 3-D tensor per projection.
gpt_oss: gate_up rows interleaved (gate even, up odd) split into
ffn_gate_exps and ffn_up_exps, their biases likewise; MXFP4 bytes re-ordered
from HF's (element 2i in the low nibble of byte i) to ggml's (element j in the
low nibble of byte j, element j + 16 in its high nibble), the scale byte in
front. The vocabulary is a stand-in (the 256 byte tokens of byte-level BPE,
then "[PADi]"), so the file is driven by token ids, which is how the bench
and the test feed it: no text passes through llama.cpp's tokenizer.

  /usr/bin/python3 tools/peer/gguf_from_hf.py MODEL_DIR OUT.gguf
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
import safetensors_np as st  # noqa: E402

GGUF_VERSION = 3
ALIGN = 32
T_F32, T_BF16, T_MXFP4 = 0, 30, 39
V_U32, V_F32, V_BOOL, V_STR, V_ARR, V_I32 = 4, 6, 7, 8, 9, 5


def die(msg):
    sys.stderr.write("gguf_from_hf: " + msg + "\n")
    sys.exit(1)


class Shards:
    """The checkpoint's tensors by name (tools/oracle/safetensors_np.py's
    reader), each checked for the stored type it is read as."""

    def __init__(self, folder):
        self.folder = folder
        self.m = st.ModelFolder(folder)

    def _raw(self, name, dtypes):
        if name not in self.m:
            die(f"{self.folder}: tensor {name} not found in any shard")
        dt = self.m.info(name)["dtype"]
        if dt not in dtypes:
            die(f"{name}: dtype {dt}, expected {' or '.join(dtypes)}")
        return self.m.raw(name), dt

    def u16(self, name):
        return self._raw(name, ("BF16",))[0]

    def u8(self, name):
        return self._raw(name, ("U8", "I8", "F8_E8M0"))[0].view(np.uint8)

    def f32(self, name):
        """A BF16 or F32 tensor widened to float32 (exact)."""
        raw, dt = self._raw(name, ("BF16", "F32"))
        return st.widen(raw, dt)


def mxfp4_blocks(blocks, scales):
    """HF [..., n, 16] code bytes + [..., n] scales -> ggml [..., n, 17] blocks."""
    lo = blocks & 0x0F  # element 2i
    hi = blocks >> 4  # element 2i + 1
    elems = np.stack((lo, hi), axis=-1).reshape(blocks.shape[:-1] + (32,))
    qs = elems[..., :16] | (elems[..., 16:] << 4)
    return np.concatenate((scales[..., None], qs), axis=-1).astype(np.uint8)


class Writer:
    def __init__(self):
        self.kv = []
        self.tensors = []  # (name, ggml dims (innermost first), type, nbytes, make)

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))

    def tensor(self, name, dims, ttype, nbytes, make):
        self.tensors.append((name, dims, ttype, nbytes, make))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def _value(self, vtype, value):
        if vtype == V_U32:
            return struct.pack("<I", value)
        if vtype == V_I32:
            return struct.pack("<i", value)
        if vtype == V_F32:
            return struct.pack("<f", value)
        if vtype == V_BOOL:
            return struct.pack("<B", 1 if value else 0)
        if vtype == V_STR:
            return self._str(value)
        etype, items = value
        out = [struct.pack("<IQ", etype, len(items))]
        out += [self._value(etype, v) for v in items]
        return b"".join(out)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(b"GGUF" + struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv)))
            for key, vtype, value in self.kv:
                f.write(self._str(key) + struct.pack("<I", vtype) + self._value(vtype, value))
            offset = 0
            for name, dims, ttype, nbytes, _ in self.tensors:
                f.write(self._str(name) + struct.pack("<I", len(dims)))
                f.write(struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", ttype, offset))
                offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN
            f.write(b"\0" * (-f.tell() % ALIGN))
            for name, dims, ttype, nbytes, make in self.tensors:
                data = np.ascontiguousarray(make())
                if data.nbytes != nbytes:
                    die(f"{name}: {data.nbytes} bytes made, {nbytes} announced")
                data.tofile(f)
                f.write(b"\0" * (-nbytes % ALIGN))


def common_kv(w, a, cfg, folder, ff):
    """The keys every family writes, under architecture a."""
    w.add("general.architecture", V_STR, a)
    w.add("general.name", V_STR, os.path.basename(os.path.normpath(folder)))
    w.add("general.alignment", V_U32, ALIGN)
    w.add(f"{a}.block_count", V_U32, cfg["num_hidden_layers"])
    w.add(f"{a}.context_length", V_U32, cfg["max_position_embeddings"])
    w.add(f"{a}.embedding_length", V_U32, cfg["hidden_size"])
    w.add(f"{a}.feed_forward_length", V_U32, ff)
    w.add(f"{a}.expert_feed_forward_length", V_U32, ff)
    w.add(f"{a}.attention.head_count", V_U32, cfg["num_attention_heads"])
    w.add(f"{a}.attention.head_count_kv", V_U32, cfg["num_key_value_heads"])
    w.add(f"{a}.attention.key_length", V_U32, cfg["head_dim"])
    w.add(f"{a}.attention.value_length", V_U32, cfg["head_dim"])
    w.add(f"{a}.attention.layer_norm_rms_epsilon", V_F32, cfg["rms_norm_eps"])
    w.add(f"{a}.rope.freq_base", V_F32, float(cfg["rope_theta"]))
    w.add(f"{a}.expert_used_count", V_U32, cfg["num_experts_per_tok"])
    # the stand-in vocabulary: byte tokens, then pads (ids are what is fed)
    V = cfg["vocab_size"]
    byte_chars = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 173)] + \
        [chr(c) for c in range(174, 256)]
    extra = [chr(256 + i) for i in range(256 - len(byte_chars))]
    tokens = (byte_chars + extra)[:min(256, V)] + [f"[PAD{i}]" for i in range(256, V)]
    w.add("tokenizer.ggml.model", V_STR, "gpt2")
    w.add("tokenizer.ggml.pre", V_STR, "default")
    w.add("tokenizer.ggml.tokens", V_ARR, (V_STR, tokens))
    w.add("tokenizer.ggml.token_type", V_ARR, (V_I32, [1] * V))
    w.add("tokenizer.ggml.merges", V_ARR, (V_STR, []))
    eos = cfg.get("eos_token_id", V - 1)
    w.add("tokenizer.ggml.eos_token_id", V_U32, eos if isinstance(eos, int) else eos[0])
    w.add("tokenizer.ggml.add_bos_token", V_BOOL, False)


ATTN = {"q": "q", "k": "k", "v": "v", "o": "output"}  # HF projection -> ggml name


class Tensors:
    """Adds the checkpoint's tensors to a Writer under ggml's names."""

    def __init__(self, sh, w):
        self.sh, self.w = sh, w

    def bf16(self, name, gname):
        t = self.sh.u16(name)
        self.w.tensor(gname, list(reversed(t.shape)), T_BF16, t.nbytes, lambda: t)

    def bf16_stack(self, names, gname):
        """2-D BF16 tensors of one shape as one 3-D tensor (experts)."""
        ts = [self.sh.u16(n) for n in names]
        if any(t.shape != ts[0].shape for t in ts):
            die(f"{gname}: the stacked tensors differ in shape")
        self.w.tensor(gname, list(reversed(ts[0].shape)) + [len(ts)], T_BF16,
                      sum(t.nbytes for t in ts), lambda: np.stack(ts))

    def f32(self, name, gname, sel=None):
        t = self.sh.f32(name)
        if sel is not None:
            t = t[..., sel]
        self.w.tensor(gname, list(reversed(t.shape)), T_F32, t.size * 4,
                      lambda: np.ascontiguousarray(t, dtype=np.float32))

    def model(self, cfg, post_norm, layer):
        """What the families share: embedding, head, norms and attention
        projections; layer(p, g) adds the rest of a layer (p: its HF prefix,
        g: its ggml one); the post-attention norm is named post_norm."""
        self.bf16("model.embed_tokens.weight", "token_embd.weight")
        for i in range(cfg["num_hidden_layers"]):
            p, g = f"model.layers.{i}.", f"blk.{i}."
            self.f32(p + "input_layernorm.weight", g + "attn_norm.weight")
            self.f32(p + "post_attention_layernorm.weight", g + post_norm + ".weight")
            for x in ("q", "k", "v", "o"):
                self.bf16(p + f"self_attn.{x}_proj.weight", g + f"attn_{ATTN[x]}.weight")
            layer(p, g)
        self.f32("model.norm.weight", "output_norm.weight")
        self.bf16("lm_head.weight", "output.weight")

    def mx(self, prefix, gname, rows):
        """MXFP4 experts ({prefix}_blocks, _scales), every row or rows[sel]."""
        bl, sc = self.sh.u8(prefix + "_blocks"), self.sh.u8(prefix + "_scales")
        e, r, nb, _ = bl.shape
        if rows is not None:
            r //= 2
        self.w.tensor(gname, [nb * 32, r, e], T_MXFP4, e * r * nb * 17,
                      lambda: mxfp4_blocks(bl[:, rows] if rows is not None else bl,
                                           sc[:, rows] if rows is not None else sc))


def gpt_oss(cfg, folder, sh, w):
    a = "gpt-oss"
    common_kv(w, a, cfg, folder, cfg["intermediate_size"])
    w.add(f"{a}.expert_count", V_U32, cfg["num_local_experts"])
    w.add(f"{a}.attention.sliding_window", V_U32, cfg["sliding_window"])
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type") == "yarn":
        w.add(f"{a}.rope.scaling.type", V_STR, "yarn")
        w.add(f"{a}.rope.scaling.factor", V_F32, float(rs["factor"]))
        w.add(f"{a}.rope.scaling.original_context_length", V_U32,
              rs["original_max_position_embeddings"])
    t = Tensors(sh, w)

    def layer(p, g):
        for x in ("q", "k", "v", "o"):
            t.f32(p + f"self_attn.{x}_proj.bias", g + f"attn_{ATTN[x]}.bias")
        t.f32(p + "self_attn.sinks", g + "attn_sinks.weight")
        t.bf16(p + "mlp.router.weight", g + "ffn_gate_inp.weight")
        t.f32(p + "mlp.router.bias", g + "ffn_gate_inp.bias")
        ex = p + "mlp.experts."
        t.mx(ex + "gate_up_proj", g + "ffn_gate_exps.weight", slice(0, None, 2))
        t.mx(ex + "gate_up_proj", g + "ffn_up_exps.weight", slice(1, None, 2))
        t.mx(ex + "down_proj", g + "ffn_down_exps.weight", None)
        t.f32(ex + "gate_up_proj_bias", g + "ffn_gate_exps.bias", slice(0, None, 2))
        t.f32(ex + "gate_up_proj_bias", g + "ffn_up_exps.bias", slice(1, None, 2))
        t.f32(ex + "down_proj_bias", g + "ffn_down_exps.bias")

    t.model(cfg, "post_attention_norm", layer)


def qwen3_moe(cfg, folder, sh, w):
    if cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1:
        die(f"{folder}/config.json: dense MLP layers (mlp_only_layers, decoder_sparse_step) "
            "are not written")
    if cfg.get("rope_scaling"):
        die(f"{folder}/config.json: rope_scaling is not written")
    if not cfg.get("norm_topk_prob", False):
        die(f"{folder}/config.json: norm_topk_prob false is not written (llama.cpp's "
            "qwen3moe normalises the top-k weights)")
    a = "qwen3moe"
    common_kv(w, a, cfg, folder, cfg["moe_intermediate_size"])
    w.add(f"{a}.expert_count", V_U32, cfg["num_experts"])
    t = Tensors(sh, w)

    def layer(p, g):
        t.f32(p + "self_attn.q_norm.weight", g + "attn_q_norm.weight")
        t.f32(p + "self_attn.k_norm.weight", g + "attn_k_norm.weight")
        t.bf16(p + "mlp.gate.weight", g + "ffn_gate_inp.weight")
        for x in ("gate", "up", "down"):
            t.bf16_stack([p + f"mlp.experts.{e}.{x}_proj.weight" for e in range(cfg["num_experts"])],
                         g + f"ffn_{x}_exps.weight")

    t.model(cfg, "ffn_norm", layer)


FAMILIES = {"gpt_oss": gpt_oss, "qwen3_moe": qwen3_moe}


def main():
    if len(sys.argv) != 3:
        die("usage: gguf_from_hf.py MODEL_DIR OUT.gguf")
    folder, out = sys.argv[1], sys.argv[2]
    try:
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{folder}/config.json: {e}")
    family = FAMILIES.get(cfg.get("model_type"))
    if family is None:
        die(f"{folder}/config.json: model_type {cfg.get('model_type')!r}; written are "
            + ", ".join(FAMILIES))
    if cfg.get("tie_word_embeddings"):
        die(f"{folder}/config.json: tied embeddings are not written")
    w = Writer()
    try:
        family(cfg, folder, Shards(folder), w)
    except (OSError, ValueError) as e:
        die(str(e))
    w.write(out)


if __name__ == "__main__":
    main()
