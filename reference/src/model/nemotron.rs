//! The Nemotron-H network: blocks, caches, prefill / decode / verify, MTP and speculative
//! decoding.
//!
//! Block (transformers `NemotronHBlock`): `h = h + mixer(rmsnorm(h))`, with the mixer one of
//! Mamba-2, attention, MLP or MoE. Final `norm_f`, then `lm_head` (no softcapping).

use super::config::{Config, LayerKind};
pub use super::kernels::LayerState;
use super::kernels::{self, AttnGeometry, CpuKernels, MambaStep, ModelKernels, SsmDims};
use super::linear::{argmax_rows, embed};
use super::weights::{Init, Mat, WeightStore};
use super::ModelError;
use crate::ops::mamba_cache_promote::promote;
use crate::ops::ssd_chunk_scan::{DtConfig, DtTransform, SsdArgs, SsdDims};
use std::path::Path;
use std::sync::Arc;

/// Mamba-2 mixer weights.
pub struct MambaW {
    pub in_proj: Mat,
    pub in_bias: Option<Vec<f32>>,
    /// (conv_dim, kernel)
    pub conv_w: Vec<f32>,
    pub conv_b: Option<Vec<f32>>,
    /// A = -exp(A_log), (nheads,)
    pub a: Vec<f32>,
    /// D per head (nheads,)
    pub d: Vec<f32>,
    pub dt_bias: Vec<f32>,
    /// gated RMSNorm weight (d_inner,)
    pub norm: Vec<f32>,
    pub out_proj: Mat,
    pub out_bias: Option<Vec<f32>>,
}

/// Attention weights (no positional encoding in Nemotron-H).
pub struct AttnW {
    pub q: Mat,
    pub k: Mat,
    pub v: Mat,
    pub o: Mat,
    pub qb: Option<Vec<f32>>,
    pub kb: Option<Vec<f32>>,
    pub vb: Option<Vec<f32>>,
    pub ob: Option<Vec<f32>>,
}

/// ReLU² MLP: down(relu(up(x))²).
pub struct MlpW {
    pub up: Mat,
    pub down: Mat,
    pub up_b: Option<Vec<f32>>,
    pub down_b: Option<Vec<f32>>,
}

/// Latent MoE: router on the full hidden (fp32), routed experts in the latent space between
/// fc1_latent_proj and fc2_latent_proj, one shared expert on the full hidden.
pub struct MoeW {
    /// (n_routed_experts, hidden)
    pub gate: Mat,
    pub score_bias: Vec<f32>,
    pub fc1: Option<Mat>,
    pub fc2: Option<Mat>,
    /// (up (I, L), down (L, I)) per expert
    pub experts: Vec<(Mat, Mat)>,
    pub shared: Option<MlpW>,
}

pub enum Mixer {
    Mamba(MambaW),
    Attention(AttnW),
    Mlp(MlpW),
    Moe(MoeW),
}

/// One pre-norm residual block.
pub struct Block {
    pub kind: LayerKind,
    pub norm: Vec<f32>,
    pub mixer: Mixer,
    /// Hub name prefix, e.g. `backbone.layers.3.` (for messages).
    pub prefix: String,
}

/// The MTP head: `x = eh_proj(cat[enorm(E[tok_{i+1}]), hnorm(h_i)])`, the blocks,
/// `final_layernorm`, the shared `lm_head`.
pub struct MtpHead {
    pub enorm: Vec<f32>,
    pub hnorm: Vec<f32>,
    /// (hidden, 2*hidden)
    pub eh_proj: Mat,
    pub blocks: Vec<Block>,
    pub final_norm: Vec<f32>,
}

pub struct Model {
    pub cfg: Config,
    pub embed: Mat,
    pub layers: Vec<Block>,
    pub norm_f: Vec<f32>,
    /// `None` when tied to the embeddings.
    pub lm_head: Option<Mat>,
    pub mtp: Option<MtpHead>,
    /// The compute backend ([`CpuKernels`] unless [`Model::set_kernels`] changed it).
    pub kernels: Arc<dyn ModelKernels>,
}

/// A Mamba layer's (conv window, SSM state) on the host, when the cache holds them.
type HostStates = (Option<Vec<f32>>, Option<Vec<f32>>);

/// What a multi-token verification pass recorded for one Mamba layer.
#[derive(Clone, Debug, Default)]
pub struct MambaSteps {
    /// tokens of the pass (T)
    pub t: usize,
    /// conv window after every token (T, conv_dim, kernel-1) (`intermediate_conv_window`)
    pub conv: Vec<f32>,
    /// SSM state after every token (T, nheads, headdim, dstate) (`intermediate_states`)
    pub ssm: Vec<f32>,
}

/// States a multi-token verification pass left per step (for promotion).
#[derive(Clone, Debug, Default)]
pub struct Pending {
    /// per layer (None for non-Mamba layers)
    pub steps: Vec<Option<MambaSteps>>,
    /// tokens seen before the verification pass
    pub base: usize,
}

/// The caches of a stack of blocks (backbone or MTP head).
#[derive(Debug)]
pub struct Cache {
    pub layers: Vec<LayerState>,
    /// Tokens consumed so far.
    pub seen: usize,
    pub pending: Option<Pending>,
}

/// How the Mamba mixers and caches treat a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Chunked SSD scan (first call, or continuing a prefill in chunks).
    Prefill,
    /// One token: causal_conv1d_update + selective_state_update.
    Decode,
    /// Several tokens from a cached state with the multi-token state update, recording the
    /// state after every step; main states are left untouched until [`Cache::promote`].
    Verify,
}

/// Outputs of a forward call.
#[derive(Clone, Debug, Default)]
pub struct ForwardOut {
    /// (t, vocab)
    pub logits: Vec<f32>,
    /// (t, hidden) after norm_f: what lm_head and the MTP head read
    pub last_hidden: Vec<f32>,
    /// when requested: [embeddings, out of layer 0, ..., out of layer L-2, norm_f(out of
    /// layer L-1)], each (t, hidden): the layout of transformers' `hidden_states`
    pub hidden: Vec<Vec<f32>>,
}

/// Result of [`Model::verify_drafts`].
#[derive(Clone, Debug)]
pub struct VerifyOut {
    /// drafts accepted (j)
    pub accepted: usize,
    /// the backbone's greedy token after each of the k+1 positions; `greedy[j]` is the bonus
    pub greedy: Vec<u32>,
    /// logits / hidden of the verification pass (k+1 rows)
    pub out: ForwardOut,
}

