/* paged_prompt.c — see paged_prompt.h. */
#include "paged_prompt.h"
#include <stdlib.h>
#include <string.h>

int64_t qf_paged_prompt_bytes(const qf_model_config *c, int Tcap, int64_t ab) {
    const int64_t cap = 2 * (int64_t)Tcap, HD = (int64_t)c->num_heads * c->head_dim;
    const int64_t KD = (int64_t)c->num_kv_heads * c->head_dim;
    return cap * (2 * HD + 2 * KD) * ab + cap * c->num_heads * 4 + (3 * cap + Tcap) * 4;
}

int qf_paged_prompt_alloc(qf_paged_prompt *pp, const qf_ops *o, const qf_model_config *c, int Tcap, int max_seqs,
                          int maxb, int bs, qf_err *e) {
    memset(pp, 0, sizeof *pp);
    const char *env = getenv("QWENFT_PAGED_PROMPT");
    pp->off = !o->kv_append_paged || !o->attention_prompt || (env && !strcmp(env, "off"));
    pp->Tcap = Tcap, pp->cap = 2 * Tcap, pp->max_seqs = max_seqs, pp->maxb = maxb, pp->bs = bs;
    pp->from = Tcap;
    if (pp->off) return 0;
    const size_t cap = (size_t)pp->cap, HD = (size_t)c->num_heads * c->head_dim;
    const size_t KD = (size_t)c->num_kv_heads * c->head_dim, ab = o->act_bytes;
    pp->d_seg = o->alloc(cap * 4), pp->d_qidx = o->alloc(cap * 4), pp->d_kvidx = o->alloc(cap * 4);
    pp->d_oidx = o->alloc((size_t)Tcap * 4);
    pp->q = o->alloc(cap * HD * ab), pp->out = o->alloc(cap * HD * ab);
    pp->k = o->alloc(cap * KD * ab), pp->v = o->alloc(cap * KD * ab);
    pp->lse = o->alloc(cap * c->num_heads * 4);
    if (!pp->d_seg || !pp->d_qidx || !pp->d_kvidx || !pp->d_oidx || !pp->q || !pp->out || !pp->k || !pp->v ||
        !pp->lse)
        return qf_err_set(e, QF_EXIT_RUNTIME, "out of memory for the prompt attention's buffers (%d packed rows)",
                          pp->cap);
    pp->h_seg = qf_malloc(cap * 4), pp->h_qidx = qf_malloc(cap * 4), pp->h_kvidx = qf_malloc(cap * 4);
    pp->h_oidx = qf_malloc((size_t)Tcap * 4);
    pp->h_btab = qf_calloc((size_t)max_seqs * maxb, 4);
    return 0;
}

void qf_paged_prompt_free(qf_paged_prompt *pp, const qf_ops *o) {
    void *d[] = {pp->d_seg, pp->d_qidx, pp->d_kvidx, pp->d_oidx, pp->q, pp->out, pp->k, pp->v, pp->lse};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (d[i]) o->free(d[i]);
    free(pp->h_seg), free(pp->h_qidx), free(pp->h_kvidx), free(pp->h_oidx), free(pp->h_btab);
    memset(pp, 0, sizeof *pp);
}

/* the run ending before e: [*s, e), one sequence at consecutive positions */
static int run_start(const int32_t *seq, const int32_t *pos, int e) {
    int s = e - 1;
    while (s > 0 && seq[s - 1] == seq[s] && pos[s - 1] == pos[s] - 1) s--;
    return s;
}

