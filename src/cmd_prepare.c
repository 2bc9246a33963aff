/* cmd_prepare.c — `qwen-ft prepare`: JSONL records -> packed HDF5 dataset (docs/formats.md, "Packed dataset").
 *
 *   qwen-ft prepare --in F.jsonl [--in G.jsonl ...] --out D.h5 [--tokenizer T] [--valid-fraction x]
 *                   [--valid-out V.h5] [--seed n] [--vocab-size V] [--eos-id E] [--pad-id P] [--skip-bad]
 *                   [--system TEXT] [--mask qwen|assistant]
 *
 * Rank 0 does all the work; the other ranks wait for its exit code and return it too. Every record becomes
 * one document, in input order.
 * A record is dispatched on its first known key to one function per record kind (prep_kinds[] below):
 *   input_ids                pre-tokenized, taken as it is (optional labels or loss_mask)
 *   text                     plain text            -> prep_text (prep_chat.c; needs --tokenizer)
 *   conversations / messages ShareGPT / OpenAI chat -> prep_chat (prep_chat.c; needs --tokenizer), ChatML
 * Everything else (errors naming FILE:LINE, --skip-bad, the validation split, the atomic write) is shared.
 * With --tokenizer (loaded once): --vocab-size defaults to the tokenizer's, --eos-id to its <|endoftext|>, and the
 * dataset's `tokenizer` attribute is the tokenizer's identity. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dataset.h"
#include "commands.h"
#include "prep.h"
#include "rng.h"
#include "util.h"

#define PREP_DEFAULT_EOS 151643 /* <|endoftext|> of the Qwen tokenizers */
#define PREP_PROGRESS_TOKENS 1000000
#define PREP_SHOW_SKIPPED 5

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
    return PREP_OK;
}

static const struct {
    const char *key;
    prep_record_fn fn;
} prep_kinds[] = {
    {"input_ids", prep_pretokenized},
    {"text", prep_text},
    {"conversations", prep_chat},
    {"messages", prep_chat},
};

/* ---- command line -------------------------------------------------------------------------------------------- */

#define PREP_ABOUT                                                                                            \
    "One record per line:\n"                                                                                  \
    "  {\"input_ids\": [...]}                      pre-tokenized; every token is a target\n"                   \
    "  {\"input_ids\": [...], \"labels\": [...]}     HF labels (-100 = not a target)\n"                        \
    "  {\"input_ids\": [...], \"loss_mask\": [...]}  1 = the token is a target\n"                              \
    "  {\"text\": \"...\"}                           the text + <|endoftext|>; every token is a target\n"        \
    "  {\"conversations\": [{\"from\": R, \"value\": V}, ...]}, {\"messages\": [{\"role\": R, \"content\": V}, ...]}\n" \
    "                                            ChatML as Qwen's finetune.py builds it; R: system (first\n"     \
    "                                            turn only), user or human, assistant or gpt\n"                  \
    "(text and conversation records need --tokenizer). Rank 0 does the work; input order is kept."

