//! `nsys stats --format csv` reports: `cuda_gpu_kern_sum`, `cuda_api_sum`, `nvtx_sum`,
//! `cuda_gpu_trace`, `nvtx_pushpop_trace`, `cuda_api_trace`, `cuda_gpu_mem_*_sum` and their
//! pre-2023 names (`gpukernsum`, `cudaapisum`, `nvtxsum`/`nvtxppsum`, `gputrace`,
//! `nvtxpptrace`). Banners and NOTICE lines may precede each report; several reports may share
//! one file. Columns are found by header name; time columns may carry any unit suffix.

use crate::error::{Result, TraceError};
use crate::model::*;
use crate::textcsv::{parse_num, split, Lines};
use std::io::BufRead;
use std::path::Path;

/// Which report a CSV section is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsKind {
    /// `cuda_gpu_kern_sum` or `cuda_api_sum` (same header; resolved by banner / file name /
    /// content).
    NameSum,
    KernSum,
    ApiSum,
    NvtxSum,
    MemSum,
    GpuTrace,
    ApiTrace,
    NvtxPushPopTrace,
    /// A report this reader does not model (OS runtime, memory sizes, ...): skipped.
    Other,
}

/// A header column: name without unit suffix, and the ns multiplier of its unit.
#[derive(Debug, Clone)]
struct Col {
    name: String,
    scale: f64,
}

fn parse_col(h: &str) -> Col {
    let h = h.trim();
    if let Some(open) = h.rfind('(') {
        if h.ends_with(')') {
            let unit = &h[open + 1..h.len() - 1];
            let base = h[..open].trim().to_string();
            let scale = match unit {
                "ns" | "nsec" => Some(1.0),
                "us" | "µs" | "μs" | "usec" => Some(1e3),
                "ms" | "msec" => Some(1e6),
                "s" | "sec" => Some(1e9),
                "%" => Some(1.0),
                "B" => Some(1.0),
                "KB" => Some(1e3),
                "MB" => Some(1e6),
                "GB" => Some(1e9),
                "KiB" => Some(1024.0),
                "MiB" => Some(1048576.0),
                "GiB" => Some(1073741824.0),
                _ => None,
            };
            if let Some(scale) = scale {
                let name = if unit == "%" {
                    format!("{base}%")
                } else {
                    base
                };
                return Col { name, scale };
            }
        }
    }
    Col {
        name: h.to_string(),
        scale: 1.0,
    }
}

fn find(cols: &[Col], names: &[&str]) -> Option<usize> {
    names
        .iter()
        .find_map(|n| cols.iter().position(|c| c.name.eq_ignore_ascii_case(n)))
}

fn classify(cols: &[Col]) -> Option<StatsKind> {
    let has = |n: &[&str]| find(cols, n).is_some();
    let count = has(&["Instances", "Num Calls", "Calls", "Count"]);
    let total = has(&["Total Time"]);
    if has(&["Start"])
        && has(&["End"])
        && has(&["Duration"])
        && has(&["Name"])
        && has(&["Lvl", "RangeId", "NameTree", "Level"])
    {
        return Some(StatsKind::NvtxPushPopTrace);
    }
    if has(&["Start"]) && has(&["Duration"]) && has(&["Name"]) {
        if has(&["GrdX", "Strm", "GridX", "Stream"]) {
            return Some(StatsKind::GpuTrace);
        }
        if has(&["CorrID", "CorrId"]) && has(&["Tid", "TID"]) {
            return Some(StatsKind::ApiTrace);
        }
    }
    if total && count {
        if has(&["Range"]) {
            return Some(StatsKind::NvtxSum);
        }
        if has(&["Operation"]) {
            return Some(StatsKind::MemSum);
        }
        if has(&["Name"]) {
            return Some(StatsKind::NameSum);
        }
    }
    None
}

/// Is this line the header of a known `nsys stats` report?
pub fn classify_header_line(line: &str) -> Option<StatsKind> {
    if !line.contains(',') {
        return None;
    }
    let cols: Vec<Col> = split(line).iter().map(|h| parse_col(h)).collect();
    classify(&cols)
}

