/* tokenizer.h — Qwen's byte-level BPE tokenizers in C (no Python at run time).
 *
 * Two on-disk forms, both found from one path (a file, or a directory holding one of them):
 *   tokenizer.json   HF `tokenizers` (Qwen1.5 / 2 / 2.5 / 3): NFC normalizer, a Split pre-tokenizer regex
 *                    (run with PCRE2, UTF mode, JIT) + ByteLevel, a BPE model (vocab + ranked merges), added tokens
 *                    (<|endoftext|>, <|im_start|>, <|im_end|>, ...) matched literally before anything else.
 *   qwen.tiktoken    Qwen (v1): base64 token bytes + rank per line (tiktoken's BPE: lowest-rank pair whose
 *                    concatenation is a token), Qwen v1's regex, NFC of the whole text first (as
 *                    tokenization_qwen.py), and its special tokens numbered from the number of ranks on (151643
 *                    for Qwen's file): <|endoftext|>, <|im_start|>, <|im_end|>, <|extra_0|> ... <|extra_204|>.
 * Encoding = HF's `tokenizer(text)["input_ids"]` (no BOS/EOS added; special tokens in the text are recognised,
 * as Qwen's finetune.py relies on); decoding = `tokenizer.decode(ids)` (special tokens kept as their text).
 * Semantics in detail: docs/formats.md "Tokenizer"; the parts: tok_impl.h. A loaded tokenizer is read-only:
 * threads may encode and decode with one tokenizer at the same time. The library prints nothing.
 * Errors (missing/malformed file, unsupported configuration) come back in qf_err with exit code 2 and the file
 * name. */
#ifndef QF_TOKENIZER_H
#define QF_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>
#include "util.h"

typedef struct qf_tokenizer qf_tokenizer;

/* A growable array of token ids (the caller owns v; free(v) when done). */
typedef struct qf_ids {
    int32_t *v;
    size_t n, cap;
} qf_ids;
void qf_ids_push(qf_ids *a, int32_t id);

/* path: tokenizer.json, qwen.tiktoken, or a directory containing one of them (an HF model directory). */
int qf_tok_load(const char *path, qf_tokenizer **out, qf_err *e);
void qf_tok_free(qf_tokenizer *t);

/* Appends the ids of utf8[len] to out. Invalid UTF-8 is an error (exit code 2, naming the byte offset; nothing
 * appended); after another error out may hold part of the ids. */
int qf_tok_encode(const qf_tokenizer *t, const char *utf8, size_t len, qf_ids *out, qf_err *e);
/* The text of ids[n] (NUL-terminated, malloc'd; the caller frees) and, when len is not NULL, its length in bytes
 * (a token of byte 0 puts a NUL inside the text: use the length). Bytes that do not form complete UTF-8 at the end
 * of a token sequence are kept as they are (the caller decides how to print them). Unknown ids: error (exit code
 * 2), NULL. */
char *qf_tok_decode(const qf_tokenizer *t, const int32_t *ids, size_t n, size_t *len, qf_err *e);

/* The bytes of token id (its decoded length, >= 0), or -1 for an unknown id. */
int64_t qf_tok_len(const qf_tokenizer *t, int32_t id);
/* The text as the tokenizer's normalizer leaves it (NFC where the tokenizer has one): text itself when nothing
 * changes (*out_len = len), else a malloc'd copy the caller frees. Chat templates normalize each piece of content
 * with it, so that the rendered text's bytes are the bytes its tokens decode to (io/chat_template.c). */
const char *qf_tok_normalize(const qf_tokenizer *t, const char *text, size_t len, size_t *out_len);

/* The id of a special/added token by its text ("<|im_start|>"), or -1 when the tokenizer has none. */
int32_t qf_tok_special(const qf_tokenizer *t, const char *text);
/* Size of the id space (largest id + 1, added tokens included). */
int64_t qf_tok_vocab_size(const qf_tokenizer *t);
/* "hf-tokenizer.json sha256:<hex>" or "qwen.tiktoken sha256:<hex>": recorded in datasets (docs/formats.md). */
const char *qf_tok_identity(const qf_tokenizer *t);
/* The identity qf_tok_load would give the tokenizer at path (a file, or a directory's tokenizer.json / qwen.tiktoken)
 * from its bytes alone, without parsing it; "" when a directory has none. 0 or exit 2 (unreadable). */
int qf_tok_file_identity(const char *path, char *out, size_t cap, qf_err *e);

/* A qwen.tiktoken tokenizer written as an HF tokenizer.json that encodes the same (io/tok_export.c): exported Qwen v1
 * models then load with transformers' Qwen2TokenizerFast. An HF tokenizer is refused (copy its file instead). */
int qf_tok_write_hf_json(const qf_tokenizer *t, const char *path, qf_err *e);

#endif