static const qf_opt PREP_OPTS[] = {
    {.name = "in", .short_name = 'i', .type = QF_OPT_LIST, .off = offsetof(prep_opts, in), .meta = "F.jsonl",
     .required = 1, .help = "input JSONL file (repeatable; order is kept)"},
    {.name = "out", .short_name = 'o', .type = QF_OPT_STR, .off = offsetof(prep_opts, out), .meta = "D.h5",
     .required = 1, .help = "output dataset (written atomically)"},
    {.name = "tokenizer", .type = QF_OPT_STR, .off = offsetof(prep_opts, tokenizer), .meta = "T",
     .help = "tokenizer.json, qwen.tiktoken, or an HF model directory holding one; needed by text and "
             "conversation records"},
    {.name = "valid-fraction", .type = QF_OPT_DOUBLE, .off = offsetof(prep_opts, valid_fraction), .def = "0",
     .meta = "x", .lo = 0, .hi = 1, .open = QF_OPT_OPEN_HI,
     .help = "send round(x * docs) documents, chosen by a stable hash of their content, to a validation file"},
    {.name = "valid-out", .type = QF_OPT_STR, .off = offsetof(prep_opts, valid_out), .meta = "V.h5",
     .help = "validation file (default: OUT with .h5 replaced by .valid.h5)"},
    {.name = "seed", .type = QF_OPT_U64, .off = offsetof(prep_opts, seed), .def = "42", .meta = "n",
     .help = "seed of the validation choice"},
    {.name = "vocab-size", .type = QF_OPT_I64, .off = offsetof(prep_opts, vocab_size), .meta = "V", .lo = 1,
     .hi = 4294967296.0,
     .help = "reject token ids >= V and store V (default: the tokenizer's vocabulary size; without --tokenizer: "
             "unknown, stored as 0)"},
    {.name = "eos-id", .type = QF_OPT_I64, .off = offsetof(prep_opts, eos_id), .meta = "E", .lo = 0,
     .hi = 4294967295.0,
     .help = "end-of-text id to store, and the id ending text records (default: the tokenizer's <|endoftext|>; "
             "without one 151643)"},
    {.name = "pad-id", .type = QF_OPT_I64, .off = offsetof(prep_opts, pad_id), .meta = "P", .lo = 0,
     .hi = 4294967295.0, .help = "padding id to store (default: the eos id)"},
    {.name = "skip-bad", .type = QF_OPT_FLAG, .off = offsetof(prep_opts, skip_bad),
     .help = "skip malformed lines (counted and reported) instead of failing"},
    {.name = "system", .type = QF_OPT_STR, .off = offsetof(prep_opts, system), .def = "You are a helpful assistant.",
     .meta = "TEXT", .help = "system prompt of conversations without a system turn"},
    {.name = "mask", .type = QF_OPT_CHOICE, .off = offsetof(prep_opts, mask_name), .def = "qwen",
     .choices = "qwen|assistant",
     .help = "which conversation tokens are targets: qwen = the labels Qwen's finetune.py trains (every "
             "<|im_start|>, <|im_end|> and the newline after it, and the assistant text); assistant = only the "
             "assistant text and its <|im_end|>"},
    {.name = "set", .type = QF_OPT_IGNORED, .meta = "KEY=VALUE", .help = "prepare reads no deck"},
};

/* A bad option value: the message and a pointer to --help on stderr, exit 2. */
static int prep_bad_value(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int prep_bad_value(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "qwen-ft prepare: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (qwen-ft prepare --help lists the options)\n");
    va_end(ap);
    return QF_EXIT_INPUT;
}

/* What the table cannot say: defaults that depend on other options, and checks across options. 0 or 2. */
static int prep_check_args(prep_opts *o, const void *given) {
    const qf_cmd *cmd = &qf_cmd_prepare;
    if (!qf_opts_given(cmd, given, "eos-id")) o->eos_id = -1;
    if (!qf_opts_given(cmd, given, "pad-id")) o->pad_id = -1;
    o->mask = strcmp(o->mask_name, "qwen") ? QF_CHAT_MASK_ASSISTANT : QF_CHAT_MASK_QWEN;
    if (o->vocab_size > 0 && o->eos_id >= o->vocab_size)
        return prep_bad_value("--eos-id %lld is >= --vocab-size %lld", (long long)o->eos_id, (long long)o->vocab_size);
    if (o->vocab_size > 0 && o->pad_id >= o->vocab_size)
        return prep_bad_value("--pad-id %lld is >= --vocab-size %lld", (long long)o->pad_id, (long long)o->vocab_size);
    if (o->valid_out && o->valid_fraction == 0)
        return prep_bad_value("--valid-out %s needs --valid-fraction > 0", o->valid_out);
    return 0;
}

/* ---- the command --------------------------------------------------------------------------------------------- */

typedef struct prep_stats {
    int64_t docs, tokens, trained, skipped;
    char shown[PREP_SHOW_SKIPPED][256]; /* first skipped FILE:LINE */
    int64_t next_progress;
    double t0;
} prep_stats;

/* 1 if the line holds only whitespace */
static int prep_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n' && s[i] != '\f' && s[i] != '\v') return 0;
    return 1;
}

