//! The decode engine: batch-1 decode steps of the backbone with every activation, recurrent
//! state and KV cache kept on one device between ops and between steps. Only the token id goes
//! in (its embedding row, hidden floats, written before the step begins), and per step the
//! logits come out; per MoE layer the router's top-k (k ids and weights) comes out too unless
//! the device keeps it ([`DecodeDevice::moe_routed`]). Every step runs the same ops on the same
//! buffers ([`DecodeDevice::begin_step`] / [`DecodeDevice::end_step`] bracket them), so a
//! device may record a step once and replay it (the GPU device's CUDA graphs).
//!
//! [`Model::forward`] with a GPU [`super::ModelKernels`] moves every op's operands up and its
//! result back (session 6: 20.4 ms per Super decode step against a 0.71 ms HBM floor, most of
//! it per-op transfers and synchronisation). The engine runs the same network, op for op, in
//! the order [`Model::forward`] runs it, against [`DecodeDevice`]: [`CpuDevice`] (the
//! reference functions on host buffers: the engine's orchestration is tested against
//! [`Model::forward`] on the CPU, bit for bit) and the GPU crate's device (`gpu::engine`, the
//! model's kernels on device buffers).
//!
//! Scope: the backbone's decode (Mamba, attention, MLP and MoE blocks; Mamba decode without a
//! dt clamp, as [`Model::forward`]'s decode), from a [`Cache`] a prefill filled. Prefill, MTP
//! and verification stay with [`Model::forward`].

use super::config::LayerKind;
use super::kernels::{
    self, mamba_decode_host, AttnGeometry, CpuKernels, LayerState, MambaStep, Route, SsmDims,
    SsmParams,
};
use super::nemotron::{Cache, Mixer, MlpW, Model};
use super::weights::Mat;
use super::ModelError;
use crate::ops::noaux_tc_router::RouterConfig;

/// A buffer and an element offset into it.
pub type At<'a, B> = (&'a B, usize);