/// Speculative decoding statistics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecStats {
    pub tokens: Vec<u32>,
    pub rounds: usize,
    /// drafts accepted per round
    pub accepted: Vec<usize>,
}

impl Cache {
    /// Promotes the state after verification step `steps - 1` (the last token kept) to the
    /// main state with the `mamba_cache_promote` op: Mamba layers take the recorded SSM state
    /// and conv window (no re-computation), attention layers keep the first `base + steps`
    /// positions. `steps = 0` keeps the state from before the pass.
    pub fn promote(&mut self, steps: usize, cfg: &Config) -> Result<(), ModelError> {
        let pend = self
            .pending
            .take()
            .ok_or_else(|| ModelError::Input("promote: no verification pass is pending".into()))?;
        let kv = cfg.num_key_value_heads * cfg.head_dim;
        let keep = pend.base + steps;
        for (li, st) in self.layers.iter_mut().enumerate() {
            st.make_host()?;
            match st {
                LayerState::Mamba { conv, ssm } => {
                    let rec = pend.steps.get(li).and_then(|s| s.as_ref()).ok_or_else(|| {
                        ModelError::Input(format!("promote: layer {li} recorded no states"))
                    })?;
                    let acc = [steps as i64];
                    let slot = [Some(0usize)];
                    let (pc, ps) = (conv.len(), ssm.len());
                    promote(conv, &rec.conv, pc, rec.t, &acc, &slot)
                        .and_then(|_| promote(ssm, &rec.ssm, ps, rec.t, &acc, &slot))
                        .map_err(|e| ModelError::Op(e.to_string()))?;
                }
                LayerState::Attention { k, v } => {
                    k.truncate(keep * kv);
                    v.truncate(keep * kv);
                }
                LayerState::MambaResident(_) => {
                    return Err(ModelError::Op(format!(
                        "promote: layer {li}'s resident state did not come back to the host"
                    )))
                }
                LayerState::Stateless => {}
            }
        }
        self.seen = keep;
        Ok(())
    }

    /// A copy of the caches with every state on the host (backend-resident Mamba states are
    /// downloaded; the original keeps its own).
    pub fn try_clone(&self) -> Result<Cache, ModelError> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                Ok(match l {
                    LayerState::Mamba { conv, ssm } => LayerState::Mamba {
                        conv: conv.clone(),
                        ssm: ssm.clone(),
                    },
                    LayerState::MambaResident(r) => {
                        let (conv, ssm) = r.download()?;
                        LayerState::Mamba { conv, ssm }
                    }
                    LayerState::Attention { k, v } => LayerState::Attention {
                        k: k.clone(),
                        v: v.clone(),
                    },
                    LayerState::Stateless => LayerState::Stateless,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Cache {
            layers,
            seen: self.seen,
            pending: self.pending.clone(),
        })
    }

    /// Drops cached positions beyond `len` (attention) without touching recurrent states;
    /// only valid for stacks without Mamba layers (the MTP head).
    pub fn truncate_attention(&mut self, len: usize, cfg: &Config) {
        let kv = cfg.num_key_value_heads * cfg.head_dim;
        for st in &mut self.layers {
            if let LayerState::Attention { k, v } = st {
                k.truncate(len * kv);
                v.truncate(len * kv);
            }
        }
        self.seen = self.seen.min(len);
    }
}

fn opt_vec(
    store: &mut WeightStore,
    on: bool,
    name: &str,
    n: usize,
) -> Result<Option<Vec<f32>>, ModelError> {
    if on {
        Ok(Some(store.vec(
            name,
            n,
            Init::Around {
                center: 0.0,
                spread: 0.1,
            },
        )?))
    } else {
        Ok(None)
    }
}

const NORM_INIT: Init = Init::Around {
    center: 1.0,
    spread: 0.2,
};

fn load_mlp(
    store: &mut WeightStore,
    p: &str,
    h: usize,
    inter: usize,
    bias: bool,
) -> Result<MlpW, ModelError> {
    Ok(MlpW {
        up: store.get(&format!("{p}up_proj.weight"), &[inter, h], Init::Linear)?,
        down: store.get(&format!("{p}down_proj.weight"), &[h, inter], Init::Linear)?,
        up_b: opt_vec(store, bias, &format!("{p}up_proj.bias"), inter)?,
        down_b: opt_vec(store, bias, &format!("{p}down_proj.bias"), h)?,
    })
}

