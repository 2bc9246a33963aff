/* cmd_estimate.c — `qwen-ft estimate DECK.cfg [--ranks N] [--ranks-per-node G] [--device cpu|gpu] [--set k=v]...`:
 * memory per rank and per node for the deck's model at every ZeRO stage and offload choice, before any
 * allocation (formulas in src/plan/estimate.c and docs/zero.md). The deck's own choice is marked with '*'. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "commands.h"
#include "deck/deck.h"
#include "plan/estimate.h"
#include "plan/plan.h"
#include "util/json_out.h"
#include "plan/estimate_generate.h"
#include "model/model.h"
#include "store/model_io.h"

typedef struct est_opts {
    const char *deck;
    qf_strlist sets;
    int ranks, ranks_per_node; /* 0: the MPI world size; min(ranks, 8) */
    const char *device, *preset;
    int json;
} est_opts;

static const qf_opt EST_OPTS[] = {
    {.name = "ranks", .type = QF_OPT_INT, .off = offsetof(est_opts, ranks), .meta = "N", .lo = 1, .hi = 1e7,
     .help = "data-parallel ranks to plan for (default: the MPI world size)"},
    {.name = "ranks-per-node", .type = QF_OPT_INT, .off = offsetof(est_opts, ranks_per_node), .meta = "G", .lo = 1,
     .hi = 1e5, .help = "ranks (GPUs) per node (default: min(ranks, 8))"},
    {.name = "device", .type = QF_OPT_CHOICE, .off = offsetof(est_opts, device), .def = "cpu", .choices = "cpu|gpu",
     .help = "gpu counts bf16/fp16 parameters, gradients and activations at 2 bytes (the deck's precision), cpu at "
             "4 (CPU ranks compute in fp32)"},
    {.name = "preset", .type = QF_OPT_STR, .off = offsetof(est_opts, preset), .meta = "NAME",
     .help = "plan for a published architecture (qwen2.5-14b, qwen3-8b, ...) instead of model.from, so that no "
             "weights file is needed; explicit model.* dimensions of the deck still apply"},
    {.name = "json", .type = QF_OPT_FLAG, .off = offsetof(est_opts, json),
     .help = "print one JSON object (sizes in GiB) instead of the table"},
    {.name = "set", .type = QF_OPT_LIST, .off = offsetof(est_opts, sets), .meta = "KEY=VALUE",
     .help = "override a deck entry (repeatable)"},
};

static const char *const OFFLOADS[] = {"none", "optimizer", "optimizer+param"};

/* the deck's model, from --preset, model.from, or the deck's preset / dimensions (commands.h) */
int qf_cli_deck_model(const char *preset, const char *cmd, qf_deck *d, qf_model_config *c, qf_err *e) {
    if (preset) {
        if (qf_preset_lookup(preset, c) != 0) {
            char names[1024] = "";
            for (const char *const *n = qf_preset_names(); *n; n++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "", *n);
            return qf_err_set(e, QF_EXIT_INPUT, "--preset=%s: unknown preset (known: %s)", preset, names);
        }
        d->model_from[0] = 0;
        snprintf(d->model_preset, sizeof d->model_preset, "%s", preset);
    }
    if (d->model_from[0] && (qf_exists(d->model_from) || !d->model_preset[0])) {
        if (!qf_exists(d->model_from))
            return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'model.from': %s does not exist (model.preset beside it, or "
                              "%s --preset=NAME, plans for a published architecture without the weights)",
                              qf_deck_path_where(d, "model.from"), d->model_from, cmd);
        char resolved[QF_PATH_MAX + 64], pm[256];
        if (qf_model_source_config(d->model_from, c, resolved, sizeof resolved, e)) return e->code;
        if (qf_deck_preset_matches(d, c, pm, sizeof pm))
            return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'model.preset' does not match model.from %s: %s",
                              qf_deck_path_where(d, "model.from"), d->model_from, pm);
        return 0;
    }
    /* model.from not there yet: its architecture from model.preset beside it */
    if (d->model_from[0])
        fprintf(stderr, "%s: model.from %s does not exist yet: planning with model.preset \"%s\" (%s)\n",
                cmd, d->model_from, d->model_preset, qf_deck_path_where(d, "model.preset"));
    char msg[512];
    if (qf_deck_model_config(d, c, msg, sizeof msg)) return qf_err_set(e, QF_EXIT_INPUT, "%s: model: %s", d->path, msg);
    return 0;
}

