// attention_cuda.cu — the attention_fwd / attention_bwd entry points of the CUDA op tables (cu_attention_fwd/bwd):
// causal, segment-aware GQA attention, flash-attention style (no T x T buffer ever exists). Checks the shape, then
// picks one of three implementations (declared in attention_impl.cuh):
//   1. cuDNN's fused attention (attention_cudnn.cu): 16-bit tables on sm_90+ builds with cuDNN, where the path
//      choice (QWENFT_ATTN=auto|cudnn|mma, see there) and the shape allow it;
//   2. the mma.sync tensor-core kernels (attention_mma.cu): bf16 and fp16 tables, head_dim 64 or 128, 16-byte
//      aligned tensors; the sm_80/sm_89 path and the fallback for anything cuDNN does not take;
//   3. the generic kernels (attention_generic.cu): the fp32 table, any other head_dim <= 256, unaligned tensors.
// cu_attention_prompt (ops.h attention_prompt, the paged model's prompts) is the same without cuDNN.
// The backward's scratch (delta, and the mma path's fp32 GQA partials) comes from here; qfc_attention_init raises
// the mma kernels' shared-memory limits when the backend starts.
#include "attention_impl.cuh"
#include <initializer_list>
#include <math.h>
#include <type_traits>

void qfc_attention_init() { attention_mma_init(); }

static bool use_tc(int D, std::initializer_list<const void *> ptrs) {
    if (D != 64 && D != 128) return false;
    for (const void *p : ptrs)
        if (!qf_ptr_aligned(p, 16)) return false;
    return true;
}
static void check_shape(int B, int T_, int H, int KV, int D) {
    QF_CHECK(B >= 0 && T_ >= 0 && KV > 0 && H > 0 && H % KV == 0 && D > 0);
}

// cudnn: cuDNN may take the call (attention_fwd); not for attention_prompt, whose segments change every call: cuDNN's
// ragged graph reads the segment layout back to the host (a wait) and builds a plan per new (segments, length) bucket
// (tens of milliseconds each, measured on an H200 as +65 ms on a served prompt's first token)
template <typename T>
static void attention_fwd_via(bool cudnn, void *out, float *lse, const void *q, const void *k, const void *v,
                              const int32_t *seg_start, int B, int T_, int H, int KV, int D) {
    check_shape(B, T_, H, KV, D);
    if (!B || !T_) return;
    const float scale = (float)(1.0 / sqrt((double)D));
    if constexpr (sizeof(T) == 2) { // bf16 or f16: cuDNN where chosen, else the tensor-core kernels for E = T
        if (cudnn &&
            qfc_cudnn_attention_fwd(std::is_same<T, f16>::value, out, lse, q, k, v, seg_start, B, T_, H, KV, D))
            return;
        if (use_tc(D, {out, q, k, v})) {
            qfc_attention_note_path("mma");
            attention_mma_fwd<T>((T *)out, lse, (const T *)q, (const T *)k, (const T *)v, seg_start, B, T_, H, KV, D,
                                 scale);
            return;
        }
    }
    qfc_attention_note_path("generic");
    attention_generic_fwd<T>((T *)out, lse, (const T *)q, (const T *)k, (const T *)v, seg_start, B, T_, H, KV, D,
                             scale);
}
template <typename T>
void cu_attention_fwd(void *out, float *lse, const void *q, const void *k, const void *v, const int32_t *seg_start,
                      int B, int T_, int H, int KV, int D) {
    attention_fwd_via<T>(true, out, lse, q, k, v, seg_start, B, T_, H, KV, D);
}
template <typename T>
void cu_attention_prompt(void *out, float *lse, const void *q, const void *k, const void *v, const int32_t *seg_start,
                         int B, int T_, int H, int KV, int D) {
    attention_fwd_via<T>(false, out, lse, q, k, v, seg_start, B, T_, H, KV, D);
}

template <typename T>
void cu_attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse, const void *q,
                      const void *k, const void *v, const int32_t *seg_start, int B, int T_, int H, int KV, int D) {
    check_shape(B, T_, H, KV, D);
    if (!B || !T_) return;
    const float scale = (float)(1.0 / sqrt((double)D));
    if constexpr (sizeof(T) == 2)
        if (qfc_cudnn_attention_bwd(std::is_same<T, f16>::value, dq, dk, dv, dout, out, lse, q, k, v, seg_start, B, T_,
                                    H, KV, D))
            return;
    const bool tc = sizeof(T) == 2 && use_tc(D, {dq, dk, dv, dout, q, k, v});
    qfc_attention_note_path(tc ? "mma" : "generic");
    // scratch: delta [B, H, T] fp32; with GQA on the mma path also the per-query-head dK, dV partials [B, H, T, D]
    const bool gqa_part = tc && H / KV > 1;
    const size_t dbytes = qf_align_up((size_t)B * H * T_ * sizeof(float), 256);
    const size_t pbytes = gqa_part ? (size_t)B * H * T_ * D * sizeof(float) : 0;
    char *scr = (char *)qfc_scratch(dbytes + 2 * pbytes);
    float *delta = (float *)scr;
    float *part_k = gqa_part ? (float *)(scr + dbytes) : NULL, *part_v = gqa_part ? (float *)(scr + dbytes + pbytes) : NULL;
    attention_delta<T>(delta, (const T *)dout, (const T *)out, B, T_, H, D);
    if constexpr (sizeof(T) == 2) // bf16 or f16: the tensor-core kernels for E = T
        if (tc) {
            attention_mma_bwd<T>((T *)dq, (T *)dk, (T *)dv, part_k, part_v, (const T *)dout, lse, delta, (const T *)q,
                                 (const T *)k, (const T *)v, seg_start, B, T_, H, KV, D, scale);
            return;
        }
    attention_generic_bwd<T>((T *)dq, (T *)dk, (T *)dv, (const T *)dout, lse, delta, (const T *)q, (const T *)k,
                             (const T *)v, seg_start, B, T_, H, KV, D, scale);
}

#define INST(T)                                                                                                      \
    template void cu_attention_fwd<T>(void *, float *, const void *, const void *, const void *, const int32_t *, int, \
                                      int, int, int, int);                                                           \
    template void cu_attention_prompt<T>(void *, float *, const void *, const void *, const void *, const int32_t *,  \
                                         int, int, int, int, int);                                                   \
    template void cu_attention_bwd<T>(void *, void *, void *, const void *, const void *, const float *, const void *, \
                                      const void *, const void *, const int32_t *, int, int, int, int, int);
INST(float)
INST(bf16)
INST(f16)
