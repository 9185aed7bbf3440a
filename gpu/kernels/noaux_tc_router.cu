// noaux_tc_router: sigmoid + bias, (grouped) top-k over packed u64 keys, normalised weights.
// The CPU spec is reference/src/ops/noaux_tc_router.rs; every result here is bit-identical to it.
//
// Shared math (both versions):
//   s   = sigmoid(x): tanh mode 0.5f*float(tanh(double(0.5f*x)))+0.5f, exp mode
//         float(1/(1+exp(-double(x)))) -- the reference's formulas, evaluated in f64 like the
//         reference (CUDA's f64 tanh/exp and the host libm can differ by an f64 ulp, which changes
//         the f32 result only when the f64 value lies within ~2^-29 relative of an f32 rounding
//         midpoint: not seen in testing, but possible in principle).
//   key = s + bias (f32); packed = (twiddle(key) << 16) | (65535 - e), NaN key -> 0x7FFFFFFF.
//   Weights: the f32 sum of the winners' s in rank order (sequential), then the NormMode formula.
//
// Versions:
//   v1  one block per token, keys in shared memory, k rounds of a block-wide u64 max. Any
//       E <= 4096, any k, grouped routing (n_group > 1). The simple, obviously-right version.
//   v2  one warp per token, E = 32*N (N in 1..32) keys in registers, n_group == 1, k <= 32.
//       Filter: tau = k-th largest of the 32 lane maxima (bitonic sort across the warp); only
//       keys >= tau can be in the top k (k lane maxima are >= tau). If at most 32 keys pass,
//       they are compacted one per lane through shared memory and bitonic-sorted: lanes 0..k-1
//       hold the winners in order; up to 64 pass as two per lane (two sorts + one bitonic
//       merge of max(A[i], B[31-i])). Otherwise (adversarial data) fall back to k rounds of a
//       warp-wide u64 max over the registers. (With random logits ~35 keys pass on average,
//       more than 32 two times in three: the 64 path matters.)
//   v3  one block per token, one key per thread (block = P = next power of two >= max(E, 32),
//       P <= 1024, padding keys 0), n_group == 1: a bitonic sort of the P packed keys, strides
//       < 32 through warp shuffles, larger strides through shared memory; threads 0..k-1 then
//       hold the winners in order. Latency ~ log2(P)^2/2 short steps: the small-T version.
//   v5, v6  v4 in persistent blocks (v6: next token's row loaded first); see "v5 / v6" below.
//   v7  v4 with tau = the k-th largest of the lanes' top-2 lower bounds and, for at most 32
//       candidates, a bitonic sort of the exact keys instead of the rank loop (session 5); see
//       "v7" below.
//   v8  v7's filter on a bound from one MUFU.TANH and one FFMA per expert, the row's registers
//       freed before the exact stage, s kept by expert in shared memory, a one-compare sort
//       (session 6); see "v8" below.
//   v9  v8 in persistent warps with the next row staged in shared memory by cp.async, tau by
//       k rounds of a warp max, bit-loop compaction, k = 22 kernels (session 6); see "v9".
//   v10 v9 with v4's ex2 / rcp approximate sigmoid in the filter (session 6).
//   v4  one warp per token, 8 tokens per 256-thread block, E = 32*N (N = 8 or 16: E = 256,
//       512), n_group == 1, k <= 32, logits 16-byte aligned. The row is read with 16-byte
//       vector loads (f32: 4 experts per load, bf16/f16: 8), the bias is staged per block in
//       shared memory as f32. Exact sigmoids only for candidates:
//       1. every expert gets a cheap approximate sigmoid sa = rcp.approx(1 + ex2.approx(-x
//          log2 e)), |sa - s| <= 2^-23 for every f32 x and every sigmoid mode (measured over
//          all 2^32 x on the H200 by gpu_router.rs), and bounds L = (sa - 2^-16) + bias <=
//          key <= U = (sa + 2^-16) + bias (f32 rounding is monotone and the exact key is the
//          rounded sum of the exact s, so this holds for the computed values, not just the
//          real ones). A row with a NaN logit or bias (seen as a NaN in the sum of its U)
//          goes to the slow path, so the fast path compares plain floats.
//       2. tau = k-th largest lane maximum of L (f32 bitonic sort across the warp): k experts
//          have key >= L >= tau, so every winner has U >= key >= tau (-0 / +0 ties only add
//          candidates).
//       3. candidates (U >= tau) are compacted through shared memory (count scan by
//          shuffles); if at most 64 pass, each lane evaluates the EXACT sigmoid
//          (router_sigmoid, any mode) and packed key of its one or two candidates, and ranks
//          them by counting larger packed keys among all candidates (keys are distinct: the
//          index is in them). Rank < k: a winner, in order.
//       4. otherwise (NaN rows, adversarial ties) the slow path: exact sigmoids for every
//          expert and k rounds of a warp-wide u64 max, as v2.
//       Weights: the sequential f32 sum of the winners' s in rank order, then router_weight.

#define NORM_FP64 0
#define NORM_FP32_DIV_MUL 1
#define NORM_FP32_NO_EPS 2
#define SIG_TANH 0
#define SIG_EXP 1
// Bench-only (not exact, never used by the op): CUDA's f32 tanhf, to measure what the f64
// sigmoid costs.
#define SIG_TANH_F32_BENCH 2
// SigmoidMode::TanhF32: 0.5*duet_tanhf(0.5x)+0.5 in f32 (common.cuh), exact vs the reference.
#define SIG_TANH_F32 3

__device__ __forceinline__ float router_sigmoid(float x, int mode) {
    if (mode == SIG_TANH_F32) return sigmoid_tanh_f32(x);
    if (mode == SIG_TANH_F32_BENCH) return 0.5f * tanhf(0.5f * x) + 0.5f;
    if (mode == SIG_TANH) {
        float t = (float)tanh((double)(0.5f * x));
        return 0.5f * t + 0.5f;
    }
    return (float)(1.0 / (1.0 + exp(-(double)x)));
}

__device__ __forceinline__ u64 router_pack(float key, int e) {
    if (key != key) key = __uint_as_float(0x7fffffffu);
    return ((u64)twiddle_f32(key) << 16) | (u64)(65535 - e);
}

__device__ __forceinline__ int router_unpack(u64 p) { return 65535 - (int)(p & 0xffffu); }

__device__ __forceinline__ float router_weight(float s, float sum, double r, int norm, int mode) {
    // The common case (normalised, f64) first: a uniform branch, not a jump table.
    if (norm && mode == NORM_FP64) return (float)((double)s * r / ((double)sum + 1e-20));
    if (norm) {
        if (mode == NORM_FP64) return (float)((double)s * r / ((double)sum + 1e-20));
        if (mode == NORM_FP32_DIV_MUL) return (s / (sum + 1e-20f)) * (float)r;
        return (s * (float)r) / sum;
    }
    if (mode == NORM_FP64) return (float)((double)s * r);
    return s * (float)r;
}

// Block-wide max of a u64 (all threads get it). `red` holds >= 32 u64.
__device__ __forceinline__ u64 block_max_u64(u64 v, u64* red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_max_u64(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    u64 m = lane < nw ? red[lane] : 0ull;
    return warp_max_u64(m);
}

// v1: grid = T blocks, block = 256 threads,
// dynamic smem = 8E (packed) + 8*32 + 8*n_group + 4E (s) + 4E (key) + 4k + 4*n_group bytes.
extern "C" __global__ void router_v1(const void* __restrict__ logits, int logits_dt,
                                     const void* __restrict__ bias, int bias_dt, int E, int k,
                                     int n_group, int topk_group, double r, int norm, int norm_mode,
                                     int sig_mode, int* __restrict__ out_idx,
                                     float* __restrict__ out_w) {
    DUET_PDL_ENTRY();
    extern __shared__ __align__(16) unsigned char smem[];
    u64* packed = (u64*)smem;
    u64* red = packed + E;
    u64* gkey = red + 32;
    float* s = (float*)(gkey + n_group);
    float* key = s + E;
    int* win = (int*)(key + E);
    int* kept = win + k;
    const i64 t = blockIdx.x;
    const i64 row = t * (i64)E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        float x = load_as_f32(logits, row + e, logits_dt);
        float sv = router_sigmoid(x, sig_mode);
        float kv = sv + load_as_f32(bias, e, bias_dt);
        s[e] = sv;
        key[e] = kv;
        packed[e] = router_pack(kv, e);
    }
    __syncthreads();
    if (n_group > 1) {
        int per = E / n_group;
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
        for (int g = warp; g < n_group; g += nw) {
            u64 b1 = 0, b2 = 0;
            for (int e = g * per + lane; e < (g + 1) * per; e += 32) {
                u64 p = packed[e];
                if (p > b1) { b2 = b1; b1 = p; } else if (p > b2) { b2 = p; }
            }
            u64 m1 = warp_max_u64(b1);
            u64 m2 = warp_max_u64(b1 == m1 ? b2 : b1);
            if (lane == 0) {
                float sc = key[router_unpack(m1)] + key[router_unpack(m2)];
                gkey[g] = router_pack(sc, g);
            }
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            // Keep the topk_group best groups (a kept group never competes again).
            for (int g = lane; g < n_group; g += 32) kept[g] = 0;
            __syncwarp();
            for (int i = 0; i < topk_group; ++i) {
                u64 b = 0;
                for (int g = lane; g < n_group; g += 32) {
                    u64 p = gkey[g];
                    if (!kept[g] && p > b) b = p;
                }
                u64 m = warp_max_u64(b);
                __syncwarp();
                if (lane == 0) kept[router_unpack(m)] = 1;
                __syncwarp();
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            if (!kept[e / per]) packed[e] = 0ull;  // experts of dropped groups never win
        __syncthreads();
    }
    for (int i = 0; i < k; ++i) {
        u64 b = 0;
        for (int e = threadIdx.x; e < E; e += blockDim.x) {
            u64 p = packed[e];
            b = p > b ? p : b;
        }
        u64 m = block_max_u64(b, red);
        if (threadIdx.x == 0) {
            int w = router_unpack(m);
            win[i] = w;
            packed[w] = 0ull;
        }
        __syncthreads();
    }
    __shared__ float sum_sh;
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int i = 0; i < k; ++i) sum = sum + s[win[i]];
        sum_sh = sum;
    }
    __syncthreads();
    float sum = sum_sh;
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        int w = win[i];
        out_idx[t * k + i] = w;
        out_w[t * k + i] = router_weight(s[w], sum, r, norm, norm_mode);
    }
}

// Descending bitonic sort of one u64 per lane across the warp.
__device__ __forceinline__ u64 warp_sort_desc_u64(u64 v) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            u64 o = __shfl_xor_sync(DUET_FULL_MASK, v, stride);
            bool up = (lane & size) == 0;            // this sub-sequence sorts descending
            bool lower = (lane & stride) == 0;       // this lane keeps the larger if lower
            bool keep_max = (lower == up);
            u64 mx = o > v ? o : v, mn = o > v ? v : o;
            v = keep_max ? mx : mn;
        }
    }
    return v;
}

// Sorts a bitonic sequence (one u64 per lane) descending across the warp.
__device__ __forceinline__ u64 warp_merge_desc_u64(u64 v) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int stride = 16; stride > 0; stride >>= 1) {
        u64 o = __shfl_xor_sync(DUET_FULL_MASK, v, stride);
        bool lower = (lane & stride) == 0;
        u64 mx = o > v ? o : v, mn = o > v ? v : o;
        v = lower ? mx : mn;
    }
    return v;
}

// v2 body for N keys per lane (E = 32 N). grid = ceil(T / 4), block = 128 (4 warps).
template <int N>
__device__ __forceinline__ void router_v2_body(const void* __restrict__ logits, int logits_dt,
                                               const void* __restrict__ bias, int bias_dt, i64 T,
                                               int k, double r, int norm, int norm_mode,
                                               int sig_mode, int* __restrict__ out_idx,
                                               float* __restrict__ out_w) {
    __shared__ u64 cand[4][64];
    __shared__ float wsum[4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const i64 t = (i64)blockIdx.x * 4 + warp;
    if (t >= T) return;
    const int E = 32 * N;
    const i64 row = t * (i64)E;
    u64 p[N];
    float sv[N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
        int e = j * 32 + lane;
        float x = load_as_f32(logits, row + e, logits_dt);
        sv[j] = router_sigmoid(x, sig_mode);
        p[j] = router_pack(sv[j] + load_as_f32(bias, e, bias_dt), e);
    }
    u64 lm = p[0];
#pragma unroll
    for (int j = 1; j < N; ++j) lm = p[j] > lm ? p[j] : lm;
    u64 sorted = warp_sort_desc_u64(lm);
    u64 tau = __shfl_sync(DUET_FULL_MASK, sorted, k - 1);
    int c = 0;
#pragma unroll
    for (int j = 0; j < N; ++j) c += p[j] >= tau ? 1 : 0;
    // Inclusive scan of c across lanes.
    int incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int v = __shfl_up_sync(DUET_FULL_MASK, incl, o);
        if (lane >= o) incl += v;
    }
    int total = __shfl_sync(DUET_FULL_MASK, incl, 31);
    u64 mine;
    if (total <= 64) {
        // <= 64 candidates: two per lane, two warp sorts, then the top 32 of both lists by
        // max(A[i], B[31-i]) (a bitonic sequence) and one bitonic merge.
        int pos = incl - c;
#pragma unroll
        for (int j = 0; j < N; ++j)
            if (p[j] >= tau) cand[warp][pos++] = p[j];
        __syncwarp();
        u64 a = lane < total ? cand[warp][lane] : 0ull;
        u64 b = lane + 32 < total ? cand[warp][lane + 32] : 0ull;
        __syncwarp();
        a = warp_sort_desc_u64(a);
        if (total > 32) {
            b = warp_sort_desc_u64(b);
            u64 br = __shfl_sync(DUET_FULL_MASK, b, 31 - lane);
            a = a > br ? a : br;
            a = warp_merge_desc_u64(a);
        }
        mine = a;
    } else {
        // Slow path: k rounds of warp max over the registers.
        u64 best = lm;
        mine = 0ull;
        for (int i = 0; i < k; ++i) {
            u64 m = warp_max_u64(best);
            if (lane == i) mine = m;
            int w = router_unpack(m);
            if ((w & 31) == lane) {
                int jw = w >> 5;
#pragma unroll
                for (int j = 0; j < N; ++j)
                    if (j == jw) p[j] = 0ull;
                best = p[0];
#pragma unroll
                for (int j = 1; j < N; ++j) best = p[j] > best ? p[j] : best;
            }
        }
    }
    // Lanes 0..k-1 hold the winners in rank order. Fetch each winner's s from its owner lane.
    int w = router_unpack(mine);
    float s_w = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        // Owner lane of expert w is w & 31, slot w >> 5: every lane offers sv[j], the reader
        // picks slot j from lane (w & 31).
        float v = __shfl_sync(DUET_FULL_MASK, sv[j], w & 31);
        if ((w >> 5) == j) s_w = v;
    }
    wsum[warp][lane] = s_w;
    __syncwarp();
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum = sum + wsum[warp][i];
    if (lane < k) {
        out_idx[t * k + lane] = w;
        out_w[t * k + lane] = router_weight(s_w, sum, r, norm, norm_mode);
    }
}

// The parameter list of the warp-per-token kernels (v2, v4-v10): logits and dtype, bias and
// dtype, T, k, routed scale, norm flag, norm mode, sigmoid mode, the two outputs.
#define ROUTER_WARP_KERNEL_PARAMS                                                                \
    const void *__restrict__ logits, int logits_dt, const void *__restrict__ bias, int bias_dt, \
        i64 T, int k, double r, int norm, int norm_mode, int sig_mode,                          \
        int *__restrict__ out_idx, float *__restrict__ out_w
// ... and the same names forwarded.
#define ROUTER_WARP_KERNEL_ARGS \
    logits, logits_dt, bias, bias_dt, T, k, r, norm, norm_mode, sig_mode, out_idx, out_w

