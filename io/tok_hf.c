/* tok_hf.c — HF `tokenizers` tokenizer.json (as shipped with Qwen1.5 / 2 / 2.5 / 3) into a qf_tokenizer.
 *
 * Accepted (what Qwen's files use; anything else is rejected naming the key, never silently ignored):
 *   normalizer     null | NFC | Sequence of NFC
 *   pre_tokenizer  ByteLevel | Sequence [Split..., ByteLevel]; Split: {"Regex"|"String"} pattern, behavior
 *                  Isolated, invert false; ByteLevel: add_prefix_space false, use_regex true adds GPT-2's pattern
 *   model          BPE: vocab {token: id}, merges "a b" or ["a", "b"] (rank = position), ignore_merges,
 *                  no dropout, no byte_fallback, no subword prefix/suffix
 *   decoder        ByteLevel;   post_processor  null | ByteLevel (no BOS/EOS added)
 *   added_tokens   [{id, content, normalized, ...}] without lstrip / rstrip / single_word */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"

/* GPT-2's pattern: the ByteLevel pre-tokenizer's own split when use_regex is true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct hf_ctx {
    qf_tokenizer *t;
    const char *path;
    qf_err *e;
    qf_tok_map str_id; /* vocab as written (byte-level characters) -> id, for the merges */
} hf_ctx;

static int bad(hf_ctx *c, const char *what) {
    return qf_err_set(c->e, QF_EXIT_INPUT, "%s: %s (qwen-ft reads Qwen's byte-level BPE tokenizer.json)", c->path,
                      what);
}

static const char *type_of(json_t *o) {
    json_t *ty = json_object_get(o, "type");
    return json_is_string(ty) ? json_string_value(ty) : "";
}

/* A boolean key: absent/null -> def; otherwise must be a boolean. */
static int get_bool(hf_ctx *c, json_t *o, const char *key, const char *where, int def, int *out) {
    json_t *j = json_object_get(o, key);
    if (!j || json_is_null(j)) *out = def;
    else if (json_is_boolean(j)) *out = json_is_true(j);
    else {
        char msg[256];
        snprintf(msg, sizeof msg, "%s.%s must be true or false", where, key);
        return bad(c, msg);
    }
    return 0;
}

static int parse_normalizer(hf_ctx *c, json_t *n) {
    if (!n || json_is_null(n)) return 0;
    const char *ty = type_of(n);
    if (!strcmp(ty, "NFC")) return c->t->nfc = 1, 0;
    if (!strcmp(ty, "Sequence")) {
        json_t *list = json_object_get(n, "normalizers"), *x;
        size_t i;
        if (!json_is_array(list)) return bad(c, "normalizer.normalizers must be a list");
        json_array_foreach(list, i, x) if (parse_normalizer(c, x)) return c->e->code;
        return 0;
    }
    char msg[256];
    snprintf(msg, sizeof msg, "normalizer type \"%.64s\" is not supported (only NFC)", ty);
    return bad(c, msg);
}

static int add_regex(hf_ctx *c, const char *pat, size_t len, int literal) {
    if (c->t->n_re == QF_TOK_MAX_REGEX) return bad(c, "too many Split pre-tokenizers");
    pcre2_code *re = qf_tok_regex_compile(pat, len, literal, c->path, c->e);
    if (!re) return c->e->code;
    c->t->re[c->t->n_re++] = re;
    return 0;
}

static int parse_split(hf_ctx *c, json_t *p) {
    json_t *pat = json_object_get(p, "pattern"), *behavior = json_object_get(p, "behavior");
    int invert = 0;
    if (get_bool(c, p, "invert", "pre_tokenizer Split", 0, &invert)) return c->e->code;
    if (!json_is_string(behavior) || strcmp(json_string_value(behavior), "Isolated") || invert)
        return bad(c, "pre_tokenizer Split: only behavior \"Isolated\" with invert false is supported");
    json_t *rx = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
    if (json_is_string(rx)) return add_regex(c, json_string_value(rx), json_string_length(rx), 0);
    if (json_is_string(lit)) return add_regex(c, json_string_value(lit), json_string_length(lit), 1);
    return bad(c, "pre_tokenizer Split: pattern must be {\"Regex\": ...} or {\"String\": ...}");
}

static int parse_bytelevel_pre(hf_ctx *c, json_t *p) {
    int prefix = 1, use_regex = 1;
    if (get_bool(c, p, "add_prefix_space", "pre_tokenizer ByteLevel", 1, &prefix) ||
        get_bool(c, p, "use_regex", "pre_tokenizer ByteLevel", 1, &use_regex))
        return c->e->code;
    if (prefix) return bad(c, "pre_tokenizer ByteLevel: add_prefix_space true is not supported");
    return use_regex ? add_regex(c, GPT2_PATTERN, strlen(GPT2_PATTERN), 0) : 0;
}

