/* options.c — parsing a command's argv with its option table (see options.h). */
#include "options.h"
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "util.h"

#define QF_OPT_VAL0 1000 /* getopt_long's val of table entry i is QF_OPT_VAL0 + i */

int qf_parse_i64(const char *s, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *v = (int64_t)x;
    return 0;
}

int qf_parse_u64(const char *s, uint64_t *v) {
    char *end;
    const char *p = s;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '-' || *p == '+') return -1;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *v = (uint64_t)x;
    return 0;
}

int qf_parse_double(const char *s, double *v) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(x)) return -1;
    *v = x;
    return 0;
}

int qf_env_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID",
                                       "MV2_COMM_WORLD_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        int64_t r;
        if (v && !qf_parse_i64(v, &r)) return (int)r;
    }
    return 0;
}

/* "an integer in [1, 1000000000]", "a number in [0, 1)", "a number > 0" */
static void range_text(const qf_opt *o, char *buf, size_t cap) {
    const char *what = o->type == QF_OPT_DOUBLE ? "a number" : o->type == QF_OPT_U64 ? "a non-negative integer"
                                                                                     : "an integer";
    if (o->lo == 0 && o->hi == 0) snprintf(buf, cap, "%s", what);
    else if (isinf(o->hi)) snprintf(buf, cap, "%s %s %.15g", what, o->open & QF_OPT_OPEN_LO ? ">" : ">=", o->lo);
    else
        snprintf(buf, cap, "%s in %c%.15g, %.15g%c", what, o->open & QF_OPT_OPEN_LO ? '(' : '[', o->lo, o->hi,
                 o->open & QF_OPT_OPEN_HI ? ')' : ']');
}

static int in_range(const qf_opt *o, double x) {
    if (o->lo == 0 && o->hi == 0) return 1;
    int lo_ok = o->open & QF_OPT_OPEN_LO ? x > o->lo : x >= o->lo;
    int hi_ok = o->open & QF_OPT_OPEN_HI ? x < o->hi : x <= o->hi;
    return lo_ok && hi_ok;
}

static int choice_ok(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *c = choices; *c;) {
        size_t k = strcspn(c, "|");
        if (k == n && !strncmp(c, v, n)) return 1;
        c += k + (c[k] == '|');
    }
    return 0;
}

/* Stores text as option o's value into its field; 0, or 2 with the reason in msg. */
static int set_value(const qf_opt *o, char *field, const char *text, int argc, char *msg, size_t cap) {
    char range[160];
    range_text(o, range, sizeof range);
    int64_t i;
    uint64_t u;
    double d;
    switch (o->type) {
    case QF_OPT_FLAG: *(int *)field = 1; return 0;
    case QF_OPT_STR: *(const char **)field = text; return 0;
    case QF_OPT_IGNORED: return 0;
    case QF_OPT_CHOICE:
        if (!choice_ok(o->choices, text)) {
            snprintf(msg, cap, "--%s=%s: expected one of %s", o->name, text, o->choices);
            return QF_EXIT_INPUT;
        }
        *(const char **)field = text;
        return 0;
    case QF_OPT_LIST: {
        qf_strlist *l = (qf_strlist *)field;
        if (!l->v) l->v = qf_calloc((size_t)argc + 1, sizeof *l->v);
        l->v[l->n++] = text;
        return 0;
    }
    case QF_OPT_INT:
    case QF_OPT_I64:
        if (qf_parse_i64(text, &i) || !in_range(o, (double)i) ||
            (o->type == QF_OPT_INT && (i < -2147483647 - 1 || i > 2147483647)))
            break;
        if (o->type == QF_OPT_INT) *(int *)field = (int)i;
        else *(int64_t *)field = i;
        return 0;
    case QF_OPT_U64:
        if (qf_parse_u64(text, &u) || !in_range(o, (double)u)) break;
        *(uint64_t *)field = u;
        return 0;
    case QF_OPT_DOUBLE:
        if (qf_parse_double(text, &d) || !in_range(o, d)) break;
        *(double *)field = d;
        return 0;
    }
    snprintf(msg, cap, "--%s=%s: expected %s", o->name, text, range);
    return QF_EXIT_INPUT;
}

void *qf_opts_alloc(const qf_cmd *cmd) { return qf_calloc(1, cmd->size + (size_t)cmd->nopts + 1); }

