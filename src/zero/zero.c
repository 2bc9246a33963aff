/* zero.c — see zero.h: partition, storage, the model hooks, and the optimizer step. */
#include "zero_impl.h"
#include "model/backend.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- host state ---------------------------------------------------------------------------------------- */

static size_t AB(const qf_zero *z) { return z->ops->act_bytes; }
static float *host_alloc(qf_zero *z, int64_t elems, const char *where) {
    float *p = zi_host_state(z, (size_t)(elems ? elems : 1) * 4, where);
    if (p) zi_track(z, elems * 4);
    return p;
}
/* host-resident act values (the gradient shard with offload_optimizer at stages 2-3): fp32, bf16 or fp16 */
static float host_act_get(const qf_zero *z, const void *p, int64_t i) {
    switch (z->ops->act_dtype) {
    case QF_DT_BF16: return qf_bf16_to_f32(((const uint16_t *)p)[i]);
    case QF_DT_F16: return qf_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}
static void host_act_set(const qf_zero *z, void *p, int64_t i, float v) {
    switch (z->ops->act_dtype) {
    case QF_DT_BF16: ((uint16_t *)p)[i] = qf_f32_to_bf16(v); break;
    case QF_DT_F16: ((uint16_t *)p)[i] = qf_f32_to_f16(v); break;
    default: ((float *)p)[i] = v;
    }
}

/* host act[n] <-> host fp32[n] on host threads (rounding as the backend's act_from_f32: to nearest even) */
static void host_act_from_f32(const qf_zero *z, void *dst, const float *src, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) host_act_set(z, dst, i, src[i]);
}
static void host_act_to_f32(const qf_zero *z, float *dst, const void *src, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) dst[i] = host_act_get(z, src, i);
}

#define at zi_at
#define ub zi_ub
#define ue zi_ue
#define imax zi_max
#define imin zi_min
/* raw act elements for MPI copies (broadcasts only: no arithmetic on them) */
static MPI_Datatype act_mpi(const qf_zero *z) { return AB(z) == 4 ? MPI_FLOAT : MPI_UINT16_T; }

/* ---- stage 3: units gathered on use ------------------------------------------------------------------------ */

/* this rank's contribution to unit u: its shard's piece, or NULL when it is already in place in the gather
 * buffer (pfrom_master: rounded from the fp32 master into buf) */
static const void *my_piece(qf_zero *z, int u, void *buf) {
    int64_t lo = imax(ub(z, u), z->shard_begin);
    int cnt = z->ucount[u][z->comm->rank];
    if (!z->pfrom_master) return at(z, z->pshard, lo - z->shard_begin);
    if (cnt) z->ops->act_from_f32(at(z, buf, lo - ub(z, u)), z->master + (lo - z->opt_begin), (size_t)cnt);
    return NULL;
}

static void param_refresh(qf_zero *z, int u);

static void gather_start(qf_zero *z, int u, int blocking) {
    int64_t n = ue(z, u) - ub(z, u);
    if (z->offload_opt) { /* an overlapped step in flight: this unit's parameters first */
        if (z->offload_param) qf_zoff_unit_wait(z, u);
        else param_refresh(z, u);
        qf_zoff_reap(z);
    }
    z->ucache[u] = zi_buf_get(z, n, 0);
    if (!z->upersist[u]) z->live += n;
    if (z->offload_param) { /* the node's shared host copy -> this rank's (device) buffer, on the copy engine */
        z->uticket[u] = z->ops->copy_start(z->ucache[u], at(z, z->pnode, ub(z, u)), (size_t)n * AB(z), QF_COPY_H2D);
    } else {
        const void *send = my_piece(z, u, z->ucache[u]);
        qf_comm_iallgatherv_act(z->comm, send, z->ucache[u], z->ucount[u], z->udispl[u], &z->ureq[u]);
    }
    if (blocking) {
        if (z->offload_param) {
            z->ops->copy_finish(z->uticket[u], 0);
            z->uticket[u] = -1;
        } else {
            qf_comm_wait(z->comm, &z->ureq[u]);
        }
        z->gathers++;
    } else {
        z->prefetches++;
    }
}

static void gather_wait(qf_zero *z, int u) {
    if (z->offload_param && z->uticket[u] >= 0) {
        z->ops->copy_finish(z->uticket[u], 0); /* the compute stream waits for the copy; the host goes on */
        z->uticket[u] = -1;
    }
    if (qf_comm_pending(&z->ureq[u])) qf_comm_wait(z->comm, &z->ureq[u]);
}

static void unit_release(qf_zero *z, int u) {
    if (!z->ucache[u]) return;
    gather_wait(z, u);
    int64_t n = ue(z, u) - ub(z, u);
    zi_buf_put(z, z->ucache[u], n);
    z->ucache[u] = NULL;
    if (!z->upersist[u]) z->live -= n;
}

static void unit_ensure(qf_zero *z, int u) {
    if (!z->ucache[u]) gather_start(z, u, 1);
    else gather_wait(z, u);
}

