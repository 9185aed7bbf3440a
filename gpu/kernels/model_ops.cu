// The dense kernels of the end-to-end model's GPU path (gpu/src/model.rs), against the CPU
// reference (reference/src/model/kernels.rs, reference/src/model/linear.rs):
//   model_gemm_f32        y = x . W^T (+ bias): tiled fp32 GEMM, fp32 accumulate (fmaf, no
//                         TF32), 64x64 output tiles, 16-deep k slices, 4x4 outputs per thread
//   model_gemv_f32        the same product for M <= GEMV_MAXM rows (decode): one warp per output
//                         column, 16-byte weight loads, four in flight per lane, fp32 FMAs
//                         per lane then a warp tree sum
//   model_gemm_bf16w,     the same two kernels on bf16 weights (x, bias, y f32): each weight
//   model_gemv_bf16w      widened to f32 exactly, then the same FMAs in the same order, so a
//                         bf16-valued weight gives the f32 kernels' bits at half the bytes
//   model_gemm_nvfp4w,    and on NVFP4 weights stored for exact use (ModelWNV below: codes,
//   model_gemv_nvfp4w     scale bytes and a table of pairs), 0.5625 bytes per weight
//   model_gemv1_*         the one-row product (decode) when K % 16 == 0 and the rows are
//                         aligned: R output columns per warp, lanes walk 16-weight chunks
//                         (one NVFP4 block: 64 / 32 / 8 + 1 bytes of f32 / bf16 / NVFP4), two
//                         chunks per row in flight; the same FMA order for every storage
//   model_gemv1_slots_*   the same over a token's routed slots (grid.y = slot)
//   model_rmsnorm         block per row: x * (1 / sqrt(mean(x^2) + eps)) * w
//   model_gated_rmsnorm   block per (row, group): g = x * silu(z); g * rstd(g) * w
//   model_relu2           relu(x)^2, grid-stride
//   model_attention       block per (query row, head): GQA causal softmax attention, scale
//                         1/sqrt(hd), online softmax over key chunks of ATT_CHUNK
// Every index and offset is 64-bit. Compiled with --fmad=false: the FMAs are explicit.

#define GEMM_BM 64
#define GEMM_BN 64
#define GEMM_BK 16
#define GEMM_THREADS 256

// x (M, K) row-major, w (N, K) row-major, bias (N,) or null, y (M, N).
// Grid: (ceil(N / 64), ceil(M / 64)); block: 256 threads (16 x 16, each 4 x 4 outputs at
// rows ty + 16 i, cols tx + 16 j).
// Weight views of the GEMM / GEMV (element i of the row-major (N, K) weight as f32):
//   ModelWF32    f32 weights
//   ModelWBF16   bf16 weights, widened exactly
//   ModelWNV     NVFP4 weights as stored on the device for exact use: E2M1 codes (two per
//                byte, the even element in the low nibble), per 16-element block its E4M3
//                scale byte, and per matrix a table of 256 pairs indexed by the scale byte:
//                (q1, q3) = (sf / gs, 3 sf / gs) in f32, sf the block's E4M3 scale and gs the
//                global scale. An element is q1 or q3 times a power of two (E2M1 magnitudes
//                0.5, 1, 2, 4 = q1 x 2^-1..2^2; 1.5, 3, 6 = q3 x 2^-1..2^1), which equals the
//                reference's c * sf / gs bit for bit while no value is subnormal: the host
//                checks every element against the reference dequantization before using it
//                (gpu/src/model.rs). K % 16 == 0.
struct ModelWF32 {
    const float* __restrict__ p;
    __device__ __forceinline__ ModelWF32 row(i64 n, i64 K) const { return {p + n * K}; }
    __device__ __forceinline__ float at(i64 i) const { return p[i]; }
    __device__ __forceinline__ float ld1(i64 i) const { return __ldg(p + i); }
    // Weights 4j..4j+3 (16-byte aligned).
    __device__ __forceinline__ float4 ld4(i64 j) const { return __ldg((const float4*)p + j); }
};

struct ModelWBF16 {
    const u16* __restrict__ p;
    __device__ __forceinline__ ModelWBF16 row(i64 n, i64 K) const { return {p + n * K}; }
    __device__ __forceinline__ float at(i64 i) const { return __uint_as_float((u32)p[i] << 16); }
    __device__ __forceinline__ float ld1(i64 i) const {
        return __uint_as_float((u32)__ldg(p + i) << 16);
    }
    // Weights 4j..4j+3 (8-byte aligned).
    __device__ __forceinline__ float4 ld4(i64 j) const {
        const uint2 r = __ldg((const uint2*)p + j);
        return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xFFFF0000u),
                           __uint_as_float(r.y << 16), __uint_as_float(r.y & 0xFFFF0000u));
    }
};

// E2M1 code -> value with the block's (q1, q3): magnitudes 3, 5, 7 (1.5, 3, 6) scale q3, the
// others q1, by 2^(e - 1) with e per magnitude packed in 0x23120100 (magnitude 0 gives 0).
__device__ __forceinline__ float model_nv_value(u32 code, float2 q) {
    const u32 mi = code & 7u;
    const float base = ((0xA8u >> mi) & 1u) ? q.y : q.x;
    const u32 e = (0x23120100u >> (4u * mi)) & 0xFu;
    const float mult = mi ? __uint_as_float((126u + e) << 23) : 0.0f;
    const float v = base * mult;
    return (code & 8u) ? -v : v;
}

struct ModelWNV {
    const u8* __restrict__ codes;
    const u8* __restrict__ sf;
    const float2* __restrict__ lut;
    // The matrix's buffer (gpu/src/nvfp4_store.rs): codes at 0, scale bytes at sf_off, the
    // table at lut_off.
    __device__ __forceinline__ static ModelWNV at_base(const u8* base, i64 sf_off, i64 lut_off) {
        return {base, base + sf_off, (const float2*)(base + lut_off)};
    }
    __device__ __forceinline__ ModelWNV row(i64 n, i64 K) const {
        return {codes + n * (K >> 1), sf + n * (K >> 4), lut};
    }
    __device__ __forceinline__ float2 pair(i64 blk) const { return __ldg(lut + __ldg(sf + blk)); }
    __device__ __forceinline__ float at(i64 i) const {
        const u32 b = codes[i >> 1];
        return model_nv_value((i & 1) ? (b >> 4) : (b & 0xFu), lut[sf[i >> 4]]);
    }
    __device__ __forceinline__ float ld1(i64 i) const {
        const u32 b = __ldg(codes + (i >> 1));
        return model_nv_value((i & 1) ? (b >> 4) : (b & 0xFu), pair(i >> 4));
    }
    // Weights 4j..4j+3: two code bytes and their block's pair.
    __device__ __forceinline__ float4 ld4(i64 j) const {
        const u32 c = __ldg((const u16*)codes + j);
        const float2 q = pair(j >> 2);
        return make_float4(model_nv_value(c & 0xFu, q), model_nv_value((c >> 4) & 0xFu, q),
                           model_nv_value((c >> 8) & 0xFu, q), model_nv_value((c >> 12) & 0xFu, q));
    }
};

template <typename W>
__device__ __forceinline__ void model_gemm_body(const float* __restrict__ x, const W w,
                                                const float* __restrict__ bias,
                                                float* __restrict__ y, i64 M, i64 N, i64 K,
                                                i32 has_bias) {
    __shared__ float As[GEMM_BK][GEMM_BM + 1];
    __shared__ float Bs[GEMM_BK][GEMM_BN + 1];
    const i64 m0 = (i64)blockIdx.y * GEMM_BM;
    const i64 n0 = (i64)blockIdx.x * GEMM_BN;
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    for (i64 k0 = 0; k0 < K; k0 += GEMM_BK) {
        // 64 rows x 16 k of each operand: 4 elements per thread, consecutive threads walk k
        // (coalesced 64-byte row segments).
        for (int e = tid; e < GEMM_BM * GEMM_BK; e += GEMM_THREADS) {
            const int r = e / GEMM_BK, c = e % GEMM_BK;
            const i64 gm = m0 + r, gn = n0 + r, gk = k0 + c;
            As[c][r] = (gm < M && gk < K) ? x[gm * K + gk] : 0.0f;
            Bs[c][r] = (gn < N && gk < K) ? w.at(gn * K + gk) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GEMM_BK; ++kk) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const i64 gm = m0 + ty + 16 * i;
        if (gm >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const i64 gn = n0 + tx + 16 * j;
            if (gn >= N) continue;
            float v = acc[i][j];
            if (has_bias) v = v + bias[gn];
            y[gm * N + gn] = v;
        }
    }
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS)
model_gemm_f32(const float* __restrict__ x, const float* __restrict__ w,
               const float* __restrict__ bias, float* __restrict__ y,
               i64 M, i64 N, i64 K, i32 has_bias) {
    DUET_PDL_ENTRY();
    model_gemm_body(x, ModelWF32{w}, bias, y, M, N, K, has_bias);
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS)
model_gemm_bf16w(const float* __restrict__ x, const u16* __restrict__ w,
                 const float* __restrict__ bias, float* __restrict__ y,
                 i64 M, i64 N, i64 K, i32 has_bias) {
    DUET_PDL_ENTRY();
    model_gemm_body(x, ModelWBF16{w}, bias, y, M, N, K, has_bias);
}

// NVFP4 weights (ModelWNV): the buffer at w, its scale bytes at sf_off, its table at lut_off;
// K % 16 == 0.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS)
model_gemm_nvfp4w(const float* __restrict__ x, const u8* __restrict__ w, i64 sf_off,
                  i64 lut_off, const float* __restrict__ bias,
                  float* __restrict__ y, i64 M, i64 N, i64 K, i32 has_bias) {
    DUET_PDL_ENTRY();
    model_gemm_body(x, ModelWNV::at_base(w, sf_off, lut_off), bias, y, M, N, K, has_bias);
}

#define GEMV_MAXM 8
#define GEMV_WARPS 8
#define GEMV_UNROLL 4

