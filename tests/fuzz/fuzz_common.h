/* fuzz_common.h — shared by the libFuzzer targets in tests/fuzz (built with -DQWENFT_FUZZ=ON, clang): the input
 * is written to a file of the target's own (every reader under test takes a path, as the binary does), and stdout/
 * stderr of the code under test go to /dev/null so that a run prints only libFuzzer's own lines. */
#ifndef QF_FUZZ_COMMON_H
#define QF_FUZZ_COMMON_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

static void fuzz_quiet(void) {
    if (!getenv("QWENFT_FUZZ_VERBOSE")) {
        if (!freopen("/dev/null", "w", stdout)) abort();
    }
}
#endif
