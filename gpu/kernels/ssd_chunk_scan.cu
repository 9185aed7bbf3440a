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

// ==== v2: the scan on the tensor cores, states kept on chip (bf16 x / B / C, headdim 64,
// dstate 128, chunk 128); three kernels ====
// ssd2_tok: one warp per (batch, chunk, head) writes the chunk's per-token table (dt', the
// chunk-local cumsum of dt' A, state weights, inter-chunk factors, sequence starts) into a
// workspace record (Ssd2Tok). Its cumsum is a warp scan (4 tokens a lane, then across lanes):
// associated differently from the reference's running sum (ulps of cs).
// ssd2_cb: G = C · B^T of every (batch, chunk, group) on the tensor cores (bf16 products are
// exact, f32 sums), the 36 causal 16 x 16 tiles in the mma accumulator layout; the group's
// heads read it instead of each computing it.
// ssd2_fused: one block per (batch, head) walks the chunks in order with the head's state S
// [64 p][128 n] in registers (f32): chunk states never go through memory. 256 threads: warps
// 0-3 own the output rows (warp y: the 16-row blocks y and 7 - y, 9 of the 36 causal tiles
// each), warps 4-7 the state (warp 4 + s: p rows 16 s .. 16 s + 15, every n). Per chunk:
//   state warps: X    = (S_hi + S_lo) · C^T, S split into bf16 hi + lo from the registers
//                       (two mma), times exp(cs_i) (0 where token i starts another sequence
//                       than S's); stored to shared memory (xch) for the row warps, barrier 1
//                dS   = (x · w)^T · B, w_l = exp(cs_last - cs_l) dt'_l (0 outside the last
//                       token's sequence); x · w split into bf16 hi + lo (two mma)
//                S    = decay S + dS  (decay = exp(cs_last), 0 when the chunk starts a sequence)
//   row warps:   M    = G exp(cs_i - cs_s) dt'_s (s <= i, same sequence; G from ssd2_cb), split
//                       into bf16 hi + lo in the accumulator-to-operand layout; acc = M · x
//                       (two mma); after barrier 1: y = acc + X + D x, times silu(z), as bf16
// The splits keep ~16 mantissa bits of M, S and x · w. Rounded once to bf16 instead, M gave y
// an NMSE of 6.5e-6 and single elements past the bf16 tolerance on the H200 (session 18, call
// 1), and S alone (the initial states' share) one element at 105% of it (call 2).
// C, B, x and the token table of the next chunk stream into the other half of a two-stage
// shared-memory ring (cp.async) while this one is computed. ldmatrix rows are padded by 16
// bytes (conflict-free). Measured (session 18): computing G in the row warps instead was faster
// (3264 vs 4412 us at 50,000 tokens) but racecheck reported hazards between the ring's cp.async
// writes and those warps' ldmatrix reads of C / B (call 5); this form ran clean (call 4).
#define SSD2_Q 128
#define SSD2_P 64
#define SSD2_N 128
#define SSD2_BC_ROW 272  // bytes: 128 bf16 + 16
#define SSD2_X_ROW 144   // bytes: 64 bf16 + 16
#define SSD2_BC_BYTES (SSD2_Q * SSD2_BC_ROW)
#define SSD2_X_BYTES (SSD2_Q * SSD2_X_ROW)

struct Ssd2Tok {
    float dtp[SSD2_Q];  // dt' (0 past the chunk's end)
    float cs2[SSD2_Q];  // chunk-local cumsum of dt' A, times log2(e)
    float w[SSD2_Q];    // state weights exp(cs_last - cs_l) dt'_l (0 outside the last sequence)
    float ein[SSD2_Q];  // exp(cs_i) where token i continues the incoming state's sequence, else 0
    int seg0[SSD2_Q];   // first token of token i's sequence inside the chunk
    float decay;        // exp(cs_last), 0 when the chunk's last sequence differs from S's
    float pad[3];
};
#define SSD2_TOK_BYTES 2576

struct Ssd2Stage {
    unsigned char c[SSD2_BC_BYTES];
    unsigned char b[SSD2_BC_BYTES];
    unsigned char x[SSD2_X_BYTES];
    Ssd2Tok tok;
};

#define SSD2_XCH_ROW 68  // floats: the inter-chunk part [128 i][64 p], padded rows
struct Ssd2Smem {
    Ssd2Stage st[2];
    float xch[SSD2_Q * SSD2_XCH_ROW];
};
static_assert(sizeof(Ssd2Tok) == SSD2_TOK_BYTES, "SSD2_TOK_BYTES");
static_assert(sizeof(Ssd2Smem) == 216096, "V2_SMEM_BYTES in gpu/src/ops/ssd_chunk_scan.rs");

__device__ __forceinline__ u32 ssd2_smem_u32(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ssd2_ldsm4(u32 a, u32* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ssd2_ldsm4t(u32 a, u32* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ssd2_mma(float* c, const u32* a, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two f32 -> bf16x2 (round to nearest even): lo in the low half.
__device__ __forceinline__ u32 ssd2_pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// (f0, f1) = hi + lo with hi, lo bf16x2: ~16 mantissa bits of each value.
__device__ __forceinline__ void ssd2_split(float f0, float f1, u32& hi, u32& lo) {
    hi = ssd2_pack(f0, f1);
    lo = ssd2_pack(f0 - __uint_as_float(hi << 16), f1 - __uint_as_float(hi & 0xffff0000u));
}
__device__ __forceinline__ float ssd2_ex2(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
}

// grid.x = ceil(B * nc * H / 8), 256 threads: warp -> (b, c, h) record, h fastest.
extern "C" __global__ void __launch_bounds__(256)
    ssd2_tok(const void* dt, int dtdt, const void* A, int adt, const void* dt_bias, int dbdt,
             const i64* seq, SsdDims s, int softplus, float dt_min, float dt_max, Ssd2Tok* out) {
    const i64 nc = (s.L + SSD2_Q - 1) / SSD2_Q;
    const i64 rec = (i64)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (rec >= s.B * nc * s.H) return;
    const int lane = threadIdx.x & 31;
    const i64 h = rec % s.H, bc = rec / s.H, c = bc % nc, b = bc / nc;
    const i64 t0 = c * SSD2_Q;
    const int qc = (int)min((i64)SSD2_Q, s.L - t0);
    const float a = load_as_f32(A, h, adt);
    const float bias = dt_bias ? load_as_f32(dt_bias, h, dbdt) : 0.0f;
    // The sequence the incoming state belongs to: the previous token's (0 before the first).
    const i64 prev = (seq && c > 0) ? seq[b * s.L + t0 - 1] : 0;
    float v[4], pre[4];
    i64 q[4];
    float run = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int t = 4 * lane + k;
        float x = 0.0f;
        q[k] = 0;
        if (t < qc) {
            x = load_as_f32(dt, (b * s.L + t0 + t) * s.H + h, dtdt) + bias;
            if (softplus && x <= 20.0f) x = log1pf(expf(x));
            x = fminf(fmaxf(x, dt_min), dt_max);
            if (seq) q[k] = seq[b * s.L + t0 + t];
        }
        v[k] = x;
        run = run + x * a;
        pre[k] = run;
    }
    float incl = run;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const float o = __shfl_up_sync(DUET_FULL_MASK, incl, off);
        if (lane >= off) incl = incl + o;
    }
    float excl = __shfl_up_sync(DUET_FULL_MASK, incl, 1);
    if (lane == 0) excl = 0.0f;
    float cs[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) cs[k] = excl + pre[k];
    // The last token's cumsum and sequence id.
    const int tl = qc - 1, kl = tl & 3;
    const float csl_k = kl == 0 ? cs[0] : kl == 1 ? cs[1] : kl == 2 ? cs[2] : cs[3];
    const float cs_last = __shfl_sync(DUET_FULL_MASK, csl_k, tl >> 2);
    const i64 q_last = seq ? seq[b * s.L + t0 + tl] : 0;
    // Sequence starts: the latest t' <= t with seq[t'] != seq[t' - 1] (or 0).
    const i64 q_before = (seq && lane > 0 && 4 * lane - 1 < qc) ? seq[b * s.L + t0 + 4 * lane - 1] : 0;
    bool mk[4];
    int mark = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int t = 4 * lane + k;
        const i64 qp = k == 0 ? q_before : q[k - 1];
        mk[k] = t > 0 && t < qc && q[k] != qp;
        if (mk[k]) mark = t;
    }
    int mx = mark;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int o = __shfl_up_sync(DUET_FULL_MASK, mx, off);
        if (lane >= off) mx = max(mx, o);
    }
    int seg = __shfl_up_sync(DUET_FULL_MASK, mx, 1);
    if (lane == 0) seg = 0;
    float4 o_dtp, o_cs2, o_w, o_ein;
    int4 o_seg;
    float* pd = &o_dtp.x;
    float* pc = &o_cs2.x;
    float* pw = &o_w.x;
    float* pe = &o_ein.x;
    int* ps = &o_seg.x;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int t = 4 * lane + k;
        if (mk[k]) seg = t;
        const bool in = t < qc;
        const float cv = in ? cs[k] : cs_last;
        pd[k] = v[k];
        pc[k] = cv * 1.4426950408889634f;
        pw[k] = (in && q[k] == q_last) ? expf(cs_last - cv) * v[k] : 0.0f;
        pe[k] = (in && q[k] == prev) ? expf(cv) : 0.0f;
        ps[k] = in ? seg : t;
    }
    Ssd2Tok* tk = out + rec;
    reinterpret_cast<float4*>(tk->dtp)[lane] = o_dtp;
    reinterpret_cast<float4*>(tk->cs2)[lane] = o_cs2;
    reinterpret_cast<float4*>(tk->w)[lane] = o_w;
    reinterpret_cast<float4*>(tk->ein)[lane] = o_ein;
    reinterpret_cast<int4*>(tk->seg0)[lane] = o_seg;
    if (lane == 0) {
        tk->decay = q_last == prev ? expf(cs_last) : 0.0f;
        tk->pad[0] = tk->pad[1] = tk->pad[2] = 0.0f;
    }
}

// All threads: cp.async of chunk c's C, B (group g), x (head h) and token table into a stage;
// rows past the sequence are zero-filled.
__device__ __forceinline__ void ssd2_load_stage(Ssd2Stage* st, const u16* x, const u16* Bm,
                                                const u16* Cm, const Ssd2Tok* tok,
                                                const SsdDims& s, i64 b, i64 h, i64 g, i64 c,
                                                int tid) {
    const i64 t0 = c * SSD2_Q;
    const int qc = (int)min((i64)SSD2_Q, s.L - t0);
    // C and B: 128 rows x 16 segments of 16 bytes; this thread: rows r0 + 16 k, segment sg.
    {
        const int r0 = tid >> 4, sg = tid & 15;
        const i64 rs = s.G * SSD2_N;
        const i64 off = ((b * s.L + t0 + r0) * s.G + g) * SSD2_N + sg * 8;
        const u16* cp = Cm + off;
        const u16* bp = Bm + off;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const int r = r0 + 16 * k;
            const bool ok = r < qc;
            const i64 d = ok ? 16LL * k * rs : 0;
            duet_cp_async16_zfill(st->c + r * SSD2_BC_ROW + sg * 16, (ok ? cp : Cm) + d, ok);
            duet_cp_async16_zfill(st->b + r * SSD2_BC_ROW + sg * 16, (ok ? bp : Bm) + d, ok);
        }
    }
    // x: 128 rows x 8 segments; rows r0 + 32 k.
    {
        const int r0 = tid >> 3, sg = tid & 7;
        const i64 rs = s.H * SSD2_P;
        const u16* xp = x + ((b * s.L + t0 + r0) * s.H + h) * SSD2_P + sg * 8;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int r = r0 + 32 * k;
            const bool ok = r < qc;
            duet_cp_async16_zfill(st->x + r * SSD2_X_ROW + sg * 16, ok ? xp + 32LL * k * rs : x, ok);
        }
    }
    // The token table: 161 segments of 16 bytes.
    if (tid < SSD2_TOK_BYTES / 16) {
        const unsigned char* src = reinterpret_cast<const unsigned char*>(tok) + tid * 16;
        duet_cp_async16(reinterpret_cast<unsigned char*>(&st->tok) + tid * 16, src);
    }
}

// One 16 x 16 tile of G = C · B^T (rows i0.., columns s0..) in the mma accumulator layout:
// out[j][e] = G[i0 + g + 8 (e >> 1)][s0 + 8 j + 2 t + (e & 1)]; K (= dstate 128) in two halves
// (4 independent chains), summed at the end.
__device__ __forceinline__ void ssd2_g_tile(const u32 (*ca)[4], u32 bs_a, int s0, int lane,
                                            float (*out)[4]) {
    float gt[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) gt[j][0] = gt[j][1] = gt[j][2] = gt[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int k2 = kk + 4 * hf;
            u32 bb[4];
            ssd2_ldsm4(bs_a + (s0 + (lane & 7) + ((lane >> 4) << 3)) * SSD2_BC_ROW +
                           (k2 * 16 + ((lane >> 3) & 1) * 8) * 2,
                       bb);
            ssd2_mma(gt[2 * hf], ca[k2], bb[0], bb[1]);
            ssd2_mma(gt[2 * hf + 1], ca[k2], bb[2], bb[3]);
        }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) out[j][e] = gt[j][e] + gt[2 + j][e];
}

