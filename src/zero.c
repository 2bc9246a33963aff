/* zero.c — see zero.h. */
#include "zero.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int qf_zero_init(qf_zero *z, qf_model *m, qf_comm *c, const qf_deck *d, qf_err *e) {
    memset(z, 0, sizeof *z);
    z->m = m;
    z->comm = c;
    z->d = d;
    z->stage = d->zero_stage;
    if (z->stage == 3)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: zero_optimization.stage = 3 is not available in this build yet "
                                            "(stages 0-2 are); see docs/zero.md",
                          d->path);
    int W = c->world_size;
    int64_t n = m->n_params;
    z->shard_count = qf_calloc((size_t)W, sizeof(int64_t));
    z->shard_displ = qf_calloc((size_t)W, sizeof(int64_t));
    for (int r = 0; r < W; r++) {
        int64_t b = (int64_t)((__int128)n * r / W), en = (int64_t)((__int128)n * (r + 1) / W);
        z->shard_displ[r] = b;
        z->shard_count[r] = en - b;
    }
    if (z->stage == 0) {
        z->shard_begin = 0;
        z->shard_end = n;
    } else {
        z->shard_begin = z->shard_displ[c->rank];
        z->shard_end = z->shard_begin + z->shard_count[c->rank];
    }
    size_t len = (size_t)(z->shard_end - z->shard_begin);
    /* the CPU backend's memory is host memory: offload changes nothing in place but is honoured for [cuda] */
    z->master_on_host = 1;
    z->master = qf_calloc(len, sizeof(float));
    z->adam_m = qf_calloc(len, sizeof(float));
    z->adam_v = qf_calloc(len, sizeof(float));
    return 0;
}

void qf_zero_free(qf_zero *z) {
    free(z->shard_count);
    free(z->shard_displ);
    free(z->master);
    free(z->adam_m);
    free(z->adam_v);
    memset(z, 0, sizeof *z);
}

void qf_zero_master_from_params(qf_zero *z) {
    const qf_ops *o = z->m->ops;
    size_t len = (size_t)(z->shard_end - z->shard_begin);
    float *tmp = o->alloc(len * 4);
    QF_CHECK(tmp);
    o->act_to_f32(tmp, (const char *)z->m->params + (size_t)z->shard_begin * o->act_bytes, len);
    o->copy_d2h(z->master, tmp, len * 4);
    o->free(tmp);
}

void qf_zero_zero_grads(qf_zero *z) {
    z->m->ops->zero(z->m->grads, (size_t)z->m->n_params * z->m->ops->act_bytes);
}

void qf_zero_reduce(qf_zero *z) {
    qf_comm *c = z->comm;
    if (c->world_size == 1) return;
    if (z->stage <= 1) {
        qf_comm_allreduce_act(c, z->m->grads, (size_t)z->m->n_params);
    } else {
        /* stage 2: each rank ends with the summed gradients of its shard, in place at its shard's offset */
        size_t eb = z->m->ops->act_bytes;
        char *g = z->m->grads;
        int64_t len = z->shard_end - z->shard_begin;
        void *tmp = z->m->ops->alloc((size_t)len * eb + 1);
        QF_CHECK(tmp);
        qf_comm_reduce_scatter_act(c, g, tmp, z->shard_count, z->shard_displ);
        z->m->ops->copy_d2d(g + (size_t)z->shard_begin * eb, tmp, (size_t)len * eb);
        z->m->ops->free(tmp);
    }
}

double qf_zero_grad_norm(qf_zero *z, double unscale) {
    const qf_ops *o = z->m->ops;
    double ss;
    if (z->stage == 0 || z->comm->world_size == 1) {
        ss = o->sumsq(z->m->grads, (size_t)z->m->n_params);
    } else {
        ss = o->sumsq((const char *)z->m->grads + (size_t)z->shard_begin * o->act_bytes,
                      (size_t)(z->shard_end - z->shard_begin));
        ss = qf_comm_sum_f64(z->comm, ss);
    }
    return sqrt(ss) * unscale;
}

void qf_zero_update(qf_zero *z, double lr, float gscale) {
    qf_model *m = z->m;
    const qf_ops *o = m->ops;
    const qf_deck *d = z->d;
    size_t eb = o->act_bytes;
    z->adam_t++;
    /* AdamW per parameter segment inside this rank's shard: decay only on 2-D weights */
    for (int i = 0; i < m->nspecs; i++) {
        int64_t pb = m->offset[i], pe = pb + m->specs[i].numel;
        int64_t b = pb > z->shard_begin ? pb : z->shard_begin, en = pe < z->shard_end ? pe : z->shard_end;
        if (b >= en) continue;
        float wd = m->specs[i].decay ? (float)d->weight_decay : 0.0f;
        int64_t s = b - z->shard_begin;
        o->adamw(z->master + s, (char *)m->params + (size_t)b * eb, (const char *)m->grads + (size_t)b * eb,
                 z->adam_m + s, z->adam_v + s, (size_t)(en - b), gscale, (float)lr, (float)d->beta1,
                 (float)d->beta2, (float)d->eps, wd, (int)z->adam_t);
    }
    if (z->stage >= 1) qf_comm_allgather_act(z->comm, m->params, z->shard_count, z->shard_displ);
}

int64_t qf_zero_state_bytes(const qf_zero *z) {
    int64_t n = z->m->n_params, s = z->shard_end - z->shard_begin;
    return n * (int64_t)z->m->ops->act_bytes * 2 + s * 12;
}
