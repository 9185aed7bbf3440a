//! Replays the fuzz findings and the committed fuzz corpora through the parsers, without
//! cargo-fuzz (this is the CI smoke of issue 9; `scripts/fuzz.sh` is the long run).
//!
//! - `fuzz/regressions/<target>/<file>`: inputs that once crashed a parser; each has a row in
//!   [`REGRESSIONS`] with the error it must now give.
//! - `fuzz/corpus/<target>.zip` (or an unpacked `fuzz/corpus/<target>/`): the minimised
//!   corpora; every file must parse to Ok or Err, never panic.
//! - `fuzz/seeds/<target>/seed-*`: small valid files the fuzzing starts from; each must be
//!   accepted.
//!
//! Each target here calls exactly what `fuzz/fuzz_targets/<target>.rs` calls.

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn temp_with(data: &[u8], suffix: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(suffix).tempfile().unwrap();
    f.write_all(data).unwrap();
    f.flush().unwrap();
    f
}

fn trace_reader(data: &[u8]) -> Box<dyn std::io::BufRead> {
    Box::new(std::io::Cursor::new(data.to_vec()))
}

/// Runs `data` through fuzz target `target`; Ok(None) when the parser accepted it,
/// Ok(Some(message)) for a clean error.
fn replay(target: &str, data: &[u8]) -> Result<Option<String>, String> {
    let err = |e: &dyn std::fmt::Display| Some(e.to_string());
    Ok(match target {
        "safetensors" => reference::io::parse_safetensors(data, Path::new("fuzz.safetensors"))
            .err()
            .and_then(|e| err(&e)),
        "npy" => reference::io::parse_npy(data, Path::new("fuzz.npy"), "x")
            .err()
            .and_then(|e| err(&e)),
        "tensor_file" => {
            let (ext, body) = match data.split_first() {
                Some((b, rest)) => (
                    ["safetensors", "npy", "npz", "bin"][(*b & 3) as usize],
                    rest,
                ),
                None => ("safetensors", data),
            };
            let f = temp_with(body, &format!(".{ext}"));
            reference::io::load(f.path()).err().and_then(|e| err(&e))
        }
        "model_config" => {
            let Ok(text) = std::str::from_utf8(data) else {
                return Ok(Some("not UTF-8 (skipped, as the fuzz target does)".into()));
            };
            match reference::model::Config::from_json_str(text, "fuzz/config.json") {
                Ok(c) => {
                    let _ = c.pattern();
                    c.validate("fuzz/config.json").err().and_then(|e| err(&e))
                }
                Err(e) => err(&e),
            }
        }
        "trace_nsys_csv" | "trace_ncu_csv" => {
            let path = Path::new("fuzz.csv");
            let mut info = traces::SourceInfo::default();
            let mut agg = traces::summary::Aggregator::new();
            let r = if target == "trace_ncu_csv" {
                traces::ncu::read(path, trace_reader(data), false, &mut info, &mut agg)
            } else {
                traces::nsys_csv::read(path, trace_reader(data), false, &mut info, &mut agg)
            };
            match r {
                Ok(()) => {
                    let _ = agg.finish(info, traces::SummaryOptions::default());
                    None
                }
                Err(e) => err(&e),
            }
        }
        "trace_kineto" | "trace_sqlite" => {
            let f = temp_with(
                data,
                if target == "trace_kineto" {
                    ".json"
                } else {
                    ".sqlite"
                },
            );
            let mut info = traces::SourceInfo::default();
            let mut agg = traces::summary::Aggregator::new();
            let r = if target == "trace_kineto" {
                traces::kineto::read(f.path(), false, &mut info, &mut agg, false)
            } else {
                traces::nsys_sqlite::read(f.path(), &mut info, &mut agg, false)
            };
            match r {
                Ok(()) => {
                    let _ = agg.finish(info, traces::SummaryOptions::default());
                    None
                }
                Err(e) => err(&e),
            }
        }
        "trace_file" => {
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
            let (ext, body) = match data.split_first() {
                Some((b, rest)) => (EXT[(*b & 7) as usize], rest),
                None => (".txt", data),
            };
            let f = temp_with(body, ext);
            traces::summarize(
                f.path(),
                traces::SummaryOptions::default(),
                traces::ReadOptions::default(),
            )
            .err()
            .and_then(|e| err(&e))
        }
        "op_call" => op_call(data),
        other => return Err(format!("unknown fuzz target '{other}'")),
    })
}

