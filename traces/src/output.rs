//! Output files are written to a temporary file in the destination directory and renamed into
//! place, so a crash never leaves a half-written report behind.

use crate::error::{Result, TraceError};
use std::io::Write;
use std::path::Path;

/// Write `path` atomically through `f`.
pub fn write_atomic<F>(path: &Path, f: F) -> Result<()>
where
    F: FnOnce(&mut dyn Write) -> std::io::Result<()>,
{
    let werr = |e: std::io::Error| TraceError::Write {
        path: path.to_path_buf(),
        source: e,
    };
    if path.is_dir() {
        return Err(werr(std::io::Error::other(
            "is a directory; give a file name",
        )));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(".duet-trace-")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(werr)?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file());
        f(&mut w).map_err(werr)?;
        w.flush().map_err(werr)?;
    }
    tmp.as_file().sync_all().map_err(werr)?;
    tmp.persist(path).map_err(|e| werr(e.error))?;
    Ok(())
}

/// Write a string atomically.
pub fn write_string(path: &Path, s: &str) -> Result<()> {
    write_atomic(path, |w| w.write_all(s.as_bytes()))
}