#define ROUTER_V2(N)                                                                            \
    extern "C" __global__ void __launch_bounds__(128) router_v2_n##N(                           \
        ROUTER_WARP_KERNEL_PARAMS) {                                                            \
        DUET_PDL_ENTRY();                                                                       \
        router_v2_body<N>(ROUTER_WARP_KERNEL_ARGS); \
    }

ROUTER_V2(1)
ROUTER_V2(2)
ROUTER_V2(3)
ROUTER_V2(4)
ROUTER_V2(5)
ROUTER_V2(6)
ROUTER_V2(7)
ROUTER_V2(8)
ROUTER_V2(10)
ROUTER_V2(12)
ROUTER_V2(16)
ROUTER_V2(20)
ROUTER_V2(24)
ROUTER_V2(32)

// v3: grid = T, block = P (power of two, 32..1024), dynamic smem = 8P (keys) + 4E (s) + 4k.
extern "C" __global__ void router_v3(const void* __restrict__ logits, int logits_dt,
                                     const void* __restrict__ bias, int bias_dt, int E, int k,
                                     double r, int norm, int norm_mode, int sig_mode,
                                     int* __restrict__ out_idx, float* __restrict__ out_w) {
    DUET_PDL_ENTRY();
    extern __shared__ __align__(16) unsigned char smem[];
    const int P = blockDim.x;
    u64* sk = (u64*)smem;
    float* s = (float*)(sk + P);
    float* ws = s + E;
    __shared__ float sum_sh;
    const int tid = threadIdx.x;
    const i64 t = blockIdx.x;
    u64 v = 0ull;
    if (tid < E) {
        float x = load_as_f32(logits, t * (i64)E + tid, logits_dt);
        float sv = router_sigmoid(x, sig_mode);
        s[tid] = sv;
        v = router_pack(sv + load_as_f32(bias, tid, bias_dt), tid);
    }
    for (int size = 2; size <= P; size <<= 1) {
        const bool up = (tid & size) == 0;  // this run sorts descending
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            u64 o;
            if (stride >= 32) {
                sk[tid] = v;
                __syncthreads();
                o = sk[tid ^ stride];
                __syncthreads();
            } else {
                o = __shfl_xor_sync(DUET_FULL_MASK, v, stride);
            }
            const bool lower = (tid & stride) == 0;
            const u64 mx = o > v ? o : v, mn = o > v ? v : o;
            v = (lower == up) ? mx : mn;
        }
    }
    // s[w] was written by thread w: with P = 32 the sort above has no block barrier (only
    // shuffles), so one here (racecheck, session 10 call 1: the tiny model's router).
    __syncthreads();
    int w = router_unpack(v);
    if (tid < k) ws[tid] = s[w];
    __syncthreads();
    if (tid == 0) {
        float sum = 0.0f;
        for (int i = 0; i < k; ++i) sum = sum + ws[i];
        sum_sh = sum;
    }
    __syncthreads();
    if (tid < k) {
        out_idx[t * k + tid] = w;
        out_w[t * k + tid] = router_weight(ws[tid], sum_sh, r, norm, norm_mode);
    }
}

// ---- v4 ----

__device__ __forceinline__ float ex2_approx_ftz(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// The filter's approximate sigmoid: |router_sigmoid_approx(x) - router_sigmoid(x, m)| <= 2^-23
// for every f32 x and mode (H200, all 2^32 x; the tests assert <= 2^-20; v4's margin is 2^-16).
// NaN -> NaN, +inf -> 1, -inf -> 0.
__device__ __forceinline__ float router_sigmoid_approx(float x) {
    const float e = ex2_approx_ftz(__fmul_rn(x, -1.44269502f));
    return rcp_approx_ftz(__fadd_rn(1.0f, e));
}

// Margin of the filter: 128x the measured bound of router_sigmoid_approx.
#define ROUTER_V4_EPS 1.52587890625e-05f  // 2^-16

// The compare-exchange steps of a descending bitonic sort across the warp, one value per
// lane: step(stride, keep_max) exchanges with lane ^ stride and keeps the larger of the two
// where keep_max, the smaller elsewhere (the sorts below differ only in that step).
template <typename Step>
__device__ __forceinline__ void warp_bitonic_desc(Step step) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
        for (int stride = size >> 1; stride > 0; stride >>= 1)
            step(stride, ((lane & stride) == 0) == ((lane & size) == 0));
    }
}

// Descending bitonic sort of one f32 per lane across the warp (no NaNs).
__device__ __forceinline__ float warp_sort_desc_f32(float v) {
    warp_bitonic_desc([&](int stride, bool keep_max) {
        const float o = __shfl_xor_sync(DUET_FULL_MASK, v, stride);
        v = keep_max ? fmaxf(o, v) : fminf(o, v);
    });
    return v;
}

#define ROUTER_V4_WARPS 8
#define ROUTER_V4_CAND 64

// Element j (0..N-1) of a lane: chunk j / VEC of the lane's vector loads, item j % VEC.
template <int VEC>
__device__ __forceinline__ int router_v4_expert(int j, int lane) {
    return ((j / VEC) * 32 + lane) * VEC + (j % VEC);
}

// The row of token t as f32: lane holds experts router_v4_expert(j, lane), j < N. VEC = 4:
// f32 logits (float4 loads); VEC = 8: bf16 / f16 logits (uint4 loads).
template <int N, int VEC>
__device__ __forceinline__ void router_v4_load(const void* __restrict__ logits, int logits_dt, i64 t,
                                               float (&x)[N]) {
    const int lane = threadIdx.x & 31;
    const int E = 32 * N;
    const i64 row = t * (i64)E;
    if (VEC == 4) {
        const float4* rp = (const float4*)((const float*)logits + row);
#pragma unroll
        for (int c = 0; c < N / 4; ++c) {
            const float4 q = rp[c * 32 + lane];
            x[4 * c] = q.x;
            x[4 * c + 1] = q.y;
            x[4 * c + 2] = q.z;
            x[4 * c + 3] = q.w;
        }
    } else {
        const uint4* rp = (const uint4*)((const u16*)logits + row);
#pragma unroll
        for (int c = 0; c < N / 8; ++c) {
            const uint4 q = rp[c * 32 + lane];
            const u32 w4[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                const u16 lo = (u16)(w4[h] & 0xffffu), hi = (u16)(w4[h] >> 16);
                x[8 * c + 2 * h] = logits_dt == DT_BF16 ? bf16_to_f32(lo) : f16_to_f32(lo);
                x[8 * c + 2 * h + 1] = logits_dt == DT_BF16 ? bf16_to_f32(hi) : f16_to_f32(hi);
            }
        }
    }
}

// v4 / v5 selection of token t from its loaded row x (router_v4_load).
// v7's filter threshold: the k-th largest of the 64 values {lmax, lmax2} of the warp (every
// lane's two largest lower bounds L; k <= 32). They are the L of 64 distinct experts, so k
// experts have key >= L >= tau and every winner has U >= key >= tau, as in v4, with a tau at
// least as high as v4's (the k-th largest lane maximum). With A and B the two lists sorted
// descending (1-based ranks, A_0 = B_0 = +inf), the k-th largest of their union is
// max over i = 0..k of min(A_i, B_{k-i}); lane i evaluates split i (and every lane split k when
// k = 32, since lanes stop at 31).
__device__ __forceinline__ float router_v7_tau(float lmax, float lmax2, int k) {
    const int lane = threadIdx.x & 31;
    const float inf = __uint_as_float(0x7f800000u);
    const float A = warp_sort_desc_f32(lmax), B = warp_sort_desc_f32(lmax2);
    float a = __shfl_sync(DUET_FULL_MASK, A, (lane - 1) & 31);
    float b = __shfl_sync(DUET_FULL_MASK, B, (k - lane - 1) & 31);
    const float a32 = __shfl_sync(DUET_FULL_MASK, A, 31);
    if (lane == 0) a = inf;
    if (k - lane == 0) b = inf;
    float v = lane <= k ? fminf(a, b) : -inf;
    if (k == 32) v = fmaxf(v, a32);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(DUET_FULL_MASK, v, o));
    return v;
}

// Descending bitonic sort of one packed u64 key per lane across the warp, carrying s.
// (Written out, not on warp_bitonic_desc: that form compiles v7 to different SASS, and v7's
// was measured as it is.)
__device__ __forceinline__ void router_v7_sort_desc(u64& p, float& s) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            const u64 op = __shfl_xor_sync(DUET_FULL_MASK, p, stride);
            const float os = __shfl_xor_sync(DUET_FULL_MASK, s, stride);
            const bool keep_max = ((lane & stride) == 0) == ((lane & size) == 0);
            if (keep_max ? op > p : op < p) {
                p = op;
                s = os;
            }
        }
    }
}

// The slow path of v4 / v7 / v8: the exact key of every expert of the lane (router_v4_expert
// layout), then k rounds of a warp-wide u64 max; writes winner i to wi[i], its s to ws[i].
template <int N, int VEC>
__device__ __forceinline__ void router_exact_topk(const float (&x)[N], const float* __restrict__ bsh,
                                                  int k, int sig_mode, int* wi, float* ws) {
    const int lane = threadIdx.x & 31;
    float sv[N];
    u64 p[N];
    u64 best = 0ull;
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const int e = router_v4_expert<VEC>(j, lane);
        sv[j] = router_sigmoid(x[j], sig_mode);
        p[j] = router_pack(__fadd_rn(sv[j], bsh[e]), e);
        best = p[j] > best ? p[j] : best;
    }
    for (int i = 0; i < k; ++i) {
        const u64 m = warp_max_u64(best);
        if (best == m) {
            // This lane owns the winner (keys are distinct).
#pragma unroll
            for (int j = 0; j < N; ++j) {
                if (p[j] == m) {
                    ws[i] = sv[j];
                    p[j] = 0ull;
                }
            }
            wi[i] = router_unpack(m);
            best = 0ull;
#pragma unroll
            for (int j = 0; j < N; ++j) best = p[j] > best ? p[j] : best;
        }
    }
}

// 1 / d for an f64-normal d with |d| < 2^1000: rcp.approx (MUFU.RCP64H) and two Newton
// steps, within a few f64 ulps (the certificate below allows 64). (v11's sigmoid core; the
// weights' division the same way, every lane, was slower: session 16 call 5.)
__device__ __forceinline__ double router_v11_rcp(double d) {
    double y;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(d));
    double e = __fma_rn(-d, y, 1.0);
    y = __fma_rn(y, e, y);
    e = __fma_rn(-d, y, 1.0);
    return __fma_rn(y, e, y);
}

// The f32 rounding of v, certified (`ok`) when no f32 rounding midpoint lies within 64 f64
// ulps of v (the low 29 bits of v's significand, the ones f32 drops, are not within 64 of
// 0x10000000): then every value within 2^-47 relative of v rounds to the same f32. The
// caller guarantees 2^-125 <= |v| < 2^128 (f32-normal) or decides `ok` itself there.
// (Sessions 11-15 tested v (1 - 2^-47) and v (1 + 2^-47) with two multiplies and roundings;
// the exp mode's f32-subnormal s still does.)
__device__ __forceinline__ float router_v11_round_cert(double v, bool& ok) {
    const u32 low = (u32)__double2loint(v) & 0x1fffffffu;
    ok = low - 0x10000000u + 64u >= 128u;
    return __double2float_rn(v);
}

// Lanes 0..k-1 of wi / ws hold the winners in rank order: every lane sums the same k values
// in order (the reference's sequential f32 sum) and lanes 0..k-1 write token t's outputs.
// KT > 0: k == KT known at compile time (v9's k = 22 kernels: the sum without per-term tests).
template <int KT = 0>
__device__ __forceinline__ void router_warp_finish(i64 t, int k, double r, int norm, int norm_mode,
                                                   const int* wi, const float* ws,
                                                   int* __restrict__ out_idx,
                                                   float* __restrict__ out_w) {
    const int lane = threadIdx.x & 31;
    if (KT > 0) k = KT;
    __syncwarp();
    // 16-byte shared loads first, so the chain of adds does not wait on each load.
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        const float4 v = ((const float4*)ws)[q];
        if (4 * q < k) sum = __fadd_rn(sum, v.x);
        if (4 * q + 1 < k) sum = __fadd_rn(sum, v.y);
        if (4 * q + 2 < k) sum = __fadd_rn(sum, v.z);
        if (4 * q + 3 < k) sum = __fadd_rn(sum, v.w);
    }
    if (lane < k) {
        out_idx[t * k + lane] = wi[lane];
        out_w[t * k + lane] = router_weight(ws[lane], sum, r, norm, norm_mode);
    }
}

template <int N, int VEC, bool V7 = false>
__device__ __forceinline__ void router_v4_select(const float (&x)[N], const float* __restrict__ bsh, i64 t,
                                                 int k, double r, int norm, int norm_mode, int sig_mode,
                                                 int* __restrict__ out_idx, float* __restrict__ out_w, int* ce,
                                                 float* cx, float* cb, u64* ck, int* wi, float* ws) {
    const int lane = threadIdx.x & 31;
    float u[N];
    // 1. Bounds, the lane maximum of L, and a NaN screen (a NaN logit or bias, or inf - inf in
    // the screen's sum, sends the whole row to the slow path, so the fast path compares plain
    // floats: numerically L <= key <= U, and -0 / +0 ties only add candidates).
    float lmax = __uint_as_float(0xff800000u), acc = 0.0f;  // -inf
    float lmax2 = lmax;  // v7: the lane's second largest L
#pragma unroll
    for (int c = 0; c < N / 4; ++c) {
        // Experts of float4 c: VEC = 4: chunk c; VEC = 8: half (c & 1) of chunk c / 2.
        const float4 q = *(const float4*)(bsh + router_v4_expert<VEC>(4 * c, lane));
        const float bq[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            const int j = 4 * c + h;
            const float sa = router_sigmoid_approx(x[j]);
            const float lo = __fadd_rn(__fsub_rn(sa, ROUTER_V4_EPS), bq[h]);
            u[j] = __fadd_rn(__fadd_rn(sa, ROUTER_V4_EPS), bq[h]);
            if (V7) lmax2 = fmaxf(lmax2, fminf(lmax, lo));
            lmax = fmaxf(lmax, lo);
            acc = __fadd_rn(acc, u[j]);
        }
    }
    const bool nan_row = __any_sync(DUET_FULL_MASK, acc != acc);
    // 2. tau = k-th largest lane maximum (no NaN here unless nan_row).
    const float tau = V7 ? router_v7_tau(lmax, lmax2, k)
                         : __shfl_sync(DUET_FULL_MASK, warp_sort_desc_f32(lmax), k - 1);
    // 3. Candidates: count, scan, compact.
    u32 flags = 0u;
#pragma unroll
    for (int j = 0; j < N; ++j) flags |= (u[j] >= tau ? 1u : 0u) << j;
    const int cnt = __popc(flags);
    int incl = cnt;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(DUET_FULL_MASK, incl, o);
        if (lane >= o) incl += v;
    }
    const int total = __shfl_sync(DUET_FULL_MASK, incl, 31);
    if (V7 && !nan_row && total <= 32) {
        // v7: at most one candidate per lane. Compact (expert, logit) pairs, exact key per
        // lane, then a bitonic sort of the packed keys (s carried along): lane r holds the
        // winner of rank r (the keys are distinct: the index is in them; empty lanes hold 0,
        // below every key, and at least k lanes hold one).
        int pos = incl - cnt;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            if (flags & (1u << j)) {
                ce[pos] = router_v4_expert<VEC>(j, lane);
                cx[pos] = x[j];
                ++pos;
            }
        }
        __syncwarp();
        u64 p = 0ull;
        float s = 0.0f;
        if (lane < total) {
            const int e = ce[lane];
            s = router_sigmoid(cx[lane], sig_mode);
            p = router_pack(__fadd_rn(s, bsh[e]), e);
        }
        router_v7_sort_desc(p, s);
        if (lane < k) {
            wi[lane] = router_unpack(p);
            ws[lane] = s;
        }
    } else if (!nan_row && total <= ROUTER_V4_CAND) {
        int pos = incl - cnt;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            if (flags & (1u << j)) {
                const int e = router_v4_expert<VEC>(j, lane);
                ce[pos] = e;
                cx[pos] = x[j];
                cb[pos] = bsh[e];
                ++pos;
            }
        }
        __syncwarp();
        u64 p0 = 0ull, p1 = 0ull;
        float s0 = 0.0f, s1 = 0.0f;
        int e0 = 0, e1 = 0;
        if (lane < total) {
            e0 = ce[lane];
            s0 = router_sigmoid(cx[lane], sig_mode);
            p0 = router_pack(__fadd_rn(s0, cb[lane]), e0);
            ck[lane] = p0;
        }
        if (lane + 32 < total) {
            e1 = ce[lane + 32];
            s1 = router_sigmoid(cx[lane + 32], sig_mode);
            p1 = router_pack(__fadd_rn(s1, cb[lane + 32]), e1);
            ck[lane + 32] = p1;
        }
        __syncwarp();
        int r0 = 0, r1 = 0;
        for (int j = 0; j < total; ++j) {
            const u64 v = ck[j];
            r0 += v > p0 ? 1 : 0;
            r1 += v > p1 ? 1 : 0;
        }
        if (lane < total && r0 < k) {
            wi[r0] = e0;
            ws[r0] = s0;
        }
        if (lane + 32 < total && r1 < k) {
            wi[r1] = e1;
            ws[r1] = s1;
        }
    } else {
        // 4. Slow path: exact keys everywhere, k rounds of warp max.
        router_exact_topk<N, VEC>(x, bsh, k, sig_mode, wi, ws);
    }
    router_warp_finish(t, k, r, norm, norm_mode, wi, ws, out_idx, out_w);
}

