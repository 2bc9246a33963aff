/* tok_vocab.c — the tokenizer's store, as the file loaders fill it (tok_hf.c, tok_tiktoken.c): decoded bytes per
 * id, added/special tokens, the byte tokens. The dependencies run one way: tokenizer.c -> the loaders -> this
 * store and the maps (tok_map.c); nothing here calls back into a loader or into tokenizer.c. */
#include <string.h>

#include "tok_impl.h"

void qf_tok_set_decode(qf_tokenizer *t, int32_t id, const char *bytes, size_t len) {
    if (id >= t->ids_cap) {
        int64_t cap = t->ids_cap ? 2 * t->ids_cap : 1024;
        while (cap <= id) cap *= 2;
        t->dec_off = qf_realloc(t->dec_off, (size_t)cap * sizeof *t->dec_off);
        t->dec_len = qf_realloc(t->dec_len, (size_t)cap * sizeof *t->dec_len);
        for (int64_t i = t->ids_cap; i < cap; i++) t->dec_off[i] = 0, t->dec_len[i] = -1;
        t->ids_cap = cap;
    }
    if (id >= t->n_ids) t->n_ids = id + 1;
    if (t->dec_used + len > t->dec_cap) {
        t->dec_cap = 2 * (t->dec_used + len) + 4096;
        t->dec_buf = qf_realloc(t->dec_buf, t->dec_cap);
    }
    if (len) memcpy(t->dec_buf + t->dec_used, bytes, len); /* an empty token: dec_buf may still be NULL */
    t->dec_off[id] = (uint32_t)t->dec_used;
    t->dec_len[id] = (int32_t)len;
    t->dec_used += len;
}

int qf_tok_add(qf_tokenizer *t, const char *text, size_t len, int32_t id, int normalized, const char *path, qf_err *e) {
    qf_tok_added *a = &t->added[normalized ? 1 : 0];
    if (!len) return qf_err_set(e, QF_EXIT_INPUT, "%s: an added token is empty", path);
    qf_tok_map_put(&a->text, text, len, id);
    a->first[(uint8_t)text[0]] = 1;
    int k = 0;
    while (k < a->n_lens && a->lens[k] > len) k++;
    if (k < a->n_lens && a->lens[k] == len) return 0;
    if (a->n_lens == (int)(sizeof a->lens / sizeof a->lens[0]))
        return qf_err_set(e, QF_EXIT_INPUT, "%s: added tokens of more than %d different lengths", path, a->n_lens);
    memmove(a->lens + k + 1, a->lens + k, (size_t)(a->n_lens - k) * sizeof a->lens[0]);
    a->lens[k] = len;
    a->n_lens++;
    return 0;
}

int qf_tok_bytes_check(qf_tokenizer *t, const char *path, qf_err *e) {
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = qf_tok_map_get(&t->vocab, &c, 1);
        if (t->byte_id[b] < 0)
            return qf_err_set(e, QF_EXIT_INPUT, "%s: byte 0x%02x has no token (a byte-level BPE has all 256)", path, b);
    }
    return 0;
}