/* every unit's update done before the compute stream goes on (a host read after it syncs as ever) */
static void side_join(qf_zero *z) {
    if (!z->side_pending) return;
    z->ops->side_wait(z->side_last);
    for (int u = 0; u < z->m->nunits; u++) z->umark[u] = -1;
    z->side_pending = 0;
}

static void *hk_params(void *ctx, int u) {
    qf_zero *z = ctx;
    if (z->stage < 3) {
        if (z->offload_opt) param_refresh(z, u);
        else if (z->side_pending && z->umark[u] >= 0) { /* the first use of unit u since its update */
            z->ops->side_wait(z->umark[u]);
            z->umark[u] = -1;
        }
        return at(z, z->pfull, ub(z, u));
    }
    unit_ensure(z, u);
    return z->ucache[u];
}

/* Before unit u is used: keep u and the prefetch window, free every other non-persistent unit, start the
 * window's gathers without blocking. The window takes the next units in the direction of travel while fewer than
 * stage3_prefetch_bucket_size elements are being prefetched (as DeepSpeed's coordinator, which checks the bucket
 * before adding a parameter: the next unit is prefetched even when it alone exceeds the bucket), as long as the
 * gathered units stay within stage3_max_live_parameters. */
static void hk_will_use(void *ctx, int u, int backward) {
    qf_zero *z = ctx;
    if (z->stage < 3) return;
    int U = z->m->nunits, dir = backward ? -1 : 1;
    int keep_to = u; /* window [u, keep_to] in direction dir */
    int64_t inflight = 0, live = ue(z, u) - ub(z, u);
    for (int v = u + dir; v >= 0 && v < U; v += dir) {
        int64_t n = ue(z, v) - ub(z, v);
        if (z->upersist[v]) continue;
        if (inflight >= z->d->stage3_prefetch_bucket_size || live + n > z->d->stage3_max_live_parameters) break;
        inflight += n;
        live += n;
        keep_to = v;
    }
    for (int v = 0; v < U; v++) {
        int in = dir > 0 ? (v >= u && v <= keep_to) : (v <= u && v >= keep_to);
        if (!in && !z->upersist[v]) unit_release(z, v);
    }
    unit_ensure(z, u);
    for (int v = u + dir; dir > 0 ? v <= keep_to : v >= keep_to; v += dir) {
        if (z->ucache[v]) continue;
        if (z->offload_opt && !qf_zoff_unit_ready(z, v)) break; /* its update is still running: gathered on use */
        gather_start(z, v, 0);
    }
}

static void units_invalidate(qf_zero *z) {
    if (z->stage < 3) return;
    for (int u = 0; u < z->m->nunits; u++) unit_release(z, u);
}

/* ---- stages 2-3: gradients reduce-scattered unit by unit --------------------------------------------------- */

/* The gradient buffer is zeroed at the start of a step, unless an overlapped update still reads it (the offload's
 * download, the backend's AdamW on the side stream): then at the first write, when the forward has waited for every
 * unit and the update is done. */
static void grads_ready(qf_zero *z) {
    if (!z->grads_stale) return;
    qf_zoff_join(z);
    side_join(z);
    if (z->hgrads) qf_zhg_clear(z); /* the host shard is written piece by piece: nothing to zero */
    else if (z->stage < 2) z->ops->zero(z->gfull, (size_t)z->n * AB(z));
    else z->ops->zero(z->gshard, (size_t)(z->shard_end - z->shard_begin) * AB(z));
    z->grads_stale = 0;
}

static void *hk_grads(void *ctx, int u) {
    qf_zero *z = ctx;
    grads_ready(z);
    if (z->stage < 2) return at(z, z->gfull, ub(z, u));
    if (!z->gunit[u]) z->gunit[u] = zi_buf_get(z, ue(z, u) - ub(z, u), 1);
    return z->gunit[u];
}

static void pending_complete(qf_zero *z, int keep) {
    if (z->npend > keep) grads_ready(z);
    while (z->npend > keep) {
        qf_zero_pending *p = &z->pend[0];
        qf_comm_wait(z->comm, &p->req);
        if (p->n && z->hgrads) qf_zhg_take(z, p); /* to the host; takes p->recv */
        else if (p->n) z->ops->add_inplace(at(z, z->gshard, p->lo - z->shard_begin), p->recv, (size_t)p->n);
        zi_buf_put(z, p->send, p->n_send);
        zi_buf_put(z, p->recv, p->n);
        memmove(&z->pend[0], &z->pend[1], (size_t)(z->npend - 1) * sizeof *z->pend);
        z->npend--;
    }
}

