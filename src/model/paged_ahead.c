/* paged_ahead.c — see paged_ahead.h. */
#include "paged_ahead.h"
#include <stdlib.h>
#include <string.h>
#include "backend.h"

int qf_paged_picks_init(qf_paged_picks *p, const qf_ops *ops, int cap, qf_err *e) {
    memset(p, 0, sizeof *p);
    p->ops = ops;
    p->cap = cap;
    p->ticket[0] = p->ticket[1] = -1;
    QF_CHECK(cap >= 1);
    /* one page-aligned host block for both slots, page-locked where the backend can (else copy_start's copies to
     * it are done before it returns: correct, not ahead) */
    const size_t slot = 2 * (size_t)cap * sizeof(int32_t);
    const size_t bytes = (2 * slot + 4095) / 4096 * 4096;
    char *h = aligned_alloc(4096, bytes);
    if (!h) return qf_err_set(e, QF_EXIT_RUNTIME, "out of host memory for the decoding picks (%zu bytes)", bytes);
    memset(h, 0, bytes);
    const char *why = NULL;
    p->pinned = qf_backend_pin(ops, h, bytes, &why);
    for (int s = 0; s < 2; s++) {
        p->host[s] = (int32_t *)(h + s * slot);
        p->dev[s] = ops->alloc(slot);
        if (!p->dev[s])
            return qf_err_set(e, QF_EXIT_RUNTIME, "out of backend memory for the decoding picks (%d rows)", cap);
    }
    return 0;
}

void qf_paged_picks_free(qf_paged_picks *p) {
    if (!p->ops) return;
    for (int s = 0; s < 2; s++) {
        if (p->ticket[s] >= 0) p->ops->copy_finish(p->ticket[s], 1);
        if (p->dev[s]) p->ops->free(p->dev[s]);
    }
    if (p->host[0]) {
        if (p->pinned) qf_backend_unpin(p->ops, p->host[0]);
        free(p->host[0]);
    }
    memset(p, 0, sizeof *p);
}

void qf_paged_picks_start(qf_paged_picks *p, qf_model *m, int s, int n, int lp) {
    QF_CHECK(s == 0 || s == 1);
    QF_CHECK(p->ticket[s] < 0 && n >= 1 && n <= p->cap && m->dec_logits);
    const qf_ops *o = p->ops;
    /* ids [n] | log-softmax [n] side by side: one copy brings both */
    o->argmax_rows_dev(p->dev[s], lp ? (float *)(p->dev[s] + n) : NULL, m->dec_logits, n, (int)m->cfg.vocab_size);
    p->ticket[s] = o->copy_start(p->host[s], p->dev[s], (size_t)(lp ? 2 : 1) * n * sizeof(int32_t), QF_COPY_D2H);
    p->n[s] = n, p->lp[s] = lp;
}

void qf_paged_picks_feed(qf_paged_picks *p, qf_model *m, int s, int n) {
    QF_CHECK((s == 0 || s == 1) && p->ticket[s] >= 0 && n >= 1 && n <= p->n[s] && n <= m->T);
    p->ops->copy_d2d(m->d_tokens, p->dev[s], (size_t)n * sizeof(int32_t));
}

void qf_paged_picks_read(qf_paged_picks *p, int s, int32_t *ids, float *lp) {
    QF_CHECK((s == 0 || s == 1) && p->ticket[s] >= 0 && (!lp || p->lp[s]));
    p->ops->copy_finish(p->ticket[s], 1);
    p->ticket[s] = -1;
    const size_t n = (size_t)p->n[s];
    memcpy(ids, p->host[s], n * sizeof(int32_t));
    if (lp) memcpy(lp, p->host[s] + n, n * sizeof(float));
}
