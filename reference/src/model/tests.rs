//! Model tests against the transformers golden of `fixtures/models/nemotron-tiny-a`.

use super::nemotron::Pass;
use super::*;
use crate::io;
use crate::tensor::TensorMap;
use std::path::PathBuf;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/models/nemotron-tiny-a")
}

/// max|a-b| / max|a| over the tensor.
fn max_rel(reference: &[f32], got: &[f32]) -> f64 {
    let mut num = 0f64;
    let mut den = 0f64;
    for (a, b) in reference.iter().zip(got) {
        num = num.max((*a as f64 - *b as f64).abs());
        den = den.max((*a as f64).abs());
    }
    num / den
}

fn golden() -> (Model, TensorMap, Vec<u32>) {
    let m = Model::load_dir(&fixture()).expect("fixture loads");
    let r = io::load(&fixture().join("reference.safetensors")).expect("golden loads");
    let ids: Vec<u32> = r["input_ids"]
        .to_i64_vec()
        .expect("int ids")
        .into_iter()
        .map(|v| v as u32)
        .collect();
    (m, r, ids)
}

#[test]
fn full_forward_matches_golden() {
    let (m, r, ids) = golden();
    let out = m.forward(&ids, None, Pass::Prefill, true).expect("forward");
    for (i, h) in out.hidden.iter().enumerate() {
        let e = max_rel(&r[&format!("hidden.{i}")].to_f32_vec(), h);
        eprintln!("hidden.{i}: max rel {e:.3e}");
    }
    let e = max_rel(&r["logits"].to_f32_vec(), &out.logits);
    eprintln!("logits: max rel {e:.3e}");
    assert!(e < 1e-4, "logits max rel {e}");
}

#[test]
fn decode_matches_golden() {
    let (m, r, ids) = golden();
    let (_, meta) = io::load_with_metadata(&fixture().join("reference.safetensors")).expect("meta");
    let p: usize = meta["prefill_len"].parse().expect("prefill_len");
    let v = m.cfg.vocab_size;
    let mut cache = m.new_cache();
    let o = m
        .forward(&ids[..p], Some(&mut cache), Pass::Prefill, false)
        .expect("prefill");
    let mut rows = o.logits[(p - 1) * v..].to_vec();
    for &t in &ids[p..] {
        let o = m
            .forward(&[t], Some(&mut cache), Pass::Decode, false)
            .expect("decode");
        rows.extend_from_slice(&o.logits);
    }
    let e = max_rel(&r["decode_logits"].to_f32_vec(), &rows);
    eprintln!("decode_logits: max rel {e:.3e}");
    assert!(e < 1e-4, "decode max rel {e}");
}

#[test]
fn mtp_matches_golden() {
    let (m, r, ids) = golden();
    let out = m
        .forward(&ids, None, Pass::Prefill, false)
        .expect("forward");
    let hs = m.cfg.hidden_size;
    let t = ids.len();
    let (logits, _) = m
        .mtp_forward(&out.last_hidden[..(t - 1) * hs], &ids[1..], None)
        .expect("mtp");
    let e = max_rel(&r["mtp_logits"].to_f32_vec(), &logits);
    eprintln!("mtp_logits: max rel {e:.3e}");
    assert!(e < 1e-4, "mtp max rel {e}");
}

#[test]
fn speculative_equals_greedy() {
    let (m, _, ids) = golden();
    let greedy = m.generate_greedy(&ids[..8], 12).expect("greedy");
    for k in 1..=3 {
        let s = m.generate_speculative(&ids[..8], 12, k).expect("spec");
        eprintln!("k={k}: accepted {:?}", s.accepted);
        assert_eq!(s.tokens, greedy, "k = {k}");
    }
}

