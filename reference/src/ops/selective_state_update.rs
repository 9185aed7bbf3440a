//! `selective_state_update`: one Mamba-2 decode step (SPEC.md "Selective state update").
//!
//! For every batch row `b`, head `h`, head-dim row `d` and state column `n` (all math fp32):
//!
//! ```text
//! dt'  = dt[b,h,d] + dt_bias[h,d];  if dt_softplus: dt' = dt' <= 20 ? log1p(exp(dt')) : dt'
//! dA   = exp(A[h,d,n] * dt')          (exp and softplus evaluated in f64, rounded once to f32)
//! s'   = s[slot,h,d,n] * dA + (B[b,g,n] * dt') * x[b,h,d]          (g = h / (nheads/ngroups))
//! out  = sum_n s'[n] * C[b,g,n] + x[b,h,d] * D[h,d];  if z: out *= z * sigmoid(z)
//! ```
//!
//! This is mamba_ssm's `selective_state_update_ref` term for term (same operand order, no fused
//! multiply-adds). The sum over `n` uses 8 interleaved fp32 partial sums (lane `n % 8`) combined
//! as `((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7))`; upstream's einsum order is unspecified.
//!
//! Modes where upstream implementations disagree (SPEC.md), each a named enum:
//! - [`OutFrom`]: the kernels compute `out` from the unrounded fp32 `s'` (default); mamba's Python
//!   reference first stores the state and reads it back (`stored_state`).
//! - [`PadMode`]: a row whose slot is `pad_slot_id` writes a zero output and leaves the cache
//!   alone (mamba, causal-conv1d; default), or computes its output from a zero state and leaves
//!   the cache alone (FlashInfer).
//! - State storage: f32, bf16 and f16 round to nearest even; int16 uses a block scale per
//!   (slot, head, d) row: `amax = max_n |s'|`, `encode = amax == 0 ? 1 : 32767/amax`,
//!   `decode = 1/encode` (stored fp32 in `state_scale`), `q = round_half_even(clamp(s'*encode,
//!   +-32767))`, read back as `q * decode`.
//! - [`Rounding::Stochastic`] (f16 state only): [`stochastic_round_f16_bits`] with Philox bits.
//!   Element offset `o = slot*nheads*dim*dstate + h*dim*dstate + d*dstate + n` (u64). Which
//!   Philox word feeds which element is [`SrMapping`]: `group_of_4` (default) draws
//!   `philox(seed, offset = o/4)` once per 4 consecutive offsets and gives element `o` word
//!   `o % 4`; `word_per_element` draws `philox(seed, offset = o)` per element and uses word 0.
//!   `philox(seed, offset)` is [`philox_from_seed_offset`] (key = seed, counter = offset).
//!
//! Accepted shapes (beyond SPEC's): `A` as `(nheads,)`; `D` and `dt_bias` as `(nheads,)`; `dt` as
//! `(batch, nheads)` (one value per head, broadcast over `dim`); and mamba's head-less form
//! (`state` rank 3 `(cache, dim, dstate)`, `x, dt, z (batch, dim)`, `A (dim, dstate)`,
//! `B, C (batch, dstate)`, `D, dt_bias (dim,)`), run as one head.

use crate::num::{philox_from_seed_offset, stochastic_round_f16_bits};
use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{
    bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16, DType, Data, Tensor, TensorMap,
};
use rayon::prelude::*;

const OP: &str = "selective_state_update";

/// What a batch row whose slot is `pad_slot_id` computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadMode {
    /// mamba / causal-conv1d: the output row is zero, the cache is not touched.
    ZeroOutput,
    /// FlashInfer: the output is computed from a zero state, the cache is not touched.
    ComputeFromZeroState,
}

/// Which state `out` is computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutFrom {
    /// The kernels: the fp32 `s'` before it is rounded to the state dtype.
    UnroundedState,
    /// mamba's `selective_state_update_ref`: the state as stored (rounded), read back.
    StoredState,
}

/// Which Philox output word feeds which state element (stochastic rounding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrMapping {
    /// One Philox call per element, counter offset = element offset, word 0.
    WordPerElement,
    /// One Philox call per 4 consecutive element offsets: offset = o / 4, word = o % 4.
    GroupOf4,
}

/// How the new state is rounded to an f16 state cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// Round to nearest even (every state dtype).
    Nearest,
    /// SPEC.md stochastic rounding from 13 Philox bits per element (f16 state only).
    Stochastic {
        seed: u64,
        rounds: u32,
        mapping: SrMapping,
    },
}

/// The op's modes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SsuConfig {
    /// Apply softplus (threshold 20, as `F.softplus`) to `dt + dt_bias`.
    pub dt_softplus: bool,
    /// A `state_batch_indices` entry equal to this marks a padded row.
    pub pad_slot_id: i64,
    pub pad_mode: PadMode,
    pub out_from: OutFrom,
    pub rounding: Rounding,
}

impl Default for SsuConfig {
    fn default() -> Self {
        SsuConfig {
            dt_softplus: false,
            pad_slot_id: -1,
            pad_mode: PadMode::ZeroOutput,
            out_from: OutFrom::UnroundedState,
            rounding: Rounding::Nearest,
        }
    }
}

/// Sizes. `batch` counts the rows of `x` (for the multi-token op: batch rows, each of `T` tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsuDims {
    pub batch: usize,
    pub nheads: usize,
    pub dim: usize,
    pub dstate: usize,
    pub ngroups: usize,
}

/// A per-head value, either one per (head, d) (`per_dim`) or one per head broadcast over `d`,
/// optionally with leading token rows: element `(row, h, d)`.
#[derive(Clone, Copy, Debug)]
pub struct HeadVals<'a> {
    pub v: &'a [f32],
    pub per_dim: bool,
}

