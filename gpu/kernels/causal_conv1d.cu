// Causal depthwise conv1d (SPEC.md "Causal conv1d"): prefill `causal_conv1d_fn` and the decode
// step `causal_conv1d_update` (single and multi token, linear and circular state).
//
// Layouts (row-major, 64-bit index math everywhere):
//   x, out (batch, dim, L); weight (dim, width); bias (dim); initial/final states
//   (batch, dim, width-1); conv_state (slots, dim, state_len); intermediate windows
//   (batch, L, dim, width-1). Optional tensors are passed as null pointers.
// dtype codes (DT_*) select f32 / bf16 / f16 storage per tensor; math is f32.

// Read-only-cache load of one element as f32 (weights, bias: broadcast reads).
__device__ __forceinline__ float ldg_f32(const void* p, i64 i, int dt) {
    if (dt == DT_F32) return __ldg((const float*)p + i);
    unsigned short b = __ldg((const unsigned short*)p + i);
    return dt == DT_BF16 ? bf16_to_f32(b) : f16_to_f32(b);
}

// silu as the reference writes it: x / (1 + exp(-x)).
__device__ __forceinline__ float silu_exact(float v) { return v / (1.0f + expf(-v)); }
// Fast silu: SFU exp and approximate division (a few ulp off the reference; -0 for v < -88).
__device__ __forceinline__ float silu_fast(float v) { return __fdividef(v, 1.0f + __expf(-v)); }
// silu_fast on the flush-to-zero SFU forms (ex2 / rcp .approx.ftz; session 23): the same values
// but for denormal inputs and results, which flush to zero; the non-ftz forms' range fix-ups
// cost a compare and a select or two an element (v5 / v6 / v8 / v9).
__device__ __forceinline__ float silu_ftz(float v) {
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(__fmul_rn(v, -1.4426950408889634f)));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(__fadd_rn(1.0f, e)));
    return __fmul_rn(v, r);
}

// Runs f(act) with the activation flag as a compile-time constant (ConvK<...>::value; session
// 23). The v5 / v6 / v8 / v9 entries are compiled per x dtype (DT: _f32 / _bf16 / _f16, not one
// 16-bit entry taking xdt), so inlined into a kernel the per-element conversions and the silu
// branch fold away.
template <int V> struct ConvK { static constexpr int value = V; };

template <typename F>
__device__ __forceinline__ void conv_specialize(int act, F f) {
    if (act) f(ConvK<1>{});
    else f(ConvK<0>{});
}

// The W taps and the bias of row d in every lane of a warp (d warp-uniform; session 23): lane k
// < W loads tap k, lane W the bias, shuffles broadcast them. One dtype-branching load a lane
// instead of W + 1 in every thread.
template <int W>
__device__ __forceinline__ void conv_row_weights(const void* __restrict__ w, int wdt,
                                                 const void* __restrict__ bias, int bdt, i64 d,
                                                 float* wk, float& b0) {
    const int lane = threadIdx.x & 31;
    float mine = 0.0f;
    if (lane < W) mine = ldg_f32(w, d * W + lane, wdt);
    else if (lane == W && bias) mine = ldg_f32(bias, d, bdt);
#pragma unroll
    for (int k = 0; k < W; ++k) wk[k] = __shfl_sync(DUET_FULL_MASK, mine, k);
    b0 = __shfl_sync(DUET_FULL_MASK, mine, W);
}

