/* test_serve_json.c — the JSON recognizer and token mask of serve's response_format json_object
 * (src/serve/serve_json.c):
 *   - valid objects (nesting, every escape, surrogate pairs, raw UTF-8, numbers, literals, whitespace) are accepted
 *     byte by byte, complete only at their last byte; invalid texts are refused at the first byte no JSON object can
 *     continue with (a top-level array, leading zeros, a lone or broken surrogate, control bytes, overlong UTF-8,
 *     anything after the object); nesting stops at QF_JSON_DEPTH;
 *   - the mask over the fixture tokenizer: at the start '{' and whitespace but no '[' or stop token; once complete,
 *     only the stop tokens; special tokens never;
 *   - random walks: tokens drawn among those the mask allows, then the allowed token of the lowest id until a stop
 *     token: every walk ends complete, and jansson (an independent parser) reads each text as an object. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qf_test.h"
#include "serve/serve_json.h"
#include "tokenizer.h"

/* the byte at which t[n] is refused (n: accepted); *done: complete after it all, and never before its last byte */
static size_t refused_at(const char *t, size_t n, int *done) {
    qf_json_state s;
    qf_json_start(&s);
    int early = 0;
    for (size_t i = 0; i < n; i++) {
        if (qf_json_feed(&s, (const uint8_t *)t + i, 1)) return *done = 0, i;
        early |= i + 1 < n && qf_json_done(&s);
    }
    *done = qf_json_done(&s) && !early;
    return n;
}

static void recognizer(void) {
    static const char *const good[] = {
        "{}", " \t\r\n{ }", "{\"a\":1}", "{\"\":\"\"}",
        "{\"a\": [1, -0, 2.50, -3e10, 4E+2, 5e-3, 0.0, true, false, null, {}, [], [[]], \"x\"]}",
        "{\"esc\": \"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\u0000 \\uD83D\\uDE00 \\ud800\\udfff\"}",
        "{\"utf8\": \"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\x9f\xbf \xf4\x8f\xbf\xbf\"}",
        "{\"k\\u0041\": {\"nested\": {\"deep\": [{\"x\": null}]}}}",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        int done;
        const size_t n = strlen(good[i]), at = refused_at(good[i], n, &done);
        CHECK(at == n && done, "valid %zu (%s): refused at byte %zu, complete %d", i, good[i], at, done);
    }
    static const struct { const char *t; size_t at; } bad[] = {
        {"[]", 0}, {"\"a\"", 0}, {"{\"a\"}", 4}, {"{\"a\":01}", 6}, {"{\"a\":1,}", 7}, {"{,}", 1},
        {"{\"a\":tru}", 8}, {"{\"a\":\"\x01\"}", 6}, {"{\"a\":\"\\q\"}", 7}, {"{\"a\":\"\\uD800\"}", 12},
        {"{\"a\":\"\\uDC00\"}", 9}, {"{\"a\":\"\\uD800\\u0041\"}", 14}, {"{\"a\":-}", 6}, {"{\"a\":1.}", 7},
        {"{\"a\":1e}", 7}, {"{\"a\":\"\xc0\x80\"}", 6}, {"{\"a\":\"\xed\xa0\x80\"}", 7},
        {"{\"a\":\"\xf4\x90\x80\x80\"}", 7}, {"{\"a\":\"\xc3\"}", 7}, {"{} ", 2}, {"{}{}", 2}, {"{\"a\" 1}", 5},
        {"{\"a\":[1}", 7}, {"{\"a\":{]}", 6}, {"{\"a\":nul", 8}, {"{\"a\":1.5.2}", 8}, {"{\"a\":+1}", 5},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int done;
        const size_t n = strlen(bad[i].t), at = refused_at(bad[i].t, n, &done);
        CHECK(at == bad[i].at && (at < n || !done), "invalid %zu (%s): refused at byte %zu, want %zu", i, bad[i].t,
              at, bad[i].at);
    }
    /* nesting: the object and QF_JSON_DEPTH - 1 arrays in it, not one more */
    char deep[2 * QF_JSON_DEPTH + 16];
    size_t k = 0;
    deep[k++] = '{', deep[k++] = '"', deep[k++] = 'a', deep[k++] = '"', deep[k++] = ':';
    for (int d = 1; d < QF_JSON_DEPTH; d++) deep[k++] = '[';
    const size_t open = k;
    deep[k++] = '[';
    int done;
    CHECK(refused_at(deep, k, &done) == open, "depth: the %d-th container refused", QF_JSON_DEPTH + 1);
    for (int d = 1; d < QF_JSON_DEPTH; d++) deep[open + d - 1] = ']';
    k = open + QF_JSON_DEPTH - 1;
    deep[k++] = '}';
    CHECK(refused_at(deep, k, &done) == k && done, "depth: %d containers deep, closed, complete", QF_JSON_DEPTH);
}

/* the ids of a one-token text */
static int32_t one_token(const qf_tokenizer *tok, const char *text) {
    qf_ids a = {0};
    qf_err e = {0};
    int32_t id = -1;
    if (qf_tok_encode(tok, text, strlen(text), &a, &e) == 0 && a.n == 1) id = a.v[0];
    free(a.v);
    return id;
}

