// attention_mma.cu — the tensor-core attention kernels (bf16 and fp16 tables, head_dim 64 or 128, 16-byte aligned
// tensors) and their launchers: FA2-style kernels on mma.sync m16n8k16 (bf16 or fp16 in, fp32 accumulate) with
// ldmatrix fragments and cp.async double-buffered tiles (the device helpers: attention_tile.cuh). The kernels are
// templates on the 16-bit element type E; E changes only the mma instruction and the fp32 -> 16-bit packing (P and
// dS as mma operands, the outputs), not the algorithm.
//   forward : one block = 128 queries of one (batch, head), 4 warps x 32 rows (two 16-row m-tiles sharing every K/V
//             fragment); loops over 64-key tiles with an online softmax in fp32 (exp2 domain); saves
//             lse = m*scale + log(l) per row.
//   backward: after delta = rowsum(dout * out) (attention_generic.cu), two kernels that recompute P from lse:
//             dK/dV: one block = 64 keys of one (batch, query head), 4 warps x 16 keys; loops over the query tiles
//                    that can see the keys. GQA without copying K/V: with H > KV each query head writes fp32
//                    partials, which attn_gqa_reduce_kernel sums over the group in head order (one block per query
//                    head, not per kv head looping over the group, balances the causal work);
//             dQ   : one block = 128 queries (32 rows per warp), loops over 32-key tiles like the forward.
//             Separate dQ and dK/dV passes cost one extra recomputation of S and dP but need no atomics: the
//             backward is deterministic (bitwise the same every run).
// fp16 range (max 65504): nothing that is only an intermediate is stored in a 16-bit type except P (in [0, 1]) and
// dS = P (dP - delta) as mma operands, exactly as FlashAttention-2 does in fp16; S, the online-softmax state, lse,
// delta and every accumulator are fp32, the 1/sqrt(D) of dQ/dK is applied to the fp32 accumulator before the one
// rounding on store, and the GQA partials are summed in fp32. A dS (or an output) beyond 65504 means the gradients
// themselves overflow fp16: it becomes inf, and the trainer's overflow check skips the step and lowers the loss scale.
// Segments: seg_start is non-decreasing along a row (documents are contiguous), so a query tile [q0, q1] needs
// only keys [seg_start[q0], q1]: whole key tiles before the tile's first segment start are skipped, and the
// element mask (key > query or key < seg_start[query]) is applied only on tiles that straddle a boundary or the
// diagonal. Likewise a key tile is seen by queries up to the last t with seg_start[t] <= its last key.
#include "attention_impl.cuh"
#include "attention_tile.cuh"
#include <math.h>

// ---- the query tile of a forward or dQ block ------------------------------------------------------------------------
// BR queries from q0 of (batch b, head h), which attend to kv head g = h / (H / KV); late (long) tiles run first.
// With the segments the block visits key tiles j0..j1 of BC keys (whole tiles before its first query's segment start
// are skipped); seg_last is its last query's segment start.
template <int D, int BR, int BC> struct q_block {
    int b, h, g, q0, j0, j1, seg_last, Tn;
    size_t qst, kst;   // token strides of the query-side tensors (q, out, dout, dq) and of k, v
    const int32_t *sb; // seg_start of row b
    __device__ __forceinline__ q_block(const int32_t *seg, int Tn_, int H, int KV) {
        const int qt = gridDim.x - 1 - blockIdx.x;
        h = blockIdx.y, b = blockIdx.z, g = h / (H / KV);
        q0 = qt * BR;
        Tn = Tn_;
        qst = (size_t)H * D, kst = (size_t)KV * D;
        sb = seg + (size_t)b * Tn;
        const int qlast = min(q0 + BR, Tn) - 1;
        j0 = sb[q0] / BC, j1 = qlast / BC;
        seg_last = sb[qlast];
    }
    // this (batch, head)'s first row of a query-side tensor, of k or v
    template <typename T> __device__ __forceinline__ T *qrows(T *x) const {
        return x + (size_t)b * Tn * qst + (size_t)h * D;
    }
    template <typename T> __device__ __forceinline__ T *krows(T *x) const {
        return x + (size_t)b * Tn * kst + (size_t)g * D;
    }
    // the rows of the accumulator tiles (MT m-tiles from the warp's first row wr) that lane (gq, tq) holds, and their
    // segment starts (0 at or past Tn)
    template <int MT> __device__ __forceinline__ void rows(int (&rr)[MT][2], int (&ss)[MT][2], int wr, int gq) const {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const int r = q0 + wr + mt * 16 + gq + 8 * hf;
                rr[mt][hf] = r;
                ss[mt][hf] = r < Tn ? sb[r] : 0;
            }
    }
};

