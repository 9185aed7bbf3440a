//! Real-trace acceptance tests: every fixture parses, and per-kernel totals / instance counts
//! equal ground truth computed independently from the raw files.
//!
//! Ground truth was computed with a Python 3 one-off (sqlite3 / json / csv modules) directly on
//! the raw files, e.g. for nsys:
//!   SELECT s.value, deviceId, count(*), sum(end-start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
//!   JOIN StringIds s ON s.id = k.shortName GROUP BY 1, 2
//! for Kineto: sum(round(e["dur"] * 1000)) over traceEvents with ph == "X" and cat == "kernel";
//! for ncu: sum of `gpu__time_duration.sum` over the rows of the `--print-units base` raw page.

use std::path::PathBuf;
use traces::diff::{Class, DiffOptions};
use traces::summary::{GroupBy, Summary, SummaryOptions};
use traces::ReadOptions;

fn fx(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("fixtures")
        .join("traces")
        .join(name)
}

fn summary(name: &str, group_by: GroupBy) -> Summary {
    let opts = SummaryOptions {
        group_by,
        merge_devices: false,
    };
    match traces::summarize(&fx(name), opts, ReadOptions::default()) {
        Ok(s) => s,
        Err(e) => panic!("{name}: {e}"),
    }
}

/// (instances, total_ns) of the row named `name` on `device`.
fn kernel(s: &Summary, name: &str, device: i64) -> (u64, f64) {
    let k = s
        .kernels
        .iter()
        .find(|k| k.name == name && k.device == device)
        .unwrap_or_else(|| {
            let names: Vec<&str> = s.kernels.iter().map(|k| k.name.as_str()).collect();
            panic!("no kernel {name:?} on device {device}; have {names:?}")
        });
    (k.stats.instances, k.stats.total_ns)
}

fn range(s: &Summary, name: &str) -> (u64, f64) {
    let r = s
        .nvtx
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no range {name:?}"));
    (r.stats.instances, r.stats.total_ns)
}

#[test]
fn nsys_schema_2_9_export_meta_data_and_registered_strings() {
    let s = summary(
        "nsys-2022.2.1_pipit_saxpy-mpi-cuda_A100.sqlite.gz",
        GroupBy::Kernel,
    );
    assert!(s.source.detail.contains("2.9.1"), "{}", s.source.detail);
    assert!(s.source.detail.contains("EXPORT_META_DATA"));
    assert_eq!(
        s.source.devices,
        vec![(0, "NVIDIA A100-SXM4-40GB".to_string())]
    );
    // ground truth: saxpy(double *, double *, double *, double, int) | 0 | 5 | 88573480
    assert_eq!(
        kernel(&s, "saxpy(double*,double*,double*,double,int)", 0),
        (5, 88_573_480.0)
    );
    assert_eq!(s.kernel_instances, 5);
    // NVTX: text from `textId` (registered strings) in the MPI domain (event type 75)
    let send = s.nvtx.iter().find(|r| r.name == "MPI_Send");
    let send = send.unwrap_or_else(|| panic!("MPI_Send missing: {:?}", s.nvtx));
    assert_eq!(send.domain.as_deref(), Some("MPI"));
    assert_eq!(
        (send.stats.instances, send.stats.total_ns),
        (10, 136_342_959.0)
    );
    assert_eq!(range(&s, "MPI_Init"), (1, 645_678_983.0));
    assert_eq!(range(&s, "saxpy"), (5, 231_248.0));
    // memcpy kinds via the built-in (old-style) copyKind names; user-added `name` column ignored
    let htod = s.memops.iter().find(|m| m.name == "Memcpy HtoD");
    let htod = htod.unwrap_or_else(|| panic!("{:?}", s.memops));
    assert_eq!(htod.stats.instances, 10);
    assert_eq!(htod.stats.bytes, 2_621_440_000);
    // runtime API: eventClass 67 (CUDA backtrace) duplicates are dropped, `_v3020` folded;
    // ground truth: nameId -> 'cudaMemcpy_v3020', eventClass 0: 15 calls, 374336827 ns
    let mc = s.api.iter().find(|a| a.name == "cudaMemcpy");
    let mc = mc.unwrap_or_else(|| panic!("{:?}", s.api));
    assert_eq!((mc.stats.instances, mc.stats.total_ns), (15, 374_336_827.0));
}