fn load_block(
    cfg: &Config,
    store: &mut WeightStore,
    prefix: &str,
    kind: LayerKind,
) -> Result<Block, ModelError> {
    let h = cfg.hidden_size;
    let m = format!("{prefix}mixer.");
    let norm = store.vec(&format!("{prefix}norm.weight"), h, NORM_INIT)?;
    let mixer = match kind {
        LayerKind::Mamba => {
            let (nh, di, cd, k) = (
                cfg.mamba_num_heads,
                cfg.d_inner(),
                cfg.conv_dim(),
                cfg.conv_kernel,
            );
            let a_log = store.vec(&format!("{m}A_log"), nh, Init::ALog)?;
            Mixer::Mamba(MambaW {
                in_proj: store.get(
                    &format!("{m}in_proj.weight"),
                    &[cfg.in_proj_dim(), h],
                    Init::Linear,
                )?,
                in_bias: opt_vec(
                    store,
                    cfg.use_bias,
                    &format!("{m}in_proj.bias"),
                    cfg.in_proj_dim(),
                )?,
                conv_w: store
                    .get(
                        &format!("{m}conv1d.weight"),
                        &[cd, 1, k],
                        Init::Around {
                            center: 0.0,
                            spread: 0.5,
                        },
                    )?
                    .values()
                    .into_owned(),
                conv_b: opt_vec(store, cfg.use_conv_bias, &format!("{m}conv1d.bias"), cd)?,
                a: a_log.iter().map(|v| -v.exp()).collect(),
                d: store.vec(&format!("{m}D"), nh, NORM_INIT)?,
                dt_bias: store.vec(&format!("{m}dt_bias"), nh, Init::DtBias)?,
                norm: store.vec(&format!("{m}norm.weight"), di, NORM_INIT)?,
                out_proj: store.get(&format!("{m}out_proj.weight"), &[h, di], Init::Linear)?,
                out_bias: opt_vec(store, cfg.use_bias, &format!("{m}out_proj.bias"), h)?,
            })
        }
        LayerKind::Attention => {
            let (qd, kvd) = (
                cfg.num_attention_heads * cfg.head_dim,
                cfg.num_key_value_heads * cfg.head_dim,
            );
            let b = cfg.attention_bias;
            Mixer::Attention(AttnW {
                q: store.get(&format!("{m}q_proj.weight"), &[qd, h], Init::Linear)?,
                k: store.get(&format!("{m}k_proj.weight"), &[kvd, h], Init::Linear)?,
                v: store.get(&format!("{m}v_proj.weight"), &[kvd, h], Init::Linear)?,
                o: store.get(&format!("{m}o_proj.weight"), &[h, qd], Init::Linear)?,
                qb: opt_vec(store, b, &format!("{m}q_proj.bias"), qd)?,
                kb: opt_vec(store, b, &format!("{m}k_proj.bias"), kvd)?,
                vb: opt_vec(store, b, &format!("{m}v_proj.bias"), kvd)?,
                ob: opt_vec(store, b, &format!("{m}o_proj.bias"), h)?,
            })
        }
        LayerKind::Mlp => Mixer::Mlp(load_mlp(store, &m, h, cfg.intermediate_size, cfg.mlp_bias)?),
        LayerKind::Moe => {
            let (e, l, i) = (
                cfg.n_routed_experts,
                cfg.moe_width(),
                cfg.moe_intermediate_size,
            );
            let gate = store
                .get(&format!("{m}gate.weight"), &[e, h], Init::Linear)?
                .materialize();
            let score_bias = store.vec(
                &format!("{m}gate.e_score_correction_bias"),
                e,
                Init::Around {
                    center: 0.0,
                    spread: 0.1,
                },
            )?;
            let (fc1, fc2) = match cfg.moe_latent_size {
                Some(ls) => (
                    Some(store.get(
                        &format!("{m}fc1_latent_proj.weight"),
                        &[ls, h],
                        Init::Linear,
                    )?),
                    Some(store.get(
                        &format!("{m}fc2_latent_proj.weight"),
                        &[h, ls],
                        Init::Linear,
                    )?),
                ),
                None => (None, None),
            };
            let mut experts = Vec::with_capacity(e);
            for x in 0..e {
                experts.push((
                    store.get(
                        &format!("{m}experts.{x}.up_proj.weight"),
                        &[i, l],
                        Init::Linear,
                    )?,
                    store.get(
                        &format!("{m}experts.{x}.down_proj.weight"),
                        &[l, i],
                        Init::Linear,
                    )?,
                ));
            }
            let shared = if cfg.n_shared_experts > 0 {
                Some(load_mlp(
                    store,
                    &format!("{m}shared_experts."),
                    h,
                    cfg.moe_shared_expert_intermediate_size * cfg.n_shared_experts,
                    cfg.mlp_bias,
                )?)
            } else {
                None
            };
            Mixer::Moe(MoeW {
                gate,
                score_bias,
                fc1,
                fc2,
                experts,
                shared,
            })
        }
    };
    Ok(Block {
        kind,
        norm,
        mixer,
        prefix: prefix.to_string(),
    })
}

fn mlp_forward(
    kern: &dyn ModelKernels,
    w: &MlpW,
    x: &[f32],
    t: usize,
) -> Result<Vec<f32>, ModelError> {
    let u = kern.relu2(&kern.linear(x, t, &w.up, w.up_b.as_deref())?)?;
    kern.linear(&u, t, &w.down, w.down_b.as_deref())
}

