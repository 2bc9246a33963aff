/* adamw_cpu.c — AdamW as torch.optim.AdamW (foreach=False) / DeepSpeed compute it:
 *   g = gscale * g;  p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g g;
 *   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * Scalars are formed in double and rounded to float, the elementwise math is fp32 — as torch does with its
 * Python-float hyper-parameters on fp32 tensors.
 *
 * The table passes hyper-parameters as float; torch holds them as Python doubles (0.999, not 0.999f). So that
 * 1 - b2 and b2^t match torch's (1 - 0.999f differs from 1 - 0.999 by 1.3e-5 relative), each float is widened
 * to the double of its shortest round-trip decimal form: 0.999f -> 0.999. A value that came from a double
 * computation (a scheduled lr) gets a double within half a float ulp of it, as good as any. */
#include "cpu_internal.h"
#include "ops.h"
#include "util.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The elementwise update, compiled three times: baseline (SSE2), AVX2 and AVX-512F, chosen at run time by what the
 * CPU supports. The same float operations in the same order and no FMA contraction (-std=c11 implies
 * -ffp-contract=off; sqrt and division are correctly rounded at every width), so every variant gives bitwise the
 * same result (test_ops_cpu checks it). Each OpenMP thread takes a contiguous slice and runs the chosen variant on
 * it (an `omp for` inside a target-specific function would be outlined without the target's instructions). */
#define ADAMW_BODY                                                                                                  \
    for (size_t i = 0; i < n; i++) {                                                                                \
        const float gi = k->gscale * g[i];                                                                          \
        float pi = p[i] * k->decay;                                                                                 \
        const float mi = k->b1 * m[i] + k->one_m_b1 * gi;                                                           \
        const float vi = k->b2 * v[i] + k->one_m_b2 * gi * gi;                                                      \
        const float denom = sqrtf(vi) / k->bc2s + k->eps;                                                           \
        pi = pi - k->step * mi / denom;                                                                             \
        m[i] = mi;                                                                                                  \
        v[i] = vi;                                                                                                  \
        p[i] = pi;                                                                                                  \
    }                                                                                                               \
    if (pa) memcpy(pa, p, n * sizeof(float));

static void adamw_base(float *restrict p, float *restrict pa, const float *restrict g, float *restrict m,
                       float *restrict v, size_t n, const adamw_consts *k) {
    ADAMW_BODY
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) static void adamw_avx2(float *restrict p, float *restrict pa, const float *restrict g,
                                                      float *restrict m, float *restrict v, size_t n,
                                                      const adamw_consts *k) {
    ADAMW_BODY
}
__attribute__((target("avx512f"))) static void adamw_avx512(float *restrict p, float *restrict pa,
                                                           const float *restrict g, float *restrict m,
                                                           float *restrict v, size_t n, const adamw_consts *k) {
    ADAMW_BODY
}
#endif

int cpu_adamw_best_isa(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2")) return 1;
#endif
    return 0;
}

typedef void (*adamw_fn)(float *restrict, float *restrict, const float *restrict, float *restrict, float *restrict,
                         size_t, const adamw_consts *);

void cpu_adamw_variant(int isa, float *p, float *pa, const float *g, float *m, float *v, size_t n,
                       const adamw_consts *k) {
    adamw_fn fn = adamw_base;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (isa == 2) fn = adamw_avx512;
    else if (isa == 1) fn = adamw_avx2;
#else
    (void)isa;
#endif
#pragma omp parallel
    {
        size_t t = (size_t)omp_get_thread_num(), T = (size_t)omp_get_num_threads();
        size_t lo = n * t / T, hi = n * (t + 1) / T;
        if (hi > lo) fn(p + lo, pa ? pa + lo : NULL, g + lo, m + lo, v + lo, hi - lo, k);
    }
}

void cpu_adamw(float *p, void *p_act, const void *g_, float *m, float *v, size_t n, float gscale, float lr_, float beta1,
               float beta2, float eps_, float wd_, int t) {
    QF_CHECK(t >= 1);
    const float *g = g_;
    float *pa = p_act;
    const double lr = qf_float_widen(lr_), b1 = qf_float_widen(beta1), b2 = qf_float_widen(beta2);
    const double eps = qf_float_widen(eps_), wd = qf_float_widen(wd_);
    const double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    const float decay = (float)(1.0 - lr * wd);
    const float fb1 = (float)b1, f1mb1 = (float)(1.0 - b1), fb2 = (float)b2, f1mb2 = (float)(1.0 - b2);
    const float step = (float)(lr / bc1), bc2s = (float)sqrt(bc2), feps = (float)eps;
    const adamw_consts k = {gscale, decay, fb1, f1mb1, fb2, f1mb2, step, bc2s, feps};
    cpu_adamw_variant(cpu_adamw_best_isa(), p, pa, g, m, v, n, &k);
}
