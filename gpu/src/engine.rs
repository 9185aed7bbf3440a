//! The decode engine's GPU device ([`reference::model::engine::DecodeDevice`]): device buffers
//! (guarded, poisoned f32 [`DevTensor`]s) and the model's kernels on device pointers, so a
//! decode step keeps every activation, Mamba state and KV cache on the H200 and only the
//! token's embedding row goes up and the router's top-k (per MoE layer) and the logits come
//! back. Weights come from the [`GpuKernels`] weight cache (uploaded once).
//!
//! The kernels are the ones the model's GPU path runs (`model_gemv_f32` / `model_gemm_f32`,
//! `model_rmsnorm`, `model_gated_rmsnorm`, `model_relu2`, `model_attention`,
//! `causal_conv1d_update` v1 + `selective_state_update` v10 (v6 until session 12), `noaux_tc_router`), plus
//! `model_axpy` for the residual adds, the expert mix and copies. The orchestration is
//! reference/src/model/engine.rs, tested bit for bit against `Model::forward` on the CPU
//! device; gpu/tests/gpu_model.rs holds this device to the model's CPU decode.

use crate::graph::Graph;
use crate::model::GpuKernels;
use crate::runtime::DevTensor;
use crate::GpuError;
use cudarc::driver::CudaEvent;
use reference::model::engine::{default_routed_experts, At, DecodeDevice};
use reference::model::kernels::{mamba_decode_host, op_err, AttnGeometry, MambaStep, Route};
use reference::model::OpTime;
use reference::model::{Mat, ModelError};
use reference::ops::noaux_tc_router::RouterConfig;
use reference::DType;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

/// [`GpuKernels`] as a decode device. Weights read by queued kernels are kept alive until the
/// next download (which waits for the stream).
pub struct GpuDevice<'k> {
    k: &'k GpuKernels,
    keep: RefCell<Vec<Arc<DevTensor>>>,
    /// conv output scratch of the Mamba step (grown on demand; stream-ordered reuse)
    xa: RefCell<Option<DevTensor>>,
    /// routed experts' scratch: up outputs, their ReLU², down outputs (all slots)
    slots_h: RefCell<Option<DevTensor>>,
    slots_r: RefCell<Option<DevTensor>>,
    slots_o: RefCell<Option<DevTensor>>,
    /// The fused slot mix's column-group counters (u32 zeros; each launch leaves them zero).
    slots_cnt: RefCell<Option<DevTensor>>,
    /// per-op GPU time (CUDA events around every op), when asked for
    timing: Option<RefCell<OpTiming>>,
    /// CUDA graphs of the step, when asked for ([`GpuDevice::with_graphs`])
    graphs: Option<RefCell<Graphs>>,
    /// fused kernels ([`GpuDevice::with_fusion`])
    fuse: bool,
    /// programmatic dependent launch between the graph's kernels ([`GpuDevice::with_pdl`])
    pdl: bool,
    /// host seconds spent in [`HOST_PARTS`] (the decode bench's `host_per_step_us`)
    host: RefCell<[f64; 4]>,
    /// page-locked host memory the downloads land in (grown on demand, reused): a copy into
    /// pageable memory went through the driver's staging at ~3 GB/s (session 10 call 1: 184
    /// us a step for the super preset's 512 KB of logits)
    staging: RefCell<Option<cudarc::driver::PinnedHostSlice<u32>>>,
}

/// The host-side parts of a step that [`GpuDevice`] times: the token's embedding row and
/// the position going up (`write`, `begin_step`), the step's launch (`end_step`: the graph
/// launch, or nothing eagerly), the wait for the queued work and the logits' copy down.
pub const HOST_PARTS: [&str; 4] = ["upload", "launch", "wait", "download"];

/// Where a graph-mode device is in its steps: the first runs eagerly (it allocates the scratch,
/// caches every weight and lays out every expert), the second is captured (and then launched),
/// every later one replays the graph.
enum Phase {
    Eager,
    Capturing,
    Ready(Graph),
}

/// A MoE layer on the device for graph mode: every expert's weight address and the router's
/// top-k outputs, so that no step needs the host to pick the experts.
struct MoeDev {
    /// [up addresses (E) | down addresses (E)] as u64
    table: DevTensor,
    udt: DType,
    ddt: DType,
    /// the router's top-k: ids (k, i32) and weights (k, f32)
    idx: DevTensor,
    w: DevTensor,
    /// every expert weight the table names (alive as long as the graph)
    _pinned: Vec<Arc<DevTensor>>,
}

/// State of graph mode.
struct Graphs {
    /// the step's position (i64), written before each step: the KV row and the attention span
    pos: DevTensor,
    phase: Phase,
    /// between begin_step and end_step of a replayed step: ops queue nothing
    replaying: bool,
    /// steps run eagerly so far
    eager_steps: usize,
    /// per MoE layer, keyed by the address of its experts
    moe: BTreeMap<usize, MoeDev>,
    /// the captured graph's kernel-to-kernel edges and how many of them are programmatic
    edges: (usize, usize),
}

/// Events of the ops queued since the last download, and the totals of those resolved.
#[derive(Default)]
struct OpTiming {
    pending: Vec<(String, CudaEvent, CudaEvent)>,
    done: BTreeMap<String, OpTime>,
}

