// joined_cuda.cu — the joined projections' entries (ops.h qkv_rope, swiglu_joined): the paged model's calls of more
// than two tokens project q, k and v with one GEMM over the adjacent [wq; wk; wv] and gate and up with one over
// [wg; wu] (QF_MODEL_JOINED, src/model/model.c). cuBLASLt runs k and v [512 x 3584] (Qwen2.5-7B) at 14.5 us each
// for 8 to 128 rows (255 GB/s on the H100: a handful of tiles, and no algorithm of its heuristic's first 8 under
// 13.8 us), against 10.5 us for q, k and v as one [4608 x 3584] (bench/decode_bench.c "joined", H100, 2026-12-07).
//
// qkv_rope: qkv [N, (H + 2 KV) D] -> q [N, H D] and k [N, KV D] rotated as rope8_kernel (norm_cuda.cu) rotates them
// (inv_freq as the double power rounded to float, angle (float)pos * inv, sincosf), v [N, KV D] copied: a thread owns
// (token, up to 4 heads, 8 consecutive i < D/2) with 16-byte loads of both halves. Where rope8_kernel does not apply
// (D/2 not a multiple of 8 or over 256, or a pointer not 16-byte aligned) the rows are split by a plain copy and
// cu_rope_fwd rotates q and k: either way the values are rope_fwd's, bit for bit.
// swiglu_joined: out [N, F] = silu(gu[:, :F]) * gu[:, F:], swiglu_fwd_kernel's expression.
#include "cuda_common.cuh"

#define JQ_HEADS 4
#define JQ_MAX_HALF 256

template <typename T>
__global__ void qkv_rope8_kernel(T *q, T *k, T *v, const T *qkv, const int32_t *pos, int N, int H, int KV, int D,
                                 double theta) {
    __shared__ float inv_s[JQ_MAX_HALF];
    const int half = D / 2, G = half / 8, NH = H + 2 * KV, HG = (NH + JQ_HEADS - 1) / JQ_HEADS;
    qf_rope_inv(inv_s, D, theta);
    __syncthreads();
    const size_t total = (size_t)N * HG * G;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int g = (int)(idx % G), hg = (int)((idx / G) % HG), n = (int)(idx / ((size_t)G * HG));
        const int i0 = g * 8, h1 = min(NH, (hg + 1) * JQ_HEADS);
        float c[8], s[8];
        if (hg * JQ_HEADS < H + KV) qf_rope_cs8(c, s, pos[n], inv_s + i0); // v's heads need none
        for (int h = hg * JQ_HEADS; h < h1; h++) {
            const T *src = qkv + ((size_t)n * NH + h) * D + i0;
            T *dst = h < H        ? q + ((size_t)n * H + h) * D + i0
                     : h < H + KV ? k + ((size_t)n * KV + (h - H)) * D + i0
                                  : v + ((size_t)n * KV + (h - H - KV)) * D + i0;
            float u[8], w[8];
            ld8<T>(u, src, 0, 8, true);
            ld8<T>(w, src + half, 0, 8, true);
            if (h < H + KV) qf_rope_rot8(u, w, c, s, 1);
            st8<T>(dst, u, 0, 8, true);
            st8<T>(dst + half, w, 0, 8, true);
        }
    }
}

// the rows of qkv split into q, k, v as they are (the fallback's first step)
template <typename T>
__global__ void qkv_split_kernel(T *q, T *k, T *v, const T *qkv, int N, int HD, int KD) {
    const int W = HD + 2 * KD;
    const size_t total = (size_t)N * W;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int n = (int)(idx / W), j = (int)(idx % W);
        T *dst = j < HD        ? q + (size_t)n * HD + j
                 : j < HD + KD ? k + (size_t)n * KD + (j - HD)
                               : v + (size_t)n * KD + (j - HD - KD);
        *dst = qkv[idx];
    }
}

template <typename T>
void cu_qkv_rope(void *q, void *k, void *v, const void *qkv, const int32_t *pos, int N, int H, int KV, int D,
                 double theta) {
    QF_CHECK(D > 0 && D % 2 == 0);
    if (N <= 0) return;
    const int half = D / 2;
    if (half % 8 == 0 && half <= JQ_MAX_HALF && qf_ptr_aligned(q, 16) && qf_ptr_aligned(k, 16) &&
        qf_ptr_aligned(v, 16) && qf_ptr_aligned(qkv, 16)) {
        const int NH = H + 2 * KV;
        const size_t groups = (size_t)N * ((NH + JQ_HEADS - 1) / JQ_HEADS) * (half / 8);
        qkv_rope8_kernel<T><<<qf_blocks(groups, 256, (unsigned)qfc().num_sms * 16u), 256, 0, qfc_stream()>>>(
            (T *)q, (T *)k, (T *)v, (const T *)qkv, pos, N, H, KV, D, theta);
        CHECK_LAUNCH();
        return;
    }
    const int HD = H * D, KD = KV * D;
    const size_t total = (size_t)N * (HD + 2 * KD);
    qkv_split_kernel<T><<<qf_blocks(total, 256, (unsigned)qfc().num_sms * 8u), 256, 0, qfc_stream()>>>(
        (T *)q, (T *)k, (T *)v, (const T *)qkv, N, HD, KD);
    CHECK_LAUNCH();
    cu_rope_fwd<T>(q, pos, N, H, D, theta);
    cu_rope_fwd<T>(k, pos, N, KV, D, theta);
}

// a thread per 8 consecutive outputs of a row (vec: F % 8 == 0 and both pointers 16-byte aligned), else per output
template <typename T> __global__ void swiglu_joined_kernel(T *out, const T *gu, int N, int F, bool vec) {
    const int per = vec ? 8 : 1, G = (F + per - 1) / per;
    const size_t total = (size_t)N * G;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int n = (int)(idx / G), f0 = (int)(idx % G) * per;
        const T *gate = gu + (size_t)n * 2 * F, *up = gate + F;
        if (vec) {
            float g[8], u[8], o[8];
            ld8<T>(g, gate, (size_t)f0, (size_t)F, true);
            ld8<T>(u, up, (size_t)f0, (size_t)F, true);
#pragma unroll
            for (int e = 0; e < 8; e++) o[e] = g[e] / (1.0f + expf(-g[e])) * u[e];
            st8<T>(out + (size_t)n * F, o, (size_t)f0, (size_t)F, true);
        } else {
            const float g = tof<T>(gate[f0]);
            out[(size_t)n * F + f0] = fromf<T>(g / (1.0f + expf(-g)) * tof<T>(up[f0]));
        }
    }
}

template <typename T> void cu_swiglu_joined(void *out, const void *gu, int N, int F) {
    if (N <= 0 || F <= 0) return;
    const bool vec = F % 8 == 0 && qf_ptr_aligned(out, 16) && qf_ptr_aligned(gu, 16);
    const size_t work = (size_t)N * (vec ? F / 8 : F);
    swiglu_joined_kernel<T><<<qf_blocks(work, 256, (unsigned)qfc().num_sms * 16u), 256, 0, qfc_stream()>>>(
        (T *)out, (const T *)gu, N, F, vec);
    CHECK_LAUNCH();
}

#define INST(T)                                                                                                      \
    template void cu_qkv_rope<T>(void *, void *, void *, const void *, const int32_t *, int, int, int, int, double); \
    template void cu_swiglu_joined<T>(void *, const void *, int, int);
INST(float)
INST(bf16)
INST(f16)
