// decode_attention_cuda.cu — attention against a paged KV cache (ops.h attention_paged) for the bf16, fp16 and fp32
// tables: serve's ragged batches and generate's calls (prefill chunks and decoding tokens of many sequences in one
// call), the cache row of position j found through the sequence's block table.
//
// Kernels on the compute stream:
//   kv_append_paged: k, v [N, KV, D] -> the pools at each token's slot (skipped when attention_paged gets
//                 k = v = NULL: decode_qkv wrote them; alone: ops.h kv_append_paged, the fresh prompts' path);
//   attn_split:   one block per (query token, kv head, split of cache positions, group of up to 8 GQA heads): the
//                 heads of one kv head share each k/v row read; the split size gives about two blocks per SM
//                 (batch 1 at a 512-token context: 17 splits of 32), so a decoding step's attention is spread over
//                 the GPU instead of one block per head ("flash-decoding");
//                 a token whose positions span several splits has each split's partial sums written to scratch,
//                 and the split block that finishes last (a per-item counter, reset by that block) merges them
//                 (running max and exp-sum): one launch whatever the split (a separate merge kernel was a second
//                 launch per layer, a few microseconds of a batch-1 step's 25 us attention).
// Calls of a few decoding tokens run the cluster form instead where it applies (decode_attn_cluster_cuda.cu), the
// other calls on 16-bit tables at head_dim 128 the tensor-core form (decode_attn_mma_cuda.cu; QWENFT_DECODE_ATTN=mma,
// the default).
// attn_split is a programmatic dependent launch: its blocks ask L2 for their k/v rows, then wait for the kernel
// before them (cuda_common.cuh).
// fp32 math throughout, scale 1/sqrt(D) folded into q, one rounding to T on store. The CPU table's result is the
// reference (tests/gpu/test_paged_cuda.c: within bf16 rounding, not bit for bit).
#include "attention_tile.cuh" // cp.async (the pre form)
#include "cuda_common.cuh"
#include "paged_rows.cuh"
#include "split_merge.cuh"
#include <math.h>

static const int DA_MAX_D = 256;

// decode_attn_cluster_cuda.cu: the cluster form, for calls of a few decoding tokens; false where it does not apply
template <typename T>
bool cu_attention_cluster(void *out, const void *q, const void *kc, const void *vc, const int32_t *seq,
                          const int32_t *pos, const int32_t *btab, int N, int maxb, int bs, int H, int KV, int D,
                          int max_len);

// decode_attn_mma_cuda.cu: the tensor-core form, for the other calls; false where it does not apply
template <typename T>
bool cu_attention_mma(void *out, const void *q, const void *kc, const void *vc, rows_paged rows, int N, int H, int KV,
                      int D, int max_len);

// ---- the attention kernels (split over cache positions, "flash-decoding") -------------------------------------
//
// attn_split_kernel: one block per (query token, kv head, split of SPLIT cache positions, group of <= AS_MAXG of the
// kv head's query heads); the GQA heads of one kv head share every k/v row it reads. Phase 1: TPP threads per cache
// position (4 for splits of <= 64 positions with D % 32 == 0, else 1; their partial dots meet by shuffles) score it
// against the group's queries (q.k * scale, fp32, q in shared memory read 4 at a time, its TPP slices padded); phase
// 2: per head, the split's max and exp-sum (a warp per head); phase 3: D/8 threads per cache row, each 8 dimensions
// with 16-byte loads, and 128/(D/8) rows at a time (position lanes), sum p_j v_j over the split; the lanes merge
// in shared memory. A token whose
// positions fit one split writes its output directly; otherwise the split's unnormalised sum, max and exp-sum go
// to scratch, and the item's last block to finish merges its splits into the output (cnt: one counter per item,
// zero between calls).
// Rows (paged_rows.cuh): where position p of token tok's sequence lives in the paged pool.
static const int AS_THREADS = 128;
static const int AS_MAXG = 8;      // query heads per block (more GQA heads: more blocks)
static const int AS_MAX_SPLIT = 512;

