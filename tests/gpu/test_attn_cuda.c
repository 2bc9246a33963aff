/* test_attn_cuda.c — every attention path of the CUDA backend, forced one at a time, against the CPU op.
 *
 * Paths (qf_cuda_set_attention_path, the hook behind env QWENFT_ATTN): "mma" (the mma.sync kernels of
 * attention_mma.cu) and "cudnn" (cuDNN's fused attention, attention_cudnn.cu: the dense graph when every row is one
 * document and T % 128 == 0, the ragged graph with one cuDNN sequence per document otherwise). Each case: causal,
 * GQA (and one H == KV case), packed rows with several documents, head_dim 64 and 128, on the bf16 and fp16 tables.
 * Checks, with test_ops_cuda's tolerances (max-norm relative error; outputs poisoned with NaN first): forward out and
 * lse; backward dq, dk, dv given the CPU's out and lse (so only the backward is compared); that the forced path
 * really ran (qf_cuda_attention_last_path); the mma path's backward is bitwise deterministic (cuDNN's is not: it
 * accumulates dQ with atomics; its run-to-run difference is printed). Also: cuDNN's forward lse feeds the mma
 * backward (the two paths' lse agree), as when cuDNN takes one direction and not the other.
 * Exit: 0 passed, 1 a check failed, 77 no GPU (or, for the cudnn checks, a build without cuDNN: said so). */
#define QF_GPU_TEST_SEED 0x9E3779B97F4A7C15ull
#include "qf_gpu_test.h"

void qf_cuda_set_attention_path(int p); /* 0 auto, 1 mma, 2 cudnn */
const char *qf_cuda_attention_last_path(void);
int qf_cuda_have_cudnn(void);
void qf_cuda_attention_describe(char *buf, int cap);

#define TOL_ACT_BF16 1e-2
#define TOL_ACT_F16 1.25e-3
#define TOL_BWD_BF16 2e-2
#define TOL_BWD_F16 2.5e-3

static const qf_ops *cpu;
static void report(const qf_ops *g, const char *path, const char *name, double err, double tol) {
    char label[48];
    snprintf(label, sizeof label, "%-8s %-6s", g->name, path);
    qf_gpu_report(label, 72, name, err, tol);
}
static void report_bool(const qf_ops *g, const char *path, const char *name, int ok) {
    char label[48];
    snprintf(label, sizeof label, "%-8s %-6s", g->name, path);
    qf_gpu_report_bool(label, name, ok);
}
static void cmp(const qf_ops *g, const char *path, const char *name, const void *d, const float *ref, size_t n,
                double tol) {
    float *h = down_new(g, d, n);
    report(g, path, name, relerr(h, ref, n), tol);
    free(h);
}
static void cmp_f32(const qf_ops *g, const char *path, const char *name, const float *d, const float *ref, size_t n,
                    double tol) {
    float *h = down_raw_f32(g, d, n);
    report(g, path, name, relerr(h, ref, n), tol);
    free(h);
}

static int cudnn_built;

