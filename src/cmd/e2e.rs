//! `duet e2e (MODEL_DIR | --preset NAME) [--compare cpu,golden] [--decode N] [--mtp K]
//! [--dump FILE --path cpu] [--prefill-len N] [--json]`
//!
//! Runs the Nemotron-H model end to end on the CPU reference and compares it with the golden
//! of the model directory (`reference.safetensors`, written by
//! `tools/gen_nemotron_h_golden.py`): a per-layer divergence table of `hidden.{i}`, full-forward
//! logits and greedy tokens, token-by-token decode logits, MTP logits, plus tokens/s.
//!
//! Metrics per tensor: NMSE = sum (a-b)² / sum a² (from `compare`), and the max relative
//! error, defined here as `max|a - b| / max|a|` over the whole tensor (a = golden). A tensor
//! passes when its max relative error is <= `--tol` (1e-4); greedy tokens must agree exactly.
//! The per-layer table marks the first row over tolerance: with a clean model none is, with a
//! broken layer it is that layer's output.

use anyhow::{bail, Context};
use compare::Tolerance;
use reference::model::{Model, Pass};
use reference::{io, Tensor, TensorMap};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// Error growth between consecutive hidden states that counts as a jump.
const JUMP_RATIO: f64 = 10.0;
/// Errors below this (f32 noise) are treated as this when computing the growth.
const JUMP_FLOOR: f64 = 1e-6;

#[derive(clap::Args)]
pub struct Args {
    /// Model directory: config.json, model.safetensors (or shards + index), and optionally
    /// reference.safetensors (the golden).
    #[arg(required_unless_present = "preset", conflicts_with = "preset")]
    model_dir: Option<PathBuf>,
    /// Built-in model with seeded random weights: tiny (the fixture's dimensions) or super
    /// (Nemotron 3 Super dimensions; needs --pattern with few layers on the CPU).
    #[arg(long)]
    preset: Option<String>,
    /// Layer pattern for a preset, e.g. MEMEMEM*E (M Mamba-2, E MoE, * attention, - MLP).
    #[arg(long)]
    pattern: Option<String>,
    /// MTP pattern for a preset ("" for none).
    #[arg(long)]
    mtp_pattern: Option<String>,
    /// Seed of a preset's weights and of its random prompt.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Paths to run and compare: cpu, golden.
    #[arg(long, value_delimiter = ',', default_value = "cpu,golden")]
    compare: Vec<String>,
    /// Golden file (default MODEL_DIR/reference.safetensors when present).
    #[arg(long)]
    golden: Option<PathBuf>,
    /// Decode steps after the prefill (default: to the end of the golden's tokens).
    #[arg(long)]
    decode: Option<usize>,
    /// Speculative decoding with K MTP draft tokens per round (checked against greedy).
    #[arg(long)]
    mtp: Option<usize>,
    /// Tokens of the prefill before decoding (default: the golden's prefill_len).
    #[arg(long)]
    prefill_len: Option<usize>,
    /// Prompt length when there is no golden (random tokens from --seed).
    #[arg(long, default_value_t = 40)]
    tokens: usize,
    /// Write logits, decode_logits, mtp_logits and hidden.{i} (the golden's names) here.
    #[arg(long, requires = "path")]
    dump: Option<PathBuf>,
    /// Which path --dump writes.
    #[arg(long, value_parser = ["cpu"])]
    path: Option<String>,
    /// Routed expert weights as f32 (as loaded), bf16, or nvfp4 (kernel-mode NVFP4, 16-element
    /// blocks, E4M3 scales, one global scale per matrix).
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16", "nvfp4"])]
    experts: String,
    /// Pass threshold of the max relative error.
    #[arg(long, default_value_t = 1e-4)]
    tol: f64,
    #[arg(long)]
    json: bool,
}

/// Golden-vs-ours metrics of one tensor.
#[derive(Clone, Debug)]
struct Metric {
    name: String,
    nmse: f64,
    max_rel: f64,
    max_abs: f64,
    pass: bool,
}

