//! `noaux_tc_router`: DeepSeek-V3 / Nemotron-H "no auxiliary loss" top-k routing (SPEC.md,
//! Router).
//!
//! Per token `t`, with `x = logits[t, :]` (f32; bf16/f16 upcast exactly):
//!
//! ```text
//! s_e   = sigmoid(x_e)                        (f32, see SigmoidMode)
//! key_e = s_e + bias_e                        (f32 add; bias upcast from bf16/f16 exactly)
//! n_group == 1: winners = top_k experts by key
//! n_group  > 1: group_g = top1 + top2 of the keys in group g (f32, largest first);
//!               keep the topk_group best groups; winners = top_k experts among them
//! w_i   = s_{winner_i}                         (the UNBIASED score)
//! norm_topk_prob: w_i = normalise(w_i) (NormMode); else w_i = s * routed_scaling_factor
//! ```
//!
//! # Order (bit-exact, matches the fused kernels)
//!
//! Every comparison (experts, and groups by group score) uses the u64 packed key of SPEC.md:
//! `(twiddle(f32 bits) << 16) | (65535 - index)`, larger first, where `twiddle(b) = b < 0 ? !b :
//! b | 0x8000_0000` makes the unsigned order of the bits the float order. Consequences: outputs
//! are sorted by key descending; equal keys go to the LOWEST index; `-0 < +0`; a positive NaN
//! beats `+inf`. Indices must therefore fit 16 bits: `E <= 65536`.
//!
//! # NaN policy
//!
//! A NaN key (NaN logit or NaN bias) is canonicalised to the positive NaN `0x7FFF_FFFF`, as the
//! GPU's arithmetic does (NVIDIA FP32 units return the canonical NaN), so such an expert ranks
//! above every finite and infinite key and is always selected (ties among NaNs: lowest index).
//! A NaN *logit* also makes its weight NaN and, through the normalising sum, every weight of
//! that token NaN; a NaN *bias* only moves the selection (the weight uses the unbiased score).
//! `+-inf` logits are fine: sigmoid gives 1 / 0. In grouped routing a NaN group score is the
//! same positive NaN and wins group selection.
//!
//! # Masking (grouped)
//!
//! [`GroupMask::NegInf`] (default): experts of groups that were not kept never win. TRT-LLM
//! and transformers 5.17's `NemotronHTopkRouter` mask them with `-inf`
//! (fixtures/goldens/noaux_tc_router-transformers-nemotronh-grouped-negbias). With
//! [`GroupMask::Zero`], transformers' DeepseekV3-style routers mask them with `0.0` instead.
//! The two differ when fewer than `top_k` experts of the kept groups have a positive key: then
//! dropped-group experts, with key +0.0, win, lowest id first.
//!
//! # Normalisation modes ([`NormMode`])
//!
//! The sum `S` is an f32 sum of the winners' unbiased scores in rank order (sequential), in
//! every mode; `r = routed_scaling_factor`.
//! * `fp64` (default, TRT-LLM `noAuxTcKernels.cu`): `w = f32(f64(s) * r / (f64(S) + 1e-20))`.
//! * `fp32_divide_then_multiply` (transformers / PyTorch fallback):
//!   `w = (s / (S + 1e-20f)) * f32(r)` in f32.
//! * `fp32_no_eps` (trtllm-gen routing): `w = (s * f32(r)) / S` in f32.
//!
//! Without normalisation (`norm_topk_prob = false`): `fp64` gives `f32(f64(s) * r)`, the f32
//! modes `s * f32(r)`.

use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{DType, Tensor, TensorMap};

/// How the winners' weights are normalised (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormMode {
    /// TRT-LLM noAuxTc: divide in f64 with the double scaling factor and `+1e-20`.
    Fp64,
    /// transformers / PyTorch fallback: `s / (sum + 1e-20) * factor` in f32.
    Fp32DivideThenMultiply,
    /// trtllm-gen: `s * factor / sum` in f32, no epsilon.
    Fp32NoEps,
}

