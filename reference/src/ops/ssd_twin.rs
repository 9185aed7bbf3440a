//! A numerics twin of the GPU's fused SSD chunk scan (`ssd2`-`ssd8_fused_p64_n128`): the same
//! formulation, with the tensor-core operands rounded as the kernels round them, on the CPU.
//!
//! Why: the fused kernels' speed is bound by how many tensor-core passes a chunk takes, and
//! three of their four products run twice, on bf16 hi + lo splits of an f32 operand, so that the
//! outputs meet their tolerances (gpu/NOTES.md sessions 18 and 37: one bf16 pass of M or of S
//! put single elements of `y` at 103-114 % of its tolerance). Whether a cheaper operand form
//! (one bf16 pass, f16, f16 hi + lo) would still pass is a question of arithmetic, not of the
//! GPU: this module answers it before a kernel is written.
//!
//! The kernels' arithmetic (gpu/kernels/ssd_chunk_scan.cu), per (batch, head) and chunk:
//! - G = C · B^T from the bf16 inputs (exact products, f32 accumulation);
//! - M[i, s] = G[i, s] exp(cs_i - cs_s) dt'_s (s <= i, same sequence) in f32, then the
//!   operand form `m`; y_intra = M · x;
//! - X = exp(cs_i) C_i · S (the incoming state, f32 in registers, operand form `s`);
//! - y = y_intra + X + D x, then the z gate, stored in x's dtype;
//! - S = exp(cs_last) S + sum_l (x_l w_l) ⊗ B_l with w_l = exp(cs_last - cs_l) dt'_l (f32,
//!   operand form `xw`).
//!
//! Products accumulate in f64 here: the twin isolates the operand rounding (the tensor cores'
//! f32 accumulation adds errors near 2^-24 relative, far below the bf16 operand effects). An f16
//! operand form also takes its partner (x, C or B, bf16 inputs) to f16, as an f16 `wgmma` would:
//! bf16 values outside f16's range become inf or lose bits there.

use super::ssd_chunk_scan::{read_ssd, scan_per_head, silu, SsdArgs, SsdDims, SsdOutput};
use crate::num::{round_bf16, round_f16};
use crate::op::{Inputs, OpError, Params};
use crate::tensor::TensorMap;
use std::sync::atomic::{AtomicU32, Ordering};

/// How an f32 operand enters a tensor-core product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// Unrounded (the reference's arithmetic).
    F32,
    /// One bf16 pass (round to nearest even).
    Bf16,
    /// bf16 hi + bf16 lo of the remainder, two passes (the kernels' `ssd2_split`).
    Bf16x2,
    /// One f16 pass; the partner operand is rounded to f16 too.
    F16,
    /// f16 hi + f16 lo, two passes; the partner operand is rounded to f16 too.
    F16x2,
}

impl Operand {
    /// The value the tensor cores multiply (the sum of the passes).
    #[inline]
    pub fn round(self, v: f32) -> f64 {
        match self {
            Operand::F32 => v as f64,
            Operand::Bf16 => round_bf16(v) as f64,
            Operand::Bf16x2 => {
                let hi = round_bf16(v);
                hi as f64 + round_bf16(v - hi) as f64
            }
            Operand::F16 => round_f16(v) as f64,
            Operand::F16x2 => {
                let hi = round_f16(v);
                hi as f64 + round_f16(v - hi) as f64
            }
        }
    }

    /// The partner operand (a bf16 input: x, C or B) as this form's product takes it.
    #[inline]
    pub fn partner(self, v: f32) -> f64 {
        match self {
            Operand::F16 | Operand::F16x2 => round_f16(v) as f64,
            _ => v as f64,
        }
    }

    /// Whether this form runs in f16 (and so takes an f16 partner).
    pub fn is_f16(self) -> bool {
        matches!(self, Operand::F16 | Operand::F16x2)
    }

