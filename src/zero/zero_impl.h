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
#endif