// x (M, K) row-major, w (N, K) row-major, bias (N,) or null, y (M, N), M <= GEMV_MAXM.
// Grid: ceil(N / GEMV_WARPS); block: 32 * GEMV_WARPS. Warp = output column n: lanes walk k
// (float4 when K % 4 == 0 and the rows are 16-byte aligned, else scalars), per lane one fp32
// FMA chain per row of x, then a butterfly sum over the warp. The tiled kernel above gives a
// one-row product 64 output columns per block and 16-deep k slices between barriers: at M = 1
// it reads the weights at a few percent of the memory bandwidth (session 5: ~1 ms for a
// 4096 x 8192 f32 weight, ~36 us of bytes).
// vec4: K % 4 == 0 and rows aligned for W's ld4 (NVFP4: always, K % 16 == 0).
template <typename W>
__device__ __forceinline__ void model_gemv_body(const float* __restrict__ x, const W w,
                                                const float* __restrict__ bias,
                                                float* __restrict__ y, i64 M, i64 N, i64 K,
                                                i32 has_bias, i32 vec4) {
    const int lane = threadIdx.x & 31;
    const i64 n = (i64)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;
    float acc[GEMV_MAXM];
#pragma unroll
    for (int i = 0; i < GEMV_MAXM; ++i) acc[i] = 0.0f;
    const W wr = w.row(n, K);
    if (vec4) {
        const i64 k4 = K >> 2;
        i64 j = lane;
        for (; j + 32 * (GEMV_UNROLL - 1) < k4; j += 32 * GEMV_UNROLL) {
            float4 wv[GEMV_UNROLL];
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; ++u) wv[u] = wr.ld4(j + 32 * u);
#pragma unroll
            for (int i = 0; i < GEMV_MAXM; ++i) {
                if (i < M) {
                    const float4* x4 = (const float4*)(x + (i64)i * K);
#pragma unroll
                    for (int u = 0; u < GEMV_UNROLL; ++u) {
                        const float4 xv = __ldg(x4 + j + 32 * u);
                        acc[i] = fmaf(xv.x, wv[u].x, acc[i]);
                        acc[i] = fmaf(xv.y, wv[u].y, acc[i]);
                        acc[i] = fmaf(xv.z, wv[u].z, acc[i]);
                        acc[i] = fmaf(xv.w, wv[u].w, acc[i]);
                    }
                }
            }
        }
        for (; j < k4; j += 32) {
            const float4 wv = wr.ld4(j);
#pragma unroll
            for (int i = 0; i < GEMV_MAXM; ++i) {
                if (i < M) {
                    const float4 xv = __ldg((const float4*)(x + (i64)i * K) + j);
                    acc[i] = fmaf(xv.x, wv.x, acc[i]);
                    acc[i] = fmaf(xv.y, wv.y, acc[i]);
                    acc[i] = fmaf(xv.z, wv.z, acc[i]);
                    acc[i] = fmaf(xv.w, wv.w, acc[i]);
                }
            }
        }
    } else {
        for (i64 j = lane; j < K; j += 32) {
            const float wv = wr.ld1(j);
#pragma unroll
            for (int i = 0; i < GEMV_MAXM; ++i)
                if (i < M) acc[i] = fmaf(__ldg(x + (i64)i * K + j), wv, acc[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < GEMV_MAXM; ++i) {
        if (i >= M) break;
        float v = acc[i];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(DUET_FULL_MASK, v, o);
        if (lane == 0) y[(i64)i * N + n] = has_bias ? v + bias[n] : v;
    }
}

extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)
model_gemv_f32(const float* __restrict__ x, const float* __restrict__ w,
               const float* __restrict__ bias, float* __restrict__ y,
               i64 M, i64 N, i64 K, i32 has_bias, i32 vec4) {
    DUET_PDL_ENTRY();
    model_gemv_body(x, ModelWF32{w}, bias, y, M, N, K, has_bias, vec4);
}

extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)
model_gemv_bf16w(const float* __restrict__ x, const u16* __restrict__ w,
                 const float* __restrict__ bias, float* __restrict__ y,
                 i64 M, i64 N, i64 K, i32 has_bias, i32 vec4) {
    DUET_PDL_ENTRY();
    model_gemv_body(x, ModelWBF16{w}, bias, y, M, N, K, has_bias, vec4);
}

extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)
model_gemv_nvfp4w(const float* __restrict__ x, const u8* __restrict__ w, i64 sf_off,
                  i64 lut_off, const float* __restrict__ bias,
                  float* __restrict__ y, i64 M, i64 N, i64 K, i32 has_bias, i32 vec4) {
    DUET_PDL_ENTRY();
    model_gemv_body(x, ModelWNV::at_base(w, sf_off, lut_off), bias, y, M, N, K, has_bias, vec4);
}

// ---- The one-row product on 16-weight chunks (model_gemv1_*) ----
// A chunk is 16 consecutive weights of a row (one NVFP4 block). Each view loads a chunk raw
// (ld16) and gives weight i (0..15, unrolled) of it as f32 (get): the same value its at()
// gives.
struct ModelC16F32 { float4 v[4]; };
struct ModelC16BF16 { uint4 v[2]; };
struct ModelC16NV { uint2 c; float2 q; };

__device__ __forceinline__ ModelC16F32 model_ld16(const ModelWF32& w, i64 c) {
    const float4* p = (const float4*)w.p + 4 * c;
    return {{__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3)}};
}
__device__ __forceinline__ float model_get(const ModelC16F32& a, int i) {
    const float4 v = a.v[i >> 2];
    const int j = i & 3;
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}
__device__ __forceinline__ ModelC16BF16 model_ld16(const ModelWBF16& w, i64 c) {
    const uint4* p = (const uint4*)w.p + 2 * c;
    return {{__ldg(p), __ldg(p + 1)}};
}
__device__ __forceinline__ float model_get(const ModelC16BF16& a, int i) {
    const uint4 v = a.v[i >> 3];
    const int j = (i & 7) >> 1;
    const u32 word = j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
    return __uint_as_float((i & 1) ? (word & 0xFFFF0000u) : (word << 16));
}
__device__ __forceinline__ ModelC16NV model_ld16(const ModelWNV& w, i64 c) {
    return {__ldg((const uint2*)w.codes + c), w.pair(c)};
}
__device__ __forceinline__ float model_get(const ModelC16NV& a, int i) {
    const u32 word = (i < 8) ? a.c.x : a.c.y;
    return model_nv_value((word >> (4 * (i & 7))) & 0xFu, a.q);
}

// The 16 x values of chunk c.
__device__ __forceinline__ void model_x16(const float* __restrict__ x, i64 c, float* xv) {
    const float4* x4 = (const float4*)x + 4 * c;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const float4 t = __ldg(x4 + q);
        xv[4 * q] = t.x;
        xv[4 * q + 1] = t.y;
        xv[4 * q + 2] = t.z;
        xv[4 * q + 3] = t.w;
    }
}

// The same with ReLU^2 applied to each value as model_relu2 does (r = fmaxf(v, 0); r * r):
// the down GEMV of the routed slots reads the up GEMV's output directly (XRELU2), with the
// bits of model_relu2 then the GEMV, one launch fewer per MoE layer.
// relu(v)^2 as model_relu2 computes it.
__device__ __forceinline__ float model_relu2_of(float v) {
    const float r = fmaxf(v, 0.0f);
    return r * r;
}
template <bool XRELU2>
__device__ __forceinline__ void model_x16r(const float* __restrict__ x, i64 c, float* xv) {
    model_x16(x, c, xv);
    if constexpr (XRELU2) {
#pragma unroll
        for (int i = 0; i < 16; ++i) xv[i] = model_relu2_of(xv[i]);
    }
}

// acc[r] += x[16 c + i] * chunk_r[i], i = 0..15 in order.
template <int R, typename C>
__device__ __forceinline__ void model_fma16(const float* xv, const C* ch, float* acc) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[r] = fmaf(xv[i], model_get(ch[r], i), acc[r]);
}

// NVFP4: decoding a weight with model_nv_value costs ~19 instructions (SASS), which would
// make the GEMV compute-bound. Instead each lane writes the 8 values of the positive codes
// (model_nv_value of codes 0..7 with the block's pair: the same bits) into its own column of
// a per-warp shared table (entry e of lane l at e * 32 + l: no bank conflicts whatever the
// codes), then per weight reads the value of the code's magnitude bits and moves the code's
// sign onto x: fmaf(-x, v, acc) is fmaf(x, -v, acc) bit for bit (the product's sign is the
// same; model_nv_value of code 8 + m is -(value of m)), so the same bits as the 16-entry
// table (session 8's, kept as model_gemv1_slots_nvfp4w_t16 for the `moe_slots_t1` bench)
// with half the table writes. Session 9's ncu profile: the slot GEMV is bound by the shared
// memory instructions (one STS and one LDS per weight then, 1.5 now).
#define GEMV1_NV_TABLE (8 * 32)
template <int R>
__device__ __forceinline__ void model_fma16(const float* xv, const ModelC16NV* ch, float* acc) {
    __shared__ float tbl[GEMV_WARPS * GEMV1_NV_TABLE];
    // Byte offset of this lane's column: the lane in bits 2..6, the warp's table in bits 10
    // and up, so an entry's offset m * 128 (bits 7..9) joins it with one OR.
    const u32 lane_off = (threadIdx.x >> 5) * (GEMV1_NV_TABLE * 4) + (threadIdx.x & 31) * 4;
    const char* tb = (const char*)tbl;
    // The table writes as immediate offsets from one address (entry e at col[32 e]).
    float* col = (float*)((char*)tbl + lane_off);
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int e = 0; e < 8; ++e) col[32 * e] = model_nv_value((u32)e, ch[r].q);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const u32 word = (i < 8) ? ch[r].c.x : ch[r].c.y;
            const int j = i & 7;
            const int sh = 4 * j - 7;
            const u32 pos = sh >= 0 ? (word >> sh) : (word << -sh);
            const float w = *(const float*)(tb + ((pos & 0x380u) | lane_off));
            // The code's sign bit (bit 4 j + 3) onto x's bit 31.
            const u32 sg = (word << (28 - 4 * j)) & 0x80000000u;
            const float xs = __uint_as_float(__float_as_uint(xv[i]) ^ sg);
            acc[r] = fmaf(xs, w, acc[r]);
        }
    }
}

// The 16-entry table form (the default until session 8: every code's value in the table,
// sign included). A bench variant (`moe_slots_t1`: model_gemv1_slots_nvfp4w_t16) with the
// default's bits. ModelWNV16 is ModelWNV read through it.
// ModelWNV under another name, so that model_ld16 / model_fma16 read it another way (TAG 1:
// ModelWNVP below, 2: ModelWNV16).
template <int TAG>
struct ModelWNVAs {
    ModelWNV v;
    __device__ __forceinline__ static ModelWNVAs at_base(const u8* base, i64 sf_off, i64 lut_off) {
        return {ModelWNV::at_base(base, sf_off, lut_off)};
    }
    __device__ __forceinline__ ModelWNVAs row(i64 n, i64 K) const { return {v.row(n, K)}; }
};
typedef ModelWNVAs<2> ModelWNV16;
struct ModelC16NV16 { uint2 c; float2 q; };
__device__ __forceinline__ ModelC16NV16 model_ld16(const ModelWNV16& w, i64 c) {
    return {__ldg((const uint2*)w.v.codes + c), w.v.pair(c)};
}
#define GEMV1_NV16_TABLE (16 * 32)
template <int R>
__device__ __forceinline__ void model_fma16(const float* xv, const ModelC16NV16* ch,
                                            float* acc) {
    __shared__ float tbl[GEMV_WARPS * GEMV1_NV16_TABLE];
    const u32 lane_off = (threadIdx.x >> 5) * (GEMV1_NV16_TABLE * 4) + (threadIdx.x & 31) * 4;
    const char* tb = (const char*)tbl;
    float* col = (float*)((char*)tbl + lane_off);
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int e = 0; e < 16; ++e) col[32 * e] = model_nv_value((u32)e, ch[r].q);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const u32 word = (i < 8) ? ch[r].c.x : ch[r].c.y;
            const int sh = 4 * (i & 7) - 7;
            const u32 pos = sh >= 0 ? (word >> sh) : (word << -sh);
            const float w = *(const float*)(tb + ((pos & 0x780u) | lane_off));
            acc[r] = fmaf(xv[i], w, acc[r]);
        }
    }
}

// NVFP4 with production numerics (bench only: `moe_slots_t1`'s "nvfp4p"; session 8, not yet
// run): per block the partial sum x . e2m1 in f32, then acc += partial * (sf / gs) once, instead
// of each weight's exact c * sf / gs. Not the reference's bits (the bench reports the max
// relative difference to the exact kernel). The E2M1 magnitude's f32 bits come from two PRMT
// byte-plane lookups per 4 codes (bits 31..24 and 23..16 of 0, .5, 1, 1.5, 2, 3, 4, 6) and one
// PRMT per weight assembling them (its low bytes zero by sign replication of a positive byte);
// the code's sign bit ORed into bit 31.
typedef ModelWNVAs<1> ModelWNVP;
struct ModelC16NVP { uint2 c; float q1; };
__device__ __forceinline__ ModelC16NVP model_ld16(const ModelWNVP& w, i64 c) {
    return {__ldg((const uint2*)w.v.codes + c), w.v.pair(c).x};
}
__device__ __forceinline__ u32 model_prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
template <int R>
__device__ __forceinline__ void model_fma16(const float* xv, const ModelC16NVP* ch, float* acc) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float part = 0.0f;
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            const u32 word = (h < 2) ? ch[r].c.x : ch[r].c.y;
            const u32 c16 = (word >> (16 * (h & 1))) & 0xFFFFu;
            const u32 sel = c16 & 0x7777u, sg = c16 & 0x8888u;
            const u32 r3 = model_prmt(0x3F3F3F00u, 0x40404040u, sel);
            const u32 r2 = model_prmt(0xC0800000u, 0xC0804000u, sel);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                // byte 3 <- r3.byte j, byte 2 <- r2.byte j, bytes 1, 0 <- sign of r3.byte j (0)
                const u32 s = ((4u + j) << 12) | ((u32)j << 8) | ((0xCu + j) << 4) | (0xCu + j);
                u32 bits = model_prmt(r2, r3, s);
                bits |= (sg << (28 - 4 * j)) & 0x80000000u;
                part = fmaf(xv[4 * h + j], __uint_as_float(bits), part);
            }
        }
        acc[r] = fmaf(part, ch[r].q1, acc[r]);
    }
}

