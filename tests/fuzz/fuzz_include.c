/* fuzz_include.c — the deck scan before libconfig (src/deck/deck_include.c: strings, comments, strict @include,
 * the line/size/setting caps) and libconfig's reading of what it lets through: the input up to its first NUL byte
 * is the deck, the rest the file "inc.cfg" beside it, so that an `@include "inc.cfg"` in the deck reaches real
 * included text. qf_deck_load returns 0 or exit 2 with a message that names a file. */
#include <string.h>
#include <sys/stat.h>
#include "deck/deck.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    return 0;
}

static void put(const char *path, const uint8_t *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(d, 1, n, f) != n) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static char dir[128], deck[160], inc[160];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/qwenft-fuzz-inc-%ld", (long)getpid());
        mkdir(dir, 0700);
        snprintf(deck, sizeof deck, "%s/deck.cfg", dir);
        snprintf(inc, sizeof inc, "%s/inc.cfg", dir);
    }
    const uint8_t *nul = memchr(data, 0, n);
    size_t k = nul ? (size_t)(nul - data) : n;
    put(deck, data, k);
    put(inc, nul ? nul + 1 : data, nul ? n - k - 1 : 0);
    qf_deck *d = calloc(1, sizeof *d);
    qf_err e = {0};
    int rc = qf_deck_load(deck, 0, NULL, 1, d, &e);
    if (rc != 0 && (rc != 2 || !e.msg[0])) abort(); /* bad input is exit 2 with a message */
    free(d);
    return 0;
}
