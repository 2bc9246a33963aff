/* cmd_train.c — the option tables of `qwen-ft train` and `qwen-ft eval` (both: one deck and --set overrides);
 * their code is in train.c. */
#include <stddef.h>
#include "commands.h"
#include "train/train.h"

static const qf_opt RUN_OPTS[] = {
    {.name = "set", .type = QF_OPT_LIST, .off = offsetof(qf_run_args, sets), .meta = "KEY=VALUE",
     .help = "override a deck entry, as if the deck said it (repeatable; the last one wins): "
             "--set optimizer.params.lr=1e-5 --set max_steps=200"},
    {.name = "resume-from", .type = QF_OPT_STR, .off = offsetof(qf_run_args, resume_from), .meta = "best|step-N",
     .help = "resume from that checkpoint of checkpoint.dir instead of its latest: best (checkpoint.keep_best), "
             "latest, step-N or N; later checkpoints of the directory are overwritten as the run reaches them"},
};

static const qf_opt EVAL_OPTS[] = {
    {.name = "set", .type = QF_OPT_LIST, .off = offsetof(qf_run_args, sets), .meta = "KEY=VALUE",
     .help = "override a deck entry, as if the deck said it (repeatable; the last one wins)"},
    {.name = "verbose", .short_name = 'v', .type = QF_OPT_FLAG, .off = offsetof(qf_run_args, verbose),
     .help = "print the run header (versions, ranks, model, data, memory plan, resolved deck) on stderr; without it "
             "stderr has one line"},
};

/* what train and eval share: one DECK.cfg and the --set overrides */
#define QF_RUN_CMD_ARGS                                                                                          \
    .pos_meta = "DECK.cfg", .pos_min = 1, .pos_max = 1, .pos_off = offsetof(qf_run_args, deck),                  \
    .size = sizeof(qf_run_args), .uses_deck = 1

static int train_run(const void *o) { return qf_train_command(o); }
static int eval_run(const void *o) { return qf_eval_command(o); }

const qf_cmd qf_cmd_train = {
    .name = "train",
    .synopsis = "DECK.cfg [--set KEY=VALUE]...",
    .summary = "train as the deck says (also: qwen-ft DECK.cfg); resumes from checkpoint.dir's latest checkpoint",
    .about = "The deck is a libconfig file with DeepSpeed's key names (docs/deck.md). Run it under srun or mpirun,\n"
             "one rank per GPU. Metrics go to log.dir/metrics.jsonl, checkpoints to checkpoint.dir; SIGUSR1 or\n"
             "SIGTERM writes a checkpoint and exits 0 so that a requeued job resumes.",
    .run = train_run,
    QF_RUN_CMD_ARGS,
    .opts = RUN_OPTS,
    .nopts = QF_NOPTS(RUN_OPTS),
};

const qf_cmd qf_cmd_eval = {
    .name = "eval",
    .synopsis = "DECK.cfg [--set KEY=VALUE]...",
    .summary = "validation loss of the deck's model on data.valid, as one JSON line",
    .about = "The parameters are checkpoint.dir's latest checkpoint if there is one, else model.from. Prints\n"
             "{\"valid_loss\": x, \"valid_ppl\": y, \"tokens\": n} on stdout and one line on stderr (--verbose: the\n"
             "run header).",
    .run = eval_run,
    QF_RUN_CMD_ARGS,
    .opts = EVAL_OPTS,
    .nopts = QF_NOPTS(EVAL_OPTS),
};
