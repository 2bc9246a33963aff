// elementwise_cuda.cu — casts, embedding, SwiGLU, residual add, scale, the deterministic reductions (sumsq,
// nonfinite) and the fused AdamW. Math in fp32 on values read from T (bf16, fp16 or float), one rounding on store
// (round to nearest even; in fp16 a value beyond 65504 becomes inf, which nonfinite() reports).
//
// Flat kernels work on groups of 8 consecutive elements per thread (16-byte vector loads when every pointer is
// 16-byte aligned, scalar otherwise), grid-stride.
#include "cuda_common.cuh"
#include <cub/cub.cuh>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int EW_THREADS = 256;
static unsigned ew_blocks(size_t n) { return qf_blocks((n + 7) / 8, EW_THREADS, (unsigned)qfc().num_sms * 16u); }
#define GRID_GROUPS(n)                                                                                               \
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; i < (n); i += (size_t)gridDim.x * blockDim.x * 8)

// ---- casts -----------------------------------------------------------------------------------------------------
template <typename D, typename S> __global__ void cast_kernel(D *dst, const S *src, size_t n, bool vec) {
    GRID_GROUPS(n) {
        float f[8];
        ld8<S>(f, src, i, n, vec);
        st8<D>(dst, f, i, n, vec);
    }
}
template <typename T> void cu_act_from_f32(void *dst, const float *src, size_t n) {
    if (!n || (const void *)dst == (const void *)src) return;
    const bool vec = qf_ptr_aligned(dst, 16) && qf_ptr_aligned(src, 16);
    cast_kernel<T, float><<<ew_blocks(n), EW_THREADS, 0, qfc_stream()>>>((T *)dst, src, n, vec);
    CHECK_LAUNCH();
}
template <typename T> void cu_act_to_f32(float *dst, const void *src, size_t n) {
    if (!n || (const void *)dst == src) return;
    const bool vec = qf_ptr_aligned(dst, 16) && qf_ptr_aligned(src, 16);
    cast_kernel<float, T><<<ew_blocks(n), EW_THREADS, 0, qfc_stream()>>>(dst, (const T *)src, n, vec);
    CHECK_LAUNCH();
}

// ---- embedding -------------------------------------------------------------------------------------------------
// out[n, :] = wte[tokens[n], :]; one block per token row. A token id outside [0, V) stops the kernel (trap:
// the next checked CUDA call reports it), as the CPU table's QF_CHECK does.
template <typename T> __global__ void embedding_fwd_kernel(T *out, const int32_t *tokens, const T *wte, int C, bool vec) {
    const int n = blockIdx.x;
    const int tok = tokens[n];
    if (tok < 0) {
        if (threadIdx.x == 0) printf("qwen-ft: embedding_fwd: token id %d < 0 at position %d\n", tok, n);
        __trap();
    }
    const T *src = wte + (size_t)tok * C;
    T *dst = out + (size_t)n * C;
    for (size_t c = (size_t)threadIdx.x * 8; c < (size_t)C; c += (size_t)blockDim.x * 8) {
        float f[8];
        ld8<T>(f, src, c, (size_t)C, vec);
        st8<T>(dst, f, c, (size_t)C, vec);
    }
}
template <typename T> void cu_embedding_fwd(void *out, const int32_t *tokens, const void *wte, int N, int C) {
    if (N <= 0 || C <= 0) return;
    const bool vec = qf_ptr_aligned(out, 16) && qf_ptr_aligned(wte, 16) && C % 8 == 0;
    const int threads = C >= 1024 ? 128 : 64;
    embedding_fwd_kernel<T><<<N, threads, 0, qfc_stream()>>>((T *)out, tokens, (const T *)wte, C, vec);
    CHECK_LAUNCH();
}