// G tiles of one (batch, chunk, group): the 36 causal 16 x 16 tiles (row block rb, column block
// sb <= rb; tile rb (rb + 1) / 2 + sb), each as 32 lanes x 8 floats in the accumulator layout
// (lane's out[0][0..3], out[1][0..3]): 1 KB a tile, 36 KB a record.
#define SSD2_G_TILES 36
#define SSD2_G_REC (SSD2_G_TILES * 256)

// ssd2_cb: grid.x = B * nc * G, 128 threads (warp w: row blocks w and 7 - w, 9 tiles), dynamic
// shared memory 2 * SSD2_BC_BYTES (C and B of the chunk, zero-filled past its end). The 16
// heads of a group then read G instead of each computing it.
extern "C" __global__ void __launch_bounds__(128)
    ssd2_cb(const u16* Bm, const u16* Cm, SsdDims s, float* gout) {
    extern __shared__ __align__(16) unsigned char ssd2_cb_raw[];
    unsigned char* cs = ssd2_cb_raw;
    unsigned char* bs = ssd2_cb_raw + SSD2_BC_BYTES;
    const i64 nc = (s.L + SSD2_Q - 1) / SSD2_Q;
    const i64 g = blockIdx.x % s.G, bc = blockIdx.x / s.G, c = bc % nc, b = bc / nc;
    const i64 t0 = c * SSD2_Q;
    const int qc = (int)min((i64)SSD2_Q, s.L - t0);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    {
        const int r0 = tid >> 4, sg = tid & 15;
        const i64 rs = s.G * SSD2_N;
        const i64 off = ((b * s.L + t0 + r0) * s.G + g) * SSD2_N + sg * 8;
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            const int r = r0 + 8 * k;
            const bool ok = r < qc;
            const i64 d = ok ? off + 8LL * k * rs : 0;
            duet_cp_async16_zfill(cs + r * SSD2_BC_ROW + sg * 16, Cm + d, ok);
            duet_cp_async16_zfill(bs + r * SSD2_BC_ROW + sg * 16, Bm + d, ok);
        }
    }
    duet_cp_async_commit();
    duet_cp_async_wait<0>();
    __syncthreads();
    const u32 cs_a = ssd2_smem_u32(cs), bs_a = ssd2_smem_u32(bs);
    float* rec = gout + ((b * nc + c) * s.G + g) * SSD2_G_REC + lane * 8;
#pragma unroll 1
    for (int k = 0; k < 2; ++k) {
        const int rb = k ? 7 - warp : warp;
        u32 ca[8][4];
#pragma unroll
        for (int kk = 0; kk < 8; ++kk)
            ssd2_ldsm4(cs_a + (rb * 16 + (lane & 15)) * SSD2_BC_ROW + (kk * 16 + (lane >> 4) * 8) * 2,
                       ca[kk]);
        for (int sb = 0; sb <= rb; ++sb) {
            float gt[2][4];
            ssd2_g_tile(ca, bs_a, sb * 16, lane, gt);
            float4* o = reinterpret_cast<float4*>(rec + (rb * (rb + 1) / 2 + sb) * 256);
            o[0] = make_float4(gt[0][0], gt[0][1], gt[0][2], gt[0][3]);
            o[1] = make_float4(gt[1][0], gt[1][1], gt[1][2], gt[1][3]);
        }
    }
}

// Warps 0-3, one 16-row block: the intra-chunk part into acc, then (after barrier 1 when
// `wait`: the state warps have written the inter-chunk part) the epilogue adds the inter-chunk
// part from `xch` and D x, gates with silu(z) and stores bf16 pairs.
__device__ __forceinline__ void ssd2_intra(const Ssd2Stage* st, const float* xch,
                                           const float* grec, int rb, int qc, bool wait,
                                           const float* dv, const void* z, int zdt, u16* y,
                                           i64 ybase, i64 yrow, int lane) {
    const int i0 = rb * 16;
    const int g = lane >> 2, t = lane & 3;
    const u32 xs_a = ssd2_smem_u32(st->x);
    float acc[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const Ssd2Tok& tk = st->tok;
    const int ia = i0 + g, ib = i0 + g + 8;
    const float c2a = tk.cs2[ia], c2b = tk.cs2[ib];
    const int sga = tk.seg0[ia], sgb = tk.seg0[ib];
    // One 16-column tile of G at a time, read from ssd2_cb's record (next tile prefetched).
    const float4* gp = reinterpret_cast<const float4*>(grec + (rb * (rb + 1) / 2) * 256 + lane * 8);
    float4 na = __ldg(gp), nb = __ldg(gp + 1);
    for (int sb = 0; sb <= rb; ++sb) {
        const int s0 = sb * 16;
        float gt[2][4];
        gt[0][0] = na.x, gt[0][1] = na.y, gt[0][2] = na.z, gt[0][3] = na.w;
        gt[1][0] = nb.x, gt[1][1] = nb.y, gt[1][2] = nb.z, gt[1][3] = nb.w;
        if (sb < rb) {
            na = __ldg(gp + 64 * (sb + 1));
            nb = __ldg(gp + 64 * (sb + 1) + 1);
        }
        u32 mh[4], ml[4];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int sc = s0 + 8 * j + 2 * t;
            const float2 c2s = *reinterpret_cast<const float2*>(&tk.cs2[sc]);
            const float2 dts = *reinterpret_cast<const float2*>(&tk.dtp[sc]);
            const float g0 = gt[j][0], g1 = gt[j][1], g2 = gt[j][2], g3 = gt[j][3];
            const float m0 = (sc <= ia && sc >= sga) ? g0 * ssd2_ex2(c2a - c2s.x) * dts.x : 0.0f;
            const float m1 =
                (sc + 1 <= ia && sc + 1 >= sga) ? g1 * ssd2_ex2(c2a - c2s.y) * dts.y : 0.0f;
            const float m2 = (sc <= ib && sc >= sgb) ? g2 * ssd2_ex2(c2b - c2s.x) * dts.x : 0.0f;
            const float m3 =
                (sc + 1 <= ib && sc + 1 >= sgb) ? g3 * ssd2_ex2(c2b - c2s.y) * dts.y : 0.0f;
            ssd2_split(m0, m1, mh[2 * j], ml[2 * j]);
            ssd2_split(m2, m3, mh[2 * j + 1], ml[2 * j + 1]);
        }
        u32 xb[4][4];
#pragma unroll
        for (int jp = 0; jp < 4; ++jp)
            ssd2_ldsm4t(xs_a + (s0 + (lane & 7) + ((lane >> 3) & 1) * 8) * SSD2_X_ROW +
                            (jp * 16 + (lane >> 4) * 8) * 2,
                        xb[jp]);
#pragma unroll
        for (int jp = 0; jp < 4; ++jp) {
            ssd2_mma(acc[2 * jp], mh, xb[jp][0], xb[jp][1]);
            ssd2_mma(acc[2 * jp + 1], mh, xb[jp][2], xb[jp][3]);
        }
#pragma unroll
        for (int jp = 0; jp < 4; ++jp) {
            ssd2_mma(acc[2 * jp], ml, xb[jp][0], xb[jp][1]);
            ssd2_mma(acc[2 * jp + 1], ml, xb[jp][2], xb[jp][3]);
        }
    }
    if (wait) asm volatile("bar.sync 1, 256;\n" ::: "memory");
    // Epilogue: + inter-chunk part, + D x, silu(z) gate, bf16 stores (pairs of p).
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int i = hf ? ib : ia;
        if (i >= qc) continue;
        const i64 row = ybase + (i64)i * yrow;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int p = 8 * j + 2 * t;
            const u32 xv = *reinterpret_cast<const u32*>(st->x + i * SSD2_X_ROW + p * 2);
            const float2 in = *reinterpret_cast<const float2*>(xch + i * SSD2_XCH_ROW + p);
            float v0 = (acc[j][2 * hf] + in.x) + dv[2 * j] * bf16_to_f32((u16)(xv & 0xffff));
            float v1 = (acc[j][2 * hf + 1] + in.y) + dv[2 * j + 1] * bf16_to_f32((u16)(xv >> 16));
            if (z) {
                const float z0 = load_as_f32(z, row + p, zdt), z1 = load_as_f32(z, row + p + 1, zdt);
                v0 = v0 * (z0 / (1.0f + expf(-z0)));
                v1 = v1 * (z1 / (1.0f + expf(-z1)));
            }
            *reinterpret_cast<u32*>(y + row + p) = (u32)f32_to_bf16(v0) | ((u32)f32_to_bf16(v1) << 16);
        }
    }
}

// Warps 4-7: dS for p rows 16 sw .. 16 sw + 15 (every n), then S = decay S + dS, and bf16(S)
// into the next chunk's S buffer.
__device__ __forceinline__ void ssd2_state(const Ssd2Stage* st, float* xch, int sw,
                                           float (*S)[4], int lane) {
    const int g = lane >> 2, t = lane & 3;
    const u32 bs_a = ssd2_smem_u32(st->b), xs_a = ssd2_smem_u32(st->x);
    const u32 cs_a = ssd2_smem_u32(st->c);
    // Inter-chunk part, transposed: X[p][i] = (S_hi + S_lo)[p][:] . C_i (S's accumulator
    // tiles are the A operand's layout), times exp(cs_i); into xch[i][p] for the row warps.
    {
        float xi[16][4];
#pragma unroll
        for (int j = 0; j < 16; ++j) xi[j][0] = xi[j][1] = xi[j][2] = xi[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            u32 ah[4], al[4];
            ssd2_split(S[2 * kk][0], S[2 * kk][1], ah[0], al[0]);
            ssd2_split(S[2 * kk][2], S[2 * kk][3], ah[1], al[1]);
            ssd2_split(S[2 * kk + 1][0], S[2 * kk + 1][1], ah[2], al[2]);
            ssd2_split(S[2 * kk + 1][2], S[2 * kk + 1][3], ah[3], al[3]);
#pragma unroll
            for (int ji = 0; ji < 8; ++ji) {
                u32 bb[4];
                ssd2_ldsm4(cs_a + (ji * 16 + (lane & 7) + ((lane >> 4) << 3)) * SSD2_BC_ROW +
                               (kk * 16 + ((lane >> 3) & 1) * 8) * 2,
                           bb);
                ssd2_mma(xi[2 * ji], ah, bb[0], bb[1]);
                ssd2_mma(xi[2 * ji + 1], ah, bb[2], bb[3]);
                ssd2_mma(xi[2 * ji], al, bb[0], bb[1]);
                ssd2_mma(xi[2 * ji + 1], al, bb[2], bb[3]);
            }
        }
        const Ssd2Tok& tk = st->tok;
        const int pa = 16 * sw + g;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int i = 8 * j + 2 * t;
            const float2 e = *reinterpret_cast<const float2*>(&tk.ein[i]);
            xch[i * SSD2_XCH_ROW + pa] = xi[j][0] * e.x;
            xch[(i + 1) * SSD2_XCH_ROW + pa] = xi[j][1] * e.y;
            xch[i * SSD2_XCH_ROW + pa + 8] = xi[j][2] * e.x;
            xch[(i + 1) * SSD2_XCH_ROW + pa + 8] = xi[j][3] * e.y;
        }
    }
    asm volatile("bar.arrive 1, 256;\n" ::: "memory");
    float dS[16][4];
#pragma unroll
    for (int j = 0; j < 16; ++j) dS[j][0] = dS[j][1] = dS[j][2] = dS[j][3] = 0.0f;
    const Ssd2Tok& tk = st->tok;
#pragma unroll 1
    for (int kk = 0; kk < 8; ++kk) {
        u32 xa[4];
        ssd2_ldsm4t(xs_a + (kk * 16 + (lane & 7) + (lane >> 4) * 8) * SSD2_X_ROW +
                        (16 * sw + ((lane >> 3) & 1) * 8) * 2,
                    xa);
        const float2 w01 = *reinterpret_cast<const float2*>(&tk.w[kk * 16 + 2 * t]);
        const float2 w89 = *reinterpret_cast<const float2*>(&tk.w[kk * 16 + 2 * t + 8]);
        u32 hi[4], lo[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const float2 w = r < 2 ? w01 : w89;
            ssd2_split(bf16_to_f32((u16)(xa[r] & 0xffff)) * w.x, bf16_to_f32((u16)(xa[r] >> 16)) * w.y,
                       hi[r], lo[r]);
        }
        u32 bb[8][4];
#pragma unroll
        for (int jn = 0; jn < 8; ++jn)
            ssd2_ldsm4t(bs_a + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * SSD2_BC_ROW +
                            (jn * 16 + (lane >> 4) * 8) * 2,
                        bb[jn]);
#pragma unroll
        for (int jn = 0; jn < 8; ++jn) {
            ssd2_mma(dS[2 * jn], hi, bb[jn][0], bb[jn][1]);
            ssd2_mma(dS[2 * jn + 1], hi, bb[jn][2], bb[jn][3]);
        }
#pragma unroll
        for (int jn = 0; jn < 8; ++jn) {
            ssd2_mma(dS[2 * jn], lo, bb[jn][0], bb[jn][1]);
            ssd2_mma(dS[2 * jn + 1], lo, bb[jn][2], bb[jn][3]);
        }
    }
    const float d = tk.decay;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) S[j][e] = d * S[j][e] + dS[j][e];
}

