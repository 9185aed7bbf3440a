//! SSD chunked scan (Mamba-2 prefill), SPEC.md "SSD chunked scan".
//!
//! The same computation as mamba_ssm's `mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size,
//! D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit)`, done the chunked way:
//! chunk cumsum of dt'*A, C·B^T per chunk and group, the intra-chunk (diagonal) block as a
//! masked matrix product, chunk states as B^T·(decay∘dt∘x), state passing between chunks, and
//! the inter-chunk contribution C·state. All math in f32; `y` has x's dtype, `final_states` is
//! f32 (as upstream returns it).
//!
//! Mapping to mamba's `ssd_minimal_discrete(X, A, B, C, block_len)`: that function takes the
//! already-discretised `X = x * dt'` (batch, L, nheads, headdim) and `A = A * dt'`
//! (batch, L, nheads), and B, C with one group per head. Our op takes raw `x`, `dt`, `A`
//! (nheads,) like `mamba_chunk_scan_combined`, so `ssd_minimal_discrete(x*dt, A*dt, B, C, Q)`
//! equals `ssd_chunk_scan(x, dt, A, B, C)` with `ngroups = nheads`, positive `dt`,
//! `dt_softplus = false`, no D/z/dt_bias/initial states (its `Y` is our `y`, its final state
//! our `final_states`).
//!
//! dt processing (mamba's `_chunk_cumsum_fwd`): dt' = dt + dt_bias; with softplus
//! dt' = dt' <= 20 ? log1p(exp(dt')) : dt'; then ALWAYS dt' = clamp(dt', dt_min, dt_max), so
//! with the default limits (0, inf) a negative dt becomes 0.
//!
//! seq_idx (batch, L), non-decreasing per row: the state resets to zero where the id changes,
//! inside a chunk too. As in mamba's kernels, the state before token 0 (the initial state) has
//! sequence id 0: it is used only while seq_idx == 0.

use crate::op::{outputs, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params, RunFn};
use crate::tensor::{DType, Tensor, TensorMap};
use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2, ShapeBuilder};
use rayon::prelude::*;

/// Sizes of one scan problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsdDims {
    pub batch: usize,
    pub seqlen: usize,
    pub nheads: usize,
    pub headdim: usize,
    pub ngroups: usize,
    pub dstate: usize,
}

/// What is applied to `dt + dt_bias` before clamping (upstream `dt_softplus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DtTransform {
    Identity,
    /// log1p(exp(v)) for v <= 20, v above (mamba's threshold).
    Softplus,
}

/// dt processing: transform then clamp to `[dt_min, dt_max]` (upstream `dt_limit`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DtConfig {
    pub transform: DtTransform,
    pub dt_min: f32,
    pub dt_max: f32,
}

impl Default for DtConfig {
    fn default() -> Self {
        DtConfig {
            transform: DtTransform::Identity,
            dt_min: 0.0,
            dt_max: f32::INFINITY,
        }
    }
}

impl DtConfig {
    /// dt' for one raw dt value and its bias.
    #[inline]
    pub fn apply(&self, dt: f32, bias: f32) -> f32 {
        let mut v = dt + bias;
        if self.transform == DtTransform::Softplus && v <= 20.0 {
            v = v.exp().ln_1p();
        }
        v.max(self.dt_min).min(self.dt_max)
    }
}

/// Borrowed inputs of the scan (shared with `selective_scan`, the sequential oracle).
#[derive(Clone, Copy, Debug)]
pub struct SsdArgs<'a> {
    pub dims: SsdDims,
    /// x: (batch, seqlen, nheads, headdim)
    pub x: &'a [f32],
    /// dt: (batch, seqlen, nheads), raw (before dt_bias / softplus / clamp)
    pub dt: &'a [f32],
    /// A: (nheads,), usually negative
    pub a: &'a [f32],
    /// B: (batch, seqlen, ngroups, dstate); head h uses group h / (nheads / ngroups)
    pub b: &'a [f32],
    /// C: (batch, seqlen, ngroups, dstate)
    pub c: &'a [f32],
    /// D: (nheads, headdim) (a per-head D is broadcast by the caller), skip connection
    pub d: Option<&'a [f32]>,
    /// z: (batch, seqlen, nheads, headdim); y *= z * sigmoid(z) after the D term
    pub z: Option<&'a [f32]>,
    /// dt_bias: (nheads,)
    pub dt_bias: Option<&'a [f32]>,
    /// initial_states: (batch, nheads, headdim, dstate)
    pub initial_states: Option<&'a [f32]>,
    /// seq_idx: (batch, seqlen), non-decreasing per row
    pub seq_idx: Option<&'a [i64]>,
    pub dt_cfg: DtConfig,
}

