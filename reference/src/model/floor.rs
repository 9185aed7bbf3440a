//! The HBM floor of one batch-1 decode step: the bytes the step must move between HBM and the
//! chip, whatever the kernels. Divided by the device's copy ceiling (bytes/s) it is the time
//! no implementation can beat; `duet e2e --bench-decode` reports measured / floor.
//!
//! Counted per backbone layer (the MTP head is not part of a plain decode step; activations,
//! O(hidden) values that stay in cache, are not counted):
//! - every block: its pre-norm weight;
//! - Mamba-2: in_proj (+ bias), conv1d weight (+ bias), A_log / D / dt_bias, the gated-norm
//!   weight, out_proj (+ bias); the SSM state read and written; the conv state read and
//!   written;
//! - attention: q / k / v / o projections (+ biases); the KV cache read at `context_len`
//!   positions (the tokens cached before this one) and the new token's K and V written;
//! - MoE: the router weight (fp32, the full `n_routed_experts x hidden`) and its correction
//!   bias (fp32), the latent fc1 / fc2 projections, the `num_experts_per_tok` routed experts
//!   only (up and down, in the experts' storage format), the shared expert;
//! - MLP: up and down (+ biases);
//! - the embedding row of the token, the final norm, lm_head (the full `vocab x hidden`,
//!   also when tied to the embeddings).
//!
//! Two sets of dtype assumptions ([`Dtypes`]), both reported by [`decode_step_bytes`]:
//! - [`Dtypes::AS_LOADED`]: every weight and cache f32, routed experts included (the GPU path
//!   today holds even NVFP4 experts as their dequantized f32 values);
//! - [`Dtypes::production`]: the Nemotron 3 Super deployment: bf16 weights, KV cache and conv
//!   state; fp32 router, A_log / D / dt_bias and SSM state (`mamba_ssm_cache_dtype`
//!   float32); routed experts in the given [`ExpertFormat`] (NVFP4: 0.5 byte per element,
//!   one E4M3 scale byte per 16 elements along a row, one fp32 global scale per matrix).

use super::config::{Config, LayerKind};
use super::nemotron::ExpertFormat;

/// Bytes per element of the tensors of a decode step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dtypes {
    /// Dense weights: projections, shared expert, MLP, norms, embeddings, lm_head.
    pub weights: u64,
    /// The routed experts' storage format.
    pub experts: ExpertFormat,
    /// Router weight and correction bias (fp32 in every deployment).
    pub router: u64,
    /// A_log (A), D, dt_bias.
    pub ssm_params: u64,
    /// SSM state.
    pub ssm_state: u64,
    /// Conv state.
    pub conv_state: u64,
    /// KV cache.
    pub kv: u64,
}

impl Dtypes {
    /// Everything f32 (the GPU path today).
    pub const AS_LOADED: Dtypes = Dtypes {
        weights: 4,
        experts: ExpertFormat::F32,
        router: 4,
        ssm_params: 4,
        ssm_state: 4,
        conv_state: 4,
        kv: 4,
    };

    /// The Super deployment with routed experts in `experts` (module doc).
    pub fn production(experts: ExpertFormat) -> Dtypes {
        Dtypes {
            weights: 2,
            experts,
            router: 4,
            ssm_params: 4,
            ssm_state: 4,
            conv_state: 2,
            kv: 2,
        }
    }
}

/// Bytes of one `rows x cols` weight matrix in an expert format.
pub fn matrix_bytes(rows: usize, cols: usize, format: ExpertFormat) -> u64 {
    let (r, c) = (rows as u64, cols as u64);
    match format {
        ExpertFormat::F32 => 4 * r * c,
        ExpertFormat::Bf16 => 2 * r * c,
        // 4-bit codes (two per byte), one E4M3 scale per 16 elements of a row, fp32 global.
        ExpertFormat::Nvfp4 => (r * c).div_ceil(2) + r * c.div_ceil(16) + 4,
    }
}

/// The bytes of one decode step, by part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepBytes {
    /// Mamba-2 weights (in_proj, conv, A/D/dt_bias, gated norm, out_proj).
    pub mamba_weights: u64,
    /// SSM and conv states, read and written.
    pub mamba_state: u64,
    /// Attention projections.
    pub attention_weights: u64,
    /// KV cache read (`context_len` positions) and the new row written.
    pub kv_cache: u64,
    /// Router weight + correction bias.
    pub moe_router: u64,
    /// fc1 / fc2 latent projections.
    pub moe_latent: u64,
    /// The top-k routed experts.
    pub moe_experts: u64,
    /// Shared experts.
    pub moe_shared: u64,
    /// Dense MLP layers.
    pub mlp: u64,
    /// Pre-norm weights of every block and the final norm.
    pub norms: u64,
    /// One embedding row.
    pub embedding: u64,
    pub lm_head: u64,
}

impl StepBytes {
    pub fn total(&self) -> u64 {
        self.mamba_weights
            + self.mamba_state
            + self.attention_weights
            + self.kv_cache
            + self.moe_router
            + self.moe_latent
            + self.moe_experts
            + self.moe_shared
            + self.mlp
            + self.norms
            + self.embedding
            + self.lm_head
    }