// ---------------------------------------------------------------------------------------------
// v1: one thread per output element (any width, any L, any alignment), plus final states.
// Accumulates in the reference's order (bias, then taps oldest first, no FMA): bit-close.
extern "C" __global__ void conv1d_fn_v1(const void* x, int xdt, const void* w, int wdt,
                                        const void* bias, int bdt, const void* init, int idt,
                                        i64 rows, i64 dim, i64 L, int width, int act, void* out,
                                        void* fin) {
    DUET_PDL_ENTRY();
    const i64 hist = width - 1;
    const i64 n_out = rows * L;
    const i64 n_fin = rows * hist;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n_out + n_fin; i += stride) {
        if (i < n_out) {
            const i64 r = i / L, t = i - r * L, d = r % dim;
            float acc = bias ? ldg_f32(bias, d, bdt) : 0.0f;
            for (int k = 0; k < width; ++k) {
                const i64 col = t - hist + k;
                float xv;
                if (col >= 0) xv = load_as_f32(x, r * L + col, xdt);
                else xv = init ? load_as_f32(init, r * hist + hist + col, idt) : 0.0f;
                acc = acc + ldg_f32(w, d * width + k, wdt) * xv;
            }
            store_from_f32(out, i, xdt, act ? silu_exact(acc) : acc);
        } else {
            const i64 j = i - n_out;
            const i64 r = j / hist, k = j - r * hist;
            const i64 col = L - hist + k;
            float v;
            if (col >= 0) v = load_as_f32(x, r * L + col, xdt);
            else v = init ? load_as_f32(init, r * hist + hist + col, idt) : 0.0f;
            store_from_f32(fin, j, xdt, v);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// v2: 16-byte vectors, warp-shuffle neighbour exchange, __ldg weights, FMA, fast silu.
//
// Needs L * sizeof(x) % 16 == 0 (every row starts on a 16-byte boundary) and L > 0. A warp owns
// a segment of one row: SEG tiles of 64 vectors (two per lane, both loads in flight). The
// width-1 elements before a lane's vector come from lane-1 by __shfl_up_sync; lane 0 takes
// them from lane 31's other vector (shuffle) or from the previous tile (carried in registers);
// only the first tile of a segment reads its halo from memory (initial_states at the row
// start). The lane holding the row's last vector writes final_states.
template <typename S> struct VecIO;

template <> struct VecIO<float> {
    static constexpr int VE = 4;
    __device__ static __forceinline__ void unpack(uint4 u, float* f, int) {
        f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
    }
    __device__ static __forceinline__ uint4 pack(const float* f, int) {
        return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                          __float_as_uint(f[3]));
    }
};

__device__ __forceinline__ float h16_to_f32(u16 b, int dt) {
    return dt == DT_BF16 ? bf16_to_f32(b) : f16_to_f32(b);
}
// cvt.rn.{bf16x2,f16x2}.f32: round to nearest even as f32_to_bf16 / f32_to_f16 do (only a NaN's
// payload may differ: the hardware returns the canonical NaN).
__device__ __forceinline__ u32 f32x2_to_h16x2(float lo, float hi, int dt) {
    u32 r;
    if (dt == DT_BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("{ .reg .b16 l, h;\n cvt.rn.f16.f32 l, %1;\n cvt.rn.f16.f32 h, %2;\n mov.b32 %0, {l, h};\n}" : "=r"(r) : "f"(lo), "f"(hi));
    return r;
}

template <> struct VecIO<u16> {
    static constexpr int VE = 8;
    __device__ static __forceinline__ void unpack(uint4 u, float* f, int dt) {
        u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            f[2 * i] = h16_to_f32((u16)(w[i] & 0xffffu), dt);
            f[2 * i + 1] = h16_to_f32((u16)(w[i] >> 16), dt);
        }
    }
    __device__ static __forceinline__ uint4 pack(const float* f, int dt) {
        return make_uint4(f32x2_to_h16x2(f[0], f[1], dt), f32x2_to_h16x2(f[2], f[3], dt),
                          f32x2_to_h16x2(f[4], f[5], dt), f32x2_to_h16x2(f[6], f[7], dt));
    }
};

// One 16-byte vector v of row r through the conv (v2 / v5): unpack, the H-element halo from the
// previous lane by shuffles (lane 0 takes `carry`, the vector before the warp's; every lane
// leaves its own last H elements in `carry` for the next vector), the W taps with two
// independent accumulators (ILP; FMA in the taps' order), the activation (FTZ: silu_ftz, else
// silu_fast), a streaming store; final_states from the lane holding the row's last vector (its
// last H elements: VE >= H).
template <typename S, int W, bool FTZ>
__device__ __forceinline__ void conv_vec_out(uint4 raw, float* carry, const float* wk, float b0,
                                             int act, int xdt, uint4* __restrict__ ov, i64 row_v,
                                             i64 v, i64 nv, void* __restrict__ fin, i64 r) {
    constexpr int VE = VecIO<S>::VE;
    constexpr int H = W - 1;
    const int lane = threadIdx.x & 31;
    float a[H + VE];
    VecIO<S>::unpack(raw, a + H, xdt);
#pragma unroll
    for (int k = 0; k < H; ++k) {
        const float pa = __shfl_up_sync(DUET_FULL_MASK, a[VE + k], 1);
        const float a31 = __shfl_sync(DUET_FULL_MASK, a[VE + k], 31);
        a[k] = lane == 0 ? carry[k] : pa;
        carry[k] = a31;
    }
    float o[VE];
#pragma unroll
    for (int j = 0; j < VE; j += 2) {
        float acc0 = b0, acc1 = b0;
#pragma unroll
        for (int k = 0; k < W; ++k) {
            acc0 = __fmaf_rn(wk[k], a[j + k], acc0);
            acc1 = __fmaf_rn(wk[k], a[j + 1 + k], acc1);
        }
        o[j] = act ? (FTZ ? silu_ftz(acc0) : silu_fast(acc0)) : acc0;
        o[j + 1] = act ? (FTZ ? silu_ftz(acc1) : silu_fast(acc1)) : acc1;
    }
    if (v < nv) __stcs(ov + row_v + v, VecIO<S>::pack(o, xdt));
    if (H > 0 && v == nv - 1) {
#pragma unroll
        for (int k = 0; k < H; ++k) store_from_f32(fin, r * H + k, xdt, a[VE + k]);
    }
}

template <typename S, int W, int SEG>
__device__ __forceinline__ void conv1d_fn_v2_impl(const void* __restrict__ x, int xdt,
                                                  const void* __restrict__ w, int wdt,
                                                  const void* __restrict__ bias, int bdt,
                                                  const void* __restrict__ init, int idt,
                                                  i64 rows, i64 dim, i64 L, int act,
                                                  void* __restrict__ out, void* __restrict__ fin) {
    constexpr int VE = VecIO<S>::VE;
    constexpr int H = W - 1;
    constexpr int HA = H > 0 ? H : 1;
    const int lane = threadIdx.x & 31;
    const i64 nv = L / VE;                       // vectors per row
    const i64 seg_vecs = 64LL * SEG;
    const i64 segs = (nv + seg_vecs - 1) / seg_vecs;
    const i64 tasks = rows * segs;
    const i64 warp0 = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    const uint4* xv = (const uint4*)x;
    uint4* ov = (uint4*)out;
    for (i64 task = warp0; task < tasks; task += nwarps) {
        const i64 r = task / segs;
        const i64 v0 = (task - r * segs) * seg_vecs;
        const i64 d = r % dim;
        float wk[W];
#pragma unroll
        for (int k = 0; k < W; ++k) wk[k] = ldg_f32(w, d * W + k, wdt);
        const float b0 = bias ? ldg_f32(bias, d, bdt) : 0.0f;
        // Halo before the segment (meaningful in lane 0 only).
        float carry[HA];
#pragma unroll
        for (int k = 0; k < HA; ++k) carry[k] = 0.0f;
        if (lane == 0 && H > 0) {
#pragma unroll
            for (int k = 0; k < H; ++k) {
                if (v0 > 0) carry[k] = load_as_f32(x, r * L + v0 * VE - H + k, xdt);
                else if (init) carry[k] = load_as_f32(init, r * H + k, idt);
            }
        }
        const i64 row_v = r * nv;
        // Every load of the segment is issued before the first use (2*SEG x 16 bytes per lane
        // in flight); the tile loop is unrolled so `raw` stays in registers.
        uint4 raw[2 * SEG];
#pragma unroll
        for (int q = 0; q < 2 * SEG; ++q) {
            const i64 v = v0 + (i64)q * 32 + lane;
            raw[q] = v < nv ? __ldg(xv + row_v + v) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int q = 0; q < 2 * SEG; ++q) {
            const i64 v = v0 + (i64)q * 32 + lane;
            if (v0 + (i64)q * 32 >= nv) break;  // warp-uniform
            conv_vec_out<S, W, false>(raw[q], carry, wk, b0, act, xdt, ov, row_v, v, nv, fin, r);
        }
    }
}

#define CONV1D_FN_V2(NAME, S, W)                                                                 \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        NAME(const void* x, int xdt, const void* w, int wdt, const void* bias, int bdt,         \
             const void* init, int idt, i64 rows, i64 dim, i64 L, int act, void* out,           \
             void* fin) {                                                                       \
        DUET_PDL_ENTRY();                                                                       \
        conv1d_fn_v2_impl<S, W, 4>(x, xdt, w, wdt, bias, bdt, init, idt, rows, dim, L, act,     \
                                   out, fin);                                                   \
    }

CONV1D_FN_V2(conv1d_fn_v2_f32_w1, float, 1)
CONV1D_FN_V2(conv1d_fn_v2_f32_w2, float, 2)
CONV1D_FN_V2(conv1d_fn_v2_f32_w3, float, 3)
CONV1D_FN_V2(conv1d_fn_v2_f32_w4, float, 4)
CONV1D_FN_V2(conv1d_fn_v2_h16_w1, u16, 1)
CONV1D_FN_V2(conv1d_fn_v2_h16_w2, u16, 2)
CONV1D_FN_V2(conv1d_fn_v2_h16_w3, u16, 3)
CONV1D_FN_V2(conv1d_fn_v2_h16_w4, u16, 4)

