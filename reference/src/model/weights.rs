//! Weights: loaded from safetensors (one file, or shards listed by
//! `model.safetensors.index.json`) with hub names, or generated from a seed.
//!
//! A [`Mat`] is either dense f32 or *lazy*: every element is a pure function of
//! (seed, tensor name, index), so a Super-sized preset can be "built" without holding
//! 120B parameters; rows are generated when a matmul or gather needs them.

use super::nemotron::ExpertFormat;
use super::ModelError;
use crate::io;
use crate::tensor::TensorMap;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How a lazy tensor's values are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Normal(0, 1) / sqrt(fan_in): weights of linear layers and embeddings.
    Linear,
    /// `center + spread * Normal(0, 1)`.
    Around { center: f32, spread: f32 },
    /// log(1 + 15 U(0,1)): Mamba `A_log`.
    ALog,
    /// inverse softplus of dt ~ logU(1e-3, 1e-1): Mamba `dt_bias`.
    DtBias,
}

/// A row-major f32 matrix `[rows, cols]` (vectors are `[1, n]`), dense or lazily generated.
#[derive(Clone, Debug)]
pub enum Mat {
    Dense {
        rows: usize,
        cols: usize,
        data: Vec<f32>,
    },
    Lazy {
        rows: usize,
        cols: usize,
        seed: u64,
        init: Init,
    },
    /// A lazy matrix stored in another format ([`Mat::lazy_as`]): each row block is
    /// generated, then rounded to bf16 or NVFP4-quantized with `global_scale` and dequantized.
    /// NVFP4 blocks run along a row, so any row block gives the rows of the whole matrix.
    LazyAs {
        rows: usize,
        cols: usize,
        seed: u64,
        init: Init,
        format: ExpertFormat,
        /// NVFP4 encode scale `448*6/amax` (amax = the generator's bound, [`lazy_bound`]);
        /// unused for the other formats.
        global_scale: f32,
    },
}

/// The largest |value| [`normal`] can return: `(2 - 2/65536) * sqrt(3)`.
const NORMAL_MAX: f32 = (2.0 - 2.0 / 65536.0) * 1.732_050_8;

