// FlashInfer's selective state update timed at the Nemotron 3 Super decode shapes, for issue 5's
// side-by-side ("the numbers hold when re-measured side by side with FlashInfer and the Triton
// kernel in one run").
//
// This file is duet's harness. FlashInfer's kernels are not in the repository: its headers come
// from the pinned flashinfer-python wheel (`python3 tools/fetch_baselines.py` puts them under
// `.baselines/flashinfer/include`); this harness includes them and calls
// `flashinfer::mamba::invokeSelectiveStateUpdate`, nothing else. Build: tools/flashinfer_ssu/build.sh.
//
// What runs (the method of duet's `ssu_*` presets and tools/triton_side_by_side.py):
// - nheads 128, dim 64, dstate 128, ngroups 8; bf16 x / B / C / z, f32 dt / A / D / dt_bias per
//   head, dt_softplus; state bf16 or f32 [slots, nheads, dim, dstate].
// - The state rotates over W windows of `batch` slots, W = max(2, ceil(256 MiB / window bytes)),
//   so every call reads its state from DRAM. One CUDA graph holds one call per window; the time
//   per call is a replay's time / W (CUDA events, 5 warm-up replays, median / p10 / p90 of 30).
// - FlashInfer's algorithms: auto (its own dispatch), simple, vertical (TMA producer / consumers),
//   horizontal, each where it applies.
// - Before timing, one call at batch 2 is checked against a double-precision host computation
//   (out and the new state), so the timed calls are known to compute the op.
//
// Output: a JSON array of records on stdout, or into the file named by --out (written to a
// temporary file, then renamed).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

// The constants FlashInfer's generated config defines before its header (its JIT writes them
// from a template; the header's function templates use them).
using input_t = __nv_bfloat16;
using weight_t = float;
using matrixA_t = float;
using stateIndex_t = int32_t;
using cuSeqlensIndex_t = int32_t;
using numAcceptedIndex_t = int32_t;
constexpr int DIM = 64;
constexpr int DSTATE = 128;
constexpr int NTOKENS_MTP = 1;
constexpr int PHILOX_ROUNDS = 0;
#include <flashinfer/mamba/selective_state_update.cuh>

namespace fm = flashinfer::mamba;

constexpr int NH = 128, NG = 8;

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "flashinfer_ssu: %s failed at %s:%d: %s\n", #call, __FILE__,      \
                    __LINE__, cudaGetErrorString(e_));                                        \
            exit(2);                                                                          \
        }                                                                                     \
    } while (0)

// Deterministic uniform values in [lo, hi) (splitmix64 of the index and a seed): never zeros.
__host__ __device__ inline float hash_uniform(uint64_t i, uint64_t seed, float lo, float hi) {
    uint64_t z = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = (float)(z >> 40) * (1.0f / 16777216.0f);
    return lo + (hi - lo) * u;
}
template <typename T>
__global__ void fill_kernel(T* p, int64_t n, uint64_t seed, float lo, float hi) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        p[i] = (T)hash_uniform((uint64_t)i, seed, lo, hi);
    }
}
template <typename T>
void fill(T* p, int64_t n, uint64_t seed, float lo, float hi) {
    fill_kernel<T><<<1024, 256>>>(p, n, seed, lo, hi);
    CK(cudaGetLastError());
}
template <typename T>
float host_value(const T& v) {
    return (float)v;
}
template <>
float host_value<__nv_bfloat16>(const __nv_bfloat16& v) {
    return __bfloat162float(v);
}

