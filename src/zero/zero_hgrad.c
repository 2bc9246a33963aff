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
    /* a test hook: smaller staging pieces, so that a small model's accumulation turns through several of them
     * (tests/cli/mpi_offload_hgrads.sh) */
    const char *sn = getenv("QWENFT_ZHG_STAGE_N");
    if (sn && atoll(sn) > 0 && atoll(sn) < h->stage_n) h->stage_n = atoll(sn);
    /* two staging pieces: the next piece downloads while this one is added (qf_zhg_take) */
    const size_t stage_bytes = 2 * (size_t)(h->stage_n ? h->stage_n : 1) * zi_ab(z);
    h->stage = zi_host_state(z, stage_bytes, "the host gradients' staging buffer");
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
    (void)e;
    return 0;
}

/* the host piece of unit u (this rank's part of it) */
static char *piece(const qf_zero *z, int u) { return host_at(z, zi_ub(z, u) + z->udispl[u][z->comm->rank]); }
static int64_t piece_n(const qf_zero *z, int u) { return z->ucount[u][z->comm->rank]; }

/* The oldest download done: its device buffer back to the pool. */
static void pop_oldest(qf_zero *z) {
    qf_zero_hgrad *h = &z->hg;
    z->ops->copy_finish(h->ticket[0], 1);
    zi_buf_put(z, h->dbuf[0], h->dn[0]);
    for (int i = 1; i < h->nq; i++)
        h->ticket[i - 1] = h->ticket[i], h->dbuf[i - 1] = h->dbuf[i], h->dn[i - 1] = h->dn[i];
    h->nq--;
}

/* The pending accumulation added: staging piece c is added while piece c + 1 downloads, and piece c + 2 is queued
 * into the buffer just added from, ordered only after the download before it (ops.h QF_COPY_AFTER_PREV): the backward
 * queued on the GPU since the piece arrived does not hold it back. */
static void add_pending(qf_zero *z) {
    qf_zero_hgrad *h = &z->hg;
    if (!h->acc.active) return;
    z->ops->range_push("zero.hgrad_accumulate");
    const size_t ab = zi_ab(z);
    const int64_t sn = h->stage_n, n = h->acc.n;
    char *st[2] = {h->stage, (char *)h->stage + (size_t)sn * ab};
    for (int64_t o = 0, c = 0; o < n; o += sn, c++) {
        const int b = (int)(c & 1);
        z->ops->copy_finish(h->acc.t[b], 1);
        h->acc.t[b] = -1;
        qf_cpu_act_add(h->acc.dst + (size_t)o * ab, st[b], z->ops->act_dtype, (size_t)zi_min(n - o, sn), z->off.threads);
        if (o + 2 * sn < n)
            h->acc.t[b] = z->ops->copy_start(st[b], zi_at(z, h->acc.recv, o + 2 * sn),
                                             (size_t)zi_min(n - o - 2 * sn, sn) * ab, QF_COPY_D2H | QF_COPY_AFTER_PREV);
    }
    z->ops->range_pop();
    zi_buf_put(z, h->acc.recv, n);
    h->acc.active = 0;
    h->acc.recv = NULL;
}

void qf_zhg_drain(qf_zero *z) {
    while (z->hg.nq) pop_oldest(z);
    add_pending(z);
}

void qf_zhg_free(qf_zero *z) {
    qf_zero_hgrad *h = &z->hg;
    if (!h->filled) return;
    qf_zhg_drain(z);
    if (h->pinned_stage) qf_backend_unpin(z->ops, h->stage);
    free(h->stage);
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
    if (!h->filled[p->unit]) { /* the step's first contribution: straight to its place, asynchronously */
        add_pending(z); /* its device buffer counts in QF_ZHG_INFLIGHT */
        if (h->nq == QF_ZHG_INFLIGHT) pop_oldest(z);
        if (h->psq_dev) {
            z->ops->sumsq_to(h->psq_dev + p->unit, p->recv, (size_t)p->n);
            h->psq_ok[p->unit] = QF_ZHG_PSQ_DEV;
        }
        h->ticket[h->nq] = z->ops->copy_start(dst, p->recv, (size_t)p->n * ab, QF_COPY_D2H);
        h->dbuf[h->nq] = p->recv;
        h->dn[h->nq++] = p->n;
        h->filled[p->unit] = 1;
    } else { /* accumulate, one piece behind: the pending one is added (and earlier downloads land) first, this
              * piece's first two staging downloads are queued now and the rest at its add (add_pending) */
        qf_zhg_drain(z);
        h->psq_ok[p->unit] = QF_ZHG_PSQ_NONE; /* summed again at the norm */
        const int64_t sn = h->stage_n;
        h->acc.dst = dst;
        h->acc.recv = p->recv;
        h->acc.n = p->n;
        h->acc.t[0] = h->acc.t[1] = -1;
        for (int b = 0; b < 2 && (int64_t)b * sn < p->n; b++)
            h->acc.t[b] = z->ops->copy_start((char *)h->stage + (size_t)b * sn * ab, zi_at(z, p->recv, (int64_t)b * sn),
                                             (size_t)zi_min(p->n - (int64_t)b * sn, sn) * ab,
                                             QF_COPY_D2H | (b ? QF_COPY_AFTER_PREV : 0));
        h->acc.active = 1;
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
