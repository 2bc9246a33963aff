/* test_ops_cuda.c — the CUDA op tables against the CPU table (the oracle), op by op.
 *
 * Every case draws fresh random inputs, rounds them to values that bf16 and fp16 both hold exactly (so that every
 * backend sees the same values), runs the CPU op in fp32, then the same op on each CUDA table — "cuda" (bf16
 * storage, fp32 accumulation), "cuda-f32" (the same kernels in fp32) and "cuda-f16" (IEEE fp16 storage, fp32
 * accumulation) — and compares on the max norm:
 *     err = max_i |gpu_i - cpu_i| / max_i |cpu_i|        (NaN fails; WRITE outputs are poisoned with NaN first)
 * Tolerances: cuda-f32 1e-5 (fp32 arithmetic in another summation order); cuda 1e-2 (every stored tensor is
 * rounded to bf16, relative step 2^-8; attention backward 2e-2: P and dS enter the tensor-core GEMMs as bf16, as in
 * FlashAttention-2; classifier gradients: bf16 logits as HF computes them, see cls_ref). cuda-f16: the same
 * roundings happen at the same places with fp16's 10-bit mantissa, i.e. a relative step (unit roundoff) of 2^-11
 * instead of 2^-8, 8 times smaller; the inputs are exact in both types, so every fp16 tolerance is its bf16
 * counterpart divided by that ratio and given the same safety factor (see the TOL_* table below). AdamW must match
 * the CPU bit for bit in every table (same scalar formulas, no FMA contraction), embedding_bwd in fp32 too.
 * Sizes: the CPU unit test's odd shapes plus realistic ones (T = 256..1024, head_dim 64/128, H=8/KV=2, C = 1024,
 * V = 32000 for the classifier, hidden 3584 RMSNorm).
 *
 * `test_ops_cuda --bench` times the bf16 table instead: matmul forward and backward at Qwen2.5-7B shapes
 * (4096 tokens), attention forward + backward at T=4096, D=128, H=28, KV=4 (and D=64), the fused classifier at
 * V=152064, and the bandwidth-bound ops; it prints TFLOP/s (or GB/s).
 * `test_ops_cuda --small` runs only the small cases (for compute-sanitizer).
 * The fp16 table's classifier runs with a loss scale (LS_F16) folded into grad_scale, as fp16 training always does
 * (DeepSpeed's dynamic loss scaling): unscaled, dlogits of ~1/(V * tokens) are fp16 subnormals.
 * Exit: 0 all passed, 1 a check failed, 77 "no GPU: skipped". */
#define QF_GPU_TEST_SEED 0x2545F4914F6CDD1Dull
#include "qf_gpu_test.h"

/* test hook of kernels/cuda (not in ops.h): the attention path (0 auto, 1 mma, 2 cudnn): the attention checks and
 * benchmark here are the mma.sync kernels' (forced); every path is checked by test_attn_cuda and timed by
 * bench/attn_bench */
void qf_cuda_set_attention_path(int p);

/* Tolerances of the 16-bit tables, {bf16, fp16}; the fp32 table always gets TOL_F32. With u the unit roundoff of
 * the storage type (bf16 2^-8 = 3.9e-3, fp16 2^-11 = 4.9e-4), a max-norm error is a few u: each stored output is
 * rounded once (<= u of the largest element), ops that store an intermediate in act (RMSNorm's x*rstd as HF does,
 * attention's P and dS as mma operands, the classifier's logits and dlogits) add a few u more. Every fp16 value is
 * its bf16 value times 2^-3 (the ratio of the two u), i.e. the same multiple of u: */
typedef struct {
    double bf16, f16;
} tol2;
#define TOL_F32 1e-5
#define TOL_ACT ((tol2){1e-2, 1.25e-3})        /* ~2.5 u: one or two roundings of the output */
#define TOL_ATT_BWD ((tol2){2e-2, 2.5e-3})     /* ~5 u: P and dS rounded to act for the tensor-core GEMMs */
#define TOL_CLS_VS_F32 ((tol2){4e-2, 5e-3})    /* ~10 u: act logits (HF semantics) vs the fp32 CPU op: see cls_ref */
#define TOL_CLS_EMU ((tol2){2e-2, 2.5e-3})     /* ~5 u: vs the emulation of HF's 16-bit lm_head: see cls_ref */
#define TOL_ADAMW_ACT ((tol2){4e-3, 5e-4})     /* ~u: p_act is the fp32 master rounded once */
#define LS_F16 1024.0f /* the loss scale folded into the fp16 classifier's grad_scale (see the header) */

static const qf_ops *cpu;
static const qf_ops *gpus[3];
static int ngpu;
static double tol_of(const qf_ops *g, tol2 t) {
    return g->act_dtype == QF_DT_F32 ? TOL_F32 : g->act_dtype == QF_DT_F16 ? t.f16 : t.bf16;
}

static void report(const qf_ops *g, const char *name, double err, double tol) {
    char label[32];
    snprintf(label, sizeof label, "%-9s", g ? g->name : "");
    qf_gpu_report(label, 70, name, err, tol);
}
static void report_bool(const qf_ops *g, const char *name, int ok) {
    char label[32];
    snprintf(label, sizeof label, "%-9s", g ? g->name : "");
    qf_gpu_report_bool(label, name, ok);
}

/* ---- host helpers (the shared ones are in qf_gpu_test.h) ------------------------------------------------------- */
/* x as table g's act dtype holds it */
static float actr(const qf_ops *g, float x) {
    return g->act_dtype == QF_DT_BF16 ? bfr(x) : g->act_dtype == QF_DT_F16 ? f16r(x) : x;
}
static float *fdup(const float *s, size_t n) {
    float *p = qf_malloc((n ? n : 1) * sizeof(float));
    memcpy(p, s, n * sizeof(float));
    return p;
}
static double relerr_d(double a, double ref) { return fabs(a - ref) / (fabs(ref) > 0 ? fabs(ref) : 1.0); }

/* compare a device act tensor with a host reference */
static void cmp(const qf_ops *g, const char *name, const void *d, const float *ref, size_t n, tol2 tol) {
    float *h = down_new(g, d, n);
    report(g, name, relerr(h, ref, n), tol_of(g, tol));
    free(h);
}
static void cmp_f32(const qf_ops *g, const char *name, const float *d, const float *ref, size_t n, tol2 tol) {
    float *h = down_raw_f32(g, d, n);
    report(g, name, relerr(h, ref, n), tol_of(g, tol));
    free(h);
}

/* ---- memory, casts -------------------------------------------------------------------------------------------- */
static void test_memory(const qf_ops *g) {
    const size_t n = 100003;
    float *a = g->alloc(n * sizeof(float));
    float *h = qf_malloc(n * sizeof(float)), *h2 = qf_malloc(n * sizeof(float));
    g->copy_d2h(h2, a, n * sizeof(float));
    int zero = a != NULL;
    for (size_t i = 0; i < n; i++) zero &= h2[i] == 0.0f;
    report_bool(g, "alloc returns zero-filled memory", zero);
    for (size_t i = 0; i < n; i++) h[i] = (float)(2.0 * urand() - 1.0);
    float *b = g->alloc(n * sizeof(float));
    g->copy_h2d(a, h, n * sizeof(float));
    g->copy_d2d(b, a, n * sizeof(float));
    g->copy_d2h(h2, b, n * sizeof(float));
    report_bool(g, "copy h2d -> d2d -> d2h round trip is exact", !memcmp(h, h2, n * sizeof(float)));
    /* large copy (past the pinned staging slots) */
    const size_t nl = (size_t)3 << 20;
    float *hl = qf_malloc(nl * sizeof(float)), *hl2 = qf_malloc(nl * sizeof(float));
    for (size_t i = 0; i < nl; i++) hl[i] = (float)i;
    float *dl = g->alloc(nl * sizeof(float));
    g->copy_h2d(dl, hl, nl * sizeof(float));
    g->copy_d2h(hl2, dl, nl * sizeof(float));
    report_bool(g, "12 MiB h2d/d2h round trip is exact", !memcmp(hl, hl2, nl * sizeof(float)));
    g->free(dl);
    free(hl), free(hl2);
    /* casts: values the act dtype holds survive act_from_f32 / act_to_f32 exactly; rounding is to nearest even */
    for (size_t i = 0; i < n; i++) h[i] = both(h[i]);
    void *act = g->alloc(n * g->act_bytes);
    g->copy_h2d(a, h, n * sizeof(float));
    g->act_from_f32(act, a, n);
    g->act_to_f32(b, act, n);
    g->copy_d2h(h2, b, n * sizeof(float));
    report_bool(g, "act_from_f32 / act_to_f32 round trip of bf16/fp16 values is exact", !memcmp(h, h2, n * sizeof(float)));
    {
        /* ties of bf16 (2^-8 steps at 1) and of fp16 (2^-10), inf; fp16 overflow (65520 rounds to inf, 65519 to
         * 65504) and an fp16 subnormal */
        float v[9] = {1.0f + 0x1.0p-8f, 1.0f + 0x1.8p-8f, -3.0f, INFINITY, 1.0f + 0x1.0p-11f, 1.0f + 0x3.0p-11f,
                      65520.0f, -65519.0f, 1e-7f},
              r[9];
        float *dv = g->alloc(sizeof v);
        g->copy_h2d(dv, v, sizeof v);
        g->act_from_f32(act, dv, 9);
        g->act_to_f32(dv, act, 9);
        g->copy_d2h(r, dv, sizeof r);
        int ok = 1;
        for (int i = 0; i < 9; i++) ok &= r[i] == actr(g, v[i]);
        report_bool(g, "act_from_f32 rounds to nearest even (ties, inf, fp16 overflow and subnormals)", ok);
        g->free(dv);
    }
    g->zero(b, n * sizeof(float));
    g->copy_d2h(h2, b, n * sizeof(float));
    int z = 1;
    for (size_t i = 0; i < n; i++) z &= h2[i] == 0.0f;
    report_bool(g, "zero", z);
    g->sync();
    g->free(a), g->free(b), g->free(act);
    free(h), free(h2);
}

