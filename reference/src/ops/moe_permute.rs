//! `moe_permute`: from the router's `topk_indices` to an expert-sorted token order, per-expert
//! counts and offsets, and the inverse map (the first step of a grouped MoE).
//!
//! Order: stable by expert, then token, then slot — row `r` of the permuted order holds
//! `(permuted_token[r], permuted_slot[r])`, and `inverse[t, j]` is the permuted row of token `t`'s
//! slot `j`. Rows of expert `e` are `expert_offsets[e] .. expert_offsets[e+1]`.

use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{Tensor, TensorMap};

/// Largest expert count (the router packs expert ids into 16 bits).
pub const MAX_EXPERTS: usize = 65536;

/// The permutation of one routing decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Permutation {
    /// `[T*k]` source token of each permuted row.
    pub token: Vec<usize>,
    /// `[T*k]` source slot (0..k) of each permuted row.
    pub slot: Vec<usize>,
    /// `[E]` rows per expert.
    pub counts: Vec<usize>,
    /// `[E+1]` first row of each expert (exclusive prefix sum of `counts`).
    pub offsets: Vec<usize>,
    /// `[T*k]` permuted row of `(t, j)` at `t*k + j`.
    pub inverse: Vec<usize>,
}

/// Permutes `topk_indices` (`[T, k]` row-major, values in `0..num_experts`) by expert
/// (counting sort: stable, O(T*k + E)).
pub fn permute(topk_indices: &[i64], k: usize, num_experts: usize) -> Result<Permutation, String> {
    if k == 0 || !topk_indices.len().is_multiple_of(k) {
        return Err(format!(
            "topk_indices has {} entries, not a multiple of k = {k}",
            topk_indices.len()
        ));
    }
    let mut counts = vec![0usize; num_experts];
    for (i, &e) in topk_indices.iter().enumerate() {
        let eu = usize::try_from(e)
            .ok()
            .filter(|&e| e < num_experts)
            .ok_or_else(|| {
                format!(
                    "topk_indices[{}, {}] = {e} is outside 0..{num_experts}",
                    i / k,
                    i % k
                )
            })?;
        counts[eu] += 1;
    }
    let mut offsets = vec![0usize; num_experts + 1];
    for e in 0..num_experts {
        offsets[e + 1] = offsets[e] + counts[e];
    }
    let n = topk_indices.len();
    let mut next = offsets.clone();
    let (mut token, mut slot, mut inverse) = (vec![0; n], vec![0; n], vec![0; n]);
    for (i, &e) in topk_indices.iter().enumerate() {
        let r = next[e as usize];
        next[e as usize] += 1;
        token[r] = i / k;
        slot[r] = i % k;
        inverse[i] = r;
    }
    Ok(Permutation {
        token,
        slot,
        counts,
        offsets,
        inverse,
    })
}

pub fn def() -> OpDef {
    OpDef {
        name: "moe_permute",
        summary:
            "expert-sorted token order, per-expert counts/offsets and the inverse map (stable)",
        inputs: vec![ArgSpec::req(
            "topk_indices",
            "(T, k)",
            "i32|i64",
            "router choices",
        )],
        params: vec![ParamSpec::new(
            "num_experts",
            ParamKind::Int,
            None,
            "E, the number of routed experts",
        )],
        outputs: vec![
            ArgSpec::req(
                "permuted_token",
                "(T*k,)",
                "i32",
                "source token of each permuted row",
            ),
            ArgSpec::req(
                "permuted_slot",
                "(T*k,)",
                "i32",
                "source slot of each permuted row",
            ),
            ArgSpec::req("expert_counts", "(E,)", "i32", "rows per expert"),
            ArgSpec::req(
                "expert_offsets",
                "(E+1,)",
                "i32",
                "first row of each expert",
            ),
            ArgSpec::req("inverse", "(T, k)", "i32", "permuted row of (token, slot)"),
        ],
        run: run_op,
    }
}

fn i32s(v: &[usize]) -> Vec<i32> {
    v.iter().map(|&x| x as i32).collect()
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let inp = Inputs::new("moe_permute", inputs);
    let (t, idx) = inp.int("topk_indices")?;
    inp.rank("topk_indices", t, 2)?;
    let e = p.usize("num_experts")?;
    if e == 0 || e > MAX_EXPERTS {
        return Err(OpError::Param {
            op: "moe_permute".into(),
            name: "num_experts".into(),
            msg: format!("{e} is outside 1..={MAX_EXPERTS} (the router's packed keys hold 16-bit expert ids)"),
        });
    }
    let (tok, k) = (t.shape[0], t.shape[1]);
    if tok.checked_mul(k).is_none_or(|n| n > i32::MAX as usize) {
        return Err(inp.err(
            "topk_indices",
            "more than 2^31 routed rows do not fit the i32 outputs",
        ));
    }
    let perm = permute(&idx, k, e).map_err(|m| inp.err("topk_indices", m))?;
    Ok(op::outputs([
        (
            "permuted_token",
            Tensor::from_i32(&[tok * k], i32s(&perm.token)),
        ),
        (
            "permuted_slot",
            Tensor::from_i32(&[tok * k], i32s(&perm.slot)),
        ),
        ("expert_counts", Tensor::from_i32(&[e], i32s(&perm.counts))),
        (
            "expert_offsets",
            Tensor::from_i32(&[e + 1], i32s(&perm.offsets)),
        ),
        ("inverse", Tensor::from_i32(&[tok, k], i32s(&perm.inverse))),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hand_example() {
        // T=3, k=2, E=4.
        let p = permute(&[2, 0, 0, 3, 2, 1], 2, 4).unwrap();
        assert_eq!(p.counts, vec![2, 1, 2, 1]);
        assert_eq!(p.offsets, vec![0, 2, 3, 5, 6]);
        assert_eq!(p.token, vec![0, 1, 2, 0, 2, 1]);
        assert_eq!(p.slot, vec![1, 0, 1, 0, 0, 1]);
        assert_eq!(p.inverse, vec![3, 0, 1, 5, 4, 2]);
        assert!(permute(&[0, 4], 2, 4).unwrap_err().contains("[0, 1] = 4"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn inverse_undoes_the_permutation(t in 1usize..40, k in 1usize..6, e in 1usize..20, seed in any::<u64>()) {
            let mut s = seed;
            let idx: Vec<i64> = (0..t * k).map(|_| { s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); ((s >> 33) % e as u64) as i64 }).collect();
            let p = permute(&idx, k, e).unwrap();
            for i in 0..t * k {
                let r = p.inverse[i];
                prop_assert_eq!(p.token[r] * k + p.slot[r], i);
                prop_assert!(p.offsets[idx[i] as usize] <= r && r < p.offsets[idx[i] as usize + 1]);
            }
            // Stable: within an expert, (token, slot) increases.
            for e in 0..e {
                for r in p.offsets[e] + 1..p.offsets[e + 1] {
                    prop_assert!((p.token[r - 1], p.slot[r - 1]) < (p.token[r], p.slot[r]));
                }
            }
        }
    }
}
