/* serve_kv.c — see serve_kv.h. */
#include "serve_kv.h"
#include <stdlib.h>
#include <string.h>
#include "util.h"

void qf_kv_init(qf_kv_pool *p, int nblocks, int bs, int maxb, int nslots, int prefix) {
    QF_CHECK(nblocks >= 1 && bs >= 1 && maxb >= 1 && nslots >= 1);
    memset(p, 0, sizeof *p);
    p->nblocks = nblocks, p->bs = bs, p->maxb = maxb, p->nslots = nslots, p->prefix = prefix != 0;
    p->free_list = qf_malloc((size_t)nblocks * sizeof *p->free_list);
    for (int i = 0; i < nblocks; i++) p->free_list[i] = nblocks - 1 - i; /* block 0 on top */
    p->nfree = nblocks;
    p->btab = qf_calloc((size_t)nslots * maxb, sizeof *p->btab);
    p->nheld = qf_calloc((size_t)nslots, sizeof *p->nheld);
    p->ref = qf_calloc((size_t)nblocks, sizeof *p->ref);
    p->lru_head = p->lru_tail = -1;
    if (!p->prefix) return;
    p->cached = qf_calloc((size_t)nblocks, 1);
    p->key = qf_calloc((size_t)nblocks, sizeof *p->key);
    p->parent = qf_malloc((size_t)nblocks * sizeof *p->parent);
    p->gen = qf_calloc((size_t)nblocks, sizeof *p->gen);
    p->pgen = qf_calloc((size_t)nblocks, sizeof *p->pgen);
    p->toks = qf_malloc((size_t)nblocks * bs * sizeof *p->toks);
    p->lru_prev = qf_malloc((size_t)nblocks * sizeof *p->lru_prev);
    p->lru_next = qf_malloc((size_t)nblocks * sizeof *p->lru_next);
    p->mapcap = 16;
    while (p->mapcap < 2 * nblocks) p->mapcap *= 2;
    p->map = qf_malloc((size_t)p->mapcap * sizeof *p->map);
    for (int i = 0; i < p->mapcap; i++) p->map[i] = -1;
}

void qf_kv_free(qf_kv_pool *p) {
    free(p->free_list), free(p->btab), free(p->nheld), free(p->ref);
    free(p->cached), free(p->key), free(p->parent), free(p->gen), free(p->pgen), free(p->toks);
    free(p->lru_prev), free(p->lru_next), free(p->map);
    memset(p, 0, sizeof *p);
}

int qf_kv_blocks_for(const qf_kv_pool *p, int ntok) { return (ntok + p->bs - 1) / p->bs; }

int qf_kv_held(const qf_kv_pool *p) { return p->nblocks - p->nfree - p->nidle; }

/* ---- the cache's index: chain keys, an open-addressing map, the idle list ------------------------------------ */

/* the key of a block of tokens t[0 .. bs) after the block keyed k (a seed for the first) */
static uint64_t kv_mix(uint64_t k, const int32_t *t, int bs) {
    for (int i = 0; i < bs; i++) {
        k ^= (uint64_t)(uint32_t)t[i] + 0x9e3779b97f4a7c15ull + (k << 6) + (k >> 2);
        k *= 0xbf58476d1ce4e5b9ull;
        k ^= k >> 31;
    }
    return k;
}

static int map_find(const qf_kv_pool *p, uint64_t k) {
    const int mask = p->mapcap - 1;
    for (int i = (int)(k & (uint64_t)mask); p->map[i] >= 0; i = (i + 1) & mask)
        if (p->key[p->map[i]] == k) return p->map[i];
    return -1;
}

static void map_insert(qf_kv_pool *p, int b) {
    const int mask = p->mapcap - 1;
    int i = (int)(p->key[b] & (uint64_t)mask);
    while (p->map[i] >= 0) i = (i + 1) & mask;
    p->map[i] = b;
}

/* removes block b, closing the gap (backward shift: no tombstones) */
static void map_delete(qf_kv_pool *p, int b) {
    const int mask = p->mapcap - 1;
    int i = (int)(p->key[b] & (uint64_t)mask);
    while (p->map[i] != b) i = (i + 1) & mask;
    for (int j = (i + 1) & mask; p->map[j] >= 0; j = (j + 1) & mask) {
        const int home = (int)(p->key[p->map[j]] & (uint64_t)mask);
        /* entry j may move to the gap i when its home is not within (i, j] (cyclically) */
        const int within = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!within) p->map[i] = p->map[j], i = j;
    }
    p->map[i] = -1;
}

static void lru_push(qf_kv_pool *p, int b) { /* newest at the tail */
    p->lru_prev[b] = p->lru_tail, p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->nidle++;
}

static void lru_remove(qf_kv_pool *p, int b) {
    const int a = p->lru_prev[b], c = p->lru_next[b];
    if (a >= 0) p->lru_next[a] = c;
    else p->lru_head = c;
    if (c >= 0) p->lru_prev[c] = a;
    else p->lru_tail = a;
    p->nidle--;
}

