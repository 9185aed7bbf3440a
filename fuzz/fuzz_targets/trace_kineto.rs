//! traces::kineto::read (the streaming Kineto / PyTorch profiler JSON scanner) on arbitrary
//! bytes written to a temp file, then the summary.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::Write;

fuzz_target!(|data: &[u8]| {
    let Ok(mut f) = tempfile::Builder::new().suffix(".json").tempfile() else {
        return;
    };
    if f.write_all(data).is_err() || f.flush().is_err() {
        return;
    }
    let mut info = traces::SourceInfo::default();
    let mut agg = traces::summary::Aggregator::new();
    if traces::kineto::read(f.path(), false, &mut info, &mut agg, false).is_ok() {
        let _ = agg.finish(info, traces::SummaryOptions::default());
    }
});
