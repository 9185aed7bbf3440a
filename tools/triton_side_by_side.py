#!/usr/bin/env python3
"""mamba_ssm's Triton kernels timed at the Nemotron 3 Super shapes, for issue 5's side-by-side
with `duet bench --backend gpu --shape ssu_b1_bf16 ...` in the same device session.

The kernels come from `.baselines/` (`python3 tools/fetch_baselines.py` here; carry
[".baselines"] to the device, which reaches nothing outside). They are called, never copied
into duet.

What runs:
- selective_state_update (mamba_ssm.ops.triton.selective_state_update), the decode step:
  nheads 128, dim 64, dstate 128, ngroups 8, dt / A / D / dt_bias per head (stride-0 over dim,
  as Nemotron's mixer passes them: the kernel's tie_hdim path), dt_softplus, bf16 x / B / C / z,
  state bf16 or f32, batch {1, 64, 256}. The state rotates over windows of >= 256 MB in total,
  and the graph-replay time captures one call per window in one graph (per call = replay /
  windows), as duet's bench rotates its state buffers.
- mamba_chunk_scan_combined (mamba_ssm.ops.triton.ssd_combined), the prefill chain: batch 1,
  seqlen {4096, 50000}, the same heads, chunk 128, D, dt_bias, dt_softplus, no z, bf16 x / B / C.

Timing: CUDA events, 5 warm-ups, median / p10 / p90 of 30 (tools/torch_side_by_side.py's).

    python3 tools/triton_side_by_side.py --out $OUT/triton_side_by_side.json
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".baselines"))
sys.path.insert(0, HERE)

NH, DIM, DS, NG = 128, 64, 128, 8
# --cpu-smoke: Triton's interpreter on the CPU at small shapes (checks the calls, times nothing
# meaningful); set before triton is imported.
SMOKE = "--cpu-smoke" in sys.argv
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"
    NH, DIM, DS, NG = 8, 16, 32, 2
DEV = "cpu" if SMOKE else "cuda"

import torch  # noqa: E402

from torch_side_by_side import timeit  # noqa: E402

if SMOKE:
    # mamba_ssm's wrappers enter torch.cuda.device(x.device.index); CPU tensors have none.
    import contextlib
    torch.cuda.device = lambda _idx: contextlib.nullcontext()



def graph_per_call(calls):
    """One CUDA graph of `calls` (one per state window), replayed; the time per call."""
    if SMOKE:
        return None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls[:3]:
            c()
    torch.cuda.current_stream().wait_stream(s)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        for c in calls:
            c()
    t = timeit(gr.replay, "cuda")
    return {k: (v / len(calls) if k.endswith("_us") else v) for k, v in t.items()}


def ssu(batch, state_dtype, g):
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update as f
    dev = DEV
    per_slot = NH * DIM * DS * (2 if state_dtype == torch.bfloat16 else 4)
    windows = 2 if SMOKE else max(2, -(-(256 << 20) // (per_slot * batch)))
    state = (0.5 * torch.randn(windows * batch, NH, DIM, DS, generator=g)).to(state_dtype).to(dev)
    bf = torch.bfloat16
    x = torch.randn(batch, NH, DIM, generator=g).to(bf).to(dev)
    dt = torch.rand(batch, NH, generator=g).to(bf).to(dev)[..., None].expand(batch, NH, DIM)
    A = (-4 * torch.rand(NH, generator=g) - 0.5).to(dev)[:, None, None].expand(NH, DIM, DS)
    B = torch.randn(batch, NG, DS, generator=g).to(bf).to(dev)
    C = torch.randn(batch, NG, DS, generator=g).to(bf).to(dev)
    D = torch.randn(NH, generator=g).to(dev)[:, None].expand(NH, DIM)
    z = torch.randn(batch, NH, DIM, generator=g).to(bf).to(dev)
    dt_bias = (torch.rand(NH, generator=g) - 1).to(dev)[:, None].expand(NH, DIM)

    def call(w):
        s = state[w * batch:(w + 1) * batch]
        return lambda: f(s, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=True)
    calls = [call(w) for w in range(windows)]
    out = calls[0]()
    assert out.shape == (batch, NH, DIM) and torch.isfinite(out.float()).all()
    step = [0]

    def rotate():
        calls[step[0] % windows]()
        step[0] += 1
    bytes_ = 2 * batch * per_slot
    single = timeit(rotate, DEV, reps=3 if SMOKE else 30)
    graph = graph_per_call(calls)
    med = (graph or single)["median_us"]
    return {"op": "selective_state_update", "impl": "mamba_ssm 2.3.2.post1 Triton",
            "shape": {"batch": batch, "nheads": NH, "dim": DIM, "dstate": DS, "ngroups": NG,
                      "state": str(state_dtype).replace("torch.", ""), "small_operands": "bf16",
                      "windows": windows},
            "bytes": bytes_, "time": single, "graph_per_call": graph,
            "effective_tb_per_s": bytes_ / (med * 1e-6) / 1e12}


def ssd(seqlen, g):
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined as f
    dev, bf = DEV, torch.bfloat16
    x = torch.randn(1, seqlen, NH, DIM, generator=g).to(bf).to(dev)
    dt = torch.rand(1, seqlen, NH, generator=g).to(bf).to(dev)
    A = (-4 * torch.rand(NH, generator=g) - 0.5).to(dev)
    B = torch.randn(1, seqlen, NG, DS, generator=g).to(bf).to(dev)
    C = torch.randn(1, seqlen, NG, DS, generator=g).to(bf).to(dev)
    D = torch.randn(NH, generator=g).to(dev)
    dt_bias = (torch.rand(NH, generator=g) - 1).to(dev)

    def run():
        return f(x, dt, A, B, C, 128, D=D, z=None, dt_bias=dt_bias, dt_softplus=True)
    out = run()
    assert out.shape == x.shape and torch.isfinite(out.float()).all()
    # Bytes that must move: x, dt, B, C in, y out (bf16).
    bytes_ = 2 * (2 * x.numel() + dt.numel() + B.numel() + C.numel())
    t = timeit(run, DEV, reps=3 if SMOKE else 30)
    return {"op": "ssd_chunk_scan", "impl": "mamba_ssm 2.3.2.post1 Triton mamba_chunk_scan_combined",
            "shape": {"batch": 1, "seqlen": seqlen, "nheads": NH, "headdim": DIM, "dstate": DS,
                      "ngroups": NG, "chunk": 128, "z": False, "dtype": "bf16"},
            "bytes": bytes_, "time": t}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write the results as JSON here (also printed)")
    ap.add_argument("--only", choices=["ssu", "ssd"], help="one op only")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="Triton's interpreter on the CPU at small shapes: checks the calls only")
    a = ap.parse_args()
    if not SMOKE and not torch.cuda.is_available():
        sys.exit("triton_side_by_side: no CUDA device (the Triton kernels need one)")
    g = torch.Generator().manual_seed(5)
    cases = []
    if a.only in (None, "ssu"):
        for batch, sd in ([(2, torch.bfloat16), (2, torch.float32)] if SMOKE else
                          [(1, torch.bfloat16), (64, torch.bfloat16), (256, torch.bfloat16),
                           (256, torch.float32)]):
            cases.append(lambda b=batch, sd=sd: ssu(b, sd, g))
    if a.only in (None, "ssd"):
        # (not in the smoke: its autotuner needs a GPU to benchmark with)
        for L in ([] if SMOKE else [4096, 50000]):
            cases.append(lambda L=L: ssd(L, g))
    import triton
    rows = []
    for c in cases:
        try:
            r = c()
        except Exception as e:  # one failing case must not hide the others
            if SMOKE:
                raise
            r = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(r), flush=True)
        rows.append(r)
        torch.cuda.empty_cache()
    doc = {"device": "cpu (Triton interpreter)" if SMOKE else torch.cuda.get_device_name(),
           "torch": torch.__version__,
           "triton": triton.__version__, "rows": rows}
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as o:
            json.dump(doc, o, indent=1)
        os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
