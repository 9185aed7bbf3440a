//! The end-to-end model's GPU path (gpu/src/model.rs, gpu/kernels/model_ops.cu) against the CPU
//! reference. `#[ignore = "gpu"]`: run on a GPU machine with `--ignored`.
//!
//! (a) every `ModelKernels` method of `GpuKernels` vs `CpuKernels` on seeded random non-zero
//!     inputs with odd sizes (tile edges crossed, attention key chunks crossed), each run with
//!     two poison bytes that must give bit-identical outputs (no element left unwritten);
//! (b) the tiny golden model (fixtures/models/nemotron-tiny-a): prefill, decode, MTP logits and
//!     every hidden state on the GPU path vs the transformers golden with the CPU e2e tests'
//!     tolerance (max|a-b| / max|a| < 1e-4, same greedy tokens), speculative decoding = greedy;
//! (c) GPU path vs CPU path per layer (fixture and seeded presets), decode steps and a
//!     multi-token verification pass with its promoted caches.

use gpu::model::GpuKernels;
use reference::model::kernels::{
    router_config, AttnGeometry, CpuKernels, ModelKernels, SsmDims, SsmParams, SsmRows,
};
use reference::model::{Mat, Model, Pass};
use reference::ops::ssd_chunk_scan::{DtConfig, DtTransform, SsdArgs, SsdDims};
use reference::{io, Tensor, TensorMap};
use std::path::PathBuf;
use std::sync::Arc;

/// The CPU e2e tests' tolerance (tests/e2e_golden.rs).
const TOL: f64 = 1e-4;

fn gpu_k(poison: u8) -> GpuKernels {
    match GpuKernels::new() {
        Ok(k) => k.with_poison(poison),
        Err(e) => panic!("GPU test run without a usable GPU: {e}"),
    }
}

/// Seeded values in +-[0.05, 1] (never zero).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let u = ((self.0 >> 40) as f32) / (1u64 << 24) as f32; // [0, 1)
        let m = 0.05 + 0.95 * u;
        if self.0 & 1 == 0 {
            m
        } else {
            -m
        }
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
    fn pos(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n)
            .map(|_| lo + (hi - lo) * (self.next().abs() - 0.05) / 0.95)
            .collect()
    }
}

/// max|a-b| / max|a| (a = reference).
fn max_rel(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths");
    let num = a
        .iter()
        .zip(b)
        .fold(0f64, |m, (x, y)| m.max((*x as f64 - *y as f64).abs()));
    let den = a.iter().fold(0f64, |m, x| m.max((*x as f64).abs()));
    if b.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    num / den.max(f64::MIN_POSITIVE)
}

/// Element-wise |a-b| <= atol * max|a| + rtol * |a|; panics with the worst element.
fn assert_close(what: &str, want: &[f32], got: &[f32], atol: f64, rtol: f64) {
    assert_eq!(want.len(), got.len(), "{what}: lengths");
    assert!(!want.is_empty(), "{what}: empty");
    let amax = want.iter().fold(0f64, |m, x| m.max((*x as f64).abs()));
    assert!(
        amax > 0.0,
        "{what}: the reference is all zeros (a useless test)"
    );
    for (i, (&a, &b)) in want.iter().zip(got).enumerate() {
        let (a, b) = (a as f64, b as f64);
        let lim = atol * amax + rtol * a.abs();
        assert!(
            (a - b).abs() <= lim && b.is_finite(),
            "{what}[{i}]: cpu {a:e} gpu {b:e} (|diff| {:e} > {lim:e}; max rel {:e})",
            (a - b).abs(),
            max_rel(want, got)
        );
    }
}