impl Model {
    /// Builds the model from a weight store; every tensor is checked against the config.
    pub fn from_store(cfg: Config, store: &mut WeightStore) -> Result<Model, ModelError> {
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        let embed = store.get("backbone.embeddings.weight", &[v, h], Init::Linear)?;
        let mut layers = Vec::with_capacity(cfg.layers.len());
        for (i, &k) in cfg.layers.iter().enumerate() {
            layers.push(load_block(
                &cfg,
                store,
                &format!("backbone.layers.{i}."),
                k,
            )?);
        }
        let norm_f = store.vec("backbone.norm_f.weight", h, NORM_INIT)?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(store.get("lm_head.weight", &[v, h], Init::Linear)?)
        };
        let mtp = if cfg.mtp_layers.is_empty() {
            None
        } else {
            let n = cfg.mtp_layers.len();
            let mut blocks = Vec::with_capacity(n);
            for (j, &k) in cfg.mtp_layers.iter().enumerate() {
                blocks.push(load_block(&cfg, store, &format!("mtp.layers.{j}."), k)?);
            }
            Some(MtpHead {
                enorm: store.vec("mtp.layers.0.enorm.weight", h, NORM_INIT)?,
                hnorm: store.vec("mtp.layers.0.hnorm.weight", h, NORM_INIT)?,
                eh_proj: store.get("mtp.layers.0.eh_proj.weight", &[h, 2 * h], Init::Linear)?,
                blocks,
                final_norm: store.vec(
                    &format!("mtp.layers.{}.final_layernorm.weight", n - 1),
                    h,
                    NORM_INIT,
                )?,
            })
        };
        Ok(Model {
            cfg,
            embed,
            layers,
            norm_f,
            lm_head,
            mtp,
            kernels: Arc::new(CpuKernels),
        })
    }

    /// Loads `dir/config.json` and the weights of `dir` (single file or sharded).
    pub fn load_dir(dir: &Path) -> Result<Model, ModelError> {
        Model::load_dir_with_unused(dir).map(|(m, _)| m)
    }

    /// As [`Model::load_dir`], also returning the checkpoint tensors the config did not use
    /// (a sign of a config / checkpoint mismatch, or of tensors duet does not model).
    pub fn load_dir_with_unused(dir: &Path) -> Result<(Model, Vec<String>), ModelError> {
        let cfg = Config::from_file(&dir.join("config.json"))?;
        let mut store = WeightStore::load_dir(dir)?;
        let m = Model::from_store(cfg, &mut store)?;
        Ok((m, store.unused()))
    }

    /// Seeded random weights for `cfg`; tensors above `lazy_above` elements are generated on
    /// use instead of stored.
    pub fn random(cfg: Config, seed: u64, lazy_above: usize) -> Result<Model, ModelError> {
        let mut store = WeightStore::random(seed, lazy_above);
        Model::from_store(cfg, &mut store)
    }

    /// A fresh (empty) cache for the backbone.
    pub fn new_cache(&self) -> Cache {
        new_cache(&self.cfg, &self.layers)
    }

    /// A fresh cache for the MTP head (`None` without one).
    pub fn new_mtp_cache(&self) -> Option<Cache> {
        self.mtp.as_ref().map(|m| new_cache(&self.cfg, &m.blocks))
    }

    /// Runs every op of the model on `kernels` from now on (e.g. the GPU backend).
    pub fn set_kernels(&mut self, kernels: Arc<dyn ModelKernels>) {
        self.kernels = kernels;
    }

    /// The compute backend in use.
    pub fn kernels(&self) -> &dyn ModelKernels {
        self.kernels.as_ref()
    }

    fn lm_head(&self) -> &Mat {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<(), ModelError> {
        if let Some((i, t)) = tokens
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= self.cfg.vocab_size)
        {
            return Err(ModelError::Input(format!(
                "token {i} is {t} but the vocabulary has {} entries",
                self.cfg.vocab_size
            )));
        }
        Ok(())
    }

    /// Runs the backbone over `tokens`. Without a cache: a full prefill. With one: `Prefill`
    /// continues from its state, `Decode` takes one token, `Verify` several with the
    /// multi-token update (see [`Pass`]).
    pub fn forward(
        &self,
        tokens: &[u32],
        cache: Option<&mut Cache>,
        pass: Pass,
        want_hidden: bool,
    ) -> Result<ForwardOut, ModelError> {
        self.check_tokens(tokens)?;
        let t = tokens.len();
        if pass == Pass::Decode && t != 1 {
            return Err(ModelError::Input(format!(
                "decode takes one token per call, got {t}"
            )));
        }
        let mut x = embed(&self.embed, tokens);
        let mut hidden = Vec::new();
        if want_hidden {
            hidden.push(x.clone());
        }
        let x_out = {
            let mut cache = cache;
            if let Some(c) = cache.as_deref_mut() {
                if pass == Pass::Verify {
                    c.pending = Some(Pending {
                        steps: vec![None; c.layers.len()],
                        base: c.seen,
                    });
                }
            }
            for (li, blk) in self.layers.iter().enumerate() {
                x = self.block_forward(blk, &x, t, cache.as_deref_mut(), li, pass)?;
                if want_hidden && li + 1 < self.layers.len() {
                    hidden.push(x.clone());
                }
            }
            if let Some(c) = cache {
                if pass != Pass::Verify {
                    c.seen += t;
                }
            }
            x
        };
        let kern = self.kernels();
        let last_hidden = kern.rmsnorm(&x_out, &self.norm_f, self.cfg.layer_norm_epsilon)?;
        if want_hidden {
            hidden.push(last_hidden.clone());
        }
        let logits = kern.linear(&last_hidden, t, self.lm_head(), None)?;
        Ok(ForwardOut {
            logits,
            last_hidden,
            hidden,
        })
    }

    /// MTP head over rows i of `h` (t, hidden) (backbone outputs after norm_f) paired with
    /// `next_tokens[i]` (the token after position i). Returns (logits (t, vocab), the head's
    /// hidden after final_layernorm (t, hidden)). With a cache, attention continues from it.
    pub fn mtp_forward(
        &self,
        h: &[f32],
        next_tokens: &[u32],
        cache: Option<&mut Cache>,
    ) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
        let mtp = self.mtp.as_ref().ok_or_else(|| {
            ModelError::Input(
                "this model has no MTP head (num_nextn_predict_layers = 0 or no mtp pattern)"
                    .into(),
            )
        })?;
        self.check_tokens(next_tokens)?;
        let (t, hs, eps) = (
            next_tokens.len(),
            self.cfg.hidden_size,
            self.cfg.layer_norm_epsilon,
        );
        if h.len() != t * hs {
            return Err(ModelError::Input(format!(
                "mtp: {} hidden rows for {t} tokens",
                h.len() / hs.max(1)
            )));
        }
        let kern = self.kernels();
        let e = kern.rmsnorm(&embed(&self.embed, next_tokens), &mtp.enorm, eps)?;
        let hn = kern.rmsnorm(h, &mtp.hnorm, eps)?;
        let mut cat = Vec::with_capacity(t * 2 * hs);
        for i in 0..t {
            cat.extend_from_slice(&e[i * hs..(i + 1) * hs]);
            cat.extend_from_slice(&hn[i * hs..(i + 1) * hs]);
        }
        let mut x = kern.linear(&cat, t, &mtp.eh_proj, None)?;
        let mut cache = cache;
        // The MTP blocks continue from their cache like a chunked prefill.
        let pass = Pass::Prefill;
        for (li, blk) in mtp.blocks.iter().enumerate() {
            x = self.block_forward(blk, &x, t, cache.as_deref_mut(), li, pass)?;
        }
        if let Some(c) = cache {
            c.seen += t;
        }
        let out = kern.rmsnorm(&x, &mtp.final_norm, eps)?;
        let logits = kern.linear(&out, t, self.lm_head(), None)?;
        Ok((logits, out))
    }

    fn block_forward(
        &self,
        blk: &Block,
        x: &[f32],
        t: usize,
        cache: Option<&mut Cache>,
        li: usize,
        pass: Pass,
    ) -> Result<Vec<f32>, ModelError> {
        let kern = self.kernels();
        let xn = kern.rmsnorm(x, &blk.norm, self.cfg.layer_norm_epsilon)?;
        let mut y = match &blk.mixer {
            Mixer::Mamba(w) => self.mamba_forward(w, &xn, t, cache, li, pass)?,
            Mixer::Attention(w) => self.attention_forward(w, &xn, t, cache, li)?,
            Mixer::Mlp(w) => mlp_forward(kern, w, &xn, t)?,
            Mixer::Moe(w) => self.moe_forward(w, &xn, t)?,
        };
        for (a, b) in y.iter_mut().zip(x) {
            *a += b;
        }
        Ok(y)
    }

    fn mamba_forward(
        &self,
        w: &MambaW,
        x: &[f32],
        t: usize,
        cache: Option<&mut Cache>,
        li: usize,
        pass: Pass,
    ) -> Result<Vec<f32>, ModelError> {
        let c = &self.cfg;
        let (di, cd, nh, hd, ng, ds, k) = (
            c.d_inner(),
            c.conv_dim(),
            c.mamba_num_heads,
            c.mamba_head_dim,
            c.n_groups,
            c.ssm_state_size,
            c.conv_kernel,
        );
        let kern = self.kernels();
        let proj = kern.linear(x, t, &w.in_proj, w.in_bias.as_deref())?;
        let pd = c.in_proj_dim();
        let mut z = Vec::with_capacity(t * di);
        let mut xbc = Vec::with_capacity(t * cd);
        let mut dt = Vec::with_capacity(t * nh);
        for r in proj.chunks_exact(pd) {
            z.extend_from_slice(&r[..di]);
            xbc.extend_from_slice(&r[di..di + cd]);
            dt.extend_from_slice(&r[di + cd..]);
        }
        let (mut cache_ref, state) = match cache {
            Some(cc) => {
                let seen = cc.seen;
                (Some(cc), seen)
            }
            None => (None, 0),
        };
        let dims = SsmDims {
            nheads: nh,
            headdim: hd,
            ngroups: ng,
            dstate: ds,
        };
        let split = |xa: &[f32]| kernels::split_xbc(xa, cd, di, ng * ds);
        // The cached states as host vectors (prefill continuation, verification); a decode step
        // hands the layer's state to the backend as it is (it may stay resident).
        let host_prev = |cc: Option<&mut Cache>| -> Result<HostStates, ModelError> {
            match cc {
                Some(cc) if state > 0 => {
                    cc.layers[li].make_host()?;
                    match &cc.layers[li] {
                        LayerState::Mamba { conv, ssm } => {
                            Ok((Some(conv.clone()), Some(ssm.clone())))
                        }
                        _ => Ok((None, None)),
                    }
                }
                _ => Ok((None, None)),
            }
        };
        let y = match pass {
            Pass::Prefill => {
                let (conv_prev, ssm_prev) = host_prev(cache_ref.as_deref_mut())?;
                let (xa, win) = kern.causal_conv1d(
                    &xbc,
                    t,
                    cd,
                    &w.conv_w,
                    w.conv_b.as_deref(),
                    k,
                    conv_prev.as_deref(),
                )?;
                let (xs, bs, cs) = split(&xa);
                let dfull: Vec<f32> = (0..nh * hd).map(|i| w.d[i / hd]).collect();
                let args = SsdArgs {
                    dims: SsdDims {
                        batch: 1,
                        seqlen: t,
                        nheads: nh,
                        headdim: hd,
                        ngroups: ng,
                        dstate: ds,
                    },
                    x: &xs,
                    dt: &dt,
                    a: &w.a,
                    b: &bs,
                    c: &cs,
                    d: Some(&dfull),
                    z: None,
                    dt_bias: Some(&w.dt_bias),
                    initial_states: ssm_prev.as_deref(),
                    seq_idx: None,
                    dt_cfg: DtConfig {
                        transform: DtTransform::Softplus,
                        dt_min: c.time_step_limit.0,
                        dt_max: c.time_step_limit.1,
                    },
                };
                let out = kern
                    .ssd_chunk_scan(&args, c.chunk_size)
                    .map_err(|e| ModelError::Op(format!("layer {li}: {e}")))?;
                if let Some(cc) = cache_ref.as_deref_mut() {
                    cc.layers[li] = LayerState::Mamba {
                        conv: win,
                        ssm: out.final_states,
                    };
                }
                out.y
            }
            Pass::Decode | Pass::Verify => {
                let cc = cache_ref.ok_or_else(|| {
                    ModelError::Input("decode / verify need a cache from a prefill".into())
                })?;
                let filled = state > 0
                    && matches!(
                        cc.layers[li],
                        LayerState::Mamba { .. } | LayerState::MambaResident(_)
                    );
                if !filled {
                    return Err(ModelError::Input(
                        "decode / verify need a cache filled by a prefill first".into(),
                    ));
                }
                let (lo, hi) = c.time_step_limit;
                if lo > 0.0 || hi.is_finite() {
                    return Err(ModelError::Input(format!(
                        "time_step_limit ({lo}, {hi}) is not supported in decode: the \
                         selective_state_update op has no dt clamp; use [0, inf] (the hub value)"
                    )));
                }
                let params = kernels::SsmParams {
                    a: &w.a,
                    d: &w.d,
                    dt_bias: &w.dt_bias,
                };
                if pass == Pass::Decode && t == 1 {
                    let step = MambaStep {
                        dims,
                        conv_dim: cd,
                        conv_k: k,
                        conv_w: &w.conv_w,
                        conv_b: w.conv_b.as_deref(),
                        params,
                    };
                    kern.mamba_decode(&mut cc.layers[li], &step, &xbc, &dt)?
                } else {
                    let (conv0, ssm0) = match host_prev(Some(&mut *cc))? {
                        (Some(a), Some(b)) => (a, b),
                        _ => {
                            return Err(ModelError::Input(
                                "decode / verify need a cache filled by a prefill first".into(),
                            ))
                        }
                    };
                    let mut win = conv0;
                    let (xa, windows) = kern.causal_conv1d_step(
                        &xbc,
                        t,
                        cd,
                        &mut win,
                        &w.conv_w,
                        w.conv_b.as_deref(),
                        k,
                    )?;
                    let (xs, bs, cs) = split(&xa);
                    let mut ssm = ssm0;
                    let rows = kernels::SsmRows {
                        x: &xs,
                        dt: &dt,
                        b: &bs,
                        c: &cs,
                    };
                    if pass == Pass::Verify {
                        let (y, states) = kern.ssu_verify(dims, &mut ssm, t, &params, &rows)?;
                        if let Some(p) = cc.pending.as_mut() {
                            p.steps[li] = Some(MambaSteps {
                                t,
                                conv: windows,
                                ssm: states,
                            });
                        }
                        y
                    } else {
                        let y = kern.ssu_step(dims, &mut ssm, &params, &rows)?;
                        cc.layers[li] = LayerState::Mamba { conv: win, ssm };
                        y
                    }
                }
            }
        };
        let g = kern.gated_rmsnorm(&y, &z, &w.norm, di / ng, c.layer_norm_epsilon)?;
        kern.linear(&g, t, &w.out_proj, w.out_bias.as_deref())
    }

    fn attention_forward(
        &self,
        w: &AttnW,
        x: &[f32],
        t: usize,
        cache: Option<&mut Cache>,
        li: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let c = &self.cfg;
        let (nq, nkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let kern = self.kernels();
        let q = kern.linear(x, t, &w.q, w.qb.as_deref())?;
        let kn = kern.linear(x, t, &w.k, w.kb.as_deref())?;
        let vn = kern.linear(x, t, &w.v, w.vb.as_deref())?;
        let kvd = nkv * hd;
        // Keys / values of every visible position: the cache then the new rows.
        let geo = AttnGeometry { nq, nkv, hd, t };
        let out = match cache {
            Some(cc) => {
                let (mut k, mut v) =
                    match std::mem::replace(&mut cc.layers[li], LayerState::Stateless) {
                        LayerState::Attention { k, v } => (k, v),
                        _ => (Vec::new(), Vec::new()),
                    };
                let p0 = k.len() / kvd;
                k.extend_from_slice(&kn);
                v.extend_from_slice(&vn);
                let out = kern.attention(&q, &k, &v, p0, geo);
                cc.layers[li] = LayerState::Attention { k, v };
                out?
            }
            None => kern.attention(&q, &kn, &vn, 0, geo)?,
        };
        kern.linear(&out, t, &w.o, w.ob.as_deref())
    }

    fn moe_forward(&self, w: &MoeW, x: &[f32], t: usize) -> Result<Vec<f32>, ModelError> {
        let c = &self.cfg;
        let (h, ne) = (c.hidden_size, c.n_routed_experts);
        // fp32 router logits on the full hidden.
        let kern = self.kernels();
        let logits = kern.linear(x, t, &w.gate, None)?;
        let rc = c.router_config();
        let routes = kern.route(&logits, &w.score_bias, t, &rc)?;
        debug_assert_eq!(logits.len(), t * ne);
        let lat = match &w.fc1 {
            Some(f) => kern.linear(x, t, f, None)?,
            None => x.to_vec(),
        };
        // Routed experts: moe_permute -> per-expert GEMM pair -> moe_finalize (op latent_moe).
        let k = routes.first().map_or(c.num_experts_per_tok, |r| r.0.len());
        let idx: Vec<i64> = routes
            .iter()
            .flat_map(|(ids, _)| ids.iter().map(|&e| e as i64))
            .collect();
        let wts: Vec<f32> = routes
            .iter()
            .flat_map(|(_, ws)| ws.iter().copied())
            .collect();
        let acc = kern.routed_experts(&lat, t, &idx, &wts, k, &w.experts)?;
        let mut y = match &w.fc2 {
            Some(f) => kern.linear(&acc, t, f, None)?,
            None => acc,
        };
        if let Some(s) = &w.shared {
            let sh = mlp_forward(kern, s, x, t)?;
            for (a, b) in y.iter_mut().zip(&sh) {
                *a += b;
            }
        }
        debug_assert_eq!(y.len(), t * h);
        Ok(y)
    }

    /// Greedy decoding: prefill `prompt`, then `n_new` tokens one at a time.
    pub fn generate_greedy(&self, prompt: &[u32], n_new: usize) -> Result<Vec<u32>, ModelError> {
        if prompt.is_empty() {
            return Err(ModelError::Input("the prompt is empty".into()));
        }
        let mut cache = self.new_cache();
        let v = self.cfg.vocab_size;
        let out = self.forward(prompt, Some(&mut cache), Pass::Prefill, false)?;
        let mut next = argmax_rows(&out.logits[out.logits.len() - v..], v)[0];
        let mut toks = Vec::with_capacity(n_new);
        while toks.len() < n_new {
            toks.push(next);
            if toks.len() == n_new {
                break;
            }
            let o = self.forward(&[next], Some(&mut cache), Pass::Decode, false)?;
            next = argmax_rows(&o.logits, v)[0];
        }
        Ok(toks)
    }

    /// One verification round of speculative decoding: runs [next, d1..dk] through the
    /// backbone in one multi-token pass (`Pass::Verify`), accepts the longest prefix of drafts
    /// equal to the backbone's greedy choice, and promotes the states after the last kept
    /// token (next, d1..dj) without re-computing anything. Returns j, the backbone's greedy
    /// token after every position and the pass's outputs.
    pub fn verify_drafts(
        &self,
        cache: &mut Cache,
        next: u32,
        drafts: &[u32],
    ) -> Result<VerifyOut, ModelError> {
        let v = self.cfg.vocab_size;
        let mut ver = Vec::with_capacity(drafts.len() + 1);
        ver.push(next);
        ver.extend_from_slice(drafts);
        let out = self.forward(&ver, Some(cache), Pass::Verify, false)?;
        let greedy = argmax_rows(&out.logits, v);
        let mut j = 0;
        while j < drafts.len() && greedy[j] == drafts[j] {
            j += 1;
        }
        cache.promote(j + 1, &self.cfg)?;
        Ok(VerifyOut {
            accepted: j,
            greedy,
            out,
        })
    }

    /// Speculative greedy decoding with `k` MTP drafts per round: the MTP head drafts k
    /// tokens (chained on its own output hidden), the backbone verifies [last, d1..dk] in
    /// one multi-token pass recording per-step states, the longest matching prefix j is
    /// accepted plus the backbone's own next token, and the states after step j are
    /// promoted (no re-computation). Produces exactly the greedy tokens.
    pub fn generate_speculative(
        &self,
        prompt: &[u32],
        n_new: usize,
        k: usize,
    ) -> Result<SpecStats, ModelError> {
        if prompt.is_empty() {
            return Err(ModelError::Input("the prompt is empty".into()));
        }
        if k == 0 {
            return Ok(SpecStats {
                tokens: self.generate_greedy(prompt, n_new)?,
                rounds: n_new,
                accepted: vec![],
            });
        }
        let mut mcache = self.new_mtp_cache().ok_or_else(|| {
            ModelError::Input("speculative decoding with MTP needs a model with an MTP head".into())
        })?;
        let (v, hs) = (self.cfg.vocab_size, self.cfg.hidden_size);
        let mut cache = self.new_cache();
        let out = self.forward(prompt, Some(&mut cache), Pass::Prefill, false)?;
        let p = prompt.len();
        let mut next = argmax_rows(&out.logits[(p - 1) * v..], v)[0];
        // MTP over the prompt: row i pairs h_i with token i+1 (the last row with `next`).
        let mut mtp_in: Vec<u32> = prompt[1..].to_vec();
        mtp_in.push(next);
        let (ml, mh) = self.mtp_forward(&out.last_hidden, &mtp_in, Some(&mut mcache))?;
        let mut committed_mtp = p; // MTP positions whose inputs are final
        let mut draft_logits = ml[(p - 1) * v..].to_vec();
        let mut draft_h = mh[(p - 1) * hs..].to_vec();
        let mut stats = SpecStats::default();
        let mut toks = vec![next];
        while toks.len() < n_new {
            // Draft k tokens with the MTP head.
            let mut drafts = Vec::with_capacity(k);
            let mut d = argmax_rows(&draft_logits, v)[0];
            drafts.push(d);
            while drafts.len() < k {
                let (l2, h2) = self.mtp_forward(&draft_h, &[d], Some(&mut mcache))?;
                d = argmax_rows(&l2, v)[0];
                drafts.push(d);
                draft_h = h2;
            }
            let vr = self.verify_drafts(&mut cache, next, &drafts)?;
            let (j, o) = (vr.accepted, vr.out);
            let greedy = vr.greedy;
            stats.rounds += 1;
            stats.accepted.push(j);
            for &dtk in &drafts[..j] {
                if toks.len() < n_new {
                    toks.push(dtk);
                }
            }
            next = greedy[j];
            if toks.len() < n_new {
                toks.push(next);
            }
            // MTP: drop speculative positions, then feed the verified hiddens of the kept
            // positions paired with their successors.
            mcache.truncate_attention(committed_mtp, &self.cfg);
            let kept_h = &o.last_hidden[..(j + 1) * hs];
            let mut succ: Vec<u32> = drafts[..j].to_vec();
            succ.push(next);
            let (ml, mh) = self.mtp_forward(kept_h, &succ, Some(&mut mcache))?;
            committed_mtp += j + 1;
            draft_logits = ml[j * v..].to_vec();
            draft_h = mh[j * hs..].to_vec();
        }
        toks.truncate(n_new);
        stats.tokens = toks;
        Ok(stats)
    }
}

