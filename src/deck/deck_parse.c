/* deck_parse.c — the deck's settings into qf_deck: reads the deck file (and the DeepSpeed JSON of `deepspeed`),
 * walks every setting (unknown keys, DeepSpeed keys only in the JSON, a key given twice under two names) and takes
 * each key's value as its type and range allow, or "auto"; records where each value came from (qf_deck.origin). */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "deck_impl.h"
#include "deck_include.h"

/* ================================================================ integer literals (libconfig 1.5 wraps ints) */

/* libconfig 1.5 stores an integer literal beyond 32 bits (5000000000 without L) wrapped to 32 bits. Re-read the
 * literal from the source line so that such values are taken exactly (or rejected by the range check). */
static int deck_scan_literal(const char *line, const char *name, long long *out) {
    size_t len = strlen(name);
    for (const char *p = strstr(line, name); p; p = strstr(p + len, name)) {
        if (p > line && (isalnum((unsigned char)p[-1]) || strchr("_-*.", p[-1]))) continue;
        const char *q = p + len;
        while (*q == ' ' || *q == '\t') q++;
        if (*q != '=' && *q != ':') continue;
        for (q++; *q == ' ' || *q == '\t'; q++) {}
        const char *digits = q + (*q == '-' || *q == '+');
        int hex = digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X');
        char *end;
        errno = 0;
        long long v = strtoll(q, &end, hex ? 16 : 10);
        if (end == q || *end == '.' || *end == 'e' || *end == 'E' || *end == 'L') return -1;
        *out = v;
        return 0;
    }
    return -1;
}

static int deck_source_literal(const deck_ctx *c, const config_setting_t *s, long long *out) {
    char file[DECK_FILE_MAX];
    unsigned want = config_setting_source_line(s);
    if (!config_setting_name(s) || config_setting_get_hook(s) || !c->has_file) return -1;
    deck_file_of(c, config_setting_source_file(s), file, sizeof file);
    char *line = qf_malloc(QF_MAX_DECK_LINE + 2); /* the scan (deck_include.c) bounds every line */
    int rc = deck_line_get(c, file, want, line, QF_MAX_DECK_LINE + 2) == 0
                 ? deck_scan_literal(line, config_setting_name(s), out) : -1;
    free(line);
    return rc;
}

/* The literal is used only if libconfig's value is that literal wrapped to 32 bits (so that another setting of the
 * same name on the line cannot be taken for this one). */
static int64_t deck_int_value(const deck_ctx *c, const config_setting_t *s) {
    long long lit;
    if (config_setting_type(s) == CONFIG_TYPE_INT && deck_source_literal(c, s, &lit) == 0 &&
        (int32_t)(uint32_t)(unsigned long long)lit == (int32_t)config_setting_get_int(s))
        return lit;
    return config_setting_get_int64(s);
}

/* ================================================================ taking one key's value */

static int deck_setting_int(const deck_ctx *c, const qf_deck_key *k, const config_setting_t *s, int64_t *v) {
    double f;
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: *v = deck_int_value(c, s); return 0;
    case CONFIG_TYPE_FLOAT:
        f = config_setting_get_float(s);
        if (f != floor(f) || fabs(f) > DECK_INT_NOMAX) return deck_bad(c, k, s, NULL);
        *v = (int64_t)f;
        return 0;
    default: return deck_bad(c, k, s, NULL);
    }
}

static int deck_in_range(const qf_deck_key *k, double v) {
    if (k->min == 0 && k->max == 0) return 1;
    if ((k->flags & QF_KF_GT_MIN) ? !(v > k->min) : !(v >= k->min)) return 0;
    return (k->flags & QF_KF_LT_MAX) ? v < k->max : v <= k->max;
}

static int deck_int_fits(const qf_deck_key *k, int64_t v) {
    if (k->type == QF_KT_INT) return v >= INT_MIN && v <= INT_MAX;
    if (k->type == QF_KT_UINT64) return v >= 0;
    return 1;
}