// y[n] = x . w[n] (+ bias[n]) for one row x (K values), K % 16 == 0, x 16-byte aligned and
// every weight row aligned for its ld16 (f32 / bf16: 16 bytes, NVFP4 codes: 8). Warp = R
// consecutive output columns (the last warp's surplus columns load column N - 1 and store
// nothing); lane l walks chunks l, l + 32, l + 64, ... of each row, one fp32 FMA chain per row
// in chunk order, then the butterfly sum. Per lane two chunks of each row are loaded before
// their FMAs (past the last chunk: clamped to it and then skipped).
// Grid: ceil(N / (WB * R)); block: 32 * WB, WB <= GEMV_WARPS warps (the host takes fewer
// warps per block for a small N, so the warps spread over more SMs: the same bits, as every
// column's chunks and order stay the same).
//
// SPLIT (model_gemv1_*_split, for few long rows: the host's gemv1_split): the block's S warps
// share R columns; thread t of the block walks chunks t, t + 32 S, ... (the same per-thread
// chain), each warp's butterfly sum lands in shared memory and thread r adds the S warps'
// sums in warp order. Other bits than the one-warp form (the chunks of a chain differ), the
// same for every storage. Grid: ceil(N / R); block: 32 S.
// L2 prefetches of chunk c's weight bytes (model_gemv1_body's PF).
__device__ __forceinline__ void model_prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
__device__ __forceinline__ void model_pf16(const ModelWF32& w, i64 c) {
    model_prefetch_l2(w.p + 16 * c);
}
__device__ __forceinline__ void model_pf16(const ModelWBF16& w, i64 c) {
    model_prefetch_l2(w.p + 16 * c);
}
__device__ __forceinline__ void model_pf16(const ModelWNV& w, i64 c) {
    model_prefetch_l2(w.codes + 8 * c);
    model_prefetch_l2(w.sf + c);
}

// PF (the kernels that begin with DUET_PDL_DEFERRED): the thread's first two chunks of each of
// its rows are prefetched into L2 before DUET_PDL_ENTRY, so that under programmatic dependent
// launch the first weights stream in while the kernel before (which writes x, and y with ACC)
// finishes. Weights only: x, bias (constant too, but cheap) and y are touched after the wait.
// The same loads and FMAs as without it.
template <int R, typename W, int CH = 2, bool SPLIT = false, bool XRELU2 = false,
          bool ACC = false, bool PF = false>
__device__ __forceinline__ void model_gemv1_body(const float* __restrict__ x, const W w,
                                                 const float* __restrict__ bias,
                                                 float* __restrict__ y, i64 N, i64 K,
                                                 i32 has_bias) {
    typedef decltype(model_ld16(w, 0)) C;
    const int lane = threadIdx.x & 31;
    // This thread's first chunk and the stride between its chunks.
    const i64 L = SPLIT ? (i64)threadIdx.x : (i64)lane;
    const i64 LS = SPLIT ? (i64)blockDim.x : 32;
    const i64 n0 = SPLIT ? (i64)blockIdx.x * R
                         : ((i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
    if (n0 >= N) return;
    W wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = w.row(min(n0 + r, N - 1), K);
    if constexpr (PF) {
        const i64 nc0 = K >> 4;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (L < nc0) model_pf16(wr[r], L);
            if (L + LS < nc0) model_pf16(wr[r], L + LS);
        }
        DUET_PDL_ENTRY();
    }
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    const i64 nc = K >> 4;
    if constexpr (CH == 2) {
        // Warp-uniform trip count (the __syncwarp below needs every lane): a lane past the
        // last chunk loads the last chunk and skips its FMAs.
        for (i64 c0 = 0; c0 < nc; c0 += 2 * LS) {
            if (SPLIT && c0 + 2 * LS <= nc) {
                // A whole trip (every chunk of it exists): no conditions, so ptxas keeps the
                // loads ahead of the FMAs.
                float xa[16], xb[16];
                model_x16r<XRELU2>(x, c0 + L, xa);
                model_x16r<XRELU2>(x, c0 + L + LS, xb);
                C a[R], b[R];
#pragma unroll
                for (int r = 0; r < R; ++r) a[r] = model_ld16(wr[r], c0 + L);
#pragma unroll
                for (int r = 0; r < R; ++r) b[r] = model_ld16(wr[r], c0 + L + LS);
                __syncwarp();
                model_fma16<R>(xa, a, acc);
                model_fma16<R>(xb, b, acc);
                continue;
            }
            const i64 c = c0 + L;
            const bool one = c < nc, two = c + LS < nc;
            const i64 ca = one ? c : nc - 1, cb = two ? c + LS : nc - 1;
            // Every load of both chunks first.
            float xa[16], xb[16];
            model_x16r<XRELU2>(x, ca, xa);
            model_x16r<XRELU2>(x, cb, xb);
            C a[R], b[R];
#pragma unroll
            for (int r = 0; r < R; ++r) a[r] = model_ld16(wr[r], ca);
#pragma unroll
            for (int r = 0; r < R; ++r) b[r] = model_ld16(wr[r], cb);
            // A code-motion fence: ptxas would otherwise sink loads between the FMAs (fewer
            // registers, one load's latency after another).
            __syncwarp();
            if (one) model_fma16<R>(xa, a, acc);
            if (two) model_fma16<R>(xb, b, acc);
        }
    } else {
        // One chunk per lane per trip (fewer registers; the same chunks in the same order).
        for (i64 c0 = 0; c0 < nc; c0 += LS) {
            const i64 c = c0 + L;
            const bool one = c < nc;
            const i64 ca = one ? c : nc - 1;
            float xa[16];
            model_x16r<XRELU2>(x, ca, xa);
            C a[R];
#pragma unroll
            for (int r = 0; r < R; ++r) a[r] = model_ld16(wr[r], ca);
            __syncwarp();
            if (one) model_fma16<R>(xa, a, acc);
        }
    }
    if constexpr (SPLIT) {
        __shared__ float part[GEMV_WARPS * 4];
        const int wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float v = acc[r];
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(DUET_FULL_MASK, v, o);
            if (lane == 0) part[wid * R + r] = v;
        }
        __syncthreads();
        if (threadIdx.x < R) {
            const int r = threadIdx.x;
            float v = part[r];
            for (int q = 1; q < nw; ++q) v += part[q * R + r];
            const i64 n = n0 + r;
            if (n < N) y[n] = has_bias ? v + bias[n] : v;
        }
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float v = acc[r];
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(DUET_FULL_MASK, v, o);
            const i64 n = n0 + r;
            if (lane == 0 && n < N) {
                const float o = has_bias ? v + bias[n] : v;
                // ACC: y += the product, as model_axpy with a = 1 adds it (1 * o is exact).
                y[n] = ACC ? y[n] + o : o;
            }
        }
    }
}

// Columns per warp: enough bytes in flight per lane for each storage.
#define GEMV1_R_F32 2
#define GEMV1_R_BF16 2
#define GEMV1_R_NV 4

// The one-row kernels (model_gemv1_* and _split: y = W . x (+ bias); _relu_add: y += W .
// relu^2(x) (+ bias), as model_relu2, the GEMV and model_axpy with a = 1 give it, for
// `--engine-fuse`'s shared expert; never split). All prefetch their first weights before the
// PDL wait (PF; they begin with DUET_PDL_DEFERRED). VIEW(w) builds the weight view from the
// kernel's weight arguments.
#define MODEL_GEMV1(NAME, R, VIEW_T, WARGS, VIEW, SPLIT, XR, ACC)                                \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)                               \
    NAME(const float* __restrict__ x, WARGS, const float* __restrict__ bias,                    \
         float* __restrict__ y, i64 N, i64 K, i32 has_bias) {                                   \
        DUET_PDL_DEFERRED(); /* in model_gemv1_body (PF) */                                     \
        model_gemv1_body<R, VIEW_T, 2, SPLIT, XR, ACC, true>(x, VIEW, bias, y, N, K, has_bias); \
    }
#define MODEL_GEMV1_F32(NAME, SPLIT, XR, ACC)                                                   \
    MODEL_GEMV1(NAME, GEMV1_R_F32, ModelWF32, const float* __restrict__ w, ModelWF32{w}, SPLIT, \
                XR, ACC)
#define MODEL_GEMV1_BF16(NAME, SPLIT, XR, ACC)                                                  \
    MODEL_GEMV1(NAME, GEMV1_R_BF16, ModelWBF16, const u16* __restrict__ w, ModelWBF16{w},       \
                SPLIT, XR, ACC)
#define MODEL_GEMV1_NV(NAME, SPLIT, XR, ACC)                                                    \
    MODEL_GEMV1(NAME, GEMV1_R_NV, ModelWNV,                                                     \
                const u8* __restrict__ w MODEL_COMMA i64 sf_off MODEL_COMMA i64 lut_off,        \
                ModelWNV::at_base(w, sf_off, lut_off), SPLIT, XR, ACC)
#define MODEL_COMMA ,
MODEL_GEMV1_F32(model_gemv1_f32, false, false, false)
MODEL_GEMV1_BF16(model_gemv1_bf16w, false, false, false)
MODEL_GEMV1_NV(model_gemv1_nvfp4w, false, false, false)
MODEL_GEMV1_F32(model_gemv1_f32_split, true, false, false)
MODEL_GEMV1_BF16(model_gemv1_bf16w_split, true, false, false)
MODEL_GEMV1_NV(model_gemv1_nvfp4w_split, true, false, false)
MODEL_GEMV1_F32(model_gemv1_f32_relu_add, false, true, true)
MODEL_GEMV1_BF16(model_gemv1_bf16w_relu_add, false, true, true)
MODEL_GEMV1_NV(model_gemv1_nvfp4w_relu_add, false, true, true)

// Sum of `v` over the block (blockDim.x a multiple of 32, <= 1024); every thread gets it.
__device__ __forceinline__ float model_block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(DUET_FULL_MASK, v, o);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; ++i) s += red[i];
    return s;
}

__device__ __forceinline__ float model_block_max(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(DUET_FULL_MASK, v, o));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float m = red[0];
    for (int i = 1; i < nw; ++i) m = fmaxf(m, red[i]);
    return m;
}

