/* eval.h — validation loss (eval.c). */
#ifndef QF_EVAL_H
#define QF_EVAL_H
#include "run.h"

/* Validation loss over all rows of data.valid (or the first eval.max_batches micro-batches per rank). */
typedef struct qf_eval_result {
    double loss, ppl;
    int64_t tokens;
} qf_eval_result;
qf_eval_result qf_eval_run(qf_run *r);
#endif