// v4 body: load token t's row, select (V7: v7's selection).
template <int N, int VEC, bool V7 = false>
__device__ __forceinline__ void router_v4_body(const void* __restrict__ logits, int logits_dt,
                                               const float* __restrict__ bsh, i64 t, int k,
                                               double r, int norm, int norm_mode, int sig_mode,
                                               int* __restrict__ out_idx,
                                               float* __restrict__ out_w, int* ce, float* cx,
                                               float* cb, u64* ck, int* wi, float* ws) {
    float x[N];
    router_v4_load<N, VEC>(logits, logits_dt, t, x);
    router_v4_select<N, VEC, V7>(x, bsh, t, k, r, norm, norm_mode, sig_mode, out_idx, out_w, ce, cx, cb,
                                 ck, wi, ws);
}

// Shared memory of a v4 / v5 / v6 block (the biases as f32; per warp the candidate slots and
// the winners) and the bias staging, as one statement list (a macro, so v4's code is exactly
// what it was when it ran on the H200).
#define ROUTER_V4_SMEM_AND_BIAS(N)                                                                   \
    __shared__ __align__(16) float bsh[32 * N];                                                     \
    __shared__ int ce[ROUTER_V4_WARPS][ROUTER_V4_CAND];                                             \
    __shared__ float cx[ROUTER_V4_WARPS][ROUTER_V4_CAND];                                           \
    __shared__ float cb[ROUTER_V4_WARPS][ROUTER_V4_CAND];                                           \
    __shared__ u64 ck[ROUTER_V4_WARPS][ROUTER_V4_CAND];                                             \
    __shared__ int wi[ROUTER_V4_WARPS][32];                                                         \
    __shared__ __align__(16) float ws[ROUTER_V4_WARPS][32];                                         \
    for (int e = threadIdx.x; e < 32 * N; e += blockDim.x) bsh[e] = load_as_f32(bias, e, bias_dt); \
    __syncthreads()

// v4: grid = ceil(T / 8), block = 256 (8 warps, one token each), static smem.
template <int N, bool V7 = false>
__device__ __forceinline__ void router_v4_entry(const void* __restrict__ logits, int logits_dt,
                                                const void* __restrict__ bias, int bias_dt,
                                                i64 T, int k, double r, int norm,
                                                int norm_mode, int sig_mode,
                                                int* __restrict__ out_idx,
                                                float* __restrict__ out_w) {
    ROUTER_V4_SMEM_AND_BIAS(N);
    const int warp = threadIdx.x >> 5;
    const i64 t = (i64)blockIdx.x * ROUTER_V4_WARPS + warp;
    if (t >= T) return;
    if (logits_dt == DT_F32)
        router_v4_body<N, 4, V7>(logits, logits_dt, bsh, t, k, r, norm, norm_mode, sig_mode, out_idx,
                             out_w, ce[warp], cx[warp], cb[warp], ck[warp], wi[warp], ws[warp]);
    else
        router_v4_body<N, 8, V7>(logits, logits_dt, bsh, t, k, r, norm, norm_mode, sig_mode, out_idx,
                             out_w, ce[warp], cx[warp], cb[warp], ck[warp], wi[warp], ws[warp]);
}

#define ROUTER_V4(N)                                                                            \
    extern "C" __global__ void __launch_bounds__(256) router_v4_n##N(                              \
        ROUTER_WARP_KERNEL_PARAMS) {                                                            \
        DUET_PDL_ENTRY();                                                                       \
        router_v4_entry<N>(ROUTER_WARP_KERNEL_ARGS); \
    }

ROUTER_V4(8)
ROUTER_V4(16)

// v7 (session 5; H200 session 6: 51.9 us at T = 32768 vs v4 62.8): v4 with a tighter filter and a sort instead of the rank
// loop, for large T. ncu on v4 at T = 32768 (source counters, per token): 1474 warp
// instructions, of which the rank loop 376 and the candidate compaction 385; two tokens in
// three had 33-64 candidates (the lanes' maxima are a loose bound). v7's tau is the k-th
// largest of the lanes' top-2 lower bounds (router_v7_tau); with at most 32 candidates (the
// common case) each lane evaluates one exact sigmoid and a 15-stage bitonic sort of the packed
// keys ranks them (router_v7_sort_desc); more candidates take v4's paths. Same keys, same
// order, same weights: bit-identical to v4.
#define ROUTER_V7(N)                                                                            \
    extern "C" __global__ void __launch_bounds__(256) router_v7_n##N(                              \
        ROUTER_WARP_KERNEL_PARAMS) {                                                            \
        DUET_PDL_ENTRY();                                                                       \
        router_v4_entry<N, true>(ROUTER_WARP_KERNEL_ARGS); \
    }

ROUTER_V7(8)
ROUTER_V7(16)

// v8 (session 6; H200: 7.54 us at T = 4096, 74.1 us at T = 32768, where a straggler in its
// serial slow path set the time: see v9): v7's filter on a cheaper bound, fewer registers, a
// leaner sort. Per expert the
// filter costs FMUL, MUFU.TANH, FFMA and three FMNMX (v7: ~11 instructions with two MUFU):
//   L = fma(0.5, tanh.approx(0.5 x), c_lo[e]),  c_lo[e] = fl(fl(0.5 + b) - D),  D = 2^-10.
// Bound (every f32 x, |b| <= 256; s the reference's f32 sigmoid, sigma the real one): tanh.approx
// is within 2^-10.98 relative of tanh (PTX ISA; measured over all 2^32 x on the H200 by
// gpu_router.rs: |0.5 tanh.approx(0.5x) + 0.5 - s| <= 2^-11, asserted), so
// 0.5t + c_lo <= sigma - 0.5 + 2^-12 + 0.5 + b - D + 2^-15 <= s + b (|s - sigma| <= 2^-24;
// roundings of |values| < 2^9 are <= 2^-16), and f32 rounding is monotone: L <= key = fl(s + b).
// The same terms bound key - L <= 2^-10 + 2^-12 + 2^-14 + 2^-24 < 2^-9 - 2^-16, so with
// tau = v7's threshold on L (k experts have key >= L >= tau, every winner has key >= tau) every
// winner has L >= fl(tau - 2^-9) = thr: the candidates are the experts with L >= thr.
// A NaN logit makes its L NaN and the lane maximum NaN (max.NaN): the row takes the slow path;
// so does every row of a block whose bias has a NaN or |b| > 256 (the bound's premise).
// At most 32 candidates (the common case): compaction of expert ids through shared memory, one
// exact sigmoid per lane (its logit re-read: the row's registers are dead by then, L1 holds it),
// s kept in shared memory by expert, and a bitonic sort of the packed keys alone (one compare
// per step: keys are distinct, the empty lanes' zeros are equal). More candidates, NaN rows,
// unfit biases: the exact slow path on a reloaded row. Same keys, same order, same weights.
#define ROUTER_V8_D 0x1p-10f
#define ROUTER_V8_W 0x1p-9f
#define ROUTER_V8_BMAX 256.0f

#define ROUTER_V10_D 0x1p-14f  // v10's c_lo offset (see "EXPF (v10)" below)

// The block's biases into shared memory (bsh) with the filter's constants c_lo (v8's
// fl(fl(0.5 + b) - 2^-10), or v10's fl(b - 2^-14) with EXPF); returns, block-wide, whether
// every bias fits the filters' premise |b| <= 256 (false for NaN) and `fit0` holds.
template <int E, bool EXPF>
__device__ __forceinline__ bool router_stage_bias(const void* __restrict__ bias, int bias_dt,
                                                  float* bsh, float* clo, int fit0) {
    int fit = fit0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const float b = load_as_f32(bias, e, bias_dt);
        bsh[e] = b;
        clo[e] = EXPF ? __fsub_rn(b, ROUTER_V10_D) : __fsub_rn(__fadd_rn(0.5f, b), ROUTER_V8_D);
        fit &= fabsf(b) <= ROUTER_V8_BMAX ? 1 : 0;  // false for NaN
    }
    return __syncthreads_and(fit) != 0;
}

__device__ __forceinline__ float router_tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// v8's lower bound L of the key of expert e from its logit x (c_lo = fl(fl(0.5 + b) - D)).
__device__ __forceinline__ float router_v8_lower(float x, float c_lo) {
    return __fmaf_rn(0.5f, router_tanh_approx(0.5f * x), c_lo);
}

__device__ __forceinline__ float router_fmax_nan(float a, float b) {
    float y;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
    return y;
}

// Descending bitonic sort of one packed key per lane across the warp (distinct keys, or equal
// zeros in empty lanes): a lane that keeps the maximum takes its partner's key if it is larger,
// one that keeps the minimum if it is not larger.
// (K = u64: v8-v12's packed keys; K = u32: v11 / v12's 32-bit keys.)
template <typename K>
__device__ __forceinline__ K router_sort_desc(K p) {
    warp_bitonic_desc([&](int stride, bool keep_max) {
        const K op = __shfl_xor_sync(DUET_FULL_MASK, p, stride);
        if ((op > p) == keep_max) p = op;
    });
    return p;
}

__device__ __forceinline__ u64 router_v8_sort_desc(u64 p) { return router_sort_desc<u64>(p); }

#define ROUTER_V8_CAND 32

// Candidate flags of a lane (bit j: L[j] >= thr), their count, the inclusive warp scan of the
// counts; returns the warp's total (v8 / v9 / v10).
template <int N>
__device__ __forceinline__ int router_candidates(const float (&L)[N], float thr, u32& flags,
                                                 int& cnt, int& incl) {
    const int lane = threadIdx.x & 31;
    flags = 0u;
#pragma unroll
    for (int j = 0; j < N; ++j) flags |= (L[j] >= thr ? 1u : 0u) << j;
    cnt = __popc(flags);
    incl = cnt;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(DUET_FULL_MASK, incl, o);
        if (lane >= o) incl += v;
    }
    return __shfl_sync(DUET_FULL_MASK, incl, 31);
}

// The k rounds of a slow path whose exact s are in shared memory (sv, by expert): each round a
// warp-wide u64 max of the lanes' best keys; the owner lane records winner i and recomputes its
// next best from sv and the biases. UNROLL (v9 / v10): the recompute unrolled, its loads all in
// flight; v8 walks it serially (one SM ran ~20 us per such token: session 6's straggler).
template <int N, int VEC, bool UNROLL>
__device__ __forceinline__ void router_smem_rounds(u64 best, int k, const float* sv,
                                                   const float* __restrict__ bsh, int* wi,
                                                   float* ws) {
    const int lane = threadIdx.x & 31;
    u32 taken = 0u;
    for (int i = 0; i < k; ++i) {
        const u64 m = warp_max_u64(best);
        if (best == m) {
            // This lane owns the winner (keys are distinct); element j of expert e (the inverse
            // of router_v4_expert).
            const int e = router_unpack(m);
            taken |= 1u << ((e / (32 * VEC)) * VEC + e % VEC);
            wi[i] = e;
            ws[i] = sv[e];
            best = 0ull;
            if (UNROLL) {
#pragma unroll
                for (int j = 0; j < N; ++j) {
                    const int ej = router_v4_expert<VEC>(j, lane);
                    const u64 p = router_pack(__fadd_rn(sv[ej], bsh[ej]), ej);
                    best = (taken & (1u << j)) == 0u && p > best ? p : best;
                }
            } else {
#pragma unroll 1
                for (int j = 0; j < N; ++j) {
                    if (taken & (1u << j)) continue;
                    const int ej = router_v4_expert<VEC>(j, lane);
                    const u64 p = router_pack(__fadd_rn(sv[ej], bsh[ej]), ej);
                    best = p > best ? p : best;
                }
            }
        }
    }
}

// v8's slow path: v4's (exact keys of every expert, k rounds of a warp-wide u64 max) with the
// exact s of the row kept in shared memory (sv, by expert) instead of 16 + 16 registers, and
// the keys re-derived from it, so the rare path does not set the kernel's register count.
template <int N, int VEC>
__device__ __forceinline__ void router_v8_exact_topk(const void* __restrict__ logits, int logits_dt,
                                                     i64 t, const float* __restrict__ bsh, int k,
                                                     int sig_mode, float* sv, int* wi, float* ws) {
    const int lane = threadIdx.x & 31;
    const i64 row = t * (i64)(32 * N);
    u64 best = 0ull;
#pragma unroll 1
    for (int j = 0; j < N; ++j) {
        const int e = router_v4_expert<VEC>(j, lane);
        const float s = router_sigmoid(load_as_f32(logits, row + e, logits_dt), sig_mode);
        sv[e] = s;
        const u64 p = router_pack(__fadd_rn(s, bsh[e]), e);
        best = p > best ? p : best;
    }
    router_smem_rounds<N, VEC, false>(best, k, sv, bsh, wi, ws);
}

template <int N, int VEC>
__device__ __forceinline__ void router_v8_token(const void* __restrict__ logits, int logits_dt,
                                                const float* __restrict__ bsh,
                                                const float* __restrict__ clo, bool bias_fit,
                                                i64 t, int k, double r, int norm, int norm_mode,
                                                int sig_mode, int* __restrict__ out_idx,
                                                float* __restrict__ out_w, int* ce, float* sv,
                                                int* wi, float* ws) {
    const int lane = threadIdx.x & 31;
    const int E = 32 * N;
    float L[N];
    float lmax = __uint_as_float(0xff800000u), lmax2 = lmax;  // -inf
    {
        float x[N];
        router_v4_load<N, VEC>(logits, logits_dt, t, x);
#pragma unroll
        for (int c = 0; c < N / 4; ++c) {
            const float4 q = *(const float4*)(clo + router_v4_expert<VEC>(4 * c, lane));
            const float cq[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                const int j = 4 * c + h;
                L[j] = router_v8_lower(x[j], cq[h]);
                lmax2 = fmaxf(lmax2, fminf(lmax, L[j]));
                lmax = router_fmax_nan(lmax, L[j]);
            }
        }
    }
    const bool slow = !bias_fit || __any_sync(DUET_FULL_MASK, lmax != lmax);
    int total = ROUTER_V8_CAND + 1;
    if (!slow) {
        const float thr = __fsub_rn(router_v7_tau(lmax, lmax2, k), ROUTER_V8_W);
        u32 flags;
        int cnt, incl;
        total = router_candidates<N>(L, thr, flags, cnt, incl);
        if (total <= ROUTER_V8_CAND && total >= k) {
            int pos = incl - cnt;
#pragma unroll
            for (int j = 0; j < N; ++j) {
                if (flags & (1u << j)) ce[pos++] = router_v4_expert<VEC>(j, lane);
            }
            __syncwarp();
            u64 p = 0ull;
            if (lane < total) {
                const int e = ce[lane];
                const float s = router_sigmoid(load_as_f32(logits, t * (i64)E + e, logits_dt), sig_mode);
                sv[e] = s;
                p = router_pack(__fadd_rn(s, bsh[e]), e);
            }
            p = router_v8_sort_desc(p);
            __syncwarp();
            if (lane < k) {
                const int e = router_unpack(p);
                wi[lane] = e;
                ws[lane] = sv[e];
            }
        }
    }
    if (slow || total > ROUTER_V8_CAND || total < k)
        router_v8_exact_topk<N, VEC>(logits, logits_dt, t, bsh, k, sig_mode, sv, wi, ws);
    router_warp_finish(t, k, r, norm, norm_mode, wi, ws, out_idx, out_w);
}

