/* ds_config.c — DeepSpeed's JSON config as libconfig settings (see ds_config.h). jansson parses and validates;
 * since it keeps no positions, one scan of the same text finds the line of every key for the messages (sorted
 * once, then found by binary search: linear-logarithmic in the keys, docs/reliability.md). The file must be a
 * regular file of at most QF_MAX_DECK_BYTES holding at most QF_MAX_DECK_SETTINGS keys and list values. */
#define _POSIX_C_SOURCE 200809L
#include "ds_config.h"
#include "out_file.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DS_DEPTH 32
#define DS_KEY_MAX 512

typedef struct ds_line {
    char *path; /* "zero_optimization.offload_param.device" */
    int line;
} ds_line;

typedef struct ds_ctx {
    qf_ds_config *ds;
    const char *file;
    ds_line *lines;
    int nlines, cap;
    qf_err *e;
} ds_ctx;

/* ---- text: comments blanked (newlines kept, so lines stay), keys located --------------------------------- */

/* Past the string that starts at p (a '"'), or at the terminating NUL. */
static char *ds_skip_string(char *p) {
    for (p++; *p && *p != '"'; p++)
        if (*p == '\\' && p[1]) p++;
    return *p ? p + 1 : p;
}

static void ds_blank_comments(char *t) {
    for (char *p = t; *p;) {
        if (*p == '"') {
            p = ds_skip_string(p);
        } else if (*p == '#' || (p[0] == '/' && p[1] == '/')) {
            while (*p && *p != '\n') *p++ = ' ';
        } else if (p[0] == '/' && p[1] == '*') {
            for (; *p && !(p[0] == '*' && p[1] == '/'); p++)
                if (*p != '\n') *p = ' ';
            if (*p) p[0] = p[1] = ' ', p += 2;
        } else {
            p++;
        }
    }
}

static void ds_add_line(ds_ctx *c, const char *path, int line) {
    if (c->nlines == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->lines = realloc(c->lines, (size_t)c->cap * sizeof *c->lines);
        QF_CHECK(c->lines != NULL);
    }
    c->lines[c->nlines].path = qf_strdup(path);
    c->lines[c->nlines++].line = line;
}

/* The path of the member key just read at depth (keys of the enclosing objects joined by '.'). */
static void ds_join(char keys[][128], int depth, char *out, size_t n) {
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < depth && len + 1 < n; i++) {
        if (!keys[i][0]) continue; /* an array level */
        size_t kl = strlen(keys[i]);
        if (len + kl + 2 > n) break;
        if (len) out[len++] = '.';
        memcpy(out + len, keys[i], kl + 1);
        len += kl;
    }
}

/* Records the line of every object key (the text is valid JSON: jansson read it first). */
static void ds_locate(ds_ctx *c, char *t) {
    char keys[DS_DEPTH][128], path[DS_KEY_MAX];
    int obj[DS_DEPTH], depth = 0, want_key = 0, line = 1;
    for (char *p = t; *p;) {
        char ch = *p;
        if (ch == '"') {
            char *end = ds_skip_string(p);
            if (want_key && depth > 0 && depth <= DS_DEPTH && obj[depth - 1]) {
                size_t n = (size_t)(end - p) - 2;
                snprintf(keys[depth - 1], sizeof keys[0], "%.*s", (int)(n < 127 ? n : 127), p + 1);
                ds_join(keys, depth, path, sizeof path);
                ds_add_line(c, path, line);
                want_key = 0;
            }
            p = end;
            continue;
        }
        if (ch == '\n') line++;
        else if (ch == '{' || ch == '[') {
            if (depth < DS_DEPTH) obj[depth] = ch == '{', keys[depth][0] = 0;
            depth++;
            want_key = ch == '{';
        } else if (ch == '}' || ch == ']') {
            depth--;
            want_key = 0;
        } else if (ch == ',') {
            want_key = depth > 0 && depth <= DS_DEPTH && obj[depth - 1];
        }
        p++;
    }
}

static int ds_line_cmp(const void *a, const void *b) {
    const ds_line *x = a, *y = b;
    int r = strcmp(x->path, y->path);
    return r ? r : (x->line > y->line) - (x->line < y->line); /* the first of equal paths (keys in arrays) first */
}

