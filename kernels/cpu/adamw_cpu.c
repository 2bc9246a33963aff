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
#include "cpu_internal.h"
#include "ops.h"
#include "util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double widen(float f) {
    char buf[40];
    if (!isfinite(f)) return (double)f;
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

void cpu_adamw(float *p, void *p_act, const void *g_, float *m, float *v, size_t n, float gscale, float lr_, float beta1,
               float beta2, float eps_, float wd_, int t) {
    QF_CHECK(t >= 1);
    const float *g = g_;
    float *pa = p_act;
    const double lr = widen(lr_), b1 = widen(beta1), b2 = widen(beta2), eps = widen(eps_), wd = widen(wd_);
    const double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    const float decay = (float)(1.0 - lr * wd);
    const float fb1 = (float)b1, f1mb1 = (float)(1.0 - b1), fb2 = (float)b2, f1mb2 = (float)(1.0 - b2);
    const float step = (float)(lr / bc1), bc2s = (float)sqrt(bc2), feps = (float)eps;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float gi = gscale * g[i];
        float pi = p[i] * decay;
        const float mi = fb1 * m[i] + f1mb1 * gi;
        const float vi = fb2 * v[i] + f1mb2 * gi * gi;
        const float denom = sqrtf(vi) / bc2s + feps;
        pi = pi - step * mi / denom;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (pa) pa[i] = pi;
    }
}
