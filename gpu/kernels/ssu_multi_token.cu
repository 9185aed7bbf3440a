// selective_state_update_multi_token and mamba_cache_promote (MTP verification and acceptance,
// SPEC.md "Multi-token"). CPU spec: reference/src/ops/selective_state_update_multi_token.rs and
// reference/src/ops/mamba_cache_promote.rs.
//
// Versions:
//   v1  ssu_mt_v1: one warp per (batch row, head, dim row d), lanes stride over dstate (<= 512,
//       16 register slots per lane), the T steps in a loop. The carried state stays in registers
//       (fp32: chain_from = unrounded_state, or the stored value: stored_state); with
//       parent_indices (EAGLE trees) every step's carried state also goes to an fp32 scratch
//       (batch, T, nheads, dim, dstate) that the same lane reads back, so no synchronisation is
//       needed. Step t stores intermediate_states[b, t] in the state dtype with the rounding of
//       a single-token call with seed + t and the cache slot's element offsets (pad rows: round
//       to nearest), int16 with its own per-row scale. Unless disable_state_update, the cache
//       slot gets the last intermediate row bit for bit (and its scale).
//   promote_v1: mamba_cache_promote: one block per (batch row, 4096-byte chunk), 16-byte copies
//       where both sides are 16-byte aligned, byte copies otherwise.
//
// Per element the arithmetic is that of ssu_v1 (selective_state_update.cu): __fmul_rn /
// __fadd_rn in the reference's operand order, exp / softplus in double rounded once, so every
// stored state is bit-identical to the reference. All offsets are 64-bit.

struct SsuMtParams {
    i64 batch, t_len, nheads, dim, dstate, ngroups;
    i64 pad_slot_id;
    i64 dt_per_dim, a_full, d_per_dim, bias_per_dim;
    i64 has_d, has_z, has_bias, has_sbi, has_parents;
    i64 softplus, pad_mode, out_from, state_dt;
    i64 sr, sr_mapping, rounds, chain_stored, write_cache;
    u64 seed;
};

#define MT_MAX_PER_LANE 16
// State formats (ST_*) and ssu_load_state: common.cuh.

// Rounds s1 into the state format, writes it at dst[i] and returns the stored value. `sr_off`
// is the element offset the Philox counter uses (the cache slot's), `seed` the step's key.
__device__ __forceinline__ float mt_store(const SsuMtParams& p, void* dst, i64 i, float s1, bool use_sr,
                                          u64 seed, i64 sr_off, float encode, float decode) {
    switch (p.state_dt) {
        case ST_F32:
            ((float*)dst)[i] = s1;
            return s1;
        case ST_BF16: {
            const u16 q = f32_to_bf16(s1);
            ((u16*)dst)[i] = q;
            return bf16_to_f32(q);
        }
        case ST_F16: {
            u16 q;
            if (use_sr) {
                u32 w;
                if (p.sr_mapping == 1) {
                    const u32x4 r = philox_seed_offset(seed, (u64)sr_off >> 2, (int)p.rounds);
                    const u32 k = (u32)((u64)sr_off & 3u);
                    w = k == 0 ? r.x : k == 1 ? r.y : k == 2 ? r.z : r.w;
                } else {
                    w = philox_seed_offset(seed, (u64)sr_off, (int)p.rounds).x;
                }
                q = stochastic_round_f16(s1, w);
            } else {
                q = f32_to_f16(s1);
            }
            ((u16*)dst)[i] = q;
            return f16_to_f32(q);
        }
        default: {
            const float qf = rintf(fminf(fmaxf(__fmul_rn(s1, encode), -32767.f), 32767.f));
            ((short*)dst)[i] = (short)qf;
            return __fmul_rn(qf, decode);
        }
    }
}

__device__ __forceinline__ void mt_copy_elem(const SsuMtParams& p, void* dst, i64 di, const void* src, i64 si) {
    if (p.state_dt == ST_F32) ((float*)dst)[di] = ((const float*)src)[si];
    else ((u16*)dst)[di] = ((const u16*)src)[si];
}

