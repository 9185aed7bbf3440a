// NVFP4 block quantization (16 elements, E4M3 scale, fp32 global scale, E2M1 codes two per
// byte, element 2i in the low nibble) and its inverse. CPU spec:
// reference/src/ops/nvfp4_quantize.rs (+ nvfp4_dequantize.rs); bit-exact in both modes:
//   kernel mode: rcp.approx.ftz.f32 (the hardware instruction; the reference emulates it),
//                saturating E4M3, NaN-ignoring block max;
//   exact mode:  IEEE division, non-saturating E4M3, NaN-propagating block max.
// Hopper has no FP4 conversion instruction: E2M1 is the threshold table of common.cuh.
//
// Versions:
//   v1  one thread per 16-element block: 16- or 32-byte vector loads, codes stored as one u64,
//       one scale byte; the grid covers the padded scale tensor so swizzle padding is written
//       (zeros). Dequantize: one thread per block, 4 x float4 stores.
//   v2  same math; a 2-D grid (x: scale columns, y: rows, grid-stride over rows) so there is no
//       64-bit division per block (v1's b / kb_p), and E2M1 encoding by bit arithmetic (RNE to
//       one mantissa bit on the f32 bits; below 1, rint(2a)) instead of a 7-way compare chain.
//   v3  two threads per 16-element block (8 elements each: one 16-byte load per thread for
//       16-bit inputs, fully coalesced across the warp), block max exchanged with one shuffle,
//       each thread stores its 8 codes as one u32; 2 rows per thread with both rows' loads
//       issued before any math (more bytes in flight); rint(2a) by a 2^23 magic add instead of
//       F2I. (Measured slower than v2 on the H200: the kernel is ALU-bound, and v3 does the
//       scale math twice per block.)
//   v4  v2 with fewer instructions per element on the common path (bf16/f16 input, kernel
//       mode): block max on packed pairs (and with 0x7fff7fff, max.bf16x2 / max.f16x2, which drop
//       NaNs like fmaxf), bf16 -> f32 as one shift/mask, the magic-add E2M1 of v3, codes packed
//       into two u32. Other dtype/mode combinations take v2's path.
//   v5  v4 with the fast path's dtype fixed at compile time (94.9 us vs v4's 87.9 at 8192^2
//       bf16, session 4: slower).
//   v6  v5 with 4 rows per thread, all loads first (session 4; 85.5-88.9 us on the H200).
//   v7  v6's row loop with an E2M1 encoder and packing on the FP32 pipe and hardware E4M3
//       scale conversions (session 5: 53.7-58.3 us, 81-87.5% of copy; the default).
//   v8  v7 with 2 rows per thread at <= 64 registers (session 5: 53.3-54.8 us).

#define MODE_KERNEL 0
#define MODE_EXACT 1
#define LAYOUT_LINEAR 0
#define LAYOUT_SWIZZLED 1

// f32_to_e4m3_nonsat and exact_rcp: common.cuh (shared with moe.cu).

// Offset of scale (m, k) for kb = cols/16 scale columns.
__device__ __forceinline__ i64 sf_offset(i64 m, i64 k, i64 kb, int layout) {
    if (layout == LAYOUT_LINEAR) return m * kb + k;
    i64 k_tiles = (kb + 3) / 4;
    return (m / 128) * (k_tiles * 512) + (k / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 +
           (k % 4);
}

// E2M1 code by bit arithmetic; identical to f32_to_e2m1 for every input (checked by the tests).
__device__ __forceinline__ u32 f32_to_e2m1_fast(float x) {
    u32 b = __float_as_uint(x);
    u32 sign = (b >> 28) & 0x8u;
    u32 ab = b & 0x7fffffffu;
    float a = __uint_as_float(ab);
    u32 idx;
    if (a < 1.0f) {
        idx = (u32)rintf(a * 2.0f);  // 0, 1 or 2; ties (0.25, 0.75) to even
    } else {
        u32 r = (ab + 0x1fffffu + ((ab >> 22) & 1u)) >> 22;  // RNE to one mantissa bit
        idx = r >= 259u ? 7u : r - 252u;                      // 1.0 -> 2 ... 6.0 -> 7, saturate
    }
    if (ab > 0x7f800000u) return 0x7u;  // NaN
    return sign | idx;
}

// Quantizes one block of 16 f32 values: returns the scale byte, writes 16 codes (4 bits each,
// element i at bits 4i..4i+3 of *codes). FAST: the codes by f32_to_e2m1_fast (the same codes).
template <bool FAST>
__device__ __forceinline__ u8 nvfp4_block_t(const float v[16], float global, int mode, u64* codes) {
    float vmax, sf_f;
    u8 sf;
    float rcp_g;
    if (mode == MODE_KERNEL) {
        vmax = fabsf(v[0]);
#pragma unroll
        for (int i = 1; i < 16; ++i) vmax = fmaxf(vmax, fabsf(v[i]));
        sf_f = global * (vmax * rcp_approx_ftz(6.0f));
        sf = f32_to_e4m3_sat(sf_f);
        rcp_g = rcp_approx_ftz(global);
    } else {
        bool nan = false;
        vmax = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            nan |= v[i] != v[i];
            vmax = fmaxf(vmax, fabsf(v[i]));
        }
        if (nan) vmax = __uint_as_float(0x7fc00000u);
        sf_f = global * (vmax * (1.0f / 6.0f));
        sf = f32_to_e4m3_nonsat(sf_f);
        rcp_g = exact_rcp(global);
    }
    float sf_val = e4m3_to_f32(sf);
    float out_scale = 0.0f;
    if (sf_val != 0.0f)
        out_scale = mode == MODE_KERNEL ? rcp_approx_ftz(sf_val * rcp_g) : exact_rcp(sf_val * rcp_g);
    u64 c = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        float s = v[i] * out_scale;
        u32 code = (mode == MODE_EXACT && s != s) ? 0u
                                                  : (FAST ? f32_to_e2m1_fast(s) : f32_to_e2m1(s));
        c |= (u64)code << (4 * i);
    }
    *codes = c;
    return sf;
}

