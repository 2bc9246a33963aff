// attention_cuda.cu — causal, segment-aware GQA attention, flash-attention style: no T x T buffer ever exists.
//
// On sm_90+ builds with cuDNN, attention_cudnn.cu's fused attention is tried first (QWENFT_ATTN=auto|cudnn|mma picks;
// see there); the kernels of this file are the sm_80/sm_89 path and the fallback for anything cuDNN does not take.
// Two implementations behind attention_fwd / attention_bwd here:
//   * tensor cores (bf16 and fp16 tables, head_dim 64 or 128, 16-byte aligned tensors): FA2-style kernels on
//     mma.sync m16n8k16 (bf16 or fp16 in, fp32 accumulate) with ldmatrix fragments and cp.async double-buffered
//     K/V tiles. The kernels are templates on the 16-bit element type E; E changes only the mma instruction and
//     the fp32 -> 16-bit packing (P and dS as mma operands, the outputs), not the algorithm.
//       forward : one block = 128 queries of one (batch, head), 4 warps x 32 rows (two 16-row m-tiles sharing
//                 every K/V fragment); loops over 64-key tiles with an online softmax in fp32 (exp2 domain); saves
//                 lse = m*scale + log(l) per row.
//       backward: delta = rowsum(dout * out) (fp32), then two kernels that recompute P from lse:
//                 dK/dV: one block = 64 keys of one (batch, query head), 4 warps x 16 keys; loops over the query
//                        tiles that can see the keys. GQA without copying K/V: with H > KV each query head writes
//                        fp32 partials, which a reduction kernel sums over the group in head order (one block per
//                        query head, not per kv head looping over the group, balances the causal work);
//                 dQ   : one block = 128 queries (32 rows per warp), loops over 32-key tiles like the forward.
//                 Separate dQ and dK/dV passes cost one extra recomputation of S and dP but need no atomics:
//                 the backward is deterministic (bitwise the same every run).
//   * generic (fp32 table, any other head_dim <= 256, unaligned tensors): one warp per query row (forward, dQ)
//     or per key row (dK/dV), online softmax over 32-key chunks, fp32 throughout.
// fp16 range (max 65504): nothing that is only an intermediate is stored in a 16-bit type except P (in [0, 1]) and
// dS = P (dP - delta) as mma operands, exactly as FlashAttention-2 does in fp16; S, the online-softmax state, lse,
// delta and every accumulator are fp32, the 1/sqrt(D) of dQ/dK is applied to the fp32 accumulator before the one
// rounding on store, and the GQA partials are summed in fp32. A dS (or an output) beyond 65504 means the gradients
// themselves overflow fp16: it becomes inf, and the trainer's overflow check skips the step and lowers the loss scale.
// Segments: seg_start is non-decreasing along a row (documents are contiguous), so a query tile [q0, q1] needs
// only keys [seg_start[q0], q1]: whole key tiles before the tile's first segment start are skipped, and the
// element mask (key > query or key < seg_start[query]) is applied only on tiles that straddle a boundary or the
// diagonal. Likewise a key tile is seen by queries up to the last t with seg_start[t] <= its last key.
#include "cuda_common.cuh"
#include <initializer_list>
#include <math.h>
#include <type_traits>

#define LOG2E_F 1.4426950408889634f

// ================================================================================================================
// generic kernels (T = float, bf16 or f16, D <= 256)
// ================================================================================================================
#define GEN_DMAX 256
#define GEN_WARPS 4
#define GEN_DPL (GEN_DMAX / 32) // dims per lane

template <typename T>
__device__ __forceinline__ float dot_sm_g(const float *a_sm, const T *b, int D) { // a in shared, b in global
    float s = 0.0f;
    for (int d = 0; d < D; d++) s += a_sm[d] * tof<T>(b[d]);
    return s;
}

template <typename T>
__global__ void __launch_bounds__(GEN_WARPS * 32)
    attn_fwd_generic(T *out, float *lse, const T *q, const T *k, const T *v, const int32_t *seg, int B, int Tn, int H,
                     int KV, int D, float scale) {
    __shared__ float qs[GEN_WARPS][GEN_DMAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long row = (long)blockIdx.x * GEN_WARPS + warp; // (b, h, t), t fastest
    if (row >= (long)B * H * Tn) return;
    const int t = (int)(row % Tn), h = (int)(row / Tn % H), b = (int)(row / Tn / H), g = h / (H / KV);
    const int s0 = seg[(size_t)b * Tn + t];
    const T *qr = q + ((size_t)b * Tn + t) * H * D + (size_t)h * D;
    for (int d = lane; d < D; d += 32) qs[warp][d] = tof<T>(qr[d]);
    __syncwarp();
    const size_t kst = (size_t)KV * D;
    const T *kb = k + (size_t)b * Tn * kst + (size_t)g * D, *vb = v + (size_t)b * Tn * kst + (size_t)g * D;
    float m = -INFINITY, l = 0.0f, acc[GEN_DPL];
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) acc[j] = 0.0f;
    for (int base = s0; base <= t; base += 32) {
        const int s = base + lane;
        const bool valid = s <= t;
        const float sc = valid ? dot_sm_g<T>(qs[warp], kb + (size_t)s * kst, D) * scale : -INFINITY;
        const float mnew = fmaxf(m, warp_max(sc)); // finite: lane 0 is valid
        const float p = valid ? expf(sc - mnew) : 0.0f;
        const float alpha = expf(m - mnew);
        l = l * alpha + warp_sum(p);
#pragma unroll
        for (int j = 0; j < GEN_DPL; j++) acc[j] *= alpha;
        const int cnt = min(32, t - base + 1);
        for (int jj = 0; jj < cnt; jj++) {
            const float pj = __shfl_sync(0xffffffffu, p, jj);
            const T *vr = vb + (size_t)(base + jj) * kst;
#pragma unroll
            for (int j = 0; j < GEN_DPL; j++) {
                const int d = lane + 32 * j;
                if (d < D) acc[j] += pj * tof<T>(vr[d]);
            }
        }
        m = mnew;
    }
    T *orow = out + ((size_t)b * Tn + t) * H * D + (size_t)h * D;
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) {
        const int d = lane + 32 * j;
        if (d < D) orow[d] = fromf<T>(acc[j] / l);
    }
    if (lane == 0) lse[((size_t)b * H + h) * Tn + t] = m + logf(l);
}

