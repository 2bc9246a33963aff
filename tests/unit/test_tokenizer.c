/* test_tokenizer.c — io/tokenizer.c against tests/reference/fixtures/tokenizer/ (made by
 * tests/reference/make_tokenizer_fixture.py): for every golden string, the ids of HF `tokenizers` (tokenizer.json
 * with Qwen2's configuration; transformers agrees), of tiktoken with Qwen v1's pattern and special tokens
 * (qwen.tiktoken, and shuffled.tiktoken whose ranks are not in merge order) and of a hand-made BPE (mini.json: ignore_merges, GPT-2 regex, overlapping added tokens), and
 * their decodes byte for byte; vocabulary sizes, special ids, identities (sha256 of the files); long inputs; and
 * the exit-2 errors: missing file, malformed JSON, unsupported configuration, bad tiktoken line, invalid UTF-8
 * (offset), unknown id. Scratch files go to /tmp/qf-test-tok-PID. Prints the encode speed on a few MB of text. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tokenizer.h"
#include "qf_test.h"

static char g_dir[256];


static qf_tokenizer *load(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    qf_tokenizer *t = NULL;
    qf_err e = {0};
    if (qf_tok_load(path, &t, &e)) {
        fprintf(stderr, "cannot load %s: %s\n", path, e.msg);
        qf_test_failures++;
        return NULL;
    }
    return t;
}

static void to_hex(const char *s, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", (unsigned char)s[i]);
    out[2 * n] = 0;
}

/* One golden case for one tokenizer: ids and the decode (hex of the bytes). */
static void check_case(const qf_tokenizer *t, const char *name, size_t idx, const char *text, size_t len, json_t *ids,
                       json_t *dec_hex) {
    qf_ids got = {0};
    qf_err e = {0};
    int rc = qf_tok_encode(t, text, len, &got, &e);
    CHECK(rc == 0, "%s case %zu: %s", name, idx, e.msg);
    size_t n = json_array_size(ids), first_diff = n;
    for (size_t i = 0; i < n && i < got.n; i++)
        if (got.v[i] != (int32_t)json_integer_value(json_array_get(ids, i))) {
            first_diff = i;
            break;
        }
    if (first_diff == n && got.n != n) first_diff = got.n < n ? got.n : n;
    CHECK(got.n == n && first_diff == n, "%s case %zu (%.40s...): %zu ids, expected %zu; first difference at %zu",
          name, idx, text, got.n, n, first_diff);
    if (!(got.n == n && first_diff == n) && getenv("QF_TEST_VERBOSE")) {
        for (size_t i = 0; i < got.n; i++) fprintf(stderr, "%d ", got.v[i]);
        fprintf(stderr, "\n");
    }
    qf_err de = {0};
    char *s = qf_tok_decode(t, got.v, got.n, NULL, &de);
    CHECK(s != NULL, "%s case %zu: decode: %s", name, idx, de.msg);
    if (s) {
        const char *want = json_string_value(dec_hex);
        size_t slen = strlen(want) / 2; /* the decode may hold NUL bytes: compare by the golden's length */
        char *hex = malloc(2 * slen + 1);
        to_hex(s, slen, hex);
        CHECK(!strcmp(hex, want), "%s case %zu: decode differs", name, idx);
        free(hex);
        free(s);
    }
    free(got.v);
}

