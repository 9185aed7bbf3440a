//! Causal depthwise conv1d, prefill form (SPEC.md "Causal conv1d"), as causal-conv1d's
//! `causal_conv1d_fn` / `causal_conv1d_ref`.
//!
//! out[b, d, t] = act(bias[d] + sum_w weight[d, w] * x[b, d, t - (width-1) + w]), where the
//! positions before 0 read `initial_states` (or zeros). f32 accumulation; `out` and
//! `final_states` have x's dtype. `final_states` = the last width-1 columns of
//! cat(initial_states, x) (zero-padded on the left when there are fewer), as the reference's
//! `F.pad(x, (width - 1 - x.shape[-1], 0))`.
//!
//! Layout (`layout` param): `channel_first` (default) takes x / out as (batch, dim, seqlen) and
//! initial / final states as (batch, dim, width - 1); `channel_last` (causal-conv1d's
//! channel-last tensors, stride 1 along dim) takes x / out as (batch, seqlen, dim) and the
//! states as (batch, width - 1, dim). The values are the same: the channel-last form is the
//! channel-first one transposed, element for element.

use super::ssd_chunk_scan::silu;
use crate::op::{outputs, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{Tensor, TensorMap};
use rayon::prelude::*;

/// Activation after the convolution (upstream `activation`: None, "silu" or "swish").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    None,
    /// x * sigmoid(x) ("silu" and "swish" upstream).
    Silu,
}

impl Activation {
    pub fn parse(s: &str) -> Option<Activation> {
        match s {
            "none" => Some(Activation::None),
            "silu" | "swish" => Some(Activation::Silu),
            _ => None,
        }
    }
    #[inline]
    pub fn apply(self, v: f32) -> f32 {
        match self {
            Activation::None => v,
            Activation::Silu => silu(v),
        }
    }
}

pub(crate) const ACTIVATIONS: &[&str] = &["none", "silu", "swish"];

pub(crate) fn activation_param() -> ParamSpec {
    ParamSpec::new(
        "activation",
        ParamKind::Enum(ACTIVATIONS),
        Some("none"),
        "none, or silu (= swish) applied after the bias",
    )
}

pub(crate) fn read_activation(p: &Params) -> Result<Activation, OpError> {
    let s = p.str("activation")?;
    Activation::parse(s).ok_or_else(|| OpError::Param {
        op: "causal_conv1d".into(),
        name: "activation".into(),
        msg: format!("'{s}' is not one of none, silu, swish"),
    })
}

/// The `weight` input spec shared by the conv1d ops.
pub(crate) fn weight_arg() -> ArgSpec {
    ArgSpec::req(
        "weight",
        "(dim, width)",
        "f32|bf16|f16",
        "taps, oldest first",
    )
}

/// The optional `bias` input spec shared by the conv1d ops.
pub(crate) fn bias_arg() -> ArgSpec {
    ArgSpec::opt(
        "bias",
        "(dim,)",
        "f32|bf16|f16",
        "added before the activation",
    )
}

/// Reads `weight` (dim, width); returns `(width, values)`.
pub(crate) fn read_weight(in_: &Inputs<'_>, dim: usize) -> Result<(usize, Vec<f32>), OpError> {
    let (wt, w) = in_.float("weight", 2)?;
    let width = wt.shape[1];
    in_.shape("weight", wt, &[dim, width], "(dim, width)")?;
    Ok((width, w))
}

/// Reads the optional `bias` (dim,).
pub(crate) fn read_bias(in_: &Inputs<'_>, dim: usize) -> Result<Option<Vec<f32>>, OpError> {
    match in_.opt_float("bias", 1)? {
        None => Ok(None),
        Some((t, v)) => {
            in_.shape("bias", t, &[dim], "(dim,)")?;
            Ok(Some(v))
        }
    }
}

/// Outputs of the prefill convolution.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvOutput {
    /// out: (batch, dim, seqlen)
    pub out: Vec<f32>,
    /// final_states: (batch, dim, width - 1)
    pub final_states: Vec<f32>,
}