// delta[b, h, t] = sum_d dout * out (fp32), one warp per (token, head) row
template <typename T>
__global__ void attn_delta_kernel(float *delta, const T *dout, const T *out, int B, int Tn, int H, int D) {
    const long r = (long)blockIdx.x * 8 + (threadIdx.x >> 5); // ((b*T + t)*H + h)
    const int lane = threadIdx.x & 31;
    if (r >= (long)B * Tn * H) return;
    const T *g = dout + (size_t)r * D, *o = out + (size_t)r * D;
    float s = 0.0f;
    for (int d = lane; d < D; d += 32) s += tof<T>(g[d]) * tof<T>(o[d]);
    s = warp_sum(s);
    if (lane == 0) {
        const int h = (int)(r % H), t = (int)(r / H % Tn), b = (int)(r / H / Tn);
        delta[((size_t)b * H + h) * Tn + t] = s;
    }
}

template <typename T>
__global__ void __launch_bounds__(GEN_WARPS * 32)
    attn_dq_generic(T *dq, const T *dout, const float *lse, const float *delta, const T *q, const T *k, const T *v,
                    const int32_t *seg, int B, int Tn, int H, int KV, int D, float scale) {
    __shared__ float qs[GEN_WARPS][GEN_DMAX], gs[GEN_WARPS][GEN_DMAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long row = (long)blockIdx.x * GEN_WARPS + warp;
    if (row >= (long)B * H * Tn) return;
    const int t = (int)(row % Tn), h = (int)(row / Tn % H), b = (int)(row / Tn / H), g = h / (H / KV);
    const int s0 = seg[(size_t)b * Tn + t];
    const size_t qi = ((size_t)b * Tn + t) * H * D + (size_t)h * D;
    for (int d = lane; d < D; d += 32) qs[warp][d] = tof<T>(q[qi + d]), gs[warp][d] = tof<T>(dout[qi + d]);
    __syncwarp();
    const float L = lse[((size_t)b * H + h) * Tn + t], dl = delta[((size_t)b * H + h) * Tn + t];
    const size_t kst = (size_t)KV * D;
    const T *kb = k + (size_t)b * Tn * kst + (size_t)g * D, *vb = v + (size_t)b * Tn * kst + (size_t)g * D;
    float acc[GEN_DPL];
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) acc[j] = 0.0f;
    for (int base = s0; base <= t; base += 32) {
        const int s = base + lane;
        float ds = 0.0f;
        if (s <= t) {
            const float p = expf(dot_sm_g<T>(qs[warp], kb + (size_t)s * kst, D) * scale - L);
            ds = p * (dot_sm_g<T>(gs[warp], vb + (size_t)s * kst, D) - dl);
        }
        const int cnt = min(32, t - base + 1);
        for (int jj = 0; jj < cnt; jj++) {
            const float dsj = __shfl_sync(0xffffffffu, ds, jj);
            const T *kr = kb + (size_t)(base + jj) * kst;
#pragma unroll
            for (int j = 0; j < GEN_DPL; j++) {
                const int d = lane + 32 * j;
                if (d < D) acc[j] += dsj * tof<T>(kr[d]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) {
        const int d = lane + 32 * j;
        if (d < D) dq[qi + d] = fromf<T>(acc[j] * scale);
    }
}

template <typename T>
__global__ void __launch_bounds__(GEN_WARPS * 32)
    attn_dkdv_generic(T *dk, T *dv, const T *dout, const float *lse, const float *delta, const T *q, const T *k,
                      const T *v, const int32_t *seg, int B, int Tn, int H, int KV, int D, float scale) {
    __shared__ float ks[GEN_WARPS][GEN_DMAX], vs[GEN_WARPS][GEN_DMAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long row = (long)blockIdx.x * GEN_WARPS + warp; // (b, g, s), s fastest
    if (row >= (long)B * KV * Tn) return;
    const int s = (int)(row % Tn), g = (int)(row / Tn % KV), b = (int)(row / Tn / KV), rep = H / KV;
    const size_t kst = (size_t)KV * D, qst = (size_t)H * D;
    const size_t ki = ((size_t)b * Tn + s) * kst + (size_t)g * D;
    for (int d = lane; d < D; d += 32) ks[warp][d] = tof<T>(k[ki + d]), vs[warp][d] = tof<T>(v[ki + d]);
    __syncwarp();
    const int32_t *sb = seg + (size_t)b * Tn;
    float ak[GEN_DPL], av[GEN_DPL];
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) ak[j] = av[j] = 0.0f;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        const float *Lh = lse + ((size_t)b * H + h) * Tn, *Dh = delta + ((size_t)b * H + h) * Tn;
        for (int base = s;; base += 32) {
            const int t = base + lane;
            const bool valid = t < Tn && sb[t] <= s; // a prefix of the lanes (seg_start non-decreasing)
            const unsigned ball = __ballot_sync(0xffffffffu, valid);
            if (!ball) break;
            float p = 0.0f, ds = 0.0f;
            if (valid) {
                const T *qr = q + ((size_t)b * Tn + t) * qst + (size_t)h * D, *gr = dout + ((size_t)b * Tn + t) * qst + (size_t)h * D;
                float qk = 0.0f, gv = 0.0f;
                for (int d = 0; d < D; d++) qk += tof<T>(qr[d]) * ks[warp][d], gv += tof<T>(gr[d]) * vs[warp][d];
                p = expf(qk * scale - Lh[t]);
                ds = p * (gv - Dh[t]);
            }
            const int cnt = __popc(ball);
            for (int jj = 0; jj < cnt; jj++) {
                const float pj = __shfl_sync(0xffffffffu, p, jj), dsj = __shfl_sync(0xffffffffu, ds, jj);
                const size_t ti = ((size_t)b * Tn + base + jj) * qst + (size_t)h * D;
#pragma unroll
                for (int j = 0; j < GEN_DPL; j++) {
                    const int d = lane + 32 * j;
                    if (d < D) av[j] += pj * tof<T>(dout[ti + d]), ak[j] += dsj * tof<T>(q[ti + d]);
                }
            }
            if (ball != 0xffffffffu) break;
        }
    }
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) {
        const int d = lane + 32 * j;
        if (d < D) dk[ki + d] = fromf<T>(ak[j] * scale), dv[ki + d] = fromf<T>(av[j]);
    }
}

// ================================================================================================================
// tensor-core kernels (E = bf16 or f16, D = 64 or 128)
// ================================================================================================================
namespace tc {
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
// 16 bytes global -> shared, asynchronous; pred false zero-fills the destination
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(pred ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p))
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p))
                 : "memory");
}
// The element type E (bf16 or f16) decides only the mma instruction, how fp32 values are packed into 16-bit pairs
// and how output pairs are stored; ldmatrix and cp.async move 16-bit elements whatever they are.
// c[16x8] += a[16x16] b[16x8], E in, fp32 accumulate
template <typename E> __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma<bf16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<f16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// (lo, hi) rounded to nearest E, as one 32-bit register (lo in the low half)
template <typename E> __device__ __forceinline__ uint32_t pack(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack<bf16>(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <> __device__ __forceinline__ uint32_t pack<f16>(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}
// p[0] = lo, p[1] = hi rounded to nearest E (p 4-byte aligned)
template <typename E> __device__ __forceinline__ void store2(E *p, float lo, float hi);
template <> __device__ __forceinline__ void store2<bf16>(bf16 *p, float lo, float hi) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(lo, hi);
}
template <> __device__ __forceinline__ void store2<f16>(f16 *p, float lo, float hi) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(lo, hi);
}
// Fragment addressing (lane l) in a row-major shared tile with row stride LD elements:
//  A operand 16x16 at (row0, col0):                         ldsm_x4 at  (row0 + (l & 15), col0 + (l >> 4) * 8)
//  B operand, two 8-wide n-blocks, tile stored [n][k]:       ldsm_x4 at  (n0 + (l & 7) + (l >> 4) * 8, k0 + ((l >> 3) & 1) * 8)
//  B operand, two 8-wide n-blocks, tile stored [k][n]:       ldsm_x4_t at (k0 + (l & 7) + ((l >> 3) & 1) * 8, n0 + (l >> 4) * 8)
//  both B forms give {r0, r1} = fragment of n-block n0, {r2, r3} = n-block n0 + 8.
template <int LD, typename E> __device__ __forceinline__ const E *a_addr(const E *t, int row0, int col0, int l) {
    return t + (row0 + (l & 15)) * LD + col0 + ((l >> 4) << 3);
}
template <int LD, typename E> __device__ __forceinline__ const E *bnk_addr(const E *t, int n0, int k0, int l) {
    return t + (n0 + (l & 7) + ((l >> 4) << 3)) * LD + k0 + (((l >> 3) & 1) << 3);
}
template <int LD, typename E> __device__ __forceinline__ const E *bkn_addr(const E *t, int k0, int n0, int l) {
    return t + (k0 + (l & 7) + (((l >> 3) & 1) << 3)) * LD + n0 + ((l >> 4) << 3);
}
// accumulator tile (16 x 2*8 columns at n-blocks 2kk, 2kk+1) -> E A fragment over those 16 columns
template <typename E>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
    a[0] = pack<E>(c0[0], c0[1]);
    a[1] = pack<E>(c0[2], c0[3]);
    a[2] = pack<E>(c1[0], c1[1]);
    a[3] = pack<E>(c1[2], c1[3]);
}
// rows [r0, r0+ROWS) of a [T, stride] 16-bit tensor (columns 0..D) -> shared tile, zero rows at or past Tn
template <int D, int LD, int ROWS, int NT, typename E>
__device__ __forceinline__ void load_rows(E *dst, const E *src, size_t stride, int r0, int Tn, int tid) {
    constexpr int CPR = D / 8;
#pragma unroll
    for (int i = tid; i < ROWS * CPR; i += NT) {
        const int r = i / CPR, c = (i % CPR) * 8, t = r0 + r;
        cp_async16(dst + r * LD + c, src + (size_t)(t < Tn ? t : 0) * stride + c, t < Tn);
    }
}
} // namespace tc

