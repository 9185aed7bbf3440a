//! Sequential selective scan: the Mamba-2 recurrence applied token by token (the SSU of
//! SPEC.md run over a whole sequence). It is the oracle `ssd_chunk_scan` must equal; same
//! inputs, params (minus `chunk_size`) and outputs.
//!
//! Per (batch, head), in f32, with dt' processed as in `ssd_chunk_scan` (dt_bias, softplus,
//! clamp): s = s * exp(A dt') + dt' B ⊗ x; y = s · C + D x; y *= z sigmoid(z).
//! With seq_idx the state resets to zero where the id changes; the initial state has id 0.

use super::ssd_chunk_scan::{read_ssd, silu, ssd_def, SsdArgs, SsdDims, SsdOutput};
use crate::op::{Inputs, OpDef, OpError, Params};
use crate::tensor::TensorMap;
use rayon::prelude::*;

/// The token-by-token scan. Parallel over (batch, head).
pub fn selective_scan(args: &SsdArgs<'_>) -> Result<SsdOutput, String> {
    args.check()?;
    let SsdDims {
        batch: bt,
        seqlen: l,
        nheads: h,
        headdim: p,
        ngroups: g,
        dstate: n,
    } = args.dims;
    let hpg = h / g;
    let dtp = args.processed_dt();
    // Per (batch, head): y rows (l, p) and the final state (p, n).
    let per_head: Vec<(Vec<f32>, Vec<f32>)> = (0..bt * h)
        .into_par_iter()
        .map(|bh| {
            let (b, hh) = (bh / h, bh % h);
            let gg = hh / hpg;
            let mut s = match args.initial_states {
                Some(v) => v[bh * p * n..(bh + 1) * p * n].to_vec(),
                None => vec![0.0; p * n],
            };
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
        })
        .collect();
    let mut y = vec![0f32; bt * l * h * p];
    let mut final_states = Vec::with_capacity(bt * h * p * n);
    for (bh, (yh, s)) in per_head.iter().enumerate() {
        let (b, hh) = (bh / h, bh % h);
        for t in 0..l {
            let dst = ((b * l + t) * h + hh) * p;
            y[dst..dst + p].copy_from_slice(&yh[t * p..(t + 1) * p]);
        }
        final_states.extend_from_slice(s);
    }
    Ok(SsdOutput { y, final_states })
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