// ---------------------------------------------------------------------------------------------
// v3: the channel-last layout (x, out (batch, L, dim); init, fin (batch, width-1, dim)). One
// thread per (batch row, chunk of CL_CHUNK tokens, channel), consecutive threads on consecutive
// channels (each token's row is read and written coalesced); the width-1 window slides in
// registers along the chunk and starts from the width-1 positions before it (x, else the
// initial states, else zeros). v1's arithmetic (bias, then the taps oldest first, no FMA,
// exact silu): the reference's bits. The last chunk of a row writes its final states.
#define CL_CHUNK 64
template <int W>
__device__ __forceinline__ void conv1d_fn_cl_impl(const void* x, int xdt, const void* w, int wdt,
                                                  const void* bias, int bdt, const void* init,
                                                  int idt, i64 batch, i64 dim, i64 L, int act,
                                                  void* out, void* fin) {
    constexpr int H = W - 1;
    constexpr int HA = H > 0 ? H : 1;
    const i64 nch = L > 0 ? (L + CL_CHUNK - 1) / CL_CHUNK : 1;
    const i64 total = batch * nch * dim;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const i64 d = i % dim, rest = i / dim;
        const i64 c = rest % nch, b = rest / nch;
        const i64 t0 = c * CL_CHUNK, t1 = min(L, t0 + CL_CHUNK);
        // Position pos in [-H, L) of cat(initial_states, x) for (b, d).
        auto val = [&](i64 pos) -> float {
            if (pos >= 0) return load_as_f32(x, (b * L + pos) * dim + d, xdt);
            return init ? load_as_f32(init, (b * H + H + pos) * dim + d, idt) : 0.0f;
        };
        float wk[W];
#pragma unroll
        for (int k = 0; k < W; ++k) wk[k] = ldg_f32(w, d * W + k, wdt);
        const float b0 = bias ? ldg_f32(bias, d, bdt) : 0.0f;
        float win[HA];
#pragma unroll
        for (int k = 0; k < H; ++k) win[k] = val(t0 - H + k);
        for (i64 t = t0; t < t1; ++t) {
            const i64 e = (b * L + t) * dim + d;
            const float xv = load_as_f32(x, e, xdt);
            float acc = b0;
#pragma unroll
            for (int k = 0; k < H; ++k) acc = acc + wk[k] * win[k];
            acc = acc + wk[H] * xv;
            store_from_f32(out, e, xdt, act ? silu_exact(acc) : acc);
            if (H > 0) {
#pragma unroll
                for (int k = 0; k + 1 < H; ++k) win[k] = win[k + 1];
                win[H - 1 > 0 ? H - 1 : 0] = xv;
            }
        }
        if (c == nch - 1) {
#pragma unroll
            for (int k = 0; k < H; ++k)
                store_from_f32(fin, (b * H + k) * dim + d, xdt, val(L - H + k));
        }
    }
}

#define CONV1D_FN_CL(W)                                                                          \
    extern "C" __global__ void conv1d_fn_cl_w##W(const void* x, int xdt, const void* w, int wdt, \
                                                 const void* bias, int bdt, const void* init,    \
                                                 int idt, i64 batch, i64 dim, i64 L, int act,    \
                                                 void* out, void* fin) {                         \
        DUET_PDL_ENTRY();                                                                        \
        conv1d_fn_cl_impl<W>(x, xdt, w, wdt, bias, bdt, init, idt, batch, dim, L, act, out,     \
                             fin);                                                               \
    }

CONV1D_FN_CL(1)
CONV1D_FN_CL(2)
CONV1D_FN_CL(3)
CONV1D_FN_CL(4)

// ---------------------------------------------------------------------------------------------
// v4: v3's channel-last walk with 4 channels per thread (one 16-byte f32 or 8-byte 16-bit load
// and store per token) and v2's arithmetic (FMA in the taps' order, fast silu): one thread per
// (batch row, chunk of CL_CHUNK tokens, 4 channels); the loads of CL_U tokens are issued before
// their arithmetic (loads in flight). Needs dim % 4 == 0 (every token row then starts aligned)
// and width <= 4. The halo before a chunk and the final states go through scalar loads.
#define CL_U 4
template <typename S> struct Cl4IO;
template <> struct Cl4IO<float> {
    typedef uint4 V;
    __device__ static __forceinline__ V load(const void* p, i64 e) {
        return __ldg((const uint4*)((const float*)p + e));
    }
    __device__ static __forceinline__ void unpack(V u, float* f, int) {
        f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
    }
    __device__ static __forceinline__ void store(void* p, i64 e, const float* f, int) {
        *(uint4*)((float*)p + e) = make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]),
                                              __float_as_uint(f[2]), __float_as_uint(f[3]));
    }
};
template <> struct Cl4IO<u16> {
    typedef uint2 V;
    __device__ static __forceinline__ V load(const void* p, i64 e) {
        return __ldg((const uint2*)((const u16*)p + e));
    }
    __device__ static __forceinline__ void unpack(V u, float* f, int dt) {
        f[0] = h16_to_f32((u16)(u.x & 0xffffu), dt); f[1] = h16_to_f32((u16)(u.x >> 16), dt);
        f[2] = h16_to_f32((u16)(u.y & 0xffffu), dt); f[3] = h16_to_f32((u16)(u.y >> 16), dt);
    }
    __device__ static __forceinline__ void store(void* p, i64 e, const float* f, int dt) {
        *(uint2*)((u16*)p + e) = make_uint2(f32x2_to_h16x2(f[0], f[1], dt),
                                            f32x2_to_h16x2(f[2], f[3], dt));
    }
};

template <typename S, int W>
__device__ __forceinline__ void conv1d_fn_cl4_impl(const void* __restrict__ x, int xdt,
                                                   const void* __restrict__ w, int wdt,
                                                   const void* __restrict__ bias, int bdt,
                                                   const void* __restrict__ init, int idt,
                                                   i64 batch, i64 dim, i64 L, int act,
                                                   void* __restrict__ out, void* __restrict__ fin) {
    constexpr int CH = 4;
    constexpr int H = W - 1;
    constexpr int HA = H > 0 ? H : 1;
    typedef typename Cl4IO<S>::V V;
    const i64 dv = dim / CH;
    const i64 nch = L > 0 ? (L + CL_CHUNK - 1) / CL_CHUNK : 1;
    const i64 total = batch * nch * dv;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const i64 d0 = (i % dv) * CH, rest = i / dv;
        const i64 c = rest % nch, b = rest / nch;
        const i64 t0 = c * CL_CHUNK, t1 = min(L, t0 + CL_CHUNK);
        auto val = [&](i64 pos, i64 d) -> float {
            if (pos >= 0) return load_as_f32(x, (b * L + pos) * dim + d, xdt);
            return init ? load_as_f32(init, (b * H + H + pos) * dim + d, idt) : 0.0f;
        };
        float wk[W][CH], b0[CH], win[HA][CH];
#pragma unroll
        for (int j = 0; j < CH; ++j) {
            b0[j] = bias ? ldg_f32(bias, d0 + j, bdt) : 0.0f;
#pragma unroll
            for (int k = 0; k < W; ++k) wk[k][j] = ldg_f32(w, (d0 + j) * W + k, wdt);
#pragma unroll
            for (int k = 0; k < H; ++k) win[k][j] = val(t0 - H + k, d0 + j);
        }
        for (i64 tb = t0; tb < t1; tb += CL_U) {
            V q[CL_U];
#pragma unroll
            for (int u = 0; u < CL_U; ++u)
                if (tb + u < t1) q[u] = Cl4IO<S>::load(x, (b * L + tb + u) * dim + d0);
#pragma unroll
            for (int u = 0; u < CL_U; ++u) {
                if (tb + u >= t1) break;
                float xv[CH], o[CH];
                Cl4IO<S>::unpack(q[u], xv, xdt);
#pragma unroll
                for (int j = 0; j < CH; ++j) {
                    float acc = b0[j];
#pragma unroll
                    for (int k = 0; k < H; ++k) acc = __fmaf_rn(wk[k][j], win[k][j], acc);
                    acc = __fmaf_rn(wk[H][j], xv[j], acc);
                    o[j] = act ? silu_fast(acc) : acc;
                }
                Cl4IO<S>::store(out, (b * L + tb + u) * dim + d0, o, xdt);
                if (H > 0) {
#pragma unroll
                    for (int j = 0; j < CH; ++j) {
#pragma unroll
                        for (int k = 0; k + 1 < H; ++k) win[k][j] = win[k + 1][j];
                        win[H - 1 > 0 ? H - 1 : 0][j] = xv[j];
                    }
                }
            }
        }
        if (c == nch - 1) {
#pragma unroll
            for (int k = 0; k < H; ++k)
#pragma unroll
                for (int j = 0; j < CH; ++j)
                    store_from_f32(fin, (b * H + k) * dim + d0 + j, xdt, val(L - H + k, d0 + j));
        }
    }
}

