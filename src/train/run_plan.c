/* run_plan.c — the deck's "auto" layout keys at the start of a run (qf_run_plan_layout, run.h): rank 0 measures
 * the rates (or reads them from the calibration cache in checkpoint.dir, else log.dir), ranks every layout the
 * "auto" keys leave open (src/plan/plan.c) against this GPU (or gpu_memory_limit_gb) and the node's available host
 * memory, and broadcasts its choice; every rank applies it. The run header prints the choice and the runner-ups
 * (r->plan_text). */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "run.h"
#include "model/backend.h"
#include "plan/plan.h"
#include "util/host_mem.h"
#include "util/json_out.h"
#include "zero/zero.h"

#define PLAN_RUNNERS 4

static const char *plan_cache_dir(const qf_deck *d) {
    struct stat st;
    const char *dirs[2] = {d->checkpoint_dir, d->log_dir};
    for (int i = 0; i < 2; i++) {
        if (!dirs[i][0]) continue;
        if (stat(dirs[i], &st) == 0 && S_ISDIR(st.st_mode)) return dirs[i];
        if (mkdir(dirs[i], 0777) == 0) return dirs[i]; /* the run creates it anyway */
    }
    return NULL;
}

/* rank 0: the run header's plan lines for the plan that runs (r->plans[r->plan_at]) and the runner-ups after it,
 * after the fallbacks so far (r->plan_log) */
static void plan_text_build(qf_run *r) {
    const qf_model_config *c = &r->model.cfg;
    const int cpu = !strcmp(r->ops->name, "cpu");
    const qf_plan_machine *mc = &r->plan_mc;
    const qf_plan *pl = r->plans, *p = &r->plans[r->plan_at];
    const int np = r->nplans;
    size_t cap = 4096 + strlen(r->plan_log), len = 0;
    free(r->plan_text);
    char *t = r->plan_text = malloc(cap), desc[256], why[256];
    if (!t) abort();
    t[0] = 0;
    len += (size_t)snprintf(t + len, cap - len, "%s", r->plan_log);
    int nfit = 0;
    for (int i = 0; i < np; i++) nfit += pl[i].fits;
    qf_plan_describe(p, c->num_layers, desc, sizeof desc);
    char nth[64] = "";
    if (r->plan_falls > 0) snprintf(nth, sizeof nth, " (plan %d of the ranking, after %d fallback%s)", r->plan_at + 1,
                                 r->plan_falls, r->plan_falls == 1 ? "" : "s");
    len += (size_t)snprintf(t + len, cap - len,
                            "layout plan (\"auto\"): %s%s; predicted %.3f GiB per %s (of %.2f%s), %.3f GiB host per node "
                            "(of %.2f available), %.0f tokens/s (step %.3f s: compute %.3f, communication %.3f, PCIe "
                            "%.3f, optimizer %.3f); %d of %d layouts fit; rates %s\n",
                            desc, nth, QF_GIB(p->device_need), cpu ? "rank" : "GPU", QF_GIB(mc->gpu_budget),
                            cpu ? ": CPU ranks hold it in host memory" : "", QF_GIB(p->host_node_need),
                            QF_GIB(mc->host_budget), p->tok_s, p->t_step, p->t_compute, p->t_comm, p->t_pcie, p->t_adam,
                            nfit, np, r->plan_rates);
    const qf_mem_estimate *m = &p->mem;
    len += (size_t)snprintf(t + len, cap - len,
                            "layout plan per rank: model state %.1f MiB (device %.1f + host %.1f), activations %.1f MiB\n",
                            (double)(m->params + m->grads + m->optimizer + m->host_per_rank) / 1048576.0,
                            (double)(m->params + m->grads + m->optimizer) / 1048576.0,
                            (double)m->host_per_rank / 1048576.0, (double)m->activations / 1048576.0);
    for (int i = r->plan_at + 1, k = 2; i < np && k <= PLAN_RUNNERS + 1 && len < cap - 1; i++, k++) {
        qf_plan_describe(&pl[i], c->num_layers, desc, sizeof desc);
        qf_plan_why_lost(p, &pl[i], mc, why, sizeof why);
        len += (size_t)snprintf(t + len, cap - len, "layout plan runner-up %d: %s; %.2f GiB per %s, %.0f tokens/s: %s\n",
                                k, desc, QF_GIB(pl[i].device_need), cpu ? "rank" : "GPU", pl[i].tok_s, why);
    }
}

