/* deck.c — loads, validates, resolves and prints the input deck (libconfig), driven by the key table in
 * deck_keys.c. Order of work in qf_deck_load: defaults, read the file (with @include relative to the deck's
 * directory), apply --set overrides to the libconfig tree, walk every setting (unknown keys, types, ranges, enum
 * values), resolve "auto" values that depend on other keys, cross-key checks, then the batch rule. */
#define _POSIX_C_SOURCE 200809L
#include "deck.h"
#include <ctype.h>
#include <errno.h>
#include <libconfig.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "deck_include.h"
#include "deck_keys.h"
#include "ds_config.h"
#include "model_config.h"

#define DECK_FILE_MAX (2 * QF_PATH_MAX + 8)
#define DECK_WHERE_MAX (DECK_FILE_MAX + 64)
#define DECK_KEY_MAX 512
#define DECK_INT_NOMAX 9.2e18

typedef struct deck_ctx {
    config_t cfg;
    const char *path;          /* the deck file, or "--set" when there is none */
    int has_file;
    char dir[QF_PATH_MAX];     /* include directory: the deck's */
    const qf_deck_key *keys;
    int nkeys;
    config_setting_t **src;    /* per key: the setting that gave it, or NULL */
    unsigned char *autos;      /* per key: given as "auto" */
    unsigned char *layer;      /* per key: QF_ORIGIN_* of the setting in src */
    int *written;              /* per key: the key as written (an alias of it, or itself) */
    int cur_layer;             /* QF_ORIGIN_DS while the DeepSpeed JSON is walked, else QF_ORIGIN_DECK */
    char **hooks;              /* "where" texts of settings that are not in the deck file (--set, the JSON) */
    int nhooks;
    qf_ds_config ds;           /* the DeepSpeed JSON (`deepspeed`), as settings */
    int has_ds;
    qf_deck *d;
    qf_err *e;
} deck_ctx;

/* Keeps a "where" text for settings that have no place in the deck file; returns it (owned by c). */
static const char *deck_hook(deck_ctx *c, const char *text) {
    c->hooks = realloc(c->hooks, (size_t)(c->nhooks + 1) * sizeof *c->hooks);
    QF_CHECK(c->hooks != NULL);
    return c->hooks[c->nhooks++] = qf_strdup(text);
}

/* ================================================================ locations and messages */

static void deck_file_of(const deck_ctx *c, const char *file, char *buf, size_t n) {
    if (!file) file = c->path;
    if (strcmp(file, c->path) == 0 || file[0] == '/' || strcmp(c->dir, ".") == 0)
        snprintf(buf, n, "%s", file);
    else
        snprintf(buf, n, "%s/%s", c->dir, file);
}

/* "FILE:LINE", or "--set 'a.b=v'" for a setting an override created. */
static void deck_where(const deck_ctx *c, const config_setting_t *s, char *buf, size_t n) {
    char file[DECK_FILE_MAX];
    if (!s) {
        snprintf(buf, n, "%s", c->path);
        return;
    }
    if (config_setting_get_hook(s)) { /* "--set 'a.b=v'" or "ds_config.json:12" */
        snprintf(buf, n, "%s", (const char *)config_setting_get_hook(s));
        return;
    }
    deck_file_of(c, config_setting_source_file(s), file, sizeof file);
    snprintf(buf, n, "%s:%u", file, (unsigned)config_setting_source_line(s));
}

__attribute__((format(printf, 4, 5)))
static int deck_fail(const deck_ctx *c, const config_setting_t *s, const char *key, const char *fmt, ...) {
    char where[DECK_WHERE_MAX], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    deck_where(c, s, where, sizeof where);
    return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key '%s': %s", where, key, msg);
}

static void deck_num(double v, char *buf, size_t n) {
    if (v == floor(v) && fabs(v) < 1e16)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%g", v);
}

static int deck_is_int_type(qf_key_type t) { return t == QF_KT_INT || t == QF_KT_INT64 || t == QF_KT_UINT64; }

