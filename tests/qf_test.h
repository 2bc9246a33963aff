/* qf_test.h — what the C tests share: CHECK(cond[, printf-style message]) counts checks and failures and names
 * file:line and the condition of a failed one; qf_test_expect_msg checks an error message; qf_test_write/
 * qf_test_write_text make scratch files, qf_test_mkdtemp and qf_test_mkdir_pid a scratch directory; qf_test_end
 * and qf_test_verdict end a test program. A test program is one translation unit, so this state is the program's
 * own; main returns qf_test_failures != 0. */
#ifndef QF_TEST_H
#define QF_TEST_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* One check that a call failed as expected: ok says that its exit code was right, and every needle of the
 * NULL-terminated list ap must be in msg (each one missing is named). A failure prints label, rc and msg; with
 * QF_TEST_VERBOSE set, a pass prints label (padded to width) and msg. The caller owns ap (va_start, va_end). */
static inline void qf_test_expect_msg(const char *label, int width, int ok, int rc, const char *msg, va_list ap) {
    for (const char *needle; (needle = va_arg(ap, const char *));)
        if (!strstr(msg, needle)) {
            fprintf(stderr, "%s: message lacks \"%s\"\n", label, needle);
            ok = 0;
        }
    qf_test_checks++;
    if (!ok) {
        qf_test_failures++;
        fprintf(stderr, "FAIL %s: rc=%d msg=\"%s\"\n", label, rc, msg);
    } else if (getenv("QF_TEST_VERBOSE"))
        printf("%-*s %s\n", width, label, msg);
}

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

/* A fresh scratch directory from tmpl (mkdtemp's "/tmp/NAME.XXXXXX") in dir (cap bytes): 0, or -1 after perror. */
static inline int qf_test_mkdtemp(char *dir, size_t cap, const char *tmpl) {
    snprintf(dir, cap, "%s", tmpl);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

/* The scratch directory "PREFIX-PID" (this process's id) made in dir (cap bytes): 0, or -1 after perror. */
static inline int qf_test_mkdir_pid(char *dir, size_t cap, const char *prefix) {
    snprintf(dir, cap, "%s-%d", prefix, (int)getpid());
    if (mkdir(dir, 0755) != 0) {
        perror(dir);
        return -1;
    }
    return 0;
}

/* The end of a test program: with every check passed, removes the scratch directory dir (NULL: none) and prints
 * "NAME: all checks passed"; else says "NAME: N check(s) failed" on stderr, with "(files kept in DIR)". Returns
 * main's exit code. */
static inline int qf_test_end(const char *name, const char *dir) {
    if (!qf_test_failures) {
        if (dir) qf_test_remove_dir(dir);
        printf("%s: all checks passed\n", name);
        return 0;
    }
    fprintf(stderr, "%s: %d check(s) failed", name, qf_test_failures);
    if (dir) fprintf(stderr, " (files kept in %s)", dir);
    fprintf(stderr, "\n");
    return 1;
}

/* The same in the other summary form: with no failure removes dir; prints "LABEL: ok (0 failures)" or
 * "LABEL: FAIL (N failures)" on stdout; returns main's exit code. failures: this program's, or all ranks'. */
static inline int qf_test_verdict(const char *label, int failures, const char *dir) {
    if (failures == 0) qf_test_remove_dir(dir);
    printf("%s: %s (%d failures)\n", label, failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}

#endif