// Backward, deterministic and O(N log V + N C): the (token, n) pairs are radix-sorted by token (a stable sort, so
// equal tokens keep increasing n), then the block of each run of equal tokens x a column slice sums the run's dout
// rows in order n, starting from the current dwte value (fp32; one rounding on store): the same sum, in the same
// order, as the CPU table.
__global__ void iota_kernel(int32_t *v, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = i;
}
template <typename T>
__global__ void embedding_bwd_kernel(T *dwte, const T *dout, const uint32_t *keys, const int32_t *rows, int N, int C,
                                     int V, bool vec) {
    const int i = blockIdx.x;
    const uint32_t key = keys[i];
    if (i > 0 && keys[i - 1] == key) return; // not the head of a run
    if (key >= (uint32_t)V) {
        if (threadIdx.x == 0 && blockIdx.y == 0) printf("qwen-ft: embedding_bwd: token id %d outside [0, %d)\n", (int)key, V);
        __trap();
    }
    const size_t c = ((size_t)blockIdx.y * blockDim.x + threadIdx.x) * 8;
    if (c >= (size_t)C) return;
    float acc[8];
    T *dst = dwte + (size_t)key * C;
    ld8<T>(acc, dst, c, (size_t)C, vec);
    for (int j = i; j < N && keys[j] == key; j++) {
        float g[8];
        ld8<T>(g, dout + (size_t)rows[j] * C, c, (size_t)C, vec);
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] += g[e];
    }
    st8<T>(dst, acc, c, (size_t)C, vec);
}
template <typename T> void cu_embedding_bwd(void *dwte, const void *dout, const int32_t *tokens, int N, int C, int V) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t st = qfc_stream();
    // all 32 key bits are sorted, so that a negative id (a huge unsigned key) lands last and meets the range check
    size_t temp_bytes = 0;
    CHECK_CUDA(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const uint32_t *)NULL, (uint32_t *)NULL,
                                               (const int32_t *)NULL, (int32_t *)NULL, N, 0, 32, st));
    const size_t a = qf_align_up((size_t)N * 4, 256);
    char *s = (char *)qfc_scratch(3 * a + temp_bytes);
    uint32_t *keys_out = (uint32_t *)s;
    int32_t *vals_in = (int32_t *)(s + a), *vals_out = (int32_t *)(s + 2 * a);
    void *temp = s + 3 * a;
    iota_kernel<<<(N + 255) / 256, 256, 0, st>>>(vals_in, N);
    CHECK_LAUNCH();
    CHECK_CUDA(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, (const uint32_t *)tokens, keys_out, vals_in, vals_out,
                                               N, 0, 32, st));
    const bool vec = qf_ptr_aligned(dwte, 16) && qf_ptr_aligned(dout, 16) && C % 8 == 0;
    const int threads = 128;
    dim3 grid((unsigned)N, (unsigned)(((size_t)C + threads * 8 - 1) / (threads * 8)));
    embedding_bwd_kernel<T><<<grid, threads, 0, st>>>((T *)dwte, (const T *)dout, keys_out, vals_out, N, C, V, vec);
    CHECK_LAUNCH();
}