static void deck_range_text(const qf_deck_key *k, char *buf, size_t n) {
    char lo[64], hi[64];
    int ints = deck_is_int_type(k->type);
    int nohi = k->max >= DECK_INT_NOMAX || (ints && k->max >= INT_MAX);
    buf[0] = 0;
    if (k->min == 0 && k->max == 0) return;
    deck_num(k->min, lo, sizeof lo);
    deck_num(k->max, hi, sizeof hi);
    if (nohi)
        snprintf(buf, n, " %s %s", (k->flags & QF_KF_GT_MIN) ? ">" : ">=", lo);
    else if (ints)
        snprintf(buf, n, " in %s..%s", lo, hi);
    else
        snprintf(buf, n, " in %s%s, %s%s", (k->flags & QF_KF_GT_MIN) ? "(" : "[", lo, hi,
                 (k->flags & QF_KF_LT_MAX) ? ")" : "]");
}

static void deck_choices_text(const qf_deck_key *k, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; k->choices[i] && len + 1 < n; i++) {
        snprintf(buf + len, n - len, "%s\"%s\"", i ? ", " : "", k->choices[i]);
        len = strlen(buf);
    }
}

/* What the key accepts, in words: "an integer in 0..3", "one of \"none\", \"cpu\"", ... */
static void deck_expect(const qf_deck_key *k, char *buf, size_t n) {
    char range[128], choices[512];
    const char *what = "a string";
    deck_range_text(k, range, sizeof range);
    switch (k->type) {
    case QF_KT_BOOL: what = "true or false"; break;
    case QF_KT_INT:
    case QF_KT_INT64:
    case QF_KT_UINT64: what = "an integer"; break;
    case QF_KT_FLOAT: what = "a number"; break;
    case QF_KT_FLOAT_PAIR: what = "a list [a, b] of two numbers, each"; break;
    default: break;
    }
    if (k->choices) {
        deck_choices_text(k, choices, sizeof choices);
        snprintf(buf, n, "%s%s%s", (k->flags & QF_KF_BOOL_ENUM) ? "true, false or one of " : "one of ", choices,
                 k->autov ? " or \"auto\"" : "");
        return;
    }
    snprintf(buf, n, "%s%s%s", what, range, k->autov ? " or \"auto\"" : "");
}

/* The value of a setting, in words, for "got ...". */
static void deck_got(const config_setting_t *s, char *buf, size_t n) {
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT: snprintf(buf, n, "%d", config_setting_get_int(s)); break;
    case CONFIG_TYPE_INT64: snprintf(buf, n, "%lld", config_setting_get_int64(s)); break;
    case CONFIG_TYPE_FLOAT: snprintf(buf, n, "%g", config_setting_get_float(s)); break;
    case CONFIG_TYPE_BOOL: snprintf(buf, n, "%s", config_setting_get_bool(s) ? "true" : "false"); break;
    case CONFIG_TYPE_STRING: snprintf(buf, n, "\"%s\"", config_setting_get_string(s)); break;
    case CONFIG_TYPE_GROUP: snprintf(buf, n, "a group"); break;
    default: snprintf(buf, n, "a list of %d values", config_setting_length(s)); break;
    }
}

static int deck_bad(const deck_ctx *c, const qf_deck_key *k, const config_setting_t *s, const char *got) {
    char expect[768], gotbuf[512];
    deck_expect(k, expect, sizeof expect);
    if (!got) {
        deck_got(s, gotbuf, sizeof gotbuf);
        got = gotbuf;
    }
    return deck_fail(c, s, k->path, "expected %s, got %s", expect, got);
}