impl HeadVals<'_> {
    #[inline]
    pub fn at(&self, row: usize, h: usize, d: usize, nheads: usize, dim: usize) -> f32 {
        if self.per_dim {
            self.v[(row * nheads + h) * dim + d]
        } else {
            self.v[row * nheads + h]
        }
    }
    fn expected_len(&self, rows: usize, nheads: usize, dim: usize) -> usize {
        rows * nheads * if self.per_dim { dim } else { 1 }
    }
}

/// `A`: one value per head `(nheads,)` or the full `(nheads, dim, dstate)`.
#[derive(Clone, Copy, Debug)]
pub enum AVals<'a> {
    PerHead(&'a [f32]),
    Full(&'a [f32]),
}

/// The read-only operands, as f32. Token rows `r` index `x, dt, z, B, C`.
#[derive(Clone, Copy, Debug)]
pub struct SsuArgs<'a> {
    /// x: (rows, nheads, dim).
    pub x: &'a [f32],
    /// dt: (rows, nheads, dim), or (rows, nheads) with `per_dim = false`.
    pub dt: HeadVals<'a>,
    pub a: AVals<'a>,
    /// B: (rows, ngroups, dstate).
    pub b: &'a [f32],
    /// C: (rows, ngroups, dstate).
    pub c: &'a [f32],
    /// D: (nheads, dim) or (nheads,).
    pub d: Option<HeadVals<'a>>,
    /// z: (rows, nheads, dim).
    pub z: Option<&'a [f32]>,
    /// dt_bias: (nheads, dim) or (nheads,).
    pub dt_bias: Option<HeadVals<'a>>,
    /// state_batch_indices: (batch,) slot of each batch row; absent = row b uses slot b.
    pub state_batch_indices: Option<&'a [i64]>,
}

/// A state cache `(slots, nheads, dim, dstate)` in its storage dtype, updated in place.
/// f16 / bf16 hold raw bits; int16 carries its per-row decode scale `(slots, nheads, dim)`.
#[derive(Debug)]
pub enum StateCache<'a> {
    F32(&'a mut [f32]),
    Bf16(&'a mut [u16]),
    F16(&'a mut [u16]),
    I16 {
        q: &'a mut [i16],
        scale: &'a mut [f32],
    },
}

/// The storage dtype of a state cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateKind {
    F32,
    Bf16,
    F16,
    I16,
}

/// Rounds a row to nearest in the storage format `kind` and reads it back (int16: with the
/// row's own block scale). What a pad row's "stored" state would be.
pub(crate) fn round_nearest_as(kind: StateKind, s: &mut [f32]) {
    match kind {
        StateKind::F32 => {}
        StateKind::Bf16 => s.iter_mut().for_each(|x| *x = bf16_to_f32(f32_to_bf16(*x))),
        StateKind::F16 => s.iter_mut().for_each(|x| *x = f16_to_f32(f32_to_f16(*x))),
        StateKind::I16 => {
            let amax = s.iter().fold(0f32, |m, &x| m.max(x.abs()));
            let encode = if amax == 0.0 { 1.0 } else { 32767.0 / amax };
            let decode = 1.0 / encode;
            for x in s.iter_mut() {
                *x = quantize_i16(*x, encode) as f32 * decode;
            }
        }
    }
}

/// `round_half_even(clamp(x * encode, +-32767))` (SPEC.md int16 state).
#[inline]
pub fn quantize_i16(x: f32, encode: f32) -> i16 {
    (x * encode).clamp(-32767.0, 32767.0).round_ties_even() as i16
}

impl<'a> StateCache<'a> {
    pub fn kind(&self) -> StateKind {
        match self {
            StateCache::F32(_) => StateKind::F32,
            StateCache::Bf16(_) => StateKind::Bf16,
            StateCache::F16(_) => StateKind::F16,
            StateCache::I16 { .. } => StateKind::I16,
        }
    }
    fn len(&self) -> usize {
        match self {
            StateCache::F32(v) => v.len(),
            StateCache::Bf16(v) | StateCache::F16(v) => v.len(),
            StateCache::I16 { q, .. } => q.len(),
        }
    }
    pub(crate) fn is_f16(&self) -> bool {
        matches!(self, StateCache::F16(_))
    }
    /// Splits into blocks of one (slot, head): `dim * dstate` elements and `dim` scales.
    pub(crate) fn into_blocks(self, dim: usize, dstate: usize) -> Vec<Block<'a>> {
        let n = dim * dstate;
        match self {
            StateCache::F32(v) => v.chunks_mut(n).map(Block::F32).collect(),
            StateCache::Bf16(v) => v.chunks_mut(n).map(Block::Bf16).collect(),
            StateCache::F16(v) => v.chunks_mut(n).map(Block::F16).collect(),
            StateCache::I16 { q, scale } => q
                .chunks_mut(n)
                .zip(scale.chunks_mut(dim))
                .map(|(q, s)| Block::I16(q, s))
                .collect(),
        }
    }
    /// Checks the scale length of an int16 cache against its element count.
    fn check(&self, dim: usize, dstate: usize, what: &str) -> Result<usize, OpError> {
        let per = dim * dstate;
        let len = self.len();
        if !len.is_multiple_of(per) {
            return Err(invalid(format!(
                "{what} has {len} elements, not a multiple of dim*dstate = {per}"
            )));
        }
        if let StateCache::I16 { scale, .. } = self {
            if scale.len() * dstate != len {
                return Err(invalid(format!(
                    "{what}: int16 state has {len} elements but its scale has {} (want {})",
                    scale.len(),
                    len / dstate
                )));
            }
        }
        Ok(len / per)
    }
}

/// How one stored row is rounded: nearest, or SR with the element offset of its column 0.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RowRound {
    Nearest,
    Sr {
        seed: u64,
        rounds: u32,
        mapping: SrMapping,
        offset: u64,
    },
}

/// The Philox word that stochastic rounding uses for the state element at offset `o`.
pub fn sr_random_word(seed: u64, rounds: u32, mapping: SrMapping, o: u64) -> u32 {
    match mapping {
        SrMapping::WordPerElement => philox_from_seed_offset(seed, o, rounds)[0],
        SrMapping::GroupOf4 => philox_from_seed_offset(seed, o / 4, rounds)[(o % 4) as usize],
    }
}

