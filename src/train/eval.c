/* eval.c — validation loss: every row of data.valid, in order, spread over the ranks; token-weighted mean. */
#include <math.h>
#include "eval.h"

qf_eval_result qf_eval_run(qf_run *r) {
    qf_eval_result res = {0};
    const qf_deck *d = &r->deck;
    int B = d->train_micro_batch_size_per_gpu, W = r->comm.world_size;
    int64_t rows = r->valid_ld.rows_per_epoch;
    int64_t nbatches = (rows + (int64_t)B * W - 1) / ((int64_t)B * W); /* micro-batches per rank */
    if (d->eval_max_batches > 0 && nbatches > d->eval_max_batches) nbatches = d->eval_max_batches;
    double loss = 0;
    int64_t tokens = 0;
    qf_rows *rw = &r->rows[0];
    for (int64_t i = 0; i < nbatches; i++) {
        int64_t row0 = (i * W + r->comm.rank) * B;
        qf_err e = {0};
        if (qf_loader_rows(&r->valid_ld, 0, row0, rw, &e)) QF_FATAL("eval: %s", e.msg);
        /* every rank runs every micro-batch, even one without targets: ZeRO-3 gathers are collective */
        loss += qf_model_step(&r->model, rw, 1.0f, 0);
        tokens += rw->n_targets;
    }
    loss = qf_comm_sum_f64(&r->comm, loss);
    tokens = qf_comm_sum_i64(&r->comm, tokens);
    res.tokens = tokens;
    res.loss = tokens ? loss / (double)tokens : NAN;
    res.ppl = exp(res.loss);
    return res;
}
