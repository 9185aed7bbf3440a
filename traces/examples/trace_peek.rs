//! Developer helper: `cargo run -p duet-traces --example trace_peek -- summary FILE [group]`
//! or `... -- diff BASE CAND [group]` (the real CLI is `duet trace`).
use std::path::Path;
use traces::summary::{GroupBy, SummaryOptions};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 3 {
        eprintln!("usage: trace_peek summary FILE [group] | diff BASE CAND [group]");
        std::process::exit(2);
    }
    let ro = traces::ReadOptions {
        progress: true,
        ..Default::default()
    };
    let code = match a[1].as_str() {
        "summary" => {
            let g = a.get(3).and_then(|g| GroupBy::parse(g)).unwrap_or_default();
            match traces::summarize(
                Path::new(&a[2]),
                SummaryOptions {
                    group_by: g,
                    merge_devices: false,
                },
                ro,
            ) {
                Ok(s) => {
                    print!("{}", traces::report::summary_text(&s, 25));
                    0
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    2
                }
            }
        }
        "diff" => {
            let g = a.get(4).and_then(|g| GroupBy::parse(g)).unwrap_or_default();
            let o = SummaryOptions {
                group_by: g,
                merge_devices: false,
            };
            let r = traces::summarize(Path::new(&a[2]), o, ro).and_then(|b| {
                let c = traces::summarize(Path::new(&a[3]), o, ro)?;
                traces::diff::diff(&b, &c, &Default::default())
            });
            match r {
                Ok(d) => {
                    if std::env::var("PEEK_JSON").is_ok() {
                        println!("{}", serde_json::to_string(&d).unwrap_or_default());
                    } else {
                        print!("{}", traces::report::diff_text(&d, 25, false));
                    }
                    0
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    2
                }
            }
        }
        _ => 2,
    };
    std::process::exit(code);
}