/// One (slot, head) block of a state cache.
#[derive(Debug)]
pub(crate) enum Block<'a> {
    F32(&'a mut [f32]),
    Bf16(&'a mut [u16]),
    F16(&'a mut [u16]),
    I16(&'a mut [i16], &'a mut [f32]),
}

impl Block<'_> {
    /// Row `d` (dstate = buf.len() values) as f32.
    #[inline]
    pub(crate) fn load_row(&self, d: usize, buf: &mut [f32]) {
        let n = buf.len();
        let r = d * n..(d + 1) * n;
        match self {
            Block::F32(v) => buf.copy_from_slice(&v[r]),
            Block::Bf16(v) => {
                for (o, &b) in buf.iter_mut().zip(&v[r]) {
                    *o = bf16_to_f32(b);
                }
            }
            Block::F16(v) => {
                for (o, &b) in buf.iter_mut().zip(&v[r]) {
                    *o = f16_to_f32(b);
                }
            }
            Block::I16(q, sc) => {
                let dec = sc[d];
                for (o, &v) in buf.iter_mut().zip(&q[r]) {
                    *o = v as f32 * dec;
                }
            }
        }
    }

    /// Stores `s` as row `d`; when `stored` is given, writes the stored values back as f32.
    #[inline]
    pub(crate) fn store_row(
        &mut self,
        d: usize,
        s: &[f32],
        rnd: RowRound,
        stored: Option<&mut [f32]>,
    ) {
        let n = s.len();
        let r = d * n..(d + 1) * n;
        match self {
            Block::F32(v) => {
                v[r].copy_from_slice(s);
                if let Some(st) = stored {
                    st.copy_from_slice(s);
                }
            }
            Block::Bf16(v) => {
                let v = &mut v[r];
                for (o, &x) in v.iter_mut().zip(s) {
                    *o = f32_to_bf16(x);
                }
                if let Some(st) = stored {
                    for (o, &b) in st.iter_mut().zip(v.iter()) {
                        *o = bf16_to_f32(b);
                    }
                }
            }
            Block::F16(v) => {
                let v = &mut v[r];
                match rnd {
                    RowRound::Nearest => {
                        for (o, &x) in v.iter_mut().zip(s) {
                            *o = f32_to_f16(x);
                        }
                    }
                    RowRound::Sr {
                        seed,
                        rounds,
                        mapping,
                        offset,
                    } => {
                        // Cache the 4 words of the current group (group_of_4 draws once per 4).
                        let mut group = u64::MAX;
                        let mut words = [0u32; 4];
                        for (i, (o, &x)) in v.iter_mut().zip(s).enumerate() {
                            let e = offset + i as u64;
                            let w = match mapping {
                                SrMapping::WordPerElement => {
                                    philox_from_seed_offset(seed, e, rounds)[0]
                                }
                                SrMapping::GroupOf4 => {
                                    if e / 4 != group {
                                        group = e / 4;
                                        words = philox_from_seed_offset(seed, group, rounds);
                                    }
                                    words[(e % 4) as usize]
                                }
                            };
                            *o = stochastic_round_f16_bits(x, w);
                        }
                    }
                }
                if let Some(st) = stored {
                    for (o, &b) in st.iter_mut().zip(v.iter()) {
                        *o = f16_to_f32(b);
                    }
                }
            }
            Block::I16(q, sc) => {
                let amax = s.iter().fold(0f32, |m, &x| m.max(x.abs()));
                let encode = if amax == 0.0 { 1.0 } else { 32767.0 / amax };
                let decode = 1.0 / encode;
                sc[d] = decode;
                let q = &mut q[r];
                for (o, &x) in q.iter_mut().zip(s) {
                    *o = quantize_i16(x, encode);
                }
                if let Some(st) = stored {
                    for (o, &v) in st.iter_mut().zip(q.iter()) {
                        *o = v as f32 * decode;
                    }
                }
            }
        }
    }

    /// Copies another block of the same dtype and size, raw (bits and scales).
    pub(crate) fn copy_from(&mut self, src: &Block) {
        match (self, src) {
            (Block::F32(a), Block::F32(b)) => a.copy_from_slice(b),
            (Block::Bf16(a), Block::Bf16(b)) | (Block::F16(a), Block::F16(b)) => {
                a.copy_from_slice(b)
            }
            (Block::I16(a, sa), Block::I16(b, sb)) => {
                a.copy_from_slice(b);
                sa.copy_from_slice(sb);
            }
            // Blocks of one call always share a dtype (built from the same StateCache kind).
            _ => unreachable!("state blocks of different dtypes"),
        }
    }

    /// Zero state (int16: q = 0 with decode scale 1, what storing an all-zero row gives).
    pub(crate) fn fill_zero(&mut self) {
        match self {
            Block::F32(v) => v.fill(0.0),
            Block::Bf16(v) | Block::F16(v) => v.fill(0),
            Block::I16(q, s) => {
                q.fill(0);
                s.fill(1.0);
            }
        }
    }
}

fn invalid(msg: String) -> OpError {
    OpError::Invalid { op: OP.into(), msg }
}

/// The same error reported under another op's name (helpers shared with the multi-token op).
pub(crate) fn relabel(e: OpError, op: &'static str) -> OpError {
    match e {
        OpError::Invalid { msg, .. } => OpError::Invalid { op: op.into(), msg },
        OpError::Param { name, msg, .. } => OpError::Param {
            op: op.into(),
            name,
            msg,
        },
        OpError::Input { name, msg, .. } => OpError::Input {
            op: op.into(),
            name,
            msg,
        },
        e => e,
    }
}

/// `dt + dt_bias`, then softplus (`F.softplus`, threshold 20) when asked.
#[inline]
pub(crate) fn effective_dt(dt: f32, bias: Option<f32>, softplus: bool) -> f32 {
    let v = match bias {
        Some(b) => dt + b,
        None => dt,
    };
    if softplus && v <= 20.0 {
        (v as f64).exp().ln_1p() as f32
    } else {
        v
    }
}

/// `exp` of an f32 argument, evaluated in f64 and rounded once to f32 (so it is the correctly
/// rounded f32 exp but for astronomically rare double-rounding ties). The GPU kernels evaluate
/// `exp((double)x)` the same way: libm's `expf` and CUDA's `expf` differ in the last bit, and
/// stochastic rounding of the new state must see bit-identical `s'` on both sides.
#[inline]
pub fn exp_f32(x: f32) -> f32 {
    (x as f64).exp() as f32
}

/// `sum_n a[n]*b[n]` with 8 interleaved fp32 partial sums (see the module doc).
#[inline]
pub(crate) fn dot8(a: &[f32], b: &[f32]) -> f32 {
    let mut p = [0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            p[i] += x[i] * y[i];
        }
    }
    for i in 0..ra.len() {
        p[i] += ra[i] * rb[i];
    }
    ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]))
}