static int deck_take_int(deck_ctx *c, const qf_deck_key *k, const config_setting_t *s) {
    int64_t v = 0;
    int rc = deck_setting_int(c, k, s, &v);
    if (rc) return rc;
    if (!deck_int_fits(k, v) || !deck_in_range(k, (double)v)) return deck_bad_num(c, k, s, (double)v);
    qf_deck_keys_store_int(k, c->d, v);
    return 0;
}

static int deck_setting_float(const deck_ctx *c, const config_setting_t *s, double *v) {
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: *v = (double)deck_int_value(c, s); return 0;
    case CONFIG_TYPE_FLOAT: *v = config_setting_get_float(s); return 0;
    default: return -1;
    }
}

static int deck_take_float(deck_ctx *c, const qf_deck_key *k, const config_setting_t *s) {
    double v;
    if (deck_setting_float(c, s, &v) != 0) return deck_bad(c, k, s, NULL);
    if (!deck_in_range(k, v)) return deck_bad_num(c, k, s, v);
    qf_deck_keys_store_float(k, c->d, v);
    return 0;
}

static int deck_take_bool(deck_ctx *c, const qf_deck_key *k, const config_setting_t *s) {
    if (config_setting_type(s) != CONFIG_TYPE_BOOL) return deck_bad(c, k, s, NULL);
    qf_deck_keys_store_int(k, c->d, config_setting_get_bool(s));
    return 0;
}

static int deck_take_enum(deck_ctx *c, const qf_deck_key *k, const config_setting_t *s) {
    int t = config_setting_type(s), i;
    if (t == CONFIG_TYPE_BOOL && (k->flags & QF_KF_BOOL_ENUM)) {
        qf_deck_keys_store_int(k, c->d, config_setting_get_bool(s));
        return 0;
    }
    if (t != CONFIG_TYPE_STRING) return deck_bad(c, k, s, NULL);
    if ((i = qf_deck_keys_choice(k, config_setting_get_string(s))) < 0) return deck_bad_choice(c, k, s);
    qf_deck_keys_store_int(k, c->d, i);
    return 0;
}

static int deck_take_string(deck_ctx *c, const qf_deck_key *k, const config_setting_t *s) {
    const char *v;
    if (config_setting_type(s) != CONFIG_TYPE_STRING) return deck_bad(c, k, s, NULL);
    v = config_setting_get_string(s);
    if (k->choices) {
        int i = qf_deck_keys_choice(k, v);
        if (i < 0) return deck_bad_choice(c, k, s);
        v = k->choices[i]; /* canonical spelling ("adamw" -> "AdamW") */
    }
    if (qf_deck_keys_store_string(k, c->d, v) != 0)
        return deck_fail(c, s, k->path, "expected a string of at most %zu characters, got %zu", k->size - 1,
                         strlen(v));
    return 0;
}

static int deck_take_pair(deck_ctx *c, const qf_deck_key *k, const config_setting_t *s) {
    double v[2];
    if (!config_setting_is_array(s) && !config_setting_is_list(s)) return deck_bad(c, k, s, NULL);
    if (config_setting_length(s) != 2) return deck_bad(c, k, s, NULL);
    for (int i = 0; i < 2; i++) {
        if (deck_setting_float(c, config_setting_get_elem(s, (unsigned)i), &v[i]) != 0) return deck_bad(c, k, s, NULL);
        if (!deck_in_range(k, v[i])) return deck_bad_num(c, k, s, v[i]);
    }
    qf_deck_keys_store_pair(k, c->d, v[0], v[1]);
    return 0;
}

/* The key whose value an alias gives (the key itself when it is none). */
static int deck_target(const deck_ctx *c, int ki) {
    int ti = c->keys[ki].fate == QF_FATE_ALIAS ? qf_deck_keys_find(c->keys[ki].alias) : ki;
    QF_CHECK(ti >= 0);
    return ti;
}

static int deck_layer_of(const deck_ctx *c, const config_setting_t *s) {
    const char *hook = config_setting_get_hook(s);
    if (hook && strncmp(hook, "--set ", 6) == 0) return QF_ORIGIN_SET;
    return c->cur_layer;
}