static void test_memory_limit(const qf_ops *g) {
    const size_t cur = qf_cuda_current_bytes();
    qf_cuda_set_memory_limit(cur + ((size_t)8 << 20));
    void *p = g->alloc((size_t)4 << 20);
    void *q = g->alloc((size_t)6 << 20); /* over the limit */
    void *r = g->alloc((size_t)2 << 20);
    report_bool(g, "memory limit: 4 MiB ok, then 6 MiB refused (NULL), then 2 MiB ok", p && !q && r);
    report_bool(g, "current bytes count alloc()s; peak >= current",
                qf_cuda_current_bytes() >= cur + ((size_t)6 << 20) && qf_cuda_peak_bytes() >= qf_cuda_current_bytes());
    qf_cuda_set_memory_limit(0);
    if (p) g->free(p);
    if (r) g->free(r);
    report_bool(g, "free returns the bytes", qf_cuda_current_bytes() == cur);
    void *big = g->alloc((size_t)1 << 50); /* 1 PiB: cudaMalloc fails, alloc says NULL, the backend carries on */
    report_bool(g, "an impossible allocation returns NULL", big == NULL);
    void *ok = g->alloc(1024);
    report_bool(g, "and the next allocation works", ok != NULL);
    if (ok) g->free(ok);
}

/* ---- matmul --------------------------------------------------------------------------------------------------- */
static void test_matmul(int N, int IN, int OUT, int with_bias) {
    char nm[160];
    float *x = frand((size_t)N * IN, 1), *w = frand((size_t)OUT * IN, 1), *b = frand(OUT, 1);
    float *o0 = frand((size_t)N * OUT, 1), *dout = frand((size_t)N * OUT, 1);
    float *dw0 = frand((size_t)OUT * IN, 1), *db0 = frand(OUT, 1), *dx0 = frand((size_t)N * IN, 1);
    /* CPU references */
    float *y = fdup(o0, (size_t)N * OUT), *ya = fdup(o0, (size_t)N * OUT);
    cpu->matmul_fwd(y, x, w, with_bias ? b : NULL, N, IN, OUT, 0);
    cpu->matmul_fwd(ya, x, w, with_bias ? b : NULL, N, IN, OUT, 1);
    float *dx = qf_malloc((size_t)N * IN * 4), *dw = fdup(dw0, (size_t)OUT * IN), *db = fdup(db0, OUT);
    float *dxa = fdup(dx0, (size_t)N * IN);
    cpu->matmul_bwd(dx, dw, with_bias ? db : NULL, dout, x, w, N, IN, OUT, 0);
    cpu->matmul_bwd(dxa, NULL, NULL, dout, x, w, N, IN, OUT, 1);
    for (int gi = 0; gi < ngpu; gi++) {
        const qf_ops *g = gpus[gi];
        /* with_bias == 2: the bias is a view one element into its buffer (not 16-byte aligned) */
        float *bpad = qf_calloc((size_t)OUT + 1, 4);
        memcpy(bpad + 1, b, (size_t)OUT * 4);
        void *dX = up(g, x, (size_t)N * IN), *dW = up(g, w, (size_t)OUT * IN), *dBbuf = up(g, bpad, (size_t)OUT + 1);
        void *dB = (char *)dBbuf + g->act_bytes;
        if (with_bias != 2) { /* aligned: b at the start of the buffer */
            float *st = g->alloc((size_t)OUT * 4);
            g->copy_h2d(st, b, (size_t)OUT * 4);
            g->act_from_f32(dBbuf, st, OUT);
            g->free(st);
            dB = dBbuf;
        }
        void *dY = up(g, o0, (size_t)N * OUT), *dYa = up(g, o0, (size_t)N * OUT), *dG = up(g, dout, (size_t)N * OUT);
        float *nanx = fnan((size_t)N * IN);
        void *ddx = up(g, nanx, (size_t)N * IN), *ddw = up(g, dw0, (size_t)OUT * IN), *ddb = up(g, db0, OUT);
        void *ddxa = up(g, dx0, (size_t)N * IN);
        g->matmul_fwd(dY, dX, dW, with_bias ? dB : NULL, N, IN, OUT, 0);
        g->matmul_fwd(dYa, dX, dW, with_bias ? dB : NULL, N, IN, OUT, 1);
        void *dR = up(g, o0, (size_t)N * OUT), *dYr = up(g, o0, (size_t)N * OUT); /* dYr: stale values, overwritten */
        g->matmul_fwd_add(dYr, dX, dW, dR, N, IN, OUT);
        g->matmul_bwd(ddx, ddw, with_bias ? ddb : NULL, dG, dX, dW, N, IN, OUT, 0);
        g->matmul_bwd(ddxa, NULL, NULL, dG, dX, dW, N, IN, OUT, 1);
        cmp(g,
            check_name("matmul_fwd %dx%d->%d%s", N, IN, OUT,
                       with_bias == 2 ? " +unaligned bias"
                       : with_bias    ? " +bias"
                                      : ""),
            dY, y, (size_t)N * OUT, TOL_ACT);
        snprintf(nm, sizeof nm, "matmul_fwd %dx%d->%d%s, accumulate", N, IN, OUT,
                 with_bias == 2 ? " +unaligned bias" : with_bias ? " +bias" : "");
        cmp(g, nm, dYa, ya, (size_t)N * OUT, TOL_ACT);
        if (!with_bias) /* the residual form against the CPU's copy + accumulate */
            cmp(g, check_name("matmul_fwd_add %dx%d->%d (out = res + x W^T)", N, IN, OUT), dYr, ya, (size_t)N * OUT,
                TOL_ACT);
        g->free(dR), g->free(dYr);
        cmp(g, check_name("matmul_bwd dx (write over NaN) %dx%d->%d", N, IN, OUT), ddx, dx, (size_t)N * IN, TOL_ACT);
        cmp(g, check_name("matmul_bwd dw (+=) %dx%d->%d", N, IN, OUT), ddw, dw, (size_t)OUT * IN, TOL_ACT);
        if (with_bias) {
            cmp(g, check_name("matmul_bwd db (+=) %dx%d->%d", N, IN, OUT), ddb, db, OUT, TOL_ACT);
        }
        cmp(g, check_name("matmul_bwd dx accumulate_dx=1, dw=db=NULL %dx%d->%d", N, IN, OUT), ddxa, dxa, (size_t)N * IN,
            TOL_ACT);
        g->free(dX), g->free(dW), g->free(dBbuf), g->free(dY), g->free(dYa), g->free(dG), g->free(ddx), g->free(ddw);
        g->free(ddb), g->free(ddxa);
        free(nanx), free(bpad);
    }
    free(x), free(w), free(b), free(o0), free(dout), free(dw0), free(db0), free(dx0), free(y), free(ya), free(dx);
    free(dw), free(db), free(dxa);
}