static void hk_grads_done(void *ctx, int u) {
    qf_zero *z = ctx;
    if (z->stage < 2 || !z->gunit[u]) return;
    int r = z->comm->rank;
    /* the table holds nunits + 1 reduce-scatters; more can wait when a tied unit's gradients are handed back twice
     * per micro-batch or micro-batches accumulate before qf_zero_reduce: complete the oldest first */
    if (z->npend == z->m->nunits + 1) pending_complete(z, z->npend - 1);
    qf_zero_pending *p = &z->pend[z->npend++];
    p->lo = imax(ub(z, u), z->shard_begin);
    p->n = z->ucount[u][r];
    p->n_send = ue(z, u) - ub(z, u);
    p->send = z->gunit[u];
    p->unit = u;
    p->recv = zi_buf_get(z, p->n, 0);
    z->gunit[u] = NULL;
    qf_comm_ireduce_scatterv_act(z->comm, p->send, p->recv, z->ucount[u], z->udispl[u], &p->req);
    /* without overlap_comm each reduce-scatter completes at once; with it, at most reduce_bucket_size elements
     * of gradients wait in flight while the backward goes on */
    int64_t inflight = 0;
    for (int i = 0; i < z->npend; i++) inflight += z->pend[i].n_send;
    if (!z->d->overlap_comm) pending_complete(z, 0);
    else if (inflight > z->d->reduce_bucket_size) pending_complete(z, 1 < z->npend ? z->npend - 1 : 0);
}

/* ---- parameter offload: the node's shared copy ------------------------------------------------------------- */

/* After every rank of the node wrote its shard into the shared copy: leaders exchange other nodes' shards. */
static void node_exchange(qf_zero *z) {
    qf_comm *c = z->comm;
    MPI_Win_sync(z->pwin);
    MPI_Barrier(c->node);
    if (c->leaders != MPI_COMM_NULL && c->n_nodes > 1)
        for (int r = 0; r < c->world_size; r++) {
            int64_t off = z->shard_displ[r], n = z->shard_count[r];
            for (int64_t o = 0; o < n; o += (int64_t)1 << 30) {
                int k = (int)imin(n - o, (int64_t)1 << 30);
                MPI_Bcast(at(z, z->pnode, off + o), k, act_mpi(z), z->leader_of[r], c->leaders);
            }
        }
    MPI_Win_sync(z->pwin);
    MPI_Barrier(c->node);
}

/* ---- init / free ------------------------------------------------------------------------------------------- */

static int pin(qf_zero *z, void *p, size_t bytes) {
    const char *why = NULL;
    if (qf_backend_pin(z->ops, p, bytes, &why)) return 1;
    if (strncmp(z->ops->name, "cpu", 3) && !z->pin_warned && z->comm->rank == 0) {
        fprintf(stderr, "qwen-ft: warning: pin_memory: cannot page-lock %zu bytes of host memory (%s); copies stay "
                        "correct but slower\n", bytes, why);
        z->pin_warned = 1;
    }
    return 0;
}

/* The engine's settings from the deck (which has checked them: src/deck/deck_check.c). */
static void init_options(qf_zero *z, qf_model *m, qf_comm *c, const qf_deck *d, int with_optimizer) {
    memset(z, 0, sizeof *z);
    z->m = m;
    z->comm = c;
    z->d = d;
    z->ops = m->ops;
    z->stage = d->zero_stage;
    z->with_opt = with_optimizer;
    z->offload_opt = d->offload_optimizer == QF_OFFLOAD_CPU;
    z->offload_param = d->offload_param == QF_OFFLOAD_CPU;
    /* auto is resolved by the run before the engine starts (train/run.c); an engine started without it (eval,
     * export) keeps the shard on the device */
    z->hgrads = with_optimizer && d->offload_optimizer_gradients == QF_GRADS_HOST;
    /* the backend's AdamW overlapped with the next forward (zero.h side): where the next forward reads each unit's
     * updated parameters in place — stages 0-2 without offload_optimizer, stages 1-2 on one rank only (on several
     * the updated shards travel by all-gather first); on with QWENFT_UPDATE_OVERLAP=1 only: on an H200 it measured
     * within the run-to-run spread of the completed update (docs/zero.md, docs/performance.md) */
    const char *ov = getenv("QWENFT_UPDATE_OVERLAP");
    z->side_off_why = z->stage == 3 ? "stage 3: the next forward gathers the updated shards"
                      : z->stage > 0 && c->world_size > 1 ? "stages 1-2 on several ranks: the updated shards travel by all-gather first"
                      : !ov || strcmp(ov, "1") ? "QWENFT_UPDATE_OVERLAP=1 overlaps it with the next forward: off by default, no measured gain on an H200"
                                               : NULL;
    z->side = with_optimizer && !z->offload_opt && !z->side_off_why;
    /* an invariant, not an input check: the deck refuses offload_param below stage 3 naming file, line and key
     * (src/deck/deck_check.c), and only stage 3 builds the node copy (pnode) that offload_param reads */
    QF_CHECK(!z->offload_param || z->stage == 3);
}

