// SSD chunked scan (Mamba-2 prefill), SPEC.md "SSD chunked scan"; the same stages as
// reference/src/ops/ssd_chunk_scan.rs, as five kernels launched in order:
//   1. ssd_cumsum       dt' (bias, softplus, clamp) and the chunk-local cumsum of dt'*A
//   2. ssd_bmm_cb_*     CB[c, g, i, j] = C_i . B_j per chunk and group (lower triangle of tiles)
//   3. ssd_state_*      chunk states S_c[p, n] = sum_l x[l,p] exp(cs_last - cs_l) dt'_l B[l,n]
//   4. ssd_state_pass   sequential over chunks: states[c] <- the state ENTERING chunk c;
//                       final_states <- the state after the last chunk
//   5. ssd_scan_*       y = exp(cs_i) C_i . S_prev + sum_{s<=i} CB[i,s] exp(cs_i-cs_s) dt'_s x_s
//                       + D x; then y *= silu(z)
// Every product is a tiled f32 GEMM on CUDA cores (256 threads, a 16 x 16 thread grid, each
// thread BM/16 x BN/16 outputs, K in steps of 32 through shared memory). The tile shapes are
// template parameters; the extern "C" instantiations below are the configurations the host's
// SsdConfig may pick (gpu/src/ops/ssd_chunk_scan.rs).
//
// Layouts (64-bit index math): x, z, y (B, L, H, P); dt (B, L, H); A, dt_bias (H); B, C
// (B, L, G, N); D (H, P) (expanded on the host); initial/final states (B, H, P, N);
// seq_idx (B, L) i64; workspaces dtp, dacs (B, nc, H, Q) f32; cb (B, nc, G, Q, Q) f32;
// states (B, nc, H, P, N) f32.

#define SSD_KT 32
#define SSD_THREADS 256

struct SsdDims {
    i64 B, L, H, P, G, N, Q, nc;
};

__device__ __forceinline__ i64 ssd_seq(const i64* seq, i64 b, i64 L, i64 t) {
    return seq ? seq[b * L + t] : 0;
}

// 1. One thread per (b, c, h): sequential chunk-local cumsum in the reference's order.
extern "C" __global__ void ssd_cumsum(const void* dt, int dtdt, const void* A, int adt,
                                      const void* dt_bias, int dbdt, SsdDims s, int softplus,
                                      float dt_min, float dt_max, float* dtp, float* dacs) {
    const i64 n = s.B * s.nc * s.H;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x) {
        const i64 h = i % s.H, bc = i / s.H, c = bc % s.nc, b = bc / s.nc;
        const i64 t0 = c * s.Q;
        const i64 qc = min(s.Q, s.L - t0);
        const float a = load_as_f32(A, h, adt);
        const float bias = dt_bias ? load_as_f32(dt_bias, h, dbdt) : 0.0f;
        float acc = 0.0f;
        for (i64 k = 0; k < qc; ++k) {
            float v = load_as_f32(dt, (b * s.L + t0 + k) * s.H + h, dtdt) + bias;
            if (softplus && v <= 20.0f) v = log1pf(expf(v));
            v = fminf(fmaxf(v, dt_min), dt_max);
            acc = acc + v * a;
            dtp[i * s.Q + k] = v;
            dacs[i * s.Q + k] = acc;
        }
    }
}

// Shared tiled GEMM core: acc[TM][TN] += A_s[k][m] * B_s[k][n] over one K step in smem. Thread
// (ty, tx) owns rows ty*TM.. and cols tx*TN.. (contiguous: 16-byte shared loads when TM or
// TN is a multiple of 4; rows are padded by 4 floats so every row starts 16-byte aligned).
template <int T>
__device__ __forceinline__ void lds_vec(const float* p, float* v) {
    if constexpr (T % 4 == 0) {
#pragma unroll
        for (int i = 0; i < T; i += 4) {
            const float4 q = *reinterpret_cast<const float4*>(p + i);
            v[i] = q.x; v[i + 1] = q.y; v[i + 2] = q.z; v[i + 3] = q.w;
        }
    } else if constexpr (T % 2 == 0) {
#pragma unroll
        for (int i = 0; i < T; i += 2) {
            const float2 q = *reinterpret_cast<const float2*>(p + i);
            v[i] = q.x; v[i + 1] = q.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < T; ++i) v[i] = p[i];
    }
}

