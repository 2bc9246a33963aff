/* serve.c — the KV pool plan of qwen-ft serve (serve.h). */
#include "serve.h"
#include "model/model.h"

int qf_serve_plan_blocks(const qf_serve_opts *o, int *nblocks, double *kv_gib, qf_err *e) {
    const qf_model_config *c = o->cfg;
    int bs = o->block_size, maxb = (o->max_total + bs - 1) / bs, Ntok = o->chunk + o->max_batch;
    int64_t ab = (int64_t)o->ops->act_bytes;
    const int L = c->num_layers, l0 = o->world > 1 ? o->l0 : 0, l1 = o->world > 1 ? o->l1 : L;
    const int first = l0 == 0, last = l1 == L;
    int64_t per_block = 2 * (int64_t)(l1 - l0) * bs * c->num_kv_heads * c->head_dim * ab;
    int64_t full = (int64_t)o->max_batch * maxb, nb = full, least = (Ntok + bs - 1) / bs;
    if (o->gpu_limit_gb > 0 && per_block > 0) {
        qf_model m;
        if (qf_model_create(&m, c, o->ops, 0, e)) return e->code;
        int64_t held = m.unit_off[l1 + 1] - m.unit_off[l0 + 1]; /* units 1..L are the layers */
        if (first || (last && m.ix_head == m.ix_embed)) held += m.unit_off[1] - m.unit_off[0];
        if (last) held += m.unit_off[L + 2] - m.unit_off[L + 1];
        int64_t weights = held * ab;
        qf_model_free(&m);
        int64_t acts = qf_model_paged_bytes(c, Ntok, o->max_batch, (int)least, bs, maxb, l1 - l0, last, ab) -
                       least * per_block;
        int64_t budget = (int64_t)(o->gpu_limit_gb * 1073741824.0) - weights - acts - ((int64_t)256 << 20);
        int64_t fit = budget > 0 ? budget / per_block : 0;
        if (fit < maxb)
            return qf_err_set(e, QF_EXIT_INPUT, "serve: --gpu-memory-limit-gb %g: the weights (%.2f GiB) and the "
                              "activations (%.2f GiB) leave %.2f GiB for the KV cache; one request of "
                              "--max-total-tokens %d needs %.2f GiB: lower --max-total-tokens or raise the limit%s",
                              o->gpu_limit_gb, weights / 1073741824.0, acts / 1073741824.0,
                              budget > 0 ? budget / 1073741824.0 : 0.0, o->max_total, maxb * per_block / 1073741824.0,
                              o->world > 1 ? " (this rank's layers)" : "");
        if (fit < nb) nb = fit;
    }
    if (o->max_batch_total > 0) { /* --max-batch-total-tokens (cmd_serve.c checked: >= one request's, >= least) */
        const int64_t cap = ((int64_t)o->max_batch_total + bs - 1) / bs;
        if (cap < nb) nb = cap;
    }
    if (nb < least) nb = least;
    if (nb * bs > 2147483647LL) nb = 2147483647LL / bs;
    *nblocks = (int)nb;
    *kv_gib = (double)(nb * per_block) / 1073741824.0;
    return 0;
}