// phase 1's sums: acc[g] += q_g . f over 8 dimensions of a key row (q_g at qg + g * QS), the heads g < ng
__device__ __forceinline__ void as_dot8(float (&acc)[AS_MAXG], const float *qg, int QS, int ng, const float (&f)[8]) {
#pragma unroll
    for (int g = 0; g < AS_MAXG; g++) {
        if (g >= ng) break;
        const float4 a = *reinterpret_cast<const float4 *>(qg + g * QS);
        const float4 b = *reinterpret_cast<const float4 *>(qg + g * QS + 4);
        acc[g] += a.x * f[0] + a.y * f[1] + a.z * f[2] + a.w * f[3] + b.x * f[4] + b.y * f[5] + b.z * f[6] +
                  b.w * f[7];
    }
}
// phase 3's sums: acc[g] += p_g(j) v_j over 8 dimensions of value row j (p at ps[g * split + j]), the heads g < ng
__device__ __forceinline__ void as_pv8(float (&acc)[AS_MAXG][8], const float *ps, int split, int j, int ng,
                                       const float (&f)[8]) {
#pragma unroll
    for (int g = 0; g < AS_MAXG; g++) {
        if (g >= ng) break;
        const float w = ps[g * split + j];
#pragma unroll
        for (int c = 0; c < 8; c++) acc[g][c] += w * f[c];
    }
}

// DC = D (the default on 16-bit tables at D = 128 with 16-byte aligned caches): the loops' bounds are known, so a
// thread issues all of a cache row slice's loads in phase 1 and AS_V3 rows' loads in phase 3 before it uses the
// first (Qwen2.5-7B on an H200, 512 cached positions: 12.3 us a layer at batch 1, 32.4 at 32 sequences, against
// 16.2 and 53.2 for DC = 0). DC = 0: D at run time, one 16-byte load in flight per thread (each loop turn waits for
// its load); every other table and head size, or QWENFT_DECODE_ATTN=plain (a bench hook). The sums are the same in
// the same order (bit for bit the DC = 0 kernel's values). Under QWENFT_DECODE_ATTN=early (a bench hook; 13.6 us
// a layer against inflight's 12.7 on an H100), where the split's rows fit AS_V3 per lane (decoding: splits of
// up to 64 positions), the v loads are issued before phase 1, beside the k loads: one round trip to L2 instead of
// two in a row. Under QWENFT_DECODE_ATTN=rows (a bench hook; 12.4 us on an H100) the split's pool rows are looked
// up before the programmatic wait, and q comes in 16-byte loads: after the wait the critical path is q, then k
// (two round trips to L2 where inflight has q's eight 2-byte loads, then the position, the block table and k in a
// row)
// The default form since session 23 (QWENFT_DECODE_ATTN=pre; the former default is "inflight") goes further than
// rows: the split's cached k and v rows that no kernel of this call writes (positions below the lowest one of the
// call's tokens of the sequence: a call writes one row per token, at its position) are copied into shared memory
// (cp.async) before the programmatic wait, while the kernels before it end; after the wait only q and the call's own
// rows are loaded, and phases 1 and 3 read the rows from shared memory, the same products in the same order. Calls
// of more than 64 tokens (each block scans the call's positions for the lowest) and splits of more than 64 positions
// (their rows would not fit the 48 KiB) run as the rows form.
static const int AS_V3 = 8; // phase 3's v rows in flight per thread (DC > 0)

