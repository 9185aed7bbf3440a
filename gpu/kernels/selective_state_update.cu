// selective_state_update: one Mamba-2 decode step (SPEC.md "Selective state update").
// CPU spec: reference/src/ops/selective_state_update.rs.
//
// Versions:
//   v1  ssu_v1: one warp per (batch row, head, dim row d); lanes stride over dstate (coalesced:
//       consecutive lanes touch consecutive state elements), the new state s' stays in registers
//       (dstate <= 512), out = warp-shuffle reduction of s'*C. Small operands (x, dt, B, C, z, D,
//       dt_bias) are f32; the state cache is read and written in its own dtype (f32 / bf16 / f16 /
//       int16 with a per-row block scale); f16 supports stochastic rounding with the reference's
//       Philox mapping. 4 warps per block cover 4 consecutive d of one (b, h), so a block reuses
//       the same B/C row from L1.
//
// Measured on the H200 (Super shape nheads 128, dim 64, dstate 128, ngroups 8; state rotated
// over >= 256 MB; docs/measurements/h200_ssu_v1_v3_bench.jsonl, graph replay where batch <= 64),
// bf16 state, dt/D/dt_bias per head (Nemotron-H decode):
//   batch 1: v1 20.3 us, v3 10.0 us;  batch 64: v1 1020 us, v3 208 us;  batch 256: v1 4063 us,
//   v3 815 us (1.36 TB/s, 35% of the 3.9 TB/s copy). v2 (earlier run): 77 / 1616 / 6333 us.
// ncu on v1 at batch 256: 72 registers, no spills, DRAM 1085 MB moved (= the bytes counted),
// memory throughput 7%, SM 47%: v1 was bound by its per-lane double-precision prologue (every
// one of the 32 lanes of a row evaluated log1p(exp) and exp in double), not by memory. v3 moves
// the prologue to one thread per row and specialises per state format (no spills: checked in
// CI from ptxas' report, gpu/tests/nvrtc_compile.rs). v4 issues the state loads before the
// prologue, keeps 8 rows in flight per thread and uses streaming cache hints. It is bit-exact
// but slower than v3 on the H200 (19.5 / 297 / 1199 us at batch 1 / 64 / 256, per head;
// docs/measurements/h200_session2_presets.json): 96 registers halve the resident blocks, and
// the early loads do not make up for that. So auto stays on v3.
// Bit-exactness: s' = (s*dA) + ((B*dt)*x) uses __fmul_rn/__fadd_rn (no FMA contraction, the
// reference's operand order), and exp / softplus are evaluated in double and rounded once to
// f32, as the reference does: so the stored state (and its stochastic rounding) is bit-identical
// to the reference. `out` sums in another order than the reference's 8 partial sums: it is
// compared with the upstream fp32 tolerance.
//
// v5 (session 3, auto): v3 + B/C in registers, hardware bf16 rounding (NaN fixed up), FMA in
// `out`: 734.6 / 186.2 us at batch 256 / 64 bf16 per head (v3 817.7 / 209.6).
// v6 (session 3): v5 for A per head only, dA a row constant: 572.9 / 147.1 / 7.1 us at batch
// 256 / 64 / 1 bf16 (H200, session 4). v7 (session 4; auto from 4 x SMs tiles, A per head):
// the bulk-copy producer/consumer kernel at the end of this file.
//
// All offsets are 64-bit.

struct SsuParams {
    i64 batch, nheads, dim, dstate, ngroups, slots;
    i64 pad_slot_id;
    i64 dt_per_dim, a_full, d_per_dim, bias_per_dim;
    i64 has_d, has_z, has_bias, has_sbi;
    i64 softplus, pad_mode, out_from, state_dt;
    i64 sr, sr_mapping, rounds;
    u64 seed;
};

#define SSU_MAX_PER_LANE 16
// ST_* state formats and ssu_load_state: common.cuh (shared with ssu_multi_token.cu).


// Stores element `e` of the new state s1 in the cache's format (nothing for a pad row) and
// returns the value `out` is computed from: s1 itself, or the stored value (out_from = stored).
__device__ __forceinline__ float ssu_store_elem(const SsuParams& p, void* state, i64 e, float s1, bool pad,
                                                float encode, float decode) {
    float stv = s1;
    switch (p.state_dt) {
        case ST_F32:
            if (!pad) ((float*)state)[e] = s1;
            break;
        case ST_BF16: {
            const u16 q = f32_to_bf16(s1);
            if (!pad) ((u16*)state)[e] = q;
            stv = bf16_to_f32(q);
            break;
        }
        case ST_F16: {
            u16 q;
            if (p.sr && !pad) {
                u32 w;
                if (p.sr_mapping == 1) {
                    const u32x4 r = philox_seed_offset(p.seed, (u64)e >> 2, (int)p.rounds);
                    const u32 k = (u32)((u64)e & 3u);
                    w = k == 0 ? r.x : k == 1 ? r.y : k == 2 ? r.z : r.w;
                } else {
                    w = philox_seed_offset(p.seed, (u64)e, (int)p.rounds).x;
                }
                q = stochastic_round_f16(s1, w);
            } else {
                q = f32_to_f16(s1);
            }
            if (!pad) ((u16*)state)[e] = q;
            stv = f16_to_f32(q);
            break;
        }
        default: {
            const float qf = rintf(fminf(fmaxf(__fmul_rn(s1, encode), -32767.f), 32767.f));
            if (!pad) ((short*)state)[e] = (short)qf;
            stv = __fmul_rn(qf, decode);
            break;
        }
    }
    return p.out_from == 1 ? stv : s1;
}

// int16 block scale of a row from the lanes' partial amax (every lane gets the same values).
__device__ __forceinline__ void ssu_row_scale(const SsuParams& p, float amax, float* encode, float* decode) {
    *encode = 1.f;
    *decode = 1.f;
    if (p.state_dt == ST_I16) {
        amax = warp_max_f32(amax);
        *encode = amax == 0.f ? 1.f : __fdiv_rn(32767.f, amax);
        *decode = __fdiv_rn(1.f, *encode);
    }
}

// Lane 0 of the row's warp: the int16 scale, out = acc + D*x, gated by silu(z).
__device__ __forceinline__ void ssu_finish_row(const SsuParams& p, float acc, i64 row, i64 h, i64 d, float xv,
                                               bool pad, i64 srow_idx, float decode, const float* D,
                                               const float* z, float* state_scale, float* out) {
    if (p.state_dt == ST_I16 && !pad) state_scale[srow_idx] = decode;
    float o = acc;
    if (p.has_d) o += xv * (p.d_per_dim ? D[h * p.dim + d] : D[h]);
    if (p.has_z) {
        const float zv = z[row];
        o *= zv / (1.f + expf(-zv));
    }
    out[row] = o;
}

extern "C" __global__ void ssu_v1(SsuParams p, const float* __restrict__ x, const float* __restrict__ dt,
                                  const float* __restrict__ A, const float* __restrict__ B,
                                  const float* __restrict__ C, const float* __restrict__ D,
                                  const float* __restrict__ z, const float* __restrict__ dt_bias,
                                  const i64* __restrict__ sbi, void* __restrict__ state,
                                  float* __restrict__ state_scale, float* __restrict__ out) {
    DUET_PDL_ENTRY();
    const int lane = threadIdx.x & 31;
    const i64 wpb = blockDim.x >> 5;
    const i64 dtiles = (p.dim + wpb - 1) / wpb;
    const i64 bh = (i64)blockIdx.x / dtiles;
    const i64 d = ((i64)blockIdx.x % dtiles) * wpb + (threadIdx.x >> 5);
    if (d >= p.dim || bh >= p.batch * p.nheads) return;
    const i64 b = bh / p.nheads, h = bh % p.nheads;
    const i64 slot = p.has_sbi ? sbi[b] : b;
    const bool pad = p.has_sbi && slot == p.pad_slot_id;
    const i64 row = (b * p.nheads + h) * p.dim + d;
    if (pad && p.pad_mode == 0) {
        if (lane == 0) out[row] = 0.f;
        return;
    }
    float dtv = p.dt_per_dim ? dt[row] : dt[b * p.nheads + h];
    if (p.has_bias) dtv = __fadd_rn(dtv, p.bias_per_dim ? dt_bias[h * p.dim + d] : dt_bias[h]);
    if (p.softplus && dtv <= 20.f) dtv = (float)log1p(exp((double)dtv));
    const float xv = x[row];
    const i64 g = h / (p.nheads / p.ngroups);
    const float* Bg = B + (b * p.ngroups + g) * p.dstate;
    const float* Cg = C + (b * p.ngroups + g) * p.dstate;
    const i64 srow_idx = (slot * p.nheads + h) * p.dim + d;  // scale index (valid when !pad)
    const i64 srow = srow_idx * p.dstate;                    // element offset of column 0
    const float decode_in = (p.state_dt == ST_I16 && !pad) ? state_scale[srow_idx] : 1.f;
    const float a_head = p.a_full ? 0.f : A[h];
    const float dA_head = p.a_full ? 0.f : (float)exp((double)__fmul_rn(a_head, dtv));

    float sv[SSU_MAX_PER_LANE];
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < SSU_MAX_PER_LANE; ++i) {
        const i64 n = lane + 32 * (i64)i;
        if (n < p.dstate) {
            const float s = pad ? 0.f : ssu_load_state(state, srow + n, p.state_dt, decode_in);
            const float dA = p.a_full ? (float)exp((double)__fmul_rn(A[(h * p.dim + d) * p.dstate + n], dtv)) : dA_head;
            const float s1 = __fadd_rn(__fmul_rn(s, dA), __fmul_rn(__fmul_rn(Bg[n], dtv), xv));
            sv[i] = s1;
            amax = fmaxf(amax, fabsf(s1));
        }
    }
    float encode, decode;
    ssu_row_scale(p, amax, &encode, &decode);
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < SSU_MAX_PER_LANE; ++i) {
        const i64 n = lane + 32 * (i64)i;
        if (n < p.dstate) acc += ssu_store_elem(p, state, srow + n, sv[i], pad, encode, decode) * Cg[n];
    }
    acc = warp_sum_f32(acc);
    if (lane == 0) ssu_finish_row(p, acc, row, h, d, xv, pad, srow_idx, decode, D, z, state_scale, out);
}

// v2 ssu_v2: one block per (batch row, head) covering every d row. The per-row prologue (dt +
// dt_bias, softplus in f64, dA = exp(A*dt) for a per-head A, x) is computed once per row by one
// thread into shared memory instead of by all 32 lanes; the slot index is read once per block.
// Each warp then walks its rows 4 at a time, issuing the state loads of all 4 rows before any
// arithmetic (memory-level parallelism: 4 x dstate/32 independent loads in flight per lane).
// Same arithmetic and rounding as v1 (bit-identical state). Needs dstate <= 256, dim <= 2048.
#define SSU2_R 4
#define SSU2_EPL 8
#define SSU2_MAX_DIM 2048

extern "C" __global__ void ssu_v2(SsuParams p, const float* __restrict__ x, const float* __restrict__ dt,
                                  const float* __restrict__ A, const float* __restrict__ B,
                                  const float* __restrict__ C, const float* __restrict__ D,
                                  const float* __restrict__ z, const float* __restrict__ dt_bias,
                                  const i64* __restrict__ sbi, void* __restrict__ state,
                                  float* __restrict__ state_scale, float* __restrict__ out) {
    DUET_PDL_ENTRY();
    __shared__ float s_dt[SSU2_MAX_DIM];
    __shared__ float s_dA[SSU2_MAX_DIM];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    const i64 bh = blockIdx.x;
    if (bh >= p.batch * p.nheads) return;
    const i64 b = bh / p.nheads, h = bh % p.nheads;
    const i64 slot = p.has_sbi ? sbi[b] : b;
    const bool pad = p.has_sbi && slot == p.pad_slot_id;
    const i64 row0 = (b * p.nheads + h) * p.dim;
    if (pad && p.pad_mode == 0) {
        for (i64 d = threadIdx.x; d < p.dim; d += blockDim.x) out[row0 + d] = 0.f;
        return;
    }
    for (i64 d = threadIdx.x; d < p.dim; d += blockDim.x) {
        float dtv = p.dt_per_dim ? dt[row0 + d] : dt[b * p.nheads + h];
        if (p.has_bias) dtv = __fadd_rn(dtv, p.bias_per_dim ? dt_bias[h * p.dim + d] : dt_bias[h]);
        if (p.softplus && dtv <= 20.f) dtv = (float)log1p(exp((double)dtv));
        s_dt[d] = dtv;
        s_dA[d] = p.a_full ? 0.f : (float)exp((double)__fmul_rn(A[h], dtv));
    }
    __syncthreads();
    const i64 g = h / (p.nheads / p.ngroups);
    const float* Bg = B + (b * p.ngroups + g) * p.dstate;
    const float* Cg = C + (b * p.ngroups + g) * p.dstate;
    float bl[SSU2_EPL], cl[SSU2_EPL];
#pragma unroll
    for (int i = 0; i < SSU2_EPL; ++i) {
        const i64 n = lane + 32 * (i64)i;
        bl[i] = n < p.dstate ? Bg[n] : 0.f;
        cl[i] = n < p.dstate ? Cg[n] : 0.f;
    }
    for (i64 d0 = (i64)warp * SSU2_R; d0 < p.dim; d0 += (i64)nwarps * SSU2_R) {
        float sv[SSU2_R][SSU2_EPL];
        // Loads of all R rows first.
#pragma unroll
        for (int r = 0; r < SSU2_R; ++r) {
            const i64 d = d0 + r;
            const i64 srow = ((slot * p.nheads + h) * p.dim + d) * p.dstate;
            const float dec = (p.state_dt == ST_I16 && !pad && d < p.dim) ? state_scale[(slot * p.nheads + h) * p.dim + d] : 1.f;
#pragma unroll
            for (int i = 0; i < SSU2_EPL; ++i) {
                const i64 n = lane + 32 * (i64)i;
                sv[r][i] = (d < p.dim && n < p.dstate && !pad) ? ssu_load_state(state, srow + n, p.state_dt, dec) : 0.f;
            }
        }
#pragma unroll
        for (int r = 0; r < SSU2_R; ++r) {
            const i64 d = d0 + r;
            if (d >= p.dim) break;
            const i64 row = row0 + d;
            const float dtv = s_dt[d];
            const float xv = x[row];
            const i64 srow_idx = (slot * p.nheads + h) * p.dim + d;
            const i64 srow = srow_idx * p.dstate;
            float amax = 0.f;
#pragma unroll
            for (int i = 0; i < SSU2_EPL; ++i) {
                const i64 n = lane + 32 * (i64)i;
                if (n < p.dstate) {
                    const float dA = p.a_full ? (float)exp((double)__fmul_rn(A[(h * p.dim + d) * p.dstate + n], dtv)) : s_dA[d];
                    const float s1 = __fadd_rn(__fmul_rn(sv[r][i], dA), __fmul_rn(__fmul_rn(bl[i], dtv), xv));
                    sv[r][i] = s1;
                    amax = fmaxf(amax, fabsf(s1));
                }
            }
            float encode, decode;
            ssu_row_scale(p, amax, &encode, &decode);
            float acc = 0.f;
#pragma unroll
            for (int i = 0; i < SSU2_EPL; ++i) {
                const i64 n = lane + 32 * (i64)i;
                if (n < p.dstate) acc += ssu_store_elem(p, state, srow + n, sv[r][i], pad, encode, decode) * cl[i];
            }
            acc = warp_sum_f32(acc);
            if (lane == 0) ssu_finish_row(p, acc, row, h, d, xv, pad, srow_idx, decode, D, z, state_scale, out);
        }
    }
}

// v5 keeps the full-A exp out of line: v3 unrolls RPT rows x VEC elements, and inlining a
// double-precision exp per element made ssu_v3_bf16 ~5k SASS instructions (517 DFMA) of code
// the Super shape (A per head) never runs. Scalar arguments only: a struct passed by reference
// to an out-of-line function would put it on the stack.
__device__ __noinline__ float ssu3_exp_adt(float a, float dtv) { return (float)exp((double)__fmul_rn(a, dtv)); }

// v3 ssu_v3_<state>[_sr]: specialised at compile time per state format (f32 / bf16 / f16 /
// int16) and per rounding (nearest / stochastic), so no mode the launch does not use costs
// registers. Each thread owns VEC consecutive state elements of a row (one 16-byte load and one
// 16-byte store: 4 x f32 or 8 x 16-bit), TPR = dstate / VEC lanes (<= 32) cover a row, and a
// thread walks RPT rows of the same (batch row, head) with the loads of all RPT rows issued
// before any arithmetic (RPT x 16 bytes in flight per thread). A block = 128 threads = a tile of
// (128 / TPR) x RPT consecutive d rows; the per-row prologue (dt + dt_bias, softplus and
// exp(A*dt) in double, x) is computed once per row into shared memory, not once per lane.
// B and C (f32) of the thread's columns are read per element (L1 hits; v5 keeps them in
// registers). Same arithmetic and
// rounding per element as v1 (bit-identical state, same Philox counters); `out` sums in
// another order. Requires dstate % VEC == 0 and dstate / VEC a power of two <= 32 (f32 dstate <=
// 128, 16-bit dstate <= 256; the host checks: v3_ok in gpu/src/ops/selective_state_update.rs).
#define SSU3_THREADS 128
#define SSU3_MAXNV 1  // vectors per lane: 4 made ptxas keep 149 registers for dstate 128

