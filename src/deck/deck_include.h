/* deck_include.h — checks a deck's @include lines before libconfig reads it (docs/deck.md "@include"): libconfig
 * 1.5 reports an included directory as "input in flex scanner failed" with no file or line, a missing file
 * without its name, and reads an absolute path as relative. */
#ifndef QF_DECK_INCLUDE_H
#define QF_DECK_INCLUDE_H
#include "util.h"

/* Every `@include "F"` of the deck at path (and of the files it includes, to 16 levels) must name a readable
 * regular file relative to dir (libconfig's include directory: the deck's). 0, or exit 2 naming the file, the
 * line, the include and what is wrong with it. */
int qf_deck_includes_check(const char *path, const char *dir, qf_err *e);

#endif