template <typename T, typename Rows, int TPP, int DC, bool PRE = false>
__global__ void __launch_bounds__(AS_THREADS)
    attn_split_kernel(T *out, float *part, int *cnt, const T *q, const T *kc, const T *vc, Rows rows, int H, int KV,
                      int Drt, int split, int nsplit, float scale, bool vec, bool early, bool first) {
    const int D = DC > 0 ? DC : Drt;
    extern __shared__ float as_smem[]; // qs[MAXG][QS] | ps[MAXG][split] | rowix[split] | (pre) ks, vs [split][DC] T;
                                       // later red[P][MAXG][D]
    __shared__ float ml[2 * AS_MAXG];  // per head: the split's max, exp-sum
    const int tok = blockIdx.x / KV, kh = blockIdx.x % KV, s = blockIdx.y, G = H / KV, g0 = blockIdx.z * AS_MAXG;
    const int ng = min(AS_MAXG, G - g0), t = rows.last(tok), p0 = s * split;
    if (p0 > t) return; // past this token's positions
    const int n = min(t + 1 - p0, split), tid = threadIdx.x, h0 = kh * G + g0;
    const size_t prow = (size_t)KV * D;
    // qs: head g's D values in TPP slices of D/TPP, each slice padded by 4 floats (the TPP threads of a position read
    // 16-byte words of different slices at once: without the pad they would sit 4 * D/TPP bytes apart, in the same
    // banks)
    const int DT = D / TPP, QS = D + 4 * TPP;
    float *qs = as_smem, *ps = qs + AS_MAXG * QS;
    int *rowix = reinterpret_cast<int *>(ps + AS_MAXG * split);
    // first (DC > 0, QWENFT_DECODE_ATTN=rows): the split's pool rows looked up once, here, before the wait, into
    // rowix; after the wait the k and v loads read them from shared memory instead of the position's and the block
    // table's loads in a row, and q arrives in 16-byte loads (one per thread) instead of 2-byte ones
    constexpr bool pre = DC > 0 && PRE; // a template parameter: the other forms' code stays as it was
    const bool rf = DC > 0 && (first || pre);
    if (rf) {
        for (int j = tid; j < n; j += AS_THREADS) rowix[j] = rows.row(tok, p0 + j);
        __syncthreads();
    }
    // pre: ks, vs 16-byte aligned after rowix; rows at positions >= fresh may be this call's writes (its N = gridDim.x
    // / KV tokens), the others were written by earlier calls, whose kernels have all completed
    const size_t kv_off =
        ((reinterpret_cast<size_t>(rowix + split) - reinterpret_cast<size_t>(as_smem)) + 15) / 16 * 16;
    T *ks = reinterpret_cast<T *>(reinterpret_cast<char *>(as_smem) + kv_off);
    T *vs = ks + (size_t)split * (DC > 0 ? DC : 1);
    __shared__ int fred[PRE ? 32 : 1];
    int fresh = 0;
    if constexpr (pre) fresh = rows.first_written(tok, (int)gridDim.x / KV, fred);
    const int W8 = DC > 0 ? DC / 8 : 1; // 16-byte words of a cache row slice (DC > 0)
    if constexpr (pre) { // the earlier calls' rows into shared memory now, asynchronously (cp.async: no register held)
        for (int e = tid; e < 2 * n * W8; e += AS_THREADS) {
            const int j = e / (2 * W8), c = e % (2 * W8), isv = c >= W8, w = c % W8;
            if (p0 + j >= fresh) continue;
            const T *src = (isv ? vc : kc) + (size_t)rowix[j] * prow + (size_t)kh * DC + (size_t)w * 8;
            tc::cp_async16((isv ? vs : ks) + (size_t)j * DC + (size_t)w * 8, src, true);
        }
        tc::cp_commit();
    } else { // a programmatic dependent launch: the split's k and v rows asked of L2 while the kernel before it
      // (decode_qkv, the q projection or the append) ends; positions and block tables are the step's host copies,
      // which precede every kernel of the step, and nothing is loaded into registers from the caches or q before the
      // wait
        const int lines = (int)((D * sizeof(T) + 127) / 128);
        for (int e = tid; e < 2 * n * lines; e += AS_THREADS) {
            const int j = e / (2 * lines), c = e % (2 * lines);
            const T *base = (c < lines ? kc : vc) + (size_t)(rf ? rowix[j] : rows.row(tok, p0 + j)) * prow +
                            (size_t)kh * D;
            qf_prefetch_l2(reinterpret_cast<const char *>(base) + (size_t)(c % lines) * 128);
        }
    }
    qf_pdl_wait();
    // the o projection after it may be scheduled now (it waits for this kernel before reading; triggered after the
    // wait, so that its weight prefetch overlaps this kernel, not the ones before it, and L2 holds one kernel's)
    qf_pdl_trigger();
    if constexpr (pre) { // this call's rows, now that the kernel that wrote them has completed
        for (int e = tid; e < 2 * n * W8; e += AS_THREADS) {
            const int j = e / (2 * W8), c = e % (2 * W8), isv = c >= W8, w = c % W8;
            if (p0 + j < fresh) continue;
            const T *src = (isv ? vc : kc) + (size_t)rowix[j] * prow + (size_t)kh * DC + (size_t)w * 8;
            tc::cp_async16((isv ? vs : ks) + (size_t)j * DC + (size_t)w * 8, src, true);
        }
        tc::cp_commit();
    }
    // phase 3's lanes (DV = D/8 threads a cache row, P = THREADS/DV rows at a time); where the split's n rows fit
    // AS_V3 rows per lane (DC > 0: decoding splits of up to 64 positions at D = 128), the v rows' loads are issued
    // here, beside phase 1's k loads, and consumed in phase 3: one round trip to L2 instead of two in a row
    const int DV = D / 8, P = AS_THREADS / DV, dv = tid % DV, pl = tid / DV;
    const bool v_early = DC > 0 && early && n <= AS_V3 * P; // early: QWENFT_DECODE_ATTN=early
    uint4 vraw[DC > 0 ? AS_V3 : 1];
    if constexpr (DC > 0) {
        if (v_early)
#pragma unroll
            for (int u = 0; u < AS_V3; u++)
                if (pl + u * P < n)
                    vraw[u] = *reinterpret_cast<const uint4 *>(
                        vc + (size_t)(rf ? rowix[pl + u * P] : rows.row(tok, p0 + pl + u * P)) * prow +
                        (size_t)kh * DC + (size_t)dv * 8);
    }
    if constexpr (DC > 0) {
        if (rf) { // 8 values a thread (AS_MAXG * DC / 8 = AS_THREADS at DC = 128), the same products as below
            for (int e = tid; e < AS_MAXG * DC / 8; e += AS_THREADS) {
                const int g = e / (DC / 8), d0 = e % (DC / 8) * 8;
                float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                if (g < ng) {
                    const uint4 raw = *reinterpret_cast<const uint4 *>(q + ((size_t)tok * H + h0 + g) * DC + d0);
                    unpack8<T>(f, raw);
#pragma unroll
                    for (int c = 0; c < 8; c++) f[c] *= scale;
                }
                float *dst = qs + g * QS + d0 / DT * (DT + 4) + d0 % DT; // 8 | DT: the 8 stay in one slice
#pragma unroll
                for (int c = 0; c < 8; c++) dst[c] = f[c];
            }
        }
    }
    if (!rf)
        for (int e = tid; e < AS_MAXG * D; e += AS_THREADS) // heads past ng read as 0
            qs[(e / D) * QS + (e % D) / DT * (DT + 4) + e % DT] =
                e < ng * D ? tof<T>(q[((size_t)tok * H + h0) * D + e]) * scale : 0.0f;
    if constexpr (pre) tc::cp_wait<0>(); // this thread's copies landed; the barrier makes every thread's visible
    __syncthreads();
    // phase 1: scores, TPP threads per cache position (each D/TPP dimensions; their sums meet by shuffles): the
    // split's positions in passes of AS_THREADS/TPP, uniform over the block
    const int sub = tid % TPP;
    for (int j0 = 0; j0 < n; j0 += AS_THREADS / TPP) {
        const int j = j0 + tid / TPP;
        float acc[AS_MAXG];
#pragma unroll
        for (int g = 0; g < AS_MAXG; g++) acc[g] = 0.0f;
        if constexpr (DC > 0) { // the slice's DC/TPP/8 loads first, then the same sums as below
            constexpr int NC = DC / TPP / 8;
            uint4 raw[NC];
            if (j < n) {
                const int r = rf ? rowix[j] : rows.row(tok, p0 + j);
                if (sub == 0 && !rf) rowix[j] = r;
                const uint4 *kj = pre ? reinterpret_cast<const uint4 *>(ks + (size_t)j * DC + (size_t)sub * (DC / TPP))
                                      : reinterpret_cast<const uint4 *>(kc + (size_t)r * prow + (size_t)kh * DC +
                                                                        (size_t)sub * (DC / TPP));
#pragma unroll
                for (int c = 0; c < NC; c++) raw[c] = kj[c];
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    float f[8];
                    unpack8<T>(f, raw[c]);
                    as_dot8(acc, qs + sub * (DT + 4) + 8 * c, QS, ng, f);
                }
            }
        } else if (j < n) {
            const int r = rows.row(tok, p0 + j);
            if (sub == 0) rowix[j] = r;
            const T *kj = kc + (size_t)r * prow + (size_t)kh * D + (size_t)sub * DT;
            for (int d = 0; d < DT; d += 8) {
                float f[8];
                ld8<T>(f, kj, d, DT, vec);
                as_dot8(acc, qs + sub * (DT + 4) + d, QS, ng, f);
            }
        }
#pragma unroll
        for (int g = 0; g < AS_MAXG; g++)
#pragma unroll
            for (int o = 1; o < TPP; o <<= 1) acc[g] += __shfl_xor_sync(0xffffffffu, acc[g], o);
        if (j < n && sub == 0)
#pragma unroll
            for (int g = 0; g < AS_MAXG; g++)
                if (g < ng) ps[g * split + j] = acc[g];
    }
    __syncthreads();
    const int warp = tid / 32, lane = tid % 32;
    for (int g = warp; g < ng; g += AS_THREADS / 32) { // phase 2: the split's max and exp-sum per head
        const float2 r = warp_exp_row(ps + g * split, n);
        if (lane == 0) ml[2 * g] = r.x, ml[2 * g + 1] = r.y;
    }
    __syncthreads();
    // phase 3: p . v with 16-byte loads: DV = D/8 threads cover a cache row, P = THREADS/DV position lanes take
    // every P-th position (8 rows in flight per block at D = 128); then the lanes' sums merge in shared memory
    float acc[AS_MAXG][8];
