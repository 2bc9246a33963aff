/* deck_include.c — see deck_include.h. One linear pass per file: strings, comments (#, //, / * * /) and line
 * ends are tracked so that an `@include` is recognised only where libconfig would take it (first on its line, not
 * in a comment or string), and `=`/`:` outside them count the settings. */
#include "deck_include.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "out_file.h"

#define INCLUDE_DEPTH_MAX 16

typedef struct scan_state {
    long settings; /* of every file so far */
} scan_state;

static int scan_file(const char *path, const char *what, const char *dir, int depth, scan_state *st, qf_err *e);

/* The @include at s (line lineno of path, line ends at eol): strict, `@include "F"` then only blanks or a
 * comment; F checked and scanned in turn. */
static int scan_include(const char *path, long lineno, const char *s, const char *eol, const char *dir, int depth,
                        scan_state *st, qf_err *e) {
    const char *p = s + 8; /* past "@include" */
    if (p < eol && *p != ' ' && *p != '\t' && *p != '"')
        return 0; /* "@includes": not libconfig's directive; its parser reports the syntax error with the line */
    while (p < eol && (*p == ' ' || *p == '\t')) p++;
    if (p >= eol || *p != '"')
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: malformed @include: expected @include \"FILE\" (a quoted file "
                          "name on the same line)", path, lineno);
    const char *q = memchr(p + 1, '"', (size_t)(eol - p - 1));
    if (!q)
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: unterminated @include: the file name has no closing '\"' on its "
                          "line (libconfig would ignore the include, and its keys would never apply)", path, lineno);
    if (q == p + 1) return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: @include \"\": an empty file name", path, lineno);
    const char *r = q + 1;
    while (r < eol && (*r == ' ' || *r == '\t' || *r == '\r')) r++;
    if (r < eol && *r != '#' && !(r + 1 < eol && r[0] == '/' && (r[1] == '/' || r[1] == '*')))
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: malformed @include: \"%.*s\" after the file name (an @include "
                          "takes its own line)", path, lineno, (int)(eol - r > 40 ? 40 : eol - r), r);
    char name[1024], full[2200];
    if ((size_t)(q - p - 1) >= sizeof name)
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: @include: the file name is too long", path, lineno);
    snprintf(name, sizeof name, "%.*s", (int)(q - p - 1), p + 1);
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
    qf_err sub = {0};
    if (scan_file(full, "included deck file", dir, depth + 1, st, &sub) == 0) return 0;
    if (strncmp(sub.msg, full, strlen(full)) == 0 && sub.msg[strlen(full)] == ':') /* names the included file */
        return qf_err_set(e, sub.code, "%s (included at %s:%ld)", sub.msg, path, lineno);
    return qf_err_set(e, sub.code, "%s:%ld: @include \"%s\": %s", path, lineno, name, sub.msg);
}

int qf_deck_scan_text(const char *path, const char *t, size_t len, const char *dir, int depth, long *settings,
                      qf_err *e) {
    scan_state st = {*settings};
    long lineno = 1;
    size_t line_start = 0;
    int line_blank = 1; /* only blanks so far on this line (outside a block comment) */
    for (size_t i = 0; i <= len; i++) {
        char ch = i < len ? t[i] : '\n';
        if (ch == '\n') {
            if (i - line_start > QF_MAX_DECK_LINE) goto too_long;
            lineno++, line_start = i + 1, line_blank = 1;
            continue;
        }
        if (i - line_start > QF_MAX_DECK_LINE) goto too_long;
        if (ch == ' ' || ch == '\t' || ch == '\r') continue;
        if (ch == '#' || (ch == '/' && i + 1 < len && t[i + 1] == '/')) { /* to the end of the line */
            const char *nl = memchr(t + i, '\n', len - i);
            i = (nl ? (size_t)(nl - t) : len) - 1;
            if (i + 1 - line_start > QF_MAX_DECK_LINE) goto too_long;
            continue;
        }
        if (ch == '/' && i + 1 < len && t[i + 1] == '*') { /* block comment: its lines count, the limit applies */
            for (i += 2; i < len && !(t[i] == '*' && i + 1 < len && t[i + 1] == '/'); i++)
                if (t[i] == '\n') {
                    if (i - line_start > QF_MAX_DECK_LINE) goto too_long;
                    lineno++, line_start = i + 1;
                }
            i++; /* on the closing '/' (or past the end: an unclosed comment is libconfig's syntax error) */
            line_blank = 0;
            continue;
        }
        if (ch == '"') { /* a string, escapes included; a newline inside it still ends a line */
            for (i++; i < len && t[i] != '"'; i++) {
                if (t[i] == '\\' && i + 1 < len && t[i + 1] != '\n') i++;
                else if (t[i] == '\n') {
                    if (i - line_start > QF_MAX_DECK_LINE) goto too_long;
                    lineno++, line_start = i + 1;
                }
            }
            line_blank = 0;
            continue;
        }
        if (ch == '@' && line_blank && len - i >= 8 && memcmp(t + i, "@include", 8) == 0) {
            const char *nl = memchr(t + i, '\n', len - i);
            const char *eol = nl ? nl : t + len;
            if (scan_include(path, lineno, t + i, eol, dir, depth, &st, e)) return e->code;
            i = (size_t)(eol - t) - 1;
            if (i + 1 - line_start > QF_MAX_DECK_LINE) goto too_long;
            continue;
        }
        line_blank = 0;
        if ((ch == '=' || ch == ':') && ++st.settings > QF_MAX_DECK_SETTINGS)
            return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: more than %d settings in the deck and its includes, the limit "
                              "of a deck (docs/reliability.md; every key of docs/deck.md is a few hundred)", path,
                              lineno, QF_MAX_DECK_SETTINGS);
    }
    *settings = st.settings;
    return 0;
too_long:
    return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: a line longer than %zu bytes, the limit of a deck line "
                      "(docs/reliability.md)", path, lineno, QF_MAX_DECK_LINE);
}

static int scan_file(const char *path, const char *what, const char *dir, int depth, scan_state *st, qf_err *e) {
    size_t len = 0;
    char *t = qf_in_slurp(what, path, QF_MAX_DECK_BYTES, &len, e); /* a FIFO, directory or device: refused */
    if (!t) return e->code;
    int rc = qf_deck_scan_text(path, t, len, dir, depth, &st->settings, e);
    free(t);
    return rc;
}

int qf_deck_includes_check(const char *path, const char *dir, qf_err *e) {
    scan_state st = {0};
    return scan_file(path, "deck", dir, 0, &st, e);
}