template <int ST> struct Ssu3Elem;
template <> struct Ssu3Elem<ST_F32> { enum { VEC = 4 }; };
template <> struct Ssu3Elem<ST_BF16> { enum { VEC = 8 }; };
template <> struct Ssu3Elem<ST_F16> { enum { VEC = 8 }; };
template <> struct Ssu3Elem<ST_I16> { enum { VEC = 8 }; };

// f16 <-> f32 on the conversion hardware (session 25), eight values (one 16-byte vector) at a
// time: cvt.rn.f16x2.f32 / cvt.f32.f16 give the bits of common.cuh's f32_to_f16 / f16_to_f32
// (the reference's `half` semantics: IEEE round-to-nearest-even with subnormals, overflow to
// infinity) for every non-NaN input; a vector holding a NaN goes through the software forms
// (the hardware makes NaNs canonical, the reference keeps the payload), one test a vector as in
// ssu9_pack_bf16. gpu_ssu `f16_hardware_conversions_match_the_software_ones` checks both over
// every f32 and f16 input (ssu_f16_cvt_check). The software forms alone cost ~20 integer
// instructions and a branch an element: an f16 state ran at half of a bf16 state's speed.
__device__ __forceinline__ void ssu_f16x2_hw(u32 w, float& lo, float& hi) {
    asm("{\n\t.reg .f16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
        : "=f"(lo), "=f"(hi)
        : "r"(w));
}
// Whether any of the eight f16 of q is a NaN: a half's magnitude m is above 0x7c00 exactly when
// m + 0x3ff carries into bit 15 (no carry crosses into the other half).
__device__ __forceinline__ bool ssu_f16x8_any_nan(const uint4& q) {
    const u32 m = 0x7fff7fffu, c = 0x03ff03ffu;
    return ((((q.x & m) + c) | ((q.y & m) + c) | ((q.z & m) + c) | ((q.w & m) + c)) & 0x80008000u) != 0u;
}
__device__ __forceinline__ void ssu_f16x8_to_f32(const uint4& q, float* v) {
    const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) ssu_f16x2_hw(w[k], v[2 * k], v[2 * k + 1]);
    if (ssu_f16x8_any_nan(q)) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            v[2 * k] = f16_to_f32((u16)(w[k] & 0xffffu));
            v[2 * k + 1] = f16_to_f32((u16)(w[k] >> 16));
        }
    }
}
// Rounds v[0..8) to f16 (nearest even) into q and overwrites v with the stored values.
__device__ __forceinline__ void ssu_f16x8_rn(float* v, uint4& q) {
    u32 w[4];
    bool nan = false;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float lo = v[2 * k], hi = v[2 * k + 1];
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w[k]) : "f"(hi), "f"(lo));
        nan |= (lo != lo) | (hi != hi);
    }
    if (nan) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const u16 a = f32_to_f16(v[2 * k]), b = f32_to_f16(v[2 * k + 1]);
            w[k] = (u32)a | ((u32)b << 16);
            v[2 * k] = f16_to_f32(a);
            v[2 * k + 1] = f16_to_f32(b);
        }
    } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) ssu_f16x2_hw(w[k], v[2 * k], v[2 * k + 1]);
    }
    q = make_uint4(w[0], w[1], w[2], w[3]);
}
// common.cuh's philox_seed_offset with R rounds compiled in: every round's keys are then
// uniform constants of the seed and a round is two wide multiplies and two 3-input XORs.
template <int R>
__device__ __forceinline__ u32x4 ssu_philox_r(u64 seed, u64 offset) {
    u32x4 c;
    c.x = (u32)offset; c.y = (u32)(offset >> 32); c.z = 0u; c.w = 0u;
    const u32 k0 = (u32)seed, k1 = (u32)(seed >> 32);
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const u32 ka = k0 + (u32)i * 0x9E3779B9u, kb = k1 + (u32)i * 0xBB67AE85u;
        const u64 p0 = (u64)0xD2511F53u * c.x, p1 = (u64)0xCD9E8D57u * c.z;
        u32x4 n;
        n.x = (u32)(p1 >> 32) ^ c.y ^ ka;
        n.y = (u32)p1;
        n.z = (u32)(p0 >> 32) ^ c.w ^ kb;
        n.w = (u32)p0;
        c = n;
    }
    return c;
}
// common.cuh's stochastic_round_f16 with its NaN / infinity case as a select instead of an
// early return (no branch an element); the same bits for every input and random word.
__device__ __forceinline__ u16 ssu_sr_f16_sel(float x, u32 rnd) {
    const u32 bits = __float_as_uint(x);
    const u32 sign = (bits >> 16) & 0x8000u;
    const u32 mag = bits & 0x7fffffffu;
    const u32 y = mag + (rnd & 0x1fffu);
    const u32 e = y >> 23;
    const u32 h = e > 142u ? 0x7c00u : e < 113u ? 0u : (((e - 112u) << 10) | ((y & 0x7fffffu) >> 13));
    const u32 special = (mag & 0x7fffffu) ? 0x7e00u : 0x7c00u;
    return (u16)(sign | ((mag >> 23) == 0xffu ? special : h));
}

template <int ST>
__device__ __forceinline__ void ssu3_unpack(const uint4& q, float decode, float* v) {
    if (ST == ST_F16) {
        ssu_f16x8_to_f32(q, v);
        return;
    }
    if (ST == ST_F32) {
        v[0] = __uint_as_float(q.x); v[1] = __uint_as_float(q.y);
        v[2] = __uint_as_float(q.z); v[3] = __uint_as_float(q.w);
    } else {
        const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const u16 lo = (u16)(w[k] & 0xffffu), hi = (u16)(w[k] >> 16);
            if (ST == ST_BF16) {
                v[2 * k] = bf16_to_f32(lo); v[2 * k + 1] = bf16_to_f32(hi);
            } else {
                v[2 * k] = __fmul_rn((float)(short)lo, decode);
                v[2 * k + 1] = __fmul_rn((float)(short)hi, decode);
            }
        }
    }
}

// Rounds the VEC values of one vector (element index e0 of its first element) into the cache's
// format: packs them into `q` and overwrites v[] with the stored values. Same rounding as v1's
// ssu_store_elem, so the two kernels store identical bits.
// Two f32 -> packed bf16x2 with the hardware's round-to-nearest-even (one instruction), NaNs
// fixed up to the reference's rule (quiet, payload and sign kept; the hardware returns a
// canonical NaN).
__device__ __forceinline__ u32 ssu_bf16x2_rn(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    if (lo != lo || hi != hi) r = (u32)f32_to_bf16(lo) | ((u32)f32_to_bf16(hi) << 16);
    return r;
}

template <int ST, bool SR, bool FAST = false>
__device__ __forceinline__ void ssu3_pack(const SsuParams& p, float* v, i64 e0, bool pad, float encode, float decode,
                                          uint4& q) {
    if (ST == ST_BF16 && FAST) {
        u32 w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            w[k] = ssu_bf16x2_rn(v[2 * k], v[2 * k + 1]);
            v[2 * k] = __uint_as_float(w[k] << 16);
            v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
        q = make_uint4(w[0], w[1], w[2], w[3]);
        return;
    }
    if (ST == ST_F16 && FAST && (!SR || pad)) {  // pad rows round to nearest, as v1
        ssu_f16x8_rn(v, q);
        return;
    }
    if (ST == ST_F32) {
        q.x = __float_as_uint(v[0]); q.y = __float_as_uint(v[1]);
        q.z = __float_as_uint(v[2]); q.w = __float_as_uint(v[3]);
        return;
    }
    u16 h[8];
    if (ST == ST_BF16) {
#pragma unroll
        for (int k = 0; k < 8; ++k) { h[k] = f32_to_bf16(v[k]); v[k] = bf16_to_f32(h[k]); }
    } else if (ST == ST_F16) {
        if (SR && !pad) {  // pad rows store nothing: nearest, as v1
            if (p.sr_mapping == 1) {
#pragma unroll
                for (int k4 = 0; k4 < 2; ++k4) {
                    const u64 o4 = (u64)(e0 + 4 * k4) >> 2;
                    const u32x4 r = !FAST          ? philox_seed_offset(p.seed, o4, (int)p.rounds)
                                    : p.rounds == 10 ? ssu_philox_r<10>(p.seed, o4)
                                    : p.rounds == 5  ? ssu_philox_r<5>(p.seed, o4)
                                                     : philox_seed_offset(p.seed, o4, (int)p.rounds);
                    const u32 w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
                    for (int k = 0; k < 4; ++k)
                        h[4 * k4 + k] = FAST ? ssu_sr_f16_sel(v[4 * k4 + k], w[k])
                                             : stochastic_round_f16(v[4 * k4 + k], w[k]);
                }
            } else {
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                    const u32 w = philox_seed_offset(p.seed, (u64)(e0 + k), (int)p.rounds).x;
                    h[k] = FAST ? ssu_sr_f16_sel(v[k], w) : stochastic_round_f16(v[k], w);
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < 8; ++k) h[k] = f32_to_f16(v[k]);
        }
        if (FAST) {  // the stored values back on the conversion hardware (same bits)
            const uint4 hq = make_uint4((u32)h[0] | ((u32)h[1] << 16), (u32)h[2] | ((u32)h[3] << 16),
                                        (u32)h[4] | ((u32)h[5] << 16), (u32)h[6] | ((u32)h[7] << 16));
            ssu_f16x8_to_f32(hq, v);
        } else {
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = f16_to_f32(h[k]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float qf = rintf(fminf(fmaxf(__fmul_rn(v[k], encode), -32767.f), 32767.f));
            h[k] = (u16)(short)qf;
            v[k] = __fmul_rn(qf, decode);
        }
    }
    q.x = (u32)h[0] | ((u32)h[1] << 16);
    q.y = (u32)h[2] | ((u32)h[3] << 16);
    q.z = (u32)h[4] | ((u32)h[5] << 16);
    q.w = (u32)h[6] | ((u32)h[7] << 16);
}

// int16 block scale of a row whose `width` lanes (a power of two, aligned within the warp) hold
// partial amaxes: encode = 32767 / amax (1 for an all-zero row), decode = 1 / encode.
__device__ __forceinline__ void ssu_i16_scale(float amax, int width, float* encode, float* decode) {
    for (int o = width / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(DUET_FULL_MASK, amax, o, width));
    *encode = amax == 0.f ? 1.f : __fdiv_rn(32767.f, amax);
    *decode = __fdiv_rn(1.f, *encode);
}

// The state loads of a thread: RPT rows x nv 16-byte vectors (rows past dim and pad rows: zeros).
template <int ST, int RPT, bool STREAM>
__device__ __forceinline__ void ssu3_load(const SsuParams& p, const void* __restrict__ state,
                                          const float* __restrict__ state_scale, i64 slot, i64 h, i64 d0, int grp,
                                          int groups, int lane, int tpr, int nv, bool pad,
                                          uint4 (&q)[RPT][SSU3_MAXNV], float (&dec_in)[RPT]) {
    constexpr int VEC = Ssu3Elem<ST>::VEC;
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        const i64 d = d0 + (i64)grp + (i64)groups * r;
        const bool live = d < p.dim && !pad;
        const i64 srow_idx = (slot * p.nheads + h) * p.dim + d;
        dec_in[r] = (ST == ST_I16 && live) ? state_scale[srow_idx] : 1.f;
#pragma unroll
        for (int j = 0; j < SSU3_MAXNV; ++j) {
            q[r][j] = make_uint4(0u, 0u, 0u, 0u);
            if (j < nv && live) {
                const i64 n = ((i64)j * tpr + lane) * VEC;
                const uint4* src = (const uint4*)((const char*)state + (srow_idx * p.dstate + n) * (i64)(16 / VEC));
                q[r][j] = STREAM ? __ldcs(src) : *src;
            }
        }
    }
}

// FAST (v5): B and C of the thread's columns held in registers, hardware bf16 rounding, FMA in
// `out`, the full-A exp out of line. PERHEAD (v6): A is one value per head (the host refuses a
// full A), so dA is a row constant read once per row instead of a per-element branch on
// p.a_full around an LDS (SASS of v5: BSSY / two ISETP / BRA / LDS / BSYNC per element).
// Lane 0 of the row: ssu_finish_row with z and D already in registers (ZPRE: loaded at the
// kernel's start, so their latency overlaps the state loads instead of following the
// reduction). Same arithmetic, same bits.
__device__ __forceinline__ void ssu_finish_row_pre(const SsuParams& p, float acc, i64 row, float xv, bool pad,
                                                   i64 srow_idx, float decode, float dv, float zv,
                                                   float* state_scale, float* out) {
    if (p.state_dt == ST_I16 && !pad) state_scale[srow_idx] = decode;
    float o = acc;
    if (p.has_d) o += xv * dv;
    if (p.has_z) o *= zv / (1.f + expf(-zv));
    out[row] = o;
}

template <int ST, bool SR, int RPT, bool EARLY, bool STREAM, bool FAST = false, bool PERHEAD = false,
          bool ZPRE = false>
