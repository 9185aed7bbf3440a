//! CI test (no GPU needed): every `gpu/kernels/*.cu` compiles with NVRTC for sm_90a.
//! Fails with a clear message when NVRTC cannot be loaded, unless DUET_SKIP_NVRTC=1.

use gpu::compile;

/// One line per kernel of ptxas' report (shown with --nocapture).
fn print_resources<'a>(ks: impl Iterator<Item = &'a compile::KernelResources>) {
    for k in ks {
        eprintln!(
            "{:<20} {:>3} regs  spill st/ld {:>4}/{:>4} B  stack {:>4} B  smem {:>5} B",
            k.kernel,
            k.registers,
            k.spill_stores_bytes,
            k.spill_loads_bytes,
            k.stack_bytes,
            k.smem_bytes
        );
    }
}

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
    // DUET_COMPILE_ONLY="a b": only these files (scripts/gpu-test.sh build fills the device's
    // kernel cache with the files named in DEVBIN_KCACHE; CI leaves it unset).
    let only: Option<Vec<String>> = std::env::var("DUET_COMPILE_ONLY")
        .ok()
        .map(|s| s.split_whitespace().map(String::from).collect::<Vec<_>>())
        .filter(|v| !v.is_empty());
    let mut failures = vec![];
    for k in compile::SOURCES {
        if let Some(o) = &only {
            if !o.iter().any(|n| n == k.name) {
                eprintln!("{}: skipped (DUET_COMPILE_ONLY)", k.name);
                continue;
            }
        }
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

/// ptxas' resource report parses, and the specialised SSU kernels (v3, one per state format)
/// neither spill nor use a stack frame: spills would turn the bandwidth-bound decode step into a
/// local-memory-bound one.
#[test]
fn ptxas_resources_and_no_spills_in_ssu_v3() {
    if !compile::nvrtc_available() {
        return; // covered by every_kernel_compiles_for_sm90a
    }
    let r = compile::resources("selective_state_update", "sm_90a").expect("resources");
    print_resources(r.iter());
    for name in [
        "ssu_v1",
        "ssu_v2",
        "ssu_v3_f32",
        "ssu_v3_bf16",
        "ssu_v3_f16",
        "ssu_v3_f16_sr",
        "ssu_v3_i16",
        "ssu_v4_f32",
        "ssu_v4_bf16",
        "ssu_v4_f16",
        "ssu_v4_f16_sr",
        "ssu_v4_i16",
        "ssu_v5_f32",
        "ssu_v5_bf16",
        "ssu_v5_f16",
        "ssu_v5_f16_sr",
        "ssu_v5_i16",
        "ssu_v6_f32",
        "ssu_v6_bf16",
        "ssu_v6_f16",
        "ssu_v6_f16_sr",
        "ssu_v6_i16",
        "ssu_v7_f32",
        "ssu_v7_bf16",
        "ssu_v7_f16",
        "ssu_v7_f16_sr",
        "ssu_v7_i16",
        "ssu_v8_f32",
        "ssu_v8_bf16",
        "ssu_v8_f16",
        "ssu_v8_f16_sr",
        "ssu_v8_i16",
        "ssu_v9_f32",
        "ssu_v9_bf16",
        "ssu_v9_f16",
        "ssu_v9_f16_sr",
        "ssu_v9_i16",
        "ssu_v10_f32",
        "ssu_v10_bf16",
        "ssu_v10_f16",
        "ssu_v10_f16_sr",
        "ssu_v10_i16",
    ] {
        let k = r
            .iter()
            .find(|k| k.kernel == name)
            .unwrap_or_else(|| panic!("{name} missing from the ptxas report: {r:?}"));
        assert!(k.registers > 0, "{name}: no register count parsed");
        if name == "ssu_v9_bf16" {
            // Held to 5 blocks of 160 threads an SM (session 24: 3.46 vs 3.27 TB/s at 4).
            assert!(
                k.registers <= 80,
                "{name}: {} registers, more than 5 blocks of 160 an SM allow",
                k.registers
            );
        }
        if name.starts_with("ssu_v7") || name.starts_with("ssu_v8") || name.starts_with("ssu_v9") {
            // Dynamic shared memory only (the ring): no static prologue arrays. The bf16
            // kernels keep a few words on a small stack across the calls of the f64 exp /
            // division slow paths (SASS of ssu_v7_bf16, session 4: STL / LDL once per tile and
            // in the producer's prologue, none inside the consumer's per-row loop); bound it
            // so that a real spill fails here.
            assert!(
                k.spill_stores_bytes <= 32 && k.spill_loads_bytes <= 32 && k.stack_bytes <= 32,
                "{name} spills or uses a stack frame: {k:?}"
            );
        } else if ["ssu_v3", "ssu_v4", "ssu_v5", "ssu_v6", "ssu_v10"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            assert_eq!(
                (k.spill_stores_bytes, k.spill_loads_bytes, k.stack_bytes),
                (0, 0, 0),
                "{name} spills or uses a stack frame: {k:?}"
            );
            // dt, dA and x per row: 128 threads x RPT rows (v10: RPT 2, else >= 4).
            let rpt = if name.starts_with("ssu_v10") { 2 } else { 4 };
            assert!(
                k.smem_bytes >= 3 * 128 * rpt * 4,
                "{name}: shared prologue missing: {k:?}"
            );
        }
    }
    // The bench sweep variants (ssu_x_bf16_r*_e*_s*, the v5 ones ssu_x_bf16_r*_f1_m*, session
    // 12's small-batch ssu_x_bf16_r*_h_*): every one the host lists is present, none spills.
    let sweep: Vec<_> = r
        .iter()
        .filter(|k| k.kernel.starts_with("ssu_x_bf16_"))
        .collect();
    assert_eq!(
        sweep.len(),
        gpu::ops::selective_state_update::SWEEP.len(),
        "{sweep:?}"
    );
    for k in sweep {
        assert_eq!((k.spill_stores_bytes, k.spill_loads_bytes), (0, 0), "{k:?}");
    }
    // v11 (session 26) and its sweep forms: the state of two chunks lives in registers, so a
    // spill or a stack frame would put the streamed state through local memory; no shared
    // memory at all.
    // The stochastic-rounding entry (Philox per group of 4 elements on top of two chunks of
    // state) spills ~0.7 KB at its 168 registers (session 26; ~1.2 KB since session 27's
    // division-free indices; session 28's interleaved walk: 1,216 bytes stored, 2,404 loaded,
    // 208-byte stack, and 1,132 / 1,884 / 184 on the contiguous walk): it is 2.1x slower than v9
    // (session 27) and never auto; bounded here so that it does not grow unnoticed.
    // (and its bf16 small-operand form `_xb`, session 30)
    for name in ["ssu_v11_f16_sr", "ssu_v11_f16_sr_xb"] {
        let sr = r
            .iter()
            .find(|k| k.kernel == name)
            .unwrap_or_else(|| panic!("{name} missing from the ptxas report"));
        assert!(
            sr.spill_stores_bytes <= 1536 && sr.spill_loads_bytes <= 2560 && sr.stack_bytes <= 256,
            "{name} spills more than session 28's 1.2 KB stored / 2.4 KB loaded: {sr:?}"
        );
    }
    let v11: Vec<String> = ["f32", "bf16", "f16"]
        .iter()
        .map(|f| format!("ssu_v11_{f}"))
        .chain(
            gpu::ops::selective_state_update::V11_SWEEP
                .iter()
                .map(|v| format!("ssu_{v}")),
        )
        .chain(
            gpu::ops::selective_state_update::V11_XB
                .iter()
                .map(|v| format!("ssu_{v}_xb"))
                .filter(|n| {
                    n != "ssu_v11_f16_sr_xb"
                        && !n.starts_with("ssu_v12")
                        && !n.starts_with("ssu_x12")
                }),
        )
        .collect();
    // v12 (session 31, one 512-thread block a tile): 16 state elements a lane in registers, the
    // rows' values in 5 x 64 floats of shared memory; no spill and no stack in any entry.
    for f in [
        "v12_f32",
        "v12_bf16",
        "v12_f16",
        "v12_f16_sr",
        "x12_bf16_m2",
    ] {
        for xb in ["", "_xb"] {
            let name = format!("ssu_{f}{xb}");
            let k = r
                .iter()
                .find(|k| k.kernel == name)
                .unwrap_or_else(|| panic!("{name} missing from the ptxas report"));
            if name.starts_with("ssu_x12_bf16_m2") {
                // held to 64 registers (two 512-thread blocks an SM): with v12's issue order
                // (B / C, the rows' operands and the state all in flight before the f64 chain)
                // ptxas keeps a few words on a small stack, once a thread a 64-row pass:
                // 64 / 64 bytes and a 32-byte frame with f32 B / C, 40 / 40 and 24 with bf16
                // ones (session 31; call 3 measured these forms: batch 2 5.60 / 5.39 us against
                // c4_m4's 6.07). Bounded so that a real spill fails here.
                assert!(
                    k.spill_stores_bytes <= 64
                        && k.spill_loads_bytes <= 64
                        && k.stack_bytes <= 32
                        && k.smem_bytes == 5 * 64 * 4,
                    "{name} spills more than session 31's 64 bytes: {k:?}"
                );
                continue;
            }
            assert_resident_with_smem(k, 5 * 64 * 4);
        }
    }
    for name in &v11 {
        let k = r
            .iter()
            .find(|k| &k.kernel == name)
            .unwrap_or_else(|| panic!("{name} missing from the ptxas report"));
        // the staged forms (`_s<stages>`): a static ring of stages x 4 warps x 512-byte chunk
        // vectors, within the 48 KB a static array may take
        let form = name.strip_prefix("ssu_").unwrap_or(name);
        let form = form.strip_suffix("_xb").unwrap_or(form);
        if let Some(stages) = gpu::ops::selective_state_update::v11_stages(form) {
            let ch = gpu::ops::selective_state_update::v11_chunk_vectors(form);
            assert_eq!(
                k.smem_bytes as usize,
                stages * 4 * ch * 512,
                "{name}'s ring: {k:?}"
            );
            assert!(k.smem_bytes <= 48 * 1024, "{name}: {k:?}");
            assert_eq!(
                (k.spill_stores_bytes, k.spill_loads_bytes, k.stack_bytes),
                (0, 0, 0),
                "{name} spills or uses a stack frame: {k:?}"
            );
            continue;
        }
        assert_resident_with_smem(k, 0);
    }
}

/// No spill, no stack frame, and exactly `smem` bytes of static shared memory.
fn assert_resident_with_smem(k: &compile::KernelResources, smem: u32) {
    assert_eq!(
        (
            k.spill_stores_bytes,
            k.spill_loads_bytes,
            k.stack_bytes,
            k.smem_bytes
        ),
        (0, 0, 0, smem),
        "{} spills, uses a stack frame or other shared memory than {smem} bytes: {k:?}",
        k.kernel
    );
}

/// The router kernels: v4 (one warp per token, keys and bounds in registers) neither spills nor
/// uses a stack frame, so the large-T path stays register-resident.
#[test]
fn ptxas_no_spills_in_router_v4() {
    if !compile::nvrtc_available() {
        return; // covered by every_kernel_compiles_for_sm90a
    }
    let r = compile::resources("noaux_tc_router", "sm_90a").expect("resources");
    print_resources(r.iter().filter(|k| k.kernel.starts_with("router_")));
    assert_register_resident(
        &r,
        &[
            "router_v4_n8",
            "router_v4_n16",
            "router_v5_n8",
            "router_v5_n16",
            "router_v6_n8",
            "router_v6_n16",
        ],
    );
}

/// Kernel `name` of a ptxas report (panics naming it when it is missing).
fn kernel_in<'a>(r: &'a [compile::KernelResources], name: &str) -> &'a compile::KernelResources {
    r.iter()
        .find(|k| k.kernel == name)
        .unwrap_or_else(|| panic!("{name} missing from the ptxas report: {r:?}"))
}

