/* zero_impl.h — helpers shared by the ZeRO engine's files; not a public API. zero.c (partition, gather, reduce,
 * update) and zero_offload.c (the host optimizer step and its copies) are one module in two files: each may call
 * the other through zero.h and this header. */
#ifndef QF_ZERO_IMPL_H
#define QF_ZERO_IMPL_H
#include "zero.h"

static inline size_t zi_ab(const qf_zero *z) { return z->ops->act_bytes; }
/* act element `elem` of an act buffer */
static inline char *zi_at(const qf_zero *z, void *base, int64_t elem) { return (char *)base + (size_t)elem * zi_ab(z); }
/* unit u's flat range [zi_ub, zi_ue) */
static inline int64_t zi_ub(const qf_zero *z, int u) { return z->m->unit_off[u]; }
static inline int64_t zi_ue(const qf_zero *z, int u) { return z->m->unit_off[u + 1]; }
static inline int64_t zi_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t zi_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* zero_offload.c: the offloaded step (see qf_zero_offload in zero.h) */
int qf_zoff_init(qf_zero *z, qf_err *e);  /* after the partition, pnode and the optimizer state exist */
void qf_zoff_free(qf_zero *z);
/* starts the step: gradients of the optimizer range down, the host AdamW thread (joined at once unless overlap) */
void qf_zoff_start(qf_zero *z, double lr, float gscale);
/* waits for the host AdamW thread of the step in flight and finishes its copy tickets; 1 if one was in flight */
int qf_zoff_join(qf_zero *z);
/* whether every node rank's piece of unit u holds the updated parameters (nonblocking), and waiting for it */
int qf_zoff_unit_ready(qf_zero *z, int u);
void qf_zoff_unit_wait(qf_zero *z, int u);
/* finishes the gradient download tickets whose chunks the host AdamW has consumed (main thread only) */
void qf_zoff_reap(qf_zero *z);

/* zero_pool.c: the state accounting and the device buffers (dev_tmp: a backend buffer or a fatal error that
 * says how much the backend holds; dev_alloc/dev_free: tracked state; buf_get/buf_put: the pool of transient unit
 * buffers, zero-filled on request) */
void zi_track(qf_zero *z, int64_t delta);
void *zi_dev_tmp(qf_zero *z, size_t bytes);
void *zi_dev_alloc(qf_zero *z, int64_t elems, size_t esize);
/* the set-up's model state on the backend / in host memory: NULL (recorded) when it fails under a layout plan's
 * trial (z->m->trial, model/mem_trial.h), else as zi_dev_tmp / a fatal host error */
void *zi_dev_state(qf_zero *z, int64_t elems, size_t esize, const char *where);
void *zi_host_state(qf_zero *z, size_t bytes, const char *where);
void zi_dev_free(qf_zero *z, void *p, int64_t elems, size_t esize);
void *zi_buf_get(qf_zero *z, int64_t elems, int zero);
void zi_buf_put(qf_zero *z, void *p, int64_t elems);

/* zero_hgrad.c: the gradient shard in host memory (see qf_zero_hgrad in zero.h) */
int qf_zhg_init(qf_zero *z, qf_err *e); /* after qf_zoff_init */
void qf_zhg_free(qf_zero *z);
void qf_zhg_clear(qf_zero *z);                      /* a new step: no piece holds gradients */
void qf_zhg_take(qf_zero *z, qf_zero_pending *p);   /* a completed reduce-scatter's piece to the host */
void qf_zhg_drain(qf_zero *z);                      /* downloads in flight done */
void qf_zhg_finish(qf_zero *z);                     /* end of the backward: all done, unwritten pieces zero */
double qf_zhg_sumsq(qf_zero *z);
void qf_zhg_poison(qf_zero *z);
void qf_zhg_discard(qf_zero *z);                    /* a skipped step (collective on the node: alias_node) */
#endif