__device__ __forceinline__ void ssu_v3_body(const SsuParams& p, const float* __restrict__ x,
                                            const float* __restrict__ dt, const float* __restrict__ A,
                                            const float* __restrict__ B, const float* __restrict__ C,
                                            const float* __restrict__ D, const float* __restrict__ z,
                                            const float* __restrict__ dt_bias, const i64* __restrict__ sbi,
                                            void* __restrict__ state, float* __restrict__ state_scale,
                                            float* __restrict__ out) {
    constexpr int VEC = Ssu3Elem<ST>::VEC;
    __shared__ float s_dt[SSU3_THREADS * RPT];
    __shared__ float s_dA[SSU3_THREADS * RPT];
    __shared__ float s_x[SSU3_THREADS * RPT];
    const i64 nvec = p.dstate / VEC;                       // vectors per row
    const int tpr = nvec < 32 ? (int)nvec : 32;             // lanes per row
    const int nv = (int)(nvec / tpr);                       // vectors per lane (<= SSU3_MAXNV)
    const int groups = SSU3_THREADS / tpr;                  // row groups per block
    const i64 rows_blk = (i64)groups * RPT;            // d rows per block
    const i64 dtiles = (p.dim + rows_blk - 1) / rows_blk;
    const i64 bh = (i64)blockIdx.x / dtiles;
    const i64 d0 = ((i64)blockIdx.x % dtiles) * rows_blk;
    if (bh >= p.batch * p.nheads) return;
    const i64 b = bh / p.nheads, h = bh % p.nheads;
    const i64 slot = p.has_sbi ? sbi[b] : b;
    const bool pad = p.has_sbi && slot == p.pad_slot_id;
    const i64 row0 = (b * p.nheads + h) * p.dim;
    if (pad && p.pad_mode == 0) {
        for (i64 r = threadIdx.x; r < rows_blk && d0 + r < p.dim; r += blockDim.x) out[row0 + d0 + r] = 0.f;
        return;
    }
    // v4 (EARLY): the state loads go out before the prologue, so the prologue's double-precision
    // latency overlaps the memory latency instead of adding to it.
    const int lane = threadIdx.x % tpr;   // lane within the row
    const int grp = threadIdx.x / tpr;    // row group
    const i64 g = h / (p.nheads / p.ngroups);
    const float* Bg = B + (b * p.ngroups + g) * p.dstate;
    const float* Cg = C + (b * p.ngroups + g) * p.dstate;
    const int row_mask_width = tpr;       // shuffles stay inside the row's lanes

    uint4 q[RPT][SSU3_MAXNV];
    float dec_in[RPT];
    // The thread's B and C columns, once (16-byte loads; dstate % VEC == 0 and the row base is
    // a multiple of dstate floats, so they are 16-byte aligned): every row of the tile reuses them.
    float bv[SSU3_MAXNV][VEC], cv[SSU3_MAXNV][VEC];
#pragma unroll
    for (int j = 0; j < (FAST ? SSU3_MAXNV : 0); ++j) {
#pragma unroll
        for (int k4 = 0; k4 < VEC; k4 += 4) {
            float4 b4 = make_float4(0.f, 0.f, 0.f, 0.f), c4 = b4;
            if (j < nv) {
                const i64 n = ((i64)j * tpr + lane) * VEC + k4;
                b4 = *(const float4*)(Bg + n);
                c4 = *(const float4*)(Cg + n);
            }
            bv[j][k4] = b4.x; bv[j][k4 + 1] = b4.y; bv[j][k4 + 2] = b4.z; bv[j][k4 + 3] = b4.w;
            cv[j][k4] = c4.x; cv[j][k4 + 1] = c4.y; cv[j][k4 + 2] = c4.z; cv[j][k4 + 3] = c4.w;
        }
    }
    if (EARLY) ssu3_load<ST, RPT, STREAM>(p, state, state_scale, slot, h, d0, grp, groups, lane, tpr, nv, pad, q, dec_in);
    // ZPRE (v10): the row's z and D go out with the state loads (lane 0 of the row uses them).
    float zpre[RPT], dpre[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        const i64 d = d0 + (i64)grp + (i64)groups * r;
        const bool use = ZPRE && lane == 0 && d < p.dim;
        zpre[r] = use && p.has_z ? z[row0 + d] : 0.f;
        dpre[r] = use && p.has_d ? (p.d_per_dim ? D[h * p.dim + d] : D[h]) : 0.f;
    }
    for (i64 r = threadIdx.x; r < rows_blk; r += blockDim.x) {
        const i64 d = d0 + r;
        if (d >= p.dim) break;
        float dtv = p.dt_per_dim ? dt[row0 + d] : dt[b * p.nheads + h];
        if (p.has_bias) dtv = __fadd_rn(dtv, p.bias_per_dim ? dt_bias[h * p.dim + d] : dt_bias[h]);
        if (p.softplus && dtv <= 20.f) dtv = (float)log1p(exp((double)dtv));
        s_dt[r] = dtv;
        s_dA[r] = p.a_full ? 0.f : (float)exp((double)__fmul_rn(A[h], dtv));
        s_x[r] = x[row0 + d];
    }
    __syncthreads();
    if (!EARLY) ssu3_load<ST, RPT, STREAM>(p, state, state_scale, slot, h, d0, grp, groups, lane, tpr, nv, pad, q, dec_in);
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        const i64 rr = (i64)grp + (i64)groups * r;
        const i64 d = d0 + rr;
        // Rows past dim still run the arithmetic (on zeros) so every lane of a warp reaches the
        // row shuffles; they read and write nothing.
        const bool valid = d < p.dim;
        const float dtv = valid ? s_dt[rr] : 0.f, xv = valid ? s_x[rr] : 0.f;
        const i64 srow_idx = (slot * p.nheads + h) * p.dim + d;
        float v[SSU3_MAXNV][VEC];
        float amax = 0.f;
        const float dA_row = valid ? s_dA[rr] : 0.f;  // PERHEAD
#pragma unroll
        for (int j = 0; j < SSU3_MAXNV; ++j) {
            if (j < nv) {
                const i64 n = ((i64)j * tpr + lane) * VEC;
                ssu3_unpack<ST>(q[r][j], dec_in[r], v[j]);
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float dA = PERHEAD ? dA_row
                                     : !valid ? 0.f
                                     : p.a_full ? (FAST ? ssu3_exp_adt(A[(h * p.dim + d) * p.dstate + n + k], dtv)
                                                     : (float)exp((double)__fmul_rn(A[(h * p.dim + d) * p.dstate + n + k], dtv)))
                                                : s_dA[rr];
                    const float bk = FAST ? bv[j][k] : Bg[n + k];
                    const float s1 = __fadd_rn(__fmul_rn(v[j][k], dA), __fmul_rn(__fmul_rn(bk, dtv), xv));
                    v[j][k] = s1;
                    amax = fmaxf(amax, fabsf(s1));
                }
            }
        }
        float encode = 1.f, decode = 1.f;
        if (ST == ST_I16) ssu_i16_scale(amax, row_mask_width, &encode, &decode);
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < SSU3_MAXNV; ++j) {
            if (j < nv) {
                const i64 n = ((i64)j * tpr + lane) * VEC;
                const i64 e0 = srow_idx * p.dstate + n;
                float s1[VEC];
#pragma unroll
                for (int k = 0; k < VEC; ++k) s1[k] = v[j][k];
                uint4 qo;
                ssu3_pack<ST, SR, FAST>(p, v[j], e0, pad, encode, decode, qo);
                if (!pad && valid) {
                    uint4* dst = (uint4*)((char*)state + e0 * (i64)(16 / VEC));
                    if (STREAM) __stcs(dst, qo); else *dst = qo;
                }
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float sv = p.out_from == 1 ? v[j][k] : s1[k];
                    acc = FAST ? __fmaf_rn(sv, cv[j][k], acc) : acc + sv * Cg[n + k];
                }
            }
        }
        for (int o = row_mask_width / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(DUET_FULL_MASK, acc, o, row_mask_width);
        if (lane == 0 && valid) {
            if (ZPRE)
                ssu_finish_row_pre(p, acc, row0 + d, xv, pad, srow_idx, decode, dpre[r], zpre[r], state_scale, out);
            else
                ssu_finish_row(p, acc, row0 + d, h, d, xv, pad, srow_idx, decode, D, z, state_scale, out);
        }
    }
}

#define SSU3_ENTRY(NAME, ST, SR, RPT, EARLY, STREAM) SSU3_ENTRY_X(NAME, ST, SR, RPT, EARLY, STREAM, false, 4)
#define SSU3_ENTRY_X(NAME, ST, SR, RPT, EARLY, STREAM, FAST, MINB) \
    SSU3_ENTRY_Y(NAME, ST, SR, RPT, EARLY, STREAM, FAST, MINB, false)
#define SSU3_ENTRY_Y(NAME, ST, SR, RPT, EARLY, STREAM, FAST, MINB, PERHEAD) \
    SSU3_ENTRY_Z(NAME, ST, SR, RPT, EARLY, STREAM, FAST, MINB, PERHEAD, false)
#define SSU3_ENTRY_Z(NAME, ST, SR, RPT, EARLY, STREAM, FAST, MINB, PERHEAD, ZPRE)                            \
    extern "C" __global__ void __launch_bounds__(SSU3_THREADS, MINB) NAME(                                     \
        SsuParams p, const float* __restrict__ x, const float* __restrict__ dt, const float* __restrict__ A, \
        const float* __restrict__ B, const float* __restrict__ C, const float* __restrict__ D,              \
        const float* __restrict__ z, const float* __restrict__ dt_bias, const i64* __restrict__ sbi,        \
        void* __restrict__ state, float* __restrict__ state_scale, float* __restrict__ out) {               \
        DUET_PDL_ENTRY();                                                                                   \
        ssu_v3_body<ST, SR, RPT, EARLY, STREAM, FAST, PERHEAD, ZPRE>(p, x, dt, A, B, C, D, z, dt_bias, sbi,     \
                                                                       state, state_scale, out);               \
    }
SSU3_ENTRY(ssu_v3_f32, ST_F32, false, 4, false, false)
SSU3_ENTRY(ssu_v3_bf16, ST_BF16, false, 4, false, false)
SSU3_ENTRY(ssu_v3_f16, ST_F16, false, 4, false, false)
SSU3_ENTRY(ssu_v3_f16_sr, ST_F16, true, 4, false, false)
SSU3_ENTRY(ssu_v3_i16, ST_I16, false, 4, false, false)
// v4: v3 with the state loads issued before the prologue (EARLY), 8 rows per thread for the
// 16-bit formats (8 x 16 bytes in flight per thread) and streaming cache hints (ld.global.cs /
// st.global.cs: the state is touched once per step). Same arithmetic, bit-identical state.
SSU3_ENTRY(ssu_v4_f32, ST_F32, false, 4, true, true)
SSU3_ENTRY(ssu_v4_bf16, ST_BF16, false, 8, true, true)
SSU3_ENTRY(ssu_v4_f16, ST_F16, false, 8, true, true)
SSU3_ENTRY(ssu_v4_f16_sr, ST_F16, true, 8, true, true)
SSU3_ENTRY(ssu_v4_i16, ST_I16, false, 8, true, true)

// Sweep variants for `duet bench --shape ssu_sweep_b256_bf16` (bf16 state, nearest rounding):
// ssu_x_bf16_r{RPT}_e{EARLY}_s{STREAM} separate the three changes v4 made at once (rows per
// thread, loads before the prologue, streaming cache hints). Same body as v3 / v4, so the
// stored state is bit-identical; the sweep checks that on the device before timing.
#define SSU3_SWEEP(RPT, E, S) SSU3_ENTRY(ssu_x_bf16_r##RPT##_e##E##_s##S, ST_BF16, false, RPT, E, S)
SSU3_SWEEP(2, 0, 0) SSU3_SWEEP(2, 1, 0) SSU3_SWEEP(2, 0, 1) SSU3_SWEEP(2, 1, 1)
SSU3_SWEEP(4, 0, 0) SSU3_SWEEP(4, 1, 0) SSU3_SWEEP(4, 0, 1) SSU3_SWEEP(4, 1, 1)
SSU3_SWEEP(8, 0, 0) SSU3_SWEEP(8, 1, 0) SSU3_SWEEP(8, 0, 1) SSU3_SWEEP(8, 1, 1)

// v5: v3 with cheaper per-element work: bf16 states rounded by the hardware's packed
// cvt.rn.bf16x2.f32 (NaNs fixed up to the reference's rule, so the state stays bit-identical),
// `out` accumulated with fused multiply-adds (out is compared with the fp32 tolerance, as for
// every version), and 6 resident blocks per SM asked of ptxas (<= 80 registers; 4 for int16 and
// stochastic f16, which spilled at 80).
SSU3_ENTRY_X(ssu_v5_f32, ST_F32, false, 4, false, false, true, 6)
SSU3_ENTRY_X(ssu_v5_bf16, ST_BF16, false, 4, false, false, true, 6)
SSU3_ENTRY_X(ssu_v5_f16, ST_F16, false, 4, false, false, true, 6)
SSU3_ENTRY_X(ssu_v5_f16_sr, ST_F16, true, 4, false, false, true, 4)
SSU3_ENTRY_X(ssu_v5_i16, ST_I16, false, 4, false, false, true, 4)
// Sweep variants of v5 (bf16, nearest): ssu_x_bf16_r{RPT}_f1_m{MINB}: rows per thread x the
// resident blocks asked of ptxas (4: <= 128 registers, 6: <= 80, 7: <= 72, 8: <= 64).
#define SSU5_SWEEP(RPT, MB) SSU3_ENTRY_X(ssu_x_bf16_r##RPT##_f1_m##MB, ST_BF16, false, RPT, false, false, true, MB)
SSU5_SWEEP(4, 4) SSU5_SWEEP(2, 6) SSU5_SWEEP(8, 4) SSU5_SWEEP(2, 4)

// v6: v5 for A per head only (PERHEAD: dA read once per row, no per-element branch). Built in
// session 3 after the device time ran out: not yet run on the H200.
SSU3_ENTRY_Y(ssu_v6_f32, ST_F32, false, 4, false, false, true, 6, true)
SSU3_ENTRY_Y(ssu_v6_bf16, ST_BF16, false, 4, false, false, true, 6, true)
SSU3_ENTRY_Y(ssu_v6_f16, ST_F16, false, 4, false, false, true, 6, true)
SSU3_ENTRY_Y(ssu_v6_f16_sr, ST_F16, true, 4, false, false, true, 4, true)
SSU3_ENTRY_Y(ssu_v6_i16, ST_I16, false, 4, false, false, true, 4, true)

// Small-batch sweep (session 12; bf16, nearest, A per head): v6's body with fewer rows a block
// (r1: 8 rows, 8 blocks a head; r2: 16), the state loads before the prologue (e1) and z / D
// loaded with them (z). At batch 1 the Super shape has only 128 (batch row, head) tiles: the
// time is one chain of dependent latencies (B / C and dt loads, the f64 prologue, the barrier,
// the state load, the reduction, the z / D loads, the store), not bandwidth (4 MB moved).
SSU3_ENTRY_Z(ssu_x_bf16_r1_h_e0_m8, ST_BF16, false, 1, false, false, true, 8, true, false)
SSU3_ENTRY_Z(ssu_x_bf16_r1_h_e1_m7, ST_BF16, false, 1, true, false, true, 7, true, false)
SSU3_ENTRY_Z(ssu_x_bf16_r1_h_e1_z_m7, ST_BF16, false, 1, true, false, true, 7, true, true)
SSU3_ENTRY_Z(ssu_x_bf16_r2_h_e1_z_m6, ST_BF16, false, 2, true, false, true, 6, true, true)
SSU3_ENTRY_Z(ssu_x_bf16_r4_h_e1_z_m5, ST_BF16, false, 4, true, false, true, 5, true, true)
SSU3_ENTRY_Z(ssu_x_bf16_r4_h_e0_z_m6, ST_BF16, false, 4, false, false, true, 6, true, true)
// Session 12 call 2 (ssu_sweep_all_b1_bf16, graph replay, Super shape, batch 1): r2_h_e1_z_m6
// 5.48 us, r1_h_e0_m8 5.53, r4_h_e1_z_m5 6.37, v9 6.75, r4_h_e0_z_m6 6.80, v6 7.01,
// r1_h_e1_z_m7 7.30, r1_h_e1_m7 7.62: the r1 forms at 7 blocks an SM need two waves for their
// 1024 blocks (7 x 132 = 924), r2's 512 blocks fit in one at 6 an SM.
// v10 (session 12): the small-batch form for every state format: r2_h_e1_z_m6's body (16 rows
// a block for the 16-bit states, 8 for f32; state / z / D loads before the prologue; A per
// head), with the resident blocks that keep batch 1's blocks in one wave (f32: 8 an SM for its
// 1024 blocks).
SSU3_ENTRY_Z(ssu_v10_f32, ST_F32, false, 2, true, false, true, 8, true, true)
SSU3_ENTRY_Z(ssu_v10_bf16, ST_BF16, false, 2, true, false, true, 6, true, true)
SSU3_ENTRY_Z(ssu_v10_f16, ST_F16, false, 2, true, false, true, 6, true, true)
SSU3_ENTRY_Z(ssu_v10_f16_sr, ST_F16, true, 2, true, false, true, 6, true, true)
SSU3_ENTRY_Z(ssu_v10_i16, ST_I16, false, 2, true, false, true, 6, true, true)

// ---------------------------------------------------------------------------------------------
// v7 ssu_v7_<state>[_sr] (session 4): persistent producer/consumer over the Hopper bulk-copy
// engine (the seed's TMA state-update design). ncu on v5 at batch 256 bf16 showed why the
// earlier versions stop at 39-50% of the copy ceiling: memory 29%, SM 57%, occupancy 37%:
// each block loads its state, waits, computes and stores, so a block's bytes in flight are
// bounded by its registers and every block pays the full memory latency before any work.
// v7 decouples the two:
//   - a tile is one (batch row, head): dim x dstate state elements, contiguous in the cache
//     (one bulk copy; with state_batch_indices the tile of slot sbi[b]), plus the group's B and
//     C rows (two more bulk copies, f32);
//   - one producer warp per block walks the block's tiles (tile = blockIdx.x + i * gridDim.x),
//     waits for a free stage (mbarrier `empty`), posts the byte count on the stage's `full`
//     mbarrier (expect_tx), issues `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx`
//     for the state tile and B / C, then its 32 lanes compute the per-row prologue (dt + dt_bias,
//     softplus and exp(A*dt) in double as v3, x, z, D, the int16 decode scale) into the stage and
//     arrive on `full`;
//   - CW (4; 2 and 8 in the sweep) consumer warps wait on `full`, update the state from shared memory
//     (16-byte vectors, the same per-element arithmetic and rounding as v3 / v6, so the stored
//     state is bit-identical), store the new state straight to global memory with 16-byte
//     stores (fire and forget: the write-back overlaps the next tile's loads), reduce `out`, and
//     release the stage (one arrive per warp on `empty`).
// A `stages`-deep ring per block (default 2); the host launches min(tiles, SMs x resident
// blocks) persistent blocks, resident blocks from the driver's occupancy for the registers and
// the ring. Measured on the H200 (session 4, Super shape, A / dt / D / dt_bias per head, state
// rotated over >= 256 MB; docs/measurements/h200_session4_call3_presets.json):
//   bf16 batch 256: v7 (2 stages) 369.1 us = 3.01 TB/s effective, 76.7% of copy (v6 572.9,
//   v5 732.4); batch 64: 95.2 us graph (v6 147.1); batch 1: 8.0 us (v6 7.1, so auto keeps v6
//   below 4 x SMs tiles); f32 batch 256: 673.1 us, 82.9% of copy (v6 859.3).
//   Ring depth: 1 / 2 / 3 stages 503.0 / 369.1 / 387.3 us; 5 (the first default, ~96 KiB per
//   block) 596.4 and 8 1084.0 in call 2: deeper rings mean fewer resident blocks, and ncu on
//   the 5-stage build showed 15% occupancy, memory 38%, SM 44%. Consumer warps: 2 / 4 / 8 at
//   their best depth 475.5 / 369.1 / 398.7 us. Needs A per head (as v6), v3's vector layout
// (v3_ok), dim <= 1024 and a stage that fits in shared memory (ssu7_plan in
// gpu/src/ops/selective_state_update.rs). 64-bit offsets throughout; the bulk copies need
// 16-byte aligned addresses and sizes (dstate * element size and dstate * 4 are multiples of
// 16 under v3_ok; cudarc's allocations are 256-byte aligned).