impl<'k> GpuDevice<'k> {
    pub fn new(k: &'k GpuKernels) -> GpuDevice<'k> {
        GpuDevice {
            k,
            keep: RefCell::new(Vec::new()),
            xa: RefCell::new(None),
            slots_h: RefCell::new(None),
            slots_r: RefCell::new(None),
            slots_o: RefCell::new(None),
            slots_cnt: RefCell::new(None),
            timing: None,
            graphs: None,
            fuse: false,
            pdl: false,
            host: RefCell::new([0.0; 4]),
            staging: RefCell::new(None),
        }
    }

    /// Records the step's ops as a CUDA graph on the second step and replays it from the third
    /// (module doc of [`reference::model::engine`]: every step runs the same ops on the same
    /// buffers). The position-dependent ops read the position from the device, and a MoE
    /// layer's experts are picked on the device from the router's output (every expert of a
    /// layer is made resident on the first step). Not with [`GpuDevice::with_op_timing`].
    pub fn with_graphs(mut self) -> Result<Self, ModelError> {
        let pos = self
            .k
            .gpu()
            .upload(&reference::Tensor::from_i64(&[1], vec![0]))
            .map_err(gerr("graph mode"))?;
        self.timing = None;
        self.graphs = Some(RefCell::new(Graphs {
            pos,
            phase: Phase::Eager,
            replaying: false,
            eager_steps: 0,
            moe: BTreeMap::new(),
            edges: (0, 0),
        }));
        Ok(self)
    }

    /// Whether the current step is a replay (ops queue nothing).
    fn replaying(&self) -> bool {
        self.graphs.as_ref().is_some_and(|g| g.borrow().replaying)
    }

    /// Device address of the graph mode's position, if in graph mode.
    fn pos_ptr(&self) -> Option<u64> {
        self.graphs.as_ref().map(|g| self.ptr(&g.borrow().pos))
    }

    /// [`DecodeDevice::end_step`]: ends a capture and launches the graph, or ends a replay
    /// (launched by `begin_step`), or counts an eager step.
    fn end_step_inner(&self) -> Result<(), ModelError> {
        let Some(gr) = &self.graphs else {
            return Ok(());
        };
        let g = self.k.gpu();
        let mut gr = gr.borrow_mut();
        match std::mem::replace(&mut gr.phase, Phase::Eager) {
            Phase::Capturing => {
                let graph = crate::graph::end_capture(g, self.pdl)
                    .map_err(|e| op_err("graph capture", e))?;
                gr.edges = (graph.kernel_edges, graph.programmatic_edges);
                // The captured step has not run yet: run it.
                graph.launch().map_err(|e| op_err("graph launch", e))?;
                gr.phase = Phase::Ready(graph);
            }
            Phase::Ready(graph) => {
                // Launched by `begin_step`.
                gr.phase = Phase::Ready(graph);
                gr.replaying = false;
            }
            Phase::Eager => gr.eager_steps += 1,
        }
        Ok(())
    }

    /// [`GpuDevice::relu2_down`] then the weighted slot mix of `o` (k rows of `lw`, weights at
    /// `pw`) into `pacc`: with fusion and the `mma` slot form one launch (the down GEMV's last
    /// block of each column group adds the slots: model_mix_slots's bits), else the down GEMV
    /// and `model_mix_slots`.
    #[allow(clippy::too_many_arguments)]
    fn relu2_down_mix(
        &self,
        [ph, pr, po]: [u64; 3],
        down: (u64, u64),
        ddt: DType,
        (lw, inter, k): (usize, usize, usize),
        v: [bool; 2],
        pw: u64,
        pacc: u64,
    ) -> Result<(), GpuError> {
        let k_ = &self.k;
        if self.fuse && v[0] && k_.slot_mix_fits(ddt, (lw, inter, k), ph) {
            let n = lw.div_ceil(16);
            let mut b = self.slots_cnt.borrow_mut();
            if b.as_ref().is_none_or(|t| t.numel() < n) {
                let t = k_.out(n)?;
                let p = self.ptr(&t);
                // Zero bits (the counters are u32).
                k_.launch_axpy(p, p, 0.0, n, 2)?;
                *b = Some(t);
            }
            let pc = b.as_ref().map_or(0, |t| self.ptr(t));
            return k_.launch_down_mix(ph, inter, down, po, (lw, inter, k), (pw, pacc, pc));
        }
        self.relu2_down([ph, pr, po], down, ddt, (lw, inter, k), v)?;
        k_.launch_mix_slots(po, pw, k, lw, pacc)
    }

    /// ReLU² of the slots' up outputs `h` (k rows of `inter`) then the down GEMVs into `o`:
    /// with fusion one launch where the chunked slot GEMV applies (`model_gemv1_slots_*_relu`
    /// reads h through ReLU²: the same bits), else `model_relu2` into `r` and the GEMV.
    /// `vec4`: whether h's and r's rows are aligned for the vector loads.
    fn relu2_down(
        &self,
        [ph, pr, po]: [u64; 3],
        down: (u64, u64),
        ddt: DType,
        (lw, inter, k): (usize, usize, usize),
        [v_h, v_r]: [bool; 2],
    ) -> Result<(), GpuError> {
        let k_ = &self.k;
        let shape = (lw, inter, k);
        if self.fuse && k_.launch_gemv_slots(ph, inter, down, ddt, po, shape, v_h, true)? {
            return Ok(());
        }
        k_.launch_relu2(ph, pr, k * inter)?;
        k_.launch_gemv_slots(pr, inter, down, ddt, po, shape, v_r, false)
            .map(|_| ())
    }

    /// Fused kernels (`duet e2e --engine-fuse`), the same bits as the unfused engine: the
    /// residual add and the following norm in one launch (`model_add_rmsnorm`; session 8,
    /// run on the H200 in session 9: bit for bit, no measurable gain under graphs), and ReLU²
    /// folded into the routed experts' down GEMV (`model_gemv1_slots_*_relu`: one launch
    /// fewer per MoE layer; session 9, run on the H200 in session 10 call 1: the same bits),
    /// and the shared expert's ReLU², down projection and add into the MoE output in one
    /// launch (`model_gemv1_*_relu_add`: two launches fewer per MoE layer; session 10).
    pub fn with_fusion(mut self) -> Self {
        self.fuse = true;
        self
    }

    /// Graph mode with programmatic dependent launch (`duet e2e --engine-pdl`): the captured
    /// graph's edges between kernels become programmatic ([`crate::graph`]), so each kernel's
    /// launch overlaps the end of the one before it; every kernel waits at its entry for the
    /// one before it to complete (the same bits). Only with [`GpuDevice::with_graphs`].
    pub fn with_pdl(mut self) -> Self {
        self.pdl = true;
        self
    }

    /// The captured graph's kernel-to-kernel edges and how many are programmatic (zeros
    /// before the capture or without graphs).
    pub fn graph_edges(&self) -> (usize, usize) {
        self.graphs.as_ref().map_or((0, 0), |g| g.borrow().edges)
    }

    /// Times every op with a pair of CUDA events (GPU time from the op's first launch to its
    /// last, including the gaps between them); read with [`GpuDevice::op_times`]. For a
    /// profiling pass: the events add host work to every op.
    pub fn with_op_timing(mut self) -> Self {
        self.timing = Some(RefCell::new(OpTiming::default()));
        self.graphs = None;
        self
    }

    /// GPU time per op key (`linear RxC` by weight shape, `rmsnorm`, `mamba_step`, ...) of the
    /// ops resolved so far (every op before the last download), most first.
    pub fn op_times(&self) -> Vec<(String, OpTime)> {
        let mut v: Vec<(String, OpTime)> = self
            .timing
            .as_ref()
            .map(|t| {
                t.borrow()
                    .done
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect()
            })
            .unwrap_or_default();
        v.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
        v
    }

    /// Runs `f` (an op's launches) between two recorded events when timing; nothing while a
    /// graph replays.
    fn timed(
        &self,
        name: impl FnOnce() -> String,
        f: impl FnOnce() -> Result<(), ModelError>,
    ) -> Result<(), ModelError> {
        if self.replaying() {
            return Ok(());
        }
        let Some(t) = &self.timing else {
            return f();
        };
        let g = self.k.gpu();
        let ev = || -> Result<CudaEvent, ModelError> {
            let e = g
                .ctx
                .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| op_err("op timing", e))?;
            e.record(&g.stream).map_err(|e| op_err("op timing", e))?;
            Ok(e)
        };
        let a = ev()?;
        let r = f();
        let b = ev()?;
        t.borrow_mut().pending.push((name(), a, b));
        r
    }