// v8: grid = ceil(T / 8), block = 256 (8 warps, one token each), static smem (E = 512: 2 KB
// biases, 2 KB c_lo, 16 KB of s by expert, 2 KB candidates and winners).
template <int N>
__device__ __forceinline__ void router_v8_entry(const void* __restrict__ logits, int logits_dt,
                                                const void* __restrict__ bias, int bias_dt, i64 T,
                                                int k, double r, int norm, int norm_mode,
                                                int sig_mode, int* __restrict__ out_idx,
                                                float* __restrict__ out_w) {
    __shared__ __align__(16) float bsh[32 * N];
    __shared__ __align__(16) float clo[32 * N];
    __shared__ float sv[ROUTER_V4_WARPS][32 * N];
    __shared__ int ce[ROUTER_V4_WARPS][ROUTER_V8_CAND];
    __shared__ int wi[ROUTER_V4_WARPS][32];
    __shared__ __align__(16) float ws[ROUTER_V4_WARPS][32];
    const bool bias_fit = router_stage_bias<32 * N, false>(bias, bias_dt, bsh, clo, 1);
    const int warp = threadIdx.x >> 5;
    const i64 t = (i64)blockIdx.x * ROUTER_V4_WARPS + warp;
    if (t >= T) return;
    if (logits_dt == DT_F32)
        router_v8_token<N, 4>(logits, logits_dt, bsh, clo, bias_fit, t, k, r, norm, norm_mode,
                              sig_mode, out_idx, out_w, ce[warp], sv[warp], wi[warp], ws[warp]);
    else
        router_v8_token<N, 8>(logits, logits_dt, bsh, clo, bias_fit, t, k, r, norm, norm_mode,
                              sig_mode, out_idx, out_w, ce[warp], sv[warp], wi[warp], ws[warp]);
}

#define ROUTER_V8(N)                                                                            \
    extern "C" __global__ void __launch_bounds__(256) router_v8_n##N(                              \
        ROUTER_WARP_KERNEL_PARAMS) {                                                            \
        DUET_PDL_ENTRY();                                                                       \
        router_v8_entry<N>(ROUTER_WARP_KERNEL_ARGS); \
    }

ROUTER_V8(8)
ROUTER_V8(16)