    /// The floor in microseconds at a copy ceiling of `bytes_per_s`.
    pub fn floor_us(&self, bytes_per_s: f64) -> f64 {
        self.total() as f64 / bytes_per_s.max(1.0) * 1e6
    }
}

/// The bytes of one batch-1 decode step under both dtype assumptions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeBytes {
    /// [`Dtypes::AS_LOADED`]: what the GPU path reads today.
    pub as_loaded: StepBytes,
    /// [`Dtypes::production`] with the given expert format: the Super deployment target.
    pub production: StepBytes,
    /// Positions in the KV cache before the step.
    pub context_len: usize,
}

/// Bytes one batch-1 decode step with `context_len` cached positions reads and writes
/// (module doc), with the dtypes `d`.
pub fn step_bytes(cfg: &Config, d: Dtypes, context_len: usize) -> StepBytes {
    let u = |x: usize| x as u64;
    let (h, wb) = (u(cfg.hidden_size), d.weights);
    let mut s = StepBytes {
        embedding: h * wb,
        norms: h * wb,
        lm_head: u(cfg.vocab_size) * h * wb,
        ..StepBytes::default()
    };
    let mlp = |inter: usize, bias: bool| {
        let i = u(inter);
        2 * i * h * wb + if bias { (i + h) * wb } else { 0 }
    };
    for &kind in &cfg.layers {
        s.norms += h * wb;
        match kind {
            LayerKind::Mamba => {
                let (nh, di, cd, pd, k) = (
                    u(cfg.mamba_num_heads),
                    u(cfg.d_inner()),
                    u(cfg.conv_dim()),
                    u(cfg.in_proj_dim()),
                    u(cfg.conv_kernel),
                );
                let mut w = pd * h * wb + cd * k * wb + di * wb + h * di * wb;
                if cfg.use_bias {
                    w += (pd + h) * wb;
                }
                if cfg.use_conv_bias {
                    w += cd * wb;
                }
                w += 3 * nh * d.ssm_params;
                s.mamba_weights += w;
                let ssm = nh * u(cfg.mamba_head_dim) * u(cfg.ssm_state_size) * d.ssm_state;
                let conv = cd * k.saturating_sub(1) * d.conv_state;
                s.mamba_state += 2 * ssm + 2 * conv;
            }
            LayerKind::Attention => {
                let (qd, kvd) = (
                    u(cfg.num_attention_heads * cfg.head_dim),
                    u(cfg.num_key_value_heads * cfg.head_dim),
                );
                let mut w = (2 * qd * h + 2 * kvd * h) * wb;
                if cfg.attention_bias {
                    w += (qd + 2 * kvd + h) * wb;
                }
                s.attention_weights += w;
                s.kv_cache += 2 * kvd * (u(context_len) + 1) * d.kv;
            }
            LayerKind::Mlp => s.mlp += mlp(cfg.intermediate_size, cfg.mlp_bias),
            LayerKind::Moe => {
                let e = u(cfg.n_routed_experts);
                s.moe_router += (e * h + e) * d.router;
                if let Some(l) = cfg.moe_latent_size {
                    s.moe_latent += 2 * u(l) * h * wb;
                }
                let (l, i) = (cfg.moe_width(), cfg.moe_intermediate_size);
                s.moe_experts += u(cfg.num_experts_per_tok)
                    * (matrix_bytes(i, l, d.experts) + matrix_bytes(l, i, d.experts));
                if cfg.n_shared_experts > 0 {
                    s.moe_shared += mlp(
                        cfg.moe_shared_expert_intermediate_size * cfg.n_shared_experts,
                        cfg.mlp_bias,
                    );
                }
            }
        }
    }
    s
}