/// Each named kernel is in ptxas' report, with a register count, no spills and no stack frame.
fn assert_register_resident(r: &[compile::KernelResources], names: &[&str]) {
    for name in names {
        let k = kernel_in(r, name);
        assert!(k.registers > 0, "{name}: no register count parsed");
        assert_eq!(
            (k.spill_stores_bytes, k.spill_loads_bytes, k.stack_bytes),
            (0, 0, 0),
            "{name} spills or uses a stack frame: {k:?}"
        );
        assert!(
            !k.wgmma_serialized,
            "{name}: ptxas serialized its wgmma's (C7515)"
        );
    }
}

/// The fused SSD kernels keep everything in registers: v2 (mma.sync), v3, v4 and v5 (wgmma: the state
/// warpgroup's S and one batch of A fragments, the row warpgroups' accumulators, at most 168
/// registers at 384 threads) neither spill nor use a stack frame.
#[test]
fn ptxas_no_spills_in_fused_ssd() {
    if !compile::nvrtc_available() {
        return; // covered by every_kernel_compiles_for_sm90a
    }
    let r = compile::resources("ssd_chunk_scan", "sm_90a").expect("resources");
    print_resources(r.iter().filter(|k| k.kernel.contains("fused")));
    assert_register_resident(
        &r,
        &[
            "ssd2_fused_p64_n128",
            "ssd3_fused_p64_n128",
            "ssd4_fused_p64_n128",
            "ssd5_fused_p64_n128",
            "ssd6_fused_p64_n128",
            "ssd7_fused_p64_n128",
            "ssd8_fused_p64_n128",
        ],
    );
    assert_setmaxnreg_start(&r, &["ssd8_fused_p64_n128"]);
}

