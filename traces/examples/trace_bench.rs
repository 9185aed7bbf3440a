//! Speed / memory benchmark on generated large captures (not part of the test run).
//!
//!   cargo run --release -p duet-traces --example trace_bench            # generate + measure
//!   cargo run --release -p duet-traces --example trace_bench -- gen DIR [KERNELS] [EVENTS]
//!   cargo run --release -p duet-traces --example trace_bench -- run FILE
//!
//! `all` (the default) generates an nsys SQLite export with 1,000,000 kernels (+1,000,000 NVTX
//! ranges with PyTorch `op_id` suffixes, +200,000 runtime calls) and a Kineto trace with
//! 2,700,000 events in a temp dir, then summarises each in a fresh child process and prints
//! wall time and peak RSS (VmHWM).

use rusqlite::{params, Connection};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

const N_NAMES: usize = 400;

fn kernel_name(i: usize) -> String {
    format!(
        "void at::native::elementwise_kernel<128, {}, void at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance {})]>(int, T3)",
        i % 8,
        i
    )
}

fn gen_sqlite(path: &Path, kernels: usize) -> rusqlite::Result<()> {
    let _ = std::fs::remove_file(path);
    let mut c = Connection::open(path)?;
    c.execute_batch(
        "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
         CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
         INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION','3.25.0');
         CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
           deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
           streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
           demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER,
           launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER NOT NULL,
           gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL,
           blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL,
           staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
           localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL,
           gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, graphNodeId INTEGER,
           sharedMemoryLimitConfig INTEGER);
         CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
           rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
           endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
           eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,
           nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);",
    )?;
    let tx = c.transaction()?;
    {
        let mut s = tx.prepare("INSERT INTO StringIds VALUES (?1, ?2)")?;
        for i in 0..N_NAMES {
            s.execute(params![(i * 2) as i64, kernel_name(i)])?;
            s.execute(params![(i * 2 + 1) as i64, "elementwise_kernel"])?;
        }
        s.execute(params![100_000i64, "cudaLaunchKernel_v7000"])?;
        let mut k = tx.prepare(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?1,?2,?3,1,NULL,7,?4,281477409406976,?5,?6,NULL,0,0,32,?7,1,1,128,1,1,0,0,0,0,?4,0,NULL,0)",
        )?;
        let mut t: i64 = 1_000_000;
        let mut x: u64 = 88172645463325252;
        for i in 0..kernels {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let name = (x % N_NAMES as u64) as i64;
            let dur = 2_000 + (x >> 20) as i64 % 50_000;
            k.execute(params![
                t,
                t + dur,
                (i % 2) as i64,
                i as i64,
                name * 2,
                name * 2 + 1,
                (x % 4096) as i64 + 1
            ])?;
            t += dur / 2 + 100;
        }
        let mut n = tx.prepare(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?1, ?2, 59, ?3, 281477409407121)",
        )?;
        let ops = [
            "aten::mm",
            "aten::add",
            "aten::linear",
            "aten::copy_",
            "aten::empty",
        ];
        let mut t: i64 = 1_000_000;
        for i in 0..kernels {
            let text = format!("{}, seq = {}, op_id = {}", ops[i % ops.len()], i / 3, i);
            n.execute(params![t, t + 5_000, text])?;
            t += 6_000;
        }
        let mut r = tx.prepare(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?1, ?2, 0, 281477409407121, ?3, 100000, 0, NULL)",
        )?;
        for i in 0..kernels / 5 {
            let t = 1_000_000 + i as i64 * 10_000;
            r.execute(params![t, t + 4_000, i as i64])?;
        }
    }
    tx.commit()?;
    Ok(())
}

