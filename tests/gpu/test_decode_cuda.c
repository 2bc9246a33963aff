/* test_decode_cuda.c — the CUDA attention_decode (kernels/cuda/decode_attention_cuda.cu) against the CPU one
 * (kernels/cpu/decode_attention_cpu.c), in the bf16, fp32 and fp16 tables: B rows at different cache positions,
 * prefill calls (Tq > 1) and decoding calls (Tq = 1) on the same caches, GQA (H/KV = 1, 4, 7), head_dim 64, 128
 * and 80 (not a multiple of 32 lanes), a long cache (2000 positions: many positions per warp).
 * After each call the outputs and both caches are compared on the max norm (err = max |gpu - cpu| / max |cpu|):
 * fp32 1e-5, bf16 1e-2, fp16 1.25e-3 (one rounding of the output, as test_ops_cuda's TOL_ACT); the caches must be
 * equal bit for bit in every table (a copy; the inputs are values that bf16 and fp16 both hold exactly). On the
 * 16-bit tables at head_dim 128 the split attention's other form (QWENFT_DECODE_ATTN) gives the same values.
 * Exit: 0 passed, 1 a check failed, 77 "no GPU: skipped". */
#define QF_GPU_TEST_SEED 0x9E3779B97F4A7C15ull
#include "qf_gpu_test.h"

static void report(const qf_ops *g, const char *what, double err, double tol) {
    char label[32];
    snprintf(label, sizeof label, "%-9s", g->name);
    qf_gpu_report(label, 64, what, err, tol);
}

/* B rows, caches of S positions; calls: a prefill of Tq0 tokens at per-row starts, then `steps` single tokens */
static void run_case(const qf_ops *g, int B, int S, int H, int KV, int D, int Tq0, int steps) {
    const qf_ops *c = qf_ops_cpu();
    const double tol = g->act_dtype == QF_DT_F32 ? 1e-5 : g->act_dtype == QF_DT_F16 ? 1.25e-3 : 1e-2;
    size_t cache = (size_t)B * S * KV * D;
    float *kc = calloc(cache, 4), *vc = calloc(cache, 4);
    void *dk = up(g, kc, cache), *dv = up(g, vc, cache);
    int32_t *start = qf_malloc((size_t)B * sizeof *start);
    for (int b = 0; b < B; b++) start[b] = (b * 37) % (S - Tq0 - steps + 1); /* rows at different positions */
    char what[160];
    for (int call = 0; call <= steps; call++) {
        int Tq = call == 0 ? Tq0 : 1;
        size_t nq = (size_t)B * Tq * H * D, nk = (size_t)B * Tq * KV * D;
        float *q = frand(nq, 1), *k = frand(nk, 1), *v = frand(nk, 1), *out = qf_malloc(nq * 4);
        void *gq = up(g, q, nq), *gk = up(g, k, nk), *gv = up(g, v, nk), *go = g->alloc(nq * g->act_bytes + 16);
        int32_t *gs = g->alloc((size_t)B * 4);
        g->copy_h2d(gs, start, (size_t)B * 4);
        c->attention_decode(out, q, k, v, kc, vc, start, B, Tq, S, H, KV, D);
        g->attention_decode(go, gq, gk, gv, dk, dv, gs, B, Tq, S, H, KV, D);
        float *ho = down_new(g, go, nq), *hk = down_new(g, dk, cache), *hv = down_new(g, dv, cache);
        snprintf(what, sizeof what, "B %d S %d H %d KV %d D %d %s Tq %d", B, S, H, KV, D,
                 call == 0 ? "prefill" : "decode", Tq);
        report(g, what, relerr(ho, out, nq), tol);
        snprintf(what, sizeof what, "  caches after that call");
        report(g, what, fmax(relerr(hk, kc, cache), relerr(hv, vc, cache)), 0); /* exact values: a copy */
        if (g->act_bytes == 2 && D == 128) { /* the split attention's other form (QWENFT_DECODE_ATTN): the same values
                                              * (the call appends the same k, v at the same positions again) */
            void *go2 = g->alloc(nq * g->act_bytes + 16);
            const int was = qf_cuda_decode_attn_mlp();
            qf_cuda_set_decode_attn_mlp(!was);
            g->attention_decode(go2, gq, gk, gv, dk, dv, gs, B, Tq, S, H, KV, D);
            qf_cuda_set_decode_attn_mlp(was);
            float *h2 = down_new(g, go2, nq);
            report(g, was ? "  the default attention form: the same values" :
                            "  QWENFT_DECODE_ATTN=mlp's form: the same values", relerr(h2, ho, nq), 0);
            free(h2), g->free(go2);
        }
        for (int b = 0; b < B; b++) start[b] += Tq;
        free(q), free(k), free(v), free(out), free(ho), free(hk), free(hv);
        g->free(gq), g->free(gk), g->free(gv), g->free(go), g->free(gs);
    }
    g->free(dk), g->free(dv);
    free(kc), free(vc), free(start);
}

int main(void) {
    if (qf_cuda_device_count() <= 0 || !qf_ops_cuda()) {
        printf("test_decode_cuda: no GPU: skipped\n");
        return 77;
    }
    const qf_ops *gs[3] = {qf_ops_cuda(), qf_ops_cuda_f32(), qf_ops_cuda_f16()};
    for (int i = 0; i < 3; i++) {
        run_case(gs[i], 3, 64, 4, 4, 64, 9, 3);
        run_case(gs[i], 2, 300, 8, 2, 128, 40, 4);
        run_case(gs[i], 5, 50, 14, 2, 80, 1, 5);
        run_case(gs[i], 1, 2048, 28, 4, 128, 2000, 2);
        run_case(gs[i], 2, 600, 20, 2, 128, 300, 3); /* GQA 10: two head groups per kv head */
    }
    printf("test_decode_cuda: %d checks, %d failed\n", n_checks, n_fail);
    return n_fail ? 1 : 0;
}
