//! duet traces: ingest nsys / ncu / Kineto traces into one model, summarise, diff two runs
//! kernel by kernel, flag regressions, and convert to Chrome trace JSON.

pub mod detect;
pub mod error;
pub mod model;
pub mod names;
pub mod ncu;
pub mod nsys_csv;
pub mod nsys_sqlite;
pub mod progress;

pub use error::{Result, TraceError};