struct Operands {
    int batch = 0;
    __nv_bfloat16 *x = nullptr, *B = nullptr, *C = nullptr, *z = nullptr, *out = nullptr;
    float *dt = nullptr, *A = nullptr, *D = nullptr, *dt_bias = nullptr;
    void alloc(int b) {
        batch = b;
        CK(cudaMalloc(&x, sizeof(__nv_bfloat16) * b * NH * DIM));
        CK(cudaMalloc(&z, sizeof(__nv_bfloat16) * b * NH * DIM));
        CK(cudaMalloc(&out, sizeof(__nv_bfloat16) * b * NH * DIM));
        CK(cudaMalloc(&B, sizeof(__nv_bfloat16) * b * NG * DSTATE));
        CK(cudaMalloc(&C, sizeof(__nv_bfloat16) * b * NG * DSTATE));
        CK(cudaMalloc(&dt, sizeof(float) * b * NH));
        CK(cudaMalloc(&A, sizeof(float) * NH));
        CK(cudaMalloc(&D, sizeof(float) * NH));
        CK(cudaMalloc(&dt_bias, sizeof(float) * NH));
        fill(x, (int64_t)b * NH * DIM, 11, -1.f, 1.f);
        fill(z, (int64_t)b * NH * DIM, 12, -2.f, 2.f);
        fill(out, (int64_t)b * NH * DIM, 13, -9.f, -8.f);  // poison-ish: overwritten by the op
        fill(B, (int64_t)b * NG * DSTATE, 14, -1.f, 1.f);
        fill(C, (int64_t)b * NG * DSTATE, 15, -1.f, 1.f);
        fill(dt, (int64_t)b * NH, 16, -3.f, 1.f);
        fill(A, NH, 17, -4.5f, -0.5f);
        fill(D, NH, 18, -1.f, 1.f);
        fill(dt_bias, NH, 19, -1.f, 0.f);
    }
    void release() {
        for (void* p : {(void*)x, (void*)B, (void*)C, (void*)z, (void*)out, (void*)dt, (void*)A,
                        (void*)D, (void*)dt_bias})
            cudaFree(p);
    }
};

template <typename state_t>
fm::SelectiveStateUpdateParams make_params(const Operands& o, state_t* state) {
    fm::SelectiveStateUpdateParams p;
    p.batch = o.batch;
    p.nheads = NH;
    p.dim = DIM;
    p.dstate = DSTATE;
    p.ngroups = NG;
    p.state_cache_size = o.batch;
    p.pad_slot_id = -1;
    p.x_stride_batch = NH * DIM;
    p.dt_stride_batch = NH;
    p.B_stride_batch = NG * DSTATE;
    p.C_stride_batch = NG * DSTATE;
    p.out_stride_batch = NH * DIM;
    p.z_stride_batch = NH * DIM;
    p.state_stride_batch = (int64_t)NH * DIM * DSTATE;
    p.state = state;
    p.x = o.x;
    p.dt = o.dt;
    p.dt_bias = o.dt_bias;
    p.A = o.A;
    p.B = o.B;
    p.C = o.C;
    p.D = o.D;
    p.z = o.z;
    p.output = o.out;
    p.dt_softplus = true;
    p.update_state = true;
    return p;
}