/* Reads one JSONL file into the builder. Returns 0 or an exit code (message printed). */
static int prep_read_file(const prep_opts *o, const char *path, qf_dataset_builder *b, prep_doc *doc,
                          prep_stats *st) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "qwen-ft prepare: %s: cannot open: %s\n", path, strerror(errno));
        return QF_EXIT_INPUT;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long long lineno = 0;
    int rc = 0;
    char why[512];
    while (rc == 0 && (len = (ssize_t)qf_getline_max(&line, &cap, f, QF_MAX_LINE_BYTES)) != -1) {
        lineno++;
        if (len == -2) { /* bounded memory: a record is parsed whole, at ~25 bytes of memory per byte */
            fprintf(stderr, "qwen-ft prepare: %s:%lld: the line is longer than %zu bytes, the limit of one record "
                            "(docs/reliability.md)\n", path, lineno, QF_MAX_LINE_BYTES);
            rc = QF_EXIT_INPUT;
            break;
        }
        const char *s = line;
        size_t n = (size_t)len;
        if (lineno == 1 && n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) s += 3, n -= 3; /* UTF-8 byte-order mark */
        if (prep_blank(s, n)) continue;
        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r')) n--; /* so that jansson's column is on this line */
        int kind = PREP_OK;
        json_error_t jerr;
        json_t *rec = json_loadb(s, n, JSON_DECODE_ANY, &jerr);
        if (!rec && json_error_code(&jerr) == json_error_out_of_memory) { /* not the record's fault: not skippable */
            fprintf(stderr, "qwen-ft prepare: %s:%lld: out of memory parsing this %zu-byte record\n", path, lineno, n);
            rc = QF_EXIT_RUNTIME;
            break;
        } else if (!rec) {
            snprintf(why, sizeof why, "invalid JSON at column %d: %s", jerr.column, jerr.text);
            kind = PREP_BAD;
        } else if (!json_is_object(rec)) {
            snprintf(why, sizeof why, "the record is %s, expected a JSON object", prep_json_type(rec));
            kind = PREP_BAD;
        } else {
            int k = -1;
            for (int j = 0; j < (int)(sizeof prep_kinds / sizeof *prep_kinds) && k < 0; j++)
                if (json_object_get(rec, prep_kinds[j].key)) k = j;
            if (k < 0) {
                snprintf(why, sizeof why,
                         "the record has none of input_ids, text, conversations, messages (missing input_ids)");
                kind = PREP_BAD;
            } else {
                doc->n = 0;
                kind = prep_kinds[k].fn(o, rec, doc, why, sizeof why);
            }
        }
        json_decref(rec);
        if (kind == PREP_OK) {
            qf_dsb_add_doc(b, doc->tok, doc->mask, doc->n);
            st->docs++;
            st->tokens += doc->n;
            for (int64_t i = 1; i < doc->n; i++) st->trained += doc->mask[i];
            if (st->tokens >= st->next_progress) {
                double dt = qf_now() - st->t0;
                printf("prepare: %s:%lld: %lld documents, %lld tokens (%.2f M tokens/s)\n", path, lineno,
                       (long long)st->docs, (long long)st->tokens, dt > 0 ? 1e-6 * (double)st->tokens / dt : 0.0);
                fflush(stdout);
                while (st->next_progress <= st->tokens) st->next_progress += PREP_PROGRESS_TOKENS;
            }
        } else if (kind == PREP_BAD && o->skip_bad) {
            if (st->skipped < PREP_SHOW_SKIPPED) {
                snprintf(st->shown[st->skipped], sizeof st->shown[0], "%s:%lld", path, lineno);
                fprintf(stderr, "qwen-ft prepare: skipping %s:%lld: %s\n", path, lineno, why);
            } else if (st->skipped == PREP_SHOW_SKIPPED) {
                fprintf(stderr, "qwen-ft prepare: (further skipped lines are counted, not shown)\n");
            }
            st->skipped++;
        } else {
            fprintf(stderr, "qwen-ft prepare: %s:%lld: %s\n", path, lineno, why);
            if (kind == PREP_BAD) fprintf(stderr, "qwen-ft prepare: (--skip-bad skips such lines)\n");
            rc = QF_EXIT_INPUT;
        }
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "qwen-ft prepare: %s: read error after line %lld: %s\n", path, lineno, strerror(errno));
        rc = QF_EXIT_INPUT;
    }
    free(line);
    fclose(f);
    return rc;
}

/* 0 if the directory that will hold path is writable (message printed otherwise). */
static int prep_check_writable(const char *path) {
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
        fprintf(stderr, "qwen-ft prepare: %s: cannot write into %s: %s\n", path, dir, strerror(errno));
        rc = QF_EXIT_INPUT;
    }
    free(dir);
    return rc;
}