#define CONV1D_FN_CL4(NAME, S, W)                                                                \
    extern "C" __global__ void NAME(const void* x, int xdt, const void* w, int wdt,              \
                                    const void* bias, int bdt, const void* init, int idt,        \
                                    i64 batch, i64 dim, i64 L, int act, void* out, void* fin) {  \
        DUET_PDL_ENTRY();                                                                        \
        conv1d_fn_cl4_impl<S, W>(x, xdt, w, wdt, bias, bdt, init, idt, batch, dim, L, act, out, \
                                 fin);                                                           \
    }

CONV1D_FN_CL4(conv1d_fn_cl4_f32_w1, float, 1)
CONV1D_FN_CL4(conv1d_fn_cl4_f32_w2, float, 2)
CONV1D_FN_CL4(conv1d_fn_cl4_f32_w3, float, 3)
CONV1D_FN_CL4(conv1d_fn_cl4_f32_w4, float, 4)
CONV1D_FN_CL4(conv1d_fn_cl4_h16_w1, u16, 1)
CONV1D_FN_CL4(conv1d_fn_cl4_h16_w2, u16, 2)
CONV1D_FN_CL4(conv1d_fn_cl4_h16_w3, u16, 3)
CONV1D_FN_CL4(conv1d_fn_cl4_h16_w4, u16, 4)

// ---------------------------------------------------------------------------------------------
// v5: v2's arithmetic and neighbour exchange on a 2-D grid (session 17): blockIdx.y walks the
// rows (grid-stride past 65535), blockIdx.x a span of 256 x U vectors of the row, so no thread
// divides by the row length; each lane issues its U 16-byte loads and lane 0 the 16-byte vector
// before the warp's span (its halo; the row start takes initial_states) before any arithmetic.
// Same conditions as v2 (L * sizeof(x) % 16 == 0, width <= 4). The lane holding the row's last
// vector writes final_states.
template <typename S, int W, int U>
__device__ __forceinline__ void conv1d_fn_v5_impl(const void* __restrict__ x, int xdt,
                                                  const void* __restrict__ w, int wdt,
                                                  const void* __restrict__ bias, int bdt,
                                                  const void* __restrict__ init, int idt,
                                                  i64 rows, i64 dim, i64 L, int act,
                                                  void* __restrict__ out, void* __restrict__ fin) {
    constexpr int VE = VecIO<S>::VE;
    constexpr int H = W - 1;
    constexpr int HA = H > 0 ? H : 1;
    const int lane = threadIdx.x & 31;
    const i64 nv = L / VE;
    // First vector of this warp's span (warp-uniform): a warp past the row's end has nothing.
    const i64 wv0 = (i64)blockIdx.x * ((i64)blockDim.x * U) + (i64)(threadIdx.x >> 5) * (32 * U);
    if (wv0 >= nv) return;
    const uint4* xv = (const uint4*)x;
    uint4* ov = (uint4*)out;
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
        const i64 d = r % dim;
        const i64 row_v = r * nv;
        uint4 raw[U];
#pragma unroll
        for (int q = 0; q < U; ++q) {
            const i64 v = wv0 + (i64)q * 32 + lane;
            raw[q] = v < nv ? __ldg(xv + row_v + v) : make_uint4(0, 0, 0, 0);
        }
        float carry[HA];
#pragma unroll
        for (int k = 0; k < HA; ++k) carry[k] = 0.0f;
        if (H > 0 && lane == 0) {
            if (wv0 > 0) {
                float pv[VE];
                VecIO<S>::unpack(__ldg(xv + row_v + wv0 - 1), pv, xdt);
#pragma unroll
                for (int k = 0; k < H; ++k) carry[k] = pv[VE - H + k];
            } else if (init) {
#pragma unroll
                for (int k = 0; k < H; ++k) carry[k] = load_as_f32(init, r * H + k, idt);
            }
        }
        float wk[W], b0;
        conv_row_weights<W>(w, wdt, bias, bdt, d, wk, b0);
#pragma unroll
        for (int q = 0; q < U; ++q) {
            const i64 v = wv0 + (i64)q * 32 + lane;
            if (wv0 + (i64)q * 32 >= nv) break;  // warp-uniform
            conv_vec_out<S, W, true>(raw[q], carry, wk, b0, act, xdt, ov, row_v, v, nv, fin, r);
        }
    }
}

// v5 is held to 4 blocks of 256 an SM (64 registers; session 23): compiled per dtype it took
// 75-79 registers (3 blocks) and ran the Super prefill (bf16, width 4) in 633-641 us; held to
// 64 (ptxas spills 32-64 bytes) 577-583 us.
#define CONV_LB_M4 256, 4
#define CONV1D_FN_V5(S, SN, DT, W, U)                                                               \
    extern "C" __global__ void __launch_bounds__(CONV_LB_M4)                                           \
        conv1d_fn_v5u##U##_##SN##_w##W(const void* x, int xdt, const void* w, int wdt,          \
                                        const void* bias, int bdt, const void* init, int idt,   \
                                        i64 rows, i64 dim, i64 L, int act, void* out,           \
                                        void* fin) {                                            \
        DUET_PDL_ENTRY();                                                                       \
        conv_specialize(act, [&](auto a) {                                   \
            conv1d_fn_v5_impl<S, W, U>(x, DT, w, wdt, bias, bdt, init, idt, rows, dim, \
                                 L, decltype(a)::value, out, fin);                         \
        });                                                   \
    }
#define CONV1D_FN_V5_DT(S, SN, DT, U)                                                            \
    CONV1D_FN_V5(S, SN, DT, 1, U) CONV1D_FN_V5(S, SN, DT, 2, U) CONV1D_FN_V5(S, SN, DT, 3, U)    \
    CONV1D_FN_V5(S, SN, DT, 4, U)
#define CONV1D_FN_V5_ALL(U)                                                                      \
    CONV1D_FN_V5_DT(float, f32, DT_F32, U) CONV1D_FN_V5_DT(u16, bf16, DT_BF16, U)                \
    CONV1D_FN_V5_DT(u16, f16, DT_F16, U)
// (U = 2 measured slower: 696-700 us vs 617-622 at U = 4 on the Super prefill, session 17.)
CONV1D_FN_V5_ALL(4)

