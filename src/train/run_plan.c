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

/* rank 0: the plans; fills chosen (or returns the exit code with the message in e) */
static int plan_rank0(qf_run *r, const qf_plan_space *sp, qf_plan *chosen, qf_err *e) {
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
        else if (qf_plan_calibrate(r->ops, r->backend_info, c, d->seq_len, 0, plan_cache_dir(d), &rates, e))
            return e->code;
        np = qf_plan_search(c, d, sp, &mc, &rates, &pl);
    }
    size_t cap = 4096, len = 0;
    char *t = r->plan_text = malloc(cap), desc[256], why[256];
    if (!t) abort();
    t[0] = 0;
    if (np == 0 || !pl[0].fits) {
        const qf_plan *s = np ? &pl[0] : NULL;
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
    *chosen = pl[0];
    int nfit = 0;
    for (int i = 0; i < np; i++) nfit += pl[i].fits;
    qf_plan_describe(&pl[0], c->num_layers, desc, sizeof desc);
    len += (size_t)snprintf(t + len, cap - len,
                            "layout plan (\"auto\"): %s; predicted %.3f GiB per %s (of %.2f%s), %.3f GiB host per node "
                            "(of %.2f available), %.0f tokens/s (step %.3f s: compute %.3f, communication %.3f, PCIe "
                            "%.3f, optimizer %.3f); %d of %d layouts fit; rates %s\n",
                            desc, QF_GIB(pl[0].device_need), cpu ? "rank" : "GPU", QF_GIB(mc.gpu_budget),
                            cpu ? ": CPU ranks hold it in host memory" : "",
                            QF_GIB(pl[0].host_node_need), QF_GIB(mc.host_budget), pl[0].tok_s, pl[0].t_step,
                            pl[0].t_compute, pl[0].t_comm, pl[0].t_pcie, pl[0].t_adam, nfit, np, rates.source);
    const qf_mem_estimate *m = &pl[0].mem;
    len += (size_t)snprintf(t + len, cap - len,
                            "layout plan per rank: model state %.1f MiB (device %.1f + host %.1f), activations %.1f MiB\n",
                            (double)(m->params + m->grads + m->optimizer + m->host_per_rank) / 1048576.0,
                            (double)(m->params + m->grads + m->optimizer) / 1048576.0,
                            (double)m->host_per_rank / 1048576.0, (double)m->activations / 1048576.0);
    for (int i = 1; i < np && i <= PLAN_RUNNERS && len < cap - 1; i++) {
        qf_plan_describe(&pl[i], c->num_layers, desc, sizeof desc);
        qf_plan_why_lost(&pl[0], &pl[i], &mc, why, sizeof why);
        len += (size_t)snprintf(t + len, cap - len, "layout plan runner-up %d: %s; %.2f GiB per %s, %.0f tokens/s: %s\n",
                                i + 1, desc, QF_GIB(pl[i].device_need), cpu ? "rank" : "GPU", pl[i].tok_s, why);
    }
    /* the next plan, for a run whose first allocation fails after all */
    if (np > 1 && pl[1].fits && len < cap - 1) {
        qf_plan_describe(&pl[1], c->num_layers, desc, sizeof desc);
        snprintf(r->plan_next, sizeof r->plan_next, "%s", desc);
    }
    free(pl);
    return 0;
}

int qf_run_plan_layout(qf_run *r, qf_err *e) {
    qf_deck *d = &r->deck;
    qf_plan_space sp;
    if (!qf_plan_space_from_deck(d, 0, &sp)) return 0;
    qf_plan chosen;
    memset(&chosen, 0, sizeof chosen);
    int rc = 0;
    if (r->comm.rank == 0) rc = plan_rank0(r, &sp, &chosen, e);
    MPI_Bcast(&rc, 1, MPI_INT, 0, r->comm.world);
    if (rc) {
        if (r->comm.rank != 0) qf_err_set(e, rc, "%s: the layout plan failed on rank 0", d->path);
        return rc;
    }
    MPI_Bcast(&chosen, (int)sizeof chosen, MPI_BYTE, 0, r->comm.world);
    const qf_grads_home g = d->offload_optimizer_gradients; /* "auto" stays for qf_plan_grads_home to decide */
    qf_plan_apply(&chosen, d);
    d->offload_optimizer_gradients = g;
    r->planned = 1;
    return 0;
}
