/* deck_set.c — --set overrides ("key.path=value"): each goes into the deck's libconfig tree before it is walked,
 * as libconfig would parse the value after "name =" (a bare word is a string), the groups of its path created as
 * needed; a setting it creates carries the hook "--set '...'" that deck_where prints in place of FILE:LINE. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "deck_impl.h"

/* Keeps a "where" text for settings that have no place in the deck file; returns it (owned by c). */
static const char *deck_hook(deck_ctx *c, const char *text) {
    c->hooks = realloc(c->hooks, (size_t)(c->nhooks + 1) * sizeof *c->hooks);
    QF_CHECK(c->hooks != NULL);
    return c->hooks[c->nhooks++] = qf_strdup(text);
}

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

/* Keys that exclude each other (deck_check.c refuses a deck with both): an override of one replaces the other, as
 * "every key can be overridden" promises (--set max_steps=100 on a deck with epochs). */
static void deck_set_replace(deck_ctx *c, const char *key) {
    static const char *const pairs[][2] = {{"max_steps", "epochs"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        for (int j = 0; j < 2; j++) {
            if (strcmp(key, pairs[i][j]) != 0) continue;
            const char *other = pairs[i][1 - j], *dot = strrchr(other, '.');
            char group[DECK_KEY_MAX];
            snprintf(group, sizeof group, "%.*s", dot ? (int)(dot - other) : 0, other);
            config_setting_t *g = dot ? config_lookup(&c->cfg, group) : config_root_setting(&c->cfg);
            if (g && config_setting_is_group(g) && config_setting_get_member(g, dot ? dot + 1 : other))
                config_setting_remove(g, dot ? dot + 1 : other);
        }
}

int deck_apply_set(deck_ctx *c, char *set) {
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
    char whole[DECK_KEY_MAX];
    snprintf(whole, sizeof whole, "%s", key); /* deck_set_groups cuts key at its dots */
    config_setting_t *g = deck_set_groups(c, key, hook, &leaf);
    if (config_setting_get_member(g, leaf)) config_setting_remove(g, leaf);
    config_setting_set_hook(deck_add_value(&c->keys[ki], g, leaf, value), (void *)hook);
    deck_set_replace(c, whole);
    free(value);
    return 0;
}