/* the line of path's first occurrence (c->lines sorted by ds_line_cmp), 1 when unknown */
static int ds_line_of(const ds_ctx *c, const char *path) {
    size_t lo = 0, hi = (size_t)c->nlines;
    while (lo < hi) { /* the first entry >= path */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(c->lines[mid].path, path) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < (size_t)c->nlines && strcmp(c->lines[lo].path, path) == 0 ? c->lines[lo].line : 1;
}

/* keys and list values of the tree: what becomes a libconfig setting */
static size_t ds_count(json_t *v) {
    size_t n = 0, i;
    const char *k;
    json_t *x;
    if (json_is_object(v)) json_object_foreach(v, k, x) n += 1 + ds_count(x);
    else if (json_is_array(v)) json_array_foreach(v, i, x) n += 1 + ds_count(x);
    return n;
}

/* ---- JSON values -> settings --------------------------------------------------------------------------- */

static const char *ds_where(ds_ctx *c, const char *path) {
    char buf[4096];
    qf_ds_config *ds = c->ds;
    snprintf(buf, sizeof buf, "%s:%d", c->file, ds_line_of(c, path));
    if (ds->nwhere == ds->cap) {
        ds->cap = ds->cap ? 2 * ds->cap : 64;
        ds->where = realloc(ds->where, (size_t)ds->cap * sizeof *ds->where);
        QF_CHECK(ds->where != NULL);
    }
    return ds->where[ds->nwhere++] = qf_strdup(buf);
}

static int ds_fail(ds_ctx *c, const char *path, const char *what) {
    return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key '%s': %s", ds_where(c, path), path, what);
}

static int ds_value(ds_ctx *c, config_setting_t *parent, const char *name, json_t *v, const char *path);

static int ds_object(ds_ctx *c, config_setting_t *g, json_t *obj, const char *prefix) {
    const char *name;
    json_t *v;
    char path[DS_KEY_MAX];
    json_object_foreach(obj, name, v) {
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", name);
        int rc = ds_value(c, g, name, v, path);
        if (rc) return rc;
    }
    return 0;
}

static int ds_scalar(config_setting_t *s, json_t *v) {
    switch (json_typeof(v)) {
    case JSON_INTEGER: return config_setting_set_int64(s, (long long)json_integer_value(v));
    case JSON_REAL: return config_setting_set_float(s, json_real_value(v));
    case JSON_TRUE:
    case JSON_FALSE: return config_setting_set_bool(s, json_is_true(v));
    case JSON_STRING: return config_setting_set_string(s, json_string_value(v));
    default: return CONFIG_FALSE;
    }
}

static int ds_type(json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return CONFIG_TYPE_GROUP;
    case JSON_ARRAY: return CONFIG_TYPE_LIST;
    case JSON_INTEGER: return CONFIG_TYPE_INT64;
    case JSON_REAL: return CONFIG_TYPE_FLOAT;
    case JSON_TRUE:
    case JSON_FALSE: return CONFIG_TYPE_BOOL;
    case JSON_STRING: return CONFIG_TYPE_STRING;
    default: return CONFIG_TYPE_NONE;
    }
}

static int ds_value(ds_ctx *c, config_setting_t *parent, const char *name, json_t *v, const char *path) {
    int t = ds_type(v);
    if (t == CONFIG_TYPE_NONE) return ds_fail(c, path, "null is not a value (give the value, or remove the key)");
    config_setting_t *s = config_setting_add(parent, name, t);
    if (!s) return ds_fail(c, path, "not a key name a deck can hold (letters, digits, '_', '-')");
    config_setting_set_hook(s, (void *)ds_where(c, path));
    if (t == CONFIG_TYPE_GROUP) return ds_object(c, s, v, path);
    if (t == CONFIG_TYPE_LIST) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            int xt = ds_type(x);
            if (xt == CONFIG_TYPE_NONE || xt == CONFIG_TYPE_GROUP || xt == CONFIG_TYPE_LIST)
                return ds_fail(c, path, "a list may hold only numbers, strings and booleans");
            config_setting_t *e = config_setting_add(s, NULL, xt);
            QF_CHECK(e != NULL && ds_scalar(e, x) == CONFIG_TRUE);
            config_setting_set_hook(e, (void *)ds_where(c, path));
        }
        return 0;
    }
    QF_CHECK(ds_scalar(s, v) == CONFIG_TRUE);
    return 0;
}

/* ---- entry points ---------------------------------------------------------------------------------------- */

int qf_ds_read(const char *path, qf_ds_config *ds, qf_err *e) {
    ds_ctx c = {.ds = ds, .file = path, .e = e};
    json_error_t je;
    size_t len = 0;
    int rc = 0;
    memset(ds, 0, sizeof *ds);
    config_init(&ds->cfg);
    char *text = qf_in_slurp("DeepSpeed config", path, QF_MAX_DECK_BYTES, &len, e); /* no FIFO, directory, device */
    if (!text) return e->code;
    ds_blank_comments(text);
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s:%d: column %d: not valid JSON: %s", path, je.line, je.column, je.text);
    else if (!json_is_object(root))
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s:1: a DeepSpeed config is a JSON object { ... }", path);
    else if (ds_count(root) > QF_MAX_DECK_SETTINGS)
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: more than %d keys and list values, the limit of a DeepSpeed config "
                        "(docs/reliability.md; DeepSpeed's own have a few dozen)", path, QF_MAX_DECK_SETTINGS);
    else {
        ds_locate(&c, text);
        if (c.nlines > 1) qsort(c.lines, (size_t)c.nlines, sizeof *c.lines, ds_line_cmp);
        rc = ds_object(&c, config_root_setting(&ds->cfg), root, "");
    }
    json_decref(root);
    free(text);
    for (int i = 0; i < c.nlines; i++) free(c.lines[i].path);
    free(c.lines);
    return rc;
}

void qf_ds_free(qf_ds_config *ds) {
    config_destroy(&ds->cfg);
    for (int i = 0; i < ds->nwhere; i++) free(ds->where[i]);
    free(ds->where);
    memset(ds, 0, sizeof *ds);
}