template <typename T>
std::vector<T> download(const T* d, size_t n) {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// One call at batch 2 against a double-precision host computation. Returns the largest
// |gpu - ref| / (|ref| + 1e-2) over out and the new state (bf16 outputs: ~1e-2 expected).
template <typename state_t>
double check(fm::SSUAlgorithm algo) {
    const int b = 2;
    Operands o;
    o.alloc(b);
    const int64_t n = (int64_t)b * NH * DIM * DSTATE;
    state_t* st;
    CK(cudaMalloc(&st, sizeof(state_t) * n));
    fill(st, n, 21, -1.f, 1.f);
    CK(cudaDeviceSynchronize());
    const auto s0 = download(st, n);
    const auto x = download(o.x, (size_t)b * NH * DIM), z = download(o.z, (size_t)b * NH * DIM);
    const auto B = download(o.B, (size_t)b * NG * DSTATE), C = download(o.C, (size_t)b * NG * DSTATE);
    const auto dt = download(o.dt, (size_t)b * NH), A = download(o.A, NH), D = download(o.D, NH),
               bias = download(o.dt_bias, NH);
    auto p = make_params(o, st);
    fm::invokeSelectiveStateUpdate<input_t, weight_t, matrixA_t, state_t, stateIndex_t, void>(p, algo, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    const auto s1 = download(st, n);
    const auto out = download(o.out, (size_t)b * NH * DIM);
    double worst = 0.0;
    for (int bi = 0; bi < b; ++bi) {
        for (int h = 0; h < NH; ++h) {
            double d = (double)dt[bi * NH + h] + (double)bias[h];
            if (d <= 20.0) d = std::log1p(std::exp(d));
            const double dA = std::exp((double)A[h] * d);
            const int g = h / (NH / NG);
            for (int r = 0; r < DIM; ++r) {
                const int64_t row = ((int64_t)bi * NH + h) * DIM + r;
                const double xv = host_value(x[row]);
                double acc = 0.0;
                for (int k = 0; k < DSTATE; ++k) {
                    const double bv = host_value(B[(bi * NG + g) * DSTATE + k]);
                    const double cv = host_value(C[(bi * NG + g) * DSTATE + k]);
                    const double s = host_value(s0[row * DSTATE + k]) * dA + bv * d * xv;
                    acc += s * cv;
                    const double got = host_value(s1[row * DSTATE + k]);
                    worst = std::max(worst, std::fabs(got - s) / (std::fabs(s) + 1e-2));
                }
                acc += (double)D[h] * xv;
                const double zv = host_value(z[row]);
                acc *= zv / (1.0 + std::exp(-zv));
                const double got = host_value(out[row]);
                worst = std::max(worst, std::fabs(got - acc) / (std::fabs(acc) + 1e-2));
            }
        }
    }
    cudaFree(st);
    o.release();
    return worst;
}

struct Timing {
    double median_us, p10_us, p90_us;
};

template <typename state_t>
bool run_case(int batch, fm::SSUAlgorithm algo, const char* state_name, std::string& json, bool& first) {
    const int64_t per_slot = (int64_t)NH * DIM * DSTATE * sizeof(state_t);
    const int64_t win_bytes = per_slot * batch;
    const int windows = (int)std::max<int64_t>(2, ((int64_t)256 << 20) / win_bytes + (((int64_t)256 << 20) % win_bytes != 0));
    Operands o;
    o.alloc(batch);
    state_t* st;
    const int64_t n = (int64_t)windows * batch * NH * DIM * DSTATE;
    CK(cudaMalloc(&st, sizeof(state_t) * n));
    fill(st, n, 31, -0.5f, 0.5f);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<fm::SelectiveStateUpdateParams> ps;
    for (int w = 0; w < windows; ++w) ps.push_back(make_params(o, st + (int64_t)w * batch * NH * DIM * DSTATE));
    // Warm-up calls outside the graph (FlashInfer sets its kernels' shared-memory attribute here).
    for (int w = 0; w < std::min(windows, 3); ++w)
        fm::invokeSelectiveStateUpdate<input_t, weight_t, matrixA_t, state_t, stateIndex_t, void>(ps[w], algo, s);
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int w = 0; w < windows; ++w)
        fm::invokeSelectiveStateUpdate<input_t, weight_t, matrixA_t, state_t, stateIndex_t, void>(ps[w], algo, s);
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 5; ++i) CK(cudaGraphLaunch(ge, s));
    std::vector<double> t;
    for (int i = 0; i < 30; ++i) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms = 0.f;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(1000.0 * ms / windows);
    }
    std::sort(t.begin(), t.end());
    const Timing tm{t[t.size() / 2], t[t.size() / 10], t[(t.size() * 9) / 10]};
    // Bytes as duet's bench counts them: the state read and written.
    const double bytes = 2.0 * (double)win_bytes;
    char buf[1024];
    snprintf(buf, sizeof buf,
             "%s\n  {\"op\": \"selective_state_update\", \"impl\": \"flashinfer 0.7.4\", \"algorithm\": \"%s\", "
             "\"shape\": {\"batch\": %d, \"nheads\": %d, \"dim\": %d, \"dstate\": %d, \"ngroups\": %d, "
             "\"state\": \"%s\", \"small_operands\": \"bf16 x/B/C/z, f32 dt/A/D/dt_bias per head\", "
             "\"windows\": %d}, \"bytes\": %.0f, \"graph_per_call\": {\"median_us\": %.3f, "
             "\"p10_us\": %.3f, \"p90_us\": %.3f}, \"effective_tb_per_s\": %.4f}",
             first ? "" : ",", fm::SSUAlgorithmToString(algo), batch, NH, DIM, DSTATE, NG, state_name,
             windows, bytes, tm.median_us, tm.p10_us, tm.p90_us, bytes / (tm.median_us * 1e-6) / 1e12);
    json += buf;
    first = false;
    fprintf(stderr, "flashinfer %s state %s batch %d: %.3f us a call (graph of %d)\n",
            fm::SSUAlgorithmToString(algo), state_name, batch, tm.median_us, windows);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaStreamDestroy(s));
    cudaFree(st);
    o.release();
    return true;
}

