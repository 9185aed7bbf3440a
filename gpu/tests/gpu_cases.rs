//! Every case of the compare table through every GPU kernel version of its op (the table's own
//! tolerances), plus `duet check`'s backend path. `#[ignore = "gpu"]`: run by scripts/gpu-test.sh.

mod common;

use compare::Case;

#[test]
#[ignore = "gpu"]
fn every_case_through_every_kernel_version() {
    let g = common::gpu();
    eprintln!("device: {g:?}");
    let mut failures = vec![];
    let mut ran = 0;
    for op in gpu::ops::all() {
        let cases: Vec<Box<dyn Case>> = compare::cases::all()
            .into_iter()
            .filter(|c| c.op() == op.name)
            .collect();
        for &v in op.versions {
            let b = gpu::backend::GpuBackend::new(op.name, v);
            for c in &cases {
                if !compare::Backend::supports(&b, c.as_ref()) {
                    continue;
                }
                for seed in [3u64] {
                    let inputs = c.inputs(seed);
                    let name = format!("{} seed={seed}", c.name());
                    let tol = |o: &str, t: &reference::Tensor| c.tolerance(o, t.dtype());
                    ran += 1;
                    if let Err(e) = common::diff(op.name, v, &name, &inputs, &c.params(), &tol) {
                        failures.push(e);
                    }
                }
            }
        }
        eprintln!(
            "{}: {} cases x {} versions",
            op.name,
            cases.len(),
            op.versions.len()
        );
    }
    eprintln!(
        "ran {ran} (case, version, seed) combinations, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "gpu"]
fn check_runner_with_gpu_backends() {
    let backends = gpu::backends(None).expect("backends");
    let refs: Vec<&dyn compare::Backend> = backends.iter().map(|b| b.as_ref()).collect();
    let mut bad = vec![];
    for c in compare::cases::all() {
        if gpu::ops::find(c.op()).is_err() {
            continue;
        }
        let rows = compare::check::check_case(c.as_ref(), 7, &refs);
        bad.extend(rows.into_iter().filter(|r| !r.passed));
    }
    assert!(bad.is_empty(), "{}", compare::check::render_table(&bad));
}

#[test]
#[ignore = "gpu"]
fn unknown_version_and_bad_input_are_clear_errors() {
    let g = common::gpu();
    let op = gpu::ops::find("nvfp4_quantize").expect("op");
    let mut m = reference::TensorMap::new();
    m.insert(
        "x".into(),
        reference::Tensor::from_f32(&[2, 15], vec![1.0; 30]),
    );
    let e = gpu::ops::run_version(&g, &op, "v1", &m, &[], &Default::default()).unwrap_err();
    assert!(e.to_string().contains("multiple of 16"), "{e}");
    let e = gpu::ops::run_version(&g, &op, "v9", &m, &[], &Default::default()).unwrap_err();
    assert!(e.to_string().contains("no GPU kernel version 'v9'"), "{e}");
}
