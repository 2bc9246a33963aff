/* test_ops_cpu.c — the CPU op table against finite differences and naive double-precision references.
 *
 * Gradient checks: random inputs, a random projection R, the scalar L = sum(out * R) accumulated in double over
 * the op's own fp32 forward; every element of every differentiable input is perturbed by +-h (central
 * differences) and the backward's gradient is compared on the max norm:
 *     err = max_i |g_analytic_i - g_fd_i| / max_i |g_fd_i|.
 * Tolerance (GRAD_TOL = 2e-3): with inputs O(1) and h = 1e-2, the truncation error is h^2/6 |L'''| ~ 2e-5 and the
 * rounding error of an fp32 forward is ~ 2^-24 sum|out R| / h ~ 6e-6 x (10..100) <= 6e-4 absolute against
 * gradients of size O(1), so a correct kernel stays below ~1e-3 (observed: 1e-7 .. 5e-5), while a wrong term,
 * a missing factor or a 1% error exceeds it. Forward checks against double references use 1e-5 relative
 * (fp32 rounding over sums of at most ~50 terms), and thread-count / accumulation invariance is checked bit for bit.
 * Prints one line per check; exits 1 if any fails. */
#include "ops.h"
#include "cpu/cpu_impl.h"
#include "util.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAD_TOL 2e-3
#define FWD_TOL 1e-5
#define FD_H 1e-2

static const qf_ops *ops;
static int n_checks, n_fail;

static void report(const char *name, double err, double tol) {
    const int ok = err <= tol; /* NaN fails */
    n_checks++;
    if (!ok) n_fail++;
    printf("%-4s %-66s max err %.3e (tol %.0e)\n", ok ? "ok" : "FAIL", name, err, tol);
}
static void report_bool(const char *name, int ok) {
    n_checks++;
    if (!ok) n_fail++;
    printf("%-4s %s\n", ok ? "ok" : "FAIL", name);
}

/* ---- helpers ------------------------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* xorshift64*, uniform [0, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}
static float *frand(size_t n, double a) { /* uniform (-a, a) */
    float *p = qf_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = (float)((2.0 * urand() - 1.0) * a);
    return p;
}
static float *fdup(const float *src, size_t n) {
    float *p = qf_malloc(n * sizeof(float));
    memcpy(p, src, n * sizeof(float));
    return p;
}
static double dotR(const float *out, const float *R, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)out[i] * R[i];
    return s;
}
/* max|a - b| / max|b| */
static double relerr_fd(const float *a, const double *b, size_t n) {
    double md = 0.0, mb = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = d; /* keeps NaN */
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / (mb > 0.0 ? mb : 1.0);
}
static double relerr_ff(const float *a, const float *b, size_t n) {
    double *bd = qf_malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) bd[i] = b[i];
    double e = relerr_fd(a, bd, n);
    free(bd);
    return e;
}
/* a - b elementwise (the accumulated part of a += gradient) */
static float *vsub(const float *a, const float *b, size_t n) {
    float *d = qf_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) d[i] = a[i] - b[i];
    return d;
}
static double maxabs(const float *a, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs(a[i]) <= m)) m = fabs(a[i]);
    return m;
}

typedef double (*loss_fn)(void *ctx);

/* Central differences of f over every element of x[n], compared with scale * ana... i.e. checks
 * ana == scale * dL/dx. The step actually taken ((float)(x+h) - (float)(x-h)) is used in the quotient. */
static void gradcheck(const char *name, loss_fn f, void *ctx, float *x, size_t n, const float *ana, double scale) {
    double *fd = qf_malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        const float x0 = x[i], xp = (float)(x0 + FD_H), xm = (float)(x0 - FD_H);
        x[i] = xp;
        const double lp = f(ctx);
        x[i] = xm;
        const double lm = f(ctx);
        x[i] = x0;
        fd[i] = scale * (lp - lm) / ((double)xp - (double)xm);
    }
    char buf[160];
    snprintf(buf, sizeof buf, "grad %s (%zu elements, max|g| %.2g)", name, n, maxabs(ana, n));
    report(buf, relerr_fd(ana, fd, n), GRAD_TOL);
    free(fd);
}

/* ---- memory, casts ------------------------------------------------------------------------------------------- */

static void test_memory(void) {
    const size_t n = 1000;
    float *a = ops->alloc(n * sizeof(float));
    int zero = a != NULL;
    for (size_t i = 0; a && i < n; i++) zero &= a[i] == 0.0f;
    report_bool("alloc returns zero-filled memory", zero);
    float *h = frand(n, 1.0), *h2 = qf_malloc(n * sizeof(float));
    float *b = ops->alloc(n * sizeof(float));
    ops->copy_h2d(a, h, n * sizeof(float));
    ops->copy_d2d(b, a, n * sizeof(float));
    ops->sync();
    ops->copy_d2h(h2, b, n * sizeof(float));
    report_bool("copy h2d -> d2d -> d2h round trip is exact", memcmp(h, h2, n * sizeof(float)) == 0);
    ops->act_from_f32(a, h, n);
    memset(h2, 0, n * sizeof(float));
    ops->act_to_f32(h2, a, n);
    report_bool("act_from_f32 / act_to_f32 round trip is exact (act = fp32)",
                ops->act_bytes == 4 && memcmp(h, h2, n * sizeof(float)) == 0);
    ops->zero(b, n * sizeof(float));
    report("zero", maxabs(b, n), 0.0);
    ops->free(a);
    ops->free(b);
    free(h);
    free(h2);
}

/* ---- matmul -------------------------------------------------------------------------------------------------- */

typedef struct {
    float *out, *o0, *x, *w, *b, *R;
    int N, IN, OUT;
} mm_ctx;
static double mm_loss(void *c_) {
    mm_ctx *c = c_;
    memcpy(c->out, c->o0, (size_t)c->N * c->OUT * sizeof(float));
    ops->matmul_fwd(c->out, c->x, c->w, c->b, c->N, c->IN, c->OUT, 1);
    return dotR(c->out, c->R, (size_t)c->N * c->OUT);
}
static void mm_ref(double *y, const float *x, const float *w, const float *b, int N, int IN, int OUT) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < IN; i++) s += (double)x[n * IN + i] * w[o * IN + i];
            y[n * OUT + o] = s;
        }
}