/// The `op_call` target (fuzz/fuzz_targets/op_call.rs; keep the two in sync): the bytes pick
/// an op, its inputs' presence / dtype / shape, its params, then the data.
fn op_call(data: &[u8]) -> Option<String> {
    use reference::op::ParamKind;
    use reference::{DType, Tensor, TensorMap};
    let mut pos = 0usize;
    let mut next = || {
        let b = data.get(pos).copied().unwrap_or(0);
        pos += 1;
        b
    };
    let float_of = |b: u8| match b {
        0 => f32::NAN,
        1 => f32::INFINITY,
        2 => f32::NEG_INFINITY,
        3 => -0.0,
        4 => f32::MIN_POSITIVE / 4.0,
        5 => 448.0 * 6.0,
        6 => -1e30,
        _ => (b as f32 - 128.0) / 16.0,
    };
    let ops = reference::ops::registry();
    if ops.is_empty() {
        return None;
    }
    let def = &ops[next() as usize % ops.len()];
    let mut specs = vec![];
    for a in &def.inputs {
        let present = next();
        if a.optional && present & 1 == 0 {
            continue;
        }
        let dtype = DType::ALL[(next() as usize) % DType::ALL.len()];
        let rank = (next() % 5) as usize;
        let shape: Vec<usize> = (0..rank).map(|_| (next() % 48) as usize).collect();
        let n: usize = shape.iter().product();
        if n > 8192 {
            return None;
        }
        specs.push((a.name.to_string(), shape, dtype, n));
    }
    let mut sets = vec![];
    for p in &def.params {
        let c = next();
        let v = match (&p.kind, c % 6) {
            (_, 0) => continue,
            (ParamKind::Int, 1) => (next() as i64).to_string(),
            (ParamKind::Int, 2) => "-1".into(),
            (ParamKind::Int, 3) => "0".into(),
            (ParamKind::Int, 4) => (1i64 << (next() % 63)).to_string(),
            (ParamKind::Int, _) => (next() % 8).to_string(),
            (ParamKind::Float, _) => float_of(next()).to_string(),
            (ParamKind::Bool, _) => (c & 8 == 0).to_string(),
            (ParamKind::Enum(opts), _) => opts[next() as usize % opts.len().max(1)].to_string(),
            (ParamKind::Str, _) => continue,
        };
        sets.push((p.name.to_string(), v));
    }
    let mut inputs = TensorMap::new();
    for (name, shape, dtype, n) in specs {
        let vals: Vec<f32> = (0..n).map(|_| float_of(next())).collect();
        let vals = if dtype.is_float() {
            vals
        } else {
            vals.iter()
                .map(|v| if v.is_finite() { v.round() } else { 1.0 })
                .collect()
        };
        inputs.insert(name, Tensor::from_f32_as(&shape, &vals, dtype));
    }
    def.call(&inputs, &sets).err().map(|e| e.to_string())
}

/// Replays one input, turning a panic into an Err naming the file.
fn replay_file(target: &str, file: &Path) -> Result<Option<String>, String> {
    let data = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    replay_bytes(target, &file.display().to_string(), &data)
}

/// [`replay`] with a panic turned into an error naming `label` (a file, or `zip:entry`).
fn replay_bytes(target: &str, label: &str, data: &[u8]) -> Result<Option<String>, String> {
    catch_unwind(AssertUnwindSafe(|| replay(target, data))).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("{target}: {label} panicked: {msg}")
    })?
}

