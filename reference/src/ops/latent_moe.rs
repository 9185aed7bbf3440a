//! `latent_moe`: the whole LatentMoE block of Nemotron 3 Super, in f32 (SPEC.md "LatentMoE"):
//!
//! ```text
//! logits = hidden . gate_weight^T                    (fp32, on the full hidden)
//! (idx, w) = noaux_tc_router(logits, e_score_correction_bias)
//! lat = hidden . fc1_latent_proj^T                   (hidden -> latent)
//! routed = moe_finalize(moe_expert_gemm2(relu2(moe_expert_gemm1(permute(lat)))), w)
//! out = routed . fc2_latent_proj^T + shared_down(relu2(shared_up(hidden)))
//! ```
//!
//! The routed experts go through the same steps as the expert-layer ops: `moe_permute`
//! (expert-sorted rows), one GEMM pair per expert on its contiguous rows, and `moe_finalize`
//! (fp32 weighted sum in slot order). The model's MoE layers call [`routed_experts`], so the
//! model and this op are one implementation. Weights use the hub layout stacked over experts:
//! `up_proj` `[E, I, L]` is `experts.{e}.up_proj.weight` `(I, L)` for every e.

use super::moe_finalize::finalize;
use super::moe_permute::permute;
use super::noaux_tc_router::{route, GroupMask, NormMode, RouterConfig, SigmoidMode};
use crate::model::linear::linear;
use crate::model::weights::Mat;
use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{Tensor, TensorMap};
use rayon::prelude::*;

/// Routed experts on latent activations.
///
/// - `lat`: `(t, L)` latent activations;
/// - `topk_indices`, `topk_weights`: `(t, k)` router output;
/// - `experts[e]`: `(up (I, L), down (L, I))`.
///
/// Returns `(t, L)`: `sum_j w[t, j] * down_e(relu(up_e(lat[t]))^2)` with `e = idx[t, j]`.
pub fn routed_experts(
    lat: &[f32],
    t: usize,
    topk_indices: &[i64],
    topk_weights: &[f32],
    k: usize,
    experts: &[(Mat, Mat)],
) -> Result<Vec<f32>, String> {
    let lw = lat.len().checked_div(t).unwrap_or(0);
    let perm = permute(topk_indices, k, experts.len())?;
    // Per expert: gather its rows, up GEMM, relu^2, down GEMM (the grouped GEMM pair).
    let outs: Vec<Vec<f32>> = (0..experts.len())
        .into_par_iter()
        .map(|e| {
            let rows = perm.offsets[e]..perm.offsets[e + 1];
            if rows.is_empty() {
                return Vec::new();
            }
            let mut xs = Vec::with_capacity(rows.len() * lw);
            for r in rows.clone() {
                let tok = perm.token[r];
                xs.extend_from_slice(&lat[tok * lw..(tok + 1) * lw]);
            }
            let (up, down) = &experts[e];
            let mut u = linear(&xs, rows.len(), up, None);
            for v in &mut u {
                let r = v.max(0.0);
                *v = r * r;
            }
            linear(&u, rows.len(), down, None)
        })
        .collect();
    let expert_out: Vec<f32> = outs.concat();
    let inverse = perm.inverse;
    Ok(finalize(&expert_out, lw, topk_weights, &inverse, k))
}

/// The weights of one LatentMoE block.
pub struct LatentMoeWeights {
    /// `(E, H)` router.
    pub gate: Mat,
    /// `(E,)` e_score_correction_bias.
    pub bias: Vec<f32>,
    /// `(L, H)`; `None` when experts work on the full hidden.
    pub fc1: Option<Mat>,
    /// `(H, L)`.
    pub fc2: Option<Mat>,
    /// `(up (I, L), down (L, I))` per expert.
    pub experts: Vec<(Mat, Mat)>,
    /// `(up (S, H), down (H, S))` shared expert.
    pub shared: Option<(Mat, Mat)>,
}

/// `latent_moe`'s result: (out `(t, H)`, topk_indices, topk_weights).
pub type LatentMoeOut = (Vec<f32>, Vec<i64>, Vec<f32>);

