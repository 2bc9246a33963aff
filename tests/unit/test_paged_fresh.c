/* test_paged_fresh.c — the paged model's fresh-prompt path (src/model/model.c paged_fresh_of, layer_forward): where
 * the table has kv_append_paged, a call's tail of whole prompts from position 0 is attended by attention_fwd as
 * segments of one row instead of attention_paged. On the CPU table with kv_append_paged set
 * (qf_ops_cpu_with_fresh) against the plain CPU table (every token through attention_paged), same parameters, the
 * same ragged calls as serve makes them:
 *   - which tokens take the path (model.h paged_fresh): a prompt call of three fresh prompts (all of it); decoding
 *     tokens, then a prompt begun in an earlier call, then a fresh one (only the fresh one); fewer than
 *     QF_PAGED_FRESH_MIN fresh tokens (none); a prompt split in the call (none of its run);
 *   - the head rows' logits agree within fp32 rounding (1e-5 of the largest), and every layer's KV pool holds the
 *     same values (within the same bound: the k, v of layer l > 0 follow the attention of layer l - 1);
 *   - decoding continues from the pools the fresh path wrote (the next calls through attention_paged agree). */
#include <math.h>
#include "paged_run_common.h"
#include "qf_test.h"

typedef struct fr_state {
    qf_ops fresh;
    qf_model A, F; /* A: the CPU table; F: the same with kv_append_paged */
    int V, L, maxb, nseq;
    int32_t *btab;
    float *la, *lf;
} fr_state;

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* one call on both models; returns F's paged_fresh; the logits of the nrows head rows compared */
static int fr_call(fr_state *s, const int32_t *tok, const int32_t *seq, const int32_t *pos, int N, const int32_t *rows,
                   int nrows, int first, const char *what) {
    qf_model *m[2] = {&s->A, &s->F};
    for (int i = 0; i < 2; i++) {
        qf_model_paged_inputs(m[i], tok, seq, pos, N, first ? s->btab : NULL);
        qf_model_paged_run(m[i], 1, 0, s->L, rows, nrows, 0);
    }
    CHECK(s->A.paged_fresh == N, "%s: the plain CPU table takes no fresh path (%d of %d)", what, s->A.paged_fresh, N);
    qf_model_paged_read_logits(&s->A, nrows, s->la);
    qf_model_paged_read_logits(&s->F, nrows, s->lf);
    double d = 0, ref = max_abs(s->la, (size_t)nrows * s->V);
    for (size_t i = 0; i < (size_t)nrows * s->V; i++) d = fabs(s->la[i] - s->lf[i]) > d ? fabs(s->la[i] - s->lf[i]) : d;
    CHECK(d <= 1e-5 * ref, "%s: logits differ by %.3g (largest %.3g)", what, d, ref);
    return s->F.paged_fresh;
}

static void fr_pools(fr_state *s, const char *what) {
    const size_t n = (size_t)s->nseq * s->maxb * PR_BS * s->A.cfg.num_kv_heads * s->A.cfg.head_dim;
    float *a = qf_malloc(n * 4), *f = qf_malloc(n * 4);
    double worst = 0, ref = 0;
    for (int l = 0; l < s->L; l++)
        for (int kv = 0; kv < 2; kv++) {
            qf_ops_cpu()->copy_d2h(a, kv ? s->A.vc[l] : s->A.kc[l], n * 4);
            qf_ops_cpu()->copy_d2h(f, kv ? s->F.vc[l] : s->F.kc[l], n * 4);
            for (size_t i = 0; i < n; i++) worst = fabs(a[i] - f[i]) > worst ? fabs(a[i] - f[i]) : worst;
            ref = max_abs(a, n) > ref ? max_abs(a, n) : ref;
        }
    CHECK(ref > 0 && worst <= 1e-5 * ref, "%s: the KV pools differ by %.3g (largest %.3g)", what, worst, ref);
    free(a), free(f);
}

