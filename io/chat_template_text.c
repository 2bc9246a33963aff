/* chat_template_text.c — the rendered text of a chat template with a mask byte per text byte (qf_tb,
 * chat_template_impl.h): what chat_template_render.c writes into and chat_template.c tokenizes. */
#include <stdlib.h>
#include <string.h>
#include "chat_template_impl.h"

void qf_tb_put(qf_tb *b, const char *s, size_t n, uint8_t m) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 1024;
        while (c < b->n + n + 1) c *= 2;
        b->s = qf_realloc(b->s, c);
        b->m = qf_realloc(b->m, c);
        b->cap = c;
    }
    memcpy(b->s + b->n, s, n);
    memset(b->m + b->n, m, n);
    b->n += n;
    b->s[b->n] = 0;
}

void qf_tb_lit(qf_tb *b, const char *s, uint8_t m) { qf_tb_put(b, s, strlen(s), m); }

void qf_tb_content(qf_tb *b, const char *s, size_t n, uint8_t m) {
    size_t k;
    const char *q = qf_tok_normalize(b->tok, s, n, &k);
    qf_tb_put(b, q, k, m);
    if (q != s) free((char *)q);
}

void qf_tb_turn_end(qf_tb *b) {
    if (b->n_ends == b->cap_ends) {
        b->cap_ends = b->cap_ends ? 2 * b->cap_ends : 16;
        b->ends = qf_realloc(b->ends, b->cap_ends * sizeof *b->ends);
    }
    b->ends[b->n_ends++] = b->n;
}

void qf_tb_free(qf_tb *b) {
    free(b->s);
    free(b->m);
    free(b->ends);
    memset(b, 0, sizeof *b);
}