#[test]
fn nsys_schema_3_13_lazy_tables_gzip() {
    let s = summary(
        "nsys-2024.5.1_pipit_cloverleaf-cuda_A100.sqlite.gz",
        GroupBy::Kernel,
    );
    assert!(s.source.detail.contains("3.13.2"));
    // ground truth: count(*) = 1312, sum(end-start) = 294404540
    assert_eq!(s.kernel_instances, 1312);
    assert_eq!(s.total_kernel_ns, 294_404_540.0);
    // no NVTX_EVENTS / MEMSET tables: normal, not an error
    assert!(s.nvtx.is_empty());
    let top = &s.kernels[0];
    assert_eq!(
        (top.stats.instances, top.stats.total_ns),
        (10, 19_404_589.0)
    );
    assert!(top
        .name
        .starts_with("clover::par_ranged2d_kernel<PdV_kernel(bool,int,"));
    assert!(top.name.contains("[lambda(int,int)(instance 2)]"));
    assert_eq!(top.base_name, "par_ranged2d_kernel");
    // 4 GPUs listed in TARGET_INFO_GPU, kernels only on device 0
    assert_eq!(s.devices, vec![0]);
    assert_eq!(s.source.devices.len(), 4);
}

#[test]
fn nsys_schema_3_25_two_gpu_pair_per_device_ground_truth() {
    let b = summary(
        "nsys-2026.2.1_nsysai_mfu_2xH100_before.sqlite.gz",
        GroupBy::Base,
    );
    let a = summary(
        "nsys-2026.2.1_nsysai_mfu_2xH100_after.sqlite.gz",
        GroupBy::Base,
    );
    assert!(b.source.detail.contains("3.25.0"));
    assert_eq!(
        (b.kernel_instances, b.total_kernel_ns),
        (4010, 535_200_650.0)
    );
    assert_eq!(
        (a.kernel_instances, a.total_kernel_ns),
        (3587, 488_835_406.0)
    );
    assert_eq!(b.devices, vec![0, 1]);
    // ground truth by shortName and deviceId
    assert_eq!(kernel(&b, "flash_fwd_kernel", 1), (34, 136_355_595.0));
    assert_eq!(kernel(&b, "flash_fwd_kernel", 0), (34, 135_961_783.0));
    assert_eq!(kernel(&b, "elementwise_kernel", 1), (439, 43_849_366.0));
    assert_eq!(kernel(&b, "ncclDevKernel_SendRecv", 0), (33, 17_172_652.0));
    assert_eq!(kernel(&b, "ncclDevKernel_SendRecv", 1), (33, 8_229_100.0));
    assert_eq!(kernel(&a, "flash_fwd_kernel", 1), (30, 120_397_607.0));
    assert_eq!(kernel(&a, "ncclDevKernel_SendRecv", 1), (31, 23_753_085.0));
    assert_eq!(kernel(&a, "elementwise_kernel", 0), (394, 39_394_876.0));
    // `elementwise_kernel` must not swallow `vectorized_elementwise_kernel` (no substrings)
    assert_eq!(
        kernel(&b, "vectorized_elementwise_kernel", 0),
        (926, 21_713_137.0)
    );
    // PyTorch NVTX text with `, seq = N, op_id = N` suffixes folds to the op name;
    // ground truth: text = 'aten::linear' OR text LIKE 'aten::linear,%' -> 336, 34985556
    assert_eq!(range(&b, "aten::linear"), (336, 34_985_556.0));
    let nv_total: u64 = b.nvtx.iter().map(|r| r.stats.instances).sum();
    assert_eq!(nv_total, 19_118);
    // new-style memcpy names (ENUM_CUDA_MEMCPY_OPER "Device-to-Device") join old ones
    let dtod0 = b
        .memops
        .iter()
        .find(|m| m.name == "Memcpy DtoD" && m.device == Some(0));
    let dtod0 = dtod0.unwrap_or_else(|| panic!("{:?}", b.memops));
    assert_eq!(
        (dtod0.stats.instances, dtod0.stats.total_ns),
        (493, 2_831_071.0)
    );
    assert_eq!(dtod0.stats.bytes, 4_023_067_136);
    let ms1 = b
        .memops
        .iter()
        .find(|m| m.name == "Memset" && m.device == Some(1));
    assert_eq!(ms1.map(|m| m.stats.instances), Some(136));
}

