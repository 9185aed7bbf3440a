//! Tensor files: safetensors, `.npy` and `.npz`.
//!
//! Every error names the file (and the tensor when there is one) and says how to fix it.
//! Writers go to a temporary file in the destination folder and rename it into place, so a
//! failed write never leaves a half-written file where the user's file was.

use crate::tensor::{checked_numel, DType, Tensor, TensorMap};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// What went wrong reading or writing a tensor file.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error("{path}: {msg}")]
    File { path: PathBuf, msg: String },
    #[error("{path}: tensor '{tensor}': {msg}")]
    Tensor {
        path: PathBuf,
        tensor: String,
        msg: String,
    },
}

fn ferr(path: &Path, msg: impl Into<String>) -> IoError {
    IoError::File {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}
fn terr(path: &Path, tensor: &str, msg: impl Into<String>) -> IoError {
    IoError::Tensor {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        msg: msg.into(),
    }
}

/// The kinds of tensor file duet understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Safetensors,
    Npy,
    Npz,
}

impl Format {
    /// From the file extension (used when writing).
    pub fn from_extension(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "safetensors" | "st" => Some(Format::Safetensors),
            "npy" => Some(Format::Npy),
            "npz" => Some(Format::Npz),
            _ => None,
        }
    }
}

const NPY_MAGIC: &[u8] = b"\x93NUMPY";

fn read_bytes(path: &Path) -> Result<Vec<u8>, IoError> {
    let meta = std::fs::metadata(path).map_err(|e| ferr(path, format!("cannot open: {e}")))?;
    if meta.is_dir() {
        return Err(ferr(
            path,
            "is a directory; expected a .safetensors, .npy or .npz file",
        ));
    }
    std::fs::read(path).map_err(|e| ferr(path, format!("cannot read: {e}")))
}

/// Reads every tensor of a file. A `.npy` file yields one tensor named after the file stem.
/// The format is detected from the content (magic bytes), not the extension.
pub fn load(path: &Path) -> Result<TensorMap, IoError> {
    let bytes = read_bytes(path)?;
    if bytes.is_empty() {
        return Err(ferr(
            path,
            "file is empty; expected a .safetensors, .npy or .npz file",
        ));
    }
    if bytes.starts_with(NPY_MAGIC) {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "x".to_string());
        let t = parse_npy(&bytes, path, &name)?;
        let mut m = TensorMap::new();
        m.insert(name, t);
        return Ok(m);
    }
    if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06") {
        return parse_npz(&bytes, path);
    }
    parse_safetensors(&bytes, path).map(|(m, _)| m)
}

/// Reads a safetensors file and also returns its `__metadata__` map.
pub fn load_with_metadata(path: &Path) -> Result<(TensorMap, BTreeMap<String, String>), IoError> {
    let bytes = read_bytes(path)?;
    parse_safetensors(&bytes, path)
}

fn st_dtype(d: &str) -> Option<DType> {
    Some(match d {
        "BOOL" => DType::Bool,
        "U8" => DType::U8,
        "I8" => DType::I8,
        "I16" => DType::I16,
        "U16" => DType::U16,
        "I32" => DType::I32,
        "U32" => DType::U32,
        "I64" => DType::I64,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F32" => DType::F32,
        "F64" => DType::F64,
        _ => return None,
    })
}

fn st_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "BOOL",
        DType::U8 => "U8",
        DType::I8 => "I8",
        DType::I16 => "I16",
        DType::U16 => "U16",
        DType::I32 => "I32",
        DType::U32 => "U32",
        DType::I64 => "I64",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::F32 => "F32",
        DType::F64 => "F64",
    }
}