// ---- forward: 32 rows per warp (128-row query tiles), 64-key tiles -------------------------------------------------
template <int D> struct mma_fwd_cfg {
    static constexpr int MT = 2, NW = 4, BR = 16 * MT * NW, BC = 64, LD = D + 8;
    static constexpr size_t smem = (size_t)(BR + 4 * BC) * LD * 2 /* 16-bit elements */;
};

template <typename E, int D>
__global__ void __launch_bounds__(128, 1)
    attn_fwd_mma(E *__restrict__ out, float *__restrict__ lse, const E *__restrict__ q, const E *__restrict__ k,
                 const E *__restrict__ v, const int32_t *__restrict__ seg, int Tn, int H, int KV, float scale) {
    using namespace tc;
    using cfg = mma_fwd_cfg<D>;
    constexpr int MT = cfg::MT, BR = cfg::BR, BC = cfg::BC, LD = cfg::LD;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    E *Qs = reinterpret_cast<E *>(smem_raw);
    E *Ks = Qs + BR * LD; // [2][BC][LD]
    E *Vs = Ks + 2 * BC * LD;
    const q_block<D, BR, BC> blk(seg, Tn, H, KV);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = blk.h, b = blk.b, q0 = blk.q0, j0 = blk.j0, j1 = blk.j1, seg_last = blk.seg_last;
    const size_t qst = blk.qst, kst = blk.kst;
    const int32_t *sb = blk.sb;
    const E *qb = blk.qrows(q), *kb = blk.krows(k), *vb = blk.krows(v);

    load_rows<D, LD, BR, 128>(Qs, qb, qst, q0, Tn, tid);
    load_kv<D, LD, BC>(Ks, Vs, kb, vb, kst, j0, 0, Tn, tid);
    cp_commit();

    const int gq = lane >> 2, tq = lane & 3;
    const int wr = warp * 16 * MT; // first local row of this warp
    int rr[MT][2], ss[MT][2];
    blk.rows(rr, ss, wr, gq);
    float m[MT][2], l[MT][2]; // online-softmax state: row maximum (of the raw scores), sum of exp
#pragma unroll
    for (int mt = 0; mt < MT; mt++) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
    const float sl2 = scale * LOG2E_F;
    float o[MT][D / 8][4];
    acc_zero(o);

    kv_loop<D, LD, BC>(Ks, Vs, kb, vb, kst, j0, j1, Tn, tid, [&](int j, const E *Kt, const E *Vt) {
        float s[MT][BC / 8][4];
        acc_zero(s);
        warp_mma<E, D / 16>(a_rows<LD>(wr, lane, Qs), b_nk<LD>(lane, Kt), s); // S = Q K^T
        const int kv0 = j * BC;
        if (kv0 + BC - 1 > q0 || kv0 < seg_last) {
#pragma unroll
            for (int i = 0; i < MT * BC / 2; ++i) { // every element (mt, nb, c) of s
                const int mt = i / (BC / 2), nb = i / 4 % (BC / 8), c = i % 4;
                const int key = kv0 + nb * 8 + 2 * tq + (c & 1);
                if (key > rr[mt][c >> 1] || key < ss[mt][c >> 1]) s[mt][nb][c] = -INFINITY;
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float mx0 = m[mt][0], mx1 = m[mt][1];
#pragma unroll
            for (int nb = 0; nb < BC / 8; ++nb) {
                mx0 = fmaxf(mx0, fmaxf(s[mt][nb][0], s[mt][nb][1]));
                mx1 = fmaxf(mx1, fmaxf(s[mt][nb][2], s[mt][nb][3]));
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float ms0 = mx0 == -INFINITY ? 0.0f : mx0 * sl2, ms1 = mx1 == -INFINITY ? 0.0f : mx1 * sl2;
            const float a0 = exp2f(m[mt][0] * sl2 - ms0), a1 = exp2f(m[mt][1] * sl2 - ms1);
            m[mt][0] = mx0, m[mt][1] = mx1;
            float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
            for (int nb = 0; nb < BC / 8; ++nb) {
                s[mt][nb][0] = exp2f(fmaf(s[mt][nb][0], sl2, -ms0));
                s[mt][nb][1] = exp2f(fmaf(s[mt][nb][1], sl2, -ms0));
                s[mt][nb][2] = exp2f(fmaf(s[mt][nb][2], sl2, -ms1));
                s[mt][nb][3] = exp2f(fmaf(s[mt][nb][3], sl2, -ms1));
                rs0 += s[mt][nb][0] + s[mt][nb][1];
                rs1 += s[mt][nb][2] + s[mt][nb][3];
            }
            l[mt][0] = l[mt][0] * a0 + rs0;
            l[mt][1] = l[mt][1] * a1 + rs1;
#pragma unroll
            for (int i = 0; i < D / 8; i++) o[mt][i][0] *= a0, o[mt][i][1] *= a0, o[mt][i][2] *= a1, o[mt][i][3] *= a1;
        }
        warp_mma<E, BC / 16>(a_acc<E>(s), b_kn<LD>(lane, Vt), o); // O += P V
    });
    float inv[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float lv = l[mt][hf];
            lv += __shfl_xor_sync(0xffffffffu, lv, 1);
            lv += __shfl_xor_sync(0xffffffffu, lv, 2);
            l[mt][hf] = lv;
            inv[mt][hf] = lv > 0.0f ? 1.0f / lv : 0.0f;
        }
    acc_store_rows<E>(blk.qrows(out), qst, rr, Tn, tq, o, inv);
    if (tq == 0) {
        float *lb = lse + ((size_t)b * H + h) * Tn;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
                if (rr[mt][hf] < Tn) lb[rr[mt][hf]] = m[mt][hf] * scale + logf(l[mt][hf]);
    }
}

// ---- backward: dQ with 32 rows per warp (128-row tiles), 32-key tiles ----------------------------------------------
template <int D> struct mma_dq_cfg {
    static constexpr int MT = 2, NW = 4, BR = 16 * MT * NW, BC = 32, LD = D + 8;
    static constexpr size_t smem = (size_t)(2 * BR + 4 * BC) * LD * 2 /* 16-bit elements */;
};

template <typename E, int D>
__global__ void __launch_bounds__(128, 1)
    attn_dq_mma(E *__restrict__ dq, const E *__restrict__ dout, const float *__restrict__ lse,
                const float *__restrict__ delta, const E *__restrict__ q, const E *__restrict__ k,
                const E *__restrict__ v, const int32_t *__restrict__ seg, int Tn, int H, int KV, float scale) {
    using namespace tc;
    constexpr int MT = mma_dq_cfg<D>::MT, BR = mma_dq_cfg<D>::BR, BC = mma_dq_cfg<D>::BC, LD = mma_dq_cfg<D>::LD;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    E *Qs = reinterpret_cast<E *>(smem_raw);
    E *Gs = Qs + BR * LD;
    E *Ks = Gs + BR * LD;     // [2][BC][LD]
    E *Vs = Ks + 2 * BC * LD; // [2][BC][LD]
    const q_block<D, BR, BC> blk(seg, Tn, H, KV);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = blk.h, b = blk.b, q0 = blk.q0, j0 = blk.j0, j1 = blk.j1, seg_last = blk.seg_last;
    const size_t qst = blk.qst, kst = blk.kst;
    const int32_t *sb = blk.sb;
    const E *qb = blk.qrows(q), *gb = blk.qrows(dout), *kb = blk.krows(k), *vb = blk.krows(v);

    load_rows<D, LD, BR, 128>(Qs, qb, qst, q0, Tn, tid);
    load_rows<D, LD, BR, 128>(Gs, gb, qst, q0, Tn, tid);
    load_kv<D, LD, BC>(Ks, Vs, kb, vb, kst, j0, 0, Tn, tid);
    cp_commit();

    const int gq = lane >> 2, tq = lane & 3;
    const int wr = warp * 16 * MT;
    const float *Lb = lse + ((size_t)b * H + h) * Tn, *Db = delta + ((size_t)b * H + h) * Tn;
    int rr[MT][2], ss[MT][2];
    blk.rows(rr, ss, wr, gq);
    float L2[MT][2], DL[MT][2]; // the rows' lse * log2(e) and delta
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const bool ok = rr[mt][hf] < Tn;
            L2[mt][hf] = ok ? Lb[rr[mt][hf]] * LOG2E_F : INFINITY;
            DL[mt][hf] = ok ? Db[rr[mt][hf]] : 0.0f;
        }
    const float sl2 = scale * LOG2E_F;
    float acc[MT][D / 8][4];
    acc_zero(acc);

    kv_loop<D, LD, BC>(Ks, Vs, kb, vb, kst, j0, j1, Tn, tid, [&](int j, const E *Kt, const E *Vt) {
        float s[MT][BC / 8][4], dp[MT][BC / 8][4];
        acc_zero(s);
        acc_zero(dp);
        warp_mma<E, D / 16>(a_rows<LD>(wr, lane, Qs, Gs), b_nk<LD>(lane, Kt, Vt), s, dp); // S = Q K^T, dP = dO V^T
        const int kv0 = j * BC;
        const bool need_mask = kv0 + BC - 1 > q0 || kv0 < seg_last;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nb = 0; nb < BC / 8; ++nb)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int hf = c >> 1;
                    float p = exp2f(fmaf(s[mt][nb][c], sl2, -L2[mt][hf]));
                    if (need_mask) {
                        const int key = kv0 + nb * 8 + 2 * tq + (c & 1);
                        if (key > rr[mt][hf] || key < ss[mt][hf]) p = 0.0f;
                    }
                    s[mt][nb][c] = p * (dp[mt][nb][c] - DL[mt][hf]); // dS
                }
        warp_mma<E, BC / 16>(a_acc<E>(s), b_kn<LD>(lane, Kt), acc); // dQ += dS K (scaled on store)
    });
    float f[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) f[mt][0] = f[mt][1] = scale;
    acc_store_rows<E>(blk.qrows(dq), qst, rr, Tn, tq, acc, f);
}

