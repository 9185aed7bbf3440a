//! `nvfp4_dequantize`: `x = e2m1 * float(sf) / global_scale` in f32 (SPEC.md, NVFP4). The
//! inverse of [`super::nvfp4_quantize`]; the pure function is
//! [`super::nvfp4_quantize::dequantize`].
//!
//! `sf` is read in the given layout: linear `[rows, cols/16]`, or swizzled128x4
//! `[round_up(rows,128), round_up(cols/16,4)]`; either may also be passed flat (1-D) with the
//! same number of bytes. An E4M3 NaN scale (0x7F / 0xFF) dequantizes its whole block to NaN.

use super::nvfp4_quantize::{dequantize, parse_layout, Nvfp4, LAYOUT_PARAM};
use crate::op::{self, ArgSpec, Inputs, OpDef, OpError, Params};
use crate::tensor::{DType, Tensor, TensorMap};

pub fn def() -> OpDef {
    OpDef {
        name: "nvfp4_dequantize",
        summary: "NVFP4 dequantization: x = e2m1 * float(sf) / global_scale (f32)",
        inputs: vec![
            ArgSpec::req(
                "x_fp4",
                "(rows, cols/2)",
                "u8",
                "packed E2M1 codes, element 2i in the low nibble",
            ),
            ArgSpec::req(
                "sf",
                "(rows, cols/16) | (round_up(rows,128), round_up(cols/16,4)) | flat",
                "u8",
                "E4M3 block scales (bits) in `layout`",
            ),
            ArgSpec::req("global_scale", "(1,)", "f32", "per-tensor encode scale"),
        ],
        params: vec![LAYOUT_PARAM],
        outputs: vec![ArgSpec::req(
            "x",
            "(rows, cols)",
            "f32",
            "dequantized values",
        )],
        run: run_op,
    }
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    const OP: &str = "nvfp4_dequantize";
    let inp = Inputs::new(OP, inputs);
    let xt = inp.req("x_fp4")?;
    inp.rank("x_fp4", xt, 2)?;
    inp.dtype("x_fp4", xt, &[DType::U8])?;
    let (rows, half) = (xt.shape[0], xt.shape[1]);
    let cols = half * 2;
    if cols % 16 != 0 || cols == 0 {
        return Err(inp.err(
            "x_fp4",
            format!(
                "shape {:?} means cols = 2 * {half} = {cols}, which is not a positive multiple of 16",
                xt.shape
            ),
        ));
    }
    let layout = parse_layout(p, OP)?;
    let st = inp.req("sf")?;
    inp.dtype("sf", st, &[DType::U8])?;
    let want = layout.shape(rows, cols);
    let flat_ok = st.rank() == 1 && st.numel() == want[0] * want[1];
    if st.shape != want && !flat_ok {
        return Err(inp.err(
            "sf",
            format!(
                "shape {:?} does not match the {} layout for x_fp4 {:?} (rows = {rows}, cols = {cols}): \
                 expected {:?} or flat [{}]",
                st.shape,
                layout.name(),
                xt.shape,
                want,
                want[0] * want[1]
            ),
        ));
    }
    let (gt, gv) = inp.float("global_scale", 1)?;
    inp.shape("global_scale", gt, &[1], "(1,)")?;
    let q = Nvfp4 {
        x_fp4: xt.as_u8().map(<[u8]>::to_vec).unwrap_or_default(),
        sf: st.as_u8().map(<[u8]>::to_vec).unwrap_or_default(),
        global_scale: gv[0],
        rows,
        cols,
    };
    let x = dequantize(&q, layout);
    Ok(op::outputs([("x", Tensor::from_f32(&[rows, cols], x))]))
}