    /// [`Operand::round`] of every value of one scale group. With `pow2` an f16 form first
    /// multiplies the group by 2^-e, e = exponent(max |v|) - 14, so the group's largest value
    /// lands in [2^14, 2^15) (no overflow, full f16 precision down to 2^-10 of the max), and
    /// the product is scaled back by 2^e exactly; bf16 and f32 forms ignore `pow2`.
    pub fn round_group(self, vals: &[f32], pow2: bool, out: &mut [f64]) {
        self.scaled_group(vals, pow2, out, Operand::round);
    }

    /// [`Operand::partner`] of one scale group (a chunk's tile of x, C or B), as
    /// [`Operand::round_group`] scales it.
    pub fn partner_group(self, vals: &[f32], pow2: bool, out: &mut [f64]) {
        self.scaled_group(vals, pow2, out, Operand::partner);
    }

    /// `f` of each value of the group, scaled by 2^-e before and 2^e after (f64: 2^e of a
    /// subnormal group's scale overflows f32).
    fn scaled_group(self, vals: &[f32], pow2: bool, out: &mut [f64], f: fn(Operand, f32) -> f64) {
        let k = if pow2 && self.is_f16() {
            pow2_scale(vals)
        } else {
            0
        };
        let (down, up) = (2f64.powi(-k), 2f64.powi(k));
        for (o, &v) in out.iter_mut().zip(vals) {
            *o = f(self, (v as f64 * down) as f32) * up;
        }
    }

    /// Tensor-core passes of the product (1 or 2; 0 for the unrounded reference form).
    pub fn passes(self) -> usize {
        match self {
            Operand::F32 => 0,
            Operand::Bf16 | Operand::F16 => 1,
            Operand::Bf16x2 | Operand::F16x2 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Operand::F32 => "f32",
            Operand::Bf16 => "bf16",
            Operand::Bf16x2 => "bf16x2",
            Operand::F16 => "f16",
            Operand::F16x2 => "f16x2",
        }
    }

    /// Parses [`Operand::name`].
    pub fn parse(s: &str) -> Result<Operand, String> {
        Ok(match s {
            "f32" => Operand::F32,
            "bf16" => Operand::Bf16,
            "bf16x2" => Operand::Bf16x2,
            "f16" => Operand::F16,
            "f16x2" => Operand::F16x2,
            _ => {
                return Err(format!(
                    "operand form {s:?} is not one of f32, bf16, bf16x2, f16, f16x2"
                ))
            }
        })
    }
}

/// e with 2^-e max |v| in [2^14, 2^15) (0 for a group of zeros or with a non-finite value:
/// an inf or NaN stays one, as the reference's does).
fn pow2_scale(vals: &[f32]) -> i32 {
    let mut m = 0f32;
    for &v in vals {
        if !v.is_finite() {
            return 0;
        }
        m = m.max(v.abs());
    }
    if m == 0.0 {
        return 0;
    }
    // the exponent of m (m in [2^e, 2^(e + 1))), from its bits (normal or subnormal)
    let e = if m >= f32::MIN_POSITIVE {
        ((m.to_bits() >> 23) & 0xff) as i32 - 127
    } else {
        (31 - m.to_bits().leading_zeros() as i32) - 149
    };
    e - 14
}

/// The operand forms of the three products that are not bf16 x bf16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Precision {
    /// M in y_intra = M · x (row warpgroups)
    pub m: Operand,
    /// S in X = C · S (the state warpgroup)
    pub s: Operand,
    /// x w in the state update (the state warpgroup)
    pub xw: Operand,
    /// f16 forms carry power-of-two scales: per row of M, of S and of (x w)^T, per chunk tile
    /// of x, C and B (`scale=pow2`), as an f16 kernel must to take any bf16 input.
    pub pow2: bool,
}

