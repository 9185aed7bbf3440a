//! Rendering: terminal table, Markdown, one self-contained HTML file with SVG plots, JSON.

use crate::diff::{Class, Diff, DiffRow};
use crate::summary::Summary;
use std::fmt::Write as _;

/// Human-readable duration.
pub fn fmt_ns(ns: f64) -> String {
    let ns = if ns == 0.0 { 0.0 } else { ns };
    let a = ns.abs();
    if a >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if a >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if a >= 1e3 {
        format!("{:.3} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn fmt_signed_ns(ns: f64) -> String {
    if ns > 0.0 {
        format!("+{}", fmt_ns(ns))
    } else {
        fmt_ns(ns)
    }
}

fn fmt_pct(p: Option<f64>) -> String {
    match p {
        Some(p) => format!("{p:+.1}%"),
        None => "-".into(),
    }
}

fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn dev_label(d: i64) -> String {
    if d < 0 {
        "all".into()
    } else {
        d.to_string()
    }
}

/// A plain-text table with right-aligned numeric columns.
fn table(header: &[&str], rows: &[Vec<String>], left_cols: &[usize]) -> String {
    let n = header.len();
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: &[String], out: &mut String| {
        for (i, c) in cells.iter().enumerate().take(n) {
            let pad = w[i].saturating_sub(c.chars().count());
            if left_cols.contains(&i) {
                out.push_str(c);
                if i + 1 < n {
                    out.push_str(&" ".repeat(pad));
                }
            } else {
                out.push_str(&" ".repeat(pad));
                out.push_str(c);
            }
            if i + 1 < n {
                out.push_str("  ");
            }
        }
        out.push('\n');
    };
    let hs: Vec<String> = header.iter().map(|s| s.to_string()).collect();
    line(&hs, &mut out);
    let total: usize = w.iter().sum::<usize>() + 2 * (n - 1);
    out.push_str(&"-".repeat(total.min(200)));
    out.push('\n');
    for r in rows {
        line(r, &mut out);
    }
    out
}

fn md_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    out.push_str("| ");
    out.push_str(&header.join(" | "));
    out.push_str(" |\n|");
    for (i, _) in header.iter().enumerate() {
        out.push_str(if i + 1 == header.len() {
            "---|"
        } else {
            "---:|"
        });
    }
    out.push('\n');
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .map(|c| c.replace('|', "\\|").replace('\n', " "))
            .collect();
        out.push_str("| ");
        out.push_str(&cells.join(" | "));
        out.push_str(" |\n");
    }
    out
}

fn summary_kernel_rows(s: &Summary, top: usize, width: usize) -> Vec<Vec<String>> {
    s.kernels
        .iter()
        .take(top)
        .map(|k| {
            vec![
                format!("{:.1}%", k.stats.share * 100.0),
                fmt_ns(k.stats.total_ns),
                if k.stats.failed > 0 {
                    format!("{} ({} failed)", k.stats.instances, k.stats.failed)
                } else {
                    k.stats.instances.to_string()
                },
                fmt_ns(k.stats.mean_ns),
                fmt_ns(k.stats.median_ns),
                dev_label(k.device),
                trunc(&k.name, width),
            ]
        })
        .collect()
}

const KHDR: [&str; 7] = [
    "Time%",
    "Total",
    "Instances",
    "Mean",
    "Median",
    "Dev",
    "Kernel",
];

fn named_rows(rows: &[crate::summary::NamedRow], top: usize, width: usize) -> Vec<Vec<String>> {
    rows.iter()
        .take(top)
        .map(|r| {
            let name = match &r.domain {
                Some(d) => format!("{d}: {}", r.name),
                None => r.name.clone(),
            };
            vec![
                format!("{:.1}%", r.stats.share * 100.0),
                fmt_ns(r.stats.total_ns),
                r.stats.instances.to_string(),
                fmt_ns(r.stats.mean_ns),
                r.device.map(dev_label).unwrap_or_default(),
                trunc(&name, width),
            ]
        })
        .collect()
}

