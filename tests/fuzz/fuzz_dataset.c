/* fuzz_dataset.c — the packed-dataset validator: qf_dataset_open on arbitrary bytes (seeded with real datasets,
 * so that mutations reach the attribute and dataset checks) returns 0 or exit 2; an accepted file is scanned
 * whole (qf_dataset_scan) and its first row read. HDF5 itself is not instrumented: a crash inside libhdf5 is
 * reported by libFuzzer like any other and is listed in docs/reliability.md. */
#include <hdf5.h>
#include "dataset.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *p = fuzz_file(data, n, ".h5");
    qf_dataset ds;
    qf_err e = {0};
    if (fuzz_refused(qf_dataset_open(p, &ds, &e), &e)) return 0;
    if (ds.n_tokens <= (1 << 22)) {
        qf_dataset_scan_result r;
        qf_err se = {0};
        (void)qf_dataset_scan(&ds, 0, ds.n_tokens, &r, &se);
    }
    qf_dataset_close(&ds);
    return 0;
}