static json_t *est_row_json(int stage, int k, const qf_mem_estimate *m, int mine) {
    json_t *r = json_object();
    json_object_set_new(r, "stage", json_integer(stage));
    json_object_set_new(r, "offload", json_string(OFFLOADS[k]));
    qf_json_set_num(r, "params_gib", QF_GIB(m->params));
    qf_json_set_num(r, "grads_gib", QF_GIB(m->grads));
    qf_json_set_num(r, "optimizer_gib", QF_GIB(m->optimizer));
    qf_json_set_num(r, "activations_gib", QF_GIB(m->activations));
    qf_json_set_num(r, "device_per_rank_gib", QF_GIB(m->device_total));
    qf_json_set_num(r, "host_per_rank_gib", QF_GIB(m->host_per_rank));
    qf_json_set_num(r, "host_per_node_gib", QF_GIB(m->host_per_node));
    json_object_set_new(r, "deck_choice", json_boolean(mine));
    return r;
}

static int estimate_run(const void *opts) {
    const est_opts *o = opts;
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int W = o->ranks ? o->ranks : world, G = o->ranks_per_node;
    const char *deck = o->deck;
    if (G == 0) G = W < 8 ? W : 8;
    qf_deck d;
    qf_err e = {0};
    qf_model_config c;
    memset(&c, 0, sizeof c);
    if (qf_deck_load(deck, o->sets.n, (char *const *)o->sets.v, W, &d, &e) == 0) qf_cli_deck_model(o->preset, "estimate", &d, &c, &e);
    char why[256];
    if (!e.code && qf_model_check_batch(d.train_micro_batch_size_per_gpu, d.seq_len, why, sizeof why))
        qf_err_set(&e, QF_EXIT_INPUT, "%s: %s", deck, why);
    if (e.code) {
        if (rank == 0) fprintf(stderr, "qwen-ft: %s\n", e.msg);
        return e.code;
    }
    qf_deck_resolve_auto(&d, c.hidden_size);
    /* "auto" layout keys: the rows below are every stage and offload anyway; the micro batch and recomputation
     * are shown at their defaults (qwen-ft plan chooses them) */
    int gpu = !strcmp(o->device, "gpu");
    qf_plan_space sp;
    int planned = qf_plan_space_from_deck(&d, 0, &sp);
    char plan_line[512] = "";
    if (planned) { /* the planner's choice on table rates (qwen-ft plan measures them), for the micro batch and
                    * recomputation of the rows */
        qf_plan_machine mc = {.world = W, .ranks_per_node = G, .nodes = (W + G - 1) / G,
                              .act_bytes = gpu && (d.bf16 || d.fp16) ? 2 : 4,
                              .gpu_budget = gpu ? (int64_t)(d.gpu_memory_limit_gb * 1073741824.0) : 0};
        qf_plan_rates rates;
        qf_plan_rates_default(&c, d.seq_len, !gpu, &rates);
        qf_plan *pl = NULL;
        int np = qf_plan_search(&c, &d, &sp, &mc, &rates, &pl);
        char desc[256];
        if (np > 0 && pl[0].fits) {
            qf_plan_describe(&pl[0], c.num_layers, desc, sizeof desc);
            snprintf(plan_line, sizeof plan_line, "the planner's choice on table rates: %s", desc);
            const qf_grads_home g = d.offload_optimizer_gradients;
            qf_plan_apply(&pl[0], &d);
            d.offload_optimizer_gradients = g;
        } else {
            snprintf(plan_line, sizeof plan_line, "no layout fits%s: the rows show the \"auto\" keys at their defaults",
                     gpu && d.gpu_memory_limit_gb > 0 ? " gpu_memory_limit_gb" : "");
        }
        free(pl);
    }
    qf_plan_autos_default(&d);
    int64_t ab = gpu && (d.bf16 || d.fp16) ? 2 : 4;
    if (rank != 0) return 0;
    static const char *const ackpt_names[] = {"off", "full", "selective", "pointwise"};
    if (d.recompute_layers > c.num_layers) {
        fprintf(stderr, "qwen-ft: %s: key 'recompute_layers' = %d: the model has %d layers\n", deck, d.recompute_layers,
                c.num_layers);
        return QF_EXIT_INPUT;
    }
    char ackpt[64];
    if (d.activation_checkpointing != QF_ACKPT_NONE && d.recompute_layers >= 0)
        snprintf(ackpt, sizeof ackpt, "%s in %d of %d layers", ackpt_names[d.activation_checkpointing],
                 d.recompute_layers, c.num_layers);
    else
        snprintf(ackpt, sizeof ackpt, "%s", ackpt_names[d.activation_checkpointing]);
    json_t *js = NULL, *rows = NULL;
    if (o->json) {
        js = json_pack("{s:s, s:s, s:I, s:i, s:i, s:i, s:i, s:s, s:i, s:s}", "deck", deck, "arch", c.arch, "params",
                       (json_int_t)qf_model_num_params(&c), "ranks", W, "ranks_per_node", G, "micro_batch",
                       d.train_micro_batch_size_per_gpu, "seq_len", d.seq_len, "activation_checkpointing", ackpt,
                       "bytes_per_value", (int)ab, "device", gpu ? "gpu" : "cpu");
        rows = json_array();
        json_object_set_new(js, "plans", rows);
    } else {
        printf("qwen-ft estimate: %s: %s, %.3f B parameters, %d ranks (%d per node), micro batch %d x seq %d, "
               "activation checkpointing %s, %d-byte parameters/activations (%s)\n",
               deck, c.arch, (double)qf_model_num_params(&c) / 1e9, W, G, d.train_micro_batch_size_per_gpu, d.seq_len,
               ackpt, (int)ab, gpu ? "gpu" : "cpu ranks");
        if (d.fp8 && gpu) {
            qf_mem_estimate f8;
            qf_estimate(&c, &d, W, G, ab, &f8);
            printf("fp8.enabled (%s): %.2f GiB per rank of fp8 operand copies, counted in device/rank\n",
                   d.fp8_recipe == QF_FP8R_ROWWISE ? "rowwise" : "tensorwise", QF_GIB(f8.fp8));
        }
        printf("%-6s %-16s %10s %10s %10s %10s %12s %14s %14s\n", "stage", "offload", "params", "grads", "optim",
               "activ", "device/rank", "host/rank", "host/node");
    }
    for (int s = 0; s <= 3; s++)
        for (int k = 0; k < 3; k++) {
            if ((s == 0 && k > 0) || (k == 2 && s != 3)) continue; /* DeepSpeed: offload needs stage >= 1, params stage 3 */
            qf_deck v = d;
            v.zero_stage = s;
            v.offload_optimizer = k >= 1 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE;
            v.offload_param = k == 2 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE;
            /* offload_optimizer.gradients = auto against the card the deck rehearses (gpu_memory_limit_gb) */
            char gwhy[256];
            qf_plan_grads_home(&v, &c, W, G, ab, gpu ? (int64_t)(d.gpu_memory_limit_gb * 1073741824.0) : 0, gwhy,
                               sizeof gwhy);
            const int ghost = qf_estimate_grads_on_host(&v);
            qf_mem_estimate m;
            qf_estimate(&c, &v, W, G, ab, &m);
            int mine = s == d.zero_stage && v.offload_optimizer == d.offload_optimizer && v.offload_param == d.offload_param;
            if (o->json) {
                json_t *row = est_row_json(s, k, &m, mine);
                json_object_set_new(row, "grads_on_host", json_boolean(ghost));
                json_array_append_new(rows, row);
                continue;
            }
            printf("%-6d %-16s %9.2fG %9.2fG%c %8.2fG %9.2fG %11.2fG %13.2fG %13.2fG %s\n", s, OFFLOADS[k],
                   QF_GIB(m.params), QF_GIB(m.grads), ghost ? 'h' : ' ', QF_GIB(m.optimizer), QF_GIB(m.activations),
                   QF_GIB(m.device_total), QF_GIB(m.host_per_rank), QF_GIB(m.host_per_node), mine ? "*" : "");
        }
    if (o->json) {
        json_object_set_new(js, "auto_keys", json_boolean(planned));
        if (planned) json_object_set_new(js, "auto_plan", json_string(plan_line));
        return qf_json_print(js, stdout) ? QF_EXIT_RUNTIME : 0;
    }
    if (planned)
        printf("(the deck leaves the layout to the planner (\"auto\"); %s; `qwen-ft plan %s` ranks the layouts on "
               "measured rates)\n", plan_line, deck);
    printf("(GiB; * = the deck's choice; h = the gradient shard in host memory (offload_optimizer.gradients: host, or "
           "auto where the device shard would not fit gpu_memory_limit_gb); formulas: docs/zero.md)\n");
    /* qwen-ft generate: the whole model on one device, or its layers split across the ranks */
    int ctx = c.max_position_embeddings > 0 && c.max_position_embeddings < d.seq_len ? (int)c.max_position_embeddings : d.seq_len;
    double cap = d.gpu_memory_limit_gb;
    if (cap > 0) printf("generate (KV cache of %d positions per prompt; device: gpu_memory_limit_gb = %g):\n", ctx, cap);
    else printf("generate (KV cache of %d positions per prompt; set gpu_memory_limit_gb for the mode):\n", ctx);
    for (int bi = 0; bi < 2; bi++) {
        int B = bi ? 32 : 1;
        qf_gen_estimate g;
        qf_estimate_generate(&c, B, ctx, W, ab, &g);
        int Wl = W > c.num_layers ? c.num_layers : W;
        char mode[200];
        if (cap <= 0) snprintf(mode, sizeof mode, "%s", "");
        else if (QF_GIB(g.one_rank) <= cap) snprintf(mode, sizeof mode, " -> fits one device (1 rank)");
        else if (Wl > 1 && QF_GIB(g.split_worst) <= cap) snprintf(mode, sizeof mode, " -> layer split across %d ranks", Wl);
        else if (QF_GIB(g.stream_worst) <= cap)
            snprintf(mode, sizeof mode, " -> layers streamed from host memory (%.2fG per rank on %d rank%s)",
                     QF_GIB(g.stream_worst), Wl, Wl == 1 ? "" : "s");
        else snprintf(mode, sizeof mode, " -> does not fit %d rank%s, even with the layers streamed from host memory",
                      Wl, Wl == 1 ? "" : "s");
        printf("  batch %2d: 1 rank %.2fG (weights %.2fG, KV cache %.2fG); layer split over %d rank%s %.2fG on the "
               "fullest rank%s\n", B, QF_GIB(g.one_rank), QF_GIB(g.weights), QF_GIB(g.kv), Wl, Wl == 1 ? "" : "s",
               QF_GIB(g.split_worst), mode);
    }
    return 0;
}

const qf_cmd qf_cmd_estimate = {
    .name = "estimate",
    .synopsis = "DECK.cfg [--ranks=N] [--ranks-per-node=G] [--device=cpu|gpu] [--preset=NAME] [--json] "
                "[--set KEY=VALUE]...",
    .summary = "memory per rank and per node for the deck, by ZeRO stage and offload, before any allocation",
    .about = "Memory per rank and per node for the deck's model at ZeRO stages 0-3 with and without offload\n"
             "(formulas: docs/zero.md); the deck's own choice is marked with '*'.",
    .opts = EST_OPTS,
    .nopts = QF_NOPTS(EST_OPTS),
    .pos_meta = "DECK.cfg",
    .pos_min = 1,
    .pos_max = 1,
    .pos_off = offsetof(est_opts, deck),
    .size = sizeof(est_opts),
    .run = estimate_run,
    .uses_deck = 1,
};
