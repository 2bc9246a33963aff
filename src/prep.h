/* prep.h — what the parts of `qwen-ft prepare` share: its options (the table is in cmd_prepare.c), the document being built from one record, and
 * the record functions (cmd_prepare.c: the command and pre-tokenized records; prep_chat.c: text and
 * conversation records, which need the tokenizer). */
#ifndef QF_PREP_H
#define QF_PREP_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "chatml.h"
#include "tokenizer.h"
#include "options.h"

typedef struct prep_opts {
    qf_strlist in; /* input JSONL files, in order */
    const char *out;
    const char *valid_out; /* NULL: derived from out */
    const char *tokenizer; /* NULL: none given */
    const char *system;    /* default system prompt of conversations */
    const char *mask_name; /* --mask qwen | assistant */
    qf_chat_mask mask;     /* ... as the enum */
    double valid_fraction;
    uint64_t seed;
    int64_t vocab_size;     /* 0: not given (with a tokenizer: resolved to its vocabulary size) */
    int64_t eos_id, pad_id; /* -1: not given (resolved before any record is read) */
    int skip_bad;
    /* filled by the command once the tokenizer is loaded (NULL without --tokenizer) */
    const qf_tokenizer *tok;
    const qf_chatml *chatml; /* NULL with a tokenizer that lacks the ChatML tokens: chatml_why says so */
    char chatml_why[512];
} prep_opts;

/* One document being built from a record: tok[n], mask[n] (1 = the token is a training target). */
typedef struct prep_doc {
    uint32_t *tok;
    uint8_t *mask;
    int64_t n, cap;
} prep_doc;

/* What a record function returns */
enum {
    PREP_OK = 0,
    PREP_BAD = 1,  /* the record is malformed: an error, or skipped with --skip-bad */
    PREP_FATAL = 2 /* the record cannot be handled whatever --skip-bad says (no --tokenizer): always an error */
};

/* Converts one parsed record into doc; on failure writes the reason into why[cap]. */
typedef int (*prep_record_fn)(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap);

void prep_doc_reserve(prep_doc *d, int64_t n);
/* "an object", "a string", ... for messages */
const char *prep_json_type(const json_t *v);
/* json_object_get, with JSON null counted as absent */
json_t *prep_get(json_t *rec, const char *key);

/* {"text": "..."} -> the ids of the text + the eos id; every token is a target */
int prep_text(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap);
/* {"conversations": [{"from", "value"}...]} or {"messages": [{"role", "content"}...]} -> ChatML (io/chatml.h) */
int prep_chat(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap);

#endif
