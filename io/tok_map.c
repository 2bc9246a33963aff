/* tok_map.c — the tokenizer's hash maps (see tok_impl.h): open addressing with linear probing, load <= 1/2. */
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"

typedef struct qf_tok_slot {
    uint64_t h; /* 0: empty */
    uint32_t off, len;
    int32_t val;
} qf_tok_slot;

typedef struct qf_tok_pair {
    uint64_t key; /* UINT64_MAX: empty */
    int32_t rank, new_id;
} qf_tok_pair;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* 8 bytes at a time, then a final mix; never 0 (0 marks an empty slot). */
static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ mix64(w)) * 0x100000001b3ULL;
    }
    uint64_t w = 0;
    memcpy(&w, s + i, len - i);
    h = mix64(h ^ w ^ ((uint64_t)(len - i) << 59));
    return h ? h : 1;
}

int32_t qf_tok_map_get(const qf_tok_map *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    uint64_t h = hash_bytes(key, len);
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        const qf_tok_slot *s = &m->slot[i];
        if (!s->h) return -1;
        if (s->h == h && s->len == len && !memcmp(m->keys + s->off, key, len)) return s->val;
    }
}

static void map_grow(qf_tok_map *m) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    qf_tok_slot *slot = qf_calloc(cap, sizeof *slot);
    for (size_t k = 0; k < m->cap; k++) {
        if (!m->slot[k].h) continue;
        size_t i = m->slot[k].h & (cap - 1);
        while (slot[i].h) i = (i + 1) & (cap - 1);
        slot[i] = m->slot[k];
    }
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
}

int qf_tok_map_put(qf_tok_map *m, const char *key, size_t len, int32_t val) {
    if (2 * (m->n + 1) > m->cap) map_grow(m);
    uint64_t h = hash_bytes(key, len);
    size_t i = h & (m->cap - 1);
    for (; m->slot[i].h; i = (i + 1) & (m->cap - 1)) {
        qf_tok_slot *s = &m->slot[i];
        if (s->h == h && s->len == len && !memcmp(m->keys + s->off, key, len)) {
            s->val = val;
            return 1;
        }
    }
    if (m->keys_n + len > m->keys_cap) {
        m->keys_cap = (m->keys_n + len) * 2 + 4096;
        m->keys = qf_realloc(m->keys, m->keys_cap);
    }
    if (len) memcpy(m->keys + m->keys_n, key, len);
    m->slot[i] = (qf_tok_slot){h, (uint32_t)m->keys_n, (uint32_t)len, val};
    m->keys_n += len;
    m->n++;
    return 0;
}

void qf_tok_map_free(qf_tok_map *m) {
    free(m->slot);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

int qf_tok_pairs_get(const qf_tok_pairs *p, int32_t a, int32_t b, int32_t *rank, int32_t *new_id) {
    if (!p->cap) return 0;
    uint64_t k = pair_key(a, b);
    for (size_t i = mix64(k) & (p->cap - 1);; i = (i + 1) & (p->cap - 1)) {
        const qf_tok_pair *s = &p->slot[i];
        if (s->key == UINT64_MAX) return 0;
        if (s->key == k) {
            *rank = s->rank;
            *new_id = s->new_id;
            return 1;
        }
    }
}

static void pairs_grow(qf_tok_pairs *p) {
    size_t cap = p->cap ? p->cap * 2 : 1024;
    qf_tok_pair *slot = qf_malloc(cap * sizeof *slot);
    for (size_t i = 0; i < cap; i++) slot[i].key = UINT64_MAX;
    for (size_t k = 0; k < p->cap; k++) {
        if (p->slot[k].key == UINT64_MAX) continue;
        size_t i = mix64(p->slot[k].key) & (cap - 1);
        while (slot[i].key != UINT64_MAX) i = (i + 1) & (cap - 1);
        slot[i] = p->slot[k];
    }
    free(p->slot);
    p->slot = slot;
    p->cap = cap;
}

void qf_tok_pairs_put(qf_tok_pairs *p, int32_t a, int32_t b, int32_t rank, int32_t new_id) {
    if (2 * (p->n + 1) > p->cap) pairs_grow(p);
    uint64_t k = pair_key(a, b);
    size_t i = mix64(k) & (p->cap - 1);
    while (p->slot[i].key != UINT64_MAX && p->slot[i].key != k) i = (i + 1) & (p->cap - 1);
    if (p->slot[i].key == UINT64_MAX) p->n++;
    p->slot[i] = (qf_tok_pair){k, rank, new_id};
}

void qf_tok_pairs_free(qf_tok_pairs *p) {
    free(p->slot);
    memset(p, 0, sizeof *p);
}