/// Parses safetensors bytes. We parse the (small) JSON header ourselves so every failure
/// names the tensor, shapes are overflow-checked before anything is allocated, and
/// offsets are validated against the real payload size.
pub fn parse_safetensors(
    bytes: &[u8],
    path: &Path,
) -> Result<(TensorMap, BTreeMap<String, String>), IoError> {
    let hint =
        "expected a safetensors file (8-byte little-endian header length, JSON header, data)";
    if bytes.len() < 8 {
        return Err(ferr(
            path,
            format!("truncated: {} bytes; {hint}", bytes.len()),
        ));
    }
    let mut n8 = [0u8; 8];
    n8.copy_from_slice(&bytes[..8]);
    let hlen = u64::from_le_bytes(n8);
    if hlen > (bytes.len() as u64 - 8) {
        return Err(ferr(
            path,
            format!(
                "header length {hlen} exceeds the file size {} (truncated or not a safetensors file); {hint}",
                bytes.len()
            ),
        ));
    }
    let hlen = hlen as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + hlen])
        .map_err(|e| ferr(path, format!("header is not valid JSON ({e}); {hint}")))?;
    let obj = header
        .as_object()
        .ok_or_else(|| ferr(path, format!("header is not a JSON object; {hint}")))?;
    let payload = &bytes[8 + hlen..];
    let mut out = TensorMap::new();
    let mut meta = BTreeMap::new();
    for (name, info) in obj {
        if name == "__metadata__" {
            if let Some(m) = info.as_object() {
                for (k, v) in m {
                    meta.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
                }
            }
            continue;
        }
        let dt_s = info
            .get("dtype")
            .and_then(|d| d.as_str())
            .ok_or_else(|| terr(path, name, "entry has no 'dtype' string"))?;
        let dtype = st_dtype(dt_s).ok_or_else(|| {
            terr(
                path,
                name,
                format!("unsupported dtype {dt_s}; duet reads BOOL, U8, I8, I16, U16, I32, U32, I64, F16, BF16, F32, F64"),
            )
        })?;
        let shape: Vec<usize> = info
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| terr(path, name, "entry has no 'shape' list"))?
            .iter()
            .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| terr(path, name, "shape must be a list of non-negative integers"))?;
        let offs = info
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .filter(|a| a.len() == 2)
            .and_then(|a| Some((a[0].as_u64()?, a[1].as_u64()?)))
            .ok_or_else(|| terr(path, name, "entry has no 'data_offsets' [begin, end] pair"))?;
        let nbytes = checked_numel(&shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or_else(|| terr(path, name, format!("shape {shape:?} is absurdly large")))?;
        if offs.1 < offs.0 || offs.1 > payload.len() as u64 {
            return Err(terr(
                path,
                name,
                format!(
                    "data_offsets [{}, {}] fall outside the {}-byte data section (file truncated?)",
                    offs.0,
                    offs.1,
                    payload.len()
                ),
            ));
        }
        let slice = &payload[offs.0 as usize..offs.1 as usize];
        if slice.len() != nbytes {
            return Err(terr(
                path,
                name,
                format!(
                    "shape {shape:?} of {dtype} needs {nbytes} bytes but data_offsets span {}",
                    slice.len()
                ),
            ));
        }
        let t = Tensor::from_le_bytes(&shape, dtype, slice)
            .ok_or_else(|| terr(path, name, "invalid data (bool bytes must be 0 or 1)"))?;
        out.insert(name.clone(), t);
    }
    Ok((out, meta))
}

/// Serialises tensors (sorted by name) and optional metadata as safetensors bytes.
pub fn safetensors_bytes(tensors: &TensorMap, meta: &BTreeMap<String, String>) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    if !meta.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> = meta
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        header.insert("__metadata__".into(), serde_json::Value::Object(m));
    }
    let mut data = Vec::new();
    for (name, t) in tensors {
        let b = t.to_le_bytes();
        let begin = data.len();
        data.extend_from_slice(&b);
        header.insert(
            name.clone(),
            serde_json::json!({
                "dtype": st_name(t.dtype()),
                "shape": t.shape,
                "data_offsets": [begin, data.len()],
            }),
        );
    }
    let mut h = serde_json::Value::Object(header).to_string().into_bytes();
    while !(h.len() + 8).is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + h.len() + data.len());
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(&data);
    out
}

fn npy_descr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::Bool => "|b1",
        DType::U8 => "|u1",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::I32 => "<i4",
        DType::U32 => "<u4",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::BF16 => return None,
    })
}