/* Rank r's shard: elements [n*r/W, n*(r+1)/W) of the flat parameters; the optimizer range (all at stage 0). */
static void partition_shards(qf_zero *z) {
    int W = z->comm->world_size;
    z->n = z->m->n_params;
    z->shard_count = qf_calloc((size_t)W, sizeof(int64_t));
    z->shard_displ = qf_calloc((size_t)W, sizeof(int64_t));
    for (int r = 0; r < W; r++) {
        int64_t b = (int64_t)((__int128)z->n * r / W), en = (int64_t)((__int128)z->n * (r + 1) / W);
        z->shard_displ[r] = b;
        z->shard_count[r] = en - b;
    }
    z->shard_begin = z->shard_displ[z->comm->rank];
    z->shard_end = z->shard_begin + z->shard_count[z->comm->rank];
    z->opt_begin = z->stage == 0 ? 0 : z->shard_begin;
    z->opt_end = z->stage == 0 ? z->n : z->shard_end;
}

/* Every unit's piece on every rank: ucount[u][r] elements at udispl[u][r] within the unit (MPI's int counts). */
static int partition_units(qf_zero *z, qf_err *e) {
    int W = z->comm->world_size, U = z->m->nunits;
    z->ucount = qf_calloc((size_t)U, sizeof(int *));
    z->udispl = qf_calloc((size_t)U, sizeof(int *));
    for (int u = 0; u < U; u++) {
        z->ucount[u] = qf_calloc((size_t)W, sizeof(int));
        z->udispl[u] = qf_calloc((size_t)W, sizeof(int));
        for (int r = 0; r < W; r++) {
            int64_t lo = imax(ub(z, u), z->shard_displ[r]), hi = imin(ue(z, u), z->shard_displ[r] + z->shard_count[r]);
            if (hi - lo > (int64_t)0x7fffffff)
                return qf_err_set(e, QF_EXIT_RUNTIME, "unit %d: a shard piece of %lld elements exceeds MPI's int counts; "
                                                      "use more ranks", u, (long long)(hi - lo));
            z->ucount[u][r] = hi > lo ? (int)(hi - lo) : 0;
            z->udispl[u][r] = hi > lo ? (int)(lo - ub(z, u)) : 0;
        }
    }
    return 0;
}

/* offload_param: the node's shared copy of all parameters (a window on the node's first rank), and the leader
 * rank of every rank's node */
static void open_node_copy(qf_zero *z) {
    qf_comm *c = z->comm;
    MPI_Aint bytes = c->local_rank == 0 ? (MPI_Aint)((size_t)z->n * AB(z)) : 0;
    void *base = NULL;
    MPI_Win_allocate_shared(bytes, (int)AB(z), MPI_INFO_NULL, c->node, &base, &z->pwin);
    MPI_Aint qsize;
    int qdisp;
    MPI_Win_shared_query(z->pwin, 0, &qsize, &qdisp, &z->pnode);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, z->pwin);
    z->leader_of = qf_calloc((size_t)c->world_size, sizeof(int));
    int mine = -1;
    if (c->leaders != MPI_COMM_NULL) MPI_Comm_rank(c->leaders, &mine);
    MPI_Bcast(&mine, 1, MPI_INT, 0, c->node);
    MPI_Allgather(&mine, 1, MPI_INT, z->leader_of, 1, MPI_INT, c->world);
}

/* Parameters: all of them below stage 3; at stage 3 the shard (none when the update writes them from the master
 * weights), or the node's copy with offload_param. Then the per-unit gather state. */
static void alloc_params(qf_zero *z, int64_t shard) {
    int U = z->m->nunits;
    z->pfrom_master = z->stage == 3 && !z->offload_param && !z->offload_opt && z->with_opt;
    if (z->stage < 3) {
        z->pfull = zi_dev_state(z, z->n, AB(z), "parameters");
    } else if (!z->offload_param) {
        if (!z->pfrom_master) z->pshard = zi_dev_state(z, shard, AB(z), "the parameter shard");
    } else {
        open_node_copy(z);
    }
    z->ucache = qf_calloc((size_t)U, sizeof(void *));
    z->ureq = qf_calloc((size_t)U, sizeof(qf_comm_req));
    z->uticket = qf_calloc((size_t)U, sizeof(int));
    for (int u = 0; u < U; u++) z->uticket[u] = -1;
    z->upersist = qf_calloc((size_t)U, sizeof(int));
    for (int u = 0; u < U; u++) {
        z->upersist[u] = (ue(z, u) - ub(z, u)) < z->d->stage3_param_persistence_threshold;
    }
}

/* Gradients (on the device also with offload_optimizer: they stream down at the update): all below stage 2,
 * else the shard; then the per-unit handles and the reduce-scatter table. */
static void alloc_grads(qf_zero *z, int64_t shard) {
    int U = z->m->nunits;
    if (z->with_opt && z->stage < 2) z->gfull = zi_dev_state(z, z->n, AB(z), "gradients");
    else if (z->with_opt && !z->hgrads) z->gshard = zi_dev_state(z, shard, AB(z), "the gradient shard");
    z->gunit = qf_calloc((size_t)U, sizeof(void *));
    z->pend = qf_calloc((size_t)U + 1, sizeof *z->pend);
}

/* The optimizer range's master weights and Adam moments. offload_optimizer.ratio: the share of the range whose
 * state and step are on the host (its end); the rest (its start: the units the next forward needs first) stays
 * on the backend. */