template <int D, int BC_> struct fwd2_cfg {
    static constexpr int MT = 2, NW = 4, BR = 16 * MT * NW, BC = BC_, LD = D + 8;
    static constexpr size_t smem = (size_t)(BR + 4 * BC) * LD * 2 /* 16-bit elements */;
};

template <typename E, int D, int BC_>
__global__ void __launch_bounds__(128, 1)
    attn_fwd_tc2(E *__restrict__ out, float *__restrict__ lse, const E *__restrict__ q, const E *__restrict__ k,
                 const E *__restrict__ v, const int32_t *__restrict__ seg, int Tn, int H, int KV, float scale) {
    using namespace tc;
    using cfg = fwd2_cfg<D, BC_>;
    constexpr int MT = cfg::MT, BR = cfg::BR, BC = cfg::BC, LD = cfg::LD;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    E *Qs = reinterpret_cast<E *>(smem_raw);
    E *Ks = Qs + BR * LD; // [2][BC][LD]
    E *Vs = Ks + 2 * BC * LD;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, g = h / (H / KV);
    const int q0 = qt * BR;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t qst = (size_t)H * D, kst = (size_t)KV * D;
    const E *qb = q + (size_t)b * Tn * qst + (size_t)h * D;
    const E *kb = k + (size_t)b * Tn * kst + (size_t)g * D;
    const E *vb = v + (size_t)b * Tn * kst + (size_t)g * D;
    const int32_t *sb = seg + (size_t)b * Tn;
    const int qlast = min(q0 + BR, Tn) - 1;
    const int j0 = sb[q0] / BC, j1 = qlast / BC;
    const int seg_last = sb[qlast];

    load_rows<D, LD, BR, 128>(Qs, qb, qst, q0, Tn, tid);
    load_rows<D, LD, BC, 128>(Ks, kb, kst, j0 * BC, Tn, tid);
    load_rows<D, LD, BC, 128>(Vs, vb, kst, j0 * BC, Tn, tid);
    cp_commit();

    const int gq = lane >> 2, tq = lane & 3;
    const int wr = warp * 16 * MT; // first local row of this warp
    int rr[MT][2], ss[MT][2];
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int r = q0 + wr + mt * 16 + gq + 8 * hf;
            rr[mt][hf] = r;
            ss[mt][hf] = r < Tn ? sb[r] : 0;
            m[mt][hf] = -INFINITY;
            l[mt][hf] = 0.0f;
        }
    const float sl2 = scale * LOG2E_F;
    float o[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < D / 8; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;

    for (int j = j0; j <= j1; ++j) {
        const int buf = (j - j0) & 1;
        if (j < j1) {
            load_rows<D, LD, BC, 128>(Ks + (buf ^ 1) * BC * LD, kb, kst, (j + 1) * BC, Tn, tid);
            load_rows<D, LD, BC, 128>(Vs + (buf ^ 1) * BC * LD, vb, kst, (j + 1) * BC, Tn, tid);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const E *Kt = Ks + buf * BC * LD, *Vt = Vs + buf * BC * LD;
        float s[MT][BC / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < BC / 8; i++) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t qa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) ldsm_x4(qa[mt], a_addr<LD>(Qs, wr + mt * 16, kk * 16, lane));
#pragma unroll
            for (int np = 0; np < BC / 16; ++np) {
                uint32_t bb[4];
                ldsm_x4(bb, bnk_addr<LD>(Kt, np * 16, kk * 16, lane));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma<E>(s[mt][2 * np], qa[mt], bb[0], bb[1]);
                    mma<E>(s[mt][2 * np + 1], qa[mt], bb[2], bb[3]);
                }
            }
        }
        const int kv0 = j * BC;
        if (kv0 + BC - 1 > q0 || kv0 < seg_last) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nb = 0; nb < BC / 8; ++nb)
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
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
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) acc_to_a<E>(pa[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
                uint32_t bb[4];
                ldsm_x4_t(bb, bkn_addr<LD>(Vt, kk * 16, dp * 16, lane));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma<E>(o[mt][2 * dp], pa[mt], bb[0], bb[1]);
                    mma<E>(o[mt][2 * dp + 1], pa[mt], bb[2], bb[3]);
                }
            }
        }
        __syncthreads();
    }
    E *ob = out + (size_t)b * Tn * qst + (size_t)h * D;
    float *lb = lse + ((size_t)b * H + h) * Tn;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float inv[2];
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float lv = l[mt][hf];
            lv += __shfl_xor_sync(0xffffffffu, lv, 1);
            lv += __shfl_xor_sync(0xffffffffu, lv, 2);
            l[mt][hf] = lv;
            inv[hf] = lv > 0.0f ? 1.0f / lv : 0.0f;
        }