fn metric(name: &str, golden: &Tensor, got: &[f32], tol: f64) -> anyhow::Result<Metric> {
    let got_t = Tensor::from_f32(&golden.shape, got.to_vec());
    if golden.numel() != got.len() {
        bail!(
            "{name}: the golden has shape {:?} ({} values) but the model produced {} values",
            golden.shape,
            golden.numel(),
            got.len()
        );
    }
    let rep = compare::compare(name, golden, &got_t, Tolerance::Nmse { max: f64::MAX });
    let amax = golden.to_f64_vec().iter().fold(0f64, |m, v| m.max(v.abs()));
    let max_rel = if amax > 0.0 {
        rep.max_abs_err / amax
    } else {
        rep.max_abs_err
    };
    Ok(Metric {
        name: name.into(),
        nmse: rep.nmse,
        max_rel,
        max_abs: rep.max_abs_err,
        pass: max_rel <= tol && rep.nmse.is_finite(),
    })
}

fn metric_json(m: &Metric) -> Value {
    json!({"name": m.name, "nmse": m.nmse, "max_rel": m.max_rel, "max_abs": m.max_abs, "pass": m.pass})
}

fn argmax_rows(x: &[f32], v: usize) -> Vec<usize> {
    x.chunks_exact(v)
        .map(|r| {
            let mut b = 0;
            for (i, &a) in r.iter().enumerate() {
                if a > r[b] {
                    b = i;
                }
            }
            b
        })
        .collect()
}

/// Greedy agreement of two logit matrices: (equal rows, rows).
fn greedy_agreement(golden: &Tensor, got: &[f32], v: usize) -> (usize, usize) {
    let a = argmax_rows(&golden.to_f32_vec(), v);
    let b = argmax_rows(got, v);
    (a.iter().zip(&b).filter(|(x, y)| x == y).count(), a.len())
}

