/* host_act_cpu.c — flat act-typed buffers in host memory on every backend: the gradients of the offload engine
 * when they live on the host (src/zero/zero_hgrad.c). fp32 values are summed and added exactly as the CPU table's
 * sumsq and add_inplace (elementwise_cpu.c) do, so that a CPU run keeps its trajectory bit for bit; bf16 and fp16
 * widen exactly, add in fp32 and round to nearest even as the GPU tables' add_inplace. */
#include "cpu_impl.h"
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

double qf_cpu_act_sumsq(const void *g, int act_dtype, size_t n, int threads) {
    if (n == 0) return 0.0;
    if (threads < 1) threads = omp_get_max_threads();
    const size_t nch = (n + HOST_SUMSQ_CHUNK - 1) / HOST_SUMSQ_CHUNK;
    double *part = qf_malloc(nch * sizeof(double));
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t ch = 0; ch < nch; ch++) {
        const size_t i0 = ch * HOST_SUMSQ_CHUNK, i1 = i0 + HOST_SUMSQ_CHUNK < n ? i0 + HOST_SUMSQ_CHUNK : n;
        double s = 0.0;
        if (act_dtype == QF_DT_F32) {
            const float *f = g;
            for (size_t i = i0; i < i1; i++) s += (double)f[i] * f[i];
        } else {
            for (size_t i = i0; i < i1; i++) {
                const float v = act_get(g, act_dtype, i);
                s += (double)v * v;
            }
        }
        part[ch] = s;
    }
    double s = 0.0;
    for (size_t ch = 0; ch < nch; ch++) s += part[ch];
    free(part);
    return s;
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
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; i++) act_set(y, act_dtype, i, act_get(y, act_dtype, i) + act_get(x, act_dtype, i));
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