fn new_cache(cfg: &Config, blocks: &[Block]) -> Cache {
    let layers = blocks
        .iter()
        .map(|b| match b.kind {
            LayerKind::Mamba => LayerState::Mamba {
                conv: vec![0.0; cfg.conv_dim() * (cfg.conv_kernel - 1)],
                ssm: vec![0.0; cfg.mamba_num_heads * cfg.mamba_head_dim * cfg.ssm_state_size],
            },
            LayerKind::Attention => LayerState::Attention {
                k: Vec::new(),
                v: Vec::new(),
            },
            _ => LayerState::Stateless,
        })
        .collect();
    Cache {
        layers,
        seen: 0,
        pending: None,
    }
}

/// Layers a `super` preset may have on the CPU reference (larger patterns are refused: the
/// CPU path generates lazy weights on every use, so it is for smoke runs only).
pub const SUPER_CPU_MAX_LAYERS: usize = 9;

impl Model {
    /// A preset with seeded random weights:
    /// - `tiny`: the dimensions of the `nemotron-tiny-a` fixture (pattern `MEM*EM-E`, MTP
    ///   `*E`), all weights materialised;
    /// - `super`: Nemotron 3 Super dimensions (SPEC.md). Weights are lazy (generated from
    ///   the seed when used), and on the CPU only a `pattern` of at most
    ///   [`SUPER_CPU_MAX_LAYERS`] layers is accepted (e.g. `MEMEMEM*E`).
    ///
    /// `pattern` / `mtp_pattern` override the layer patterns (`""` disables MTP).
    pub fn preset(
        name: &str,
        pattern: Option<&str>,
        mtp_pattern: Option<&str>,
        seed: u64,
    ) -> Result<Model, ModelError> {
        let (mut cfg, lazy_above) = match name {
            "tiny" => (Config::tiny(), usize::MAX),
            "super" => {
                let p = pattern.ok_or_else(|| {
                    ModelError::Config(format!(
                        "the super preset has {} layers: too large for the CPU reference; pass \
                         --pattern with at most {SUPER_CPU_MAX_LAYERS} layers, e.g. --pattern MEMEMEM*E",
                        Config::super_().layers.len()
                    ))
                })?;
                let n = super::config::parse_pattern(p)?.len();
                if n > SUPER_CPU_MAX_LAYERS {
                    return Err(ModelError::Config(format!(
                        "--pattern {p} has {n} layers; the super preset on the CPU reference takes at most {SUPER_CPU_MAX_LAYERS}"
                    )));
                }
                (Config::super_(), 1 << 16)
            }
            other => {
                return Err(ModelError::Config(format!(
                    "unknown preset '{other}'; use tiny or super"
                )))
            }
        };
        if let Some(p) = pattern {
            cfg.layers = super::config::parse_pattern(p)?;
        }
        if let Some(p) = mtp_pattern {
            cfg.mtp_layers = super::config::parse_pattern(p)?;
        }
        cfg.validate(&format!("preset {name}"))?;
        Model::random(cfg, seed, lazy_above)
    }

