//! The bad-input matrix (issue 9): every entry point of the `duet` CLI fed broken input.
//!
//! Each row asserts the same contract:
//! - a non-zero exit (2 for bad input) with a clear message that names the file / tensor / op;
//! - no panic (`panicked` never appears on stderr) and no huge allocation (every run happens
//!   under `ulimit -v`, so a multi-GiB allocation aborts with "memory allocation of ... failed",
//!   which the rows reject too) and no hang (`timeout`);
//! - outputs that existed before the run keep their exact bytes, and no temporary file is left
//!   next to them.
//!
//! Ops are not hard-coded: the per-op rows iterate over `duet ops --json` and take valid inputs
//! from the smallest case of the case table (`compare::cases::all()`) when the op has one, so
//! every op that lands is covered without touching this file.

use reference::{io, DType, Tensor, TensorMap};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

const BIN: &str = env!("CARGO_BIN_EXE_duet");
/// Address-space limit of every run (KiB): the binary needs well under 1 GiB for these inputs,
/// so anything that tries to reserve several GiB dies here instead of eating the machine.
const VMEM_KB: u64 = 3 << 20;
/// Wall-clock limit of every run (seconds).
const TIMEOUT_S: u32 = 60;

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// Runs `duet ARGS...` under the memory and time limits.
fn duet<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    duet_mem(args, VMEM_KB)
}

/// `duet ARGS...` with an address-space limit of `kb` KiB.
fn duet_mem<I, S>(args: I, kb: u64) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {kb}; exec timeout {TIMEOUT_S} \"$0\" \"$@\""
        ))
        .arg(BIN)
        .args(args)
        .output()
        .expect("cannot start sh / duet")
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// No panic, no allocation failure, no timeout, whatever the exit code.
fn check_no_crash(out: &Output, what: &str) -> Result<(), String> {
    let err = stderr_of(out);
    if err.contains("panicked") {
        return Err(format!("{what}: panicked:\n{err}"));
    }
    if err.contains("memory allocation of") {
        return Err(format!("{what}: huge allocation:\n{err}"));
    }
    if out.status.code() == Some(124) {
        return Err(format!("{what}: timed out after {TIMEOUT_S}s"));
    }
    if out.status.code().is_none() {
        return Err(format!(
            "{what}: killed by a signal ({:?}):\n{err}",
            out.status
        ));
    }
    Ok(())
}

/// A clean bad-input failure: exit 2, no crash, every needle on stderr. Returns stderr.
fn check_clean_error(out: &Output, what: &str, needles: &[&str]) -> Result<String, String> {
    check_no_crash(out, what)?;
    let err = stderr_of(out);
    if out.status.code() != Some(2) {
        return Err(format!(
            "{what}: expected exit 2 (bad input), got {:?}\nstdout: {}\nstderr: {err}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout)
        ));
    }
    if !(err.trim_start().starts_with("error") && err.trim().len() > 12) {
        return Err(format!(
            "{what}: stderr is not a clear error message:\n{err}"
        ));
    }
    for n in needles {
        if !err.contains(n) {
            return Err(format!("{what}: the error does not mention {n:?}:\n{err}"));
        }
    }
    Ok(err)
}

fn assert_no_crash(out: &Output, what: &str) {
    if let Err(e) = check_no_crash(out, what) {
        panic!("{e}");
    }
}

fn assert_clean_error(out: &Output, what: &str, needles: &[&str]) -> String {
    check_clean_error(out, what, needles).unwrap_or_else(|e| panic!("{e}"))
}

/// Every row of a sweep runs; the test fails at the end listing every failed row.
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    fn add<T>(&mut self, r: Result<T, String>) {
        if let Err(e) = r {
            self.0.push(e);
        }
    }
    fn assert_none(self, what: &str) {
        assert!(
            self.0.is_empty(),
            "{what}: {} failing row(s):\n\n{}",
            self.0.len(),
            self.0.join("\n----\n")
        );
    }
}

/// An output file that exists before a run, with bytes the run must not change.
struct Keep {
    path: PathBuf,
    bytes: Vec<u8>,
}

impl Keep {
    fn new(dir: &Path, name: &str) -> Keep {
        let path = dir.join(name);
        let bytes = format!("precious bytes of {name}, not a tensor file").into_bytes();
        std::fs::write(&path, &bytes).unwrap();
        Keep { path, bytes }
    }
    fn arg(&self) -> &OsStr {
        self.path.as_os_str()
    }
    fn assert_unchanged(&self, what: &str) {
        self.check_unchanged(what).unwrap_or_else(|e| panic!("{e}"));
    }
    fn check_unchanged(&self, what: &str) -> Result<(), String> {
        let now = std::fs::read(&self.path).unwrap_or_default();
        if now != self.bytes {
            // Restore it so the next row starts from the same state.
            std::fs::write(&self.path, &self.bytes).unwrap();
            return Err(format!(
                "{what}: the existing output {} was modified by a failing run",
                self.path.display()
            ));
        }
        let dir = self.path.parent().unwrap();
        let stray: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        if !stray.is_empty() {
            return Err(format!("{what}: temporary files left behind: {stray:?}"));
        }
        Ok(())
    }
}

fn f32_tensor(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 250.0 - 1.9
        })
        .collect();
    Tensor::from_f32(shape, v)
}

fn save(dir: &Path, name: &str, m: &TensorMap) -> PathBuf {
    let p = dir.join(name);
    io::save(&p, m).unwrap();
    p
}

/// The raw bytes of a safetensors file with the given JSON header and data section.
fn raw_safetensors(header: &[u8], data: &[u8]) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header);
    b.extend_from_slice(data);
    b
}

/// The raw bytes of a .npy file with the given header dict and data.
fn raw_npy(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    b.extend_from_slice(dict.as_bytes());
    b.extend_from_slice(data);
    b
}

// ---------------------------------------------------------------------------------------------
// Ops, from `duet ops --json`
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Arg {
    name: String,
    dtypes: String,
    optional: bool,
}

#[derive(Clone, Debug)]
struct OpInfo {
    name: String,
    inputs: Vec<Arg>,
    /// (name, kind, default)
    params: Vec<(String, Value, Option<String>)>,
}

fn ops() -> &'static [OpInfo] {
    static OPS: OnceLock<Vec<OpInfo>> = OnceLock::new();
    OPS.get_or_init(|| {
        let out = duet(["ops", "--json"]);
        assert!(
            out.status.success(),
            "duet ops --json failed: {}",
            stderr_of(&out)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("duet ops --json is not JSON");
        let args = |a: &Value| -> Vec<Arg> {
            a.as_array()
                .unwrap()
                .iter()
                .map(|x| Arg {
                    name: x["name"].as_str().unwrap().to_string(),
                    dtypes: x["dtypes"].as_str().unwrap_or("").to_string(),
                    optional: x["optional"].as_bool().unwrap_or(false),
                })
                .collect()
        };
        v.as_array()
            .expect("duet ops --json is not a list")
            .iter()
            .map(|o| OpInfo {
                name: o["name"].as_str().unwrap().to_string(),
                inputs: args(&o["inputs"]),
                params: o["params"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        (
                            p["name"].as_str().unwrap().to_string(),
                            p["kind"].clone(),
                            p["default"].as_str().map(String::from),
                        )
                    })
                    .collect(),
            })
            .collect()
    })
}

fn op(name: &str) -> Option<&'static OpInfo> {
    ops().iter().find(|o| o.name == name)
}

/// The first op that has at least one required input (for the file-level rows, where the op
/// only has to exist).
fn any_op() -> &'static OpInfo {
    ops()
        .iter()
        .find(|o| o.inputs.iter().any(|a| !a.optional))
        .expect("no op with a required input in `duet ops --json`")
}

/// Valid inputs and params of `op` from its smallest case, when the case table has one.
fn valid_case(op: &str) -> Option<(TensorMap, Vec<(String, String)>)> {
    let case = compare::cases::all()
        .into_iter()
        .filter(|c| c.op() == op)
        .min_by_key(|c| c.bytes())?;
    Some((case.inputs(1), case.params()))
}

fn set_args(params: &[(String, String)]) -> Vec<OsString> {
    params
        .iter()
        .flat_map(|(k, v)| ["--set".into(), format!("{k}={v}").into()])
        .collect()
}

/// `duet run OP --in IN --out OUT [--set ..]` as an argument vector.
fn run_args(
    op: &str,
    inputs: &[&OsStr],
    out: &OsStr,
    params: &[(String, String)],
) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["run".into(), op.into()];
    for i in inputs {
        a.push("--in".into());
        a.push((*i).to_owned());
    }
    a.push("--out".into());
    a.push(out.to_owned());
    a.extend(set_args(params));
    a
}

/// A dtype of the other class than every accepted one (float inputs get i32, integer inputs
/// get f32), or None when the list accepts both classes (or cannot be read).
fn wrong_dtype(accepted: &str) -> Option<DType> {
    let acc: Vec<DType> = accepted
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(DType::parse)
        .collect();
    if acc.is_empty() {
        return None;
    }
    let any_float = acc.iter().any(|d| d.is_float());
    let any_int = acc.iter().any(|d| !d.is_float());
    match (any_float, any_int) {
        (true, false) => Some(DType::I32),
        (false, true) => Some(DType::F32),
        _ => None,
    }
}

