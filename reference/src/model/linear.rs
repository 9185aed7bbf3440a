//! Dense f32 building blocks of the model: linear layers (sgemm through ndarray, parallel
//! over blocks of output features), embeddings and RMSNorm-free helpers.

use super::weights::Mat;
use ndarray::linalg::general_mat_mul;
use ndarray::ArrayView2;
use rayon::prelude::*;

/// Output features per parallel job (and per generated block of a lazy weight).
const ROW_BLOCK: usize = 256;

/// Up to this many token rows a linear layer uses dot products instead of sgemm.
const DIRECT_MAX_ROWS: usize = 4;

/// f32 dot product with 8 interleaved partial sums (vectorises; order fixed).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// `y = x · Wᵀ (+ bias)`: x (t, in), W (out, in), y (t, out). f32 accumulation (sgemm).
pub fn linear(x: &[f32], t: usize, w: &Mat, bias: Option<&[f32]>) -> Vec<f32> {
    let (out, inn) = (w.rows(), w.cols());
    debug_assert_eq!(x.len(), t * inn, "linear: x is not (t, in)");
    let mut y = vec![0f32; t * out];
    if t == 0 || out == 0 {
        return y;
    }
    let xv = match ArrayView2::from_shape((t, inn), x) {
        Ok(v) => v,
        Err(_) => return y,
    };
    let nblk = out.div_ceil(ROW_BLOCK);
    let blocks: Vec<(usize, usize, Vec<f32>)> = (0..nblk)
        .into_par_iter()
        .map(|bi| {
            let r0 = bi * ROW_BLOCK;
            let r1 = (r0 + ROW_BLOCK).min(out);
            let wb = w.row_block(r0, r1);
            if t <= DIRECT_MAX_ROWS {
                // Few rows (decode): sgemm would repack all of W per call; plain dots win.
                let n = r1 - r0;
                let mut yb = vec![0f32; t * n];
                for i in 0..t {
                    let xr = &x[i * inn..(i + 1) * inn];
                    for (o, wr) in wb.chunks_exact(inn).enumerate() {
                        yb[i * n + o] = dot(xr, wr);
                    }
                }
                return (r0, r1, yb);
            }
            let mut yb = ndarray::Array2::<f32>::zeros((t, r1 - r0));
            if let Ok(wv) = ArrayView2::from_shape((r1 - r0, inn), &wb[..]) {
                general_mat_mul(1.0, &xv, &wv.t(), 0.0, &mut yb);
            }
            (r0, r1, yb.into_raw_vec_and_offset().0)
        })
        .collect();
    for (r0, r1, yb) in blocks {
        let n = r1 - r0;
        for i in 0..t {
            y[i * out + r0..i * out + r1].copy_from_slice(&yb[i * n..(i + 1) * n]);
        }
    }
    if let Some(b) = bias {
        for row in y.chunks_exact_mut(out) {
            for (v, bb) in row.iter_mut().zip(b) {
                *v += bb;
            }
        }
    }
    y
}

/// Rows of an embedding table (vocab, hidden) for each token.
pub fn embed(table: &Mat, tokens: &[u32]) -> Vec<f32> {
    let h = table.cols();
    let mut out = Vec::with_capacity(tokens.len() * h);
    for &tok in tokens {
        let r = tok as usize;
        out.extend_from_slice(&table.row_block(r, r + 1));
    }
    out
}

/// Index of the largest value of each row (first on ties, as torch.argmax on CPU).
pub fn argmax_rows(x: &[f32], cols: usize) -> Vec<u32> {
    x.chunks_exact(cols)
        .map(|r| {
            let mut best = 0usize;
            for (i, &v) in r.iter().enumerate() {
                if v > r[best] {
                    best = i;
                }
            }
            best as u32
        })
        .collect()
}