int main(int argc, char** argv) {
    std::string out_path;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--out" && i + 1 < argc) {
            out_path = argv[++i];
        } else {
            fprintf(stderr, "flashinfer_ssu: unknown argument '%s'; usage: ssu_bench [--out FILE.json]\n", a.c_str());
            return 2;
        }
    }
    using fm::SSUAlgorithm;
    const SSUAlgorithm algos[] = {SSUAlgorithm::kAuto, SSUAlgorithm::kSimple, SSUAlgorithm::kVertical,
                                  SSUAlgorithm::kHorizontal};
    // The check first: every algorithm, both state types.
    int bad = 0;
    std::string checks;
    for (auto a : algos) {
        double eb = -1.0, ef = -1.0;
        try {
            eb = check<__nv_bfloat16>(a);
            ef = check<float>(a);
        } catch (const std::exception& e) {
            fprintf(stderr, "flashinfer %s check: refused: %s\n", fm::SSUAlgorithmToString(a), e.what());
            continue;  // an algorithm FlashInfer refuses at this shape is left out, not timed
        }
        fprintf(stderr, "flashinfer %s check: bf16 state worst rel %.3e, f32 state %.3e\n",
                fm::SSUAlgorithmToString(a), eb, ef);
        // bf16 out / state: ~2^-8 relative; f32 state with a bf16 out: the same.
        if (!(eb < 3e-2) || !(ef < 3e-2)) ++bad;
    }
    if (bad) {
        fprintf(stderr, "flashinfer_ssu: %d algorithm(s) disagree with the host computation; no timings\n", bad);
        return 1;
    }
    std::string json = "[";
    bool first = true;
    auto guarded = [&](auto fn, const char* what, int batch, SSUAlgorithm a) {
        try {
            fn();
        } catch (const std::exception& e) {
            fprintf(stderr, "flashinfer %s %s batch %d: refused: %s\n", fm::SSUAlgorithmToString(a), what,
                    batch, e.what());
            CK(cudaGetLastError());
        }
    };
    for (int batch : {1, 64, 256})
        for (auto a : algos)
            guarded([&] { run_case<__nv_bfloat16>(batch, a, "bfloat16", json, first); }, "bf16", batch, a);
    for (auto a : algos) guarded([&] { run_case<float>(256, a, "float32", json, first); }, "f32", 256, a);
    json += "\n]\n";
    if (out_path.empty()) {
        fputs(json.c_str(), stdout);
        return 0;
    }
    const std::string tmp = out_path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "w");
    if (!f || fputs(json.c_str(), f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "flashinfer_ssu: cannot write %s\n", tmp.c_str());
        return 2;
    }
    if (rename(tmp.c_str(), out_path.c_str()) != 0) {
        fprintf(stderr, "flashinfer_ssu: cannot rename %s to %s\n", tmp.c_str(), out_path.c_str());
        return 2;
    }
    return 0;
}