// grid.x = B * H (head fastest: the heads of a group run side by side and share C / B in L2).
// tok: ssd2_tok's records (B, nc, H). Dynamic shared memory: sizeof(Ssd2Smem).
extern "C" __global__ void __launch_bounds__(256, 1)
    ssd2_fused_p64_n128(const u16* x, const u16* Bm, const u16* Cm, const Ssd2Tok* tok,
                        const float* gtiles,
                        const void* Dm, int ddt, const void* z, int zdt, const void* init,
                        int idt, SsdDims s, u16* y, float* final_states) {
    extern __shared__ __align__(16) unsigned char ssd2_raw[];
    Ssd2Smem* sm = reinterpret_cast<Ssd2Smem*>(ssd2_raw);
    const i64 b = blockIdx.x / s.H, h = blockIdx.x % s.H;
    const i64 g = h / (s.H / s.G);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gl = lane >> 2, tl = lane & 3;
    const i64 nc = (s.L + SSD2_Q - 1) / SSD2_Q;
    float S[16][4];
    float dv[16];
    const int sw = warp - 4;
    if (warp >= 4) {
        // Initial state into registers and bf16 S buffer 0.
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int n = 8 * j + 2 * tl;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int p = 16 * sw + gl + 8 * (e >> 1);
                const i64 at = ((b * s.H + h) * SSD2_P + p) * SSD2_N + n + (e & 1);
                S[j][e] = init ? load_as_f32(init, at, idt) : 0.0f;
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int p = 8 * j + 2 * tl;
            dv[2 * j] = Dm ? load_as_f32(Dm, h * SSD2_P + p, ddt) : 0.0f;
            dv[2 * j + 1] = Dm ? load_as_f32(Dm, h * SSD2_P + p + 1, ddt) : 0.0f;
        }
    }
    const Ssd2Tok* tok_bh = tok + b * nc * s.H + h;  // chunk c: tok_bh + c * H
    if (nc > 0) {
        ssd2_load_stage(&sm->st[0], x, Bm, Cm, tok_bh, s, b, h, g, 0, tid);
        duet_cp_async_commit();
    }
    const i64 yrow = s.H * SSD2_P;
    for (i64 c = 0; c < nc; ++c) {
        const int cur = (int)(c & 1);
        if (c + 1 < nc) {
            ssd2_load_stage(&sm->st[cur ^ 1], x, Bm, Cm, tok_bh + (c + 1) * s.H, s, b, h, g,
                            c + 1, tid);
            duet_cp_async_commit();
            duet_cp_async_wait<1>();
        } else {
            duet_cp_async_wait<0>();
        }
        __syncthreads();
        const Ssd2Stage* st = &sm->st[cur];
        const i64 t0 = c * SSD2_Q;
        const int qc = (int)min((i64)SSD2_Q, s.L - t0);
        if (warp < 4) {
            const i64 ybase = ((b * s.L + t0) * s.H + h) * SSD2_P;
            const float* grec = gtiles + ((b * nc + c) * s.G + g) * SSD2_G_REC;
            // Row blocks warp and 7 - warp; barrier 1 exactly once a chunk.
            const int rb0 = warp, rb1 = 7 - warp;
            if (rb0 * 16 < qc)
                ssd2_intra(st, sm->xch, grec, rb0, qc, true, dv, z, zdt, y, ybase, yrow, lane);
            else
                asm volatile("bar.sync 1, 256;\n" ::: "memory");
            if (rb1 * 16 < qc)
                ssd2_intra(st, sm->xch, grec, rb1, qc, false, dv, z, zdt, y, ybase, yrow, lane);
        } else {
            ssd2_state(st, sm->xch, sw, S, lane);
        }
        __syncthreads();
    }
    if (warp >= 4) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int n = 8 * j + 2 * tl;
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int p = 16 * sw + gl + 8 * hf;
                const i64 at = ((b * s.H + h) * SSD2_P + p) * SSD2_N + n;
                *reinterpret_cast<float2*>(final_states + at) = make_float2(S[j][2 * hf], S[j][2 * hf + 1]);
            }
        }
    }
}

// ==== v3: v2's scan on wgmma (warpgroup MMA, sm_90a) ====
// One block per (batch, head) walks the chunks as in v2, with the same token table (ssd2_tok),
// masks, splits and state handling; the products run as wgmma.mma_async on three warpgroups
// (384 threads):
//   row warpgroups 0 / 1 (output rows 64 r .. 64 r + 63 of the chunk):
//     X   = C · (S_hi + S_lo)^T        A = C, B = S (both shared memory), 16 x m64n64k16
//     acc = exp(cs_i) X                 (0 where token i starts another sequence than S's)
//     G   = C · B^T                     8 x m64n64k16 a 64-column half (r 1: both halves)
//     M   = G exp(cs_i - cs_s) dt'_s    masked, split into bf16 hi + lo in registers (the
//                                       accumulator layout is the A fragment's)
//     acc += M · x                      A = M (registers), B = x (N-major), 8 x m64n64k16 a half
//     y   = acc + D x, times silu(z), bf16
//   state warpgroup 2 (S [64 p][128 n] f32 in its accumulator registers):
//     S   = decay S + (x w)^T · B       A = x w split hi + lo (registers, ldmatrix.trans),
//                                       B = B (N-major), 16 x m64n128k16
//     then, once the row warpgroups' X has read the old S (barrier 1), S as bf16 hi + lo into
//     shared memory for the next chunk.
// Shared-memory tiles are in wgmma's no-swizzle core-matrix layout: 8 rows x 16 bytes a core
// matrix (128 contiguous bytes), the core matrices of one 8-row group side by side
// (ssd3_off): C / B / S are K-major for C · B^T and C · S^T (LBO 128, SBO 2048) and B is
// N-major for (x w)^T · B (LBO 2048, SBO 128); x is N-major for M · x (LBO 1024, SBO 128).
// ldmatrix reads the same tiles (a core matrix row is 16 contiguous bytes).
#define SSD3_BC_BYTES (SSD2_Q * SSD2_N * 2)
#define SSD3_X_BYTES (SSD2_Q * SSD2_P * 2)
#define SSD3_S_BYTES (SSD2_P * SSD2_N * 2)
struct Ssd3Stage {
    unsigned char c[SSD3_BC_BYTES];
    unsigned char b[SSD3_BC_BYTES];
    unsigned char x[SSD3_X_BYTES];
    Ssd2Tok tok;
};
struct Ssd3Smem {
    Ssd3Stage st[2];
    unsigned char s_hi[SSD3_S_BYTES];
    unsigned char s_lo[SSD3_S_BYTES];
    float dvec[SSD2_P];  // D of the head (0 without D)
};
static_assert(sizeof(Ssd3Smem) == 202016, "V3_SMEM_BYTES in gpu/src/ops/ssd_chunk_scan.rs");
#define SSD3_THREADS 384
// v8: the three warpgroups and a producer warpgroup (one warp of it issues the loads; 13 warps
// would hold every warp to 128 registers: 4 of them share a 16K-register SM sub-partition)
#define SSD8_THREADS 512
#define SSD8_SF 416       // v8's SF: the three roles arrive, the producer warp syncs
#define SSD8_PREG 32      // setmaxnreg: the producer warpgroup's registers ...
#define SSD8_CREG 160     // ... and the three roles' (a sub-partition: 3 x 32 x 160 + 32 x 32 = 16384)

// Byte offset of (row r, 16-byte segment sg) in a tile of `segs` segments a row.
__device__ __forceinline__ int ssd3_off(int r, int sg, int segs) {
    return ((r >> 3) * segs + sg) * 128 + (r & 7) * 16;
}
// Racecheck bisection builds (scripts/calls/s38c1.sh; wrong results, never a default):
// DUET_NVRTC_DEFINES=DUET_RC_NO_WGMMA drops every wgmma (common.cuh's fences / commits / waits
// too), DUET_RC_NO_LOADS every cp.async stage load (v3-v5), so racecheck sees the hand-overs
// with fewer of the kernel's other shared-memory users, between the hand-over probe and the
// kernel.
// D (64 x 64 f32) (+)= A (64 x 16, shared memory, K-major) . B (16 x 64, shared memory,
// K-major); SCALE_D 0 ignores D's old value.
template <int SCALE_D>
__device__ __forceinline__ void ssd3_ss_n64(float* d, u64 da, u64 db) {
#ifndef DUET_RC_NO_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "n"(SCALE_D)
        : "memory");
#endif
}
// D (64 x 64 f32) (+)= A (64 x 16 bf16, registers: mma.sync's A fragment per warp) . B (16 x 64,
// shared memory; TB 0: K-major, 1: N-major); SCALE_D 0 ignores D's old value.
template <int SCALE_D, int TB>
__device__ __forceinline__ void ssd3_rs_n64(float* d, const u32* a, u64 db) {
#ifndef DUET_RC_NO_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "{%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(SCALE_D), "n"(TB)
        : "memory");
#endif
}
// D (64 x 128 f32) += A (64 x 16 bf16, registers) . B (16 x 128, shared memory, N-major).
__device__ __forceinline__ void ssd3_rs_n128_t(float* d, const u32* a, u64 db) {
#ifndef DUET_RC_NO_WGMMA
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "{%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
        : "memory");
#endif
}
// Pins n accumulator registers: no use moves across this point (after a wait).
template <int N>
__device__ __forceinline__ void ssd3_pin(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// NT threads (tid < NT; NT a multiple of 128): cp.async of chunk c's C, B (group g), x (head h)
// and token table into a stage, in the core-matrix layout; rows past the sequence are
// zero-filled. Segment i of a tile is its i-th 16 bytes in shared memory (i = (row / 8, 16-byte
// column, row % 8)), so a warp's writes are 512 contiguous bytes and its reads 8 rows x 64
// bytes; thread tid takes segments tid + NT k. Row warpgroup 0 issues them (NT 128) while its
// M · x runs (it has the least work): when all 384 threads issued them first thing in a chunk, a quarter of
// the stall samples sat in this loop (session 19, calls 2-3: the LDGSTS hold their address and
// predicate registers until the memory pipe takes them), delaying the row warpgroups' products.
// Session 37: ncu counts these 16-byte bypass copies at 2x the ideal L2 sectors and 8x the
// ideal shared-memory wavefronts (32 a warp instruction) whichever thread takes which 16 bytes:
// two other maps (a quarter-warp on whole sectors of 4 rows or of 2 rows) left both counts and
// the times unchanged (v5 at ssd_50k 2649-2663 us against 2654 with this map). v6 loads its
// stages through the TMA instead.
template <int NT>
__device__ __forceinline__ void ssd3_load_stage(Ssd3Stage* st, const u16* x, const u16* Bm,
                                                const u16* Cm, const Ssd2Tok* tok,
                                                const SsdDims& s, i64 b, i64 h, i64 g, i64 c,
                                                int tid) {
#ifdef DUET_RC_NO_LOADS
    return;  // racecheck bisection only (scripts/calls/s38c1.sh): the stage stays unwritten
#endif
    static_assert(NT % 128 == 0, "NT");
    const i64 t0 = c * SSD2_Q;
    const int qc = (int)min((i64)SSD2_Q, s.L - t0);
    {
        // C and B: 16 segments a row; rows advance by NT / 16 a step.
        const i64 rs = s.G * SSD2_N;
        int r = ((tid >> 7) << 3) + (tid & 7);
        const int sg = (tid >> 3) & 15;
        const i64 base = ((b * s.L + t0) * s.G + g) * SSD2_N;
        i64 src = base + (i64)r * rs + sg * 8;
        int dst = tid * 16;
#pragma unroll 1
        for (; r < SSD2_Q; r += NT / 16, src += (NT / 16) * rs, dst += NT * 16) {
            const bool ok = r < qc;
            duet_cp_async16_zfill(st->c + dst, Cm + (ok ? src : base), ok);
            duet_cp_async16_zfill(st->b + dst, Bm + (ok ? src : base), ok);
        }
    }
    {
        // x: 8 segments a row; rows advance by NT / 8 a step.
        const i64 rs = s.H * SSD2_P;
        int r = ((tid >> 6) << 3) + (tid & 7);
        const int sg = (tid >> 3) & 7;
        const i64 base = ((b * s.L + t0) * s.H + h) * SSD2_P;
        i64 src = base + (i64)r * rs + sg * 8;
        int dst = tid * 16;
#pragma unroll 1
        for (; r < SSD2_Q; r += NT / 8, src += (NT / 8) * rs, dst += NT * 16) {
            const bool ok = r < qc;
            duet_cp_async16_zfill(st->x + dst, x + (ok ? src : base), ok);
        }
    }
    for (int i = tid; i < SSD2_TOK_BYTES / 16; i += NT) {
        const unsigned char* src = reinterpret_cast<const unsigned char*>(tok) + i * 16;
        duet_cp_async16(reinterpret_cast<unsigned char*>(&st->tok) + i * 16, src);
    }
}

// The next chunk's loads, issued by row warpgroup 0 inside ssd3_rows: the kernel's own
// pointers, the stage (nullptr: no next chunk) and the chunk; batch and head come from blockIdx
// (few registers live across the state step).
struct Ssd3Next {
    Ssd3Stage* st;
    const u16 *x, *Bm, *Cm;
    const Ssd2Tok* tok;
    i64 c;
    // v6 (TMA): the tensor maps and the stage's full barrier (unused elsewhere)
    const struct SsdTmaps* tm;
    u64* full;
};

// ---- v6: the stage loads through the tensor memory accelerator (TMA) ----
// A CUtensorMap (cuTensorMapEncodeTiled, gpu/src/ops/ssd_chunk_scan.rs `ssd6_tensor_maps`):
// 128 opaque bytes, 64-byte aligned, passed by value as a __grid_constant__ kernel parameter.
struct __align__(64) SsdTmap {
    unsigned long long v[16];
};
// C, B (batch, seqlen, ngroups, 128) and x (batch, seqlen, nheads, 64), each seen as a 5-D
// tensor (8 elements of a 16-byte segment, token [row stride], segment [16 bytes], group or
// head [row bytes], batch): a box of (8, 8, SEGS, 1, 1) is one 8-row group of a tile, and the
// TMA writes it innermost-first, i.e. in the core-matrix layout of ssd3_off (16-byte rows of
// a core matrix, then the 8 rows, then the segments). Rows past the sequence read as zeros
// (out of bounds of the token dimension), as ssd3_load_stage's zero fill.
struct __align__(64) SsdTmaps {
    SsdTmap c, b, x;
};
__device__ __forceinline__ void ssd6_tma5(u32 dst, const SsdTmap* tm, int tok, int gh, int bt,
                                          u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%2, %3, %2, %4, %5}], [%6];" ::"r"(dst),
        "l"(reinterpret_cast<u64>(tm)), "r"(0), "r"(tok), "r"(gh), "r"(bt), "r"(bar)
        : "memory");
}
// One warp (32 lanes): chunk c's C and B (lanes 0 .. 15: 8-row group = lane), x (lanes 16 ..
// 31) and token record (lane 0, a bulk copy), all completing on `full`, which lane 0 arms with
// the stage's bytes (whole boxes, zero-filled rows included) before its arrival.
__device__ __forceinline__ void ssd6_load_stage(Ssd3Stage* st, const SsdTmaps* tm,
                                                const Ssd2Tok* tok, i64 b, i64 h, i64 g, i64 c,
                                                int lane, u64* full) {
    const u32 bar = duet_smem_u32(full);
    const int t0 = (int)(c * SSD2_Q);  // the host keeps seqlen < 2^31
    if (lane < 16) {
        ssd6_tma5(duet_smem_u32(st->c + lane * 2048), &tm->c, t0 + 8 * lane, (int)g, (int)b, bar);
        ssd6_tma5(duet_smem_u32(st->b + lane * 2048), &tm->b, t0 + 8 * lane, (int)g, (int)b, bar);
    } else {
        const int gi = lane - 16;
        ssd6_tma5(duet_smem_u32(st->x + gi * 1024), &tm->x, t0 + 8 * gi, (int)h, (int)b, bar);
    }
    if (lane == 0) {
        duet_mbar_expect_tx(full, 2 * SSD3_BC_BYTES + SSD3_X_BYTES + SSD2_TOK_BYTES);
        duet_bulk_g2s(&st->tok, tok, SSD2_TOK_BYTES, full);
        duet_mbar_arrive(full);
    }
}

