/* test_tok_export.c — io/tok_export.c: the fixture qwen.tiktoken (and shuffled.tiktoken, whose ranks are not in
 * merge order) written as tokenizer.json and loaded back as an HF tokenizer encodes every golden string of
 * tests/reference/fixtures/tokenizer/goldens.json to tiktoken's ids (made with tiktoken 0.14 by
 * make_tokenizer_fixture.py), except where a special token is directly followed by a combining mark (tiktoken's
 * whole-text NFC composes the token's '>' away; HF matches the token first: documented in io/tok_export.c), and
 * decodes every id to the same bytes; the special tokens keep their ids; an HF
 * tokenizer is refused. (transformers on the converted file is checked by tests/cli/unit_export_complete.sh where
 * it is installed.) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer.h"
#include "qf_test.h"


/* 1 when text has a special token directly followed by a combining mark (U+0300..U+036F): tiktoken's whole-text
 * NFC composes the token's '>' with it (the token is gone), HF matches the token before normalizing (documented in
 * io/tok_export.c) */
static int nfc_across_special(const char *text, size_t len) {
    static const char *const sp[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(sp[k]);
        for (size_t i = 0; i + n + 1 < len; i++)
            if (!memcmp(text + i, sp[k], n)) {
                unsigned char a = (unsigned char)text[i + n], b = (unsigned char)text[i + n + 1];
                if ((a == 0xCC && b >= 0x80) || (a == 0xCD && b <= 0xAF)) return 1;
            }
    }
    return 0;
}

static void check_file(const char *fix, const char *name, const char *key, json_t *cases) {
    char path[1200], out[1200];
    snprintf(path, sizeof path, "%s/%s", fix, name);
    snprintf(out, sizeof out, "%s/test_tok_export-%s.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", name);
    qf_tokenizer *tt = NULL, *hf = NULL;
    qf_err e = {0};
    CHECK(qf_tok_load(path, &tt, &e) == 0, "%s", e.msg);
    if (!tt) return;
    CHECK(qf_tok_write_hf_json(tt, out, &e) == 0, "%s", e.msg);
    CHECK(qf_tok_load(out, &hf, &e) == 0, "loading the converted %s: %s", name, e.msg);
    if (!hf) {
        qf_tok_free(tt);
        return;
    }
    CHECK(!strncmp(qf_tok_identity(hf), "hf-tokenizer.json", 17), "%s", qf_tok_identity(hf));
    CHECK(qf_tok_vocab_size(hf) == qf_tok_vocab_size(tt), "vocab %lld vs %lld", (long long)qf_tok_vocab_size(hf),
          (long long)qf_tok_vocab_size(tt));
    static const char *const specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|extra_0|>", "<|extra_204|>"};
    for (int i = 0; i < 5; i++)
        CHECK(qf_tok_special(hf, specials[i]) == qf_tok_special(tt, specials[i]) && qf_tok_special(hf, specials[i]) >= 0,
              "%s: special %s", name, specials[i]);
    size_t i, bad = 0, explained = 0;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *text = json_object_get(c, "text"), *want = json_object_get(c, key);
        qf_ids got = {0};
        qf_err ee = {0};
        int ok = qf_tok_encode(hf, json_string_value(text), json_string_length(text), &got, &ee) == 0 &&
                 got.n == json_array_size(want);
        for (size_t k = 0; ok && k < got.n; k++) ok = got.v[k] == json_integer_value(json_array_get(want, k));
        if (!ok && nfc_across_special(json_string_value(text), json_string_length(text))) explained++;
        else if (!ok) {
            bad++;
            if (bad <= 5) fprintf(stderr, "FAIL %s case %zu (%.40s): ids differ from tiktoken's\n", name, i, json_string_value(text));
        }
        free(got.v);
    }
    CHECK(bad == 0, "%s: %zu of %zu golden strings differ", name, bad, json_array_size(cases));
    for (int32_t id = 0; id < qf_tok_vocab_size(tt); id++) {
        size_t la = 0, lb = 0;
        qf_err d1 = {0}, d2 = {0};
        char *a = qf_tok_decode(tt, &id, 1, &la, &d1), *b = qf_tok_decode(hf, &id, 1, &lb, &d2);
        if (!a || !b || la != lb || memcmp(a, b, la)) {
            CHECK(0, "%s: id %d decodes differently", name, id);
            free(a), free(b);
            break;
        }
        free(a), free(b);
    }
    CHECK(explained <= 2, "%s: %zu differences attributed to whole-text NFC", name, explained);
    printf("test_tok_export: %s as tokenizer.json: %zu of %zu golden strings equal tiktoken's ids (%zu differ as "
           "documented: a special token followed by a combining mark), every id decodes the same\n",
           name, json_array_size(cases) - explained, json_array_size(cases), explained);
    qf_err re = {0};
    CHECK(qf_tok_write_hf_json(hf, out, &re) != 0, "an HF tokenizer must be refused");
    qf_tok_free(tt);
    qf_tok_free(hf);
    remove(out);
}

int main(void) {
    const char *src = getenv("SRC");
    char fix[1024], path[1100];
    snprintf(fix, sizeof fix, "%s/tests/reference/fixtures/tokenizer", src && *src ? src : ".");
    snprintf(path, sizeof path, "%s/goldens.json", fix);
    json_error_t je;
    json_t *g = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!g) {
        fprintf(stderr, "test_tok_export: %s: %s (set SRC)\n", path, je.text);
        return 1;
    }
    check_file(fix, "qwen.tiktoken", "tiktoken", json_object_get(g, "cases"));
    check_file(fix, "shuffled.tiktoken", "shuffled", json_object_get(g, "cases"));
    json_decref(g);
    if (qf_test_failures) fprintf(stderr, "test_tok_export: %d qf_test_failures\n", qf_test_failures);
    else printf("test_tok_export: all checks passed\n");
    return qf_test_failures ? 1 : 0;
}