#[test]
fn before_after_diff_names_the_kernels_that_changed() {
    let o = SummaryOptions::default();
    let b = traces::summarize(
        &fx("nsys-2026.2.1_nsysai_mfu_2xH100_before.sqlite.gz"),
        o,
        ReadOptions::default(),
    );
    let a = traces::summarize(
        &fx("nsys-2026.2.1_nsysai_mfu_2xH100_after.sqlite.gz"),
        o,
        ReadOptions::default(),
    );
    let (b, a) = match (b, a) {
        (Ok(b), Ok(a)) => (b, a),
        (Err(e), _) | (_, Err(e)) => panic!("{e}"),
    };
    let d = match traces::diff::diff(&b, &a, &DiffOptions::default()) {
        Ok(d) => d,
        Err(e) => panic!("{e}"),
    };
    let regressed: Vec<(&str, Option<i64>)> = d
        .rows
        .iter()
        .filter(|r| r.class == Class::Regressed)
        .map(|r| (r.name.as_str(), r.device))
        .collect();
    assert_eq!(
        regressed,
        vec![(
            "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)",
            Some(1)
        )]
    );
    // the largest per-instance changes are the NCCL kernels on both GPUs, listed first
    let top2: Vec<&str> = d.rows.iter().take(2).map(|r| r.name.as_str()).collect();
    assert!(
        top2.iter().all(|n| n.starts_with("ncclDevKernel_SendRecv")),
        "{top2:?}"
    );
    // flash attention: fewer instances in the window but same per-instance time -> unchanged
    let flash = d
        .rows
        .iter()
        .find(|r| r.name.starts_with("flash::flash_fwd_kernel") && r.device == Some(1));
    let flash = flash.unwrap_or_else(|| panic!("flash row missing"));
    assert_eq!(flash.class, Class::Unchanged);
    assert!(
        flash.reason.contains("instances 34 -> 30"),
        "{}",
        flash.reason
    );
    assert_eq!(d.counts.new + d.counts.removed, 0);
    // JSON carries both sides and the classification
    let j = serde_json::to_value(&d).unwrap_or_default();
    let row0 = &j["rows"][0];
    assert_eq!(row0["class"], "regressed");
    assert_eq!(row0["baseline"]["instances"], 33);
    assert_eq!(row0["candidate"]["instances"], 31);
    assert_eq!(row0["candidate"]["total_ns"], 23_753_085.0);
    // total-time comparison flags the window effect instead
    let dt = traces::diff::diff(
        &b,
        &a,
        &DiffOptions {
            compare: traces::diff::Compare::Total,
            ..Default::default()
        },
    );
    let dt = dt.unwrap_or_else(|e| panic!("{e}"));
    assert!(dt.counts.improved > 0);
}

#[test]
fn nsys_stats_nvtx_pushpop_trace_csv() {
    let s = summary(
        "nsys-stats_nvtx_pushpop_trace_pipit_nbody.csv",
        GroupBy::Kernel,
    );
    assert_eq!(s.source.format, Some(traces::Format::NsysStatsCsv));
    assert!(s.kernels.is_empty());
    let n: u64 = s.nvtx.iter().map(|r| r.stats.instances).sum();
    assert_eq!(n, 131);
    assert_eq!(range(&s, "main"), (1, 1_005_098_329.0));
    assert_eq!(range(&s, "cudaMallocManaged"), (2, 204_843_509.0));
    assert_eq!(range(&s, "cudaDeviceSynchronize"), (40, 189_760_728.0));
}

#[test]
fn kineto_two_generations() {
    let s = summary(
        "kineto_hta_trace_diff_control_A100.json.gz",
        GroupBy::Kernel,
    );
    // ground truth: 8568 kernel events, sum(dur) = 446813 us
    assert_eq!(
        (s.kernel_instances, s.total_kernel_ns),
        (8568, 446_813_000.0)
    );
    assert_eq!(
        kernel(
            &s,
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)",
            3
        ),
        (42, 130_655_000.0)
    );
    assert_eq!(
        s.source.devices.first().map(|d| d.1.as_str()),
        Some("NVIDIA A100-PG509-200")
    );
    let mc: u64 = s
        .memops
        .iter()
        .filter(|m| m.name.starts_with("Memcpy"))
        .map(|m| m.stats.instances)
        .sum();
    assert_eq!(mc, 228);
    // ProfilerStep#1009 .. #1014 fold into one row
    assert_eq!(range(&s, "ProfilerStep#*").0, 6);
    // newer generation: fractional microseconds, cuda_driver category, Triton kernel
    let t = summary("kineto_hta_triton_example_A100.json.gz", GroupBy::Kernel);
    assert_eq!(kernel(&t, "triton_poi_fused_add_cos_sin_0", 0), (1, 1760.0));
    assert!(t.api.iter().any(|a| a.name == "cuLaunchKernel"));
}