static void test_matmul(void) {
    /* finite differences, odd sizes so every edge tile is used */
    {
        const int N = 5, IN = 7, OUT = 6;
        mm_ctx c = {.N = N, .IN = IN, .OUT = OUT};
        c.x = frand(N * IN, 1), c.w = frand(OUT * IN, 1), c.b = frand(OUT, 1), c.R = frand(N * OUT, 1);
        c.o0 = frand(N * OUT, 1), c.out = qf_malloc(N * OUT * sizeof(float));
        float *dx0 = frand(N * IN, 1), *dw0 = frand(OUT * IN, 1), *db0 = frand(OUT, 1);
        float *dx = fdup(dx0, N * IN), *dw = fdup(dw0, OUT * IN), *db = fdup(db0, OUT);
        ops->matmul_bwd(dx, dw, db, c.R, c.x, c.w, N, IN, OUT, 0); /* dx WRITE over garbage */
        float *gw = vsub(dw, dw0, OUT * IN), *gb = vsub(db, db0, OUT);
        gradcheck("matmul dx (accumulate_dx=0)", mm_loss, &c, c.x, N * IN, dx, 1.0);
        gradcheck("matmul dw (+= onto nonzero dw)", mm_loss, &c, c.w, OUT * IN, gw, 1.0);
        gradcheck("matmul db (+= onto nonzero db)", mm_loss, &c, c.b, OUT, gb, 1.0);
        float *dxa = fdup(dx0, N * IN);
        ops->matmul_bwd(dxa, NULL, NULL, c.R, c.x, c.w, N, IN, OUT, 1);
        float *gx = vsub(dxa, dx0, N * IN);
        gradcheck("matmul dx (accumulate_dx=1, dw=db=NULL)", mm_loss, &c, c.x, N * IN, gx, 1.0);
        /* dx = NULL: dw, db alone, identical to the full call */
        float *dw2 = fdup(dw0, OUT * IN), *db2 = fdup(db0, OUT);
        ops->matmul_bwd(NULL, dw2, db2, c.R, c.x, c.w, N, IN, OUT, 0);
        report_bool("matmul_bwd with dx=NULL gives the same dw, db bit for bit",
                    !memcmp(dw2, dw, OUT * IN * sizeof(float)) && !memcmp(db2, db, OUT * sizeof(float)));
        free(c.x), free(c.w), free(c.b), free(c.R), free(c.o0), free(c.out), free(dx0), free(dw0), free(db0);
        free(dx), free(dw), free(db), free(gw), free(gb), free(dxa), free(gx), free(dw2), free(db2);
    }
    /* against a double reference at sizes spanning several register / cache tiles */
    {
        const int N = 70, IN = 45, OUT = 37;
        float *x = frand(N * IN, 1), *w = frand(OUT * IN, 1), *b = frand(OUT, 1), *o0 = frand(N * OUT, 1);
        float *g = frand(N * OUT, 1);
        double *yr = qf_malloc(N * OUT * sizeof(double));
        float *y = qf_malloc(N * OUT * sizeof(float));
        ops->matmul_fwd(y, x, w, b, N, IN, OUT, 0);
        mm_ref(yr, x, w, b, N, IN, OUT);
        report("matmul_fwd vs double reference (70x45 -> 37, bias)", relerr_fd(y, yr, N * OUT), FWD_TOL);
        memcpy(y, o0, N * OUT * sizeof(float));
        ops->matmul_fwd(y, x, w, NULL, N, IN, OUT, 1);
        mm_ref(yr, x, w, NULL, N, IN, OUT);
        for (int i = 0; i < N * OUT; i++) yr[i] += o0[i];
        report("matmul_fwd accumulate=1, no bias vs double reference", relerr_fd(y, yr, N * OUT), FWD_TOL);
        { /* the residual form: out = res + x W^T, the values of copy + accumulate bit for bit, res apart or in place */
            float *y2 = qf_malloc(N * OUT * sizeof(float)), *y3 = fdup(o0, N * OUT);
            ops->matmul_fwd_add(y2, x, w, o0, N, IN, OUT);
            ops->matmul_fwd_add(y3, x, w, y3, N, IN, OUT);
            report_bool("matmul_fwd_add (res apart, and res == out) equals copy + matmul_fwd accumulate bit for bit",
                        !memcmp(y2, y, N * OUT * sizeof(float)) && !memcmp(y3, y, N * OUT * sizeof(float)));
            free(y2), free(y3);
        }
        /* backward vs double: dx = g W, dw = g^T x, db = colsum g */
        float *dx = qf_malloc(N * IN * sizeof(float)), *dw = qf_calloc(OUT * IN, sizeof(float));
        float *db = qf_calloc(OUT, sizeof(float));
        ops->matmul_bwd(dx, dw, db, g, x, w, N, IN, OUT, 0);
        double *rx = qf_calloc(N * IN, sizeof(double)), *rw = qf_calloc(OUT * IN, sizeof(double));
        double *rb = qf_calloc(OUT, sizeof(double));
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OUT; o++) {
                rb[o] += g[n * OUT + o];
                for (int i = 0; i < IN; i++) {
                    rx[n * IN + i] += (double)g[n * OUT + o] * w[o * IN + i];
                    rw[o * IN + i] += (double)g[n * OUT + o] * x[n * IN + i];
                }
            }
        report("matmul_bwd dx vs double reference", relerr_fd(dx, rx, N * IN), FWD_TOL);
        report("matmul_bwd dw vs double reference", relerr_fd(dw, rw, OUT * IN), FWD_TOL);
        report("matmul_bwd db vs double reference", relerr_fd(db, rb, OUT), FWD_TOL);
        /* two micro-batches accumulated one after the other == one call on all rows, bit for bit */
        float *dwa = qf_calloc(OUT * IN, sizeof(float)), *dba = qf_calloc(OUT, sizeof(float));
        ops->matmul_bwd(NULL, dwa, dba, g, x, w, 29, IN, OUT, 0);
        ops->matmul_bwd(NULL, dwa, dba, g + 29 * OUT, x + 29 * IN, w, N - 29, IN, OUT, 0);
        report_bool("matmul_bwd dw, db: micro-batches 29 + 41 rows == 70 rows, bit for bit",
                    !memcmp(dwa, dw, OUT * IN * sizeof(float)) && !memcmp(dba, db, OUT * sizeof(float)));
        free(x), free(w), free(b), free(o0), free(g), free(yr), free(y), free(dx), free(dw), free(db);
        free(rx), free(rw), free(rb), free(dwa), free(dba);
    }
    /* contracted dimensions longer than one 256-long k-chunk: fwd (K = IN), dx (K = OUT), dw (K = N) */
    for (int shape = 0; shape < 2; shape++) {
        const int N = shape ? 5 : 260, IN = shape ? 20 : 300, OUT = shape ? 300 : 20;
        float *x = frand(N * IN, 1), *w = frand(OUT * IN, 1), *g = frand(N * OUT, 1);
        float *y = qf_malloc(N * OUT * sizeof(float)), *dx = qf_malloc(N * IN * sizeof(float));
        float *dw = qf_calloc(OUT * IN, sizeof(float));
        double *yr = qf_malloc(N * OUT * sizeof(double)), *rx = qf_calloc(N * IN, sizeof(double));
        double *rw = qf_calloc(OUT * IN, sizeof(double));
        ops->matmul_fwd(y, x, w, NULL, N, IN, OUT, 0);
        ops->matmul_bwd(dx, dw, NULL, g, x, w, N, IN, OUT, 0);
        mm_ref(yr, x, w, NULL, N, IN, OUT);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OUT; o++)
                for (int i = 0; i < IN; i++) {
                    rx[n * IN + i] += (double)g[n * OUT + o] * w[o * IN + i];
                    rw[o * IN + i] += (double)g[n * OUT + o] * x[n * IN + i];
                }
        char buf[120];
        /* sums of up to 300 fp32 products: error ~ sqrt(300) ulp-scale, well below 1e-5 of the max */
        snprintf(buf, sizeof buf, "matmul N=%d IN=%d OUT=%d (k > one chunk): fwd, dx, dw vs double", N, IN, OUT);
        report(buf, fmax(relerr_fd(y, yr, N * OUT), fmax(relerr_fd(dx, rx, N * IN), relerr_fd(dw, rw, OUT * IN))),
               FWD_TOL);
        free(x), free(w), free(g), free(y), free(dx), free(dw), free(yr), free(rx), free(rw);
    }
}

/* Up to 64 rows (decoding: matmul_cpu.c gemv_rows, b read in 8-row blocks transposed in registers) give the bits
 * of the same rows inside a larger call (gemm_packed, 70 rows), with bias, with accumulate=1 onto nonzero outputs
 * and through matmul_fwd_add, on shapes whose IN and OUT are not multiples of 8 (the tails), on 1 and 2 threads: a
 * sequence decoded alone or in a batch of any size gets the same logits. */