extern "C" __global__ void ssu_mt_v1(SsuMtParams p, const float* __restrict__ x, const float* __restrict__ dt,
                                     const float* __restrict__ A, const float* __restrict__ B,
                                     const float* __restrict__ C, const float* __restrict__ D,
                                     const float* __restrict__ z, const float* __restrict__ dt_bias,
                                     const i64* __restrict__ sbi, const i64* __restrict__ parents,
                                     void* __restrict__ state, float* __restrict__ state_scale,
                                     void* __restrict__ inter, float* __restrict__ inter_scale,
                                     float* __restrict__ hist, float* __restrict__ out) {
    const int lane = threadIdx.x & 31;
    const i64 wpb = blockDim.x >> 5;
    const i64 dtiles = (p.dim + wpb - 1) / wpb;
    const i64 bh = (i64)blockIdx.x / dtiles;
    const i64 d = ((i64)blockIdx.x % dtiles) * wpb + (threadIdx.x >> 5);
    if (d >= p.dim || bh >= p.batch * p.nheads) return;
    const i64 b = bh / p.nheads, h = bh % p.nheads;
    const i64 slot = p.has_sbi ? sbi[b] : b;
    const bool pad = p.has_sbi && slot == p.pad_slot_id;
    const i64 srow_idx = pad ? 0 : (slot * p.nheads + h) * p.dim + d;  // cache row (valid when !pad)
    const i64 g = h / (p.nheads / p.ngroups);
    if (pad && p.pad_mode == 0) {
        for (i64 t = 0; t < p.t_len; ++t) {
            const i64 irow = ((b * p.t_len + t) * p.nheads + h) * p.dim + d;
            for (i64 n = lane; n < p.dstate; n += 32) {
                if (p.state_dt == ST_F32) ((float*)inter)[irow * p.dstate + n] = 0.f;
                else ((u16*)inter)[irow * p.dstate + n] = 0;
            }
            if (lane == 0) {
                out[irow] = 0.f;
                if (p.state_dt == ST_I16) inter_scale[irow] = 1.f;
            }
        }
        return;
    }
    float sv[MT_MAX_PER_LANE];
    {
        const float dec = (p.state_dt == ST_I16 && !pad) ? state_scale[srow_idx] : 1.f;
#pragma unroll
        for (int i = 0; i < MT_MAX_PER_LANE; ++i) {
            const i64 n = lane + 32 * (i64)i;
            sv[i] = (n < p.dstate && !pad) ? ssu_load_state(state, srow_idx * p.dstate + n, p.state_dt, dec) : 0.f;
        }
    }
    const bool use_sr = p.sr && !pad;
    for (i64 t = 0; t < p.t_len; ++t) {
        const i64 r = b * p.t_len + t;  // token row
        const i64 irow = (r * p.nheads + h) * p.dim + d;
        if (t > 0 && p.has_parents) {
            const i64 par = parents[r];
            const i64 from = par >= 0 ? par : t - 1;
            const i64 hrow = ((b * p.t_len + from) * p.nheads + h) * p.dim + d;
#pragma unroll
            for (int i = 0; i < MT_MAX_PER_LANE; ++i) {
                const i64 n = lane + 32 * (i64)i;
                if (n < p.dstate) sv[i] = hist[hrow * p.dstate + n];
            }
        }
        float dtv = p.dt_per_dim ? dt[irow] : dt[r * p.nheads + h];
        if (p.has_bias) dtv = __fadd_rn(dtv, p.bias_per_dim ? dt_bias[h * p.dim + d] : dt_bias[h]);
        if (p.softplus && dtv <= 20.f) dtv = (float)log1p(exp((double)dtv));
        const float xv = x[irow];
        const float* Bg = B + (r * p.ngroups + g) * p.dstate;
        const float* Cg = C + (r * p.ngroups + g) * p.dstate;
        const float dA_head = p.a_full ? 0.f : (float)exp((double)__fmul_rn(A[h], dtv));
        float amax = 0.f;
#pragma unroll
        for (int i = 0; i < MT_MAX_PER_LANE; ++i) {
            const i64 n = lane + 32 * (i64)i;
            if (n < p.dstate) {
                const float dA = p.a_full ? (float)exp((double)__fmul_rn(A[(h * p.dim + d) * p.dstate + n], dtv)) : dA_head;
                sv[i] = __fadd_rn(__fmul_rn(sv[i], dA), __fmul_rn(__fmul_rn(Bg[n], dtv), xv));
                amax = fmaxf(amax, fabsf(sv[i]));
            }
        }
        float encode = 1.f, decode = 1.f;
        if (p.state_dt == ST_I16) {
            amax = warp_max_f32(amax);
            encode = amax == 0.f ? 1.f : __fdiv_rn(32767.f, amax);
            decode = __fdiv_rn(1.f, encode);
        }
        const u64 seed_t = p.seed + (u64)t;
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < MT_MAX_PER_LANE; ++i) {
            const i64 n = lane + 32 * (i64)i;
            if (n < p.dstate) {
                const float stv = mt_store(p, inter, irow * p.dstate + n, sv[i], use_sr, seed_t,
                                           srow_idx * p.dstate + n, encode, decode);
                acc += (p.out_from == 1 ? stv : sv[i]) * Cg[n];
                if (p.chain_stored) sv[i] = stv;
                if (p.has_parents) hist[irow * p.dstate + n] = sv[i];
            }
        }
        acc = warp_sum_f32(acc);
        if (lane == 0) {
            if (p.state_dt == ST_I16) inter_scale[irow] = decode;
            float o = acc;
            if (p.has_d) o += xv * (p.d_per_dim ? D[h * p.dim + d] : D[h]);
            if (p.has_z) {
                const float zv = z[irow];
                o *= zv / (1.f + expf(-zv));
            }
            out[irow] = o;
        }
    }
    if (p.write_cache && !pad && p.t_len > 0) {
        const i64 last = ((b * p.t_len + p.t_len - 1) * p.nheads + h) * p.dim + d;
        __syncwarp();
        for (i64 n = lane; n < p.dstate; n += 32) mt_copy_elem(p, state, srow_idx * p.dstate + n, inter, last * p.dstate + n);
        if (lane == 0 && p.state_dt == ST_I16) state_scale[srow_idx] = inter_scale[last];
    }
}

