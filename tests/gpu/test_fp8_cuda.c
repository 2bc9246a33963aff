/* test_fp8_cuda.c — the fp8 linear layers (qf_ops_cuda_fp8, kernels/cuda/matmul_fp8.cu) against the bf16 and fp32
 * paths, at Qwen2.5-7B shapes (4096 tokens; C = 3584, F = 18944, KV*D = 512) and small ones. First the layers the
 * table runs in bf16 by design (narrower than QF_FP8_MIN_DIM, or not multiples of 16): bit for bit the bf16 table's;
 * then, with the policy's minimum lowered to 0 (qf_cuda_fp8_set_min_dim), every shape below in fp8.
 *
 * Inputs (rounded to bf16, as the model hands them over): activations x ~ N(0, 1) with 1% of the channels x 10
 * (the outlier channels of real hidden states: they set a tensorwise amax), weights W ~ N(0, 0.02) (the init of
 * the presets), output gradients dy ~ N(0, 1) x 3e-6 (a mean-reduced loss over 4096 tokens: unscaled, most of
 * them would be fp8 zeros). For each recipe and shape, two checks per output (y, dx, dW), on the relative Frobenius
 * error ||a - ref|| / ||ref||:
 *   semantics   against the fp32 GEMM (cuda-f32 table, no TF32) of the operands quantized on the host exactly as
 *               the recipe says (amax, scale = FMAX / amax, power of two for rowwise, fp32 x * s rounded to nearest
 *               even and saturated, per tensor / per row / per column as each GEMM takes them), dequantized: what
 *               remains is the bf16 rounding of the output (RMS ~ 2^-9 relative) and fp32 accumulation in cuBLASLt
 *               (cuBLASLt's error, ~1e-3): tolerance 1e-2 for the backward; the forward runs with fast fp8
 *               accumulation (Hopper keeps ~14 bits of the running sum between promotions; DeepSeek-V3 reports up
 *               to 2% relative at K = 4096), tolerance 2e-2. A wrong scale, a transposed operand or a
 *               mis-rounded fp8 value is an error of order 1 here.
 *   accuracy    against the fp32 GEMM of the bf16 inputs (what the bf16 table approximates, to ~0.3%): what fp8
 *               costs. e4m3 (3 mantissa bits) rounds a value with an RMS relative error of about 2^-3 / sqrt(12) x
 *               sqrt(1/2) = 2.6%, e5m2 (2 bits) twice that; a product of two quantized operands adds them in
 *               quadrature and the K-term sum keeps that relative size: e4m3 x e4m3 ~ 3.6%, e5m2 x e4m3 ~ 5.7%.
 *               Tolerances with margin: 5% for e4m3 x e4m3 GEMMs without fast accumulation (the rowwise
 *               backward), 6% for the forward (fast accumulation on top), 8% for the tensorwise backward (e5m2
 *               gradients). The bf16 table's own error is printed beside it.
 * Also: a shape that fp8 cannot take (not multiples of 16) runs the bf16 table's GEMMs bit for bit; the bias and
 * accumulate (beta = 1) variants; the fp8/bf16 GEMM counters. Weights named by (parameter id, version) through the
 * table's fp8_weight (test_weight_reuse): the same pair twice gives bit-identical results to an untagged call and
 * takes no amax pass the second time (qf_cuda_fp8_stats counts them); a changed W under a bumped version gets its
 * own scale (bit for bit the untagged result), while a changed W under the old version (a missed bump) keeps the
 * stale scale, which the test sees; with an amax history (test_weight_history) a new version takes its scale from
 * the history (no pass), saturates what exceeds it (the host model of that cast, to the forward's tolerance), and
 * comes back to the weight's own scale bit for bit once the history holds only the new amax. fp8_same_x
 * (test_same_x, gate/up's shared ln2): the second call takes the first's fp8 x (no amax pass, no cast), bit for bit
 * the results without the promise; a promise the table cannot keep (another x buffer, the other kind of call) is
 * ignored. fp8.save_inputs (test_saved_x): the forward's saved q(x)^T feeds the wgrad, bit for bit the results
 * without it and one amax pass fewer; a request naming another x buffer, or with saving off, is ignored.
 * `test_fp8_cuda --bench` then times the cast kernels (amax, cast, cast recording the amax, cast + transpose in
 * both layouts, transposed cast: GB/s of bytes read + written at 7B's operand shapes) and fwd + bwd of the 7B
 * shapes in the bf16 and fp8 tables (quantization included) and prints TFLOP/s.
 * Exit: 0 passed, 1 a check failed, 77 skipped (no GPU, or compute capability < 8.9: no fp8 tensor cores).
 * The rowwise recipe takes cuBLASLt's outer-vector fp8 kernels where it has them, else (cuBLASLt 13.1 on sm_90) a
 * unit-scale fp8 GEMM whose output a kernel scales by the row and column scales (powers of two: exact); the same
 * checks either way, and a refusal of rowwise where tensorwise runs is a failure. */
#define QF_GPU_TEST_SEED 0x5DEECE66Dull
#include "qf_gpu_test.h"
#include <cuda_runtime_api.h>
#include <time.h>

static const qf_ops *g16, *g32;

static double gauss(void) {
    double u = urand(), v = urand();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}
static double relfro(const float *a, const float *ref, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = (double)a[i] - (double)ref[i];
        d += e * e;
        r += (double)ref[i] * ref[i];
    }
    return d != d ? NAN : sqrt(d / (r > 0 ? r : 1));
}