static void test_matmul_rows(void) {
    static const int shapes[][2] = {{37, 29}, {300, 64}, {896, 131}, {8, 8}, {5, 3}};
    static const int rows[] = {1, 2, 3, 4, 5, 7, 8, 13, 33, 64};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int IN = shapes[si][0], OUT = shapes[si][1], NB = 70;
        float *x = frand((size_t)NB * IN, 1), *w = frand((size_t)OUT * IN, 1), *b = frand(OUT, 1);
        float *o0 = frand((size_t)NB * OUT, 1);
        float *yf = qf_malloc((size_t)NB * OUT * sizeof(float)), *ya = fdup(o0, (size_t)NB * OUT);
        float *y = qf_malloc((size_t)NB * OUT * sizeof(float));
        double *yr = qf_malloc((size_t)OUT * sizeof(double));
        ops->matmul_fwd(yf, x, w, b, NB, IN, OUT, 0);
        ops->matmul_fwd(ya, x, w, NULL, NB, IN, OUT, 1);
        int same = 1;
        for (int th = 1; th <= 2; th++) {
            omp_set_num_threads(th);
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
                const int M = rows[ri];
                const int r0s[3] = {0, 1, NB - M};
                for (int t = 0; t < 3; t++) {
                    const int r0 = r0s[t];
                    ops->matmul_fwd(y, x + (size_t)r0 * IN, w, b, M, IN, OUT, 0);
                    same &= !memcmp(y, yf + (size_t)r0 * OUT, (size_t)M * OUT * sizeof(float));
                    memcpy(y, o0 + (size_t)r0 * OUT, (size_t)M * OUT * sizeof(float));
                    ops->matmul_fwd(y, x + (size_t)r0 * IN, w, NULL, M, IN, OUT, 1);
                    same &= !memcmp(y, ya + (size_t)r0 * OUT, (size_t)M * OUT * sizeof(float));
                    ops->matmul_fwd_add(y, x + (size_t)r0 * IN, w, o0 + (size_t)r0 * OUT, M, IN, OUT);
                    same &= !memcmp(y, ya + (size_t)r0 * OUT, (size_t)M * OUT * sizeof(float));
                }
            }
        }
        omp_set_num_threads(2);
        ops->matmul_fwd(y, x, w, b, 1, IN, OUT, 0);
        mm_ref(yr, x, w, b, 1, IN, OUT);
        char buf[120];
        snprintf(buf, sizeof buf, "matmul_fwd 1-64 rows == those rows of a 70-row call, bit for bit (%d -> %d)", IN, OUT);
        report_bool(buf, same);
        snprintf(buf, sizeof buf, "matmul_fwd one row (%d -> %d, bias) vs double reference", IN, OUT);
        report(buf, relerr_fd(y, yr, OUT), FWD_TOL);
        free(x), free(w), free(b), free(o0), free(yf), free(ya), free(y), free(yr);
    }
}

/* The three GEMM shapes on every instruction set this CPU has (matmul_cpu.c: 0 the default build's vectors, 1 AVX2
 * and the few-row path, 2 AVX-512 8-row tiles) give the default's bits: row counts around the tile sizes (4, 8,
 * the 64-row cache tile and the 64-row limit of the few-row path), widths and contractions with tails, bias,
 * accumulation onto nonzero outputs, contractions longer than one 256-long chunk. */
static void test_gemm_isa(void) {
    static const int shapes[][3] = {{1, 37, 29}, {3, 16, 300}, {8, 131, 96}, {13, 64, 300}, {64, 29, 37},
                                    {70, 40, 520}, {130, 33, 64}};
    const int best = cpu_gemm_best_isa();
    for (int isa = 1; isa <= best; isa++) {
        int same = 1;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
            float *a = frand((size_t)M * K, 1), *b = frand((size_t)N * K, 1), *bias = frand(N, 1);
            float *at = frand((size_t)K * M, 1), *bt = frand((size_t)K * N, 1), *o0 = frand((size_t)M * N, 1);
            float *r = fdup(o0, (size_t)M * N), *y = fdup(o0, (size_t)M * N);
            for (int acc = 0; acc < 2; acc++) { /* nt: out = a b^T (+ bias) (+ out) */
                memcpy(r, o0, (size_t)M * N * 4), memcpy(y, o0, (size_t)M * N * 4);
                cpu_gemm_nt_isa(0, r, a, b, acc ? NULL : bias, M, N, K, acc);
                cpu_gemm_nt_isa(isa, y, a, b, acc ? NULL : bias, M, N, K, acc);
                same &= !memcmp(r, y, (size_t)M * N * 4);
                /* nn: out = a bt (+ out), bt [K, N] */
                memcpy(r, o0, (size_t)M * N * 4), memcpy(y, o0, (size_t)M * N * 4);
                cpu_gemm_nn_isa(0, r, a, bt, M, N, K, acc);
                cpu_gemm_nn_isa(isa, y, a, bt, M, N, K, acc);
                same &= !memcmp(r, y, (size_t)M * N * 4);
            }
            /* tn: out += at^T bt, at [K, M] */
            memcpy(r, o0, (size_t)M * N * 4), memcpy(y, o0, (size_t)M * N * 4);
            cpu_gemm_tn_isa(0, r, at, bt, M, N, K);
            cpu_gemm_tn_isa(isa, y, at, bt, M, N, K);
            same &= !memcmp(r, y, (size_t)M * N * 4);
            free(a), free(b), free(bias), free(at), free(bt), free(o0), free(r), free(y);
        }
        char buf[120];
        snprintf(buf, sizeof buf, "gemm nt, nn, tn on instruction set %d == the default vectors, bit for bit (7 shapes)", isa);
        report_bool(buf, same);
    }
    if (best == 0) printf("skip gemm instruction sets: this CPU has neither AVX2 nor AVX-512 (only the default)\n");
}

/* ---- rmsnorm ------------------------------------------------------------------------------------------------- */

typedef struct {
    float *out, *rstd, *x, *w, *R;
    int N, C;
    float eps;
} rms_ctx;
static double rms_loss(void *c_) {
    rms_ctx *c = c_;
    ops->rmsnorm_fwd(c->out, c->rstd, c->x, c->w, c->N, c->C, c->eps);
    return dotR(c->out, c->R, (size_t)c->N * c->C);
}

static void test_rmsnorm(void) {
    const int N = 4, C = 9;
    rms_ctx c = {.N = N, .C = C, .eps = 1e-6f};
    c.x = frand(N * C, 1), c.w = frand(C, 1), c.R = frand(N * C, 1);
    for (int i = 0; i < C; i++) c.w[i] += 1.0f;
    c.out = qf_malloc(N * C * sizeof(float)), c.rstd = qf_malloc(N * sizeof(float));
    rms_loss(&c);
    double *ref = qf_malloc(N * C * sizeof(double));
    double rerr = 0.0;
    for (int n = 0; n < N; n++) {
        double ss = 0.0;
        for (int i = 0; i < C; i++) ss += (double)c.x[n * C + i] * c.x[n * C + i];
        const double r = 1.0 / sqrt(ss / C + c.eps);
        rerr = fmax(rerr, fabs(c.rstd[n] - r) / r);
        for (int i = 0; i < C; i++) ref[n * C + i] = c.w[i] * c.x[n * C + i] * r;
    }
    report("rmsnorm_fwd out vs double reference", relerr_fd(c.out, ref, N * C), FWD_TOL);
    report("rmsnorm_fwd rstd vs double reference (relative)", rerr, FWD_TOL);
    float *dx0 = frand(N * C, 1), *dw0 = frand(C, 1);
    float *dx = fdup(dx0, N * C), *dw = fdup(dw0, C);
    ops->rmsnorm_bwd(dx, dw, c.R, c.x, c.w, c.rstd, N, C, 0);
    float *gw = vsub(dw, dw0, C);
    gradcheck("rmsnorm dx (accumulate=0, over garbage)", rms_loss, &c, c.x, N * C, dx, 1.0);
    gradcheck("rmsnorm dw (+=)", rms_loss, &c, c.w, C, gw, 1.0);
    float *dxa = fdup(dx0, N * C), *dw2 = fdup(dw0, C);
    rms_loss(&c); /* restore rstd of the unperturbed x */
    ops->rmsnorm_bwd(dxa, dw2, c.R, c.x, c.w, c.rstd, N, C, 1);
    float *gx = vsub(dxa, dx0, N * C);
    gradcheck("rmsnorm dx (accumulate=1: residual stream +=)", rms_loss, &c, c.x, N * C, gx, 1.0);
    free(c.x), free(c.w), free(c.R), free(c.out), free(c.rstd), free(ref), free(dx0), free(dw0), free(dx), free(dw);
    free(gw), free(dxa), free(dw2), free(gx);
}

/* ---- rope ---------------------------------------------------------------------------------------------------- */