/// The device a [`DecodeEngine`] runs on: f32 buffers and the ops of a decode step on them.
/// Every op has the numerics of the CPU reference function it names; offsets and counts are
/// in f32 elements; output ranges never overlap inputs.
pub trait DecodeDevice {
    type Buf;
    /// `n` values of unspecified contents (a GPU poisons them).
    fn alloc(&self, n: usize) -> Result<Self::Buf, ModelError>;
    fn upload(&self, v: &[f32]) -> Result<Self::Buf, ModelError>;
    /// Values `off..off + n` of `b` (waits for the queued work).
    fn download(&self, b: &Self::Buf, off: usize, n: usize) -> Result<Vec<f32>, ModelError>;
    /// `b[0..v.len()] = v` (host to device; a step's input, written before
    /// [`DecodeDevice::begin_step`]).
    fn write(&self, b: &mut Self::Buf, v: &[f32]) -> Result<(), ModelError>;
    /// A decode step at position `pos` begins (its input written): every op until
    /// [`DecodeDevice::end_step`] belongs to it, and the step's ops and buffers are the same
    /// every step. A device may record them once and replay them (CUDA graphs).
    fn begin_step(&self, _pos: usize) -> Result<(), ModelError> {
        Ok(())
    }
    /// The step's ops are all queued (its logits are downloaded next).
    fn end_step(&self) -> Result<(), ModelError> {
        Ok(())
    }
    /// Host-side time so far, in seconds per part of a step (e.g. the GPU device's uploads,
    /// graph launch, wait and download), for the decode bench; none by default.
    fn host_times(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
    /// Counts that say how the device runs a step (e.g. the GPU device's graph edges), for
    /// the decode bench; none by default.
    fn launch_stats(&self) -> Vec<(&'static str, usize)> {
        Vec::new()
    }
    /// `y[0..rows] = W · x[off..off + cols] (+ bias)` ([`crate::model::linear::linear`], one row).
    fn linear(
        &self,
        x: At<'_, Self::Buf>,
        w: &Mat,
        bias: Option<&[f32]>,
        y: &mut Self::Buf,
    ) -> Result<(), ModelError>;
    /// [`kernels::rmsnorm`] of one row of `w.len()` values.
    fn rmsnorm(
        &self,
        x: &Self::Buf,
        w: &[f32],
        eps: f32,
        y: &mut Self::Buf,
    ) -> Result<(), ModelError>;
    /// [`kernels::gated_rmsnorm`] of one row of `w.len()` values.
    fn gated_rmsnorm(
        &self,
        x: &Self::Buf,
        z: At<'_, Self::Buf>,
        w: &[f32],
        group: usize,
        eps: f32,
        y: &mut Self::Buf,
    ) -> Result<(), ModelError>;
    /// `y[i] = relu(x[i])²`, i < n.
    fn relu2(&self, x: &Self::Buf, y: &mut Self::Buf, n: usize) -> Result<(), ModelError>;
    /// `y[i] = y[i] + a * x[off + i]`, i < n (f32, the product rounded before the add).
    fn axpy(
        &self,
        y: &mut Self::Buf,
        a: f32,
        x: At<'_, Self::Buf>,
        n: usize,
    ) -> Result<(), ModelError>;
    /// `y[0..rows] += W · relu²(x[0..cols]) (+ bias)` (a ReLU² MLP's down projection added
    /// into `y`): by default [`DecodeDevice::relu2`] into `r`, [`DecodeDevice::linear`] into
    /// `t`, [`DecodeDevice::axpy`] of `t` into `y` with a = 1. A device may do it in one
    /// kernel with the same bits.
    fn relu2_linear_add(
        &self,
        x: &Self::Buf,
        w: &Mat,
        bias: Option<&[f32]>,
        r: &mut Self::Buf,
        t: &mut Self::Buf,
        y: &mut Self::Buf,
    ) -> Result<(), ModelError> {
        relu2_linear_add_unfused(self, x, w, bias, r, t, y)
    }
    /// `y[i] = v`, i < n.
    fn fill(&self, y: &mut Self::Buf, v: f32, n: usize) -> Result<(), ModelError>;
    /// The residual add then the next norm: `h[i] = h[i] + 1 * x[off + i]` (i < w.len(), as
    /// [`DecodeDevice::axpy`]), then `y = rmsnorm(h, w)` ([`DecodeDevice::rmsnorm`]). A device
    /// may fuse the two (the same bits); the default runs them one after the other.
    fn add_rmsnorm(
        &self,
        h: &mut Self::Buf,
        x: At<'_, Self::Buf>,
        w: &[f32],
        eps: f32,
        y: &mut Self::Buf,
    ) -> Result<(), ModelError> {
        self.axpy(h, 1.0, x, w.len())?;
        self.rmsnorm(h, w, eps, y)
    }
    /// `dst[dst_off + i] = x[off + i]`, i < n.
    fn copy(
        &self,
        x: At<'_, Self::Buf>,
        dst: &mut Self::Buf,
        dst_off: usize,
        n: usize,
    ) -> Result<(), ModelError>;
    /// One Mamba decode step ([`kernels::mamba_decode_host`]): conv update + SiLU of xBC
    /// (conv_dim values at `xbc`), the state update with the raw dt (nheads at `dt`); y
    /// (nheads*headdim) into `y`; `conv` (conv_dim, k-1) and `ssm` (nheads, headdim, dstate)
    /// updated in place.
    #[allow(clippy::too_many_arguments)]
    fn mamba_step(
        &self,
        conv: &mut Self::Buf,
        ssm: &mut Self::Buf,
        m: &MambaStep<'_>,
        xbc: At<'_, Self::Buf>,
        dt: At<'_, Self::Buf>,
        y: &mut Self::Buf,
    ) -> Result<(), ModelError>;
    /// [`kernels::causal_attention`] of one query row at position `p0` over keys / values
    /// rows `0..=p0` of the caches.
    fn attention(
        &self,
        q: &Self::Buf,
        keys: &Self::Buf,
        vals: &Self::Buf,
        p0: usize,
        g: AttnGeometry,
        out: &mut Self::Buf,
    ) -> Result<(), ModelError>;
    /// Appends position `pos`'s key and value rows (`kvd` values each) to the caches: rows
    /// `pos` of `k` and `v`.
    #[allow(clippy::too_many_arguments)]
    fn kv_append(
        &self,
        kn: &Self::Buf,
        vn: &Self::Buf,
        k: &mut Self::Buf,
        v: &mut Self::Buf,
        pos: usize,
        kvd: usize,
    ) -> Result<(), ModelError> {
        self.copy((kn, 0), k, pos * kvd, kvd)?;
        self.copy((vn, 0), v, pos * kvd, kvd)
    }
    /// A MoE layer's routing and routed experts: [`DecodeDevice::route`] of `logits`, then
    /// [`DecodeDevice::routed_experts`] into `acc`. A device may keep the top-k on the device.
    #[allow(clippy::too_many_arguments)]
    fn moe_routed(
        &self,
        logits: &Self::Buf,
        bias: &[f32],
        cfg: &RouterConfig,
        lat: &Self::Buf,
        experts: &[(Mat, Mat)],
        lat_n: usize,
        h: &mut Self::Buf,
        r: &mut Self::Buf,
        acc: &mut Self::Buf,
    ) -> Result<(), ModelError> {
        let (ids, wts) = self.route(logits, bias, cfg)?;
        self.routed_experts(lat, &ids, &wts, experts, lat_n, h, r, acc)
    }
    /// The routed experts of one token (`moe_finalize` of their outputs):
    /// `acc[0..lat_n] = Σ_j wts[j] · down_j(relu²(up_j(lat)))` over the slots in order, from
    /// zero, each product rounded before its add; `(up_j, down_j) = experts[ids[j]]`. `h` and
    /// `r` are scratch of at least the experts' width. The default runs the ops one slot at a
    /// time; a device may batch the slots (same numbers).
    #[allow(clippy::too_many_arguments)]
    fn routed_experts(
        &self,
        lat: &Self::Buf,
        ids: &[usize],
        wts: &[f32],
        experts: &[(Mat, Mat)],
        lat_n: usize,
        h: &mut Self::Buf,
        r: &mut Self::Buf,
        acc: &mut Self::Buf,
    ) -> Result<(), ModelError> {
        default_routed_experts(self, lat, ids, wts, experts, lat_n, h, r, acc)
    }
    /// [`kernels::route`] of one row of `bias.len()` logits: the top-k ids and weights.
    fn route(
        &self,
        logits: &Self::Buf,
        bias: &[f32],
        cfg: &RouterConfig,
    ) -> Result<Route, ModelError>;
}

/// [`DecodeDevice::routed_experts`] one slot at a time (its default; devices that batch the
/// slots fall back to it where they cannot).
#[allow(clippy::too_many_arguments)]
pub fn default_routed_experts<D: DecodeDevice + ?Sized>(
    dev: &D,
    lat: &D::Buf,
    ids: &[usize],
    wts: &[f32],
    experts: &[(Mat, Mat)],
    lat_n: usize,
    h: &mut D::Buf,
    r: &mut D::Buf,
    acc: &mut D::Buf,
) -> Result<(), ModelError> {
    dev.fill(acc, 0.0, lat_n)?;
    for (&e, &wt) in ids.iter().zip(wts) {
        let (up, down) = experts.get(e).ok_or_else(|| {
            ModelError::Op(format!("route chose expert {e} of {}", experts.len()))
        })?;
        dev.linear((lat, 0), up, None, h)?;
        dev.relu2(h, r, up.rows())?;
        dev.linear((r, 0), down, None, h)?;
        dev.axpy(acc, wt, (h, 0), lat_n)?;
    }
    Ok(())
}

/// The CPU reference as a [`DecodeDevice`]: host vectors and the reference functions.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuDevice;

impl DecodeDevice for CpuDevice {
    type Buf = Vec<f32>;
    fn alloc(&self, n: usize) -> Result<Vec<f32>, ModelError> {
        // A value no op produces from finite data: a read of an unwritten entry shows.
        Ok(vec![f32::NAN; n])
    }
    fn upload(&self, v: &[f32]) -> Result<Vec<f32>, ModelError> {
        Ok(v.to_vec())
    }
    fn download(&self, b: &Vec<f32>, off: usize, n: usize) -> Result<Vec<f32>, ModelError> {
        b.get(off..off + n)
            .map(<[f32]>::to_vec)
            .ok_or_else(|| range_err("download", off, n, b.len()))
    }
    fn write(&self, b: &mut Vec<f32>, v: &[f32]) -> Result<(), ModelError> {
        put(b, 0, v, "write")
    }
    fn linear(
        &self,
        x: At<'_, Vec<f32>>,
        w: &Mat,
        bias: Option<&[f32]>,
        y: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let xs = slice(x, w.cols(), "linear x")?;
        let out = super::linear::linear(xs, 1, w, bias);
        put(y, 0, &out, "linear y")
    }
    fn rmsnorm(
        &self,
        x: &Vec<f32>,
        w: &[f32],
        eps: f32,
        y: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let out = kernels::rmsnorm(slice((x, 0), w.len(), "rmsnorm x")?, w, eps)?;
        put(y, 0, &out, "rmsnorm y")
    }
    fn gated_rmsnorm(
        &self,
        x: &Vec<f32>,
        z: At<'_, Vec<f32>>,
        w: &[f32],
        group: usize,
        eps: f32,
        y: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let n = w.len();
        let out = kernels::gated_rmsnorm(
            slice((x, 0), n, "gated_rmsnorm x")?,
            slice(z, n, "gated_rmsnorm z")?,
            w,
            group,
            eps,
        )?;
        put(y, 0, &out, "gated_rmsnorm y")
    }
    fn relu2(&self, x: &Vec<f32>, y: &mut Vec<f32>, n: usize) -> Result<(), ModelError> {
        let out = kernels::relu2(slice((x, 0), n, "relu2 x")?);
        put(y, 0, &out, "relu2 y")
    }
    fn axpy(
        &self,
        y: &mut Vec<f32>,
        a: f32,
        x: At<'_, Vec<f32>>,
        n: usize,
    ) -> Result<(), ModelError> {
        let xs = slice(x, n, "axpy x")?;
        let ys = y
            .get_mut(..n)
            .ok_or_else(|| ModelError::Op(format!("axpy: y is shorter than {n}")))?;
        for (o, v) in ys.iter_mut().zip(xs) {
            *o += a * v;
        }
        Ok(())
    }
    fn fill(&self, y: &mut Vec<f32>, v: f32, n: usize) -> Result<(), ModelError> {
        y.get_mut(..n)
            .ok_or_else(|| ModelError::Op(format!("fill: y is shorter than {n}")))?
            .fill(v);
        Ok(())
    }
    fn copy(
        &self,
        x: At<'_, Vec<f32>>,
        dst: &mut Vec<f32>,
        dst_off: usize,
        n: usize,
    ) -> Result<(), ModelError> {
        let xs = slice(x, n, "copy x")?.to_vec();
        put(dst, dst_off, &xs, "copy dst")
    }
    fn mamba_step(
        &self,
        conv: &mut Vec<f32>,
        ssm: &mut Vec<f32>,
        m: &MambaStep<'_>,
        xbc: At<'_, Vec<f32>>,
        dt: At<'_, Vec<f32>>,
        y: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let xs = slice(xbc, m.conv_dim, "mamba xbc")?;
        let dts = slice(dt, m.dims.nheads, "mamba dt")?;
        let out = mamba_decode_host(&CpuKernels, conv, ssm, m, xs, dts)?;
        put(y, 0, &out, "mamba y")
    }
    fn attention(
        &self,
        q: &Vec<f32>,
        keys: &Vec<f32>,
        vals: &Vec<f32>,
        p0: usize,
        g: AttnGeometry,
        out: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let kv = (p0 + 1) * g.nkv * g.hd;
        let (qs, ks, vs) = (
            slice((q, 0), g.nq * g.hd, "attention q")?,
            slice((keys, 0), kv, "attention keys")?,
            slice((vals, 0), kv, "attention values")?,
        );
        kernels::check_attention(qs, ks, vs, p0, g)?;
        let o = kernels::causal_attention(qs, ks, vs, p0, g);
        put(out, 0, &o, "attention out")
    }
    fn route(
        &self,
        logits: &Vec<f32>,
        bias: &[f32],
        cfg: &RouterConfig,
    ) -> Result<Route, ModelError> {
        let l = slice((logits, 0), bias.len(), "router logits")?;
        kernels::route(l, bias, 1, cfg)?
            .pop()
            .ok_or_else(|| ModelError::Op("route: no row".into()))
    }
}

fn range_err(what: &str, off: usize, n: usize, len: usize) -> ModelError {
    ModelError::Op(format!(
        "{what}: values {off}..{} of a {len}-value buffer",
        off + n
    ))
}

fn slice<'a>((b, off): At<'a, Vec<f32>>, n: usize, what: &str) -> Result<&'a [f32], ModelError> {
    b.get(off..off + n)
        .ok_or_else(|| range_err(what, off, n, b.len()))
}