/* ---- host model of the quantizer (kernels/cuda/fp8_quant.cu) ---------------------------------------------------- */
typedef struct {
    int mbits, emin;
    float max;
} fp8fmt;
static const fp8fmt E4M3 = {3, -6, 448.0f}, E5M2 = {2, -14, 57344.0f};
/* v rounded to the format: nearest even, saturated to +-max (__NV_SATFINITE) */
static float fp8_round(float v, fp8fmt f) {
    if (v != v) return v;
    const float a = fabsf(v);
    if (a >= f.max) return copysignf(f.max, v);
    int e;
    frexpf(a, &e); /* a = m 2^e, m in [0.5, 1): the leading bit is 2^(e-1) */
    int ex = e - 1 < f.emin ? f.emin : e - 1;
    const double step = ldexp(1.0, ex - f.mbits);
    double r = nearbyint((double)a / step) * step; /* exact: a / step is a power-of-two scaling */
    if (r > f.max) r = f.max;
    return copysignf((float)r, v);
}
static float fp8_scale(float amax, fp8fmt f, int pow2) {
    float s = f.max / fmaxf(amax, 1e-12f);
    if (pow2) s = exp2f(floorf(log2f(s)));
    return s;
}
/* x[R, C] quantized and dequantized: mode 0 one scale, 1 one per row, 2 one per column */
static float *fake_quant(const float *x, int R, int C, int mode, fp8fmt f, int pow2) {
    float *q = qf_malloc((size_t)R * C * sizeof(float));
    const int ns = mode == 0 ? 1 : mode == 1 ? R : C;
    float *am = calloc((size_t)ns, sizeof(float));
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            const int k = mode == 0 ? 0 : mode == 1 ? r : c;
            const float a = fabsf(x[(size_t)r * C + c]);
            if (a > am[k]) am[k] = a;
        }
    for (int k = 0; k < ns; k++) am[k] = fp8_scale(am[k], f, pow2); /* now the scales */
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            const float s = am[mode == 0 ? 0 : mode == 1 ? r : c];
            const float v = x[(size_t)r * C + c] * s; /* fp32 product, as on the device */
            q[(size_t)r * C + c] = fp8_round(v, f) * (1.0f / s);
        }
    free(am);
    return q;
}

/* fp32 GEMMs of the reference table on host operands: y = x W^T (+ b), dx = dy W, dW = dy^T x */
static void ref_gemms(const float *x, const float *w, const float *b, const float *dy_x, const float *w_x,
                      const float *dy_w, const float *x_w, int N, int IN, int OUT, float *y, float *dx, float *dw) {
    const qf_ops *g = g32;
    if (y) {
        void *dX = up(g, x, (size_t)N * IN), *dW = up(g, w, (size_t)OUT * IN), *dB = b ? up(g, b, OUT) : NULL;
        void *dY = g->alloc((size_t)N * OUT * 4);
        g->matmul_fwd(dY, dX, dW, dB, N, IN, OUT, 0);
        down(g, y, dY, (size_t)N * OUT);
        g->free(dX), g->free(dW), g->free(dY);
        if (dB) g->free(dB);
    }
    if (dx) { /* dgrad operands: dy_x, w_x */
        void *dG = up(g, dy_x, (size_t)N * OUT), *dW = up(g, w_x, (size_t)OUT * IN);
        void *dX = g->alloc((size_t)N * IN * 4);
        g->matmul_bwd(dX, NULL, NULL, dG, NULL, dW, N, IN, OUT, 0);
        down(g, dx, dX, (size_t)N * IN);
        g->free(dG), g->free(dW), g->free(dX);
    }
    if (dw) { /* wgrad operands: dy_w, x_w */
        void *dG = up(g, dy_w, (size_t)N * OUT), *dX = up(g, x_w, (size_t)N * IN);
        void *dWg = g->alloc((size_t)OUT * IN * 4); /* zero-filled: dW += */
        g->matmul_bwd(NULL, dWg, NULL, dG, dX, NULL, N, IN, OUT, 0);
        down(g, dw, dWg, (size_t)OUT * IN);
        g->free(dG), g->free(dX), g->free(dWg);
    }
}

/* one table's y, dx, dW (+ db) on bf16 copies of the inputs */
static void run_table(const qf_ops *g, const float *x, const float *w, const float *b, const float *dy, int N, int IN,
                      int OUT, float *y, float *dx, float *dw) {
    void *dX = up(g, x, (size_t)N * IN), *dW = up(g, w, (size_t)OUT * IN), *dB = b ? up(g, b, OUT) : NULL;
    void *dG = up(g, dy, (size_t)N * OUT);
    void *dY = g->alloc((size_t)N * OUT * 2), *ddX = g->alloc((size_t)N * IN * 2),
         *ddW = g->alloc((size_t)OUT * IN * 2);
    QF_CHECK(dY && ddX && ddW);
    g->matmul_fwd(dY, dX, dW, dB, N, IN, OUT, 0);
    g->matmul_bwd(ddX, ddW, NULL, dG, dX, dW, N, IN, OUT, 0);
    down(g, y, dY, (size_t)N * OUT);
    down(g, dx, ddX, (size_t)N * IN);
    down(g, dw, ddW, (size_t)OUT * IN);
    g->free(dX), g->free(dW), g->free(dG), g->free(dY), g->free(ddX), g->free(ddW);
    if (dB) g->free(dB);
}

static float *bf16_randn(size_t n, double sd, int outlier_cols, int C) {
    float *p = qf_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        double v = sd * gauss();
        if (outlier_cols && (i % (size_t)C) % 100 == 7) v *= 10.0; /* 1% of the channels */
        p[i] = bfr((float)v);
    }
    return p;
}

static void report(const char *tab, const char *name, double err, double tol) {
    char label[64];
    snprintf(label, sizeof label, "%-17s", tab);
    qf_gpu_report(label, 46, name, err, tol);
}

