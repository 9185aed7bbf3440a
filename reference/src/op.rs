//! What every op shares: its description (inputs, params, outputs), parameter parsing and
//! input validation with errors that say what, where and how to fix it.

use crate::tensor::{DType, Tensor, TensorMap};
use std::collections::BTreeMap;

/// An op failed: bad inputs or params (the user's to fix), or an unsupported combination.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("{op}: missing input '{name}' ({shape}); pass it with --in FILE containing a tensor named '{name}'")]
    MissingInput {
        op: String,
        name: String,
        shape: String,
    },
    #[error("{op}: unknown input '{name}'; this op takes {expected}")]
    UnknownInput {
        op: String,
        name: String,
        expected: String,
    },
    #[error("{op}: input '{name}': {msg}")]
    Input {
        op: String,
        name: String,
        msg: String,
    },
    #[error("{op}: param '{name}': {msg}")]
    Param {
        op: String,
        name: String,
        msg: String,
    },
    #[error("{op}: {msg}")]
    Invalid { op: String, msg: String },
    #[error("unknown op '{0}'; `duet ops` lists them")]
    UnknownOp(String),
}

/// One tensor argument (input or output) of an op.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ArgSpec {
    pub name: &'static str,
    /// Shape pattern with upstream dimension names, e.g. `(batch, nheads, dim, dstate)`.
    pub shape: &'static str,
    /// Accepted dtypes, e.g. `f32|bf16|f16`.
    pub dtypes: &'static str,
    pub optional: bool,
    pub doc: &'static str,
}

impl ArgSpec {
    pub const fn req(
        name: &'static str,
        shape: &'static str,
        dtypes: &'static str,
        doc: &'static str,
    ) -> ArgSpec {
        ArgSpec {
            name,
            shape,
            dtypes,
            optional: false,
            doc,
        }
    }
    pub const fn opt(
        name: &'static str,
        shape: &'static str,
        dtypes: &'static str,
        doc: &'static str,
    ) -> ArgSpec {
        ArgSpec {
            name,
            shape,
            dtypes,
            optional: true,
            doc,
        }
    }
}

/// The type of a param, for parsing `--set name=value`.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamKind {
    Int,
    Float,
    Bool,
    Str,
    Enum(&'static [&'static str]),
}

/// One scalar param of an op. `default: None` means required (or "absent" when documented).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ParamSpec {
    pub name: &'static str,
    pub kind: ParamKind,
    pub default: Option<&'static str>,
    pub doc: &'static str,
}

impl ParamSpec {
    pub const fn new(
        name: &'static str,
        kind: ParamKind,
        default: Option<&'static str>,
        doc: &'static str,
    ) -> ParamSpec {
        ParamSpec {
            name,
            kind,
            default,
            doc,
        }
    }
}

/// The signature of an op's CPU reference entry point.
pub type RunFn = fn(&TensorMap, &Params) -> Result<TensorMap, OpError>;

/// An op: its description and its CPU reference.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OpDef {
    pub name: &'static str,
    pub summary: &'static str,
    pub inputs: Vec<ArgSpec>,
    pub params: Vec<ParamSpec>,
    pub outputs: Vec<ArgSpec>,
    #[serde(skip)]
    pub run: RunFn,
}

impl OpDef {
    /// Validates input names, resolves params from `--set` pairs, runs the reference.
    pub fn call(
        &self,
        inputs: &TensorMap,
        sets: &[(String, String)],
    ) -> Result<TensorMap, OpError> {
        self.check_input_names(inputs)?;
        let p = Params::resolve(self, sets)?;
        (self.run)(inputs, &p)
    }

