"""Goldens for the Mamba-2 ops from transformers' own PyTorch implementations (transformers
5.17.0, torch 2.15.0 CPU), the torch-only fallbacks NemotronH uses when mamba_ssm /
causal_conv1d are not installed (transformers/models/nemotron_h/modeling_nemotron_h.py):

  selective_state_update  <- mamba2_selective_state_update (state updated in place; out)
  causal_conv1d_fn        <- causal_conv1d_fn (F.conv1d with left padding, SiLU)
  causal_conv1d_update    <- causal_conv1d_update (cat(conv_state, x), F.conv1d, state shift)
  ssd_chunk_scan          <- mamba2_chunk_scan (the "minimal SSD" chunked algorithm, D skip,
                             initial and final states, dt softplus + dt_limit)
  rmsnorm                 <- NemotronHRMSNorm (fp32)
  gated_rmsnorm           <- Zamba2RMSNormGated as NemotronH's mixer builds it (group_size =
                             intermediate / n_groups, gate = z, silu(z) before the norm)

Everything runs in float32 on the CPU. Tolerances are principled for f32 with another
evaluation order:
- torch's exp / softplus vs duet's (exp in f64 rounded once) differ by <= 1 ulp per element;
- the SSU output sums dstate products through bmm;
- the SSD golden uses a different chunked algorithm (segment sums, exp of differences), so its
  rounding errors grow with the chunk length.
The `tol.*` bounds are below. With them, duet's CPU reference used 0.2% to 21.9% of the
tolerance when the files were written (`duet check --op transformers`, column worst%tol):
- SSU: out 8.3%, state 5.9%;
- conv: 5.6% / 3.1%;
- SSD: 2.2% at most;
- norms: 14.9% / 21.9%, at close:1e-6:1e-6, which is about 8 ulp.
That leaves room for the GPU kernels' other summation orders, since
`duet check --backend gpu` runs the same files.

    python3 -m venv /tmp/tvenv && /tmp/tvenv/bin/pip install torch "transformers==5.17.*" numpy ml_dtypes
    /tmp/tvenv/bin/python tools/gen_goldens_mamba_transformers.py
"""

import numpy as np
import torch

from transformers.models.nemotron_h import modeling_nemotron_h as nh

from goldens_common import params, save

SRC = "transformers 5.17 models/nemotron_h/modeling_nemotron_h.py {} (torch fallback, CPU fp32)"


def rn(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).float()


def un(g, lo, hi, *shape):
    return (lo + (hi - lo) * torch.rand(*shape, generator=g)).float()


def np32(t):
    return t.detach().cpu().numpy().astype(np.float32)


def rel_err(want, got):
    want, got = np.asarray(want, np.float64), np.asarray(got, np.float64)
    return float(np.max(np.abs(want - got)) / max(np.max(np.abs(want)), 1e-30))


def ssu(seed, batch, nheads, dim, dstate, ngroups, slots):
    g = torch.Generator().manual_seed(seed)
    state = rn(g, slots, nheads, dim, dstate, scale=0.5)
    x = rn(g, batch, nheads, dim)
    dt = un(g, -3.0, 1.0, batch, nheads, dim)
    a_head = -un(g, 0.5, 4.0, nheads)
    A = a_head[:, None, None].expand(nheads, dim, dstate).contiguous()
    B = rn(g, batch, ngroups, dstate)
    C = rn(g, batch, ngroups, dstate)
    D = rn(g, nheads, dim)
    z = rn(g, batch, nheads, dim)
    dt_bias = un(g, -1.0, 0.5, nheads, dim)
    perm = torch.randperm(slots, generator=g)[:batch]
    s = state[perm].clone()
    out = nh.mamba2_selective_state_update(s, x, dt, A, B, C, D=D, dt_bias=dt_bias, dt_softplus=True, z=z)
    new_state = state.clone()
    new_state[perm] = s
    tensors = {
        "state": np32(state), "x": np32(x), "dt": np32(dt), "A": np32(A), "B": np32(B), "C": np32(C),
        "D": np32(D), "z": np32(z), "dt_bias": np32(dt_bias),
        "state_batch_indices": perm.numpy().astype(np.int64),
        "expected.out": np32(out), "expected.state": np32(new_state),
    }
    return tensors


def conv_fn(seed, batch, dim, seqlen, width):
    g = torch.Generator().manual_seed(seed)
    x = rn(g, batch, dim, seqlen)
    w = rn(g, dim, width, scale=0.5)
    b = rn(g, dim, scale=0.1)
    out = nh.causal_conv1d_fn(x, w, b, activation="silu")
    return {"x": np32(x), "weight": np32(w), "bias": np32(b), "expected.out": np32(out)}