// x (rows, n), w (n,), out (rows, n). Grid: rows; block: 256 (NORM_THREADS). Thread t sums
// x[i]^2 for i = t, t + 256, ... in that order (one fmaf chain), then the block sum
// (model_block_sum), then out = x * rs * w.
// model_rmsnorm (the default since session 9) loads a thread's (at most NORM_REG) values of x
// and w before any arithmetic and keeps them in registers, so the row costs one round of load
// latency instead of one per element (session 9's ncu profile of an engine step: the loop form
// took 14.5 us for one 4096 row on one SM, every load waiting for the one before); rows over
// 256 * NORM_REG take the loop. model_rmsnorm_loop is the loop form for every n (the default
// until session 8, kept as the `norms_super` bench's reference): the same FMAs in the same
// order, so the same bits.
#define NORM_REG 16
__device__ __forceinline__ void model_rmsnorm_loop_row(const float* __restrict__ xr,
                                                       const float* __restrict__ w,
                                                       float* __restrict__ o, i64 n, float eps,
                                                       float* red) {
    float ss = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = model_block_sum(ss, red);
    const float rs = 1.0f / sqrtf(ss / (float)n + eps);
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) o[i] = xr[i] * rs * w[i];
}
extern "C" __global__ void model_rmsnorm_loop(const float* __restrict__ x,
                                              const float* __restrict__ w,
                                              float* __restrict__ out, i64 rows, i64 n,
                                              float eps) {
    DUET_PDL_ENTRY();
    __shared__ float red[32];
    const i64 r = blockIdx.x;
    if (r >= rows) return;
    model_rmsnorm_loop_row(x + r * n, w, out + r * n, n, eps, red);
}
extern "C" __global__ void model_rmsnorm(const float* __restrict__ x, const float* __restrict__ w,
                                         float* __restrict__ out, i64 rows, i64 n, float eps) {
    DUET_PDL_ENTRY();
    __shared__ float red[32];
    const i64 r = blockIdx.x;
    if (r >= rows) return;
    const float* xr = x + r * n;
    const i64 nt = blockDim.x;
    if (n > NORM_REG * nt) {
        model_rmsnorm_loop_row(xr, w, out + r * n, n, eps, red);
        return;
    }
    float v[NORM_REG], wv[NORM_REG];
#pragma unroll
    for (int j = 0; j < NORM_REG; ++j) {
        const i64 i = threadIdx.x + j * nt;
        v[j] = i < n ? __ldg(xr + i) : 0.0f;
        wv[j] = i < n ? __ldg(w + i) : 0.0f;
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_REG; ++j)
        if (threadIdx.x + j * nt < n) ss = fmaf(v[j], v[j], ss);
    ss = model_block_sum(ss, red);
    const float rs = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll
    for (int j = 0; j < NORM_REG; ++j) {
        const i64 i = threadIdx.x + j * nt;
        if (i < n) out[r * n + i] = v[j] * rs * wv[j];
    }
}

// The decode engine's residual add and the next norm in one launch (GpuDevice::add_rmsnorm,
// `--engine-fuse`): h[i] = h[i] + 1 * x[i] (model_axpy's sum: the product is exact), then
// out = model_rmsnorm(h) * w with the same per-thread order (i = tid, tid + 256, ...), so the
// same bits as model_axpy then model_rmsnorm. One row of n <= 256 * NORM_REG (the host checks);
// grid 1, block 256. Every load first, as in model_rmsnorm.
extern "C" __global__ void model_add_rmsnorm(float* __restrict__ h, const float* __restrict__ x,
                                             const float* __restrict__ w,
                                             float* __restrict__ out, i64 n, float eps) {
    DUET_PDL_ENTRY();
    __shared__ float red[32];
    const i64 nt = blockDim.x;
    float v[NORM_REG], wv[NORM_REG];
#pragma unroll
    for (int j = 0; j < NORM_REG; ++j) {
        const i64 i = threadIdx.x + j * nt;
        const bool in = i < n;
        const float hh = in ? h[i] : 0.0f, xx = in ? __ldg(x + i) : 0.0f;
        wv[j] = in ? __ldg(w + i) : 0.0f;
        v[j] = hh + 1.0f * xx;
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_REG; ++j) {
        const i64 i = threadIdx.x + j * nt;
        if (i < n) {
            h[i] = v[j];
            ss = fmaf(v[j], v[j], ss);
        }
    }
    ss = model_block_sum(ss, red);
    const float rs = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll
    for (int j = 0; j < NORM_REG; ++j) {
        const i64 i = threadIdx.x + j * nt;
        if (i < n) out[i] = v[j] * rs * wv[j];
    }
}

// Mamba-2 gated RMSNorm (norm_before_gate = False): x, z (rows, d), w (d,), groups of `group`
// channels. Grid: rows * (d / group); block: 256. Thread t: g = x * silu(z) for i = t, t + 256,
// ... of its group, one fmaf chain of g^2 in that order, the block sum, out = g * rs * w.
// model_gated_rmsnorm (default since session 9) loads a thread's (at most GATED_REG) x, z, w
// first and keeps g in registers (groups over 256 * GATED_REG take the loop);
// model_gated_rmsnorm_loop is the loop form (the default until session 8, the `norms_super`
// reference): the same operations in the same order, so the same bits.
#define GATED_REG 8
__device__ __forceinline__ void model_gated_loop_group(const float* __restrict__ x,
                                                       const float* __restrict__ z,
                                                       const float* __restrict__ w,
                                                       float* __restrict__ out, i64 base,
                                                       i64 c0, i64 group, float eps,
                                                       float* red) {
    float ss = 0.0f;
    for (i64 i = threadIdx.x; i < group; i += blockDim.x) {
        const float zz = z[base + i];
        const float g = x[base + i] * (zz / (1.0f + expf(-zz)));
        out[base + i] = g;
        ss = fmaf(g, g, ss);
    }
    ss = model_block_sum(ss, red);
    const float rs = 1.0f / sqrtf(ss / (float)group + eps);
    // Each thread rescales the elements it wrote itself.
    for (i64 i = threadIdx.x; i < group; i += blockDim.x)
        out[base + i] = out[base + i] * rs * w[c0 + i];
}
// The block's group: x, z rows offset `base`, w offset c0.
#define MODEL_GATED_GROUP                                                                     \
    __shared__ float red[32];                                                                 \
    const i64 ng = d / group;                                                                 \
    const i64 b = blockIdx.x;                                                                 \
    if (b >= rows * ng) return;                                                               \
    const i64 r = b / ng, c0 = (b % ng) * group;                                              \
    const i64 base = r * d + c0, nt = blockDim.x;
#define MODEL_GATED_ARGS                                                                      \
    const float* __restrict__ x, const float* __restrict__ z, const float* __restrict__ w,    \
        float* __restrict__ out, i64 rows, i64 d, i64 group, float eps
extern "C" __global__ void model_gated_rmsnorm_loop(MODEL_GATED_ARGS) {
    DUET_PDL_ENTRY();
    MODEL_GATED_GROUP
    (void)nt;
    model_gated_loop_group(x, z, w, out, base, c0, group, eps, red);
}
extern "C" __global__ void model_gated_rmsnorm(MODEL_GATED_ARGS) {
    DUET_PDL_ENTRY();
    MODEL_GATED_GROUP
    if (group > GATED_REG * nt) {
        model_gated_loop_group(x, z, w, out, base, c0, group, eps, red);
        return;
    }
    float xv[GATED_REG], zv[GATED_REG], wv[GATED_REG];
#pragma unroll
    for (int j = 0; j < GATED_REG; ++j) {
        const i64 i = threadIdx.x + j * nt;
        const bool in = i < group;
        xv[j] = in ? __ldg(x + base + i) : 0.0f;
        zv[j] = in ? __ldg(z + base + i) : 0.0f;
        wv[j] = in ? __ldg(w + c0 + i) : 0.0f;
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < GATED_REG; ++j) {
        const float zz = zv[j];
        xv[j] = xv[j] * (zz / (1.0f + expf(-zz)));
        if (threadIdx.x + j * nt < group) ss = fmaf(xv[j], xv[j], ss);
    }
    ss = model_block_sum(ss, red);
    const float rs = 1.0f / sqrtf(ss / (float)group + eps);
#pragma unroll
    for (int j = 0; j < GATED_REG; ++j) {
        const i64 i = threadIdx.x + j * nt;
        if (i < group) out[base + i] = xv[j] * rs * wv[j];
    }
}

extern "C" __global__ void model_relu2(const float* __restrict__ x, float* __restrict__ out,
                                       i64 n) {
    DUET_PDL_ENTRY();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x)
        out[i] = model_relu2_of(x[i]);
}

#define ATT_CHUNK 1024
#define ATT_THREADS 128

// q (t, nq * hd); keys, vals (len, nkv * hd); out (t, nq * hd). Query row i sits at position
// p0 + i and sees keys 0..=p0+i; head h reads KV head h / (nq / nkv). Grid: t * nq; block: 128;
// dynamic shared memory: hd floats (q) + hd floats (accumulators).
__device__ __forceinline__ void model_attention_body(const float* __restrict__ q,
                                                     const float* __restrict__ keys,
                                                     const float* __restrict__ vals,
                                                     float* __restrict__ out, i64 t, i64 nq,
                                                     i64 nkv, i64 hd, i64 p0, float scale) {
    extern __shared__ float dyn[];
    float* qs = dyn;
    float* acc = dyn + hd;
    __shared__ float sc[ATT_CHUNK];
    __shared__ float red[32];
    const i64 b = blockIdx.x;
    if (b >= t * nq) return;
    const i64 i = b / nq, h = b % nq;
    const i64 g = h / (nq / nkv);
    const i64 kvd = nkv * hd;
    for (i64 d = threadIdx.x; d < hd; d += blockDim.x) {
        qs[d] = q[i * nq * hd + h * hd + d];
        acc[d] = 0.0f;
    }
    __syncthreads();
    const i64 n = p0 + i + 1;
    float m = __int_as_float(0xff800000), l = 0.0f;
    for (i64 c0 = 0; c0 < n; c0 += ATT_CHUNK) {
        const i64 cn = min((i64)ATT_CHUNK, n - c0);
        float lmax = __int_as_float(0xff800000);
        for (i64 j = threadIdx.x; j < cn; j += blockDim.x) {
            const float* kr = keys + (c0 + j) * kvd + g * hd;
            float s = 0.0f;
            for (i64 d = 0; d < hd; ++d) s = fmaf(qs[d], kr[d], s);
            s = s * scale;
            sc[j] = s;
            lmax = fmaxf(lmax, s);
        }
        const float cmax = model_block_max(lmax, red);
        const float mn = fmaxf(m, cmax);
        float lsum = 0.0f;
        for (i64 j = threadIdx.x; j < cn; j += blockDim.x) {
            const float p = expf(sc[j] - mn);
            sc[j] = p;
            lsum += p;
        }
        const float csum = model_block_sum(lsum, red);  // synchronises: sc[] is complete
        const float alpha = expf(m - mn);  // 0 on the first chunk (m = -inf)
        l = l * alpha + csum;
        for (i64 d = threadIdx.x; d < hd; d += blockDim.x) {
            float a = acc[d] * alpha;
            for (i64 j = 0; j < cn; ++j) a = fmaf(sc[j], vals[(c0 + j) * kvd + g * hd + d], a);
            acc[d] = a;
        }
        m = mn;
        __syncthreads();
    }
    for (i64 d = threadIdx.x; d < hd; d += blockDim.x)
        out[i * nq * hd + h * hd + d] = acc[d] / l;
}

extern "C" __global__ void __launch_bounds__(ATT_THREADS)
model_attention(const float* __restrict__ q, const float* __restrict__ keys,
                const float* __restrict__ vals, float* __restrict__ out, i64 t, i64 nq, i64 nkv,
                i64 hd, i64 p0, float scale) {
    DUET_PDL_ENTRY();
    model_attention_body(q, keys, vals, out, t, nq, nkv, hd, p0, scale);
}

// model_attention with p0 read from device memory (the decode engine's CUDA graphs: the
// position changes every replay).
extern "C" __global__ void __launch_bounds__(ATT_THREADS)
model_attention_pos(const float* __restrict__ q, const float* __restrict__ keys,
                    const float* __restrict__ vals, float* __restrict__ out, i64 t, i64 nq,
                    i64 nkv, i64 hd, const i64* __restrict__ p0, float scale) {
    DUET_PDL_ENTRY();
    model_attention_body(q, keys, vals, out, t, nq, nkv, hd, *p0, scale);
}

// cache[(*pos) * n + i] = src[i], i < n: a KV row stored at the device position (the decode
// engine's CUDA graphs).
extern "C" __global__ void model_kv_store(float* __restrict__ cache, const float* __restrict__ src,
                                          i64 n, const i64* __restrict__ pos) {
    DUET_PDL_ENTRY();
    const i64 base = *pos * n;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x)
        cache[base + i] = src[i];
}