impl NormMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "fp64" => Some(NormMode::Fp64),
            "fp32_divide_then_multiply" => Some(NormMode::Fp32DivideThenMultiply),
            "fp32_no_eps" => Some(NormMode::Fp32NoEps),
            _ => None,
        }
    }
}

/// The sigmoid formula.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SigmoidMode {
    /// `0.5 * tanh(0.5 x) + 0.5` in f32 (TRT-LLM `sigmoid_accurate`), with `tanh` correctly
    /// rounded to f32 (computed in f64). The multiply-add is exact or identical under FMA.
    /// Rounding happens near 0.5, so the absolute error is <= ulp(0.5) = 6e-8: for x >= 0 that
    /// is within an ulp of the true sigmoid, for x << 0 many ulps of the (tiny) result.
    Tanh,
    /// `1 / (1 + exp(-x))` correctly rounded to f32 (computed in f64): torch's `sigmoid`
    /// within its last-bit error.
    Exp,
    /// `0.5 * duet_tanhf(0.5 x) + 0.5`, every step an f32 operation
    /// ([`crate::num::tanhf`]: `duet_tanhf` is within 1 ulp of the correctly rounded tanh over
    /// all 2^32 inputs, like CUDA's `tanhf`, and bit-identical on CPU and GPU). Differs from
    /// [`SigmoidMode::Tanh`] by at most one ulp of `s` (2^-24), and only where `duet_tanhf`
    /// differs from the correctly rounded tanh (0.13% of inputs, by 1 ulp). No f64 anywhere: the fast
    /// GPU path.
    TanhF32,
}

impl SigmoidMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "tanh" => Some(SigmoidMode::Tanh),
            "exp" => Some(SigmoidMode::Exp),
            "tanh_f32" => Some(SigmoidMode::TanhF32),
            _ => None,
        }
    }
}

/// What grouped routing gives the experts of the groups that were not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupMask {
    /// TRT-LLM and transformers' NemotronHTopkRouter: they never win (masked with `-inf`).
    NegInf,
    /// transformers' DeepseekV3-style routers (`masked_fill(~mask, 0.0)`): their key becomes
    /// `+0.0`, so they win over kept experts whose biased key is negative.
    Zero,
}

impl GroupMask {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "neg_inf" => Some(GroupMask::NegInf),
            "zero" => Some(GroupMask::Zero),
            _ => None,
        }
    }
}

/// Router parameters (upstream names).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouterConfig {
    pub top_k: usize,
    pub n_group: usize,
    pub topk_group: usize,
    pub routed_scaling_factor: f64,
    pub norm_topk_prob: bool,
    pub norm_mode: NormMode,
    pub sigmoid: SigmoidMode,
    /// Grouped routing only (n_group > 1).
    pub group_mask: GroupMask,
}

impl RouterConfig {
    /// Nemotron 3 Super: top-22 of 512, one group, factor 5.0, normalised, TRT-LLM numerics.
    pub fn nemotron_super() -> Self {
        RouterConfig {
            top_k: 22,
            n_group: 1,
            topk_group: 1,
            routed_scaling_factor: 5.0,
            norm_topk_prob: true,
            norm_mode: NormMode::Fp64,
            sigmoid: SigmoidMode::Tanh,
            group_mask: GroupMask::NegInf,
        }
    }

