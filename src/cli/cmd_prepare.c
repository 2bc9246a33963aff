/* cmd_prepare.c — `qwen-ft prepare`: JSONL records -> packed HDF5 dataset (docs/formats.md, "Packed dataset").
 *
 *   qwen-ft prepare --in F.jsonl [--in 'G*.jsonl.gz' ...] --out D.h5 [--tokenizer T] [--valid-fraction x]
 *                   [--valid-out V.h5] [--seed n] [--vocab-size V] [--eos-id E] [--pad-id P] [--skip-bad]
 *                   [--template auto|NAME] [--system TEXT] [--mask qwen|assistant] [--map field=role,...]
 *                   [--check] [--dedup] [--seq-len T] [--max-len N] [--truncate right|left|drop]
 *
 * This file holds the options and their checks across options; the work is src/prepare/ (prep_build.c runs it on
 * every rank: mpirun -np N qwen-ft prepare ...; the output does not depend on N). Every record becomes one
 * document, in input order (prep_record.c dispatches it on its first known key). With --tokenizer (loaded once):
 * --vocab-size defaults to the tokenizer's, --eos-id to its <|endoftext|>, and the dataset's `tokenizer` attribute
 * is the tokenizer's identity. */
#include <stddef.h>
#include <stdio.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include "commands.h"
#include "options.h"
#include "prepare/prep.h"
#include "util.h"


/* ---- command line -------------------------------------------------------------------------------------------- */

/* A bad option value: the message and a pointer to --help on stderr, exit 2. */
#define prep_bad_value(...) qf_opts_bad(stderr, "prepare", " (qwen-ft prepare --help lists the options)", __VA_ARGS__)

/* The command line as the option table fills it (options.h); prep_opts_from turns it into prep_opts. */
typedef struct prep_args {
    qf_strlist in, map;
    const char *out, *valid_out, *tokenizer, *system, *mask_name, *template_name, *truncate_name;
    double valid_fraction;
    uint64_t seed;
    int64_t vocab_size, eos_id, pad_id, seq_len, max_len;
    int skip_bad, check, dedup;
} prep_args;

#define PREP_ABOUT                                                                                            \
    "One record per line (or one JSON array of records: [ {...}, {...} ], streamed):\n"                        \
    "  {\"input_ids\": [...]}                      pre-tokenized; every token is a target\n"                   \
    "  {\"input_ids\": [...], \"labels\": [...]}     HF labels (-100 = not a target)\n"                        \
    "  {\"input_ids\": [...], \"loss_mask\": [...]}  1 = the token is a target\n"                              \
    "  {\"text\": \"...\"}                           the text + <|endoftext|>; every token is a target\n"        \
    "  {\"conversations\": [{\"from\": R, \"value\": V}, ...], \"system\"?, \"tools\"?} (ShareGPT; R: system,\n"    \
    "                                            human/user, gpt/assistant, function_call, observation/tool)\n"  \
    "  {\"messages\": [{\"role\": R, \"content\": V, \"reasoning_content\"?, \"tool_calls\"?}, ...], \"tools\"?}\n"  \
    "  {\"instruction\": I, \"input\": X, \"output\": O, \"system\": S, \"history\": [[q, a], ...]}\n"             \
    "                                            Alpaca (input, system, history optional)\n"                     \
    "Conversations are rendered under the chat template (--template): the tokenizer directory's own when it\n"  \
    "has one (qwen2.5, qwen2.5-base, qwen3 or chatml, recognised by content; transformers' apply_chat_template),\n" \
    "else Qwen v1 finetune.py's (qwen1). A record with a key given twice, or two contents (text beside\n"       \
    "messages, input_ids beside text), is refused unless --map names the field to read.\n"                     \
    "(text and conversation records need --tokenizer; files may be gzip or zstd compressed). Under mpirun -np N\n" \
    "every rank reads 1/N of the input; the dataset is the same as with one rank."

