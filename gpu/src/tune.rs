//! The autotune harness (the seed's): sweep a kernel's tunable parameters, drop configurations
//! whose outputs fail the reference tolerance, rank the rest by median time, report the Pareto
//! front (time vs. worst error as % of tolerance), and persist the winner per
//! (op, shape key, arch, source hash) in a tuning cache that kernel launches read.
//!
//! The cache is one JSON file (`$DUET_TUNING_CACHE`, default `~/.cache/duet/tuning.json`),
//! written atomically. An entry whose source hash differs from the embedded kernel source is
//! stale and ignored (the kernel changed since it was tuned).

use crate::compile::{fnv1a, full_source, source};
use crate::GpuError;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where the tuning cache lives.
pub fn cache_path() -> PathBuf {
    if let Some(p) = std::env::var_os("DUET_TUNING_CACHE") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache/duet/tuning.json")
}

/// Hash of the kernel file as NVRTC compiles it (header included).
pub fn source_hash(kernel_file: &str) -> Result<String, GpuError> {
    let k = source(kernel_file)?;
    Ok(format!("{:016x}", fnv1a(full_source(&k).as_bytes())))
}

/// The cache key: `op|shape|arch`.
pub fn key(op: &str, shape_key: &str, arch: &str) -> String {
    format!("{op}|{shape_key}|{arch}")
}

/// Reads the whole cache; a missing file is an empty cache, an unreadable one an error
/// naming the file.
pub fn load_cache() -> Result<BTreeMap<String, serde_json::Value>, GpuError> {
    let p = cache_path();
    match std::fs::read(&p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(GpuError::Unsupported(format!(
            "{}: cannot read the tuning cache: {e}",
            p.display()
        ))),
        Ok(b) => serde_json::from_slice::<BTreeMap<String, serde_json::Value>>(&b).map_err(|e| {
            GpuError::Unsupported(format!(
                "{}: the tuning cache is not valid JSON ({e}); delete it to start over",
                p.display()
            ))
        }),
    }
}

/// The tuned config for this key, if present and not stale.
pub fn lookup(
    op: &str,
    kernel_file: &str,
    shape_key: &str,
    arch: &str,
) -> Option<serde_json::Value> {
    let cache = load_cache().ok()?;
    let e = cache.get(&key(op, shape_key, arch))?;
    let hash = source_hash(kernel_file).ok()?;
    if e["source_hash"].as_str() != Some(hash.as_str()) {
        return None;
    }
    Some(e["config"].clone())
}

/// Stores the winner (read-modify-write of the cache file, atomic rename).
pub fn store(
    op: &str,
    kernel_file: &str,
    shape_key: &str,
    arch: &str,
    config: serde_json::Value,
    median_us: f64,
) -> Result<PathBuf, GpuError> {
    let mut cache = load_cache()?;
    cache.insert(
        key(op, shape_key, arch),
        serde_json::json!({
            "op": op, "shape": shape_key, "arch": arch,
            "source_hash": source_hash(kernel_file)?,
            "config": config, "median_us": median_us,
        }),
    );
    let p = cache_path();
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d)
            .map_err(|e| GpuError::Unsupported(format!("{}: {e}", d.display())))?;
    }
    let bytes =
        serde_json::to_vec_pretty(&cache).map_err(|e| GpuError::Unsupported(e.to_string()))?;
    reference::io::write_atomic(&p, &bytes).map_err(|e| GpuError::Unsupported(e.to_string()))?;
    Ok(p)
}

/// One measured configuration.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Trial {
    pub config: serde_json::Value,
    pub passed: bool,
    /// Worst error over the accuracy cases as % of the tolerance (inf when a case failed).
    pub worst_pct_of_tol: f64,
    pub median_us: f64,
    pub note: Option<String>,
}

/// Configurations not dominated in (median time, worst % of tolerance), fastest first.
pub fn pareto(trials: &[Trial]) -> Vec<Trial> {
    let ok: Vec<&Trial> = trials.iter().filter(|t| t.passed).collect();
    let mut front: Vec<Trial> = ok
        .iter()
        .filter(|a| {
            !ok.iter().any(|b| {
                (b.median_us <= a.median_us && b.worst_pct_of_tol <= a.worst_pct_of_tol)
                    && (b.median_us < a.median_us || b.worst_pct_of_tol < a.worst_pct_of_tol)
            })
        })
        .map(|t| (*t).clone())
        .collect();
    front.sort_by(|a, b| a.median_us.total_cmp(&b.median_us));
    front
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(us: f64, pct: f64, passed: bool) -> Trial {
        Trial {
            config: serde_json::json!(us),
            passed,
            worst_pct_of_tol: pct,
            median_us: us,
            note: None,
        }
    }

    #[test]
    fn pareto_front_drops_dominated_and_failed_configs() {
        let v = vec![
            t(10.0, 50.0, true),
            t(8.0, 60.0, true),
            t(12.0, 10.0, true),
            t(9.0, 70.0, true),
            t(1.0, 1.0, false),
        ];
        let f = pareto(&v);
        let times: Vec<f64> = f.iter().map(|x| x.median_us).collect();
        assert_eq!(times, vec![8.0, 10.0, 12.0]);
    }

    #[test]
    fn cache_round_trip_and_stale_entries_are_ignored() {
        let d = std::env::temp_dir().join(format!("duet-tune-test-{}", std::process::id()));
        let p = d.join("tuning.json");
        // SAFETY-free: tests in this module are the only users of this variable.
        std::env::set_var("DUET_TUNING_CACHE", &p);
        let cfg = serde_json::json!({"cb_m": 32});
        store(
            "ssd_chunk_scan",
            "ssd_chunk_scan",
            "b1_l4096",
            "sm_90a",
            cfg.clone(),
            12.5,
        )
        .unwrap();
        assert_eq!(
            lookup("ssd_chunk_scan", "ssd_chunk_scan", "b1_l4096", "sm_90a"),
            Some(cfg)
        );
        assert_eq!(
            lookup("ssd_chunk_scan", "ssd_chunk_scan", "b1_l8192", "sm_90a"),
            None
        );
        // Make the entry stale: another source hash.
        let mut c = load_cache().unwrap();
        for v in c.values_mut() {
            v["source_hash"] = serde_json::json!("0000000000000000");
        }
        std::fs::write(&p, serde_json::to_vec(&c).unwrap()).unwrap();
        assert_eq!(
            lookup("ssd_chunk_scan", "ssd_chunk_scan", "b1_l4096", "sm_90a"),
            None
        );
        std::fs::write(&p, b"{not json").unwrap();
        assert!(load_cache()
            .unwrap_err()
            .to_string()
            .contains("tuning.json"));
        std::env::remove_var("DUET_TUNING_CACHE");
        let _ = std::fs::remove_dir_all(&d);
    }
}