/// The block on `hidden` `(t, H)`: returns (out `(t, H)`, topk_indices, topk_weights).
pub fn latent_moe(
    hidden: &[f32],
    t: usize,
    w: &LatentMoeWeights,
    router: &RouterConfig,
) -> Result<LatentMoeOut, String> {
    let logits = linear(hidden, t, &w.gate, None);
    let r = route(&logits, &w.bias, t, w.bias.len(), router)?;
    let idx: Vec<i64> = r.topk_indices.iter().map(|&i| i as i64).collect();
    let lat = match &w.fc1 {
        Some(f) => linear(hidden, t, f, None),
        None => hidden.to_vec(),
    };
    let acc = routed_experts(&lat, t, &idx, &r.topk_weights, r.top_k, &w.experts)?;
    let mut y = match &w.fc2 {
        Some(f) => linear(&acc, t, f, None),
        None => acc,
    };
    if let Some((up, down)) = &w.shared {
        let mut u = linear(hidden, t, up, None);
        for v in &mut u {
            let r = v.max(0.0);
            *v = r * r;
        }
        for (a, b) in y.iter_mut().zip(linear(&u, t, down, None)) {
            *a += b;
        }
    }
    Ok((y, idx, r.topk_weights))
}

pub fn def() -> OpDef {
    OpDef {
        name: "latent_moe",
        summary: "the LatentMoE block: fp32 router, fc1 latent, routed relu^2 experts, fc2 latent, shared expert",
        inputs: vec![
            ArgSpec::req("hidden", "(T, H)", "f32|bf16", "normed hidden states"),
            ArgSpec::req("gate_weight", "(E, H)", "f32|bf16", "router weight (mixer.gate.weight)"),
            ArgSpec::req("e_score_correction_bias", "(E,)", "f32|bf16", "router bias"),
            ArgSpec::opt("fc1_latent_proj", "(L, H)", "f32|bf16", "hidden -> latent"),
            ArgSpec::opt("fc2_latent_proj", "(H, L)", "f32|bf16", "latent -> hidden"),
            ArgSpec::req("up_proj", "(E, I, L)", "f32|bf16", "experts.{e}.up_proj.weight stacked"),
            ArgSpec::req("down_proj", "(E, L, I)", "f32|bf16", "experts.{e}.down_proj.weight stacked"),
            ArgSpec::opt("shared_up_proj", "(S, H)", "f32|bf16", "shared_experts.up_proj.weight"),
            ArgSpec::opt("shared_down_proj", "(H, S)", "f32|bf16", "shared_experts.down_proj.weight"),
        ],
        params: vec![
            ParamSpec::new("top_k", ParamKind::Int, None, "experts per token"),
            ParamSpec::new("n_group", ParamKind::Int, Some("1"), "expert groups"),
            ParamSpec::new("topk_group", ParamKind::Int, Some("1"), "groups kept"),
            ParamSpec::new("routed_scaling_factor", ParamKind::Float, Some("1.0"), "weight scale"),
            ParamSpec::new("norm_topk_prob", ParamKind::Bool, Some("true"), "normalise the k weights"),
            ParamSpec::new(
                "norm_mode",
                ParamKind::Enum(&["fp32_divide_then_multiply", "fp64", "fp32_no_eps"]),
                Some("fp32_divide_then_multiply"),
                "router normalisation numerics (default: transformers')",
            ),
            ParamSpec::new(
                "group_mask",
                ParamKind::Enum(&["zero", "neg_inf"]),
                Some("neg_inf"),
                "grouped routing: dropped groups' experts never win (transformers 5.17 NemotronHTopkRouter's masked_fill(-inf)) or get key 0.0 (DeepseekV3-style)",
            ),
        ],
        outputs: vec![
            ArgSpec::req("out", "(T, H)", "f32", "block output (add the residual outside)"),
            ArgSpec::req("topk_indices", "(T, k)", "i32", "router choices"),
            ArgSpec::req("topk_weights", "(T, k)", "f32", "router weights"),
        ],
        run: run_op,
    }
}