/* Reads every input and writes the dataset(s); o is complete (tokenizer loaded, ids resolved). */
static int prep_build(const prep_opts *o) {
    char *valid_path = NULL;
    if (o->valid_fraction > 0) {
        if (o->valid_out) {
            valid_path = qf_strdup(o->valid_out);
        } else {
            size_t n = strlen(o->out);
            valid_path = qf_malloc(n + 16);
            memcpy(valid_path, o->out, n + 1);
            if (n >= 3 && !strcmp(o->out + n - 3, ".h5")) valid_path[n - 3] = 0;
            strcat(valid_path, ".valid.h5");
        }
        if (!strcmp(valid_path, o->out)) {
            fprintf(stderr, "qwen-ft prepare: --valid-out %s is the same file as --out\n", valid_path);
            free(valid_path);
            return QF_EXIT_INPUT;
        }
    }
    if (prep_check_writable(o->out) || (valid_path && prep_check_writable(valid_path))) {
        free(valid_path);
        return QF_EXIT_INPUT;
    }

    size_t srclen = 1;
    for (int i = 0; i < o->in.n; i++) srclen += strlen(o->in.v[i]) + 1;
    char *source = qf_calloc(srclen, 1);
    for (int i = 0; i < o->in.n; i++) {
        if (i) strcat(source, "\n");
        strcat(source, o->in.v[i]);
    }

    qf_dataset_builder b;
    qf_dsb_init(&b);
    prep_doc doc = {0};
    prep_stats st = {0};
    st.t0 = qf_now();
    st.next_progress = PREP_PROGRESS_TOKENS;
    int rc = 0;
    for (int i = 0; i < o->in.n && rc == 0; i++) rc = prep_read_file(o, o->in.v[i], &b, &doc, &st);
    if (rc == 0 && b.n_docs == 0) {
        fprintf(stderr, "qwen-ft prepare: no documents in the input (%lld lines skipped); nothing written\n",
                (long long)st.skipped);
        rc = QF_EXIT_INPUT;
    }

    /* validation split: a seeded choice of documents; both files keep input order */
    int64_t n_valid = 0;
    int64_t *train_docs = NULL, *valid_docs = NULL;
    if (rc == 0 && valid_path) {
        int64_t n = b.n_docs;
        n_valid = llround(o->valid_fraction * (double)n);
        if (n_valid < 1 && n > 1) n_valid = 1;
        if (n_valid > n - 1) n_valid = n - 1;
        if (n_valid == 0)
            fprintf(stderr, "qwen-ft prepare: warning: only %lld document(s): no validation file written\n",
                    (long long)n);
    }
    qf_err e = {0};
    if (rc == 0 && n_valid > 0) {
        int64_t n = b.n_docs;
        int64_t *perm = qf_malloc((size_t)n * sizeof *perm);
        uint8_t *is_valid = qf_calloc((size_t)n, 1);
        qf_rng_permutation(o->seed, 0, n, perm);
        for (int64_t i = 0; i < n_valid; i++) is_valid[perm[i]] = 1;
        train_docs = qf_malloc((size_t)n * sizeof *train_docs);
        valid_docs = qf_malloc((size_t)n_valid * sizeof *valid_docs);
        int64_t nt = 0, nv = 0;
        for (int64_t d = 0; d < n; d++) {
            if (is_valid[d])
                valid_docs[nv++] = d;
            else
                train_docs[nt++] = d;
        }
        free(perm);
        free(is_valid);
        const char *tok_id = o->tok ? qf_tok_identity(o->tok) : ""; /* "": pre-tokenized input, no tokenizer */
        rc = qf_dataset_write(valid_path, &b, valid_docs, nv, o->vocab_size, o->eos_id, o->pad_id, tok_id, source, &e);
        if (rc == 0) {
            rc = qf_dataset_write(o->out, &b, train_docs, nt, o->vocab_size, o->eos_id, o->pad_id, tok_id, source, &e);
            if (rc) unlink(valid_path); /* no half result */
        }
        if (rc == 0) {
            int64_t vt = 0;
            for (int64_t i = 0; i < nv; i++) vt += (int64_t)(b.offsets[valid_docs[i] + 1] - b.offsets[valid_docs[i]]);
            printf("prepare: wrote %s: %lld documents, %lld tokens\n", o->out, (long long)nt,
                   (long long)(b.n_tokens - vt));
            printf("prepare: wrote %s: %lld documents, %lld tokens (validation, seed %llu)\n", valid_path,
                   (long long)nv, (long long)vt, (unsigned long long)o->seed);
        }
    } else if (rc == 0) {
        rc = qf_dataset_write(o->out, &b, NULL, 0, o->vocab_size, o->eos_id, o->pad_id,
                              o->tok ? qf_tok_identity(o->tok) : "", source, &e);
        if (rc == 0)
            printf("prepare: wrote %s: %lld documents, %lld tokens\n", o->out, (long long)b.n_docs,
                   (long long)b.n_tokens);
    }
    if (e.code) fprintf(stderr, "qwen-ft prepare: %s\n", e.msg);
    if (rc == 0) {
        printf("prepare: done: %lld documents, %lld tokens, %lld trained tokens, max token id %lld, "
               "skipped %lld bad line%s",
               (long long)st.docs, (long long)st.tokens, (long long)st.trained, (long long)b.max_token,
               (long long)st.skipped, st.skipped == 1 ? "" : "s");
        for (int64_t i = 0; i < st.skipped && i < PREP_SHOW_SKIPPED; i++)
            printf("%s%s", i ? ", " : " (", st.shown[i]);
        if (st.skipped > PREP_SHOW_SKIPPED) printf(", ...");
        printf("%s; %.1f s\n", st.skipped ? ")" : "", qf_now() - st.t0);
        fflush(stdout);
    }
    free(train_docs);
    free(valid_docs);
    free(doc.tok);
    free(doc.mask);
    qf_dsb_free(&b);
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
            return prep_bad_value("--vocab-size %lld is smaller than the vocabulary of the tokenizer %s (%lld ids)",
                                  (long long)o->vocab_size, o->tokenizer, (long long)tv);
        if (o->eos_id < 0) o->eos_id = qf_tok_special(o->tok, "<|endoftext|>");
        if (o->eos_id < 0)
            return prep_bad_value("the tokenizer %s has no <|endoftext|>: pass --eos-id", o->tokenizer);
    }
    if (o->eos_id < 0) o->eos_id = PREP_DEFAULT_EOS;
    if (o->pad_id < 0) o->pad_id = o->eos_id;
    if (o->vocab_size > 0 && o->eos_id >= o->vocab_size)
        return prep_bad_value("the eos id %lld is >= the vocabulary size %lld (--eos-id, --vocab-size)",
                              (long long)o->eos_id, (long long)o->vocab_size);
    if (o->vocab_size > 0 && o->pad_id >= o->vocab_size)
        return prep_bad_value("the pad id %lld is >= the vocabulary size %lld (--pad-id, --vocab-size)",
                              (long long)o->pad_id, (long long)o->vocab_size);
    return 0;
}