// The decode engine's vector ops (gpu/src/engine.rs), grid-stride over n:
//   mode 0: y[i] = y[i] + a * x[i]   (the product rounded before the add: --fmad=false, as the
//                                     reference's `*o += a * v`; a = 1 is the residual add)
//   mode 1: y[i] = x[i]
//   mode 2: y[i] = a                 (x is not read)
extern "C" __global__ void model_axpy(float* __restrict__ y, const float* __restrict__ x, float a,
                                      i64 n, int mode) {
    DUET_PDL_ENTRY();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x) {
        if (mode == 0) {
            y[i] = y[i] + a * x[i];
        } else if (mode == 1) {
            y[i] = x[i];
        } else {
            y[i] = a;
        }
    }
}

// The routed experts of one token (the decode engine, gpu/src/engine.rs): slot s = blockIdx.y
// multiplies its expert's weight W_s (N, K), at the address ws[s] (NVFP4: its scale bytes
// sf_off and its table lut_off bytes further), by x + s * x_stride into y + s * N:
// model_gemv_body (or model_gemv1_body) with one row, so each slot gets the per-expert
// launch's bits. Grid: (ceil(N / (GEMV_WARPS * R)), slots).
// With `ids` (the router's top-k on the device), slot s takes ws[ids[s]] from a table of every
// expert's address instead of ws[s] (the decode engine's CUDA graphs).
__device__ __forceinline__ u64 model_slot_weight(const u64* __restrict__ ws,
                                                 const i32* __restrict__ ids, i64 s) {
    return ids ? ws[ids[s]] : ws[s];
}

extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)
model_gemv_slots_f32(const float* __restrict__ x, i64 x_stride, const u64* __restrict__ ws,
                     const i32* __restrict__ ids, float* __restrict__ y, i64 N, i64 K,
                     i32 vec4) {
    DUET_PDL_ENTRY();
    const i64 s = blockIdx.y;
    model_gemv_body(x + s * x_stride, ModelWF32{(const float*)model_slot_weight(ws, ids, s)},
                    (const float*)0, y + s * N, 1, N, K, 0, vec4);
}

extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)
model_gemv_slots_bf16w(const float* __restrict__ x, i64 x_stride, const u64* __restrict__ ws,
                       const i32* __restrict__ ids, float* __restrict__ y, i64 N, i64 K,
                       i32 vec4) {
    DUET_PDL_ENTRY();
    const i64 s = blockIdx.y;
    model_gemv_body(x + s * x_stride, ModelWBF16{(const u16*)model_slot_weight(ws, ids, s)},
                    (const float*)0, y + s * N, 1, N, K, 0, vec4);
}

extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)
model_gemv_slots_nvfp4w(const float* __restrict__ x, i64 x_stride, const u64* __restrict__ ws,
                        const i32* __restrict__ ids, i64 sf_off, i64 lut_off,
                        float* __restrict__ y, i64 N, i64 K, i32 vec4) {
    DUET_PDL_ENTRY();
    const i64 s = blockIdx.y;
    const u8* base = (const u8*)model_slot_weight(ws, ids, s);
    model_gemv_body(x + s * x_stride, ModelWNV::at_base(base, sf_off, lut_off),
                    (const float*)0, y + s * N, 1, N, K, 0, vec4);
}

// The slots on model_gemv1_body (K % 16 == 0, aligned rows); grid (ceil(N / (8 R)), slots).
// The _relu forms read x through ReLU^2 (XRELU2 above: the engine's fused routed experts,
// `--engine-fuse`; session 9, not yet run on the H200).
#define MODEL_GEMV1_SLOTS(NAME, VIEW, T, R, XR)                                                 \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS)                               \
    NAME(const float* __restrict__ x, i64 x_stride, const u64* __restrict__ ws,                 \
         const i32* __restrict__ ids, float* __restrict__ y, i64 N, i64 K) {                    \
        DUET_PDL_ENTRY();                                                                       \
        const i64 s = blockIdx.y;                                                               \
        model_gemv1_body<R, VIEW, 2, false, XR>(x + s * x_stride,                               \
                                                VIEW{(const T*)model_slot_weight(ws, ids, s)},  \
                                                (const float*)0, y + s * N, N, K, 0);           \
    }
MODEL_GEMV1_SLOTS(model_gemv1_slots_f32, ModelWF32, float, GEMV1_R_F32, false)
MODEL_GEMV1_SLOTS(model_gemv1_slots_bf16w, ModelWBF16, u16, GEMV1_R_BF16, false)
MODEL_GEMV1_SLOTS(model_gemv1_slots_f32_relu, ModelWF32, float, GEMV1_R_F32, true)
MODEL_GEMV1_SLOTS(model_gemv1_slots_bf16w_relu, ModelWBF16, u16, GEMV1_R_BF16, true)

// The NVFP4 slots on model_gemv1_body over view VIEW (ModelWNV: exact; ModelWNVP: production
// numerics), R columns per warp, CH chunks per lane per trip, MINB blocks per SM (a register
// cap). model_gemv1_slots_nvfp4w is the default; the others are for the `moe_slots_t1` bench
// preset only (session 8: written, compiled, not yet run): the exact ones take the same chunks
// in the same order per column, so they give the default's bits. LB: the __launch_bounds__
// arguments (with a minimum of blocks per SM only where it caps registers: even a minimum of
// 1 changes ptxas' allocation).
#define MODEL_GEMV1_SLOTS_NVX(NAME, VIEW, R, CH, LB, XR)                                        \
    extern "C" __global__ void __launch_bounds__ LB                                             \
    NAME(const float* __restrict__ x, i64 x_stride, const u64* __restrict__ ws,                 \
         const i32* __restrict__ ids, i64 sf_off, i64 lut_off, float* __restrict__ y, i64 N,    \
         i64 K) {                                                                               \
        DUET_PDL_ENTRY();                                                                       \
        const i64 s = blockIdx.y;                                                               \
        const u8* base = (const u8*)model_slot_weight(ws, ids, s);                              \
        model_gemv1_body<R, VIEW, CH, false, XR>(x + s * x_stride,                              \
                                                 VIEW::at_base(base, sf_off, lut_off),          \
                                                 (const float*)0, y + s * N, N, K, 0);          \
    }
#define MODEL_GEMV1_SLOTS_NV(NAME, VIEW, R, CH, LB) MODEL_GEMV1_SLOTS_NVX(NAME, VIEW, R, CH, LB, false)
#define MODEL_GEMV1_SLOTS_NV_VARIANT(NAME, R, CH, MINB)                                         \
    MODEL_GEMV1_SLOTS_NV(NAME, ModelWNV, R, CH, (32 * GEMV_WARPS, MINB))
MODEL_GEMV1_SLOTS_NV(model_gemv1_slots_nvfp4w, ModelWNV, GEMV1_R_NV, 2, (32 * GEMV_WARPS))
MODEL_GEMV1_SLOTS_NVX(model_gemv1_slots_nvfp4w_relu, ModelWNV, GEMV1_R_NV, 2, (32 * GEMV_WARPS),
                      true)
// The production-numerics form (ModelWNVP above): not the reference's bits.
MODEL_GEMV1_SLOTS_NV(model_gemv1_slots_nvfp4p, ModelWNVP, GEMV1_R_NV, 2, (32 * GEMV_WARPS))
MODEL_GEMV1_SLOTS_NV(model_gemv1_slots_nvfp4w_t16, ModelWNV16, GEMV1_R_NV, 2, (32 * GEMV_WARPS))
MODEL_GEMV1_SLOTS_NV_VARIANT(model_gemv1_slots_nvfp4w_r4c1, 4, 1, 1)
MODEL_GEMV1_SLOTS_NV_VARIANT(model_gemv1_slots_nvfp4w_r4c1lb3, 4, 1, 3)
MODEL_GEMV1_SLOTS_NV_VARIANT(model_gemv1_slots_nvfp4w_r2, 2, 2, 1)
MODEL_GEMV1_SLOTS_NV_VARIANT(model_gemv1_slots_nvfp4w_r2lb3, 2, 2, 3)
MODEL_GEMV1_SLOTS_NV_VARIANT(model_gemv1_slots_nvfp4w_r2c1lb4, 2, 1, 4)

