//! Run-to-run diff: per kernel (or group) and device, per NVTX range, and per ncu metric.

use crate::error::{Result, TraceError};
use crate::names::CanonicalName;
use crate::stats::{bootstrap_mean_diff_ci, mann_whitney};
use crate::summary::{GroupBy, NcuRow, Stats, Summary};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// What a row's change is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Compare {
    /// Per-instance time (mean); robust when the two captures have different instance counts
    /// (time windows, different step counts). Impact = mean delta x candidate instances.
    #[default]
    Mean,
    /// Total time per kernel.
    Total,
}

/// Thresholds of the classification.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DiffOptions {
    /// Minimum relative change, in percent, to call a row regressed / improved.
    pub threshold_pct: f64,
    /// Minimum absolute impact in ns (total time gained or lost).
    pub min_delta_ns: f64,
    /// Significance level of the rank test on per-instance durations.
    pub alpha: f64,
    pub compare: Compare,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            threshold_pct: 5.0,
            min_delta_ns: 10_000.0,
            alpha: 0.05,
            compare: Compare::Mean,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    Regressed,
    New,
    Improved,
    Removed,
    Unchanged,
}

impl Class {
    pub fn label(self) -> &'static str {
        match self {
            Class::Regressed => "regressed",
            Class::New => "new",
            Class::Improved => "improved",
            Class::Removed => "removed",
            Class::Unchanged => "unchanged",
        }
    }
}

/// One side of a diff row.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub instances: u64,
    pub total_ns: f64,
    pub mean_ns: f64,
    pub median_ns: f64,
    pub share: f64,
}