typedef struct {
    float *x, *y, *R;
    const int32_t *pos;
    int N, nh, D;
    double theta;
} rope_ctx;
static double rope_loss(void *c_) {
    rope_ctx *c = c_;
    const size_t n = (size_t)c->N * c->nh * c->D;
    memcpy(c->y, c->x, n * sizeof(float));
    ops->rope_fwd(c->y, c->pos, c->N, c->nh, c->D, c->theta);
    return dotR(c->y, c->R, n);
}

static void test_rope(void) {
    /* two rows of 7 tokens; row 1 packs two documents, so positions restart at 0 */
    static const int32_t pos[14] = {0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 0, 1, 2};
    const int N = 14, nh = 3, D = 8;
    const size_t n = (size_t)N * nh * D;
    rope_ctx c = {.pos = pos, .N = N, .nh = nh, .D = D, .theta = 10000.0};
    c.x = frand(n, 1), c.y = qf_malloc(n * sizeof(float)), c.R = frand(n, 1);
    rope_loss(&c);
    double *ref = qf_malloc(n * sizeof(double));
    for (int t = 0; t < N; t++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < D / 2; i++) {
                const double a = pos[t] * pow(c.theta, -2.0 * i / D);
                const float *xr = c.x + ((size_t)t * nh + h) * D;
                ref[((size_t)t * nh + h) * D + i] = xr[i] * cos(a) - xr[i + D / 2] * sin(a);
                ref[((size_t)t * nh + h) * D + i + D / 2] = xr[i + D / 2] * cos(a) + xr[i] * sin(a);
            }
    report("rope_fwd vs double reference (rotate-half, theta 1e4)", relerr_fd(c.y, ref, n), FWD_TOL);
    float *back = fdup(c.y, n);
    ops->rope_bwd(back, pos, N, nh, D, c.theta);
    report("rope_bwd(rope_fwd(x)) == x (inverse rotation)", relerr_ff(back, c.x, n), FWD_TOL);
    float *g = fdup(c.R, n);
    ops->rope_bwd(g, pos, N, nh, D, c.theta);
    gradcheck("rope dx", rope_loss, &c, c.x, n, g, 1.0);
    c.theta = 1e6; /* Qwen3 base */
    memcpy(g, c.R, n * sizeof(float));
    ops->rope_bwd(g, pos, N, nh, D, c.theta);
    gradcheck("rope dx (theta 1e6)", rope_loss, &c, c.x, n, g, 1.0);
    free(c.x), free(c.y), free(c.R), free(ref), free(back), free(g);
}

/* ---- attention ----------------------------------------------------------------------------------------------- */

typedef struct {
    float *q, *k, *v, *out, *lse, *R;
    const int32_t *seg;
    int B, T, H, KV, D;
} att_ctx;
static double att_loss(void *c_) {
    att_ctx *c = c_;
    ops->attention_fwd(c->out, c->lse, c->q, c->k, c->v, c->seg, c->B, c->T, c->H, c->KV, c->D);
    return dotR(c->out, c->R, (size_t)c->B * c->T * c->H * c->D);
}

/* naive: materialise the T x T scores of each (b, h) with the causal + segment mask, softmax in double */
static void att_ref(double *out, double *lse, const float *q, const float *k, const float *v, const int32_t *seg, int B,
                    int T, int H, int KV, int D) {
    double *S = qf_malloc((size_t)T * T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / (H / KV);
            for (int t = 0; t < T; t++)
                for (int s = 0; s < T; s++) {
                    const int allowed = s <= t && s >= seg[b * T + t];
                    double d = 0.0;
                    for (int i = 0; i < D; i++)
                        d += (double)q[((b * T + t) * H + h) * D + i] * k[((b * T + s) * KV + g) * D + i];
                    S[t * T + s] = allowed ? d / sqrt((double)D) : -INFINITY;
                }
            for (int t = 0; t < T; t++) {
                double m = -INFINITY, l = 0.0;
                for (int s = 0; s < T; s++) m = fmax(m, S[t * T + s]);
                for (int s = 0; s < T; s++) l += exp(S[t * T + s] - m);
                lse[(b * H + h) * T + t] = m + log(l);
                for (int i = 0; i < D; i++) {
                    double o = 0.0;
                    for (int s = 0; s < T; s++) o += exp(S[t * T + s] - m) / l * v[((b * T + s) * KV + g) * D + i];
                    out[((b * T + t) * H + h) * D + i] = o;
                }
            }
        }
    free(S);
}

/* c (seg and sizes set) gets random q, k, v and R, and out and lse of their forward; ro and rl the naive ones */
static void att_setup(att_ctx *c, double **ro, double **rl) {
    const size_t nq = (size_t)c->B * c->T * c->H * c->D, nk = (size_t)c->B * c->T * c->KV * c->D,
                 nl = (size_t)c->B * c->H * c->T;
    c->q = frand(nq, 1.5), c->k = frand(nk, 1.5), c->v = frand(nk, 1), c->R = frand(nq, 1);
    c->out = qf_malloc(nq * sizeof(float)), c->lse = qf_malloc(nl * sizeof(float));
    att_loss(c);
    *ro = qf_malloc(nq * sizeof(double)), *rl = qf_malloc(nl * sizeof(double));
    att_ref(*ro, *rl, c->q, c->k, c->v, c->seg, c->B, c->T, c->H, c->KV, c->D);
}

static void test_attention(void) {
    /* row 0: one document of 7 tokens; row 1: documents [0,4) and [4,7) */
    static const int32_t seg[14] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4};
    const int B = 2, T = 7, H = 4, KV = 2, D = 8;
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D, nl = (size_t)B * H * T;
    att_ctx c = {.seg = seg, .B = B, .T = T, .H = H, .KV = KV, .D = D};
    double *ro, *rl;
    att_setup(&c, &ro, &rl);
    report("attention_fwd out vs naive masked softmax (GQA 4/2, 2 docs)", relerr_fd(c.out, ro, nq), FWD_TOL);
    report("attention_fwd lse vs naive", relerr_fd(c.lse, rl, nl), FWD_TOL);
    /* the first token of a document sees only itself: out = its v exactly */
    int first_ok = 1;
    for (int h = 0; h < H; h++)
        first_ok &= !memcmp(c.out + ((size_t)(1 * T + 4) * H + h) * D, c.v + ((size_t)(1 * T + 4) * KV + h / 2) * D,
                            D * sizeof(float));
    report_bool("attention: first token of the 2nd document outputs exactly its own v", first_ok);

    float *dq = frand(nq, 9), *dk = frand(nk, 9), *dv = frand(nk, 9); /* garbage: outputs are WRITE */
    ops->attention_bwd(dq, dk, dv, c.R, c.out, c.lse, c.q, c.k, c.v, seg, B, T, H, KV, D);
    gradcheck("attention dq", att_loss, &c, c.q, nq, dq, 1.0);
    gradcheck("attention dk (sum over the 2 query heads of a kv head)", att_loss, &c, c.k, nk, dk, 1.0);
    gradcheck("attention dv", att_loss, &c, c.v, nk, dv, 1.0);

    /* segment isolation: perturbing q, k, v of row 1's first document leaves the second's outputs unchanged */
    att_loss(&c);
    float *out0 = fdup(c.out, nq), *lse0 = fdup(c.lse, nl);
    float *q2 = fdup(c.q, nq), *k2 = fdup(c.k, nk), *v2 = fdup(c.v, nk);
    for (int t = 0; t < 4; t++) {
        for (int i = 0; i < H * D; i++) q2[(size_t)(T + t) * H * D + i] += 0.7f;
        for (int i = 0; i < KV * D; i++) k2[(size_t)(T + t) * KV * D + i] -= 0.9f, v2[(size_t)(T + t) * KV * D + i] += 3.0f;
    }
    float *out2 = qf_malloc(nq * sizeof(float)), *lse2 = qf_malloc(nl * sizeof(float));
    ops->attention_fwd(out2, lse2, q2, k2, v2, seg, B, T, H, KV, D);
    int same = !memcmp(out2, out0, (size_t)T * H * D * sizeof(float)); /* row 0 untouched */
    same &= !memcmp(out2 + (size_t)(T + 4) * H * D, out0 + (size_t)(T + 4) * H * D, (size_t)3 * H * D * sizeof(float));
    for (int h = 0; h < H; h++)
        same &= !memcmp(lse2 + (size_t)(H + h) * T + 4, lse0 + (size_t)(H + h) * T + 4, 3 * sizeof(float));
    int changed = memcmp(out2 + (size_t)T * H * D, out0 + (size_t)T * H * D, (size_t)4 * H * D * sizeof(float)) != 0;
    report_bool("attention: 2nd document's out/lse bitwise unchanged when the 1st document's q,k,v change", same);
    report_bool("attention: (control) the 1st document's outputs did change", changed);
    /* and gradients do not leak: dout only on the 2nd document gives exactly zero dq, dk, dv on the 1st */
    float *g2 = qf_calloc(nq, sizeof(float));
    memcpy(g2 + (size_t)(T + 4) * H * D, c.R + (size_t)(T + 4) * H * D, (size_t)3 * H * D * sizeof(float));
    ops->attention_bwd(dq, dk, dv, g2, c.out, c.lse, c.q, c.k, c.v, seg, B, T, H, KV, D);
    double leak = maxabs(dq, (size_t)(T + 4) * H * D) + maxabs(dk, (size_t)(T + 4) * KV * D) +
                  maxabs(dv, (size_t)(T + 4) * KV * D);
    report("attention: grads on row 0 and 1st document from dout on the 2nd only", leak, 0.0);
    report_bool("attention: (control) 2nd document's dk is nonzero",
                maxabs(dk + (size_t)(T + 4) * KV * D, (size_t)3 * KV * D) > 0.0);

    free(c.q), free(c.k), free(c.v), free(c.R), free(c.out), free(c.lse), free(ro), free(rl), free(dq), free(dk);
    free(dv), free(out0), free(lse0), free(q2), free(k2), free(v2), free(out2), free(lse2), free(g2);
}