/// One generic tensor per input name (for rows where the shapes do not matter because the
/// run must fail before the op looks at them).
fn generic_inputs(o: &OpInfo, which: impl Fn(&Arg) -> bool) -> TensorMap {
    o.inputs
        .iter()
        .filter(|a| which(a))
        .enumerate()
        .map(|(i, a)| (a.name.clone(), f32_tensor(&[2, 32], i as u32)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Tensor files (duet run --in, duet compare A B)
// ---------------------------------------------------------------------------------------------

/// Feeds `bytes` (written to `name`) to `duet run` and `duet compare` (as either file) and
/// asserts a clean error naming the file plus `needles`.
fn bad_tensor_file(name: &str, bytes: &[u8], needles: &[&str]) {
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join(name);
    std::fs::write(&bad, bytes).unwrap();
    let good = {
        let mut m = TensorMap::new();
        m.insert("x".into(), f32_tensor(&[2, 3], 7));
        save(d.path(), "good.safetensors", &m)
    };
    let keep = Keep::new(d.path(), "out.safetensors");
    let mut all: Vec<&str> = vec![name];
    all.extend_from_slice(needles);
    let o = any_op();
    let out = duet(run_args(&o.name, &[bad.as_os_str()], keep.arg(), &[]));
    assert_clean_error(&out, &format!("run --in {name}"), &all);
    keep.assert_unchanged(&format!("run --in {name}"));
    let out = duet([OsStr::new("compare"), bad.as_os_str(), good.as_os_str()]);
    assert_clean_error(&out, &format!("compare {name} good"), &all);
    let out = duet([OsStr::new("compare"), good.as_os_str(), bad.as_os_str()]);
    assert_clean_error(&out, &format!("compare good {name}"), &all);
}

fn good_safetensors_bytes() -> Vec<u8> {
    let mut m = TensorMap::new();
    m.insert("logits".into(), f32_tensor(&[4, 8], 1));
    m.insert("bias".into(), f32_tensor(&[8], 2));
    io::safetensors_bytes(&m, &BTreeMap::new())
}

#[test]
fn tensor_file_empty() {
    bad_tensor_file("empty.safetensors", b"", &["empty"]);
    bad_tensor_file("empty.npy", b"", &["empty"]);
    bad_tensor_file("empty.npz", b"", &["empty"]);
}

#[test]
fn tensor_file_truncated_data() {
    let b = good_safetensors_bytes();
    bad_tensor_file(
        "cut.safetensors",
        &b[..b.len() - 5],
        &["tensor '", "truncated"],
    );
}

#[test]
fn tensor_file_truncated_header() {
    let b = good_safetensors_bytes();
    bad_tensor_file(
        "cuthdr.safetensors",
        &b[..20],
        &["header length", "exceeds"],
    );
    bad_tensor_file("tiny.safetensors", &b[..5], &["truncated"]);
}

#[test]
fn tensor_file_wrong_magic() {
    bad_tensor_file(
        "text.safetensors",
        b"this is a text file, not tensors\n",
        &["safetensors"],
    );
    // A .npy whose magic is wrong: named as such (not as a safetensors problem).
    let good = raw_npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
        &[0, 0, 128, 63, 0, 0, 0, 64],
    );
    let mut b = good.clone();
    b[1] = b'X';
    bad_tensor_file("badmagic.npy", &b, &[]);
    // Zip magic, then garbage.
    bad_tensor_file(
        "garbage.npz",
        b"PK\x03\x04garbage garbage garbage",
        &["zip"],
    );
}

#[test]
fn tensor_file_truncated_npy_and_npz() {
    let npy = raw_npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        &[0u8; 24].map(|_| 0x3f),
    );
    bad_tensor_file("cut.npy", &npy[..npy.len() - 3], &["truncated"]);
    bad_tensor_file("cuthdr.npy", &npy[..30], &["truncated"]);
    // An .npz cut in the middle: the zip directory is gone.
    let d = tempfile::tempdir().unwrap();
    let mut m = TensorMap::new();
    m.insert("x".into(), f32_tensor(&[4, 4], 3));
    let p = save(d.path(), "a.npz", &m);
    let z = std::fs::read(p).unwrap();
    bad_tensor_file("cut.npz", &z[..z.len() / 2], &["zip"]);
}

#[test]
fn tensor_file_wrong_dtype_in_header() {
    let h = br#"{"x":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}"#;
    bad_tensor_file(
        "f8.safetensors",
        &raw_safetensors(h, &[1, 2]),
        &["'x'", "unsupported dtype"],
    );
    let h = br#"{"x":{"dtype":7,"shape":[2],"data_offsets":[0,8]}}"#;
    bad_tensor_file(
        "dt7.safetensors",
        &raw_safetensors(h, &[1; 8]),
        &["'x'", "dtype"],
    );
    let n = raw_npy(
        "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }",
        &[0; 8],
    );
    bad_tensor_file("complex.npy", &n, &["unsupported numpy dtype"]);
    // Bool bytes other than 0/1.
    let h = br#"{"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}"#;
    bad_tensor_file(
        "bool.safetensors",
        &raw_safetensors(h, &[1, 7]),
        &["'m'", "bool"],
    );
}

#[test]
fn tensor_file_wrong_shape_in_header() {
    // Shape and data_offsets disagree.
    let h = br#"{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#;
    bad_tensor_file(
        "short.safetensors",
        &raw_safetensors(h, &[1; 8]),
        &["'x'", "needs 12 bytes"],
    );
    let h = br#"{"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#;
    bad_tensor_file(
        "neg.safetensors",
        &raw_safetensors(h, &[1; 4]),
        &["'x'", "shape"],
    );
    let h = br#"{"x":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}"#;
    bad_tensor_file(
        "offs.safetensors",
        &raw_safetensors(h, &[1; 4]),
        &["'x'", "data_offsets"],
    );
    let n = raw_npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }",
        &[0; 8],
    );
    bad_tensor_file("shape.npy", &n, &["shape"]);
}

#[test]
fn tensor_file_absurd_dimensions() {
    // A header claiming 2^60 elements: rejected before anything is allocated.
    let h = br#"{"x":{"dtype":"F32","shape":[1152921504606846976],"data_offsets":[0,4]}}"#;
    bad_tensor_file(
        "huge.safetensors",
        &raw_safetensors(h, &[1; 4]),
        &["'x'", "1152921504606846976"],
    );
    let h = br#"{"x":{"dtype":"F32","shape":[1073741824,1073741824,1024],"data_offsets":[0,4]}}"#;
    bad_tensor_file(
        "huge3.safetensors",
        &raw_safetensors(h, &[1; 4]),
        &["'x'", "absurdly large"],
    );
    // 2^60 elements in a .npy header.
    let n = raw_npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1152921504606846976,), }",
        &[0; 4],
    );
    bad_tensor_file("huge.npy", &n, &["1152921504606846976"]);
    // A header length of 2^63.
    let mut b = (1u64 << 63).to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    bad_tensor_file("hlen.safetensors", &b, &["header length"]);
    // Shape fits, but the data would need 2^40 bytes (allocation must not be attempted).
    let h = br#"{"x":{"dtype":"F64","shape":[137438953472],"data_offsets":[0,8]}}"#;
    bad_tensor_file(
        "big.safetensors",
        &raw_safetensors(h, &[1; 8]),
        &["'x'", "needs"],
    );
}

#[test]
fn tensor_file_npz_entry_claiming_huge_size() {
    // A stored zip entry whose local and central headers claim 2^40 - 1 bytes uncompressed: the
    // reader must not reserve that much memory up front.
    let d = tempfile::tempdir().unwrap();
    let mut m = TensorMap::new();
    m.insert("x".into(), f32_tensor(&[4], 3));
    let p = save(d.path(), "a.npz", &m);
    let mut z = std::fs::read(p).unwrap();
    let claimed: u32 = 0xF000_0000;
    // Patch the uncompressed size in every local (PK\3\4, offset 22) and central (PK\1\2,
    // offset 24) header.
    let mut i = 0;
    while i + 4 <= z.len() {
        if z[i..].starts_with(b"PK\x03\x04") && i + 26 <= z.len() {
            z[i + 22..i + 26].copy_from_slice(&claimed.to_le_bytes());
        }
        if z[i..].starts_with(b"PK\x01\x02") && i + 28 <= z.len() {
            z[i + 24..i + 28].copy_from_slice(&claimed.to_le_bytes());
        }
        i += 1;
    }
    let p = d.path().join("bigentry.npz");
    std::fs::write(&p, &z).unwrap();
    // 512 MiB of address space: enough for duet, not for a 4 GiB (or 1 GiB) reservation.
    let out = duet_mem(
        [OsStr::new("compare"), p.as_os_str(), p.as_os_str()],
        512 << 10,
    );
    check_no_crash(&out, "npz entry claiming 3.75 GiB").unwrap_or_else(|e| panic!("{e}"));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr_of(&out)
    );
    assert!(
        matches!(out.status.code(), Some(0) | Some(2)),
        "npz entry claiming 3.75 GiB: {:?}\n{all}",
        out.status
    );
    if out.status.code() == Some(2) {
        assert!(all.contains("bigentry.npz"), "{all}");
    }
}

#[test]
fn tensor_file_non_utf8_tensor_name() {
    // A raw 0xff byte inside the JSON key.
    let h = b"{\"\xffx\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    bad_tensor_file("name.safetensors", &raw_safetensors(h, &[1; 4]), &["JSON"]);
    // Invalid UTF-8 inside an npz entry name is read lossily or rejected, never a panic.
    let mut m = TensorMap::new();
    m.insert("ab".into(), f32_tensor(&[2], 3));
    let d = tempfile::tempdir().unwrap();
    let p = save(d.path(), "a.npz", &m);
    let mut z = std::fs::read(&p).unwrap();
    let pos: Vec<usize> = z
        .windows(6)
        .enumerate()
        .filter(|(_, w)| w == b"ab.npy")
        .map(|(i, _)| i)
        .collect();
    for i in pos {
        z[i] = 0xff;
    }
    std::fs::write(&p, &z).unwrap();
    let out = duet([OsStr::new("compare"), p.as_os_str(), p.as_os_str()]);
    assert_no_crash(&out, "npz with a non-UTF-8 entry name");
}

#[test]
fn tensor_file_nan_inf_values_are_data_not_errors() {
    // NaN and Inf are values, not format errors: files load, and `compare` reports them
    // (a NaN where the reference has none fails with exit 1; an Inf of the wrong sign too).
    let d = tempfile::tempdir().unwrap();
    let mut a = TensorMap::new();
    a.insert(
        "x".into(),
        Tensor::from_f32(&[4], vec![1.0, 2.0, f32::INFINITY, 4.0]),
    );
    let mut b = a.clone();
    b.insert(
        "x".into(),
        Tensor::from_f32(&[4], vec![1.0, f32::NAN, f32::INFINITY, 4.0]),
    );
    let pa = save(d.path(), "a.safetensors", &a);
    let pb = save(d.path(), "b.safetensors", &b);
    let out = duet([OsStr::new("compare"), pa.as_os_str(), pa.as_os_str()]);
    assert_no_crash(&out, "compare inf with itself");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = duet([OsStr::new("compare"), pa.as_os_str(), pb.as_os_str()]);
    assert_no_crash(&out, "compare nan vs finite");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a NaN where the reference has none must fail"
    );
    b.insert(
        "x".into(),
        Tensor::from_f32(&[4], vec![1.0, 2.0, f32::NEG_INFINITY, 4.0]),
    );
    let pb = save(d.path(), "b.safetensors", &b);
    let out = duet([OsStr::new("compare"), pa.as_os_str(), pb.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "inf vs -inf must fail");
}

