// decode_attn_cluster_cuda.cu — the cluster form of attention_paged (ops.h) for calls of a few decoding tokens:
// 16-bit tables, head_dim 128, at most 1024 cached positions, sm_90 (thread-block clusters). The default for calls
// of up to QWENFT_DECODE_ATTN_CLUSTER_N tokens (default 4); QWENFT_DECODE_ATTN=pre (or any split form) turns it off
// (docs/testing.md). Every other call runs the split kernel (decode_attention_cuda.cu).
//
// One cluster of R = 8 CTAs (16 where 8's slices would take more than 40 KiB of shared memory a CTA and the call's
// clusters of 16 all fit on the device at once; the bench hook QWENFT_ATTN_CLUSTER_RANKS=8|16 sets R for every call)
// per (token, kv head, group of up to GS of its query heads); CTA r takes the r-th R-th of the token's positions 0..t.
// Before the programmatic wait each CTA looks its slice's pool rows up and copies the cached k and v rows that no
// kernel of this call writes (positions below the lowest one that the call's tokens of the sequence write) into shared
// memory (cp.async, no register held); after it, the call's own rows and q. Then, all from shared memory: the scores (8
// threads a position, 16 dimensions each, q in registers), the slice's max and exp-sum per head (a warp a head), p.v
// (16 threads a row, 8 dimensions each; 16 position lanes merged by a shuffle and one pass over shared memory). The
// slices meet through distributed shared memory: after a cluster barrier, rank r reads every rank's max, exp-sum and
// sums for its 128/R dimensions (from (128/R) r) and writes the output (sum_r e^(m_r - M) x_r / sum_r e^(m_r - M) l_r,
// the ranks in order); a second barrier keeps every CTA's shared memory alive until the others have read it. Against
// the split kernel this drops the global partial sums, the fence, the counter and the last block's merge: half its time
// at batch 1 on an H100 (session 26: 6.3 against 12.1 us a layer at Qwen2.5-7B's shapes). At many sequences it is
// slower (32 sequences: every cluster's slices in shared memory take two waves), so it serves the calls of a few
// tokens. fp32 math, scale 1/sqrt(D) folded into q, one rounding to T on store; other sums than the split kernel's (not
// bit for bit: within its rounding, tests/gpu/test_paged_cuda.c).
#include "attention_tile.cuh" // cp.async
#include "cuda_common.cuh"
#include "paged_rows.cuh"
#include <algorithm>
#include <cooperative_groups.h>
#include <type_traits>

namespace cg = cooperative_groups;

// CTAs per cluster: R = 16 (a non-portable size, sm_90: slices of half the positions; at Qwen2.5-7B's one decoding
// token, 4 query heads a CTA, 8 clusters) or 8 (a portable size)
static const int AC_THREADS = 256;  // 8 warps
static const int AC_D = 128;        // head_dim
static const int AC_MAX_POS = 1024; // cached positions (128 a CTA: 64 KiB of k and v rows in shared memory)
// the most shared memory a CTA of a cluster of 8 takes by default before clusters of 16 do (session 30, H100: the
// step flat while 8's slices take up to 38 KiB, 576 positions at Qwen2.5-7B, 0.1 ms slower at 42 KiB)
static const size_t AC_SMEM_8 = (size_t)40 << 10;

// The dynamic shared memory of one CTA for slices of up to per_max positions (host and device agree):
// ks, vs [per_max][128] T | ps [GS][per_max] f32 | xo [GS][128] f32 | ml [GS][2] f32 | rowix [per_max] i32 |
// red [8 warps][GS][128] f32, unless it fits in ks (free after the scores)
struct ac_layout {
    size_t ks, vs, ps, xo, ml, rowix, red, bytes;
    __host__ __device__ ac_layout(int per_max, int GS, int tsize) {
        const size_t kv = (size_t)per_max * AC_D * tsize, redb = (size_t)8 * GS * AC_D * 4;
        ks = 0, vs = kv, ps = 2 * kv, xo = ps + (size_t)GS * per_max * 4, ml = xo + (size_t)GS * AC_D * 4;
        rowix = ml + (size_t)GS * 2 * 4;
        const size_t end = (rowix + (size_t)per_max * 4 + 15) / 16 * 16;
        red = redb <= kv ? ks : end;
        bytes = redb <= kv ? end : end + redb;
    }
};

