/* model_tok.h — the tokenizer a model source records (docs/reliability.md, "Tokenizer files"): an HF directory's
 * tokenizer.json / qwen.tiktoken (its identity from the bytes), an HDF5 model's root attribute `tokenizer` (written
 * by `qwen-ft import`). A checkpoint records none of its own. */
#ifndef QF_MODEL_TOK_H
#define QF_MODEL_TOK_H
#include <stddef.h>

/* The identity ("qwen.tiktoken sha256:..."), or "" when the source records none or cannot be read. */
void qf_model_source_tok_identity(const char *from, char *out, size_t cap);

#endif