static void test_case(int B, int T, int H, int KV, int D, int ndocs) {
    const qf_ops *tabs[2] = {qf_ops_cuda(), qf_ops_cuda_f16()};
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D, nl = (size_t)B * H * T;
    int32_t *seg = qf_malloc((size_t)B * T * 4);
    make_segments(seg, B, T, ndocs);
    int docs = 0;
    for (int n = 0; n < B * T; n++) docs += seg[n] == n % T;
    float *q = frand(nq, 1.5), *k = frand(nk, 1.5), *v = frand(nk, 1), *dout = frand(nq, 1);
    float *out = qf_malloc(nq * 4), *lse = qf_malloc(nl * 4), *outr = qf_malloc(nq * 4);
    float *dq = qf_malloc(nq * 4), *dk = qf_malloc(nk * 4), *dv = qf_malloc(nk * 4);
    cpu->attention_fwd(out, lse, q, k, v, seg, B, T, H, KV, D);
    for (size_t i = 0; i < nq; i++) outr[i] = both(out[i]);
    cpu->attention_bwd(dq, dk, dv, dout, outr, lse, q, k, v, seg, B, T, H, KV, D);
    char what[96];
    snprintf(what, sizeof what, "B%d T%d H%d KV%d D%d docs=%d", B, T, H, KV, D, docs);
    float *nq_nan = fnan(nq), *nk_nan = fnan(nk);
    for (int ti = 0; ti < 2; ti++) {
        const qf_ops *g = tabs[ti];
        if (!g) continue;
        const int f16 = g->act_dtype == QF_DT_F16;
        const double tol_f = f16 ? TOL_ACT_F16 : TOL_ACT_BF16, tol_b = f16 ? TOL_BWD_F16 : TOL_BWD_BF16;
        void *dQ = up(g, q, nq), *dK = up(g, k, nk), *dV = up(g, v, nk), *dG = up(g, dout, nq), *dOr = up(g, outr, nq);
        int32_t *dS = up_raw(g, seg, (size_t)B * T * 4);
        float *dL = g->alloc(nl * 4);
        for (int path = 1; path <= 2; path++) {
            const char *pn = path == 1 ? "mma" : "cudnn";
            if (path == 2 && !cudnn_built) continue;
            qf_cuda_set_attention_path(path);
            void *dO = up(g, nq_nan, nq), *ddq = up(g, nq_nan, nq), *ddk = up(g, nk_nan, nk), *ddv = up(g, nk_nan, nk);
            g->attention_fwd(dO, dL, dQ, dK, dV, dS, B, T, H, KV, D);
            g->sync();
            const char *ran_f = qf_cuda_attention_last_path();
            cmp(g, pn, check_name("fwd out %s", what), dO, out, nq, tol_f);
            cmp_f32(g, pn, check_name("fwd lse %s", what), dL, lse, nl, tol_f);
            if (path == 2) { /* cuDNN's lse drives the mma backward: the two paths' lse agree */
                qf_cuda_set_attention_path(1);
                g->attention_bwd(ddq, ddk, ddv, dG, dOr, dL, dQ, dK, dV, dS, B, T, H, KV, D);
                cmp(g, pn, check_name("mma bwd dq on cuDNN's lse %s", what), ddq, dq, nq, tol_b);
                qf_cuda_set_attention_path(2);
            }
            g->copy_h2d(dL, lse, nl * 4);
            g->attention_bwd(ddq, ddk, ddv, dG, dOr, dL, dQ, dK, dV, dS, B, T, H, KV, D);
            g->sync();
            const char *ran_b = qf_cuda_attention_last_path();
            cmp(g, pn, check_name("bwd dq %s", what), ddq, dq, nq, tol_b);
            cmp(g, pn, check_name("bwd dk %s", what), ddk, dk, nk, tol_b);
            cmp(g, pn, check_name("bwd dv %s", what), ddv, dv, nk, tol_b);
            report_bool(g, pn, check_name("ran fwd: %s, bwd: %s (%s)", ran_f, ran_b, what),
                        !strncmp(ran_f, pn, strlen(pn)) && !strncmp(ran_b, pn, strlen(pn)));
            /* run-to-run: a second backward */
            float *a1 = down_new(g, ddq, nq), *k1 = down_new(g, ddk, nk);
            g->attention_bwd(ddq, ddk, ddv, dG, dOr, dL, dQ, dK, dV, dS, B, T, H, KV, D);
            float *a2 = down_new(g, ddq, nq), *k2 = down_new(g, ddk, nk);
            const int same = !memcmp(a1, a2, nq * 4) && !memcmp(k1, k2, nk * 4);
            if (path == 1) {
                report_bool(g, pn, check_name("bwd bitwise deterministic (dq, dk) %s", what), same);
            } else {
                printf("info %-8s %-6s bwd run-to-run: %s (dq max rel diff %.2e)\n", g->name, pn,
                       same ? "bitwise equal" : "differs", relerr(a2, a1, nq));
            }
            free(a1), free(a2), free(k1), free(k2);
            g->free(dO), g->free(ddq), g->free(ddk), g->free(ddv);
        }
        g->free(dQ), g->free(dK), g->free(dV), g->free(dG), g->free(dOr), g->free(dS), g->free(dL);
    }
    qf_cuda_set_attention_path(0);
    free(nq_nan), free(nk_nan), free(seg), free(q), free(k), free(v), free(dout), free(out), free(lse), free(outr);
    free(dq), free(dk), free(dv);
}

/* One seg_start buffer rewritten in place between calls (as the model does per micro-batch): the cuDNN path prepares
 * under the last layout it saw and must notice the new one (dense -> ragged -> more documents -> dense); then the
 * same with the caller-managed segment cache (qf_cuda_attention_segment_cache + segments_changed). */
