/* cmd_prepare.c — `qwen-ft prepare`: JSONL records -> packed HDF5 dataset (docs/formats.md, "Packed dataset").
 *
 *   qwen-ft prepare --in F.jsonl [--in 'G*.jsonl.gz' ...] --out D.h5 [--tokenizer T] [--valid-fraction x]
 *                   [--valid-out V.h5] [--seed n] [--vocab-size V] [--eos-id E] [--pad-id P] [--skip-bad]
 *                   [--system TEXT] [--mask qwen|assistant] [--map field=role,...] [--check] [--dedup]
 *                   [--seq-len T]
 *
 * Every rank works (mpirun -np N qwen-ft prepare ...): the phases are in prep_run.h; the output does not depend
 * on N. Every record becomes one document, in input order.
 * A record is dispatched on its first known key to one function per record kind (prep_kinds[] below), after --map:
 *   input_ids                pre-tokenized, taken as it is (optional labels or loss_mask)
 *   text                     plain text            -> prep_text (prep_chat.c; needs --tokenizer)
 *   conversations / messages ShareGPT / OpenAI chat -> prep_chat (prep_chat.c; needs --tokenizer), ChatML
 *   instruction              Alpaca                -> prep_alpaca (prep_formats.c), ChatML
 * Everything else (errors naming FILE:LINE, --skip-bad, the split, the summary, the atomic write) is shared.
 * With --tokenizer (loaded once): --vocab-size defaults to the tokenizer's, --eos-id to its <|endoftext|>, and the
 * dataset's `tokenizer` attribute is the tokenizer's identity. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dataset.h"
#include "commands.h"
#include "options.h"
#include "prep.h"
#include "prep_run.h"
#include "util.h"

#define PREP_DEFAULT_EOS 151643 /* <|endoftext|> of the Qwen tokenizers */

void prep_doc_reserve(prep_doc *d, int64_t n) {
    if (n <= d->cap) return;
    int64_t cap = d->cap ? d->cap : 1024;
    while (cap < n) cap *= 2;
    d->tok = qf_realloc(d->tok, (size_t)cap * sizeof *d->tok);
    d->mask = qf_realloc(d->mask, (size_t)cap);
    d->cap = cap;
}

const char *prep_json_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* json_object_get, with JSON null counted as absent */
json_t *prep_get(json_t *rec, const char *key) {
    json_t *v = json_object_get(rec, key);
    return v && json_is_null(v) ? NULL : v;
}

/* ---- record kinds -------------------------------------------------------------------------------------------- */

/* {"input_ids": [...], "labels": [...]} (HF-style, unshifted: labels[i] belongs to token i; -100 = not a target,
 * otherwise it must equal input_ids[i]) or {"input_ids": [...], "loss_mask": [0/1 ...]} (the mask of the token
 * itself as a target); with neither, every token is a target. */