    /// Number of parameters (embedding and lm_head included; MTP head separately).
    pub fn param_counts(&self) -> (u64, u64) {
        fn block(b: &Block) -> u64 {
            let m = |x: &Mat| (x.rows() * x.cols()) as u64;
            let mlp = |w: &MlpW| m(&w.up) + m(&w.down);
            b.norm.len() as u64
                + match &b.mixer {
                    Mixer::Mamba(w) => {
                        m(&w.in_proj)
                            + m(&w.out_proj)
                            + (w.conv_w.len() + w.norm.len() + 3 * w.a.len()) as u64
                            + w.conv_b.as_ref().map_or(0, |v| v.len() as u64)
                    }
                    Mixer::Attention(w) => m(&w.q) + m(&w.k) + m(&w.v) + m(&w.o),
                    Mixer::Mlp(w) => mlp(w),
                    Mixer::Moe(w) => {
                        m(&w.gate)
                            + w.score_bias.len() as u64
                            + w.fc1.as_ref().map_or(0, m)
                            + w.fc2.as_ref().map_or(0, m)
                            + w.experts.iter().map(|(u, d)| m(u) + m(d)).sum::<u64>()
                            + w.shared.as_ref().map_or(0, mlp)
                    }
                }
        }
        let m = |x: &Mat| (x.rows() * x.cols()) as u64;
        let backbone = m(&self.embed)
            + self.layers.iter().map(block).sum::<u64>()
            + self.norm_f.len() as u64
            + self.lm_head.as_ref().map_or(0, m);
        let mtp = self.mtp.as_ref().map_or(0, |h| {
            (h.enorm.len() + h.hnorm.len() + h.final_norm.len()) as u64
                + m(&h.eh_proj)
                + h.blocks.iter().map(block).sum::<u64>()
        });
        (backbone, mtp)
    }
}

