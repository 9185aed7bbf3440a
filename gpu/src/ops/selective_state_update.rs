//! `selective_state_update` (Mamba-2 decode) on the GPU (gpu/kernels/selective_state_update.cu),
//! against reference/src/ops/selective_state_update.rs.
//!
//! Inputs are validated by the reference's own parser (`parse_inputs` / `parse_config` /
//! `resolve_slots`: the same shapes, broadcast forms, slot checks and error messages), so the
//! kernel only ever sees consistent sizes. The state is uploaded in its own dtype and updated in
//! place on the device; small operands go up as f32.

use super::{GpuOp, RunOpts};
use crate::runtime::{cfg, Gpu};
use crate::GpuError;
use cudarc::driver::{DeviceRepr, PushKernelArg};
use reference::op::{Inputs, Params};
use reference::ops::selective_state_update::{
    parse_config, parse_inputs, resolve_slots, OutFrom, PadMode, Rounding, SrMapping,
};
use reference::{DType, Tensor, TensorMap};

const OP: &str = "selective_state_update";
/// Warps (d rows) per block.
const WARPS: u32 = 4;
/// dstate limit of v1: 32 lanes x 16 register slots.
pub const MAX_DSTATE: usize = 512;

/// The versions `run` takes by name (besides the sweep variants).
pub const VERSIONS: &[&str] = &[
    "auto", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12",
];

/// v11's sweep forms (bf16, nearest): `x11_bf16_c<chunk vectors a lane>_m<blocks an SM asked
/// of ptxas>[_r: rolling reloads][_s<stages>: the loads staged in shared memory through
/// cp.async][_i: whole tiles dealt round-robin over the warps first (session 28's walk)][_g<G>:
/// groups of G consecutive tiles dealt round-robin (session 29)]`; v11 itself is c8 / m3.
/// The v11 kernels (`ssu_<name>`) that also come in a bf16 small-operand form `ssu_<name>_xb`
/// (session 30): x, B, C, z and `out` in bf16, as Nemotron's mixer passes them and as the issue's
/// speed targets state the shape, instead of f32 copies (half of those bytes). The same f32
/// values reach the arithmetic, so the same bits. Versions `<v11 form>_xb` (`v11_xb`,
/// `x11_bf16_c4_m4_xb`, ...) run them by name when x is bf16 and every x, B, C, z value is a
/// bf16 value; `auto` takes them where they measured faster ([`auto_small_bf16`]); the bench
/// times `<version>_xb`.
pub const V11_XB: &[&str] = &[
    "v11_f32",
    "v11_bf16",
    "v11_f16",
    "v11_f16_sr",
    "x11_bf16_c4_m4",
    "x11_bf16_c8_m3_s3_i",
    "x11_bf16_c8_m3_s3_i_b",
    "v12_f32",
    "v12_bf16",
    "v12_f16",
    "v12_f16_sr",
    "x12_bf16_m2",
];

/// The v11 / v12 form of a `<form>_xb` version name (None: not one).
fn xb_base(version: &str) -> Option<&str> {
    version
        .strip_suffix("_xb")
        .filter(|b| is_v11(b) || is_v12(b))
}

/// Whether `auto` runs its v11 kernel's bf16 small-operand form for bf16 inputs. Session 30 call
/// 2 (graph replay, two runs, Super shape): faster with dt / D / dt_bias per head at 4 tiles an
/// SM and more (bf16 state batch 256 284.2-284.3 vs 287.7-287.8 us, batch 64 76.0-76.1 vs
/// 76.7; f32 state batch 256 554.5-555.4 vs 561.1-561.6), slower per dim (batch 256 303.3-304.1
/// vs 298.7-299.0) and at batch 1 (c4_m4 4.68-4.72 vs 4.58-4.60).
/// Session 31: with a bf16 state also at two tiles an SM and fewer, where auto runs v12 / its
/// m2 form, and there with either dt layout (call 3, dt per head: batch 1 v12 3.49 / 3.55 vs
/// 3.93 / 3.94 us, batch 2 m2 5.39 / 5.39 vs 5.60 / 5.61; call 4, batch 1 with dt / D /
/// dt_bias per dim: 3.72 vs 4.19).
pub fn auto_small_bf16(s: &AutoShape, bias_per_dim: bool) -> bool {
    let tiles = (s.batch * s.nheads) as u64;
    if s.state == DType::BF16 && tiles <= 2 * s.sm_count {
        return true;
    }
    !s.dt_per_dim && !bias_per_dim && tiles >= 4 * s.sm_count
}

/// Whether the bf16 small-operand kernels apply to these inputs: x is bf16 (so `out` is) and x,
/// B, C and z hold only bf16 values (bit for bit, NaNs included).
fn xb_inputs(parsed: &reference::ops::selective_state_update::Parsed) -> bool {
    use reference::num::bf16::{bf16_bits_to_f32, f32_to_bf16_bits};
    let exact = |v: &[f32]| {
        v.iter()
            .all(|&f| bf16_bits_to_f32(f32_to_bf16_bits(f)).to_bits() == f.to_bits())
    };
    parsed.x_dtype == DType::BF16
        && exact(&parsed.x)
        && exact(&parsed.b)
        && exact(&parsed.c)
        && parsed.z.as_deref().is_none_or(exact)
}

/// Whether the kernel `fname` of v11 form `version` has a bf16 small-operand form `<fname>_xb`.
fn has_xb(version: &str, fname: &str) -> bool {
    (is_v11(version) || is_v12(version))
        && V11_XB.contains(&fname.strip_prefix("ssu_").unwrap_or(fname))
}

pub const V11_SWEEP: &[&str] = &[
    "x11_bf16_c4_m4",
    "x11_bf16_c2_m4",
    "x11_bf16_c2_m4_r",
    "x11_bf16_c4_m4_s4",
    "x11_bf16_c4_m4_s6",
    "x11_bf16_c8_m3_s3",
    "x11_bf16_c8_m3_s3_i",
    "x11_bf16_c4_m4_s4_i",
    "x11_bf16_c8_m3_s3_g4",
    "x11_bf16_c8_m3_s3_g16",
    // session 30: c8_m3_s3_i storing whole chunks from its ring with the bulk copy engine
    "x11_bf16_c8_m3_s3_i_b",
];

/// v11 (persistent warps, the state streamed into registers; selective_state_update.cu): its
/// dstate is compiled in, a lane holds two rows' values (dim <= 64), a chunk is
/// (32 / lanes a row) x CH rows of one tile and a tile is whole chunks. CH: 8 for v11, else the
/// sweep form's.
pub fn v11_ok(version: &str, dim: usize, dstate: usize, state_dt: DType) -> Option<String> {
    if state_dt == DType::I16 {
        return Some(format!(
            "{version} takes an f32 / bf16 / f16 state (an int16 state runs on v9)"
        ));
    }
    if dstate != V9_DSTATE {
        return Some(format!(
            "{version} takes dstate {V9_DSTATE} (got {dstate}); v8 runs any"
        ));
    }
    let rpc = v11_rows_per_chunk(version, state_dt);
    if dim == 0 || dim > 64 || !dim.is_multiple_of(rpc) {
        return Some(format!(
            "{version} takes dim <= 64 in whole chunks of {rpc} rows (got dim {dim}); v9 runs any"
        ));
    }
    None
}

/// A v11 form's chunk depth CH (16-byte vectors a lane): `x11_bf16_c<CH>_...`, else v11's 8.
pub fn v11_chunk_vectors(version: &str) -> usize {
    version
        .strip_prefix("x11_bf16_c")
        .and_then(|r| r.split('_').next())
        .and_then(|c| c.parse::<usize>().ok())
        .unwrap_or(8)
}

/// A staged v11 form's ring depth (`..._s<stages>`: chunks a warp in shared memory); None for
/// the forms that keep their chunks in registers.
pub fn v11_stages(version: &str) -> Option<usize> {
    version
        .strip_prefix("x11_bf16_")?
        .split('_')
        .find_map(|t| t.strip_prefix('s').and_then(|n| n.parse::<usize>().ok()))
}

/// Rows of a v11 chunk: (32 / lanes a row) x vectors a lane.
fn v11_rows_per_chunk(version: &str, state_dt: DType) -> usize {
    let lanes_per_row = V9_DSTATE / (16 / state_dt.size().max(1));
    (32 / lanes_per_row.clamp(1, 32)) * v11_chunk_vectors(version)
}

/// What `auto` looks at: the shape, the state's type and rounding, whether dt / A are per dim /
/// full, and the SM count.
#[derive(Clone, Copy, Debug)]
pub struct AutoShape {
    pub batch: usize,
    pub nheads: usize,
    pub dim: usize,
    pub dstate: usize,
    pub state: DType,
    /// stochastic rounding of an f16 state
    pub sr: bool,
    pub dt_per_dim: bool,
    /// A as (nheads, dim, dstate) rather than per head
    pub a_full: bool,
    pub sm_count: u64,
}

