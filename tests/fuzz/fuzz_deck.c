/* fuzz_deck.c — the deck parser (libconfig + the key table + every consistency check): qf_deck_load on arbitrary
 * bytes must return 0 or exit code 2 with a message, never crash. */
#include <string.h>
#include "deck/deck.h"
#include "fuzz_common.h"
#include "model_config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *p = fuzz_file(data, n, ".cfg");
    qf_deck *d = calloc(1, sizeof *d);
    qf_err e = {0};
    int rc = qf_deck_load(p, 0, NULL, 1, d, &e);
    if (rc != 0 && (rc != 2 || !e.msg[0])) abort(); /* bad input is exit 2 with a message */
    if (rc == 0) {
        qf_model_config c;
        char msg[512];
        memset(&c, 0, sizeof c);
        if (!d->model_from[0]) (void)qf_deck_model_config(d, &c, msg, sizeof msg);
    }
    free(d);
    return 0;
}
