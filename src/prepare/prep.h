/* prep.h — `qwen-ft prepare` (its options come from src/cli/cmd_prepare.c): what its parts share: the options, the
 * document being built from one record, and the record functions. The parts:
 *   prep_build.c    the order of the phases: tokenizer, ids, read, split, summary, the atomic write
 *   prep_record.c   one record -> one document: the dispatch on the record's kind, pre-tokenized records
 *   prep_doc.c      the growing document and the JSON helpers every record function uses
 *   prep_chat.c     text and conversation records (need the tokenizer); the ChatML rendering every chat-like
 *                   record goes through
 *   prep_formats.c  Alpaca records and --map field=role records
 *   prep_split.c    normalised content -> content id; the hash split; duplicates across all ranks (--dedup)
 *   prep_check.c    the summary (--check and every prepare): counts, histogram, duplicates, packing
 *   prep_parallel.c byte ranges of the inputs per rank, the reading pass (records -> spill files), the
 *                   collective write of the datasets */
#ifndef QF_PREP_H
#define QF_PREP_H
#include <jansson.h>
#include <nettle/sha2.h>
#include <stddef.h>
#include <stdint.h>
#include "chat_template.h"
#include "chatml.h"
#include "tokenizer.h"

/* roles of --map beyond qf_chat_role (QF_CHAT_USER, QF_CHAT_ASSISTANT) */
#define PREP_ROLE_SYSTEM (-1)
#define PREP_ROLE_TEXT (-3)

/* --truncate: what happens to a record longer than the length limit (--max-len, else --seq-len) */
typedef enum {
    PREP_TRUNC_DEFAULT = 0, /* conversations: cut after the last assistant turn that fits; text: split by packing */
    PREP_TRUNC_RIGHT,       /* keep the first N tokens */
    PREP_TRUNC_LEFT,        /* keep the last N tokens */
    PREP_TRUNC_DROP         /* leave the record out (counted) */
} prep_truncate;

typedef struct prep_map_entry {
    const char *field; /* record field (points into argv) */
    int role;          /* QF_CHAT_USER, QF_CHAT_ASSISTANT, PREP_ROLE_SYSTEM or PREP_ROLE_TEXT */
} prep_map_entry;

typedef struct prep_opts {
    const char **in; /* [n_in] input patterns (files or globs), in order */
    int n_in;
    const char *out;
    const char *valid_out; /* NULL: derived from out */
    const char *tokenizer; /* NULL: none given */
    const char *system;    /* --system: system prompt of conversations without one; NULL: the template's */
    qf_chat_mask mask;     /* --mask qwen | assistant (default: qwen under qwen1, else assistant) */
    int mask_given;
    const char *template_name; /* --template NAME | auto; NULL: the tokenizer directory's, else qwen1 */
    int64_t max_len;           /* --max-len: 0 = --seq-len */
    prep_truncate truncate;
    double valid_fraction;
    uint64_t seed;
    int64_t vocab_size;     /* 0: not given (with a tokenizer: resolved to its vocabulary size) */
    int64_t eos_id, pad_id; /* -1: not given (resolved before any record is read) */
    int skip_bad;
    /* issue 15: formats, --check, splits, scale */
    prep_map_entry *map; /* --map field=role,... (n_map entries, in the order given) */
    int n_map;
    int map_text;    /* the map names a text field (then it names nothing else) */
    int check;       /* --check: read and report, write nothing */
    int dedup;       /* --dedup: keep the first of exactly duplicated records */
    int64_t seq_len; /* --seq-len: 0 = not given */
    int rank, size;  /* MPI_COMM_WORLD */
    /* filled by the command once the tokenizer is loaded (NULL without --tokenizer) */
    const qf_tokenizer *tok;
    const qf_chat_template *tmpl; /* NULL with a tokenizer that lacks the ChatML tokens: tmpl_why says so */
    char tmpl_why[512];
    qf_tmpl_id tmpl_id;  /* the template picked (recorded as the dataset's attribute chat_template) */
    char *tmpl_text;     /* its Jinja text (carried as chat_template.jinja); NULL when unknown (a --template NAME
                          * over a tokenizer whose own template is another) */
    size_t tmpl_len;
} prep_opts;

/* Record kinds, for the summary */
typedef enum {
    PREP_KIND_PRETOKENIZED,
    PREP_KIND_TEXT,
    PREP_KIND_CONVERSATIONS,
    PREP_KIND_MESSAGES,
    PREP_KIND_ALPACA,
    PREP_KIND_MAP,
    PREP_KIND_COUNT
} prep_kind;
extern const char *const prep_kind_names[PREP_KIND_COUNT];

/* One document being built from a record: tok[n], mask[n] (1 = the token is a training target), and what the
 * summary and the split need to know of it. */
