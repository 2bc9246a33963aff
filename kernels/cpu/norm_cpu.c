/* norm_cpu.c — RMSNorm and rotary position embedding (rotate-half), as HF transformers computes them in fp32. */
#include "cpu_impl.h"
#include "ops.h"
#include "util.h"
#include <math.h>
#include <stdlib.h>

/* ---- RMSNorm: out = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps) ------------------------------------------ */

void cpu_rmsnorm_fwd(void *out_, float *rstd, const void *x_, const void *w_, int N, int C, float eps) {
    float *out = out_;
    const float *x = x_, *w = w_;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        float *yr = out + (size_t)n * C;
        double ss = 0.0; /* sum of squares in double, rounded once: torch's fp32 mean up to its rounding */
        for (int c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
        const float var = (float)(ss / C);
        const float r = 1.0f / sqrtf(var + eps);
        rstd[n] = r;
        for (int c = 0; c < C; c++) yr[c] = w[c] * (xr[c] * r); /* HF: weight * (x * rsqrt(var + eps)) */
    }
}

/* y_c = w_c x_c r, r = (mean(x^2) + eps)^-1/2, dr/dx_k = -r^3 x_k / C:
 *   dx_k = r g_k - (r^3 / C) x_k sum_c g_c x_c   with g_c = dout_c w_c;   dw_c += dout_c (x_c r). */
void cpu_rmsnorm_bwd(void *dx_, void *dw_, const void *dout_, const void *x_, const void *w_, const float *rstd, int N,
                     int C, int accumulate) {
    float *dx = dx_, *dw = dw_;
    const float *dout = dout_, *x = x_, *w = w_;
    /* dw first (it reads dout), so that dx may share memory with dout. Parallel over columns, tokens in order. */
    const int ncb = (C + 63) / 64;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < ncb; cb++) {
        const int c0 = cb * 64, c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int n = 0; n < N; n++) {
            const float *gr = dout + (size_t)n * C, *xr = x + (size_t)n * C;
            const float r = rstd[n];
            for (int c = c0; c < c1; c++) dw[c] += gr[c] * (xr[c] * r);
        }
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *gr = dout + (size_t)n * C, *xr = x + (size_t)n * C;
        float *dr = dx + (size_t)n * C;
        const float r = rstd[n];
        double dot = 0.0;
        for (int c = 0; c < C; c++) dot += (double)(gr[c] * w[c]) * xr[c];
        const float k = (float)((double)r * r * r * dot / C);
        for (int c = 0; c < C; c++) {
            const float d = r * (gr[c] * w[c]) - k * xr[c];
            dr[c] = accumulate ? dr[c] + d : d;
        }
    }
}

/* ---- RoPE, rotate-half ------------------------------------------------------------------------------------------
 * HF: inv_freq = 1.0 / (theta ** (arange(0, D, 2).float() / D)) (fp32), freqs = pos.float() * inv_freq (fp32),
 * cos/sin of the fp32 angle. Here the power and the reciprocal are taken in double and rounded once to float,
 * cos/sin in double rounded to float: within an ulp of torch. */

/* cs[(row * half + i) * 2 + {0,1}] = {cos, sin} for row = pos (table by position) or row = n (per token). */
static float *rope_table(const int32_t *pos, int N, int D, double theta, int *by_pos) {
    QF_CHECK(D > 0 && D % 2 == 0);
    const int half = D / 2;
    int maxpos = 0;
    for (int n = 0; n < N; n++) {
        QF_CHECK(pos[n] >= 0);
        if (pos[n] > maxpos) maxpos = pos[n];
    }
    /* positions repeat across rows: tabulate 0..maxpos unless that is more work than one entry per token */
    *by_pos = maxpos < N;
    const int rows = *by_pos ? maxpos + 1 : N;
    float *inv = qf_malloc((size_t)half * sizeof(float));
    for (int i = 0; i < half; i++) inv[i] = (float)(1.0 / pow(theta, (double)((float)(2 * i) / (float)D)));
    float *cs = qf_malloc((size_t)rows * half * 2 * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float p = (float)(*by_pos ? r : pos[r]);
        for (int i = 0; i < half; i++) {
            const float a = p * inv[i];
            cs[((size_t)r * half + i) * 2] = (float)cos((double)a);
            cs[((size_t)r * half + i) * 2 + 1] = (float)sin((double)a);
        }
    }
    free(inv);
    return cs;
}

/* dir = +1: y1 = x1 c - x2 s, y2 = x2 c + x1 s (forward); dir = -1: the inverse (transposed) rotation. */
static void rope_apply(float *x, const int32_t *pos, int N, int nh, int D, double theta, int dir) {
    int by_pos;
    float *cs = rope_table(pos, N, D, theta, &by_pos);
    const int half = D / 2;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *t = cs + (size_t)(by_pos ? pos[n] : n) * half * 2;
        for (int h = 0; h < nh; h++) {
            float *x1 = x + ((size_t)n * nh + h) * D, *x2 = x1 + half;
            for (int i = 0; i < half; i++) {
                const float c = t[2 * i], s = t[2 * i + 1], a = x1[i], b = x2[i];
                if (dir > 0) {
                    x1[i] = a * c - b * s;
                    x2[i] = b * c + a * s;
                } else {
                    x1[i] = a * c + b * s;
                    x2[i] = b * c - a * s;
                }
            }
        }
    }
    free(cs);
}

void cpu_rope_fwd(void *x, const int32_t *pos, int N, int nh, int D, double theta) {
    rope_apply(x, pos, N, nh, D, theta, +1);
}
void cpu_rope_bwd(void *dx, const int32_t *pos, int N, int nh, int D, double theta) {
    rope_apply(dx, pos, N, nh, D, theta, -1);
}
