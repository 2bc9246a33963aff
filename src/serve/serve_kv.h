/* serve_kv.h — the paged KV cache's block accounting: a pool of nblocks blocks of bs positions (the model's pools,
 * model.h paged mode, hold the data), a free list, and per sequence slot a block table of maxb entries. A
 * sequence takes blocks when it joins the batch (serve's engine: its prompt's, or with --preemption off its whole
 * budget's, prompt + max_new) and more as it grows (qf_kv_grow), and gives them all back when it leaves or is
 * preempted; the batch is bounded by the blocks free.
 *
 * Prefix caching (prefix on; serve's --prefix-cache): once a prompt is prefilled, its full blocks are registered by
 * content (the block's bs tokens and the block before it, so a block stands for its whole prefix), and when the
 * sequence leaves, the full blocks of the tokens it generated and fed back too (a conversation's next turn starts
 * with them). A sequence that
 * joins later takes the registered blocks that its own prompt starts with, shared (a reference count), and is
 * prefilled from the first position after them; at most (plen - 1) / bs blocks, so its last prompt token, whose
 * logits give the first new token, is always computed, and no sequence ever writes a shared block. When the last
 * holder leaves, a registered block stays cached (its rows intact) until a take needs it: the free list first, then
 * the cached blocks held by nobody, oldest release first. Matches compare the tokens and the chain of blocks
 * exactly (the 64-bit key only finds candidates), so a reused block always holds the KV its prompt would compute. */
#ifndef QF_SERVE_KV_H
#define QF_SERVE_KV_H
#include <stdint.h>

typedef struct qf_kv_pool {
    int nblocks, bs, maxb, nslots;
    int32_t *free_list; /* [nblocks] stack of blocks neither held nor cached */
    int nfree;
    int32_t *btab;      /* [nslots * maxb] block tables (unused entries 0) */
    int *nheld;         /* [nslots] blocks held by each slot */
    int *ref;           /* [nblocks] slots holding each block */
    /* the prefix cache (prefix on) */
    int prefix;
    uint8_t *cached;    /* [nblocks] 1: registered by content */
    uint64_t *key;      /* [nblocks] a cached block's chain key */
    int32_t *parent;    /* [nblocks] the cached block before it in its prompt (-1: the first) */
    uint32_t *gen, *pgen; /* [nblocks] bumped when a block leaves the cache; the parent's gen at registration */
    int32_t *toks;      /* [nblocks * bs] a cached block's tokens */
    int32_t *lru_prev, *lru_next; /* [nblocks] cached blocks held by nobody, oldest release first */
    int lru_head, lru_tail, nidle;
    int32_t *map;       /* [mapcap] open addressing by key: block ids (-1 empty) */
    int mapcap;
} qf_kv_pool;

/* prefix: 1 caches prompts' full blocks (above), 0 not */
void qf_kv_init(qf_kv_pool *p, int nblocks, int bs, int maxb, int nslots, int prefix);
void qf_kv_free(qf_kv_pool *p);
/* blocks for ntok positions */
int qf_kv_blocks_for(const qf_kv_pool *p, int ntok);
/* Slot s takes the blocks for ntok positions: 0, or -1 (nothing taken) when the pool lacks them. */
int qf_kv_take(qf_kv_pool *p, int s, int ntok);
/* The same for a sequence whose prompt is ids[0 .. plen) (plen >= 1, ntok >= plen): the cached blocks its prompt
 * starts with are shared (prefix on); *cached gets the positions they hold (a multiple of bs, < plen), from which
 * the prompt is prefilled. -1 (nothing taken) when the pool lacks the blocks beyond them. */
int qf_kv_take_prefix(qf_kv_pool *p, int s, const int32_t *ids, int plen, int ntok, int *cached);
/* qf_kv_take_prefix that also leaves at least keep blocks free or cached behind it (a watermark: room for the
 * running sequences to grow); -1 (nothing taken) otherwise. */
int qf_kv_admit(qf_kv_pool *p, int s, const int32_t *ids, int plen, int ntok, int keep, int *cached);
/* Slot s, holding blocks already, extends its table to the blocks for ntok positions (fresh blocks, never shared;
 * nothing when it holds them): 0, or -1 (nothing taken) when the pool lacks them. */
int qf_kv_grow(qf_kv_pool *p, int s, int ntok);
/* Slot s's rows of positions 0 .. n - 1 are written (their calls queued), for the tokens ids[0 .. n): its full
 * blocks among them are registered (prefix on; a block whose content is cached already is left as is). */
void qf_kv_register(qf_kv_pool *p, int s, const int32_t *ids, int n);
/* Slot s gives its blocks back. */
void qf_kv_give(qf_kv_pool *p, int s);
/* blocks held by slots (the rest is free or cached for reuse: nfree + nidle) */
int qf_kv_held(const qf_kv_pool *p);

#endif