/// `.npy` bytes of one tensor (format version 1.0, C order). bf16 has no numpy dtype: it is
/// rejected with a hint to use safetensors.
pub fn npy_bytes(t: &Tensor) -> Option<Vec<u8>> {
    let descr = npy_descr(t.dtype())?;
    let shape = match t.shape.len() {
        1 => format!("({},)", t.shape[0]),
        _ => format!(
            "({})",
            t.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so that magic(6)+ver(2)+len(2)+header ends on a 64-byte boundary with '\n'.
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut out = Vec::new();
    out.extend_from_slice(NPY_MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(&t.to_le_bytes());
    Some(out)
}

/// Pulls `'key': value` out of a numpy header dict literal.
fn dict_value<'a>(h: &'a str, key: &str) -> Option<&'a str> {
    let pat1 = format!("'{key}'");
    let pat2 = format!("\"{key}\"");
    let i = h.find(&pat1).or_else(|| h.find(&pat2))? + pat1.len();
    let rest = h[i..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else if rest.starts_with('\'') || rest.starts_with('"') {
        let q = rest.chars().next()?;
        rest[1..].find(q)? + 2
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    Some(rest[..end].trim())
}

/// Parses one `.npy` payload (versions 1, 2, 3; little- or big-endian; C or Fortran order).
pub fn parse_npy(bytes: &[u8], path: &Path, name: &str) -> Result<Tensor, IoError> {
    let e = |m: String| terr(path, name, m);
    if !bytes.starts_with(NPY_MAGIC) || bytes.len() < 10 {
        return Err(e(
            "not a .npy payload (missing \\x93NUMPY magic or truncated)".into(),
        ));
    }
    let major = bytes[6];
    let (hlen, hstart) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(e("truncated .npy header".into()));
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return Err(e(format!("unsupported .npy format version {v}"))),
    };
    let hend = hstart
        .checked_add(hlen)
        .filter(|&x| x <= bytes.len())
        .ok_or_else(|| {
            e(format!(
                "header length {hlen} runs past the end of the file (truncated)"
            ))
        })?;
    let h = std::str::from_utf8(&bytes[hstart..hend])
        .map_err(|_| e("header is not valid text".into()))?;
    let descr = dict_value(h, "descr")
        .map(|s| s.trim_matches(|c| c == '\'' || c == '"'))
        .ok_or_else(|| e(format!("header has no 'descr': {h}")))?;
    let fortran = dict_value(h, "fortran_order")
        .map(|s| s == "True")
        .ok_or_else(|| e(format!("header has no 'fortran_order': {h}")))?;
    let shape_s = dict_value(h, "shape").ok_or_else(|| e(format!("header has no 'shape': {h}")))?;
    let shape: Vec<usize> = shape_s
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| {
            e(format!(
                "shape {shape_s} is not a tuple of non-negative integers"
            ))
        })?;
    // The byte-order character is ASCII; anything else (including a multi-byte first char,
    // which `split_at(1)` would panic on) is an unsupported descr.
    let (endian, code) = match descr.get(..1) {
        Some(e @ ("<" | ">" | "|" | "=")) => (e, &descr[1..]),
        _ => ("?", descr),
    };
    let big = endian == ">";
    let dtype = match code {
        "b1" => DType::Bool,
        "u1" => DType::U8,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "u2" => DType::U16,
        "i4" => DType::I32,
        "u4" => DType::U32,
        "i8" => DType::I64,
        "f2" => DType::F16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        _ if endian == "?" => {
            return Err(e(format!(
                "unsupported numpy dtype '{descr}' (expected a byte-order character <, >, | or = then a type code such as f4)"
            )))
        }
        _ => {
            return Err(e(format!(
                "unsupported numpy dtype '{descr}'; duet reads bool, u8, i8, i16, u16, i32, u32, i64, f16, f32, f64 (save bf16 as safetensors)"
            )))
        }
    };
    let n = checked_numel(&shape).ok_or_else(|| e(format!("shape {shape:?} is absurdly large")))?;
    let need = n
        .checked_mul(dtype.size())
        .ok_or_else(|| e(format!("shape {shape:?} is absurdly large")))?;
    let data = &bytes[hend..];
    if data.len() != need {
        return Err(e(format!(
            "shape {shape:?} of {dtype} needs {need} bytes but the file holds {} (truncated?)",
            data.len()
        )));
    }
    let mut raw = data.to_vec();
    let sz = dtype.size();
    if big && sz > 1 {
        for c in raw.chunks_exact_mut(sz) {
            c.reverse();
        }
    }
    if fortran && shape.len() > 1 {
        raw = fortran_to_c(&raw, &shape, sz);
    }
    Tensor::from_le_bytes(&shape, dtype, &raw)
        .ok_or_else(|| e("invalid data (bool bytes must be 0 or 1)".into()))
}

/// Reorders column-major element bytes into row-major.
fn fortran_to_c(raw: &[u8], shape: &[usize], sz: usize) -> Vec<u8> {
    let n: usize = shape.iter().product();
    let mut out = vec![0u8; raw.len()];
    let mut idx = vec![0usize; shape.len()];
    for c_lin in 0..n {
        // idx is the multi-index of c_lin in C order; its Fortran linear offset:
        let mut f_lin = 0usize;
        let mut stride = 1usize;
        for (d, &i) in idx.iter().enumerate() {
            f_lin += i * stride;
            stride *= shape[d];
        }
        out[c_lin * sz..(c_lin + 1) * sz].copy_from_slice(&raw[f_lin * sz..(f_lin + 1) * sz]);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

fn parse_npz(bytes: &[u8], path: &Path) -> Result<TensorMap, IoError> {
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| ferr(path, format!("not a readable .npz (zip) archive: {e}")))?;
    let mut out = TensorMap::new();
    for i in 0..z.len() {
        let mut f = z
            .by_index(i)
            .map_err(|e| ferr(path, format!("zip entry {i}: {e}")))?;
        let entry = f.name().to_string();
        let name = entry.strip_suffix(".npy").unwrap_or(&entry).to_string();
        let cap = usize::try_from(f.size()).unwrap_or(usize::MAX);
        if cap > (1usize << 40) {
            return Err(terr(
                path,
                &name,
                "entry claims more than 1 TiB uncompressed",
            ));
        }
        // Reserve only what the entry can really hold: its compressed bytes lie inside this
        // file, and deflate expands at most ~1032x, so larger claimed sizes (compressed or
        // not) are not trusted for the up-front reservation.
        let plausible = usize::try_from(f.compressed_size())
            .unwrap_or(usize::MAX)
            .min(bytes.len())
            .saturating_mul(1032)
            .saturating_add(4096);
        let mut buf = Vec::with_capacity(cap.min(plausible).min(1 << 30));
        f.read_to_end(&mut buf)
            .map_err(|e| terr(path, &name, format!("cannot decompress: {e}")))?;
        let t = parse_npy(&buf, path, &name)?;
        out.insert(name, t);
    }
    Ok(out)
}

fn npz_bytes(tensors: &TensorMap, path: &Path) -> Result<Vec<u8>, IoError> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    for (name, t) in tensors {
        let b = npy_bytes(t).ok_or_else(|| {
            terr(
                path,
                name,
                format!(
                    "{} has no numpy dtype; write .safetensors instead",
                    t.dtype()
                ),
            )
        })?;
        w.start_file(format!("{name}.npy"), opts)
            .map_err(|e| terr(path, name, e.to_string()))?;
        w.write_all(&b)
            .map_err(|e| terr(path, name, e.to_string()))?;
    }
    let c = w.finish().map_err(|e| ferr(path, e.to_string()))?;
    Ok(c.into_inner())
}

/// Writes `bytes` to `path` atomically: a temporary file in the same folder, then a rename.
/// If anything fails the original file (if any) is untouched.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    if path.is_dir() {
        return Err(ferr(path, "is a directory; give a file name to write"));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let fname = path
        .file_name()
        .ok_or_else(|| ferr(path, "output path has no file name; give a file to write"))?;
    // The temporary name keeps the (possibly non-UTF-8) file name as raw OS bytes.
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(fname);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let res = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(ferr(path, format!("cannot write: {e}")));
    }
    Ok(())
}

