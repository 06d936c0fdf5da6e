"""Output helpers shared by the oracles (I/O glue, no model math).

write_dump: named intermediates as <name>.f32 / <name>.i32 raw little-endian
files plus manifest.json {name: {"dtype", "shape"}}, the format of
moestream's trace hook (src/base/trace.h). top2_margin: the top-1/top-2 logit
gap per row, for reporting how far an argmax is from flipping.
"""
import json
import os

import numpy as np


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
