//! The model configuration: Nemotron-H (Nemotron 3 Super architecture) hyper-parameters.
//!
//! Two spellings of the layer pattern are accepted, as they appear on the hub:
//! - hub / Megatron style: `hybrid_override_pattern: "MEM*EM-E"` (`M` Mamba-2, `E` MoE,
//!   `*` attention, `-` MLP) and `mtp_hybrid_override_pattern: "*E"`;
//! - transformers 5.x style: `layers_block_type: ["linear_attention", "moe", "full_attention",
//!   "mlp", ...]` (also `mamba` / `attention`) and `mtp_layers_block_type`.
//!
//! Floats may be written as JSON numbers or as transformers' `{"__float__": "Infinity"}`.

use super::ModelError;
use serde_json::Value;
use std::path::Path;

/// What one layer (block) mixes with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerKind {
    /// Mamba-2 selective state space mixer (`M`).
    Mamba,
    /// GQA causal softmax attention, no positional encoding (`*`).
    Attention,
    /// Dense ReLU² MLP (`-`).
    Mlp,
    /// Latent mixture of experts with a shared expert (`E`).
    Moe,
}

impl LayerKind {
    /// The pattern character (`M`, `*`, `-`, `E`).
    pub fn symbol(self) -> char {
        match self {
            LayerKind::Mamba => 'M',
            LayerKind::Attention => '*',
            LayerKind::Mlp => '-',
            LayerKind::Moe => 'E',
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            LayerKind::Mamba => "mamba",
            LayerKind::Attention => "attention",
            LayerKind::Mlp => "mlp",
            LayerKind::Moe => "moe",
        }
    }
    fn from_symbol(c: char) -> Option<LayerKind> {
        Some(match c {
            'M' => LayerKind::Mamba,
            '*' => LayerKind::Attention,
            '-' => LayerKind::Mlp,
            'E' => LayerKind::Moe,
            _ => return None,
        })
    }
    fn from_type_name(s: &str) -> Option<LayerKind> {
        Some(match s {
            "mamba" | "linear_attention" | "M" => LayerKind::Mamba,
            "attention" | "full_attention" | "*" => LayerKind::Attention,
            "mlp" | "-" => LayerKind::Mlp,
            "moe" | "E" => LayerKind::Moe,
            _ => return None,
        })
    }
}

/// Parses a pattern string such as `MEMEMEM*E` (whitespace and `|` separators ignored).
pub fn parse_pattern(p: &str) -> Result<Vec<LayerKind>, ModelError> {
    p.chars()
        .filter(|c| !c.is_whitespace() && *c != '|')
        .enumerate()
        .map(|(i, c)| {
            LayerKind::from_symbol(c).ok_or_else(|| {
                ModelError::Config(format!(
                    "layer pattern '{p}': character {i} is '{c}'; use M (Mamba-2), E (MoE), * (attention) or - (MLP)"
                ))
            })
        })
        .collect()
}

/// Renders layer kinds as a pattern string.
pub fn pattern_string(kinds: &[LayerKind]) -> String {
    kinds.iter().map(|k| k.symbol()).collect()
}

/// Every hyper-parameter the model uses.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    /// One entry per backbone layer.
    pub layers: Vec<LayerKind>,
    /// The MTP head's blocks (empty: no MTP head).
    pub mtp_layers: Vec<LayerKind>,
    pub layer_norm_epsilon: f32,
    pub tie_word_embeddings: bool,
    // attention
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub attention_bias: bool,
    // Mamba-2
    pub mamba_num_heads: usize,
    pub mamba_head_dim: usize,
    pub n_groups: usize,
    pub ssm_state_size: usize,
    pub conv_kernel: usize,
    pub chunk_size: usize,
    pub use_conv_bias: bool,
    pub use_bias: bool,
    /// Clamp of softplus(dt + dt_bias), `[lo, hi]` (the hub model: `[0, inf]`, no clamp).
    pub time_step_limit: (f32, f32),
    pub time_step_min: f32,
    // MLP
    pub intermediate_size: usize,
    pub mlp_bias: bool,
    // MoE
    pub n_routed_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    /// `None`: experts work on the full hidden size (no latent projections).
    pub moe_latent_size: Option<usize>,
    pub moe_shared_expert_intermediate_size: usize,
    pub n_shared_experts: usize,
    pub routed_scaling_factor: f32,
    pub n_group: usize,
    pub topk_group: usize,
    pub norm_topk_prob: bool,
}