#[test]
fn tensor_file_is_a_directory() {
    let d = tempfile::tempdir().unwrap();
    let sub = d.path().join("dir.safetensors");
    std::fs::create_dir(&sub).unwrap();
    let keep = Keep::new(d.path(), "out.safetensors");
    let out = duet(run_args(
        &any_op().name,
        &[sub.as_os_str()],
        keep.arg(),
        &[],
    ));
    assert_clean_error(&out, "run --in DIR", &["dir.safetensors", "directory"]);
    keep.assert_unchanged("run --in DIR");
    let out = duet([OsStr::new("compare"), sub.as_os_str(), sub.as_os_str()]);
    assert_clean_error(&out, "compare DIR DIR", &["dir.safetensors", "directory"]);
}

#[test]
fn tensor_file_missing() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("nope.safetensors");
    let keep = Keep::new(d.path(), "out.safetensors");
    let out = duet(run_args(&any_op().name, &[p.as_os_str()], keep.arg(), &[]));
    assert_clean_error(&out, "run --in missing", &["nope.safetensors"]);
    keep.assert_unchanged("run --in missing");
}

#[test]
fn tensor_file_non_utf8_paths() {
    let d = tempfile::tempdir().unwrap();
    let mut name = b"bad-\xff-name".to_vec();
    name.extend_from_slice(b".npy");
    let p = d.path().join(OsString::from_vec(name));
    let mut m = TensorMap::new();
    m.insert("x".into(), f32_tensor(&[3], 1));
    std::fs::write(&p, io::npy_bytes(&m["x"]).unwrap()).unwrap();
    // `compare` takes paths: a non-UTF-8 file name works (both sides are the same file).
    let out = duet([OsStr::new("compare"), p.as_os_str(), p.as_os_str()]);
    assert_no_crash(&out, "compare non-UTF-8 path");
    assert_eq!(
        out.status.code(),
        Some(0),
        "compare of a non-UTF-8 path with itself: {}",
        stderr_of(&out)
    );
    // A missing non-UTF-8 path: a clean error naming it (lossily).
    let missing = d
        .path()
        .join(OsString::from_vec(b"gone-\xfe.safetensors".to_vec()));
    let out = duet([OsStr::new("compare"), missing.as_os_str(), p.as_os_str()]);
    assert_clean_error(&out, "compare missing non-UTF-8 path", &["gone-"]);
    // `run --in` takes NAME=FILE strings: a non-UTF-8 argument is refused by the parser,
    // cleanly, and the existing output survives.
    let keep = Keep::new(d.path(), "out.safetensors");
    let out = duet(run_args(&any_op().name, &[p.as_os_str()], keep.arg(), &[]));
    assert_clean_error(&out, "run --in non-UTF-8", &["UTF-8"]);
    keep.assert_unchanged("run --in non-UTF-8");
}

// ---------------------------------------------------------------------------------------------
// Output paths
// ---------------------------------------------------------------------------------------------

/// A run that succeeds (when the op has a case) given a writable output.
fn runnable() -> Option<(&'static OpInfo, TensorMap, Vec<(String, String)>)> {
    ops().iter().find_map(|o| {
        let (inputs, params) = valid_case(&o.name)?;
        Some((o, inputs, params))
    })
}

#[test]
fn output_path_unwritable() {
    let Some((o, inputs, params)) = runnable() else {
        panic!("no op with a case in the case table");
    };
    let d = tempfile::tempdir().unwrap();
    let inp = save(d.path(), "in.safetensors", &inputs);
    // The sanity row: the same run with a good output path succeeds.
    let good = d.path().join("good.safetensors");
    let out = duet(run_args(
        &o.name,
        &[inp.as_os_str()],
        good.as_os_str(),
        &params,
    ));
    assert_no_crash(&out, "good run");
    assert!(
        out.status.success(),
        "the base run of {} fails: {}",
        o.name,
        stderr_of(&out)
    );

    // Output is a directory.
    let sub = d.path().join("outdir.safetensors");
    std::fs::create_dir(&sub).unwrap();
    let out = duet(run_args(
        &o.name,
        &[inp.as_os_str()],
        sub.as_os_str(),
        &params,
    ));
    assert_clean_error(&out, "--out DIR", &["outdir.safetensors", "directory"]);
    // Parent folder missing.
    let p = d.path().join("no/such/dir/out.safetensors");
    let out = duet(run_args(
        &o.name,
        &[inp.as_os_str()],
        p.as_os_str(),
        &params,
    ));
    assert_clean_error(
        &out,
        "--out in a missing folder",
        &["out.safetensors", "cannot write"],
    );
    // Parent is a regular file.
    let file = Keep::new(d.path(), "plainfile");
    let p = file.path.join("out.safetensors");
    let out = duet(run_args(
        &o.name,
        &[inp.as_os_str()],
        p.as_os_str(),
        &params,
    ));
    assert_clean_error(
        &out,
        "--out under a file",
        &["out.safetensors", "cannot write"],
    );
    file.assert_unchanged("--out under a file");
    // A read-only file system (root ignores permission bits, /proc does not take new files).
    let p = Path::new("/proc/duet-cannot-write-here.safetensors");
    let out = duet(run_args(
        &o.name,
        &[inp.as_os_str()],
        p.as_os_str(),
        &params,
    ));
    assert_clean_error(
        &out,
        "--out on /proc",
        &["duet-cannot-write-here", "cannot write"],
    );
    // Unknown extension: refused before anything is written; an existing file survives.
    let keep = Keep::new(d.path(), "out.txt");
    let out = duet(run_args(&o.name, &[inp.as_os_str()], keep.arg(), &params));
    assert_clean_error(&out, "--out .txt", &["out.txt", "extension"]);
    keep.assert_unchanged("--out .txt");
    // No file name at all.
    let out = duet(run_args(
        &o.name,
        &[inp.as_os_str()],
        OsStr::new("/"),
        &params,
    ));
    assert_clean_error(&out, "--out /", &[]);
}

#[test]
fn output_npy_with_several_outputs_keeps_existing_file() {
    let multi = ops().iter().find_map(|o| {
        let def = reference::ops::find(&o.name).ok()?;
        if def.outputs.len() < 2 {
            return None;
        }
        let (inputs, params) = valid_case(&o.name)?;
        Some((o, inputs, params))
    });
    let Some((o, inputs, params)) = multi else {
        panic!("no op with two outputs and a case");
    };
    let d = tempfile::tempdir().unwrap();
    let inp = save(d.path(), "in.safetensors", &inputs);
    let keep = Keep::new(d.path(), "out.npy");
    let out = duet(run_args(&o.name, &[inp.as_os_str()], keep.arg(), &params));
    assert_clean_error(
        &out,
        "--out .npy for several outputs",
        &["out.npy", "one tensor"],
    );
    keep.assert_unchanged("--out .npy for several outputs");
}

#[test]
fn output_non_utf8_file_name_is_written() {
    let Some((o, inputs, params)) = runnable() else {
        panic!("no op with a case in the case table");
    };
    let d = tempfile::tempdir().unwrap();
    let inp = save(d.path(), "in.safetensors", &inputs);
    let p = d
        .path()
        .join(OsString::from_vec(b"out-\xff.safetensors".to_vec()));
    let out = duet(run_args(
        &o.name,
        &[inp.as_os_str()],
        p.as_os_str(),
        &params,
    ));
    assert_no_crash(&out, "--out non-UTF-8");
    assert!(
        out.status.success(),
        "--out with a non-UTF-8 file name fails: {}",
        stderr_of(&out)
    );
    assert!(io::load(&p).is_ok());
}

// ---------------------------------------------------------------------------------------------
// CLI arguments
// ---------------------------------------------------------------------------------------------

#[test]
fn cli_unknown_op_and_bad_sets() {
    let d = tempfile::tempdir().unwrap();
    let o = any_op();
    let inp = save(
        d.path(),
        "in.safetensors",
        &generic_inputs(o, |a| !a.optional),
    );
    let keep = Keep::new(d.path(), "out.safetensors");
    let out = duet(run_args("no_such_op", &[inp.as_os_str()], keep.arg(), &[]));
    assert_clean_error(&out, "unknown op", &["no_such_op", "duet ops"]);
    let mut a = run_args(&o.name, &[inp.as_os_str()], keep.arg(), &[]);
    a.extend(["--set".into(), "novalue".into()]);
    let out = duet(&a);
    assert_clean_error(&out, "--set without =", &["novalue", "KEY=VALUE"]);
    let a = run_args(
        &o.name,
        &[inp.as_os_str()],
        keep.arg(),
        &[("no_such_param".into(), "1".into())],
    );
    let out = duet(&a);
    assert_clean_error(&out, "--set unknown", &["no_such_param", "unknown param"]);
    let a = run_args(
        &o.name,
        &[inp.as_os_str()],
        keep.arg(),
        &[("=1".into(), String::new())],
    );
    let out = duet(&a);
    assert_clean_error(&out, "--set =1", &["KEY=VALUE"]);
    keep.assert_unchanged("bad --set");
    // Clap-level errors: exit 2, usage, no panic.
    for args in [
        vec!["run"],
        vec!["run", &o.name],
        vec!["run", &o.name, "--in"],
        vec!["compare", "only-one"],
        vec!["compare", "a", "b", "--atol", "x"],
        vec!["check", "--backend", "tpu"],
        vec!["ops", "--bogus"],
        vec!["frobnicate"],
    ] {
        let out = duet(&args);
        assert_clean_error(&out, &format!("{args:?}"), &[]);
    }
}

#[test]
fn cli_in_rename_and_duplicates() {
    let d = tempfile::tempdir().unwrap();
    let o = any_op();
    let mut two = TensorMap::new();
    two.insert("a".into(), f32_tensor(&[2], 1));
    two.insert("b".into(), f32_tensor(&[2], 2));
    let p = save(d.path(), "two.safetensors", &two);
    let keep = Keep::new(d.path(), "out.safetensors");
    let spec = OsString::from(format!("x={}", p.display()));
    let out = duet(run_args(&o.name, &[&spec], keep.arg(), &[]));
    assert_clean_error(
        &out,
        "NAME=FILE with two tensors",
        &["two.safetensors", "renames a single tensor"],
    );
    let out = duet(run_args(
        &o.name,
        &[p.as_os_str(), p.as_os_str()],
        keep.arg(),
        &[],
    ));
    assert_clean_error(&out, "same file twice", &["given twice"]);
    keep.assert_unchanged("--in rename/duplicates");
}

