/* host_act_cpu.c — flat act-typed buffers in host memory on every backend: the gradients of the offload engine
 * when they live on the host (src/zero/zero_hgrad.c). fp32 values are summed and added exactly as the CPU table's
 * sumsq and add_inplace (elementwise_cpu.c) do, so that a CPU run keeps its trajectory bit for bit; bf16 and fp16
 * widen exactly, add in fp32 and round to nearest even as the GPU tables' add_inplace. */
#include "cpu_impl.h"
#include "f16_convert.h"
#include "ops.h"
#include "util.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static inline float act_get(const void *p, int dt, size_t i) {
    if (dt == QF_DT_BF16) return qf_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == QF_DT_F16) return qf_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}
static inline void act_set(void *p, int dt, size_t i, float v) {
    if (dt == QF_DT_BF16) ((uint16_t *)p)[i] = qf_f32_to_bf16(v);
    else if (dt == QF_DT_F16) ((uint16_t *)p)[i] = qf_f32_to_f16(v);
    else ((float *)p)[i] = v;
}

/* chunks of the CPU table's sumsq (elementwise_cpu.c SUMSQ_CHUNK): each summed in order in double, the partials
 * in chunk order — the result does not depend on the thread count */
enum { HOST_SUMSQ_CHUNK = 16384 };

/* One chunk in double: fp32 in order (the CPU table's exact sequence: CPU runs keep their trajectory bit for bit);
 * the 16-bit types (GPU ranks, where the device's own sum has another order anyway) widened a block at a time into
 * fp32 and summed in 8 independent lanes, then the lanes in order, so the conversion and the sum vectorise instead
 * of waiting on one chain of dependent additions. */
static double sumsq_f32(const float *f, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)f[i] * f[i];
    return s;
}
static double sumsq_lanes(const float *f, size_t n) {
    double l[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) l[j] += (double)f[i + j] * f[i + j];
    for (; i < n; i++) l[0] += (double)f[i] * f[i];
    double s = 0.0;
    for (int j = 0; j < 8; j++) s += l[j];
    return s;
}
enum { WIDEN_BLOCK = 1024 };
static double sumsq_bf16(const uint16_t *h, size_t n) {
    uint32_t w[WIDEN_BLOCK];
    double s = 0.0;
    for (size_t b = 0; b < n; b += WIDEN_BLOCK) {
        const size_t k = n - b < WIDEN_BLOCK ? n - b : WIDEN_BLOCK;
        for (size_t i = 0; i < k; i++) w[i] = (uint32_t)h[b + i] << 16;
        s += sumsq_lanes((const float *)(void *)w, k);
    }
    return s;
}
static double sumsq_f16(const uint16_t *h, size_t n) {
    float w[WIDEN_BLOCK];
    double s = 0.0;
    for (size_t b = 0; b < n; b += WIDEN_BLOCK) {
        const size_t k = n - b < WIDEN_BLOCK ? n - b : WIDEN_BLOCK;
        for (size_t i = 0; i < k; i++) w[i] = qf_f16_to_f32(h[b + i]);
        s += sumsq_lanes(w, k);
    }
    return s;
}

double qf_cpu_act_sumsq(const void *g, int act_dtype, size_t n, int threads) {
    if (n == 0) return 0.0;
    if (threads < 1) threads = omp_get_max_threads();
    const size_t nch = (n + HOST_SUMSQ_CHUNK - 1) / HOST_SUMSQ_CHUNK;
    double *part = qf_malloc(nch * sizeof(double));
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t ch = 0; ch < nch; ch++) {
        const size_t i0 = ch * HOST_SUMSQ_CHUNK, i1 = i0 + HOST_SUMSQ_CHUNK < n ? i0 + HOST_SUMSQ_CHUNK : n;
        part[ch] = act_dtype == QF_DT_F32 ? sumsq_f32((const float *)g + i0, i1 - i0)
                   : act_dtype == QF_DT_BF16 ? sumsq_bf16((const uint16_t *)g + i0, i1 - i0)
                                             : sumsq_f16((const uint16_t *)g + i0, i1 - i0);
    }
    double s = 0.0;
    for (size_t ch = 0; ch < nch; ch++) s += part[ch];
    free(part);
    return s;
}

