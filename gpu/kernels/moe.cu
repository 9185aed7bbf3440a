// LatentMoE expert layer on the GPU. CPU spec: reference/src/ops/{moe_permute,moe_gemm,
// moe_expert_gemm1_relu2_nvfp4,moe_expert_gemm2,moe_finalize}.rs.
//
// moe_permute (bit-exact): the T*k assignments are split into W contiguous ranges, one warp
// each. perm_count: per-(range, expert) counts by atomics. perm_colscan: per expert, the
// exclusive prefix over ranges (in place) and the expert total. perm_offsets: single-block scan
// of the totals -> expert_offsets (i32 and i64). perm_scatter: each warp walks its range in
// order, 32 assignments at a time; __match_any_sync ranks equal experts inside the 32, so rows
// come out stable (expert, then token, then slot), exactly the reference's counting sort.
//
// moe_tile_schedule: one block turns the offsets into the list of (expert, first row) m-tiles of
// BM rows (sum over experts of ceil(rows_e / BM)); padding entries get expert -1. The grouped
// GEMMs take one m-tile per blockIdx.x (computed on the device: no host sync, 64-bit rows).
//
// moe_gemm_<cfg>_<a><b>_<epi>: grouped GEMM, out[r, n] = alpha_e * sum_k x[r, k] w[e, n, k] for
// rows r of expert e, alpha_e = 1 / (global_x * global_w[e]) (IEEE f32). Operands are NVFP4
// (E2M1 codes + E4M3 block scales; `f`) or bf16 (`b`); NVFP4 is dequantized into shared memory
// as bf16 (e2m1 * e4m3 is exact in bf16: <= 6 significant bits), by a 256-entry byte -> bf16x2
// table and one mul.rn.bf16x2 per byte. Products on tensor cores
// (mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32), fp32 accumulation. The next k-tile's raw
// operands are loaded into registers while the current one is multiplied.
//   cfg m16: BM 16, BN 64, BK 256, 4 warps (1 x 4): small M per expert (decode, T <= ~64).
//   cfg m64: BM 64, BN 128, BK 64, 4 warps (2 x 2): prefill.
//   epi q (GEMM1): in registers, h = acc * alpha, relu(h)^2 (optionally rounded to bf16), then
//     NVFP4 quantization of each 16-column block (the 4 lanes of an mma quad hold a block's 16
//     values: amax by two shuffles, the scale math of nvfp4.cu's nvfp4_block, both modes), codes
//     gathered by shuffles and stored once as one u64 + one scale byte per block; optional bf16
//     h. With `amax_out` set it only computes amax(relu^2) (atomicMax on the f32 bits, values are
//     >= 0) for the derived global scale; the second launch then recomputes identical values.
//   epi o (GEMM2): out = acc * alpha, f32 or bf16.
//
// moe_finalize_v1 (bit-exact): out[t, h] = sum_j w[t, j] * eo[inverse[t, j], h], j ascending,
// product rounded then added (no FMA), as the reference.

#define MODE_KERNEL 0
#define MODE_EXACT 1

// ---------------------------------------------------------------------------------------------
// moe_permute

// Exclusive scan of one i64 per thread over a block of blockDim.x (a multiple of 32, <= 1024)
// threads; *total receives the sum. Uses 33 i64 of shared memory (`ws`).
__device__ __forceinline__ i64 block_exclusive_scan(i64 v, i64* ws, i64* total) {
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    i64 x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        i64 y = __shfl_up_sync(DUET_FULL_MASK, x, o);
        if (lane >= (u32)o) x += y;
    }
    if (lane == 31) ws[warp] = x;
    __syncthreads();
    if (warp == 0) {
        i64 w = lane < nw ? ws[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            i64 y = __shfl_up_sync(DUET_FULL_MASK, w, o);
            if (lane >= (u32)o) w += y;
        }
        if (lane < nw) ws[lane] = w - ws[lane];  // exclusive prefix of the warp totals
        if (lane == 31) ws[32] = w;
    }
    __syncthreads();
    const i64 r = ws[warp] + x - v;
    *total = ws[32];
    return r;
}

__device__ __forceinline__ i64 load_index(const void* p, i64 i, int is64) {
    return is64 ? ((const i64*)p)[i] : (i64)((const i32*)p)[i];
}

// grid-stride over the n assignments; range w = i / chunk. counts[w * E + e] zeroed by the host.
extern "C" __global__ void moe_perm_count(const void* __restrict__ idx, int is64, i64 n, i64 chunk,
                                          i64 E, u32* __restrict__ counts) {
    DUET_PDL_ENTRY();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        i64 e = load_index(idx, i, is64);
        if (e < 0 || e >= E) continue;  // validated on the host
        atomicAdd(&counts[(i / chunk) * E + e], 1u);
    }
}

// One thread per expert: counts[w][e] <- sum_{w' < w} counts[w'][e]; totals[e] <- the sum.
extern "C" __global__ void moe_perm_colscan(u32* __restrict__ counts, i64 W, i64 E,
                                            u32* __restrict__ totals) {
    DUET_PDL_ENTRY();
    i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    u32 run = 0;
    for (i64 w = 0; w < W; ++w) {
        u32 c = counts[w * E + e];
        counts[w * E + e] = run;
        run += c;
    }
    totals[e] = run;
}

__device__ __forceinline__ void tile_schedule_block(const i64* off64, i64 E, i64 bm,
                                                    i64 max_tiles, i32* __restrict__ tile_expert,
                                                    i64* __restrict__ tile_row, i64* ws);

// Single block (1024 threads): exclusive scan of totals -> offsets (E + 1 entries), counts out.
// With tile_expert set (and off64), also the grouped GEMMs' m-tile schedule of bm rows
// (moe_tile_schedule's, from the offsets just written: one launch fewer before the GEMMs).
extern "C" __global__ void moe_perm_offsets(const u32* __restrict__ totals, i64 E,
                                            i32* __restrict__ counts_out, i32* __restrict__ off32,
                                            i64* __restrict__ off64, i64 bm, i64 max_tiles,
                                            i32* __restrict__ tile_expert,
                                            i64* __restrict__ tile_row) {
    DUET_PDL_ENTRY();
    __shared__ i64 ws[33];
    const i64 per = (E + blockDim.x - 1) / blockDim.x;
    const i64 lo = (i64)threadIdx.x * per;
    const i64 hi = lo + per < E ? lo + per : E;
    i64 s = 0;
    for (i64 e = lo; e < hi; ++e) s += totals[e];
    i64 total;
    i64 run = block_exclusive_scan(s, ws, &total);
    if (threadIdx.x == 0) {
        if (off32) off32[E] = (i32)total;
        if (off64) off64[E] = total;
    }
    for (i64 e = lo; e < hi; ++e) {
        if (off32) off32[e] = (i32)run;
        if (off64) off64[e] = run;
        if (counts_out) counts_out[e] = (i32)totals[e];
        run += totals[e];
    }
    if (tile_expert && off64) {
        __syncthreads();  // off64 (global, this block's writes) and ws are read again below
        tile_schedule_block(off64, E, bm, max_tiles, tile_expert, tile_row, ws);
    }
}

// One warp per range of `chunk` assignments (in order). base[w * E + e] is the range's exclusive
// prefix from moe_perm_colscan; it is advanced as the warp goes (only this warp touches row w).
extern "C" __global__ void moe_perm_scatter(const void* __restrict__ idx, int is64, i64 n, i64 k,
                                            i64 chunk, i64 W, i64 E, u32* __restrict__ base,
                                            const i64* __restrict__ off64,
                                            i32* __restrict__ ptoken, i32* __restrict__ pslot,
                                            i32* __restrict__ inverse) {
    DUET_PDL_ENTRY();
    const i64 w = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const u32 lane = threadIdx.x & 31;
    if (w >= W) return;  // whole warps exit together (blockDim is a multiple of 32)
    const i64 lo = w * chunk;
    const i64 hi = lo + chunk < n ? lo + chunk : n;
    const u32 lt = (1u << lane) - 1u;
    for (i64 b = lo; b < hi; b += 32) {
        const i64 i = b + lane;
        const bool valid = i < hi;
        i64 e = valid ? load_index(idx, i, is64) : -1;
        if (e < 0 || e >= E) e = -1;
        const u32 key = e < 0 ? 0xffffffffu : (u32)e;
        const u32 same = __match_any_sync(DUET_FULL_MASK, key);
        const u32 rank = __popc(same & lt);
        u32 cur = 0;
        if (e >= 0) cur = base[w * E + e];
        __syncwarp();
        if (e >= 0) {
            const i64 r = off64[e] + (i64)cur + rank;
            ptoken[r] = (i32)(i / k);
            pslot[r] = (i32)(i % k);
            inverse[i] = (i32)r;
            if (rank == 0) base[w * E + e] = cur + __popc(same);
        }
        __syncwarp();
    }
}

// ---------------------------------------------------------------------------------------------
// m-tile schedule of the grouped GEMMs

// One block (blockDim a multiple of 32, <= 1024): the m-tiles of bm rows from off64, in
// expert order; entries past the count get expert -1. ws: 33 i64 of shared memory.
__device__ __forceinline__ void tile_schedule_block(const i64* off64, i64 E, i64 bm,
                                                    i64 max_tiles, i32* __restrict__ tile_expert,
                                                    i64* __restrict__ tile_row, i64* ws) {
    const i64 per = (E + blockDim.x - 1) / blockDim.x;
    const i64 lo = (i64)threadIdx.x * per;
    const i64 hi = lo + per < E ? lo + per : E;
    i64 s = 0;
    // Through L2 (__ldcg): moe_perm_offsets reads the offsets it has just written.
    for (i64 e = lo; e < hi; ++e) s += (__ldcg(off64 + e + 1) - __ldcg(off64 + e) + bm - 1) / bm;
    i64 total;
    i64 pos = block_exclusive_scan(s, ws, &total);
    for (i64 e = lo; e < hi; ++e) {
        const i64 r0 = __ldcg(off64 + e), r1 = __ldcg(off64 + e + 1);
        for (i64 r = r0; r < r1; r += bm) {
            if (pos < max_tiles) {
                tile_expert[pos] = (i32)e;
                tile_row[pos] = r;
            }
            ++pos;
        }
    }
    for (i64 t = total + threadIdx.x; t < max_tiles; t += blockDim.x) {
        tile_expert[t] = -1;
        tile_row[t] = 0;
    }
}

// Single block (1024 threads). tile_expert/tile_row hold max_tiles entries.
extern "C" __global__ void moe_tile_schedule(const i64* __restrict__ off64, i64 E, i64 bm,
                                             i64 max_tiles, i32* __restrict__ tile_expert,
                                             i64* __restrict__ tile_row) {
    DUET_PDL_ENTRY();
    __shared__ i64 ws[33];
    tile_schedule_block(off64, E, bm, max_tiles, tile_expert, tile_row, ws);
}

// ---------------------------------------------------------------------------------------------
// grouped GEMM

// E4M3 without saturation and the exact reciprocal: common.cuh (shared with nvfp4.cu).

__device__ __forceinline__ u32 bf16x2_mul(u32 a, u32 b) {
    u32 d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

__device__ __forceinline__ void mma_bf16(float c[4], const u32 a[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One 16-element K chunk of an operand row, raw (before dequantization).
template <bool F4>
struct Chunk;
template <>
struct Chunk<true> {
    uint2 codes;
    u32 sf;
};
template <>
struct Chunk<false> {
    uint4 lo, hi;
};

// Loads chunk (row, k0 .. k0+15) of a [rows, K] operand; out-of-range rows/columns read as 0.
// F4: codes at q + row*K/2, scales at sf + row*K/16 (K % 16 == 0).
// bf16: vec = K % 8 == 0 (16-byte loads), else element loads.
__device__ __forceinline__ void load_chunk(Chunk<true>& c, const u8* __restrict__ q,
                                           const u8* __restrict__ sf, i64 row, bool row_ok, i64 k0,
                                           i64 K, bool vec) {
    (void)vec;
    if (row_ok && k0 < K) {
        c.codes = __ldg((const uint2*)(q + row * (K >> 1) + (k0 >> 1)));
        c.sf = __ldg(sf + row * (K >> 4) + (k0 >> 4));
    } else {
        c.codes = make_uint2(0u, 0u);
        c.sf = 0u;
    }
}

__device__ __forceinline__ void load_chunk(Chunk<false>& c, const u8* __restrict__ q,
                                           const u8* __restrict__ sf, i64 row, bool row_ok, i64 k0,
                                           i64 K, bool vec) {
    (void)sf;
    const u16* p = (const u16*)q + row * K + k0;
    c.lo = make_uint4(0u, 0u, 0u, 0u);
    c.hi = make_uint4(0u, 0u, 0u, 0u);
    if (!row_ok || k0 >= K) return;
    if (vec) {
        c.lo = __ldg((const uint4*)p);
        if (k0 + 8 < K) c.hi = __ldg((const uint4*)(p + 8));
    } else {
        u32 w[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            u32 a = k0 + 2 * j < K ? (u32)__ldg(p + 2 * j) : 0u;
            u32 b = k0 + 2 * j + 1 < K ? (u32)__ldg(p + 2 * j + 1) : 0u;
            w[j] = a | (b << 16);
        }
        c.lo = make_uint4(w[0], w[1], w[2], w[3]);
        c.hi = make_uint4(w[4], w[5], w[6], w[7]);
    }
}

// Writes the chunk as 16 bf16: elements 0..7 at lo, 8..15 at hi (each 16-byte aligned; the
// padded-row layout passes hi = lo + 8, wgmma's core-matrix layout the next core matrix).
__device__ __forceinline__ void store_chunk(const Chunk<true>& c, u16* lo, u16* hi, const u32* lut) {
    const u32 sbits = __float_as_uint(e4m3_to_f32((u8)c.sf)) >> 16;  // exact in bf16
    const u32 s2 = sbits | (sbits << 16);
    u32 o[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        o[j] = bf16x2_mul(lut[(c.codes.x >> (8 * j)) & 0xffu], s2);
        o[4 + j] = bf16x2_mul(lut[(c.codes.y >> (8 * j)) & 0xffu], s2);
    }
    *(uint4*)lo = make_uint4(o[0], o[1], o[2], o[3]);
    *(uint4*)hi = make_uint4(o[4], o[5], o[6], o[7]);
}

__device__ __forceinline__ void store_chunk(const Chunk<false>& c, u16* lo, u16* hi, const u32* lut) {
    (void)lut;
    *(uint4*)lo = c.lo;
    *(uint4*)hi = c.hi;
}

// ---- wgmma (sm_90a): the warpgroup MMA of the `w64` grouped GEMM (descriptor, fences,
// commit / wait: common.cuh) ----
// Pins the accumulators: the compiler may not move their uses across this point (after the
// wait, before the next batch).
__device__ __forceinline__ void wg_pin(float* d) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// D(64 x 128, f32) += A(64 x 16, bf16, K-major) . B(16 x 128, bf16, K-major: W rows), both
// from shared memory. Warp w of the warpgroup holds rows 16 w .. 16 w + 15; for each 8 columns
// j, d[4 j .. 4 j + 3] are (row g, col 8 j + 2 t), (g, 8 j + 2 t + 1), (g + 8, 8 j + 2 t),
// (g + 8, 8 j + 2 t + 1) with g = lane / 4, t = lane % 4: mma.sync m16n8's C fragment.
__device__ __forceinline__ void wg_m64n128k16(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "%64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
          "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),
          "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),
          "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db)
        : "memory");
}

struct GemmArgs {
    const u8* x;         // activations: codes [M, K/2] or bf16 [M, K]
    const u8* x_sf;      // [M, K/16] (NVFP4)
    const float* x_g;    // [1] (NVFP4) or null
    const u8* w;         // weights: codes [E, N, K/2] or bf16 [E, N, K]
    const u8* w_sf;      // [E, N, K/16]
    const float* w_g;    // [E] or null
    const i64* off;      // [E + 1]
    const i32* t_exp;    // m-tile schedule
    const i64* t_row;
    i64 N, K;
    void* out;           // q: codes [M, N/2]; o: f32/bf16 [M, N]
    u8* out_sf;          // q: [M, N/16]
    const float* out_g;  // q: [1] global scale of the output
    int mode;            // q
    int round_bf16;      // q
    u16* h_out;          // q: optional bf16 [M, N]
    u32* amax_out;       // q: amax-only launch when set
    int out_dt;          // o: DT_F32 or DT_BF16
    // The m-tile schedule (t_exp, t_row, off) was complete before the kernel this launch
    // follows began (e.g. GEMM2 after GEMM1 on GEMM1's schedule): a form that honours it (r8's
    // p forms) reads the schedule and issues its first weight stages before its PDL wait,
    // so under a programmatic edge they overlap the kernel before. 0: wait first.
    int early;
};
// The fused layer's host writes this layout byte for byte (gpu/src/ops/moe.rs gemm_args_bytes).
static_assert(sizeof(GemmArgs) == 144, "GemmArgs: 9 pointers, N, K, 3 pointers, 2 ints, 2 pointers, 2 ints");

// Every grouped GEMM kernel's parameters (m16 / m64 / w64, v8, r) and their GemmArgs.
#define MOE_GEMM_PARAMS                                                                           \
    const u8 *x, const u8 *x_sf, const float *x_g, const u8 *w, const u8 *w_sf, const float *w_g, \
        const i64 *off, const i32 *t_exp, const i64 *t_row, i64 N, i64 K, void *out, u8 *out_sf,  \
        const float *out_g, int mode, int round_bf16, u16 *h_out, u32 *amax_out, int out_dt,      \
        int early
#define MOE_GEMM_ARGS                                                                             \
    GemmArgs a = {x,   x_sf, x_g, w,      w_sf,  w_g,        off,   t_exp,    t_row, N,           \
                  K,   out,  out_sf, out_g, mode, round_bf16, h_out, amax_out, out_dt, early};

// Quantizes one 16-column block spread over the lanes that XOR-differ in the masks X0, 2*X0,
// ... (NS steps), NV values per lane: the scale math of nvfp4.cu's nvfp4_block (both modes).
// Writes this lane's NV E2M1 codes to c[] and returns the scale byte (same on every lane).
// max |v[i]|, pairwise (NV = 2 or 4).
template <int NV>
__device__ __forceinline__ float absmax_pairwise(const float (&v)[NV]) {
    static_assert(NV == 2 || NV == 4 || NV == 16, "2, 4 or 16 values per lane");
    if constexpr (NV == 2) {
        return fmaxf(fabsf(v[0]), fabsf(v[1]));
    } else if constexpr (NV == 4) {
        return fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[NV - 2]), fabsf(v[NV - 1])));
    } else {
        // 16 (one whole block in a thread): a pairwise tree
        float m[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) m[i] = fmaxf(fabsf(v[2 * i]), fabsf(v[2 * i + 1]));
#pragma unroll
        for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
            for (int i = 0; i < w; ++i) m[i] = fmaxf(m[i], m[i + w]);
        return m[0];
    }
}