#pragma unroll
        for (int nd = 0; nd < D / 8; ++nd) {
            const int d = nd * 8 + 2 * tq;
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
                if (rr[mt][hf] < Tn)
                    store2<E>(ob + (size_t)rr[mt][hf] * qst + d, o[mt][nd][2 * hf] * inv[hf], o[mt][nd][2 * hf + 1] * inv[hf]);
        }
        if (tq == 0)
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
                if (rr[mt][hf] < Tn) lb[rr[mt][hf]] = m[mt][hf] * scale + logf(l[mt][hf]);
    }
}

// ---- backward: dQ with 32 rows per warp (128-row tiles), 32-key tiles ----------------------------------------------
template <int D> struct dq2_cfg {
    static constexpr int MT = 2, NW = 4, BR = 16 * MT * NW, BC = 32, LD = D + 8;
    static constexpr size_t smem = (size_t)(2 * BR + 4 * BC) * LD * 2 /* 16-bit elements */;
};

template <typename E, int D>
__global__ void __launch_bounds__(128, 1)
    attn_dq_tc2(E *__restrict__ dq, const E *__restrict__ dout, const float *__restrict__ lse,
                const float *__restrict__ delta, const E *__restrict__ q, const E *__restrict__ k,
                const E *__restrict__ v, const int32_t *__restrict__ seg, int Tn, int H, int KV, float scale) {
    using namespace tc;
    constexpr int MT = dq2_cfg<D>::MT, BR = dq2_cfg<D>::BR, BC = dq2_cfg<D>::BC, LD = dq2_cfg<D>::LD;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    E *Qs = reinterpret_cast<E *>(smem_raw);
    E *Gs = Qs + BR * LD;
    E *Ks = Gs + BR * LD;     // [2][BC][LD]
    E *Vs = Ks + 2 * BC * LD; // [2][BC][LD]
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, g = h / (H / KV);
    const int q0 = qt * BR;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t qst = (size_t)H * D, kst = (size_t)KV * D;
    const E *qb = q + (size_t)b * Tn * qst + (size_t)h * D;
    const E *gb = dout + (size_t)b * Tn * qst + (size_t)h * D;
    const E *kb = k + (size_t)b * Tn * kst + (size_t)g * D;
    const E *vb = v + (size_t)b * Tn * kst + (size_t)g * D;
    const int32_t *sb = seg + (size_t)b * Tn;
    const int qlast = min(q0 + BR, Tn) - 1;
    const int j0 = sb[q0] / BC, j1 = qlast / BC;
    const int seg_last = sb[qlast];

    load_rows<D, LD, BR, 128>(Qs, qb, qst, q0, Tn, tid);
    load_rows<D, LD, BR, 128>(Gs, gb, qst, q0, Tn, tid);
    load_rows<D, LD, BC, 128>(Ks, kb, kst, j0 * BC, Tn, tid);
    load_rows<D, LD, BC, 128>(Vs, vb, kst, j0 * BC, Tn, tid);
    cp_commit();

    const int gq = lane >> 2, tq = lane & 3;
    const int wr = warp * 16 * MT;
    const float *Lb = lse + ((size_t)b * H + h) * Tn, *Db = delta + ((size_t)b * H + h) * Tn;
    int rr[MT][2], ss[MT][2];
    float L2[MT][2], DL[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int r = q0 + wr + mt * 16 + gq + 8 * hf;
            const bool ok = r < Tn;
            rr[mt][hf] = r;
            ss[mt][hf] = ok ? sb[r] : 0;
            L2[mt][hf] = ok ? Lb[r] * LOG2E_F : INFINITY;
            DL[mt][hf] = ok ? Db[r] : 0.0f;
        }
    const float sl2 = scale * LOG2E_F;
    float acc[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < D / 8; i++) acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0.0f;

    for (int j = j0; j <= j1; ++j) {
        const int buf = (j - j0) & 1;
        if (j < j1) {
            load_rows<D, LD, BC, 128>(Ks + (buf ^ 1) * BC * LD, kb, kst, (j + 1) * BC, Tn, tid);
            load_rows<D, LD, BC, 128>(Vs + (buf ^ 1) * BC * LD, vb, kst, (j + 1) * BC, Tn, tid);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const E *Kt = Ks + buf * BC * LD, *Vt = Vs + buf * BC * LD;
        float s[MT][BC / 8][4], dp[MT][BC / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < BC / 8; i++)
#pragma unroll
                for (int c = 0; c < 4; c++) s[mt][i][c] = dp[mt][i][c] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t qa[MT][4], ga[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                ldsm_x4(qa[mt], a_addr<LD>(Qs, wr + mt * 16, kk * 16, lane));
                ldsm_x4(ga[mt], a_addr<LD>(Gs, wr + mt * 16, kk * 16, lane));
            }
#pragma unroll
            for (int np = 0; np < BC / 16; ++np) {
                uint32_t bk[4], bv[4];
                ldsm_x4(bk, bnk_addr<LD>(Kt, np * 16, kk * 16, lane));
                ldsm_x4(bv, bnk_addr<LD>(Vt, np * 16, kk * 16, lane));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma<E>(s[mt][2 * np], qa[mt], bk[0], bk[1]);
                    mma<E>(s[mt][2 * np + 1], qa[mt], bk[2], bk[3]);
                    mma<E>(dp[mt][2 * np], ga[mt], bv[0], bv[1]);
                    mma<E>(dp[mt][2 * np + 1], ga[mt], bv[2], bv[3]);
                }
            }
        }
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
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
            uint32_t da[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) acc_to_a<E>(da[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
            for (int dd = 0; dd < D / 16; ++dd) {
                uint32_t bb[4];
                ldsm_x4_t(bb, bkn_addr<LD>(Kt, kk * 16, dd * 16, lane));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma<E>(acc[mt][2 * dd], da[mt], bb[0], bb[1]);
                    mma<E>(acc[mt][2 * dd + 1], da[mt], bb[2], bb[3]);
                }
            }
        }
        __syncthreads();
    }
    E *ob = dq + (size_t)b * Tn * qst + (size_t)h * D;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nd = 0; nd < D / 8; ++nd) {
            const int d = nd * 8 + 2 * tq;
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
                if (rr[mt][hf] < Tn)
                    store2<E>(ob + (size_t)rr[mt][hf] * qst + d, acc[mt][nd][2 * hf] * scale, acc[mt][nd][2 * hf + 1] * scale);
        }
}