// v9 (session 6): v8's arithmetic in persistent warps with the rows staged in shared memory.
// v8 ran 973 warp instructions per token (v7 1132) yet took 74 us at T = 32768 (v7 52): one
// token per warp, so every warp waits for its row from DRAM, then again for the candidates'
// logits (re-read from L1 / L2). v9:
//   - persistent blocks (as many as are resident); the biases and c_lo are staged once per
//     block; each warp walks tokens t, t + W, ... with the next row copied into shared memory
//     by cp.async (16-byte chunks, L2 only) while the current one is routed: no registers held
//     for the prefetch, no second global read for the candidates (their logits are in the
//     staged row);
//   - the exact s of the candidates is written over the staged row (after a __syncwarp: every
//     read of the row is done), s by expert as in v8;
//   - tau by k rounds of a warp max (REDUX) over the lanes' top-2 lower bounds in an
//     order-preserving u32 map (v7 / v8: two bitonic sorts and a merge; equal values drop
//     together, which only lowers tau: still a valid bound);
//   - compaction over the set bits of each lane's candidate mask (v8: 16 predicated blocks);
//   - k = 22 kernels (`_k22`): the weight sum without per-term tests;
//   - 33-64 candidates take a two-slot path (two sorts and a bitonic merge) and the slow path
//     recomputes a lane's next best with all its loads in flight. Without them (v8, the first
//     v9) the two tokens in 32768 of the bench rows that had more than 32 candidates each
//     took ~20 us in the serial slow path: one SM stayed active twice as long as the others
//     (ncu sm__cycles_active max 169.6k vs min 82.8k cycles) and set the kernel's time
//     (78.6 us). With them: 43.7 us, max / min 96.4k / 90.1k (H200, session 6 call 8).
// Same keys, same order, same weights as v4-v8.
__device__ __forceinline__ u32 router_f32_ord(float f) {
    const u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float router_ord_f32(u32 o) {
    return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

// tau = the k-th round's maximum over the 64 values {lmax, lmax2} of the warp (lmax >= lmax2
// per lane; no NaN). Each round removes the maximum (every lane holding it: a tie removes
// several values in one round, so tau is at most the k-th largest, never above it).
template <int KT>
__device__ __forceinline__ float router_v9_tau(float lmax, float lmax2, int k) {
    u32 a = router_f32_ord(lmax), b = router_f32_ord(lmax2), m = 0u;
    if (KT > 0) {
#pragma unroll
        for (int i = 0; i < KT; ++i) {
            m = __reduce_max_sync(DUET_FULL_MASK, a);
            const bool top = a == m;
            a = top ? b : a;
            b = top ? 0u : b;
        }
    } else {
        for (int i = 0; i < k; ++i) {
            m = __reduce_max_sync(DUET_FULL_MASK, a);
            const bool top = a == m;
            a = top ? b : a;
            b = top ? 0u : b;
        }
    }
    return router_ord_f32(m);
}

// Copies token t's row (32 N logits of 4 / 2 bytes, VEC = 4 / 8) into buf: lane copies the
// 16-byte chunks c * 32 + lane, the ones it reads back in router_v9_token.
template <int N, int VEC>
__device__ __forceinline__ void router_v9_prefetch(const void* __restrict__ logits, i64 t, float* buf) {
    const int lane = threadIdx.x & 31;
    const i64 row_bytes = (i64)(32 * N) * (VEC == 4 ? 4 : 2);
    const char* src = (const char*)logits + t * row_bytes;
#pragma unroll
    for (int c = 0; c < N / VEC; ++c)
        duet_cp_async16((char*)buf + (i64)(c * 32 + lane) * 16, src + (i64)(c * 32 + lane) * 16);
    duet_cp_async_commit();
}

// Logit e of a staged row (f32, or bf16 / f16 bits).
template <int VEC>
__device__ __forceinline__ float router_v9_row_logit(const float* row, int e, int logits_dt) {
    if (VEC == 4) return row[e];
    const u16 h = ((const u16*)row)[e];
    return logits_dt == DT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// The row as f32 in the lane's layout (router_v4_expert), from shared memory.
template <int N, int VEC>
__device__ __forceinline__ void router_v9_row_load(const float* row, int logits_dt, float (&x)[N]) {
    const int lane = threadIdx.x & 31;
    if (VEC == 4) {
#pragma unroll
        for (int c = 0; c < N / 4; ++c) {
            const float4 q = ((const float4*)row)[c * 32 + lane];
            x[4 * c] = q.x;
            x[4 * c + 1] = q.y;
            x[4 * c + 2] = q.z;
            x[4 * c + 3] = q.w;
        }
    } else {
#pragma unroll
        for (int c = 0; c < N / 8; ++c) {
            const uint4 q = ((const uint4*)row)[c * 32 + lane];
            const u32 w4[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                const u16 lo = (u16)(w4[h] & 0xffffu), hi = (u16)(w4[h] >> 16);
                x[8 * c + 2 * h] = logits_dt == DT_BF16 ? bf16_to_f32(lo) : f16_to_f32(lo);
                x[8 * c + 2 * h + 1] = logits_dt == DT_BF16 ? bf16_to_f32(hi) : f16_to_f32(hi);
            }
        }
    }
}

// One token from its staged row (row: 32 N floats of room; on return it holds the exact s of
// the candidates, or of every expert on the slow path, at their experts' positions).
#define ROUTER_V9_CAND 64

// a, b: packed keys sorted descending across the warp. Returns the 32 largest of the 64, sorted
// descending: max(a[i], b[31 - i]) is bitonic and holds them; a 5-step bitonic merge sorts it.
__device__ __forceinline__ u64 router_v9_merge_desc(u64 a, u64 b) {
    const int lane = threadIdx.x & 31;
    const u64 br = __shfl_sync(DUET_FULL_MASK, b, 31 - lane);
    u64 c = a > br ? a : br;
#pragma unroll
    for (int stride = 16; stride > 0; stride >>= 1) {
        const u64 op = __shfl_xor_sync(DUET_FULL_MASK, c, stride);
        if ((op > c) == ((lane & stride) == 0)) c = op;
    }
    return c;
}

// EXPF (v10): the filter on v4's approximate sigmoid (rcp.approx(1 + ex2.approx(-x log2 e)),
// within 2^-20 of s, asserted over all 2^32 x by gpu_router.rs) instead of tanh.approx:
// L = fl(sa + c_lo), c_lo = fl(b - 2^-14) (ROUTER_V10_D, with router_stage_bias);
// key - L <= 3 2^-16 + 2^-20 + 2^-14 < 2^-12 - 2^-16, window W = 2^-12 (the v8 argument with
// these terms).
#define ROUTER_V10_W 0x1p-12f

// The filter of a staged row (v9 / v10 / v11 / v12): the lower bounds L of the keys (v8's
// tanh.approx bound, or v10's ex2 / rcp one with EXPF), and
//   - TOP2 (v9 - v11): the lane's two largest (lmax2 <= lmax; max.NaN lets a NaN logit through
//     to lmax unless PLAINMAX, which sums L into nan_acc instead);
//   - !TOP2 (v12): only the NaN screen, the sum of L in four chains (N / 4 deep, not N);
//     !TOP2 && !NANSUM (v17 / v18): L only.
template <int N, int VEC, bool EXPF, bool PLAINMAX, bool TOP2 = true, bool NANSUM = true>
__device__ __forceinline__ void router_v9_filter(const float* row, int logits_dt,
                                                 const float* __restrict__ clo, float (&L)[N],
                                                 float& lmax, float& lmax2, float& nan_acc) {
    const int lane = threadIdx.x & 31;
    lmax = __uint_as_float(0xff800000u);  // -inf
    lmax2 = lmax;
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float x[N];
    router_v9_row_load<N, VEC>(row, logits_dt, x);
#pragma unroll
    for (int c = 0; c < N / 4; ++c) {
        const float4 q = *(const float4*)(clo + router_v4_expert<VEC>(4 * c, lane));
        const float cq[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            const int j = 4 * c + h;
            L[j] = EXPF ? __fadd_rn(router_sigmoid_approx(x[j]), cq[h])
                        : router_v8_lower(x[j], cq[h]);
            if (!TOP2) {
                if (NANSUM) part[h] = __fadd_rn(part[h], L[j]);
                continue;
            }
            lmax2 = fmaxf(lmax2, fminf(lmax, L[j]));
            if (PLAINMAX) {
                lmax = fmaxf(lmax, L[j]);
                nan_acc = __fadd_rn(nan_acc, L[j]);
            } else {
                lmax = router_fmax_nan(lmax, L[j]);
            }
        }
    }
    if (!TOP2 && NANSUM)
        nan_acc = __fadd_rn(__fadd_rn(part[0], part[1]), __fadd_rn(part[2], part[3]));
}

template <int N, int VEC, int KT, bool EXPF, bool PLAINMAX = false>
__device__ __forceinline__ void router_v9_token(float* row, int logits_dt, const float* __restrict__ bsh,
                                                const float* __restrict__ clo, bool bias_fit, i64 t,
                                                int k, double r, int norm, int norm_mode, int sig_mode,
                                                int* __restrict__ out_idx, float* __restrict__ out_w,
                                                int* ce, int* wi, float* ws) {
    const int lane = threadIdx.x & 31;
    if (KT > 0) k = KT;
    float L[N];
    float lmax, lmax2;
    float nan_acc = 0.0f;  // PLAINMAX: the NaN screen as a sum (L is finite unless x is NaN)
    router_v9_filter<N, VEC, EXPF, PLAINMAX>(row, logits_dt, clo, L, lmax, lmax2, nan_acc);
    const bool slow = !bias_fit || __any_sync(DUET_FULL_MASK, lmax != lmax || nan_acc != nan_acc);
    int total = ROUTER_V8_CAND + 1;
    if (!slow) {
        const float thr =
            __fsub_rn(router_v9_tau<KT>(lmax, lmax2, k), EXPF ? ROUTER_V10_W : ROUTER_V8_W);
        u32 flags;
        int cnt, incl;
        total = router_candidates<N>(L, thr, flags, cnt, incl);
        if (total <= ROUTER_V9_CAND && total >= k) {
            // At most 64 candidates: slot lane and lane + 32 (the second only when total > 32,
            // rare: ~2 tokens in 32768 of the random bench rows).
            int pos = incl - cnt;
            while (flags) {
                const int j = __ffs(flags) - 1;
                flags &= flags - 1u;
                ce[pos++] = router_v4_expert<VEC>(j, lane);
            }
            __syncwarp();
            const bool two = total > 32;
            u64 p0 = 0ull, p1 = 0ull;
            float s0 = 0.0f, s1 = 0.0f;
            int e0 = 0, e1 = 0;
            if (lane < total) {
                e0 = ce[lane];
                s0 = router_sigmoid(router_v9_row_logit<VEC>(row, e0, logits_dt), sig_mode);
                p0 = router_pack(__fadd_rn(s0, bsh[e0]), e0);
            }
            if (lane + 32 < total) {
                e1 = ce[lane + 32];
                s1 = router_sigmoid(router_v9_row_logit<VEC>(row, e1, logits_dt), sig_mode);
                p1 = router_pack(__fadd_rn(s1, bsh[e1]), e1);
            }
            __syncwarp();  // every read of the row is done: s goes over it
            if (lane < total) row[e0] = s0;
            if (lane + 32 < total) row[e1] = s1;
            p0 = router_v8_sort_desc(p0);
            if (two) p0 = router_v9_merge_desc(p0, router_v8_sort_desc(p1));
            __syncwarp();
            if (lane < k) {
                const int w = router_unpack(p0);
                wi[lane] = w;
                ws[lane] = row[w];
            }
        }
    }
    if (slow || total > ROUTER_V9_CAND || total < k) {
        float x[N];
        router_v9_row_load<N, VEC>(row, logits_dt, x);
        __syncwarp();  // the row is read: s goes over it
        u64 best = 0ull;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const int e = router_v4_expert<VEC>(j, lane);
            const float s = router_sigmoid(x[j], sig_mode);
            row[e] = s;
            const u64 p = router_pack(__fadd_rn(s, bsh[e]), e);
            best = p > best ? p : best;
        }
        router_smem_rounds<N, VEC, true>(best, k, row, bsh, wi, ws);
    }
    router_warp_finish<KT>(t, k, r, norm, norm_mode, wi, ws, out_idx, out_w);
    __syncwarp();  // the row buffer and wi / ws are free for the next token
}

// v9: persistent (grid = min(ceil(T / 8), resident blocks)), block = 256 (8 warps), static smem
// (E = 512: 2 + 2 KB biases and c_lo, per warp two 2 KB rows and 384 B of slots: 39 KB).
template <int N, int VEC, int KT, bool EXPF, bool PLAINMAX>
__device__ __forceinline__ void router_v9_walk(const void* __restrict__ logits, int logits_dt,
                                               const float* __restrict__ bsh,
                                               const float* __restrict__ clo, bool bias_fit, i64 T,
                                               int k, double r, int norm, int norm_mode,
                                               int sig_mode, int* __restrict__ out_idx,
                                               float* __restrict__ out_w, float* rows, int* ce,
                                               int* wi, float* ws) {
    const i64 W = (i64)gridDim.x * ROUTER_V4_WARPS;
    i64 t = (i64)blockIdx.x * ROUTER_V4_WARPS + (threadIdx.x >> 5);
    if (t >= T) return;
    router_v9_prefetch<N, VEC>(logits, t, rows);
    int cur = 0;
    for (; t < T; t += W) {
        float* row = rows + cur * (32 * N);
        if (t + W < T) {
            router_v9_prefetch<N, VEC>(logits, t + W, rows + (cur ^ 1) * (32 * N));
            duet_cp_async_wait<1>();
        } else {
            duet_cp_async_wait<0>();
        }
        __syncwarp();  // every lane's chunks of row t have landed
        router_v9_token<N, VEC, KT, EXPF, PLAINMAX>(row, logits_dt, bsh, clo, bias_fit, t, k, r, norm, norm_mode,
                                    sig_mode, out_idx, out_w, ce, wi, ws);
        cur ^= 1;
    }
}

template <int N, int KT, bool EXPF, bool PLAINMAX = false>
__device__ __forceinline__ void router_v9_entry(const void* __restrict__ logits, int logits_dt,
                                                const void* __restrict__ bias, int bias_dt, i64 T,
                                                int k, double r, int norm, int norm_mode,
                                                int sig_mode, int* __restrict__ out_idx,
                                                float* __restrict__ out_w) {
    __shared__ __align__(16) float bsh[32 * N];
    __shared__ __align__(16) float clo[32 * N];
    __shared__ __align__(16) float rows[ROUTER_V4_WARPS][2 * 32 * N];
    __shared__ int ce[ROUTER_V4_WARPS][ROUTER_V9_CAND];
    __shared__ int wi[ROUTER_V4_WARPS][32];
    __shared__ __align__(16) float ws[ROUTER_V4_WARPS][32];
    const bool bias_fit = router_stage_bias<32 * N, EXPF>(bias, bias_dt, bsh, clo, 1);
    const int warp = threadIdx.x >> 5;
    if (logits_dt == DT_F32)
        router_v9_walk<N, 4, KT, EXPF, PLAINMAX>(logits, logits_dt, bsh, clo, bias_fit, T, k, r, norm, norm_mode,
                                 sig_mode, out_idx, out_w, rows[warp], ce[warp], wi[warp], ws[warp]);
    else
        router_v9_walk<N, 8, KT, EXPF, PLAINMAX>(logits, logits_dt, bsh, clo, bias_fit, T, k, r, norm, norm_mode,
                                 sig_mode, out_idx, out_w, rows[warp], ce[warp], wi[warp], ws[warp]);
}

#define ROUTER_V9(NAME, N, KT, EXPF)                                                            \
    extern "C" __global__ void __launch_bounds__(256, 4) NAME(                                     \
        ROUTER_WARP_KERNEL_PARAMS) {                                                            \
        DUET_PDL_ENTRY();                                                                       \
        router_v9_entry<N, KT, EXPF>(ROUTER_WARP_KERNEL_ARGS); \
    }

ROUTER_V9(router_v9_n8, 8, 0, false)
ROUTER_V9(router_v9_n16, 16, 0, false)
ROUTER_V9(router_v9_n8_k22, 8, 22, false)
ROUTER_V9(router_v9_n16_k22, 16, 22, false)
// Diagnostic variants (session 6, bench only, hidden versions "v9n" / "v7p"): v9 with a plain
// fmaxf lane maximum and a summed NaN screen instead of max.NaN; v7 with 16 KB more (unused)
// shared memory per block. Same selection as v9 / v7. They ruled out max.NaN and shared memory
// size as the cause of v8's / the first v9's slowness at T = 32768 (H200 call 6: v9n 80.3 us,
// v9 78.7, v7p 52.3, v7 52.0); the cause was a straggler (v9's slow-path comment).
extern "C" __global__ void __launch_bounds__(256, 4) router_v9n_n16_k22(
    ROUTER_WARP_KERNEL_PARAMS) {
    DUET_PDL_ENTRY();
    router_v9_entry<16, 22, false, true>(logits, logits_dt, bias, bias_dt, T, k, r, norm,
                                         norm_mode, sig_mode, out_idx, out_w);
}
extern "C" __global__ void __launch_bounds__(256) router_v7p_n16(
    ROUTER_WARP_KERNEL_PARAMS) {
    DUET_PDL_ENTRY();
    __shared__ volatile char pad[16384];
    pad[threadIdx.x] = 0;
    router_v4_entry<16, true>(ROUTER_WARP_KERNEL_ARGS);
}
// v10 (session 6): v9 with v4's ex2 / rcp approximate sigmoid in the filter (EXPF above).
ROUTER_V9(router_v10_n8, 8, 0, true)
ROUTER_V9(router_v10_n16, 16, 0, true)
ROUTER_V9(router_v10_n8_k22, 8, 22, true)
ROUTER_V9(router_v10_n16_k22, 16, 22, true)

// v11 (session 15): v9's selection with a smaller, cheaper hot path. v9 compiled to 15,600
// SASS instructions (250 KB: the runtime sigmoid mode put all three f64 formulas, each inlined
// at every call site of the unrolled slow path), and ncu showed no_inst among its top stalls
// at ~60% issue. v11:
//   - the sigmoid mode is a template parameter (one kernel per mode);
//   - the rare paths (33-64 candidates, NaN rows / unfit biases / other counts) are
//     __noinline__ functions, out of the hot path;
//   - the candidates' exact sigmoid in tanh / exp mode on a branch-free f64 exp core
//     (router_v11_sigmoid: ~35 f64 operations vs CUDA's tanh with two divergent branches),
//     certified: when the f64 value v lies so near an f32 rounding midpoint that
//     v (1 - 2^-47) and v (1 + 2^-47) could round differently (since session 16: an f32
//     midpoint within 64 f64 ulps of v, read off v's low significand bits), the kernel takes
//     router_sigmoid's formula instead. The core's error is a few f64 ulps (< 2^-49 relative), CUDA's tanh /
//     exp and the host libm's are within 2 ulps, so a certified result is the f32 rounding of
//     all of them: v11's s equals router_sigmoid's bit for bit on every f32 input
//     (gpu_router.rs checks all 2^32 on the H200, `v11_sigmoid_bit_exact_on_every_f32`);
//   - the candidates sort on 32-bit keys: ((ord(key) - ord(thr) + 1) << 9) | (511 - e), ord
//     the order-preserving u32 map; the same order as the packed u64 keys while every
//     candidate's ord(key) - ord(thr) < 2^23 - 1 (a vote; otherwise the u64 sort);
//   - the next row's cp.async addresses from a pointer advanced by the grid's stride.
// Same keys, same order, same weights as v4-v10.
#define ROUTER_V11_INV_LN2 1.4426950408889634
#define ROUTER_V11_LN2_HI 6.93147180369123816490e-01
#define ROUTER_V11_LN2_LO 1.90821492927058770002e-10

// 1/13!, 1/12!, ..., 1/2! (f64 roundings).
__constant__ double router_v11_expc[12] = {
    1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
    1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
    1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        0.5};

// exp(z) = 2^n (1 + p) for |z| <= 128 (finite): returns p = expm1(r), r = z - n ln2,
// |r| <= ln2 / 2, and 2^n. Taylor to r^12 (session 16; to r^13 before): the truncation is
// below r^13 / 13! <= 2^-52.4, a relative error below r^12 / 13! <= 2^-50.9 of p.
// (router_v11_expc[0..4], 1/13! .. 1/9!, are no longer in the series; v12+'s constant-cache
// warm-up still reads [0] and [8], which covers the lines of [5..11].)
__device__ __forceinline__ double router_v11_exp_core(double z, double& two_n) {
    const double big = 0x1.8p52;
    const double tn = __fma_rn(z, ROUTER_V11_INV_LN2, big);  // round(z / ln2) in the low bits
    const int n = __double2loint(tn);
    const double kn = __dsub_rn(tn, big);
    double r = __fma_rn(-kn, ROUTER_V11_LN2_HI, z);
    r = __fma_rn(-kn, ROUTER_V11_LN2_LO, r);
    // 1/12! .. 1/9!: rounded to 20-bit significands (low words zero, relative error below
    // 2^-21.9), so each DFMA takes its coefficient as an immediate; the terms they weigh are
    // below r^9 / 9! <= 2^-31.9, so the rounding costs under 2^-53. 1/8! .. 1/2!: from
    // constant memory (an ULDC and a DFMA each; full f64 immediates took two UMOVs).
    double q = 0x1.1eed9p-29;
    q = __fma_rn(q, r, 0x1.ae645p-26);
    q = __fma_rn(q, r, 0x1.27e5p-22);
    q = __fma_rn(q, r, 0x1.71de4p-19);
#pragma unroll
    for (int i = 5; i < 12; ++i) q = __fma_rn(q, r, router_v11_expc[i]);
    two_n = __hiloint2double((n + 1023) << 20, 0);
    return __fma_rn(q, __dmul_rn(r, r), r);
}

// The certified part (tanh / exp mode): s, with `ok` false where the certificate fails (NaN x
// fails it too) and the caller must take the reference formula.
template <int SIG>
__device__ __forceinline__ float router_v11_sigmoid_cert(float x, bool& ok) {
    if (SIG == SIG_TANH) {
        const float y = 0.5f * x;  // f32, as the reference
        double a = fabs((double)y);
        a = a > 20.0 ? 20.0 : a;  // tanh(20) rounds to 1 in f64; NaN passes through
        double two_n;
        const double p = router_v11_exp_core(2.0 * a, two_n);
        const double e = __fma_rn(two_n, p, __dsub_rn(two_n, 1.0));  // expm1(2a)
        const double t = __dmul_rn(e, router_v11_rcp(__dadd_rn(e, 2.0)));  // tanh(a)
        bool bits_ok;
        float tf = router_v11_round_cert(t, bits_ok);
        // a < 2^-27: tanh(a) = a (1 - a^2 / 3 + ...) rounds to a (an f32: a = |y|) in f32, as
        // any f64 tanh within a few ulps does (subnormal a included); a >= 2^-27: t is
        // f32-normal and the certificate applies. NaN a fails both.
        const bool tiny = a < 0x1p-27;
        tf = tiny ? (float)a : tf;
        ok = tiny || (a >= 0x1p-27 && bits_ok);
        return __fadd_rn(__fmul_rn(0.5f, copysignf(tf, y)), 0.5f);
    }
    double z = -(double)x;
    z = z > 110.0 ? 110.0 : (z < -110.0 ? -110.0 : z);  // beyond: s rounds to 1 / 0
    double two_n;
    const double p = router_v11_exp_core(z, two_n);
    const double v = router_v11_rcp(__dadd_rn(1.0, __fma_rn(two_n, p, two_n)));
    float s = router_v11_round_cert(v, ok);
    ok = ok && z <= 87.0;  // s >= 2^-125, f32-normal; false for NaN
    if (z > 87.0) {
        // f32-subnormal s (rare: a candidate's logit below -87): the sessions 11-15
        // certificate, v (1 -+ 2^-47) rounding alike.
        const float lo = __double2float_rn(__dmul_rn(v, 1.0 - 0x1p-47));
        const float hi = __double2float_rn(__dmul_rn(v, 1.0 + 0x1p-47));
        ok = __float_as_uint(lo) == __float_as_uint(hi);
        s = lo;
    }
    return s;
}

// router_v11_sigmoid_cert where it is certified, the reference formula elsewhere (tanh / exp
// mode); router_sigmoid itself in the other modes.
template <int SIG>
__device__ __forceinline__ float router_v11_sigmoid(float x) {
    if (SIG != SIG_TANH && SIG != SIG_EXP) return router_sigmoid(x, SIG);
    bool ok;
    const float s = router_v11_sigmoid_cert<SIG>(x, ok);
    return ok ? s : router_sigmoid(x, SIG);
}

// 33-64 candidates (ids in ce): v9's two-slot path. Out of line: rare.
template <int VEC, int SIG>
__device__ __noinline__ void router_v11_two_slot(float* row, int logits_dt,
                                                 const float* __restrict__ bsh, int total, int k,
                                                 const int* ce, int* wi, float* ws) {
    const int lane = threadIdx.x & 31;
    const int e0 = ce[lane];  // total > 32: every lane has a first candidate
    const float s0 = router_v11_sigmoid<SIG>(router_v9_row_logit<VEC>(row, e0, logits_dt));
    u64 p0 = router_pack(__fadd_rn(s0, bsh[e0]), e0), p1 = 0ull;
    float s1 = 0.0f;
    int e1 = 0;
    if (lane + 32 < total) {
        e1 = ce[lane + 32];
        s1 = router_v11_sigmoid<SIG>(router_v9_row_logit<VEC>(row, e1, logits_dt));
        p1 = router_pack(__fadd_rn(s1, bsh[e1]), e1);
    }
    __syncwarp();  // every read of the row is done: s goes over it
    row[e0] = s0;
    if (lane + 32 < total) row[e1] = s1;
    p0 = router_v9_merge_desc(router_v8_sort_desc(p0), router_v8_sort_desc(p1));
    __syncwarp();
    if (lane < k) {
        const int w = router_unpack(p0);
        wi[lane] = w;
        ws[lane] = row[w];
    }
}

// Every expert exact, k rounds of a warp-wide u64 max (NaN rows, unfit biases, more than 64
// or fewer than k candidates). Out of line: rare.
template <int N, int VEC, int SIG>
__device__ __noinline__ void router_v11_exact(float* row, int logits_dt,
                                              const float* __restrict__ bsh, int k, int* wi,
                                              float* ws) {
    const int lane = threadIdx.x & 31;
    float x[N];
    router_v9_row_load<N, VEC>(row, logits_dt, x);
    __syncwarp();  // the row is read: s goes over it
    u64 best = 0ull;
#pragma unroll 1
    for (int j = 0; j < N; ++j) {
        const int e = router_v4_expert<VEC>(j, lane);
        const float s = router_v11_sigmoid<SIG>(x[j]);
        row[e] = s;
        const u64 p = router_pack(__fadd_rn(s, bsh[e]), e);
        best = p > best ? p : best;
    }
    router_smem_rounds<N, VEC, true>(best, k, row, bsh, wi, ws);
}

// v12 (session 15): v11 with the threshold guessed and checked instead of computed. A warp
// routes ~8 tokens of one batch (T = 32768) whose k-th keys sit close together, so it carries
// a guess g from its previous token: g = kappa - 0.3 D, kappa the previous k-th key and D the
// gap between its (k/2)-th and k-th keys. A probe counts the experts with L > g on the FMA
// pipe (no comparisons, selects or ORs on the ALU pipe, which v9's ~870 instructions a token
// kept busy):
//   bit_j = sat(fma(L_j, 2^100, -g 2^100)) is 1 exactly when L_j > g (the product and the
//   difference are exact or keep their sign under round-to-nearest, and a positive difference
//   is >= |g| 2^-25 >= 2^-75 times 2^100 >= 1: the probe requires 2^-75 <= |g| <= 512; |L| is
//   below 2^9 by the bias premise); the lane mask is sum_j bit_j 2^j (exact), the count
//   REDUX.ADD of its popc.
// Up to three probes move g by 0.04 D per expert away from (k + 32) / 2 candidates until
// k <= count <= 32. The candidates (L > g) then take v11's exact sigmoid and 32-bit sort, and
// the result is checked: every other expert has L <= g, so key < g + 2^-9 - 2^-16 (v8's bound
// on key - L), below the k-th exact key kappa whenever kappa >= fl_up(g + 2^-9): then the
// candidates hold the top k, in order. Any probe or check that fails, the warp's first token,
// a NaN row (seen in the sum of L) or an unfit bias: v11's path for the token (tau from the
// lanes' top-2, or the exact slow path). Same keys, same order, same weights as v4-v11.
// (Measured on the H200, session 15: seeding the first token's guess from the lane maxima of L
// instead was no faster at T = 32768 and slower at T <= 4096, where a warp has one token; a
// thread per token (v14, 546 warp instructions a token but 0.15 issued a cycle at 8 warps a
// SM) took 131 us; v12 at 5 blocks a SM (48 registers) 38.7 us; v12 ranking its candidates by
// counting (31 independent shuffles instead of the 15-stage sort) 41.2 us, 853 instructions a
// token at the same 0.68 issued a cycle: all removed.)
#define ROUTER_V12_A 0.3f
#define ROUTER_V12_C 0.04f

// Lane mask of L_j > g (the probe above), on the FMA pipe.
// Four partial sums (exact: integers below 2^16), so the chain is N / 4 deep, not N.
template <int N>
__device__ __forceinline__ u32 router_v12_mask(const float (&L)[N], float g) {
    const float g100 = -g * 0x1p100f;  // exact
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < N; ++j)
        acc[j & 3] = __fmaf_rn(__saturatef(__fmaf_rn(L[j], 0x1p100f, g100)), (float)(1u << j),
                               acc[j & 3]);
    const float sum = __fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3]));
    return __float_as_uint(__fadd_rn(sum, 8388608.0f)) - 0x4b000000u;  // exact integer < 2^16
}