static int prep_pretokenized(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap) {
    json_t *ids = prep_get(rec, "input_ids");
    json_t *labels = prep_get(rec, "labels");
    json_t *lmask = prep_get(rec, "loss_mask");
    if (!ids) return snprintf(why, cap, "input_ids is null"), PREP_BAD;
    if (!json_is_array(ids)) return snprintf(why, cap, "input_ids is %s, expected an array", prep_json_type(ids)), PREP_BAD;
    size_t n = json_array_size(ids);
    if (n == 0) return snprintf(why, cap, "input_ids is empty"), PREP_BAD;
    if (labels && lmask) return snprintf(why, cap, "has both labels and loss_mask; give one of them"), PREP_BAD;
    json_t *aux = labels ? labels : lmask;
    const char *auxname = labels ? "labels" : "loss_mask";
    if (aux && !json_is_array(aux))
        return snprintf(why, cap, "%s is %s, expected an array", auxname, prep_json_type(aux)), PREP_BAD;
    if (aux && json_array_size(aux) != n)
        return snprintf(why, cap, "%s has %zu elements but input_ids has %zu", auxname, json_array_size(aux), n),
               PREP_BAD;
    prep_doc_reserve(doc, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v))
            return snprintf(why, cap, "input_ids[%zu] is %s, expected a token id (integer)", i, prep_json_type(v)),
                   PREP_BAD;
        json_int_t x = json_integer_value(v);
        if (x < 0) return snprintf(why, cap, "input_ids[%zu] = %lld is negative", i, (long long)x), PREP_BAD;
        if (x > (json_int_t)UINT32_MAX)
            return snprintf(why, cap, "input_ids[%zu] = %lld does not fit 32 bits (>= 2^32)", i, (long long)x),
                   PREP_BAD;
        if (o->vocab_size > 0 && x >= o->vocab_size)
            return snprintf(why, cap, "input_ids[%zu] = %lld >= --vocab-size %lld", i, (long long)x,
                            (long long)o->vocab_size),
                   PREP_BAD;
        doc->tok[i] = (uint32_t)x;
        doc->mask[i] = 1;
        if (labels) {
            json_t *l = json_array_get(labels, i);
            if (!json_is_integer(l))
                return snprintf(why, cap, "labels[%zu] is %s, expected an integer", i, prep_json_type(l)), PREP_BAD;
            json_int_t y = json_integer_value(l);
            if (y == -100)
                doc->mask[i] = 0;
            else if (y != x)
                return snprintf(why, cap, "labels[%zu] = %lld is neither -100 nor input_ids[%zu] = %lld", i,
                                (long long)y, i, (long long)x),
                       PREP_BAD;
        } else if (lmask) {
            json_t *m = json_array_get(lmask, i);
            if (json_is_boolean(m))
                doc->mask[i] = json_is_true(m);
            else if (json_is_integer(m) && (json_integer_value(m) == 0 || json_integer_value(m) == 1))
                doc->mask[i] = (uint8_t)json_integer_value(m);
            else if (json_is_integer(m))
                return snprintf(why, cap, "loss_mask[%zu] = %lld, expected 0 or 1", i, (long long)json_integer_value(m)),
                       PREP_BAD;
            else
                return snprintf(why, cap, "loss_mask[%zu] is %s, expected 0 or 1", i, prep_json_type(m)), PREP_BAD;
        }
    }
    doc->n = (int64_t)n;
    prep_content_begin(doc);
    prep_content_ids(doc, doc->tok, doc->mask, doc->n);
    return PREP_OK;
}

static const struct {
    const char *key;
    prep_record_fn fn;
    prep_kind kind;
} prep_kinds[] = {
    {"input_ids", prep_pretokenized, PREP_KIND_PRETOKENIZED}, {"text", prep_text, PREP_KIND_TEXT},
    {"conversations", prep_chat, PREP_KIND_CONVERSATIONS},    {"messages", prep_chat, PREP_KIND_MESSAGES},
    {"instruction", prep_alpaca, PREP_KIND_ALPACA},
};

int prep_record(const prep_opts *o, const char *line, size_t len, prep_doc *doc, char *why, size_t cap) {
    json_error_t jerr;
    json_t *rec = json_loadb(line, len, JSON_DECODE_ANY, &jerr);
    int kind = PREP_OK;
    doc->n = 0;
    doc->turns = doc->empty_turns = 0;
    doc->unanswered = 0;
    if (!rec) {
        snprintf(why, cap, "invalid JSON at column %d: %s", jerr.column, jerr.text);
        kind = PREP_BAD;
    } else if (!json_is_object(rec)) {
        snprintf(why, cap, "the record is %s, expected a JSON object", prep_json_type(rec));
        kind = PREP_BAD;
    } else if (o->n_map && prep_map_applies(o, rec)) {
        doc->kind = PREP_KIND_MAP;
        kind = prep_mapped(o, rec, doc, why, cap);
    } else {
        int k = -1;
        for (int j = 0; j < (int)(sizeof prep_kinds / sizeof *prep_kinds) && k < 0; j++)
            if (json_object_get(rec, prep_kinds[j].key)) k = j;
        if (k < 0) {
            snprintf(why, cap, "the record has none of input_ids, text, conversations, messages, instruction%s "
                     "(missing input_ids)", o->n_map ? " or a --map field" : "");
            kind = PREP_BAD;
        } else {
            doc->kind = prep_kinds[k].kind;
            kind = prep_kinds[k].fn(o, rec, doc, why, cap);
        }
    }
    json_decref(rec);
    return kind;
}

/* ---- command line -------------------------------------------------------------------------------------------- */

/* A bad option value: the message and a pointer to --help on stderr, exit 2. */
#define prep_bad_value(...) qf_opts_bad(stderr, "prepare", " (qwen-ft prepare --help lists the options)", __VA_ARGS__)

