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
#include "cpu_impl.h"
#include "f16_convert.h"
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

/* the update's fp32 constants from the table's float hyper-parameters (see the top of this file) */
static adamw_consts adamw_consts_make(float gscale, float lr_, float beta1, float beta2, float eps_, float wd_, int t) {
    QF_CHECK(t >= 1);
    const double lr = qf_float_widen(lr_), b1 = qf_float_widen(beta1), b2 = qf_float_widen(beta2);
    const double eps = qf_float_widen(eps_), wd = qf_float_widen(wd_);
    const double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    const adamw_consts k = {gscale, (float)(1.0 - lr * wd), (float)b1, (float)(1.0 - b1), (float)b2,
                            (float)(1.0 - b2), (float)(lr / bc1), (float)sqrt(bc2), (float)eps};
    return k;
}

void cpu_adamw(float *p, void *p_act, const void *g_, float *m, float *v, size_t n, float gscale, float lr_, float beta1,
               float beta2, float eps_, float wd_, int t) {
    const adamw_consts k = adamw_consts_make(gscale, lr_, beta1, beta2, eps_, wd_, t);
    cpu_adamw_variant(cpu_adamw_best_isa(), p, p_act, g_, m, v, n, &k);
}

/* ---- the offload AdamW: act-typed gradients in, act-typed parameters out, in one threaded pass -------------- */

/* Elements per block: the block's fp32 gradients and parameters stay in L1 between the three steps. */
enum { ADAMW_ACT_BLOCK = 512 };

/* The conversions, inlined into each ISA's slice function below so that the compiler vectorises them with that
 * function's instructions. bf16 widens exactly (a shift) and narrows to nearest even, branch-free (NaN stays a
 * quiet NaN), as qf_f32_to_bf16. fp16 goes through F16C / AVX-512F where the slice is compiled for them (widening
 * exact; narrowing to nearest even as qf_f32_to_f16, subnormals included), else qf_f16_to_f32 / qf_f32_to_f16
 * (f16_convert.h). */
/* One slice, block by block: widen the gradients, the elementwise update, round the parameters into pact (may
 * alias g: each block is read before it is written). Compiled once per ISA with the conversion of that ISA. */
#define ACT_SLICE(NAME, ATTR, ADAMW, F16_WIDEN, F16_NARROW)                                                          \
    ATTR static void NAME(float *p, void *pact, const void *g, int dt, float *m, float *v, size_t n,                \
                          const adamw_consts *k) {                                                                   \
        float gb[ADAMW_ACT_BLOCK];                                                                                   \
        const size_t ab = dt == QF_DT_F32 ? 4 : 2;                                                                   \
        for (size_t b = 0; b < n; b += ADAMW_ACT_BLOCK) {                                                            \
            const size_t nb = n - b < ADAMW_ACT_BLOCK ? n - b : ADAMW_ACT_BLOCK;                                     \
            const void *gs = (const char *)g + b * ab;                                                               \
            if (dt == QF_DT_F32) memcpy(gb, gs, nb * 4);                                                             \
            else if (dt == QF_DT_BF16) bf16_widen(gb, gs, nb);                                                       \
            else F16_WIDEN(gb, gs, nb);                                                                              \
            ADAMW(p + b, NULL, gb, m + b, v + b, nb, k);                                                             \
            if (!pact) continue;                                                                                     \
            void *pd = (char *)pact + b * ab;                                                                        \
            if (dt == QF_DT_F32) memcpy(pd, p + b, nb * 4);                                                          \
            else if (dt == QF_DT_BF16) bf16_narrow(pd, p + b, nb);                                                   \
            else F16_NARROW(pd, p + b, nb);                                                                          \
        }                                                                                                            \
    }

ACT_SLICE(act_slice_base, , adamw_base, f16_widen_c, f16_narrow_c)

#if QF_X86
ACT_SLICE(act_slice_avx2, __attribute__((target("avx2,f16c"))), adamw_avx2, f16_widen_f16c, f16_narrow_f16c)
ACT_SLICE(act_slice_avx512, __attribute__((target("avx512f,avx2,f16c"))), adamw_avx512, f16_widen_avx512,
          f16_narrow_avx512)
#endif

typedef void (*act_slice_fn)(float *, void *, const void *, int, float *, float *, size_t, const adamw_consts *);

/* Whether this CPU converts fp16 by F16C (CPUID.1:ECX[29]; clang 14's __builtin_cpu_supports does not know
 * "f16c"). Asked once per call of the offload AdamW, not per block: CPUID costs microseconds in a virtual machine. */
int cpu_have_f16c(void) {
#if QF_X86
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
#else
    return 0;
#endif
}

void cpu_adamw_act_variant(int isa, float *p, void *pact, const void *g, int act_dtype, float *m, float *v, size_t n,
                           const adamw_consts *k, int threads) {
    act_slice_fn fn = act_slice_base;
#if QF_X86
    if (isa == 2) fn = act_slice_avx512;
    else if (isa == 1) fn = act_slice_avx2;
#else
    (void)isa;
#endif
    const size_t ab = act_dtype == QF_DT_F32 ? 4 : 2;
    if (threads < 1) threads = omp_get_max_threads();
    /* slices of whole blocks per thread (a block never straddles two threads) */
#pragma omp parallel num_threads(threads)
    {
        size_t T = (size_t)omp_get_num_threads(), i = (size_t)omp_get_thread_num();
        size_t nblk = (n + ADAMW_ACT_BLOCK - 1) / ADAMW_ACT_BLOCK;
        size_t lo = nblk * i / T * ADAMW_ACT_BLOCK, hi = nblk * (i + 1) / T * ADAMW_ACT_BLOCK;
        if (hi > n) hi = n;
        if (hi > lo)
            fn(p + lo, pact ? (char *)pact + lo * ab : NULL, (const char *)g + lo * ab, act_dtype, m + lo, v + lo,
               hi - lo, k);
    }
}

/* The AVX2 and AVX-512 slices convert fp16 by F16C: a CPU without it takes the baseline slice (the same bits). */
void qf_cpu_adamw_act(float *p, void *pact, const void *g, int act_dtype, float *m, float *v, size_t n, float gscale,
                      float lr, float beta1, float beta2, float eps, float wd, int t, int threads) {
    const adamw_consts k = adamw_consts_make(gscale, lr, beta1, beta2, eps, wd, t);
    const int isa = cpu_have_f16c() ? cpu_adamw_best_isa() : 0;
    cpu_adamw_act_variant(isa, p, pact, g, act_dtype, m, v, n, &k, threads);
}
