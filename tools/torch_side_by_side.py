#!/usr/bin/env python3
"""The PyTorch chains of duet's GPU ops, timed at the Nemotron 3 Super shapes, for a side-by-side
with `duet bench --backend gpu --shape ...` in the same device session (issue 4 / 5: "the
PyTorch chain side by side").

What runs, written as the PyTorch code paths do:
- noaux_tc_router: the NemotronHTopkRouter math on given fp32 logits. That is sigmoid,
  + e_score_correction_bias, topk(22), gather, normalise with +1e-20 and scale by 5.0. E = 512,
  T in {1, 64, 4096, 32768}.
- nvfp4_quantize: an eager torch chain over blocks of 16 of a bf16 [8192, 8192] matrix
  (amax, E4M3 scale through torch.float8_e4m3fn, E2M1 by bucketize, nibble packing). This is
  the chain a PyTorch user would write; there is no fused torch op.
- selective_state_update: transformers 5.17's torch fallback
  mamba2_selective_state_update. It runs at nheads 128, dim 64, dstate 128, ngroups 8, with
  bf16 or f32 state, batch {1, 64, 256}, over rotating state buffers of >= 256 MB.
- copy: a 1 GiB device-to-device clone, the ceiling the other rows are compared with.

Timing: CUDA events around each call, 5 warm-ups, median / p10 / p90 of 30, on the GPU. On the
CPU (`--device cpu --small`) the same code runs at small shapes as a smoke test.

    python3 tools/torch_side_by_side.py --device cuda --out $OUT/torch_side_by_side.json
"""
import argparse, json, statistics, sys, time

import torch