static int deck_bad_num(const deck_ctx *c, const qf_deck_key *k, const config_setting_t *s, double v) {
    char got[64];
    deck_num(v, got, sizeof got);
    return deck_bad(c, k, s, got);
}

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
    char file[DECK_FILE_MAX], *line = NULL;
    size_t cap = 0;
    unsigned want = config_setting_source_line(s), ln = 0;
    int rc = -1;
    if (!config_setting_name(s) || config_setting_get_hook(s) || !c->has_file) return -1;
    deck_file_of(c, config_setting_source_file(s), file, sizeof file);
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    while (getline(&line, &cap, f) >= 0)
        if (++ln == want) {
            rc = deck_scan_literal(line, config_setting_name(s), out);
            break;
        }
    free(line);
    fclose(f);
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

static int deck_bad_choice(const deck_ctx *c, const qf_deck_key *k, const config_setting_t *s) {
    char expect[768];
    const char *v = config_setting_get_string(s);
    const char *sug = qf_deck_keys_suggest_in(v, k->choices);
    deck_expect(k, expect, sizeof expect);
    if (sug) return deck_fail(c, s, k->path, "expected %s, got \"%s\" (did you mean \"%s\"?)", expect, v, sug);
    return deck_fail(c, s, k->path, "expected %s, got \"%s\"", expect, v);
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

static int deck_walk(deck_ctx *c, config_setting_t *g, const char *prefix);

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

static int deck_walk(deck_ctx *c, config_setting_t *g, const char *prefix) {
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

/* ================================================================ --set overrides */

static config_setting_t *deck_copy(config_setting_t *parent, const char *name, const config_setting_t *src) {
    int t = config_setting_type(src);
    config_setting_t *d = config_setting_add(parent, name, t);
    QF_CHECK(d != NULL);
    switch (t) {
    case CONFIG_TYPE_INT: config_setting_set_int(d, config_setting_get_int(src)); break;
    case CONFIG_TYPE_INT64: config_setting_set_int64(d, config_setting_get_int64(src)); break;
    case CONFIG_TYPE_FLOAT: config_setting_set_float(d, config_setting_get_float(src)); break;
    case CONFIG_TYPE_BOOL: config_setting_set_bool(d, config_setting_get_bool(src)); break;
    case CONFIG_TYPE_STRING: config_setting_set_string(d, config_setting_get_string(src)); break;
    default:
        for (int i = 0; i < config_setting_length(src); i++) {
            const config_setting_t *e = config_setting_get_elem(src, (unsigned)i);
            deck_copy(d, t == CONFIG_TYPE_GROUP ? config_setting_name(e) : NULL, e);
        }
    }
    return d;
}

static config_setting_t *deck_add_string(config_setting_t *parent, const char *name, const char *v) {
    config_setting_t *s = config_setting_add(parent, name, CONFIG_TYPE_STRING);
    QF_CHECK(s != NULL);
    config_setting_set_string(s, v);
    return s;
}

/* An integer literal beyond 32 bits (libconfig 1.5 would wrap it), as an int64 setting; NULL otherwise. */
static config_setting_t *deck_add_big_int(config_setting_t *parent, const char *name, const char *v) {
    long long x;
    char *end;
    const char *digits = v + (*v == '-' || *v == '+');
    int hex = digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X');
    errno = 0;
    x = strtoll(v, &end, hex ? 16 : 10);
    if (end == v || *end || (x >= INT_MIN && x <= INT_MAX)) return NULL;
    config_setting_t *s = config_setting_add(parent, name, CONFIG_TYPE_INT64);
    QF_CHECK(s != NULL);
    config_setting_set_int64(s, x);
    return s;
}

/* The value is parsed as libconfig would parse it after "name ="; a bare word (and anything for a string key
 * that is not "quoted") is taken as a string. */
static config_setting_t *deck_add_value(const qf_deck_key *k, config_setting_t *parent, const char *name,
                                        const char *v) {
    config_t t;
    config_setting_t *s = NULL;
    if (k->type == QF_KT_STRING && v[0] != '"') return deck_add_string(parent, name, v);
    char *text = qf_malloc(strlen(v) + 8);
    sprintf(text, "v = %s;", v);
    config_init(&t);
    if (config_read_string(&t, text) == CONFIG_TRUE && config_setting_length(config_root_setting(&t)) == 1) {
        const config_setting_t *p = config_setting_get_member(config_root_setting(&t), "v");
        if (config_setting_type(p) == CONFIG_TYPE_INT) s = deck_add_big_int(parent, name, v);
        if (!s) s = deck_copy(parent, name, p);
    }
    config_destroy(&t);
    free(text);
    return s ? s : deck_add_string(parent, name, v);
}

/* Finds or creates the groups of path (all but the last component); returns the innermost. */
static config_setting_t *deck_set_groups(deck_ctx *c, char *path, const char *hook, char **leaf) {
    config_setting_t *g = config_root_setting(&c->cfg);
    char *comp = path, *dot;
    while ((dot = strchr(comp, '.'))) {
        *dot = 0;
        config_setting_t *m = config_setting_get_member(g, comp);
        if (m && !config_setting_is_group(m)) {
            config_setting_remove(g, comp);
            m = NULL;
        }
        if (!m) {
            m = config_setting_add(g, comp, CONFIG_TYPE_GROUP);
            QF_CHECK(m != NULL);
            config_setting_set_hook(m, (void *)hook);
        }
        g = m;
        comp = dot + 1;
    }
    *leaf = comp;
    return g;
}

static void deck_trim(const char *s, size_t len, char *out, size_t n) {
    while (len && isspace((unsigned char)*s)) s++, len--;
    while (len && isspace((unsigned char)s[len - 1])) len--;
    if (len >= n) len = n - 1;
    memcpy(out, s, len);
    out[len] = 0;
}

/* activation_checkpointing is both qwen-ft's switch and DeepSpeed's group: one libconfig tree holds only one of
 * them, so an override that would replace the other is refused (the JSON may hold the group next to the switch). */
static int deck_set_clash(deck_ctx *c, const char *key, const char *set) {
    char prefix[DECK_KEY_MAX];
    const config_setting_t *s = config_lookup(&c->cfg, key);
    if (s && config_setting_is_group(s))
        return qf_err_set(c->e, QF_EXIT_INPUT, "--set '%s': the deck has a group '%s' (DeepSpeed's section of that name); "
                          "a deck holds the group or the value, not both (the group may go in the deepspeed JSON)",
                          set, key);
    for (const char *dot = strchr(key, '.'); dot; dot = strchr(dot + 1, '.')) {
        snprintf(prefix, sizeof prefix, "%.*s", (int)(dot - key), key);
        s = config_lookup(&c->cfg, prefix);
        if (s && !config_setting_is_group(s) && qf_deck_keys_find(prefix) >= 0)
            return qf_err_set(c->e, QF_EXIT_INPUT, "--set '%s': the deck sets '%s' as a value; a deck holds the value or "
                              "DeepSpeed's group of that name, not both (the group may go in the deepspeed JSON)",
                              set, prefix);
    }
    return 0;
}

static int deck_apply_set(deck_ctx *c, char *set) {
    char key[DECK_KEY_MAX], *leaf;
    const char *eq = strchr(set, '=');
    if (!eq) return qf_err_set(c->e, QF_EXIT_INPUT, "--set '%s': expected key.path=value", set);
    deck_trim(set, (size_t)(eq - set), key, sizeof key);
    size_t vlen = strlen(eq + 1);
    char *value = qf_malloc(vlen + 1);
    deck_trim(eq + 1, vlen, value, vlen + 1);
    int ki = qf_deck_keys_find(key);
    if (ki < 0) {
        const char *sug = qf_deck_keys_suggest(key);
        free(value);
        if (sug)
            return qf_err_set(c->e, QF_EXIT_INPUT, "--set '%s': unknown key '%s' (did you mean '%s'?)", set, key, sug);
        return qf_err_set(c->e, QF_EXIT_INPUT, "--set '%s': unknown key '%s'", set, key);
    }
    char *where = qf_malloc(strlen(set) + 16);
    sprintf(where, "--set '%s'", set);
    const char *hook = deck_hook(c, where);
    free(where);
    if (deck_set_clash(c, key, set)) return c->e->code;
    config_setting_t *g = deck_set_groups(c, key, hook, &leaf);
    if (config_setting_get_member(g, leaf)) config_setting_remove(g, leaf);
    config_setting_set_hook(deck_add_value(&c->keys[ki], g, leaf, value), (void *)hook);
    free(value);
    return 0;
}

/* ================================================================ cross-key resolution and checks */

static int deck_idx(const char *path) {
    int ki = qf_deck_keys_find(path);
    QF_CHECK(ki >= 0);
    return ki;
}

static config_setting_t *deck_src(const deck_ctx *c, const char *path) { return c->src[deck_idx(path)]; }

/* Given in the deck (or --set), and not as an "auto" that means "not given". */
static int deck_given(const deck_ctx *c, const char *path) {
    int ki = deck_idx(path);
    return c->src[ki] && !(c->autos[ki] && (c->keys[ki].flags & QF_KF_AUTO_UNSET));
}

static void deck_resolve_autos(deck_ctx *c) {
    qf_deck *d = c->d;
    for (int i = 0; i < c->nkeys; i++)
        if (c->autos[i] && (c->keys[i].flags & QF_KF_AUTO_LR)) qf_deck_keys_store_float(&c->keys[i], d, d->lr);
    if (!c->src[deck_idx("zero_optimization.overlap_comm")]) d->overlap_comm = d->zero_stage == 3; /* DeepSpeed */
    /* the global seed seeds what has no seed of its own (HF: `seed`, and `data_seed` defaults to it) */
    if (c->src[deck_idx("seed")] && !c->src[deck_idx("model.init_seed")]) d->model_init_seed = d->seed;
    if (c->src[deck_idx("seed")] && !c->src[deck_idx("data.seed")]) d->data_seed = d->seed;
}

static int deck_check_precision(const deck_ctx *c) {
    if (c->d->bf16 && c->d->fp16)
        return deck_fail(c, deck_src(c, "fp16.enabled"), "fp16.enabled",
                         "bf16.enabled and fp16.enabled are both true; enable at most one (neither = fp32)");
    return 0;
}

static int deck_check_zero(const deck_ctx *c) {
    const qf_deck *d = c->d;
    if (d->offload_optimizer == QF_OFFLOAD_CPU && d->zero_stage < 1)
        return deck_fail(c, deck_src(c, "zero_optimization.offload_optimizer.device"),
                         "zero_optimization.offload_optimizer.device",
                         "optimizer offload needs zero_optimization.stage >= 1, got stage %d", d->zero_stage);
    if (d->offload_param == QF_OFFLOAD_CPU && d->zero_stage != 3)
        return deck_fail(c, deck_src(c, "zero_optimization.offload_param.device"),
                         "zero_optimization.offload_param.device",
                         "parameter offload needs zero_optimization.stage 3, got stage %d", d->zero_stage);
    return 0;
}

static void deck_sched_names(const char *const *names, unsigned mask, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int t = 1; t < 4; t++)
        if (mask & QF_SCHED_BIT(t)) {
            snprintf(buf + len, n - len, "%s%s", len ? ", " : "", names[t]);
            len = strlen(buf);
        }
}

static int deck_check_sched(const deck_ctx *c) {
    const qf_deck *d = c->d;
    char types[128];
    const char *const *names = c->keys[deck_idx("scheduler.type")].choices;
    if (d->sched == QF_SCHED_NONE) {
        /* "none" given: the parameters are listed as having no effect (run header); no type at all: refused */
        if (deck_src(c, "scheduler.type")) return 0;
        for (int i = 0; i < c->nkeys; i++)
            if (c->keys[i].sched_mask && c->src[i])
                return deck_fail(c, c->src[i], c->keys[i].path,
                                 "given without scheduler.type, so the learning rate would stay constant: set "
                                 "scheduler.type (WarmupLR, WarmupDecayLR, WarmupCosineLR), or \"none\" to keep "
                                 "the lr constant (the header then lists the parameters as having no effect)");
        return 0;
    }
    for (int i = 0; i < c->nkeys; i++) {
        const qf_deck_key *k = &c->keys[i];
        if (!k->sched_mask || !c->src[i] || (k->sched_mask & QF_SCHED_BIT(d->sched))) continue;
        deck_sched_names(names, k->sched_mask, types, sizeof types);
        return deck_fail(c, c->src[i], k->path, "scheduler.type \"%s\" does not take it (only %s do)",
                         names[d->sched], types);
    }
    if ((d->sched == QF_SCHED_WARMUP_DECAY_LR || d->sched == QF_SCHED_WARMUP_COSINE_LR) &&
        !c->src[deck_idx("scheduler.params.total_num_steps")])
        return deck_fail(c, deck_src(c, "scheduler.type"), "scheduler.params.total_num_steps",
                         "required by scheduler.type \"%s\" (a step count, or \"auto\" for the run's total steps)",
                         names[d->sched]);
    return 0;
}

static int deck_check_run(const deck_ctx *c) {
    const qf_deck *d = c->d;
    config_setting_t *ms = deck_src(c, "max_steps");
    char where[DECK_WHERE_MAX];
    if (ms && deck_src(c, "epochs")) {
        deck_where(c, ms, where, sizeof where);
        return deck_fail(c, deck_src(c, "epochs"), "epochs",
                         "give max_steps or epochs, not both (max_steps is set at %s)", where);
    }
    if (deck_src(c, "optimizer.params.adam_w_mode") && strcmp(d->optimizer_type, "AdamW") == 0 &&
        !qf_deck_keys_get_int(&c->keys[deck_idx("optimizer.params.adam_w_mode")], d))
        return deck_fail(c, deck_src(c, "optimizer.params.adam_w_mode"), "optimizer.params.adam_w_mode",
                         "false contradicts optimizer.type \"AdamW\" (use type \"Adam\" for classic Adam with L2)");
    return 0;
}

/* ================================================================ the model the deck names */

static const char *const k_required_dims[] = {"model.vocab_size", "model.hidden_size", "model.intermediate_size",
                                              "model.num_hidden_layers", "model.num_attention_heads", NULL};

void qf_deck_resolve_auto(qf_deck *d, int64_t hidden) {
    if (d->reduce_bucket_size < 0) d->reduce_bucket_size = hidden * hidden;
    if (d->stage3_prefetch_bucket_size < 0) d->stage3_prefetch_bucket_size = (int64_t)(0.9 * (double)(hidden * hidden));
    if (d->stage3_param_persistence_threshold < 0) d->stage3_param_persistence_threshold = 10 * hidden;
}

static void deck_preset_list(char *buf, size_t n) {
    const char *const *names = qf_preset_names();
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; names[i] && len + 1 < n; i++) {
        snprintf(buf + len, n - len, "%s%s", i ? ", " : "", names[i]);
        len = strlen(buf);
    }
}