/* ---- RMSNorm -------------------------------------------------------------------------------------------------- */
static void test_rmsnorm(int N, int C) {
    const size_t n = (size_t)N * C;
    float *x = frand(n, 2), *w = frand(C, 1.5), *dout = frand(n, 1), *dw0 = frand(C, 1), *dx0 = frand(n, 1);
    float *y = qf_malloc(n * 4), *rs = qf_malloc((size_t)N * 4), *dx = qf_malloc(n * 4), *dw = fdup(dw0, C);
    float *dxa = fdup(dx0, n), *dwa = fdup(dw0, C);
    cpu->rmsnorm_fwd(y, rs, x, w, N, C, 1e-6f);
    cpu->rmsnorm_bwd(dx, dw, dout, x, w, rs, N, C, 0);
    cpu->rmsnorm_bwd(dxa, dwa, dout, x, w, rs, N, C, 1);
    for (int gi = 0; gi < ngpu; gi++) {
        const qf_ops *g = gpus[gi];
        float *nanv = fnan(n);
        void *dX = up(g, x, n), *dWt = up(g, w, C), *dY = up(g, nanv, n), *dG = up(g, dout, n);
        float *dR = g->alloc((size_t)N * 4);
        void *ddx = up(g, nanv, n), *ddw = up(g, dw0, C), *ddxa = up(g, dx0, n), *ddwa = up(g, dw0, C);
        g->rmsnorm_fwd(dY, dR, dX, dWt, N, C, 1e-6f);
        g->rmsnorm_bwd(ddx, ddw, dG, dX, dWt, dR, N, C, 0);
        g->rmsnorm_bwd(ddxa, ddwa, dG, dX, dWt, dR, N, C, 1);
        cmp(g, check_name("rmsnorm_fwd out [%d, %d]", N, C), dY, y, n, TOL_ACT);
        cmp_f32(g, check_name("rmsnorm_fwd rstd [%d, %d]", N, C), dR, rs, N, TOL_ACT);
        cmp(g, check_name("rmsnorm_bwd dx (write) [%d, %d]", N, C), ddx, dx, n, TOL_ACT);
        cmp(g, check_name("rmsnorm_bwd dw (+=) [%d, %d]", N, C), ddw, dw, C, TOL_ACT);
        cmp(g, check_name("rmsnorm_bwd dx (accumulate onto residual grad) [%d, %d]", N, C), ddxa, dxa, n, TOL_ACT);
        /* dx aliasing dout (allowed by the CPU table): same result */
        void *alias = up(g, dout, n), *ddw2 = up(g, dw0, C);
        g->rmsnorm_bwd(alias, ddw2, alias, dX, dWt, dR, N, C, 0);
        cmp(g, check_name("rmsnorm_bwd dx with dx == dout [%d, %d]", N, C), alias, dx, n, TOL_ACT);
        g->free(dX), g->free(dWt), g->free(dY), g->free(dG), g->free(dR), g->free(ddx), g->free(ddw), g->free(ddxa);
        g->free(ddwa), g->free(alias), g->free(ddw2);
        free(nanv);
    }
    free(x), free(w), free(dout), free(dw0), free(dx0), free(y), free(rs), free(dx), free(dw), free(dxa), free(dwa);
}

/* ---- RoPE ------------------------------------------------------------------------------------------------------- */
static void test_rope(int B, int T, int nh, int D, double theta) {
    const int N = B * T;
    const size_t n = (size_t)N * nh * D;
    int32_t *pos = qf_malloc((size_t)N * 4);
    for (int b = 0; b < B; b++) {
        int start = 0;
        for (int t = 0; t < T; t++) {
            if (t > 0 && urand() < 0.01) start = t; /* packed documents restart positions */
            pos[b * T + t] = t - start;
        }
    }
    float *x = frand(n, 2), *y = fdup(x, n), *yb = fdup(x, n);
    cpu->rope_fwd(y, pos, N, nh, D, theta);
    cpu->rope_bwd(yb, pos, N, nh, D, theta);
    for (int gi = 0; gi < ngpu; gi++) {
        const qf_ops *g = gpus[gi];
        int32_t *dP = up_raw(g, pos, (size_t)N * 4);
        void *dX = up(g, x, n), *dXb = up(g, x, n);
        g->rope_fwd(dX, dP, N, nh, D, theta);
        g->rope_bwd(dXb, dP, N, nh, D, theta);
        cmp(g, check_name("rope_fwd [%d, %d, %d] theta %g", N, nh, D, theta), dX, y, n, TOL_ACT);
        cmp(g, check_name("rope_bwd [%d, %d, %d] theta %g", N, nh, D, theta), dXb, yb, n, TOL_ACT);
        g->free(dP), g->free(dX), g->free(dXb);
    }
    free(pos), free(x), free(y), free(yb);
}

/* ---- attention ------------------------------------------------------------------------------------------------ */
/* one attention case on the given seg_start (test_attention draws one with make_segments: documents of random
 * lengths per row, ndocs_hint 1 = one document per row) */
static void test_attention_seg(int B, int T, int H, int KV, int D, const int32_t *seg, const char *what) {
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D, nl = (size_t)B * H * T;
    float *q = frand(nq, 1.5), *k = frand(nk, 1.5), *v = frand(nk, 1), *dout = frand(nq, 1);
    float *out = qf_malloc(nq * 4), *lse = qf_malloc(nl * 4);
    float *dq = qf_malloc(nq * 4), *dk = qf_malloc(nk * 4), *dv = qf_malloc(nk * 4);
    cpu->attention_fwd(out, lse, q, k, v, seg, B, T, H, KV, D);
    /* the backward consumes out as the backend stores it: rounded to a value bf16 and fp16 hold, for all tables */
    float *outr = qf_malloc(nq * 4);
    for (size_t i = 0; i < nq; i++) outr[i] = both(out[i]);
    cpu->attention_bwd(dq, dk, dv, dout, outr, lse, q, k, v, seg, B, T, H, KV, D);
    qf_cuda_set_attention_path(1); /* the mma.sync kernels (cuDNN's path: test_attn_cuda) */
    /* the bf16 and fp16 tables run the tensor-core kernels at D = 64 and 128, the generic ones otherwise; the fp32
     * table the generic kernels */
    for (int gi = 0; gi < ngpu; gi++) {
        const qf_ops *g = gpus[gi];
        float *nq_nan = fnan(nq), *nk_nan = fnan(nk);
        void *dQ = up(g, q, nq), *dK = up(g, k, nk), *dV = up(g, v, nk), *dG = up(g, dout, nq);
        void *dO = up(g, nq_nan, nq);
        float *dL = g->alloc(nl * 4);
        int32_t *dS = up_raw(g, seg, (size_t)B * T * 4);
        void *ddq = up(g, nq_nan, nq), *ddk = up(g, nk_nan, nk), *ddv = up(g, nk_nan, nk);
        g->attention_fwd(dO, dL, dQ, dK, dV, dS, B, T, H, KV, D);
        cmp(g, check_name("attention_fwd out B%d T%d H%d KV%d D%d %s", B, T, H, KV, D, what), dO, out, nq, TOL_ACT);
        cmp_f32(g, check_name("attention_fwd lse B%d T%d H%d KV%d D%d %s", B, T, H, KV, D, what), dL, lse, nl, TOL_ACT);
        /* backward on the CPU's (bf16-rounded) out and lse, so that only the backward is compared */
        void *dOr = up(g, outr, nq);
        g->copy_h2d(dL, lse, nl * 4);
        g->attention_bwd(ddq, ddk, ddv, dG, dOr, dL, dQ, dK, dV, dS, B, T, H, KV, D);
        cmp(g, check_name("attention_bwd dq B%d T%d H%d KV%d D%d %s", B, T, H, KV, D, what), ddq, dq, nq, TOL_ATT_BWD);
        cmp(g, check_name("attention_bwd dk B%d T%d H%d KV%d D%d %s", B, T, H, KV, D, what), ddk, dk, nk, TOL_ATT_BWD);
        cmp(g, check_name("attention_bwd dv B%d T%d H%d KV%d D%d %s", B, T, H, KV, D, what), ddv, dv, nk, TOL_ATT_BWD);
        /* determinism: a second backward is bitwise identical */
        float *a1 = down_new(g, ddq, nq), *k1 = down_new(g, ddk, nk);
        g->attention_bwd(ddq, ddk, ddv, dG, dOr, dL, dQ, dK, dV, dS, B, T, H, KV, D);
        float *a2 = down_new(g, ddq, nq), *k2 = down_new(g, ddk, nk);
        report_bool(g, check_name("attention_bwd is deterministic (dq, dk bitwise) B%d T%d D%d", B, T, D),
                    !memcmp(a1, a2, nq * 4) && !memcmp(k1, k2, nk * 4));
        free(a1), free(a2), free(k1), free(k2);
        g->free(dQ), g->free(dK), g->free(dV), g->free(dG), g->free(dO), g->free(dL), g->free(dS), g->free(ddq);
        g->free(ddk), g->free(ddv), g->free(dOr);
        free(nq_nan), free(nk_nan);
    }
    qf_cuda_set_attention_path(0);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv), free(outr);
}
static void test_attention(int B, int T, int H, int KV, int D, int ndocs) {
    int32_t *seg = qf_malloc((size_t)B * T * 4);
    make_segments(seg, B, T, ndocs);
    test_attention_seg(B, T, H, KV, D, seg, ndocs > 1 ? "(packed docs)" : "(one doc)");
    free(seg);
}