/// Shared per-row arithmetic of the single- and multi-token ops.
pub(crate) struct Core<'a> {
    pub args: &'a SsuArgs<'a>,
    pub dims: SsuDims,
    pub dt_softplus: bool,
}

impl Core<'_> {
    /// Advances row (token row `r`, head `h`, d) in place: `s <- s*dA + (B*dt')*x`.
    #[inline]
    pub(crate) fn advance(&self, r: usize, h: usize, d: usize, s: &mut [f32]) {
        let SsuDims {
            nheads,
            dim,
            dstate,
            ngroups,
            ..
        } = self.dims;
        let a = self.args;
        let bias = a.dt_bias.map(|v| v.at(0, h, d, nheads, dim));
        let dt = effective_dt(a.dt.at(r, h, d, nheads, dim), bias, self.dt_softplus);
        let x = a.x[(r * nheads + h) * dim + d];
        let g = h / (nheads / ngroups);
        let bv = &a.b[(r * ngroups + g) * dstate..][..dstate];
        let a_row: Option<&[f32]> = match a.a {
            AVals::PerHead(v) => {
                let da = exp_f32(v[h] * dt);
                update_uniform(s, da, bv, dt, x);
                None
            }
            AVals::Full(v) => Some(&v[(h * dim + d) * dstate..][..dstate]),
        };
        if let Some(ar) = a_row {
            // A constant along n (how checkpoints store it, broadcast) needs one exp, and
            // gives bit-identical results to evaluating exp per element.
            let a0 = ar[0];
            if ar.iter().all(|v| v.to_bits() == a0.to_bits()) {
                update_uniform(s, exp_f32(a0 * dt), bv, dt, x);
            } else {
                for ((sn, &an), &bn) in s.iter_mut().zip(ar).zip(bv) {
                    *sn = *sn * exp_f32(an * dt) + (bn * dt) * x;
                }
            }
        }
    }

    /// `out` of row (r, h, d) from state row `s`.
    #[inline]
    pub(crate) fn out(&self, r: usize, h: usize, d: usize, s: &[f32]) -> f32 {
        let SsuDims {
            nheads,
            dim,
            dstate,
            ngroups,
            ..
        } = self.dims;
        let a = self.args;
        let g = h / (nheads / ngroups);
        let cv = &a.c[(r * ngroups + g) * dstate..][..dstate];
        let xi = (r * nheads + h) * dim + d;
        let x = a.x[xi];
        let mut o = dot8(s, cv);
        if let Some(dv) = a.d {
            o += x * dv.at(0, h, d, nheads, dim);
        }
        if let Some(z) = a.z {
            let z = z[xi];
            o *= z / (1.0 + (-z).exp());
        }
        o
    }

    /// Checks every operand length against the dims (`rows` token rows, `batch` batch rows).
    pub(crate) fn check(&self, rows: usize, batch: usize) -> Result<(), OpError> {
        let SsuDims {
            nheads,
            dim,
            dstate,
            ngroups,
            ..
        } = self.dims;
        if nheads == 0 || dim == 0 || dstate == 0 || ngroups == 0 {
            return Err(invalid(format!(
                "empty dimension in {:?}; every size must be >= 1",
                self.dims
            )));
        }
        if nheads % ngroups != 0 {
            return Err(invalid(format!(
                "nheads = {nheads} is not a multiple of ngroups = {ngroups}"
            )));
        }
        let a = self.args;
        let want = |name: &str, got: usize, want: usize| {
            if got != want {
                Err(invalid(format!(
                    "'{name}' has {got} elements, expected {want} for {:?}",
                    self.dims
                )))
            } else {
                Ok(())
            }
        };
        want("x", a.x.len(), rows * nheads * dim)?;
        want("dt", a.dt.v.len(), a.dt.expected_len(rows, nheads, dim))?;
        match a.a {
            AVals::PerHead(v) => want("A", v.len(), nheads)?,
            AVals::Full(v) => want("A", v.len(), nheads * dim * dstate)?,
        }
        want("B", a.b.len(), rows * ngroups * dstate)?;
        want("C", a.c.len(), rows * ngroups * dstate)?;
        if let Some(v) = a.d {
            want("D", v.v.len(), v.expected_len(1, nheads, dim))?;
        }
        if let Some(v) = a.dt_bias {
            want("dt_bias", v.v.len(), v.expected_len(1, nheads, dim))?;
        }
        if let Some(z) = a.z {
            want("z", z.len(), rows * nheads * dim)?;
        }
        if let Some(i) = a.state_batch_indices {
            want("state_batch_indices", i.len(), batch)?;
        }
        Ok(())
    }
}

#[inline]
fn update_uniform(s: &mut [f32], da: f32, bv: &[f32], dt: f32, x: f32) {
    for (sn, &bn) in s.iter_mut().zip(bv) {
        *sn = *sn * da + (bn * dt) * x;
    }
}