// Inclusive warp scan of cnt.
__device__ __forceinline__ int router_v12_scan(int cnt) {
    const int lane = threadIdx.x & 31;
    int incl = cnt;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(DUET_FULL_MASK, incl, o);
        if (lane >= o) incl += v;
    }
    return incl;
}

// Up to 32 candidates (the lane's flags; cnt / incl its count and inclusive scan; every
// candidate has key > thr): compaction, exact sigmoids, the sort, winners into wi / ws and
// their s over the row. CHECK (v12's guessed threshold): returns false, having written
// nothing but ce, unless the k-th key is >= fl_up(thr + 2^-9).
template <int VEC, int SIG, bool CHECK>
__device__ __forceinline__ bool router_v12_one_slot(float* row, int logits_dt,
                                                    const float* __restrict__ bsh, u32 flags,
                                                    int cnt, int incl, int total, float thr,
                                                    int k, int* ce, int* wi, float* ws) {
    const int lane = threadIdx.x & 31;
    // Highest set bit first (one FLO; the slots' order does not matter: the keys are sorted),
    // expert ids from unsigned shifts: ((j / VEC) * 32 + lane) * VEC + j % VEC.
    u32 pos = (u32)(incl - cnt);
    while (flags) {
        const u32 j = 31u - (u32)__clz(flags);
        flags ^= 1u << j;
        ce[pos++] = (int)((((j / VEC) * 32u + (u32)lane) * VEC) | (j % VEC));
    }
    __syncwarp();
    int e0 = 0;
    float s0 = 0.0f, key = thr;
    if (lane < total) {
        e0 = ce[lane];
        s0 = router_v11_sigmoid<SIG>(router_v9_row_logit<VEC>(row, e0, logits_dt));
        key = __fadd_rn(s0, bsh[e0]);
    }
    const u32 base = router_f32_ord(thr);
    const u32 d = router_f32_ord(key) - base;
    const bool fits = d < 0x7fffffu;
    int w;
    if (__all_sync(DUET_FULL_MASK, fits)) {
        u32 p = lane < total ? ((d + 1u) << 9) | (u32)(511 - e0) : 0u;
        p = router_sort_desc<u32>(p);
        if (CHECK) {
            const u32 dk = (__shfl_sync(DUET_FULL_MASK, p, k - 1) >> 9) - 1u;
            const u32 dw = router_f32_ord(__fadd_ru(thr, ROUTER_V8_W)) - base;
            if (dk < dw) return false;  // warp-uniform
        }
        w = 511 - (int)(p & 511u);
    } else {
        u64 p = lane < total ? router_pack(key, e0) : 0ull;
        p = router_v8_sort_desc(p);
        if (CHECK) {
            const u32 tk = (u32)(__shfl_sync(DUET_FULL_MASK, p, k - 1) >> 16);
            if (tk < twiddle_f32(__fadd_ru(thr, ROUTER_V8_W))) return false;
        }
        w = router_unpack(p);
    }
    __syncwarp();  // every read of the row is done: s goes over it
    if (lane < total) row[e0] = s0;
    __syncwarp();
    if (lane < k) {
        wi[lane] = w;
        ws[lane] = row[w];
    }
    return true;
}

// v11's selection from a row's filter (L, the lane's two largest; slow: a NaN row or an unfit
// bias): tau by k rounds over the lanes' top-2, then one candidate a lane (the common case),
// two (33-64 candidates, out of line) or the exact slow path (out of line). Winners into
// wi / ws in rank order.
template <int N, int VEC, int KT, int SIG>
__device__ __forceinline__ void router_v11_select(float* row, int logits_dt,
                                                  const float* __restrict__ bsh,
                                                  const float (&L)[N], float lmax, float lmax2,
                                                  bool slow, int k, int* ce, int* wi, float* ws) {
    const int lane = threadIdx.x & 31;
    int total = ROUTER_V9_CAND + 1;
    if (!slow) {
        const float thr = __fsub_rn(router_v9_tau<KT>(lmax, lmax2, k), ROUTER_V8_W);
        u32 flags;
        int cnt, incl;
        total = router_candidates<N>(L, thr, flags, cnt, incl);
        if (total <= 32 && total >= k) {
            router_v12_one_slot<VEC, SIG, false>(row, logits_dt, bsh, flags, cnt, incl, total,
                                                 thr, k, ce, wi, ws);
        } else if (total <= ROUTER_V9_CAND && total >= k) {
            int pos = incl - cnt;
            while (flags) {
                const int j = __ffs(flags) - 1;
                flags &= flags - 1u;
                ce[pos++] = router_v4_expert<VEC>(j, lane);
            }
            __syncwarp();
            router_v11_two_slot<VEC, SIG>(row, logits_dt, bsh, total, k, ce, wi, ws);
        }
    }
    if (slow || total > ROUTER_V9_CAND || total < k)
        router_v11_exact<N, VEC, SIG>(row, logits_dt, bsh, k, wi, ws);
}

template <int N, int VEC, int KT, int SIG>
__device__ __forceinline__ void router_v11_token(float* row, int logits_dt,
                                                 const float* __restrict__ bsh,
                                                 const float* __restrict__ clo, bool bias_fit,
                                                 i64 t, int k, double r, int norm, int norm_mode,
                                                 int* __restrict__ out_idx,
                                                 float* __restrict__ out_w, int* ce, int* wi,
                                                 float* ws) {
    if (KT > 0) k = KT;
    float L[N];
    float lmax, lmax2, unused = 0.0f;
    router_v9_filter<N, VEC, false, false>(row, logits_dt, clo, L, lmax, lmax2, unused);
    const bool slow = !bias_fit || __any_sync(DUET_FULL_MASK, lmax != lmax);
    router_v11_select<N, VEC, KT, SIG>(row, logits_dt, bsh, L, lmax, lmax2, slow, k, ce, wi, ws);
    router_warp_finish<KT>(t, k, r, norm, norm_mode, wi, ws, out_idx, out_w);
    __syncwarp();  // the row buffer and wi / ws are free for the next token
}

// The next token's guess from this one's winners in wi / ws (v12; session 16's v15 also after
// its fallback): kappa - 0.3 D, kappa the k-th key, D the gap between the (k/2)-th and k-th keys.
// A heuristic: any value is safe.
__device__ __forceinline__ void router_v12_guess_from_winners(int k, const float* __restrict__ bsh,
                                                              const int* wi, const float* ws,
                                                              float& g, float& D) {
    __syncwarp();  // every lane's wi / ws writes are visible
    const int h = (k - 1) >> 1;
    const float kap = __fadd_rn(ws[k - 1], bsh[wi[k - 1]]);
    D = __fsub_rn(__fadd_rn(ws[h], bsh[wi[h]]), kap);
    g = __fmaf_rn(-ROUTER_V12_A, D, kap);
}

template <int N, int VEC, int KT, int SIG>
__device__ __forceinline__ void router_v12_token(float* row, int logits_dt,
                                                 const float* __restrict__ bsh,
                                                 const float* __restrict__ clo, bool bias_fit,
                                                 i64 t, int k, double r, int norm, int norm_mode,
                                                 int* __restrict__ out_idx,
                                                 float* __restrict__ out_w, int* ce, int* wi,
                                                 float* ws, float& g, float& D) {
    if (KT > 0) k = KT;
    float L[N];
    float nan_acc = 0.0f, unused_max, unused_max2;
    router_v9_filter<N, VEC, false, false, false>(row, logits_dt, clo, L, unused_max, unused_max2,
                                                  nan_acc);
    // NaN logit -> NaN L -> NaN sum (an inf - inf sum only sends a row to v11's path).
    const bool slow = !bias_fit || __any_sync(DUET_FULL_MASK, nan_acc != nan_acc);
    bool done = false;
    if (!slow) {
        const int mid = (k + 32) >> 1;
        const float stepc = ROUTER_V12_C * D;
        float gg = g;
        u32 flags = 0u;
        int total = 0;
        bool ok = false;
#pragma unroll 1
        for (int p = 0; p < 3; ++p) {
            if (!(fabsf(gg) >= 0x1p-75f && fabsf(gg) <= 512.0f)) break;  // NaN too
            flags = router_v12_mask<N>(L, gg);
            total = __reduce_add_sync(DUET_FULL_MASK, (u32)__popc(flags));
            if (total >= k && total <= 32) {
                ok = true;
                break;
            }
            gg = __fmaf_rn(stepc, (float)(total - mid), gg);
        }
        if (ok) {
            const int cnt = __popc(flags);
            done = router_v12_one_slot<VEC, SIG, true>(row, logits_dt, bsh, flags, cnt,
                                                       router_v12_scan(cnt), total, gg, k, ce,
                                                       wi, ws);
        }
    }
    if (!done) {
        // v11's path on the same L.
        float lmax = __uint_as_float(0xff800000u), lmax2 = lmax;  // -inf
#pragma unroll
        for (int j = 0; j < N; ++j) {
            lmax2 = fmaxf(lmax2, fminf(lmax, L[j]));
            lmax = fmaxf(lmax, L[j]);
        }
        router_v11_select<N, VEC, KT, SIG>(row, logits_dt, bsh, L, lmax, lmax2, slow, k, ce, wi,
                                           ws);
    }
    router_v12_guess_from_winners(k, bsh, wi, ws, g, D);
    router_warp_finish<KT>(t, k, r, norm, norm_mode, wi, ws, out_idx, out_w);
    __syncwarp();  // the row buffer and wi / ws are free for the next token
}

// v15 (session 16; its kernels removed in session 17: v17 is faster at every T >= 4096 and
// keeps everything below but the carried guess and the f32 probe; the helpers keep the
// router_v15_ names): v12 with fewer instructions a token (ncu, session 15: v12 ran ~690 warp
// instructions a token at ~0.69 issued a cycle a scheduler; neither more warps nor shorter
// chains raised the rate, so the count is what sets the time). Same keys, same order, same
// weights as v4-v12. What changes against v12:
//   - NaN rows: no separate screen of L (v12 summed L, 16 FADDs a token). The probe counts
//     bit_j = 1 - sat((g - L_j) 2^100), which is 1 for L_j >= g and for NaN L_j (sat(NaN) = 0),
//     so a NaN logit is always a candidate; its exact key is NaN and fails the 32-bit key
//     window, which sends the token to the fallback, where the NaN screen runs (the lanes'
//     max.NaN). A non-candidate has L < g, a stronger premise than v12's L <= g.
//   - The compaction: an exclusive warp scan on predicated shuffles (shfl.up's in-range
//     predicate guards the add) and one slot a candidate written as (lane << 4 | j), decoded
//     to the expert id once by the lane that takes it.
//   - The sort: the flip form of the bitonic network (each merge starts by comparing lane i
//     with i ^ (size - 1), then half-cleaners), where the lane that keeps the maximum is
//     always the one whose bit `stride` is 0: five lane predicates for all 15 stages.
//   - Keys outside the 32-bit window (an expert's key more than 2^23 f32 steps above the
//     threshold, or NaN) send the token to the fallback instead of a u64 sort in line.
//   - The next token's guess from the sorted keys (two shuffles) instead of shared memory.
//   - A warp's first token guesses from its own row (below) instead of taking the fallback.
//     (Measured, session 16 call 2: v16, every token's first probe at the 20th largest lane
//     maximum of L, sorted across the warp: 3% fallbacks and 1.27 probes a token, but the
//     sort cost more than it saved: 647 instructions a token vs v15's 626, 35.7 vs 34.2 us
//     at T = 32768, 5.6 vs 4.6 us at T = 64. Removed.)
// (v15's probe, removed with it: bit_j = 1 - sat(fma(L_j, -2^100, g 2^100)) on the FMA pipe,
// four exact partial sums of 2^j sat_j; v17 probes on f16 pairs below.)

// One step of an inclusive warp scan: shfl.up's predicate (the source lane exists) guards
// the add.
template <int O>
__device__ __forceinline__ void router_v15_scan_step(u32& incl) {
    asm("{\n\t.reg .u32 v;\n\t.reg .pred p;\n\t"
        "shfl.sync.up.b32 v|p, %0, %1, 0, 0xffffffff;\n\t"
        "@p add.u32 %0, %0, v;\n\t}"
        : "+r"(incl)
        : "n"(O));
}

// Exclusive warp scan of cnt.
__device__ __forceinline__ u32 router_v15_excl_scan(u32 cnt) {
    u32 incl = cnt;
    router_v15_scan_step<1>(incl);
    router_v15_scan_step<2>(incl);
    router_v15_scan_step<4>(incl);
    router_v15_scan_step<8>(incl);
    router_v15_scan_step<16>(incl);
    return incl - cnt;
}

// Descending bitonic sort across the warp in the flip form: each merge of size s first
// compares lane i with i ^ (s - 1), then with i ^ stride for stride = s / 4 .. 1; the lane
// whose bit (the pair's highest differing bit) is 0 keeps the larger key.
template <typename K>
__device__ __forceinline__ K router_v15_sort_desc(K p) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int size = 2; size <= 32; size <<= 1) {
        {
            const K op = __shfl_xor_sync(DUET_FULL_MASK, p, size - 1);
            const bool keep_max = (lane & (size >> 1)) == 0;
            if ((op > p) == keep_max) p = op;
        }
#pragma unroll
        for (int stride = size >> 2; stride > 0; stride >>= 1) {
            const K op = __shfl_xor_sync(DUET_FULL_MASK, p, stride);
            const bool keep_max = (lane & stride) == 0;
            if ((op > p) == keep_max) p = op;
        }
    }
    return p;
}

// v17 (session 16): v15 with every token's guess from its own row (below; no state between
// tokens) and the probe on f16 pairs. L is rounded to f16 once a token (8
// F2FP packs) and each probe is one HSET2.GEU and one LOP3 a pair: bit j of the mask is
// (L16_j >= g16 or unordered), so NaN stays a candidate. The f16 roundings widen the bounds:
// |L - L16| <= 2^-11 |L16| + 2^-25 (round to nearest; |L| < 2^9 is far below the f16
// maximum), so with m = 2^-11 |g16| + 2^-25 every candidate has L >= g16 - m and every other
// expert L < g16 + m (both signs checked case by case); the window's base and the check use
// those two bounds (rounded outward in f32).
template <int N>
__device__ __forceinline__ void router_v17_pack(const float (&L)[N], u32 (&h)[N / 2]) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i)
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h[i]) : "f"(L[2 * i + 1]), "f"(L[2 * i]));
}

// Lane mask of (L16_j >= g16 or unordered): pair i's halves go to bits 2i and 2i + 1 + 16,
// folded to bits 2i and 2i + 1 (bit j = element j).
template <int N>
__device__ __forceinline__ u32 router_v17_mask(const u32 (&h)[N / 2], u32 g2) {
    u32 acc = 0u;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        u32 m;
        asm("set.geu.u32.f16x2 %0, %1, %2;" : "=r"(m) : "r"(h[i]), "r"(g2));
        acc |= m & ((1u << (2 * i)) | (1u << (2 * i + 17)));
    }
    return (acc | (acc >> 16)) & 0xffffu;
}

// g rounded to f16 (both halves of g2) and back to f32.
__device__ __forceinline__ float router_v17_guess(float g, u32& g2) {
    asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(g2) : "f"(g));
    float f;
    asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.f32.f16 %0, lo;\n\t}"
        : "=f"(f)
        : "r"(g2));
    return f;
}

