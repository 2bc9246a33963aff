/* fuzz_jsonl.c — the JSONL record parser of `qwen-ft prepare` (pre-tokenized, text and chat records, with the
 * fixture tokenizer): `prepare` on arbitrary bytes must exit 0 or 2, never crash or hang (its output file is
 * removed after each input). */
#include <mpi.h>
#include <string.h>
#include "cli/commands.h"
#include "fuzz_common.h"

static char tok[1024];

/* Open MPI keeps what MPI_Init allocated until exit, in components it has unloaded by then (no symbols to
 * suppress): leaks are checked per input by libFuzzer, not once more at exit. */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "leak_check_at_exit=0"; }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    MPI_Init(argc, argv); /* prepare is an MPI command (N ranks split the input) */
    fuzz_quiet();
    const char *src = getenv("QWENFT_SRC");
    snprintf(tok, sizeof tok, "%s/tests/reference/fixtures/tokenizer/tokenizer.json", src ? src : ".");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *p = fuzz_file(data, n, ".jsonl");
    char in[300], out[300];
    snprintf(in, sizeof in, "%s", p);
    snprintf(out, sizeof out, "/tmp/qwenft-fuzz-%ld.out.h5", (long)getpid());
    char *argv[] = {"prepare", "--in", in, "--out", out, "--tokenizer", tok, "--skip-bad", NULL};
    int rc = qf_opts_run(&qf_cmd_prepare, 8, argv);
    unlink(out);
    if (rc != 0 && rc != 2) abort();
    return 0;
}