/// The slot of each batch row (`None` = pad row); rejects out-of-range and repeated slots.
pub fn resolve_slots(
    indices: Option<&[i64]>,
    batch: usize,
    slots: usize,
    pad_slot_id: i64,
) -> Result<Vec<Option<usize>>, OpError> {
    let mut used = vec![false; slots];
    let mut out = Vec::with_capacity(batch);
    for b in 0..batch {
        let s = match indices {
            None => b as i64,
            Some(ix) => ix[b],
        };
        if indices.is_some() && s == pad_slot_id {
            out.push(None);
            continue;
        }
        if s < 0 || s as u64 >= slots as u64 {
            return Err(invalid(if indices.is_some() {
                format!(
                    "state_batch_indices[{b}] = {s} is outside the state cache (0..{slots}) and \
                     is not pad_slot_id = {pad_slot_id}"
                )
            } else {
                format!(
                    "batch row {b} has no state slot: the state holds {slots} slots; pass \
                     state_batch_indices or a state with >= batch slots"
                )
            }));
        }
        let s = s as usize;
        if used[s] {
            return Err(invalid(format!(
                "state_batch_indices[{b}] = {s} repeats a slot already used by another row; \
                 each slot may be updated by one row only"
            )));
        }
        used[s] = true;
        out.push(Some(s));
    }
    Ok(out)
}

/// Takes the (slot, head) blocks of each batch row out of `blocks` (pad rows get `None`).
pub(crate) fn blocks_per_row<'a>(
    blocks: Vec<Block<'a>>,
    slots: &[Option<usize>],
    nheads: usize,
) -> Vec<Option<Block<'a>>> {
    let mut all: Vec<Option<Block<'a>>> = blocks.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len() * nheads);
    for s in slots {
        for h in 0..nheads {
            out.push(s.and_then(|s| all[s * nheads + h].take()));
        }
    }
    out
}

pub(crate) fn check_rounding(cfg: &SsuConfig, cache_is_f16: bool) -> Result<(), OpError> {
    if matches!(cfg.rounding, Rounding::Stochastic { .. }) && !cache_is_f16 {
        return Err(OpError::Param {
            op: OP.into(),
            name: "rounding".into(),
            msg: "stochastic rounding applies to an f16 state only; pass an f16 state or \
                  rounding=nearest"
                .into(),
        });
    }
    Ok(())
}

/// The row rounding of row (slot, h, d) under `rounding` with seed offset `seed_add`.
#[inline]
pub(crate) fn row_round(
    rounding: Rounding,
    seed_add: u64,
    slot: usize,
    h: usize,
    d: usize,
    dims: SsuDims,
) -> RowRound {
    match rounding {
        Rounding::Nearest => RowRound::Nearest,
        Rounding::Stochastic {
            seed,
            rounds,
            mapping,
        } => {
            let (nh, dim, ds) = (dims.nheads as u64, dims.dim as u64, dims.dstate as u64);
            RowRound::Sr {
                seed: seed.wrapping_add(seed_add),
                rounds,
                mapping,
                offset: ((slot as u64 * nh + h as u64) * dim + d as u64) * ds,
            }
        }
    }
}

/// One decode step for every batch row, in place on `state`; writes `out` (batch, nheads, dim).
///
/// `state`: (slots, nheads, dim, dstate) cache; row `b` uses slot `state_batch_indices[b]`
/// (or `b`). Parallel over (batch row, head).
pub fn selective_state_update(
    state: StateCache<'_>,
    args: &SsuArgs<'_>,
    dims: SsuDims,
    cfg: &SsuConfig,
    out: &mut [f32],
) -> Result<(), OpError> {
    let core = Core {
        args,
        dims,
        dt_softplus: cfg.dt_softplus,
    };
    core.check(dims.batch, dims.batch)?;
    check_rounding(cfg, state.is_f16())?;
    let nslots = state.check(dims.dim, dims.dstate, "state")?;
    let SsuDims {
        batch,
        nheads,
        dim,
        dstate,
        ..
    } = dims;
    if out.len() != batch * nheads * dim {
        return Err(invalid(format!(
            "'out' has {} elements, expected batch*nheads*dim = {}",
            out.len(),
            batch * nheads * dim
        )));
    }
    let slots = resolve_slots(args.state_batch_indices, batch, nslots, cfg.pad_slot_id)?;
    let kind = state.kind();
    let rows = blocks_per_row(state.into_blocks(dim, dstate), &slots, nheads);
    let stored_needed = cfg.out_from == OutFrom::StoredState;
    rows.into_par_iter()
        .zip(out.par_chunks_mut(dim))
        .enumerate()
        .for_each_init(
            || (vec![0f32; dstate], vec![0f32; dstate]),
            |(buf, stored), (i, (block, o))| {
                let (b, h) = (i / nheads, i % nheads);
                match block {
                    Some(mut blk) => {
                        let slot = slots[b].unwrap_or(0);
                        for (d, od) in o.iter_mut().enumerate() {
                            blk.load_row(d, buf);
                            core.advance(b, h, d, buf);
                            let rr = row_round(cfg.rounding, 0, slot, h, d, dims);
                            if stored_needed {
                                blk.store_row(d, buf, rr, Some(stored));
                                *od = core.out(b, h, d, stored);
                            } else {
                                blk.store_row(d, buf, rr, None);
                                *od = core.out(b, h, d, buf);
                            }
                        }
                    }
                    None => match cfg.pad_mode {
                        PadMode::ZeroOutput => o.fill(0.0),
                        PadMode::ComputeFromZeroState => {
                            for (d, od) in o.iter_mut().enumerate() {
                                buf.fill(0.0);
                                core.advance(b, h, d, buf);
                                if stored_needed {
                                    round_nearest_as(kind, buf);
                                }
                                *od = core.out(b, h, d, buf);
                            }
                        }
                    },
                }
            },
        );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The CLI entry point: input validation and params (shared with the multi-token op).

/// Inputs of the single- or multi-token op, validated and converted to f32.
pub struct Parsed {
    pub dims: SsuDims,
    /// Tokens per batch row (1 for the single-token op).
    pub t_len: usize,
    pub x: Vec<f32>,
    pub x_shape: Vec<usize>,
    pub x_dtype: DType,
    pub dt: (Vec<f32>, bool),
    pub a: (Vec<f32>, bool),
    pub b: Vec<f32>,
    pub c: Vec<f32>,
    pub d: Option<(Vec<f32>, bool)>,
    pub z: Option<Vec<f32>>,
    pub dt_bias: Option<(Vec<f32>, bool)>,
    pub sbi: Option<Vec<i64>>,
    /// An owned copy of the state (updated in place) and, for int16, its scale.
    pub state: Tensor,
    pub scale: Option<Vec<f32>>,
    /// Shape of `state_scale`: the state's shape without dstate.
    pub scale_shape: Vec<usize>,
}

impl Parsed {
    pub fn args(&self) -> SsuArgs<'_> {
        fn hv(p: &(Vec<f32>, bool)) -> HeadVals<'_> {
            HeadVals {
                v: &p.0,
                per_dim: p.1,
            }
        }
        SsuArgs {
            x: &self.x,
            dt: hv(&self.dt),
            a: if self.a.1 {
                AVals::Full(&self.a.0)
            } else {
                AVals::PerHead(&self.a.0)
            },
            b: &self.b,
            c: &self.c,
            d: self.d.as_ref().map(hv),
            z: self.z.as_deref(),
            dt_bias: self.dt_bias.as_ref().map(hv),
            state_batch_indices: self.sbi.as_deref(),
        }
    }

    /// Moves the owned state (and its int16 scale) out, to be split with [`cache_of`].
    pub(crate) fn take_state(&mut self) -> (Tensor, Option<Vec<f32>>) {
        let state = std::mem::replace(&mut self.state, Tensor::from_f32(&[0], vec![]));
        (state, self.scale.take())
    }

    /// The `out` output: `out` with x's shape and dtype.
    pub(crate) fn out_tensor(&self, out: &[f32]) -> Tensor {
        Tensor::from_f32_as(&self.x_shape, out, self.x_dtype)
    }

    /// The `state_scale` output (int16 state only).
    pub(crate) fn scale_tensor(&self, scale: Vec<f32>) -> Tensor {
        Tensor::from_f32(&self.scale_shape, scale)
    }
}

