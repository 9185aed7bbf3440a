//! The cudarc runtime: one context and stream on device 0, kernel modules loaded from the
//! NVRTC cache, device tensors with poisoned outputs and guard regions, CUDA-event timing.
//!
//! Nothing here is touched unless a GPU path is asked for: [`gpu()`] probes the driver lazily
//! and turns "no libcuda", "no device" and "unsupported device" into one clear [`GpuError`].

use crate::compile;
use crate::GpuError;
use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, CudaViewMut,
    DevicePtr, LaunchConfig, PushKernelArg,
};
use reference::{DType, Tensor};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Bytes of guard before and after every device tensor (keeps 256-byte alignment).
pub const GUARD: usize = 256;
/// Byte pattern of the guard regions.
pub const GUARD_BYTE: u8 = 0xA5;

/// dtype codes passed to kernels (`DT_*` in common.cuh).
pub fn dtype_code(d: DType) -> Result<i32, GpuError> {
    match d {
        DType::F32 => Ok(0),
        DType::BF16 => Ok(1),
        DType::F16 => Ok(2),
        other => Err(GpuError::Unsupported(format!(
            "dtype {other} is not supported by the GPU kernels (use f32, bf16 or f16)"
        ))),
    }
}

/// The device, its stream and the loaded kernel modules.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// NVRTC target, e.g. `sm_90a`.
    pub arch: String,
    pub name: String,
    pub sm_count: u32,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    /// functions loaded from PDL-safe files (compile::pdl_ready), by CUfunction address
    pdl_funcs: Mutex<std::collections::HashSet<usize>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Gpu({}, {}, {} SMs)",
            self.name, self.arch, self.sm_count
        )
    }
}

fn drv(what: &str) -> impl Fn(cudarc::driver::DriverError) -> GpuError + '_ {
    move |e| GpuError::Driver(format!("{what}: {e}"))
}

/// The process-wide GPU, opened on first use.
pub fn gpu() -> Result<Arc<Gpu>, GpuError> {
    static G: OnceLock<Result<Arc<Gpu>, String>> = OnceLock::new();
    G.get_or_init(|| {
        open().map(Arc::new).map_err(|e| match e {
            GpuError::NoDevice(m) => m,
            other => other.to_string(),
        })
    })
    .clone()
    .map_err(GpuError::NoDevice)
}

fn open() -> Result<Gpu, GpuError> {
    // SAFETY: only tries to dlopen libcuda; cudarc would panic on first call without it.
    if !unsafe { sys::is_culib_present() } {
        return Err(GpuError::NoDevice(
            "the NVIDIA driver library (libcuda.so.1) is not installed on this machine; GPU \
             ops need an NVIDIA GPU with its driver (everything without --backend gpu still works)"
                .into(),
        ));
    }
    let n = CudaContext::device_count().map_err(|e| {
        GpuError::NoDevice(format!("the CUDA driver reports no usable device ({e})"))
    })?;
    if n < 1 {
        return Err(GpuError::NoDevice("the CUDA driver sees 0 GPUs".into()));
    }
    let ctx = CudaContext::new(0)
        .map_err(|e| GpuError::NoDevice(format!("cuCtxCreate on device 0: {e}")))?;
    let (major, minor) = ctx
        .compute_capability()
        .map_err(drv("compute capability"))?;
    let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
    if major < 8 {
        return Err(GpuError::NoDevice(format!(
            "{name} has compute capability {major}.{minor}; duet's kernels need 8.0 or newer (built and tested on 9.0, H200)"
        )));
    }
    if !compile::nvrtc_available() {
        return Err(GpuError::Nvrtc(
            "a GPU is present but NVRTC (libnvrtc.so.13) cannot be loaded; install the CUDA 13 NVRTC \
             library or `. scripts/nvrtc-env.sh`"
                .into(),
        ));
    }
    // sm_90a unlocks Hopper-only instructions; other archs get their plain target.
    let arch = if (major, minor) == (9, 0) {
        "sm_90a".to_string()
    } else {
        format!("sm_{major}{minor}")
    };
    let sm_count = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(drv("SM count"))? as u32;
    // One stream, in order: cudarc's per-buffer event tracking only costs time here.
    // SAFETY: all work goes through `stream` below; no buffer is shared across streams.
    unsafe { ctx.disable_event_tracking() };
    // A created stream, not the legacy default stream: CUDA-graph capture (bench) needs one.
    let stream = ctx
        .new_stream()
        .map_err(|e| GpuError::Driver(format!("cuStreamCreate: {e}")))?;
    Ok(Gpu {
        ctx,
        stream,
        arch,
        name,
        sm_count,
        modules: Mutex::new(HashMap::new()),
        pdl_funcs: Mutex::new(std::collections::HashSet::new()),
    })
}