#[test]
fn cli_compare_bad_tolerances() {
    let d = tempfile::tempdir().unwrap();
    let mut m = TensorMap::new();
    m.insert("x".into(), f32_tensor(&[8], 1));
    let p = save(d.path(), "a.safetensors", &m);
    for (flag, v) in [
        ("--atol", "nan"),
        ("--rtol", "-1"),
        ("--nmse", "NaN"),
        ("--atol", "inf"),
        ("--nmse", "-0.5"),
    ] {
        let arg = format!("{flag}={v}");
        let out = duet([
            OsStr::new("compare"),
            p.as_os_str(),
            p.as_os_str(),
            OsStr::new(&arg),
        ]);
        assert_clean_error(&out, &format!("compare {flag} {v}"), &[flag]);
    }
}

#[test]
fn cli_compare_two_npy_files_with_different_stems() {
    // Two .npy files hold one tensor each, named after their stems: comparing mine.npy with
    // ref.npy compares those two tensors (and does not report both as missing).
    let d = tempfile::tempdir().unwrap();
    let t = f32_tensor(&[5], 4);
    let a = d.path().join("ref.npy");
    let b = d.path().join("mine.npy");
    std::fs::write(&a, io::npy_bytes(&t).unwrap()).unwrap();
    std::fs::write(&b, io::npy_bytes(&t).unwrap()).unwrap();
    let out = duet([OsStr::new("compare"), a.as_os_str(), b.as_os_str()]);
    assert_no_crash(&out, "compare ref.npy mine.npy");
    assert_eq!(
        out.status.code(),
        Some(0),
        "identical tensors in ref.npy / mine.npy do not compare equal:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn cli_check_bad_twin_spec() {
    // An unknown operand form, an unknown product, a part without '=': each named, exit 2.
    for (spec, needles) in [
        ("m=tf32", &["--twin", "tf32", "f16x2"][..]),
        ("q=bf16", &["--twin", "\"q\"", "m, s, xw"][..]),
        ("fast", &["--twin", "NAME=FORM", "kernel"][..]),
    ] {
        let out = duet(["check", "--op", "^philox/", "--twin", spec]);
        assert_clean_error(&out, &format!("check --twin {spec}"), needles);
    }
    // A good spec with --op selecting no bf16 ssd_chunk_scan row: said, not silently empty.
    let out = duet(["check", "--op", "^philox/", "--twin", "kernel"]);
    assert_clean_error(
        &out,
        "check --twin on philox",
        &["--twin", "bf16 rows", "^philox/"],
    );
}

#[test]
fn cli_check_bad_regex_goldens_and_corrupt_golden() {
    let out = duet(["check", "--op", "(unclosed"]);
    assert_clean_error(&out, "check --op (", &["(unclosed", "regex"]);
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nogoldens");
    let out = duet([
        OsStr::new("check"),
        OsStr::new("--goldens"),
        missing.as_os_str(),
        OsStr::new("--op"),
        OsStr::new("^$"),
    ]);
    assert_clean_error(&out, "check --goldens missing", &["nogoldens"]);
    // A folder with a corrupt golden: the row fails naming the file; exit 1; no panic.
    let g = d.path().join("goldens");
    std::fs::create_dir(&g).unwrap();
    let b = good_safetensors_bytes();
    std::fs::write(g.join("zz_corrupt-golden.safetensors"), &b[..b.len() - 7]).unwrap();
    let out = duet([
        OsStr::new("check"),
        OsStr::new("--goldens"),
        g.as_os_str(),
        OsStr::new("--op"),
        OsStr::new("zz_corrupt"),
    ]);
    assert_no_crash(&out, "check corrupt golden");
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr_of(&out)
    );
    assert!(
        all.contains("zz_corrupt-golden"),
        "the report does not name the corrupt golden:\n{all}"
    );
    // A golden that is fine as a file but has no 'op' metadata.
    let mut m = TensorMap::new();
    m.insert("x".into(), f32_tensor(&[2], 1));
    io::save(&g.join("zz_noop.safetensors"), &m).unwrap();
    let out = duet([
        OsStr::new("check"),
        OsStr::new("--goldens"),
        g.as_os_str(),
        OsStr::new("--op"),
        OsStr::new("zz_noop"),
    ]);
    assert_no_crash(&out, "check golden without metadata");
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
}

// ---------------------------------------------------------------------------------------------
// Every op of `duet ops --json`
// ---------------------------------------------------------------------------------------------

#[test]
fn ops_list_is_not_empty() {
    assert!(!ops().is_empty(), "duet ops --json lists no op");
    for o in ops() {
        assert!(!o.name.is_empty());
    }
}

#[test]
fn every_op_missing_input() {
    let d = tempfile::tempdir().unwrap();
    let keep = Keep::new(d.path(), "out.safetensors");
    let mut f = Findings::default();
    for o in ops() {
        for miss in o.inputs.iter().filter(|a| !a.optional) {
            let m = generic_inputs(o, |a| a.name != miss.name);
            let what = format!("{}: without '{}'", o.name, miss.name);
            let out = if m.is_empty() {
                // Nothing else to pass: an unrelated tensor, dropped by --ignore-extra.
                let mut x = TensorMap::new();
                x.insert("unrelated".into(), f32_tensor(&[2], 0));
                let p = save(d.path(), "in.safetensors", &x);
                let mut a = run_args(&o.name, &[p.as_os_str()], keep.arg(), &[]);
                a.push("--ignore-extra".into());
                duet(&a)
            } else {
                let p = save(d.path(), "in.safetensors", &m);
                duet(run_args(&o.name, &[p.as_os_str()], keep.arg(), &[]))
            };
            let quoted = format!("'{}'", miss.name);
            f.add(check_clean_error(
                &out,
                &what,
                &[&o.name, &quoted, "missing input"],
            ));
            f.add(keep.check_unchanged(&what));
        }
    }
    f.assert_none("missing inputs");
}

#[test]
fn every_op_unknown_input() {
    let d = tempfile::tempdir().unwrap();
    let keep = Keep::new(d.path(), "out.safetensors");
    let mut f = Findings::default();
    for o in ops() {
        let mut m = generic_inputs(o, |a| !a.optional);
        m.insert("not_an_input_of_any_op".into(), f32_tensor(&[2], 9));
        let p = save(d.path(), "in.safetensors", &m);
        let out = duet(run_args(&o.name, &[p.as_os_str()], keep.arg(), &[]));
        let what = format!("{}: unknown input", o.name);
        f.add(check_clean_error(
            &out,
            &what,
            &[&o.name, "not_an_input_of_any_op"],
        ));
        f.add(keep.check_unchanged(&what));
    }
    f.assert_none("unknown inputs");
}

#[test]
fn every_op_truncated_input_file() {
    let d = tempfile::tempdir().unwrap();
    let keep = Keep::new(d.path(), "out.safetensors");
    let mut f = Findings::default();
    for o in ops() {
        let m = match valid_case(&o.name) {
            Some((m, _)) => m,
            None => generic_inputs(o, |a| !a.optional),
        };
        if m.is_empty() {
            continue;
        }
        let b = io::safetensors_bytes(&m, &BTreeMap::new());
        let p = d.path().join("trunc.safetensors");
        std::fs::write(&p, &b[..b.len() - 1]).unwrap();
        let out = duet(run_args(&o.name, &[p.as_os_str()], keep.arg(), &[]));
        let what = format!("{}: truncated input", o.name);
        f.add(check_clean_error(
            &out,
            &what,
            &["trunc.safetensors", "tensor '"],
        ));
        f.add(keep.check_unchanged(&what));
    }
    f.assert_none("truncated inputs");
}

type Runnable = (OpInfo, TensorMap, Vec<(String, String)>);

/// Ops with a case in the case table, with the inputs and params of their smallest case.
/// The base run must succeed (a failing base run is reported by `every_op_base_case_runs`).
fn runnable_ops() -> &'static [Runnable] {
    static R: OnceLock<Vec<Runnable>> = OnceLock::new();
    R.get_or_init(|| {
        ops()
            .iter()
            .filter_map(|o| {
                let (m, params) = valid_case(&o.name)?;
                Some((o.clone(), m, params))
            })
            .collect()
    })
}

#[test]
fn every_op_base_case_runs() {
    let d = tempfile::tempdir().unwrap();
    let mut f = Findings::default();
    assert!(
        !runnable_ops().is_empty(),
        "no op has a case in the case table"
    );
    for (o, m, params) in runnable_ops() {
        let p = save(d.path(), "in.safetensors", m);
        let outp = d.path().join("out.safetensors");
        let out = duet(run_args(
            &o.name,
            &[p.as_os_str()],
            outp.as_os_str(),
            params,
        ));
        let what = format!("{}: base case", o.name);
        f.add(check_no_crash(&out, &what));
        if !out.status.success() {
            f.add::<()>(Err(format!("{what}: fails: {}", stderr_of(&out))));
        }
    }
    f.assert_none("base cases");
}

#[test]
fn every_op_wrong_dtype() {
    let d = tempfile::tempdir().unwrap();
    let keep = Keep::new(d.path(), "out.safetensors");
    let mut f = Findings::default();
    for (o, m, params) in runnable_ops() {
        for a in &o.inputs {
            let (Some(t), Some(bad)) = (m.get(&a.name), wrong_dtype(&a.dtypes)) else {
                continue;
            };
            let mut mm = m.clone();
            mm.insert(
                a.name.clone(),
                Tensor::from_f32_as(&t.shape, &t.to_f32_vec(), bad),
            );
            let p = save(d.path(), "in.safetensors", &mm);
            let out = duet(run_args(&o.name, &[p.as_os_str()], keep.arg(), params));
            let what = format!("{}: '{}' as {bad} (accepts {})", o.name, a.name, a.dtypes);
            let quoted = format!("'{}'", a.name);
            f.add(check_clean_error(&out, &what, &[&o.name, &quoted]));
            f.add(keep.check_unchanged(&what));
        }
    }
    f.assert_none("wrong dtypes");
}

