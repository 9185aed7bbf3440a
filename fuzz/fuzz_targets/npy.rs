//! reference::io::parse_npy on arbitrary bytes (the .npy payload reader, also used for every
//! .npz entry).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = reference::io::parse_npy(data, std::path::Path::new("fuzz.npy"), "x");
});