// M = G exp(cs_i - cs_s) dt'_s for one 64-column half hn of G (accumulator layout, rows ia /
// ib), masked to s <= i in token i's sequence, as bf16 hi + lo A fragments of 4 k-steps.
__device__ __forceinline__ void ssd3_m_frags(const float* gacc, const Ssd2Tok& tk, int hn,
                                             int ia, int ib, int t, u32 (*mh)[4],
                                             u32 (*ml)[4]) {
    const float c2a = tk.cs2[ia], c2b = tk.cs2[ib];
    const int sga = tk.seg0[ia], sgb = tk.seg0[ib];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int sc = 64 * hn + 8 * j + 2 * t;
        const float2 c2s = *reinterpret_cast<const float2*>(&tk.cs2[sc]);
        const float2 dts = *reinterpret_cast<const float2*>(&tk.dtp[sc]);
        const float* gg = gacc + 4 * j;
        const float m0 = (sc <= ia && sc >= sga) ? gg[0] * ssd2_ex2(c2a - c2s.x) * dts.x : 0.0f;
        const float m1 =
            (sc + 1 <= ia && sc + 1 >= sga) ? gg[1] * ssd2_ex2(c2a - c2s.y) * dts.y : 0.0f;
        const float m2 = (sc <= ib && sc >= sgb) ? gg[2] * ssd2_ex2(c2b - c2s.x) * dts.x : 0.0f;
        const float m3 =
            (sc + 1 <= ib && sc + 1 >= sgb) ? gg[3] * ssd2_ex2(c2b - c2s.y) * dts.y : 0.0f;
        const int kk = j >> 1, q = 2 * (j & 1);
        ssd2_split(m0, m1, mh[kk][q], ml[kk][q]);
        ssd2_split(m2, m3, mh[kk][q + 1], ml[kk][q + 1]);
    }
}

// Row warpgroup r (rows 64 r ..): X, G, M · x and the epilogue of one chunk. Arrives on barrier
// 1 once X's reads of the S buffers are done.
__device__ __forceinline__ void ssd3_rows(const Ssd3Stage* st, const unsigned char* s_hi,
                                          const unsigned char* s_lo, int r, int qc,
                                          const float* dvec, const void* z, int zdt, u16* y,
                                          i64 ybase, i64 yrow, int w, int lane,
                                          const Ssd3Next& nx, const SsdDims& s) {
    const int g = lane >> 2, t = lane & 3;
    const Ssd2Tok& tk = st->tok;
    const unsigned char* crow = st->c + r * 8 * 2048;
    float acc[32], gacc[32];
    // X = C · S^T (hi, then lo) and G's first half.
    wg_fence();
    ssd3_ss_n64<0>(acc, wg_desc(crow, 128, 2048), wg_desc(s_hi, 128, 2048));
#pragma unroll
    for (int kk = 1; kk < 8; ++kk)
        ssd3_ss_n64<1>(acc, wg_desc(crow + kk * 256, 128, 2048), wg_desc(s_hi + kk * 256, 128, 2048));
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
        ssd3_ss_n64<1>(acc, wg_desc(crow + kk * 256, 128, 2048), wg_desc(s_lo + kk * 256, 128, 2048));
    wg_commit();
    ssd3_ss_n64<0>(gacc, wg_desc(crow, 128, 2048), wg_desc(st->b, 128, 2048));
#pragma unroll
    for (int kk = 1; kk < 8; ++kk)
        ssd3_ss_n64<1>(gacc, wg_desc(crow + kk * 256, 128, 2048), wg_desc(st->b + kk * 256, 128, 2048));
    wg_commit();
    wg_wait1();
    ssd3_pin<32>(acc);
    asm volatile("bar.arrive 1, 384;\n" ::: "memory");
    const int ia = 64 * r + 16 * w + g, ib = ia + 8;
    {
        const float ea = tk.ein[ia], eb = tk.ein[ib];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            acc[4 * j] *= ea;
            acc[4 * j + 1] *= ea;
            acc[4 * j + 2] *= eb;
            acc[4 * j + 3] *= eb;
        }
    }
    wg_wait0();
    ssd3_pin<32>(gacc);
#pragma unroll 1
    for (int hn = 0; hn <= r; ++hn) {
        if (hn > 0) {
            // G's second half (columns 64 .. 127: B rows 64 ..); the first half's M · x runs.
            wg_fence();
            const unsigned char* b1 = st->b + 8 * 2048;
            ssd3_ss_n64<0>(gacc, wg_desc(crow, 128, 2048), wg_desc(b1, 128, 2048));
#pragma unroll
            for (int kk = 1; kk < 8; ++kk)
                ssd3_ss_n64<1>(gacc, wg_desc(crow + kk * 256, 128, 2048), wg_desc(b1 + kk * 256, 128, 2048));
            wg_commit();
            wg_wait0();
            ssd3_pin<32>(gacc);
            ssd3_pin<32>(acc);
        }
        u32 mh[4][4], ml[4][4];
        ssd3_m_frags(gacc, tk, hn, ia, ib, t, mh, ml);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const u64 db = wg_desc(st->x + (8 * hn + 2 * kk) * 1024, 1024, 128);
            ssd3_rs_n64<1, 1>(acc, mh[kk], db);
            ssd3_rs_n64<1, 1>(acc, ml[kk], db);
        }
        wg_commit();
        if (r == 0 && nx.st) {
            // Warpgroup 0 (the lighter one: rows 0 .. 63, one half of G) issues the next chunk's
            // loads while its M · x runs.
            const i64 b = blockIdx.x / s.H, h = blockIdx.x % s.H;
            const i64 nc = (s.L + SSD2_Q - 1) / SSD2_Q;
            ssd3_load_stage<128>(nx.st, nx.x, nx.Bm, nx.Cm, nx.tok + (b * nc + nx.c) * s.H + h, s,
                                 b, h, h / (s.H / s.G), nx.c, 32 * w + lane);
            duet_cp_async_commit();
        }
    }
    wg_wait0();
    ssd3_pin<32>(acc);
    // Epilogue: + D x, silu(z) gate, bf16 stores (pairs of p).
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int i = hf ? ib : ia;
        if (i >= qc) continue;
        const i64 row = ybase + (i64)i * yrow;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int p = 8 * j + 2 * t;
            const u32 xv = *reinterpret_cast<const u32*>(st->x + ssd3_off(i, j, 8) + 4 * t);
            const float2 dv = *reinterpret_cast<const float2*>(dvec + p);
            float v0 = acc[4 * j + 2 * hf] + dv.x * bf16_to_f32((u16)(xv & 0xffff));
            float v1 = acc[4 * j + 2 * hf + 1] + dv.y * bf16_to_f32((u16)(xv >> 16));
            if (z) {
                const float z0 = load_as_f32(z, row + p, zdt), z1 = load_as_f32(z, row + p + 1, zdt);
                v0 = v0 * (z0 / (1.0f + expf(-z0)));
                v1 = v1 * (z1 / (1.0f + expf(-z1)));
            }
            *reinterpret_cast<u32*>(y + row + p) = (u32)f32_to_bf16(v0) | ((u32)f32_to_bf16(v1) << 16);
        }
    }
}

// State warpgroup: S = decay S + (x w)^T · B for p rows 16 w .. 16 w + 15 of each warp, in two
// batches of 4 k-steps (the A fragments of one batch live at a time: S and all 8 k-steps'
// fragments do not fit in 168 registers).
__device__ __forceinline__ void ssd3_state(const Ssd3Stage* st, float* S, int w, int lane) {
    const int t = lane & 3;
    const Ssd2Tok& tk = st->tok;
    const u32 xs_a = ssd2_smem_u32(st->x);
    const float d = tk.decay;
#pragma unroll
    for (int i = 0; i < 64; ++i) S[i] *= d;
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
        u32 fh[4][4], fl[4][4];
#pragma unroll
        for (int k4 = 0; k4 < 4; ++k4) {
            const int kk = 4 * half + k4;
            u32 xa[4];
            const int sr = kk * 16 + (lane & 7) + (lane >> 4) * 8;
            ssd2_ldsm4t(xs_a + ssd3_off(sr, 2 * w + ((lane >> 3) & 1), 8), xa);
            const float2 w01 = *reinterpret_cast<const float2*>(&tk.w[kk * 16 + 2 * t]);
            const float2 w89 = *reinterpret_cast<const float2*>(&tk.w[kk * 16 + 2 * t + 8]);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float2 wv = q < 2 ? w01 : w89;
                ssd2_split(bf16_to_f32((u16)(xa[q] & 0xffff)) * wv.x,
                           bf16_to_f32((u16)(xa[q] >> 16)) * wv.y, fh[k4][q], fl[k4][q]);
            }
        }
        wg_fence();
#pragma unroll
        for (int k4 = 0; k4 < 4; ++k4) {
            const u64 db = wg_desc(st->b + (4 * half + k4) * 2 * 2048, 2048, 128);
            ssd3_rs_n128_t(S, fh[k4], db);
            ssd3_rs_n128_t(S, fl[k4], db);
        }
        wg_commit();
        wg_wait0();
        ssd3_pin<64>(S);
    }
}

// State warpgroup: S as bf16 hi + lo into the K-major S buffers (rows p, 16 n-segments).
__device__ __forceinline__ void ssd3_store_s(const float* S, unsigned char* s_hi,
                                             unsigned char* s_lo, int w, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int off = ssd3_off(16 * w + g + 8 * hf, j, 16) + 4 * t;
            u32 hi, lo;
            ssd2_split(S[4 * j + 2 * hf], S[4 * j + 2 * hf + 1], hi, lo);
            *reinterpret_cast<u32*>(s_hi + off) = hi;
            *reinterpret_cast<u32*>(s_lo + off) = lo;
        }
    wg_fence_smem();
}

// State warpgroup: S (p rows 16 w + gl (+ 8), n columns 8 j + 2 tl (+ 1): the accumulator
// layout) from initial_states (b, h, p, n) in any dtype, zeros without it.
__device__ __forceinline__ void ssd3_init_state(float* S, const void* init, int idt, i64 b, i64 h,
                                                const SsdDims& s, int w, int gl, int tl) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int p = 16 * w + gl + 8 * (e >> 1), n = 8 * j + 2 * tl + (e & 1);
            const i64 at = ((b * s.H + h) * SSD2_P + p) * SSD2_N + n;
            S[4 * j + e] = init ? load_as_f32(init, at, idt) : 0.0f;
        }
}

