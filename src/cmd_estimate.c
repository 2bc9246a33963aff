/* cmd_estimate.c — `qwen-ft estimate DECK.cfg [--ranks N] [--ranks-per-node G] [--device cpu|gpu] [--set k=v]...`:
 * memory per rank and per node for the deck's model at every ZeRO stage and offload choice, before any
 * allocation (formulas in src/estimate.c and docs/zero.md). The deck's own choice is marked with '*'. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "commands.h"
#include "deck.h"
#include "estimate.h"
#include "model.h"

static double gib(int64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

typedef struct est_opts {
    const char *deck;
    qf_strlist sets;
    int ranks, ranks_per_node; /* 0: the MPI world size; min(ranks, 8) */
    const char *device;
} est_opts;

static const qf_opt EST_OPTS[] = {
    {.name = "ranks", .type = QF_OPT_INT, .off = offsetof(est_opts, ranks), .meta = "N", .lo = 1, .hi = 1e7,
     .help = "data-parallel ranks to plan for (default: the MPI world size)"},
    {.name = "ranks-per-node", .type = QF_OPT_INT, .off = offsetof(est_opts, ranks_per_node), .meta = "G", .lo = 1,
     .hi = 1e5, .help = "ranks (GPUs) per node (default: min(ranks, 8))"},
    {.name = "device", .type = QF_OPT_CHOICE, .off = offsetof(est_opts, device), .def = "cpu", .choices = "cpu|gpu",
     .help = "gpu counts bf16/fp16 parameters, gradients and activations at 2 bytes (the deck's precision), cpu at "
             "4 (CPU ranks compute in fp32)"},
    {.name = "set", .type = QF_OPT_LIST, .off = offsetof(est_opts, sets), .meta = "KEY=VALUE",
     .help = "override a deck entry (repeatable)"},
};

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
    if (qf_deck_load(deck, o->sets.n, (char *const *)o->sets.v, W, &d, &e) == 0) {
        if (d.model_from[0]) {
            char resolved[QF_PATH_MAX + 64];
            qf_model_source_config(d.model_from, &c, resolved, sizeof resolved, &e);
        } else {
            char msg[512];
            if (qf_deck_model_config(&d, &c, msg, sizeof msg)) qf_err_set(&e, QF_EXIT_INPUT, "%s: model: %s", deck, msg);
        }
    }
    if (e.code) {
        if (rank == 0) fprintf(stderr, "qwen-ft: %s\n", e.msg);
        return e.code;
    }
    qf_deck_resolve_auto(&d, c.hidden_size);
    int gpu = !strcmp(o->device, "gpu");
    int64_t ab = gpu && (d.bf16 || d.fp16) ? 2 : 4;
    if (rank != 0) return 0;
    printf("qwen-ft estimate: %s: %s, %.3f B parameters, %d ranks (%d per node), micro batch %d x seq %d, "
           "activation checkpointing %s, %d-byte parameters/activations (%s)\n",
           deck, c.arch, (double)qf_model_num_params(&c) / 1e9, W, G, d.train_micro_batch_size_per_gpu, d.seq_len,
           d.activation_checkpointing == QF_ACKPT_NONE ? "off" : d.activation_checkpointing == QF_ACKPT_FULL ? "full" : "selective", (int)ab, gpu ? "gpu" : "cpu ranks");
    printf("%-6s %-16s %10s %10s %10s %10s %12s %14s %14s\n", "stage", "offload", "params", "grads", "optim",
           "activ", "device/rank", "host/rank", "host/node");
    static const char *const offl[] = {"none", "optimizer", "optimizer+param"};
    for (int s = 0; s <= 3; s++)
        for (int k = 0; k < 3; k++) {
            if ((s == 0 && k > 0) || (k == 2 && s != 3)) continue; /* DeepSpeed: offload needs stage >= 1, params stage 3 */
            qf_deck v = d;
            v.zero_stage = s;
            v.offload_optimizer = k >= 1 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE;
            v.offload_param = k == 2 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE;
            qf_mem_estimate m;
            qf_estimate(&c, &v, W, G, ab, &m);
            int mine = s == d.zero_stage && v.offload_optimizer == d.offload_optimizer && v.offload_param == d.offload_param;
            printf("%-6d %-16s %9.2fG %9.2fG %9.2fG %9.2fG %11.2fG %13.2fG %13.2fG %s\n", s, offl[k], gib(m.params),
                   gib(m.grads), gib(m.optimizer), gib(m.activations), gib(m.device_total), gib(m.host_per_rank),
                   gib(m.host_per_node), mine ? "*" : "");
        }
    printf("(GiB; * = the deck's choice; formulas: docs/zero.md)\n");
    return 0;
}

const qf_cmd qf_cmd_estimate = {
    .name = "estimate",
    .synopsis = "DECK.cfg [--ranks=N] [--ranks-per-node=G] [--device=cpu|gpu] [--set KEY=VALUE]...",
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
