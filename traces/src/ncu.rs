//! Nsight Compute CSV: `--page details` (long; metric rows are ragged), `--page raw` (wide; a
//! units row may follow the header), `--print-summary per-kernel`, and profile-mode output
//! mixed with `==PROF==` lines and the program's own stdout. Columns are mapped by header name
//! (NVTX columns may or may not be present); values are normalised to base units.

use crate::error::{Result, TraceError};
use crate::model::*;
use crate::textcsv::{parse_dim3, parse_num, split, Lines};
use std::io::BufRead;
use std::path::Path;

/// Is this line an ncu CSV header?
pub fn is_ncu_header(line: &str) -> bool {
    let l = line.trim_start();
    if l.starts_with("ID,") && l.contains(",Kernel Name,") {
        return true;
    }
    l.starts_with('"')
        && l.contains("\"Kernel Name\"")
        && [
            "\"ID\"",
            "\"Process ID\"",
            "\"Metric Name\"",
            "\"Invocations\"",
            "\"Context\"",
        ]
        .iter()
        .any(|k| l.contains(k))
}

/// Normalise a value with an ncu unit to base units: ns, byte, byte/s, hz, cycle, ...
pub fn normalize_unit(value: f64, unit: &str) -> (f64, String) {
    let u = unit.trim();
    match u {
        "" => return (value, String::new()),
        "%" => return (value, "%".into()),
        "ns" | "nsecond" => return (value, "ns".into()),
        "us" | "usecond" | "µs" => return (value * 1e3, "ns".into()),
        "ms" | "msecond" => return (value * 1e6, "ns".into()),
        "s" | "second" => return (value * 1e9, "ns".into()),
        _ => {}
    }
    // split "Tbyte/s" into numerator and denominator
    let (num, den) = match u.find('/') {
        Some(p) => (&u[..p], Some(&u[p + 1..])),
        None => (u, None),
    };
    let bases = [
        "byte",
        "hz",
        "cycle",
        "inst",
        "sector",
        "request",
        "wavefront",
        "warp",
        "thread",
        "block",
        "register",
        "cluster",
        "SM",
    ];
    let mut scale = 1.0;
    let mut base = num.to_string();
    for b in bases {
        if num.eq_ignore_ascii_case(b) {
            base = b.to_string();
            break;
        }
        if num.len() == b.len() + 1 && num.get(1..).is_some_and(|r| r.eq_ignore_ascii_case(b)) {
            let p = num.as_bytes()[0].to_ascii_uppercase();
            let s = match p {
                b'K' => Some(1e3),
                b'M' => Some(1e6),
                b'G' => Some(1e9),
                b'T' => Some(1e12),
                b'P' => Some(1e15),
                _ => None,
            };
            if let Some(s) = s {
                scale = s;
                base = b.to_string();
                break;
            }
        }
    }
    let den = den.map(|d| match d {
        "s" | "second" => ("s".to_string(), 1.0),
        "ms" | "msecond" => ("s".to_string(), 1e3),
        "us" | "usecond" => ("s".to_string(), 1e6),
        "ns" | "nsecond" => ("s".to_string(), 1e9),
        other => (other.to_string(), 1.0),
    });
    match den {
        Some((d, dscale)) => (value * scale * dscale, format!("{base}/{d}")),
        None => (value * scale, base),
    }
}

/// Columns that describe the launch rather than being metrics.
const IDENTITY: &[&str] = &[
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Kernel Time",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
    "Section Name",
    "Metric Name",
    "Metric Unit",
    "Metric Value",
    "Rule Name",
    "Rule Type",
    "Rule Description",
    "Estimated Speedup Type",
    "Estimated Speedup",
    "Invocations",
    "Minimum",
    "Maximum",
    "Average",
];

fn is_nvtx_col(h: &str) -> bool {
    h.contains("Domain:Push/Pop_Range")
        || h.contains("Domain:Start/Stop_Range")
        || h.starts_with("NVTX")
        || h.starts_with("nvtx")
}

enum Layout {
    /// one metric per row (details page, profile-mode `--metrics`)
    Long,
    /// one metric per row with Minimum/Maximum/Average over invocations
    Summary,
    /// one kernel per row, one metric per column
    Wide,
}

struct Hdr {
    names: Vec<String>,
}

impl Hdr {
    fn idx(&self, n: &str) -> Option<usize> {
        self.names.iter().position(|h| h == n)
    }
}

