//! Inputs that once crashed a fuzz target (copied from fuzz/regressions into
//! fixtures/traces/fuzz/): every reader must return Ok or Err on them, never panic.

use std::path::PathBuf;
use traces::summary::Aggregator;
use traces::SummaryOptions;

fn files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/traces/fuzz");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn fuzz_regressions_do_not_panic() {
    let files = files();
    assert!(files.len() >= 2, "fuzz regression inputs missing");
    for f in files {
        let data = std::fs::read(&f).unwrap_or_default();
        let p = std::path::Path::new("fuzz.csv");
        let mut info = traces::SourceInfo::default();
        let mut agg = Aggregator::new();
        let r: Box<dyn std::io::BufRead> = Box::new(std::io::Cursor::new(data.clone()));
        if traces::ncu::read(p, r, false, &mut info, &mut agg).is_ok() {
            let _ = agg.finish(info, SummaryOptions::default());
        }
        let mut info = traces::SourceInfo::default();
        let mut agg = Aggregator::new();
        let r: Box<dyn std::io::BufRead> = Box::new(std::io::Cursor::new(data));
        if traces::nsys_csv::read(p, r, false, &mut info, &mut agg).is_ok() {
            let s = agg.finish(info, SummaryOptions::default());
            let _ = serde_json::to_string(&s);
        }
        let _ = traces::summarize(&f, SummaryOptions::default(), Default::default());
    }
}