static int deck_check_preset(const deck_ctx *c) {
    qf_model_config m;
    char list[1024];
    const char *name = c->d->model_preset, *sug;
    if (qf_preset_lookup(name, &m) == 0) return 0;
    sug = qf_deck_keys_suggest_in(name, qf_preset_names());
    deck_preset_list(list, sizeof list);
    if (sug)
        return deck_fail(c, deck_src(c, "model.preset"), "model.preset",
                         "unknown preset \"%s\" (did you mean \"%s\"?); presets: %s", name, sug, list);
    return deck_fail(c, deck_src(c, "model.preset"), "model.preset", "unknown preset \"%s\"; presets: %s", name, list);
}

static int deck_check_dims(const deck_ctx *c) {
    const config_setting_t *first = NULL;
    const char *missing = NULL;
    for (int i = 0; k_required_dims[i]; i++) {
        if (!first) first = deck_src(c, k_required_dims[i]);
        if (!missing && !deck_src(c, k_required_dims[i])) missing = k_required_dims[i];
    }
    if (!first)
        return deck_fail(c, config_lookup(&c->cfg, "model"), "model.from",
                         "no model given: set model.from (HDF5 model, checkpoint or HF directory), model.preset "
                         "(random init), or the model dimensions (model.vocab_size, model.hidden_size, ...)");
    if (missing)
        return deck_fail(c, first, missing, "explicit model dimensions (no model.from or model.preset) need it too");
    return 0;
}

