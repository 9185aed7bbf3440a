//! Measures the H200's `rcp.approx.ftz.f32` and checks duet's CPU model of it
//! (reference/src/num/rcp_approx.rs) bit for bit:
//!
//! 1. the hardware result for every 23-bit mantissa at exponent 0 (inputs in [1, 2)) is
//!    downloaded and compared with the correctly rounded model; the differences are written as
//!    an `RcpTable` corrections file (`$DUET_OUT/rcp_corrections.bin` when DUET_OUT is set);
//! 2. every one of the 2^32 f32 inputs is run on the GPU and compared, on the GPU, with the
//!    table-driven skeleton (the CUDA port of `rcp_ftz_with` in gpu/kernels/rcp_measure.cu);
//! 3. 2^20 random inputs plus specials are compared on the CPU with the Rust functions
//!    `rcp_approx_ftz_with_table` (measured table) and `rcp_approx_ftz` (the default model).
//!
//! `#[ignore = "gpu"]`: run by scripts/gpu-test.sh.

use cudarc::driver::{DevicePtr, PushKernelArg};
use gpu::runtime::cfg;
use reference::num::rcp_approx::{correctly_rounded_significand_rcp, RcpTable, RCP_TABLE_LEN};
use reference::num::{rcp_approx_ftz, rcp_approx_ftz_with_table};

fn same(a: u32, b: u32) -> bool {
    a == b || (f32::from_bits(a).is_nan() && f32::from_bits(b).is_nan())
}

#[test]
#[ignore = "gpu"]
fn rcp_approx_ftz_matches_the_cpu_model() {
    let g = gpu::runtime::gpu().unwrap_or_else(|e| panic!("{e}"));
    // 1. the table.
    let table_dev = g.alloc_raw::<u32>(RCP_TABLE_LEN).expect("alloc");
    let f = g.function("rcp_measure", "rcp_table").expect("kernel");
    let (tp, _s) = table_dev.device_ptr(&g.stream);
    let mut a = g.stream.launch_builder(&f);
    a.arg(&tp);
    // SAFETY: the buffer holds 2^23 u32.
    unsafe { a.launch(cfg((RCP_TABLE_LEN / 256) as u32, 256, 0)) }.expect("launch");
    let hw: Vec<u32> = g.stream.clone_dtoh(&table_dev).expect("download");
    let mut diffs = 0usize;
    let mut hist = std::collections::BTreeMap::<i64, usize>::new();
    for (m, &h) in hw.iter().enumerate() {
        let cr = correctly_rounded_significand_rcp(m as u32);
        if h != cr {
            diffs += 1;
            *hist.entry(h as i64 - cr as i64).or_default() += 1;
        }
    }
    println!(
        "rcp.approx.ftz.f32 on {}: {diffs} of {RCP_TABLE_LEN} mantissas differ from the correctly rounded reciprocal; ulp deltas (hw - cr): {hist:?}",
        g.name
    );
    let table = RcpTable::from_entries(hw.clone()).expect("entries in [0.5, 1]");
    if let Ok(dir) = std::env::var("DUET_OUT") {
        let p = std::path::Path::new(&dir).join("rcp_corrections.bin");
        std::fs::write(&p, table.to_bytes_corrections()).expect("write corrections");
        println!(
            "wrote {} ({} corrections)",
            p.display(),
            table.corrections().len()
        );
    }
    // 2. all 2^32 inputs on the GPU against the table skeleton.
    let count = g.alloc_raw::<u64>(1).expect("alloc");
    let first = g.alloc_raw::<u32>(128).expect("alloc");
    let (cp, _c) = count.device_ptr(&g.stream);
    let (fp, _f) = first.device_ptr(&g.stream);
    let sweep = g.function("rcp_measure", "rcp_sweep").expect("kernel");
    let (lo, n) = (0u64, 1u64 << 32);
    let mut a = g.stream.launch_builder(&sweep);
    a.arg(&lo).arg(&n).arg(&tp).arg(&cp).arg(&fp);
    // SAFETY: matches rcp_sweep; table has 2^23 entries, first 128 u32.
    unsafe { a.launch(cfg(g.sm_count * 64, 256, 0)) }.expect("launch");
    let c: Vec<u64> = g.stream.clone_dtoh(&count).expect("download");
    let fv: Vec<u32> = g.stream.clone_dtoh(&first).expect("download");
    println!(
        "all 2^32 inputs vs the table-driven model: {} mismatches",
        c[0]
    );
    for i in 0..(c[0] as usize).min(16) {
        println!("  input {:#010x}: hw {:#010x}", fv[2 * i], fv[2 * i + 1]);
    }
    // 3. the Rust functions on random inputs and specials.
    let mut rng = compare::gen::Rng::new(42);
    let mut inputs: Vec<u32> = (0..1 << 20).map(|_| rng.next_u32()).collect();
    inputs.extend([
        0,
        0x8000_0000,
        1,
        0x807F_FFFF,
        0x7F80_0000,
        0xFF80_0000,
        0x7FC0_0000,
        0xFFFF_FFFF,
        0x7E80_0000,
        0x7E80_0001,
        0x7E7F_FFFF,
        0x0080_0000,
        0x7F7F_FFFF,
        0x40C0_0000,
    ]);
    let in_dev = g.stream.clone_htod(&inputs).expect("upload");
    let out_dev = g.alloc_raw::<u32>(inputs.len()).expect("alloc");
    let (ip, _i) = in_dev.device_ptr(&g.stream);
    let (op, _o) = out_dev.device_ptr(&g.stream);
    let list = g.function("rcp_measure", "rcp_list").expect("kernel");
    let nn = inputs.len() as i64;
    let mut a = g.stream.launch_builder(&list);
    a.arg(&ip).arg(&nn).arg(&op);
    // SAFETY: matches rcp_list.
    unsafe { a.launch(cfg(1024, 256, 0)) }.expect("launch");
    let outs: Vec<u32> = g.stream.clone_dtoh(&out_dev).expect("download");
    let (mut bad_table, mut bad_default) = (0usize, 0usize);
    for (&x, &h) in inputs.iter().zip(&outs) {
        let xf = f32::from_bits(x);
        if !same(rcp_approx_ftz_with_table(xf, &table).to_bits(), h) {
            bad_table += 1;
            if bad_table < 8 {
                println!(
                    "  table model: rcp({x:#010x}) hw {h:#010x} model {:#010x}",
                    rcp_approx_ftz_with_table(xf, &table).to_bits()
                );
            }
        }
        if !same(rcp_approx_ftz(xf).to_bits(), h) {
            bad_default += 1;
        }
    }
    println!(
        "{} random+special inputs: table-driven Rust model {bad_table} mismatches; reference::num::rcp_approx_ftz (the model the reference uses now) {bad_default} mismatches",
        inputs.len()
    );
    assert_eq!(
        c[0], 0,
        "the table-driven model differs from the hardware on some inputs"
    );
    assert_eq!(
        bad_table, 0,
        "the Rust table-driven model differs from the hardware"
    );
    assert_eq!(bad_default, 0, "reference::num::rcp_approx_ftz is not bit-exact: {diffs} mantissas differ; install the measured corrections");
}