/// Drafts that match the greedy continuation for their first `c` entries: verification must
/// accept exactly c, and decoding after the promotion must continue exactly as plain decode
/// (same tokens, logits within f32 noise), so the promoted SSM / conv / KV states are right.
#[test]
fn verify_promotes_accepted_states() {
    let (m, _, ids) = golden();
    let v = m.cfg.vocab_size;
    let prompt = &ids[..10];
    let greedy = m.generate_greedy(prompt, 10).expect("greedy");
    // Plain decode logits after prompt + greedy[..n].
    let mut plain = m.new_cache();
    m.forward(prompt, Some(&mut plain), Pass::Prefill, false)
        .expect("prefill");
    let mut plain_logits = Vec::new();
    for &tk in &greedy[..9] {
        plain_logits.push(
            m.forward(&[tk], Some(&mut plain), Pass::Decode, false)
                .expect("decode")
                .logits,
        );
    }
    for c in 0..=3usize {
        let mut cache = m.new_cache();
        m.forward(prompt, Some(&mut cache), Pass::Prefill, false)
            .expect("prefill");
        let mut drafts: Vec<u32> = greedy[1..4].to_vec();
        if c < 3 {
            drafts[c] = (drafts[c] + 1) % v as u32;
        }
        let vr = m
            .verify_drafts(&mut cache, greedy[0], &drafts)
            .expect("verify");
        assert_eq!(vr.accepted, c, "drafts {drafts:?} vs greedy {greedy:?}");
        assert_eq!(vr.greedy[c], greedy[c + 1], "bonus token");
        assert_eq!(cache.seen, prompt.len() + c + 1);
        // Continue with plain decode from the promoted state.
        let mut tk = greedy[c + 1];
        for step in (c + 1)..9 {
            let o = m
                .forward(&[tk], Some(&mut cache), Pass::Decode, false)
                .expect("decode");
            let e = max_rel(&plain_logits[step], &o.logits);
            assert!(e < 1e-5, "c = {c}, step {step}: max rel {e}");
            tk = crate::model::linear::argmax_rows(&o.logits, v)[0];
            assert_eq!(tk, greedy[step + 1], "c = {c}, step {step}");
        }
    }
}

#[test]
fn config_styles_agree() {
    let hub =
        std::fs::read_to_string(fixture().join("../nemotron-tiny-a.spec.json")).expect("spec");
    let a = Config::from_json_str(&hub, "spec").expect("hub style");
    let b = Config::from_file(&fixture().join("config.json")).expect("transformers style");
    assert_eq!(a, b);
    assert_eq!(b, Config::tiny());
    assert_eq!(b.pattern(), "MEM*EM-E");
    assert_eq!(b.mtp_pattern(), "*E");
    assert!(b.time_step_limit.1.is_infinite());
}

#[test]
fn presets_build() {
    let t = Model::preset("tiny", None, None, 7).expect("tiny");
    let o = t
        .forward(&[1, 2, 3], None, Pass::Prefill, false)
        .expect("fwd");
    assert_eq!(o.logits.len(), 3 * 512);
    assert!(o.logits.iter().all(|v| v.is_finite()));
    let sp = Config::super_();
    let count = |k| sp.layers.iter().filter(|&&x| x == k).count();
    assert_eq!(sp.layers.len(), 88);
    assert_eq!(
        (
            count(LayerKind::Mamba),
            count(LayerKind::Moe),
            count(LayerKind::Attention)
        ),
        (40, 40, 8)
    );
    assert!(Model::preset("super", None, None, 7).is_err());
    assert!(Model::preset("super", Some("MEMEMEM*EME"), None, 7).is_err());
    let s = Model::preset("super", Some("M*E"), Some(""), 7).expect("super builds lazily");
    let (bb, mtp) = s.param_counts();
    assert!(bb > 3_000_000_000, "{bb}");
    assert_eq!(mtp, 0);
}