/* recipe 0 tensorwise, 1 rowwise */
static void test_shape(const qf_ops *g8, int recipe, int N, int IN, int OUT, int with_bias) {
    const size_t nx = (size_t)N * IN, nw = (size_t)OUT * IN, ny = (size_t)N * OUT;
    float *x = bf16_randn(nx, 1.0, 1, IN), *w = bf16_randn(nw, 0.02, 0, IN), *dy = bf16_randn(ny, 3e-6, 0, OUT);
    float *b = with_bias ? bf16_randn((size_t)OUT, 0.5, 0, OUT) : NULL;
    float *y8 = qf_malloc(ny * 4), *dx8 = qf_malloc(nx * 4), *dw8 = qf_malloc(nw * 4);
    float *y16 = qf_malloc(ny * 4), *dx16 = qf_malloc(nx * 4), *dw16 = qf_malloc(nw * 4);
    float *yr = qf_malloc(ny * 4), *dxr = qf_malloc(nx * 4), *dwr = qf_malloc(nw * 4);
    float *ye = qf_malloc(ny * 4), *dxe = qf_malloc(nx * 4), *dwe = qf_malloc(nw * 4);
    uint64_t c0[2], c1[2];
    qf_cuda_fp8_counts(c0);
    run_table(g8, x, w, b, dy, N, IN, OUT, y8, dx8, dw8);
    qf_cuda_fp8_counts(c1);
    run_table(g16, x, w, b, dy, N, IN, OUT, y16, dx16, dw16);
    ref_gemms(x, w, b, dy, w, dy, x, N, IN, OUT, yr, dxr, dwr);
    const int tw = recipe == 0, pow2 = !tw;
    const fp8fmt fg = tw ? E5M2 : E4M3;
    if (tw) {
        float *xq = fake_quant(x, N, IN, 0, E4M3, 0), *wq = fake_quant(w, OUT, IN, 0, E4M3, 0);
        float *gq = fake_quant(dy, N, OUT, 0, fg, 0);
        ref_gemms(xq, wq, b, gq, wq, gq, xq, N, IN, OUT, ye, dxe, dwe);
        free(xq), free(wq), free(gq);
    } else {
        float *xr_ = fake_quant(x, N, IN, 1, E4M3, pow2), *xc = fake_quant(x, N, IN, 2, E4M3, pow2);
        float *wr = fake_quant(w, OUT, IN, 1, E4M3, pow2), *wc = fake_quant(w, OUT, IN, 2, E4M3, pow2);
        float *gr = fake_quant(dy, N, OUT, 1, fg, pow2), *gc = fake_quant(dy, N, OUT, 2, fg, pow2);
        ref_gemms(xr_, wr, b, gr, wc, gc, xc, N, IN, OUT, ye, dxe, dwe);
        free(xr_), free(xc), free(wr), free(wc), free(gr), free(gc);
    }
    const char *tab = g8->name;
    const double tol_f = 0.06, tol_b = tw ? 0.08 : 0.05, tol_sem_f = 2e-2, tol_sem = 1e-2;
    const char *bias = with_bias ? " +bias" : "";
    report(tab, check_name("fwd   %dx%d->%d%s vs quantized fp32 (semantics)", N, IN, OUT, bias), relfro(y8, ye, ny),
           tol_sem_f);
    report(tab, check_name("dgrad %dx%d->%d vs quantized fp32 (semantics)", N, IN, OUT), relfro(dx8, dxe, nx), tol_sem);
    report(tab, check_name("wgrad %dx%d->%d vs quantized fp32 (semantics)", N, IN, OUT), relfro(dw8, dwe, nw), tol_sem);
    printf("     %-17s bf16 table vs fp32: fwd %.2e, dgrad %.2e, wgrad %.2e\n", "", relfro(y16, yr, ny),
           relfro(dx16, dxr, nx), relfro(dw16, dwr, nw));
    report(tab, check_name("fwd   %dx%d->%d%s vs fp32 (accuracy)", N, IN, OUT, bias), relfro(y8, yr, ny), tol_f);
    report(tab, check_name("dgrad %dx%d->%d vs fp32 (accuracy)", N, IN, OUT), relfro(dx8, dxr, nx), tol_b);
    report(tab, check_name("wgrad %dx%d->%d vs fp32 (accuracy)", N, IN, OUT), relfro(dw8, dwr, nw), tol_b);
    qf_gpu_report_bool(tab,
                       check_name("%dx%d->%d: all 3 GEMMs ran in fp8 (counters +%llu fp8, +%llu bf16)", N, IN, OUT,
                                  (unsigned long long)(c1[0] - c0[0]), (unsigned long long)(c1[1] - c0[1])),
                       c1[0] - c0[0] == 3 && c1[1] == c0[1]);
    free(x), free(w), free(dy), free(b);
    free(y8), free(dx8), free(dw8), free(y16), free(dx16), free(dw16), free(yr), free(dxr), free(dwr);
    free(ye), free(dxe), free(dwe);
}

/* accumulate = 1 (the o/down projections add into the residual; dx accumulates over q/k/v and gate/up; dW += over
 * micro-batches): the fp8 table's result minus the prefilled value is its accumulate = 0 result (to bf16 rounding
 * of the sum) */
static void test_accumulate(const qf_ops *g8, int N, int IN, int OUT) {
    const size_t nx = (size_t)N * IN, nw = (size_t)OUT * IN, ny = (size_t)N * OUT;
    float *x = bf16_randn(nx, 1.0, 1, IN), *w = bf16_randn(nw, 0.02, 0, IN), *dy = bf16_randn(ny, 1e-3, 0, OUT);
    float *y0 = bf16_randn(ny, 1.0, 0, OUT), *dx0 = bf16_randn(nx, 1e-3, 0, IN), *dw0 = bf16_randn(nw, 1e-3, 0, IN);
    void *dX = up(g8, x, nx), *dW = up(g8, w, nw), *dG = up(g8, dy, ny);
    void *a = g8->alloc(ny * 2), *bb = up(g8, y0, ny), *ddx = g8->alloc(nx * 2), *ddxa = up(g8, dx0, nx);
    void *ddw = g8->alloc(nw * 2), *ddwa = up(g8, dw0, nw);
    g8->matmul_fwd(a, dX, dW, NULL, N, IN, OUT, 0);
    g8->matmul_fwd(bb, dX, dW, NULL, N, IN, OUT, 1);
    g8->matmul_bwd(ddx, ddw, NULL, dG, dX, dW, N, IN, OUT, 0);
    g8->matmul_bwd(ddxa, ddwa, NULL, dG, dX, dW, N, IN, OUT, 1);
    float *ha = down_new(g8, a, ny), *hb = down_new(g8, bb, ny), *hdx = down_new(g8, ddx, nx),
          *hdxa = down_new(g8, ddxa, nx), *hdw = down_new(g8, ddw, nw), *hdwa = down_new(g8, ddwa, nw);
    for (size_t i = 0; i < ny; i++) ha[i] += y0[i];
    for (size_t i = 0; i < nx; i++) hdx[i] += dx0[i];
    for (size_t i = 0; i < nw; i++) hdw[i] += dw0[i];
    /* the sum is rounded to bf16 once in the GEMM's epilogue; the reference sums in fp32: ~2^-9 relative */
    report(g8->name, check_name("fwd   %dx%d->%d accumulate = 1", N, IN, OUT), relfro(hb, ha, ny), 2e-2);
    report(g8->name, check_name("dgrad %dx%d->%d accumulate_dx = 1", N, IN, OUT), relfro(hdxa, hdx, nx), 1e-2);
    report(g8->name, check_name("wgrad %dx%d->%d dW += (prefilled)", N, IN, OUT), relfro(hdwa, hdw, nw), 1e-2);
    g8->free(dX), g8->free(dW), g8->free(dG), g8->free(a), g8->free(bb), g8->free(ddx), g8->free(ddxa);
    g8->free(ddw), g8->free(ddwa);
    free(x), free(w), free(dy), free(y0), free(dx0), free(dw0), free(ha), free(hb), free(hdx), free(hdxa), free(hdw),
        free(hdwa);
}

/* a layer the fp8 table runs in bf16 (why: N, IN or OUT not a multiple of 16, or narrower than the fp8 policy's
 * QF_FP8_MIN_DIM): the bf16 table's GEMMs, bit for bit */
