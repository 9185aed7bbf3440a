//! Tolerances and the mismatch report.
//!
//! Policy shared by every tolerance: a NaN in the output fails unless the reference has a NaN
//! at the same place; infinities must match in sign; every element is checked (outputs are
//! poisoned before a kernel writes them, so an unwritten element shows up here).

use reference::{DType, Tensor};
use serde::Serialize;

/// How closely an output must follow the reference.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Tolerance {
    /// Bit-identical (formats, Philox, stochastic rounding given the random bits).
    Exact,
    /// `|got - ref| <= atol + rtol * |ref|` element-wise (torch.allclose semantics).
    Close { atol: f64, rtol: f64 },
    /// Normalised mean squared error `sum (a-b)^2 / sum a^2 <= max`.
    Nmse { max: f64 },
    /// Each row (last dimension) holds the same set of values, in any order (top-k indices).
    SameSet,
}

impl Tolerance {
    /// Upstream fp32/fp16/bf16 defaults (SPEC.md: mamba / causal-conv1d tests).
    pub fn for_dtype(d: DType) -> Tolerance {
        match d {
            DType::F32 | DType::F64 => Tolerance::Close {
                atol: 1e-3,
                rtol: 3e-4,
            },
            DType::F16 => Tolerance::Close {
                atol: 1e-2,
                rtol: 5e-3,
            },
            DType::BF16 => Tolerance::Close {
                atol: 5e-2,
                rtol: 1e-2,
            },
            _ => Tolerance::Exact,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Tolerance::Exact => "exact".into(),
            Tolerance::Close { atol, rtol } => format!("atol={atol:e},rtol={rtol:e}"),
            Tolerance::Nmse { max } => format!("nmse<={max:e}"),
            Tolerance::SameSet => "same-set".into(),
        }
    }
}

/// One mismatching element.
#[derive(Clone, Debug, Serialize)]
pub struct Mismatch {
    pub index: Vec<usize>,
    pub reference: f64,
    pub got: f64,
}

/// The outcome of comparing one output tensor.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub name: String,
    pub tolerance: Tolerance,
    pub passed: bool,
    pub elements: usize,
    pub mismatches: usize,
    /// Largest error as a percentage of what the tolerance allows at that element.
    pub worst_pct_of_tol: f64,
    pub worst: Option<Mismatch>,
    pub first: Vec<Mismatch>,
    pub max_abs_err: f64,
    pub max_rel_err: f64,
    pub nmse: f64,
    /// A structural problem (shape or dtype mismatch, NaN where the reference has none).
    pub note: Option<String>,
}

impl Report {
    fn structural(name: &str, tol: Tolerance, note: String) -> Report {
        Report {
            name: name.into(),
            tolerance: tol,
            passed: false,
            elements: 0,
            mismatches: 0,
            worst_pct_of_tol: f64::INFINITY,
            worst: None,
            first: vec![],
            max_abs_err: f64::NAN,
            max_rel_err: f64::NAN,
            nmse: f64::NAN,
            note: Some(note),
        }
    }

    /// A human summary line plus the first mismatches.
    pub fn render(&self) -> String {
        let mut s = format!(
            "{}: {} ({}), {} of {} elements mismatch, max abs {:.3e}, max rel {:.3e}, nmse {:.3e}, worst {:.1}% of tolerance",
            self.name,
            if self.passed { "PASS" } else { "FAIL" },
            self.tolerance.describe(),
            self.mismatches,
            self.elements,
            self.max_abs_err,
            self.max_rel_err,
            self.nmse,
            self.worst_pct_of_tol
        );
        if let Some(n) = &self.note {
            s.push_str(&format!("\n  note: {n}"));
        }
        if let Some(w) = &self.worst {
            s.push_str(&format!(
                "\n  worst at {:?}: reference {} got {}",
                w.index, w.reference, w.got
            ));
        }
        for m in &self.first {
            s.push_str(&format!(
                "\n  mismatch at {:?}: reference {} got {}",
                m.index, m.reference, m.got
            ));
        }
        s
    }
}

/// Multi-index of a flat offset in a row-major shape.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        let n = shape[d].max(1);
        idx[d] = i % n;
        i /= n;
    }
    idx
}

const FIRST_N: usize = 8;