impl Gpu {
    /// [`Gpu::function`] with the function's dynamic shared memory limit raised to `bytes` (past
    /// the default 48 KB).
    pub fn function_with_smem(
        &self,
        file: &'static str,
        func: &str,
        bytes: u32,
    ) -> Result<CudaFunction, GpuError> {
        let f = self.function(file, func)?;
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
        .map_err(|e| GpuError::Driver(format!("{func} shared memory attribute: {e}")))?;
        Ok(f)
    }

    /// Loads (compiling if needed) kernel file `file` and returns function `func` from it.
    pub fn function(&self, file: &'static str, func: &str) -> Result<CudaFunction, GpuError> {
        let module = {
            let cached = self.modules.lock().ok().and_then(|m| m.get(file).cloned());
            match cached {
                Some(m) => m,
                None => {
                    let cubin = compile::compile(file, &self.arch)?;
                    let load = |c: &[u8]| {
                        self.ctx
                            .load_module(cudarc::nvrtc::Ptx::from_binary(c.to_vec()))
                            .map_err(drv("cuModuleLoadData"))
                    };
                    // A cubin from the disk cache (DUET_KERNEL_CACHE: possibly built on
                    // another machine) that this driver refuses is compiled here instead.
                    let m = match load(cubin.as_ref()) {
                        Ok(m) => m,
                        Err(e) => match compile::compile_fresh(file, &self.arch) {
                            Ok(fresh) if fresh.as_slice() != cubin.as_slice() => load(&fresh)?,
                            _ => return Err(e),
                        },
                    };
                    if let Ok(mut map) = self.modules.lock() {
                        map.insert(file, m.clone());
                    }
                    m
                }
            }
        };
        let f = module
            .load_function(func)
            .map_err(|e| GpuError::Driver(format!("kernel '{func}' in {file}.cu: {e}")))?;
        if compile::pdl_ready(file) {
            if let Ok(mut s) = self.pdl_funcs.lock() {
                s.insert(f.cu_function() as usize);
            }
        }
        Ok(f)
    }

    /// Whether `f` was loaded from a file whose kernels all begin with `DUET_PDL_ENTRY`
    /// (common.cuh): safe to launch with a programmatic dependency on the kernel before it.
    pub fn is_pdl_function(&self, f: sys::CUfunction) -> bool {
        self.pdl_funcs
            .lock()
            .map(|s| s.contains(&(f as usize)))
            .unwrap_or(false)
    }

    pub fn sync(&self) -> Result<(), GpuError> {
        self.stream
            .synchronize()
            .map_err(drv("stream synchronize (a kernel failed)"))
    }

