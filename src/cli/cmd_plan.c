/* cmd_plan.c — `qwen-ft plan DECK.cfg [--ranks N] [--ranks-per-node G] [--gpu-mem G] [--host-mem H] [--json]`:
 * every layout (ZeRO stage x offload x micro batch x recomputation) of the deck's model on this machine or the one
 * described, each with its memory per GPU and per node (src/plan/estimate.c) and its predicted tokens/s (the speed
 * model, src/plan/speed.c, on rates measured here: src/plan/calibrate.c), ranked. No weights needed (as
 * estimate). Exit 2 when no layout fits, naming what the smallest would need. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "commands.h"
#include "deck/deck.h"
#include "model/backend.h"
#include "model/model.h"
#include "plan/plan.h"
#include "util/host_mem.h"
#include "util/json_out.h"
#include "zero/zero.h"

typedef struct plan_opts {
    const char *deck;
    qf_strlist sets;
    int ranks, ranks_per_node, top;
    double gpu_mem, host_mem;
    const char *device, *preset, *calibrate, *cache, *rates;
    int json;
} plan_opts;

static const qf_opt PLAN_OPTS[] = {
    {.name = "ranks", .type = QF_OPT_INT, .off = offsetof(plan_opts, ranks), .meta = "N", .lo = 1, .hi = 1e7,
     .help = "data-parallel ranks to plan for (default: the MPI world size)"},
    {.name = "ranks-per-node", .type = QF_OPT_INT, .off = offsetof(plan_opts, ranks_per_node), .meta = "G", .lo = 1,
     .hi = 1e5, .help = "ranks (GPUs) per node (default: min(ranks, 8))"},
    {.name = "gpu-mem", .type = QF_OPT_DOUBLE, .off = offsetof(plan_opts, gpu_mem), .meta = "GIB", .lo = 0, .hi = 1e6,
     .help = "memory of one GPU in GiB (default: gpu_memory_limit_gb, else this machine's GPU); plans for GPU ranks"},
    {.name = "host-mem", .type = QF_OPT_DOUBLE, .off = offsetof(plan_opts, host_mem), .meta = "GIB", .lo = 0,
     .hi = 1e7, .help = "host memory of one node in GiB that the ranks may use (default: this node's MemAvailable)"},
    {.name = "device", .type = QF_OPT_CHOICE, .off = offsetof(plan_opts, device), .def = "auto",
     .choices = "auto|cpu|gpu",
     .help = "plan for CPU ranks (fp32, device memory = host memory) or GPU ranks (the deck's precision); auto: gpu "
             "with --gpu-mem, gpu_memory_limit_gb or a GPU here, else cpu"},
    {.name = "calibrate", .type = QF_OPT_CHOICE, .off = offsetof(plan_opts, calibrate), .def = "auto",
     .choices = "auto|yes|no",
     .help = "measure the rates on this machine (auto: when it has the planned kind of device and one layer takes "
             "under a few seconds; no: table rates)"},
    {.name = "cache", .type = QF_OPT_STR, .off = offsetof(plan_opts, cache), .meta = "DIR",
     .help = "directory of the calibration cache qwenft-plan-rates.json (default: checkpoint.dir, else log.dir, "
             "when it exists)"},
    {.name = "rates", .type = QF_OPT_STR, .off = offsetof(plan_opts, rates), .meta = "FILE",
     .help = "plan with the rates in FILE (a qwenft-plan-rates.json written by a run or plan on the machine planned for, "
             "e.g. the compute nodes; the same model shape) instead of measuring here"},
    {.name = "top", .type = QF_OPT_INT, .off = offsetof(plan_opts, top), .def = "10", .meta = "N", .lo = 0,
     .hi = 1e6, .help = "plans to list (0: all)"},
    {.name = "preset", .type = QF_OPT_STR, .off = offsetof(plan_opts, preset), .meta = "NAME",
     .help = "plan for a published architecture instead of model.from (no weights file needed)"},
    {.name = "json", .type = QF_OPT_FLAG, .off = offsetof(plan_opts, json),
     .help = "print one JSON object (sizes in GiB) instead of the table"},
    {.name = "set", .type = QF_OPT_LIST, .off = offsetof(plan_opts, sets), .meta = "KEY=VALUE",
     .help = "override a deck entry (repeatable)"},
};

static const char *const OFF_NAMES[] = {"none", "optimizer", "optimizer+param"};
static const char *const ACK_NAMES[] = {"none", "full", "selective", "pointwise"};

static int is_dir(const char *p) {
    struct stat st;
    return p && p[0] && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static json_t *plan_json(const qf_plan *p, int rank, const char *why) {
    json_t *r = json_object();
    json_object_set_new(r, "rank", json_integer(rank));
    json_object_set_new(r, "stage", json_integer(p->stage));
    json_object_set_new(r, "offload", json_string(OFF_NAMES[p->offload]));
    qf_json_set_num(r, "ratio", p->ratio);
    json_object_set_new(r, "micro_batch", json_integer(p->micro));
    json_object_set_new(r, "accumulation", json_integer(p->accum));
    json_object_set_new(r, "activation_checkpointing", json_string(ACK_NAMES[p->ackpt]));
    json_object_set_new(r, "recompute_layers", json_integer(p->rec_layers));
    json_object_set_new(r, "grads_on_host", json_boolean(p->grads_host));
    qf_json_set_num(r, "params_gib", QF_GIB(p->mem.params));
    qf_json_set_num(r, "grads_gib", QF_GIB(p->mem.grads));
    qf_json_set_num(r, "optimizer_gib", QF_GIB(p->mem.optimizer));
    qf_json_set_num(r, "activations_gib", QF_GIB(p->mem.activations));
    qf_json_set_num(r, "device_per_gpu_gib", QF_GIB(p->mem.device_total));
    qf_json_set_num(r, "host_per_rank_gib", QF_GIB(p->mem.host_per_rank));
    qf_json_set_num(r, "host_per_node_gib", QF_GIB(p->host_node_need));
    json_object_set_new(r, "fits", json_boolean(p->fits));
    qf_json_set_num(r, "tokens_per_s", p->tok_s);
    qf_json_set_num(r, "step_s", p->t_step);
    qf_json_set_num(r, "compute_s", p->t_compute);
    qf_json_set_num(r, "comm_s", p->t_comm);
    qf_json_set_num(r, "pcie_s", p->t_pcie);
    qf_json_set_num(r, "optimizer_s", p->t_adam);
    if (why) json_object_set_new(r, "why_lost", json_string(why));
    return r;
}

static int plan_run(const void *opts) {
    const plan_opts *o = opts;
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (rank != 0) return 0;
    int W = o->ranks ? o->ranks : world, G = o->ranks_per_node ? o->ranks_per_node : (W < 8 ? W : 8);
    if (G > W) G = W;
    qf_deck d;
    qf_err e = {0};
    qf_model_config c;
    memset(&c, 0, sizeof c);
    if (qf_deck_load(o->deck, o->sets.n, (char *const *)o->sets.v, W, &d, &e) == 0)
        qf_cli_deck_model(o->preset, "plan", &d, &c, &e);
    if (e.code) {
        fprintf(stderr, "qwen-ft: %s\n", e.msg);
        return e.code;
    }
    qf_deck_resolve_auto(&d, c.hidden_size);
    /* the kind of rank planned for, and the device's memory */
    const qf_ops *ops = NULL;
    char info[512] = "cpu (fp32, OpenMP)";
    int gpu = !strcmp(o->device, "gpu");
    if (!strcmp(o->device, "auto")) gpu = o->gpu_mem > 0 || d.gpu_memory_limit_gb > 0;
    if (strcmp(o->device, "cpu") && strcmp(o->calibrate, "no")) {
        qf_err be = {0};
        const qf_ops *bo = NULL;
        if (qf_backend_select(&d, 0, &bo, info, sizeof info, &be) == 0 && strcmp(bo->name, "cpu")) {
            ops = bo;
            gpu = 1;
        } else {
            snprintf(info, sizeof info, "cpu (fp32, OpenMP)");
        }
    }
    if (!gpu) ops = qf_ops_cpu();
    int64_t gpu_budget = 0;
    if (gpu) {
        if (o->gpu_mem > 0) gpu_budget = (int64_t)(o->gpu_mem * 1073741824.0);
        else if (d.gpu_memory_limit_gb > 0) gpu_budget = (int64_t)(d.gpu_memory_limit_gb * 1073741824.0);
        else if (ops) gpu_budget = (int64_t)qf_backend_device_budget(ops, &d);
        if (gpu_budget <= 0) {
            fprintf(stderr, "qwen-ft: plan: --device=gpu without a GPU here: give --gpu-mem GIB (or gpu_memory_limit_gb)\n");
            return QF_EXIT_INPUT;
        }
    }
    int64_t host_budget = 0, total = 0;
    /* a described machine (other ranks, or a GPU that is not here): this node's memory says nothing of it */
    const int here = gpu ? ops && strcmp(ops->name, "cpu") : 1;
    const int described = (o->ranks && o->ranks != world) || !here;
    if (o->host_mem > 0) host_budget = (int64_t)(o->host_mem * 1073741824.0);
    else if (!described) {
        int64_t used = qf_mem_node_used(&total);
        if (used >= 0 && total > 0) host_budget = total - used;
    }
    qf_plan_machine mc = {.world = W, .ranks_per_node = G, .nodes = (W + G - 1) / G,
                          .act_bytes = gpu && (d.bf16 || d.fp16) ? 2 : 4, .gpu_budget = gpu_budget,
                          .host_budget = host_budget};
    /* rates: measured where this machine has the planned device (and one layer is quick), else the table */
    qf_plan_rates rates;
    qf_plan_rates_default(&c, d.seq_len, !gpu, &rates);
    if (o->rates && !strcmp(o->calibrate, "yes")) {
        fprintf(stderr, "qwen-ft: plan: --rates and --calibrate=yes: the rates come from the file or are measured "
                        "here, not both\n");
        return QF_EXIT_INPUT;
    }
    if (o->rates && qf_plan_rates_load(o->rates, &c, &rates, &e)) {
        fprintf(stderr, "qwen-ft: %s\n", e.msg);
        return e.code;
    }
    int measure = here && strcmp(o->calibrate, "no") && !o->rates;
    if (measure && !strcmp(o->calibrate, "auto") && !gpu && qf_plan_calibration_cost(&c, d.seq_len, 1) > 20.0) {
        measure = 0;
        snprintf(rates.source, sizeof rates.source, "table rates (CPU ranks: calibrating one layer of this model would "
                 "take over 20 s; --calibrate=yes measures)");
    }
    if (measure) {
        const char *cdir = o->cache ? o->cache : is_dir(d.checkpoint_dir) ? d.checkpoint_dir
                                                : is_dir(d.log_dir) ? d.log_dir : NULL;
        if (qf_plan_calibrate(ops, info, &c, d.seq_len, qf_zero_host_threads(1, gpu, NULL), cdir, &rates, &e)) {
            fprintf(stderr, "qwen-ft: %s\n", e.msg);
            return e.code;
        }
    }
    qf_plan_space sp;
    qf_plan_space_from_deck(&d, 1, &sp);
    qf_plan *pl = NULL;
    int np = qf_plan_search(&c, &d, &sp, &mc, &rates, &pl), nfit = 0;
    for (int i = 0; i < np; i++) nfit += pl[i].fits;
    int show = o->top > 0 && o->top < np ? o->top : np;
    char desc[256], why[256];
    int rc = 0;
    if (nfit == 0) {
        /* the smallest device need comes first among the plans that do not fit; the host's least need too */
        const qf_plan *s = &pl[0];
        int64_t hmin = pl[0].host_node_need;
        for (int i = 0; i < np; i++)
            if (pl[i].fits_device && pl[i].host_node_need < hmin) hmin = pl[i].host_node_need;
        qf_plan_describe(s, c.num_layers, desc, sizeof desc);
        fprintf(stderr, "qwen-ft: %s: no layout of %s (%.3f B parameters, seq %d) fits %d rank%s (%d per node): the "
                "smallest (%s) needs %.2f GiB per %s (+%.2f margin) of %.2f GiB and %.2f GiB of host memory per "
                "node (+%.2f margin) of %.2f GiB%s\n",
                o->deck, c.arch, (double)qf_model_num_params(&c) / 1e9, d.seq_len, W, W == 1 ? "" : "s", G, desc,
                QF_GIB(s->device_need), gpu ? "GPU" : "rank", QF_GIB(QF_PLAN_DEV_MARGIN(gpu_budget)),
                QF_GIB(gpu_budget), QF_GIB(hmin), QF_GIB(QF_PLAN_HOST_MARGIN(host_budget)), QF_GIB(host_budget),
                gpu ? "" : " (CPU ranks: their device memory is host memory)");
        rc = QF_EXIT_INPUT;
    }
    if (o->json) {
        json_t *js = json_pack("{s:s, s:s, s:I, s:i, s:i, s:i, s:s, s:s, s:i}", "deck", o->deck, "arch", c.arch,
                               "params", (json_int_t)qf_model_num_params(&c), "ranks", W, "ranks_per_node", G,
                               "seq_len", d.seq_len, "device", gpu ? "gpu" : "cpu", "rates_source", rates.source,
                               "bytes_per_value", (int)mc.act_bytes);
        qf_json_set_num(js, "gpu_budget_gib", QF_GIB(gpu_budget));
        qf_json_set_num(js, "host_budget_gib", QF_GIB(host_budget));
        qf_json_set_num(js, "calibration_s", rates.calib_s);
        json_object_set_new(js, "fitting", json_integer(nfit));
        json_object_set_new(js, "candidates", json_integer(np));
        json_t *rows = json_array();
        for (int i = 0; i < show; i++) {
            if (i && pl[0].fits) qf_plan_why_lost(&pl[0], &pl[i], &mc, why, sizeof why);
            json_array_append_new(rows, plan_json(&pl[i], i + 1, i && pl[0].fits ? why : NULL));
        }
        json_object_set_new(js, "plans", rows);
        free(pl);
        int jr = qf_json_print(js, stdout);
        return rc ? rc : jr ? QF_EXIT_RUNTIME : 0;
    }
    printf("qwen-ft plan: %s: %s, %.3f B parameters, %d rank%s (%d per node), seq %d, %s ranks", o->deck, c.arch,
           (double)qf_model_num_params(&c) / 1e9, W, W == 1 ? "" : "s", G, d.seq_len, gpu ? "GPU" : "CPU");
    if (gpu) printf(" of %.2f GiB", QF_GIB(gpu_budget));
    if (host_budget > 0) printf(", host %.2f GiB per node\nrates: %s\n", QF_GIB(host_budget), rates.source);
    else printf(", host memory not checked (a described machine: give --host-mem)\nrates: %s\n", rates.source);
    printf("%4s %-5s %-15s %5s %12s %-22s %10s %10s %10s %8s  %s\n", "#", "stage", "offload", "ratio", "micro x acc",
           "recomputation", "GiB/GPU", "host/node", "tok/s", "step s", "why not first");
    for (int i = 0; i < show; i++) {
        const qf_plan *p = &pl[i];
        char rec[64], mb[32];
        if (p->ackpt == QF_ACKPT_NONE || p->rec_layers < 0) snprintf(rec, sizeof rec, "%s", ACK_NAMES[p->ackpt]);
        else snprintf(rec, sizeof rec, "%s %d/%d", ACK_NAMES[p->ackpt], p->rec_layers, c.num_layers);
        snprintf(mb, sizeof mb, "%d x %d", p->micro, p->accum);
        why[0] = 0;
        if (i && pl[0].fits) qf_plan_why_lost(&pl[0], p, &mc, why, sizeof why);
        else if (!p->fits) qf_plan_why_lost(p, p, &mc, why, sizeof why);
        printf("%4d %-5d %-15s%s %5g %12s %-22s %9.2fG %9.2fG %10.0f %8.3f  %s\n", i + 1, p->stage,
               OFF_NAMES[p->offload], p->grads_host ? "h" : " ", p->ratio, mb, rec, QF_GIB(p->device_need),
               QF_GIB(p->host_node_need), p->tok_s, p->t_step, why);
    }
    printf("(%d of %d layouts fit; h = the gradient shard in host memory; GiB/GPU without the %.2f GiB margin; "
           "docs/zero.md \"How auto plans\")\n", nfit, np, QF_GIB(QF_PLAN_DEV_MARGIN(gpu_budget)));
    free(pl);
    return rc;
}