static void test_goldens(const char *dir, qf_tokenizer *hf, qf_tokenizer *tt, qf_tokenizer *sh, qf_tokenizer *mini) {
    char path[1024];
    snprintf(path, sizeof path, "%s/goldens.json", dir);
    json_error_t je;
    json_t *g = json_load_file(path, JSON_ALLOW_NUL, &je);
    CHECK(g != NULL, "%s: %s", path, je.text);
    if (!g) return;
    CHECK(qf_tok_vocab_size(hf) == json_integer_value(json_object_get(g, "hf_vocab_size")), "hf vocab size %lld",
          (long long)qf_tok_vocab_size(hf));
    CHECK(qf_tok_vocab_size(tt) == json_integer_value(json_object_get(g, "tiktoken_vocab_size")),
          "tiktoken vocab size %lld", (long long)qf_tok_vocab_size(tt));
    CHECK(qf_tok_vocab_size(mini) == json_integer_value(json_object_get(g, "mini_vocab_size")), "mini vocab size");
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(g, "specials"), key, v)
        CHECK(qf_tok_special(hf, key) == json_integer_value(v), "hf special %s", key);
    json_object_foreach(json_object_get(g, "tiktoken_specials"), key, v)
        CHECK(qf_tok_special(tt, key) == json_integer_value(v), "tiktoken special %s", key);
    CHECK(qf_tok_special(hf, "<|extra_0|>") == -1 && qf_tok_special(tt, "<|extra_205|>") == -1, "no such special");
    CHECK(qf_tok_special(mini, "ümlaut") >= 0 && qf_tok_special(mini, "<x><y>") >= 0, "mini added tokens");

    json_t *sha = json_object_get(g, "sha256");
    char want[128];
    snprintf(want, sizeof want, "hf-tokenizer.json sha256:%s", json_string_value(json_object_get(sha, "tokenizer.json")));
    CHECK(!strcmp(qf_tok_identity(hf), want), "identity %s", qf_tok_identity(hf));
    snprintf(want, sizeof want, "qwen.tiktoken sha256:%s", json_string_value(json_object_get(sha, "qwen.tiktoken")));
    CHECK(!strcmp(qf_tok_identity(tt), want), "identity %s", qf_tok_identity(tt));

    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(g, "cases"), i, c) {
        json_t *text = json_object_get(c, "text");
        const char *s = json_string_value(text);
        size_t len = json_string_length(text);
        check_case(hf, "tokenizer.json", i, s, len, json_object_get(c, "hf"), json_object_get(c, "hf_decode"));
        check_case(tt, "qwen.tiktoken", i, s, len, json_object_get(c, "tiktoken"), json_object_get(c, "tiktoken_decode"));
        check_case(sh, "shuffled.tiktoken", i, s, len, json_object_get(c, "shuffled"),
                   json_object_get(c, "shuffled_decode"));
        check_case(mini, "mini.json", i, s, len, json_object_get(c, "mini"), json_object_get(c, "mini_decode"));
    }
    printf("test_tokenizer: %zu golden strings x 4 tokenizers\n", json_array_size(json_object_get(g, "cases")));
    json_object_foreach(json_object_get(g, "raw_decode"), key, v) { /* single bytes: no UTF-8 to complete */
        int32_t id = atoi(key);
        qf_err e = {0};
        for (int k = 0; k < 2; k++) {
            size_t dlen = 0;
            char *s = qf_tok_decode(k ? tt : hf, &id, 1, &dlen, &e), hex[8] = "";
            if (s) to_hex(s, strlen(json_string_value(v)) / 2, hex);
            CHECK(s && !strcmp(hex, json_string_value(v)), "raw decode of id %d", id);
            CHECK(!s || dlen == strlen(json_string_value(v)) / 2, "decode length of id %d: %zu", id, dlen);
            free(s);
        }
    }
    json_decref(g);
}

/* Long runs (one pre-token of 200k bytes; a long whitespace run before a word) round-trip. */
static void test_long(const qf_tokenizer *t, const char *name) {
    size_t n = 200000;
    char *s = malloc(n + 8);
    const char *fill[] = {"a", " ", "\n", "ab", "7"};
    for (int f = 0; f < 5; f++) {
        size_t fl = strlen(fill[f]);
        for (size_t i = 0; i < n; i++) s[i] = fill[f][i % fl];
        memcpy(s + n, " word!", 7);
        qf_ids ids = {0};
        qf_err e = {0};
        int rc = qf_tok_encode(t, s, n + 6, &ids, &e);
        CHECK(rc == 0, "%s long run %d: %s", name, f, e.msg);
        char *d = qf_tok_decode(t, ids.v, ids.n, NULL, &e);
        CHECK(d && !strcmp(d, s), "%s long run %d: round trip", name, f);
        free(d);
        free(ids.v);
    }
    free(s);
}

/* Text with NUL bytes (valid UTF-8) round-trips, and decode's length counts them. */
static void test_nul(const qf_tokenizer *t, const char *name) {
    const char text[] = "a\0b \0\0 c\0";
    const size_t n = sizeof text - 1;
    qf_ids ids = {0};
    qf_err e = {0};
    CHECK(qf_tok_encode(t, text, n, &ids, &e) == 0, "%s: encode with NULs: %s", name, e.msg);
    size_t len = 0;
    char *d = qf_tok_decode(t, ids.v, ids.n, &len, &e);
    CHECK(d && len == n && !memcmp(d, text, n), "%s: NULs round trip (decoded %zu bytes of %zu)", name, len, n);
    free(d);
    free(ids.v);
}

static void write_file(const char *name, const char *text, char *path, size_t n) {
    snprintf(path, n, "%s/%s", g_dir, name);
    qf_test_write_text(path, text);
}