// Byte offsets inside one stage (the host's ssu7_plan computes the same): state tile, B, C
// (f32, dstate each), then per row dt, dA, x, z, D, decode (f32, dim each), then the tile's slot.
struct Ssu7Layout {
    i64 tile, b, c, rows, slot, stage;
};
__device__ __forceinline__ Ssu7Layout ssu7_layout(const SsuParams& p, int esize) {
    Ssu7Layout l;
    l.tile = 0;
    l.b = p.dim * p.dstate * esize;
    l.c = l.b + 4 * p.dstate;
    l.rows = l.c + 4 * p.dstate;
    l.slot = (l.rows + 6 * 4 * p.dim + 15) / 16 * 16;
    l.stage = l.slot + 16;
    return l;
}

// v9 (session 9; first run in session 10, auto for a bf16 state since session 24): v8 with
// the consumers' per-tile loop specialised for TPR lanes per row known at compile time (dstate = 128: 16 lanes of 8 values for the
// 16-bit states, 32 of 4 for f32; the host runs v9 only there): the row's shuffle reduction
// unrolled, the lane / row split by shifts, the state addresses advanced per pass instead of
// recomputed from 64-bit products, B * dt per column computed once per tile when dt is per
// head (v8 recomputed it per element; the producer writes the head's dt into every row, so the
// product is the same), and `out_from` resolved per tile. The same operations on every state
// element and the same reduction order as v8: bit-identical state and out. ncu on v8 (session
// 5) counted ~29 thread instructions per state element; offline SASS of v8's consumer pass:
// 266 instructions for 8 bf16 elements, 43 of them floating point.
// v9's bf16 rounding: ssu3_pack's FAST bf16 path (hardware cvt.rn.bf16x2, NaNs fixed up to
// the reference's rule) with one NaN test for the vector's eight values instead of one
// branch per pair (v8's SASS: FSETP, BSSY, BRA, BSYNC per pair); the same stored bits.
__device__ __forceinline__ void ssu9_pack_bf16(float* v, uint4& q) {
    u32 w[4];
    bool nan = false;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float lo = v[2 * k], hi = v[2 * k + 1];
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[k]) : "f"(hi), "f"(lo));
        nan |= (lo != lo) | (hi != hi);
    }
    if (nan) {
#pragma unroll
        for (int k = 0; k < 4; ++k)
            w[k] = ssu_bf16x2_rn(v[2 * k], v[2 * k + 1]);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
    q = make_uint4(w[0], w[1], w[2], w[3]);
}

template <int ST, bool SR, int TPR, bool HOIST, bool OUTV, int UNR>
__device__ __forceinline__ void ssu9_passes(const SsuParams& p, const unsigned char* __restrict__ tile_sm,
                                            unsigned char* __restrict__ tile_gm, const float* __restrict__ rows,
                                            const float* bv, const float* cv, float* __restrict__ out,
                                            float* __restrict__ state_scale, i64 row0, i64 srow0, int lane,
                                            int grp, int groups, bool pad) {
    constexpr int VEC = Ssu3Elem<ST>::VEC;
    constexpr int ESZ = 16 / VEC;
    const i64 rstride = p.dstate * ESZ;
    float bdt[VEC];
    if (HOIST) {
        const float dt0 = rows[0];
#pragma unroll
        for (int k = 0; k < VEC; ++k) bdt[k] = __fmul_rn(bv[k], dt0);
    }
    const i64 passes = (p.dim + groups - 1) / groups;
#pragma unroll UNR
    for (i64 pass = 0; pass < passes; ++pass) {
        const i64 d = (i64)grp + (i64)groups * pass;
        const bool valid = d < p.dim;
        const i64 dd = valid ? d : 0;
        const float dA = rows[p.dim + dd], xv = rows[2 * p.dim + dd];
        const float dec_in = rows[5 * p.dim + dd];
        uint4 q = make_uint4(0u, 0u, 0u, 0u);
        if (valid && !pad) q = *(const uint4*)(tile_sm + dd * rstride);
        float v[VEC];
        ssu3_unpack<ST>(q, dec_in, v);
        float amax = 0.f;
        if (HOIST) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float s1 = __fadd_rn(__fmul_rn(v[k], dA), __fmul_rn(bdt[k], xv));
                v[k] = s1;
                amax = fmaxf(amax, fabsf(s1));
            }
        } else {
            const float dtv = rows[dd];
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float s1 = __fadd_rn(__fmul_rn(v[k], dA), __fmul_rn(__fmul_rn(bv[k], dtv), xv));
                v[k] = s1;
                amax = fmaxf(amax, fabsf(s1));
            }
        }
        float encode = 1.f, decode = 1.f;
        if (ST == ST_I16) ssu_i16_scale(amax, TPR, &encode, &decode);
        const i64 srow_idx = srow0 + dd;
        float s1[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) s1[k] = v[k];
        uint4 qo;
        // e0 (the element index) only feeds stochastic rounding's counter.
        const i64 e0 = SR ? srow_idx * p.dstate + (i64)lane * VEC : 0;
        if constexpr (ST == ST_BF16)
            ssu9_pack_bf16(v, qo);
        else
            ssu3_pack<ST, SR, true>(p, v, e0, pad, encode, decode, qo);
        if (!pad && valid) *(uint4*)(tile_gm + dd * rstride) = qo;
        float acc = 0.f;
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc = __fmaf_rn(OUTV ? v[k] : s1[k], cv[k], acc);
#pragma unroll
        for (int o = TPR / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(DUET_FULL_MASK, acc, o, TPR);
        if (lane == 0 && valid) {
            if (ST == ST_I16 && !pad) state_scale[srow_idx] = decode;
            float o = acc;
            if (p.has_d) o += rows[4 * p.dim + d];
            if (p.has_z) o *= rows[3 * p.dim + d];
            out[row0 + d] = o;
        }
    }
}

