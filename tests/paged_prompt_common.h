/* paged_prompt_common.h — the paged model's prompt path (src/model/paged_prompt.h): where the table has
 * kv_append_paged and attention_prompt, a call's tail of prompt chunks is attended by attention_prompt (in place for whole prompts from
 * position 0, else packed with each sequence's cached prefix gathered from the pools) instead of attention_paged.
 * Two models with the same parameters, A on a table without kv_append_paged (every token through attention_paged)
 * and F on one with it, fed the same ragged calls as serve makes them:
 *   - which tokens take the path and how (model.h prompt.from, prompt.P): fresh prompts only (in place); decoding
 *     tokens, a continued prompt and a fresh one (packed, from the continued one); a continued run shorter than
 *     QF_PROMPT_RUN_MIN (the tail starts after it, in place); fewer than QF_PROMPT_TAIL_MIN prompt tokens (none); a
 *     prompt in two runs of one call (its second run packed, its prefix written by the first);
 *   - the head rows' logits agree within tol of the largest, and so does every layer's KV pool (the k, v of layer
 *     l > 0 follow the attention of layer l - 1);
 *   - decoding continues over the pools the path wrote (the next calls through attention_paged agree).
 * Used by tests/unit/test_paged_prompt.c (CPU, fp32) and tests/gpu/test_paged_prompt_cuda.c (bf16). */
#ifndef QF_PAGED_PROMPT_COMMON_H
#define QF_PAGED_PROMPT_COMMON_H
#include <math.h>
#include "paged_run_common.h"
#include "qf_test.h"

typedef struct fr_state {
    const qf_ops *o;
    qf_model A, F; /* A: no kv_append_paged; F: with */
    int V, L, maxb, nseq;
    double tol;
    int32_t *btab;
    float *la, *lf;
} fr_state;

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* one call on both models; returns F's prompt.from (*P: its packed rows); the logits of the nrows head rows compared */
static int fr_call(fr_state *s, const int32_t *tok, const int32_t *seq, const int32_t *pos, int N, const int32_t *rows,
                   int nrows, int first, int *P, const char *what) {
    qf_model *m[2] = {&s->A, &s->F};
    for (int i = 0; i < 2; i++) {
        qf_model_paged_inputs(m[i], tok, seq, pos, N, first ? s->btab : NULL);
        qf_model_paged_run(m[i], 1, 0, s->L, rows, nrows, 0);
    }
    CHECK(s->A.prompt.from == N, "%s: the table without kv_append_paged takes no prompt path (%d of %d)", what,
          s->A.prompt.from, N);
    qf_model_paged_read_logits(&s->A, nrows, s->la);
    qf_model_paged_read_logits(&s->F, nrows, s->lf);
    double d = 0, ref = max_abs(s->la, (size_t)nrows * s->V);
    for (size_t i = 0; i < (size_t)nrows * s->V; i++) d = fabs(s->la[i] - s->lf[i]) > d ? fabs(s->la[i] - s->lf[i]) : d;
    CHECK(d <= s->tol * ref, "%s: logits differ by %.3g (largest %.3g)", what, d, ref);
    *P = s->F.prompt.P;
    return s->F.prompt.from;
}

static void fr_pools(fr_state *s, const char *what) {
    const size_t n = (size_t)s->nseq * s->maxb * PR_BS * s->A.cfg.num_kv_heads * s->A.cfg.head_dim;
    float *a = qf_malloc(n * 4), *f = qf_malloc(n * 4), *st = s->o->alloc(n * 4);
    double worst = 0, ref = 0;
    for (int l = 0; l < s->L; l++)
        for (int kv = 0; kv < 2; kv++) {
            s->o->act_to_f32(st, kv ? s->A.vc[l] : s->A.kc[l], n);
            s->o->copy_d2h(a, st, n * 4);
            s->o->act_to_f32(st, kv ? s->F.vc[l] : s->F.kc[l], n);
            s->o->copy_d2h(f, st, n * 4);
            for (size_t i = 0; i < n; i++) worst = fabs(a[i] - f[i]) > worst ? fabs(a[i] - f[i]) : worst;
            ref = max_abs(a, n) > ref ? max_abs(a, n) : ref;
        }
    CHECK(ref > 0 && worst <= s->tol * ref, "%s: the KV pools differ by %.3g (largest %.3g)", what, worst, ref);
    s->o->free(st);
    free(a), free(f);
}

/* the scenarios above for a 2-layer model of shape c (pr_config), on tables plain (no kv_append_paged) and with
 * (kv_append_paged set) of the same act dtype */