fn header_lines(s: &Summary) -> String {
    let mut out = String::new();
    let fmt = s.source.format.map(|f| f.label()).unwrap_or("?");
    let _ = writeln!(out, "{}  [{}; {}]", s.source.path, fmt, s.source.detail);
    if let Some(v) = &s.source.tool_version {
        let _ = writeln!(out, "tool: {v}");
    }
    let devs: Vec<String> = s
        .devices
        .iter()
        .map(|d| match s.source.devices.iter().find(|(i, _)| i == d) {
            Some((_, n)) => format!("{d} ({n})"),
            None => d.to_string(),
        })
        .collect();
    let _ = writeln!(
        out,
        "kernels: {} instances, {} distinct rows, total {} on device(s) {}",
        s.kernel_instances,
        s.kernels.len(),
        fmt_ns(s.total_kernel_ns),
        if devs.is_empty() {
            "-".into()
        } else {
            devs.join(", ")
        }
    );
    for w in &s.source.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// Terminal table of a summary.
pub fn summary_text(s: &Summary, top: usize) -> String {
    let mut out = header_lines(s);
    out.push('\n');
    if !s.kernels.is_empty() {
        out.push_str(&table(&KHDR, &summary_kernel_rows(s, top, 90), &[6]));
        if s.kernels.len() > top {
            let _ = writeln!(out, "... {} more rows (use --top)", s.kernels.len() - top);
        }
        out.push('\n');
    }
    let nh = ["Time%", "Total", "Instances", "Mean", "Dev", "Name"];
    if !s.nvtx.is_empty() {
        out.push_str("NVTX ranges / annotations\n");
        out.push_str(&table(&nh, &named_rows(&s.nvtx, top.min(15), 80), &[5]));
        out.push('\n');
    }
    if !s.memops.is_empty() {
        out.push_str("Memory operations\n");
        out.push_str(&table(&nh, &named_rows(&s.memops, top.min(10), 60), &[5]));
        out.push('\n');
    }
    if !s.api.is_empty() {
        out.push_str("CUDA API\n");
        out.push_str(&table(&nh, &named_rows(&s.api, top.min(10), 60), &[5]));
        out.push('\n');
    }
    if !s.ncu.is_empty() {
        out.push_str("Nsight Compute kernels\n");
        let rows: Vec<Vec<String>> = s
            .ncu
            .iter()
            .take(top)
            .map(|k| {
                let m = |key: &str| {
                    k.key_metrics
                        .iter()
                        .find(|(n, _)| n == key)
                        .map(|(_, v)| *v)
                };
                vec![
                    k.id.to_string(),
                    if k.failed {
                        "FAILED".into()
                    } else {
                        m("duration_ns").map(fmt_ns).unwrap_or("-".into())
                    },
                    m("dram_bytes")
                        .map(|b| format!("{:.2} MB", b / 1e6))
                        .unwrap_or("-".into()),
                    m("sm_throughput_pct")
                        .map(|v| format!("{v:.1}%"))
                        .unwrap_or("-".into()),
                    m("achieved_occupancy_pct")
                        .map(|v| format!("{v:.1}%"))
                        .unwrap_or("-".into()),
                    m("registers_per_thread")
                        .map(|v| format!("{v:.0}"))
                        .unwrap_or("-".into()),
                    trunc(&k.name, 70),
                ]
            })
            .collect();
        out.push_str(&table(
            &["ID", "Duration", "DRAM", "SM%", "Occup.", "Regs", "Kernel"],
            &rows,
            &[6],
        ));
    }
    out
}

/// Markdown summary.
pub fn summary_markdown(s: &Summary, top: usize) -> String {
    let mut out = String::from("# Trace summary\n\n");
    for l in header_lines(s).lines() {
        let _ = writeln!(out, "- {l}");
    }
    out.push_str("\n## Kernels\n\n");
    out.push_str(&md_table(&KHDR, &summary_kernel_rows(s, top, 200)));
    let nh = ["Time%", "Total", "Instances", "Mean", "Dev", "Name"];
    if !s.nvtx.is_empty() {
        out.push_str("\n## NVTX ranges\n\n");
        out.push_str(&md_table(&nh, &named_rows(&s.nvtx, top, 200)));
    }
    if !s.memops.is_empty() {
        out.push_str("\n## Memory operations\n\n");
        out.push_str(&md_table(&nh, &named_rows(&s.memops, top, 200)));
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}td.n,th.n{text-align:left;font-family:monospace;max-width:60em;overflow-wrap:anywhere}tr.regressed{background:#fde2e2}tr.improved{background:#e2f5e2}tr.new{background:#fff4d6}tr.removed{background:#e8e8f4}svg text{font-size:11px;font-family:monospace}.warn{color:#a60}";

fn html_table(header: &[&str], rows: &[(String, Vec<String>)], name_col: usize) -> String {
    let mut out = String::from("<table><tr>");
    for (i, h) in header.iter().enumerate() {
        let cls = if i == name_col { " class=n" } else { "" };
        let _ = write!(out, "<th{cls}>{}</th>", esc(h));
    }
    out.push_str("</tr>\n");
    for (class, r) in rows {
        let _ = write!(out, "<tr class=\"{class}\">");
        for (i, c) in r.iter().enumerate() {
            let cls = if i == name_col { " class=n" } else { "" };
            let _ = write!(out, "<td{cls}>{}</td>", esc(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

/// Horizontal bar chart; values may be negative (diverging bars around a centre line).
fn svg_bars(title: &str, items: &[(String, f64, &str)], unit: &dyn Fn(f64) -> String) -> String {
    let bar_h = 18.0;
    let label_w = 420.0;
    let plot_w = 460.0;
    let h = 30.0 + bar_h * items.len() as f64 + 10.0;
    let maxabs = items
        .iter()
        .map(|(_, v, _)| v.abs())
        .fold(0.0f64, f64::max)
        .max(1e-12);
    let has_neg = items.iter().any(|(_, v, _)| *v < 0.0);
    let zero_x = if has_neg {
        label_w + plot_w / 2.0
    } else {
        label_w
    };
    let scale = if has_neg { plot_w / 2.0 } else { plot_w } / maxabs;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{h}\"><text x=\"4\" y=\"16\" style=\"font-size:13px;font-weight:bold\">{}</text>",
        label_w + plot_w + 110.0,
        esc(title)
    );
    for (i, (label, v, color)) in items.iter().enumerate() {
        let y = 26.0 + i as f64 * bar_h;
        let w = v.abs() * scale;
        let x = if *v < 0.0 { zero_x - w } else { zero_x };
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text><rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{color}\"><title>{}: {}</title></rect><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            label_w - 6.0,
            y + 13.0,
            esc(&trunc(label, 60)),
            y + 2.0,
            bar_h - 4.0,
            esc(label),
            esc(&unit(*v)),
            label_w + plot_w + 4.0,
            y + 13.0,
            esc(&unit(*v))
        );
    }
    let _ = write!(
        out,
        "<line x1=\"{zero_x:.1}\" x2=\"{zero_x:.1}\" y1=\"22\" y2=\"{:.1}\" stroke=\"#444\"/></svg>",
        h - 6.0
    );
    out
}

/// Self-contained HTML summary with an SVG share-of-time plot.
pub fn summary_html(s: &Summary, top: usize) -> String {
    let mut out = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>duet trace summary</title><style>{CSS}</style></head><body><h1>Trace summary</h1><pre>{}</pre>",
        esc(&header_lines(s))
    );
    let items: Vec<(String, f64, &str)> = s
        .kernels
        .iter()
        .take(20)
        .map(|k| {
            (
                format!("[{}] {}", dev_label(k.device), k.name),
                k.stats.share * 100.0,
                "#4a7bd0",
            )
        })
        .collect();
    out.push_str(&svg_bars("Share of kernel time (%)", &items, &|v| {
        format!("{v:.1}%")
    }));
    let rows: Vec<(String, Vec<String>)> = summary_kernel_rows(s, top, 400)
        .into_iter()
        .map(|r| (String::new(), r))
        .collect();
    out.push_str("<h2>Kernels</h2>");
    out.push_str(&html_table(&KHDR, &rows, 6));
    if !s.nvtx.is_empty() {
        out.push_str("<h2>NVTX ranges</h2>");
        let rows: Vec<(String, Vec<String>)> = named_rows(&s.nvtx, top, 400)
            .into_iter()
            .map(|r| (String::new(), r))
            .collect();
        out.push_str(&html_table(
            &["Time%", "Total", "Instances", "Mean", "Dev", "Name"],
            &rows,
            5,
        ));
    }
    out.push_str("</body></html>\n");
    out
}

fn diff_cells(r: &DiffRow, width: usize) -> Vec<String> {
    let side = |s: &Option<crate::diff::Side>, f: &dyn Fn(&crate::diff::Side) -> String| {
        s.as_ref().map(f).unwrap_or_else(|| "-".into())
    };
    vec![
        r.class.label().to_string(),
        side(&r.baseline, &|s| fmt_ns(s.total_ns)),
        side(&r.candidate, &|s| fmt_ns(s.total_ns)),
        fmt_signed_ns(r.delta_total_ns),
        fmt_pct(r.delta_total_pct),
        format!(
            "{}/{}",
            side(&r.baseline, &|s| s.instances.to_string()),
            side(&r.candidate, &|s| s.instances.to_string())
        ),
        side(&r.baseline, &|s| fmt_ns(s.mean_ns)),
        side(&r.candidate, &|s| fmt_ns(s.mean_ns)),
        fmt_pct(r.delta_mean_pct),
        r.p_value
            .map(|p| {
                if p < 1e-4 {
                    format!("{p:.0e}")
                } else {
                    format!("{p:.3}")
                }
            })
            .unwrap_or("-".into()),
        r.device.map(dev_label).unwrap_or_default(),
        trunc(
            &match &r.domain {
                Some(d) => format!("{d}: {}", r.name),
                None => r.name.clone(),
            },
            width,
        ),
    ]
}

const DHDR: [&str; 12] = [
    "Class",
    "Base total",
    "Cand total",
    "Delta",
    "Delta%",
    "Inst b/c",
    "Base mean",
    "Cand mean",
    "Mean%",
    "p",
    "Dev",
    "Name",
];

fn diff_header(d: &Diff) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "baseline : {} [{}]",
        d.baseline.path, d.baseline.detail
    );
    let _ = writeln!(
        out,
        "candidate: {} [{}]",
        d.candidate.path, d.candidate.detail
    );
    let _ = writeln!(
        out,
        "kernel time: {} -> {} ({}, {})",
        fmt_ns(d.baseline.total_kernel_ns),
        fmt_ns(d.candidate.total_kernel_ns),
        fmt_signed_ns(d.total_delta_ns),
        fmt_pct(d.total_delta_pct)
    );
    let _ = writeln!(
        out,
        "rows: {} regressed, {} improved, {} new, {} removed, {} unchanged  (grouped by {:?}; threshold {}%, min impact {}, alpha {}, compare {:?})",
        d.counts.regressed,
        d.counts.improved,
        d.counts.new,
        d.counts.removed,
        d.counts.unchanged,
        d.group_by,
        d.options.threshold_pct,
        fmt_ns(d.options.min_delta_ns),
        d.options.alpha,
        d.options.compare
    );
    for w in &d.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// Rows worth showing: every row with `all`, else all but the unchanged ones.
fn visible(rows: &[DiffRow], all: bool) -> impl Iterator<Item = &DiffRow> {
    rows.iter()
        .filter(move |r| all || r.class != Class::Unchanged)
}

/// Kernel rows that regressed or improved (the ones a "why" section explains).
fn changed_rows(d: &Diff) -> impl Iterator<Item = &DiffRow> {
    d.rows
        .iter()
        .filter(|r| matches!(r.class, Class::Regressed | Class::Improved))
}

fn shown_rows(d: &Diff, top: usize, all: bool) -> Vec<&DiffRow> {
    let mut v: Vec<&DiffRow> = visible(&d.rows, all).take(top).collect();
    if v.is_empty() {
        v = d.rows.iter().take(top.min(10)).collect();
    }
    v
}

/// Terminal diff table.
pub fn diff_text(d: &Diff, top: usize, all: bool) -> String {
    let mut out = diff_header(d);
    out.push('\n');
    let rows: Vec<Vec<String>> = shown_rows(d, top, all)
        .iter()
        .map(|r| diff_cells(r, 80))
        .collect();
    out.push_str(&table(&DHDR, &rows, &[0, 11]));
    if !all && d.counts.unchanged > 0 {
        let _ = writeln!(
            out,
            "({} unchanged rows hidden; --all shows them)",
            d.counts.unchanged
        );
    }
    let changed: Vec<&DiffRow> = changed_rows(d).take(top).collect();
    if !changed.is_empty() {
        out.push_str("\nwhy:\n");
        for r in changed {
            let _ = writeln!(
                out,
                "  {} [{}] {}: {}",
                r.class.label(),
                r.device.map(dev_label).unwrap_or_default(),
                trunc(&r.name, 70),
                r.reason
            );
        }
    }
    if d.group_by != crate::summary::GroupBy::Nvtx {
        let nv: Vec<Vec<String>> = visible(&d.nvtx, all)
            .take(top.min(15))
            .map(|r| diff_cells(r, 70))
            .collect();
        if !nv.is_empty() {
            out.push_str("\nNVTX ranges\n");
            out.push_str(&table(&DHDR, &nv, &[0, 11]));
        }
    }
    if !d.ncu.is_empty() {
        out.push_str("\nNsight Compute metrics of matched kernels\n");
        for k in &d.ncu {
            let _ = writeln!(
                out,
                "  {} ({} vs {} profiled{})",
                trunc(&k.name, 90),
                k.baseline_instances,
                k.candidate_instances,
                if k.baseline_failed + k.candidate_failed > 0 {
                    format!(
                        "; profiling failed on {} / {}",
                        k.baseline_failed, k.candidate_failed
                    )
                } else {
                    String::new()
                }
            );
            for m in &k.metrics {
                let f = |v: Option<f64>| v.map(|v| format!("{v:.4}")).unwrap_or("-".into());
                let _ = writeln!(
                    out,
                    "    {:<24} {:>18} -> {:>18}  {}",
                    m.metric,
                    f(m.baseline),
                    f(m.candidate),
                    fmt_pct(m.pct)
                );
            }
        }
    }
    out
}

/// Markdown diff.
pub fn diff_markdown(d: &Diff, top: usize, all: bool) -> String {
    let mut out = String::from("# Trace diff\n\n");
    for l in diff_header(d).lines() {
        let _ = writeln!(out, "- {l}");
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = shown_rows(d, top, all)
        .iter()
        .map(|r| diff_cells(r, 200))
        .collect();
    out.push_str(&md_table(&DHDR, &rows));
    let changed: Vec<&DiffRow> = changed_rows(d).collect();
    if !changed.is_empty() {
        out.push_str("\n## Why\n\n");
        for r in changed.iter().take(top) {
            let _ = writeln!(
                out,
                "- **{}** `{}` (device {}): {}",
                r.class.label(),
                r.name,
                r.device.map(dev_label).unwrap_or_default(),
                r.reason
            );
        }
    }
    out
}

/// Self-contained HTML diff with SVG plots (top deltas, share of time).
pub fn diff_html(d: &Diff, top: usize, all: bool) -> String {
    let mut out = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>duet trace diff</title><style>{CSS}</style></head><body><h1>Trace diff</h1><pre>{}</pre>",
        esc(&diff_header(d))
    );
    let mut by_impact: Vec<&DiffRow> = d.rows.iter().collect();
    by_impact.sort_by(|a, b| b.delta_total_ns.abs().total_cmp(&a.delta_total_ns.abs()));
    let items: Vec<(String, f64, &str)> = by_impact
        .iter()
        .take(20)
        .map(|r| {
            let color = match r.class {
                Class::Regressed | Class::New => "#d04a4a",
                Class::Improved | Class::Removed => "#3f9f4f",
                Class::Unchanged => "#999999",
            };
            (
                format!(
                    "[{}] {}",
                    r.device.map(dev_label).unwrap_or_default(),
                    r.name
                ),
                r.delta_total_ns,
                color,
            )
        })
        .collect();
    out.push_str(&svg_bars(
        "Top total-time deltas (candidate - baseline)",
        &items,
        &|v| fmt_signed_ns(v),
    ));
    // share of time, baseline vs candidate
    let mut share: Vec<(String, f64, &str)> = Vec::new();
    for r in d.rows.iter().take(12) {
        let label = format!(
            "{} [{}]",
            r.name,
            r.device.map(dev_label).unwrap_or_default()
        );
        share.push((
            format!("base {label}"),
            r.baseline.as_ref().map(|s| s.share * 100.0).unwrap_or(0.0),
            "#7a9bd6",
        ));
        share.push((
            format!("cand {label}"),
            r.candidate.as_ref().map(|s| s.share * 100.0).unwrap_or(0.0),
            "#d6a27a",
        ));
    }
    out.push_str("<br>");
    out.push_str(&svg_bars(
        "Share of kernel time (%), baseline vs candidate",
        &share,
        &|v| format!("{v:.1}%"),
    ));
    let rows: Vec<(String, Vec<String>)> = shown_rows(d, top, all)
        .iter()
        .map(|r| (r.class.label().to_string(), diff_cells(r, 400)))
        .collect();
    out.push_str("<h2>Kernels</h2>");
    out.push_str(&html_table(&DHDR, &rows, 11));
    let changed: Vec<&DiffRow> = changed_rows(d).collect();
    if !changed.is_empty() {
        out.push_str("<h2>Why</h2><ul>");
        for r in changed.iter().take(top) {
            let _ = write!(
                out,
                "<li><b>{}</b> <code>{}</code>: {}</li>",
                r.class.label(),
                esc(&r.name),
                esc(&r.reason)
            );
        }
        out.push_str("</ul>");
    }
    if !d.nvtx.is_empty() && d.group_by != crate::summary::GroupBy::Nvtx {
        let rows: Vec<(String, Vec<String>)> = visible(&d.nvtx, all)
            .take(top)
            .map(|r| (r.class.label().to_string(), diff_cells(r, 400)))
            .collect();
        if !rows.is_empty() {
            out.push_str("<h2>NVTX ranges</h2>");
            out.push_str(&html_table(&DHDR, &rows, 11));
        }
    }
    out.push_str("</body></html>\n");
    out
}
