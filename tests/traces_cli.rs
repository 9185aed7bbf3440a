//! `duet trace ...` end to end: JSON fields, report files, CI exit codes, errors without panics.

use std::path::PathBuf;
use std::process::Command;

fn fx(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join("traces")
        .join(name)
}

fn duet(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_duet"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running duet: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn p(path: &PathBuf) -> &str {
    path.to_str().unwrap_or_default()
}

#[test]
fn summary_json_lists_kernels_per_device() {
    let f = fx("nsys-2026.2.1_nsysai_mfu_2xH100_before.sqlite.gz");
    let (code, out, err) = duet(&["trace", "summary", p(&f), "--json", "--group-by", "base"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let ks = v["kernels"].as_array().cloned().unwrap_or_default();
    let flash1 = ks
        .iter()
        .find(|k| k["name"] == "flash_fwd_kernel" && k["device"] == 1)
        .cloned()
        .unwrap_or_default();
    assert_eq!(flash1["instances"], 34);
    assert_eq!(flash1["total_ns"], 136_355_595.0);
    for k in &ks {
        for field in ["name", "device", "instances", "total_ns"] {
            assert!(!k[field].is_null(), "{field} missing in {k}");
        }
    }
}

#[test]
fn diff_exit_code_reports_and_json() {
    let b = fx("nsys-2026.2.1_nsysai_mfu_2xH100_before.sqlite.gz");
    let a = fx("nsys-2026.2.1_nsysai_mfu_2xH100_after.sqlite.gz");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let html = dir.path().join("d.html");
    let md = dir.path().join("d.md");
    let (code, out, err) = duet(&[
        "trace",
        "diff",
        p(&b),
        p(&a),
        "--fail-on-regression",
        "50",
        "--html",
        p(&html),
        "--md",
        p(&md),
    ]);
    assert_eq!(code, 1, "expected CI failure exit code\n{out}\n{err}");
    assert!(err.contains("ncclDevKernel_SendRecv"), "{err}");
    assert!(out.contains("regressed"), "{out}");
    let h = std::fs::read_to_string(&html).unwrap_or_default();
    assert!(h.contains("<svg") && h.contains("ncclDevKernel_SendRecv") && h.ends_with("</html>\n"));
    assert!(std::fs::read_to_string(&md)
        .unwrap_or_default()
        .contains("| regressed |"));
    // a threshold above the worst regression passes
    let (code, _, err) = duet(&["trace", "diff", p(&b), p(&a), "--fail-on-regression", "500"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = duet(&["trace", "diff", p(&b), p(&a), "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    let r0 = &v["rows"][0];
    assert_eq!(r0["class"], "regressed");
    assert!(r0["baseline"]["total_ns"].is_number() && r0["candidate"]["total_ns"].is_number());
    assert_eq!(r0["device"], 1);
}

#[test]
fn convert_to_chrome() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = dir.path().join("t.json");
    let f = fx("kineto_hta_triton_example_A100.json.gz");
    let (code, _, err) = duet(&["trace", "convert", p(&f), "--to", "chrome", "-o", p(&out)]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap_or_default())
            .unwrap_or_default();
    assert!(v["traceEvents"].as_array().is_some_and(|a| a
        .iter()
        .any(|e| e["name"] == "triton_poi_fused_add_cos_sin_0")));
}

#[test]
fn malformed_inputs_exit_nonzero_without_panic() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let empty = dir.path().join("empty.sqlite");
    std::fs::write(&empty, b"").unwrap_or_else(|e| panic!("{e}"));
    let junk = dir.path().join("junk.json.gz");
    std::fs::write(&junk, [0x1f, 0x8b, 8, 0, 1, 2, 3]).unwrap_or_else(|e| panic!("{e}"));
    for path in [
        &empty,
        &junk,
        &dir.path().to_path_buf(),
        &dir.path().join("missing.csv"),
    ] {
        let (code, _, err) = duet(&["trace", "summary", p(path)]);
        assert_eq!(code, 2, "{}: {err}", path.display());
        assert!(err.starts_with("error:"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
