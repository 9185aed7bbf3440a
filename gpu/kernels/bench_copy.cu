// Device-to-device copy ceiling for the benches (16-byte loads and stores, grid-stride).
//
// Versions: v1 only.

extern "C" __global__ void copy_v1(const uint4* __restrict__ src, uint4* __restrict__ dst, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        dst[i] = __ldg(src + i);
}
