// duet common header: prepended textually to every kernel file (NVRTC has no include path).
//
// Number formats here mirror reference/src/num/*.rs bit for bit (same algorithm, same NaN
// choices), so GPU and CPU agree exactly where the hardware has no instruction (FP4 and the
// software stochastic rounding on Hopper). No cuda_bf16.h / cuda_fp16.h: 16-bit floats are
// raw u16 bits with the conversions below. Compiled with --fmad=false: write fmaf explicitly.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;
typedef int i32;

#define DUET_FULL_MASK 0xffffffffu

// Programmatic dependent launch (sm_90+). A kernel whose graph edge from the kernel before it
// is programmatic (the decode engine's graphs with `--engine-pdl`: runtime::end_capture) may
// be launched while that kernel still runs. Its first statement is this: wait until every
// grid it depends on has completed and its writes are visible, then let the grids that
// depend on this one begin launching (their blocks then wait here in turn). No global memory
// is read or written before it. Without a programmatic dependency both are no-ops. A kernel
// file whose every __global__ body starts with it is PDL-safe (compile::pdl_ready; a CI test
// holds model_ops, causal_conv1d, noaux_tc_router and selective_state_update to it).
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define DUET_PDL_ENTRY() \
    asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define DUET_PDL_ENTRY() \
    do {                 \
    } while (0)
#endif
// The first statement of a kernel that does DUET_PDL_ENTRY() itself later, before its first
// access to anything an earlier kernel writes (its comment says where): e.g. the one-row GEMV
// prefetches its first weights (constant data) into L2 first. A marker for the source scan
// (compile::pdl_ready); it does nothing.
#define DUET_PDL_DEFERRED() \
    do {                    \
    } while (0)

// ---- cp.async (sm_80+): 16-byte global -> shared copies through L2 only (.cg), no registers
// held; committed in groups and waited for with at most NPENDING groups still in flight ----
__device__ __forceinline__ void duet_cp_async16(void* smem, const void* gmem) {
    const u32 sa = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem) : "memory");
}
// Zero-filling forms: `ok` false copies nothing from global memory and writes zeros (the
// source size is 0; `gmem` must still be a valid address).
__device__ __forceinline__ void duet_cp_async16_zfill(void* smem, const void* gmem, bool ok) {
    const u32 sa = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void duet_cp_async4_zfill(void* smem, const void* gmem, bool ok) {
    const u32 sa = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sa), "l"(gmem), "r"(ok ? 4 : 0)
                 : "memory");
}
// The same on a 32-bit shared-window address (duet_smem_u32 of the destination, computed once
// by the caller: no generic -> shared conversion a copy).
__device__ __forceinline__ void duet_cp_async16_s(u32 sa, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem) : "memory");
}
// A 4-byte copy issued only where `ok` (a predicated instruction: no branch around it).
__device__ __forceinline__ void duet_cp_async4_s_if(u32 sa, const void* gmem, bool ok) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n@p cp.async.ca.shared.global [%0], [%1], 4;\n}\n" ::"r"(sa),
        "l"(gmem), "r"((int)ok)
        : "memory");
}
__device__ __forceinline__ void duet_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int NPENDING>
__device__ __forceinline__ void duet_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(NPENDING) : "memory");
}

// ---- schedule jitter (race hunting; off unless DUET_NVRTC_DEFINES=DUET_JITTER=NS) ----
// duet_jitter(): a warp-uniform pause of up to ~NS ns at a hand-over point (a quarter of the
// calls, drawn from the SM clock, the block and the warp), so the roles of a warp-specialised
// kernel meet their barriers in orders a plain run rarely shows. A protocol that orders its
// accesses gives the same bits under any jitter; one that does not shows it here (sessions 19-37:
// racecheck reports on named-barrier hand-overs that the protocol model finds ordered). Call it
// only where the whole warp is (a __syncwarp and a shuffle inside).
#ifdef DUET_JITTER
__device__ __forceinline__ void duet_jitter() {
    __syncwarp();
    u32 r = (u32)clock64() ^ (blockIdx.x * 0x9E3779B9u) ^ ((threadIdx.x >> 5) * 0x85EBCA6Bu);
    r *= 0xC2B2AE35u;
    r ^= r >> 15;
    r = __shfl_sync(0xffffffffu, r, 0);
    if ((r & 3u) == 0) __nanosleep((r >> 2) % (u32)(DUET_JITTER));
}
#else
__device__ __forceinline__ void duet_jitter() {}
#endif

