/* zero_offload.c — the offloaded optimizer step (offload_optimizer = cpu; see qf_zero_offload in zero.h).
 *
 * qf_zoff_start, after the gradient norm decided that the step is taken:
 *   1. the gradients of this rank's host range [hb, oe) (the optimizer range's end; all of it unless
 *      offload_optimizer.ratio < 1, whose backend share zero.c updates first) go down into hbuf (host act [oe-hb]) in nchunks copies
 *      on the copy engine, all queued at once (hbuf is the node copy's range with offload_param: the parameters
 *      there are rewritten by this step anyway, and no rank reads them before this rank's progress says so);
 *   2. a host thread runs the fused AdamW (qf_cpu_adamw_act: widen the gradient, update master/m/v, round the
 *      parameter into hbuf in place) chunk by chunk in flat order — the order the next forward uses the units —
 *      and publishes its progress after each chunk (release store; readers acquire).
 * The trainer's thread meanwhile runs the next forward; the engine's hooks wait per unit (qf_zoff_unit_wait) for
 * the progress of every rank holding a piece of it. The host thread makes no MPI call; its only CUDA call is
 * copy_wait on the download tickets, which the trainer's thread finishes (qf_zoff_reap) once consumed.
 * Progress encoding: version*(n+1) + flat index reached, so one monotonic int64 per rank says both which step and
 * how far. Version 0 (no step yet) counts as complete. */
#include "zero_impl.h"
#include "model/backend.h"
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t opt_n(const qf_zero *z) { return z->opt_end - z->opt_dev_end; }

int qf_zero_team_size(int cores, long online, int local_size, int gpu, int *kept) {
    if (kept) *kept = 0;
    /* every rank sees all the node's cores (no binding): share them; bound ranks: their own set */
    int t = (online > 0 && cores >= online) ? cores / (local_size > 0 ? local_size : 1) : cores;
    if (gpu && t >= 8) {
        t--;
        if (kept) *kept = 1;
    }
    return t > 0 ? t : 1;
}

int qf_zero_host_threads(int local_size, int gpu, int *kept) {
    if (kept) *kept = 0;
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
    cpu_set_t set;
    int cores = 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
    return qf_zero_team_size(cores, sysconf(_SC_NPROCESSORS_ONLN), local_size, gpu, kept);
}

int qf_zoff_init(qf_zero *z, qf_err *e) {
    qf_zero_offload *o = &z->off;
    qf_comm *c = z->comm;
    int64_t n = opt_n(z);
    o->threads = qf_zero_host_threads(c->local_size, strcmp(z->ops->name, "cpu") != 0, &o->kept_core);
    o->chunk = QF_ZERO_OFFLOAD_CHUNK;
    if (n > o->chunk * QF_ZOFF_MAX_CHUNKS) o->chunk = (n + QF_ZOFF_MAX_CHUNKS - 1) / QF_ZOFF_MAX_CHUNKS;
    o->nchunks = n > 0 ? (int)((n + o->chunk - 1) / o->chunk) : 0;
    o->reaped = o->nchunks; /* no download tickets outstanding before the first step */
    const char *ov = getenv("QWENFT_OFFLOAD_OVERLAP"); /* docs/zero.md: 0 completes every step inside update */
    int want = !(ov && !strcmp(ov, "0"));
    /* overlap needs each unit's parameters complete once the ranks holding its pieces are done: not so when the
     * updated shards still travel by MPI (stages 1-2 on several ranks, parameter offload across nodes) */
    if (z->offload_param) o->overlap = want && c->n_nodes == 1;
    else o->overlap = want && (z->stage == 0 || z->stage == 3 || c->world_size == 1);
    if (z->offload_param) {
        o->hbuf = zi_at(z, z->pnode, z->opt_dev_end);
        MPI_Aint bytes = (MPI_Aint)((size_t)c->local_size * sizeof(int64_t));
        void *base = NULL;
        MPI_Win_allocate_shared(c->local_rank == 0 ? bytes : 0, (int)sizeof(int64_t), MPI_INFO_NULL, c->node, &base,
                                &o->prog_win);
        MPI_Aint qsize;
        int qdisp;
        void *p0 = NULL;
        MPI_Win_shared_query(o->prog_win, 0, &qsize, &qdisp, &p0);
        o->node_prog = p0;
        o->prog = &o->node_prog[c->local_rank];
        atomic_store_explicit(o->prog, z->n, memory_order_release);
        o->node_world = qf_calloc((size_t)c->local_size, sizeof(int));
        MPI_Allgather(&c->rank, 1, MPI_INT, o->node_world, 1, MPI_INT, c->node);
        MPI_Barrier(c->node); /* every rank's initial progress is stored before any rank reads it */
    } else {
        o->hbuf = zi_host_state(z, (size_t)(n ? n : 1) * zi_ab(z), "the offload's host buffer");
        o->own_hbuf = 1;
        o->prog = qf_calloc(1, sizeof *o->prog);
        atomic_store_explicit(o->prog, z->n, memory_order_release);
        o->uver = qf_calloc((size_t)z->m->nunits, sizeof(int64_t));
    }
    (void)e;
    return 0;
}

