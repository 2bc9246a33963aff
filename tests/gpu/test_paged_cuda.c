/* test_paged_cuda.c — the CUDA attention_paged (kernels/cuda/decode_attention_cuda.cu, qwen-ft serve) against the
 * CPU one (kernels/cpu/decode_attention_cpu.c) in the bf16, fp32 and fp16 tables: ragged calls that mix prompt
 * chunks of some sequences with single decoding tokens of others, block tables that are shuffled permutations of
 * the pool (blocks of 16 positions), GQA 1, 4, 7 and 18 (three groups of query heads per kv head), head_dim 64, 128 and 80, a sequence of 1500 positions.
 * Outputs on the max norm as test_decode_cuda (fp32 1e-5, bf16 1e-2, fp16 1.25e-3); the pools bit for bit (a copy).
 * Exit: 0 passed, 1 a check failed, 77 "no GPU: skipped". */
#define QF_GPU_TEST_SEED 0x2545F4914F6CDD1Dull
#include "qf_gpu_test.h"

/* nseq sequences with prompts plen[s]; call 0 prefills chunk tokens of each, later calls decode one token each
 * (sequences still prefilling take another chunk) */
static void run_case(const qf_ops *g, int nseq, const int *plen, int chunk, int calls, int H, int KV, int D) {
    const qf_ops *c = qf_ops_cpu();
    const double tol = g->act_dtype == QF_DT_F32 ? 1e-5 : g->act_dtype == QF_DT_F16 ? 1.25e-3 : 1e-2;
    const int bs = 16;
    int maxlen = 0;
    for (int s = 0; s < nseq; s++) maxlen = plen[s] + calls > maxlen ? plen[s] + calls : maxlen;
    int maxb = (maxlen + bs - 1) / bs, nblocks = nseq * maxb + 3;
    int32_t *btab = qf_malloc((size_t)nseq * maxb * 4), *perm = qf_malloc((size_t)nblocks * 4);
    for (int i = 0; i < nblocks; i++) perm[i] = i;
    for (int i = nblocks - 1; i > 0; i--) { /* a fixed shuffle */
        int j = (int)((i * 2654435761u) % (unsigned)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int i = 0; i < nseq * maxb; i++) btab[i] = perm[i];
    size_t pool = (size_t)nblocks * bs * KV * D;
    float *kp = calloc(pool, 4), *vp = calloc(pool, 4);
    void *dk = up(g, kp, pool), *dv = up(g, vp, pool);
    int32_t *gb = g->alloc((size_t)nseq * maxb * 4);
    g->copy_h2d(gb, btab, (size_t)nseq * maxb * 4);
    int *done = calloc((size_t)nseq, sizeof *done), cap = nseq * (chunk + 1);
    int32_t *seq = qf_malloc((size_t)cap * 4), *pos = qf_malloc((size_t)cap * 4);
    char what[160];
    for (int call = 0; call < calls; call++) {
        int N = 0;
        for (int s = 0; s < nseq; s++) {
            int k = done[s] < plen[s] ? (plen[s] - done[s] < chunk ? plen[s] - done[s] : chunk) : 1;
            for (int i = 0; i < k; i++) seq[N] = s, pos[N] = done[s] + i, N++;
            done[s] += k;
        }
        size_t nq = (size_t)N * H * D, nk = (size_t)N * KV * D;
        float *q = frand(nq, 1), *k = frand(nk, 1), *v = frand(nk, 1), *out = qf_malloc(nq * 4);
        void *gq = up(g, q, nq), *gk = up(g, k, nk), *gv = up(g, v, nk), *go = g->alloc(nq * g->act_bytes + 16);
        int32_t *gsq = g->alloc((size_t)N * 4), *gps = g->alloc((size_t)N * 4);
        g->copy_h2d(gsq, seq, (size_t)N * 4);
        g->copy_h2d(gps, pos, (size_t)N * 4);
        int max_len = 1; /* the exact bound, or (odd calls) the pool's: the split sizing must not matter */
        for (int n = 0; n < N; n++) max_len = pos[n] + 1 > max_len ? pos[n] + 1 : max_len;
        if (call % 2) max_len = maxb * bs;
        c->attention_paged(out, q, k, v, kp, vp, seq, pos, btab, N, maxb, bs, H, KV, D, max_len);
        g->attention_paged(go, gq, gk, gv, dk, dv, gsq, gps, gb, N, maxb, bs, H, KV, D, max_len);
        float *ho = down_new(g, go, nq), *hk = down_new(g, dk, pool), *hv = down_new(g, dv, pool);
        snprintf(what, sizeof what, "%d seqs, N %d, H %d KV %d D %d, call %d", nseq, N, H, KV, D, call);
        qf_gpu_report(g->name, 64, what, relerr(ho, out, nq), tol);
        qf_gpu_report(g->name, 64, "  pools after that call", fmax(relerr(hk, kp, pool), relerr(hv, vp, pool)), 0);
        free(q), free(k), free(v), free(out), free(ho), free(hk), free(hv);
        g->free(gq), g->free(gk), g->free(gv), g->free(go), g->free(gsq), g->free(gps);
    }
    g->free(dk), g->free(dv), g->free(gb);
    free(kp), free(vp), free(btab), free(perm), free(done), free(seq), free(pos);
}

int main(void) {
    if (qf_cuda_device_count() <= 0 || !qf_ops_cuda()) {
        printf("test_paged_cuda: no GPU: skipped\n");
        return 77;
    }
    const qf_ops *gs[3] = {qf_ops_cuda(), qf_ops_cuda_f32(), qf_ops_cuda_f16()};
    const int a[] = {9, 1, 40}, b[] = {100, 3, 17, 64, 5}, l[] = {1500, 7};
    for (int i = 0; i < 3; i++) {
        run_case(gs[i], 3, a, 8, 4, 4, 4, 64);
        run_case(gs[i], 3, a, 8, 3, 18, 1, 64); /* GQA 18: three head groups per kv head */
        run_case(gs[i], 5, b, 32, 5, 8, 2, 128);
        run_case(gs[i], 5, b, 16, 3, 14, 2, 80);
        run_case(gs[i], 2, l, 512, 4, 28, 4, 128);
    }
    printf("test_paged_cuda: %d checks, %d failed\n", n_checks, n_fail);
    return n_fail ? 1 : 0;
}