fn float_of(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => parse_float_str(s),
        Value::Object(o) => o.get("__float__").and_then(|x| match x {
            Value::String(s) => parse_float_str(s),
            Value::Number(n) => n.as_f64(),
            _ => None,
        }),
        _ => None,
    }
}

/// `x` as the f32 the model computes with; a finite value that overflows f32 or a non-zero
/// value that underflows to 0 is an error (NaN and +-inf pass: `Config::validate` judges them).
fn narrow_f32(x: f64) -> Result<f32, String> {
    let f = x as f32;
    if x.is_finite() && !f.is_finite() {
        return Err(format!(
            "is {}, beyond the f32 range (|x| <= {:e}); fix it in config.json",
            short(x),
            f32::MAX
        ));
    }
    if x != 0.0 && f == 0.0 {
        return Err(format!(
            "is {}, which rounds to 0 in f32 (the model computes in f32); fix it in config.json",
            short(x)
        ));
    }
    Ok(f)
}

/// `x` in scientific notation with at most 15 significant digits, as a config writes it (JSON
/// parsing may land one ulp off: `1e-50` reads back as `9.999999999999999e-51`).
fn short(x: f64) -> String {
    let s = format!("{x:.14e}");
    match s.split_once('e') {
        Some((m, e)) => format!("{}e{e}", m.trim_end_matches('0').trim_end_matches('.')),
        None => s,
    }
}

fn parse_float_str(s: &str) -> Option<f64> {
    match s.trim().to_ascii_lowercase().as_str() {
        "infinity" | "inf" | "+inf" | "+infinity" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        t => t.parse().ok(),
    }
}

struct Reader<'a> {
    obj: &'a serde_json::Map<String, Value>,
    origin: String,
}

impl Reader<'_> {
    fn err(&self, key: &str, msg: impl std::fmt::Display) -> ModelError {
        ModelError::Config(format!("{}: '{key}' {msg}", self.origin))
    }
    fn has(&self, key: &str) -> bool {
        self.obj.get(key).is_some_and(|v| !v.is_null())
    }
    fn usize(&self, key: &str) -> Result<usize, ModelError> {
        let v = self
            .obj
            .get(key)
            .filter(|v| !v.is_null())
            .ok_or_else(|| self.err(key, "is missing; add it to config.json"))?;
        v.as_u64()
            .and_then(|x| usize::try_from(x).ok())
            .ok_or_else(|| self.err(key, format!("must be a non-negative integer, found {v}")))
    }
    fn usize_or(&self, key: &str, d: usize) -> Result<usize, ModelError> {
        if self.has(key) {
            self.usize(key)
        } else {
            Ok(d)
        }
    }
    fn opt_usize(&self, key: &str) -> Result<Option<usize>, ModelError> {
        if self.has(key) {
            self.usize(key).map(Some)
        } else {
            Ok(None)
        }
    }
    fn f32_or(&self, key: &str, d: f32) -> Result<f32, ModelError> {
        match self.obj.get(key).filter(|v| !v.is_null()) {
            None => Ok(d),
            Some(v) => {
                let x = float_of(v)
                    .ok_or_else(|| self.err(key, format!("must be a number, found {v}")))?;
                narrow_f32(x).map_err(|m| self.err(key, m))
            }
        }
    }
    fn bool_or(&self, key: &str, d: bool) -> Result<bool, ModelError> {
        match self.obj.get(key).filter(|v| !v.is_null()) {
            None => Ok(d),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.err(key, format!("must be true or false, found {v}"))),
        }
    }
    fn str_or<'b>(&'b self, key: &str, d: &'b str) -> Result<&'b str, ModelError> {
        match self.obj.get(key).filter(|v| !v.is_null()) {
            None => Ok(d),
            Some(v) => v
                .as_str()
                .ok_or_else(|| self.err(key, format!("must be a string, found {v}"))),
        }
    }
    /// A pattern given either as a string (`pat_key`) or a list of type names (`list_key`).
    fn kinds(&self, pat_key: &str, list_key: &str) -> Result<Option<Vec<LayerKind>>, ModelError> {
        if let Some(list) = self.obj.get(list_key).filter(|v| !v.is_null()) {
            let arr = list
                .as_array()
                .ok_or_else(|| self.err(list_key, "must be a list of layer type names"))?;
            let mut out = Vec::with_capacity(arr.len());
            for (i, v) in arr.iter().enumerate() {
                let s = v.as_str().unwrap_or_default();
                out.push(LayerKind::from_type_name(s).ok_or_else(|| {
                    self.err(
                        list_key,
                        format!("entry {i} is {v}; use mamba|linear_attention, attention|full_attention, moe or mlp"),
                    )
                })?);
            }
            return Ok(Some(out));
        }
        if let Some(v) = self.obj.get(pat_key).filter(|v| !v.is_null()) {
            let s = v
                .as_str()
                .ok_or_else(|| self.err(pat_key, "must be a pattern string like \"MEM*E\""))?;
            return parse_pattern(s)
                .map(Some)
                .map_err(|e| self.err(pat_key, e.to_string()));
        }
        Ok(None)
    }
}

