/* util.c — see util.h. No MPI here: stopping every rank is the engine's business (qf_fatal_set_hook). */
#define _POSIX_C_SOURCE 200809L
#include "util.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

/* The process-wide state of the base layer: the fatal hook, set once before any thread starts (qf_fatal_set_hook),
 * its cleanup, and the out-of-memory hook below. */
static qf_fatal_hook fatal_hook;
/* and the cleanup before it: out_file.c's removal of the temporaries, installed with the first one */
static void (*fatal_cleanup)(void);

/* and the out-of-memory hook (qf_oom_set_hook): the training run's, while its first step runs */
static qf_oom_hook oom_hook;
static void *oom_arg;

void qf_fatal_set_hook(qf_fatal_hook hook) { fatal_hook = hook; }
void qf_oom_set_hook(qf_oom_hook hook, void *arg) {
    oom_hook = hook;
    oom_arg = arg;
}
void qf_fatal_set_cleanup(void (*cleanup)(void)) { fatal_cleanup = cleanup; }

int qf_err_set(qf_err *e, int code, const char *fmt, ...) {
    if (e && e->code == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return code;
}

void qf_fatal_at(const char *file, int line, const char *fmt, ...) {
    char msg[2048], buf[2300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(buf, sizeof buf, "%s:%d: %s", file, line, msg);
    if (fatal_cleanup) fatal_cleanup(); /* the hook may stop the process (MPI_Abort) before atexit handlers run */
    if (fatal_hook) fatal_hook(buf); /* the engine's: names the rank, stops every rank */
    fprintf(stderr, "qwen-ft: %s\n", buf);
    fflush(stderr);
    exit(QF_EXIT_RUNTIME);
}

int qf_oom_rescue(const char *what, size_t bytes) {
    return oom_hook ? oom_hook(oom_arg, what, bytes) : 0; /* the hook may not return (longjmp) */
}

void qf_host_hugepages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    if (!p || bytes < ((size_t)64 << 20)) return;
    const uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_HUGEPAGE); /* advice: refused or ignored, nothing changes */
#else
    (void)p, (void)bytes;
#endif
}

void *qf_malloc_at(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) qf_fatal_at(file, line, "out of host memory allocating %zu bytes", n);
    return p;
}
void *qf_calloc_at(size_t n, size_t sz, const char *file, int line) {
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) qf_fatal_at(file, line, "out of host memory allocating %zu x %zu bytes", n, sz);
    return p;
}
void *qf_realloc_at(void *q, size_t n, const char *file, int line) {
    void *p = realloc(q, n ? n : 1);
    if (!p) qf_fatal_at(file, line, "out of host memory reallocating %zu bytes", n);
    return p;
}
char *qf_strdup_at(const char *s, const char *file, int line) {
    size_t n = strlen(s) + 1;
    char *p = qf_malloc_at(n, file, line);
    memcpy(p, s, n);
    return p;
}

double qf_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int qf_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    int *row = qf_malloc((lb + 1) * sizeof *row);
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int prev = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int cur = row[j];
            int sub = prev + (a[i - 1] != b[j - 1]);
            int del = row[j] + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            prev = cur;
        }
    }
    int d = row[lb];
    free(row);
    return d;
}

long long qf_getline_max(char **line, size_t *cap, FILE *f, size_t max) {
    size_t n = 0;
    int c = EOF;
    flockfile(f);
    while ((c = getc_unlocked(f)) != EOF) {
        if (n + 2 > *cap) {
            size_t nc = *cap ? 2 * *cap : 4096;
            if (nc > max + 2) nc = max + 2;
            if (n + 2 > nc) { /* the line is longer than max */
                funlockfile(f);
                return -2;
            }
            *line = qf_realloc(*line, nc);
            *cap = nc;
        }
        (*line)[n++] = (char)c;
        if (c == '\n') break;
    }
    funlockfile(f);
    if (n == 0 && c == EOF) return -1;
    (*line)[n] = 0;
    return (long long)n;
}

void qf_flush_or_die_at(FILE *f, const char *what, const char *file, int line) {
    int before = errno; /* a write just before (a buffered record) may have failed already and said why */
    errno = 0;
    if (fflush(f) == 0 && !ferror(f)) return;
    int why = errno ? errno : before;
    qf_fatal_at(file, line, "%s: writing failed: %s (disk full or quota?); the last checkpoint is intact", what,
                why ? strerror(why) : "I/O error");
}

int qf_mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
            buf[i] = c;
        }
    }
    return 0;
}

int qf_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

double qf_float_widen(float f) {
    char buf[40];
    if (!isfinite(f)) return (double)f;
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}
