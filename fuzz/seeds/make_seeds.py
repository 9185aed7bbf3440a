#!/usr/bin/env python3
"""Writes the small valid seed files the fuzz targets start from (no numpy needed).

Usage: python3 fuzz/seeds/make_seeds.py   (writes into fuzz/corpus/<target>/seed-*)
"""
import io, json, os, struct, zipfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def safetensors(tensors, meta=None):
    header, data = {}, b""
    if meta:
        header["__metadata__"] = meta
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def npy(descr, shape, raw, fortran=False, version=1):
    sh = "(%s)" % ("".join("%d," % d for d in shape) if len(shape) == 1 else ", ".join(str(d) for d in shape))
    h = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, "True" if fortran else "False", sh)
    pre = 10 if version == 1 else 12
    h += " " * ((64 - (pre + len(h) + 1) % 64) % 64) + "\n"
    ln = struct.pack("<H", len(h)) if version == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([version, 0]) + ln + h.encode("latin1") + raw


f32 = lambda *v: struct.pack("<%df" % len(v), *v)
st_seeds = {
    "multi": safetensors(
        {
            "logits": ("F32", [2, 3], f32(1.5, -2.0, 0.25, 3.0, -0.5, 7.0)),
            "bias": ("BF16", [3], struct.pack("<3H", 0x3F80, 0xBF00, 0x4000)),
            "idx": ("I64", [2], struct.pack("<2q", 5, -1)),
            "mask": ("BOOL", [4], bytes([0, 1, 1, 0])),
            "h": ("F16", [1, 2], struct.pack("<2H", 0x3C00, 0xFC00)),
        },
        {"op": "noaux_tc_router", "params": "top_k=2"},
    ),
    "scalar_and_empty": safetensors({"s": ("F64", [], struct.pack("<d", 2.5)), "e": ("U8", [0, 4], b"")}),
    "ints": safetensors({k: (k, [2], bytes(range(2 * n))) for k, n in
                         [("U8", 1), ("I8", 1), ("I16", 2), ("U16", 2), ("I32", 4), ("U32", 4)]}),
}
npy_seeds = {
    "f4": npy("<f4", [2, 3], f32(1, 2, 3, 4, 5, 6)),
    "f8_big_fortran_v2": npy(">f8", [2, 2], struct.pack(">4d", 1, 3, 2, 4), fortran=True, version=2),
    "b1": npy("|b1", [3], bytes([1, 0, 1])),
    "f2_scalar": npy("<f2", [], struct.pack("<H", 0x3C00)),
    "i8_3d": npy("<i8", [1, 2, 1], struct.pack("<2q", 7, -7)),
}
for k, v in st_seeds.items():
    put("safetensors", k, v)
for k, v in npy_seeds.items():
    put("npy", k, v)


def npz(entries, method):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", method) as z:
        for n, data in entries.items():
            z.writestr(n + ".npy", data)
    return b.getvalue()


# tensor_file: first byte picks the extension (0 safetensors, 1 npy, 2 npz, 3 bin).
put("tensor_file", "st", b"\x00" + st_seeds["multi"])
put("tensor_file", "npy", b"\x01" + npy_seeds["f4"])
put("tensor_file", "npz_stored", b"\x02" + npz({"x": npy_seeds["f4"], "m": npy_seeds["b1"]}, zipfile.ZIP_STORED))
put("tensor_file", "npz_deflated", b"\x02" + npz({"y": npy_seeds["i8_3d"]}, zipfile.ZIP_DEFLATED))
