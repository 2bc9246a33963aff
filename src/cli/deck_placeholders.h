/* deck_placeholders.h — what `qwen-ft deck --from-ds` adds for the keys a DeepSpeed JSON lacks (deck_placeholders.c). */
#ifndef QF_DECK_PLACEHOLDERS_H
#define QF_DECK_PLACEHOLDERS_H
#include <libconfig.h>
#include <stdio.h>
#include "deck/deck.h"

/* After the translated keys: the HF Trainer's defaults for an optimizer, scheduler and micro batch the JSON lacks
 * (as keys, so the translation resolves to the same deck as `deepspeed = "JSON";`), each with a comment, and
 * commented placeholders for run length. d is the JSON loaded as a deck on one rank. */
void qf_deck_put_placeholders(const char *json, const config_setting_t *root, const qf_deck *d, FILE *f);

/* The data group: train/valid when given, with a data.seq_len that packs train (when it is a readable dataset) into
 * at least one batch of d (seq_len halved from d's until it does, with a comment saying why); a commented
 * placeholder without train. */
void qf_deck_put_data(const char *train, const char *valid, const qf_deck *d, FILE *f);

/* A path given on the command line (relative to the working directory) as the deck written to out reads it (relative
 * to out's directory, docs/deck.md "Paths"): p itself when out is NULL or in the working directory, or p is absolute
 * or NULL; else the absolute path, in buf. */
const char *qf_deck_path_for_out(const char *out, const char *p, char *buf, size_t n);

#endif
