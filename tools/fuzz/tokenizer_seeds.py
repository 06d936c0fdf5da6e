#!/usr/bin/python3
"""Seeds for tools/fuzz/fuzz_tokenizer.c: small byte-level BPE tokenizer.json
files in the shapes the released checkpoints use (a Split regex then
ByteLevel, as gpt-oss and Qwen3; ByteLevel with its own regex and an NFC
normalizer; Sequence pre-tokenizers; merges as strings and as pairs; added
tokens special and not), each followed by a 0xFF byte and a text to encode.

  tools/fuzz/tokenizer_seeds.py OUT_DIR
"""
import json
import os
import sys


def byte_chars():
    """GPT-2's byte-to-character map."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
            list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


def tokenizer(pre, norm, merges_as_pairs):
    bc = byte_chars()
    vocab = {bc[b]: b for b in range(256)}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("Ġw", "o"),
              ("Ġwo", "r"), ("Ġwor", "l"), ("Ġworl", "d"), ("ä", "¸"), ("ä¸", "Ń")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [
                {"id": len(vocab), "content": "<|end|>", "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": True},
                {"id": len(vocab) + 1, "content": "<x>", "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": False}],
            "normalizer": norm, "pre_tokenizer": pre, "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab,
                      "merges": [[a, b] if merges_as_pairs else a + " " + b for a, b in merges]}}


SPLIT = {"type": "Split", "pattern": {"Regex":
         "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
         "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": False}
BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}
SHAPES = [
    ({"type": "Sequence", "pretokenizers": [SPLIT, BYTELEVEL]}, None, False),
    ({"type": "Sequence", "pretokenizers": [SPLIT, BYTELEVEL]}, {"type": "NFC"}, True),
    (dict(BYTELEVEL, use_regex=True), None, True),
    (dict(BYTELEVEL, use_regex=True), {"type": "Sequence", "normalizers": [{"type": "NFC"}]},
     False),
]
TEXT = "hello world<|end|> <x> 中文 ∑ 12345's \r\n\t  !!\xad".encode() + b"\xc3(\xe4\xb8"


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for i, (pre, norm, pairs) in enumerate(SHAPES):
        with open(os.path.join(out, "tokenizer_%d" % i), "wb") as f:
            f.write(json.dumps(tokenizer(pre, norm, pairs), ensure_ascii=i % 2 == 0).encode())
            f.write(b"\xff" + TEXT)


if __name__ == "__main__":
    main()
