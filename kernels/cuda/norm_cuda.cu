// norm_cuda.cu — RMSNorm (fp32 math, sums of squares in double as the CPU table), RoPE rotate-half (cos/sin from
// the CPU table's formula), and deterministic column sums (RMSNorm dw, linear-layer db).
//
// RMSNorm rows: one warp per row, 8 rows per block (the backward's per-warp dw slices in shared memory: 32 x C bytes
// per block, within the default 48 KiB: C <= 1,536); a 256-thread block per row beyond that. In the bf16 (fp16) table the forward rounds x*rstd to bf16 (fp16) before the weight multiply, as HF does
// (weight * hidden_states.to(input_dtype)); in fp32 nothing is rounded.
// Column sums (dw, db) are deterministic: each block owns a fixed chunk of rows and writes its partial column sums;
// a second kernel adds the chunks' partials in chunk order onto the gradient. No atomics.
#include "cuda_common.cuh"
#include <math.h>

// The backward's dw partials in shared memory, planar: column c at (c % 8) * C8 + c / 8 (C8 = ceil(C / 8)), so
// that the 32 lanes of a warp, each owning 8 consecutive columns, hit 32 different banks.
__device__ __forceinline__ int dw_slot(int c, int C8) { return (c & 7) * C8 + (c >> 3); }

// TPR threads per row: 32 (warp per row, 8 rows per block) or 256 (block per row)
template <typename T, int TPR>
__global__ void __launch_bounds__(256) rmsnorm_fwd_kernel(T *out, float *rstd, const T *x, const T *w, int N, int C,
                                                          float eps, bool vec) {
    __shared__ double sh[8];
    const int sub = threadIdx.x / TPR, li = threadIdx.x % TPR;
    const int n = TPR == 32 ? blockIdx.x * 8 + sub : blockIdx.x;
    if (TPR == 32 && n >= N) return; // whole warps only: no block-wide barrier in warp mode
    const T *xr = x + (size_t)n * C;
    T *yr = out + (size_t)n * C;
    double ss = 0.0;
    for (int c = li * 8; c < C; c += TPR * 8) {
        float f[8];
        ld8<T>(f, xr, c, (size_t)C, vec);
#pragma unroll
        for (int e = 0; e < 8; e++) ss += (double)f[e] * (double)f[e];
    }
    ss = TPR == 32 ? warp_sum_d(ss) : block256_sum_d(ss, sh);
    const float var = (float)(ss / C);
    const float r = 1.0f / sqrtf(var + eps);
    if (li == 0) rstd[n] = r;
    for (int c = li * 8; c < C; c += TPR * 8) {
        float f[8], g[8];
        ld8<T>(f, xr, c, (size_t)C, vec);
        ld8<T>(g, w, c, (size_t)C, vec);
#pragma unroll
        for (int e = 0; e < 8; e++) f[e] = __fmul_rn(g[e], round_to<T>(__fmul_rn(f[e], r)));
        st8<T>(yr, f, c, (size_t)C, vec);
    }
}

template <typename T> void cu_rmsnorm_fwd(void *out, float *rstd, const void *x, const void *w, int N, int C, float eps) {
    if (N <= 0 || C <= 0) return;
    const bool vec = C % 8 == 0 && qf_ptr_aligned(out, 16) && qf_ptr_aligned(x, 16) && qf_ptr_aligned(w, 16);
    // a warp per row (a block per row spent its time in block-wide reductions: 1.7 ms of a Qwen2.5-1.5B step at
    // 8,192 tokens for 0.7 ms of traffic), except for fewer rows than SMs (decoding: one row of Qwen2.5-7B's 3584
    // took 10 us as one warp's serial loads; a block per row spreads them)
    if (N < qfc().num_sms)
        rmsnorm_fwd_kernel<T, 256><<<N, 256, 0, qfc_stream()>>>((T *)out, rstd, (const T *)x, (const T *)w, N, C, eps,
                                                                 vec);
    else
        rmsnorm_fwd_kernel<T, 32><<<(N + 7) / 8, 256, 0, qfc_stream()>>>((T *)out, rstd, (const T *)x, (const T *)w, N,
                                                                          C, eps, vec);
    CHECK_LAUNCH();
}

