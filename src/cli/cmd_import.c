/* cmd_import.c — `qwen-ft import --from HF_DIR --out M.h5 [--dtype bf16|fp16|fp32]`: an HF Qwen directory
 * (config.json + safetensors) to the HDF5 model format, written atomically. Rank 0 does the work. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "hf.h"
#include "commands.h"
#include "util.h"

typedef struct import_opts {
    const char *from, *out, *dtype;
} import_opts;

static const qf_opt IMPORT_OPTS[] = {
    {.name = "from", .type = QF_OPT_STR, .off = offsetof(import_opts, from), .meta = "DIR", .required = 1,
     .help = "HF model directory: config.json + model.safetensors (or a sharded set with "
             "model.safetensors.index.json); Qwen v1, Qwen1.5/2/2.5 and Qwen3 checkpoints"},
    {.name = "out", .short_name = 'o', .type = QF_OPT_STR, .off = offsetof(import_opts, out), .meta = "FILE",
     .required = 1, .help = "HDF5 model to write (atomically: FILE.tmp-PID-RANDOM, then renamed; never one of the files it reads)"},
    {.name = "dtype", .type = QF_OPT_CHOICE, .off = offsetof(import_opts, dtype), .choices = "bf16|fp16|fp32",
     .help = "storage dtype of the parameters (default: the checkpoint's own)"},
    {.name = "set", .type = QF_OPT_IGNORED, .meta = "KEY=VALUE", .help = "import reads no deck"},
};

static int import_main(const void *opts) {
    const import_opts *o = opts;
    qf_err e = {0};
    if (qf_hf_import(o->from, o->out, o->dtype, &e)) fprintf(stderr, "qwen-ft import: %s\n", e.msg);
    else printf("import: wrote %s\n", o->out);
    return e.code;
}

const qf_cmd qf_cmd_import = {
    .name = "import",
    .synopsis = "--from=HF_DIR --out=MODEL.h5 [--dtype=bf16|fp16|fp32]",
    .summary = "HF safetensors (single or sharded) + config.json -> HDF5 model",
    .opts = IMPORT_OPTS,
    .nopts = QF_NOPTS(IMPORT_OPTS),
    .size = sizeof(import_opts),
    .run = import_main,
    .rank0 = 1,
};