// NONNEG: every v is >= +0 (relu^2), so every q is >= +0 or +inf; the kernel mode then takes
// the FMA index (e2m1_mag_fma_bits: the same codes as f32_to_e2m1 there, sign bit 0).
template <int NV, int X0, int NS, bool NONNEG = false>
__device__ __forceinline__ u8 group_nvfp4(const float (&v)[NV], float global, int mode, u32 (&c)[NV]) {
    float vmax, sf_f, rcp_g;
    u8 sf;
    if (mode == MODE_KERNEL) {
        vmax = absmax_pairwise(v);
#pragma unroll
        for (int s = 0; s < NS; ++s) vmax = fmaxf(vmax, __shfl_xor_sync(DUET_FULL_MASK, vmax, X0 << s));
        sf_f = global * (vmax * rcp_approx_ftz(6.0f));
        sf = f32_to_e4m3_sat(sf_f);
        rcp_g = rcp_approx_ftz(global);
    } else {
        int nan = 0;
#pragma unroll
        for (int i = 0; i < NV; ++i) nan |= v[i] != v[i];
        vmax = fmaxf(absmax_pairwise(v), 0.0f);
#pragma unroll
        for (int s = 0; s < NS; ++s) vmax = fmaxf(vmax, __shfl_xor_sync(DUET_FULL_MASK, vmax, X0 << s));
#pragma unroll
        for (int s = 0; s < NS; ++s) nan |= __shfl_xor_sync(DUET_FULL_MASK, nan, X0 << s);
        if (nan) vmax = __uint_as_float(0x7fc00000u);
        sf_f = global * (vmax * (1.0f / 6.0f));
        sf = f32_to_e4m3_nonsat(sf_f);
        rcp_g = exact_rcp(global);
    }
    const float sf_val = e4m3_to_f32(sf);
    float out_scale = 0.0f;
    if (sf_val != 0.0f)
        out_scale = mode == MODE_KERNEL ? rcp_approx_ftz(sf_val * rcp_g) : exact_rcp(sf_val * rcp_g);
    if (NONNEG && mode == MODE_KERNEL) {
#pragma unroll
        for (int i = 0; i < NV; ++i) c[i] = e2m1_mag_fma_bits(v[i] * out_scale) & 7u;
        return sf;
    }
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const float q = v[i] * out_scale;
        c[i] = (mode == MODE_EXACT && q != q) ? 0u : f32_to_e2m1(q);
    }
    return sf;
}

// The mma-quad form (4 lanes, xor 1 and 2; 4 values per lane: cols 2t, 2t+1, 8+2t, 8+2t+1):
// codes as two bytes (byte0: cols 2t..2t+1, byte1: cols 8+2t..).
__device__ __forceinline__ u8 quad_nvfp4(const float (&v)[4], float global, int mode, u32* b0, u32* b1) {
    u32 c[4];
    const u8 sf = group_nvfp4<4, 1, 2>(v, global, mode, c);
    *b0 = c[0] | (c[1] << 4);
    *b1 = c[2] | (c[3] << 4);
    return sf;
}

// The w64 ring (NVFP4 x NVFP4, K % 64 == 0): WG_RING stages of one k-tile's raw bytes (A codes
// 64 x 32 B, B codes 128 x 32 B, A scales twice 64 x 4 B, B scales 128 x 4 B) after the two
// bf16 buffers; the host's TileCfg::smem counts 2 x (64 + 128) x 64 x 2 + WG_RING x
// WG_RING_STAGE bytes.
#define WG_RING 4
#define WG_RING_STAGE 7168
// WG (cfg w64): the products by wgmma instead of mma.sync (BM 64, BN 128, WM 4, WN 1: one
// warpgroup, each warp's 16 rows x 128 columns in acc[0][0..15][4], the m16n8 C-fragment
// layout the epilogues below read). The tiles then live in wgmma's no-swizzle K-major
// core-matrix layout, element (r, k) at (r / 8) * (BK * 8) + (k / 8) * 64 + (r % 8) * 8 +
// k % 8 bf16 (LBO 128 bytes, SBO BK * 16 bytes); one k-tile is BK / 16 wgmma's issued as one
// group and waited for before the tile is overwritten, while the next tile's raw operands
// load into registers. Session 12 call 1: the same outputs as m16 / m64 in gpu_moe, but 3.0x /
// 1.26x slower than v2 / v1 at T = 64 / 4096 (3054 / 10389 us a layer); since then two
// buffers (the next tile is stored while the wgmma's run) and a conflict-free store mapping.
template <int BM, int BN, int BK, int WM, int WN, bool AF4, bool BF4, int EPI, bool WG = false>
__device__ __forceinline__ void moe_gemm_body(const GemmArgs& a) {
    constexpr int THREADS = 32 * WM * WN;
    static_assert(!WG || (BM == 64 && BN == 128 && WM == 4 && WN == 1 && BK % 16 == 0),
                  "the wgmma form is one warpgroup of m64n128k16");
    constexpr int LDS = WG ? BK : BK + 8;  // bf16 elements per smem row (padded: conflict-free fragment loads)
    constexpr int KC = BK / 16;  // chunks per tile row
    constexpr int A_CH = BM * KC / THREADS;
    constexpr int B_CH = BN * KC / THREADS;
    constexpr int WTM = BM / WM, WTN = BN / WN;
    constexpr int MI = WTM / 16, NI = WTN / 8;
    static_assert(A_CH * THREADS == BM * KC && B_CH * THREADS == BN * KC, "chunk split");
    static_assert(NI % 2 == 0, "16-column NVFP4 blocks need pairs of n8 tiles");

    extern __shared__ __align__(16) u8 smem_raw[];
    u16* sA = (u16*)smem_raw;
    u16* sB = sA + BM * LDS;
    __shared__ u32 lut[256];

    const int tid = threadIdx.x;
    const i64 mt = blockIdx.x;
    const int e = a.t_exp[mt];
    if (e < 0) return;
    const i64 row0 = a.t_row[mt];
    const i64 row_end = a.off[e + 1];
    const i64 n0 = (i64)blockIdx.y * BN;
    const i64 N = a.N, K = a.K;

    // The one 256-entry table. Session 12 tried w64 on 32 lane-interleaved copies (entry b of
    // lane l at 32 b + l, 32 KB more shared memory: conflict-free lookups) after ncu showed the
    // lookups' 3-way bank conflicts: GEMM2 at T = 4096 went from 3179 to 3511 us (call 5).
    if (AF4 || BF4) {
        for (int b = tid; b < 256; b += THREADS) {
            u32 lo = __float_as_uint(e2m1_to_f32((u32)b & 15u)) >> 16;
            u32 hi = __float_as_uint(e2m1_to_f32((u32)b >> 4)) >> 16;
            lut[b] = lo | (hi << 16);
        }
    }
    const bool avec = (K & 7) == 0;
    const u8* wq = a.w + (BF4 ? (i64)e * N * (K >> 1) : (i64)e * N * K * 2);
    const u8* wsf = BF4 ? a.w_sf + (i64)e * N * (K >> 4) : a.w_sf;

    Chunk<AF4> ra[A_CH];
    Chunk<BF4> rb[B_CH];
    // Chunk c of a tile: row r, k chunk kc. mma.sync forms: r = c / KC (a row's chunks on
    // consecutive threads). WG: each 8 consecutive threads take 8 consecutive rows of one k
    // chunk, so an 8-thread phase of 16-byte stores fills one 128-byte core matrix (the
    // mma.sync mapping put 2 rows x 4 chunks there: 4-way bank conflicts, session 12); a warp
    // still covers the same 8 rows x KC chunks, so the same sectors per global load.
    auto chunk_rc = [&](int c, int& r, int& kc) {
        if constexpr (WG) {
            r = 8 * (c / (8 * KC)) + (c & 7);
            kc = (c >> 3) % KC;
        } else {
            r = c / KC;
            kc = c % KC;
        }
    };
    auto load_tile = [&](i64 kt) {
#pragma unroll
        for (int i = 0; i < A_CH; ++i) {
            int r, kc;
            chunk_rc(tid + i * THREADS, r, kc);
            const i64 row = row0 + r;
            load_chunk(ra[i], a.x, a.x_sf, row, row < row_end, kt + kc * 16, K, avec);
        }
#pragma unroll
        for (int i = 0; i < B_CH; ++i) {
            int r, kc;
            chunk_rc(tid + i * THREADS, r, kc);
            const i64 n = n0 + r;
            load_chunk(rb[i], wq, wsf, n, n < N, kt + kc * 16, K, avec);
        }
    };
    // Where chunk (row r, k chunk kc) of a tile goes: two 8-element halves.
    auto at = [&](u16* base, int r, int kc, int h) -> u16* {
        if constexpr (WG)
            return base + (r >> 3) * (BK * 8) + (2 * kc + h) * 64 + (r & 7) * 8;
        else
            return base + r * LDS + kc * 16 + 8 * h;
    };
    auto store_tile_to = [&](u16* dA, u16* dB) {
#pragma unroll
        for (int i = 0; i < A_CH; ++i) {
            int r, kc;
            chunk_rc(tid + i * THREADS, r, kc);
            store_chunk(ra[i], at(dA, r, kc, 0), at(dA, r, kc, 1), lut);
        }
#pragma unroll
        for (int i = 0; i < B_CH; ++i) {
            int r, kc;
            chunk_rc(tid + i * THREADS, r, kc);
            store_chunk(rb[i], at(dB, r, kc, 0), at(dB, r, kc, 1), lut);
        }
    };
    auto store_tile = [&]() { store_tile_to(sA, sB); };

    const int warp = tid >> 5, lane = tid & 31;
    const int wm = warp / WN, wn = warp % WN;
    const int g = lane >> 2, t = lane & 3;
    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

    // WG: one k-tile's wgmma's on the bf16 buffer `buf` (A then B), issued as one group.
    auto wg_tile = [&](float* d, u16* buf) {
        u16* cA = buf;
        u16* cB = buf + BM * LDS;
        wg_fence();
        wg_pin(d);
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            // k16 step kk / 16: core matrices 2 (kk / 16) and the next along K.
            const u64 da = wg_desc(cA + kk * 8, 128, BK * 16);
            const u64 db = wg_desc(cB + kk * 8, 128, BK * 16);
            wg_m64n128k16(d, da, db);
        }
        wg_commit();
    };
    bool ringed = false;
    if constexpr (WG && AF4 && BF4) {
        // NVFP4 x NVFP4 with whole k-tiles (K % BK == 0) and 16-byte aligned code rows: the raw
        // bytes stream through a WG_RING-deep cp.async ring (session 12; see WG_RING above).
        const bool ring_ok = K % BK == 0 && ((reinterpret_cast<u64>(a.x) | reinterpret_cast<u64>(wq)) & 15) == 0 &&
                             ((reinterpret_cast<u64>(a.x_sf) | reinterpret_cast<u64>(wsf)) & 3) == 0;
        if (ring_ok) {
            ringed = true;
            static_assert(THREADS == 128 && BM == 64 && BN == 128 && BK == 64, "the ring's thread map");
            constexpr int RA = BM * 32, RB = BN * 32, RAS = 2 * BM * 4, RBS = BN * 4;
            constexpr int STAGE = RA + RB + RAS + RBS;
            static_assert(STAGE == WG_RING_STAGE, "stage bytes (host: TileCfg::smem)");
            u8* ring = (u8*)(sA + 2 * (BM + BN) * LDS);
            // Thread tid: A row tid % 64, chunks 2 h, 2 h + 1 (h = tid / 64); B row tid, all four
            // chunks. Every thread dequantizes exactly the bytes it copied, so the ring needs no
            // barrier of its own (a thread's cp.async data is visible to it after its wait).
            const int ar = tid & 63, ah = tid >> 6;
            const i64 arow = row0 + ar, brow = n0 + tid;
            const bool aok = arow < row_end, bok = brow < N;
            const u8* ag = a.x + (aok ? arow : row0) * (K >> 1) + 16 * ah;
            const u8* ags = a.x_sf + (aok ? arow : row0) * (K >> 4);
            const u8* bg = wq + (bok ? brow : n0) * (K >> 1);
            const u8* bgs = wsf + (bok ? brow : n0) * (K >> 4);
            const i64 nt = K / BK;
            auto issue = [&](i64 t) {
                if (t < nt) {
                    u8* st = ring + (t % WG_RING) * STAGE;
                    const i64 kt = t * BK;
                    duet_cp_async16_zfill(st + ar * 32 + 16 * ah, ag + (kt >> 1), aok);
                    duet_cp_async4_zfill(st + RA + RB + (ah * BM + ar) * 4, ags + (kt >> 4), aok);
                    duet_cp_async16_zfill(st + RA + tid * 32, bg + (kt >> 1), bok);
                    duet_cp_async16_zfill(st + RA + tid * 32 + 16, bg + (kt >> 1) + 16, bok);
                    duet_cp_async4_zfill(st + RA + RB + RAS + tid * 4, bgs + (kt >> 4), bok);
                }
                duet_cp_async_commit();  // every call: uniform group counting
            };
            auto dequant = [&](i64 t, u16* dA, u16* dB) {
                const u8* st = ring + (t % WG_RING) * STAGE;
                const uint4 ac = *(const uint4*)(st + ar * 32 + 16 * ah);
                const u32 asf = *(const u32*)(st + RA + RB + (ah * BM + ar) * 4);
                const Chunk<true> a0 = {make_uint2(ac.x, ac.y), (asf >> (16 * ah)) & 0xffu};
                const Chunk<true> a1 = {make_uint2(ac.z, ac.w), (asf >> (16 * ah + 8)) & 0xffu};
                store_chunk(a0, at(dA, ar, 2 * ah, 0), at(dA, ar, 2 * ah, 1), lut);
                store_chunk(a1, at(dA, ar, 2 * ah + 1, 0), at(dA, ar, 2 * ah + 1, 1), lut);
                const uint4 b0 = *(const uint4*)(st + RA + tid * 32);
                const uint4 b1 = *(const uint4*)(st + RA + tid * 32 + 16);
                const u32 bsf = *(const u32*)(st + RA + RB + RAS + tid * 4);
                const Chunk<true> c0 = {make_uint2(b0.x, b0.y), bsf & 0xffu};
                const Chunk<true> c1 = {make_uint2(b0.z, b0.w), (bsf >> 8) & 0xffu};
                const Chunk<true> c2 = {make_uint2(b1.x, b1.y), (bsf >> 16) & 0xffu};
                const Chunk<true> c3 = {make_uint2(b1.z, b1.w), bsf >> 24};
                store_chunk(c0, at(dB, tid, 0, 0), at(dB, tid, 0, 1), lut);
                store_chunk(c1, at(dB, tid, 1, 0), at(dB, tid, 1, 1), lut);
                store_chunk(c2, at(dB, tid, 2, 0), at(dB, tid, 2, 1), lut);
                store_chunk(c3, at(dB, tid, 3, 0), at(dB, tid, 3, 1), lut);
            };
            float* d = &acc[0][0][0];
#pragma unroll 1
            for (int t = 0; t < WG_RING - 1; ++t) issue(t);
            __syncthreads();  // lut ready
            duet_cp_async_wait<WG_RING - 2>();  // tile 0 (this thread's bytes)
            dequant(0, sA, sA + BM * LDS);
            wg_fence_smem();
            __syncthreads();
            issue(WG_RING - 1);
            int cur = 0;
            for (i64 t = 0; t < nt; ++t) {
                wg_tile(d, sA + cur * ((BM + BN) * LDS));
                if (t + 1 < nt) {
                    duet_cp_async_wait<WG_RING - 2>();  // tile t + 1
                    u16* nA = sA + (cur ^ 1) * ((BM + BN) * LDS);
                    dequant(t + 1, nA, nA + BM * LDS);
                    wg_fence_smem();
                }
                issue(t + WG_RING);  // into tile t's slot, dequantized by this thread already
                wg_wait0();
                wg_pin(d);
                __syncthreads();
                cur ^= 1;
            }
            duet_cp_async_wait<0>();
        }
    }
    if (!ringed) {
    load_tile(0);
    __syncthreads();  // lut ready
    if constexpr (WG) {
        // Two shared-memory buffers of (BM + BN) x BK (the host asks for both): the wgmma's of
        // tile kt read buffer kt & 1 while the threads load tile kt + 1's raw bytes and store
        // it, dequantized, into the other; then the wait, and one barrier that both publishes
        // the new tile and frees the old one. (Session 11's first form had one buffer: store,
        // barrier, wgmma, wait, barrier, with nothing overlapping the tensor cores.)
        float* d = &acc[0][0][0];
        store_tile();
        wg_fence_smem();
        __syncthreads();
        int cur = 0;
        for (i64 kt = 0; kt < K; kt += BK) {
            const bool more = kt + BK < K;
            if (more) load_tile(kt + BK);
            wg_tile(d, sA + cur * ((BM + BN) * LDS));
            if (more) {
                u16* nA = sA + (cur ^ 1) * ((BM + BN) * LDS);
                store_tile_to(nA, nA + BM * LDS);
                wg_fence_smem();
            }
            wg_wait0();
            wg_pin(d);
            __syncthreads();
            cur ^= 1;
        }
    } else
    for (i64 kt = 0; kt < K; kt += BK) {
        store_tile();
        __syncthreads();
        if (kt + BK < K) load_tile(kt + BK);
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            u32 af[MI][4];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const u16* p = sA + (wm * WTM + i * 16 + g) * LDS + kk + 2 * t;
                af[i][0] = *(const u32*)p;
                af[i][1] = *(const u32*)(p + 8 * LDS);
                af[i][2] = *(const u32*)(p + 8);
                af[i][3] = *(const u32*)(p + 8 * LDS + 8);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const u16* p = sB + (wn * WTN + j * 8 + g) * LDS + kk + 2 * t;
                const u32 b0 = *(const u32*)p, b1 = *(const u32*)(p + 8);
#pragma unroll
                for (int i = 0; i < MI; ++i) mma_bf16(acc[i][j], af[i], b0, b1);
            }
        }
        __syncthreads();
    }
    }  // !ringed

    const float gx = AF4 ? a.x_g[0] : 1.0f;
    const float gw = BF4 ? a.w_g[e] : 1.0f;
    const float alpha = 1.0f / (gx * gw);

    if (EPI == 0) {
        const float og = a.amax_out ? 0.0f : a.out_g[0];
        const i64 nb = N >> 4;  // scale columns
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < MI; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const i64 r = row0 + wm * WTM + i * 16 + g + half * 8;
                const bool rok = r < row_end;
#pragma unroll
                for (int j = 0; j < NI; j += 2) {
                    const i64 cb = n0 + wn * WTN + j * 8;  // first column of the 16-block
                    const bool cok = cb < N;               // N % 16 == 0: whole block in or out
                    float v[4] = {acc[i][j][2 * half], acc[i][j][2 * half + 1],
                                  acc[i][j + 1][2 * half], acc[i][j + 1][2 * half + 1]};
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        float hq = fmaxf(v[q] * alpha, 0.0f);
                        hq = hq * hq;
                        if (a.round_bf16) hq = bf16_to_f32(f32_to_bf16(hq));
                        v[q] = hq;
                    }
                    if (a.amax_out) {
                        if (rok && cok)
                            amax = fmaxf(amax, fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3])));
                        continue;
                    }
                    u32 b0, b1;
                    const u8 sf = quad_nvfp4(v, og, a.mode, &b0, &b1);
                    u32 w0 = b0 << (8 * t), w1 = b1 << (8 * t);
                    w0 |= __shfl_xor_sync(DUET_FULL_MASK, w0, 1);
                    w1 |= __shfl_xor_sync(DUET_FULL_MASK, w1, 1);
                    w0 |= __shfl_xor_sync(DUET_FULL_MASK, w0, 2);
                    w1 |= __shfl_xor_sync(DUET_FULL_MASK, w1, 2);
                    if (rok && cok) {
                        if (t == 0) {
                            *(u64*)((u8*)a.out + r * (N >> 1) + (cb >> 1)) = (u64)w0 | ((u64)w1 << 32);
                            a.out_sf[r * nb + (cb >> 4)] = sf;
                        }
                        if (a.h_out) {
                            u16* hp = a.h_out + r * N + cb + 2 * t;
                            *(u32*)hp = (u32)f32_to_bf16(v[0]) | ((u32)f32_to_bf16(v[1]) << 16);
                            *(u32*)(hp + 8) = (u32)f32_to_bf16(v[2]) | ((u32)f32_to_bf16(v[3]) << 16);
                        }
                    }
                }
            }
        }
        if (a.amax_out) {
            amax = warp_max_f32(amax);
            if (lane == 0 && amax > 0.0f) atomicMax(a.amax_out, __float_as_uint(amax));
        }
    } else {
#pragma unroll
        for (int i = 0; i < MI; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const i64 r = row0 + wm * WTM + i * 16 + g + half * 8;
                if (r >= row_end) continue;
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const i64 c = n0 + wn * WTN + j * 8 + 2 * t;
#pragma unroll
                    for (int q = 0; q < 2; ++q) {
                        if (c + q < N) store_from_f32(a.out, r * N + c + q, a.out_dt, acc[i][j][2 * half + q] * alpha);
                    }
                }
            }
        }
    }
}

