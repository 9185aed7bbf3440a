//! The nsys SQLite path: arbitrary bytes written to a temp file and opened as an nsys export
//! (traces::nsys_sqlite::read), then the summary.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::Write;

fuzz_target!(|data: &[u8]| {
    let Ok(mut f) = tempfile::Builder::new().suffix(".sqlite").tempfile() else {
        return;
    };
    if f.write_all(data).is_err() || f.flush().is_err() {
        return;
    }
    let mut info = traces::SourceInfo::default();
    let mut agg = traces::summary::Aggregator::new();
    if traces::nsys_sqlite::read(f.path(), &mut info, &mut agg, false).is_ok() {
        let _ = agg.finish(info, traces::SummaryOptions::default());
    }
});