/// The optional `state_batch_indices` input spec of the single- and multi-token ops.
pub(crate) fn state_batch_indices_arg() -> ArgSpec {
    ArgSpec::opt(
        "state_batch_indices",
        "(batch,)",
        "i32|i64",
        "state slot of each row; pad_slot_id marks padding",
    )
}

/// Splits an owned state tensor (+ int16 scale) into a mutable [`StateCache`].
pub(crate) fn cache_of<'a>(
    t: &'a mut Tensor,
    scale: &'a mut Option<Vec<f32>>,
    op: &'static str,
    name: &str,
) -> Result<StateCache<'a>, OpError> {
    let dtype = t.dtype();
    let err = |msg: String| OpError::Input {
        op: op.into(),
        name: name.into(),
        msg,
    };
    Ok(match (&mut t.data, scale) {
        (Data::F32(v), _) => StateCache::F32(v),
        (Data::BF16(v), _) => StateCache::Bf16(v),
        (Data::F16(v), _) => StateCache::F16(v),
        (Data::I16(v), Some(s)) => StateCache::I16 { q: v, scale: s },
        (Data::I16(_), None) => {
            return Err(err(
                "an int16 state needs its scale; pass 'state_scale'".into()
            ))
        }
        _ => {
            return Err(err(format!(
                "dtype {dtype} not supported; use f32, bf16, f16 or i16 (with state_scale)"
            )))
        }
    })
}

fn float_any<'a>(inp: &Inputs<'a>, name: &str) -> Result<(&'a Tensor, Vec<f32>), OpError> {
    let t = inp.req(name)?;
    inp.float(name, t.rank())
}

fn opt_float_any<'a>(
    inp: &Inputs<'a>,
    name: &str,
) -> Result<Option<(&'a Tensor, Vec<f32>)>, OpError> {
    match inp.get(name) {
        None => Ok(None),
        Some(t) => inp.float(name, t.rank()).map(Some),
    }
}

fn pat(lead: &[&str], tail: &[&str]) -> String {
    format!("({})", [lead, tail].concat().join(", "))
}