// ---- backward: dK, dV per (key tile, query head); GQA partials in fp32, reduced over the group in head order -------
template <int D> struct mma_dkdv_cfg {
    static constexpr int BC = 64, BQ = D <= 64 ? 64 : 32, LD = D + 8;
    static constexpr size_t smem = (size_t)(2 * BC + 4 * BQ) * LD * 2 /* 16-bit elements */ + (size_t)2 * BQ * 3 * 4;
};

// part == NULL (no GQA sharing): writes dk, dv (E = the table's 16-bit type, dk scaled). Otherwise writes the head's unscaled fp32
// partials to part_k/part_v [B, H, T, D].
template <typename E, int D>
__global__ void __launch_bounds__(128)
    attn_dkdv_mma(E *__restrict__ dk, E *__restrict__ dv, float *__restrict__ part_k, float *__restrict__ part_v,
                  const E *__restrict__ dout, const float *__restrict__ lse, const float *__restrict__ delta,
                  const E *__restrict__ q, const E *__restrict__ k, const E *__restrict__ v,
                  const int32_t *__restrict__ seg, int Tn, int H, int KV, float scale) {
    using namespace tc;
    constexpr int BC = mma_dkdv_cfg<D>::BC, BQ = mma_dkdv_cfg<D>::BQ, LD = mma_dkdv_cfg<D>::LD;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    E *Ks = reinterpret_cast<E *>(smem_raw);
    E *Vs = Ks + BC * LD;
    E *Qs = Vs + BC * LD;     // [2][BQ][LD]
    E *Gs = Qs + 2 * BQ * LD; // [2][BQ][LD]
    float *Ls = reinterpret_cast<float *>(Gs + 2 * BQ * LD);
    float *Ds = Ls + 2 * BQ;
    int *Ss = reinterpret_cast<int *>(Ds + 2 * BQ);
    const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, g = h / (H / KV);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t qst = (size_t)H * D, kst = (size_t)KV * D;
    const int32_t *sb = seg + (size_t)b * Tn;
    const int kv0 = kt * BC, kvlast = min(kv0 + BC, Tn) - 1;
    int lo = kvlast, hi = Tn - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (sb[mid] <= kvlast) lo = mid;
        else hi = mid - 1;
    }
    const int it0 = kv0 / BQ, nsteps = lo / BQ - it0 + 1;

    const E *kb = k + (size_t)b * Tn * kst + (size_t)g * D, *vb = v + (size_t)b * Tn * kst + (size_t)g * D;
    const E *qb = q + (size_t)b * Tn * qst + (size_t)h * D, *gb = dout + (size_t)b * Tn * qst + (size_t)h * D;
    const float *Lh = lse + ((size_t)b * H + h) * Tn, *Dh = delta + ((size_t)b * H + h) * Tn;
    auto load_step = [&](int st, int buf) {
        const int t0 = (it0 + st) * BQ;
        load_rows<D, LD, BQ, 128>(Qs + buf * BQ * LD, qb, qst, t0, Tn, tid);
        load_rows<D, LD, BQ, 128>(Gs + buf * BQ * LD, gb, qst, t0, Tn, tid);
        for (int i = tid; i < BQ; i += 128) {
            const int t = t0 + i;
            const bool ok = t < Tn;
            Ls[buf * BQ + i] = ok ? Lh[t] * LOG2E_F : INFINITY;
            Ds[buf * BQ + i] = ok ? Dh[t] : 0.0f;
            Ss[buf * BQ + i] = ok ? sb[t] : 0x7fffffff;
        }
    };
    load_rows<D, LD, BC, 128>(Ks, kb, kst, kv0, Tn, tid);
    load_rows<D, LD, BC, 128>(Vs, vb, kst, kv0, Tn, tid);
    load_step(0, 0);
    cp_commit();

    const int gq = lane >> 2, tq = lane & 3;
    const int kr = warp * 16, key0 = kv0 + kr + gq, key1 = key0 + 8;
    const float sl2 = scale * LOG2E_F;
    float dka[1][D / 8][4], dva[1][D / 8][4]; // one m-tile per warp: its 16 keys
    acc_zero(dka);
    acc_zero(dva);

    for (int st = 0; st < nsteps; ++st) {
        const int buf = st & 1;
        cp_step(st + 1 < nsteps, [&] { load_step(st + 1, buf ^ 1); });
        const E *Qt = Qs + buf * BQ * LD, *Gt = Gs + buf * BQ * LD;
        const float *Lt = Ls + buf * BQ, *Dt = Ds + buf * BQ;
        const int *St = Ss + buf * BQ;
        const int t0 = (it0 + st) * BQ;
        // S^T = K Q^T and dP^T = V dO^T (16 keys x BQ queries per warp)
        float sT[1][BQ / 8][4], pT[1][BQ / 8][4];
        acc_zero(sT);
        acc_zero(pT);
        warp_mma<E, D / 16>(a_rows<LD>(kr, lane, Ks, Vs), b_nk<LD>(lane, Qt, Gt), sT, pT);
        const bool need_mask = kv0 + BC - 1 > t0 || St[BQ - 1] > kv0;
        // P^T (kept in sT) and dS^T (in pT)
#pragma unroll
        for (int i = 0; i < BQ / 2; ++i) { // every element (nb, c) of sT
            const int nb = i / 4, c = i % 4, ql = nb * 8 + 2 * tq + (c & 1);
            float p = exp2f(fmaf(sT[0][nb][c], sl2, -Lt[ql]));
            if (need_mask) {
                const int key = c < 2 ? key0 : key1;
                if (key > t0 + ql || key < St[ql]) p = 0.0f;
            }
            sT[0][nb][c] = p;
            pT[0][nb][c] = p * (pT[0][nb][c] - Dt[ql]);
        }
        // dV += P^T dO, dK += dS^T Q (k = queries)
        warp_mma<E, BQ / 16>(a_acc<E>(sT, pT), b_kn<LD>(lane, Gt, Qt), dva, dka);
        __syncthreads();
    }
    if (part_k) {
        float *pk = part_k + ((size_t)b * H + h) * Tn * D, *pv = part_v + ((size_t)b * H + h) * Tn * D;
#pragma unroll
        for (int nd = 0; nd < D / 8; ++nd) {
            const int d = nd * 8 + 2 * tq;
            if (key0 < Tn) {
                *reinterpret_cast<float2 *>(pk + (size_t)key0 * D + d) = make_float2(dka[0][nd][0], dka[0][nd][1]);
                *reinterpret_cast<float2 *>(pv + (size_t)key0 * D + d) = make_float2(dva[0][nd][0], dva[0][nd][1]);
            }
            if (key1 < Tn) {
                *reinterpret_cast<float2 *>(pk + (size_t)key1 * D + d) = make_float2(dka[0][nd][2], dka[0][nd][3]);
                *reinterpret_cast<float2 *>(pv + (size_t)key1 * D + d) = make_float2(dva[0][nd][2], dva[0][nd][3]);
            }
        }
        return;
    }
    E *dkb = dk + (size_t)b * Tn * kst + (size_t)g * D, *dvb = dv + (size_t)b * Tn * kst + (size_t)g * D;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
        const int d = nd * 8 + 2 * tq;
        if (key0 < Tn) {
            store2<E>(dkb + (size_t)key0 * kst + d, dka[0][nd][0] * scale, dka[0][nd][1] * scale);
            store2<E>(dvb + (size_t)key0 * kst + d, dva[0][nd][0], dva[0][nd][1]);
        }
        if (key1 < Tn) {
            store2<E>(dkb + (size_t)key1 * kst + d, dka[0][nd][2] * scale, dka[0][nd][3] * scale);
            store2<E>(dvb + (size_t)key1 * kst + d, dva[0][nd][2], dva[0][nd][3]);
        }
    }
}

