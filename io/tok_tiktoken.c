/* tok_tiktoken.c — Qwen (v1)'s qwen.tiktoken into a qf_tokenizer, as tokenization_qwen.py builds its
 * tiktoken.Encoding:
 *   lines "base64(token bytes) rank" (rank = id; blank lines skipped);
 *   pattern PAT_STR below; tiktoken's BPE (the adjacent pair whose concatenation has the lowest rank merges first;
 *   a piece that is itself a token is emitted as it is);
 *   special tokens <|endoftext|>, <|im_start|>, <|im_end|>, <|extra_0|> .. <|extra_204|> numbered from the number
 *   of ranks on (151643 for Qwen's file, equal to the released code's SPECIAL_START_ID), all allowed in the text;
 *   the number of ranks must be Qwen's 151643 unless QWENFT_TIKTOKEN_RANKS names another (tiktoken_ranks_check);
 *   QWenTokenizer.tokenize applies NFC (unicodedata.normalize) to the whole text first. */
#include <nettle/base64.h>
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"

const char qf_tok_qwen_v1_pattern[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
#define QWEN_V1_PATTERN qf_tok_qwen_v1_pattern
#define QWEN_V1_EXTRAS 205
#define QF_TOK_QWEN_V1_RANKS 151643

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* One "token rank" line; 0 or an error naming path and line. */
static int parse_line(qf_tokenizer *t, const char *path, long lineno, const char *s, size_t n, qf_err *e) {
    size_t i = 0;
    while (i < n && is_space(s[i])) i++;
    size_t b0 = i;
    while (i < n && !is_space(s[i])) i++;
    size_t b1 = i;
    while (i < n && is_space(s[i])) i++;
    size_t r0 = i;
    long long rank = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9' && rank < INT32_MAX) rank = rank * 10 + (s[i++] - '0');
    size_t r1 = i;
    while (i < n && is_space(s[i])) i++;
    if (b1 == b0 || r1 == r0 || i != n || rank >= INT32_MAX)
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: expected \"<base64 token> <rank>\"", path, lineno);
    char stack[512], *tok = BASE64_DECODE_LENGTH(b1 - b0) <= sizeof stack ? stack : qf_malloc(BASE64_DECODE_LENGTH(b1 - b0));
    struct base64_decode_ctx ctx;
    size_t len = BASE64_DECODE_LENGTH(b1 - b0);
    base64_decode_init(&ctx);
    int ok = base64_decode_update(&ctx, &len, (uint8_t *)tok, b1 - b0, s + b0) && base64_decode_final(&ctx) && len;
    int rc = 0;
    if (!ok) rc = qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: the token is not valid (non-empty) base64", path, lineno);
    else if (rank >= QF_MAX_VOCAB)
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: rank %lld is not below %lld, the vocabulary limit (docs/reliability.md)",
                        path, lineno, rank, (long long)QF_MAX_VOCAB);
    else if (rank < t->n_ids && t->dec_len[rank] >= 0)
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: rank %lld appears twice", path, lineno, rank);
    else if (qf_tok_map_put(&t->vocab, tok, len, (int32_t)rank))
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: the token appears twice", path, lineno);
    else qf_tok_set_decode(t, (int32_t)rank, tok, len);
    if (tok != stack) free(tok);
    return rc;
}

/* Qwen v1's tokenization_qwen.py numbers its special tokens from SPECIAL_START_ID = 151643 whatever the file holds,
 * and its qwen.tiktoken has exactly that many ranks. A file cut at a line boundary is otherwise a valid smaller
 * vocabulary whose special tokens would move down (eos 75822 instead of 151643) and train on wrong ids: any other
 * count is exit 2 unless the user states it, QWENFT_TIKTOKEN_RANKS=N for a vocabulary of one's own of N ranks
 * (docs/reliability.md, "Tokenizer files"). */
static int tiktoken_ranks_check(const char *path, int64_t n, qf_err *e) {
    if (n == QF_TOK_QWEN_V1_RANKS) return 0;
    const char *env = getenv("QWENFT_TIKTOKEN_RANKS");
    if (env && env[0]) {
        char *end;
        long long want = strtoll(env, &end, 10);
        if (*end || want <= 0)
            return qf_err_set(e, QF_EXIT_INPUT, "QWENFT_TIKTOKEN_RANKS=%s: expected the number of ranks of your own "
                              "tiktoken vocabulary (a positive integer)", env);
        if (want == n) return 0;
        return qf_err_set(e, QF_EXIT_INPUT, "%s: %lld ranks, but QWENFT_TIKTOKEN_RANKS=%lld: the file is cut short or "
                          "not the vocabulary meant", path, (long long)n, want);
    }
    return qf_err_set(e, QF_EXIT_INPUT, "%s: %lld ranks, but Qwen v1's qwen.tiktoken has %d (its special tokens "
                      "<|endoftext|>, <|im_start|>, ... are numbered from %d on): the file is cut short (download it "
                      "again) or is not Qwen's; for a tiktoken vocabulary of your own set QWENFT_TIKTOKEN_RANKS=%lld",
                      path, (long long)n, QF_TOK_QWEN_V1_RANKS, QF_TOK_QWEN_V1_RANKS, (long long)n);
}

int qf_tok_tiktoken_load(qf_tokenizer *t, const char *path, const char *buf, size_t len, qf_err *e) {
    t->kind = QF_TOK_TIKTOKEN;
    t->by_concat = t->whole_first = 1;
    t->nfc = t->nfc_whole = 1;
    long lineno = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - buf) : len;
        lineno++;
        size_t n = end - i;
        while (n && is_space(buf[i + n - 1])) n--;
        if (n && parse_line(t, path, lineno, buf + i, n, e)) return e->code;
        i = end + 1;
    }
    if (!t->vocab.n) return qf_err_set(e, QF_EXIT_INPUT, "%s: no tokens (expected lines \"<base64> <rank>\")", path);
    int64_t start = (int64_t)t->vocab.n;
    if (t->n_ids > start)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: ranks must be 0 .. %lld (the special tokens follow them)", path,
                          (long long)start - 1);
    if (tiktoken_ranks_check(path, start, e)) return e->code;
    static const char *const base[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int k = 0; k < 3 + QWEN_V1_EXTRAS; k++) {
        char name[32];
        if (k < 3) snprintf(name, sizeof name, "%s", base[k]);
        else snprintf(name, sizeof name, "<|extra_%d|>", k - 3);
        int32_t id = (int32_t)(start + k);
        qf_tok_set_decode(t, id, name, strlen(name));
        if (qf_tok_add(t, name, strlen(name), id, 0, path, e)) return e->code;
    }
    t->nfc_yes = qf_tok_nfc_table();
    t->re[0] = qf_tok_regex_compile(QWEN_V1_PATTERN, strlen(QWEN_V1_PATTERN), 0, path, e);
    t->n_re = t->re[0] ? 1 : 0;
    return e->code;
}