/* rank 0: the plans, ranked, into r->plans (or returns the exit code with the message in e) */
static int plan_rank0(qf_run *r, const qf_plan_space *sp, qf_err *e) {
    qf_deck *d = &r->deck;
    const qf_model_config *c = &r->model.cfg;
    const int cpu = !strcmp(r->ops->name, "cpu");
    int64_t total = 0, used = qf_mem_node_used(&total);
    qf_plan_machine mc = {.world = r->comm.world_size, .ranks_per_node = r->comm.local_size,
                          .nodes = r->comm.n_nodes > 0 ? r->comm.n_nodes : 1, .act_bytes = (int64_t)r->ops->act_bytes,
                          .gpu_budget = cpu ? 0 : (int64_t)qf_backend_device_budget(r->ops, d),
                          .host_budget = used >= 0 && total > 0 ? total - used : 0};
    /* what fits does not depend on the rates: a deck that fits nothing is refused before any measurement */
    qf_plan_rates rates;
    qf_plan_rates_default(c, d->seq_len, cpu, &rates);
    qf_plan *pl = NULL;
    int np = qf_plan_search(c, d, sp, &mc, &rates, &pl);
    if (np > 0 && pl[0].fits) {
        free(pl);
        pl = NULL;
        /* CPU ranks: a large model's layer takes long to time; past 20 s at the table rates, the table's */
        if (cpu && qf_plan_calibration_cost(c, d->seq_len, 1) > 20.0)
            snprintf(rates.source, sizeof rates.source, "table rates (CPU ranks: calibrating one layer of this model "
                     "would take over 20 s)");
        else if (qf_plan_calibrate(r->ops, r->backend_info, c, d->seq_len, qf_zero_host_threads(1, !cpu, NULL),
                                   plan_cache_dir(d), &rates, e))
            return e->code;
        np = qf_plan_search(c, d, sp, &mc, &rates, &pl);
    }
    if (np == 0 || !pl[0].fits) {
        const qf_plan *s = np ? &pl[0] : NULL;
        char desc[256];
        if (s) qf_plan_describe(s, c->num_layers, desc, sizeof desc);
        qf_err_set(e, QF_EXIT_INPUT,
                   "%s: no layout that the \"auto\" keys leave open fits: the smallest (%s) needs %.2f GiB per %s "
                   "(+%.2f margin) of %.2f GiB and %.2f GiB of host memory per node (+%.2f margin) of %.2f GiB "
                   "available (qwen-ft plan %s lists them)",
                   d->path, s ? desc : "none", s ? QF_GIB(s->device_need) : 0, cpu ? "rank" : "GPU",
                   QF_GIB(QF_PLAN_DEV_MARGIN(mc.gpu_budget)), QF_GIB(mc.gpu_budget), s ? QF_GIB(s->host_node_need) : 0,
                   QF_GIB(QF_PLAN_HOST_MARGIN(mc.host_budget)), QF_GIB(mc.host_budget), d->path);
        free(pl);
        return e->code;
    }
    r->plans = pl;
    r->nplans = np;
    r->plan_mc = mc;
    snprintf(r->plan_rates, sizeof r->plan_rates, "%s", rates.source);
    return 0;
}

/* the deck with plan i applied ("auto" of offload_optimizer.gradients stays for qf_plan_grads_home to decide) */
static void plan_use(qf_run *r, int i) {
    qf_deck *d = &r->deck;
    r->plan_at = i;
    d->offload_optimizer_gradients = r->plan_grads;
    qf_plan_apply(&r->plans[i], d);
    d->offload_optimizer_gradients = r->plan_grads;
}

#define FALLBACKS_TEXT_(n) #n
#define FALLBACKS_TEXT_X(n) FALLBACKS_TEXT_(n)

/* the run started again after its first step ran out of memory (train.c): the first plan of the (new) ranking that
 * fits and needs less device memory than the one that failed, with the fallbacks so far in the header */
