#!/usr/bin/python3
"""Compares two raw float32 logit files with the fixtures' rule.

Owns: the comparison rule of /work/shared/fixtures/README.md ("How an engine test should use
a fixture", step 3): argmax identical at every position and
max |A - REF| <= tol * max |REF| over the whole [n_tokens, vocab] array (tol 1e-3).

CLI: compare.py A.f32 REF.f32 --vocab V [--tol 1e-3]
Prints max abs diff, max|ref|, tolerance and argmax agreement; exit 1 when out of tolerance
or any argmax differs, 2 on a shape problem.
"""
import argparse
import sys

import numpy as np


def load_logits(a_path, ref_path, vocab):
    """The two [n_tokens, vocab] float32 arrays; exits 2 on a shape problem and
    1 when A holds a non-finite value (also used by deviation.py)."""
    a = np.fromfile(a_path, dtype="<f4")
    r = np.fromfile(ref_path, dtype="<f4")
    if a.size != r.size or r.size % vocab or r.size == 0:
        print(f"size mismatch: {a.size} vs {r.size} floats (vocab {vocab})")
        sys.exit(2)
    a = a.reshape(-1, vocab)
    r = r.reshape(-1, vocab)
    if not np.all(np.isfinite(a)):
        print("non-finite values in", a_path)
        sys.exit(1)
    return a, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("ref")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--tol", type=float, default=1e-3, help="relative to max|ref|")
    args = ap.parse_args()
    a, r = load_logits(args.a, args.ref, args.vocab)
    diff = float(np.max(np.abs(a.astype(np.float64) - r)))
    ref_max = float(np.max(np.abs(r)))
    tol = args.tol * ref_max
    am_a, am_r = a.argmax(axis=1), r.argmax(axis=1)
    agree = int(np.sum(am_a == am_r))
    n = r.shape[0]
    print(f"max_abs_diff {diff:.3e} max_abs_ref {ref_max:.4f} tol {tol:.3e} "
          f"argmax_agree {agree}/{n}")
    if agree != n:
        print("argmax differs at positions", np.nonzero(am_a != am_r)[0].tolist())
    sys.exit(0 if diff <= tol and agree == n else 1)


if __name__ == "__main__":
    main()
