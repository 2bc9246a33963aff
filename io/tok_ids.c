/* tok_ids.c — qf_ids, the growable array of token ids (tokenizer.h). At the bottom of the tokenizer: the merge
 * loop (tok_bpe.c), the encoder (tokenizer.c) and callers (io/chatml.c, src/) append to it; it calls nothing of
 * theirs. */
#include "tokenizer.h"

void qf_ids_push(qf_ids *a, int32_t id) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->v = qf_realloc(a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = id;
}