/* ---- SwiGLU, add, scale ------------------------------------------------------------------------------------- */
static void test_swiglu(int N, int F) {
    const size_t n = (size_t)N * F;
    float *gt = frand(n, 4), *u = frand(n, 2), *d = frand(n, 1);
    float *o = qf_malloc(n * 4), *dg = qf_malloc(n * 4), *du = qf_malloc(n * 4);
    cpu->swiglu_fwd(o, gt, u, N, F);
    cpu->swiglu_bwd(dg, du, d, gt, u, N, F);
    for (int gi = 0; gi < ngpu; gi++) {
        const qf_ops *g = gpus[gi];
        float *nanv = fnan(n);
        void *dG = up(g, gt, n), *dU = up(g, u, n), *dD = up(g, d, n), *dO = up(g, nanv, n);
        void *ddg = up(g, nanv, n), *ddu = up(g, nanv, n);
        g->swiglu_fwd(dO, dG, dU, N, F);
        g->swiglu_bwd(ddg, ddu, dD, dG, dU, N, F);
        cmp(g, check_name("swiglu_fwd [%d, %d]", N, F), dO, o, n, TOL_ACT);
        cmp(g, check_name("swiglu_bwd dgate [%d, %d]", N, F), ddg, dg, n, TOL_ACT);
        cmp(g, check_name("swiglu_bwd dup [%d, %d]", N, F), ddu, du, n, TOL_ACT);
        g->free(dG), g->free(dU), g->free(dD), g->free(dO), g->free(ddg), g->free(ddu);
        free(nanv);
    }
    free(gt), free(u), free(d), free(o), free(dg), free(du);
}

/* ---- argmax_rows (greedy decoding's pick) ------------------------------------------------------------------------ */
/* n rows of V logits as the table holds them: the CPU's index (the first maximum) for every row; row 1 repeats its
 * maximum at a later index, row 2 puts it at the last index, row 3 at the first */
static void test_argmax(int n, int V) {
    float *x = frand((size_t)n * V, 3);
    for (int gi = 0; gi < ngpu; gi++) {
        const qf_ops *g = gpus[gi];
        float *xr = qf_malloc((size_t)n * V * 4);
        for (size_t i = 0; i < (size_t)n * V; i++) xr[i] = actr(g, x[i]);
        if (n > 1) xr[(size_t)V + V / 3] = 50.0f, xr[(size_t)V + V / 3 + 8] = 50.0f, xr[(size_t)V + V - 1] = 50.0f;
        if (n > 2) xr[(size_t)2 * V + V - 1] = 60.0f;
        if (n > 3) xr[(size_t)3 * V] = 70.0f;
        int32_t *want = qf_malloc((size_t)n * 4), *got = qf_malloc((size_t)n * 4);
        cpu->argmax_rows(want, NULL, xr, n, V);
        void *d = up(g, xr, (size_t)n * V);
        g->argmax_rows(got, NULL, d, n, V);
        int same = 1;
        for (int r = 0; r < n; r++) same &= got[r] == want[r];
        report_bool(g, check_name("argmax_rows [%d, %d]: the CPU's indices", n, V), same);
        g->free(d);
        free(xr), free(want), free(got);
    }
    free(x);
}

static void test_flat(size_t n) {
    char nm[160];
    float *y = frand(n, 1), *x = frand(n, 1), *ya = fdup(y, n), *ys = fdup(y, n);
    cpu->add_inplace(ya, x, n);
    cpu->scale(ys, 0.37f, n);
    const double ss = cpu->sumsq(y, n);
    for (int gi = 0; gi < ngpu; gi++) {
        const qf_ops *g = gpus[gi];
        void *dY = up(g, y, n), *dX = up(g, x, n), *dYs = up(g, y, n);
        g->add_inplace(dY, dX, n);
        g->scale(dYs, 0.37f, n);
        cmp(g, check_name("add_inplace n=%zu", n), dY, ya, n, TOL_ACT);
        cmp(g, check_name("scale n=%zu", n), dYs, ys, n, TOL_ACT);
        void *dS = up(g, y, n);
        const double gs = g->sumsq(dS, n), gs2 = g->sumsq(dS, n);
        report(g, check_name("sumsq n=%zu (double, relative)", n), relerr_d(gs, ss), 1e-12);
        report_bool(g, "sumsq is deterministic", gs == gs2);
        { /* sumsq_to: the same bits, written on the device (two sums in one buffer, then one copy down) */
            double *dd = g->alloc(2 * sizeof(double)), hd[2] = {-1.0, -1.0};
            g->sumsq_to(dd, dS, n);
            g->sumsq_to(dd + 1, dS, 0);
            g->copy_d2h(hd, dd, sizeof hd);
            report_bool(g, check_name("sumsq_to n=%zu == sumsq bit for bit", n), hd[0] == gs);
            report_bool(g, "sumsq_to of 0 elements writes 0", hd[1] == 0.0);
            g->free(dd);
        }
        /* odd offset (unaligned view) */
        const double so = cpu->sumsq(y + 3, n - 3);
        const double go = g->sumsq((char *)dS + 3 * g->act_bytes, n - 3);
        report(g, "sumsq of an unaligned view (offset 3 elements)", relerr_d(go, so), 1e-12);
        report_bool(g, "nonfinite = 0 on finite data", g->nonfinite(dS, n) == 0);
        float bad[1] = {INFINITY};
        float *st = g->alloc(16);
        g->copy_h2d(st, bad, 4);
        g->act_from_f32((char *)dS + (n - 2) * g->act_bytes, st, 1);
        report_bool(g, "nonfinite = 1 with one inf near the end", g->nonfinite(dS, n) == 1);
        bad[0] = NAN;
        g->copy_h2d(st, bad, 4);
        g->act_from_f32(dS, st, 1);
        report_bool(g, "nonfinite = 1 with a NaN first (poison: scale(g, NAN, 1))", g->nonfinite(dS, 1) == 1);
        void *dP = up(g, y, n);
        g->scale(dP, NAN, 1);
        report_bool(g, "scale(g, NAN, 1) poisons; nonfinite sees it", g->nonfinite(dP, n) == 1);
        {
            /* the loss scaler's overflow: |y| < 1 scaled by 1e5 exceeds fp16's 65504 (inf), not bf16's or fp32's range */
            void *dO = up(g, y, n);
            g->scale(dO, 1e5f, n);
            snprintf(nm, sizeof nm, "scale by 1e5 overflows%s: nonfinite = %d", g->act_dtype == QF_DT_F16 ? "" : " not",
                     g->act_dtype == QF_DT_F16);
            report_bool(g, nm, g->nonfinite(dO, n) == (g->act_dtype == QF_DT_F16));
            g->free(dO);
        }
        g->free(dY), g->free(dX), g->free(dYs), g->free(dS), g->free(st), g->free(dP);
    }
    free(y), free(x), free(ya), free(ys);
}

