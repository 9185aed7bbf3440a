//! The duet tensor: a shape, a dtype and typed data, named by the key of a [`TensorMap`].
//!
//! Storage is typed (`Vec<f32>`, `Vec<u16>` bits for f16/bf16, ...) so views are aligned and
//! conversions are explicit. f16 / bf16 values are raw IEEE bits; conversions round to nearest even.

use ndarray::{ArrayViewD, IxDyn};
use std::collections::BTreeMap;
use std::fmt;

/// Tensors by name. Names are the upstream argument names (`state`, `x`, `dt`, `logits`, ...).
pub type TensorMap = BTreeMap<String, Tensor>;

/// Element types duet reads and writes (the safetensors set minus the exotic ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    U8,
    I8,
    I16,
    U16,
    I32,
    U32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 12] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// Lower-case name as used on the command line and in `duet ops`.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Parse `f32`, `float32`, `bf16`, `bfloat16`, ... (case-insensitive).
    pub fn parse(s: &str) -> Option<DType> {
        let s = s.to_ascii_lowercase();
        Some(match s.as_str() {
            "bool" => DType::Bool,
            "u8" | "uint8" => DType::U8,
            "i8" | "int8" => DType::I8,
            "i16" | "int16" => DType::I16,
            "u16" | "uint16" => DType::U16,
            "i32" | "int32" => DType::I32,
            "u32" | "uint32" => DType::U32,
            "i64" | "int64" => DType::I64,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f32" | "float32" | "float" => DType::F32,
            "f64" | "float64" | "double" => DType::F64,
            _ => return None,
        })
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Typed element storage. f16 and bf16 hold raw bits.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    Bool(Vec<bool>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    U16(Vec<u16>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    F16(Vec<u16>),
    BF16(Vec<u16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// A dense, row-major tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Data,
}

pub use crate::num::bf16::{bf16_bits_to_f32 as bf16_to_f32, f32_to_bf16_bits as f32_to_bf16};
pub use crate::num::f16::{f16_bits_to_f32 as f16_to_f32, f32_to_f16_bits as f32_to_f16};

macro_rules! ctor {
    ($fn:ident, $variant:ident, $t:ty) => {
        pub fn $fn(shape: &[usize], v: Vec<$t>) -> Tensor {
            Tensor::new(shape, Data::$variant(v))
        }
    };
}

impl Tensor {
    /// Builds a tensor. Panics only on a programming error (shape/data length mismatch) in
    /// duet's own code; readers validate user data before calling this.
    pub fn new(shape: &[usize], data: Data) -> Tensor {
        let t = Tensor {
            shape: shape.to_vec(),
            data,
        };
        assert_eq!(
            t.len_data(),
            t.numel(),
            "tensor data length does not match shape {:?}",
            shape
        );
        t
    }

    ctor!(from_f32, F32, f32);
    ctor!(from_f64, F64, f64);
    ctor!(from_u8, U8, u8);
    ctor!(from_i8, I8, i8);
    ctor!(from_i16, I16, i16);
    ctor!(from_u16, U16, u16);
    ctor!(from_i32, I32, i32);
    ctor!(from_u32, U32, u32);
    ctor!(from_i64, I64, i64);
    ctor!(from_bool, Bool, bool);
    ctor!(from_f16_bits, F16, u16);
    ctor!(from_bf16_bits, BF16, u16);

    /// Stores f32 values as `dtype` (floats round to nearest even; ints truncate toward zero
    /// with saturation, as `as` casts do).
    pub fn from_f32_as(shape: &[usize], v: &[f32], dtype: DType) -> Tensor {
        let data = match dtype {
            DType::F32 => Data::F32(v.to_vec()),
            DType::F64 => Data::F64(v.iter().map(|&x| x as f64).collect()),
            DType::F16 => Data::F16(v.iter().map(|&x| f32_to_f16(x)).collect()),
            DType::BF16 => Data::BF16(v.iter().map(|&x| f32_to_bf16(x)).collect()),
            DType::Bool => Data::Bool(v.iter().map(|&x| x != 0.0).collect()),
            DType::U8 => Data::U8(v.iter().map(|&x| x as u8).collect()),
            DType::I8 => Data::I8(v.iter().map(|&x| x as i8).collect()),
            DType::I16 => Data::I16(v.iter().map(|&x| x as i16).collect()),
            DType::U16 => Data::U16(v.iter().map(|&x| x as u16).collect()),
            DType::I32 => Data::I32(v.iter().map(|&x| x as i32).collect()),
            DType::U32 => Data::U32(v.iter().map(|&x| x as u32).collect()),
            DType::I64 => Data::I64(v.iter().map(|&x| x as i64).collect()),
        };
        Tensor::new(shape, data)
    }

    pub fn dtype(&self) -> DType {
        match &self.data {
            Data::Bool(_) => DType::Bool,
            Data::U8(_) => DType::U8,
            Data::I8(_) => DType::I8,
            Data::I16(_) => DType::I16,
            Data::U16(_) => DType::U16,
            Data::I32(_) => DType::I32,
            Data::U32(_) => DType::U32,
            Data::I64(_) => DType::I64,
            Data::F16(_) => DType::F16,
            Data::BF16(_) => DType::BF16,
            Data::F32(_) => DType::F32,
            Data::F64(_) => DType::F64,
        }
    }

    /// Number of elements the shape describes.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    fn len_data(&self) -> usize {
        match &self.data {
            Data::Bool(v) => v.len(),
            Data::U8(v) => v.len(),
            Data::I8(v) => v.len(),
            Data::I16(v) => v.len(),
            Data::U16(v) | Data::F16(v) | Data::BF16(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::U32(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
        }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Shape as `[a, b, c]`.
    pub fn shape_str(&self) -> String {
        format!("{:?}", self.shape)
    }

    /// Every element as f64 (exact for all dtypes except i64 beyond 2^53).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match &self.data {
            Data::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
            Data::U8(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I8(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I16(v) => v.iter().map(|&x| x as f64).collect(),
            Data::U16(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::U32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I64(v) => v.iter().map(|&x| x as f64).collect(),
            Data::F16(v) => v.iter().map(|&x| f16_to_f32(x) as f64).collect(),
            Data::BF16(v) => v.iter().map(|&x| bf16_to_f32(x) as f64).collect(),
            Data::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::F64(v) => v.clone(),
        }
    }

    /// Every element as f32 (f64 rounds to nearest; f16/bf16/small ints are exact).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &self.data {
            Data::F32(v) => v.clone(),
            Data::F16(v) => v.iter().map(|&x| f16_to_f32(x)).collect(),
            Data::BF16(v) => v.iter().map(|&x| bf16_to_f32(x)).collect(),
            _ => self.to_f64_vec().into_iter().map(|x| x as f32).collect(),
        }
    }

    /// Integer tensors as i64 (floats are rejected by returning `None`).
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        Some(match &self.data {
            Data::Bool(v) => v.iter().map(|&x| x as i64).collect(),
            Data::U8(v) => v.iter().map(|&x| x as i64).collect(),
            Data::I8(v) => v.iter().map(|&x| x as i64).collect(),
            Data::I16(v) => v.iter().map(|&x| x as i64).collect(),
            Data::U16(v) => v.iter().map(|&x| x as i64).collect(),
            Data::I32(v) => v.iter().map(|&x| x as i64).collect(),
            Data::U32(v) => v.iter().map(|&x| x as i64).collect(),
            Data::I64(v) => v.clone(),
            _ => return None,
        })
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Data::F32(v) => Some(v),
            _ => None,
        }
    }
    pub fn as_u8(&self) -> Option<&[u8]> {
        match &self.data {
            Data::U8(v) => Some(v),
            _ => None,
        }
    }
    pub fn as_u32(&self) -> Option<&[u32]> {
        match &self.data {
            Data::U32(v) => Some(v),
            _ => None,
        }
    }
    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.data {
            Data::I32(v) => Some(v),
            _ => None,
        }
    }
    /// Raw 16-bit payload of f16 / bf16 / u16 / i16 tensors.
    pub fn as_u16_bits(&self) -> Option<&[u16]> {
        match &self.data {
            Data::F16(v) | Data::BF16(v) | Data::U16(v) => Some(v),
            _ => None,
        }
    }

    /// An ndarray view of an f32 tensor.
    pub fn view_f32(&self) -> Option<ArrayViewD<'_, f32>> {
        let v = self.as_f32()?;
        ArrayViewD::from_shape(IxDyn(&self.shape), v).ok()
    }

    /// Little-endian bytes of the data (the safetensors / npy payload).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
            let mut out = Vec::with_capacity(v.len() * N);
            for &x in v {
                out.extend_from_slice(&f(x));
            }
            out
        }
        match &self.data {
            Data::Bool(v) => v.iter().map(|&b| b as u8).collect(),
            Data::U8(v) => v.clone(),
            Data::I8(v) => v.iter().map(|&x| x as u8).collect(),
            Data::I16(v) => le(v, i16::to_le_bytes),
            Data::U16(v) | Data::F16(v) | Data::BF16(v) => le(v, u16::to_le_bytes),
            Data::I32(v) => le(v, i32::to_le_bytes),
            Data::U32(v) => le(v, u32::to_le_bytes),
            Data::I64(v) => le(v, i64::to_le_bytes),
            Data::F32(v) => le(v, f32::to_le_bytes),
            Data::F64(v) => le(v, f64::to_le_bytes),
        }
    }

    /// Builds a tensor from little-endian bytes; `None` when the byte count does not match
    /// the shape (the caller turns that into an error naming the file and tensor) or a bool
    /// byte is not 0/1.
    pub fn from_le_bytes(shape: &[usize], dtype: DType, bytes: &[u8]) -> Option<Tensor> {
        let n = checked_numel(shape)?;
        if n.checked_mul(dtype.size())? != bytes.len() {
            return None;
        }
        fn rd<T, const N: usize>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
            b.chunks_exact(N)
                .map(|c| {
                    let mut a = [0u8; N];
                    a.copy_from_slice(c);
                    f(a)
                })
                .collect()
        }
        let data = match dtype {
            DType::Bool => {
                if bytes.iter().any(|&b| b > 1) {
                    return None;
                }
                Data::Bool(bytes.iter().map(|&b| b != 0).collect())
            }
            DType::U8 => Data::U8(bytes.to_vec()),
            DType::I8 => Data::I8(bytes.iter().map(|&b| b as i8).collect()),
            DType::I16 => Data::I16(rd(bytes, i16::from_le_bytes)),
            DType::U16 => Data::U16(rd(bytes, u16::from_le_bytes)),
            DType::F16 => Data::F16(rd(bytes, u16::from_le_bytes)),
            DType::BF16 => Data::BF16(rd(bytes, u16::from_le_bytes)),
            DType::I32 => Data::I32(rd(bytes, i32::from_le_bytes)),
            DType::U32 => Data::U32(rd(bytes, u32::from_le_bytes)),
            DType::I64 => Data::I64(rd(bytes, i64::from_le_bytes)),
            DType::F32 => Data::F32(rd(bytes, f32::from_le_bytes)),
            DType::F64 => Data::F64(rd(bytes, f64::from_le_bytes)),
        };
        Some(Tensor {
            shape: shape.to_vec(),
            data,
        })
    }
}

