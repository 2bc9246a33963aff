// decode_attn_mma_cuda.cu — the tensor-core form of attention_paged (ops.h) for calls of many query tokens on the
// 16-bit tables at head_dim 128 (serve's batches of decoding sequences, prompt chunks after a cached prefix): the
// split kernel (decode_attention_cuda.cu) computes q.k and p.v on the CUDA cores, 2 x 7 x 128 fused multiply-adds
// per cached row and kv head at Qwen2.5-7B's GQA 7, each with a shared-memory load of q or p; at 32 decoding rows
// that made it compute-bound (34 us a layer on an H100, 1.0 TB/s of cache). Here the up to 16 query heads of a kv
// head are the 16 rows of mma.sync m16n8k16 tiles (padded with zero rows), so the block's work is a few dozen
// tensor-core instructions per 64 cached rows and the kernel runs at the speed its k/v loads arrive.
//
// attn_mma_kernel: one block of 4 warps per (query token, kv head, split of `split` cache positions, a multiple of
// 64). The split's k and v rows come into shared memory by cp.async in tiles of 64 (two buffers where the split
// holds more than one tile: the next tile's copies in flight while a tile is used); the first tile's rows that no
// kernel of this call writes (positions below the lowest one of the call's tokens of the sequence) are copied
// before the programmatic wait, while the kernels before it end. Warp w takes rows 16w..16w+16 of each tile: S =
// q k^T (8 k-steps over the head's 128 dimensions), scaled in fp32, positions past the token's masked; an online
// softmax per query head (running max and exp-sum, in log2 units); O += P V with P rounded to the table's type
// (bf16 or fp16, as flash attention's kernels do), O in fp32. The 4 warps' (m, l, O) merge in shared memory; a token
// whose positions fit one split stores O / l, the others write the split's partial sums and the last split block
// merges them (split_merge.cuh, the split kernel's merge). Not bit for bit the split kernel's values (other sums, P
// rounded): within the CPU check's tolerance (tests/gpu/test_paged_cuda.c).
#include "attention_tile.cuh"
#include "cuda_common.cuh"
#include "paged_rows.cuh"
#include "split_merge.cuh"
#include <math.h>
#include <type_traits>

namespace {
constexpr int DM_D = 128;          // head_dim
constexpr int DM_LD = DM_D + 8;    // shared row stride in elements (272 bytes: ldmatrix rows in distinct banks)
constexpr int DM_BK = 64;          // cache rows a tile (16 a warp)
constexpr int DM_THREADS = 128;    // 4 warps
constexpr int DM_MAXG = 16;        // query heads of a kv head: the m16 tile's rows
constexpr int DM_MAX_SPLIT = 1024; // cache positions a block at most
constexpr int DM_MAX_NSPLIT = 512; // splits an item at most (the merge's weights: 16 x 512 floats fit a tile buffer)
constexpr size_t DM_Q_BYTES = (size_t)DM_MAXG * DM_LD * 2;      // Qs [16][LD]
constexpr size_t DM_TILE_BYTES = (size_t)2 * DM_BK * DM_LD * 2; // k then v [BK][LD] of a tile
} // namespace

// shared memory of a split of `split` positions: Qs | tile buffers (1 or 2) | rowix [split]
static size_t dm_smem_bytes(int split) {
    return DM_Q_BYTES + (split > DM_BK ? 2 : 1) * DM_TILE_BYTES + sizeof(int) * (size_t)split;
}

