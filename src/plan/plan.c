/* plan.c — the candidate layouts, their memory (qf_estimate) and speed (speed.c), ranked (plan.h). */
#include "plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "deck/deck_keys.h"

static const char *const OFFLOAD_NAMES[] = {"none", "optimizer", "optimizer+param"};
static const char *const ACKPT_NAMES[] = {"none", "full", "selective", "pointwise"};

void qf_plan_apply(const qf_plan *p, qf_deck *d) {
    d->zero_stage = p->stage;
    d->offload_optimizer = p->offload >= 1 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE;
    d->offload_param = p->offload == 2 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE;
    d->offload_optimizer_ratio = p->offload >= 1 ? p->ratio : 1.0;
    d->train_micro_batch_size_per_gpu = p->micro;
    d->gradient_accumulation_steps = p->accum;
    d->activation_checkpointing = p->ackpt;
    d->recompute_layers = p->ackpt == QF_ACKPT_NONE ? -1 : p->rec_layers;
    if (d->offload_optimizer_gradients == QF_GRADS_AUTO || p->grads_host)
        d->offload_optimizer_gradients = p->grads_host ? QF_GRADS_HOST : QF_GRADS_DEVICE;
}

void qf_plan_eval(const qf_model_config *c, const qf_deck *d, const qf_plan_machine *mc, const qf_plan_rates *r,
                  qf_plan *p) {
    qf_deck v = *d;
    v.offload_optimizer_gradients = d->offload_optimizer_gradients;
    qf_plan_apply(p, &v);
    v.offload_optimizer_gradients = d->offload_optimizer_gradients; /* "auto" decided below, as the run does */
    if (v.offload_optimizer_gradients == QF_GRADS_HOST && !(p->offload >= 1 && p->stage >= 2 && p->ratio >= 1))
        v.offload_optimizer_gradients = QF_GRADS_DEVICE; /* the deck's "host" holds only where it can */
    char why[256];
    qf_plan_grads_home(&v, c, mc->world, mc->ranks_per_node, mc->act_bytes, mc->gpu_budget, why, sizeof why);
    p->grads_host = qf_estimate_grads_on_host(&v);
    qf_estimate(c, &v, mc->world, mc->ranks_per_node, mc->act_bytes, &p->mem);
    p->device_need = p->mem.device_total;
    /* CPU ranks: their device memory is host memory of the node */
    p->host_node_need = p->mem.host_per_node + (mc->gpu_budget <= 0 ? p->mem.device_total * mc->ranks_per_node : 0);
    p->fits_device = mc->gpu_budget <= 0 || p->device_need + QF_PLAN_DEV_MARGIN(mc->gpu_budget) <= mc->gpu_budget;
    p->fits_host = mc->host_budget <= 0 || p->host_node_need + QF_PLAN_HOST_MARGIN(mc->host_budget) <= mc->host_budget;
    p->fits = p->fits_device && p->fits_host;
    p->footprint = mc->gpu_budget > 0 ? p->device_need : p->host_node_need;
    qf_plan_speed(c, &v, mc, r, p);
}

/* the simpler layout first (no offload, the lower stage, the larger micro-batch: fewer collectives and kernel
 * launches than the rates resolve), then the smaller footprint; plans that do not fit: the smaller footprint */
static int plan_cmp_simple(const void *a, const void *b) {
    const qf_plan *x = a, *y = b;
    if (x->fits && y->fits) {
        if (x->offload != y->offload) return x->offload - y->offload;
        if (x->stage != y->stage) return x->stage - y->stage;
        if (x->micro != y->micro) return y->micro - x->micro;
    }
    return (x->footprint > y->footprint) - (x->footprint < y->footprint);
}

/* the plans that fit first, the faster first */
static int plan_cmp_speed(const void *a, const void *b) {
    const qf_plan *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (x->fits && x->tok_s != y->tok_s) return x->tok_s > y->tok_s ? -1 : 1;
    return plan_cmp_simple(a, b);
}

