/* serve_kv.c — see serve_kv.h. */
#include "serve_kv.h"
#include <stdlib.h>
#include <string.h>
#include "util.h"

void qf_kv_init(qf_kv_pool *p, int nblocks, int bs, int maxb, int nslots) {
    QF_CHECK(nblocks >= 1 && bs >= 1 && maxb >= 1 && nslots >= 1);
    memset(p, 0, sizeof *p);
    p->nblocks = nblocks, p->bs = bs, p->maxb = maxb, p->nslots = nslots;
    p->free_list = qf_malloc((size_t)nblocks * sizeof *p->free_list);
    for (int i = 0; i < nblocks; i++) p->free_list[i] = nblocks - 1 - i; /* block 0 on top */
    p->nfree = nblocks;
    p->btab = qf_calloc((size_t)nslots * maxb, sizeof *p->btab);
    p->nheld = qf_calloc((size_t)nslots, sizeof *p->nheld);
}

void qf_kv_free(qf_kv_pool *p) {
    free(p->free_list);
    free(p->btab);
    free(p->nheld);
    memset(p, 0, sizeof *p);
}

int qf_kv_blocks_for(const qf_kv_pool *p, int ntok) { return (ntok + p->bs - 1) / p->bs; }

int qf_kv_take(qf_kv_pool *p, int s, int ntok) {
    int need = qf_kv_blocks_for(p, ntok);
    QF_CHECK(s >= 0 && s < p->nslots && p->nheld[s] == 0 && need <= p->maxb);
    if (need > p->nfree) return -1;
    for (int i = 0; i < need; i++) p->btab[(size_t)s * p->maxb + i] = p->free_list[--p->nfree];
    p->nheld[s] = need;
    return 0;
}

void qf_kv_give(qf_kv_pool *p, int s) {
    QF_CHECK(s >= 0 && s < p->nslots);
    for (int i = 0; i < p->nheld[s]; i++) {
        p->free_list[p->nfree++] = p->btab[(size_t)s * p->maxb + i];
        p->btab[(size_t)s * p->maxb + i] = 0;
    }
    p->nheld[s] = 0;
}