// ---------------------------------------------------------------------------------------------
// v6: channel-last (x, out (batch, L, dim)) with one 16-byte vector of channels a thread (8
// bf16 / f16 or 4 f32) on a 2-D grid (session 17): blockIdx.x the channel vectors,
// blockIdx.y (batch row, chunk of V6_CHUNK tokens) (grid-stride past 65535); the weights and
// bias are loaded once a thread (they depend on the channels only); the window of the width-1
// previous tokens slides in registers (f32); U tokens' 16-byte loads in flight (4 for 16-bit x,
// whose 8 channels' weights and window take 56 registers; 8 for f32). v2's arithmetic (FMA in the taps' order, fast silu). Needs dim * sizeof(x) % 16 == 0
// and width <= 4. The halo before a chunk from initial_states and the final states go through
// scalar loads (as v4).
#define V6_CHUNK 64
template <typename S> struct V6IO;
template <> struct V6IO<float> {
    static constexpr int VE = 4;
    __device__ static __forceinline__ float get(const uint4& u, int j, int) {
        return __uint_as_float(j == 0 ? u.x : j == 1 ? u.y : j == 2 ? u.z : u.w);
    }
};
template <> struct V6IO<u16> {
    static constexpr int VE = 8;
    __device__ static __forceinline__ float get(const uint4& u, int j, int dt) {
        const u32 word = (j >> 1) == 0 ? u.x : (j >> 1) == 1 ? u.y : (j >> 1) == 2 ? u.z : u.w;
        return h16_to_f32((u16)((j & 1) ? word >> 16 : word & 0xffffu), dt);
    }
};

template <typename S, int W, int U>
__device__ __forceinline__ void conv1d_fn_v6_impl(const void* __restrict__ x, int xdt,
                                                  const void* __restrict__ w, int wdt,
                                                  const void* __restrict__ bias, int bdt,
                                                  const void* __restrict__ init, int idt,
                                                  i64 batch, i64 dim, i64 L, int act,
                                                  void* __restrict__ out, void* __restrict__ fin) {
    constexpr int VE = V6IO<S>::VE;
    constexpr int H = W - 1;
    constexpr int HA = H > 0 ? H : 1;
    const i64 dvv = dim / VE;
    const i64 cv = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (cv >= dvv) return;
    const i64 d0 = cv * VE;
    const i64 nch = L > 0 ? (L + V6_CHUNK - 1) / V6_CHUNK : 1;  // L = 0: final states only
    float wk[W][VE], b0[VE];
#pragma unroll
    for (int j = 0; j < VE; ++j) {
        b0[j] = bias ? ldg_f32(bias, d0 + j, bdt) : 0.0f;
#pragma unroll
        for (int k = 0; k < W; ++k) wk[k][j] = ldg_f32(w, (d0 + j) * W + k, wdt);
    }
    for (i64 yc = blockIdx.y; yc < batch * nch; yc += gridDim.y) {
        const i64 b = yc / nch, c = yc - b * nch;
        const i64 t0 = c * V6_CHUNK, t1 = min(L, t0 + V6_CHUNK);
        const uint4* xr = (const uint4*)((const S*)x + (b * L) * dim + d0);
        uint4* orow = (uint4*)((S*)out + (b * L) * dim + d0);
        // Element j of token position pos in [-H, L) of cat(initial_states, x) for (b, d0 + j).
        auto val = [&](i64 pos, int j) -> float {
            if (pos >= 0) return load_as_f32(x, (b * L + pos) * dim + d0 + j, xdt);
            return init ? load_as_f32(init, (b * H + H + pos) * dim + d0 + j, idt) : 0.0f;
        };
        // The window: win[k][j] holds token t - H + k of channel d0 + j.
        float win[HA][VE];
#pragma unroll
        for (int k = 0; k < H; ++k) {
            const i64 pos = t0 - H + k;
            if (pos >= 0) {
                const uint4 u = __ldg(xr + pos * dvv);
#pragma unroll
                for (int j = 0; j < VE; ++j) win[k][j] = V6IO<S>::get(u, j, xdt);
            } else {
#pragma unroll
                for (int j = 0; j < VE; ++j) win[k][j] = val(pos, j);
            }
        }
        for (i64 tb = t0; tb < t1; tb += U) {
            uint4 q[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (tb + u < t1) q[u] = __ldg(xr + (tb + u) * dvv);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (tb + u >= t1) break;
                float o[VE];
#pragma unroll
                for (int j = 0; j < VE; ++j) {
                    const float xj = V6IO<S>::get(q[u], j, xdt);
                    float acc = b0[j];
#pragma unroll
                    for (int k = 0; k < H; ++k) acc = __fmaf_rn(wk[k][j], win[k][j], acc);
                    acc = __fmaf_rn(wk[H][j], xj, acc);
                    o[j] = act ? silu_ftz(acc) : acc;
#pragma unroll
                    for (int k = 0; k + 1 < H; ++k) win[k][j] = win[k + 1][j];
                    if (H > 0) win[H - 1 > 0 ? H - 1 : 0][j] = xj;
                }
                __stcs(orow + (tb + u) * dvv, VecIO<S>::pack(o, xdt));
            }
        }
        if (c == nch - 1) {
#pragma unroll
            for (int k = 0; k < H; ++k)
#pragma unroll
                for (int j = 0; j < VE; ++j)
                    store_from_f32(fin, (b * H + k) * dim + d0 + j, xdt, val(L - H + k, j));
        }
    }
}

#define CONV1D_FN_V6(S, SN, DT, W, U)                                                                \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        conv1d_fn_v6_##SN##_w##W(const void* x, int xdt, const void* w, int wdt,                \
                                 const void* bias, int bdt, const void* init, int idt,          \
                                 i64 batch, i64 dim, i64 L, int act, void* out, void* fin) {    \
        DUET_PDL_ENTRY();                                                                       \
        conv_specialize(act, [&](auto a) {                                   \
            conv1d_fn_v6_impl<S, W, U>(x, DT, w, wdt, bias, bdt, init, idt, batch, dim, \
                                 L, decltype(a)::value, out, fin);                         \
        });                                                           \
    }
CONV1D_FN_V6(float, f32, DT_F32, 1, 8)
CONV1D_FN_V6(float, f32, DT_F32, 2, 8)
CONV1D_FN_V6(float, f32, DT_F32, 3, 8)
CONV1D_FN_V6(float, f32, DT_F32, 4, 8)
CONV1D_FN_V6(u16, bf16, DT_BF16, 1, 4)
CONV1D_FN_V6(u16, f16, DT_F16, 1, 4)
CONV1D_FN_V6(u16, bf16, DT_BF16, 2, 4)
CONV1D_FN_V6(u16, f16, DT_F16, 2, 4)
CONV1D_FN_V6(u16, bf16, DT_BF16, 3, 4)
CONV1D_FN_V6(u16, f16, DT_F16, 3, 4)
CONV1D_FN_V6(u16, bf16, DT_BF16, 4, 4)
CONV1D_FN_V6(u16, f16, DT_F16, 4, 4)

