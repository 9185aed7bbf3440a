//! `stochastic_round_f16`: f32 -> f16 stochastic rounding given the random bits, element-wise
//! (SPEC.md, SSU stochastic rounding). The algorithm, its NaN/Inf/underflow handling and its
//! bias near the ends of the range are documented in [`crate::num::stochastic_round`]; only
//! the low 13 bits of each `rand` word are read.

use crate::num::stochastic_round_f16_bits;
use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, Params};
use crate::ops::philox::u32_words;
use crate::tensor::{DType, Tensor, TensorMap};

/// `out[i] = stochastic_round_f16_bits(x[i], rand[i])`; `x` and `rand` have equal lengths.
pub fn stochastic_round_f16(x: &[f32], rand: &[u32]) -> Vec<u16> {
    x.iter()
        .zip(rand)
        .map(|(&v, &r)| stochastic_round_f16_bits(v, r))
        .collect()
}

pub fn def() -> OpDef {
    OpDef {
        name: "stochastic_round_f16",
        summary: "f32 -> f16 stochastic rounding from 13 random bits per element (SSU fp16 state)",
        inputs: vec![
            ArgSpec::req("x", "(...)", "f32", "values to round"),
            ArgSpec::req(
                "rand",
                "same shape as x",
                "u32",
                "random words; low 13 bits used",
            ),
        ],
        params: vec![],
        outputs: vec![ArgSpec::req(
            "out",
            "same shape as x",
            "f16",
            "rounded values",
        )],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, _p: &Params) -> Result<TensorMap, OpError> {
    const OP: &str = "stochastic_round_f16";
    let inp = Inputs::new(OP, inputs);
    let xt = inp.req("x")?;
    // bf16/f16 inputs are exact in f32; f64 would be rounded first, which is not this op.
    inp.dtype("x", xt, &[DType::F32, DType::BF16, DType::F16])?;
    let (rs, r) = u32_words(&inp, "rand")?;
    if rs != xt.shape {
        return Err(inp.err(
            "rand",
            format!("shape {rs:?} does not match x's shape {:?}", xt.shape),
        ));
    }
    let out = stochastic_round_f16(&xt.to_f32_vec(), &r);
    Ok(op::outputs([(
        "out",
        Tensor::from_f16_bits(&xt.shape, out),
    )]))
}
