/* mem_trial.c — allocations of a set-up that may fail without stopping the rank (mem_trial.h). */
#include "mem_trial.h"
#include "util.h"
#include <stdio.h>
#include <stdlib.h>

void *qf_mem_trial_alloc(qf_mem_trial *t, const qf_ops *ops, size_t bytes, const char *where) {
    size_t b = bytes ? bytes : 1;
    if (t && t->on && t->failed) return NULL;
    void *p = NULL;
    int refused = t && t->refuse_past > 0 && t->held + (int64_t)b > t->refuse_past;
    if (!refused) p = ops ? ops->alloc(b) : calloc(1, b);
    if (p && !ops) qf_host_hugepages(p, b); /* host state: 2 MiB pages where the kernel offers them */
    if (p) {
        if (t) t->held += (int64_t)b;
        return p;
    }
    if (t && !t->failed) {
        t->failed = 1;
        t->host = ops == NULL;
        t->bytes = b;
        snprintf(t->where, sizeof t->where, "%s", where);
    }
    return NULL;
}

int qf_mem_trial_failed(const qf_mem_trial *t) { return t && t->on && t->failed; }