/// Storage format of the routed experts' weights (Nemotron 3 Super ships them in NVFP4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertFormat {
    /// As loaded (f32).
    F32,
    /// Rounded to bf16 (round to nearest even).
    Bf16,
    /// NVFP4 in the kernel's arithmetic (`nvfp4_quantize` kernel mode, linear scales, one global
    /// scale per weight matrix from its amax), kept as the values those codes dequantize to:
    /// the f32 path then computes exactly what an NVFP4-weight GEMM with the dequantization
    /// scale on the accumulator computes, up to the order of the fp32 sums.
    Nvfp4,
}

impl ExpertFormat {
    pub fn parse(s: &str) -> Option<ExpertFormat> {
        match s {
            "f32" => Some(ExpertFormat::F32),
            "bf16" => Some(ExpertFormat::Bf16),
            "nvfp4" => Some(ExpertFormat::Nvfp4),
            _ => None,
        }
    }
}

/// One weight matrix in `format`: (values as they would be stored, dequantized to f32).
pub fn store_as(m: &Mat, format: ExpertFormat) -> Result<Mat, ModelError> {
    use crate::ops::nvfp4_quantize::{dequantize, quantize, Nvfp4Mode, SfLayout};
    let (rows, cols) = (m.rows(), m.cols());
    let data = m.row_block(0, rows).into_owned();
    let out = match format {
        ExpertFormat::F32 => data,
        ExpertFormat::Bf16 => data.into_iter().map(crate::num::round_bf16).collect(),
        ExpertFormat::Nvfp4 => {
            let q = quantize(&data, rows, cols, None, Nvfp4Mode::Kernel, SfLayout::Linear)
                .map_err(|e| ModelError::Input(format!("NVFP4 experts: {e}")))?;
            dequantize(&q, SfLayout::Linear)
        }
    };
    Ok(Mat::dense(rows, cols, out))
}