void qf_plan_rank(qf_plan *v, int n) {
    qsort(v, (size_t)n, sizeof *v, plan_cmp_speed);
    int tie = 0, i = 0;
    for (; i < n && v[i].fits; tie++) {
        int j = i + 1;
        while (j < n && v[j].fits && v[i].tok_s <= v[j].tok_s * 1.02) j++;
        qsort(v + i, (size_t)(j - i), sizeof *v, plan_cmp_simple);
        for (; i < j; i++) v[i].tie = tie;
    }
    for (; i < n; i++) v[i].tie = -1;
}

typedef struct plan_list {
    qf_plan *v;
    int n, cap;
} plan_list;

static void plan_push(plan_list *l, const qf_plan *p) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
        if (!l->v) abort();
    }
    l->v[l->n++] = *p;
}

/* a recomputation mode: in all layers; where that fits, in the fewest first layers that still fit (memory falls
 * as the count grows; the time rises) */
static void plan_ackpt(const qf_model_config *c, const qf_deck *d, const qf_plan_machine *mc, const qf_plan_rates *r,
                       qf_plan p, plan_list *l) {
    const int L = c->num_layers;
    p.rec_layers = -1;
    qf_plan_eval(c, d, mc, r, &p);
    if (p.ackpt == QF_ACKPT_NONE || !p.fits) {
        plan_push(l, &p);
        return;
    }
    qf_plan z = p; /* no layer recomputed: the "none" plan of this layout, faster, listed by itself */
    z.ackpt = QF_ACKPT_NONE;
    qf_plan_eval(c, d, mc, r, &z);
    if (z.fits) return;
    int lo = 1, hi = L; /* the smallest K in [1, L] that fits: hi fits */
    while (lo < hi) {
        qf_plan q = p;
        q.rec_layers = (lo + hi) / 2;
        qf_plan_eval(c, d, mc, r, &q);
        if (q.fits) hi = q.rec_layers;
        else lo = q.rec_layers + 1;
    }
    if (hi < L) {
        p.rec_layers = hi;
        qf_plan_eval(c, d, mc, r, &p);
    }
    plan_push(l, &p);
}

int qf_plan_search(const qf_model_config *c, const qf_deck *d, const qf_plan_space *sp, const qf_plan_machine *mc,
                   const qf_plan_rates *r, qf_plan **out) {
    plan_list l = {0};
    const int W = mc->world;
    const int deck_off = d->offload_param == QF_OFFLOAD_CPU ? 2 : d->offload_optimizer == QF_OFFLOAD_CPU ? 1 : 0;
    const unsigned offm = sp->offload_mask ? sp->offload_mask : 1u << deck_off;
    const unsigned ackm = sp->ackpt_mask ? sp->ackpt_mask : 1u << d->activation_checkpointing;
    const double ratios[] = {1.0, 0.75, 0.5, 0.25};
    int micros[64], nm = 0;
    if (sp->micro) {
        int cap = sp->max_micro > 0 ? sp->max_micro : 64;
        if (sp->train_batch > 0) {
            int64_t per = sp->train_batch / W;
            for (int64_t m = 1; m <= per && m <= cap && nm < 64; m++)
                if (per % m == 0 && sp->train_batch % (m * W) == 0) micros[nm++] = (int)m;
        } else {
            for (int m = 1; m <= cap && nm < 64; m *= 2) micros[nm++] = m;
        }
    }
    if (!nm) micros[nm++] = d->train_micro_batch_size_per_gpu;
    for (int s = 0; s <= 3; s++) {
        if (!sp->stage && s != d->zero_stage) continue;
        for (int k = 0; k < 3; k++) {
            if (!(offm & (1u << k))) continue;
            if ((s == 0 && k > 0) || (k == 2 && s != 3)) continue; /* offload needs stage >= 1, parameters stage 3 */
            int nr = k == 0 ? 1 : sp->ratio ? 4 : 1, ratio_fixed = d->offload_optimizer_ratio >= 0;
            for (int ri = 0; ri < nr; ri++) {
                double ratio = k == 0 ? 1.0 : sp->ratio ? ratios[ri] : ratio_fixed ? d->offload_optimizer_ratio : 1.0;
                if (k == 2 && ratio < 1 && sp->ratio) continue; /* parameter offload keeps the whole range on the host */
                for (int mi = 0; mi < nm; mi++) {
                    int m = micros[mi];
                    int a = sp->train_batch > 0 && sp->micro ? (int)(sp->train_batch / ((int64_t)m * W))
                                                             : d->gradient_accumulation_steps;
                    for (int ak = 0; ak < 4; ak++) {
                        static const int order[] = {QF_ACKPT_NONE, QF_ACKPT_POINTWISE, QF_ACKPT_SELECTIVE, QF_ACKPT_FULL};
                        int mode = order[ak];
                        if (!(ackm & (1u << mode))) continue;
                        qf_plan p;
                        memset(&p, 0, sizeof p);
                        p.stage = s;
                        p.offload = k;
                        p.ratio = ratio;
                        p.micro = m;
                        p.accum = a > 0 ? a : 1;
                        p.ackpt = mode;
                        if (sp->rec_auto) {
                            plan_ackpt(c, d, mc, r, p, &l);
                        } else {
                            p.rec_layers = d->recompute_layers < 0 ? -1 : d->recompute_layers;
                            qf_plan_eval(c, d, mc, r, &p);
                            plan_push(&l, &p);
                        }
                    }
                }
            }
        }
    }
    qf_plan_rank(l.v, l.n);
    *out = l.v;
    return l.n;
}