    /// Totals the pending events (the stream has been synchronised).
    fn resolve_timing(&self) -> Result<(), ModelError> {
        if let Some(t) = &self.timing {
            let mut t = t.borrow_mut();
            let pending = std::mem::take(&mut t.pending);
            for (name, a, b) in pending {
                let ms = a.elapsed_ms(&b).map_err(|e| op_err("op timing", e))?;
                let e = t.done.entry(name).or_default();
                e.calls += 1;
                e.seconds += ms as f64 / 1e3;
            }
        }
        Ok(())
    }

    fn ptr(&self, b: &DevTensor) -> u64 {
        b.ptr(&self.k.gpu().stream)
    }

    /// Pointer to element `off` of `b`, checking that `n` values from there fit.
    fn at(&self, (b, off): At<'_, DevTensor>, n: usize, what: &str) -> Result<u64, ModelError> {
        if off + n > b.numel() {
            return Err(op_err(
                "decode engine",
                format!(
                    "{what}: values {off}..{} of a {}-value buffer",
                    off + n,
                    b.numel()
                ),
            ));
        }
        Ok(self.ptr(b) + 4 * off as u64)
    }

    /// Keeps a weight alive until the next download (in graph mode: for the graph's life; a
    /// replayed step adds nothing).
    fn hold(&self, d: Arc<DevTensor>) {
        if !self.replaying() {
            self.keep.borrow_mut().push(d);
        }
    }

    /// The routed slots' scratch (kept, grown on demand; stream-ordered reuse): up outputs
    /// and their ReLU² (k x inter), down outputs (k x lw).
    fn slot_scratch(
        &self,
        k: usize,
        inter: usize,
        lw: usize,
    ) -> Result<(u64, u64, u64), ModelError> {
        let get = |cell: &RefCell<Option<DevTensor>>, n: usize| -> Result<u64, ModelError> {
            let mut b = cell.borrow_mut();
            if b.as_ref().is_none_or(|t| t.numel() < n) {
                *b = Some(self.k.out(n).map_err(gerr("alloc"))?);
            }
            Ok(b.as_ref().map_or(0, |t| self.ptr(t)))
        };
        Ok((
            get(&self.slots_h, k * inter)?,
            get(&self.slots_r, k * inter)?,
            get(&self.slots_o, k * lw)?,
        ))
    }

    fn weight(&self, w: &Mat) -> Result<Arc<DevTensor>, ModelError> {
        let d = self.k.weight_mat(w).map_err(gerr("weight upload"))?;
        self.hold(d.clone());
        Ok(d)
    }

    /// A one-row product's arguments, checked: x's and y's addresses (k and n values), the
    /// weight on the device and the bias's address.
    fn linear_args(
        &self,
        [what, what_x, what_y]: [&str; 3],
        x: At<'_, DevTensor>,
        w: &Mat,
        bias: Option<&[f32]>,
        y: &DevTensor,
    ) -> Result<(u64, u64, Arc<DevTensor>, Option<u64>), ModelError> {
        let (n, k) = (w.rows(), w.cols());
        if bias.is_some_and(|b| b.len() != n) {
            return Err(op_err(what, format!("bias of {n} values expected")));
        }
        let px = self.at(x, k, what_x)?;
        let py = self.at((y, 0), n, what_y)?;
        let wd = self.weight(w)?;
        let pb = bias.map(|b| self.vec(b)).transpose()?;
        Ok((px, py, wd, pb))
    }

    fn vec(&self, v: &[f32]) -> Result<u64, ModelError> {
        let d = self.k.weight_vec(v).map_err(gerr("weight upload"))?;
        let p = self.ptr(&d);
        self.hold(d);
        Ok(p)
    }
}

/// Guard bytes checked next to a downloaded range that reaches either end of the payload (the
/// full guard is `runtime::GUARD` bytes; these are the ones an overrun writes first).
const DOWNLOAD_GUARD_CHECK: usize = 16;

