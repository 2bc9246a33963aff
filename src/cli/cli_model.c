/* cli_model.c — the model that a command's --model option names (generate, serve): preset:NAME, a published
 * architecture randomly initialised (benchmarks), or a model source read for its config alone; and the backend
 * that runs it (commands.h). */
#include <mpi.h>
#include <string.h>
#include "commands.h"
#include "model/backend.h"
#include "store/model_io.h"

int qf_cli_model_config(const char *cmd, const char *model, qf_model_config *c, char *resolved, size_t cap,
                        qf_err *e) {
    if (!strncmp(model, "preset:", 7)) {
        if (qf_preset_lookup(model + 7, c) == 0) return 0;
        return qf_err_set(e, QF_EXIT_INPUT, "%s: --model %s: unknown preset (qwen-ft's presets: docs/deck.md)", cmd,
                          model);
    }
    return qf_model_source_config(model, c, resolved, cap, e);
}

int qf_cli_backend(const char *dtype, double gpu_limit_gb, const qf_ops **ops, char *info, size_t n,
                   qf_err *e) {
    MPI_Comm node; /* one GPU per rank of the node */
    int local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    qf_deck d;
    qf_deck_defaults(&d);
    d.bf16 = !strcmp(dtype, "bf16");
    d.fp16 = !strcmp(dtype, "fp16");
    d.gpu_memory_limit_gb = gpu_limit_gb;
    return qf_backend_select(&d, local, ops, info, n, e);
}
