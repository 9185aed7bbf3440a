//! The whole `duet trace summary` ingest: traces::summarize on a temp file (format detection by
//! content, gzip, then the reader it picks). The first byte picks the file name's extension.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::Write;

const EXT: [&str; 8] = [
    ".sqlite",
    ".csv",
    ".json",
    ".json.gz",
    ".sqlite.gz",
    ".csv.gz",
    ".nsys-rep",
    ".txt",
];

fuzz_target!(|data: &[u8]| {
    let (ext, body) = match data.split_first() {
        Some((b, rest)) => (EXT[(*b & 7) as usize], rest),
        None => (".txt", data),
    };
    let Ok(mut f) = tempfile::Builder::new().suffix(ext).tempfile() else {
        return;
    };
    if f.write_all(body).is_err() || f.flush().is_err() {
        return;
    }
    let _ = traces::summarize(
        f.path(),
        traces::SummaryOptions::default(),
        traces::ReadOptions::default(),
    );
});