static void test_fallback(const qf_ops *g8, int N, int IN, int OUT, const char *why) {
    const size_t nx = (size_t)N * IN, nw = (size_t)OUT * IN, ny = (size_t)N * OUT;
    float *x = bf16_randn(nx, 1.0, 0, IN), *w = bf16_randn(nw, 0.02, 0, IN), *dy = bf16_randn(ny, 1e-3, 0, OUT);
    float *b = bf16_randn((size_t)OUT, 0.1, 0, OUT);
    float *y8 = qf_malloc(ny * 4), *dx8 = qf_malloc(nx * 4), *dw8 = qf_malloc(nw * 4);
    float *y16 = qf_malloc(ny * 4), *dx16 = qf_malloc(nx * 4), *dw16 = qf_malloc(nw * 4);
    uint64_t c0[2], c1[2];
    qf_cuda_fp8_counts(c0);
    run_table(g8, x, w, b, dy, N, IN, OUT, y8, dx8, dw8);
    qf_cuda_fp8_counts(c1);
    run_table(g16, x, w, b, dy, N, IN, OUT, y16, dx16, dw16);
    const int same = !memcmp(y8, y16, ny * 4) && !memcmp(dx8, dx16, nx * 4) && !memcmp(dw8, dw16, nw * 4);
    qf_gpu_report_bool(g8->name,
                       check_name("%dx%d->%d (%s): the bf16 GEMMs bit for bit, counted as bf16 (+%llu fp8, "
                                  "+%llu bf16)",
                                  N, IN, OUT, why, (unsigned long long)(c1[0] - c0[0]),
                                  (unsigned long long)(c1[1] - c0[1])),
                       same && c1[0] == c0[0] && c1[1] - c0[1] == 3);
    free(x), free(w), free(dy), free(b), free(y8), free(dx8), free(dw8), free(y16), free(dx16), free(dw16);
}

/* ---- weights named by (parameter id, version): ops.h fp8_weight ---------------------------------------------- */
typedef struct {
    void *x, *w, *dy, *y, *dx, *dw;
    size_t nx, nw, ny;
    int N, IN, OUT;
} layer_bufs;
static layer_bufs layer_new(const qf_ops *g, int N, int IN, int OUT, const float *x, const float *w, const float *dy) {
    layer_bufs b = {.nx = (size_t)N * IN, .nw = (size_t)OUT * IN, .ny = (size_t)N * OUT, .N = N, .IN = IN, .OUT = OUT};
    b.x = up(g, x, b.nx), b.w = up(g, w, b.nw), b.dy = up(g, dy, b.ny);
    b.y = g->alloc(b.ny * 2), b.dx = g->alloc(b.nx * 2), b.dw = g->alloc(b.nw * 2);
    QF_CHECK(b.y && b.dx && b.dw);
    return b;
}
static void layer_free(const qf_ops *g, layer_bufs *b) {
    g->free(b->x), g->free(b->w), g->free(b->dy), g->free(b->y), g->free(b->dx), g->free(b->dw);
}
/* the forward (and, when dx_out, the backward's dx and a fresh dW) with W tagged (id, ver), or untagged (id < 0);
 * results to host */
static void layer_run(const qf_ops *g, layer_bufs *b, const float *w, int id, uint64_t ver, float *y_out,
                      float *dx_out, float *dw_out) {
    if (w) { /* new values into the same buffer (as ZeRO-3 reuses a gathered unit's buffer) */
        float *st = g->alloc(b->nw * sizeof(float));
        QF_CHECK(st);
        g->copy_h2d(st, w, b->nw * sizeof(float));
        g->act_from_f32(b->w, st, b->nw);
        g->free(st);
    }
    if (id >= 0) g->fp8_weight(id, ver);
    g->matmul_fwd(b->y, b->x, b->w, NULL, b->N, b->IN, b->OUT, 0);
    down(g, y_out, b->y, b->ny);
    if (!dx_out) return;
    g->zero(b->dw, b->nw * 2);
    if (id >= 0) g->fp8_weight(id, ver);
    g->matmul_bwd(b->dx, b->dw, NULL, b->dy, b->x, b->w, b->N, b->IN, b->OUT, 0);
    down(g, dx_out, b->dx, b->nx);
    down(g, dw_out, b->dw, b->nw);
}
static int same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }
static float *scaled(const float *w, size_t n, float k) {
    float *p = qf_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = bfr(w[i] * k); /* k = 3: a new rounding grid, not W's scaled */
    return p;
}
static void stats(qf_cuda_fp8_stat *s) {
    qf_cuda_fp8_stats(s);
}

