/* options.h — the command-line layer: each command declares its options once, in a table (name, type, default,
 * range, help), and this layer parses argv with getopt_long (GNU syntax: --opt=value and --opt value, short
 * options, "--" ends the options), checks every value, and writes the command's --help, the man page and the
 * bash completion from the same tables. It runs before MPI_Init and uses no MPI.
 *
 * Adding an option to a command is one entry in its table (and the field it fills):
 *   {.name = "top-k", .type = QF_OPT_INT, .off = offsetof(gen_opts, top_k), .def = "0", .meta = "K",
 *    .lo = 0, .hi = 1e9, .help = "sample among the K most likely tokens (0: all)"},
 */
#ifndef QF_OPTIONS_H
#define QF_OPTIONS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "util.h"

/* What an option's value is, and the type of the field it fills. */
typedef enum qf_opt_type {
    QF_OPT_FLAG,   /* no value; int field set to 1 */
    QF_OPT_STR,    /* const char * (points into argv) */
    QF_OPT_CHOICE, /* const char *, one of .choices ("bf16|fp16|fp32") */
    QF_OPT_LIST,   /* qf_strlist: repeatable, in order */
    QF_OPT_INT,    /* int, in [.lo, .hi] */
    QF_OPT_I64,    /* int64_t, in [.lo, .hi] */
    QF_OPT_U64,    /* uint64_t, in [.lo, .hi] (no sign) */
    QF_OPT_DOUBLE, /* double, finite, in [.lo, .hi] (.open makes an end exclusive) */
    QF_OPT_IGNORED /* takes a value, warns that it has no effect (--set of a command that reads no deck) */
} qf_opt_type;

#define QF_OPT_OPEN_LO 1 /* .open: the lower end of the range is excluded */
#define QF_OPT_OPEN_HI 2 /* .open: the upper end of the range is excluded */

typedef struct qf_opt {
    const char *name; /* long name, without "--" */
    char short_name;  /* 0: none */
    qf_opt_type type;
    size_t off;          /* offset of the field in the command's option struct */
    const char *def;     /* default, as it would be written on the command line (NULL: none) */
    const char *meta;    /* the value's name in --help (FILE, N, x) */
    const char *choices; /* QF_OPT_CHOICE: "a|b|c" */
    double lo, hi;       /* numbers: range (lo == hi == 0: the type's own range) */
    int open;            /* QF_OPT_OPEN_LO | QF_OPT_OPEN_HI */
    int required;        /* the command needs it */
    const char *help;    /* one sentence or two; wrapped by the layer */
} qf_opt;

/* A command: its name, synopsis, description, option table, positional arguments and entry point. */
typedef struct qf_cmd {
    const char *name;
    const char *synopsis; /* after "qwen-ft NAME " */
    const char *summary;  /* one line, for `qwen-ft --help` */
    const char *about;    /* paragraphs after the usage line (may be NULL) */
    const qf_opt *opts;
    int nopts;
    const char *pos_meta; /* positional arguments' name (NULL: none accepted) */
    int pos_min, pos_max; /* how many; pos_max 1: a const char * field, else a qf_strlist */
    size_t pos_off;
    size_t size;                    /* sizeof the option struct */
    int (*run)(const void *opts);   /* after MPI_Init, on every rank (rank 0 only with rank0); returns the exit code */
    int rank0;                      /* run on rank 0 alone; the other ranks wait and return its exit code */
    int uses_deck;                  /* DECK.cfg is its positional argument (completion offers *.cfg) */
} qf_cmd;

#define QF_NOPTS(table) ((int)(sizeof(table) / sizeof((table)[0])))

/* The outcome of qf_opts_parse besides an exit code. */
#define QF_OPTS_HELP (-1)

/* The block an option struct lives in: cmd->size bytes, zeroed, then room for what qf_opts_given reads. */
void *qf_opts_alloc(const qf_cmd *cmd);
/* Parses argv (argv[0] = the command name) into opts (from qf_opts_alloc; defaults are set here first).
 * Returns 0, QF_OPTS_HELP after --help (text printed to out when out != NULL), or 2 after a bad option or value
 * (a message naming it printed to err when err != NULL). qf_opts_free releases opts and its lists. */
int qf_opts_parse(const qf_cmd *cmd, int argc, char **argv, void *opts, FILE *out, FILE *err);
void qf_opts_free(const qf_cmd *cmd, void *opts);
/* Parse, then cmd->run (0 after --help, 2 after a bad option): what main does around MPI_Init, in one call. */
int qf_opts_run(const qf_cmd *cmd, int argc, char **argv);
/* 1 if the option called name was given on the command line (after qf_opts_parse). */
int qf_opts_given(const qf_cmd *cmd, const void *opts, const char *name);

/* A bad value that the table cannot catch (a command's cross-option checks): prints "qwen-ft CMD: MESSAGE" and
 * tail (may be "") as one line to err (NULL: says nothing, as on ranks other than 0); returns QF_EXIT_INPUT. */
int qf_opts_bad(FILE *err, const char *cmd, const char *tail, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A command's --help. */
void qf_opts_help(const qf_cmd *cmd, FILE *f);
/* The man page (roff, section 1) and a bash completion script for all commands. */
void qf_opts_man(const qf_cmd *const *cmds, int n, const char *version, FILE *f);
void qf_opts_bash_completion(const qf_cmd *const *cmds, int n, FILE *f);

/* Checked number conversions (whole string, no overflow); 0 or -1. */
int qf_parse_i64(const char *s, int64_t *v);
int qf_parse_u64(const char *s, uint64_t *v);
int qf_parse_double(const char *s, double *v);

/* This process's rank as the launcher's environment says (Open MPI, PMIx, PMI, Slurm), before MPI_Init; 0 when
 * none says. */
int qf_env_rank(void);

#endif