/// A prefill split in two chunks (the second continuing from the cached conv window, SSM
/// state and KV cache) gives the rows of the one-shot forward; the same for the MTP head.
#[test]
fn chunked_prefill_and_mtp_continue_from_cache() {
    let (m, _, ids) = golden();
    let (v, hs) = (m.cfg.vocab_size, m.cfg.hidden_size);
    let full = m.forward(&ids, None, Pass::Prefill, false).expect("full");
    let mut cache = m.new_cache();
    let a = m
        .forward(&ids[..13], Some(&mut cache), Pass::Prefill, false)
        .expect("chunk 1");
    let b = m
        .forward(&ids[13..], Some(&mut cache), Pass::Prefill, false)
        .expect("chunk 2");
    assert_eq!(cache.seen, ids.len());
    let mut both = a.logits.clone();
    both.extend_from_slice(&b.logits);
    let e = max_rel(&full.logits, &both);
    assert!(e < 1e-5, "chunked prefill max rel {e}");
    // MTP: all rows at once vs two pieces through its cache.
    let t = ids.len() - 1;
    let (once, _) = m
        .mtp_forward(&full.last_hidden[..t * hs], &ids[1..], None)
        .expect("mtp");
    let mut mc = m.new_mtp_cache().expect("mtp cache");
    let (p1, _) = m
        .mtp_forward(&full.last_hidden[..20 * hs], &ids[1..21], Some(&mut mc))
        .expect("mtp 1");
    let (p2, _) = m
        .mtp_forward(
            &full.last_hidden[20 * hs..t * hs],
            &ids[21..],
            Some(&mut mc),
        )
        .expect("mtp 2");
    let mut two = p1;
    two.extend_from_slice(&p2);
    assert_eq!(two.len(), t * v);
    let e = max_rel(&once, &two);
    assert!(e < 1e-5, "incremental mtp max rel {e}");
}

/// A lazy matrix stored as NVFP4 / bf16 stays lazy: any row block equals the same rows of the
/// whole matrix quantized at once with the generator-bound global scale (NVFP4 blocks run
/// along rows), and the values really are NVFP4 / bf16 values (not the raw f32 ones).
#[test]
fn lazy_experts_keep_their_format_per_row_block() {
    use crate::ops::nvfp4_quantize::{dequantize, quantize, Nvfp4Mode, SfLayout};
    use nemotron::ExpertFormat;
    let (rows, cols) = (40usize, 64usize);
    let lazy = Mat::Lazy {
        rows,
        cols,
        seed: 99,
        init: weights::Init::Linear,
    };
    let raw = lazy.values().into_owned();
    let bound = weights::lazy_bound(weights::Init::Linear, cols);
    let amax = raw.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(
        amax <= bound && amax > 0.5 * bound,
        "amax {amax} bound {bound}"
    );
    let q = lazy.lazy_as(ExpertFormat::Nvfp4).expect("lazy nvfp4");
    let Mat::LazyAs { global_scale, .. } = q else {
        panic!("not LazyAs")
    };
    let whole = dequantize(
        &quantize(
            &raw,
            rows,
            cols,
            Some(global_scale),
            Nvfp4Mode::Kernel,
            SfLayout::Linear,
        )
        .expect("quantize"),
        SfLayout::Linear,
    );
    assert_eq!(q.values().as_ref(), &whole[..]);
    assert_eq!(q.row_block(7, 19).as_ref(), &whole[7 * cols..19 * cols]);
    assert_ne!(whole, raw, "NVFP4 changes the values");
    let b = lazy.lazy_as(ExpertFormat::Bf16).expect("lazy bf16");
    let want: Vec<f32> = raw.iter().map(|&v| crate::num::round_bf16(v)).collect();
    assert_eq!(b.row_block(3, 5).as_ref(), &want[3 * cols..5 * cols]);
    // Dense matrices and NVFP4 rows that are not whole blocks are not lazy-convertible.
    assert!(lazy
        .clone()
        .materialize()
        .lazy_as(ExpertFormat::Bf16)
        .is_none());
    let odd = Mat::Lazy {
        rows: 2,
        cols: 24,
        seed: 1,
        init: weights::Init::Linear,
    };
    assert!(odd.lazy_as(ExpertFormat::Nvfp4).is_none());
}