static void test_weight_reuse(const qf_ops *g8, int N, int IN, int OUT) {
    const char *tab = g8->name;
    qf_cuda_fp8_set_amax_history(0);
    g8->fp8_weight(-1, 0);
    float *x = bf16_randn((size_t)N * IN, 1.0, 1, IN), *w = bf16_randn((size_t)OUT * IN, 0.02, 0, IN),
          *dy = bf16_randn((size_t)N * OUT, 1e-3, 0, OUT);
    float *w2 = scaled(w, (size_t)OUT * IN, 3.0f); /* a changed weight whose amax is about 3 times W's */
    layer_bufs b = layer_new(g8, N, IN, OUT, x, w, dy);
    float *y0 = qf_malloc(b.ny * 4), *dx0 = qf_malloc(b.nx * 4), *dw0 = qf_malloc(b.nw * 4);
    float *y1 = qf_malloc(b.ny * 4), *dx1 = qf_malloc(b.nx * 4), *dw1 = qf_malloc(b.nw * 4);
    float *y2 = qf_malloc(b.ny * 4), *yc = qf_malloc(b.ny * 4), *yst = qf_malloc(b.ny * 4);
    qf_cuda_fp8_stat s0, s1, s2, s3;
    layer_run(g8, &b, NULL, -1, 0, y0, dx0, dw0); /* untagged: current scaling, an amax pass per use of W */
    stats(&s0);
    layer_run(g8, &b, NULL, 7, 1, y1, dx1, dw1); /* (7, 1) new: one pass in the forward, the backward reuses it */
    stats(&s1);
    layer_run(g8, &b, NULL, 7, 1, y2, NULL, NULL); /* (7, 1) again: no pass */
    stats(&s2);
    qf_gpu_report_bool(tab, check_name("%dx%d->%d (7, 1) fwd + bwd: bit for bit the untagged results", N, IN, OUT),
                       same_bits(y1, y0, b.ny) && same_bits(dx1, dx0, b.nx) && same_bits(dw1, dw0, b.nw));
    qf_gpu_report_bool(tab,
                       check_name("(7, 1) fwd + bwd: 1 weight amax pass, 1 reuse (counted %llu, %llu); x and dy "
                                  "passes as untagged (%llu of %llu in all)",
                                  (unsigned long long)(s1.weight_amax_passes - s0.weight_amax_passes),
                                  (unsigned long long)(s1.weight_reused - s0.weight_reused),
                                  (unsigned long long)(s1.amax_passes - s0.amax_passes), 4ull),
                       s1.weight_amax_passes - s0.weight_amax_passes == 1 && s1.weight_reused - s0.weight_reused == 1 &&
                           s1.amax_passes - s0.amax_passes == 4);
    qf_gpu_report_bool(tab,
                       check_name("(7, 1) fwd again: bit-identical, no weight amax pass (+%llu), reused (+%llu)",
                                  (unsigned long long)(s2.weight_amax_passes - s1.weight_amax_passes),
                                  (unsigned long long)(s2.weight_reused - s1.weight_reused)),
                       same_bits(y2, y1, b.ny) && s2.weight_amax_passes == s1.weight_amax_passes &&
                           s2.weight_reused - s1.weight_reused == 1);
    /* W changes to 3W: untagged is the truth; the old version (a missed bump) keeps W's scale and saturates */
    layer_run(g8, &b, w2, -1, 0, yc, NULL, NULL);
    layer_run(g8, &b, NULL, 7, 1, yst, NULL, NULL);
    const double dst = relfro(yst, yc, b.ny);
    qf_gpu_report_bool(tab,
                       check_name("3W under the stale version (7, 1): W's scale, saturated (rel. diff %.3f > 0.05)", dst),
                       dst > 0.05);
    stats(&s2);
    layer_run(g8, &b, NULL, 7, 2, y2, dx1, dw1);
    stats(&s3);
    layer_run(g8, &b, NULL, -1, 0, y0, dx0, dw0);
    qf_gpu_report_bool(tab,
                       check_name("3W under the bumped version (7, 2): its own scale, fwd + bwd bit for bit the "
                                  "untagged results (+%llu weight amax pass)",
                                  (unsigned long long)(s3.weight_amax_passes - s2.weight_amax_passes)),
                       same_bits(y2, yc, b.ny) && same_bits(y2, y0, b.ny) && same_bits(dx1, dx0, b.nx) &&
                           same_bits(dw1, dw0, b.nw) && s3.weight_amax_passes - s2.weight_amax_passes == 1);
    /* forgetting (a new engine): (7, 2) is new again */
    g8->fp8_weight(-1, 0);
    stats(&s2);
    layer_run(g8, &b, NULL, 7, 2, y1, NULL, NULL);
    stats(&s3);
    qf_gpu_report_bool(tab, "fp8_weight(-1, 0) forgets: (7, 2) takes an amax pass again, same results",
                       s3.weight_amax_passes - s2.weight_amax_passes == 1 && same_bits(y1, yc, b.ny));
    layer_free(g8, &b);
    free(x), free(w), free(dy), free(w2), free(y0), free(dx0), free(dw0), free(y1), free(dx1), free(dw1), free(y2),
        free(yc), free(yst);
}

