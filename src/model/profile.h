/* profile.h — log.wall_clock_breakdown: where each optimizer step's time goes, on rank 0's progress line and in
 * metrics.jsonl ("breakdown" object, seconds per step).
 *
 * ("breakdown" object: metrics.jsonl's "time" is the record's UTC timestamp)
 * Phases of the step (host wall time, the backend synchronised at each boundary): data (loading the micro-batches),
 * forward, backward (incl. recomputation and the fused lm_head + loss), reduce (the gradient reduction left after
 * the backward: exposed communication), norm (global gradient norm), update (the optimizer call; with an
 * overlapped offload step only its start).
 * Op classes (the op table wrapped: each op synchronised before and after, so overlap is given up while profiling):
 * gemm, attention, pointwise (norms, RoPE, SwiGLU, residual adds and copies, embedding), head (lm_head +
 * cross-entropy), recompute (forward ops re-run inside the backward), optimizer (AdamW on the backend); and per op-table entry
 * (metrics.jsonl's breakdown.ops: seconds and calls of rmsnorm_fwd, swiglu_bwd, copy_d2d, ...). The part of forward +
 * backward that no op accounts for is waiting: for gathered parameters, prefetches, copies, the host AdamW.
 * Offload: offload_adamw = the host AdamW thread's busy time, offload_wait = the time the trainer waited for it.
 *
 * State: the wrapper needs the active profile without a context argument in the op table; it lives in the run
 * context and profile.c keeps the one pointer to it (set by qf_profile_wrap, cleared by qf_profile_unwrap). */
#ifndef QF_PROFILE_H
#define QF_PROFILE_H
#include <jansson.h>
#include <stdio.h>
#include "ops.h"

enum {
    QF_PH_DATA, QF_PH_FORWARD, QF_PH_BACKWARD, QF_PH_REDUCE, QF_PH_NORM, QF_PH_UPDATE, QF_PH_N
};
enum {
    QF_OP_GEMM, QF_OP_ATTENTION, QF_OP_POINTWISE, QF_OP_HEAD, QF_OP_RECOMPUTE, QF_OP_OPTIMIZER, QF_OP_N
};

/* the wrapped op-table entries, each timed on its own too ("ops" in the breakdown object) */
enum {
    QF_OPE_EMBEDDING_FWD, QF_OPE_EMBEDDING_BWD, QF_OPE_RMSNORM_FWD, QF_OPE_RMSNORM_BWD, QF_OPE_MATMUL_FWD,
    QF_OPE_MATMUL_BWD, QF_OPE_MATMUL_FWD_ADD, QF_OPE_ROPE_FWD, QF_OPE_ROPE_BWD, QF_OPE_ATTENTION_FWD,
    QF_OPE_ATTENTION_BWD, QF_OPE_SWIGLU_FWD, QF_OPE_SWIGLU_BWD, QF_OPE_ADD_INPLACE, QF_OPE_COPY_D2D, QF_OPE_CLASSIFIER, QF_OPE_ADAMW,
    QF_OPE_N
};

typedef struct qf_profile {
    int on;
    const qf_ops *real;      /* the table the wrappers call */
    qf_ops wrapped;          /* the table the model uses while profiling */
    double mark;             /* host time of the last phase boundary */
    double phase[QF_PH_N];   /* seconds this step */
    double op[QF_OP_N];
    double entry[QF_OPE_N];  /* seconds per op-table entry this step */
    int calls[QF_OPE_N];
    int recomputing;         /* the model re-runs a layer's forward inside the backward */
    double offload_adamw, offload_wait;
} qf_profile;

/* Starts profiling with ops; returns the table to compute with (the wrapped one). */
const qf_ops *qf_profile_wrap(qf_profile *p, const qf_ops *ops);
void qf_profile_unwrap(qf_profile *p);
/* Zeroes the step's figures and marks its start. */
void qf_profile_step_begin(qf_profile *p);
/* Closes phase `ph` at now (after synchronising the backend). No-op when p is NULL or off. */
void qf_profile_lap(qf_profile *p, int ph);
/* rank 0 outputs: one line for the progress output; the "breakdown" object of metrics.jsonl (a new reference) */
void qf_profile_print(const qf_profile *p, FILE *f);
json_t *qf_profile_json(const qf_profile *p);

#endif