/// The super preset's experts convert to NVFP4 without being materialised.
#[test]
fn super_preset_experts_convert_lazily() {
    let mut s = Model::preset("super", Some("E"), Some(""), 3).expect("super E");
    let n = s
        .set_expert_format(nemotron::ExpertFormat::Nvfp4)
        .expect("lazy conversion");
    assert_eq!(n, 2 * 512);
    let nemotron::Mixer::Moe(w) = &s.layers[0].mixer else {
        panic!("layer 0 is not MoE")
    };
    assert!(matches!(w.experts[5].0, Mat::LazyAs { .. }));
}

/// A backend that keeps Mamba decode states "resident" (boxed away from the cache's host
/// vectors, as the GPU keeps them on the device), on the CPU reference's numerics. Downloads
/// are counted, so the test sees the model bring states back exactly where it must.
mod resident {
    use super::super::kernels::{
        mamba_decode_host, CpuKernels, LayerState, MambaStep, ModelKernels, ResidentMamba,
    };
    use super::super::ModelError;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[derive(Debug)]
    struct Held {
        conv: Vec<f32>,
        ssm: Vec<f32>,
        downloads: Arc<AtomicUsize>,
    }

    impl ResidentMamba for Held {
        fn download(&self) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
            self.downloads.fetch_add(1, Ordering::SeqCst);
            Ok((self.conv.clone(), self.ssm.clone()))
        }
        fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
            self
        }
    }

    /// CpuKernels, except that `mamba_decode` keeps the states in a [`Held`].
    #[derive(Debug, Default)]
    pub struct ResidentCpu {
        pub downloads: Arc<AtomicUsize>,
        pub uploads: AtomicUsize,
    }

    macro_rules! forward {
        ($($name:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => {$(
            fn $name(&self, $($a: $t),*) -> $r { CpuKernels.$name($($a),*) }
        )*};
    }

    use super::super::kernels::{AttnGeometry, Route, SsmDims, SsmParams, SsmRows};
    use super::super::weights::Mat;
    use crate::ops::noaux_tc_router::RouterConfig;
    use crate::ops::ssd_chunk_scan::{SsdArgs, SsdOutput};

    impl ModelKernels for ResidentCpu {
        fn name(&self) -> &str {
            "resident-cpu"
        }
        fn as_dyn(&self) -> &dyn ModelKernels {
            self
        }
        forward! {
            linear(x: &[f32], t: usize, w: &Mat, bias: Option<&[f32]>) -> Result<Vec<f32>, ModelError>;
            rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Result<Vec<f32>, ModelError>;
            gated_rmsnorm(x: &[f32], z: &[f32], w: &[f32], group: usize, eps: f32) -> Result<Vec<f32>, ModelError>;
            relu2(x: &[f32]) -> Result<Vec<f32>, ModelError>;
            causal_conv1d(x: &[f32], t: usize, dim: usize, weight: &[f32], bias: Option<&[f32]>, k: usize, init: Option<&[f32]>) -> Result<(Vec<f32>, Vec<f32>), ModelError>;
            causal_conv1d_step(x: &[f32], t: usize, dim: usize, state: &mut [f32], weight: &[f32], bias: Option<&[f32]>, k: usize) -> Result<(Vec<f32>, Vec<f32>), ModelError>;
            ssd_chunk_scan(args: &SsdArgs<'_>, chunk: usize) -> Result<SsdOutput, ModelError>;
            ssu_step(dims: SsmDims, state: &mut [f32], p: &SsmParams<'_>, r: &SsmRows<'_>) -> Result<Vec<f32>, ModelError>;
            ssu_verify(dims: SsmDims, state: &mut [f32], t: usize, p: &SsmParams<'_>, r: &SsmRows<'_>) -> Result<(Vec<f32>, Vec<f32>), ModelError>;
            route(logits: &[f32], bias: &[f32], tokens: usize, cfg: &RouterConfig) -> Result<Vec<Route>, ModelError>;
            attention(q: &[f32], keys: &[f32], vals: &[f32], p0: usize, g: AttnGeometry) -> Result<Vec<f32>, ModelError>;
        }
        fn mamba_decode(
            &self,
            st: &mut LayerState,
            m: &MambaStep<'_>,
            xbc: &[f32],
            dt: &[f32],
        ) -> Result<Vec<f32>, ModelError> {
            let mut held = match std::mem::replace(st, LayerState::Stateless) {
                LayerState::Mamba { conv, ssm } => {
                    self.uploads.fetch_add(1, Ordering::SeqCst);
                    Held {
                        conv,
                        ssm,
                        downloads: self.downloads.clone(),
                    }
                }
                LayerState::MambaResident(mut r) => {
                    let Some(h) = r.as_any_mut().downcast_mut::<Held>() else {
                        return Err(ModelError::Op("not our resident state".into()));
                    };
                    Held {
                        conv: std::mem::take(&mut h.conv),
                        ssm: std::mem::take(&mut h.ssm),
                        downloads: self.downloads.clone(),
                    }
                }
                other => {
                    *st = other;
                    return Err(ModelError::Input("not a Mamba state".into()));
                }
            };
            let y = mamba_decode_host(self, &mut held.conv, &mut held.ssm, m, xbc, dt);
            *st = LayerState::MambaResident(Box::new(held));
            y
        }
        fn own_mamba_decode(&self) -> bool {
            true
        }
    }
}

/// Resident Mamba decode states (as the GPU keeps them) give the same tokens and logits as
/// host states through every pass that reads a cache: decode, speculative decoding (verify +
/// promote), a prefill continuing from a decoded cache, and a cache copy. States come back to
/// the host only where a pass reads them there.
#[test]
fn resident_decode_states_match_host_states() {
    use std::sync::atomic::Ordering;
    let (m, _, ids) = golden();
    let mut r = Model::load_dir(&fixture()).expect("fixture");
    let backend = std::sync::Arc::new(resident::ResidentCpu::default());
    r.set_kernels(backend.clone());
    let v = m.cfg.vocab_size;
    let mamba_layers = m
        .cfg
        .layers
        .iter()
        .filter(|k| **k == LayerKind::Mamba)
        .count();
    assert!(mamba_layers > 0, "the fixture has Mamba layers");
    // Greedy and speculative generation: identical tokens.
    let g0 = m.generate_greedy(&ids[..8], 10).expect("greedy");
    let g1 = r.generate_greedy(&ids[..8], 10).expect("greedy, resident");
    assert_eq!(g0, g1);
    let s1 = r
        .generate_speculative(&ids[..8], 10, 2)
        .expect("spec, resident");
    assert_eq!(s1.tokens, g0);
    // Decode steps: bit-identical logits; the states stay resident between steps.
    let (mut c0, mut c1) = (m.new_cache(), r.new_cache());
    m.forward(&ids[..6], Some(&mut c0), Pass::Prefill, false)
        .expect("prefill");
    r.forward(&ids[..6], Some(&mut c1), Pass::Prefill, false)
        .expect("prefill");
    let (d0, u0) = (
        backend.downloads.load(Ordering::SeqCst),
        backend.uploads.load(Ordering::SeqCst),
    );
    for &tk in &ids[6..9] {
        let a = m
            .forward(&[tk], Some(&mut c0), Pass::Decode, false)
            .expect("decode");
        let b = r
            .forward(&[tk], Some(&mut c1), Pass::Decode, false)
            .expect("decode");
        assert_eq!(a.logits, b.logits);
    }
    assert_eq!(
        backend.downloads.load(Ordering::SeqCst),
        d0,
        "decode downloads nothing"
    );
    assert_eq!(
        backend.uploads.load(Ordering::SeqCst) - u0,
        mamba_layers,
        "one upload per Mamba layer, on the first decode step"
    );
    let resident = |c: &nemotron::Cache| {
        c.layers
            .iter()
            .filter(|l| matches!(l, kernels::LayerState::MambaResident(_)))
            .count()
    };
    assert_eq!(resident(&c1), mamba_layers);
    // A copy downloads, the original stays resident; both continue identically.
    let mut c2 = c1.try_clone().expect("copy");
    assert_eq!(resident(&c2), 0);
    assert_eq!(resident(&c1), mamba_layers);
    // A prefill chunk continuing from the decoded cache (states back on the host first).
    let a = m
        .forward(&ids[9..12], Some(&mut c0), Pass::Prefill, false)
        .expect("prefill");
    let b = r
        .forward(&ids[9..12], Some(&mut c1), Pass::Prefill, false)
        .expect("prefill");
    let c = r
        .forward(&ids[9..12], Some(&mut c2), Pass::Prefill, false)
        .expect("prefill");
    assert_eq!(a.logits, b.logits);
    assert_eq!(a.logits, c.logits);
    // Decode, then verification + promotion from resident states.
    let a = m
        .forward(&ids[12..13], Some(&mut c0), Pass::Decode, false)
        .expect("decode");
    let b = r
        .forward(&ids[12..13], Some(&mut c1), Pass::Decode, false)
        .expect("decode");
    assert_eq!(a.logits, b.logits);
    let next = crate::model::linear::argmax_rows(&a.logits, v)[0];
    let va = m
        .verify_drafts(&mut c0, next, &ids[13..15])
        .expect("verify");
    let vb = r
        .verify_drafts(&mut c1, next, &ids[13..15])
        .expect("verify");
    assert_eq!(va.accepted, vb.accepted);
    assert_eq!(va.out.logits, vb.out.logits);
    let tk = va.greedy[va.accepted];
    let a = m
        .forward(&[tk], Some(&mut c0), Pass::Decode, false)
        .expect("decode");
    let b = r
        .forward(&[tk], Some(&mut c1), Pass::Decode, false)
        .expect("decode");
    assert_eq!(a.logits, b.logits);
    // The states themselves, after a download.
    for (x, y) in c0.layers.iter_mut().zip(c1.layers.iter_mut()) {
        y.make_host().expect("download");
        use kernels::LayerState;
        if let (LayerState::Mamba { conv: a, ssm: b }, LayerState::Mamba { conv: c, ssm: d }) =
            (&*x, &*y)
        {
            assert_eq!((a, b), (c, d));
        }
    }
}

/// The decode engine on the CPU device runs the network op for op as `Model::forward`'s
/// decode: bit-identical logits step after step (tiny-a: M, E, *, - blocks; the held-out
/// tiny-b: grouped routing, other dimensions), built from host or resident caches; clear
/// errors past its KV room and for a token outside the vocabulary.
#[test]
fn decode_engine_on_the_cpu_equals_model_decode() {
    use super::engine::{CpuDevice, DecodeEngine};
    let dirs = [fixture(), fixture().with_file_name("nemotron-tiny-b")];
    for dir in &dirs {
        let m = Model::load_dir(dir).expect("fixture");
        let v = m.cfg.vocab_size;
        let prompt: Vec<u32> = (0..7u32).map(|i| (i * 37 + 5) % v as u32).collect();
        let mut cache = m.new_cache();
        let o = m
            .forward(&prompt, Some(&mut cache), Pass::Prefill, false)
            .expect("prefill");
        let mut tk = crate::model::linear::argmax_rows(&o.logits[(prompt.len() - 1) * v..], v)[0];
        let mut eng = DecodeEngine::new(&m, CpuDevice, &cache, 5).expect("engine");
        for step in 0..5 {
            let a = m
                .forward(&[tk], Some(&mut cache), Pass::Decode, false)
                .expect("decode");
            let b = eng.step(tk).expect("engine step");
            assert_eq!(a.logits.len(), b.len());
            let same = a
                .logits
                .iter()
                .zip(&b)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "{}: step {step}: max rel {:e}",
                dir.display(),
                max_rel(&a.logits, &b)
            );
            tk = crate::model::linear::argmax_rows(&b, v)[0];
        }
        assert_eq!(eng.seen(), cache.seen);
        let e = eng
            .step(tk)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("max_new"), "{e}");
        let e = DecodeEngine::new(&m, CpuDevice, &cache, 1)
            .expect("engine")
            .step(v as u32)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("outside the vocabulary"), "{e}");
        let e = DecodeEngine::new(&m, CpuDevice, &m.new_cache(), 1)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("prefill"), "{e}");
    }
    // From states a backend kept resident (downloaded once when the engine is built).
    let mut r = Model::load_dir(&fixture()).expect("fixture");
    r.set_kernels(std::sync::Arc::new(resident::ResidentCpu::default()));
    let m = Model::load_dir(&fixture()).expect("fixture");
    let mut c = r.new_cache();
    r.forward(&[3, 1, 4, 1, 5], Some(&mut c), Pass::Prefill, false)
        .expect("prefill");
    r.forward(&[9], Some(&mut c), Pass::Decode, false)
        .expect("decode");
    assert!(c
        .layers
        .iter()
        .any(|l| matches!(l, kernels::LayerState::MambaResident(_))));
    let mut eng = DecodeEngine::new(&m, CpuDevice, &c, 2).expect("engine");
    let a = r
        .forward(&[2], Some(&mut c), Pass::Decode, false)
        .expect("decode");
    assert_eq!(a.logits, eng.step(2).expect("step"));
}

