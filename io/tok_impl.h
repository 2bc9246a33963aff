/* tok_impl.h — the inside of io/tokenizer.c, shared by its parts (not for callers: use tokenizer.h).
 *   tok_map.c       hash maps: token bytes -> id, merge pair (id, id) -> (rank, new id)
 *   tok_text.c      UTF-8 checks, NFC (utf8proc), GPT-2's byte <-> unicode table, regex splitting (PCRE2)
 *   tok_bpe.c       the merge loop (HF rank-of-pair and tiktoken rank-of-concatenation semantics)
 *   tok_vocab.c     the store the loaders fill: decoded bytes per id, added tokens, the byte tokens
 *   tok_hf.c        tokenizer.json        tok_tiktoken.c   qwen.tiktoken
 *   tok_export.c    a qwen.tiktoken written as an equivalent tokenizer.json
 *   tok_ids.c       qf_ids_push, the id array of tokenizer.h
 *   tokenizer.c     loading by path, encode (added tokens -> normalize -> pre-tokenize -> BPE), decode
 * Calls go one way, no file calling back into one that calls it: tokenizer.c -> tok_hf.c / tok_tiktoken.c ->
 * tok_vocab.c, tok_map.c, tok_text.c; tokenizer.c -> tok_bpe.c -> tok_map.c, tok_ids.c; tok_export.c (called
 * from src/) -> tok_tiktoken.c's pattern, tok_map.c, tok_text.c. tok_ids.c, tok_map.c and tok_text.c call no
 * other part. */
#ifndef QF_TOK_IMPL_H
#define QF_TOK_IMPL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "model_config.h" /* QF_MAX_VOCAB */
#include "tokenizer.h"

/* ---- tok_map.c ---------------------------------------------------------------------------------------------- */

/* Byte string -> int32 (open addressing; keys copied into an arena). */
typedef struct qf_tok_map {
    struct qf_tok_slot *slot; /* cap slots, cap a power of two */
    size_t cap, n;
    char *keys;
    size_t keys_n, keys_cap;
} qf_tok_map;
/* -1 when absent. */
int32_t qf_tok_map_get(const qf_tok_map *m, const char *key, size_t len);
/* Inserts or replaces; returns 1 when the key was already there. */
int qf_tok_map_put(qf_tok_map *m, const char *key, size_t len, int32_t val);
void qf_tok_map_free(qf_tok_map *m);

/* (a, b) id pair -> (rank, new id): HF merges. */
typedef struct qf_tok_pairs {
    struct qf_tok_pair *slot;
    size_t cap, n;
} qf_tok_pairs;
/* 0 when absent. */
int qf_tok_pairs_get(const qf_tok_pairs *p, int32_t a, int32_t b, int32_t *rank, int32_t *new_id);
/* Inserts or replaces (a later duplicate merge wins, as in HF's HashMap). */
void qf_tok_pairs_put(qf_tok_pairs *p, int32_t a, int32_t b, int32_t rank, int32_t new_id);
void qf_tok_pairs_free(qf_tok_pairs *p);

/* ---- the tokenizer ------------------------------------------------------------------------------------------ */

enum { QF_TOK_HF = 1, QF_TOK_TIKTOKEN = 2 };
#define QF_TOK_MAX_REGEX 4

/* Added tokens (HF added_tokens; tiktoken's special tokens), matched literally, leftmost-longest: one set for
 * the raw input, one (HF normalized=true tokens) for each normalized piece. */
typedef struct qf_tok_added {
    qf_tok_map text;      /* content -> id */
    size_t lens[64];      /* the distinct content lengths, longest first */
    int n_lens;
    uint8_t first[256];   /* 1 where some content starts with that byte */
} qf_tok_added;

struct qf_tokenizer {
    int kind;
    char identity[128];
    qf_tok_map vocab;     /* raw token bytes -> id, for the tokens BPE can produce */
    int32_t byte_id[256]; /* the id of each single byte */
    qf_tok_pairs merges;  /* HF only */
    int by_concat;        /* tiktoken: a pair's rank is the rank of its concatenation, not a merge list's */
    int whole_first;      /* a pre-token that is itself a token is emitted as it is (ignore_merges; tiktoken) */
    uint8_t *whole_ok;    /* otherwise: per id, 1 when BPE of the token's bytes gives that token (qf_tok_bpe_memo) */
    int nfc;              /* NFC normalizer */
    int nfc_whole;        /* tiktoken (tokenization_qwen.py): NFC on the whole text before special tokens */
    uint8_t *nfc_yes;     /* quick-check bits for code points < QF_TOK_NFC_TABLE (qf_tok_nfc_table) */
    pcre2_code *re[QF_TOK_MAX_REGEX]; /* pre-tokenizer splits ("Isolated"), applied in turn */
    int n_re;
    qf_tok_added added[2]; /* [0]: matched in the raw input; [1]: in normalized pieces (HF normalized=true) */
    /* decoding: the bytes of id i are dec_buf[dec_off[i] .. +dec_len[i]]; dec_len[i] < 0: no such id */
    int64_t n_ids, ids_cap;
    uint32_t *dec_off;
    int32_t *dec_len;
    char *dec_buf;
    size_t dec_used, dec_cap;
};