typedef struct prep_doc {
    uint32_t *tok;
    uint8_t *mask;
    int64_t n, cap;
    int kind;                   /* prep_kind, set by the dispatcher */
    int64_t turns, empty_turns; /* chat turns (system excluded); turns whose text is empty or only whitespace */
    int unanswered;             /* a conversation whose last turn is a user turn (no reply to train on) */
    int64_t *turn_end;          /* conversations: the token index after each assistant turn */
    int64_t n_turn_end, cap_turn_end;
    int64_t cut;                /* tokens removed by the length policy */
    int cut_in_answer;          /* the default policy cut inside the first answer (none fitted) */
    struct sha256_ctx content;  /* the normalised content, fed by prep_content_* (prep_split.c) */
} prep_doc;

/* What a record function returns */
enum {
    PREP_OK = 0,
    PREP_BAD = 1,  /* the record is malformed: an error, or skipped with --skip-bad */
    PREP_FATAL = 2, /* the record cannot be handled whatever --skip-bad says (no --tokenizer): always an error */
    PREP_DROP = 3   /* longer than the limit under --truncate drop: left out, counted */
};

/* Converts one parsed record into doc; on failure writes the reason into why[cap]. */
typedef int (*prep_record_fn)(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap);

/* prep_doc.c: grows doc to hold n tokens */
void prep_doc_reserve(prep_doc *d, int64_t n);
/* "an object", "a string", ... for messages */
const char *prep_json_type(const json_t *v);
/* json_object_get, with JSON null counted as absent */
json_t *prep_get(json_t *rec, const char *key);
/* Parses one JSONL line into doc (dispatching on the record's keys, --map first). PREP_OK, or PREP_BAD /
 * PREP_FATAL with the reason in why. (prep_record.c, with the three helpers above) */
int prep_record(const prep_opts *o, const char *line, size_t len, prep_doc *doc, char *why, size_t cap);

/* The whole command for complete options (prep_build.c): loads o->tokenizer, resolves the ids, reads, splits,
 * reports and writes on every rank (collective); every rank returns the same exit code, rank 0 prints. */
int prep_run(prep_opts *o);

/* {"text": "..."} -> the ids of the text + the eos id; every token is a target */
int prep_text(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap);
/* text[len] (the value of field `key`) as a plain-text document */
int prep_text_value(const prep_opts *o, const char *key, const char *text, size_t len, prep_doc *doc, char *why,
                    size_t cap);
/* A conversation read from a record: messages (pointing into the record), tools, and what it owns (hold). */
typedef struct prep_conv {
    qf_chat_msg *msg;
    size_t n, cap;
    json_t *tools; /* borrowed from the record or held */
    json_t *hold;  /* an array holding what was parsed from JSON strings (tools, function calls) */
} prep_conv;
void prep_conv_push(prep_conv *c, qf_chat_msg m);
void prep_conv_free(prep_conv *c);
/* {"conversations": [{"from", "value"}...], "system"?, "tools"?} (ShareGPT; from: system, human/user, gpt/assistant,
 * function_call, observation/tool) or {"messages": [{"role", "content", "reasoning_content"?, "tool_calls"?}...],
 * "tools"?} -> c; key = the record's field. PREP_OK or PREP_BAD with why. */
int prep_conv_parse(json_t *rec, prep_conv *c, const char **key, char *why, size_t cap);
/* {"conversations": ...} or {"messages": ...} -> the template's document */
int prep_chat(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap);
/* The document of a conversation under o->tmpl (key names the record's field in messages); --system when it has
 * no system message; fills the turn counts, the assistant turn ends and the content id. */
int prep_chat_render(const prep_opts *o, const char *key, const prep_conv *c, prep_doc *doc, char *why, size_t cap);
/* the length policy on a finished document (prep_record.c): PREP_OK (maybe cut) or PREP_DROP */
int prep_length_policy(const prep_opts *o, prep_doc *doc);
/* {"instruction", "input", "output", "system"?, "history"?: [[q, a], ...]} (Alpaca) */
int prep_alpaca(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap);
/* a record read through --map */
int prep_mapped(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap);
/* 1 when rec holds a field that --map names */
int prep_map_applies(const prep_opts *o, json_t *rec);
/* the role of a role name (system; user or human; assistant or gpt), or -2 */
int prep_role_of(const char *name);
/* Parses "field=role,field=role" into o->map (appending). 0, or -1 with the reason in why. */
int prep_map_parse(prep_opts *o, const char *spec, char *why, size_t cap);

/* Normalised content (prep_split.c): every record kind feeds its pieces in order; identical content gives the
 * same 128-bit content id whatever the record's layout (docs/formats.md, "Splits and duplicates"). */
void prep_content_begin(prep_doc *d);
/* a text piece of a role: tag 's' system, 'u' user, 'a' assistant, 't' plain text */
void prep_content_text(prep_doc *d, char tag, const char *s, size_t n);
/* the ids and masks of a pre-tokenized record */
void prep_content_ids(prep_doc *d, const uint32_t *ids, const uint8_t *mask, int64_t n);
void prep_content_id(prep_doc *d, uint8_t id[16]);

#endif