/* ---- embedding ---------------------------------------------------------------------------------------------- */
static void test_embedding(int N, int C, int V) {
    int32_t *tok = qf_malloc((size_t)N * 4);
    for (int n = 0; n < N; n++) tok[n] = n % 5 == 0 ? 7 % V : (int32_t)(urand() * V); /* token 7 repeated a lot */
    float *wte = frand((size_t)V * C, 1), *dout = frand((size_t)N * C, 1), *dw0 = frand((size_t)V * C, 1);
    float *out = qf_malloc((size_t)N * C * 4), *dw = fdup(dw0, (size_t)V * C);
    cpu->embedding_fwd(out, tok, wte, N, C);
    cpu->embedding_bwd(dw, dout, tok, N, C, V);
    for (int gi = 0; gi < ngpu; gi++) {
        const qf_ops *g = gpus[gi];
        int32_t *dT = up_raw(g, tok, (size_t)N * 4);
        float *nanv = fnan((size_t)N * C);
        void *dW = up(g, wte, (size_t)V * C), *dO = up(g, nanv, (size_t)N * C), *dG = up(g, dout, (size_t)N * C);
        void *ddw = up(g, dw0, (size_t)V * C);
        g->embedding_fwd(dO, dT, dW, N, C);
        float *o = down_new(g, dO, (size_t)N * C);
        report_bool(g, check_name("embedding_fwd exact [N %d, C %d, V %d]", N, C, V),
                    !memcmp(o, out, (size_t)N * C * 4));
        g->embedding_bwd(ddw, dG, dT, N, C, V);
        cmp(g, check_name("embedding_bwd dwte (+=, repeated tokens) [N %d, C %d, V %d]", N, C, V), ddw, dw,
            (size_t)V * C, TOL_ACT);
        if (g->act_bytes == 4) {
            float *h = down_new(g, ddw, (size_t)V * C);
            report_bool(g, check_name("embedding_bwd fp32 bitwise equal to the CPU (same order) [N %d]", N),
                        !memcmp(h, dw, (size_t)V * C * 4));
            free(h);
        }
        g->free(dT), g->free(dW), g->free(dO), g->free(dG), g->free(ddw);
        free(o), free(nanv);
    }
    free(tok), free(wte), free(dout), free(dw0), free(out), free(dw);
}

/* ---- classifier --------------------------------------------------------------------------------------------- */
/* The bf16 table follows HF's bf16 lm_head: logits rounded to bf16, softmax in fp32, dlogits rounded to bf16, then
 * the two GEMMs. Rounding logits of size ~5 to bf16 moves them by up to ~0.02, i.e. the probabilities by ~2%, so
 * against the fp32 CPU op the gradients differ by ~2e-2 (TOL_CLS_VS_F32). This emulation of HF's bf16 path
 * (CPU GEMMs, bf16 rounding where HF rounds) checks the kernels themselves more tightly: the loss agrees to ~1e-6;
 * dx/dw keep a residual of up to ~1e-2 because the emulation rounds logits that its own fp32 GEMM computed in another
 * summation order, and a dominant logit that lands on the other side of a bf16 rounding boundary (one bf16 ulp,
 * ~0.06 at |logit| ~ 15) moves its probability by a few percent (measured on the H200: dx 1.1e-2, dw 6.5e-3 at
 * N=512, C=1024, V=32000), hence TOL_CLS_EMU = 2e-2. The fp16 table is the same with fp16 roundings (rnd = f16r):
 * every effect is 8 times smaller (an fp16 ulp at 15 is ~0.008), and so are its tolerances. */
static void cls_ref(float (*rnd)(float), double *loss, float *dx, float *dw, const float *x, const float *w,
                    const int32_t *tgt, int N, int C, int V, float gsc) {
    float *lg = qf_malloc((size_t)N * V * 4);
    cpu->matmul_fwd(lg, x, w, NULL, N, C, V, 0);
    double tot = 0.0;
    for (int n = 0; n < N; n++) {
        float *row = lg + (size_t)n * V;
        for (int j = 0; j < V; j++) row[j] = rnd(row[j]);
        if (tgt[n] < 0) {
            memset(row, 0, (size_t)V * 4);
            continue;
        }
        float m = -INFINITY;
        for (int j = 0; j < V; j++) m = row[j] > m ? row[j] : m;
        double se = 0.0;
        for (int j = 0; j < V; j++) se += (double)expf(row[j] - m);
        const float lse = m + (float)log(se);
        tot += -(double)(row[tgt[n]] - lse);
        for (int j = 0; j < V; j++) row[j] = rnd((expf(row[j] - lse) - (j == tgt[n] ? 1.0f : 0.0f)) * gsc);
    }
    *loss = tot;
    cpu->matmul_bwd(dx, dw, NULL, lg, x, w, N, C, V, 0);
    free(lg);
}
/* the CPU references of one grad_scale: the fp32 op (dx, dw, loss) and the emulation of HF's 16-bit path with rnd */
typedef struct {
    float *dx, *dw, *dxh, *dwh;
    double loss, lossh;
} cls_refs;
static void cls_refs_make(cls_refs *r, float (*rnd)(float), const float *x, const float *w, const float *dw0,
                          const int32_t *tgt, int N, int C, int V, float gsc) {
    r->dx = qf_malloc((size_t)N * C * 4), r->dw = fdup(dw0, (size_t)V * C);
    r->dxh = qf_malloc((size_t)N * C * 4), r->dwh = fdup(dw0, (size_t)V * C);
    cpu->classifier(&r->loss, r->dx, r->dw, x, w, tgt, N, C, V, gsc);
    cls_ref(rnd, &r->lossh, r->dxh, r->dwh, x, w, tgt, N, C, V, gsc);
}
static void cls_refs_free(cls_refs *r) { free(r->dx), free(r->dw), free(r->dxh), free(r->dwh); }
static void test_classifier(int N, int C, int V) {
    char nm[160];
    int32_t *tgt = qf_malloc((size_t)N * 4);
    int ntrain = 0;
    for (int n = 0; n < N; n++) {
        tgt[n] = n % 7 == 3 ? -1 : (int32_t)(urand() * V);
        ntrain += tgt[n] >= 0;
    }
    const float gsc = 1.0f / (float)(ntrain ? ntrain : 1);
    float *x = frand((size_t)N * C, 1), *w = frand((size_t)V * C, 0.5), *dw0 = frand((size_t)V * C, 1e-5);
    double loss_eval = 0;
    cpu->classifier(&loss_eval, NULL, NULL, x, w, tgt, N, C, V, 1.0f);
    /* bf16 and fp32 tables: grad_scale gsc; fp16: gsc * LS_F16 (loss-scaled, as fp16 training runs it) */
    cls_refs rb, rh;
    cls_refs_make(&rb, bfr, x, w, dw0, tgt, N, C, V, gsc);
    cls_refs_make(&rh, f16r, x, w, dw0, tgt, N, C, V, gsc * LS_F16);
    for (int gi = 0; gi < ngpu; gi++) {
        const qf_ops *g = gpus[gi];
        const int h16 = g->act_dtype == QF_DT_F16;
        const cls_refs *r = h16 ? &rh : &rb;
        const float gs = h16 ? gsc * LS_F16 : gsc;
        const char *ls = h16 ? ", loss scale 1024" : "";
        int32_t *dT = up_raw(g, tgt, (size_t)N * 4);
        float *nanv = fnan((size_t)N * C);
        void *dX = up(g, x, (size_t)N * C), *dW = up(g, w, (size_t)V * C), *ddx = up(g, nanv, (size_t)N * C);
        void *ddw = up(g, dw0, (size_t)V * C);
        double gl = 0, gle = 0;
        g->classifier(&gle, NULL, NULL, dX, dW, dT, N, C, V, 1.0f);
        g->classifier(&gl, ddx, ddw, dX, dW, dT, N, C, V, gs);
        report(g, check_name("classifier loss_sum (eval, dx = NULL) [N %d, C %d, V %d]", N, C, V),
               relerr_d(gle, loss_eval), tol_of(g, TOL_ACT));
        report(g, check_name("classifier loss_sum (train) [N %d, C %d, V %d]", N, C, V), relerr_d(gl, r->loss),
               tol_of(g, TOL_ACT));
        cmp(g, check_name("classifier dx vs the fp32 CPU op [N %d, C %d, V %d%s]", N, C, V, ls), ddx, r->dx,
            (size_t)N * C, TOL_CLS_VS_F32);
        cmp(g, check_name("classifier dw (+=) vs the fp32 CPU op [N %d, C %d, V %d%s]", N, C, V, ls), ddw, r->dw,
            (size_t)V * C, TOL_CLS_VS_F32);
        if (g->act_bytes == 2) {
            const char *ty = h16 ? "fp16" : "bf16";
            report(g, check_name("classifier loss_sum vs HF-%s emulation [N %d, C %d, V %d]", ty, N, C, V),
                   relerr_d(gl, r->lossh), tol_of(g, TOL_ACT));
            cmp(g, check_name("classifier dx vs HF-%s emulation [N %d, C %d, V %d%s]", ty, N, C, V, ls), ddx, r->dxh,
                (size_t)N * C, TOL_CLS_EMU);
            cmp(g, check_name("classifier dw (+=) vs HF-%s emulation [N %d, C %d, V %d%s]", ty, N, C, V, ls), ddw,
                r->dwh, (size_t)V * C, TOL_CLS_EMU);
        }
        /* dx aliasing x (allowed: dW is computed before dx, chunk by chunk) */
        void *alias = up(g, x, (size_t)N * C), *ddw2 = up(g, dw0, (size_t)V * C);
        double gl2 = 0;
        g->classifier(&gl2, alias, ddw2, alias, dW, dT, N, C, V, gs);
        snprintf(nm, sizeof nm, "classifier dx with dx == x: same as dx != x, bitwise [N %d, C %d, V %d]", N, C, V);
        {
            float *a1 = down_new(g, alias, (size_t)N * C), *a2 = down_new(g, ddx, (size_t)N * C);
            report_bool(g, nm, !memcmp(a1, a2, (size_t)N * C * 4));
            free(a1), free(a2);
        }
        report_bool(g, "classifier is deterministic (same loss bitwise)", gl2 == gl);
        g->free(dT), g->free(dX), g->free(dW), g->free(ddx), g->free(ddw), g->free(alias), g->free(ddw2);
        free(nanv);
    }
    cls_refs_free(&rb), cls_refs_free(&rh);
    free(tgt), free(x), free(w), free(dw0);
}

