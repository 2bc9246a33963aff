/* qf_test.h — what the C tests share: CHECK(cond[, printf-style message]) counts checks and failures and names
 * file:line and the condition of a failed one; qf_test_write/qf_test_write_text make scratch files. A test program
 * is one translation unit, so this state is the program's own; main returns qf_test_failures != 0. */
#ifndef QF_TEST_H
#define QF_TEST_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int qf_test_failures, qf_test_checks;

static inline void qf_test_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    fprintf(stderr, "FAIL %s:%d: %s", file, line, cond);
    if (fmt[0]) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, ": ");
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fprintf(stderr, "\n");
    qf_test_failures++;
}

#define QF_TEST_CHECK_(cond, ...)                                                   \
    do {                                                                            \
        qf_test_checks++;                                                           \
        if (!(cond)) qf_test_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);          \
    } while (0)
#define CHECK(...) QF_TEST_CHECK_(__VA_ARGS__, "")

/* Writes n bytes to path; a file that cannot be written stops the test program. */
static inline void qf_test_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (n) fwrite(data, 1, n, f);
    if (fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}
static inline void qf_test_write_text(const char *path, const char *text) { qf_test_write(path, text, strlen(text)); }

/* Removes the scratch directory dir (rm -rf) unless QF_KEEP is set; callers do it when no check failed. */
static inline void qf_test_remove_dir(const char *dir) {
    if (getenv("QF_KEEP")) return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

#endif