/// Compares `got` against `reference` under `tol`.
pub fn compare(name: &str, reference: &Tensor, got: &Tensor, tol: Tolerance) -> Report {
    if reference.shape != got.shape {
        return Report::structural(
            name,
            tol,
            format!(
                "shape {:?} differs from the reference's {:?}",
                got.shape, reference.shape
            ),
        );
    }
    if tol == Tolerance::Exact && reference.dtype() != got.dtype() {
        return Report::structural(
            name,
            tol,
            format!(
                "dtype {} differs from the reference's {}",
                got.dtype(),
                reference.dtype()
            ),
        );
    }
    let r = reference.to_f64_vec();
    let g = got.to_f64_vec();
    if tol == Tolerance::SameSet {
        return compare_sets(name, reference, &r, &g);
    }
    let mut rep = Report {
        name: name.into(),
        tolerance: tol,
        passed: true,
        elements: r.len(),
        mismatches: 0,
        worst_pct_of_tol: 0.0,
        worst: None,
        first: vec![],
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        nmse: 0.0,
        note: None,
    };
    let (mut num, mut den) = (0.0f64, 0.0f64);
    let mut worst_pct = -1.0f64;
    for (i, (&a, &b)) in r.iter().zip(&g).enumerate() {
        let (ok, pct) = element_ok(a, b, tol, reference, got, i);
        let abs = (a - b).abs();
        if abs.is_finite() {
            rep.max_abs_err = rep.max_abs_err.max(abs);
            if a != 0.0 {
                rep.max_rel_err = rep.max_rel_err.max(abs / a.abs());
            }
            num += abs * abs;
        }
        if a.is_finite() {
            den += a * a;
        }
        if pct > worst_pct {
            worst_pct = pct;
            rep.worst = Some(Mismatch {
                index: unravel(i, &reference.shape),
                reference: a,
                got: b,
            });
        }
        if !ok {
            rep.mismatches += 1;
            if rep.first.len() < FIRST_N {
                rep.first.push(Mismatch {
                    index: unravel(i, &reference.shape),
                    reference: a,
                    got: b,
                });
            }
        }
    }
    rep.worst_pct_of_tol = worst_pct.max(0.0);
    rep.nmse = if den > 0.0 {
        num / den
    } else if num == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    match tol {
        Tolerance::Nmse { max } => {
            // Element-wise NaN/Inf policy still applies; the value test is global.
            rep.passed = rep.mismatches == 0 && rep.nmse <= max;
            rep.worst_pct_of_tol = if max > 0.0 {
                100.0 * rep.nmse / max
            } else if rep.nmse == 0.0 {
                0.0
            } else {
                f64::INFINITY
            };
            if rep.nmse > max {
                rep.note = Some(format!("nmse {:.3e} exceeds {:.3e}", rep.nmse, max));
            }
        }
        _ => rep.passed = rep.mismatches == 0,
    }
    rep
}

/// Whether one element passes, and its error as % of the allowed error.
fn element_ok(a: f64, b: f64, tol: Tolerance, rt: &Tensor, gt: &Tensor, i: usize) -> (bool, f64) {
    if a.is_nan() || b.is_nan() {
        let both = a.is_nan() && b.is_nan();
        return (both, if both { 0.0 } else { f64::INFINITY });
    }
    if a.is_infinite() || b.is_infinite() {
        let same = a == b;
        return (same, if same { 0.0 } else { f64::INFINITY });
    }
    match tol {
        Tolerance::Exact => {
            let same = bits_equal(rt, gt, i).unwrap_or(a == b);
            (same, if same { 0.0 } else { f64::INFINITY })
        }
        Tolerance::Close { atol, rtol } => {
            let allowed = atol + rtol * a.abs();
            let err = (a - b).abs();
            let pct = if allowed > 0.0 {
                100.0 * err / allowed
            } else if err == 0.0 {
                0.0
            } else {
                f64::INFINITY
            };
            (err <= allowed, pct)
        }
        Tolerance::Nmse { .. } | Tolerance::SameSet => (true, 0.0),
    }
}

/// Bitwise equality for float tensors of the same dtype (so -0 != +0 under `Exact`).
fn bits_equal(a: &Tensor, b: &Tensor, i: usize) -> Option<bool> {
    use reference::Data;
    Some(match (&a.data, &b.data) {
        (Data::F32(x), Data::F32(y)) => x[i].to_bits() == y[i].to_bits(),
        (Data::F64(x), Data::F64(y)) => x[i].to_bits() == y[i].to_bits(),
        (Data::F16(x), Data::F16(y)) | (Data::BF16(x), Data::BF16(y)) => x[i] == y[i],
        _ => return None,
    })
}