def conv_update(seed, batch, dim, seqlen, width, state_len):
    g = torch.Generator().manual_seed(seed)
    x = rn(g, batch, dim, seqlen)
    cs = rn(g, batch, dim, state_len)
    w = rn(g, dim, width, scale=0.5)
    b = rn(g, dim, scale=0.1)
    s = cs.clone()
    out = nh.causal_conv1d_update(x, s, w, b, activation="silu")
    return {"x": np32(x), "conv_state": np32(cs), "weight": np32(w), "bias": np32(b),
            "expected.out": np32(out), "expected.conv_state": np32(s)}


def ssd(seed, batch, seqlen, nheads, headdim, ngroups, dstate, chunk, dt_max):
    g = torch.Generator().manual_seed(seed)
    x = rn(g, batch, seqlen, nheads, headdim)
    dt = un(g, -4.0, 0.5, batch, seqlen, nheads)
    A = -un(g, 0.5, 4.0, nheads)
    B = rn(g, batch, seqlen, ngroups, dstate, scale=0.5)
    C = rn(g, batch, seqlen, ngroups, dstate, scale=0.5)
    D = rn(g, nheads)
    dt_bias = un(g, -1.0, 0.5, nheads)
    init = rn(g, batch, nheads, headdim, dstate, scale=0.3)
    y, fin = nh.mamba2_chunk_scan(x, dt, A, B, C, chunk, D=D, dt_bias=dt_bias, initial_states=init,
                                  dt_softplus=True, dt_limit=(0.0, dt_max), return_final_states=True)
    return {"x": np32(x), "dt": np32(dt), "A": np32(A), "B": np32(B), "C": np32(C), "D": np32(D),
            "dt_bias": np32(dt_bias), "initial_states": np32(init),
            "expected.y": np32(y), "expected.final_states": np32(fin)}


def norms(seed, rows, d, groups):
    g = torch.Generator().manual_seed(seed)
    x = rn(g, rows, d)
    z = rn(g, rows, d)
    w = 1 + 0.2 * rn(g, d)
    n = nh.NemotronHRMSNorm(d, eps=1e-5)
    gn = nh.Zamba2RMSNormGated(d, group_size=d // groups, eps=1e-5)
    with torch.no_grad():
        n.weight.copy_(w)
        gn.weight.copy_(w)
        out = n(x)
        gout = gn(x, gate=z)
    return ({"x": np32(x), "weight": np32(w), "expected.out": np32(out)},
            {"x": np32(x), "z": np32(z), "weight": np32(w), "expected.out": np32(gout)})


def main():
    plain, gated = norms(16, rows=7, d=96, groups=4)
    save("rmsnorm-transformers-nemotronh", plain,
         {"op": "rmsnorm", "params": params(eps=1e-5), "tol.out": "close:1e-6:1e-6",
          "source": SRC.format("NemotronHRMSNorm")})
    save("gated_rmsnorm-transformers-zamba2-groups4", gated,
         {"op": "gated_rmsnorm", "params": params(group_size=24, norm_before_gate="false", eps=1e-5),
          "tol.out": "close:1e-6:1e-6", "source": SRC.format("Zamba2RMSNormGated (NemotronH mixer norm)")})
    save("selective_state_update-transformers-super-heads",
         ssu(11, batch=3, nheads=8, dim=16, dstate=32, ngroups=2, slots=5),
         {"op": "selective_state_update", "params": params(dt_softplus="true"),
          "tol.out": "close:1e-5:1e-5", "tol.state": "close:1e-6:1e-5",
          "source": SRC.format("mamba2_selective_state_update")})
    save("causal_conv1d_fn-transformers-silu",
         conv_fn(12, batch=2, dim=24, seqlen=37, width=4),
         {"op": "causal_conv1d_fn", "params": params(activation="silu"),
          "tol.out": "close:1e-6:1e-5", "source": SRC.format("causal_conv1d_fn")})
    save("causal_conv1d_update-transformers-silu-3tok",
         conv_update(13, batch=3, dim=24, seqlen=3, width=4, state_len=3),
         {"op": "causal_conv1d_update", "params": params(activation="silu"),
          "tol.out": "close:1e-6:1e-5", "tol.conv_state": "exact",
          "source": SRC.format("causal_conv1d_update")})
    save("ssd_chunk_scan-transformers-chunk16",
         ssd(14, batch=2, seqlen=45, nheads=4, headdim=8, ngroups=2, dstate=16, chunk=16, dt_max=float("inf")),
         {"op": "ssd_chunk_scan", "params": params(chunk_size=16, dt_softplus="true"),
          "tol.y": "close:1e-5:1e-4", "tol.final_states": "close:1e-5:1e-4",
          "source": SRC.format("mamba2_chunk_scan")})
    save("ssd_chunk_scan-transformers-chunk8-dtmax",
         ssd(15, batch=1, seqlen=29, nheads=6, headdim=4, ngroups=3, dstate=8, chunk=8, dt_max=0.5),
         {"op": "ssd_chunk_scan", "params": params(chunk_size=8, dt_softplus="true", dt_max=0.5),
          "tol.y": "close:1e-5:1e-4", "tol.final_states": "close:1e-5:1e-4",
          "source": SRC.format("mamba2_chunk_scan")})


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
