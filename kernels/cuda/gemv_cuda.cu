// gemv_cuda.cu — the linear layers at decoding sizes (ops.h matmul_fwd / matmul_fwd_add with N <= 8 rows): a
// decoding step reads every weight once for a handful of tokens, so the GEMM is a matrix-vector product bound by
// memory bandwidth, and cuBLASLt's tensor-core tiles leave most of it unused at these shapes (Qwen2.5-7B, one row,
// H200: k/v [512 x 3584] 12.4 us = 296 GB/s, q/o [3584 x 3584] 12.3 us = 2.1 TB/s; bench/decode_bench.c).
//
// One warp per output feature o, 8 warps per block: the warp streams W's row o in 16-byte loads (8 elements per
// lane, 256 per warp step) and dots it with each of the M <= 8 input rows (read through L1: M x IN elements shared
// by every warp of the SM), fp32 accumulation, a warp reduction, then the epilogue of the cuBLASLt path it
// replaces: + bias[o], + res[m, o] (matmul_fwd_add) or + out[m, o] (accumulate), one rounding to T. Used when
// IN % 8 == 0, x and W are 16-byte aligned and the M input rows stay in L1 (M x IN x sizeof(T) <= 16 KiB);
// otherwise cuBLASLt. Measured (7B, H200): one row, q/o 7.2 us (3.5 TB/s), k/v 6.2 us, gate/up 38.3 us; but one
// row of down (IN 18944: 37 KiB) 46 us against cuBLASLt's 38, and 8 rows of q (57 KiB) 29.7 us against 12: rows
// that leave L1 are re-read from L2 by every warp. The sums differ from cuBLASLt's in order only (fp32 both).
// Launched as a programmatic dependent launch (cuda_common.cuh): each warp asks L2 for its row of W while the
// kernel before it still runs, then waits for that kernel before reading x.
//
// One row of 16-bit x (every decoding GEMV at batch 1, and down's 37 KiB row that does not fit L1) takes
// gemv_smem_kernel instead: the block copies x into shared memory once (16-byte words), and each warp streams two
// rows of W (outputs 2o, 2o + 1) with GV_PF 16-byte loads per row in flight (evict-first: W is read once), against
// x from shared memory. Before its wait it asks L2 for whole W rows where the matrix fits 32 MiB (q, k, v, o at 7B:
// the H200's L2 holds 50 MB; the rows are then read from L2), else for their first chunks; it lets the next kernel start only after its
// wait, so that kernel's prefetch overlaps this one. The sums run in gemv_kernel's order (lane-strided 8-element
// chunks in order, fp32, warp_sum). QWENFT_GEMV=l1 (bench hook) keeps one-row GEMVs that fit L1 on gemv_kernel.
#include "cuda_common.cuh"

static const int GV_WARPS = 8;
static const size_t GV_X_BYTES = (size_t)16 << 10;
static const size_t GV_SMEM_X_BYTES = (size_t)96 << 10; // x staged in shared memory (opt-in past 48 KiB)
static const int GV_PF = 4;                             // 16-byte loads in flight per W row and lane

template <typename T, int M>
__global__ void __launch_bounds__(GV_WARPS * 32)
    gemv_kernel(T *out, const T *x, const T *w, const T *bias, const T *res, int IN, int OUT, int accumulate) {
    qf_pdl_trigger();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int o = blockIdx.x * GV_WARPS + warp;
    if (o >= OUT) return;
    const T *wr = w + (size_t)o * IN;
    const int line = 128 / (int)sizeof(T);                                 // elements per 128-byte line
    for (int k = lane * line; k < IN; k += 32 * line) qf_prefetch_l2(wr + k); // W's row while the previous kernel ends
    qf_pdl_wait();
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; m++) acc[m] = 0.0f;
#pragma unroll 4
    for (int k = lane * 8; k < IN; k += 32 * 8) {
        float wf[8];
        ld8<T>(wf, wr, (size_t)k, (size_t)IN, true);
#pragma unroll
        for (int m = 0; m < M; m++) {
            float xf[8];
            ld8<T>(xf, x + (size_t)m * IN, (size_t)k, (size_t)IN, true);
#pragma unroll
            for (int e = 0; e < 8; e++) acc[m] += wf[e] * xf[e];
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++) acc[m] = warp_sum(acc[m]);
    if (lane < M) {
        float v = 0.0f;
#pragma unroll
        for (int m = 0; m < M; m++) // lane m writes row m (acc is uniform across the warp after the reduction)
            if (m == lane) v = acc[m];
        if (bias) v += tof<T>(bias[o]);
        const size_t i = (size_t)lane * OUT + o;
        if (res) v += tof<T>(res[i]);
        else if (accumulate) v += tof<T>(out[i]);
        out[i] = fromf<T>(v);
    }
}