// ---------------------------------------------------------------------------------------------
// v8 / v9 (session 23): the prefill through the bulk copy engine. A persistent block keeps
// CONV_TMA_ST stages of x in flight in shared memory (cp.async.bulk global -> shared, one
// mbarrier a stage, issued by thread 0), so the bytes in flight are not held in registers and
// no thread waits on its own loads; every thread reads its 16-byte vectors from the stage,
// computes v2's arithmetic (FMA in the taps' order, fast silu) and stores straight to global
// memory (.cs). v9: after a block barrier (every thread done with the stage) thread 0 refills it
// with the block's tile ST ahead; v8 / v10: a producer warp refills a stage once every consumer
// warp has arrived on its empty barrier. Shared memory: 128 bytes of barriers + ST stages.
// Measured (session 23 call 4, Super prefill bf16): v10 547-552 us, v9 560-565 (channel-last,
// copy 523); v8 622-624 (channel-first; v5 in registers 570).
//
// v8, channel-first (x, out (batch, dim, L)): a tile is CONV8_TV vectors of one row plus the
// 16-byte vector before it (the halo; initial_states / zero at the row start), tiles (row,
// tile) walked by the persistent blocks in a grid stride. v2's conditions (L * sizeof(x) % 16
// == 0, width <= 4). Warp-specialized (session 23, after call 3's block-barrier form ran 622-632
// us at 14 cycles an issue): CONV8_THREADS consumer warps and one producer warp; a stage has a
// full barrier (the bulk copy's bytes) and an empty one (one arrival a consumer warp), so no
// block-wide barrier orders the warps and the producer refills a stage as soon as the last
// warp is done with it.
#define CONV_TMA_ST 4
#define CONV8_THREADS 256
#define CONV8_BLOCK (CONV8_THREADS + 32)
#define CONV8_VPT 2
#define CONV8_TV (CONV8_THREADS * CONV8_VPT)
// a / b with a 32-bit division when both fit (the tile walk divides once a tile).
__device__ __forceinline__ i64 conv_div(i64 a, i64 b) {
    return ((a | b) >> 32) == 0 ? (i64)((u32)a / (u32)b) : a / b;
}
template <typename S, int W>
__device__ __forceinline__ void conv1d_fn_v8_impl(const void* __restrict__ x, int xdt,
                                                  const void* __restrict__ w, int wdt,
                                                  const void* __restrict__ bias, int bdt,
                                                  const void* __restrict__ init, int idt,
                                                  i64 rows, i64 dim, i64 L, int act,
                                                  void* __restrict__ out, void* __restrict__ fin) {
    constexpr int VE = VecIO<S>::VE;
    constexpr int H = W - 1;
    constexpr int TV = CONV8_TV;
    extern __shared__ __align__(128) unsigned char conv8_sm[];
    u64* full = (u64*)conv8_sm;
    u64* empty = full + CONV_TMA_ST;
    uint4* ring = (uint4*)(conv8_sm + 128);
    const int tid = threadIdx.x;
    const i64 nv = L / VE;
    const i64 tpr = (nv + TV - 1) / TV;
    const i64 items = rows * tpr;
    const uint4* xv = (const uint4*)x;
    uint4* ov = (uint4*)out;
    if (tid == 0) {
        for (int s = 0; s < CONV_TMA_ST; ++s) {
            duet_mbar_init(&full[s], 1);
            duet_mbar_init(&empty[s], CONV8_THREADS / 32);
        }
        duet_mbar_init_fence();
    }
    __syncthreads();
    if (tid >= CONV8_THREADS) {
        // ---- producer: lane 0 of the last warp ----
        if (tid != CONV8_THREADS) return;
        for (i64 k = 0;; ++k) {
            const i64 it = (i64)blockIdx.x + k * gridDim.x;
            if (it >= items) break;
            const int s = (int)(k % CONV_TMA_ST);
            // Use u = k / ST of stage s waits for the consumers' release of use u - 1.
            if (k >= CONV_TMA_ST) duet_mbar_wait(&empty[s], (u32)((k / CONV_TMA_ST - 1) & 1));
            // Stage s: slot 0 the vector before the tile (absent at a row start), slots 1..
            // the tile.
            const i64 r = conv_div(it, tpr), v0 = (it - r * tpr) * TV;
            const i64 n = min((i64)TV, nv - v0);
            const i64 h = v0 > 0 ? 1 : 0;
            const u32 bytes = (u32)((n + h) * 16);
            duet_mbar_expect_tx(&full[s], bytes);
            duet_bulk_g2s(ring + (i64)s * (TV + 1) + (1 - h), xv + r * nv + v0 - h, bytes, &full[s]);
            duet_mbar_arrive(&full[s]);
        }
        return;
    }
    // ---- consumers ----
    for (i64 k = 0;; ++k) {
        const i64 it = (i64)blockIdx.x + k * gridDim.x;
        if (it >= items) break;
        const int s = (int)(k % CONV_TMA_ST);
        const i64 r = conv_div(it, tpr), v0 = (it - r * tpr) * TV;
        const i64 n = min((i64)TV, nv - v0);
        const i64 d = r - conv_div(r, dim) * dim;
        float wk[W], b0;
        conv_row_weights<W>(w, wdt, bias, bdt, d, wk, b0);
        const uint4* st = ring + (i64)s * (TV + 1);
        duet_mbar_wait(&full[s], (u32)((k / CONV_TMA_ST) & 1));
#pragma unroll
        for (int q = 0; q < CONV8_VPT; ++q) {
            const int j = q * CONV8_THREADS + tid;
            if (j >= n) break;
            float a[H + VE];
            VecIO<S>::unpack(st[1 + j], a + H, xdt);
            if (H > 0) {
                if (j > 0 || v0 > 0) {
                    float pv[VE];
                    VecIO<S>::unpack(st[j], pv, xdt);
#pragma unroll
                    for (int m = 0; m < H; ++m) a[m] = pv[VE - H + m];
                } else {
#pragma unroll
                    for (int m = 0; m < H; ++m) a[m] = init ? load_as_f32(init, r * H + m, idt) : 0.0f;
                }
            }
            float o[VE];
#pragma unroll
            for (int e = 0; e < VE; ++e) {
                float acc = b0;
#pragma unroll
                for (int m = 0; m < W; ++m) acc = __fmaf_rn(wk[m], a[e + m], acc);
                o[e] = act ? silu_ftz(acc) : acc;
            }
            __stcs(ov + r * nv + v0 + j, VecIO<S>::pack(o, xdt));
            if (H > 0 && v0 + j == nv - 1) {
#pragma unroll
                for (int m = 0; m < H; ++m) store_from_f32(fin, r * H + m, xdt, a[VE + m]);
            }
        }
        // Racecheck (session 24, calls 3-4) reports the producer's bulk copy into a reused stage
        // against these reads on v8 (not on v10, whose release is the same and whose hand case
        // reuses its stages too); a fence.proxy.async here did not change the report. Unexplained;
        // v8 is not auto.
        __syncwarp();  // every lane of this warp is done with stage s
        if ((tid & 31) == 0) duet_mbar_arrive(&empty[s]);
    }
}

#define CONV1D_FN_V8(S, SN, DT, W)                                                                   \
    extern "C" __global__ void __launch_bounds__(CONV8_BLOCK)                                 \
        conv1d_fn_v8_##SN##_w##W(const void* x, int xdt, const void* w, int wdt,                \
                                 const void* bias, int bdt, const void* init, int idt,          \
                                 i64 rows, i64 dim, i64 L, int act, void* out, void* fin) {     \
        DUET_PDL_ENTRY();                                                                       \
        conv_specialize(act, [&](auto a) {                                   \
            conv1d_fn_v8_impl<S, W>(x, DT, w, wdt, bias, bdt, init, idt, rows, dim, \
                                 L, decltype(a)::value, out, fin);                         \
        });                                                           \
    }
CONV1D_FN_V8(float, f32, DT_F32, 1)
CONV1D_FN_V8(float, f32, DT_F32, 2)
CONV1D_FN_V8(float, f32, DT_F32, 3)
CONV1D_FN_V8(float, f32, DT_F32, 4)
CONV1D_FN_V8(u16, bf16, DT_BF16, 1)
CONV1D_FN_V8(u16, f16, DT_F16, 1)
CONV1D_FN_V8(u16, bf16, DT_BF16, 2)
CONV1D_FN_V8(u16, f16, DT_F16, 2)
CONV1D_FN_V8(u16, bf16, DT_BF16, 3)
CONV1D_FN_V8(u16, f16, DT_F16, 3)
CONV1D_FN_V8(u16, bf16, DT_BF16, 4)
CONV1D_FN_V8(u16, f16, DT_F16, 4)

