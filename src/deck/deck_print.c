/* deck_print.c — the resolved deck as libconfig text (qf_deck_print: the run header shows it, checkpoints store it,
 * and it loads back as the same deck) and every key as the markdown table of docs/deck.md. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "deck_impl.h"

/* ================================================================ printing */

static void deck_print_float(double v, FILE *f) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, sizeof buf, "%.17g", v);
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    fputs(buf, f);
}

void qf_deck_print_string(const char *s, FILE *f) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void deck_print_value(const qf_deck_key *k, const qf_deck *d, FILE *f) {
    double a, b;
    int64_t v;
    switch (k->type) {
    case QF_KT_FLOAT:
        if ((k->flags & QF_KF_AUTO_SENTINEL) && k->autov && qf_deck_keys_get_float(k, d) == atof(k->autov))
            fputs("\"auto\"", f);
        else deck_print_float(qf_deck_keys_get_float(k, d), f);
        return;
    case QF_KT_STRING: qf_deck_print_string(qf_deck_keys_get_string(k, d), f); return;
    case QF_KT_ENUM: qf_deck_print_string(k->choices[qf_deck_keys_get_int(k, d)], f); return;
    case QF_KT_BOOL: fputs(qf_deck_keys_get_int(k, d) ? "true" : "false", f); return;
    case QF_KT_FLOAT_PAIR:
        qf_deck_keys_get_pair(k, d, &a, &b);
        fputc('[', f);
        deck_print_float(a, f);
        fputs(", ", f);
        deck_print_float(b, f);
        fputc(']', f);
        return;
    default:
        v = qf_deck_keys_get_int(k, d);
        if ((k->flags & QF_KF_AUTO_SENTINEL) && v == (k->autov ? atoll(k->autov) : -1)) fputs("\"auto\"", f);
        else fprintf(f, "%lld%s", (long long)v, v < INT_MIN || v > INT_MAX ? "L" : "");
    }
}

void qf_deck_print_value(const qf_deck *d, int ki, FILE *f) {
    int n;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    QF_CHECK(ki >= 0 && ki < n);
    deck_print_value(&k[ki], d, f);
}

static int deck_print_skip(const qf_deck_key *k, const qf_deck *d) {
    /* the resolved deck holds the keys that act, each once; the header lists the others (deck_sources.c) */
    if (k->fate == QF_FATE_ALIAS || k->fate == QF_FATE_NO_EFFECT || strcmp(k->path, "deepspeed") == 0) return 1;
    if (k->sched_mask && !(k->sched_mask & QF_SCHED_BIT(d->sched))) return 1;
    /* max_steps and epochs exclude each other (deck_check_run): print the one in use */
    if (strcmp(k->path, "max_steps") == 0) return d->max_steps == 0;
    if (strcmp(k->path, "epochs") == 0) return d->max_steps != 0;
    return (k->flags & QF_KF_UNSET) && qf_deck_keys_equals_text(k, d, k->def);
}

/* Opens/closes groups so that the next key's groups are open; returns the new depth. */
static int deck_print_groups(const char *path, char open[][64], int depth, FILE *f) {
    char comp[8][64];
    int n = 0, common = 0;
    for (const char *p = path, *dot; (dot = strchr(p, '.')) && n < 8; p = dot + 1, n++)
        snprintf(comp[n], sizeof comp[n], "%.*s", (int)(dot - p), p);
    while (common < depth && common < n && strcmp(open[common], comp[common]) == 0) common++;
    for (; depth > common; depth--) fprintf(f, "%*s};\n", 2 * (depth - 1), "");
    for (; depth < n; depth++) {
        fprintf(f, "%*s%s = {\n", 2 * depth, "", comp[depth]);
        snprintf(open[depth], 64, "%s", comp[depth]);
    }
    return depth;
}