/// Runs a mutated input set: either success or a clean error naming the op; never a crash;
/// a failing run leaves the existing output alone.
fn check_mutant(
    d: &Path,
    keep: &Keep,
    o: &OpInfo,
    m: &TensorMap,
    params: &[(String, String)],
    what: &str,
) -> Result<bool, String> {
    let p = save(d, "in.safetensors", m);
    let out = duet(run_args(&o.name, &[p.as_os_str()], keep.arg(), params));
    check_no_crash(&out, what)?;
    if out.status.success() {
        // The run replaced the output: restore it for the next row.
        std::fs::write(&keep.path, &keep.bytes).unwrap();
        return Ok(true);
    }
    check_clean_error(&out, what, &[&format!("{}:", o.name)])?;
    keep.check_unchanged(what)?;
    Ok(false)
}

#[test]
fn every_op_wrong_rank_and_empty_tensors() {
    let d = tempfile::tempdir().unwrap();
    let keep = Keep::new(d.path(), "out.safetensors");
    let mut f = Findings::default();
    for (o, m, params) in runnable_ops() {
        for (name, t) in m {
            let mut variants: Vec<(String, Vec<usize>)> = vec![];
            let mut up = vec![1usize];
            up.extend(&t.shape);
            variants.push(("one more dim".into(), up));
            if t.rank() > 1 {
                variants.push(("one dim fewer".into(), t.shape[1..].to_vec()));
            }
            if t.rank() > 0 {
                let mut z = t.shape.clone();
                z[0] = 0;
                variants.push(("empty first dim".into(), z));
                let mut odd = t.shape.clone();
                *odd.last_mut().unwrap() += 1;
                variants.push(("last dim + 1".into(), odd));
                let mut less = t.shape.clone();
                if *less.last().unwrap() > 1 {
                    *less.last_mut().unwrap() -= 1;
                    variants.push(("last dim - 1".into(), less));
                }
            }
            for (label, shape) in variants {
                let n: usize = shape.iter().product();
                let src = t.to_f32_vec();
                let v: Vec<f32> = if src.is_empty() {
                    vec![1.0; n]
                } else {
                    src.into_iter().cycle().take(n).collect()
                };
                let mut mm = m.clone();
                mm.insert(name.clone(), Tensor::from_f32_as(&shape, &v, t.dtype()));
                let what = format!("{}: '{name}' {label}: {:?} -> {shape:?}", o.name, t.shape);
                f.add(check_mutant(d.path(), &keep, o, &mm, params, &what));
            }
        }
    }
    f.assert_none("wrong ranks / shapes / empty tensors");
}

#[test]
fn every_op_nan_inf_inputs_do_not_crash() {
    let d = tempfile::tempdir().unwrap();
    let keep = Keep::new(d.path(), "out.safetensors");
    let mut f = Findings::default();
    for (o, m, params) in runnable_ops() {
        for (name, t) in m {
            if !t.dtype().is_float() || t.numel() < 3 {
                continue;
            }
            for label in ["NaN", "+Inf/-Inf", "all NaN", "all +Inf"] {
                let mut v = t.to_f32_vec();
                match label {
                    "NaN" => v[..3].copy_from_slice(&[f32::NAN, 1.0, -1.0]),
                    "+Inf/-Inf" => v[..3].copy_from_slice(&[f32::INFINITY, f32::NEG_INFINITY, 0.5]),
                    "all NaN" => v.iter_mut().for_each(|x| *x = f32::NAN),
                    _ => v.iter_mut().for_each(|x| *x = f32::INFINITY),
                }
                let mut mm = m.clone();
                mm.insert(name.clone(), Tensor::from_f32_as(&t.shape, &v, t.dtype()));
                let what = format!("{}: {label} in '{name}'", o.name);
                f.add(check_mutant(d.path(), &keep, o, &mm, params, &what));
            }
        }
    }
    f.assert_none("NaN / Inf inputs");
}

#[test]
fn every_op_extreme_params() {
    let d = tempfile::tempdir().unwrap();
    let keep = Keep::new(d.path(), "out.safetensors");
    let mut f = Findings::default();
    for (o, m, params) in runnable_ops() {
        for (pname, kind, _) in &o.params {
            let values: &[&str] = match kind.as_str() {
                Some("int") => &[
                    "-1",
                    "9223372036854775807",
                    "-9223372036854775808",
                    "4294967296",
                    "0",
                ],
                Some("float") => &["nan", "inf", "-inf", "1e308", "-1e-45"],
                Some("bool") => &["maybe"],
                Some("str") => &["\u{1F600}", ""],
                _ => &["not-an-option"],
            };
            for v in values {
                let mut ps: Vec<(String, String)> =
                    params.iter().filter(|(k, _)| k != pname).cloned().collect();
                ps.push((pname.clone(), v.to_string()));
                let what = format!("{}: --set {pname}={v}", o.name);
                let r = check_mutant(d.path(), &keep, o, m, &ps, &what);
                // Values the parser must refuse (not a bool / not one of the enum's names).
                let must_fail = matches!(kind.as_str(), Some("bool")) || kind.is_object();
                if must_fail && r == Ok(true) {
                    f.add::<()>(Err(format!("{what}: an invalid value was accepted")));
                }
                f.add(r);
            }
        }
    }
    f.assert_none("extreme params");
}

// ---------------------------------------------------------------------------------------------
// NaN / Inf policy rows (docs/RELIABILITY.md)
// ---------------------------------------------------------------------------------------------

fn run_ok(op: &str, m: &TensorMap, params: &[(&str, &str)]) -> TensorMap {
    let d = tempfile::tempdir().unwrap();
    let p = save(d.path(), "in.safetensors", m);
    let outp = d.path().join("out.safetensors");
    let ps: Vec<(String, String)> = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let out = duet(run_args(op, &[p.as_os_str()], outp.as_os_str(), &ps));
    assert_no_crash(&out, op);
    assert!(out.status.success(), "{op}: {}", stderr_of(&out));
    io::load(&outp).unwrap()
}

#[test]
fn nan_router_logits_select_the_expert_and_poison_the_token() {
    if op("noaux_tc_router").is_none() {
        panic!("noaux_tc_router is not in `duet ops`");
    }
    // 2 tokens x 8 experts; token 0 has a NaN logit at expert 5, token 1 is finite.
    let mut logits: Vec<f32> = (0..16).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    logits[5] = f32::NAN;
    let mut m = TensorMap::new();
    m.insert("logits".into(), Tensor::from_f32(&[2, 8], logits));
    m.insert(
        "bias".into(),
        Tensor::from_f32(&[8], (0..8).map(|i| i as f32 * 0.01).collect()),
    );
    let out = run_ok(
        "noaux_tc_router",
        &m,
        &[("top_k", "2"), ("routed_scaling_factor", "2.5")],
    );
    let idx = out["topk_indices"].to_i64_vec().unwrap();
    let w = out["topk_weights"].to_f32_vec();
    // Documented: a NaN key ranks above everything (always selected, first) ...
    assert_eq!(idx[0], 5, "NaN expert not selected first: {idx:?}");
    // ... and its NaN weight poisons every weight of that token through the normalising sum.
    assert!(w[0].is_nan() && w[1].is_nan(), "token 0 weights {w:?}");
    // The other token is unaffected.
    assert!(
        w[2].is_finite() && w[3].is_finite(),
        "token 1 weights {w:?}"
    );
    // +-inf logits are fine: sigmoid gives 1 / 0, finite weights.
    let mut logits: Vec<f32> = (0..8).map(|i| i as f32 * 0.1).collect();
    logits[2] = f32::INFINITY;
    logits[6] = f32::NEG_INFINITY;
    m.insert("logits".into(), Tensor::from_f32(&[1, 8], logits));
    let out = run_ok("noaux_tc_router", &m, &[("top_k", "2")]);
    let idx = out["topk_indices"].to_i64_vec().unwrap();
    let w = out["topk_weights"].to_f32_vec();
    assert_eq!(idx[0], 2, "+inf logit not selected first: {idx:?}");
    assert!(!idx.contains(&6), "-inf logit selected: {idx:?}");
    assert!(w.iter().all(|x| x.is_finite()), "weights {w:?}");
}

#[test]
fn inf_in_an_nvfp4_quantization_block() {
    if op("nvfp4_quantize").is_none() {
        panic!("nvfp4_quantize is not in `duet ops`");
    }
    // One row, two blocks of 16; block 0 holds +inf at element 3 and -inf at element 9.
    let mut x: Vec<f32> = (0..32)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.3 + 0.05)
        .collect();
    x[3] = f32::INFINITY;
    x[9] = f32::NEG_INFINITY;
    let mut m = TensorMap::new();
    m.insert("x".into(), Tensor::from_f32(&[1, 32], x.clone()));
    // Without an explicit global scale, amax = inf gives no scale: a clean error.
    let d = tempfile::tempdir().unwrap();
    let p = save(d.path(), "in.safetensors", &m);
    let keep = Keep::new(d.path(), "out.safetensors");
    let out = duet(run_args(
        "nvfp4_quantize",
        &[p.as_os_str()],
        keep.arg(),
        &[],
    ));
    assert_clean_error(
        &out,
        "nvfp4_quantize inf without global_scale",
        &["nvfp4_quantize", "global_scale"],
    );
    keep.assert_unchanged("nvfp4_quantize inf without global_scale");

    m.insert("global_scale".into(), Tensor::from_f32(&[1], vec![100.0]));
    let code = |packed: &[u8], i: usize| (packed[i / 2] >> (4 * (i % 2))) & 0xF;
    // kernel mode: vecMax = inf -> sf = 0x7E (448, saturated); the infinities become +-6
    // (codes 0x7 / 0xF); the other elements of the block round towards 0.
    let out = run_ok("nvfp4_quantize", &m, &[("mode", "kernel")]);
    let q = out["x_fp4"].as_u8().unwrap().to_vec();
    let sf = out["sf"].as_u8().unwrap().to_vec();
    assert_eq!(sf[0], 0x7E, "kernel: sf of the inf block");
    assert_eq!(code(&q, 3), 0x7, "kernel: +inf code");
    assert_eq!(code(&q, 9), 0xF, "kernel: -inf code");
    assert_ne!(sf[1], 0x7E, "kernel: the finite block is scaled normally");
    assert!(
        (16..32).any(|i| code(&q, i) & 7 != 0),
        "kernel: the finite block is not all zero"
    );
    // exact mode: the non-saturating E4M3 cast overflows: sf = 0x7F (NaN), codes all 0.
    let out = run_ok("nvfp4_quantize", &m, &[("mode", "exact")]);
    let q = out["x_fp4"].as_u8().unwrap().to_vec();
    let sf = out["sf"].as_u8().unwrap().to_vec();
    assert_eq!(sf[0] & 0x7F, 0x7F, "exact: sf of the inf block is NaN");
    assert!(
        (0..16).all(|i| code(&q, i) == 0),
        "exact: codes of the inf block"
    );
    assert!(
        (16..32).any(|i| code(&q, i) & 7 != 0),
        "exact: the finite block"
    );
}