// ---- mbarrier + bulk copy engine (sm_90): cp.async.bulk global -> shared completing on an
// mbarrier (16-byte aligned addresses, sizes a multiple of 16); a phase completes when its
// arrivals are in and the expected bytes have landed (wait on the phase parity) ----
__device__ __forceinline__ u32 duet_smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void duet_mbar_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(duet_smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void duet_mbar_expect_tx(u64* bar, u32 bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(duet_smem_u32(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void duet_mbar_arrive(u64* bar) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}" ::"r"(duet_smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void duet_mbar_wait(u64* bar, u32 parity) {
    asm volatile(
        "{\n .reg .pred done;\n DUET_MBAR_WAIT_%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        " @!done bra DUET_MBAR_WAIT_%=;\n}" ::"r"(duet_smem_u32(bar)),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void duet_bulk_g2s(void* dst, const void* src, u32 bytes, u64* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     duet_smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(duet_smem_u32(bar))
                 : "memory");
}
// After thread 0's mbarrier.init: make the barriers visible to the bulk copy engine.
__device__ __forceinline__ void duet_mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Bulk store shared -> global into the thread's current bulk group (16-byte aligned, size a
// multiple of 16); commit the group, then wait until at most N of the thread's groups are
// still reading their shared memory (`_read`) or still writing global memory.
__device__ __forceinline__ void duet_bulk_s2g(void* gdst, const void* ssrc, u32 bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gdst),
                 "r"(duet_smem_u32(ssrc)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void duet_bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void duet_bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void duet_bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}


// ---- bf16 / f16 (reference/src/num/{bf16,f16}.rs: the `half` crate's semantics) ----

__device__ __forceinline__ float bf16_to_f32(u16 b) { return __uint_as_float(((u32)b) << 16); }

// Round to nearest even; NaN -> quiet NaN keeping sign and upper payload.
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u32 x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x0040u);
    u32 round_bit = 0x8000u;
    if ((x & round_bit) != 0 && (x & (3u * round_bit - 1u)) != 0) return (u16)((x >> 16) + 1u);
    return (u16)(x >> 16);
}

__device__ __forceinline__ float f16_to_f32(u16 h) {
    u32 sign = ((u32)h & 0x8000u) << 16;
    u32 e = (h >> 10) & 0x1fu;
    u32 m = h & 0x3ffu;
    if (e == 0x1f) return __uint_as_float(sign | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0u));
    if (e == 0) {
        if (m == 0) return __uint_as_float(sign);
        // Subnormal: m * 2^-24, exact in f32.
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

// Round to nearest even with gradual underflow; overflow -> inf; NaN -> quiet NaN.
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u32 x = __float_as_uint(f);
    u32 sign = x & 0x80000000u, ex = x & 0x7f800000u, man = x & 0x007fffffu;
    if (ex == 0x7f800000u) {
        u32 nan_bit = man == 0 ? 0u : 0x0200u;
        return (u16)((sign >> 16) | 0x7c00u | nan_bit | (man >> 13));
    }
    u32 hs = sign >> 16;
    int he = (int)(ex >> 23) - 127 + 15;
    if (he >= 0x1f) return (u16)(hs | 0x7c00u);
    if (he <= 0) {
        if (14 - he > 24) return (u16)hs;
        u32 m = man | 0x00800000u;
        u32 hm = m >> (14 - he);
        u32 rb = 1u << (13 - he);
        if ((m & rb) != 0 && (m & (3u * rb - 1u)) != 0) hm += 1u;
        return (u16)(hs | hm);
    }
    u32 r = hs | ((u32)he << 10) | (man >> 13);
    u32 rb = 0x1000u;
    if ((man & rb) != 0 && (man & (3u * rb - 1u)) != 0) r += 1u;
    return (u16)r;
}

// dtype codes shared with gpu/src/runtime.rs (DTYPE_F32 ...).
#define DT_F32 0
#define DT_BF16 1
#define DT_F16 2

__device__ __forceinline__ float load_as_f32(const void* p, i64 i, int dt) {
    if (dt == DT_F32) return ((const float*)p)[i];
    if (dt == DT_BF16) return bf16_to_f32(((const u16*)p)[i]);
    return f16_to_f32(((const u16*)p)[i]);
}

