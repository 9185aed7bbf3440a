//! `cast`: element-wise format conversions from [`crate::num`], as an op so they can be checked
//! against ml_dtypes / PyTorch goldens.
//!
//! | `to`   | output            | rounding / overflow / NaN                                    |
//! |--------|-------------------|--------------------------------------------------------------|
//! | `bf16` | bf16 tensor       | RNE; overflow -> inf; NaN -> quiet NaN ([`crate::num::bf16`]) |
//! | `f16`  | f16 tensor        | RNE, subnormals kept; overflow -> inf ([`crate::num::f16`])   |
//! | `e4m3` | u8 tensor of E4M3 (`float8_e4m3fn`) bits | RNE; `saturate=true`: overflow and inf clamp to +-448 (PTX satfinite); `saturate=false`: -> NaN 0x7F/0xFF (ml_dtypes, torch) ([`crate::num::e4m3`]) |
//! | `e2m1` | u8 tensor, ONE code per byte (`sign<<3 | index`, not packed) | RNE (ties to even code), saturate to +-6, NaN -> 0x7 ([`crate::num::e2m1`]) |
//!
//! The input is f32, bf16 or f16 (all exact in f32); f64 is rejected because going through
//! f32 would round twice.

use crate::num::{f32_to_bf16_bits, f32_to_e2m1, f32_to_e4m3_bits, f32_to_f16_bits, Saturation};
use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, ParamKind, ParamSpec, Params};
use crate::tensor::{DType, Tensor, TensorMap};

/// Target format of [`cast`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CastTo {
    Bf16,
    F16,
    E4m3(Saturation),
    E2m1,
}

/// Casts f32 values; returns the tensor the op outputs (`shape` is the input's).
pub fn cast(x: &[f32], shape: &[usize], to: CastTo) -> Tensor {
    match to {
        CastTo::Bf16 => {
            Tensor::from_bf16_bits(shape, x.iter().map(|&v| f32_to_bf16_bits(v)).collect())
        }
        CastTo::F16 => {
            Tensor::from_f16_bits(shape, x.iter().map(|&v| f32_to_f16_bits(v)).collect())
        }
        CastTo::E4m3(sat) => {
            Tensor::from_u8(shape, x.iter().map(|&v| f32_to_e4m3_bits(v, sat)).collect())
        }
        CastTo::E2m1 => Tensor::from_u8(shape, x.iter().map(|&v| f32_to_e2m1(v)).collect()),
    }
}

pub fn def() -> OpDef {
    OpDef {
        name: "cast",
        summary: "format conversion: f32/bf16/f16 -> bf16, f16, E4M3 (bits) or E2M1 (one code per byte)",
        inputs: vec![ArgSpec::req("x", "(...)", "f32|bf16|f16", "values to convert")],
        params: vec![
            ParamSpec::new(
                "to",
                ParamKind::Enum(&["bf16", "f16", "e4m3", "e2m1"]),
                None,
                "target format",
            ),
            ParamSpec::new(
                "saturate",
                ParamKind::Bool,
                Some("true"),
                "e4m3 only: true clamps overflow/inf to +-448 (satfinite); false gives NaN (ml_dtypes, torch)",
            ),
        ],
        outputs: vec![ArgSpec::req(
            "out",
            "same shape as x",
            "bf16|f16|u8",
            "bf16/f16 tensor, E4M3 bits, or E2M1 codes (one per byte, low nibble)",
        )],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    const OP: &str = "cast";
    let inp = Inputs::new(OP, inputs);
    let xt = inp.req("x")?;
    inp.dtype("x", xt, &[DType::F32, DType::BF16, DType::F16])?;
    let to = match p.str("to")? {
        "bf16" => CastTo::Bf16,
        "f16" => CastTo::F16,
        "e4m3" => CastTo::E4m3(if p.bool("saturate")? {
            Saturation::Saturate
        } else {
            Saturation::NonSaturating
        }),
        "e2m1" => CastTo::E2m1,
        other => {
            return Err(OpError::Param {
                op: OP.into(),
                name: "to".into(),
                msg: format!("'{other}' is not bf16, f16, e4m3 or e2m1"),
            })
        }
    };
    Ok(op::outputs([(
        "out",
        cast(&xt.to_f32_vec(), &xt.shape, to),
    )]))
}
