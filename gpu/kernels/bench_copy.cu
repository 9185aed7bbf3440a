// Device-to-device copy ceiling for the benches (16-byte loads and stores, grid-stride).
//
// Versions: v1 (one load in flight a thread); v2 (four 16-byte loads in flight a thread before
// the four stores, grid-stride; session 23: is the ceiling the copy, or its one load a thread?).

extern "C" __global__ void copy_v1(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        dst[i] = __ldg(src + i);
}

extern "C" __global__ void copy_v2(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = __ldg(src + i), b = __ldg(src + i + stride);
        const uint4 c = __ldg(src + i + 2 * stride), d = __ldg(src + i + 3 * stride);
        dst[i] = a;
        dst[i + stride] = b;
        dst[i + 2 * stride] = c;
        dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = __ldg(src + i);
}

// Session 24's probe of the gap between these kernels and the driver's memcpy (copy_v1 522 us,
// memcpy 483 us for 2.05 GB; 549 / 508 us for 2 GiB): cache hints and access order. Measured
// (2 GiB, call 2): v4 565.7, v5 557.6, v6 560.2 (4 blocks an SM: 559.8), v7 549.1 us; copy_v1
// 550.5. None beats v1: the memcpy runs on the copy engines, not on the SMs.
//   v4: v2 with the loads as ld.global.nc.L1::no_allocate.L2::256B (the L2 fetches 256-byte
//       blocks) and plain stores;
//   v5: v4 with streaming stores (st.global.cs: evict-first in L2);
//   v6: warp-contiguous chunks: a warp copies 4 KiB in one go (8 loads in flight a lane, lane l
//       at 16 l + 512 j), chunks grid-stride over warps, v4's loads and plain stores;
//   v7: v6 with the streaming stores.
__device__ __forceinline__ uint4 copy_ld256(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ void copy_st_cs(uint4* p, uint4 v) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}
template <bool CS>
__device__ __forceinline__ void copy_st(uint4* p, uint4 v) {
    if (CS)
        copy_st_cs(p, v);
    else
        *p = v;
}
template <bool CS>
__device__ __forceinline__ void copy_hint_body(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = copy_ld256(src + i), b = copy_ld256(src + i + stride);
        const uint4 c = copy_ld256(src + i + 2 * stride), d = copy_ld256(src + i + 3 * stride);
        copy_st<CS>(dst + i, a);
        copy_st<CS>(dst + i + stride, b);
        copy_st<CS>(dst + i + 2 * stride, c);
        copy_st<CS>(dst + i + 3 * stride, d);
    }
    for (; i < n; i += stride) copy_st<CS>(dst + i, copy_ld256(src + i));
}
template <bool CS>
__device__ __forceinline__ void copy_warp_body(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    constexpr int J = 8;  // 8 x 32 lanes x 16 bytes = 4 KiB a warp-chunk
    const int lane = threadIdx.x & 31;
    const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
    const i64 chunks = (n + 32 * J - 1) / (32 * J);
    for (i64 c = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); c < chunks; c += warps) {
        const i64 base = c * 32 * J + lane;
        uint4 v[J];
        if (base + 32 * (J - 1) < n) {
#pragma unroll
            for (int j = 0; j < J; ++j) v[j] = copy_ld256(src + base + 32 * j);
#pragma unroll
            for (int j = 0; j < J; ++j) copy_st<CS>(dst + base + 32 * j, v[j]);
        } else {
            for (int j = 0; j < J; ++j)
                if (base + 32 * j < n) copy_st<CS>(dst + base + 32 * j, copy_ld256(src + base + 32 * j));
        }
    }
}
extern "C" __global__ void copy_v4(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    copy_hint_body<false>(src, dst, n);
}
extern "C" __global__ void copy_v5(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    copy_hint_body<true>(src, dst, n);
}
extern "C" __global__ void copy_v6(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    copy_warp_body<false>(src, dst, n);
}
extern "C" __global__ void copy_v7(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    copy_warp_body<true>(src, dst, n);
}

