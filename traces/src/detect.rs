//! Format detection by content (magic bytes, JSON, CSV header kinds), not by extension.

use crate::error::{Result, TraceError};
use crate::model::Format;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";
const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const SNIFF: usize = 64 * 1024;

/// What detection found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    pub format: Format,
    pub gzip: bool,
}

/// An opened input: either a path to a real SQLite file (decompressed into a temp dir when the
/// input was gzip) or a buffered text reader.
pub enum Opened {
    Sqlite {
        path: PathBuf,
        _tmp: Option<tempfile::TempDir>,
    },
    Text {
        reader: Box<dyn BufRead>,
    },
}

fn read_prefix(r: &mut dyn Read, max: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(max.min(1 << 16));
    r.take(max as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

fn check_file(path: &Path) -> Result<u64> {
    let meta = std::fs::metadata(path).map_err(|e| TraceError::io(path, e))?;
    if meta.is_dir() {
        return Err(TraceError::IsDirectory {
            path: path.to_path_buf(),
        });
    }
    if meta.len() == 0 {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(meta.len())
}

/// Sniff the file's format.
pub fn detect(path: &Path) -> Result<Detected> {
    check_file(path)?;
    let mut f = File::open(path).map_err(|e| TraceError::io(path, e))?;
    let head = read_prefix(&mut f, SNIFF).map_err(|e| TraceError::io(path, e))?;
    if head.starts_with(GZIP_MAGIC) {
        let f = File::open(path).map_err(|e| TraceError::io(path, e))?;
        let mut gz = flate2::read::MultiGzDecoder::new(f);
        let inner = match read_prefix(&mut gz, SNIFF) {
            Ok(b) => b,
            Err(e) => {
                return Err(TraceError::Gzip {
                    path: path.to_path_buf(),
                    source: e,
                })
            }
        };
        if inner.is_empty() {
            return Err(TraceError::Empty {
                path: path.to_path_buf(),
            });
        }
        let format = sniff_bytes(path, &inner, true)?;
        return Ok(Detected { format, gzip: true });
    }
    let format = sniff_bytes(path, &head, false)?;
    Ok(Detected {
        format,
        gzip: false,
    })
}

fn sniff_bytes(path: &Path, head: &[u8], gz: bool) -> Result<Format> {
    if head.starts_with(SQLITE_MAGIC) {
        return Ok(Format::NsysSqlite);
    }
    if head.len() >= 100 && head[..100].iter().all(|&b| b == 0) {
        return Err(TraceError::ZeroedSqliteHeader {
            path: path.to_path_buf(),
            zeros: head.iter().take_while(|&&b| b == 0).count(),
        });
    }
    let ext = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let binary_hint = |what: &str, how: &str| TraceError::Unsupported {
        path: path.to_path_buf(),
        what: what.to_string(),
        why: how.to_string(),
    };
    if ext.ends_with(".nsys-rep") || ext.ends_with(".qdrep") || ext.ends_with(".nsys-rep.gz") {
        return Err(binary_hint(
            "an nsys binary report",
            "export it first: `nsys export --type sqlite -o out.sqlite FILE` (or `nsys stats --format csv`)",
        ));
    }
    if ext.ends_with(".ncu-rep") || ext.ends_with(".ncu-rep.gz") {
        return Err(binary_hint(
            "an Nsight Compute binary report",
            "export it first: `ncu -i FILE --csv --page raw > out.csv` (or `--page details`)",
        ));
    }
    // Text formats from here on: must be UTF-8 (allow a sequence cut at the sniff boundary).
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) => {
            let cut_at_end = e.error_len().is_none();
            if cut_at_end {
                // valid up to the boundary
                std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or("")
            } else {
                let nul = head.contains(&0);
                if nul {
                    return Err(TraceError::UnknownFormat {
                        path: path.to_path_buf(),
                        hint: format!(
                            "binary data that is not SQLite{}: expected an nsys .sqlite export, nsys stats / ncu CSV, or Kineto JSON",
                            if gz { " (inside gzip)" } else { "" }
                        ),
                    });
                }
                return Err(TraceError::NotUtf8 {
                    path: path.to_path_buf(),
                    offset: e.valid_up_to() as u64,
                });
            }
        }
    };
    let text = text.trim_start_matches('\u{feff}');
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return Ok(Format::Kineto);
    }
    if text.contains('\0') {
        return Err(TraceError::UnknownFormat {
            path: path.to_path_buf(),
            hint: "binary data (NUL bytes)".into(),
        });
    }
    let mut saw_prof = false;
    for line in text.lines() {
        if line.starts_with("\"Launch Attribute\"") || line.starts_with("\"Session Attribute\"") {
            return Err(TraceError::Unsupported {
                path: path.to_path_buf(),
                what: "an Nsight Compute `--page session` export".into(),
                why: "it describes the session, not kernels; export with `--page raw` or `--page details`".into(),
            });
        }
        let l = line.trim();
        if l.starts_with("==PROF==") || l.starts_with("==WARNING==") || l.starts_with("==ERROR==") {
            saw_prof = true;
            continue;
        }
        if crate::ncu::is_ncu_header(l) {
            return Ok(Format::NcuCsv);
        }
        if crate::nsys_csv::classify_header_line(l).is_some() {
            return Ok(Format::NsysStatsCsv);
        }
    }
    if saw_prof {
        return Ok(Format::NcuCsv);
    }
    Err(TraceError::UnknownFormat {
        path: path.to_path_buf(),
        hint: "no SQLite/gzip magic, not JSON, and no known CSV header (nsys stats report or ncu --csv) in the first 64 KiB".into(),
    })
}

/// Open a detected input for reading.
pub fn open(path: &Path, det: &Detected) -> Result<Opened> {
    match (det.format, det.gzip) {
        (Format::NsysSqlite, false) => Ok(Opened::Sqlite {
            path: path.to_path_buf(),
            _tmp: None,
        }),
        (Format::NsysSqlite, true) => {
            let dir = tempfile::tempdir().map_err(|e| TraceError::io(path, e))?;
            let out = dir.path().join("trace.sqlite");
            let f = File::open(path).map_err(|e| TraceError::io(path, e))?;
            let mut gz = flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 20, f));
            let mut w = File::create(&out).map_err(|e| TraceError::io(&out, e))?;
            std::io::copy(&mut gz, &mut w).map_err(|e| TraceError::Gzip {
                path: path.to_path_buf(),
                source: e,
            })?;
            Ok(Opened::Sqlite {
                path: out,
                _tmp: Some(dir),
            })
        }
        (_, gz) => {
            let f = File::open(path).map_err(|e| TraceError::io(path, e))?;
            let reader: Box<dyn BufRead> = if gz {
                Box::new(BufReader::with_capacity(
                    1 << 20,
                    flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 20, f)),
                ))
            } else {
                Box::new(BufReader::with_capacity(1 << 20, f))
            };
            Ok(Opened::Text { reader })
        }
    }
}

/// Map an I/O error raised while reading a (possibly gzip) stream to a clear error.
pub(crate) fn stream_error(path: &Path, gz: bool, e: std::io::Error) -> TraceError {
    if gz {
        TraceError::Gzip {
            path: path.to_path_buf(),
            source: e,
        }
    } else if e.kind() == std::io::ErrorKind::InvalidData {
        TraceError::NotUtf8 {
            path: path.to_path_buf(),
            offset: 0,
        }
    } else {
        TraceError::io(path, e)
    }
}