fn mat(inp: &Inputs, name: &str, rows: usize, cols: usize) -> Result<Option<Mat>, OpError> {
    match inp.opt_float(name, 2)? {
        None => Ok(None),
        Some((t, v)) => {
            inp.shape(
                name,
                t,
                &[rows, cols],
                "the shape implied by the other weights",
            )?;
            Ok(Some(Mat::dense(rows, cols, v)))
        }
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let inp = Inputs::new("latent_moe", inputs);
    let (ht, hv) = inp.float("hidden", 2)?;
    let (t, h) = (ht.shape[0], ht.shape[1]);
    let (gt, gv) = inp.float("gate_weight", 2)?;
    let e = gt.shape[0];
    inp.shape("gate_weight", gt, &[e, h], "(E, H) with H from 'hidden'")?;
    let (bt, bv) = inp.float("e_score_correction_bias", 1)?;
    if bv.len() != e {
        return Err(inp.err(
            "e_score_correction_bias",
            format!(
                "has {} entries but 'gate_weight' has {e} experts",
                bt.shape[0]
            ),
        ));
    }
    let (ut, uv) = inp.float("up_proj", 3)?;
    let (i_w, l) = (ut.shape[1], ut.shape[2]);
    inp.shape(
        "up_proj",
        ut,
        &[e, i_w, l],
        "(E, I, L) with E from 'gate_weight'",
    )?;
    let (dt_, dv) = inp.float("down_proj", 3)?;
    inp.shape("down_proj", dt_, &[e, l, i_w], "(E, L, I)")?;
    let fc1 = mat(&inp, "fc1_latent_proj", l, h)?;
    let fc2 = mat(&inp, "fc2_latent_proj", h, l)?;
    if fc1.is_some() != fc2.is_some() || (fc1.is_none() && l != h) {
        return Err(inp.invalid(
            "give both fc1_latent_proj and fc2_latent_proj, or neither (then L must equal H)",
        ));
    }
    let shared = match (inp.get("shared_up_proj"), inp.get("shared_down_proj")) {
        (None, None) => None,
        (Some(su), Some(_)) => {
            let s = su.shape.first().copied().unwrap_or(0);
            Some((
                mat(&inp, "shared_up_proj", s, h)?.unwrap_or_else(|| Mat::dense(0, 0, vec![])),
                mat(&inp, "shared_down_proj", h, s)?.unwrap_or_else(|| Mat::dense(0, 0, vec![])),
            ))
        }
        _ => return Err(inp.invalid("give both shared_up_proj and shared_down_proj, or neither")),
    };
    let experts: Vec<(Mat, Mat)> = (0..e)
        .map(|x| {
            (
                Mat::dense(i_w, l, uv[x * i_w * l..(x + 1) * i_w * l].to_vec()),
                Mat::dense(l, i_w, dv[x * i_w * l..(x + 1) * i_w * l].to_vec()),
            )
        })
        .collect();
    let norm_mode = match p.str("norm_mode")? {
        "fp64" => NormMode::Fp64,
        "fp32_no_eps" => NormMode::Fp32NoEps,
        _ => NormMode::Fp32DivideThenMultiply,
    };
    let router = RouterConfig {
        top_k: p.usize("top_k")?,
        n_group: p.usize("n_group")?,
        topk_group: p.usize("topk_group")?,
        routed_scaling_factor: p.float("routed_scaling_factor")?,
        norm_topk_prob: p.bool("norm_topk_prob")?,
        norm_mode,
        sigmoid: SigmoidMode::Exp,
        group_mask: match p.str("group_mask")? {
            "zero" => GroupMask::Zero,
            _ => GroupMask::NegInf,
        },
    };
    let w = LatentMoeWeights {
        gate: Mat::dense(e, h, gv),
        bias: bv,
        fc1,
        fc2,
        experts,
        shared,
    };
    let (y, idx, wts) = latent_moe(&hv, t, &w, &router).map_err(|m| inp.invalid(m))?;
    let k = router.top_k;
    Ok(op::outputs([
        ("out", Tensor::from_f32(&[t, h], y)),
        (
            "topk_indices",
            Tensor::from_i32(&[t, k], idx.iter().map(|&i| i as i32).collect()),
        ),
        ("topk_weights", Tensor::from_f32(&[t, k], wts)),
    ]))
}