template <int BM, int BN>
__device__ __forceinline__ void tile_fma(const float (*As)[BM + 4], const float (*Bs)[BN + 4],
                                         float (*acc)[BN / 16], int ty, int tx) {
    constexpr int TM = BM / 16, TN = BN / 16;
#pragma unroll 8
    for (int k = 0; k < SSD_KT; ++k) {
        float a[TM], b[TN];
        lds_vec<TM>(&As[k][ty * TM], a);
        lds_vec<TN>(&Bs[k][tx * TN], b);
#pragma unroll
        for (int m = 0; m < TM; ++m)
#pragma unroll
            for (int n = 0; n < TN; ++n) acc[m][n] = __fmaf_rn(a[m], b[n], acc[m][n]);
    }
}

// 2. CB per (b, c, g): tiles (i-tile, j-tile) with j-tile <= i-tile. grid.x = B*nc*G*tiles^2.
template <int BM>
__device__ __forceinline__ void ssd_bmm_cb_impl(const void* Bm, int bdt, const void* Cm, int cdt,
                                                SsdDims s, float* cb) {
    __shared__ float Cs[SSD_KT][BM + 4];
    __shared__ float Bs[SSD_KT][BM + 4];
    constexpr int TM = BM / 16;
    const i64 tq = (s.Q + BM - 1) / BM;
    i64 blk = blockIdx.x;
    const i64 tj = blk % tq; blk /= tq;
    const i64 ti = blk % tq; blk /= tq;
    const i64 g = blk % s.G; blk /= s.G;
    const i64 c = blk % s.nc;
    const i64 b = blk / s.nc;
    if (tj > ti) return;
    const i64 t0 = c * s.Q;
    const i64 qc = min(s.Q, s.L - t0);
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const i64 i0 = ti * BM, j0 = tj * BM;
    float acc[TM][TM];
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TM; ++n) acc[m][n] = 0.0f;
    for (i64 n0 = 0; n0 < s.N; n0 += SSD_KT) {
        for (int e = tid; e < BM * SSD_KT; e += SSD_THREADS) {
            const int r = e / SSD_KT, kk = e % SSD_KT;
            const i64 n = n0 + kk;
            const i64 ic = i0 + r, jb = j0 + r;
            Cs[kk][r] = (ic < qc && n < s.N)
                            ? load_as_f32(Cm, ((b * s.L + t0 + ic) * s.G + g) * s.N + n, cdt)
                            : 0.0f;
            Bs[kk][r] = (jb < qc && n < s.N)
                            ? load_as_f32(Bm, ((b * s.L + t0 + jb) * s.G + g) * s.N + n, bdt)
                            : 0.0f;
        }
        __syncthreads();
        tile_fma<BM, BM>(Cs, Bs, acc, ty, tx);
        __syncthreads();
    }
    float* dst = cb + ((b * s.nc + c) * s.G + g) * s.Q * s.Q;
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TM; ++n) {
            const i64 i = i0 + ty * TM + m, j = j0 + tx * TM + n;
            if (i < qc && j < qc) dst[i * s.Q + j] = acc[m][n];
        }
}

