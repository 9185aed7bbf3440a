//! Streaming aggregation into per-kernel / per-range statistics. Memory is bounded by the
//! number of distinct (name, device) pairs: per pair a fixed-size reservoir of instance
//! durations is kept for medians and the diff's rank test (exact up to `RESERVOIR` instances).

use crate::model::*;
use crate::names::{canonical_range_name, CanonicalName, NameLevel};
use serde::Serialize;
use std::collections::HashMap as StdHashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A small multiplicative hasher (FxHash style) for the per-event name lookups: names are
/// hashed once per event, so SipHash's cost shows on multi-million-event traces.
#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.hash = (self.hash.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut v = [0u8; 8];
            v.copy_from_slice(c);
            self.add(u64::from_le_bytes(v));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut v = [0u8; 8];
            v[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(v) ^ ((rest.len() as u64) << 56));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_i64(&mut self, i: i64) {
        self.add(i as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

type HashMap<K, V> = StdHashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Instance durations kept per (kernel, device): exact statistics up to this many instances,
/// a uniform random sample beyond.
pub const RESERVOIR: usize = 2048;

/// Streaming statistics of one group of intervals.
#[derive(Debug, Clone, Default)]
pub struct Acc {
    pub instances: u64,
    /// Instances without a measured duration (e.g. ncu rows whose profiling failed).
    pub failed: u64,
    pub total_ns: f64,
    pub sum_sq: f64,
    pub min_ns: f64,
    pub max_ns: f64,
    pub bytes: u64,
    /// Median given directly by a pre-aggregated source.
    pub median_hint: Option<f64>,
    samples: Vec<f64>,
    seen: u64,
    rng: u64,
}

impl Acc {
    pub fn push(&mut self, dur_ns: Option<f64>) {
        self.instances = self.instances.saturating_add(1);
        let Some(d) = dur_ns else {
            self.failed = self.failed.saturating_add(1);
            return;
        };
        let measured = self.instances.saturating_sub(self.failed);
        if measured == 1 {
            self.min_ns = d;
            self.max_ns = d;
        } else {
            self.min_ns = self.min_ns.min(d);
            self.max_ns = self.max_ns.max(d);
        }
        self.total_ns += d;
        self.sum_sq += d * d;
        // reservoir sampling (algorithm R) with a deterministic xorshift generator
        self.seen += 1;
        if self.samples.len() < RESERVOIR {
            self.samples.push(d);
        } else {
            if self.rng == 0 {
                self.rng = 0x9E37_79B9_7F4A_7C15;
            }
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let j = self.rng % self.seen;
            if (j as usize) < RESERVOIR {
                self.samples[j as usize] = d;
            }
        }
    }

    pub fn push_aggregate(&mut self, a: &AggregateEvent<'_>) {
        let was_empty = self.instances == self.failed;
        self.instances = self.instances.saturating_add(a.instances);
        self.total_ns += a.total_ns;
        if let Some(m) = a.min_ns {
            self.min_ns = if was_empty { m } else { self.min_ns.min(m) };
        }
        if let Some(m) = a.max_ns {
            self.max_ns = if was_empty { m } else { self.max_ns.max(m) };
        }
        self.median_hint = a.median_ns;
        if a.instances > 0 {
            let mean = a.total_ns / a.instances as f64;
            self.sum_sq += mean * mean * a.instances as f64;
        }
    }

    pub fn merge(&mut self, o: &Acc) {
        let was_empty = self.instances == self.failed;
        let o_empty = o.instances == o.failed;
        self.instances = self.instances.saturating_add(o.instances);
        self.failed = self.failed.saturating_add(o.failed);
        self.total_ns += o.total_ns;
        self.sum_sq += o.sum_sq;
        self.bytes = self.bytes.saturating_add(o.bytes);
        if !o_empty {
            if was_empty {
                self.min_ns = o.min_ns;
                self.max_ns = o.max_ns;
            } else {
                self.min_ns = self.min_ns.min(o.min_ns);
                self.max_ns = self.max_ns.max(o.max_ns);
            }
        }
        if self.median_hint.is_none() || o.median_hint.is_some() && was_empty {
            self.median_hint = o.median_hint;
        }
        self.samples.extend_from_slice(&o.samples);
        self.seen = self.seen.saturating_add(o.seen);
    }

    pub fn samples(&self) -> &[f64] {
        &self.samples
    }

    pub fn stats(&self, grand_total: f64) -> Stats {
        let measured = self.instances.saturating_sub(self.failed);
        let mean = if measured > 0 {
            self.total_ns / measured as f64
        } else {
            0.0
        };
        let var = if measured > 1 {
            ((self.sum_sq - self.total_ns * mean) / (measured as f64 - 1.0)).max(0.0)
        } else {
            0.0
        };
        let median = if !self.samples.is_empty() {
            median(&self.samples)
        } else {
            self.median_hint.unwrap_or(mean)
        };
        Stats {
            instances: self.instances,
            failed: self.failed,
            total_ns: self.total_ns,
            mean_ns: mean,
            median_ns: median,
            min_ns: if measured > 0 { self.min_ns } else { 0.0 },
            max_ns: if measured > 0 { self.max_ns } else { 0.0 },
            stddev_ns: var.sqrt(),
            share: if grand_total > 0.0 {
                self.total_ns / grand_total
            } else {
                0.0
            },
            bytes: self.bytes,
            samples: self.samples.clone(),
            exact_samples: self.seen as usize == self.samples.len(),
        }
    }
}

pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Statistics of one row (kernel group, range, memop, API).
#[derive(Debug, Clone, Serialize, Default)]
pub struct Stats {
    pub instances: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub failed: u64,
    pub total_ns: f64,
    pub mean_ns: f64,
    pub median_ns: f64,
    pub min_ns: f64,
    pub max_ns: f64,
    pub stddev_ns: f64,
    /// Fraction of all kernel (or range / API) time in this row.
    pub share: f64,
    #[serde(skip_serializing_if = "is_zero")]
    pub bytes: u64,
    /// Per-instance durations (all, or a uniform sample when there are more than RESERVOIR).
    #[serde(skip)]
    pub samples: Vec<f64>,
    #[serde(skip)]
    pub exact_samples: bool,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// How kernels are grouped into rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// Full canonical signature.
    #[default]
    Kernel,
    /// Template arguments folded.
    Template,
    /// Base function name.
    Base,
    /// NVTX / annotation ranges by name (the ranges' own durations).
    Nvtx,
    /// Kernel time attributed to the innermost NVTX range open at launch (nsys SQLite).
    NvtxKernels,
}

impl GroupBy {
    pub fn level(self) -> NameLevel {
        match self {
            GroupBy::Kernel | GroupBy::Nvtx | GroupBy::NvtxKernels => NameLevel::Full,
            GroupBy::Template => NameLevel::Template,
            GroupBy::Base => NameLevel::Base,
        }
    }
    pub fn parse(s: &str) -> Option<GroupBy> {
        match s {
            "kernel" | "full" | "name" => Some(GroupBy::Kernel),
            "template" | "templates" => Some(GroupBy::Template),
            "base" | "short" => Some(GroupBy::Base),
            "nvtx" | "range" | "ranges" => Some(GroupBy::Nvtx),
            "nvtx-kernels" | "nvtx-kernel" | "kernels-by-nvtx" => Some(GroupBy::NvtxKernels),
            _ => None,
        }
    }
}

struct NameInfo {
    raw: String,
    short: Option<String>,
}

/// The streaming aggregator (a [`Sink`]).
#[derive(Default)]
pub struct Aggregator {
    names: Vec<NameInfo>,
    name_by_key: HashMap<u64, u32>,
    name_by_str: HashMap<String, u32>,
    slots: HashMap<(u32, i64), usize>,
    slot_keys: Vec<(u32, i64)>,
    kernels: Vec<Acc>,
    launch: Vec<Option<LaunchInfo>>,
    /// domain -> range name -> stats
    ranges: HashMap<String, HashMap<String, Acc>>,
    memops: HashMap<(String, i64), Acc>,
    api: HashMap<String, Acc>,
    ncu: Vec<NcuKernel>,
    span: HashMap<i64, (i64, i64)>,
    last: Option<(u64, i64, usize)>,
    /// Aggregate-only sources (no instance durations).
    pub aggregated_only: bool,
}

/// Launch configuration of the first instance seen.
#[derive(Debug, Clone, Serialize, Default)]
pub struct LaunchInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid: Option<[u32; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<[u32; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registers: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_mem: Option<u64>,
}

impl Aggregator {
    pub fn new() -> Self {
        Self::default()
    }

    fn name_index(&mut self, name: &str, short: Option<&str>, key: Option<u64>) -> u32 {
        if let Some(k) = key {
            if let Some(&i) = self.name_by_key.get(&k) {
                return i;
            }
        }
        let idx = match self.name_by_str.get(name) {
            Some(&i) => i,
            None => {
                let i = self.names.len() as u32;
                self.names.push(NameInfo {
                    raw: name.to_string(),
                    short: short.map(str::to_string),
                });
                self.name_by_str.insert(name.to_string(), i);
                i
            }
        };
        if let Some(k) = key {
            self.name_by_key.insert(k, idx);
        }
        idx
    }

    fn slot(&mut self, name: &str, short: Option<&str>, key: Option<u64>, device: i64) -> usize {
        if let (Some(k), Some((lk, ld, ls))) = (key, self.last) {
            if lk == k && ld == device {
                return ls;
            }
        }
        let ni = self.name_index(name, short, key);
        let s = match self.slots.get(&(ni, device)) {
            Some(&s) => s,
            None => {
                let s = self.kernels.len();
                self.kernels.push(Acc::default());
                self.launch.push(None);
                self.slots.insert((ni, device), s);
                self.slot_keys.push((ni, device));
                s
            }
        };
        if let Some(k) = key {
            self.last = Some((k, device, s));
        }
        s
    }

    /// Number of distinct (kernel name, device) pairs seen.
    pub fn distinct_kernels(&self) -> usize {
        self.kernels.len()
    }
}

impl Sink for Aggregator {
    fn kernel(&mut self, k: &KernelEvent<'_>) {
        let s = self.slot(k.name, k.short_name, k.name_key, k.device);
        self.kernels[s].push(k.dur_ns.map(|d| d as f64));
        if self.launch[s].is_none() {
            self.launch[s] = Some(LaunchInfo {
                grid: k.grid,
                block: k.block,
                registers: k.registers,
                shared_mem: match (k.static_smem, k.dynamic_smem) {
                    (None, None) => None,
                    // Saturating: a trace may claim absurd sizes (fuzzed "DymSMem (MB)" =
                    // 6.7e48 saturated to u64::MAX overflowed the plain sum).
                    (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
                },
            });
        }
        if let (Some(st), Some(d)) = (k.start_ns, k.dur_ns) {
            let e = self
                .span
                .entry(k.device)
                .or_insert((st, st.saturating_add(d)));
            e.0 = e.0.min(st);
            e.1 = e.1.max(st.saturating_add(d));
        }
    }

    fn aggregate(&mut self, kind: AggregateKind, a: &AggregateEvent<'_>) {
        self.aggregated_only = true;
        match kind {
            AggregateKind::Kernel => {
                let s = self.slot(a.name, None, None, a.device.unwrap_or(0));
                self.kernels[s].push_aggregate(a);
            }
            AggregateKind::Api => self
                .api
                .entry(strip_api_version(a.name).to_string())
                .or_default()
                .push_aggregate(a),
            AggregateKind::Nvtx => self
                .ranges
                .entry(String::new())
                .or_default()
                .entry(canonical_range_name(a.name).to_string())
                .or_default()
                .push_aggregate(a),
            AggregateKind::MemOp => self
                .memops
                .entry((canonical_memcpy_name(a.name), a.device.unwrap_or(0)))
                .or_default()
                .push_aggregate(a),
        }
    }

    fn memop(&mut self, m: &MemOpEvent<'_>) {
        let acc = match self.memops.get_mut(&(m.name.to_string(), m.device)) {
            Some(a) => a,
            None => self
                .memops
                .entry((m.name.to_string(), m.device))
                .or_default(),
        };
        acc.push(Some(m.dur_ns as f64));
        acc.bytes = acc.bytes.saturating_add(m.bytes.unwrap_or(0));
    }

    fn range(&mut self, r: &RangeEvent<'_>) {
        let name = canonical_range_name(r.name);
        let dom = r.domain.unwrap_or("");
        // no allocation on the hot path when the key exists
        let by_name = match self.ranges.get_mut(dom) {
            Some(m) => m,
            None => self.ranges.entry(dom.to_string()).or_default(),
        };
        match by_name.get_mut(name) {
            Some(acc) => acc.push(Some(r.dur_ns as f64)),
            None => by_name
                .entry(name.to_string())
                .or_default()
                .push(Some(r.dur_ns as f64)),
        }
    }

    fn api(&mut self, a: &ApiEvent<'_>) {
        let name = strip_api_version(a.name);
        match self.api.get_mut(name) {
            Some(acc) => acc.push(Some(a.dur_ns as f64)),
            None => self
                .api
                .entry(name.to_string())
                .or_default()
                .push(Some(a.dur_ns as f64)),
        }
    }

    fn ncu_kernel(&mut self, k: &NcuKernel) {
        self.ncu.push(k.clone());
    }
}

/// `cudaLaunchKernel_v7000` -> `cudaLaunchKernel` (nsys appends the API version).
pub fn strip_api_version(name: &str) -> &str {
    if let Some(p) = name.rfind("_v") {
        let tail = &name[p + 2..];
        if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) {
            return &name[..p];
        }
    }
    name
}

/// One kernel row of a summary.
#[derive(Debug, Clone, Serialize)]
pub struct KernelRow {
    /// Canonical name at the grouping level.
    pub name: String,
    pub device: i64,
    #[serde(flatten)]
    pub stats: Stats,
    pub base_name: String,
    /// Raw names (as the tool printed them) folded into this row; at most 8 listed.
    pub raw_names: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch: Option<LaunchInfo>,
}

/// A named row (range, memop, API).
#[derive(Debug, Clone, Serialize)]
pub struct NamedRow {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<i64>,
    #[serde(flatten)]
    pub stats: Stats,
}

/// Summary of one trace.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub source: SourceInfo,
    pub group_by: GroupBy,
    pub merged_devices: bool,
    pub devices: Vec<i64>,
    pub total_kernel_ns: f64,
    pub kernel_instances: u64,
    /// Per device: first kernel start to last kernel end (ns), when timestamps exist.
    pub kernel_span_ns: Vec<(i64, i64)>,
    pub kernels: Vec<KernelRow>,
    pub nvtx: Vec<NamedRow>,
    pub memops: Vec<NamedRow>,
    pub api: Vec<NamedRow>,
    pub ncu: Vec<NcuRow>,
    /// True when the source only had pre-aggregated numbers (no per-instance durations).
    pub aggregated_only: bool,
}

/// An ncu-profiled kernel with its normalised metrics.
#[derive(Debug, Clone, Serialize)]
pub struct NcuRow {
    pub id: u64,
    pub name: String,
    pub device: i64,
    pub invocations: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvtx: Option<String>,
    /// Key metrics by canonical key (duration_ns, dram_bytes, ...), NaN dropped.
    pub key_metrics: Vec<(String, f64)>,
    /// True when every metric is NaN/empty (the profiler failed on this kernel).
    pub failed: bool,
    #[serde(skip)]
    pub metrics: Vec<(String, String, f64)>,
}

/// Options for building a summary.
#[derive(Debug, Clone, Copy, Default)]
pub struct SummaryOptions {
    pub group_by: GroupBy,
    /// Fold all devices into one row per kernel (device reported as -1).
    pub merge_devices: bool,
}

impl Aggregator {
    pub fn finish(self, source: SourceInfo, opts: SummaryOptions) -> Summary {
        let level = opts.group_by.level();
        // canonicalise each distinct raw name once
        let canon: Vec<CanonicalName> = self
            .names
            .iter()
            .map(|n| CanonicalName::new(&n.raw))
            .collect();
        // (name, device) -> (totals, raw names, display name, launch of the first instance)
        type Group = (Acc, Vec<String>, String, Option<LaunchInfo>);
        let mut groups: HashMap<(String, i64), Group> = HashMap::default();
        let mut order: Vec<(String, i64)> = Vec::new();
        let mut devices: Vec<i64> = Vec::new();
        for (s, &(ni, dev)) in self.slot_keys.iter().enumerate() {
            let c = &canon[ni as usize];
            let key_name = match (&self.names[ni as usize].short, level) {
                // the tool's own short name is the most reliable base name
                (Some(short), crate::names::NameLevel::Base) if !short.is_empty() => short.clone(),
                _ => c.at(level).to_string(),
            };
            if !devices.contains(&dev) {
                devices.push(dev);
            }
            let d = if opts.merge_devices { -1 } else { dev };
            let key = (key_name, d);
            let entry = groups.entry(key.clone()).or_insert_with(|| {
                order.push(key.clone());
                (
                    Acc::default(),
                    Vec::new(),
                    c.base.clone(),
                    self.launch[s].clone(),
                )
            });
            entry.0.merge(&self.kernels[s]);
            let raw = &self.names[ni as usize].raw;
            if entry.1.len() < 8 && !entry.1.contains(raw) {
                entry.1.push(raw.clone());
            }
        }
        devices.sort();
        let total: f64 = groups.values().map(|g| g.0.total_ns).sum();
        let instances: u64 = groups
            .values()
            .fold(0u64, |a, g| a.saturating_add(g.0.instances));
        let mut kernels: Vec<KernelRow> = order
            .into_iter()
            .filter_map(|k| {
                let (acc, raws, base, launch) = groups.remove(&k)?;
                Some(KernelRow {
                    name: k.0,
                    device: k.1,
                    stats: acc.stats(total),
                    base_name: base,
                    raw_names: raws,
                    launch,
                })
            })
            .collect();
        kernels.sort_by(|a, b| {
            b.stats
                .total_ns
                .total_cmp(&a.stats.total_ns)
                .then_with(|| a.name.cmp(&b.name))
                .then(a.device.cmp(&b.device))
        });
        let named = |m: Vec<(String, Option<String>, Option<i64>, Acc)>| -> Vec<NamedRow> {
            let t: f64 = m.iter().map(|x| x.3.total_ns).sum();
            let mut rows: Vec<NamedRow> = m
                .into_iter()
                .map(|(name, domain, device, acc)| NamedRow {
                    name,
                    domain,
                    device,
                    stats: acc.stats(t),
                })
                .collect();
            rows.sort_by(|a, b| {
                b.stats
                    .total_ns
                    .total_cmp(&a.stats.total_ns)
                    .then_with(|| a.name.cmp(&b.name))
            });
            rows
        };
        let nvtx = named(
            self.ranges
                .into_iter()
                .flat_map(|(d, m)| {
                    m.into_iter().map(move |(n, a)| {
                        (
                            n,
                            if d.is_empty() { None } else { Some(d.clone()) },
                            None,
                            a,
                        )
                    })
                })
                .collect(),
        );
        let mut memop_map: HashMap<(String, i64), Acc> = HashMap::default();
        for ((n, d), a) in self.memops {
            let d = if opts.merge_devices { -1 } else { d };
            memop_map.entry((n, d)).or_default().merge(&a);
        }
        let memops = named(
            memop_map
                .into_iter()
                .map(|((n, d), a)| (n, None, Some(d), a))
                .collect(),
        );
        let api = named(
            self.api
                .into_iter()
                .map(|(n, a)| (n, None, None, a))
                .collect(),
        );
        let ncu = self.ncu.iter().map(ncu_row).collect();
        let mut span: Vec<(i64, i64)> = self
            .span
            .iter()
            .map(|(d, (s, e))| (*d, e.saturating_sub(*s)))
            .collect();
        span.sort();
        Summary {
            source,
            group_by: opts.group_by,
            merged_devices: opts.merge_devices,
            devices,
            total_kernel_ns: total,
            kernel_instances: instances,
            kernel_span_ns: span,
            kernels,
            nvtx,
            memops,
            api,
            ncu,
            aggregated_only: self.aggregated_only,
        }
    }
}

/// Canonical keys for the ncu metrics that matter in a diff, with the raw metric names
/// (`--page raw`) and the human names (`--page details`) they come from.
pub const NCU_KEY_METRICS: &[(&str, &[&str])] = &[
    ("duration_ns", &["gpu__time_duration.sum", "Duration"]),
    (
        "dram_bytes",
        &["dram__bytes.sum", "dram__bytes_read.sum+dram__bytes_write.sum"],
    ),
    ("dram_bytes_read", &["dram__bytes_read.sum"]),
    ("dram_bytes_write", &["dram__bytes_write.sum"]),
    (
        "dram_throughput_pct",
        &[
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
            "DRAM Throughput",
        ],
    ),
    (
        "memory_throughput_pct",
        &[
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
            "Memory Throughput%",
        ],
    ),
    (
        "sm_throughput_pct",
        &[
            "sm__throughput.avg.pct_of_peak_sustained_elapsed",
            "Compute (SM) Throughput",
        ],
    ),
    (
        "achieved_occupancy_pct",
        &[
            "sm__warps_active.avg.pct_of_peak_sustained_active",
            "Achieved Occupancy",
        ],
    ),
    (
        "registers_per_thread",
        &["launch__registers_per_thread", "Registers Per Thread"],
    ),
    (
        "shared_bank_conflicts",
        &[
            "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
            "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum+l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
        ],
    ),
];

fn ncu_row(k: &NcuKernel) -> NcuRow {
    let find = |name: &str| -> Option<f64> {
        // "Memory Throughput%" means the details-page metric of that name whose unit is %
        if let Some(n) = name.strip_suffix('%') {
            return k
                .metrics
                .iter()
                .find(|(m, u, _)| m == n && u == "%")
                .map(|x| x.2);
        }
        k.metrics.iter().find(|(m, _, _)| m == name).map(|x| x.2)
    };
    let mut key_metrics = Vec::new();
    for (key, sources) in NCU_KEY_METRICS {
        for src in *sources {
            let v = if src.contains('+') {
                let parts: Vec<Option<f64>> = src.split('+').map(find).collect();
                if parts.iter().all(|p| p.is_some()) {
                    Some(parts.iter().map(|p| p.unwrap_or(0.0)).sum())
                } else {
                    None
                }
            } else {
                find(src)
            };
            if let Some(v) = v {
                if v.is_finite() {
                    key_metrics.push((key.to_string(), v));
                }
                break;
            }
        }
    }
    // failed profiling: the duration metric is there but nan, or every metric is nan
    let dur = k
        .metrics
        .iter()
        .find(|(n, _, _)| n == "gpu__time_duration.sum" || n == "Duration");
    let failed = match dur {
        Some((_, _, v)) => !v.is_finite(),
        None => !k.metrics.is_empty() && k.metrics.iter().all(|m| !m.2.is_finite()),
    };
    NcuRow {
        id: k.id,
        name: k.name.clone(),
        device: k.device,
        invocations: k.invocations,
        nvtx: k.nvtx.clone(),
        key_metrics,
        failed,
        metrics: k.metrics.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservoir_is_exact_below_capacity_and_bounded_above() {
        let mut a = Acc::default();
        for i in 1..=11 {
            a.push(Some(i as f64 * 10.0));
        }
        let s = a.stats(0.0);
        assert_eq!(s.instances, 11);
        assert_eq!(s.median_ns, 60.0);
        assert_eq!(s.total_ns, 660.0);
        assert!(s.exact_samples);
        let mut b = Acc::default();
        for i in 0..(RESERVOIR as u64 * 3) {
            b.push(Some((i % 1000) as f64 + 1.0));
        }
        assert_eq!(b.samples().len(), RESERVOIR);
        let s = b.stats(0.0);
        assert!(!s.exact_samples);
        assert!((s.median_ns - 500.0).abs() < 40.0, "median {}", s.median_ns);
    }

    #[test]
    fn failed_instances_do_not_count_towards_time() {
        let mut a = Acc::default();
        a.push(Some(5.0));
        a.push(None);
        let s = a.stats(10.0);
        assert_eq!((s.instances, s.failed), (2, 1));
        assert_eq!(s.mean_ns, 5.0);
        assert_eq!(s.share, 0.5);
    }
}
