/* bench_dev.h — what the C benchmarks on the op table share: a backend buffer of n pseudo-random values in
 * [-amp, amp) (xorshift from seed, fp32 on the host, converted to the table's act dtype on the backend). */
#ifndef QF_BENCH_DEV_H
#define QF_BENCH_DEV_H
#include <stdint.h>
#include <stdlib.h>
#include "ops.h"
#include "util.h"

static inline void *bench_dev_rand(const qf_ops *g, size_t n, double amp, uint64_t seed) {
    float *h = qf_malloc(n * 4);
    uint64_t s = 0x9E3779B97F4A7C15ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        h[i] = (float)((((s * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53 * 2.0 - 1.0) * amp);
    }
    float *st = g->alloc(n * 4);
    void *d = g->alloc(n * g->act_bytes);
    QF_CHECK(st && d);
    g->copy_h2d(st, h, n * 4);
    g->act_from_f32(d, st, n);
    g->free(st);
    free(h);
    return d;
}

#endif
