/* qf_gpu_test.h — what the CUDA op tests (tests/gpu/test_*_cuda.c) share: the check counters and their "ok"/"FAIL"
 * lines, check names formatted in place (check_name), the xorshift* generator (a test defines its seed,
 * QF_GPU_TEST_SEED, before including this), values that bf16 and fp16 both hold exactly, the max-norm relative error,
 * and host <-> device copies through a table's act dtype. A test program is one translation unit, so this state is
 * the program's own; main returns n_fail != 0. */
#ifndef QF_GPU_TEST_H
#define QF_GPU_TEST_H
#include "ops.h"
#include "util.h"
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef QF_GPU_TEST_SEED
#error "define QF_GPU_TEST_SEED (the test's generator seed) before including qf_gpu_test.h"
#endif

static int n_checks, n_fail;

/* One check's line: label is the test's own columns (table name, ...), already padded; the name is padded to namew.
 * err <= tol passes (so NaN fails). */
static inline void qf_gpu_report(const char *label, int namew, const char *name, double err, double tol) {
    const int ok = err <= tol;
    n_checks++;
    if (!ok) n_fail++;
    printf("%-4s %s %-*s max err %.3e (tol %.3g)\n", ok ? "ok" : "FAIL", label, namew, name, err, tol);
    fflush(stdout);
}
static inline void qf_gpu_report_bool(const char *label, const char *name, int ok) {
    n_checks++;
    if (!ok) n_fail++;
    printf("%-4s %s %s\n", ok ? "ok" : "FAIL", label, name);
    fflush(stdout);
}

/* A check's name from a printf format, in a buffer that the next call reuses (a name is printed at once). */
static inline const char *check_name(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline const char *check_name(const char *fmt, ...) {
    static char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

/* ---- host helpers ------------------------------------------------------------------------------------------ */
static uint64_t rng_state = QF_GPU_TEST_SEED;
static inline double urand(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}
static inline float bfr(float x) { return qf_bf16_to_f32(qf_f32_to_bf16(x)); }
static inline float f16r(float x) { return qf_f16_to_f32(qf_f32_to_f16(x)); }
/* x rounded to bf16, then to fp16: a value both types hold exactly (a bf16 value of magnitude below fp16's normal
 * range, 2^-14, loses low bits in fp16, and what is left still fits bf16's 8-bit significand) */
static inline float both(float x) { return f16r(bfr(x)); }
/* uniform (-a, a), rounded to a value exact in bf16 and fp16 */
static inline float *frand(size_t n, double a) {
    float *p = qf_malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = both((float)((2.0 * urand() - 1.0) * a));
    return p;
}
static inline float *fnan(size_t n) {
    float *p = qf_malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}
/* max_i |a_i - ref_i| / max_i |ref_i| (1 when ref is all zero); a NaN in a is kept */
static inline double relerr(const float *a, const float *ref, size_t n) {
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)ref[i]);
        if (!(d <= md)) md = d; /* keeps NaN */
        if (fabs((double)ref[i]) > mr) mr = fabs((double)ref[i]);
    }
    return md / (mr > 0.0 ? mr : 1.0);
}

/* seg_start of B packed rows of T tokens: a row starts a new document at each position with probability
 * ndocs_hint / T (one document when ndocs_hint <= 1) */
static inline void make_segments(int32_t *seg, int B, int T, int ndocs_hint) {
    for (int b = 0; b < B; b++) {
        int start = 0;
        for (int t = 0; t < T; t++) {
            if (t > 0 && ndocs_hint > 1 && urand() < (double)ndocs_hint / T) start = t;
            seg[b * T + t] = start;
        }
    }
}

/* ---- device helpers (for table g) ----------------------------------------------------------------------------- */
/* n floats to a new act tensor of g */
static inline void *up(const qf_ops *g, const float *h, size_t n) {
    void *d = g->alloc(n * g->act_bytes + 16);
    float *st = g->alloc(n * sizeof(float) + 16);
    QF_CHECK(d && st);
    g->copy_h2d(st, h, n * sizeof(float));
    g->act_from_f32(d, st, n);
    g->free(st);
    return d;
}
/* n elements of act tensor d as floats into h */
static inline void down(const qf_ops *g, float *h, const void *d, size_t n) {
    float *st = g->alloc(n * sizeof(float) + 16);
    QF_CHECK(st);
    g->act_to_f32(st, d, n);
    g->copy_d2h(h, st, n * sizeof(float));
    g->free(st);
}
static inline float *down_new(const qf_ops *g, const void *d, size_t n) {
    float *h = qf_malloc((n ? n : 1) * sizeof(float));
    down(g, h, d, n);
    return h;
}
/* bytes as they are (no dtype conversion) */
static inline void *up_raw(const qf_ops *g, const void *h, size_t bytes) {
    void *d = g->alloc(bytes + 16);
    QF_CHECK(d);
    g->copy_h2d(d, h, bytes);
    return d;
}
static inline float *down_raw_f32(const qf_ops *g, const float *d, size_t n) {
    float *h = qf_malloc((n ? n : 1) * sizeof(float));
    g->copy_d2h(h, d, n * sizeof(float));
    return h;
}
#endif
