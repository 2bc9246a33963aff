/* cmd_deck.c — `qwen-ft deck`: a DeepSpeed JSON config as the equivalent libconfig deck, with a comment per key
 * saying what it does here (--from-ds), and the key reference of docs/deck.md (--keys). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "commands.h"
#include "deck/deck.h"
#include "deck/deck_keys.h"
#include "deck/ds_config.h"
#include "deck_placeholders.h"
#include "out_file.h"

/* As DeepSpeed users write numbers: 2e8 stays 2e8 (not 200000000.0), 0.9 stays 0.9. */
static void put_float(double v, FILE *f) {
    char buf[64];
    if (v == (double)(long long)v && (v >= 1e5 || v <= -1e5)) {
        for (int p = 0; p < 17; p++) {
            snprintf(buf, sizeof buf, "%.*e", p, v);
            if (strtod(buf, NULL) == v) break;
        }
        char *e = strchr(buf, 'e'), *x = e + 1;
        if (*x == '+') x++;
        while (*x == '0' && x[1]) x++;
        memmove(e + 1, x, strlen(x) + 1);
        fputs(buf, f);
        return;
    }
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, sizeof buf, "%.17g", v);
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    fputs(buf, f);
}

static void put_scalar(const config_setting_t *s, FILE *f) {
    long long v;
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT64:
        v = config_setting_get_int64(s);
        fprintf(f, "%lld%s", v, v < -2147483648LL || v > 2147483647LL ? "L" : "");
        break;
    case CONFIG_TYPE_INT: fprintf(f, "%d", config_setting_get_int(s)); break;
    case CONFIG_TYPE_FLOAT: put_float(config_setting_get_float(s), f); break;
    case CONFIG_TYPE_BOOL: fputs(config_setting_get_bool(s) ? "true" : "false", f); break;
    case CONFIG_TYPE_STRING: qf_deck_print_string(config_setting_get_string(s), f); break;
    default: break;
    }
}

/* The comment after a key: what it does here. */
static void put_comment(const char *path, const config_setting_t *s, FILE *f) {
    int ki = qf_deck_keys_find(path), n;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    if (ki < 0) return;
    k += ki;
    int is_auto = config_setting_type(s) == CONFIG_TYPE_STRING && !strcmp(config_setting_get_string(s), "auto");
    if (k->fate == QF_FATE_NO_EFFECT) fprintf(f, "  # accepted, no effect here: %s", k->why);
    else if (k->fate == QF_FATE_ALIAS) fprintf(f, "  # = %s", k->alias);
    else fprintf(f, "  # %s", k->help);
    const char *aut = k->doc_auto ? k->doc_auto : k->autov;
    if (is_auto && aut) fprintf(f, "; \"auto\": %s", strncmp(aut, "-1: ", 4) == 0 ? aut + 4 : aut);
}

static void put_group(const config_setting_t *g, const char *prefix, int depth, FILE *f) {
    char path[512];
    for (int i = 0; i < config_setting_length(g); i++) {
        const config_setting_t *s = config_setting_get_elem(g, (unsigned)i);
        const char *name = config_setting_name(s);
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", name);
        fprintf(f, "%*s%s = ", 2 * depth, "", name);
        if (config_setting_is_group(s)) {
            fputs("{\n", f);
            put_group(s, path, depth + 1, f);
            fprintf(f, "%*s};\n", 2 * depth, "");
            continue;
        }
        if (config_setting_is_list(s) || config_setting_is_array(s)) {
            fputc('[', f);
            for (int j = 0; j < config_setting_length(s); j++) {
                if (j) fputs(", ", f);
                put_scalar(config_setting_get_elem(s, (unsigned)j), f);
            }
            fputc(']', f);
        } else {
            put_scalar(s, f);
        }
        fputc(';', f);
        put_comment(path, s, f);
        fputc('\n', f);
    }
}

static int from_ds(const char *json, const char *model, const char *train, const char *valid, FILE *f) {
    char set[4096 + 16], *sets[1] = {set};
    qf_deck d;
    qf_err e = {0};
    qf_ds_config ds;
    /* the JSON must load as a deck does (every key known, typed and consistent) before it is translated */
    snprintf(set, sizeof set, "deepspeed=\"%s\"", json);
    if (qf_deck_load(NULL, 1, sets, 1, &d, &e) != 0) {
        fprintf(stderr, "qwen-ft deck: %s\n", e.msg);
        return QF_EXIT_INPUT;
    }
    if (qf_ds_read(json, &ds, &e) != 0) {
        fprintf(stderr, "qwen-ft deck: %s\n", e.msg);
        qf_ds_free(&ds);
        return QF_EXIT_INPUT;
    }
    fprintf(f, "# qwen-ft deck translated from %s by `qwen-ft deck --from-ds` (docs/deck.md, \"From DeepSpeed\").\n"
               "# Every DeepSpeed key keeps its name and place; \"auto\" resolves as the HF Trainer resolves it, from\n"
               "# the keys this deck sets (or the Trainer's defaults). The model and data are what the Trainer got\n"
               "# from its own arguments.\n", json);
    if (model) {
        fputs("model = { from = ", f);
        qf_deck_print_string(model, f);
        fputs("; };\n", f);
    } else {
        fputs("# model = { from = \"MODEL.h5\"; };  # required: an HDF5 model, a checkpoint directory or an HF directory\n", f);
    }
    qf_deck_put_data(train, valid, &d, f);
    put_group(config_root_setting(&ds.cfg), "", 0, f);
    qf_deck_put_placeholders(json, config_root_setting(&ds.cfg), &d, f);
    qf_ds_free(&ds);
    return 0;
}