impl Side {
    fn of(s: &Stats) -> Side {
        Side {
            instances: s.instances,
            total_ns: s.total_ns,
            mean_ns: s.mean_ns,
            median_ns: s.median_ns,
            share: s.share,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct DiffRow {
    pub name: String,
    /// GPU id (baseline numbering); -1 when devices were merged; absent for NVTX rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    pub baseline: Option<Side>,
    pub candidate: Option<Side>,
    pub delta_total_ns: f64,
    /// Percent change of total time (None when the baseline total is 0 / absent).
    pub delta_total_pct: Option<f64>,
    pub delta_mean_ns: f64,
    pub delta_mean_pct: Option<f64>,
    /// Percent change used for the classification (mean or total, see `compare`).
    pub pct: Option<f64>,
    /// Estimated time impact in ns used for the minimum-delta test.
    pub impact_ns: f64,
    /// Rank-test p-value on per-instance durations, when both sides have >= 3.
    pub p_value: Option<f64>,
    /// Bootstrap confidence interval (level 1-alpha) of the per-instance mean delta, in ns;
    /// computed for rows that pass the threshold tests.
    pub mean_delta_ci_ns: Option<(f64, f64)>,
    pub class: Class,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricDelta {
    pub metric: String,
    pub baseline: Option<f64>,
    pub candidate: Option<f64>,
    pub delta: Option<f64>,
    pub pct: Option<f64>,
}

/// Metric diff of one kernel matched across two ncu reports.
#[derive(Debug, Clone, Serialize)]
pub struct NcuDiff {
    pub name: String,
    pub baseline_instances: u64,
    pub candidate_instances: u64,
    pub baseline_failed: u64,
    pub candidate_failed: u64,
    pub metrics: Vec<MetricDelta>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SideInfo {
    pub path: String,
    pub format: Option<crate::model::Format>,
    pub detail: String,
    pub devices: Vec<i64>,
    pub total_kernel_ns: f64,
    pub kernel_instances: u64,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Counts {
    pub regressed: usize,
    pub improved: usize,
    pub new: usize,
    pub removed: usize,
    pub unchanged: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    pub baseline: SideInfo,
    pub candidate: SideInfo,
    pub group_by: GroupBy,
    pub options: DiffOptions,
    pub total_delta_ns: f64,
    pub total_delta_pct: Option<f64>,
    pub counts: Counts,
    /// Kernel rows (or NVTX rows with `--group-by nvtx`), most impactful first.
    pub rows: Vec<DiffRow>,
    pub nvtx: Vec<DiffRow>,
    pub memops: Vec<DiffRow>,
    pub ncu: Vec<NcuDiff>,
    pub warnings: Vec<String>,
}

fn pct(base: f64, cand: f64) -> Option<f64> {
    if base > 0.0 {
        Some((cand - base) / base * 100.0)
    } else {
        None
    }
}

struct Item<'a> {
    name: String,
    device: Option<i64>,
    domain: Option<String>,
    stats: &'a Stats,
}

fn classify_rows(items_b: Vec<Item<'_>>, items_c: Vec<Item<'_>>, o: &DiffOptions) -> Vec<DiffRow> {
    type Key = (String, Option<i64>, Option<String>);
    let mut map: BTreeMap<Key, (Option<&Stats>, Option<&Stats>)> = BTreeMap::new();
    for it in &items_b {
        map.entry((it.name.clone(), it.device, it.domain.clone()))
            .or_default()
            .0 = Some(it.stats);
    }
    for it in &items_c {
        map.entry((it.name.clone(), it.device, it.domain.clone()))
            .or_default()
            .1 = Some(it.stats);
    }
    let mut rows: Vec<DiffRow> = map
        .into_iter()
        .map(|((name, device, domain), (b, c))| row(name, device, domain, b, c, o))
        .collect();
    rows.sort_by(|a, b| {
        a.class
            .cmp(&b.class)
            .then(b.impact_ns.abs().total_cmp(&a.impact_ns.abs()))
            .then_with(|| a.name.cmp(&b.name))
    });
    rows
}

fn fmt_p(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

fn row(
    name: String,
    device: Option<i64>,
    domain: Option<String>,
    b: Option<&Stats>,
    c: Option<&Stats>,
    o: &DiffOptions,
) -> DiffRow {
    let bt = b.map(|s| s.total_ns).unwrap_or(0.0);
    let ct = c.map(|s| s.total_ns).unwrap_or(0.0);
    let bm = b.map(|s| s.mean_ns).unwrap_or(0.0);
    let cm = c.map(|s| s.mean_ns).unwrap_or(0.0);
    let mut r = DiffRow {
        name,
        device,
        domain,
        baseline: b.map(Side::of),
        candidate: c.map(Side::of),
        delta_total_ns: ct - bt,
        delta_total_pct: pct(bt, ct),
        delta_mean_ns: cm - bm,
        delta_mean_pct: pct(bm, cm),
        pct: None,
        impact_ns: ct - bt,
        p_value: None,
        mean_delta_ci_ns: None,
        class: Class::Unchanged,
        reason: String::new(),
    };
    let (b, c) = match (b, c) {
        (None, Some(c)) => {
            r.class = Class::New;
            r.reason = format!("only in candidate ({} instances)", c.instances);
            return r;
        }
        (Some(b), None) => {
            r.class = Class::Removed;
            r.reason = format!("only in baseline ({} instances)", b.instances);
            return r;
        }
        (Some(b), Some(c)) => (b, c),
        (None, None) => return r,
    };
    let measured_c = c.instances.saturating_sub(c.failed) as f64;
    let (p, impact) = match o.compare {
        Compare::Mean => (r.delta_mean_pct, (cm - bm) * measured_c),
        Compare::Total => (r.delta_total_pct, ct - bt),
    };
    r.pct = p;
    r.impact_ns = impact;
    let mut notes: Vec<String> = Vec::new();
    if b.instances != c.instances {
        notes.push(format!("instances {} -> {}", b.instances, c.instances));
    }
    let samples_ok = !b.samples.is_empty() && !c.samples.is_empty();
    let pv = if samples_ok && (o.compare == Compare::Mean || b.instances == c.instances) {
        mann_whitney(&b.samples, &c.samples)
    } else {
        None
    };
    r.p_value = pv;
    let Some(pc) = p else {
        r.reason = "baseline time is 0".into();
        return r;
    };
    let big = pc.abs() >= o.threshold_pct;
    let matters = impact.abs() >= o.min_delta_ns;
    // Two views of noise: the rank test catches a shift of the typical instance, the
    // bootstrap interval of the mean delta catches changes carried by the tail.
    if big && matters && samples_ok && o.compare == Compare::Mean {
        r.mean_delta_ci_ns = bootstrap_mean_diff_ci(&b.samples, &c.samples, o.alpha, 400);
    }
    let ci_excludes_zero = r.mean_delta_ci_ns.map(|(lo, hi)| lo > 0.0 || hi < 0.0);
    let significant = match (pv, ci_excludes_zero) {
        (None, None) => true,
        (p, ci) => p.is_some_and(|p| p < o.alpha) || ci.unwrap_or(false),
    };
    let what = match o.compare {
        Compare::Mean => "mean",
        Compare::Total => "total",
    };
    let mut reason = format!("{what} {pc:+.1}%");
    if let Some(p) = pv {
        reason.push_str(&format!(", rank test p={}", fmt_p(p)));
        if let Some((lo, hi)) = r.mean_delta_ci_ns {
            reason.push_str(&format!(
                ", mean delta {:.0}% CI [{:.2}, {:.2}] us",
                (1.0 - o.alpha) * 100.0,
                lo / 1e3,
                hi / 1e3
            ));
        }
    } else if !samples_ok {
        reason.push_str(", no per-instance data");
    } else {
        reason.push_str(", too few instances for a rank test");
    }
    if big && matters && significant {
        r.class = if pc > 0.0 {
            Class::Regressed
        } else {
            Class::Improved
        };
    } else if !big {
        reason.push_str(&format!(", below {}% threshold", o.threshold_pct));
    } else if !matters {
        reason.push_str(&format!(
            ", impact {:.1} us below minimum {:.1} us",
            impact.abs() / 1e3,
            o.min_delta_ns / 1e3
        ));
    } else {
        reason.push_str(&format!(", not significant at alpha={}", o.alpha));
    }
    notes.insert(0, reason);
    r.reason = notes.join("; ");
    r
}

fn side_info(s: &Summary) -> SideInfo {
    SideInfo {
        path: s.source.path.clone(),
        format: s.source.format,
        detail: s.source.detail.clone(),
        devices: s.devices.clone(),
        total_kernel_ns: s.total_kernel_ns,
        kernel_instances: s.kernel_instances,
    }
}

/// Compare two summaries (built with the same grouping).
pub fn diff(base: &Summary, cand: &Summary, o: &DiffOptions) -> Result<Diff> {
    if base.group_by != cand.group_by || base.merged_devices != cand.merged_devices {
        return Err(TraceError::Option(
            "both summaries must use the same --group-by and device merging".into(),
        ));
    }
    // (written so that a NaN option fails: every comparison with NaN is false)
    let valid = o.threshold_pct >= 0.0 && o.min_delta_ns >= 0.0 && o.alpha > 0.0 && o.alpha <= 1.0;
    if !valid {
        return Err(TraceError::Option(format!(
            "thresholds must be >= 0 and alpha in (0, 1]; got threshold {}%, min delta {} ns, alpha {}",
            o.threshold_pct, o.min_delta_ns, o.alpha
        )));
    }
    let mut warnings = Vec::new();
    for (label, s) in [("baseline", base), ("candidate", cand)] {
        for w in &s.source.warnings {
            warnings.push(format!("{label}: {w}"));
        }
    }
    // device mapping
    let bd = &base.devices;
    let cd = &cand.devices;
    let mut remap: HashMap<i64, i64> = HashMap::new();
    if !base.merged_devices {
        if bd.len() == 1 && cd.len() == 1 && bd[0] != cd[0] {
            remap.insert(cd[0], bd[0]);
            warnings.push(format!(
                "baseline ran on device {} and candidate on device {}; compared as the same GPU",
                bd[0], cd[0]
            ));
        } else {
            for d in bd.iter().filter(|d| !cd.contains(d)) {
                warnings.push(format!(
                    "device {d} appears only in the baseline; its kernels show as removed"
                ));
            }
            for d in cd.iter().filter(|d| !bd.contains(d)) {
                warnings.push(format!(
                    "device {d} appears only in the candidate; its kernels show as new"
                ));
            }
        }
    }
    if base.aggregated_only || cand.aggregated_only {
        warnings.push(
            "one side has only aggregated numbers (no per-instance durations): classification uses thresholds without a rank test".into(),
        );
    }
    let nvtx = classify_rows(range_items(base), range_items(cand), o);
    let rows = if base.group_by == GroupBy::Nvtx {
        nvtx.clone()
    } else {
        classify_rows(
            kernel_items(base, None),
            kernel_items(cand, Some(&remap)),
            o,
        )
    };
    let memops = classify_rows(memop_items(base, None), memop_items(cand, Some(&remap)), o);
    let mut counts = Counts::default();
    for r in &rows {
        match r.class {
            Class::Regressed => counts.regressed += 1,
            Class::Improved => counts.improved += 1,
            Class::New => counts.new += 1,
            Class::Removed => counts.removed += 1,
            Class::Unchanged => counts.unchanged += 1,
        }
    }
    let ncu = ncu_diff(&base.ncu, &cand.ncu);
    Ok(Diff {
        baseline: side_info(base),
        candidate: side_info(cand),
        group_by: base.group_by,
        options: *o,
        total_delta_ns: cand.total_kernel_ns - base.total_kernel_ns,
        total_delta_pct: pct(base.total_kernel_ns, cand.total_kernel_ns),
        counts,
        rows,
        nvtx,
        memops,
        ncu,
        warnings,
    })
}

fn map_dev(remap: Option<&HashMap<i64, i64>>, d: i64) -> i64 {
    remap.and_then(|m| m.get(&d).copied()).unwrap_or(d)
}

fn kernel_items<'a>(s: &'a Summary, remap: Option<&HashMap<i64, i64>>) -> Vec<Item<'a>> {
    s.kernels
        .iter()
        .map(|k| Item {
            name: k.name.clone(),
            device: Some(map_dev(remap, k.device)),
            domain: None,
            stats: &k.stats,
        })
        .collect()
}

fn range_items(s: &Summary) -> Vec<Item<'_>> {
    s.nvtx
        .iter()
        .map(|r| Item {
            name: r.name.clone(),
            device: None,
            domain: r.domain.clone(),
            stats: &r.stats,
        })
        .collect()
}

fn memop_items<'a>(s: &'a Summary, remap: Option<&HashMap<i64, i64>>) -> Vec<Item<'a>> {
    s.memops
        .iter()
        .map(|r| Item {
            name: r.name.clone(),
            device: r.device.map(|d| map_dev(remap, d)),
            domain: None,
            stats: &r.stats,
        })
        .collect()
}

fn ncu_diff(b: &[NcuRow], c: &[NcuRow]) -> Vec<NcuDiff> {
    if b.is_empty() || c.is_empty() {
        return Vec::new();
    }
    struct G {
        n: u64,
        failed: u64,
        sums: BTreeMap<String, (f64, u64)>,
    }
    let group = |rows: &[NcuRow]| -> BTreeMap<String, G> {
        let mut m: BTreeMap<String, G> = BTreeMap::new();
        for r in rows {
            let g = m.entry(CanonicalName::new(&r.name).full).or_insert(G {
                n: 0,
                failed: 0,
                sums: BTreeMap::new(),
            });
            g.n = g.n.saturating_add(r.invocations);
            if r.failed {
                g.failed = g.failed.saturating_add(r.invocations);
                continue;
            }
            for (k, v) in &r.key_metrics {
                let e = g.sums.entry(k.clone()).or_insert((0.0, 0));
                e.0 += v * r.invocations as f64;
                e.1 = e.1.saturating_add(r.invocations);
            }
        }
        m
    };
    let gb = group(b);
    let gc = group(c);
    let mut out = Vec::new();
    for (name, bg) in &gb {
        let Some(cg) = gc.get(name) else { continue };
        let mut keys: Vec<&String> = bg.sums.keys().chain(cg.sums.keys()).collect();
        keys.sort();
        keys.dedup();
        // keep the canonical order of NCU_KEY_METRICS
        let order = |k: &str| {
            crate::summary::NCU_KEY_METRICS
                .iter()
                .position(|(n, _)| *n == k)
                .unwrap_or(usize::MAX)
        };
        keys.sort_by_key(|k| order(k));
        let metrics = keys
            .into_iter()
            .map(|k| {
                let mb = bg.sums.get(k).map(|(s, n)| s / *n as f64);
                let mc = cg.sums.get(k).map(|(s, n)| s / *n as f64);
                let delta = match (mb, mc) {
                    (Some(x), Some(y)) => Some(y - x),
                    _ => None,
                };
                MetricDelta {
                    metric: k.clone(),
                    baseline: mb,
                    candidate: mc,
                    delta,
                    pct: match (mb, mc) {
                        (Some(x), Some(y)) if x != 0.0 => Some((y - x) / x.abs() * 100.0),
                        _ => None,
                    },
                }
            })
            .collect();
        out.push(NcuDiff {
            name: name.clone(),
            baseline_instances: bg.n,
            candidate_instances: cg.n,
            baseline_failed: bg.failed,
            candidate_failed: cg.failed,
            metrics,
        });
    }
    out
}