/* head_dim not a multiple of 8 (the dot products' 8-lane main loop plus a tail), one kv head for 3 query heads */
static void test_attention_odd(void) {
    static const int32_t seg[6] = {0, 0, 2, 2, 2, 2};
    const int B = 1, T = 6, H = 3, KV = 1, D = 12;
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D, nl = (size_t)B * H * T;
    att_ctx c = {.seg = seg, .B = B, .T = T, .H = H, .KV = KV, .D = D};
    double *ro, *rl;
    att_setup(&c, &ro, &rl);
    report("attention_fwd D=12, H=3, KV=1: out and lse vs naive",
           fmax(relerr_fd(c.out, ro, nq), relerr_fd(c.lse, rl, nl)), FWD_TOL);
    float *dq = frand(nq, 9), *dk = frand(nk, 9), *dv = frand(nk, 9);
    ops->attention_bwd(dq, dk, dv, c.R, c.out, c.lse, c.q, c.k, c.v, seg, B, T, H, KV, D);
    gradcheck("attention D=12 KV=1 dq", att_loss, &c, c.q, nq, dq, 1.0);
    gradcheck("attention D=12 KV=1 dk", att_loss, &c, c.k, nk, dk, 1.0);
    gradcheck("attention D=12 KV=1 dv", att_loss, &c, c.v, nk, dv, 1.0);
    free(c.q), free(c.k), free(c.v), free(c.R), free(c.out), free(c.lse), free(ro), free(rl), free(dq), free(dk);
    free(dv);
}

/* ---- swiglu -------------------------------------------------------------------------------------------------- */

typedef struct {
    float *gate, *up, *out, *R;
    int N, F;
} sw_ctx;
static double sw_loss(void *c_) {
    sw_ctx *c = c_;
    ops->swiglu_fwd(c->out, c->gate, c->up, c->N, c->F);
    return dotR(c->out, c->R, (size_t)c->N * c->F);
}

static void test_swiglu(void) {
    const int N = 3, F = 10, n = N * F;
    sw_ctx c = {.N = N, .F = F};
    c.gate = frand(n, 3), c.up = frand(n, 1), c.R = frand(n, 1), c.out = qf_malloc(n * sizeof(float));
    sw_loss(&c);
    double *ref = qf_malloc(n * sizeof(double));
    for (int i = 0; i < n; i++) ref[i] = c.gate[i] / (1.0 + exp(-(double)c.gate[i])) * c.up[i];
    report("swiglu_fwd vs double reference", relerr_fd(c.out, ref, n), FWD_TOL);
    float *dg = frand(n, 9), *du = frand(n, 9);
    ops->swiglu_bwd(dg, du, c.R, c.gate, c.up, N, F);
    gradcheck("swiglu dgate", sw_loss, &c, c.gate, n, dg, 1.0);
    gradcheck("swiglu dup", sw_loss, &c, c.up, n, du, 1.0);
    free(c.gate), free(c.up), free(c.R), free(c.out), free(ref), free(dg), free(du);
}

/* ---- embedding ----------------------------------------------------------------------------------------------- */

typedef struct {
    float *wte, *out, *R;
    const int32_t *tok;
    int N, C;
} emb_ctx;
static double emb_loss(void *c_) {
    emb_ctx *c = c_;
    ops->embedding_fwd(c->out, c->tok, c->wte, c->N, c->C);
    return dotR(c->out, c->R, (size_t)c->N * c->C);
}

static void test_embedding(void) {
    static const int32_t tok[8] = {1, 3, 1, 0, 3, 3, 4, 1}; /* 2 never used, 1 and 3 repeated */
    const int N = 8, C = 6, V = 5;
    emb_ctx c = {.tok = tok, .N = N, .C = C};
    c.wte = frand(V * C, 1), c.R = frand(N * C, 1), c.out = qf_malloc(N * C * sizeof(float));
    emb_loss(&c);
    int ok = 1;
    for (int n = 0; n < N; n++) ok &= !memcmp(c.out + n * C, c.wte + tok[n] * C, C * sizeof(float));
    report_bool("embedding_fwd copies the token rows exactly", ok);
    float *d0 = frand(V * C, 1), *d = fdup(d0, V * C);
    ops->embedding_bwd(d, c.R, tok, N, C, V);
    report_bool("embedding_bwd leaves unused token 2's row bitwise untouched",
                !memcmp(d + 2 * C, d0 + 2 * C, C * sizeof(float)));
    float *g = vsub(d, d0, V * C);
    gradcheck("embedding dwte (+=, repeated tokens)", emb_loss, &c, c.wte, V * C, g, 1.0);
    free(c.wte), free(c.R), free(c.out), free(d0), free(d), free(g);
}

/* ---- classifier ---------------------------------------------------------------------------------------------- */

typedef struct {
    float *x, *w;
    const int32_t *tgt;
    int N, C, V;
} cls_ctx;
static double cls_loss(void *c_) {
    cls_ctx *c = c_;
    double l = 0.0;
    ops->classifier(&l, NULL, NULL, c->x, c->w, c->tgt, c->N, c->C, c->V, 1.0f);
    return l;
}

/* naive: full logits, log-softmax and its gradient in double */
static double cls_ref(double *dx, double *dw, const float *x, const float *w, const int32_t *tgt, int N, int C, int V,
                      double gs) {
    double *lg = qf_malloc(V * sizeof(double)), loss = 0.0;
    memset(dx, 0, (size_t)N * C * sizeof(double));
    memset(dw, 0, (size_t)V * C * sizeof(double));
    for (int n = 0; n < N; n++) {
        if (tgt[n] < 0) continue;
        double m = -INFINITY, l = 0.0;
        for (int j = 0; j < V; j++) {
            lg[j] = 0.0;
            for (int i = 0; i < C; i++) lg[j] += (double)x[n * C + i] * w[j * C + i];
            m = fmax(m, lg[j]);
        }
        for (int j = 0; j < V; j++) l += exp(lg[j] - m);
        loss += m + log(l) - lg[tgt[n]];
        for (int j = 0; j < V; j++) {
            const double d = gs * (exp(lg[j] - m) / l - (j == tgt[n]));
            for (int i = 0; i < C; i++) {
                dx[n * C + i] += d * w[j * C + i];
                dw[j * C + i] += d * x[n * C + i];
            }
        }
    }
    free(lg);
    return loss;
}