static int alloc_optimizer(qf_zero *z, qf_err *e) {
    int64_t opt = z->opt_end - z->opt_begin;
    z->opt_dev_end = z->opt_end;
    if (z->offload_opt)
        z->opt_dev_end = z->opt_begin + (int64_t)llround((1.0 - z->d->offload_optimizer_ratio) * (double)opt);
    int64_t dopt = z->opt_dev_end - z->opt_begin, hopt = z->opt_end - z->opt_dev_end;
    int64_t chunk = dopt < QF_ZERO_OFFLOAD_CHUNK ? dopt : QF_ZERO_OFFLOAD_CHUNK;
    if (z->with_opt && z->offload_param && dopt > 0) z->pstage = zi_dev_state(z, chunk, AB(z), "the parameter staging buffer");
    z->master = zi_dev_state(z, dopt, 4, "optimizer state (master weights)");
    z->adam_m = zi_dev_state(z, dopt, 4, "optimizer state (Adam moments)");
    z->adam_v = zi_dev_state(z, dopt, 4, "optimizer state (Adam moments)");
    if (z->offload_opt) {
        z->hmaster = host_alloc(z, hopt, "the offloaded optimizer state (master weights)");
        z->hadam_m = host_alloc(z, hopt, "the offloaded optimizer state (Adam moments)");
        z->hadam_v = host_alloc(z, hopt, "the offloaded optimizer state (Adam moments)");
        if (qf_zoff_init(z, e)) return e->code;
        if (z->off.own_hbuf) zi_track(z, hopt * (int64_t)AB(z));
        if (z->hgrads && qf_zhg_init(z, e)) return e->code;
        if (z->hg.own) zi_track(z, (z->shard_end - z->shard_begin) * (int64_t)AB(z));
    }
    return 0;
}

/* pin_memory: page-lock the host buffers the GPU copies to and from (on GPU ranks; nothing to do on CPU ranks) */
static void pin_host_buffers(qf_zero *z) {
    const qf_deck *d = z->d;
    if (qf_mem_trial_failed(z->m->trial)) return; /* the set-up failed: it is freed, not used */
    int64_t hopt = z->opt_end - z->opt_dev_end;
    if (z->offload_opt && z->off.own_hbuf && d->offload_optimizer_pin_memory &&
        pin(z, z->off.hbuf, (size_t)(hopt ? hopt : 1) * AB(z)))
        z->pinned[0] = z->off.hbuf;
    if (z->offload_param && d->offload_param_pin_memory && pin(z, z->pnode, (size_t)z->n * AB(z))) z->pinned[1] = z->pnode;
}

/* every path that may change a parameter value calls this first (zero.h qf_zero_param_version) */
static void params_changing(qf_zero *z) { z->param_version++; }
static uint64_t hk_param_version(void *ctx) { return ((const qf_zero *)ctx)->param_version; }
uint64_t qf_zero_param_version(const qf_zero *z) { return z->param_version; }

static void install_hooks(qf_zero *z, qf_model *m) {
    m->hooks.ctx = z;
    m->hooks.param_version = hk_param_version;
    m->hooks.unit_params = hk_params;
    m->hooks.unit_grads = hk_grads;
    m->hooks.unit_grads_done = hk_grads_done;
    m->hooks.unit_will_use = hk_will_use;
}

int qf_zero_init(qf_zero *z, qf_model *m, qf_comm *c, const qf_deck *d, int with_optimizer, qf_err *e) {
    init_options(z, m, c, d, with_optimizer);
    partition_shards(z);
    int rc = partition_units(z, e);
    if (rc) return rc;
    if (!with_optimizer) z->opt_end = z->opt_begin; /* eval: no optimizer state */
    int64_t shard = z->shard_end - z->shard_begin;
    alloc_params(z, shard);
    alloc_grads(z, shard);
    if ((rc = alloc_optimizer(z, e))) return rc;
    pin_host_buffers(z);
    z->sharded_state_bytes = z->cur_state_bytes;
    /* versions restart with this engine: the table forgets what an earlier engine's versions named */
    if (z->ops->fp8_weight) z->ops->fp8_weight(-1, 0);
    z->param_version = 1;
    z->umark = qf_malloc((size_t)m->nunits * sizeof *z->umark);
    for (int u = 0; u < m->nunits; u++) z->umark[u] = -1;
    install_hooks(z, m);
    return 0;
}