/* Records where the value of key ki (as written) comes from; 1 when an earlier value stands (a --set wins over
 * the deck's other spelling of the key), -1 with the error set when the deck gives the key twice. */
static int deck_record(deck_ctx *c, int ki, config_setting_t *s) {
    int ti = deck_target(c, ki), layer = deck_layer_of(c, s), prev = c->layer[ti], pw = c->written[ti];
    unsigned char overridden = 0;
    char where[DECK_WHERE_MAX];
    if (c->src[ti]) {
        if (prev == QF_ORIGIN_SET && layer == QF_ORIGIN_DECK) return 1;
        if (prev == layer && layer != QF_ORIGIN_SET && pw != ki) {
            deck_where(c, c->src[ti], where, sizeof where);
            deck_fail(c, s, c->keys[ki].path, "given twice: also as '%s' at %s", c->keys[pw].path, where);
            return -1;
        }
        overridden = (prev == QF_ORIGIN_DS || (c->d->origin[pw] & QF_ORIGIN_DS_OVERRIDDEN)) && layer != QF_ORIGIN_DS;
        c->d->origin[pw] = QF_ORIGIN_DEFAULT;
    }
    c->src[ti] = s;
    c->layer[ti] = (unsigned char)layer;
    c->written[ti] = ki;
    c->d->origin[ki] = (unsigned char)(layer | (overridden ? QF_ORIGIN_DS_OVERRIDDEN : 0));
    return 0;
}

static int deck_take(deck_ctx *c, int ki, config_setting_t *s) {
    const qf_deck_key *k = &c->keys[ki];
    int rec = deck_record(c, ki, s), ti = deck_target(c, ki);
    if (rec) return rec < 0 ? c->e->code : 0;
    c->autos[ti] = 0;
    if (k->autov && config_setting_type(s) == CONFIG_TYPE_STRING && strcmp(config_setting_get_string(s), "auto") == 0) {
        c->autos[ti] = 1;
        c->d->origin[ki] |= QF_ORIGIN_AUTO;
        QF_CHECK(qf_deck_keys_apply_text(k, c->d, k->autov) == 0);
        return 0;
    }
    switch (k->type) {
    case QF_KT_BOOL: return deck_take_bool(c, k, s);
    case QF_KT_INT:
    case QF_KT_INT64:
    case QF_KT_UINT64: return deck_take_int(c, k, s);
    case QF_KT_FLOAT: return deck_take_float(c, k, s);
    case QF_KT_STRING: return deck_take_string(c, k, s);
    case QF_KT_ENUM: return deck_take_enum(c, k, s);
    case QF_KT_FLOAT_PAIR: return deck_take_pair(c, k, s);
    }
    return 0;
}

/* ================================================================ walking the tree */

static int deck_unknown(const deck_ctx *c, const config_setting_t *s, const char *path) {
    char where[DECK_WHERE_MAX];
    const char *sug = qf_deck_keys_suggest(path), *refused = qf_deck_keys_refused(path);
    deck_where(c, s, where, sizeof where);
    if (refused)
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key '%s': %s is a DeepSpeed feature qwen-ft does not have; remove the key",
                          where, path, refused);
    if (sug) return qf_err_set(c->e, QF_EXIT_INPUT, "%s: unknown key '%s' (did you mean '%s'?)", where, path, sug);
    return qf_err_set(c->e, QF_EXIT_INPUT, "%s: unknown key '%s' (docs/deck.md lists every key)", where, path);
}

