//! reference::io::load through a real file: format detection by magic bytes, then the
//! safetensors / npy / npz (zip) readers. The first byte picks the file extension.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::Write;

fuzz_target!(|data: &[u8]| {
    let (ext, body) = match data.split_first() {
        Some((b, rest)) => (
            ["safetensors", "npy", "npz", "bin"][(*b & 3) as usize],
            rest,
        ),
        None => ("safetensors", data),
    };
    let Ok(mut f) = tempfile::Builder::new()
        .suffix(&format!(".{ext}"))
        .tempfile()
    else {
        return;
    };
    if f.write_all(body).is_err() || f.flush().is_err() {
        return;
    }
    let _ = reference::io::load(f.path());
});