void qf_plan_describe(const qf_plan *p, int L, char *buf, size_t n) {
    char off[64] = "", rec[64];
    if (p->offload && p->ratio < 1) snprintf(off, sizeof off, " (ratio %g)", p->ratio);
    if (p->ackpt == QF_ACKPT_NONE) snprintf(rec, sizeof rec, "none");
    else if (p->rec_layers < 0 || p->rec_layers >= L) snprintf(rec, sizeof rec, "%s", ACKPT_NAMES[p->ackpt]);
    else snprintf(rec, sizeof rec, "%s in %d of %d layers", ACKPT_NAMES[p->ackpt], p->rec_layers, L);
    snprintf(buf, n, "stage %d, offload %s%s%s, micro %d x accum %d, recomputation %s", p->stage,
             OFFLOAD_NAMES[p->offload], off, p->grads_host ? " (gradients on the host)" : "", p->micro, p->accum, rec);
}

void qf_plan_why_lost(const qf_plan *a, const qf_plan *b, const qf_plan_machine *mc, char *buf, size_t n) {
    const double gib = 1073741824.0;
    if (!b->fits_device) {
        snprintf(buf, n, "does not fit: %.2f GiB per GPU + %.2f margin > %.2f", (double)b->device_need / gib,
                 (double)QF_PLAN_DEV_MARGIN(mc->gpu_budget) / gib, (double)mc->gpu_budget / gib);
        return;
    }
    if (!b->fits_host) {
        snprintf(buf, n, "does not fit: %.2f GiB of host memory per node + %.2f margin > %.2f available",
                 (double)b->host_node_need / gib, (double)QF_PLAN_HOST_MARGIN(mc->host_budget) / gib,
                 (double)mc->host_budget / gib);
        return;
    }
    const char *names[4] = {"compute (recomputation, smaller micro-batches)", "exposed communication",
                            "exposed PCIe copies and host gradient accumulation", "optimizer step (host AdamW)"};
    /* per row: the plans may take different numbers of rows per step */
    const double ra = (double)a->micro * a->accum, rb = (double)b->micro * b->accum;
    const double pa[4] = {a->t_compute, a->t_comm, a->t_pcie, a->t_adam};
    const double pb[4] = {b->t_compute, b->t_comm, b->t_pcie, b->t_adam};
    double d[4], ta = a->t_step / ra, tb = b->t_step / rb;
    int w = 0;
    for (int i = 0; i < 4; i++) {
        d[i] = pb[i] / rb - pa[i] / ra;
        if (d[i] > d[w]) w = i;
    }
    if (b->tie == a->tie) /* ranked as fast (a tie of the ranking): lost on simplicity or memory */
        snprintf(buf, n, "as fast (%.3fx), %s (%.1f MiB against %.1f)", b->tok_s / a->tok_s,
                 b->footprint > a->footprint ? "more memory"
                 : b->footprint == a->footprint ? "the same memory, a more complex layout (offload, a higher stage)"
                                                 : "a more complex layout (offload, a higher stage)",
                 (double)b->footprint / 1048576.0, (double)a->footprint / 1048576.0);
    else
        snprintf(buf, n, "%.3fx the tokens/s: %s +%.1f ms per row (%.1f against %.1f ms)", b->tok_s / a->tok_s,
                 names[w], 1e3 * d[w], 1e3 * tb, 1e3 * ta);
}

