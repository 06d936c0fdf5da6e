"""Output and command-line helpers shared by the oracles (I/O glue, no model math).

write_dump: named intermediates as <name>.f32 / <name>.i32 raw little-endian
files plus manifest.json {name: {"dtype", "shape"}}, the format of
moestream's trace hook (src/base/trace.h). top2_margin: the top-1/top-2 logit
gap per row, for reporting how far an argmax is from flipping.
The CLI pieces every oracle uses: the common options (arg_parser), the prompt file, the
prompt pass (one causal pass, or --chunk N tokens at a time through the KV cache), --out /
--dump, greedy decoding with the KV cache (argmax of each step's row, EOS ignored),
--stats margins, and the tensor accounting printed at the end.
"""
import argparse
import json
import os
import sys

import numpy as np

CHUNK_HELP = "feed the prompt N tokens at a time through the KV cache (0: one pass)"
STATS_MARGINS_HELP = "print margins (top1-top2 logit, router top-k boundary) to stderr"
STATS_ROUTING_HELP = "print margins, routing coverage and tensor accounting to stderr"


def top2_margin(logits):
    s = np.sort(logits, axis=-1)
    return (s[..., -1] - s[..., -2]).astype(float)


def write_dump(folder, dump):
    os.makedirs(folder, exist_ok=True)
    manifest = {}
    for name, arr in dump.items():
        if arr.dtype.kind == "i":
            arr, tag = arr.astype("<i4"), "i32"
        else:
            arr, tag = arr.astype("<f4"), "f32"
        arr.tofile(os.path.join(folder, name + "." + tag))
        manifest[name] = {"dtype": tag, "shape": list(arr.shape)}
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")


# --- CLI -----------------------------------------------------------------------------------
def arg_parser(doc):
    """MODEL_DIR --prompt-ids FILE [--out] [--greedy N --greedy-out] [--dump DIR] [--f64]; the
    oracle adds its own options after these."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--prompt-ids", required=True, help="file of whitespace-separated ids")
    ap.add_argument("--out", help="write prompt logits, float32 LE [n_tokens, vocab]")
    ap.add_argument("--greedy", type=int, default=0, help="greedy steps after the prompt")
    ap.add_argument("--greedy-out", help="write the greedy ids, space-separated")
    ap.add_argument("--dump", help="folder for named intermediates + manifest.json")
    ap.add_argument("--f64", action="store_true", help="compute in float64")
    return ap


def compute_dtype(a):
    return np.float64 if a.f64 else np.float32


def read_prompt(path):
    with open(path) as f:
        ids = [int(t) for t in f.read().split()]
    if not ids:
        sys.exit("empty prompt")
    return ids


def load_model(make, preload=False):
    """make() (and with preload its weights()), a refused or broken checkpoint -> exit 1."""
    try:
        m = make()
        if preload:
            m.weights()
    except (KeyError, ValueError, NotImplementedError) as e:
        sys.exit(f"error: {e}")
    return m


def check_prompt(ids, vocab):
    if max(ids) >= vocab or min(ids) < 0:
        sys.exit("prompt id out of vocab range")


def prefill(m, ids, cache, dump, chunk=0, start=0):
    """Logits of ids[start:] (each row predicts the next token), fed `chunk` tokens at a time
    (0: in one pass) through `cache`; the chunks' intermediates concatenated into `dump`."""
    step = chunk if chunk > 0 else len(ids)
    parts, dparts = [], []
    for s in range(start, len(ids), step):
        d = {} if dump is not None else None
        parts.append(m.forward(ids[s:s + step], s, cache, d))
        dparts.append(d)
    logits = np.concatenate(parts)
    if dump is not None:
        for k in dparts[0]:
            dump[k] = np.concatenate([d[k] for d in dparts])
    return logits


def greedy(m, logits, n_prompt, steps, cache, keep_dumps):
    """Greedy continuation: the argmax of the last row (first maximum: the lowest id on ties),
    fed back at the next position through the cache; EOS / stop ids ignored. Returns (ids,
    top1-top2 margin of each step, the steps' dumps when keep_dumps)."""
    out, margins, dumps = [], [], []
    row = logits[-1]
    for step in range(steps):
        nxt = int(np.argmax(row))
        out.append(nxt)
        margins.append(top2_margin(row[None])[0])
        if step + 1 < steps:
            d = {} if keep_dumps else None
            row = m.forward([nxt], n_prompt + step, cache, d)[-1]
            if d is not None:
                dumps.append(d)
    return out, margins, dumps


def run(a, m, ids, cache, chunk=0, start=0, errors=(), greedy_dumps=True):
    """The prompt pass (errors raised in it -> exit 1), --out, --dump, then --greedy steps
    written to --greedy-out (or stdout). Returns (logits, dump, greedy margins, greedy step
    dumps (with --stats and greedy_dumps))."""
    dump = {} if (a.dump or a.stats) else None
    try:
        logits = prefill(m, ids, cache, dump, chunk, start)
    except errors as e:
        sys.exit(f"error: {e}")
    m.end_prompt()
    if a.out:
        logits.astype("<f4").tofile(a.out)
    if a.dump:
        write_dump(a.dump, dump)
    margins, dumps = [], []
    if a.greedy:
        out, margins, dumps = greedy(m, logits, len(ids), a.greedy, cache,
                                     a.stats and greedy_dumps)
        text = " ".join(map(str, out))
        if a.greedy_out:
            with open(a.greedy_out, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
    return logits, dump, margins, dumps


def margin_stats(logits, greedy_margins):
    """The first --stats entries of every oracle."""
    return {"max_abs_logit": float(np.abs(logits).max()),
            "min_top1_top2_margin_prompt": float(top2_margin(logits).min()),
            "min_top1_top2_margin_greedy": min(greedy_margins, default=None)}


def report_tensors(wts, ignored_what=None):
    """stderr: how many tensors were knowingly ignored (with ignored_what), and a warning
    naming those neither read nor ignored."""
    if wts.ignored and ignored_what:
        print(f"note: {len(wts.ignored)} tensors ignored ({ignored_what})", file=sys.stderr)
    unused = set(wts.st.keys()) - wts.used - wts.ignored
    if unused:
        print(f"warning: {len(unused)} tensors unused: {sorted(unused)[:5]}", file=sys.stderr)
