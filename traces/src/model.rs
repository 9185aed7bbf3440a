//! The one trace model every reader produces, as a stream of events pushed into a [`Sink`].
//!
//! Readers never build a whole trace in memory: they call the sink once per row / event, and
//! the sink (the summary aggregator, the Chrome converter, a test collector) decides what to
//! keep. Borrowed strings live only for the duration of the call.

use serde::Serialize;

/// What kind of file a trace came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    NsysSqlite,
    NsysStatsCsv,
    NcuCsv,
    Kineto,
}

impl Format {
    pub fn label(self) -> &'static str {
        match self {
            Format::NsysSqlite => "nsys SQLite export",
            Format::NsysStatsCsv => "nsys stats CSV",
            Format::NcuCsv => "Nsight Compute CSV",
            Format::Kineto => "PyTorch profiler (Kineto) JSON",
        }
    }
}

/// One GPU kernel execution.
#[derive(Debug, Clone, Default)]
pub struct KernelEvent<'a> {
    /// Best available full name (demangled signature when the tool gives one).
    pub name: &'a str,
    /// Base name as given by the tool (nsys `shortName`), if any.
    pub short_name: Option<&'a str>,
    /// Mangled name, if any.
    pub mangled: Option<&'a str>,
    /// A per-source integer that identifies `name` (e.g. the nsys StringIds id); lets sinks
    /// cache work per distinct name without hashing the string. `None` if not available.
    pub name_key: Option<u64>,
    pub device: i64,
    pub stream: Option<i64>,
    pub start_ns: Option<i64>,
    /// `None` when the tool could not measure it (e.g. an ncu row whose profiling failed).
    pub dur_ns: Option<i64>,
    pub grid: Option<[u32; 3]>,
    pub block: Option<[u32; 3]>,
    pub registers: Option<u32>,
    pub static_smem: Option<u64>,
    pub dynamic_smem: Option<u64>,
    pub correlation: Option<i64>,
    pub pid: Option<i64>,
}

/// Pre-aggregated kernel (or API / range) statistics, from summary reports
/// (`nsys stats cuda_gpu_kern_sum`, `ncu --print-summary per-kernel`).
#[derive(Debug, Clone, Default)]
pub struct AggregateEvent<'a> {
    pub name: &'a str,
    pub device: Option<i64>,
    pub instances: u64,
    pub total_ns: f64,
    pub median_ns: Option<f64>,
    pub min_ns: Option<f64>,
    pub max_ns: Option<f64>,
}

/// Which table an aggregate row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateKind {
    Kernel,
    Api,
    Nvtx,
    MemOp,
}

/// Memory copy or memset on the GPU.
#[derive(Debug, Clone, Default)]
pub struct MemOpEvent<'a> {
    /// Canonical operation name: `Memcpy HtoD`, `Memcpy DtoD`, `Memset`, ...
    pub name: &'a str,
    pub device: i64,
    pub stream: Option<i64>,
    pub start_ns: Option<i64>,
    pub dur_ns: i64,
    pub bytes: Option<u64>,
}

/// Kind of an NVTX / annotation range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RangeKind {
    PushPop,
    StartEnd,
    /// PyTorch `record_function` / user annotations on the CPU timeline.
    Annotation,
    /// Annotations projected onto the GPU timeline (Kineto `gpu_user_annotation`).
    GpuAnnotation,
}

/// An NVTX range (or a profiler annotation).
#[derive(Debug, Clone)]
pub struct RangeEvent<'a> {
    pub name: &'a str,
    pub domain: Option<&'a str>,
    pub kind: RangeKind,
    pub start_ns: i64,
    pub dur_ns: i64,
    pub pid: Option<i64>,
    pub tid: Option<i64>,
    /// Nesting depth (0 = outermost) when known.
    pub depth: Option<u32>,
    /// GPU device for GPU-side annotations.
    pub device: Option<i64>,
}

/// A CUDA runtime / driver API call on the CPU.
#[derive(Debug, Clone)]
pub struct ApiEvent<'a> {
    pub name: &'a str,
    pub start_ns: i64,
    pub dur_ns: i64,
    pub pid: Option<i64>,
    pub tid: Option<i64>,
}

