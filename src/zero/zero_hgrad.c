/* zero_hgrad.c — the reduced gradient shard in host memory (offload_optimizer.gradients = host; see qf_zero_hgrad
 * in zero.h). zero.c hands each completed reduce-scatter here (qf_zhg_take) instead of adding it into a device
 * shard; the norm, the fault injection and the offload step read the host shard. */
#include "zero_impl.h"
#include "model/backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t shard_n(const qf_zero *z) { return z->shard_end - z->shard_begin; }
static char *host_at(const qf_zero *z, int64_t elem) { return zi_at(z, z->hg.g, elem - z->shard_begin); }

/* The accumulation thread: each queued staging download, in order, waited for and added into its place. */
static void *acc_main(void *arg) {
    qf_zero *z = arg;
    qf_zero_hgrad *h = &z->hg;
    const size_t ab = zi_ab(z);
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->stop && h->added == h->issued) pthread_cond_wait(&h->work, &h->mu);
        if (h->added == h->issued) break; /* stopped, nothing left */
        const int64_t j = h->added;
        const qf_zhg_slot sl = h->slot[j % h->nslots];
        pthread_mutex_unlock(&h->mu);
        z->ops->copy_wait(sl.ticket);
        z->ops->range_push("zero.hgrad_accumulate");
        qf_cpu_act_add(sl.dst, (char *)h->stage + (size_t)(j % h->nslots) * (size_t)h->stage_n * ab,
                       z->ops->act_dtype, (size_t)sl.n, z->off.threads);
        z->ops->range_pop();
        pthread_mutex_lock(&h->mu);
        h->added = j + 1;
        pthread_cond_signal(&h->done);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

int qf_zhg_init(qf_zero *z, qf_err *e) {
    qf_zero_hgrad *h = &z->hg;
    QF_CHECK(z->offload_opt && z->stage >= 2 && z->opt_dev_end == z->opt_begin); /* deck_check.c / run.c */
    int U = z->m->nunits;
    h->filled = qf_calloc((size_t)U, 1);
    h->psq = qf_calloc((size_t)U, sizeof *h->psq);
    h->psq_ok = qf_calloc((size_t)U, 1);
    if (z->ops->act_dtype != QF_DT_F32) h->psq_dev = zi_dev_state(z, U, sizeof(double), "the host gradients' piece sums");
    for (int i = 0; i < QF_ZHG_INFLIGHT; i++) h->ticket[i] = -1;
    int64_t umax = 0;
    for (int u = 0; u < U; u++) umax = zi_max(umax, z->ucount[u][z->comm->rank]);
    h->stage_n = umax < QF_ZERO_OFFLOAD_CHUNK ? umax : QF_ZERO_OFFLOAD_CHUNK;
    /* a test hook: smaller staging slots, so that a small model's accumulation turns through the ring many times
     * (tests/cli/mpi_offload_hgrads.sh, gpu_hgrad_accum.sh) */
    const char *sn = getenv("QWENFT_ZHG_STAGE_N");
    if (sn && atoll(sn) > 0 && atoll(sn) < h->stage_n) h->stage_n = atoll(sn);
    if (h->stage_n < 1) h->stage_n = 1;
    /* the ring: two of the rank's largest pieces (plan/estimate.c counts the same) */
    const int64_t need = (2 * zi_max(umax, 1) + h->stage_n - 1) / h->stage_n;
    h->nslots = (int)(need < QF_ZHG_RING_MAX ? need : QF_ZHG_RING_MAX);
    if (h->nslots < 2) h->nslots = 2;
    h->slot = qf_calloc((size_t)h->nslots, sizeof *h->slot);
    const size_t stage_bytes = (size_t)h->nslots * (size_t)h->stage_n * zi_ab(z);
    h->stage = zi_host_state(z, stage_bytes, "the host gradients' staging ring");
    if (!z->offload_param || z->d->gradient_accumulation_steps == 1) {
        h->g = z->off.hbuf; /* the step's host buffer: no second copy */
        h->alias_node = z->offload_param;
    } else {
        h->g = zi_host_state(z, (size_t)(shard_n(z) ? shard_n(z) : 1) * zi_ab(z), "the host gradient shard");
        h->own = 1;
    }
    z->off.gsrc = h->g;
    const char *why = NULL; /* unpinned: copies stay correct, slower (zero.c warns once for hbuf) */
    if (z->d->offload_optimizer_pin_memory && !qf_mem_trial_failed(z->m->trial)) {
        h->pinned_g = h->own && qf_backend_pin(z->ops, h->g, (size_t)(shard_n(z) ? shard_n(z) : 1) * zi_ab(z), &why);
        h->pinned_stage = qf_backend_pin(z->ops, h->stage, stage_bytes, &why);
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->work, NULL);
    pthread_cond_init(&h->done, NULL);
    if (pthread_create(&h->th, NULL, acc_main, z) != 0)
        return qf_err_set(e, QF_EXIT_RUNTIME, "offload: cannot start the host gradient accumulation thread");
    h->started = 1;
    return 0;
}