typedef struct deck_opts {
    const char *from_ds, *model, *train, *valid, *out;
    int keys;
} deck_opts;

static const qf_opt DECK_OPTS[] = {
    {.name = "from-ds", .type = QF_OPT_STR, .off = offsetof(deck_opts, from_ds), .meta = "FILE.json",
     .help = "print the libconfig deck equivalent to this DeepSpeed JSON config: every key under DeepSpeed's name "
             "and place, with a comment on what it does here"},
    {.name = "model", .type = QF_OPT_STR, .off = offsetof(deck_opts, model), .meta = "M",
     .help = "model.from of the deck (what the HF Trainer got from its own arguments)"},
    {.name = "train", .type = QF_OPT_STR, .off = offsetof(deck_opts, train), .meta = "D.h5", .help = "data.train"},
    {.name = "valid", .type = QF_OPT_STR, .off = offsetof(deck_opts, valid), .meta = "V.h5", .help = "data.valid"},
    {.name = "out", .short_name = 'o', .type = QF_OPT_STR, .off = offsetof(deck_opts, out), .meta = "OUT.cfg",
     .help = "write the deck there instead of standard output (in one piece once the translation succeeded; "
             "never over the JSON itself)"},
    {.name = "keys", .type = QF_OPT_FLAG, .off = offsetof(deck_opts, keys),
     .help = "print every deck key as the markdown table of docs/deck.md"},
};

static int deck_run(const void *opts) {
    const deck_opts *o = opts;
    if (!o->keys && !o->from_ds) {
        fprintf(stderr, "qwen-ft deck: give --from-ds FILE.json or --keys (qwen-ft help deck)\n");
        return QF_EXIT_INPUT;
    }
    /* -o: the output rule (kernels/base/out_file.h): never the JSON itself, written whole into a temporary and
     * renamed only once the translation succeeded, so a broken JSON leaves OUT as it was */
    qf_out out;
    qf_err e = {0};
    FILE *f = stdout;
    if (o->out) {
        const char *in[1] = {o->from_ds};
        if (qf_out_begin(&out, "-o", o->out, in, o->from_ds ? 1 : 0, &e)) {
            fprintf(stderr, "qwen-ft deck: %s\n", e.msg);
            return e.code;
        }
        if (!(f = fopen(out.tmp, "wx"))) {
            fprintf(stderr, "qwen-ft deck: cannot write %s: %s\n", out.tmp, strerror(errno));
            qf_out_abort(&out);
            return QF_EXIT_INPUT;
        }
    }
    int rc = 0;
    if (o->keys) qf_deck_print_keys_markdown(f);
    else {
        char bm[QF_PATH_MAX + 4096], bt[QF_PATH_MAX + 4096], bv[QF_PATH_MAX + 4096];
        rc = from_ds(o->from_ds, qf_deck_path_for_out(o->out, o->model, bm, sizeof bm),
                     qf_deck_path_for_out(o->out, o->train, bt, sizeof bt),
                     qf_deck_path_for_out(o->out, o->valid, bv, sizeof bv), f);
    }
    if (o->out) {
        if (fclose(f) != 0 && rc == 0) {
            fprintf(stderr, "qwen-ft deck: writing %s failed (disk full?)\n", o->out);
            rc = QF_EXIT_RUNTIME;
        }
        if (rc == 0 && qf_out_commit(&out, &e) != 0) {
            fprintf(stderr, "qwen-ft deck: %s\n", e.msg);
            rc = e.code;
        }
        qf_out_abort(&out); /* after a failure: removes the temporary; after the commit: nothing */
    }
    return rc;
}

const qf_cmd qf_cmd_deck = {
    .name = "deck",
    .synopsis = "(--from-ds FILE.json [--model M] [--train D] [--valid V] [-o OUT.cfg] | --keys)",
    .summary = "a DeepSpeed JSON config as a commented libconfig deck; the deck key reference",
    .about = "--from-ds prints the libconfig deck equivalent to a DeepSpeed JSON config (docs/deck.md, \"From\n"
             "DeepSpeed\"); --keys prints every deck key as markdown (the table of docs/deck.md).",
    .opts = DECK_OPTS,
    .nopts = QF_NOPTS(DECK_OPTS),
    .size = sizeof(deck_opts),
    .run = deck_run,
    .rank0 = 1,
};