// 3. Chunk state per (b, c, h, p-tile, n-tile): M = p (BM), N = n (BN), K = l.
template <int BM, int BN>
__device__ __forceinline__ void ssd_state_impl(const void* x, int xdt, const void* Bm, int bdt,
                                               const i64* seq, const float* dtp,
                                               const float* dacs, SsdDims s, float* states) {
    __shared__ float Xs[SSD_KT][BM + 4];
    __shared__ float Bs[SSD_KT][BN + 4];
    __shared__ float wl[SSD_KT];
    constexpr int TM = BM / 16, TN = BN / 16;
    const i64 tp = (s.P + BM - 1) / BM, tn = (s.N + BN - 1) / BN;
    i64 blk = blockIdx.x;
    const i64 itn = blk % tn; blk /= tn;
    const i64 itp = blk % tp; blk /= tp;
    const i64 h = blk % s.H; blk /= s.H;
    const i64 c = blk % s.nc;
    const i64 b = blk / s.nc;
    const i64 g = h / (s.H / s.G);
    const i64 t0 = c * s.Q;
    const i64 qc = min(s.Q, s.L - t0);
    const i64 wbase = ((b * s.nc + c) * s.H + h) * s.Q;
    const float cs_last = dacs[wbase + qc - 1];
    const i64 seq_last = ssd_seq(seq, b, s.L, t0 + qc - 1);
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const i64 p0 = itp * BM, n0 = itn * BN;
    float acc[TM][TN];
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TN; ++n) acc[m][n] = 0.0f;
    for (i64 l0 = 0; l0 < qc; l0 += SSD_KT) {
        if (tid < SSD_KT) {
            const i64 l = l0 + tid;
            float v = 0.0f;
            if (l < qc && ssd_seq(seq, b, s.L, t0 + l) == seq_last)
                v = expf(cs_last - dacs[wbase + l]) * dtp[wbase + l];
            wl[tid] = v;
        }
        __syncthreads();
        for (int e = tid; e < BM * SSD_KT; e += SSD_THREADS) {
            const int kk = e / BM, r = e % BM;
            const i64 l = l0 + kk, p = p0 + r;
            Xs[kk][r] = (l < qc && p < s.P)
                            ? load_as_f32(x, ((b * s.L + t0 + l) * s.H + h) * s.P + p, xdt) * wl[kk]
                            : 0.0f;
        }
        for (int e = tid; e < BN * SSD_KT; e += SSD_THREADS) {
            const int kk = e / BN, r = e % BN;
            const i64 l = l0 + kk, n = n0 + r;
            Bs[kk][r] = (l < qc && n < s.N)
                            ? load_as_f32(Bm, ((b * s.L + t0 + l) * s.G + g) * s.N + n, bdt)
                            : 0.0f;
        }
        __syncthreads();
        tile_fma<BM, BN>(Xs, Bs, acc, ty, tx);
        __syncthreads();
    }
    float* dst = states + ((b * s.nc + c) * s.H + h) * s.P * s.N;
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TN; ++n) {
            const i64 p = p0 + ty * TM + m, nn = n0 + tx * TN + n;
            if (p < s.P && nn < s.N) dst[p * s.N + nn] = acc[m][n];
        }
}

// 4. State passing: one thread per (b, h, p*n element), sequential over the chunks.
extern "C" __global__ void ssd_state_pass(const void* init, int idt, const i64* seq,
                                          const float* dacs, SsdDims s, float* states,
                                          float* final_states) {
    const i64 pn = s.P * s.N;
    const i64 n = s.B * s.H * pn;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x) {
        const i64 e = i % pn, bh = i / pn, h = bh % s.H, b = bh / s.H;
        float S = init ? load_as_f32(init, i, idt) : 0.0f;
        i64 sseq = 0;
        for (i64 c = 0; c < s.nc; ++c) {
            const i64 at = ((b * s.nc + c) * s.H + h) * pn + e;
            const float cur = states[at];
            states[at] = S;
            const i64 t0 = c * s.Q;
            const i64 qc = min(s.Q, s.L - t0);
            const i64 last = ssd_seq(seq, b, s.L, t0 + qc - 1);
            const float decay =
                last == sseq ? expf(dacs[((b * s.nc + c) * s.H + h) * s.Q + qc - 1]) : 0.0f;
            S = decay * S + cur;
            sseq = last;
        }
        final_states[i] = S;
    }
}