// State warpgroup: the head's final state (f32, blockIdx.x = b H + h) from S.
__device__ __forceinline__ void ssd3_store_final(const float* S, float* final_states, int w, int gl,
                                                 int tl) {
    float* fs = final_states + (i64)blockIdx.x * (SSD2_P * SSD2_N);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int n = 8 * j + 2 * tl;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int p = 16 * w + gl + 8 * hf;
            const i64 at = (i64)p * SSD2_N + n;
            *reinterpret_cast<float2*>(fs + at) = make_float2(S[4 * j + 2 * hf], S[4 * j + 2 * hf + 1]);
        }
    }
}

// grid.x = B * H, 384 threads, dynamic shared memory sizeof(Ssd3Smem); tok: ssd2_tok's
// records (B, nc, H).
extern "C" __global__ void __launch_bounds__(SSD3_THREADS, 1)
    ssd3_fused_p64_n128(const u16* x, const u16* Bm, const u16* Cm, const Ssd2Tok* tok,
                        const void* Dm, int ddt, const void* z, int zdt, const void* init,
                        int idt, SsdDims s, u16* y, float* final_states) {
    extern __shared__ __align__(128) unsigned char ssd3_raw[];
    Ssd3Smem* sm = reinterpret_cast<Ssd3Smem*>(ssd3_raw);
    const i64 b = blockIdx.x / s.H, h = blockIdx.x % s.H;
    const i64 g = h / (s.H / s.G);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gl = lane >> 2, tl = lane & 3;
    const int wg = warp >> 2, w = warp & 3;
    const i64 nc = (s.L + SSD2_Q - 1) / SSD2_Q;
    const Ssd2Tok* tok_bh = tok + b * nc * s.H + h;  // chunk c: tok_bh + c * H
    if (nc > 0) {
        ssd3_load_stage<SSD3_THREADS>(&sm->st[0], x, Bm, Cm, tok_bh, s, b, h, g, 0, tid);
        duet_cp_async_commit();
    }
    // The two roles run their own copies of the chunk loop (their registers never live at the
    // same time: S in one, the row accumulators in the other); each iteration passes barrier 0
    // (the chunk is in shared memory, everyone is past the previous one) and barrier 1 (the
    // row warpgroups are done reading the S buffers) once, in both loops. Barrier 0 is the
    // non-aligned `barrier.sync` (`bar.sync` = `barrier.sync.aligned` requires every thread at
    // the same instruction: synccheck reported the two loops' copies, session 19 call 2).
    if (wg == 2) {
        float S[64];
        ssd3_init_state(S, init, idt, b, h, s, w, gl, tl);
        ssd3_store_s(S, sm->s_hi, sm->s_lo, w, lane);
        for (i64 c = 0; c < nc; ++c) {
            const int cur = (int)(c & 1);
            duet_cp_async_wait<0>();
            wg_fence_smem();
            asm volatile("barrier.sync 0;\n" ::: "memory");
            ssd3_state(&sm->st[cur], S, w, lane);
            asm volatile("bar.sync 1, 384;\n" ::: "memory");
            ssd3_store_s(S, sm->s_hi, sm->s_lo, w, lane);
        }
        // The head's final state (blockIdx.x = b H + h).
        ssd3_store_final(S, final_states, w, gl, tl);
    } else {
        // D of the head into shared memory (the first barrier 0 publishes it).
        if (tid < SSD2_P) sm->dvec[tid] = Dm ? load_as_f32(Dm, h * SSD2_P + tid, ddt) : 0.0f;
        const i64 yrow = s.H * SSD2_P;
        for (i64 c = 0; c < nc; ++c) {
            const int cur = (int)(c & 1);
            duet_cp_async_wait<0>();
            wg_fence_smem();
            asm volatile("barrier.sync 0;\n" ::: "memory");
            const i64 t0 = c * SSD2_Q;
            const int qc = (int)min((i64)SSD2_Q, s.L - t0);
            const i64 ybase = ((b * s.L + t0) * s.H + h) * SSD2_P;
            // Every thread is past chunk c - 1: its stage takes chunk c + 1.
            const Ssd3Next nx{c + 1 < nc ? &sm->st[cur ^ 1] : nullptr, x, Bm, Cm, tok, c + 1};
            ssd3_rows(&sm->st[cur], sm->s_hi, sm->s_lo, wg, qc, sm->dvec, z, zdt, y, ybase, yrow,
                      w, lane, nx, s);
        }
    }
}

// ==== v4: v3 with the inter-chunk part on the state warpgroup ====
// Session 19's profile of v3 (ncu source counters, 4096 tokens): the state warpgroup waited at
// the chunk barrier for about half its time while the row warpgroups (X, G, M, M · x, the
// epilogue) set the pace. v4 moves X = C · S^T to the state warpgroup, from its registers (A = S
// split into bf16 hi + lo per k-step, B = C, K-major): X^T [64 p][128 l] in two 64-column
// halves, times exp(cs_l), into shared memory (xch, f32) for the rows' epilogue behind barrier 1
// (v2's hand-over). The S buffers go away; the rows only compute G (warpgroup 1 issues both
// halves at once), M, M · x and the epilogue (bf16 pairs by cvt.rn.bf16x2, the z gate compiled
// only into the z variant).
#define SSD4_XCH_ROW 68  // floats: [128 l][64 p], padded rows (conflict-free stores and loads)
struct Ssd4Smem {
    Ssd3Stage st[2];
    float xch[SSD2_Q * SSD4_XCH_ROW];
    float dvec[SSD2_P];
};
static_assert(sizeof(Ssd4Smem) == 204064, "V4_SMEM_BYTES in gpu/src/ops/ssd_chunk_scan.rs");

// v5's named barriers (below; declared here for the row code v4 and v5 share). The
// non-aligned forms: one id is passed at different code sites by different warpgroups. Every id
// an immediate (session 22).
#define SSD5_LR0 1      // 1, 2: stage p loaded, for row warpgroup 1 (warpgroup 0 arrives: 256)
#define SSD5_LS0 3      // 3, 4: stage p loaded, for the state warpgroup (warpgroup 0 arrives: 256)
#define SSD5_SF0 5      // 5, 6: stage p's chunk done by row warpgroup 1 and the state (they
                        // arrive), before warpgroup 0 loads it again (syncs): 384
#define SSD5_XFULL0 7   // 7 .. 9: X half slot s written (the state arrives, its reader syncs: 256)
#define SSD5_WG0 10     // row warpgroup 0 alone (128): its copies of a stage are all done
// (duet_jitter: before an arrival, after a sync; nothing unless DUET_JITTER is defined)
template <int ID, int N, bool ARRIVE>
__device__ __forceinline__ void ssd5_bar() {
    if (ARRIVE) {
        duet_jitter();
        asm volatile("barrier.arrive %0, %1;\n" ::"n"(ID), "n"(N) : "memory");
    } else {
        asm volatile("barrier.sync %0, %1;\n" ::"n"(ID), "n"(N) : "memory");
        duet_jitter();
    }
}
// A stage's full barrier (v6 / v7), every thread of the warp; jitter after it.
__device__ __forceinline__ void ssd6_full_wait(u64* bar, u32 parity) {
    duet_mbar_wait(bar, parity);
    duet_jitter();
}
// Barrier ID0 + i, i in 0 .. 1 (warp-uniform).
template <int ID0, int N, bool ARRIVE>
__device__ __forceinline__ void ssd5_bar2(int i) {
    if (i == 0)
        ssd5_bar<ID0, N, ARRIVE>();
    else
        ssd5_bar<ID0 + 1, N, ARRIVE>();
}
// Barrier ID0 + i, i in 0 .. 2 (warp-uniform).
template <int ID0, int N, bool ARRIVE>
__device__ __forceinline__ void ssd5_bar3(int i) {
    if (i == 0)
        ssd5_bar<ID0, N, ARRIVE>();
    else if (i == 1)
        ssd5_bar<ID0 + 1, N, ARRIVE>();
    else
        ssd5_bar<ID0 + 2, N, ARRIVE>();
}

// v7's XFULL: barrier of X half k by k % 6 (7, 8, 9, 11, 12, 13; 10 is SSD5_WG0), i in 0 .. 5
// (warp-uniform). v5's three ids (by slot) rely on LR a chunk; without it row warpgroup 1 could
// sync half k + 3's barrier before row warpgroup 0 synced half k's (gpu/src/handover_model.rs
// `V7Fault::ThreeXfull`).
template <bool ARRIVE>
__device__ __forceinline__ void ssd7_xfull(int i) {
    if (i < 3)
        ssd5_bar3<7, 256, ARRIVE>(i);
    else
        ssd5_bar3<11, 256, ARRIVE>(i - 3);
}

// Two f32 -> bf16 pair, round to nearest even (cvt.rn.bf16x2); NaN keeps f32_to_bf16's payload.
__device__ __forceinline__ u32 ssd4_bf16x2(float v0, float v1) {
    if (v0 != v0 || v1 != v1) return (u32)f32_to_bf16(v0) | ((u32)f32_to_bf16(v1) << 16);
    return ssd2_pack(v0, v1);
}

// Rows ia / ib of one row warpgroup: y = acc + X + D x (times silu(z) when Z), bf16 pairs.
// xch holds rows i0 .. of X (v4: all 128, i0 = 0; v5: the warpgroup's half slot, i0 = 64 R).
template <bool Z>
__device__ __forceinline__ void ssd4_epilogue(const float* acc, const Ssd3Stage* st,
                                              const float* xch, int i0, const float* dvec,
                                              const void* z, int zdt, u16* y, i64 ybase, i64 yrow,
                                              int ia, int ib, int qc, int t) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int i = hf ? ib : ia;
        if (i >= qc) continue;
        const i64 row = ybase + (i64)i * yrow;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int p = 8 * j + 2 * t;
            const u32 xv = *reinterpret_cast<const u32*>(st->x + ssd3_off(i, j, 8) + 4 * t);
            const float2 in = *reinterpret_cast<const float2*>(xch + (i - i0) * SSD4_XCH_ROW + p);
            const float2 dv = *reinterpret_cast<const float2*>(dvec + p);
            float v0 = (acc[4 * j + 2 * hf] + in.x) + dv.x * bf16_to_f32((u16)(xv & 0xffff));
            float v1 = (acc[4 * j + 2 * hf + 1] + in.y) + dv.y * bf16_to_f32((u16)(xv >> 16));
            if (Z) {
                const float z0 = load_as_f32(z, row + p, zdt), z1 = load_as_f32(z, row + p + 1, zdt);
                v0 = v0 * (z0 / (1.0f + expf(-z0)));
                v1 = v1 * (z1 / (1.0f + expf(-z1)));
            }
            *reinterpret_cast<u32*>(y + row + p) = ssd4_bf16x2(v0, v1);
        }
    }
}

// G, M and M · x of row warpgroup R (into acc, waited for); warpgroup 0 issues the next chunk's
// loads (nx.st) while its M · x runs, in v5 (SF) after barrier SF(nx.c & 1): the stage's last
// chunk is done everywhere (nx.c >= 2); v6 (TMA) issues them from warp 0 through the TMA.
// SFN: SF's thread count (the caller's; v8's 416 if a producer-warp form ever issued here).
template <int R, bool SF, bool TMA = false, int SFN = SSD3_THREADS>
__device__ __forceinline__ void ssd4_row_products(const Ssd3Stage* st, float* acc, int w,
                                                  int lane, const Ssd3Next& nx,
                                                  const SsdDims& s) {
    const int g = lane >> 2, t = lane & 3;
    const Ssd2Tok& tk = st->tok;
    const unsigned char* crow = st->c + R * 8 * 2048;
    float g0[32], g1[32];
    // G = C · B^T: columns 0 .. 63, and for warpgroup 1 also 64 .. 127, one group each.
    wg_fence();
    ssd3_ss_n64<0>(g0, wg_desc(crow, 128, 2048), wg_desc(st->b, 128, 2048));
#pragma unroll
    for (int kk = 1; kk < 8; ++kk)
        ssd3_ss_n64<1>(g0, wg_desc(crow + kk * 256, 128, 2048), wg_desc(st->b + kk * 256, 128, 2048));
    wg_commit();
    const unsigned char* b1 = st->b + 8 * 2048;
    if (R == 1) {
        ssd3_ss_n64<0>(g1, wg_desc(crow, 128, 2048), wg_desc(b1, 128, 2048));
#pragma unroll
        for (int kk = 1; kk < 8; ++kk)
            ssd3_ss_n64<1>(g1, wg_desc(crow + kk * 256, 128, 2048), wg_desc(b1 + kk * 256, 128, 2048));
        wg_commit();
        wg_wait1();
    } else {
        wg_wait0();
    }
    ssd3_pin<32>(g0);
    const int ia = 64 * R + 16 * w + g, ib = ia + 8;
    u32 mh[4][4], ml[4][4];
    ssd3_m_frags(g0, tk, 0, ia, ib, t, mh, ml);
    wg_fence();
    ssd3_rs_n64<0, 1>(acc, mh[0], wg_desc(st->x, 1024, 128));
    ssd3_rs_n64<1, 1>(acc, ml[0], wg_desc(st->x, 1024, 128));
#pragma unroll
    for (int kk = 1; kk < 4; ++kk) {
        const u64 db = wg_desc(st->x + 2 * kk * 1024, 1024, 128);
        ssd3_rs_n64<1, 1>(acc, mh[kk], db);
        ssd3_rs_n64<1, 1>(acc, ml[kk], db);
    }
    wg_commit();
    if (R == 0 && nx.st) {
        const i64 b = blockIdx.x / s.H, h = blockIdx.x % s.H;
        const i64 nc = (s.L + SSD2_Q - 1) / SSD2_Q;
        if (SF && nx.c >= 2) ssd5_bar2<SSD5_SF0, SFN, false>((int)(nx.c & 1));
        if constexpr (TMA) {
            if (w == 0)
                ssd6_load_stage(nx.st, nx.tm, nx.tok + (b * nc + nx.c) * s.H + h, b, h,
                                h / (s.H / s.G), nx.c, lane, nx.full);
        } else {
            ssd3_load_stage<128>(nx.st, nx.x, nx.Bm, nx.Cm, nx.tok + (b * nc + nx.c) * s.H + h,
                                 s, b, h, h / (s.H / s.G), nx.c, 32 * w + lane);
            duet_cp_async_commit();
        }
    }
    if (R == 1) {
        // The second half's M (G's columns 64 .. 127) once the first M · x is done with mh / ml.
        wg_wait0();
        ssd3_pin<32>(g1);
        ssd3_pin<32>(acc);
        ssd3_m_frags(g1, tk, 1, ia, ib, t, mh, ml);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const u64 db = wg_desc(st->x + (8 + 2 * kk) * 1024, 1024, 128);
            ssd3_rs_n64<1, 1>(acc, mh[kk], db);
            ssd3_rs_n64<1, 1>(acc, ml[kk], db);
        }
        wg_commit();
    }
    wg_wait0();
    ssd3_pin<32>(acc);
}