static int plan_after_step_oom(qf_run *r, const qf_replan *rp, qf_err *e) {
    int ni = -1;
    for (int i = 0; i < r->nplans && rp->falls <= QF_RUN_PLAN_FALLBACKS && ni < 0; i++) {
        if (!r->plans[i].fits) break; /* fitting plans come first */
        if (r->plans[i].device_need < rp->device_need) ni = i;
    }
    snprintf(r->plan_tried, sizeof r->plan_tried, "%s", rp->tried);
    r->plan_falls = rp->falls;
    if (ni < 0)
        return qf_err_set(e, QF_EXIT_RUNTIME, "layout plan: every plan tried ran out of memory: %s; %s (qwen-ft plan "
                          "%s lists the ranking): lower gpu_memory_limit_gb, free host memory, or set the layout keys "
                          "by hand", r->plan_tried, rp->falls > QF_RUN_PLAN_FALLBACKS
                              ? "no more fallbacks (a run takes at most " FALLBACKS_TEXT_X(QF_RUN_PLAN_FALLBACKS) ")"
                              : "no plan that fits and needs less device memory is left",
                          r->deck.path);
    char next[256], line[sizeof rp->line + 300];
    qf_run_plan_describe(r, ni, next, sizeof next);
    snprintf(line, sizeof line, "%s; falling back to the next plan: %s", rp->line, next);
    if (r->comm.rank == 0) {
        fprintf(stderr, "qwen-ft: %s\n", line);
        fflush(stderr);
    }
    free(r->plan_log);
    size_t n = strlen(rp->log), k = strlen(line);
    r->plan_log = qf_malloc(n + k + 2);
    memcpy(r->plan_log, rp->log, n);
    memcpy(r->plan_log + n, line, k);
    memcpy(r->plan_log + n + k, "\n", 2);
    plan_use(r, ni);
    if (r->comm.rank == 0) plan_text_build(r);
    return 0;
}

int qf_run_plan_layout(qf_run *r, qf_err *e) {
    qf_deck *d = &r->deck;
    qf_plan_space sp;
    if (!qf_plan_space_from_deck(d, 0, &sp)) return 0;
    int rc = 0;
    if (r->comm.rank == 0) rc = plan_rank0(r, &sp, e);
    MPI_Bcast(&rc, 1, MPI_INT, 0, r->comm.world);
    if (rc) {
        if (r->comm.rank != 0) qf_err_set(e, rc, "%s: the layout plan failed on rank 0", d->path);
        return rc;
    }
    /* every rank holds the ranking: a fallback (qf_run_plan_fallback) needs no word from rank 0 */
    MPI_Bcast(&r->nplans, 1, MPI_INT, 0, r->comm.world);
    if (r->comm.rank != 0) r->plans = qf_calloc((size_t)r->nplans, sizeof *r->plans);
    MPI_Bcast(r->plans, (int)((size_t)r->nplans * sizeof *r->plans), MPI_BYTE, 0, r->comm.world);
    r->plan_grads = d->offload_optimizer_gradients;
    r->plan_log = qf_strdup("");
    r->planned = 1;
    if (r->replan) return plan_after_step_oom(r, r->replan, e);
    plan_use(r, 0);
    if (r->comm.rank == 0) plan_text_build(r);
    return 0;
}

int qf_run_plan_next(const qf_run *r, int host) {
    const qf_plan *f = &r->plans[r->plan_at];
    if (r->plan_falls >= QF_RUN_PLAN_FALLBACKS) return -1;
    for (int i = r->plan_at + 1; i < r->nplans; i++) {
        const qf_plan *p = &r->plans[i];
        if (!p->fits) break; /* fitting plans come first */
        /* one that needs as much of the memory that ran out would run out too */
        if (host ? p->host_node_need < f->host_node_need : p->device_need < f->device_need) return i;
    }
    return -1;
}

void qf_run_plan_describe(const qf_run *r, int i, char *buf, size_t n) {
    qf_plan_describe(&r->plans[i], r->model.cfg.num_layers, buf, n);
}

int64_t qf_run_plan_bytes(const qf_run *r) {
    const qf_mem_estimate *m = &r->plans[r->plan_at].mem;
    return m->params + m->grads + m->optimizer + m->host_per_rank + m->activations;
}

int qf_run_plan_fallback(qf_run *r, int next, const char *line) {
    r->plan_falls++;
    size_t n = strlen(r->plan_log), k = strlen(line);
    r->plan_log = qf_realloc(r->plan_log, n + k + 2);
    memcpy(r->plan_log + n, line, k);
    memcpy(r->plan_log + n + k, "\n", 2);
    plan_use(r, next);
    if (r->comm.rank == 0) plan_text_build(r);
    return 0;
}
