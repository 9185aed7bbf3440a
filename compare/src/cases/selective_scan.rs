//! Cases of `selective_scan` (the sequential oracle of `ssd_chunk_scan`): the same inputs at
//! shapes small enough for a token-by-token CPU run.

use super::ssd_chunk_scan::{cost, inputs, Ssd, SUPER};
use crate::case::{Case, CaseDef};
use reference::DType;

fn case(s: Ssd, what: &str) -> Box<dyn Case> {
    let (bytes, flops) = cost(s);
    CaseDef::new("selective_scan", move |seed| inputs(s, seed))
        .var("what", what)
        .var("B", s.batch)
        .var("L", s.seqlen)
        .var("h", s.nheads)
        .var("p", s.headdim)
        .var("g", s.ngroups)
        .var("n", s.dstate)
        .var("dtype", s.dtype)
        .param("dt_softplus", true)
        .model("Nemotron 3 Super Mamba-2 (sequential oracle)")
        .cost(bytes, flops)
        .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let base = Ssd {
        seqlen: 256,
        nheads: 16,
        ngroups: 1,
        ..SUPER
    };
    vec![
        case(base, "super_heads"),
        case(
            Ssd {
                seq_idx: true,
                init: true,
                ..base
            },
            "seq_idx_init",
        ),
        case(
            Ssd {
                batch: 2,
                seqlen: 77,
                nheads: 6,
                headdim: 24,
                ngroups: 3,
                dstate: 40,
                dtype: DType::BF16,
                ..SUPER
            },
            "odd_bf16",
        ),
    ]
}