fn put(y: &mut [f32], off: usize, v: &[f32], what: &str) -> Result<(), ModelError> {
    let len = y.len();
    y.get_mut(off..off + v.len())
        .ok_or_else(|| range_err(what, off, v.len(), len))?
        .copy_from_slice(v);
    Ok(())
}

/// A layer's decode state on the device.
enum DevState<B> {
    Mamba {
        conv: B,
        ssm: B,
    },
    /// keys, values: `cap` rows of kv_heads*head_dim
    Attention {
        k: B,
        v: B,
    },
    None,
}

/// Scratch buffers of one step (allocated once).
struct Scratch<B> {
    /// the residual stream (hidden)
    h: B,
    /// the normed block input (hidden)
    xn: B,
    /// the mixer's output (hidden)
    mix: B,
    /// the widest intermediate of a mixer (in_proj, q / k / v, MLP up, router logits, ...)
    a: B,
    b: B,
    c: B,
    d: B,
    e: B,
    logits: B,
}

/// Batch-1 decode on a [`DecodeDevice`] (module doc). Built from a prefilled [`Cache`]; every
/// [`DecodeEngine::step`] takes one token and returns its logits.
pub struct DecodeEngine<'m, D: DecodeDevice> {
    model: &'m Model,
    dev: D,
    states: Vec<DevState<D::Buf>>,
    s: Scratch<D::Buf>,
    /// positions consumed (the cache's `seen`)
    seen: usize,
    /// KV rows the attention caches hold
    cap: usize,
}

