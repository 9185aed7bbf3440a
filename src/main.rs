//! `duet`: the command-line front of the workbench.
//!
//! Each subcommand lives in `src/cmd/<name>.rs` with a clap `Args` struct and a
//! `run(args) -> anyhow::Result<i32>` that returns the process exit code.

mod cmd;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "duet",
    version,
    about = "Simulation-first workbench for Nemotron 3 Super inference kernels"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every op with its inputs, params and outputs.
    Ops(cmd::ops::Args),
    /// Run one op on tensors from safetensors / .npy / .npz files.
    Run(cmd::run::Args),
    /// Diff two tensor files tensor by tensor.
    Compare(cmd::compare::Args),
    /// Run every case of the case table through every implementation.
    Check(cmd::check::Args),
    /// Time cases of the case table (CPU reference or GPU kernels); JSON results.
    Bench(cmd::bench::Args),
    /// Profile an op's GPU kernels under Nsight Compute and print the key metrics.
    Profile(cmd::profile::Args),
    /// Autotune a kernel's tile configs with an accuracy filter; persist the winner.
    Tune(cmd::tune::Args),
    /// Ingest, summarise, diff and convert nsys / ncu / Kineto traces.
    Trace(cmd::trace::Args),
    /// Run the Nemotron-H model end to end and compare it with a golden, layer by layer.
    E2e(cmd::e2e::Args),
}

/// Keeps freed heap memory in the process instead of returning it to the kernel after every
/// large temporary (glibc trims the heap top once more than 2 x the dynamic mmap threshold is
/// free, so every op call that built a few 4 MB tensors page-faulted them in again). Measured
/// here (session 5) on one decode `selective_state_update` at the Super shape through the op
/// runner's host path: 5.2 ms of host work per call before, 1.6 ms after; on the H200 the GPU
/// model's decode step spent 29 of its 45 ms in those four calls. Allocations above 32 MB (the
/// glibc maximum for this threshold) still come from mmap.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets two glibc allocator thresholds; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}

fn main() {
    tune_allocator();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Ops(a) => cmd::ops::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Trace(a) => cmd::trace::run(a),
        Command::E2e(a) => cmd::e2e::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Profile(a) => cmd::profile::run(a),
        Command::Tune(a) => cmd::tune::run(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            std::process::exit(2);
        }
    }
}

/// The error and its causes, `: `-joined like anyhow's `{:#}`, but without a cause whose text
/// the message before it already ends with (the traces crate's errors print their source in
/// their own message: "x.sqlite: cannot read: No such file" once, not twice).
fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if out.is_empty() {
            out = c;
        } else if !out.ends_with(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// Like the traces crate's `TraceError::Io`: the source in the message and as `source()`.
    #[derive(Debug)]
    struct Wraps {
        source: std::io::Error,
    }
    impl std::fmt::Display for Wraps {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "f.sqlite: cannot read: {}", self.source)
        }
    }
    impl std::error::Error for Wraps {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn error_text_drops_a_cause_the_message_already_ends_with() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::from(Wraps { source: io });
        assert_eq!(super::error_text(&e), "f.sqlite: cannot read: No such file");
        // a context whose cause is not in its text keeps both
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::error_text(&e), "outer: inner");
    }
}