/// Labels of hidden.{i}: embeddings, layer outputs, norm_f.
fn hidden_labels(model: &Model) -> Vec<String> {
    let n = model.cfg.layers.len();
    let mut v = vec!["embeddings".to_string()];
    for (i, k) in model.cfg.layers.iter().enumerate() {
        if i + 1 < n {
            v.push(format!("layer {i} ({})", k.symbol()));
        } else {
            v.push(format!("norm_f(layer {i} ({}))", k.symbol()));
        }
    }
    v
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    for c in &args.compare {
        if !["cpu", "golden"].contains(&c.as_str()) {
            bail!("--compare {c}: unknown path; use cpu and/or golden (gpu comes later)");
        }
    }
    let t_load = Instant::now();
    let (model, golden_path) = match (&args.model_dir, &args.preset) {
        (Some(dir), _) => {
            let (m, unused) = Model::load_dir_with_unused(dir)
                .with_context(|| format!("loading the model in {}", dir.display()))?;
            if !unused.is_empty() {
                eprintln!(
                    "note: {} checkpoint tensors are not used by the config (first: {}); check the layer pattern",
                    unused.len(),
                    unused[0]
                );
            }
            let g = args
                .golden
                .clone()
                .or_else(|| Some(dir.join("reference.safetensors")).filter(|p| p.exists()));
            (m, g)
        }
        (None, Some(p)) => (
            Model::preset(
                p,
                args.pattern.as_deref(),
                args.mtp_pattern.as_deref(),
                args.seed,
            )?,
            args.golden.clone(),
        ),
        (None, None) => bail!("give a MODEL_DIR or --preset tiny|super"),
    };
    let mut model = model;
    let fmt = reference::model::nemotron::ExpertFormat::parse(&args.experts)
        .context("--experts: use f32, bf16 or nvfp4")?;
    let converted = model.set_expert_format(fmt)?;
    if converted > 0 {
        eprintln!(
            "note: {converted} routed expert weight matrices stored as {}",
            args.experts
        );
    }
    let load_s = t_load.elapsed().as_secs_f64();
    let want_golden = args.compare.iter().any(|c| c == "golden");
    let (golden, gmeta): (Option<TensorMap>, BTreeMap<String, String>) = match &golden_path {
        Some(p) => {
            let (m, meta) = io::load_with_metadata(p)?;
            (Some(m), meta)
        }
        None => (None, BTreeMap::new()),
    };
    if want_golden && golden.is_none() && args.compare.len() > 1 {
        eprintln!("note: no golden (reference.safetensors); running the cpu path only");
    }
    let golden = if want_golden { golden } else { None };
    let cfg = &model.cfg;
    let v = cfg.vocab_size;
    // Tokens: the golden's, or seeded random ones.
    let ids: Vec<u32> = match golden.as_ref().and_then(|g| g.get("input_ids")) {
        Some(t) => t
            .to_i64_vec()
            .context("input_ids in the golden is not an integer tensor")?
            .into_iter()
            .map(|x| x as u32)
            .collect(),
        None => {
            let mut s = args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            (0..args.tokens)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s % v as u64) as u32
                })
                .collect()
        }
    };
    let t = ids.len();
    if t < 2 {
        bail!("need at least 2 tokens, have {t}");
    }
    let prefill_len = args
        .prefill_len
        .or_else(|| gmeta.get("prefill_len").and_then(|s| s.parse().ok()))
        .unwrap_or(t / 2)
        .clamp(1, t);
    let steps = args.decode.unwrap_or(t - prefill_len).min(t - prefill_len);

    // Full forward.
    let t0 = Instant::now();
    let full = model.forward(&ids, None, Pass::Prefill, true)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    // Decode: prefill of prefill_len tokens, then one token at a time (teacher forcing).
    let mut cache = model.new_cache();
    let o = model.forward(&ids[..prefill_len], Some(&mut cache), Pass::Prefill, false)?;
    let mut decode_logits = o.logits[(prefill_len - 1) * v..].to_vec();
    let t1 = Instant::now();
    for &tk in &ids[prefill_len..prefill_len + steps] {
        let o = model.forward(&[tk], Some(&mut cache), Pass::Decode, false)?;
        decode_logits.extend_from_slice(&o.logits);
    }
    let decode_s = t1.elapsed().as_secs_f64();
    // MTP logits: row i from (h_i, token i+1).
    let hs = cfg.hidden_size;
    let mtp_logits = if model.mtp.is_some() {
        Some(
            model
                .mtp_forward(&full.last_hidden[..(t - 1) * hs], &ids[1..], None)?
                .0,
        )
    } else {
        None
    };
    // Speculative decoding.
    let spec = match args.mtp {
        Some(k) => {
            let n_new = steps.max(1);
            let prompt = &ids[..prefill_len];
            let tg = Instant::now();
            let greedy = model.generate_greedy(prompt, n_new)?;
            let greedy_s = tg.elapsed().as_secs_f64();
            let ts = Instant::now();
            let s = model.generate_speculative(prompt, n_new, k)?;
            let spec_s = ts.elapsed().as_secs_f64();
            Some((k, n_new, greedy, greedy_s, s, spec_s))
        }
        None => None,
    };

    // Dump.
    if let Some(path) = &args.dump {
        let mut m = TensorMap::new();
        m.insert(
            "logits".into(),
            Tensor::from_f32(&[t, v], full.logits.clone()),
        );
        m.insert(
            "decode_logits".into(),
            Tensor::from_f32(&[steps + 1, v], decode_logits.clone()),
        );
        if let Some(ml) = &mtp_logits {
            m.insert(
                "mtp_logits".into(),
                Tensor::from_f32(&[t - 1, v], ml.clone()),
            );
        }
        for (i, h) in full.hidden.iter().enumerate() {
            m.insert(format!("hidden.{i}"), Tensor::from_f32(&[t, hs], h.clone()));
        }
        m.insert(
            "input_ids".into(),
            Tensor::from_i32(&[1, t], ids.iter().map(|&x| x as i32).collect()),
        );
        let mut meta = BTreeMap::new();
        meta.insert("prefill_len".to_string(), prefill_len.to_string());
        meta.insert("path".to_string(), "cpu".to_string());
        io::save_with_metadata(path, &m, &meta)?;
    }

    // Compare.
    let mut ok = true;
    let mut layers = Vec::new();
    let mut first_bad: Option<usize> = None;
    let mut largest_jump: Option<(usize, f64)> = None;
    let mut outs = Vec::new();
    let mut greedy = Value::Null;
    let labels = hidden_labels(&model);
    if let Some(g) = &golden {
        for (i, h) in full.hidden.iter().enumerate() {
            let name = format!("hidden.{i}");
            if let Some(gt) = g.get(&name) {
                let m = metric(&name, gt, h, args.tol)?;
                if !m.pass && first_bad.is_none() {
                    first_bad = Some(i);
                }
                layers.push((i, m));
            }
        }
        // The largest step-to-step growth of the error (floored at f32 noise): where a
        // path whose every layer is over tolerance (bf16 on the GPU) actually breaks.
        for w in layers.windows(2) {
            let (prev, cur) = (&w[0].1, &w[1].1);
            let ratio = cur.max_rel / prev.max_rel.max(JUMP_FLOOR);
            if ratio > JUMP_RATIO && largest_jump.is_none_or(|(_, r)| ratio > r) {
                largest_jump = Some((w[1].0, ratio));
            }
        }
        let mut agree = BTreeMap::new();
        for (name, got, rows) in [
            ("logits", Some(&full.logits), t),
            ("decode_logits", Some(&decode_logits), steps + 1),
            ("mtp_logits", mtp_logits.as_ref(), t.saturating_sub(1)),
        ] {
            let (Some(got), Some(gt)) = (got, g.get(name)) else {
                continue;
            };
            // A shorter decode than the golden's compares the first rows.
            let gt = if name == "decode_logits" && gt.shape[0] > rows {
                Tensor::from_f32(&[rows, v], gt.to_f32_vec()[..rows * v].to_vec())
            } else {
                gt.clone()
            };
            let m = metric(name, &gt, got, args.tol)?;
            let (eq, n) = greedy_agreement(&gt, got, v);
            ok &= m.pass && eq == n;
            agree.insert(name.to_string(), (eq, n));
            outs.push(m);
        }
        ok &= layers.iter().all(|(_, m)| m.pass);
        greedy = json!(agree
            .iter()
            .map(|(k, (e, n))| (k.clone(), json!({"agree": e, "rows": n})))
            .collect::<serde_json::Map<_, _>>());
    }
    if let Some((_, _, g, _, s, _)) = &spec {
        ok &= g == &s.tokens;
    }
    let prefill_tps = t as f64 / prefill_s.max(1e-9);
    let decode_tps = steps as f64 / decode_s.max(1e-9);
    let (pb, pm) = model.param_counts();

    if args.json {
        let spec_json = spec.as_ref().map(|(k, n, g, gs, s, ss)| {
            let acc: usize = s.accepted.iter().sum();
            json!({
                "k": k, "new_tokens": n, "rounds": s.rounds, "accepted": s.accepted,
                "acceptance_rate": if s.rounds > 0 { acc as f64 / (s.rounds * k) as f64 } else { 0.0 },
                "matches_greedy": g == &s.tokens, "tokens": s.tokens,
                "greedy_tokens_per_s": *n as f64 / gs.max(1e-9),
                "spec_tokens_per_s": *n as f64 / ss.max(1e-9),
            })
        });
        let out = json!({
            "model": {"pattern": cfg.pattern(), "mtp_pattern": cfg.mtp_pattern(),
                      "params_backbone": pb, "params_mtp": pm, "load_s": load_s},
            "tokens": t, "prefill_len": prefill_len, "decode_steps": steps,
            "golden": golden_path.as_ref().filter(|_| golden.is_some()).map(|p| p.display().to_string()),
            "tolerance_max_rel": args.tol,
            "layers": layers.iter().map(|(i, m)| {
                let mut j = metric_json(m);
                j["label"] = json!(labels.get(*i).cloned().unwrap_or_default());
                j["index"] = json!(i);
                j
            }).collect::<Vec<_>>(),
            "first_divergent": first_bad.map(|i| json!({
                "hidden": i,
                "layer": if i == 0 { Value::Null } else { json!(i - 1) },
                "label": labels.get(i).cloned().unwrap_or_default(),
            })),
            "largest_jump": largest_jump.map(|(i, r)| json!({
                "hidden": i,
                "layer": if i == 0 { Value::Null } else { json!(i - 1) },
                "label": labels.get(i).cloned().unwrap_or_default(),
                "ratio": r,
            })),
            "outputs": outs.iter().map(metric_json).collect::<Vec<_>>(),
            "greedy": greedy,
            "speculative": spec_json,
            "tokens_per_s": {"prefill": prefill_tps, "decode": decode_tps},
            "pass": ok,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "model: pattern {} (mtp {}), {:.2}M backbone + {:.2}M MTP parameters, loaded in {:.2}s",
            cfg.pattern(),
            if cfg.mtp_pattern().is_empty() {
                "none".to_string()
            } else {
                cfg.mtp_pattern()
            },
            pb as f64 / 1e6,
            pm as f64 / 1e6,
            load_s
        );
        println!(
            "tokens {t}, prefill_len {prefill_len}, decode steps {steps}; max rel = max|a-b|/max|a|, tolerance {:.0e}",
            args.tol
        );
        if golden.is_some() {
            println!("\nper-layer divergence vs golden:");
            println!(
                "  {:<8} {:<22} {:>11} {:>11} {:>11}",
                "tensor", "after", "nmse", "max rel", "max abs"
            );
            for (i, m) in &layers {
                let mut mark = if Some(*i) == first_bad {
                    "  <== first over tolerance".to_string()
                } else if m.pass {
                    String::new()
                } else {
                    "  (over)".to_string()
                };
                if let Some((_, r)) = largest_jump.filter(|(j, _)| j == i) {
                    mark.push_str(&format!("  <== largest jump (x{r:.0})"));
                }
                println!(
                    "  {:<8} {:<22} {:>11.3e} {:>11.3e} {:>11.3e}{mark}",
                    m.name,
                    labels.get(*i).map(String::as_str).unwrap_or(""),
                    m.nmse,
                    m.max_rel,
                    m.max_abs
                );
            }
            match first_bad {
                Some(i) => println!(
                    "first divergent: hidden.{i} = {}",
                    labels.get(i).map(String::as_str).unwrap_or("")
                ),
                None => println!("no layer over tolerance"),
            }
            if let Some((i, r)) = largest_jump {
                println!(
                    "largest error jump: hidden.{i} = {} (x{r:.0} over the previous row)",
                    labels.get(i).map(String::as_str).unwrap_or("")
                );
            }
            println!("\noutputs:");
            for m in &outs {
                let (e, n) = greedy
                    .get(&m.name)
                    .map(|g| {
                        (
                            g["agree"].as_u64().unwrap_or(0),
                            g["rows"].as_u64().unwrap_or(0),
                        )
                    })
                    .unwrap_or((0, 0));
                println!(
                    "  {:<14} nmse {:.3e}  max rel {:.3e}  greedy {e}/{n}  {}",
                    m.name,
                    m.nmse,
                    m.max_rel,
                    if m.pass && e == n { "PASS" } else { "FAIL" }
                );
            }
        }
        if let Some((k, n, g, gs, s, ss)) = &spec {
            let acc: usize = s.accepted.iter().sum();
            println!(
                "\nspeculative (k={k}): {n} tokens in {} rounds, {acc} drafts accepted ({:.0}%), {} greedy; {:.1} tok/s vs greedy {:.1} tok/s",
                s.rounds,
                if s.rounds > 0 { 100.0 * acc as f64 / (s.rounds * k) as f64 } else { 0.0 },
                if g == &s.tokens { "matches" } else { "DIFFERS FROM" },
                *n as f64 / ss.max(1e-9),
                *n as f64 / gs.max(1e-9)
            );
        }
        println!("\ntokens/s: prefill {prefill_tps:.3}, decode {decode_tps:.3}");
        if golden.is_some() || spec.is_some() {
            println!("{}", if ok { "PASS" } else { "FAIL" });
        }
    }
    Ok(if ok { 0 } else { 1 })
}
