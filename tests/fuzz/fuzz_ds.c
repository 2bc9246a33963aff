/* fuzz_ds.c — the DeepSpeed JSON reader (src/deck/ds_config.c: comments blanked, jansson, the one-pass key-line
 * scan, the caps, the conversion to libconfig settings): qf_ds_read on arbitrary bytes returns 0 or exit 2 with a
 * message; an accepted config's every setting has the "file:line" the messages use. */
#include <string.h>
#include "deck/ds_config.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *p = fuzz_file(data, n, ".json");
    qf_ds_config ds;
    qf_err e = {0};
    int rc = qf_ds_read(p, &ds, &e);
    if (rc != 0 && (rc != 2 || !e.msg[0])) abort();
    if (rc == 0)
        for (int i = 0; i < ds.nwhere; i++)
            if (strncmp(ds.where[i], p, strlen(p)) != 0 || ds.where[i][strlen(p)] != ':') abort();
    qf_ds_free(&ds);
    return 0;
}
