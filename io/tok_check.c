/* tok_check.c — a loaded tokenizer against the model files beside it (docs/reliability.md, "Tokenizer files"): the
 * eos/bos/pad ids that DIR/generation_config.json and DIR/config.json name must be special (added) tokens of the
 * tokenizer in DIR. A qwen.tiktoken cut at a line boundary is otherwise a valid, smaller vocabulary whose special
 * tokens move down (eos 75822 instead of 151643); the model's own files still say 151643, and that disagreement
 * is an exit 2 here instead of a dataset trained on wrong ids. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "out_file.h"
#include "tok_impl.h"

/* the id of an added/special token by its text, -1 when none (as tokenizer.c's qf_tok_special; the tables
 * directly, so that this file is called by tokenizer.c and calls only the lower tok_map.c) */
static int32_t tok_added_id(const qf_tokenizer *t, const char *text, size_t len) {
    for (int set = 0; set < 2; set++) {
        int32_t id = qf_tok_map_get(&t->added[set].text, text, len);
        if (id >= 0) return id;
    }
    return -1;
}

/* 0 when id is one of t's special/added tokens (not a reserved <|extra_N|> of a tiktoken); text: its bytes */
static int tok_is_special(const qf_tokenizer *t, json_int_t id, char *text, size_t cap) {
    text[0] = 0;
    if (id < 0 || id >= t->n_ids || t->dec_len[id] < 0) return -1;
    size_t len = (size_t)t->dec_len[id];
    snprintf(text, cap, "%.*s", (int)(len < 64 ? len : 64), t->dec_buf + t->dec_off[id]);
    int ok = tok_added_id(t, t->dec_buf + t->dec_off[id], len) == (int32_t)id;
    /* Qwen v1's reserved <|extra_N|> are never an eos/bos/pad: such an id means the specials moved (a cut file) */
    if (ok && t->kind == QF_TOK_TIKTOKEN && strncmp(text, "<|extra_", 8) == 0) ok = 0;
    return ok ? 0 : -1;
}

static int tok_check_key(const qf_tokenizer *t, const char *tokfile, const char *cfg, json_t *root, const char *key,
                         qf_err *e) {
    json_t *v = json_object_get(root, key);
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(x)) continue; /* null or absent: nothing stated */
        json_int_t id = json_integer_value(x);
        char text[80];
        if (tok_is_special(t, id, text, sizeof text) == 0) continue;
        if (id >= t->n_ids)
            return qf_err_set(e, QF_EXIT_INPUT, "%s: %s names id %lld, but the tokenizer %s has only %lld ids (its "
                              "<|endoftext|> is %d): the tokenizer file is cut short or belongs to another model",
                              cfg, key, (long long)id, tokfile, (long long)t->n_ids,
                              (int)tok_added_id(t, "<|endoftext|>", 13));
        return qf_err_set(e, QF_EXIT_INPUT, "%s: %s names id %lld, which is %s%s%s in the tokenizer %s, not a special "
                          "token (its <|endoftext|> is %d): the tokenizer file is cut short or belongs to another model",
                          cfg, key, (long long)id, text[0] ? "\"" : "", text[0] ? text : "no token",
                          text[0] ? "\"" : "", tokfile, (int)tok_added_id(t, "<|endoftext|>", 13));
    }
    return 0;
}

int qf_tok_check_siblings(const qf_tokenizer *t, const char *tokfile, qf_err *e) {
    char dir[4096];
    const char *slash = strrchr(tokfile, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - tokfile), tokfile);
    static const char *const files[] = {"generation_config.json", "config.json"};
    static const char *const keys[] = {"eos_token_id", "bos_token_id", "pad_token_id"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        char cfg[4200];
        snprintf(cfg, sizeof cfg, "%s/%s", dir, files[f]);
        qf_err ie = {0};
        size_t len = 0;
        char *buf = qf_in_slurp("model config", cfg, (size_t)1 << 24, &len, &ie);
        if (!buf) continue; /* absent or unreadable: its own reader reports it where it is needed */
        json_t *root = json_loadb(buf, len, 0, NULL);
        free(buf);
        int rc = 0;
        for (size_t k = 0; root && json_is_object(root) && k < sizeof keys / sizeof *keys && !rc; k++)
            rc = tok_check_key(t, tokfile, cfg, root, keys[k], e);
        json_decref(root);
        if (rc) return rc;
    }
    return 0;
}
