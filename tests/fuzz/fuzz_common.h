/* fuzz_common.h — shared by the libFuzzer targets in tests/fuzz (built with -DQWENFT_FUZZ=ON, clang): the input
 * is written to a file of the target's own (every reader under test takes a path, as the binary does), and stdout/
 * stderr of the code under test go to /dev/null so that a run prints only libFuzzer's own lines; a reader that
 * refuses an input must say exit code 2 (fuzz_refused). */
#ifndef QF_FUZZ_COMMON_H
#define QF_FUZZ_COMMON_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "util.h"

/* Writes data to a per-process file with the given suffix; returns its path (static storage). */
static const char *fuzz_file(const uint8_t *data, size_t n, const char *suffix) {
    static char path[256];
    snprintf(path, sizeof path, "/tmp/qwenft-fuzz-%ld%s", (long)getpid(), suffix);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
    return path;
}

/* 1 when the reader refused the input (rc != 0), which must be bad input (exit code 2 in e), else abort(). */
static inline int fuzz_refused(int rc, const qf_err *e) {
    if (rc != 0 && e->code != 2) abort();
    return rc != 0;
}

static void fuzz_quiet(void) {
    if (!getenv("QWENFT_FUZZ_VERBOSE")) {
        if (!freopen("/dev/null", "w", stdout)) abort();
    }
}
#endif