/* the host piece of unit u (this rank's part of it) */
static char *piece(const qf_zero *z, int u) { return host_at(z, zi_ub(z, u) + z->udispl[u][z->comm->rank]); }
static int64_t piece_n(const qf_zero *z, int u) { return z->ucount[u][z->comm->rank]; }

/* The oldest first-contribution download done: its device buffer back to the pool. */
static void pop_oldest(qf_zero *z) {
    qf_zero_hgrad *h = &z->hg;
    z->ops->copy_finish(h->ticket[0], 1);
    zi_buf_put(z, h->dbuf[0], h->dn[0]);
    for (int i = 1; i < h->nq; i++)
        h->ticket[i - 1] = h->ticket[i], h->dbuf[i - 1] = h->dbuf[i], h->dn[i - 1] = h->dn[i];
    h->nq--;
}

/* Waits until the accumulation thread has added `want` downloads (no wait when it has), then finishes the tickets
 * of those added and hands back the device buffers of the pieces wholly added. */
static void acc_reap(qf_zero *z, int64_t want) {
    qf_zero_hgrad *h = &z->hg;
    pthread_mutex_lock(&h->mu);
    if (h->added < want) {
        double t0 = qf_now();
        while (h->added < want) pthread_cond_wait(&h->done, &h->mu);
        h->wait_s += qf_now() - t0;
    }
    const int64_t a = h->added;
    pthread_mutex_unlock(&h->mu);
    for (; h->finished < a; h->finished++) z->ops->copy_finish(h->slot[h->finished % h->nslots].ticket, 1);
    while (h->nacc && h->acc[0].end <= h->finished) {
        zi_buf_put(z, h->acc[0].recv, h->acc[0].n);
        for (int i = 1; i < h->nacc; i++) h->acc[i - 1] = h->acc[i];
        h->nacc--;
    }
}

/* Room for one more received piece: at most QF_ZHG_INFLIGHT device buffers wait, downloads and accumulations
 * together; the oldest first-contribution download, else the oldest accumulation, is waited for. */
static void make_room(qf_zero *z) {
    qf_zero_hgrad *h = &z->hg;
    acc_reap(z, 0);
    while (h->nq + h->nacc >= QF_ZHG_INFLIGHT) {
        if (h->nq) pop_oldest(z);
        else acc_reap(z, h->acc[0].end);
    }
}

void qf_zhg_drain(qf_zero *z) {
    qf_zero_hgrad *h = &z->hg;
    while (h->nq) pop_oldest(z);
    if (h->started) acc_reap(z, h->issued);
}

void qf_zhg_free(qf_zero *z) {
    qf_zero_hgrad *h = &z->hg;
    if (!h->filled) return;
    qf_zhg_drain(z);
    if (h->started) {
        pthread_mutex_lock(&h->mu);
        h->stop = 1;
        pthread_cond_signal(&h->work);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->th, NULL);
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->work);
        pthread_cond_destroy(&h->done);
    }
    if (h->pinned_stage) qf_backend_unpin(z->ops, h->stage);
    free(h->stage);
    free(h->slot);
    if (h->pinned_g) qf_backend_unpin(z->ops, h->g);
    if (h->own) free(h->g);
    zi_dev_free(z, h->psq_dev, z->m->nunits, sizeof(double));
    free(h->filled);
    free(h->psq);
    free(h->psq_ok);
    memset(h, 0, sizeof *h);
}

void qf_zhg_clear(qf_zero *z) {
    qf_zhg_drain(z);
    memset(z->hg.filled, 0, (size_t)z->m->nunits);
    memset(z->hg.psq_ok, 0, (size_t)z->m->nunits);
}

/* A completed reduce-scatter: p->recv (device act [p->n], this rank's piece of unit p->unit) to the host shard.
 * Takes p->recv (returned to the pool once its download is done). With 16-bit gradients the piece's sum of squares
 * is queued on the backend first (sumsq_to), so that the norm after the backward is a sum over the units that costs
 * the host neither a pass over the gradients nor a wait in the backward (the host pass, 2 bytes per parameter
 * read by the trainer's thread as each piece landed, held the GPU's queue back: Qwen2.5-7B, 15 GB a step). fp32
 * (CPU ranks) sums the whole shard at the norm in the CPU table's chunks instead: the same bits as the device
 * shard's norm. */