// ---- backward: dK, dV per (key tile, query head); GQA partials in fp32, reduced over the group in head order -------
template <int D> struct dkdv2_cfg {
    static constexpr int BC = 64, BQ = D <= 64 ? 64 : 32, LD = D + 8;
    static constexpr size_t smem = (size_t)(2 * BC + 4 * BQ) * LD * 2 /* 16-bit elements */ + (size_t)2 * BQ * 3 * 4;
};

// part == NULL (no GQA sharing): writes dk, dv (E = the table's 16-bit type, dk scaled). Otherwise writes the head's unscaled fp32
// partials to part_k/part_v [B, H, T, D].
template <typename E, int D>
__global__ void __launch_bounds__(128)
    attn_dkdv_tc2(E *__restrict__ dk, E *__restrict__ dv, float *__restrict__ part_k, float *__restrict__ part_v,
                  const E *__restrict__ dout, const float *__restrict__ lse, const float *__restrict__ delta,
                  const E *__restrict__ q, const E *__restrict__ k, const E *__restrict__ v,
                  const int32_t *__restrict__ seg, int Tn, int H, int KV, float scale) {
    using namespace tc;
    constexpr int BC = dkdv2_cfg<D>::BC, BQ = dkdv2_cfg<D>::BQ, LD = dkdv2_cfg<D>::LD;
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
    float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++)
        dka[i][0] = dka[i][1] = dka[i][2] = dka[i][3] = dva[i][0] = dva[i][1] = dva[i][2] = dva[i][3] = 0.0f;

    for (int st = 0; st < nsteps; ++st) {
        const int buf = st & 1;
        if (st + 1 < nsteps) {
            load_step(st + 1, buf ^ 1);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const E *Qt = Qs + buf * BQ * LD, *Gt = Gs + buf * BQ * LD;
        const float *Lt = Ls + buf * BQ, *Dt = Ds + buf * BQ;
        const int *St = Ss + buf * BQ;
        const int t0 = (it0 + st) * BQ;
        float sT[BQ / 8][4], pT[BQ / 8][4];
#pragma unroll
        for (int i = 0; i < BQ / 8; i++)
            sT[i][0] = sT[i][1] = sT[i][2] = sT[i][3] = pT[i][0] = pT[i][1] = pT[i][2] = pT[i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t ka[4], va[4];
            ldsm_x4(ka, a_addr<LD>(Ks, kr, kk * 16, lane));
            ldsm_x4(va, a_addr<LD>(Vs, kr, kk * 16, lane));
#pragma unroll
            for (int np = 0; np < BQ / 16; ++np) {
                uint32_t bq[4], bg[4];
                ldsm_x4(bq, bnk_addr<LD>(Qt, np * 16, kk * 16, lane));
                ldsm_x4(bg, bnk_addr<LD>(Gt, np * 16, kk * 16, lane));
                mma<E>(sT[2 * np], ka, bq[0], bq[1]);
                mma<E>(sT[2 * np + 1], ka, bq[2], bq[3]);
                mma<E>(pT[2 * np], va, bg[0], bg[1]);
                mma<E>(pT[2 * np + 1], va, bg[2], bg[3]);
            }
        }
        const bool need_mask = kv0 + BC - 1 > t0 || St[BQ - 1] > kv0;
#pragma unroll
        for (int nb = 0; nb < BQ / 8; ++nb)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int ql = nb * 8 + 2 * tq + (c & 1);
                float p = exp2f(fmaf(sT[nb][c], sl2, -Lt[ql]));
                if (need_mask) {
                    const int key = c < 2 ? key0 : key1;
                    if (key > t0 + ql || key < St[ql]) p = 0.0f;
                }
                sT[nb][c] = p;
                pT[nb][c] = p * (pT[nb][c] - Dt[ql]);
            }
#pragma unroll
        for (int kq = 0; kq < BQ / 16; ++kq) {
            uint32_t pa[4], da[4];
            acc_to_a<E>(pa, sT[2 * kq], sT[2 * kq + 1]);
            acc_to_a<E>(da, pT[2 * kq], pT[2 * kq + 1]);
#pragma unroll
            for (int dd = 0; dd < D / 16; ++dd) {
                uint32_t bg[4], bq[4];
                ldsm_x4_t(bg, bkn_addr<LD>(Gt, kq * 16, dd * 16, lane));
                ldsm_x4_t(bq, bkn_addr<LD>(Qt, kq * 16, dd * 16, lane));
                mma<E>(dva[2 * dd], pa, bg[0], bg[1]);
                mma<E>(dva[2 * dd + 1], pa, bg[2], bg[3]);
                mma<E>(dka[2 * dd], da, bq[0], bq[1]);
                mma<E>(dka[2 * dd + 1], da, bq[2], bq[3]);
            }
        }
        __syncthreads();
    }
    if (part_k) {
        float *pk = part_k + ((size_t)b * H + h) * Tn * D, *pv = part_v + ((size_t)b * H + h) * Tn * D;
#pragma unroll
        for (int nd = 0; nd < D / 8; ++nd) {
            const int d = nd * 8 + 2 * tq;
            if (key0 < Tn) {
                *reinterpret_cast<float2 *>(pk + (size_t)key0 * D + d) = make_float2(dka[nd][0], dka[nd][1]);
                *reinterpret_cast<float2 *>(pv + (size_t)key0 * D + d) = make_float2(dva[nd][0], dva[nd][1]);
            }
            if (key1 < Tn) {
                *reinterpret_cast<float2 *>(pk + (size_t)key1 * D + d) = make_float2(dka[nd][2], dka[nd][3]);
                *reinterpret_cast<float2 *>(pv + (size_t)key1 * D + d) = make_float2(dva[nd][2], dva[nd][3]);
            }
        }
        return;
    }
    E *dkb = dk + (size_t)b * Tn * kst + (size_t)g * D, *dvb = dv + (size_t)b * Tn * kst + (size_t)g * D;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
        const int d = nd * 8 + 2 * tq;
        if (key0 < Tn) {
            store2<E>(dkb + (size_t)key0 * kst + d, dka[nd][0] * scale, dka[nd][1] * scale);
            store2<E>(dvb + (size_t)key0 * kst + d, dva[nd][0], dva[nd][1]);
        }
        if (key1 < Tn) {
            store2<E>(dkb + (size_t)key1 * kst + d, dka[nd][2] * scale, dka[nd][3] * scale);
            store2<E>(dvb + (size_t)key1 * kst + d, dva[nd][2], dva[nd][3]);
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

// ================================================================================================================
// dispatch
// ================================================================================================================
template <typename K> static void set_smem(K kern, size_t bytes) {
    QF_CHECK(bytes <= qfc().smem_optin);
    CHECK_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}
template <typename E> static void attention_init_smem() {
    set_smem(attn_fwd_tc2<E, 64, 64>, fwd2_cfg<64, 64>::smem);
    set_smem(attn_fwd_tc2<E, 128, 64>, fwd2_cfg<128, 64>::smem);
    set_smem(attn_dq_tc2<E, 64>, dq2_cfg<64>::smem);
    set_smem(attn_dq_tc2<E, 128>, dq2_cfg<128>::smem);
    set_smem(attn_dkdv_tc2<E, 64>, dkdv2_cfg<64>::smem);
    set_smem(attn_dkdv_tc2<E, 128>, dkdv2_cfg<128>::smem);
}
void qfc_attention_init() {
    attention_init_smem<bf16>();
    attention_init_smem<f16>();
}

// attention_cudnn.cu: cuDNN's fused attention when the path choice (QWENFT_ATTN, see there) and the shape allow it;
// false = not taken (the kernels below run). dt: 0 bf16, 1 fp16.
bool qfc_cudnn_attention_fwd(int dt, void *out, float *lse, const void *q, const void *k, const void *v,
                             const int32_t *seg, int B, int T, int H, int KV, int D);
bool qfc_cudnn_attention_bwd(int dt, void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse,
                             const void *q, const void *k, const void *v, const int32_t *seg, int B, int T, int H,
                             int KV, int D);
void qfc_attention_note_path(const char *p);

static bool use_tc(int D, std::initializer_list<const void *> ptrs) {
    if (D != 64 && D != 128) return false;
    for (const void *p : ptrs)
        if (!qf_ptr_aligned(p, 16)) return false;
    return true;
}
static void check_shape(int B, int T_, int H, int KV, int D) {
    QF_CHECK(B >= 0 && T_ >= 0 && KV > 0 && H > 0 && H % KV == 0 && D > 0);
}

template <typename T>
void cu_attention_fwd(void *out, float *lse, const void *q, const void *k, const void *v, const int32_t *seg_start,
                      int B, int T_, int H, int KV, int D) {
    check_shape(B, T_, H, KV, D);
    if (!B || !T_) return;
    const float scale = (float)(1.0 / sqrt((double)D));
    cudaStream_t st = qfc_stream();
    if constexpr (sizeof(T) == 2) { // bf16 or f16: cuDNN where chosen, else the tensor-core kernels for E = T
        if (qfc_cudnn_attention_fwd(std::is_same<T, f16>::value, out, lse, q, k, v, seg_start, B, T_, H, KV, D))
            return;
        qfc_attention_note_path(use_tc(D, {out, q, k, v}) ? "mma" : "generic");
        if (use_tc(D, {out, q, k, v})) {
            const T *q_ = (const T *)q, *k_ = (const T *)k, *v_ = (const T *)v;
            T *o_ = (T *)out;
            constexpr int BR = fwd2_cfg<64, 64>::BR;
            dim3 grid((unsigned)((T_ + BR - 1) / BR), (unsigned)H, (unsigned)B);
            if (D == 64)
                attn_fwd_tc2<T, 64, 64><<<grid, 128, fwd2_cfg<64, 64>::smem, st>>>(o_, lse, q_, k_, v_, seg_start, T_,
                                                                                   H, KV, scale);
            else
                attn_fwd_tc2<T, 128, 64><<<grid, 128, fwd2_cfg<128, 64>::smem, st>>>(o_, lse, q_, k_, v_, seg_start,
                                                                                     T_, H, KV, scale);
            CHECK_LAUNCH();
            return;
        }
    }
    QF_CHECK(D <= GEN_DMAX);
    qfc_attention_note_path("generic");
    const long rows = (long)B * H * T_;
    attn_fwd_generic<T><<<(unsigned)((rows + GEN_WARPS - 1) / GEN_WARPS), GEN_WARPS * 32, 0, st>>>(
        (T *)out, lse, (const T *)q, (const T *)k, (const T *)v, seg_start, B, T_, H, KV, D, scale);
    CHECK_LAUNCH();
}

template <typename T>
void cu_attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse, const void *q,
                      const void *k, const void *v, const int32_t *seg_start, int B, int T_, int H, int KV, int D) {
    check_shape(B, T_, H, KV, D);
    if (!B || !T_) return;
    const float scale = (float)(1.0 / sqrt((double)D));
    cudaStream_t st = qfc_stream();
    if constexpr (sizeof(T) == 2)
        if (qfc_cudnn_attention_bwd(std::is_same<T, f16>::value, dq, dk, dv, dout, out, lse, q, k, v, seg_start, B, T_,
                                    H, KV, D))
            return;
    const bool tc = sizeof(T) == 2 && use_tc(D, {dq, dk, dv, dout, q, k, v});
    qfc_attention_note_path(tc ? "mma" : "generic");
    const bool gqa_part = tc && H / KV > 1;
    const size_t dbytes = qf_align_up((size_t)B * H * T_ * sizeof(float), 256);
    const size_t pbytes = gqa_part ? (size_t)B * H * T_ * D * sizeof(float) : 0;
    char *scr = (char *)qfc_scratch(dbytes + 2 * pbytes);
    float *delta = (float *)scr;
    float *part_k = gqa_part ? (float *)(scr + dbytes) : NULL, *part_v = gqa_part ? (float *)(scr + dbytes + pbytes) : NULL;
    const long drows = (long)B * T_ * H;
    attn_delta_kernel<T><<<(unsigned)((drows + 7) / 8), 256, 0, st>>>(delta, (const T *)dout, (const T *)out, B, T_, H, D);
    CHECK_LAUNCH();
    if constexpr (sizeof(T) == 2) { // bf16 or f16: the tensor-core kernels for E = T
        const T *q_ = (const T *)q, *k_ = (const T *)k, *v_ = (const T *)v, *g_ = (const T *)dout;
        T *dq_ = (T *)dq, *dk_ = (T *)dk, *dv_ = (T *)dv;
        if (tc) {
            dim3 gk((unsigned)((T_ + 63) / 64), (unsigned)H, (unsigned)B);
            dim3 gq((unsigned)((T_ + dq2_cfg<64>::BR - 1) / dq2_cfg<64>::BR), (unsigned)H, (unsigned)B);
            if (D == 64)
                attn_dkdv_tc2<T, 64><<<gk, 128, dkdv2_cfg<64>::smem, st>>>(dk_, dv_, part_k, part_v, g_, lse, delta, q_,
                                                                           k_, v_, seg_start, T_, H, KV, scale);
            else
                attn_dkdv_tc2<T, 128><<<gk, 128, dkdv2_cfg<128>::smem, st>>>(dk_, dv_, part_k, part_v, g_, lse, delta,
                                                                             q_, k_, v_, seg_start, T_, H, KV, scale);
            CHECK_LAUNCH();
            if (gqa_part) {
                const size_t total = (size_t)B * T_ * KV * (D / 4);
                attn_gqa_reduce_kernel<T><<<qf_blocks(total, 256, (unsigned)qfc().num_sms * 8u), 256, 0, st>>>(
                    dk_, dv_, part_k, part_v, B, T_, H, KV, D, scale);
                CHECK_LAUNCH();
            }
            if (D == 64)
                attn_dq_tc2<T, 64><<<gq, 128, dq2_cfg<64>::smem, st>>>(dq_, g_, lse, delta, q_, k_, v_, seg_start, T_, H,
                                                                       KV, scale);
            else
                attn_dq_tc2<T, 128><<<gq, 128, dq2_cfg<128>::smem, st>>>(dq_, g_, lse, delta, q_, k_, v_, seg_start, T_,
                                                                         H, KV, scale);
            CHECK_LAUNCH();
            return;
        }
    }
    QF_CHECK(D <= GEN_DMAX);
    const long qrows = (long)B * H * T_, krows = (long)B * KV * T_;
    attn_dkdv_generic<T><<<(unsigned)((krows + GEN_WARPS - 1) / GEN_WARPS), GEN_WARPS * 32, 0, st>>>(
        (T *)dk, (T *)dv, (const T *)dout, lse, delta, (const T *)q, (const T *)k, (const T *)v, seg_start, B, T_, H, KV,
        D, scale);
    CHECK_LAUNCH();
    attn_dq_generic<T><<<(unsigned)((qrows + GEN_WARPS - 1) / GEN_WARPS), GEN_WARPS * 32, 0, st>>>(
        (T *)dq, (const T *)dout, lse, delta, (const T *)q, (const T *)k, (const T *)v, seg_start, B, T_, H, KV, D,
        scale);
    CHECK_LAUNCH();
}

#define INST(T)                                                                                                      \
    template void cu_attention_fwd<T>(void *, float *, const void *, const void *, const void *, const int32_t *, int, \
                                      int, int, int, int);                                                           \
    template void cu_attention_bwd<T>(void *, void *, void *, const void *, const void *, const float *, const void *, \
                                      const void *, const void *, const int32_t *, int, int, int, int, int);
INST(float)
INST(bf16)
INST(f16)
