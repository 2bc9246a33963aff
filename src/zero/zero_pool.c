/* zero_pool.c — the engine's device memory: the state accounting (peak and current bytes of what this rank holds)
 * and the pool of transient unit buffers. Called by zero.c and zero_hgrad.c; calls nothing of theirs. */
#include "zero_impl.h"
#include "model/backend.h"
#include <stdio.h>

void zi_track(qf_zero *z, int64_t delta) {
    z->cur_state_bytes += delta;
    if (z->cur_state_bytes > z->peak_state_bytes) z->peak_state_bytes = z->cur_state_bytes;
}
/* a backend buffer, or a fatal error that says how much the backend already holds */
void *zi_dev_tmp(qf_zero *z, size_t b) {
    void *p = z->ops->alloc(b ? b : 1);
    if (!p && qf_oom_rescue("the engine's unit buffers", b)) p = qf_backend_alloc_rescue(z->ops, b ? b : 1);
    if (!p)
        QF_FATAL("out of %s memory on rank %d: %zu bytes requested, %.2f GiB held by the backend (gpu_memory_limit_gb "
                 "= %g)%s", z->ops->name, z->comm->rank, b, (double)qf_backend_current_bytes(z->ops) / 1073741824.0,
                 z->d->gpu_memory_limit_gb, z->oom_hint ? z->oom_hint : "");
    return p;
}

/* the model state of the set-up: under a layout plan's trial (mem_trial.h) a failure is recorded and the buffer
 * stays NULL (the run falls back to the next plan), else zi_dev_tmp's fatal error */
void *zi_dev_state(qf_zero *z, int64_t elems, size_t esize, const char *where) {
    qf_mem_trial *t = z->m->trial;
    if (!t) return zi_dev_alloc(z, elems, esize);
    size_t b = (size_t)elems * esize;
    void *p = qf_mem_trial_alloc(t, z->ops, b, where);
    if (!p && !t->on)
        QF_FATAL("out of %s memory on rank %d: %zu bytes requested, %.2f GiB held by the backend (gpu_memory_limit_gb "
                 "= %g)", z->ops->name, z->comm->rank, b ? b : 1, (double)qf_backend_current_bytes(z->ops) / 1073741824.0,
                 z->d->gpu_memory_limit_gb);
    if (p) zi_track(z, (int64_t)b);
    return p;
}
/* host memory of the set-up (the offloaded optimizer state, the host gradient shard), zero-filled: as zi_dev_state */
void *zi_host_state(qf_zero *z, size_t bytes, const char *where) {
    qf_mem_trial *t = z->m->trial;
    if (!t) {
        void *p = qf_calloc(bytes ? bytes : 1, 1);
        qf_host_hugepages(p, bytes); /* 2 MiB pages where the kernel offers them (util.h) */
        return p;
    }
    void *p = qf_mem_trial_alloc(t, NULL, bytes, where);
    if (!p && !t->on) QF_FATAL("out of host memory on rank %d allocating %zu bytes of %s", z->comm->rank, bytes, where);
    return p;
}

void *zi_dev_alloc(qf_zero *z, int64_t elems, size_t esize) {
    size_t b = (size_t)elems * esize;
    void *p = zi_dev_tmp(z, b);
    zi_track(z, (int64_t)b);
    return p;
}
void zi_dev_free(qf_zero *z, void *p, int64_t elems, size_t esize) {
    if (!p) return;
    z->ops->free(p);
    zi_track(z, -(int64_t)((size_t)elems * esize));
}
/* Transient unit buffers (gathered parameters, unit gradients, received pieces) come from a small pool, so that a
 * step does not allocate and free (on GPUs: cudaFree, a device-wide sync) once per layer. Freed buffers wait in the
 * pool; a request of another size first releases the pool's buffers of other sizes, so the pool never holds more
 * than what was live together before. */
void *zi_buf_get(qf_zero *z, int64_t elems, int zero) {
    size_t bytes = (size_t)elems * zi_ab(z);
    for (int i = 0; i < z->npool; i++)
        if (z->pool_bytes[i] == bytes) {
            void *p = z->pool[i];
            z->pool[i] = z->pool[--z->npool];
            z->pool_bytes[i] = z->pool_bytes[z->npool];
            if (zero) z->ops->zero(p, bytes);
            return p;
        }
    for (int i = 0; i < z->npool; i++) zi_dev_free(z, z->pool[i], (int64_t)z->pool_bytes[i], 1);
    z->npool = 0;
    return zi_dev_alloc(z, elems, zi_ab(z)); /* zero-filled */
}
void zi_buf_put(qf_zero *z, void *p, int64_t elems) {
    if (!p) return;
    if (z->npool == QF_ZERO_POOL) {
        zi_dev_free(z, z->pool[0], (int64_t)z->pool_bytes[0], 1);
        z->pool[0] = z->pool[--z->npool];
        z->pool_bytes[0] = z->pool_bytes[z->npool];
    }
    z->pool[z->npool] = p;
    z->pool_bytes[z->npool++] = (size_t)elems * zi_ab(z);
}