static void test_classifier(void) {
    /* finite differences of the loss sum */
    {
        static const int32_t tgt[9] = {3, -1, 0, 10, 3, -1, 7, 2, 5};
        const int N = 9, C = 8, V = 11;
        const float gs = 1.0f / 7.0f; /* 7 trained tokens */
        cls_ctx c = {.tgt = tgt, .N = N, .C = C, .V = V};
        c.x = frand(N * C, 1), c.w = frand(V * C, 1);
        float *dx = frand(N * C, 9), *dw0 = frand(V * C, 1), *dw = fdup(dw0, V * C);
        double loss = 0.0;
        ops->classifier(&loss, dx, dw, c.x, c.w, tgt, N, C, V, gs);
        double *rdx = qf_malloc(N * C * sizeof(double)), *rdw = qf_malloc(V * C * sizeof(double));
        const double rl = cls_ref(rdx, rdw, c.x, c.w, tgt, N, C, V, gs);
        report("classifier loss_sum vs naive logits + log-softmax (relative)", fabs(loss - rl) / rl, FWD_TOL);
        report("classifier dx rows of ignored targets (-1) are zero", maxabs(dx + 1 * C, C) + maxabs(dx + 5 * C, C),
               0.0);
        float *gw = vsub(dw, dw0, V * C);
        gradcheck("classifier dx (= grad_scale * dL/dx, 2 ignored targets)", cls_loss, &c, c.x, N * C, dx, gs);
        gradcheck("classifier dw (+= grad_scale * dL/dW)", cls_loss, &c, c.w, V * C, gw, gs);
        /* eval: dx = NULL computes the same loss and ignores dw */
        float *dw2 = fdup(dw0, V * C);
        double l2 = -1.0;
        ops->classifier(&l2, NULL, dw2, c.x, c.w, tgt, N, C, V, gs);
        report_bool("classifier eval (dx=NULL): same loss bit for bit, dw untouched",
                    l2 == loss && !memcmp(dw2, dw0, V * C * sizeof(float)));
        free(c.x), free(c.w), free(dx), free(dw0), free(dw), free(rdx), free(rdw), free(gw), free(dw2);
    }
    /* several 64-token chunks against the naive reference */
    {
        const int N = 150, C = 16, V = 37;
        int32_t *tgt = qf_malloc(N * sizeof(int32_t));
        int ntr = 0;
        for (int n = 0; n < N; n++) {
            tgt[n] = urand() < 0.2 ? -1 : (int32_t)(urand() * V);
            ntr += tgt[n] >= 0;
        }
        const float gs = 1.0f / (float)ntr;
        float *x = frand(N * C, 1), *w = frand(V * C, 1);
        float *dx = qf_malloc(N * C * sizeof(float)), *dw = qf_calloc(V * C, sizeof(float));
        double loss = 0.0;
        ops->classifier(&loss, dx, dw, x, w, tgt, N, C, V, gs);
        double *rdx = qf_malloc(N * C * sizeof(double)), *rdw = qf_malloc(V * C * sizeof(double));
        const double rl = cls_ref(rdx, rdw, x, w, tgt, N, C, V, gs);
        report("classifier 150 tokens (3 chunks) loss vs naive (relative)", fabs(loss - rl) / rl, FWD_TOL);
        report("classifier 150 tokens dx vs naive", relerr_fd(dx, rdx, N * C), FWD_TOL);
        report("classifier 150 tokens dw vs naive", relerr_fd(dw, rdw, V * C), FWD_TOL);
        free(tgt), free(x), free(w), free(dx), free(dw), free(rdx), free(rdw);
    }
}

/* ---- adamw --------------------------------------------------------------------------------------------------- */

static void test_adamw(void) {
    const size_t n = 257;
    /* hyper-parameters as a deck / torch holds them (Python floats = doubles) */
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1, gscale = 0.5;
    float *p = frand(n, 1), *m = qf_calloc(n, sizeof(float)), *v = qf_calloc(n, sizeof(float));
    float *pact = qf_malloc(n * sizeof(float));
    double *rp = qf_malloc(n * sizeof(double)), *rm = qf_calloc(n, sizeof(double)), *rv = qf_calloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) rp[i] = p[i];
    float *p0 = fdup(p, n);
    for (int t = 1; t <= 3; t++) {
        float *g = frand(n, 2.0);
        g[0] = 0.0f; /* a zero gradient: pure decay and momentum */
        ops->adamw(p, pact, g, m, v, n, (float)gscale, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t);
        /* torch.optim.AdamW, single-tensor path, in double */
        const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (size_t i = 0; i < n; i++) {
            const double gi = gscale * g[i];
            rp[i] *= 1.0 - lr * wd;
            rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
            rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
            rp[i] -= lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
        }
        free(g);
    }
    double upd = 0.0, perr = 0.0;
    for (size_t i = 0; i < n; i++) {
        upd = fmax(upd, fabs(rp[i] - p0[i]));
        perr = fmax(perr, fabs(p[i] - rp[i]));
    }
    /* m, v: fp32 rounding of a few operations (~1e-7); p: its own fp32 ulp (6e-8) against updates of ~3e-2 */
    report("adamw 3 steps (wd 0.1, gscale 0.5): m vs double torch formula", relerr_fd(m, rm, n), 1e-6);
    report("adamw 3 steps: v vs double torch formula", relerr_fd(v, rv, n), 1e-6);
    report("adamw 3 steps: p error relative to the total update", perr / upd, 1e-4);
    report_bool("adamw p_act receives the updated params", !memcmp(pact, p, n * sizeof(float)));
    free(p), free(m), free(v), free(pact), free(rp), free(rm), free(rv), free(p0);
}

/* ---- flat-buffer reductions ---------------------------------------------------------------------------------- */