// Backward: block b owns rows [b*rpc, min(N, (b+1)*rpc)). dx rows as the CPU table:
//   dot = sum_c (g_c w_c) x_c (double), k = r^3 dot / C, dx_c = r (g_c w_c) - k x_c  (WRITE, or ADD onto dx);
// dw partials part[b][c] = sum over the block's rows (in row order per warp, warps in order) of g_c (x_c r).
// dx may alias dout: each thread reads a row element before it writes it, and rows belong to one warp / block.
template <typename T, int TPR>
__global__ void __launch_bounds__(256) rmsnorm_bwd_kernel(T *dx, float *part, const T *dout, const T *x, const T *w,
                                                          const float *rstd, int N, int C, int rpc, int accumulate,
                                                          bool vec) {
    extern __shared__ float dws[]; // [8][8 * C8] (warp mode) or [8 * C8] (block mode), planar (dw_slot)
    __shared__ double sh[8];
    const int sub = threadIdx.x / TPR, li = threadIdx.x % TPR;
    const int C8 = (C + 7) / 8;
    float *my = dws + (TPR == 32 ? (size_t)sub * 8 * C8 : 0);
    for (int j = li; j < 8 * C8; j += TPR) my[j] = 0.0f;
    __syncthreads(); // (columns are zeroed and accumulated by different lanes)
    const int r0 = blockIdx.x * rpc, r1 = min(N, r0 + rpc);
    for (int n = r0 + (TPR == 32 ? sub : 0); n < r1; n += (TPR == 32 ? 8 : 1)) {
        const T *gr = dout + (size_t)n * C, *xr = x + (size_t)n * C;
        T *dr = dx + (size_t)n * C;
        const float r = rstd[n];
        double dot = 0.0;
        for (int c = li * 8; c < C; c += TPR * 8) {
            float g[8], xv[8], wv[8];
            ld8<T>(g, gr, c, (size_t)C, vec);
            ld8<T>(xv, xr, c, (size_t)C, vec);
            ld8<T>(wv, w, c, (size_t)C, vec);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                dot += (double)__fmul_rn(g[e], wv[e]) * (double)xv[e];
                if (c + e < C) my[dw_slot(c + e, C8)] += __fmul_rn(g[e], __fmul_rn(xv[e], r));
            }
        }
        dot = TPR == 32 ? warp_sum_d(dot) : block256_sum_d(dot, sh);
        const float k = (float)((double)r * r * r * dot / C);
        for (int c = li * 8; c < C; c += TPR * 8) {
            float g[8], xv[8], wv[8], d[8];
            ld8<T>(g, gr, c, (size_t)C, vec);
            ld8<T>(xv, xr, c, (size_t)C, vec);
            ld8<T>(wv, w, c, (size_t)C, vec);
            if (accumulate) ld8<T>(d, dr, c, (size_t)C, vec);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float v = __fsub_rn(__fmul_rn(r, __fmul_rn(g[e], wv[e])), __fmul_rn(k, xv[e]));
                d[e] = accumulate ? __fadd_rn(d[e], v) : v;
            }
            st8<T>(dr, d, c, (size_t)C, vec);
        }
    }
    __syncthreads();
    // each thread of the block sums the warps' slices of its columns in warp order
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const int o = dw_slot(c, C8);
        float s = dws[o];
        if (TPR == 32)
            for (int i = 1; i < 8; i++) s += dws[(size_t)i * 8 * C8 + o];
        part[(size_t)blockIdx.x * C + c] = s;
    }
}

// dst[c] += sum_{b < nb} part[b][c], chunk order fixed: 16 strided lanes of chunks per column, then in order.
template <typename T> __global__ void colsum_partials_kernel(T *dst, const float *part, int nb, int C) {
    __shared__ float sh[16][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < C)
        for (int b = threadIdx.y; b < nb; b += 16) s += part[(size_t)b * C + c];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = sh[0][threadIdx.x];
        for (int i = 1; i < 16; i++) t += sh[i][threadIdx.x];
        dst[c] = fromf<T>(tof<T>(dst[c]) + t);
    }
}
template <typename T> static void launch_colsum_partials(void *dst, const float *part, int nb, int C) {
    dim3 blk(32, 16), grid((unsigned)((C + 31) / 32));
    colsum_partials_kernel<T><<<grid, blk, 0, qfc_stream()>>>((T *)dst, part, nb, C);
    CHECK_LAUNCH();
}

static void chunking(int N, int min_rows, int max_chunks, int *nb, int *rpc) {
    int b = (N + min_rows - 1) / min_rows;
    if (b > max_chunks) b = max_chunks;
    if (b < 1) b = 1;
    *rpc = (N + b - 1) / b;
    *nb = (N + *rpc - 1) / *rpc;
}

