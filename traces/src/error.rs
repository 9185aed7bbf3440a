//! Error type of the traces crate: every variant says what was wrong, where, and how to fix it.

use std::path::PathBuf;

/// Everything that can go wrong while reading, analysing or writing traces.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: is a directory; pass a trace file (nsys .sqlite, nsys stats / ncu .csv, Kineto .json[.gz])")]
    IsDirectory { path: PathBuf },
    #[error("{path}: file is empty (0 bytes); the capture or export did not finish, re-run it")]
    Empty { path: PathBuf },
    #[error("{path}: unrecognised trace format ({hint})")]
    UnknownFormat { path: PathBuf, hint: String },
    #[error("{path}: SQLite header is zeroed (first {zeros} bytes are 0): this is a half-written nsys export; re-run `nsys export --type sqlite` and let it finish")]
    ZeroedSqliteHeader { path: PathBuf, zeros: usize },
    #[error("{path}: SQLite error{context}: {source}; the file may be truncated or corrupt, re-export it with `nsys export --type sqlite --force-overwrite true`")]
    Sqlite {
        path: PathBuf,
        context: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{path}: not an nsys SQLite export: {what}")]
    NotNsys { path: PathBuf, what: String },
    #[error(
        "{path}: gzip stream is corrupt or truncated: {source}; re-copy or re-compress the file"
    )]
    Gzip {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: invalid JSON at line {line}, column {column}: {msg}")]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        msg: String,
    },
    #[error("{path}: not a Kineto / PyTorch profiler trace: {what}")]
    NotKineto { path: PathBuf, what: String },
    #[error("{path}: line {line}: {msg}")]
    Csv {
        path: PathBuf,
        line: u64,
        msg: String,
    },
    #[error("{path}: not valid UTF-8 text (first bad byte at offset {offset}); traces in CSV/JSON form must be UTF-8")]
    NotUtf8 { path: PathBuf, offset: u64 },
    #[error("{path}: {what} cannot be used here: {why}")]
    Unsupported {
        path: PathBuf,
        what: String,
        why: String,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid option: {0}")]
    Option(String),
}

pub type Result<T> = std::result::Result<T, TraceError>;

impl TraceError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        TraceError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
    pub(crate) fn sqlite(path: &std::path::Path, context: &str, source: rusqlite::Error) -> Self {
        TraceError::Sqlite {
            path: path.to_path_buf(),
            context: if context.is_empty() {
                String::new()
            } else {
                format!(" ({context})")
            },
            source,
        }
    }
    pub(crate) fn csv(path: &std::path::Path, line: u64, msg: impl Into<String>) -> Self {
        TraceError::Csv {
            path: path.to_path_buf(),
            line,
            msg: msg.into(),
        }
    }
}