/// The version `auto` runs (pure, so its choices are unit-tested without a GPU).
///
/// auto: v5 where v3's layout conditions hold (v3_ok), else v1. v5 (v3 with B/C in registers,
/// hardware bf16 rounding, FMA in `out`) measured 734.6 / 186.2 us vs v3's 817.7 / 209.6 us at
/// batch 256 / 64, bf16 per head (H200, session 3, docs/measurements/h200_session3_presets.json).
/// Earlier, measured on the H200 (docs/measurements/h200_ssu_v1_v3_bench.jsonl, bf16 state): v3
/// 10.0 / 208 / 815 us vs v1 20.3 / 1020 / 4063 us at batch 1 / 64 / 256. v2 is never picked
/// (slower than v1), nor v4 (19.5 / 297 / 1199 us: bit-exact, slower than v3;
/// docs/measurements/h200_session2_presets.json).
///
/// A per head (Nemotron-H): v8 (the bulk-copy producer/consumer kernel, v7 with the producer's
/// work before its wait) once there are enough (batch row, head) tiles to fill the SMs several
/// times, else v6 (since session 12 v10); v9 there for a 16-bit state at dstate 128 (its
/// compiled-in lanes per row; session 24: held to 5 blocks an SM with unrolled row passes, 3.458
/// TB/s effective at batch 256 against v8's 3.136 in the same run). H200, session 4, bf16, per
/// head (docs/measurements/h200_session4_call4_presets.json): batch 256 v8 334.5 us, v7 368.7,
/// v6 567.8, v5 726.0; batch 64 (graph) 86.9 / 94.6 / 145.4 / 184.2 us; batch 1 (128 tiles;
/// call 3) v6 7.1 us, v7 8.0.
///
/// An f16 state (either rounding) on v9 too: session 25 call 6 (batch 256 / 64,
/// docs/measurements/h200_session25_call6_ssu_f16.json) v9 337.2 / 88.7 us against v8's 350.7 /
/// 91.8 with nearest, 854.1 / 215.2 against 891.2 / 225.1 with stochastic rounding (Philox 10),
/// 725.5 / 182.9 against 775.8 / 194.6 (Philox 5); an int16 state too: call 8
/// (h200_session25_call8_ssu_i16.json) v9 418.1 us against v8's 532.2 at batch 256.
///
/// Session 27 (call 1 repeated session 26's call 2, `duet bench --shape ssu_v11`,
/// docs/measurements/h200_session27_call1_ssu_v11.json; the two runs' numbers side by side):
/// - an f32 state on v11: 586.6 / 585.2 us at batch 256 against v8's 622.3 / 608.6 (95.3% of
///   copy);
/// - a bf16 state with round-to-nearest and dt per head on x11_bf16_c4_m4 up to 128 tiles an
///   SM: batch 64 x 128 heads (graph) 82.2 / 81.9 us against v9's 85.0 / 83.9. At batch 256 the
///   two tied (319.9 / 319.1 against 321.0 / 318.2);
/// - session 27's v11 (hardware-only conversions, no 64-bit division a chunk; calls 2 and 3,
///   docs/measurements/h200_session27_call{2_ssu_v11,3_ssu_v11_b256}.json): bf16 at batch 256
///   v11 313.7 / 313.0 us, c4_m4 313.7 / 314.0, v9 321.5 / 320.3, so v11 above 128 tiles an SM;
///   batch 64 c4_m4 80.2, v11 80.8, v9 84.2; an f16 state with round-to-nearest and dt per head
///   on v11 too: 311.7 against v9's 341.9 (call 2; call 1's v11 f16 with the per-vector NaN
///   branches ran 376.1);
/// - fewer tiles than 4 an SM, bf16 with round-to-nearest and dt per head: v11, batch 1 (graph)
///   5.2 / 5.2 us against v10's 5.6 / 5.5 (session 27 call 2: 4.7 against 5.6) (v10: v6's body, 16 rows a block, the state / z / D loads before
///   the prologue; session 12 call 2 had it at 5.48 us against v6's 7.01 and v9's 6.75).
///
/// Session 28 (call 2, `duet bench --shape ssu_v11_b256` twice and `--shape ssu_v11`,
/// docs/measurements/h200_session28_call2_*): the interleaved walk (whole tiles dealt
/// round-robin over the warps first) on the staged c8 form, x11_bf16_c8_m3_s3_i, for a bf16
/// state with round-to-nearest and dt per head from 4 tiles an SM: batch 256 292.6 / 293.9 /
/// 298.0 us (96.8 / 96.5 / 95.7% of copy) against c8_m3_s3's 309.0 / 307.7 / 308.9 and v11's
/// 312.9 / 314.8 / 314.4; batch 64 (graph) 76.9 us against 79.5 / 81.0. Calls 3-4 (v11 itself
/// interleaved since; h200_session28_call{3,4}_*): 291.7 / 292.8 / 294.6 us at batch 256 against
/// v11's 296.2 / 294.7 / 296.4 and v9's 318.4 / 319.0 / 319.5, 76.6 / 76.2 / 76.7 at 64; with
/// dt / D / dt_bias per dim too (call 4, one run): 305.9 us against v11's 315.9 and v9's 367.7.
/// An f32 state on v11 interleaved: 563.6 / 563.6 us (98.5% of copy) against v8's 605.8 /
/// 604.8; f16 with round-to-nearest and dt per head on v11: 295.4 / 294.9 against v9's 338.1 /
/// 339.4.
///
/// Session 29 (call 2, `duet bench --shape ssu_v11` twice, graph replay at every batch,
/// docs/measurements/h200_session29_call2_*): below 4 tiles an SM (batch 1), a bf16 state with
/// round-to-nearest and dt per head on x11_bf16_c4_m4 (chunks of 8 rows: 1,024 warps share the
/// 128 tiles instead of v11's 512): 4.54 / 4.56 us against v11's 4.70 / 4.72 and c2_m4's 4.70 /
/// 4.73 (programmatic edges: 4.23 / 4.29 against 4.41 / 4.42). Batch 256 as a graph: c8_m3_s3_i
/// 287.1 / 287.1 us, v11 290.6 / 290.9.
///
/// Session 30 (call 3, `duet bench --shape ssu_v11_b256` twice and `--shape ssu_v11` at batch
/// 64, docs/measurements/h200_session30_call3_*): c8_m3_s3_i storing whole chunks from its ring
/// with the bulk copy engine (`_b`), bf16 state, dt per head, graph replay: batch 256 285.7 /
/// 286.2 us against 287.8 / 288.0 (bf16 small operands, `_xb`: 281.6 / 281.9 against 283.6 /
/// 284.3; FlashInfer 0.7.4's vertical kernel 280.2 in the same call), batch 64 77.1 against
/// 77.5 (`_xb` 76.5 against 76.0): `_b` from 128 tiles an SM with dt per head (per dim not
/// measured).
///
/// Session 31 (call 2, `duet bench --shape ssu_v11` twice with `DUET_SSU_BATCH=1,2,4,8,16`,
/// docs/measurements/h200_session31_call2_*): v12 (one 512-thread block a tile), bf16 state,
/// dt per head, graph replay: batch 1 4.21 / 4.10 us (bf16 small operands 3.97 / 3.90;
/// programmatic edges 3.47 / 3.27) against c4_m4's 4.59 / 4.60 (FlashInfer's horizontal kernel
/// 4.01 in the same call), but batch 2 7.60 against 6.06 (one 512-thread block an SM at ~104
/// registers: two waves), 4 13.3 against 9.1, 8 24.5 against c8_m3_s3_i's 13.2: v12 at one
/// tile an SM and fewer.
/// Call 3 (the loads reordered: B / C and the rows' operands before the slot-dependent state
/// loads; two runs, docs/measurements/h200_session31_call3_*): batch 1 v12 3.93 / 3.94 us,
/// `_xb` 3.49 / 3.55 (auto's preset: 3.55, programmatic edges 2.82), c4_m4 4.54 / 4.57; dt per
/// dim v12 4.13 / 4.09 against v11's 5.99 (auto was v10: 5.64 in the preset); an f32 state v12
/// 4.87 / 4.89 against v10's 6.62 / 6.61 and v11's 5.97; batch 2 the m2 form (two blocks an
/// SM, 64 registers) 5.61 / 5.60, `_xb` 5.39 / 5.39, against c4_m4's 6.07 / 6.08; batch 4 m2
/// `_xb` 9.19 / 9.20 against c4_m4's 9.12 / 9.17; batch 8 / 16 c8_m3_s3_i 13.2 / 23.4 against
/// m2 `_xb`'s 15.8 / 30.3. So: v12 at one tile an SM and fewer (bf16 state, either dt layout;
/// f32 with dt per head), its m2 form up to two (bf16, dt per head).
/// Call 5: an f16 state (round-to-nearest, dt per head) at batch 1 on v12 3.86 us against v10's
/// 5.41: v12 there too (stochastic rounding and f16 with dt per dim not measured: v10).
pub fn auto_version(s: &AutoShape) -> &'static str {
    let layout_ok = v3_ok(s.dstate, s.state).is_none();
    let tiles = (s.batch * s.nheads) as u64;
    let v11 = v11_ok("v11", s.dim, s.dstate, s.state).is_none();
    let c8s3i = v11_ok("x11_bf16_c8_m3_s3_i", s.dim, s.dstate, s.state).is_none();
    let c4 = v11_ok("x11_bf16_c4_m4", s.dim, s.dstate, s.state).is_none();
    if !layout_ok {
        return "v1";
    }
    if s.a_full {
        return "v5";
    }
    if tiles >= 4 * s.sm_count && ssu7_plan(s.dim, s.dstate, s.state.size(), None).is_ok() {
        let nearest_per_head = !s.sr && !s.dt_per_dim;
        if s.state == DType::F32 && v11 {
            "v11"
        } else if s.state == DType::BF16 && !s.sr && c8s3i {
            if tiles >= 128 * s.sm_count && !s.dt_per_dim {
                "x11_bf16_c8_m3_s3_i_b"
            } else {
                "x11_bf16_c8_m3_s3_i"
            }
        } else if s.state == DType::F16 && nearest_per_head && v11 {
            "v11"
        } else if s.state != DType::F32 && s.dstate == V9_DSTATE {
            "v9"
        } else {
            "v8"
        }
    } else if tiles <= s.sm_count
        && !s.sr
        && v12_ok(s.dstate, s.state).is_none()
        && (s.state == DType::BF16 || (matches!(s.state, DType::F32 | DType::F16) && !s.dt_per_dim))
    {
        "v12"
    } else if tiles <= 2 * s.sm_count
        && s.state == DType::BF16
        && !s.sr
        && !s.dt_per_dim
        && v12_ok(s.dstate, s.state).is_none()
    {
        "x12_bf16_m2"
    } else if s.state == DType::BF16 && !s.sr && !s.dt_per_dim && c4 {
        "x11_bf16_c4_m4"
    } else if s.state == DType::BF16 && !s.sr && !s.dt_per_dim && v11 {
        "v11"
    } else {
        "v10"
    }
}

/// v12's sweep forms (bf16, nearest): `x12_bf16_m<blocks an SM asked of ptxas>` (v12 itself
/// asks for 1: up to 128 registers a thread).
pub const V12_SWEEP: &[&str] = &["x12_bf16_m2"];

fn is_v12(version: &str) -> bool {
    version == "v12" || V12_SWEEP.contains(&version)
}

fn is_v11(version: &str) -> bool {
    version == "v11" || V11_SWEEP.contains(&version)
}

pub fn ops() -> Vec<GpuOp> {
    vec![GpuOp {
        name: OP,
        versions: VERSIONS,
        run,
        applicable,
    }]
}

/// v9's dstate (its consumers' lanes per row are compiled in: 128 / 8 for the 16-bit states,
/// 128 / 4 for f32; the Nemotron-H / Super state size).
pub const V9_DSTATE: usize = 128;

/// v2 limits: dstate <= 256 (8 register slots x 32 lanes x 4 rows), dim <= 2048 (shared memory).
pub const V2_MAX_DSTATE: usize = 256;
pub const V2_MAX_DIM: usize = 2048;

fn v2_ok(dim: usize, dstate: usize) -> Option<String> {
    if dstate > V2_MAX_DSTATE {
        Some(format!("dstate {dstate} > {V2_MAX_DSTATE}"))
    } else if dim > V2_MAX_DIM {
        Some(format!("dim {dim} > {V2_MAX_DIM}"))
    } else {
        None
    }
}

/// v3 (specialised per state format, 16-byte state accesses): each lane owns VEC = 16 / element
/// size consecutive state elements; dstate / VEC lanes per row must be a power of two <= 32
/// (f32: dstate 4..128, 16-bit formats: 8..256).
pub fn v3_ok(dstate: usize, state_dt: DType) -> Option<String> {
    let vec = 16 / state_dt.size().max(1);
    let nvec = dstate / vec;
    if !dstate.is_multiple_of(vec) || !nvec.is_power_of_two() || nvec > 32 {
        return Some(format!(
            "dstate {dstate} with a {state_dt} state: v3 needs dstate = {vec} x a power of two <= 32 (16-byte vectors, one per lane)"
        ));
    }
    None
}

/// Rows per v3 / v4 block: (128 threads / lanes per row) x rows per thread (v3: 4; v4: 8 for
/// the 16-bit formats, 4 for f32), as the kernels' RPT template argument.
fn v3_rows_per_block(dstate: usize, state_dt: DType, version: &str) -> usize {
    let nvec = dstate / (16 / state_dt.size().max(1));
    let rpt = if version == "v4" && state_dt.size() == 2 {
        8
    } else if version == "v10" {
        2
    } else {
        4
    };
    (128 / nvec.clamp(1, 32)) * rpt
}

pub fn applicable(version: &str, inputs: &TensorMap, _p: &Params) -> Option<String> {
    let st = inputs.get("state")?;
    let dstate = *st.shape.last()?;
    if dstate > MAX_DSTATE {
        return Some(format!(
            "dstate {dstate} > {MAX_DSTATE} (v1 keeps a row in registers)"
        ));
    }
    if version == "v2" {
        let dim = st.shape.get(st.rank().checked_sub(2)?).copied()?;
        return v2_ok(dim, dstate);
    }
    if (["v6", "v7", "v8", "v9", "v10"].contains(&version)
        || is_perhead_sweep(version)
        || is_v11(version)
        || is_v12(version))
        && inputs.get("A").is_some_and(|a| a.rank() != 1)
    {
        return Some(format!(
            "{version} takes A per head (nheads,); a full A runs on v1-v5"
        ));
    }
    if version == "v7" || version == "v8" || version == "v9" {
        let dim = st.shape.get(st.rank().checked_sub(2)?).copied()?;
        if let Some(why) = v3_ok(dstate, st.dtype()) {
            return Some(why);
        }
        if version == "v9" && dstate != V9_DSTATE {
            return Some(format!(
                "v9 takes dstate {V9_DSTATE} (got {dstate}); v8 runs any"
            ));
        }
        return ssu7_plan(dim, dstate, st.dtype().size(), None).err();
    }
    if ["v3", "v4", "v5", "v6", "v10"].contains(&version) {
        return v3_ok(dstate, st.dtype());
    }
    if is_v12(version) {
        if version != "v12" && st.dtype() != DType::BF16 {
            return Some(format!("{version} takes a bf16 state"));
        }
        return v12_ok(dstate, st.dtype());
    }
    if is_v11(version) {
        let dim = st.shape.get(st.rank().checked_sub(2)?).copied()?;
        if V11_SWEEP.contains(&version) && st.dtype() != DType::BF16 {
            return Some(format!("{version} takes a bf16 state"));
        }
        return v11_ok(version, dim, dstate, st.dtype());
    }
    None
}

