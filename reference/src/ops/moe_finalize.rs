//! `moe_finalize`: each token's weighted sum of its k expert outputs, in fp32, back in token
//! order: `out[t] = sum_{j<k} topk_weights[t, j] * expert_out[inverse[t, j]]` (j ascending).

use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, Params};
use crate::tensor::{Tensor, TensorMap};

/// `expert_out` `[M, H]` (permuted rows), `weights` `[T, k]`, `inverse` `[T, k]` -> `[T, H]`.
pub fn finalize(
    expert_out: &[f32],
    h: usize,
    weights: &[f32],
    inverse: &[usize],
    k: usize,
) -> Vec<f32> {
    let t = weights.len() / k.max(1);
    let mut out = vec![0.0f32; t * h];
    for tok in 0..t {
        let o = &mut out[tok * h..(tok + 1) * h];
        for j in 0..k {
            let w = weights[tok * k + j];
            let r = inverse[tok * k + j];
            for (a, b) in o.iter_mut().zip(&expert_out[r * h..(r + 1) * h]) {
                *a += w * b;
            }
        }
    }
    out
}

pub fn def() -> OpDef {
    OpDef {
        name: "moe_finalize",
        summary: "weighted sum of each token's k expert outputs (fp32), back in token order",
        inputs: vec![
            ArgSpec::req(
                "expert_out",
                "(M, H)",
                "f32|bf16",
                "expert outputs in permuted order (M = T*k)",
            ),
            ArgSpec::req("topk_weights", "(T, k)", "f32", "router weights"),
            ArgSpec::req("inverse", "(T, k)", "i32", "from moe_permute"),
        ],
        params: vec![],
        outputs: vec![ArgSpec::req(
            "out",
            "(T, H)",
            "f32",
            "combined expert output",
        )],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, _p: &Params) -> Result<TensorMap, OpError> {
    let inp = Inputs::new("moe_finalize", inputs);
    let (eo, ev) = inp.float("expert_out", 2)?;
    let (wt, wv) = inp.float("topk_weights", 2)?;
    let (it, iv) = inp.int("inverse")?;
    inp.shape("inverse", it, &wt.shape, "topk_weights' shape (T, k)")?;
    let (m, h) = (eo.shape[0], eo.shape[1]);
    let inv: Vec<usize> = iv
        .iter()
        .enumerate()
        .map(|(i, &r)| {
            usize::try_from(r).ok().filter(|&r| r < m).ok_or_else(|| {
                inp.err(
                    "inverse",
                    format!("entry {i} = {r} is outside 0..{m} (expert_out rows)"),
                )
            })
        })
        .collect::<Result<_, _>>()?;
    // k = 0 (no expert per token): every token's sum is empty, zeros of (T, h). `finalize`
    // derives T from the weights, which are empty then (the op_call fuzzer found the mismatch).
    let out = if wt.shape[1] == 0 {
        vec![0.0f32; wt.shape[0] * h]
    } else {
        finalize(&ev, h, &wv, &inv, wt.shape[1])
    };
    Ok(op::outputs([(
        "out",
        Tensor::from_f32(&[wt.shape[0], h], out),
    )]))
}