fn kind_from_text(s: &str) -> Option<StatsKind> {
    let l = s.to_ascii_lowercase();
    if l.contains("cuda_gpu_kern_sum")
        || l.contains("cuda_gpu_kern_gb_sum")
        || l.contains("gpukernsum")
        || l.contains("kernel summary")
    {
        Some(StatsKind::KernSum)
    } else if l.contains("cuda_api_sum") || l.contains("cudaapisum") || l.contains("api summary") {
        Some(StatsKind::ApiSum)
    } else if [
        "osrt_sum",
        "osrtsum",
        "os runtime",
        "cuda_gpu_mem_size_sum",
        "gpumemsizesum",
        "openmp_sum",
        "vulkan_",
        "opengl_",
        "dx11_",
        "dx12_",
        "wddm_",
        "um_sum",
        "um_total_sum",
        "um_cpu_page_faults_sum",
        "mpi_event_sum",
    ]
    .iter()
    .any(|k| l.contains(k))
    {
        Some(StatsKind::Other)
    } else {
        None
    }
}

fn device_of(s: &str) -> Option<i64> {
    // "NVIDIA H100 80GB HBM3 (0)" or "0"
    let t = s.trim();
    if let Ok(v) = t.parse::<i64>() {
        return Some(v);
    }
    let open = t.rfind('(')?;
    t[open + 1..].trim_end_matches(')').trim().parse().ok()
}

struct Section {
    kind: StatsKind,
    cols: Vec<Col>,
    rows: u64,
}

/// Read an `nsys stats` CSV file.
pub fn read(
    path: &Path,
    reader: Box<dyn BufRead>,
    gz: bool,
    info: &mut SourceInfo,
    sink: &mut dyn Sink,
) -> Result<()> {
    read_with_progress(path, reader, gz, info, sink, None)
}

/// Like [`read`], drawing progress through `ticker` (bytes of the underlying file).
pub fn read_with_progress(
    path: &Path,
    reader: Box<dyn BufRead>,
    gz: bool,
    info: &mut SourceInfo,
    sink: &mut dyn Sink,
    ticker: Option<crate::textcsv::Ticker>,
) -> Result<()> {
    info.format = Some(Format::NsysStatsCsv);
    let mut lines = Lines::new(reader, path, gz).with_ticker(ticker);
    let file_hint = path
        .file_name()
        .and_then(|n| kind_from_text(&n.to_string_lossy()));
    let mut banner_hint: Option<StatsKind> = None;
    let mut section: Option<Section> = None;
    let mut kinds_seen: Vec<&'static str> = Vec::new();
    // rows of a NameSum section whose kind is not yet known are buffered (summaries are small)
    let mut pending: Vec<Vec<String>> = Vec::new();
    let flush = |sec: &Section,
                 pending: &mut Vec<Vec<String>>,
                 hint: Option<StatsKind>,
                 sink: &mut dyn Sink| {
        if pending.is_empty() {
            return;
        }
        let name_i = find(&sec.cols, &["Name"]);
        let kind = hint.unwrap_or_else(|| {
            // API names are cuda*/cu* calls; kernels are anything else
            let api_like = pending.iter().all(|r| {
                name_i
                    .and_then(|i| r.get(i))
                    .map(|n| {
                        let n = n.trim();
                        n.starts_with("cuda")
                            || n.starts_with("cu")
                                && n.chars().nth(2).is_some_and(|c| c.is_ascii_uppercase())
                    })
                    .unwrap_or(false)
            });
            if api_like {
                StatsKind::ApiSum
            } else {
                StatsKind::KernSum
            }
        });
        for r in pending.drain(..) {
            emit_sum(&sec.cols, &r, kind, sink);
        }
    };
    while let Some(line) = lines.next_line()? {
        let t = line.trim();
        if t.is_empty() {
            if let Some(sec) = section.take() {
                flush(&sec, &mut pending, banner_hint.or(file_hint), sink);
            }
            continue;
        }
        if let Some(k) = classify_header_line(t) {
            if let Some(sec) = section.take() {
                flush(&sec, &mut pending, banner_hint.or(file_hint), sink);
            }
            let cols: Vec<Col> = split(t).iter().map(|h| parse_col(h)).collect();
            let k = if matches!(
                k,
                StatsKind::NameSum | StatsKind::NvtxSum | StatsKind::MemSum
            ) && banner_hint.or(file_hint) == Some(StatsKind::Other)
            {
                StatsKind::Other
            } else {
                k
            };
            kinds_seen.push(match k {
                StatsKind::NameSum => "kern/api sum",
                StatsKind::KernSum => "cuda_gpu_kern_sum",
                StatsKind::ApiSum => "cuda_api_sum",
                StatsKind::NvtxSum => "nvtx_sum",
                StatsKind::MemSum => "cuda_gpu_mem_sum",
                StatsKind::GpuTrace => "cuda_gpu_trace",
                StatsKind::ApiTrace => "cuda_api_trace",
                StatsKind::NvtxPushPopTrace => "nvtx_pushpop_trace",
                StatsKind::Other => "unsupported report (skipped)",
            });
            section = Some(Section {
                kind: k,
                cols,
                rows: 0,
            });
            continue;
        }
        let Some(sec) = section.as_mut() else {
            // banner / NOTICE / "Generating SQLite file" lines before a report
            if let Some(k) = kind_from_text(t) {
                banner_hint = Some(k);
            }
            continue;
        };
        let fields = split(t);
        if fields.len() < 2 {
            // a banner inside a multi-report file ends the section
            if let Some(sec) = section.take() {
                flush(&sec, &mut pending, banner_hint.or(file_hint), sink);
            }
            if let Some(k) = kind_from_text(t) {
                banner_hint = Some(k);
            }
            continue;
        }
        sec.rows += 1;
        match sec.kind {
            StatsKind::NameSum => {
                let hint = banner_hint.or(file_hint);
                if hint.is_some() {
                    emit_sum(&sec.cols, &fields, hint.unwrap_or(StatsKind::KernSum), sink);
                } else {
                    pending.push(fields);
                }
            }
            StatsKind::KernSum | StatsKind::ApiSum | StatsKind::NvtxSum | StatsKind::MemSum => {
                emit_sum(&sec.cols, &fields, sec.kind, sink)
            }
            StatsKind::GpuTrace => emit_gpu_trace(&sec.cols, &fields, sink),
            StatsKind::Other => {}
            StatsKind::ApiTrace => emit_api_trace(&sec.cols, &fields, sink),
            StatsKind::NvtxPushPopTrace => emit_pushpop(&sec.cols, &fields, sink),
        }
    }
    if let Some(sec) = section.take() {
        flush(&sec, &mut pending, banner_hint.or(file_hint), sink);
    }
    if kinds_seen.is_empty() {
        return Err(TraceError::UnknownFormat {
            path: path.to_path_buf(),
            hint: "no known `nsys stats` report header found".into(),
        });
    }
    info.detail = format!("nsys stats report(s): {}", kinds_seen.join(", "));
    Ok(())
}