impl Precision {
    /// The reference's arithmetic (no operand rounding).
    pub const EXACT: Precision = Precision {
        m: Operand::F32,
        s: Operand::F32,
        xw: Operand::F32,
        pow2: false,
    };
    /// SSD v2-v8 as shipped: every non-bf16 operand split into bf16 hi + lo.
    pub const KERNEL: Precision = Precision {
        m: Operand::Bf16x2,
        s: Operand::Bf16x2,
        xw: Operand::Bf16x2,
        pow2: false,
    };
    /// Session 36's v5m (M in one bf16 pass; measured on the H200 in session 37).
    pub const V5M: Precision = Precision {
        m: Operand::Bf16,
        ..Precision::KERNEL
    };

    /// `kernel`, `v5m`, `exact`, or `m=...,s=...,xw=...` (any subset; the rest as
    /// [`Precision::KERNEL`]).
    pub fn parse(spec: &str) -> Result<Precision, String> {
        match spec {
            "kernel" => return Ok(Precision::KERNEL),
            "v5m" => return Ok(Precision::V5M),
            "exact" => return Ok(Precision::EXACT),
            _ => {}
        }
        let mut p = Precision::KERNEL;
        for part in spec.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                format!("{part:?} is not NAME=FORM (e.g. m=bf16), nor kernel / v5m / exact")
            })?;
            if k == "scale" {
                p.pow2 = match v {
                    "pow2" => true,
                    "none" => false,
                    _ => return Err(format!("scale={v:?} is not pow2 or none")),
                };
                continue;
            }
            let f = Operand::parse(v)?;
            match k {
                "m" => p.m = f,
                "s" => p.s = f,
                "xw" => p.xw = f,
                _ => {
                    return Err(format!(
                        "{k:?} is not one of the products m, s, xw (or scale)"
                    ))
                }
            }
        }
        Ok(p)
    }

    pub fn describe(&self) -> String {
        format!(
            "m={},s={},xw={}{}",
            self.m.name(),
            self.s.name(),
            self.xw.name(),
            if self.pow2 { ",scale=pow2" } else { "" }
        )
    }

    /// m64n64k16-equivalent tensor-core units a 128-token chunk of one head takes (P 64, N 128),
    /// counted as gpu/NOTES.md session 37 counts the kernels' 112: G 24 (causal), M · x 12 a
    /// pass, C · S 16 a pass, the update 16 a pass. `None` for the unrounded form.
    pub fn units_per_chunk(&self) -> Option<usize> {
        if *self == Precision::EXACT || [self.m, self.s, self.xw].contains(&Operand::F32) {
            return None;
        }
        Some(24 + 12 * self.m.passes() + 16 * self.s.passes() + 16 * self.xw.passes())
    }
}

/// The largest magnitudes the three rounded operands took (f32 values before rounding): how
/// far an f16 form is from its range (f16's largest finite value is 65504, its smallest normal
/// 2^-14).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OperandRange {
    pub max_abs_m: f32,
    pub max_abs_s: f32,
    pub max_abs_xw: f32,
}

/// Running maxima shared by the per-head scans (f32 bits of non-negative values order as u32).
#[derive(Default)]
struct RangeAcc([AtomicU32; 3]);

impl RangeAcc {
    fn note(&self, which: usize, local: f32) {
        self.0[which].fetch_max(local.to_bits(), Ordering::Relaxed);
    }
    fn get(&self) -> OperandRange {
        let v = |i: usize| f32::from_bits(self.0[i].load(Ordering::Relaxed));
        OperandRange {
            max_abs_m: v(0),
            max_abs_s: v(1),
            max_abs_xw: v(2),
        }
    }
}

/// The fused kernels' arithmetic with operand forms `prec`, chunks of `chunk_size` tokens (the
/// kernels use 128). Outputs in f32 (the caller stores `y` in x's dtype, as the kernels do).
pub fn ssd_twin(
    args: &SsdArgs<'_>,
    chunk_size: usize,
    prec: Precision,
) -> Result<SsdOutput, String> {
    ssd_twin_range(args, chunk_size, prec).map(|(o, _)| o)
}