// Row warpgroup R (rows 64 R ..): G, M, M · x of one chunk; after barrier 1 (X is in xch) the
// epilogue. Warpgroup 0 issues the next chunk's loads while its M · x runs. (R is a template
// parameter: wgmma under a branch ptxas cannot prove warp-uniform gets serialized.)
template <int R>
__device__ __forceinline__ void ssd4_rows(const Ssd3Stage* st, const float* xch, int qc,
                                          const float* dvec, const void* z, int zdt, u16* y,
                                          i64 ybase, i64 yrow, int w, int lane,
                                          const Ssd3Next& nx, const SsdDims& s) {
    const int g = lane >> 2, t = lane & 3;
    float acc[32];
    ssd4_row_products<R, false>(st, acc, w, lane, nx, s);
    const int ia = 64 * R + 16 * w + g, ib = ia + 8;
    // Barrier 1 + R: the state warpgroup has written this warpgroup's rows of X.
    asm volatile("bar.sync %0, 256;\n" ::"n"(1 + R) : "memory");
    duet_jitter();
    if (z)
        ssd4_epilogue<true>(acc, st, xch, 0, dvec, z, zdt, y, ybase, yrow, ia, ib, qc, t);
    else
        ssd4_epilogue<false>(acc, st, xch, 0, dvec, z, zdt, y, ybase, yrow, ia, ib, qc, t);
    // Barrier 3 + R: this warpgroup's rows of xch are read; the state warpgroup may overwrite
    // them with the next chunk's X (racecheck, session 19 call 6, did not take barrier 0 as
    // ordering these reads before those writes; this barrier states it).
    if (nx.st) {
        duet_jitter();
        asm volatile("bar.arrive %0, 256;\n" ::"n"(3 + R) : "memory");
    }
}

// State warpgroup: X^T = S · C^T (S split into bf16 hi + lo per k-step, one 64-column half of l
// at a time: both at once spilled), times exp(cs_l), into xch; half lh is row warpgroup lh's
// (barrier 1 + lh: warpgroup 0 starts its epilogue while half 1 is computed); then S = decay S +
// (x w)^T · B (v3's step).
// V5: half lh of chunk c goes to half slot (2 c + lh) % 3 of xch (64 rows each; slot0 = (2 c)
// % 3, a small int: the state has no register to spare) and is released to its reader by XFULL.
// The slot's previous reader (half 2 c + lh - 3) is done by then without a barrier of its own:
// the state passed LS(c) (row warpgroup 0 finished chunk c - 1, and had synced SF on row
// warpgroup 1's end of chunk c - 2); `first` is v4's only.
// DEC (v7): halves by XFULL id k % 6 (k6 = (2 c) % 6 for half 0), and before storing half 1
// the state syncs W0D(w0d) (row warpgroup 0 is done with the slot, chunk c - 1; w0d < 0: none).
template <bool V5, bool DEC = false>
__device__ __forceinline__ void ssd4_state_t(const Ssd3Stage* st, float* xch, float* S, int w,
                                             int lane, bool first, int slot0, int k6 = 0,
                                             int w0d = -1) {
    const int g = lane >> 2, t = lane & 3;
    const Ssd2Tok& tk = st->tok;
    const int pa = 16 * w + g;
#pragma unroll 1
    for (int lh = 0; lh < 2; ++lh) {
        float xa[32];
        u32 fa[2][2][4];  // [k-step parity][hi / lo][fragment]
        const unsigned char* cb = st->c + lh * 8 * 2048;
        const int slot = slot0 + lh == 3 ? 0 : slot0 + lh;
        if (!V5 && !first) {
            // Row warpgroup lh is done with the previous chunk's half (arrived on barrier 3 +
            // lh). Every barrier id an immediate (session 22; session 19 passed 1 + lh / 3 + lh
            // in a register and racecheck reported the xch hand-over; the loop unrolled spills).
            if (lh == 0)
                asm volatile("bar.sync 3, 256;\n" ::: "memory");
            else
                asm volatile("bar.sync 4, 256;\n" ::: "memory");
            duet_jitter();
        }
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            u32* fh = fa[kk & 1][0];
            u32* fl = fa[kk & 1][1];
#pragma unroll
            for (int q = 0; q < 4; ++q) ssd2_split(S[8 * kk + 2 * q], S[8 * kk + 2 * q + 1], fh[q], fl[q]);
            wg_fence();
            const u64 d = wg_desc(cb + kk * 256, 128, 2048);
            if (kk == 0)
                ssd3_rs_n64<0, 0>(xa, fh, d);
            else
                ssd3_rs_n64<1, 0>(xa, fh, d);
            ssd3_rs_n64<1, 0>(xa, fl, d);
            wg_commit();
            // The previous k-step's group is done: its fragments (the other parity) are free.
            if (kk > 0) wg_wait1();
        }
        // v4 loads exp(cs_l) while the last k-step runs; v5 after it (16 registers fewer at the
        // peak: v5's state spilled otherwise).
        float2 ev[8];
        if (!V5) {
#pragma unroll
            for (int j = 0; j < 8; ++j) ev[j] = *reinterpret_cast<const float2*>(&tk.ein[64 * lh + 8 * j + 2 * t]);
        }
        wg_wait0();
        ssd3_pin<32>(xa);
        if (DEC && lh == 1 && w0d >= 0) ssd5_bar2<SSD5_LS0, 256, false>(w0d);
        if (V5) {
            // One base (row 2 t, column pa of the slot) and immediate offsets: l = 8 j + 2 t.
            float* xs = xch + slot * (64 * SSD4_XCH_ROW) + 2 * t * SSD4_XCH_ROW + pa;
            const float* ein = &tk.ein[64 * lh + 2 * t];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float2 e = *reinterpret_cast<const float2*>(ein + 8 * j);
                float* r = xs + 8 * j * SSD4_XCH_ROW;
                r[0] = xa[4 * j] * e.x;
                r[SSD4_XCH_ROW] = xa[4 * j + 1] * e.y;
                r[8] = xa[4 * j + 2] * e.x;
                r[SSD4_XCH_ROW + 8] = xa[4 * j + 3] * e.y;
            }
            if constexpr (DEC)
                ssd7_xfull<true>(k6 + lh);
            else
                ssd5_bar3<SSD5_XFULL0, 256, true>(slot);
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int l = 64 * lh + 8 * j + 2 * t;
                const float2 e = ev[j];
                xch[l * SSD4_XCH_ROW + pa] = xa[4 * j] * e.x;
                xch[(l + 1) * SSD4_XCH_ROW + pa] = xa[4 * j + 1] * e.y;
                xch[l * SSD4_XCH_ROW + pa + 8] = xa[4 * j + 2] * e.x;
                xch[(l + 1) * SSD4_XCH_ROW + pa + 8] = xa[4 * j + 3] * e.y;
            }
            duet_jitter();
            if (lh == 0)
                asm volatile("bar.arrive 1, 256;\n" ::: "memory");
            else
                asm volatile("bar.arrive 2, 256;\n" ::: "memory");
        }
    }
    ssd3_state(st, S, w, lane);
}
__device__ __forceinline__ void ssd4_state(const Ssd3Stage* st, float* xch, float* S, int w,
                                           int lane, bool first) {
    ssd4_state_t<false>(st, xch, S, w, lane, first, 0);
}

// Row warpgroup R's chunk loop (barrier 0, then its rows of the chunk).
template <int R>
__device__ __forceinline__ void ssd4_row_loop(Ssd4Smem* sm, const u16* x, const u16* Bm,
                                              const u16* Cm, const Ssd2Tok* tok, const void* z,
                                              int zdt, const SsdDims& s, u16* y, int w,
                                              int lane) {
    const i64 b = blockIdx.x / s.H, h = blockIdx.x % s.H;
    const i64 nc = (s.L + SSD2_Q - 1) / SSD2_Q;
    const i64 yrow = s.H * SSD2_P;
    for (i64 c = 0; c < nc; ++c) {
        const int cur = (int)(c & 1);
        duet_cp_async_wait<0>();
        wg_fence_smem();
        asm volatile("barrier.sync 0;\n" ::: "memory");
        const i64 t0 = c * SSD2_Q;
        const int qc = (int)min((i64)SSD2_Q, s.L - t0);
        const i64 ybase = ((b * s.L + t0) * s.H + h) * SSD2_P;
        // Every thread is past chunk c - 1: its stage takes chunk c + 1.
        const Ssd3Next nx{c + 1 < nc ? &sm->st[cur ^ 1] : nullptr, x, Bm, Cm, tok, c + 1};
        ssd4_rows<R>(&sm->st[cur], sm->xch, qc, sm->dvec, z, zdt, y, ybase, yrow, w, lane, nx, s);
    }
}

// grid.x = B * H, 384 threads, dynamic shared memory sizeof(Ssd4Smem); tok: ssd2_tok's
// records (B, nc, H).
extern "C" __global__ void __launch_bounds__(SSD3_THREADS, 1)
    ssd4_fused_p64_n128(const u16* x, const u16* Bm, const u16* Cm, const Ssd2Tok* tok,
                        const void* Dm, int ddt, const void* z, int zdt, const void* init,
                        int idt, SsdDims s, u16* y, float* final_states) {
    extern __shared__ __align__(128) unsigned char ssd4_raw[];
    Ssd4Smem* sm = reinterpret_cast<Ssd4Smem*>(ssd4_raw);
    const i64 b = blockIdx.x / s.H, h = blockIdx.x % s.H;
    const i64 g = h / (s.H / s.G);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gl = lane >> 2, tl = lane & 3;
    const int wg = warp >> 2, w = warp & 3;
    const i64 nc = (s.L + SSD2_Q - 1) / SSD2_Q;
    const Ssd2Tok* tok_bh = tok + b * nc * s.H + h;
    if (nc > 0) {
        ssd3_load_stage<SSD3_THREADS>(&sm->st[0], x, Bm, Cm, tok_bh, s, b, h, g, 0, tid);
        duet_cp_async_commit();
    }
    // The roles' own chunk loops, as in v3; barrier 0 once an iteration in all, barrier 1 + r (row
    // warpgroup r's half of X is in xch) once: the state warpgroup arrives, row warpgroup r waits;
    // barrier 3 + r (row warpgroup r has read its half) between chunks: row warpgroup r arrives
    // after its epilogue (not after the last chunk's), the state warpgroup waits before writing
    // the half again.
    if (wg == 2) {
        float S[64];
        ssd3_init_state(S, init, idt, b, h, s, w, gl, tl);
        for (i64 c = 0; c < nc; ++c) {
            duet_cp_async_wait<0>();
            wg_fence_smem();
            asm volatile("barrier.sync 0;\n" ::: "memory");
            ssd4_state(&sm->st[c & 1], sm->xch, S, w, lane, c == 0);
        }
        ssd3_store_final(S, final_states, w, gl, tl);
    } else {
        if (tid < SSD2_P) sm->dvec[tid] = Dm ? load_as_f32(Dm, h * SSD2_P + tid, ddt) : 0.0f;
        if (wg == 0)
            ssd4_row_loop<0>(sm, x, Bm, Cm, tok, z, zdt, s, y, w, lane);
        else
            ssd4_row_loop<1>(sm, x, Bm, Cm, tok, z, zdt, s, y, w, lane);
    }
}