/// `set_dense_weights_bf16`: every converted weight is bf16-exact (dense: rounded in place;
/// lazy: kept lazy, stored as bf16), the router gates and the routed experts are untouched,
/// and the model still decodes (its logits within bf16 rounding of the f32 model's).
#[test]
fn dense_weights_to_bf16() {
    use super::nemotron::{ExpertFormat, Mixer};
    let exact = |m: &Mat| m.values().iter().all(|x| x.to_bits() & 0xFFFF == 0);
    let (m0, _, ids) = golden();
    let mut m = Model::load_dir(&fixture()).expect("fixture");
    let n = m.set_dense_weights_bf16().expect("convert");
    assert!(n >= 10, "{n} matrices converted");
    assert!(exact(m.lm_head.as_ref().unwrap_or(&m.embed)));
    for b in &m.layers {
        match &b.mixer {
            Mixer::Mamba(w) => assert!(exact(&w.in_proj) && exact(&w.out_proj)),
            Mixer::Attention(w) => assert!([&w.q, &w.k, &w.v, &w.o].iter().all(|x| exact(x))),
            Mixer::Mlp(w) => assert!(exact(&w.up) && exact(&w.down)),
            Mixer::Moe(w) => {
                assert!(!exact(&w.gate), "the router gate stays fp32");
                assert!(
                    w.experts.iter().any(|(u, _)| !exact(u)),
                    "experts untouched"
                );
                if let Some(sh) = &w.shared {
                    assert!(exact(&sh.up) && exact(&sh.down));
                }
            }
        }
    }
    let a = m0
        .forward(&ids[..12], None, Pass::Prefill, false)
        .expect("f32");
    let b = m
        .forward(&ids[..12], None, Pass::Prefill, false)
        .expect("bf16");
    let e = max_rel(&a.logits, &b.logits);
    assert!(
        e > 0.0 && e < 0.05,
        "bf16 weights move the logits a little: {e:e}"
    );
    // Lazy weights (the super preset) stay lazy, stored as bf16.
    let mut s = Model::preset("super", Some("ME"), Some(""), 1).expect("super preset");
    s.set_dense_weights_bf16().expect("convert");
    for b in &s.layers {
        if let Mixer::Mamba(w) = &b.mixer {
            assert!(matches!(
                w.in_proj,
                Mat::LazyAs {
                    format: ExpertFormat::Bf16,
                    ..
                }
            ));
        }
    }
}
