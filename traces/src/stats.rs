//! Noise model for the diff: a two-sided Mann-Whitney U (Wilcoxon rank-sum) test on
//! per-instance durations, normal approximation with tie correction.

/// Two-sided p-value that the two samples come from the same distribution.
/// `None` when either side has fewer than 3 values.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> Option<f64> {
    let (n1, n2) = (a.len(), b.len());
    if n1 < 3 || n2 < 3 {
        return None;
    }
    let mut all: Vec<(f64, u8)> = a
        .iter()
        .map(|&v| (v, 0u8))
        .chain(b.iter().map(|&v| (v, 1u8)))
        .filter(|(v, _)| v.is_finite())
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    let mut rank_sum_a = 0.0f64;
    let mut tie_term = 0.0f64;
    let mut i = 0usize;
    while i < n {
        let mut j = i + 1;
        while j < n && all[j].0 == all[i].0 {
            j += 1;
        }
        let avg_rank = (i + 1 + j) as f64 / 2.0; // ranks i+1 ..= j
        let t = (j - i) as f64;
        if t > 1.0 {
            tie_term += t * t * t - t;
        }
        for item in &all[i..j] {
            if item.1 == 0 {
                rank_sum_a += avg_rank;
            }
        }
        i = j;
    }
    let (n1f, n2f) = (n1 as f64, n2 as f64);
    let u1 = rank_sum_a - n1f * (n1f + 1.0) / 2.0;
    let mu = n1f * n2f / 2.0;
    let nf = n1f + n2f;
    let var = n1f * n2f / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
    if var <= 0.0 {
        // every value identical on both sides
        return Some(1.0);
    }
    // continuity correction
    let z = ((u1 - mu).abs() - 0.5).max(0.0) / var.sqrt();
    Some(erfc(z / std::f64::consts::SQRT_2).clamp(0.0, 1.0))
}

/// Complementary error function (Numerical Recipes `erfcc`, |error| < 1.2e-7).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn erfc_values() {
        assert!((erfc(0.0) - 1.0).abs() < 1e-6);
        assert!((erfc(1.0) - 0.157_299_207).abs() < 1e-6);
        assert!((erfc(-1.0) - 1.842_700_79).abs() < 1e-6);
    }
    #[test]
    fn separated_samples_are_significant() {
        let a: Vec<f64> = (0..30).map(|i| 100.0 + (i % 7) as f64).collect();
        let b: Vec<f64> = (0..30).map(|i| 130.0 + (i % 5) as f64).collect();
        let p = mann_whitney(&a, &b).unwrap_or(1.0);
        assert!(p < 1e-6, "p = {p}");
    }
    #[test]
    fn same_distribution_is_not_significant() {
        let a: Vec<f64> = (0..40).map(|i| 100.0 + ((i * 7) % 13) as f64).collect();
        let b: Vec<f64> = (0..40).map(|i| 100.0 + ((i * 5 + 3) % 13) as f64).collect();
        let p = mann_whitney(&a, &b).unwrap_or(0.0);
        assert!(p > 0.2, "p = {p}");
        assert_eq!(mann_whitney(&[1.0, 1.0, 1.0], &[1.0, 1.0, 1.0]), Some(1.0));
        assert_eq!(mann_whitney(&[1.0, 2.0], &[1.0, 2.0, 3.0]), None);
    }
}

/// Percentile bootstrap confidence interval of `mean(b) - mean(a)` at level `1 - alpha`.
/// Deterministic (fixed-seed xorshift); at most 1024 values per side are resampled.
/// `None` when either side has fewer than 3 values.
pub fn bootstrap_mean_diff_ci(
    a: &[f64],
    b: &[f64],
    alpha: f64,
    resamples: usize,
) -> Option<(f64, f64)> {
    if a.len() < 3 || b.len() < 3 || resamples < 10 {
        return None;
    }
    let cap = |v: &[f64]| -> Vec<f64> {
        if v.len() <= 1024 {
            v.to_vec()
        } else {
            let step = v.len() as f64 / 1024.0;
            (0..1024).map(|i| v[(i as f64 * step) as usize]).collect()
        }
    };
    let (a, b) = (cap(a), cap(b));
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut diffs = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let mut sa = 0.0;
        for _ in 0..a.len() {
            sa += a[(next() % a.len() as u64) as usize];
        }
        let mut sb = 0.0;
        for _ in 0..b.len() {
            sb += b[(next() % b.len() as u64) as usize];
        }
        diffs.push(sb / b.len() as f64 - sa / a.len() as f64);
    }
    diffs.sort_by(|x, y| x.total_cmp(y));
    let lo_i = ((alpha / 2.0) * resamples as f64).floor() as usize;
    let hi_i = (((1.0 - alpha / 2.0) * resamples as f64).ceil() as usize).min(resamples) - 1;
    Some((diffs[lo_i.min(resamples - 1)], diffs[hi_i]))
}

#[cfg(test)]
mod boot_tests {
    use super::*;
    #[test]
    fn bootstrap_detects_tail_shift_and_not_noise() {
        // same body, candidate has a heavy tail: mean rises, median does not
        let a: Vec<f64> = (0..40).map(|i| 100.0 + (i % 5) as f64).collect();
        let mut b = a.clone();
        for v in b.iter_mut().step_by(4) {
            *v += 1000.0;
        }
        let (lo, hi) = bootstrap_mean_diff_ci(&a, &b, 0.01, 400).unwrap_or((0.0, 0.0));
        assert!(lo > 0.0 && hi > lo, "ci {lo}..{hi}");
        let c: Vec<f64> = (0..40).map(|i| 100.0 + ((i * 3) % 5) as f64).collect();
        let (lo, hi) = bootstrap_mean_diff_ci(&a, &c, 0.01, 400).unwrap_or((1.0, 1.0));
        assert!(lo <= 0.0 && hi >= 0.0, "ci {lo}..{hi}");
    }
}