static int deck_check_model(const deck_ctx *c) {
    const qf_deck *d = c->d;
    qf_model_config m;
    char msg[512];
    int rc;
    if (d->model_from[0] && d->model_preset[0])
        return deck_fail(c, deck_src(c, "model.preset"), "model.preset",
                         "give model.from (weights from a file) or model.preset (random init), not both");
    if (d->model_from[0] || (!c->has_file && !d->model_preset[0] && !deck_src(c, "model.hidden_size"))) return 0;
    if (d->model_preset[0] && (rc = deck_check_preset(c)) != 0) return rc;
    if (!d->model_preset[0] && (rc = deck_check_dims(c)) != 0) return rc;
    if (qf_deck_model_config(d, &m, msg, sizeof msg) != 0)
        return deck_fail(c, config_lookup(&c->cfg, "model"), d->model_preset[0] ? "model.preset" : "model.hidden_size",
                         "the model is inconsistent: %s", msg);
    return 0;
}

/* ================================================================ the batch rule */

static void deck_batch_num(int64_t v, char *buf, size_t n) {
    if (v > 0) snprintf(buf, n, "%lld", (long long)v);
    else snprintf(buf, n, "(not given)");
}

static int deck_batch_fail(const deck_ctx *c, int64_t tb, int64_t m, int64_t a, int w, const char *why) {
    const char *key = deck_given(c, "train_batch_size") ? "train_batch_size" : "train_micro_batch_size_per_gpu";
    char sb[32], sm[32], sa[32];
    deck_batch_num(tb, sb, sizeof sb);
    deck_batch_num(m, sm, sizeof sm);
    deck_batch_num(a, sa, sizeof sa);
    return deck_fail(c, deck_src(c, key), key,
                     "%s: train_batch_size %s, train_micro_batch_size_per_gpu %s, gradient_accumulation_steps %s, "
                     "%d data-parallel ranks (rule: train_batch_size = micro x accumulation x ranks)",
                     why, sb, sm, sa, w);
}

