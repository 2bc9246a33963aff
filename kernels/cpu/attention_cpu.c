/* attention_cpu.c — causal, segment-aware attention with GQA, scale 1/sqrt(D).
 *
 * Forward: one query row at a time (parallel over (b, h, t)); its scores against keys seg_start..t go into a
 * per-thread buffer of length T, softmax with max subtraction, out = sum p v. lse = max + log(sum exp) is saved
 * for the backward. No T x T buffer exists.
 * Backward: recomputes p = exp(s - lse); with delta_t = dout_t . out_t, ds = p (dout . v - delta):
 *   dq_t = scale sum_s ds_ts k_s,  dk_s = scale sum_(h,t) ds_ts q_t,  dv_s = sum_(h,t) p_ts dout_t.
 * Parallel over (b, kv head): a thread owns the dk, dv rows of its kv head and all dq rows of the query heads
 * that use it, so there are no races and every sum runs in a fixed order (query head, then t, ascending). */
#include "cpu_impl.h"
#include "ops.h"
#include "util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* dot product in 8 interleaved partial sums (lane j takes d = j mod 8), combined in a fixed tree: vectorises
 * without -ffast-math and rounds the same on every call, thread and machine. */
static inline float dotf(const float *restrict a, const float *restrict b, int D) {
    float l[8] = {0};
    int d = 0;
    for (; d + 8 <= D; d += 8)
        for (int j = 0; j < 8; j++) l[j] += a[d + j] * b[d + j];
    for (int j = 0; d < D; d++, j++) l[j] += a[d] * b[d];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

void cpu_attention_fwd(void *out_, float *lse, const void *q_, const void *k_, const void *v_, const int32_t *seg_start,
                       int B, int T, int H, int KV, int D) {
    float *out = out_;
    const float *q = q_, *k = k_, *v = v_;
    QF_CHECK(KV > 0 && H % KV == 0);
    const int rep = H / KV;
    const float scale = (float)(1.0 / sqrt((double)D));
    const long rows = (long)B * H * T;
#pragma omp parallel
    {
        float *p = qf_malloc((size_t)(T > 0 ? T : 1) * sizeof(float));
        float *acc = qf_malloc((size_t)D * sizeof(float));
#pragma omp for schedule(static)
        for (long row = 0; row < rows; row++) {
            const int t = (int)(row % T), h = (int)(row / T % H), b = (int)(row / T / H), g = h / rep;
            const int s0 = seg_start[(size_t)b * T + t];
            QF_CHECK(s0 >= 0 && s0 <= t);
            const float *qr = q + ((size_t)(b * T + t) * H + h) * D;
            float m = -INFINITY;
            for (int s = s0; s <= t; s++) {
                const float sc = dotf(qr, k + ((size_t)(b * T + s) * KV + g) * D, D) * scale;
                p[s - s0] = sc;
                if (sc > m) m = sc;
            }
            float l = 0.0f;
            for (int s = s0; s <= t; s++) {
                const float e = expf(p[s - s0] - m);
                p[s - s0] = e;
                l += e;
            }
            for (int d = 0; d < D; d++) acc[d] = 0.0f;
            for (int s = s0; s <= t; s++) {
                const float *vr = v + ((size_t)(b * T + s) * KV + g) * D, e = p[s - s0];
                for (int d = 0; d < D; d++) acc[d] += e * vr[d];
            }
            float *orow = out + ((size_t)(b * T + t) * H + h) * D;
            for (int d = 0; d < D; d++) orow[d] = acc[d] / l;
            lse[((size_t)b * H + h) * T + t] = m + logf(l);
        }
        free(acc);
        free(p);
    }
}

void cpu_attention_bwd(void *dq_, void *dk_, void *dv_, const void *dout_, const void *out_, const float *lse,
                       const void *q_, const void *k_, const void *v_, const int32_t *seg_start, int B, int T, int H,
                       int KV, int D) {
    float *dq = dq_, *dk = dk_, *dv = dv_;
    const float *dout = dout_, *out = out_, *q = q_, *k = k_, *v = v_;
    QF_CHECK(KV > 0 && H % KV == 0);
    const int rep = H / KV;
    const float scale = (float)(1.0 / sqrt((double)D));
    const int units = B * KV;
#pragma omp parallel
    {
        float *dqa = qf_malloc((size_t)D * sizeof(float));
#pragma omp for schedule(static)
        for (int u = 0; u < units; u++) {
            const int b = u / KV, g = u % KV;
            for (int t = 0; t < T; t++) {
                memset(dk + ((size_t)(b * T + t) * KV + g) * D, 0, (size_t)D * sizeof(float));
                memset(dv + ((size_t)(b * T + t) * KV + g) * D, 0, (size_t)D * sizeof(float));
            }
            for (int h = g * rep; h < (g + 1) * rep; h++) {
                for (int t = 0; t < T; t++) {
                    const int s0 = seg_start[(size_t)b * T + t];
                    QF_CHECK(s0 >= 0 && s0 <= t);
                    const size_t qi = ((size_t)(b * T + t) * H + h) * D;
                    const float *qr = q + qi, *gr = dout + qi;
                    const float delta = dotf(gr, out + qi, D);
                    const float L = lse[((size_t)b * H + h) * T + t];
                    for (int d = 0; d < D; d++) dqa[d] = 0.0f;
                    for (int s = s0; s <= t; s++) {
                        const size_t ki = ((size_t)(b * T + s) * KV + g) * D;
                        const float *kr = k + ki, *vr = v + ki;
                        float *dkr = dk + ki, *dvr = dv + ki;
                        const float p = expf(dotf(qr, kr, D) * scale - L);
                        const float ds = p * (dotf(gr, vr, D) - delta);
                        const float dss = ds * scale;
                        for (int d = 0; d < D; d++) {
                            dqa[d] += ds * kr[d];
                            dkr[d] += dss * qr[d];
                            dvr[d] += p * gr[d];
                        }
                    }
                    float *dqr = dq + qi;
                    for (int d = 0; d < D; d++) dqr[d] = dqa[d] * scale;
                }
            }
        }
        free(dqa);
    }
}