def timeit(fn, device, reps=30, warm=5):
    for _ in range(warm):
        fn()
    ts = []
    if device == "cuda":
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(); b.record(); b.synchronize()
            ts.append(a.elapsed_time(b) * 1e3)
    else:
        for _ in range(reps):
            t0 = time.perf_counter(); fn(); ts.append((time.perf_counter() - t0) * 1e6)
    ts.sort()
    return {"median_us": statistics.median(ts), "p10_us": ts[len(ts) // 10], "p90_us": ts[(9 * len(ts)) // 10]}


def router(T, E, k, device, g):
    logits = torch.randn(T, E, generator=g, device="cpu").mul_(2.0).to(device)
    bias = (0.1 * torch.randn(E, generator=g)).to(device)

    def run():
        s = logits.sigmoid()
        idx = torch.topk(s + bias, k, dim=-1, sorted=False)[1]
        w = s.gather(1, idx)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * 5.0
        return idx, w
    idx, w = run()
    assert idx.shape == (T, k) and torch.isfinite(w).all()
    return run, {"op": "noaux_tc_router", "shape": {"T": T, "E": E, "top_k": k}}


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def nvfp4(rows, cols, device, g):
    x = torch.randn(rows, cols, generator=g).to(torch.bfloat16).to(device)
    gs = (448.0 * 6.0) / x.float().abs().amax().clamp_min(1e-12)
    mids = torch.tensor([(a + b) / 2 for a, b in zip(E2M1[:-1], E2M1[1:])], device=device)

    def run():
        b = x.float().view(rows, cols // 16, 16)
        amax = b.abs().amax(-1, keepdim=True)
        sf = (amax / 6.0 * gs).clamp(max=448.0).to(torch.float8_e4m3fn)
        scale = sf.float() / gs
        q = torch.where(scale > 0, b / scale, torch.zeros_like(b))
        code = torch.bucketize(q.abs().clamp(max=6.0), mids) | ((q < 0).to(torch.int64) << 3)
        code = code.to(torch.uint8).view(rows, cols // 2, 2)
        packed = code[..., 0] | (code[..., 1] << 4)
        return packed, sf
    p, sf = run()
    assert p.shape == (rows, cols // 2)
    bytes_ = rows * cols * 2 + rows * cols // 2 + rows * cols // 16
    return run, {"op": "nvfp4_quantize", "shape": {"rows": rows, "cols": cols, "dtype": "bf16"}, "bytes": bytes_}


def graph_timeit(fn, device):
    """CUDA-graph replay of fn (the small launches' launch overhead removed), as duet's own
    bench times small launches."""
    if device != "cuda":
        return None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        fn()
    return timeit(gr.replay, device)


def moe(T, device, g, small):
    """The expert layer as PyTorch's bf16 grouped GEMM runs it (issue 10's baseline):
    tokens permuted by expert, GEMM1 [T*k, latent] x W1[e]^T -> [T*k, width], relu^2, GEMM2 back
    to latent, with torch._grouped_mm and per-expert offsets."""
    E, k, latent, width = (16, 4, 64, 128) if small else (512, 22, 1024, 2688)
    x = torch.randn(T, latent, generator=g).to(torch.bfloat16).to(device)
    idx = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(device)
    # Generated on the device (1.4 G values each at the Super shape): the timing does not
    # depend on the values.
    w1 = 0.02 * torch.randn(E, width, latent, device=device, dtype=torch.bfloat16)
    w2 = 0.02 * torch.randn(E, latent, width, device=device, dtype=torch.bfloat16)
    flat = idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=E)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    xs = x[order // k].contiguous()

    def run():
        h = torch._grouped_mm(xs, w1.transpose(-2, -1), offs=offs)
        h = torch.relu(h).square()
        return torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)
    y = run()
    assert y.shape == (T * k, latent)
    used = int((counts > 0).sum())
    bytes_ = used * 2 * latent * width * 2
    return run, {"op": "moe_expert_layer", "impl": "torch._grouped_mm bf16",
                 "shape": {"T": T, "E": E, "top_k": k, "latent": latent, "width": width,
                           "experts_used": used}, "bytes": bytes_}


def ssu(batch, state_dtype, device, g, small):
    from transformers.models.nemotron_h.modeling_nemotron_h import mamba2_selective_state_update as f
    nh, dim, ds, ng = (8, 16, 32, 2) if small else (128, 64, 128, 8)
    per_slot = nh * dim * ds * (2 if state_dtype == torch.bfloat16 else 4)
    windows = max(2, -(-(256 << 20) // (per_slot * batch))) if not small else 2
    state = (0.5 * torch.randn(windows * batch, nh, dim, ds, generator=g)).to(state_dtype).to(device)
    x = torch.randn(batch, nh, dim, generator=g).to(torch.bfloat16).to(device)
    dt = torch.rand(batch, nh, generator=g).to(torch.bfloat16).to(device)[..., None].expand(batch, nh, dim)
    A = (-4 * torch.rand(nh, generator=g) - 0.5).to(device)[:, None, None].expand(nh, dim, ds)
    B = torch.randn(batch, ng, ds, generator=g).to(torch.bfloat16).to(device)
    C = torch.randn(batch, ng, ds, generator=g).to(torch.bfloat16).to(device)
    D = torch.randn(nh, generator=g).to(device)[:, None].expand(nh, dim)
    z = torch.randn(batch, nh, dim, generator=g).to(torch.bfloat16).to(device)
    dt_bias = (torch.rand(nh, generator=g) - 1).to(device)[:, None].expand(nh, dim)
    step = [0]

    def run():
        w = step[0] % windows
        step[0] += 1
        s = state[w * batch:(w + 1) * batch]
        out = f(s, x, dt, A, B, C, D=D, dt_bias=dt_bias, dt_softplus=True, z=z)
        state[w * batch:(w + 1) * batch] = s
        return out
    out = run()
    assert torch.isfinite(out.float()).all()
    bytes_ = 2 * batch * per_slot
    return run, {"op": "selective_state_update", "impl": "transformers mamba2_selective_state_update (torch)",
                 "shape": {"batch": batch, "nheads": nh, "dim": dim, "dstate": ds, "ngroups": ng,
                           "state": str(state_dtype).replace("torch.", "")}, "bytes": bytes_}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="small shapes (CPU smoke test)")
    ap.add_argument("--out", default="torch_side_by_side.json")
    ap.add_argument("--only", default=None, help="only this op's cases: router, nvfp4, ssu or moe")
    a = ap.parse_args()
    dev, small = a.device, a.small
    g = torch.Generator().manual_seed(0)
    rows = []
    nbytes = (16 << 20) if small else (1 << 30)
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    t = timeit(lambda: dst.copy_(src), dev, reps=10 if small else 30)
    copy_gbs = 2 * nbytes / (t["median_us"] * 1e-6) / 1e9
    rows.append({"op": "copy", "bytes": 2 * nbytes, "time": t, "gb_per_s": copy_gbs})
    del src, dst
    cases = []
    want = lambda op: a.only is None or a.only == op
    if want("router"):
        for T in ([1, 64] if small else [1, 64, 4096, 32768]):
            cases.append(lambda T=T: router(T, 512, 22, dev, g))
    if want("nvfp4"):
        cases.append(lambda: nvfp4(256, 256, dev, g) if small else nvfp4(8192, 8192, dev, g))
    if want("ssu"):
        for batch in ([1, 4] if small else [1, 64, 256]):
            for sd in (torch.bfloat16, torch.float32):
                cases.append(lambda b=batch, sd=sd: ssu(b, sd, dev, g, small))
    if want("moe"):
        for T in ([1, 8] if small else [1, 8, 64, 4096]):
            cases.append(lambda T=T: moe(T, dev, g, small))
    for make in cases:
        try:
            fn, meta = make()
        except ImportError as e:  # an older transformers without the NemotronH torch fallback
            rows.append({"skipped": str(e)})
            print("skipped:", e, file=sys.stderr)
            continue
        except (RuntimeError, AttributeError, NotImplementedError) as e:  # e.g. no _grouped_mm here
            rows.append({"skipped": repr(e)[:300]})
            print("skipped:", repr(e)[:300], file=sys.stderr)
            continue
        t = timeit(fn, dev, reps=10 if small else 30)
        meta["time"] = t
        if meta["op"] in ("noaux_tc_router", "moe_expert_layer"):
            try:
                gt = graph_timeit(fn, dev)
            except RuntimeError as e:
                gt = {"error": repr(e)[:200]}
            if gt is not None:
                meta["graph_replay"] = gt
                if "median_us" in gt and gt["median_us"] < t["median_us"]:
                    t = gt
        if "bytes" in meta:
            meta["gb_per_s"] = meta["bytes"] / (t["median_us"] * 1e-6) / 1e9
            meta["pct_of_copy"] = 100 * meta["gb_per_s"] / copy_gbs
        rows.append(meta)
        print(json.dumps(meta), flush=True)
        if dev == "cuda":
            torch.cuda.empty_cache()
    doc = {"schema": "duet.torch_side_by_side/1", "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
           "torch": torch.__version__, "results": rows}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    import os
    os.replace(tmp, a.out)
    print("->", a.out, file=sys.stderr)


if __name__ == "__main__":
    main()