impl Model {
    /// Rounds every linear weight except the routed experts and the router gates (fp32 by the
    /// spec) to bf16: Mamba in / out projections, attention q / k / v / o, MLP and shared
    /// expert up / down, the latent projections, the MTP eh_proj and the LM head (the
    /// embeddings when tied). Lazy weights stay lazy ([`Mat::lazy_as`]); dense ones are
    /// rounded in place (round to nearest even). This is the "production" dtype of the decode
    /// floor, and lets the GPU store them in half the bytes with the same results. Returns the
    /// number of matrices converted.
    pub fn set_dense_weights_bf16(&mut self) -> Result<usize, ModelError> {
        fn conv(m: &mut Mat, n: &mut usize) {
            if let Some(l) = m.lazy_as(ExpertFormat::Bf16) {
                *m = l;
            } else if let Some(d) = m.dense_mut() {
                for x in d.iter_mut() {
                    *x = crate::num::round_bf16(*x);
                }
            } else {
                // Already stored in a format (LazyAs): leave it.
                return;
            }
            *n += 1;
        }
        let mut n = 0;
        let mtp = self.mtp.as_mut();
        let (mtp_blocks, eh) = match mtp {
            Some(m) => (Some(m.blocks.iter_mut()), Some(&mut m.eh_proj)),
            None => (None, None),
        };
        if let Some(e) = eh {
            conv(e, &mut n);
        }
        for b in self
            .layers
            .iter_mut()
            .chain(mtp_blocks.into_iter().flatten())
        {
            match &mut b.mixer {
                Mixer::Mamba(w) => {
                    conv(&mut w.in_proj, &mut n);
                    conv(&mut w.out_proj, &mut n);
                }
                Mixer::Attention(w) => {
                    for m in [&mut w.q, &mut w.k, &mut w.v, &mut w.o] {
                        conv(m, &mut n);
                    }
                }
                Mixer::Mlp(w) => {
                    conv(&mut w.up, &mut n);
                    conv(&mut w.down, &mut n);
                }
                Mixer::Moe(w) => {
                    for m in [&mut w.fc1, &mut w.fc2].into_iter().flatten() {
                        conv(m, &mut n);
                    }
                    if let Some(sh) = &mut w.shared {
                        conv(&mut sh.up, &mut n);
                        conv(&mut sh.down, &mut n);
                    }
                }
            }
        }
        match &mut self.lm_head {
            Some(h) => conv(h, &mut n),
            None => conv(&mut self.embed, &mut n),
        }
        Ok(n)
    }

    /// Re-stores every routed expert weight (backbone and MTP MoE layers) in `format`.
    /// Returns the number of matrices converted.
    pub fn set_expert_format(&mut self, format: ExpertFormat) -> Result<usize, ModelError> {
        if format == ExpertFormat::F32 {
            return Ok(0);
        }
        // Converting materialises dense weights: refuse what would not fit a CPU run. Lazy
        // weights (the super preset) stay lazy, stored in `format` ([`Mat::lazy_as`]).
        const MAX_VALUES: usize = 1 << 28;
        let size = |m: &Mat| {
            if m.lazy_as(format).is_some() {
                0
            } else {
                m.rows() * m.cols()
            }
        };
        let total: usize = self
            .layers
            .iter()
            .chain(self.mtp.iter().flat_map(|m| m.blocks.iter()))
            .filter_map(|b| match &b.mixer {
                Mixer::Moe(w) => Some(
                    w.experts
                        .iter()
                        .map(|(u, d)| size(u) + size(d))
                        .sum::<usize>(),
                ),
                _ => None,
            })
            .sum();
        if total > MAX_VALUES {
            return Err(ModelError::Input(format!(
                "{total} routed expert weights are too many to convert on the CPU (limit {MAX_VALUES}); use a pattern with fewer MoE layers or f32 experts"
            )));
        }
        let mut n = 0;
        let mtp_blocks = self.mtp.as_mut().map(|m| m.blocks.iter_mut());
        for b in self
            .layers
            .iter_mut()
            .chain(mtp_blocks.into_iter().flatten())
        {
            if let Mixer::Moe(w) = &mut b.mixer {
                for (up, down) in &mut w.experts {
                    for m in [up, down] {
                        *m = match m.lazy_as(format) {
                            Some(lazy) => lazy,
                            None => store_as(m, format)?,
                        };
                        n += 1;
                    }
                }
            }
        }
        Ok(n)
    }
}