__device__ __forceinline__ u8 nvfp4_block(const float v[16], float global, int mode, u64* codes) {
    return nvfp4_block_t<false>(v, global, mode, codes);
}
__device__ __forceinline__ u8 nvfp4_block_fast(const float v[16], float global, int mode, u64* codes) {
    return nvfp4_block_t<true>(v, global, mode, codes);
}

// Loads 16 consecutive elements of dtype `dt` starting at element `i0` (16-aligned).
__device__ __forceinline__ void load16(const void* __restrict__ x, i64 i0, int dt, float v[16]) {
    if (dt == DT_F32) {
        const float4* p = (const float4*)((const float*)x + i0);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            float4 f = __ldg(p + q);
            v[4 * q] = f.x; v[4 * q + 1] = f.y; v[4 * q + 2] = f.z; v[4 * q + 3] = f.w;
        }
    } else {
        const uint4* p = (const uint4*)((const u16*)x + i0);
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            uint4 u = __ldg(p + q);
            u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                u16 lo = (u16)(w[j] & 0xffffu), hi = (u16)(w[j] >> 16);
                v[8 * q + 2 * j] = dt == DT_BF16 ? bf16_to_f32(lo) : f16_to_f32(lo);
                v[8 * q + 2 * j + 1] = dt == DT_BF16 ? bf16_to_f32(hi) : f16_to_f32(hi);
            }
        }
    }
}

// amax of |x| as u32 bits (NaN-propagating: NaN bits exceed inf's). `out` starts at 0.
extern "C" __global__ void nvfp4_amax(const void* __restrict__ x, int dt, i64 n, u32* out) {
    u32 m = 0;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        u32 b = __float_as_uint(load_as_f32(x, i, dt)) & 0x7fffffffu;
        m = b > m ? b : m;
    }
    for (int o = 16; o > 0; o >>= 1) {
        u32 w = __shfl_xor_sync(DUET_FULL_MASK, m, o);
        m = w > m ? w : m;
    }
    if ((threadIdx.x & 31) == 0) atomicMax(out, m);
}

// Grid covers rows_p x kb_p blocks (padded in the swizzled layout); `global` is read from device
// memory (given by the caller or derived from amax on the host).
extern "C" __global__ void nvfp4_quantize_v1(const void* __restrict__ x, int dt, i64 rows, i64 cols,
                                             const float* __restrict__ global_p, int mode,
                                             int layout, i64 rows_p, i64 kb_p,
                                             u64* __restrict__ x_fp4, u8* __restrict__ sf) {
    const i64 kb = cols / 16;
    const i64 total = rows_p * kb_p;
    const float global = *global_p;
    for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < total;
         b += (i64)gridDim.x * blockDim.x) {
        i64 m = b / kb_p, k = b % kb_p;
        if (m >= rows || k >= kb) {
            sf[sf_offset(m, k, kb, layout)] = 0;  // swizzle padding (k_tiles is the same)
            continue;
        }
        float v[16];
        load16(x, m * cols + k * 16, dt, v);
        u64 codes;
        u8 s = nvfp4_block(v, global, mode, &codes);
        x_fp4[m * kb + k] = codes;
        sf[sf_offset(m, k, kb, layout)] = s;
    }
}

// One thread per block: x = e2m1 * float(sf) / global.
extern "C" __global__ void nvfp4_dequantize_v1(const u64* __restrict__ x_fp4,
                                               const u8* __restrict__ sf,
                                               const float* __restrict__ global_p, i64 rows,
                                               i64 cols, int layout, float* __restrict__ out) {
    const i64 kb = cols / 16;
    const float g = *global_p;
    for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < rows * kb;
         b += (i64)gridDim.x * blockDim.x) {
        i64 m = b / kb, k = b % kb;
        u64 c = x_fp4[b];
        float s = e4m3_to_f32(sf[sf_offset(m, k, kb, layout)]);
        float4* o = (float4*)(out + b * 16);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            float4 f;
            f.x = e2m1_to_f32((u32)(c >> (16 * q)) & 0xfu) * s / g;
            f.y = e2m1_to_f32((u32)(c >> (16 * q + 4)) & 0xfu) * s / g;
            f.z = e2m1_to_f32((u32)(c >> (16 * q + 8)) & 0xfu) * s / g;
            f.w = e2m1_to_f32((u32)(c >> (16 * q + 12)) & 0xfu) * s / g;
            o[q] = f;
        }
    }
}