/// v7's shared-memory ring (gpu/kernels/selective_state_update.cu, `ssu7_layout`): one stage =
/// the (batch row, head) state tile + B + C (f32) + six f32 per-row values, 16-byte aligned,
/// + 16 bytes for the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ssu7Plan {
    pub stages: usize,
    pub stage_bytes: usize,
    pub smem_bytes: usize,
    pub blocks_per_sm: usize,
}

/// Threads of a v7 block: one producer warp + 4 consumer warps (the sweep's v7w2 / v7w8: 2 / 8).
pub const SSU7_THREADS: u32 = 160;

/// Threads of a v7 / v8 version's block (v7w2, v7w8: 2 / 8 consumer warps; else 4).
fn ssu7_threads(version: &str) -> u32 {
    match version {
        "v7w2" => 96,
        "v7w8" => 288,
        _ => SSU7_THREADS,
    }
}
/// Dynamic shared memory one block may ask for on sm_90 (227 KiB) and an SM's total (228 KiB,
/// 1 KiB reserved per block).
const SMEM_BLOCK_MAX: usize = 227 * 1024;
const SMEM_SM: usize = 228 * 1024;

/// Stages per block (default 2) and the resident blocks per SM that the shared memory allows
/// (the launch takes the smaller of that and the driver's occupancy for the registers).
/// Default 2: at batch 256 bf16 on the H200 (session 4, docs/measurements/
/// h200_session4_call2_presets.json) 2 stages ran in 379.4 us, 3 in 394.5, 4 in 450.8, 5
/// (~96 KiB per block, the first default) in 596.4, 8 in 1084.0: fewer stages = more resident
/// blocks, and the producer's per-tile prologue, not the bytes in flight, was the limit.
pub fn ssu7_plan(
    dim: usize,
    dstate: usize,
    esize: usize,
    stages: Option<usize>,
) -> Result<Ssu7Plan, String> {
    if dim == 0 || dim > 1024 {
        return Err(format!("v7: dim {dim} outside 1..=1024"));
    }
    let tile = dim * dstate * esize;
    let stage_bytes = (tile + 8 * dstate + 24 * dim).div_ceil(16) * 16 + 16;
    let stages = stages.unwrap_or(2);
    // The kernel's barrier header: full[stages] + empty[stages], rounded up to 128 bytes.
    let header = (16 * stages).div_ceil(128) * 128;
    let smem_bytes = header + stages * stage_bytes;
    if stages < 1 || smem_bytes > SMEM_BLOCK_MAX {
        return Err(format!(
            "v7: {stages} stages of {stage_bytes} bytes (state tile dim {dim} x dstate {dstate} x {esize} bytes) need {smem_bytes} bytes of shared memory, more than {SMEM_BLOCK_MAX}"
        ));
    }
    if tile >= 1 << 20 {
        return Err(format!(
            "v7: a {tile}-byte state tile exceeds the mbarrier transaction count"
        ));
    }
    let blocks_per_sm = (SMEM_SM / (smem_bytes + 1024)).clamp(1, 16);
    Ok(Ssu7Plan {
        stages,
        stage_bytes,
        smem_bytes,
        blocks_per_sm,
    })
}

/// Kernel parameters (`struct SsuParams` in the .cu file: 22 x 64-bit, same order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SsuParams {
    pub batch: i64,
    pub nheads: i64,
    pub dim: i64,
    pub dstate: i64,
    pub ngroups: i64,
    pub slots: i64,
    pub pad_slot_id: i64,
    pub dt_per_dim: i64,
    pub a_full: i64,
    pub d_per_dim: i64,
    pub bias_per_dim: i64,
    pub has_d: i64,
    pub has_z: i64,
    pub has_bias: i64,
    pub has_sbi: i64,
    pub softplus: i64,
    pub pad_mode: i64,
    pub out_from: i64,
    pub state_dt: i64,
    pub sr: i64,
    pub sr_mapping: i64,
    pub rounds: i64,
    pub seed: u64,
}

// SAFETY: repr(C) plain-old-data of 64-bit fields, the layout of `SsuParams` in the .cu file.
unsafe impl DeviceRepr for SsuParams {}

fn drv(e: cudarc::driver::DriverError) -> GpuError {
    GpuError::Driver(format!("launch ssu_v1: {e}"))
}

/// The reference's validation of the op's inputs and parameters, and the kernel parameters they
/// give (shared by `run` and the test that holds [`decode_params`] to it).
pub(crate) fn prepare(
    inputs: &TensorMap,
    p: &Params,
) -> Result<(reference::ops::selective_state_update::Parsed, SsuParams), GpuError> {
    let inp = Inputs::new(OP, inputs);
    let conf = parse_config(OP, p)?;
    let parsed = parse_inputs(&inp, false)?;
    let dims = parsed.dims;
    if dims.dstate > MAX_DSTATE {
        return Err(GpuError::Unsupported(format!(
            "{OP} v1: dstate {} > {MAX_DSTATE}",
            dims.dstate
        )));
    }
    let slots = parsed.state.shape[0];
    resolve_slots(parsed.sbi.as_deref(), dims.batch, slots, conf.pad_slot_id)?;
    let state_dt = state_dt_code(parsed.state.dtype());
    let (sr, mapping, rounds, seed) = rounding_fields(conf.rounding);
    let prm = SsuParams {
        batch: dims.batch as i64,
        nheads: dims.nheads as i64,
        dim: dims.dim as i64,
        dstate: dims.dstate as i64,
        ngroups: dims.ngroups as i64,
        slots: slots as i64,
        pad_slot_id: conf.pad_slot_id,
        dt_per_dim: parsed.dt.1 as i64,
        a_full: parsed.a.1 as i64,
        d_per_dim: parsed.d.as_ref().is_some_and(|d| d.1) as i64,
        bias_per_dim: parsed.dt_bias.as_ref().is_some_and(|d| d.1) as i64,
        has_d: parsed.d.is_some() as i64,
        has_z: parsed.z.is_some() as i64,
        has_bias: parsed.dt_bias.is_some() as i64,
        has_sbi: parsed.sbi.is_some() as i64,
        softplus: conf.dt_softplus as i64,
        pad_mode: (conf.pad_mode == PadMode::ComputeFromZeroState) as i64,
        out_from: (conf.out_from == OutFrom::StoredState) as i64,
        state_dt,
        sr,
        sr_mapping: mapping,
        rounds,
        seed,
    };
    Ok((parsed, prm))
}

/// The kernel parameters of the model's decode step (`GpuKernels`' direct decode path): batch 1, one
/// slot, an f32 state, A / D / dt_bias per head, no z, dt_softplus, and the op's defaults for
/// every other parameter (pad slot, pad mode, out, rounding: resolved from the op's own
/// definition, as `duet run` would). A unit test holds them equal to what `run` derives from
/// the same inputs.
pub fn decode_params(
    nheads: usize,
    dim: usize,
    dstate: usize,
    ngroups: usize,
) -> Result<SsuParams, GpuError> {
    // The parameter-derived fields, resolved once per process (the decode step calls this per
    // layer per token).
    static DEFAULTS: std::sync::OnceLock<Result<SsuParams, String>> = std::sync::OnceLock::new();
    let base = DEFAULTS
        .get_or_init(|| {
            let def = reference::ops::find(OP).map_err(|e| e.to_string())?;
            let p = Params::resolve(&def, &[("dt_softplus".to_string(), "true".to_string())])
                .map_err(|e| e.to_string())?;
            let conf = parse_config(OP, &p).map_err(|e| e.to_string())?;
            let (sr, sr_mapping, rounds, seed) = rounding_fields(conf.rounding);
            Ok(SsuParams {
                batch: 1,
                slots: 1,
                pad_slot_id: conf.pad_slot_id,
                dt_per_dim: 0,
                a_full: 0,
                d_per_dim: 0,
                bias_per_dim: 0,
                has_d: 1,
                has_z: 0,
                has_bias: 1,
                has_sbi: 0,
                softplus: conf.dt_softplus as i64,
                pad_mode: (conf.pad_mode == PadMode::ComputeFromZeroState) as i64,
                out_from: (conf.out_from == OutFrom::StoredState) as i64,
                state_dt: state_dt_code(DType::F32),
                sr,
                sr_mapping,
                rounds,
                seed,
                ..SsuParams::default()
            })
        })
        .clone()
        .map_err(GpuError::Unsupported)?;
    Ok(SsuParams {
        nheads: nheads as i64,
        dim: dim as i64,
        dstate: dstate as i64,
        ngroups: ngroups as i64,
        ..base
    })
}

