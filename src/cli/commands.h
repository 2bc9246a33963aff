/* commands.h — the `qwen-ft` commands. Each is a qf_cmd (options.h): its option table, --help text and entry
 * point, defined next to the command's code (cmd_*.c; train and eval in cmd_train.c). main.c parses argv with the
 * table before MPI_Init, then calls run on every rank; run returns the exit code (0, 2 bad input, 3 runtime
 * failure). Rank 0 prints. */
#ifndef QF_COMMANDS_H
#define QF_COMMANDS_H
#include "options.h"
extern const qf_cmd qf_cmd_train, qf_cmd_eval, qf_cmd_prepare, qf_cmd_import, qf_cmd_export, qf_cmd_generate,
    qf_cmd_estimate, qf_cmd_plan, qf_cmd_report, qf_cmd_plot, qf_cmd_deck, qf_cmd_serve;

/* The deck's model for estimate and plan (cmd_estimate.c): --preset NAME (when not NULL), model.from when it
 * exists, else the deck's model.preset or explicit dimensions; cmd names the command in messages. 0 or exit code. */
#include "deck/deck.h"
#include "model_config.h"
#include "ops.h"
int qf_cli_deck_model(const char *preset, const char *cmd, qf_deck *d, qf_model_config *c, qf_err *e);
/* The model of --model M for generate and serve (cli_model.c): M is preset:NAME (a published architecture, random
 * init) or a model source (HDF5 model, checkpoint file or directory, HF directory: store/model_io.h's
 * qf_model_source_config, which writes the file it read to resolved, cap bytes). cmd names the command in messages.
 * 0 or the exit code (2: an unknown preset, named with "CMD: --model M"). */
int qf_cli_model_config(const char *cmd, const char *model, qf_model_config *c, char *resolved, size_t cap,
                        qf_err *e);
/* The backend of generate and serve (cli_model.c): --dtype bf16|fp16|fp32 and --gpu-memory-limit-gb G; one GPU per
 * rank of the node (the node-local rank picks it). info[n]: the backend's description. 0 or the exit code. */
int qf_cli_backend(const char *dtype, double gpu_limit_gb, const qf_ops **ops, char *info, size_t n, qf_err *e);
#endif