// grid = (ceil(kb_p / blockDim.x), min(rows_p, 65535)); rows by grid-stride on y.
extern "C" __global__ void nvfp4_quantize_v2(const void* __restrict__ x, int dt, i64 rows, i64 cols,
                                             const float* __restrict__ global_p, int mode,
                                             int layout, i64 rows_p, i64 kb_p,
                                             u64* __restrict__ x_fp4, u8* __restrict__ sf) {
    const i64 kb = cols / 16;
    const float global = *global_p;
    const i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= kb_p) return;
    for (i64 m = blockIdx.y; m < rows_p; m += gridDim.y) {
        if (m >= rows || k >= kb) {
            sf[sf_offset(m, k, kb, layout)] = 0;
            continue;
        }
        float v[16];
        load16(x, m * cols + k * 16, dt, v);
        u64 codes;
        u8 s = nvfp4_block_fast(v, global, mode, &codes);
        x_fp4[m * kb + k] = codes;
        sf[sf_offset(m, k, kb, layout)] = s;
    }
}

// Checks f32_to_e2m1_fast against f32_to_e2m1 for 2^32 inputs split over launches:
// inputs lo .. lo+n-1 (as f32 bits); counts mismatches.
extern "C" __global__ void e2m1_fast_check(u64 lo, u64 n, unsigned long long* count) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        float x = __uint_as_float((u32)(lo + i));
        if (f32_to_e2m1_fast(x) != f32_to_e2m1(x)) atomicAdd(count, 1ull);
    }
}

// E2M1 index (no sign) of a = |s| by bit arithmetic, 2^23 magic add for a < 1.
__device__ __forceinline__ u32 e2m1_code_v3(float x) {
    u32 b = __float_as_uint(x);
    u32 ab = b & 0x7fffffffu;
    float a = __uint_as_float(ab);
    u32 small = __float_as_uint(__fmaf_rn(a, 2.0f, 8388608.0f)) - 0x4b000000u;  // rint(2a) for a < 1
    u32 r = (ab + 0x1fffffu + ((ab >> 22) & 1u)) >> 22;
    u32 big = r >= 259u ? 7u : r - 252u;
    u32 idx = a < 1.0f ? small : big;
    idx = ab > 0x7f800000u ? 7u : idx;  // NaN -> +6 (code 7, sign dropped)
    u32 sign = ab > 0x7f800000u ? 0u : (b >> 28) & 0x8u;
    return sign | idx;
}

template <int R>
__device__ __forceinline__ void nvfp4_v3_body(const void* __restrict__ x, int dt, i64 rows, i64 cols,
                                              float global, int mode, int layout, i64 rows_p,
                                              i64 kb_p, u32* __restrict__ x_fp4,
                                              u8* __restrict__ sf) {
    const i64 kb = cols / 16;
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;  // half-block index in the row
    const i64 k = t >> 1;
    const int half = (int)(t & 1);
    const bool col_ok = k < kb;
    const bool in_range = k < kb_p;  // no early return: the pair shuffle needs every lane
    for (i64 m0 = (i64)blockIdx.y * R; m0 < rows_p; m0 += (i64)gridDim.y * R) {
        float v[R][8];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const i64 m = m0 + r;
            if (col_ok && m < rows) {
                const i64 i0 = m * cols + k * 16 + half * 8;
                if (dt == DT_F32) {
                    const float4* p = (const float4*)((const float*)x + i0);
                    float4 a = __ldg(p), c = __ldg(p + 1);
                    v[r][0] = a.x; v[r][1] = a.y; v[r][2] = a.z; v[r][3] = a.w;
                    v[r][4] = c.x; v[r][5] = c.y; v[r][6] = c.z; v[r][7] = c.w;
                } else {
                    uint4 u = __ldg((const uint4*)((const u16*)x + i0));
                    u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        u16 lo = (u16)(w[j] & 0xffffu), hi = (u16)(w[j] >> 16);
                        v[r][2 * j] = dt == DT_BF16 ? bf16_to_f32(lo) : f16_to_f32(lo);
                        v[r][2 * j + 1] = dt == DT_BF16 ? bf16_to_f32(hi) : f16_to_f32(hi);
                    }
                }
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) v[r][j] = 0.0f;
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const i64 m = m0 + r;
            if (m >= rows_p) break;  // uniform across the pair
            float vmax;
            bool nan = false;
            if (mode == MODE_KERNEL) {
                vmax = fabsf(v[r][0]);
#pragma unroll
                for (int j = 1; j < 8; ++j) vmax = fmaxf(vmax, fabsf(v[r][j]));
            } else {
                vmax = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    nan |= v[r][j] != v[r][j];
                    vmax = fmaxf(vmax, fabsf(v[r][j]));
                }
            }
            vmax = fmaxf(vmax, __shfl_xor_sync(DUET_FULL_MASK, vmax, 1));
            nan = __shfl_xor_sync(DUET_FULL_MASK, (int)nan, 1) | nan;
            if (!in_range) continue;
            if (!col_ok || m >= rows) {
                if (half == 0) sf[sf_offset(m, k, kb, layout)] = 0;  // swizzle padding
                continue;
            }
            u8 sfb;
            float rcp_g;
            if (mode == MODE_KERNEL) {
                sfb = f32_to_e4m3_sat(global * (vmax * rcp_approx_ftz(6.0f)));
                rcp_g = rcp_approx_ftz(global);
            } else {
                if (nan) vmax = __uint_as_float(0x7fc00000u);
                sfb = f32_to_e4m3_nonsat(global * (vmax * (1.0f / 6.0f)));
                rcp_g = exact_rcp(global);
            }
            float sf_val = e4m3_to_f32(sfb);
            float out_scale = 0.0f;
            if (sf_val != 0.0f)
                out_scale = mode == MODE_KERNEL ? rcp_approx_ftz(sf_val * rcp_g) : exact_rcp(sf_val * rcp_g);
            u32 c = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                float q = v[r][j] * out_scale;
                u32 code = (mode == MODE_EXACT && q != q) ? 0u : e2m1_code_v3(q);
                c |= code << (4 * j);
            }
            x_fp4[(m * kb + k) * 2 + half] = c;
            if (half == 0) sf[sf_offset(m, k, kb, layout)] = sfb;
        }
    }
}