/// Outputs of the scan.
#[derive(Clone, Debug, PartialEq)]
pub struct SsdOutput {
    /// y: (batch, seqlen, nheads, headdim)
    pub y: Vec<f32>,
    /// final_states: (batch, nheads, headdim, dstate)
    pub final_states: Vec<f32>,
}

impl SsdArgs<'_> {
    /// Checks every slice length against `dims` (a programming error in a Rust caller).
    pub fn check(&self) -> Result<(), String> {
        let SsdDims {
            batch: bt,
            seqlen: l,
            nheads: h,
            headdim: p,
            ngroups: g,
            dstate: n,
        } = self.dims;
        if g == 0 || h % g != 0 {
            return Err(format!(
                "nheads {h} is not a multiple of ngroups {g}; use ngroups dividing nheads"
            ));
        }
        let want = |name: &str, got: usize, w: usize| {
            if got == w {
                Ok(())
            } else {
                Err(format!("{name} has {got} elements, expected {w}"))
            }
        };
        want("x", self.x.len(), bt * l * h * p)?;
        want("dt", self.dt.len(), bt * l * h)?;
        want("A", self.a.len(), h)?;
        want("B", self.b.len(), bt * l * g * n)?;
        want("C", self.c.len(), bt * l * g * n)?;
        if let Some(d) = self.d {
            want("D", d.len(), h * p)?;
        }
        if let Some(z) = self.z {
            want("z", z.len(), bt * l * h * p)?;
        }
        if let Some(v) = self.dt_bias {
            want("dt_bias", v.len(), h)?;
        }
        if let Some(v) = self.initial_states {
            want("initial_states", v.len(), bt * h * p * n)?;
        }
        if let Some(s) = self.seq_idx {
            want("seq_idx", s.len(), bt * l)?;
            for b in 0..bt {
                for t in 1..l {
                    if s[b * l + t] < s[b * l + t - 1] {
                        return Err(format!(
                            "seq_idx[{b}, {t}] = {} is smaller than seq_idx[{b}, {}] = {}; \
                             sequence ids must be non-decreasing along each row",
                            s[b * l + t],
                            t - 1,
                            s[b * l + t - 1]
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// dt' for every (batch, token, head), laid out as `dt`.
    pub fn processed_dt(&self) -> Vec<f32> {
        let h = self.dims.nheads;
        self.dt
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let bias = self.dt_bias.map_or(0.0, |b| b[i % h]);
                self.dt_cfg.apply(v, bias)
            })
            .collect()
    }
}

/// Runs `head(b, h, state0)` for every (batch, head) in parallel, `state0` the head's initial
/// state (p, n) (zeros without `initial_states`); `head` returns the head's y rows (seqlen, p)
/// and its final state. Gathers them into the op's layouts. The per-head scans (the sequential
/// oracle, the GPU kernels' numerics twin) share this; they call [`SsdArgs::check`] first
/// (their own setup, e.g. `processed_dt`, indexes the inputs by `dims`).
pub(crate) fn scan_per_head<F>(args: &SsdArgs<'_>, head: F) -> SsdOutput
where
    F: Fn(usize, usize, Vec<f32>) -> (Vec<f32>, Vec<f32>) + Sync,
{
    let SsdDims {
        batch: bt,
        seqlen: l,
        nheads: h,
        headdim: p,
        dstate: n,
        ..
    } = args.dims;
    let per_head: Vec<(Vec<f32>, Vec<f32>)> = (0..bt * h)
        .into_par_iter()
        .map(|bh| {
            let s0 = match args.initial_states {
                Some(v) => v[bh * p * n..(bh + 1) * p * n].to_vec(),
                None => vec![0.0; p * n],
            };
            head(bh / h, bh % h, s0)
        })
        .collect();
    let mut y = vec![0f32; bt * l * h * p];
    let mut final_states = Vec::with_capacity(bt * h * p * n);
    for (bh, (yh, s)) in per_head.into_iter().enumerate() {
        let (b, hh) = (bh / h, bh % h);
        for t in 0..l {
            let dst = ((b * l + t) * h + hh) * p;
            y[dst..dst + p].copy_from_slice(&yh[t * p..(t + 1) * p]);
        }
        final_states.extend_from_slice(&s);
    }
    SsdOutput { y, final_states }
}

/// `x * sigmoid(x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// exp(x) with relative error below 2.5 * f32::EPSILON (about 2 ulp) for x in [-87.3, 88.7] (0 below, inf
/// above, NaN kept), written branch-free so the hot loops vectorize (libm's expf is a call per
/// element): k = round(x log2 e) by the 1.5*2^23 trick, r = x - k ln2 in two parts (Cody-Waite),
/// degree-6 Taylor polynomial of exp(r) on |r| <= ln2/2, times 2^k built from its bits.
#[inline(always)]
pub fn exp_vec(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let xc = x.clamp(-87.3, 88.7);
    let t = xc * std::f32::consts::LOG2_E + MAGIC;
    let k = t - MAGIC;
    let ki = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    let r = (xc - k * LN2_HI) - k * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let v = p * f32::from_bits(((ki + 127) as u32) << 23);
    if x < -87.3 {
        0.0
    } else if x > 88.7 {
        f32::INFINITY
    } else if x.is_nan() {
        x
    } else {
        v
    }
}

/// `x * sigmoid(x)` with [`exp_vec`] (the chunked scan's gate).
#[inline(always)]
fn silu_vec(x: f32) -> f32 {
    x / (1.0 + exp_vec(-x))
}

/// c (m x n, contiguous) = a · b + beta * c, with a (m x k) and b (k x n) given by strides.
#[allow(clippy::too_many_arguments)]
fn gemm(
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    a_strides: (usize, usize),
    b: &[f32],
    b_strides: (usize, usize),
    beta: f32,
    c: &mut [f32],
) {
    // Degenerate shapes (a zero headdim or dstate, fuzzing found the first): nothing to
    // multiply. ndarray refuses views of some empty shapes with these strides.
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // a · b = 0: c = beta * c (overwritten when beta is 0, as general_mat_mul does).
        for v in c.iter_mut().take(m * n) {
            *v = if beta == 0.0 { 0.0 } else { beta * *v };
        }
        return;
    }
    let views = (
        ArrayView2::from_shape((m, k).strides(a_strides), a),
        ArrayView2::from_shape((k, n).strides(b_strides), b),
    );
    let (Ok(av), Ok(bv)) = views else {
        // Internal invariant (operands are sliced by the caller to fit): never reached; if it
        // were, the output is poisoned with NaN, which every comparison reports.
        debug_assert!(false, "gemm operands do not fit their slices");
        c.iter_mut().take(m * n).for_each(|v| *v = f32::NAN);
        return;
    };
    let Ok(mut cv) = ArrayViewMut2::from_shape((m, n), &mut c[..m * n]) else {
        debug_assert!(false, "gemm output does not fit its slice");
        return;
    };
    general_mat_mul(1.0, &av, &bv, beta, &mut cv);
}

/// Per-(batch, group) work of one chunk: the chunk's B and C rows and C·B^T.
struct GroupWork {
    bc: Vec<f32>, // (q, n)
    cc: Vec<f32>, // (q, n)
    cb: Vec<f32>, // (q, q): cb[i, j] = C_i . B_j
}

/// Per-(batch, head) state carried across chunks, and the chunk's output rows.
struct HeadWork {
    state: Vec<f32>, // (p, n)
    state_seq: i64,
    y: Vec<f32>, // (q, p)
}

/// Scratch reused across heads by one rayon job.
struct Scratch {
    cs: Vec<f32>,  // (q,) chunk-local cumsum of dt'*A
    dtv: Vec<f32>, // (q,)
    sq: Vec<i64>,  // (q,)
    m: Vec<f32>,   // (q, q) masked CB ∘ decay ∘ dt
    xc: Vec<f32>,  // (q, p)
    xw: Vec<f32>,  // (q, p)
}

/// The chunked scan. `chunk_size` >= 1; the last chunk may be shorter.
pub fn ssd_chunk_scan(args: &SsdArgs<'_>, chunk_size: usize) -> Result<SsdOutput, String> {
    args.check()?;
    if chunk_size == 0 {
        return Err("chunk_size must be >= 1".into());
    }
    let SsdDims {
        batch: bt,
        seqlen: l,
        nheads: h,
        headdim: p,
        ngroups: g,
        dstate: n,
    } = args.dims;
    let q = chunk_size.min(l.max(1));
    let hpg = h / g;
    let dtp = args.processed_dt();
    let mut y = vec![0f32; bt * l * h * p];
    let mut groups: Vec<GroupWork> = (0..bt * g)
        .map(|_| GroupWork {
            bc: vec![0.0; q * n],
            cc: vec![0.0; q * n],
            cb: vec![0.0; q * q],
        })
        .collect();
    let mut heads: Vec<HeadWork> = (0..bt * h)
        .map(|i| HeadWork {
            state: match args.initial_states {
                Some(s) => s[i * p * n..(i + 1) * p * n].to_vec(),
                None => vec![0.0; p * n],
            },
            state_seq: 0,
            y: vec![0.0; q * p],
        })
        .collect();
    let mut t0 = 0;
    while t0 < l {
        let qc = q.min(l - t0);
        // C·B^T for every (batch, group) of this chunk.
        groups.par_iter_mut().enumerate().for_each(|(bg, gw)| {
            let (b, gg) = (bg / g, bg % g);
            for i in 0..qc {
                let src = ((b * l + t0 + i) * g + gg) * n;
                gw.bc[i * n..(i + 1) * n].copy_from_slice(&args.b[src..src + n]);
                gw.cc[i * n..(i + 1) * n].copy_from_slice(&args.c[src..src + n]);
            }
            gemm((qc, n, qc), &gw.cc, (n, 1), &gw.bc, (1, n), 0.0, &mut gw.cb);
        });
        let groups_ref = &groups;
        let dtp_ref = &dtp;
        heads.par_iter_mut().enumerate().for_each_init(
            || Scratch {
                cs: vec![0.0; q],
                dtv: vec![0.0; q],
                sq: vec![0; q],
                m: vec![0.0; q * q],
                xc: vec![0.0; q * p],
                xw: vec![0.0; q * p],
            },
            |s, (bh, hw)| {
                let (b, hh) = (bh / h, bh % h);
                let gw = &groups_ref[b * g + hh / hpg];
                chunk_head(args, dtp_ref, (b, hh, t0, qc), gw, hw, s);
            },
        );
        for (bh, hw) in heads.iter().enumerate() {
            let (b, hh) = (bh / h, bh % h);
            for i in 0..qc {
                let dst = ((b * l + t0 + i) * h + hh) * p;
                y[dst..dst + p].copy_from_slice(&hw.y[i * p..(i + 1) * p]);
            }
        }
        t0 += qc;
    }
    let mut final_states = Vec::with_capacity(bt * h * p * n);
    for hw in &heads {
        final_states.extend_from_slice(&hw.state);
    }
    Ok(SsdOutput { y, final_states })
}

/// One (batch, head) of one chunk: y rows into `hw.y`, state advanced to the chunk's end.
fn chunk_head(
    args: &SsdArgs<'_>,
    dtp: &[f32],
    (b, hh, t0, qc): (usize, usize, usize, usize),
    gw: &GroupWork,
    hw: &mut HeadWork,
    s: &mut Scratch,
) {
    let SsdDims {
        seqlen: l,
        nheads: h,
        headdim: p,
        dstate: n,
        ..
    } = args.dims;
    let a = args.a[hh];
    let mut acc = 0f32;
    for i in 0..qc {
        let dtv = dtp[(b * l + t0 + i) * h + hh];
        acc += dtv * a;
        s.cs[i] = acc;
        s.dtv[i] = dtv;
        s.sq[i] = args.seq_idx.map_or(0, |sq| sq[b * l + t0 + i]);
    }
    let prev_seq = hw.state_seq;
    let last_seq = s.sq[qc - 1];
    // M[i, j] = (C_i . B_j) exp(cs_i - cs_j) dt'_j for j <= i in the same sequence.
    for i in 0..qc {
        let row = &mut s.m[i * qc..(i + 1) * qc];
        let cb = &gw.cb[i * qc..(i + 1) * qc];
        let csi = s.cs[i];
        for (((m, &cbj), &csj), &dtj) in row[..=i]
            .iter_mut()
            .zip(&cb[..=i])
            .zip(&s.cs[..=i])
            .zip(&s.dtv[..=i])
        {
            *m = cbj * exp_vec(csi - csj) * dtj;
        }
        if args.seq_idx.is_some() {
            let sqi = s.sq[i];
            for (m, &sqj) in row[..=i].iter_mut().zip(&s.sq[..=i]) {
                if sqj != sqi {
                    *m = 0.0;
                }
            }
        }
        row[i + 1..].fill(0.0);
    }
    for i in 0..qc {
        let src = ((b * l + t0 + i) * h + hh) * p;
        s.xc[i * p..(i + 1) * p].copy_from_slice(&args.x[src..src + p]);
    }
    // Inter-chunk part: y_i = exp(cs_i) C_i . state (state: (p, n), used transposed).
    gemm(
        (qc, n, p),
        &gw.cc,
        (n, 1),
        &hw.state,
        (1, n),
        0.0,
        &mut hw.y,
    );
    for i in 0..qc {
        let sc = if s.sq[i] == prev_seq {
            s.cs[i].exp()
        } else {
            0.0
        };
        hw.y[i * p..(i + 1) * p].iter_mut().for_each(|v| *v *= sc);
    }
    // Intra-chunk part: y += M · x.
    gemm((qc, qc, p), &s.m, (qc, 1), &s.xc, (p, 1), 1.0, &mut hw.y);
    // D skip and z gate.
    for i in 0..qc {
        let yr = &mut hw.y[i * p..(i + 1) * p];
        let xr = &s.xc[i * p..(i + 1) * p];
        if let Some(d) = args.d {
            let dr = &d[hh * p..(hh + 1) * p];
            for k in 0..p {
                yr[k] += dr[k] * xr[k];
            }
        }
        if let Some(z) = args.z {
            let src = ((b * l + t0 + i) * h + hh) * p;
            let zr = &z[src..src + p];
            for (y, &zv) in yr.iter_mut().zip(zr) {
                *y *= silu_vec(zv);
            }
        }
    }
    // Chunk state: state = exp(cs_last) state + sum_i (exp(cs_last - cs_i) dt'_i x_i) ⊗ B_i.
    let cs_last = s.cs[qc - 1];
    for i in 0..qc {
        let w = if s.sq[i] == last_seq {
            (cs_last - s.cs[i]).exp() * s.dtv[i]
        } else {
            0.0
        };
        for k in 0..p {
            s.xw[i * p + k] = s.xc[i * p + k] * w;
        }
    }
    let decay = if last_seq == prev_seq {
        cs_last.exp()
    } else {
        0.0
    };
    gemm(
        (p, qc, n),
        &s.xw,
        (1, p),
        &gw.bc,
        (n, 1),
        decay,
        &mut hw.state,
    );
    hw.state_seq = last_seq;
}

const SSD_INPUTS: [ArgSpec; 10] = [
    ArgSpec::req(
        "x",
        "(batch, seqlen, nheads, headdim)",
        "f32|bf16|f16",
        "input",
    ),
    ArgSpec::req(
        "dt",
        "(batch, seqlen, nheads)",
        "f32|bf16|f16",
        "raw time step (before dt_bias, softplus and the dt_min/dt_max clamp)",
    ),
    ArgSpec::req(
        "A",
        "(nheads,)",
        "f32|bf16|f16",
        "state decay rate (negative)",
    ),
    ArgSpec::req(
        "B",
        "(batch, seqlen, ngroups, dstate)",
        "f32|bf16|f16",
        "input projection; head h uses group h / (nheads / ngroups)",
    ),
    ArgSpec::req(
        "C",
        "(batch, seqlen, ngroups, dstate)",
        "f32|bf16|f16",
        "output projection",
    ),
    ArgSpec::opt(
        "D",
        "(nheads,) or (nheads, headdim)",
        "f32|bf16|f16",
        "skip connection y += D * x",
    ),
    ArgSpec::opt(
        "z",
        "(batch, seqlen, nheads, headdim)",
        "f32|bf16|f16",
        "gate: y *= z * sigmoid(z) after the D term",
    ),
    ArgSpec::opt("dt_bias", "(nheads,)", "f32|bf16|f16", "added to dt"),
    ArgSpec::opt(
        "initial_states",
        "(batch, nheads, headdim, dstate)",
        "f32|bf16|f16",
        "state before token 0 (belongs to sequence id 0)",
    ),
    ArgSpec::opt(
        "seq_idx",
        "(batch, seqlen)",
        "i32|i64",
        "sequence id per token, non-decreasing; the state resets where it changes",
    ),
];

fn ssd_params(with_chunk: bool) -> Vec<ParamSpec> {
    let mut v = Vec::new();
    if with_chunk {
        v.push(ParamSpec::new(
            "chunk_size",
            ParamKind::Int,
            Some("128"),
            "tokens per chunk (Nemotron 3 Super: 128)",
        ));
    }
    v.extend([
        ParamSpec::new(
            "dt_softplus",
            ParamKind::Bool,
            Some("false"),
            "dt' = softplus(dt + dt_bias) (identity above 20)",
        ),
        ParamSpec::new(
            "dt_min",
            ParamKind::Float,
            Some("0.0"),
            "lower clamp of dt'",
        ),
        ParamSpec::new(
            "dt_max",
            ParamKind::Float,
            Some("inf"),
            "upper clamp of dt'",
        ),
    ]);
    v
}

const SSD_OUTPUTS: [ArgSpec; 2] = [
    ArgSpec::req(
        "y",
        "(batch, seqlen, nheads, headdim)",
        "x's dtype",
        "output",
    ),
    ArgSpec::req(
        "final_states",
        "(batch, nheads, headdim, dstate)",
        "f32",
        "state after the last token",
    ),
];

/// The op description shared by `ssd_chunk_scan` (`with_chunk`: takes `chunk_size`) and its
/// oracle `selective_scan`: same inputs, params and outputs.
pub(crate) fn ssd_def(
    name: &'static str,
    summary: &'static str,
    with_chunk: bool,
    run: RunFn,
) -> OpDef {
    OpDef {
        name,
        summary,
        inputs: SSD_INPUTS.to_vec(),
        params: ssd_params(with_chunk),
        outputs: SSD_OUTPUTS.to_vec(),
        run,
    }
}

/// Owned, validated inputs of `ssd_chunk_scan` / `selective_scan`.
/// Owned SSD inputs (what `read_ssd` builds from a TensorMap; tests build them directly).
pub struct SsdOwned {
    pub dims: SsdDims,
    pub x_dtype: DType,
    pub x: Vec<f32>,
    pub dt: Vec<f32>,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub c: Vec<f32>,
    pub d: Option<Vec<f32>>,
    pub z: Option<Vec<f32>>,
    pub dt_bias: Option<Vec<f32>>,
    pub initial_states: Option<Vec<f32>>,
    pub seq_idx: Option<Vec<i64>>,
    pub dt_cfg: DtConfig,
}

impl SsdOwned {
    pub fn args(&self) -> SsdArgs<'_> {
        SsdArgs {
            dims: self.dims,
            x: &self.x,
            dt: &self.dt,
            a: &self.a,
            b: &self.b,
            c: &self.c,
            d: self.d.as_deref(),
            z: self.z.as_deref(),
            dt_bias: self.dt_bias.as_deref(),
            initial_states: self.initial_states.as_deref(),
            seq_idx: self.seq_idx.as_deref(),
            dt_cfg: self.dt_cfg,
        }
    }

    pub fn outputs(&self, out: SsdOutput) -> TensorMap {
        let SsdDims {
            batch,
            seqlen,
            nheads,
            headdim,
            dstate,
            ..
        } = self.dims;
        outputs([
            (
                "y",
                Tensor::from_f32_as(&[batch, seqlen, nheads, headdim], &out.y, self.x_dtype),
            ),
            (
                "final_states",
                Tensor::from_f32(&[batch, nheads, headdim, dstate], out.final_states),
            ),
        ])
    }
}

/// Validates the inputs and params shared by the two scans.
pub(crate) fn read_ssd(in_: &Inputs<'_>, p: &Params) -> Result<SsdOwned, OpError> {
    let (xt, x) = in_.float("x", 4)?;
    let (bt, l, h, hd) = (xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]);
    let (dtt, dt) = in_.float("dt", 3)?;
    in_.shape("dt", dtt, &[bt, l, h], "(batch, seqlen, nheads)")?;
    let (at, a) = in_.float("A", 1)?;
    in_.shape("A", at, &[h], "(nheads,)")?;
    let (btn, b) = in_.float("B", 4)?;
    let (g, n) = (btn.shape[2], btn.shape[3]);
    in_.shape("B", btn, &[bt, l, g, n], "(batch, seqlen, ngroups, dstate)")?;
    if g == 0 || h % g != 0 {
        return Err(in_.err(
            "B",
            format!("ngroups {g} does not divide nheads {h}; pass B with ngroups dividing nheads"),
        ));
    }
    let (ct, c) = in_.float("C", 4)?;
    in_.shape("C", ct, &[bt, l, g, n], "(batch, seqlen, ngroups, dstate)")?;
    let d = match in_.get("D") {
        None => None,
        Some(t) => {
            let v = t.to_f32_vec();
            if !t.dtype().is_float() {
                return Err(in_.err("D", format!("dtype {} is not a float type", t.dtype())));
            }
            if t.shape == [h] {
                Some(v.iter().flat_map(|&x| std::iter::repeat_n(x, hd)).collect())
            } else if t.shape == [h, hd] {
                Some(v)
            } else {
                return Err(in_.err(
                    "D",
                    format!(
                        "shape {:?} is neither (nheads,) = [{h}] nor (nheads, headdim) = [{h}, {hd}]",
                        t.shape
                    ),
                ));
            }
        }
    };
    let z = match in_.opt_float("z", 4)? {
        None => None,
        Some((t, v)) => {
            in_.shape(
                "z",
                t,
                &xt.shape,
                "x's shape (batch, seqlen, nheads, headdim)",
            )?;
            Some(v)
        }
    };
    let dt_bias = match in_.opt_float("dt_bias", 1)? {
        None => None,
        Some((t, v)) => {
            in_.shape("dt_bias", t, &[h], "(nheads,)")?;
            Some(v)
        }
    };
    let initial_states = match in_.opt_float("initial_states", 4)? {
        None => None,
        Some((t, v)) => {
            in_.shape(
                "initial_states",
                t,
                &[bt, h, hd, n],
                "(batch, nheads, headdim, dstate)",
            )?;
            Some(v)
        }
    };
    let seq_idx = match in_.opt_int("seq_idx")? {
        None => None,
        Some((t, v)) => {
            in_.shape("seq_idx", t, &[bt, l], "(batch, seqlen)")?;
            Some(v)
        }
    };
    let dt_cfg = DtConfig {
        transform: if p.bool("dt_softplus")? {
            DtTransform::Softplus
        } else {
            DtTransform::Identity
        },
        dt_min: p.float("dt_min")? as f32,
        dt_max: p.float("dt_max")? as f32,
    };
    if dt_cfg.dt_min.is_nan() || dt_cfg.dt_max.is_nan() || dt_cfg.dt_min > dt_cfg.dt_max {
        return Err(in_.invalid(format!(
            "dt_min {} must be <= dt_max {}",
            dt_cfg.dt_min, dt_cfg.dt_max
        )));
    }
    let owned = SsdOwned {
        dims: SsdDims {
            batch: bt,
            seqlen: l,
            nheads: h,
            headdim: hd,
            ngroups: g,
            dstate: n,
        },
        x_dtype: xt.dtype(),
        x,
        dt,
        a,
        b,
        c,
        d,
        z,
        dt_bias,
        initial_states,
        seq_idx,
        dt_cfg,
    };
    owned.args().check().map_err(|m| in_.invalid(m))?;
    Ok(owned)
}

pub fn def() -> OpDef {
    ssd_def(
        "ssd_chunk_scan",
        "Mamba-2 SSD chunked scan (prefill), as mamba_chunk_scan_combined",
        true,
        run_op,
    )
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("ssd_chunk_scan", inputs);
    let owned = read_ssd(&in_, p)?;
    let chunk = p.usize("chunk_size")?;
    if chunk == 0 {
        return Err(OpError::Param {
            op: "ssd_chunk_scan".into(),
            name: "chunk_size".into(),
            msg: "must be >= 1 (Nemotron 3 Super uses 128)".into(),
        });
    }
    let out = ssd_chunk_scan(&owned.args(), chunk).map_err(|m| in_.invalid(m))?;
    Ok(owned.outputs(out))
}

#[cfg(test)]
mod tests {
    use super::exp_vec;

    #[test]
    fn exp_vec_within_2_5_epsilon() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = (x as f64).exp();
            let got = exp_vec(x) as f64;
            let ulp = f32::EPSILON as f64 * want.abs();
            worst = worst.max((got - want).abs() / ulp);
            x += 0.001_37;
        }
        assert!(worst <= 2.5, "worst relative error {worst} x f32::EPSILON");
        assert_eq!(exp_vec(-200.0), 0.0);
        assert_eq!(exp_vec(200.0), f32::INFINITY);
        assert!(exp_vec(f32::NAN).is_nan());
        assert_eq!(exp_vec(0.0), 1.0);
    }
}
