#!/usr/bin/env python3
"""Writes the small valid seed files the fuzz targets start from (no numpy needed).

Usage: python3 fuzz/seeds/make_seeds.py   (writes fuzz/seeds/<target>/seed-*)

The seeds stay apart from fuzz/corpus/ (which `cargo fuzz cmin` rewrites): scripts/fuzz.sh
passes fuzz/seeds/<target> as an extra read-only corpus, and tests/fuzz_regressions.rs checks
that every seed is accepted by its parser.
"""
import io, json, os, struct, zipfile

ROOT = os.path.dirname(os.path.abspath(__file__))


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


# ---- model config: the tiny fixture model's config.json plus the transformers 5.x spelling ----
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
cfg_path = os.path.join(REPO, "fixtures", "models", "nemotron-tiny-a", "config.json")
if os.path.exists(cfg_path):
    with open(cfg_path, "rb") as f:
        cfg = f.read()
    put("model_config", "tiny-a", cfg)
    c = json.loads(cfg)
    c.pop("hybrid_override_pattern", None)
    c["layers_block_type"] = ["mamba", "moe", "attention", "mlp"]
    c["time_step_limit"] = [0.0, {"__float__": "Infinity"}]
    put("model_config", "tiny-a-layers-block-type", json.dumps(c).encode())

# ---- traces ----
NSYS_KERN = (
    '"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Name"\n'
    '60.5,1200,3,400.0,390.0,380,430,26.5,"void ssu_kernel<float, 128>(Params)"\n'
    '39.5,783,1,783.0,783.0,783,783,0.0,"router_kernel"\n'
)
NSYS_TRACE = (
    "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
    "Bytes (MB),Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name\n"
    "100,50,7,128,1,1,256,1,1,40,0.001,0.0,,,,,NVIDIA H200 (0),1,,7,gemm_kernel\n"
    "200,25,8,,,,,,,,,,1.5,60000,Pageable,Device,NVIDIA H200 (0),1,,7,[CUDA memcpy HtoD]\n"
)
NSYS_NVTX = (
    "Start (ns),End (ns),Duration (ns),DurChild (ns),DurNonChild (ns),Name,PID,TID,Lvl,NumChild,RangeId,ParentId,RangeStack,NameTree\n"
    "10,90,80,30,50,forward,1,1,0,1,1,,:1,forward\n"
)
NCU_RAW = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum","dram__bytes.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed"\n'
    '"","","","","","","","","","","","usecond","Mbyte","%"\n'
    '"0","123","python","h","ssu_kernel","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","12.5","3.2","71.5"\n'
    '"1","123","python","h","router_kernel","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0","0.8","0.1","12.0"\n'
)
NCU_DETAILS = (
    '==PROF== Connected to process 123\n'
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n'
    '"0","123","python","h","ssu_kernel","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","us","12.50"\n'
    '"0","123","python","h","ssu_kernel","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Memory Throughput","%","70.1"\n'
)
KINETO = json.dumps({
    "schemaVersion": 1,
    "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
    "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "void ssu_kernel<float>(P)", "pid": 0, "tid": 7, "ts": 100.5, "dur": 12.25,
         "args": {"device": 0, "stream": 7, "correlation": 5, "grid": [64, 1, 1], "block": [128, 1, 1]}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 90, "dur": 3,
         "args": {"device": 0, "stream": 7, "bytes": 4096}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 99, "dur": 2, "args": {"correlation": 5}},
        {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 1, "tid": 1, "ts": 80, "dur": 50},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
    ],
}).encode()
put("trace_nsys_csv", "kern_sum", NSYS_KERN.encode())
put("trace_nsys_csv", "gpu_trace", NSYS_TRACE.encode())
put("trace_nsys_csv", "nvtx_pushpop", NSYS_NVTX.encode())
put("trace_ncu_csv", "raw", NCU_RAW.encode())
put("trace_ncu_csv", "details", NCU_DETAILS.encode())
put("trace_kineto", "small", KINETO)


def nsys_sqlite():
    """A tiny nsys-export-shaped database (the tables and columns traces/src/nsys_sqlite.rs reads)."""
    import sqlite3, tempfile
    d = tempfile.mkdtemp()
    p = os.path.join(d, "t.sqlite")
    c = sqlite3.connect(p)
    c.execute("PRAGMA page_size=512")
    c.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO StringIds VALUES (1, 'void ssu_kernel<float, 128>(Params)'), (2, 'ssu_kernel'),
            (3, 'cudaLaunchKernel'), (4, 'forward'), (5, 'router_kernel');
        CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT);
        INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H200');
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER, streamId INTEGER, demangledName INTEGER, shortName INTEGER,
            registersPerThread INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER,
            blockY INTEGER, blockZ INTEGER, staticSharedMemory INTEGER, dynamicSharedMemory INTEGER,
            correlationId INTEGER, globalPid INTEGER);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
            (1000, 1400, 0, 7, 1, 2, 40, 64, 1, 1, 128, 1, 1, 0, 1024, 5, 281474993487872),
            (2000, 2100, 0, 7, 5, 5, 32, 8, 1, 1, 256, 1, 1, 0, 0, 6, 281474993487872);
        CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER, name TEXT, label TEXT);
        INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (1, 'CUDA_MEMCPY_KIND_HTOD', 'Host-to-Device');
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER,
            streamId INTEGER, bytes INTEGER, copyKind INTEGER, correlationId INTEGER, globalPid INTEGER);
        INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (900, 950, 0, 7, 4096, 1, 4, 281474993487872);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, nameId INTEGER,
            correlationId INTEGER, globalTid INTEGER);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (990, 999, 3, 5, 281474993487873);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT,
            textId INTEGER, domainId INTEGER, globalTid INTEGER);
        INSERT INTO NVTX_EVENTS VALUES (800, 3000, 59, NULL, 4, 0, 281474993487873),
            (850, 2900, 59, 'inner', NULL, 0, 281474993487873);
    """)
    c.commit()
    c.execute("VACUUM")
    c.close()
    with open(p, "rb") as f:
        return f.read()


db = nsys_sqlite()
put("trace_sqlite", "nsys_small", db)
put("trace_file", "sqlite", b"\x00" + db)
put("trace_file", "nsys_csv", b"\x01" + NSYS_KERN.encode())
put("trace_file", "ncu_csv", b"\x01" + NCU_RAW.encode())
put("trace_file", "kineto", b"\x02" + KINETO)
import gzip
put("trace_file", "kineto_gz", b"\x03" + gzip.compress(KINETO, mtime=0))
