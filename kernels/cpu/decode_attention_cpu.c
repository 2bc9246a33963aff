/* decode_attention_cpu.c — attention against a KV cache (ops.h attention_decode), fp32.
 *
 * Caches k, v [B, S, KV, D]; row b's Tq new tokens are positions start[b] .. start[b]+Tq-1. The new k, v rows are
 * copied into the caches first; then every (row, new token, query head) is one independent softmax over cache
 * positions 0 .. start[b]+i: scores, max subtraction, exp, sum in double, weighted sum of v rows. Each output
 * element is a sum in position order, so a row's result does not depend on B, Tq or the thread count (batched
 * and one-prompt decoding agree bit for bit). */
#include "cpu_impl.h"
#include "ops.h"
#include "util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void cpu_attention_decode(void *out_, const void *q_, const void *k_, const void *v_, void *kc_, void *vc_,
                          const int32_t *start, int B, int Tq, int S, int H, int KV, int D) {
    float *out = out_, *kc = kc_, *vc = vc_;
    const float *q = q_, *k = k_, *v = v_;
    QF_CHECK(KV > 0 && H % KV == 0 && Tq >= 1);
    const int rep = H / KV;
    const size_t row = (size_t)KV * D; /* one position of one cache */
    for (int b = 0; b < B; b++) {
        QF_CHECK(start[b] >= 0 && start[b] + Tq <= S);
        for (int i = 0; i < Tq; i++) {
            const size_t src = ((size_t)b * Tq + i) * row, dst = ((size_t)b * S + start[b] + i) * row;
            memcpy(kc + dst, k + src, row * sizeof(float));
            memcpy(vc + dst, v + src, row * sizeof(float));
        }
    }
    const float scale = 1.0f / sqrtf((float)D);
    const long items = (long)B * Tq * H;
#pragma omp parallel
    {
        float *s = qf_malloc((size_t)S * sizeof(float));
#pragma omp for schedule(static)
        for (long it = 0; it < items; it++) {
            const int h = (int)(it % H), i = (int)(it / H % Tq), b = (int)(it / H / Tq), kh = h / rep;
            const int t = start[b] + i; /* this query's position: it sees 0..t */
            const float *qh = q + (((size_t)b * Tq + i) * H + h) * D;
            const float *kb = kc + (size_t)b * S * row, *vb = vc + (size_t)b * S * row;
            float mx = -INFINITY;
            for (int j = 0; j <= t; j++) {
                const float *kj = kb + (size_t)j * row + (size_t)kh * D;
                float dot = 0;
                for (int d = 0; d < D; d++) dot += qh[d] * kj[d];
                s[j] = dot * scale;
                if (s[j] > mx) mx = s[j];
            }
            double sum = 0;
            for (int j = 0; j <= t; j++) {
                s[j] = expf(s[j] - mx);
                sum += s[j];
            }
            float *oh = out + (((size_t)b * Tq + i) * H + h) * D;
            for (int d = 0; d < D; d++) oh[d] = 0;
            for (int j = 0; j <= t; j++) {
                const float p = (float)(s[j] / sum);
                const float *vj = vb + (size_t)j * row + (size_t)kh * D;
                for (int d = 0; d < D; d++) oh[d] += p * vj[d];
            }
        }
        free(s);
    }
}
