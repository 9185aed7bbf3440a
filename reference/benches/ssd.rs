//! `ssd_chunk_scan` at Nemotron 3 Super prefill shape: 4096 tokens, 128 heads x headdim 64,
//! dstate 128, 8 groups, chunk 128, batch 1, with D, z, dt_bias and softplus (the model's
//! call). Run: `cargo bench -p duet-reference --bench ssd`.

use criterion::{criterion_group, criterion_main, Criterion};
use reference::ops::ssd_chunk_scan::{ssd_chunk_scan, DtConfig, DtTransform, SsdArgs, SsdDims};
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

fn bench(c: &mut Criterion) {
    let dims = SsdDims {
        batch: 1,
        seqlen: 4096,
        nheads: 128,
        headdim: 64,
        ngroups: 8,
        dstate: 128,
    };
    let (l, h, p, g, n) = (4096, 128, 64, 8, 128);
    let x = fill(l * h * p, 1, -1.0, 1.0);
    let dt = fill(l * h, 2, -1.0, 1.0);
    let a = fill(h, 3, -8.0, -1.0);
    let b = fill(l * g * n, 4, -1.0, 1.0);
    let cc = fill(l * g * n, 5, -1.0, 1.0);
    let d = fill(h * p, 6, -1.0, 1.0);
    let z = fill(l * h * p, 7, -2.0, 2.0);
    let dt_bias = fill(h, 8, -4.0, -2.0);
    let args = SsdArgs {
        dims,
        x: &x,
        dt: &dt,
        a: &a,
        b: &b,
        c: &cc,
        d: Some(&d),
        z: Some(&z),
        dt_bias: Some(&dt_bias),
        initial_states: None,
        seq_idx: None,
        dt_cfg: DtConfig {
            transform: DtTransform::Softplus,
            ..DtConfig::default()
        },
    };
    let mut grp = c.benchmark_group("ssd_chunk_scan");
    grp.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    grp.bench_function("super_L4096_h128_p64_n128_g8_q128", |bch| {
        bch.iter(|| ssd_chunk_scan(&args, 128).expect("valid bench inputs"))
    });
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