// grid = (ceil(2*kb_p / blockDim.x), min(ceil(rows_p / 2), 65535)), blockDim even.
extern "C" __global__ void nvfp4_quantize_v3(const void* __restrict__ x, int dt, i64 rows, i64 cols,
                                             const float* __restrict__ global_p, int mode,
                                             int layout, i64 rows_p, i64 kb_p,
                                             u32* __restrict__ x_fp4, u8* __restrict__ sf) {
    nvfp4_v3_body<2>(x, dt, rows, cols, *global_p, mode, layout, rows_p, kb_p, x_fp4, sf);
}

extern "C" __global__ void e2m1_v3_check(u64 lo, u64 n, unsigned long long* count) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        float x = __uint_as_float((u32)(lo + i));
        if (e2m1_code_v3(x) != f32_to_e2m1(x)) atomicAdd(count, 1ull);
    }
}

__device__ __forceinline__ u32 max_x2(u32 a, u32 b, int dt) {
    u32 d;
    if (dt == DT_BF16) asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    else asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// The kernel-mode fast path of one 16-element block of 16-bit input (v4 / v5 / v6): block max on
// packed pairs (max.bf16x2 / max.f16x2 on |x|, NaNs dropped like fmaxf), the E4M3 scale, the
// magic-add E2M1 codes packed into c[0..2); returns the scale byte.
__device__ __forceinline__ u8 nvfp4_fast_block(const uint4& u0, const uint4& u1, int d, float global, float rcp6,
                                               float rcp_g, u32 c[2]) {
    u32 w[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
    u32 mx = w[0] & 0x7fff7fffu;
#pragma unroll
    for (int j = 1; j < 8; ++j) mx = max_x2(mx, w[j] & 0x7fff7fffu, d);
    float vmax;
    if (d == DT_BF16) vmax = fmaxf(__uint_as_float(mx << 16), __uint_as_float(mx & 0xffff0000u));
    else vmax = fmaxf(f16_to_f32((u16)(mx & 0xffffu)), f16_to_f32((u16)(mx >> 16)));
    const u8 sfb = f32_to_e4m3_sat(global * (vmax * rcp6));
    const float sf_val = e4m3_to_f32(sfb);
    const float out_scale = sf_val != 0.0f ? rcp_approx_ftz(sf_val * rcp_g) : 0.0f;
    c[0] = 0u;
    c[1] = 0u;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        float lo, hi;
        if (d == DT_BF16) {
            lo = __uint_as_float(w[j] << 16);
            hi = __uint_as_float(w[j] & 0xffff0000u);
        } else {
            lo = f16_to_f32((u16)(w[j] & 0xffffu));
            hi = f16_to_f32((u16)(w[j] >> 16));
        }
        c[j >> 2] |= (e2m1_code_v3(lo * out_scale) | (e2m1_code_v3(hi * out_scale) << 4)) << (8 * (j & 3));
    }
    return sfb;
}

// The generic path of v4 / v5 / v6 (other dtypes, exact mode): block (m, k) through v2's
// per-element math.
__device__ __forceinline__ void nvfp4_generic_block(const void* __restrict__ x, int dt, i64 m, i64 k, i64 cols,
                                                    i64 kb, float global, int mode, int layout,
                                                    u32* __restrict__ x_fp4, u8* __restrict__ sf) {
    float v[16];
    load16(x, m * cols + k * 16, dt, v);
    u64 codes;
    const u8 s = nvfp4_block_fast(v, global, mode, &codes);
    x_fp4[2 * (m * kb + k)] = (u32)codes;
    x_fp4[2 * (m * kb + k) + 1] = (u32)(codes >> 32);
    sf[sf_offset(m, k, kb, layout)] = s;
}

// v4 and v5 share one body: v4 decodes the 16-bit input by the run-time `dt` (DTC = -1); v5
// (session 3, not yet run on the H200) fixes it at compile time (nvfp4_quantize_v5_bf16 /
// _f16): in v4 the SASS of the fast path carries the f16 decode's branches next to every bf16
// element (~900 static instructions between the loads and the stores of a 16-element block).
// Same arithmetic (bit-identical codes and scales); other dtypes and exact mode take the
// generic path.
template <int DTC>
__device__ __forceinline__ void nvfp4_quantize_v4_body(const void* __restrict__ x, int dt, i64 rows, i64 cols,
                                             const float* __restrict__ global_p, int mode,
                                             int layout, i64 rows_p, i64 kb_p,
                                             u32* __restrict__ x_fp4, u8* __restrict__ sf) {
    const i64 kb = cols / 16;
    const float global = *global_p;
    const i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= kb_p) return;
    // DTC: the fast path's input dtype, fixed at compile time (v5: DT_BF16 or DT_F16, the
    // launch picks the instantiation that matches `dt`) or -1 = the run-time `dt` (v4).
    const int d = DTC < 0 ? dt : DTC;
    const bool fast = mode == MODE_KERNEL && (DTC < 0 ? (dt == DT_BF16 || dt == DT_F16) : dt == DTC);
    const float rcp6 = rcp_approx_ftz(6.0f), rcp_g = rcp_approx_ftz(global);
    for (i64 m = blockIdx.y; m < rows_p; m += gridDim.y) {
        if (m >= rows || k >= kb) {
            sf[sf_offset(m, k, kb, layout)] = 0;
            continue;
        }
        const i64 i0 = m * cols + k * 16;
        if (!fast) {
            nvfp4_generic_block(x, dt, m, k, cols, kb, global, mode, layout, x_fp4, sf);
            continue;
        }
        const uint4* p = (const uint4*)((const u16*)x + i0);
        uint4 u0 = __ldg(p), u1 = __ldg(p + 1);
        u32 c[2];
        const u8 sfb = nvfp4_fast_block(u0, u1, d, global, rcp6, rcp_g, c);
        x_fp4[2 * (m * kb + k)] = c[0];
        x_fp4[2 * (m * kb + k) + 1] = c[1];
        sf[sf_offset(m, k, kb, layout)] = sfb;
    }
}