// ---- SwiGLU -----------------------------------------------------------------------------------------------------
template <typename T> __global__ void swiglu_fwd_kernel(T *out, const T *gate, const T *up, size_t n, bool vec) {
    GRID_GROUPS(n) {
        float g[8], u[8], o[8];
        ld8<T>(g, gate, i, n, vec);
        ld8<T>(u, up, i, n, vec);
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] = g[e] / (1.0f + expf(-g[e])) * u[e];
        st8<T>(out, o, i, n, vec);
    }
}
template <typename T>
__global__ void swiglu_bwd_kernel(T *dgate, T *dup, const T *dout, const T *gate, const T *up, size_t n, bool vec) {
    GRID_GROUPS(n) {
        float g[8], u[8], d[8], dg[8], du[8];
        ld8<T>(g, gate, i, n, vec);
        ld8<T>(u, up, i, n, vec);
        ld8<T>(d, dout, i, n, vec);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float e1 = 1.0f + expf(-g[e]);
            const float sig = 1.0f / e1, silu = g[e] / e1;
            dg[e] = d[e] * u[e] * (sig * (1.0f + g[e] * (1.0f - sig)));
            du[e] = d[e] * silu;
        }
        st8<T>(dgate, dg, i, n, vec);
        st8<T>(dup, du, i, n, vec);
    }
}
template <typename T> void cu_swiglu_fwd(void *out, const void *gate, const void *up, int N, int F) {
    const size_t n = (size_t)N * F;
    if (!n) return;
    const bool vec = qf_ptr_aligned(out, 16) && qf_ptr_aligned(gate, 16) && qf_ptr_aligned(up, 16);
    swiglu_fwd_kernel<T><<<ew_blocks(n), EW_THREADS, 0, qfc_stream()>>>((T *)out, (const T *)gate, (const T *)up, n, vec);
    CHECK_LAUNCH();
}
template <typename T>
void cu_swiglu_bwd(void *dgate, void *dup, const void *dout, const void *gate, const void *up, int N, int F) {
    const size_t n = (size_t)N * F;
    if (!n) return;
    const bool vec = qf_ptr_aligned(dgate, 16) && qf_ptr_aligned(dup, 16) && qf_ptr_aligned(dout, 16) &&
                     qf_ptr_aligned(gate, 16) && qf_ptr_aligned(up, 16);
    swiglu_bwd_kernel<T><<<ew_blocks(n), EW_THREADS, 0, qfc_stream()>>>((T *)dgate, (T *)dup, (const T *)dout,
                                                                        (const T *)gate, (const T *)up, n, vec);
    CHECK_LAUNCH();
}

// ---- add, scale -------------------------------------------------------------------------------------------------
template <typename T> __global__ void add_kernel(T *y, const T *x, size_t n, bool vec) {
    GRID_GROUPS(n) {
        float a[8], b[8];
        ld8<T>(a, y, i, n, vec);
        ld8<T>(b, x, i, n, vec);
#pragma unroll
        for (int e = 0; e < 8; e++) a[e] += b[e];
        st8<T>(y, a, i, n, vec);
    }
}
template <typename T> void cu_add_inplace(void *y, const void *x, size_t n) {
    if (!n) return;
    const bool vec = qf_ptr_aligned(y, 16) && qf_ptr_aligned(x, 16);
    add_kernel<T><<<ew_blocks(n), EW_THREADS, 0, qfc_stream()>>>((T *)y, (const T *)x, n, vec);
    CHECK_LAUNCH();
}
template <typename T> __global__ void scale_kernel(T *g, float s, size_t n, bool vec) {
    GRID_GROUPS(n) {
        float a[8];
        ld8<T>(a, g, i, n, vec);
#pragma unroll
        for (int e = 0; e < 8; e++) a[e] *= s;
        st8<T>(g, a, i, n, vec);
    }
}
template <typename T> void cu_scale(void *g, float s, size_t n) {
    if (!n) return;
    scale_kernel<T><<<ew_blocks(n), EW_THREADS, 0, qfc_stream()>>>((T *)g, s, n, qf_ptr_aligned(g, 16));
    CHECK_LAUNCH();
}