template <typename T>
void cu_rmsnorm_bwd(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd, int N, int C,
                    int accumulate) {
    if (N <= 0 || C <= 0) return;
    const bool vec = C % 8 == 0 && qf_ptr_aligned(dx, 16) && qf_ptr_aligned(dout, 16) && qf_ptr_aligned(x, 16) &&
                     qf_ptr_aligned(w, 16);
    // warp per row while the 8 warps' dw slices fit the default 48 KiB (C <= 1,536): measured faster than a block
    // per row (1.5B: 5.6 -> 3.7 ms a step); beyond, the opt-in sizes left too few warps per SM (7B: 5.1 -> 7.3 ms),
    // so a block per row, 8 rows per block
    const size_t slice = (size_t)8 * ((C + 7) / 8) * sizeof(float); // one warp's (or the block's) dw partials
    const bool warp = 8 * slice <= 48 * 1024;
    int nb, rpc;
    chunking(N, warp ? 16 : 8, 1024, &nb, &rpc); // 2 rows per warp: enough blocks to fill the GPU at 4k tokens
    float *part = (float *)qfc_scratch((size_t)nb * C * sizeof(float));
    const size_t smem = (warp ? 8 : 1) * slice;
    if (warp) {
        if (smem > 46 * 1024) // with the kernel's static shared memory past the default 48 KiB: opt in
            CHECK_CUDA(cudaFuncSetAttribute(rmsnorm_bwd_kernel<T, 32>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
        rmsnorm_bwd_kernel<T, 32><<<nb, 256, smem, qfc_stream()>>>((T *)dx, part, (const T *)dout, (const T *)x,
                                                                    (const T *)w, rstd, N, C, rpc, accumulate, vec);
    } else {
        if (smem > 46 * 1024) { // (the kernel's static shared memory counts too)
            QF_CHECK(smem + 1024 <= qfc().smem_optin);
            CHECK_CUDA(cudaFuncSetAttribute(rmsnorm_bwd_kernel<T, 256>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
        }
        rmsnorm_bwd_kernel<T, 256><<<nb, 256, smem, qfc_stream()>>>((T *)dx, part, (const T *)dout, (const T *)x,
                                                                     (const T *)w, rstd, N, C, rpc, accumulate, vec);
    }
    CHECK_LAUNCH();
    launch_colsum_partials<T>(dw, part, nb, C);
}

// ---- column sums of a [N, C] act matrix onto db[C] ------------------------------------------------------------
template <typename T> __global__ void colsum_rows_kernel(float *part, const T *a, int N, int C, int rpc) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int r0 = blockIdx.y * rpc, r1 = min(N, r0 + rpc);
    float s = 0.0f;
    for (int n = r0; n < r1; n++) s += tof<T>(a[(size_t)n * C + c]);
    part[(size_t)blockIdx.y * C + c] = s;
}
template <typename T> void cu_colsum_add(T *db, const T *a, int N, int C) {
    if (N <= 0 || C <= 0) return;
    int nb, rpc;
    chunking(N, 32, 256, &nb, &rpc);
    float *part = (float *)qfc_scratch((size_t)nb * C * sizeof(float));
    dim3 grid((unsigned)((C + 127) / 128), (unsigned)nb);
    colsum_rows_kernel<T><<<grid, 128, 0, qfc_stream()>>>(part, a, N, C, rpc);
    CHECK_LAUNCH();
    launch_colsum_partials<T>(db, part, nb, C);
}

// ---- RoPE -----------------------------------------------------------------------------------------------------
// Scalar form: one thread per (token, i < D/2), looping over heads. inv_freq and cos/sin exactly as the CPU table: the power
// and reciprocal in double rounded to float, angle = (float)pos * inv_freq in fp32, cos/sin in double rounded.
template <typename T>
__global__ void rope_kernel(T *x, const int32_t *pos, int N, int nh, int D, double theta, int dir) {
    const int half = D / 2;
    const size_t total = (size_t)N * half;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (size_t)gridDim.x * blockDim.x) {
        const int n = (int)(idx / half), i = (int)(idx % half);
        const float a = __fmul_rn((float)pos[n], qf_rope_inv_at(i, D, theta));
        double sd, cd;
        sincos((double)a, &sd, &cd);
        const float c = (float)cd, s = (float)sd;
        for (int h = 0; h < nh; h++) {
            T *x1 = x + ((size_t)n * nh + h) * D + i, *x2 = x1 + half;
            float y1 = tof<T>(*x1), y2 = tof<T>(*x2);
            qf_rope_rot(y1, y2, c, s, dir);
            *x1 = fromf<T>(y1);
            *x2 = fromf<T>(y2);
        }
    }
}
// Vectorised form (D/2 a multiple of 8 and <= 256, x 16-byte aligned): a thread owns (token, 8 consecutive i, up to
// 4 heads): 16-byte loads of both halves. inv_freq as the scalar form (double power, rounded), once per block in
// shared memory; cos/sin of the fp32 angle by sincosf (within 2 ulp of the double-rounded values; the scalar form's
// double sincos of every element was what made RoPE cost 4x its memory traffic).
#define ROPE_HEADS_PER_THREAD 4
#define ROPE8_MAX_HALF 256
template <typename T>
__global__ void rope8_kernel(T *x, const int32_t *pos, int N, int nh, int D, double theta, int dir) {
    __shared__ float inv_s[ROPE8_MAX_HALF];
    const int half = D / 2, G = half / 8, HG = (nh + ROPE_HEADS_PER_THREAD - 1) / ROPE_HEADS_PER_THREAD;
    qf_rope_inv(inv_s, D, theta);
    __syncthreads();
    const size_t total = (size_t)N * HG * G;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (size_t)gridDim.x * blockDim.x) {
        const int g = (int)(idx % G), hg = (int)((idx / G) % HG), n = (int)(idx / ((size_t)G * HG));
        const int i0 = g * 8;
        float c[8], s[8];
        qf_rope_cs8(c, s, pos[n], inv_s + i0);
        const int h1 = min(nh, (hg + 1) * ROPE_HEADS_PER_THREAD);
        for (int h = hg * ROPE_HEADS_PER_THREAD; h < h1; h++) {
            T *x1 = x + ((size_t)n * nh + h) * D + i0, *x2 = x1 + half;
            float u[8], v[8];
            ld8<T>(u, x1, 0, 8, true);
            ld8<T>(v, x2, 0, 8, true);
            qf_rope_rot8(u, v, c, s, dir);
            st8<T>(x1, u, 0, 8, true);
            st8<T>(x2, v, 0, 8, true);
        }
    }
}

template <typename T> static void rope(void *x, const int32_t *pos, int N, int nh, int D, double theta, int dir) {
    QF_CHECK(D > 0 && D % 2 == 0);
    if (N <= 0 || nh <= 0) return;
    if ((D / 2) % 8 == 0 && D / 2 <= ROPE8_MAX_HALF && qf_ptr_aligned(x, 16)) {
        const size_t groups = (size_t)N * ((nh + ROPE_HEADS_PER_THREAD - 1) / ROPE_HEADS_PER_THREAD) * (D / 16);
        rope8_kernel<T><<<qf_blocks(groups, 256, (unsigned)qfc().num_sms * 16u), 256, 0, qfc_stream()>>>(
            (T *)x, pos, N, nh, D, theta, dir);
        CHECK_LAUNCH();
        return;
    }
    const size_t total = (size_t)N * (D / 2);
    rope_kernel<T><<<qf_blocks(total, 256, (unsigned)qfc().num_sms * 8u), 256, 0, qfc_stream()>>>((T *)x, pos, N, nh, D,
                                                                                                  theta, dir);
    CHECK_LAUNCH();
}
template <typename T> void cu_rope_fwd(void *x, const int32_t *pos, int N, int nh, int D, double theta) {
    rope<T>(x, pos, N, nh, D, theta, +1);
}
template <typename T> void cu_rope_bwd(void *dx, const int32_t *pos, int N, int nh, int D, double theta) {
    rope<T>(dx, pos, N, nh, D, theta, -1);
}

#define INST(T)                                                                                                      \
    template void cu_rmsnorm_fwd<T>(void *, float *, const void *, const void *, int, int, float);                   \
    template void cu_rmsnorm_bwd<T>(void *, void *, const void *, const void *, const void *, const float *, int, int, \
                                    int);                                                                            \
    template void cu_rope_fwd<T>(void *, const int32_t *, int, int, int, double);                                    \
    template void cu_rope_bwd<T>(void *, const int32_t *, int, int, int, double);                                    \
    template void cu_colsum_add<T>(T *, const T *, int, int);
INST(float)
INST(bf16)
INST(f16)