// v17 (session 16; its kernels removed in session 17: v18, the same arithmetic at shared
// addresses, was faster at every T in calls 2-3) walked router_v11_walk with a token function
// on generic shared pointers (router_v17_token) and router_v15_one_slot; v18 keeps their
// arithmetic (router_v18_token, router_v18_one_slot).

// v18 (session 17): v17 with its shared memory addressed through two registers. ncu (session
// 16 call 4, session 17 call 1): of v17's ~552 instructions a token, ~30 rebuild shared
// addresses (S2R SR_CgaCtaId, the 0x400 window base, LEA, warp x stride, lane x 4: five
// times a token, for the row, ce, wi / ws and the finish) because the compiler, at 64
// registers, recomputes a shared array's address at each use rather than hold it. v18 puts
// the block's arrays in one struct (router_v18_smem), takes two 32-bit shared addresses
// once (the block's and the warp's part), passes them through an empty asm so they cannot
// be recomputed, and reads / writes the hot path's shared memory with ld / st.shared at
// register + constant offsets. Same arithmetic, same keys, same order as v17; the fallback
// (v11's selection, rare) keeps its generic pointers.
template <int N>
struct router_v18_warp {
    float rows[2][32 * N];  // the staged rows (f32, or 2-byte logits in the first half)
    int ce[ROUTER_V9_CAND];
    int wi[32];
    float ws[32];
};
template <int N>
struct router_v18_smem {
    float bsh[32 * N];
    float clo[32 * N];
    router_v18_warp<N> w[ROUTER_V4_WARPS];
};
// Byte offsets inside router_v18_warp<N> (offsetof is not constexpr-friendly in NVRTC's
// C++17 for templates; the layout is plain arrays of 4-byte elements).
#define ROUTER_V18_ROW(N) 0
#define ROUTER_V18_CE(N) (2 * 32 * (N) * 4)
#define ROUTER_V18_WI(N) (ROUTER_V18_CE(N) + ROUTER_V9_CAND * 4)
#define ROUTER_V18_WS(N) (ROUTER_V18_WI(N) + 32 * 4)

// Shared-memory access at a 32-bit shared address (volatile with a memory clobber: program
// order with __syncwarp and the generic accesses of the fallback is kept).
__device__ __forceinline__ uint4 router_lds128u(u32 a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(a)
                 : "memory");
    return v;
}
__device__ __forceinline__ u32 router_ldsu(u32 a) {
    u32 v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ u16 router_lds16(u32 a) {
    u16 v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ void router_stsu(u32 a, u32 v) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}
// The f32 forms: the same 32-bit accesses, reinterpreted (no conversion instruction).
__device__ __forceinline__ float4 router_lds128(u32 a) {
    const uint4 u = router_lds128u(a);
    return make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z),
                       __uint_as_float(u.w));
}
__device__ __forceinline__ float router_ldsf(u32 a) { return __uint_as_float(router_ldsu(a)); }
__device__ __forceinline__ void router_stsf(u32 a, float v) { router_stsu(a, __float_as_uint(v)); }
// A value the compiler must keep (it cannot recompute it: the asm is opaque).
__device__ __forceinline__ u32 router_pin(u32 v) {
    asm volatile("" : "+r"(v));
    return v;
}

// v17's filter (router_v9_filter with L only) from the staged row at srow and c_lo at sclo.
template <int N, int VEC>
__device__ __forceinline__ void router_v18_filter(u32 srow, u32 sclo, int logits_dt,
                                                  float (&L)[N]) {
    const u32 lane = threadIdx.x & 31;
    float x[N];
    if (VEC == 4) {
#pragma unroll
        for (int c = 0; c < N / 4; ++c) {
            const float4 q = router_lds128(srow + lane * 16u + (u32)c * 512u);
            x[4 * c] = q.x;
            x[4 * c + 1] = q.y;
            x[4 * c + 2] = q.z;
            x[4 * c + 3] = q.w;
        }
    } else {
#pragma unroll
        for (int c = 0; c < N / 8; ++c) {
            const uint4 q = router_lds128u(srow + lane * 16u + (u32)c * 512u);
            const u32 w4[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                const u16 lo = (u16)(w4[h] & 0xffffu), hi = (u16)(w4[h] >> 16);
                x[8 * c + 2 * h] = logits_dt == DT_BF16 ? bf16_to_f32(lo) : f16_to_f32(lo);
                x[8 * c + 2 * h + 1] = logits_dt == DT_BF16 ? bf16_to_f32(hi) : f16_to_f32(hi);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < N / 4; ++c) {
        // c_lo of the lane's experts 4c .. 4c + 3 (router_v4_expert), in bytes.
        const u32 off = VEC == 4 ? ((u32)c * 32u + lane) * 16u
                                 : ((u32)(c >> 1) * 32u + lane) * 32u + (u32)(c & 1) * 16u;
        const float4 q = router_lds128(sclo + off);
        const float cq[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int h = 0; h < 4; ++h) L[4 * c + h] = router_v8_lower(x[4 * c + h], cq[h]);
    }
}

// The probed candidates (flags, total in [k, 32]; every candidate has L >= thr, every other
// expert L < hi): compaction, exact sigmoids, the 32-bit sort and the check. Returns false
// (having written nothing but ce) when a key falls outside the window (or is NaN) or the
// k-th key is below chk = fl_up(hi + 2^-9); else the winners into wi / ws and their s over
// the row. (thr and hi bracket the f16 guess by its rounding.) Session 16's
// router_v15_one_slot at shared addresses: srow the staged row, sw the warp's struct, sbsh
// the biases.
template <int N, int VEC, int SIG>
__device__ __forceinline__ bool router_v18_one_slot(u32 srow, u32 sw, u32 sbsh, int logits_dt,
                                                    u32 flags, int total, float thr, float chk,
                                                    int k) {
    const u32 lane = threadIdx.x & 31;
    u32 pos = router_v15_excl_scan((u32)__popc(flags));
    const u32 lane16 = lane << 4;
    const u32 sce = sw + ROUTER_V18_CE(N);
    while (flags) {
        u32 j;
        asm("bfind.u32 %0, %1;" : "=r"(j) : "r"(flags));
        flags ^= 1u << j;
        router_stsu(sce + pos * 4u, lane16 | j);
        ++pos;
    }
    __syncwarp();
    int e0 = 0;
    float s0 = 0.0f, key = thr;
    if ((int)lane < total) {
        const u32 code = router_ldsu(sce + lane * 4u), j = code & 15u;
        e0 = (int)((((j / VEC) * 32u + (code >> 4)) * VEC) | (j % VEC));
        float x;
        if (VEC == 4) {
            x = router_ldsf(srow + (u32)e0 * 4u);
        } else {
            const u16 hb = router_lds16(srow + (u32)e0 * 2u);
            x = logits_dt == DT_BF16 ? bf16_to_f32(hb) : f16_to_f32(hb);
        }
        s0 = router_v11_sigmoid<SIG>(x);
        key = __fadd_rn(s0, router_ldsf(sbsh + (u32)e0 * 4u));
    }
    const u32 base = router_f32_ord(thr);
    const u32 d = router_f32_ord(key) - base;  // NaN key: ord 0xffc00000.., never fits
    if (!__all_sync(DUET_FULL_MASK, d < 0x7fffffu)) return false;
    u32 p = (int)lane < total ? ((d + 1u) << 9) | (u32)(511 - e0) : 0u;
    p = router_v15_sort_desc<u32>(p);
    const u32 dk = (__shfl_sync(DUET_FULL_MASK, p, k - 1) >> 9) - 1u;
    if (dk < router_f32_ord(chk) - base) return false;  // warp-uniform
    // bf16 / f16 rows wait for the other lanes' reads of the logits
    // that s (4 bytes at float index e0) overwrites.
    if (VEC == 8) __syncwarp();
    if ((int)lane < total) router_stsf(srow + (u32)e0 * 4u, s0);
    __syncwarp();
    if ((int)lane < k) {
        const u32 w = 511u - (p & 511u);
        router_stsu(sw + ROUTER_V18_WI(N) + lane * 4u, w);
        router_stsf(sw + ROUTER_V18_WS(N) + lane * 4u, router_ldsf(srow + w * 4u));
    }
    return true;
}

// router_warp_finish reading wi / ws at the warp's shared address.
template <int N, int KT>
__device__ __forceinline__ void router_v18_finish(i64 t, int k, double r, int norm,
                                                  int norm_mode, u32 sw,
                                                  int* __restrict__ out_idx,
                                                  float* __restrict__ out_w) {
    const u32 lane = threadIdx.x & 31;
    if (KT > 0) k = KT;
    __syncwarp();
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        if (4 * q >= k) break;
        const float4 v = router_lds128(sw + ROUTER_V18_WS(N) + (u32)q * 16u);
        if (4 * q < k) sum = __fadd_rn(sum, v.x);
        if (4 * q + 1 < k) sum = __fadd_rn(sum, v.y);
        if (4 * q + 2 < k) sum = __fadd_rn(sum, v.z);
        if (4 * q + 3 < k) sum = __fadd_rn(sum, v.w);
    }
    if ((int)lane < k) {
        const i64 o = t * k + lane;
        out_idx[o] = (int)router_ldsu(sw + ROUTER_V18_WI(N) + lane * 4u);
        out_w[o] = router_weight(router_ldsf(sw + ROUTER_V18_WS(N) + lane * 4u), sum, r, norm,
                                 norm_mode);
    }
}

// v17's token (router_v17_token) at shared addresses; the fallback on generic pointers.
template <int N, int VEC, int KT, int SIG>
__device__ __forceinline__ void router_v18_token(router_v18_smem<N>* sm, int cur, u32 sblk,
                                                 u32 sw, int logits_dt, bool bias_fit, i64 t,
                                                 int k, double r, int norm, int norm_mode,
                                                 int* __restrict__ out_idx,
                                                 float* __restrict__ out_w) {
    if (KT > 0) k = KT;
    const u32 srow = sw + (u32)cur * (32u * N * 4u);
    const u32 sclo = sblk + 32u * N * 4u;
    float L[N];
    router_v18_filter<N, VEC>(srow, sclo, logits_dt, L);
    u32 h[N / 2];
    router_v17_pack<N>(L, h);
    bool done = false;
    if (bias_fit) {
        const int mid = (k + 32) >> 1;
        // The row guess, as v17.
        float lm = L[0];
#pragma unroll
        for (int j = 1; j < N; ++j) lm = fmaxf(lm, L[j]);
        const int q = __float2int_rn(lm * 65536.0f);  // |q| < 2^25; NaN -> 0
        const float mean =
            (float)__reduce_add_sync(DUET_FULL_MASK, q) * (1.0f / (32.0f * 65536.0f));
        const float spread =
            __fsub_rn((float)__reduce_max_sync(DUET_FULL_MASK, q) * (1.0f / 65536.0f), mean);
        float gg = __fmaf_rn(-0.1f, spread, mean);
        const float stepc = ROUTER_V12_C * (0.3f * spread);
#pragma unroll 1
        for (int p = 0; p < 3; ++p) {
            if (!(fabsf(gg) >= 0x1p-75f && fabsf(gg) <= 512.0f)) break;  // NaN too
            u32 g2;
            const float gh = router_v17_guess(gg, g2);
            const float m = __fmaf_ru(fabsf(gh), 0x1p-11f, 0x1p-25f);
            const float lo = __fsub_rd(gh, m);
            const float hi = __fadd_ru(gh, m);
            const u32 flags = router_v17_mask<N>(h, g2);
            const int total = (int)__reduce_add_sync(DUET_FULL_MASK, (u32)__popc(flags));
            if (total >= k && total <= 32) {
                done = router_v18_one_slot<N, VEC, SIG>(srow, sw, sblk, logits_dt, flags, total,
                                                        lo, __fadd_ru(hi, ROUTER_V8_W), k);
                break;
            }
            gg = __fmaf_rn(stepc, (float)(total - mid), gg);
        }
    }
    if (!done) {
        // v17's fallback on the generic pointers (rare: ~2% of the bench's tokens).
        router_v18_warp<N>& wp = sm->w[threadIdx.x >> 5];
        float* row = wp.rows[cur];
        float unused0, unused1, unused2;
        router_v9_filter<N, VEC, false, false, false, false>(row, logits_dt, sm->clo, L, unused0,
                                                             unused1, unused2);
        float lmax = __uint_as_float(0xff800000u), lmax2 = lmax;  // -inf
#pragma unroll
        for (int j = 0; j < N; ++j) {
            lmax2 = fmaxf(lmax2, fminf(lmax, L[j]));
            lmax = router_fmax_nan(lmax, L[j]);
        }
        const bool slow = !bias_fit || __any_sync(DUET_FULL_MASK, lmax != lmax);
        router_v11_select<N, VEC, KT, SIG>(row, logits_dt, sm->bsh, L, lmax, lmax2, slow, k,
                                           wp.ce, wp.wi, wp.ws);
    }
    router_v18_finish<N, KT>(t, k, r, norm, norm_mode, sw, out_idx, out_w);
    __syncwarp();  // the row buffer and wi / ws are free for the next token
}

// v18's walk and entry: v11's walk (same token order, same cp.async double buffer) with the
// row destinations as shared addresses.
template <int N, int VEC, int KT, int SIG>
__device__ __forceinline__ void router_v18_walk(const void* __restrict__ logits, int logits_dt,
                                                router_v18_smem<N>* sm, u32 sblk, u32 sw,
                                                bool bias_fit, i64 T, int k, double r, int norm,
                                                int norm_mode, int* __restrict__ out_idx,
                                                float* __restrict__ out_w) {
    const u32 lane = threadIdx.x & 31;
    const i64 W = (i64)gridDim.x * ROUTER_V4_WARPS;
    i64 t = (i64)blockIdx.x * ROUTER_V4_WARPS + (threadIdx.x >> 5);
    if (t >= T) return;
    const i64 row_bytes = (i64)(32 * N) * (VEC == 4 ? 4 : 2);
    const char* src = (const char*)logits + t * row_bytes + (i64)lane * 16;
    const i64 step = W * row_bytes;
    const u32 dst0 = sw + lane * 16u;
#pragma unroll
    for (int c = 0; c < N / VEC; ++c)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst0 + c * 512u),
                     "l"(src + c * 512)
                     : "memory");
    duet_cp_async_commit();
    int cur = 0;
    for (; t < T; t += W) {
        if (t + W < T) {
            src += step;
            const u32 dst = dst0 + (u32)(cur ^ 1) * (32u * N * 4u);
#pragma unroll
            for (int c = 0; c < N / VEC; ++c)
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + c * 512u),
                             "l"(src + c * 512)
                             : "memory");
            duet_cp_async_commit();
            duet_cp_async_wait<1>();
        } else {
            duet_cp_async_wait<0>();
        }
        __syncwarp();  // every lane's chunks of row t have landed
        router_v18_token<N, VEC, KT, SIG>(sm, cur, sblk, sw, logits_dt, bias_fit, t, k, r, norm,
                                          norm_mode, out_idx, out_w);
        cur ^= 1;
    }
}

template <int N, int KT, int SIG>
__device__ __forceinline__ void router_v18_entry(const void* __restrict__ logits, int logits_dt,
                                                 const void* __restrict__ bias, int bias_dt, i64 T,
                                                 int k, double r, int norm, int norm_mode,
                                                 int* __restrict__ out_idx,
                                                 float* __restrict__ out_w) {
    __shared__ __align__(16) router_v18_smem<N> sm;
    const int warm = router_v11_expc[0] + router_v11_expc[8] > 0.0 ? 1 : 0;  // as v12 / v17
    const bool bias_fit = router_stage_bias<32 * N, false>(bias, bias_dt, sm.bsh, sm.clo, warm);
    const u32 sblk = router_pin((u32)__cvta_generic_to_shared(&sm));
    const u32 sw = router_pin((u32)__cvta_generic_to_shared(&sm.w[threadIdx.x >> 5]));
    if (logits_dt == DT_F32)
        router_v18_walk<N, 4, KT, SIG>(logits, logits_dt, &sm, sblk, sw, bias_fit, T, k, r, norm,
                                       norm_mode, out_idx, out_w);
    else
        router_v18_walk<N, 8, KT, SIG>(logits, logits_dt, &sm, sblk, sw, bias_fit, T, k, r, norm,
                                       norm_mode, out_idx, out_w);
}