pub fn run(
    g: &Gpu,
    version: &str,
    inputs: &TensorMap,
    p: &Params,
    opts: &RunOpts,
) -> Result<TensorMap, GpuError> {
    // `<v11 form>_xb`: that form's bf16 small-operand kernel (checked below).
    let (version, xb_named) = match xb_base(version) {
        Some(b) => (b, true),
        None => (version, false),
    };
    if !VERSIONS.contains(&version)
        && sweep_rpt(version).is_none()
        && !V7_SWEEP.contains(&version)
        && !V11_SWEEP.contains(&version)
        && !V12_SWEEP.contains(&version)
    {
        return Err(GpuError::NoVersion {
            op: OP.into(),
            version: version.into(),
            known: VERSIONS.join(", "),
        });
    }
    let (parsed, prm) = prepare(inputs, p)?;
    let dims = parsed.dims;
    let sr = prm.sr;
    let sbi = g.upload(&Tensor::from_i64(
        &[dims.batch.max(1)],
        parsed
            .sbi
            .clone()
            .unwrap_or_else(|| vec![0; dims.batch.max(1)]),
    ))?;
    let mut state = g.upload(&parsed.state)?;
    let scale_host = parsed.scale.clone().unwrap_or_else(|| vec![1.0]);
    let mut scale = g.upload(&Tensor::from_f32(&[scale_host.len()], scale_host))?;
    // auto: auto_version (its doc has the measurements behind each choice).
    let state_dtype = parsed.state.dtype();
    let auto_shape = AutoShape {
        batch: dims.batch,
        nheads: dims.nheads,
        dim: dims.dim,
        dstate: dims.dstate,
        state: state_dtype,
        sr: sr == 1,
        dt_per_dim: parsed.dt.1,
        a_full: parsed.a.1,
        sm_count: g.sm_count as u64,
    };
    let chosen = match version {
        "v2" => {
            if let Some(why) = v2_ok(dims.dim, dims.dstate) {
                return Err(GpuError::Unsupported(format!("{OP} v2: {why}")));
            }
            "v2"
        }
        "v3" | "v4" | "v5" | "v6" | "v7" | "v8" | "v9" | "v10" => {
            if let Some(why) = v3_ok(dims.dstate, state_dtype) {
                return Err(GpuError::Unsupported(format!("{OP} {version}: {why}")));
            }
            if version == "v9" && dims.dstate != V9_DSTATE {
                return Err(GpuError::Unsupported(format!(
                    "{OP} v9: takes dstate {V9_DSTATE} (got {}); v8 runs any",
                    dims.dstate
                )));
            }
            if ["v6", "v7", "v8", "v9", "v10"].contains(&version) && parsed.a.1 {
                return Err(GpuError::Unsupported(format!(
                    "{OP} {version}: takes A per head (nheads,); a full A runs on v1-v5"
                )));
            }
            if version == "v7" || version == "v8" || version == "v9" {
                ssu7_plan(dims.dim, dims.dstate, state_dtype.size(), None)
                    .map_err(|why| GpuError::Unsupported(format!("{OP} {why}")))?;
            }
            version
        }
        "auto" => auto_version(&auto_shape),
        v if is_v11(v) || is_v12(v) => {
            // (v11_ok names the version in its reason; v12_ok does not)
            let (family, why) = if is_v12(v) {
                (
                    "v12",
                    v12_ok(dims.dstate, state_dtype).map(|w| format!("{v}: {w}")),
                )
            } else {
                ("v11", v11_ok(v, dims.dim, dims.dstate, state_dtype))
            };
            if let Some(why) = why {
                return Err(GpuError::Unsupported(format!("{OP} {why}")));
            }
            if parsed.a.1 {
                return Err(GpuError::Unsupported(format!(
                    "{OP} {v}: takes A per head (nheads,); a full A runs on v1-v5"
                )));
            }
            if v != family && (state_dtype != DType::BF16 || sr == 1) {
                return Err(GpuError::Unsupported(format!(
                    "{OP} {v}: the {family} sweep forms take a bf16 state with round-to-nearest"
                )));
            }
            v
        }
        v if V7_SWEEP.contains(&v) => {
            if state_dtype != DType::BF16 || sr == 1 || parsed.a.1 {
                return Err(GpuError::Unsupported(format!(
                    "{OP} {v}: the v7 sweep variants take a bf16 state with round-to-nearest and A per head"
                )));
            }
            if let Some(why) = v3_ok(dims.dstate, state_dtype) {
                return Err(GpuError::Unsupported(format!("{OP} {v}: {why}")));
            }
            ssu7_plan(dims.dim, dims.dstate, state_dtype.size(), None)
                .map_err(|why| GpuError::Unsupported(format!("{OP} {why}")))?;
            v
        }
        v if sweep_rpt(v).is_some() => {
            if state_dtype != DType::BF16 || sr == 1 {
                return Err(GpuError::Unsupported(format!(
                    "{OP} {v}: the sweep variants take a bf16 state with round-to-nearest"
                )));
            }
            if let Some(why) = v3_ok(dims.dstate, state_dtype) {
                return Err(GpuError::Unsupported(format!("{OP} {v}: {why}")));
            }
            if is_perhead_sweep(v) && parsed.a.1 {
                return Err(GpuError::Unsupported(format!(
                    "{OP} {v}: takes A per head (nheads,); a full A runs on v1-v5"
                )));
            }
            v
        }
        _ => "v1",
    };
    let (fname, dtiles) = launch_shape(chosen, dims.dim, dims.dstate, state_dtype, sr == 1);
    // bf16 x / B / C / z / out: by name (`_xb`), or auto's pick where it measured faster.
    let has_xb = has_xb(chosen, &fname);
    let xb = if xb_named {
        if !has_xb {
            return Err(GpuError::Unsupported(format!(
                "{OP} {chosen}_xb: {fname} has no bf16 small-operand form (those: {})",
                V11_XB.join(", ")
            )));
        }
        if !xb_inputs(&parsed) {
            return Err(GpuError::Unsupported(format!(
                "{OP} {chosen}_xb: takes x in bf16 and x, B, C, z holding only bf16 values; run {chosen} for others"
            )));
        }
        true
    } else {
        version == "auto"
            && has_xb
            && xb_inputs(&parsed)
            && auto_small_bf16(&auto_shape, parsed.dt_bias.as_ref().is_some_and(|d| d.1))
    };
    let fname = if xb { format!("{fname}_xb") } else { fname };
    // x, B, C, z in bf16 for the `_xb` kernels (xb_inputs holds them exact)
    let operands = upload_operands_as(g, &parsed, if xb { DType::BF16 } else { DType::F32 })?;
    let mut out = g.alloc_poisoned(
        &[dims.batch * dims.nheads * dims.dim],
        if xb { DType::BF16 } else { DType::F32 },
        opts.poison,
    )?;
    let f = g.function("selective_state_update", &fname)?;
    let blocks = (dims.batch * dims.nheads) as u64 * dtiles as u64;
    if blocks > i32::MAX as u64 {
        return Err(GpuError::Unsupported(format!(
            "{OP} {chosen}: {blocks} blocks exceed the grid limit"
        )));
    }
    // x, dt, A, B, C, D, z, dt_bias, then sbi, state, state_scale, out: the common ssu signature.
    let s = &g.stream;
    let ptrs = operands.ptrs_then(s, &[sbi.ptr(s), state.ptr(s), scale.ptr(s), out.ptr(s)]);
    if is_persistent(chosen) {
        let plan = ssu7_plan(dims.dim, dims.dstate, state_dtype.size(), None)
            .map_err(|why| GpuError::Unsupported(format!("{OP} {why}")))?;
        launch_v7(g, &f, &prm, &plan, blocks, &ptrs, ssu7_threads(chosen))?;
    } else if is_v11(chosen) {
        let chunks = blocks * (dims.dim / v11_rows_per_chunk(chosen, state_dtype)) as u64;
        launch_v11(g, &f, &prm, chunks, &ptrs)?;
    } else if is_v12(chosen) {
        launch_v12(g, &f, &prm, blocks, &ptrs)?;
    } else {
        let mut l = s.launch_builder(&f);
        l.arg(&prm);
        for p in &ptrs {
            l.arg(p);
        }
        // SAFETY: the ssu kernels' common signature; every buffer holds the element counts
        // parse_inputs checked (absent operands are 1-element dummies the kernel never reads:
        // has_* = 0).
        unsafe { l.launch(cfg(blocks as u32, 32 * WARPS, 0)) }.map_err(drv)?;
    }
    g.sync()?;
    let _ = (&mut state, &mut scale, &mut out);
    let out_t = g.download(&out, "out")?;
    let st = g.download(&state, "state")?;
    let out_t = if xb {
        // already x's dtype, rounded by the kernel as from_f32_as rounds
        Tensor {
            shape: parsed.x_shape.clone(),
            data: out_t.data,
        }
    } else {
        Tensor::from_f32_as(&parsed.x_shape, &out_t.to_f32_vec(), parsed.x_dtype)
    };
    let mut m = reference::op::outputs([
        ("out", out_t),
        (
            "state",
            Tensor {
                shape: parsed.state.shape.clone(),
                data: st.data,
            },
        ),
    ]);
    if parsed.scale.is_some() {
        let sc = g.download(&scale, "state_scale")?;
        m.insert(
            "state_scale".into(),
            Tensor::from_f32(&parsed.scale_shape, sc.to_f32_vec()),
        );
    }
    Ok(m)
}

/// Launches a v7 kernel: `tiles` (batch x nheads) tiles over min(tiles, SMs x resident blocks)
/// persistent blocks. `ptrs`: x, dt, A, B, C, D, z, dt_bias, sbi, state, state_scale, out.
pub(crate) fn launch_v7(
    g: &Gpu,
    f: &cudarc::driver::CudaFunction,
    prm: &SsuParams,
    plan: &Ssu7Plan,
    tiles: u64,
    ptrs: &[u64],
    threads: u32,
) -> Result<(), GpuError> {
    if ptrs.len() != 12 {
        return Err(GpuError::Unsupported(format!(
            "ssu_v7: {} buffer arguments, the kernel takes 12",
            ptrs.len()
        )));
    }
    // The largest shared-memory carveout: with the L1 at its default share, 38 KB blocks fit 4
    // an SM, and v9's bf16 entry is held to registers for 5.
    f.set_attribute(
        cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
        100,
    )
    .map_err(|e| GpuError::Driver(format!("ssu_v7 carveout attribute: {e}")))?;
    if plan.smem_bytes > 48 * 1024 {
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            plan.smem_bytes as i32,
        )
        .map_err(|e| GpuError::Driver(format!("ssu_v7 shared-memory attribute: {e}")))?;
    }
    // Persistent blocks: as many as can be resident at once (registers and shared memory, from
    // the driver), so no block waits for a second wave.
    let resident = f
        .occupancy_max_active_blocks_per_multiprocessor(threads, plan.smem_bytes, None)
        .map_err(|e| GpuError::Driver(format!("ssu_v7 occupancy: {e}")))?
        .clamp(1, plan.blocks_per_sm as u32);
    let grid = tiles.min(g.sm_count as u64 * resident as u64).max(1);
    let stages = plan.stages as i64;
    let mut l = g.stream.launch_builder(f);
    l.arg(prm).arg(&stages);
    for p in ptrs {
        l.arg(p);
    }
    // SAFETY: the ssu_v7_* signature (params, stages, then the 12 buffers of the common ssu
    // signature); plan.smem_bytes covers the kernel's barrier header + stages x stage bytes.
    unsafe { l.launch(cfg(grid as u32, threads, plan.smem_bytes as u32)) }
        .map(|_| ())
        .map_err(|e| GpuError::Driver(format!("launch ssu_v7: {e}")))
}

/// v12 (one 512-thread block a (batch row, head) tile; selective_state_update.cu): dstate 128
/// (8 lanes a row, 16 elements a lane), any dim (64-row passes), f32 / bf16 / f16 states (f16
/// with either rounding), not the int16 block-scaled one.
pub fn v12_ok(dstate: usize, state_dt: DType) -> Option<String> {
    if dstate != V12_DSTATE {
        return Some(format!(
            "v12 takes dstate {V12_DSTATE} (got {dstate}); v1-v10 run others"
        ));
    }
    if !matches!(state_dt, DType::F32 | DType::BF16 | DType::F16) {
        return Some(format!(
            "v12 takes an f32, bf16 or f16 state (got {state_dt}); v3-v10 run int16"
        ));
    }
    None
}

/// v12's dstate (compiled in: 8 lanes of 16 elements a row).
pub const V12_DSTATE: usize = 128;

/// Launches a v12 kernel: one 512-thread block a (batch row, head) tile. `ptrs`: x, dt, A, B,
/// C, D, z, dt_bias, sbi, state, state_scale, out.
pub(crate) fn launch_v12(
    g: &Gpu,
    f: &cudarc::driver::CudaFunction,
    prm: &SsuParams,
    tiles: u64,
    ptrs: &[u64],
) -> Result<(), GpuError> {
    if ptrs.len() != 12 {
        return Err(GpuError::Unsupported(format!(
            "ssu_v12: {} buffer arguments, the kernel takes 12",
            ptrs.len()
        )));
    }
    if tiles == 0 || tiles > i32::MAX as u64 {
        return Err(GpuError::Unsupported(format!(
            "ssu_v12: {tiles} tiles (batch x nheads) do not make a grid (1 ..= 2^31 - 1 blocks)"
        )));
    }
    let mut l = g.stream.launch_builder(f);
    l.arg(prm);
    for p in ptrs {
        l.arg(p);
    }
    // SAFETY: the ssu kernels' common signature (params, then the 12 buffers); one block a tile,
    // the kernel's static shared memory only.
    unsafe { l.launch(cfg(tiles as u32, 512, 0)) }
        .map(|_| ())
        .map_err(|e| GpuError::Driver(format!("launch ssu_v12: {e}")))
}

/// Launches a v11 kernel: as many 4-warp blocks as can be resident (registers, from the
/// driver), at most one warp a chunk; the kernel splits the `chunks` into equal contiguous
/// ranges, one a warp. `ptrs`: x, dt, A, B, C, D, z, dt_bias, sbi, state, state_scale, out.
pub(crate) fn launch_v11(
    g: &Gpu,
    f: &cudarc::driver::CudaFunction,
    prm: &SsuParams,
    chunks: u64,
    ptrs: &[u64],
) -> Result<(), GpuError> {
    if ptrs.len() != 12 {
        return Err(GpuError::Unsupported(format!(
            "ssu_v11: {} buffer arguments, the kernel takes 12",
            ptrs.len()
        )));
    }
    // Blocks resident an SM, asked of the driver once a kernel (three driver calls a launch
    // before: visible at batch 1, where a launch takes ~5 us).
    static RESIDENT: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<usize, u32>>> =
        std::sync::OnceLock::new();
    let key = f.cu_function() as usize;
    let known = RESIDENT
        .get_or_init(Default::default)
        .lock()
        .ok()
        .and_then(|m| m.get(&key).copied());
    let resident = match known {
        Some(r) => r,
        None => {
            let r = v11_resident(f)?;
            if let Ok(mut m) = RESIDENT.get_or_init(Default::default).lock() {
                m.insert(key, r);
            }
            r
        }
    };
    let grid = (g.sm_count as u64 * resident as u64)
        .min(chunks.div_ceil(WARPS as u64))
        .max(1);
    let mut l = g.stream.launch_builder(f);
    l.arg(prm);
    for p in ptrs {
        l.arg(p);
    }
    // SAFETY: the common ssu signature (params, then the 12 buffers); no dynamic shared memory.
    unsafe { l.launch(cfg(grid as u32, 32 * WARPS, 0)) }
        .map(|_| ())
        .map_err(|e| GpuError::Driver(format!("launch ssu_v11: {e}")))
}