// 4b. State passing, 4 elements per thread (float4) and 4 chunks in flight; needs P*N % 4 == 0.
// grid.x = B*H*ceil(P*N / (4*blockDim.x)): a block walks one contiguous slab of one head.
extern "C" __global__ void ssd_state_pass_v4(const void* init, int idt, const i64* seq,
                                             const float* dacs, SsdDims s, float* states,
                                             float* final_states) {
    const i64 pn = s.P * s.N;
    const i64 per_block = 4LL * blockDim.x;
    const i64 slabs = (pn + per_block - 1) / per_block;
    const i64 bh = blockIdx.x / slabs, slab = blockIdx.x % slabs;
    const i64 h = bh % s.H, b = bh / s.H;
    const i64 e = slab * per_block + 4LL * threadIdx.x;
    if (e >= pn) return;
    float4 S = make_float4(0.f, 0.f, 0.f, 0.f);
    if (init) {
        const i64 at = bh * pn + e;
        S = make_float4(load_as_f32(init, at, idt), load_as_f32(init, at + 1, idt),
                        load_as_f32(init, at + 2, idt), load_as_f32(init, at + 3, idt));
    }
    i64 sseq = 0;
    constexpr int U = 4;
    for (i64 c0 = 0; c0 < s.nc; c0 += U) {
        float4 cur[U];
        float dec[U];
        i64 last[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 c = c0 + u;
            if (c < s.nc) {
                const i64 at = ((b * s.nc + c) * s.H + h) * pn + e;
                cur[u] = *reinterpret_cast<const float4*>(states + at);
                const i64 t0 = c * s.Q;
                const i64 qc = min(s.Q, s.L - t0);
                last[u] = ssd_seq(seq, b, s.L, t0 + qc - 1);
                dec[u] = expf(dacs[((b * s.nc + c) * s.H + h) * s.Q + qc - 1]);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 c = c0 + u;
            if (c < s.nc) {
                const i64 at = ((b * s.nc + c) * s.H + h) * pn + e;
                *reinterpret_cast<float4*>(states + at) = S;
                const float d = last[u] == sseq ? dec[u] : 0.0f;
                S.x = d * S.x + cur[u].x;
                S.y = d * S.y + cur[u].y;
                S.z = d * S.z + cur[u].z;
                S.w = d * S.w + cur[u].w;
                sseq = last[u];
            }
        }
    }
    *reinterpret_cast<float4*>(final_states + bh * pn + e) = S;
}

// 5. Chunk scan per (b, c, h, i-tile, p-tile): M = i (BM rows of the chunk), N = p (BN).
template <int BM, int BN>
__device__ __forceinline__ void ssd_scan_impl(const void* x, int xdt, const void* Cm, int cdt,
                                              const void* Dm, int ddt, const void* z, int zdt,
                                              const i64* seq, const float* dtp,
                                              const float* dacs, const float* cb,
                                              const float* states, SsdDims s, void* y) {
    __shared__ float As[SSD_KT][BM + 4];
    __shared__ float Bs[SSD_KT][BN + 4];
    __shared__ float cs_i[BM];
    __shared__ long long sq_i[BM];
    __shared__ float cs_s[SSD_KT], dt_s[SSD_KT];
    __shared__ long long sq_s[SSD_KT];
    constexpr int TM = BM / 16, TN = BN / 16;
    const i64 tq = (s.Q + BM - 1) / BM, tp = (s.P + BN - 1) / BN;
    i64 blk = blockIdx.x;
    const i64 itp = blk % tp; blk /= tp;
    const i64 iti = blk % tq; blk /= tq;
    const i64 h = blk % s.H; blk /= s.H;
    const i64 c = blk % s.nc;
    const i64 b = blk / s.nc;
    const i64 g = h / (s.H / s.G);
    const i64 t0 = c * s.Q;
    const i64 qc = min(s.Q, s.L - t0);
    const i64 i0 = iti * BM, p0 = itp * BN;
    if (i0 >= qc) return;
    const i64 wbase = ((b * s.nc + c) * s.H + h) * s.Q;
    const i64 prev_seq = c == 0 ? 0 : ssd_seq(seq, b, s.L, t0 - 1);
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    for (int r = tid; r < BM; r += SSD_THREADS) {
        const i64 i = i0 + r;
        cs_i[r] = i < qc ? dacs[wbase + i] : 0.0f;
        sq_i[r] = i < qc ? ssd_seq(seq, b, s.L, t0 + i) : -1;
    }
    __syncthreads();
    float acc[TM][TN];
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TN; ++n) acc[m][n] = 0.0f;
    // Inter-chunk part: C_i . S_prev[p, :].
    const float* Sp = states + ((b * s.nc + c) * s.H + h) * s.P * s.N;
    for (i64 n0 = 0; n0 < s.N; n0 += SSD_KT) {
        for (int e = tid; e < BM * SSD_KT; e += SSD_THREADS) {
            const int r = e / SSD_KT, kk = e % SSD_KT;
            const i64 i = i0 + r, n = n0 + kk;
            As[kk][r] = (i < qc && n < s.N)
                            ? load_as_f32(Cm, ((b * s.L + t0 + i) * s.G + g) * s.N + n, cdt)
                            : 0.0f;
        }
        for (int e = tid; e < BN * SSD_KT; e += SSD_THREADS) {
            const int r = e / SSD_KT, kk = e % SSD_KT;
            const i64 p = p0 + r, n = n0 + kk;
            Bs[kk][r] = (p < s.P && n < s.N) ? Sp[p * s.N + n] : 0.0f;
        }
        __syncthreads();
        tile_fma<BM, BN>(As, Bs, acc, ty, tx);
        __syncthreads();
    }
#pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int r = ty * TM + m;
        const float sc = sq_i[r] == prev_seq ? expf(cs_i[r]) : 0.0f;
#pragma unroll
        for (int n = 0; n < TN; ++n) acc[m][n] *= sc;
    }
    // Intra-chunk part: sum_s M[i, s] x[s, p] for s < min(i0 + BM, qc).
    const float* cbp = cb + ((b * s.nc + c) * s.G + g) * s.Q * s.Q;
    const i64 s_end = min(i0 + (i64)BM, qc);
    for (i64 s0 = 0; s0 < s_end; s0 += SSD_KT) {
        if (tid < SSD_KT) {
            const i64 sidx = s0 + tid;
            cs_s[tid] = sidx < qc ? dacs[wbase + sidx] : 0.0f;
            dt_s[tid] = sidx < qc ? dtp[wbase + sidx] : 0.0f;
            sq_s[tid] = sidx < qc ? ssd_seq(seq, b, s.L, t0 + sidx) : -2;
        }
        __syncthreads();
        for (int e = tid; e < BM * SSD_KT; e += SSD_THREADS) {
            const int r = e / SSD_KT, kk = e % SSD_KT;
            const i64 i = i0 + r, sidx = s0 + kk;
            float v = 0.0f;
            if (i < qc && sidx <= i && sq_s[kk] == sq_i[r])
                v = cbp[i * s.Q + sidx] * expf(cs_i[r] - cs_s[kk]) * dt_s[kk];
            As[kk][r] = v;
        }
        for (int e = tid; e < BN * SSD_KT; e += SSD_THREADS) {
            const int kk = e / BN, r = e % BN;
            const i64 sidx = s0 + kk, p = p0 + r;
            Bs[kk][r] = (sidx < qc && p < s.P)
                            ? load_as_f32(x, ((b * s.L + t0 + sidx) * s.H + h) * s.P + p, xdt)
                            : 0.0f;
        }
        __syncthreads();
        tile_fma<BM, BN>(As, Bs, acc, ty, tx);
        __syncthreads();
    }
    // Epilogue: D skip, z gate, store in x's dtype.
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TN; ++n) {
            const i64 i = i0 + ty * TM + m, p = p0 + tx * TN + n;
            if (i < qc && p < s.P) {
                const i64 at = ((b * s.L + t0 + i) * s.H + h) * s.P + p;
                float v = acc[m][n];
                if (Dm) v = v + load_as_f32(Dm, h * s.P + p, ddt) * load_as_f32(x, at, xdt);
                if (z) {
                    const float zv = load_as_f32(z, at, zdt);
                    v = v * (zv / (1.0f + expf(-zv)));
                }
                store_from_f32(y, at, xdt, v);
            }
        }
}

