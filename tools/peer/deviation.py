#!/usr/bin/python3
"""deviation.py: how far each arithmetic moves a gpt_oss model's next-token
distributions from moestream's exact path, over random prompts: moestream
--precision fast and int8, and llama.cpp (bench/peer/llama.mjs on the GGUF
that gguf_from_hf.py writes of the same folder). On the upstream fixture the
exact path equals the reference logits to ~1e-5, so this is each
arithmetic's distance from the reference, on more prompts than the
fixture's one (a single prompt can flatter or punish one engine by a
routing flip).

  /usr/bin/python3 tools/peer/deviation.py MODEL_DIR GGUF [--prompts N] [--len L] [--seed S]

Prints, per arithmetic, KL(exact || x) per position (nats: mean, median,
95th percentile, max) and how often the argmax agrees with exact's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# tools/oracle's deviation.py (ahead of this file's own folder on the path)
sys.path.insert(0, os.path.join(ROOT, "tools", "oracle"))
from deviation import log_softmax  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("gguf")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--len", type=int, default=28)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default=os.path.join(ROOT, "moestream"))
    args = ap.parse_args()
    vocab = json.load(open(os.path.join(args.model, "config.json")))["vocab_size"]
    tmp = tempfile.mkdtemp()
    ids_file, out_file = os.path.join(tmp, "ids.txt"), os.path.join(tmp, "logits.f32")

    def moestream(ids, precision):
        with open(ids_file, "w") as f:
            f.write("\n".join(map(str, ids)))
        subprocess.run([args.bin, "logits", args.model, "--prompt-ids", ids_file, "--out",
                        out_file, "--precision", precision], check=True,
                       stderr=subprocess.DEVNULL)
        x = np.fromfile(out_file, dtype=np.float32).reshape(len(ids), vocab)
        return log_softmax(x.astype(np.float64))

    def llama(ids):
        out = subprocess.run(["node", os.path.join(ROOT, "bench/peer/llama.mjs"), "probs",
                              args.gguf] + [str(i) for i in ids],
                             check=True, capture_output=True, text=True).stdout
        p = np.array([json.loads(line) for line in out.splitlines() if line.strip()])
        if p.shape != (len(ids), vocab):
            raise SystemExit(f"deviation: llama.cpp gave {p.shape}, expected {(len(ids), vocab)}")
        return np.log(np.maximum(p, 1e-30))

    rng = np.random.default_rng(args.seed)
    names = ["moestream fast", "moestream int8", "llama.cpp"]
    kls = {n: [] for n in names}
    agree = dict.fromkeys(names, 0)
    for _ in range(args.prompts):
        ids = rng.integers(0, vocab, args.len).tolist()
        exact = moestream(ids, "exact")
        pe = np.exp(exact)
        for n in names:
            x = llama(ids) if n == "llama.cpp" else moestream(ids, n.split()[1])
            kls[n] += ((pe * (exact - x)).sum(1)).tolist()
            agree[n] += int((x.argmax(1) == exact.argmax(1)).sum())
    total = args.prompts * args.len
    print(f"{args.prompts} random prompts of {args.len} ids (seed {args.seed}) on {args.model}")
    print("| arithmetic | KL mean | KL median | KL p95 | KL max | argmax agrees with exact |")
    print("|---|---|---|---|---|---|")
    for n in names:
        v = np.array(kls[n])
        print(f"| {n} | {v.mean():.2e} | {np.median(v):.2e} | {np.percentile(v, 95):.2e} | "
              f"{v.max():.2e} | {agree[n]}/{total} ({100 * agree[n] / total:.1f}%) |")


if __name__ == "__main__":
    main()
