/* run_paths.c — the input paths of a deck checked before they are opened, so that a missing file is named with the
 * deck's file and line (deck_paths.c keeps where each path key came from). */
#include <stdio.h>
#include <string.h>
#include "run.h"

int qf_run_check_path(const qf_deck *d, const char *key, const char *value, qf_err *e) {
    if (!value[0] || qf_exists(value)) return 0;
    const char *where = qf_deck_path_where(d, key);
    int from_set = strncmp(where, "--set", 5) == 0;
    return qf_err_set(e, QF_EXIT_INPUT, "%s: key '%s': %s does not exist (%s)", where, key, value,
                      from_set ? "--set paths are relative to the working directory"
                               : "a deck's relative paths are relative to the deck's directory");
}