// ==== v5: v4 with the roles decoupled (session 36; written without a device) ====
// v4 passes barrier 0 (all 384 threads) once a chunk, so the rows cannot start chunk c + 1
// before the state warpgroup's update of chunk c is done, nor the state its X of chunk c + 1
// before both row warpgroups' epilogues of chunk c: session 19 found the chunk step a chain
// (~12k cycles a chunk against ~3.6k of wgmma work). v5 has no block-wide barrier; each role
// waits only for the data it reads, through named barriers between pairs of roles:
// - row warpgroup 0 loads chunk c + 1 into stage (c + 1) & 1 during its M · x of chunk c (as
//   in v4), once row warpgroup 1 and the state are done with the stage's last chunk (SF); at
//   the end of its chunk c it waits for its copies and releases the stage to row warpgroup 1
//   (LR) and to the state (LS);
// - X goes in 64-row halves into three half slots of xch (half lh of chunk c: slot
//   (2 c + lh) % 3; 52 KB: two whole copies of v4's 34 KB xch do not fit next to the two 84 KB
//   stages), released to its reader by XFULL. The state starts chunk c + 1 once row warpgroup 0
//   is done with chunk c (LS), while row warpgroup 1 may still read chunk c's second half: its
//   slot is the one of the three the state does not write in chunk c + 1. A slot needs no
//   barrier back to the state: its previous reader is done by LS (warpgroup 0's halves) or by
//   SF -> LS (warpgroup 1's); gpu/src/handover_model.rs checks this protocol (and that two
//   slots, or no SF, race).
// Same products, splits, token table and stages as v4: the same bits.
struct Ssd5Smem {
    Ssd3Stage st[2];
    float xch[3 * 64 * SSD4_XCH_ROW];
    float dvec[SSD2_P];
};
static_assert(sizeof(Ssd5Smem) == 221472, "V5_SMEM_BYTES in gpu/src/ops/ssd_chunk_scan.rs");

// v6: v5's shared memory with 128-byte aligned stages (the TMA's destinations) and a full
// barrier a stage (chunk c in stage c % 2 completes phase (c / 2) % 2 of full[c % 2]).
struct __align__(128) Ssd6Stage : Ssd3Stage {};
struct Ssd6Smem {
    Ssd6Stage st[2];
    float xch[3 * 64 * SSD4_XCH_ROW];
    float dvec[SSD2_P];
    u64 full[2];
};
static_assert(sizeof(Ssd6Smem) == 221824, "V6_SMEM_BYTES in gpu/src/ops/ssd_chunk_scan.rs");
template <bool TMA>
struct Ssd5SmemOf {
    using T = Ssd5Smem;
};
template <>
struct Ssd5SmemOf<true> {
    using T = Ssd6Smem;
};

// Row warpgroup R's chunk loop in v5 (above). Row warpgroup 0 enters it with chunk 0 loaded.
// TMA (v6): warp 0 of row warpgroup 0 issues the next chunk's loads; every thread of it waits
// on the stage's full barrier instead of its own cp.async groups; row warpgroup 1 also waits on
// it after LR (the TMA's writes observed by each reader itself).
// DEC (v7, TMA only): no LR / LS a chunk; row warpgroup 1 syncs LR once (chunk 0: D and the
// stage), every role waits on the stage's full barrier itself; row warpgroup 0 arrives on
// W0D(c % 2) once its chunk-c epilogue has read its slot; XFULL by half k % 6.
template <int R, bool TMA = false, bool DEC = false, bool PW = false>
__device__ __forceinline__ void ssd5_row_loop(typename Ssd5SmemOf<TMA>::T* sm, const u16* x,
                                              const u16* Bm, const u16* Cm, const Ssd2Tok* tok,
                                              const SsdTmaps* tm, const void* z, int zdt,
                                              const SsdDims& s, u16* y, int w, int lane) {
    const int g = lane >> 2, t = lane & 3;
    const i64 b = blockIdx.x / s.H, h = blockIdx.x % s.H;
    // Chunk counts in 32 bits (a chunk is 128 tokens): v5 has no register to spare.
    const int nc = (int)((s.L + SSD2_Q - 1) / SSD2_Q);
    const i64 yrow = s.H * SSD2_P;
    const int ia = 64 * R + 16 * w + g, ib = ia + 8;
    static_assert(TMA || !DEC, "v7 is v6 (TMA) decoupled");
    static_assert(DEC || !PW, "v8 is v7 with a producer warp");
    constexpr int SFN = PW ? SSD8_SF : SSD3_THREADS;  // SF's count (v8: the producer warp syncs)
    int slot = R;  // (2 c + R) % 3 (DEC: (2 c + R) % 6)
    for (int c = 0; c < nc; ++c) {
        const int cur = c & 1;
        if (R == 1) {
            if (!DEC || c == 0) ssd5_bar2<SSD5_LR0, 256, false>(cur);
            if constexpr (TMA) ssd6_full_wait(&sm->full[cur], (u32)(c >> 1) & 1);
        } else if constexpr (DEC) {
            // (v7: chunk 0 was waited for before its release; v8: the producer warp loads it)
            if (c > 0 || PW) ssd6_full_wait(&sm->full[cur], (u32)(c >> 1) & 1);
        }
        const i64 t0 = (i64)c * SSD2_Q;
        const int qc = (int)min((i64)SSD2_Q, s.L - t0);
        const i64 ybase = ((b * s.L + t0) * s.H + h) * SSD2_P;
        // (v8: the producer warp issues every stage load; row warpgroup 0 none)
        Ssd3Next nx{R == 0 && c + 1 < nc && !PW ? &sm->st[cur ^ 1] : nullptr, x, Bm, Cm, tok,
                    (i64)c + 1};
        if constexpr (TMA) {
            nx.tm = tm;
            nx.full = &sm->full[cur ^ 1];
        }
        float acc[32];
        ssd4_row_products<R, true, TMA, SFN>(&sm->st[cur], acc, w, lane, nx, s);
        // This warpgroup's half of X: half k = 2 c + R, in slot k % 3.
        if constexpr (DEC)
            ssd7_xfull<false>(slot);
        const int slot3 = DEC ? (slot >= 3 ? slot - 3 : slot) : slot;
        if constexpr (!DEC) ssd5_bar3<SSD5_XFULL0, 256, false>(slot);
        const float* xs = sm->xch + slot3 * (64 * SSD4_XCH_ROW);
        if (z)
            ssd4_epilogue<true>(acc, &sm->st[cur], xs, 64 * R, sm->dvec, z, zdt, y, ybase, yrow,
                                ia, ib, qc, t);
        else
            ssd4_epilogue<false>(acc, &sm->st[cur], xs, 64 * R, sm->dvec, z, zdt, y, ybase, yrow,
                                 ia, ib, qc, t);
        if (R == 1) {
            // Row warpgroup 0 (v8: the producer warp) loads chunk c + 2 into this stage.
            if (c + 2 < nc) ssd5_bar2<SSD5_SF0, SFN, true>(cur);
        } else if (DEC) {
            // W0D(c % 2): this warpgroup's chunk-c slot is read (the state's chunk c + 1 may
            // overwrite it with its second half)
            if (c + 1 < nc) ssd5_bar2<SSD5_LS0, 256, true>(cur);
            // v8: row warpgroup 0 is done with the stage too (it issues no loads)
            if (PW && c + 2 < nc) ssd5_bar2<SSD5_SF0, SFN, true>(cur);
        } else if (c + 1 < nc) {
            // Chunk c + 1's copies (issued during M · x) are done: release its stage.
            if constexpr (TMA) {
                ssd6_full_wait(&sm->full[cur ^ 1], (u32)((c + 1) >> 1) & 1);
            } else {
                duet_cp_async_wait<0>();
                wg_fence_smem();
                ssd5_bar<SSD5_WG0, 128, false>();
            }
            ssd5_bar2<SSD5_LR0, 256, true>(cur ^ 1);
            ssd5_bar2<SSD5_LS0, 256, true>(cur ^ 1);
        }
        if constexpr (DEC)
            slot = slot >= 4 ? slot - 4 : slot + 2;  // (2 c + 2 + R) % 6
        else
            slot = slot == 0 ? 2 : slot - 1;  // (2 c + 2 + R) % 3
    }
}

// grid.x = B * H, 384 threads, dynamic shared memory sizeof(Ssd5Smem); tok: ssd2_tok's
// records (B, nc, H).
template <bool TMA = false, bool DEC = false, bool PW = false>
__device__ __forceinline__ void ssd5_body(const u16* x, const u16* Bm, const u16* Cm,
                                          const Ssd2Tok* tok, const void* Dm, int ddt,
                                          const void* z, int zdt, const void* init, int idt,
                                          const SsdDims& s, u16* y, float* final_states,
                                          const SsdTmaps* tm = nullptr) {
    extern __shared__ __align__(128) unsigned char ssd5_raw[];
    using SM = typename Ssd5SmemOf<TMA>::T;
    SM* sm = reinterpret_cast<SM*>(ssd5_raw);
    const i64 b = blockIdx.x / s.H, h = blockIdx.x % s.H;
    const i64 g = h / (s.H / s.G);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gl = lane >> 2, tl = lane & 3;
    const int wg = warp >> 2, w = warp & 3;
    const int nc = (int)((s.L + SSD2_Q - 1) / SSD2_Q);
    if constexpr (DEC) {
        // v7: the state waits on the stage barriers without a hand-over from row warpgroup 0
        // first, so they are initialised before the roles split.
        if (tid == 0) {
            duet_mbar_init(&sm->full[0], 1);
            duet_mbar_init(&sm->full[1], 1);
            duet_mbar_init_fence();
        }
        __syncthreads();
    }
    constexpr int SFN = PW ? SSD8_SF : SSD3_THREADS;
    if constexpr (PW) {
        if (wg == 3) {
            // v8's producer warpgroup gives its registers to the roles; its first warp loads
            // chunk c into stage c % 2 once row warpgroups 0 / 1 and the state are done with
            // chunk c - 2 there (SF), armed on full[c % 2]; the other three warps exit.
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(SSD8_PREG) : "memory");
            if (warp == 12) {
                for (int c = 0; c < nc; ++c) {
                    if (c >= 2) ssd5_bar2<SSD5_SF0, SFN, false>(c & 1);
                    ssd6_load_stage(&sm->st[c & 1], tm, tok + (b * nc + c) * s.H + h, b, h, g,
                                    c, lane, &sm->full[c & 1]);
                }
            }
            return;
        }
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(SSD8_CREG) : "memory");
    }
    if (wg == 2) {
        // The state warpgroup: chunk c once row warpgroup 0 released its stage (LS); X into the
        // half slots, then the update; then the stage is done as far as the state goes (SF).
        // v7 (DEC): chunk c once its stage landed; the second half once W0D(c - 1).
        float S[64];
        ssd3_init_state(S, init, idt, b, h, s, w, gl, tl);
        int slot0 = 0, k6 = 0;
        for (int c = 0; c < nc; ++c) {
            const int cur = c & 1;
            if constexpr (!DEC) ssd5_bar2<SSD5_LS0, 256, false>(cur);
            if constexpr (TMA) ssd6_full_wait(&sm->full[cur], (u32)(c >> 1) & 1);
            if constexpr (DEC) {
                ssd4_state_t<true, true>(&sm->st[cur], sm->xch, S, w, lane, false, slot0, k6,
                                         c >= 1 ? (c - 1) & 1 : -1);
                k6 = k6 == 4 ? 0 : k6 + 2;  // (2 c + 2) % 6
            } else {
                ssd4_state_t<true>(&sm->st[cur], sm->xch, S, w, lane, false, slot0);
            }
            if (c + 2 < nc) ssd5_bar2<SSD5_SF0, SFN, true>(cur);
            slot0 = slot0 == 0 ? 2 : slot0 - 1;  // (2 c + 2) % 3
        }
        ssd3_store_final(S, final_states, w, gl, tl);
    } else if (wg == 0) {
        // D of the head, and chunk 0, both released to the others by LR / LS of stage 0.
        if (tid < SSD2_P) sm->dvec[tid] = Dm ? load_as_f32(Dm, h * SSD2_P + tid, ddt) : 0.0f;
        if constexpr (TMA) {
            if (!DEC && tid == 0) {
                duet_mbar_init(&sm->full[0], 1);
                duet_mbar_init(&sm->full[1], 1);
                duet_mbar_init_fence();
            }
            ssd5_bar<SSD5_WG0, 128, false>();  // the barriers (and dvec) for row warpgroup 0
            if (nc > 0) {
                if (!PW) {
                    if (warp == 0)
                        ssd6_load_stage(&sm->st[0], tm, tok + (b * nc) * s.H + h, b, h, g, 0,
                                        lane, &sm->full[0]);
                    ssd6_full_wait(&sm->full[0], 0);
                }
                ssd5_bar<SSD5_LR0, 256, true>();
                if constexpr (!DEC) ssd5_bar<SSD5_LS0, 256, true>();
            }
        } else if (nc > 0) {
            ssd3_load_stage<128>(&sm->st[0], x, Bm, Cm, tok + (b * nc) * s.H + h, s, b, h, g, 0,
                                 tid);
            duet_cp_async_commit();
            duet_cp_async_wait<0>();
            wg_fence_smem();
            ssd5_bar<SSD5_WG0, 128, false>();
            ssd5_bar<SSD5_LR0, 256, true>();
            ssd5_bar<SSD5_LS0, 256, true>();
        }
        ssd5_row_loop<0, TMA, DEC, PW>(sm, x, Bm, Cm, tok, tm, z, zdt, s, y, w, lane);
    } else {
        ssd5_row_loop<1, TMA, DEC, PW>(sm, x, Bm, Cm, tok, tm, z, zdt, s, y, w, lane);
    }
}
extern "C" __global__ void __launch_bounds__(SSD3_THREADS, 1)
    ssd5_fused_p64_n128(const u16* x, const u16* Bm, const u16* Cm, const Ssd2Tok* tok,
                        const void* Dm, int ddt, const void* z, int zdt, const void* init,
                        int idt, SsdDims s, u16* y, float* final_states) {
    ssd5_body<false>(x, Bm, Cm, tok, Dm, ddt, z, zdt, init, idt, s, y, final_states);
}
// v6: v5 with the stage loads through the TMA (session 37: ncu on v5 at ssd_4k had row
// warpgroup 0, which issues the loads, as the warpgroup that waits least at the barriers (6 % of
// its stall samples against 29 % / 23 % for row warpgroup 1 / the state) and 29 % of its samples
// in long-scoreboard stalls of its cp.async loop: 40 LDGSTS a thread a chunk, each counted as
// 32 shared-memory wavefronts). One warp issues 48 tensor copies and one bulk copy a chunk.
// The tensor maps: gpu/src/ops/ssd_chunk_scan.rs `ssd6_tensor_maps`.
extern "C" __global__ void __launch_bounds__(SSD3_THREADS, 1)
    ssd6_fused_p64_n128(const u16* x, const u16* Bm, const u16* Cm, const Ssd2Tok* tok,
                        const void* Dm, int ddt, const void* z, int zdt, const void* init,
                        int idt, SsdDims s, u16* y, float* final_states,
                        const __grid_constant__ SsdTmaps tm) {
    ssd5_body<true>(x, Bm, Cm, tok, Dm, ddt, z, zdt, init, idt, s, y, final_states, &tm);
}
// v7: v6 with the roles decoupled further (session 37, prepared without a device run). ncu on
// v6 (call 9) put 33 % of the barrier stall samples on row warpgroup 1 waiting for LR, 27 % on
// the state waiting for LS, 28 % on row warpgroup 0 waiting for X (XFULL): the state could not
// start chunk c + 1's X before row warpgroup 0 had finished chunk c, while row warpgroup 0's
// epilogue of chunk c waited for the state's X of chunk c. Here every role waits on the stage's
// full barrier itself, row warpgroup 0 hands only its slot back (W0D, after its epilogue) and the
// state needs it only before storing chunk c + 1's second half; XFULL by half k % 6. Protocol:
// gpu/src/handover_model.rs `ssd_v7` (ordered; the broken variants are caught).
extern "C" __global__ void __launch_bounds__(SSD3_THREADS, 1)
    ssd7_fused_p64_n128(const u16* x, const u16* Bm, const u16* Cm, const Ssd2Tok* tok,
                        const void* Dm, int ddt, const void* z, int zdt, const void* init,
                        int idt, SsdDims s, u16* y, float* final_states,
                        const __grid_constant__ SsdTmaps tm) {
    ssd5_body<true, true>(x, Bm, Cm, tok, Dm, ddt, z, zdt, init, idt, s, y, final_states, &tm);
}
// v8: v7 with a producer warp (session 38, prepared without a device run). In v7 row warpgroup
// 0 issues chunk c + 1's loads during its chunk-c products, after SF (row warpgroup 1 and the
// state done with chunk c - 1): its own chunk waits on the state's previous one, and the loads
// start only when row warpgroup 0 gets there. Here a producer warp (the first of a fourth
// warpgroup, which gives its registers to the roles through setmaxnreg) issues each stage as
// soon as SF says it is free (the three roles arrive, 416 threads), and row warpgroup 0 waits on
// the stage's full barrier like the others. Protocol: gpu/src/handover_model.rs `ssd_v8`.
extern "C" __global__ void __launch_bounds__(SSD8_THREADS, 1)
    ssd8_fused_p64_n128(const u16* x, const u16* Bm, const u16* Cm, const Ssd2Tok* tok,
                        const void* Dm, int ddt, const void* z, int zdt, const void* init,
                        int idt, SsdDims s, u16* y, float* final_states,
                        const __grid_constant__ SsdTmaps tm) {
    ssd5_body<true, true, true>(x, Bm, Cm, tok, Dm, ddt, z, zdt, init, idt, s, y, final_states,
                                &tm);
}