#pragma unroll
    for (int g = 0; g < AS_MAXG; g++)
#pragma unroll
        for (int c = 0; c < 8; c++) acc[g][c] = 0.0f;
    if constexpr (DC > 0) { // AS_V3 rows' loads first, then the rows in the order below (P = AS_THREADS / (DC/8))
        if (v_early) {
#pragma unroll
            for (int u = 0; u < AS_V3; u++) {
                const int j = pl + u * P;
                if (j >= n) break;
                float f[8];
                unpack8<T>(f, vraw[u]);
                as_pv8(acc, ps, split, j, ng, f);
            }
        }
        for (int j0 = pl; !v_early && j0 < n; j0 += AS_V3 * P) {
            uint4 raw[AS_V3];
#pragma unroll
            for (int u = 0; u < AS_V3; u++)
                if (j0 + u * P < n)
                    raw[u] = pre ? *reinterpret_cast<const uint4 *>(vs + (size_t)(j0 + u * P) * DC + (size_t)dv * 8)
                                 : *reinterpret_cast<const uint4 *>(vc + (size_t)rowix[j0 + u * P] * prow +
                                                                    (size_t)kh * DC + (size_t)dv * 8);
#pragma unroll
            for (int u = 0; u < AS_V3; u++) {
                const int j = j0 + u * P;
                if (j >= n) break;
                float f[8];
                unpack8<T>(f, raw[u]);
                as_pv8(acc, ps, split, j, ng, f);
            }
        }
    } else if (pl < P) {
#pragma unroll 2
        for (int j = pl; j < n; j += P) {
            float f[8];
            ld8<T>(f, vc + (size_t)rowix[j] * prow + (size_t)kh * D, (size_t)dv * 8, (size_t)D, vec);
            as_pv8(acc, ps, split, j, ng, f);
        }
    }
    __syncthreads(); // ps, rowix are read: the buffer becomes red[P][MAXG][D]
    float *red = as_smem;
    if (pl < P)