    /// Checks the config against `experts` experts.
    pub fn validate(&self, experts: usize) -> Result<(), String> {
        if experts == 0 || experts > 65536 {
            return Err(format!(
                "E = {experts} experts: need 1 <= E <= 65536 (indices are packed in 16 bits)"
            ));
        }
        if self.top_k == 0 || self.top_k > experts {
            return Err(format!(
                "top_k = {} must be in 1..={experts} (the number of experts)",
                self.top_k
            ));
        }
        if self.n_group == 0 || !experts.is_multiple_of(self.n_group) {
            return Err(format!(
                "n_group = {} must divide the number of experts E = {experts}",
                self.n_group
            ));
        }
        if self.topk_group == 0 || self.topk_group > self.n_group {
            return Err(format!(
                "topk_group = {} must be in 1..={} (n_group)",
                self.topk_group, self.n_group
            ));
        }
        let per = experts / self.n_group;
        if self.n_group > 1 && per < 2 {
            return Err(format!(
                "grouped routing needs >= 2 experts per group (group score = sum of the top 2); \
                 E = {experts}, n_group = {} gives {per}",
                self.n_group
            ));
        }
        if self.top_k > self.topk_group * per {
            return Err(format!(
                "top_k = {} exceeds the {} experts of the topk_group = {} kept groups ({per} per group)",
                self.top_k,
                self.topk_group * per,
                self.topk_group
            ));
        }
        if !self.routed_scaling_factor.is_finite() {
            return Err(format!(
                "routed_scaling_factor = {} must be finite",
                self.routed_scaling_factor
            ));
        }
        Ok(())
    }
}

/// Routing result: `topk_indices` / `topk_weights` `[tokens, top_k]` row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    pub topk_indices: Vec<i32>,
    pub topk_weights: Vec<f32>,
    pub tokens: usize,
    pub top_k: usize,
}

/// The sigmoid of `x` in the chosen formula.
pub fn sigmoid(x: f32, mode: SigmoidMode) -> f32 {
    match mode {
        SigmoidMode::Tanh => {
            let t = ((0.5f32 * x) as f64).tanh() as f32;
            0.5f32 * t + 0.5f32
        }
        SigmoidMode::Exp => (1.0 / (1.0 + (-(x as f64)).exp())) as f32,
        SigmoidMode::TanhF32 => crate::num::tanhf::sigmoid_tanh_f32(x),
    }
}