template <int ST, bool SR, int CW, bool EARLY, int TPRC = 0, int UNR = 1>
__device__ __forceinline__ void ssu_v7_body(const SsuParams& p, i64 stages, const float* __restrict__ x,
                                            const float* __restrict__ dt, const float* __restrict__ A,
                                            const float* __restrict__ B, const float* __restrict__ C,
                                            const float* __restrict__ D, const float* __restrict__ z,
                                            const float* __restrict__ dt_bias, const i64* __restrict__ sbi,
                                            void* __restrict__ state, float* __restrict__ state_scale,
                                            float* __restrict__ out) {
    constexpr int VEC = Ssu3Elem<ST>::VEC;
    constexpr int ESZ = 16 / VEC;
    constexpr int SSU7_CONSUMERS = 32 * CW;
    extern __shared__ __align__(128) unsigned char ssu7_sm[];
    u64* full = (u64*)ssu7_sm;
    u64* empty = full + stages;
    unsigned char* ring = ssu7_sm + ((16 * stages + 127) / 128) * 128;
    const Ssu7Layout L = ssu7_layout(p, ESZ);
    const i64 tiles = p.batch * p.nheads;
    if (threadIdx.x == 0) {
        for (i64 s = 0; s < stages; ++s) {
            duet_mbar_init(&full[s], 32);
            duet_mbar_init(&empty[s], CW);
        }
        duet_mbar_init_fence();
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane32 = threadIdx.x & 31;
    if (warp == 0) {
        // ---- producer ----
        // v8 (EARLY): the tile's slot and per-row values are loaded and computed *before*
        // waiting for the stage, so a freed stage gets its bulk copies right away; the row
        // values then include the gate silu(z) and x * D, so the consumers' row finish is one
        // add and one multiply (v7 evaluates expf and a division per row on lane 0).
        constexpr int RPL = 2;  // rows per lane held in registers across the wait (dim <= 64)
        i64 it = 0;
        for (i64 t = blockIdx.x; t < tiles; t += gridDim.x, ++it) {
            const i64 s = it % stages;
            const u32 use = (u32)(it / stages);
            if (!EARLY && use > 0) duet_mbar_wait(&empty[s], (use + 1) & 1u);  // v7: wait first
            const i64 b = t / p.nheads, h = t % p.nheads;
            const i64 slot = p.has_sbi ? sbi[b] : b;
            const bool pad = p.has_sbi && slot == p.pad_slot_id;
            const i64 g = h / (p.nheads / p.ngroups);
            const i64 row0 = (b * p.nheads + h) * p.dim;
            // dt (and so dA) per head: one softplus / exp per lane per tile, not per row.
            const bool row_dt = p.dt_per_dim || (p.has_bias && p.bias_per_dim);
            float dt_head = 0.f, dA_head = 0.f;
            auto head_vals = [&]() {
                if (!row_dt) {
                    dt_head = dt[b * p.nheads + h];
                    if (p.has_bias) dt_head = __fadd_rn(dt_head, dt_bias[h]);
                    if (p.softplus && dt_head <= 20.f) dt_head = (float)log1p(exp((double)dt_head));
                    dA_head = (float)exp((double)__fmul_rn(A[h], dt_head));
                }
            };
            if (EARLY) head_vals();
            // The row values of row d: dt, dA, x, z (v7) or gate (v8), D (v7) or x * D (v8),
            // the int16 decode scale.
            auto row_vals = [&](i64 d, float* o6) {
                float dtv = dt_head, dAv = dA_head;
                if (row_dt) {
                    dtv = p.dt_per_dim ? dt[row0 + d] : dt[b * p.nheads + h];
                    if (p.has_bias) dtv = __fadd_rn(dtv, p.bias_per_dim ? dt_bias[h * p.dim + d] : dt_bias[h]);
                    if (p.softplus && dtv <= 20.f) dtv = (float)log1p(exp((double)dtv));
                    dAv = (float)exp((double)__fmul_rn(A[h], dtv));
                }
                const float xv = x[row0 + d];
                const float zv = p.has_z ? z[row0 + d] : 0.f;
                const float dv = p.has_d ? (p.d_per_dim ? D[h * p.dim + d] : D[h]) : 0.f;
                o6[0] = dtv;
                o6[1] = dAv;
                o6[2] = xv;
                o6[3] = EARLY ? (p.has_z ? zv / (1.f + expf(-zv)) : 1.f) : zv;
                o6[4] = EARLY ? xv * dv : dv;
                o6[5] = (ST == ST_I16 && !pad) ? state_scale[(slot * p.nheads + h) * p.dim + d] : 1.f;
            };
            float early[RPL][6];
            if (EARLY) {
#pragma unroll
                for (int k = 0; k < RPL; ++k) {
                    const i64 d = lane32 + 32 * k;
                    if (d < p.dim) row_vals(d, early[k]);
                }
            }
            if (EARLY && use > 0) duet_mbar_wait(&empty[s], (use + 1) & 1u);
            unsigned char* st = ring + s * L.stage;
            if (lane32 == 0) {
                const u32 bc = (u32)(4 * p.dstate);
                const u32 tb = (u32)(p.dim * p.dstate * ESZ);
                const unsigned char* src = (const unsigned char*)state + (slot * p.nheads + h) * p.dim * p.dstate * ESZ;
                duet_mbar_expect_tx(&full[s], 2 * bc + (pad ? 0u : tb));
                if (EARLY && !pad) duet_bulk_g2s(st + L.tile, src, tb, &full[s]);  // v8: the big copy first
                duet_bulk_g2s(st + L.b, B + (b * p.ngroups + g) * p.dstate, bc, &full[s]);
                duet_bulk_g2s(st + L.c, C + (b * p.ngroups + g) * p.dstate, bc, &full[s]);
                if (!EARLY && !pad) duet_bulk_g2s(st + L.tile, src, tb, &full[s]);
                *(i64*)(st + L.slot) = slot;
            }
            if (!EARLY) head_vals();  // v7: after the copies
            float* rows = (float*)(st + L.rows);
            for (i64 d = lane32; d < p.dim; d += 32) {
                float o6[6];
                const i64 k = (d - lane32) / 32;
                if (EARLY && k < RPL) {
#pragma unroll
                    for (int j = 0; j < RPL; ++j)
                        if (j == k) {
#pragma unroll
                            for (int q = 0; q < 6; ++q) o6[q] = early[j][q];
                        }
                } else {
                    row_vals(d, o6);
                }
#pragma unroll
                for (int q = 0; q < 6; ++q) rows[q * p.dim + d] = o6[q];
            }
            duet_mbar_arrive(&full[s]);
        }
        return;
    }
    // ---- consumers ----
    const int ct = threadIdx.x - 32;
    const i64 nvec = p.dstate / VEC;
    const int tpr = (int)nvec;             // lanes per row (v3_ok: a power of two <= 32)
    const int lane = ct % tpr, grp = ct / tpr;
    const int groups = SSU7_CONSUMERS / tpr;
    const i64 passes = (p.dim + groups - 1) / groups;
    const i64 n = (i64)lane * VEC;         // the thread's first column
    i64 it = 0;
    for (i64 t = blockIdx.x; t < tiles; t += gridDim.x, ++it) {
        const i64 s = it % stages;
        duet_mbar_wait(&full[s], (u32)(it / stages) & 1u);
        const unsigned char* st = ring + s * L.stage;
        const i64 b = t / p.nheads, h = t % p.nheads;
        const i64 slot = *(const i64*)(st + L.slot);
        const bool pad = p.has_sbi && slot == p.pad_slot_id;
        const i64 row0 = (b * p.nheads + h) * p.dim;
        const float* rows = (const float*)(st + L.rows);
        if (pad && p.pad_mode == 0) {
            for (i64 d = ct; d < p.dim; d += SSU7_CONSUMERS) out[row0 + d] = 0.f;
        } else {
            float bv[VEC], cv[VEC];
#pragma unroll
            for (int k4 = 0; k4 < VEC; k4 += 4) {
                const float4 b4 = *(const float4*)(st + L.b + 4 * (n + k4));
                const float4 c4 = *(const float4*)(st + L.c + 4 * (n + k4));
                bv[k4] = b4.x; bv[k4 + 1] = b4.y; bv[k4 + 2] = b4.z; bv[k4 + 3] = b4.w;
                cv[k4] = c4.x; cv[k4 + 1] = c4.y; cv[k4 + 2] = c4.z; cv[k4 + 3] = c4.w;
            }
            // v9: the tile's rows (see ssu9_passes), when dstate gives TPRC lanes per row (the
            // host runs v9 only then; v8's loop otherwise).
            bool done9 = false;
            if constexpr (TPRC > 0) if (nvec == TPRC) {
                done9 = true;
                const unsigned char* tile_sm = st + L.tile + n * ESZ;
                const i64 srow0 = (slot * p.nheads + h) * p.dim;
                unsigned char* tile_gm = (unsigned char*)state + (srow0 * p.dstate + n) * ESZ;
                const bool hoist = !(p.dt_per_dim || (p.has_bias && p.bias_per_dim));
                const int l9 = ct % TPRC, g9 = ct / TPRC;
                constexpr int G9 = SSU7_CONSUMERS / TPRC;
                if (hoist && p.out_from == 1)
                    ssu9_passes<ST, SR, TPRC, true, true, UNR>(p, tile_sm, tile_gm, rows, bv, cv, out, state_scale,
                                                          row0, srow0, l9, g9, G9, pad);
                else if (hoist)
                    ssu9_passes<ST, SR, TPRC, true, false, UNR>(p, tile_sm, tile_gm, rows, bv, cv, out, state_scale,
                                                           row0, srow0, l9, g9, G9, pad);
                else if (p.out_from == 1)
                    ssu9_passes<ST, SR, TPRC, false, true, UNR>(p, tile_sm, tile_gm, rows, bv, cv, out, state_scale,
                                                           row0, srow0, l9, g9, G9, pad);
                else
                    ssu9_passes<ST, SR, TPRC, false, false, UNR>(p, tile_sm, tile_gm, rows, bv, cv, out, state_scale,
                                                            row0, srow0, l9, g9, G9, pad);
            }
            if (!done9)
            for (i64 pass = 0; pass < passes; ++pass) {
                const i64 d = (i64)grp + (i64)groups * pass;
                // Rows past dim run the arithmetic on zeros so every lane reaches the shuffles.
                const bool valid = d < p.dim;
                const i64 dd = valid ? d : 0;
                const float dtv = rows[dd], dA = rows[p.dim + dd], xv = rows[2 * p.dim + dd];
                const float dec_in = rows[5 * p.dim + dd];
                uint4 q = make_uint4(0u, 0u, 0u, 0u);
                if (valid && !pad) q = *(const uint4*)(st + L.tile + (dd * p.dstate + n) * ESZ);
                float v[VEC];
                ssu3_unpack<ST>(q, dec_in, v);
                float amax = 0.f;
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float s1 = __fadd_rn(__fmul_rn(v[k], dA), __fmul_rn(__fmul_rn(bv[k], dtv), xv));
                    v[k] = s1;
                    amax = fmaxf(amax, fabsf(s1));
                }
                float encode = 1.f, decode = 1.f;
                if (ST == ST_I16) ssu_i16_scale(amax, tpr, &encode, &decode);
                const i64 srow_idx = (slot * p.nheads + h) * p.dim + dd;
                const i64 e0 = srow_idx * p.dstate + n;
                float s1[VEC];
#pragma unroll
                for (int k = 0; k < VEC; ++k) s1[k] = v[k];
                uint4 qo;
                ssu3_pack<ST, SR, true>(p, v, e0, pad, encode, decode, qo);
                if (!pad && valid) *(uint4*)((char*)state + e0 * (i64)ESZ) = qo;
                float acc = 0.f;
#pragma unroll
                for (int k = 0; k < VEC; ++k) acc = __fmaf_rn(p.out_from == 1 ? v[k] : s1[k], cv[k], acc);
                for (int o = tpr / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(DUET_FULL_MASK, acc, o, tpr);
                if (lane == 0 && valid) {
                    if (ST == ST_I16 && !pad) state_scale[srow_idx] = decode;
                    float o = acc;
                    if (EARLY) {  // x * D and silu(z) precomputed by the producer (same expressions)
                        if (p.has_d) o += rows[4 * p.dim + d];
                        if (p.has_z) o *= rows[3 * p.dim + d];
                    } else {
                        if (p.has_d) o += xv * rows[4 * p.dim + d];
                        if (p.has_z) {
                            const float zv = rows[3 * p.dim + d];
                            o *= zv / (1.f + expf(-zv));
                        }
                    }
                    out[row0 + d] = o;
                }
            }
        }
        __syncwarp();
        if ((threadIdx.x & 31) == 0) duet_mbar_arrive(&empty[s]);
    }
}

#define SSU7_ENTRY(NAME, ST, SR) SSU7_ENTRY_W(NAME, ST, SR, 4, false)
#define SSU8_ENTRY(NAME, ST, SR) SSU7_ENTRY_W(NAME, ST, SR, 4, true)
#define SSU7_ENTRY_W(NAME, ST, SR, CW, EARLY) SSU7_ENTRY_T(NAME, ST, SR, CW, EARLY, 0)
#define SSU7_ENTRY_T(NAME, ST, SR, CW, EARLY, TPRC) SSU7_ENTRY_U(NAME, ST, SR, CW, EARLY, TPRC, 1, 1)
#define SSU7_ENTRY_U(NAME, ST, SR, CW, EARLY, TPRC, MINB, UNR)                                           \
    extern "C" __global__ void __launch_bounds__(32 * (1 + CW), MINB) NAME(                                  \
        SsuParams p, i64 stages, const float* __restrict__ x, const float* __restrict__ dt,                 \
        const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ C,              \
        const float* __restrict__ D, const float* __restrict__ z, const float* __restrict__ dt_bias,        \
        const i64* __restrict__ sbi, void* __restrict__ state, float* __restrict__ state_scale,            \
        float* __restrict__ out) {                                                                         \
        DUET_PDL_ENTRY();                                                                                  \
        ssu_v7_body<ST, SR, CW, EARLY, TPRC, UNR>(p, stages, x, dt, A, B, C, D, z, dt_bias, sbi, state,   \
                                             state_scale, out);                                            \
    }
SSU7_ENTRY(ssu_v7_f32, ST_F32, false)
SSU7_ENTRY(ssu_v7_bf16, ST_BF16, false)
SSU7_ENTRY(ssu_v7_f16, ST_F16, false)
SSU7_ENTRY(ssu_v7_f16_sr, ST_F16, true)
SSU7_ENTRY(ssu_v7_i16, ST_I16, false)
// Consumer-warp sweep (bf16, nearest; `duet bench --shape ssu_sweep_b256_bf16`): 2 or 8
// consumer warps per producer warp instead of 4. Same body, bit-identical state.
SSU7_ENTRY_W(ssu_v7w2_bf16, ST_BF16, false, 2, false)
SSU7_ENTRY_W(ssu_v7w8_bf16, ST_BF16, false, 8, false)
// v8 (session 4): v7 with the producer's loads and prologue math before its wait for a free
// stage (the state copy is issued first once the stage frees), and the row finish
// precomputed (x * D, silu(z)): same expressions, so `out` and the state are as v7's.
SSU8_ENTRY(ssu_v8_f32, ST_F32, false)
SSU8_ENTRY(ssu_v8_bf16, ST_BF16, false)
SSU8_ENTRY(ssu_v8_f16, ST_F16, false)
SSU8_ENTRY(ssu_v8_f16_sr, ST_F16, true)
SSU8_ENTRY(ssu_v8_i16, ST_I16, false)
// v9 (dstate = 128 only: TPR = 128 / VEC lanes per row).
SSU7_ENTRY_T(ssu_v9_f32, ST_F32, false, 4, true, 32)
// bf16 (the Super decode's state): held to 5 blocks an SM (<= 80 registers; the host asks for
// the largest shared-memory carveout) with the row passes unrolled 2 deep (session 24's sweep at
// batch 256, one run: 3.458 TB/s effective against 3.266 for the 4-block, not-unrolled form (ncu
// on that form: 81 registers and 38 KB of shared memory held it to 4 blocks, issue slots 55%
// busy, DRAM 62%, long-scoreboard stalls 42% of the cycles between issues); 5 blocks alone
// 3.426, unrolled alone 3.267, 4-deep 3.262, 6 blocks at 64 registers 3.344). Same arithmetic:
// bit-identical.
SSU7_ENTRY_U(ssu_v9_bf16, ST_BF16, false, 4, true, 16, 5, 2)
// The other 16-bit states: 4 blocks an SM (f16 90, int16 92 registers; f16 with stochastic
// rounding held to 4 by its bounds: 93 registers with Philox's rounds compiled in). Held to 5
// like bf16 (72 registers, 20-56 bytes of spill) the f16 entry ran 371.4 / 95.0 us at batch
// 256 / 64 against 367.2 / 97.6 for this form (session 25 call 2, one run): no gain, so no
// spills.
SSU7_ENTRY_T(ssu_v9_f16, ST_F16, false, 4, true, 16)
SSU7_ENTRY_U(ssu_v9_f16_sr, ST_F16, true, 4, true, 16, 4, 1)
SSU7_ENTRY_T(ssu_v9_i16, ST_I16, false, 4, true, 16)

// ---------------------------------------------------------------------------------------------
// v11 (session 26): persistent warps, the state streamed straight into registers (no shared
// memory, no bulk copies, no producer warp). v9 spends ~29 thread instructions a state element
// (session 5's ncu on v8; v9's consumers lost some) and its consumers read the tile back out of
// shared memory: at batch 256 it runs ~3.44 TB/s with issue slots ~55% busy and most of the
// stall cycles on scoreboards (session 24). An SM must retire ~3.8 state elements a cycle to
// reach the ~3.9 TB/s of duet's SM copy, which leaves ~33 issue slots an element in all, so the
// per-element work and the bytes in flight both have to be right:
//   - the work is cut into chunks of RPC = (32 / TPR) x CH rows of one (batch row, head) tile
//     (TPR = dstate / VEC lanes a row; 16 for the 16-bit states, 32 for f32); the chunks of
//     all tiles are split into equal contiguous ranges, one a warp (grid = SMs x resident
//     blocks), so no warp has more than one chunk more than another (v9's tail: whole tiles);
//     since session 28 whole tiles are first dealt round-robin over the warps (Ssu11Walk,
//     every v11 entry and the `_i` forms), the contiguous split only for the rest;
//   - each lane holds two chunks' state in registers (CH 16-byte vectors each): the loads of
//     chunk c + 1 are in flight while chunk c is updated, stored (16-byte stores from
//     registers) and reduced;
//   - per tile, once: the slot (read one tile ahead), B * dt per column (dt per head) and C in
//     registers, and the rows' x, x * D, silu(z) (and dt, dA when dt is per row) held two rows a
//     lane (dim <= 64), broadcast to the row's lanes by shuffles;
//   - `out`: the chunk's CH row sums reduced across the row's TPR lanes in one transposed
//     butterfly (CH values halve at each of the first log2(CH) steps), which adds the same
//     pairs in the same tree as v9's per-row butterfly, so `out` has v9's bits.
// The same operations on every state element as v3-v10 (s * dA + (B * dt) * x without
// contraction, the same rounding helpers): bit-identical state. dstate 128, dim <= 64 with dim a
// multiple of RPC, A per head; f32 / bf16 / f16 (either rounding) states (the host checks:
// v11_ok in gpu/src/ops/selective_state_update.rs). 64-bit offsets throughout.
#define SSU11_DSTATE 128
#define SSU11_THREADS 128

// Issues chunk c's state loads into q (zeros for a pad slot): CH vectors a lane, rows
// k * RPC + i * (32 / TPR) + lane / TPR of the chunk's tile.
// A warp's walk over its chunks. v11 (session 26): one equal contiguous range of all chunks a
// warp. Interleaved forms (`_i`, session 28): first R = tiles / warps rounds of whole tiles
// dealt round-robin (round r: tile r * nw + w), so the warps sweep the cache together, then
// an equal contiguous share of the chunks left over (no warp has more than one chunk more than
// another). Session 28's in-place probes: bumping 1 GiB in place with whole 16 KiB tiles dealt
// round-robin ran 542.5 us, with v11's contiguous ranges 559.1 (copy_v10 / copy_v9,
// bench_copy.cu). Session 29: groups of G = IL consecutive tiles may be dealt together (round
// r: tiles (r * nw + w) G .. + G - 1; R then a multiple of G). The walk's tiles are numbered
// s = 0, 1, ... (the heads table's index).
// a / b for 0 <= a, 0 < b: the 32-bit division when both fit (ptxas's 64-bit one is a call).
// Only in the heads fill: in ssu11_tile the two paths cost the c4 / c8 register forms an 8-byte
// spill, in the walk v11_bf16 a 4-byte one.
__device__ __forceinline__ i64 ssu11_div(i64 a, i64 b) {
    return ((u64)a | (u64)b) >> 31 == 0 ? (i64)((u32)a / (u32)b) : a / b;
}
struct Ssu11Walk {
    i64 nw, w, R, tb0, nseq, count, jump;  // jump: tile step from a group's last tile to the next group
    int cpt, kb0, gl;  // kb0: first chunk (of tile tb0) of the contiguous part; gl: log2 of the group
    // il: tiles dealt together (a power of two <= 16; 0: no round-robin part).
    __device__ __forceinline__ Ssu11Walk(i64 tiles, int cpt_, i64 nw_, i64 w_, int il) {
        nw = nw_;
        w = w_;
        cpt = cpt_;
        gl = il >= 16 ? 4 : il >= 8 ? 3 : il >= 4 ? 2 : il >= 2 ? 1 : 0;
        R = il > 0 ? (tiles / (nw << gl)) << gl : 0;
        jump = (nw - 1) * ((i64)1 << gl) + 1;
        const i64 base = R * nw * cpt, rest = tiles * cpt - base;
        const i64 c0 = base + rest * w / nw, c1 = base + rest * (w + 1) / nw;
        tb0 = c0 / cpt;
        kb0 = (int)(c0 - tb0 * cpt);
        count = R * cpt + (c1 - c0);
        nseq = R + (c1 > c0 ? (c1 - 1) / cpt - tb0 + 1 : 0);
    }
    __device__ __forceinline__ i64 tile(i64 s) const {
        return s < R ? ((((s >> gl) * nw + w) << gl) | (s & ((1 << gl) - 1))) : tb0 + (s - R);
    }
};
// A chunk's place in the walk: tile t (walk tile s), chunk k of the tile, stepped one chunk at a
// time with no division (session 27: v11 divided 64-bit indices about four times a chunk,
// through ptxas's division subroutine, ~134 call sites in the c4 entry).
struct Ssu11Pos {
    i64 t, s;
    int k;  // < cpt <= 64
    __device__ __forceinline__ explicit Ssu11Pos(const Ssu11Walk& W) {
        s = 0;
        t = W.tile(0);
        k = W.R > 0 ? 0 : W.kb0;
    }
    __device__ __forceinline__ void next(const Ssu11Walk& W) {
        if (++k == W.cpt) {
            k = 0;
            ++s;
            if (s < W.R) {
                t += (s & ((1 << W.gl) - 1)) == 0 ? W.jump : 1;
            } else if (s == W.R) {
                t = W.tb0;
                k = W.kb0;
            } else {
                ++t;
            }
        }
    }
};
template <int ST, int CH>
__device__ __forceinline__ const unsigned char* ssu11_src(const unsigned char* state, const Ssu11Pos& c,
                                                          i64 srow, int lane) {
    constexpr int VEC = Ssu3Elem<ST>::VEC, ESZ = 16 / VEC, TPR = SSU11_DSTATE / VEC, LPL = 32 / TPR;
    constexpr int RPC = LPL * CH;
    if (srow < 0) return nullptr;
    const i64 row = srow + (i64)c.k * RPC + lane / TPR;
    return state + (row * SSU11_DSTATE + (i64)(lane % TPR) * VEC) * ESZ;
}
template <int ST, int CH>
__device__ __forceinline__ void ssu11_issue(const unsigned char* __restrict__ state, const Ssu11Pos& c, i64 srow,
                                            int lane, uint4 (&q)[CH]) {
    constexpr int VEC = Ssu3Elem<ST>::VEC, ESZ = 16 / VEC, TPR = SSU11_DSTATE / VEC, LPL = 32 / TPR;
    const unsigned char* src = ssu11_src<ST, CH>(state, c, srow, lane);
#pragma unroll
    for (int i = 0; i < CH; ++i) {
        q[i] = make_uint4(0u, 0u, 0u, 0u);
        if (src != nullptr) q[i] = *(const uint4*)(src + (i64)i * LPL * SSU11_DSTATE * ESZ);
    }
}

// The per-head values of 32 consecutive tiles of the walk, one a lane (lane j: walk tile base + j): the first
// state row of the tile's slot (-1 for a pad slot) and,
// when dt is per head, dt' (bias, softplus) and dA = exp(A * dt'), v8's producer expressions in
// double as everywhere. One f64 chain a lane per 32 tiles instead of one a tile on the critical
// path; the loader (up to two chunks ahead) refills the table at base = its tile - 2, so the
// tile being updated is still in it.
// Session 28: the fill reads the values and computes the slots' rows; the f64 softplus / exp
// (~60 dependent f64 operations) run in ssu11_heads_finish, which the body calls only after it
// has issued the loads of the state rows the fill gave it, so the state's DRAM latency and the
// f64 chain overlap (the SASS had the chain first: at batch 1 every warp waited for it before its
// first state load).
struct Ssu11Heads {
    i64 base = -64;
    i64 srow = -1;
    float dt = 0.f, da = 0.f;  // after the fill: dt (+ bias) and A of the head; after finish: dt', dA
    bool pending = false;      // (warp-uniform) filled, not finished
};
template <bool HOIST>
__device__ __forceinline__ void ssu11_heads_fill(const SsuParams& p, Ssu11Heads& H, i64 base, const Ssu11Walk& W,
                                                 const i64* __restrict__ sbi, const float* __restrict__ dt,
                                                 const float* __restrict__ A, const float* __restrict__ dt_bias,
                                                 int lane) {
    H.base = base;
    if (base + lane < W.nseq) {
        const i64 t = W.tile(base + lane);
        const i64 b = ssu11_div(t, p.nheads), h = t - b * p.nheads;
        const i64 slot = p.has_sbi ? sbi[b] : b;
        H.srow = p.has_sbi && slot == p.pad_slot_id ? -1 : (slot * p.nheads + h) * p.dim;
        if (HOIST) {
            float dth = dt[b * p.nheads + h];
            if (p.has_bias) dth = __fadd_rn(dth, dt_bias[h]);
            H.dt = dth;
            H.da = A[h];
        }
    }
    H.pending = HOIST;
}
// dt' (softplus) and dA = exp(A * dt') of the filled entries: v8's producer expressions in
// double, so the same bits.
__device__ __forceinline__ void ssu11_heads_finish(const SsuParams& p, Ssu11Heads& H) {
    if (!H.pending) return;
    H.pending = false;
    float dth = H.dt;
    if (p.softplus && dth <= 20.f) dth = (float)log1p(exp((double)dth));
    H.dt = dth;
    H.da = (float)exp((double)__fmul_rn(H.da, dth));
}
__device__ __forceinline__ i64 ssu11_heads_srow(const Ssu11Heads& H, i64 s) {
    const int j = (int)(s - H.base);
    const u32 lo = __shfl_sync(DUET_FULL_MASK, (u32)H.srow, j);
    const u32 hi = __shfl_sync(DUET_FULL_MASK, (u32)((u64)H.srow >> 32), j);
    return (i64)(((u64)hi << 32) | lo);
}

// A tile's values in a lane's registers.
template <int VEC>
struct Ssu11Tile {
    i64 t = -1, row0 = 0, srow0 = 0;
    bool pad = false;
    float dA = 0.f;
    float bv[VEC], cv[VEC];  // B * dt per column when dt is per head (HOIST), else B
    float x[2], xd[2], gate[2], dt[2], da[2];  // rows lane and lane + 32
};

// XB (session 30): x, B, C and z are bf16 (the issue's shape and the model's: the mixer passes
// them in bf16), read as such and widened exactly; `out` is then bf16 too (ssu11_chunk).
template <int ST, bool HOIST, bool XB = false>
__device__ __forceinline__ void ssu11_tile(const SsuParams& p, Ssu11Tile<Ssu3Elem<ST>::VEC>& T, i64 t, i64 srow,
                                           float dth, float dah, i64 tnext, const float* __restrict__ x,
                                           const float* __restrict__ dt, const float* __restrict__ A,
                                           const float* __restrict__ B, const float* __restrict__ C,
                                           const float* __restrict__ D, const float* __restrict__ z,
                                           const float* __restrict__ dt_bias, int lane) {
    constexpr int VEC = Ssu3Elem<ST>::VEC, TPR = SSU11_DSTATE / VEC;
    const i64 b = t / p.nheads, h = t - b * p.nheads;
    const i64 hpg = p.nheads / p.ngroups, g = h / hpg;
    T.t = t;
    T.pad = srow < 0;
    T.row0 = (b * p.nheads + h) * p.dim;
    T.srow0 = srow;
    const i64 n = (i64)(lane % TPR) * VEC;
    const i64 goff = (b * p.ngroups + g) * SSU11_DSTATE + n;
    if constexpr (XB) {
        // four bf16 a load (8 bytes: n is a multiple of VEC >= 4)
        const u16* Bg = (const u16*)B + goff;
        const u16* Cg = (const u16*)C + goff;
#pragma unroll
        for (int k4 = 0; k4 < VEC; k4 += 4) {
            const uint2 b4 = *(const uint2*)(Bg + k4), c4 = *(const uint2*)(Cg + k4);
            T.bv[k4] = __uint_as_float(b4.x << 16); T.bv[k4 + 1] = __uint_as_float(b4.x & 0xffff0000u);
            T.bv[k4 + 2] = __uint_as_float(b4.y << 16); T.bv[k4 + 3] = __uint_as_float(b4.y & 0xffff0000u);
            T.cv[k4] = __uint_as_float(c4.x << 16); T.cv[k4 + 1] = __uint_as_float(c4.x & 0xffff0000u);
            T.cv[k4 + 2] = __uint_as_float(c4.y << 16); T.cv[k4 + 3] = __uint_as_float(c4.y & 0xffff0000u);
        }
    } else {
        const float* Bg = B + goff;
        const float* Cg = C + goff;
#pragma unroll
        for (int k4 = 0; k4 < VEC; k4 += 4) {
            const float4 b4 = *(const float4*)(Bg + k4), c4 = *(const float4*)(Cg + k4);
            T.bv[k4] = b4.x; T.bv[k4 + 1] = b4.y; T.bv[k4 + 2] = b4.z; T.bv[k4 + 3] = b4.w;
            T.cv[k4] = c4.x; T.cv[k4 + 1] = c4.y; T.cv[k4 + 2] = c4.z; T.cv[k4 + 3] = c4.w;
        }
    }
    // The rows' values: v8's producer expressions (row_vals), so the same bits.
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const i64 d = lane + 32 * k;
        const bool live = d < p.dim;
        const i64 dd = live ? d : 0;
        const float xv = XB ? bf16_to_f32(((const u16*)x)[T.row0 + dd]) : x[T.row0 + dd];
        const float zv = p.has_z ? (XB ? bf16_to_f32(((const u16*)z)[T.row0 + dd]) : z[T.row0 + dd]) : 0.f;
        const float dv = p.has_d ? (p.d_per_dim ? D[h * p.dim + dd] : D[h]) : 0.f;
        T.x[k] = xv;
        T.gate[k] = p.has_z ? zv / (1.f + expf(-zv)) : 1.f;
        T.xd[k] = xv * dv;
        if (!HOIST) {
            float dtv = p.dt_per_dim ? dt[T.row0 + dd] : dt[b * p.nheads + h];
            if (p.has_bias) dtv = __fadd_rn(dtv, p.bias_per_dim ? dt_bias[h * p.dim + dd] : dt_bias[h]);
            if (p.softplus && dtv <= 20.f) dtv = (float)log1p(exp((double)dtv));
            T.dt[k] = dtv;
            T.da[k] = (float)exp((double)__fmul_rn(A[h], dtv));
        }
    }
    if (HOIST) {
        T.dA = dah;
#pragma unroll
        for (int k = 0; k < VEC; ++k) T.bv[k] = __fmul_rn(T.bv[k], dth);
    }
    // The next tile's rows (x, z, per-row dt) and its group's B / C lines into the L2 while this
    // tile streams (a tile switch then waits for L2 hits, not DRAM). tnext: the walk's next
    // tile, -1 for none.
    if (tnext >= 0) {
        const i64 b1 = tnext / p.nheads, h1 = tnext - b1 * p.nheads;
        const i64 row1 = tnext * p.dim;
        const i64 g1 = h1 / hpg;
        if constexpr (XB) {
            // byte addresses: x / z / B / C are 2 bytes an element, dt 4
            const char* a = nullptr;
            const i64 lines = (p.dim * 2 + 127) / 128;  // 128-byte lines of a bf16 row vector
            const i64 dlines = (p.dim * 4 + 127) / 128;
            const i64 g1off = (b1 * p.ngroups + g1) * SSU11_DSTATE * 2;  // B / C rows: 2 lines
            if (lane < lines) a = (const char*)x + row1 * 2 + lane * 128;
            else if (lane < 2 * lines && p.has_z) a = (const char*)z + row1 * 2 + (lane - lines) * 128;
            else if (lane >= 16 && lane < 18) a = (const char*)B + g1off + (lane - 16) * 128;
            else if (lane >= 20 && lane < 22) a = (const char*)C + g1off + (lane - 20) * 128;
            else if (!HOIST && p.dt_per_dim && lane >= 24 && lane < 24 + dlines)
                a = (const char*)(dt + row1) + (lane - 24) * 128;
            if (a != nullptr) asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
        } else {
            const float* a = nullptr;
            const i64 lines = (p.dim * 4 + 127) / 128;  // 128-byte lines of a row vector
            if (lane < lines) a = x + row1 + lane * 32;
            else if (lane < 2 * lines && p.has_z) a = z + row1 + (lane - lines) * 32;
            else if (lane >= 16 && lane < 20) a = B + (b1 * p.ngroups + g1) * SSU11_DSTATE + (lane - 16) * 32;
            else if (lane >= 20 && lane < 24) a = C + (b1 * p.ngroups + g1) * SSU11_DSTATE + (lane - 20) * 32;
            else if (!HOIST && p.dt_per_dim && lane >= 24 && lane < 24 + lines) a = dt + row1 + (lane - 24) * 32;
            if (a != nullptr) asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
        }
    }
}

