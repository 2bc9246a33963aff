/* cmd_estimate.c — `qwen-ft estimate DECK.cfg [--ranks N] [--ranks-per-node G] [--device cpu|gpu] [--set k=v]...`:
 * memory per rank and per node for the deck's model at every ZeRO stage and offload choice, before any
 * allocation (formulas in src/estimate.c and docs/zero.md). The deck's own choice is marked with '*'. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "commands.h"
#include "deck.h"
#include "estimate.h"
#include "estimate_generate.h"
#include "model.h"

static double gib(int64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

static void usage(FILE *f) {
    fprintf(f, "usage: qwen-ft estimate DECK.cfg [--ranks N] [--ranks-per-node G] [--device cpu|gpu] [--set key=value]...\n"
               "Memory per rank and per node for the deck's model at ZeRO stages 0-3 with and without offload.\n"
               "--ranks defaults to the MPI world size, --ranks-per-node to min(ranks, 8); --device gpu counts bf16/fp16\n"
               "parameters, gradients and activations at 2 bytes (the deck's precision), cpu at 4 (CPU ranks compute in fp32).\n");
}

int qf_cmd_estimate(int argc, char **argv) {
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int W = world, G = 0;
    const char *deck = NULL, *device = NULL;
    char **sets = qf_calloc((size_t)argc, sizeof(char *));
    int nset = 0, rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (rank == 0) usage(stdout);
            free(sets);
            return 0;
        } else if (!strcmp(a, "--ranks") && i + 1 < argc) W = atoi(argv[++i]);
        else if (!strcmp(a, "--ranks-per-node") && i + 1 < argc) G = atoi(argv[++i]);
        else if (!strcmp(a, "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(a, "--set") && i + 1 < argc) sets[nset++] = argv[++i];
        else if (!strncmp(a, "--set=", 6)) sets[nset++] = argv[i] + 6;
        else if (a[0] != '-' && !deck) deck = a;
        else rc = QF_EXIT_INPUT;
    }
    if (rc || !deck || W < 1 || G < 0 || (device && strcmp(device, "cpu") && strcmp(device, "gpu"))) {
        if (rank == 0) usage(stderr);
        free(sets);
        return QF_EXIT_INPUT;
    }
    if (G == 0) G = W < 8 ? W : 8;
    qf_deck d;
    qf_err e = {0};
    qf_model_config c;
    memset(&c, 0, sizeof c);
    if (qf_deck_load(deck, nset, sets, W, &d, &e) == 0) {
        if (d.model_from[0]) {
            char resolved[QF_PATH_MAX + 64];
            qf_model_source_config(d.model_from, &c, resolved, sizeof resolved, &e);
        } else {
            char msg[512];
            if (qf_deck_model_config(&d, &c, msg, sizeof msg)) qf_err_set(&e, QF_EXIT_INPUT, "%s: model: %s", deck, msg);
        }
    }
    free(sets);
    if (e.code) {
        if (rank == 0) fprintf(stderr, "qwen-ft: %s\n", e.msg);
        return e.code;
    }
    qf_deck_resolve_auto(&d, c.hidden_size);
    int gpu = device ? !strcmp(device, "gpu") : 0;
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
        for (int o = 0; o < 3; o++) {
            if ((s == 0 && o > 0) || (o == 2 && s != 3)) continue; /* DeepSpeed: offload needs stage >= 1, params stage 3 */
            qf_deck v = d;
            v.zero_stage = s;
            v.offload_optimizer = o >= 1 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE;
            v.offload_param = o == 2 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE;
            qf_mem_estimate m;
            qf_estimate(&c, &v, W, G, ab, &m);
            int mine = s == d.zero_stage && v.offload_optimizer == d.offload_optimizer && v.offload_param == d.offload_param;
            printf("%-6d %-16s %9.2fG %9.2fG %9.2fG %9.2fG %11.2fG %13.2fG %13.2fG %s\n", s, offl[o], gib(m.params),
                   gib(m.grads), gib(m.optimizer), gib(m.activations), gib(m.device_total), gib(m.host_per_rank),
                   gib(m.host_per_node), mine ? "*" : "");
        }
    printf("(GiB; * = the deck's choice; formulas: docs/zero.md)\n");
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
        else if (gib(g.one_rank) <= cap) snprintf(mode, sizeof mode, " -> fits one device (1 rank)");
        else if (Wl > 1 && gib(g.split_worst) <= cap) snprintf(mode, sizeof mode, " -> layer split across %d ranks", Wl);
        else if (gib(g.stream_worst) <= cap)
            snprintf(mode, sizeof mode, " -> layers streamed from host memory (%.2fG per rank on %d rank%s)",
                     gib(g.stream_worst), Wl, Wl == 1 ? "" : "s");
        else snprintf(mode, sizeof mode, " -> does not fit %d rank%s, even with the layers streamed from host memory",
                      Wl, Wl == 1 ? "" : "s");
        printf("  batch %2d: 1 rank %.2fG (weights %.2fG, KV cache %.2fG); layer split over %d rank%s %.2fG on the "
               "fullest rank%s\n", B, gib(g.one_rank), gib(g.weights), gib(g.kv), Wl, Wl == 1 ? "" : "s",
               gib(g.split_worst), mode);
    }
    return 0;
}