/// Writes tensors in the format the extension names (`.safetensors`, `.npz`, or `.npy` for a
/// single tensor), atomically.
pub fn save(path: &Path, tensors: &TensorMap) -> Result<(), IoError> {
    save_with_metadata(path, tensors, &BTreeMap::new())
}

/// As [`save`], with safetensors `__metadata__` (ignored for npy / npz).
pub fn save_with_metadata(
    path: &Path,
    tensors: &TensorMap,
    meta: &BTreeMap<String, String>,
) -> Result<(), IoError> {
    let fmt = Format::from_extension(path).ok_or_else(|| {
        ferr(
            path,
            "unknown output extension; use .safetensors, .npz, or .npy (one tensor)",
        )
    })?;
    let bytes = match fmt {
        Format::Safetensors => safetensors_bytes(tensors, meta),
        Format::Npz => npz_bytes(tensors, path)?,
        Format::Npy => {
            if tensors.len() != 1 {
                return Err(ferr(
                    path,
                    format!(
                        "a .npy file holds one tensor but there are {} ({}); use .safetensors or .npz",
                        tensors.len(),
                        tensors.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            let (name, t) = tensors
                .iter()
                .next()
                .ok_or_else(|| ferr(path, "nothing to write"))?;
            npy_bytes(t).ok_or_else(|| {
                terr(
                    path,
                    name,
                    format!(
                        "{} has no numpy dtype; write .safetensors instead",
                        t.dtype()
                    ),
                )
            })?
        }
    };
    write_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TensorMap {
        let mut m = TensorMap::new();
        for (i, dt) in DType::ALL.iter().enumerate() {
            let vals: Vec<f32> = (0..6).map(|k| (k as f32 - 2.0) * 1.5 + i as f32).collect();
            let vals: Vec<f32> = if *dt == DType::Bool {
                vals.iter().map(|v| (*v as i64 % 2) as f32).collect()
            } else if matches!(dt, DType::U8 | DType::U16 | DType::U32) {
                vals.iter().map(|v| v.abs()).collect()
            } else {
                vals
            };
            m.insert(format!("t_{dt}"), Tensor::from_f32_as(&[2, 3], &vals, *dt));
        }
        m
    }

    #[test]
    fn safetensors_round_trip_all_dtypes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.safetensors");
        let m = sample();
        let mut meta = BTreeMap::new();
        meta.insert("op".into(), "cast".into());
        save_with_metadata(&p, &m, &meta).unwrap();
        let (back, meta2) = load_with_metadata(&p).unwrap();
        assert_eq!(back, m);
        assert_eq!(meta2, meta);
    }

    #[test]
    fn npz_and_npy_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let mut m = sample();
        m.remove("t_bf16");
        let p = d.path().join("a.npz");
        save(&p, &m).unwrap();
        assert_eq!(load(&p).unwrap(), m);
        let mut one = TensorMap::new();
        one.insert("x".into(), m["t_f32"].clone());
        let p1 = d.path().join("x.npy");
        save(&p1, &one).unwrap();
        assert_eq!(load(&p1).unwrap(), one);
    }

    #[test]
    fn fortran_and_big_endian_npy() {
        // A 2x3 f4 array stored big-endian, Fortran order: columns are contiguous.
        let h = "{'descr': '>f4', 'fortran_order': True, 'shape': (2, 3), }";
        let mut b = NPY_MAGIC.to_vec();
        b.extend_from_slice(&[1, 0]);
        b.extend_from_slice(&(h.len() as u16).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        for v in [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        let t = parse_npy(&b, Path::new("f.npy"), "f").unwrap();
        assert_eq!(t.as_f32().unwrap(), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    }

    #[test]
    fn bad_files_give_clear_errors() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.safetensors");
        save(&p, &sample()).unwrap();
        let full = std::fs::read(&p).unwrap();
        // Truncated data section.
        let tp = d.path().join("t.safetensors");
        std::fs::write(&tp, &full[..full.len() - 3]).unwrap();
        let msg = load(&tp).unwrap_err().to_string();
        assert!(
            msg.contains("t.safetensors") && msg.contains("tensor '"),
            "{msg}"
        );
        // Empty, garbage header length, directory.
        std::fs::write(&tp, b"").unwrap();
        assert!(load(&tp).unwrap_err().to_string().contains("empty"));
        std::fs::write(&tp, [0xff; 16]).unwrap();
        assert!(load(&tp).unwrap_err().to_string().contains("header length"));
        assert!(load(d.path())
            .unwrap_err()
            .to_string()
            .contains("directory"));
        // A header claiming 2^60 elements.
        let h = r#"{"x":{"dtype":"F32","shape":[1152921504606846976],"data_offsets":[0,4]}}"#;
        let mut b = (h.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(h.as_bytes());
        b.extend_from_slice(&[0; 4]);
        std::fs::write(&tp, &b).unwrap();
        let msg = load(&tp).unwrap_err().to_string();
        assert!(msg.contains("'x'"), "{msg}");
    }

    #[test]
    fn atomic_write_keeps_original_on_failure() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("keep.npy");
        std::fs::write(&p, b"precious").unwrap();
        // Two tensors cannot go to one .npy: error, original untouched.
        assert!(save(&p, &sample()).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"precious");
    }
}