#define SSD_CB(BM)                                                                               \
    extern "C" __global__ void __launch_bounds__(SSD_THREADS)                                   \
        ssd_bmm_cb_m##BM(const void* Bm, int bdt, const void* Cm, int cdt, SsdDims s,           \
                         float* cb) {                                                           \
        ssd_bmm_cb_impl<BM>(Bm, bdt, Cm, cdt, s, cb);                                           \
    }
SSD_CB(32)
SSD_CB(64)

#define SSD_STATE(BM, BN)                                                                        \
    extern "C" __global__ void __launch_bounds__(SSD_THREADS) ssd_state_m##BM##_n##BN(          \
        const void* x, int xdt, const void* Bm, int bdt, const i64* seq, const float* dtp,      \
        const float* dacs, SsdDims s, float* states) {                                          \
        ssd_state_impl<BM, BN>(x, xdt, Bm, bdt, seq, dtp, dacs, s, states);                     \
    }
SSD_STATE(32, 64)
SSD_STATE(64, 64)
SSD_STATE(64, 128)

#define SSD_SCAN(BM, BN)                                                                         \
    extern "C" __global__ void __launch_bounds__(SSD_THREADS) ssd_scan_m##BM##_n##BN(           \
        const void* x, int xdt, const void* Cm, int cdt, const void* Dm, int ddt, const void* z,\
        int zdt, const i64* seq, const float* dtp, const float* dacs, const float* cb,          \
        const float* states, SsdDims s, void* y) {                                              \
        ssd_scan_impl<BM, BN>(x, xdt, Cm, cdt, Dm, ddt, z, zdt, seq, dtp, dacs, cb, states, s,  \
                              y);                                                               \
    }
SSD_SCAN(32, 64)
SSD_SCAN(64, 32)
SSD_SCAN(64, 64)