/// Product of a shape with overflow checking (a header claiming 2^60 elements is rejected,
/// not allocated).
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn le_bytes_round_trip_every_dtype() {
        let vals: Vec<f32> = vec![1.0, -2.5, 3.0, 0.5, 7.0, 1.0];
        for dt in DType::ALL {
            let t = Tensor::from_f32_as(&[2, 3], &vals, dt);
            let b = t.to_le_bytes();
            assert_eq!(b.len(), 6 * dt.size());
            let back = Tensor::from_le_bytes(&[2, 3], dt, &b).unwrap();
            assert_eq!(back, t, "dtype {dt}");
        }
    }

    #[test]
    fn rejects_wrong_length_and_overflow() {
        assert!(Tensor::from_le_bytes(&[3], DType::F32, &[0u8; 8]).is_none());
        assert!(checked_numel(&[1 << 40, 1 << 40]).is_none());
        assert!(Tensor::from_le_bytes(&[2], DType::Bool, &[0, 2]).is_none());
    }

    #[test]
    fn float_conversions_round_to_nearest_even() {
        // 1 + 2^-8 is exactly halfway between two bf16 values; ties go to the even mantissa (1.0).
        let t = Tensor::from_f32_as(&[2], &[1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0], DType::BF16);
        assert_eq!(t.to_f32_vec(), vec![1.0, 1.0 + 4.0 / 256.0]);
        assert_eq!(DType::parse("bfloat16"), Some(DType::BF16));
        assert_eq!(DType::parse("nope"), None);
    }
}