// ---- The routed slots' NVFP4 GEMV with its weights staged in shared memory (session 11) ----
// model_gemv1_slots_nvfp4w gives a warp one trip per 64 chunks of its 4 columns: every load,
// then every FMA, so a warp's DRAM latency and its decode work never overlap, and at ~22%
// occupancy (128 registers) the SM idles in between (session 10: ~67 us a layer for ~18 us of
// bytes, about half issue efficiency). model_gemv1_slots_nvfp4w_pipe<S>: persistent blocks
// walk units (a group of SLOTP_ROWS = 32 columns of one slot, times a slice of 64 chunks of K)
// through a ring of S shared-memory stages that cp.async fills (16-byte pieces, L2 only, no
// registers held), S - 1 units ahead, so the next units' bytes stream in while the warps
// decode this one. A stage holds the slice's codes and its x (lane-major, as the _xs kernel
// above); a group's scale bytes and its expert's pairs come with its first slice, into a ring
// of S groups. Block b takes groups b, b + gridDim.x, ... (group g: slot g / G, columns
// 32 (g % G) on, G = ceil(N / 32)). Warp w computes columns 4 w .. 4 w + 3 of the group, lane
// l chunks l, l + 32, l + 64, ... of each in that order with model_fma16's table and FMAs,
// then the butterfly: the bits of model_gemv1_slots_nvfp4w (and of _relu with XRELU2: ReLU²
// applied to x as it is read from shared memory).
// Needs K % 32 == 0 (16-byte pieces: the host checks), 16-byte aligned weight buffers and x
// rows, blocks of 32 * GEMV_WARPS threads. Dynamic shared memory: S * (32 * 512 + 4096 +
// round16(32 * K / 16) + 2048) bytes (slotp_smem on the host). Session 11 call 3 ran the
// first version (64-bit divisions per unit, x and pairs from global memory): same bits,
// chain 83.9 us against the default's 67.2.
#define SLOTP_ROWS (GEMV_WARPS * GEMV1_R_NV)
#define SLOTP_CHUNKS 64
#define SLOTP_SLICE (SLOTP_CHUNKS * 8)
// ---- x and the table of pairs from shared memory (session 11, call 4's ncu) ----
// ncu on model_gemv1_slots_nvfp4w: L1 is the bottleneck (memory more utilised than compute,
// issue every 1.7 cycles with 1.3 eligible warps of 3.7), and 36% of the global sectors it
// moves are excess: lane l reads x[16 c .. 16 c + 15] of its chunk c = c0 + l as four 16-byte
// loads 64 bytes apart (half of each sector used), and the pair of each chunk's scale byte
// is a random 8-byte gather from the matrix's 2 KB table. Here both come from shared
// memory: x stored lane-major (float4 q of chunk c at (c / 32) * 128 + q * 32 + c % 32, so the
// 32 lanes' q-th float4 of chunks c0 .. c0 + 31 are 512 contiguous bytes) and the 256 pairs.
// The same values (ReLU² applied while staging for XRELU2), chunks and FMAs: the same bits.
__device__ __forceinline__ i64 model_xs_index(i64 c, int q) {
    return (c >> 5) * 128 + q * 32 + (c & 31);
}
template <bool XRELU2>
__device__ __forceinline__ float4 model_relu2_4(float4 v) {
    if constexpr (XRELU2) {
        v.x = model_relu2_of(v.x);
        v.y = model_relu2_of(v.y);
        v.z = model_relu2_of(v.z);
        v.w = model_relu2_of(v.w);
    }
    return v;
}
__device__ __forceinline__ void model_xs16(const float4* xs4, i64 c, float* xv) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const float4 t = xs4[model_xs_index(c, q)];
        xv[4 * q] = t.x;
        xv[4 * q + 1] = t.y;
        xv[4 * q + 2] = t.z;
        xv[4 * q + 3] = t.w;
    }
}
// model_gemv1_slots_nvfp4w_xs: model_gemv1_slots_nvfp4w (R = 4 columns a warp, two chunks a
// lane a trip, the same bits) with x and the pairs staged per block. The first trip's code and
// scale bytes are loaded before the staging so that they are in flight during it.
// Dynamic shared memory: ceil(K / 512) * 2048 bytes of x plus 2048 of pairs (model_xs_smem).
// C: the chunk type model_fma16 decodes ({codes, pair}): ModelC16NV (the 8-entry table, the
// sign moved onto x) or ModelC16NV16 (the 16-entry signed table: _xs3_t16, the same bits).
template <bool XRELU2, typename C = ModelC16NV, int R = GEMV1_R_NV>
__device__ __forceinline__ void model_slots_xs_body(const float* __restrict__ x, i64 x_stride,
                                                    const u64* __restrict__ ws,
                                                    const i32* __restrict__ ids, i64 sf_off,
                                                    i64 lut_off, float* __restrict__ y, i64 N,
                                                    i64 K) {
    extern __shared__ __align__(16) u8 xs_smem[];
    const i64 nc = K >> 4;
    float4* xs4 = (float4*)xs_smem;
    float2* luts = (float2*)(xs_smem + ((nc + 31) >> 5) * 2048);
    const int tid = threadIdx.x, lane = tid & 31;
    const i64 s = blockIdx.y;
    const u8* base = (const u8*)model_slot_weight(ws, ids, s);
    const i64 n0 = ((i64)blockIdx.x * (blockDim.x >> 5) + (tid >> 5)) * R;
    const i64 nl = min(n0, N - 1);
    const uint2* crow[R];
    const u8* srow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const i64 n = min(nl + r, N - 1);
        crow[r] = (const uint2*)(base + n * (K >> 1));
        srow[r] = base + sf_off + n * nc;
    }
    // A trip's raw bytes: chunks c0 + lane and c0 + lane + 32 (clamped to the last chunk).
    uint2 ca[R], cb[R];
    u32 sa[R], sb[R];
    auto load = [&](i64 c0) {
        const i64 a = min(c0 + lane, nc - 1), bb = min(c0 + lane + 32, nc - 1);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            ca[r] = __ldg(crow[r] + a);
            cb[r] = __ldg(crow[r] + bb);
            sa[r] = __ldg(srow[r] + a);
            sb[r] = __ldg(srow[r] + bb);
        }
    };
    load(0);
    // Stage x (lane-major) and the pairs; every warp joins the barrier.
    const float4* xg = (const float4*)(x + s * x_stride);
    for (i64 i = tid; i < 4 * nc; i += blockDim.x)
        xs4[model_xs_index(i >> 2, (int)(i & 3))] = model_relu2_4<XRELU2>(__ldg(xg + i));
    const float2* lut = (const float2*)(base + lut_off);
    for (int i = tid; i < 256; i += blockDim.x) luts[i] = __ldg(lut + i);
    __syncthreads();
    if (n0 >= N) return;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    for (i64 c0 = 0;;) {
        __syncwarp();
        const i64 c = c0 + lane;
        if (c < nc) {
            float xv[16];
            model_xs16(xs4, c, xv);
            C ch[R];
#pragma unroll
            for (int r = 0; r < R; ++r) ch[r] = {ca[r], luts[sa[r]]};
            model_fma16<R>(xv, ch, acc);
        }
        if (c + 32 < nc) {
            float xv[16];
            model_xs16(xs4, c + 32, xv);
            C ch[R];
#pragma unroll
            for (int r = 0; r < R; ++r) ch[r] = {cb[r], luts[sb[r]]};
            model_fma16<R>(xv, ch, acc);
        }
        c0 += 64;
        if (c0 >= nc) break;
        load(c0);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float v = acc[r];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(DUET_FULL_MASK, v, o);
        const i64 n = n0 + r;
        if (lane == 0 && n < N) y[s * N + n] = v;
    }
}
// LB: the __launch_bounds__ arguments (_xs3: three blocks an SM, 85 registers); C and R:
// model_slots_xs_body's chunk type and columns a warp.
#define MODEL_GEMV1_SLOTS_XS_CR(NAME, XR, LB, C, R)                                             \
    extern "C" __global__ void __launch_bounds__ LB                                             \
    NAME(const float* __restrict__ x, i64 x_stride, const u64* __restrict__ ws,                 \
         const i32* __restrict__ ids, i64 sf_off, i64 lut_off, float* __restrict__ y, i64 N,    \
         i64 K) {                                                                               \
        DUET_PDL_ENTRY();                                                                       \
        model_slots_xs_body<XR, C, R>(x, x_stride, ws, ids, sf_off, lut_off, y, N, K);          \
    }
#define MODEL_GEMV1_SLOTS_XS(NAME, XR, LB) MODEL_GEMV1_SLOTS_XS_CR(NAME, XR, LB, ModelC16NV, GEMV1_R_NV)
MODEL_GEMV1_SLOTS_XS(model_gemv1_slots_nvfp4w_xs, false, (32 * GEMV_WARPS))
MODEL_GEMV1_SLOTS_XS(model_gemv1_slots_nvfp4w_xs_relu, true, (32 * GEMV_WARPS))
MODEL_GEMV1_SLOTS_XS(model_gemv1_slots_nvfp4w_xs3, false, (32 * GEMV_WARPS, 3))
MODEL_GEMV1_SLOTS_XS(model_gemv1_slots_nvfp4w_xs3_relu, true, (32 * GEMV_WARPS, 3))
// R = 2 columns a warp on _xs (written in session 11 after its last device call; session 12
// call 1: the default's bits, up 27.42 us / down 28.50 in moe_slots_t1): half the registers
// for the trip's bytes, so four blocks an SM (64 registers), twice the blocks; x comes from
// shared memory, so the halved reuse costs LDS rather than the L1 gathers that made session
// 8's _r2 slower. Grid ceil(N / 16).
MODEL_GEMV1_SLOTS_XS_CR(model_gemv1_slots_nvfp4w_xs4r2, false, (32 * GEMV_WARPS, 4), ModelC16NV, 2)
// The fused down GEMV on _xs4r2 (x read through ReLU²): session 12 call 1 timed _xs4r2 at
// 28.50 us on the down shape against _xs3's 29.39 (up: 27.42 against 25.99), so `xs3m` takes
// _xs3 for the up GEMV and this for the down.
MODEL_GEMV1_SLOTS_XS_CR(model_gemv1_slots_nvfp4w_xs4r2_relu, true, (32 * GEMV_WARPS, 4), ModelC16NV, 2)
// The 16-entry signed table on _xs3 (bench only: 16 table writes per chunk instead of 8, no
// per-weight sign shift and XOR).
MODEL_GEMV1_SLOTS_XS_CR(model_gemv1_slots_nvfp4w_xs3_t16, false, (32 * GEMV_WARPS, 3), ModelC16NV16, GEMV1_R_NV)

// ---- The routed slots' NVFP4 GEMV on the tensor cores (session 13) ----
// ncu (session 11) put the exact slot GEMVs at ~9.5 instructions a weight (table writes and
// reads, sign moves, one FMA each): issue-bound at ~60% issue, ~61 us a MoE layer for ~18 us of
// bytes. model_gemv1_slots_nvfp4w_mma<SK, XRELU2> runs the products as
// mma.sync.m16n8k16.f16 (f32 accumulate), about 2.5 instructions a weight:
// - A (16 output columns x 16 k) is the weights: a lane decodes two E2M1 codes into an f16x2
//   with a shift and two logic ops (the code's sign to bit 15, its exponent and mantissa bits to
//   bits 9..11: the f16 of value * 2^-14, subnormal for the codes 0 and 1), then one f16x2
//   multiply by its block's E4M3 scale (cvt.rn.f16x2.e4m3x2). Both steps are exact: value *
//   scale has at most 6 significant bits and lies in [2^-24, 6 * 448 * 2^-14].
// - B (16 k x 8) is x split into three f16 terms (hi + mid + lo: 33 significant bits) in
//   columns 0, 1, 2 after scaling x by a power of two 2^ex so that max |x| < 2^14 (columns 3..7
//   are zero); so x is carried to about f32's precision and every product is exact.
// - y = ((hi + mid) + lo) * 2^(14 - ex) * (1 / gs), 1 / gs being the pair table's entry of the
//   scale byte 0x38 (1.0).
// Not the exact kernels' bits (the tensor core's f32 accumulation and one global-scale multiply
// per output instead of per weight): within f32 rounding of them (gpu_model's test bounds it
// against f64 sums).
// The k order inside an mma is free as long as A and B agree: lane (g, t) (g = lane / 4, t =
// lane % 4) reads bytes 16 t .. 16 t + 15 of a 64-byte step (128 k) of the rows g and g + 8 of
// its 16 (one uint4 each: codes 32 t .. 32 t + 31, scale blocks 2 t and 2 t + 1), word j of it
// (codes 32 t + 8 j + i, nibble i) feeds two mmas: the first takes the nibble pairs (0, 4) and
// (1, 5), the second (2, 6) and (3, 7); x is staged per block in exactly that order (uint4
// (step, j, term g, t): the f16x2 pairs (x[b], x[b + 4]), (x[b + 1], x[b + 5]), (x[b + 2],
// x[b + 6]), (x[b + 3], x[b + 7]) of b = 128 step + 32 t + 8 j), read by the lanes g < 3.
// Block: W warps (4; 8 for the _w8 forms), W / SK groups of 16 columns, each group's steps
// split over SK warps (step s to warp s % SK) and summed in shared memory in warp order. Grid
// (ceil(N / (16 * W / SK)), slots). Needs K % 128 == 0, 16-byte aligned weight buffers (Layout::of) and x rows.
// Dynamic shared memory: (K / 128 + 1) * 768 bytes of x and a zero step, then W * 16 * 4 bytes
// of partial sums (W <= 8 warps: slotm_smem on the host).
#define SLOTM_WARPS 4
#define SLOTM_XO 3
// slotm_hmul2 / slotm_scale2 / slotm_decode8 / slotm_mma / slotm_word: common.cuh (shared with
// moe.cu's r8 grouped GEMM).
// The fused slot mix of the `_mix` forms (session 13): out[n] = sum over the slots, in slot
// order from 0.0f, of w[s] * y[s * N + n] (each product rounded before its add: --fmad=false),
// model_mix_slots's arithmetic. The last block of a column group to finish (cnt: one u32 a
// column group, zero between launches: that block sets it back) adds the slots' outputs,
// read through L2 after every block's fence.
struct SlotMix {
    const float* w;
    float* out;
    u32* cnt;
};
template <int SK, bool XRELU2, int D, bool MIX = false, int W = SLOTM_WARPS>
__device__ __forceinline__ void model_slots_mma_body(const float* __restrict__ x, i64 x_stride,
                                                     const u64* __restrict__ ws,
                                                     const i32* __restrict__ ids, i64 sf_off,
                                                     i64 lut_off, float* __restrict__ y, i64 N,
                                                     i64 K, SlotMix mix = SlotMix{0, 0, 0}) {
    extern __shared__ __align__(16) u8 xs_smem[];
    constexpr int RG = W / SK;
    const i64 ns = K >> 7;
    uint4* xb = (uint4*)xs_smem;
    // One step of zeros after x: the lanes g >= 3 read their B fragments (columns 3..7) there.
    uint4* zb = xb + ns * 48;
    float* part = (float*)(xs_smem + (ns + 1) * 768);
    __shared__ float red[W];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int rg = warp % RG, ks = warp / RG;
    const i64 s = blockIdx.y;
    const u8* base = (const u8*)model_slot_weight(ws, ids, s);
    const i64 n0 = ((i64)blockIdx.x * RG + rg) * 16;
    const i64 na = min(n0 + g, N - 1), nb = min(n0 + g + 8, N - 1);
    const uint4* ca = (const uint4*)(base + na * (K >> 1)) + t;
    const uint4* cb = (const uint4*)(base + nb * (K >> 1)) + t;
    // Scale halfword t of each 8-byte step (blocks 2 t, 2 t + 1).
    const unsigned short* sa = (const unsigned short*)(base + sf_off + na * (K >> 4)) + t;
    const unsigned short* sb = (const unsigned short*)(base + sf_off + nb * (K >> 4)) + t;
    // D steps' raw bytes in flight (step i: the uint4 i * 4 + t of each row, the scale
    // halfword i * 4 + t), a ring of D register sets indexed by constants only.
    uint4 qa[D], qb[D];
    u32 ra[D], rb[D];
    // The loads go in step order ks, ks + SK, ...: running pointers, SK steps a load.
    ca += 4 * ks;
    cb += 4 * ks;
    sa += 4 * ks;
    sb += 4 * ks;
    auto load = [&](uint4& a, uint4& b, u32& x0, u32& x1) {
        a = __ldg(ca);
        b = __ldg(cb);
        x0 = __ldg(sa);
        x1 = __ldg(sb);
        ca += 4 * SK;
        cb += 4 * SK;
        sa += 4 * SK;
        sb += 4 * SK;
    };
#pragma unroll
    for (int d = 0; d < D; ++d) {
        qa[d] = qb[d] = make_uint4(0, 0, 0, 0);
        ra[d] = rb[d] = 0;
        if (ks + d * SK < ns) load(qa[d], qb[d], ra[d], rb[d]);
    }
    // Stage x: max |x| over the block, then the three f16 terms of x * 2^ex. A thread's first
    // SLOTM_XO octets of x (octet o = x[8 o .. 8 o + 7], o = tid + u * blockDim.x) stay in
    // registers between the two passes (K <= 3072 at 128 threads: one round of loads); the
    // rest, if any, is read again.
    const float* xr = x + s * x_stride;
    const i64 no = K >> 3;
    float4 xo[2 * SLOTM_XO];
    float m = 0.0f;
    auto ld8 = [&](i64 o, float4& a, float4& b) {
        a = model_relu2_4<XRELU2>(__ldg((const float4*)(xr + 8 * o)));
        b = model_relu2_4<XRELU2>(__ldg((const float4*)(xr + 8 * o) + 1));
    };
    auto max8 = [&](const float4& a, const float4& b) {
        m = fmaxf(m, fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w))));
        m = fmaxf(m, fmaxf(fmaxf(fabsf(b.x), fabsf(b.y)), fmaxf(fabsf(b.z), fabsf(b.w))));
    };
