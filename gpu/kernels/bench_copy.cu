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

// v3 (session 23, compile-checked; not yet run on the device): the copy through the bulk copy
// engine both ways. One thread a block drives COPY3_ST stages of COPY3_CH bytes: a bulk load
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