void qf_cuda_attention_segment_cache(int on);
void qf_cuda_attention_segments_changed(const void *seg);
static void test_seg_change(void) {
    const qf_ops *g = qf_ops_cuda();
    const int B = 2, T = 256, H = 4, KV = 2, D = 64;
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D, nl = (size_t)B * H * T;
    float *q = frand(nq, 1.5), *k = frand(nk, 1.5), *v = frand(nk, 1);
    float *out = qf_malloc(nq * 4), *lse = qf_malloc(nl * 4);
    int32_t *seg = qf_malloc((size_t)B * T * 4);
    void *dQ = up(g, q, nq), *dK = up(g, k, nk), *dV = up(g, v, nk), *dO = g->alloc(nq * 2);
    float *dL = g->alloc(nl * 4);
    int32_t *dS = g->alloc((size_t)B * T * 4);
    static const int docs[5] = {1, 3, 12, 1, 5};
    char nm[160];
    qf_cuda_set_attention_path(2);
    for (int cache = 0; cache < 2; cache++) {
        qf_cuda_attention_segment_cache(cache);
        for (int i = 0; i < 5; i++) {
            make_segments(seg, B, T, docs[i]);
            g->copy_h2d(dS, seg, (size_t)B * T * 4);
            if (cache) qf_cuda_attention_segments_changed(dS);
            cpu->attention_fwd(out, lse, q, k, v, seg, B, T, H, KV, D);
            for (int rep = 0; rep < 2; rep++) { /* the second call reuses the layout (guess or cache) */
                g->attention_fwd(dO, dL, dQ, dK, dV, dS, B, T, H, KV, D);
                snprintf(nm, sizeof nm, "seg_start rewritten in place (%d docs/row hint, %s, call %d): fwd out", docs[i],
                         cache ? "segment cache" : "read-back", rep + 1);
                cmp(g, "cudnn", nm, dO, out, nq, TOL_ACT_BF16);
                cmp_f32(g, "cudnn", check_name("  ... lse (ran %s)", qf_cuda_attention_last_path()), dL, lse, nl,
                        TOL_ACT_BF16);
            }
        }
    }
    qf_cuda_attention_segment_cache(0);
    qf_cuda_set_attention_path(0);
    g->free(dQ), g->free(dK), g->free(dV), g->free(dO), g->free(dL), g->free(dS);
    free(q), free(k), free(v), free(out), free(lse), free(seg);
}

int main(int argc, char **argv) {
    const int small = argc > 1 && !strcmp(argv[1], "--small");
    if (qf_cuda_device_count() <= 0 || !qf_ops_cuda()) {
        printf("test_attn_cuda: no GPU: skipped\n");
        return 77;
    }
    cpu = qf_ops_cpu();
    cudnn_built = qf_cuda_have_cudnn();
    char ver[256];
    qf_cuda_versions(ver, sizeof ver);
    printf("test_attn_cuda: %s; cuDNN path %s\n", ver, cudnn_built ? "built" : "not built (mma only)");
    qf_cuda_attention_describe(ver, sizeof ver);
    printf("attention (run-header line): %s\n", ver);
    /* which path auto picks on this GPU */
    {
        const qf_ops *g = qf_ops_cuda();
        const int B = 1, T = 256, H = 8, KV = 2, D = 128;
        const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D;
        float *h = frand(nq, 1);
        int32_t seg[256];
        memset(seg, 0, sizeof seg);
        void *a = up(g, h, nq), *b = up(g, h, nk), *c = up(g, h, nk), *o = g->alloc(nq * 2);
        float *l = g->alloc((size_t)B * H * T * 4);
        int32_t *s = up_raw(g, seg, sizeof seg);
        qf_cuda_set_attention_path(0);
        g->attention_fwd(o, l, a, b, c, s, B, T, H, KV, D);
        g->sync();
        printf("auto path on this GPU (bf16, D=128, one document): %s\n", qf_cuda_attention_last_path());
        g->free(a), g->free(b), g->free(c), g->free(o), g->free(l), g->free(s);
        free(h);
    }
    if (cudnn_built) test_seg_change();
    test_case(1, 256, 8, 2, 64, 1);
    test_case(1, 256, 8, 2, 128, 1);
    test_case(2, 300, 8, 2, 128, 4);  /* T not a multiple of 128 (ragged graph), packed documents, B=2 */
    test_case(2, 333, 8, 2, 64, 6);
    test_case(1, 300, 4, 4, 128, 3);  /* H == KV */
    test_case(1, 200, 6, 2, 128, 40); /* many short documents */
    test_case(2, 512, 12, 2, 128, 1); /* dense graph, B=2 (Qwen2.5-1.5B heads) */
    test_case(2, 256, 14, 2, 64, 1);  /* dense graph, D=64 (Qwen2.5-0.5B heads) */
    if (!small) {
        test_case(1, 1024, 28, 4, 128, 1); /* Qwen2.5-7B heads */
        test_case(1, 1024, 8, 2, 64, 8);
        test_case(2, 1024, 28, 4, 128, 5);
    }
    printf("test_attn_cuda: %d checks, %d failed\n", n_checks, n_fail);
    return n_fail ? 1 : 0;
}