void qf_zero_free(qf_zero *z) {
    if (!z->m) return;
    int U = z->m->nunits;
    int full = z->gunit != NULL; /* qf_zero_init can stop with an error before the unit arrays exist */
    if (full) {
        qf_zero_sync(z);
        pending_complete(z, 0);
        units_invalidate(z);
    }
    int64_t shard = z->shard_end - z->shard_begin;
    if (z->hgrads) qf_zhg_free(z);
    for (int i = 0; i < 2; i++) qf_backend_unpin(z->ops, z->pinned[i]);
    if (z->offload_opt) qf_zoff_free(z);
    for (int u = 0; u < U; u++) {
        if (full && z->gunit[u]) zi_buf_put(z, z->gunit[u], ue(z, u) - ub(z, u));
        if (z->ucount) free(z->ucount[u]);
        if (z->udispl) free(z->udispl[u]);
    }
    for (int i = 0; i < z->npool; i++) zi_dev_free(z, z->pool[i], (int64_t)z->pool_bytes[i], 1);
    z->npool = 0;
    zi_dev_free(z, z->pfull, z->n, AB(z));
    zi_dev_free(z, z->pshard, shard, AB(z));
    if (z->pnode) {
        MPI_Win_unlock_all(z->pwin);
        MPI_Win_free(&z->pwin);
    }
    int64_t dopt = z->opt_dev_end - z->opt_begin;
    if (z->pstage) zi_dev_free(z, z->pstage, dopt < QF_ZERO_OFFLOAD_CHUNK ? dopt : QF_ZERO_OFFLOAD_CHUNK, AB(z));
    zi_dev_free(z, z->gfull, z->n, AB(z));
    zi_dev_free(z, z->gshard, z->gshard ? shard : 0, AB(z));
    zi_dev_free(z, z->master, dopt, 4);
    zi_dev_free(z, z->adam_m, dopt, 4);
    zi_dev_free(z, z->adam_v, dopt, 4);
    free(z->hmaster);
    free(z->hadam_m);
    free(z->hadam_v);
    free(z->ucount);
    free(z->udispl);
    free(z->ucache);
    free(z->ureq);
    free(z->uticket);
    free(z->upersist);
    free(z->gunit);
    free(z->pend);
    free(z->umark);
    free(z->leader_of);
    free(z->shard_count);
    free(z->shard_displ);
    z->m->hooks.unit_params = NULL;
    z->m->hooks.param_version = NULL;
    if (z->ops->fp8_weight) z->ops->fp8_weight(-1, 0);
    memset(z, 0, sizeof *z);
}

/* ---- parameters in and out ---------------------------------------------------------------------------------- */

void qf_zero_load_range(const qf_zero *z, int64_t *b, int64_t *e) {
    *b = z->stage == 3 ? z->shard_begin : 0;
    *e = z->stage == 3 ? z->shard_end : z->n;
}

/* device-resident act parameters of flat element `elem` (stages 0-2: full copy; stage 3: this rank's shard) */
static char *param_dev(qf_zero *z, int64_t elem) {
    QF_CHECK(!z->offload_param && !z->pfrom_master);
    if (z->stage < 3) return at(z, z->pfull, elem);
    QF_CHECK(elem >= z->shard_begin && elem <= z->shard_end);
    return at(z, z->pshard, elem - z->shard_begin);
}

/* fp32 host <-> act (backend) through a backend fp32 staging buffer */
static void act_from_host(qf_zero *z, void *dst, const float *host, int64_t n) {
    float *tmp = zi_dev_tmp(z, (size_t)n * 4 + 4);
    z->ops->copy_h2d(tmp, host, (size_t)n * 4);
    z->ops->act_from_f32(dst, tmp, (size_t)n);
    z->ops->free(tmp);
}
static void act_to_host(qf_zero *z, float *host, const void *src, int64_t n) {
    float *tmp = zi_dev_tmp(z, (size_t)n * 4 + 4);
    z->ops->act_to_f32(tmp, src, (size_t)n);
    z->ops->copy_d2h(host, tmp, (size_t)n * 4);
    z->ops->free(tmp);
}

void qf_zero_set_params(qf_zero *z, int64_t b, int64_t e, const float *host) {
    qf_zero_sync(z);
    params_changing(z);
    if (z->offload_param) { /* straight into the node's host copy */
        host_act_from_f32(z, at(z, z->pnode, b), host, e - b);
    } else if (!z->pfrom_master) {
        for (int64_t cb = b; cb < e; cb += QF_ZERO_OFFLOAD_CHUNK) {
            int64_t n = imin(e, cb + QF_ZERO_OFFLOAD_CHUNK) - cb;
            act_from_host(z, param_dev(z, cb), host + (cb - b), n);
        }
    }
    int64_t lo = imax(b, z->opt_begin), hi = imin(e, z->opt_end);
    if (hi > lo) qf_zero_opt_set(z, 0, lo, hi - lo, host + (lo - b));
}

/* Copies [lo, lo+n) of optimizer state `which` (0 master, 1 adam_m, 2 adam_v) into out, or from in (the other one
 * NULL): the part below opt_dev_end lives on the backend, the rest in host memory. */