static const qf_opt PREP_OPTS[] = {
    {.name = "in", .short_name = 'i', .type = QF_OPT_LIST, .off = offsetof(prep_args, in), .meta = "F",
     .required = 1, .help = "input JSONL file or glob pattern, plain, .gz or .zst (repeatable; order is kept)"},
    {.name = "out", .short_name = 'o', .type = QF_OPT_STR, .off = offsetof(prep_args, out), .meta = "D.h5",
     .help = "output dataset (written atomically; not with --check)"},
    {.name = "tokenizer", .type = QF_OPT_STR, .off = offsetof(prep_args, tokenizer), .meta = "T",
     .help = "tokenizer.json, qwen.tiktoken, or an HF model directory holding one; needed by text and "
             "conversation records"},
    {.name = "valid-fraction", .type = QF_OPT_DOUBLE, .off = offsetof(prep_args, valid_fraction), .def = "0",
     .meta = "x", .lo = 0, .hi = 1, .open = QF_OPT_OPEN_HI,
     .help = "send about x of the documents, chosen by a hash of their normalised content, to a validation file: "
             "identical records are always on the same side"},
    {.name = "valid-out", .type = QF_OPT_STR, .off = offsetof(prep_args, valid_out), .meta = "V.h5",
     .help = "validation file (default: OUT with .h5 replaced by .valid.h5)"},
    {.name = "seed", .type = QF_OPT_U64, .off = offsetof(prep_args, seed), .def = "42", .meta = "n",
     .help = "seed of the validation hash"},
    {.name = "vocab-size", .type = QF_OPT_I64, .off = offsetof(prep_args, vocab_size), .meta = "V", .lo = 1,
     .hi = 4294967296.0,
     .help = "reject token ids >= V and store V (default: the tokenizer's vocabulary size; without --tokenizer: "
             "unknown, stored as 0)"},
    {.name = "eos-id", .type = QF_OPT_I64, .off = offsetof(prep_args, eos_id), .meta = "E", .lo = 0,
     .hi = 4294967295.0,
     .help = "end-of-text id to store, and the id ending text records (default: the tokenizer's <|endoftext|>; "
             "without one 151643)"},
    {.name = "pad-id", .type = QF_OPT_I64, .off = offsetof(prep_args, pad_id), .meta = "P", .lo = 0,
     .hi = 4294967295.0, .help = "padding id to store (default: the eos id)"},
    {.name = "skip-bad", .type = QF_OPT_FLAG, .off = offsetof(prep_args, skip_bad),
     .help = "skip malformed lines (counted and reported) instead of failing"},
    {.name = "template", .type = QF_OPT_STR, .off = offsetof(prep_args, template_name), .meta = "auto|NAME",
     .help = "chat template of conversations: auto = the tokenizer directory's own (chat_template.jinja, else "
             "tokenizer_config.json chat_template, recognised by content), or qwen1 (Qwen v1 finetune.py), chatml "
             "(Qwen1.5/Qwen2), qwen2.5 (Instruct), qwen2.5-base (the base models'), qwen3; default: auto when the "
             "tokenizer directory has a template, else qwen1. The dataset records it, and every export serves it"},
    {.name = "system", .type = QF_OPT_STR, .off = offsetof(prep_args, system), .meta = "TEXT",
     .help = "system prompt of conversations without a system turn (default: the template's own: \"You are a "
             "helpful assistant.\" under qwen1 and chatml, Qwen2.5's under qwen2.5, none under qwen3)"},
    {.name = "mask", .type = QF_OPT_CHOICE, .off = offsetof(prep_args, mask_name), .choices = "qwen|assistant",
     .help = "which conversation tokens are targets: qwen = the labels Qwen's finetune.py trains (every "
             "<|im_start|>, <|im_end|> and the newline after it, and the assistant text); assistant = what the "
             "assistant generates (its text, think block and tool calls, and its <|im_end|>); default: qwen under "
             "--template qwen1, else assistant"},
    {.name = "max-len", .type = QF_OPT_I64, .off = offsetof(prep_args, max_len), .def = "0", .meta = "N", .lo = 0,
     .hi = 9.2e18,
     .help = "the length limit of a record in tokens (0: --seq-len's); longer records follow --truncate"},
    {.name = "truncate", .type = QF_OPT_CHOICE, .off = offsetof(prep_args, truncate_name), .choices = "right|left|drop",
     .help = "records longer than --max-len (or --seq-len): right = keep the first N tokens, left = the last N, "
             "drop = leave the record out; default: a conversation is cut after its last assistant turn that fits "
             "(the first N tokens when none does), never split across rows; plain text and pre-tokenized records "
             "are split across rows by the packing, as without a limit"},
    {.name = "map", .type = QF_OPT_LIST, .off = offsetof(prep_args, map), .meta = "F=ROLE,...",
     .help = "read records that hold field F as turns of ROLE (system, user, assistant; or text: F is a plain "
             "text), in the order given: --map question=user,answer=assistant"},
    {.name = "check", .type = QF_OPT_FLAG, .off = offsetof(prep_args, check),
     .help = "read and tokenize everything, print the summary, write nothing (exit 2 when a line is broken, "
             "unless --skip-bad)"},
    {.name = "dedup", .type = QF_OPT_FLAG, .off = offsetof(prep_args, dedup),
     .help = "keep only the first of records with the same normalised content"},
    {.name = "seq-len", .type = QF_OPT_I64, .off = offsetof(prep_args, seq_len), .def = "0", .meta = "T", .lo = 0,
     .hi = 9.2e18, .help = "the rows' length: report the padding of rows of T tokens, and the length limit unless "
                           "--max-len is given (0: none)"},
    {.name = "set", .type = QF_OPT_IGNORED, .meta = "KEY=VALUE", .help = "prepare reads no deck"},
};