#define MOE_GEMM_KERNEL(NAME, BM, BN, BK, WM, WN, MINB, AF4, BF4, EPI)                                  \
    MOE_GEMM_KERNEL_WG(NAME, BM, BN, BK, WM, WN, MINB, AF4, BF4, EPI, false)
#define MOE_GEMM_KERNEL_WG(NAME, BM, BN, BK, WM, WN, MINB, AF4, BF4, EPI, WG)                           \
    extern "C" __global__ void __launch_bounds__(32 * WM * WN, MINB)                                    \
        NAME(MOE_GEMM_PARAMS) {                                                                    \
        DUET_PDL_ENTRY();                                                                          \
        MOE_GEMM_ARGS                                                                              \
        moe_gemm_body<BM, BN, BK, WM, WN, AF4, BF4, EPI, WG>(a);                                    \
    }

#define MOE_GEMM_FORMATS(CFG, BM, BN, BK, WM, WN, MINB)                                                 \
    MOE_GEMM_KERNEL(moe_gemm_##CFG##_ff_q, BM, BN, BK, WM, WN, MINB, true, true, 0)                      \
    MOE_GEMM_KERNEL(moe_gemm_##CFG##_bb_q, BM, BN, BK, WM, WN, MINB, false, false, 0)                    \
    MOE_GEMM_KERNEL(moe_gemm_##CFG##_bf_q, BM, BN, BK, WM, WN, MINB, false, true, 0)                     \
    MOE_GEMM_KERNEL(moe_gemm_##CFG##_fb_q, BM, BN, BK, WM, WN, MINB, true, false, 0)                     \
    MOE_GEMM_KERNEL(moe_gemm_##CFG##_ff_o, BM, BN, BK, WM, WN, MINB, true, true, 1)                      \
    MOE_GEMM_KERNEL(moe_gemm_##CFG##_bb_o, BM, BN, BK, WM, WN, MINB, false, false, 1)                    \
    MOE_GEMM_KERNEL(moe_gemm_##CFG##_bf_o, BM, BN, BK, WM, WN, MINB, false, true, 1)                     \
    MOE_GEMM_KERNEL(moe_gemm_##CFG##_fb_o, BM, BN, BK, WM, WN, MINB, true, false, 1)

MOE_GEMM_FORMATS(m16, 16, 64, 256, 1, 4, 3)
MOE_GEMM_FORMATS(m64, 64, 128, 64, 2, 2, 3)
// cfg w64: m64's tile on wgmma (one warpgroup, 4 x 1 warps), every format and epilogue.
#define MOE_GEMM_FORMATS_WG(CFG, BM, BN, BK, MINB)                                                     \
    MOE_GEMM_KERNEL_WG(moe_gemm_##CFG##_ff_q, BM, BN, BK, 4, 1, MINB, true, true, 0, true)               \
    MOE_GEMM_KERNEL_WG(moe_gemm_##CFG##_bb_q, BM, BN, BK, 4, 1, MINB, false, false, 0, true)             \
    MOE_GEMM_KERNEL_WG(moe_gemm_##CFG##_bf_q, BM, BN, BK, 4, 1, MINB, false, true, 0, true)              \
    MOE_GEMM_KERNEL_WG(moe_gemm_##CFG##_fb_q, BM, BN, BK, 4, 1, MINB, true, false, 0, true)              \
    MOE_GEMM_KERNEL_WG(moe_gemm_##CFG##_ff_o, BM, BN, BK, 4, 1, MINB, true, true, 1, true)               \
    MOE_GEMM_KERNEL_WG(moe_gemm_##CFG##_bb_o, BM, BN, BK, 4, 1, MINB, false, false, 1, true)             \
    MOE_GEMM_KERNEL_WG(moe_gemm_##CFG##_bf_o, BM, BN, BK, 4, 1, MINB, false, true, 1, true)              \
    MOE_GEMM_KERNEL_WG(moe_gemm_##CFG##_fb_o, BM, BN, BK, 4, 1, MINB, true, false, 1, true)
MOE_GEMM_FORMATS_WG(w64, 64, 128, 64, 2)

// ---------------------------------------------------------------------------------------------
// v8: grouped GEMM for few rows per expert (decode), NVFP4 x NVFP4 only. Tokens are the mma's
// N dimension: out^T[n, r] = sum_k W[e, n, k] x[r, k] with mma.m16n8k16, A = 16 weight rows
// (one warp = 16 output columns = one NVFP4 block of the epilogue), B = up to 8 token rows.
// No shared-memory staging: each lane loads 16 contiguous bytes (32 k values = two scale
// blocks) of two weight rows and of one token row straight into registers, dequantizes them
// to bf16 (exact: byte -> bf16x2 table, one mul.rn.bf16x2 by the E4M3 scale) and feeds them to
// the mma. The k order inside the dot product is permuted (a lane's 32 contiguous k values
// fill its fragment slots of 8 consecutive mmas, the same permutation on both operands), which
// only changes the fp32 summation order, as any tile shape does. Weight bytes stream once.
// Block = 4 warps = 64 columns of one m-tile of <= 8 rows (schedule with BM = 8).
// Epilogue q: the 16 columns of a token live on the 8 lanes with equal lane & 3 (2 values each):
// amax by three shuffles (xor 4, 8, 16), then nvfp4.cu's block math (both modes), codes
// OR-gathered into one u64 per (token, block).


// 16 bytes of codes (32 values) + their two scale bytes -> 16 bf16x2 words (exact).
// (Measured slower on the H200, session 3: decoding the nibbles with prmt lookups in registers
// instead of this shared table, 110 / 499 / 1473 us vs 80 / 344 / 1022 us per layer at
// T = 1 / 8 / 64.)
__device__ __forceinline__ void gemv_dequant(uint4 q, u32 sf2, const u32* lut, u32 o[16]) {
    const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const u32 sb = __float_as_uint(e4m3_to_f32((u8)(sf2 >> (8 * h)))) >> 16;
        const u32 s2 = sb | (sb << 16);
#pragma unroll
        for (int j = 0; j < 8; ++j) o[8 * h + j] = bf16x2_mul(lut[(w[2 * h + (j >> 2)] >> (8 * (j & 3))) & 0xffu], s2);
    }
}

// Codes and scales of k values k0 .. k0+31 of a row (zeros past K; K % 16 == 0). vec16: the
// row base and k0 are 16-byte aligned (K % 32 == 0).
__device__ __forceinline__ void gemv_load(const u8* __restrict__ q, const u8* __restrict__ sf, i64 row, bool ok,
                                          i64 k0, i64 K, bool vec16, uint4* c, u32* s) {
    *c = make_uint4(0u, 0u, 0u, 0u);
    *s = 0u;
    if (!ok || k0 >= K) return;
    const u8* p = q + row * (K >> 1) + (k0 >> 1);
    const u8* ps = sf + row * (K >> 4) + (k0 >> 4);
    if (k0 + 32 <= K) {
        if (vec16) {
            *c = __ldg((const uint4*)p);
        } else {
            const uint2 a = __ldg((const uint2*)p), b = __ldg((const uint2*)(p + 8));
            *c = make_uint4(a.x, a.y, b.x, b.y);
        }
        *s = (u32)__ldg(ps) | ((u32)__ldg(ps + 1) << 8);
    } else {  // k0 + 16 == K: the lower half only
        const uint2 a = __ldg((const uint2*)p);
        *c = make_uint4(a.x, a.y, 0u, 0u);
        *s = (u32)__ldg(ps);
    }
}

// The epilogue of the <= 8-row grouped GEMMs (v8, r8): acc is mma m16n8's C fragment of the
// warp's 16 columns n0 .. n0 + 15 (rows of the mma) x the m-tile's tokens (its columns):
// acc[0] = (col nA, token 2t), acc[1] = (nA, 2t + 1), acc[2] = (nB, 2t), acc[3] = (nB, 2t + 1).
template <int EPI>
__device__ __forceinline__ void moe_gemv_epilogue(const GemmArgs& a, const float acc[4], float alpha,
                                                  i64 n0, i64 row0, i64 nrows, bool okA, bool okB,
                                                  int lane) {
    const int g = lane >> 2, t = lane & 3;
    const i64 N = a.N;
    const i64 nA = n0 + g, nB = n0 + g + 8;
    if (EPI == 0) {
        const float og = a.amax_out ? 0.0f : a.out_g[0];
        const i64 nb = N >> 4;
        float amax = 0.0f;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const i64 tok = 2 * t + j;
            const bool rok = tok < nrows;
            const i64 r = row0 + tok;
            float h[2];
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                float hq = fmaxf(acc[2 * q + j] * alpha, 0.0f);
                hq = hq * hq;
                if (a.round_bf16) hq = bf16_to_f32(f32_to_bf16(hq));
                h[q] = hq;
            }
            if (a.amax_out) {
                if (rok) amax = fmaxf(amax, fmaxf(h[0], h[1]));
                continue;
            }
            u32 cc[2];
            const u8 sf = group_nvfp4<2, 4, 3>(h, og, a.mode, cc);  // 8 lanes: xor 4, 8, 16
            const u32 c0 = cc[0], c1 = cc[1];
            u64 word = ((u64)c0 << (4 * g)) | ((u64)c1 << (4 * (g + 8)));
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) word |= __shfl_xor_sync(DUET_FULL_MASK, word, o);
            if (rok) {
                if (g == 0) {
                    *(u64*)((u8*)a.out + r * (N >> 1) + (n0 >> 1)) = word;
                    a.out_sf[r * nb + (n0 >> 4)] = sf;
                }
                if (a.h_out) {
                    a.h_out[r * N + nA] = f32_to_bf16(h[0]);
                    a.h_out[r * N + nB] = f32_to_bf16(h[1]);
                }
            }
        }
        if (a.amax_out) {
            amax = warp_max_f32(amax);
            if (lane == 0 && amax > 0.0f) atomicMax(a.amax_out, __float_as_uint(amax));
        }
    } else {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const i64 tok = 2 * t + j;
            if (tok >= nrows) continue;
            const i64 r = row0 + tok;
            if (okA) store_from_f32(a.out, r * N + nA, a.out_dt, acc[j] * alpha);
            if (okB) store_from_f32(a.out, r * N + nB, a.out_dt, acc[2 + j] * alpha);
        }
    }
}

template <int EPI>
__device__ __forceinline__ void moe_gemv_body(const GemmArgs& a) {
    __shared__ u32 lut[256];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const i64 mt = blockIdx.x;
    const int e = a.t_exp[mt];
    if (e < 0) return;  // the whole block: uniform
    for (int b = tid; b < 256; b += blockDim.x) {
        const u32 lo = __float_as_uint(e2m1_to_f32((u32)b & 15u)) >> 16;
        const u32 hi = __float_as_uint(e2m1_to_f32((u32)b >> 4)) >> 16;
        lut[b] = lo | (hi << 16);
    }
    __syncthreads();
    const i64 N = a.N, K = a.K;
    const i64 n0 = (i64)blockIdx.y * 64 + (i64)warp * 16;
    if (n0 >= N) return;  // (epilogue q: N % 16 == 0, a warp's 16 columns are all in or all out)
    const i64 row0 = a.t_row[mt];
    const i64 row_end = a.off[e + 1];
    const i64 nrows = row_end - row0 < 8 ? row_end - row0 : 8;
    const u8* wq = a.w + (i64)e * N * (K >> 1);
    const u8* wsf = a.w_sf + (i64)e * N * (K >> 4);
    const i64 nA = n0 + g, nB = n0 + g + 8;
    const bool okA = nA < N, okB = nB < N;  // only epilogue o can have N % 16 != 0
    const i64 xr = row0 + g;
    const bool xok = g < nrows;
    const bool vec16 = (K & 31) == 0;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 2
    for (i64 kb = 0; kb < K; kb += 128) {
        const i64 k0 = kb + 32 * t;
        uint4 qa, qb, qx;
        u32 sa, sb, sx;
        gemv_load(wq, wsf, nA, okA, k0, K, vec16, &qa, &sa);
        gemv_load(wq, wsf, nB, okB, k0, K, vec16, &qb, &sb);
        gemv_load(a.x, a.x_sf, xr, xok, k0, K, vec16, &qx, &sx);
        u32 fa[16], fb[16], fx[16];
        gemv_dequant(qa, sa, lut, fa);
        gemv_dequant(qb, sb, lut, fb);
        gemv_dequant(qx, sx, lut, fx);
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const u32 af[4] = {fa[2 * s], fb[2 * s], fa[2 * s + 1], fb[2 * s + 1]};
            mma_bf16(acc, af, fx[2 * s], fx[2 * s + 1]);
        }
    }
    const float alpha = 1.0f / (a.x_g[0] * a.w_g[e]);
    moe_gemv_epilogue<EPI>(a, acc, alpha, n0, row0, nrows, okA, okB, lane);
}

#define MOE_GEMV_KERNEL(NAME, EPI)                                                                       \
    extern "C" __global__ void __launch_bounds__(128)                                                   \
        NAME(MOE_GEMM_PARAMS) {                                                                    \
        DUET_PDL_ENTRY();                                                                          \
        MOE_GEMM_ARGS                                                                              \
        moe_gemv_body<EPI>(a);                                                                       \
    }
MOE_GEMV_KERNEL(moe_gemm_v8_ff_q, 0)
MOE_GEMV_KERNEL(moe_gemm_v8_ff_o, 1)

// ---------------------------------------------------------------------------------------------
// r8 (session 14): v8's decode tiles (<= 8 token rows x 16 columns a warp, tokens as the mma's
// N) on the register-decoded f16 tensor-core path of the decode engine's slot GEMV
// (model_ops.cu, "The routed slots' NVFP4 GEMV on the tensor cores"; helpers slotm_* in
// common.cuh). NVFP4 x NVFP4 only.
// - A (16 weight rows x 16 k): lane (g, t) loads 16 bytes (32 codes, two scale blocks) of the
//   rows n0 + g and n0 + g + 8 per 128-k step straight into registers (D steps in flight),
//   decodes the E2M1 codes to f16 value * 2^-14 and multiplies them by the E4M3 scale
//   (mul.rn.f16x2): exact.
// - B (16 k x 8 tokens): the m-tile's x rows, decoded the same way (x * 2^-14, exact in f16),
//   once a block into shared memory in the fragment order (uint4 ((step * 4 + word) * 8 + row)
//   * 4 + t: the f16x2 pairs of nibbles (0, 4), (1, 5), (2, 6), (3, 7) of that word), rows
//   past the tile's count as zeros. One LDS.128 feeds two mmas.
// - Products of two f16 with <= 6 significant bits each are exact in the f32 accumulators, as
//   in v8's bf16 path; sum = acc * 2^28 (exact), then v8's epilogue (acc * alpha, relu^2 +
//   NVFP4 or the f32 / bf16 store: moe_gemv_epilogue). Only the fp32 summation order differs
//   from v8 / m16 / m64.
// - SK warps split a column group's K steps (step s to warp s % SK) and add their C fragments
//   in shared memory in warp order (deterministic). Block: W warps = W / SK column groups of 16;
//   grid (m-tiles of <= 8 rows, ceil(N / (16 W / SK))).
// - AL (K % 128 == 0, 16-byte aligned operands): one 16-byte load and one scale halfword a
//   lane and step; otherwise (`r8g`) 8-byte halves and scale bytes with bounds (K % 16 == 0).
// - R (8, 4, 2, 1) rows an m-tile (session 14 call 1 ran R = 8 only): x staging shrinks with R
//   (shared memory held R8's occupancy down at K = 2688); the lanes g >= R read zeros.
// Dynamic shared memory: ceil(K / 128) * 256 * R bytes of x, 64 of zeros, then (SK > 1)
// W * 512 bytes of partial fragments.
// CGL: loads through L2 only (ld.global.cg), for data another block of the same grid wrote
// (the fused layer's GEMM2 reading GEMM1's output); else the read-only path.
template <bool AL, bool CGL = false>
__device__ __forceinline__ void r8_load(const u8* __restrict__ rq, const u8* __restrict__ rsf,
                                        i64 i, int t, i64 K, uint4& q, u32& s) {
    const i64 kb = 64 * i + 16 * t;  // byte of the codes; k = 2 kb
    if (AL && CGL) {
        q = __ldcg((const uint4*)(rq + kb));
        s = (u32)__ldcg((const unsigned short*)(rsf + 8 * i) + t);
    } else if (AL) {
        q = __ldg((const uint4*)(rq + kb));
        s = (u32)__ldg((const unsigned short*)(rsf + 8 * i) + t);
    } else {
        q = make_uint4(0u, 0u, 0u, 0u);
        s = 0u;
        const i64 k0 = 2 * kb;
        if (k0 < K) {
            const uint2 lo = __ldg((const uint2*)(rq + kb));
            q.x = lo.x;
            q.y = lo.y;
            s = (u32)__ldg(rsf + (k0 >> 4));
            if (k0 + 16 < K) {
                const uint2 hi = __ldg((const uint2*)(rq + kb + 8));
                q.z = hi.x;
                q.w = hi.y;
                s |= (u32)__ldg(rsf + (k0 >> 4) + 1) << 8;
            }
        }
    }
}
// mt / by: the block's m-tile and column block (blockIdx.x / .y, or the fused layer's ticket).
// XCG: x read through L2 only (r8_load's CGL; the fused layer's GEMM2).
template <int EPI, int SK, int W, bool AL, int R, int D, int P, bool U = false, int CG = 1,
          bool XCG = false>
__device__ __forceinline__ void moe_r8_body(const GemmArgs& a, const i64 mt, const i64 by) {
    static_assert(!XCG || AL, "coherent x loads: the aligned forms");
    static_assert(CG == 1 || (P > 0 && SK == 1 && !U), "column groups: the ring forms, no split");
    extern __shared__ __align__(16) u8 r8_smem[];
    // PDL (the kernel starts with DUET_PDL_DEFERRED): wait here unless a.early, else after the
    // first weight stages are issued (below; the schedule and the weights are not written by
    // the kernel this one follows).
    if (!a.early) DUET_PDL_ENTRY();
    constexpr int RG = W / SK;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int rg = warp % RG, ks = warp / RG;
    const int e = a.t_exp[mt];
    if (e < 0) return;  // the whole block: uniform
    const i64 N = a.N, K = a.K;
    const i64 ns = (K + 127) >> 7;
    const i64 row0 = a.t_row[mt];
    const i64 row_end = a.off[e + 1];
    const i64 nrows = row_end - row0 < R ? row_end - row0 : R;
    uint4* xb = (uint4*)r8_smem;
    // R < 8: the lanes g >= R (B columns past the tile's rows) read one zero uint4 a t here.
    uint4* zb = xb + ns * 16 * R;
    // CG > 1: the warp's column groups c = 0 .. CG - 1 are n0 + 16 RG c (the block's 16 RG CG
    // columns), one weight stream through the ring.
    const i64 n0 = (by * RG * CG + rg) * 16;
    const i64 nA = n0 + g, nB = n0 + g + 8;
    const bool okA = nA < N, okB = nB < N;
    const i64 na = okA ? nA : N - 1, nbr = okB ? nB : N - 1;  // clamped: loads stay in bounds
    const u8* wq = a.w + (i64)e * N * (K >> 1);
    const u8* wsf = a.w_sf + (i64)e * N * (K >> 4);
    const u8* rqa = wq + na * (K >> 1);
    const u8* rqb = wq + nbr * (K >> 1);
    const u8* rsa = wsf + na * (K >> 4);
    const u8* rsb = wsf + nbr * (K >> 4);
    // The first D steps' weights go out before the x staging (P > 0: the first P - 1 stages of
    // the warp's cp.async ring instead).
    constexpr int DR = P > 0 ? 1 : D;
    uint4 qa[DR], qb[DR];
    u32 ra[DR], rb[DR];
    // P > 0: the warp's ring of P stages of 1152 bytes (stage: uint4 [2][32] of codes, lane
    // (g, t) at [0][lane] for row g and [1][lane] for row g + 8; then 16 rows x 8 scale bytes,
    // lane L copying 4 of row L / 2), after x, the zeros and the split-K partials.
    u8* ring = r8_smem + ns * 256 * R + 64 + (SK > 1 ? W * 512 : 0) + warp * P * 1152;
    const i64 srow = min(n0 + (lane >> 1), N - 1);
    const u8* rsl = wsf + srow * (K >> 4) + 4 * (lane & 1);
    // CG > 1: stream position j = (group j / ns, step j % ns) of the warp's live groups (gl).
    // The stages are issued in order (j = 0, 1, ...), so the group and step of the next one
    // are counted (qc, qi) instead of divided out (session 32: the i64 division by ns was a
    // call a stage; without it the c forms got 5-10% faster, still slower than r8p4 / r2p8).
    const i64 gl = n0 < N ? min((i64)CG, (N - n0 + 16 * RG - 1) / (16 * RG)) : 0;
    i64 qc = 0, qi = 0;
    auto issue_cg = [&](i64 j) {
        if (j < gl * ns) {
            const i64 i = qi;
            const i64 nc = n0 + 16 * RG * qc;
            if (++qi == ns) {
                qi = 0;
                ++qc;
            }
            const i64 ra_ = min(nc + g, N - 1), rb_ = min(nc + g + 8, N - 1);
            const i64 rs_ = min(nc + (lane >> 1), N - 1);
            u8* st = ring + (int)(j % P) * 1152;
            duet_cp_async16(st + 16 * lane, wq + ra_ * (K >> 1) + 64 * i + 16 * t);
            duet_cp_async16(st + 512 + 16 * lane, wq + rb_ * (K >> 1) + 64 * i + 16 * t);
            duet_cp_async4_zfill(st + 1024 + 4 * lane, wsf + rs_ * (K >> 4) + 4 * (lane & 1) + 8 * i,
                                 true);
        }
        duet_cp_async_commit();
    };
    // Stage j of this warp (its step ks + j SK) into ring slot j % P; one commit group a call.
    auto issue = [&](i64 j) {
        if constexpr (CG > 1) {
            issue_cg(j);
            return;
        }
        const i64 i = ks + j * SK;
        if (i < ns) {
            u8* st = ring + (int)(j % (P > 0 ? P : 1)) * 1152;
            duet_cp_async16(st + 16 * lane, rqa + 64 * i + 16 * t);
            duet_cp_async16(st + 512 + 16 * lane, rqb + 64 * i + 16 * t);
            duet_cp_async4_zfill(st + 1024 + 4 * lane, rsl + 8 * i, true);
        }
        duet_cp_async_commit();
    };
    if constexpr (P > 0) {
#pragma unroll
        for (int j = 0; j < P - 1; ++j) issue(j);
    } else {
#pragma unroll
        for (int d = 0; d < DR; ++d) {
            qa[d] = qb[d] = make_uint4(0u, 0u, 0u, 0u);
            ra[d] = rb[d] = 0u;
            const i64 i = ks + (i64)d * SK;
            if (i < ns) {
                r8_load<AL>(rqa, rsa, i, t, K, qa[d], ra[d]);
                r8_load<AL>(rqb, rsb, i, t, K, qb[d], rb[d]);
            }
        }
    }
    // a.early: the x rows (the kernel before may write them) only after the wait.
    if (a.early) DUET_PDL_ENTRY();
    // Stage x: unit u = (step i, row r, t) -> the four fragment uint4 of its 16 bytes. A thread
    // loads XB units into registers before it decodes any (session 33: one unit at a time was
    // a dependent global round trip per unit, ~5 a thread at K = 2688; ncu put 22% of GEMM2's
    // stall samples at T = 64 on the first use of those loads). The register forms (P == 0)
    // hold their first weight steps in registers here: one unit at a time (more spilled).
    if (R < 8 && tid < 4) zb[tid] = make_uint4(0u, 0u, 0u, 0u);
    const i64 units = ns * 4 * R;
    constexpr int XB = P > 0 ? 3 : 1;
    for (i64 u0 = tid; u0 < units; u0 += (i64)XB * blockDim.x) {
        uint4 xq[XB];
        u32 xs[XB];
#pragma unroll
        for (int b = 0; b < XB; ++b) {
            const i64 u = u0 + (i64)b * blockDim.x;
            const i64 i = u / (4 * R);
            const int r = (int)((u >> 2) % R), tt = (int)(u & 3);
            xq[b] = make_uint4(0u, 0u, 0u, 0u);
            xs[b] = 0u;
            if (u < units && r < nrows) {
                const i64 row = row0 + r;
                r8_load<AL, XCG>(a.x + row * (K >> 1), a.x_sf + row * (K >> 4), i, tt, K, xq[b],
                                 xs[b]);
            }
        }
#pragma unroll
        for (int b = 0; b < XB; ++b) {
            const i64 u = u0 + (i64)b * blockDim.x;
            if (u >= units) break;
            const i64 i = u / (4 * R);
            const int r = (int)((u >> 2) % R), tt = (int)(u & 3);
            uint4 o[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) o[j] = make_uint4(0u, 0u, 0u, 0u);
            if (r < nrows) {
                const u32 w4[4] = {xq[b].x, xq[b].y, xq[b].z, xq[b].w};
                const u32 s0 = slotm_scale2(xs[b]), s1 = slotm_scale2(xs[b] >> 8);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    u32 d[4];
                    slotm_decode8(w4[j], d);
                    const u32 sj = j < 2 ? s0 : s1;
                    o[j] = make_uint4(slotm_hmul2(d[0], sj), slotm_hmul2(d[1], sj),
                                      slotm_hmul2(d[2], sj), slotm_hmul2(d[3], sj));
                }
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) xb[((i * 4 + j) * R + r) * 4 + tt] = o[j];
        }
    }
    __syncthreads();
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const bool live = g < R;
    const uint4* xl = live ? xb + g * 4 + t : zb + t;
    const i64 xstep = live ? 16 * R : 0;
    const int xword = live ? 4 * R : 0;
    auto step = [&](i64 i, const uint4& wa, const uint4& wb, u32 sa, u32 sb) {
        const uint4* xp = xl + i * xstep;
        const u32 sa0 = slotm_scale2(sa), sa1 = slotm_scale2(sa >> 8);
        const u32 sb0 = slotm_scale2(sb), sb1 = slotm_scale2(sb >> 8);
        slotm_word(c, wa.x, wb.x, sa0, sb0, xp[0]);
        slotm_word(c, wa.y, wb.y, sa0, sb0, xp[xword]);
        slotm_word(c, wa.z, wb.z, sa1, sb1, xp[2 * xword]);
        slotm_word(c, wa.w, wb.w, sa1, sb1, xp[3 * xword]);
    };
    if constexpr (P > 0) {
        // Stage j has landed for this thread after the wait (P - 1 + j groups committed, at
        // most P - 2 pending), for the warp after __syncwarp (the scales come from other
        // lanes). Then stage j + P - 1 goes into the slot of stage j - 1, which every lane has
        // finished reading (they are past this __syncwarp).
        const i64 nj = ks < ns ? (ns - ks + SK - 1) / SK : 0;
        if constexpr (CG > 1) {
            // One stream over the live groups; each group's epilogue as its last step is done
            // (the next group's stages are in flight meanwhile).
            const float alpha = 1.0f / (a.x_g[0] * a.w_g[e]);
            const i64 row0e = a.t_row[mt];
            const i64 left = a.off[e + 1] - row0e;
            i64 i = 0, nc = n0;
            for (i64 j = 0; j < gl * ns; ++j) {
                duet_cp_async_wait<P - 2>();
                __syncwarp();
                issue(j + P - 1);
                const u8* st = ring + (int)(j % P) * 1152;
                const uint4 wa = *(const uint4*)(st + 16 * lane);
                const uint4 wb = *(const uint4*)(st + 512 + 16 * lane);
                const u32 sa = *(const unsigned short*)(st + 1024 + 8 * g + 2 * t);
                const u32 sb = *(const unsigned short*)(st + 1024 + 8 * (g + 8) + 2 * t);
                step(i, wa, wb, sa, sb);
                if (++i == ns) {
                    const float up = 268435456.0f;  // 2^28: the two operands' 2^-14
                    const float acc[4] = {c[0] * up, c[1] * up, c[2] * up, c[3] * up};
                    moe_gemv_epilogue<EPI>(a, acc, alpha, nc, row0e, left < R ? left : R,
                                           nc + g < N, nc + g + 8 < N, lane);
                    c[0] = c[1] = c[2] = c[3] = 0.0f;
                    i = 0;
                    nc += 16 * RG;
                }
            }
            duet_cp_async_wait<0>();
            return;
        }
        // U: the loop unrolled by P, so every ring slot is a constant offset (fewer address
        // instructions a step).
        for (i64 j0 = 0; U && j0 < nj; j0 += P) {
#pragma unroll
            for (int d = 0; d < (U ? P : 1); ++d) {
                const i64 j = j0 + d;
                if (j < nj) {
                    duet_cp_async_wait<P - 2>();
                    __syncwarp();
                    issue(j + P - 1);
                    const u8* st = ring + d * 1152;
                    const uint4 wa = *(const uint4*)(st + 16 * lane);
                    const uint4 wb = *(const uint4*)(st + 512 + 16 * lane);
                    const u32 sa = *(const unsigned short*)(st + 1024 + 8 * g + 2 * t);
                    const u32 sb = *(const unsigned short*)(st + 1024 + 8 * (g + 8) + 2 * t);
                    step(ks + j * SK, wa, wb, sa, sb);
                }
            }
        }
        for (i64 j = 0; !U && j < nj; ++j) {
            duet_cp_async_wait<P - 2>();
            __syncwarp();
            issue(j + P - 1);
            const u8* st = ring + (int)(j % (P > 0 ? P : 1)) * 1152;
            const uint4 wa = *(const uint4*)(st + 16 * lane);
            const uint4 wb = *(const uint4*)(st + 512 + 16 * lane);
            const u32 sa = *(const unsigned short*)(st + 1024 + 8 * g + 2 * t);
            const u32 sb = *(const unsigned short*)(st + 1024 + 8 * (g + 8) + 2 * t);
            step(ks + j * SK, wa, wb, sa, sb);
        }
        duet_cp_async_wait<0>();
    }
    for (i64 i0 = ks; P == 0 && i0 < ns; i0 += (i64)D * SK) {
#pragma unroll
        for (int d = 0; d < DR; ++d) {
            const i64 i = i0 + (i64)d * SK;
            if (i < ns) {
                step(i, qa[d], qb[d], ra[d], rb[d]);
                const i64 nx = i + (i64)DR * SK;
                if (nx < ns) {
                    r8_load<AL>(rqa, rsa, nx, t, K, qa[d], ra[d]);
                    r8_load<AL>(rqb, rsb, nx, t, K, qb[d], rb[d]);
                }
            }
        }
    }
    if constexpr (SK > 1) {
        float* part = (float*)(r8_smem + ns * 256 * R + 64);
        if (ks > 0) *(float4*)(part + ((ks * RG + rg) * 32 + lane) * 4) = make_float4(c[0], c[1], c[2], c[3]);
        __syncthreads();
        if (ks > 0) return;
#pragma unroll
        for (int k2 = 1; k2 < SK; ++k2) {
            const float4 p = *(const float4*)(part + ((k2 * RG + rg) * 32 + lane) * 4);
            c[0] += p.x;
            c[1] += p.y;
            c[2] += p.z;
            c[3] += p.w;
        }
    }
    if (n0 >= N) return;  // whole warps (epilogue q: N % 16 == 0)
    const float up = 268435456.0f;  // 2^28: the two operands' 2^-14
    const float acc[4] = {c[0] * up, c[1] * up, c[2] * up, c[3] * up};
    const float alpha = 1.0f / (a.x_g[0] * a.w_g[e]);
    // The tile's rows again (not kept in registers over the main loop).
    const i64 row0e = a.t_row[mt];
    const i64 left = a.off[e + 1] - row0e;
    moe_gemv_epilogue<EPI>(a, acc, alpha, n0, row0e, left < R ? left : R, okA, okB, lane);
}

#define MOE_R8_KERNEL(NAME, EPI, SK, W, AL, R, D, P, MINB, U, CG)                                \
    extern "C" __global__ void __launch_bounds__(32 * W, MINB)                                      \
        NAME(MOE_GEMM_PARAMS) {                                                                    \
        DUET_PDL_DEFERRED();                                                                       \
        MOE_GEMM_ARGS                                                                              \
        moe_r8_body<EPI, SK, W, AL, R, D, P, U, CG>(a, blockIdx.x, blockIdx.y);                    \
    }
// Forms r{R}[s{SK}][d{D}]: m-tiles of R rows (the schedule's BM), K over SK warps (1: 4 warps,
// 64 columns a block; 2: 8 warps, 64 columns; 4: 8 warps, 32 columns), D steps in flight a
// warp (2 unless named). MINB: the blocks-per-SM hint that keeps ptxas from spilling (without
// it ptxas picked 64 registers and spilled on r8g / r8s2). r8g: r8 for any K % 16 == 0 and
// any alignment. The host's table: gpu/src/ops/moe.rs R_FORMS (same order).
#define MOE_R8_FORM(TAG, SK, W, AL, R, D, MINB) MOE_R8_FORMU(TAG, SK, W, AL, R, D, 0, MINB, false)
#define MOE_R8_FORMP(TAG, SK, W, AL, R, D, P, MINB) MOE_R8_FORMU(TAG, SK, W, AL, R, D, P, MINB, false)
#define MOE_R8_FORMU(TAG, SK, W, AL, R, D, P, MINB, U)                                             \
    MOE_R8_KERNEL(moe_gemm_##TAG##_ff_q, 0, SK, W, AL, R, D, P, MINB, U, 1)                        \
    MOE_R8_KERNEL(moe_gemm_##TAG##_ff_o, 1, SK, W, AL, R, D, P, MINB, U, 1)
// c{CG} (session 22): a p form whose warps take CG column groups each (a block 64 CG columns),
// the weights of all of them one stream through the warp's ring (no pipeline refill per group)
// and x staged once for them; each group's epilogue runs with the next group's loads in flight.
#define MOE_R8_FORMC(TAG, R, P, CG, MINB)                                                          \
    MOE_R8_KERNEL(moe_gemm_##TAG##_ff_q, 0, 1, 4, true, R, 1, P, MINB, false, CG)                  \
    MOE_R8_KERNEL(moe_gemm_##TAG##_ff_o, 1, 1, 4, true, R, 1, P, MINB, false, CG)
MOE_R8_FORM(r8, 1, 4, true, 8, 2, 6)
MOE_R8_FORM(r8s2, 2, 8, true, 8, 2, 3)
MOE_R8_FORM(r8s4, 4, 8, true, 8, 2, 3)
MOE_R8_FORM(r8g, 1, 4, false, 8, 2, 6)
MOE_R8_FORM(r8d4, 1, 4, true, 8, 4, 5)
MOE_R8_FORM(r8s2d4, 2, 8, true, 8, 4, 2)
MOE_R8_FORM(r4d4, 1, 4, true, 4, 4, 5)
MOE_R8_FORM(r4s2d4, 2, 8, true, 4, 4, 2)
MOE_R8_FORM(r2d4, 1, 4, true, 2, 4, 5)
MOE_R8_FORM(r2s2d4, 2, 8, true, 2, 4, 2)
MOE_R8_FORM(r1d4, 1, 4, true, 1, 4, 4)
MOE_R8_FORM(r1s2d4, 2, 8, true, 1, 4, 2)
MOE_R8_FORM(r1s2, 2, 8, true, 1, 2, 3)
MOE_R8_FORM(r4g, 1, 4, false, 4, 2, 6)
MOE_R8_FORM(r2g, 1, 4, false, 2, 2, 6)
MOE_R8_FORM(r1g, 1, 4, false, 1, 2, 6)
// p{P}: the weights through a P-stage cp.async ring a warp (no registers held by loads in
// flight: call 2 found the register forms latency-bound at ~2.3 TB/s); aligned K only.
MOE_R8_FORMP(r8p4, 1, 4, true, 8, 1, 4, 6)
MOE_R8_FORMP(r4p6, 1, 4, true, 4, 1, 6, 6)
MOE_R8_FORMP(r2p6, 1, 4, true, 2, 1, 6, 6)
MOE_R8_FORMP(r1p6, 1, 4, true, 1, 1, 6, 6)
MOE_R8_FORMP(r4s2p6, 2, 8, true, 4, 1, 6, 3)
MOE_R8_FORMP(r2s2p6, 2, 8, true, 2, 1, 6, 3)
MOE_R8_FORMP(r1s2p6, 2, 8, true, 1, 1, 6, 3)
MOE_R8_FORMP(r4p8, 1, 4, true, 4, 1, 8, 6)
MOE_R8_FORMP(r2p8, 1, 4, true, 2, 1, 8, 6)
// u: the p loop unrolled by P (constant ring offsets; session 14, after call 4).
MOE_R8_FORMU(r8p4u, 1, 4, true, 8, 1, 4, 6, true)
MOE_R8_FORMU(r2p4u, 1, 4, true, 2, 1, 4, 6, true)
MOE_R8_FORMU(r2p8u, 1, 4, true, 2, 1, 8, 6, true)
MOE_R8_FORMC(r2p8c2, 2, 8, 2, 6)
MOE_R8_FORMC(r2p8c4, 2, 8, 4, 6)
MOE_R8_FORMC(r8p4c2, 8, 4, 2, 6)
MOE_R8_FORMC(r8p4c4, 8, 4, 4, 6)
// w{W} (session 33): W warps a block (16 W columns) share one staging of x: GEMM2's 8-row x
// (43 KB at K = 2688) held r8p4 to 3 blocks (12 warps) an SM (ncu, T = 64); with 8 warps the
// same x serves twice the columns (2 blocks, 16 warps), and its staging is half the work.
// Measured and removed (calls 2, 4): r8w16p4 (T = 64 layer 672.7 us vs r8w8p4's 560.5),
// r2w8p8 (T = 8 201.0 vs r2p8's 182.9), r8w8p3 (three stages, three blocks an SM: GEMM2 at
// T = 64 324.7 vs 267.8); call 5: x staged in chunks of 11 or 8 steps with a block barrier
// between them (22.5 / 16 KB of x: three blocks an SM, or six ring stages) lost too (GEMM2 at
// T = 64 305.6 / 358.4 vs r8w8p4's 283.5, GEMM1 309.2 / 331.9 vs 289.6).
MOE_R8_FORMP(r8w8p4, 1, 8, true, 8, 1, 4, 3)

// ---------------------------------------------------------------------------------------------
// The fused layer (session 33): GEMM1 (epilogue q) and GEMM2 (epilogue o) of r8w8p4 in one
// grid, so GEMM1's instruction-bound tiles and GEMM2's memory-bound ones share the SMs and
// neither waits for the other's tail. args[0] / args[1]: the two GEMMs' GemmArgs (one m-tile
// schedule of 8 rows; GEMM2's x = GEMM1's output). sync (zeroed before the launch): [0] the
// ticket counter, [1 + q] GEMM1's finished blocks of m-tile q.
// - Each block takes a ticket at its start; tickets run in rounds: round q holds GEMM1's
//   nb1 column blocks of m-tile q (q < tiles), then GEMM2's nb2 column blocks of m-tile
//   q - lag (q >= lag). A GEMM2 block waits only for GEMM1 blocks of smaller tickets, which
//   have started (resident or done): no deadlock at any occupancy.
// - GEMM1 blocks: every thread fences its stores, the block meets, one thread adds 1 to
//   sync[1 + q]. GEMM2 blocks of a live m-tile: one thread spins (ld.acquire.gpu) until the
//   count is nb1, the block meets, then x is read through L2 only (r8_load's CGL).
// Same arithmetic per tile as the two r8w8p4 launches: the same bits.
__device__ __forceinline__ u32 moe_ld_acquire(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// Two blocks an SM: GEMM2's 80 KB of shared memory allow no more (at three, ptxas spilled).
extern "C" __global__ void __launch_bounds__(256, 2)
    moe_layer_r8w8p4_ff(const GemmArgs* __restrict__ args, u32* __restrict__ sync, i64 tiles,
                        i64 lag) {
    DUET_PDL_ENTRY();
    __shared__ u32 ticket_s;
    if (threadIdx.x == 0) ticket_s = atomicAdd(&sync[0], 1u);
    __syncthreads();
    const i64 tk = ticket_s;
    const i64 nb1 = (args[0].N + 127) >> 7, nb2 = (args[1].N + 127) >> 7;
    const i64 head = (lag < tiles ? lag : tiles) * nb1;  // rounds of GEMM1 only
    const i64 mid = tiles > lag ? tiles - lag : 0;        // rounds of both
    bool first;
    i64 q, cb;
    if (tk < head) {
        first = true;
        q = tk / nb1;
        cb = tk % nb1;
    } else if (tk - head < mid * (nb1 + nb2)) {
        const i64 r = (tk - head) / (nb1 + nb2), o = (tk - head) % (nb1 + nb2);
        first = o < nb1;
        q = first ? lag + r : r;
        cb = first ? o : o - nb1;
    } else {
        const i64 o = tk - head - mid * (nb1 + nb2);
        first = false;
        q = mid + o / nb2;
        cb = o % nb2;
    }
    if (q >= tiles) return;  // past the grid's tickets (the host launches exactly them)
    if (first) {
        moe_r8_body<0, 1, 8, true, 8, 1, 4, false, 1, false>(args[0], q, cb);
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) atomicAdd(&sync[1 + q], 1u);
    } else {
        if (args[1].t_exp[q] >= 0) {
            if (threadIdx.x == 0) {
                while (moe_ld_acquire(&sync[1 + q]) < (u32)nb1) __nanosleep(100);
            }
            __syncthreads();
        }
        moe_r8_body<1, 1, 8, true, 8, 1, 4, false, 1, true>(args[1], q, cb);
    }
}

// ---------------------------------------------------------------------------------------------
// x (session 20): the prefill grouped GEMM on wgmma, weights as A from registers. NVFP4 x
// NVFP4, K % 128 == 0, 16-byte aligned operands (the host checks; elsewhere m64 / m16 run).
// Swapped operands: out^T[n, r] = sum_k W[e, n, k] x[r, k]. The block (two warpgroups, 256
// threads) owns 128 weight rows (warp w: rows 16 w .. 16 w + 15, the NVFP4 blocks of the
// epilogue) and one m-tile of NT tokens (wgmma's N: 64 or 128).
// - Weights (A): each lane copies, per 128-k step, 16 bytes of codes of its rows g and g + 8
//   (the quarter t of the step: k = 32 t .. 32 t + 31) and the 4-byte words holding their two
//   scale bytes, by cp.async into a P-stage ring (per thread, its own bytes: no barrier), then
//   decodes them in registers to f16 value * 2^-14 times the E4M3 scale (r8's exact decode,
//   slotm_*): word j of the quarter gives the A fragments of k16 steps 2 j (nibble pairs (0, 4)
//   and (1, 5)) and 2 j + 1 ((2, 6), (3, 7)). The k order inside a step is thereby permuted, the
//   same way on both operands (only the f32 summation order differs from m16 / m64).
// - x (B): raw codes and scales of the NT tokens by cp.async into a P-stage ring (token rows
//   of 80 bytes: conflict-free reads), decoded by all threads once a step into one of two f16
//   tiles in wgmma's K-major no-swizzle layout: token n, k16 step s, core matrix kc at
//   (n / 8) * 2048 + s * 256 + kc * 128 + (n % 8) * 16 bytes (LBO 128, SBO 2048); the four
//   4-byte words of a core-matrix row are the quarters t = 0..3 (A's lane t).
// - Per step: wgmma's in groups of GK k16 steps (wait until one group is pending, the group's A
//   into the register set the group before last used, a fence, the group, commit); then a
//   barrier (every thread's next raw x landed, every warpgroup done with the other tile), the
//   next x tile decoded while the step's groups run, a barrier.
// - Epilogue: h = (acc * 2^28) * alpha (the 2^28 exact: both operands carry 2^-14), relu^2 for
//   q, through an f32 tile in shared memory, then whole 16-feature blocks of one token a thread
//   (below).
// Dynamic shared memory: 2 x NT x 256 (x tiles) + P x (NT x 80 + 10240) bytes.
#define MOE_X_WSTAGE 10240
#define MOE_X_XROW 80
// D (64 x 64 f32) += A (64 x 16 f16, registers: mma.sync's A fragment per warp) . B (16 x 64
// f16, shared memory, K-major: descriptor db).
__device__ __forceinline__ void moe_x_rs64(float* d, const u32* a, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "{%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
        : "memory");
}
// D (64 x 128 f32) += A (64 x 16 f16, registers: mma.sync's A fragment per warp) . B (16 x 128
// f16, shared memory, K-major: descriptor db).
__device__ __forceinline__ void moe_x_rs128(float* d, const u32* a, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "{%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
        : "memory");
}
// Pins n accumulator registers (after the last wait: no use moves above it).
template <int N>
__device__ __forceinline__ void moe_x_pin(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int NT>
__device__ __forceinline__ void moe_x_rs(float* d, const u32* a, u64 db) {
    if constexpr (NT == 64)
        moe_x_rs64(d, a, db);
    else
        moe_x_rs128(d, a, db);
}

// The X / S forms' epilogue (acc: the warpgroup's m64 x NT f32 fragments, warp w holding
// features c0 + 16 w .. c0 + 16 w + 15, tokens past ncols unwritten; smem: at least NT x 132
// floats, free).
// Epilogue through shared memory (session 20, call 2: the per-8-token shuffle epilogue cost
// as many instructions as GEMM1's main loop and thrashed the instruction cache): each thread
// writes its h values (acc * 2^28 * alpha, then relu^2 for q) into an f32 tile [token]
// [feature] (row stride 132 floats: conflict-free), then each thread takes whole 16-feature
// blocks of one token: NVFP4 in registers (nvfp4.cu's block math) and 8-byte code stores,
// or 16-byte row stores for o.
// Two halves: moe_x_epi_tile (the accumulators' owners write the tile) and moe_x_epi_store
// (any ET threads quantize / convert and store it), with a barrier between them.
// TOFF (the xw forms): the tile is written by the 256 threads from TOFF on.
template <int EPI, int NT, int WIN = NT, int TOFF = 0>
__device__ __forceinline__ void moe_x_epi_tile(const GemmArgs& a, const float* acc, u8* smem,
                                               int e, int ncols, int t0_arg = 0) {
    static_assert(WIN % 8 == 0 && WIN <= NT, "token window");
    const int t0 = WIN < NT ? t0_arg : 0;  // (a constant for whole-tile epilogues)
    const int tid = (int)threadIdx.x - TOFF, lane = tid & 31, warp = tid >> 5, t = lane & 3;
    constexpr int TS = 132;
    float* tile = (float*)smem;
    const float up = 268435456.0f;  // 2^28: the two operands' 2^-14
    const float alpha = 1.0f / (a.x_g[0] * a.w_g[e]);
    {
        const int g = lane >> 2;
#pragma unroll
        for (int j = 0; j < NT / 8; ++j)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    // tokens no wgmma wrote (S forms), tokens outside the window [t0, t0 + WIN)
                    if (8 * j >= ncols) continue;
                    if (WIN < NT && (8 * j < t0 || 8 * j >= t0 + WIN)) continue;
                    float h = (acc[4 * j + 2 * hh + q] * up) * alpha;
                    if (EPI == 0) {
                        h = fmaxf(h, 0.0f);
                        h = h * h;
                        if (a.round_bf16) h = bf16_to_f32(f32_to_bf16(h));
                    }
                    tile[(8 * j - t0 + 2 * t + q) * TS + 16 * warp + g + 8 * hh] = h;
                }
    }
}
// The tile's tokens [t0, t0 + WIN) (of an NT-token m-tile) to the output: ET threads, thread
// threadIdx.x - TOFF.
template <int EPI, int NT, int WIN = NT, int ET = 256, int TOFF = 0>
__device__ __forceinline__ void moe_x_epi_store(const GemmArgs& a, const u8* smem, i64 row0,
                                                i64 row_end, i64 c0, int t0_arg = 0) {
    const int t0 = WIN < NT ? t0_arg : 0;
    const int tid = (int)threadIdx.x - TOFF, lane = tid & 31;
    const i64 N = a.N;
    constexpr int TS = 132;
    const float* tile = (const float*)smem;
    const i64 left = row_end - row0 < NT ? row_end - row0 : NT;
    float amax = 0.0f;
    // Unit u: block b = (u / 8) % 8 of token n = u % 8 + 8 (u / 64): a quarter-warp reads one
    // block of 8 tokens (row stride 132: conflict-free 16-byte reads).
#pragma unroll 1
    for (int u = tid; u < WIN * 8; u += ET) {
        const int b = (u >> 3) & 7, nl = (u & 7) | ((u >> 6) << 3), n = t0 + nl;
        const i64 col = c0 + 16 * b;
        if (n >= left || col >= N) continue;
        const i64 r = row0 + n;
        const float* src = tile + nl * TS + 16 * b;
        float v[16];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float4 f = *(const float4*)(src + 4 * i);
            v[4 * i] = f.x;
            v[4 * i + 1] = f.y;
            v[4 * i + 2] = f.z;
            v[4 * i + 3] = f.w;
        }
        if (EPI == 0) {
            // N % 16 == 0: the whole block is in range
            if (a.amax_out) {
                float m = v[0];
#pragma unroll
                for (int i = 1; i < 16; ++i) m = fmaxf(m, v[i]);
                amax = fmaxf(amax, m);
                continue;
            }
            u32 c[16];
            const u8 sf = group_nvfp4<16, 1, 0, true>(v, a.out_g[0], a.mode, c);
            u64 word = 0;
#pragma unroll
            for (int i = 0; i < 16; ++i) word |= (u64)c[i] << (4 * i);
            *(u64*)((u8*)a.out + r * (N >> 1) + (col >> 1)) = word;
            a.out_sf[r * (N >> 4) + (col >> 4)] = sf;
            if (a.h_out) {
                u32 hb[8];
#pragma unroll
                for (int i = 0; i < 8; ++i)
                    hb[i] = (u32)f32_to_bf16(v[2 * i]) | ((u32)f32_to_bf16(v[2 * i + 1]) << 16);
                uint4* hp = (uint4*)(a.h_out + r * N + col);
                hp[0] = make_uint4(hb[0], hb[1], hb[2], hb[3]);
                hp[1] = make_uint4(hb[4], hb[5], hb[6], hb[7]);
            }
        } else {
            const bool whole = col + 16 <= N;
            if (a.out_dt == DT_BF16 && whole && (N & 7) == 0) {
                u32 hb[8];
#pragma unroll
                for (int i = 0; i < 8; ++i)
                    hb[i] = (u32)f32_to_bf16(v[2 * i]) | ((u32)f32_to_bf16(v[2 * i + 1]) << 16);
                uint4* hp = (uint4*)((u16*)a.out + r * N + col);
                hp[0] = make_uint4(hb[0], hb[1], hb[2], hb[3]);
                hp[1] = make_uint4(hb[4], hb[5], hb[6], hb[7]);
            } else if (a.out_dt == DT_F32 && whole && (N & 3) == 0) {
                float4* fp = (float4*)((float*)a.out + r * N + col);
#pragma unroll
                for (int i = 0; i < 4; ++i) fp[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
            } else {
#pragma unroll
                for (int i = 0; i < 16; ++i)
                    if (col + i < N) store_from_f32(a.out, r * N + col + i, a.out_dt, v[i]);
            }
        }
    }
    if (EPI == 0 && a.amax_out) {
        amax = warp_max_f32(amax);
        if (lane == 0 && amax > 0.0f) atomicMax(a.amax_out, __float_as_uint(amax));
    }
}
// Both halves on one set of 256 threads (from TOFF on), BAR between them: a named barrier over
// those threads (0: every thread of the block, __syncthreads).
template <int EPI, int NT, int WIN = NT, int TOFF = 0, int BAR = 0>
__device__ __forceinline__ void moe_x_epilogue(const GemmArgs& a, const float* acc, u8* smem,
                                               int e, i64 row0, i64 row_end, i64 c0,
                                               int ncols, int t0_arg = 0) {
    moe_x_epi_tile<EPI, NT, WIN, TOFF>(a, acc, smem, e, ncols, t0_arg);
    if constexpr (BAR == 0)
        __syncthreads();
    else
        asm volatile("bar.sync %0, 256;\n" ::"n"(BAR) : "memory");
    moe_x_epi_store<EPI, NT, WIN, 256, TOFF>(a, smem, row0, row_end, c0, t0_arg);
}

template <int EPI, int NT, int P, int GK>
__device__ __forceinline__ void moe_x_body(const GemmArgs& a) {
    static_assert(NT == 64 || NT == 128, "wgmma N of the token tile");
    static_assert(GK == 2 || GK == 4, "k16 steps a group (an even number of groups a step)");
    static_assert(P >= 2, "ring stages");
    extern __shared__ __align__(128) u8 x_smem[];
    constexpr int XBUF = NT * 256;         // one 128-k step of x, f16
    constexpr int XRAW = NT * MOE_X_XROW;  // one raw x stage
    constexpr int XU = NT * 4 / 256;       // raw x units (token, quarter) a thread
    constexpr int NG = 8 / GK;             // groups a step
    u8* xbuf = x_smem;
    u8* xraw = x_smem + 2 * XBUF;
    u8* wring = xraw + P * XRAW;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int t = lane & 3;
    const i64 mt = blockIdx.x;
    const int e = a.t_exp[mt];
    if (e < 0) return;  // the whole block
    const i64 N = a.N, K = a.K, ns = K >> 7;
    const i64 row0 = a.t_row[mt];
    const i64 row_end = a.off[e + 1];
    const i64 n0 = (i64)blockIdx.y * 128 + warp * 16;  // this warp's 16 weight rows
    const i64 nA = n0 + (lane >> 2), nB = nA + 8;
    const bool okA = nA < N, okB = nB < N;
    // Rows past N load row N - 1 (in bounds); the epilogue skips them.
    const i64 ra = okA ? nA : N - 1, rb = okB ? nB : N - 1;
    const u8* wq = a.w + (i64)e * N * (K >> 1);
    const u8* wsf = a.w_sf + (i64)e * N * (K >> 4);
    const u8* gqa = wq + ra * (K >> 1) + 16 * t;
    const u8* gqb = wq + rb * (K >> 1) + 16 * t;
    const u8* gsa = wsf + ra * (K >> 4) + 4 * (t >> 1);
    const u8* gsb = wsf + rb * (K >> 4) + 4 * (t >> 1);
    // Raw x unit c: token n = u / 4, quarter q = u % 4 (u = tid + 256 c); tokens past the
    // tile's rows copy the expert's last row (their columns are never stored). Quarters 0 / 1
    // also copy the token's scale words 0 / 1 (row bytes 64 .. 71).
    const u8* gx[XU];
    const u8* gxs[XU];
    int xq[XU], xs_off[XU];
#pragma unroll
    for (int c = 0; c < XU; ++c) {
        const int u = tid + 256 * c, n = u >> 2, q = u & 3;
        const i64 row = row0 + n < row_end ? row0 + n : row_end - 1;
        gx[c] = a.x + row * (K >> 1) + 16 * q;
        gxs[c] = a.x_sf + row * (K >> 4) + 4 * (q & 1);
        xq[c] = n * MOE_X_XROW + 16 * q;
        xs_off[c] = q < 2 ? n * MOE_X_XROW + 64 + 4 * q : -1;
    }
    // Stage s of this thread's bytes into ring slot `slot` (= s % P); one commit group a call.
    auto issue = [&](int s, int slot) {
        if (s < ns) {
            u8* ws = wring + slot * MOE_X_WSTAGE;
            const i64 o = 64 * (i64)s;
            duet_cp_async16(ws + 16 * tid, gqa + o);
            duet_cp_async16(ws + 4096 + 16 * tid, gqb + o);
            duet_cp_async4_zfill(ws + 8192 + 8 * tid, gsa + (o >> 3), true);
            duet_cp_async4_zfill(ws + 8192 + 8 * tid + 4, gsb + (o >> 3), true);
            u8* xs = xraw + slot * XRAW;
#pragma unroll
            for (int c = 0; c < XU; ++c) {
                duet_cp_async16(xs + xq[c], gx[c] + o);
                if (xs_off[c] >= 0) duet_cp_async4_zfill(xs + xs_off[c], gxs[c] + (o >> 3), true);
            }
        }
        duet_cp_async_commit();  // every call: uniform group counting
    };
    // Decodes raw x stage s into tile s & 1. Unit u = tid + 256 c: token n (8 consecutive
    // tokens a quarter-warp: each 16-byte store fills one core-matrix row set), word j: reads
    // word j of the token's four quarters (row stride 80 bytes: conflict-free), writes the four
    // core-matrix rows of k16 steps 2 j, 2 j + 1.
    auto stage_x = [&](int slot, int buf) {
        const u8* xs = xraw + slot * XRAW;
        u8* xb = xbuf + buf * XBUF;
#pragma unroll
        for (int c = 0; c < XU; ++c) {
            const int u = tid + 256 * c;
            const int n = ((u >> 5) << 3) | (u & 7), j = (u >> 3) & 3;
            const u8* rr = xs + n * MOE_X_XROW;
            const uint2 sc = *(const uint2*)(rr + 64);
            u32 v[4][4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const u32 w = *(const u32*)(rr + 16 * q + 4 * j);
                // quarter q's scale bytes 2 q, 2 q + 1; word j < 2 takes the first
                const u32 sw = q < 2 ? sc.x : sc.y;
                const u32 s2 = slotm_scale2(sw >> (16 * (q & 1) + 8 * (j >> 1)));
                u32 d[4];
                slotm_decode8(w, d);
#pragma unroll
                for (int h = 0; h < 4; ++h) v[q][h] = slotm_hmul2(d[h], s2);
            }
            u8* dst = xb + (n >> 3) * 2048 + (n & 7) * 16 + 2 * j * 256;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int kc = 0; kc < 2; ++kc)
                    *(uint4*)(dst + h * 256 + kc * 128) =
                        make_uint4(v[0][2 * h + kc], v[1][2 * h + kc], v[2][2 * h + kc], v[3][2 * h + kc]);
        }
    };
    float acc[NT / 2];
#pragma unroll
    for (int i = 0; i < NT / 2; ++i) acc[i] = 0.0f;
    u32 af[2][GK][4];
#pragma unroll 1
    for (int s = 0; s < P - 1; ++s) issue(s, s);
    duet_cp_async_wait<P - 2>();  // stage 0 (this thread's bytes)
    __syncthreads();              // (everyone's)
    stage_x(0, 0);
    wg_fence_smem();
    __syncthreads();
    const int nsi = (int)ns;  // K / 128 (the host keeps K < 2^31)
    int slot = 0;             // s % P
#pragma unroll 1
    for (int s = 0; s < nsi; ++s) {
        const int prev = slot == 0 ? P - 1 : slot - 1;  // (s + P - 1) % P
        const int next = slot == P - 1 ? 0 : slot + 1;  // (s + 1) % P
        issue(s + P - 1, prev);  // into the slot of stage s - 1 (read by this thread / before a barrier)
        duet_cp_async_wait<P - 2>();  // stages <= s + 1 (this thread's bytes)
        const u8* ws = wring + slot * MOE_X_WSTAGE;
        const uint4 qa = *(const uint4*)(ws + 16 * tid);
        const uint4 qb = *(const uint4*)(ws + 4096 + 16 * tid);
        const uint2 sc = *(const uint2*)(ws + 8192 + 8 * tid);
        const u32 sa = sc.x >> (16 * (t & 1)), sb = sc.y >> (16 * (t & 1));
        const u32 wa[4] = {qa.x, qa.y, qa.z, qa.w}, wb[4] = {qb.x, qb.y, qb.z, qb.w};
        const u8* xb = xbuf + (s & 1) * XBUF;
#pragma unroll
        for (int gi = 0; gi < NG; ++gi) {
            // Register set gi & 1 was last read by the group before the previous one: wait
            // until one group is pending (the previous), then overwrite it. The groups of
            // step s stay in flight through the barriers and the next x tile's decode below.
            wg_wait1();
            u32(&f)[GK][4] = af[gi & 1];
#pragma unroll
            for (int jj = 0; jj < GK / 2; ++jj) {
                const int j = gi * (GK / 2) + jj;
                const u32 s2a = slotm_scale2(sa >> (8 * (j >> 1)));
                const u32 s2b = slotm_scale2(sb >> (8 * (j >> 1)));
                u32 da[4], db[4];
                slotm_decode8(wa[j], da);
                slotm_decode8(wb[j], db);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    f[2 * jj + h][0] = slotm_hmul2(da[2 * h], s2a);
                    f[2 * jj + h][1] = slotm_hmul2(db[2 * h], s2b);
                    f[2 * jj + h][2] = slotm_hmul2(da[2 * h + 1], s2a);
                    f[2 * jj + h][3] = slotm_hmul2(db[2 * h + 1], s2b);
                }
            }
            wg_fence();
#pragma unroll
            for (int k = 0; k < GK; ++k)
                moe_x_rs<NT>(acc, f[k], wg_desc(xb + (gi * GK + k) * 256, 128, 2048));
            wg_commit();
        }
        // Every thread's raw x of stage s + 1 landed; every warpgroup is past its wait before
        // step s's last group, so step s - 1's groups (which read tile (s + 1) & 1) are done.
        __syncthreads();
        if (s + 1 < nsi) {
            stage_x(next, (s + 1) & 1);
            wg_fence_smem();
        }
        __syncthreads();
        slot = next;
    }
    wg_wait0();
    moe_x_pin<NT / 2>(acc);
    duet_cp_async_wait<0>();
    __syncthreads();  // every warp is done with the x tiles and rings
    constexpr int TS = 132;
    static_assert(NT * TS * 4 <= 2 * XBUF + P * (XRAW + MOE_X_WSTAGE), "the f32 tile fits the ring");
    moe_x_epilogue<EPI, NT>(a, acc, x_smem, e, row0, row_end, (i64)blockIdx.y * 128, NT);
}

#define MOE_X_KERNEL(NAME, EPI, NT, P, GK, MINB)                                                  \
    extern "C" __global__ void __launch_bounds__(256, MINB) NAME(MOE_GEMM_PARAMS) {                \
        DUET_PDL_ENTRY();                                                                          \
        MOE_GEMM_ARGS                                                                              \
        moe_x_body<EPI, NT, P, GK>(a);                                                             \
    }
// Forms x{NT}[p{P}][g{GK}] (host: gpu/src/ops/moe.rs X_FORMS, same order).
#define MOE_X_FORM(TAG, NT, P, GK, MINB)                                                          \
    MOE_X_KERNEL(moe_gemm_##TAG##_ff_q, 0, NT, P, GK, MINB)                                        \
    MOE_X_KERNEL(moe_gemm_##TAG##_ff_o, 1, NT, P, GK, MINB)
// Session 20 also measured (and removed) x64p5 / x128p6 (5 / 6 ring stages), x64g2 / x128g2
// (2-step groups) and x64p2g2 (72 registers, 3 blocks an SM): all slower than x64 (calls 2-5,
// gpu/NOTES.md).
MOE_X_FORM(x64, 64, 4, 4, 2)
MOE_X_FORM(x128, 128, 4, 4, 1)

// ---------------------------------------------------------------------------------------------
// S forms (session 21): prefill with both operands decoded into shared memory once a block and
// wgmma from two descriptors (SS), so that each weight is decoded once per m-tile of up to NT
// tokens (the X forms decode it once per 64 / 128 tokens, and the decode is what bounds them:
// gpu/NOTES.md "Session 20").
// - A block: 128 weight rows (two warpgroups, m64 each) x an m-tile of up to NT tokens; wgmma's
//   N is 64 nsel for the tile's ceil(rows / 64) = nsel quarters (n64 / n128 / n192 / n256), so
//   an expert of 176 rows runs one n192 tile. The grid is flat with the weight-row block
//   fastest: the blocks of one m-tile run together and share its x in L2.
// - Steps of 64 k. Raw rows (32 bytes of codes, 4 scale bytes; 48-byte stride) of the 128
//   weight rows, then the 64 nsel tokens, by cp.async into a P-stage ring; tokens past the
//   tile's rows copy its last row (their columns are never stored).
// - Decode: unit (row, 16-code block p): each of its two words w = 2 p + h (8 codes, the block's
//   scale) -> four f16x2 (value * 2^-14 times the E4M3 scale, r8's exact decode) = one
//   core-matrix row: k16 step p, core matrix h, at (row / 8) * 1024 + p * 256 + h * 128 +
//   (row % 8) * 16 (K-major, no swizzle: LBO 128, SBO 1024). A warp takes 8 rows x 4 blocks;
//   every unit's bytes are read before any is decoded (independent chains). The k order inside
//   a word is permuted (slotm_decode8's pairs), the same way on both operands.
// - Per step s: the step's four wgmma (tile s & 1), commit; wait until one group is pending
//   (step s - 1's, which read tile (s + 1) & 1, is done); a barrier (everyone's wait, everyone's
//   raw stage s + 1); the next copies; stage s + 1 decoded into tile (s + 1) & 1 while step s's
//   wgmma run; a barrier.
// - Epilogue: moe_x_epilogue (through an f32 tile over the ring).
// Dynamic shared memory: 2 x (128 + NT) x 128 (tiles) + P x (128 + NT) x 48 (ring) bytes.
#define MOE_S_ROW 48
__device__ __forceinline__ void moe_s_ss64(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db)
        : "memory");
}
__device__ __forceinline__ void moe_s_ss128(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "%64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db)
        : "memory");
}
__device__ __forceinline__ void moe_s_ss192(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, "
        "%96, %97, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db)
        : "memory");
}
__device__ __forceinline__ void moe_s_ss256(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
        "%128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db)
        : "memory");
}

template <int V>
struct moe_ic {
    static constexpr int value = V;
};
// One k16 step at wgmma N = 64 NS.
template <int NS>
__device__ __forceinline__ void moe_s_mma(float* acc, u64 da, u64 db) {
    if constexpr (NS == 4)
        moe_s_ss256(acc, da, db);
    else if constexpr (NS == 3)
        moe_s_ss192(acc, da, db);
    else if constexpr (NS == 2)
        moe_s_ss128(acc, da, db);
    else
        moe_s_ss64(acc, da, db);
}

// One 16-code NVFP4 block (two code words q, E4M3 scale byte sc) as 16 f16 = code x scale,
// slotm_decode8's k order: word 0's eight values at dst, word 1's at dst + gap (16-byte
// stores). The S forms' decode (gap 128: core matrices 0 and 1 of a k16 step) and
// moe_x_f16_v1 (gap 16: a plain row) write the same values.
__device__ __forceinline__ void moe_s_decode16(uint2 q, u32 sc, u8* dst, int gap) {
    const u32 s2 = slotm_scale2(sc);
    u32 d[4], f[4];
    slotm_decode8(q.x, d);
    slotm_decode8(q.y, f);
    *(uint4*)dst = make_uint4(slotm_hmul2(d[0], s2), slotm_hmul2(d[1], s2), slotm_hmul2(d[2], s2),
                              slotm_hmul2(d[3], s2));
    *(uint4*)(dst + gap) = make_uint4(slotm_hmul2(f[0], s2), slotm_hmul2(f[1], s2),
                                      slotm_hmul2(f[2], s2), slotm_hmul2(f[3], s2));
}

template <int EPI, int NT, int P, bool XH = false>
__device__ __forceinline__ void moe_s_body(const GemmArgs& a) {
    static_assert(NT % 64 == 0 && NT >= 64 && NT <= 256, "wgmma N of the token tile");
    static_assert(P >= 3, "ring stages (stage s + 1 lands before step s's copies)");
    constexpr int R = 128;                // weight rows a block
    constexpr int NTD = XH ? 0 : NT;      // token rows decoded here (XH: none, a.x is f16)
    constexpr int TBUF = (R + NTD) * 128;  // one 64-k step of the decoded operands, f16
    constexpr int RAW = (R + NTD) * MOE_S_ROW;
    constexpr int XT = XH ? NT * 128 : 0;  // XH: one 64-k step of the f16 tokens a ring stage
    constexpr int TS = 132;
    static_assert(NT * TS * 4 <= 2 * TBUF + P * RAW + P * XT, "the f32 tile fits the ring");
    extern __shared__ __align__(128) u8 s_smem[];
    u8* tbuf = s_smem;
    u8* raw = s_smem + 2 * TBUF;
    u8* xring = raw + P * RAW;  // XH only
    const int tid = threadIdx.x, warp = tid >> 5, wg = warp >> 2;
    const i64 N = a.N, K = a.K;
    const i64 RB = (N + R - 1) / R;
    const i64 bid = blockIdx.x;
    const i64 mt = bid / RB, rb = bid - mt * RB;
    const int e = a.t_exp[mt];
    if (e < 0) return;  // the whole block
    const i64 row0 = a.t_row[mt];
    const i64 row_end = a.off[e + 1];
    const int left = (int)(row_end - row0 < NT ? row_end - row0 : NT);
    const int nsel = (left + 63) >> 6;
    const int nsi = (int)(K >> 6);  // the host keeps K < 2^31
    const u8* wq = a.w + (i64)e * N * (K >> 1);
    const u8* wsf = a.w_sf + (i64)e * N * (K >> 4);
    // Global row r of the block's staging (weight rows, then tokens): rows past N load row
    // N - 1, tokens past the tile's rows the expert's last row (neither is ever stored).
    auto grow = [&](int r, bool scales) -> const u8* {
        if (r < R) {
            const i64 n = rb * R + r < N ? rb * R + r : N - 1;
            return scales ? wsf + n * (K >> 4) : wq + n * (K >> 1);
        }
        const i64 x = row0 + (r - R) < row_end ? row0 + (r - R) : row_end - 1;
        return scales ? a.x_sf + x * (K >> 4) : a.x + x * (K >> 1);
    };
    // Copy units: codes u = tid + 256 c: row u / 2, 16-byte half u % 2 = tid % 2; scales: row
    // tid + 256 c (4 bytes).
    constexpr int CQ = (2 * (R + NTD) + 255) / 256, CS = (R + NTD + 255) / 256;
    const u8* gq[CQ];
    const u8* gs[CS];
#pragma unroll
    for (int c = 0; c < CQ; ++c) {
        const int r = (tid + 256 * c) >> 1;
        gq[c] = grow(r < R + NTD ? r : R + NTD - 1, false) + 16 * (tid & 1);
    }
#pragma unroll
    for (int c = 0; c < CS; ++c) {
        const int r = tid + 256 * c;
        gs[c] = grow(r < R + NTD ? r : R + NTD - 1, true);
    }
    // XH: the tokens are f16 rows of K (2K bytes; moe_x_f16_v1's decode, the k order of
    // slotm_decode8 kept) copied straight into the core-matrix layout: unit c = row
    // 8 (tid / 64) + tid % 8 + 32 c, 16-byte chunk j = (tid / 8) % 8 (k16 step j / 2, core
    // matrix j % 2) of the step's 128 bytes (8 threads in a row: 8 rows of one core matrix, 128
    // contiguous bytes); rows past the tile copy its last row (never stored).
    const i64 xpitch = 2 * K;
    const u8* xh0 = a.x + row0 * xpitch + 16 * ((tid >> 3) & 7);
    const int xr0 = 8 * (tid >> 6) + (tid & 7), xlast = left - 1;
    const int xd_off =
        (tid >> 6) * 1024 + ((tid >> 4) & 3) * 256 + ((tid >> 3) & 1) * 128 + (tid & 7) * 16;
    // Decode units (row, block p of the step's four 16-code blocks): u = tid + 256 i: warp
    // chunk c = u / 32 = warp + 8 i, row 8 c + lane % 8 = r0 + 64 i, block p = lane / 8 (the
    // same for every i). An 8-byte read of the two code words (conflict-free per half-warp at the
    // 48-byte stride), one scale byte, two 16-byte stores (core matrices 0 and 1 of k16 step p).
    const int r0 = 8 * warp + (tid & 7), p0 = (tid >> 3) & 3;
    const int q_off = r0 * MOE_S_ROW + 8 * p0, s_off = r0 * MOE_S_ROW + 32 + p0;
    const int d_off = (r0 >> 3) * 1024 + p0 * 256 + (r0 & 7) * 16;
    float acc[NT / 2];
    // Everything from the first copy to the last wgmma's wait, one instance per wgmma N = 64 NS
    // (a uniform choice per block: compile-time unit counts, one set of accumulator registers
    // per instance). The accumulators are zeroed, waited for and pinned inside the instance:
    // no other instruction may define them while a wgmma group is pending (ptxas C7515
    // serializes every wgmma otherwise).
    auto run = [&](auto ns_c) {
        constexpr int NS = decltype(ns_c)::value;
#pragma unroll
        for (int i = 0; i < NT / 2; ++i) acc[i] = 0.0f;
        constexpr int ROWS = XH ? R : R + 64 * NS;  // rows staged and decoded
        constexpr int NU = ROWS / 64;               // decode units a thread
        auto issue = [&](int s, int slot) {
            if (s < nsi) {
                u8* rs = raw + slot * RAW;
                const i64 o = 32 * (i64)s;
                if constexpr (XH) {
                    u8* xs = xring + slot * XT + xd_off;
#pragma unroll
                    for (int c = 0; c < 2 * NS; ++c) {
                        const int r = xr0 + 32 * c;
                        duet_cp_async16(xs + c * 4096,
                                        xh0 + (i64)(r < xlast ? r : xlast) * xpitch + 128 * (i64)s);
                    }
                }
#pragma unroll
                for (int c = 0; c < CQ; ++c) {
                    const int u = tid + 256 * c;
                    if (256 * (c + 1) <= 2 * ROWS || u < 2 * ROWS)
                        duet_cp_async16(rs + (u >> 1) * MOE_S_ROW + 16 * (tid & 1), gq[c] + o);
                }
#pragma unroll
                for (int c = 0; c < CS; ++c) {
                    const int r = tid + 256 * c;
                    if (256 * (c + 1) <= ROWS || r < ROWS)
                        duet_cp_async4_zfill(rs + r * MOE_S_ROW + 32, gs[c] + (o >> 3), true);
                }
            }
            duet_cp_async_commit();  // every call: uniform group counting
        };
        // Ring slot `slot` into tile `buf`: every unit's words first (independent chains).
        auto decode = [&](int slot, int buf) {
            const u8* rq = raw + slot * RAW + q_off;
            const u8* rsc = raw + slot * RAW + s_off;
            u8* tb = tbuf + buf * TBUF + d_off;
            uint2 q[NU];
            u32 sc[NU];
#pragma unroll
            for (int i = 0; i < NU; ++i) {
                q[i] = *(const uint2*)(rq + i * 64 * MOE_S_ROW);
                sc[i] = rsc[i * 64 * MOE_S_ROW];
            }
#pragma unroll
            for (int i = 0; i < NU; ++i) moe_s_decode16(q[i], sc[i], tb + i * 8 * 1024, 128);
        };
#pragma unroll 1
        for (int s = 0; s < P - 1; ++s) issue(s, s);
        duet_cp_async_wait<P - 2>();  // stage 0 (this thread's bytes)
        __syncthreads();              // (everyone's)
        decode(0, 0);
        wg_fence_smem();
        __syncthreads();
        int slot = 0;  // s % P
#pragma unroll 1
        for (int s = 0; s < nsi; ++s) {
            const int prev = slot == 0 ? P - 1 : slot - 1;  // (s + P - 1) % P
            const int next = slot == P - 1 ? 0 : slot + 1;  // (s + 1) % P
            const u8* tb = tbuf + (s & 1) * TBUF;
            wg_fence();
#pragma unroll
            for (int k = 0; k < 4; ++k)
                moe_s_mma<NS>(acc, wg_desc(tb + wg * 8 * 1024 + k * 256, 128, 1024),
                              wg_desc(XH ? xring + slot * XT + k * 256 : tb + (R / 8) * 1024 + k * 256,
                                      128, 1024));
            wg_commit();
            wg_wait1();                   // step s - 1's wgmma (tile (s + 1) & 1) done
            duet_cp_async_wait<P - 3>();  // stage s + 1 (this thread's bytes)
            __syncthreads();
            issue(s + P - 1, prev);  // slot of stage s - 1 (decoded at step s - 2)
            if (s + 1 < nsi) {
                decode(next, (s + 1) & 1);
                wg_fence_smem();
            }
            __syncthreads();
            slot = next;
        }
        wg_wait0();
        moe_x_pin<NT / 2>(acc);
    };
    if (NT >= 256 && nsel == 4)
        run(moe_ic<4>{});
    else if (NT >= 192 && nsel == 3)
        run(moe_ic<3>{});
    else if (NT >= 128 && nsel == 2)
        run(moe_ic<2>{});
    else
        run(moe_ic<1>{});
    duet_cp_async_wait<0>();
    __syncthreads();  // every warp is done with the tiles and the ring
    moe_x_epilogue<EPI, NT>(a, acc, s_smem, e, row0, row_end, rb * R, 64 * nsel);
}

#define MOE_S_KERNEL(NAME, EPI, NT, P, MINB, XH)                                                  \
    extern "C" __global__ void __launch_bounds__(256, MINB) NAME(MOE_GEMM_PARAMS, i64 items) {     \
        DUET_PDL_ENTRY();                                                                          \
        MOE_GEMM_ARGS                                                                              \
        moe_s_body<EPI, NT, P, XH>(a);                                                             \
    }
// Forms s{NT}[h] (host: gpu/src/ops/moe.rs X_FORMS, after the X forms, same order); `items` =
// m-tiles x weight-row blocks (the flat grid); XH 1: x is moe_x_f16_v1's f16 decode of the
// NVFP4 tokens (the host runs it first). Session 21's persistent s256p (blocks looping over the
// items, the next item's loads during the epilogue) measured slower than s256 in session 22
// (GEMM1 2377.0 vs 1967.4 us) and was removed.
#define MOE_S_FORM(TAG, NT, P, MINB, XH)                                                          \
    MOE_S_KERNEL(moe_gemm_##TAG##_ff_q, 0, NT, P, MINB, XH)                                        \
    MOE_S_KERNEL(moe_gemm_##TAG##_ff_o, 1, NT, P, MINB, XH)
MOE_S_FORM(s256, 256, 4, 1, 0)
MOE_S_FORM(s128, 128, 3, 2, 0)
MOE_S_FORM(s256h, 256, 4, 1, 1)

// D (64 x 192 f32) += A (64 x 16 f16, registers) . B (16 x 192 f16, shared memory, K-major).
__device__ __forceinline__ void moe_x_rs192(float* d, const u32* a, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, "
        "{%96,%97,%98,%99}, %100, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
        : "memory");
}

// ---------------------------------------------------------------------------------------------
// xw forms (session 34): x64's operands (weights as wgmma's A from registers, tokens as N from
// shared memory) with the x decode moved to producer warpgroups, so the consumers only decode
// their weights and issue wgmma's while the next x tile is decoded. 512 threads: warpgroups 0-1
// produce (raw x by cp.async into their P-stage ring of NT rows of 80 bytes, decoded into one
// of XS f16 tiles: x64's core-matrix layout and units; only the tile's live 64-token quarters),
// warpgroups 2-3 consume (x64's per-thread weight ring and A decode, 64 weight rows each: warp
// w = 8 .. 15 holds rows 16 (w - 8) ..). wgmma N = 64 x the tile's live quarters (n64 ..
// n(NT), the S forms' instancing: an expert of 176 rows runs n128 + n64 at NT = 128, one n192
// at NT = 192). Session 34's first form had one producer warpgroup: ncu (call 2) had its four
// warps latency-bound on the decode (0.17 instructions a cycle each) and the consumers waiting
// on it.
// Hand-over by named barriers (ids 1 .. 2 XS + 2), per x tile b = s % XS:
// - FULL(b) = 1 + b: the producers arrive after decoding step s into tile b (and their proxy
//   fences), the consumers sync before their wgmma's read it;
// - EMPTY(b) = 1 + XS + b: the consumers arrive once the wgmma's of step s are complete (at
//   step s + 1, after the wait that leaves only step s + 1's first group pending), the producers
//   sync before decoding step s + XS into b (only steps they will refill are released);
// - PROD = 1 + 2 XS: the producers' own (every producer thread's raw stage s landed, and done
//   reading stage s - 1's slot before it is refilled);
// - FIN = 3 + 2 XS: all 512 threads once the main loop is done (the producers' tile stores and
//   cp.async writes, the consumers' wgmma reads), before the epilogue tile overwrites the x
//   tiles and the ring. Session 34 ordered the producers' last stores only through their FULL
//   bar.arrive (racecheck then reported write-write hazards with the epilogue's tile stores);
// - EPIB = 2 + 2 XS: between the epilogue's halves: the consumers' 256 (EW 256: the producers
//   have left), or all 512 (EW 512: the producers store half of the tile's 16-feature blocks).
// setmaxnreg moves registers from the producers to the consumers (their NT / 2 accumulators):
// 2 x PREG + 2 x CREG = 4 x 128, the launch's 128 a thread.
// Dynamic shared memory: XS x NT x 256 (x tiles) + P x (NT x 80 + 10240) bytes.
template <int EPI, int NT, int P, int XS, int EW>
__device__ __forceinline__ void moe_xw_body(const GemmArgs& a) {
    static_assert(NT == 128 || NT == 192, "token tile");
    static_assert(P >= 2 && XS >= 2, "ring stages, x tiles");
    constexpr int GK = 4, NG = 2;          // k16 steps a group, groups a 128-k step
    constexpr int XBUF = NT * 256;         // one 128-k step of x, f16
    constexpr int XRAW = NT * MOE_X_XROW;  // one raw x stage
    constexpr int PT = 256;                // producer threads
    constexpr int XU = NT * 4 / PT;        // raw x units (token, quarter) a producer thread
    constexpr int CREG = NT == 192 ? 184 : 160, PREG = 256 - CREG;
    constexpr int EREG = 128;  // EW 512: both roles for the epilogue's stores (2 x 2 x 128)
    constexpr int PROD = 1 + 2 * XS, EPIB = 2 + 2 * XS, FIN = 3 + 2 * XS;
    static_assert(FIN <= 15, "named barrier ids");
    static_assert(EW == 256 || EW == 512, "epilogue store threads");
    constexpr int TS = 132;
    static_assert(NT * TS * 4 <= XS * XBUF + P * (XRAW + MOE_X_WSTAGE), "the f32 tile fits");
    extern __shared__ __align__(128) u8 x_smem[];
    u8* xbuf = x_smem;
    u8* xraw = x_smem + XS * XBUF;
    u8* wring = xraw + P * XRAW;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const i64 mt = blockIdx.x;
    const int e = a.t_exp[mt];
    if (e < 0) return;  // the whole block
    const i64 N = a.N, K = a.K;
    const int nsi = (int)(K >> 7);  // K / 128 (the host keeps K < 2^31)
    const i64 row0 = a.t_row[mt];
    const i64 row_end = a.off[e + 1];
    const int left = (int)(row_end - row0 < NT ? row_end - row0 : NT);
    const int nsel = (left + 63) >> 6;
    if (warp < 8) {
        // ---- producers ----
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PREG) : "memory");
        // Raw x unit c: token n = u / 4, quarter q = u % 4 (u = tid + 256 c: tokens 64 c ..
        // 64 c + 63, so units past the live quarters are skipped whole); tokens past the tile's
        // rows copy the expert's last row (never stored). Quarters 0 / 1 also copy the token's
        // scale words 0 / 1 (row bytes 64 .. 71).
        i64 roff[XU];  // the unit's token row, in code bytes (scales: roff / 8)
#pragma unroll
        for (int c = 0; c < XU; ++c) {
            const int n = (tid + PT * c) >> 2;
            roff[c] = (row0 + n < row_end ? row0 + n : row_end - 1) * (K >> 1);
        }
        // this thread's byte in raw stage 0 (32-bit shared address): unit c adds PT / 4 tokens
        const u32 xraw_s = duet_smem_u32(xraw) + (tid >> 2) * MOE_X_XROW + 16 * (tid & 3);
        auto issue = [&](int s, int slot) {
            if (s < nsi) {
                const u32 xs = xraw_s + slot * XRAW;
                const i64 o = 64 * (i64)s;
                const int q = tid & 3;  // (PT % 4 == 0: every unit of a thread has its quarter)
#pragma unroll
                for (int c = 0; c < XU; ++c) {
                    if (c < nsel) {
                        const u32 d = xs + c * (PT / 4) * MOE_X_XROW;
                        duet_cp_async16_s(d, a.x + roff[c] + 16 * q + o);
                        // quarters 0 / 1: the token's scale word q (row bytes 64 + 4 q; d is at
                        // 16 q)
                        duet_cp_async4_s_if(d + 64 - 12 * q, a.x_sf + (roff[c] >> 3) + 4 * q + (o >> 3),
                                            q < 2);
                    }
                }
            }
            duet_cp_async_commit();  // every call: uniform group counting
        };
#pragma unroll 1
        for (int s = 0; s < P - 1; ++s) issue(s, s);
        int slot = 0;  // s % P
#pragma unroll 1
        for (int s = 0; s < nsi; ++s) {
            const int prev = slot == 0 ? P - 1 : slot - 1;
            const int next = slot == P - 1 ? 0 : slot + 1;
            duet_cp_async_wait<P - 2>();  // stage s (this thread's bytes)
            asm volatile("bar.sync %0, 256;\n" ::"n"(PROD) : "memory");
            issue(s + P - 1, prev);  // the slot of stage s - 1: every producer thread is past it
            const int b = s % XS;
            if (s >= XS) {
                asm volatile("bar.sync %0, 512;\n" ::"r"(1 + XS + b) : "memory");  // EMPTY(b)
                duet_jitter();  // (DUET_JITTER builds only: race hunting, common.cuh)
            }
            // x64's decode: unit u = tid + 256 c: token n (8 consecutive tokens a quarter-warp;
            // tokens 64 c .. 64 c + 63), word j of the token's four quarters -> the core-matrix
            // rows of k16 steps 2 j, 2 j + 1.
            const u8* xs = xraw + slot * XRAW;
            u8* xb = xbuf + b * XBUF;
#pragma unroll
            for (int c = 0; c < XU; ++c) {
                if (c >= nsel) continue;  // (a uniform skip of the dead quarters)
                const int u = tid + PT * c;
                const int n = ((u >> 5) << 3) | (u & 7), j = (u >> 3) & 3;
                const u8* rr = xs + n * MOE_X_XROW;
                const uint2 sc = *(const uint2*)(rr + 64);
                u32 v[4][4];
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const u32 w = *(const u32*)(rr + 16 * q + 4 * j);
                    const u32 sw = q < 2 ? sc.x : sc.y;
                    const u32 s2 = slotm_scale2(sw >> (16 * (q & 1) + 8 * (j >> 1)));
                    u32 d[4];
                    slotm_decode8(w, d);
#pragma unroll
                    for (int h = 0; h < 4; ++h) v[q][h] = slotm_hmul2(d[h], s2);
                }
                u8* dst = xb + (n >> 3) * 2048 + (n & 7) * 16 + 2 * j * 256;
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int kc = 0; kc < 2; ++kc)
                        *(uint4*)(dst + h * 256 + kc * 128) =
                            make_uint4(v[0][2 * h + kc], v[1][2 * h + kc], v[2][2 * h + kc], v[3][2 * h + kc]);
            }
            wg_fence_smem();
            duet_jitter();
            asm volatile("bar.arrive %0, 512;\n" ::"r"(1 + b) : "memory");  // FULL(b)
            slot = next;
        }
        duet_cp_async_wait<0>();
        asm volatile("bar.sync %0, 512;\n" ::"n"(FIN) : "memory");
        if constexpr (EW != 512) return;
        duet_jitter();
        asm volatile("bar.sync %0, 512;\n" ::"n"(EPIB) : "memory");  // the tile is written
        // the consumers are down to EREG by now (before EPIB): take as many
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(EREG) : "memory");
    } else {
        // ---- consumers ----
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CREG) : "memory");
        const int ctid = tid - PT, cw = warp - 8, t = lane & 3;
        const i64 n0 = (i64)blockIdx.y * 128 + cw * 16;  // this warp's 16 weight rows
        const i64 nA = n0 + (lane >> 2), nB = nA + 8;
        // Rows past N load row N - 1 (in bounds); the epilogue skips them.
        const i64 ra = nA < N ? nA : N - 1, rb = nB < N ? nB : N - 1;
        const u8* wq = a.w + (i64)e * N * (K >> 1);
        const u8* wsf = a.w_sf + (i64)e * N * (K >> 4);
        const u8* gqa = wq + ra * (K >> 1) + 16 * t;
        const u8* gqb = wq + rb * (K >> 1) + 16 * t;
        const u8* gsa = wsf + ra * (K >> 4) + 4 * (t >> 1);
        const u8* gsb = wsf + rb * (K >> 4) + 4 * (t >> 1);
        // this thread's codes / scales in ring stage 0 (32-bit shared addresses)
        const u32 wq_s = duet_smem_u32(wring) + 16 * ctid, ws_s = duet_smem_u32(wring) + 8192 + 8 * ctid;
        auto issue_w = [&](int s, int slot) {
            if (s < nsi) {
                const u32 so = slot * MOE_X_WSTAGE;
                const i64 o = 64 * (i64)s;
                duet_cp_async16_s(wq_s + so, gqa + o);
                duet_cp_async16_s(wq_s + so + 4096, gqb + o);
                duet_cp_async4_s_if(ws_s + so, gsa + (o >> 3), true);
                duet_cp_async4_s_if(ws_s + so + 4, gsb + (o >> 3), true);
            }
            duet_cp_async_commit();
        };
        float acc[NT / 2];
        auto run = [&](auto ns_c) {
            constexpr int NS = decltype(ns_c)::value;
#pragma unroll
            for (int i = 0; i < NT / 2; ++i) acc[i] = 0.0f;
            u32 af[2][GK][4];
#pragma unroll 1
            for (int s = 0; s < P - 1; ++s) issue_w(s, s);
            int slot = 0;
#pragma unroll 1
            for (int s = 0; s < nsi; ++s) {
                const int prev = slot == 0 ? P - 1 : slot - 1;
                const int next = slot == P - 1 ? 0 : slot + 1;
                issue_w(s + P - 1, prev);     // the slot of stage s - 1 (this thread's bytes, read)
                duet_cp_async_wait<P - 1>();  // stage s
                const u8* ws = wring + slot * MOE_X_WSTAGE;
                const uint4 qa = *(const uint4*)(ws + 16 * ctid);
                const uint4 qb = *(const uint4*)(ws + 4096 + 16 * ctid);
                const uint2 sc = *(const uint2*)(ws + 8192 + 8 * ctid);
                const u32 sa = sc.x >> (16 * (t & 1)), sb = sc.y >> (16 * (t & 1));
                const u32 wa[4] = {qa.x, qa.y, qa.z, qa.w}, wb[4] = {qb.x, qb.y, qb.z, qb.w};
                const int b = s % XS;
                asm volatile("bar.sync %0, 512;\n" ::"r"(1 + b) : "memory");  // FULL(b)
                duet_jitter();
                // EMPTY of step s - 1's tile, arrived at below once its groups are complete (only
                // tiles the producer refills); branch-free between the wgmma groups (a branch there
                // made ptxas serialize them: C7513)
                const int rel = (s >= 1 && s - 1 + XS < nsi) ? 1 + XS + (s - 1) % XS : 0;
                const u8* xb = xbuf + b * XBUF;
#pragma unroll
                for (int gi = 0; gi < NG; ++gi) {
                    wg_wait1();  // only the previous group pending: its register set is free
                    if (gi == 1)  // step s - 1's groups are complete: its tile may be refilled
                        asm volatile(
                            "{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p bar.arrive %0, 512;\n}\n" ::"r"(rel)
                            : "memory");
                    u32(&f)[GK][4] = af[gi & 1];
#pragma unroll
                    for (int jj = 0; jj < GK / 2; ++jj) {
                        const int j = gi * (GK / 2) + jj;
                        const u32 s2a = slotm_scale2(sa >> (8 * (j >> 1)));
                        const u32 s2b = slotm_scale2(sb >> (8 * (j >> 1)));
                        u32 da[4], db[4];
                        slotm_decode8(wa[j], da);
                        slotm_decode8(wb[j], db);
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            f[2 * jj + h][0] = slotm_hmul2(da[2 * h], s2a);
                            f[2 * jj + h][1] = slotm_hmul2(db[2 * h], s2b);
                            f[2 * jj + h][2] = slotm_hmul2(da[2 * h + 1], s2a);
                            f[2 * jj + h][3] = slotm_hmul2(db[2 * h + 1], s2b);
                        }
                    }
                    wg_fence();
#pragma unroll
                    for (int k = 0; k < GK; ++k) {
                        const u64 db = wg_desc(xb + (gi * GK + k) * 256, 128, 2048);
                        if constexpr (NS == 3)
                            moe_x_rs192(acc, f[k], db);
                        else if constexpr (NS == 2)
                            moe_x_rs128(acc, f[k], db);
                        else
                            moe_x_rs64(acc, f[k], db);
                    }
                    wg_commit();
                }
                slot = next;
            }
            wg_wait0();
            moe_x_pin<NT / 2>(acc);
        };
        bool ran = false;
        if constexpr (NT >= 192) {
            if (nsel == 3) {
                run(moe_ic<3>{});
                ran = true;
            }
        }
        if (!ran) {
            if (nsel == 2)
                run(moe_ic<2>{});
            else
                run(moe_ic<1>{});
        }
        duet_cp_async_wait<0>();
        // every thread is done with the x tiles and the ring (wgmma reads, tile stores, cp.async)
        asm volatile("bar.sync %0, 512;\n" ::"n"(FIN) : "memory");
        duet_jitter();
        if constexpr (EW == 512) {
            moe_x_epi_tile<EPI, NT, NT, PT>(a, acc, x_smem, e, 64 * nsel);
            // the accumulators are in the tile: down to EREG for the stores (the producers take
            // the registers given back)
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(EREG) : "memory");
            asm volatile("bar.sync %0, 512;\n" ::"n"(EPIB) : "memory");
        } else {
            moe_x_epilogue<EPI, NT, NT, PT, EPIB>(a, acc, x_smem, e, row0, row_end,
                                                   (i64)blockIdx.y * 128, 64 * nsel);
            return;
        }
    }
    // EW 512: every thread at EREG registers, one copy of the store loop for both roles
    moe_x_epi_store<EPI, NT, NT, 512, 0>(a, x_smem, row0, row_end, (i64)blockIdx.y * 128);
}

