/* zero.h — the ZeRO engine (DeepSpeed semantics) over the model's flat parameter space.
 *
 * The flat space [0, n_params) is partitioned into world_size contiguous shards (any sizes: rank r owns
 * [r*n/W, (r+1)*n/W)). Stage 0: gradients all-reduced, every rank keeps the whole fp32 master + Adam state.
 * Stage 1: master + moments sharded; gradients all-reduced; updated shards all-gathered. Stage 2: + gradients
 * reduce-scattered. Stage 3: + parameters sharded, units gathered on use ([zero] issue).
 * offload_optimizer = cpu keeps master and moments in host memory and runs AdamW there.
 * The engine owns the optimizer state; the trainer calls, per optimizer step:
 *   qf_zero_zero_grads -> micro-batches (qf_model_step) -> qf_zero_reduce -> qf_zero_grad_norm -> qf_zero_update. */
#ifndef QF_ZERO_H
#define QF_ZERO_H
#include <stdint.h>
#include "comm.h"
#include "deck.h"
#include "model.h"

typedef struct qf_zero {
    qf_model *m;
    qf_comm *comm;
    const qf_deck *d;
    int stage;
    int64_t *shard_count, *shard_displ; /* [world] */
    int64_t shard_begin, shard_end;     /* this rank's flat range */
    float *master, *adam_m, *adam_v;    /* [shard_end - shard_begin] fp32 */
    int64_t adam_t;                     /* successful optimizer steps (bias correction) */
    int master_on_host;
} qf_zero;

int qf_zero_init(qf_zero *z, qf_model *m, qf_comm *c, const qf_deck *d, qf_err *e);
void qf_zero_free(qf_zero *z);
/* master = current model parameters (after load / init) */
void qf_zero_master_from_params(qf_zero *z);
void qf_zero_zero_grads(qf_zero *z);
/* sum gradients over ranks (all-reduce or reduce-scatter per stage) */
void qf_zero_reduce(qf_zero *z);
/* global L2 norm of the (reduced) gradients, divided by inv_scale's reciprocal: returns ||g|| * unscale */
double qf_zero_grad_norm(qf_zero *z, double unscale);
/* AdamW step on this rank's shard with gradients multiplied by gscale, learning rate lr; then params everywhere */
void qf_zero_update(qf_zero *z, double lr, float gscale);
/* state bytes this rank holds (params, grads, master, moments) — for estimate and the memory plan */
int64_t qf_zero_state_bytes(const qf_zero *z);

#endif
