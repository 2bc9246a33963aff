/* main.c — `qwen-ft [COMMAND] ...`: the command's options parsed with its table (options.h) before MPI_Init, so
 * that --help, --version and a bad option answer once and start nothing; then MPI and the command. A bare deck
 * means `train`. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "commands.h"
#include "parallel/comm.h"
#include "qf_git.h"
#include "qf_version.h"
#include "train/signals.h"
#include "util.h"

static const qf_cmd *const COMMANDS[] = {&qf_cmd_train,  &qf_cmd_eval,     &qf_cmd_prepare,
                                          &qf_cmd_import, &qf_cmd_export,   &qf_cmd_generate, &qf_cmd_serve,
                                          &qf_cmd_estimate, &qf_cmd_plan, &qf_cmd_report, &qf_cmd_plot,
                                         &qf_cmd_deck};
#define NCOMMANDS ((int)(sizeof COMMANDS / sizeof COMMANDS[0]))

static void usage(FILE *f) {
    fprintf(f, "qwen-ft %s — full-parameter fine-tuning of Qwen models (MPI; run under srun or mpirun)\n\n"
               "usage: qwen-ft COMMAND [OPTION]... (GNU syntax: --opt=value or --opt value)\n"
               "       qwen-ft DECK.cfg [--set key.path=value]...   (= qwen-ft train DECK.cfg)\n\ncommands:\n",
            QWENFT_VERSION);
    for (int i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-10s %s\n", COMMANDS[i]->name, COMMANDS[i]->summary);
    fprintf(f, "\n`qwen-ft help COMMAND` or `qwen-ft COMMAND --help` for a command's options; --version for the build;\n"
               "--man prints the man page, --completion bash the bash completion; docs/ for the deck keys and formats.\n");
}

static void version(FILE *f) {
    fprintf(f, "qwen-ft %s\nsource %s, %s build, CUDA backend %s\n", QWENFT_VERSION, QWENFT_GIT_DESCRIBE,
            QWENFT_BUILD_TYPE, QWENFT_CUDA_STATE);
}

static const qf_cmd *find_command(const char *name) {
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(name, COMMANDS[i]->name)) return COMMANDS[i];
    return NULL;
}

static int is_deck(const char *a) {
    size_t n = strlen(a);
    return n > 4 && !strcmp(a + n - 4, ".cfg");
}

static int unknown_command(FILE *err, const char *what, const char *name) {
    const char *near = NULL;
    int best = 3;
    for (int i = 0; i < NCOMMANDS; i++) {
        int d = qf_edit_distance(name, COMMANDS[i]->name);
        if (d < best) best = d, near = COMMANDS[i]->name;
    }
    if (err) {
        fprintf(err, "qwen-ft: unknown %s '%s'", what, name);
        if (near) fprintf(err, " (did you mean %s?)", near);
        fprintf(err, "\nTry 'qwen-ft --help' for the commands.\n");
    }
    return QF_EXIT_INPUT;
}

/* What needs no MPI: the general usage, help, version, man page, completion. -1 when argv names a command. */
static int answer_alone(int argc, char **argv, FILE *out, FILE *err) {
    if (argc < 2) {
        if (err) usage(err);
        return QF_EXIT_INPUT;
    }
    const char *a = argv[1];
    if (!strcmp(a, "--help") || !strcmp(a, "-h") || (!strcmp(a, "help") && argc == 2)) {
        if (out) usage(out);
        return 0;
    }
    if (!strcmp(a, "help")) {
        const qf_cmd *c = find_command(argv[2]);
        if (!c) return unknown_command(err, "command", argv[2]);
        if (out) qf_opts_help(c, out);
        return 0;
    }
    if (!strcmp(a, "--version")) {
        if (out) version(out);
        return 0;
    }
    if (!strcmp(a, "--man")) {
        if (out) qf_opts_man(COMMANDS, NCOMMANDS, QWENFT_VERSION, out);
        return 0;
    }
    if (!strcmp(a, "--completion")) {
        if (argc != 3 || strcmp(argv[2], "bash")) {
            if (err) fprintf(err, "qwen-ft: --completion takes one shell: bash\n");
            return QF_EXIT_INPUT;
        }
        if (out) qf_opts_bash_completion(COMMANDS, NCOMMANDS, out);
        return 0;
    }
    if (!find_command(a) && !is_deck(a)) return unknown_command(err, a[0] == '-' ? "option" : "command", a);
    return -1;
}

/* The exit code of the job, carried by rank 0 alone; the other ranks exit 0. Rank 0 printed the message, and the
 * launcher reports the first non-zero exit it sees (mpirun) or the largest (srun): had another rank exited 3 first,
 * mpirun would tear the job down while rank 0's message still sat unread in its pipe (seen in CI, 3 ranks on 2
 * cores). The codes are first combined (the largest), so a failure seen by any rank is never lost. */
static int launcher_code(int rc) {
    int all = rc, rank = 0;
    MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank == 0 ? all : 0;
}

int main(int argc, char **argv) {
    /* under mpirun or srun every rank parses; the launcher's rank 0 alone speaks */
    int speak = qf_env_rank() == 0;
    FILE *out = speak ? stdout : NULL, *err = speak ? stderr : NULL;
    int rc = answer_alone(argc, argv, out, err);
    if (rc >= 0) return speak ? rc : 0; /* see launcher_code below */
    const qf_cmd *cmd = find_command(argv[1]);
    char *targv[argc + 1]; /* a bare deck: `train DECK ...` */
    char **cargv = argv + 1;
    int cargc = argc - 1;
    if (!cmd) {
        cmd = &qf_cmd_train;
        targv[0] = "train";
        for (int i = 1; i < argc; i++) targv[i] = argv[i];
        targv[argc] = NULL;
        cargv = targv;
        cargc = argc;
    }
    void *opts = qf_opts_alloc(cmd);
    rc = qf_opts_parse(cmd, cargc, cargv, opts, out, err);
    if (rc) {
        qf_opts_free(cmd, opts);
        return rc == QF_OPTS_HELP || !speak ? 0 : rc;
    }
    /* `train` stops cleanly on SIGUSR1/SIGTERM/SIGINT (docs/hpc.md); one that comes while MPI starts waits for the
     * handlers instead of killing the rank */
    if (cmd == &qf_cmd_train) qf_signals_hold();
    /* a closed stdout (`qwen-ft prepare ... | head`) is EPIPE on a write, not a death by SIGPIPE that would leave
     * the temporaries behind: the command finishes its outputs and exits through the normal path */
    signal(SIGPIPE, SIG_IGN);
    if (cmd == &qf_cmd_serve) { /* rank 0's engine thread makes the layer split's calls (serve/serve_split.c) */
        int provided;
        MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    } else {
        MPI_Init(NULL, NULL);
    }
    qf_fatal_set_hook(qf_comm_fatal); /* QF_FATAL on any rank now stops them all */
    rc = cmd->rank0 ? qf_comm_on_rank0(cmd->run, opts) : cmd->run(opts);
    /* a failing rank that could not agree has already called MPI_Abort; the rest reach here */
    rc = launcher_code(rc);
    MPI_Finalize();
    qf_opts_free(cmd, opts);
    return rc;
}