fn gen_kineto(path: &Path, events: usize) -> std::io::Result<()> {
    let f = std::fs::File::create(path)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 22, f);
    writeln!(w, "{{\"schemaVersion\": 1, \"deviceProperties\": [{{\"id\": 0, \"name\": \"NVIDIA H100\"}}],\n\"traceEvents\": [")?;
    let mut ts: f64 = 1_700_000_000_000.0;
    let mut x: u64 = 0x1234_5678_9abc_def1;
    for i in 0..events {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let sep = if i + 1 == events { "" } else { "," };
        let dur = 1.0 + (x % 5000) as f64 / 100.0;
        match i % 10 {
            0..=3 => {
                let k = x % N_NAMES as u64;
                writeln!(
                    w,
                    "  {{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": {}, \"pid\": 0, \"tid\": 7, \"ts\": {ts:.3}, \"dur\": {dur:.3}, \"args\": {{\"External id\": {i}, \"queued\": 0, \"device\": 0, \"context\": 1, \"stream\": 7, \"correlation\": {i}, \"registers per thread\": 32, \"shared memory\": 0, \"blocks per SM\": 0.5, \"warps per SM\": 2.0, \"grid\": [64, 1, 1], \"block\": [128, 1, 1], \"est. achieved occupancy %\": 4}}}}{sep}",
                    serde_json::to_string(&kernel_name(k as usize)).unwrap_or_default()
                )?;
            }
            4..=6 => writeln!(
                w,
                "  {{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 100, \"tid\": 100, \"ts\": {ts:.3}, \"dur\": {dur:.3}, \"args\": {{\"External id\": {i}, \"cbid\": 211, \"correlation\": {i}}}}}{sep}"
            )?,
            7 | 8 => writeln!(
                w,
                "  {{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 100, \"tid\": 100, \"ts\": {ts:.3}, \"dur\": {dur:.3}, \"args\": {{\"External id\": {i}, \"Record function id\": 0, \"Sequence number\": {i}, \"Fwd thread id\": 0, \"Ev Idx\": {i}}}}}{sep}"
            )?,
            _ => writeln!(
                w,
                "  {{\"ph\": \"X\", \"cat\": \"gpu_memcpy\", \"name\": \"Memcpy DtoD (Device -> Device)\", \"pid\": 0, \"tid\": 7, \"ts\": {ts:.3}, \"dur\": {dur:.3}, \"args\": {{\"External id\": {i}, \"device\": 0, \"context\": 1, \"stream\": 7, \"correlation\": {i}, \"bytes\": 1048576, \"memory bandwidth (GB/s)\": 500.0}}}}{sep}"
            )?,
        }
        ts += dur + 0.5;
    }
    writeln!(w, "]}}")?;
    w.flush()
}

/// A `/proc/self/status` field in MiB (VmHWM = peak RSS incl. file-backed mmap pages,
/// RssAnon = anonymous memory now).
fn status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// CPU seconds (user + system) of this process so far, from /proc/self/stat (100 Hz ticks).
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit(')').next()?.to_string();
            let f: Vec<&str> = rest.split_whitespace().collect();
            let u: f64 = f.get(11)?.parse().ok()?;
            let k: f64 = f.get(12)?.parse().ok()?;
            Some((u + k) / 100.0)
        })
        .unwrap_or(f64::NAN)
}

fn run(path: &Path, group: Option<&str>) -> i32 {
    let t = Instant::now();
    let r = traces::summarize(
        path,
        traces::SummaryOptions {
            group_by: group.and_then(traces::GroupBy::parse).unwrap_or_default(),
            merge_devices: false,
        },
        traces::ReadOptions::default(),
    );
    let dt = t.elapsed().as_secs_f64();
    match r {
        Ok(s) => {
            let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            println!(
                "{}: {:.2} s wall ({:.2} s CPU), peak RSS {:.0} MiB (anonymous at end {:.0} MiB), file {:.0} MiB, {} kernel instances, {} kernel rows, {} NVTX rows, {} API rows",
                path.file_name().map(|f| f.to_string_lossy()).unwrap_or_default(),
                dt,
                cpu_seconds(),
                status_mib("VmHWM:"),
                status_mib("RssAnon:"),
                size as f64 / 1048576.0,
                s.kernel_instances,
                s.kernels.len(),
                s.nvtx.len(),
                s.api.len()
            );
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}

fn gen(dir: &Path, kernels: usize, events: usize) -> Result<(PathBuf, PathBuf), String> {
    let db = dir.join("big_nsys.sqlite");
    let js = dir.join("big_kineto.json");
    let t = Instant::now();
    gen_sqlite(&db, kernels).map_err(|e| format!("generating sqlite: {e}"))?;
    eprintln!(
        "generated {} in {:.1} s",
        db.display(),
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    gen_kineto(&js, events).map_err(|e| format!("generating kineto: {e}"))?;
    eprintln!(
        "generated {} in {:.1} s",
        js.display(),
        t.elapsed().as_secs_f64()
    );
    Ok((db, js))
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let mode = a.get(1).map(String::as_str).unwrap_or("all");
    let code = match mode {
        "run" => match a.get(2) {
            Some(f) => run(Path::new(f), a.get(3).map(String::as_str)),
            None => 2,
        },
        "gen" => {
            let dir = PathBuf::from(a.get(2).cloned().unwrap_or_else(|| ".".into()));
            let k = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
            let e = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(2_700_000);
            match gen(&dir, k, e) {
                Ok(_) => 0,
                Err(e) => {
                    eprintln!("{e}");
                    2
                }
            }
        }
        _ => {
            let dir = match tempfile::tempdir() {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("tempdir: {e}");
                    std::process::exit(2)
                }
            };
            match gen(dir.path(), 1_000_000, 2_700_000) {
                Ok((db, js)) => {
                    let exe = std::env::current_exe().unwrap_or_default();
                    let mut code = 0;
                    for f in [&db, &js] {
                        let st = std::process::Command::new(&exe).arg("run").arg(f).status();
                        if !st.map(|s| s.success()).unwrap_or(false) {
                            code = 1;
                        }
                    }
                    code
                }
                Err(e) => {
                    eprintln!("{e}");
                    2
                }
            }
        }
    };
    std::process::exit(code);
}