/// v11's blocks resident an SM. The staged forms' static rings (32-48 KB a block) need the
/// largest shared-memory carveout, so that the blocks ptxas was asked for fit an SM (set here,
/// once a kernel); the others keep the default L1 share.
fn v11_resident(f: &cudarc::driver::CudaFunction) -> Result<u32, GpuError> {
    let smem = f
        .get_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        )
        .map_err(|e| GpuError::Driver(format!("ssu_v11 shared size: {e}")))?;
    if smem > 0 {
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            100,
        )
        .map_err(|e| GpuError::Driver(format!("ssu_v11 carveout: {e}")))?;
    }
    Ok(
        f.occupancy_max_active_blocks_per_multiprocessor(32 * WARPS, 0, None)
            .map_err(|e| GpuError::Driver(format!("ssu_v11 occupancy: {e}")))?
            .max(1),
    )
}

/// The f32 copies of the small operands on the device (absent ones as 1-element dummies the
/// kernels never read: their `has_*` flag is 0). Shared with the multi-token op.
pub(crate) struct Operands {
    pub x: crate::runtime::DevTensor,
    pub dt: crate::runtime::DevTensor,
    pub a: crate::runtime::DevTensor,
    pub b: crate::runtime::DevTensor,
    pub c: crate::runtime::DevTensor,
    pub d: crate::runtime::DevTensor,
    pub z: crate::runtime::DevTensor,
    pub bias: crate::runtime::DevTensor,
}

impl Operands {
    /// Device addresses in the kernels' argument order: x, dt, A, B, C, D, z, dt_bias.
    pub fn ptrs(&self, s: &cudarc::driver::CudaStream) -> [u64; 8] {
        [
            self.x.ptr(s),
            self.dt.ptr(s),
            self.a.ptr(s),
            self.b.ptr(s),
            self.c.ptr(s),
            self.d.ptr(s),
            self.z.ptr(s),
            self.bias.ptr(s),
        ]
    }

    /// [`Operands::ptrs`] followed by the kernel's other arguments.
    pub fn ptrs_then(&self, s: &cudarc::driver::CudaStream, rest: &[u64]) -> Vec<u64> {
        let mut v = self.ptrs(s).to_vec();
        v.extend_from_slice(rest);
        v
    }
}

pub(crate) fn upload_operands(
    g: &Gpu,
    parsed: &reference::ops::selective_state_update::Parsed,
) -> Result<Operands, GpuError> {
    upload_operands_as(g, parsed, DType::F32)
}

/// [`upload_operands`] with x, B, C and z in `small` (bf16 for the `_xb` kernels); dt, A, D and
/// dt_bias stay f32.
fn upload_operands_as(
    g: &Gpu,
    parsed: &reference::ops::selective_state_update::Parsed,
    small: DType,
) -> Result<Operands, GpuError> {
    let up = |v: &[f32], dt: DType| {
        let v = if v.is_empty() { vec![0.0] } else { v.to_vec() };
        g.upload(&Tensor::from_f32_as(&[v.len()], &v, dt))
    };
    let f32t = |v: &[f32]| up(v, DType::F32);
    Ok(Operands {
        x: up(&parsed.x, small)?,
        dt: f32t(&parsed.dt.0)?,
        a: f32t(&parsed.a.0)?,
        b: up(&parsed.b, small)?,
        c: up(&parsed.c, small)?,
        d: f32t(parsed.d.as_ref().map_or(&[][..], |d| &d.0))?,
        z: up(parsed.z.as_deref().unwrap_or(&[]), small)?,
        bias: f32t(parsed.dt_bias.as_ref().map_or(&[][..], |d| &d.0))?,
    })
}

/// The kernels' state format code (ST_F32 / ST_BF16 / ST_F16 / ST_I16).
pub(crate) fn state_dt_code(d: DType) -> i64 {
    match d {
        DType::F32 => 0,
        DType::BF16 => 1,
        DType::F16 => 2,
        _ => 3,
    }
}

/// (sr, sr_mapping, philox rounds, seed) kernel fields of a rounding mode.
pub(crate) fn rounding_fields(r: Rounding) -> (i64, i64, i64, u64) {
    match r {
        Rounding::Nearest => (0, 0, 0, 0),
        Rounding::Stochastic {
            seed,
            rounds,
            mapping,
        } => (
            1,
            (mapping == SrMapping::GroupOf4) as i64,
            rounds as i64,
            seed,
        ),
    }
}

/// The sweep variants (bf16 state, nearest): `x_bf16_r{2,4,8}_e{0,1}_s{0,1}` = rows per thread,
/// state loads before the prologue, streaming cache hints (gpu/kernels/selective_state_update.cu).
pub const SWEEP: &[&str] = &[
    "x_bf16_r2_e0_s0",
    "x_bf16_r2_e1_s0",
    "x_bf16_r2_e0_s1",
    "x_bf16_r2_e1_s1",
    "x_bf16_r4_e0_s0",
    "x_bf16_r4_e1_s0",
    "x_bf16_r4_e0_s1",
    "x_bf16_r4_e1_s1",
    "x_bf16_r8_e0_s0",
    "x_bf16_r8_e1_s0",
    "x_bf16_r8_e0_s1",
    "x_bf16_r8_e1_s1",
    "x_bf16_r4_f1_m4",
    "x_bf16_r2_f1_m6",
    "x_bf16_r8_f1_m4",
    "x_bf16_r2_f1_m4",
    // Session 12, the small-batch sweep (v6's body, A per head): rows a thread (r1: 8 rows a
    // block), state loads before the prologue (e1), z / D loaded with them (z).
    "x_bf16_r1_h_e0_m8",
    "x_bf16_r1_h_e1_m7",
    "x_bf16_r1_h_e1_z_m7",
    "x_bf16_r2_h_e1_z_m6",
    "x_bf16_r4_h_e1_z_m5",
    "x_bf16_r4_h_e0_z_m6",
];

/// A sweep variant compiled for A per head (v6's PERHEAD: dA one value a row).
fn is_perhead_sweep(v: &str) -> bool {
    SWEEP.contains(&v) && v.contains("_h_")
}

/// v7 with 2 or 8 consumer warps per producer warp (bf16 state, nearest): the consumer-warp
/// sweep of `duet bench --shape ssu_sweep_b*_bf16`, runnable as versions for the bit-exact test.
pub const V7_SWEEP: &[&str] = &["v7w2", "v7w8"];

/// The persistent bulk-copy kernels (v7 / v8 / v9 and v7's sweep variants): launched through
/// [`launch_v7`] with an [`ssu7_plan`] ring.
fn is_persistent(version: &str) -> bool {
    version.starts_with("v7") || version.starts_with("v8") || version.starts_with("v9")
}

/// Rows per thread of a sweep variant name (None: not a sweep variant).
fn sweep_rpt(v: &str) -> Option<usize> {
    if !SWEEP.contains(&v) {
        return None;
    }
    v.strip_prefix("x_bf16_r")?
        .chars()
        .next()?
        .to_digit(10)
        .map(|d| d as usize)
}

/// `ssu_sweep_b{batch}_bf16`: every sweep variant at the Super shape, dt / D / dt_bias per head,
/// sorted by time (the tests check each variant bit-exact: gpu/tests/gpu_ssu.rs).
pub fn bench_sweep(g: &Gpu, batch: usize, all: bool) -> Result<serde_json::Value, GpuError> {
    let mut v = vec![
        bench_super_version(g, batch, DType::BF16, "v3", true)?,
        bench_super_version(g, batch, DType::BF16, "v5", true)?,
        bench_super_version(g, batch, DType::BF16, "v6", true)?,
        bench_super_version(g, batch, DType::BF16, "v7", true)?,
        bench_super_version(g, batch, DType::BF16, "v8", true)?,
        bench_super_version(g, batch, DType::BF16, "v8_s3", true)?,
        bench_super_version(g, batch, DType::BF16, "v8_s4", true)?,
        bench_super_version(g, batch, DType::BF16, "v9", true)?,
        bench_super_version(g, batch, DType::BF16, "v10", true)?,
    ];
    // v7's ring depth and consumer warps (default: 2 stages, 4 consumer warps).
    // (v7 ring depths 1 / 3 and 2 / 8 consumer warps: measured in session 4, call 3; with all.)
    for name in [
        "v7_s1", "v7_s3", "v7w2_s1", "v7w2_s2", "v7w2_s3", "v7w8_s1", "v7w8_s2", "v7w8_s3",
    ]
    .into_iter()
    .filter(|_| all)
    {
        v.push(bench_super_version(g, batch, DType::BF16, name, true)?);
    }
    // The SWEEP variants (session 3: none beat v5) run with --shape ssu_sweep_all_b{64,256}_bf16.
    if all {
        for name in SWEEP {
            v.push(bench_super_version(g, batch, DType::BF16, name, true)?);
        }
    }
    let key = |x: &serde_json::Value| {
        x["graph_replay"]["median_us"]
            .as_f64()
            .or_else(|| x["single_launch"]["median_us"].as_f64())
            .unwrap_or(f64::MAX)
    };
    v.sort_by(|a, b| key(a).total_cmp(&key(b)));
    Ok(serde_json::json!({"op": OP, "sweep": true, "versions": v}))
}

/// Kernel name and d-tiles per (batch row, head) of a version (every version runs 128-thread
/// blocks: v1 4 warps = 4 rows, v2 one block per (b, h), v3 `v3_rows_per_block` rows).
pub(crate) fn launch_shape(
    version: &str,
    dim: usize,
    dstate: usize,
    state_dt: DType,
    sr: bool,
) -> (String, usize) {
    match version {
        "v2" => ("ssu_v2".into(), 1),
        v if V7_SWEEP.contains(&v) => (format!("ssu_{v}_bf16"), 1),
        v if V11_SWEEP.contains(&v) || V12_SWEEP.contains(&v) => (format!("ssu_{v}"), 1),
        "v3" | "v4" | "v5" | "v6" | "v7" | "v8" | "v9" | "v10" | "v11" | "v12" => {
            let fmt = match (state_dt, sr) {
                (DType::F32, _) => "f32",
                (DType::BF16, _) => "bf16",
                (DType::F16, false) => "f16",
                (DType::F16, true) => "f16_sr",
                _ => "i16",
            };
            let dtiles = if is_persistent(version) || version == "v11" || version == "v12" {
                1 // one (batch row, head) per tile
            } else {
                dim.div_ceil(v3_rows_per_block(dstate, state_dt, version))
            };
            (format!("ssu_{version}_{fmt}"), dtiles)
        }
        v if sweep_rpt(v).is_some() => {
            let nvec = dstate / (16 / state_dt.size().max(1));
            let rpt = sweep_rpt(v).unwrap_or(4);
            (
                format!("ssu_{v}"),
                dim.div_ceil((128 / nvec.clamp(1, 32)) * rpt),
            )
        }
        _ => ("ssu_v1".into(), dim.div_ceil(WARPS as usize)),
    }
}

