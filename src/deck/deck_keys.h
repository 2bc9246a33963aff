/* deck_keys.h — the one table of deck keys: every key the deck accepts, declared once with its type, default,
 * allowed values, "auto" resolution, help text, DeepSpeed equivalent and where it lands in qf_deck.
 * deck.c parses, validates, prints and documents the deck from this table alone; docs/deck.md is generated from
 * it (qf_deck_print_keys_markdown). */
#ifndef QF_DECK_KEYS_H
#define QF_DECK_KEYS_H
#include <stddef.h>
#include <stdint.h>
#include "deck.h"

typedef enum {
    QF_KT_BOOL,       /* int field: 0 / 1 */
    QF_KT_INT,        /* int field; integral floats accepted */
    QF_KT_INT64,      /* int64_t field; integral floats accepted */
    QF_KT_UINT64,     /* uint64_t field (seeds); integral floats accepted */
    QF_KT_FLOAT,      /* double field; integers accepted */
    QF_KT_STRING,     /* char[size] field; `choices` (if any) restricts the value */
    QF_KT_ENUM,       /* enum field; `choices[i]` is the name of enum value i (matched case-insensitively) */
    QF_KT_FLOAT_PAIR  /* two doubles (off, off2), written [a, b] (optimizer betas) */
} qf_key_type;

enum {
    QF_KF_UNSET = 1u << 0,        /* the default is a "not given" sentinel: qf_deck_print omits the key when unset */
    QF_KF_GT_MIN = 1u << 1,       /* value must be > min (not >= min) */
    QF_KF_BOOL_ENUM = 1u << 2,    /* enum that also accepts true (= choices[1]) / false (= choices[0]) */
    QF_KF_AUTO_SENTINEL = 1u << 3,/* "auto" stores -1; the trainer resolves it (printed back as "auto") */
    QF_KF_AUTO_LR = 1u << 4,      /* "auto" = optimizer.params.lr, resolved after the whole deck is read */
    QF_KF_AUTO_UNSET = 1u << 5,   /* "auto" = not given (the batch rule derives it) */
    QF_KF_LT_MAX = 1u << 6        /* value must be < max (not <= max) */
};

/* What a key does, for the audit (tests/unit/test_deck_audit.c) and the run header. */
typedef enum {
    QF_FATE_ACTS = 0,   /* the engine reads the field (the audit finds a read outside the deck layer) */
    QF_FATE_DECK,       /* acts while the deck is resolved (`why` says how; the audit has a behavioural case) */
    QF_FATE_ALIAS,      /* DeepSpeed's name for the key `alias` (same field, same checks) */
    QF_FATE_NO_EFFECT   /* accepted so that DeepSpeed decks run; no effect here (`why`); listed in the header */
} qf_key_fate;

/* Bit of a scheduler type in qf_deck_key.sched_mask. */
#define QF_SCHED_BIT(t) (1u << (t))

typedef struct qf_deck_key {
    const char *path;              /* "zero_optimization.offload_optimizer.device" */
    qf_key_type type;
    size_t off, off2;              /* offsetof(qf_deck, field); off2 only for QF_KT_FLOAT_PAIR */
    size_t size;                   /* QF_KT_STRING: buffer size */
    const char *def;               /* default, as deck text ("5e8", "true", "\"log\"" is written log) */
    const char *autov;             /* what "auto" resolves to, as deck text; NULL = "auto" not accepted */
    double min, max;               /* numeric range, inclusive unless GT_MIN / LT_MAX; min == max == 0: none */
    unsigned flags;
    const char *const *choices;    /* QF_KT_ENUM names / QF_KT_STRING allowed values; NULL-terminated */
    const char *ds;                /* DeepSpeed equivalent, or "qwen-ft only (...)" */
    const char *help;              /* one line */
    const char *doc_default;       /* shown in the docs instead of def when non-NULL */
    const char *doc_auto;          /* shown in the docs instead of autov when non-NULL */
    unsigned sched_mask;           /* scheduler.params.*: the scheduler types that take it (0 = not such a key) */
    const char *field;             /* the qf_deck field's name (the audit looks for reads of it) */
    qf_key_fate fate;
    const char *why;               /* QF_FATE_NO_EFFECT: why it has none; QF_FATE_DECK: how it acts */
    const char *alias;             /* QF_FATE_ALIAS: the key it stands for */
} qf_deck_key;

/* The table, in documentation order (keys of one group are contiguous). */
const qf_deck_key *qf_deck_keys_table(int *n);
/* 1 if the key is a DeepSpeed config key under the same path (so a `deepspeed` JSON may give it). */
int qf_deck_keys_is_ds(const qf_deck_key *k);
/* Why a DeepSpeed key or section that qwen-ft does not have is refused ("pipeline parallelism"), or NULL. */
const char *qf_deck_keys_refused(const char *path);
/* Index of the key with this exact path, or -1. */
int qf_deck_keys_find(const char *path);
/* 1 if path names a group of keys (some key path starts with path + "."). */
int qf_deck_keys_is_group(const char *path);
/* Closest key path for a "did you mean", or NULL when nothing is close. */
const char *qf_deck_keys_suggest(const char *path);
/* Closest of a NULL-terminated list of names, or NULL. */
const char *qf_deck_keys_suggest_in(const char *word, const char *const *names);
/* Index of name in k->choices (case-insensitive), or -1. */
int qf_deck_keys_choice(const qf_deck_key *k, const char *name);

/* Typed stores into / loads from the deck field the key describes. */
void qf_deck_keys_store_int(const qf_deck_key *k, qf_deck *d, int64_t v);   /* BOOL, INT, INT64, UINT64, ENUM */
void qf_deck_keys_store_float(const qf_deck_key *k, qf_deck *d, double v);  /* FLOAT */
void qf_deck_keys_store_pair(const qf_deck_key *k, qf_deck *d, double a, double b);
int qf_deck_keys_store_string(const qf_deck_key *k, qf_deck *d, const char *s); /* -1 if too long */
int64_t qf_deck_keys_get_int(const qf_deck_key *k, const qf_deck *d);
double qf_deck_keys_get_float(const qf_deck_key *k, const qf_deck *d);
void qf_deck_keys_get_pair(const qf_deck_key *k, const qf_deck *d, double *a, double *b);
const char *qf_deck_keys_get_string(const qf_deck_key *k, const qf_deck *d);

/* Applies deck text (a default or an "auto" value) to the key's field. Returns 0, or -1 if text is malformed
 * (a bug in the table; the unit test checks every default and auto value). */
int qf_deck_keys_apply_text(const qf_deck_key *k, qf_deck *d, const char *text);
/* 1 if the key's field currently holds the value of text (used to omit unset keys when printing). */
int qf_deck_keys_equals_text(const qf_deck_key *k, const qf_deck *d, const char *text);

#endif