extern "C" __global__ void nvfp4_quantize_v4(const void* __restrict__ x, int dt, i64 rows, i64 cols,
                                             const float* __restrict__ global_p, int mode,
                                             int layout, i64 rows_p, i64 kb_p,
                                             u32* __restrict__ x_fp4, u8* __restrict__ sf) {
    nvfp4_quantize_v4_body<-1>(x, dt, rows, cols, global_p, mode, layout, rows_p, kb_p, x_fp4, sf);
}

// An entry of a compile-time-dtype version (v5, v6): BODY<DTC> with the common signature.
#define NVFP4_DTC_ENTRY(NAME, BODY, DTC)                                                           \
    extern "C" __global__ void NAME(const void* __restrict__ x, int dt, i64 rows, i64 cols,       \
                                    const float* __restrict__ global_p, int mode, int layout,      \
                                    i64 rows_p, i64 kb_p, u32* __restrict__ x_fp4,                \
                                    u8* __restrict__ sf) {                                         \
        BODY<DTC>(x, dt, rows, cols, global_p, mode, layout, rows_p, kb_p, x_fp4, sf);            \
    }
NVFP4_DTC_ENTRY(nvfp4_quantize_v5_bf16, nvfp4_quantize_v4_body, DT_BF16)
NVFP4_DTC_ENTRY(nvfp4_quantize_v5_f16, nvfp4_quantize_v4_body, DT_F16)

// v6 (session 4; on the H200 in session 5: bit-exact, 85.5-88.9 us, 53-55% of copy, so the
// loads were not v4's limit: the integer pipe was, see v7): v5 with R = 4 rows per thread and the loads of all
// R rows issued before any math. v4 / v5 give each thread one 16-element block (32 bytes in
// flight) and exit: at 8192 x 8192 that is 16384 blocks of 256 threads, each thread paying a
// full memory latency, 58% of the copy ceiling (session 4) with about 33 us of issue work in
// the 88 us. v6 keeps 128 bytes per thread in flight and a quarter of the threads. Same
// per-block arithmetic (nvfp4_fast_block), so bit-identical codes and scales; exact mode and
// other dtypes take the generic per-row path.
// v6's body (nvfp4_quantize_v6_body) is below v7's block functions: it shares their row loop.