/* Loading must fail with exit code 2 and a message that holds `needle`. */
static void expect_load_error(const char *path, const char *needle) {
    qf_tokenizer *t = NULL;
    qf_err e = {0};
    int rc = qf_tok_load(path, &t, &e);
    CHECK(rc == 2 && e.code == 2 && t == NULL && strstr(e.msg, needle), "load %s: rc %d, \"%s\" (want \"%s\")",
          path, rc, e.msg, needle);
    qf_tok_free(t);
}

static void test_errors(const char *fixtures, const qf_tokenizer *hf, const qf_tokenizer *tt) {
    char path[1024], p2[512];
    snprintf(path, sizeof path, "%s/no-such-tokenizer.json", g_dir);
    expect_load_error(path, "no-such-tokenizer.json");
    expect_load_error(g_dir, "no tokenizer.json or qwen.tiktoken"); /* an empty directory */
    write_file("bad.json", "{\"model\": {\"type\": \"BPE\",\n \"vocab\": {\"a\": 0,}}}\n", path, sizeof path);
    expect_load_error(path, "bad.json:2:");
    write_file("nfkc.json", "{\"normalizer\": {\"type\": \"NFKC\"}}", path, sizeof path);
    expect_load_error(path, "nfkc.json: normalizer type \"NFKC\"");
    write_file("wordpiece.json",
               "{\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
               " \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"WordPiece\"}}",
               path, sizeof path);
    expect_load_error(path, "wordpiece.json: model.type");
    write_file("few.json",
               "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}, \"decoder\": {\"type\": "
               "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": []}}",
               path, sizeof path);
    expect_load_error(path, "few.json: byte 0x00 has no token");
    write_file("bad.tiktoken", "IQ== 0\nIg== 1 extra\n", path, sizeof path);
    expect_load_error(path, "bad.tiktoken:2:");
    write_file("dup.tiktoken", "IQ== 0\nIQ== 1\n", path, sizeof path);
    expect_load_error(path, "dup.tiktoken:2: the token appears twice");
    snprintf(p2, sizeof p2, "%s/sub", g_dir);
    mkdir(p2, 0755);
    snprintf(path, sizeof path, "%s/sub/tokenizer.json", g_dir);
    FILE *f = fopen(path, "w");
    fputs("[1, 2", f);
    fclose(f);
    expect_load_error(p2, "sub/tokenizer.json:1:");

    /* a directory holding the fixture's files loads tokenizer.json; one with only qwen.tiktoken loads that */
    qf_tokenizer *d = NULL;
    qf_err e = {0};
    CHECK(qf_tok_load(fixtures, &d, &e) == 0 && !strcmp(qf_tok_identity(d), qf_tok_identity(hf)), "dir: %s", e.msg);
    qf_tok_free(d);
    d = NULL;
    snprintf(path, sizeof path, "%s/qwen.tiktoken", fixtures);
    snprintf(p2, sizeof p2, "%s/v1", g_dir);
    mkdir(p2, 0755);
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", path, p2);
    CHECK(system(cmd) == 0, "%s", cmd);
    CHECK(qf_tok_load(p2, &d, &e) == 0 && !strcmp(qf_tok_identity(d), qf_tok_identity(tt)), "v1 dir: %s", e.msg);
    qf_tok_free(d);
    /* the rank count (io/tok_tiktoken.c): Qwen v1's 151643 unless QWENFT_TIKTOKEN_RANKS names the fixture's 2000 */
    const char *had = getenv("QWENFT_TIKTOKEN_RANKS");
    char keep[32];
    snprintf(keep, sizeof keep, "%s", had ? had : "");
    unsetenv("QWENFT_TIKTOKEN_RANKS");
    snprintf(path, sizeof path, "%s/qwen.tiktoken", fixtures);
    expect_load_error(path, "qwen.tiktoken: 2000 ranks, but Qwen v1's qwen.tiktoken has 151643");
    expect_load_error(path, "set QWENFT_TIKTOKEN_RANKS=2000");
    setenv("QWENFT_TIKTOKEN_RANKS", "1999", 1);
    expect_load_error(path, "qwen.tiktoken: 2000 ranks, but QWENFT_TIKTOKEN_RANKS=1999");
    setenv("QWENFT_TIKTOKEN_RANKS", "2k", 1);
    expect_load_error(path, "QWENFT_TIKTOKEN_RANKS=2k: expected the number of ranks");
    setenv("QWENFT_TIKTOKEN_RANKS", "2000", 1);
    CHECK(qf_tok_load(path, &d, &e) == 0 && qf_tok_special(d, "<|endoftext|>") == 2000, "QWENFT_TIKTOKEN_RANKS=2000: %s", e.msg);
    qf_tok_free(d);
    d = NULL;
    if (keep[0]) setenv("QWENFT_TIKTOKEN_RANKS", keep, 1);
    else unsetenv("QWENFT_TIKTOKEN_RANKS");

    const char *bad[] = {"ab\xff", "ok \xe4\xbd", "x\xed\xa0\x80", "\xc0\xaf", "caf\xc3\xa9 \xf4\x90\x80\x80"};
    const size_t at[] = {2, 3, 1, 0, 6};
    for (int k = 0; k < 5; k++)
        for (int w = 0; w < 2; w++) {
            qf_ids ids = {0};
            qf_err ue = {0};
            char needle[64];
            snprintf(needle, sizeof needle, "byte offset %zu", at[k]);
            int rc = qf_tok_encode(w ? tt : hf, bad[k], strlen(bad[k]), &ids, &ue);
            CHECK(rc == 2 && strstr(ue.msg, needle), "invalid UTF-8 %d: rc %d \"%s\"", k, rc, ue.msg);
            free(ids.v);
        }
    int32_t unknown[] = {5, (int32_t)qf_tok_vocab_size(hf)}, neg[] = {-1};
    qf_err de = {0};
    char *s = qf_tok_decode(hf, unknown, 2, NULL, &de);
    CHECK(!s && de.code == 2 && strstr(de.msg, "unknown token id"), "unknown id: %s", de.msg);
    free(s);
    qf_err de2 = {0};
    s = qf_tok_decode(tt, neg, 1, NULL, &de2);
    CHECK(!s && de2.code == 2 && strstr(de2.msg, "-1"), "negative id: %s", de2.msg);
    free(s);
}

