/* fuzz_tokenizer.c — tokenizer.json (and qwen.tiktoken) loading: qf_tok_load on arbitrary bytes returns a
 * tokenizer or exit 2; a loaded one encodes and decodes a fixed text without a crash. The first input byte picks
 * the file kind (even: .json, odd: .tiktoken). A tiktoken input states its count of non-blank lines as
 * QWENFT_TIKTOKEN_RANKS, so that small vocabularies get past the rank-count rule to the special tokens and the
 * encoder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_common.h"
#include "tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n == 0) return 0;
    if (data[0] & 1) {
        size_t lines = 0;
        int filled = 0;
        for (size_t i = 1; i <= n; i++) {
            int end = i == n || data[i] == '\n';
            if (!end && data[i] != ' ' && data[i] != '\t' && data[i] != '\r') filled = 1;
            if (end) lines += filled, filled = 0;
        }
        char v[32];
        snprintf(v, sizeof v, "%zu", lines ? lines : 1);
        setenv("QWENFT_TIKTOKEN_RANKS", v, 1);
    }
    const char *p = fuzz_file(data + 1, n - 1, data[0] & 1 ? ".tiktoken" : ".json");
    qf_tokenizer *t = NULL;
    qf_err e = {0};
    if (fuzz_refused(qf_tok_load(p, &t, &e), &e)) return 0;
    static const char text[] = "Hello, world! <|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd 123  \r\n";
    qf_ids ids = {0};
    qf_err ee = {0};
    (void)qf_tok_encode(t, text, sizeof text - 1, &ids, &ee);
    free(ids.v);
    qf_tok_free(t);
    return 0;
}