fn cell(f: &[String], i: Option<usize>) -> &str {
    i.and_then(|i| f.get(i)).map(|s| s.as_str()).unwrap_or("")
}

/// Duration metric names, in order of preference.
const DURATION: &[&str] = &[
    "gpu__time_duration.sum",
    "Duration",
    "gpu__time_duration.avg",
];

fn duration_of(k: &NcuKernel) -> Option<f64> {
    for d in DURATION {
        if let Some((_, u, v)) = k.metrics.iter().find(|(n, _, _)| n == d) {
            if u == "ns" && v.is_finite() {
                return Some(*v);
            }
            if u == "ns" {
                return None;
            }
        }
    }
    None
}

fn emit(k: &NcuKernel, sink: &mut dyn Sink) {
    sink.ncu_kernel(k);
    let dur = duration_of(k);
    if k.invocations > 1 {
        sink.aggregate(
            AggregateKind::Kernel,
            &AggregateEvent {
                name: &k.name,
                device: Some(k.device),
                instances: k.invocations,
                total_ns: dur.unwrap_or(0.0) * k.invocations as f64,
                median_ns: None,
                min_ns: None,
                max_ns: None,
            },
        );
        return;
    }
    sink.kernel(&KernelEvent {
        name: &k.name,
        device: k.device,
        stream: k.stream,
        dur_ns: dur.map(|d| d.round() as i64),
        grid: k.grid,
        block: k.block,
        registers: k
            .metrics
            .iter()
            .find(|m| m.0 == "launch__registers_per_thread" || m.0 == "Registers Per Thread")
            .and_then(|m| {
                if m.2.is_finite() {
                    Some(m.2 as u32)
                } else {
                    None
                }
            }),
        ..Default::default()
    });
}

