//! GPU implementations of the reference ops, one module per op family. Each op lists its kernel
//! versions (first = default) and runs one version on TensorMap inputs with the reference's
//! params (defaults resolved from the reference's `OpDef`, so both sides see the same values).

pub mod causal_conv1d;
pub mod moe;
pub mod noaux_tc_router;
pub mod nvfp4;
pub mod nvfp4_fused;
pub mod philox;
pub mod selective_state_update;
pub mod ssd_chunk_scan;
pub mod ssu_multi_token;

use crate::runtime::Gpu;
use crate::GpuError;
use reference::op::Params;
use reference::TensorMap;

/// Options of one GPU run.
#[derive(Clone, Copy, Debug)]
pub struct RunOpts {
    /// Byte written over every output before the launch (0xFF = NaN for floats, -1 for ints).
    pub poison: u8,
}

impl Default for RunOpts {
    fn default() -> Self {
        RunOpts { poison: 0xFF }
    }
}

/// Runs one version: `(gpu, version, inputs, resolved params, opts) -> outputs`.
pub type RunFn = fn(&Gpu, &str, &TensorMap, &Params, &RunOpts) -> Result<TensorMap, GpuError>;
/// Why a version cannot run these inputs (None: it can).
pub type ApplicableFn = fn(&str, &TensorMap, &Params) -> Option<String>;

/// One op with GPU kernels.
#[derive(Clone)]
pub struct GpuOp {
    pub name: &'static str,
    /// Kernel versions; the first is the default.
    pub versions: &'static [&'static str],
    pub run: RunFn,
    pub applicable: ApplicableFn,
}

impl GpuOp {
    pub fn default_version(&self) -> &'static str {
        self.versions[0]
    }
}

fn always(_: &str, _: &TensorMap, _: &Params) -> Option<String> {
    None
}

/// Every op with GPU kernels.
pub fn all() -> Vec<GpuOp> {
    vec![
        GpuOp {
            name: "noaux_tc_router",
            versions: noaux_tc_router::VERSIONS,
            run: noaux_tc_router::run,
            applicable: noaux_tc_router::applicable,
        },
        GpuOp {
            name: "nvfp4_quantize",
            // v7 first = the default (session 5: 53.7 us at 8192^2 bf16, 87.5% of copy; v4 90.2).
            versions: &["v7", "v4", "v2", "v3", "v1", "v5", "v6", "v8"],
            run: nvfp4::run_quantize,
            applicable: always,
        },
        GpuOp {
            name: "nvfp4_dequantize",
            versions: &["v1"],
            run: nvfp4::run_dequantize,
            applicable: always,
        },
    ]
    .into_iter()
    .chain(philox::ops())
    .chain(nvfp4_fused::ops())
    .chain(causal_conv1d::ops())
    .chain(ssd_chunk_scan::ops())
    .chain(selective_state_update::ops())
    .chain(ssu_multi_token::ops())
    .chain(moe::ops())
    .filter(|o| reference::ops::find(o.name).is_ok())
    .collect()
}

pub fn find(op: &str) -> Result<GpuOp, GpuError> {
    all()
        .into_iter()
        .find(|o| o.name == op)
        .ok_or_else(|| GpuError::NoKernel(op.into()))
}

/// Resolves params against the reference's `OpDef` and checks input names, then runs.
pub fn run_version(
    g: &Gpu,
    op: &GpuOp,
    version: &str,
    inputs: &TensorMap,
    sets: &[(String, String)],
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    if !op.versions.contains(&version) {
        return Err(GpuError::NoVersion {
            op: op.name.into(),
            version: version.into(),
            known: op.versions.join(", "),
        });
    }
    run_unlisted_version(g, op, version, inputs, sets, opts)
}

/// [`run_version`] without the check that `version` is one of the op's listed versions: for
/// variants an op accepts but does not list (the SSU bench sweep variants, which `duet check`
/// should not run on every case). The op's own run function still refuses names it does not know.
pub fn run_unlisted_version(
    g: &Gpu,
    op: &GpuOp,
    version: &str,
    inputs: &TensorMap,
    sets: &[(String, String)],
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    let def = reference::ops::find(op.name)?;
    def.check_input_names(inputs)?;
    let p = Params::resolve(&def, sets)?;
    if let Some(why) = (op.applicable)(version, inputs, &p) {
        return Err(GpuError::Unsupported(format!(
            "{} {version}: {why}",
            op.name
        )));
    }
    (op.run)(g, version, inputs, &p, opts)
}

/// Grid size for a grid-stride loop over `n` items with `block` threads.
pub fn grid_for(g: &Gpu, n: u64, block: u32) -> u32 {
    let want = n.div_ceil(block as u64).max(1);
    want.min(g.sm_count as u64 * 32).min(u32::MAX as u64) as u32
}