template <typename T, int GS, int R>
__global__ void __launch_bounds__(AC_THREADS)
    attn_cluster_kernel(T *out, const T *q, const T *kc, const T *vc, rows_paged rows, int N, int H, int KV, int ngrp,
                        int per_max, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cl = cg::this_cluster();
    extern __shared__ __align__(16) unsigned char ac_smem[];
    __shared__ int fred[32];
    const ac_layout L(per_max, GS, (int)sizeof(T));
    T *ks = reinterpret_cast<T *>(ac_smem + L.ks), *vs = reinterpret_cast<T *>(ac_smem + L.vs);
    float *ps = reinterpret_cast<float *>(ac_smem + L.ps), *xo = reinterpret_cast<float *>(ac_smem + L.xo);
    float *ml = reinterpret_cast<float *>(ac_smem + L.ml), *red = reinterpret_cast<float *>(ac_smem + L.red);
    int *rowix = reinterpret_cast<int *>(ac_smem + L.rowix);
    const int rank = (int)cl.block_rank(), item = blockIdx.x / R, tid = threadIdx.x;
    const int G = H / KV, tok = item / (KV * ngrp), kh = item / ngrp % KV, g0 = item % ngrp * GS;
    const int ng = min(GS, G - g0), h0 = kh * G + g0;
    const int t = rows.last(tok), per = (t + R) / R; // ceil((t + 1) / R) <= per_max
    const int p0 = rank * per, n = max(0, min(t + 1 - p0, per));   // this CTA's positions p0 .. p0 + n - 1
    const size_t prow = (size_t)KV * AC_D;
    const int fresh = rows.first_written(tok, N, fred); // rows at positions >= fresh may be this call's writes
    for (int j = tid; j < n; j += AC_THREADS) rowix[j] = rows.row(tok, p0 + j);
    __syncthreads();
    // 16 words of 16 bytes a row, k then v: the earlier calls' rows now (their kernels have all completed), the
    // call's own after the wait
    for (int e = tid; e < n * 32; e += AC_THREADS) {
        const int j = e / 32, isv = e % 32 >= 16, w = e % 16;
        if (p0 + j >= fresh) continue;
        tc::cp_async16((isv ? vs : ks) + (size_t)j * AC_D + w * 8,
                       (isv ? vc : kc) + (size_t)rowix[j] * prow + (size_t)kh * AC_D + w * 8, true);
    }
    tc::cp_commit();
    qf_pdl_wait();
    qf_pdl_trigger(); // the o projection after it may be scheduled (it waits for this kernel before reading)
    for (int e = tid; e < n * 32; e += AC_THREADS) {
        const int j = e / 32, isv = e % 32 >= 16, w = e % 16;
        if (p0 + j < fresh) continue;
        tc::cp_async16((isv ? vs : ks) + (size_t)j * AC_D + w * 8,
                       (isv ? vc : kc) + (size_t)rowix[j] * prow + (size_t)kh * AC_D + w * 8, true);
    }
    tc::cp_commit();
    // the scores' threads: 8 a position (sub), words sub and sub + 8 of the row (dimensions 8 sub.. and 64 + 8 sub..):
    // a quarter warp reads one row's 128 contiguous bytes at a time; q's same 16 dimensions in registers
    const int sub = tid % 8;
    float qr[GS][16];
#pragma unroll
    for (int g = 0; g < GS; g++) {
#pragma unroll
        for (int c = 0; c < 2; c++) {
            float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (g < ng)
                unpack8<T>(f, *reinterpret_cast<const uint4 *>(q + ((size_t)tok * H + h0 + g) * AC_D +
                                                               (size_t)(sub + 8 * c) * 8));
#pragma unroll
            for (int i = 0; i < 8; i++) qr[g][8 * c + i] = f[i] * scale;
        }
    }
    tc::cp_wait<0>(); // this thread's copies landed; the barrier makes every thread's visible
    __syncthreads();
    for (int j0 = 0; j0 < n; j0 += AC_THREADS / 8) { // n is uniform over the block: every lane shuffles
        const int j = j0 + tid / 8;
        float acc[GS];
#pragma unroll
        for (int g = 0; g < GS; g++) acc[g] = 0.0f;
        if (j < n) {
            const uint4 *kj = reinterpret_cast<const uint4 *>(ks + (size_t)j * AC_D);
            const uint4 r0 = kj[sub], r1 = kj[sub + 8];
            float f0[8], f1[8];
            unpack8<T>(f0, r0);
            unpack8<T>(f1, r1);
#pragma unroll
            for (int g = 0; g < GS; g++)
#pragma unroll
                for (int i = 0; i < 8; i++) acc[g] += qr[g][i] * f0[i] + qr[g][8 + i] * f1[i];
        }
#pragma unroll
        for (int g = 0; g < GS; g++)
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) acc[g] += __shfl_xor_sync(0xffffffffu, acc[g], o);
        if (j < n && sub == 0)
#pragma unroll
            for (int g = 0; g < GS; g++)
                if (g < ng) ps[g * per_max + j] = acc[g];
    }
    __syncthreads();
    const int warp = tid / 32, lane = tid % 32;
    if (warp < ng) { // the slice's max and exp-sum of head warp (an empty slice: -inf, 0)
        const float2 r = warp_exp_row(ps + warp * per_max, n);
        if (lane == 0) ml[2 * warp] = r.x, ml[2 * warp + 1] = r.y;
    }
    __syncthreads();
    // p.v: 16 threads a row (dimensions 8 dv..), 16 position lanes (pl) over the slice
    const int dv = tid % 16, pl = tid / 16;
    float acc[GS][8];
