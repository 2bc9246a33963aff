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
#include "cuda_common.cuh"

static const int GV_WARPS = 8;
static const size_t GV_X_BYTES = (size_t)16 << 10;

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

// out[N, OUT] = x[N, IN] w[OUT, IN]^T (+ bias) (+ res, or + out when accumulate): true when it ran
template <typename T>
bool cu_gemv(T *out, const T *x, const T *w, const T *bias, const T *res, int N, int IN, int OUT, int accumulate) {
    if (N < 1 || N > 8 || IN % 8 || (size_t)N * IN * sizeof(T) > GV_X_BYTES || !qf_ptr_aligned(x, 16) ||
        !qf_ptr_aligned(w, 16))
        return false;
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