static int parse_pre_tokenizer(hf_ctx *c, json_t *p) {
    const char *ty = type_of(p);
    if (!strcmp(ty, "ByteLevel")) return parse_bytelevel_pre(c, p);
    if (strcmp(ty, "Sequence")) return bad(c, "pre_tokenizer must be ByteLevel or a Sequence ending with ByteLevel");
    json_t *list = json_object_get(p, "pretokenizers"), *x;
    size_t i, n = json_array_size(list);
    if (!n) return bad(c, "pre_tokenizer.pretokenizers must be a non-empty list");
    json_array_foreach(list, i, x) {
        const char *xt = type_of(x);
        if (i + 1 == n) {
            if (strcmp(xt, "ByteLevel")) return bad(c, "pre_tokenizer: the Sequence must end with ByteLevel");
            if (parse_bytelevel_pre(c, x)) return c->e->code;
        } else if (!strcmp(xt, "Split")) {
            if (parse_split(c, x)) return c->e->code;
        } else {
            char msg[256];
            snprintf(msg, sizeof msg, "pre_tokenizer type \"%.64s\" is not supported (Split, then ByteLevel)", xt);
            return bad(c, msg);
        }
    }
    return 0;
}

/* The bytes a token string decodes to (HF's ByteLevel decoder: the byte characters when every character is one,
 * else the string's own UTF-8), into the decode table; and into the encoder's map when it is byte-level. */
static void add_token(qf_tokenizer *t, const char *s, size_t len, int32_t id, int encodable) {
    char stack[256], *raw = len <= sizeof stack ? stack : qf_malloc(len);
    long n = qf_tok_unmap(s, len, raw);
    if (n >= 0) {
        qf_tok_set_decode(t, id, raw, (size_t)n);
        if (encodable) qf_tok_map_put(&t->vocab, raw, (size_t)n, id);
    } else qf_tok_set_decode(t, id, s, len);
    if (raw != stack) free(raw);
}

static int parse_vocab(hf_ctx *c, json_t *vocab) {
    if (!json_is_object(vocab) || !json_object_size(vocab)) return bad(c, "model.vocab must be a non-empty object");
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id >= QF_MAX_VOCAB) {
            char msg[256];
            snprintf(msg, sizeof msg, "model.vocab[\"%.64s\"] must be an id in [0, %lld) (the vocabulary limit, "
                     "docs/reliability.md)", key, (long long)QF_MAX_VOCAB);
            return bad(c, msg);
        }
        if (id < c->t->n_ids && c->t->dec_len[id] >= 0) { /* two strings for one id: decoding would be ambiguous */
            char msg[256];
            snprintf(msg, sizeof msg, "model.vocab[\"%.64s\"] = %lld: that id is already another token's", key,
                     (long long)id);
            return bad(c, msg);
        }
        size_t len = strlen(key);
        qf_tok_map_put(&c->str_id, key, len, (int32_t)id);
        add_token(c->t, key, len, (int32_t)id, 1);
    }
    return 0;
}

static int parse_merges(hf_ctx *c, json_t *merges) {
    if (!json_is_array(merges)) return bad(c, "model.merges must be a list");
    size_t i;
    json_t *m;
    char *cat = NULL;
    size_t cat_cap = 0;
    json_array_foreach(merges, i, m) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (json_is_string(m)) { /* "a b": exactly one space, as HF requires */
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (sp && !strchr(sp + 1, ' ')) la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)), la = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1)), lb = json_string_length(json_array_get(m, 1));
        }
        if (!b || i >= INT32_MAX) {
            char msg[128];
            snprintf(msg, sizeof msg, "model.merges[%zu] must be \"a b\" or [\"a\", \"b\"]", i);
            free(cat);
            return bad(c, msg);
        }
        if (la + lb > cat_cap) cat = qf_realloc(cat, cat_cap = 2 * (la + lb) + 64);
        memcpy(cat, a, la);
        memcpy(cat + la, b, lb);
        int32_t ia = qf_tok_map_get(&c->str_id, a, la), ib = qf_tok_map_get(&c->str_id, b, lb);
        int32_t iab = qf_tok_map_get(&c->str_id, cat, la + lb);
        if (ia < 0 || ib < 0 || iab < 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "model.merges[%zu]: a token of the merge or the merged token is not in the vocab",
                     i);
            free(cat);
            return bad(c, msg);
        }
        qf_tok_pairs_put(&c->t->merges, ia, ib, (int32_t)i, iab);
    }
    free(cat);
    return 0;
}

static int parse_model(hf_ctx *c, json_t *m) {
    if (!json_is_object(m) || strcmp(type_of(m), "BPE")) return bad(c, "model.type must be \"BPE\"");
    json_t *drop = json_object_get(m, "dropout");
    json_t *pre = json_object_get(m, "continuing_subword_prefix"), *suf = json_object_get(m, "end_of_word_suffix");
    int byte_fallback = 0;
    if (drop && !json_is_null(drop)) return bad(c, "model.dropout is not supported");
    if ((pre && !json_is_null(pre) && json_string_length(pre)) || (suf && !json_is_null(suf) && json_string_length(suf)))
        return bad(c, "model.continuing_subword_prefix / end_of_word_suffix are not supported");
    if (get_bool(c, m, "byte_fallback", "model", 0, &byte_fallback) ||
        get_bool(c, m, "ignore_merges", "model", 0, &c->t->whole_first))
        return c->e->code;
    if (byte_fallback) return bad(c, "model.byte_fallback is not supported");
    if (parse_vocab(c, json_object_get(m, "vocab"))) return c->e->code;
    return parse_merges(c, json_object_get(m, "merges"));
}