/// Warp-specialised kernels of 512 threads move registers between their warpgroups with
/// `setmaxnreg` (SSD v8: 32 to the producer warpgroup, 160 to the roles; the MoE xw forms: 72
/// to the producers, 184 / EREG to the consumers). Those counts add up to the whole register
/// file (65,536 a block) only if ptxas starts every warp at 128 registers: with fewer, the
/// roles' `setmaxnreg.inc` waits forever for registers no one frees (a hang, not an error).
fn assert_setmaxnreg_start(r: &[compile::KernelResources], names: &[&str]) {
    for name in names {
        let k = kernel_in(r, name);
        assert_eq!(
            k.registers, 128,
            "{name}: ptxas gives {} registers at launch; its setmaxnreg counts assume 128 \
             (512 threads x 128 = the 65,536-register file)",
            k.registers
        );
    }
}

#[test]
#[should_panic(expected = "setmaxnreg counts assume 128")]
fn setmaxnreg_start_check_catches_a_smaller_launch_count() {
    let k = compile::KernelResources {
        kernel: "k".into(),
        registers: 120,
        spill_stores_bytes: 0,
        spill_loads_bytes: 0,
        stack_bytes: 0,
        smem_bytes: 0,
        wgmma_serialized: false,
    };
    assert_setmaxnreg_start(&[k], &["k"]);
}

