//! LatentMoE expert layer on the GPU (gpu/kernels/moe.cu, gpu/src/ops/moe.rs) vs the reference.
//!
//! - `moe_permute`, `moe_finalize`: bit-exact (every T in {1, 7, 64, 300} and more, empty
//!   experts, i32/i64 indices, duplicate experts in a token, E up to 65536).
//! - grouped GEMMs on exactly-summable inputs (small integers / powers of two, so every fp32
//!   accumulation order gives the same sums): bit-exact, every format pair and tile version.
//! - grouped GEMMs on random normal inputs: GEMM1's NVFP4 output compared code by code (a code
//!   may differ by one E2M1 step, a scale by one E4M3 step, in <= 1% of the codes / blocks:
//!   fp32 sums in another order), `h` and GEMM2's output by NMSE.
//!
//! Outputs are poisoned with three byte patterns and the runs must agree bit for bit (an
//! element never written would show the poison). Run on a GPU:
//! `cargo test --release -p duet-gpu --test gpu_moe -- --ignored`.

mod common;

use common::{diff, exact, gpu, sets};
use compare::gen::Rng;
use compare::Tolerance;
use gpu::ops::{self, RunOpts};
use reference::num::{e2m1_to_f32, e4m3_bits_to_f32, unpack_e2m1};
use reference::ops::moe_permute::permute;
use reference::ops::nvfp4_quantize::{quantize, Nvfp4Mode, SfLayout};
use reference::{DType, Tensor, TensorMap};

const GEMM_VERSIONS: [&str; 7] = ["v1", "v1_m16", "v1_m64", "v1_w64", "v2", "v3", "v4"];

/// Every GEMM version that takes these operand formats (`v2_v8`, `v3_r8*`: NVFP4 x NVFP4 only),
/// or only those DUET_MOE_TEST_VERSIONS names.
fn versions_for(xf4: bool, wf4: bool) -> Vec<String> {
    let mut v = all_versions_for(xf4, wf4);
    // DUET_MOE_TEST_VERSIONS=a,b: only these (sanitizer runs, which are too slow for all).
    if let Ok(keep) = std::env::var("DUET_MOE_TEST_VERSIONS") {
        let keep: Vec<String> = keep.split(',').map(|s| s.trim().to_string()).collect();
        // A misspelt name would leave nothing to test and every test passing.
        let known = all_versions_for(true, true);
        let unknown: Vec<&String> = keep.iter().filter(|k| !known.contains(k)).collect();
        assert!(
            unknown.is_empty(),
            "DUET_MOE_TEST_VERSIONS names {unknown:?}, not GEMM versions ({known:?})"
        );
        v.retain(|x| keep.contains(x));
    }
    v
}

fn all_versions_for(xf4: bool, wf4: bool) -> Vec<String> {
    let mut v: Vec<String> = GEMM_VERSIONS.iter().map(|s| s.to_string()).collect();
    if xf4 && wf4 {
        v.push("v2_v8".into());
        // every R form, the general ones included (they run on any K, aligned or not)
        v.extend(
            gpu::ops::moe::R_FORMS
                .iter()
                .map(|f| format!("v3_{}", f.tag)),
        );
        // the wgmma forms (they run v1's tiles where K % 128 != 0)
        v.extend(
            gpu::ops::moe::X_FORMS
                .iter()
                .map(|f| format!("v4_{}", f.tag)),
        );
    }
    v
}

