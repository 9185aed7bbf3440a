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

#define NORM_FP64 0
#define NORM_FP32_DIV_MUL 1
#define NORM_FP32_NO_EPS 2
#define SIG_TANH 0
#define SIG_EXP 1
// Bench-only (not exact, never used by the op): CUDA's f32 tanhf, to measure what the f64
// sigmoid costs.
#define SIG_TANH_F32_BENCH 2

__device__ __forceinline__ float router_sigmoid(float x, int mode) {
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

#define ROUTER_V2(N)                                                                            \
    extern "C" __global__ void __launch_bounds__(128) router_v2_n##N(                           \
        const void* __restrict__ logits, int logits_dt, const void* __restrict__ bias,          \
        int bias_dt, i64 T, int k, double r, int norm, int norm_mode, int sig_mode,             \
        int* __restrict__ out_idx, float* __restrict__ out_w) {                                 \
        router_v2_body<N>(logits, logits_dt, bias, bias_dt, T, k, r, norm, norm_mode, sig_mode, \
                          out_idx, out_w);                                                      \
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