/// Runs `f` on the GPU with poison 0xFF and 0x00: the outputs must be bit-identical.
fn both_poisons<T: PartialEq + std::fmt::Debug>(what: &str, f: impl Fn(&GpuKernels) -> T) -> T {
    let a = f(&gpu_k(0xFF));
    let b = f(&gpu_k(0x00));
    assert!(
        a == b,
        "{what}: results differ between poison 0xFF and 0x00: some outputs are not written"
    );
    a
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

// ---------------------------------------------------------------- (a) kernels vs CPU

#[test]
#[ignore = "gpu"]
fn gemm_matches_cpu_linear_on_odd_shapes() {
    let cpu = CpuKernels;
    let mut r = Rng(0x1234_5678_9abc_def1);
    // (t, out, in): single element, tile edges +-1, decode rows, a K that is not a multiple
    // of the 16-deep k slice, more rows than one 64-row tile. t <= 8 runs model_gemv_f32:
    // K a multiple of 4 (16-byte loads, with and without a partial 4-load tail) or not
    // (scalar loads), 8 rows (its limit); t = 9 the tiled kernel again. t = 1 with K % 16 ==
    // 0 runs model_gemv1_f32 (517 and 7 columns: a partial last warp; 48: 3 chunks, most lanes
    // idle; 2688: 168 chunks, the tail's second chunk skipped).
    for (i, &(t, n, k)) in [
        (1usize, 300usize, 4100usize),
        (2, 70, 1024),
        (8, 33, 260),
        (8, 5, 4097),
        (9, 20, 64),
        (1usize, 1usize, 1usize),
        (1, 517, 256),
        (1, 33, 48),
        (1, 7, 2688),
        (3, 67, 129),
        (4, 64, 16),
        (65, 63, 17),
        (70, 131, 257),
        (129, 200, 45),
    ]
    .iter()
    .enumerate()
    {
        let x = r.vec(t * k, 1.0);
        let w = Mat::dense(n, k, r.vec(n * k, 1.0 / (k as f32).sqrt()));
        let bias = r.vec(n, 0.1);
        for b in [None, Some(&bias[..])] {
            let want = cpu.linear(&x, t, &w, b).expect("cpu linear");
            let got = both_poisons("gemm", |g| {
                bits(&g.linear(&x, t, &w, b).expect("gpu linear"))
            });
            let got: Vec<f32> = got.into_iter().map(f32::from_bits).collect();
            // fp32 with another summation order: bound each element by the magnitude of its
            // products, sum_k |x_k w_k| (+ |bias|).
            let wv = w.values();
            for row in 0..t {
                for o in 0..n {
                    let mag: f64 = (0..k)
                        .map(|j| (x[row * k + j] as f64 * wv[o * k + j] as f64).abs())
                        .sum::<f64>()
                        + b.map_or(0.0, |b| (b[o] as f64).abs());
                    let (a, g) = (want[row * n + o] as f64, got[row * n + o] as f64);
                    assert!(
                        (a - g).abs() <= 1e-5 * mag && g.is_finite(),
                        "case {i} ({t}x{n}x{k}, bias {}): [{row},{o}] cpu {a:e} gpu {g:e} (sum|xw| {mag:e})",
                        b.is_some()
                    );
                }
            }
        }
    }
}

#[test]
#[ignore = "gpu"]
fn norms_and_relu2_match_cpu() {
    let cpu = CpuKernels;
    let mut r = Rng(77);
    for (rows, n) in [(1usize, 1usize), (7, 257), (3, 1000), (2, 4096)] {
        let x = r.vec(rows * n, 3.0);
        let w = r.vec(n, 1.0);
        let want = cpu.rmsnorm(&x, &w, 1e-5).expect("cpu");
        let got = both_poisons("rmsnorm", |g| bits(&g.rmsnorm(&x, &w, 1e-5).expect("gpu")));
        let got: Vec<f32> = got.into_iter().map(f32::from_bits).collect();
        assert_close(&format!("rmsnorm {rows}x{n}"), &want, &got, 1e-6, 1e-5);
    }
    for (rows, d, group) in [
        (5usize, 96usize, 24usize),
        (3, 100, 100),
        (2, 1024, 128),
        (1, 9, 3),
    ] {
        let x = r.vec(rows * d, 2.0);
        let z = r.vec(rows * d, 4.0);
        let w = r.vec(d, 1.0);
        let want = cpu.gated_rmsnorm(&x, &z, &w, group, 1e-5).expect("cpu");
        let got = both_poisons("gated_rmsnorm", |g| {
            bits(&g.gated_rmsnorm(&x, &z, &w, group, 1e-5).expect("gpu"))
        });
        let got: Vec<f32> = got.into_iter().map(f32::from_bits).collect();
        assert_close(
            &format!("gated_rmsnorm {rows}x{d} group {group}"),
            &want,
            &got,
            1e-6,
            1e-5,
        );
    }
    let x = r.vec(1001, 2.0);
    let want = cpu.relu2(&x).expect("cpu");
    let got = both_poisons("relu2", |g| bits(&g.relu2(&x).expect("gpu")));
    assert_eq!(bits(&want), got, "relu2 is exact");
}

#[test]
#[ignore = "gpu"]
fn attention_matches_cpu_with_cache_offsets_and_long_contexts() {
    let cpu = CpuKernels;
    let mut r = Rng(99);
    // (nq, nkv, hd, t, p0): the fixture's geometry, GQA with odd head dims and a cached
    // prefix, MHA, and contexts crossing the kernel's 1024-key chunks.
    for (nq, nkv, hd, t, p0) in [
        (4usize, 2usize, 32usize, 7usize, 0usize),
        (6, 3, 20, 5, 11),
        (3, 3, 17, 1, 40),
        (2, 1, 16, 3, 2100),
        (8, 2, 128, 2, 1023),
    ] {
        let g = AttnGeometry { nq, nkv, hd, t };
        let len = p0 + t;
        let q = r.vec(t * nq * hd, 1.0);
        let k = r.vec(len * nkv * hd, 1.0);
        let v = r.vec(len * nkv * hd, 1.0);
        let want = cpu.attention(&q, &k, &v, p0, g).expect("cpu");
        let got = both_poisons("attention", |gk| {
            bits(&gk.attention(&q, &k, &v, p0, g).expect("gpu"))
        });
        let got: Vec<f32> = got.into_iter().map(f32::from_bits).collect();
        assert_close(
            &format!("attention nq {nq} nkv {nkv} hd {hd} t {t} p0 {p0}"),
            &want,
            &got,
            2e-6,
            1e-5,
        );
    }
    // A bad call is an error, not a crash.
    let g = AttnGeometry {
        nq: 4,
        nkv: 2,
        hd: 8,
        t: 2,
    };
    assert!(gpu_k(0xFF)
        .attention(&[0.5; 64], &[0.5; 16], &[0.5; 16], 0, g)
        .is_err());
}

#[test]
#[ignore = "gpu"]
fn conv_ssd_ssu_router_and_experts_match_cpu() {
    let cpu = CpuKernels;
    let mut r = Rng(4242);
    // Causal conv (prefill) with and without a previous window; decode conv over 3 tokens.
    let (t, dim, k) = (19usize, 37usize, 4usize);
    let x = r.vec(t * dim, 1.0);
    let w = r.vec(dim * k, 0.5);
    let b = r.vec(dim, 0.1);
    let init = r.vec(dim * (k - 1), 1.0);
    for i in [None, Some(&init[..])] {
        let (y0, f0) = cpu
            .causal_conv1d(&x, t, dim, &w, Some(&b), k, i)
            .expect("cpu");
        let (y1, f1) = both_poisons("conv1d_fn", |g| {
            let (y, f) = g
                .causal_conv1d(&x, t, dim, &w, Some(&b), k, i)
                .expect("gpu");
            (bits(&y), bits(&f))
        });
        let y1: Vec<f32> = y1.into_iter().map(f32::from_bits).collect();
        assert_close("conv1d_fn out", &y0, &y1, 1e-6, 1e-5);
        assert_eq!(bits(&f0), f1, "conv1d_fn final window is a copy");
    }
    let ts = 3;
    let xs = r.vec(ts * dim, 1.0);
    let mut s0 = init.clone();
    let (y0, w0) = cpu
        .causal_conv1d_step(&xs, ts, dim, &mut s0, &w, Some(&b), k)
        .expect("cpu");
    let (y1, w1, s1) = both_poisons("conv1d_update", |g| {
        let mut s = init.clone();
        let (y, wins) = g
            .causal_conv1d_step(&xs, ts, dim, &mut s, &w, Some(&b), k)
            .expect("gpu");
        (bits(&y), bits(&wins), bits(&s))
    });
    let y1: Vec<f32> = y1.into_iter().map(f32::from_bits).collect();
    assert_close("conv1d_update out", &y0, &y1, 1e-6, 1e-5);
    assert_eq!(bits(&w0), w1, "conv1d_update windows");
    assert_eq!(bits(&s0), s1, "conv1d_update state");

    // SSD chunk scan (odd length over 3 chunks, initial states, D per (head, dim), softplus).
    let (l, nh, hd, ng, ds, chunk) = (23usize, 4usize, 8usize, 2usize, 16usize, 8usize);
    let xs = r.vec(l * nh * hd, 1.0);
    let dt = r.vec(l * nh, 1.0);
    let a: Vec<f32> = r.pos(nh, 0.5, 4.0).iter().map(|v| -v).collect();
    let bb = r.vec(l * ng * ds, 1.0);
    let cc = r.vec(l * ng * ds, 1.0);
    let d = r.vec(nh * hd, 1.0);
    let dtb = r.vec(nh, 1.0);
    let init_s = r.vec(nh * hd * ds, 1.0);
    let args = SsdArgs {
        dims: SsdDims {
            batch: 1,
            seqlen: l,
            nheads: nh,
            headdim: hd,
            ngroups: ng,
            dstate: ds,
        },
        x: &xs,
        dt: &dt,
        a: &a,
        b: &bb,
        c: &cc,
        d: Some(&d),
        z: None,
        dt_bias: Some(&dtb),
        initial_states: Some(&init_s),
        seq_idx: None,
        dt_cfg: DtConfig {
            transform: DtTransform::Softplus,
            dt_min: 0.0,
            dt_max: f32::INFINITY,
        },
    };
    let want = cpu.ssd_chunk_scan(&args, chunk).expect("cpu ssd");
    let got = both_poisons("ssd", |g| {
        let o = g.ssd_chunk_scan(&args, chunk).expect("gpu ssd");
        (bits(&o.y), bits(&o.final_states))
    });
    let gy: Vec<f32> = got.0.into_iter().map(f32::from_bits).collect();
    let gf: Vec<f32> = got.1.into_iter().map(f32::from_bits).collect();
    assert_close("ssd y", &want.y, &gy, 1e-5, 1e-4);
    assert_close("ssd final_states", &want.final_states, &gf, 1e-5, 1e-4);

    // Selective state update: one step, and a 3-token verification (state untouched).
    let dims = SsmDims {
        nheads: nh,
        headdim: hd,
        ngroups: ng,
        dstate: ds,
    };
    let dh = r.vec(nh, 1.0);
    let p = SsmParams {
        a: &a,
        d: &dh,
        dt_bias: &dtb,
    };
    let tv = 3;
    let (x3, dt3, b3, c3) = (
        r.vec(tv * nh * hd, 1.0),
        r.vec(tv * nh, 1.0),
        r.vec(tv * ng * ds, 1.0),
        r.vec(tv * ng * ds, 1.0),
    );
    let rows1 = SsmRows {
        x: &x3[..nh * hd],
        dt: &dt3[..nh],
        b: &b3[..ng * ds],
        c: &c3[..ng * ds],
    };
    let mut s0 = init_s.clone();
    let y0 = cpu.ssu_step(dims, &mut s0, &p, &rows1).expect("cpu ssu");
    let (y1, s1) = both_poisons("ssu", |g| {
        let mut s = init_s.clone();
        let y = g.ssu_step(dims, &mut s, &p, &rows1).expect("gpu ssu");
        (bits(&y), bits(&s))
    });
    let y1: Vec<f32> = y1.into_iter().map(f32::from_bits).collect();
    let s1: Vec<f32> = s1.into_iter().map(f32::from_bits).collect();
    assert_close("ssu out", &y0, &y1, 1e-6, 1e-5);
    assert_close("ssu state", &s0, &s1, 1e-6, 1e-5);
    let rows3 = SsmRows {
        x: &x3,
        dt: &dt3,
        b: &b3,
        c: &c3,
    };
    let mut sc = init_s.clone();
    let (yv0, iv0) = cpu.ssu_verify(dims, &mut sc, tv, &p, &rows3).expect("cpu");
    let mut sg = init_s.clone();
    let (yv1, iv1) = gpu_k(0xFF)
        .ssu_verify(dims, &mut sg, tv, &p, &rows3)
        .expect("gpu verify");
    assert_eq!(bits(&sg), bits(&init_s), "verify must not touch the state");
    assert_close("ssu verify out", &yv0, &yv1, 1e-6, 1e-5);
    assert_close("ssu verify states", &iv0, &iv1, 1e-6, 1e-5);

    // noaux_tc router with the model's settings (transformers numerics).
    let (tokens, e, topk) = (9usize, 16usize, 4usize);
    let logits = r.vec(tokens * e, 3.0);
    let bias = r.vec(e, 0.1);
    let rc = router_config(topk, 1, 1, true, 2.5);
    let want = cpu.route(&logits, &bias, tokens, &rc).expect("cpu route");
    let got = gpu_k(0xFF)
        .route(&logits, &bias, tokens, &rc)
        .expect("gpu route");
    assert_eq!(want.len(), got.len(), "routes per token");
    for (i, (a, b)) in want.iter().zip(&got).enumerate() {
        assert_eq!(a.0, b.0, "token {i}: experts");
        assert_close(&format!("token {i} weights"), &a.1, &b.1, 1e-6, 1e-6);
    }

    // Routed experts (permute, per-expert GEMM pair, finalize) vs the CPU rayon path.
    let (lw, inter) = (24usize, 40usize);
    let experts: Vec<(Mat, Mat)> = (0..e)
        .map(|_| {
            (
                Mat::dense(inter, lw, r.vec(inter * lw, 0.3)),
                Mat::dense(lw, inter, r.vec(lw * inter, 0.3)),
            )
        })
        .collect();
    let lat = r.vec(tokens * lw, 1.0);
    let idx: Vec<i64> = want
        .iter()
        .flat_map(|(ids, _)| ids.iter().map(|&x| x as i64))
        .collect();
    let wts: Vec<f32> = want.iter().flat_map(|(_, w)| w.iter().copied()).collect();
    let y0 = cpu
        .routed_experts(&lat, tokens, &idx, &wts, topk, &experts)
        .expect("cpu experts");
    let y1 = gpu_k(0xFF)
        .routed_experts(&lat, tokens, &idx, &wts, topk, &experts)
        .expect("gpu experts");
    assert_close("routed experts", &y0, &y1, 1e-5, 1e-4);
}

// ---------------------------------------------------------------- (b) golden, (c) vs CPU

/// The fixture directory: next to the sources, or under the working directory (the GPU
/// machine runs the binaries from a copy of the tree), or $DUET_FIXTURE_MODEL (tiny-a only).
fn fixture() -> PathBuf {
    fixture_named("nemotron-tiny-a")
}

fn fixture_named(name: &str) -> PathBuf {
    let mut c = vec![];
    if name == "nemotron-tiny-a" {
        if let Ok(p) = std::env::var("DUET_FIXTURE_MODEL") {
            c.push(PathBuf::from(p));
        }
    }
    c.push(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/models")
            .join(name),
    );
    c.push(PathBuf::from("fixtures/models").join(name));
    c.into_iter()
        .find(|p| p.join("config.json").exists())
        .unwrap_or_else(|| {
            panic!("fixtures/models/{name} not found: run from the repo root or set DUET_FIXTURE_MODEL")
        })
}

fn golden() -> (TensorMap, usize) {
    golden_in(&fixture())
}

fn golden_in(dir: &std::path::Path) -> (TensorMap, usize) {
    let (g, meta) =
        io::load_with_metadata(&dir.join("reference.safetensors")).expect("golden loads");
    let p = meta["prefill_len"].parse().expect("prefill_len");
    (g, p)
}

fn ids(g: &TensorMap) -> Vec<u32> {
    g["input_ids"]
        .to_i64_vec()
        .expect("integer ids")
        .into_iter()
        .map(|v| v as u32)
        .collect()
}

fn argmax(x: &[f32], v: usize) -> Vec<usize> {
    x.chunks_exact(v)
        .map(|r| (0..v).fold(0, |b, i| if r[i] > r[b] { i } else { b }))
        .collect()
}

fn gpu_model(mut m: Model) -> Model {
    m.set_kernels(Arc::new(gpu_k(0xFF)));
    assert_eq!(m.kernels().name(), "gpu");
    m
}

fn check_golden(name: &str, g: &Tensor, got: &[f32], v: usize) {
    let want = g.to_f32_vec();
    let e = max_rel(&want, got);
    eprintln!("{name}: max rel {e:.3e}");
    assert!(e < TOL, "{name}: max rel {e:e} >= {TOL:e}");
    assert_eq!(argmax(&want, v), argmax(got, v), "{name}: greedy tokens");
}

#[test]
#[ignore = "gpu"]
fn gpu_path_matches_the_golden_prefill_decode_mtp() {
    golden_prefill_decode_mtp("nemotron-tiny-a");
}

/// The held-out golden (grouped routing, other dimensions and pattern; tests/e2e_heldout.rs).
#[test]
#[ignore = "gpu"]
fn gpu_path_matches_the_heldout_golden() {
    golden_prefill_decode_mtp("nemotron-tiny-b");
}

fn golden_prefill_decode_mtp(name: &str) {
    let dir = fixture_named(name);
    let m = gpu_model(Model::load_dir(&dir).expect("fixture"));
    let (g, p) = golden_in(&dir);
    let (ids, v, hs) = (ids(&g), m.cfg.vocab_size, m.cfg.hidden_size);
    let t = ids.len();
    // Full forward: logits and every hidden state.
    let out = m
        .forward(&ids, None, Pass::Prefill, true)
        .expect("gpu forward");
    check_golden("logits", &g["logits"], &out.logits, v);
    assert_eq!(out.hidden.len(), m.cfg.layers.len() + 1);
    for (i, h) in out.hidden.iter().enumerate() {
        let name = format!("hidden.{i}");
        let e = max_rel(&g[&name].to_f32_vec(), h);
        eprintln!("{name}: max rel {e:.3e}");
        assert!(e < TOL, "{name}: max rel {e:e}");
    }
    // Prefill then token-by-token decode.
    let mut cache = m.new_cache();
    let o = m
        .forward(&ids[..p], Some(&mut cache), Pass::Prefill, false)
        .expect("prefill");
    let mut rows = o.logits[(p - 1) * v..].to_vec();
    for &tk in &ids[p..] {
        rows.extend(
            m.forward(&[tk], Some(&mut cache), Pass::Decode, false)
                .expect("decode")
                .logits,
        );
    }
    check_golden("decode_logits", &g["decode_logits"], &rows, v);
    // MTP head.
    let (ml, _) = m
        .mtp_forward(&out.last_hidden[..(t - 1) * hs], &ids[1..], None)
        .expect("mtp");
    check_golden("mtp_logits", &g["mtp_logits"], &ml, v);
    // Speculative decoding (MTP drafts, multi-token verification, promotion) = greedy, and
    // the GPU's greedy tokens are the CPU's.
    let prompt = &ids[..p];
    let greedy = m.generate_greedy(prompt, 12).expect("greedy");
    for k in [1usize, 3] {
        let s = m.generate_speculative(prompt, 12, k).expect("speculative");
        assert_eq!(s.tokens, greedy, "k = {k}");
    }
    let cpu = Model::load_dir(&dir).expect("fixture");
    assert_eq!(cpu.generate_greedy(prompt, 12).expect("cpu greedy"), greedy);
}

/// Every hidden state and the logits of the GPU path vs the CPU path.
fn per_layer_vs_cpu(cpu: &Model, gpu: &Model, toks: &[u32], what: &str) {
    let a = cpu
        .forward(toks, None, Pass::Prefill, true)
        .expect("cpu forward");
    let b = gpu
        .forward(toks, None, Pass::Prefill, true)
        .expect("gpu forward");
    assert_eq!(a.hidden.len(), b.hidden.len());
    for (i, (x, y)) in a.hidden.iter().zip(&b.hidden).enumerate() {
        let e = max_rel(x, y);
        eprintln!("{what} hidden.{i}: gpu vs cpu max rel {e:.3e}");
        assert!(e < TOL, "{what} hidden.{i}: gpu vs cpu max rel {e:e}");
    }
    let e = max_rel(&a.logits, &b.logits);
    assert!(e < TOL, "{what} logits: max rel {e:e}");
}

#[test]
#[ignore = "gpu"]
fn gpu_path_matches_cpu_path_per_layer() {
    let (g, _) = golden();
    let cpu = Model::load_dir(&fixture()).expect("fixture");
    let gpu = gpu_model(Model::load_dir(&fixture()).expect("fixture"));
    per_layer_vs_cpu(&cpu, &gpu, &ids(&g), "fixture");
    // Seeded presets: other patterns and lengths (a prefill longer than two chunks).
    for (seed, pattern, n) in [(3u64, "M*EM-", 37usize), (11, "*M-E", 5), (5, "MM", 50)] {
        let cpu = Model::preset("tiny", Some(pattern), Some(""), seed).expect("preset");
        let gpu = gpu_model(Model::preset("tiny", Some(pattern), Some(""), seed).expect("preset"));
        let mut r = Rng(seed * 7919 + 1);
        let toks: Vec<u32> = (0..n)
            .map(|_| ((r.next().abs() * 1e6) as u32) % cpu.cfg.vocab_size as u32)
            .collect();
        per_layer_vs_cpu(&cpu, &gpu, &toks, &format!("preset {pattern} seed {seed}"));
    }
}

#[test]
#[ignore = "gpu"]
fn gpu_decode_and_verification_match_cpu() {
    decode_and_verification_vs_cpu(gpu_k(0xFF));
}

/// The same with MTP verification as one `selective_state_update_multi_token` launch
/// (`GpuKernels::ssu_verify_kernel`) instead of t single-token launches; then speculative
/// decoding on it = greedy.
#[test]
#[ignore = "gpu"]
fn gpu_verification_with_the_multi_token_kernel_matches_cpu() {
    let mut k = gpu_k(0xFF);
    k.ssu_verify_kernel = Some("v1");
    decode_and_verification_vs_cpu(k);
    let (g, p) = golden();
    let ids = ids(&g);
    let mut k = gpu_k(0xFF);
    k.ssu_verify_kernel = Some("v1");
    let mut m = Model::load_dir(&fixture()).expect("fixture");
    m.set_kernels(Arc::new(k));
    let greedy = m.generate_greedy(&ids[..p], 12).expect("greedy");
    for kd in [1usize, 3] {
        let s = m
            .generate_speculative(&ids[..p], 12, kd)
            .expect("speculative");
        assert_eq!(s.tokens, greedy, "k = {kd}");
    }
}

fn decode_and_verification_vs_cpu(k: GpuKernels) {
    let (g, p) = golden();
    let ids = ids(&g);
    let cpu = Model::load_dir(&fixture()).expect("fixture");
    let mut gpu = Model::load_dir(&fixture()).expect("fixture");
    gpu.set_kernels(Arc::new(k));
    let (mut cc, mut gc) = (cpu.new_cache(), gpu.new_cache());
    cpu.forward(&ids[..p], Some(&mut cc), Pass::Prefill, false)
        .expect("cpu prefill");
    gpu.forward(&ids[..p], Some(&mut gc), Pass::Prefill, false)
        .expect("gpu prefill");
    // Two decode steps.
    for &tk in &ids[p..p + 2] {
        let a = cpu
            .forward(&[tk], Some(&mut cc), Pass::Decode, false)
            .expect("cpu");
        let b = gpu
            .forward(&[tk], Some(&mut gc), Pass::Decode, false)
            .expect("gpu");
        let e = max_rel(&a.logits, &b.logits);
        assert!(e < TOL, "decode logits: max rel {e:e}");
    }
    // A verification pass over 4 tokens (the golden's own continuation: all drafts accepted
    // where the model agrees), then the promoted caches.
    let next = ids[p + 2];
    let drafts = &ids[p + 3..p + 6];
    let a = cpu
        .verify_drafts(&mut cc, next, drafts)
        .expect("cpu verify");
    let b = gpu
        .verify_drafts(&mut gc, next, drafts)
        .expect("gpu verify");
    assert_eq!(a.accepted, b.accepted, "accepted drafts");
    assert_eq!(a.greedy, b.greedy, "greedy after each position");
    let e = max_rel(&a.out.logits, &b.out.logits);
    assert!(e < TOL, "verify logits: max rel {e:e}");
    assert_same_caches(&mut cc, &mut gc);
    // One more decode step from the promoted state.
    let tk = b.greedy[b.accepted];
    let a = cpu
        .forward(&[tk], Some(&mut cc), Pass::Decode, false)
        .expect("cpu");
    let b = gpu
        .forward(&[tk], Some(&mut gc), Pass::Decode, false)
        .expect("gpu");
    assert!(
        max_rel(&a.logits, &b.logits) < TOL,
        "decode after promotion"
    );
    // The GPU's decode steps left its Mamba states on the device: they come back equal.
    assert!(
        gc.layers
            .iter()
            .any(|l| matches!(l, reference::model::nemotron::LayerState::MambaResident(_))),
        "the GPU decode step keeps Mamba states resident"
    );
    assert_same_caches(&mut cc, &mut gc);
    // Two more decode steps from states that came back to the host and go up again.
    let mut last = a.logits;
    for _ in 0..2 {
        let v = last.len();
        let tk = reference::model::linear::argmax_rows(&last, v)[0] as u32;
        let a2 = cpu
            .forward(&[tk], Some(&mut cc), Pass::Decode, false)
            .expect("cpu");
        let b2 = gpu
            .forward(&[tk], Some(&mut gc), Pass::Decode, false)
            .expect("gpu");
        let e = max_rel(&a2.logits, &b2.logits);
        assert!(e < TOL, "decode after a download: max rel {e:e}");
        last = a2.logits;
    }
}

/// Same cache kinds and values on both paths (GPU-resident Mamba states are downloaded first).
fn assert_same_caches(cc: &mut reference::model::Cache, gc: &mut reference::model::Cache) {
    use reference::model::nemotron::LayerState;
    assert_eq!(cc.seen, gc.seen);
    for (li, (x, y)) in cc.layers.iter_mut().zip(gc.layers.iter_mut()).enumerate() {
        y.make_host().expect("download resident states");
        match (&*x, &*y) {
            (LayerState::Mamba { conv: c0, ssm: s0 }, LayerState::Mamba { conv: c1, ssm: s1 }) => {
                assert!(max_rel(c0, c1) < TOL, "layer {li} conv window");
                assert!(max_rel(s0, s1) < TOL, "layer {li} ssm state");
            }
            (LayerState::Attention { k: k0, v: v0 }, LayerState::Attention { k: k1, v: v1 }) => {
                assert!(max_rel(k0, k1) < TOL, "layer {li} keys");
                assert!(max_rel(v0, v1) < TOL, "layer {li} values");
            }
            (LayerState::Stateless, LayerState::Stateless) => {}
            _ => panic!("layer {li}: cache kinds differ"),
        }
    }
}

// ---------------------------------------------------------------- (d) device-resident weights

/// The same forward twice on one backend: bit-identical outputs, and the second call uploads
/// no weight (the weight cache serves every linear / norm weight). Decode steps replayed from
/// the same cache: same bits, no uploads. A weight edited in place is re-uploaded (its
/// fingerprint changed) and the result follows the edit (vs the CPU path). Lazy matrices
/// (the super preset's) are generated and uploaded once per generator.
#[test]
#[ignore = "gpu"]
fn weights_are_uploaded_once_and_reused() {
    use reference::model::nemotron::ExpertFormat;
    use reference::model::weights::Init;
    let (g, p) = golden();
    let ids = ids(&g);
    let k = Arc::new(gpu_k(0xFF));
    let mut m = Model::load_dir(&fixture()).expect("fixture");
    m.set_kernels(k.clone());
    let a = m.forward(&ids, None, Pass::Prefill, true).expect("first");
    let s1 = k.weight_stats();
    eprintln!("after the first forward: {s1:?}");
    assert!(s1.uploads > 10 && s1.entries as u64 == s1.uploads, "{s1:?}");
    let b = m.forward(&ids, None, Pass::Prefill, true).expect("second");
    let s2 = k.weight_stats();
    assert_eq!(
        s2.uploads, s1.uploads,
        "the second forward uploaded weights: {s2:?}"
    );
    assert!(s2.hits >= s1.hits + s1.uploads, "{s1:?} -> {s2:?}");
    assert_eq!(
        bits(&a.logits),
        bits(&b.logits),
        "logits differ between calls"
    );
    for (i, (x, y)) in a.hidden.iter().zip(&b.hidden).enumerate() {
        assert_eq!(bits(x), bits(y), "hidden.{i} differs between calls");
    }
    // Decode: the same steps twice from one prefilled cache.
    let mut c0 = m.new_cache();
    m.forward(&ids[..p], Some(&mut c0), Pass::Prefill, false)
        .expect("prefill");
    let steps = &ids[p..p + 3];
    let run = |c: &mut reference::model::Cache| -> Vec<u32> {
        let mut out = vec![];
        for &tk in steps {
            out.extend(bits(
                &m.forward(&[tk], Some(c), Pass::Decode, false)
                    .expect("decode")
                    .logits,
            ));
        }
        out
    };
    let d1 = run(&mut c0.try_clone().expect("cache copy"));
    let u = k.weight_stats().uploads;
    let d2 = run(&mut c0.try_clone().expect("cache copy"));
    assert_eq!(d1, d2, "decode differs between identical passes");
    assert_eq!(
        k.weight_stats().uploads,
        u,
        "the replayed decode uploaded weights"
    );

    // A weight edited in place (same address and length) is re-uploaded and used.
    let mut cpu = Model::load_dir(&fixture()).expect("fixture");
    for mm in [&mut m, &mut cpu] {
        mm.norm_f[0] *= 1.5;
        mm.norm_f[255] = -mm.norm_f[255];
    }
    let before = k.weight_stats().uploads;
    let e = m.forward(&ids, None, Pass::Prefill, false).expect("edited");
    assert_eq!(k.weight_stats().uploads, before + 1, "norm_f re-uploaded");
    assert_ne!(bits(&e.logits), bits(&a.logits), "the edit must show");
    let want = cpu
        .forward(&ids, None, Pass::Prefill, false)
        .expect("cpu edited");
    let err = max_rel(&want.logits, &e.logits);
    assert!(err < TOL, "edited model: gpu vs cpu max rel {err:e}");

    // Lazy matrices: one upload per generator (f32 and NVFP4-stored), values as the CPU's.
    let lazy = Mat::Lazy {
        rows: 300,
        cols: 272,
        seed: 9,
        init: Init::Linear,
    };
    let q = lazy.lazy_as(ExpertFormat::Nvfp4).expect("nvfp4 lazy");
    let x = Rng(5).vec(3 * 272, 1.0);
    for w in [&lazy, &q] {
        let u0 = k.weight_stats().uploads;
        let y1 = k.linear(&x, 3, w, None).expect("lazy linear");
        let y2 = k.linear(&x, 3, w, None).expect("lazy linear again");
        assert_eq!(
            k.weight_stats().uploads,
            u0 + 1,
            "one upload per lazy matrix"
        );
        assert_eq!(bits(&y1), bits(&y2));
        let want = CpuKernels.linear(&x, 3, w, None).expect("cpu lazy linear");
        assert_close("lazy linear", &want, &y1, 1e-5, 1e-4);
    }
    // clear_weights empties the cache; the next forward uploads again, same bits.
    k.clear_weights();
    assert_eq!(k.weight_stats().entries, 0);
    let u0 = k.weight_stats().uploads;
    let f = m
        .forward(&ids, None, Pass::Prefill, false)
        .expect("after clear");
    assert!(k.weight_stats().uploads > u0);
    assert_eq!(bits(&f.logits), bits(&e.logits));
}

// ---------------------------------------------------------------- (e) the decode engine

/// The decode engine on the GPU device (activations, Mamba states and KV caches on the device
/// between ops and steps) against the CPU model's decode: from the golden's prefill, six
/// greedy steps on tiny-a (M, E, *, - blocks) and the held-out tiny-b (grouped routing), logits
/// within TOL and the same greedy tokens; the GPU model path's decode over the same tokens
/// agrees too; tiny-a again with bf16 projections stored as bf16. Outputs poisoned with NaN
/// bytes (0xFF): an unwritten value shows.
#[test]
#[ignore = "gpu"]
fn decode_engine_on_the_gpu_matches_the_cpu_decode() {
    use gpu::engine::GpuDevice;
    use reference::model::engine::DecodeEngine;
    for (name, bf16) in [
        ("nemotron-tiny-a", false),
        ("nemotron-tiny-b", false),
        ("nemotron-tiny-a", true),
    ] {
        let dir = fixture_named(name);
        let mut cpu = Model::load_dir(&dir).expect("fixture");
        let mut gm = gpu_model(Model::load_dir(&dir).expect("fixture"));
        let mut k = gpu_k(0xFF);
        if bf16 {
            // bf16-valued projections, stored as bf16 by the engine's device.
            cpu.set_dense_weights_bf16().expect("bf16");
            gm.set_dense_weights_bf16().expect("bf16");
            k.bf16_weights = true;
        }
        let name = if bf16 { "tiny-a, bf16 weights" } else { name };
        let (g, p) = golden_in(&dir);
        let ids = ids(&g);
        let v = cpu.cfg.vocab_size;
        let (mut cc, mut gc) = (cpu.new_cache(), gm.new_cache());
        cpu.forward(&ids[..p], Some(&mut cc), Pass::Prefill, false)
            .expect("cpu prefill");
        gm.forward(&ids[..p], Some(&mut gc), Pass::Prefill, false)
            .expect("gpu prefill");
        // The engine starts from the GPU path's prefill cache (its own decode is what is new).
        let mut eng = DecodeEngine::new(&cpu, GpuDevice::new(&k), &gc, 6).expect("engine");
        let mut tk = ids[p];
        for step in 0..6 {
            let a = cpu
                .forward(&[tk], Some(&mut cc), Pass::Decode, false)
                .expect("cpu decode");
            let b = gm
                .forward(&[tk], Some(&mut gc), Pass::Decode, false)
                .expect("gpu decode");
            let e = eng.step(tk).expect("engine step");
            let (ea, eb) = (max_rel(&a.logits, &e), max_rel(&b.logits, &e));
            eprintln!("{name} step {step}: engine vs cpu {ea:.3e}, vs gpu model path {eb:.3e}");
            assert!(ea < TOL, "{name} step {step}: engine vs cpu max rel {ea:e}");
            assert!(
                eb < TOL,
                "{name} step {step}: engine vs gpu path max rel {eb:e}"
            );
            assert_eq!(argmax(&a.logits, v), argmax(&e, v), "{name} step {step}");
            tk = argmax(&a.logits, v)[0] as u32;
        }
        assert_eq!(eng.seen(), cc.seen);
    }
}

// ---------------------------------------------------------------- (f) bf16 weight storage

/// bf16-exact weights stored as bf16 (`GpuKernels::bf16_weights`): the GEMV (1..=8 rows) and
/// the tiled GEMM (more rows) widen them exactly and sum in the same order, so the outputs
/// are the f32 storage's bits, at half the uploaded bytes; K % 4 != 0 (scalar loads) and a
/// bias included. A weight that is not bf16-exact stays f32 (same bits, full bytes).
#[test]
#[ignore = "gpu"]
fn bf16_weight_storage_gives_the_f32_bits() {
    let mut r = Rng(0x5eed_b16);
    for &(n, kk) in &[(96usize, 256usize), (70, 258), (33, 130), (35, 4096)] {
        let w16: Vec<f32> = r
            .vec(n * kk, 0.2)
            .into_iter()
            .map(reference::num::round_bf16)
            .collect();
        let wf = Mat::dense(n, kk, w16);
        let bias = r.vec(n, 0.5);
        let not16 = Mat::dense(n, kk, r.vec(n * kk, 0.2));
        for &t in &[1usize, 3, 8, 9, 70] {
            let x = r.vec(t * kk, 1.0);
            let k32 = gpu_k(0xFF);
            let mut k16 = gpu_k(0xFF);
            k16.bf16_weights = true;
            for (w, exact) in [(&wf, true), (&not16, false)] {
                let a = k32.linear(&x, t, w, Some(&bias)).expect("f32 storage");
                let u0 = k16.weight_stats().upload_bytes;
                let b = k16.linear(&x, t, w, Some(&bias)).expect("bf16 storage");
                let up = k16.weight_stats().upload_bytes - u0;
                let same = a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits());
                assert!(
                    same,
                    "n {n} k {kk} t {t} exact {exact}: max rel {:e}",
                    max_rel(&a, &b)
                );
                let cpu = reference::model::linear::linear(&x, t, w, Some(&bias));
                let e = max_rel(&cpu, &b);
                assert!(e < 1e-5, "n {n} k {kk} t {t}: vs cpu max rel {e:e}");
                // The weight's bytes (the bias is f32 either way, cached after the first call).
                let wbytes = (n * kk * if exact { 2 } else { 4 }) as u64;
                assert!(
                    up == wbytes || up == wbytes + 4 * n as u64,
                    "n {n} k {kk} t {t} exact {exact}: uploaded {up} bytes"
                );
            }
        }
    }
}