/// Validates the SSU inputs. `multi`: x is (batch, T, nheads, dim) rather than (batch, nheads, dim).
pub fn parse_inputs(inp: &Inputs, multi: bool) -> Result<Parsed, OpError> {
    let state = inp.req("state")?;
    inp.dtype(
        "state",
        state,
        &[DType::F32, DType::BF16, DType::F16, DType::I16],
    )?;
    let headless = !multi && state.rank() == 3;
    if !headless {
        inp.rank("state", state, 4).map_err(|_| {
            inp.err(
                "state",
                format!(
                    "expected (cache, nheads, dim, dstate){}, got shape {:?}",
                    if multi {
                        ""
                    } else {
                        " or (cache, dim, dstate)"
                    },
                    state.shape
                ),
            )
        })?;
    }
    let ss = &state.shape;
    let (nslots, nheads, dim, dstate) = if headless {
        (ss[0], 1, ss[1], ss[2])
    } else {
        (ss[0], ss[1], ss[2], ss[3])
    };
    let lead_names: &[&str] = if multi { &["batch", "T"] } else { &["batch"] };
    let lead = lead_names.len();
    let head_names: &[&str] = if headless {
        &["dim"]
    } else {
        &["nheads", "dim"]
    };
    let head_tail: Vec<usize> = if headless {
        vec![dim]
    } else {
        vec![nheads, dim]
    };

    let (xt, x) = float_any(inp, "x")?;
    if xt.rank() != lead + head_tail.len() {
        return Err(inp.err(
            "x",
            format!(
                "expected {} (from state {:?}), got shape {:?}",
                pat(lead_names, head_names),
                ss,
                xt.shape
            ),
        ));
    }
    let lead_dims = xt.shape[..lead].to_vec();
    let with_lead = |tail: &[usize]| [lead_dims.as_slice(), tail].concat();
    inp.shape(
        "x",
        xt,
        &with_lead(&head_tail),
        &pat(lead_names, head_names),
    )?;
    let batch = lead_dims[0];
    let t_len = if multi { lead_dims[1] } else { 1 };

    let (dtt, dt) = float_any(inp, "dt")?;
    let dt_per_dim = if dtt.shape == xt.shape {
        true
    } else if !headless && dtt.shape == with_lead(&[nheads]) {
        false
    } else {
        return Err(inp.err(
            "dt",
            format!(
                "shape {:?} is neither {} = {:?} nor {} = {:?}",
                dtt.shape,
                pat(lead_names, head_names),
                xt.shape,
                pat(lead_names, &["nheads"]),
                with_lead(&[nheads])
            ),
        ));
    };

    let (at, a) = float_any(inp, "A")?;
    let a_full = if headless {
        inp.shape("A", at, &[dim, dstate], "(dim, dstate)")?;
        true
    } else if at.shape == [nheads] {
        false
    } else if at.shape == [nheads, dim, dstate] {
        true
    } else {
        return Err(inp.err(
            "A",
            format!(
                "shape {:?} is neither (nheads,) = [{nheads}] nor (nheads, dim, dstate) = {:?}",
                at.shape,
                [nheads, dim, dstate]
            ),
        ));
    };

    let (bt, b) = float_any(inp, "B")?;
    let ngroups = if headless {
        inp.shape(
            "B",
            bt,
            &with_lead(&[dstate]),
            &pat(lead_names, &["dstate"]),
        )?;
        1
    } else {
        let g = if bt.rank() == lead + 2 {
            bt.shape[lead]
        } else {
            0
        };
        inp.shape(
            "B",
            bt,
            &with_lead(&[g.max(1), dstate]),
            &pat(lead_names, &["ngroups", "dstate"]),
        )?;
        if nheads % g != 0 {
            return Err(inp.err(
                "B",
                format!("ngroups = {g} does not divide nheads = {nheads}"),
            ));
        }
        g
    };
    let (ct, c) = float_any(inp, "C")?;
    inp.shape("C", ct, &bt.shape, "the shape of B")?;

    let per_head = |name: &str| -> Result<Option<(Vec<f32>, bool)>, OpError> {
        let Some((t, v)) = opt_float_any(inp, name)? else {
            return Ok(None);
        };
        let per_dim = if headless {
            inp.shape(name, t, &[dim], "(dim,)")?;
            true
        } else if t.shape == [nheads, dim] {
            true
        } else if t.shape == [nheads] {
            false
        } else {
            return Err(inp.err(
                name,
                format!(
                    "shape {:?} is neither (nheads, dim) = {:?} nor (nheads,) = [{nheads}]",
                    t.shape,
                    [nheads, dim]
                ),
            ));
        };
        Ok(Some((v, per_dim)))
    };
    let d = per_head("D")?;
    let dt_bias = per_head("dt_bias")?;

    let z = match opt_float_any(inp, "z")? {
        None => None,
        Some((t, v)) => {
            inp.shape("z", t, &xt.shape, "the shape of x")?;
            Some(v)
        }
    };
    let sbi = match inp.opt_int("state_batch_indices")? {
        None => None,
        Some((t, v)) => {
            inp.shape("state_batch_indices", t, &[batch], "(batch,)")?;
            Some(v)
        }
    };
    let scale_shape = ss[..ss.len() - 1].to_vec();
    let scale = match (state.dtype(), inp.get("state_scale")) {
        (DType::I16, None) => {
            return Err(inp.err(
                "state_scale",
                format!(
                    "an int16 state needs its per-row decode scale: pass 'state_scale' f32 of \
                     shape {scale_shape:?}"
                ),
            ))
        }
        (DType::I16, Some(t)) => {
            inp.dtype("state_scale", t, &[DType::F32])?;
            inp.shape(
                "state_scale",
                t,
                &scale_shape,
                "state's shape without dstate",
            )?;
            Some(t.to_f32_vec())
        }
        (dt, Some(_)) => {
            return Err(inp.err(
                "state_scale",
                format!("only an int16 state takes a scale; this state is {dt}"),
            ))
        }
        (_, None) => None,
    };
    for (n, v) in [
        ("state", nslots),
        ("dim", dim),
        ("dstate", dstate),
        ("nheads", nheads),
    ] {
        if v == 0 {
            return Err(inp.invalid(format!("{n} is 0 in state {ss:?}; sizes must be >= 1")));
        }
    }
    Ok(Parsed {
        dims: SsuDims {
            batch,
            nheads,
            dim,
            dstate,
            ngroups,
        },
        t_len,
        x,
        x_shape: xt.shape.clone(),
        x_dtype: xt.dtype(),
        dt: (dt, dt_per_dim),
        a: (a, a_full),
        b,
        c,
        d,
        z,
        dt_bias,
        sbi,
        state: state.clone(),
        scale,
        scale_shape,
    })
}