// v7 (session 5): v6 with an E2M1 encoder and a packing that keep the integer pipe free.
// Hopper issues integer, logic, compare and min/max instructions (LOP3, SHF, ISETP, SEL, IADD3,
// FMNMX) to a 16-lane pipe, half the rate of the 32-lane FP32 pipe (FFMA, FMUL, FADD, and
// IMAD). v6's static SASS from its loads to its stores is ~22 integer-pipe instructions per
// element (e2m1_code_v3: mask, shifts, compares, selects); at 2 cycles per warp instruction
// that is ~84 us of issue for 64M elements, the measured 85.5 us. v7 per element:
//   * E2M1 magnitude by e2m1_mag_fma: 3 FFMA (FP32 pipe) + 3 FMNMX, result 2^23 + index;
//   * the kernel-mode fast path only for blocks with no NaN / inf input (integer max of |x| as
//     u16 pairs: NaN and inf patterns are the largest) and a finite out_scale, so q's sign is
//     x's sign and no per-element NaN test is needed; other blocks take the generic path;
//   * two codes + two signs into one byte by integer multiply-adds on the bit patterns
//     (mhi * 16 + mlo + sign bits moved by multiply-high), four bytes into a u32 by PRMT.
// Bit-identical to v2..v6: e2m1_mag_fma equals the threshold table on every non-NaN f32
// (reference::num::e2m1::e2m1_index_by_fma, swept over all 2^32 on the CPU; e2m1_v7_check
// here sweeps the kernel's own function on the GPU).
__device__ __forceinline__ float e2m1_mag_fma(float a) {
    const float M = 8388608.0f;  // 2^23: ulp 1, so the fused add rounds a * m to an integer
    const float r0 = __fmaf_rn(a, 2.0f, M);          // [0, 2): rint(2a)
    const float r1 = __fmaf_rn(a, 1.0f, M + 2.0f);   // [2, 4): 2 + rint(a)
    const float r2 = __fmaf_rn(a, 0.5f, M + 4.0f);   // [4, 8): 4 + rint(a / 2)
    return fminf(fminf(fminf(r0, r1), r2), M + 7.0f);
}


// Saturating E4M3 of x and back by the sm_89+ conversion instructions (one each, instead of
// f32_to_e4m3_sat / e4m3_to_f32's ~40 integer instructions). cvt.rn.satfinite rounds to
// nearest even and sends |x| > 448 and +-inf to +-448: the reference's saturating E4M3 on every
// non-NaN f32 (e4m3_hw_check, all 2^32 inputs on the H200). NaN inputs differ: on the H200
// 2^23 - 1 NaN patterns (one sign's) gave another byte than the reference's sign | 0x7f (session
// 5). v7 never keeps such a byte: a NaN scale makes out_scale NaN, and the block goes to the
// generic path, which recomputes the scale in software.
__device__ __forceinline__ u8 e4m3_sat_hw(float x) {
    u16 r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %1;" : "=h"(r) : "f"(x));
    return (u8)(r & 0xffu);
}
__device__ __forceinline__ float e4m3_to_f32_hw(u8 b) {
    u32 h2;
    const u16 in = (u16)b;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(in));
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((u16)(h2 & 0xffffu)));
    return f;
}

