//! Cases of `ssd_chunk_scan` (Mamba-2 prefill): the Super shape, then rows that each change one
//! thing (length not a multiple of the chunk, seq_idx, initial states, bf16, small odd shapes).
//! Every row also checks the other chunk sizes against the default one (variants).

use crate::case::{Case, CaseDef, Variant};
use crate::gen::Rng;
use crate::tolerance::Tolerance;
use reference::{DType, Tensor, TensorMap};

/// Shape and options of one row.
#[derive(Clone, Copy)]
pub(crate) struct Ssd {
    pub batch: usize,
    pub seqlen: usize,
    pub nheads: usize,
    pub headdim: usize,
    pub ngroups: usize,
    pub dstate: usize,
    pub seq_idx: bool,
    pub init: bool,
    pub dtype: DType,
}

pub(crate) const SUPER: Ssd = Ssd {
    batch: 1,
    seqlen: 4096,
    nheads: 128,
    headdim: 64,
    ngroups: 8,
    dstate: 128,
    seq_idx: false,
    init: false,
    dtype: DType::F32,
};

/// Seeded inputs as the model feeds them: raw dt around 0 with dt_bias in [-4, -2] and
/// softplus (dt' about 0.02..0.3), A = -exp(U(0, ln 16)), D per head, z gate.
pub(crate) fn inputs(s: Ssd, seed: u64) -> TensorMap {
    let mut r = Rng::new(seed);
    let (b, l, h, p, g, n) = (s.batch, s.seqlen, s.nheads, s.headdim, s.ngroups, s.dstate);
    let mut m = TensorMap::new();
    m.insert("x".into(), r.normal_tensor(&[b, l, h, p], 1.0, s.dtype));
    m.insert("dt".into(), r.normal_tensor(&[b, l, h], 0.5, s.dtype));
    let a: Vec<f32> = (0..h).map(|_| -r.uniform(0.0, 16f32.ln()).exp()).collect();
    m.insert("A".into(), Tensor::from_f32(&[h], a));
    m.insert("B".into(), r.normal_tensor(&[b, l, g, n], 1.0, s.dtype));
    m.insert("C".into(), r.normal_tensor(&[b, l, g, n], 1.0, s.dtype));
    m.insert("D".into(), r.uniform_tensor(&[h], 0.5, 1.5, DType::F32));
    m.insert("z".into(), r.normal_tensor(&[b, l, h, p], 1.0, s.dtype));
    m.insert(
        "dt_bias".into(),
        r.uniform_tensor(&[h], -4.0, -2.0, DType::F32),
    );
    if s.init {
        m.insert(
            "initial_states".into(),
            r.normal_tensor(&[b, h, p, n], 0.5, DType::F32),
        );
    }
    if s.seq_idx {
        // Three packed sequences per row, boundaries inside chunks.
        let mut v = Vec::with_capacity(b * l);
        for _ in 0..b {
            let (c1, c2) = (l / 3 + 5, 2 * l / 3 + 1);
            v.extend((0..l).map(|t| (t >= c1) as i32 + (t >= c2) as i32));
        }
        m.insert("seq_idx".into(), Tensor::from_i32(&[b, l], v));
    }
    m
}

/// (bytes, flops): inputs + outputs once; the chunked algorithm's ~ 6 L h p n flops.
pub(crate) fn cost(s: Ssd) -> (u64, u64) {
    let (b, l, h, p, g, n) = (s.batch, s.seqlen, s.nheads, s.headdim, s.ngroups, s.dstate);
    let e = s.dtype.size() as u64;
    let bytes = e * (3 * b * l * h * p + b * l * h + 2 * b * l * g * n) as u64
        + 4 * (b * h * p * n) as u64 * (1 + s.init as u64);
    (bytes, 6 * (b * l * h * p * n) as u64)
}

fn case(s: Ssd, what: &str, chunk: usize) -> Box<dyn Case> {
    let (bytes, flops) = cost(s);
    let mut c = CaseDef::new("ssd_chunk_scan", move |seed| inputs(s, seed))
        .var("what", what)
        .var("B", s.batch)
        .var("L", s.seqlen)
        .var("h", s.nheads)
        .var("p", s.headdim)
        .var("g", s.ngroups)
        .var("n", s.dstate)
        .var("dtype", s.dtype)
        .param("chunk_size", chunk)
        .param("dt_softplus", true)
        .model("Nemotron 3 Super Mamba-2 prefill")
        .cost(bytes, flops);
    for other in [64usize, 37] {
        let tol = Tolerance::for_dtype(s.dtype);
        c = c.variant(Variant {
            label: format!("chunk_size={other}"),
            params: vec![
                ("chunk_size".into(), other.to_string()),
                ("dt_softplus".into(), "true".into()),
            ],
            outputs: vec![
                ("y".into(), tol),
                ("final_states".into(), Tolerance::for_dtype(DType::F32)),
            ],
        });
    }
    c.boxed()
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let odd = Ssd {
        batch: 2,
        seqlen: 333,
        nheads: 6,
        headdim: 24,
        ngroups: 3,
        dstate: 40,
        ..SUPER
    };
    vec![
        case(SUPER, "super", 128),
        case(
            Ssd {
                seqlen: 1000,
                ..SUPER
            },
            "ragged_tail",
            128,
        ),
        case(
            Ssd {
                seqlen: 1000,
                seq_idx: true,
                ..SUPER
            },
            "seq_idx",
            128,
        ),
        case(
            Ssd {
                seqlen: 1000,
                init: true,
                ..SUPER
            },
            "initial_states",
            128,
        ),
        case(
            Ssd {
                seqlen: 1000,
                dtype: DType::BF16,
                ..SUPER
            },
            "bf16",
            128,
        ),
        case(odd, "odd", 16),
        case(
            Ssd {
                seq_idx: true,
                init: true,
                ..odd
            },
            "odd_all",
            16,
        ),
    ]
}

/// bf16 rows at the fused kernels' shape (headdim 64, dstate 128, chunk 128) with every option
/// the kernels take: initial states, sequence boundaries inside chunks, a ragged tail. Not in the
/// case table (the GPU suite covers these in gpu/tests/mamba_ssd.rs); for the numerics twin's
/// sweeps (`duet check --twin`, compare/tests/ssd_twin.rs).
pub fn twin_rows() -> Vec<Box<dyn Case>> {
    let base = Ssd {
        seqlen: 1000,
        dtype: DType::BF16,
        ..SUPER
    };
    vec![
        case(base, "bf16", 128),
        case(Ssd { init: true, ..base }, "bf16_init", 128),
        case(
            Ssd {
                seq_idx: true,
                ..base
            },
            "bf16_seq_idx",
            128,
        ),
        case(
            Ssd {
                seqlen: 333,
                init: true,
                seq_idx: true,
                ..base
            },
            "bf16_all",
            128,
        ),
    ]
}