static int deck_batch(deck_ctx *c, int w) {
    qf_deck *d = c->d;
    int gb = deck_given(c, "train_batch_size"), gm = deck_given(c, "train_micro_batch_size_per_gpu");
    int ga = deck_given(c, "gradient_accumulation_steps");
    int64_t tb = d->train_batch_size, m = gm ? d->train_micro_batch_size_per_gpu : 1;
    int64_t a = ga ? d->gradient_accumulation_steps : 1;
    if ((double)m * (double)a * w > DECK_INT_NOMAX) return deck_batch_fail(c, tb, m, a, w, "too large");
    if (!gb) tb = m * a * w;
    else if (gm && ga && tb != m * a * w) return deck_batch_fail(c, tb, m, a, w, "inconsistent");
    else if (!gm && tb % (a * w) != 0)
        return deck_batch_fail(c, tb, 0, a, w, "train_batch_size is not a multiple of accumulation x ranks");
    else if (!gm) m = tb / (a * w);
    else if (!ga && tb % (m * w) != 0)
        return deck_batch_fail(c, tb, m, 0, w, "train_batch_size is not a multiple of micro x ranks");
    else if (!ga) a = tb / (m * w);
    if (m > INT_MAX || a > INT_MAX) return deck_batch_fail(c, tb, m, a, w, "too large");
    d->train_batch_size = tb;
    d->train_micro_batch_size_per_gpu = (int)m;
    d->gradient_accumulation_steps = (int)a;
    return 0;
}

