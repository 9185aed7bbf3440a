//! traces::ncu::read on arbitrary bytes (an in-memory reader, no file), then the summary.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.csv");
    let mut info = traces::SourceInfo::default();
    let mut agg = traces::summary::Aggregator::new();
    let reader: Box<dyn std::io::BufRead> = Box::new(std::io::Cursor::new(data.to_vec()));
    if traces::ncu::read(path, reader, false, &mut info, &mut agg).is_ok() {
        let _ = agg.finish(info, traces::SummaryOptions::default());
    }
});
