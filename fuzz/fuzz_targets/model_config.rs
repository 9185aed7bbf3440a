//! reference::model::Config::from_json_str + validate on arbitrary text (config.json).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = reference::model::Config::from_json_str(text, "fuzz/config.json") {
        let _ = c.validate("fuzz/config.json");
        let _ = c.pattern();
    }
});