static unsigned char *given_flags(const qf_cmd *cmd, const void *opts) { return (unsigned char *)opts + cmd->size; }

int qf_opts_given(const qf_cmd *cmd, const void *opts, const char *name) {
    for (int i = 0; i < cmd->nopts; i++)
        if (!strcmp(cmd->opts[i].name, name)) return given_flags(cmd, opts)[i];
    QF_FATAL("qf_opts_given: %s has no option --%s", cmd->name, name);
}

void qf_opts_free(const qf_cmd *cmd, void *opts) {
    if (!opts) return;
    for (int i = 0; i < cmd->nopts; i++)
        if (cmd->opts[i].type == QF_OPT_LIST) free(((qf_strlist *)((char *)opts + cmd->opts[i].off))->v);
    if (cmd->pos_meta && cmd->pos_max != 1) free(((qf_strlist *)((char *)opts + cmd->pos_off))->v);
    free(opts);
}

/* the closest option name to an unknown one, or NULL */
static const char *closest(const qf_cmd *cmd, const char *name) {
    const char *best = NULL;
    int bd = 3;
    for (int i = 0; i < cmd->nopts; i++) {
        int d = qf_edit_distance(name, cmd->opts[i].name);
        if (d < bd) bd = d, best = cmd->opts[i].name;
    }
    return best;
}

static int bad(const qf_cmd *cmd, FILE *err, const char *msg) {
    if (err) {
        fprintf(err, "qwen-ft %s: %s\nusage: qwen-ft %s %s\nTry 'qwen-ft %s --help' for the options.\n", cmd->name,
                msg, cmd->name, cmd->synopsis, cmd->name);
        fflush(err);
    }
    return QF_EXIT_INPUT;
}

int qf_opts_bad(FILE *err, const char *cmd, const char *tail, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(err, "qwen-ft %s: ", cmd);
        vfprintf(err, fmt, ap);
        fprintf(err, "%s\n", tail);
        va_end(ap);
    }
    return QF_EXIT_INPUT;
}

/* The message for getopt_long's '?' or ':' at argument arg. */
static void getopt_error(const qf_cmd *cmd, int c, int opt, const char *arg, char *msg, size_t cap) {
    const qf_opt *o = opt >= QF_OPT_VAL0 && opt < QF_OPT_VAL0 + cmd->nopts ? &cmd->opts[opt - QF_OPT_VAL0] : NULL;
    if (c == ':') {
        if (o) snprintf(msg, cap, "option --%s needs a value (--%s=%s)", o->name, o->name, o->meta ? o->meta : "VALUE");
        else snprintf(msg, cap, "option -%c needs a value", opt);
    } else if (o) {
        snprintf(msg, cap, "option --%s takes no value ('%s')", o->name, arg);
    } else if (arg[0] == '-' && arg[1] == '-') {
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
        const char *near = closest(cmd, name);
        if (near) snprintf(msg, cap, "unknown option '--%s' (did you mean --%s?)", name, near);
        else snprintf(msg, cap, "unknown (or ambiguous) option '--%s'", name);
    } else {
        snprintf(msg, cap, "unknown option '-%c'", opt ? opt : '?');
    }
}

static int set_positional(const qf_cmd *cmd, char *opts, const char *a, int argc, char *msg, size_t cap) {
    if (!cmd->pos_meta) {
        snprintf(msg, cap, "unexpected argument '%s'", a);
        return QF_EXIT_INPUT;
    }
    if (cmd->pos_max == 1) {
        const char **p = (const char **)(opts + cmd->pos_off);
        if (*p) {
            snprintf(msg, cap, "unexpected argument '%s' (one %s only)", a, cmd->pos_meta);
            return QF_EXIT_INPUT;
        }
        *p = a;
        return 0;
    }
    qf_strlist *l = (qf_strlist *)(opts + cmd->pos_off);
    if (l->n == cmd->pos_max) {
        snprintf(msg, cap, "unexpected argument '%s' (at most %d %s)", a, cmd->pos_max, cmd->pos_meta);
        return QF_EXIT_INPUT;
    }
    if (!l->v) l->v = qf_calloc((size_t)argc + 1, sizeof *l->v);
    l->v[l->n++] = a;
    return 0;
}