template <typename T, typename Rows>
__global__ void __launch_bounds__(DM_THREADS, 3)
    attn_mma_kernel(T *out, float *part, int *cnt, const T *q, const T *kc, const T *vc, Rows rows, int H, int KV,
                    int split, int nsplit, float scale_log2) {
    extern __shared__ __align__(16) unsigned char dm_smem[];
    __shared__ int fred[32];
    const int tok = blockIdx.x / KV, kh = blockIdx.x % KV, s = blockIdx.y, G = H / KV, h0 = kh * G;
    const int t = rows.last(tok), p0 = s * split;
    if (p0 > t) return; // past this token's positions
    const int n = min(t + 1 - p0, split), ntile = (n + DM_BK - 1) / DM_BK, tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
    const size_t prow = (size_t)KV * DM_D;
    T *Qs = reinterpret_cast<T *>(dm_smem);                        // [16][LD]
    T *tiles = reinterpret_cast<T *>(dm_smem + DM_Q_BYTES);        // [nb][k, v][BK][LD]
    const int nb = split > DM_BK ? 2 : 1;
    int *rowix = reinterpret_cast<int *>(dm_smem + DM_Q_BYTES + nb * DM_TILE_BYTES); // [split]
    for (int j = tid; j < n; j += DM_THREADS) rowix[j] = rows.row(tok, p0 + j);
    const int fresh = rows.first_written(tok, (int)gridDim.x / KV, fred); // its barriers publish rowix
    // tile `tile`'s k and v rows into buffer buf: which = 0 the rows no kernel of this call writes (and zeros past
    // the token's positions: p = 0 must not meet stale values), 1 the call's own rows, 2 all
    auto load_tile = [&](int tile, int buf, int which) {
        T *ks = tiles + (size_t)buf * 2 * DM_BK * DM_LD;
        for (int e = tid; e < 2 * DM_BK * (DM_D / 8); e += DM_THREADS) {
            const int isv = e / (DM_BK * (DM_D / 8)), r = e % (DM_BK * (DM_D / 8)), j = r / (DM_D / 8);
            const int w = r % (DM_D / 8), jj = tile * DM_BK + j;
            const bool in = jj < n, own = in && p0 + jj >= fresh;
            if ((which == 0 && own) || (which == 1 && !own)) continue;
            const T *src = in ? (isv ? vc : kc) + (size_t)rowix[jj] * prow + (size_t)kh * DM_D + (size_t)w * 8 : kc;
            tc::cp_async16(ks + ((size_t)isv * DM_BK + j) * DM_LD + w * 8, src, in);
        }
    };
    load_tile(0, 0, 0);
    tc::cp_commit();
    qf_pdl_wait(); // q and this call's k/v rows are the kernels before it's writes
    qf_pdl_trigger();
    for (int e = tid; e < DM_MAXG * (DM_D / 8); e += DM_THREADS) { // q's G heads, zero rows up to 16
        const int g = e / (DM_D / 8), w = e % (DM_D / 8);
        const T *src = g < G ? q + ((size_t)tok * H + h0 + g) * DM_D + (size_t)w * 8 : q;
        tc::cp_async16(Qs + g * DM_LD + w * 8, src, g < G);
    }
    load_tile(0, 0, 1);
    tc::cp_commit();
    uint32_t qa[DM_D / 16][4]; // q's A fragments, all 8 k-steps
    float o[DM_D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; // rows gq, gq + 8
#pragma unroll
    for (int nd = 0; nd < DM_D / 8; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
    for (int tile = 0; tile < ntile; tile++) {
        const int buf = tile & 1;
        tc::cp_step(tile + 1 < ntile, [&] { load_tile(tile + 1, buf ^ 1, 2); });
        if (tile == 0)
#pragma unroll
            for (int kk = 0; kk < DM_D / 16; kk++) tc::ldsm_x4(qa[kk], tc::a_addr<DM_LD>(Qs, 0, kk * 16, lane));
        const T *ks = tiles + (size_t)buf * 2 * DM_BK * DM_LD, *vs = ks + DM_BK * DM_LD;
        const int j0 = tile * DM_BK + warp * 16; // the warp's first row in the split
        if (j0 < n) {
            float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}}; // heads x the warp's 16 rows
#pragma unroll
            for (int kk = 0; kk < DM_D / 16; kk++) {
                uint32_t b[4];
                tc::ldsm_x4(b, tc::bnk_addr<DM_LD>(ks, warp * 16, kk * 16, lane));
                tc::mma_x16<T>(sc[0], sc[1], qa[kk], b);
            }
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int c = 0; c < 2; c++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool in = j0 + 8 * c + 2 * tq + (e & 1) < n;
                    sc[c][e] = in ? sc[c][e] * scale_log2 : -INFINITY;
                    mx[e >> 1] = fmaxf(mx[e >> 1], sc[c][e]);
                }
            float corr[2];
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
                mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
                const float mn = fmaxf(m[hf], mx[hf]); // finite: the warp's first row is in
                corr[hf] = exp2f(m[hf] - mn);
                m[hf] = mn;
                l[hf] *= corr[hf];
            }
#pragma unroll
            for (int c = 0; c < 2; c++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    sc[c][e] = exp2f(sc[c][e] - m[e >> 1]);
                    l[e >> 1] += sc[c][e];
                }
#pragma unroll
            for (int nd = 0; nd < DM_D / 8; nd++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[nd][e] *= corr[e >> 1];
            uint32_t pa[4];
            tc::acc_to_a<T>(pa, sc[0], sc[1]);
#pragma unroll
            for (int np = 0; np < DM_D / 16; np++) {
                uint32_t b[4];
                tc::ldsm_x4_t(b, tc::bkn_addr<DM_LD>(vs, warp * 16, np * 16, lane));
                tc::mma_x16<T>(o[2 * np], o[2 * np + 1], pa, b);
            }
        }
        __syncthreads(); // the buffer is read before the next tile's copies overwrite it
    }
    // the 4 warps' sums meet in shared memory (the tile buffers are free): Os [4][16][D], ml [4][16][2]
    float *Os = reinterpret_cast<float *>(tiles), *ml = Os + 4 * DM_MAXG * DM_D;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
        if (tq == 0) ml[(warp * DM_MAXG + gq + 8 * hf) * 2] = m[hf], ml[(warp * DM_MAXG + gq + 8 * hf) * 2 + 1] = l[hf];
    }
#pragma unroll
    for (int hf = 0; hf < 2; hf++) // the G rows that are heads
        if (gq + 8 * hf < G)