impl Config {
    /// The noaux_tc router of this model's MoE layers (top-k, groups, normalisation,
    /// routed_scaling_factor; the reference's numerics).
    pub fn router_config(&self) -> crate::ops::noaux_tc_router::RouterConfig {
        super::kernels::router_config(
            self.num_experts_per_tok,
            self.n_group,
            self.topk_group,
            self.norm_topk_prob,
            self.routed_scaling_factor,
        )
    }
    /// Reads `config.json` (either style).
    pub fn from_file(path: &Path) -> Result<Config, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ModelError::Config(format!(
                "{}: cannot read ({e}); a model directory needs config.json",
                path.display()
            ))
        })?;
        Config::from_json_str(&text, &path.display().to_string())
    }

    /// Parses a config from JSON text; `origin` names it in errors.
    pub fn from_json_str(text: &str, origin: &str) -> Result<Config, ModelError> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| ModelError::Config(format!("{origin}: not valid JSON ({e})")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| ModelError::Config(format!("{origin}: expected a JSON object")))?;
        // Generator specs wrap the config: {"seed":.., "config": {...}}.
        let obj = match obj.get("config").and_then(|c| c.as_object()) {
            Some(inner) if !obj.contains_key("hidden_size") => inner,
            _ => obj,
        };
        let r = Reader {
            obj,
            origin: origin.to_string(),
        };
        let layers = r
            .kinds("hybrid_override_pattern", "layers_block_type")?
            .ok_or_else(|| {
                ModelError::Config(format!(
                    "{origin}: no layer pattern; give 'hybrid_override_pattern' (e.g. \"MEM*E\") or 'layers_block_type' (list)"
                ))
            })?;
        if let Some(n) = r.opt_usize("num_hidden_layers")? {
            if n != layers.len() && !r.has("layers_block_type") {
                return Err(r.err(
                    "num_hidden_layers",
                    format!(
                        "is {n} but the layer pattern has {} layers; make them agree",
                        layers.len()
                    ),
                ));
            }
        }
        let n_mtp = r.usize_or("num_nextn_predict_layers", 0)?;
        let mut mtp_layers = r
            .kinds("mtp_hybrid_override_pattern", "mtp_layers_block_type")?
            .unwrap_or_default();
        if n_mtp == 0 {
            mtp_layers.clear();
        }
        let hidden_size = r.usize("hidden_size")?;
        let num_attention_heads = r.usize_or("num_attention_heads", 1)?;
        let head_dim = match r.opt_usize("head_dim")? {
            Some(h) => h,
            None => hidden_size / num_attention_heads.max(1),
        };
        let tsl = match obj.get("time_step_limit").filter(|v| !v.is_null()) {
            None => (0.0, f32::INFINITY),
            Some(v) => {
                let a = v
                    .as_array()
                    .filter(|a| a.len() == 2)
                    .ok_or_else(|| r.err("time_step_limit", "must be a [min, max] pair"))?;
                let lo = float_of(&a[0])
                    .ok_or_else(|| r.err("time_step_limit", "min is not a number"))?;
                let hi = float_of(&a[1])
                    .ok_or_else(|| r.err("time_step_limit", "max is not a number"))?;
                let n = |x: f64, which: &str| {
                    narrow_f32(x).map_err(|m| r.err("time_step_limit", format!("{which} {m}")))
                };
                (n(lo, "min")?, n(hi, "max")?)
            }
        };
        for (key, want) in [("mamba_hidden_act", "silu"), ("mlp_hidden_act", "relu2")] {
            let got = r.str_or(key, want)?;
            if got != want {
                return Err(r.err(
                    key,
                    format!("is '{got}'; duet's Nemotron-H model supports only '{want}'"),
                ));
            }
        }
        let c = Config {
            vocab_size: r.usize("vocab_size")?,
            hidden_size,
            layers,
            mtp_layers,
            layer_norm_epsilon: r.f32_or("layer_norm_epsilon", 1e-5)?,
            tie_word_embeddings: r.bool_or("tie_word_embeddings", false)?,
            num_attention_heads,
            num_key_value_heads: r.usize_or("num_key_value_heads", num_attention_heads)?,
            head_dim,
            attention_bias: r.bool_or("attention_bias", false)?,
            mamba_num_heads: r.usize_or("mamba_num_heads", 1)?,
            mamba_head_dim: r.usize_or("mamba_head_dim", 1)?,
            n_groups: r.usize_or("n_groups", 1)?,
            ssm_state_size: r.usize_or("ssm_state_size", 1)?,
            conv_kernel: r.usize_or("conv_kernel", 4)?,
            chunk_size: r.usize_or("chunk_size", 128)?,
            use_conv_bias: r.bool_or("use_conv_bias", true)?,
            use_bias: r.bool_or("use_bias", false)?,
            time_step_limit: tsl,
            time_step_min: r.f32_or("time_step_min", 0.001)?,
            intermediate_size: r.usize_or("intermediate_size", 1)?,
            mlp_bias: r.bool_or("mlp_bias", false)?,
            n_routed_experts: r.usize_or("n_routed_experts", 1)?,
            num_experts_per_tok: r.usize_or("num_experts_per_tok", 1)?,
            moe_intermediate_size: r.usize_or("moe_intermediate_size", 1)?,
            moe_latent_size: r.opt_usize("moe_latent_size")?,
            moe_shared_expert_intermediate_size: r
                .usize_or("moe_shared_expert_intermediate_size", 1)?,
            n_shared_experts: r.usize_or("n_shared_experts", 1)?,
            routed_scaling_factor: r.f32_or("routed_scaling_factor", 1.0)?,
            n_group: r.usize_or("n_group", 1)?,
            topk_group: r.usize_or("topk_group", 1)?,
            norm_topk_prob: r.bool_or("norm_topk_prob", true)?,
        };
        c.validate(origin)?;
        Ok(c)
    }

    /// Checks the rules the model relies on: bounded sizes, divisibility, and every float field
    /// finite and in its valid range. Errors name `origin`, the field, its value and the fix.
    pub fn validate(&self, origin: &str) -> Result<(), ModelError> {
        let e = |m: String| Err(ModelError::Config(format!("{origin}: {m}")));
        let uses = |k: LayerKind| self.layers.contains(&k) || self.mtp_layers.contains(&k);
        // Bound every size so products of two of them (weight shapes) cannot overflow.
        const MAX_DIM: usize = 1 << 24;
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("mamba_num_heads", self.mamba_num_heads),
            ("mamba_head_dim", self.mamba_head_dim),
            ("n_groups", self.n_groups),
            ("ssm_state_size", self.ssm_state_size),
            ("conv_kernel", self.conv_kernel),
            ("chunk_size", self.chunk_size),
            ("intermediate_size", self.intermediate_size),
            ("n_routed_experts", self.n_routed_experts),
            ("num_experts_per_tok", self.num_experts_per_tok),
            ("moe_intermediate_size", self.moe_intermediate_size),
            ("moe_latent_size", self.moe_latent_size.unwrap_or(1)),
            (
                "moe_shared_expert_intermediate_size",
                self.moe_shared_expert_intermediate_size,
            ),
            ("n_shared_experts", self.n_shared_experts),
            ("n_group", self.n_group),
            ("topk_group", self.topk_group),
            ("layers", self.layers.len()),
            ("mtp layers", self.mtp_layers.len()),
        ] {
            if v > MAX_DIM {
                return e(format!(
                    "{name} = {v} is larger than {MAX_DIM}; check config.json"
                ));
            }
        }
        if self.layers.is_empty() {
            return e("the layer pattern is empty; give at least one layer".into());
        }
        // Every float field: finite and in its valid range (only the time-step limit's max may
        // be +inf, "no upper clamp"). A bad value would otherwise run to NaN outputs (eps) or
        // fail later in an op without naming config.json (the router's scaling factor).
        for (name, v, what) in [
            (
                "layer_norm_epsilon",
                self.layer_norm_epsilon,
                "the RMSNorm epsilon; the hub checkpoints use 1e-5",
            ),
            (
                "routed_scaling_factor",
                self.routed_scaling_factor,
                "the scale of the routed experts' weights; Nemotron 3 Super uses 5.0",
            ),
            (
                "time_step_min",
                self.time_step_min,
                "the smallest dt of the dt initialisation; the hub checkpoints use 0.001",
            ),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return e(format!(
                    "{name} = {v} must be a finite number > 0 ({what}); fix it in config.json"
                ));
            }
        }
        let (lo, hi) = self.time_step_limit;
        if !(lo.is_finite() && lo >= 0.0 && hi > 0.0 && lo <= hi) {
            return e(format!(
                "time_step_limit = [{lo}, {hi}] must be [min, max] with min finite and >= 0, max > 0 \
                 and min <= max (the clamp of dt; max may be Infinity for no upper clamp, the hub \
                 value is [0.0, Infinity]); fix it in config.json"
            ));
        }
        if self.hidden_size == 0 || self.vocab_size == 0 {
            return e("hidden_size and vocab_size must be positive".into());
        }
        if uses(LayerKind::Attention) && self.head_dim == 0 {
            return e("head_dim must be positive".into());
        }
        if uses(LayerKind::Attention)
            && (self.num_key_value_heads == 0
                || !self
                    .num_attention_heads
                    .is_multiple_of(self.num_key_value_heads))
        {
            return e(format!(
                "num_attention_heads {} must be a multiple of num_key_value_heads {}",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if uses(LayerKind::Mamba) {
            if self.mamba_head_dim == 0 || self.ssm_state_size == 0 || self.chunk_size == 0 {
                return e("mamba_head_dim, ssm_state_size and chunk_size must be positive".into());
            }
            if self.n_groups == 0 || !self.mamba_num_heads.is_multiple_of(self.n_groups) {
                return e(format!(
                    "mamba_num_heads {} must be a multiple of n_groups {}",
                    self.mamba_num_heads, self.n_groups
                ));
            }
            if self.conv_kernel < 2 {
                return e(format!(
                    "conv_kernel {} must be at least 2",
                    self.conv_kernel
                ));
            }
        }
        if uses(LayerKind::Moe) {
            if self.num_experts_per_tok == 0 || self.num_experts_per_tok > self.n_routed_experts {
                return e(format!(
                    "num_experts_per_tok {} must be in 1..=n_routed_experts {}",
                    self.num_experts_per_tok, self.n_routed_experts
                ));
            }
            if self.n_group == 0
                || !self.n_routed_experts.is_multiple_of(self.n_group)
                || self.topk_group == 0
                || self.topk_group > self.n_group
            {
                return e(format!(
                    "n_group {} / topk_group {} do not divide n_routed_experts {}",
                    self.n_group, self.topk_group, self.n_routed_experts
                ));
            }
        }
        Ok(())
    }

    /// d_inner of the Mamba mixer (heads x head_dim).
    pub fn d_inner(&self) -> usize {
        self.mamba_num_heads * self.mamba_head_dim
    }
    /// Channels through the causal conv: x, B and C.
    pub fn conv_dim(&self) -> usize {
        self.d_inner() + 2 * self.n_groups * self.ssm_state_size
    }
    /// Rows of in_proj: z, xBC and dt.
    pub fn in_proj_dim(&self) -> usize {
        self.d_inner() + self.conv_dim() + self.mamba_num_heads
    }
    /// Width the routed experts work in.
    pub fn moe_width(&self) -> usize {
        self.moe_latent_size.unwrap_or(self.hidden_size)
    }
    pub fn pattern(&self) -> String {
        pattern_string(&self.layers)
    }
    pub fn mtp_pattern(&self) -> String {
        pattern_string(&self.mtp_layers)
    }

    /// The `tiny` preset: the dimensions of the `nemotron-tiny-a` fixture.
    pub fn tiny() -> Config {
        Config {
            vocab_size: 512,
            hidden_size: 256,
            layers: parse_pattern("MEM*EM-E").unwrap_or_default(),
            mtp_layers: vec![LayerKind::Attention, LayerKind::Moe],
            layer_norm_epsilon: 1e-5,
            tie_word_embeddings: false,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 32,
            attention_bias: false,
            mamba_num_heads: 16,
            mamba_head_dim: 32,
            n_groups: 4,
            ssm_state_size: 32,
            conv_kernel: 4,
            chunk_size: 16,
            use_conv_bias: true,
            use_bias: false,
            time_step_limit: (0.0, f32::INFINITY),
            time_step_min: 0.001,
            intermediate_size: 384,
            mlp_bias: false,
            n_routed_experts: 16,
            num_experts_per_tok: 4,
            moe_intermediate_size: 128,
            moe_latent_size: Some(64),
            moe_shared_expert_intermediate_size: 192,
            n_shared_experts: 1,
            routed_scaling_factor: 5.0,
            n_group: 1,
            topk_group: 1,
            norm_topk_prob: true,
        }
    }

    /// The `super` preset: Nemotron 3 Super dimensions (SPEC.md), full 88-layer pattern.
    pub fn super_() -> Config {
        let unit = "MEMEMEM*E";
        // SPEC.md gives the counts (88 layers: 40 M, 40 E, 8 *) and the start of the pattern
        // (`MEMEMEM*EMEMEMEM*...`); this preset uses eight groups of `MEMEMEM*E` + `ME`, which
        // has those counts. Pass the checkpoint's own pattern (--pattern) where order matters.
        let mut p = String::new();
        for _ in 0..8 {
            p.push_str(unit);
            p.push_str("ME");
        }
        Config {
            vocab_size: 131072,
            hidden_size: 4096,
            layers: parse_pattern(&p).unwrap_or_default(),
            mtp_layers: vec![LayerKind::Attention, LayerKind::Moe],
            layer_norm_epsilon: 1e-5,
            tie_word_embeddings: false,
            num_attention_heads: 32,
            num_key_value_heads: 2,
            head_dim: 128,
            attention_bias: false,
            mamba_num_heads: 128,
            mamba_head_dim: 64,
            n_groups: 8,
            ssm_state_size: 128,
            conv_kernel: 4,
            chunk_size: 128,
            use_conv_bias: true,
            use_bias: false,
            time_step_limit: (0.0, f32::INFINITY),
            time_step_min: 0.001,
            intermediate_size: 5376,
            mlp_bias: false,
            n_routed_experts: 512,
            num_experts_per_tok: 22,
            moe_intermediate_size: 2688,
            moe_latent_size: Some(1024),
            moe_shared_expert_intermediate_size: 5376,
            n_shared_experts: 1,
            routed_scaling_factor: 5.0,
            n_group: 1,
            topk_group: 1,
            norm_topk_prob: true,
        }
    }
}

#[cfg(test)]
mod float_field_tests {
    use super::*;

    fn check(c: &Config) -> Result<(), String> {
        c.validate("m/config.json").map_err(|e| e.to_string())
    }

    #[test]
    fn every_float_field_must_be_finite_and_in_range() {
        type Set = fn(&mut Config, f32);
        let fields: [(&str, Set); 3] = [
            ("layer_norm_epsilon", |c, v| c.layer_norm_epsilon = v),
            ("routed_scaling_factor", |c, v| c.routed_scaling_factor = v),
            ("time_step_min", |c, v| c.time_step_min = v),
        ];
        for (name, set) in fields {
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -1.0] {
                let mut c = Config::tiny();
                set(&mut c, bad);
                let err = check(&c).expect_err(&format!("{name} = {bad} accepted"));
                for needle in [
                    "m/config.json",
                    name,
                    &format!("= {bad}"),
                    "fix it in config.json",
                ] {
                    assert!(err.contains(needle), "{name} = {bad}: {err}");
                }
            }
            for good in [1e-6f32, 0.001, 1.0, 5.0] {
                let mut c = Config::tiny();
                set(&mut c, good);
                assert_eq!(check(&c), Ok(()), "{name} = {good}");
            }
        }
        let inf = f32::INFINITY;
        for bad in [
            (f32::NAN, inf),
            (0.0, f32::NAN),
            (f32::NEG_INFINITY, inf),
            (-1.0, 0.1),
            (0.5, 0.1),
            (0.0, 0.0),
            (inf, inf),
        ] {
            let mut c = Config::tiny();
            c.time_step_limit = bad;
            let err = check(&c).expect_err(&format!("time_step_limit {bad:?} accepted"));
            assert!(
                err.contains("time_step_limit = [") && err.contains("config.json"),
                "{err}"
            );
        }
        for good in [(0.0, inf), (0.0, 0.1), (0.001, 1e30), (0.1, 0.1)] {
            let mut c = Config::tiny();
            c.time_step_limit = good;
            assert_eq!(check(&c), Ok(()), "time_step_limit {good:?}");
        }
    }

    #[test]
    fn floats_outside_f32_are_named_not_rounded() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fixtures/models/nemotron-tiny-a/config.json"
        );
        let base: Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
        let with = |k: &str, v: Value| {
            let mut c = base.clone();
            c[k] = v;
            Config::from_json_str(&c.to_string(), "m/config.json").map_err(|e| e.to_string())
        };
        assert!(with("layer_norm_epsilon", serde_json::json!(1e-5)).is_ok());
        for (k, v, needle) in [
            ("layer_norm_epsilon", serde_json::json!(1e-50), "1e-50"),
            ("routed_scaling_factor", serde_json::json!(1e300), "1e300"),
            ("time_step_min", serde_json::json!(-1e39), "-1e39"),
            (
                "time_step_limit",
                serde_json::json!([0.0, 1e39]),
                "max is 1e39",
            ),
        ] {
            let err = with(k, v).expect_err(k);
            for n in ["m/config.json", k, needle, "f32"] {
                assert!(err.contains(n), "{k}: {err}");
            }
        }
        // The hub's spelling of "no upper clamp".
        let hub = with(
            "time_step_limit",
            serde_json::json!([0.0, {"__float__": "Infinity"}]),
        )
        .expect("hub time_step_limit");
        assert_eq!(hub.time_step_limit, (0.0, f32::INFINITY));
    }
}
