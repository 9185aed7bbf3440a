//! `philox`: Philox-4x32-R as an op (Random123 `philox4x32_R`; SPEC.md, Philox-4x32), one
//! block per row: `out[i] = philox4x32(counter[i], key[i], rounds)`. The algorithm lives in
//! [`crate::num::philox`]; this op exists so Random123's known-answer vectors and the GPU's
//! Philox can be checked through `duet check`.

use crate::num::philox4x32;
use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{Tensor, TensorMap};

/// Largest accepted round count (Random123 instantiates up to 16; more is pointless).
pub const MAX_ROUNDS: u32 = 64;

/// Applies Philox to each row. `counters`: `[n]` 4-word counters; `keys`: `[n]` 2-word keys.
/// Returns `[n]` 4-word outputs.
pub fn philox_rows(counters: &[[u32; 4]], keys: &[[u32; 2]], rounds: u32) -> Vec<[u32; 4]> {
    counters
        .iter()
        .zip(keys)
        .map(|(c, k)| philox4x32(*c, *k, rounds))
        .collect()
}

/// Reads an integer tensor as u32 words, rejecting values outside `0..2^32`.
pub(crate) fn u32_words(inp: &Inputs, name: &str) -> Result<(Vec<usize>, Vec<u32>), OpError> {
    let (t, v) = inp.int(name)?;
    let mut out = Vec::with_capacity(v.len());
    for (i, &x) in v.iter().enumerate() {
        let w = u32::try_from(x).map_err(|_| {
            inp.err(
                name,
                format!("element {i} = {x} is not a 32-bit unsigned word; store it as u32"),
            )
        })?;
        out.push(w);
    }
    Ok((t.shape.clone(), out))
}

pub fn def() -> OpDef {
    OpDef {
        name: "philox",
        summary: "Philox-4x32-R counter-based random numbers, one 4-word block per row",
        inputs: vec![
            ArgSpec::req("counter", "(N, 4)", "u32", "counter words c0..c3"),
            ArgSpec::req("key", "(N, 2)", "u32", "key words k0, k1"),
        ],
        params: vec![ParamSpec::new(
            "rounds",
            ParamKind::Int,
            Some("10"),
            "rounds (Random123/cuRAND default 10; Nemotron recipes 5)",
        )],
        outputs: vec![ArgSpec::req("out", "(N, 4)", "u32", "Philox output words")],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    const OP: &str = "philox";
    let inp = Inputs::new(OP, inputs);
    let (cs, c) = u32_words(&inp, "counter")?;
    let (ks, k) = u32_words(&inp, "key")?;
    if cs.len() != 2 || cs[1] != 4 {
        return Err(inp.err("counter", format!("shape {cs:?} is not (N, 4)")));
    }
    let n = cs[0];
    if ks != [n, 2] {
        return Err(inp.err(
            "key",
            format!("shape {ks:?} does not match (N, 2) = [{n}, 2] (N from 'counter')"),
        ));
    }
    let rounds = p.usize("rounds")?;
    if rounds > MAX_ROUNDS as usize {
        return Err(OpError::Param {
            op: OP.into(),
            name: "rounds".into(),
            msg: format!("{rounds} is more than {MAX_ROUNDS}; Philox uses 5 to 10"),
        });
    }
    let counters: Vec<[u32; 4]> = c
        .chunks_exact(4)
        .map(|w| [w[0], w[1], w[2], w[3]])
        .collect();
    let keys: Vec<[u32; 2]> = k.chunks_exact(2).map(|w| [w[0], w[1]]).collect();
    let out: Vec<u32> = philox_rows(&counters, &keys, rounds as u32)
        .into_iter()
        .flatten()
        .collect();
    Ok(op::outputs([("out", Tensor::from_u32(&[n, 4], out))]))
}
