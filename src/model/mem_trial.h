/* mem_trial.h — the engine's set-up under a layout plan ("auto" keys, src/train/run.c): an allocation that fails
 * is recorded here instead of stopping the rank, the set-up goes on without it (and without further allocations),
 * and the run, once every rank has said how it went, frees it all and falls back to the next plan (docs/zero.md
 * "When a plan does not fit after all"). Without a trial (m->trial NULL, or on = 0) a failure stays fatal. */
#ifndef QF_MEM_TRIAL_H
#define QF_MEM_TRIAL_H
#include <stddef.h>
#include <stdint.h>
#include "ops.h"

typedef struct qf_mem_trial {
    int on;                /* 1: record a failure (the caller goes on without the buffer); 0: the caller's fatal error */
    int failed;            /* an allocation failed (or was refused by the test hook) */
    int host;              /* the failed one was host memory (1) or the backend's (0: the GPU; CPU ranks' host) */
    size_t bytes;          /* what it asked for */
    char where[96];        /* which buffer ("optimizer state", "activations" ...) */
    int64_t held;          /* bytes the set-up's allocations got */
    int64_t refuse_past;   /* test hook (QWENFT_INJECT_FAULT=R:K:oom, docs/testing.md): refuse an allocation that
                            * takes held past this (0: off) */
} qf_mem_trial;

/* bytes on the backend (ops) or, ops NULL, zero-filled host memory. NULL when it failed (or, in a trial that has
 * failed already, without trying: the set-up takes no more memory); a failure is recorded in t (may be NULL). */
void *qf_mem_trial_alloc(qf_mem_trial *t, const qf_ops *ops, size_t bytes, const char *where);
/* 1 when a trial is on and has failed: the set-up skips what would write into its buffers */
int qf_mem_trial_failed(const qf_mem_trial *t);
#endif
