"""Independent safetensors reader in plain NumPy (no torch, no `safetensors` package).

Owns: parsing the safetensors container and a model folder (index or single file), and the
exact widening of stored number formats to NumPy arrays.

Format followed: huggingface/safetensors `docs` / `safetensors/src/tensor.rs` (`SafeTensors::
deserialize`): u64 little-endian header length N, N bytes of UTF-8 JSON
`{"__metadata__"?: {str: str}, name: {"dtype", "shape", "data_offsets": [begin, end]}}`,
offsets relative to the first byte after the header, raw little-endian row-major data.
Model folders follow transformers' sharded checkpoints (`model.safetensors.index.json`
`{"metadata": {...}, "weight_map": {name: file}}`) or a single `model.safetensors`.

Widening (all exact): BF16 -> f32 by shifting the 16 stored bits to the top of a float32;
F16 -> f32; F8_E4M3 (OCP e4m3fn: bias 7, subnormals m/8*2^-6, S.1111.111 = NaN, no inf) and
F8_E5M2 (top byte of an IEEE half) and F8_E8M0 (2^(e-127), 0xFF = NaN) through 256-entry
tables. F64 stays float64; integer and bool dtypes keep their own NumPy type.
"""
import json
import os
import struct

import numpy as np

# Stored dtype -> NumPy dtype of the raw little-endian bytes.
RAW_DTYPES = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
    "U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64,
    "F16": np.float16, "BF16": np.uint16, "F32": np.float32, "F64": np.float64,
    "F8_E4M3": np.uint8, "F8_E5M2": np.uint8, "F8_E8M0": np.uint8,
}
ITEMSIZE = {k: np.dtype(v).itemsize for k, v in RAW_DTYPES.items()}


def _e4m3fn_table():
    t = np.empty(256, dtype=np.float32)
    for code in range(256):
        s = -1.0 if code & 0x80 else 1.0
        e = (code >> 3) & 0xF
        m = code & 0x7
        if e == 0xF and m == 0x7:
            t[code] = np.nan              # e4m3fn has NaN only, no infinities
        elif e == 0:
            t[code] = s * (m / 8.0) * 2.0 ** -6   # subnormal
        else:
            t[code] = s * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return t


def _e5m2_table():
    # e5m2 is exactly the upper byte of an IEEE binary16.
    return (np.arange(256, dtype=np.uint16) << 8).view(np.float16).astype(np.float32)


def _e8m0_table():
    # 2^-127 is a float32 subnormal (exact); code 255 is NaN (2^128 would overflow).
    t = np.ldexp(1.0, np.arange(256) - 127)
    t[255] = np.nan
    t = t.astype(np.float32)
    return t


E4M3_TABLE = _e4m3fn_table()
E5M2_TABLE = _e5m2_table()
E8M0_TABLE = _e8m0_table()


def bf16_to_f32(u16):
    """Exact: a bf16 is the upper half of a float32."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def widen(raw, dtype):
    """Raw stored array (as RAW_DTYPES) -> NumPy value array, exactly."""
    if dtype == "BF16":
        return bf16_to_f32(raw)
    if dtype == "F16":
        return raw.astype(np.float32)
    if dtype == "F8_E4M3":
        return E4M3_TABLE[raw]
    if dtype == "F8_E5M2":
        return E5M2_TABLE[raw]
    if dtype == "F8_E8M0":
        return E8M0_TABLE[raw]
    return raw


def read_header(path):
    """Returns (header dict without __metadata__, metadata or None, data section start)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        size = os.fstat(f.fileno()).st_size
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} exceeds the file")
        hdr = json.loads(f.read(n).decode("utf-8"))
    meta = hdr.pop("__metadata__", None)
    start = 8 + n
    for name, info in hdr.items():
        dt = info["dtype"]
        if dt not in RAW_DTYPES:
            raise ValueError(f"{path}: {name}: unsupported dtype {dt}")
        b, e = info["data_offsets"]
        count = int(np.prod(info["shape"], dtype=np.int64))
        if e - b != count * ITEMSIZE[dt] or b < 0 or start + e > size:
            raise ValueError(f"{path}: {name}: bad data_offsets {b},{e} for {dt}{info['shape']}")
    return hdr, meta, start


class SafetensorsFile:
    """One .safetensors file, tensors read lazily through a memory map."""

    def __init__(self, path):
        self.path = path
        self.header, self.metadata, self.start = read_header(path)
        self._mm = None

    def keys(self):
        return list(self.header.keys())

    def info(self, name):
        return self.header[name]

    def raw(self, name):
        """The stored elements as their raw NumPy type (BF16 -> uint16, F8 -> uint8)."""
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        info = self.header[name]
        b, e = info["data_offsets"]
        buf = self._mm[self.start + b:self.start + e]
        return buf.view(RAW_DTYPES[info["dtype"]]).reshape(info["shape"])

    def get(self, name):
        return np.array(widen(self.raw(name), self.header[name]["dtype"]))


class ModelFolder:
    """A checkpoint folder: model.safetensors.index.json, else model.safetensors, else every
    *.safetensors file in it."""

    def __init__(self, folder):
        self.folder = folder
        self.files = {}
        self.where = {}
        index = os.path.join(folder, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                self.index = json.load(f)
            for name, fname in self.index["weight_map"].items():
                self.where[name] = fname
            for fname in sorted(set(self.where.values())):
                self.files[fname] = SafetensorsFile(os.path.join(folder, fname))
            for name, fname in self.where.items():
                if name not in self.files[fname].header:
                    raise ValueError(f"index names {name} in {fname}, which lacks it")
        else:
            self.index = None
            names = ["model.safetensors"] if os.path.exists(
                os.path.join(folder, "model.safetensors")) else sorted(
                n for n in os.listdir(folder) if n.endswith(".safetensors"))
            if not names:
                raise FileNotFoundError(f"{folder}: no safetensors files")
            for fname in names:
                st = SafetensorsFile(os.path.join(folder, fname))
                self.files[fname] = st
                for name in st.keys():
                    self.where[name] = fname

    def keys(self):
        return sorted(self.where)

    def __contains__(self, name):
        return name in self.where

    def info(self, name):
        return self._file(name).info(name)

    def _file(self, name):
        if name not in self.where:
            raise KeyError(f"tensor {name} not in checkpoint {self.folder}")
        return self.files[self.where[name]]

    def raw(self, name):
        return self._file(name).raw(name)

    def get(self, name):
        return self._file(name).get(name)


if __name__ == "__main__":
    import sys
    m = ModelFolder(sys.argv[1])
    for k in m.keys():
        i = m.info(k)
        print(k, i["dtype"], i["shape"], m.where[k])