// ---------------------------------------------------------------------------------------------
// Trace files (duet trace summary / diff / convert)
// ---------------------------------------------------------------------------------------------

fn bad_trace(name: &str, bytes: &[u8], needles: &[&str]) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    let mut all = vec![name];
    all.extend_from_slice(needles);
    let out = duet([
        OsStr::new("trace"),
        OsStr::new("summary"),
        p.as_os_str(),
        OsStr::new("--no-progress"),
    ]);
    assert_clean_error(&out, &format!("trace summary {name}"), &all);
    let out = duet([
        OsStr::new("trace"),
        OsStr::new("diff"),
        p.as_os_str(),
        p.as_os_str(),
        OsStr::new("--no-progress"),
    ]);
    assert_clean_error(&out, &format!("trace diff {name}"), &all);
}

/// A missing trace file: one clear line that names it, the OS reason said once (the error's
/// own message carries its source; the CLI does not print the cause again).
#[test]
fn trace_missing_file_says_why_once() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("missing.sqlite");
    let out = duet([
        OsStr::new("trace"),
        OsStr::new("summary"),
        p.as_os_str(),
        OsStr::new("--no-progress"),
    ]);
    let err = assert_clean_error(
        &out,
        "trace summary missing.sqlite",
        &["missing.sqlite", "cannot read"],
    );
    assert_eq!(
        err.matches("os error").count(),
        1,
        "the OS reason once, not once per cause in the chain: {err}"
    );
}

#[test]
fn trace_empty_file() {
    bad_trace("empty.sqlite", b"", &["empty"]);
    bad_trace("empty.csv", b"", &["empty"]);
    bad_trace("empty.json", b"", &["empty"]);
}

#[test]
fn trace_zeroed_sqlite_header() {
    bad_trace("zero.sqlite", &[0u8; 8192], &["zeroed"]);
}

#[test]
fn trace_truncated_sqlite() {
    // A small nsys-shaped export (the fuzz seed, 512-byte pages), cut at several places.
    let db = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/trace_sqlite/seed-nsys_small"),
    )
    .unwrap();
    assert!(db.starts_with(b"SQLite format 3\0") && db.len() > 3000);
    bad_trace("header-only.sqlite", &db[..100], &[]);
    bad_trace("two-pages.sqlite", &db[..1024], &[]);
    bad_trace("cut.sqlite", &db[..db.len() - 700], &[]);
    let img = tiny_sqlite_image();
    bad_trace("cut-image.sqlite", &img[..4096 + 100], &[]);
}

/// Bytes of a small SQLite database (one table, a few rows) built without a SQLite library:
/// a minimal valid database image is written by hand (header + one leaf table page).
fn tiny_sqlite_image() -> Vec<u8> {
    // The smallest valid database file: a 100-byte header on a 4096-byte page 1 that is an
    // empty sqlite_master leaf table b-tree, plus a second (garbage) page.
    let mut b = vec![0u8; 8192];
    b[..16].copy_from_slice(b"SQLite format 3\0");
    b[16..18].copy_from_slice(&4096u16.to_be_bytes()); // page size
    b[18] = 1; // write version
    b[19] = 1; // read version
    b[20] = 0; // reserved space
    b[21] = 64;
    b[22] = 32;
    b[23] = 32;
    b[24..28].copy_from_slice(&1u32.to_be_bytes()); // change counter
    b[28..32].copy_from_slice(&2u32.to_be_bytes()); // database size in pages
    b[44..48].copy_from_slice(&4u32.to_be_bytes()); // schema format
    b[56..60].copy_from_slice(&1u32.to_be_bytes()); // UTF-8
    b[92..96].copy_from_slice(&1u32.to_be_bytes());
    b[96..100].copy_from_slice(&3045000u32.to_be_bytes());
    b[100] = 0x0D; // leaf table page
    b[105..107].copy_from_slice(&4096u16.to_be_bytes());
    for (i, x) in b[4096..].iter_mut().enumerate() {
        *x = (i * 31 % 251) as u8;
    }
    b
}

#[test]
fn trace_valid_sqlite_that_is_not_nsys() {
    let b = tiny_sqlite_image();
    bad_trace("notnsys.sqlite", &b[..4096], &[]);
}

#[test]
fn trace_garbage() {
    let g: Vec<u8> = (0..5000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    bad_trace("garbage.bin", &g, &[]);
    bad_trace("garbage.sqlite", &g, &[]);
    bad_trace("words.csv", b"hello,world\nthis,is not,a trace\n", &[]);
    bad_trace(
        "trunc.json",
        br#"{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "#,
        &[],
    );
    bad_trace("notkineto.json", br#"{"hello": [1, 2, 3]}"#, &[]);
    bad_trace(
        "gz.json.gz",
        &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3],
        &[],
    );
}

#[test]
fn trace_directory() {
    let d = tempfile::tempdir().unwrap();
    let sub = d.path().join("trace.sqlite");
    std::fs::create_dir(&sub).unwrap();
    let out = duet([
        OsStr::new("trace"),
        OsStr::new("summary"),
        sub.as_os_str(),
        OsStr::new("--no-progress"),
    ]);
    assert_clean_error(&out, "trace summary DIR", &["trace.sqlite", "directory"]);
}

#[test]
fn trace_non_utf8_csv() {
    let mut b = b"\"Time (%)\",\"Total Time (ns)\",\"Instances\",\"Avg (ns)\",\"Name\"\n".to_vec();
    b.extend_from_slice(b"50.0,100,2,50,\"k\xff\xfe\"\n");
    bad_trace("nonutf8.csv", &b, &["UTF-8"]);
    bad_trace("latin1.csv", b"\xe9\xe8\xe0,\xff\n1,2\n", &["UTF-8"]);
}

#[test]
fn trace_missing_file_and_unwritable_reports() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("nope.sqlite");
    let out = duet([OsStr::new("trace"), OsStr::new("summary"), p.as_os_str()]);
    assert_clean_error(&out, "trace summary missing", &["nope.sqlite"]);
    // A valid nsys stats CSV (the fuzz seed), so only the report paths are wrong.
    let good =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/trace_nsys_csv/seed-kern_sum");
    let ok = duet([
        OsStr::new("trace"),
        OsStr::new("summary"),
        good.as_os_str(),
        OsStr::new("--no-progress"),
    ]);
    assert_no_crash(&ok, "trace summary seed");
    assert!(
        ok.status.success(),
        "trace summary of the seed fails: {}",
        stderr_of(&ok)
    );
    for flag in ["--md", "--html", "--json-out"] {
        let bad = d.path().join("no/such/dir/report.out");
        let out = duet([
            OsStr::new("trace"),
            OsStr::new("summary"),
            good.as_os_str(),
            OsStr::new(flag),
            bad.as_os_str(),
        ]);
        assert_clean_error(
            &out,
            &format!("trace summary {flag} in a missing folder"),
            &["report.out"],
        );
        // A bad trace fails before any report is written: an existing report survives.
        let keep = Keep::new(d.path(), "report.md");
        let out = duet([
            OsStr::new("trace"),
            OsStr::new("summary"),
            p.as_os_str(),
            OsStr::new(flag),
            keep.arg(),
        ]);
        assert_clean_error(
            &out,
            &format!("trace summary missing {flag}"),
            &["nope.sqlite"],
        );
        keep.assert_unchanged(&format!("trace summary {flag}"));
    }
    let bad = d.path().join("no/such/dir/trace.chrome.json");
    let out = duet([
        OsStr::new("trace"),
        OsStr::new("convert"),
        good.as_os_str(),
        OsStr::new("-o"),
        bad.as_os_str(),
    ]);
    assert_clean_error(
        &out,
        "trace convert -o in a missing folder",
        &["trace.chrome.json"],
    );
    let keep = Keep::new(d.path(), "out.chrome.json");
    let out = duet([
        OsStr::new("trace"),
        OsStr::new("convert"),
        p.as_os_str(),
        OsStr::new("-o"),
        keep.arg(),
    ]);
    assert_clean_error(&out, "trace convert missing", &["nope.sqlite"]);
    keep.assert_unchanged("trace convert missing");
}

// ---------------------------------------------------------------------------------------------
// Model directories (duet e2e)
// ---------------------------------------------------------------------------------------------

fn tiny_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/nemotron-tiny-a")
}

/// A model folder in `d` with the tiny fixture's files linked in, minus `skip`.
fn model_dir(d: &Path, skip: &[&str]) -> PathBuf {
    let m = d.join("model");
    std::fs::create_dir_all(&m).unwrap();
    for f in std::fs::read_dir(tiny_model()).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        if !skip.contains(&name.as_str()) {
            std::os::unix::fs::symlink(f.path(), m.join(&name)).unwrap();
        }
    }
    m
}

fn e2e(dir: &Path, extra: &[&str]) -> Output {
    let mut a: Vec<OsString> = vec!["e2e".into(), dir.as_os_str().to_owned()];
    a.extend(extra.iter().map(OsString::from));
    duet(&a)
}

#[test]
fn e2e_model_dir_missing_or_not_a_dir() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nomodel");
    assert_clean_error(&e2e(&missing, &[]), "e2e missing dir", &["nomodel"]);
    let file = Keep::new(d.path(), "afile");
    assert_clean_error(&e2e(&file.path, &[]), "e2e on a file", &["afile"]);
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_clean_error(
        &e2e(&empty, &[]),
        "e2e without config.json",
        &["config.json"],
    );
}