#pragma unroll
    for (int g = 0; g < GS; g++)
#pragma unroll
        for (int c = 0; c < 8; c++) acc[g][c] = 0.0f;
#pragma unroll 4
    for (int j = pl; j < n; j += AC_THREADS / 16) {
        float f[8];
        unpack8<T>(f, reinterpret_cast<const uint4 *>(vs + (size_t)j * AC_D)[dv]);
#pragma unroll
        for (int g = 0; g < GS; g++) {
            const float w = g < ng ? ps[g * per_max + j] : 0.0f;
#pragma unroll
            for (int c = 0; c < 8; c++) acc[g][c] += w * f[c];
        }
    }
    // the warp's two lanes (pl even, odd) by a shuffle, then the 8 warps through shared memory (red may be ks: read
    // by no thread since the scores)
#pragma unroll
    for (int g = 0; g < GS; g++)
#pragma unroll
        for (int c = 0; c < 8; c++) acc[g][c] += __shfl_xor_sync(0xffffffffu, acc[g][c], 16);
    if (lane < 16)
#pragma unroll
        for (int g = 0; g < GS; g++)
            if (g < ng)
#pragma unroll
                for (int c = 0; c < 8; c++) red[((size_t)warp * GS + g) * AC_D + dv * 8 + c] = acc[g][c];
    __syncthreads();
    for (int e = tid; e < ng * AC_D; e += AC_THREADS) {
        const int g = e / AC_D, d = e % AC_D;
        float a = 0.0f;
#pragma unroll
        for (int w = 0; w < AC_THREADS / 32; w++) a += red[((size_t)w * GS + g) * AC_D + d];
        xo[g * AC_D + d] = a;
    }
    cl.sync(); // every rank's ml and xo written and visible to the cluster
    for (int e = tid; e < ng * (AC_D / R); e += AC_THREADS) {
        const int g = e / (AC_D / R), d = rank * (AC_D / R) + e % (AC_D / R);
        float m[R], l[R], x[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float *rml = cl.map_shared_rank(ml, r);
            m[r] = rml[2 * g], l[r] = rml[2 * g + 1], x[r] = cl.map_shared_rank(xo, r)[g * AC_D + d];
        }
        float M = m[0]; // rank 0's slice is never empty: M is finite
#pragma unroll
        for (int r = 1; r < R; r++) M = fmaxf(M, m[r]);
        float Ls = 0.0f, a = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float s = expf(m[r] - M); // 0 for an empty slice (m = -inf; its l and x are 0)
            Ls += s * l[r], a += s * x[r];
        }
        out[((size_t)tok * H + h0 + g) * AC_D + d] = fromf<T>(a / Ls);
    }
    cl.sync(); // no CTA leaves while another may still read its shared memory
