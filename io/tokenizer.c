/* tokenizer.c — see tokenizer.h; the parts are listed in tok_impl.h.
 *
 * Encoding (HF `tokenizers`' order):
 *   1. the input must be valid UTF-8 (the error names the byte offset);
 *   2. tiktoken only: NFC of the whole text (tokenization_qwen.py normalizes before tiktoken sees the text);
 *   3. added/special tokens are cut out literally, leftmost-longest (HF: before normalization);
 *   4. each piece between them: NFC (HF normalizer), then HF's normalized=true added tokens, leftmost-longest;
 *   5. pre-tokenizer patterns split it, each match and each gap between matches a piece (Split "Isolated");
 *   6. byte-pair merging of each piece's bytes (tok_bpe.c).
 * Decoding concatenates each id's bytes: byte-level tokens map back to their bytes, an added token whose content is
 * not all byte-level characters gives its UTF-8 (HF's ByteLevel decoder), tiktoken's tokens are bytes already. */
#include <errno.h>
#include <nettle/sha2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "out_file.h"
#include "tok_impl.h"

/* ---- loading ------------------------------------------------------------------------------------------------- */

/* a regular file (a FIFO, directory or device is refused before reading) of at most QF_MAX_TOKENIZER_BYTES */
static char *read_file(const char *path, size_t *len, qf_err *e) {
    return qf_in_slurp("tokenizer", path, QF_MAX_TOKENIZER_BYTES, len, e);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* tokenizer.json when the name says so or the text starts with '{'; qwen.tiktoken otherwise. */
static int looks_json(const char *path, const char *buf, size_t len) {
    if (ends_with(path, ".json")) return 1;
    if (ends_with(path, ".tiktoken")) return 0;
    size_t i = 0;
    while (i < len && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t')) i++;
    return i < len && buf[i] == '{';
}

static void set_identity(qf_tokenizer *t, const char *buf, size_t len) {
    struct sha256_ctx ctx;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, len, (const uint8_t *)buf);
    sha256_digest(&ctx, sizeof d, d);
    int n = snprintf(t->identity, sizeof t->identity, "%s sha256:",
                     t->kind == QF_TOK_HF ? "hf-tokenizer.json" : "qwen.tiktoken");
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) snprintf(t->identity + n + 2 * i, 3, "%02x", d[i]);
}

/* tok_file: PATH itself, or the tokenizer file inside the directory PATH (tokenizer.json, else qwen.tiktoken);
 * FILE[0] = 0 when PATH is a directory that holds neither. */
static void tok_file(const char *path, char *file, size_t cap) {
    struct stat st;
    snprintf(file, cap, "%s", path);
    if (!stat(path, &st) && S_ISDIR(st.st_mode)) {
        snprintf(file, cap, "%s/tokenizer.json", path);
        if (!qf_exists(file)) snprintf(file, cap, "%s/qwen.tiktoken", path);
        if (!qf_exists(file)) file[0] = 0;
    }
}

