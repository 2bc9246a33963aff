// attention_impl.cuh — private to the attention files of kernels/cuda: what the dispatch (attention_cuda.cu) calls
// in the three implementations. Shapes: q, out, dq, dout [B, T, H, D]; k, v, dk, dv [B, T, KV, D]; lse, delta
// [B, H, T] fp32; seg [B, T] (ops.h's seg_start); Tn = T; scale = 1/sqrt(D). Every launcher runs on qfc_stream().
#ifndef QF_ATTENTION_IMPL_CUH
#define QF_ATTENTION_IMPL_CUH

#include "cuda_common.cuh"

// attention_cudnn.cu: cuDNN's fused attention when the path choice (QWENFT_ATTN, see there) and the shape allow it;
// false = not taken (the kernels below run). dt: 0 bf16, 1 fp16.
bool qfc_cudnn_attention_fwd(int dt, void *out, float *lse, const void *q, const void *k, const void *v,
                             const int32_t *seg, int B, int T, int H, int KV, int D);
bool qfc_cudnn_attention_bwd(int dt, void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse,
                             const void *q, const void *k, const void *v, const int32_t *seg, int B, int T, int H,
                             int KV, int D);
void qfc_attention_note_path(const char *p); // what the last call ran ("mma", "generic", "cudnn-..."), for tests

// attention_mma.cu: the tensor-core kernels, E = bf16 or f16, D = 64 or 128, every tensor 16-byte aligned
void attention_mma_init(); // raises the kernels' dynamic shared-memory limits (once, at backend start)
template <typename E>
void attention_mma_fwd(E *out, float *lse, const E *q, const E *k, const E *v, const int32_t *seg, int B, int Tn,
                       int H, int KV, int D, float scale);
// part_k, part_v: [B, H, T, D] fp32 scratch when H > KV (the per-query-head dK/dV partials), else NULL
template <typename E>
void attention_mma_bwd(E *dq, E *dk, E *dv, float *part_k, float *part_v, const E *dout, const float *lse,
                       const float *delta, const E *q, const E *k, const E *v, const int32_t *seg, int B, int Tn,
                       int H, int KV, int D, float scale);

// attention_generic.cu: one warp per row, T = float, bf16 or f16, D <= 256, any alignment
template <typename T>
void attention_generic_fwd(T *out, float *lse, const T *q, const T *k, const T *v, const int32_t *seg, int B, int Tn,
                           int H, int KV, int D, float scale);
template <typename T>
void attention_generic_bwd(T *dq, T *dk, T *dv, const T *dout, const float *lse, const float *delta, const T *q,
                           const T *k, const T *v, const int32_t *seg, int B, int Tn, int H, int KV, int D,
                           float scale);
// delta[b, h, t] = sum_d dout * out (fp32): the backward's first step on every path but cuDNN's
template <typename T> void attention_delta(float *delta, const T *dout, const T *out, int B, int Tn, int H, int D);

#endif
