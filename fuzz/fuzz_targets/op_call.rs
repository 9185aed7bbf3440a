//! Every op of the registry on arbitrary small tensors and params (what `duet run` does after
//! loading the files): `OpDef::call` must return Ok or a clean OpError, never panic. The bytes
//! pick the op, each input's presence / dtype / shape, each param's value, then fill the data
//! (with NaN / inf / -0 / subnormals among the float values).
#![no_main]
use libfuzzer_sys::fuzz_target;
use reference::op::ParamKind;
use reference::{DType, Tensor, TensorMap};

struct Bytes<'a>(&'a [u8], usize);
impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.0.get(self.1).copied().unwrap_or(0);
        self.1 += 1;
        b
    }
}

fn float_of(b: u8) -> f32 {
    match b {
        0 => f32::NAN,
        1 => f32::INFINITY,
        2 => f32::NEG_INFINITY,
        3 => -0.0,
        4 => f32::MIN_POSITIVE / 4.0,
        5 => 448.0 * 6.0,
        6 => -1e30,
        _ => (b as f32 - 128.0) / 16.0,
    }
}

fuzz_target!(|data: &[u8]| {
    let ops = reference::ops::registry();
    if ops.is_empty() {
        return;
    }
    let mut r = Bytes(data, 0);
    let def = &ops[r.u8() as usize % ops.len()];
    let mut inputs = TensorMap::new();
    let mut specs = vec![];
    for a in &def.inputs {
        let present = r.u8();
        if a.optional && present & 1 == 0 {
            continue;
        }
        let dtype = DType::ALL[(r.u8() as usize) % DType::ALL.len()];
        let rank = (r.u8() % 5) as usize;
        let shape: Vec<usize> = (0..rank).map(|_| (r.u8() % 48) as usize).collect();
        let n: usize = shape.iter().product();
        if n > 8192 {
            return;
        }
        specs.push((a.name.to_string(), shape, dtype, n));
    }
    let mut sets = vec![];
    for p in &def.params {
        let c = r.u8();
        let v = match (&p.kind, c % 6) {
            (_, 0) => continue,
            (ParamKind::Int, 1) => (r.u8() as i64).to_string(),
            (ParamKind::Int, 2) => "-1".into(),
            (ParamKind::Int, 3) => "0".into(),
            (ParamKind::Int, 4) => (1i64 << (r.u8() % 63)).to_string(),
            (ParamKind::Int, _) => (r.u8() % 8).to_string(),
            (ParamKind::Float, _) => float_of(r.u8()).to_string(),
            (ParamKind::Bool, _) => (c & 8 == 0).to_string(),
            (ParamKind::Enum(opts), _) => opts[r.u8() as usize % opts.len().max(1)].to_string(),
            (ParamKind::Str, _) => continue,
        };
        sets.push((p.name.to_string(), v));
    }
    for (name, shape, dtype, n) in specs {
        let vals: Vec<f32> = (0..n).map(|_| float_of(r.u8())).collect();
        let vals = if dtype.is_float() {
            vals
        } else {
            vals.iter()
                .map(|v| if v.is_finite() { v.round() } else { 1.0 })
                .collect()
        };
        inputs.insert(name, Tensor::from_f32_as(&shape, &vals, dtype));
    }
    let _ = def.call(&inputs, &sets);
});