// The cp.async of token t's row (chunks of 16 bytes, lane-interleaved 512-byte runs) into dst.
template <int N, int VEC>
__device__ __forceinline__ void router_v11_issue_row(const void* __restrict__ logits, i64 t,
                                                     float* dst) {
    const int lane = threadIdx.x & 31;
    const i64 row_bytes = (i64)(32 * N) * (VEC == 4 ? 4 : 2);
    const char* src = (const char*)logits + t * row_bytes + (i64)lane * 16;
    char* d = (char*)dst + lane * 16;
#pragma unroll
    for (int c = 0; c < N / VEC; ++c) duet_cp_async16(d + c * 512, src + c * 512);
    duet_cp_async_commit();
}

// v11 / v12 (V): v9's persistent walk; the next row's cp.async source advances by the
// grid's stride. v12 carries its guess (g, D) from token to token.
template <int N, int VEC, int KT, int SIG, int V>
__device__ __forceinline__ void router_v11_walk(const void* __restrict__ logits, int logits_dt,
                                                const float* __restrict__ bsh,
                                                const float* __restrict__ clo, bool bias_fit,
                                                i64 T, int k, double r, int norm, int norm_mode,
                                                int* __restrict__ out_idx,
                                                float* __restrict__ out_w, float* rows, int* ce,
                                                int* wi, float* ws) {
    const int lane = threadIdx.x & 31;
    const i64 W = (i64)gridDim.x * ROUTER_V4_WARPS;
    i64 t = (i64)blockIdx.x * ROUTER_V4_WARPS + (threadIdx.x >> 5);
    if (t >= T) return;
    const i64 row_bytes = (i64)(32 * N) * (VEC == 4 ? 4 : 2);
    const char* src = (const char*)logits + t * row_bytes + (i64)lane * 16;
    const i64 step = W * row_bytes;
    char* const dst0 = (char*)rows + lane * 16;
    char* const dst1 = (char*)(rows + 32 * N) + lane * 16;
    router_v11_issue_row<N, VEC>(logits, t, rows);
    int cur = 0;
    float g = __uint_as_float(0x7fffffffu), D = 0.0f;  // v12: no guess for the first token
    for (; t < T; t += W) {
        float* row = rows + cur * (32 * N);
        if (t + W < T) {
            src += step;
            char* dst = cur ? dst0 : dst1;
#pragma unroll
            for (int c = 0; c < N / VEC; ++c) duet_cp_async16(dst + c * 512, src + c * 512);
            duet_cp_async_commit();
            duet_cp_async_wait<1>();
        } else {
            duet_cp_async_wait<0>();
        }
        __syncwarp();  // every lane's chunks of row t have landed
        if (V >= 12)
            router_v12_token<N, VEC, KT, SIG>(row, logits_dt, bsh, clo, bias_fit, t, k, r, norm,
                                              norm_mode, out_idx, out_w, ce, wi, ws, g, D);
        else
            router_v11_token<N, VEC, KT, SIG>(row, logits_dt, bsh, clo, bias_fit, t, k, r, norm,
                                              norm_mode, out_idx, out_w, ce, wi, ws);
        cur ^= 1;
    }
}

template <int N, int KT, int SIG, int V>
__device__ __forceinline__ void router_v11_entry(const void* __restrict__ logits, int logits_dt,
                                                 const void* __restrict__ bias, int bias_dt, i64 T,
                                                 int k, double r, int norm, int norm_mode,
                                                 int* __restrict__ out_idx,
                                                 float* __restrict__ out_w) {
    __shared__ __align__(16) float bsh[32 * N];
    __shared__ __align__(16) float clo[32 * N];
    __shared__ __align__(16) float rows[ROUTER_V4_WARPS][2 * 32 * N];
    __shared__ int ce[ROUTER_V4_WARPS][ROUTER_V9_CAND];
    __shared__ int wi[ROUTER_V4_WARPS][32];
    __shared__ __align__(16) float ws[ROUTER_V4_WARPS][32];
    // v12: the exp core's coefficients into the constant cache while the biases load (ncu,
    // session 15: the first exact sigmoid of every warp stalled on its constant-cache miss, 4%
    // of the kernel's stall samples; the coefficients are positive, so the test never fails).
    // Measured: v12 36.8 -> 36.0 us at T = 32768 (with the FLO compaction), but v11 6.77 ->
    // 7.02 us at T = 4096 (one token a warp: the block waits for the miss), so v12 only.
    const int warm = V < 12 || router_v11_expc[0] + router_v11_expc[8] > 0.0 ? 1 : 0;
    const bool bias_fit = router_stage_bias<32 * N, false>(bias, bias_dt, bsh, clo, warm);
    const int warp = threadIdx.x >> 5;
    if (logits_dt == DT_F32)
        router_v11_walk<N, 4, KT, SIG, V>(logits, logits_dt, bsh, clo, bias_fit, T, k, r, norm,
                                       norm_mode, out_idx, out_w, rows[warp], ce[warp], wi[warp],
                                       ws[warp]);
    else
        router_v11_walk<N, 8, KT, SIG, V>(logits, logits_dt, bsh, clo, bias_fit, T, k, r, norm,
                                       norm_mode, out_idx, out_w, rows[warp], ce[warp], wi[warp],
                                       ws[warp]);
}

// router_v11_n<N>[_k22]_s<SIG> (v12: router_v12_...): the sigmoid mode in the name (the
// kernel's sig_mode argument is ignored: the launcher picks the kernel by mode).
#define ROUTER_V11(V, N, KT, SUFFIX, SIG)                                                       \
    extern "C" __global__ void __launch_bounds__(256, 4)                                        \
        router_v##V##_n##N##SUFFIX##_s##SIG(ROUTER_WARP_KERNEL_PARAMS) {                        \
        DUET_PDL_ENTRY();                                                                       \
        (void)sig_mode;                                                                         \
        router_v11_entry<N, KT, SIG, V>(logits, logits_dt, bias, bias_dt, T, k, r, norm,        \
                                        norm_mode, out_idx, out_w);                             \
    }
// v18: its own entry (router_v18_smem).
#define ROUTER_V18(N, KT, SUFFIX, SIG)                                                          \
    extern "C" __global__ void __launch_bounds__(256, 4)                                        \
        router_v18_n##N##SUFFIX##_s##SIG(ROUTER_WARP_KERNEL_PARAMS) {                           \
        DUET_PDL_ENTRY();                                                                       \
        (void)sig_mode;                                                                         \
        router_v18_entry<N, KT, SIG>(logits, logits_dt, bias, bias_dt, T, k, r, norm,           \
                                     norm_mode, out_idx, out_w);                                \
    }
// Modes 0 (tanh), 1 (exp), 3 (tanh_f32); not the bench-only mode 2.
#define ROUTER_V11_MODES(V, N, KT, SUFFIX) \
    ROUTER_V11(V, N, KT, SUFFIX, 0)        \
    ROUTER_V11(V, N, KT, SUFFIX, 1)        \
    ROUTER_V11(V, N, KT, SUFFIX, 3)
ROUTER_V11_MODES(11, 8, 0, )
ROUTER_V11_MODES(11, 16, 0, )
ROUTER_V11_MODES(11, 8, 22, _k22)
ROUTER_V11_MODES(11, 16, 22, _k22)
ROUTER_V11_MODES(12, 8, 0, )
ROUTER_V11_MODES(12, 16, 0, )
ROUTER_V11_MODES(12, 8, 22, _k22)
ROUTER_V11_MODES(12, 16, 22, _k22)
ROUTER_V18(8, 0, , 0)
ROUTER_V18(8, 0, , 1)
ROUTER_V18(8, 0, , 3)
ROUTER_V18(16, 0, , 0)
ROUTER_V18(16, 0, , 1)
ROUTER_V18(16, 0, , 3)
ROUTER_V18(8, 22, _k22, 0)
ROUTER_V18(8, 22, _k22, 1)
ROUTER_V18(8, 22, _k22, 3)
ROUTER_V18(16, 22, _k22, 0)
ROUTER_V18(16, 22, _k22, 1)
ROUTER_V18(16, 22, _k22, 3)

// v11's sigmoid vs router_sigmoid over x = bits(base + i): counts[0] += inputs whose bits
// differ, counts[1] += inputs whose certificate failed (the fallback ran), counts[2] = min
// of the differing inputs' bits (0xffffffff if none; the caller initialises it).
extern "C" __global__ void router_v11_sigmoid_check(u32 base, u32 n, int mode,
                                                    unsigned long long* __restrict__ counts) {
    DUET_PDL_ENTRY();
    u32 bad = 0u, fell = 0u, first = 0xffffffffu;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const u32 b = base + i;
        const float x = __uint_as_float(b);
        const float want = router_sigmoid(x, mode);
        const float got = mode == SIG_TANH ? router_v11_sigmoid<SIG_TANH>(x)
                                           : router_v11_sigmoid<SIG_EXP>(x);
        if (__float_as_uint(got) != __float_as_uint(want)) {
            bad++;
            first = b < first ? b : first;
        }
        // The certificate alone (NaN inputs fail it by design; count the rest).
        if (x == x) {
            bool ok;
            if (mode == SIG_TANH)
                (void)router_v11_sigmoid_cert<SIG_TANH>(x, ok);
            else
                (void)router_v11_sigmoid_cert<SIG_EXP>(x, ok);
            fell += ok ? 0u : 1u;
        }
    }
    bad = __reduce_add_sync(DUET_FULL_MASK, bad);
    fell = __reduce_add_sync(DUET_FULL_MASK, fell);
    first = __reduce_min_sync(DUET_FULL_MASK, first);
    if ((threadIdx.x & 31) == 0) {
        if (bad) atomicAdd(&counts[0], (unsigned long long)bad);
        if (fell) atomicAdd(&counts[1], (unsigned long long)fell);
        if (first != 0xffffffffu) atomicMin(&counts[2], (unsigned long long)first);
    }
}

// v5 / v6 (session 4, not yet run on the H200): v4's per-token selection in persistent blocks.
// v4 launches ceil(T / 8) blocks that each stage the 512 biases and then route 8 tokens once:
// at T = 32768 that is 4096 blocks at 3 resident per SM (76 registers x 256 threads), each
// paying the bias staging and a full load latency for one token per warp (62.8 us, ~1.2 TB/s).
// v5 launches as many blocks as are resident, stages the bias once per block, and each warp
// walks tokens t, t + W, ... (W = warps in the grid). v6 also loads the next token's row
// before selecting the current one (the load latency hidden behind the selection). Both use
// 118 registers at E = 512: 2 blocks per SM instead of v4's 3. Same per-token arithmetic as
// v4 (router_v4_select): bit-identical indices and weights.

// One warp's tokens t, t + stride, ... < T (v5: load then select; v6: the next row loaded
// before the current one is selected).
template <int N, int VEC, bool PREFETCH>
__device__ __forceinline__ void router_v5_walk(const void* __restrict__ logits, int logits_dt,
                                               const float* __restrict__ bsh, i64 t, i64 T, i64 stride, int k,
                                               double r, int norm, int norm_mode, int sig_mode,
                                               int* __restrict__ out_idx, float* __restrict__ out_w, int* ce,
                                               float* cx, float* cb, u64* ck, int* wi, float* ws) {
    float x[N], xn[N];
    if (PREFETCH) router_v4_load<N, VEC>(logits, logits_dt, t, x);
    for (; t < T; t += stride) {
        if (!PREFETCH) router_v4_load<N, VEC>(logits, logits_dt, t, x);
        const bool more = PREFETCH && t + stride < T;
        if (more) router_v4_load<N, VEC>(logits, logits_dt, t + stride, xn);
        router_v4_select<N, VEC>(x, bsh, t, k, r, norm, norm_mode, sig_mode, out_idx, out_w, ce, cx, cb, ck,
                                 wi, ws);
        __syncwarp();  // the warp's shared slots are reused by the next token
#pragma unroll
        for (int j = 0; j < N; ++j)
            if (PREFETCH) x[j] = xn[j];
    }
}

template <int N, bool PREFETCH>
__device__ __forceinline__ void router_v5_entry(const void* __restrict__ logits, int logits_dt,
                                                const void* __restrict__ bias, int bias_dt, i64 T, int k,
                                                double r, int norm, int norm_mode, int sig_mode,
                                                int* __restrict__ out_idx, float* __restrict__ out_w) {
    ROUTER_V4_SMEM_AND_BIAS(N);
    const int warp = threadIdx.x >> 5;
    const i64 stride = (i64)gridDim.x * ROUTER_V4_WARPS;
    i64 t = (i64)blockIdx.x * ROUTER_V4_WARPS + warp;
    if (t >= T) return;
    if (logits_dt == DT_F32)
        router_v5_walk<N, 4, PREFETCH>(logits, logits_dt, bsh, t, T, stride, k, r, norm, norm_mode, sig_mode,
                                       out_idx, out_w, ce[warp], cx[warp], cb[warp], ck[warp], wi[warp],
                                       ws[warp]);
    else
        router_v5_walk<N, 8, PREFETCH>(logits, logits_dt, bsh, t, T, stride, k, r, norm, norm_mode, sig_mode,
                                       out_idx, out_w, ce[warp], cx[warp], cb[warp], ck[warp], wi[warp],
                                       ws[warp]);
}

#define ROUTER_V5(NAME, N, PREFETCH, MINB)                                                      \
    extern "C" __global__ void __launch_bounds__(256, MINB) NAME(                                 \
        ROUTER_WARP_KERNEL_PARAMS) {                                                            \
        DUET_PDL_ENTRY();                                                                       \
        router_v5_entry<N, PREFETCH>(ROUTER_WARP_KERNEL_ARGS); \
    }

// Registers (E = 512): 118 for v5 and v6, so 2 resident blocks per SM (v4: 76, 3 blocks). Asking
// ptxas for 3 blocks made v5_n16 spill (72 / 284 bytes), so neither asks.
ROUTER_V5(router_v5_n8, 8, false, 1)
ROUTER_V5(router_v5_n16, 16, false, 1)
ROUTER_V5(router_v6_n8, 8, true, 2)
ROUTER_V5(router_v6_n16, 16, true, 2)

// Test kernels (gpu_router.rs): duet_tanhf over 2^32 inputs in chunks, and the filter bound.
// tanh_out[i] = duet_tanhf(bits(base + i)).
extern "C" __global__ void duet_tanhf_chunk(u32 base, u32 n, float* __restrict__ out) {
    DUET_PDL_ENTRY();
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = duet_tanhf(__uint_as_float(base + i));
}

// max over x = bits(base + i) of |router_sigmoid_approx(x) - router_sigmoid(x, mode)| (non-NaN
// x), as f32 bits through atomicMax (non-negative floats order like their bits).
extern "C" __global__ void router_sigmoid_approx_err(u32 base, u32 n, int mode,
                                                     u32* __restrict__ max_err) {
    DUET_PDL_ENTRY();
    float m = 0.0f;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float x = __uint_as_float(base + i);
        if (x != x) continue;
        const float d = fabsf(__fsub_rn(router_sigmoid_approx(x), router_sigmoid(x, mode)));
        m = d > m ? d : m;
    }
    m = warp_max_f32(m);
    if ((threadIdx.x & 31) == 0) atomicMax(max_err, __float_as_uint(m));
}

// max over x = bits(base + i) of |0.5 tanh.approx(0.5x) + 0.5 - router_sigmoid(x, mode)| (non-NaN
// x): v8's filter premise (<= 2^-11), as f32 bits through atomicMax.
extern "C" __global__ void router_v8_tanh_approx_err(u32 base, u32 n, int mode,
                                                     u32* __restrict__ max_err) {
    DUET_PDL_ENTRY();
    float m = 0.0f;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float x = __uint_as_float(base + i);
        if (x != x) continue;
        const float a = __fmaf_rn(0.5f, router_tanh_approx(0.5f * x), 0.5f);
        const float d = fabsf(__fsub_rn(a, router_sigmoid(x, mode)));
        m = d > m ? d : m;
    }
    m = warp_max_f32(m);
    if ((threadIdx.x & 31) == 0) atomicMax(max_err, __float_as_uint(m));
}