/* Loads the tokenizer (once) and its ChatML pieces, resolves the ids, builds; frees what it loaded. */
static int prep_run(prep_opts *o) {
    /* fail fast on paths, before loading anything or reading any record */
    for (int i = 0; i < o->in.n; i++)
        if (access(o->in.v[i], R_OK) != 0) {
            fprintf(stderr, "qwen-ft prepare: %s: cannot open: %s\n", o->in.v[i], strerror(errno));
            return QF_EXIT_INPUT;
        }
    qf_tokenizer *tok = NULL;
    qf_chatml cm;
    memset(&cm, 0, sizeof cm);
    qf_err e = {0};
    if (o->tokenizer) {
        if (qf_tok_load(o->tokenizer, &tok, &e)) {
            fprintf(stderr, "qwen-ft prepare: --tokenizer %s: %s\n", o->tokenizer, e.msg);
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

static int prepare_main(const void *args) {
    prep_opts o = *(const prep_opts *)args;
    int rc = prep_check_args(&o, args);
    return rc ? rc : prep_run(&o);
}

const qf_cmd qf_cmd_prepare = {
    .name = "prepare",
    .synopsis = "--in=F.jsonl [--in=G.jsonl]... --out=D.h5 [OPTION]...",
    .summary = "JSONL records -> packed HDF5 dataset (docs/formats.md)",
    .about = PREP_ABOUT,
    .opts = PREP_OPTS,
    .nopts = QF_NOPTS(PREP_OPTS),
    .size = sizeof(prep_opts),
    .run = prepare_main,
    .rank0 = 1, /* the other ranks wait for its exit code */
};