/// NVFP4 weights stored for exact use (`GpuKernels::nvfp4_weights`: codes, scale bytes and a
/// table of pairs, gpu/src/nvfp4_store.rs) and lazy bf16 weights stored as bf16: the GEMV and
/// GEMM give the f32 storage's bits (the super preset's experts and projections), at 0.5625
/// and 2 bytes per weight.
#[test]
#[ignore = "gpu"]
fn compact_lazy_weight_storage_gives_the_f32_bits() {
    use reference::model::nemotron::ExpertFormat;
    use reference::model::weights::Init;
    let mut r = Rng(0xc0ffee);
    // t = 1 with K % 16 == 0 runs model_gemv1_* (R columns per warp: 33 and 37 leave a
    // partial last warp; 2688 = 168 chunks leaves lanes a second chunk at the tail; 4096 the
    // split form).
    for &(n, kk, seed) in &[
        (96usize, 256usize, 7u64),
        (40, 1024, 8),
        (33, 48, 9),
        (37, 2688, 10),
        // model_gemv1_*_split (K >= 4096, few rows): NVFP4 and bf16 alike.
        (37, 4096, 11),
    ] {
        let lazy = Mat::Lazy {
            rows: n,
            cols: kk,
            seed,
            init: Init::Linear,
        };
        for fmt in [ExpertFormat::Nvfp4, ExpertFormat::Bf16] {
            let w = lazy.lazy_as(fmt).expect("lazy_as");
            for &t in &[1usize, 3, 8, 9, 70] {
                let x = r.vec(t * kk, 1.0);
                let k32 = gpu_k(0xFF);
                let mut kc = gpu_k(0xFF);
                kc.bf16_weights = true;
                kc.nvfp4_weights = true;
                let a = k32.linear(&x, t, &w, None).expect("f32 storage");
                let b = kc.linear(&x, t, &w, None).expect("compact storage");
                let same = a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits());
                assert!(
                    same,
                    "{fmt:?} n {n} k {kk} t {t}: max rel {:e}",
                    max_rel(&a, &b)
                );
                let up = kc.weight_stats().upload_bytes;
                let want = match fmt {
                    ExpertFormat::Nvfp4 => gpu::nvfp4_store::Layout::of(n, kk).len as u64,
                    _ => (n * kk * 2) as u64,
                };
                // The weight, plus the one-value dummy bias.
                assert!(
                    up == want || up == want + 4,
                    "{fmt:?} n {n} k {kk}: {up} bytes"
                );
                let cpu = reference::model::linear::linear(&x, t, &w, None);
                let e = max_rel(&cpu, &b);
                assert!(e < 1e-5, "{fmt:?} n {n} k {kk} t {t}: vs cpu {e:e}");
            }
        }
    }
}