/// Params shared by both SSU ops.
pub(crate) fn common_params() -> Vec<ParamSpec> {
    vec![
        ParamSpec::new(
            "dt_softplus",
            ParamKind::Bool,
            Some("false"),
            "apply softplus (threshold 20) to dt + dt_bias",
        ),
        ParamSpec::new(
            "pad_slot_id",
            ParamKind::Int,
            Some("-1"),
            "a state_batch_indices entry equal to this marks a padded row",
        ),
        ParamSpec::new(
            "pad_mode",
            ParamKind::Enum(&["zero_output", "compute_from_zero_state"]),
            Some("zero_output"),
            "padded rows: zero output (mamba, causal-conv1d) or output from a zero state \
             (FlashInfer); the cache is never written",
        ),
        ParamSpec::new(
            "out_from",
            ParamKind::Enum(&["unrounded_state", "stored_state"]),
            Some("unrounded_state"),
            "out from the fp32 new state (kernels) or the state as stored (mamba's ref)",
        ),
        ParamSpec::new(
            "rounding",
            ParamKind::Enum(&["nearest", "stochastic"]),
            Some("nearest"),
            "state rounding; stochastic = SPEC.md SR with Philox bits, f16 state only",
        ),
        ParamSpec::new(
            "philox_rounds",
            ParamKind::Int,
            Some("10"),
            "Philox-4x32 rounds for stochastic rounding (Nemotron recipes use 5)",
        ),
        ParamSpec::new(
            "seed",
            ParamKind::Int,
            Some("0"),
            "Philox key (seed lo 32, seed hi 32) for stochastic rounding",
        ),
        ParamSpec::new(
            "sr_mapping",
            ParamKind::Enum(&["group_of_4", "word_per_element"]),
            Some("group_of_4"),
            "Philox word per element, o = ((slot*nheads + h)*dim + d)*dstate + n: group_of_4 = \
             word o%4 of philox(seed, o/4); word_per_element = word 0 of philox(seed, o)",
        ),
    ]
}

pub fn parse_config(op: &'static str, p: &Params) -> Result<SsuConfig, OpError> {
    let bad = |name: &str, msg: String| OpError::Param {
        op: op.into(),
        name: name.into(),
        msg,
    };
    let seed = p.int("seed")?;
    let seed = u64::try_from(seed).map_err(|_| bad("seed", format!("must be >= 0, got {seed}")))?;
    let rounds = p.usize("philox_rounds")?;
    if rounds > 64 {
        return Err(bad(
            "philox_rounds",
            format!("{rounds} is too many; Philox uses 7 to 10 rounds (at most 64 accepted)"),
        ));
    }
    let rounds = rounds as u32;
    let mapping = match p.str("sr_mapping")? {
        "word_per_element" => SrMapping::WordPerElement,
        _ => SrMapping::GroupOf4,
    };
    Ok(SsuConfig {
        dt_softplus: p.bool("dt_softplus")?,
        pad_slot_id: p.int("pad_slot_id")?,
        pad_mode: match p.str("pad_mode")? {
            "compute_from_zero_state" => PadMode::ComputeFromZeroState,
            _ => PadMode::ZeroOutput,
        },
        out_from: match p.str("out_from")? {
            "stored_state" => OutFrom::StoredState,
            _ => OutFrom::UnroundedState,
        },
        rounding: match p.str("rounding")? {
            "stochastic" => Rounding::Stochastic {
                seed,
                rounds,
                mapping,
            },
            _ => Rounding::Nearest,
        },
    })
}

/// The op description.
pub fn def() -> OpDef {
    OpDef {
        name: OP,
        summary:
            "Mamba-2 decode step: s' = s*exp(A*dt) + B*dt*x; out = C.s' + D*x, gated by silu(z)",
        inputs: vec![
            ArgSpec::req(
                "state",
                "(cache, nheads, dim, dstate) | (cache, dim, dstate)",
                "f32|bf16|f16|i16",
                "SSM state cache; i16 needs state_scale",
            ),
            ArgSpec::req("x", "(batch, nheads, dim)", "f32|bf16|f16", "input"),
            ArgSpec::req(
                "dt",
                "(batch, nheads, dim) | (batch, nheads)",
                "f32|bf16|f16",
                "time step (per head: broadcast over dim)",
            ),
            ArgSpec::req(
                "A",
                "(nheads,) | (nheads, dim, dstate)",
                "f32|bf16|f16",
                "decay (negative)",
            ),
            ArgSpec::req(
                "B",
                "(batch, ngroups, dstate)",
                "f32|bf16|f16",
                "input projection",
            ),
            ArgSpec::req(
                "C",
                "(batch, ngroups, dstate)",
                "f32|bf16|f16",
                "output projection",
            ),
            ArgSpec::opt(
                "D",
                "(nheads, dim) | (nheads,)",
                "f32|bf16|f16",
                "skip connection",
            ),
            ArgSpec::opt(
                "z",
                "(batch, nheads, dim)",
                "f32|bf16|f16",
                "gate: out *= silu(z)",
            ),
            ArgSpec::opt(
                "dt_bias",
                "(nheads, dim) | (nheads,)",
                "f32|bf16|f16",
                "added to dt",
            ),
            state_batch_indices_arg(),
            ArgSpec::opt(
                "state_scale",
                "(cache, nheads, dim)",
                "f32",
                "int16 state only: per-row decode scale (s = q * scale)",
            ),
        ],
        params: common_params(),
        outputs: vec![
            ArgSpec::req("out", "(batch, nheads, dim)", "x's dtype", "output"),
            ArgSpec::req(
                "state",
                "(cache, nheads, dim, dstate)",
                "state's dtype",
                "updated cache (pad and unused slots unchanged)",
            ),
            ArgSpec::opt(
                "state_scale",
                "(cache, nheads, dim)",
                "f32",
                "int16 state only: updated decode scales",
            ),
        ],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let inp = Inputs::new(OP, inputs);
    let cfg = parse_config(OP, p)?;
    let mut parsed = parse_inputs(&inp, false)?;
    let dims = parsed.dims;
    let mut out = vec![0f32; dims.batch * dims.nheads * dims.dim];
    let (mut state, mut scale) = parsed.take_state();
    {
        let cache = cache_of(&mut state, &mut scale, OP, "state")?;
        selective_state_update(cache, &parsed.args(), dims, &cfg, &mut out)?;
    }
    let mut m = op::outputs([("out", parsed.out_tensor(&out)), ("state", state)]);
    if let Some(s) = scale {
        m.insert("state_scale".into(), parsed.scale_tensor(s));
    }
    Ok(m)
}