/// Every fuzz finding: target, file under fuzz/regressions/<target>/, and a piece of the
/// error it must now give ("" when Ok or any clean error will do: the input was valid enough).
const REGRESSIONS: &[(&str, &str, &str)] = &[
    // parse_npy: a descr whose first character is multi-byte ('Ė8') made `split_at(1)` panic
    // ("byte index 1 is not a char boundary"). Found by the npy target in 45 s.
    ("npy", "descr-multibyte-char.npy", "unsupported numpy dtype"),
    // parse_npz: a 195-byte .npz whose zip headers claim a huge compressed and uncompressed
    // size made the reader reserve 1 GiB up front (libFuzzer: out-of-memory (malloc(1 GiB))).
    // The reservation is now bounded by the file's own size x the deflate ratio; the entry
    // itself is a clean error. Found by tensor_file in ~2 s.
    (
        "tensor_file",
        "npz-claimed-sizes-1gib-reservation.bin",
        "cannot decompress",
    ),
    // traces::ncu::normalize_unit: a unit starting with a multi-byte char ("µsz") was sliced
    // at byte 1 (`num[1..]`): panic "byte index 1 is not a char boundary". Fixed in ncu.rs
    // (`num.get(1..)`). Found by trace_ncu_csv in < 3 min. "" = Ok or any clean error.
    ("trace_ncu_csv", "unit-multibyte-prefix.csv", ""),
    // traces::summary: an nsys stats row with Instances = 4e27 saturates to u64::MAX and the
    // per-group / total instance sums overflow (panic with overflow checks, silent wrap in
    // release). summary.rs lines `self.instances += ...` and `.map(|g| g.0.instances).sum()`.
    // Found by trace_nsys_csv in < 3 min; fixed by the traces owner (saturating sums).
    ("trace_nsys_csv", "instances-sum-overflow.csv", ""),
    // traces::summary (Aggregator::kernel): a gputrace row whose "DymSMem (MB)" is 6.7e48
    // saturates to u64::MAX bytes, and static + dynamic shared memory overflowed ("attempt to
    // add with overflow"). Now a saturating sum. Found by trace_nsys_csv in session 4 after
    // 1.48 M executions.
    ("trace_nsys_csv", "smem-sum-overflow.csv", ""),
    // moe_finalize with topk_weights of shape (8, 0): `finalize` derived T = 0 from the empty
    // weights and the op built an (8, 8) output from 0 values (assertion in Tensor::new). k = 0
    // now gives zeros of (T, h), as the GPU kernel writes. Found by op_call in session 4 after
    // 848 k executions.
    ("op_call", "moe-finalize-k0.bin", ""),
];