void qf_deck_print(const qf_deck *d, FILE *f) {
    int n, depth = 0;
    char open[8][64];
    const qf_deck_key *k = qf_deck_keys_table(&n);
    fprintf(f, "# qwen-ft deck, resolved%s%s\n", d->path[0] ? " from " : "", d->path);
    for (int i = 0; i < n; i++) {
        if (deck_print_skip(&k[i], d)) continue;
        depth = deck_print_groups(k[i].path, open, depth, f);
        const char *leaf = strrchr(k[i].path, '.');
        fprintf(f, "%*s%s = ", 2 * depth, "", leaf ? leaf + 1 : k[i].path);
        deck_print_value(&k[i], d, f);
        fputs(";\n", f);
    }
    deck_print_groups("", open, depth, f);
}

/* ================================================================ markdown key table */

static void deck_md_cell(const char *s, FILE *f) {
    fputs(" ", f);
    for (; *s; s++) {
        if (*s == '|') fputc('\\', f);
        fputc(*s, f);
    }
    fputs(" |", f);
}

static const char *deck_md_type(const qf_deck_key *k) {
    switch (k->type) {
    case QF_KT_BOOL: return "bool";
    case QF_KT_INT:
    case QF_KT_INT64:
    case QF_KT_UINT64: return "int";
    case QF_KT_FLOAT: return "float";
    case QF_KT_FLOAT_PAIR: return "[float, float]";
    case QF_KT_ENUM: return (k->flags & QF_KF_BOOL_ENUM) ? "bool or string" : "string";
    default: return "string";
    }
}

static void deck_md_default(const qf_deck_key *k, char *buf, size_t n) {
    if (k->doc_default) snprintf(buf, n, "%s", k->doc_default);
    else if (k->type == QF_KT_STRING || k->type == QF_KT_ENUM) snprintf(buf, n, "`\"%s\"`", k->def);
    else snprintf(buf, n, "`%s`", k->def);
}

static void deck_md_allowed(const qf_deck_key *k, char *buf, size_t n) {
    char tmp[512];
    if (k->choices) {
        deck_choices_text(k, tmp, sizeof tmp);
        snprintf(buf, n, "%s%s", (k->flags & QF_KF_BOOL_ENUM) ? "true, false, " : "", tmp);
    } else if (k->min != 0 || k->max != 0) {
        deck_range_text(k, tmp, sizeof tmp);
        snprintf(buf, n, "%s", tmp + (strncmp(tmp, " in ", 4) == 0 ? 4 : 1));
    } else if (k->type == QF_KT_BOOL)
        snprintf(buf, n, "true, false");
    else if (k->type == QF_KT_STRING)
        snprintf(buf, n, "%s", strcmp(k->path, "model.preset") == 0 ? "a preset name (below)" : "a path");
    else
        snprintf(buf, n, "any");
}

static void deck_md_meaning(const qf_deck_key *k, char *buf, size_t n) {
    if (k->fate == QF_FATE_NO_EFFECT) snprintf(buf, n, "accepted, no effect here: %s (DeepSpeed: %s)", k->why, k->help);
    else if (k->fate == QF_FATE_ALIAS) snprintf(buf, n, "= `%s` (DeepSpeed's name and place)", k->alias);
    else snprintf(buf, n, "%s", k->help);
}

void qf_deck_print_keys_markdown(FILE *f) {
    int n;
    char def[256], allowed[768], aut[256], meaning[1024];
    const qf_deck_key *k = qf_deck_keys_table(&n);
    fputs("| key | type | default | \"auto\" | allowed | DeepSpeed | meaning |\n", f);
    fputs("|---|---|---|---|---|---|---|\n", f);
    for (int i = 0; i < n; i++) {
        deck_md_default(&k[i], def, sizeof def);
        deck_md_allowed(&k[i], allowed, sizeof allowed);
        snprintf(aut, sizeof aut, "%s", k[i].doc_auto ? k[i].doc_auto : k[i].autov ? k[i].autov : "no");
        fprintf(f, "| `%s` |", k[i].path);
        deck_md_cell(deck_md_type(&k[i]), f);
        deck_md_cell(def, f);
        deck_md_cell(aut, f);
        deck_md_cell(allowed, f);
        deck_md_cell(k[i].ds, f);
        deck_md_meaning(&k[i], meaning, sizeof meaning);
        deck_md_cell(meaning, f);
        fputc('\n', f);
    }
}
