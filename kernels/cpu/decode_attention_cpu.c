/* decode_attention_cpu.c — attention against a paged KV cache (ops.h attention_paged: serve's and generate's calls),
 * fp32.
 *
 * The pools k, v [nblocks, bs, KV, D]; position p of sequence s is slot p % bs of block btab[s][p / bs]. The new k, v
 * rows are written there first; then every (token, query head) is one independent softmax over its sequence's
 * positions 0 .. pos[n]: scores, max subtraction, exp, sum in double, weighted sum of v rows. Each output element
 * is a sum in position order, so a token's result depends neither on the tokens beside it in the call nor on the
 * thread count or the block layout (serve's greedy continuations equal generate's bit for bit whatever the batch
 * around them; test_serve_paged). */
#include "cpu_impl.h"
#include "ops.h"
#include "util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* one query: softmax over cache positions 0..t of q.k_j * scale, weighted sum of v_j, in position order. Position j
 * is slot j % bs of block blk[j / bs]; rows of `row` floats, kv head at kh*D; s[t+1] scratch. */
static void cpu_query_attend(float *oh, const float *qh, const float *kc, const float *vc, const int32_t *blk, int bs,
                             int t, size_t row, int kh, int D, float scale, float *s) {
    float mx = -INFINITY;
    for (int j = 0; j <= t; j++) {
        const size_t r = (size_t)blk[j / bs] * bs + j % bs;
        const float *kj = kc + r * row + (size_t)kh * D;
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
    for (int d = 0; d < D; d++) oh[d] = 0;
    for (int j = 0; j <= t; j++) {
        const float p = (float)(s[j] / sum);
        const size_t r = (size_t)blk[j / bs] * bs + j % bs;
        const float *vj = vc + r * row + (size_t)kh * D;
        for (int d = 0; d < D; d++) oh[d] += p * vj[d];
    }
}

void cpu_kv_append_paged(float *kp, float *vp, const float *k, const float *v, const int32_t *seq, const int32_t *pos,
                         const int32_t *btab, int N, int maxb, int bs, int KV, int D) {
    const size_t row = (size_t)KV * D;
    for (int n = 0; n < N; n++) {
        const int32_t *blk = btab + (size_t)seq[n] * maxb;
        const size_t dst = ((size_t)blk[pos[n] / bs] * bs + pos[n] % bs) * row;
        memcpy(kp + dst, k + (size_t)n * row, row * sizeof(float));
        memcpy(vp + dst, v + (size_t)n * row, row * sizeof(float));
    }
}

void cpu_attention_paged(void *out_, const void *q_, const void *k_, const void *v_, void *kp_, void *vp_,
                         const int32_t *seq, const int32_t *pos, const int32_t *btab, int N, int maxb, int bs, int H,
                         int KV, int D, int max_len) {
    float *out = out_, *kp = kp_, *vp = vp_;
    const float *q = q_, *k = k_, *v = v_;
    QF_CHECK(KV > 0 && H % KV == 0 && N >= 1 && bs >= 1 && maxb >= 1);
    const int rep = H / KV;
    const size_t row = (size_t)KV * D;
    int tmax = 0;
    QF_CHECK((k == NULL) == (v == NULL));
    for (int n = 0; n < N; n++) {
        QF_CHECK(seq[n] >= 0 && pos[n] >= 0 && pos[n] < max_len && pos[n] / bs < maxb);
        tmax = pos[n] > tmax ? pos[n] : tmax;
    }
    if (k) cpu_kv_append_paged(kp, vp, k, v, seq, pos, btab, N, maxb, bs, KV, D);
    const float scale = 1.0f / sqrtf((float)D);
    const long items = (long)N * H;
#pragma omp parallel
    {
        float *s = qf_malloc((size_t)(tmax + 1) * sizeof(float));
#pragma omp for schedule(static)
        for (long it = 0; it < items; it++) {
            const int h = (int)(it % H), n = (int)(it / H);
            cpu_query_attend(out + ((size_t)n * H + h) * D, q + ((size_t)n * H + h) * D, kp, vp,
                             btab + (size_t)seq[n] * maxb, bs, pos[n], row, h / rep, D, scale, s);
        }
        free(s);
    }
}
