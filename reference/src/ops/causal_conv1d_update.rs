//! Causal conv1d decode step (SPEC.md "Causal conv1d"), as causal-conv1d's
//! `causal_conv1d_update` / `causal_conv1d_update_ref`, plus the multi-token window outputs
//! used for speculative decoding.
//!
//! Per batch row b (slot = conv_state_indices[b], or b), per channel d, with seq =
//! cat(previous width-1 state columns, x[b, d, :]):
//! out[t] = act(bias[d] + sum_w weight[d, w] * seq[t + w]); f32 accumulation, out in x's dtype.
//!
//! State buffer modes ([`StateBuffer`]):
//! - linear (no `cache_seqlens`): the new state is the last state_len columns of
//!   cat(state, x); the window read is the state's last width-1 columns;
//! - circular (`cache_seqlens`): the state is a ring; the window read is the width-1 entries
//!   before position cache_seqlens % state_len, and x[t] is written at
//!   (cache_seqlens + t) % state_len (mod taken non-negative, as torch.remainder).
//!
//! A negative conv_state_indices entry (pad slot) gives zero output (and zero intermediate
//! windows) and leaves every slot untouched, as causal-conv1d's kernel does.
//! `intermediate_conv_window` (batch, seqlen, dim, width-1), given when x is 3-D: the window
//! after token t, oldest first (what the state's last width-1 columns would be had the update
//! stopped at t).

use super::causal_conv1d_fn::{
    activation_param, bias_arg, read_activation, read_bias, read_weight, weight_arg, Activation,
};
use crate::op::{outputs, ArgSpec, Inputs, OpDef, OpError, Params};
use crate::tensor::{Tensor, TensorMap};

/// How the conv state is addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateBuffer<'a> {
    /// Shift register: the newest column is the last one.
    Linear,
    /// Ring buffer; `cache_seqlens[b]` (batch,) is the number of tokens already written.
    Circular(&'a [i64]),
}

/// Sizes of one update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpdateDims {
    pub batch: usize,
    pub dim: usize,
    pub seqlen: usize,
    pub width: usize,
    /// Number of state slots (conv_state's first dimension).
    pub slots: usize,
    pub state_len: usize,
}

/// Outputs of the update (the state is updated in place).
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateOutput {
    /// out: (batch, dim, seqlen)
    pub out: Vec<f32>,
    /// intermediate_conv_window: (batch, seqlen, dim, width - 1)
    pub intermediate: Vec<f32>,
}