/* prep_opts from the parsed command line, with the checks across options; 0 or exit 2 (printed by rank 0). */
static int prep_opts_from(const prep_args *a, const void *given, int rank, prep_opts *o) {
    const qf_cmd *cmd = &qf_cmd_prepare;
    memset(o, 0, sizeof *o);
    o->rank = rank;
    o->in = qf_calloc((size_t)(a->in.n ? a->in.n : 1), sizeof *o->in);
    for (int i = 0; i < a->in.n; i++) o->in[o->n_in++] = a->in.v[i];
    o->out = a->out, o->valid_out = a->valid_out, o->tokenizer = a->tokenizer, o->system = a->system;
    o->mask_given = a->mask_name != NULL;
    o->mask = a->mask_name && !strcmp(a->mask_name, "assistant") ? QF_CHAT_MASK_ASSISTANT : QF_CHAT_MASK_QWEN;
    o->template_name = a->template_name;
    o->max_len = a->max_len;
    o->truncate = !a->truncate_name ? PREP_TRUNC_DEFAULT : !strcmp(a->truncate_name, "right") ? PREP_TRUNC_RIGHT
                  : !strcmp(a->truncate_name, "left") ? PREP_TRUNC_LEFT : PREP_TRUNC_DROP;
    o->valid_fraction = a->valid_fraction, o->seed = a->seed, o->vocab_size = a->vocab_size;
    o->eos_id = qf_opts_given(cmd, given, "eos-id") ? a->eos_id : -1;
    o->pad_id = qf_opts_given(cmd, given, "pad-id") ? a->pad_id : -1;
    o->skip_bad = a->skip_bad, o->check = a->check, o->dedup = a->dedup, o->seq_len = a->seq_len;
    char why[256];
    for (int i = 0; i < a->map.n; i++)
        if (prep_map_parse(o, a->map.v[i], why, sizeof why)) return rank ? QF_EXIT_INPUT : prep_bad_value("%s", why);
    if (!o->out && !o->check)
        return rank ? QF_EXIT_INPUT : prep_bad_value("%s", "missing --out (the dataset to write; --check writes none)");
    if (o->vocab_size > 0 && o->eos_id >= o->vocab_size)
        return rank ? QF_EXIT_INPUT : prep_bad_value("--eos-id %lld is >= --vocab-size %lld", (long long)o->eos_id,
                                                     (long long)o->vocab_size);
    if (o->vocab_size > 0 && o->pad_id >= o->vocab_size)
        return rank ? QF_EXIT_INPUT : prep_bad_value("--pad-id %lld is >= --vocab-size %lld", (long long)o->pad_id,
                                                     (long long)o->vocab_size);
    qf_tmpl_id tid;
    if (o->template_name && strcmp(o->template_name, "auto") && qf_tmpl_by_name(o->template_name, &tid))
        return rank ? QF_EXIT_INPUT : prep_bad_value("--template %s: unknown (auto, or one of %s)", o->template_name,
                                                     qf_tmpl_names());
    if (o->template_name && !o->tokenizer)
        return rank ? QF_EXIT_INPUT : prep_bad_value("--template %s needs --tokenizer (the template renders tokens)",
                                                     o->template_name);
    if (o->truncate && o->max_len == 0 && o->seq_len == 0)
        return rank ? QF_EXIT_INPUT : prep_bad_value("--truncate %s needs a limit: --max-len N or --seq-len T",
                                                     a->truncate_name);
    if (o->valid_out && o->valid_fraction == 0)
        return rank ? QF_EXIT_INPUT : prep_bad_value("--valid-out %s needs --valid-fraction > 0", o->valid_out);
    return 0;
}

/* ---- the command --------------------------------------------------------------------------------------------- */

static void prep_opts_free(prep_opts *o) {
    free(o->in);
    for (int i = 0; i < o->n_map; i++) free((char *)o->map[i].field);
    free(o->map);
    o->in = NULL, o->map = NULL, o->n_map = 0;
}

/* Every rank works and returns the same exit code; messages come from rank 0. */
static int prepare_main(const void *args) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    prep_opts o;
    int rc = prep_opts_from(args, args, rank, &o);
    if (rc == 0) {
        o.size = size;
        rc = prep_run(&o);
    }
    prep_opts_free(&o);
    fflush(stdout);
    fflush(stderr);
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return rc;
}

const qf_cmd qf_cmd_prepare = {
    .name = "prepare",
    .synopsis = "--in=F [--in=G]... (--out=D.h5 | --check) [OPTION]...",
    .summary = "JSONL records -> packed HDF5 dataset; --check reports what a file holds (docs/formats.md)",
    .about = PREP_ABOUT,
    .opts = PREP_OPTS,
    .nopts = QF_NOPTS(PREP_OPTS),
    .size = sizeof(prep_args),
    .run = prepare_main,
};