/// [`ssd_twin`], and the operands' largest magnitudes.
pub fn ssd_twin_range(
    args: &SsdArgs<'_>,
    chunk_size: usize,
    prec: Precision,
) -> Result<(SsdOutput, OperandRange), String> {
    args.check()?;
    if chunk_size == 0 {
        return Err("chunk_size must be >= 1".into());
    }
    let dtp = args.processed_dt();
    let acc = RangeAcc::default();
    let out = scan_per_head(args, |b, hh, s0| {
        head_twin(args, &dtp, (b, hh), s0, chunk_size, prec, &acc)
    });
    Ok((out, acc.get()))
}

/// One (batch, head) over every chunk: its y rows (seqlen, p) and its final state (p, n).
fn head_twin(
    args: &SsdArgs<'_>,
    dtp: &[f32],
    (b, hh): (usize, usize),
    mut state: Vec<f32>,
    q: usize,
    prec: Precision,
    range: &RangeAcc,
) -> (Vec<f32>, Vec<f32>) {
    let SsdDims {
        seqlen: l,
        nheads: h,
        headdim: p,
        ngroups: g,
        dstate: n,
        ..
    } = args.dims;
    let gg = hh / (h / g);
    let a = args.a[hh];
    let mut state_seq = 0i64;
    let mut yh = vec![0f32; l * p];
    let (mut cs, mut dtv, mut sq) = (vec![0f32; q], vec![0f32; q], vec![0i64; q]);
    let mut mr = vec![0f64; q * q];
    let mut sr = vec![0f64; p * n];
    let mut xw = vec![0f64; q * p];
    let mut mrow = vec![0f32; q];
    let (mut xt, mut ct, mut bt) = (vec![0f32; q * p], vec![0f32; q * n], vec![0f32; q * n]);
    let (mut xp, mut cp, mut bp) = (vec![0f64; q * p], vec![0f64; q * n], vec![0f64; q * n]);
    let (mut colv, mut colr) = (vec![0f32; q], vec![0f64; q]);
    // Offset of row (b, t, idx) of a (batch, seqlen, stride, width) tensor.
    let row =
        |t: usize, width: usize, stride: usize, idx: usize| ((b * l + t) * stride + idx) * width;
    let mut mx = [0f32; 3];
    let mut t0 = 0;
    while t0 < l {
        let qc = q.min(l - t0);
        let mut acc = 0f32;
        for i in 0..qc {
            let v = dtp[(b * l + t0 + i) * h + hh];
            acc += v * a;
            cs[i] = acc;
            dtv[i] = v;
            sq[i] = args.seq_idx.map_or(0, |s| s[b * l + t0 + i]);
        }
        let prev_seq = state_seq;
        let last_seq = sq[qc - 1];
        let c_at = |i: usize| &args.c[row(t0 + i, n, g, gg)..][..n];
        let b_at = |i: usize| &args.b[row(t0 + i, n, g, gg)..][..n];
        let x_at = |i: usize| &args.x[row(t0 + i, p, h, hh)..][..p];
        // The chunk's tiles of x, C and B as the products take them (a scale per tile).
        for i in 0..qc {
            xt[i * p..(i + 1) * p].copy_from_slice(x_at(i));
            ct[i * n..(i + 1) * n].copy_from_slice(c_at(i));
            bt[i * n..(i + 1) * n].copy_from_slice(b_at(i));
        }
        prec.m
            .partner_group(&xt[..qc * p], prec.pow2, &mut xp[..qc * p]);
        prec.s
            .partner_group(&ct[..qc * n], prec.pow2, &mut cp[..qc * n]);
        prec.xw
            .partner_group(&bt[..qc * n], prec.pow2, &mut bp[..qc * n]);
        // M in its operand form, a scale per row (G from the bf16 inputs, exact products).
        for i in 0..qc {
            let ci = c_at(i);
            for s in 0..qc {
                mrow[s] = if s <= i && sq[s] == sq[i] {
                    let gv: f64 = ci
                        .iter()
                        .zip(b_at(s))
                        .map(|(&c, &bv)| c as f64 * bv as f64)
                        .sum();
                    (gv as f32) * (cs[i] - cs[s]).exp() * dtv[s]
                } else {
                    0.0
                };
                mx[0] = mx[0].max(mrow[s].abs());
            }
            prec.m
                .round_group(&mrow[..qc], prec.pow2, &mut mr[i * qc..(i + 1) * qc]);
        }
        // S, a scale per row (headdim index k).
        for k in 0..p {
            let srow = &state[k * n..(k + 1) * n];
            mx[1] = srow.iter().fold(mx[1], |m, v| m.max(v.abs()));
            prec.s
                .round_group(srow, prec.pow2, &mut sr[k * n..(k + 1) * n]);
        }
        for i in 0..qc {
            let ein = if sq[i] == prev_seq { cs[i].exp() } else { 0.0 };
            let ci = &cp[i * n..(i + 1) * n];
            let yrow = &mut yh[(t0 + i) * p..(t0 + i + 1) * p];
            let xi = x_at(i);
            for k in 0..p {
                // X (the inter-chunk part) and y_intra, each accumulated on its own as the
                // kernels do (X through the hand-over buffer, y_intra in the rows' registers).
                let xs: f64 = ci
                    .iter()
                    .zip(&sr[k * n..(k + 1) * n])
                    .map(|(c, s)| c * s)
                    .sum();
                let mut yi = 0f64;
                for s in 0..=i {
                    yi += mr[i * qc + s] * xp[s * p + k];
                }
                let mut v = yi as f32 + (xs as f32) * ein;
                if let Some(d) = args.d {
                    v += d[hh * p + k] * xi[k];
                }
                if let Some(z) = args.z {
                    v *= silu(z[row(t0 + i, p, h, hh) + k]);
                }
                yrow[k] = v;
            }
        }
        // The state update: S = decay S + (x w)^T B.
        let cs_last = cs[qc - 1];
        for i in 0..qc {
            let w = if sq[i] == last_seq {
                (cs_last - cs[i]).exp() * dtv[i]
            } else {
                0.0
            };
            for (k, &xv) in x_at(i).iter().enumerate() {
                mx[2] = mx[2].max((xv * w).abs());
                xt[i * p + k] = xv * w;
            }
        }
        // x w: the rows of (x w)^T (headdim index k) are the A operand's, a scale per row.
        for k in 0..p {
            for i in 0..qc {
                colv[i] = xt[i * p + k];
            }
            prec.xw.round_group(&colv[..qc], prec.pow2, &mut colr[..qc]);
            for i in 0..qc {
                xw[i * p + k] = colr[i];
            }
        }
        let decay = if last_seq == prev_seq {
            cs_last.exp()
        } else {
            0.0
        };
        for k in 0..p {
            for j in 0..n {
                let mut u = 0f64;
                for i in 0..qc {
                    u += xw[i * p + k] * bp[i * n + j];
                }
                let sv = &mut state[k * n + j];
                *sv = decay * *sv + u as f32;
            }
        }
        state_seq = last_seq;
        t0 += qc;
    }
    for (i, &m) in mx.iter().enumerate() {
        range.note(i, m);
    }
    (yh, state)
}