#[test]
fn kineto_diff_across_gpus_warns_and_matches() {
    let o = SummaryOptions::default();
    let r = ReadOptions::default();
    let b = traces::summarize(&fx("kineto_hta_trace_diff_control_A100.json.gz"), o, r);
    let c = traces::summarize(&fx("kineto_hta_trace_diff_test_V100.json.gz"), o, r);
    let (b, c) = match (b, c) {
        (Ok(b), Ok(c)) => (b, c),
        (Err(e), _) | (_, Err(e)) => panic!("{e}"),
    };
    assert_eq!(
        (c.kernel_instances, c.total_kernel_ns),
        (9876, 801_858_000.0)
    );
    let d = traces::diff::diff(&b, &c, &DiffOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(d
        .warnings
        .iter()
        .any(|w| w.contains("device 3") && w.contains("device 1")));
    let nccl = d
        .rows
        .iter()
        .find(|r| r.name == "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)");
    let nccl = nccl.unwrap_or_else(|| panic!("nccl row missing"));
    assert!(nccl.baseline.is_some() && nccl.candidate.is_some());
    // V100 runs volta_sgemm kernels that the A100 run does not have
    assert!(d
        .rows
        .iter()
        .any(|r| r.name == "volta_sgemm_128x32_nt" && r.class == Class::New));
}

fn ncu_dur(name: &str, kernel_prefix: &str) -> (u64, f64, u64) {
    let s = summary(name, GroupBy::Kernel);
    let k = s
        .kernels
        .iter()
        .find(|k| k.name.starts_with(kernel_prefix))
        .unwrap_or_else(|| panic!("{name}: no {kernel_prefix}"));
    (k.stats.instances, k.stats.total_ns, k.stats.failed)
}

#[test]
fn ncu_pages_agree_with_ground_truth() {
    // ground truth from the base-units raw page: vadd 3 / 545760 ns, tr 3 / 371840 ns
    for f in [
        "h200_vadd_transpose_raw.csv",
        "h200_vadd_transpose_raw_b.csv",
    ] {
        let (n, t, _) = ncu_dur(f, "vadd<1,float4>");
        assert_eq!(n, 3, "{f}");
        assert!((t - 545_760.0).abs() < 0.5, "{f}: {t}");
        let (n, t, _) = ncu_dur(f, "tr(");
        assert_eq!(n, 3);
        assert!((t - 371_840.0).abs() < 0.5, "{f}: {t}");
    }
    // details page prints 2 decimals in us: within 0.01 us per instance
    let (n, t, _) = ncu_dur("h200_vadd_transpose_details.csv", "tr(");
    assert_eq!(n, 3);
    assert!((t - 371_840.0).abs() <= 30.0, "{t}");
    // per-kernel summary: 3 invocations each
    let (n, t, _) = ncu_dur("h200_vadd_transpose_sum.csv", "vadd<1,float4>");
    assert_eq!(n, 3);
    assert!((t - 545_760.0).abs() <= 30.0, "{t}");
    // profile mode with ==PROF== lines
    let (n, _, _) = ncu_dur("h200_vadd_transpose_m.csv", "vadd<1,float4>");
    assert_eq!(n, 3);
    // raw page after the program's own stdout
    let (n, _, _) = ncu_dur("h200_cudarc_saxpy_raw_stdout.txt", "saxpy");
    assert_eq!(n, 16);
}

#[test]
fn ncu_failed_flash_attention_row() {
    let s = summary("sglang-fork_H800_s_raw.csv", GroupBy::Kernel);
    // ground truth: 4 distribution kernels totalling 87136 ns; flash row is nan / -nan
    let (n, t, f) = ncu_dur(
        "sglang-fork_H800_s_raw.csv",
        "at::(anonymous namespace)::distribution_elementwise_grid_stride_kernel",
    );
    assert_eq!((n, f), (4, 0));
    assert!((t - 87_136.0).abs() < 0.5, "{t}");
    let (n, t, f) = ncu_dur("sglang-fork_H800_s_raw.csv", "flash_fwd_kernel<");
    assert_eq!((n, t, f), (1, 0.0, 1));
    let flash = s.ncu.iter().find(|k| k.name.contains("flash_fwd_kernel"));
    let flash = flash.unwrap_or_else(|| panic!("flash missing"));
    assert!(flash.failed);
    assert!(flash.key_metrics.is_empty());
    // the details page of the same report agrees
    let (n, _, f) = ncu_dur("sglang-fork_H800_s_details.csv", "flash_fwd_kernel<");
    assert_eq!((n, f), (1, 1));
}

#[test]
fn ncu_metrics_normalised_across_unit_modes() {
    let a = summary("h200_vadd_transpose_raw.csv", GroupBy::Kernel);
    let b = summary("h200_vadd_transpose_raw_b.csv", GroupBy::Kernel);
    let m = |s: &Summary, id: u64, key: &str| -> f64 {
        s.ncu
            .iter()
            .find(|k| k.id == id)
            .and_then(|k| k.key_metrics.iter().find(|(n, _)| n == key).map(|x| x.1))
            .unwrap_or(f64::NAN)
    };
    // auto units (Mbyte, us) vs base units (byte, ns)
    for key in ["dram_bytes", "duration_ns", "registers_per_thread"] {
        let (x, y) = (m(&a, 0, key), m(&b, 0, key));
        assert!(
            (x - y).abs() <= 1e-6 * y.abs().max(1.0),
            "{key}: {x} vs {y}"
        );
    }
    assert_eq!(m(&b, 0, "dram_bytes"), 536_890_880.0 + 250_782_720.0);
    // the bank-conflicting transpose; thousands separators ("16,381,318")
    assert_eq!(m(&b, 1, "shared_bank_conflicts"), 16_381_318.0);
    assert_eq!(m(&b, 0, "shared_bank_conflicts"), 0.0);
    assert!((m(&b, 1, "achieved_occupancy_pct") - 89.53).abs() < 0.01);
    // NVTX columns present: the push/pop state is kept
    assert!(a.ncu[0].nvtx.as_deref().is_some_and(|n| n.contains("step")));
    // ncu metric diff of matched kernels
    let d = traces::diff::diff(&a, &b, &DiffOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.ncu.len(), 2);
    for k in &d.ncu {
        for md in &k.metrics {
            assert!(
                md.pct.unwrap_or(0.0).abs() < 0.1,
                "{} {}: {:?}",
                k.name,
                md.metric,
                md.pct
            );
        }
    }
}

#[test]
fn kernels_grouped_by_innermost_nvtx_range_at_launch() {
    // Ground truth (Python one-off, independent algorithm): for every kernel, find the runtime
    // call with the same correlationId in the same process, then among the NVTX push/pop ranges
    // of that thread with start <= launch <= end take the one that started last; names with
    // `, seq = / op_id =` suffixes folded. flash_attn::_flash_attn_forward on GPU 1: 33 kernels,
    // 128489856 ns; aten::copy_ on GPU 0: 905, 31860675; aten::gelu on GPU 1: 17, 3124789;
    // ncclGroupEnd on GPU 0: 32, 17072844.
    let s = summary(
        "nsys-2026.2.1_nsysai_mfu_2xH100_before.sqlite.gz",
        GroupBy::NvtxKernels,
    );
    assert_eq!(
        kernel(&s, "flash_attn::_flash_attn_forward", 1),
        (33, 128_489_856.0)
    );
    assert_eq!(kernel(&s, "aten::copy_", 0), (905, 31_860_675.0));
    assert_eq!(kernel(&s, "aten::gelu", 1), (17, 3_124_789.0));
    assert_eq!(kernel(&s, "ncclGroupEnd", 0), (32, 17_072_844.0));
    // every kernel is accounted for
    assert_eq!(
        (s.kernel_instances, s.total_kernel_ns),
        (4010, 535_200_650.0)
    );
    // other formats say why they cannot do this
    let e = traces::summarize(
        &fx("kineto_hta_triton_example_A100.json.gz"),
        SummaryOptions {
            group_by: GroupBy::NvtxKernels,
            merge_devices: false,
        },
        ReadOptions::default(),
    );
    assert!(e.is_err_and(|e| e.to_string().contains("nsys SQLite")));
}