static void opt_copy(qf_zero *z, int which, int64_t lo, int64_t n, float *out, const float *in) {
    if (n <= 0) return;
    qf_zero_sync(z);
    float *darr[3] = {z->master, z->adam_m, z->adam_v}, *harr[3] = {z->hmaster, z->hadam_m, z->hadam_v};
    QF_CHECK(which >= 0 && which < 3 && lo >= z->opt_begin && lo + n <= z->opt_end);
    int64_t nd = imax(0, imin(lo + n, z->opt_dev_end) - lo);
    float *dev = nd ? darr[which] + (lo - z->opt_begin) : NULL;
    float *hst = n > nd ? harr[which] + (lo + nd - z->opt_dev_end) : NULL;
    if (nd && out) z->ops->copy_d2h(out, dev, (size_t)nd * 4);
    if (nd && in) z->ops->copy_h2d(dev, in, (size_t)nd * 4);
    if (hst && out) memcpy(out + nd, hst, (size_t)(n - nd) * 4);
    if (hst && in) memcpy(hst, in + nd, (size_t)(n - nd) * 4);
}

void qf_zero_opt_get(qf_zero *z, int which, int64_t lo, int64_t n, float *out) {
    opt_copy(z, which, lo, n, out, NULL);
}

void qf_zero_opt_set(qf_zero *z, int which, int64_t lo, int64_t n, const float *in) {
    if (which == 0) params_changing(z); /* the master: stage 3 gathers parameters rounded from it */
    opt_copy(z, which, lo, n, NULL, in);
}

void qf_zero_params_commit(qf_zero *z) {
    params_changing(z);
    if (z->offload_param) node_exchange(z);
    units_invalidate(z);
}

void qf_zero_get_params(qf_zero *z, int64_t b, int64_t e, float *host) {
    qf_zero_sync(z);
    if (z->offload_param) {
        host_act_to_f32(z, host, at(z, z->pnode, b), e - b);
        return;
    }
    for (int64_t cb = b; cb < e; cb += QF_ZERO_OFFLOAD_CHUNK) {
        int64_t n = imin(e, cb + QF_ZERO_OFFLOAD_CHUNK) - cb;
        if (!z->pfrom_master) {
            act_to_host(z, host + (cb - b), param_dev(z, cb), n);
            continue;
        }
        void *tmp = zi_dev_tmp(z, (size_t)n * AB(z)); /* the act values the model uses: the master, rounded */
        z->ops->act_from_f32(tmp, z->master + (cb - z->opt_begin), (size_t)n);
        act_to_host(z, host + (cb - b), tmp, n);
        z->ops->free(tmp);
    }
}

/* ---- the step ---------------------------------------------------------------------------------------------- */

void qf_zero_zero_grads(qf_zero *z) {
    z->grads_stale = 1;
    if (!z->off.running && !z->side_pending) grads_ready(z);
}

void qf_zero_reduce(qf_zero *z) {
    grads_ready(z);
    z->ops->range_push("zero.reduce");
    if (z->stage < 2) qf_comm_allreduce_act(z->comm, z->gfull, (size_t)z->n);
    else pending_complete(z, 0);
    if (z->hgrads) qf_zhg_finish(z);
    z->ops->range_pop();
}

/* gradients of the optimizer range */
static const void *opt_grads(qf_zero *z) {
    return z->stage < 2 ? at(z, z->gfull, z->opt_begin) : z->gshard;
}

double qf_zero_grad_norm(qf_zero *z, double unscale) {
    grads_ready(z);
    double ss;
    if (z->stage < 2) ss = z->ops->sumsq(z->gfull, (size_t)z->n);
    else if (z->hgrads) ss = qf_comm_sum_f64(z->comm, qf_zhg_sumsq(z));
    else ss = qf_comm_sum_f64(z->comm, z->ops->sumsq(z->gshard, (size_t)(z->shard_end - z->shard_begin)));
    return sqrt(ss) * unscale;
}

/* AdamW on the flat range [b, e) of the optimizer range on the backend: g = act gradients of [b, e), pact = act
 * parameters of [b, e) to write (NULL: none). Decay only on 2-D weights. */
static void adamw_range(qf_zero *z, int64_t b, int64_t e, const void *g, void *pact, double lr, float gscale) {
    qf_model *m = z->m;
    const qf_deck *d = z->d;
    for (int i = 0; i < m->nspecs; i++) {
        int64_t lo = imax(m->offset[i], b), hi = imin(m->offset[i] + m->specs[i].numel, e);
        if (lo >= hi) continue;
        float wd = m->specs[i].decay ? (float)d->weight_decay : 0.0f;
        int64_t s = lo - z->opt_begin;
        z->ops->adamw(z->master + s, pact ? at(z, pact, lo - b) : NULL, at(z, (void *)g, lo - b), z->adam_m + s,
                      z->adam_v + s, (size_t)(hi - lo), gscale, (float)lr, (float)d->beta1, (float)d->beta2,
                      (float)d->eps, wd, (int)z->adam_t);
    }
}

/* offload_optimizer without offload_param: unit u's device parameters from the host step's hbuf, once per step
 * (after the host AdamW has passed the unit; the compute stream waits for the copy) */