int main(void) {
    qf_model_config c;
    pr_config(&c, 64, 128, 2, 4, 2, 16, 97);
    qf_err e = {0};
    fr_state s = {.V = 97, .L = 2, .nseq = 6};
    qf_ops_cpu_with_fresh(&s.fresh);
    CHECK(qf_ops_cpu()->kv_append_paged == NULL && s.fresh.kv_append_paged != NULL,
          "the CPU table has no kv_append_paged; the test's copy has");
    const int Ntok = 256, maxpos = 200;
    s.maxb = (maxpos + PR_BS - 1) / PR_BS;
    qf_model *m[2] = {&s.A, &s.F};
    const qf_ops *tables[2] = {qf_ops_cpu(), &s.fresh};
    for (int i = 0; i < 2; i++) {
        CHECK(qf_model_create(m[i], &c, tables[i], QF_MODEL_PARAMS, &e) == 0, "create: %s", e.msg);
        CHECK(qf_model_alloc_paged(m[i], Ntok, s.nseq, s.nseq * s.maxb, PR_BS, s.maxb, 0, c.num_layers, 1, &e) == 0,
              "alloc: %s", e.msg);
    }
    if (qf_test_failures) return 1;
    qf_model_init_random(&s.A, 11);
    qf_ops_cpu()->copy_d2d(s.F.params, s.A.params, (size_t)s.A.n_params * 4);
    s.btab = qf_malloc((size_t)s.nseq * s.maxb * 4);
    for (int i = 0; i < s.nseq * s.maxb; i++) s.btab[i] = (i * 7 + 3) % (s.nseq * s.maxb); /* a permutation */
    s.la = qf_malloc((size_t)s.nseq * s.V * 4), s.lf = qf_malloc((size_t)s.nseq * s.V * 4);
    int32_t tok[256], seq[256], pos[256], rows[8];
    int N = 0, nr = 0, len[6] = {0};
#define ADD(q, n0, k, head)                                                                                            \
    do {                                                                                                               \
        for (int i_ = 0; i_ < (k); i_++) tok[N] = ((q) * 13 + (n0) + i_) % s.V, seq[N] = (q), pos[N] = (n0) + i_, N++; \
        len[q] = (n0) + (k);                                                                                           \
        if (head) rows[nr++] = N - 1;                                                                                  \
    } while (0)
    /* 1. three fresh prompts (70, 5 and the first 40 of sequence 2's 90): the whole call */
    ADD(0, 0, 70, 1);
    ADD(1, 0, 5, 1);
    ADD(2, 0, 40, 0);
    int f = fr_call(&s, tok, seq, pos, N, rows, nr, 1, "three fresh prompts");
    CHECK(f == 0, "three fresh prompts (115 tokens): fresh from %d, want 0", f);
    fr_pools(&s, "after the fresh prompts");
    /* 2. decoding tokens of 0 and 1, sequence 2's remaining 50, a fresh prompt of 80 (sequence 3) */
    N = 0, nr = 0;
    ADD(0, len[0], 1, 1);
    ADD(1, len[1], 1, 1);
    ADD(2, 40, 50, 1);
    ADD(3, 0, 80, 1);
    f = fr_call(&s, tok, seq, pos, N, rows, nr, 0, "decoding + a continued prompt + a fresh one");
    CHECK(f == 52, "decoding (2) + continued (50) + fresh (80): fresh from %d, want 52", f);
    fr_pools(&s, "after the mixed call");
    /* 3. decoding 4 sequences and a fresh prompt of 20 (sequence 4): under QF_PAGED_FRESH_MIN */
    N = 0, nr = 0;
    for (int q = 0; q < 4; q++) ADD(q, len[q], 1, 1);
    ADD(4, 0, 20, 1);
    f = fr_call(&s, tok, seq, pos, N, rows, nr, 0, "decoding + 20 fresh tokens");
    CHECK(f == N, "20 fresh tokens (< %d): fresh from %d, want none (%d)", QF_PAGED_FRESH_MIN, f, N);
    /* 4. a fresh prompt of 70 (sequence 5) split in two runs of the call: not whole, so none of it */
    N = 0, nr = 0;
    ADD(5, 0, 35, 0);
    ADD(4, len[4], 1, 1);
    ADD(5, 35, 35, 1);
    f = fr_call(&s, tok, seq, pos, N, rows, nr, 0, "a prompt in two runs");
    CHECK(f == N, "a prompt in two runs: fresh from %d, want none (%d)", f, N);
    /* 5. decoding steps over the pools the fresh path wrote */
    for (int step = 0; step < 3; step++) {
        N = 0, nr = 0;
        for (int q = 0; q < 6; q++) ADD(q, len[q], 1, 1);
        f = fr_call(&s, tok, seq, pos, N, rows, nr, 0, "a decoding step");
        CHECK(f == N, "a decoding step: fresh from %d, want none", f);
    }
    fr_pools(&s, "after the decoding steps");
#undef ADD
    qf_model_free(&s.A), qf_model_free(&s.F);
    free(s.btab), free(s.la), free(s.lf);
    printf("test_paged_fresh: %d checks, %d failed\n", qf_test_checks, qf_test_failures);
    return qf_test_failures != 0;
}