// dk[b, s, g, :] = scale * sum_{h in group g, in order} part_k[b, h, s, :]; dv likewise (unscaled). 4 dims/thread.
template <typename E>
__global__ void attn_gqa_reduce_kernel(E *__restrict__ dk, E *__restrict__ dv, const float *__restrict__ part_k,
                                       const float *__restrict__ part_v, int B, int Tn, int H, int KV, int D,
                                       float scale) {
    const int rep = H / KV, D4 = D / 4;
    const size_t total = (size_t)B * Tn * KV * D4;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(i % D4) * 4;
        const int g = (int)(i / D4 % KV), s = (int)(i / D4 / KV % Tn), b = (int)(i / D4 / KV / Tn);
        float4 ak = make_float4(0, 0, 0, 0), av = ak;
        for (int h = g * rep; h < (g + 1) * rep; h++) {
            const size_t o = (((size_t)b * H + h) * Tn + s) * D + d;
            const float4 x = *reinterpret_cast<const float4 *>(part_k + o), y = *reinterpret_cast<const float4 *>(part_v + o);
            ak.x += x.x, ak.y += x.y, ak.z += x.z, ak.w += x.w;
            av.x += y.x, av.y += y.y, av.z += y.z, av.w += y.w;
        }
        const size_t od = ((size_t)b * Tn + s) * KV * D + (size_t)g * D + d;
        tc::store2<E>(dk + od, ak.x * scale, ak.y * scale);
        tc::store2<E>(dk + od + 2, ak.z * scale, ak.w * scale);
        tc::store2<E>(dv + od, av.x, av.y);
        tc::store2<E>(dv + od + 2, av.z, av.w);
    }
}