/// One update step over `seqlen` tokens.
/// - `x`: (batch, dim, seqlen)
/// - `conv_state`: (slots, dim, state_len), state_len >= width - 1, updated in place
/// - `weight`: (dim, width); `bias`: (dim,)
/// - `conv_state_indices`: (batch,) slot per row, negative = pad (zero output, no write)
#[allow(clippy::too_many_arguments)]
pub fn causal_conv1d_update(
    x: &[f32],
    dims: UpdateDims,
    conv_state: &mut [f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    buffer: StateBuffer<'_>,
    conv_state_indices: Option<&[i64]>,
    act: Activation,
) -> Result<UpdateOutput, String> {
    let UpdateDims {
        batch,
        dim,
        seqlen,
        width,
        slots,
        state_len,
    } = dims;
    if width == 0 || state_len + 1 < width {
        return Err(format!(
            "state_len {state_len} must be >= width - 1 = {} (width >= 1)",
            width as i64 - 1
        ));
    }
    if x.len() != batch * dim * seqlen
        || conv_state.len() != slots * dim * state_len
        || weight.len() != dim * width
        || bias.is_some_and(|b| b.len() != dim)
    {
        return Err("slice lengths do not match the dims".into());
    }
    if let StateBuffer::Circular(cs) = buffer {
        if cs.len() != batch {
            return Err(format!(
                "cache_seqlens has {} entries, expected {batch}",
                cs.len()
            ));
        }
    }
    let slot_of = |b: usize| -> Result<Option<usize>, String> {
        match conv_state_indices {
            None => {
                if b < slots {
                    Ok(Some(b))
                } else {
                    Err(format!(
                        "batch row {b} has no state slot: conv_state has {slots}"
                    ))
                }
            }
            Some(ix) => {
                let s = ix[b];
                if s < 0 {
                    Ok(None)
                } else if (s as u64) < slots as u64 {
                    Ok(Some(s as usize))
                } else {
                    Err(format!(
                        "conv_state_indices[{b}] = {s} is out of range: conv_state has {slots} slots"
                    ))
                }
            }
        }
    };
    if let Some(ix) = conv_state_indices {
        if ix.len() != batch {
            return Err(format!(
                "conv_state_indices has {} entries, expected {batch}",
                ix.len()
            ));
        }
    }
    let hist = width - 1;
    let mut out = vec![0f32; batch * dim * seqlen];
    let mut inter = vec![0f32; batch * seqlen * dim * hist];
    let mut seq = vec![0f32; hist + seqlen];
    for b in 0..batch {
        let Some(slot) = slot_of(b)? else {
            continue;
        };
        for d in 0..dim {
            let st =
                &mut conv_state[(slot * dim + d) * state_len..(slot * dim + d + 1) * state_len];
            let xr = &x[(b * dim + d) * seqlen..(b * dim + d + 1) * seqlen];
            match buffer {
                StateBuffer::Linear => {
                    seq[..hist].copy_from_slice(&st[state_len - hist..]);
                    seq[hist..].copy_from_slice(xr);
                    // New state = last state_len columns of cat(state, x).
                    if seqlen >= state_len {
                        st.copy_from_slice(&xr[seqlen - state_len..]);
                    } else {
                        st.copy_within(seqlen.., 0);
                        st[state_len - seqlen..].copy_from_slice(xr);
                    }
                }
                StateBuffer::Circular(cs) => {
                    let pos = cs[b];
                    let sl = state_len as i64;
                    for (k, v) in seq[..hist].iter_mut().enumerate() {
                        let i = (pos - hist as i64 + k as i64).rem_euclid(sl);
                        *v = st[i as usize];
                    }
                    seq[hist..].copy_from_slice(xr);
                    for (t, &v) in xr.iter().enumerate() {
                        st[(pos + t as i64).rem_euclid(sl) as usize] = v;
                    }
                }
            }
            let w = &weight[d * width..(d + 1) * width];
            let b0 = bias.map_or(0.0, |v| v[d]);
            let orow = &mut out[(b * dim + d) * seqlen..(b * dim + d + 1) * seqlen];
            for (t, o) in orow.iter_mut().enumerate() {
                let win = &seq[t..t + width];
                let mut acc = b0;
                for k in 0..width {
                    acc += w[k] * win[k];
                }
                *o = act.apply(acc);
                let dst = ((b * seqlen + t) * dim + d) * hist;
                inter[dst..dst + hist].copy_from_slice(&seq[t + 1..t + 1 + hist]);
            }
        }
    }
    Ok(UpdateOutput {
        out,
        intermediate: inter,
    })
}

pub fn def() -> OpDef {
    OpDef {
        name: "causal_conv1d_update",
        summary: "Causal conv1d decode step (one or several tokens) on a conv state",
        inputs: vec![
            ArgSpec::req(
                "x",
                "(batch, dim) or (batch, dim, seqlen)",
                "f32|bf16|f16",
                "new tokens",
            ),
            ArgSpec::req(
                "conv_state",
                "(batch|cache, dim, state_len >= width - 1)",
                "f32|bf16|f16",
                "conv window per slot (updated)",
            ),
            weight_arg(),
            bias_arg(),
            ArgSpec::opt(
                "cache_seqlens",
                "(batch,)",
                "i32|i64",
                "tokens already in the state: makes conv_state a ring buffer",
            ),
            ArgSpec::opt(
                "conv_state_indices",
                "(batch,)",
                "i32|i64",
                "state slot per row; negative = pad (zero output, slot untouched)",
            ),
        ],
        params: vec![activation_param()],
        outputs: vec![
            ArgSpec::req("out", "x's shape", "x's dtype", "output"),
            ArgSpec::req(
                "conv_state",
                "conv_state's shape",
                "conv_state's dtype",
                "updated state",
            ),
            ArgSpec::opt(
                "intermediate_conv_window",
                "(batch, seqlen, dim, width - 1)",
                "conv_state's dtype",
                "window after each token, oldest first (only when x is 3-D)",
            ),
        ],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("causal_conv1d_update", inputs);
    let xt = in_.req("x")?;
    let multi = xt.rank() == 3;
    let (xt, x) = in_.float("x", if multi { 3 } else { 2 })?;
    let (batch, dim) = (xt.shape[0], xt.shape[1]);
    let seqlen = if multi { xt.shape[2] } else { 1 };
    let (st, mut state) = in_.float("conv_state", 3)?;
    let (slots, state_len) = (st.shape[0], st.shape[2]);
    in_.shape(
        "conv_state",
        st,
        &[slots, dim, state_len],
        "(batch|cache, dim, state_len)",
    )?;
    let (width, w) = read_weight(&in_, dim)?;
    if width == 0 || state_len + 1 < width {
        return Err(in_.err(
            "conv_state",
            format!(
                "state_len {state_len} is smaller than width - 1 = {}; pass a conv_state with \
                 at least width - 1 columns",
                width as i64 - 1
            ),
        ));
    }
    let bias = read_bias(&in_, dim)?;
    let cache_seqlens = match in_.opt_int("cache_seqlens")? {
        None => None,
        Some((t, v)) => {
            in_.shape("cache_seqlens", t, &[batch], "(batch,)")?;
            if let Some(i) = v.iter().position(|&s| s < 0) {
                return Err(in_.err(
                    "cache_seqlens",
                    format!("entry {i} is {} (must be >= 0)", v[i]),
                ));
            }
            Some(v)
        }
    };
    let indices = match in_.opt_int("conv_state_indices")? {
        None => {
            if slots < batch {
                return Err(in_.err(
                    "conv_state",
                    format!(
                        "{slots} slots for {batch} rows; pass conv_state_indices or a state \
                         with batch slots"
                    ),
                ));
            }
            None
        }
        Some((t, v)) => {
            in_.shape("conv_state_indices", t, &[batch], "(batch,)")?;
            if let Some(i) = v.iter().position(|&s| s >= slots as i64) {
                return Err(in_.err(
                    "conv_state_indices",
                    format!(
                        "entry {i} is {} but conv_state has {slots} slots (indices must be < {slots}, or negative for pad rows)",
                        v[i]
                    ),
                ));
            }
            Some(v)
        }
    };
    let act = read_activation(p)?;
    let buffer = match &cache_seqlens {
        None => StateBuffer::Linear,
        Some(v) => StateBuffer::Circular(v),
    };
    let o = causal_conv1d_update(
        &x,
        UpdateDims {
            batch,
            dim,
            seqlen,
            width,
            slots,
            state_len,
        },
        &mut state,
        &w,
        bias.as_deref(),
        buffer,
        indices.as_deref(),
        act,
    )
    .map_err(|m| in_.invalid(m))?;
    let mut m = outputs([
        ("out", Tensor::from_f32_as(&xt.shape, &o.out, xt.dtype())),
        (
            "conv_state",
            Tensor::from_f32_as(&st.shape, &state, st.dtype()),
        ),
    ]);
    if multi {
        m.insert(
            "intermediate_conv_window".into(),
            Tensor::from_f32_as(
                &[batch, seqlen, dim, width - 1],
                &o.intermediate,
                st.dtype(),
            ),
        );
    }
    Ok(m)
}