/// The GPU decode engine with CUDA graphs (`GpuDevice::with_graphs`): the first step runs
/// eagerly (every expert of each MoE layer made resident), the second is captured and
/// launched, the rest replay the graph with the position read from the device. Every step's
/// logits are the engine's without graphs, bit for bit, and within TOL of the CPU decode.
#[test]
#[ignore = "gpu"]
fn decode_engine_graphs_replay_the_eager_steps() {
    use gpu::engine::GpuDevice;
    use reference::model::engine::DecodeEngine;
    let dir = fixture();
    let cpu = Model::load_dir(&dir).expect("fixture");
    let gm = gpu_model(Model::load_dir(&dir).expect("fixture"));
    let k = gpu_k(0xFF);
    let (g, p) = golden_in(&dir);
    let ids = ids(&g);
    let v = cpu.cfg.vocab_size;
    let (mut cc, mut gc) = (cpu.new_cache(), gm.new_cache());
    cpu.forward(&ids[..p], Some(&mut cc), Pass::Prefill, false)
        .expect("cpu prefill");
    gm.forward(&ids[..p], Some(&mut gc), Pass::Prefill, false)
        .expect("gpu prefill");
    let mut plain = DecodeEngine::new(&cpu, GpuDevice::new(&k), &gc, 6).expect("engine");
    let dev = GpuDevice::new(&k).with_graphs().expect("graph mode");
    let mut graphed = DecodeEngine::new(&cpu, dev, &gc, 6).expect("engine");
    // With programmatic dependent launch (session 10), unfused and fused.
    let dev = GpuDevice::new(&k)
        .with_pdl()
        .with_graphs()
        .expect("graph mode");
    let mut pdl = DecodeEngine::new(&cpu, dev, &gc, 6).expect("engine");
    let dev = GpuDevice::new(&k)
        .with_pdl()
        .with_fusion()
        .with_graphs()
        .expect("graph mode");
    let mut pdl_fused = DecodeEngine::new(&cpu, dev, &gc, 6).expect("engine");
    let mut tk = ids[p];
    for step in 0..6 {
        let a = cpu
            .forward(&[tk], Some(&mut cc), Pass::Decode, false)
            .expect("cpu decode");
        let b = plain.step(tk).expect("engine step");
        let c = graphed.step(tk).expect("graphed engine step");
        let same = b.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(
            same,
            "step {step}: graphs vs eager max rel {:e}",
            max_rel(&b, &c)
        );
        for (what, e) in [("pdl", &mut pdl), ("pdl + fused", &mut pdl_fused)] {
            let d = e.step(tk).expect("pdl engine step");
            let same = b.iter().zip(&d).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "step {step}: graphs with {what} vs eager max rel {:e}",
                max_rel(&b, &d)
            );
        }
        let e = max_rel(&a.logits, &c);
        eprintln!("step {step}: graphed engine vs cpu {e:.3e}");
        assert!(e < TOL, "step {step}: max rel {e:e}");
        tk = argmax(&a.logits, v)[0] as u32;
    }
    // The graphs were captured at step 1: plain graphs keep every kernel edge full, PDL makes
    // every kernel-to-kernel edge programmatic (every kernel of the step is PDL-safe).
    let (ke, pe) = graphed.device().graph_edges();
    eprintln!("graph: {ke} kernel edges, {pe} programmatic");
    assert!(
        ke > 10 && pe == 0,
        "plain graph: {ke} kernel edges, {pe} programmatic"
    );
    for e in [&pdl, &pdl_fused] {
        let (ke, pe) = e.device().graph_edges();
        eprintln!("pdl graph: {ke} kernel edges, {pe} programmatic");
        assert!(
            ke > 10 && pe == ke,
            "pdl graph: {ke} kernel edges, {pe} programmatic"
        );
    }
}