static int given(const qf_deck *d, const char *path) {
    int ki = qf_deck_keys_find(path);
    int o = d->origin[ki] & QF_ORIGIN_MASK;
    return o >= QF_ORIGIN_DECK && o <= QF_ORIGIN_DS && !(d->origin[ki] & QF_ORIGIN_AUTO);
}

int qf_plan_space_from_deck(const qf_deck *d, int all, qf_plan_space *sp) {
    memset(sp, 0, sizeof sp[0]);
    sp->max_micro = 64;
    sp->ratio = d->offload_optimizer_ratio < 0;
    int mi = qf_deck_keys_find("train_micro_batch_size_per_gpu");
    int micro_auto = (d->origin[mi] & QF_ORIGIN_AUTO) && given(d, "train_batch_size") &&
                     !given(d, "gradient_accumulation_steps");
    if (all) { /* qwen-ft plan: every layout */
        sp->stage = 1;
        sp->offload_mask = 7;
        sp->ackpt_mask = 0xf;
        sp->rec_auto = 1;
        sp->micro = 1;
        /* the deck's global batch (given, or by micro x accumulation) stays; a deck without one: micro free */
        int fixed = given(d, "train_batch_size") || given(d, "train_micro_batch_size_per_gpu") ||
                    given(d, "gradient_accumulation_steps");
        sp->train_batch = fixed ? d->train_batch_size : 0;
        return 1;
    }
    sp->stage = d->zero_stage < 0;
    const int oo = d->offload_optimizer, op = d->offload_param;
    if (oo == QF_OFFLOAD_AUTO || op == QF_OFFLOAD_AUTO)
        for (int k = 0; k < 3; k++) {
            int want_oo = k >= 1 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE, want_op = k == 2 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE;
            if ((oo == QF_OFFLOAD_AUTO || oo == want_oo) && (op == QF_OFFLOAD_AUTO || op == want_op))
                sp->offload_mask |= 1u << k;
        }
    const int ack_auto = d->activation_checkpointing == QF_ACKPT_AUTO;
    if (ack_auto) sp->ackpt_mask = 0xf;
    else if (d->recompute_layers == QF_RECOMPUTE_AUTO) sp->ackpt_mask = 1u << d->activation_checkpointing;
    sp->rec_auto = d->recompute_layers == QF_RECOMPUTE_AUTO || (ack_auto && d->recompute_layers == -1);
    /* the micro batch: planned under a fixed train_batch_size (accumulation follows the batch rule) */
    if (micro_auto) {
        sp->micro = 1;
        sp->train_batch = d->train_batch_size;
    }
    return sp->stage || sp->ratio || sp->offload_mask || sp->ackpt_mask || sp->rec_auto || micro_auto;
}

void qf_plan_autos_default(qf_deck *d) {
    if (d->zero_stage < 0) d->zero_stage = 0;
    if (d->offload_optimizer == QF_OFFLOAD_AUTO) d->offload_optimizer = QF_OFFLOAD_NONE;
    if (d->offload_param == QF_OFFLOAD_AUTO) d->offload_param = QF_OFFLOAD_NONE;
    if (d->offload_optimizer_ratio < 0) d->offload_optimizer_ratio = 1;
    if (d->activation_checkpointing == QF_ACKPT_AUTO) d->activation_checkpointing = QF_ACKPT_NONE;
    if (d->recompute_layers == QF_RECOMPUTE_AUTO) d->recompute_layers = -1;
}
