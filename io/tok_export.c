/* tok_export.c — a qwen.tiktoken tokenizer (Qwen v1) written as an equivalent HF tokenizer.json, so that an
 * exported Qwen v1 model (Qwen2 layout) loads in transformers with Qwen2TokenizerFast, without remote code.
 *
 * Equivalence with tiktoken's BPE (rank of the concatenation decides; a piece that is a token is taken whole):
 *   vocab   every rank's bytes, in GPT-2's byte-level characters, id = rank;
 *   merges  every pair (x, y) of tokens whose concatenation xy is a token, ordered by the rank of xy (ties: the
 *           shorter x first): HF then merges, at each step, the adjacent pair of lowest merge index, i.e. the pair
 *           whose concatenation has the lowest rank, as tiktoken does;
 *   ignore_merges = true (a pre-token that is a token is emitted whole);
 *   normalizer NFC, pre_tokenizer Split(Qwen v1's pattern, Isolated) + ByteLevel(use_regex false), ByteLevel
 *   decoder, the special tokens as added tokens. (tokenization_qwen.py applies NFC to the whole text before the
 *   special tokens are cut out, HF to each piece between them: the two differ only where a special token is
 *   directly followed by a combining mark, which NFC composes with the token's '>'.) tests/unit/test_tok_export.c
 *   checks the result against tiktoken's goldens. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "tok_impl.h"

/* the byte-level string of raw bytes b[n] (UTF-8, malloc'd) */
static char *tok_mapped(const char *b, size_t n) {
    char *o = qf_malloc(2 * n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = qf_tok_byte_char((uint8_t)b[i]);
        if (cp < 0x80) o[k++] = (char)cp;
        else o[k++] = (char)(0xC0 | (cp >> 6)), o[k++] = (char)(0x80 | (cp & 0x3F)); /* all < U+0800 */
    }
    o[k] = 0;
    return o;
}

typedef struct tok_merge {
    int32_t rank, left_len, a, b;
} tok_merge;
static int tok_merge_cmp(const void *x, const void *y) {
    const tok_merge *p = x, *q = y;
    if (p->rank != q->rank) return p->rank < q->rank ? -1 : 1;
    return (p->left_len > q->left_len) - (p->left_len < q->left_len);
}

int qf_tok_write_hf_json(const qf_tokenizer *t, const char *path, qf_err *e) {
    const char *pattern = qf_tok_qwen_v1_pattern;
    if (t->kind != QF_TOK_TIKTOKEN) return qf_err_set(e, QF_EXIT_INPUT, "%s: only a qwen.tiktoken is converted", path);
    int64_t nrank = (int64_t)t->vocab.n;
    json_t *vocab = json_object();
    size_t cap = 1024, n = 0;
    tok_merge *mg = qf_malloc(cap * sizeof *mg);
    for (int64_t id = 0; id < nrank; id++) {
        const char *b = t->dec_buf + t->dec_off[id];
        size_t len = (size_t)t->dec_len[id];
        char *s = tok_mapped(b, len);
        json_object_set_new(vocab, s, json_integer(id));
        free(s);
        for (size_t k = 1; k < len; k++) { /* every split into two tokens */
            int32_t a = qf_tok_map_get(&t->vocab, b, k), c = qf_tok_map_get(&t->vocab, b + k, len - k);
            if (a < 0 || c < 0) continue;
            if (n == cap) mg = qf_realloc(mg, (cap *= 2) * sizeof *mg);
            mg[n++] = (tok_merge){(int32_t)id, (int32_t)k, a, c};
        }
    }
    qsort(mg, n, sizeof *mg, tok_merge_cmp);
    json_t *merges = json_array();
    for (size_t i = 0; i < n; i++) {
        char *x = tok_mapped(t->dec_buf + t->dec_off[mg[i].a], (size_t)t->dec_len[mg[i].a]);
        char *y = tok_mapped(t->dec_buf + t->dec_off[mg[i].b], (size_t)t->dec_len[mg[i].b]);
        json_array_append_new(merges, json_pack("[s,s]", x, y));
        free(x), free(y);
    }
    free(mg);
    json_t *added = json_array();
    for (int64_t id = nrank; id < t->n_ids; id++) {
        if (t->dec_len[id] < 0) continue;
        json_array_append_new(added, json_pack("{s:I,s:s%,s:b,s:b,s:b,s:b,s:b}", "id", (json_int_t)id, "content",
                                               t->dec_buf + t->dec_off[id], (size_t)t->dec_len[id], "single_word", 0,
                                               "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1));
    }
    json_t *bytelevel = json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0,
                                  "use_regex", 0);
    json_t *root = json_pack(
        "{s:s,s:n,s:n,s:o,s:{s:s},s:{s:s,s:[{s:s,s:{s:s},s:s,s:b},O]},s:n,s:O,"
        "s:{s:s,s:n,s:n,s:n,s:n,s:b,s:b,s:b,s:o,s:o}}",
        "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer", "type", "NFC",
        "pre_tokenizer", "type", "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", pattern, "behavior",
        "Isolated", "invert", 0, bytelevel, "post_processor", "decoder", bytelevel, "model", "type", "BPE", "dropout",
        "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
        "ignore_merges", 1, "vocab", vocab, "merges", merges);
    json_decref(bytelevel);
    if (!root) return qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot build the tokenizer.json", path);
    int rc = json_dump_file(root, path, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return rc ? qf_err_set(e, QF_EXIT_INPUT, "%s: cannot write", path) : 0;
}
