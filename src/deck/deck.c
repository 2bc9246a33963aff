/* deck.c — loads the input deck (libconfig) into qf_deck, driven by the key table in deck_keys.c. Order of work in
 * qf_deck_load: defaults, read the file (with @include relative to the deck's directory), apply --set overrides to
 * the libconfig tree, walk every setting (unknown keys, types, ranges, enum values; the DeepSpeed JSON of
 * `deepspeed` first), resolve "auto" values that depend on other keys, cross-key checks, then the batch rule.
 * The parts are in deck_impl.h: deck_parse.c, deck_set.c, deck_check.c, deck_msg.c; printing is deck_print.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "deck_impl.h"

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

static int deck_run(deck_ctx *c, const char *path, int nset, char *const *sets, int dp_world) {
    int rc = 0;
    c->cur_layer = QF_ORIGIN_DECK;
    if (c->has_file) rc = deck_read(c, path);
    for (int i = 0; !rc && i < nset; i++) rc = deck_apply_set(c, sets[i]);
    if (!rc) rc = deck_load_ds(c);
    if (!rc) rc = deck_walk(c, config_root_setting(&c->cfg), "");
    if (rc) return rc;
    return deck_resolve(c, dp_world);
}

static void deck_ctx_free(deck_ctx *c) {
    config_destroy(&c->cfg);
    if (c->has_ds) qf_ds_free(&c->ds);
    for (int i = 0; i < c->nhooks; i++) free(c->hooks[i]);
    free(c->hooks);
    free(c->src);
    free(c->autos);
    free(c->layer);
    free(c->written);
    deck_lines_free(c->texts);
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
    c.texts = deck_lines_new();
    config_init(&c.cfg);
    int rc = deck_run(&c, path, nset, sets, dp_world);
    deck_ctx_free(&c);
    return rc;
}