/* ---- AdamW -------------------------------------------------------------------------------------------------- */
static void test_adamw(size_t n) {
    float *p = frand(n, 1), *g0 = frand(n, 0.1), *g1 = frand(n, 0.1), *m = qf_calloc(n, 4), *v = qf_calloc(n, 4);
    float *pc = fdup(p, n), *mc = fdup(m, n), *vc = fdup(v, n), *pac = qf_malloc(n * 4);
    cpu->adamw(pc, pac, g0, mc, vc, n, 0.5f, 2e-5f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    cpu->adamw(pc, pac, g1, mc, vc, n, 0.5f, 2e-5f, 0.9f, 0.999f, 1e-8f, 0.01f, 2);
    for (int gi = 0; gi < ngpu; gi++) {
        const qf_ops *g = gpus[gi];
        float *dp = up_raw(g, p, n * 4), *dm = up_raw(g, m, n * 4), *dv = up_raw(g, v, n * 4);
        void *dg0 = up(g, g0, n), *dg1 = up(g, g1, n), *dpa = g->alloc(n * g->act_bytes);
        g->adamw(dp, dpa, dg0, dm, dv, n, 0.5f, 2e-5f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
        g->adamw(dp, dpa, dg1, dm, dv, n, 0.5f, 2e-5f, 0.9f, 0.999f, 1e-8f, 0.01f, 2);
        float *hp = down_raw_f32(g, dp, n), *hm = down_raw_f32(g, dm, n), *hv = down_raw_f32(g, dv, n);
        float *hpa = down_new(g, dpa, n);
        /* inputs are identical (g0, g1 are exact in bf16 and fp16): master/moments match the CPU bit for bit in every
         * table */
        report_bool(g, check_name("adamw 2 steps n=%zu: master p, m, v bitwise equal to the CPU", n),
                    !memcmp(hp, pc, n * 4) && !memcmp(hm, mc, n * 4) && !memcmp(hv, vc, n * 4));
        report(g, "adamw p_act (act dtype)", relerr(hpa, pac, n), tol_of(g, TOL_ADAMW_ACT));
        /* unaligned view (offset 1 element) */
        float *dp2 = up_raw(g, p, n * 4), *dm2 = g->alloc(n * 4), *dv2 = g->alloc(n * 4);
        float *pc2 = fdup(p, n), *mc2 = qf_calloc(n, 4), *vc2 = qf_calloc(n, 4);
        cpu->adamw(pc2 + 1, NULL, g0 + 1, mc2 + 1, vc2 + 1, n - 1, 1.0f, 1e-3f, 0.9f, 0.95f, 1e-6f, 0.1f, 1);
        g->adamw(dp2 + 1, NULL, (char *)dg0 + g->act_bytes, dm2 + 1, dv2 + 1, n - 1, 1.0f, 1e-3f, 0.9f, 0.95f, 1e-6f,
                 0.1f, 1);
        float *hp2 = down_raw_f32(g, dp2, n);
        report_bool(g, "adamw on an unaligned view, p_act = NULL: bitwise equal", !memcmp(hp2, pc2, n * 4));
        g->free(dp), g->free(dm), g->free(dv), g->free(dg0), g->free(dg1), g->free(dpa), g->free(dp2), g->free(dm2);
        g->free(dv2);
        free(hp), free(hm), free(hv), free(hpa), free(pc2), free(mc2), free(vc2), free(hp2);
    }
    free(p), free(g0), free(g1), free(m), free(v), free(pc), free(mc), free(vc), free(pac);
}

/* ================================================================================================================
 * benchmark (bf16 table)
 * ================================================================================================================ */
static double time_it(const qf_ops *g, void (*fn)(void *), void *arg, int reps) {
    for (int i = 0; i < 2; i++) fn(arg);
    g->sync();
    double best[5];
    for (int r = 0; r < 5; r++) {
        const double t0 = qf_now();
        for (int i = 0; i < reps; i++) fn(arg);
        g->sync();
        best[r] = (qf_now() - t0) / reps;
    }
    for (int i = 0; i < 5; i++) /* median of 5 */
        for (int j = i + 1; j < 5; j++)
            if (best[j] < best[i]) {
                double t = best[i];
                best[i] = best[j], best[j] = t;
            }
    return best[2];
}
typedef struct {
    const qf_ops *g;
    void *x, *w, *out, *dout, *dx, *dw;
    int N, IN, OUT;
} mm_b;
static void mm_fwd_fn(void *a_) {
    mm_b *a = a_;
    a->g->matmul_fwd(a->out, a->x, a->w, NULL, a->N, a->IN, a->OUT, 0);
}
static void mm_bwd_fn(void *a_) {
    mm_b *a = a_;
    a->g->matmul_bwd(a->dx, a->dw, NULL, a->dout, a->x, a->w, a->N, a->IN, a->OUT, 0);
}
/* n random act values: a block of up to 4M drawn on the host, repeated on the device (benchmark data only) */
static void *dev_rand(const qf_ops *g, size_t n, double a) {
    const size_t blk = n < ((size_t)4 << 20) ? n : ((size_t)4 << 20);
    float *h = qf_malloc(blk * 4);
    for (size_t i = 0; i < blk; i++) h[i] = (float)((2.0 * urand() - 1.0) * a);
    void *d = g->alloc(n * g->act_bytes);
    void *s = up(g, h, blk);
    QF_CHECK(d);
    for (size_t i = 0; i < n; i += blk)
        g->copy_d2d((char *)d + i * g->act_bytes, s, (n - i < blk ? n - i : blk) * g->act_bytes);
    g->free(s);
    free(h);
    return d;
}
static void bench_matmul(const qf_ops *g, const char *name, int N, int IN, int OUT) {
    mm_b a = {.g = g, .N = N, .IN = IN, .OUT = OUT};
    a.x = dev_rand(g, (size_t)N * IN, 1), a.w = dev_rand(g, (size_t)OUT * IN, 0.05);
    a.out = g->alloc((size_t)N * OUT * 2), a.dout = dev_rand(g, (size_t)N * OUT, 0.01);
    a.dx = g->alloc((size_t)N * IN * 2), a.dw = g->alloc((size_t)OUT * IN * 2);
    const double fl = 2.0 * N * IN * OUT;
    const double tf = time_it(g, mm_fwd_fn, &a, 10), tb = time_it(g, mm_bwd_fn, &a, 10);
    printf("bench matmul %-22s N=%d %5d->%-6d  fwd %7.3f ms %6.1f TFLOP/s   bwd(dx+dw) %7.3f ms %6.1f TFLOP/s\n", name, N,
           IN, OUT, tf * 1e3, fl / tf / 1e12, tb * 1e3, 2 * fl / tb / 1e12);
    g->free(a.x), g->free(a.w), g->free(a.out), g->free(a.dout), g->free(a.dx), g->free(a.dw);
}
typedef struct {
    const qf_ops *g;
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse;
    int32_t *seg;
    int B, T, H, KV, D;
} att_b;
static void att_fwd_fn(void *a_) {
    att_b *a = a_;
    a->g->attention_fwd(a->o, a->lse, a->q, a->k, a->v, a->seg, a->B, a->T, a->H, a->KV, a->D);
}
static void att_bwd_fn(void *a_) {
    att_b *a = a_;
    a->g->attention_bwd(a->dq, a->dk, a->dv, a->dout, a->o, a->lse, a->q, a->k, a->v, a->seg, a->B, a->T, a->H, a->KV,
                        a->D);
}
static void bench_attention(const qf_ops *g, int B, int T, int H, int KV, int D, int docs) {
    att_b a = {.g = g, .B = B, .T = T, .H = H, .KV = KV, .D = D};
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D;
    a.q = dev_rand(g, nq, 1), a.k = dev_rand(g, nk, 1), a.v = dev_rand(g, nk, 1), a.dout = dev_rand(g, nq, 0.1);
    a.o = g->alloc(nq * 2), a.dq = g->alloc(nq * 2), a.dk = g->alloc(nk * 2), a.dv = g->alloc(nk * 2);
    a.lse = g->alloc((size_t)B * H * T * 4);
    int32_t *seg = qf_malloc((size_t)B * T * 4);
    double pairs = 0; /* attended (query, key) pairs */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int len = T / docs;
            seg[b * T + t] = (t / len) * len;
            pairs += t - seg[b * T + t] + 1;
        }
    a.seg = up_raw(g, seg, (size_t)B * T * 4);
    /* SPEC-style causal count: 4 D H per attended pair forward (QK^T and PV), 2.5x that backward */
    const double ff = 4.0 * D * H * pairs, fb = 2.5 * ff;
    const double tf = time_it(g, att_fwd_fn, &a, 10), tb = time_it(g, att_bwd_fn, &a, 10);
    printf("bench attention B=%d T=%d H=%d KV=%d D=%d docs=%d: fwd %6.3f ms %6.1f TFLOP/s  bwd %6.3f ms %6.1f TFLOP/s  "
           "fwd+bwd %6.1f TFLOP/s\n",
           B, T, H, KV, D, docs, tf * 1e3, ff / tf / 1e12, tb * 1e3, fb / tb / 1e12, (ff + fb) / (tf + tb) / 1e12);
    g->free(a.q), g->free(a.k), g->free(a.v), g->free(a.dout), g->free(a.o), g->free(a.dq), g->free(a.dk);
    g->free(a.dv), g->free(a.lse), g->free(a.seg);
    free(seg);
}
typedef struct {
    const qf_ops *g;
    void *x, *w, *dx, *dw;
    int32_t *tgt;
    int N, C, V;
    double loss;
} cls_b;
static void cls_fn(void *a_) {
    cls_b *a = a_;
    a->g->classifier(&a->loss, a->dx, a->dw, a->x, a->w, a->tgt, a->N, a->C, a->V, 1.0f / a->N);
}
static void bench_classifier(const qf_ops *g, int N, int C, int V) {
    cls_b a = {.g = g, .N = N, .C = C, .V = V};
    a.x = dev_rand(g, (size_t)N * C, 1), a.w = dev_rand(g, (size_t)V * C, 0.02);
    a.dx = g->alloc((size_t)N * C * 2), a.dw = g->alloc((size_t)V * C * 2);
    int32_t *t = qf_malloc((size_t)N * 4);
    for (int n = 0; n < N; n++) t[n] = (int32_t)(urand() * V);
    a.tgt = up_raw(g, t, (size_t)N * 4);
    const double tt = time_it(g, cls_fn, &a, 3);
    printf("bench classifier N=%d C=%d V=%d (logits + CE + dx + dW): %7.3f ms %6.1f TFLOP/s\n", N, C, V, tt * 1e3,
           6.0 * N * C * V / tt / 1e12);
    g->free(a.x), g->free(a.w), g->free(a.dx), g->free(a.dw), g->free(a.tgt);
    free(t);
}
typedef struct {
    const qf_ops *g;
    void *a, *b, *c, *d, *w;
    float *f1, *f2, *f3, *rstd;
    size_t n;
    int N, C;
} bw_b;
static void rms_fwd_fn(void *p) {
    bw_b *a = p;
    a->g->rmsnorm_fwd(a->b, a->rstd, a->a, a->w, a->N, a->C, 1e-6f);
}
static void rms_bwd_fn(void *p) {
    bw_b *a = p;
    a->g->rmsnorm_bwd(a->c, a->d, a->b, a->a, a->w, a->rstd, a->N, a->C, 1);
}
static void swiglu_fn(void *p) {
    bw_b *a = p;
    a->g->swiglu_bwd(a->c, a->d, a->a, a->b, a->c, a->N, a->C);
}
static void adamw_fn(void *p) {
    bw_b *a = p;
    a->g->adamw(a->f1, a->d, a->a, a->f2, a->f3, a->n, 1.0f, 1e-5f, 0.9f, 0.999f, 1e-8f, 0.01f, 3);
}
static void sumsq_fn(void *p) {
    bw_b *a = p;
    (void)a->g->sumsq(a->a, a->n);
}
static void bench_bandwidth(const qf_ops *g) {
    bw_b a = {.g = g, .N = 4096, .C = 3584};
    const size_t n = (size_t)4096 * 3584;
    a.a = dev_rand(g, n, 1), a.b = dev_rand(g, n, 1), a.c = dev_rand(g, n, 1), a.w = dev_rand(g, 3584, 1);
    a.d = g->alloc(n * 2);
    a.rstd = g->alloc(4096 * 4);
    double t = time_it(g, rms_fwd_fn, &a, 20);
    printf("bench rmsnorm_fwd [4096, 3584]: %7.3f ms %6.0f GB/s\n", t * 1e3, 2.0 * n * 2 / t / 1e9);
    t = time_it(g, rms_bwd_fn, &a, 20);
    printf("bench rmsnorm_bwd [4096, 3584] (accumulate): %7.3f ms %6.0f GB/s\n", t * 1e3, 4.0 * n * 2 / t / 1e9);
    g->free(a.a), g->free(a.b), g->free(a.c), g->free(a.d);
    const size_t nf = (size_t)4096 * 18944;
    a.N = 4096, a.C = 18944;
    a.a = dev_rand(g, nf, 1), a.b = dev_rand(g, nf, 1), a.c = dev_rand(g, nf, 1), a.d = g->alloc(nf * 2);
    t = time_it(g, swiglu_fn, &a, 10);
    printf("bench swiglu_bwd [4096, 18944]: %7.3f ms %6.0f GB/s\n", t * 1e3, 5.0 * nf * 2 / t / 1e9);
    g->free(a.a), g->free(a.b), g->free(a.c), g->free(a.d);
    a.n = (size_t)256 << 20; /* 268M parameters */
    a.a = dev_rand(g, a.n, 0.1), a.d = g->alloc(a.n * 2);
    a.f1 = g->alloc(a.n * 4), a.f2 = g->alloc(a.n * 4), a.f3 = g->alloc(a.n * 4);
    t = time_it(g, adamw_fn, &a, 5);
    printf("bench adamw n=%zu: %7.3f ms %6.1f G params/s %6.0f GB/s\n", a.n, t * 1e3, a.n / t / 1e9,
           a.n * (2.0 + 12 + 12 + 2) / t / 1e9);
    t = time_it(g, sumsq_fn, &a, 5);
    printf("bench sumsq n=%zu (bf16): %7.3f ms %6.0f GB/s\n", a.n, t * 1e3, a.n * 2.0 / t / 1e9);
    g->free(a.a), g->free(a.d), g->free(a.f1), g->free(a.f2), g->free(a.f3), g->free(a.w), g->free(a.rstd);
}

static int bench(void) {
    const qf_ops *g = gpus[0];
    printf("benchmark: %s table (bf16 storage, fp32 accumulation)\n", g->name);
    /* Qwen2.5-7B: hidden 3584, 28 heads x 128 (4 kv heads), intermediate 18944, vocab 152064; 4096 tokens */
    bench_matmul(g, "7B qkv", 4096, 3584, 4608);
    bench_matmul(g, "7B o_proj", 4096, 3584, 3584);
    bench_matmul(g, "7B gate|up", 4096, 3584, 18944);
    bench_matmul(g, "7B down", 4096, 18944, 3584);
    bench_matmul(g, "7B lm_head", 4096, 3584, 152064);
    bench_matmul(g, "0.5B mlp 16k tok", 16384, 896, 4864);
    /* Qwen2.5-1.5B at seq 4096 micro 2 (the [speed] target's run): hidden 1536, 12 heads x 128 (2 kv heads),
     * intermediate 8960, the head in chunks of up to 2,048 rows (classifier_cuda.cu) */
    bench_matmul(g, "1.5B q|o", 8192, 1536, 1536);
    bench_matmul(g, "1.5B k|v", 8192, 1536, 256);
    bench_matmul(g, "1.5B gate|up", 8192, 1536, 8960);
    bench_matmul(g, "1.5B down", 8192, 8960, 1536);
    bench_matmul(g, "1.5B lm_head chunk", 2048, 1536, 151936);
    qf_cuda_set_attention_path(1); /* the mma.sync kernels; cuDNN's path: bench/attn_bench */
    bench_attention(g, 1, 4096, 28, 4, 128, 1);
    bench_attention(g, 1, 4096, 28, 4, 128, 4);
    bench_attention(g, 1, 4096, 14, 2, 64, 1);
    bench_attention(g, 4, 4096, 14, 2, 64, 1);
    bench_attention(g, 1, 4096, 32, 32, 128, 1); /* no GQA */
    qf_cuda_set_attention_path(0);
    bench_classifier(g, 4096, 3584, 152064);
    bench_bandwidth(g);
    printf("peak device bytes held by the backend: %.2f GiB\n", qf_cuda_peak_bytes() / 1073741824.0);
    return 0;
}

int main(int argc, char **argv) {
    const int want_bench = argc > 1 && !strcmp(argv[1], "--bench");
    const int small = argc > 1 && !strcmp(argv[1], "--small");
    if (qf_cuda_device_count() <= 0 || !qf_ops_cuda()) {
        printf("test_ops_cuda: no GPU: skipped\n");
        return 77;
    }
    cpu = qf_ops_cpu();
    gpus[ngpu++] = qf_ops_cuda();
    gpus[ngpu++] = qf_ops_cuda_f32();
    gpus[ngpu++] = qf_ops_cuda_f16();
    char ver[256];
    qf_cuda_versions(ver, sizeof ver);
    printf("test_ops_cuda: %s; tables", ver);
    for (int gi = 0; gi < ngpu; gi++)
        printf("%s %s (act %zu bytes)", gi ? "," : "", gpus[gi]->name, gpus[gi]->act_bytes);
    printf("\n");
    if (want_bench) return bench();

    for (int gi = 0; gi < ngpu; gi++) test_memory(gpus[gi]);
    test_memory_limit(gpus[0]);

    /* matmul: the CPU test's odd shapes, then realistic ones (unaligned rows of 7 elements, Qwen-like widths) */
    test_matmul(5, 7, 6, 1);
    test_matmul(70, 45, 37, 1);
    test_matmul(70, 64, 40, 2);
    test_matmul(260, 300, 20, 0);
    test_matmul(5, 20, 300, 1);
    /* decoding sizes: gemv_cuda.cu (N <= 8, IN % 8 == 0), with the unaligned bias of a model's q/k/v view */
    test_matmul(1, 3584, 512, 2);
    test_matmul(3, 896, 136, 1);
    test_matmul(8, 1536, 264, 0);
    test_matmul(2, 72, 33, 2);
    /* rows past L1's 16 KiB: gemv_cuda.cu's shared-memory form (two W rows per warp; an odd OUT leaves a lone row) */
    test_matmul(1, 18944, 520, 2);
    test_matmul(2, 18944, 264, 1);
    test_matmul(1, 9000, 33, 0);
    if (!small) {
        test_matmul(1, 3584, 3584, 2); /* Qwen2.5-7B's o projection at one row */
        test_matmul(1, 18944, 3584, 1); /* its down projection at one row (x: 37 KB of shared memory a block) */
        test_matmul(1024, 1024, 4096, 1);
        test_matmul(1000, 896, 1000, 0);
    }

    test_rmsnorm(4, 9);
    test_rmsnorm(150, 16);
    test_rmsnorm(small ? 512 : 8192, 128); /* q/k norm: N*H rows of head_dim */
    test_rmsnorm(small ? 64 : 512, 1024);
    test_rmsnorm(small ? 64 : 2048, 1536); /* Qwen2.5-1.5B's width: warp per row, dw slices in 48 KiB */
    test_rmsnorm(small ? 20 : 300, 3584);  /* Qwen2.5-7B's: the slices past 48 KiB (opt-in shared memory) */
    test_rmsnorm(small ? 8 : 40, 12288);   /* beyond the opt-in limit: the block-per-row backward */

    test_rope(2, 7, 3, 8, 1e4);
    test_rope(2, small ? 64 : 512, 8, 128, 1e6);
    test_rope(1, small ? 128 : 1024, 2, 64, 1e4);
    test_rope(1, small ? 64 : 512, 28, 128, 1e6); /* 28 heads: 7 groups of 4 per vectorised thread */
    test_rope(3, 5, 7, 16, 1e4);                  /* D/2 = 8: one vector group; 7 heads: a short last group */

    /* attention: the CPU test's tiny shapes (generic kernels), then the tensor-core shapes */
    {
        static const int32_t seg[14] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4};
        test_attention_seg(2, 7, 4, 2, 8, seg, "(CPU-test shape, 2 docs)");
        static const int32_t seg2[6] = {0, 0, 2, 2, 2, 2};
        test_attention_seg(1, 6, 3, 1, 12, seg2, "(D=12, KV=1)");
    }
    test_attention(1, 256, 8, 2, 64, 1);
    test_attention(1, 256, 8, 2, 128, 1);
    test_attention(2, 300, 8, 2, 128, 4); /* T not a multiple of the tile, packed documents, B=2 */
    test_attention(2, 333, 8, 2, 64, 6);
    test_attention(2, 50, 4, 2, 64, 2);    /* T below one 128-row tile */
    test_attention(1, 300, 4, 4, 128, 3);  /* no GQA (H == KV): dK/dV written directly */
    test_attention(1, 200, 6, 2, 128, 40); /* many short documents: most tiles straddle a boundary */
    if (!small) {
        test_attention(1, 1024, 8, 2, 128, 1);
        test_attention(1, 1024, 8, 2, 64, 8);
        test_attention(1, 512, 4, 4, 96, 2); /* head_dim 96: generic kernel in bf16 too */
    }

    test_swiglu(3, 10);
    test_swiglu(small ? 64 : 1024, 4864);
    test_argmax(4, 152064); /* Qwen's vocabulary: 16-byte words */
    test_argmax(4, 1003);   /* an odd width: element by element */
    test_argmax(1, 8);
    test_flat(small ? 100003 : 1000003);

    test_embedding(8, 6, 5);
    test_embedding(150, 16, 37);
    if (!small) test_embedding(4096, 1024, 32000);

    test_classifier(9, 8, 11);
    test_classifier(150, 16, 37);
    if (!small) test_classifier(512, 1024, 32000);
    test_classifier(small ? 30 : 300, 896, 1001); /* V odd: scalar row path */

    test_adamw(100003);

    printf("test_ops_cuda: %d checks, %d failed; peak device bytes %.1f MiB\n", n_checks, n_fail,
           qf_cuda_peak_bytes() / 1048576.0);
    return n_fail ? 1 : 0;
}