static int parse_added(hf_ctx *c, json_t *list) {
    if (!list || json_is_null(list)) return 0;
    if (!json_is_array(list)) return bad(c, "added_tokens must be a list");
    size_t i;
    json_t *a;
    json_array_foreach(list, i, a) {
        json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        int special = 0, normalized = 0, lstrip = 0, rstrip = 0, single = 0;
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= QF_MAX_VOCAB ||
            !json_is_string(content) || !json_string_length(content)) {
            char msg[160];
            snprintf(msg, sizeof msg, "added_tokens[%zu] needs an id in [0, %lld) (the vocabulary limit, "
                     "docs/reliability.md) and a non-empty content", i, (long long)QF_MAX_VOCAB);
            return bad(c, msg);
        }
        if (get_bool(c, a, "special", "added_tokens[]", 0, &special) ||
            get_bool(c, a, "normalized", "added_tokens[]", !special, &normalized) ||
            get_bool(c, a, "lstrip", "added_tokens[]", 0, &lstrip) ||
            get_bool(c, a, "rstrip", "added_tokens[]", 0, &rstrip) ||
            get_bool(c, a, "single_word", "added_tokens[]", 0, &single))
            return c->e->code;
        if (lstrip || rstrip || single) return bad(c, "added_tokens: lstrip / rstrip / single_word are not supported");
        const char *s = json_string_value(content);
        size_t len = json_string_length(content);
        int32_t tid = (int32_t)json_integer_value(id);
        /* the added tokens must agree with the vocabulary (a hand-edited or mixed-up file otherwise encodes one id
         * and decodes another): a content the vocabulary has keeps its id there; an id is one token's only */
        int32_t vid = qf_tok_map_get(&c->str_id, s, len);
        if ((vid >= 0 && vid != tid) || (vid < 0 && tid < c->t->n_ids && c->t->dec_len[tid] >= 0)) {
            char msg[300];
            if (vid >= 0)
                snprintf(msg, sizeof msg, "added_tokens[%zu] \"%.64s\" has id %lld, but model.vocab gives it %lld",
                         i, s, (long long)tid, (long long)vid);
            else
                snprintf(msg, sizeof msg, "added_tokens[%zu] \"%.64s\" has id %lld, which is already another token's "
                         "(model.vocab or an earlier added token)", i, s, (long long)tid);
            return bad(c, msg);
        }
        if (vid < 0) qf_tok_map_put(&c->str_id, s, len, tid); /* a later duplicate of this content must agree */
        add_token(c->t, s, len, tid, 0);
        if (normalized && c->t->nfc) { /* HF matches the normalized content in each normalized piece */
            size_t nlen;
            char *n = qf_tok_nfc(c->t->nfc_yes, s, len, &nlen);
            if (!n) return bad(c, "added_tokens: NFC failed");
            int rc = qf_tok_add(c->t, n, nlen, tid, 1, c->path, c->e);
            if (n != s) free(n);
            if (rc) return rc;
        } else if (qf_tok_add(c->t, s, len, tid, normalized, c->path, c->e))
            return c->e->code;
    }
    return 0;
}

static int parse_root(hf_ctx *c, json_t *root) {
    if (!json_is_object(root)) return bad(c, "the top level must be an object");
    if (parse_normalizer(c, json_object_get(root, "normalizer"))) return c->e->code;
    if (c->t->nfc) c->t->nfc_yes = qf_tok_nfc_table();
    if (parse_pre_tokenizer(c, json_object_get(root, "pre_tokenizer"))) return c->e->code;
    json_t *dec = json_object_get(root, "decoder"), *post = json_object_get(root, "post_processor");
    if (strcmp(type_of(dec), "ByteLevel")) return bad(c, "decoder must be ByteLevel");
    if (post && !json_is_null(post) && strcmp(type_of(post), "ByteLevel"))
        return bad(c, "post_processor must be null or ByteLevel (qwen-ft adds no BOS/EOS)");
    if (parse_model(c, json_object_get(root, "model"))) return c->e->code;
    return parse_added(c, json_object_get(root, "added_tokens"));
}

int qf_tok_hf_load(qf_tokenizer *t, const char *path, const char *buf, size_t len, qf_err *e) {
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_ALLOW_NUL, &je);
    if (!root)
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%d:%d: malformed JSON: %s", path, je.line, je.column, je.text);
    hf_ctx c = {t, path, e, {0}};
    t->kind = QF_TOK_HF;
    parse_root(&c, root);
    qf_tok_map_free(&c.str_id);
    json_decref(root);
    return e->code;
}