/// The prefill convolution.
/// - `x`: (batch, dim, seqlen)
/// - `weight`: (dim, width), width >= 1
/// - `bias`: (dim,)
/// - `initial_states`: (batch, dim, width - 1), the columns before x
pub fn causal_conv1d_fn(
    x: &[f32],
    (batch, dim, seqlen): (usize, usize, usize),
    weight: &[f32],
    width: usize,
    bias: Option<&[f32]>,
    initial_states: Option<&[f32]>,
    act: Activation,
) -> Result<ConvOutput, String> {
    if width == 0 {
        return Err("width must be >= 1".into());
    }
    let hist = width - 1;
    if x.len() != batch * dim * seqlen
        || weight.len() != dim * width
        || bias.is_some_and(|b| b.len() != dim)
        || initial_states.is_some_and(|s| s.len() != batch * dim * hist)
    {
        return Err(format!(
            "slice lengths do not match batch {batch}, dim {dim}, seqlen {seqlen}, width {width}"
        ));
    }
    // Rows of at least one element so the two row iterators stay aligned when seqlen or
    // width-1 is 0; the padding is removed below.
    let mut out = vec![0f32; batch * dim * seqlen.max(1)];
    let mut final_states = vec![0f32; batch * dim * hist.max(1)];
    out.par_chunks_mut(seqlen.max(1))
        .zip(final_states.par_chunks_mut(hist.max(1)))
        .enumerate()
        .for_each(|(bd, (orow, frow))| {
            let d = bd % dim;
            let xr = &x[bd * seqlen..(bd + 1) * seqlen];
            let w = &weight[d * width..(d + 1) * width];
            let b0 = bias.map_or(0.0, |b| b[d]);
            let init = initial_states.map(|s| &s[bd * hist..(bd + 1) * hist]);
            // Column i of cat(initial_states, x), with i in [0, hist + seqlen).
            let col = |i: usize| -> f32 {
                if i >= hist {
                    xr[i - hist]
                } else {
                    init.map_or(0.0, |s| s[i])
                }
            };
            if seqlen > 0 {
                for (t, o) in orow.iter_mut().enumerate() {
                    let mut acc = b0;
                    if t >= hist {
                        let win = &xr[t - hist..=t];
                        for k in 0..width {
                            acc += w[k] * win[k];
                        }
                    } else {
                        for (k, wk) in w.iter().enumerate() {
                            acc += wk * col(t + k);
                        }
                    }
                    *o = act.apply(acc);
                }
            }
            if hist > 0 {
                let total = hist + seqlen;
                for (k, f) in frow.iter_mut().enumerate() {
                    *f = col(total - hist + k);
                }
            }
        });
    if hist == 0 {
        final_states.clear();
    }
    if seqlen == 0 {
        out.clear();
    }
    Ok(ConvOutput { out, final_states })
}

/// The prefill convolution on channel-last tensors: `x` (batch, seqlen, dim),
/// `initial_states` (batch, width - 1, dim); returns out (batch, seqlen, dim) and
/// final_states (batch, width - 1, dim). [`causal_conv1d_fn`] on the transposed tensors.
pub fn causal_conv1d_fn_channel_last(
    x: &[f32],
    (batch, dim, seqlen): (usize, usize, usize),
    weight: &[f32],
    width: usize,
    bias: Option<&[f32]>,
    initial_states: Option<&[f32]>,
    act: Activation,
) -> Result<ConvOutput, String> {
    if width == 0 {
        return Err("width must be >= 1".into());
    }
    let hist = width - 1;
    if x.len() != batch * dim * seqlen
        || initial_states.is_some_and(|s| s.len() != batch * dim * hist)
    {
        return Err(format!(
            "slice lengths do not match batch {batch}, dim {dim}, seqlen {seqlen}, width {width}"
        ));
    }
    let xf = swap_last_two(x, batch, seqlen, dim);
    let init = initial_states.map(|s| swap_last_two(s, batch, hist, dim));
    let o = causal_conv1d_fn(
        &xf,
        (batch, dim, seqlen),
        weight,
        width,
        bias,
        init.as_deref(),
        act,
    )?;
    Ok(ConvOutput {
        out: swap_last_two(&o.out, batch, dim, seqlen),
        final_states: swap_last_two(&o.final_states, batch, dim, hist),
    })
}