#define MOE_XW_KERNEL(NAME, EPI, NT, P, XS, EW)                                                   \
    extern "C" __global__ void __launch_bounds__(512, 1) NAME(MOE_GEMM_PARAMS) {                   \
        DUET_PDL_ENTRY();                                                                          \
        MOE_GEMM_ARGS                                                                              \
        moe_xw_body<EPI, NT, P, XS, EW>(a);                                                        \
    }
// Forms xw{NT} (host: gpu/src/ops/moe.rs X_FORMS, after the S forms, same order). EW: threads
// that store the epilogue tile (256: the consumers; 512: the producers too, session 35: ncu had
// xw192's GEMM1 epilogue at 27.6% of the samples with the producers idle).
#define MOE_XW_FORM(TAG, NT, P, XS, EW)                                                           \
    MOE_XW_KERNEL(moe_gemm_##TAG##_ff_q, 0, NT, P, XS, EW)                                         \
    MOE_XW_KERNEL(moe_gemm_##TAG##_ff_o, 1, NT, P, XS, EW)
MOE_XW_FORM(xw128, 128, 4, 3, 256)
MOE_XW_FORM(xw192, 192, 4, 2, 256)
MOE_XW_FORM(xw192t3, 192, 3, 3, 256)
MOE_XW_FORM(xw192e, 192, 4, 2, 512)
MOE_XW_FORM(xw192t3e, 192, 3, 3, 512)

// Racecheck calibration (session 35): the xw forms' hand-over alone. 512 threads a block:
// threads 0..255 write tile s % 2 of step s (4 floats a thread), then bar.arrive FULL(b) = 1 + b
// (512); from step 2 on they first sync EMPTY(b) = 3 + b (512). Threads 256..511 sync FULL(b),
// sum 4 floats of the tile (another producer thread's), and arrive on EMPTY(b) when the tile is
// refilled. Then, like the epilogue, they overwrite both tiles, after `fin` 1: a 512-thread
// bar.sync (5) with the producers (the xw forms since session 35), `fin` 0: only a 256-thread
// bar.sync (6) among themselves (session 34's order: the producers' last stores ordered only by
// their FULL arrival). out[256 block + c]: the u32 sum a consumer thread read, as f32 bits;
// out[256 gridDim.x + 256 block + c]: what it read back after the overwrite.
extern "C" __global__ void __launch_bounds__(512, 1) moe_xw_handover_probe(int steps, int fin,
                                                                           float* out) {
    DUET_PDL_ENTRY();
    __shared__ __align__(16) float tiles[2][1024];
    const int tid = threadIdx.x;
    const i64 blocks = gridDim.x, blk = blockIdx.x;
    if (tid < 256) {
#pragma unroll 1
        for (int s = 0; s < steps; ++s) {
            const int b = s & 1;
            if (s >= 2) asm volatile("bar.sync %0, 512;\n" ::"r"(3 + b) : "memory");
            *(float4*)&tiles[b][4 * tid] =
                make_float4((float)(s * 4096 + 4 * tid), (float)(s * 4096 + 4 * tid + 1),
                            (float)(s * 4096 + 4 * tid + 2), (float)(s * 4096 + 4 * tid + 3));
            asm volatile("bar.arrive %0, 512;\n" ::"r"(1 + b) : "memory");
        }
        if (fin) asm volatile("bar.sync 5, 512;\n" ::: "memory");
        return;
    }
    const int c = tid - 256, src = (c + 37) & 255;
    u32 acc = 0u;  // exact: integers < 2^24
#pragma unroll 1
    for (int s = 0; s < steps; ++s) {
        const int b = s & 1;
        asm volatile("bar.sync %0, 512;\n" ::"r"(1 + b) : "memory");
        const float4 v = *(const float4*)&tiles[b][4 * src];
        acc += (u32)v.x + (u32)v.y + (u32)v.z + (u32)v.w;
        if (s + 2 < steps) asm volatile("bar.arrive %0, 512;\n" ::"r"(3 + b) : "memory");
    }
    if (fin)
        asm volatile("bar.sync 5, 512;\n" ::: "memory");
    else
        asm volatile("bar.sync 6, 256;\n" ::: "memory");
    tiles[0][4 * c] = -(float)c;
    tiles[1][4 * c + 1] = -(float)c;
    asm volatile("bar.sync 6, 256;\n" ::: "memory");
    out[256 * blk + c] = __uint_as_float(acc);
    out[256 * blocks + 256 * blk + c] = tiles[0][4 * ((c + 1) & 255)] + tiles[1][4 * ((c + 1) & 255) + 1];
}

// The XH forms' token operand: NVFP4 rows [M, K] (codes + E4M3 block scales) to f16 [M, K]
// = code x block scale (exact in f16; the global scale stays for the epilogue), each 8-code
// word in slotm_decode8's k order: the bytes the S forms' decode writes into a tile row.
// One thread a 16-code block (8 bytes of codes, 1 scale byte, 32 bytes out).
extern "C" __global__ void moe_x_f16_v1(const u8* __restrict__ codes, const u8* __restrict__ sf,
                                        i64 blocks, u8* __restrict__ out) {
    DUET_PDL_ENTRY();
    for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < blocks;
         b += (i64)gridDim.x * blockDim.x) {
        moe_s_decode16(*(const uint2*)(codes + 8 * b), sf[b], out + 32 * b, 16);
    }
}

// ---------------------------------------------------------------------------------------------
// moe_finalize

extern "C" __global__ void moe_finalize_v1(const void* __restrict__ eo, int eo_dt,
                                           const float* __restrict__ wts,
                                           const i32* __restrict__ inverse, i64 T, i64 k, i64 H,
                                           float* __restrict__ out) {
    DUET_PDL_ENTRY();
    const i64 n = T * H;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const i64 tok = i / H, h = i - tok * H;
        float acc = 0.0f;
        for (i64 j = 0; j < k; ++j) {
            const float w = wts[tok * k + j];
            const i64 r = inverse[tok * k + j];
            const float prod = w * load_as_f32(eo, r * H + h, eo_dt);
            acc = acc + prod;
        }
        out[i] = acc;
    }
}

// ---------------------------------------------------------------------------------------------
// bench helpers: fast seeded fill on the device (values only need a realistic range).

__device__ __forceinline__ u32 moe_hash(u64 x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (u32)x;
}

// kind 0: random bytes (E2M1 code pairs); kind 1: E4M3 scales in [2^-3, 2^3) (exponent field
// 4..9, any mantissa); kind 2: bf16 normal-ish values in (-1, 1).
extern "C" __global__ void moe_fill(u8* __restrict__ p, i64 n, u64 seed, int kind) {
    DUET_PDL_ENTRY();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const u32 h = moe_hash(seed * 0x9e3779b97f4a7c15ull + (u64)i);
        if (kind == 0) {
            p[i] = (u8)h;
        } else if (kind == 1) {
            p[i] = (u8)((((h >> 8) % 6u) + 4u) << 3 | (h & 7u));
        } else if ((i & 1) == 0 && i + 1 < n) {
            float f = ((float)(h >> 8) * (1.0f / 16777216.0f)) * 2.0f - 1.0f;
            u16 b = f32_to_bf16(f);
            p[i] = (u8)b;
            p[i + 1] = (u8)(b >> 8);
        }
    }
}