static int check_complete(const qf_cmd *cmd, const char *opts, char *msg, size_t cap) {
    const unsigned char *given = (const unsigned char *)opts + cmd->size;
    for (int i = 0; i < cmd->nopts; i++)
        if (cmd->opts[i].required && !given[i]) {
            snprintf(msg, cap, "missing --%s=%s (required)", cmd->opts[i].name, cmd->opts[i].meta);
            return QF_EXIT_INPUT;
        }
    if (cmd->pos_meta && cmd->pos_min > 0) {
        int n = cmd->pos_max == 1 ? *(const char *const *)(opts + cmd->pos_off) != NULL
                                  : ((const qf_strlist *)(opts + cmd->pos_off))->n;
        if (n < cmd->pos_min) {
            snprintf(msg, cap, "missing %s", cmd->pos_meta);
            return QF_EXIT_INPUT;
        }
    }
    return 0;
}

int qf_opts_parse(const qf_cmd *cmd, int argc, char **argv, void *opts_, FILE *out, FILE *err) {
    char *opts = opts_;
    unsigned char *given = given_flags(cmd, opts);
    char msg[1024];
    for (int i = 0; i < cmd->nopts; i++) /* defaults, through the same conversion as the command line */
        if (cmd->opts[i].def && cmd->opts[i].type != QF_OPT_FLAG &&
            set_value(&cmd->opts[i], opts + cmd->opts[i].off, cmd->opts[i].def, argc, msg, sizeof msg))
            QF_FATAL("%s: bad default of --%s: %s", cmd->name, cmd->opts[i].name, msg);
    struct option *lo = qf_calloc((size_t)cmd->nopts + 2, sizeof *lo);
    char shorts[2 * 64 + 8] = "-:h";
    size_t ns = strlen(shorts);
    for (int i = 0; i < cmd->nopts; i++) {
        const qf_opt *o = &cmd->opts[i];
        int has_arg = o->type == QF_OPT_FLAG ? no_argument : required_argument;
        lo[i] = (struct option){o->name, has_arg, NULL, QF_OPT_VAL0 + i};
        if (o->short_name && ns + 3 < sizeof shorts) {
            shorts[ns++] = o->short_name;
            if (has_arg == required_argument) shorts[ns++] = ':';
            shorts[ns] = 0;
        }
    }
    lo[cmd->nopts] = (struct option){"help", no_argument, NULL, 'h'};
    int rc = 0, c;
    opterr = 0;
    optind = 0; /* glibc: start afresh */
    while (!rc && (c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        const qf_opt *o = NULL;
        if (c >= QF_OPT_VAL0) o = &cmd->opts[c - QF_OPT_VAL0];
        else
            for (int i = 0; i < cmd->nopts && c > 1 && c < 128; i++)
                if (cmd->opts[i].short_name == c) o = &cmd->opts[i];
        if (c == 'h' && !o) {
            if (out) qf_opts_help(cmd, out);
            rc = QF_OPTS_HELP;
        } else if (c == 1) {
            rc = set_positional(cmd, opts, optarg, argc, msg, sizeof msg);
        } else if (c == '?' || c == ':') {
            getopt_error(cmd, c, optopt, argv[optind - 1], msg, sizeof msg);
            rc = QF_EXIT_INPUT;
        } else if (o) {
            rc = set_value(o, opts + o->off, optarg, argc, msg, sizeof msg);
            if (o->type == QF_OPT_IGNORED && err)
                fprintf(err, "qwen-ft %s: warning: --%s %s ignored (%s)\n", cmd->name, o->name, optarg, o->help);
            given[o - cmd->opts] = 1;
        }
    }
    /* "--" ends the options; what follows is positional */
    for (int i = optind; !rc && i < argc; i++) rc = set_positional(cmd, opts, argv[i], argc, msg, sizeof msg);
    free(lo);
    if (!rc) rc = check_complete(cmd, opts, msg, sizeof msg);
    return rc > 0 ? bad(cmd, err, msg) : rc;
}

int qf_opts_run(const qf_cmd *cmd, int argc, char **argv) {
    void *opts = qf_opts_alloc(cmd);
    int rc = qf_opts_parse(cmd, argc, argv, opts, stdout, stderr);
    if (rc == QF_OPTS_HELP) rc = 0;
    else if (rc == 0) rc = cmd->run(opts);
    qf_opts_free(cmd, opts);
    return rc;
}
