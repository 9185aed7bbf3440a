//! `duet bench compare A B` on two `duet profile` outputs (the text table, as a device log
//! holds it, or `--json`), e.g. two `duet profile engine-step` runs before and after a change:
//! the summed kernel time, per kernel name the calls and the total (largest change first),
//! and, when both runs launched the same number of kernels, launch by launch (the step's
//! kernels in order, so a launch whose kernel was replaced shows as `old -> new`). ncu profiles
//! each kernel once: single samples, so no significance test and no verdict (exit 0).

use anyhow::Context;

/// The kernels of one profile in launch order: (name, duration in microseconds).
pub type Launches = Vec<(String, f64)>;

/// The launches of a `duet profile` output, or None when the text is not one. JSON: the
/// `{"kernels": [{"kernel", "duration_ns"}, ...]}` of `--json` with grouping, or the bare row
/// list. Text: the rows under the `kernel  dur us ...` header (indented detail lines skipped)
/// up to the `per kernel name:` summary or the end.
pub fn parse(bytes: &[u8]) -> Option<Launches> {
    let text = std::str::from_utf8(bytes).ok()?;
    let json = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .or_else(|| {
            let start = text
                .match_indices('\n')
                .map(|(i, _)| i + 1)
                .find(|&i| text[i..].starts_with('{') || text[i..].starts_with('['))?;
            serde_json::from_str(&text[start..]).ok()
        });
    if let Some(v) = json {
        let rows = v.get("kernels").unwrap_or(&v).as_array()?;
        return rows
            .iter()
            .map(|r| {
                let name = r.get("kernel")?.as_str()?.to_string();
                let ns = r.get("duration_ns")?.as_f64()?;
                Some((name, ns / 1e3))
            })
            .collect::<Option<Launches>>()
            .filter(|l| !l.is_empty());
    }
    let mut lines = text.lines();
    lines.find(|l| l.starts_with("kernel") && l.contains("dur us"))?;
    let mut out = Launches::new();
    for l in lines {
        if l.starts_with("per kernel name:") || l.trim().is_empty() {
            break;
        }
        if l.starts_with(char::is_whitespace) {
            continue;
        }
        let mut f = l.split_whitespace();
        let (Some(name), Some(dur)) = (f.next(), f.next()) else {
            continue;
        };
        // A row's second field is its duration; other lines (notes) are skipped.
        if let Ok(d) = dur.parse::<f64>() {
            out.push((name.to_string(), d));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Per kernel name: (calls, total us), in first-launch order.
fn by_name(l: &Launches) -> Vec<(String, usize, f64)> {
    let mut v: Vec<(String, usize, f64)> = Vec::new();
    for (n, d) in l {
        match v.iter_mut().find(|(m, _, _)| m == n) {
            Some(e) => {
                e.1 += 1;
                e.2 += d;
            }
            None => v.push((n.clone(), 1, *d)),
        }
    }
    v
}

/// The comparison as text (what `duet bench compare` prints).
pub fn report(a: &Launches, b: &Launches, top: usize) -> String {
    use std::fmt::Write;
    let sum = |l: &Launches| l.iter().map(|(_, d)| d).sum::<f64>();
    let (ta, tb) = (sum(a), sum(b));
    let mut s = String::new();
    let _ = writeln!(
        s,
        "kernel time summed (one sample each: no significance test)\n{:<50} {:>10} {:>10} {:>9}\n{:<50} {:>10.1} {:>10.1} {:>+9.1}",
        "", "base us", "cand us", "delta %",
        format!("all kernels ({} -> {} launches)", a.len(), b.len()),
        ta,
        tb,
        100.0 * (tb - ta) / ta
    );
    let (na, nb) = (by_name(a), by_name(b));
    let mut rows: Vec<(String, String, String, f64, f64)> = Vec::new();
    for (n, c, t) in &na {
        match nb.iter().find(|(m, _, _)| m == n) {
            Some((_, c2, t2)) => rows.push((n.clone(), c.to_string(), c2.to_string(), *t, *t2)),
            None => rows.push((n.clone(), c.to_string(), "-".into(), *t, 0.0)),
        }
    }
    for (n, c, t) in nb
        .iter()
        .filter(|(m, _, _)| !na.iter().any(|(k, _, _)| k == m))
    {
        rows.push((n.clone(), "-".into(), c.to_string(), 0.0, *t));
    }
    rows.sort_by(|x, y| (y.4 - y.3).abs().total_cmp(&(x.4 - x.3).abs()));
    let _ = writeln!(
        s,
        "\nper kernel name, largest change first\n{:<50} {:>6} {:>6} {:>10} {:>10} {:>9}",
        "kernel", "calls", "calls", "base us", "cand us", "delta us"
    );
    for (n, ca, cb, t1, t2) in &rows {
        let _ = writeln!(
            s,
            "{:<50} {:>6} {:>6} {:>10.2} {:>10.2} {:>+9.2}",
            n,
            ca,
            cb,
            t1,
            t2,
            t2 - t1
        );
    }
    if a.len() == b.len() {
        let mut d: Vec<(usize, f64)> = a
            .iter()
            .zip(b)
            .enumerate()
            .map(|(i, ((_, x), (_, y)))| (i, y - x))
            .collect();
        d.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()));
        let _ = writeln!(
            s,
            "\nlaunch by launch (the same {} launches in order), largest {} changes\n{:>6}  {:<60} {:>10} {:>10} {:>9}",
            a.len(),
            top.min(d.len()),
            "#",
            "kernel",
            "base us",
            "cand us",
            "delta us"
        );
        for &(i, dd) in d.iter().take(top) {
            let name = if a[i].0 == b[i].0 {
                a[i].0.clone()
            } else {
                format!("{} -> {}", a[i].0, b[i].0)
            };
            let _ = writeln!(
                s,
                "{:>6}  {:<60} {:>10.2} {:>10.2} {:>+9.2}",
                i, name, a[i].1, b[i].1, dd
            );
        }
    } else {
        let _ = writeln!(
            s,
            "\n({} vs {} launches: no launch-by-launch pairing, per name only)",
            a.len(),
            b.len()
        );
    }
    s
}

/// `duet bench compare` on two profiles: Ok(None) when either file is not one (the caller
/// goes on with the bench / e2e comparisons).
pub fn compare(a: &std::path::Path, b: &std::path::Path) -> anyhow::Result<Option<i32>> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).with_context(|| format!("{}: cannot read", p.display()))
    };
    let (ba, bb) = (read(a)?, read(b)?);
    match (parse(&ba), parse(&bb)) {
        (Some(x), Some(y)) => {
            print!("{}", report(&x, &y, 12));
            Ok(Some(0))
        }
        (None, None) => Ok(None),
        (Some(_), None) | (None, Some(_)) => anyhow::bail!(
            "{} and {}: one is a `duet profile` output, the other is not; compare like with like",
            a.display(),
            b.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "profiling kernels\n\
kernel                                                 dur us  DRAM rd MB  DRAM wr MB   mem %    SM %   occ %  regs  bank cfl\n\
model_rmsnorm                                           14.66        0.04        0.00     0.2     0.0    12.1    26         0\n\
\x20   SM active cycles min / avg / max 0.0k / 0.2k / 26.5k of 28.9k elapsed\n\
model_gemv1_f32                                         10.24        8.41        0.00    17.2     1.5    12.0    58        10\n\
model_rmsnorm                                           13.95        0.04        0.00     0.2     0.0    11.8    26         0\n\
per kernel name: 3 kernels, 38.9 us in all\n\
kernel   calls  total us  share\n\
model_rmsnorm   2   28.61  73.5%\n";

    #[test]
    fn reads_the_text_table_and_skips_the_detail_lines_and_the_summary() {
        let l = parse(TEXT.as_bytes()).unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1], ("model_gemv1_f32".to_string(), 10.24));
        assert_eq!(
            by_name(&l)[0],
            ("model_rmsnorm".to_string(), 2, 14.66 + 13.95)
        );
    }

    #[test]
    fn reads_the_json_forms_and_refuses_other_files() {
        let j = br#"{"kernels": [{"kernel": "a", "duration_ns": 2500.0}, {"kernel": "b", "duration_ns": 500.0}], "by_kernel": [], "total_us": 3.0}"#;
        assert_eq!(
            parse(j).unwrap(),
            vec![("a".into(), 2.5), ("b".into(), 0.5)]
        );
        let bare = br#"[{"kernel": "a", "duration_ns": 1000.0}]"#;
        assert_eq!(parse(bare).unwrap(), vec![("a".into(), 1.0)]);
        assert!(parse(br#"{"schema": "duet.bench/1", "results": []}"#).is_none());
        assert!(parse(b"hello\nworld\n").is_none());
        assert!(parse(&[0xff, 0xfe]).is_none());
    }

    #[test]
    fn pairs_launches_and_names_a_replaced_kernel() {
        let a: Launches = vec![("x".into(), 10.0), ("f32".into(), 9.5), ("y".into(), 1.0)];
        let b: Launches = vec![
            ("x".into(), 10.0),
            ("f32_split".into(), 5.5),
            ("y".into(), 1.5),
        ];
        let r = report(&a, &b, 5);
        assert!(r.contains("all kernels (3 -> 3 launches)"), "{r}");
        // The largest launch change first: launch 1, the replaced kernel.
        let lines: Vec<&str> = r.lines().collect();
        let i = lines
            .iter()
            .position(|l| l.starts_with("launch by launch"))
            .unwrap();
        assert!(lines[i + 2].contains("f32 -> f32_split"), "{r}");
        assert!(lines[i + 2].contains("-4.00"), "{r}");
        // Per name: the removed and the new kernel both listed.
        assert!(
            r.lines()
                .any(|l| l.starts_with("f32 ") && l.contains(" - ")),
            "{r}"
        );
        assert!(r.lines().any(|l| l.starts_with("f32_split")), "{r}");
        let c: Launches = vec![("x".into(), 1.0)];
        assert!(report(&a, &c, 5).contains("no launch-by-launch pairing"));
    }
}