/// Every exact variant of the NVFP4 slot GEMV (`moe_slots_t1` bench preset: columns per
/// warp, chunks per trip, register caps) gives the default kernel's bits on the Super expert
/// shapes, through the decode engine's four launches (outputs poisoned before each); the
/// production-numerics one stays within 1e-5 of it (max |a - b| / max |a|).
#[test]
#[ignore = "gpu"]
fn slot_gemv_variants_give_the_default_bits() {
    let k = gpu_k(0xFF);
    let v = k.bench_moe_slots().expect("moe_slots_t1");
    let rows = v["variants"].as_array().expect("variants");
    assert_eq!(rows.len(), gpu::model::SLOT_VARIANTS.len());
    for r in rows {
        eprintln!(
            "{}: chain {:.2} us ({:.1}% of copy)",
            r["kernel"], r["chain_us"], r["pct_of_copy"]
        );
        assert_eq!(r["finite"], true, "{r}");
        if r["exact"] == true {
            assert_eq!(r["same_bits_as_default"], true, "{r}");
        } else {
            // Production numerics: per-block partial sums, then the scale (other rounding).
            let e = r["max_rel_vs_default"].as_f64().expect("max_rel");
            assert!(e < 1e-5, "{r}");
        }
        assert!(r["chain_us"].as_f64().expect("chain_us") > 0.0);
    }
}