    /// Rejects tensors this op does not take (a misspelt name would otherwise be ignored).
    pub fn check_input_names(&self, inputs: &TensorMap) -> Result<(), OpError> {
        for k in inputs.keys() {
            if !self.inputs.iter().any(|a| a.name == k) {
                return Err(OpError::UnknownInput {
                    op: self.name.into(),
                    name: k.clone(),
                    expected: self
                        .inputs
                        .iter()
                        .map(|a| {
                            if a.optional {
                                format!("[{}]", a.name)
                            } else {
                                a.name.to_string()
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        }
        for a in &self.inputs {
            if !a.optional && !inputs.contains_key(a.name) {
                return Err(OpError::MissingInput {
                    op: self.name.into(),
                    name: a.name.into(),
                    shape: a.shape.into(),
                });
            }
        }
        Ok(())
    }
}

/// Resolved params of one call: defaults overridden by `--set` values, all validated.
#[derive(Clone, Debug, Default)]
pub struct Params {
    op: String,
    values: BTreeMap<String, String>,
}

impl Params {
    /// Defaults of `def` overridden by `sets`; unknown names and unparsable values are errors.
    pub fn resolve(def: &OpDef, sets: &[(String, String)]) -> Result<Params, OpError> {
        let mut values = BTreeMap::new();
        for p in &def.params {
            if let Some(d) = p.default {
                values.insert(p.name.to_string(), d.to_string());
            }
        }
        for (k, v) in sets {
            let spec = def
                .params
                .iter()
                .find(|p| p.name == k)
                .ok_or_else(|| OpError::Param {
                    op: def.name.into(),
                    name: k.clone(),
                    msg: format!(
                        "unknown param; {} takes {}",
                        def.name,
                        def.params
                            .iter()
                            .map(|p| p.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                })?;
            let bad = |what: &str| OpError::Param {
                op: def.name.into(),
                name: k.clone(),
                msg: format!("'{v}' is not {what}"),
            };
            match spec.kind {
                ParamKind::Int => {
                    v.parse::<i64>().map_err(|_| bad("an integer"))?;
                }
                ParamKind::Float => {
                    v.parse::<f64>().map_err(|_| bad("a number"))?;
                }
                ParamKind::Bool => {
                    parse_bool(v).ok_or_else(|| bad("true or false"))?;
                }
                ParamKind::Enum(opts) => {
                    if !opts.contains(&v.as_str()) {
                        return Err(bad(&format!("one of {}", opts.join(", "))));
                    }
                }
                ParamKind::Str => {}
            }
            values.insert(k.clone(), v.clone());
        }
        Ok(Params {
            op: def.name.into(),
            values,
        })
    }

    /// Params from plain pairs, without an `OpDef` (for ops calling ops internally).
    pub fn from_pairs(op: &str, pairs: &[(&str, &str)]) -> Params {
        Params {
            op: op.into(),
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn err(&self, name: &str, msg: impl Into<String>) -> OpError {
        OpError::Param {
            op: self.op.clone(),
            name: name.into(),
            msg: msg.into(),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }
    pub fn str(&self, name: &str) -> Result<&str, OpError> {
        self.raw(name)
            .ok_or_else(|| self.err(name, "required; pass --set NAME=VALUE"))
    }
    /// The value parsed as `T`; the error says it is not `what`.
    fn parsed<T: std::str::FromStr>(&self, name: &str, what: &str) -> Result<T, OpError> {
        let s = self.str(name)?;
        s.parse()
            .map_err(|_| self.err(name, format!("'{s}' is not {what}")))
    }
    /// `get(self, name)` when the param is set, else `None`.
    fn optional<T>(
        &self,
        name: &str,
        get: impl FnOnce(&Self, &str) -> Result<T, OpError>,
    ) -> Result<Option<T>, OpError> {
        if self.has(name) {
            get(self, name).map(Some)
        } else {
            Ok(None)
        }
    }
    pub fn int(&self, name: &str) -> Result<i64, OpError> {
        self.parsed(name, "an integer")
    }
    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, OpError> {
        self.optional(name, Self::int)
    }
    /// A non-negative integer that fits usize.
    pub fn usize(&self, name: &str) -> Result<usize, OpError> {
        let v = self.int(name)?;
        usize::try_from(v).map_err(|_| self.err(name, format!("must be >= 0, got {v}")))
    }
    pub fn float(&self, name: &str) -> Result<f64, OpError> {
        self.parsed(name, "a number")
    }
    pub fn opt_float(&self, name: &str) -> Result<Option<f64>, OpError> {
        self.optional(name, Self::float)
    }
    pub fn bool(&self, name: &str) -> Result<bool, OpError> {
        let s = self.str(name)?;
        parse_bool(s).ok_or_else(|| self.err(name, format!("'{s}' is not true or false")))
    }
    /// All resolved values (for reports and golden metadata).
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.values
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

/// Typed access to an op's inputs with errors naming the op and the tensor.
pub struct Inputs<'a> {
    pub op: &'static str,
    pub map: &'a TensorMap,
}

impl<'a> Inputs<'a> {
    pub fn new(op: &'static str, map: &'a TensorMap) -> Self {
        Inputs { op, map }
    }
    pub fn err(&self, name: &str, msg: impl Into<String>) -> OpError {
        OpError::Input {
            op: self.op.into(),
            name: name.into(),
            msg: msg.into(),
        }
    }
    pub fn invalid(&self, msg: impl Into<String>) -> OpError {
        OpError::Invalid {
            op: self.op.into(),
            msg: msg.into(),
        }
    }
    pub fn get(&self, name: &str) -> Option<&'a Tensor> {
        self.map.get(name)
    }
    pub fn req(&self, name: &str) -> Result<&'a Tensor, OpError> {
        self.map.get(name).ok_or_else(|| OpError::MissingInput {
            op: self.op.into(),
            name: name.into(),
            shape: String::new(),
        })
    }
    /// Requires a float tensor of the given rank; returns it with its values as f32.
    pub fn float(&self, name: &str, rank: usize) -> Result<(&'a Tensor, Vec<f32>), OpError> {
        let t = self.req(name)?;
        self.check_float(name, t, rank)?;
        Ok((t, t.to_f32_vec()))
    }
    pub fn opt_float(
        &self,
        name: &str,
        rank: usize,
    ) -> Result<Option<(&'a Tensor, Vec<f32>)>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(t) => {
                self.check_float(name, t, rank)?;
                Ok(Some((t, t.to_f32_vec())))
            }
        }
    }
    fn check_float(&self, name: &str, t: &Tensor, rank: usize) -> Result<(), OpError> {
        if !t.dtype().is_float() {
            return Err(self.err(
                name,
                format!(
                    "dtype {} is not a float type (f32, f16, bf16, f64)",
                    t.dtype()
                ),
            ));
        }
        self.rank(name, t, rank)
    }
    pub fn rank(&self, name: &str, t: &Tensor, rank: usize) -> Result<(), OpError> {
        if t.rank() != rank {
            return Err(self.err(
                name,
                format!("expected {rank} dimensions, got shape {:?}", t.shape),
            ));
        }
        Ok(())
    }
    /// Requires an integer tensor; returns its values as i64.
    pub fn int(&self, name: &str) -> Result<(&'a Tensor, Vec<i64>), OpError> {
        let t = self.req(name)?;
        let v = t
            .to_i64_vec()
            .ok_or_else(|| self.err(name, format!("dtype {} is not an integer type", t.dtype())))?;
        Ok((t, v))
    }
    pub fn opt_int(&self, name: &str) -> Result<Option<(&'a Tensor, Vec<i64>)>, OpError> {
        if self.map.contains_key(name) {
            self.int(name).map(Some)
        } else {
            Ok(None)
        }
    }
    /// Requires `t.shape == want` and says which dimension differs.
    pub fn shape(
        &self,
        name: &str,
        t: &Tensor,
        want: &[usize],
        pattern: &str,
    ) -> Result<(), OpError> {
        if t.shape != want {
            return Err(self.err(
                name,
                format!("shape {:?} does not match {pattern} = {:?}", t.shape, want),
            ));
        }
        Ok(())
    }
    /// Requires the dtype to be one of `allowed`.
    pub fn dtype(&self, name: &str, t: &Tensor, allowed: &[DType]) -> Result<(), OpError> {
        if !allowed.contains(&t.dtype()) {
            return Err(self.err(
                name,
                format!(
                    "dtype {} not supported; use one of {}",
                    t.dtype(),
                    allowed
                        .iter()
                        .map(|d| d.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// Builds an output map from `(name, tensor)` pairs.
pub fn outputs<const N: usize>(items: [(&str, Tensor); N]) -> TensorMap {
    items.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}
