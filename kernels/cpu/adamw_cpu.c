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

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
/* fp16 <-> fp32 by F16C, 8 at a time: widening is exact, narrowing rounds to nearest even as qf_f32_to_f16 does
 * (subnormals included); NaNs stay NaN */
__attribute__((target("avx2,f16c"))) static void f16_to_f32_f16c(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = qf_f16_to_f32(src[i]);
}
__attribute__((target("avx2,f16c"))) static void f32_to_f16_f16c(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = qf_f32_to_f16(src[i]);
}
/* F16C by CPUID.1:ECX[29] (clang 14's __builtin_cpu_supports does not know "f16c"; gcc's does) */
static int have_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u) && __builtin_cpu_supports("avx2");
}
#endif

/* act[n] -> fp32[n]: bf16 and fp16 widen exactly (fp16 by F16C where the CPU has it, the same values) */
static void act_block_to_f32(float *restrict dst, const void *restrict src, int dt, size_t n) {
    if (dt == QF_DT_F32) {
        memcpy(dst, src, n * sizeof(float));
    } else if (dt == QF_DT_BF16) {
        const uint16_t *s = src;
        uint32_t *d = (uint32_t *)dst;
        for (size_t i = 0; i < n; i++) d[i] = (uint32_t)s[i] << 16;
    } else {
        const uint16_t *s = src;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (have_f16c()) {
            f16_to_f32_f16c(dst, s, n);
            return;
        }
#endif
        for (size_t i = 0; i < n; i++) dst[i] = qf_f16_to_f32(s[i]);
    }
}
/* fp32[n] -> act[n], rounding to nearest even as qf_f32_to_bf16 / qf_f32_to_f16 (branch-free for bf16) */
static void act_block_from_f32(void *restrict dst, const float *restrict src, int dt, size_t n) {
    if (dt == QF_DT_F32) {
        memcpy(dst, src, n * sizeof(float));
    } else if (dt == QF_DT_BF16) {
        const uint32_t *s = (const uint32_t *)src;
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) {
            const uint32_t u = s[i];
            const uint16_t rounded = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            const uint16_t qnan = (uint16_t)((u >> 16) | 0x40u);
            d[i] = (u & 0x7fffffffu) > 0x7f800000u ? qnan : rounded;
        }
    } else {
        uint16_t *d = dst;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (have_f16c()) {
            f32_to_f16_f16c(d, src, n);
            return;
        }
#endif
        for (size_t i = 0; i < n; i++) d[i] = qf_f32_to_f16(src[i]);
    }
}

/* One thread's slice, block by block: widen the gradients, the elementwise update (the ISA variant chosen once),
 * round the parameters into pact. pact may alias g (each block is read before it is written). */
static void adamw_act_slice(int isa, float *p, void *pact, const void *g, int dt, float *m, float *v, size_t n,
                            const adamw_consts *k) {
    const size_t ab = dt == QF_DT_F32 ? 4 : 2;
    float gb[ADAMW_ACT_BLOCK];
    for (size_t b = 0; b < n; b += ADAMW_ACT_BLOCK) {
        const size_t nb = n - b < ADAMW_ACT_BLOCK ? n - b : ADAMW_ACT_BLOCK;
        act_block_to_f32(gb, (const char *)g + b * ab, dt, nb);
        adamw_fn fn = adamw_base;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (isa == 2) fn = adamw_avx512;
        else if (isa == 1) fn = adamw_avx2;
#endif
        fn(p + b, NULL, gb, m + b, v + b, nb, k);
        if (pact) act_block_from_f32((char *)pact + b * ab, p + b, dt, nb);
    }
}

void qf_cpu_adamw_act(float *p, void *pact, const void *g, int act_dtype, float *m, float *v, size_t n, float gscale,
                      float lr, float beta1, float beta2, float eps, float wd, int t, int threads) {
    const adamw_consts k = adamw_consts_make(gscale, lr, beta1, beta2, eps, wd, t);
    const int isa = cpu_adamw_best_isa();
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
            adamw_act_slice(isa, p + lo, pact ? (char *)pact + lo * ab : NULL, (const char *)g + lo * ab, act_dtype,
                            m + lo, v + lo, hi - lo, &k);
    }
}