static void test_reductions(void) {
    const size_t n = 100003;
    float *g = frand(n, 3);
    double ref = 0.0;
    for (size_t i = 0; i < n; i++) ref += (double)g[i] * g[i];
    report("sumsq vs sequential double sum (relative)", fabs(ops->sumsq(g, n) - ref) / ref, 1e-12);
    report("sumsq of 0 elements", fabs(ops->sumsq(g, 0)), 0.0);
    double st[2] = {-1.0, -1.0};
    ops->sumsq_to(st, g, n);
    ops->sumsq_to(st + 1, g, 0);
    report_bool("sumsq_to == sumsq bit for bit", st[0] == ops->sumsq(g, n));
    report_bool("sumsq_to of 0 elements writes 0", st[1] == 0.0);
    float *y = frand(n, 1), *y0 = fdup(y, n), *s = fdup(g, n);
    ops->add_inplace(y, g, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= y[i] == y0[i] + g[i];
    report_bool("add_inplace y += x exactly", ok);
    ops->scale(s, 0.37f, n);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= s[i] == g[i] * 0.37f;
    report_bool("scale g *= s exactly", ok);
    ok = ops->nonfinite(g, n) == 0;
    g[n - 1] = NAN;
    ok &= ops->nonfinite(g, n) == 1;
    g[n - 1] = 1.0f, g[0] = INFINITY;
    ok &= ops->nonfinite(g, n) == 1;
    g[0] = 1.0f, g[n / 2] = -INFINITY;
    ok &= ops->nonfinite(g, n) == 1 && ops->nonfinite(g, n / 2) == 0;
    report_bool("nonfinite: 0 when finite, 1 for NaN / +inf / -inf at first, middle, last", ok);
    free(g), free(y), free(y0), free(s);
}

/* ---- thread-count invariance --------------------------------------------------------------------------------- */

typedef struct {
    float *mm_out, *mm_dx, *mm_dw, *mm_db, *att_out, *att_lse, *att_dq, *att_dk, *att_dv, *cls_dx, *cls_dw, *rms_dx,
        *rms_dw, *emb_dw, *rope;
    double cls_loss, sumsq;
} det_res;
enum { DM = 270, DIN = 300, DOUT = 37, DB = 2, DT = 33, DH = 4, DKV = 2, DD = 8, DN = 150, DC = 16, DV = 37 };

static void det_run(det_res *r, int nthreads, float *const *in, const int32_t *seg, const int32_t *tgt,
                    const int32_t *tok, const int32_t *pos) {
    omp_set_num_threads(nthreads);
    const size_t nq = (size_t)DB * DT * DH * DD, nk = (size_t)DB * DT * DKV * DD;
    r->mm_out = qf_malloc(DM * DOUT * 4), r->mm_dx = qf_malloc(DM * DIN * 4);
    r->mm_dw = qf_calloc(DOUT * DIN, 4), r->mm_db = qf_calloc(DOUT, 4);
    ops->matmul_fwd(r->mm_out, in[0], in[1], in[2], DM, DIN, DOUT, 0);
    ops->matmul_bwd(r->mm_dx, r->mm_dw, r->mm_db, in[3], in[0], in[1], DM, DIN, DOUT, 0);
    r->att_out = qf_malloc(nq * 4), r->att_lse = qf_malloc(DB * DH * DT * 4);
    r->att_dq = qf_malloc(nq * 4), r->att_dk = qf_malloc(nk * 4), r->att_dv = qf_malloc(nk * 4);
    ops->attention_fwd(r->att_out, r->att_lse, in[4], in[5], in[6], seg, DB, DT, DH, DKV, DD);
    ops->attention_bwd(r->att_dq, r->att_dk, r->att_dv, in[7], r->att_out, r->att_lse, in[4], in[5], in[6], seg, DB,
                       DT, DH, DKV, DD);
    r->cls_dx = qf_malloc(DN * DC * 4), r->cls_dw = qf_calloc(DV * DC, 4);
    ops->classifier(&r->cls_loss, r->cls_dx, r->cls_dw, in[8], in[9], tgt, DN, DC, DV, 0.01f);
    float *rs = qf_malloc(DN * 4), *y = qf_malloc(DN * DC * 4);
    r->rms_dx = qf_malloc(DN * DC * 4), r->rms_dw = qf_calloc(DC, 4);
    ops->rmsnorm_fwd(y, rs, in[8], in[10], DN, DC, 1e-6f);
    ops->rmsnorm_bwd(r->rms_dx, r->rms_dw, in[11], in[8], in[10], rs, DN, DC, 0);
    r->emb_dw = qf_calloc(DV * DC, 4);
    ops->embedding_bwd(r->emb_dw, in[11], tok, DN, DC, DV);
    r->rope = fdup(in[4], nq);
    ops->rope_fwd(r->rope, pos, DB * DT, DH, DD, 1e4);
    r->sumsq = ops->sumsq(in[12], 200000);
    free(rs), free(y);
}
static int det_same(const det_res *a, const det_res *b) {
    const size_t nq = (size_t)DB * DT * DH * DD, nk = (size_t)DB * DT * DKV * DD;
#define SAME(f, n) (!memcmp(a->f, b->f, (size_t)(n) * 4))
    return SAME(mm_out, DM * DOUT) && SAME(mm_dx, DM * DIN) && SAME(mm_dw, DOUT * DIN) && SAME(mm_db, DOUT) &&
           SAME(att_out, nq) && SAME(att_lse, DB * DH * DT) && SAME(att_dq, nq) && SAME(att_dk, nk) &&
           SAME(att_dv, nk) && SAME(cls_dx, DN * DC) && SAME(cls_dw, DV * DC) && SAME(rms_dx, DN * DC) &&
           SAME(rms_dw, DC) && SAME(emb_dw, DV * DC) && SAME(rope, nq) && a->cls_loss == b->cls_loss &&
           a->sumsq == b->sumsq;
#undef SAME
}
static void det_free(det_res *r) {
    free(r->mm_out), free(r->mm_dx), free(r->mm_dw), free(r->mm_db), free(r->att_out), free(r->att_lse);
    free(r->att_dq), free(r->att_dk), free(r->att_dv), free(r->cls_dx), free(r->cls_dw), free(r->rms_dx);
    free(r->rms_dw), free(r->emb_dw), free(r->rope);
}

static void test_determinism(void) {
    const size_t nq = (size_t)DB * DT * DH * DD, nk = (size_t)DB * DT * DKV * DD;
    float *in[13] = {frand(DM * DIN, 1), frand(DOUT * DIN, 1), frand(DOUT, 1), frand(DM * DOUT, 1), frand(nq, 1.5),
                     frand(nk, 1.5), frand(nk, 1), frand(nq, 1), frand(DN * DC, 1), frand(DV * DC, 1), frand(DC, 1),
                     frand(DN * DC, 1), frand(200000, 1)};
    int32_t seg[DB * DT], pos[DB * DT], tgt[DN], tok[DN];
    for (int t = 0; t < DT; t++) { /* row 0 one document; row 1 documents starting at 0, 10, 25 */
        seg[t] = 0;
        seg[DT + t] = t < 10 ? 0 : t < 25 ? 10 : 25;
    }
    for (int i = 0; i < DB * DT; i++) pos[i] = i % DT - seg[i];
    for (int n = 0; n < DN; n++) tgt[n] = n % 7 == 3 ? -1 : (int32_t)(urand() * DV);
    for (int n = 0; n < DN; n++) tok[n] = n % 5 == 0 ? 7 : (int32_t)(urand() * DV); /* token 7 often repeated */
    const int saved = omp_get_max_threads();
    det_res r1, r2, r3;
    det_run(&r1, 1, in, seg, tgt, tok, pos);
    det_run(&r2, 2, in, seg, tgt, tok, pos);
    det_run(&r3, 3, in, seg, tgt, tok, pos);
    report_bool("1, 2 and 3 threads give bitwise identical results (matmul, attention, classifier, rmsnorm, "
                "embedding, rope, sumsq)",
                det_same(&r1, &r2) && det_same(&r1, &r3));
    omp_set_num_threads(saved);
    det_free(&r1), det_free(&r2), det_free(&r3);
    for (int i = 0; i < 13; i++) free(in[i]);
}

/* The offload AdamW (qf_cpu_adamw_act: act gradients widened, parameters rounded, in one threaded pass, in place)
 * equals act_to_f32 + the table's adamw + rounding to act, bit for bit, for fp32, bf16 and fp16 act. */
static void test_adamw_act(void) {
    const size_t n = 5003; /* several blocks and a ragged tail */
    const int dts[3] = {QF_DT_F32, QF_DT_BF16, QF_DT_F16};
    for (int di = 0; di < 3; di++) {
        int dt = dts[di];
        size_t ab = dt == QF_DT_F32 ? 4 : 2;
        float *p[2], *m[2], *v[2], *g32 = malloc(n * 4);
        unsigned char *buf = malloc(n * ab), *ref = malloc(n * ab);
        for (int c = 0; c < 2; c++) {
            p[c] = malloc(n * 4), m[c] = malloc(n * 4), v[c] = malloc(n * 4);
            for (size_t i = 0; i < n; i++) {
                p[c][i] = (float)sin(0.37 * (double)i);
                m[c][i] = (float)sin(0.05 * (double)i) * 0.01f;
                v[c][i] = (float)(1e-4 * (1.0 + sin(0.3 * (double)i)));
            }
        }
        int same = 1;
        for (int step = 1; step <= 3; step++) {
            for (size_t i = 0; i < n; i++) { /* gradients in act, also tiny (fp16 subnormal) and large values */
                float g = (float)cos(0.11 * (double)i + step) * (i % 7 == 0 ? 3e-6f : i % 11 == 0 ? 300.0f : 0.1f);
                if (dt == QF_DT_F32) ((float *)buf)[i] = g;
                else if (dt == QF_DT_BF16) ((uint16_t *)buf)[i] = qf_f32_to_bf16(g);
                else ((uint16_t *)buf)[i] = qf_f32_to_f16(g);
            }
            /* reference: widen, the table's adamw into fp32 params, round */
            for (size_t i = 0; i < n; i++)
                g32[i] = dt == QF_DT_F32 ? ((float *)buf)[i]
                         : dt == QF_DT_BF16 ? qf_bf16_to_f32(((uint16_t *)buf)[i])
                                             : qf_f16_to_f32(((uint16_t *)buf)[i]);
            qf_ops_cpu()->adamw(p[0], NULL, g32, m[0], v[0], n, 0.5f, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, step);
            for (size_t i = 0; i < n; i++) {
                if (dt == QF_DT_F32) ((float *)ref)[i] = p[0][i];
                else if (dt == QF_DT_BF16) ((uint16_t *)ref)[i] = qf_f32_to_bf16(p[0][i]);
                else ((uint16_t *)ref)[i] = qf_f32_to_f16(p[0][i]);
            }
            qf_cpu_adamw_act(p[1], buf, buf, dt, m[1], v[1], n, 0.5f, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, step, 3);
            same &= !memcmp(p[0], p[1], n * 4) && !memcmp(m[0], m[1], n * 4) && !memcmp(v[0], v[1], n * 4) &&
                    !memcmp(ref, buf, n * ab);
        }
        char name[96];
        snprintf(name, sizeof name, "offload adamw (%s act, in place, 3 threads) == widen + adamw + round, bitwise",
                 dt == QF_DT_F32 ? "fp32" : dt == QF_DT_BF16 ? "bf16" : "fp16");
        report_bool(name, same);
        for (int c = 0; c < 2; c++) free(p[c]), free(m[c]), free(v[c]);
        free(g32), free(buf), free(ref);
    }
}

/* The offload AdamW's slice variants (baseline C conversions, AVX2 + F16C, AVX-512F: whichever this CPU has) give
 * the same bits for every act type, fp16 subnormals, overflow to inf and rounding ties included */
static void test_adamw_act_isa(void) {
    const size_t n = 2053;
    const int dts[3] = {QF_DT_F32, QF_DT_BF16, QF_DT_F16};
    const adamw_consts k = {0.5f, 0.999f, 0.9f, 0.1f, 0.999f, 0.001f, 1e-3f, 0.03f, 1e-8f};
    const int best = cpu_have_f16c() ? cpu_adamw_best_isa() : 0;
    int same = 1, changed = 0;
    for (int di = 0; di < 3; di++) {
        const int dt = dts[di];
        const size_t ab = dt == QF_DT_F32 ? 4 : 2;
        float *st[3][3];
        unsigned char *buf[3];
        for (int isa = 0; isa <= best; isa++) {
            for (int a = 0; a < 3; a++) st[isa][a] = malloc(n * 4);
            buf[isa] = malloc(n * ab);
            for (size_t i = 0; i < n; i++) {
                st[isa][0][i] = (float)sin(0.37 * (double)i) * (i % 13 == 0 ? 7e4f : 1.0f); /* some overflow fp16 */
                st[isa][1][i] = (float)sin(0.05 * (double)i) * 0.01f;
                st[isa][2][i] = (float)(1e-4 * (1.0 + sin(0.3 * (double)i)));
            }
        }
        for (int step = 1; step <= 3; step++)
            for (int isa = 0; isa <= best; isa++) {
                for (size_t i = 0; i < n; i++) {
                    float gv = (float)cos(0.11 * (double)i + step) * (i % 7 == 0 ? 3e-6f : i % 11 == 0 ? 300.0f : 0.1f);
                    if (dt == QF_DT_F32) ((float *)buf[isa])[i] = gv;
                    else ((uint16_t *)buf[isa])[i] = dt == QF_DT_BF16 ? qf_f32_to_bf16(gv) : qf_f32_to_f16(gv);
                }
                cpu_adamw_act_variant(isa, st[isa][0], buf[isa], buf[isa], dt, st[isa][1], st[isa][2], n, &k, 2);
            }
        for (int isa = 1; isa <= best; isa++) {
            for (int a = 0; a < 3; a++) same &= !memcmp(st[isa][a], st[0][a], n * 4);
            same &= !memcmp(buf[isa], buf[0], n * ab);
        }
        changed |= st[0][0][1] != (float)sin(0.37);
        for (int isa = 0; isa <= best; isa++) {
            for (int a = 0; a < 3; a++) free(st[isa][a]);
            free(buf[isa]);
        }
    }
    char name[112];
    snprintf(name, sizeof name, "offload adamw slices (fp32/bf16/fp16 act) up to %s: bitwise equal",
             best == 2 ? "AVX-512F" : best == 1 ? "AVX2+F16C" : "baseline only");
    report_bool(name, same && changed);
}

/* AdamW's SIMD variants (baseline, AVX2, AVX-512F: whichever this CPU has) give bitwise the same result */
static void test_adamw_isa(void) {
    const size_t n = 1003; /* not a multiple of any vector width */
    adamw_consts k = {0.5f, 0.999f, 0.9f, 0.1f, 0.999f, 0.001f, 1e-3f, 0.03f, 1e-8f};
    float *ref[4], *out[4];
    for (int a = 0; a < 4; a++) {
        ref[a] = malloc(n * sizeof(float));
        out[a] = malloc(n * sizeof(float));
    }
    for (size_t i = 0; i < n; i++) {
        ref[0][i] = (float)sin(0.37 * (double)i);        /* p */
        ref[1][i] = (float)cos(0.11 * (double)i) * 0.1f; /* g */
        ref[2][i] = (float)sin(0.05 * (double)i) * 0.01f; /* m */
        ref[3][i] = (float)(1e-4 * (1.0 + sin(0.3 * (double)i)));  /* v */
    }
    float *pa0 = malloc(n * sizeof(float)), *pa = malloc(n * sizeof(float)), *p0 = malloc(n * sizeof(float));
    float *m0 = malloc(n * sizeof(float)), *v0 = malloc(n * sizeof(float));
    int best = cpu_adamw_best_isa(), same = 1;
    for (int isa = 0; isa <= best; isa++) { /* every variant from the same inputs, 3 steps */
        for (int a = 0; a < 4; a++) memcpy(out[a], ref[a], n * sizeof(float));
        float *pp = isa == 0 ? pa0 : pa;
        for (int step = 0; step < 3; step++) cpu_adamw_variant(isa, out[0], pp, out[1], out[2], out[3], n, &k);
        if (isa == 0) {
            memcpy(p0, out[0], n * sizeof(float));
            memcpy(m0, out[2], n * sizeof(float));
            memcpy(v0, out[3], n * sizeof(float));
        } else {
            same &= !memcmp(out[0], p0, n * sizeof(float)) && !memcmp(pa, pa0, n * sizeof(float)) &&
                    !memcmp(out[2], m0, n * sizeof(float)) && !memcmp(out[3], v0, n * sizeof(float));
        }
    }
    same &= memcmp(p0, ref[0], n * sizeof(float)) != 0; /* and the update did change the parameters */
    free(p0);
    free(m0);
    free(v0);
    n_checks++;
    if (!same) n_fail++;
    printf("adamw SIMD variants up to %s: %s\n", best == 2 ? "AVX-512F" : best == 1 ? "AVX2" : "baseline only",
           same ? "bitwise equal" : "FAIL: differ");
    for (int a = 0; a < 4; a++) {
        free(ref[a]);
        free(out[a]);
    }
    free(pa0);
    free(pa);
}

int main(void) {
    ops = qf_ops_cpu();
    printf("test_ops_cpu: backend %s, %d OpenMP threads\n", ops->name, omp_get_max_threads());
    test_memory();
    test_matmul();
    test_matmul_rows();
    test_gemm_isa();
    test_rmsnorm();
    test_rope();
    test_attention();
    test_attention_odd();
    test_swiglu();
    test_embedding();
    test_classifier();
    test_adamw();
    test_adamw_isa();
    test_adamw_act();
    test_adamw_act_isa();
    test_reductions();
    test_determinism();
    printf("test_ops_cpu: %d checks, %d failed\n", n_checks, n_fail);
    return n_fail ? 1 : 0;
}