#pragma unroll
    for (int u = 0; u < SLOTM_XO; ++u) {
        const i64 o = tid + (i64)u * blockDim.x;
        xo[2 * u] = xo[2 * u + 1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (o < no) ld8(o, xo[2 * u], xo[2 * u + 1]);
    }
#pragma unroll
    for (int u = 0; u < SLOTM_XO; ++u) max8(xo[2 * u], xo[2 * u + 1]);
    for (i64 o = tid + (i64)SLOTM_XO * blockDim.x; o < no; o += blockDim.x) {
        float4 a, b;
        ld8(o, a, b);
        max8(a, b);
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(DUET_FULL_MASK, m, o));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = red[0];
#pragma unroll
    for (int w2 = 1; w2 < W; ++w2) m = fmaxf(m, red[w2]);
    // m < 2^e (e from m's exponent field); ex = 14 - e in [-100, 100] (0 for m = 0 or not
    // finite).
    int ex = 0;
    if (m > 0.0f && m <= 3.0e38f) {
        const int e = (int)((__float_as_uint(m) >> 23) & 0xFFu) - 126;
        ex = max(-100, min(100, 14 - e));
    }
    const float up = __uint_as_float((u32)(127 + ex) << 23);
    for (int i = tid; i < 48; i += blockDim.x) zb[i] = make_uint4(0, 0, 0, 0);
    auto stage = [&](i64 o, const float4& a4, const float4& b4) {
        const float v[8] = {a4.x, a4.y, a4.z, a4.w, b4.x, b4.y, b4.z, b4.w};
        u32 h[3][8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float a = v[i] * up;
            const u32 hi = slotm_f16(a);
            const float r1 = a - slotm_f32(hi);
            const u32 mid = slotm_f16(r1);
            const float r2 = r1 - slotm_f32(mid);
            h[0][i] = hi;
            h[1][i] = mid;
            h[2][i] = slotm_f16(r2);
        }
        // Octet o = 16 step + 4 t + j.
        const i64 st = o >> 4;
        const int tt = (int)((o >> 2) & 3), jj = (int)(o & 3);
#pragma unroll
        for (int q = 0; q < 3; ++q)
            xb[((st * 4 + jj) * 3 + q) * 4 + tt] =
                make_uint4(h[q][0] | (h[q][4] << 16), h[q][1] | (h[q][5] << 16),
                           h[q][2] | (h[q][6] << 16), h[q][3] | (h[q][7] << 16));
    };
#pragma unroll
    for (int u = 0; u < SLOTM_XO; ++u) {
        const i64 o = tid + (i64)u * blockDim.x;
        if (o < no) stage(o, xo[2 * u], xo[2 * u + 1]);
    }
    for (i64 o = tid + (i64)SLOTM_XO * blockDim.x; o < no; o += blockDim.x) {
        float4 a, b;
        ld8(o, a, b);
        stage(o, a, b);
    }
    __syncthreads();
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // Lane (g < 3, t)'s fragments of step i at xl + i * 48 (+ 12 j for word j); the others
    // read the zero step.
    const uint4* xl = g < 3 ? xb + g * 4 + t : zb;
    const i64 xstride = g < 3 ? 48 : 0;
    auto step = [&](i64 i, const uint4& a, const uint4& b, u32 x0, u32 x1) {
        const uint4* xp = xl + i * xstride;
        const u32 sa0 = slotm_scale2(x0), sa1 = slotm_scale2(x0 >> 8);
        const u32 sb0 = slotm_scale2(x1), sb1 = slotm_scale2(x1 >> 8);
        slotm_word(c, a.x, b.x, sa0, sb0, xp[0]);
        slotm_word(c, a.y, b.y, sa0, sb0, xp[12]);
        slotm_word(c, a.z, b.z, sa1, sb1, xp[24]);
        slotm_word(c, a.w, b.w, sa1, sb1, xp[36]);
    };
    // Step i from ring slot d, then that slot's load of step i + D SK.
    for (i64 i0 = ks; i0 < ns; i0 += D * SK) {
#pragma unroll
        for (int d = 0; d < D; ++d) {
            const i64 i = i0 + d * SK;
            if (i < ns) {
                step(i, qa[d], qb[d], ra[d], rb[d]);
                if (i + D * SK < ns) load(qa[d], qb[d], ra[d], rb[d]);
            }
        }
    }
    // Lane (g, 0) holds the hi and mid columns of the rows g (c0, c1) and g + 8 (c2, c3), lane
    // (g, 1) their lo columns (c0, c2).
    const float loa = __shfl_down_sync(DUET_FULL_MASK, c[0], 1);
    const float lob = __shfl_down_sync(DUET_FULL_MASK, c[2], 1);
    const float va = (c[0] + c[1]) + loa, vb = (c[2] + c[3]) + lob;
    const float2 q = __ldg((const float2*)(base + lut_off) + 0x38);
    const float down = __uint_as_float((u32)(127 + 14 - ex) << 23);
    auto put = [&](float sum_a, float sum_b) {
        if (t == 0) {
            if (n0 + g < N) y[s * N + n0 + g] = (sum_a * down) * q.x;
            if (n0 + g + 8 < N) y[s * N + n0 + g + 8] = (sum_b * down) * q.x;
        }
    };
    if constexpr (SK == 1) {
        put(va, vb);
    } else {
        // Partial sums of warp (rg, ks) at part[(ks * RG + rg) * 16 + row]; warp ks 0 adds them
        // in warp order.
        if (t == 0) {
            part[(ks * RG + rg) * 16 + g] = va;
            part[(ks * RG + rg) * 16 + g + 8] = vb;
        }
        __syncthreads();
        if (ks == 0) {
            float ta = part[rg * 16 + g], tb = part[rg * 16 + g + 8];
#pragma unroll
            for (int k2 = 1; k2 < SK; ++k2) {
                ta += part[(k2 * RG + rg) * 16 + g];
                tb += part[(k2 * RG + rg) * 16 + g + 8];
            }
            put(ta, tb);
        }
    }
    if constexpr (MIX) {
        __shared__ u32 ticket;
        __threadfence();
        __syncthreads();
        if (tid == 0) ticket = atomicAdd(mix.cnt + blockIdx.x, 1u);
        __syncthreads();
        if (ticket == gridDim.y - 1) {
            __threadfence();
            const i64 slots = gridDim.y;
            for (int r = tid; r < 16 * RG; r += blockDim.x) {
                const i64 n = (i64)blockIdx.x * (16 * RG) + r;
                if (n < N) {
                    // Eight slots' products at a time (independent loads through L2), added
                    // in slot order.
                    float acc = 0.0f;
                    for (i64 s0 = 0; s0 < slots; s0 += 8) {
                        float p[8];
#pragma unroll
                        for (int j = 0; j < 8; ++j)
                            p[j] = s0 + j < slots ? mix.w[s0 + j] * __ldcg(y + (s0 + j) * N + n)
                                                  : 0.0f;
#pragma unroll
                        for (int j = 0; j < 8; ++j)
                            if (s0 + j < slots) acc = acc + p[j];
                    }
                    mix.out[n] = acc;
                }
            }
            if (tid == 0) mix.cnt[blockIdx.x] = 0u;
        }
    }
}
// D: steps in flight per warp (session 13 call 1 ran D = 2: moe_slots_t1 up / down mma1 12.84 /
// 16.24 us, mma2 15.65 / 17.07, mma4 19.46 / 22.15: more blocks restage x more often; call 2,
// one-pass staging: mma1 11.92 / 13.09, D = 3 / 4 / 6 13.83 / 13.86 / 13.42 up: the registers
// cost more occupancy than the deeper ring gains).
// W: warps a block (4; 8 for the _w8 forms).
#define MODEL_GEMV1_SLOTS_MMA(NAME, SK, XR, D, W)                                               \
    extern "C" __global__ void __launch_bounds__(32 * W)                                        \
    NAME(const float* __restrict__ x, i64 x_stride, const u64* __restrict__ ws,                 \
         const i32* __restrict__ ids, i64 sf_off, i64 lut_off, float* __restrict__ y, i64 N,    \
         i64 K) {                                                                               \
        DUET_PDL_ENTRY();                                                                       \
        model_slots_mma_body<SK, XR, D, false, W>(x, x_stride, ws, ids, sf_off, lut_off, y, N,  \
                                                  K);                                           \
    }
