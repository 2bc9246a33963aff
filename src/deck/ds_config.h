/* ds_config.h — a DeepSpeed JSON config (ds_config.json) read as it is, into libconfig settings that the deck
 * walks like its own (`deepspeed = "ds_config.json";`, docs/deck.md "From DeepSpeed"). */
#ifndef QF_DS_CONFIG_H
#define QF_DS_CONFIG_H
#include <libconfig.h>
#include "util.h"

typedef struct qf_ds_config {
    config_t cfg;    /* objects -> groups, arrays -> lists, integers -> int64, reals -> floats, strings, booleans */
    char **where;    /* the "FILE:LINE" hook of every setting */
    int nwhere, cap;
} qf_ds_config;

/* Reads path with jansson (comments as DeepSpeed's hjson reader allows them: // # and block comments, are blanked
 * first; duplicate keys are an error). Every setting's hook is the text "path:LINE" of its key. Returns 0, or
 * QF_EXIT_INPUT with e naming path:line (and the key, for values a deck cannot hold: null, nested lists). ds is
 * initialised either way; qf_ds_free releases it. */
int qf_ds_read(const char *path, qf_ds_config *ds, qf_err *e);
void qf_ds_free(qf_ds_config *ds);

#endif