/// Values `off..off + n` of an f32 device buffer in one device-to-host copy of just those
/// values (plus [`DOWNLOAD_GUARD_CHECK`] guard bytes on a side the range reaches, checked):
/// the decode step's logits (131072 values at the super preset) without the whole-buffer
/// download, the guard scan and the three host copies of `Gpu::download` (session 9; run on
/// the H200 in session 10 call 1), through the device's page-locked `staging` buffer
/// (session 10).
fn download_f32(
    g: &crate::runtime::Gpu,
    b: &DevTensor,
    off: usize,
    n: usize,
    staging: &mut Option<cudarc::driver::PinnedHostSlice<u32>>,
) -> Result<Vec<f32>, ModelError> {
    use crate::runtime::{GUARD, GUARD_BYTE};
    let total = b.numel();
    if b.dtype != DType::F32 || off.checked_add(n).is_none_or(|e| e > total) {
        return Err(op_err(
            "download",
            format!(
                "values {off}..{} of a {total}-value {} buffer",
                off + n,
                b.dtype
            ),
        ));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    let head = if off == 0 { DOWNLOAD_GUARD_CHECK } else { 0 };
    let tail = if off + n == total {
        DOWNLOAD_GUARD_CHECK
    } else {
        0
    };
    let lo = GUARD + 4 * off - head;
    let hi = GUARD + 4 * (off + n) + tail;
    let view = b.buf.slice(lo..hi);
    // SAFETY: any 4 bytes are a valid u32; (hi - lo) is a multiple of 4.
    let words = unsafe { view.transmute::<u32>((hi - lo) / 4) }
        .ok_or_else(|| op_err("download", "a view of the buffer as u32 words"))?;
    let len = (hi - lo) / 4;
    if staging.as_ref().is_none_or(|p| p.len() < len) {
        *staging = None;
        // SAFETY: the memory is written by the copy below before it is read; flags 0: cached
        // (the default write-combined memory is slow to read on the host).
        let p = unsafe { g.ctx.alloc_pinned_with_flags::<u32>(len, 0) }
            .map_err(|e| op_err("download staging", e))?;
        *staging = Some(p);
    }
    let pinned = staging
        .as_mut()
        .ok_or_else(|| op_err("download", "no staging buffer"))?
        .as_mut_slice()
        .map_err(|e| op_err("download staging", e))?;
    let host = &mut pinned[..len];
    // Into page-locked memory the copy is asynchronous (cudarc records no wait for a host
    // slice): wait for it.
    g.stream
        .memcpy_dtoh(&words, host)
        .and_then(|_| g.stream.synchronize())
        .map_err(|e| op_err("download", e))?;
    let host = &*host;
    let guard = u32::from_ne_bytes([GUARD_BYTE; 4]);
    let (h, t) = (head / 4, tail / 4);
    if host[..h]
        .iter()
        .chain(&host[host.len() - t..])
        .any(|&w| w != guard)
    {
        return Err(op_err(
            "download",
            "a guard region next to the decode engine buffer was overwritten (a kernel wrote \
             out of bounds)",
        ));
    }
    Ok(host[h..h + n].iter().map(|&w| f32::from_bits(w)).collect())
}

impl GpuDevice<'_> {
    /// A Mamba layer the direct step does not take (e.g. a dstate the decode SSU has no kernel for):
    /// the states and the token's rows come to the host, the model's GPU path runs the step
    /// (the op runner's kernels), and the results go back into the same buffers.
    #[allow(clippy::too_many_arguments)]
    fn mamba_step_via_host(
        &self,
        conv: &mut DevTensor,
        ssm: &mut DevTensor,
        m: &MambaStep<'_>,
        xbc: At<'_, DevTensor>,
        dt: At<'_, DevTensor>,
        y: &mut DevTensor,
    ) -> Result<(), ModelError> {
        let d = m.dims;
        let di = d.nheads * d.headdim;
        let xs = self.download(xbc.0, xbc.1, m.conv_dim)?;
        let dts = self.download(dt.0, dt.1, d.nheads)?;
        let mut cv = self.download(conv, 0, conv.numel())?;
        let mut sv = self.download(ssm, 0, ssm.numel())?;
        let yv = mamba_decode_host(self.k, &mut cv, &mut sv, m, &xs, &dts)?;
        *conv = self.upload(&cv)?;
        *ssm = self.upload(&sv)?;
        let yd = self.upload(&yv)?;
        self.copy((&yd, 0), y, 0, di)?;
        // The copy reads `yd`: wait before it is freed.
        self.k.gpu().sync().map_err(gerr("decode engine"))
    }
}

impl Drop for GpuDevice<'_> {
    /// A capture cut short (an op failed inside it) is ended, so that the stream is usable
    /// again by whatever runs next on it.
    fn drop(&mut self) {
        if let Some(gr) = &self.graphs {
            if matches!(gr.borrow().phase, Phase::Capturing) {
                let _ = self
                    .k
                    .gpu()
                    .stream
                    .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0));
            }
        }
    }
}

fn gerr(what: &'static str) -> impl Fn(GpuError) -> ModelError {
    move |e| op_err(what, e)
}

