#!/usr/bin/python3
"""Edits a tiny gpt_oss checkpoint (tools/tinyckpt/gpt_oss.py over the real o200k
tokenizer) in place for the server tests.

  model.py pad DIR
      Zeroes the lm_head rows of the padding ids (those past the tokenizer's
      last id): their logit is then exactly 0, below the largest of the ~200k
      random logits, so greedy decoding never picks an id without text. The
      server only samples ids that have text (as chat and run -p do), while
      `run --ids` samples from the whole vocabulary: with this edit both give
      the same greedy ids.

  model.py script DIR PIECE...
      Turns the model into a bigram chain: attention and expert outputs are
      zeroed, so the hidden state at each position is the embedding of its
      token; token k of the chain gets basis vector k as its embedding and the
      lm_head row of token k+1 reads that vector. Greedy decoding after the
      first piece then emits the following pieces, in order. A PIECE is a
      special token ("<|channel|>") or the text of one ordinary token (" is");
      every piece must be a distinct token.

  model.py script-ids DIR ID...
      The same chain over token ids (e.g. from `moestream tokenize`).
"""
import json
import os
import struct
import sys

import numpy as np


def tensors(d):
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
    heads = {}
    for f in set(idx.values()):
        with open(os.path.join(d, f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            heads[f] = (8 + n, json.loads(fh.read(n)))
    return idx, heads


def edit(d, idx, heads, name, fn):
    f = idx[name]
    base, h = heads[f]
    t = h[name]
    assert t["dtype"] in ("BF16", "U8"), t["dtype"]
    dt = np.uint16 if t["dtype"] == "BF16" else np.uint8
    a, b = t["data_offsets"]
    m = np.memmap(os.path.join(d, f), dtype=dt, mode="r+", offset=base + a,
                  shape=tuple(t["shape"]))
    fn(m)
    m.flush()
    del m


def tokenizer(d):
    t = json.load(open(os.path.join(d, "tokenizer.json")))
    special = {a["content"]: a["id"] for a in t["added_tokens"]}
    vocab = t["model"]["vocab"]
    n_ids = 1 + max(max(vocab.values()), max(special.values()))
    return special, vocab, n_ids


BF16_ONE = 0x3F80


def bf16(x):
    return np.float32(x).view(np.uint32) >> 16


def pad(d):
    _, _, n_ids = tokenizer(d)
    idx, heads = tensors(d)

    def zero_tail(m):
        m[n_ids:, :] = 0
    edit(d, idx, heads, "lm_head.weight", zero_tail)


def byte_level(s):
    """GPT-2 byte-level spelling of a text (the vocabulary's keys)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, map(chr, cs)))
    return "".join(table[b] for b in s.encode())


def script(d, pieces):
    special, vocab, _ = tokenizer(d)
    ids = []
    for p in pieces:
        i = special.get(p, vocab.get(byte_level(p)))
        if i is None:
            sys.exit("model.py: %r is not one token" % p)
        ids.append(i)
    chain(d, ids)


def chain(d, ids):
    if len(set(ids)) != len(ids):
        sys.exit("model.py: the chain repeats a token")
    cfg = json.load(open(os.path.join(d, "config.json")))
    H = cfg["hidden_size"]
    if len(ids) > H:
        sys.exit("model.py: at most %d pieces" % H)
    idx, heads = tensors(d)
    for name in idx:
        if name.endswith(("self_attn.o_proj.weight", "self_attn.o_proj.bias",
                          "mlp.experts.down_proj_bias", "mlp.experts.down_proj_blocks")):
            edit(d, idx, heads, name, lambda m: m.fill(0))
    edit(d, idx, heads, "model.norm.weight", lambda m: m.fill(BF16_ONE))

    def embed(m):
        for k, i in enumerate(ids):
            m[i, :] = 0
            m[i, k] = BF16_ONE

    def head(m):
        m[:, :] = 0
        for k in range(1, len(ids)):
            m[ids[k], k - 1] = bf16(4.0)
    edit(d, idx, heads, "model.embed_tokens.weight", embed)
    edit(d, idx, heads, "lm_head.weight", head)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "pad":
        pad(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "script":
        script(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "script-ids":
        chain(sys.argv[2], [int(x) for x in sys.argv[3:]])
    else:
        sys.exit(__doc__)
