// The f32 front halves of the fused quantizing epilogues; the NVFP4 back half is nvfp4.cu's
// quantizer run on their f32 output (so both halves are bit-exact with the reference).
// CPU spec: reference/src/ops/{rmsnorm,fused_add_rmsnorm,gated_rmsnorm,relu2}{,_nvfp4}.rs.
//
// Versions:
//   v1  norm_seg_v1: one block per (row, group) segment; the segment is staged in shared memory
//       and thread 0 sums the squares LEFT TO RIGHT in f32 (the reference's sequential sum: a
//       tree reduction would round differently and the cases compare the codes exactly);
//       rstd = 1/sqrtf(ss/L + eps) with IEEE sqrt and division. Covers rmsnorm (no residual,
//       no gate), fused add (residual in, residual out rounded to its dtype) and gated
//       (silu(z) = z / (1 + exp(-z)), exp evaluated in f64 and rounded: the reference's f32
//       libm exp is within 0.5 ulp + epsilon of that).
//       relu2_v1: y = fmaxf(x, 0)^2 elementwise.
//       Both optionally round y to bf16 (round_before_quant = bf16) and write f32 y.

__device__ __forceinline__ float silu_ref(float z) {
    float e = (float)exp((double)(-z));
    return z / (1.0f + e);
}

// grid = rows * (d / L), block = 256, dynamic smem = 4 * L bytes.
// res: residual input or null (rdt ignored); z: gate or null; order 0 = gate then norm,
// 1 = norm then gate. res_out (dtype rdt) receives f32(x) + f32(res) rounded.
extern "C" __global__ void norm_seg_v1(const void* __restrict__ x, int xdt,
                                       const void* __restrict__ res, int rdt,
                                       const void* __restrict__ z, int zdt,
                                       const void* __restrict__ w, int wdt, i64 d, i64 L,
                                       int order, float eps, int round_bf16,
                                       float* __restrict__ y, void* __restrict__ res_out) {
    extern __shared__ float seg[];
    __shared__ float rstd_sh;
    const i64 groups = d / L;
    const i64 row = blockIdx.x / groups, grp = blockIdx.x % groups;
    const i64 base = row * d + grp * L, c0 = grp * L;
    for (i64 i = threadIdx.x; i < L; i += blockDim.x) {
        float a = load_as_f32(x, base + i, xdt);
        if (res != 0) {
            a = a + load_as_f32(res, base + i, rdt);
            store_from_f32(res_out, base + i, rdt, a);
        }
        if (z != 0 && order == 0) a = a * silu_ref(load_as_f32(z, base + i, zdt));
        seg[i] = a;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float ss = 0.0f;
        for (i64 i = 0; i < L; ++i) ss = ss + seg[i] * seg[i];
        rstd_sh = 1.0f / sqrtf(ss / (float)L + eps);
    }
    __syncthreads();
    const float r = rstd_sh;
    for (i64 i = threadIdx.x; i < L; i += blockDim.x) {
        float v = seg[i] * r * load_as_f32(w, c0 + i, wdt);
        if (z != 0 && order == 1) v = v * silu_ref(load_as_f32(z, base + i, zdt));
        if (round_bf16) v = bf16_to_f32(f32_to_bf16(v));
        y[base + i] = v;
    }
}

extern "C" __global__ void relu2_v1(const void* __restrict__ x, int xdt, i64 n, int round_bf16,
                                    float* __restrict__ y) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float r = fmaxf(load_as_f32(x, i, xdt), 0.0f);
        float v = r * r;
        if (round_bf16) v = bf16_to_f32(f32_to_bf16(v));
        y[i] = v;
    }
}