static void param_refresh(qf_zero *z, int u) {
    qf_zero_offload *o = &z->off;
    if (z->offload_param || o->uver[u] >= o->version) return;
    int64_t lo = imax(ub(z, u), z->opt_dev_end), hi = imin(ue(z, u), z->opt_end); /* the host-updated part */
    if (hi > lo) {
        qf_zoff_unit_wait(z, u);
        qf_zoff_reap(z);
        int t = z->ops->copy_start(param_dev(z, lo), at(z, o->hbuf, lo - z->opt_dev_end), (size_t)(hi - lo) * AB(z),
                                   QF_COPY_H2D);
        z->ops->copy_finish(t, 0);
    }
    o->uver[u] = o->version;
}

void qf_zero_sync(qf_zero *z) {
    side_join(z);
    if (!z->offload_opt || !z->off.version) return;
    qf_zoff_join(z);
    for (int u = 0; u < z->m->nunits; u++) {
        if (z->offload_param) qf_zoff_unit_wait(z, u);
        else param_refresh(z, u);
    }
    qf_zoff_reap(z);
}

/* the AdamW of [ob, oe) unit by unit on the side stream, each unit's end a mark that the next forward's first use
 * of the unit waits for (hk_params): the same ops on the same ranges as adamw_range over [ob, oe) */
static void side_update(qf_zero *z, const void *g, double lr, float gscale) {
    int64_t ob = z->opt_begin, oe = z->opt_end;
    z->ops->side_begin();
    for (int u = 0; u < z->m->nunits; u++) {
        int64_t lo = imax(ub(z, u), ob), hi = imin(ue(z, u), oe);
        if (hi > lo) adamw_range(z, lo, hi, at(z, (void *)g, lo - ob), param_dev(z, lo), lr, gscale);
        z->umark[u] = z->ops->side_mark();
    }
    z->side_last = z->umark[z->m->nunits - 1];
    z->side_pending = 1;
    z->ops->side_end();
}

void qf_zero_update(qf_zero *z, double lr, float gscale) {
    int64_t ob = z->opt_begin, oe = z->opt_end;
    const void *g = opt_grads(z);
    side_join(z);
    params_changing(z);
    z->adam_t++;
    z->ops->range_push("zero.update");
    if (z->offload_opt) { /* zero_offload.c: gradients down, host AdamW (overlapped with the next forward) */
        qf_zoff_join(z);
        int64_t dv = z->opt_dev_end;
        if (dv > ob && z->offload_param) /* the backend's share (offload_optimizer.ratio < 1) into the node copy */
            for (int64_t cb = ob; cb < dv; cb += QF_ZERO_OFFLOAD_CHUNK) {
                int64_t ce = imin(dv, cb + QF_ZERO_OFFLOAD_CHUNK);
                adamw_range(z, cb, ce, at(z, (void *)g, cb - ob), z->pstage, lr, gscale);
                z->ops->copy_d2h(at(z, z->pnode, cb), z->pstage, (size_t)(ce - cb) * AB(z));
            }
        else if (dv > ob) /* ... or in place on the backend */
            adamw_range(z, ob, dv, g, param_dev(z, ob), lr, gscale);
        qf_zoff_start(z, lr, gscale);
        units_invalidate(z);
        if (z->off.overlap) { /* each unit is refreshed when the next forward (or a qf_zero_sync) needs it */
            z->ops->range_pop();
            return;
        }
        for (int u = 0; u < z->m->nunits; u++) param_refresh(z, u);
    } else if (z->offload_param) { /* AdamW on the device, updated parameters down into the node's copy */
        for (int64_t cb = ob; cb < oe; cb += QF_ZERO_OFFLOAD_CHUNK) {
            int64_t ce = imin(oe, cb + QF_ZERO_OFFLOAD_CHUNK);
            adamw_range(z, cb, ce, at(z, (void *)g, cb - ob), z->pstage, lr, gscale);
            z->ops->copy_d2h(at(z, z->pnode, cb), z->pstage, (size_t)(ce - cb) * AB(z));
        }
    } else if (z->side) {
        side_update(z, g, lr, gscale);
    } else {
        adamw_range(z, ob, oe, g, z->pfrom_master ? NULL : param_dev(z, ob), lr, gscale);
    }
    if (z->stage == 1 || z->stage == 2) /* the updated shards, in allgather_bucket_size pieces */
        qf_comm_allgather_act(z->comm, z->pfull, z->shard_count, z->shard_displ, z->d->allgather_bucket_size);
    if (z->offload_param) node_exchange(z);
    units_invalidate(z);
    z->ops->range_pop();
}

void qf_zero_discard_grads(qf_zero *z) {
    side_join(z);
    params_changing(z); /* the node copy's range held gradients (offload_optimizer.gradients = host) */
    if (z->hgrads) qf_zhg_discard(z);
}

void qf_zero_poison_grads(qf_zero *z) {
    side_join(z);
    grads_ready(z);
    if (z->hgrads) {
        qf_zhg_poison(z);
        return;
    }
    void *g = z->stage < 2 ? z->gfull : z->gshard;
    if (g) z->ops->scale(g, NAN, 1);
}

int64_t qf_zero_state_bytes(const qf_zero *z) { return z->cur_state_bytes; }
