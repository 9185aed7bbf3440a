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
// over >= 256 MB; docs/measurements/h200_ssu_v1_v2_bench.json): v1 batch 1 bf16 20.2 us (graph
// replay), batch 64 bf16 1046 us, batch 256 bf16 4171 us (0.27 TB/s), batch 256 f32 3641 us;
// v2 is slower (77 / 1616 / 6333 / 4465 us). Both are far from the copy ceiling (3.9 TB/s): the
// one-kernel-for-every-mode design keeps the stochastic-rounding Philox path and all four state
// formats in one body (register pressure; a suspected local-memory spill, unverified without
// ncu). The next step is a kernel specialised per (state dtype, rounding) at compile time with
// 16-byte state accesses (the seed's v1), then the TMA producer/consumer version.
//
// Bit-exactness: s' = (s*dA) + ((B*dt)*x) uses __fmul_rn/__fadd_rn (no FMA contraction, the
// reference's operand order), and exp / softplus are evaluated in double and rounded once to
// f32, as the reference does: so the stored state (and its stochastic rounding) is bit-identical
// to the reference. `out` sums in another order than the reference's 8 partial sums: it is
// compared with the upstream fp32 tolerance.
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
#define ST_F32 0
#define ST_BF16 1
#define ST_F16 2
#define ST_I16 3

__device__ __forceinline__ float ssu_load_state(const void* st, i64 i, i64 dt, float decode) {
    switch (dt) {
        case ST_F32: return ((const float*)st)[i];
        case ST_BF16: return bf16_to_f32(((const u16*)st)[i]);
        case ST_F16: return f16_to_f32(((const u16*)st)[i]);
        default: return __fmul_rn((float)((const short*)st)[i], decode);
    }
}


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