// Two f32 -> packed bf16 / f16 with the reference's bits: the conversion hardware's
// round-to-nearest-even (cvt.rn.{bf16,f16}x2.f32) and nothing else. For every non-NaN input the
// hardware's bits are f32_to_bf16's / f32_to_f16's (the f16 side: gpu_ssu
// `f16_hardware_conversions_match_the_software_ones`; bf16: the v9 / v11 bit-exact tests). A NaN
// differs only in its payload (the hardware returns the canonical NaN), and every value v11
// rounds is the result of s * dA + (B * dt) * x, which the hardware has already made the
// canonical NaN 0x7fffffff, for which both conversions agree with the software (0x7fff): gpu_ssu
// `v11_nan_steps_match_the_software_ones` checks that over every f32 and f16 NaN. Session 26's
// form replaced a NaN half by the software rule branch-free (~5 more instructions a pair); the
// f16 path went through ssu3_pack's branch a vector (376 us against v9's 348 at batch 256).
__device__ __forceinline__ u32 ssu11_bf16x2(float lo, float hi) {
    u32 w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}
__device__ __forceinline__ u32 ssu11_f16x2(float lo, float hi) {
    u32 w;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}
// Eight f16 -> f32 on the conversion hardware with no NaN test (ssu_f16x8_to_f32 has a branch a
// vector): a NaN's payload never reaches a result, since its first use is s * dA, whose NaN is
// canonical whatever the input's payload (the same check).
__device__ __forceinline__ void ssu11_f16x8_to_f32(const uint4& q, float* v) {
    const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) ssu_f16x2_hw(w[k], v[2 * k], v[2 * k + 1]);
}

// One state vector's update: s1 = s * dA + (B * dt) * x per element (no contraction), rounded
// into the cache's format (qo; bf16 branch-free, f16 through ssu3_unpack / ssu3_pack's exact
// helpers), and its share of `out`.
template <int ST, bool SR, bool HOIST, bool OUTV>
__device__ __forceinline__ float ssu11_vec(const SsuParams& p, const Ssu11Tile<Ssu3Elem<ST>::VEC>& T,
                                           const uint4& q, float xv, float dtv, float dA, i64 e0, uint4& qo) {
    constexpr int VEC = Ssu3Elem<ST>::VEC;
    float v[VEC];
    if constexpr (ST == ST_F16) {
        ssu11_f16x8_to_f32(q, v);
    } else {
        ssu3_unpack<ST>(q, 1.f, v);
    }
    float s1[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
        const float bdx = HOIST ? __fmul_rn(T.bv[e], xv) : __fmul_rn(__fmul_rn(T.bv[e], dtv), xv);
        s1[e] = __fadd_rn(__fmul_rn(v[e], dA), bdx);
        v[e] = s1[e];
    }
    if constexpr (ST == ST_BF16) {
        u32 w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            w[k] = ssu11_bf16x2(v[2 * k], v[2 * k + 1]);
            v[2 * k] = __uint_as_float(w[k] << 16);
            v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
        qo = make_uint4(w[0], w[1], w[2], w[3]);
    } else if constexpr (ST == ST_F16 && !SR) {
        u32 w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            w[k] = ssu11_f16x2(v[2 * k], v[2 * k + 1]);
            if (OUTV) ssu_f16x2_hw(w[k], v[2 * k], v[2 * k + 1]);
        }
        qo = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
        ssu3_pack<ST, SR, true>(p, v, e0, T.pad, 1.f, 1.f, qo);
    }
    float a = 0.f;
#pragma unroll
    for (int e = 0; e < VEC; ++e) a = __fmaf_rn(OUTV ? v[e] : s1[e], T.cv[e], a);
    return a;
}

// Updates chunk c (state in q), stores it and writes its rows' out.
// ROLL: vector i of the chunk two ahead (nsrc, ssu11_src; null: none or a pad slot, zeros) is
// loaded into q[i] as soon as vector i is updated, so two chunks' loads stay in flight through
// the update and the reduction instead of being issued after them.
// BS (session 30): the new state goes into `sink` (vector i at sink[32 i], the lane's own ring
// slot) instead of global memory, for the caller's bulk store of the whole chunk.
template <int ST, bool SR, int CH, bool HOIST, bool OUTV, bool ROLL, bool XB = false, bool BS = false>
__device__ __forceinline__ void ssu11_chunk(const SsuParams& p, const Ssu11Tile<Ssu3Elem<ST>::VEC>& T, int k,
                                            uint4 (&q)[CH], const unsigned char* nsrc,
                                            unsigned char* __restrict__ state, float* __restrict__ out,
                                            int lane, uint4* sink = nullptr) {
    constexpr int VEC = Ssu3Elem<ST>::VEC, ESZ = 16 / VEC, TPR = SSU11_DSTATE / VEC, LPL = 32 / TPR;
    constexpr int RPC = LPL * CH;
    static_assert(CH <= TPR && (CH & (CH - 1)) == 0 && RPC <= 32 && (32 % RPC) == 0, "v11 chunk shape");
    const i64 rbase = (i64)k * RPC;            // the chunk's first tile row
    const bool hi = rbase >= 32;               // the chunk's rows are held in x[1] / ... (RPC | 32)
    const int lr = lane / TPR, lc = lane % TPR;
    // The rows' x (and dt, dA) for every vector of the chunk first: no shuffle between the
    // vectors' updates, so a bf16 / f32 chunk is one block of independent chains.
    float xr[CH], dtr[CH], dar[CH];
    {
        const float xs = hi ? T.x[1] : T.x[0];
        const float dts = HOIST ? 0.f : (hi ? T.dt[1] : T.dt[0]);
        const float das = HOIST ? 0.f : (hi ? T.da[1] : T.da[0]);
#pragma unroll
        for (int i = 0; i < CH; ++i) {
            const int rl = (int)(rbase & 31) + i * LPL + lr;  // the row's holder lane
            xr[i] = __shfl_sync(DUET_FULL_MASK, xs, rl);
            dtr[i] = HOIST ? 0.f : __shfl_sync(DUET_FULL_MASK, dts, rl);
            dar[i] = HOIST ? T.dA : __shfl_sync(DUET_FULL_MASK, das, rl);
        }
    }
    const i64 erow = (T.srow0 + rbase + lr) * SSU11_DSTATE + (i64)lc * VEC;  // element of vector 0
    unsigned char* dst = state + erow * ESZ;
    float acc[CH];
#pragma unroll
    for (int i = 0; i < CH; ++i) {
        const i64 e0 = SR ? erow + (i64)i * LPL * SSU11_DSTATE : 0;
        uint4 qo;
        acc[i] = ssu11_vec<ST, SR, HOIST, OUTV>(p, T, q[i], xr[i], dtr[i], dar[i], e0, qo);
        if (BS) sink[i * 32] = qo;
        else if (!T.pad) *(uint4*)(dst + (i64)i * LPL * SSU11_DSTATE * ESZ) = qo;
        if (ROLL) {
            q[i] = make_uint4(0u, 0u, 0u, 0u);
            if (nsrc != nullptr) q[i] = *(const uint4*)(nsrc + (i64)i * LPL * SSU11_DSTATE * ESZ);
        }
    }
    // Transposed butterfly over the row's TPR lanes: at offset o (TPR / 2 down to TPR / CH) a
    // lane keeps the upper half of its values when (lane & o) != 0, the lower otherwise, and
    // adds its partner's copy of them (own + partner, as v9's acc + shfl); then plain butterfly
    // steps. Value i (vector i's row) ends in the lanes whose bits above TPR / CH spell i.
    int nvals = CH;
#pragma unroll
    for (int o = TPR / 2; o >= 1; o >>= 1) {
        if (nvals > 1) {
            const bool up = (lane & o) != 0;
            const int half = nvals / 2;
#pragma unroll
            for (int j = 0; j < CH / 2; ++j) {
                if (j < half) {
                    const float keep = up ? acc[j + half] : acc[j];
                    const float send = up ? acc[j] : acc[j + half];
                    acc[j] = keep + __shfl_xor_sync(DUET_FULL_MASK, send, o);
                }
            }
            nvals = half;
        } else {
            acc[0] += __shfl_xor_sync(DUET_FULL_MASK, acc[0], o);
        }
    }
    constexpr int SPAN = TPR / CH;              // lanes holding one row's sum
    const int i = lc / SPAN;                    // the vector whose row this lane holds
    const i64 r = rbase + (i64)i * LPL + lr;    // its tile row
    const int rl = (int)(r & 31);
    const float xd = __shfl_sync(DUET_FULL_MASK, hi ? T.xd[1] : T.xd[0], rl);
    const float gt = __shfl_sync(DUET_FULL_MASK, hi ? T.gate[1] : T.gate[0], rl);
    if (lc % SPAN == 0) {
        float o = acc[0];
        if (p.has_d) o += xd;
        if (p.has_z) o *= gt;
        o = (T.pad && p.pad_mode == 0) ? 0.f : o;
        // XB: the reference's out in x's dtype (f32_to_bf16: its rounding, NaN payloads kept)
        if (XB) ((u16*)out)[T.row0 + r] = f32_to_bf16(o);
        else out[T.row0 + r] = o;
    }
}

