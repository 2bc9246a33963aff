// attention_tile.cuh — the device helpers of the tensor-core attention kernels (attention_mma.cu), written once:
// cp.async copies, the tile loaders and the double-buffer step, ldmatrix fragment loads and their lane addressing,
// the mma.sync m16n8k16 wrapper, the fp32 -> 16-bit packing and stores for E = bf16 or f16, and the warp-level
// products, zeroing and stores of accumulator tiles (warp_mma). Device code only.
#ifndef QF_ATTENTION_TILE_CUH
#define QF_ATTENTION_TILE_CUH

#include "cuda_common.cuh"
#include <type_traits>

#define LOG2E_F 1.4426950408889634f

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
// c[16x8] += a[16x16] b[16x8], E in, fp32 accumulate; TY is E's name in the instruction
#define TC_MMA_M16N8K16(TY, c, a, b0, b1)                                                                         \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
                 "{%0,%1,%2,%3};\n"                                                                               \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
template <typename E>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    static_assert(std::is_same<E, bf16>::value || std::is_same<E, f16>::value, "E: bf16 or f16");
    if constexpr (std::is_same<E, bf16>::value) TC_MMA_M16N8K16("bf16", c, a, b0, b1);
    else TC_MMA_M16N8K16("f16", c, a, b0, b1);
}
#undef TC_MMA_M16N8K16
// c0, c1 (n-blocks n0, n0 + 8 of a 16 x 16 output) += a (16 x 16) b, b = {b0, b1, b2, b3} as one ldsm_x4 B load
// gives them (see the fragment addressing below)
template <typename E>
__device__ __forceinline__ void mma_x16(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[4]) {
    mma<E>(c0, a, b[0], b[1]);
    mma<E>(c1, a, b[2], b[3]);
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
// a step of a double-buffered loop: starts prefetch() (the next step's copies into the other buffer) where there is
// a next step, then waits for this step's copies and for the whole block
template <typename F> __device__ __forceinline__ void cp_step(bool more, F prefetch) {
    if (more) {
        prefetch();
        cp_commit();
        cp_wait<1>();
    } else {
        cp_wait<0>();
    }
    __syncthreads();
}
// key tile j of K and V (BC rows each from kb, vb, token stride kst) -> buffer buf of the double-buffered shared
// tiles Ks, Vs ([2][BC][LD] each); asynchronous, the caller commits
template <int D, int LD, int BC, typename E>
__device__ __forceinline__ void load_kv(E *Ks, E *Vs, const E *kb, const E *vb, size_t kst, int j, int buf, int Tn,
                                        int tid) {
    load_rows<D, LD, BC, 128>(Ks + buf * BC * LD, kb, kst, j * BC, Tn, tid);
    load_rows<D, LD, BC, 128>(Vs + buf * BC * LD, vb, kst, j * BC, Tn, tid);
}
// body(j, K tile, V tile) for the key tiles j0..j1 of a block (tile j0 loaded into buffer 0 before): tile j + 1
// loads into the other buffer while tile j is in use; the block syncs after each tile, before the next prefetch
// overwrites its buffer
template <int D, int LD, int BC, typename E, typename F>
__device__ __forceinline__ void kv_loop(E *Ks, E *Vs, const E *kb, const E *vb, size_t kst, int j0, int j1, int Tn,
                                        int tid, F body) {
    for (int j = j0; j <= j1; ++j) {
        const int buf = (j - j0) & 1;
        cp_step(j < j1, [&] { load_kv<D, LD, BC>(Ks, Vs, kb, vb, kst, j + 1, buf ^ 1, Tn, tid); });
        body(j, (const E *)Ks + buf * BC * LD, (const E *)Vs + buf * BC * LD);
        __syncthreads();
    }
}

// ---- warp-level products on accumulator tiles ------------------------------------------------------------------
// A warp's accumulator tile: MT m-tiles of 16 rows x N n-blocks of 8 columns, fp32, c[mt][nb][4] as mma.sync holds
// it: lane (gq, tq) = (lane / 4, lane % 4) has rows gq (elements 0, 1) and gq + 8 (2, 3), columns 8 nb + 2 tq (+ 1).
template <int MT, int N> __device__ __forceinline__ void acc_zero(float (&c)[MT][N][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nb = 0; nb < N; nb++) c[mt][nb][0] = c[mt][nb][1] = c[mt][nb][2] = c[mt][nb][3] = 0.0f;
}
// f(0, x0), f(1, x1), ... in order
template <typename F, typename... X> __device__ __forceinline__ void each_indexed(F f, X &&...xs) {
    int i = 0;
    (f(i++, xs), ...);
}
// c0[mt] += A0[mt] B0 (and c1[mt] += A1[mt] B1, ...: the products of one pass, their fragment loads interleaved)
// over NK k-steps of 16. fa(kk, mt, a) loads the A fragments a[p] (16 x 16) of m-tile mt at step kk, fb(kk, np, b)
// the B fragments b[p] of n-blocks 2 np and 2 np + 1: a_rows, a_acc, b_nk, b_kn below.
template <typename E, int NK, typename FA, typename FB, int MT, int N, typename... C>
__device__ __forceinline__ void warp_mma(FA fa, FB fb, float (&c0)[MT][N][4], C &...cs) {
    constexpr int P = 1 + sizeof...(C);
#pragma unroll
    for (int kk = 0; kk < NK; ++kk) {
        uint32_t a[MT][P][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) fa(kk, mt, a[mt]);
#pragma unroll
        for (int np = 0; np < N / 2; ++np) {
            uint32_t b[P][4];
            fb(kk, np, b);
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                each_indexed([&](int p, auto &c) { mma_x16<E>(c[mt][2 * np], c[mt][2 * np + 1], a[mt][p], b[p]); },
                             c0, cs...);
        }
    }
}
// A fragments of shared tiles xs... stored [m][k] (row stride LD), m-tile mt at rows r0 + 16 mt: Q in Q K^T
template <int LD, typename... X> __device__ __forceinline__ auto a_rows(int r0, int lane, X... xs) {
    return [=](int kk, int mt, auto &a) {
        each_indexed([&](int p, auto x) { ldsm_x4(a[p], a_addr<LD>(x, r0 + mt * 16, kk * 16, lane)); }, xs...);
    };
}
// A fragments of accumulator tiles xs... (k = their columns), rounded to E: P in P V, dS in dS K
template <typename E, typename... X> __device__ __forceinline__ auto a_acc(const X &...xs) {
    return [&](int kk, int mt, auto &a) {
        each_indexed([&](int p, const auto &x) { acc_to_a<E>(a[p], x[mt][2 * kk], x[mt][2 * kk + 1]); }, xs...);
    };
}
// B fragments of shared tiles xs... stored [n][k] (row stride LD): K in Q K^T
template <int LD, typename... X> __device__ __forceinline__ auto b_nk(int lane, X... xs) {
    return [=](int kk, int np, auto &b) {
        each_indexed([&](int p, auto x) { ldsm_x4(b[p], bnk_addr<LD>(x, np * 16, kk * 16, lane)); }, xs...);
    };
}
// B fragments of shared tiles xs... stored [k][n] (row stride LD; transposing loads): V in P V
template <int LD, typename... X> __device__ __forceinline__ auto b_kn(int lane, X... xs) {
    return [=](int kk, int np, auto &b) {
        each_indexed([&](int p, auto x) { ldsm_x4_t(b[p], bkn_addr<LD>(x, kk * 16, np * 16, lane)); }, xs...);
    };
}
// rows rr[mt][hf] (those < Tn) of a [T, stride] E tensor at ob <- acc[mt] times f[mt][hf], rounded once (hf = 0:
// the lane's row gq of the m-tile, 1: row gq + 8)
template <typename E, int MT, int ND>
__device__ __forceinline__ void acc_store_rows(E *ob, size_t stride, const int (&rr)[MT][2], int Tn, int tq,
                                               const float (&acc)[MT][ND][4], const float (&f)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nd = 0; nd < ND; ++nd) {
            const int d = nd * 8 + 2 * tq;
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
                if (rr[mt][hf] < Tn)
                    store2<E>(ob + (size_t)rr[mt][hf] * stride + d, acc[mt][nd][2 * hf] * f[mt][hf],
                              acc[mt][nd][2 * hf + 1] * f[mt][hf]);
        }
}
} // namespace tc

#endif