/* 16-bit y += x by instruction set: a block of each widened to fp32 (f16_convert.h), added, y's narrowed back; every
 * variant the same bits (cpu_act_add_variant) */
enum { ADD_BLOCK = 1024 };
#define ADD_SLICE(NAME, ATTR, F16_WIDEN, F16_NARROW)                                                                 \
    ATTR static void NAME(uint16_t *y, const uint16_t *x, int dt, size_t n) {                                      \
        float a[ADD_BLOCK], b[ADD_BLOCK];                                                                          \
        for (size_t o = 0; o < n; o += ADD_BLOCK) {                                                                \
            const size_t k = n - o < ADD_BLOCK ? n - o : ADD_BLOCK;                                                \
            if (dt == QF_DT_BF16) bf16_widen(a, y + o, k), bf16_widen(b, x + o, k);                                \
            else F16_WIDEN(a, y + o, k), F16_WIDEN(b, x + o, k);                                                   \
            for (size_t i = 0; i < k; i++) a[i] += b[i];                                                           \
            if (dt == QF_DT_BF16) bf16_narrow(y + o, a, k);                                                        \
            else F16_NARROW(y + o, a, k);                                                                          \
        }                                                                                                          \
    }
ADD_SLICE(add_base, , f16_widen_c, f16_narrow_c)
#if QF_X86
ADD_SLICE(add_avx2, __attribute__((target("avx2,f16c"))), f16_widen_f16c, f16_narrow_f16c)
ADD_SLICE(add_avx512, __attribute__((target("avx512f,avx2,f16c"))), f16_widen_avx512, f16_narrow_avx512)
#endif

void cpu_act_add_variant(int isa, void *y, const void *x, int act_dtype, size_t n, int threads) {
    if (act_dtype == QF_DT_F32) {
        qf_cpu_act_add(y, x, act_dtype, n, threads);
        return;
    }
    void (*fn)(uint16_t *, const uint16_t *, int, size_t) = add_base;
#if QF_X86
    if (isa == 2) fn = add_avx512;
    else if (isa == 1) fn = add_avx2;
#else
    (void)isa;
#endif
    if (threads < 1) threads = omp_get_max_threads();
#pragma omp parallel num_threads(threads)
    { /* whole blocks per thread */
        const size_t T = (size_t)omp_get_num_threads(), i = (size_t)omp_get_thread_num();
        const size_t nblk = (n + ADD_BLOCK - 1) / ADD_BLOCK;
        size_t lo = nblk * i / T * ADD_BLOCK, hi = nblk * (i + 1) / T * ADD_BLOCK;
        if (hi > n) hi = n;
        if (hi > lo) fn((uint16_t *)y + lo, (const uint16_t *)x + lo, act_dtype, hi - lo);
    }
}

void qf_cpu_act_add(void *y, const void *x, int act_dtype, size_t n, int threads) {
    if (threads < 1) threads = omp_get_max_threads();
    if (act_dtype == QF_DT_F32) {
        float *fy = y;
        const float *fx = x;
#pragma omp parallel for schedule(static) num_threads(threads)
        for (size_t i = 0; i < n; i++) fy[i] += fx[i];
        return;
    }
    /* 16-bit: the offload engine adds a micro-batch's whole gradient shard here when the shard lives on the host
     * (zero_hgrad.c; Qwen2.5-7B: 7.6 G elements), in this CPU's widest slice */
    cpu_act_add_variant(cpu_have_f16c() ? cpu_adamw_best_isa() : 0, y, x, act_dtype, n, threads);
}

void qf_cpu_act_from_f32(void *dst, const float *src, int act_dtype, size_t n, int threads) {
    if (threads < 1) threads = omp_get_max_threads();
    if (act_dtype == QF_DT_F32) {
        if (n && dst != src) memmove(dst, src, n * sizeof(float));
        return;
    }
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; i++) act_set(dst, act_dtype, i, src[i]);
}

void qf_cpu_act_set_nan(void *p, int act_dtype, size_t i) { act_set(p, act_dtype, i, NAN); }