template <int ST, bool SR, int CH, bool HOIST, bool OUTV, bool ROLL, int STAGES, int IL, bool XB, bool BS>
__device__ __forceinline__ void ssu_v11_body(const SsuParams& p, const float* __restrict__ x,
                                             const float* __restrict__ dt, const float* __restrict__ A,
                                             const float* __restrict__ B, const float* __restrict__ C,
                                             const float* __restrict__ D, const float* __restrict__ z,
                                             const float* __restrict__ dt_bias, const i64* __restrict__ sbi,
                                             void* __restrict__ state_v, float* __restrict__ out,
                                             uint4* __restrict__ ring) {
    constexpr int VEC = Ssu3Elem<ST>::VEC, TPR = SSU11_DSTATE / VEC, LPL = 32 / TPR;
    constexpr int RPC = LPL * CH;
    // How far (chunks, so at most as many tiles) the loader runs ahead of the update.
    constexpr int LOOK = STAGES > 2 ? STAGES : 2;
    static_assert(LOOK < 32, "the heads table covers 32 tiles");
    unsigned char* state = (unsigned char*)state_v;
    const int lane = threadIdx.x & 31;
    const i64 wpb = blockDim.x / 32;
    const i64 nw = (i64)gridDim.x * wpb, w = (i64)blockIdx.x * wpb + threadIdx.x / 32;
    const int cpt = (int)(p.dim / RPC);                // chunks a tile (the host: dim % RPC == 0, dim <= 64)
    const Ssu11Walk W(p.batch * p.nheads, cpt, nw, w, IL);  // this warp's chunks
    // Session 30: everything above reads only kernel parameters, so it runs before the
    // programmatic wait (the entry has DUET_PDL_DEFERRED): under PDL the walk's integer math and
    // the parameters' constant-cache misses (~15% of batch 1's stall samples, session 30 call 1)
    // overlap the previous kernel's tail. The empty asm takes one field of every 64-byte line of
    // the parameters the body reads (folded into one value, so that none of them is held in a
    // register from here: six separate operands cost v11_bf16 a 4-byte spill), so their misses
    // are taken here too.
    const i64 touch = p.nheads ^ p.has_z ^ p.softplus ^ (i64)x ^ (i64)z ^ (i64)out;
    asm volatile("" ::"l"(touch));
    DUET_PDL_ENTRY();  // no global memory is read or written above
    if (W.count == 0) return;
    Ssu11Heads H;
    // The first state row of the walk's tile at c for the loader (refilling the table LOOK tiles
    // back when it runs past its end).
    auto srow_for = [&](const Ssu11Pos& c) -> i64 {
        if (c.s - H.base >= 32) {
            const i64 nb = c.s - LOOK > 0 ? c.s - LOOK : 0;
            ssu11_heads_fill<HOIST>(p, H, nb, W, sbi, dt, A, dt_bias, lane);
        }
        return ssu11_heads_srow(H, c.s);
    };
    auto tile_for = [&](Ssu11Tile<VEC>& T, const Ssu11Pos& c, i64 srow) {
        const int j = (int)(c.s - H.base);
        const float dth = HOIST ? __shfl_sync(DUET_FULL_MASK, H.dt, j) : 0.f;
        const float dah = HOIST ? __shfl_sync(DUET_FULL_MASK, H.da, j) : 0.f;
        const i64 tnext = c.s + 1 < W.nseq ? W.tile(c.s + 1) : -1;
        ssu11_tile<ST, HOIST, XB>(p, T, c.t, srow, dth, dah, tnext, x, dt, A, B, C, D, z, dt_bias, lane);
    };
    if constexpr (STAGES > 0) {
        // Staged form (session 27): the loads go through a ring of STAGES chunks a warp in shared
        // memory (cp.async, 16 bytes a lane and vector, zero-filled for a pad slot), so the
        // bytes in flight no longer cost registers: STAGES - 1 chunks are in flight while one is
        // updated. Each lane reads back only the vectors it copied itself, so the thread's own
        // cp.async.wait_group orders them and no barrier is needed; a stage is refilled only
        // after the update has consumed its registers.
        // ring: [warp][stage][vector][lane] (the entry's static array; 16-byte lanes side by side)
        uint4* rw = ring + (i64)(threadIdx.x / 32) * STAGES * CH * 32 + lane;
        Ssu11Pos ld(W), cu(W);  // the next chunk to load; the chunk updated
        auto fill = [&](int st) {
            const i64 srow = srow_for(ld);
            const unsigned char* src = ssu11_src<ST, CH>(state, ld, srow, lane);
            const unsigned char* any = src != nullptr ? src : state;
#pragma unroll
            for (int i = 0; i < CH; ++i) {
                const u32 dst = (u32)__cvta_generic_to_shared(rw + (st * CH + i) * 32);
                const int n = src != nullptr ? 16 : 0;
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst),
                             "l"(any + (src != nullptr ? (i64)i * (32 / (SSU11_DSTATE / Ssu3Elem<ST>::VEC)) *
                                                              SSU11_DSTATE * (16 / Ssu3Elem<ST>::VEC)
                                                        : 0)),
                             "r"(n)
                             : "memory");
            }
            ld.next(W);
            ssu11_heads_finish(p, H);  // after the copies of the rows it gave are issued
        };
#pragma unroll
        for (int j = 0; j < STAGES; ++j) {
            if (j < W.count) fill(j);
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
        Ssu11Tile<VEC> T;
        int st = 0;
        for (i64 c = 0; c < W.count; ++c) {
            asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 1) : "memory");
            uint4 q[CH];
#pragma unroll
            for (int i = 0; i < CH; ++i) q[i] = rw[(st * CH + i) * 32];
            // the table still holds the tile updated (the loader refills it LOOK tiles back)
            if (cu.t != T.t) tile_for(T, cu, ssu11_heads_srow(H, cu.s));
            if constexpr (BS) {
                // Session 30 (`_b`): the chunk's new state back into its ring slot (each lane its
                // own vectors), then one bulk store of the slot: its CH x 32 16-byte vectors are
                // the chunk's RPC consecutive rows in memory order (vector i of lane l: row
                // 2 i + l / 16, bytes 16 (l % 16), for a 16-bit state). The writers' fence
                // orders their shared stores before the bulk copy engine reads them; the slot is
                // refilled (cp.async) only after lane 0's store has read it.
                uint4* slot = rw + st * CH * 32;
                ssu11_chunk<ST, SR, CH, HOIST, OUTV, false, XB, true>(p, T, cu.k, q, nullptr, state, out, lane,
                                                                      slot);
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                __syncwarp();
                if (lane == 0) {
                    if (!T.pad) {
                        const i64 e0 = (T.srow0 + (i64)cu.k * RPC) * SSU11_DSTATE;
                        duet_bulk_s2g(state + e0 * (16 / VEC), slot, CH * 32 * 16);
                    }
                    duet_bulk_commit();
                    duet_bulk_wait_read<0>();
                }
                __syncwarp();
            } else {
                ssu11_chunk<ST, SR, CH, HOIST, OUTV, false, XB>(p, T, cu.k, q, nullptr, state, out, lane);
            }
            if (c + STAGES < W.count) fill(st);
            asm volatile("cp.async.commit_group;" ::: "memory");
            cu.next(W);
            st = st + 1 == STAGES ? 0 : st + 1;
        }
        if (BS && lane == 0) duet_bulk_wait<0>();  // the last stores done before the block exits
        return;
    }
    uint4 qa[CH], qb[CH];
    // ld: the next chunk to load (two ahead of the one updated); cu: the one updated.
    Ssu11Pos ld(W), cu(W);
    i64 sa = srow_for(ld), sb = 0;
    ssu11_issue<ST, CH>(state, ld, sa, lane, qa);
    ld.next(W);
    if (W.count > 1) {
        sb = srow_for(ld);
        ssu11_issue<ST, CH>(state, ld, sb, lane, qb);
        ld.next(W);
    }
    ssu11_heads_finish(p, H);  // after the loads of the rows it gave are issued
    Ssu11Tile<VEC> T;
    // One chunk: its tile's values when it starts a tile, the update, and the load of the chunk
    // two ahead into the same registers (ROLL: vector by vector inside the update, its row read
    // before it; else after it).
    auto step = [&](uint4 (&q)[CH], i64& s, bool more) {
        if (cu.t != T.t) tile_for(T, cu, s);
        if (ROLL) {
            const unsigned char* nsrc = nullptr;
            if (more) {
                s = srow_for(ld);
                ssu11_heads_finish(p, H);
                nsrc = ssu11_src<ST, CH>(state, ld, s, lane);
            }
            ssu11_chunk<ST, SR, CH, HOIST, OUTV, true, XB>(p, T, cu.k, q, nsrc, state, out, lane);
        } else {
            ssu11_chunk<ST, SR, CH, HOIST, OUTV, false, XB>(p, T, cu.k, q, nullptr, state, out, lane);
            if (more) {
                // in the loop a refill finishes first (after the issue its chain would hold
                // registers beside two chunks: the c4 / c8 register forms spilled)
                s = srow_for(ld);
                ssu11_heads_finish(p, H);
                ssu11_issue<ST, CH>(state, ld, s, lane, q);
            }
        }
        if (more) ld.next(W);
        cu.next(W);
    };
    for (i64 c = 0; c < W.count; c += 2) {
        step(qa, sa, c + 2 < W.count);
        if (c + 1 >= W.count) break;
        step(qb, sb, c + 3 < W.count);
    }
}

#define SSU11_ENTRY(NAME, ST, SR, CH, MINB) SSU11_ENTRY_RSI(NAME, ST, SR, CH, MINB, false, 0, false)
#define SSU11_ENTRY_R(NAME, ST, SR, CH, MINB, ROLL) SSU11_ENTRY_RSI(NAME, ST, SR, CH, MINB, ROLL, 0, false)
#define SSU11_ENTRY_RS(NAME, ST, SR, CH, MINB, ROLL, STAGES) \
    SSU11_ENTRY_RSI(NAME, ST, SR, CH, MINB, ROLL, STAGES, false)
#define SSU11_ENTRY_RSI(NAME, ST, SR, CH, MINB, ROLL, STAGES, IL) \
    SSU11_ENTRY_X(NAME, ST, SR, CH, MINB, ROLL, STAGES, IL, false, false)
// XB: x / B / C / z / out in bf16 (ssu11_tile); the host picks these `_xb` entries when every one
// of them is exactly a bf16 value and x's dtype is bf16 (gpu/src/ops/selective_state_update.rs).
// BS: the staged forms' bulk stores of whole chunks (`_b`, ssu_v11_body).
#define SSU11_ENTRY_X(NAME, ST, SR, CH, MINB, ROLL, STAGES, IL, XB, BS)                                        \
    extern "C" __global__ void __launch_bounds__(SSU11_THREADS, MINB) NAME(                                    \
        SsuParams p, const float* __restrict__ x, const float* __restrict__ dt, const float* __restrict__ A, \
        const float* __restrict__ B, const float* __restrict__ C, const float* __restrict__ D,              \
        const float* __restrict__ z, const float* __restrict__ dt_bias, const i64* __restrict__ sbi,        \
        void* __restrict__ state, float* __restrict__ state_scale, float* __restrict__ out) {               \
        DUET_PDL_DEFERRED(); /* the body waits after its parameter-only prologue */                         \
        (void)state_scale;                                                                                  \
        __shared__ uint4 ring[STAGES > 0 ? SSU11_THREADS / 32 * STAGES * CH * 32 : 1];                      \
        const bool hoist = !(p.dt_per_dim || (p.has_bias && p.bias_per_dim));                               \
        if (hoist && p.out_from == 1)                                                                       \
            ssu_v11_body<ST, SR, CH, true, true, ROLL, STAGES, IL, XB, BS>(p, x, dt, A, B, C, D, z, dt_bias, sbi, state, out, ring);         \
        else if (hoist)                                                                                     \
            ssu_v11_body<ST, SR, CH, true, false, ROLL, STAGES, IL, XB, BS>(p, x, dt, A, B, C, D, z, dt_bias, sbi, state, out, ring);        \
        else if (p.out_from == 1)                                                                           \
            ssu_v11_body<ST, SR, CH, false, true, ROLL, STAGES, IL, XB, BS>(p, x, dt, A, B, C, D, z, dt_bias, sbi, state, out, ring);        \
        else                                                                                                \
            ssu_v11_body<ST, SR, CH, false, false, ROLL, STAGES, IL, XB, BS>(p, x, dt, A, B, C, D, z, dt_bias, sbi, state, out, ring);       \
    }
// v11 itself walks interleaved since session 28 (call 2: the bf16 _i forms 4-5% faster at
// batch 256 than the same forms with contiguous ranges; below one tile a warp both walks are
// the same).
SSU11_ENTRY_RSI(ssu_v11_f32, ST_F32, false, 8, 3, false, 0, true)
SSU11_ENTRY_RSI(ssu_v11_bf16, ST_BF16, false, 8, 3, false, 0, true)
SSU11_ENTRY_RSI(ssu_v11_f16, ST_F16, false, 8, 3, false, 0, true)
SSU11_ENTRY_RSI(ssu_v11_f16_sr, ST_F16, true, 8, 3, false, 0, true)
// Sweep forms (bf16, nearest): chunk depth x resident blocks asked of ptxas. Session 26 also had
// c16_m2 (255 registers; 364-367 us at batch 256 against c4_m4's 319-320, the slowest form in
// both runs: dropped in session 27, when the division-free indices left it an 8-byte stack).
// Session 27: c2 (half of c4's state in registers at the same 4 blocks an SM), and the rolling
// reloads (ROLL) on it (on c4 they spill 8 bytes at 128 registers; c8 with ROLL spills 80 at
// 168). A fifth or sixth block does not fit: c4 at 102 registers spills 624 bytes, c2 at 85 528
// (ptxas, all four bodies; ~70 of the registers are the tile's values, the loop's 64-bit indices
// and the heads table, not the chunks).
SSU11_ENTRY(ssu_x11_bf16_c4_m4, ST_BF16, false, 4, 4)
SSU11_ENTRY(ssu_x11_bf16_c2_m4, ST_BF16, false, 2, 4)
SSU11_ENTRY_R(ssu_x11_bf16_c2_m4_r, ST_BF16, false, 2, 4, true)
// Staged forms (STAGES chunks a warp in shared memory through cp.async; see ssu_v11_body).
SSU11_ENTRY_RS(ssu_x11_bf16_c4_m4_s4, ST_BF16, false, 4, 4, false, 4)
SSU11_ENTRY_RS(ssu_x11_bf16_c4_m4_s6, ST_BF16, false, 4, 4, false, 6)
// (c4 at 5 / 6 blocks still spills: 120 / 792 bytes; c2 at 6 with 8 stages 400.)
SSU11_ENTRY_RS(ssu_x11_bf16_c8_m3_s3, ST_BF16, false, 8, 3, false, 3)
// Session 28: the interleaved walk (Ssu11Walk: whole tiles round-robin over the warps first).
SSU11_ENTRY_RSI(ssu_x11_bf16_c8_m3_s3_i, ST_BF16, false, 8, 3, false, 3, true)
SSU11_ENTRY_RSI(ssu_x11_bf16_c4_m4_s4_i, ST_BF16, false, 4, 4, false, 4, true)
// Session 29: groups of G consecutive tiles dealt round-robin (IL = G; G = 1 is `_i`): c8_m3_s3
// with 64 KiB (g4) and 256 KiB (g16) groups, after copy_v13 / v14's tile-size sweep.
SSU11_ENTRY_RSI(ssu_x11_bf16_c8_m3_s3_g4, ST_BF16, false, 8, 3, false, 3, 4)
SSU11_ENTRY_RSI(ssu_x11_bf16_c8_m3_s3_g16, ST_BF16, false, 8, 3, false, 3, 16)
// Session 30: the bf16 small-operand forms of what `auto` runs (x / B / C / z / out in bf16).
SSU11_ENTRY_X(ssu_v11_f32_xb, ST_F32, false, 8, 3, false, 0, true, true, false)
SSU11_ENTRY_X(ssu_v11_bf16_xb, ST_BF16, false, 8, 3, false, 0, true, true, false)
SSU11_ENTRY_X(ssu_v11_f16_xb, ST_F16, false, 8, 3, false, 0, true, true, false)
SSU11_ENTRY_X(ssu_v11_f16_sr_xb, ST_F16, true, 8, 3, false, 0, true, true, false)
SSU11_ENTRY_X(ssu_x11_bf16_c4_m4_xb, ST_BF16, false, 4, 4, false, 0, false, true, false)
SSU11_ENTRY_X(ssu_x11_bf16_c8_m3_s3_i_xb, ST_BF16, false, 8, 3, false, 3, true, true, false)
// Session 30: c8_m3_s3_i with bulk stores of whole chunks from the ring (FlashInfer's vertical
// kernel stores its stages with the bulk tensor copy; 279.8 us at batch 256 against duet's 284.2).
SSU11_ENTRY_X(ssu_x11_bf16_c8_m3_s3_i_b, ST_BF16, false, 8, 3, false, 3, true, false, true)
SSU11_ENTRY_X(ssu_x11_bf16_c8_m3_s3_i_b_xb, ST_BF16, false, 8, 3, false, 3, true, true, true)
// (call 2 also had c8_m3_i, the register c8 form walked interleaved: 296.7 / 297.2 us at batch
// 256, 78.2 at 64; it is v11 itself since.)