#[test]
fn e2e_broken_config_json() {
    let base: Value =
        serde_json::from_slice(&std::fs::read(tiny_model().join("config.json")).unwrap()).unwrap();
    let with = |k: &str, v: Value| {
        let mut c = base.clone();
        c[k] = v;
        serde_json::to_vec(&c).unwrap()
    };
    let without = |k: &str| {
        let mut c = base.clone();
        c.as_object_mut().unwrap().remove(k);
        serde_json::to_vec(&c).unwrap()
    };
    let rows: Vec<(&str, Vec<u8>)> = vec![
        ("empty", b"".to_vec()),
        (
            "truncated",
            br#"{"hidden_size": 256, "num_hidden_la"#.to_vec(),
        ),
        (
            "not UTF-8",
            b"{\"hidden_size\": 256, \"model_type\": \"nemotron_h\xff\"}".to_vec(),
        ),
        ("not an object", b"[1, 2, 3]".to_vec()),
        (
            "hidden_size is a string",
            with("hidden_size", serde_json::json!("256")),
        ),
        (
            "hidden_size 2^60",
            with("hidden_size", serde_json::json!(1u64 << 60)),
        ),
        (
            "vocab_size 2^60",
            with("vocab_size", serde_json::json!(1u64 << 60)),
        ),
        ("hidden_size 0", with("hidden_size", serde_json::json!(0))),
        ("hidden_size -1", with("hidden_size", serde_json::json!(-1))),
        ("heads 0", with("num_attention_heads", serde_json::json!(0))),
        (
            "experts 2^40",
            with("n_routed_experts", serde_json::json!(1u64 << 40)),
        ),
        (
            "top-k > experts",
            with("num_experts_per_tok", serde_json::json!(17)),
        ),
        (
            "bad layer type",
            with("layers_block_type", serde_json::json!(["mamba", "nope"])),
        ),
        (
            "empty layer list",
            with("layers_block_type", serde_json::json!([])),
        ),
        ("no hidden_size", without("hidden_size")),
    ];
    // Float fields out of range: a config error (exit 2) naming config.json, the field and the
    // value, before any weight is read or op runs (these once ran to a FAIL, exit 1, or failed
    // inside the router op without naming config.json).
    let inf = || serde_json::json!({"__float__": "Infinity"});
    let nan = || serde_json::json!({"__float__": "NaN"});
    let float_rows: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        (
            "eps NaN",
            with("layer_norm_epsilon", nan()),
            vec!["layer_norm_epsilon = NaN"],
        ),
        (
            "eps -1",
            with("layer_norm_epsilon", serde_json::json!(-1.0)),
            vec!["layer_norm_epsilon = -1"],
        ),
        (
            "eps 0",
            with("layer_norm_epsilon", serde_json::json!(0.0)),
            vec!["layer_norm_epsilon = 0"],
        ),
        (
            "eps 1e-50 (0 in f32)",
            with("layer_norm_epsilon", serde_json::json!(1e-50)),
            vec!["layer_norm_epsilon", "1e-50", "f32"],
        ),
        (
            "scaling inf",
            with("routed_scaling_factor", inf()),
            vec!["routed_scaling_factor = inf"],
        ),
        (
            "scaling 1e300 (inf in f32)",
            with("routed_scaling_factor", serde_json::json!(1e300)),
            vec!["routed_scaling_factor", "1e300", "f32"],
        ),
        (
            "scaling -5",
            with("routed_scaling_factor", serde_json::json!(-5.0)),
            vec!["routed_scaling_factor = -5"],
        ),
        (
            "scaling NaN",
            with("routed_scaling_factor", nan()),
            vec!["routed_scaling_factor = NaN"],
        ),
        (
            "time_step_min NaN",
            with("time_step_min", nan()),
            vec!["time_step_min = NaN"],
        ),
        (
            "time_step_min -1",
            with("time_step_min", serde_json::json!(-1.0)),
            vec!["time_step_min = -1"],
        ),
        (
            "time_step_limit [NaN, inf]",
            with("time_step_limit", serde_json::json!([nan(), inf()])),
            vec!["time_step_limit = [NaN, inf]"],
        ),
        (
            "time_step_limit [-inf, inf]",
            with(
                "time_step_limit",
                serde_json::json!([{"__float__": "-Infinity"}, inf()]),
            ),
            vec!["time_step_limit = [-inf, inf]"],
        ),
        (
            "time_step_limit [-1, 0.1]",
            with("time_step_limit", serde_json::json!([-1.0, 0.1])),
            vec!["time_step_limit = [-1, 0.1]"],
        ),
        (
            "time_step_limit [0.5, 0.1]",
            with("time_step_limit", serde_json::json!([0.5, 0.1])),
            vec!["time_step_limit = [0.5, 0.1]"],
        ),
        (
            "time_step_limit [0, 0]",
            with("time_step_limit", serde_json::json!([0.0, 0.0])),
            vec!["time_step_limit = [0, 0]"],
        ),
    ];
    let mut f = Findings::default();
    let all = rows
        .into_iter()
        .map(|(label, cfg)| (label, cfg, vec![]))
        .chain(float_rows);
    for (label, cfg, needles) in all {
        let d = tempfile::tempdir().unwrap();
        let m = model_dir(d.path(), &["config.json"]);
        std::fs::write(m.join("config.json"), &cfg).unwrap();
        let out = e2e(&m, &["--decode", "0"]);
        // Every row names the config; the float rows also config.json, the field and value.
        let mut want = vec!["config"];
        if !needles.is_empty() {
            want.push("config.json");
            want.extend(needles);
        }
        f.add(check_clean_error(
            &out,
            &format!("e2e config: {label}"),
            &want,
        ));
    }
    // config.json is a directory.
    let d = tempfile::tempdir().unwrap();
    let m = model_dir(d.path(), &["config.json"]);
    std::fs::create_dir(m.join("config.json")).unwrap();
    f.add(check_clean_error(
        &e2e(&m, &[]),
        "e2e config.json is a directory",
        &["config.json"],
    ));
    f.assert_none("e2e configs");
}

#[test]
fn e2e_broken_weights() {
    let full = io::load(&tiny_model().join("model.safetensors")).unwrap();
    let (victim, vt) = full.iter().find(|(k, _)| k.contains("layers.0.")).unwrap();
    let bytes = std::fs::read(tiny_model().join("model.safetensors")).unwrap();
    let mut m1 = full.clone();
    m1.remove(victim);
    let mut m2 = full.clone();
    m2.insert(victim.clone(), f32_tensor(&[3], 1));
    let mut m3 = full.clone();
    m3.insert(
        victim.clone(),
        Tensor::from_f32_as(&vt.shape, &vec![1.0; vt.numel()], DType::I32),
    );
    type Write<'a> = Box<dyn Fn(&Path) + 'a>;
    let rows: Vec<(&str, Write, Vec<&str>)> = vec![
        ("no weight file", Box::new(|_| {}), vec!["model"]),
        (
            "empty",
            Box::new(|p| std::fs::write(p, b"").unwrap()),
            vec!["model.safetensors"],
        ),
        (
            "truncated",
            Box::new(|p| std::fs::write(p, &bytes[..bytes.len() / 2]).unwrap()),
            vec!["model.safetensors"],
        ),
        (
            "directory",
            Box::new(|p| std::fs::create_dir(p).unwrap()),
            vec!["model.safetensors"],
        ),
        (
            "missing tensor",
            Box::new(|p| io::save(p, &m1).unwrap()),
            vec![victim.as_str()],
        ),
        (
            "wrong shape",
            Box::new(|p| io::save(p, &m2).unwrap()),
            vec![victim.as_str()],
        ),
        (
            "wrong dtype",
            Box::new(|p| io::save(p, &m3).unwrap()),
            vec![victim.as_str()],
        ),
    ];
    let mut f = Findings::default();
    for (label, write, needles) in rows {
        let d = tempfile::tempdir().unwrap();
        let m = model_dir(d.path(), &["model.safetensors"]);
        write(&m.join("model.safetensors"));
        let out = e2e(&m, &["--decode", "0"]);
        f.add(check_clean_error(
            &out,
            &format!("e2e weights: {label}"),
            &needles,
        ));
    }
    f.assert_none("e2e weights");
}

#[test]
fn e2e_nan_weight_fails_the_golden_comparison() {
    // A NaN in one weight is data, not a format error: the run completes and the golden
    // comparison FAILS (exit 1), never PASS, never a crash.
    let full = io::load(&tiny_model().join("model.safetensors")).unwrap();
    let (victim, vt) = full
        .iter()
        .find(|(k, t)| k.contains("layers.0.") && t.dtype().is_float() && t.numel() > 1)
        .unwrap();
    let mut v = vt.to_f32_vec();
    v[0] = f32::NAN;
    let mut m = full.clone();
    m.insert(
        victim.clone(),
        Tensor::from_f32_as(&vt.shape, &v, vt.dtype()),
    );
    let d = tempfile::tempdir().unwrap();
    let dir = model_dir(d.path(), &["model.safetensors"]);
    io::save(&dir.join("model.safetensors"), &m).unwrap();
    let out = e2e(&dir, &["--decode", "2"]);
    assert_no_crash(&out, "e2e NaN weight");
    assert_eq!(
        out.status.code(),
        Some(1),
        "e2e with a NaN in {victim}: expected FAIL (exit 1)\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        stderr_of(&out)
    );
}

#[test]
fn e2e_unwritable_dump_keeps_existing_file() {
    let d = tempfile::tempdir().unwrap();
    let m = model_dir(d.path(), &[]);
    let bad = d.path().join("no/such/dir/dump.safetensors");
    let out = e2e(
        &m,
        &[
            "--decode",
            "0",
            "--path",
            "cpu",
            "--dump",
            bad.to_str().unwrap(),
        ],
    );
    assert_clean_error(
        &out,
        "e2e --dump in a missing folder",
        &["dump.safetensors"],
    );
    let keep = Keep::new(d.path(), "dump.txt");
    let out = e2e(
        &m,
        &[
            "--decode",
            "0",
            "--path",
            "cpu",
            "--dump",
            keep.path.to_str().unwrap(),
        ],
    );
    assert_clean_error(&out, "e2e --dump .txt", &["dump.txt"]);
    keep.assert_unchanged("e2e --dump .txt");
}

