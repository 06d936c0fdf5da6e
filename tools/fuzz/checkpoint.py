#!/usr/bin/python3
"""Checkpoint fuzzer: seeded, bounded mutations of a model folder's files.

Each case copies a fixture folder (links for the files it leaves alone),
applies one mutation to one file -- a safetensors header (JSON edits, the
length field, byte flips), its data bytes, a truncation, the index,
config.json, generation_config.json, tokenizer.json or
tokenizer_config.json -- and drives `inspect`, `logits` and a short `run`
(or `tokenize` for tokenizer cases) with a time limit. A case fails on:

  - a sanitizer report (AddressSanitizer, UBSan "runtime error:", leaks),
  - a hang (the time limit),
  - a crash (a signal, an exit status >= 128),
  - exit 0 from `logits` with non-finite logits (NaN or Inf in the file).

Everything else -- a refusal with a message, or a clean run on a mutation
that did not matter -- passes. Prints "PASS checkpoint_fuzz (...)" with the
number of cases, clean runs and distinct error messages (digits and paths
folded), or one FAIL line per failing case with the command to reproduce.

  tools/fuzz/checkpoint.py --bin ./moestream --fixtures ../shared/fixtures \\
      [--tokenizer DIR] [--seconds 20] [--seed 1] [--cases N] [--work DIR] [--errors]
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

FAMILIES = ["gpt_oss", "qwen3_moe", "deepseek_v3", "longcat_flash", "qwen3_moe_fp8"]
SANITIZER = re.compile(r"AddressSanitizer|LeakSanitizer|runtime error:|UndefinedBehaviorSanitizer")
ODD_VALUES = [0, -1, 1, 2, 3, 7, 2**31, 2**31 - 1, 2**62, -2**62, 1.5, -0.0, 1e308, -1e308,
              "x", "", None, [], {}, True, False, [1, 2], "nan"]


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return raw, n, json.loads(raw[8:8 + n])


def write_st(path, header, data, pad=True, hlen_delta=0):
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", max(0, len(h) + hlen_delta)) + h + data)


def random_value(rng):
    return rng.choice(ODD_VALUES)


def mutate_json_tree(rng, obj, depth=0):
    """Replaces, deletes or adds one node somewhere in obj (in place)."""
    if isinstance(obj, dict) and obj:
        k = rng.choice(list(obj))
        if depth < 6 and isinstance(obj[k], (dict, list)) and obj[k] and rng.random() < 0.7:
            return mutate_json_tree(rng, obj[k], depth + 1)
        r = rng.random()
        if r < 0.2:
            del obj[k]
        elif r < 0.3:
            obj[k + "_x"] = random_value(rng)
        else:
            obj[k] = random_value(rng)
        return
    if isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        if depth < 6 and isinstance(obj[i], (dict, list)) and obj[i] and rng.random() < 0.7:
            return mutate_json_tree(rng, obj[i], depth + 1)
        if rng.random() < 0.2:
            del obj[i]
        else:
            obj[i] = random_value(rng)


def mutate_json_file(rng, path):
    with open(path, "rb") as f:
        raw = f.read()
    r = rng.random()
    if r < 0.15:  # syntax: truncate or flip a byte
        if rng.random() < 0.5 and len(raw) > 1:
            raw = raw[:rng.randrange(len(raw))]
        else:
            b = bytearray(raw)
            b[rng.randrange(len(b))] = rng.randrange(256)
            raw = bytes(b)
        return write_bytes(path, raw), "bytes"
    obj = json.loads(raw)
    mutate_json_tree(rng, obj)
    return write_bytes(path, json.dumps(obj).encode()), "tree"


def write_bytes(path, raw):
    with open(path, "wb") as f:
        f.write(raw)


def mutate_config(rng, path):
    with open(path) as f:
        c = json.load(f)
    if rng.random() < 0.6:  # a scalar the family reads, set to an odd value
        keys = [k for k, v in c.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        k = rng.choice(keys)
        v = c[k]
        c[k] = rng.choice([random_value(rng), v + 1, v - 1, v * 2, -v, 0])
        write_bytes(path, json.dumps(c).encode())
        return "config:" + k
    return "config:" + mutate_json_file(rng, path)[1]


def mutate_shard_header(rng, path):
    raw, n, h = read_st(path)
    data = raw[8 + n:]
    names = [k for k in h if k != "__metadata__"]
    t = h[rng.choice(names)]
    r = rng.random()
    what = "header"
    if r < 0.15:
        t["dtype"] = rng.choice(["F32", "BF16", "F16", "U8", "I8", "F8_E4M3", "F64", "Q4", ""])
        what = "dtype"
    elif r < 0.35:
        i = rng.randrange(len(t["shape"])) if t["shape"] else 0
        if t["shape"]:
            t["shape"][i] = rng.choice([0, 1, t["shape"][i] + 1, t["shape"][i] - 1,
                                        t["shape"][i] * 2, -1, 2**40])
        else:
            t["shape"] = [1]
        if rng.random() < 0.3:
            t["shape"].append(1)
        what = "shape"
    elif r < 0.55:
        i = rng.randrange(2)
        t["data_offsets"][i] += rng.choice([-1, 1, -8, 8, 2**40])
        what = "offsets"
    elif r < 0.65:
        del h[rng.choice(names)]
        what = "missing tensor"
    elif r < 0.8:
        write_st(path, h, data, hlen_delta=rng.choice([-1, 1, -8, 8, 2**20]))
        return "header length"
    elif r < 0.9:
        write_st(path, h, data, pad=False)
        return "unpadded header"
    else:
        b = bytearray(raw)
        b[8 + rng.randrange(n)] = rng.randrange(256)
        write_bytes(path, bytes(b))
        return "header bytes"
    write_st(path, h, data)
    return what


def mutate_shard_data(rng, path):
    raw, n, h = read_st(path)
    b = bytearray(raw)
    r = rng.random()
    if r < 0.5:  # flips in the data: weights change, may become NaN or Inf
        for _ in range(rng.choice([1, 4, 64])):
            b[8 + n + rng.randrange(len(b) - 8 - n)] = rng.randrange(256)
        write_bytes(path, bytes(b))
        return "data bytes"
    if r < 0.75:  # a whole tensor of NaN or Inf bit patterns
        names = [k for k in h if k != "__metadata__"]
        t = h[rng.choice(names)]
        a, e = t["data_offsets"]
        fill = rng.choice([b"\xff", b"\x7f\x80", b"\x00\x00\x80\x7f"])
        span = e - a
        b[8 + n + a:8 + n + e] = (fill * (span // len(fill) + 1))[:span]
        write_bytes(path, bytes(b))
        return "non-finite tensor"
    write_bytes(path, raw[:rng.randrange(8, len(raw))])
    return "truncated shard"


def mutate_index(rng, path):
    with open(path) as f:
        idx = json.load(f)
    wm = idx.get("weight_map", {})
    r = rng.random()
    if r < 0.3 and wm:
        del wm[rng.choice(list(wm))]
        what = "index: entry removed"
    elif r < 0.5 and wm:
        wm[rng.choice(list(wm))] = rng.choice(["missing.safetensors", "../../etc/passwd",
                                               "/dev/zero", "", "model.safetensors.index.json"])
        what = "index: entry redirected"
    elif r < 0.6:
        idx.setdefault("metadata", {})["total_size"] = rng.choice([0, -1, 1, 2**62])
        what = "index: total_size"
    else:
        return "index:" + mutate_json_file(rng, path)[1]
    write_bytes(path, json.dumps(idx).encode())
    return what


def make_case(rng, src, dst, tok_src):
    """Copies src to dst (links for untouched files) and mutates one file."""
    os.makedirs(dst)
    files = sorted(os.listdir(src))
    if tok_src:
        files += [f for f in ("tokenizer.json", "tokenizer_config.json")
                  if os.path.exists(os.path.join(tok_src, f))]
    shards = [f for f in files if f.endswith(".safetensors")]
    choices = [("config", "config.json"), ("header", None), ("data", None)]
    if "model.safetensors.index.json" in files:
        choices.append(("index", "model.safetensors.index.json"))
    if "generation_config.json" in files:
        choices.append(("gen", "generation_config.json"))
    if tok_src:
        choices += [("tokenizer", "tokenizer.json"), ("tokenizer", "tokenizer_config.json")]
    kind, target = rng.choice(choices)
    if target is None:
        target = rng.choice(shards)
    for f in files:
        s = os.path.join(tok_src if f.startswith("tokenizer") and tok_src else src, f)
        if f == target:
            shutil.copyfile(s, os.path.join(dst, f))
        else:
            os.symlink(os.path.abspath(s), os.path.join(dst, f))
    p = os.path.join(dst, target)
    if kind == "config":
        what = mutate_config(rng, p)
    elif kind == "header":
        what = mutate_shard_header(rng, p)
    elif kind == "data":
        what = mutate_shard_data(rng, p)
    elif kind == "index":
        what = mutate_index(rng, p)
    else:
        what = kind + ":" + mutate_json_file(rng, p)[1]
    return kind, target, what


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return None, "", ""
    except OSError as e:  # the binary itself could not be started
        return -1, "", "cannot start %s: %s" % (cmd[0], e)


def finite_file(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return True
    vals = struct.unpack("<%df" % (len(raw) // 4), raw[:len(raw) // 4 * 4])
    return all(math.isfinite(v) for v in vals)


def fold(msg):
    msg = re.sub(r"/[^\s:\"']+", "PATH", msg)
    return re.sub(r"-?\d+(\.\d+)?(e[+-]?\d+)?", "N", msg).strip()[:160]


def check_case(args, d, kind, ids):
    """Runs the commands of one case; returns (failures, errors, clean)."""
    out = os.path.join(d, "logits.f32")
    cmds = [[args.bin, "tokenize", d, "--text", "Hello, world: 42 ünïcode ∑ 日本"]]
    if kind != "tokenizer":
        cmds = [[args.bin, "inspect", d],
                [args.bin, "logits", d, "--prompt-ids", ids, "--out", out],
                [args.bin, "run", d, "--prompt-ids", ids, "-n", "3", "--ids", "--temp", "0"]]
    fails, errors, clean = [], [], 0
    for cmd in cmds:
        rc, so, se = run(cmd, args.timeout)
        shown = " ".join(cmd)
        if rc is None:
            fails.append("hang (> %d s): %s" % (args.timeout, shown))
        elif SANITIZER.search(se):
            fails.append("sanitizer: %s: %s" % (shown, SANITIZER.search(se).group(0)))
        elif rc < 0 or rc >= 128:
            fails.append("crash (status %d): %s: %s" % (rc, shown, se.strip()[-200:]))
        elif rc == 0 and cmd[1] == "logits" and not finite_file(out):
            fails.append("exit 0 with non-finite logits: %s" % shown)
        elif rc == 0:
            clean += 1
        else:
            last = [l for l in se.strip().split("\n") if l.strip()]
            errors.append(fold(last[-1] if last else "status %d, no message" % rc))
    return fails, errors, clean


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="./moestream")
    ap.add_argument("--fixtures", default="../shared/fixtures")
    ap.add_argument("--tokenizer", help="folder with a tokenizer.json and tokenizer_config.json")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--cases", type=int, default=0, help="stop after this many (0: by time)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=30)
    ap.add_argument("--work")
    ap.add_argument("--errors", action="store_true", help="print the distinct errors")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    fams = [f for f in FAMILIES if os.path.isdir(os.path.join(args.fixtures, f))]
    if not fams:
        print("FAIL checkpoint_fuzz: no fixtures under %s" % args.fixtures)
        return 1
    work = args.work or tempfile.mkdtemp(prefix="ckfuzz.")
    os.makedirs(work, exist_ok=True)
    t0, n, clean, failed = time.time(), 0, 0, 0
    errors = {}
    kinds = {}
    while (args.cases and n < args.cases) or (not args.cases and time.time() - t0 < args.seconds):
        fam = fams[n % len(fams)]
        src = os.path.join(args.fixtures, fam)
        d = os.path.join(work, "case")
        shutil.rmtree(d, ignore_errors=True)
        case_seed = rng.randrange(2**32)
        crng = random.Random(case_seed)
        tok = args.tokenizer if args.tokenizer and crng.random() < 0.25 else None
        kind, target, what = make_case(crng, src, d, tok)
        kinds[kind] = kinds.get(kind, 0) + 1
        ids = os.path.join(src, "tokens.txt")
        fails, errs, ok = check_case(args, d, kind, ids)
        n += 1
        clean += ok
        for e in errs:
            errors[e] = errors.get(e, 0) + 1
        for f in fails:
            failed += 1
            print("FAIL checkpoint_fuzz_case_%d: %s (%s, %s of %s; replay: --seed %d "
                  "--cases %d)" % (n, f, fam, what, target, args.seed, n))
    shutil.rmtree(os.path.join(work, "case"), ignore_errors=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    if args.errors:
        for e, c in sorted(errors.items(), key=lambda x: -x[1]):
            print("     %5d  %s" % (c, e))
    mix = ", ".join("%s %d" % kv for kv in sorted(kinds.items()))
    if failed == 0:
        print("PASS checkpoint_fuzz (%d cases in %.0f s: %s; %d clean runs, %d distinct "
              "errors)" % (n, time.time() - t0, mix, clean, len(errors)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