// ---------------------------------------------------------------------------------------------
// v12 (session 31): small batches. One block a tile (batch row, head), 512 threads, the tile's
// state straight into registers, nothing persistent and no walk. Session 29's ncu had v11 at
// batch 1 bound by one ~1,400-instruction chain a warp (the walk, the heads table, the f64
// softplus / exp, the tile's values, the chunk, the row sums); FlashInfer's horizontal kernel
// (one block a head) ran 3.98-4.07 us there against c4_m4's 4.54 (session 30). Here a lane
// holds 16 elements of one row (8 lanes a row, 4 rows a warp, 64 rows a block pass) and its
// chain is: the slot, the state / B / C loads, then one barrier behind which threads 0..63 have
// put their row's values (x, x * D, the z gate, dt', dA: v11's expressions, so the same bits)
// into shared memory, the update (ssu11_vec), three shuffles, the stores. The f64 softplus / exp
// run in two warps only (per head: 64 copies of one chain) while the state loads are in flight.
// `out` sums in a different order than v11 (within tolerance, as v11's); the state is bit-exact.
#define SSU12_THREADS 512
#define SSU12_ROWS 64  // rows a block pass: 16 warps x 4 rows

template <int ST, bool SR, bool OUTV, bool XB>
__device__ __forceinline__ void ssu_v12_body(const SsuParams& p, const float* __restrict__ x,
                                             const float* __restrict__ dt, const float* __restrict__ A,
                                             const float* __restrict__ B, const float* __restrict__ C,
                                             const float* __restrict__ D, const float* __restrict__ z,
                                             const float* __restrict__ dt_bias, const i64* __restrict__ sbi,
                                             void* __restrict__ state_v, float* __restrict__ out,
                                             float* __restrict__ rv) {
    constexpr int VEC = Ssu3Elem<ST>::VEC, ESZ = 16 / VEC;
    constexpr int NE = 16;                  // elements a lane
    constexpr int NV = NE / VEC;            // 16-byte vectors a lane: 2 (16-bit states), 4 (f32)
    constexpr int TPR = SSU11_DSTATE / NE;  // lanes a row: 8
    constexpr int RPW = 32 / TPR;           // rows a warp: 4
    static_assert(RPW * (SSU12_THREADS / 32) == SSU12_ROWS, "v12 block shape");
    // the rows' values: rv = the entry's shared array of 5 x SSU12_ROWS floats
    float* s_x = rv;
    float* s_xd = rv + SSU12_ROWS;
    float* s_gate = rv + 2 * SSU12_ROWS;
    float* s_dt = rv + 3 * SSU12_ROWS;
    float* s_da = rv + 4 * SSU12_ROWS;
    unsigned char* state = (unsigned char*)state_v;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int lr = lane / TPR, lc = lane % TPR;
    const i64 t = blockIdx.x;  // tile: b * nheads + h (the host keeps the grid below 2^31)
    const i64 b = t / p.nheads, h = t - b * p.nheads;
    const i64 g = h / (p.nheads / p.ngroups);
    const i64 row0 = t * p.dim;  // the tile's first row of x / z / out / per-dim dt
    const i64 goff = (b * p.ngroups + g) * SSU11_DSTATE;
    // As v11: the parameters' constant-cache misses before the programmatic wait.
    const i64 touch = p.nheads ^ p.has_z ^ p.softplus ^ (i64)x ^ (i64)z ^ (i64)out;
    asm volatile("" ::"l"(touch));
    DUET_PDL_ENTRY();  // no global memory is read or written above
    const i64 slot = p.has_sbi ? sbi[b] : b;
    const bool pad = p.has_sbi && slot == p.pad_slot_id;
    const i64 srow0 = (slot * p.nheads + h) * p.dim;  // the slot's first state row
    for (i64 r0 = 0; r0 < p.dim; r0 += SSU12_ROWS) {
        const i64 d = r0 + warp * RPW + lr;  // this lane's row
        const bool live = d < p.dim;
        // vector j of the lane: columns (j * TPR + lc) * VEC .. + VEC (a row's 8 lanes read 128
        // contiguous bytes a vector)
        const i64 e0 = (srow0 + (live ? d : 0)) * SSU11_DSTATE + (i64)lc * VEC;  // element of vector 0
        unsigned char* sp = state + e0 * ESZ;
        // Program order = issue order: B / C and the rows' operands first (none waits for the
        // slot), then the state (behind the slot's load), then the rows' f64 chain.
        Ssu11Tile<VEC> T[NV];
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            T[j].pad = pad;
            const i64 n = (i64)(j * TPR + lc) * VEC;
            if constexpr (XB) {
                const uint4 b8 = *(const uint4*)((const u16*)B + goff + n);
                const uint4 c8 = *(const uint4*)((const u16*)C + goff + n);
                const u32 bw[4] = {b8.x, b8.y, b8.z, b8.w}, cw[4] = {c8.x, c8.y, c8.z, c8.w};
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    T[j].bv[k] = __uint_as_float(k & 1 ? bw[k / 2] & 0xffff0000u : bw[k / 2] << 16);
                    T[j].cv[k] = __uint_as_float(k & 1 ? cw[k / 2] & 0xffff0000u : cw[k / 2] << 16);
                }
            } else {
#pragma unroll
                for (int k4 = 0; k4 < VEC; k4 += 4) {
                    const float4 b4 = *(const float4*)(B + goff + n + k4), c4 = *(const float4*)(C + goff + n + k4);
                    T[j].bv[k4] = b4.x; T[j].bv[k4 + 1] = b4.y; T[j].bv[k4 + 2] = b4.z; T[j].bv[k4 + 3] = b4.w;
                    T[j].cv[k4] = c4.x; T[j].cv[k4 + 1] = c4.y; T[j].cv[k4 + 2] = c4.z; T[j].cv[k4 + 3] = c4.w;
                }
            }
        }
        // The rows' operands (v11's ssu11_tile expressions), one thread a row.
        const i64 rd = r0 + tid;
        const bool rower = tid < SSU12_ROWS && rd < p.dim;
        float xv = 0.f, zv = 0.f, dv = 0.f, dtv = 0.f, ah = 0.f;
        if (rower) {
            xv = XB ? bf16_to_f32(((const u16*)x)[row0 + rd]) : x[row0 + rd];
            zv = p.has_z ? (XB ? bf16_to_f32(((const u16*)z)[row0 + rd]) : z[row0 + rd]) : 0.f;
            dv = p.has_d ? (p.d_per_dim ? D[h * p.dim + rd] : D[h]) : 0.f;
            dtv = p.dt_per_dim ? dt[row0 + rd] : dt[b * p.nheads + h];
            if (p.has_bias) dtv = __fadd_rn(dtv, p.bias_per_dim ? dt_bias[h * p.dim + rd] : dt_bias[h]);
            ah = A[h];
        }
        uint4 q[NV];
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            q[j] = make_uint4(0u, 0u, 0u, 0u);
            if (live && !pad) q[j] = *(const uint4*)(sp + (i64)j * TPR * 16);
        }
        if (rower) {
            s_x[tid] = xv;
            s_gate[tid] = p.has_z ? zv / (1.f + expf(-zv)) : 1.f;
            s_xd[tid] = xv * dv;
            if (p.softplus && dtv <= 20.f) dtv = (float)log1p(exp((double)dtv));
            s_dt[tid] = dtv;
            s_da[tid] = (float)exp((double)__fmul_rn(ah, dtv));
        }
        __syncthreads();
        const int rl = warp * RPW + lr;  // the row's index in the pass
        const float xr = s_x[rl], dtr = s_dt[rl], dA = s_da[rl];
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            uint4 qo;
            acc += ssu11_vec<ST, SR, false, OUTV>(p, T[j], q[j], xr, dtr, dA, e0 + (i64)j * TPR * VEC, qo);
            if (live && !pad) *(uint4*)(sp + (i64)j * TPR * 16) = qo;
        }
#pragma unroll
        for (int o = TPR / 2; o >= 1; o >>= 1) acc += __shfl_xor_sync(DUET_FULL_MASK, acc, o);
        if (lc == 0 && live) {
            float o = acc;
            if (p.has_d) o += s_xd[rl];
            if (p.has_z) o *= s_gate[rl];
            o = (pad && p.pad_mode == 0) ? 0.f : o;
            if (XB) ((u16*)out)[row0 + d] = f32_to_bf16(o);
            else out[row0 + d] = o;
        }
        if (r0 + SSU12_ROWS < p.dim) __syncthreads();  // the next pass rewrites the row values
    }
}

// MINB: blocks an SM asked of ptxas (v12: 1, up to 128 registers; the m2 form: 2, 64 registers,
// so two tiles share an SM: batch 2's 256 tiles in one wave).
#define SSU12_ENTRY(NAME, ST, SR, XB) SSU12_ENTRY_M(NAME, ST, SR, XB, 1)
#define SSU12_ENTRY_M(NAME, ST, SR, XB, MINB)                                                                  \
    extern "C" __global__ void __launch_bounds__(SSU12_THREADS, MINB) NAME(                                       \
        SsuParams p, const float* __restrict__ x, const float* __restrict__ dt, const float* __restrict__ A, \
        const float* __restrict__ B, const float* __restrict__ C, const float* __restrict__ D,              \
        const float* __restrict__ z, const float* __restrict__ dt_bias, const i64* __restrict__ sbi,        \
        void* __restrict__ state, float* __restrict__ state_scale, float* __restrict__ out) {               \
        DUET_PDL_DEFERRED(); /* the body waits after its parameter-only prologue */                         \
        (void)state_scale;                                                                                  \
        __shared__ float rv[5 * SSU12_ROWS];                                                                \
        if (p.out_from == 1)                                                                                \
            ssu_v12_body<ST, SR, true, XB>(p, x, dt, A, B, C, D, z, dt_bias, sbi, state, out, rv);           \
        else                                                                                                \
            ssu_v12_body<ST, SR, false, XB>(p, x, dt, A, B, C, D, z, dt_bias, sbi, state, out, rv);          \
    }
SSU12_ENTRY(ssu_v12_f32, ST_F32, false, false)
SSU12_ENTRY(ssu_v12_bf16, ST_BF16, false, false)
SSU12_ENTRY(ssu_v12_f16, ST_F16, false, false)
SSU12_ENTRY(ssu_v12_f16_sr, ST_F16, true, false)
SSU12_ENTRY(ssu_v12_f32_xb, ST_F32, false, true)
SSU12_ENTRY(ssu_v12_bf16_xb, ST_BF16, false, true)
SSU12_ENTRY(ssu_v12_f16_xb, ST_F16, false, true)
SSU12_ENTRY(ssu_v12_f16_sr_xb, ST_F16, true, true)
SSU12_ENTRY_M(ssu_x12_bf16_m2, ST_BF16, false, false, 2)
SSU12_ENTRY_M(ssu_x12_bf16_m2_xb, ST_BF16, false, true, 2)

// gpu_ssu `v11_nan_steps_match_the_software_ones`: v11's element step (hardware conversions in
// and out, no NaN handling) against the same step through common.cuh's software conversions
// (which keep payloads) for every NaN: thread i of the grid-stride loop over [0, 2^24) takes the
// f32 NaN with sign i >> 23 and mantissa i & 0x7fffff (i with mantissa 0, an infinity, is
// skipped) as the state, as the (B * dt) * x term and as both, and rounds s * dA + term to bf16
// and f16 both ways; i < 2^16 with an f16 NaN code also decodes it both ways and steps it.
// Counts the differing cases in bad[0], keeps the largest differing i in bad[1] and counts the
// NaN inputs tried in bad[2].
extern "C" __global__ void ssu11_nan_check(unsigned long long* bad) {
    DUET_PDL_ENTRY();
    const u64 stride = (u64)gridDim.x * blockDim.x;
    unsigned long long n = 0, last = 0, seen = 0;
    const float dA = 0.75f, term = 0.5f;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 24); i += stride) {
        bool ok = true;
        const u32 m = (u32)i & 0x7fffffu;
        if (m != 0) {
            ++seen;
            const float xn = __uint_as_float(((u32)(i >> 23) << 31) | 0x7f800000u | m);
            const float r[3] = {__fadd_rn(__fmul_rn(xn, dA), term), __fadd_rn(__fmul_rn(1.25f, dA), xn),
                                __fadd_rn(__fmul_rn(xn, dA), xn)};
#pragma unroll
            for (int k = 0; k < 3; ++k) {
                const u32 b = ssu11_bf16x2(r[k], r[k]), h = ssu11_f16x2(r[k], r[k]);
                const u32 bw = f32_to_bf16(r[k]), hw = f32_to_f16(r[k]);
                ok &= b == (bw | (bw << 16)) && h == (hw | (hw << 16));
            }
        }
        if (i < (1u << 16) && ((u32)i & 0x7fffu) > 0x7c00u) {
            ++seen;
            const u32 code = (u32)i;
            float hwv[8], swv[8];
            const uint4 q = make_uint4(code | (code << 16), 0x3c003c00u, 0x3c003c00u, 0x3c003c00u);
            ssu11_f16x8_to_f32(q, hwv);
            ssu_f16x8_to_f32(q, swv);
            const float a = __fadd_rn(__fmul_rn(hwv[0], dA), term), b = __fadd_rn(__fmul_rn(swv[0], dA), term);
            ok &= __float_as_uint(a) == __float_as_uint(b) && ssu11_f16x2(a, a) == ((u32)f32_to_f16(b) * 0x10001u) &&
                  ssu11_bf16x2(a, a) == ((u32)f32_to_bf16(b) * 0x10001u);
        }
        if (!ok) { ++n; last = i; }
    }
    if (n) {
        atomicAdd(&bad[0], n);
        atomicMax(&bad[1], last);
    }
    atomicAdd(&bad[2], seen);
}

// gpu_ssu `f16_hardware_conversions_match_the_software_ones`: thread i of the grid-stride loop
// rounds the vector (x, -x, x, -x, ...) with x = base + i (the chunk [base, base + count) of
// the f32 bit patterns) through ssu_f16x8_rn and through f32_to_f16 / f16_to_f32 (codes and
// stored values), its stochastic rounding with random word i * 0x9E3779B9 through
// ssu_sr_f16_sel and stochastic_round_f16, and (base == 0, i < 2^19) the f16 vector of 1.0s
// holding h = i % 2^16 at position i / 2^16 through ssu_f16x8_to_f32 and f16_to_f32. Counts
// the differing results in bad[0], keeps the largest differing input in bad[1] (f16 inputs as
// 0x1_0000_0000 + i) and counts the vectors compared in bad[2].
extern "C" __global__ void ssu_f16_cvt_check(u64 base, u64 count, unsigned long long* bad) {
    DUET_PDL_ENTRY();
    const u64 stride = (u64)gridDim.x * blockDim.x;
    unsigned long long n = 0, last = 0, seen = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        ++seen;
        const u32 x = (u32)(base + i);
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = __uint_as_float(x ^ (k & 1 ? 0x80000000u : 0u));
        uint4 q;
        ssu_f16x8_rn(v, q);
        const u32 w[4] = {q.x, q.y, q.z, q.w};
        bool ok = true;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float in = __uint_as_float(x ^ (k & 1 ? 0x80000000u : 0u));
            const u16 want = f32_to_f16(in);
            const u16 got = (u16)(w[k / 2] >> (16 * (k & 1)));
            ok &= got == want && __float_as_uint(v[k]) == __float_as_uint(f16_to_f32(want));
        }
        const u32 rnd = (u32)(base + i) * 0x9E3779B9u;
        const float a = __uint_as_float(x);
        ok &= ssu_sr_f16_sel(a, rnd) == stochastic_round_f16(a, rnd);
        if (!ok) { ++n; last = x; }
        if (base == 0 && i < (1u << 19)) {
            ++seen;
            const u32 h = (u32)(i & 0xffffu), pos = (u32)(i >> 16);
            u32 hw[4] = {0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};
            hw[pos / 2] = (hw[pos / 2] & ~(0xffffu << (16 * (pos & 1)))) | (h << (16 * (pos & 1)));
            float f[8];
            ssu_f16x8_to_f32(make_uint4(hw[0], hw[1], hw[2], hw[3]), f);
            bool ok2 = true;
#pragma unroll
            for (int k = 0; k < 8; ++k)
                ok2 &= __float_as_uint(f[k]) == __float_as_uint(f16_to_f32((u16)(hw[k / 2] >> (16 * (k & 1)))));
            if (!ok2) { ++n; last = 0x100000000ull | i; }
        }
    }
    if (n) {
        atomicAdd(&bad[0], n);
        atomicMax(&bad[1], last);
    }
    atomicAdd(&bad[2], seen);
}
