//! Seeded input generators. Cases never use zeros: values are drawn from a seeded generator
//! so a kernel that ignores an input, or writes nothing, cannot pass by accident.

use reference::{DType, Tensor};

/// SplitMix64: tiny, seedable, good enough for test inputs (not for the SSM's stochastic
/// rounding, which uses Philox as the kernels do).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.f64() as f32
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = self.f64().max(1e-300);
        let u2 = self.f64();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    pub fn normal_vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * scale).collect()
    }
    pub fn uniform_vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
    /// A tensor of N(0, scale^2) values stored as `dtype`.
    pub fn normal_tensor(&mut self, shape: &[usize], scale: f32, dtype: DType) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_f32_as(shape, &self.normal_vec(n, scale), dtype)
    }
    pub fn uniform_tensor(&mut self, shape: &[usize], lo: f32, hi: f32, dtype: DType) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_f32_as(shape, &self.uniform_vec(n, lo, hi), dtype)
    }
    pub fn u32_tensor(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_u32(shape, (0..n).map(|_| self.next_u32()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn seeded_and_not_degenerate() {
        let a = Rng::new(7).normal_vec(1000, 1.0);
        let b = Rng::new(7).normal_vec(1000, 1.0);
        assert_eq!(a, b);
        assert!(a.iter().all(|x| *x != 0.0));
        let mean: f32 = a.iter().sum::<f32>() / 1000.0;
        let var: f32 = a.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / 1000.0;
        assert!(
            mean.abs() < 0.15 && (var - 1.0).abs() < 0.15,
            "{mean} {var}"
        );
    }
}