/* cached block b holds tokens t after block prev (exactly: its tokens, its parent, the parent still the same) */
static int kv_same(const qf_kv_pool *p, int b, const int32_t *t, int prev) {
    if (!p->cached[b] || p->parent[b] != prev || (prev >= 0 && p->pgen[b] != p->gen[prev])) return 0;
    return memcmp(p->toks + (size_t)b * p->bs, t, (size_t)p->bs * sizeof *t) == 0;
}

/* block b leaves the cache (its children no longer match: gen); held by nobody, it goes to the free list */
static void kv_uncache(qf_kv_pool *p, int b) {
    map_delete(p, b);
    p->cached[b] = 0, p->gen[b]++;
    if (p->ref[b] == 0) lru_remove(p, b), p->free_list[p->nfree++] = b;
}

/* a block for a new position: the free list first, else the cached block released longest ago (evicted) */
static int kv_alloc(qf_kv_pool *p) {
    if (!p->nfree) {
        QF_CHECK(p->lru_head >= 0);
        kv_uncache(p, p->lru_head);
    }
    return p->free_list[--p->nfree];
}

/* ---- slots --------------------------------------------------------------------------------------------------- */

int qf_kv_take(qf_kv_pool *p, int s, int ntok) {
    int cached = 0;
    return qf_kv_take_prefix(p, s, NULL, 0, ntok, &cached);
}

int qf_kv_take_prefix(qf_kv_pool *p, int s, const int32_t *ids, int plen, int ntok, int *cached) {
    return qf_kv_admit(p, s, ids, plen, ntok, 0, cached);
}

int qf_kv_admit(qf_kv_pool *p, int s, const int32_t *ids, int plen, int ntok, int keep, int *cached) {
    const int need = qf_kv_blocks_for(p, ntok);
    QF_CHECK(s >= 0 && s < p->nslots && p->nheld[s] == 0 && need <= p->maxb && ntok >= plen);
    int32_t *row = p->btab + (size_t)s * p->maxb;
    int k = 0, idle = 0; /* blocks matched; of them, cached ones held by nobody (they leave the idle list) */
    const int lim = p->prefix && ids && plen > 0 ? (plen - 1) / p->bs : 0;
    uint64_t key = 0x6a09e667f3bcc909ull;
    for (int prev = -1; k < lim; k++) {
        key = kv_mix(key, ids + (size_t)k * p->bs, p->bs);
        const int b = map_find(p, key);
        if (b < 0 || !kv_same(p, b, ids + (size_t)k * p->bs, prev)) break;
        row[k] = b, idle += p->ref[b] == 0, prev = b;
    }
    if (need - k + keep > p->nfree + p->nidle - idle) {
        for (int i = 0; i < k; i++) row[i] = 0;
        return -1;
    }
    for (int i = 0; i < k; i++)
        if (p->ref[row[i]]++ == 0) lru_remove(p, row[i]);
    for (int i = k; i < need; i++) row[i] = kv_alloc(p), p->ref[row[i]] = 1;
    p->nheld[s] = need;
    *cached = k * p->bs;
    return 0;
}

int qf_kv_grow(qf_kv_pool *p, int s, int ntok) {
    const int need = qf_kv_blocks_for(p, ntok);
    QF_CHECK(s >= 0 && s < p->nslots && need <= p->maxb);
    if (need <= p->nheld[s]) return 0;
    if (need - p->nheld[s] > p->nfree + p->nidle) return -1;
    int32_t *row = p->btab + (size_t)s * p->maxb;
    for (int i = p->nheld[s]; i < need; i++) row[i] = kv_alloc(p), p->ref[row[i]] = 1;
    p->nheld[s] = need;
    return 0;
}

void qf_kv_register(qf_kv_pool *p, int s, const int32_t *ids, int n) {
    QF_CHECK(s >= 0 && s < p->nslots);
    if (!p->prefix) return;
    const int32_t *row = p->btab + (size_t)s * p->maxb;
    uint64_t key = 0x6a09e667f3bcc909ull;
    for (int i = 0, prev = -1; i < n / p->bs && i < p->nheld[s]; i++) {
        const int32_t *t = ids + (size_t)i * p->bs;
        key = kv_mix(key, t, p->bs);
        const int b = row[i];
        int c = map_find(p, key);
        if (c >= 0 && kv_same(p, c, t, prev)) { /* cached already (this very block when it was shared): its
                                                  * children follow it */
            prev = c;
            continue;
        }
        if (c >= 0) kv_uncache(p, c); /* the key's block holds another chain (its parent left the cache): ours */
        p->cached[b] = 1, p->key[b] = key, p->parent[b] = prev, p->pgen[b] = prev >= 0 ? p->gen[prev] : 0;
        memcpy(p->toks + (size_t)b * p->bs, t, (size_t)p->bs * sizeof *t);
        map_insert(p, b);
        prev = b;
    }
}

void qf_kv_give(qf_kv_pool *p, int s) {
    QF_CHECK(s >= 0 && s < p->nslots);
    int32_t *row = p->btab + (size_t)s * p->maxb;
    for (int i = 0; i < p->nheld[s]; i++) {
        const int b = row[i];
        QF_CHECK(p->ref[b] > 0);
        if (--p->ref[b] == 0) {
            if (p->prefix && p->cached[b]) lru_push(p, b);
            else p->free_list[p->nfree++] = b;
        }
        row[i] = 0;
    }
    p->nheld[s] = 0;
}