/// [`step_bytes`] under both assumptions: [`Dtypes::AS_LOADED`] and
/// [`Dtypes::production`]`(experts)`.
pub fn decode_step_bytes(cfg: &Config, experts: ExpertFormat, context_len: usize) -> DecodeBytes {
    DecodeBytes {
        as_loaded: step_bytes(cfg, Dtypes::AS_LOADED, context_len),
        production: step_bytes(cfg, Dtypes::production(experts), context_len),
        context_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn tiny_a() -> Config {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/models/nemotron-tiny-a/config.json");
        Config::from_file(&p).expect("tiny-a config")
    }

    /// Hand count for fixtures/models/nemotron-tiny-a/config.json: hidden 256, vocab 512,
    /// layers M E M * E M - E; Mamba 16 heads x 32, 4 groups x 32 state (d_inner 512,
    /// conv_dim 512 + 2*4*32 = 768, in_proj 512 + 768 + 16 = 1296), conv 4 with bias, no
    /// proj bias; attention 4 q / 2 kv heads of 32; MLP 384; MoE 16 experts, top 4,
    /// expert 128 x latent 64, shared 192, router f32.
    #[test]
    fn tiny_a_bytes_by_hand() {
        let cfg = tiny_a();
        let ctx = 10usize;
        // Elements.
        let mamba_w = 1296 * 256 + 768 * 4 + 768 + 512 + 256 * 512; // + A/D/dt_bias (3*16, own dtype)
        let mamba_ssm = 16 * 32 * 32;
        let mamba_conv = 768 * 3;
        let attn_w = 128 * 256 + 64 * 256 + 64 * 256 + 256 * 128;
        let kv_rows = 2 * 64 * (ctx + 1);
        let router = 16 * 256 + 16;
        let latent = 64 * 256 + 256 * 64;
        let experts = 4 * (128 * 64 + 64 * 128);
        let shared = 192 * 256 * 2;
        let mlp = 384 * 256 * 2;
        let norms = 8 * 256 + 256;
        let (emb, head) = (256, 512 * 256);

        let b = decode_step_bytes(&cfg, ExpertFormat::Nvfp4, ctx);
        let f = b.as_loaded;
        assert_eq!(f.mamba_weights, 3 * (4 * mamba_w + 4 * 48) as u64);
        assert_eq!(f.mamba_state, 3 * 2 * 4 * (mamba_ssm + mamba_conv) as u64);
        assert_eq!(f.attention_weights, 4 * attn_w as u64);
        assert_eq!(f.kv_cache, 4 * kv_rows as u64);
        assert_eq!(f.moe_router, 3 * 4 * router as u64);
        assert_eq!(f.moe_latent, 3 * 4 * latent as u64);
        assert_eq!(f.moe_experts, 3 * 4 * experts as u64);
        assert_eq!(f.moe_shared, 3 * 4 * shared as u64);
        assert_eq!(f.mlp, 4 * mlp as u64);
        assert_eq!(f.norms, 4 * norms as u64);
        let all_f32 = 4
            * (3 * (mamba_w + 48 + 2 * (mamba_ssm + mamba_conv))
                + attn_w
                + kv_rows
                + 3 * (router + latent + experts + shared)
                + mlp
                + norms
                + emb
                + head) as u64;
        assert_eq!(f.total(), all_f32);
        assert_eq!(f.total(), 10_183_936);

        // Production: bf16 weights / KV / conv state, f32 router / SSM params / SSM state,
        // NVFP4 experts: a 128 x 64 matrix is 4096 + 128*4 + 4 = 4612 bytes.
        let p = b.production;
        assert_eq!(matrix_bytes(128, 64, ExpertFormat::Nvfp4), 4612);
        assert_eq!(matrix_bytes(64, 128, ExpertFormat::Nvfp4), 4612);
        assert_eq!(p.moe_experts, 3 * 4 * 2 * 4612);
        assert_eq!(p.moe_router, 3 * 4 * router as u64);
        assert_eq!(p.mamba_weights, 3 * (2 * mamba_w + 4 * 48) as u64);
        assert_eq!(
            p.mamba_state,
            3 * 2 * (4 * mamba_ssm + 2 * mamba_conv) as u64
        );
        assert_eq!(p.kv_cache, 2 * kv_rows as u64);
        let prod = 2 * (3 * mamba_w + attn_w + kv_rows + 3 * (latent + shared) + mlp)
            + 3 * 4 * 48
            + 3 * 2 * (4 * mamba_ssm + 2 * mamba_conv)
            + 3 * 4 * router
            + 3 * 4 * 2 * 4612
            + 2 * (norms + emb + head);
        assert_eq!(p.total(), prod as u64);

        // The KV read grows with the context; only attention layers see it.
        let b2 = decode_step_bytes(&cfg, ExpertFormat::Nvfp4, ctx + 100);
        assert_eq!(
            b2.as_loaded.total() - f.total(),
            100 * 2 * 64 * 4,
            "one attention layer, 2 kv heads x 32, K and V, f32"
        );
        // bf16 experts: 2 bytes per element.
        let bb = decode_step_bytes(&cfg, ExpertFormat::Bf16, ctx).production;
        assert_eq!(bb.moe_experts, 3 * 2 * experts as u64);
        // The floor at 1 GB/s is the byte count in microseconds / 1000.
        assert!((f.floor_us(1e9) - all_f32 as f64 / 1e3).abs() < 1e-6);
    }

    #[test]
    fn super_preset_is_dominated_by_experts_and_lm_head() {
        let mut cfg = Config::super_();
        cfg.layers = super::super::config::parse_pattern("MEMEMEM*E").expect("pattern");
        let b = decode_step_bytes(&cfg, ExpertFormat::Nvfp4, 64);
        // 22 experts x 2 matrices of 2688 x 1024 in NVFP4, 4 MoE layers.
        let per = matrix_bytes(2688, 1024, ExpertFormat::Nvfp4);
        assert_eq!(per, 2688 * 1024 / 2 + 2688 * 64 + 4);
        assert_eq!(b.production.moe_experts, 4 * 22 * 2 * per);
        assert_eq!(b.production.lm_head, 131072 * 4096 * 2);
        assert!(b.production.total() < b.as_loaded.total());
    }
}
