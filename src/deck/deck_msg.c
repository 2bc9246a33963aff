/* deck_msg.c — where a setting of the deck is ("FILE:LINE" relative to the deck's directory, "--set 'a.b=v'",
 * "ds_config.json:12") and the messages that name it: "WHERE: key 'KEY': MSG", exit code 2; what a key accepts,
 * in words ("an integer in 0..3", "one of \"none\", \"cpu\""), for those messages and the markdown key table. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "deck_impl.h"

void deck_file_of(const deck_ctx *c, const char *file, char *buf, size_t n) {
    if (!file) file = c->path;
    if (strcmp(file, c->path) == 0 || file[0] == '/' || strcmp(c->dir, ".") == 0)
        snprintf(buf, n, "%s", file);
    else
        snprintf(buf, n, "%s/%s", c->dir, file);
}

/* "FILE:LINE", or "--set 'a.b=v'" for a setting an override created. */
void deck_where(const deck_ctx *c, const config_setting_t *s, char *buf, size_t n) {
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

int deck_fail(const deck_ctx *c, const config_setting_t *s, const char *key, const char *fmt, ...) {
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

void deck_range_text(const qf_deck_key *k, char *buf, size_t n) {
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

void deck_choices_text(const qf_deck_key *k, char *buf, size_t n) {
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
                 k->autov && qf_deck_keys_choice(k, "auto") < 0 ? " or \"auto\"" : "");
        return;
    }
    snprintf(buf, n, "%s%s%s", what, range, k->autov ? " or \"auto\"" : "");
}

/* The value of a setting, in words, for "got ...". */
void deck_got(const config_setting_t *s, char *buf, size_t n) {
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

int deck_bad(const deck_ctx *c, const qf_deck_key *k, const config_setting_t *s, const char *got) {
    char expect[768], gotbuf[512];
    deck_expect(k, expect, sizeof expect);
    if (!got) {
        deck_got(s, gotbuf, sizeof gotbuf);
        got = gotbuf;
    }
    return deck_fail(c, s, k->path, "expected %s, got %s", expect, got);
}

int deck_bad_num(const deck_ctx *c, const qf_deck_key *k, const config_setting_t *s, double v) {
    char got[64];
    deck_num(v, got, sizeof got);
    return deck_bad(c, k, s, got);
}

int deck_bad_choice(const deck_ctx *c, const qf_deck_key *k, const config_setting_t *s) {
    char expect[768];
    const char *v = config_setting_get_string(s);
    const char *sug = qf_deck_keys_suggest_in(v, k->choices);
    deck_expect(k, expect, sizeof expect);
    if (sug) return deck_fail(c, s, k->path, "expected %s, got \"%s\" (did you mean \"%s\"?)", expect, v, sug);
    return deck_fail(c, s, k->path, "expected %s, got \"%s\"", expect, v);
}
