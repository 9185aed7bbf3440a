//! `mamba_cache_promote`: after speculative verification, accepting `j` draft tokens of row `b`
//! copies step `j-1` of the multi-token outputs into the row's cache slot (SPEC.md: "Acceptance
//! of j tokens promotes intermediate slot j-1 to the main state (and the conv window)").
//!
//! - `state[slot] = intermediate_states[b, j-1]` (raw copy in the state dtype; int16 also copies
//!   `intermediate_state_scale[b, j-1]` into `state_scale[slot]`);
//! - `conv_state[slot] = intermediate_conv_window[b, j-1]` (the last width-1 inputs after token
//!   j-1, oldest first);
//! - `j = 0` leaves the slot untouched; a row whose slot is `pad_slot_id` is skipped.
//!
//! The slot of row b is `state_batch_indices[b]` (or b).

use super::selective_state_update::{relabel, resolve_slots};
use crate::op::{ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{DType, Data, Tensor, TensorMap};

const OP: &str = "mamba_cache_promote";

/// Copies `src[b, j-1]` (each of `per_slot` elements; `src` is (batch, T, per_slot)) into
/// `cache[slot]` for every row with `j = accepted[b] > 0`. `slots[b] = None` skips the row.
pub fn promote<T: Copy>(
    cache: &mut [T],
    src: &[T],
    per_slot: usize,
    t_len: usize,
    accepted: &[i64],
    slots: &[Option<usize>],
) -> Result<(), OpError> {
    let batch = slots.len();
    if accepted.len() != batch
        || src.len() != batch * t_len * per_slot
        || cache.len()
            < slots
                .iter()
                .flatten()
                .map(|s| (s + 1) * per_slot)
                .max()
                .unwrap_or(0)
    {
        return Err(OpError::Invalid {
            op: OP.into(),
            msg: format!(
                "sizes disagree: {} accepted counts, {} slots, source {} (want batch*T*{per_slot}), cache {}",
                accepted.len(),
                batch,
                src.len(),
                cache.len()
            ),
        });
    }
    for (b, (&j, slot)) in accepted.iter().zip(slots).enumerate() {
        if j < 0 || j as u64 > t_len as u64 {
            return Err(OpError::Input {
                op: OP.into(),
                name: "num_accepted".into(),
                msg: format!("num_accepted[{b}] = {j} is outside 0..={t_len} (T)"),
            });
        }
        if let (Some(s), true) = (slot, j > 0) {
            let from = (b * t_len + j as usize - 1) * per_slot;
            cache[s * per_slot..][..per_slot].copy_from_slice(&src[from..][..per_slot]);
        }
    }
    Ok(())
}

/// [`promote`] on typed tensor data of the same dtype.
fn promote_data(
    dst: &mut Data,
    src: &Data,
    per_slot: usize,
    t_len: usize,
    accepted: &[i64],
    slots: &[Option<usize>],
) -> Result<(), OpError> {
    macro_rules! go {
        ($($v:ident),*) => {
            match (dst, src) {
                $((Data::$v(a), Data::$v(b)) => promote(a, b, per_slot, t_len, accepted, slots),)*
                _ => Err(OpError::Invalid {
                    op: OP.into(),
                    msg: "cache and intermediate tensors have different dtypes; they must match".into(),
                }),
            }
        };
    }
    go!(Bool, U8, I8, I16, U16, I32, U32, I64, F16, BF16, F32, F64)
}

pub fn def() -> OpDef {
    OpDef {
        name: OP,
        summary:
            "accept j draft tokens: copy multi-token step j-1 into the SSM state and conv window",
        inputs: vec![
            ArgSpec::req(
                "state",
                "(cache, nheads, dim, dstate)",
                "any",
                "SSM state cache",
            ),
            ArgSpec::req(
                "intermediate_states",
                "(batch, T, nheads, dim, dstate)",
                "state's dtype",
                "state after every step (selective_state_update_multi_token)",
            ),
            ArgSpec::req(
                "conv_state",
                "(cache, dim, width-1)",
                "any",
                "conv window cache",
            ),
            ArgSpec::req(
                "intermediate_conv_window",
                "(batch, T, dim, width-1)",
                "conv_state's dtype",
                "conv window after every token",
            ),
            ArgSpec::req("num_accepted", "(batch,)", "i32|i64", "j in 0..=T per row"),
            ArgSpec::opt(
                "state_batch_indices",
                "(batch,)",
                "i32|i64",
                "cache slot of each row; pad_slot_id rows are skipped",
            ),
            ArgSpec::opt(
                "state_scale",
                "(cache, nheads, dim)",
                "f32",
                "int16 state only",
            ),
            ArgSpec::opt(
                "intermediate_state_scale",
                "(batch, T, nheads, dim)",
                "f32",
                "int16 state only",
            ),
        ],
        params: vec![ParamSpec::new(
            "pad_slot_id",
            ParamKind::Int,
            Some("-1"),
            "a state_batch_indices entry equal to this marks a padded row (skipped)",
        )],
        outputs: vec![
            ArgSpec::req(
                "state",
                "(cache, nheads, dim, dstate)",
                "state's dtype",
                "promoted",
            ),
            ArgSpec::req(
                "conv_state",
                "(cache, dim, width-1)",
                "conv's dtype",
                "promoted",
            ),
            ArgSpec::opt("state_scale", "(cache, nheads, dim)", "f32", "int16 only"),
        ],
        run: run_op,
    }
}

/// Validated inputs of the op (shared with the GPU implementation, which must accept and
/// reject exactly what the reference does).
pub struct PromoteArgs<'a> {
    pub state: &'a Tensor,
    pub intermediate_states: &'a Tensor,
    pub conv_state: &'a Tensor,
    pub intermediate_conv_window: &'a Tensor,
    pub num_accepted: Vec<i64>,
    pub state_batch_indices: Option<Vec<i64>>,
    pub pad_slot_id: i64,
    /// Row b's slot (None: pad row).
    pub slots: Vec<Option<usize>>,
    /// (slots, nheads, dim, dstate) of the state; (batch, T) of the drafts; (dim, width-1) of the conv window.
    pub nslots: usize,
    pub per_slot: usize,
    pub batch: usize,
    pub t_len: usize,
    pub conv_per_slot: usize,
    /// int16 only: (state_scale, intermediate_state_scale), validated; `scale_per_slot` = nheads*dim.
    pub scales: Option<(&'a Tensor, &'a Tensor)>,
    pub scale_per_slot: usize,
}

