/* cmd_export.c — `qwen-ft export --from CKPT|MODEL.h5|CKPT_DIR --out HF_DIR [--dtype bf16|fp16|fp32]
 * [--tokenizer T] [--max-shard-size SIZE]`: its options; the export is store/export_hf.c (written into
 * HF_DIR.tmp-PID-RANDOM and renamed: a failed or interrupted export leaves nothing at HF_DIR). Rank 0 does the work. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "store/export_hf.h"
#include "store/checkpoint.h"
#include <sys/stat.h>

/* "5GB" (10^9), "500MiB" (2^20), "123" (bytes), as transformers' max_shard_size; 0 or -1 */
static int export_parse_size(const char *s, int64_t *out) {
    char *end;
    double v = strtod(s, &end);
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},      {"B", 1},          {"KB", 1e3},       {"MB", 1e6},          {"GB", 1e9},
                 {"TB", 1e12}, {"KiB", 1024.0},   {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    if (end == s || !(v > 0)) return -1;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (!strcmp(end, units[i].unit)) {
            double b = v * units[i].mult;
            if (b < 1 || b > 9e18) return -1;
            *out = (int64_t)b;
            return 0;
        }
    return -1;
}

typedef struct export_opts {
    const char *from, *out, *dtype, *tokenizer, *max_shard_size, *step;
} export_opts;

static const qf_opt EXPORT_OPTS[] = {
    {.name = "from", .type = QF_OPT_STR, .off = offsetof(export_opts, from), .meta = "SRC", .required = 1,
     .help = "an HDF5 model (qwen-ft import), a checkpoint file, or a checkpoint directory (its latest)"},
    {.name = "out", .short_name = 'o', .type = QF_OPT_STR, .off = offsetof(export_opts, out), .meta = "DIR",
     .required = 1, .help = "HF directory to create (must not exist or be empty): config.json + safetensors"},
    {.name = "dtype", .type = QF_OPT_CHOICE, .off = offsetof(export_opts, dtype), .choices = "bf16|fp16|fp32",
     .help = "tensor dtype (default: the dtype the model was trained or imported in)"},
    {.name = "tokenizer", .type = QF_OPT_STR, .off = offsetof(export_opts, tokenizer), .meta = "T",
     .help = "tokenizer.json, qwen.tiktoken or a directory to include (default: the tokenizer files the model, "
             "checkpoint or training data carries, or the directory recorded at import; checked against the identity "
             "the model and the training data record; a recorded tokenizer that cannot be found is exit 2)"},
    {.name = "max-shard-size", .type = QF_OPT_STR, .off = offsetof(export_opts, max_shard_size), .meta = "S",
     .def = "5GiB", .help = "largest safetensors file: bytes, or with KB/MB/GB (10^3) or KiB/MiB/GiB (2^10); a "
                            "tensor larger than S gets a file of its own"},
    {.name = "step", .type = QF_OPT_STR, .off = offsetof(export_opts, step), .meta = "N|best",
     .help = "with --from a checkpoint directory: its checkpoint of step N (step-N or N), best (checkpoint.keep_best) "
             "or latest (the default)"},
    {.name = "set", .type = QF_OPT_IGNORED, .meta = "KEY=VALUE", .help = "export reads no deck"},
};

static int export_main(const void *opts) {
    const export_opts *o = opts;
    int64_t shard_bytes = QF_EXPORT_SHARD_BYTES;
    if (o->max_shard_size && export_parse_size(o->max_shard_size, &shard_bytes)) {
        fprintf(stderr, "qwen-ft export: --max-shard-size %s: expected a size such as 5GB, 500MiB or 1000000 (> 0)\n",
                o->max_shard_size);
        return QF_EXIT_INPUT;
    }
    qf_err e = {0};
    char picked[QF_PATH_MAX + 64];
    const char *from = o->from;
    if (o->step) {
        struct stat st;
        if (stat(o->from, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "qwen-ft export: --step %s needs --from a checkpoint directory; %s is not one\n", o->step,
                    o->from);
            return QF_EXIT_INPUT;
        }
        if (qf_ckpt_resolve(o->from, o->step, picked, sizeof picked, &e)) {
            fprintf(stderr, "qwen-ft export: --step %s: %s\n", o->step, e.msg);
            return e.code;
        }
        from = picked;
    }
    if (qf_export_hf_file(from, o->out, o->dtype, o->tokenizer, shard_bytes, &e)) fprintf(stderr, "qwen-ft: %s\n", e.msg);
    return e.code;
}

const qf_cmd qf_cmd_export = {
    .name = "export",
    .synopsis = "--from=CKPT --out=HF_DIR [--step=N|best] [--dtype=bf16|fp16|fp32] [--tokenizer=T] [--max-shard-size=S]",
    .summary = "HDF5 model or checkpoint -> HF safetensors directory (transformers, vLLM)",
    .about = "Checkpoints export their fp32 master weights; Qwen v1 models export in the Qwen2 layout. Shards of at\n"
             "most --max-shard-size with model.safetensors.index.json, config.json, generation_config.json and the\n"
             "tokenizer files; written into HF_DIR.tmp-PID-RANDOM and renamed, so a failed or interrupted (SIGINT, SIGTERM, SIGHUP) export leaves nothing at HF_DIR.",
    .opts = EXPORT_OPTS,
    .nopts = QF_NOPTS(EXPORT_OPTS),
    .size = sizeof(export_opts),
    .run = export_main,
    .rank0 = 1,
};
