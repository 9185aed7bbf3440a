//! The GPU fused SSD's numerics twin (`reference::ops::ssd_twin`) against what the H200
//! measured, and the sweep that scores cheaper tensor-core operand forms before a kernel exists.

use compare::cases::ssd_chunk_scan::twin_rows;
use compare::check::{check_case, Backend, Row, TwinBackend};
use reference::ops::ssd_twin::Precision;

fn worst(rows: &[Row], imp: &str, output: &str) -> f64 {
    let r = rows
        .iter()
        .find(|r| r.implementation == imp && r.output == output)
        .unwrap_or_else(|| panic!("no row {imp} / {output}"));
    r.report
        .as_ref()
        .map(|rep| rep.worst_pct_of_tol)
        .unwrap_or_else(|| panic!("{imp} / {output}: {:?}", r.error))
}

fn twin(spec: &str) -> TwinBackend {
    TwinBackend {
        prec: Precision::parse(spec).unwrap(),
    }
}

/// Session 37 ran v5m (M in one bf16 pass) on the H200 over the case table's bf16 row (seed 1):
/// y at 87.7 % of its tolerance; session 18 had final_states within 0.8 % with the splits and
/// one bf16 pass of x w out of tolerance. The twin must reproduce those from arithmetic alone.
#[test]
fn twin_reproduces_the_h200_measurements_on_the_bf16_row() {
    let rows_cases = twin_rows();
    let case = rows_cases
        .iter()
        .find(|c| c.vars().starts_with("what=bf16,"))
        .unwrap();
    let (k, m, x) = (twin("kernel"), twin("v5m"), twin("xw=bf16"));
    let backends: Vec<&dyn Backend> = vec![&k, &m, &x];
    let rows = check_case(case.as_ref(), 1, &backends);
    let (kn, mn, xn) = (k.name(), m.name(), x.name());
    let (ky, kf) = (worst(&rows, &kn, "y"), worst(&rows, &kn, "final_states"));
    let (my, mf) = (worst(&rows, &mn, "y"), worst(&rows, &mn, "final_states"));
    let xf = worst(&rows, &xn, "final_states");
    eprintln!(
        "kernel y {ky:.1} % fs {kf:.2} %, v5m y {my:.1} % fs {mf:.2} %, xw=bf16 fs {xf:.1} %"
    );
    // The shipped splits: y well inside (H200 v2-v6: 44.6 %), final_states ~0.8 %.
    assert!(ky > 5.0 && ky < 50.0, "kernel y {ky}");
    assert!(kf > 0.1 && kf < 2.0, "kernel final_states {kf}");
    // v5m: the H200 measured 87.7 %; M does not reach the state.
    assert!((80.0..95.0).contains(&my), "v5m y {my}");
    assert_eq!(mf, kf, "M must not change final_states");
    // One bf16 pass of x w: final_states out of its f32 tolerance (why the kernels split it).
    assert!(xf > 100.0, "xw=bf16 final_states {xf}");
}

/// The sweep (`cargo test --release -p duet-compare --test ssd_twin -- --ignored --nocapture`):
/// every operand form of interest on the bf16 rows at the kernels' shape, seeds 1-3. Prints the
/// worst % of tolerance of y and final_states and the tensor-core units a chunk.
#[test]
#[ignore = "a few minutes: run by hand"]
fn twin_sweep() {
    let specs = [
        "kernel",
        "v5m",
        "s=bf16",
        "m=f16",
        "s=f16",
        "xw=f16",
        "xw=f16x2",
        "m=f16,s=f16",
        "m=f16,s=f16,xw=f16",
        "m=f16,s=f16,xw=f16x2",
        "m=f16,s=f16,xw=f16x2,scale=pow2",
        "m=f16,s=f16,xw=f16,scale=pow2",
    ];
    let twins: Vec<TwinBackend> = specs.iter().map(|s| twin(s)).collect();
    let backends: Vec<&dyn Backend> = twins.iter().map(|t| t as &dyn Backend).collect();
    let mut table: Vec<(String, f64, f64, bool)> =
        twins.iter().map(|t| (t.name(), 0f64, 0f64, true)).collect();
    for case in twin_rows() {
        for seed in 1..=3u64 {
            let rows = check_case(case.as_ref(), seed, &backends);
            for (i, t) in twins.iter().enumerate() {
                let n = t.name();
                let (y, f) = (worst(&rows, &n, "y"), worst(&rows, &n, "final_states"));
                eprintln!("{} seed {seed} {n}: y {y:.1} % fs {f:.2} %", case.vars());
                table[i].1 = table[i].1.max(y);
                table[i].2 = table[i].2.max(f);
                table[i].3 &= rows
                    .iter()
                    .filter(|r| r.implementation == n)
                    .all(|r| r.passed);
            }
        }
    }
    // How far the f16 forms are from f16's range on these inputs (65504 largest, 2^-14 smallest
    // normal): the largest magnitudes of the rounded operands, over rows and seed 1.
    let def = reference::ops::find("ssd_chunk_scan").unwrap();
    for case in twin_rows() {
        let params = reference::op::Params::resolve(&def, &case.params()).unwrap();
        let (_, r) =
            reference::ops::ssd_twin::run_range(&case.inputs(1), &params, Precision::KERNEL)
                .unwrap();
        println!(
            "{}: max |M| {:.3e}, max |S| {:.3e}, max |x w| {:.3e}",
            case.vars().split(',').next().unwrap_or(""),
            r.max_abs_m,
            r.max_abs_s,
            r.max_abs_xw
        );
    }
    println!("| operand forms | units a chunk | worst y % | worst final_states % | all pass |");
    println!("| --- | --- | --- | --- | --- |");
    for ((name, y, f, ok), t) in table.iter().zip(&twins) {
        let units = t
            .prec
            .units_per_chunk()
            .map_or("-".into(), |u| u.to_string());
        println!("| {name} | {units} | {y:.1} | {f:.2} | {ok} |");
    }
}
