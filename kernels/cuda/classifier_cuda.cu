// classifier_cuda.cu — fused lm_head + cross-entropy over chunks of tokens: only a [chunk, V] block of logits in
// the act dtype ever exists (never [N, V], never in fp32).
// Per chunk: logits = x W^T (cuBLASLt, fp32 accumulate, rounded to act as HF's bf16 lm_head does); one block per
// token row computes max (fp32) and the sum of exps (double, fixed order), lse = max + log(sum), the token loss
// -(logit[target] - lse), and overwrites the row in place with dlogits = grad_scale * (softmax - onehot) (zero rows
// for ignored targets); then dW += dlogits^T x and dx = dlogits W (cuBLASLt, in this order so that dx may alias x).
// Token losses are summed at the end in a fixed order (double): one stream sync per call, for the host result.
#include "cuda_common.cuh"
#include <math.h>

#define CE_THREADS 256
// Chunks of up to 2,048 token rows (and 640 MiB of logits), balanced: the dx GEMM ([rows, C] with K = V) needs
// enough output tiles to fill the GPU and the dW GEMM (K = rows) a long K; 832-row chunks ran the Qwen2.5-1.5B head
// at 537 TFLOP/s.
#define CE_CHUNK_ROWS 2048
#define CE_CHUNK_BYTES ((size_t)640 << 20)

__device__ __forceinline__ float block_max_f(float v, float *sh) {
    v = warp_max(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    float r = sh[0];
    for (int i = 1; i < (int)(blockDim.x >> 5); i++) r = fmaxf(r, sh[i]);
    return r;
}
__device__ __forceinline__ double block_sum_fixed_d(double v, double *sh) {
    v = warp_sum_d(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    double r = 0.0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) r += sh[i];
    return r;
}

template <typename T>
__global__ void __launch_bounds__(CE_THREADS)
    ce_rows_kernel(T *logits, double *tokloss, const int32_t *targets, int V, float grad_scale, int train, bool vec) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    __shared__ float s_tlogit;
    const int r = blockIdx.x;
    T *row = logits + (size_t)r * V;
    const int tgt = targets[r];
    if (tgt < 0 || tgt >= V) {
        if (tgt != -1) {
            if (threadIdx.x == 0) printf("qwen-ft: classifier: target %d outside [0, %d) and not -1 (row %d)\n", tgt, V, r);
            __trap();
        }
        if (threadIdx.x == 0) tokloss[r] = 0.0;
        if (train) {
            const float z[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (size_t j = (size_t)threadIdx.x * 8; j < (size_t)V; j += (size_t)blockDim.x * 8) st8<T>(row, z, j, V, vec);
        }
        return;
    }
    float m = -INFINITY;
    for (size_t j = (size_t)threadIdx.x * 8; j < (size_t)V; j += (size_t)blockDim.x * 8) {
        float f[8];
        ld8<T>(f, row, j, V, vec);
#pragma unroll
        for (int e = 0; e < 8; e++)
            if (j + e < (size_t)V) m = fmaxf(m, f[e]);
    }
    m = block_max_f(m, shf);
    double se = 0.0;
    for (size_t j = (size_t)threadIdx.x * 8; j < (size_t)V; j += (size_t)blockDim.x * 8) {
        float f[8];
        ld8<T>(f, row, j, V, vec);
#pragma unroll
        for (int e = 0; e < 8; e++)
            if (j + e < (size_t)V) se += (double)expf(f[e] - m);
    }
    se = block_sum_fixed_d(se, shd);
    const float lse = m + (float)log(se);
    if (threadIdx.x == 0) {
        s_tlogit = tof<T>(row[tgt]);
        tokloss[r] = -(double)(s_tlogit - lse);
    }
    if (!train) return;
    __syncthreads(); // the target logit is read before the row is overwritten
    for (size_t j = (size_t)threadIdx.x * 8; j < (size_t)V; j += (size_t)blockDim.x * 8) {
        float f[8];
        ld8<T>(f, row, j, V, vec);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float p = expf(f[e] - lse);
            if (j + e == (size_t)tgt) p -= 1.0f;
            f[e] = p * grad_scale;
        }
        st8<T>(row, f, j, V, vec);
    }
}

__global__ void sum_tokloss_kernel(double *out, const double *tl, int n) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += tl[i];
    s = block_sum_fixed_d(s, sh);
    if (threadIdx.x == 0) *out = s;
}

template <typename T>
void cu_classifier(double *loss_sum, void *dx, void *dw, const void *x, const void *w, const int32_t *targets, int N,
                   int C, int V, float grad_scale) {
    QF_CHECK(N >= 0 && C > 0 && V > 0);
    qf_cuda_ctx &c = qfc();
    if (N == 0) {
        *loss_sum = 0.0;
        return;
    }
    const int train = dx != NULL;
    QF_CHECK(!train || dw != NULL);
    size_t chunk = CE_CHUNK_BYTES / ((size_t)V * sizeof(T));
    if (chunk > CE_CHUNK_ROWS) chunk = CE_CHUNK_ROWS;
    if (chunk >= 64) chunk = chunk / 64 * 64;
    if (chunk < 16) chunk = 16;
    const size_t nchunks = ((size_t)N + chunk - 1) / chunk; // then equal chunks (multiples of 64 rows)
    if (nchunks > 1) chunk = (((size_t)N + nchunks - 1) / nchunks + 63) / 64 * 64;
    if (chunk > (size_t)N) chunk = (size_t)N;
    const size_t tl_bytes = qf_align_up((size_t)N * sizeof(double), 256);
    char *s = (char *)qfc_scratch(tl_bytes + chunk * V * sizeof(T));
    double *tokloss = (double *)s;
    T *logits = (T *)(s + tl_bytes);
    const bool vec = V % 8 == 0; // rows of the (256-aligned) chunk buffer are then 16-byte aligned
    const T *xa = (const T *)x, *wa = (const T *)w;
    for (int n0 = 0; n0 < N; n0 += (int)chunk) {
        const int nc = N - n0 < (int)chunk ? N - n0 : (int)chunk;
        const T *xc = xa + (size_t)n0 * C;
        cu_gemm_nt<T>(logits, xc, wa, (const T *)NULL, nc, V, C, 0);
        ce_rows_kernel<T><<<nc, CE_THREADS, 0, c.stream>>>(logits, tokloss + n0, targets + n0, V, grad_scale, train, vec);
        CHECK_LAUNCH();
        if (train) {
            cu_gemm_tn<T>((T *)dw, logits, xc, V, C, nc);
            cu_gemm_nn<T>((T *)dx + (size_t)n0 * C, logits, wa, nc, C, V, 0);
        }
    }
    sum_tokloss_kernel<<<1, 1024, 0, c.stream>>>((double *)c.small_dev, tokloss, N);
    CHECK_LAUNCH();
    CHECK_CUDA(cudaMemcpyAsync(c.small_host, c.small_dev, sizeof(double), cudaMemcpyDeviceToHost, c.stream));
    CHECK_CUDA(cudaStreamSynchronize(c.stream));
    *loss_sum = *(const double *)c.small_host;
}

template void cu_classifier<float>(double *, void *, void *, const void *, const void *, const int32_t *, int, int, int,
                                   float);
template void cu_classifier<bf16>(double *, void *, void *, const void *, const void *, const int32_t *, int, int, int,
                                  float);
template void cu_classifier<f16>(double *, void *, void *, const void *, const void *, const int32_t *, int, int, int,
                                 float);