impl<'m, D: DecodeDevice> DecodeEngine<'m, D> {
    /// Uploads the cache's states (Mamba conv windows and SSM states, the KV rows with room for
    /// `max_new` more positions) and allocates the step's buffers.
    pub fn new(
        model: &'m Model,
        dev: D,
        cache: &Cache,
        max_new: usize,
    ) -> Result<DecodeEngine<'m, D>, ModelError> {
        let c = &model.cfg;
        if cache.pending.is_some() {
            return Err(ModelError::Input(
                "decode engine: the cache has a verification pass pending; promote it first".into(),
            ));
        }
        if cache.seen == 0 || cache.layers.len() != model.layers.len() {
            return Err(ModelError::Input(format!(
                "decode engine: needs a cache a prefill filled ({} positions seen, {} layers \
                 for a {}-layer model)",
                cache.seen,
                cache.layers.len(),
                model.layers.len()
            )));
        }
        let (lo, hi) = c.time_step_limit;
        if lo > 0.0 || hi.is_finite() {
            return Err(ModelError::Input(format!(
                "decode engine: time_step_limit ({lo}, {hi}) is not supported in decode (as \
                 Model::forward): use [0, inf]"
            )));
        }
        let kvd = c.num_key_value_heads * c.head_dim;
        let cap = cache.seen + max_new;
        let mut states = Vec::with_capacity(cache.layers.len());
        for (li, st) in cache.layers.iter().enumerate() {
            let host;
            let st = match st {
                LayerState::MambaResident(r) => {
                    let (conv, ssm) = r.download()?;
                    host = LayerState::Mamba { conv, ssm };
                    &host
                }
                other => other,
            };
            states.push(match (st, model.layers[li].kind) {
                (LayerState::Mamba { conv, ssm }, LayerKind::Mamba) => DevState::Mamba {
                    conv: dev.upload(conv)?,
                    ssm: dev.upload(ssm)?,
                },
                (LayerState::Attention { k, v }, LayerKind::Attention) => {
                    if k.len() != cache.seen * kvd || v.len() != k.len() {
                        return Err(ModelError::Input(format!(
                            "decode engine: layer {li} caches {} key values for {} positions \
                             of {kvd}",
                            k.len(),
                            cache.seen
                        )));
                    }
                    let pad = |x: &[f32]| {
                        let mut p = x.to_vec();
                        p.resize(cap * kvd, 0.0);
                        p
                    };
                    DevState::Attention {
                        k: dev.upload(&pad(k))?,
                        v: dev.upload(&pad(v))?,
                    }
                }
                (LayerState::Stateless, LayerKind::Mlp | LayerKind::Moe) => DevState::None,
                _ => {
                    return Err(ModelError::Input(format!(
                        "decode engine: layer {li} ({}) has a cache of another kind",
                        model.layers[li].kind.name()
                    )))
                }
            });
        }
        let widest = model
            .layers
            .iter()
            .map(|b| match &b.mixer {
                Mixer::Mamba(w) => w.in_proj.rows().max(c.d_inner()),
                Mixer::Attention(w) => w.q.rows().max(w.k.rows()).max(w.v.rows()),
                Mixer::Mlp(w) => w.up.rows(),
                Mixer::Moe(w) => {
                    let e = w
                        .experts
                        .iter()
                        .map(|(u, d)| u.rows().max(d.rows()))
                        .max()
                        .unwrap_or(0);
                    let sh = w.shared.as_ref().map_or(0, |s| s.up.rows());
                    let lat = w.fc1.as_ref().map_or(c.hidden_size, Mat::rows);
                    w.gate.rows().max(e).max(sh).max(lat)
                }
            })
            .max()
            .unwrap_or(0)
            .max(c.hidden_size);
        let hs = c.hidden_size;
        let s = Scratch {
            h: dev.alloc(hs)?,
            xn: dev.alloc(hs)?,
            mix: dev.alloc(hs)?,
            a: dev.alloc(widest)?,
            b: dev.alloc(widest)?,
            c: dev.alloc(widest)?,
            d: dev.alloc(widest)?,
            e: dev.alloc(widest)?,
            logits: dev.alloc(c.vocab_size)?,
        };
        Ok(DecodeEngine {
            model,
            dev,
            states,
            s,
            seen: cache.seen,
            cap,
        })
    }

    /// Positions consumed so far.
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// One decode step: the logits (vocab) after `token`.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>, ModelError> {
        let m = self.model;
        let c = &m.cfg;
        if token as usize >= c.vocab_size {
            return Err(ModelError::Input(format!(
                "token {token} is outside the vocabulary ({})",
                c.vocab_size
            )));
        }
        if self.seen >= self.cap {
            return Err(ModelError::Input(format!(
                "decode engine: the KV caches hold {} positions; build the engine with a \
                 larger max_new",
                self.cap
            )));
        }
        let eps = c.layer_norm_epsilon;
        let hs = c.hidden_size;
        let dev = &self.dev;
        let s = &mut self.s;
        let row = super::linear::embed(&m.embed, &[token]);
        dev.write(&mut s.h, &row)?;
        dev.begin_step(self.seen)?;
        // Each layer's input norm is computed where the previous layer's residual add ends
        // (add_rmsnorm: a device may fuse the two); the first layer's here.
        match m.layers.first() {
            Some(b0) => dev.rmsnorm(&s.h, &b0.norm, eps, &mut s.xn)?,
            None => dev.rmsnorm(&s.h, &m.norm_f, eps, &mut s.xn)?,
        }
        for (li, blk) in m.layers.iter().enumerate() {
            match (&blk.mixer, &mut self.states[li]) {
                (Mixer::Mamba(w), DevState::Mamba { conv, ssm }) => {
                    let (di, cd, nh) = (c.d_inner(), c.conv_dim(), c.mamba_num_heads);
                    dev.linear((&s.xn, 0), &w.in_proj, w.in_bias.as_deref(), &mut s.a)?;
                    let step = MambaStep {
                        dims: SsmDims {
                            nheads: nh,
                            headdim: c.mamba_head_dim,
                            ngroups: c.n_groups,
                            dstate: c.ssm_state_size,
                        },
                        conv_dim: cd,
                        conv_k: c.conv_kernel,
                        conv_w: &w.conv_w,
                        conv_b: w.conv_b.as_deref(),
                        params: SsmParams {
                            a: &w.a,
                            d: &w.d,
                            dt_bias: &w.dt_bias,
                        },
                    };
                    dev.mamba_step(conv, ssm, &step, (&s.a, di), (&s.a, di + cd), &mut s.b)?;
                    dev.gated_rmsnorm(&s.b, (&s.a, 0), &w.norm, di / c.n_groups, eps, &mut s.c)?;
                    dev.linear((&s.c, 0), &w.out_proj, w.out_bias.as_deref(), &mut s.mix)?;
                }
                (Mixer::Attention(w), DevState::Attention { k, v }) => {
                    let (nq, nkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
                    let kvd = nkv * hd;
                    dev.linear((&s.xn, 0), &w.q, w.qb.as_deref(), &mut s.a)?;
                    dev.linear((&s.xn, 0), &w.k, w.kb.as_deref(), &mut s.b)?;
                    dev.linear((&s.xn, 0), &w.v, w.vb.as_deref(), &mut s.c)?;
                    dev.kv_append(&s.b, &s.c, k, v, self.seen, kvd)?;
                    let g = AttnGeometry { nq, nkv, hd, t: 1 };
                    dev.attention(&s.a, k, v, self.seen, g, &mut s.d)?;
                    dev.linear((&s.d, 0), &w.o, w.ob.as_deref(), &mut s.mix)?;
                }
                (Mixer::Mlp(w), DevState::None) => {
                    mlp(dev, w, &s.xn, &mut s.a, &mut s.b, &mut s.mix)?;
                }
                (Mixer::Moe(w), DevState::None) => {
                    // fp32 router logits on the full hidden (s.e); the latent (s.b); the
                    // routing and the routed slots into s.a (scratch s.c, s.d).
                    dev.linear((&s.xn, 0), &w.gate, None, &mut s.e)?;
                    let rc = c.router_config();
                    let lat_n = match &w.fc1 {
                        Some(f) => {
                            dev.linear((&s.xn, 0), f, None, &mut s.b)?;
                            f.rows()
                        }
                        None => {
                            dev.copy((&s.xn, 0), &mut s.b, 0, hs)?;
                            hs
                        }
                    };
                    dev.moe_routed(
                        &s.e,
                        &w.score_bias,
                        &rc,
                        &s.b,
                        &w.experts,
                        lat_n,
                        &mut s.c,
                        &mut s.d,
                        &mut s.a,
                    )?;
                    match &w.fc2 {
                        Some(f) => dev.linear((&s.a, 0), f, None, &mut s.mix)?,
                        None => dev.copy((&s.a, 0), &mut s.mix, 0, hs)?,
                    }
                    if let Some(sh) = &w.shared {
                        // The shared expert (ReLU² MLP on the full hidden) added into the
                        // routed output: up into s.b, then relu², down and the add.
                        if sh.down.rows() != hs {
                            return Err(ModelError::Op(format!(
                                "decode engine: layer {li}'s shared expert gives {} values \
                                 (hidden size {hs})",
                                sh.down.rows()
                            )));
                        }
                        dev.linear((&s.xn, 0), &sh.up, sh.up_b.as_deref(), &mut s.b)?;
                        dev.relu2_linear_add(
                            &s.b,
                            &sh.down,
                            sh.down_b.as_deref(),
                            &mut s.c,
                            &mut s.d,
                            &mut s.mix,
                        )?;
                    }
                }
                _ => {
                    return Err(ModelError::Op(format!(
                        "decode engine: layer {li}'s state does not match its mixer"
                    )))
                }
            }
            // The residual in place: h + mixer out (Model::block_forward adds the block input
            // to the mixer's output: the same sum, addition commutes), then the next layer's
            // input norm (after the last layer, the final norm).
            let next = m.layers.get(li + 1).map_or(&m.norm_f, |b| &b.norm);
            if next.len() != hs {
                return Err(ModelError::Op(format!(
                    "decode engine: a norm of {} weights after layer {li} (hidden size {hs})",
                    next.len()
                )));
            }
            dev.add_rmsnorm(&mut s.h, (&s.mix, 0), next, eps, &mut s.xn)?;
        }
        let head = m.lm_head.as_ref().unwrap_or(&m.embed);
        dev.linear((&s.xn, 0), head, None, &mut s.logits)?;
        dev.end_step()?;
        let logits = dev.download(&s.logits, 0, c.vocab_size)?;
        self.seen += 1;
        Ok(logits)
    }
}

