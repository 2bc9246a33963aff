/* deck_include.h — scans a deck and its @include files before libconfig reads them (docs/deck.md "@include",
 * docs/reliability.md): libconfig 1.5 reports an included directory as "input in flex scanner failed" with no file
 * or line, a missing file without its name, reads an absolute path as relative, silently ignores an unterminated
 * `@include "x.cfg` on the last line, blocks on a FIFO, and is quadratic in a long line and in a big group. The
 * scan is linear and refuses (exit 2, file and line) what libconfig would get wrong or take seconds over. */
#ifndef QF_DECK_INCLUDE_H
#define QF_DECK_INCLUDE_H
#include "util.h"

/* The deck at path and every file it includes (to 16 levels): each a regular file of at most QF_MAX_DECK_BYTES with
 * lines of at most QF_MAX_DECK_LINE bytes, QF_MAX_DECK_SETTINGS settings in all; every `@include "F"` strict (a
 * quoted name closed on its line, nothing after it but a comment) and naming a readable regular file relative to
 * dir (libconfig's include directory: the deck's). 0, or exit 2 naming the file, the line and what is wrong. */
int qf_deck_includes_check(const char *path, const char *dir, qf_err *e);
/* The same on text already in memory (len bytes, named path in messages; the fuzz target's entry); *settings is
 * the count so far, updated. */
int qf_deck_scan_text(const char *path, const char *text, size_t len, const char *dir, int depth, long *settings,
                      qf_err *e);

#endif
