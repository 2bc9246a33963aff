/* tok_bpe.c — byte-pair merging of one pre-token (see tok_impl.h).
 *
 * Symbols start as the pre-token's bytes in a doubly linked list; a binary heap holds candidate merges of
 * neighbours ordered by (rank, position), so the pair merged next is always the lowest-ranked, leftmost one:
 *   HF `tokenizers` BPE: a pair's rank is its line in `merges` (Word::merge_all's priority queue);
 *   tiktoken: a pair's rank is the rank of the concatenated bytes (byte_pair_merge's scan for the minimum).
 * Stale candidates are recognised by the lengths of both symbols at push time: a symbol only grows, and the left
 * one keeps its right neighbour until it merges. O(n log n) per pre-token; short ones take tiktoken's O(n^2) scan,
 * which is faster there and picks the same pairs. */
#include <stdlib.h>

#include "tok_impl.h"

typedef struct qf_tok_sym {
    int32_t id;
    uint32_t start, len; /* len 0: merged into its left neighbour */
    int32_t prev, next;  /* -1: none */
} qf_tok_sym;

typedef struct qf_tok_cand {
    int32_t rank, new_id;
    int32_t left;
    uint32_t llen, rlen;
} qf_tok_cand;

static int cand_less(const qf_tok_cand *a, const qf_tok_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(qf_tok_scratch *s, qf_tok_cand c) {
    if (s->heap_n == s->heap_cap) {
        s->heap_cap = s->heap_cap ? 2 * s->heap_cap : 64;
        s->heap = qf_realloc(s->heap, s->heap_cap * sizeof *s->heap);
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
}

static qf_tok_cand heap_pop(qf_tok_scratch *s) {
    qf_tok_cand top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!cand_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* Pushes the merge of symbols a and its right neighbour b, when there is one. */
static int32_t pair_rank(const qf_tokenizer *t, const char *p, uint32_t a0, uint32_t a1, uint32_t a2, int32_t x,
                         int32_t y, int32_t *new_id);

static void pair_push(const qf_tokenizer *t, qf_tok_scratch *s, const char *p, int32_t a, int32_t b) {
    const qf_tok_sym *x = &s->sym[a], *y = &s->sym[b];
    int32_t new_id, rank = pair_rank(t, p, x->start, y->start, y->start + y->len, x->id, y->id, &new_id);
    if (rank != INT32_MAX) heap_push(s, (qf_tok_cand){rank, new_id, a, x->len, y->len});
}

/* The rank and result of merging parts [a0, a1) and [a1, a2) of p with ids x, y; rank INT32_MAX when none. */
static int32_t pair_rank(const qf_tokenizer *t, const char *p, uint32_t a0, uint32_t a1, uint32_t a2, int32_t x,
                         int32_t y, int32_t *new_id) {
    int32_t rank;
    if (t->by_concat) {
        rank = *new_id = qf_tok_map_get(&t->vocab, p + a0, a2 - a0);
        return rank < 0 ? INT32_MAX : rank;
    }
    return qf_tok_pairs_get(&t->merges, x, y, &rank, new_id) ? rank : INT32_MAX;
}

/* Short pre-tokens (most of them): tiktoken's own loop — scan for the lowest-ranked (leftmost) pair, merge, rescore
 * its two neighbours. Same result as the heap, less overhead below a few dozen bytes. */
#define QF_TOK_SMALL 48
static void bpe_small(const qf_tokenizer *t, const char *p, uint32_t n, qf_ids *out) {
    uint32_t start[QF_TOK_SMALL + 1];
    int32_t id[QF_TOK_SMALL], rank[QF_TOK_SMALL], nid[QF_TOK_SMALL];
    uint32_t m = n;
    for (uint32_t i = 0; i <= n; i++) start[i] = i;
    for (uint32_t i = 0; i < n; i++) id[i] = t->byte_id[(uint8_t)p[i]];
    for (uint32_t i = 0; i + 1 < n; i++) rank[i] = pair_rank(t, p, i, i + 1, i + 2, id[i], id[i + 1], &nid[i]);
    while (m > 1) {
        uint32_t best = 0;
        for (uint32_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        id[best] = nid[best];
        for (uint32_t i = best + 1; i + 1 < m; i++) {
            start[i] = start[i + 1];
            id[i] = id[i + 1];
            rank[i] = rank[i + 1];
            nid[i] = nid[i + 1];
        }
        start[m - 1] = start[m];
        m--;
        if (best > 0)
            rank[best - 1] = pair_rank(t, p, start[best - 1], start[best], start[best + 1], id[best - 1], id[best],
                                       &nid[best - 1]);
        if (best + 1 < m)
            rank[best] = pair_rank(t, p, start[best], start[best + 1], start[best + 2], id[best], id[best + 1],
                                   &nid[best]);
    }
    for (uint32_t i = 0; i < m; i++) qf_ids_push(out, id[i]);
}

void qf_tok_bpe(const qf_tokenizer *t, qf_tok_scratch *s, const char *p, size_t n, qf_ids *out) {
    if (n == 1) {
        qf_ids_push(out, t->byte_id[(uint8_t)p[0]]);
        return;
    }
    int32_t whole = qf_tok_map_get(&t->vocab, p, n);
    if (whole >= 0 && (t->whole_first || (t->whole_ok && t->whole_ok[whole]))) {
        qf_ids_push(out, whole);
        return;
    }
    if (n <= QF_TOK_SMALL) {
        bpe_small(t, p, (uint32_t)n, out);
        return;
    }
    if (n > s->sym_cap) {
        s->sym_cap = n + n / 2;
        s->sym = qf_realloc(s->sym, s->sym_cap * sizeof *s->sym);
    }
    qf_tok_sym *sym = s->sym;
    for (size_t i = 0; i < n; i++)
        sym[i] = (qf_tok_sym){t->byte_id[(uint8_t)p[i]], (uint32_t)i, 1, (int32_t)i - 1,
                              i + 1 < n ? (int32_t)i + 1 : -1};
    s->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) pair_push(t, s, p, (int32_t)i, (int32_t)i + 1);
    while (s->heap_n) {
        qf_tok_cand c = heap_pop(s);
        qf_tok_sym *l = &sym[c.left];
        if (l->len != c.llen || l->next < 0) continue;
        qf_tok_sym *r = &sym[l->next];
        if (r->len != c.rlen) continue;
        l->id = c.new_id;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (l->next >= 0) sym[l->next].prev = c.left;
        if (l->prev >= 0) pair_push(t, s, p, l->prev, c.left);
        if (l->next >= 0) pair_push(t, s, p, c.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) qf_ids_push(out, sym[i].id);
}

void qf_tok_scratch_free(qf_tok_scratch *s) {
    free(s->sym);
    free(s->heap);
    s->sym = NULL;
    s->heap = NULL;
}

void qf_tok_bpe_memo(qf_tokenizer *t) {
    qf_tok_scratch s = {0};
    qf_ids ids = {0};
    t->whole_ok = qf_calloc((size_t)t->n_ids, 1);
    for (int64_t id = 0; id < t->n_ids; id++) {
        const char *p = t->dec_buf + t->dec_off[id];
        int32_t n = t->dec_len[id];
        if (n <= 0 || qf_tok_map_get(&t->vocab, p, (size_t)n) != id) continue;
        ids.n = 0;
        qf_tok_bpe(t, &s, p, (size_t)n, &ids); /* whole_ok[id] is still 0 here: a real BPE run */
        t->whole_ok[id] = ids.n == 1 && ids.v[0] == id;
    }
    free(ids.v);
    qf_tok_scratch_free(&s);
}