#[test]
fn fuzz_regressions_give_clean_errors() {
    let mut failures = vec![];
    for (target, file, want) in REGRESSIONS {
        let p = fuzz_dir().join("regressions").join(target).join(file);
        match replay_file(target, &p) {
            Ok(_) if want.is_empty() => {}
            Ok(Some(msg)) if msg.contains(want) => {}
            Ok(Some(msg)) => {
                failures.push(format!("{target}/{file}: error {msg:?} lacks {want:?}"))
            }
            Ok(None) => failures.push(format!(
                "{target}/{file}: accepted, expected an error ({want})"
            )),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_regression_file_has_a_row() {
    let dir = fuzz_dir().join("regressions");
    let Ok(targets) = std::fs::read_dir(&dir) else {
        return;
    };
    for t in targets.flatten() {
        let target = t.file_name().to_string_lossy().into_owned();
        for f in std::fs::read_dir(t.path()).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            assert!(
                REGRESSIONS
                    .iter()
                    .any(|(rt, rf, _)| *rt == target && *rf == name),
                "fuzz/regressions/{target}/{name} has no row in REGRESSIONS"
            );
        }
    }
}

/// Replays every committed corpus file of every target: Ok or a clean error, never a panic.
/// The corpora are committed as one zip a target (`fuzz/corpus/<target>.zip`, written by
/// fuzz/corpus_pack.py: thousands of tiny files cost the device tool's carry ~11 MiB of
/// headers); a directory `fuzz/corpus/<target>/` (scripts/fuzz.sh's working copy) is replayed
/// too.
#[test]
fn fuzz_corpora_replay_without_panics() {
    let corpus = fuzz_dir().join("corpus");
    let mut failures = vec![];
    let mut n = 0usize;
    let mut entries: Vec<_> = std::fs::read_dir(&corpus)
        .expect("fuzz/corpus is missing")
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    let mut targets = 0usize;
    for t in entries {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        // (label, bytes) of every corpus input of this entry.
        let (target, inputs): (String, Vec<(String, Vec<u8>)>) = if t.is_dir() {
            let mut files: Vec<_> = std::fs::read_dir(&t)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .collect();
            files.sort();
            let inputs = files
                .iter()
                .map(|f| (f.display().to_string(), std::fs::read(f).unwrap()))
                .collect();
            (name.clone(), inputs)
        } else if let Some(target) = name.strip_suffix(".zip") {
            let file = std::fs::File::open(&t).unwrap();
            let mut z = zip::ZipArchive::new(file)
                .unwrap_or_else(|e| panic!("{}: not a zip: {e}", t.display()));
            let mut inputs = vec![];
            for i in 0..z.len() {
                let mut entry = z.by_index(i).unwrap();
                let mut data = vec![];
                std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
                inputs.push((format!("{}:{}", t.display(), entry.name()), data));
            }
            (target.to_string(), inputs)
        } else {
            failures.push(format!(
                "fuzz/corpus/{name}: neither a target's zip nor its directory"
            ));
            continue;
        };
        targets += 1;
        if inputs.is_empty() {
            failures.push(format!("fuzz/corpus/{name} is empty (run scripts/fuzz.sh)"));
        }
        for (label, data) in inputs {
            n += 1;
            if let Err(e) = replay_bytes(&target, &label, &data) {
                failures.push(e);
            }
        }
    }
    // The ten fuzz targets of fuzz/Cargo.toml each have a committed corpus.
    assert!(targets >= 10, "{targets} corpora under fuzz/corpus");
    assert!(n > 0);
    assert!(
        failures.is_empty(),
        "{} of {n} corpus files fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The seeds are valid files: the parsers must accept them (so the corpora really reach past
/// the format checks, and a parser that starts rejecting everything is caught).
#[test]
fn fuzz_seeds_are_accepted() {
    let seeds = fuzz_dir().join("seeds");
    let mut failures = vec![];
    let mut n = 0;
    for t in std::fs::read_dir(&seeds)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
    {
        let target = t.file_name().to_string_lossy().into_owned();
        for f in std::fs::read_dir(t.path()).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if !name.starts_with("seed-") {
                continue;
            }
            n += 1;
            match replay_file(&target, &f.path()) {
                Ok(None) => {}
                Ok(Some(e)) => failures.push(format!("{target}/{name}: rejected: {e}")),
                Err(e) => failures.push(e),
            }
        }
    }
    assert!(
        n >= 9,
        "only {n} seeds under fuzz/seeds (run fuzz/seeds/make_seeds.py)"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The tensor-file findings also go through the CLI under a 512 MiB address-space limit, so a
/// reservation of a GiB or more (invisible in-process: untouched memory costs nothing) fails.
#[test]
fn tensor_file_regressions_through_the_cli_with_little_memory() {
    let dir = fuzz_dir().join("regressions").join("tensor_file");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for f in entries.flatten() {
        let data = std::fs::read(f.path()).unwrap();
        let (ext, body) = match data.split_first() {
            Some((b, rest)) => (
                ["safetensors", "npy", "npz", "bin"][(*b & 3) as usize],
                rest,
            ),
            None => ("safetensors", &data[..]),
        };
        let t = temp_with(body, &format!(".{ext}"));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg("ulimit -v 524288; exec \"$0\" compare \"$1\" \"$1\"")
            .arg(env!("CARGO_BIN_EXE_duet"))
            .arg(t.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let name = f.file_name().to_string_lossy().into_owned();
        assert!(
            !err.contains("panicked") && !err.contains("memory allocation"),
            "{name}: {err}"
        );
        assert!(
            matches!(out.status.code(), Some(0) | Some(1) | Some(2)),
            "{name}: {:?} {err}",
            out.status
        );
    }
}
