/* deck_paths.c — one rule for the deck's paths: a relative path in the deck (or in its DeepSpeed JSON, or an
 * @include) is relative to the deck file's directory, as `deepspeed` and `@include` already are (DeepSpeed's and
 * HPC codes' habit: a deck and its data travel together); a path given with --set is relative to the working
 * directory, as command-line paths are; the defaults (checkpoint.dir "ckpt", log.dir "logs") are the deck's
 * directory's. Where each path key came from ("run.cfg:7", "--set '...'") is kept in qf_deck.path_where so that an
 * error about the file names the deck's file and line (qf_deck_path_where). */
#include <stdio.h>
#include <string.h>
#include "deck_impl.h"

static const char *const k_path_keys[QF_DECK_PATH_KEYS + 2] = {
    "model.from", "data.train", "data.valid", "checkpoint.dir", "log.dir", "tensorboard.output_path", "model.preset", NULL};

const char *const *qf_deck_path_keys(void) { return k_path_keys; }

const char *qf_deck_path_where(const qf_deck *d, const char *key) {
    for (int i = 0; k_path_keys[i]; i++)
        if (!strcmp(k_path_keys[i], key)) return d->path_where[i][0] ? d->path_where[i] : d->path;
    return d->path;
}

int deck_resolve_paths(deck_ctx *c) {
    qf_deck *d = c->d;
    for (int i = 0; i < QF_DECK_PATH_KEYS + 1; i++) {
        int ki = deck_idx(k_path_keys[i]);
        const qf_deck_key *k = &c->keys[ki];
        config_setting_t *s = c->src[ki];
        const char *v = qf_deck_keys_get_string(k, d);
        char joined[2 * QF_PATH_MAX + 8];
        if (s) deck_where(c, s, d->path_where[i], sizeof d->path_where[i]);
        else snprintf(d->path_where[i], sizeof d->path_where[i], "%s (default of %s)", c->path, k->path);
        if (i == QF_DECK_PATH_KEYS) continue; /* model.preset: a name, kept for its where */
        if (!c->has_file || !v[0] || v[0] == '/' || strcmp(c->dir, ".") == 0) continue;
        if (s && c->layer[ki] == QF_ORIGIN_SET) continue;
        snprintf(joined, sizeof joined, "%s/%s", c->dir, v);
        if (qf_deck_keys_store_string(k, d, joined) != 0)
            return deck_fail(c, s, k->path, "the path relative to the deck's directory, %s, is too long (%zu bytes)",
                             joined, strlen(joined));
    }
    return 0;
}