impl DecodeDevice for GpuDevice<'_> {
    type Buf = DevTensor;

    fn alloc(&self, n: usize) -> Result<DevTensor, ModelError> {
        self.k.out(n).map_err(gerr("alloc"))
    }

    fn upload(&self, v: &[f32]) -> Result<DevTensor, ModelError> {
        self.k.up(v).map_err(gerr("upload"))
    }

    fn download(&self, b: &DevTensor, off: usize, n: usize) -> Result<Vec<f32>, ModelError> {
        let g = self.k.gpu();
        let t0 = std::time::Instant::now();
        g.sync().map_err(gerr("decode engine"))?;
        let t1 = std::time::Instant::now();
        if self.graphs.is_none() {
            self.keep.borrow_mut().clear();
        }
        self.resolve_timing()?;
        let v = download_f32(g, b, off, n, &mut self.staging.borrow_mut());
        let mut h = self.host.borrow_mut();
        h[2] += (t1 - t0).as_secs_f64();
        h[3] += t1.elapsed().as_secs_f64();
        v
    }

    fn write(&self, b: &mut DevTensor, v: &[f32]) -> Result<(), ModelError> {
        if v.len() > b.numel() || b.dtype != DType::F32 {
            return Err(op_err(
                "write",
                format!(
                    "{} values into a {}-value {} buffer",
                    v.len(),
                    b.numel(),
                    b.dtype
                ),
            ));
        }
        let t0 = std::time::Instant::now();
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let s = &self.k.gpu().stream;
        let mut view = b.view_mut();
        let mut dst = view.slice_mut(0..bytes.len());
        let r = s
            .memcpy_htod(&bytes, &mut dst)
            .map_err(|e| op_err("write", e));
        self.host.borrow_mut()[0] += t0.elapsed().as_secs_f64();
        r
    }

    fn begin_step(&self, pos: usize) -> Result<(), ModelError> {
        let Some(gr) = &self.graphs else {
            return Ok(());
        };
        let g = self.k.gpu();
        let mut gr = gr.borrow_mut();
        // The position goes up before any capture begins (a host copy is not a graph node).
        let p = (pos as i64).to_le_bytes();
        {
            let t0 = std::time::Instant::now();
            let mut view = gr.pos.view_mut();
            let mut dst = view.slice_mut(0..8);
            g.stream
                .memcpy_htod(&p, &mut dst)
                .map_err(|e| op_err("graph mode position", e))?;
            self.host.borrow_mut()[0] += t0.elapsed().as_secs_f64();
        }
        match gr.phase {
            Phase::Ready(ref graph) => {
                // Everything the graph reads is on the device now (the embedding row went up
                // in `write`, the position just above): launch it here, so that the host's
                // walk over the step's ops (which queue nothing while replaying: their
                // argument checks and weight-cache lookups, ~90 us a step at the super
                // preset in session 10 call 1) runs while the GPU works, not before it.
                let t0 = std::time::Instant::now();
                graph.launch().map_err(|e| op_err("graph launch", e))?;
                self.host.borrow_mut()[1] += t0.elapsed().as_secs_f64();
                gr.replaying = true;
            }
            Phase::Capturing => {
                return Err(op_err("graph mode", "a step began inside a capture"));
            }
            Phase::Eager if gr.eager_steps >= 1 => {
                // Everything is allocated, cached and laid out: capture this step.
                g.sync().map_err(gerr("graph mode"))?;
                g.stream
                    .begin_capture(
                        cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                    )
                    .map_err(|e| op_err("graph capture", e))?;
                gr.phase = Phase::Capturing;
            }
            Phase::Eager => {}
        }
        Ok(())
    }

    fn host_times(&self) -> Vec<(&'static str, f64)> {
        HOST_PARTS.into_iter().zip(*self.host.borrow()).collect()
    }

    fn launch_stats(&self) -> Vec<(&'static str, usize)> {
        match &self.graphs {
            Some(_) => {
                let (k, p) = self.graph_edges();
                vec![("graph_kernel_edges", k), ("graph_programmatic_edges", p)]
            }
            None => Vec::new(),
        }
    }

    fn end_step(&self) -> Result<(), ModelError> {
        let t0 = std::time::Instant::now();
        let r = self.end_step_inner();
        self.host.borrow_mut()[1] += t0.elapsed().as_secs_f64();
        r
    }

    fn kv_append(
        &self,
        kn: &DevTensor,
        vn: &DevTensor,
        k: &mut DevTensor,
        v: &mut DevTensor,
        pos: usize,
        kvd: usize,
    ) -> Result<(), ModelError> {
        let Some(pp) = self.pos_ptr() else {
            self.copy((kn, 0), k, pos * kvd, kvd)?;
            return self.copy((vn, 0), v, pos * kvd, kvd);
        };
        // Graph mode: the row index comes from the device position (the host's `pos` is the
        // same number at run time; checked against the caches' size here).
        let pkn = self.at((kn, 0), kvd, "kv_append k row")?;
        let pvn = self.at((vn, 0), kvd, "kv_append v row")?;
        let pk = self.at((k, 0), (pos + 1) * kvd, "kv_append key cache")?;
        let pv = self.at((v, 0), (pos + 1) * kvd, "kv_append value cache")?;
        self.timed(
            || "kv_append".into(),
            || {
                self.k
                    .launch_kv_store(pk, pkn, kvd, pp)
                    .and_then(|_| self.k.launch_kv_store(pv, pvn, kvd, pp))
                    .map_err(gerr("kv_append"))
            },
        )
    }

    fn linear(
        &self,
        x: At<'_, DevTensor>,
        w: &Mat,
        bias: Option<&[f32]>,
        y: &mut DevTensor,
    ) -> Result<(), ModelError> {
        let (n, k) = (w.rows(), w.cols());
        let (px, py, wd, pb) =
            self.linear_args(["linear", "linear x", "linear y"], x, w, bias, y)?;
        self.timed(
            || format!("linear {n}x{k}"),
            || {
                self.k
                    .launch_gemm(px, 1, &wd, n, k, pb, py)
                    .map_err(gerr("linear"))
            },
        )
    }

    fn rmsnorm(
        &self,
        x: &DevTensor,
        w: &[f32],
        eps: f32,
        y: &mut DevTensor,
    ) -> Result<(), ModelError> {
        let n = w.len();
        let px = self.at((x, 0), n, "rmsnorm x")?;
        let py = self.at((y, 0), n, "rmsnorm y")?;
        let pw = self.vec(w)?;
        self.timed(
            || "rmsnorm".into(),
            || {
                self.k
                    .launch_rmsnorm(px, pw, py, 1, n, eps)
                    .map_err(gerr("rmsnorm"))
            },
        )
    }

    fn gated_rmsnorm(
        &self,
        x: &DevTensor,
        z: At<'_, DevTensor>,
        w: &[f32],
        group: usize,
        eps: f32,
        y: &mut DevTensor,
    ) -> Result<(), ModelError> {
        let d = w.len();
        let px = self.at((x, 0), d, "gated_rmsnorm x")?;
        let pz = self.at(z, d, "gated_rmsnorm z")?;
        let py = self.at((y, 0), d, "gated_rmsnorm y")?;
        let pw = self.vec(w)?;
        self.timed(
            || "gated_rmsnorm".into(),
            || {
                self.k
                    .launch_gated_rmsnorm([px, pz, pw, py], 1, d, group, eps)
                    .map_err(gerr("gated_rmsnorm"))
            },
        )
    }

    fn add_rmsnorm(
        &self,
        h: &mut DevTensor,
        x: At<'_, DevTensor>,
        w: &[f32],
        eps: f32,
        y: &mut DevTensor,
    ) -> Result<(), ModelError> {
        if !self.fuse || !crate::model::add_rmsnorm_fits(w.len()) {
            self.axpy(h, 1.0, x, w.len())?;
            return self.rmsnorm(h, w, eps, y);
        }
        let n = w.len();
        let px = self.at(x, n, "add_rmsnorm x")?;
        let ph = self.at((h, 0), n, "add_rmsnorm h")?;
        let py = self.at((y, 0), n, "add_rmsnorm y")?;
        let pw = self.vec(w)?;
        self.timed(
            || "add_rmsnorm".into(),
            || {
                self.k
                    .launch_add_rmsnorm([ph, px, pw, py], n, eps)
                    .map_err(gerr("add_rmsnorm"))
            },
        )
    }

    fn relu2_linear_add(
        &self,
        x: &DevTensor,
        w: &Mat,
        bias: Option<&[f32]>,
        r: &mut DevTensor,
        t: &mut DevTensor,
        y: &mut DevTensor,
    ) -> Result<(), ModelError> {
        let (n, k) = (w.rows(), w.cols());
        if self.fuse {
            let (px, py, wd, pb) = self.linear_args(
                [
                    "relu2_linear_add",
                    "relu2_linear_add x",
                    "relu2_linear_add y",
                ],
                (x, 0),
                w,
                bias,
                y,
            )?;
            let mut fused = false;
            self.timed(
                || format!("relu2 + linear {n}x{k} + add"),
                || {
                    fused = self
                        .k
                        .launch_gemv_relu2_add(px, &wd, n, k, pb, py)
                        .map_err(gerr("relu2_linear_add"))?;
                    Ok(())
                },
            )?;
            // While a graph replays nothing is queued (`fused` stays false): the captured
            // step holds whichever form ran then.
            if fused || self.replaying() {
                return Ok(());
            }
        }
        reference::model::engine::relu2_linear_add_unfused(self, x, w, bias, r, t, y)
    }

    fn relu2(&self, x: &DevTensor, y: &mut DevTensor, n: usize) -> Result<(), ModelError> {
        let px = self.at((x, 0), n, "relu2 x")?;
        let py = self.at((y, 0), n, "relu2 y")?;
        self.timed(
            || "relu2".into(),
            || self.k.launch_relu2(px, py, n).map_err(gerr("relu2")),
        )
    }

    fn axpy(
        &self,
        y: &mut DevTensor,
        a: f32,
        x: At<'_, DevTensor>,
        n: usize,
    ) -> Result<(), ModelError> {
        let px = self.at(x, n, "axpy x")?;
        let py = self.at((y, 0), n, "axpy y")?;
        self.timed(
            || "axpy".into(),
            || self.k.launch_axpy(py, px, a, n, 0).map_err(gerr("axpy")),
        )
    }

    fn fill(&self, y: &mut DevTensor, v: f32, n: usize) -> Result<(), ModelError> {
        let py = self.at((y, 0), n, "fill y")?;
        self.timed(
            || "fill".into(),
            || self.k.launch_axpy(py, py, v, n, 2).map_err(gerr("fill")),
        )
    }

    fn copy(
        &self,
        x: At<'_, DevTensor>,
        dst: &mut DevTensor,
        dst_off: usize,
        n: usize,
    ) -> Result<(), ModelError> {
        let px = self.at(x, n, "copy x")?;
        let py = self.at((dst, dst_off), n, "copy dst")?;
        self.timed(
            || "copy".into(),
            || self.k.launch_axpy(py, px, 1.0, n, 1).map_err(gerr("copy")),
        )
    }

    fn mamba_step(
        &self,
        conv: &mut DevTensor,
        ssm: &mut DevTensor,
        m: &MambaStep<'_>,
        xbc: At<'_, DevTensor>,
        dt: At<'_, DevTensor>,
        y: &mut DevTensor,
    ) -> Result<(), ModelError> {
        let d = m.dims;
        let (cd, di) = (m.conv_dim, d.nheads * d.headdim);
        if !self.k.mamba_step_ok(m) {
            if self.graphs.is_some() {
                return Err(op_err(
                    "graph mode",
                    "this Mamba layer is not a case of the direct decode step (its fallback \
                     goes through the host); run without graphs",
                ));
            }
            return self.mamba_step_via_host(conv, ssm, m, xbc, dt, y);
        }
        let pxbc = self.at(xbc, cd, "mamba xbc")?;
        let pdt = self.at(dt, d.nheads, "mamba dt")?;
        let pconv = self.at((conv, 0), cd * (m.conv_k - 1), "mamba conv state")?;
        let pssm = self.at((ssm, 0), di * d.dstate, "mamba ssm state")?;
        let py = self.at((y, 0), di, "mamba y")?;
        let mut xa = self.xa.borrow_mut();
        if xa.as_ref().is_none_or(|b| b.numel() < cd) {
            *xa = Some(self.k.out(cd).map_err(gerr("alloc"))?);
        }
        let pxa = xa.as_ref().map_or(0, |b| self.ptr(b));
        self.timed(
            || "mamba_step".into(),
            || {
                self.k
                    .launch_mamba_step(m, [pxbc, pdt], [pconv, pssm], pxa, py)
                    .map_err(gerr("mamba decode step"))
            },
        )
    }

    fn attention(
        &self,
        q: &DevTensor,
        keys: &DevTensor,
        vals: &DevTensor,
        p0: usize,
        g: AttnGeometry,
        out: &mut DevTensor,
    ) -> Result<(), ModelError> {
        if g.t != 1 || g.nkv == 0 || !g.nq.is_multiple_of(g.nkv) {
            return Err(op_err(
                "attention",
                format!("one query row with nq a multiple of nkv expected, got {g:?}"),
            ));
        }
        let kv = (p0 + 1) * g.nkv * g.hd;
        let pq = self.at((q, 0), g.nq * g.hd, "attention q")?;
        let pk = self.at((keys, 0), kv, "attention keys")?;
        let pv = self.at((vals, 0), kv, "attention values")?;
        let po = self.at((out, 0), g.nq * g.hd, "attention out")?;
        let pp = self.pos_ptr();
        self.timed(
            || "attention".into(),
            || {
                match pp {
                    // Graph mode: p0 from the device position (the same number at run time).
                    Some(pp) => self.k.launch_attention_pos([pq, pk, pv, po], pp, g),
                    None => self.k.launch_attention([pq, pk, pv, po], p0, g),
                }
                .map_err(gerr("attention"))
            },
        )
    }

    /// Graph mode: the router writes its top-k into the layer's device buffers and the slot
    /// GEMVs pick each slot's weights from a table of every expert's address (built on the
    /// first call, which makes every expert of the layer resident); the mix reads the slot
    /// weights from the router's output. No host round trip. Outside graph mode: the default
    /// (the top-k to the host, then [`DecodeDevice::routed_experts`]).
    #[allow(clippy::too_many_arguments)]
    fn moe_routed(
        &self,
        logits: &DevTensor,
        bias: &[f32],
        cfg: &RouterConfig,
        lat: &DevTensor,
        experts: &[(Mat, Mat)],
        lat_n: usize,
        h: &mut DevTensor,
        r: &mut DevTensor,
        acc: &mut DevTensor,
    ) -> Result<(), ModelError> {
        let Some(gr) = &self.graphs else {
            let (ids, wts) = self.route(logits, bias, cfg)?;
            return self.routed_experts(lat, &ids, &wts, experts, lat_n, h, r, acc);
        };
        use crate::ops::noaux_tc_router::{auto_version, Launch};
        let e = bias.len();
        let k = cfg.top_k;
        cfg.validate(e).map_err(|m| op_err("noaux_tc_router", m))?;
        let (first_up, _) = experts
            .first()
            .ok_or_else(|| op_err("moe", "a MoE layer without experts"))?;
        let (inter, lw) = (first_up.rows(), first_up.cols());
        if experts.len() != e
            || lw != lat_n
            || experts.iter().any(|(u, d)| {
                (u.rows(), u.cols()) != (inter, lw) || (d.rows(), d.cols()) != (lw, inter)
            })
        {
            return Err(op_err(
                "graph mode",
                "a MoE layer's experts must all have one shape (and one per router logit)",
            ));
        }
        let key = experts.as_ptr() as usize;
        if !gr.borrow().moe.contains_key(&key) {
            if self.replaying() || !matches!(gr.borrow().phase, Phase::Eager) {
                return Err(op_err(
                    "graph mode",
                    "a MoE layer first seen inside a capture",
                ));
            }
            // Every expert of the layer resident, and their addresses in one table.
            let mut pinned = Vec::with_capacity(2 * e);
            for (u, _) in experts {
                pinned.push(self.k.weight_mat(u).map_err(gerr("expert upload"))?);
            }
            for (_, d) in experts {
                pinned.push(self.k.weight_mat(d).map_err(gerr("expert upload"))?);
            }
            let one = |v: &[Arc<DevTensor>]| v.iter().all(|t| t.dtype == v[0].dtype);
            if !one(&pinned[..e]) || !one(&pinned[e..]) {
                return Err(op_err(
                    "graph mode",
                    "a MoE layer's experts in mixed storage",
                ));
            }
            let st = &self.k.gpu().stream;
            let table: Vec<u8> = pinned
                .iter()
                .flat_map(|t| t.ptr(st).to_le_bytes())
                .collect();
            let g = self.k.gpu();
            let up = |t: reference::Tensor| g.upload(&t).map_err(gerr("graph mode"));
            let md = MoeDev {
                table: up(reference::Tensor::new(
                    &[table.len()],
                    reference::tensor::Data::U8(table),
                ))?,
                udt: pinned[0].dtype,
                ddt: pinned[e].dtype,
                idx: g
                    .alloc_poisoned(&[k.max(1)], DType::I32, self.k.poison)
                    .map_err(gerr("graph mode"))?,
                w: g.alloc_poisoned(&[k.max(1)], DType::F32, self.k.poison)
                    .map_err(gerr("graph mode"))?,
                _pinned: pinned,
            };
            gr.borrow_mut().moe.insert(key, md);
        }
        let grb = gr.borrow();
        let md = grb
            .moe
            .get(&key)
            .ok_or_else(|| op_err("graph mode", "the MoE layer's table"))?;
        let s = &self.k.gpu().stream;
        let (ph, pr, po) = self.slot_scratch(k, inter, lw)?;
        let pl = self.at((logits, 0), e, "router logits")?;
        let pb = self.vec(bias)?;
        let plat = self.at((lat, 0), lw, "routed experts latent")?;
        let pacc = self.at((acc, 0), lw, "routed experts out")?;
        let (pt, pidx, pw) = (md.table.ptr(s), md.idx.ptr(s), md.w.ptr(s));
        // Vector loads: the scratch and the latent are 16-byte aligned; the weights' own
        // alignment for their storage (every device allocation is).
        let (v_up, v_down) = (
            lw.is_multiple_of(4) && plat.is_multiple_of(16),
            inter.is_multiple_of(4),
        );
        let (udt, ddt) = (md.udt, md.ddt);
        let version = match self.k.router_version {
            "auto" => auto_version(1, e, cfg),
            v => v,
        };
        self.timed(
            || "moe_routed".into(),
            || {
                let k_ = &self.k;
                Launch {
                    logits: pl,
                    logits_dt: 0,
                    bias: pb,
                    bias_dt: 0,
                    tokens: 1,
                    experts: e,
                    cfg: *cfg,
                    out_idx: pidx,
                    out_w: pw,
                    f32_sigmoid_bench: false,
                }
                .run(k_.gpu(), version)
                .and_then(|_| {
                    k_.launch_gemv_slots(plat, 0, (pt, pidx), udt, ph, (inter, lw, k), v_up, false)
                        .map(|_| ())
                })
                .and_then(|_| {
                    // ph and pr are scratch (256-byte aligned): v_down holds for both.
                    let down = (pt + 8 * e as u64, pidx);
                    let shape = (lw, inter, k);
                    self.relu2_down_mix([ph, pr, po], down, ddt, shape, [v_down; 2], pw, pacc)
                })
                .map_err(gerr("moe_routed"))
            },
        )
    }

    /// The slots in four launches (both expert GEMVs grouped over the slots, ReLU² over all
    /// of them, the weighted mix) instead of four per slot; the addresses of the slots'
    /// weights and the slot weights go up in one small upload. Experts of unequal shapes or
    /// storage take the default (one slot at a time). Same numbers either way.
    #[allow(clippy::too_many_arguments)]
    fn routed_experts(
        &self,
        lat: &DevTensor,
        ids: &[usize],
        wts: &[f32],
        experts: &[(Mat, Mat)],
        lat_n: usize,
        h: &mut DevTensor,
        r: &mut DevTensor,
        acc: &mut DevTensor,
    ) -> Result<(), ModelError> {
        let k = ids.len();
        let pairs: Vec<&(Mat, Mat)> = ids
            .iter()
            .map(|&e| {
                experts.get(e).ok_or_else(|| {
                    op_err("routed experts", format!("expert {e} of {}", experts.len()))
                })
            })
            .collect::<Result<_, _>>()?;
        let Some(first) = pairs.first() else {
            return self.fill(acc, 0.0, lat_n);
        };
        let (inter, lw) = (first.0.rows(), first.0.cols());
        let same_shape = wts.len() == k
            && lw == lat_n
            && pairs.iter().all(|(u, d)| {
                (u.rows(), u.cols()) == (inter, lw) && (d.rows(), d.cols()) == (lw, inter)
            });
        let (mut ups, mut downs) = (Vec::with_capacity(k), Vec::with_capacity(k));
        if same_shape {
            for (u, d) in &pairs {
                ups.push(self.weight(u)?);
                downs.push(self.weight(d)?);
            }
        }
        let one_dtype = |v: &[Arc<DevTensor>]| v.iter().all(|t| t.dtype == v[0].dtype);
        if !same_shape || !one_dtype(&ups) || !one_dtype(&downs) {
            return default_routed_experts(self, lat, ids, wts, experts, lat_n, h, r, acc);
        }
        let s = &self.k.gpu().stream;
        // [up addresses | down addresses | slot weights]
        let mut table = Vec::with_capacity(k * 20);
        for t in ups.iter().chain(&downs) {
            table.extend_from_slice(&t.ptr(s).to_le_bytes());
        }
        for w in wts {
            table.extend_from_slice(&w.to_le_bytes());
        }
        let td = self
            .k
            .gpu()
            .upload(&reference::Tensor::new(
                &[table.len()],
                reference::tensor::Data::U8(table),
            ))
            .map_err(gerr("routed experts"))?;
        let pt = self.ptr(&td);
        let (ph, pr, po) = self.slot_scratch(k, inter, lw)?;
        let plat = self.at((lat, 0), lw, "routed experts latent")?;
        let pacc = self.at((acc, 0), lw, "routed experts out")?;
        // Vector loads: x rows 16-byte aligned (K % 4 == 0 keeps the slots' rows aligned) and
        // every weight aligned for its storage's chunk loads (launch_gemv_slots: 16 bytes,
        // NVFP4 buffers too for the pipe kernel's 16-byte copies; device allocations are
        // 256-byte aligned).
        let aligned = |ws: &[Arc<DevTensor>], kk: usize| {
            kk.is_multiple_of(4) && ws.iter().all(|t| t.ptr(s).is_multiple_of(16))
        };
        let (v_up, v_down, v_down_h) = (
            aligned(&ups, lw) && plat.is_multiple_of(16),
            aligned(&downs, inter) && pr.is_multiple_of(16),
            aligned(&downs, inter) && ph.is_multiple_of(16),
        );
        let (udt, ddt) = (ups[0].dtype, downs[0].dtype);
        let r = self.timed(
            || "routed_experts".into(),
            || {
                let k_ = &self.k;
                let down = (pt + 8 * k as u64, 0);
                k_.launch_gemv_slots(plat, 0, (pt, 0), udt, ph, (inter, lw, k), v_up, false)
                    .map(|_| ())
                    .and_then(|_| {
                        let v = [v_down_h, v_down];
                        let (shape, pw) = ((lw, inter, k), pt + 16 * k as u64);
                        self.relu2_down_mix([ph, pr, po], down, ddt, shape, v, pw, pacc)
                    })
                    .map_err(gerr("routed experts"))
            },
        );
        // The table is read by the queued kernels: keep it until the next download.
        self.keep.borrow_mut().push(Arc::new(td));
        r
    }

    fn route(
        &self,
        logits: &DevTensor,
        bias: &[f32],
        cfg: &RouterConfig,
    ) -> Result<Route, ModelError> {
        use crate::ops::noaux_tc_router::{auto_version, Launch};
        let e = bias.len();
        cfg.validate(e).map_err(|m| op_err("noaux_tc_router", m))?;
        let pl = self.at((logits, 0), e, "router logits")?;
        let pb = self.vec(bias)?;
        let g = self.k.gpu();
        let k = cfg.top_k;
        let run = || -> Result<Route, GpuError> {
            let idx = g.alloc_poisoned(&[1, k], DType::I32, self.k.poison)?;
            let w = g.alloc_poisoned(&[1, k], DType::F32, self.k.poison)?;
            let version = match self.k.router_version {
                "auto" => auto_version(1, e, cfg),
                v => v,
            };
            Launch {
                logits: pl,
                logits_dt: 0,
                bias: pb,
                bias_dt: 0,
                tokens: 1,
                experts: e,
                cfg: *cfg,
                out_idx: idx.ptr(&g.stream),
                out_w: w.ptr(&g.stream),
                f32_sigmoid_bench: false,
            }
            .run(g, version)?;
            g.sync()?;
            let ids = g.download(&idx, "topk_indices")?.to_i64_vec();
            let wts = g.download(&w, "topk_weights")?.to_f32_vec();
            let ids =
                ids.ok_or_else(|| GpuError::Driver("topk_indices are not integers".into()))?;
            let ids =
                ids.into_iter()
                    .map(|i| {
                        usize::try_from(i).ok().filter(|&i| i < e).ok_or_else(|| {
                            GpuError::Driver(format!("router chose expert {i} of {e}"))
                        })
                    })
                    .collect::<Result<Vec<usize>, GpuError>>()?;
            Ok((ids, wts))
        };
        if self.graphs.is_some() {
            return Err(op_err(
                "noaux_tc_router",
                "graph mode keeps the top-k on the device (moe_routed)",
            ));
        }
        let mut out = None;
        self.timed(
            || "route".into(),
            || {
                out = Some(run().map_err(gerr("noaux_tc_router"))?);
                Ok(())
            },
        )?;
        out.ok_or_else(|| op_err("noaux_tc_router", "no result"))
    }
}
