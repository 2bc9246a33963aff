/* serve_json.h — JSON-constrained decoding for `qwen-ft serve` (OpenAI's response_format {"type": "json_object"}):
 * a byte-level JSON recognizer (RFC 8259: objects, arrays, strings with escapes and \uXXXX, numbers, true / false /
 * null, whitespace) whose top-level value must be an object, and the token mask it gives a sampling step: a token is
 * allowed when every byte of it keeps the text a prefix of some JSON object; a stop token only once the object is
 * complete, and then nothing else. The reply is then a JSON object (finish "stop") or a prefix of one (cut by
 * max_tokens).
 *
 * The recognizer's state is a small value (the container stack as bits, at most QF_JSON_DEPTH deep), so a step
 * tries every token from a copy of it: O(bytes of the vocabulary) a step, with the masks of the last states seen
 * kept (qf_json_vocab.cache): a long string or number repeats its state step after step. Strings take any byte but
 * '"', '\\' and controls, as whole UTF-8 sequences (a token may end inside one; the next must finish it). */
#ifndef QF_SERVE_JSON_H
#define QF_SERVE_JSON_H
#include <stddef.h>
#include <stdint.h>
#include "tokenizer.h"

enum { QF_JSON_DEPTH = 64, QF_JSON_CACHE = 16 };

typedef struct qf_json_state {
    uint8_t mode;       /* where the next byte goes (serve_json.c: J_*) */
    uint8_t sub;        /* the mode's own counter: a literal's bytes matched, a \u escape's hex digits */
    uint8_t utf8;       /* continuation bytes a string's UTF-8 sequence still needs */
    uint8_t lo, hi;     /* the range of the next continuation byte */
    uint8_t depth;      /* open containers */
    uint64_t stack;     /* bit d - 1: the container at depth d is an object (1) or an array (0) */
} qf_json_state;

/* the token bytes of a vocabulary: bytes[off[id] .. off[id + 1]); kind[id]: 0 a text token, 1 a stop token, 2 a
 * token never allowed (other special tokens, ids the tokenizer lacks) */
typedef struct qf_json_vocab {
    int64_t V;
    uint8_t *bytes;
    int64_t *off;
    uint8_t *kind;
    struct { qf_json_state s; uint8_t *allow; uint64_t used; } cache[QF_JSON_CACHE]; /* [V/8 + 1] bit masks */
    uint64_t clock;
} qf_json_vocab;

void qf_json_start(qf_json_state *s);
/* Feeds b[n]: 0 while the text stays a prefix of a JSON object (s advanced), -1 at the first byte that cannot
 * (s then undefined). */
int qf_json_feed(qf_json_state *s, const uint8_t *b, size_t n);
/* 1 once the top-level object is complete (only a stop token may follow) */
int qf_json_done(const qf_json_state *s);

/* the vocabulary of tok for V model ids (ids past the tokenizer's: never allowed), stop ids[nstop] */
int qf_json_vocab_init(qf_json_vocab *v, const qf_tokenizer *tok, int64_t V, const int32_t *stop, int nstop,
                       qf_err *e);
void qf_json_vocab_free(qf_json_vocab *v);
/* logits[V]: every token state s does not allow set to -INFINITY (at least one stays: a stop token once done, else
 * the byte tokens that continue the text) */
void qf_json_mask(qf_json_vocab *v, const qf_json_state *s, float *logits);

#endif
