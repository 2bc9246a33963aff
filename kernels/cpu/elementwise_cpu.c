/* elementwise_cpu.c — embedding, SwiGLU, residual add, flat-buffer reductions and the (identity) act casts. */
#include "cpu_impl.h"
#include "ops.h"
#include "util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- embedding ---------------------------------------------------------------------------------------------- */

void cpu_embedding_fwd(void *out_, const int32_t *tokens, const void *wte_, int N, int C) {
    float *out = out_;
    const float *wte = wte_;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        QF_CHECK(tokens[n] >= 0);
        memcpy(out + (size_t)n * C, wte + (size_t)tokens[n] * C, (size_t)C * sizeof(float));
    }
}

/* Deterministic scatter-add: threads own column blocks; each dwte element receives its tokens in order n. */
void cpu_embedding_bwd(void *dwte_, const void *dout_, const int32_t *tokens, int N, int C, int V) {
    float *dwte = dwte_;
    const float *dout = dout_;
    for (int n = 0; n < N; n++) QF_CHECK(tokens[n] >= 0 && tokens[n] < V);
    const int ncb = (C + 63) / 64;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < ncb; cb++) {
        const int c0 = cb * 64, c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int n = 0; n < N; n++) {
            float *d = dwte + (size_t)tokens[n] * C;
            const float *g = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

/* ---- SwiGLU: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)) ---------------------------------------------- */

void cpu_swiglu_fwd(void *out_, const void *gate_, const void *up_, int N, int F) {
    float *out = out_;
    const float *gate = gate_, *up = up_;
    const size_t n = (size_t)N * F;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* d silu/dg = sig * (1 + g (1 - sig)) */
void cpu_swiglu_bwd(void *dgate_, void *dup_, const void *dout_, const void *gate_, const void *up_, int N, int F) {
    float *dgate = dgate_, *dup = dup_;
    const float *dout = dout_, *gate = gate_, *up = up_;
    const size_t n = (size_t)N * F;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float g = gate[i], u = up[i], d = dout[i];
        const float e1 = 1.0f + expf(-g);
        const float sig = 1.0f / e1, silu = g / e1; /* silu exactly as in the forward */
        dgate[i] = d * u * (sig * (1.0f + g * (1.0f - sig)));
        dup[i] = d * silu;
    }
}

/* ---- flat buffers ------------------------------------------------------------------------------------------- */

void cpu_add_inplace(void *y_, const void *x_, size_t n) {
    float *y = y_;
    const float *x = x_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void cpu_scale(void *g_, float s, size_t n) {
    float *g = g_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) g[i] *= s;
}

/* Fixed-size chunks, each summed in order in double, then the partials summed in chunk order: the result does
 * not depend on the thread count. */
#define SUMSQ_CHUNK 16384
double cpu_sumsq(const void *g_, size_t n) {
    const float *g = g_;
    if (n == 0) return 0.0;
    const size_t nch = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double *part = qf_malloc(nch * sizeof(double));
#pragma omp parallel for schedule(static)
    for (size_t ch = 0; ch < nch; ch++) {
        const size_t i0 = ch * SUMSQ_CHUNK, i1 = i0 + SUMSQ_CHUNK < n ? i0 + SUMSQ_CHUNK : n;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) s += (double)g[i] * g[i];
        part[ch] = s;
    }
    double s = 0.0;
    for (size_t ch = 0; ch < nch; ch++) s += part[ch];
    free(part);
    return s;
}

void cpu_sumsq_to(double *out, const void *g, size_t n) { *out = cpu_sumsq(g, n); }

int cpu_nonfinite(const void *g_, size_t n) {
    const float *g = g_;
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (size_t i = 0; i < n; i++) bad |= !isfinite(g[i]);
    return bad;
}

void cpu_act_from_f32(void *dst, const float *src, size_t n) {
    if (n && dst != src) memmove(dst, src, n * sizeof(float));
}
void cpu_act_to_f32(float *dst, const void *src, size_t n) {
    if (n && dst != src) memmove(dst, src, n * sizeof(float));
}

/* generate/sample.c's greedy scan, row by row: strictly larger wins, so the first maximum; the log-softmax of the
 * pick as serve's host path forms it (the maximum subtracted, exps summed in double in index order) */
void cpu_argmax_rows(int32_t *out, float *logprob, const void *x_, int n, int V) {
    const float *x = x_;
    for (int r = 0; r < n; r++) {
        const float *row = x + (size_t)r * V;
        int best = 0;
        for (int i = 1; i < V; i++)
            if (row[i] > row[best]) best = i;
        out[r] = best;
        if (logprob) {
            float mx = -INFINITY;
            for (int i = 0; i < V; i++) mx = row[i] > mx ? row[i] : mx;
            double sum = 0;
            for (int i = 0; i < V; i++) sum += expf(row[i] - mx);
            logprob[r] = (float)((double)(row[best] - mx) - log(sum));
        }
    }
}