/// The order-preserving map from f32 bits to u32 (unsigned order == float order, `-0 < +0`,
/// positive NaNs above `+inf`, negative NaNs below `-inf`).
pub fn order_bits(x: f32) -> u32 {
    let b = x.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// The packed u64 key: `(order_bits(key) << 16) | (65535 - index)`; `index < 65536`. A NaN key
/// is first canonicalised to `0x7FFF_FFFF` (module doc).
pub fn packed_key(key: f32, index: usize) -> u64 {
    let key = if key.is_nan() {
        f32::from_bits(0x7FFF_FFFF)
    } else {
        key
    };
    ((order_bits(key) as u64) << 16) | (65535 - (index as u64 & 0xFFFF))
}

/// Index from a packed key.
fn unpack_index(p: u64) -> usize {
    65535 - (p & 0xFFFF) as usize
}

/// The `n` largest packed keys, largest first.
fn top_n(mut keys: Vec<u64>, n: usize) -> Vec<u64> {
    keys.sort_unstable_by(|a, b| b.cmp(a));
    keys.truncate(n);
    keys
}

/// Routes `tokens` tokens over `experts` experts.
///
/// - `logits`: `[tokens, experts]` row-major router logits (f32);
/// - `bias`: `[experts]` e_score_correction_bias (f32);
/// - returns indices (i32) and weights (f32), `[tokens, top_k]`, sorted by biased key descending.
pub fn route(
    logits: &[f32],
    bias: &[f32],
    tokens: usize,
    experts: usize,
    cfg: &RouterConfig,
) -> Result<Routing, String> {
    cfg.validate(experts)?;
    if bias.len() != experts {
        return Err(format!(
            "'bias' has {} entries but 'logits' has {experts} experts",
            bias.len()
        ));
    }
    let n = tokens
        .checked_mul(experts)
        .ok_or_else(|| format!("tokens * experts = {tokens} * {experts} overflows"))?;
    if logits.len() != n {
        return Err(format!(
            "'logits' has {} values but tokens * experts = {tokens} * {experts} = {n}",
            logits.len()
        ));
    }
    let k = cfg.top_k;
    let per = experts / cfg.n_group;
    let mut topk_indices = Vec::with_capacity(tokens * k);
    let mut topk_weights = Vec::with_capacity(tokens * k);
    let mut s = vec![0f32; experts];
    let mut key = vec![0f32; experts];
    for t in 0..tokens {
        let row = &logits[t * experts..(t + 1) * experts];
        for e in 0..experts {
            s[e] = sigmoid(row[e], cfg.sigmoid);
            key[e] = s[e] + bias[e];
        }
        let candidates: Vec<u64> = if cfg.n_group == 1 {
            (0..experts).map(|e| packed_key(key[e], e)).collect()
        } else {
            let groups: Vec<u64> = (0..cfg.n_group)
                .map(|g| {
                    let best = top_n(
                        (g * per..(g + 1) * per)
                            .map(|e| packed_key(key[e], e))
                            .collect(),
                        2,
                    );
                    let score = key[unpack_index(best[0])] + key[unpack_index(best[1])];
                    packed_key(score, g)
                })
                .collect();
            let kept: Vec<usize> = top_n(groups, cfg.topk_group)
                .into_iter()
                .map(unpack_index)
                .collect();
            match cfg.group_mask {
                GroupMask::NegInf => kept
                    .iter()
                    .flat_map(|&g| (g * per..(g + 1) * per).map(|e| packed_key(key[e], e)))
                    .collect(),
                GroupMask::Zero => (0..experts)
                    .map(|e| {
                        let k = if kept.contains(&(e / per)) {
                            key[e]
                        } else {
                            0.0
                        };
                        packed_key(k, e)
                    })
                    .collect(),
            }
        };
        let winners: Vec<usize> = top_n(candidates, k).into_iter().map(unpack_index).collect();
        let sum = winners.iter().fold(0f32, |acc, &e| acc + s[e]);
        let r = cfg.routed_scaling_factor;
        for &e in &winners {
            let w = match (cfg.norm_topk_prob, cfg.norm_mode) {
                (true, NormMode::Fp64) => (s[e] as f64 * r / (sum as f64 + 1e-20)) as f32,
                (true, NormMode::Fp32DivideThenMultiply) => (s[e] / (sum + 1e-20f32)) * r as f32,
                (true, NormMode::Fp32NoEps) => (s[e] * r as f32) / sum,
                (false, NormMode::Fp64) => (s[e] as f64 * r) as f32,
                (false, _) => s[e] * r as f32,
            };
            topk_indices.push(e as i32);
            topk_weights.push(w);
        }
    }
    Ok(Routing {
        topk_indices,
        topk_weights,
        tokens,
        top_k: k,
    })
}

pub fn def() -> OpDef {
    OpDef {
        name: "noaux_tc_router",
        summary: "DeepSeek-V3 / Nemotron-H noaux_tc routing: sigmoid + bias, (grouped) top-k, normalised unbiased weights",
        inputs: vec![
            ArgSpec::req("logits", "(T, E)", "f32|bf16|f16", "router logits (upcast to f32)"),
            ArgSpec::req("bias", "(E,)", "f32|bf16|f16", "e_score_correction_bias"),
        ],
        params: vec![
            ParamSpec::new("top_k", ParamKind::Int, None, "experts per token"),
            ParamSpec::new("n_group", ParamKind::Int, Some("1"), "expert groups (E % n_group == 0)"),
            ParamSpec::new("topk_group", ParamKind::Int, Some("1"), "groups kept (<= n_group)"),
            ParamSpec::new(
                "routed_scaling_factor",
                ParamKind::Float,
                Some("1.0"),
                "multiplies the weights",
            ),
            ParamSpec::new(
                "norm_topk_prob",
                ParamKind::Bool,
                Some("true"),
                "normalise the winners' scores to sum to routed_scaling_factor",
            ),
            ParamSpec::new(
                "norm_mode",
                ParamKind::Enum(&["fp64", "fp32_divide_then_multiply", "fp32_no_eps"]),
                Some("fp64"),
                "fp64: TRT-LLM noAuxTc (f64 divide, +1e-20); fp32_divide_then_multiply: transformers \
                 s/(sum+1e-20)*factor; fp32_no_eps: trtllm-gen s*factor/sum",
            ),
            ParamSpec::new(
                "sigmoid",
                ParamKind::Enum(&["tanh", "exp", "tanh_f32"]),
                Some("tanh"),
                "tanh: 0.5*tanh(0.5x)+0.5 (TRT-LLM; tanh correctly rounded via f64); exp: \
                 1/(1+exp(-x)) (torch); tanh_f32: the same with duet_tanhf, an all-f32 tanh \
                 within 1 ulp (reference::num::tanhf; bit-identical on the GPU, no f64)",
            ),
            ParamSpec::new(
                "group_mask",
                ParamKind::Enum(&["neg_inf", "zero"]),
                Some("neg_inf"),
                "grouped routing: experts of dropped groups never win (neg_inf: TRT-LLM, \
                 transformers' NemotronH) or get key 0.0 (zero: transformers' DeepseekV3-style)",
            ),
        ],
        outputs: vec![
            ArgSpec::req("topk_indices", "(T, top_k)", "i32", "experts, by biased key descending, ties to the lowest id"),
            ArgSpec::req("topk_weights", "(T, top_k)", "f32", "weights of the unbiased scores"),
        ],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    const OP: &str = "noaux_tc_router";
    let inp = Inputs::new(OP, inputs);
    let (lt, logits) = inp.float("logits", 2)?;
    inp.dtype("logits", lt, &[DType::F32, DType::BF16, DType::F16])?;
    let (bt, bias) = inp.float("bias", 1)?;
    inp.dtype("bias", bt, &[DType::F32, DType::BF16, DType::F16])?;
    let (tokens, experts) = (lt.shape[0], lt.shape[1]);
    if bt.shape[0] != experts {
        return Err(inp.invalid(format!(
            "'bias' has {} entries but 'logits' has {experts} experts",
            bt.shape[0]
        )));
    }
    let perr = |name: &str, msg: String| OpError::Param {
        op: OP.into(),
        name: name.into(),
        msg,
    };
    let norm_s = p.str("norm_mode")?;
    let sig_s = p.str("sigmoid")?;
    let cfg = RouterConfig {
        top_k: p.usize("top_k")?,
        n_group: p.usize("n_group")?,
        topk_group: p.usize("topk_group")?,
        routed_scaling_factor: p.float("routed_scaling_factor")?,
        norm_topk_prob: p.bool("norm_topk_prob")?,
        norm_mode: NormMode::parse(norm_s).ok_or_else(|| {
            perr(
                "norm_mode",
                format!("'{norm_s}' is not fp64, fp32_divide_then_multiply or fp32_no_eps"),
            )
        })?,
        sigmoid: SigmoidMode::parse(sig_s)
            .ok_or_else(|| perr("sigmoid", format!("'{sig_s}' is not tanh, exp or tanh_f32")))?,
        group_mask: GroupMask::parse(p.str("group_mask")?)
            .ok_or_else(|| perr("group_mask", "must be neg_inf or zero".into()))?,
    };
    let r = route(&logits, &bias, tokens, experts, &cfg).map_err(|e| inp.invalid(e))?;
    let k = cfg.top_k;
    Ok(op::outputs([
        (
            "topk_indices",
            Tensor::from_i32(&[tokens, k], r.topk_indices),
        ),
        (
            "topk_weights",
            Tensor::from_f32(&[tokens, k], r.topk_weights),
        ),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(sig: SigmoidMode, k: usize) -> RouterConfig {
        RouterConfig {
            top_k: k,
            sigmoid: sig,
            ..RouterConfig::nemotron_super()
        }
    }

    #[test]
    fn tanh_f32_mode_parses_and_is_the_f32_sigmoid() {
        assert_eq!(SigmoidMode::parse("tanh_f32"), Some(SigmoidMode::TanhF32));
        assert_eq!(SigmoidMode::parse("tanh"), Some(SigmoidMode::Tanh));
        for x in [
            -30.0f32, -3.5, -0.7, -1e-30, 0.0, 1e-7, 0.3, 1.25, 7.0, 50.0,
        ] {
            assert_eq!(
                sigmoid(x, SigmoidMode::TanhF32).to_bits(),
                crate::num::tanhf::sigmoid_tanh_f32(x).to_bits()
            );
            let d = (sigmoid(x, SigmoidMode::TanhF32) - sigmoid(x, SigmoidMode::Tanh)).abs();
            assert!(d <= 2f32.powi(-24), "{x}: {d:e}");
        }
        assert!(sigmoid(f32::NAN, SigmoidMode::TanhF32).is_nan());
        assert_eq!(sigmoid(f32::INFINITY, SigmoidMode::TanhF32), 1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY, SigmoidMode::TanhF32), 0.0);
        // Subnormal logits: s = 0.5 exactly.
        assert_eq!(sigmoid(f32::from_bits(1), SigmoidMode::TanhF32), 0.5);
        assert_eq!(
            sigmoid(-f32::from_bits(0x7fffff), SigmoidMode::TanhF32),
            0.5
        );
    }

    /// Routing with the f32 sigmoid: winners are the top-k of `sigmoid_tanh_f32(x) + b` (brute
    /// force, ties to the lowest index), weights normalised from those scores; NaN / inf
    /// logits follow the module's NaN policy.
    #[test]
    fn tanh_f32_routing_matches_brute_force() {
        let (t, e, k) = (3usize, 64usize, 6usize);
        let mut logits: Vec<f32> = (0..t * e)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        logits[5] = f32::INFINITY;
        logits[e + 9] = f32::NAN;
        logits[2 * e + 3] = f32::NEG_INFINITY;
        let bias: Vec<f32> = (0..e).map(|i| (i % 5) as f32 * 0.01).collect();
        let c = cfg(SigmoidMode::TanhF32, k);
        let r = route(&logits, &bias, t, e, &c).unwrap();
        for tok in 0..t {
            let row = &logits[tok * e..(tok + 1) * e];
            let s: Vec<f32> = row
                .iter()
                .map(|&x| crate::num::tanhf::sigmoid_tanh_f32(x))
                .collect();
            let mut order: Vec<u64> = (0..e).map(|i| packed_key(s[i] + bias[i], i)).collect();
            order.sort_unstable_by(|a, b| b.cmp(a));
            let want: Vec<i32> = order[..k].iter().map(|&p| unpack_index(p) as i32).collect();
            assert_eq!(
                &r.topk_indices[tok * k..(tok + 1) * k],
                &want[..],
                "token {tok}"
            );
            let sum = want.iter().fold(0f32, |a, &i| a + s[i as usize]);
            for (j, &i) in want.iter().enumerate() {
                let w = (s[i as usize] as f64 * 5.0 / (sum as f64 + 1e-20)) as f32;
                assert_eq!(
                    r.topk_weights[tok * k + j].to_bits(),
                    w.to_bits(),
                    "token {tok} rank {j}"
                );
            }
        }
        // NaN logit: selected first, NaN weights (the +inf one is covered by the brute force).
        assert_eq!(r.topk_indices[k], 9);
        assert!(r.topk_weights[k..2 * k].iter().all(|w| w.is_nan()));
    }

    #[test]
    fn tanh_f32_is_accepted_by_the_op() {
        let def = def();
        let mut m = TensorMap::new();
        m.insert(
            "logits".into(),
            Tensor::from_f32(&[2, 8], (0..16).map(|i| i as f32 * 0.3 - 2.0).collect()),
        );
        m.insert("bias".into(), Tensor::from_f32(&[8], vec![0.0; 8]));
        let set = |v: &str| {
            vec![
                ("top_k".to_string(), "3".to_string()),
                ("sigmoid".to_string(), v.to_string()),
            ]
        };
        let a = def.call(&m, &set("tanh_f32")).unwrap();
        let b = def.call(&m, &set("tanh")).unwrap();
        assert_eq!(a["topk_indices"], b["topk_indices"]);
        let err = def.call(&m, &set("tanh64")).unwrap_err().to_string();
        assert!(err.contains("tanh_f32"), "{err}");
    }
}