// mamba_cache_promote: dst[slot(b)] = src[b, accepted[b] - 1] for rows with accepted > 0 and a
// slot (not pad). `bytes` per slot; grid (chunks of 4096 bytes, batch).
struct PromoteParams {
    i64 batch, t_len, bytes, slots, pad_slot_id, has_sbi;
};

extern "C" __global__ void promote_v1(PromoteParams p, const i64* __restrict__ accepted, const i64* __restrict__ sbi,
                                      u8* __restrict__ dst, const u8* __restrict__ src) {
    const i64 b = blockIdx.y;
    if (b >= p.batch) return;
    const i64 j = accepted[b];
    const i64 slot = p.has_sbi ? sbi[b] : b;
    if (j <= 0 || j > p.t_len || (p.has_sbi && slot == p.pad_slot_id) || slot < 0 || slot >= p.slots) return;
    const i64 lo = (i64)blockIdx.x * 4096, hi = lo + 4096 < p.bytes ? lo + 4096 : p.bytes;
    u8* d = dst + slot * p.bytes;
    const u8* s = src + (b * p.t_len + (j - 1)) * p.bytes;
    if (((((u64)d) | ((u64)s) | (u64)lo | (u64)hi) & 15u) == 0) {
        for (i64 o = lo + 16 * (i64)threadIdx.x; o < hi; o += 16 * (i64)blockDim.x)
            *(uint4*)(d + o) = *(const uint4*)(s + o);
    } else {
        for (i64 o = lo + threadIdx.x; o < hi; o += blockDim.x) d[o] = s[o];
    }
}
