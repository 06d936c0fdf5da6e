#!/usr/bin/python3
"""How far a run's logits are from the reference: the numbers an opt-in
inexact path (--precision fast) reports next to its speed.

Owns: the deviation report of docs/perf.md ("Precision fast"): over a
[n_tokens, vocab] float32 array against the fixture's reference logits,
max |A - REF|, that over max |REF|, argmax agreement, and the
Kullback-Leibler divergence KL(softmax(REF) || softmax(A)) per position
(mean and max, in nats, computed in float64).

CLI: deviation.py A.f32 REF.f32 --vocab V [--max-rel R] [--min-agree F] [--max-kl K]
Prints one line of numbers; exit 1 when a bound given is exceeded or A is
not finite, 2 on a shape problem.
"""
import argparse
import sys

import numpy as np

from compare import load_logits


def log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("ref")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--max-rel", type=float, help="bound on max|A-REF| / max|REF|")
    ap.add_argument("--min-agree", type=float, help="bound on the argmax agreement (0..1)")
    ap.add_argument("--max-kl", type=float, help="bound on the mean KL per position")
    args = ap.parse_args()
    a, r = (v.astype(np.float64) for v in load_logits(args.a, args.ref, args.vocab))
    diff = float(np.max(np.abs(a - r)))
    rel = diff / float(np.max(np.abs(r)))
    agree = float(np.mean(a.argmax(axis=1) == r.argmax(axis=1)))
    lr, la = log_softmax(r), log_softmax(a)
    kl = (np.exp(lr) * (lr - la)).sum(axis=1)
    print(f"max_abs_diff {diff:.3e} rel {rel:.2e} argmax_agree {agree * 100:.1f}% "
          f"kl_mean {kl.mean():.2e} kl_max {kl.max():.2e}")
    bad = (args.max_rel is not None and rel > args.max_rel) or \
          (args.min_agree is not None and agree < args.min_agree) or \
          (args.max_kl is not None and kl.mean() > args.max_kl)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