// Racecheck calibration (session 22): v4's xch hand-over pattern alone. Blocks of 384
// threads, `chunks` rounds: every thread at the non-aligned barrier 0; the "state" warpgroup
// (threads 256..383) writes half lh of xch (64 rows x 64 of 68 columns), arrives on barrier
// 1 + lh (256 threads) and, from round 1 on, first waits on barrier 3 + lh; "row" warpgroup R
// (threads 128 R ..) waits on barrier 1 + R, sums its half, and arrives on barrier 3 + R when
// another round follows. out[384 block + tid] (row threads): the u32 sum of the values it
// read, as f32 bits.
// ssd4_handover_probe: xch static (34 KB); ssd4_handover_probe_dyn: xch where v4 has it, in
// dynamic shared memory of sizeof(Ssd4Smem) (the host launches v4's grid).
__device__ __forceinline__ void ssd4_probe_body(float* xch, int chunks, float* out) {
    const int tid = threadIdx.x, wg = tid >> 7, lt = tid & 127;
    if (wg == 2) {
        for (int c = 0; c < chunks; ++c) {
            asm volatile("barrier.sync 0;\n" ::: "memory");
#pragma unroll 1
            for (int lh = 0; lh < 2; ++lh) {
                if (c > 0) {
                    if (lh == 0)
                        asm volatile("bar.sync 3, 256;\n" ::: "memory");
                    else
                        asm volatile("bar.sync 4, 256;\n" ::: "memory");
                }
                for (int i = 0; i < 32; ++i) {
                    const int e = lt + 128 * i, row = 64 * lh + (e >> 6), col = e & 63;
                    xch[row * 68 + col] = (float)(c * 16384 + row * 64 + col);
                }
                if (lh == 0)
                    asm volatile("bar.arrive 1, 256;\n" ::: "memory");
                else
                    asm volatile("bar.arrive 2, 256;\n" ::: "memory");
            }
        }
    } else {
        u32 acc = 0u;  // exact: the values are integers < 2^24
        for (int c = 0; c < chunks; ++c) {
            asm volatile("barrier.sync 0;\n" ::: "memory");
            if (wg == 0)
                asm volatile("bar.sync 1, 256;\n" ::: "memory");
            else
                asm volatile("bar.sync 2, 256;\n" ::: "memory");
            for (int i = 0; i < 32; ++i) {
                const int e = lt + 128 * i, row = 64 * wg + (e >> 6), col = e & 63;
                acc += (u32)xch[row * 68 + col];
            }
            if (c + 1 < chunks) {
                if (wg == 0)
                    asm volatile("bar.arrive 3, 256;\n" ::: "memory");
                else
                    asm volatile("bar.arrive 4, 256;\n" ::: "memory");
            }
        }
        out[(i64)blockIdx.x * 384 + tid] = __uint_as_float(acc);
    }
}
extern "C" __global__ void __launch_bounds__(384, 1) ssd4_handover_probe(int chunks, float* out) {
    __shared__ float xch[128 * 68];
    ssd4_probe_body(xch, chunks, out);
}
extern "C" __global__ void __launch_bounds__(384, 1)
    ssd4_handover_probe_dyn(int chunks, float* out) {
    extern __shared__ __align__(128) unsigned char ssd4_probe_raw[];
    ssd4_probe_body(reinterpret_cast<Ssd4Smem*>(ssd4_probe_raw)->xch, chunks, out);
}

// Racecheck calibration (session 37): v5's / v6's X-slot protocol alone (ids and order as
// ssd5_row_loop / ssd5_body, gpu/src/handover_model.rs `ssd_v5`), on v5's grid and dynamic
// shared memory (xch where Ssd5Smem has it), without stages, wgmma or copies. The state
// (threads 256..383) syncs LS(c % 2), writes half k = 2 c + lh into slot k % 3 (value
// 4096 k + element), arrives on XFULL(slot), and on SF(c % 2) when chunk c + 2 follows. Row
// warpgroup 0 releases chunk 0 (LR / LS 0), then per chunk syncs SF before "loading" chunk
// c + 1 >= 2, syncs XFULL of its half, sums another thread's elements of its slot, and releases
// chunk c + 1 (LR / LS); row warpgroup 1 syncs LR, XFULL, sums, arrives on SF. out[384 block +
// tid] (row threads): the u32 sum, as f32 bits. Under racecheck: a report here (no wgmma, no
// TMA) is the tool on this barrier chain; none moves the question to what the kernels add.
// KPAT (`ssd5_handover_probe_kpat`, session 38): the same protocol with the kernel's own access
// pattern: the state's scalar stores where ssd4_state_t<true> puts them (column 16 w + lane / 4
// (+ 8), rows 8 j + 2 (lane % 4) (+ 1) of the slot; value 4096 k + 64 row + column), the rows'
// float2 reads where ssd4_epilogue reads (rows 16 w + lane / 4 (+ 8), columns 8 j + 2 (lane % 4),
// + 1), and row warpgroup 0's WG0 barrier before it releases a chunk, as v5 has them.
template <bool KPAT>
__device__ __forceinline__ void ssd5_probe_body(float* xch, int chunks, float* out) {
    const int tid = threadIdx.x, wg = tid >> 7, lt = tid & 127;
    const int w = lt >> 5, g = (lt & 31) >> 2, t = lt & 3;
    if (wg == 2) {
        int slot0 = 0;
        for (int c = 0; c < chunks; ++c) {
            ssd5_bar2<SSD5_LS0, 256, false>(c & 1);
#pragma unroll 1
            for (int lh = 0; lh < 2; ++lh) {
                const int slot = slot0 + lh == 3 ? 0 : slot0 + lh, k = 2 * c + lh;
                float* xs = xch + slot * (64 * SSD4_XCH_ROW);
                if (KPAT) {
                    const int pa = 16 * w + g;
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        const int r0 = 8 * j + 2 * t;
                        float* r = xs + r0 * SSD4_XCH_ROW + pa;
                        r[0] = (float)(k * 4096 + r0 * 64 + pa);
                        r[SSD4_XCH_ROW] = (float)(k * 4096 + (r0 + 1) * 64 + pa);
                        r[8] = (float)(k * 4096 + r0 * 64 + pa + 8);
                        r[SSD4_XCH_ROW + 8] = (float)(k * 4096 + (r0 + 1) * 64 + pa + 8);
                    }
                } else {
                    for (int i = 0; i < 32; ++i) {
                        const int e = lt + 128 * i;
                        xs[(e >> 6) * SSD4_XCH_ROW + (e & 63)] = (float)(k * 4096 + e);
                    }
                }
                ssd5_bar3<SSD5_XFULL0, 256, true>(slot);
            }
            if (c + 2 < chunks) ssd5_bar2<SSD5_SF0, 384, true>(c & 1);
            slot0 = slot0 == 0 ? 2 : slot0 - 1;
        }
        return;
    }
    if (wg == 0 && chunks > 0) {
        if (KPAT) ssd5_bar<SSD5_WG0, 128, false>();
        ssd5_bar<SSD5_LR0, 256, true>();
        ssd5_bar<SSD5_LS0, 256, true>();
    }
    u32 acc = 0u;  // exact: the values are integers < 2^24
    int slot = wg;
    const int src = (lt + 37) & 127;  // another thread's elements than the one that wrote
    for (int c = 0; c < chunks; ++c) {
        if (wg == 1) ssd5_bar2<SSD5_LR0, 256, false>(c & 1);
        if (wg == 0 && c + 1 < chunks && c + 1 >= 2) ssd5_bar2<SSD5_SF0, 384, false>((c + 1) & 1);
        ssd5_bar3<SSD5_XFULL0, 256, false>(slot);
        const float* xs = xch + slot * (64 * SSD4_XCH_ROW);
        if (KPAT) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int row = 16 * w + g + 8 * hf;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const float2 in =
                        *reinterpret_cast<const float2*>(xs + row * SSD4_XCH_ROW + 8 * j + 2 * t);
                    acc += (u32)in.x + (u32)in.y;
                }
            }
        } else {
            for (int i = 0; i < 32; ++i) {
                const int e = src + 128 * i;
                acc += (u32)xs[(e >> 6) * SSD4_XCH_ROW + (e & 63)];
            }
        }
        if (wg == 1) {
            if (c + 2 < chunks) ssd5_bar2<SSD5_SF0, 384, true>(c & 1);
        } else if (c + 1 < chunks) {
            if (KPAT) ssd5_bar<SSD5_WG0, 128, false>();
            ssd5_bar2<SSD5_LR0, 256, true>((c + 1) & 1);
            ssd5_bar2<SSD5_LS0, 256, true>((c + 1) & 1);
        }
        slot = slot == 0 ? 2 : slot - 1;
    }
    out[(i64)blockIdx.x * 384 + tid] = __uint_as_float(acc);
}
extern "C" __global__ void __launch_bounds__(384, 1)
    ssd5_handover_probe_dyn(int chunks, float* out) {
    extern __shared__ __align__(128) unsigned char ssd5_probe_raw[];
    ssd5_probe_body<false>(reinterpret_cast<Ssd5Smem*>(ssd5_probe_raw)->xch, chunks, out);
}
extern "C" __global__ void __launch_bounds__(384, 1)
    ssd5_handover_probe_kpat(int chunks, float* out) {
    extern __shared__ __align__(128) unsigned char ssd5_probe_raw[];
    ssd5_probe_body<true>(reinterpret_cast<Ssd5Smem*>(ssd5_probe_raw)->xch, chunks, out);
}