/* ================================================================ loading */

static void deck_defaults_raw(qf_deck *d) {
    int n;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    memset(d, 0, sizeof *d);
    for (int i = 0; i < n; i++) QF_CHECK(qf_deck_keys_apply_text(&k[i], d, k[i].def) == 0);
}

void qf_deck_defaults(qf_deck *d) {
    deck_defaults_raw(d);
    d->train_batch_size = 1;
    d->train_micro_batch_size_per_gpu = 1;
    d->gradient_accumulation_steps = 1;
}

static void deck_dir_of(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, n, ".");
    else if (slash == path) snprintf(dir, n, "/");
    else snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

static int deck_read(deck_ctx *c, const char *path) {
    char file[DECK_FILE_MAX];
    FILE *f = fopen(path, "r");
    if (!f) return qf_err_set(c->e, QF_EXIT_INPUT, "%s: cannot read the deck: %s", path, strerror(errno));
    fclose(f);
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
static int deck_load_ds(deck_ctx *c) {
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

static int deck_run(deck_ctx *c, const char *path, int nset, char *const *sets, int dp_world) {
    int rc = 0;
    c->cur_layer = QF_ORIGIN_DECK;
    if (c->has_file) rc = deck_read(c, path);
    for (int i = 0; !rc && i < nset; i++) rc = deck_apply_set(c, sets[i]);
    if (!rc) rc = deck_load_ds(c);
    if (!rc) rc = deck_walk(c, config_root_setting(&c->cfg), "");
    if (rc) return rc;
    deck_resolve_autos(c);
    if ((rc = deck_check_precision(c)) || (rc = deck_check_zero(c)) || (rc = deck_check_sched(c)) ||
        (rc = deck_check_run(c)) || (rc = deck_check_model(c)))
        return rc;
    if (strcmp(c->d->optimizer_type, "AdamW") == 0) c->d->adam_w_mode = 1; /* as DeepSpeed: AdamW is decoupled */
    return deck_batch(c, dp_world > 0 ? dp_world : 1);
}

int qf_deck_load(const char *path, int nset, char *const *sets, int dp_world, qf_deck *d, qf_err *e) {
    deck_ctx c;
    memset(&c, 0, sizeof c);
    deck_defaults_raw(d);
    c.has_file = path && path[0];
    c.path = c.has_file ? path : "--set";
    snprintf(c.dir, sizeof c.dir, ".");
    if (c.has_file && strlen(path) >= sizeof d->path)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: deck path too long", path);
    snprintf(d->path, sizeof d->path, "%s", c.has_file ? path : "");
    c.keys = qf_deck_keys_table(&c.nkeys);
    c.src = qf_calloc((size_t)c.nkeys, sizeof *c.src);
    c.autos = qf_calloc((size_t)c.nkeys, 1);
    c.layer = qf_calloc((size_t)c.nkeys, 1);
    c.written = qf_calloc((size_t)c.nkeys, sizeof *c.written);
    c.d = d;
    c.e = e;
    config_init(&c.cfg);
    int rc = deck_run(&c, path, nset, sets, dp_world);
    config_destroy(&c.cfg);
    if (c.has_ds) qf_ds_free(&c.ds);
    for (int i = 0; i < c.nhooks; i++) free(c.hooks[i]);
    free(c.hooks);
    free(c.src);
    free(c.autos);
    free(c.layer);
    free(c.written);
    return rc;
}

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
    case QF_KT_FLOAT: deck_print_float(qf_deck_keys_get_float(k, d), f); return;
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
        if ((k->flags & QF_KF_AUTO_SENTINEL) && v == -1) fputs("\"auto\"", f);
        else fprintf(f, "%lld%s", (long long)v, v < INT_MIN || v > INT_MAX ? "L" : "");
    }
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