/* host model of the history's cast: x quantized with the scale of the given amax (saturating), dequantized */
static float *fake_quant_amax(const float *x, size_t n, float amax, fp8fmt f) {
    float *q = qf_malloc(n * sizeof(float));
    const float s = fp8_scale(amax, f, 0);
    for (size_t i = 0; i < n; i++) q[i] = fp8_round(x[i] * s, f) * (1.0f / s);
    return q;
}
static float absmax(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

static void test_weight_history(const qf_ops *g8, int N, int IN, int OUT) {
    const char *tab = g8->name;
    const int H = 2;
    qf_cuda_fp8_set_amax_history(H);
    qf_gpu_report_bool(tab, check_name("amax history length set to %d", H), qf_cuda_fp8_amax_history() == H);
    float *x = bf16_randn((size_t)N * IN, 1.0, 1, IN), *w = bf16_randn((size_t)OUT * IN, 0.02, 0, IN),
          *dy = bf16_randn((size_t)N * OUT, 1e-3, 0, OUT);
    float *w4 = scaled(w, (size_t)OUT * IN, 3.0f);
    layer_bufs b = layer_new(g8, N, IN, OUT, x, w, dy);
    float *y = qf_malloc(b.ny * 4), *dx = qf_malloc(b.nx * 4), *dw = qf_malloc(b.nw * 4);
    float *yc = qf_malloc(b.ny * 4), *dxc = qf_malloc(b.nx * 4), *dwc = qf_malloc(b.nw * 4);
    float *yc4 = qf_malloc(b.ny * 4), *ye = qf_malloc(b.ny * 4);
    qf_cuda_fp8_stat s0, s1, s2;
    layer_run(g8, &b, NULL, -1, 0, yc, dxc, dwc); /* W's current scaling */
    stats(&s0);
    layer_run(g8, &b, NULL, 9, 1, y, dx, dw); /* first use, empty history: a normal amax pass */
    stats(&s1);
    qf_gpu_report_bool(tab,
                       check_name("history %d, (9, 1) first use: an amax pass (+%llu), bit for bit current scaling", H,
                                  (unsigned long long)(s1.weight_amax_passes - s0.weight_amax_passes)),
                       s1.weight_amax_passes - s0.weight_amax_passes == 1 && same_bits(y, yc, b.ny) &&
                           same_bits(dx, dxc, b.nx) && same_bits(dw, dwc, b.nw));
    layer_run(g8, &b, w4, -1, 0, yc4, dxc, dwc); /* 3W's current scaling */
    stats(&s1);
    layer_run(g8, &b, NULL, 9, 2, y, dx, dw); /* 3W at version 2: W's amax from the history, no pass */
    stats(&s2);
    const float a = absmax(w, b.nw);
    float *xq = fake_quant(x, N, IN, 0, E4M3, 0), *wq = fake_quant_amax(w4, b.nw, a, E4M3);
    ref_gemms(xq, wq, NULL, NULL, NULL, NULL, NULL, N, IN, OUT, ye, NULL, NULL);
    int finite = 1;
    for (size_t i = 0; i < b.ny; i++) finite &= isfinite(y[i]) != 0;
    qf_gpu_report_bool(tab,
                       check_name("(9, 2) 3W fwd + bwd: no weight amax pass (+%llu), the scale from the history "
                                  "(+%llu delayed, +%llu reused), finite",
                                  (unsigned long long)(s2.weight_amax_passes - s1.weight_amax_passes),
                                  (unsigned long long)(s2.weight_delayed - s1.weight_delayed),
                                  (unsigned long long)(s2.weight_reused - s1.weight_reused)),
                       s2.weight_amax_passes == s1.weight_amax_passes && s2.weight_delayed - s1.weight_delayed == 1 &&
                           s2.weight_reused - s1.weight_reused == 1 && finite);
    report(tab, check_name("(9, 2) 3W fwd vs the host model of W's scale, saturated (semantics)"), relfro(y, ye, b.ny),
           2e-2);
    const double dsat = relfro(y, yc4, b.ny);
    qf_gpu_report_bool(tab,
                       check_name("(9, 2) 3W differs from 3W's current scaling (saturation: rel. diff %.3f > 0.05)", dsat),
                       dsat > 0.05);
    /* version 3: the history holds 3W's amax (recorded by version 2's cast): 3W's own scale, bit for bit */
    float *y3 = qf_malloc(b.ny * 4), *dx3 = qf_malloc(b.nx * 4), *dw3 = qf_malloc(b.nw * 4);
    layer_run(g8, &b, NULL, 9, 3, y3, dx3, dw3);
    qf_gpu_report_bool(tab, "(9, 3) 3W: the recorded amax gives 3W's own scale, fwd + bwd bit for bit",
                       same_bits(y3, yc4, b.ny) && same_bits(dx3, dxc, b.nx) && same_bits(dw3, dwc, b.nw));
    /* back to W: the larger amax stays H versions, then W's own scale again */
    layer_run(g8, &b, w, -1, 0, yc, NULL, NULL);
    int v = 4, back = 0;
    for (; v < 4 + H + 1; v++) {
        layer_run(g8, &b, NULL, 9, (uint64_t)v, y3, NULL, NULL);
        back = same_bits(y3, yc, b.ny);
        if (back) break;
    }
    qf_gpu_report_bool(tab,
                       check_name("W again: W's own scale back after %d versions (history %d: expected %d)", v - 3, H,
                                  H + 1),
                       back && v - 3 == H + 1);
    qf_cuda_fp8_set_amax_history(0);
    layer_free(g8, &b);
    free(x), free(w), free(dy), free(w4), free(y), free(dx), free(dw), free(yc), free(dxc), free(dwc), free(yc4),
        free(ye), free(xq), free(wq), free(y3), free(dx3), free(dw3);
}

/* two layers on one x (gate and up on ln2): the second with fp8_same_x, against the same calls without it */
static void test_same_x(const qf_ops *g8, int N, int IN, int OUT) {
    const char *tab = g8->name;
    const size_t nx = (size_t)N * IN, nw = (size_t)OUT * IN, ny = (size_t)N * OUT;
    float *x = bf16_randn(nx, 1.0, 1, IN), *w1 = bf16_randn(nw, 0.02, 0, IN), *w2 = bf16_randn(nw, 0.03, 0, IN),
          *dy1 = bf16_randn(ny, 1e-3, 0, OUT), *dy2 = bf16_randn(ny, 2e-3, 0, OUT);
    void *dX = up(g8, x, nx), *dX2 = up(g8, x, nx), *dW1 = up(g8, w1, nw), *dW2 = up(g8, w2, nw);
    void *dG1 = up(g8, dy1, ny), *dG2 = up(g8, dy2, ny);
    void *y1 = g8->alloc(ny * 2), *y2 = g8->alloc(ny * 2), *dx = g8->alloc(nx * 2), *dw1 = g8->alloc(nw * 2),
         *dw2 = g8->alloc(nw * 2);
    QF_CHECK(y1 && y2 && dx && dw1 && dw2);
    float *h[2][4]; /* [promise][y2, dx, dw1, dw2] */
    qf_cuda_fp8_stat s0, s1;
    uint64_t reused[2] = {0, 0}, passes[2] = {0, 0};
    for (int p = 0; p < 2; p++) {
        g8->zero(dw1, nw * 2), g8->zero(dw2, nw * 2);
        stats(&s0);
        g8->matmul_fwd(y1, dX, dW1, NULL, N, IN, OUT, 0);
        if (p) g8->fp8_same_x();
        g8->matmul_fwd(y2, dX, dW2, NULL, N, IN, OUT, 0);
        g8->matmul_bwd(dx, dw1, NULL, dG1, dX, dW1, N, IN, OUT, 0);
        if (p) g8->fp8_same_x();
        g8->matmul_bwd(dx, dw2, NULL, dG2, dX, dW2, N, IN, OUT, 1);
        stats(&s1);
        reused[p] = s1.x_reused - s0.x_reused, passes[p] = s1.amax_passes - s0.amax_passes;
        h[p][0] = down_new(g8, y2, ny), h[p][1] = down_new(g8, dx, nx), h[p][2] = down_new(g8, dw1, nw);
        h[p][3] = down_new(g8, dw2, nw);
    }
    qf_gpu_report_bool(tab,
                       check_name("%dx%d->%d x2 on one x, the second fp8_same_x: bit for bit, x reused %llu times "
                                  "(want 2), amax passes %llu -> %llu (want 2 fewer)",
                                  N, IN, OUT, (unsigned long long)reused[1], (unsigned long long)passes[0],
                                  (unsigned long long)passes[1]),
                       same_bits(h[1][0], h[0][0], ny) && same_bits(h[1][1], h[0][1], nx) &&
                           same_bits(h[1][2], h[0][2], nw) && same_bits(h[1][3], h[0][3], nw) && reused[0] == 0 &&
                           reused[1] == 2 && passes[1] + 2 == passes[0]);
    /* promises the table must not keep: another buffer with the same values; a forward after a backward */
    stats(&s0);
    g8->matmul_fwd(y1, dX, dW1, NULL, N, IN, OUT, 0);
    g8->fp8_same_x();
    g8->matmul_fwd(y2, dX2, dW2, NULL, N, IN, OUT, 0);
    g8->zero(dw2, nw * 2);
    g8->matmul_bwd(NULL, dw2, NULL, dG2, dX, dW2, N, IN, OUT, 0);
    g8->fp8_same_x();
    g8->matmul_fwd(y2, dX, dW2, NULL, N, IN, OUT, 0);
    stats(&s1);
    float *yy = down_new(g8, y2, ny);
    qf_gpu_report_bool(tab,
                       check_name("fp8_same_x on another x buffer, or a forward after a backward: ignored (x reused "
                                  "+%llu), results unchanged",
                                  (unsigned long long)(s1.x_reused - s0.x_reused)),
                       s1.x_reused == s0.x_reused && same_bits(yy, h[0][0], ny));
    free(yy);
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 4; k++) free(h[p][k]);
    g8->free(dX), g8->free(dX2), g8->free(dW1), g8->free(dW2), g8->free(dG1), g8->free(dG2), g8->free(y1);
    g8->free(y2), g8->free(dx), g8->free(dw1), g8->free(dw2);
    free(x), free(w1), free(w2), free(dy1), free(dy2);
}