// v3 (session 23; first run in session 24: 556.6-559.3 us for 2 GiB, copy_v1 549-551, the
// driver's memcpy 508-510, which ncu shows is not a kernel: the copy engines): the copy through
// the bulk copy engine both ways. One thread a block drives COPY3_ST stages of COPY3_CH bytes: a bulk load
// global -> shared completing on the stage's mbarrier, then a bulk store shared -> global
// (bulk_group), and the stage is reloaded once the store has read it (wait_group.read). The
// question it answers: does the engine's path reach the driver's memcpy (484 us for 2.05 GB on
// the H200, session 23) where load / store kernels stop near 522 us? Needs n * 16 bytes in
// whole 16-byte vectors (every copy size a multiple of 16).
#define COPY3_ST 5
#define COPY3_CH 8192
extern "C" __global__ void __launch_bounds__(32) copy_v3(const uint4* __restrict__ src,
                                                          uint4* __restrict__ dst, i64 n) {
    extern __shared__ __align__(128) unsigned char copy3_sm[];
    u64* full = (u64*)copy3_sm;
    unsigned char* ring = copy3_sm + 128;
    if (threadIdx.x != 0) return;
    const i64 bytes = n * 16;
    const i64 chunks = (bytes + COPY3_CH - 1) / COPY3_CH;
    const unsigned char* s8 = (const unsigned char*)src;
    unsigned char* d8 = (unsigned char*)dst;
    for (int s = 0; s < COPY3_ST; ++s) duet_mbar_init(&full[s], 1);
    duet_mbar_init_fence();
    auto load = [&](i64 c, int s) {
        const u32 len = (u32)min((i64)COPY3_CH, bytes - c * COPY3_CH);
        duet_mbar_expect_tx(&full[s], len);
        duet_bulk_g2s(ring + s * COPY3_CH, s8 + c * COPY3_CH, len, &full[s]);
        duet_mbar_arrive(&full[s]);
    };
    for (int s = 0; s < COPY3_ST; ++s) {
        const i64 c = (i64)blockIdx.x + (i64)s * gridDim.x;
        if (c < chunks) load(c, s);
    }
    for (i64 k = 0;; ++k) {
        const i64 c = (i64)blockIdx.x + k * gridDim.x;
        if (c >= chunks) break;
        const int s = (int)(k % COPY3_ST);
        duet_mbar_wait(&full[s], (u32)((k / COPY3_ST) & 1));
        const u32 len = (u32)min((i64)COPY3_CH, bytes - c * COPY3_CH);
        duet_bulk_s2g(d8 + c * COPY3_CH, ring + s * COPY3_CH, len);
        duet_bulk_commit();
        const i64 nx = c + (i64)COPY3_ST * gridDim.x;
        if (nx < chunks) {
            duet_bulk_wait_read<0>();  // stage s read
            load(nx, s);
        }
    }
    duet_bulk_wait<0>();  // every store complete
}