// The fused down GEMVs with the slot mix (SlotMix above; the decode engine with
// `--slot-kernel mma`): model_mix_slots's bits, one launch fewer a MoE layer.
#define MODEL_GEMV1_SLOTS_MMA_MIX(NAME, SK, D, W)                                               \
    extern "C" __global__ void __launch_bounds__(32 * W)                                        \
    NAME(const float* __restrict__ x, i64 x_stride, const u64* __restrict__ ws,                 \
         const i32* __restrict__ ids, i64 sf_off, i64 lut_off, float* __restrict__ y, i64 N,    \
         i64 K, const float* __restrict__ mw, float* __restrict__ mout, u32* __restrict__ cnt) { \
        DUET_PDL_ENTRY();                                                                       \
        model_slots_mma_body<SK, true, D, true, W>(x, x_stride, ws, ids, sf_off, lut_off, y, N, \
                                                   K, SlotMix{mw, mout, cnt});                  \
    }
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma1, 1, false, 2, 4)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma2, 2, false, 2, 4)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma4, 4, false, 2, 4)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma1_relu, 1, true, 2, 4)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma2_relu, 2, true, 2, 4)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma4_relu, 4, true, 2, 4)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma1d3, 1, false, 3, 4)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma1d3_relu, 1, true, 3, 4)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma1d4, 1, false, 4, 4)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma1d4_relu, 1, true, 4, 4)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma1d6, 1, false, 6, 4)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma1d6_relu, 1, true, 6, 4)
MODEL_GEMV1_SLOTS_MMA_MIX(model_gemv1_slots_nvfp4w_mma1_relu_mix, 1, 2, 4)
MODEL_GEMV1_SLOTS_MMA_MIX(model_gemv1_slots_nvfp4w_mma1d3_relu_mix, 1, 3, 4)
MODEL_GEMV1_SLOTS_MMA_MIX(model_gemv1_slots_nvfp4w_mma1d4_relu_mix, 1, 4, 4)
MODEL_GEMV1_SLOTS_MMA_MIX(model_gemv1_slots_nvfp4w_mma1d6_relu_mix, 1, 6, 4)
// Eight warps a block (session 13 call 3: under ncu the fused down GEMV took 27.1 us against
// the up GEMV's 16.1 for the same bytes: its 1024 columns make 1408 warps of 16, 10.7 an SM,
// each walking 21 steps). _mma2w8: K split over two warps (RG 4: 64 columns a block, the
// blocks and x stagings of _mma1, twice the warps); _mma4w8: over four (32 columns a block).
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma2w8, 2, false, 2, 8)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma2w8_relu, 2, true, 2, 8)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma4w8, 4, false, 2, 8)
MODEL_GEMV1_SLOTS_MMA(model_gemv1_slots_nvfp4w_mma4w8_relu, 4, true, 2, 8)
MODEL_GEMV1_SLOTS_MMA_MIX(model_gemv1_slots_nvfp4w_mma2w8_relu_mix, 2, 2, 8)
MODEL_GEMV1_SLOTS_MMA_MIX(model_gemv1_slots_nvfp4w_mma4w8_relu_mix, 4, 2, 8)

// A walk over a block's units in order (group gi, slice j): the slot s and first column n0 of
// the group advance by gridDim.x groups with one division at the start, none per unit (64-bit
// divisions cost ~100 instructions: session 11's first version divided per unit).
struct SlotpCursor {
    i64 u;       // unit index within the block
    i64 gi, j;   // the block's gi-th group, its slice j
    i64 s, rg;   // the group's slot and column group (grp = s G + rg)
    int stage;   // u % S
    int sfslot;  // gi % S
};
template <int S>
__device__ __forceinline__ void slotp_advance(SlotpCursor& c, i64 per, i64 G, i64 bq, i64 br) {
    ++c.u;
    c.stage = c.stage + 1 == S ? 0 : c.stage + 1;
    if (++c.j == per) {
        c.j = 0;
        ++c.gi;
        c.sfslot = c.sfslot + 1 == S ? 0 : c.sfslot + 1;
        c.s += bq;
        c.rg += br;
        if (c.rg >= G) {
            c.rg -= G;
            ++c.s;
        }
    }
}
template <int S, bool XRELU2>
__device__ __forceinline__ void model_slotp_body(const float* __restrict__ x, i64 x_stride,
                                                 const u64* __restrict__ ws,
                                                 const i32* __restrict__ ids, i64 sf_off,
                                                 i64 lut_off, float* __restrict__ y, i64 N,
                                                 i64 K, i64 slots) {
    extern __shared__ __align__(16) u8 slotp_smem[];
    const i64 nc = K >> 4;                                   // chunks per row
    const i64 per = (nc + SLOTP_CHUNKS - 1) / SLOTP_CHUNKS;  // slices (units) per group
    const i64 G = (N + SLOTP_ROWS - 1) / SLOTP_ROWS;
    const i64 T = slots * G;
    const i64 B = gridDim.x, b = blockIdx.x;
    const i64 U = b < T ? ((T - 1 - b) / B + 1) * per : 0;  // this block's units
    const i64 sfb = (SLOTP_ROWS * nc + 15) & ~(i64)15;      // a group's scale bytes, padded
    const i64 ringb = sfb + 256 * 8;                         // ... and its expert's pairs
    const i64 bq = B / G, br = B - bq * G;                   // a step of B groups
    // A stage: the slice's codes, then its x (64 chunks of 16 f32, lane-major).
    constexpr int STAGE = SLOTP_ROWS * SLOTP_SLICE + SLOTP_CHUNKS * 64;
    u8* const codes_st = slotp_smem;
    u8* const sf_st = slotp_smem + (i64)S * STAGE;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const i64 half_k = K >> 1;
    // Queue the issue cursor's unit (none past the last: an empty group keeps the counts
    // uniform).
    auto issue = [&](const SlotpCursor& c) {
        if (c.u < U) {
            const i64 n0 = c.rg * SLOTP_ROWS;
            const i64 nrows = min((i64)SLOTP_ROWS, N - n0);
            const u8* base = (const u8*)model_slot_weight(ws, ids, c.s);
            // Codes: row r's slice j (nch chunks, 8 bytes each) at r * SLOTP_SLICE.
            const int nch = (int)min((i64)SLOTP_CHUNKS, nc - c.j * SLOTP_CHUNKS);
            const u8* src = base + n0 * half_k + c.j * SLOTP_SLICE;
            u8* dst = codes_st + c.stage * STAGE;
            const int nr = (int)nrows;
#pragma unroll
            for (int p = tid; p < SLOTP_ROWS * (SLOTP_SLICE / 16); p += 32 * GEMV_WARPS) {
                const int r = p / (SLOTP_SLICE / 16), q = p % (SLOTP_SLICE / 16);
                if (r < nr && 2 * q < nch)
                    duet_cp_async16(dst + r * SLOTP_SLICE + 16 * q, src + r * half_k + 16 * q);
            }
            // x of the slice: float4 q of chunk lc at model_xs_index(lc, q).
            {
                const float4* xsrc =
                    (const float4*)(x + c.s * x_stride) + 4 * c.j * SLOTP_CHUNKS;
                float4* xdst = (float4*)(dst + SLOTP_ROWS * SLOTP_SLICE);
                const int p = tid;  // 4 * 64 pieces: one a thread
                if (p < 4 * nch) duet_cp_async16(xdst + model_xs_index(p >> 2, p & 3), xsrc + p);
            }
            if (c.j == 0) {
                // The group's scale bytes (rows n0.., contiguous), padded to 16 bytes: still
                // inside the buffer (nvfp4_store pads the scale bytes to 16), then the pairs.
                const u8* ssrc = base + sf_off + n0 * nc;
                u8* sdst = sf_st + c.sfslot * ringb;
                const i64 pieces = (nrows * nc + 15) >> 4;
                for (i64 p = tid; p < pieces; p += 32 * GEMV_WARPS)
                    duet_cp_async16(sdst + 16 * p, ssrc + 16 * p);
                if (tid < 128) duet_cp_async16(sdst + sfb + 16 * tid, base + lut_off + 16 * tid);
            }
        }
        duet_cp_async_commit();
    };
    SlotpCursor ic = {0, 0, 0, b / G, b - (b / G) * G, 0, 0};
    const SlotpCursor c0 = ic;
#pragma unroll
    for (int u = 0; u < S - 1; ++u) {
        issue(ic);
        slotp_advance<S>(ic, per, G, bq, br);
    }
    float acc[GEMV1_R_NV];
#pragma unroll
    for (int r = 0; r < GEMV1_R_NV; ++r) acc[r] = 0.0f;
    for (SlotpCursor c = c0; c.u < U; slotp_advance<S>(c, per, G, bq, br)) {
        duet_cp_async_wait<S - 2>();  // unit u's bytes have landed (this thread's pieces)
        __syncthreads();               // everyone's; and unit u - 1's stage is free
        issue(ic);
        slotp_advance<S>(ic, per, G, bq, br);
        const i64 n0 = c.rg * SLOTP_ROWS;
        const int nrows = (int)min((i64)SLOTP_ROWS, N - n0);
        const u8* st = codes_st + c.stage * STAGE;
        const float4* xs4 = (const float4*)(st + SLOTP_ROWS * SLOTP_SLICE);
        const u8* sfs = sf_st + c.sfslot * ringb;
        const float2* luts = (const float2*)(sfs + sfb);
        // Columns past N read the group's last column and store nothing.
        int lr[GEMV1_R_NV];
#pragma unroll
        for (int r = 0; r < GEMV1_R_NV; ++r) lr[r] = min(warp * GEMV1_R_NV + r, nrows - 1);
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            const int lc = lane + 32 * t;
            const i64 ch0 = c.j * SLOTP_CHUNKS + lc;
            if (ch0 < nc) {
                float xv[16];
                model_xs16(xs4, lc, xv);
                if constexpr (XRELU2) {
#pragma unroll
                    for (int i = 0; i < 16; ++i) xv[i] = model_relu2_of(xv[i]);
                }
                ModelC16NV ch[GEMV1_R_NV];
#pragma unroll
                for (int r = 0; r < GEMV1_R_NV; ++r)
                    ch[r] = {*(const uint2*)(st + lr[r] * SLOTP_SLICE + 8 * lc),
                             luts[sfs[(i64)lr[r] * nc + ch0]]};
                model_fma16<GEMV1_R_NV>(xv, ch, acc);
            }
        }
        if (c.j == per - 1) {
#pragma unroll
            for (int r = 0; r < GEMV1_R_NV; ++r) {
                float v = acc[r];
                for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(DUET_FULL_MASK, v, o);
                const int lrow = warp * GEMV1_R_NV + r;
                if (lane == 0 && lrow < nrows) y[c.s * N + n0 + lrow] = v;
                acc[r] = 0.0f;
            }
        }
    }
    duet_cp_async_wait<0>();
}
// MINB: blocks per SM the registers must allow (3: 85 registers, as the stages' shared memory
// allows three blocks at K = 2688).
#define MODEL_GEMV1_SLOTS_PIPE(NAME, S, XR, MINB)                                               \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_WARPS, MINB)                         \
    NAME(const float* __restrict__ x, i64 x_stride, const u64* __restrict__ ws,                 \
         const i32* __restrict__ ids, i64 sf_off, i64 lut_off, float* __restrict__ y, i64 N,    \
         i64 K, i64 slots) {                                                                    \
        DUET_PDL_ENTRY();                                                                       \
        model_slotp_body<S, XR>(x, x_stride, ws, ids, sf_off, lut_off, y, N, K, slots);         \
    }
MODEL_GEMV1_SLOTS_PIPE(model_gemv1_slots_nvfp4w_pipe, 3, false, 3)
MODEL_GEMV1_SLOTS_PIPE(model_gemv1_slots_nvfp4w_pipe_relu, 3, true, 3)
MODEL_GEMV1_SLOTS_PIPE(model_gemv1_slots_nvfp4w_pipe2, 2, false, 3)
MODEL_GEMV1_SLOTS_PIPE(model_gemv1_slots_nvfp4w_pipe4, 4, false, 2)

// y[i] = sum over the k slots, in slot order from 0.0f, of w[s] * o[s * n + i] (each product
// rounded before its add: --fmad=false), i < n: the engine's zero fill then one axpy per slot,
// in one pass (moe_finalize of one token). UNROLL as in MODEL_RMSNORM (model_mix_slots_u8: a
// `norms_super` bench variant, not yet run).
#define MODEL_MIX_SLOTS(NAME, UNROLL)                                                           \
extern "C" __global__ void NAME(const float* __restrict__ o,                                    \
                                           const float* __restrict__ w, i64 k, i64 n,           \
                                           float* __restrict__ y) {                             \
        DUET_PDL_ENTRY();                                                                       \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;                             \
         i += (i64)gridDim.x * blockDim.x) {                                                    \
        float acc = 0.0f;                                                                       \
        UNROLL                                                                                  \
        for (i64 s = 0; s < k; ++s) acc = acc + w[s] * o[s * n + i];                            \
        y[i] = acc;                                                                             \
    }                                                                                           \
}
MODEL_MIX_SLOTS(model_mix_slots, )
MODEL_MIX_SLOTS(model_mix_slots_u8, _Pragma("unroll 8"))
