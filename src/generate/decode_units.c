/* decode_units.c — see decode_units.h. */
#include "decode_units.h"
#include <stdlib.h>
#include <string.h>
#include "model/backend.h"
#include "store/model_io.h"

#define DU_CONVERT 16777216 /* elements converted to act dtype at a time while loading */
#define DU_PRESET_SEED 1234 /* --model preset:NAME: HF initialisation with model.init_seed's default */

static void *du_params(void *ctx, int u) {
    qf_decode_units *d = ctx;
    if (d->buf[u]) return d->buf[u];
    for (int s = 0; s < 2; s++)
        if (d->stream && d->slot_unit[s] == u) return d->slot[s];
    QF_FATAL("generate: unit %d is neither held nor announced on this rank", u);
    return NULL;
}

static size_t du_bytes(const qf_decode_units *d, int u) {
    return (size_t)(d->m->unit_off[u + 1] - d->m->unit_off[u]) * d->m->ops->act_bytes;
}

/* queues unit u into slot s (ordered after the compute queued so far) */
static void du_fetch(qf_decode_units *d, int s, int u) {
    if (d->slot_ticket[s] >= 0) d->m->ops->copy_finish(d->slot_ticket[s], 0);
    d->slot_unit[s] = u;
    d->slot_ticket[s] = d->m->ops->copy_start(d->slot[s], d->host[u], du_bytes(d, u), QF_COPY_H2D);
}

/* unit_will_use: layer u must be in a slot; the next layer starts copying into the other one */
static void du_will_use(void *ctx, int u, int backward) {
    (void)backward;
    qf_decode_units *d = ctx;
    if (!d->stream || u < d->first || u > d->last) return;
    int s = d->slot_unit[0] == u ? 0 : d->slot_unit[1] == u ? 1 : -1;
    if (s < 0) { /* not prefetched (the first call): into the slot not holding the previous layer */
        s = d->slot_unit[0] == u - 1 ? 1 : 0;
        du_fetch(d, s, u);
    }
    if (d->slot_ticket[s] >= 0) d->m->ops->copy_finish(d->slot_ticket[s], 0), d->slot_ticket[s] = -1;
    int next = u < d->last ? u + 1 : d->first;
    if (next != u) du_fetch(d, 1 - s, next);
}

static int du_load(qf_decode_units *d, const char *from, int u, void *dst_dev, void *dst_host, qf_err *e) {
    qf_model *m = d->m;
    const qf_ops *o = m->ops;
    int64_t b = m->unit_off[u], n = m->unit_off[u + 1] - b;
    float *host = qf_malloc((size_t)(n > 0 ? n : 1) * 4);
    if (!strncmp(from, "preset:", 7)) qf_model_init_random_range(m, DU_PRESET_SEED, b, b + n, host); /* benchmarks */
    else qf_model_load_range(m, from, b, b + n, host, e);
    if (!e->code) {
        if (dst_host) { /* act dtype on the host */
            if (o->act_dtype == QF_DT_F32) memcpy(dst_host, host, (size_t)n * 4);
            else
                for (int64_t i = 0; i < n; i++)
                    ((uint16_t *)dst_host)[i] = o->act_dtype == QF_DT_BF16 ? qf_f32_to_bf16(host[i]) : qf_f32_to_f16(host[i]);
        } else {
            int64_t step = n < DU_CONVERT ? n : DU_CONVERT;
            float *dev = o->alloc((size_t)(step > 0 ? step : 1) * 4);
            if (!dev) qf_err_set(e, QF_EXIT_RUNTIME, "out of memory converting the weights of unit %d", u);
            for (int64_t i = 0; i < n && !e->code; i += step) {
                int64_t k = n - i < step ? n - i : step;
                o->copy_h2d(dev, host + i, (size_t)k * 4);
                o->act_from_f32((char *)dst_dev + (size_t)i * o->act_bytes, dev, (size_t)k);
            }
            if (dev) o->free(dev);
        }
    }
    free(host);
    return e->code;
}

int qf_decode_units_load(qf_decode_units *d, qf_model *m, const char *from, int l0, int l1, int first_rank,
                         int last_rank, int stream, qf_err *e) {
    memset(d, 0, sizeof *d);
    d->m = m;
    int L = m->cfg.num_layers;
    d->buf = qf_calloc((size_t)m->nunits, sizeof *d->buf);
    d->host = qf_calloc((size_t)m->nunits, sizeof *d->host);
    d->pinned = qf_calloc((size_t)m->nunits, sizeof *d->pinned);
    d->stream = stream && l1 > l0;
    d->first = l0 + 1;
    d->last = l1;
    d->slot_unit[0] = d->slot_unit[1] = d->slot_ticket[0] = d->slot_ticket[1] = -1;
    m->hooks.ctx = d;
    m->hooks.unit_params = du_params;
    m->hooks.unit_grads = NULL;
    m->hooks.unit_will_use = du_will_use;
    size_t big = 0;
    for (int u = 0; u < m->nunits && !e->code; u++) {
        int layer = u >= l0 + 1 && u <= l1;
        int need = layer || (u == 0 && (first_rank || (last_rank && m->ix_head == m->ix_embed))) ||
                   (u == L + 1 && last_rank);
        if (!need) continue;
        if (layer && d->stream) {
            d->host[u] = qf_malloc(du_bytes(d, u) ? du_bytes(d, u) : 1);
            const char *why;
            d->pinned[u] = qf_backend_pin(m->ops, d->host[u], du_bytes(d, u), &why);
            big = du_bytes(d, u) > big ? du_bytes(d, u) : big;
            du_load(d, from, u, NULL, d->host[u], e);
        } else {
            d->buf[u] = m->ops->alloc(du_bytes(d, u));
            if (!d->buf[u])
                return qf_err_set(e, QF_EXIT_RUNTIME, "out of memory for the weights of unit %d (%zu bytes)%s", u,
                                  du_bytes(d, u), stream ? "" : ": --stream-weights keeps the layers in host memory");
            du_load(d, from, u, d->buf[u], NULL, e);
        }
    }
    for (int s = 0; s < 2 && d->stream && !e->code; s++)
        if (!(d->slot[s] = m->ops->alloc(big)))
            qf_err_set(e, QF_EXIT_RUNTIME, "out of memory for two streamed layers (%zu bytes each)", big);
    return e->code;
}

void qf_decode_units_free(qf_decode_units *d) {
    if (!d->m) return;
    const qf_ops *o = d->m->ops;
    for (int s = 0; s < 2; s++) {
        if (d->slot_ticket[s] >= 0) o->copy_finish(d->slot_ticket[s], 1);
        if (d->slot[s]) o->free(d->slot[s]);
    }
    for (int u = 0; u < d->m->nunits; u++) {
        if (d->buf[u]) o->free(d->buf[u]);
        if (d->pinned[u]) qf_backend_unpin(o, d->host[u]);
        free(d->host[u]);
    }
    free(d->buf);
    free(d->host);
    free(d->pinned);
    memset(d, 0, sizeof *d);
}
