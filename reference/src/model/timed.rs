//! [`TimedKernels`]: a [`ModelKernels`] wrapper that times every call of the backend it wraps,
//! per op (and per weight shape for `linear`), so a decode benchmark can say where a step's time
//! goes (`duet e2e --bench-decode N`: `op_breakdown` in the JSON).
//!
//! Times are host wall-clock per call. The GPU backend returns host vectors (its results are
//! downloaded before a call returns), so a call's time includes its uploads, launches and
//! downloads; work a backend left queued would be charged to the next call that waits for it.
//! `routed_experts` is timed as one call (the inner backend's own linear / relu² calls inside
//! it are not counted again).

use super::kernels::{
    mamba_decode_default, AttnGeometry, LayerState, MambaStep, ModelKernels, Route, SsmDims,
    SsmParams, SsmRows,
};
use super::weights::Mat;
use super::ModelError;
use crate::ops::noaux_tc_router::RouterConfig;
use crate::ops::ssd_chunk_scan::{SsdArgs, SsdOutput};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Calls and accumulated seconds of one op key.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpTime {
    pub calls: u64,
    pub seconds: f64,
}

/// Times each call of `inner` (see the module doc).
pub struct TimedKernels {
    inner: Arc<dyn ModelKernels>,
    times: Mutex<BTreeMap<String, OpTime>>,
}

impl TimedKernels {
    pub fn new(inner: Arc<dyn ModelKernels>) -> TimedKernels {
        TimedKernels {
            inner,
            times: Mutex::new(BTreeMap::new()),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &Arc<dyn ModelKernels> {
        &self.inner
    }

    /// Forgets every time recorded so far (e.g. after a warm-up pass).
    pub fn reset(&self) {
        if let Ok(mut t) = self.times.lock() {
            t.clear();
        }
    }

    /// The times so far, most time first.
    pub fn snapshot(&self) -> Vec<(String, OpTime)> {
        let mut v: Vec<(String, OpTime)> = self
            .times
            .lock()
            .map(|t| t.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default();
        v.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
        v
    }

    fn time<T>(&self, key: impl FnOnce() -> String, f: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let r = f();
        let dt = t0.elapsed().as_secs_f64();
        if let Ok(mut t) = self.times.lock() {
            let e = t.entry(key()).or_default();
            e.calls += 1;
            e.seconds += dt;
        }
        r
    }
}

impl ModelKernels for TimedKernels {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn as_dyn(&self) -> &dyn ModelKernels {
        self
    }
    fn linear(
        &self,
        x: &[f32],
        t: usize,
        w: &Mat,
        bias: Option<&[f32]>,
    ) -> Result<Vec<f32>, ModelError> {
        self.time(
            || format!("linear {}x{}", w.rows(), w.cols()),
            || self.inner.linear(x, t, w, bias),
        )
    }
    fn rmsnorm(&self, x: &[f32], w: &[f32], eps: f32) -> Result<Vec<f32>, ModelError> {
        self.time(|| "rmsnorm".into(), || self.inner.rmsnorm(x, w, eps))
    }
    fn gated_rmsnorm(
        &self,
        x: &[f32],
        z: &[f32],
        w: &[f32],
        group: usize,
        eps: f32,
    ) -> Result<Vec<f32>, ModelError> {
        self.time(
            || "gated_rmsnorm".into(),
            || self.inner.gated_rmsnorm(x, z, w, group, eps),
        )
    }
    fn relu2(&self, x: &[f32]) -> Result<Vec<f32>, ModelError> {
        self.time(|| "relu2".into(), || self.inner.relu2(x))
    }
    fn causal_conv1d(
        &self,
        x: &[f32],
        t: usize,
        dim: usize,
        weight: &[f32],
        bias: Option<&[f32]>,
        k: usize,
        init: Option<&[f32]>,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        self.time(
            || "causal_conv1d".into(),
            || self.inner.causal_conv1d(x, t, dim, weight, bias, k, init),
        )
    }
    fn causal_conv1d_step(
        &self,
        x: &[f32],
        t: usize,
        dim: usize,
        state: &mut [f32],
        weight: &[f32],
        bias: Option<&[f32]>,
        k: usize,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        self.time(
            || "causal_conv1d_step".into(),
            || {
                self.inner
                    .causal_conv1d_step(x, t, dim, state, weight, bias, k)
            },
        )
    }
    fn mamba_decode(
        &self,
        st: &mut LayerState,
        m: &MambaStep<'_>,
        xbc: &[f32],
        dt: &[f32],
    ) -> Result<Vec<f32>, ModelError> {
        // A backend's own step is timed as one op; the default composition times its conv
        // step and state update as they run.
        if self.inner.own_mamba_decode() {
            self.time(
                || "mamba_decode".into(),
                || self.inner.mamba_decode(st, m, xbc, dt),
            )
        } else {
            mamba_decode_default(self, st, m, xbc, dt)
        }
    }
    fn own_mamba_decode(&self) -> bool {
        self.inner.own_mamba_decode()
    }
    fn ssd_chunk_scan(&self, args: &SsdArgs<'_>, chunk: usize) -> Result<SsdOutput, ModelError> {
        self.time(
            || "ssd_chunk_scan".into(),
            || self.inner.ssd_chunk_scan(args, chunk),
        )
    }
    fn ssu_step(
        &self,
        dims: SsmDims,
        state: &mut [f32],
        p: &SsmParams<'_>,
        r: &SsmRows<'_>,
    ) -> Result<Vec<f32>, ModelError> {
        self.time(
            || "ssu_step".into(),
            || self.inner.ssu_step(dims, state, p, r),
        )
    }
    fn ssu_verify(
        &self,
        dims: SsmDims,
        state: &mut [f32],
        t: usize,
        p: &SsmParams<'_>,
        r: &SsmRows<'_>,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        self.time(
            || "ssu_verify".into(),
            || self.inner.ssu_verify(dims, state, t, p, r),
        )
    }
    fn route(
        &self,
        logits: &[f32],
        bias: &[f32],
        tokens: usize,
        cfg: &RouterConfig,
    ) -> Result<Vec<Route>, ModelError> {
        self.time(
            || "route".into(),
            || self.inner.route(logits, bias, tokens, cfg),
        )
    }
    fn attention(
        &self,
        q: &[f32],
        keys: &[f32],
        vals: &[f32],
        p0: usize,
        g: AttnGeometry,
    ) -> Result<Vec<f32>, ModelError> {
        self.time(
            || "attention".into(),
            || self.inner.attention(q, keys, vals, p0, g),
        )
    }
    fn routed_experts(
        &self,
        lat: &[f32],
        t: usize,
        topk_indices: &[i64],
        topk_weights: &[f32],
        k: usize,
        experts: &[(Mat, Mat)],
    ) -> Result<Vec<f32>, ModelError> {
        self.time(
            || "routed_experts".into(),
            || {
                self.inner
                    .routed_experts(lat, t, topk_indices, topk_weights, k, experts)
            },
        )
    }
}