/* fp8.save_inputs: forward saving q(x)^T under a key, the backward's wgrad reading it */
static void test_saved_x(const qf_ops *g8, int N, int IN, int OUT) {
    const char *tab = g8->name;
    const size_t nx = (size_t)N * IN, nw = (size_t)OUT * IN, ny = (size_t)N * OUT;
    float *x = bf16_randn(nx, 1.0, 1, IN), *w = bf16_randn(nw, 0.02, 0, IN), *dy = bf16_randn(ny, 1e-3, 0, OUT);
    void *dX = up(g8, x, nx), *dX2 = up(g8, x, nx), *dW = up(g8, w, nw), *dG = up(g8, dy, ny);
    void *y = g8->alloc(ny * 2), *dx = g8->alloc(nx * 2), *dw = g8->alloc(nw * 2);
    QF_CHECK(y && dx && dw);
    float *h[3][3];
    qf_cuda_fp8_stat s0, s1;
    uint64_t saved[3], used[3], passes[3];
    qf_cuda_fp8_set_save_inputs(1);
    for (int p = 0; p < 3; p++) { /* 0: no request; 1: save + use; 2: save, the backward on another buffer */
        g8->zero(dw, nw * 2);
        stats(&s0);
        if (p) g8->fp8_saved_x(5, 1);
        g8->matmul_fwd(y, dX, dW, NULL, N, IN, OUT, 0);
        if (p) g8->fp8_saved_x(5, 2);
        g8->matmul_bwd(dx, dw, NULL, dG, p == 2 ? dX2 : dX, dW, N, IN, OUT, 0);
        stats(&s1);
        saved[p] = s1.x_saved - s0.x_saved, used[p] = s1.x_saved_used - s0.x_saved_used;
        passes[p] = s1.amax_passes - s0.amax_passes;
        h[p][0] = down_new(g8, y, ny), h[p][1] = down_new(g8, dx, nx), h[p][2] = down_new(g8, dw, nw);
    }
    int same = 1;
    for (int p = 1; p < 3; p++)
        same &= same_bits(h[p][0], h[0][0], ny) && same_bits(h[p][1], h[0][1], nx) && same_bits(h[p][2], h[0][2], nw);
    qf_gpu_report_bool(tab,
                       check_name("%dx%d->%d fp8_saved_x: saved %llu/%llu/%llu, used %llu/%llu/%llu (want 0/1/1, "
                                  "0/1/0), amax passes %llu/%llu/%llu (one fewer when used), bit for bit",
                                  N, IN, OUT, (unsigned long long)saved[0], (unsigned long long)saved[1],
                                  (unsigned long long)saved[2], (unsigned long long)used[0],
                                  (unsigned long long)used[1], (unsigned long long)used[2],
                                  (unsigned long long)passes[0], (unsigned long long)passes[1],
                                  (unsigned long long)passes[2]),
                       same && saved[0] == 0 && saved[1] == 1 && saved[2] == 1 && used[0] == 0 && used[1] == 1 &&
                           used[2] == 0 && passes[1] + 1 == passes[0] && passes[2] == passes[0]);
    qf_cuda_fp8_set_save_inputs(0);
    stats(&s0);
    g8->fp8_saved_x(5, 1);
    g8->matmul_fwd(y, dX, dW, NULL, N, IN, OUT, 0);
    g8->fp8_saved_x(5, 2);
    g8->matmul_bwd(dx, dw, NULL, dG, dX, dW, N, IN, OUT, 0);
    stats(&s1);
    qf_gpu_report_bool(tab, "fp8_saved_x with fp8.save_inputs off: ignored",
                       s1.x_saved == s0.x_saved && s1.x_saved_used == s0.x_saved_used &&
                           qf_cuda_fp8_save_inputs() == 0);
    for (int p = 0; p < 3; p++)
        for (int k = 0; k < 3; k++) free(h[p][k]);
    g8->free(dX), g8->free(dX2), g8->free(dW), g8->free(dG), g8->free(y), g8->free(dx), g8->free(dw);
    free(x), free(w), free(dy);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
/* fwd + dgrad + wgrad of one shape, reps times: TFLOP/s (6 N IN OUT flops per rep); tag: W named with a new
 * parameter version each rep (fp8_weight: the amax pass in the forward only, as in training) */
static double time_layer_tag(const qf_ops *g, int N, int IN, int OUT, int reps, int tag) {
    const size_t nx = (size_t)N * IN, nw = (size_t)OUT * IN, ny = (size_t)N * OUT;
    float *x = bf16_randn(nx, 1.0, 1, IN), *w = bf16_randn(nw, 0.02, 0, IN), *dy = bf16_randn(ny, 3e-6, 0, OUT);
    void *dX = up(g, x, nx), *dW = up(g, w, nw), *dG = up(g, dy, ny);
    void *y = g->alloc(ny * 2), *dx = g->alloc(nx * 2), *dw = g->alloc(nw * 2);
    double t0 = 0;
    for (int r = -2; r < reps; r++) {
        if (r == 0) {
            g->sync();
            t0 = now();
        }
        if (tag) g->fp8_weight(3, (uint64_t)(r + 3));
        g->matmul_fwd(y, dX, dW, NULL, N, IN, OUT, 0);
        if (tag) g->fp8_weight(3, (uint64_t)(r + 3));
        g->matmul_bwd(dx, dw, NULL, dG, dX, dW, N, IN, OUT, 0);
    }
    g->sync();
    const double dt = (now() - t0) / reps;
    g->free(dX), g->free(dW), g->free(dG), g->free(y), g->free(dx), g->free(dw);
    free(x), free(w), free(dy);
    return 6.0 * N * IN * OUT / dt / 1e12;
}
static double time_layer(const qf_ops *g, int N, int IN, int OUT, int reps) {
    return time_layer_tag(g, N, IN, OUT, reps, 0);
}

int main(int argc, char **argv) {
    const int want_bench = argc > 1 && !strcmp(argv[1], "--bench");
    if (qf_cuda_device_count() <= 0 || !(g16 = qf_ops_cuda()) || !(g32 = qf_ops_cuda_f32())) {
        printf("test_fp8_cuda: no GPU: skipped\n");
        return 77;
    }
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    const int cc = major * 10 + minor;
    char ver[256], why[256];
    qf_cuda_versions(ver, sizeof ver);
    printf("test_fp8_cuda: %s; GPU %d compute capability %d.%d\n", ver, dev, major, minor);
    const qf_ops *tabs[2] = {qf_ops_cuda_fp8(QF_FP8_TENSORWISE, why, sizeof why), NULL};
    if (!tabs[0]) {
        printf("test_fp8_cuda: tensorwise fp8 refused: %s\n", why);
        if (cc < 89) {
            printf("test_fp8_cuda: compute capability < 8.9 has no fp8 tensor cores: skipped\n");
            return 77;
        }
        qf_gpu_report_bool("cuda-fp8", "the tensorwise table exists on compute capability >= 8.9", 0);
        return 1;
    }
    tabs[1] = qf_ops_cuda_fp8(QF_FP8_ROWWISE, why, sizeof why);
    /* cuBLASLt 13.1 (130100) has no outer-vector fp8 kernel on an H200 (measured 2026-12-03): the table then
     * applies the per-row scales after a unit-scale GEMM, and why[] says so */
    printf("test_fp8_cuda: rowwise fp8 %s%s%s\n", tabs[1] ? "runs" : "refused: ", tabs[1] && why[0] ? ": " : "", why);
    qf_gpu_report_bool("cuda-fp8-rowwise", "the rowwise table exists where the tensorwise one does", tabs[1] != NULL);
    if (want_bench) {
        /* the cast kernels at 7B's operand shapes (bf16 in): x / dy of 4096 tokens, W of q/o, gate/up and down */
        const int cs[5][2] = {{4096, 3584}, {4096, 18944}, {3584, 3584}, {18944, 3584}, {3584, 18944}};
        const char *cn[5] = {"x, dy [4096, 3584]", "x, dy [4096, 18944]", "W q/o [3584, 3584]",
                             "W gate/up [18944, 3584]", "W down [3584, 18944]"};
        for (int s = 0; s < 5; s++) {
            const size_t n = (size_t)cs[s][0] * cs[s][1];
            float *h = bf16_randn(n, 0.02, 0, cs[s][1]);
            void *d = up(g16, h, n);
            double gbs[5];
            qf_cuda_fp8_bench_casts(d, cs[s][0], cs[s][1], 50, gbs);
            printf("bench cast %-24s GB/s (read + written): amax %.0f, quant %.0f, quant+record %.0f, "
                   "quant_t both %.0f, quant_t transposed %.0f\n",
                   cn[s], gbs[0], gbs[1], gbs[2], gbs[3], gbs[4]);
            g16->free(d);
            free(h);
        }
        const int shapes[4][3] = {{4096, 3584, 3584}, {4096, 3584, 512}, {4096, 3584, 18944}, {4096, 18944, 3584}};
        for (int s = 0; s < 4; s++) {
            const int N = shapes[s][0], IN = shapes[s][1], OUT = shapes[s][2];
            printf("bench %5dx%5d->%5d fwd+bwd: bf16 %.0f TFLOP/s", N, IN, OUT, time_layer(g16, N, IN, OUT, 20));
            for (int t = 0; t < 2; t++)
                if (tabs[t]) printf(", %s %.0f TFLOP/s", tabs[t]->name, time_layer(tabs[t], N, IN, OUT, 20));
            if (tabs[0] && qf_cuda_fp8_min_dim() <= (IN < OUT ? IN : OUT)) { /* the weight's amax once per version */
                tabs[0]->fp8_weight(-1, 0);
                printf(", %s W tagged %.0f", tabs[0]->name, time_layer_tag(tabs[0], N, IN, OUT, 20, 1));
                qf_cuda_fp8_set_amax_history(16);
                printf(", + history 16 %.0f TFLOP/s", time_layer_tag(tabs[0], N, IN, OUT, 20, 1));
                qf_cuda_fp8_set_amax_history(0);
            }
            printf("\n");
        }
        return 0;
    }
    for (int t = 0; t < 2; t++) { /* the policy's narrow layers in bf16, then every shape in fp8 for the checks */
        if (!tabs[t]) continue;
        qf_cuda_fp8_set_min_dim(QF_FP8_MIN_DIM);
        test_fallback(tabs[t], 256, 3584, 512, "OUT under QF_FP8_MIN_DIM: 7B's k/v in bf16 by policy");
        test_fallback(tabs[t], 256, 512, 3584, "IN under QF_FP8_MIN_DIM");
        qf_cuda_fp8_set_min_dim(0);
        test_fallback(tabs[t], 100, 70, 37, "not multiples of 16");
        test_shape(tabs[t], t, 256, 128, 64, 1);   /* small, with the q/k/v bias */
        test_shape(tabs[t], t, 1024, 896, 128, 1); /* Qwen2.5-0.5B k/v */
        test_accumulate(tabs[t], 512, 256, 384);
        if (t == 0) { /* the weights' saved scales and history: tensorwise */
            test_weight_reuse(tabs[t], 512, 1024, 768);
            test_weight_history(tabs[t], 512, 1024, 768);
            test_weight_reuse(tabs[t], 4096, 3584, 3584); /* 7B q/o */
            test_same_x(tabs[t], 512, 1024, 768);
            test_same_x(tabs[t], 4096, 3584, 18944); /* 7B gate/up on ln2 */
            test_saved_x(tabs[t], 512, 1024, 768);
            test_saved_x(tabs[t], 4096, 18944, 3584); /* 7B down */
        }
        test_shape(tabs[t], t, 4096, 3584, 3584, 0);  /* 7B q/o */
        test_shape(tabs[t], t, 4096, 3584, 512, 1);   /* 7B k/v (KV*D = 4*128) */
        test_shape(tabs[t], t, 4096, 3584, 18944, 0); /* 7B gate/up */
        test_shape(tabs[t], t, 4096, 18944, 3584, 0); /* 7B down */
    }
    if (tabs[1] && why[0]) { /* the table said it applies the scales after the GEMM: its GEMMs took that path */
        qf_cuda_fp8_stat fs;
        qf_cuda_fp8_stats(&fs);
        qf_gpu_report_bool("cuda-fp8-rowwise", "its GEMMs ran as unit-scale GEMMs + the scale kernel",
                           fs.outer_after > 0);
    }
    printf("test_fp8_cuda: %d checks, %d failed\n", n_checks, n_fail);
    return n_fail != 0;
}
