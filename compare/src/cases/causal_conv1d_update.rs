//! Cases of `causal_conv1d_update` (Mamba-2 decode conv): Super decode (10240 channels, width 4,
//! state_len 3, silu) for batch 64, then rows that each change one thing: ring buffer, pad
//! slots through conv_state_indices, multi-token (MTP verify), longer state, bf16.

use crate::case::{Case, CaseDef};
use crate::gen::Rng;
use reference::{DType, Tensor, TensorMap};

#[derive(Clone, Copy)]
struct Upd {
    batch: usize,
    slots: usize,
    dim: usize,
    seqlen: usize,
    width: usize,
    state_len: usize,
    circular: bool,
    indices: bool,
    dtype: DType,
}

const SUPER: Upd = Upd {
    batch: 64,
    slots: 64,
    dim: 10240,
    seqlen: 0, // 0 = 2-D x (one token)
    width: 4,
    state_len: 3,
    circular: false,
    indices: false,
    dtype: DType::F32,
};

fn case(u: Upd, what: &str) -> Box<dyn Case> {
    let e = u.dtype.size() as u64;
    let l = u.seqlen.max(1);
    let bytes = e * (2 * u.batch * u.dim * l + 2 * u.batch * u.dim * u.state_len) as u64;
    CaseDef::new("causal_conv1d_update", move |seed| {
        let mut r = Rng::new(seed);
        let mut m = TensorMap::new();
        let xs: Vec<usize> = if u.seqlen == 0 {
            vec![u.batch, u.dim]
        } else {
            vec![u.batch, u.dim, u.seqlen]
        };
        m.insert("x".into(), r.normal_tensor(&xs, 1.0, u.dtype));
        m.insert(
            "conv_state".into(),
            r.normal_tensor(&[u.slots, u.dim, u.state_len], 1.0, u.dtype),
        );
        m.insert(
            "weight".into(),
            r.normal_tensor(&[u.dim, u.width], 0.5, u.dtype),
        );
        m.insert("bias".into(), r.normal_tensor(&[u.dim], 0.5, u.dtype));
        if u.circular {
            let cs = (0..u.batch).map(|_| r.below(1000) as i32).collect();
            m.insert("cache_seqlens".into(), Tensor::from_i32(&[u.batch], cs));
        }
        if u.indices {
            // A permutation of distinct slots, every 5th row a pad row (-1).
            let mut slots: Vec<i32> = (0..u.slots as i32).collect();
            for i in (1..slots.len()).rev() {
                slots.swap(i, r.below(i as u64 + 1) as usize);
            }
            let idx = (0..u.batch)
                .map(|b| if b % 5 == 3 { -1 } else { slots[b] })
                .collect();
            m.insert(
                "conv_state_indices".into(),
                Tensor::from_i32(&[u.batch], idx),
            );
        }
        m
    })
    .var("what", what)
    .var("B", u.batch)
    .var("dim", u.dim)
    .var("L", u.seqlen)
    .var("w", u.width)
    .var("state_len", u.state_len)
    .var("dtype", u.dtype)
    .param("activation", "silu")
    .model("Nemotron 3 Super Mamba-2 conv1d (decode)")
    .cost(bytes, 2 * (u.batch * u.dim * l * u.width) as u64)
    .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        case(SUPER, "super"),
        case(
            Upd {
                circular: true,
                state_len: 8,
                ..SUPER
            },
            "circular",
        ),
        case(
            Upd {
                slots: 100,
                indices: true,
                ..SUPER
            },
            "pad_slots",
        ),
        case(Upd { seqlen: 4, ..SUPER }, "multi_token"),
        case(
            Upd {
                seqlen: 4,
                circular: true,
                state_len: 6,
                slots: 100,
                indices: true,
                ..SUPER
            },
            "multi_token_ring_pad",
        ),
        case(
            Upd {
                state_len: 7,
                ..SUPER
            },
            "long_state",
        ),
        case(
            Upd {
                dtype: DType::BF16,
                ..SUPER
            },
            "bf16",
        ),
        case(
            Upd {
                batch: 3,
                slots: 3,
                dim: 77,
                width: 2,
                state_len: 1,
                ..SUPER
            },
            "width2_odd",
        ),
    ]
}
