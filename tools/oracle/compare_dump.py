#!/usr/bin/python3
"""Compares two named-tensor dump folders (engine vs oracle), L1 style.

Both folders hold <name>.f32/.i32 raw little-endian files and manifest.json
{name: {"dtype", "shape"}} (the format of moestream's trace hook and of the
oracle's --dump).

CLI: compare_dump.py OURS ORACLE [--float NAME ...] [--ints NAME ...] [--tol 1e-4]
  --float NAME: max |ours - oracle| <= tol * (max(oracle) - min(oracle)) (the value range)
  --ints NAME:  identical integer arrays (router top-k ids)
NAME may end with '*' to select every name with that prefix in the oracle manifest.
Prints one line per tensor; exit 1 when any comparison fails.
"""
import argparse
import fnmatch
import json
import os
import sys

import numpy as np


def load(folder, name, manifest):
    m = manifest[name]
    dt = "<f4" if m["dtype"] == "f32" else "<i4"
    a = np.fromfile(os.path.join(folder, name + "." + m["dtype"]), dtype=dt)
    return a.reshape(m["shape"])


def pairs(args, patterns, mo, mr, missing):
    """(name, ours, oracle) for each name of `patterns` (expanded over the oracle manifest);
    a name one manifest lacks is reported, appended to `missing` and skipped."""
    for name in expand(patterns, mr):
        if name not in mo or name not in mr:
            print(f"{name}: missing in {'ours' if name not in mo else 'oracle'}")
            missing.append(name)
            continue
        yield name, load(args.ours, name, mo), load(args.oracle, name, mr)


def expand(patterns, manifest):
    out = []
    for p in patterns:
        hits = sorted(n for n in manifest if fnmatch.fnmatchcase(n, p))
        if not hits:
            out.append(p)  # reported as missing below
        out.extend(hits)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("oracle")
    ap.add_argument("--float", nargs="*", default=[])
    ap.add_argument("--ints", nargs="*", default=[])
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    mo = json.load(open(os.path.join(args.ours, "manifest.json")))
    mr = json.load(open(os.path.join(args.oracle, "manifest.json")))
    ok, missing = True, []
    for name, a, r in pairs(args, args.float, mo, mr, missing):
        if a.shape != r.shape:
            print(f"{name}: shape {list(a.shape)} vs oracle {list(r.shape)}")
            ok = False
            continue
        rng = float(r.max() - r.min())
        diff = float(np.max(np.abs(a.astype(np.float64) - r)))
        good = bool(np.all(np.isfinite(a))) and diff <= args.tol * rng
        print(f"{name}: max_abs_diff {diff:.3e} range {rng:.3f} rel {diff / max(rng, 1e-30):.2e}"
              f" {'ok' if good else 'FAIL'}")
        ok &= good
    for name, a, r in pairs(args, args.ints, mo, mr, missing):
        same = a.shape == r.shape and bool(np.array_equal(a, r))
        if not same:
            bad = np.argwhere(a != r)[:5].tolist() if a.shape == r.shape else "shape"
            print(f"{name}: differs at {bad}")
        ok &= same
    ok = ok and not missing
    print("dump comparison:", "ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