    /// Starts (`on`) or stops the profilers' collection (`cuProfilerStart` / `cuProfilerStop`):
    /// under `ncu --profile-from-start off` only the kernels between the two are profiled
    /// (`duet profile engine-step`). Waits for the stream first so the range holds exactly the
    /// work queued inside it.
    pub fn profiler_range(&self, on: bool) -> Result<(), GpuError> {
        self.sync()?;
        self.ctx.bind_to_thread().map_err(drv("bind the context"))?;
        // SAFETY: plain driver calls on the current (just bound) context; no pointers.
        let r = unsafe {
            if on {
                cudarc::driver::sys::cuProfilerStart()
            } else {
                cudarc::driver::sys::cuProfilerStop()
            }
        };
        if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(GpuError::Driver(format!("cuProfilerStart/Stop: {r:?}")))
        }
    }

    /// Uploads a host tensor into a guarded device buffer.
    pub fn upload(&self, t: &Tensor) -> Result<DevTensor, GpuError> {
        let bytes = t.to_le_bytes();
        let mut host = vec![GUARD_BYTE; GUARD + bytes.len() + GUARD];
        host[GUARD..GUARD + bytes.len()].copy_from_slice(&bytes);
        let buf = self.stream.clone_htod(&host).map_err(drv("upload"))?;
        Ok(DevTensor {
            shape: t.shape.clone(),
            dtype: t.dtype(),
            len: bytes.len(),
            buf,
        })
    }

    /// An output buffer filled with `poison` (every byte), surrounded by guards.
    pub fn alloc_poisoned(
        &self,
        shape: &[usize],
        dtype: DType,
        poison: u8,
    ) -> Result<DevTensor, GpuError> {
        let len = shape.iter().product::<usize>() * dtype.size();
        let mut host = vec![GUARD_BYTE; GUARD + len + GUARD];
        host[GUARD..GUARD + len].fill(poison);
        let buf = self.stream.clone_htod(&host).map_err(drv("alloc"))?;
        Ok(DevTensor {
            shape: shape.to_vec(),
            dtype,
            len,
            buf,
        })
    }

    /// Downloads a device tensor; fails if a guard byte changed (an out-of-bounds write).
    pub fn download(&self, d: &DevTensor, what: &str) -> Result<Tensor, GpuError> {
        let host = self.stream.clone_dtoh(&d.buf).map_err(drv("download"))?;
        let bad_front = host[..GUARD].iter().position(|&b| b != GUARD_BYTE);
        let bad_back = host[GUARD + d.len..].iter().position(|&b| b != GUARD_BYTE);
        if let Some(i) = bad_front {
            return Err(GpuError::Guard(format!(
                "'{what}': the guard region {} bytes BEFORE the tensor was overwritten",
                GUARD - i
            )));
        }
        if let Some(i) = bad_back {
            return Err(GpuError::Guard(format!(
                "'{what}': the guard region {i} bytes AFTER the tensor's end was overwritten"
            )));
        }
        Tensor::from_le_bytes(&d.shape, d.dtype, &host[GUARD..GUARD + d.len]).ok_or_else(|| {
            GpuError::Driver(format!(
                "'{what}': downloaded byte count does not match shape"
            ))
        })
    }

    /// A raw device buffer (no guards), for benchmarks and measurement kernels.
    pub fn alloc_raw<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        n: usize,
    ) -> Result<CudaSlice<T>, GpuError> {
        self.stream.alloc_zeros::<T>(n.max(1)).map_err(drv("alloc"))
    }

    /// Median/p10/p90 of `iters` timed calls of `f` (CUDA events around each), after `warmup`.
    pub fn time<F: FnMut() -> Result<(), GpuError>>(
        &self,
        warmup: usize,
        iters: usize,
        mut f: F,
    ) -> Result<Timing, GpuError> {
        for _ in 0..warmup {
            f()?;
        }
        self.sync()?;
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut ms = Vec::with_capacity(iters);
        for _ in 0..iters.max(1) {
            let a = self.ctx.new_event(flags).map_err(drv("event"))?;
            let b = self.ctx.new_event(flags).map_err(drv("event"))?;
            a.record(&self.stream).map_err(drv("event record"))?;
            f()?;
            b.record(&self.stream).map_err(drv("event record"))?;
            ms.push(a.elapsed_ms(&b).map_err(drv("event elapsed"))? as f64);
        }
        Ok(Timing::from_ms(ms))
    }
}

/// Timing statistics in microseconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Timing {
    pub median_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
    pub samples: usize,
}

impl Timing {
    pub fn from_ms(mut ms: Vec<f64>) -> Timing {
        ms.sort_by(f64::total_cmp);
        let q = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize] * 1e3;
        Timing {
            median_us: q(0.5),
            p10_us: q(0.1),
            p90_us: q(0.9),
            samples: ms.len(),
        }
    }
}

/// A tensor on the device: `len` payload bytes between two guard regions.
pub struct DevTensor {
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub len: usize,
    pub buf: CudaSlice<u8>,
}

impl DevTensor {
    /// The payload (guards excluded) as a kernel argument.
    pub fn view(&self) -> CudaView<'_, u8> {
        self.buf.slice(GUARD..GUARD + self.len.max(1))
    }
    pub fn view_mut(&mut self) -> CudaViewMut<'_, u8> {
        self.buf.slice_mut(GUARD..GUARD + self.len.max(1))
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Device address of the payload.
    pub fn ptr(&self, stream: &CudaStream) -> u64 {
        let (p, _sync) = self.buf.device_ptr(stream);
        p + GUARD as u64
    }
}

/// Launch helper: `grid` blocks of `block` threads, `smem` dynamic shared bytes.
pub fn cfg(grid: u32, block: u32, smem: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (grid.max(1), 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: smem,
    }
}

/// Re-export for op modules.
pub use cudarc::driver::LaunchArgs;

/// Pushes a device tensor's payload pointer as a kernel argument.
pub fn push_ptr<'a>(args: &mut LaunchArgs<'a>, p: &'a u64) {
    args.arg(p);
}
