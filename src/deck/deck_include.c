/* deck_include.c — see deck_include.h. */
#include "deck_include.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INCLUDE_DEPTH_MAX 16

static int check_file(const char *path, const char *dir, int depth, qf_err *e);

/* One line: 0 when it is no @include or a good one (then checked recursively). */
static int check_line(const char *path, long lineno, const char *s, const char *dir, int depth, qf_err *e) {
    while (*s == ' ' || *s == '\t') s++;
    if (strncmp(s, "@include", 8) != 0) return 0;
    const char *q = strchr(s + 8, '"'), *end = q ? strchr(q + 1, '"') : NULL;
    if (!q || !end) return 0; /* malformed: libconfig reports it with its line */
    char name[1024], full[2200];
    snprintf(name, sizeof name, "%.*s", (int)(end - q - 1), q + 1);
    if (name[0] == '/')
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: @include \"%s\": absolute paths are not supported (libconfig reads "
                          "every @include relative to the deck's directory %s); write it relative to that directory",
                          path, lineno, name, dir);
    snprintf(full, sizeof full, "%s/%s", dir, name);
    struct stat sb;
    if (stat(full, &sb) != 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: @include \"%s\": %s (looked for %s; @include paths are relative to "
                          "the deck's directory)", path, lineno, name, strerror(errno), full);
    if (S_ISDIR(sb.st_mode))
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: @include \"%s\": %s is a directory, not a deck file", path, lineno,
                          name, full);
    if (access(full, R_OK) != 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: @include \"%s\": cannot read %s: %s", path, lineno, name, full,
                          strerror(errno));
    if (depth + 1 >= INCLUDE_DEPTH_MAX)
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: @include \"%s\": includes nested deeper than %d (a cycle?)", path,
                          lineno, name, INCLUDE_DEPTH_MAX);
    return check_file(full, dir, depth + 1, e);
}

static int check_file(const char *path, const char *dir, int depth, qf_err *e) {
    FILE *f = fopen(path, "r");
    if (!f) return 0; /* the caller's open reports it */
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    long long n;
    int rc = 0;
    while (!rc && (n = qf_getline_max(&line, &cap, f, QF_MAX_LINE_BYTES)) != -1) {
        lineno++;
        if (n == -2) break; /* libconfig reads it; nothing of ours to check on such a line */
        rc = check_line(path, lineno, line, dir, depth, e);
    }
    free(line);
    fclose(f);
    return rc;
}

int qf_deck_includes_check(const char *path, const char *dir, qf_err *e) { return check_file(path, dir, 0, e); }