// Session 28's in-place probes: is SSU v11's ~92% of copy_v1 the update's work, or the memory
// pattern of an in-place update? Each adds 1 to every byte in place (`__vadd4`, each byte wraps
// on its own), so the host knows how many times every byte was visited (0x5A + launches), and
// reads and writes the same bytes as a state update does:
//   v8:  grid-stride, one 16-byte vector a thread (copy_v1 in place);
//   v9:  v11's pattern: the buffer cut into 16 KiB tiles (a bf16 state row block of the Super
//        shape: 64 rows x 128 x 2 bytes) and 4 KiB chunks, the chunks split into one contiguous
//        range a warp, two chunks in flight a lane (8 vectors each) while one is bumped and
//        stored;
//   v10: v9 with whole tiles dealt round-robin over the warps (warp w: tiles w, w + W, ...),
//        so the warps sweep the buffer together instead of each streaming its own region.
// Both need n a multiple of 1024 vectors (16 KiB); the host checks.
__device__ __forceinline__ uint4 copy_bump(uint4 v) {
    v.x = __vadd4(v.x, 0x01010101u);
    v.y = __vadd4(v.y, 0x01010101u);
    v.z = __vadd4(v.z, 0x01010101u);
    v.w = __vadd4(v.w, 0x01010101u);
    return v;
}
extern "C" __global__ void copy_v8(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    (void)src;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        dst[i] = copy_bump(dst[i]);
}
// Warp w's chunk j (0 <= j < its count): v9 contiguous (TC = 0), the others tile-interleaved
// with tiles of TC chunks (v10: TC = 4, 16 KiB).
template <int TC>
__device__ __forceinline__ i64 copy_inplace_chunk(i64 w, i64 warps, i64 tiles4, i64 j) {
    if (TC > 0) return ((j / TC) * warps + w) * TC + (j % TC);
    return tiles4 * 4 * w / warps + j;
}
// TC = 0: v9's contiguous ranges over 16 KiB tiles; TC > 0: whole tiles of TC 4 KiB chunks dealt
// round-robin over the warps. SRC: read `src`, write `dst` bumped (a copy in v10's order, the
// pattern of a streaming kernel with separate input and output); else in place.
template <int TC, bool SRC = false, int PF = 0>
__device__ __forceinline__ void copy_inplace_body(const uint4* __restrict__ src, uint4* __restrict__ p, i64 n) {
    constexpr int J = 8;  // vectors a lane and chunk: 8 x 32 x 16 = 4 KiB
    const int lane = threadIdx.x & 31;
    const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
    const i64 w = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const i64 tiles4 = n / 1024;
    const i64 tiles = TC > 0 ? n / (1024 / 4 * TC) : tiles4;
    const i64 count = TC > 0 ? (w < tiles ? ((tiles - 1 - w) / warps + 1) * TC : 0)
                             : tiles4 * 4 * (w + 1) / warps - tiles4 * 4 * w / warps;
    const uint4* in = SRC ? src : p;
    uint4 a[J], b[J];
    auto load = [&](uint4(&q)[J], i64 j) {
        // PF > 0 (tiled only): lane 0 sends the warp's tile PF rounds ahead to the L2 through the
        // bulk copy engine when it starts a tile (more bytes in flight without registers).
        if (PF > 0 && TC > 0 && lane == 0 && j % TC == 0 && j + PF * TC < count)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(
                             in + copy_inplace_chunk<TC>(w, warps, tiles4, j + PF * TC) * 32 * J),
                         "r"(TC * 4096)
                         : "memory");
        const uint4* s = in + copy_inplace_chunk<TC>(w, warps, tiles4, j) * 32 * J + lane;
#pragma unroll
        for (int i = 0; i < J; ++i) q[i] = s[32 * i];
    };
    auto store = [&](uint4(&q)[J], i64 j) {
        uint4* d = p + copy_inplace_chunk<TC>(w, warps, tiles4, j) * 32 * J + lane;
#pragma unroll
        for (int i = 0; i < J; ++i) d[32 * i] = copy_bump(q[i]);
    };
    if (count > 0) load(a, 0);
    for (i64 j = 0; j < count; j += 2) {
        if (j + 1 < count) load(b, j + 1);
        store(a, j);
        if (j + 2 < count) load(a, j + 2);
        if (j + 1 < count) store(b, j + 1);
    }
}
extern "C" __global__ void __launch_bounds__(128) copy_v9(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                                           i64 n) {
    copy_inplace_body<0>(src, dst, n);
}
extern "C" __global__ void __launch_bounds__(128) copy_v10(const uint4* __restrict__ src,
                                                            uint4* __restrict__ dst, i64 n) {
    copy_inplace_body<4>(src, dst, n);
}

// Session 29: v10's tile size swept (does a denser window of concurrent accesses, or a longer
// run a warp, get nearer the copy engines' ~4.2 TB/s?), and v10's order with a separate source.
//   v11: tiles of one 4 KiB chunk; v12: 8 KiB; v13: 64 KiB; v14: 256 KiB (n a multiple of it);
//   v15: v10 (16 KiB tiles) reading src, writing dst bumped (a copy, checked as one: 0x5B);
//   v16: v10 with each warp's tile one round ahead sent to the L2 by a bulk prefetch;
//   v17: v16 two rounds ahead.
extern "C" __global__ void copy_v11(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    copy_inplace_body<1>(src, dst, n);
}
extern "C" __global__ void copy_v12(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    copy_inplace_body<2>(src, dst, n);
}
extern "C" __global__ void copy_v13(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    copy_inplace_body<16>(src, dst, n);
}
extern "C" __global__ void copy_v14(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    copy_inplace_body<64>(src, dst, n);
}
extern "C" __global__ void copy_v15(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    copy_inplace_body<4, true>(src, dst, n);
}
extern "C" __global__ void copy_v16(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    copy_inplace_body<4, false, 1>(src, dst, n);
}
extern "C" __global__ void copy_v17(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    copy_inplace_body<4, false, 2>(src, dst, n);
}