// ---- sumsq: fixed chunks of SUMSQ_CHUNK elements, one block each, summed in double in a fixed order; then the
// chunk partials summed by one block in a fixed order. Deterministic (same result every run, any GPU). ---------------
#define SUMSQ_CHUNK 16384
#define SUMSQ_THREADS 256
__device__ __forceinline__ double block_sum_d(double v, double *sh) { // fixed-order tree over the block
    v = warp_sum_d(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) sh[w] = v;
    __syncthreads();
    double r = 0.0;
    if (w == 0) {
        r = l < (int)(blockDim.x >> 5) ? sh[l] : 0.0;
        r = warp_sum_d(r);
    }
    __syncthreads();
    return r; // valid in thread 0
}
template <typename T> __global__ void sumsq_partial_kernel(double *part, const T *g, size_t n, bool vec) {
    __shared__ double sh[32];
    const size_t base = (size_t)blockIdx.x * SUMSQ_CHUNK;
    const size_t end = base + SUMSQ_CHUNK < n ? base + SUMSQ_CHUNK : n;
    double s = 0.0;
    for (size_t i = base + (size_t)threadIdx.x * 8; i < end; i += (size_t)blockDim.x * 8) {
        float f[8];
        ld8<T>(f, g, i, end, vec);
#pragma unroll
        for (int e = 0; e < 8; e++) s += (double)f[e] * (double)f[e];
    }
    const double r = block_sum_d(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = r;
}
__global__ void sum_partials_kernel(double *out, const double *part, size_t np) {
    __shared__ double sh[32];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < np; i += blockDim.x) s += part[i];
    const double r = block_sum_d(s, sh);
    if (threadIdx.x == 0) *out = r;
}
// the partials of g[n] summed into out (device), queued on the compute stream
template <typename T> static void sumsq_queue(double *out, const void *g, size_t n) {
    qf_cuda_ctx &c = qfc();
    const size_t nb = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double *part = (double *)qfc_scratch(nb * sizeof(double));
    sumsq_partial_kernel<T><<<(unsigned)nb, SUMSQ_THREADS, 0, c.stream>>>(part, (const T *)g, n, qf_ptr_aligned(g, 16));
    CHECK_LAUNCH();
    sum_partials_kernel<<<1, 1024, 0, c.stream>>>(out, part, nb);
    CHECK_LAUNCH();
}
template <typename T> double cu_sumsq(const void *g, size_t n) {
    if (!n) return 0.0;
    qf_cuda_ctx &c = qfc();
    sumsq_queue<T>((double *)c.small_dev, g, n);
    CHECK_CUDA(cudaMemcpyAsync(c.small_host, c.small_dev, sizeof(double), cudaMemcpyDeviceToHost, c.stream));
    CHECK_CUDA(cudaStreamSynchronize(c.stream));
    return *(const double *)c.small_host;
}
template <typename T> void cu_sumsq_to(double *out, const void *g, size_t n) {
    if (n) sumsq_queue<T>(out, g, n);
    else CHECK_CUDA(cudaMemsetAsync(out, 0, sizeof(double), qfc().stream));
}