/// The routed slots' NVFP4 GEMV variants of session 11 give the default slot GEMV's bits:
/// through shared-memory stages (`model_gemv1_slots_nvfp4w_pipe*`: 2 / 3 / 4 stages, more
/// groups than resident blocks and fewer) and with x and the pairs staged per block (`_xs`,
/// `_xs3`, `_xs3_t16`, `_xs4r2`, `_xs4r2_relu`), on partial column groups (N % 32 != 0), K of one chunk a
/// lane (32), of partial slices (2688 = 2 x 64 + 40 chunks; 4128 = 4 x 64 + 2), experts
/// picked through the device ids with repeats, shared and strided x rows, ReLU²-read x; K %
/// 32 != 0 is refused by the pipe, and K = 48 (3 chunks) runs on the _xs forms.
#[test]
#[ignore = "gpu"]
fn slot_gemv_variants_give_the_chunk_bits() {
    let k = gpu_k(0xFF);
    let p = "model_gemv1_slots_nvfp4w_pipe";
    let cases: &[((usize, usize, usize), &[i32], usize, &str)] = &[
        ((77, 32, 3), &[2, 0, 2, 1], 40, p),
        (
            (77, 32, 3),
            &[1, 1],
            0,
            "model_gemv1_slots_nvfp4w_pipe_relu",
        ),
        ((2688, 1024, 4), &[3, 0, 1, 3, 2, 0, 1, 2, 3, 0, 0], 0, p),
        ((1024, 2688, 5), &[4, 1, 3, 3, 0, 2], 2688, p),
        (
            (1024, 2688, 5),
            &[4, 1, 3, 3, 0, 2],
            2692,
            "model_gemv1_slots_nvfp4w_pipe_relu",
        ),
        ((100, 4128, 3), &[2, 1, 0], 4132, p),
        (
            (1024, 2688, 3),
            &[2, 0, 1, 2],
            2688,
            "model_gemv1_slots_nvfp4w_pipe2",
        ),
        (
            (1000, 2688, 3),
            &[2, 0, 1, 2],
            2688,
            "model_gemv1_slots_nvfp4w_pipe4",
        ),
        ((33, 96, 2), &[1], 0, "model_gemv1_slots_nvfp4w_pipe4"),
    ];
    let mut all: Vec<((usize, usize, usize), &[i32], usize, String)> = cases
        .iter()
        .map(|c| (c.0, c.1, c.2, c.3.to_string()))
        .collect();
    // The same cases on the _xs forms, plus K = 48 (not a multiple of 32).
    for c in cases {
        let relu = c.3.ends_with("_relu");
        for xs in [
            "model_gemv1_slots_nvfp4w_xs",
            "model_gemv1_slots_nvfp4w_xs3",
        ] {
            let op = if relu {
                format!("{xs}_relu")
            } else {
                xs.to_string()
            };
            all.push((c.0, c.1, c.2, op));
        }
        if relu {
            all.push((c.0, c.1, c.2, "model_gemv1_slots_nvfp4w_xs4r2_relu".into()));
        } else {
            all.push((c.0, c.1, c.2, "model_gemv1_slots_nvfp4w_xs4r2".into()));
            all.push((c.0, c.1, c.2, "model_gemv1_slots_nvfp4w_xs3_t16".into()));
        }
    }
    all.push((
        (45, 48, 2),
        &[1, 0, 1],
        52,
        "model_gemv1_slots_nvfp4w_xs".into(),
    ));
    all.push((
        (45, 48, 2),
        &[0],
        0,
        "model_gemv1_slots_nvfp4w_xs3_relu".into(),
    ));
    for (shape, picks, stride, op) in &all {
        let what = format!("{op} {shape:?} picks {picks:?} stride {stride}");
        let c = k
            .slot_variant_vs_chunk(*shape, picks, *stride, op)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(c.chunk.len(), shape.0 * picks.len(), "{what}");
        let finite = c.chunk.iter().all(|b| f32::from_bits(*b).is_finite());
        assert!(finite, "{what}: the default kernel left poison");
        let nonzero = c
            .chunk
            .iter()
            .filter(|b| f32::from_bits(**b) != 0.0)
            .count();
        assert!(
            nonzero > c.chunk.len() / 2,
            "{what}: {nonzero} non-zero outputs"
        );
        let diff = c
            .chunk
            .iter()
            .zip(&c.variant)
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(
            diff, 0,
            "{what}: {diff} outputs differ ({} groups)",
            c.groups
        );
    }
    let e = k.slot_variant_vs_chunk((64, 48, 1), &[0], 0, p);
    let msg = format!("{:?}", e.expect_err("K = 48 is not a multiple of 32"));
    assert!(msg.contains("K % 32"), "{msg}");
}