// the epilogue of both kernels: lane m < M stores row m's output o (acc uniform across the warp)
template <typename T, int M>
__device__ __forceinline__ void gv_store(T *out, const float (&acc)[M], const T *bias, const T *res, int o, int OUT,
                                         int accumulate, int lane) {
    if (lane >= M) return;
    float v = 0.0f;
#pragma unroll
    for (int m = 0; m < M; m++)
        if (m == lane) v = acc[m];
    if (bias) v += tof<T>(bias[o]);
    const size_t i = (size_t)lane * OUT + o;
    if (res) v += tof<T>(res[i]);
    else if (accumulate) v += tof<T>(out[i]);
    out[i] = fromf<T>(v);
}

// x [M, IN] in shared memory, two W rows per warp (16-bit T only): out[m, o] for o = 2 * (block's warp) + {0, 1};
// PF 16-byte loads in flight per row and lane (GV_PF; 8 under QWENFT_GEMV_PF=8, a bench hook)
template <typename T, int M, int PF>
__global__ void __launch_bounds__(GV_WARPS * 32)
    gemv_smem_kernel(T *out, const T *x, const T *w, const T *bias, const T *res, int IN, int OUT, int accumulate,
                     int pf) {
    extern __shared__ uint4 gv_xs[]; // [M * IN / 8] 16-byte words of x
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int o0 = (blockIdx.x * GV_WARPS + warp) * 2, o1 = o0 + 1 < OUT ? o0 + 1 : o0;
    const bool on = o0 < OUT;
    const T *w0 = w + (size_t)(on ? o0 : 0) * IN, *w1 = w + (size_t)(on ? o1 : 0) * IN;
    const int line = 128 / (int)sizeof(T);
    if (on) // the rows' first pf elements asked of L2 while the kernel before this one ends
        for (int k = lane * line; k < IN && k < pf; k += 32 * line) qf_prefetch_l2(w0 + k), qf_prefetch_l2(w1 + k);
    qf_pdl_wait();
    qf_pdl_trigger(); // after the wait: the next kernel's weight prefetch overlaps this one only (L2 holds its rows)
    uint4 pa[PF], pb[PF];
#pragma unroll
    for (int i = 0; i < PF; i++) {
        const int k = lane * 8 + i * 256;
        if (on && k < IN) pa[i] = __ldcs(reinterpret_cast<const uint4 *>(w0 + k)), pb[i] = __ldcs(reinterpret_cast<const uint4 *>(w1 + k));
    }
    const int words = M * IN / 8;
    for (int e = threadIdx.x; e < words; e += GV_WARPS * 32) gv_xs[e] = reinterpret_cast<const uint4 *>(x)[e];
    __syncthreads();
    if (!on) return;
    float a0[M], a1[M];
#pragma unroll
    for (int m = 0; m < M; m++) a0[m] = 0.0f, a1[m] = 0.0f;
    for (int k0 = lane * 8; k0 < IN; k0 += PF * 256) {
#pragma unroll
        for (int i = 0; i < PF; i++) {
            const int k = k0 + i * 256;
            if (k >= IN) break;
            float wa[8], wb[8];
            const T *ha = reinterpret_cast<const T *>(&pa[i]), *hb = reinterpret_cast<const T *>(&pb[i]);
#pragma unroll
            for (int j = 0; j < 8; j++) wa[j] = tof<T>(ha[j]), wb[j] = tof<T>(hb[j]);
            const int kn = k + PF * 256;
            if (kn < IN) pa[i] = __ldcs(reinterpret_cast<const uint4 *>(w0 + kn)), pb[i] = __ldcs(reinterpret_cast<const uint4 *>(w1 + kn));
#pragma unroll
            for (int m = 0; m < M; m++) {
                const uint4 xu = gv_xs[((size_t)m * IN + k) / 8];
                const T *hx = reinterpret_cast<const T *>(&xu);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const float xf = tof<T>(hx[j]);
                    a0[m] += wa[j] * xf, a1[m] += wb[j] * xf;
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++) a0[m] = warp_sum(a0[m]), a1[m] = warp_sum(a1[m]);
    gv_store<T, M>(out, a0, bias, res, o0, OUT, accumulate, lane);
    if (o1 != o0) gv_store<T, M>(out, a1, bias, res, o1, OUT, accumulate, lane);
}

// one or two rows too wide for L1 (16-bit T, IN % 8 == 0, 16-byte aligned): gemv_smem_kernel; true when it ran
template <typename T>
static bool gemv_smem(T *out, const T *x, const T *w, const T *bias, const T *res, int N, int IN, int OUT,
                      int accumulate) {
    const size_t smem = (size_t)N * IN * sizeof(T);
    if (sizeof(T) != 2 || N != 1 || smem > GV_SMEM_X_BYTES || smem + 1024 > (size_t)qfc().smem_optin) return false;
    // (two rows of down measured slower than cuBLASLt: 45 us against 38 at 7B; N = 1 only)
    const unsigned grid = (unsigned)((OUT + 2 * GV_WARPS - 1) / (2 * GV_WARPS));
    const int pf = (size_t)OUT * IN * sizeof(T) <= ((size_t)32 << 20) ? IN : GV_PF * 256;
    if (qfc().gemv_pf == 8) { // QWENFT_GEMV_PF=8 (a bench hook): twice the loads in flight per row
        if (smem > 46 * 1024)
            CHECK_CUDA(cudaFuncSetAttribute(gemv_smem_kernel<T, 1, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        qfc_launch_pdl(gemv_smem_kernel<T, 1, 8>, grid, GV_WARPS * 32, smem, out, x, w, bias, res, IN, OUT, accumulate, pf);
    } else {
        if (smem > 46 * 1024)
            CHECK_CUDA(cudaFuncSetAttribute(gemv_smem_kernel<T, 1, GV_PF>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        qfc_launch_pdl(gemv_smem_kernel<T, 1, GV_PF>, grid, GV_WARPS * 32, smem, out, x, w, bias, res, IN, OUT, accumulate, pf);
    }
    CHECK_LAUNCH();
    return true;
}

// out[N, OUT] = x[N, IN] w[OUT, IN]^T (+ bias) (+ res, or + out when accumulate): true when it ran
template <typename T>
bool cu_gemv(T *out, const T *x, const T *w, const T *bias, const T *res, int N, int IN, int OUT, int accumulate) {
    if (N < 1 || N > 8 || IN % 8 || !qf_ptr_aligned(x, 16) || !qf_ptr_aligned(w, 16)) return false;
    const bool fits_l1 = (size_t)N * IN * sizeof(T) <= GV_X_BYTES;
    if (N == 1 && !(fits_l1 && qfc().gemv_l1) && gemv_smem<T>(out, x, w, bias, res, N, IN, OUT, accumulate)) return true;
    if (!fits_l1) return false;
    const unsigned grid = (unsigned)((OUT + GV_WARPS - 1) / GV_WARPS);
#define GV_CASE(m)                                                                                                    \
    case m:                                                                                                          \
        qfc_launch_pdl(gemv_kernel<T, m>, grid, GV_WARPS * 32, 0, out, x, w, bias, res, IN, OUT, accumulate);      \
        break;
    switch (N) {
        GV_CASE(1) GV_CASE(2) GV_CASE(3) GV_CASE(4) GV_CASE(5) GV_CASE(6) GV_CASE(7) GV_CASE(8)
    }
#undef GV_CASE
    CHECK_LAUNCH();
    return true;
}
template bool cu_gemv<float>(float *, const float *, const float *, const float *, const float *, int, int, int, int);
template bool cu_gemv<bf16>(bf16 *, const bf16 *, const bf16 *, const bf16 *, const bf16 *, int, int, int, int);
template bool cu_gemv<f16>(f16 *, const f16 *, const f16 *, const f16 *, const f16 *, int, int, int, int);