const qf_cmd qf_cmd_plan = {
    .name = "plan",
    .synopsis = "DECK.cfg [--ranks=N] [--ranks-per-node=G] [--gpu-mem=GIB] [--host-mem=GIB] [--device=auto|cpu|gpu] "
                "[--calibrate=auto|yes|no] [--cache=DIR] [--top=N] [--preset=NAME] [--json] [--set KEY=VALUE]...",
    .summary = "the deck's candidate layouts (ZeRO stage, offload, micro batch, recomputation), ranked by predicted "
               "tokens/s",
    .about = "Every layout of the deck's model: ZeRO stage 0-3 x offload none / optimizer / optimizer+param x micro\n"
             "batch (under train_batch_size: its divisors, accumulation by the batch rule) x recomputation none /\n"
             "pointwise / selective / full (in the fewest first layers that fit), each with its memory per GPU and\n"
             "per node (the estimate's formulas) and its predicted tokens/s (rates measured here, cached), ranked.\n"
             "No weights file needed. Exit 2 when no layout fits, naming what the smallest would need.",
    .opts = PLAN_OPTS,
    .nopts = QF_NOPTS(PLAN_OPTS),
    .pos_meta = "DECK.cfg",
    .pos_min = 1,
    .pos_max = 1,
    .pos_off = offsetof(plan_opts, deck),
    .size = sizeof(plan_opts),
    .run = plan_run,
    .uses_deck = 1,
};