int qf_tok_load(const char *path, qf_tokenizer **out, qf_err *e) {
    *out = NULL;
    char file[4096];
    tok_file(path, file, sizeof file);
    if (!file[0]) return qf_err_set(e, QF_EXIT_INPUT, "%s: no tokenizer.json or qwen.tiktoken in this directory", path);
    size_t len = 0;
    char *buf = read_file(file, &len, e);
    if (!buf) return e->code;
    qf_tokenizer *t = qf_calloc(1, sizeof *t);
    int rc = looks_json(file, buf, len) ? qf_tok_hf_load(t, file, buf, len, e)
                                        : qf_tok_tiktoken_load(t, file, buf, len, e);
    if (!rc) rc = qf_tok_bytes_check(t, file, e);
    if (!rc && !t->whole_first) qf_tok_bpe_memo(t);
    if (!rc) rc = qf_tok_check_siblings(t, file, e); /* tok_check.c: the model's ids beside it */
    if (!rc) set_identity(t, buf, len);
    free(buf);
    if (rc) {
        qf_tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int qf_tok_file_identity(const char *path, char *out, size_t cap, qf_err *e) {
    char file[4096];
    tok_file(path, file, sizeof file);
    if (!file[0]) {
        out[0] = 0;
        return 0;
    }
    size_t len = 0;
    char *buf = read_file(file, &len, e);
    if (!buf) return e->code;
    qf_tokenizer *t = qf_calloc(1, sizeof *t); /* only the kind and the identity: nothing is parsed */
    t->kind = looks_json(file, buf, len) ? QF_TOK_HF : QF_TOK_TIKTOKEN;
    set_identity(t, buf, len);
    free(buf);
    snprintf(out, cap, "%s", t->identity);
    free(t);
    return 0;
}

void qf_tok_free(qf_tokenizer *t) {
    if (!t) return;
    qf_tok_map_free(&t->vocab);
    qf_tok_pairs_free(&t->merges);
    for (int i = 0; i < 2; i++) qf_tok_map_free(&t->added[i].text);
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    free(t->nfc_yes);
    free(t->whole_ok);
    free(t->dec_off);
    free(t->dec_len);
    free(t->dec_buf);
    free(t);
}

/* ---- encoding ------------------------------------------------------------------------------------------------ */

typedef struct enc_ctx {
    const qf_tokenizer *t;
    qf_tok_scratch s;      /* tok_bpe.c's */
    pcre2_match_data *md;  /* the pre-tokenizer's matches */
    qf_ids *out;
    qf_err *e;
} enc_ctx;

/* Pattern k splits p[n]; the pieces go to pattern k + 1, the last ones to BPE. */
static int pre_tokenize(enc_ctx *c, const char *p, size_t n, int k) {
    if (!n) return 0;
    if (k == c->t->n_re) {
        qf_tok_bpe(c->t, &c->s, p, n, c->out);
        return 0;
    }
    size_t pos = 0, gap = 0;
    while (pos < n) {
        int rc = pcre2_match(c->t->re[k], (PCRE2_SPTR)p, n, pos, PCRE2_NO_UTF_CHECK, c->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter keeps its backtracking on the heap */
            rc = pcre2_match(c->t->re[k], (PCRE2_SPTR)p, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, c->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return qf_err_set(c->e, QF_EXIT_INPUT, "tokenizer: pre-tokenizer pattern failed on a %zu-byte piece: %s",
                              n, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t a = ov[0], b = ov[1];
        if (a == b) { /* an empty match splits nothing: go on after the next character */
            pos = a + 1;
            while (pos < n && ((uint8_t)p[pos] & 0xC0) == 0x80) pos++;
            continue;
        }
        if (pre_tokenize(c, p + gap, a - gap, k + 1) || pre_tokenize(c, p + a, b - a, k + 1)) return c->e->code;
        gap = pos = b;
    }
    return pre_tokenize(c, p + gap, n - gap, k + 1);
}

static int split_added(enc_ctx *c, const char *p, size_t n, int set);
static int piece(enc_ctx *c, const char *p, size_t n, int set);

/* A piece between raw-input added tokens: normalize, then the normalized added tokens. */
static int normalize_piece(enc_ctx *c, const char *p, size_t n) {
    if (!c->t->nfc || c->t->nfc_whole) return split_added(c, p, n, 1);
    size_t m;
    char *q = qf_tok_nfc(c->t->nfc_yes, p, n, &m);
    if (!q) QF_FATAL("out of memory (NFC of a %zu-byte piece)", n);
    int rc = split_added(c, q, m, 1);
    if (q != p) free(q);
    return rc;
}

/* Cuts the added tokens of set `set` out of p[n] (leftmost, then longest); the pieces between them go on to
 * normalization (set 0) or pre-tokenization (set 1). */
static int split_added(enc_ctx *c, const char *p, size_t n, int set) {
    const qf_tok_added *a = &c->t->added[set];
    size_t start = 0;
    for (size_t i = 0; a->n_lens && i < n; i++) {
        if (!a->first[(uint8_t)p[i]]) continue;
        int32_t id = -1;
        size_t len = 0;
        for (int k = 0; k < a->n_lens && id < 0; k++)
            if (a->lens[k] <= n - i && (id = qf_tok_map_get(&a->text, p + i, a->lens[k])) >= 0) len = a->lens[k];
        if (id < 0) continue;
        if (i > start && piece(c, p + start, i - start, set)) return c->e->code;
        qf_ids_push(c->out, id);
        start = i + len;
        i = start - 1;
    }
    return start < n ? piece(c, p + start, n - start, set) : 0;
}

static int piece(enc_ctx *c, const char *p, size_t n, int set) {
    return set ? pre_tokenize(c, p, n, 0) : normalize_piece(c, p, n);
}

int qf_tok_encode(const qf_tokenizer *t, const char *utf8, size_t len, qf_ids *out, qf_err *e) {
    size_t bad = qf_tok_utf8_check(utf8, len);
    if (bad < len) return qf_err_set(e, QF_EXIT_INPUT, "tokenizer: the text is not valid UTF-8 at byte offset %zu", bad);
    if (!len) return 0;
    enc_ctx c = {t, {0}, pcre2_match_data_create(1, NULL), out, e};
    if (!c.md) QF_FATAL("out of memory");
    const char *text = utf8;
    size_t n = len;
    if (t->nfc_whole) {
        text = qf_tok_nfc(t->nfc_yes, utf8, len, &n);
        if (!text) QF_FATAL("out of memory");
    }
    int rc = split_added(&c, text, n, 0);
    if (text != utf8) free((char *)text);
    qf_tok_scratch_free(&c.s);
    pcre2_match_data_free(c.md);
    return rc;
}

/* ---- decoding and the rest ----------------------------------------------------------------------------------- */

int64_t qf_tok_len(const qf_tokenizer *t, int32_t id) {
    return id < 0 || id >= t->n_ids || t->dec_len[id] < 0 ? -1 : (int64_t)t->dec_len[id];
}

const char *qf_tok_normalize(const qf_tokenizer *t, const char *text, size_t len, size_t *out_len) {
    *out_len = len;
    if (!t->nfc || !len || qf_tok_utf8_check(text, len) < len) return text;
    const char *q = qf_tok_nfc(t->nfc_yes, text, len, out_len);
    if (!q) QF_FATAL("out of memory (NFC of %zu bytes)", len);
    return q;
}

char *qf_tok_decode(const qf_tokenizer *t, const int32_t *ids, size_t n, size_t *len, qf_err *e) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_ids || t->dec_len[ids[i]] < 0) {
            qf_err_set(e, QF_EXIT_INPUT, "tokenizer: unknown token id %ld (the tokenizer has ids 0 .. %lld)",
                       (long)ids[i], (long long)t->n_ids - 1);
            return NULL;
        }
        total += (size_t)t->dec_len[ids[i]];
    }
    char *s = qf_malloc(total + 1), *w = s;
    for (size_t i = 0; i < n; i++) {
        memcpy(w, t->dec_buf + t->dec_off[ids[i]], (size_t)t->dec_len[ids[i]]);
        w += t->dec_len[ids[i]];
    }
    *w = 0;
    if (len) *len = total;
    return s;
}

int32_t qf_tok_special(const qf_tokenizer *t, const char *text) {
    for (int set = 0; set < 2; set++) {
        int32_t id = qf_tok_map_get(&t->added[set].text, text, strlen(text));
        if (id >= 0) return id;
    }
    return -1;
}

int64_t qf_tok_vocab_size(const qf_tokenizer *t) { return t->n_ids; }

const char *qf_tok_identity(const qf_tokenizer *t) { return t->identity; }
