/* paged_run_common.h — serve's paged calls through qf_model_paged_run (src/model/model.h) on two models with the
 * same parameters, A always eager (graph 0) and B asking for graphs (graph 1), fed the same calls: a prompt of
 * every sequence in one ragged call (its head rows do not follow each other: B runs it eagerly too), then decoding
 * steps of the active sequences (every token a head row, rows 0..N-1: B's graph case). After each call the two
 * models' logits [N, V] (fp32 widenings of act) and final residual rows must be the same bits. The block tables go
 * up once, with the prompt call (later calls pass NULL: unchanged). Used by tests/unit/test_paged_run.c (CPU) and
 * tests/gpu/test_graph_cuda.c (the CUDA tables' graph_run). One translation unit per test program. */
#ifndef QF_PAGED_RUN_COMMON_H
#define QF_PAGED_RUN_COMMON_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model.h"
#include "util.h"

enum { PR_MAXSEQ = 8, PR_BS = 16 };

typedef struct pr_state {
    const qf_ops *o;
    qf_model A, B;
    int nseq, maxb, V, C, L;
    int len[PR_MAXSEQ], active[PR_MAXSEQ];
    int32_t next[PR_MAXSEQ]; /* each sequence's next token (A's greedy pick) */
    int32_t *btab;           /* [nseq * maxb] */
    float *la, *lb;          /* [nseq, V] */
    char *ra, *rb;           /* [Ntok, C] act */
    int steps, graph_steps;  /* decoding steps run; those where B ran a graph */
    char bad[200];           /* the first difference ("" none) */
} pr_state;

/* a Qwen2-like shape with q/k/v biases, untied head */
static inline void pr_config(qf_model_config *c, int C, int F, int L, int H, int KV, int D, int V) {
    memset(c, 0, sizeof *c);
    snprintf(c->arch, sizeof c->arch, "qwen2");
    snprintf(c->family, sizeof c->family, "preset");
    snprintf(c->dtype, sizeof c->dtype, "bf16");
    c->vocab_size = V, c->hidden_size = C, c->intermediate_size = F, c->num_layers = L, c->num_heads = H;
    c->num_kv_heads = KV, c->head_dim = D, c->attention_bias = 1, c->rope_theta = 1e6, c->rms_norm_eps = 1e-6;
    c->max_position_embeddings = 4096, c->initializer_range = 0.05, c->bos_token_id = c->eos_token_id = -1;
    c->pad_token_id = -1;
}

/* A's and B's logits of the last call's n head rows and final residual of its N tokens: "" when the bits agree */
static inline void pr_compare(pr_state *s, int n, int N, const char *what) {
    const size_t V = (size_t)s->V, rb = (size_t)N * s->C * s->o->act_bytes;
    qf_model_paged_read_logits(&s->A, n, s->la);
    qf_model_paged_read_logits(&s->B, n, s->lb);
    s->o->copy_d2h(s->ra, qf_model_decode_residual(&s->A, s->L), rb);
    s->o->copy_d2h(s->rb, qf_model_decode_residual(&s->B, s->L), rb);
    int lg = memcmp(s->la, s->lb, (size_t)n * V * sizeof(float)) != 0, rs = memcmp(s->ra, s->rb, rb) != 0;
    if ((lg || rs) && !s->bad[0])
        snprintf(s->bad, sizeof s->bad, "%s: %s%s%s differ", what, lg ? "logits" : "", lg && rs ? " and " : "",
                 rs ? "final residual" : "");
    /* the next tokens: A's greedy picks (the first maximum) */
    for (int r = 0, q = 0; r < n; r++, q++) {
        while (!s->active[q]) q++;
        const float *x = s->la + (size_t)r * V;
        int32_t best = 0;
        for (size_t v = 1; v < V; v++)
            if (x[v] > x[best]) best = (int32_t)v;
        s->next[q] = best;
    }
}

/* both models (laid out with flags[0] and flags[1] besides QF_MODEL_PARAMS: 0 or QF_MODEL_JOINED; the same random
 * parameters in either layout), pools for nseq sequences of up to maxpos positions each; the prompts plen[nseq]
 * (their tokens s * 7 + i mod V); 0 or an exit code */
