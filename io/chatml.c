/* chatml.c — conversations -> ChatML ids + training mask, as Qwen's finetune.py `preprocess` (chatml.h). */
#include "chatml.h"
#include <stdlib.h>
#include <string.h>

static int chatml_tok(const qf_tokenizer *t, const char *s, qf_ids *out, qf_err *e) {
    return qf_tok_encode(t, s, strlen(s), out, e);
}

int qf_chatml_init(qf_chatml *c, const qf_tokenizer *t, qf_err *e) {
    memset(c, 0, sizeof *c);
    c->im_start = qf_tok_special(t, "<|im_start|>");
    c->im_end = qf_tok_special(t, "<|im_end|>");
    if (c->im_start < 0 || c->im_end < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "the tokenizer has no %s token, which ChatML needs",
                          c->im_start < 0 ? "<|im_start|>" : "<|im_end|>");
    if (chatml_tok(t, "\n", &c->nl, e) || chatml_tok(t, "system", &c->system, e) ||
        chatml_tok(t, "<|im_start|>user", &c->role[QF_CHAT_USER], e) ||
        chatml_tok(t, "<|im_start|>assistant", &c->role[QF_CHAT_ASSISTANT], e)) {
        qf_chatml_free(c);
        return e->code;
    }
    /* finetune.py's label arithmetic (len(system)-3, [len(role)+1:-2]) holds only for a one-token newline */
    if (c->nl.n != 1) {
        qf_chatml_free(c);
        return qf_err_set(e, QF_EXIT_INPUT, "the tokenizer encodes \"\\n\" as %zu tokens; ChatML as Qwen's "
                                            "finetune.py builds it needs one", c->nl.n);
    }
    for (int r = 0; r < 2; r++)
        if (c->role[r].n < 2 || c->role[r].v[0] != c->im_start) {
            qf_chatml_free(c);
            return qf_err_set(e, QF_EXIT_INPUT, "the tokenizer does not read \"<|im_start|>%s\" as <|im_start|> + "
                                                "the role word", r == QF_CHAT_USER ? "user" : "assistant");
        }
    return 0;
}

void qf_chatml_free(qf_chatml *c) {
    free(c->nl.v);
    free(c->system.v);
    free(c->role[0].v);
    free(c->role[1].v);
    memset(c, 0, sizeof *c);
}

void qf_chat_doc_turn_end(qf_chat_doc *d, size_t at) {
    if (d->n_turn_end == d->cap_turn_end) {
        d->cap_turn_end = d->cap_turn_end ? 2 * d->cap_turn_end : 16;
        d->turn_end = qf_realloc(d->turn_end, d->cap_turn_end * sizeof *d->turn_end);
    }
    d->turn_end[d->n_turn_end++] = at;
}

void qf_chat_doc_free(qf_chat_doc *d) {
    free(d->ids.v);
    free(d->mask);
    free(d->turn_end);
    memset(d, 0, sizeof *d);
}

/* gives the ids appended since `from` the mask value m */
static void chat_doc_mark(qf_chat_doc *d, size_t from, uint8_t m) {
    if (d->ids.n == from) return;
    if (d->ids.n > d->mask_cap) {
        size_t cap = d->mask_cap ? d->mask_cap : 256;
        while (cap < d->ids.n) cap *= 2;
        d->mask = qf_realloc(d->mask, cap);
        d->mask_cap = cap;
    }
    memset(d->mask + from, m, d->ids.n - from);
}

static void chat_push(qf_chat_doc *d, const int32_t *ids, size_t n, uint8_t m) {
    size_t from = d->ids.n;
    for (size_t i = 0; i < n; i++) qf_ids_push(&d->ids, ids[i]);
    chat_doc_mark(d, from, m);
}

/* One block: head (head[0] is <|im_start|>; head[1..] the role word) nl VALUE <|im_end|> nl. */
static int chat_block(const qf_chatml *c, const qf_tokenizer *t, const int32_t *head, size_t nhead,
                      const char *text, size_t len, int assistant, qf_chat_mask mode, qf_chat_doc *d, qf_err *e) {
    uint8_t qwen = mode == QF_CHAT_MASK_QWEN;
    chat_push(d, head, 1, qwen);                 /* <|im_start|>: a target in finetune.py */
    chat_push(d, head + 1, nhead - 1, 0);        /* role word */
    chat_push(d, c->nl.v, c->nl.n, 0);           /* its newline */
    size_t from = d->ids.n;
    if (qf_tok_encode(t, text, len, &d->ids, e)) return e->code;
    chat_doc_mark(d, from, (uint8_t)assistant);  /* the value: a target only for the assistant */
    chat_push(d, &c->im_end, 1, qwen || assistant);
    chat_push(d, c->nl.v, c->nl.n, qwen);        /* the turn-ending newline */
    if (assistant) qf_chat_doc_turn_end(d, d->ids.n);
    return 0;
}

int qf_chatml_render(const qf_chatml *c, const qf_tokenizer *t, const char *system, size_t sys_len,
                     const qf_chat_turn *turns, size_t n, qf_chat_mask mode, qf_chat_doc *d, qf_err *e) {
    d->ids.n = 0;
    d->n_turn_end = 0;
    if (n > 0 && turns[0].role != QF_CHAT_USER) turns++, n--; /* finetune.py: source = source[1:] */
    if (n == 0)
        return qf_err_set(e, QF_EXIT_INPUT, "no user or assistant turn to train on (a leading assistant turn is "
                                            "dropped, as Qwen's finetune.py does)");
    int32_t *head = qf_malloc((c->system.n + 1) * sizeof *head);
    head[0] = c->im_start;
    memcpy(head + 1, c->system.v, c->system.n * sizeof *head);
    int rc = chat_block(c, t, head, c->system.n + 1, system, sys_len, 0, mode, d, e);
    free(head);
    for (size_t i = 0; i < n && !rc; i++) {
        const qf_ids *r = &c->role[turns[i].role];
        rc = chat_block(c, t, r->v, r->n, turns[i].text, turns[i].len, turns[i].role == QF_CHAT_ASSISTANT, mode, d,
                        e);
    }
    return rc;
}
