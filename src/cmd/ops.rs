//! `duet ops [--json]`: every op with its inputs, params and outputs.

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let ops = reference::ops::registry();
    let gpu = gpu::gpu_ops();
    let kernels = |name: &str| -> Vec<&'static str> {
        gpu.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    if args.json {
        let v: Vec<serde_json::Value> = ops
            .iter()
            .map(|d| {
                let mut j = serde_json::to_value(d).unwrap_or_default();
                j["gpu_kernels"] = serde_json::json!(kernels(d.name));
                j
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    for d in &ops {
        let k = kernels(d.name);
        println!(
            "{}  — {}{}",
            d.name,
            d.summary,
            if k.is_empty() {
                String::new()
            } else {
                format!("  [gpu: {}]", k.join(", "))
            }
        );
        for a in &d.inputs {
            println!(
                "    in   {:<22} {:<40} {}{}",
                a.name,
                a.shape,
                a.dtypes,
                if a.optional { "  (optional)" } else { "" }
            );
        }
        for p in &d.params {
            println!(
                "    set  {:<22} {:<40} default {}",
                p.name,
                format!("{:?}", p.kind).to_lowercase(),
                p.default.unwrap_or("(none)")
            );
        }
        for a in &d.outputs {
            println!("    out  {:<22} {:<40} {}", a.name, a.shape, a.dtypes);
        }
    }
    Ok(0)
}