#endif
}

template <typename T, int GS, int R>
static void ac_launch(void *out, const void *q, const void *kc, const void *vc, rows_paged rows, int N, int H,
                      int KV, int ngrp, int per_max) {
    const ac_layout L(per_max, GS, (int)sizeof(T));
    const int ti = std::is_same<T, f16>::value ? 1 : 0, gi = GS == 1 ? 0 : GS == 2 ? 1 : 2;
    size_t &opted = qfc().attn_cluster_smem[R == 16][ti][gi]; // the opt-in above 48 KiB, per kernel instance
    if (L.bytes > ((size_t)48 << 10) && L.bytes > opted) {
        CHECK_CUDA(cudaFuncSetAttribute(attn_cluster_kernel<T, GS, R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)L.bytes));
        opted = L.bytes;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((size_t)N * KV * ngrp * R)), cfg.blockDim = dim3(AC_THREADS);
    cfg.dynamicSmemBytes = L.bytes, cfg.stream = qfc_stream();
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = R, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at, cfg.numAttrs = 2;
    const float scale = (float)(1.0 / sqrt((double)AC_D));
    CHECK_CUDA(cudaLaunchKernelEx(&cfg, attn_cluster_kernel<T, GS, R>, (T *)out, (const T *)q, (const T *)kc,
                                  (const T *)vc, rows, N, H, KV, ngrp, per_max, scale));
    qfc().attn_cluster_launches++;
}