static void fr_run(const qf_model_config *cfg, const qf_ops *plain, const qf_ops *with, double tol) {
    qf_model_config c = *cfg;
    qf_err e = {0};
    fr_state s = {.o = with, .V = (int)c.vocab_size, .L = c.num_layers, .nseq = 8, .tol = tol};
    CHECK(plain->kv_append_paged == NULL && with->kv_append_paged != NULL, "tables: one without kv_append_paged, one with");
    const int Ntok = 256, maxpos = 200;
    s.maxb = (maxpos + PR_BS - 1) / PR_BS;
    qf_model *m[2] = {&s.A, &s.F};
    const qf_ops *tables[2] = {plain, with};
    for (int i = 0; i < 2; i++) {
        CHECK(qf_model_create(m[i], &c, tables[i], QF_MODEL_PARAMS, &e) == 0, "create: %s", e.msg);
        CHECK(qf_model_alloc_paged(m[i], Ntok, s.nseq, s.nseq * s.maxb, PR_BS, s.maxb, 0, c.num_layers, 1, &e) == 0,
              "alloc: %s", e.msg);
    }
    if (qf_test_failures) return;
    qf_model_init_random(&s.A, 11);
    with->copy_d2d(s.F.params, s.A.params, (size_t)s.A.n_params * with->act_bytes);
    s.btab = qf_malloc((size_t)s.nseq * s.maxb * 4);
    for (int i = 0; i < s.nseq * s.maxb; i++) s.btab[i] = (i * 7 + 3) % (s.nseq * s.maxb); /* a permutation */
    s.la = qf_malloc((size_t)s.nseq * s.V * 4), s.lf = qf_malloc((size_t)s.nseq * s.V * 4);
    int32_t tok[256], seq[256], pos[256], rows[8];
    int N = 0, nr = 0, len[8] = {0}, f, P;
#define ADD(q, n0, k, head)                                                                                            \
    do {                                                                                                               \
        for (int i_ = 0; i_ < (k); i_++) tok[N] = ((q) * 13 + (n0) + i_) % s.V, seq[N] = (q), pos[N] = (n0) + i_, N++; \
        len[q] = (n0) + (k);                                                                                           \
        if (head) rows[nr++] = N - 1;                                                                                  \
    } while (0)
    /* 1. fresh prompts: 70 (0), 5 (1), the first 40 of 90 (2), the first 30 of 40 (4): the whole call, in place */
    ADD(0, 0, 70, 1);
    ADD(1, 0, 5, 1);
    ADD(2, 0, 40, 0);
    ADD(4, 0, 30, 0);
    f = fr_call(&s, tok, seq, pos, N, rows, nr, 1, &P, "fresh prompts");
    CHECK(f == 0 && P == 0, "fresh prompts (145 tokens): from %d packed %d, want 0 and 0 (in place)", f, P);
    fr_pools(&s, "after the fresh prompts");
    /* 2. decoding 0 and 1, sequence 2's remaining 50 (prefix 40), a fresh 80 (3): packed from the continued one */
    N = 0, nr = 0;
    ADD(0, len[0], 1, 1);
    ADD(1, len[1], 1, 1);
    ADD(2, 40, 50, 1);
    ADD(3, 0, 80, 1);
    f = fr_call(&s, tok, seq, pos, N, rows, nr, 0, &P, "decoding + a continued prompt + a fresh one");
    CHECK(f == 2 && P == 90 + 80, "decoding (2) + continued (50 after 40) + fresh (80): from %d packed %d, want 2 "
          "and 170", f, P);
    fr_pools(&s, "after the mixed call");
    /* 3. decoding 0-3, sequence 4's last 10 (under QF_PROMPT_RUN_MIN), a fresh 70 (5): in place from the fresh one */
    N = 0, nr = 0;
    for (int q = 0; q < 4; q++) ADD(q, len[q], 1, 1);
    ADD(4, 30, 10, 1);
    ADD(5, 0, 70, 1);
    f = fr_call(&s, tok, seq, pos, N, rows, nr, 0, &P, "a short continued run + a fresh prompt");
    CHECK(f == 14 && P == 0, "decoding (4) + continued (10) + fresh (70): from %d packed %d, want 14 and 0", f, P);
    /* 4. decoding 0-5 and a fresh 20 (6): under QF_PROMPT_TAIL_MIN, none */
    N = 0, nr = 0;
    for (int q = 0; q < 6; q++) ADD(q, len[q], 1, 1);
    ADD(6, 0, 20, 1);
    f = fr_call(&s, tok, seq, pos, N, rows, nr, 0, &P, "decoding + 20 fresh tokens");
    CHECK(f == N, "20 fresh tokens (< %d): from %d, want none (%d)", QF_PROMPT_TAIL_MIN, f, N);
    /* 5. a prompt of 100 (7) in two runs around a decoding token: its second run packed (prefix 30 from the first) */
    N = 0, nr = 0;
    ADD(7, 0, 30, 0);
    ADD(6, len[6], 1, 1);
    ADD(7, 30, 70, 1);
    f = fr_call(&s, tok, seq, pos, N, rows, nr, 0, &P, "a prompt in two runs");
    CHECK(f == 31 && P == 100, "a prompt in two runs: from %d packed %d, want 31 and 100", f, P);
    fr_pools(&s, "after the prompt in two runs");
    /* 6. decoding steps over the pools the path wrote */
    for (int step = 0; step < 3; step++) {
        N = 0, nr = 0;
        for (int q = 0; q < 8; q++) ADD(q, len[q], 1, 1);
        f = fr_call(&s, tok, seq, pos, N, rows, nr, 0, &P, "a decoding step");
        CHECK(f == N, "a decoding step: from %d, want none", f);
    }
    fr_pools(&s, "after the decoding steps");
#undef ADD
    qf_model_free(&s.A), qf_model_free(&s.F);
    free(s.btab), free(s.la), free(s.lf);
}

#endif
