//! CI test (no GPU needed): every `gpu/kernels/*.cu` compiles with NVRTC for sm_90a.
//! Fails with a clear message when NVRTC cannot be loaded, unless DUET_SKIP_NVRTC=1.

use gpu::compile;

#[test]
fn every_kernel_compiles_for_sm90a() {
    if !compile::nvrtc_available() {
        if std::env::var("DUET_SKIP_NVRTC").as_deref() == Ok("1") {
            eprintln!("DUET_SKIP_NVRTC=1: skipping the NVRTC compile test");
            return;
        }
        panic!(
            "NVRTC (libnvrtc.so.13) cannot be loaded, so the CUDA kernels cannot be checked. \
             Run `. scripts/nvrtc-env.sh` (installs NVRTC 13.0 into .nvrtc/ and sets \
             LD_LIBRARY_PATH), or set DUET_SKIP_NVRTC=1 to skip this test deliberately."
        );
    }
    let v = compile::nvrtc_version().expect("nvrtc version");
    eprintln!("NVRTC {}.{}", v.0, v.1);
    // Every .cu in the folder must be registered (an unregistered file would go unchecked).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    for entry in std::fs::read_dir(&dir).expect("gpu/kernels") {
        let p = entry.expect("dir entry").path();
        if p.extension().and_then(|e| e.to_str()) == Some("cu") {
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            assert!(
                compile::SOURCES.iter().any(|k| k.name == stem),
                "gpu/kernels/{stem}.cu is not listed in gpu::compile::SOURCES"
            );
        }
    }
    let mut failures = vec![];
    for k in compile::SOURCES {
        match compile::compile(k.name, "sm_90a") {
            Ok(cubin) => {
                assert!(cubin.len() > 64, "{}: empty cubin", k.name);
                eprintln!(
                    "compiled {}.cu: {} bytes of sm_90a cubin",
                    k.name,
                    cubin.len()
                );
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_compile_error_names_the_file_and_line() {
    if !compile::nvrtc_available() {
        return; // covered by the test above
    }
    let k = compile::KernelSource {
        name: "broken",
        src: "extern \"C\" __global__ void f(float* o) {\n    o[0] = undefined_thing;\n}\n",
    };
    let log = compile::compile_source(&k, "sm_90a")
        .expect_err("must fail")
        .to_string();
    assert!(log.contains("broken.cu(2)"), "{log}");
    assert!(
        log.contains("gpu/kernels/broken.cu:2:     o[0] = undefined_thing;"),
        "{log}"
    );
}