/// One kernel profiled by Nsight Compute, with its metrics normalised to base units
/// (ns, byte, byte/s, hz, %, count).
#[derive(Debug, Clone)]
pub struct NcuKernel {
    pub id: u64,
    pub name: String,
    pub device: i64,
    pub stream: Option<i64>,
    pub grid: Option<[u32; 3]>,
    pub block: Option<[u32; 3]>,
    /// Number of invocations this row stands for (>1 only in `--print-summary` output).
    pub invocations: u64,
    /// NVTX push/pop state at launch, when the report has NVTX columns.
    pub nvtx: Option<String>,
    /// `(metric name, unit after normalisation, value)`; NaN when the cell was `nan` or empty.
    pub metrics: Vec<(String, String, f64)>,
}

/// Facts about the source, gathered while reading.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceInfo {
    pub path: String,
    pub format: Option<Format>,
    /// e.g. nsys export schema `3.25.0`, ncu page kind, Kineto schemaVersion.
    pub detail: String,
    pub tool_version: Option<String>,
    /// GPU id -> name, when the trace lists devices.
    pub devices: Vec<(i64, String)>,
    /// Non-fatal oddities noticed while reading.
    pub warnings: Vec<String>,
}

/// Receiver of the event stream.
pub trait Sink {
    fn kernel(&mut self, _k: &KernelEvent<'_>) {}
    fn aggregate(&mut self, _kind: AggregateKind, _a: &AggregateEvent<'_>) {}
    fn memop(&mut self, _m: &MemOpEvent<'_>) {}
    fn range(&mut self, _r: &RangeEvent<'_>) {}
    fn api(&mut self, _a: &ApiEvent<'_>) {}
    fn ncu_kernel(&mut self, _k: &NcuKernel) {}
}

/// Normalise the many spellings of a memcpy kind to `Memcpy HtoD` style.
pub fn canonical_memcpy_name(raw: &str) -> String {
    let s = raw
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim();
    let lower = s.to_ascii_lowercase();
    if lower.contains("memset") {
        return "Memset".to_string();
    }
    let pairs: [(&str, &str); 13] = [
        ("unified host-to-device", "UVM HtoD"),
        ("unified device-to-host", "UVM DtoH"),
        ("unified device-to-device", "UVM DtoD"),
        ("host-to-device", "HtoD"),
        ("device-to-host", "DtoH"),
        ("device-to-device", "DtoD"),
        ("host-to-host", "HtoH"),
        ("peer-to-peer", "PtoP"),
        ("host-to-array", "HtoA"),
        ("array-to-host", "AtoH"),
        ("array-to-array", "AtoA"),
        ("array-to-device", "AtoD"),
        ("device-to-array", "DtoA"),
    ];
    for (long, short) in pairs {
        if lower.contains(long) {
            return format!("Memcpy {short}");
        }
    }
    for short in [
        "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA",
    ] {
        if s.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w.eq_ignore_ascii_case(short))
        {
            return format!("Memcpy {short}");
        }
    }
    if lower.contains("memcpy") {
        return "Memcpy".to_string();
    }
    s.to_string()
}

/// Memcpy kind names of the `CUDA_MEMCPY_KIND` enum (`copyKind` column), old nsys style.
pub fn memcpy_kind_name(kind: i64) -> &'static str {
    match kind {
        1 => "Memcpy HtoD",
        2 => "Memcpy DtoH",
        3 => "Memcpy HtoA",
        4 => "Memcpy AtoH",
        5 => "Memcpy AtoA",
        6 => "Memcpy AtoD",
        7 => "Memcpy DtoA",
        8 => "Memcpy DtoD",
        9 => "Memcpy HtoH",
        10 => "Memcpy PtoP",
        11 => "Memcpy UVM HtoD",
        12 => "Memcpy UVM DtoH",
        13 => "Memcpy UVM DtoD",
        _ => "Memcpy",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn memcpy_names_join_across_versions() {
        assert_eq!(canonical_memcpy_name("[CUDA memcpy HtoD]"), "Memcpy HtoD");
        assert_eq!(
            canonical_memcpy_name("[CUDA memcpy Host-to-Device]"),
            "Memcpy HtoD"
        );
        assert_eq!(
            canonical_memcpy_name("Memcpy DtoD (Device -> Device)"),
            "Memcpy DtoD"
        );
        assert_eq!(canonical_memcpy_name("Memset (Device)"), "Memset");
        assert_eq!(canonical_memcpy_name("[CUDA memset]"), "Memset");
        assert_eq!(memcpy_kind_name(1), canonical_memcpy_name("Host-to-Device"));
    }
}