// v9, channel-last (x, out (batch, L, dim)): a block owns a strip of CONV9_THREADS 16-byte
// channel vectors and one segment of tokens of one batch row (blockIdx.y = b * nseg + seg,
// nseg = gridDim.y / batch: the host sizes the grid to the resident blocks, so every block
// runs in the one wave); a stage holds CONV9_TT token rows of the strip (one bulk copy a row).
// Every thread owns one vector of channels: weights, bias and the window of the width-1 previous
// tokens in registers (v6's), the window started from x (or initial_states before token 0) by
// plain loads. The block whose segment ends at L writes final_states from its window.
// dim * sizeof(x) % 16 == 0 (v6's condition).
#define CONV9_THREADS 128
#define CONV9_TT 4
// WS (version v10, session 23): v9 warp-specialized as v8 is: a producer warp (lane 0 issues
// the copies) after the CONV9_THREADS consumer threads, a full and an empty barrier a stage
// (one arrival a consumer warp), no block-wide barrier in the loop.
// (Session 23's v11, v10 with its outputs staged in shared memory and written by bulk stores,
// ran 550.9-552.3 us against v10's 546.8-548.5 in session 24's call 1: removed.)
template <typename S, int W, bool WS>
__device__ __forceinline__ void conv1d_fn_v9_impl(const void* __restrict__ x, int xdt,
                                                  const void* __restrict__ w, int wdt,
                                                  const void* __restrict__ bias, int bdt,
                                                  const void* __restrict__ init, int idt,
                                                  i64 batch, i64 dim, i64 L, int act,
                                                  void* __restrict__ out, void* __restrict__ fin) {
    constexpr int VE = V6IO<S>::VE;
    constexpr int H = W - 1;
    constexpr int HA = H > 0 ? H : 1;
    constexpr int ES = 16 / VE;
    constexpr int SV = CONV9_THREADS * CONV9_TT;  // vectors a stage
    extern __shared__ __align__(128) unsigned char conv9_sm[];
    u64* full = (u64*)conv9_sm;
    u64* empty = full + CONV_TMA_ST;
    uint4* ring = (uint4*)(conv9_sm + 128);
    const int tid = threadIdx.x;
    const i64 nseg = max((i64)1, (i64)gridDim.y / max(batch, (i64)1));
    const i64 b = (i64)blockIdx.y / nseg, seg = (i64)blockIdx.y - b * nseg;
    if (b >= batch) return;
    const i64 sl = (L + nseg - 1) / nseg;
    const i64 t0 = min(L, seg * sl), t1 = min(L, t0 + sl);
    if (t0 >= t1 && !(L == 0 && seg == 0)) return;  // an empty segment (L = 0: states only)
    const i64 dvv = dim / VE;
    const i64 cv0 = (i64)blockIdx.x * CONV9_THREADS;
    const i64 nvec = min((i64)CONV9_THREADS, dvv - cv0);
    const bool on = tid < nvec;  // (false in the producer warp: tid >= CONV9_THREADS)
    const i64 d0 = (cv0 + tid) * VE;
    const i64 ntile = (t1 - t0 + CONV9_TT - 1) / CONV9_TT;
    const unsigned char* xb = (const unsigned char*)x;
    auto issue = [&](i64 i, int s) {
        const i64 tok = t0 + i * CONV9_TT;
        const int nt = (int)min((i64)CONV9_TT, t1 - tok);
        const u32 rb = (u32)(nvec * 16);
        duet_mbar_expect_tx(&full[s], rb * (u32)nt);
        for (int u = 0; u < nt; ++u)
            duet_bulk_g2s(ring + (i64)s * SV + u * CONV9_THREADS,
                          xb + ((b * L + tok + u) * dim + cv0 * VE) * ES, rb, &full[s]);
        duet_mbar_arrive(&full[s]);
    };
    if (tid == 0) {
        for (int s = 0; s < CONV_TMA_ST; ++s) {
            duet_mbar_init(&full[s], 1);
            if (WS) duet_mbar_init(&empty[s], CONV9_THREADS / 32);
        }
        duet_mbar_init_fence();
    }
    __syncthreads();
    if (WS && tid >= CONV9_THREADS) {
        // ---- producer: lane 0 of the last warp ----
        if (tid != CONV9_THREADS) return;
        for (i64 i = 0; i < ntile; ++i) {
            const int s = (int)(i % CONV_TMA_ST);
            if (i >= CONV_TMA_ST) duet_mbar_wait(&empty[s], (u32)((i / CONV_TMA_ST - 1) & 1));
            issue(i, s);
        }
        return;
    }
    if (!WS && tid == 0) {
        for (int s = 0; s < CONV_TMA_ST && s < ntile; ++s) issue(s, s);
    }
    float wk[W][VE], b0[VE], win[HA][VE];
    if (on) {
#pragma unroll
        for (int j = 0; j < VE; ++j) {
            b0[j] = bias ? ldg_f32(bias, d0 + j, bdt) : 0.0f;
#pragma unroll
            for (int m = 0; m < W; ++m) wk[m][j] = ldg_f32(w, (d0 + j) * W + m, wdt);
        }
#pragma unroll
        for (int m = 0; m < H; ++m) {
            const i64 pos = t0 - H + m;
            if (pos >= 0) {
                const uint4 u = __ldg((const uint4*)(xb + ((b * L + pos) * dim + d0) * ES));
#pragma unroll
                for (int j = 0; j < VE; ++j) win[m][j] = V6IO<S>::get(u, j, xdt);
            } else {
#pragma unroll
                for (int j = 0; j < VE; ++j)
                    win[m][j] = init ? load_as_f32(init, (b * H + H + pos) * dim + d0 + j, idt) : 0.0f;
            }
        }
    }
    uint4* ob = (uint4*)out;
    for (i64 i = 0; i < ntile; ++i) {
        const int s = (int)(i % CONV_TMA_ST);
        const i64 tok = t0 + i * CONV9_TT;
        const int nt = (int)min((i64)CONV9_TT, t1 - tok);
        duet_mbar_wait(&full[s], (u32)((i / CONV_TMA_ST) & 1));
        if (on) {
            const uint4* st = ring + (i64)s * SV + tid;
#pragma unroll
            for (int u = 0; u < CONV9_TT; ++u) {
                if (u >= nt) break;
                const uint4 q = st[u * CONV9_THREADS];
                float o[VE];
#pragma unroll
                for (int j = 0; j < VE; ++j) {
                    const float xj = V6IO<S>::get(q, j, xdt);
                    float acc = b0[j];
#pragma unroll
                    for (int m = 0; m < H; ++m) acc = __fmaf_rn(wk[m][j], win[m][j], acc);
                    acc = __fmaf_rn(wk[H][j], xj, acc);
                    o[j] = act ? silu_ftz(acc) : acc;
#pragma unroll
                    for (int m = 0; m + 1 < H; ++m) win[m][j] = win[m + 1][j];
                    if (H > 0) win[H - 1 > 0 ? H - 1 : 0][j] = xj;
                }
                __stcs(ob + (((b * L + tok + u) * dim + d0) / VE), VecIO<S>::pack(o, xdt));
            }
        }
        if (WS) {
            __syncwarp();  // every lane of this warp is done with stage s
            if ((tid & 31) == 0) duet_mbar_arrive(&empty[s]);
        } else {
            __syncthreads();  // every thread is done with stage s
            if (tid == 0 && i + CONV_TMA_ST < ntile) issue(i + CONV_TMA_ST, s);
        }
    }
    if (on && t1 == L) {
#pragma unroll
        for (int m = 0; m < H; ++m)
#pragma unroll
            for (int j = 0; j < VE; ++j) store_from_f32(fin, (b * H + m) * dim + d0 + j, xdt, win[m][j]);
    }
}