/// Benchmark at the Super shape (nheads 128, dim 64, dstate 128, ngroups 8; f32 small operands,
/// D, z, dt_bias, softplus): the state cache holds enough slots that consecutive launches walk
/// over >= 256 MB of state (each launch updates a different window of `batch` slots), so the
/// L2 never holds the state; single launches and CUDA-graph replay (every batch since session
/// 29). Bytes counted: state read + write, plus x, z, out, dt, B, C.
pub fn bench_super(g: &Gpu, batch: usize, state_dt: DType) -> Result<serde_json::Value, GpuError> {
    let mut v = vec![];
    // Per-dim dt / D / dt_bias (the general layout) and per-head ("tie_hdim": what Nemotron-H's
    // decode passes, dt / A / D / dt_bias broadcast over the head dim).
    const LISTED: [&str; 9] = ["v1", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10"];
    // DUET_SSU_AUTO_ONLY=1: only auto's entries (a device call's budget: v1 / v4 alone take most
    // of the batch-256 preset's minute).
    let auto_only = std::env::var("DUET_SSU_AUTO_ONLY").is_ok_and(|v| v == "1");
    for version in LISTED.iter().filter(|_| !auto_only) {
        for per_head in [false, true] {
            v.push(bench_super_version(g, batch, state_dt, version, per_head)?);
        }
    }
    // What `auto` runs at this shape (session 29: the presets' issue targets name auto, which
    // since session 26 may be a v11 form outside the list above), marked `"auto": true`; a
    // listed version's entry is repeated, not timed again.
    for (ph, per_head) in [false, true].into_iter().enumerate() {
        let shape = AutoShape {
            batch,
            nheads: 128,
            dim: 64,
            dstate: 128,
            state: state_dt,
            sr: false,
            dt_per_dim: !per_head,
            a_full: false,
            sm_count: g.sm_count as u64,
        };
        let a = auto_version(&shape);
        let mut e = match LISTED.iter().position(|&l| l == a) {
            Some(i) if !auto_only => v[2 * i + ph].clone(),
            _ => bench_super_version(g, batch, state_dt, a, per_head)?,
        };
        // Session 30: auto's pick depends on the small operands' dtype too (auto_small_bf16):
        // with bf16 x / B / C / z (the shape) it may be the kernel's `_xb` form, timed
        // here whenever it exists; `"auto"` says which of the two auto runs for bf16 inputs.
        let (fname, _) = launch_shape(a, 64, 128, state_dt, false);
        let has_xb = has_xb(a, &fname);
        let xb_auto = has_xb && auto_small_bf16(&shape, !per_head);
        e["auto"] = serde_json::json!(true);
        e["auto_for_small_operands"] = serde_json::json!(if xb_auto { "f32" } else { "f32, bf16" });
        v.push(e);
        if has_xb {
            let mut e = bench_super_version(g, batch, state_dt, &format!("{a}_xb"), per_head)?;
            e["auto"] = serde_json::json!(xb_auto);
            if xb_auto {
                e["auto_for_small_operands"] = serde_json::json!("bf16");
            }
            v.push(e);
        }
    }
    Ok(serde_json::json!({"op": OP, "versions": v}))
}

/// `DUET_SSU_ONLY=K1,K2` (kernel names, e.g. `ssu_x11_bf16_c4_m4,ssu_v11_f32`): the v11 presets
/// run only the cases on those kernels, so `ncu -c 1` on one of them costs seconds and a repeat
/// of a few forms does not pay for the whole preset. A filter that names none of a preset's
/// kernels is an error, not an empty result.
/// `DUET_SSU_BATCH=1,64` (batch sizes) likewise keeps the cases at those batches (a profiler's
/// `-c 1` then sees, e.g., the batch-1 launch first).
struct SsuOnly(Option<String>, Option<String>);

impl SsuOnly {
    fn from_env() -> Self {
        SsuOnly(
            std::env::var("DUET_SSU_ONLY").ok(),
            std::env::var("DUET_SSU_BATCH").ok(),
        )
    }

    fn keeps(&self, version: &str, state_dt: DType, sr: bool) -> bool {
        let (base, xb) = match xb_base(version) {
            Some(b) => (b, "_xb"),
            None => (version, ""),
        };
        let (kernel, _) = launch_shape(base, 64, V9_DSTATE, state_dt, sr);
        let kernel = format!("{kernel}{xb}");
        self.0
            .as_ref()
            .is_none_or(|only| only.split(',').any(|k| k.trim() == kernel))
    }

    fn keeps_batch(&self, batch: usize) -> bool {
        self.1
            .as_ref()
            .is_none_or(|only| only.split(',').any(|b| b.trim() == batch.to_string()))
    }

    fn finish(
        &self,
        preset: &str,
        v: Vec<serde_json::Value>,
    ) -> Result<serde_json::Value, GpuError> {
        if v.is_empty() {
            return Err(GpuError::Unsupported(format!(
                "bench preset {preset}: DUET_SSU_ONLY={} / DUET_SSU_BATCH={} keep none of its cases",
                self.0.clone().unwrap_or_default(),
                self.1.clone().unwrap_or_default()
            )));
        }
        Ok(serde_json::json!({"op": OP, "versions": v}))
    }
}

/// `ssu_v11`: v11 (and its sweep forms) next to v9 / v8 at the Super shape, dt / D / dt_bias per
/// head: bf16 at batch 256 and 64 (graph replay), per-dim dt at 256 (v9, v11, the interleaved
/// staged form), batch 1 next to v10, f32 at
/// 256 (v8, v11), f16 at 256 with round-to-nearest and stochastic rounding (Philox 10).
/// `DUET_SSU_ONLY` (above) keeps some kernels.
pub fn bench_v11(g: &Gpu) -> Result<serde_json::Value, GpuError> {
    let only = SsuOnly::from_env();
    // (batch, state dtype, version, dt per head, Philox rounds: 0 = round to nearest)
    let mut runs: Vec<(usize, DType, &str, bool, u32)> = vec![];
    for batch in [256usize, 64] {
        for version in ["v9", "v11"].iter().chain(V11_SWEEP) {
            runs.push((batch, DType::BF16, version, true, 0));
        }
        // session 30: bf16 small operands on the large-batch forms
        for version in ["x11_bf16_c8_m3_s3_i_xb", "x11_bf16_c8_m3_s3_i_b_xb"] {
            runs.push((batch, DType::BF16, version, true, 0));
        }
    }
    // dt / D / dt_bias per dim (auto: v9 there until a run has them side by side)
    for version in ["v9", "v11", "x11_bf16_c8_m3_s3_i"] {
        runs.push((256, DType::BF16, version, false, 0));
    }
    // (session 29: the c4 / c2 register forms at batch 1: 2 / 4 times v11's chunks, so 1,024 /
    // 2,048 warps share the 128 tiles instead of 512)
    for version in ["v10", "v11", "x11_bf16_c4_m4", "x11_bf16_c2_m4"] {
        runs.push((1, DType::BF16, version, true, 0));
    }
    // session 31: v12 (a block a tile) against auto's register form at small batches
    // (auto: c4_m4 below 4 tiles an SM, the staged c8_m3_s3_i from there: batch 8 and 16)
    for batch in [1usize, 2, 4, 8, 16] {
        let autos: &[&str] = match batch {
            1 => &["x11_bf16_c4_m4_xb"],
            2 | 4 => &["x11_bf16_c4_m4", "x11_bf16_c4_m4_xb"],
            _ => &["x11_bf16_c8_m3_s3_i", "x11_bf16_c8_m3_s3_i_xb"],
        };
        for version in autos
            .iter()
            .chain(&["v12", "v12_xb", "x12_bf16_m2", "x12_bf16_m2_xb"])
        {
            runs.push((batch, DType::BF16, version, true, 0));
        }
    }
    // batch 1 with dt / D / dt_bias per dim (auto: v11) and with an f32 state (auto: v10)
    for version in ["v11", "v12"] {
        runs.push((1, DType::BF16, version, false, 0));
    }
    for version in ["v10", "v11", "v12"] {
        runs.push((1, DType::F32, version, true, 0));
    }
    // (an f16 state at batch 1 with round-to-nearest: auto v10)
    for version in ["v10", "v12"] {
        runs.push((1, DType::F16, version, true, 0));
    }
    for version in ["v8", "v11"] {
        runs.push((256, DType::F32, version, true, 0));
    }
    for rounds in [0u32, 10] {
        for version in ["v9", "v11"] {
            runs.push((256, DType::F16, version, true, rounds));
        }
    }
    let mut v = vec![];
    for (batch, dt, version, per_head, rounds) in runs {
        if only.keeps(version, dt, rounds > 0) && only.keeps_batch(batch) {
            v.push(bench_super_version_sr(
                g, batch, dt, version, per_head, rounds,
            )?);
        }
    }
    only.finish("ssu_v11", v)
}

/// `ssu_v11_b256`: the short form of `ssu_v11` for profilers: batch 256, dt per head, bf16 on v9,
/// v11 and its sweep forms, then f32 on v11. `DUET_SSU_ONLY` (above) keeps some kernels.
pub fn bench_v11_b256(g: &Gpu) -> Result<serde_json::Value, GpuError> {
    let only = SsuOnly::from_env();
    let mut runs: Vec<(DType, &str)> = ["v9", "v11"]
        .iter()
        .chain(V11_SWEEP)
        .chain(&["x11_bf16_c8_m3_s3_i_xb", "x11_bf16_c8_m3_s3_i_b_xb"])
        .map(|v| (DType::BF16, *v))
        .collect();
    runs.push((DType::F32, "v11"));
    let mut v = vec![];
    for (dt, version) in runs {
        if only.keeps(version, dt, false) && only.keeps_batch(256) {
            v.push(bench_super_version(g, 256, dt, version, true)?);
        }
    }
    only.finish("ssu_v11_b256", v)
}

/// `ssu_b256_i16`: v8 and v9 on an int16 state with per-row decode scales (dt / D / dt_bias per
/// head, batch 256).
pub fn bench_i16(g: &Gpu, batch: usize) -> Result<serde_json::Value, GpuError> {
    let v = ["v8", "v9"]
        .into_iter()
        .map(|version| bench_super_version(g, batch, DType::I16, version, true))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(serde_json::json!({"op": OP, "versions": v}))
}

/// `ssu_b{64,256}_f16`: the persistent kernels v8 and v9 on an f16 state, dt / D / dt_bias per
/// head: round-to-nearest, then stochastic rounding with Philox 10 rounds (the op's default) and
/// 5 (the Nemotron recipes'), one draw a group of 4.
pub fn bench_f16(g: &Gpu, batch: usize) -> Result<serde_json::Value, GpuError> {
    let mut v = vec![];
    for rounds in [0u32, 10, 5] {
        for version in ["v8", "v9"] {
            v.push(bench_super_version_sr(
                g,
                batch,
                DType::F16,
                version,
                true,
                rounds,
            )?);
        }
    }
    Ok(serde_json::json!({"op": OP, "versions": v}))
}

fn bench_super_version(
    g: &Gpu,
    batch: usize,
    state_dt: DType,
    version: &str,
    per_head: bool,
) -> Result<serde_json::Value, GpuError> {
    bench_super_version_sr(g, batch, state_dt, version, per_head, 0)
}

fn bench_super_version_sr(
    g: &Gpu,
    batch: usize,
    state_dt: DType,
    version: &str,
    per_head: bool,
    sr_rounds: u32,
) -> Result<serde_json::Value, GpuError> {
    // sr_rounds > 0: stochastic rounding with that many Philox rounds.
    let sr = sr_rounds > 0;
    // `<version>_xb`: the v11 kernel's bf16 small-operand form (x / B / C / z / out in bf16).
    let (version, xb) = match version.strip_suffix("_xb") {
        Some(v) => (v, true),
        None => (version, false),
    };
    if sr && state_dt != DType::F16 {
        return Err(GpuError::Unsupported(format!(
            "bench: stochastic rounding takes an f16 state, not {state_dt}"
        )));
    }
    let (nheads, dim, dstate, ngroups) = (128usize, 64usize, 128usize, 8usize);
    let per_slot = nheads * dim * dstate * state_dt.size();
    let windows = (256usize << 20).div_ceil(per_slot * batch).max(2);
    let slots = windows * batch;
    let mut r = compare::gen::Rng::new(9);
    // 4 Mi random elements tiled over the cache: generating 0.5 G normal values on the CPU per
    // variant took minutes, and the kernel's speed does not depend on the values.
    let state = match state_dt {
        DType::F32 | DType::BF16 | DType::F16 => {
            let total = slots * nheads * dim * dstate;
            let tile = r.normal_tensor(&[total.min(1 << 22)], 0.5, state_dt);
            fn tiled<T: Copy>(t: &[T], total: usize) -> Vec<T> {
                t.iter().copied().cycle().take(total).collect()
            }
            let data = match &tile.data {
                reference::tensor::Data::F32(v) => reference::tensor::Data::F32(tiled(v, total)),
                reference::tensor::Data::BF16(v) => reference::tensor::Data::BF16(tiled(v, total)),
                reference::tensor::Data::F16(v) => reference::tensor::Data::F16(tiled(v, total)),
                _ => {
                    return Err(GpuError::Unsupported(format!(
                        "bench state dtype {state_dt}"
                    )))
                }
            };
            Tensor {
                shape: vec![slots, nheads, dim, dstate],
                data,
            }
        }
        DType::I16 => {
            // int16 codes spread over the range (the per-row decode scales below).
            let total = slots * nheads * dim * dstate;
            let tile: Vec<i16> = r
                .uniform_vec(total.min(1 << 22), -30000.0, 30000.0)
                .into_iter()
                .map(|v| v as i16)
                .collect();
            Tensor {
                shape: vec![slots, nheads, dim, dstate],
                data: reference::tensor::Data::I16(
                    tile.iter().copied().cycle().take(total).collect(),
                ),
            }
        }
        _ => {
            return Err(GpuError::Unsupported(format!(
                "bench state dtype {state_dt}"
            )))
        }
    };
    let dev_state = g.upload(&state)?;
    drop(state);
    let f32t = |v: Vec<f32>| g.upload(&Tensor::from_f32(&[v.len()], v));
    // x / B / C / z: bf16 for the `_xb` forms, else f32
    let small = if xb { DType::BF16 } else { DType::F32 };
    let smallt = |v: Vec<f32>| g.upload(&Tensor::from_f32_as(&[v.len()], &v, small));
    let per = if per_head { 1 } else { dim };
    let operands = Operands {
        x: smallt(r.normal_vec(batch * nheads * dim, 1.0))?,
        dt: f32t(r.uniform_vec(batch * nheads * per, -3.0, 0.0))?,
        a: f32t(r.uniform_vec(nheads, -4.0, -0.5))?,
        b: smallt(r.normal_vec(batch * ngroups * dstate, 1.0))?,
        c: smallt(r.normal_vec(batch * ngroups * dstate, 1.0))?,
        d: f32t(r.normal_vec(nheads * per, 1.0))?,
        z: smallt(r.normal_vec(batch * nheads * dim, 1.0))?,
        bias: f32t(r.uniform_vec(nheads * per, -1.0, 0.0))?,
    };
    let sbis: Vec<_> = (0..windows)
        .map(|w| {
            g.upload(&Tensor::from_i64(
                &[batch],
                (0..batch).map(|i| (w * batch + i) as i64).collect(),
            ))
        })
        .collect::<Result<_, _>>()?;
    // int16: one decode scale a state row (read and written by the kernels); else unused.
    let scale_rows = if state_dt == DType::I16 {
        slots * nheads * dim
    } else {
        1
    };
    let scale = f32t(r.uniform_vec(scale_rows, 1e-5, 1e-4))?;
    let out = g.alloc_poisoned(&[batch * nheads * dim], small, 0)?;
    let prm = SsuParams {
        batch: batch as i64,
        nheads: nheads as i64,
        dim: dim as i64,
        dstate: dstate as i64,
        ngroups: ngroups as i64,
        slots: slots as i64,
        pad_slot_id: -1,
        dt_per_dim: (!per_head) as i64,
        a_full: 0,
        d_per_dim: (!per_head) as i64,
        bias_per_dim: (!per_head) as i64,
        has_d: 1,
        has_z: 1,
        has_bias: 1,
        has_sbi: 1,
        softplus: 1,
        state_dt: match state_dt {
            DType::F32 => 0,
            DType::BF16 => 1,
            DType::I16 => 3,
            _ => 2,
        },
        sr: sr as i64,
        sr_mapping: 1,
        rounds: sr_rounds as i64,
        seed: 0x5eed,
        ..Default::default()
    };
    // v7 / v8 / v9 bench names: `<version>[_s<stages>]` (v7, v7w2, v7w8, v8, v9; the ring depth).
    let persistent = is_persistent(version);
    let (base, stages) = match version.rsplit_once("_s") {
        Some((b, n)) if persistent => (b, n.parse::<usize>().ok()),
        _ => (version, None),
    };
    let (fname, dtiles) = launch_shape(base, dim, dstate, state_dt, sr);
    if xb && !has_xb(base, &fname) {
        return Err(GpuError::Unsupported(format!(
            "bench {version}_xb: no bf16 small-operand form (those: {})",
            V11_XB.join(", ")
        )));
    }
    let fname = if xb { format!("{fname}_xb") } else { fname };
    let f = g.function("selective_state_update", &fname)?;
    let blocks = ((batch * nheads) * dtiles) as u32;
    let s = &g.stream;
    let ptrs = operands.ptrs(s);
    let sbi_ptrs: Vec<u64> = sbis.iter().map(|t| t.ptr(s)).collect();
    let (pst, psc, pout) = (dev_state.ptr(s), scale.ptr(s), out.ptr(s));
    let mut k = 0usize;
    let (plan7, threads7) = if persistent {
        (
            Some(ssu7_plan(dim, dstate, state_dt.size(), stages).map_err(GpuError::Unsupported)?),
            ssu7_threads(base),
        )
    } else {
        (None, 0)
    };
    let mut launch = || {
        let psbi = sbi_ptrs[k % windows];
        k += 1;
        // x, dt, A, B, C, D, z, dt_bias, sbi, state, state_scale, out (v7 / v11 / v12 launchers)
        let p12 = [
            ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7], psbi, pst, psc,
            pout,
        ];
        if let Some(plan) = &plan7 {
            return launch_v7(g, &f, &prm, plan, blocks as u64, &p12, threads7);
        }
        if is_v11(base) {
            let chunks = blocks as u64 * (dim / v11_rows_per_chunk(base, state_dt)) as u64;
            return launch_v11(g, &f, &prm, chunks, &p12);
        }
        if is_v12(base) {
            return launch_v12(g, &f, &prm, blocks as u64, &p12);
        }
        let mut l = s.launch_builder(&f);
        l.arg(&prm);
        for p in &ptrs {
            l.arg(p);
        }
        l.arg(&psbi).arg(&pst).arg(&psc).arg(&pout);
        // SAFETY: the ssu kernels' common signature; windows of `batch` distinct slots inside the cache.
        unsafe { l.launch(cfg(blocks, 32 * WARPS, 0)) }
            .map(|_| ())
            .map_err(drv)
    };
    // Graph replay at every batch (session 29; before, batch <= 64 only): the targets
    // are graph replays over rotating state buffers, and at batch 256 a single event-timed
    // launch carries ~10 us of launch overhead (ncu: x11_bf16_c8_m3_s3_i runs 282.5 us, its
    // single launch 294).
    let (single, graph) = crate::bench::time_launch(g, true, &mut launch)?;
    // Graph replay with programmatic edges (the decode engine's `--engine-pdl`): the launch of
    // one update overlaps the end of the one before it; absent when the kernel is not PDL-safe.
    let pdl = crate::bench::time_graph_pdl(g, &mut launch)?;
    let (copy, copy_gbs) = crate::bench::copy_ceiling(g, 1 << 30)?;
    // int16: + the rows' decode scales, read and written.
    let scale_bytes = if state_dt == DType::I16 {
        2 * 4 * batch * nheads * dim
    } else {
        0
    };
    // x, z, out and B, C in their dtype; dt, D, dt_bias (f32, one a row)
    let bytes = (2 * batch * per_slot
        + scale_bytes
        + small.size() * (3 * batch * nheads * dim + 2 * batch * ngroups * dstate)
        + 4 * batch * nheads * dim) as f64;
    let best = graph
        .as_ref()
        .map_or(single.median_us, |t| t.median_us.min(single.median_us));
    let version = if xb {
        format!("{version}_xb")
    } else {
        version.to_string()
    };
    Ok(serde_json::json!({
        "op": OP, "version": version,
        "kernel": fname, "dt_D_bias": if per_head { "per_head" } else { "per_dim" },
        "rounding": if sr { format!("stochastic (philox {sr_rounds}, group of 4)") } else { "nearest".into() },
        "shape": {"batch": batch, "nheads": nheads, "dim": dim, "dstate": dstate, "ngroups": ngroups,
                  "state": state_dt.name(), "small_operands": small.name(), "rotating_state_mb": (slots * per_slot) >> 20},
        "single_launch": {"median_us": single.median_us, "p10_us": single.p10_us, "p90_us": single.p90_us},
        "graph_replay": graph.map(|t| serde_json::json!({"median_us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us})),
        "graph_replay_pdl": pdl.map(|(t, edges)| serde_json::json!({"median_us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us, "programmatic_edges": edges})),
        "bytes": bytes, "effective_tb_per_s": bytes / (best * 1e-6) / 1e12,
        "copy_ceiling_gb_per_s": copy_gbs, "copy_median_us": copy.median_us,
        "pct_of_copy": 100.0 * (bytes / (best * 1e-6) / 1e9) / copy_gbs,
    }))
}

#[cfg(test)]
mod xb_tests {
    use super::{auto_small_bf16, prepare, xb_inputs, AutoShape, DType, Params, Tensor, OP};

    /// auto's small-operand rule: bf16 forms per head from 4 tiles an SM (session 30 call 2).
    #[test]
    fn auto_takes_bf16_small_operands_per_head_at_4_tiles_an_sm() {
        let shape = |batch, dt_per_dim| AutoShape {
            batch,
            nheads: 128,
            dim: 64,
            dstate: 128,
            state: DType::BF16,
            sr: false,
            dt_per_dim,
            a_full: false,
            sm_count: 132,
        };
        assert!(auto_small_bf16(&shape(256, false), false));
        assert!(auto_small_bf16(&shape(64, false), false));
        // 5 x 128 = 640 >= 528; 4 x 128 = 512 < 528
        assert!(auto_small_bf16(&shape(5, false), false));
        assert!(!auto_small_bf16(&shape(4, false), false));
        // batch 1 / 2 (128 / 256 tiles <= 2 x 132 SMs): v12's / m2's `_xb` (session 31);
        // batch 3 (384 tiles): not
        assert!(auto_small_bf16(&shape(1, false), false));
        assert!(auto_small_bf16(&shape(2, false), false));
        assert!(!auto_small_bf16(&shape(3, false), false));
        let f32_b1 = AutoShape {
            state: DType::F32,
            ..shape(1, false)
        };
        assert!(!auto_small_bf16(&f32_b1, false));
        assert!(auto_small_bf16(&shape(1, true), true));
        assert!(!auto_small_bf16(&shape(256, true), false));
        assert!(!auto_small_bf16(&shape(256, false), true));
    }

    fn parsed(
        x: DType,
        b: DType,
        z: Option<DType>,
    ) -> reference::ops::selective_state_update::Parsed {
        let mut r = compare::gen::Rng::new(30);
        let mut m = reference::TensorMap::new();
        m.insert(
            "state".into(),
            r.normal_tensor(&[2, 4, 16, 128], 1.0, DType::BF16),
        );
        m.insert("x".into(), r.normal_tensor(&[2, 4, 16], 1.0, x));
        m.insert(
            "dt".into(),
            r.uniform_tensor(&[2, 4], -3.0, 1.0, DType::F32),
        );
        m.insert("A".into(), r.uniform_tensor(&[4], -4.0, -0.5, DType::F32));
        m.insert("B".into(), r.normal_tensor(&[2, 2, 128], 1.0, b));
        m.insert("C".into(), r.normal_tensor(&[2, 2, 128], 1.0, DType::BF16));
        if let Some(zd) = z {
            m.insert("z".into(), r.normal_tensor(&[2, 4, 16], 1.0, zd));
        }
        let def = reference::ops::find(OP).expect("op");
        let p = Params::resolve(&def, &[]).expect("params");
        prepare(&m, &p).expect("prepare").0
    }

    /// The `_xb` kernels run exactly when x is bf16 and x / B / C / z hold only bf16 values.
    #[test]
    fn xb_kernels_take_only_bf16_exact_inputs() {
        assert!(xb_inputs(&parsed(
            DType::BF16,
            DType::BF16,
            Some(DType::BF16)
        )));
        assert!(xb_inputs(&parsed(DType::BF16, DType::BF16, None)));
        // f32 x: `out` is f32
        assert!(!xb_inputs(&parsed(
            DType::F32,
            DType::BF16,
            Some(DType::BF16)
        )));
        // an f32 B or z with values bf16 cannot hold
        assert!(!xb_inputs(&parsed(
            DType::BF16,
            DType::F32,
            Some(DType::BF16)
        )));
        assert!(!xb_inputs(&parsed(
            DType::BF16,
            DType::BF16,
            Some(DType::F32)
        )));
        // f32 tensors whose values are all bf16 values are exact: the same bits either way
        let mut q = parsed(DType::BF16, DType::BF16, Some(DType::BF16));
        let t = Tensor::from_f32_as(&[q.b.len()], &q.b, DType::BF16);
        q.b = t.to_f32_vec();
        assert!(xb_inputs(&q));
        q.b[3] = 1.0 + f32::EPSILON;
        assert!(!xb_inputs(&q));
    }

    /// v12 takes dstate 128 and the f32 / bf16 / f16 states (the reason otherwise), has a
    /// small-operand form for each of its kernels, and `v12_xb` names it.
    #[test]
    fn v12_limits_and_small_operand_forms() {
        use super::{has_xb, launch_shape, v12_ok, xb_base};
        for st in [DType::F32, DType::BF16, DType::F16] {
            assert_eq!(v12_ok(128, st), None);
        }
        let why = v12_ok(64, DType::BF16).expect("dstate 64 refused");
        assert!(why.contains("dstate 128"), "{why}");
        let why = v12_ok(128, DType::I16).expect("int16 refused");
        assert!(why.contains("int16"), "{why}");
        assert_eq!(xb_base("v12_xb"), Some("v12"));
        assert_eq!(xb_base("v10_xb"), None);
        for (st, sr, k) in [
            (DType::F32, false, "ssu_v12_f32"),
            (DType::BF16, false, "ssu_v12_bf16"),
            (DType::F16, false, "ssu_v12_f16"),
            (DType::F16, true, "ssu_v12_f16_sr"),
        ] {
            let (fname, dtiles) = launch_shape("v12", 64, 128, st, sr);
            assert_eq!((fname.as_str(), dtiles), (k, 1));
            assert!(has_xb("v12", &fname), "{fname}");
        }
        assert!(!has_xb("v10", "ssu_v10_bf16"));
    }
}

#[cfg(test)]
mod ssu7_plan_tests {
    use super::{auto_version, ssu7_plan, v11_ok, v11_rows_per_chunk, AutoShape, DType, V11_SWEEP};

    /// The rows of a v11 chunk follow the form's name (the kernel's CH x 32 / lanes a row), and
    /// v11_ok takes exactly the dims made of whole chunks.
    #[test]
    fn v11_chunk_rows_follow_the_form_name() {
        let cases = [
            ("v11", DType::BF16, 16),
            ("v11", DType::F32, 8),
            ("v11", DType::F16, 16),
            ("x11_bf16_c4_m4", DType::BF16, 8),
            ("x11_bf16_c2_m4", DType::BF16, 4),
            ("x11_bf16_c2_m4_r", DType::BF16, 4),
            ("x11_bf16_c4_m4_s4", DType::BF16, 8),
            ("x11_bf16_c4_m4_s6", DType::BF16, 8),
            ("x11_bf16_c8_m3_s3", DType::BF16, 16),
            ("x11_bf16_c8_m3_s3_i", DType::BF16, 16),
            ("x11_bf16_c4_m4_s4_i", DType::BF16, 8),
            ("x11_bf16_c8_m3_s3_g4", DType::BF16, 16),
            ("x11_bf16_c8_m3_s3_g16", DType::BF16, 16),
            ("x11_bf16_c8_m3_s3_i_b", DType::BF16, 16),
        ];
        for (v, dt, rpc) in cases {
            assert_eq!(v11_rows_per_chunk(v, dt), rpc, "{v} {dt:?}");
            assert!(v11_ok(v, 64, 128, dt).is_none(), "{v}: dim 64");
            assert!(v11_ok(v, rpc, 128, dt).is_none(), "{v}: dim {rpc}");
            assert!(
                v11_ok(v, rpc + 2, 128, dt).is_some(),
                "{v}: dim {}",
                rpc + 2
            );
            assert!(v11_ok(v, 64, 64, dt).is_some(), "{v}: dstate 64");
            assert!(v11_ok(v, 128, 128, dt).is_some(), "{v}: dim 128");
        }
        assert!(v11_ok("v11", 64, 128, DType::I16).is_some());
        assert_eq!(super::v11_stages("x11_bf16_c8_m3_s3"), Some(3));
        assert_eq!(super::v11_stages("x11_bf16_c8_m3_s3_i"), Some(3));
        assert_eq!(super::v11_stages("x11_bf16_c4_m4_s4_i"), Some(4));
        assert_eq!(super::v11_stages("x11_bf16_c8_m3_s3_g16"), Some(3));
        assert_eq!(super::v11_stages("x11_bf16_c4_m4_i"), None);
        assert_eq!(super::v11_stages("x11_bf16_c2_m4_r"), None);
        assert_eq!(super::v11_stages("v11"), None);
        // every sweep form is in the table above
        for v in V11_SWEEP {
            assert!(cases.iter().any(|c| c.0 == *v), "{v} untested here");
        }
    }

    #[test]
    fn super_shape_plans_match_the_kernel_layout() {
        // bf16 Super tile: 64 x 128 x 2 = 16384 state bytes + B, C (2 x 512) + 6 x 64 x 4 row
        // values = 18944, + 16 for the slot = 18960 per stage; 2 stages + 128 header.
        let p = ssu7_plan(64, 128, 2, None).expect("bf16 plan");
        assert_eq!((p.stages, p.stage_bytes, p.smem_bytes), (2, 18960, 38048));
        assert_eq!(p.blocks_per_sm, (228 * 1024) / (38048 + 1024));
        let f = ssu7_plan(64, 128, 4, Some(3)).expect("f32 plan");
        assert_eq!(f.stage_bytes, 32768 + 1024 + 1536 + 16);
        assert_eq!(f.smem_bytes, 128 + 3 * f.stage_bytes);
        // More than 8 stages: the barrier header grows past 128 bytes.
        let d = ssu7_plan(8, 16, 2, Some(9)).expect("deep ring");
        assert_eq!(d.smem_bytes, 256 + 9 * d.stage_bytes);
    }

    #[test]
    fn oversized_tiles_are_refused_with_the_reason() {
        let e = ssu7_plan(1024, 256, 4, None).expect_err("1 MiB tile");
        assert!(e.contains("shared memory"), "{e}");
        assert!(ssu7_plan(0, 128, 2, None).is_err());
        assert!(ssu7_plan(2048, 8, 2, None)
            .expect_err("dim")
            .contains("dim 2048"));
        assert!(ssu7_plan(64, 128, 2, Some(0)).is_err());
    }

    /// auto's choices at the Super shape (128 heads, dim 64, dstate 128) on the H200's 132 SMs,
    /// one per measured case in auto_version's doc, and the fall-backs around them.
    #[test]
    fn auto_picks_the_measured_winners() {
        let sup = |batch, state| AutoShape {
            batch,
            nheads: 128,
            dim: 64,
            dstate: 128,
            state,
            sr: false,
            dt_per_dim: false,
            a_full: false,
            sm_count: 132,
        };
        assert_eq!(auto_version(&sup(256, DType::F32)), "v11");
        assert_eq!(
            auto_version(&sup(256, DType::BF16)),
            "x11_bf16_c8_m3_s3_i_b"
        );
        // 128 tiles an SM: 132 x 128 = 16,896 = 132 x 128 heads
        assert_eq!(
            auto_version(&sup(132, DType::BF16)),
            "x11_bf16_c8_m3_s3_i_b"
        );
        assert_eq!(auto_version(&sup(131, DType::BF16)), "x11_bf16_c8_m3_s3_i");
        assert_eq!(auto_version(&sup(64, DType::BF16)), "x11_bf16_c8_m3_s3_i");
        // one tile an SM and fewer: v12 (session 31; f32 / f16 states with dt per head too),
        // two: its m2 form, more: c4_m4
        assert_eq!(auto_version(&sup(1, DType::BF16)), "v12");
        assert_eq!(auto_version(&sup(2, DType::BF16)), "x12_bf16_m2");
        assert_eq!(auto_version(&sup(3, DType::BF16)), "x11_bf16_c4_m4");
        assert_eq!(auto_version(&sup(1, DType::F32)), "v12");
        assert_eq!(auto_version(&sup(2, DType::F32)), "v10");
        assert_eq!(auto_version(&sup(1, DType::F16)), "v12");
        let sr1 = AutoShape {
            sr: true,
            ..sup(1, DType::F16)
        };
        assert_eq!(auto_version(&sr1), "v10");
        assert_eq!(auto_version(&sup(256, DType::F16)), "v11");
        assert_eq!(auto_version(&sup(256, DType::I16)), "v9");
        // bf16 with dt per dim: the staged interleaved form (session 28 call 4); f16 with dt per
        // dim and stochastic rounding keep the older picks
        let per_dim = |b| AutoShape {
            dt_per_dim: true,
            ..sup(b, DType::BF16)
        };
        assert_eq!(auto_version(&per_dim(64)), "x11_bf16_c8_m3_s3_i");
        assert_eq!(auto_version(&per_dim(256)), "x11_bf16_c8_m3_s3_i"); // `_b` measured per head only
        let per_dim_f16 = AutoShape {
            dt_per_dim: true,
            ..sup(64, DType::F16)
        };
        assert_eq!(auto_version(&per_dim_f16), "v9");
        assert_eq!(auto_version(&per_dim(1)), "v12");
        assert_eq!(auto_version(&per_dim(2)), "v10");
        let sr = AutoShape {
            sr: true,
            ..sup(64, DType::F16)
        };
        assert_eq!(auto_version(&sr), "v9");
        // 129 tiles an SM (past session 27's c4_m4 range): the interleaved staged form, with
        // bulk stores from 128 tiles an SM (session 30)
        let over = AutoShape {
            nheads: 129,
            ..sup(132, DType::BF16)
        };
        assert_eq!(auto_version(&over), "x11_bf16_c8_m3_s3_i_b");
        // dim 40 is not whole 16-row chunks: v9
        let d40 = AutoShape {
            dim: 40,
            ..sup(256, DType::BF16)
        };
        assert_eq!(auto_version(&d40), "v9");
        // f16 with stochastic rounding at batch 256: v9; bf16 with dt per dim: the staged form
        let sr256 = AutoShape {
            sr: true,
            ..sup(256, DType::F16)
        };
        assert_eq!(auto_version(&sr256), "v9");
        assert_eq!(auto_version(&per_dim(256)), "x11_bf16_c8_m3_s3_i");
        // A full: v5; a dstate v3 cannot lay out: v1; dim 65 (no v11 chunking): v9 / v10 / v8
        let full = AutoShape {
            a_full: true,
            ..sup(256, DType::BF16)
        };
        assert_eq!(auto_version(&full), "v5");
        let odd = AutoShape {
            dstate: 3,
            ..sup(256, DType::BF16)
        };
        assert_eq!(auto_version(&odd), "v1");
        let d65 = |b, state| AutoShape {
            dim: 65,
            ..sup(b, state)
        };
        assert_eq!(auto_version(&d65(64, DType::BF16)), "v9");
        // v12 takes any dim (64-row passes)
        assert_eq!(auto_version(&d65(1, DType::BF16)), "v12");
        assert_eq!(auto_version(&d65(256, DType::F32)), "v8");
    }
}
