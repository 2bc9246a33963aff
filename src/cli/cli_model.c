/* cli_model.c — the model that a command's --model option names (generate, serve): preset:NAME, a published
 * architecture randomly initialised (benchmarks), or a model source read for its config alone (commands.h). */
#include <string.h>
#include "commands.h"
#include "store/model_io.h"

int qf_cli_model_config(const char *cmd, const char *model, qf_model_config *c, char *resolved, size_t cap,
                        qf_err *e) {
    if (!strncmp(model, "preset:", 7)) {
        if (qf_preset_lookup(model + 7, c) == 0) return 0;
        return qf_err_set(e, QF_EXIT_INPUT, "%s: --model %s: unknown preset (qwen-ft's presets: docs/deck.md)", cmd,
                          model);
    }
    return qf_model_source_config(model, c, resolved, cap, e);
}