/// Prints the observed NaN / Inf behaviour of every op with a case (the "observed" columns of
/// docs/RELIABILITY.md): `cargo test --test cli_bad_input nan_inf_policy_table -- --ignored
/// --nocapture`. In-process (no CLI) so it is quick; informational, never fails on behaviour.
#[test]
#[ignore = "prints the observed NaN/Inf table for docs/RELIABILITY.md"]
fn nan_inf_policy_table() {
    fn summarize(r: &Result<TensorMap, String>) -> String {
        match r {
            Err(e) => format!("error: {}", e.chars().take(90).collect::<String>()),
            Ok(m) => {
                let mut parts = vec![];
                for (k, t) in m {
                    if !t.dtype().is_float() {
                        continue;
                    }
                    let v = t.to_f32_vec();
                    let nan = v.iter().filter(|x| x.is_nan()).count();
                    let inf = v.iter().filter(|x| x.is_infinite()).count();
                    if nan + inf > 0 {
                        parts.push(format!("{k}: {nan} NaN/{inf} inf of {}", v.len()));
                    }
                }
                if parts.is_empty() {
                    "ok, all outputs finite".into()
                } else {
                    parts.join("; ")
                }
            }
        }
    }
    println!("| op | input | one NaN | +inf/-inf | all NaN |");
    println!("| --- | --- | --- | --- | --- |");
    for (o, m, params) in runnable_ops() {
        let def = reference::ops::find(&o.name).unwrap();
        for (name, t) in m {
            if !t.dtype().is_float() || t.numel() < 3 {
                continue;
            }
            let mut cells = vec![];
            for label in ["NaN", "inf", "allnan"] {
                let mut v = t.to_f32_vec();
                match label {
                    "NaN" => v[0] = f32::NAN,
                    "inf" => v[..2].copy_from_slice(&[f32::INFINITY, f32::NEG_INFINITY]),
                    _ => v.iter_mut().for_each(|x| *x = f32::NAN),
                }
                let mut mm = m.clone();
                mm.insert(name.clone(), Tensor::from_f32_as(&t.shape, &v, t.dtype()));
                let r =
                    std::panic::catch_unwind(|| def.call(&mm, params).map_err(|e| e.to_string()))
                        .unwrap_or_else(|_| Err("PANIC".into()));
                cells.push(summarize(&r));
            }
            println!(
                "| {} | {name} | {} | {} | {} |",
                o.name, cells[0], cells[1], cells[2]
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bench JSON (duet bench compare BASE.json CAND.json) and bench outputs
// ---------------------------------------------------------------------------------------------

fn good_bench_json() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schema": "duet.bench/1",
        "results": [
            {"case": "philox/x", "implementation": "cpu", "median_s": 0.001, "samples_s": [0.001, 0.0011, 0.0009]}
        ]
    }))
    .unwrap()
}

fn bench_compare(name: &str, bytes: &[u8]) -> (Output, PathBuf, tempfile::TempDir) {
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join(name);
    std::fs::write(&bad, bytes).unwrap();
    let good = d.path().join("good.json");
    std::fs::write(&good, good_bench_json()).unwrap();
    let out = duet([
        OsStr::new("bench"),
        OsStr::new("compare"),
        good.as_os_str(),
        bad.as_os_str(),
    ]);
    (out, bad, d)
}

#[test]
fn bench_compare_bad_files() {
    // The good file against itself: exit 0 (the sanity row).
    let (out, _, _d) = bench_compare("same.json", &good_bench_json());
    assert_no_crash(&out, "bench compare good good");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    for (name, bytes, needle) in [
        ("empty.json", &b""[..], "empty.json"),
        (
            "trunc.json",
            &br#"{"schema": "duet.bench/1", "results": [{"case": "#[..],
            "trunc.json",
        ),
        (
            "nonutf8.json",
            &b"{\"schema\": \"duet.bench/1\xff\"}"[..],
            "nonutf8.json",
        ),
        ("noschema.json", &br#"{"results": []}"#[..], "schema"),
        ("list.json", &b"[1, 2, 3]"[..], "schema"),
    ] {
        let (out, _, _d) = bench_compare(name, bytes);
        assert_clean_error(&out, &format!("bench compare {name}"), &[needle]);
    }
    let d = tempfile::tempdir().unwrap();
    let out = duet([
        OsStr::new("bench"),
        OsStr::new("compare"),
        d.path().as_os_str(),
        d.path().as_os_str(),
    ]);
    assert_clean_error(&out, "bench compare DIR DIR", &[]);
}

#[test]
fn bench_compare_malformed_results_are_errors_not_a_pass() {
    // Right schema, but the results are not a list / rows lack their numbers: this must not
    // be reported as "no regression" (exit 0) -- a CI gate would pass on a broken file.
    for (label, v) in [
        (
            "results not a list",
            serde_json::json!({"schema": "duet.bench/1", "results": "oops"}),
        ),
        (
            "results missing",
            serde_json::json!({"schema": "duet.bench/1"}),
        ),
        (
            "row without median_s",
            serde_json::json!({"schema": "duet.bench/1", "results": [{"case": "philox/x", "implementation": "cpu"}]}),
        ),
    ] {
        let (out, _, _d) = bench_compare("cand.json", &serde_json::to_vec(&v).unwrap());
        assert_clean_error(&out, &format!("bench compare: {label}"), &["cand.json"]);
    }
}

#[test]
fn bench_unwritable_output_keeps_existing_file() {
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("missing/dir/bench.json");
    let fast = ["--reps", "1", "--max-seconds", "0"];
    let mut a: Vec<OsString> = vec![
        "bench".into(),
        "^philox".into(),
        "--out".into(),
        bad.clone().into(),
    ];
    a.extend(fast.iter().map(OsString::from));
    let out = duet(&a);
    assert_clean_error(&out, "bench --out in a missing folder", &["bench.json"]);
    // An existing --out is replaced only by a complete file; a bad regex fails first.
    let keep = Keep::new(d.path(), "bench.json");
    let mut a: Vec<OsString> = vec![
        "bench".into(),
        "(unclosed".into(),
        "--out".into(),
        keep.arg().to_owned(),
    ];
    a.extend(fast.iter().map(OsString::from));
    let out = duet(&a);
    assert_clean_error(&out, "bench bad regex", &["(unclosed"]);
    keep.assert_unchanged("bench bad regex");
}

// ---------------------------------------------------------------------------------------------
// ncu CSV for `duet profile --from-csv`, and the GPU tuning cache (JSON)
// ---------------------------------------------------------------------------------------------

#[test]
fn profile_from_csv_bad_files() {
    let op = runnable_ops()
        .first()
        .map(|r| r.0.name.clone())
        .expect("no op with a case");
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("dir.csv");
    std::fs::create_dir(&dir).unwrap();
    let rows: Vec<(&str, Option<&[u8]>, &str)> = vec![
        ("empty.csv", Some(b""), "empty"),
        (
            "latin1.csv",
            Some(b"\"ID\",\"Kernel Name\"\n\"0\",\"k\xe9\"\n"),
            "UTF-8",
        ),
        ("garbage.csv", Some(b"hello,world\n1,2\n"), "garbage.csv"),
        ("missing.csv", None, "missing.csv"),
        ("dir.csv", None, "directory"),
    ];
    for (name, bytes, needle) in rows {
        let p = d.path().join(name);
        if let Some(b) = bytes {
            std::fs::write(&p, b).unwrap();
        }
        let out = duet([
            OsStr::new("profile"),
            OsStr::new(&op),
            OsStr::new("--from-csv"),
            p.as_os_str(),
        ]);
        assert_clean_error(&out, &format!("profile --from-csv {name}"), &[name, needle]);
    }
}

#[test]
fn tuning_cache_bad_files() {
    // gpu::tune::load_cache reads $DUET_TUNING_CACHE (only this test sets it in this process;
    // the CLI runs of the other tests do not read it without a GPU).
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("dir.json");
    std::fs::create_dir(&dir).unwrap();
    let rows: Vec<(&str, Option<&[u8]>)> = vec![
        ("empty.json", Some(b"")),
        (
            "trunc.json",
            Some(br#"{"ssd_chunk_scan|1,4096|sm_90": {"config": "#),
        ),
        ("latin1.json", Some(b"{\"k\xe9\": 1}")),
        ("list.json", Some(b"[1, 2]")),
        ("dir.json", None),
    ];
    for (name, bytes) in rows {
        let p = d.path().join(name);
        if let Some(b) = bytes {
            std::fs::write(&p, b).unwrap();
        }
        std::env::set_var("DUET_TUNING_CACHE", &p);
        let r = std::panic::catch_unwind(gpu::tune::load_cache);
        let msg = match r {
            Err(_) => panic!("tuning cache {name}: panicked"),
            Ok(Ok(_)) => panic!("tuning cache {name}: accepted"),
            Ok(Err(e)) => e.to_string(),
        };
        assert!(msg.contains(name), "tuning cache {name}: {msg}");
        // Launches look the cache up and fall back to the defaults on a bad file.
        assert!(gpu::tune::lookup("ssd_chunk_scan", "ssd_chunk_scan.cu", "x", "sm_90").is_none());
    }
    let missing = d.path().join("missing.json");
    std::env::set_var("DUET_TUNING_CACHE", &missing);
    assert!(
        gpu::tune::load_cache().unwrap().is_empty(),
        "a missing cache is an empty one"
    );
    std::env::remove_var("DUET_TUNING_CACHE");
}

#[test]
fn bench_versions_filter_bad_uses() {
    // --versions with a non-router preset: refused before any GPU work, naming the fix.
    let d = tempfile::tempdir().unwrap();
    let out_path = d.path().join("b.json");
    let out = duet([
        OsStr::new("bench"),
        OsStr::new("--backend"),
        OsStr::new("gpu"),
        OsStr::new("--shape"),
        OsStr::new("nvfp4_8192"),
        OsStr::new("--versions"),
        OsStr::new("v9"),
        OsStr::new("--out"),
        out_path.as_os_str(),
    ]);
    assert_clean_error(
        &out,
        "bench --versions with nvfp4_8192",
        &["--versions", "router"],
    );
    assert!(!out_path.exists(), "no results file on an error");
    // An unknown version name: refused before the GPU is opened (also without a GPU), listing
    // the known ones.
    let out = duet([
        OsStr::new("bench"),
        OsStr::new("--backend"),
        OsStr::new("gpu"),
        OsStr::new("--shape"),
        OsStr::new("router_t1"),
        OsStr::new("--versions"),
        OsStr::new("v9,v99"),
        OsStr::new("--out"),
        out_path.as_os_str(),
    ]);
    assert_clean_error(&out, "bench --versions v99", &["v99", "v9n"]);
    assert!(!out_path.exists(), "no results file on an error");
}