#pragma unroll
        for (int g = 0; g < AS_MAXG; g++)
            if (g < ng)
#pragma unroll
                for (int c = 0; c < 8; c++) red[((size_t)pl * AS_MAXG + g) * D + dv * 8 + c] = acc[g][c];
    __syncthreads();
    const bool direct = t < split; // the token's positions all in split 0
    for (int e = tid; e < ng * D; e += AS_THREADS) {
        const int g = e / D, d = e % D;
        float a = 0.0f;
        for (int o = 0; o < P; o++) a += red[((size_t)o * AS_MAXG + g) * D + d];
        const size_t oh = (size_t)tok * H + h0 + g;
        if (direct) out[oh * D + d] = fromf<T>(a / ml[2 * g + 1]);
        else part[(oh * nsplit + s) * D + d] = a;
    }
    if (direct) return;
    float *mlo = part + (size_t)gridDim.x / KV * H * nsplit * D; // after the partial sums: [N*H, nsplit, 2]
    if (tid < ng) {
        const size_t oh = (size_t)tok * H + h0 + tid;
        mlo[(oh * nsplit + s) * 2] = ml[2 * tid], mlo[(oh * nsplit + s) * 2 + 1] = ml[2 * tid + 1];
    }
    // the last of the item's ns blocks merges (red was read before it counts: as_smem is free for the weights)
    split_merge_last<T>(out, part, mlo, cnt + (size_t)blockIdx.x * gridDim.z + blockIdx.z, t / split + 1, tok, H, h0,
                        ng, D, nsplit, as_smem);
}