#define CONV1D_FN_V9(S, SN, DT, W) CONV1D_FN_V9_FORM(S, SN, DT, W, v9, false, CONV9_THREADS) \
    CONV1D_FN_V9_FORM(S, SN, DT, W, v10, true, CONV9_THREADS + 32)
#define CONV1D_FN_V9_FORM(S, SN, DT, W, STEM, WS, NT)                                            \
    extern "C" __global__ void __launch_bounds__(NT)                                            \
        conv1d_fn_##STEM##_##SN##_w##W(const void* x, int xdt, const void* w, int wdt,                \
                                 const void* bias, int bdt, const void* init, int idt,          \
                                 i64 batch, i64 dim, i64 L, int act, void* out, void* fin) {    \
        DUET_PDL_ENTRY();                                                                       \
        conv_specialize(act, [&](auto a) {                                   \
            conv1d_fn_v9_impl<S, W, WS>(x, DT, w, wdt, bias, bdt, init, idt, batch, dim, \
                                 L, decltype(a)::value, out, fin);                         \
        });                                                           \
    }
CONV1D_FN_V9(float, f32, DT_F32, 1)
CONV1D_FN_V9(float, f32, DT_F32, 2)
CONV1D_FN_V9(float, f32, DT_F32, 3)
CONV1D_FN_V9(float, f32, DT_F32, 4)
CONV1D_FN_V9(u16, bf16, DT_BF16, 1)
CONV1D_FN_V9(u16, f16, DT_F16, 1)
CONV1D_FN_V9(u16, bf16, DT_BF16, 2)
CONV1D_FN_V9(u16, f16, DT_F16, 2)
CONV1D_FN_V9(u16, bf16, DT_BF16, 3)
CONV1D_FN_V9(u16, f16, DT_F16, 3)
CONV1D_FN_V9(u16, bf16, DT_BF16, 4)
CONV1D_FN_V9(u16, f16, DT_F16, 4)

// ---------------------------------------------------------------------------------------------
// causal_conv1d_update v1: one thread per (batch row, channel); the width-1 window lives in
// registers and slides over the seqlen tokens. cache_seqlens / conv_state_indices are i64
// (converted on the host). A negative slot gives zero output and zero intermediate windows and
// touches no state. Rows sharing a slot race (the reference processes rows in order).
template <int W>
__device__ __forceinline__ void conv1d_update_impl(
    const void* __restrict__ x, int xdt, void* __restrict__ state, int sdt,
    const void* __restrict__ w, int wdt, const void* __restrict__ bias, int bdt,
    const i64* __restrict__ cache_seqlens, const i64* __restrict__ slot_idx, i64 batch, i64 dim,
    i64 seqlen, i64 state_len, int act, void* __restrict__ out, void* __restrict__ inter) {
    constexpr int H = W - 1;
    constexpr int HA = H > 0 ? H : 1;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < batch * dim; i += stride) {
        const i64 b = i / dim, d = i - b * dim;
        const i64 slot = slot_idx ? slot_idx[b] : b;
        const i64 xrow = (b * dim + d) * seqlen;
        if (slot < 0) {
            for (i64 t = 0; t < seqlen; ++t) {
                store_from_f32(out, xrow + t, xdt, 0.0f);
                if (inter && H > 0)
                    for (int k = 0; k < H; ++k)
                        store_from_f32(inter, ((b * seqlen + t) * dim + d) * H + k, sdt, 0.0f);
            }
            continue;
        }
        const i64 srow = (slot * dim + d) * state_len;
        float win[HA];
        i64 pos = 0;
        if (cache_seqlens) {
            pos = cache_seqlens[b];
#pragma unroll
            for (int k = 0; k < H; ++k) {
                i64 j = (pos - H + k) % state_len;
                if (j < 0) j += state_len;
                win[k] = load_as_f32(state, srow + j, sdt);
            }
        } else {
#pragma unroll
            for (int k = 0; k < H; ++k) win[k] = load_as_f32(state, srow + state_len - H + k, sdt);
        }
        float wk[W];
#pragma unroll
        for (int k = 0; k < W; ++k) wk[k] = ldg_f32(w, d * W + k, wdt);
        const float b0 = bias ? ldg_f32(bias, d, bdt) : 0.0f;
        for (i64 t = 0; t < seqlen; ++t) {
            const float xv = load_as_f32(x, xrow + t, xdt);
            float acc = b0;
#pragma unroll
            for (int k = 0; k < H; ++k) acc = acc + wk[k] * win[k];
            acc = acc + wk[H] * xv;
            store_from_f32(out, xrow + t, xdt, act ? silu_exact(acc) : acc);
            if (H > 0) {
#pragma unroll
                for (int k = 0; k + 1 < H; ++k) win[k] = win[k + 1];
                win[H - 1 > 0 ? H - 1 : 0] = xv;
                if (inter) {
#pragma unroll
                    for (int k = 0; k < H; ++k)
                        store_from_f32(inter, ((b * seqlen + t) * dim + d) * H + k, sdt, win[k]);
                }
            }
        }
        // State write-back (after every read above).
        if (cache_seqlens) {
            for (i64 t = 0; t < seqlen; ++t) {
                i64 j = (pos + t) % state_len;
                if (j < 0) j += state_len;
                store_from_f32(state, srow + j, sdt, load_as_f32(x, xrow + t, xdt));
            }
        } else {
            // new[i] = cat(state, x)[i + seqlen]; ascending i reads state entries not yet written.
            for (i64 i2 = 0; i2 < state_len; ++i2) {
                const i64 src = i2 + seqlen;
                const float v = src < state_len ? load_as_f32(state, srow + src, sdt)
                                                : load_as_f32(x, xrow + src - state_len, xdt);
                store_from_f32(state, srow + i2, sdt, v);
            }
        }
    }
}

#define CONV1D_UPDATE(W)                                                                         \
    extern "C" __global__ void conv1d_update_v1_w##W(                                           \
        const void* x, int xdt, void* state, int sdt, const void* w, int wdt, const void* bias, \
        int bdt, const i64* cache_seqlens, const i64* slot_idx, i64 batch, i64 dim, i64 seqlen, \
        i64 state_len, int act, void* out, void* inter) {                                       \
        DUET_PDL_ENTRY();                                                                       \
        conv1d_update_impl<W>(x, xdt, state, sdt, w, wdt, bias, bdt, cache_seqlens, slot_idx,  \
                              batch, dim, seqlen, state_len, act, out, inter);                  \
    }

CONV1D_UPDATE(1)
CONV1D_UPDATE(2)
CONV1D_UPDATE(3)
CONV1D_UPDATE(4)