void qf_paged_prompt_plan(qf_paged_prompt *pp, const qf_ops *o, const int32_t *seq, const int32_t *pos, int N,
                          const int32_t *btab) {
    pp->from = N, pp->P = 0;
    if (pp->off) return;
    QF_CHECK(N <= pp->Tcap);
    if (btab) memcpy(pp->h_btab, btab, (size_t)pp->max_seqs * pp->maxb * sizeof *btab);
    int a = N, P = 0, packed = 0;
    for (int e = N; e > 0;) { /* walk back over the runs that join */
        const int s = run_start(seq, pos, e), c = e - s, p = pos[s];
        if (p > 0 && (c < QF_PROMPT_RUN_MIN || p > QF_PROMPT_PREFIX_MAX * c)) break;
        if ((int64_t)P + p + c > pp->cap) break;
        P += p + c, packed |= p > 0;
        a = s, e = s;
    }
    if (N - a < QF_PROMPT_TAIL_MIN) return;
    pp->from = a;
    if (!packed) { /* whole prompts from position 0, in place: each one's start within the tail */
        for (int n = a; n < N; n++) pp->h_seg[n - a] = n - a - pos[n];
        o->copy_h2d(pp->d_seg, pp->h_seg, (size_t)(N - a) * sizeof *pp->h_seg);
        return;
    }
    /* packed: run by run, in call order, its sequence's positions 0 .. p+c-1 */
    int r = 0;
    for (int s = a; s < N;) {
        int e = s + 1;
        while (e < N && seq[e] == seq[e - 1] && pos[e] == pos[e - 1] + 1) e++;
        const int p = pos[s], c = e - s;
        const int32_t *blk = pp->h_btab + (size_t)seq[s] * pp->maxb;
        for (int j = 0; j < p + c; j++) {
            pp->h_seg[r + j] = r;
            pp->h_qidx[r + j] = j < p ? s : s + j - p; /* the prefix's queries: copies of the run's first */
            pp->h_kvidx[r + j] = blk[j / pp->bs] * pp->bs + j % pp->bs;
        }
        for (int j = 0; j < c; j++) pp->h_oidx[s - a + j] = r + p + j;
        r += p + c, s = e;
    }
    QF_CHECK(r == P);
    pp->P = P;
    o->copy_h2d(pp->d_seg, pp->h_seg, (size_t)P * sizeof *pp->h_seg);
    o->copy_h2d(pp->d_qidx, pp->h_qidx, (size_t)P * sizeof *pp->h_qidx);
    o->copy_h2d(pp->d_kvidx, pp->h_kvidx, (size_t)P * sizeof *pp->h_kvidx);
    o->copy_h2d(pp->d_oidx, pp->h_oidx, (size_t)(N - a) * sizeof *pp->h_oidx);
}

void qf_paged_prompt_attend(const qf_paged_prompt *pp, const qf_ops *o, void *att, const void *q, const void *k,
                            const void *v, void *kpool, void *vpool, const int32_t *d_seq, const int32_t *d_pos,
                            const int32_t *d_btab, int N, int H, int KV, int D) {
    const int f = pp->from, HD = H * D, KD = KV * D;
    const size_t ab = o->act_bytes, qo = (size_t)f * HD * ab, ko = (size_t)f * KD * ab;
    QF_CHECK(f < N);
    const void *kf = (const char *)k + ko, *vf = (const char *)v + ko;
    o->kv_append_paged(kpool, vpool, kf, vf, d_seq + f, d_pos + f, d_btab, N - f, pp->maxb, pp->bs, KV, D);
    if (!pp->P) { /* in place */
        o->attention_prompt((char *)att + qo, pp->lse, (const char *)q + qo, kf, vf, pp->d_seg, 1, N - f, H, KV, D);
        return;
    }
    /* packed: the row gathers are embedding_fwd (out[n] = table[idx[n]]) */
    o->embedding_fwd(pp->q, pp->d_qidx, q, pp->P, HD);
    o->embedding_fwd(pp->k, pp->d_kvidx, kpool, pp->P, KD);
    o->embedding_fwd(pp->v, pp->d_kvidx, vpool, pp->P, KD);
    o->attention_prompt(pp->out, pp->lse, pp->q, pp->k, pp->v, pp->d_seg, 1, pp->P, H, KV, D);
    o->embedding_fwd((char *)att + qo, pp->d_oidx, pp->out, N - f, HD);
}