#[test]
fn moe_kernels_compile_without_spills() {
    if !gpu::compile::nvrtc_available() {
        eprintln!("NVRTC not loadable: skipped (the nvrtc_compile test reports it)");
        return;
    }
    let res = match gpu::compile::resources("moe", "sm_90a") {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert!(res.iter().any(|r| r.kernel == "moe_gemm_m16_ff_q"));
    for r in &res {
        eprintln!(
            "{}: {} registers, {} B spill stores, {} B spill loads",
            r.kernel, r.registers, r.spill_stores_bytes, r.spill_loads_bytes
        );
    }
    // The production path (NVFP4 activations x NVFP4 weights, both tile shapes, both
    // epilogues) and the permutation / finalize kernels must not spill. The bf16 x bf16
    // quantizing GEMMs (`*_bb_q`, test/reference formats only) are not held to it.
    let checked: Vec<_> = res
        .iter()
        .filter(|r| r.kernel.contains("_ff_") || !r.kernel.starts_with("moe_gemm_"))
        .collect();
    assert!(
        checked.len() >= 4 + 5,
        "expected the 4 ff GEMMs and the permute / finalize kernels: {checked:?}"
    );
    for r in checked {
        assert_eq!(
            (r.spill_stores_bytes, r.spill_loads_bytes),
            (0, 0),
            "{} spills: {r:?}",
            r.kernel
        );
        // Session 21: a zeroing of accumulators left inside a pending wgmma group made ptxas
        // wait after every wgmma (C7515) without any other sign.
        assert!(
            !r.wgmma_serialized,
            "{}: ptxas serialized its wgmma's",
            r.kernel
        );
    }
}

/// `t` tokens x `k` experts in `0..e`: distinct per token (skewed, so some experts are hot and
/// many empty) or, with `dups`, drawn with replacement.
fn routing(r: &mut Rng, t: usize, k: usize, e: usize, dups: bool) -> Vec<i64> {
    (0..t)
        .flat_map(|_| {
            let mut chosen: Vec<i64> = vec![];
            while chosen.len() < k {
                let c = (r.below(e as u64 * e as u64) as f64).sqrt() as i64;
                if dups || k > e || !chosen.contains(&c) {
                    chosen.push(c.min(e as i64 - 1));
                }
            }
            chosen
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// moe_permute

#[test]
#[ignore = "gpu"]
fn permute_bit_exact() {
    let shapes = [
        (1usize, 22usize, 512usize),
        (7, 22, 512),
        (64, 22, 512),
        (300, 22, 512),
        (300, 6, 72),
        (7, 1, 1),
        (64, 4, 3),
        (1, 1, 65536),
        (2000, 8, 65536),
        (4096, 22, 512),
    ];
    for (i, &(t, k, e)) in shapes.iter().enumerate() {
        for dups in [false, true] {
            for dt in [DType::I32, DType::I64] {
                let mut r = Rng::new(100 + i as u64);
                let idx = routing(&mut r, t, k, e, dups);
                let mut m = TensorMap::new();
                let tensor = if dt == DType::I32 {
                    Tensor::from_i32(&[t, k], idx.iter().map(|&v| v as i32).collect())
                } else {
                    Tensor::from_i64(&[t, k], idx.clone())
                };
                m.insert("topk_indices".into(), tensor);
                let name = format!("T={t},k={k},E={e},dups={dups},{dt}");
                if let Err(msg) = diff(
                    "moe_permute",
                    "v1",
                    &name,
                    &m,
                    &sets(&[("num_experts", e.to_string())]),
                    &exact,
                ) {
                    panic!("{msg}");
                }
            }
        }
    }
}

/// moe_perm_offsets fills the grouped GEMMs' m-tile schedule (the layer's launch fewer) with
/// exactly moe_tile_schedule's tables, for every tile height the GEMMs use, over poisoned
/// tables, with empty experts, duplicates and more experts than threads.
#[test]
#[ignore = "gpu"]
fn permute_fills_the_tile_schedule() {
    use cudarc::driver::DevicePtr;
    use gpu::ops::moe::{launch_permute, PermuteOut, PermuteScratch, Schedule, TileCfg, R_FORMS};
    let g = gpu();
    let st = &g.stream;
    let mut cfgs = vec![TileCfg::M16, TileCfg::M64];
    for rows in [1, 2, 4, 8] {
        let f = R_FORMS.iter().find(|f| f.rows == rows).copied();
        cfgs.push(TileCfg::R(f.expect("an R form of these rows")));
    }
    let shapes = [
        (1usize, 22usize, 512usize, false),
        (8, 22, 512, false),
        (64, 22, 512, false),
        (300, 6, 72, true),
        (33, 4, 3, true),
        (5, 2, 3000, false),
    ];
    for (i, &(t, k, e, dups)) in shapes.iter().enumerate() {
        let mut r = Rng::new(900 + i as u64);
        let idx = routing(&mut r, t, k, e, dups);
        let n = t * k;
        let d_idx = g.upload(&Tensor::from_i64(&[t, k], idx)).expect("upload");
        let raw_i32 = |len: usize| g.alloc_raw::<i32>(len).expect("alloc");
        let (ptoken, pslot, inverse) = (raw_i32(n), raw_i32(n), raw_i32(n));
        let off64 = g.alloc_raw::<i64>(e + 1).expect("alloc");
        let off64_p = off64.device_ptr(st).0;
        for c in &cfgs {
            let fused = Schedule::new(&g, *c, n, e).expect("schedule");
            fused.poison(&g, 5 + i as u64).expect("poison");
            let mut scratch = PermuteScratch::new(&g, n, e).expect("scratch");
            let o = PermuteOut {
                ptoken: ptoken.device_ptr(st).0,
                pslot: pslot.device_ptr(st).0,
                counts32: 0,
                off32: 0,
                off64: off64_p,
                inverse: inverse.device_ptr(st).0,
                tiles: Some(fused.out(&g)),
            };
            launch_permute(&g, d_idx.ptr(st), true, t, k, e, &mut scratch, &o).expect("permute");
            let alone = Schedule::new(&g, *c, n, e).expect("schedule");
            alone.poison(&g, 50 + i as u64).expect("poison");
            alone.launch(&g, off64_p, e).expect("schedule launch");
            g.sync().expect("sync");
            let (fe, fr) = fused.download(&g).expect("download");
            let (ae, ar) = alone.download(&g).expect("download");
            assert!(
                ae.iter().any(|&x| x >= 0),
                "T={t} k={k} E={e} {c:?}: no tiles at all"
            );
            assert_eq!(fe, ae, "T={t} k={k} E={e} {c:?}: tile experts differ");
            assert_eq!(fr, ar, "T={t} k={k} E={e} {c:?}: tile rows differ");
        }
    }
}

#[test]
#[ignore = "gpu"]
fn permute_rejects_out_of_range_experts() {
    let g = gpu();
    let o = ops::find("moe_permute").unwrap_or_else(|e| panic!("{e}"));
    let mut m = TensorMap::new();
    m.insert(
        "topk_indices".into(),
        Tensor::from_i32(&[2, 2], vec![0, 1, 2, 4]),
    );
    let err = ops::run_version(
        &g,
        &o,
        "v1",
        &m,
        &sets(&[("num_experts", "4".into())]),
        &RunOpts::default(),
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(err.contains("[1, 1] = 4"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// grouped GEMM inputs

#[derive(Clone, Copy, Debug)]
struct GemmCase {
    t: usize,
    k: usize,
    e: usize,
    kdim: usize,
    n: usize,
    xf4: bool,
    wf4: bool,
    /// Exactly summable values (small integers, power-of-two scales).
    exact: bool,
    seed: u64,
}

impl GemmCase {
    fn name(&self) -> String {
        format!(
            "T={},k={},E={},K={},N={},x={},w={},{}",
            self.t,
            self.k,
            self.e,
            self.kdim,
            self.n,
            if self.xf4 { "nvfp4" } else { "bf16" },
            if self.wf4 { "nvfp4" } else { "bf16" },
            if self.exact { "exact-sums" } else { "normal" }
        )
    }
}

/// NVFP4 `[rows, cols]` with random codes (no NaN) and power-of-two scales in [1/2, 2].
fn exact_nvfp4(r: &mut Rng, rows: usize, cols: usize) -> (Vec<u8>, Vec<u8>) {
    let codes: Vec<u8> = (0..rows * cols / 2).map(|_| r.next_u32() as u8).collect();
    let sf: Vec<u8> = (0..rows * cols / 16)
        .map(|_| [0x30u8, 0x38, 0x40][r.below(3) as usize])
        .collect();
    (codes, sf)
}

fn gemm_inputs(c: &GemmCase, prefix: &str) -> TensorMap {
    let mut r = Rng::new(c.seed);
    let idx = routing(&mut r, c.t, c.k, c.e, false);
    let p = permute(&idx, c.k, c.e).unwrap_or_else(|e| panic!("{e}"));
    let (m, kd, n, e) = (c.t * c.k, c.kdim, c.n, c.e);
    let mut out = TensorMap::new();
    out.insert(
        "expert_offsets".into(),
        Tensor::from_i32(&[e + 1], p.offsets.iter().map(|&o| o as i32).collect()),
    );
    // Activations.
    if c.xf4 {
        let (codes, sf, gs) = if c.exact {
            let (a, b) = exact_nvfp4(&mut r, m, kd);
            (a, b, 1.0f32)
        } else {
            let x = r.normal_vec(m * kd, 1.0);
            let q = quantize(&x, m, kd, None, Nvfp4Mode::Kernel, SfLayout::Linear)
                .unwrap_or_else(|e| panic!("{e}"));
            (q.x_fp4, q.sf, q.global_scale)
        };
        out.insert("x_fp4".into(), Tensor::from_u8(&[m, kd / 2], codes));
        out.insert("sf".into(), Tensor::from_u8(&[m, kd / 16], sf));
        out.insert("global_scale".into(), Tensor::from_f32(&[1], vec![gs]));
    } else {
        let x: Vec<f32> = if c.exact {
            (0..m * kd).map(|_| r.below(7) as f32 - 3.0).collect()
        } else {
            r.normal_vec(m * kd, 1.0)
        };
        out.insert("x".into(), Tensor::from_f32_as(&[m, kd], &x, DType::BF16));
    }
    // Weights.
    if c.wf4 {
        let (mut codes, mut sfs, mut gl) = (vec![], vec![], vec![]);
        for ex in 0..e {
            if c.exact {
                let (a, b) = exact_nvfp4(&mut r, n, kd);
                codes.extend(a);
                sfs.extend(b);
                gl.push([0.5f32, 1.0, 2.0][ex % 3]);
            } else {
                let w = r.normal_vec(n * kd, 1.0 / (kd as f32).sqrt());
                let q = quantize(&w, n, kd, None, Nvfp4Mode::Kernel, SfLayout::Linear)
                    .unwrap_or_else(|e| panic!("{e}"));
                codes.extend(q.x_fp4);
                sfs.extend(q.sf);
                gl.push(q.global_scale);
            }
        }
        out.insert(
            format!("{prefix}_fp4"),
            Tensor::from_u8(&[e, n, kd / 2], codes),
        );
        out.insert(
            format!("{prefix}_sf"),
            Tensor::from_u8(&[e, n, kd / 16], sfs),
        );
        out.insert(format!("{prefix}_global_scale"), Tensor::from_f32(&[e], gl));
    } else {
        let w: Vec<f32> = if c.exact {
            (0..e * n * kd)
                .map(|_| (r.below(9) as f32 - 4.0) * 0.25)
                .collect()
        } else {
            r.normal_vec(e * n * kd, 1.0 / (kd as f32).sqrt())
        };
        out.insert(
            prefix.into(),
            Tensor::from_f32_as(&[e, n, kd], &w, DType::BF16),
        );
    }
    out
}

/// Shapes: every T of the issue, empty experts, K below / across one K step of each tile
/// shape (16, 48, 64, 272 = 256 + 16), N not a multiple of the tile width, K = 384 (more
/// k-tiles than w64's ring has stages) and prefill-sized experts for the wgmma forms (every
/// token-tile width of the S forms).
fn gemm_shapes() -> Vec<(usize, usize, usize, usize, usize)> {
    vec![
        // (T, k, E, K, N)
        (1, 22, 64, 64, 128),
        (7, 4, 16, 48, 80),
        (64, 6, 16, 272, 144),
        (300, 4, 16, 64, 48),
        (300, 2, 5, 16, 208),
        (7, 3, 1, 128, 64),
        // w64's NVFP4 ring (K % 64 == 0): 6 k-tiles through its 4 stages, 3 m-tiles an
        // expert (the last partial), a partial n-tile
        (200, 6, 8, 384, 144),
        // r8's aligned path past its register ring (10 K steps over 1, 2 and 4 warps), partial
        // and full 8-row m-tiles
        (9, 4, 6, 1280, 96),
        // K = 2688, the Super's GEMM2 (21 steps: x staged in 3-unit batches over 1344 units
        // of an 8-row tile), N = 64 (half of r8w8p4's 128 columns: idle warps)
        (9, 4, 6, 2688, 64),
        // the wgmma forms' prefill tiles: hundreds of rows an expert (full and partial 64- and
        // 128-token m-tiles), K = 512 (4 steps through a 4-stage ring), two weight slices
        (256, 2, 3, 512, 256),
        // the S forms' token tiles (up to 256 rows, wgmma N = 64 x its 64-row quarters): experts
        // of ~400 rows (a full tile and a partial one) and of ~50 (one or two quarters)
        (600, 2, 3, 256, 384),
        (100, 4, 8, 256, 128),
        // the xw forms (session 34): experts of ~100 rows (wgmma n128 at both token tiles) over
        // 10 steps, so the producer refills each of its 2 / 3 x tiles several times
        (300, 2, 6, 1280, 128),
        // the R forms' column groups (r*c*: 2 or 4 groups of 16 a warp, one ring stream): K =
        // 128 (one step a group, every step crosses a group), 25 groups (the last blocks'
        // warps hold 1..4 live groups)
        (40, 4, 8, 128, 400),
    ]
}

const FORMATS: [(bool, bool); 4] = [(true, true), (false, false), (false, true), (true, false)];

// ---------------------------------------------------------------------------------------------
// bit-exact GEMMs (exactly summable inputs)

#[test]
#[ignore = "gpu"]
fn gemm1_bit_exact_on_exact_sums() {
    for (i, (t, k, e, kdim, n)) in gemm_shapes().into_iter().enumerate() {
        for (xf4, wf4) in FORMATS {
            let c = GemmCase {
                t,
                k,
                e,
                kdim,
                n,
                xf4,
                wf4,
                exact: true,
                seed: 7 + i as u64,
            };
            let mut m = gemm_inputs(&c, "w1");
            for v in versions_for(xf4, wf4).iter().map(|s| s.as_str()) {
                for (mode, round, given) in [
                    ("kernel", "none", false),
                    ("exact", "bf16", true),
                    ("kernel", "bf16", true),
                ] {
                    if given {
                        m.insert(
                            "out_global_scale".into(),
                            Tensor::from_f32(&[1], vec![0.75]),
                        );
                    } else {
                        m.remove("out_global_scale");
                    }
                    let s = sets(&[
                        ("mode", mode.into()),
                        ("round_before_quant", round.into()),
                        ("emit_h", "true".into()),
                    ]);
                    let name = format!("{} {mode} round={round} given={given}", c.name());
                    if let Err(msg) = diff("moe_expert_gemm1_relu2_nvfp4", v, &name, &m, &s, &exact)
                    {
                        panic!("{msg}");
                    }
                }
            }
        }
    }
}

#[test]
#[ignore = "gpu"]
fn gemm2_bit_exact_on_exact_sums() {
    let mut shapes = gemm_shapes();
    shapes.push((64, 4, 16, 64, 77)); // N odd
    for (i, (t, k, e, kdim, n)) in shapes.into_iter().enumerate() {
        for (xf4, wf4) in FORMATS {
            let c = GemmCase {
                t,
                k,
                e,
                kdim,
                n,
                xf4,
                wf4,
                exact: true,
                seed: 70 + i as u64,
            };
            let m = gemm_inputs(&c, "w2");
            for v in versions_for(xf4, wf4).iter().map(|s| s.as_str()) {
                for dt in ["f32", "bf16"] {
                    let name = format!("{} out={dt}", c.name());
                    let s = sets(&[("out_dtype", dt.into())]);
                    if let Err(msg) = diff("moe_expert_gemm2", v, &name, &m, &s, &exact) {
                        panic!("{msg}");
                    }
                }
            }
        }
    }
}

#[test]
#[ignore = "gpu"]
fn gemm_bf16_odd_k() {
    // bf16 operands allow any K: K % 8 == 0 with a half chunk (72) and element loads (37).
    for (i, kdim) in [72usize, 37, 300].into_iter().enumerate() {
        let c = GemmCase {
            t: 7,
            k: 4,
            e: 9,
            kdim,
            n: 96,
            xf4: false,
            wf4: false,
            exact: true,
            seed: 500 + i as u64,
        };
        for v in GEMM_VERSIONS {
            let m2 = gemm_inputs(&c, "w2");
            if let Err(msg) = diff(
                "moe_expert_gemm2",
                v,
                &c.name(),
                &m2,
                &sets(&[("out_dtype", "f32".into())]),
                &exact,
            ) {
                panic!("{msg}");
            }
            let mut m1 = gemm_inputs(&c, "w1");
            m1.insert("out_global_scale".into(), Tensor::from_f32(&[1], vec![0.5]));
            if let Err(msg) = diff(
                "moe_expert_gemm1_relu2_nvfp4",
                v,
                &c.name(),
                &m1,
                &sets(&[]),
                &exact,
            ) {
                panic!("{msg}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// random normal inputs: bounded code flips / NMSE

/// Runs with three poison bytes; the runs must agree bitwise. Returns (reference, gpu).
fn run_both(
    op: &str,
    version: &str,
    name: &str,
    inputs: &TensorMap,
    s: &[(String, String)],
) -> (TensorMap, TensorMap) {
    let g = gpu();
    let def = reference::ops::find(op).unwrap_or_else(|e| panic!("{e}"));
    let want = def
        .call(inputs, s)
        .unwrap_or_else(|e| panic!("{name}: reference failed: {e}"));
    let o = ops::find(op).unwrap_or_else(|e| panic!("{e}"));
    let mut runs: Vec<TensorMap> = vec![];
    for poison in [0xFFu8, 0x00, 0x5A] {
        let got = ops::run_version(&g, &o, version, inputs, s, &RunOpts { poison })
            .unwrap_or_else(|e| panic!("{name} gpu:{op}:{version} (poison {poison:#04x}): {e}"));
        if let Some(first) = runs.first() {
            for (k, t) in &got {
                assert!(
                    first.get(k).map(|a| a.to_le_bytes()) == Some(t.to_le_bytes()),
                    "{name} gpu:{op}:{version}: output '{k}' differs between poison patterns: \
                     some elements are not written (or the kernel is not deterministic)"
                );
            }
        }
        runs.push(got);
    }
    (want, runs.swap_remove(0))
}

fn mag_index(code: u8) -> i32 {
    (code & 7) as i32
}

/// GEMM1 NVFP4 output vs the reference: scales equal or one E4M3 step apart (<= 1% of blocks),
/// codes of equal-scale blocks equal or one E2M1 step apart (<= 1% of codes), dequantized
/// values of the other blocks within one top E2M1 step of the larger scale.
fn check_nvfp4(name: &str, want: &TensorMap, got: &TensorMap, m: usize, n: usize, given: bool) {
    let gw = want["global_scale"].to_f32_vec()[0];
    let gg = got["global_scale"].to_f32_vec()[0];
    if given {
        assert_eq!(gw.to_bits(), gg.to_bits(), "{name}: global_scale");
    } else {
        assert!(
            ((gw - gg) / gw).abs() <= 1e-5,
            "{name}: derived global_scale {gg} vs reference {gw}"
        );
    }
    let bytes = |t: &Tensor| t.as_u8().map(|s| s.to_vec()).unwrap_or_default();
    let (rc, gc) = (
        unpack_e2m1(&bytes(&want["x_fp4"]), m * n),
        unpack_e2m1(&bytes(&got["x_fp4"]), m * n),
    );
    let (rs, gs) = (bytes(&want["sf"]), bytes(&got["sf"]));
    assert_eq!(rs.len(), m * n / 16, "{name}: sf shape");
    assert_eq!(gs.len(), m * n / 16, "{name}: sf shape");
    let (mut sf_flips, mut code_flips) = (0usize, 0usize);
    for b in 0..m * n / 16 {
        let (a, c) = (rs[b], gs[b]);
        if a != c {
            assert!(
                (a as i32 - c as i32).abs() == 1 && (a & 0x80) == (c & 0x80),
                "{name}: block {b} (row {}, cols {}..): scale byte {c:#04x} vs reference {a:#04x} \
                 (more than one E4M3 step)",
                b / (n / 16),
                (b % (n / 16)) * 16
            );
            sf_flips += 1;
            let smax = e4m3_bits_to_f32(a).max(e4m3_bits_to_f32(c));
            for j in b * 16..(b + 1) * 16 {
                let dr = e2m1_to_f32(rc[j]) * e4m3_bits_to_f32(a);
                let dg = e2m1_to_f32(gc[j]) * e4m3_bits_to_f32(c);
                assert!(
                    (dr - dg).abs() <= 2.0 * smax,
                    "{name}: element {j}: dequantized {dg} vs reference {dr}"
                );
            }
            continue;
        }
        for j in b * 16..(b + 1) * 16 {
            let (x, y) = (rc[j], gc[j]);
            if x == y {
                continue;
            }
            let same_sign = (x & 8) == (y & 8) || mag_index(x) == 0 || mag_index(y) == 0;
            assert!(
                same_sign && (mag_index(x) - mag_index(y)).abs() == 1,
                "{name}: element {j} (row {}, col {}): code {y:#x} vs reference {x:#x} (more \
                 than one E2M1 step)",
                j / n,
                j % n
            );
            code_flips += 1;
        }
    }
    let allow_codes = (m * n / 100).max(2);
    let allow_blocks = (m * n / 16 / 100).max(1);
    assert!(
        code_flips <= allow_codes && sf_flips <= allow_blocks,
        "{name}: {code_flips} code flips (allowed {allow_codes}) and {sf_flips} scale flips \
         (allowed {allow_blocks}) of {} codes",
        m * n
    );
    if code_flips + sf_flips > 0 {
        eprintln!("{name}: {code_flips} code / {sf_flips} scale flips (within bounds)");
    }
}

fn nmse(name: &str, what: &str, want: &Tensor, got: &Tensor, max: f64) {
    let rep = compare::tolerance::compare(what, want, got, Tolerance::Nmse { max });
    assert!(rep.passed, "{name}: {}", rep.render());
}

#[test]
#[ignore = "gpu"]
fn gemm1_random_bounded_flips() {
    for (i, (t, k, e, kdim, n)) in gemm_shapes().into_iter().enumerate() {
        for (xf4, wf4) in FORMATS {
            let c = GemmCase {
                t,
                k,
                e,
                kdim,
                n,
                xf4,
                wf4,
                exact: false,
                seed: 1000 + i as u64,
            };
            let mut m = gemm_inputs(&c, "w1");
            let mm = t * k;
            for v in versions_for(xf4, wf4).iter().map(|s| s.as_str()) {
                for (mode, round, given) in [
                    ("kernel", "none", false),
                    ("exact", "none", true),
                    ("kernel", "bf16", true),
                ] {
                    if given {
                        m.insert(
                            "out_global_scale".into(),
                            Tensor::from_f32(&[1], vec![37.0]),
                        );
                    } else {
                        m.remove("out_global_scale");
                    }
                    let s = sets(&[
                        ("mode", mode.into()),
                        ("round_before_quant", round.into()),
                        ("emit_h", "true".into()),
                    ]);
                    let name = format!("{} {v} {mode} round={round} given={given}", c.name());
                    let (want, got) = run_both("moe_expert_gemm1_relu2_nvfp4", v, &name, &m, &s);
                    check_nvfp4(&name, &want, &got, mm, n, given);
                    nmse(&name, "h", &want["h"], &got["h"], 1e-6);
                }
            }
        }
    }
}

#[test]
#[ignore = "gpu"]
fn gemm2_random_nmse() {
    let mut shapes = gemm_shapes();
    shapes.push((64, 4, 16, 64, 77));
    for (i, (t, k, e, kdim, n)) in shapes.into_iter().enumerate() {
        for (xf4, wf4) in FORMATS {
            let c = GemmCase {
                t,
                k,
                e,
                kdim,
                n,
                xf4,
                wf4,
                exact: false,
                seed: 2000 + i as u64,
            };
            let m = gemm_inputs(&c, "w2");
            for v in versions_for(xf4, wf4).iter().map(|s| s.as_str()) {
                for (dt, max) in [("f32", 1e-10), ("bf16", 1e-5)] {
                    let name = format!("{} {v} out={dt}", c.name());
                    let (want, got) = run_both(
                        "moe_expert_gemm2",
                        v,
                        &name,
                        &m,
                        &sets(&[("out_dtype", dt.into())]),
                    );
                    nmse(&name, "out", &want["out"], &got["out"], max);
                }
            }
        }
    }
}

#[test]
#[ignore = "gpu"]
fn gemm_rejects_f32_operands_with_a_reason() {
    let c = GemmCase {
        t: 2,
        k: 2,
        e: 3,
        kdim: 32,
        n: 32,
        xf4: false,
        wf4: true,
        exact: true,
        seed: 3,
    };
    let mut m = gemm_inputs(&c, "w2");
    let x = m["x"].to_f32_vec();
    m.insert("x".into(), Tensor::from_f32(&[4, 32], x));
    let o = ops::find("moe_expert_gemm2").unwrap_or_else(|e| panic!("{e}"));
    let why = (o.applicable)("v1", &m, &reference::op::Params::from_pairs("x", &[]));
    assert!(
        why.as_deref().is_some_and(|w| w.contains("bf16")),
        "{why:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// moe_finalize

#[test]
#[ignore = "gpu"]
fn finalize_bit_exact() {
    for (i, &(t, k, h)) in [
        (1usize, 22usize, 1024usize),
        (7, 22, 96),
        (64, 6, 1027),
        (300, 4, 33),
        (5, 1, 1),
    ]
    .iter()
    .enumerate()
    {
        for dt in [DType::F32, DType::BF16] {
            let mut r = Rng::new(300 + i as u64);
            let mut perm: Vec<i32> = (0..(t * k) as i32).collect();
            for j in (1..perm.len()).rev() {
                perm.swap(j, r.below(j as u64 + 1) as usize);
            }
            let mut m = TensorMap::new();
            m.insert("expert_out".into(), r.normal_tensor(&[t * k, h], 1.0, dt));
            m.insert(
                "topk_weights".into(),
                r.uniform_tensor(&[t, k], 0.01, 0.5, DType::F32),
            );
            m.insert("inverse".into(), Tensor::from_i32(&[t, k], perm));
            let name = format!("T={t},k={k},H={h},{dt}");
            if let Err(msg) = diff("moe_finalize", "v1", &name, &m, &[], &exact) {
                panic!("{msg}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// the whole expert layer chained on the device outputs

#[test]
#[ignore = "gpu"]
fn chain_permute_gemm1_gemm2_finalize() {
    // GPU permute -> GPU GEMM1 (NVFP4 out, bf16-rounded relu^2) -> GPU GEMM2 -> GPU finalize,
    // each stage fed with the GPU's previous output, vs the reference stages fed the same way.
    let (t, k, e, l, i) = (64usize, 6usize, 16usize, 64usize, 128usize);
    let g = gpu();
    let mut r = Rng::new(42);
    let idx = routing(&mut r, t, k, e, false);
    let run = |op: &str, m: &TensorMap, s: &[(String, String)]| {
        let o = ops::find(op).unwrap_or_else(|e| panic!("{e}"));
        ops::run_version(&g, &o, o.default_version(), m, s, &RunOpts::default())
            .unwrap_or_else(|e| panic!("{op}: {e}"))
    };
    let mut pm = TensorMap::new();
    pm.insert(
        "topk_indices".into(),
        Tensor::from_i32(&[t, k], idx.iter().map(|&v| v as i32).collect()),
    );
    let perm = run("moe_permute", &pm, &sets(&[("num_experts", e.to_string())]));
    let tok = perm["permuted_token"].to_i64_vec().unwrap_or_default();
    let lat = r.normal_vec(t * l, 1.0);
    let rows: Vec<f32> = tok
        .iter()
        .flat_map(|&tk| lat[tk as usize * l..(tk as usize + 1) * l].to_vec())
        .collect();
    let q = quantize(&rows, t * k, l, None, Nvfp4Mode::Kernel, SfLayout::Linear)
        .unwrap_or_else(|e| panic!("{e}"));
    let c = GemmCase {
        t,
        k,
        e,
        kdim: l,
        n: i,
        xf4: true,
        wf4: true,
        exact: false,
        seed: 43,
    };
    let w1 = gemm_inputs(&c, "w1");
    let mut m1 = TensorMap::new();
    for nm in ["w1_fp4", "w1_sf", "w1_global_scale"] {
        m1.insert(nm.into(), w1[nm].clone());
    }
    m1.insert("expert_offsets".into(), perm["expert_offsets"].clone());
    m1.insert("x_fp4".into(), Tensor::from_u8(&[t * k, l / 2], q.x_fp4));
    m1.insert("sf".into(), Tensor::from_u8(&[t * k, l / 16], q.sf));
    m1.insert(
        "global_scale".into(),
        Tensor::from_f32(&[1], vec![q.global_scale]),
    );
    let s1 = sets(&[("round_before_quant", "bf16".into())]);
    let (want1, got1) = run_both(
        "moe_expert_gemm1_relu2_nvfp4",
        "v1",
        "chain gemm1",
        &m1,
        &s1,
    );
    check_nvfp4("chain gemm1", &want1, &got1, t * k, i, false);
    let c2 = GemmCase {
        kdim: i,
        n: l,
        seed: 44,
        ..c
    };
    let w2 = gemm_inputs(&c2, "w2");
    let mut m2 = TensorMap::new();
    for nm in ["w2_fp4", "w2_sf", "w2_global_scale"] {
        m2.insert(nm.into(), w2[nm].clone());
    }
    m2.insert("expert_offsets".into(), perm["expert_offsets"].clone());
    for nm in ["x_fp4", "sf", "global_scale"] {
        m2.insert(nm.into(), got1[nm].clone());
    }
    let (want2, got2) = run_both(
        "moe_expert_gemm2",
        "v1",
        "chain gemm2",
        &m2,
        &sets(&[("out_dtype", "bf16".into())]),
    );
    nmse("chain gemm2", "out", &want2["out"], &got2["out"], 1e-5);
    let mut m3 = TensorMap::new();
    m3.insert("expert_out".into(), got2["out"].clone());
    m3.insert(
        "topk_weights".into(),
        r.uniform_tensor(&[t, k], 0.01, 0.5, DType::F32),
    );
    m3.insert("inverse".into(), perm["inverse"].clone());
    if let Err(msg) = diff("moe_finalize", "v1", "chain finalize", &m3, &[], &exact) {
        panic!("{msg}");
    }
}

/// The expert layer at the Super shapes (T = 1 and 8; 512 experts, top-22, NVFP4) as a graph
/// with programmatic edges (schedule -> GEMM1 -> GEMM2, GEMM2 issuing its first weight stages
/// before its wait: `early`), on outputs poisoned before the replays, gives the eager
/// launches' GEMM2 bits, for the decode-sized R forms the layer picks (r8p4 / r2p8 / r8w8p4,
/// and `v3`, which mixes them) and for the schedule filled by the permutation.
#[test]
#[ignore = "gpu"]
fn expert_layer_with_programmatic_edges_gives_the_eager_bits() {
    let g = gpu();
    for t in [1usize, 8] {
        let v = gpu::ops::moe::bench_expert_layer_versions(
            &g,
            t,
            1.0,
            Some(&["v3_r8p4", "v3_r2p8", "v3_r8w8p4", "v3"]),
        )
        .unwrap_or_else(|e| panic!("T = {t}: {e}"));
        let versions = v["versions"].as_array().expect("versions");
        let mut checked = 0;
        for ver in versions {
            let name = ver["version"].as_str().unwrap_or("?");
            for (what, p) in [
                ("layer", &ver["layer"]["graph_pdl"]),
                (
                    "tiles from permute",
                    &ver["layer_tiles_from_permute"]["graph_pdl"],
                ),
            ] {
                assert!(
                    p.is_object(),
                    "T = {t} {name} {what}: no programmatic graph ran: {p}"
                );
                assert!(
                    p["programmatic_edges"].as_u64().unwrap_or(0) > 0,
                    "T = {t} {name} {what}: {p}"
                );
                assert_eq!(
                    p["pdl_out_matches_eager"],
                    serde_json::Value::Bool(true),
                    "T = {t} {name} {what}: GEMM2's output under programmatic edges differs"
                );
                checked += 1;
            }
        }
        assert!(
            ["v3_r8p4", "v3_r2p8", "v3_r8w8p4"]
                .iter()
                .all(|n| versions.iter().any(|x| x["version"] == *n)),
            "T = {t}: the r forms did not run"
        );
        assert!(checked >= 6, "T = {t}: {checked} graphs checked");
    }
}

/// The fused layer (moe.cu `moe_layer_r8w8p4_ff`: GEMM1 and GEMM2 on r8w8p4 tiles in one
/// launch, GEMM2's blocks of an m-tile waiting on a counter of its GEMM1 blocks) gives the two
/// r8w8p4 launches' GEMM2 bits at the Super shapes (T = 1, 8, 64; outputs poisoned before it),
/// and again after the bench's event and graph replays.
#[test]
#[ignore = "gpu"]
fn fused_layer_gives_the_two_launches_bits() {
    let g = gpu();
    for t in [1usize, 8, 64] {
        let v = gpu::ops::moe::bench_expert_layer_versions(&g, t, 1.0, Some(&["v3_r8w8p4"]))
            .unwrap_or_else(|e| panic!("T = {t}: {e}"));
        let f = &v["fused_layer"];
        assert!(f.is_object(), "T = {t}: no fused layer ran: {f}");
        assert_eq!(
            f["matches_two_launches"],
            serde_json::Value::Bool(true),
            "T = {t}: the fused layer's GEMM2 output differs from the two launches': {f}"
        );
        assert_eq!(
            f["replays_match"],
            serde_json::Value::Bool(true),
            "T = {t}: the output after the timed replays differs: {f}"
        );
    }
}

/// Racecheck calibration for the xw forms' hand-over (moe.cu `moe_xw_handover_probe`): the
/// consumers read what the producers wrote at every step (sums exact, poison first), and read
/// back their own overwrite of both tiles, with the final 512-thread barrier (`fin` 1, the xw
/// forms since session 35) and without it (`fin` 0, session 34's order). Run it under
/// `compute-sanitizer --tool racecheck` (scripts/calls/s35c1.sh): a report on `fin` 0 alone
/// says racecheck does not take a bar.arrive -> bar.sync pair as ordering the arriving threads'
/// earlier stores before the syncing threads' later ones.
#[test]
#[ignore = "gpu"]
fn xw_handover_probe_fin() {
    xw_handover_probe(1);
}
#[test]
#[ignore = "gpu"]
fn xw_handover_probe_arrive_only() {
    xw_handover_probe(0);
}
fn xw_handover_probe(fin: i32) {
    use cudarc::driver::{DevicePtr, PushKernelArg};
    let g = gpu();
    let (blocks, steps) = (3usize, 7i32);
    let n = 2 * 256 * blocks;
    let mut out = g.alloc_raw::<f32>(n).expect("alloc");
    g.stream
        .memcpy_htod(&vec![f32::from_bits(0x7fc0_dead); n], &mut out)
        .expect("poison");
    let f = g.function("moe", "moe_xw_handover_probe").expect("kernel");
    {
        let (op, _s) = out.device_ptr(&g.stream);
        let mut a = g.stream.launch_builder(&f);
        a.arg(&steps).arg(&fin).arg(&op);
        // SAFETY: blocks of 512 threads, static shared memory; out holds 512 f32 a block.
        unsafe { a.launch(gpu::runtime::cfg(blocks as u32, 512, 0)) }.expect("launch");
    }
    let got: Vec<f32> = g.stream.clone_dtoh(&out).expect("download");
    for b in 0..blocks {
        for c in 0..256usize {
            let src = (c + 37) % 256;
            let mut want = 0u32;
            for s in 0..steps as u32 {
                for i in 0..4 {
                    want += s * 4096 + 4 * src as u32 + i;
                }
            }
            assert_eq!(
                got[256 * b + c].to_bits(),
                want,
                "fin {fin}: block {b} consumer {c} summed other values"
            );
            let back = -2.0 * ((c + 1) % 256) as f32;
            assert_eq!(
                got[256 * blocks + 256 * b + c],
                back,
                "fin {fin}: block {b} consumer {c} read back another overwrite"
            );
        }
    }
}