// ---- launchers ---------------------------------------------------------------------------------------------------
template <typename K> static void set_smem(K kern, size_t bytes) {
    QF_CHECK(bytes <= qfc().smem_optin);
    CHECK_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}
template <typename E> static void init_smem() {
    set_smem(attn_fwd_mma<E, 64>, mma_fwd_cfg<64>::smem);
    set_smem(attn_fwd_mma<E, 128>, mma_fwd_cfg<128>::smem);
    set_smem(attn_dq_mma<E, 64>, mma_dq_cfg<64>::smem);
    set_smem(attn_dq_mma<E, 128>, mma_dq_cfg<128>::smem);
    set_smem(attn_dkdv_mma<E, 64>, mma_dkdv_cfg<64>::smem);
    set_smem(attn_dkdv_mma<E, 128>, mma_dkdv_cfg<128>::smem);
}
void attention_mma_init() {
    init_smem<bf16>();
    init_smem<f16>();
}

template <typename E>
void attention_mma_fwd(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *seg, int B, int Tn,
                       int H, int KV, int D, float scale) {
    cudaStream_t st = qfc_stream();
    constexpr int BR = mma_fwd_cfg<64>::BR;
    dim3 grid((unsigned)((Tn + BR - 1) / BR), (unsigned)H, (unsigned)B);
    if (D == 64)
        attn_fwd_mma<E, 64><<<grid, 128, mma_fwd_cfg<64>::smem, st>>>(out, lse, q, k, v, seg, Tn, H, KV, scale);
    else
        attn_fwd_mma<E, 128><<<grid, 128, mma_fwd_cfg<128>::smem, st>>>(out, lse, q, k, v, seg, Tn, H, KV, scale);
    CHECK_LAUNCH();
}

