"""Shared helpers for the golden generators in tools/ (numpy + ml_dtypes only).

A golden is a safetensors file: tensors named like the op's inputs, upstream outputs named
`expected.<output>`, and metadata `op`, `params` (`k=v;k=v`), `tol.<output>`
(`exact|sameset|close:ATOL:RTOL|nmse:MAX`) and `source`. `duet check` runs every file in
fixtures/goldens/.
"""

import json
import os
import struct

import ml_dtypes
import numpy as np

_DTYPES = {
    np.dtype(np.float32): "F32",
    np.dtype(np.float64): "F64",
    np.dtype(np.float16): "F16",
    np.dtype(ml_dtypes.bfloat16): "BF16",
    np.dtype(np.uint8): "U8",
    np.dtype(np.int8): "I8",
    np.dtype(np.uint16): "U16",
    np.dtype(np.int32): "I32",
    np.dtype(np.uint32): "U32",
    np.dtype(np.int64): "I64",
}

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "goldens")


def save(name, tensors, metadata):
    """Writes fixtures/goldens/<name>.safetensors (little endian, tensors sorted by name)."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs = []
    offset = 0
    for key in sorted(tensors):
        arr = np.ascontiguousarray(tensors[key])
        dt = _DTYPES[arr.dtype]
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[key] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    path = os.path.join(GOLDEN_DIR, name + ".safetensors")
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    size = os.path.getsize(path)
    assert size < 200_000, f"{path} is {size} bytes; keep goldens under 200 KB"
    print(f"wrote {os.path.relpath(path)} ({size} bytes)")


def params(**kw):
    return ";".join(f"{k}={v}" for k, v in kw.items())


def log_uniform(rng, n, lo_exp, hi_exp):
    """Random signs, magnitudes 2^U(lo_exp, hi_exp), as float32."""
    mag = np.exp2(rng.uniform(lo_exp, hi_exp, n))
    sign = np.where(rng.integers(0, 2, n) == 0, 1.0, -1.0)
    return (mag * sign).astype(np.float32)
