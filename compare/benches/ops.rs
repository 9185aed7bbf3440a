//! Criterion benches of every reference op, one per op: the first case-table row of the op
//! (the rows are ordered base row first, at the Nemotron 3 Super shape where the CPU can afford
//! it), run through the op registry exactly as `duet run` does. Inputs are generated once
//! (seed 1); outputs are black-boxed. Filter like any criterion bench:
//!
//!   cargo bench -p duet-compare --bench ops -- noaux_tc_router
//!   cargo bench -p duet-compare --bench ops -- --quick     (short measurements)
//!
//! `duet bench --backend cpu` gives the same numbers as schema-versioned JSON for every row.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;

fn ops(c: &mut Criterion) {
    let mut seen = std::collections::BTreeSet::new();
    let mut g = c.benchmark_group("reference");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for case in compare::cases::all() {
        if !seen.insert(case.op().to_string()) {
            continue;
        }
        let def = match reference::ops::find(case.op()) {
            Ok(d) => d,
            Err(e) => panic!("case {} names an unknown op: {e}", case.name()),
        };
        let inputs = case.inputs(1);
        let params = case.params();
        // Fail early (and loudly) on a broken row instead of timing an error path.
        if let Err(e) = def.call(&inputs, &params) {
            panic!("{}: {e}", case.name());
        }
        g.throughput(Throughput::Bytes(case.bytes()));
        g.bench_function(case.name(), |b| {
            b.iter(|| std::hint::black_box(def.call(&inputs, &params)))
        });
    }
    g.finish();
}

criterion_group!(benches, ops);
criterion_main!(benches);
