//! `check_golden_with`: a golden file's inputs and params reach other backends (the GPU kernels
//! in `duet check --backend gpu`), which are held to the file's tolerances: a faithful
//! backend passes, a backend off by one bit fails, a backend for another op is not asked.

use compare::check::{check_golden_with, Backend};
use compare::Case;
use reference::{Data, TensorMap};
use std::path::PathBuf;

struct Fake {
    op: &'static str,
    flip: bool,
}

impl Backend for Fake {
    fn name(&self) -> String {
        format!("fake:{}:{}", self.op, if self.flip { "flip" } else { "ok" })
    }
    fn supports(&self, case: &dyn Case) -> bool {
        case.op() == self.op
    }
    fn run(&self, case: &dyn Case, inputs: &TensorMap) -> Result<TensorMap, String> {
        let def = reference::ops::find(case.op()).map_err(|e| e.to_string())?;
        let mut out = def
            .call(inputs, &case.params())
            .map_err(|e| e.to_string())?;
        if self.flip {
            for t in out.values_mut() {
                if let Data::U32(v) = &mut t.data {
                    v[0] ^= 1;
                }
            }
        }
        Ok(out)
    }
}

fn golden() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/goldens/philox-random123-r10.safetensors")
}

#[test]
fn goldens_reach_other_backends_at_the_files_tolerances() {
    let ok = Fake {
        op: "philox",
        flip: false,
    };
    let bad = Fake {
        op: "philox",
        flip: true,
    };
    let other = Fake {
        op: "cast",
        flip: true,
    };
    let rows = check_golden_with(&golden(), &[&ok, &bad, &other]);
    let of = |imp: &str| {
        rows.iter()
            .filter(|r| r.implementation == imp)
            .collect::<Vec<_>>()
    };
    let reference: Vec<_> = rows
        .iter()
        .filter(|r| r.implementation.starts_with("golden["))
        .collect();
    assert!(
        !reference.is_empty() && reference.iter().all(|r| r.passed),
        "{rows:#?}"
    );
    let good = of("fake:philox:ok[golden]");
    assert!(
        !good.is_empty() && good.iter().all(|r| r.passed),
        "{rows:#?}"
    );
    let flipped = of("fake:philox:flip[golden]");
    assert!(
        !flipped.is_empty() && flipped.iter().all(|r| !r.passed),
        "{rows:#?}"
    );
    assert!(
        of("fake:cast:flip[golden]").is_empty(),
        "a backend of another op ran: {rows:#?}"
    );
}