/// The tensor-core slot GEMVs (`model_gemv1_slots_nvfp4w_mma*`, session 13: E2M1 codes
/// decoded to f16 in registers, x carried as three f16 terms, mma.sync with f32 accumulation)
/// against f64 dot products of the stored NVFP4 values: host-built buffers with random codes,
/// scale bytes from subnormal E4M3 (0x01..0x07: subnormal f16 products) to 0x7e (448), x over
/// nine decades with both signs (and through ReLU² for the `_relu` forms), K of one step (128)
/// to 33 steps, partial column groups; every output within 1e-5 x sum |x w| (the bound the
/// exact kernels meet in gpu_index64), K % 128 != 0 refused with the reason.
#[test]
#[ignore = "gpu"]
fn slot_gemv_mma_matches_f64_dot_products() {
    use gpu::nvfp4_store::{lut, value_at, Layout};
    use reference::Data;
    let g = gpu_k(0xFF);
    let mut r = Rng(0x5107_3a11);
    let mut worst = 0f64;
    let mut worst_chunk = 0f64;
    for &(n, k, gs) in &[
        (77usize, 128usize, 2.0f32),
        (33, 384, 0.37),
        (2688, 1024, 1.0),
        (1024, 2688, 5.5),
        (100, 4224, 1.0),
    ] {
        let l = Layout::of(n, k);
        let mut buf = vec![0u8; l.len];
        for b in buf[..n * k / 2].iter_mut() {
            *b = (r.next().to_bits() >> 7) as u8;
        }
        for (i, b) in buf[l.sf_off..l.sf_off + n * (k / 16)]
            .iter_mut()
            .enumerate()
        {
            let u = (r.next().abs() * 1e6) as u32;
            *b = match i % 5 {
                0 => 1 + (u % 7) as u8,       // subnormal E4M3
                1 => 0x70 + (u % 15) as u8,   // up to 0x7e = 448
                _ => 0x20 + (u % 0x30) as u8, // 2^-4 .. 2^2
            };
        }
        buf[l.lut_off..].copy_from_slice(&lut(gs));
        // x over nine decades, both signs.
        let x: Vec<f32> = (0..k)
            .map(|i| r.next() * 10f32.powi((i % 9) as i32 - 5))
            .collect();
        let w = g
            .gpu()
            .upload(&Tensor::new(&[buf.len()], Data::U8(buf.clone())))
            .expect("upload the expert");
        for op in [
            "model_gemv1_slots_nvfp4w",
            "model_gemv1_slots_nvfp4w_mma1",
            "model_gemv1_slots_nvfp4w_mma2",
            "model_gemv1_slots_nvfp4w_mma4",
            "model_gemv1_slots_nvfp4w_mma1_relu",
            "model_gemv1_slots_nvfp4w_mma4_relu",
            "model_gemv1_slots_nvfp4w_mma1d3",
            "model_gemv1_slots_nvfp4w_mma1d4_relu",
            "model_gemv1_slots_nvfp4w_mma1d6",
            "model_gemv1_slots_nvfp4w_mma2w8_relu",
            "model_gemv1_slots_nvfp4w_mma4w8",
        ] {
            let relu = op.ends_with("_relu");
            let y = g.slot_gemv_on(&w, (n, k), &x, op).expect(op);
            assert_eq!(y.len(), n);
            let xe: Vec<f64> = x
                .iter()
                .map(|&v| {
                    if relu {
                        let q = (v as f64).max(0.0);
                        q * q
                    } else {
                        v as f64
                    }
                })
                .collect();
            let mut nonzero = 0;
            for (o, &got) in y.iter().enumerate() {
                let (mut dot, mut mag) = (0f64, 0f64);
                for j in 0..k {
                    let p = xe[j] * value_at(&buf, n, k, o * k + j) as f64;
                    dot += p;
                    mag += p.abs();
                }
                let got = got as f64;
                assert!(
                    got.is_finite() && (got - dot).abs() <= 1e-5 * mag,
                    "{op} n {n} k {k}: y[{o}] = {got:e}, f64 {dot:e} (sum |x w| {mag:e})"
                );
                if mag > 0.0 {
                    let e = (got - dot).abs() / mag;
                    if op == "model_gemv1_slots_nvfp4w" {
                        worst_chunk = worst_chunk.max(e);
                    } else {
                        worst = worst.max(e);
                    }
                }
                nonzero += (got != 0.0) as usize;
            }
            assert!(
                nonzero > n / 2,
                "{op} n {n} k {k}: {nonzero} non-zero outputs"
            );
        }
    }
    eprintln!("max |y - f64| / sum |x w|: mma {worst:.3e}, exact chunk {worst_chunk:.3e}");
    // K % 128 != 0: refused with the reason.
    let w = g
        .gpu()
        .upload(&Tensor::new(
            &[Layout::of(16, 64).len],
            Data::U8(vec![0x11; Layout::of(16, 64).len]),
        ))
        .expect("upload");
    let e = g.slot_gemv_on(&w, (16, 64), &[0.5; 64], "model_gemv1_slots_nvfp4w_mma1");
    let msg = format!("{:?}", e.expect_err("K = 64 is not a multiple of 128"));
    assert!(msg.contains("K % 128"), "{msg}");
}

/// The tensor-core slot GEMVs next to the default slot GEMV over the decode engine's launch
/// shapes: several slots picked through the device ids with repeats, shared and strided x
/// rows (ReLU²-read for `_relu`), partial column groups: within 1e-5 of the default's
/// outputs (max |a - b| / max |a|), every output finite.
#[test]
#[ignore = "gpu"]
fn slot_gemv_mma_matches_the_default_on_engine_shapes() {
    let k = gpu_k(0xFF);
    let cases: &[((usize, usize, usize), &[i32], usize, &str)] = &[
        (
            (77, 128, 3),
            &[2, 0, 2, 1],
            132,
            "model_gemv1_slots_nvfp4w_mma1",
        ),
        (
            (77, 128, 3),
            &[1, 1],
            0,
            "model_gemv1_slots_nvfp4w_mma4_relu",
        ),
        (
            (2688, 1024, 4),
            &[3, 0, 1, 3, 2, 0, 1, 2, 3, 0, 0],
            0,
            "model_gemv1_slots_nvfp4w_mma1",
        ),
        (
            (2688, 1024, 4),
            &[3, 0, 1],
            1024,
            "model_gemv1_slots_nvfp4w_mma2",
        ),
        (
            (1024, 2688, 5),
            &[4, 1, 3, 3, 0, 2],
            2688,
            "model_gemv1_slots_nvfp4w_mma4",
        ),
        (
            (1024, 2688, 5),
            &[4, 1, 3, 3, 0, 2],
            2692,
            "model_gemv1_slots_nvfp4w_mma4_relu",
        ),
        (
            (1000, 2688, 3),
            &[2, 0, 1, 2],
            2688,
            "model_gemv1_slots_nvfp4w_mma2_relu",
        ),
        ((33, 384, 2), &[1], 0, "model_gemv1_slots_nvfp4w_mma1_relu"),
        // D = 3 / 4 / 6 steps in flight: fewer steps than the ring (K 384: 3), a partial
        // last round (2688: 21 steps), and more.
        ((33, 384, 2), &[1, 0], 0, "model_gemv1_slots_nvfp4w_mma1d4"),
        (
            (1024, 2688, 5),
            &[4, 1, 3],
            2692,
            "model_gemv1_slots_nvfp4w_mma1d6_relu",
        ),
        (
            (2688, 1024, 4),
            &[3, 0, 1, 3],
            0,
            "model_gemv1_slots_nvfp4w_mma1d3",
        ),
        (
            (1000, 2688, 3),
            &[2, 0, 1],
            2688,
            "model_gemv1_slots_nvfp4w_mma1d4_relu",
        ),
        // eight warps a block: K over two / four warps, a partial last block (1000 = 15 x 64
        // + 40), one step (K 128: the second warp of a column group has none).
        (
            (1000, 2688, 3),
            &[2, 0, 1],
            2692,
            "model_gemv1_slots_nvfp4w_mma2w8_relu",
        ),
        (
            (1024, 2688, 5),
            &[4, 1, 3, 3, 0, 2],
            2688,
            "model_gemv1_slots_nvfp4w_mma2w8",
        ),
        (
            (77, 128, 3),
            &[2, 0, 2, 1],
            132,
            "model_gemv1_slots_nvfp4w_mma4w8",
        ),
        (
            (100, 384, 3),
            &[1, 2],
            0,
            "model_gemv1_slots_nvfp4w_mma4w8_relu",
        ),
    ];
    for &(shape, picks, stride, op) in cases {
        let what = format!("{op} {shape:?} picks {picks:?} stride {stride}");
        let c = k
            .slot_variant_vs_chunk(shape, picks, stride, op)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(c.variant.len(), shape.0 * picks.len(), "{what}");
        let a: Vec<f32> = c.chunk.iter().map(|b| f32::from_bits(*b)).collect();
        let b: Vec<f32> = c.variant.iter().map(|b| f32::from_bits(*b)).collect();
        assert!(
            b.iter().all(|v| v.is_finite()),
            "{what}: poison or non-finite left"
        );
        let nonzero = a.iter().filter(|v| **v != 0.0).count();
        assert!(nonzero > a.len() / 2, "{what}: {nonzero} non-zero outputs");
        let e = max_rel(&a, &b);
        eprintln!("{what}: max rel vs default {e:.3e}");
        assert!(e < 1e-5, "{what}: max rel {e:e}");
    }
}