/// Read an ncu CSV export.
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
    info.format = Some(Format::NcuCsv);
    let mut lines = Lines::new(reader, path, gz).with_ticker(ticker);
    let mut prof_lines = 0u64;
    let mut other_lines = 0u64;
    // find the header
    let hdr = loop {
        let Some(line) = lines.next_line()? else {
            return Err(TraceError::UnknownFormat {
                path: path.to_path_buf(),
                hint: format!(
                    "Nsight Compute output without a CSV header (saw {prof_lines} ==PROF== lines); was it run with --csv, and did any kernel get profiled?"
                ),
            });
        };
        let t = line.trim();
        if t.starts_with("==") {
            prof_lines += 1;
            continue;
        }
        if is_ncu_header(t) {
            break Hdr { names: split(t) };
        }
        other_lines += 1;
    };
    let layout = if hdr.idx("Metric Name").is_some() && hdr.idx("Invocations").is_some() {
        Layout::Summary
    } else if hdr.idx("Metric Name").is_some() {
        Layout::Long
    } else {
        Layout::Wide
    };
    let i_id = hdr.idx("ID");
    let i_name = hdr.idx("Kernel Name");
    let i_dev = hdr.idx("Device");
    let i_stream = hdr.idx("Stream");
    let i_block = hdr.idx("Block Size");
    let i_grid = hdr.idx("Grid Size");
    let i_mname = hdr.idx("Metric Name");
    let i_munit = hdr.idx("Metric Unit");
    let i_mval = hdr.idx("Metric Value");
    let i_avg = hdr.idx("Average");
    let i_inv = hdr.idx("Invocations");
    let nvtx_cols: Vec<usize> = (0..hdr.names.len())
        .filter(|&i| is_nvtx_col(&hdr.names[i]))
        .collect();
    let metric_cols: Vec<usize> = (0..hdr.names.len())
        .filter(|&i| !IDENTITY.contains(&hdr.names[i].as_str()) && !nvtx_cols.contains(&i))
        .collect();
    let mut units: Vec<String> = vec![String::new(); hdr.names.len()];
    let mut current: Option<(String, NcuKernel)> = None;
    let mut n_kernels = 0u64;
    let mut seq = 0u64;
    let mut first_data = true;
    while let Some(line) = lines.next_line()? {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if t.starts_with("==") {
            prof_lines += 1;
            continue;
        }
        if !t.starts_with('"') {
            // the profiled program's own stdout
            other_lines += 1;
            continue;
        }
        let f = split(t);
        if first_data {
            first_data = false;
            if matches!(layout, Layout::Wide)
                && cell(&f, i_id).is_empty()
                && cell(&f, i_name).is_empty()
            {
                // units row
                for (i, u) in f.iter().enumerate() {
                    if i < units.len() {
                        units[i] = u.clone();
                    }
                }
                continue;
            }
        }
        let nvtx = nvtx_cols
            .iter()
            .map(|&i| cell(&f, Some(i)).trim())
            .find(|s| !s.is_empty())
            .map(str::to_string);
        let base = |id: u64| NcuKernel {
            id,
            name: cell(&f, i_name).to_string(),
            device: cell(&f, i_dev).trim().parse().unwrap_or(0),
            stream: cell(&f, i_stream).trim().parse().ok(),
            grid: parse_dim3(cell(&f, i_grid)),
            block: parse_dim3(cell(&f, i_block)),
            invocations: 1,
            nvtx: nvtx.clone(),
            metrics: Vec::new(),
        };
        match layout {
            Layout::Wide => {
                let id = cell(&f, i_id).trim().parse().unwrap_or(seq);
                seq += 1;
                let mut k = base(id);
                for &i in &metric_cols {
                    let raw = cell(&f, Some(i));
                    if let Some(v) = parse_num(raw) {
                        let (v, u) = normalize_unit(v, &units[i]);
                        k.metrics.push((hdr.names[i].clone(), u, v));
                    }
                }
                n_kernels += 1;
                emit(&k, sink);
            }
            Layout::Long | Layout::Summary => {
                let key = if matches!(layout, Layout::Summary) {
                    format!(
                        "{}\u{1}{}\u{1}{}\u{1}{}",
                        cell(&f, i_name),
                        cell(&f, i_block),
                        cell(&f, i_grid),
                        cell(&f, i_dev)
                    )
                } else {
                    cell(&f, i_id).to_string()
                };
                if current.as_ref().is_some_and(|(k, _)| *k != key) {
                    if let Some((_, k)) = current.take() {
                        n_kernels += 1;
                        emit(&k, sink);
                    }
                }
                if current.is_none() {
                    let id = cell(&f, i_id).trim().parse().unwrap_or(seq);
                    seq += 1;
                    let mut k = base(id);
                    if matches!(layout, Layout::Summary) {
                        k.invocations = parse_num(cell(&f, i_inv))
                            .filter(|v| v.is_finite())
                            .map(|v| v as u64)
                            .unwrap_or(1)
                            .max(1);
                    }
                    current = Some((key, k));
                }
                let mname = cell(&f, i_mname);
                if mname.is_empty() {
                    continue; // rule rows and ragged rows without a metric
                }
                let vcol = if matches!(layout, Layout::Summary) {
                    i_avg
                } else {
                    i_mval
                };
                if let Some(v) = parse_num(cell(&f, vcol)) {
                    let (v, u) = normalize_unit(v, cell(&f, i_munit));
                    if let Some((_, k)) = current.as_mut() {
                        k.metrics.push((mname.to_string(), u, v));
                    }
                }
            }
        }
    }
    if let Some((_, k)) = current.take() {
        n_kernels += 1;
        emit(&k, sink);
    }
    let page = match layout {
        Layout::Long => "details / metrics (one metric per row)",
        Layout::Summary => "per-kernel summary",
        Layout::Wide => "raw (one kernel per row)",
    };
    info.detail = format!("ncu CSV, {page}, {n_kernels} kernel rows");
    if other_lines > 0 || prof_lines > 0 {
        info.warnings.push(format!(
            "skipped {prof_lines} ==PROF==/==WARNING== lines and {other_lines} lines of program output"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn units() {
        assert_eq!(normalize_unit(182.592, "us"), (182592.0, "ns".into()));
        let (v, u) = normalize_unit(536.89088, "Mbyte");
        assert!((v - 536_890_880.0).abs() < 1e-3);
        assert_eq!(u, "byte");
        let (v, u) = normalize_unit(4.2, "Tbyte/s");
        assert!((v - 4.2e12).abs() < 1.0);
        assert_eq!(u, "byte/s");
        assert_eq!(normalize_unit(3.2, "Ghz").1, "hz");
        assert_eq!(
            normalize_unit(4.096, "Kbyte/block"),
            (4096.0, "byte/block".into())
        );
        assert_eq!(normalize_unit(22.0, "register/thread").1, "register/thread");
        assert_eq!(normalize_unit(1.0, "msecond"), (1e6, "ns".into()));
    }
}