/// An upper bound of |value| of a lazy tensor with `init` and `cols` columns (the generator is
/// bounded), used as the amax of NVFP4 quantization without a pass over the values.
pub fn lazy_bound(init: Init, cols: usize) -> f32 {
    match init {
        Init::Linear => NORMAL_MAX / (cols.max(1) as f32).sqrt(),
        Init::Around { center, spread } => center.abs() + spread.abs() * NORMAL_MAX,
        // log(1 + 15 u) <= log 16
        Init::ALog => 16f32.ln(),
        // inverse softplus of dt in [1e-3, 1e-1]: |.| largest at dt = 1e-3 (~6.9)
        Init::DtBias => 7.0,
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in (0, 1) from a 64-bit hash.
fn unit(h: u64) -> f64 {
    ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// Approximately standard normal from (seed, index): the sum of four 16-bit uniforms of one
/// hash (Irwin-Hall, mean 2, variance 1/3), centred and scaled. Cheap enough to regenerate
/// Super-sized lazy weights on every use; the tails stop at +-2*sqrt(3).
fn normal(seed: u64, i: u64) -> f32 {
    let h = splitmix(seed ^ splitmix(i));
    let u = |k: u32| ((h >> (16 * k)) & 0xFFFF) as f32 * (1.0 / 65536.0);
    (u(0) + u(1) + u(2) + u(3) - 2.0 + 2.0 / 65536.0) * 1.732_050_8
}

/// A seed for a named tensor.
pub fn name_seed(seed: u64, name: &str) -> u64 {
    name.bytes()
        .fold(splitmix(seed), |h, b| splitmix(h ^ b as u64))
}

fn lazy_value(seed: u64, init: Init, cols: usize, i: u64) -> f32 {
    match init {
        Init::Linear => normal(seed, i) / (cols as f32).sqrt(),
        Init::Around { center, spread } => center + spread * normal(seed, i),
        Init::ALog => (1.0 + 15.0 * unit(splitmix(seed ^ splitmix(i))) as f32).ln(),
        Init::DtBias => {
            let u = unit(splitmix(seed ^ splitmix(i)));
            let dt = (u * 100f64.ln() + 1e-3f64.ln()).exp();
            (dt + (-(-dt).exp_m1()).ln()) as f32
        }
    }
}

impl Mat {
    pub fn dense(rows: usize, cols: usize, data: Vec<f32>) -> Mat {
        debug_assert_eq!(rows * cols, data.len());
        Mat::Dense { rows, cols, data }
    }
    pub fn rows(&self) -> usize {
        match self {
            Mat::Dense { rows, .. } | Mat::Lazy { rows, .. } | Mat::LazyAs { rows, .. } => *rows,
        }
    }
    pub fn cols(&self) -> usize {
        match self {
            Mat::Dense { cols, .. } | Mat::Lazy { cols, .. } | Mat::LazyAs { cols, .. } => *cols,
        }
    }
    /// A lazy matrix kept lazy but stored in `format` (`None` for a dense one, or when the
    /// format needs what a lazy matrix cannot give: NVFP4 with `cols % 16 != 0`). NVFP4 takes
    /// its global scale from [`lazy_bound`] instead of the values' amax (one pass over a
    /// Super-sized expert set would generate billions of values).
    pub fn lazy_as(&self, format: ExpertFormat) -> Option<Mat> {
        let Mat::Lazy {
            rows,
            cols,
            seed,
            init,
        } = *self
        else {
            return None;
        };
        if format == ExpertFormat::Nvfp4 && (cols == 0 || cols % 16 != 0) {
            return None;
        }
        Some(Mat::LazyAs {
            rows,
            cols,
            seed,
            init,
            format,
            global_scale: (448.0f32 * 6.0f32) / lazy_bound(init, cols),
        })
    }
    /// Rows `r0..r1` as one row-major slice (generated for lazy matrices).
    pub fn row_block(&self, r0: usize, r1: usize) -> Cow<'_, [f32]> {
        match self {
            Mat::Dense { cols, data, .. } => Cow::Borrowed(&data[r0 * cols..r1 * cols]),
            Mat::Lazy {
                cols, seed, init, ..
            } => {
                let (c, s, i) = (*cols, *seed, *init);
                Cow::Owned(
                    ((r0 * c) as u64..(r1 * c) as u64)
                        .map(|k| lazy_value(s, i, c, k))
                        .collect(),
                )
            }
            Mat::LazyAs {
                cols,
                seed,
                init,
                format,
                global_scale,
                ..
            } => {
                let (c, s, i) = (*cols, *seed, *init);
                let raw: Vec<f32> = ((r0 * c) as u64..(r1 * c) as u64)
                    .map(|k| lazy_value(s, i, c, k))
                    .collect();
                Cow::Owned(stored_rows(raw, r1 - r0, c, *format, *global_scale))
            }
        }
    }
    /// Every element (materialises a lazy matrix).
    pub fn values(&self) -> Cow<'_, [f32]> {
        self.row_block(0, self.rows())
    }
    /// Makes a lazy matrix dense (small tensors: norms, biases, A_log, ...).
    pub fn materialize(self) -> Mat {
        match self {
            Mat::Lazy { rows, cols, .. } | Mat::LazyAs { rows, cols, .. } => {
                let data = self.values().into_owned();
                Mat::Dense { rows, cols, data }
            }
            d => d,
        }
    }
    /// Mutable access to dense data (`None` for lazy matrices).
    pub fn dense_mut(&mut self) -> Option<&mut Vec<f32>> {
        match self {
            Mat::Dense { data, .. } => Some(data),
            Mat::Lazy { .. } | Mat::LazyAs { .. } => None,
        }
    }
}

/// Rows of a [`Mat::LazyAs`]: `raw` (rows, cols) in `format` (as [`super::nemotron::store_as`]
/// with a given NVFP4 global scale). A failing quantization (never for a lazy generator's
/// finite values) gives NaN rows, so a bad value shows up in the output instead of a panic.
fn stored_rows(
    raw: Vec<f32>,
    rows: usize,
    cols: usize,
    format: ExpertFormat,
    global_scale: f32,
) -> Vec<f32> {
    use crate::ops::nvfp4_quantize::{dequantize, quantize, Nvfp4Mode, SfLayout};
    match format {
        ExpertFormat::F32 => raw,
        ExpertFormat::Bf16 => raw.into_iter().map(crate::num::round_bf16).collect(),
        ExpertFormat::Nvfp4 => {
            match quantize(
                &raw,
                rows,
                cols,
                Some(global_scale),
                Nvfp4Mode::Kernel,
                SfLayout::Linear,
            ) {
                Ok(q) => dequantize(&q, SfLayout::Linear),
                Err(_) => vec![f32::NAN; raw.len()],
            }
        }
    }
}

/// Where weights come from.
pub enum Source {
    /// Tensors read from files, by hub name; `files` says which file held each.
    Loaded {
        tensors: TensorMap,
        files: BTreeMap<String, PathBuf>,
        dir: PathBuf,
    },
    /// Seeded random weights, generated per tensor name.
    Random { seed: u64, lazy_above: usize },
}

/// Hands out weights by name with shape checking.
pub struct WeightStore {
    pub source: Source,
    /// Names handed out (to report unused tensors).
    pub used: std::collections::BTreeSet<String>,
}

impl WeightStore {
    /// Loads `dir/model.safetensors`, or the shards of `dir/model.safetensors.index.json`.
    pub fn load_dir(dir: &Path) -> Result<WeightStore, ModelError> {
        let index = dir.join("model.safetensors.index.json");
        let single = dir.join("model.safetensors");
        let mut tensors = TensorMap::new();
        let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
        let shard_list: Vec<PathBuf> = if index.exists() {
            let text = std::fs::read_to_string(&index).map_err(|e| {
                ModelError::Weights(format!("{}: cannot read ({e})", index.display()))
            })?;
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                ModelError::Weights(format!("{}: not valid JSON ({e})", index.display()))
            })?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| {
                    ModelError::Weights(format!(
                        "{}: no 'weight_map' object (tensor name -> shard file)",
                        index.display()
                    ))
                })?;
            let mut shards: Vec<PathBuf> = map
                .values()
                .filter_map(|f| f.as_str())
                .map(|f| dir.join(f))
                .collect();
            shards.sort();
            shards.dedup();
            shards
        } else if single.exists() {
            vec![single]
        } else {
            return Err(ModelError::Weights(format!(
                "{}: no model.safetensors or model.safetensors.index.json; put the weights there",
                dir.display()
            )));
        };
        for f in shard_list {
            let m = io::load(&f)?;
            for (k, t) in m {
                if let Some(prev) = files.get(&k) {
                    return Err(ModelError::Weights(format!(
                        "tensor '{k}' appears in both {} and {}; remove the duplicate",
                        prev.display(),
                        f.display()
                    )));
                }
                files.insert(k.clone(), f.clone());
                tensors.insert(k, t);
            }
        }
        Ok(WeightStore {
            source: Source::Loaded {
                tensors,
                files,
                dir: dir.to_path_buf(),
            },
            used: Default::default(),
        })
    }

    /// Seeded random weights; tensors above `lazy_above` elements stay lazy.
    pub fn random(seed: u64, lazy_above: usize) -> WeightStore {
        WeightStore {
            source: Source::Random { seed, lazy_above },
            used: Default::default(),
        }
    }

    /// Whether a tensor exists (random sources have every tensor).
    pub fn has(&self, name: &str) -> bool {
        match &self.source {
            Source::Loaded { tensors, .. } => tensors.contains_key(name),
            Source::Random { .. } => true,
        }
    }

    /// The tensor `name` with exactly `shape` (a vector is `[n]`, a matrix `[rows, cols]`,
    /// a conv weight `[ch, 1, k]`), as a `[shape[0], rest]` matrix.
    pub fn get(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Mat, ModelError> {
        self.used.insert(name.to_string());
        let rows = shape.first().copied().unwrap_or(1);
        let cols: usize = shape.iter().skip(1).product();
        let (rows, cols) = if shape.len() == 1 {
            (1, rows)
        } else {
            (rows, cols)
        };
        match &self.source {
            Source::Random { seed, lazy_above } => {
                let m = Mat::Lazy {
                    rows,
                    cols,
                    seed: name_seed(*seed, name),
                    init,
                };
                Ok(if rows * cols <= *lazy_above {
                    m.materialize()
                } else {
                    m
                })
            }
            Source::Loaded {
                tensors,
                files,
                dir,
            } => {
                let t = tensors.get(name).ok_or_else(|| ModelError::MissingWeight {
                    name: name.to_string(),
                    shape: shape.to_vec(),
                    dir: dir.clone(),
                })?;
                if t.shape != shape {
                    return Err(ModelError::WeightShape {
                        name: name.to_string(),
                        expected: shape.to_vec(),
                        found: t.shape.clone(),
                        file: files.get(name).cloned().unwrap_or_default(),
                    });
                }
                if !t.dtype().is_float() {
                    return Err(ModelError::Weights(format!(
                        "tensor '{name}' in {} has dtype {}; expected a float type",
                        files.get(name).cloned().unwrap_or_default().display(),
                        t.dtype()
                    )));
                }
                Ok(Mat::dense(rows, cols, t.to_f32_vec()))
            }
        }
    }

    /// A vector weight as a plain Vec.
    pub fn vec(&mut self, name: &str, n: usize, init: Init) -> Result<Vec<f32>, ModelError> {
        Ok(self.get(name, &[n], init)?.values().into_owned())
    }

    /// Tensors of a loaded source never asked for (a mismatch between config and weights).
    pub fn unused(&self) -> Vec<String> {
        match &self.source {
            Source::Loaded { tensors, .. } => tensors
                .keys()
                .filter(|k| !self.used.contains(*k))
                .cloned()
                .collect(),
            Source::Random { .. } => vec![],
        }
    }
}