/* The command line as the option table fills it (options.h); prep_opts_from turns it into prep_opts. */
typedef struct prep_args {
    qf_strlist in, map;
    const char *out, *valid_out, *tokenizer, *system, *mask_name;
    double valid_fraction;
    uint64_t seed;
    int64_t vocab_size, eos_id, pad_id, seq_len;
    int skip_bad, check, dedup;
} prep_args;

#define PREP_ABOUT                                                                                            \
    "One record per line:\n"                                                                                  \
    "  {\"input_ids\": [...]}                      pre-tokenized; every token is a target\n"                   \
    "  {\"input_ids\": [...], \"labels\": [...]}     HF labels (-100 = not a target)\n"                        \
    "  {\"input_ids\": [...], \"loss_mask\": [...]}  1 = the token is a target\n"                              \
    "  {\"text\": \"...\"}                           the text + <|endoftext|>; every token is a target\n"        \
    "  {\"conversations\": [{\"from\": R, \"value\": V}, ...]}, {\"messages\": [{\"role\": R, \"content\": V}, ...]}\n" \
    "                                            ChatML as Qwen's finetune.py builds it; R: system (first\n"     \
    "                                            turn only), user or human, assistant or gpt\n"                  \
    "  {\"instruction\": I, \"input\": X, \"output\": O, \"system\": S, \"history\": [[q, a], ...]}\n"             \
    "                                            Alpaca (input, system, history optional), as ChatML\n"          \
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
    {.name = "system", .type = QF_OPT_STR, .off = offsetof(prep_args, system), .def = "You are a helpful assistant.",
     .meta = "TEXT", .help = "system prompt of conversations without a system turn"},
    {.name = "mask", .type = QF_OPT_CHOICE, .off = offsetof(prep_args, mask_name), .def = "qwen",
     .choices = "qwen|assistant",
     .help = "which conversation tokens are targets: qwen = the labels Qwen's finetune.py trains (every "
             "<|im_start|>, <|im_end|> and the newline after it, and the assistant text); assistant = only the "
             "assistant text and its <|im_end|>"},
    {.name = "map", .type = QF_OPT_LIST, .off = offsetof(prep_args, map), .meta = "F=ROLE,...",
     .help = "read records that hold field F as turns of ROLE (system, user, assistant; or text: F is a plain "
             "text), in the order given: --map question=user,answer=assistant"},
    {.name = "check", .type = QF_OPT_FLAG, .off = offsetof(prep_args, check),
     .help = "read and tokenize everything, print the summary, write nothing (exit 2 when a line is broken, "
             "unless --skip-bad)"},
    {.name = "dedup", .type = QF_OPT_FLAG, .off = offsetof(prep_args, dedup),
     .help = "keep only the first of records with the same normalised content"},
    {.name = "seq-len", .type = QF_OPT_I64, .off = offsetof(prep_args, seq_len), .def = "0", .meta = "T", .lo = 0,
     .hi = 9.2e18, .help = "report documents longer than T tokens and the padding of rows of T tokens (0: not)"},
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
    o->mask = strcmp(a->mask_name, "qwen") ? QF_CHAT_MASK_ASSISTANT : QF_CHAT_MASK_QWEN;
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
    if (o->valid_out && o->valid_fraction == 0)
        return rank ? QF_EXIT_INPUT : prep_bad_value("--valid-out %s needs --valid-fraction > 0", o->valid_out);
    return 0;
}

/* ---- the command --------------------------------------------------------------------------------------------- */