void qf_zoff_free(qf_zero *z) {
    qf_zero_offload *o = &z->off;
    qf_zoff_join(z);
    if (o->own_hbuf) {
        free(o->hbuf);
        free((void *)o->prog);
    }
    if (o->node_prog) MPI_Win_free(&o->prog_win);
    free(o->uver);
    free(o->node_world);
    memset(o, 0, sizeof *o);
}

/* Ranks sharing a node without launcher binding: each rank's host AdamW team takes its own block of the node's
 * cores (local rank r: cores [r*S, r*S + T) of its share S = cores / ranks, T = the team: S, or S - 1 where a core
 * of the block is kept for the trainer's thread), one thread per core, so that 8 ranks on one node do not
 * oversubscribe. The team persists in this thread for the step's passes (libgomp keeps a pthread's team across
 * regions). */
static void pin_team(const qf_zero *z) {
    const qf_zero_offload *o = &z->off;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    const int ls = z->comm->local_size;
    if (ls < 2 || sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < online ||
        (long)o->threads * ls > online)
        return;
    const long share = online / ls;
    const long first = z->comm->local_rank * (o->threads < share ? share : o->threads);
#pragma omp parallel num_threads(o->threads)
    {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET((int)(first + omp_get_thread_num()), &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    }
}

static void *adam_main(void *arg) {
    qf_zero *z = arg;
    qf_zero_offload *o = &z->off;
    pin_team(z);
    const qf_model *m = z->m;
    const qf_deck *d = z->d;
    double t0 = qf_now();
    int64_t hb = z->opt_dev_end, oe = z->opt_end, base = o->version * (z->n + 1);
    size_t ab = zi_ab(z);
    z->ops->range_push("offload.adamw");
    for (int k = 0; k < o->nchunks; k++) {
        int64_t cb = hb + (int64_t)k * o->chunk, ce = zi_min(oe, cb + o->chunk);
        if (o->ticket[k] >= 0) z->ops->copy_wait(o->ticket[k]);
        for (int i = 0; i < m->nspecs; i++) {
            int64_t lo = zi_max(m->offset[i], cb), hi = zi_min(m->offset[i] + m->specs[i].numel, ce);
            if (lo >= hi) continue;
            int64_t s = lo - hb;
            char *h = (char *)o->hbuf + (size_t)s * ab;
            const char *gs = o->gsrc ? (const char *)o->gsrc + (size_t)s * ab : h; /* host gradients, or hbuf's */
            qf_cpu_adamw_act(z->hmaster + s, h, gs, z->ops->act_dtype, z->hadam_m + s, z->hadam_v + s, (size_t)(hi - lo),
                             o->gscale, (float)o->lr, (float)d->beta1, (float)d->beta2, (float)d->eps,
                             m->specs[i].decay ? (float)d->weight_decay : 0.0f, (int)z->adam_t, o->threads);
        }
        atomic_store_explicit(o->prog, base + ce, memory_order_release);
    }
    atomic_store_explicit(o->prog, base + z->n, memory_order_release);
    z->ops->range_pop();
    o->adam_s += qf_now() - t0;
    return NULL;
}

void qf_zoff_start(qf_zero *z, double lr, float gscale) {
    qf_zero_offload *o = &z->off;
    qf_zoff_join(z);
    int64_t ob = z->opt_begin, hb = z->opt_dev_end, oe = z->opt_end;
    const void *g = z->stage < 2 ? zi_at(z, z->gfull, ob) : z->gshard; /* gradients of [ob, oe) */
    z->ops->range_push("offload.grads_d2h");
    for (int k = 0; k < o->nchunks; k++) {
        int64_t cb = hb + (int64_t)k * o->chunk, ce = zi_min(oe, cb + o->chunk);
        if (o->gsrc) { /* the gradients are on the host already (zero_hgrad.c) */
            o->ticket[k] = -1;
            continue;
        }
        o->ticket[k] = z->ops->copy_start(zi_at(z, o->hbuf, cb - hb), zi_at(z, (void *)g, cb - ob),
                                          (size_t)(ce - cb) * zi_ab(z), QF_COPY_D2H);
    }
    z->ops->range_pop();
    o->reaped = 0;
    o->lr = lr;
    o->gscale = gscale;
    o->version++;
    /* the backend's share [ob, hb) is updated already (zero.c, before this call) */
    atomic_store_explicit(o->prog, o->version * (z->n + 1) + hb, memory_order_release);
    if (pthread_create(&o->th, NULL, adam_main, z) != 0) QF_FATAL("offload: cannot start the host AdamW thread");
    o->running = 1;
    if (!o->overlap) qf_zoff_join(z);
}

void qf_zoff_reap(qf_zero *z) {
    qf_zero_offload *o = &z->off;
    if (!o->running && o->reaped == o->nchunks) return;
    int64_t p = atomic_load_explicit(o->prog, memory_order_acquire), base = o->version * (z->n + 1);
    while (o->reaped < o->nchunks) {
        int64_t ce = zi_min(z->opt_end, z->opt_dev_end + (int64_t)(o->reaped + 1) * o->chunk);
        if (o->running && p < base + ce) break;
        int t = o->ticket[o->reaped++];
        if (t >= 0) z->ops->copy_finish(t, 0);
    }
}

int qf_zoff_join(qf_zero *z) {
    qf_zero_offload *o = &z->off;
    if (!o->running) return 0;
    double t0 = qf_now();
    pthread_join(o->th, NULL);
    o->running = 0;
    o->wait_s += qf_now() - t0;
    qf_zoff_reap(z);
    return 1;
}

/* the piece [lo, hi) of flat space held by a rank whose progress is *p is updated */
static int piece_done(const qf_zero *z, _Atomic int64_t *p, int64_t hi) {
    return atomic_load_explicit(p, memory_order_acquire) >= z->off.version * (z->n + 1) + hi;
}

int qf_zoff_unit_ready(qf_zero *z, int u) {
    qf_zero_offload *o = &z->off;
    int64_t b = zi_ub(z, u), e = zi_ue(z, u);
    if (o->node_prog) { /* offload_param: every node rank's piece of the unit (the node copy is the parameters) */
        for (int j = 0; j < z->comm->local_size; j++) {
            int r = o->node_world[j];
            int64_t lo = zi_max(b, z->shard_displ[r]), hi = zi_min(e, z->shard_displ[r] + z->shard_count[r]);
            if (hi > lo && !piece_done(z, &o->node_prog[j], hi)) return 0;
        }
        return 1;
    }
    int64_t hi = zi_min(e, z->opt_end);
    return hi <= zi_max(b, z->opt_dev_end) || piece_done(z, o->prog, hi);
}

void qf_zoff_unit_wait(qf_zero *z, int u) {
    if (qf_zoff_unit_ready(z, u)) return;
    double t0 = qf_now();
    z->ops->range_push("offload.wait_unit");
    struct timespec ts = {0, 20000}; /* 20 us: the host AdamW threads keep the cores */
    while (!qf_zoff_unit_ready(z, u)) nanosleep(&ts, NULL);
    z->ops->range_pop();
    z->off.wait_s += qf_now() - t0;
}