// ---- nonfinite ---------------------------------------------------------------------------------------------------
__device__ __forceinline__ bool bad_val(float f) { return !isfinite(f); }
template <typename T> __global__ void nonfinite_kernel(int *flag, const T *g, size_t n, bool vec) {
    bool bad = false;
    GRID_GROUPS(n) {
        float f[8];
        ld8<T>(f, g, i, n, vec); // bf16/fp16 inf/nan convert to fp32 inf/nan
#pragma unroll
        for (int e = 0; e < 8; e++) bad |= bad_val(f[e]);
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}
template <typename T> int cu_nonfinite(const void *g, size_t n) {
    if (!n) return 0;
    qf_cuda_ctx &c = qfc();
    int *flag = (int *)c.small_dev;
    CHECK_CUDA(cudaMemsetAsync(flag, 0, sizeof(int), c.stream));
    nonfinite_kernel<T><<<ew_blocks(n), EW_THREADS, 0, c.stream>>>(flag, (const T *)g, n, qf_ptr_aligned(g, 16));
    CHECK_LAUNCH();
    CHECK_CUDA(cudaMemcpyAsync(c.small_host, flag, sizeof(int), cudaMemcpyDeviceToHost, c.stream));
    CHECK_CUDA(cudaStreamSynchronize(c.stream));
    return *(const int *)c.small_host != 0;
}

// ---- AdamW: exactly the CPU table's arithmetic (kernels/cpu/adamw_cpu.c): scalars formed in double on the host
// from the "widened" float hyper-parameters, elementwise math in fp32 with explicit round-to-nearest intrinsics
// (never contracted to FMA), so the fp32 table matches the CPU bit for bit. ------------------------------------------
struct adamw_scalars {
    float gscale, decay, b1, omb1, b2, omb2, step, bc2s, eps;
};
template <typename T>
__global__ void adamw_kernel(float *p, T *pa, const T *g, float *m, float *v, size_t n, adamw_scalars s, bool vec) {
    GRID_GROUPS(n) {
        float pf[8], gf[8], mf[8], vf[8];
        ld8<float>(pf, p, i, n, vec);
        ld8<T>(gf, g, i, n, vec);
        ld8<float>(mf, m, i, n, vec);
        ld8<float>(vf, v, i, n, vec);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float gi = __fmul_rn(s.gscale, gf[e]);
            float pi = __fmul_rn(pf[e], s.decay);
            const float mi = __fadd_rn(__fmul_rn(s.b1, mf[e]), __fmul_rn(s.omb1, gi));
            const float vi = __fadd_rn(__fmul_rn(s.b2, vf[e]), __fmul_rn(__fmul_rn(s.omb2, gi), gi));
            const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2s), s.eps);
            pi = __fsub_rn(pi, __fdiv_rn(__fmul_rn(s.step, mi), denom));
            pf[e] = pi, mf[e] = mi, vf[e] = vi;
        }
        st8<float>(p, pf, i, n, vec);
        st8<float>(m, mf, i, n, vec);
        st8<float>(v, vf, i, n, vec);
        if (pa) st8<T>(pa, pf, i, n, vec);
    }
}
template <typename T>
void cu_adamw(float *p, void *p_act, const void *g, float *m, float *v, size_t n, float gscale, float lr_, float beta1,
              float beta2, float eps_, float wd_, int t) {
    QF_CHECK(t >= 1);
    if (!n) return;
    const double lr = qf_float_widen(lr_), b1 = qf_float_widen(beta1), b2 = qf_float_widen(beta2);
    const double eps = qf_float_widen(eps_), wd = qf_float_widen(wd_);
    const double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    adamw_scalars s;
    s.gscale = gscale;
    s.decay = (float)(1.0 - lr * wd);
    s.b1 = (float)b1, s.omb1 = (float)(1.0 - b1), s.b2 = (float)b2, s.omb2 = (float)(1.0 - b2);
    s.step = (float)(lr / bc1), s.bc2s = (float)sqrt(bc2), s.eps = (float)eps;
    const bool vec = qf_ptr_aligned(p, 16) && qf_ptr_aligned(g, 16) && qf_ptr_aligned(m, 16) &&
                     qf_ptr_aligned(v, 16) && (!p_act || qf_ptr_aligned(p_act, 16));
    adamw_kernel<T><<<ew_blocks(n), EW_THREADS, 0, qfc_stream()>>>(p, (T *)p_act, (const T *)g, m, v, n, s, vec);
    CHECK_LAUNCH();
}

// ---- instantiations -------------------------------------------------------------------------------------------
#define INST(T)                                                                                                      \
    template void cu_act_from_f32<T>(void *, const float *, size_t);                                                 \
    template void cu_act_to_f32<T>(float *, const void *, size_t);                                                   \
    template void cu_embedding_fwd<T>(void *, const int32_t *, const void *, int, int);                             \
    template void cu_embedding_bwd<T>(void *, const void *, const int32_t *, int, int, int);                        \
    template void cu_swiglu_fwd<T>(void *, const void *, const void *, int, int);                                   \
    template void cu_swiglu_bwd<T>(void *, void *, const void *, const void *, const void *, int, int);             \
    template void cu_add_inplace<T>(void *, const void *, size_t);                                                   \
    template double cu_sumsq<T>(const void *, size_t);                                                               \
    template void cu_sumsq_to<T>(double *, const void *, size_t);                                                    \
    template void cu_scale<T>(void *, float, size_t);                                                                \
    template int cu_nonfinite<T>(const void *, size_t);                                                              \
    template void cu_adamw<T>(float *, void *, const void *, float *, float *, size_t, float, float, float, float,  \
                              float, float, int);
INST(float)
INST(bf16)
INST(f16)