static int deck_visit(deck_ctx *c, config_setting_t *s, const char *path) {
    int ki = qf_deck_keys_find(path), group = qf_deck_keys_is_group(path);
    char got[512];
    /* activation_checkpointing is qwen-ft's switch and DeepSpeed's group of the same name */
    if (ki >= 0 && !(group && config_setting_is_group(s))) {
        if (c->cur_layer == QF_ORIGIN_DS && !qf_deck_keys_is_ds(&c->keys[ki]))
            return deck_fail(c, s, path, "not a DeepSpeed config key (%s): give it in the deck, not in %s",
                             c->keys[ki].ds, c->d->deepspeed);
        return deck_take(c, ki, s);
    }
    if (!group) return deck_unknown(c, s, path);
    if (config_setting_is_group(s)) return deck_walk(c, s, path);
    deck_got(s, got, sizeof got);
    return deck_fail(c, s, path, "expected a group { ... }, got %s", got);
}

int deck_walk(deck_ctx *c, config_setting_t *g, const char *prefix) {
    char path[DECK_KEY_MAX];
    int n = config_setting_length(g);
    for (int i = 0; i < n; i++) {
        config_setting_t *s = config_setting_get_elem(g, (unsigned)i);
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", config_setting_name(s));
        int rc = deck_visit(c, s, path);
        if (rc) return rc;
    }
    return 0;
}

/* ================================================================ reading the deck and the DeepSpeed JSON */

static void deck_dir_of(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, n, ".");
    else if (slash == path) snprintf(dir, n, "/");
    else snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

int deck_read(deck_ctx *c, const char *path) {
    char file[DECK_FILE_MAX];
    deck_dir_of(path, c->dir, sizeof c->dir);
    config_set_include_dir(&c->cfg, c->dir);
    if (qf_deck_includes_check(path, c->dir, c->e)) return c->e->code; /* names file:line (src/deck/deck_include.h) */
    if (config_read_file(&c->cfg, path) == CONFIG_TRUE) return 0;
    deck_file_of(c, config_error_file(&c->cfg), file, sizeof file);
    if (strstr(config_error_text(&c->cfg), "include"))
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s:%d: %s (@include paths are relative to the deck's directory %s)",
                          file, config_error_line(&c->cfg), config_error_text(&c->cfg), c->dir);
    if (strcmp(config_error_text(&c->cfg), "syntax error") == 0)
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s:%d: syntax error", file, config_error_line(&c->cfg));
    return qf_err_set(c->e, QF_EXIT_INPUT, "%s:%d: syntax error: %s", file, config_error_line(&c->cfg),
                      config_error_text(&c->cfg));
}

/* `deepspeed = "ds_config.json";`: the JSON's settings are walked first, so that the deck's own win. A path in
 * the deck is relative to the deck's directory; one given with --set is taken as it is. */
int deck_load_ds(deck_ctx *c) {
    config_setting_t *s = config_setting_get_member(config_root_setting(&c->cfg), "deepspeed");
    qf_deck *d = c->d;
    int rc;
    if (!s) return 0;
    c->cur_layer = QF_ORIGIN_DECK;
    if ((rc = deck_take(c, deck_idx("deepspeed"), s)) != 0) return rc;
    c->src[deck_idx("deepspeed")] = NULL; /* taken again with the deck's settings */
    c->layer[deck_idx("deepspeed")] = 0;
    if (d->deepspeed[0] == '/' || config_setting_get_hook(s) || strcmp(c->dir, ".") == 0)
        snprintf(d->deepspeed_path, sizeof d->deepspeed_path, "%s", d->deepspeed);
    else
        snprintf(d->deepspeed_path, sizeof d->deepspeed_path, "%s/%s", c->dir, d->deepspeed);
    c->has_ds = 1;
    if (qf_ds_read(d->deepspeed_path, &c->ds, c->e) != 0) {
        char where[DECK_WHERE_MAX], msg[sizeof c->e->msg];
        deck_where(c, s, where, sizeof where);
        snprintf(msg, sizeof msg, "%s", c->e->msg);
        c->e->code = 0;
        return qf_err_set(c->e, QF_EXIT_INPUT, "%.1900s (key 'deepspeed' at %s)", msg, where);
    }
    c->cur_layer = QF_ORIGIN_DS;
    rc = deck_walk(c, config_root_setting(&c->ds.cfg), "");
    c->cur_layer = QF_ORIGIN_DECK;
    return rc;
}