fn compare_sets(name: &str, reference: &Tensor, r: &[f64], g: &[f64]) -> Report {
    let k = reference.shape.last().copied().unwrap_or(1).max(1);
    let mut rep = Report {
        name: name.into(),
        tolerance: Tolerance::SameSet,
        passed: true,
        elements: r.len(),
        mismatches: 0,
        worst_pct_of_tol: 0.0,
        worst: None,
        first: vec![],
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        nmse: 0.0,
        note: None,
    };
    for (row, (rr, gg)) in r.chunks(k).zip(g.chunks(k)).enumerate() {
        let mut a = rr.to_vec();
        let mut b = gg.to_vec();
        a.sort_by(f64::total_cmp);
        b.sort_by(f64::total_cmp);
        if a != b {
            rep.mismatches += 1;
            if rep.first.len() < FIRST_N {
                let j = (0..k).find(|&j| !b.contains(&rr[j])).unwrap_or(0);
                rep.first.push(Mismatch {
                    index: unravel(row * k + j, &reference.shape),
                    reference: rr[j],
                    got: gg[j],
                });
            }
        }
    }
    rep.passed = rep.mismatches == 0;
    if !rep.passed {
        rep.worst_pct_of_tol = f64::INFINITY;
        rep.worst = rep.first.first().cloned();
        rep.note = Some(format!("{} rows hold a different set", rep.mismatches));
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f32]) -> Tensor {
        Tensor::from_f32(&[v.len()], v.to_vec())
    }

    #[test]
    fn close_reports_worst_and_first() {
        let r = t(&[1.0, 2.0, 3.0, 4.0]);
        let g = t(&[1.0, 2.0005, 3.5, 4.0]);
        let rep = compare(
            "y",
            &r,
            &g,
            Tolerance::Close {
                atol: 1e-3,
                rtol: 0.0,
            },
        );
        assert!(!rep.passed);
        assert_eq!(rep.mismatches, 1);
        assert_eq!(rep.first[0].index, vec![2]);
        assert_eq!(rep.worst.as_ref().unwrap().index, vec![2]);
        assert!((rep.max_abs_err - 0.5).abs() < 1e-12);
        let ok = compare(
            "y",
            &r,
            &t(&[1.0, 2.0005, 3.0, 4.0]),
            Tolerance::Close {
                atol: 1e-3,
                rtol: 0.0,
            },
        );
        assert!(ok.passed && ok.worst_pct_of_tol > 40.0 && ok.worst_pct_of_tol < 60.0);
    }

    #[test]
    fn nan_and_inf_policy() {
        let tol = Tolerance::Close {
            atol: 1.0,
            rtol: 1.0,
        };
        assert!(!compare("y", &t(&[1.0]), &t(&[f32::NAN]), tol).passed);
        assert!(compare("y", &t(&[f32::NAN]), &t(&[f32::NAN]), tol).passed);
        assert!(!compare("y", &t(&[f32::INFINITY]), &t(&[f32::NEG_INFINITY]), tol).passed);
        assert!(compare("y", &t(&[f32::INFINITY]), &t(&[f32::INFINITY]), tol).passed);
        assert!(
            !compare(
                "y",
                &t(&[1e30]),
                &t(&[f32::INFINITY]),
                Tolerance::Nmse { max: 1.0 }
            )
            .passed
        );
    }

    #[test]
    fn exact_distinguishes_signed_zero_and_sets_ignore_order() {
        assert!(!compare("y", &t(&[0.0]), &t(&[-0.0]), Tolerance::Exact).passed);
        let a = Tensor::from_i32(&[2, 3], vec![1, 2, 3, 4, 5, 6]);
        let b = Tensor::from_i32(&[2, 3], vec![3, 1, 2, 6, 5, 4]);
        assert!(compare("i", &a, &b, Tolerance::SameSet).passed);
        let c = Tensor::from_i32(&[2, 3], vec![3, 1, 2, 6, 5, 7]);
        let rep = compare("i", &a, &c, Tolerance::SameSet);
        assert!(!rep.passed && rep.mismatches == 1);
    }

    #[test]
    fn shape_mismatch_fails_structurally() {
        let rep = compare("y", &t(&[1.0, 2.0]), &t(&[1.0]), Tolerance::Exact);
        assert!(!rep.passed && rep.note.unwrap().contains("shape"));
    }

    #[test]
    fn nmse_threshold() {
        let r = t(&[1.0, -1.0, 2.0, 0.5]);
        let g = t(&[1.01, -1.0, 2.0, 0.5]);
        assert!(compare("y", &r, &g, Tolerance::Nmse { max: 1e-4 }).passed);
        assert!(!compare("y", &r, &g, Tolerance::Nmse { max: 1e-6 }).passed);
    }
}
