//! reference::io::parse_safetensors on arbitrary bytes: must return Ok or Err, never panic,
//! never allocate more than the input justifies.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = reference::io::parse_safetensors(data, std::path::Path::new("fuzz.safetensors"));
});