/* ---- tok_vocab.c -------------------------------------------------------------------------------------------- */

/* Sets the decoded bytes of id (growing the id space as needed). */
void qf_tok_set_decode(qf_tokenizer *t, int32_t id, const char *bytes, size_t len);
/* Adds an added/special token to set added[normalized]; 0, or an error naming path (empty content, too many
 * distinct lengths). */
int qf_tok_add(qf_tokenizer *t, const char *text, size_t len, int32_t id, int normalized, const char *path, qf_err *e);
/* Fills byte_id from vocab; an error naming path when a byte has no token. */
int qf_tok_bytes_check(qf_tokenizer *t, const char *path, qf_err *e);

/* ---- tok_hf.c, tok_tiktoken.c: the file loaders (called by tokenizer.c) ---------------------------------------- */

int qf_tok_hf_load(qf_tokenizer *t, const char *path, const char *buf, size_t len, qf_err *e);
int qf_tok_tiktoken_load(qf_tokenizer *t, const char *path, const char *buf, size_t len, qf_err *e);
/* Qwen v1's pre-tokenizer pattern (tok_tiktoken.c; tok_export.c writes it into tokenizer.json) */
extern const char qf_tok_qwen_v1_pattern[];

/* ---- tok_text.c --------------------------------------------------------------------------------------------- */

/* Offset of the first byte that is not valid UTF-8 (overlong forms, surrogates and > U+10FFFF are invalid), or
 * len when s[len] is valid. */
size_t qf_tok_utf8_check(const char *s, size_t len);
/* Quick-check bits: bit cp set when code point cp leaves any text of such code points unchanged under NFC
 * (a starter that NFC keeps and that never composes with what precedes it). malloc'd, QF_TOK_NFC_TABLE / 8 bytes. */
#define QF_TOK_NFC_TABLE 0x30000
uint8_t *qf_tok_nfc_table(void);
/* NFC of valid UTF-8 s[len]: returns s itself (*out_len = len) when the quick check says s is NFC already, else a
 * malloc'd normal form. NULL on failure (allocation). */
char *qf_tok_nfc(const uint8_t *yes, const char *s, size_t len, size_t *out_len);
/* GPT-2's bytes_to_unicode: the code point standing for byte b; and the byte a code point stands for (-1: none). */
uint32_t qf_tok_byte_char(uint8_t b);
int qf_tok_char_byte(uint32_t cp);
/* The raw bytes of a byte-level token string (UTF-8 of mapped characters) into out (at least len bytes);
 * returns their count, or -1 when a character is not one of the 256 byte characters. */
long qf_tok_unmap(const char *s, size_t len, char *out);
/* Compiles a pre-tokenizer pattern (UTF, UCP, JIT when available); literal = an HF {"String": ...} pattern.
 * NULL and an error naming path on failure. */
pcre2_code *qf_tok_regex_compile(const char *pattern, size_t len, int literal, const char *path, qf_err *e);

/* ---- tok_bpe.c ---------------------------------------------------------------------------------------------- */

/* Per-call scratch of the merge loop (the tokenizer itself stays read-only, so threads may share it). */
typedef struct qf_tok_scratch {
    struct qf_tok_sym *sym;
    size_t sym_cap;
    struct qf_tok_cand *heap;
    size_t heap_n, heap_cap;
} qf_tok_scratch;
/* Appends the ids of one pre-token p[n] (n >= 1). */
void qf_tok_bpe(const qf_tokenizer *t, qf_tok_scratch *s, const char *p, size_t n, qf_ids *out);
/* Fills whole_ok: which tokens' own bytes merge back into that one token (computed once at load, so that a
 * pre-token that is a whole token skips the merging and gives the same ids). */
void qf_tok_bpe_memo(qf_tokenizer *t);
void qf_tok_scratch_free(qf_tok_scratch *s);

/* The eos/bos/pad ids of generation_config.json and config.json beside tokfile must be special tokens of t
 * (tok_check.c); 0 or exit 2 naming the file, the key and the id. */
int qf_tok_check_siblings(const qf_tokenizer *t, const char *tokfile, qf_err *e);

#endif