static inline int pr_init(pr_state *s, const qf_ops *o, const qf_model_config *c, int nseq, const int *plen,
                          int maxpos, const int flags[2], qf_err *e) {
    memset(s, 0, sizeof *s);
    QF_CHECK(nseq >= 1 && nseq <= PR_MAXSEQ);
    s->o = o, s->nseq = nseq, s->V = (int)c->vocab_size, s->C = c->hidden_size, s->L = c->num_layers;
    s->maxb = (maxpos + PR_BS - 1) / PR_BS;
    int ntok = 0;
    for (int q = 0; q < nseq; q++) ntok += plen[q], s->len[q] = plen[q], s->active[q] = 1;
    qf_model *m[2] = {&s->A, &s->B};
    for (int i = 0; i < 2; i++) {
        if (qf_model_create(m[i], c, o, QF_MODEL_PARAMS | flags[i], e)) return e->code;
        if (qf_model_alloc_paged(m[i], ntok, nseq, nseq * s->maxb, PR_BS, s->maxb, 0, c->num_layers, 1, e))
            return e->code;
    }
    qf_model_init_random(&s->A, 7);
    qf_model_init_random(&s->B, 7);
    s->btab = qf_malloc((size_t)nseq * s->maxb * sizeof *s->btab);
    for (int i = 0; i < nseq * s->maxb; i++) s->btab[i] = nseq * s->maxb - 1 - i; /* blocks in reverse */
    s->la = qf_malloc((size_t)nseq * s->V * sizeof(float));
    s->lb = qf_malloc((size_t)nseq * s->V * sizeof(float));
    s->ra = qf_malloc((size_t)ntok * s->C * o->act_bytes);
    s->rb = qf_malloc((size_t)ntok * s->C * o->act_bytes);
    /* the prompt call */
    int32_t *tok = qf_malloc((size_t)ntok * 4), *seq = qf_malloc((size_t)ntok * 4), *pos = qf_malloc((size_t)ntok * 4);
    int32_t rows[PR_MAXSEQ];
    int n = 0;
    for (int q = 0; q < nseq; q++) {
        for (int i = 0; i < plen[q]; i++) tok[n] = (q * 7 + i) % s->V, seq[n] = q, pos[n] = i, n++;
        rows[q] = n - 1;
    }
    for (int i = 0; i < 2; i++) {
        qf_model_paged_inputs(m[i], tok, seq, pos, n, s->btab);
        qf_model_paged_run(m[i], 1, 0, s->L, rows, nseq, i);
    }
    free(tok), free(seq), free(pos);
    pr_compare(s, nseq, n, "the prompt call");
    return 0;
}

/* one decoding step of the active sequences (each its next token at position len); returns the number of tokens */
static inline int pr_decode(pr_state *s) {
    int32_t tok[PR_MAXSEQ], seq[PR_MAXSEQ], pos[PR_MAXSEQ], rows[PR_MAXSEQ];
    int N = 0;
    for (int q = 0; q < s->nseq; q++) {
        if (!s->active[q]) continue;
        QF_CHECK(s->len[q] < s->maxb * PR_BS);
        tok[N] = s->next[q], seq[N] = q, pos[N] = s->len[q]++, rows[N] = N, N++;
    }
    if (!N) return 0;
    qf_model_paged_inputs(&s->A, tok, seq, pos, N, NULL);
    qf_model_paged_run(&s->A, 1, 0, s->L, rows, N, 0);
    qf_model_paged_inputs(&s->B, tok, seq, pos, N, NULL);
    s->graph_steps += qf_model_paged_run(&s->B, 1, 0, s->L, rows, N, 1);
    char what[64];
    snprintf(what, sizeof what, "decoding step %d (N %d, paged_len %d)", s->steps, N, s->B.paged_len);
    pr_compare(s, N, N, what);
    s->steps++;
    return N;
}

/* after the steps: the two models' KV pools of every layer, the same bits */
static inline void pr_compare_pools(pr_state *s) {
    const size_t n = (size_t)s->nseq * s->maxb * PR_BS * s->A.cfg.num_kv_heads * s->A.cfg.head_dim * s->o->act_bytes;
    char *a = qf_malloc(n), *b = qf_malloc(n);
    for (int l = 0; l < s->L && !s->bad[0]; l++)
        for (int kv = 0; kv < 2 && !s->bad[0]; kv++) {
            s->o->copy_d2h(a, kv ? s->A.vc[l] : s->A.kc[l], n);
            s->o->copy_d2h(b, kv ? s->B.vc[l] : s->B.kc[l], n);
            if (memcmp(a, b, n)) snprintf(s->bad, sizeof s->bad, "layer %d's %s pool differs", l, kv ? "v" : "k");
        }
    free(a), free(b);
}

static inline void pr_free(pr_state *s) {
    qf_model_free(&s->A);
    qf_model_free(&s->B);
    free(s->btab), free(s->la), free(s->lb), free(s->ra), free(s->rb);
}

#endif
