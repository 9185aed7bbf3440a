//! Sequential selective scan: the Mamba-2 recurrence applied token by token (the SSU of
//! SPEC.md run over a whole sequence). It is the oracle `ssd_chunk_scan` must equal; same
//! inputs, params (minus `chunk_size`) and outputs.
//!
//! Per (batch, head), in f32, with dt' processed as in `ssd_chunk_scan` (dt_bias, softplus,
//! clamp): s = s * exp(A dt') + dt' B ⊗ x; y = s · C + D x; y *= z sigmoid(z).
//! With seq_idx the state resets to zero where the id changes; the initial state has id 0.

use super::ssd_chunk_scan::{read_ssd, scan_per_head, silu, ssd_def, SsdArgs, SsdDims, SsdOutput};
use crate::op::{Inputs, OpDef, OpError, Params};
use crate::tensor::TensorMap;

/// The token-by-token scan. Parallel over (batch, head).
pub fn selective_scan(args: &SsdArgs<'_>) -> Result<SsdOutput, String> {
    args.check()?;
    let SsdDims {
        seqlen: l,
        nheads: h,
        headdim: p,
        ngroups: g,
        dstate: n,
        ..
    } = args.dims;
    let hpg = h / g;
    let dtp = args.processed_dt();
    Ok(scan_per_head(args, |b, hh, mut s| {
        let gg = hh / hpg;
        let mut cur_seq = 0i64;
        let mut yh = vec![0f32; l * p];
        for t in 0..l {
            if let Some(sq) = args.seq_idx {
                if sq[b * l + t] != cur_seq {
                    s.fill(0.0);
                    cur_seq = sq[b * l + t];
                }
            }
            let dtv = dtp[(b * l + t) * h + hh];
            let da = (args.a[hh] * dtv).exp();
            let bc = ((b * l + t) * g + gg) * n;
            let bv = &args.b[bc..bc + n];
            let cv = &args.c[bc..bc + n];
            let xo = ((b * l + t) * h + hh) * p;
            for k in 0..p {
                let xv = args.x[xo + k];
                let row = &mut s[k * n..(k + 1) * n];
                let mut acc = 0f32;
                for j in 0..n {
                    row[j] = row[j] * da + bv[j] * dtv * xv;
                    acc += row[j] * cv[j];
                }
                if let Some(d) = args.d {
                    acc += d[hh * p + k] * xv;
                }
                if let Some(z) = args.z {
                    acc *= silu(z[xo + k]);
                }
                yh[t * p + k] = acc;
            }
        }
        (yh, s)
    }))
}

pub fn def() -> OpDef {
    ssd_def(
        "selective_scan",
        "Mamba-2 scan token by token (the oracle of ssd_chunk_scan)",
        false,
        run_op,
    )
}

fn run_op(inputs: &TensorMap, p: &Params) -> Result<TensorMap, OpError> {
    let in_ = Inputs::new("selective_scan", inputs);
    let owned = read_ssd(&in_, p)?;
    let out = selective_scan(&owned.args()).map_err(|m| in_.invalid(m))?;
    Ok(owned.outputs(out))
}