/// The decode engine's fused down GEMV + slot mix (`--slot-kernel mma` with fusion: the last
/// block of each column group adds the slots' outputs) gives the unfused pair's bits (the
/// same down kernel, then `model_mix_slots`), launch after launch (its counters reset
/// themselves), on Super's down shape, on column counts that leave a partial group, with
/// repeated experts, strided h rows and one slot.
#[test]
#[ignore = "gpu"]
fn slot_down_mix_gives_the_unfused_bits() {
    let k = gpu_k(0xFF);
    for (shape, picks, stride) in [
        (
            (1024usize, 2688usize, 5usize),
            &[
                4, 1, 3, 3, 0, 2, 1, 0, 4, 2, 2, 3, 1, 0, 4, 4, 3, 2, 1, 0, 0, 1,
            ][..],
            2688usize,
        ),
        ((100, 384, 3), &[2, 0, 2][..], 388),
        ((33, 128, 2), &[1][..], 128),
    ] {
        for down in gpu::model::SLOT_MMA_DOWNS {
            let what = format!("{down} {shape:?} picks {} stride {stride}", picks.len());
            let ((oa, ma), (ob, mb)) = k
                .slot_down_mix_vs_unfused(shape, picks, stride, 3, down)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let fin = |v: &[u32]| v.iter().all(|b| f32::from_bits(*b).is_finite());
            assert!(fin(&oa) && fin(&ma), "{what}: the unfused pair left poison");
            let nonzero = ma.iter().filter(|b| f32::from_bits(**b) != 0.0).count();
            assert!(
                nonzero > ma.len() / 2,
                "{what}: {nonzero} non-zero mix outputs"
            );
            assert_eq!(oa, ob, "{what}: the fused kernel's slot outputs differ");
            let diff = ma.iter().zip(&mb).filter(|(a, b)| a != b).count();
            assert_eq!(diff, 0, "{what}: {diff} of {} mix outputs differ", ma.len());
        }
    }
}

/// The unrolled variants of the engine's rmsnorm, gated rmsnorm and slot mix (`norms_super`
/// bench preset) give the default kernels' bits.
#[test]
#[ignore = "gpu"]
fn norm_variants_give_the_default_bits() {
    let k = gpu_k(0xFF);
    let v = k.bench_norms().expect("norms_super");
    let rows = v["variants"].as_array().expect("variants");
    assert_eq!(rows.len(), 2 * gpu::model::NORM_VARIANTS.len());
    for r in rows {
        eprintln!("{}: {}", r["kernel"], r["graph_per_launch"]["median_us"]);
        assert_eq!(r["finite"], true, "{r}");
        assert_eq!(r["same_bits_as_default"], true, "{r}");
    }
}

/// The decode engine with its fused kernels (`GpuDevice::with_fusion`: the residual add fused
/// into the next norm, `model_add_rmsnorm`; ReLU² folded into the routed experts' down GEMV,
/// `model_gemv1_slots_f32_relu` here: K = 128 / 96), eager and with CUDA graphs, gives the
/// unfused engine's logits bit for bit on tiny-a and tiny-b (graphs on tiny-a only).
#[test]
#[ignore = "gpu"]
fn decode_engine_fused_norms_give_the_unfused_bits() {
    use gpu::engine::GpuDevice;
    use reference::model::engine::DecodeEngine;
    for name in ["nemotron-tiny-a", "nemotron-tiny-b"] {
        let dir = fixture_named(name);
        let cpu = Model::load_dir(&dir).expect("fixture");
        let gm = gpu_model(Model::load_dir(&dir).expect("fixture"));
        let k = gpu_k(0xFF);
        let (g, p) = golden_in(&dir);
        let ids = ids(&g);
        let v = cpu.cfg.vocab_size;
        let mut gc = gm.new_cache();
        gm.forward(&ids[..p], Some(&mut gc), Pass::Prefill, false)
            .expect("gpu prefill");
        let mut plain = DecodeEngine::new(&cpu, GpuDevice::new(&k), &gc, 6).expect("engine");
        let fused = GpuDevice::new(&k).with_fusion();
        let mut fused = DecodeEngine::new(&cpu, fused, &gc, 6).expect("engine");
        // Graphs only on tiny-a: one of tiny-b's Mamba layers is not a case of the direct
        // decode step (its fallback goes through the host), which graph mode refuses.
        let mut fg = if name == "nemotron-tiny-a" {
            let d = GpuDevice::new(&k)
                .with_fusion()
                .with_graphs()
                .expect("graph mode");
            Some(DecodeEngine::new(&cpu, d, &gc, 6).expect("engine"))
        } else {
            None
        };
        let mut tk = ids[p];
        for step in 0..6 {
            let a = plain.step(tk).expect("engine step");
            let mut got = vec![("fused", fused.step(tk).expect("fused step"))];
            if let Some(fg) = fg.as_mut() {
                got.push(("fused + graphs", fg.step(tk).expect("fused graphed step")));
            }
            for (what, b) in got {
                let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(
                    same,
                    "{name} step {step}: {what} vs unfused max rel {:e}",
                    max_rel(&a, &b)
                );
            }
            tk = argmax(&a, v)[0] as u32;
        }
    }
}

/// The decode step's SSU at the Super shape (128 heads x 64, dstate 128, 8 groups; f32 state,
/// per-head dt / A / D / dt_bias, softplus): every [`gpu::model::DECODE_SSUS`] version (v12
/// one 512-thread block a head, v10, v6) gives the same state bits (the update is elementwise
/// and bit-exact in every version) and an `out` within 1e-6 of the CPU step's and of the
/// others' (`out` sums dstate products in another order in v12: session 32 call 1 found its
/// bits differ from v6 / v10's), under both poisons; the default runs v12 there.
#[test]
#[ignore = "gpu"]
fn decode_ssu_versions_agree_at_the_super_shape() {
    let (nh, hd, ng, ds) = (128usize, 64usize, 8usize, 128usize);
    let dims = SsmDims {
        nheads: nh,
        headdim: hd,
        ngroups: ng,
        dstate: ds,
    };
    let mut r = Rng(0x5eed_0032);
    let a: Vec<f32> = r.pos(nh, 0.5, 4.0).iter().map(|v| -v).collect();
    let d = r.vec(nh, 1.0);
    let dtb = r.vec(nh, 1.0);
    let p = SsmParams {
        a: &a,
        d: &d,
        dt_bias: &dtb,
    };
    let init = r.vec(nh * hd * ds, 1.0);
    let (x, dt, b, c) = (
        r.vec(nh * hd, 1.0),
        r.vec(nh, 1.0),
        r.vec(ng * ds, 1.0),
        r.vec(ng * ds, 1.0),
    );
    let rows = SsmRows {
        x: &x,
        dt: &dt,
        b: &b,
        c: &c,
    };
    let mut s0 = init.clone();
    let y0 = CpuKernels
        .ssu_step(dims, &mut s0, &p, &rows)
        .expect("cpu ssu");
    assert_eq!(
        gpu_k(0xFF).decode_ssu_launch(dims),
        ("v12", 512),
        "the default decode SSU at the Super shape"
    );
    let mut first: Option<(Vec<u32>, Vec<u32>)> = None;
    for v in gpu::model::DECODE_SSUS {
        // Both poisons: every output element written (bit-identical results).
        let runs: Vec<(Vec<u32>, Vec<u32>)> = [0xFFu8, 0x00]
            .iter()
            .map(|&poison| {
                let mut g = gpu_k(poison);
                g.decode_ssu = v;
                let mut s = init.clone();
                let y = g.ssu_step(dims, &mut s, &p, &rows).expect("gpu ssu");
                (bits(&y), bits(&s))
            })
            .collect();
        assert!(
            runs[0] == runs[1],
            "decode ssu {v}: results differ between poisons"
        );
        let got = runs[0].clone();
        let gy: Vec<f32> = got.0.iter().map(|b| f32::from_bits(*b)).collect();
        let gs: Vec<f32> = got.1.iter().map(|b| f32::from_bits(*b)).collect();
        assert_close(&format!("decode ssu {v} out"), &y0, &gy, 1e-6, 1e-5);
        assert_close(&format!("decode ssu {v} state"), &s0, &gs, 1e-6, 1e-5);
        match &first {
            None => first = Some(got),
            Some(f) => {
                let v0 = gpu::model::DECODE_SSUS[0];
                assert!(
                    f.1 == got.1,
                    "decode ssu {v}: state bits differ from {v0}'s"
                );
                let fy: Vec<f32> = f.0.iter().map(|b| f32::from_bits(*b)).collect();
                assert_close(&format!("decode ssu {v} out vs {v0}"), &fy, &gy, 1e-6, 1e-6);
            }
        }
    }
}