static void mask_and_walks(const char *src) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/reference/fixtures/tokenizer/tokenizer.json", src);
    qf_tokenizer *tok = NULL;
    qf_err e = {0};
    if (qf_tok_load(path, &tok, &e)) {
        CHECK(0, "the fixture tokenizer: %s", e.msg);
        return;
    }
    const int64_t V = qf_tok_vocab_size(tok) + 5; /* ids past the tokenizer's: never allowed */
    const int32_t stop[2] = {qf_tok_special(tok, "<|endoftext|>"), qf_tok_special(tok, "<|im_end|>")};
    const int32_t im_start = qf_tok_special(tok, "<|im_start|>");
    qf_json_vocab v;
    CHECK(qf_json_vocab_init(&v, tok, V, stop, 2, &e) == 0, "vocab: %s", e.msg);
    float *lg = malloc((size_t)V * sizeof *lg);
    const int32_t brace = one_token(tok, "{"), bracket = one_token(tok, "["), space = one_token(tok, " ");
    qf_json_state s;
    qf_json_start(&s);
    memset(lg, 0, (size_t)V * sizeof *lg);
    qf_json_mask(&v, &s, lg);
    CHECK(brace >= 0 && bracket >= 0 && space >= 0 && lg[brace] == 0 && lg[space] == 0 && lg[bracket] < 0 &&
              lg[stop[0]] < 0 && lg[stop[1]] < 0 && lg[im_start] < 0 && lg[V - 1] < 0,
          "start: '{' and ' ' allowed; '[', the stop tokens, <|im_start|> and ids past the tokenizer not");
    CHECK(qf_json_feed(&s, (const uint8_t *)"{\"a\":1}", 7) == 0 && qf_json_done(&s), "{\"a\":1} complete");
    memset(lg, 0, (size_t)V * sizeof *lg);
    qf_json_mask(&v, &s, lg);
    int64_t allowed = 0;
    for (int64_t id = 0; id < V; id++) allowed += lg[id] == 0;
    CHECK(allowed == 2 && lg[stop[0]] == 0 && lg[stop[1]] == 0, "complete: only the 2 stop tokens (%lld allowed)",
          (long long)allowed);
    /* random walks */
    int32_t *ok = malloc((size_t)V * sizeof *ok);
    const int32_t close[5] = {one_token(tok, "\""), one_token(tok, "}"), one_token(tok, "]"), one_token(tok, ":"),
                              one_token(tok, "0")};
    unsigned seed = 7;
    int parsed = 0, walks = 40;
    for (int w = 0; w < walks; w++) {
        size_t cap = 1 << 16, n = 0;
        char *text = malloc(cap);
        qf_json_start(&s);
        int steps = 5 + w * 10, fine = 1, ended = 0;
        for (int t = 0; t < steps + 20000 && fine; t++) {
            for (int64_t id = 0; id < V; id++) lg[id] = 0;
            qf_json_mask(&v, &s, lg);
            int64_t m = 0;
            for (int64_t id = 0; id < V; id++)
                if (lg[id] == 0) ok[m++] = (int32_t)id;
            if (m == 0) { fine = 0; break; }
            seed = seed * 1664525u + 1013904223u;
            int32_t id = ok[0]; /* closing: a '"', '}', ']', ':' or '0' where allowed, else the lowest id allowed */
            if (t < steps) id = ok[(seed >> 8) % (unsigned)m];
            else
                for (int c = 4; c >= 0; c--)
                    if (close[c] >= 0 && lg[close[c]] == 0) id = close[c];
            if (id == stop[0] || id == stop[1]) { ended = 1; break; }
            const int64_t len = v.off[id + 1] - v.off[id];
            if (n + (size_t)len >= cap) cap *= 2, text = realloc(text, cap);
            memcpy(text + n, v.bytes + v.off[id], (size_t)len);
            n += (size_t)len;
            fine = qf_json_feed(&s, v.bytes + v.off[id], (size_t)len) == 0;
        }
        json_error_t je;
        json_t *j = fine && ended ? json_loadb(text, n, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je) : NULL;
        /* jansson refuses numbers out of a double's range ("real number overflow"): JSON all the same */
        const int range = !j && fine && ended && strstr(je.text, "overflow");
        if ((j && json_is_object(j)) || range) parsed++;
        else CHECK(0, "walk %d (%d random tokens): ended %d, fed %d, jansson: %s; text %.*s", w, steps, ended, fine,
                   j ? "not an object" : fine && ended ? je.text : "-", (int)(n < 300 ? n : 300), text);
        json_decref(j);
        free(text);
    }
    CHECK(parsed == walks, "%d of %d random walks are JSON objects by jansson", parsed, walks);
    printf("test_serve_json: %d random walks of 5 to %d random tokens each ended as JSON objects\n", walks,
           5 + (walks - 1) * 10);
    free(ok);
    free(lg);
    qf_json_vocab_free(&v);
    qf_tok_free(tok);
}

int main(void) {
    const char *src = getenv("SRC") && *getenv("SRC") ? getenv("SRC") : ".";
    recognizer();
    mask_and_walks(src);
    printf("test_serve_json: %d checks, %d failed\n", qf_test_checks, qf_test_failures);
    return qf_test_failures != 0;
}
