// philox + stochastic_round_f16 (the software path Hopper uses in place of Blackwell's cvt.rs).
// CPU spec: reference/src/num/{philox,stochastic_round}.rs; bit-exact.
//
// Versions:
//   v1  philox_rows_v1 (the op): one thread per row, explicit counter and key words.
//       philox_v1 (for kernels that draw from (seed, offset)): one thread per counter, out[i] = philox4x32(key = seed, counter = offset + i)
//       as 4 u32 words (one uint4 store).
//       sr_f16_v1: one thread per element, out[i] = stochastic_round_f16(x[i], rand[i]) with the
//       13 random bits given explicitly (the op's input), so the kernel is exact by construction.

extern "C" __global__ void philox_v1(u64 seed, u64 offset, i64 n, int rounds, uint4* __restrict__ out) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        u32x4 r = philox_seed_offset(seed, offset + (u64)i, rounds);
        out[i] = make_uint4(r.x, r.y, r.z, r.w);
    }
}

extern "C" __global__ void sr_f16_v1(const float* __restrict__ x, const u32* __restrict__ rnd, i64 n,
                                     u16* __restrict__ out) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = stochastic_round_f16(x[i], rnd[i]);
}

// philox op: one row per thread, counter (N,4) and key (N,2) u32 words.
extern "C" __global__ void philox_rows_v1(const uint4* __restrict__ ctr, const uint2* __restrict__ key,
                                          i64 n, int rounds, uint4* __restrict__ out) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        uint4 c = ctr[i];
        uint2 k = key[i];
        u32x4 cc;
        cc.x = c.x; cc.y = c.y; cc.z = c.z; cc.w = c.w;
        u32x4 r = philox4x32(cc, k.x, k.y, rounds);
        out[i] = make_uint4(r.x, r.y, r.z, r.w);
    }
}
