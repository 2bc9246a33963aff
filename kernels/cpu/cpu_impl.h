/* cpu_impl.h — private declarations of the CPU backend (fp32, OpenMP). The public entry is qf_ops_cpu()
 * in ops.h; the functions below have exactly the op-table signatures (act = float) and the semantics written
 * there. Helpers the kernels share (the three GEMM shapes) come last.
 *
 * Determinism: every output element is produced by one thread, summing in a fixed order that does not depend
 * on the thread count or on OpenMP's schedule (static schedules over independent outputs; reductions over
 * fixed-size chunks summed in order). Results are bitwise identical with 1 or many threads. */
#ifndef QF_CPU_IMPL_H
#define QF_CPU_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include "ops.h"

/* elementwise_cpu.c */
void cpu_embedding_fwd(void *out, const int32_t *tokens, const void *wte, int N, int C);
void cpu_embedding_bwd(void *dwte, const void *dout, const int32_t *tokens, int N, int C, int V);
void cpu_swiglu_fwd(void *out, const void *gate, const void *up, int N, int F);
void cpu_swiglu_bwd(void *dgate, void *dup, const void *dout, const void *gate, const void *up, int N, int F);
void cpu_add_inplace(void *y, const void *x, size_t n);
double cpu_sumsq(const void *g, size_t n);
void cpu_sumsq_to(double *out, const void *g, size_t n);
void cpu_scale(void *g, float s, size_t n);
int cpu_nonfinite(const void *g, size_t n);
void cpu_argmax_rows(int32_t *out, float *logprob, const void *x, int n, int V);
void cpu_act_from_f32(void *dst, const float *src, size_t n);
void cpu_act_to_f32(float *dst, const void *src, size_t n);

/* norm_cpu.c */
void cpu_rmsnorm_fwd(void *out, float *rstd, const void *x, const void *w, int N, int C, float eps);
void cpu_rmsnorm_bwd(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd, int N,
                     int C, int accumulate);
void cpu_rope_fwd(void *x, const int32_t *pos, int N, int nh, int D, double theta);
void cpu_rope_bwd(void *dx, const int32_t *pos, int N, int nh, int D, double theta);

/* matmul_cpu.c */
void cpu_matmul_fwd(void *out, const void *x, const void *w, const void *b, int N, int IN, int OUT, int accumulate);
void cpu_matmul_fwd_add(void *out, const void *x, const void *w, const void *res, int N, int IN, int OUT);
void cpu_matmul_bwd(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w, int N, int IN,
                    int OUT, int accumulate_dx);

/* attention_cpu.c */
void cpu_attention_fwd(void *out, float *lse, const void *q, const void *k, const void *v, const int32_t *seg_start,
                       int B, int T, int H, int KV, int D);
/* decode_attention_cpu.c */
void cpu_attention_paged(void *out, const void *q, const void *k, const void *v, void *kpool, void *vpool,
                         const int32_t *seq, const int32_t *pos, const int32_t *btab, int N, int maxb, int bs, int H,
                         int KV, int D, int max_len);
/* k, v [N, KV*D] into the pools at each token's (seq, pos) slot (attention_paged's first step) */
void cpu_kv_append_paged(float *kp, float *vp, const float *k, const float *v, const int32_t *seq, const int32_t *pos,
                         const int32_t *btab, int N, int maxb, int bs, int KV, int D);
/* decode_fused_cpu.c: ops.h decode_qkv / decode_mlp as the unfused sequence of this table's ops */
int cpu_decode_qkv(const qf_decode_qkv *a);
int cpu_decode_mlp(const qf_decode_mlp *a);
/* joined_cpu.c */
void cpu_qkv_rope(void *q, void *k, void *v, const void *qkv, const int32_t *pos, int N, int H, int KV, int D,
                  double theta);
void cpu_swiglu_joined(void *out, const void *gu, int N, int F);
void cpu_attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse,
                       const void *q, const void *k, const void *v, const int32_t *seg_start, int B, int T, int H,
                       int KV, int D);

/* classifier_cpu.c */
void cpu_classifier(double *loss_sum, void *dx, void *dw, const void *x, const void *w, const int32_t *targets, int N,
                    int C, int V, float grad_scale);

/* adamw_cpu.c */
void cpu_adamw(float *p, void *p_act, const void *g, float *m, float *v, size_t n, float gscale, float lr, float beta1,
               float beta2, float eps, float wd, int t);

/* GEMM shapes (matmul_cpu.c), fp32, row-major, OpenMP inside. Each output element is one sequential sum over
 * the contracted index in increasing order, so results do not depend on tiling or thread count.
 *   cpu_gemm_nt: out[M,N] = a[M,K] b[N,K]^T (+ bias[N]) (+ out when accumulate)     (forward:  x W^T)
 *   cpu_gemm_nn: out[M,N] = a[M,K] b[K,N]            (+ out when accumulate)     (backward: dout W)
 *   cpu_gemm_tn: out[M,N] += a[K,M]^T b[K,N], summed onto out in order k = 0..K-1 (backward: dout^T x),
 *                so accumulating micro-batches one after another equals one call on all rows, bit for bit. */
void cpu_gemm_nt(float *out, const float *a, const float *b, const float *bias, int M, int N, int K, int accumulate);
void cpu_gemm_nn(float *out, const float *a, const float *b, int M, int N, int K, int accumulate);
void cpu_gemm_tn(float *out, const float *a, const float *b, int M, int N, int K);
/* the same on an instruction set's kernels (tests): 0 the default build's vectors, 1 AVX2, 2 AVX-512, at most
 * cpu_gemm_best_isa(); every isa gives the same bits */
int cpu_gemm_best_isa(void);
void cpu_gemm_nt_isa(int isa, float *out, const float *a, const float *b, const float *bias, int M, int N, int K,
                     int accumulate);
void cpu_gemm_nn_isa(int isa, float *out, const float *a, const float *b, int M, int N, int K, int accumulate);
void cpu_gemm_tn_isa(int isa, float *out, const float *a, const float *b, int M, int N, int K);

/* AdamW's elementwise update by instruction set (0 baseline, 1 AVX2, 2 AVX-512F): all bitwise equal */
typedef struct adamw_consts {
    float gscale, decay, b1, one_m_b1, b2, one_m_b2, step, bc2s, eps;
} adamw_consts;
int cpu_adamw_best_isa(void);
void cpu_adamw_variant(int isa, float *p, float *pa, const float *g, float *m, float *v, size_t n,
                       const adamw_consts *k);
/* the offload AdamW (qf_cpu_adamw_act) with a given ISA's slice (0 baseline, 1 AVX2+F16C, 2 AVX-512F+F16C: at
 * most cpu_adamw_best_isa(), and 0 unless cpu_have_f16c()); every variant gives the same bits */
int cpu_have_f16c(void);
void cpu_adamw_act_variant(int isa, float *p, void *pact, const void *g, int act_dtype, float *m, float *v, size_t n,
                           const adamw_consts *k, int threads);
/* the host gradient add (qf_cpu_act_add) with a given ISA's 16-bit slice (as above: the same bits); fp32 as is */
void cpu_act_add_variant(int isa, void *y, const void *x, int act_dtype, size_t n, int threads);

#endif