#pragma unroll
            for (int nd = 0; nd < DM_D / 8; nd++)
                *reinterpret_cast<float2 *>(Os + (warp * DM_MAXG + gq + 8 * hf) * DM_D + nd * 8 + 2 * tq) =
                    make_float2(o[nd][2 * hf], o[nd][2 * hf + 1]);
    __syncthreads();
    const bool direct = t < split; // the token's positions all in split 0
    float *mlo = part + (size_t)gridDim.x / KV * H * nsplit * DM_D; // after the partial sums: [N*H, nsplit, 2]
    for (int e = tid; e < G * DM_D; e += DM_THREADS) {
        const int g = e / DM_D, d = e % DM_D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, ml[(w * DM_MAXG + g) * 2]);
        float L = 0.0f, a = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            const float f = exp2f(ml[(w * DM_MAXG + g) * 2] - M); // 0 for a warp without rows
            L += f * ml[(w * DM_MAXG + g) * 2 + 1];
            a += f * Os[(w * DM_MAXG + g) * DM_D + d];
        }
        const size_t oh = (size_t)tok * H + h0 + g;
        if (direct) {
            out[oh * DM_D + d] = fromf<T>(a / L);
        } else {
            part[(oh * nsplit + s) * DM_D + d] = a;
            if (d == 0) mlo[(oh * nsplit + s) * 2] = M * 0.69314718055994531f, mlo[(oh * nsplit + s) * 2 + 1] = L;
        }
    }
    if (direct) return;
    __syncthreads(); // Os and ml are read: the merge's weights may take the buffer
    split_merge_last<T>(out, part, mlo, cnt + blockIdx.x, t / split + 1, tok, H, h0, G, DM_D, nsplit,
                        reinterpret_cast<float *>(tiles));
}

// attention_paged's tensor-core form where it applies (16-bit table, head_dim 128, at most 16 query heads a kv head,
// 16-byte aligned q and caches); false where it does not (the caller runs the split kernel)
template <typename T>
bool cu_attention_mma(void *out, const void *q, const void *kc, const void *vc, rows_paged rows, int N, int H, int KV,
                      int D, int max_len) {
    if constexpr (sizeof(T) != 2) {
        return false;
    } else {
        if (D != DM_D || H / KV > DM_MAXG || !qf_ptr_aligned(q, 16) || !qf_ptr_aligned(kc, 16) ||
            !qf_ptr_aligned(vc, 16))
            return false;
        // about 2 blocks per SM, each split a power-of-two number of whole tiles (H100, 2026-12-07, 512 positions:
        // at 32 tokens splits of 256 took 21 us a layer, of 128 28 us, of 64 34 us; at 8 tokens 64 did best), at
        // most DM_MAX_SPLIT positions (more splits where the context is longer), at most DM_MAX_NSPLIT of them
        const long items = (long)N * KV, per_sm = 2;
        const long want = (per_sm * qfc().num_sms + items - 1) / items;
        long split = (max_len + want - 1) / want, tiles = 1;
        while (tiles * DM_BK < split && tiles * DM_BK < DM_MAX_SPLIT) tiles *= 2;
        split = tiles * DM_BK;
        if (qfc().decode_attn_split > 0) split = qfc().decode_attn_split; // QWENFT_DECODE_ATTN_SPLIT (a bench hook)
        split = (split + DM_BK - 1) / DM_BK * DM_BK;
        split = split > DM_MAX_SPLIT ? DM_MAX_SPLIT : split;
        if ((max_len + split - 1) / split > DM_MAX_NSPLIT)
            split = ((max_len + DM_MAX_NSPLIT - 1) / DM_MAX_NSPLIT + DM_BK - 1) / DM_BK * DM_BK;
        const int nsplit = (int)((max_len + split - 1) / split);
        const size_t smem = dm_smem_bytes((int)split);
        if (smem > qfc().smem_optin) return false;
        size_t &opted = qfc().attn_mma_smem[std::is_same<T, f16>::value];
        if (smem > ((size_t)48 << 10) && smem > opted) {
            CHECK_CUDA(cudaFuncSetAttribute(attn_mma_kernel<T, rows_paged>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            opted = smem;
        }
        float *part = NULL;
        int *cnt = NULL;
        if (nsplit > 1) {
            part = (float *)qfc_scratch(sizeof(float) * (size_t)N * H * nsplit * (DM_D + 2));
            cnt = qfc_split_counters((size_t)N * KV);
        }
        const float scale_log2 = (float)(1.4426950408889634 / sqrt((double)D));
        qfc_launch_pdl(attn_mma_kernel<T, rows_paged>, dim3((unsigned)((size_t)N * KV), (unsigned)nsplit),
                       DM_THREADS, smem, (T *)out, part, cnt, (const T *)q, (const T *)kc, (const T *)vc, rows, H, KV,
                       (int)split, nsplit, scale_log2);
        CHECK_LAUNCH();
        qfc().attn_mma_launches++;
        return true;
    }
}

extern "C" long qf_cuda_attn_mma_launches(void) { return qfc().attn_mma_launches; }

#define QF_MMA_INSTANTIATE(T)                                                                                         \
    template bool cu_attention_mma<T>(void *, const void *, const void *, const void *, rows_paged, int, int, int,   \
                                      int, int);
QF_MMA_INSTANTIATE(float)
QF_MMA_INSTANTIATE(bf16)
QF_MMA_INSTANTIATE(f16)