__device__ __forceinline__ u32 max_u16x2(u32 a, u32 b) {
    u32 d;
    asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// One 16-element block of 16-bit input (DTC = DT_BF16 / DT_F16), kernel mode. Returns false
// (nothing written to c / *sfb) when the block needs the generic path.
template <int DTC>
__device__ __forceinline__ bool nvfp4_v7_block(const uint4& u0, const uint4& u1, float global, float rcp6,
                                               float rcp_g, u32 c[2], u8* sfb_out) {
    const u32 w[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
    u32 mx = w[0] & 0x7fff7fffu;
#pragma unroll
    for (int j = 1; j < 8; ++j) mx = max_u16x2(mx, w[j] & 0x7fff7fffu);
    const u32 m16 = max(mx & 0xffffu, mx >> 16);
    // NaN / inf patterns are above every finite one (bf16 0x7f80, f16 0x7c00).
    if (m16 >= (DTC == DT_BF16 ? 0x7f80u : 0x7c00u)) return false;
    const float vmax = DTC == DT_BF16 ? __uint_as_float(m16 << 16) : f16_to_f32((u16)m16);
    const u8 sfb = e4m3_sat_hw(global * (vmax * rcp6));
    const float sf_val = e4m3_to_f32_hw(sfb);
    const float out_scale = sf_val != 0.0f ? rcp_approx_ftz(sf_val * rcp_g) : 0.0f;
    // Finite and not negative (as an integer: also rejects NaN): q = x * out_scale keeps x's sign.
    if (__float_as_uint(out_scale) >= 0x7f800000u) return false;
    u32 b[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        float lo, hi;
        if (DTC == DT_BF16) {
            lo = __uint_as_float(w[j] << 16);
            hi = __uint_as_float(w[j] & 0xffff0000u);
        } else {
            lo = f16_to_f32((u16)(w[j] & 0xffffu));
            hi = f16_to_f32((u16)(w[j] >> 16));
        }
        // Low byte: index_lo | index_hi << 4 (2^23 + index bit patterns; no carry).
        b[j] = e2m1_mag_fma_bits(fabsf(hi * out_scale)) * 16u + e2m1_mag_fma_bits(fabsf(lo * out_scale));
    }
    // Sign bits: byte j of s_lo / s_hi is byte 1 / 3 of w[j] (bit 7 = the sign of element
    // 2j / 2j + 1); they go to bits 3 / 7 of code byte j.
    const u32 p01 = __byte_perm(w[0], w[1], 0x7531), p23 = __byte_perm(w[2], w[3], 0x7531);
    const u32 p45 = __byte_perm(w[4], w[5], 0x7531), p67 = __byte_perm(w[6], w[7], 0x7531);
    const u32 lo_s0 = __byte_perm(p01, p23, 0x6420), hi_s0 = __byte_perm(p01, p23, 0x7531);
    const u32 lo_s1 = __byte_perm(p45, p67, 0x6420), hi_s1 = __byte_perm(p45, p67, 0x7531);
    const u32 m0 = __byte_perm(__byte_perm(b[0], b[1], 0x0040), __byte_perm(b[2], b[3], 0x0040), 0x5410);
    const u32 m1 = __byte_perm(__byte_perm(b[4], b[5], 0x0040), __byte_perm(b[6], b[7], 0x0040), 0x5410);
    c[0] = m0 | ((lo_s0 >> 4) & 0x08080808u) | (hi_s0 & 0x80808080u);
    c[1] = m1 | ((lo_s1 >> 4) & 0x08080808u) | (hi_s1 & 0x80808080u);
    *sfb_out = sfb;
    return true;
}

// The generic path as a call (not inlined four times into the fast loop's body).
__device__ __noinline__ void nvfp4_generic_block_call(const void* __restrict__ x, int dt, i64 m, i64 k, i64 cols,
                                                      i64 kb, float global, int mode, int layout,
                                                      u32* __restrict__ x_fp4, u8* __restrict__ sf) {
    nvfp4_generic_block(x, dt, m, k, cols, kb, global, mode, layout, x_fp4, sf);
}

// The row loop of v6 / v7 / v8 (R rows per thread, every row's loads before any math):
// V7 = false: v6's block (nvfp4_fast_block, two u32 stores, generic path inlined); V7 = true:
// v7's block (nvfp4_v7_block, one uint2 store, the generic path as a call, also for the blocks
// v7's fast path declines).
template <int DTC, int R, bool V7>
__device__ __forceinline__ void nvfp4_rows_body(const void* __restrict__ x, int dt, i64 rows, i64 cols,
                                                       const float* __restrict__ global_p, int mode, int layout,
                                                       i64 rows_p, i64 kb_p, u32* __restrict__ x_fp4,
                                                       u8* __restrict__ sf) {
    const i64 kb = cols / 16;
    const float global = *global_p;
    const i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= kb_p) return;
    const bool fast = mode == MODE_KERNEL && dt == DTC;
    const float rcp6 = rcp_approx_ftz(6.0f), rcp_g = rcp_approx_ftz(global);
    for (i64 m0 = (i64)blockIdx.y * R; m0 < rows_p; m0 += (i64)gridDim.y * R) {
        if (!fast) {
            for (int r = 0; r < R; ++r) {
                const i64 m = m0 + r;
                if (m >= rows_p) break;
                if (m >= rows || k >= kb) {
                    sf[sf_offset(m, k, kb, layout)] = 0;
                    continue;
                }
                if (V7) nvfp4_generic_block_call(x, dt, m, k, cols, kb, global, mode, layout, x_fp4, sf);
                else nvfp4_generic_block(x, dt, m, k, cols, kb, global, mode, layout, x_fp4, sf);
            }
            continue;
        }
        uint4 u[R][2];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const i64 m = m0 + r;
            u[r][0] = make_uint4(0u, 0u, 0u, 0u);
            u[r][1] = u[r][0];
            if (m < rows && k < kb) {
                const uint4* p = (const uint4*)((const u16*)x + (m * cols + k * 16));
                u[r][0] = __ldg(p);
                u[r][1] = __ldg(p + 1);
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const i64 m = m0 + r;
            if (m >= rows_p) break;
            if (m >= rows || k >= kb) {
                sf[sf_offset(m, k, kb, layout)] = 0;
                continue;
            }
            u32 c[2];
            if (V7) {
                u8 sfb;
                if (nvfp4_v7_block<DTC>(u[r][0], u[r][1], global, rcp6, rcp_g, c, &sfb)) {
                    *(uint2*)(x_fp4 + 2 * (m * kb + k)) = make_uint2(c[0], c[1]);
                    sf[sf_offset(m, k, kb, layout)] = sfb;
                } else {
                    nvfp4_generic_block_call(x, dt, m, k, cols, kb, global, mode, layout, x_fp4, sf);
                }
                continue;
            }
            const u8 sfb = nvfp4_fast_block(u[r][0], u[r][1], DTC, global, rcp6, rcp_g, c);
            x_fp4[2 * (m * kb + k)] = c[0];
            x_fp4[2 * (m * kb + k) + 1] = c[1];
            sf[sf_offset(m, k, kb, layout)] = sfb;
        }
    }
}

#define NVFP4_V6_ROWS 4
template <int DTC>
__device__ __forceinline__ void nvfp4_quantize_v6_body(const void* __restrict__ x, int dt, i64 rows, i64 cols,
                                                       const float* __restrict__ global_p, int mode, int layout,
                                                       i64 rows_p, i64 kb_p, u32* __restrict__ x_fp4,
                                                       u8* __restrict__ sf) {
    nvfp4_rows_body<DTC, NVFP4_V6_ROWS, false>(x, dt, rows, cols, global_p, mode, layout, rows_p, kb_p, x_fp4, sf);
}

NVFP4_DTC_ENTRY(nvfp4_quantize_v6_bf16, nvfp4_quantize_v6_body, DT_BF16)
NVFP4_DTC_ENTRY(nvfp4_quantize_v6_f16, nvfp4_quantize_v6_body, DT_F16)

#define NVFP4_V7_ROWS 4
template <int DTC, int R = NVFP4_V7_ROWS>
__device__ __forceinline__ void nvfp4_quantize_v7_body(const void* __restrict__ x, int dt, i64 rows, i64 cols,
                                                       const float* __restrict__ global_p, int mode, int layout,
                                                       i64 rows_p, i64 kb_p, u32* __restrict__ x_fp4,
                                                       u8* __restrict__ sf) {
    nvfp4_rows_body<DTC, R, true>(x, dt, rows, cols, global_p, mode, layout, rows_p, kb_p, x_fp4, sf);
}

NVFP4_DTC_ENTRY(nvfp4_quantize_v7_bf16, nvfp4_quantize_v7_body, DT_BF16)
NVFP4_DTC_ENTRY(nvfp4_quantize_v7_f16, nvfp4_quantize_v7_body, DT_F16)

// v8 (session 5): v7 with 2 rows per thread (v7: 4), compiled for 4 resident 256-thread blocks
// per SM (at most 64 registers; v7 takes 80, so 3 blocks: 37.5% occupancy, 33% achieved, DRAM
// 72% busy in ncu at 8192^2). Same per-block arithmetic.
template <int DTC>
__device__ __forceinline__ void nvfp4_quantize_v8_body(const void* __restrict__ x, int dt, i64 rows, i64 cols,
                                                       const float* __restrict__ global_p, int mode, int layout,
                                                       i64 rows_p, i64 kb_p, u32* __restrict__ x_fp4,
                                                       u8* __restrict__ sf) {
    nvfp4_quantize_v7_body<DTC, 2>(x, dt, rows, cols, global_p, mode, layout, rows_p, kb_p, x_fp4, sf);
}
#define NVFP4_LB_ENTRY(NAME, BODY, DTC, MINB)                                                     \
    extern "C" __global__ void __launch_bounds__(256, MINB) NAME(                                 \
        const void* __restrict__ x, int dt, i64 rows, i64 cols, const float* __restrict__ global_p, \
        int mode, int layout, i64 rows_p, i64 kb_p, u32* __restrict__ x_fp4, u8* __restrict__ sf) { \
        BODY<DTC>(x, dt, rows, cols, global_p, mode, layout, rows_p, kb_p, x_fp4, sf);            \
    }
NVFP4_LB_ENTRY(nvfp4_quantize_v8_bf16, nvfp4_quantize_v8_body, DT_BF16, 4)
NVFP4_LB_ENTRY(nvfp4_quantize_v8_f16, nvfp4_quantize_v8_body, DT_F16, 4)

// Sweeps v7's encoder over 2^32 inputs (lo .. lo+n-1 as f32 bits): the sign of x with
// e2m1_mag_fma(|x|) against the threshold table; NaN inputs are skipped (v7's fast path never
// sees them). Counts mismatches.
extern "C" __global__ void e2m1_v7_check(u64 lo, u64 n, unsigned long long* count) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const float x = __uint_as_float((u32)(lo + i));
        if (x != x) continue;
        const u32 code = ((__float_as_uint(x) >> 28) & 8u) | (__float_as_uint(e2m1_mag_fma(fabsf(x))) & 7u);
        if (code != f32_to_e2m1(x)) atomicAdd(count, 1ull);
    }
}

// Compares v7's hardware E4M3 conversions with the software ones: e4m3_sat_hw against
// f32_to_e4m3_sat for the non-NaN inputs among lo .. lo+n-1 (as f32 bits; see e4m3_sat_hw), and (thread 0 of block 0, first
// launch) e4m3_to_f32_hw against e4m3_to_f32 for all 256 codes (NaN = NaN). Counts mismatches.
extern "C" __global__ void e4m3_hw_check(u64 lo, u64 n, unsigned long long* count) {
    if (lo == 0 && blockIdx.x == 0 && threadIdx.x == 0) {
        for (u32 b = 0; b < 256; ++b) {
            const float h = e4m3_to_f32_hw((u8)b), s = e4m3_to_f32((u8)b);
            const bool same = (h != h && s != s) || __float_as_uint(h) == __float_as_uint(s);
            if (!same) atomicAdd(count, 1ull);
        }
    }
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const float x = __uint_as_float((u32)(lo + i));
        if (x == x && e4m3_sat_hw(x) != f32_to_e4m3_sat(x)) atomicAdd(count, 1ull);
    }
}
