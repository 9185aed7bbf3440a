//! duet traces: ingest nsys / ncu / Kineto traces into one model, summarise, diff two runs
//! kernel by kernel, flag regressions, and convert to Chrome trace JSON.
//!
//! Entry points: [`read_trace`] streams any supported file into a [`model::Sink`];
//! [`summarize`] builds a [`summary::Summary`]; [`diff::diff`] compares two summaries.

pub mod chrome;
pub mod detect;
pub mod diff;
pub mod error;
pub mod kineto;
pub mod model;
pub mod names;
pub mod ncu;
pub mod nsys_csv;
pub mod nsys_sqlite;
pub mod output;
pub mod progress;
pub mod report;
pub mod stats;
pub mod summary;
pub mod textcsv;

pub use error::{Result, TraceError};
pub use model::{Format, Sink, SourceInfo};
pub use summary::{GroupBy, Summary, SummaryOptions};

use std::path::Path;

/// Options for reading a trace.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOptions {
    /// Show a progress bar on stderr (only drawn when stderr is a terminal).
    pub progress: bool,
    /// Name kernel events after the innermost NVTX range open at launch (nsys SQLite only).
    pub attribute_nvtx: bool,
}

/// Detect the format of `path` and stream its events into `sink`.
pub fn read_trace(path: &Path, sink: &mut dyn Sink, opts: ReadOptions) -> Result<SourceInfo> {
    let det = detect::detect(path)?;
    let mut info = SourceInfo {
        path: path.display().to_string(),
        format: Some(det.format),
        ..Default::default()
    };
    match det.format {
        Format::Kineto => kineto::read(path, det.gzip, &mut info, sink, opts.progress)?,
        Format::NsysSqlite => {
            if let detect::Opened::Sqlite { path: db, _tmp } = detect::open(path, &det)? {
                nsys_sqlite::read_with(&db, &mut info, sink, opts.progress, opts.attribute_nvtx)
                    .map_err(|e| {
                        // errors name the user's file, not the temp copy
                        if det.gzip {
                            rename_path(e, path)
                        } else {
                            e
                        }
                    })?
            }
        }
        Format::NcuCsv | Format::NsysStatsCsv => {
            // stream through a byte counter so long CSV loads can show progress
            let (raw, counter, len) = kineto::open_stream(path, det.gzip)?;
            let reader: Box<dyn std::io::BufRead> =
                Box::new(std::io::BufReader::with_capacity(1 << 20, raw));
            let ticker = Some(textcsv::Ticker {
                bar: progress::Progress::new(opts.progress, len, "CSV rows", true),
                counter,
            });
            if det.format == Format::NcuCsv {
                ncu::read_with_progress(path, reader, det.gzip, &mut info, sink, ticker)?
            } else {
                nsys_csv::read_with_progress(path, reader, det.gzip, &mut info, sink, ticker)?
            }
        }
    }
    Ok(info)
}

fn rename_path(e: TraceError, user: &Path) -> TraceError {
    match e {
        TraceError::Sqlite {
            context, source, ..
        } => TraceError::Sqlite {
            path: user.to_path_buf(),
            context,
            source,
        },
        TraceError::NotNsys { what, .. } => TraceError::NotNsys {
            path: user.to_path_buf(),
            what,
        },
        other => other,
    }
}

/// Read `path` and summarise it.
pub fn summarize(path: &Path, opts: SummaryOptions, read: ReadOptions) -> Result<Summary> {
    let mut agg = summary::Aggregator::new();
    let mut read = read;
    if opts.group_by == GroupBy::NvtxKernels {
        let det = detect::detect(path)?;
        if det.format != Format::NsysSqlite {
            return Err(TraceError::Unsupported {
                path: path.to_path_buf(),
                what: format!("a {}", det.format.label()),
                why: "--group-by nvtx-kernels needs an nsys SQLite export (kernels are joined to NVTX ranges through their launch calls); use --group-by nvtx for range durations".into(),
            });
        }
        read.attribute_nvtx = true;
    }
    let info = read_trace(path, &mut agg, read)?;
    Ok(agg.finish(info, opts))
}
