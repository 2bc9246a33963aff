/* main.c — `qwen-ft [COMMAND] ...`: MPI bootstrap and command dispatch. A bare deck means `train`. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "commands.h"
#include "signals.h"
#include "qf_version.h"
#include "util.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} qf_command;

static const qf_command COMMANDS[] = {
    {"train", qf_cmd_train, "train DECK.cfg            train as the deck says (also: qwen-ft DECK.cfg)"},
    {"eval", qf_cmd_eval, "eval DECK.cfg             validation loss of the deck's model on data.valid"},
    {"prepare", qf_cmd_prepare, "prepare --in F.jsonl --out D.h5   JSONL -> packed HDF5 dataset"},
    {"import", qf_cmd_import, "import --from HF_DIR --out M.h5   HF safetensors -> HDF5 model"},
    {"plot", qf_cmd_plot, "plot M.jsonl -o OUT.svg|.png  training curves from metrics.jsonl (no TensorBoard needed)"},
    {"report", qf_cmd_report, "report                    versions, ranks, nodes, backend"},
    {"export", qf_cmd_export, "export --from CKPT --out HF_DIR   HDF5 model/checkpoint -> HF safetensors directory"},
    {"generate", qf_cmd_generate, "generate --model M --prompt-ids 1,2,3 --max-new-tokens N   KV-cache continuation"},
    {"estimate", qf_cmd_estimate, "estimate DECK.cfg         memory per rank / node by ZeRO stage and offload"},
    {"deck", qf_cmd_deck, "deck --from-ds ds_config.json   a DeepSpeed JSON config as a commented deck"},
};

static void usage(FILE *f) {
    fprintf(f, "qwen-ft %s — full-parameter fine-tuning of Qwen models (MPI; run under srun or mpirun)\n\n"
               "usage: qwen-ft COMMAND [ARGS] [--set key.path=value]...\n\ncommands:\n",
            QWENFT_VERSION);
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) fprintf(f, "  %s\n", COMMANDS[i].help);
    fprintf(f, "\n`qwen-ft COMMAND --help` for a command's options; docs/ for the deck keys and file formats.\n");
}

int main(int argc, char **argv) {
    /* `train` stops cleanly on SIGUSR1/SIGTERM/SIGINT (docs/hpc.md); one that comes while MPI starts waits for the
     * handlers instead of killing the rank */
    size_t a1 = argc >= 2 ? strlen(argv[1]) : 0;
    if (argc >= 2 && (!strcmp(argv[1], "train") || (a1 > 4 && !strcmp(argv[1] + a1 - 4, ".cfg")))) qf_signals_hold();
    MPI_Init(&argc, &argv);
    int rank = 0, rc = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 2) {
        if (rank == 0) usage(stderr);
        rc = QF_EXIT_INPUT;
    } else if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        if (rank == 0) usage(stdout);
    } else if (!strcmp(argv[1], "--version")) {
        if (rank == 0) printf("qwen-ft %s\n", QWENFT_VERSION);
    } else {
        const qf_command *cmd = NULL;
        for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
            if (!strcmp(argv[1], COMMANDS[i].name)) cmd = &COMMANDS[i];
        if (cmd) {
            rc = cmd->fn(argc - 1, argv + 1);
        } else if (strlen(argv[1]) > 4 && !strcmp(argv[1] + strlen(argv[1]) - 4, ".cfg")) {
            char *targv[argc + 1];
            targv[0] = "train";
            for (int i = 1; i < argc; i++) targv[i] = argv[i];
            targv[argc] = NULL;
            rc = qf_cmd_train(argc, targv);
        } else {
            if (rank == 0) {
                fprintf(stderr, "qwen-ft: unknown command '%s'\n\n", argv[1]);
                usage(stderr);
            }
            rc = QF_EXIT_INPUT;
        }
    }
    /* every rank returns the same code; a failing rank that could not agree has already called MPI_Abort */
    MPI_Finalize();
    return rc;
}
