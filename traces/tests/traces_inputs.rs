//! Malformed inputs, format detection by content, nsys stats CSV variants, the diff's
//! classification on generated traces, Chrome conversion, and property tests.

use proptest::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use traces::diff::{Class, DiffOptions};
use traces::summary::{GroupBy, Summary, SummaryOptions};
use traces::{ReadOptions, TraceError};

fn fx(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("fixtures")
        .join("traces")
        .join(name)
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    p
}

fn gunzip(name: &str) -> Vec<u8> {
    let f = std::fs::File::open(fx(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(f), &mut out)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    out
}

fn summarize(p: &Path) -> traces::Result<Summary> {
    traces::summarize(p, SummaryOptions::default(), ReadOptions::default())
}

fn expect_err(p: &Path) -> TraceError {
    match summarize(p) {
        Ok(s) => panic!(
            "{} parsed but should fail: {} kernels",
            p.display(),
            s.kernels.len()
        ),
        Err(e) => {
            let msg = e.to_string();
            let fname = p
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            assert!(msg.contains(&fname), "error should name the file: {msg}");
            e
        }
    }
}

#[test]
fn malformed_files_give_clear_errors() {
    let d = tmp();
    let e = expect_err(&write(d.path(), "empty.sqlite", b""));
    assert!(matches!(e, TraceError::Empty { .. }), "{e}");
    let e = expect_err(d.path());
    assert!(matches!(e, TraceError::IsDirectory { .. }), "{e}");

    let db = gunzip("nsys-2022.2.1_pipit_saxpy-mpi-cuda_A100.sqlite.gz");
    // zeroed header: a half-written export
    let mut z = db.clone();
    z[..100].fill(0);
    let e = expect_err(&write(d.path(), "zeroed.sqlite", &z));
    assert!(matches!(e, TraceError::ZeroedSqliteHeader { .. }), "{e}");
    assert!(e.to_string().contains("half-written"));
    // truncated export
    let e = expect_err(&write(d.path(), "trunc.sqlite", &db[..db.len() / 3]));
    assert!(
        matches!(e, TraceError::Sqlite { .. } | TraceError::NotNsys { .. }),
        "{e}"
    );
    // wrong magic / binary garbage
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let e = expect_err(&write(d.path(), "garbage.sqlite", &garbage));
    assert!(
        matches!(
            e,
            TraceError::UnknownFormat { .. } | TraceError::NotUtf8 { .. }
        ),
        "{e}"
    );
    // truncated gzip
    let gz = std::fs::read(fx("kineto_hta_triton_example_A100.json.gz")).unwrap_or_default();
    let e = expect_err(&write(d.path(), "trunc.json.gz", &gz[..gz.len() / 2]));
    assert!(matches!(e, TraceError::Gzip { .. }), "{e}");
    // truncated JSON
    let js = gunzip("kineto_hta_triton_example_A100.json.gz");
    let e = expect_err(&write(d.path(), "trunc.json", &js[..js.len() * 2 / 3]));
    assert!(matches!(e, TraceError::Json { .. }), "{e}");
    assert!(e.to_string().contains("truncated"), "{e}");
    // a malformed event: the error names its line
    let bad = b"{\"traceEvents\": [\n{\"ph\": \"X\", \"dur\": 1},\n{\"ph\": X}\n]}";
    let e = expect_err(&write(d.path(), "bad_event.json", bad));
    assert!(matches!(e, TraceError::Json { line: 3, .. }), "{e:?}");
    // JSON that is not a Kineto trace
    let e = expect_err(&write(d.path(), "other.json", br#"{"hello": [1, 2, 3]}"#));
    assert!(matches!(e, TraceError::NotKineto { .. }), "{e}");
    // non-UTF-8 CSV (Latin-1 byte in a kernel name)
    let mut csv = b"Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n".to_vec();
    csv.extend_from_slice(b"100.0,10,1,10,10,10,10,0,k\xe9rnel\n");
    let e = expect_err(&write(d.path(), "latin1.csv", &csv));
    assert!(e.to_string().contains("UTF-8"), "{e}");
    // binary report instead of an export
    let e = expect_err(&write(
        d.path(),
        "run.nsys-rep",
        b"\x00\x01binary nsys report",
    ));
    assert!(e.to_string().contains("nsys export"), "{e}");
    // a CSV of something else
    let e = expect_err(&write(d.path(), "other.csv", b"a,b,c\n1,2,3\n"));
    assert!(matches!(e, TraceError::UnknownFormat { .. }), "{e}");
    // a SQLite database that is not an nsys export
    let p = d.path().join("other.sqlite");
    {
        let c = rusqlite::Connection::open(&p).unwrap_or_else(|e| panic!("{e}"));
        c.execute("CREATE TABLE foo (x INTEGER)", [])
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let e = expect_err(&p);
    assert!(matches!(e, TraceError::NotNsys { .. }), "{e}");
    // ncu session page
    let e = expect_err(&fx("sglang-fork_H800_s_session.csv"));
    assert!(e.to_string().contains("--page raw"), "{e}");
}

#[test]
fn detection_is_by_content_not_extension() {
    let d = tmp();
    // an ncu CSV named .json, a Kineto trace named .csv, a sqlite with no extension
    let ncu = std::fs::read(fx("h200_vadd_transpose_raw.csv")).unwrap_or_default();
    let s = summarize(&write(d.path(), "x.json", &ncu)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.source.format, Some(traces::Format::NcuCsv));
    let js = gunzip("kineto_hta_triton_example_A100.json.gz");
    let s = summarize(&write(d.path(), "trace.csv", &js)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.source.format, Some(traces::Format::Kineto));
    let db = gunzip("nsys-2022.2.1_pipit_saxpy-mpi-cuda_A100.sqlite.gz");
    let s = summarize(&write(d.path(), "export", &db)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.kernel_instances, 5);
}

const KERN_SUM_2023: &str = "Generating SQLite file report.sqlite from report.nsys-rep
NOTICE: Existing SQLite export found: report.sqlite
Processing [report.sqlite] with [/opt/nvidia/nsight-systems/2023.4.1/host-linux-x64/reports/cuda_gpu_kern_sum.py]...

 ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):

Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
78.9,1234567,10,123456.7,123000.0,120000,130000,3000.5,\"void gemm<float, (int)128>(int, const float *)\"
21.1,330000,3,110000.0,110000.0,100000,120000,10000.0,vadd

";

const GPUKERNSUM_2021: &str =
    "Time(%),Total Time (ns),Instances,Average,Minimum,Maximum,StdDev,Name
80.0,1300000,10,130000.0,120000,140000,3000.5,\"void gemm<float, 128>(int, float const*)\"
20.0,330000,3,110000.0,100000,120000,10000.0,vadd
";

const GPU_TRACE_NEW: &str = "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),Bytes (MB),Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name
1000,500,12,64,1,1,256,1,1,32,0.000,0.000,,,,,NVIDIA H100 80GB HBM3 (0),1,,7,\"void gemm<float, 128>(int, const float *)\"
2000,300,13,,,,,,,,,,4.194,13981.013,Pageable,Device,NVIDIA H100 80GB HBM3 (0),1,,7,[CUDA memcpy Host-to-Device]
3000,700,14,64,1,1,256,1,1,32,0.000,0.000,,,,,NVIDIA H100 80GB HBM3 (1),1,,7,\"void gemm<float, 128>(int, const float *)\"
";

const GPUTRACE_OLD_US: &str = "Start (us),Duration (us),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),Bytes (MB),Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name
1.000,0.500,12,64,1,1,256,1,1,32,0.000,0.000,,,,,Tesla V100-SXM2-16GB (0),1,7,void gemm<float, 128>(int, float const*)
2.000,0.300,13,,,,,,,,,,4.194,13981.013,Pageable,Device,Tesla V100-SXM2-16GB (0),1,7,[CUDA memcpy HtoD]
";

#[test]
fn nsys_stats_csv_generations_and_units() {
    let d = tmp();
    let s = summarize(&write(
        d.path(),
        "report_cuda_gpu_kern_sum.csv",
        KERN_SUM_2023.as_bytes(),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(s.aggregated_only);
    let g = &s.kernels[0];
    assert_eq!(g.name, "gemm<float,128>(int,const float*)");
    assert_eq!(
        (g.stats.instances, g.stats.total_ns, g.stats.median_ns),
        (10, 1_234_567.0, 123_000.0)
    );
    assert_eq!(s.kernels[1].name, "vadd");
    // old report name without a banner: classified from the (non-API) names
    let s = summarize(&write(d.path(), "old.csv", GPUKERNSUM_2021.as_bytes()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.kernels.len(), 2);
    assert_eq!(s.kernels[0].stats.instances, 10);
    // `float const*` (c++filt) and `const float *` (nsys) differ only in const placement; the
    // diff joins gemm at the base level
    // gpu trace, new style: per-device kernels, new memcpy names
    let s = summarize(&write(d.path(), "t.csv", GPU_TRACE_NEW.as_bytes()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.devices, vec![0, 1]);
    assert_eq!(s.kernel_instances, 2);
    assert_eq!(s.memops[0].name, "Memcpy HtoD");
    assert_eq!(s.memops[0].stats.bytes, 4_194_000);
    // old style, microsecond columns, minimal quoting with commas inside an unquoted name is
    // not valid CSV, so nsys quotes; here the old name has no quotes and must still parse the
    // first fields right
    let s = summarize(&write(
        d.path(),
        "old_trace.csv",
        GPUTRACE_OLD_US.as_bytes(),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.memops[0].name, "Memcpy HtoD");
    assert_eq!(s.memops[0].stats.total_ns, 300.0);
    assert_eq!(s.kernel_instances, 1);
    assert_eq!(s.total_kernel_ns, 500.0);
    // old and new memcpy spellings diff as the same row
    let a = summarize(&d.path().join("t.csv")).unwrap_or_else(|e| panic!("{e}"));
    let b = summarize(&d.path().join("old_trace.csv")).unwrap_or_else(|e| panic!("{e}"));
    let df = traces::diff::diff(&a, &b, &DiffOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let m = df
        .memops
        .iter()
        .find(|r| r.name == "Memcpy HtoD" && r.device == Some(0));
    assert!(
        m.is_some_and(|m| m.baseline.is_some() && m.candidate.is_some()),
        "{:?}",
        df.memops
    );
}

#[test]
fn nsys_stats_multi_report_file_skips_unsupported_reports() {
    let text = format!(
        "{}\n ** OS Runtime Summary (osrt_sum):\n\nTime (%),Total Time (ns),Num Calls,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n90.0,5000000,10,500000.0,500000.0,1000,900000,100.0,poll\n\n ** CUDA API Summary (cuda_api_sum):\n\nTime (%),Total Time (ns),Num Calls,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n100.0,4000,2,2000.0,2000.0,1000,3000,1414.2,cudaLaunchKernel_v7000\n",
        KERN_SUM_2023
    );
    let d = tmp();
    let s = summarize(&write(d.path(), "all_reports.csv", text.as_bytes()))
        .unwrap_or_else(|e| panic!("{e}"));
    // kernels from the kernel summary only; `poll` (OS runtime) is not a kernel
    assert_eq!(s.kernels.len(), 2);
    assert!(s.kernels.iter().all(|k| k.name != "poll"));
    assert_eq!(s.api.len(), 1);
    assert_eq!(s.api[0].name, "cudaLaunchKernel");
    assert_eq!(s.api[0].stats.instances, 2);
}

/// Generate a Kineto trace: (name, device, durations in µs).
fn kineto(kernels: &[(&str, i64, Vec<f64>)]) -> String {
    let mut ev = Vec::new();
    let mut ts = 1_000_000.0f64;
    for (name, dev, durs) in kernels {
        for d in durs {
            ev.push(format!(
                r#"{{"ph":"X","cat":"kernel","name":{},"pid":{dev},"tid":7,"ts":{ts:.3},"dur":{d:.3},"args":{{"device":{dev},"stream":7,"grid":[8,1,1],"block":[128,1,1]}}}}"#,
                serde_json::to_string(name).unwrap_or_default()
            ));
            ts += d + 1.0;
        }
    }
    format!(
        r#"{{"schemaVersion":1,"traceEvents":[{}]}}"#,
        ev.join(",\n")
    )
}

fn noisy(n: usize, base: f64, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            base * (1.0 + ((s % 1000) as f64 / 1000.0 - 0.5) * 0.04)
        })
        .collect()
}

#[test]
fn diff_classifies_generated_changes() {
    let d = tmp();
    let base = kineto(&[
        ("steady", 0, noisy(200, 10.0, 1)),
        ("slower", 0, noisy(200, 20.0, 2)),
        ("faster", 0, noisy(200, 40.0, 3)),
        ("_fwd_kernel", 0, noisy(50, 5.0, 4)),
        ("gone", 0, noisy(20, 50.0, 5)),
        ("tiny", 0, noisy(5, 0.5, 6)),
    ]);
    let cand = kineto(&[
        ("steady", 0, noisy(200, 10.0, 11)),
        ("slower", 0, noisy(200, 30.0, 12)),
        ("faster", 0, noisy(200, 30.0, 13)),
        ("_fwd_kernel", 0, noisy(50, 5.0, 14)),
        ("_fwd_kernel_stage2", 0, noisy(50, 5.0, 15)),
        ("tiny", 0, noisy(5, 0.8, 16)),
    ]);
    let b = write(d.path(), "base.json", base.as_bytes());
    let c = write(d.path(), "cand.json", cand.as_bytes());
    let (sb, sc) = (summarize(&b), summarize(&c));
    let (sb, sc) = match (sb, sc) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => panic!("{e}"),
    };
    let df =
        traces::diff::diff(&sb, &sc, &DiffOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let class = |n: &str| {
        df.rows
            .iter()
            .find(|r| r.name == n)
            .map(|r| r.class)
            .unwrap_or_else(|| panic!("no row {n}"))
    };
    assert_eq!(class("steady"), Class::Unchanged);
    assert_eq!(class("slower"), Class::Regressed);
    assert_eq!(class("faster"), Class::Improved);
    assert_eq!(class("gone"), Class::Removed);
    assert_eq!(class("_fwd_kernel"), Class::Unchanged);
    assert_eq!(class("_fwd_kernel_stage2"), Class::New);
    // +60% but only ~1.5 us of impact: below the minimum absolute delta
    assert_eq!(class("tiny"), Class::Unchanged);
    let slower = df.rows.iter().find(|r| r.name == "slower");
    let slower = slower.unwrap_or_else(|| panic!("slower"));
    assert!((slower.delta_mean_pct.unwrap_or(0.0) - 50.0).abs() < 2.0);
    assert!(slower.p_value.unwrap_or(1.0) < 1e-6);
    // a stricter threshold turns the regression off
    let strict = DiffOptions {
        threshold_pct: 80.0,
        ..Default::default()
    };
    let df2 = traces::diff::diff(&sb, &sc, &strict).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(df2.counts.regressed, 0);
    // grouping by base name and merged devices works on the same data
    let o = SummaryOptions {
        group_by: GroupBy::Base,
        merge_devices: true,
    };
    let s = traces::summarize(&b, o, ReadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.kernels.iter().all(|k| k.device == -1));
}

#[test]
fn two_gpu_diff_warns_when_a_device_is_on_one_side_only() {
    let d = tmp();
    let b = write(
        d.path(),
        "b.json",
        kineto(&[("k", 0, noisy(30, 10.0, 1)), ("k", 1, noisy(30, 10.0, 2))]).as_bytes(),
    );
    let c = write(
        d.path(),
        "c.json",
        kineto(&[("k", 0, noisy(30, 10.0, 3)), ("k", 2, noisy(30, 10.0, 4))]).as_bytes(),
    );
    let (sb, sc) = match (summarize(&b), summarize(&c)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => panic!("{e}"),
    };
    let df =
        traces::diff::diff(&sb, &sc, &DiffOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(df
        .warnings
        .iter()
        .any(|w| w.contains("device 1 appears only in the baseline")));
    assert!(df
        .warnings
        .iter()
        .any(|w| w.contains("device 2 appears only in the candidate")));
    assert_eq!(df.counts.removed, 1);
    assert_eq!(df.counts.new, 1);
}

#[test]
fn chrome_conversion_is_valid_json_and_atomic() {
    let d = tmp();
    let out = d.path().join("out.json");
    let n = traces::chrome::convert(
        &fx("nsys-2022.2.1_pipit_saxpy-mpi-cuda_A100.sqlite.gz"),
        &out,
        false,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let evs = v["traceEvents"].as_array().cloned().unwrap_or_default();
    let x: Vec<&serde_json::Value> = evs.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(x.len() as u64, n);
    // 5 kernels + 15 memcpy + 22 NVTX ranges + 95 runtime calls
    let kernels = x.iter().filter(|e| e["cat"] == "kernel").count();
    assert_eq!(kernels, 5);
    let k0 = x
        .iter()
        .find(|e| e["cat"] == "kernel")
        .cloned()
        .cloned()
        .unwrap_or_default();
    assert!(k0["dur"].as_f64().unwrap_or(0.0) > 17_000.0); // µs
                                                           // only the output file is left in the directory (temp file renamed)
    let names: Vec<String> = std::fs::read_dir(d.path())
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, vec!["out.json".to_string()]);
    // an aggregated report has no timeline: clear error, no output file
    let agg = write(d.path(), "sum.csv", GPUKERNSUM_2021.as_bytes());
    let bad = d.path().join("bad.json");
    let e = traces::chrome::convert(&agg, &bad, false);
    assert!(e.is_err());
    assert!(!bad.exists());
    // a failed read leaves no partial output either
    let e = traces::chrome::convert(&d.path().join("missing.sqlite"), &bad, false);
    assert!(e.is_err());
    assert!(!bad.exists());
}

#[test]
fn kineto_top_level_array_and_string_ids() {
    let d = tmp();
    let js = r#"[{"ph":"X","cat":"Kernel","name":"k1","pid":"GPU 2","tid":"stream 7","ts":10,"dur":3},
                {"ph":"X","cat":"gpu_memset","name":"Memset (Device)","pid":2,"tid":7,"ts":20,"dur":1,"args":{"device":2,"bytes":64}},
                {"ph":"i","name":"marker","ts":5}]"#;
    let s =
        summarize(&write(d.path(), "arr.json", js.as_bytes())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.kernels[0].device, 2);
    assert_eq!(s.kernels[0].stats.total_ns, 3000.0);
    assert_eq!(s.memops[0].stats.bytes, 64);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn canonical_names_are_idempotent(s in "[ a-zA-Z0-9_:<>(),*&{}#\\[\\]-]{0,60}") {
        let once = traces::names::canonical_full(&s);
        let twice = traces::names::canonical_full(&once);
        prop_assert_eq!(&once, &twice);
        let _ = traces::names::CanonicalName::new(&s);
    }

    #[test]
    fn truncated_kineto_never_panics(cut in 0usize..2000) {
        let js = kineto(&[("a", 0, vec![1.0, 2.0, 3.0]), ("b<int>", 1, vec![4.0; 5])]);
        let cut = cut.min(js.len());
        let d = tmp();
        let p = write(d.path(), "t.json", &js.as_bytes()[..cut]);
        let r = summarize(&p);
        if cut < js.len() {
            prop_assert!(r.is_err());
        }
    }

    #[test]
    fn names_and_units_never_panic_on_unicode(s in "\\PC{0,40}") {
        let _ = traces::names::CanonicalName::new(&s);
        let _ = traces::names::CanonicalName::new(&format!("_Z3{s}"));
        let _ = traces::ncu::normalize_unit(1.0, &s);
        let _ = traces::names::canonical_range_name(&s);
    }

    #[test]
    fn csv_readers_never_panic_on_mutated_exports(
        which in 0usize..4,
        pos in 0usize..4000,
        byte in any::<u8>(),
        cut in 0usize..5000,
    ) {
        let seeds = [
            GPU_TRACE_NEW.as_bytes().to_vec(),
            KERN_SUM_2023.as_bytes().to_vec(),
            std::fs::read(fx("h200_vadd_transpose_m.csv")).unwrap_or_default(),
            std::fs::read(fx("sglang-fork_H800_s_raw.csv")).unwrap_or_default()[..4000].to_vec(),
        ];
        let mut data = seeds[which].clone();
        if !data.is_empty() {
            let p = pos % data.len();
            data[p] = byte;
            data.truncate(cut.max(1).min(data.len()));
        }
        for ncu in [false, true] {
            let mut info = traces::SourceInfo::default();
            let mut agg = traces::summary::Aggregator::new();
            let r: Box<dyn std::io::BufRead> = Box::new(std::io::Cursor::new(data.clone()));
            let p = Path::new("m.csv");
            let ok = if ncu {
                traces::ncu::read(p, r, false, &mut info, &mut agg).is_ok()
            } else {
                traces::nsys_csv::read(p, r, false, &mut info, &mut agg).is_ok()
            };
            if ok {
                let s = agg.finish(info, SummaryOptions::default());
                let _ = traces::report::summary_text(&s, 10);
            }
        }
    }

    #[test]
    fn csv_split_and_numbers_never_panic(line in "[ -~]{0,80}") {
        let _ = traces::textcsv::split(&line);
        let _ = traces::textcsv::parse_num(&line);
        let _ = traces::nsys_csv::classify_header_line(&line);
    }
}

#[test]
fn progress_flag_is_harmless_without_a_tty() {
    let s = traces::summarize(
        &fx("nsys-2024.5.1_pipit_cloverleaf-cuda_A100.sqlite.gz"),
        SummaryOptions::default(),
        ReadOptions {
            progress: true,
            ..Default::default()
        },
    );
    assert!(s.is_ok_and(|s| s.kernel_instances == 1312));
    let mut out = Vec::new();
    let _ = writeln!(out, "ok");
}
