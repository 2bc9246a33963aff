/* serve_kv.h — the paged KV cache's block accounting: a pool of nblocks blocks of bs positions (the model's pools,
 * model.h paged mode, hold the data), a free list, and per sequence slot a block table of maxb entries. A
 * sequence takes the blocks of its whole budget (prompt + max_new) when it joins the batch and gives them back
 * when it leaves, so a running sequence never waits for memory and nothing is ever preempted; the batch is
 * bounded by the blocks free. */
#ifndef QF_SERVE_KV_H
#define QF_SERVE_KV_H
#include <stdint.h>

typedef struct qf_kv_pool {
    int nblocks, bs, maxb, nslots;
    int32_t *free_list; /* [nblocks] stack of free block ids */
    int nfree;
    int32_t *btab;      /* [nslots * maxb] block tables (unused entries 0) */
    int *nheld;         /* [nslots] blocks held by each slot */
} qf_kv_pool;

void qf_kv_init(qf_kv_pool *p, int nblocks, int bs, int maxb, int nslots);
void qf_kv_free(qf_kv_pool *p);
/* blocks for ntok positions */
int qf_kv_blocks_for(const qf_kv_pool *p, int ntok);
/* Slot s takes the blocks for ntok positions: 0, or -1 (nothing taken) when the pool lacks them. */
int qf_kv_take(qf_kv_pool *p, int s, int ntok);
/* Slot s gives its blocks back. */
void qf_kv_give(qf_kv_pool *p, int s);

#endif
