//! Cases of `causal_conv1d_fn` (Mamba-2 prefill conv): the Super conv (d_inner + 2 ngroups
//! dstate = 10240 channels, width 4, silu), then rows that each change one thing.

use crate::case::{Case, CaseDef};
use crate::gen::Rng;
use reference::{DType, TensorMap};

#[derive(Clone, Copy)]
struct Conv {
    batch: usize,
    dim: usize,
    seqlen: usize,
    width: usize,
    init: bool,
    bias: bool,
    silu: bool,
    dtype: DType,
    /// layout channel_last: x (batch, seqlen, dim), states (batch, width - 1, dim)
    cl: bool,
}

const SUPER: Conv = Conv {
    batch: 1,
    dim: 10240,
    seqlen: 2048,
    width: 4,
    init: false,
    bias: true,
    silu: true,
    dtype: DType::F32,
    cl: false,
};

fn case(c: Conv, what: &str) -> Box<dyn Case> {
    let e = c.dtype.size() as u64;
    let n = (c.batch * c.dim * c.seqlen) as u64;
    CaseDef::new("causal_conv1d_fn", move |seed| {
        let mut r = Rng::new(seed);
        let mut m = TensorMap::new();
        let xs = if c.cl {
            [c.batch, c.seqlen, c.dim]
        } else {
            [c.batch, c.dim, c.seqlen]
        };
        m.insert("x".into(), r.normal_tensor(&xs, 1.0, c.dtype));
        m.insert(
            "weight".into(),
            r.normal_tensor(&[c.dim, c.width], 0.5, c.dtype),
        );
        if c.bias {
            m.insert("bias".into(), r.normal_tensor(&[c.dim], 0.5, c.dtype));
        }
        if c.init {
            let ss = if c.cl {
                [c.batch, c.width - 1, c.dim]
            } else {
                [c.batch, c.dim, c.width - 1]
            };
            m.insert("initial_states".into(), r.normal_tensor(&ss, 1.0, c.dtype));
        }
        m
    })
    .var("what", what)
    .var("B", c.batch)
    .var("dim", c.dim)
    .var("L", c.seqlen)
    .var("w", c.width)
    .var("dtype", c.dtype)
    .param("activation", if c.silu { "silu" } else { "none" })
    .param(
        "layout",
        if c.cl {
            "channel_last"
        } else {
            "channel_first"
        },
    )
    .model("Nemotron 3 Super Mamba-2 conv1d (prefill)")
    .cost(2 * n * e, 2 * n * c.width as u64)
    .boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    vec![
        case(SUPER, "super"),
        case(
            Conv {
                init: true,
                ..SUPER
            },
            "initial_states",
        ),
        case(
            Conv {
                silu: false,
                bias: false,
                ..SUPER
            },
            "no_act_no_bias",
        ),
        case(
            Conv {
                dtype: DType::BF16,
                ..SUPER
            },
            "bf16",
        ),
        case(
            Conv {
                batch: 3,
                dim: 1000 + 3,
                seqlen: 2,
                width: 4,
                init: true,
                ..SUPER
            },
            "short",
        ),
        case(
            Conv {
                batch: 2,
                dim: 77,
                seqlen: 129,
                width: 2,
                ..SUPER
            },
            "width2_odd",
        ),
        case(
            Conv {
                batch: 2,
                dim: 77,
                seqlen: 129,
                width: 3,
                init: true,
                ..SUPER
            },
            "width3_odd",
        ),
        // Channel-last (causal-conv1d's stride-1-along-dim tensors): the Super conv, bf16 with
        // initial states, and an odd short one.
        case(Conv { cl: true, ..SUPER }, "channel_last"),
        case(
            Conv {
                cl: true,
                init: true,
                dtype: DType::BF16,
                ..SUPER
            },
            "channel_last_bf16_init",
        ),
        case(
            Conv {
                batch: 2,
                dim: 77,
                seqlen: 129,
                width: 3,
                init: true,
                cl: true,
                ..SUPER
            },
            "channel_last_odd",
        ),
    ]
}
