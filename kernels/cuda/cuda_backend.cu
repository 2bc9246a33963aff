// cuda_backend.cu — the CUDA backend's op tables, on the context of cuda_context.cu.
//
//   qf_ops_cuda()      act = bf16 (storage), fp32 accumulation everywhere, cuBLASLt GEMMs, tensor-core attention.
//   qf_ops_cuda_f32()  act = fp32: the same kernels instantiated for float, fp32 GEMMs (no TF32) — for comparisons
//                      with the CPU table at fp32 tolerances, and for fp32 runs (neither bf16 nor fp16 enabled).
//   qf_ops_cuda_f16()  act = IEEE fp16 (__half): the same kernels for fp16 runs (fp16.enabled; fp32 master weights and
//                      dynamic loss scaling are the trainer's), fp16 cuBLASLt GEMMs and tensor-core attention.
//   qf_ops_cuda_fp8()  the bf16 table with the linear layers' GEMMs in fp8 (matmul_fp8.cu, fp8.enabled).
// All return NULL when no GPU is usable, and share one context (cuda_common.cuh): one compute stream, one
// cuBLASLt handle + 32 MiB workspace, memory accounting, the scratch buffer. Memory and copies: cuda_context.cu.
#include "cuda_common.cuh"
#include "fp8.cuh"
#include <stdio.h>

// the kernel families' set-up, run once by the context's first initialisation
static void families_init(void) {
    qfc_copy_init();
    qfc_attention_init();
}
static int ctx_init(void) { return qfc_context_init(families_init); }

// decode_attention_cuda.cu (ops.h attention_paged)
template <typename T>
void cu_attention_paged(void *out, const void *q, const void *k, const void *v, void *kpool, void *vpool,
                        const int32_t *seq, const int32_t *pos, const int32_t *btab, int N, int maxb, int bs, int H,
                        int KV, int D, int max_len);
template <typename T>
void cu_kv_append_paged(void *kpool, void *vpool, const void *k, const void *v, const int32_t *seq, const int32_t *pos,
                        const int32_t *btab, int N, int maxb, int bs, int KV, int D);

// decode_fused_cuda.cu (ops.h decode_qkv, decode_mlp)
template <typename T> int cu_decode_qkv(const qf_decode_qkv *a);
template <typename T> int cu_decode_mlp(const qf_decode_mlp *a);

// ---- the tables -------------------------------------------------------------------------------------------------
// graph_run: cu_graph_run (graph_cuda.cu) on the bf16, fp32 and fp16 tables; the fp8 tables run the work eagerly
// (their weight scales and saved inputs are host-side state a replay would not see change)
#define QF_CUDA_TABLE(NAME, T, DT)                                                                                   \
    QF_CUDA_TABLE_MM(NAME, T, DT, cu_matmul_fwd<T>, cu_matmul_bwd<T>, cu_matmul_fwd_add<T>, NULL, NULL, NULL, cu_graph_run)
#define QF_CUDA_TABLE_MM(NAME, T, DT, MM_FWD, MM_BWD, MM_FWD_ADD, FP8_WEIGHT, FP8_SAME_X, FP8_SAVED_X, GRAPH_RUN)                                       \
    {                                                                                                                \
        NAME, sizeof(T), DT, cu_alloc_table, cu_free, cu_copy_h2d, cu_copy_d2h, cu_copy_d2d, cu_zero, cu_sync,                 \
            cu_act_from_f32<T>, cu_act_to_f32<T>, cu_embedding_fwd<T>, cu_embedding_bwd<T>, cu_rmsnorm_fwd<T>,       \
            cu_rmsnorm_bwd<T>, MM_FWD, MM_BWD, MM_FWD_ADD, cu_rope_fwd<T>, cu_rope_bwd<T>,                         \
            cu_attention_fwd<T>, cu_attention_bwd<T>, cu_swiglu_fwd<T>, cu_swiglu_bwd<T>, cu_add_inplace<T>,         \
            cu_classifier<T>, cu_sumsq<T>, cu_sumsq_to<T>, cu_scale<T>, cu_nonfinite<T>, cu_adamw<T>,                                   \
            cu_attention_paged<T>, cu_copy_start, cu_copy_finish, cu_copy_wait, cu_side_begin, cu_side_mark, cu_side_end, cu_side_wait, cu_range_push, cu_range_pop, cu_copy_bytes, cu_argmax_rows<T>, \
            cu_decode_qkv<T>, cu_decode_mlp<T>, FP8_WEIGHT, FP8_SAME_X, FP8_SAVED_X, GRAPH_RUN,                \
            cu_kv_append_paged<T>, cu_attention_prompt<T>, cu_argmax_rows_dev<T>, cu_qkv_rope<T>,              \
            cu_swiglu_joined<T>                                                                                  \
    }
static const qf_ops cuda_ops_bf16 = QF_CUDA_TABLE("cuda", bf16, QF_DT_BF16);
static const qf_ops cuda_ops_f32 = QF_CUDA_TABLE("cuda-f32", float, QF_DT_F32);
static const qf_ops cuda_ops_f16 = QF_CUDA_TABLE("cuda-f16", f16, QF_DT_F16);
static const qf_ops cuda_ops_fp8_tensorwise = QF_CUDA_TABLE_MM("cuda-fp8", bf16, QF_DT_BF16,
                                                              cu_matmul_fp8_fwd<QF_FP8_TENSORWISE>,
                                                              cu_matmul_fp8_bwd<QF_FP8_TENSORWISE>,
                                                              cu_matmul_fp8_fwd_add<QF_FP8_TENSORWISE>, cu_fp8_weight, cu_fp8_same_x,
                                                              cu_fp8_saved_x, cu_graph_eager);
static const qf_ops cuda_ops_fp8_rowwise = QF_CUDA_TABLE_MM("cuda-fp8-rowwise", bf16, QF_DT_BF16,
                                                           cu_matmul_fp8_fwd<QF_FP8_ROWWISE>,
                                                           cu_matmul_fp8_bwd<QF_FP8_ROWWISE>,
                                                           cu_matmul_fp8_fwd_add<QF_FP8_ROWWISE>, cu_fp8_weight, cu_fp8_same_x,
                                                              cu_fp8_saved_x, cu_graph_eager);

extern "C" const qf_ops *qf_ops_cuda(void) { return ctx_init() ? &cuda_ops_bf16 : NULL; }
extern "C" const qf_ops *qf_ops_cuda_f32(void) { return ctx_init() ? &cuda_ops_f32 : NULL; }
extern "C" const qf_ops *qf_ops_cuda_f16(void) { return ctx_init() ? &cuda_ops_f16 : NULL; }
extern "C" const qf_ops *qf_ops_cuda_fp8(int recipe, char *why, int cap) {
    if (!ctx_init()) {
        snprintf(why, (size_t)cap, "no usable GPU");
        return NULL;
    }
    QF_CHECK(recipe == QF_FP8_TENSORWISE || recipe == QF_FP8_ROWWISE);
    if (!qfc_fp8_probe(recipe, why, cap)) return NULL;
    return recipe == QF_FP8_ROWWISE ? &cuda_ops_fp8_rowwise : &cuda_ops_fp8_tensorwise;
}