/* 0 if the directory that will hold path is writable (message printed by rank 0 otherwise). */
static int prep_check_writable(const prep_opts *o, const char *path) {
    char *dir = qf_strdup(path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    int rc = 0;
    if (access(dir, W_OK) != 0) {
        if (o->rank == 0) fprintf(stderr, "qwen-ft prepare: %s: cannot write into %s: %s\n", path, dir, strerror(errno));
        rc = QF_EXIT_INPUT;
    }
    free(dir);
    return rc;
}

/* OUT with .h5 replaced by .valid.h5, or --valid-out */
static char *prep_valid_path(const prep_opts *o) {
    if (o->valid_out) return qf_strdup(o->valid_out);
    size_t n = strlen(o->out);
    char *v = qf_malloc(n + 16);
    memcpy(v, o->out, n + 1);
    if (n >= 3 && !strcmp(o->out + n - 3, ".h5")) v[n - 3] = 0;
    strcat(v, ".valid.h5");
    return v;
}

/* the `source` attribute: the input files, one per line */
static char *prep_source(const prep_plan *plan) {
    size_t n = 1;
    for (int i = 0; i < plan->n_in; i++) n += strlen(plan->in[i].path) + 1;
    char *s = qf_calloc(n, 1);
    for (int i = 0; i < plan->n_in; i++) {
        if (i) strcat(s, "\n");
        strcat(s, plan->in[i].path);
    }
    return s;
}

/* Reads every input (this rank's share) and writes the dataset(s); o is complete (tokenizer loaded, ids
 * resolved). Collective; every rank returns the same code. */
static int prep_build(const prep_opts *o) {
    MPI_Comm comm = MPI_COMM_WORLD;
    double t0 = qf_now();
    char *valid_path = !o->check && o->valid_fraction > 0 ? prep_valid_path(o) : NULL;
    if (valid_path && !strcmp(valid_path, o->out)) {
        if (o->rank == 0) fprintf(stderr, "qwen-ft prepare: --valid-out %s is the same file as --out\n", valid_path);
        free(valid_path);
        return QF_EXIT_INPUT;
    }
    if (!o->check && (prep_check_writable(o, o->out) || (valid_path && prep_check_writable(o, valid_path)))) {
        free(valid_path);
        return QF_EXIT_INPUT;
    }
    prep_plan plan;
    qf_err e = {0};
    if (prep_inputs_plan(o, &plan, &e)) {
        if (o->rank == 0) fprintf(stderr, "qwen-ft prepare: %s\n", e.msg);
        prep_plan_free(&plan);
        free(valid_path);
        return e.code;
    }
    char *source = prep_source(&plan);
    prep_pass pass;
    int rc = prep_read_pass(o, &plan, o->check ? NULL : o->out, &pass, comm);
    int64_t docs = pass.sum.docs; /* rank 0's total */
    MPI_Bcast(&docs, 1, MPI_INT64_T, 0, comm);
    if (rc == 0 && docs == 0 && !o->check) {
        if (o->rank == 0)
            fprintf(stderr, "qwen-ft prepare: no documents in the input (%lld lines skipped); nothing written\n",
                    (long long)pass.sum.broken);
        rc = QF_EXIT_INPUT;
    }
    uint8_t *flags = NULL;
    prep_dup_stats dup;
    memset(&dup, 0, sizeof dup);
    if (rc == 0) {
        flags = qf_malloc((size_t)(pass.n ? pass.n : 1));
        prep_split_decide(o, &pass, flags, &dup, comm);
        if (o->rank == 0 && o->valid_fraction > 0 && dup.valid_disabled)
            fprintf(stderr, "qwen-ft prepare: warning: %lld distinct record(s): no validation file written\n",
                    (long long)(dup.train_docs - dup.dup_records + (o->dedup ? dup.dropped : 0)));
    }
    if (rc == 0 && !o->check) {
        int with_valid = valid_path && dup.valid_docs > 0;
        if (with_valid) rc = prep_write_side(o, &pass, flags, 1, valid_path, source, comm);
        if (rc == 0) {
            rc = prep_write_side(o, &pass, flags, 0, o->out, source, comm);
            if (rc && with_valid && o->rank == 0) unlink(valid_path); /* no half result */
        }
        if (rc == 0 && o->rank == 0) {
            printf("prepare: wrote %s: %lld documents, %lld tokens\n", o->out, (long long)dup.train_docs,
                   (long long)dup.train_tokens);
            if (with_valid)
                printf("prepare: wrote %s: %lld documents, %lld tokens (validation, content hash, seed %llu)\n",
                       valid_path, (long long)dup.valid_docs, (long long)dup.valid_tokens,
                       (unsigned long long)o->seed);
        }
    }
    if (rc == 0 && o->rank == 0) {
        prep_summary_print(stdout, o, &plan, &pass, &dup, qf_now() - t0);
        if (!o->check) {
            const prep_summary *s = &pass.sum;
            printf("prepare: done: %lld documents, %lld tokens, %lld trained tokens, skipped %lld bad line%s",
                   (long long)s->docs, (long long)s->tokens, (long long)s->trained, (long long)s->broken,
                   s->broken == 1 ? "" : "s");
            for (int i = 0; i < pass.n_broken_shown; i++)
                printf("%s%s:%lld", i ? ", " : " (", plan.in[pass.broken[i].file].path, (long long)pass.broken[i].line);
            if (s->broken > pass.n_broken_shown) printf(", ...");
            printf("%s; %d rank%s, %.1f s\n", pass.n_broken_shown ? ")" : "", o->size, o->size == 1 ? "" : "s",
                   qf_now() - t0);
        }
        fflush(stdout);
    }
    /* --check: broken lines are an error unless --skip-bad */
    if (rc == 0 && o->check && !o->skip_bad) {
        int64_t broken = pass.sum.broken;
        MPI_Bcast(&broken, 1, MPI_INT64_T, 0, comm);
        if (broken) {
            if (o->rank == 0)
                fprintf(stderr, "qwen-ft prepare: --check: %lld broken line%s (--skip-bad accepts them)\n",
                        (long long)broken, broken == 1 ? "" : "s");
            rc = QF_EXIT_INPUT;
        }
    }
    free(flags);
    prep_pass_free(&pass);
    prep_plan_free(&plan);
    free(source);
    free(valid_path);
    return rc;
}

/* Resolves the defaults that depend on the tokenizer: vocab size, eos and pad ids. 0 or exit 2 (printed). */
static int prep_resolve_ids(prep_opts *o) {
    if (o->tok) {
        int64_t tv = qf_tok_vocab_size(o->tok);
        if (o->vocab_size == 0)
            o->vocab_size = tv;
        else if (o->vocab_size < tv)
            return o->rank ? QF_EXIT_INPUT : prep_bad_value("--vocab-size %lld is smaller than the vocabulary of the tokenizer %s (%lld ids)",
                                  (long long)o->vocab_size, o->tokenizer, (long long)tv);
        if (o->eos_id < 0) o->eos_id = qf_tok_special(o->tok, "<|endoftext|>");
        if (o->eos_id < 0)
            return o->rank ? QF_EXIT_INPUT : prep_bad_value("the tokenizer %s has no <|endoftext|>: pass --eos-id", o->tokenizer);
    }
    if (o->eos_id < 0) o->eos_id = PREP_DEFAULT_EOS;
    if (o->pad_id < 0) o->pad_id = o->eos_id;
    if (o->vocab_size > 0 && o->eos_id >= o->vocab_size)
        return o->rank ? QF_EXIT_INPUT : prep_bad_value("the eos id %lld is >= the vocabulary size %lld (--eos-id, --vocab-size)",
                              (long long)o->eos_id, (long long)o->vocab_size);
    if (o->vocab_size > 0 && o->pad_id >= o->vocab_size)
        return o->rank ? QF_EXIT_INPUT : prep_bad_value("the pad id %lld is >= the vocabulary size %lld (--pad-id, --vocab-size)",
                              (long long)o->pad_id, (long long)o->vocab_size);
    return 0;
}

/* Loads the tokenizer (once per rank) and its ChatML pieces, resolves the ids, builds; frees what it loaded. */
static int prep_run(prep_opts *o) {
    qf_tokenizer *tok = NULL;
    qf_chatml cm;
    memset(&cm, 0, sizeof cm);
    qf_err e = {0};
    if (o->tokenizer) {
        if (qf_tok_load(o->tokenizer, &tok, &e)) {
            if (o->rank == 0) fprintf(stderr, "qwen-ft prepare: --tokenizer %s: %s\n", o->tokenizer, e.msg);
            return e.code;
        }
        o->tok = tok;
        /* a tokenizer without the ChatML tokens still serves text records; conversations then say why not */
        if (qf_chatml_init(&cm, tok, &e) == 0)
            o->chatml = &cm;
        else
            snprintf(o->chatml_why, sizeof o->chatml_why, "%.400s", e.msg);
    }
    int rc = prep_resolve_ids(o);
    if (rc == 0) rc = prep_build(o);
    qf_chatml_free(&cm);
    if (tok) qf_tok_free(tok);
    o->tok = NULL;
    o->chatml = NULL;
    return rc;
}

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