/// Validates every input of `mamba_cache_promote` (shapes, dtypes, num_accepted in 0..=T,
/// slots, the int16 scales).
pub fn parse<'a>(inp: &Inputs<'a>, p: &Params) -> Result<PromoteArgs<'a>, OpError> {
    let state = inp.req("state")?;
    inp.rank("state", state, 4)?;
    let (nslots, nh, dim, ds) = (
        state.shape[0],
        state.shape[1],
        state.shape[2],
        state.shape[3],
    );
    let inter = inp.req("intermediate_states")?;
    inp.rank("intermediate_states", inter, 5)?;
    let (batch, t_len) = (inter.shape[0], inter.shape[1]);
    inp.shape(
        "intermediate_states",
        inter,
        &[batch, t_len, nh, dim, ds],
        "(batch, T, nheads, dim, dstate) with the state's nheads, dim, dstate",
    )?;
    inp.dtype("intermediate_states", inter, &[state.dtype()])?;
    let conv = inp.req("conv_state")?;
    inp.rank("conv_state", conv, 3)?;
    let (cdim, w1) = (conv.shape[1], conv.shape[2]);
    if conv.shape[0] != nslots {
        return Err(inp.err(
            "conv_state",
            format!(
                "has {} slots but state has {nslots}; both caches are indexed by the same slot",
                conv.shape[0]
            ),
        ));
    }
    let win = inp.req("intermediate_conv_window")?;
    inp.shape(
        "intermediate_conv_window",
        win,
        &[batch, t_len, cdim, w1],
        "(batch, T, dim, width-1) with conv_state's dim, width-1",
    )?;
    inp.dtype("intermediate_conv_window", win, &[conv.dtype()])?;
    let (nt, accepted) = inp.int("num_accepted")?;
    inp.shape("num_accepted", nt, &[batch], "(batch,)")?;
    for (b, &j) in accepted.iter().enumerate() {
        if j < 0 || j as u64 > t_len as u64 {
            return Err(inp.err(
                "num_accepted",
                format!("num_accepted[{b}] = {j} is outside 0..={t_len} (T)"),
            ));
        }
    }
    let sbi = match inp.opt_int("state_batch_indices")? {
        None => None,
        Some((t, v)) => {
            inp.shape("state_batch_indices", t, &[batch], "(batch,)")?;
            Some(v)
        }
    };
    let pad_slot_id = p.int("pad_slot_id")?;
    let slots =
        resolve_slots(sbi.as_deref(), batch, nslots, pad_slot_id).map_err(|e| relabel(e, OP))?;
    let scales = match (
        state.dtype() == DType::I16,
        inp.get("state_scale"),
        inp.get("intermediate_state_scale"),
    ) {
        (true, Some(s), Some(is)) => {
            inp.dtype("state_scale", s, &[DType::F32])?;
            inp.shape("state_scale", s, &[nslots, nh, dim], "(cache, nheads, dim)")?;
            inp.dtype("intermediate_state_scale", is, &[DType::F32])?;
            inp.shape(
                "intermediate_state_scale",
                is,
                &[batch, t_len, nh, dim],
                "(batch, T, nheads, dim)",
            )?;
            Some((s, is))
        }
        (true, _, _) => {
            return Err(inp
                .invalid("an int16 state needs both 'state_scale' and 'intermediate_state_scale'"))
        }
        (false, None, None) => None,
        (false, _, _) => {
            return Err(inp.invalid(format!(
                "state_scale / intermediate_state_scale apply to an int16 state only; this \
                 state is {}",
                state.dtype()
            )))
        }
    };
    Ok(PromoteArgs {
        state,
        intermediate_states: inter,
        conv_state: conv,
        intermediate_conv_window: win,
        num_accepted: accepted,
        state_batch_indices: sbi,
        pad_slot_id,
        slots,
        nslots,
        per_slot: nh * dim * ds,
        batch,
        t_len,
        conv_per_slot: cdim * w1,
        scales,
        scale_per_slot: nh * dim,
    })
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let inp = Inputs::new(OP, inputs);
    let a = parse(&inp, p)?;
    let mut new_state = a.state.clone();
    promote_data(
        &mut new_state.data,
        &a.intermediate_states.data,
        a.per_slot,
        a.t_len,
        &a.num_accepted,
        &a.slots,
    )?;
    let mut new_conv = a.conv_state.clone();
    promote_data(
        &mut new_conv.data,
        &a.intermediate_conv_window.data,
        a.conv_per_slot,
        a.t_len,
        &a.num_accepted,
        &a.slots,
    )?;
    let mut m: TensorMap = [
        ("state".to_string(), new_state),
        ("conv_state".to_string(), new_conv),
    ]
    .into_iter()
    .collect();
    if let Some((s, is)) = a.scales {
        let mut ns: Tensor = s.clone();
        promote_data(
            &mut ns.data,
            &is.data,
            a.scale_per_slot,
            a.t_len,
            &a.num_accepted,
            &a.slots,
        )?;
        m.insert("state_scale".into(), ns);
    }
    Ok(m)
}
