/* classifier_cpu.c — fused lm_head + cross-entropy, CLS_CHUNK tokens at a time, so that only a [CLS_CHUNK, V]
 * block of logits ever exists (never [N, V]).
 * Per chunk: logits = x W^T; per trained token, log-softmax with max subtraction in fp32 (the sum of exps in
 * double), loss = -(logit[target] - lse); the logits block is then overwritten with
 * dlogits = grad_scale * (softmax - onehot) (zero rows for ignored targets), and dW += dlogits^T x,
 * dx = dlogits W. Token losses are summed in token order in double. */
#include "cpu_impl.h"
#include "ops.h"
#include "util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CLS_CHUNK 64

void cpu_classifier(double *loss_sum, void *dx_, void *dw_, const void *x_, const void *w_, const int32_t *targets, int N,
                    int C, int V, float grad_scale) {
    float *dx = dx_, *dw = dw_;
    const float *x = x_, *w = w_;
    const int train = dx != NULL;
    float *logits = qf_malloc((size_t)CLS_CHUNK * (V > 0 ? V : 1) * sizeof(float));
    double *tokloss = qf_malloc(CLS_CHUNK * sizeof(double));
    double total = 0.0;
    for (int n0 = 0; n0 < N; n0 += CLS_CHUNK) {
        const int nc = N - n0 < CLS_CHUNK ? N - n0 : CLS_CHUNK;
        const float *xc = x + (size_t)n0 * C;
        cpu_gemm_nt(logits, xc, w, NULL, nc, V, C, 0);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < nc; r++) {
            float *row = logits + (size_t)r * V;
            const int32_t tgt = targets[n0 + r];
            if (tgt < 0) {
                QF_CHECK(tgt == -1);
                tokloss[r] = 0.0;
                if (train) memset(row, 0, (size_t)V * sizeof(float));
                continue;
            }
            QF_CHECK(tgt < V);
            float m = -INFINITY;
            for (int j = 0; j < V; j++) m = row[j] > m ? row[j] : m;
            double se = 0.0;
            for (int j = 0; j < V; j++) se += (double)expf(row[j] - m);
            const float lse = m + (float)log(se);
            tokloss[r] = -(double)(row[tgt] - lse);
            if (train) {
                for (int j = 0; j < V; j++) row[j] = expf(row[j] - lse);
                row[tgt] -= 1.0f;
                for (int j = 0; j < V; j++) row[j] *= grad_scale;
            }
        }
        for (int r = 0; r < nc; r++) total += tokloss[r];
        if (train) {
            /* dW before dx, so that dx may share memory with x */
            cpu_gemm_tn(dw, logits, xc, V, C, nc);
            cpu_gemm_nn(dx + (size_t)n0 * C, logits, w, nc, C, V, 0);
        }
    }
    *loss_sum = total;
    free(tokloss);
    free(logits);
}