/* Encode speed on ~4 MB of mixed text (English, code, CJK, numbers): MB/s, printed. */
static void bench(const qf_tokenizer *t, const char *name) {
    const char *parts[] = {"The quick brown fox jumps over the lazy dog, isn't it? ", "def f(x):\n    return x * 2\n",
                           "我们的模型在大规模数据上训练，支持中文和英文。", "Price: 12345.67 EUR (2024-05-01)\n",
                           "Straße café naïve résumé über ", "    indented   text\twith\ttabs\r\n"};
    size_t cap = 4 << 20, n = 0;
    char *s = malloc(cap + 256);
    for (unsigned k = 0; n < cap; k = k * 1103515245u + 12345u) {
        const char *p = parts[(k >> 16) % 6];
        memcpy(s + n, p, strlen(p));
        n += strlen(p);
    }
    qf_ids ids = {0};
    qf_err e = {0};
    double t0 = qf_now();
    for (size_t off = 0, len; off < n; off += len) { /* records of ~4 KB, as prepare sees them */
        len = n - off < 4096 ? n - off : 4096;
        while (len < n - off && ((unsigned char)s[off + len] & 0xC0) == 0x80) len++; /* whole characters */
        qf_tok_encode(t, s + off, len, &ids, &e);
    }
    double dt = qf_now() - t0;
    printf("test_tokenizer: %s encodes %.1f MB/s (%.1f MB, %zu tokens)\n", name, n / dt / 1e6, n / 1e6, ids.n);
    CHECK(e.code == 0, "bench: %s", e.msg);
    free(ids.v);
    free(s);
}

int main(void) {
    const char *src = getenv("SRC") && *getenv("SRC") ? getenv("SRC") : ".";
    char dir[900];
    snprintf(dir, sizeof dir, "%s/tests/reference/fixtures/tokenizer", src);
    snprintf(g_dir, sizeof g_dir, "/tmp/qf-test-tok-%d", (int)getpid());
    mkdir(g_dir, 0755);
    qf_tokenizer *hf = load(dir, "tokenizer.json"), *tt = load(dir, "qwen.tiktoken"), *mini = load(dir, "mini.json");
    qf_tokenizer *sh = load(dir, "shuffled.tiktoken");
    if (hf && tt && sh && mini) {
        test_goldens(dir, hf, tt, sh, mini);
        test_long(hf, "tokenizer.json");
        test_long(tt, "qwen.tiktoken");
        test_nul(hf, "tokenizer.json");
        test_nul(tt, "qwen.tiktoken");
        test_errors(dir, hf, tt);
        bench(hf, "tokenizer.json");
        bench(tt, "qwen.tiktoken");
    }
    qf_tok_free(hf);
    qf_tok_free(tt);
    qf_tok_free(mini);
    qf_tok_free(sh);
    if (!qf_test_failures) qf_test_remove_dir(g_dir);
    printf("test_tokenizer: %d checks, %d failed\n", qf_test_checks, qf_test_failures);
    return qf_test_failures ? 1 : 0;
}
