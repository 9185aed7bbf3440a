//! Squared ReLU (Nemotron 3 Super MoE experts): out = max(x, 0)^2 in f32, rounded to x's dtype.

use crate::op::{outputs, ArgSpec, Inputs, OpDef, OpError, Params};
use crate::tensor::{Tensor, TensorMap};

/// relu(v)^2 of one value.
#[inline]
pub fn relu2_scalar(v: f32) -> f32 {
    let r = v.max(0.0);
    r * r
}

/// - `x`: any shape, flattened; returns relu(x)^2 in f32
pub fn relu2(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| relu2_scalar(v)).collect()
}

pub fn def() -> OpDef {
    OpDef {
        name: "relu2",
        summary: "out = relu(x)^2 (f32 math)",
        inputs: vec![ArgSpec::req("x", "(rows, cols)", "f32|bf16|f16", "input")],
        params: vec![],
        outputs: vec![ArgSpec::req("out", "x's shape", "x's dtype", "relu(x)^2")],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, _p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("relu2", inputs);
    let (xt, x) = in_.float("x", 2)?;
    Ok(outputs([(
        "out",
        Tensor::from_f32_as(&xt.shape, &relu2(&x), xt.dtype()),
    )]))
}