fn get(f: &[String], i: Option<usize>) -> Option<&str> {
    i.and_then(|i| f.get(i)).map(|s| s.as_str())
}

fn num(cols: &[Col], f: &[String], names: &[&str]) -> Option<f64> {
    let i = find(cols, names)?;
    let v = parse_num(f.get(i)?)?;
    if v.is_nan() {
        None
    } else {
        Some(v * cols[i].scale)
    }
}

fn emit_sum(cols: &[Col], f: &[String], kind: StatsKind, sink: &mut dyn Sink) {
    let name_i = find(cols, &["Name", "Range", "Operation"]);
    let Some(name) = get(f, name_i) else { return };
    let instances = num(cols, f, &["Instances", "Num Calls", "Calls", "Count"]).unwrap_or(0.0);
    let agg = AggregateEvent {
        name: name.trim(),
        device: None,
        instances: instances.max(0.0) as u64,
        total_ns: num(cols, f, &["Total Time"]).unwrap_or(0.0),
        median_ns: num(cols, f, &["Med", "Median"]),
        min_ns: num(cols, f, &["Min", "Minimum"]),
        max_ns: num(cols, f, &["Max", "Maximum"]),
    };
    let k = match kind {
        StatsKind::ApiSum => AggregateKind::Api,
        StatsKind::NvtxSum => AggregateKind::Nvtx,
        StatsKind::MemSum => AggregateKind::MemOp,
        _ => AggregateKind::Kernel,
    };
    sink.aggregate(k, &agg);
}

