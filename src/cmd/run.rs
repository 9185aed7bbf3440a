//! `duet run OP --in FILE [--in FILE ...] --out FILE [--set key=value ...] [--backend cpu|gpu]`

use anyhow::{bail, Context};
use reference::{io, TensorMap};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Op name (`duet ops` lists them).
    op: String,
    /// Input file: safetensors / .npz (tensors by name) or .npy (named after the file stem,
    /// or `NAME=FILE.npy`). Repeatable.
    #[arg(long = "in", required = true)]
    inputs: Vec<String>,
    /// Output file (.safetensors, .npz, or .npy for a single output); written atomically.
    #[arg(long)]
    out: PathBuf,
    /// Param as key=value. Repeatable.
    #[arg(long = "set")]
    sets: Vec<String>,
    /// Which implementation runs the op.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "gpu"])]
    backend: String,
    /// Drop tensors the op does not take instead of failing.
    #[arg(long)]
    ignore_extra: bool,
}

/// Parses `key=value` pairs.
pub fn parse_sets(sets: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    sets.iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((k.trim().to_string(), v.trim().to_string()))
            }
            _ => bail!("--set '{s}': expected KEY=VALUE, e.g. --set top_k=22"),
        })
        .collect()
}

/// Loads every `--in` argument into one map; a name given twice is an error.
pub fn load_inputs(specs: &[String]) -> anyhow::Result<TensorMap> {
    let mut all = TensorMap::new();
    for spec in specs {
        let (rename, path) = match spec.split_once('=') {
            Some((n, p)) if !n.contains('/') && !n.is_empty() => {
                (Some(n.to_string()), PathBuf::from(p))
            }
            _ => (None, PathBuf::from(spec)),
        };
        let mut m = io::load(&path)?;
        if let Some(n) = rename {
            if m.len() != 1 {
                bail!(
                    "--in {spec}: NAME=FILE renames a single tensor but {} holds {}",
                    path.display(),
                    m.len()
                );
            }
            let t = m.pop_first().map(|(_, t)| t).context("empty file")?;
            m.insert(n, t);
        }
        for (k, t) in m {
            if all.contains_key(&k) {
                bail!(
                    "tensor '{k}' is given twice (again in {}); pass each input once",
                    path.display()
                );
            }
            all.insert(k, t);
        }
    }
    Ok(all)
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let def = reference::ops::find(&args.op)?;
    let mut inputs = load_inputs(&args.inputs)?;
    if args.ignore_extra {
        inputs.retain(|k, _| def.inputs.iter().any(|a| a.name == k));
    }
    let sets = parse_sets(&args.sets)?;
    let outputs = match args.backend.as_str() {
        "gpu" => {
            def.check_input_names(&inputs)?;
            reference::op::Params::resolve(&def, &sets)?;
            gpu::run(&args.op, &inputs, &sets)?
        }
        _ => def.call(&inputs, &sets)?,
    };
    io::save(&args.out, &outputs)?;
    for (k, t) in &outputs {
        eprintln!("wrote {k}: {} {:?}", t.dtype(), t.shape);
    }
    eprintln!("-> {}", args.out.display());
    Ok(0)
}