// The clusters of 16 that fit on the device at once (the fewest over the kernel instances, at the longest slices'
// shared memory, which stays under the 48 KiB a kernel gets without an opt-in), checked once: 0 where none runs (the
// non-portable size refused, or no room), with a line on stderr naming the failed call under
// QWENFT_ATTN_CLUSTER_RANKS=16
static int cluster16_fit() {
    qf_cuda_ctx &c = qfc();
    if (c.attn_cluster16 == 0) {
        const void *fn[] = {(const void *)attn_cluster_kernel<bf16, 1, 16>,
                            (const void *)attn_cluster_kernel<bf16, 2, 16>,
                            (const void *)attn_cluster_kernel<bf16, 4, 16>,
                            (const void *)attn_cluster_kernel<f16, 1, 16>,
                            (const void *)attn_cluster_kernel<f16, 2, 16>,
                            (const void *)attn_cluster_kernel<f16, 4, 16>};
        const int gs[] = {1, 2, 4, 1, 2, 4};
        const char *failed = NULL;
        cudaError_t err = cudaSuccess;
        int fit = 1 << 30;
        for (int i = 0; i < 6 && !failed; i++) {
            err = cudaFuncSetAttribute(fn[i], cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
            if (err != cudaSuccess) {
                failed = "cudaFuncSetAttribute(NonPortableClusterSizeAllowed)";
                break;
            }
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(16), cfg.blockDim = dim3(AC_THREADS);
            cfg.dynamicSmemBytes = ac_layout(AC_MAX_POS / 16, gs[i], 2).bytes; // 35 KiB at 4 heads
            cudaLaunchAttribute at;
            at.id = cudaLaunchAttributeClusterDimension;
            at.val.clusterDim.x = 16, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
            cfg.attrs = &at, cfg.numAttrs = 1;
            int nc = 0;
            err = cudaOccupancyMaxActiveClusters(&nc, fn[i], &cfg);
            if (err != cudaSuccess) failed = "cudaOccupancyMaxActiveClusters";
            else if (nc < 1) failed = "cudaOccupancyMaxActiveClusters (no cluster fits)";
            fit = std::min(fit, nc);
        }
        (void)cudaGetLastError();
        if (failed && c.attn_cluster_ranks == 16)
            fprintf(stderr,
                    "qwen-ft: QWENFT_ATTN_CLUSTER_RANKS=16: this device runs no cluster of 16 (%s: %s); 8 kept\n",
                    failed, cudaGetErrorString(err));
        c.attn_cluster16 = failed ? -1 : fit;
    }
    return std::max(c.attn_cluster16, 0);
}

// the cluster form where it applies (see the top): true if it ran (the caller appended the call's k and v first)
template <typename T>
bool cu_attention_cluster(void *out, const void *q, const void *kc, const void *vc, const int32_t *seq,
                          const int32_t *pos, const int32_t *btab, int N, int maxb, int bs, int H, int KV, int D,
                          int max_len) {
    if constexpr (sizeof(T) != 2) {
        return false;
    } else {
        if (qfc().decode_attn_mlp < 5 || !qfc().pdl || N > qfc().decode_attn_cluster_n || D != AC_D ||
            max_len > AC_MAX_POS || !qf_ptr_aligned(q, 16) || !qf_ptr_aligned(kc, 16) || !qf_ptr_aligned(vc, 16))
            return false;
        // the fewest query heads a cluster (1, 2 or 4) that keep the clusters' CTAs within one per SM
        const int G = H / KV, forced = qfc().attn_cluster_ranks;
        auto group = [&](int R) {
            for (int gs = 1; gs <= 2; gs *= 2)
                if ((long)N * KV * ((G + gs - 1) / gs) * R <= qfc().num_sms) return gs;
            return 4;
        };
        // clusters of 8 while their slices' shared memory stays within AC_SMEM_8 (the batch-1 step is 0.02-0.05 ms
        // faster so on an H100 to 512 positions), else 16 (slices of half the positions, under 35 KiB at every length:
        // 8's reach 66 KiB at 1024 and slow the GEMVs that their early blocks overlap, 0.1-0.17 ms a step from 640
        // positions on) where all of the call's clusters fit at once (a second wave costs more than the slices save)
        int R = 8;
        const int g8 = group(8);
        if (forced == 16 || (forced == 0 && ac_layout((max_len + 7) / 8, g8, 2).bytes > AC_SMEM_8)) {
            const long n16 = (long)N * KV * ((G + group(16) - 1) / group(16));
            if (cluster16_fit() > 0 && (forced == 16 || n16 <= cluster16_fit())) R = 16;
        }
        const int GS = group(R), ngrp = (G + GS - 1) / GS, per_max = (max_len + R - 1) / R;
        const rows_paged rows{seq, pos, btab, maxb, bs};
        if (R == 16) {
            if (GS == 1) ac_launch<T, 1, 16>(out, q, kc, vc, rows, N, H, KV, ngrp, per_max);
            else if (GS == 2) ac_launch<T, 2, 16>(out, q, kc, vc, rows, N, H, KV, ngrp, per_max);
            else ac_launch<T, 4, 16>(out, q, kc, vc, rows, N, H, KV, ngrp, per_max);
            qfc().attn_cluster16_launches++;
        } else if (GS == 1) ac_launch<T, 1, 8>(out, q, kc, vc, rows, N, H, KV, ngrp, per_max);
        else if (GS == 2) ac_launch<T, 2, 8>(out, q, kc, vc, rows, N, H, KV, ngrp, per_max);
        else ac_launch<T, 4, 8>(out, q, kc, vc, rows, N, H, KV, ngrp, per_max);
        return true;
    }
}

extern "C" int qf_cuda_decode_attn_cluster_n(void) { return qfc().decode_attn_cluster_n; }
extern "C" long qf_cuda_attn_cluster_launches(void) { return qfc().attn_cluster_launches; }
extern "C" int qf_cuda_attn_cluster_available(void) { return qfc().pdl; }
extern "C" long qf_cuda_attn_cluster16_launches(void) { return qfc().attn_cluster16_launches; }
extern "C" int qf_cuda_attn_cluster16_fit(void) { return qfc().pdl ? cluster16_fit() : 0; }

#define QF_CLUSTER_INSTANTIATE(T)                                                                                    \
    template bool cu_attention_cluster<T>(void *, const void *, const void *, const void *, const int32_t *,        \
                                          const int32_t *, const int32_t *, int, int, int, int, int, int, int);
QF_CLUSTER_INSTANTIATE(float)
QF_CLUSTER_INSTANTIATE(bf16)
QF_CLUSTER_INSTANTIATE(f16)