void qf_zhg_take(qf_zero *z, qf_zero_pending *p) {
    qf_zero_hgrad *h = &z->hg;
    size_t ab = zi_ab(z);
    char *dst = host_at(z, p->lo);
    make_room(z);
    if (!h->filled[p->unit]) { /* the step's first contribution: straight to its place, asynchronously */
        if (h->psq_dev) {
            z->ops->sumsq_to(h->psq_dev + p->unit, p->recv, (size_t)p->n);
            h->psq_ok[p->unit] = QF_ZHG_PSQ_DEV;
        }
        h->ticket[h->nq] = z->ops->copy_start(dst, p->recv, (size_t)p->n * ab, QF_COPY_D2H);
        h->dbuf[h->nq] = p->recv;
        h->dn[h->nq++] = p->n;
        h->filled[p->unit] = 1;
    } else { /* accumulate: the piece goes down slot by slot, the first download ordered after the backward queued
              * so far, the rest after the download before them; the accumulation thread adds each as it lands.
              * The first contribution to this place must have landed before anything is added into it. */
        while (h->nq) pop_oldest(z);
        h->psq_ok[p->unit] = QF_ZHG_PSQ_NONE; /* summed again at the norm */
        for (int64_t o = 0; o < p->n; o += h->stage_n) {
            if (h->issued - h->finished == h->nslots) acc_reap(z, h->finished + 1); /* a slot comes free */
            const int64_t j = h->issued, n = zi_min(p->n - o, h->stage_n);
            const int t = z->ops->copy_start((char *)h->stage + (size_t)(j % h->nslots) * (size_t)h->stage_n * ab,
                                             zi_at(z, p->recv, o), (size_t)n * ab, QF_COPY_D2H | (o ? QF_COPY_AFTER_PREV : 0));
            pthread_mutex_lock(&h->mu);
            h->slot[j % h->nslots] = (qf_zhg_slot){dst + (size_t)o * ab, n, t};
            h->issued = j + 1;
            pthread_cond_signal(&h->work);
            pthread_mutex_unlock(&h->mu);
        }
        h->acc[h->nacc].recv = p->recv;
        h->acc[h->nacc].n = p->n;
        h->acc[h->nacc++].end = h->issued;
    }
    p->recv = NULL;
}

/* End of the backward: every download done; a piece no unit wrote this step is zero. */
void qf_zhg_finish(qf_zero *z) {
    qf_zhg_drain(z);
    int r = z->comm->rank;
    for (int u = 0; u < z->m->nunits; u++) {
        int64_t n = z->ucount[u][r];
        if (n && !z->hg.filled[u]) {
            memset(host_at(z, zi_ub(z, u) + z->udispl[u][r]), 0, (size_t)n * zi_ab(z));
            z->hg.filled[u] = 1;
            z->hg.psq[u] = 0.0;
            z->hg.psq_ok[u] = QF_ZHG_PSQ_HOST;
        }
    }
}

double qf_zhg_sumsq(qf_zero *z) {
    const int dt = z->ops->act_dtype;
    if (dt == QF_DT_F32) return qf_cpu_act_sumsq(z->hg.g, dt, (size_t)shard_n(z), z->off.threads);
    const int U = z->m->nunits;
    double *dsum = qf_calloc((size_t)U, sizeof(double)); /* the backend's piece sums, one copy */
    if (z->hg.psq_dev) z->ops->copy_d2h(dsum, z->hg.psq_dev, (size_t)U * sizeof(double));
    double s = 0.0; /* the units in order: the backend's sums taken before the downloads, or the host's now */
    for (int u = 0; u < U; u++) {
        if (!piece_n(z, u)) continue;
        const int w = z->hg.psq_ok[u];
        s += w == QF_ZHG_PSQ_DEV    ? dsum[u]
             : w == QF_ZHG_PSQ_HOST ? z->hg.psq[u]
                                    : qf_cpu_act_sumsq(piece(z, u), dt, (size_t)piece_n(z, u), z->off.threads);
    }
    free(dsum);
    return s;
}

void qf_zhg_poison(qf_zero *z) {
    if (!shard_n(z)) return;
    qf_cpu_act_set_nan(z->hg.g, z->ops->act_dtype, 0);
    memset(z->hg.psq_ok, 0, (size_t)z->m->nunits); /* summed again at the norm */
}

/* A skipped step: with the node copy holding this rank's gradients, its parameters rounded back from the master
 * (the values it held: the node copy is the master rounded), before any node rank reads it again. */
void qf_zhg_discard(qf_zero *z) {
    qf_zhg_finish(z);
    if (!z->hg.alias_node) return;
    qf_cpu_act_from_f32(z->hg.g, z->hmaster, z->ops->act_dtype, (size_t)shard_n(z), z->off.threads);
    MPI_Win_sync(z->pwin);
    MPI_Barrier(z->comm->node);
}