// out[N, H, D] for N query tokens whose last positions are at most max_len - 1: the split size that gives the GPU
// about two blocks per SM, the split kernel, and the combine where a token spans several splits
template <typename T, typename Rows>
static void attn_split_launch(void *out, const void *q, const void *kc, const void *vc, Rows rows, int N, int H,
                              int KV, int D, int max_len) {
    const int G = H / KV, ngroups = (G + AS_MAXG - 1) / AS_MAXG;
    const long items = (long)N * KV * ngroups;
    const long want = (2L * qfc().num_sms + items - 1) / items; // splits per item
    long split = (max_len + want - 1) / want;
    split = (split + 31) / 32 * 32;
    if (qfc().decode_attn_split > 0) split = qfc().decode_attn_split; // QWENFT_DECODE_ATTN_SPLIT (a bench hook)
    split = split < 32 ? 32 : split > AS_MAX_SPLIT ? AS_MAX_SPLIT : split;
    const int nsplit = (int)((max_len + split - 1) / split);
    const bool vec = D % 8 == 0 && qf_ptr_aligned(kc, 16) && qf_ptr_aligned(vc, 16);
    float *part = NULL;
    int *cnt = NULL;
    if (nsplit > 1) {
        part = (float *)qfc_scratch(sizeof(float) * (size_t)N * H * nsplit * (D + 2));
        cnt = qfc_split_counters((size_t)N * KV * ngroups);
    }
    // 4 threads per position in the scores where a split holds few positions (decoding: 32 of a 512-token context at
    // batch 1, so 32 of the 128 threads would work), else one
    const int tpp = D % 32 == 0 && split <= 64 ? 4 : 1;
    const size_t phases =
        sizeof(float) * ((size_t)AS_MAXG * (D + 4 * tpp) + (size_t)AS_MAXG * split) + sizeof(int) * split;
    const size_t merge = sizeof(float) * (size_t)(AS_THREADS / (D / 8)) * AS_MAXG * D; // red: 32 KiB
    const size_t weights = sizeof(float) * (size_t)AS_MAXG * nsplit;                    // the last block's wgt
    // QWENFT_DECODE_ATTN=pre: the split's k and v rows in shared memory after the phases' arrays (16-byte aligned)
    const size_t pre_bytes = (phases + 15) / 16 * 16 + 2 * (size_t)split * D * sizeof(T);
    const bool pre = qfc().decode_attn_mlp >= 4 && sizeof(T) == 2 && D == 128 && vec && qf_ptr_aligned(q, 16) &&
                     N <= 64 && split <= 64 && pre_bytes <= ((size_t)48 << 10); // split <= 64: the 4-thread scores
    size_t smem = pre ? pre_bytes : phases;
    smem = smem > merge ? smem : merge;
    smem = smem > weights ? smem : weights;
    if (smem > (size_t)48 << 10) // the default dynamic limit (not raised for this kernel)
        qf_fatal_at(__FILE__, __LINE__, "attention: %d cache positions need %zu bytes of shared memory per block "
                    "(at most 48 KiB)", max_len, smem);
    const dim3 grid((unsigned)((size_t)N * KV), (unsigned)nsplit, (unsigned)ngroups);
    const float scale = (float)(1.0 / sqrt((double)D));
    // the forms with the loads in flight (DC = 128) where they apply, unless QWENFT_DECODE_ATTN=plain
    const bool mlp = qfc().decode_attn_mlp && sizeof(T) == 2 && D == 128 && vec;
    const bool early = qfc().decode_attn_mlp == 1;
    const bool first = qfc().decode_attn_mlp >= 3 && qf_ptr_aligned(q, 16); // rows, pre (cluster: pre here)
#define QF_AS_LAUNCH(TPP, DC, ...)                                                                                     \
    qfc_launch_pdl(attn_split_kernel<T, Rows, TPP, DC, ##__VA_ARGS__>, grid, AS_THREADS, smem, (T *)out, part, cnt,   \
                   (const T *)q, (const T *)kc, (const T *)vc, rows, H, KV, D, (int)split, nsplit, scale, vec, early,  \
                   first)
    if constexpr (sizeof(T) == 2) {
        if (mlp && tpp == 4 && pre) QF_AS_LAUNCH(4, 128, true);
        else if (mlp && tpp == 4) QF_AS_LAUNCH(4, 128);
        else if (mlp) QF_AS_LAUNCH(1, 128);
        else if (tpp == 4) QF_AS_LAUNCH(4, 0);
        else QF_AS_LAUNCH(1, 0);
    } else {
        if (tpp == 4) QF_AS_LAUNCH(4, 0);
        else QF_AS_LAUNCH(1, 0);
    }
#undef QF_AS_LAUNCH
    CHECK_LAUNCH();
}
// ---- paged (attention_paged) ----------------------------------------------------------------------------------