// dK/dV (then, with GQA, the reduction of the partials), then dQ
template <typename E>
void attention_mma_bwd(E *dq, E *dk, E *dv, float *part_k, float *part_v, const E *dout, const float *lse,
                       const float *delta, const E *q, const E *k, const E *v, const int32_t *seg, int B, int Tn,
                       int H, int KV, int D, float scale) {
    cudaStream_t st = qfc_stream();
    dim3 gk((unsigned)((Tn + 63) / 64), (unsigned)H, (unsigned)B);
    dim3 gq((unsigned)((Tn + mma_dq_cfg<64>::BR - 1) / mma_dq_cfg<64>::BR), (unsigned)H, (unsigned)B);
    if (D == 64)
        attn_dkdv_mma<E, 64><<<gk, 128, mma_dkdv_cfg<64>::smem, st>>>(dk, dv, part_k, part_v, dout, lse, delta, q, k, v,
                                                                       seg, Tn, H, KV, scale);
    else
        attn_dkdv_mma<E, 128><<<gk, 128, mma_dkdv_cfg<128>::smem, st>>>(dk, dv, part_k, part_v, dout, lse, delta, q, k,
                                                                         v, seg, Tn, H, KV, scale);
    CHECK_LAUNCH();
    if (part_k) {
        const size_t total = (size_t)B * Tn * KV * (D / 4);
        attn_gqa_reduce_kernel<E><<<qf_blocks(total, 256, (unsigned)qfc().num_sms * 8u), 256, 0, st>>>(
            dk, dv, part_k, part_v, B, Tn, H, KV, D, scale);
        CHECK_LAUNCH();
    }
    if (D == 64)
        attn_dq_mma<E, 64><<<gq, 128, mma_dq_cfg<64>::smem, st>>>(dq, dout, lse, delta, q, k, v, seg, Tn, H, KV, scale);
    else
        attn_dq_mma<E, 128><<<gq, 128, mma_dq_cfg<128>::smem, st>>>(dq, dout, lse, delta, q, k, v, seg, Tn, H, KV,
                                                                     scale);
    CHECK_LAUNCH();
}

#define INST(E)                                                                                                      \
    template void attention_mma_fwd<E>(E *, float *, const E *, const E *, const E *, const int32_t *, int, int, int, \
                                       int, int, float);                                                             \
    template void attention_mma_bwd<E>(E *, E *, E *, float *, float *, const E *, const float *, const float *,      \
                                       const E *, const E *, const E *, const int32_t *, int, int, int, int, int,    \
                                       float);
INST(bf16)
INST(f16)
