// Measurement of the hardware rcp.approx.ftz.f32 (see gpu/tests/rcp_measure.rs).
//
// rcp_table: out[m] = bits of rcp.approx.ftz(1.m) for every 23-bit mantissa m (input in [1, 2)).
// rcp_sweep: for every f32 bit pattern in [lo, lo + n), compares the hardware result with the
//   table-driven model of reference/src/num/rcp_approx.rs (rcp_ftz_with: NaN -> NaN, inf -> 0,
//   zero/subnormal -> inf, else table significand with the exponent adjusted and subnormal
//   results flushed); counts mismatches and records the first 64 (input bits, hw bits).

extern "C" __global__ void rcp_table(u32* __restrict__ out) {
    u32 m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m < (1u << 23)) out[m] = __float_as_uint(rcp_approx_ftz(__uint_as_float(0x3f800000u | m)));
}

__device__ __forceinline__ u32 rcp_model(u32 bits, const u32* __restrict__ table) {
    u32 sign = bits & 0x80000000u, ex = (bits >> 23) & 0xffu, man = bits & 0x7fffffu;
    if (ex == 0xffu) return man ? 0x7fffffffu : sign;
    if (ex == 0u) return sign | 0x7f800000u;
    u32 r = table[man];
    int re = (int)(r >> 23) - ((int)ex - 127);
    if (re <= 0) return sign;
    return sign | ((u32)re << 23) | (r & 0x7fffffu);
}

extern "C" __global__ void rcp_sweep(u64 lo, u64 n, const u32* __restrict__ table,
                                     unsigned long long* __restrict__ count,
                                     u32* __restrict__ first) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u32 bits = (u32)(lo + i);
        u32 hw = __float_as_uint(rcp_approx_ftz(__uint_as_float(bits)));
        u32 want = rcp_model(bits, table);
        bool both_nan = ((hw & 0x7fffffffu) > 0x7f800000u) && ((want & 0x7fffffffu) > 0x7f800000u);
        if (hw != want && !both_nan) {
            unsigned long long c = atomicAdd(count, 1ull);
            if (c < 64) { first[2 * c] = bits; first[2 * c + 1] = hw; }
        }
    }
}

// out[i] = bits of rcp.approx.ftz(in[i]) (for the CPU-side check of the Rust model).
extern "C" __global__ void rcp_list(const u32* __restrict__ in, i64 n, u32* __restrict__ out) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = __float_as_uint(rcp_approx_ftz(__uint_as_float(in[i])));
}