// the pool row of position p of the sequence whose block table is blk
__device__ __forceinline__ size_t pg_row(const int32_t *blk, int p, int bs) { return (size_t)blk[p / bs] * bs + p % bs; }

template <typename T>
__global__ void kv_append_paged_kernel(T *kp, T *vp, const T *k, const T *v, const int32_t *seq, const int32_t *pos,
                                       const int32_t *btab, int N, int maxb, int bs, int KVD) {
    const size_t n = (size_t)N * KVD;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const int tok = (int)(e / KVD);
        const size_t col = e % KVD, dst = pg_row(btab + (size_t)seq[tok] * maxb, pos[tok], bs) * KVD + col;
        kp[dst] = k[e];
        vp[dst] = v[e];
    }
}

template <typename T>
void cu_kv_append_paged(void *kpool, void *vpool, const void *k, const void *v, const int32_t *seq, const int32_t *pos,
                        const int32_t *btab, int N, int maxb, int bs, int KV, int D) {
    const int KVD = KV * D;
    const size_t n = (size_t)N * KVD;
    if (N < 1) return;
    kv_append_paged_kernel<T><<<qf_blocks(n, 256, (unsigned)qfc().num_sms * 8u), 256, 0, qfc_stream()>>>(
        (T *)kpool, (T *)vpool, (const T *)k, (const T *)v, seq, pos, btab, N, maxb, bs, KVD);
    CHECK_LAUNCH();
}

template <typename T>
void cu_attention_paged(void *out, const void *q, const void *k, const void *v, void *kpool, void *vpool,
                        const int32_t *seq, const int32_t *pos, const int32_t *btab, int N, int maxb, int bs, int H,
                        int KV, int D, int max_len) {
    if (D > DA_MAX_D || D % 8 || KV <= 0 || H % KV != 0 || N < 1 || bs < 1 ||
        max_len < 1 || max_len > maxb * bs)
        qf_fatal_at(__FILE__, __LINE__, "attention_paged: unsupported shape H %d KV %d D %d N %d bs %d max_len %d (D "
                    "<= %d, a multiple of 8; max_len <= maxb * bs)", H, KV, D, N, bs, max_len, DA_MAX_D);
    QF_CHECK((k == NULL) == (v == NULL));
    if (k) cu_kv_append_paged<T>(kpool, vpool, k, v, seq, pos, btab, N, maxb, bs, KV, D); // else decode_qkv wrote them
    if (cu_attention_cluster<T>(out, q, kpool, vpool, seq, pos, btab, N, maxb, bs, H, KV, D, max_len)) return;
    const rows_paged rows{seq, pos, btab, maxb, bs};
    if (qfc().decode_attn_mlp == 6 && cu_attention_mma<T>(out, q, kpool, vpool, rows, N, H, KV, D, max_len)) return;
    attn_split_launch<T>(out, q, kpool, vpool, rows, N, H, KV, D, max_len);
}

extern "C" void qf_cuda_set_decode_attn_mlp(int form) { qfc().decode_attn_mlp = form < 0 || form > 6 ? 6 : form; }
extern "C" int qf_cuda_decode_attn_mlp(void) { return qfc().decode_attn_mlp; }

#define QF_DECODE_INSTANTIATE(T)                                                                                     \
    template void cu_attention_paged<T>(void *, const void *, const void *, const void *, void *, void *,            \
                                        const int32_t *, const int32_t *, const int32_t *, int, int, int, int, int,  \
                                        int, int);                                                                   \
    template void cu_kv_append_paged<T>(void *, void *, const void *, const void *, const int32_t *, const int32_t *, \
                                        const int32_t *, int, int, int, int, int);
QF_DECODE_INSTANTIATE(float)
QF_DECODE_INSTANTIATE(bf16)
QF_DECODE_INSTANTIATE(f16)