__device__ __forceinline__ void store_from_f32(void* p, i64 i, int dt, float v) {
    if (dt == DT_F32) ((float*)p)[i] = v;
    else if (dt == DT_BF16) ((u16*)p)[i] = f32_to_bf16(v);
    else ((u16*)p)[i] = f32_to_f16(v);
}

// Rounds through the storage dtype and back (the value the CPU sees after a cast).
__device__ __forceinline__ float round_to_dtype(float v, int dt) {
    if (dt == DT_BF16) return bf16_to_f32(f32_to_bf16(v));
    if (dt == DT_F16) return f16_to_f32(f32_to_f16(v));
    return v;
}

// ---- rcp.approx.ftz.f32: the hardware instruction (reference/src/num/rcp_approx.rs models it) ----

__device__ __forceinline__ float rcp_approx_ftz(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// ---- FP8 E4M3 (fn), saturating (reference/src/num/e4m3.rs, Saturation::Saturate) ----

// E4M3 with round-to-nearest-even and no saturation (NaN for |x| past 448; inf and NaN ->
// NaN), and the "exact" mode's reciprocal of a scale (0 for 0): NVFP4 quantize (nvfp4.cu) and
// the MoE GEMM epilogue (moe.cu). Mirror of reference/src/num/e4m3.rs.
__device__ __forceinline__ u8 f32_to_e4m3_nonsat(float x) {
    u32 bits = __float_as_uint(x);
    u8 sign = (u8)((bits >> 24) & 0x80u);
    if (x != x) return sign | 0x7f;
    u32 a_bits = bits & 0x7fffffffu;
    float a = __uint_as_float(a_bits);
    if (a_bits == 0x7f800000u) return sign | 0x7f;
    u32 mag;
    if (a < 0.015625f) {
        mag = (u32)rintf(a * 512.0f);
    } else {
        u32 lsb = (a_bits >> 20) & 1u;
        u32 r = (a_bits + 0x7ffffu + lsb) >> 20;
        mag = r - (120u << 3);
    }
    if (mag > 0x7eu) return sign | 0x7f;
    return sign | (u8)mag;
}

__device__ __forceinline__ float exact_rcp(float v) { return v == 0.0f ? 0.0f : 1.0f / v; }

__device__ __forceinline__ u8 f32_to_e4m3_sat(float x) {
    u32 bits = __float_as_uint(x);
    u8 sign = (u8)((bits >> 24) & 0x80u);
    if (x != x) return sign | 0x7f;
    u32 a_bits = bits & 0x7fffffffu;
    float a = __uint_as_float(a_bits);
    if (a_bits == 0x7f800000u) return sign | 0x7e;
    u32 mag;
    if (a < 0.015625f) {  // 2^-6: subnormal grid, step 2^-9 (exact scaling, then RNE)
        mag = (u32)rintf(a * 512.0f);
    } else {
        u32 lsb = (a_bits >> 20) & 1u;
        u32 r = (a_bits + 0x7ffffu + lsb) >> 20;
        mag = r - (120u << 3);
    }
    if (mag > 0x7eu) return sign | 0x7e;
    return sign | (u8)mag;
}

__device__ __forceinline__ float e4m3_to_f32(u8 b) {
    u32 e = (b >> 3) & 0xfu, m = b & 7u;
    float mag;
    if ((b & 0x7f) == 0x7f) mag = __uint_as_float(0x7fc00000u);
    else if (e == 0) mag = (float)m * 0.001953125f;  // m * 2^-9
    else mag = __uint_as_float(((e + 120u) << 23) | (m << 20));
    return (b & 0x80) ? -mag : mag;
}

// ---- FP4 E2M1 (reference/src/num/e2m1.rs): nearest, ties to even index, saturate, NaN -> 0x7 ----

__device__ __forceinline__ u32 f32_to_e2m1(float x) {
    if (x != x) return 0x7u;
    u32 sign = (__float_as_uint(x) >> 28) & 0x8u;
    float a = fabsf(x);
    u32 idx = a <= 0.25f ? 0u
            : a < 0.75f  ? 1u
            : a <= 1.25f ? 2u
            : a < 1.75f  ? 3u
            : a <= 2.5f  ? 4u
            : a < 3.5f   ? 5u
            : a <= 5.0f  ? 6u
                         : 7u;
    return sign | idx;
}

// The E2M1 magnitude index of a >= 0 (or +inf / NaN: 7) as the low 3 bits of the result, by
// three FMAs and integer minima (nvfp4.cu's e2m1_mag_fma: region by region rint on the E2M1
// grid; reference::num::e2m1::e2m1_index_by_fma, checked against f32_to_e2m1 over all 2^32
// on the CPU). Shared by nvfp4.cu v7 / v8 and moe.cu's X epilogue.
__device__ __forceinline__ u32 e2m1_mag_fma_bits(float a) {
    const float M = 8388608.0f;
    const u32 r0 = __float_as_uint(__fmaf_rn(a, 2.0f, M));
    const u32 r1 = __float_as_uint(__fmaf_rn(a, 1.0f, M + 2.0f));
    const u32 r2 = __float_as_uint(__fmaf_rn(a, 0.5f, M + 4.0f));
    return min(min(min(r0, r1), r2), 0x4b000007u);
}

__device__ __forceinline__ float e2m1_to_f32(u32 code) {
    const float v[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float m = v[code & 7u];
    return (code & 8u) ? -m : m;
}

// ---- Philox-4x32-R (reference/src/num/philox.rs) ----

struct u32x4 { u32 x, y, z, w; };

__device__ __forceinline__ u32x4 philox4x32(u32x4 c, u32 k0, u32 k1, int rounds) {
    for (int i = 0; i < rounds; ++i) {
        if (i > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        u32 hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        u32 hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        u32x4 n;
        n.x = hi1 ^ c.y ^ k0;
        n.y = lo1;
        n.z = hi0 ^ c.w ^ k1;
        n.w = lo0;
        c = n;
    }
    return c;
}

// key = (seed lo, seed hi), counter = (offset lo, offset hi, 0, 0).
__device__ __forceinline__ u32x4 philox_seed_offset(u64 seed, u64 offset, int rounds) {
    u32x4 c;
    c.x = (u32)offset; c.y = (u32)(offset >> 32); c.z = 0u; c.w = 0u;
    return philox4x32(c, (u32)seed, (u32)(seed >> 32), rounds);
}

// ---- f32 -> f16 stochastic rounding from 13 random bits (reference/src/num/stochastic_round.rs) ----

__device__ __forceinline__ u16 stochastic_round_f16(float x, u32 rnd) {
    u32 bits = __float_as_uint(x);
    u16 sign = (u16)((bits >> 16) & 0x8000u);
    u32 mag = bits & 0x7fffffffu;
    if ((mag >> 23) == 0xffu) return sign | ((mag & 0x7fffffu) ? 0x7e00 : 0x7c00);
    u32 y = mag + (rnd & 0x1fffu);
    u32 e = y >> 23;
    u32 h = e > 142u ? 0x7c00u : e < 113u ? 0u : (((e - 112u) << 10) | ((y & 0x7fffffu) >> 13));
    return sign | (u16)h;
}

// ---- warp helpers ----

__device__ __forceinline__ float warp_sum_f32(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(DUET_FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max_f32(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(DUET_FULL_MASK, v, o));
    return v;
}

__device__ __forceinline__ u64 warp_max_u64(u64 v) {
    for (int o = 16; o > 0; o >>= 1) {
        u64 w = __shfl_xor_sync(DUET_FULL_MASK, v, o);
        v = w > v ? w : v;
    }
    return v;
}

// Order-preserving map of f32 bits to u32 (CUB's TwiddleIn for floats): larger float -> larger
// key; -0 < +0; positive NaN above +inf, negative NaN below -inf.
__device__ __forceinline__ u32 twiddle_f32(float f) {
    u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// ---- Mamba-2 SSM state cache formats (selective_state_update.cu, ssu_multi_token.cu) ----

#define ST_F32 0
#define ST_BF16 1
#define ST_F16 2
#define ST_I16 3

// Element i of a state cache in format `dt` as f32 (int16: times its row's decode scale).
__device__ __forceinline__ float ssu_load_state(const void* st, i64 i, i64 dt, float decode) {
    switch (dt) {
        case ST_F32: return ((const float*)st)[i];
        case ST_BF16: return bf16_to_f32(((const u16*)st)[i]);
        case ST_F16: return f16_to_f32(((const u16*)st)[i]);
        default: return __fmul_rn((float)((const short*)st)[i], decode);
    }
}

// ---- duet_tanhf: f32 tanh from plain IEEE f32 operations (reference/src/num/tanhf.rs) ----
// Bit-identical to the Rust function: same constants (bits), same operations in the same order,
// every one spelled out (the file is compiled with --fmad=false; no flush-to-zero). Max 1 ulp
// from correctly rounded over all 2^32 inputs (gpu/NOTES.md, noaux_tc_router).

__device__ __forceinline__ float duet_tanhf(float y) {
    const u32 bits = __float_as_uint(y);
    const u32 abits = bits & 0x7fffffffu;
    if (abits > 0x7f800000u) return y;  // NaN: unchanged
    const u32 sign = bits & 0x80000000u;
    const float a = __uint_as_float(abits);
    float r;
    if (a < 0.625f) {
        const float s = __fmul_rn(a, a);
        float p = __uint_as_float(0x3b0cbd8bu);
        p = __fmaf_rn(p, s, __uint_as_float(0xbc061094u));
        p = __fmaf_rn(p, s, __uint_as_float(0x3cb1ca69u));
        p = __fmaf_rn(p, s, __uint_as_float(0xbd5cf7beu));
        p = __fmaf_rn(p, s, __uint_as_float(0x3e088836u));
        p = __fmaf_rn(p, s, __uint_as_float(0xbeaaaaaau));
        const float q = __fmul_rn(p, s);
        r = __fmaf_rn(q, a, a);
    } else if (a < 9.1f) {
        const float magic = 12582912.0f;  // 1.5 * 2^23
        const float z = __fadd_rn(a, a);
        const float j = __fmaf_rn(z, __uint_as_float(0x3fb8aa3bu), magic);
        const float k = __fsub_rn(j, magic);
        const int ki = (int)(__float_as_uint(j) - __float_as_uint(magic));
        float u = __fmaf_rn(-k, __uint_as_float(0x3f317218u), z);
        u = __fmaf_rn(-k, __uint_as_float(0xb102e308u), u);
        float q = __uint_as_float(0x3ab5121fu);
        q = __fmaf_rn(q, u, __uint_as_float(0x3c091cebu));
        q = __fmaf_rn(q, u, __uint_as_float(0x3d2aac79u));
        q = __fmaf_rn(q, u, __uint_as_float(0x3e2aaa49u));
        q = __fmaf_rn(q, u, __uint_as_float(0x3efffffeu));
        const float u2 = __fmul_rn(u, u);
        float m = __fmaf_rn(q, u2, u);
        m = __fadd_rn(m, 1.0f);
        const float e = __fmul_rn(m, __uint_as_float((u32)(ki + 127) << 23));
        const float d = __fadd_rn(e, 1.0f);
        r = __fsub_rn(1.0f, __fdiv_rn(2.0f, d));
    } else {
        r = 1.0f;
    }
    return __uint_as_float(__float_as_uint(r) | sign);
}

// The router's f32 sigmoid (SigmoidMode::TanhF32): 0.5 * duet_tanhf(0.5 * x) + 0.5.
__device__ __forceinline__ float sigmoid_tanh_f32(float x) {
    const float t = duet_tanhf(__fmul_rn(0.5f, x));
    return __fadd_rn(__fmul_rn(0.5f, t), 0.5f);
}

// ---- Register decode of NVFP4 for the f16 tensor cores (model_ops.cu's slot GEMV, moe.cu's
// r8 grouped GEMM; the design and the exactness argument: model_ops.cu, "The routed slots'
// NVFP4 GEMV on the tensor cores"). cvt.rn.f16x2.e4m3x2 needs sm_89+.
__device__ __forceinline__ u32 slotm_hmul2(u32 a, u32 b) {
    u32 d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
// Byte 0 of v as an f16x2 (b, b) of its E4M3 value.
__device__ __forceinline__ u32 slotm_scale2(u32 v) {
    u32 d;
    asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, lo;\n\t}"
        : "=r"(d)
        : "r"(__byte_perm(v, 0, 0x0000)));
    return d;
}
// (a & 0x0E0E0E0E) | (b & ~0x0E0E0E0E) as one LOP3.
__device__ __forceinline__ u32 slotm_sel(u32 a, u32 b) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, 0x0E0E0E0E, 0xE4;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
// The eight E2M1 codes of word q (nibble i: code i) as four f16x2 of value * 2^-14:
// d[0] = (code 0, code 4), d[1] = (1, 5), d[2] = (2, 6), d[3] = (3, 7). An f16's high byte
// s000_eem0 (sign, the code's exponent bits as the exponent field's two low bits, its mantissa
// bit as the mantissa's top bit; low byte 0) is that code's value * 2^-14 (subnormal for the
// codes 0 and 1). ev / od hold those bytes of the even / odd codes (byte j: code 2 j / 2 j + 1),
// from the sign bits sg and shifts of q; one byte permute (zero bytes from RZ) makes each pair.
__device__ __forceinline__ void slotm_decode8(u32 q, u32* d) {
    const u32 sg = q & 0x88888888u;
    // sg << 4 and sg have sign bits at byte bits 7 and 3 only, so (a & C) | (b & ~C) with C =
    // 0x0E0E0E0E (one LOP3, LUT 0xE4) keeps just bit 7 of them.
    const u32 ev = slotm_sel((q << 1), sg << 4);
    const u32 od = slotm_sel((q >> 3), sg);
    d[0] = __byte_perm(ev, 0, 0x2404);
    d[1] = __byte_perm(od, 0, 0x2404);
    d[2] = __byte_perm(ev, 0, 0x3414);
    d[3] = __byte_perm(od, 0, 0x3414);
}
__device__ __forceinline__ void slotm_mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                          u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ u32 slotm_f16(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}
__device__ __forceinline__ float slotm_f32(u32 h) {
    float v;
    asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"((unsigned short)h));
    return v;
}
// One word j of a step for the rows g (wa, scale sa) and g + 8 (wb, sb) against the staged x
// fragment b: two mmas.
__device__ __forceinline__ void slotm_word(float* c, u32 wa, u32 wb, u32 sa, u32 sb, uint4 b) {
    u32 da[4], db[4];
    slotm_decode8(wa, da);
    slotm_decode8(wb, db);
    slotm_mma(c, slotm_hmul2(da[0], sa), slotm_hmul2(db[0], sb), slotm_hmul2(da[1], sa),
              slotm_hmul2(db[1], sb), b.x, b.y);
    slotm_mma(c, slotm_hmul2(da[2], sa), slotm_hmul2(db[2], sb), slotm_hmul2(da[3], sa),
              slotm_hmul2(db[3], sb), b.z, b.w);
}

// ---- wgmma (sm_90a) helpers (moe.cu w64, ssd_chunk_scan.cu v3) ----
// Shared-memory operand descriptor of a K-major bf16 tile in the no-swizzle layout: core
// matrices of 8 rows x 16 bytes (128 contiguous bytes, row r of one at 16 r), LBO = bytes
// between core matrices adjacent along K, SBO = bytes between core matrices adjacent along
// M / N; the address and both offsets in units of 16 bytes (bits 0-13, 16-29, 32-45), base
// offset 0 and swizzle mode 0 (bits 49-51, 62-63).
__device__ __forceinline__ u64 wg_desc(const void* smem, u32 lbo, u32 sbo) {
    const u32 a = (u32)__cvta_generic_to_shared(smem);
    return (u64)((a & 0x3FFFFu) >> 4) | ((u64)((lbo >> 4) & 0x3FFFu) << 16) |
           ((u64)((sbo >> 4) & 0x3FFFu) << 32);
}
// Makes this thread's generic-proxy shared-memory writes visible to the async proxy (wgmma
// reads its operands through it); then a barrier for everyone's.
__device__ __forceinline__ void wg_fence_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#ifndef DUET_RC_NO_WGMMA
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_wait0() {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Waits until at most one committed group is pending (the newest).
__device__ __forceinline__ void wg_wait1() {
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}
#else
// racecheck bisection builds only (ssd_chunk_scan.cu, scripts/calls/s38c1.sh): no wgmma at all
__device__ __forceinline__ void wg_fence() {}
__device__ __forceinline__ void wg_commit() {}
__device__ __forceinline__ void wg_wait0() {}
__device__ __forceinline__ void wg_wait1() {}
#endif
