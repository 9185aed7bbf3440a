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