/// The twin as an op run: `ssd_chunk_scan`'s inputs and params (`chunk_size`, dt options),
/// outputs `y` (x's dtype) and `final_states` (f32), as the GPU path returns them.
pub fn run(inputs: &TensorMap, p: &Params, prec: Precision) -> Result<TensorMap, OpError> {
    run_range(inputs, p, prec).map(|(o, _)| o)
}

/// [`run`], and the operands' largest magnitudes.
pub fn run_range(
    inputs: &TensorMap,
    p: &Params,
    prec: Precision,
) -> Result<(TensorMap, OperandRange), OpError> {
    let in_ = Inputs::new("ssd_chunk_scan", inputs);
    let owned = read_ssd(&in_, p)?;
    let chunk = p.usize("chunk_size")?;
    let (out, range) = ssd_twin_range(&owned.args(), chunk, prec).map_err(|m| in_.invalid(m))?;
    Ok((owned.outputs(out), range))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::num::round_bf16;
    use crate::ops::ssd_chunk_scan::{ssd_chunk_scan, DtConfig, DtTransform};

    /// A small seeded problem with every option (seq_idx inside chunks, initial states, D, z).
    fn problem(seed: u64) -> (SsdDims, Vec<Vec<f32>>, Vec<i64>) {
        let dims = SsdDims {
            batch: 2,
            seqlen: 45,
            nheads: 4,
            headdim: 6,
            ngroups: 2,
            dstate: 5,
        };
        let mut st = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut u = || {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            (st >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
        };
        let (b, l, h, p, g, n) = (2, 45, 4, 6, 2, 5);
        let mut gen = |len: usize, s: f32| (0..len).map(|_| u() * s).collect::<Vec<f32>>();
        let v = vec![
            gen(b * l * h * p, 1.0),                                // x
            gen(b * l * h, 0.5),                                    // dt
            gen(h, 1.0).iter().map(|v| -(v.abs() + 0.2)).collect(), // A
            gen(b * l * g * n, 1.0),                                // B
            gen(b * l * g * n, 1.0),                                // C
            gen(h * p, 1.0),                                        // D
            gen(b * l * h * p, 2.0),                                // z
            gen(h, 1.0).iter().map(|v| v - 2.0).collect(),          // dt_bias
            gen(b * h * p * n, 0.5),                                // initial states
        ];
        let seq: Vec<i64> = (0..b)
            .flat_map(|_| (0..l).map(|t| (t >= 17) as i64 + (t >= 31) as i64))
            .collect();
        (dims, v, seq)
    }

    fn args<'a>(dims: SsdDims, v: &'a [Vec<f32>], seq: &'a [i64]) -> SsdArgs<'a> {
        SsdArgs {
            dims,
            x: &v[0],
            dt: &v[1],
            a: &v[2],
            b: &v[3],
            c: &v[4],
            d: Some(&v[5]),
            z: Some(&v[6]),
            dt_bias: Some(&v[7]),
            initial_states: Some(&v[8]),
            seq_idx: Some(seq),
            dt_cfg: DtConfig {
                transform: DtTransform::Softplus,
                dt_min: 0.0,
                dt_max: f32::INFINITY,
            },
        }
    }

    fn max_rel(a: &[f32], b: &[f32]) -> f64 {
        let scale = a.iter().fold(0f64, |m, &v| m.max(v.abs() as f64));
        a.iter()
            .zip(b)
            .map(|(&x, &y)| (x as f64 - y as f64).abs() / scale)
            .fold(0.0, f64::max)
    }

    #[test]
    fn unrounded_twin_is_the_reference() {
        for seed in 1..4 {
            let (dims, v, seq) = problem(seed);
            let a = args(dims, &v, &seq);
            for chunk in [8, 16, 45] {
                let r = ssd_chunk_scan(&a, chunk).unwrap();
                let t = ssd_twin(&a, chunk, Precision::EXACT).unwrap();
                assert!(r.y.iter().any(|&v| v.abs() > 0.1), "a problem with outputs");
                let (ey, es) = (
                    max_rel(&r.y, &t.y),
                    max_rel(&r.final_states, &t.final_states),
                );
                assert!(
                    ey < 1e-5 && es < 1e-5,
                    "seed {seed} chunk {chunk}: {ey:e} {es:e}"
                );
            }
        }
    }

    #[test]
    fn operand_forms_order_their_errors() {
        // The kernels' split form tracks the reference ~2^8 times closer than one bf16 pass,
        // and each form's error is visible (so a wrong rounding path cannot hide).
        let (dims, v, seq) = problem(7);
        let a = args(dims, &v, &seq);
        let r = ssd_chunk_scan(&a, 16).unwrap();
        let err = |prec: Precision| {
            let t = ssd_twin(&a, 16, prec).unwrap();
            (
                max_rel(&r.y, &t.y),
                max_rel(&r.final_states, &t.final_states),
            )
        };
        let (ky, ks) = err(Precision::KERNEL);
        let (my, _) = err(Precision::V5M);
        let (sy, _) = err(Precision::parse("s=bf16").unwrap());
        let (_, xs) = err(Precision::parse("xw=bf16").unwrap());
        let (fy, _) = err(Precision::parse("m=f16").unwrap());
        assert!(ky > 0.0 && ky < 1e-4 && ks < 1e-4, "split: {ky:e} {ks:e}");
        assert!(my > 20.0 * ky, "m=bf16 {my:e} vs split {ky:e}");
        assert!(sy > 20.0 * ky, "s=bf16 {sy:e} vs split {ky:e}");
        assert!(xs > 20.0 * ks, "xw=bf16 {xs:e} vs split {ks:e}");
        assert!(
            fy < my / 3.0 && fy > ky,
            "m=f16 {fy:e} between split {ky:e} and bf16 {my:e}"
        );
    }

    #[test]
    fn operand_ranges_are_the_largest_magnitudes() {
        let (dims, v, seq) = problem(3);
        let a = args(dims, &v, &seq);
        let (out, r) = ssd_twin_range(&a, 16, Precision::KERNEL).unwrap();
        assert_eq!(out, ssd_twin(&a, 16, Precision::KERNEL).unwrap());
        // The initial state is chunk 0's C · S operand (the final state is never multiplied).
        let s0 = v[8].iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(
            r.max_abs_s >= s0 && r.max_abs_s > 0.0,
            "{r:?} vs initial {s0}"
        );
        assert!(r.max_abs_m > 0.0 && r.max_abs_xw > 0.0, "{r:?}");
        // x w = x exp(cs_last - cs_l) dt'_l with the decay <= 1: below max |x| max dt'.
        let dt = a.processed_dt().iter().fold(0f32, |m, x| m.max(*x));
        let x = v[0].iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(
            r.max_abs_xw <= x * dt * 1.0001,
            "{} vs {}",
            r.max_abs_xw,
            x * dt
        );
    }

    #[test]
    fn pow2_scales_put_the_group_max_in_2_pow_14_to_15() {
        assert_eq!(pow2_scale(&[1.0, -0.5]), -14);
        assert_eq!(pow2_scale(&[-65504.0, 3.0]), 1);
        assert_eq!(pow2_scale(&[1.5e-7, 0.0]), -23 - 14);
        assert_eq!(pow2_scale(&[0.0, 0.0]), 0);
        assert_eq!(pow2_scale(&[1.0, f32::INFINITY]), 0);
        assert_eq!(pow2_scale(&[f32::from_bits(1)]), -149 - 14);
        // a subnormal group scales up by 2^163 (beyond f32) and keeps its value
        let mut out = [0f64; 2];
        let tiny = [f32::from_bits(3), -f32::from_bits(1)];
        Operand::F16.round_group(&tiny, true, &mut out);
        assert_eq!(out, [tiny[0] as f64, tiny[1] as f64]);
        for v in [1.0e-30f32, 3.0e-5, 0.7, 1.0, 12345.0, 6.0e4, 3.0e38] {
            let k = pow2_scale(&[v]);
            let m = v as f64 * 2f64.powi(-k);
            assert!((16384.0..32768.0).contains(&m), "{v}: {m}");
        }
    }

    /// The problem with x, B and C in bf16 (the fused kernels' inputs), x (index 0) or B (3)
    /// scaled by `f` first.
    fn scaled(seed: u64, which: usize, f: f32) -> (SsdDims, Vec<Vec<f32>>, Vec<i64>) {
        let (dims, mut v, seq) = problem(seed);
        v[which].iter_mut().for_each(|x| *x *= f);
        for i in [0, 3, 4] {
            v[i].iter_mut().for_each(|x| *x = round_bf16(*x));
        }
        (dims, v, seq)
    }

    #[test]
    fn f16_forms_need_their_scales_at_the_range_ends() {
        let err = |(dims, v, seq): (SsdDims, Vec<Vec<f32>>, Vec<i64>), spec: &str| {
            let a = args(dims, &v, &seq);
            let r = ssd_chunk_scan(&a, 16).unwrap();
            let t = ssd_twin(&a, 16, Precision::parse(spec).unwrap()).unwrap();
            (
                max_rel(&r.y, &t.y),
                max_rel(&r.final_states, &t.final_states),
            )
        };
        // x beyond f16's range: unscaled, M · x overflows (inf - inf: NaN, max_rel NaN / inf)
        let (y, _) = err(scaled(5, 0, 1.0e5), "m=f16");
        assert!(
            y.is_nan() || y >= 1e-2,
            "unscaled f16 x at 1e5 should break y: {y}"
        );
        let (y, f) = err(scaled(5, 0, 1.0e5), "m=f16,s=f16,xw=f16x2,scale=pow2");
        let (yk, fk) = err(scaled(5, 0, 1.0e5), "kernel");
        eprintln!("x at 1e5: scaled f16 y {y:e} fs {f:e}; kernel y {yk:e} fs {fk:e}");
        assert!(y < 2e-3 && f < 1e-5, "scaled: y {y:e} fs {f:e}");
        // B far below f16's normal range: unscaled, the update loses B's bits (f16 subnormals)
        let (_, f_raw) = err(scaled(5, 3, 1.0e-6), "xw=f16x2");
        let (_, f_sc) = err(scaled(5, 3, 1.0e-6), "xw=f16x2,scale=pow2");
        assert!(
            f_raw > 100.0 * f_sc && f_sc < 1e-5,
            "raw {f_raw:e} scaled {f_sc:e}"
        );
        // in range the scales change nothing that matters
        let (y0, f0) = err(scaled(5, 0, 1.0), "m=f16,s=f16,xw=f16x2");
        let (y1, f1) = err(scaled(5, 0, 1.0), "m=f16,s=f16,xw=f16x2,scale=pow2");
        assert!(
            y1 < 2.0 * y0 + 1e-6 && f1 < 2.0 * f0 + 1e-9,
            "{y0:e} {y1:e} {f0:e} {f1:e}"
        );
    }

    #[test]
    fn precision_specs_parse_and_count_units() {
        assert_eq!(Precision::parse("").unwrap(), Precision::KERNEL);
        assert_eq!(Precision::parse("m=bf16").unwrap(), Precision::V5M);
        assert_eq!(Precision::KERNEL.units_per_chunk(), Some(112));
        assert_eq!(Precision::V5M.units_per_chunk(), Some(100));
        assert_eq!(Precision::EXACT.units_per_chunk(), None);
        let e = Precision::parse("q=bf16").unwrap_err();
        assert!(e.contains("m, s, xw"), "{e}");
        let e = Precision::parse("m=tf32").unwrap_err();
        assert!(e.contains("f16x2"), "{e}");
        assert_eq!(
            Precision::parse("m=f16,s=f16x2").unwrap().describe(),
            "m=f16,s=f16x2,xw=bf16x2"
        );
    }

    #[test]
    fn f16_partner_takes_bf16_inputs_out_of_range_to_inf() {
        // An f16 product cannot take a bf16 input above 65504: the twin shows it as inf.
        assert!(Operand::F16.partner(1.0e5).is_infinite());
        assert_eq!(Operand::Bf16.partner(1.0e5), 1.0e5);
        assert_eq!(Operand::Bf16x2.round(1.0 + 1.0 / 512.0), 1.0 + 1.0 / 512.0);
        assert_eq!(Operand::Bf16.round(1.0 + 1.0 / 512.0), 1.0);
    }
}