/// The MoE xw forms (moe.cu `moe_xw_body`, 512 threads, setmaxnreg): 128 registers at launch,
/// no spills (see [`assert_setmaxnreg_start`]).
#[test]
fn ptxas_setmaxnreg_start_of_moe_xw_forms() {
    if !compile::nvrtc_available() {
        return; // covered by every_kernel_compiles_for_sm90a
    }
    let r = compile::resources("moe", "sm_90a").expect("resources");
    let xw: Vec<&str> = r
        .iter()
        .filter(|k| k.kernel.starts_with("moe_gemm_xw"))
        .map(|k| k.kernel.as_str())
        .collect();
    assert!(
        xw.len() >= 4,
        "the xw forms are missing from moe.cu's ptxas report: {xw:?}"
    );
    print_resources(r.iter().filter(|k| k.kernel.starts_with("moe_gemm_xw")));
    assert_setmaxnreg_start(&r, &xw);
    assert_register_resident(&r, &xw);
}

/// The prefill conv1d kernels compiled per x dtype (session 23): v8 / v9 keep their taps,
/// window and loads in registers (no spill, no stack frame). v5 is held to 64 registers (4 blocks
/// an SM: 577-583 us on the Super prefill vs 633-641 at 75 registers, session 23 call 3) and
/// ptxas spills a few loop-invariant values for it (32-64 bytes at width 3-4, reloaded from L1
/// once a vector); ptxas also spills 8-12 bytes in v6's f32 width-1 and v10's f16 width-2
/// kernels: all bounded here so that a real spill in the vector loop fails.
#[test]
fn ptxas_spills_in_conv1d_prefill() {
    if !compile::nvrtc_available() {
        return; // covered by every_kernel_compiles_for_sm90a
    }
    let r = compile::resources("causal_conv1d", "sm_90a").expect("resources");
    print_resources(r.iter().filter(|k| k.kernel.starts_with("conv1d_fn_v")));
    let names = |stem: &str| {
        let mut v = vec![];
        for dt in ["f32", "bf16", "f16"] {
            for w in 1..=4 {
                v.push(format!("conv1d_fn_{stem}_{dt}_w{w}"));
            }
        }
        v
    };
    let resident: Vec<String> = ["v8", "v9"].iter().flat_map(|s| names(s)).collect();
    let refs: Vec<&str> = resident.iter().map(|s| s.as_str()).collect();
    assert_register_resident(&r, &refs);
    for name in names("v5u4")
        .into_iter()
        .chain(names("v6"))
        .chain(names("v10"))
    {
        let k = r
            .iter()
            .find(|k| k.kernel == name)
            .unwrap_or_else(|| panic!("{name} missing from the ptxas report"));
        if name.starts_with("conv1d_fn_v5") {
            assert!(k.registers <= 64, "{name}: held to 4 blocks of 256: {k:?}");
        }
        assert!(
            k.spill_stores_bytes <= 64 && k.spill_loads_bytes <= 64 && k.stack_bytes <= 64,
            "{name} spills more than its loop invariants: {k:?}"
        );
    }
}