/// [`DecodeDevice::relu2_linear_add`] as three ops (its default, and a fusing device's
/// fallback): relu² of `x` into `r`, `W · r (+ bias)` into `t`, `y += t`.
pub fn relu2_linear_add_unfused<D: DecodeDevice + ?Sized>(
    dev: &D,
    x: &D::Buf,
    w: &Mat,
    bias: Option<&[f32]>,
    r: &mut D::Buf,
    t: &mut D::Buf,
    y: &mut D::Buf,
) -> Result<(), ModelError> {
    dev.relu2(x, r, w.cols())?;
    dev.linear((r, 0), w, bias, t)?;
    dev.axpy(y, 1.0, (t, 0), w.rows())
}

/// ReLU² MLP of one row: `up` into `u`, relu² into `r`, `down` into `y`.
fn mlp<D: DecodeDevice>(
    dev: &D,
    w: &MlpW,
    x: &D::Buf,
    u: &mut D::Buf,
    r: &mut D::Buf,
    y: &mut D::Buf,
) -> Result<(), ModelError> {
    dev.linear((x, 0), &w.up, w.up_b.as_deref(), u)?;
    dev.relu2(u, r, w.up.rows())?;
    dev.linear((r, 0), &w.down, w.down_b.as_deref(), y)
}