/// (batch, a, b) row-major -> (batch, b, a).
pub fn swap_last_two(v: &[f32], batch: usize, a: usize, b: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for n in 0..batch {
        let (src, dst) = (
            &v[n * a * b..(n + 1) * a * b],
            &mut out[n * a * b..(n + 1) * a * b],
        );
        for i in 0..a {
            for j in 0..b {
                dst[j * a + i] = src[i * b + j];
            }
        }
    }
    out
}

/// The `layout` param of the conv1d prefill op.
pub(crate) const LAYOUTS: &[&str] = &["channel_first", "channel_last"];

/// Whether the `layout` param (channel_first or channel_last) is channel-last.
pub fn read_channel_last(p: &Params) -> Result<bool, OpError> {
    match p.str("layout")? {
        "channel_first" => Ok(false),
        "channel_last" => Ok(true),
        other => Err(OpError::Param {
            op: "causal_conv1d_fn".into(),
            name: "layout".into(),
            msg: format!("'{other}' is not channel_first or channel_last"),
        }),
    }
}

pub fn def() -> OpDef {
    OpDef {
        name: "causal_conv1d_fn",
        summary: "Causal depthwise conv1d over a sequence (prefill), as causal_conv1d_fn",
        inputs: vec![
            ArgSpec::req(
                "x",
                "(batch, dim, seqlen)",
                "f32|bf16|f16",
                "input; (batch, seqlen, dim) with layout channel_last",
            ),
            weight_arg(),
            bias_arg(),
            ArgSpec::opt(
                "initial_states",
                "(batch, dim, width - 1)",
                "f32|bf16|f16",
                "the width-1 columns before x (zeros when absent); (batch, width - 1, dim) with layout channel_last",
            ),
        ],
        params: vec![
            activation_param(),
            ParamSpec::new(
                "layout",
                ParamKind::Enum(LAYOUTS),
                Some("channel_first"),
                "channel_first: x / out (batch, dim, seqlen); channel_last: (batch, seqlen, dim), the states (batch, width - 1, dim)",
            ),
        ],
        outputs: vec![
            ArgSpec::req(
                "out",
                "(batch, dim, seqlen)",
                "x's dtype",
                "output, in x's layout",
            ),
            ArgSpec::req(
                "final_states",
                "(batch, dim, width - 1)",
                "x's dtype",
                "last width-1 columns of cat(initial_states, x), in the states' layout",
            ),
        ],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("causal_conv1d_fn", inputs);
    let cl = read_channel_last(p)?;
    let (xt, x) = in_.float("x", 3)?;
    let (batch, dim, seqlen) = if cl {
        (xt.shape[0], xt.shape[2], xt.shape[1])
    } else {
        (xt.shape[0], xt.shape[1], xt.shape[2])
    };
    let (width, w) = read_weight(&in_, dim)?;
    if width == 0 {
        return Err(in_.err(
            "weight",
            "width is 0; pass weight of shape (dim, width >= 1)",
        ));
    }
    let bias = read_bias(&in_, dim)?;
    let hist = width - 1;
    let (state_shape, state_pat) = if cl {
        (
            [batch, hist, dim],
            "(batch, width - 1, dim) (layout channel_last)",
        )
    } else {
        ([batch, dim, hist], "(batch, dim, width - 1)")
    };
    let init = match in_.opt_float("initial_states", 3)? {
        None => None,
        Some((t, v)) => {
            in_.shape("initial_states", t, &state_shape, state_pat)?;
            Some(v)
        }
    };
    let act = read_activation(p)?;
    let conv = if cl {
        causal_conv1d_fn_channel_last
    } else {
        causal_conv1d_fn
    };
    let o = conv(
        &x,
        (batch, dim, seqlen),
        &w,
        width,
        bias.as_deref(),
        init.as_deref(),
        act,
    )
    .map_err(|m| in_.invalid(m))?;
    let out_shape = if cl {
        [batch, seqlen, dim]
    } else {
        [batch, dim, seqlen]
    };
    Ok(outputs([
        ("out", Tensor::from_f32_as(&out_shape, &o.out, xt.dtype())),
        (
            "final_states",
            Tensor::from_f32_as(&state_shape, &o.final_states, xt.dtype()),
        ),
    ]))
}