fn emit_gpu_trace(cols: &[Col], f: &[String], sink: &mut dyn Sink) {
    let Some(name) = get(f, find(cols, &["Name"])) else {
        return;
    };
    let start = num(cols, f, &["Start"]).map(|v| v.round() as i64);
    let dur = num(cols, f, &["Duration"]).map(|v| v.round() as i64);
    let device = get(f, find(cols, &["Device"]))
        .and_then(device_of)
        .unwrap_or(0);
    let stream = num(cols, f, &["Strm", "Stream"]).map(|v| v as i64);
    let n = name.trim();
    if n.starts_with("[CUDA mem") || n.starts_with("[CUDA Mem") {
        let canon = canonical_memcpy_name(n);
        sink.memop(&MemOpEvent {
            name: &canon,
            device,
            stream,
            start_ns: start,
            dur_ns: dur.unwrap_or(0),
            bytes: num(cols, f, &["Bytes"]).map(|b| b.round() as u64),
        });
        return;
    }
    let d3 = |a: &str, b: &str, c: &str| -> Option<[u32; 3]> {
        Some([
            num(cols, f, &[a])? as u32,
            num(cols, f, &[b]).unwrap_or(1.0) as u32,
            num(cols, f, &[c]).unwrap_or(1.0) as u32,
        ])
    };
    sink.kernel(&KernelEvent {
        name: n,
        device,
        stream,
        start_ns: start,
        dur_ns: dur,
        grid: d3("GrdX", "GrdY", "GrdZ"),
        block: d3("BlkX", "BlkY", "BlkZ"),
        registers: num(cols, f, &["Reg/Trd"]).map(|v| v as u32),
        static_smem: num(cols, f, &["StcSMem"]).map(|v| v.round() as u64),
        dynamic_smem: num(cols, f, &["DymSMem"]).map(|v| v.round() as u64),
        correlation: num(cols, f, &["CorrId", "CorrID"]).map(|v| v as i64),
        ..Default::default()
    });
}

fn emit_api_trace(cols: &[Col], f: &[String], sink: &mut dyn Sink) {
    let Some(name) = get(f, find(cols, &["Name"])) else {
        return;
    };
    sink.api(&ApiEvent {
        name: name.trim(),
        start_ns: num(cols, f, &["Start"]).unwrap_or(0.0) as i64,
        dur_ns: num(cols, f, &["Duration"]).unwrap_or(0.0) as i64,
        pid: num(cols, f, &["Pid", "PID"]).map(|v| v as i64),
        tid: num(cols, f, &["Tid", "TID"]).map(|v| v as i64),
    });
}

fn emit_pushpop(cols: &[Col], f: &[String], sink: &mut dyn Sink) {
    let Some(name) = get(f, find(cols, &["Name"])) else {
        return;
    };
    let start = num(cols, f, &["Start"]).unwrap_or(0.0) as i64;
    let dur = match num(cols, f, &["Duration"]) {
        Some(d) => d as i64,
        None => num(cols, f, &["End"])
            .map(|e| (e as i64).saturating_sub(start))
            .unwrap_or(0),
    };
    sink.range(&RangeEvent {
        name: name.trim(),
        domain: get(f, find(cols, &["Domain"])).filter(|d| !d.is_empty()),
        kind: RangeKind::PushPop,
        start_ns: start,
        dur_ns: dur,
        pid: num(cols, f, &["PID", "Pid"]).map(|v| v as i64),
        tid: num(cols, f, &["TID", "Tid"]).map(|v| v as i64),
        depth: num(cols, f, &["Lvl", "Level"]).map(|v| v as u32),
        device: None,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn headers_of_all_generations() {
        let new_kern = r#""Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Name""#;
        assert_eq!(classify_header_line(new_kern), Some(StatsKind::NameSum));
        let old_kern = "Time(%),Total Time (ns),Instances,Average,Minimum,Maximum,StdDev,Name";
        assert_eq!(classify_header_line(old_kern), Some(StatsKind::NameSum));
        let old_api = "Time(%),Total Time (ns),Num Calls,Average,Minimum,Maximum,StdDev,Name";
        assert_eq!(classify_header_line(old_api), Some(StatsKind::NameSum));
        let nvtx = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Style,Range";
        assert_eq!(classify_header_line(nvtx), Some(StatsKind::NvtxSum));
        let tr = "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),Bytes (MB),Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name";
        assert_eq!(classify_header_line(tr), Some(StatsKind::GpuTrace));
        let tr_us = "Start (us),Duration (us),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),Bytes (MB),Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name";
        assert_eq!(classify_header_line(tr_us), Some(StatsKind::GpuTrace));
        let pp = "Start (ns),End (ns),Duration (ns),DurChild (ns),DurNonChild (ns),Name,PID,TID,Lvl,NumChild,RangeId,ParentId,RangeStack,NameTree";
        assert_eq!(classify_header_line(pp), Some(StatsKind::NvtxPushPopTrace));
        assert_eq!(
            classify_header_line("NOTICE: Existing SQLite export found: x.sqlite"),
            None
        );
        assert_eq!(parse_col("Start (us)").scale, 1e3);
    }
}
