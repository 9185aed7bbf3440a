//! `selective_state_update` at the Nemotron 3 Super decode shape: batch 64, 128 heads x head_dim
//! 64, dstate 128, 8 groups, with D, z, dt_bias, softplus and shuffled state_batch_indices (the
//! model's call). f32 and bf16 state caches, updated in place call after call (dt > 0 and
//! A < 0 keep the state bounded). Also the 4-token MTP form (f32 state).
//! Run: `cargo bench -p duet-reference --bench ssu`.

use criterion::{criterion_group, criterion_main, Criterion};
use reference::ops::selective_state_update::{
    selective_state_update, AVals, HeadVals, SsuArgs, SsuConfig, SsuDims, StateCache,
};
use reference::ops::selective_state_update_multi_token::{
    selective_state_update_multi_token, ChainFrom, MtpConfig, StateUpdate,
};
use std::time::Duration;

fn fill(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

struct Inputs {
    x: Vec<f32>,
    dt: Vec<f32>,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
    d: Vec<f32>,
    z: Vec<f32>,
    dt_bias: Vec<f32>,
    sbi: Vec<i64>,
}

impl Inputs {
    fn new(rows: usize, batch: usize, h: usize, p: usize, g: usize, n: usize) -> Inputs {
        Inputs {
            x: fill(rows * h * p, 1, -1.0, 1.0),
            dt: fill(rows * h * p, 2, -2.0, 0.5),
            a: fill(h, 3, -2.0, -0.1),
            b: fill(rows * g * n, 4, -1.0, 1.0),
            c: fill(rows * g * n, 5, -1.0, 1.0),
            d: fill(h * p, 6, -1.0, 1.0),
            z: fill(rows * h * p, 7, -1.0, 1.0),
            dt_bias: fill(h * p, 8, -0.5, 0.5),
            sbi: (0..batch as i64).rev().collect(),
        }
    }
    fn args(&self) -> SsuArgs<'_> {
        SsuArgs {
            x: &self.x,
            dt: HeadVals {
                v: &self.dt,
                per_dim: true,
            },
            a: AVals::PerHead(&self.a),
            b: &self.b,
            c: &self.c,
            d: Some(HeadVals {
                v: &self.d,
                per_dim: true,
            }),
            z: Some(&self.z),
            dt_bias: Some(HeadVals {
                v: &self.dt_bias,
                per_dim: true,
            }),
            state_batch_indices: Some(&self.sbi),
        }
    }
}

fn bench(c: &mut Criterion) {
    let (batch, h, p, g, n) = (64, 128, 64, 8, 128);
    let dims = SsuDims {
        batch,
        nheads: h,
        dim: p,
        dstate: n,
        ngroups: g,
    };
    let cfg = SsuConfig {
        dt_softplus: true,
        ..SsuConfig::default()
    };
    let inp = Inputs::new(batch, batch, h, p, g, n);
    let args = inp.args();
    let mut out = vec![0f32; batch * h * p];
    let mut grp = c.benchmark_group("selective_state_update_super_b64");
    grp.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));

    let mut state = fill(batch * h * p * n, 9, -1.0, 1.0);
    grp.bench_function("f32_state", |bch| {
        bch.iter(|| {
            selective_state_update(StateCache::F32(&mut state), &args, dims, &cfg, &mut out)
                .expect("valid bench inputs")
        })
    });
    drop(state);

    let mut state16: Vec<u16> = fill(batch * h * p * n, 9, -1.0, 1.0)
        .into_iter()
        .map(|v| half::bf16::from_f32(v).to_bits())
        .collect();
    grp.bench_function("bf16_state", |bch| {
        bch.iter(|| {
            selective_state_update(StateCache::Bf16(&mut state16), &args, dims, &cfg, &mut out)
                .expect("valid bench inputs")
        })
    });
    drop(state16);
    grp.finish();

    // MTP verify: 4 tokens per row, intermediate states written, cache kept.
    let t = 4;
    let inp4 = Inputs::new(batch * t, batch, h, p, g, n);
    let args4 = inp4.args();
    let mut state = fill(batch * h * p * n, 9, -1.0, 1.0);
    let mut inter = vec![0f32; batch * t * h * p * n];
    let mut out4 = vec![0f32; batch * t * h * p];
    let mcfg = MtpConfig {
        base: cfg,
        chain_from: ChainFrom::UnroundedState,
        state_update: StateUpdate::Keep,
    };
    let mut grp = c.benchmark_group("selective_state_update_multi_token_super_b64_t4");
    grp.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10));
    grp.bench_function("f32_state", |bch| {
        bch.iter(|| {
            selective_state_update_multi_token(
                StateCache::F32(&mut state),
                StateCache::F32(&mut inter),
                &args4,
                dims,
                t,
                None,
                &mcfg,
                &mut out4,
            )
            .expect("valid bench inputs")
        })
    });
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
