/* deck_lines.c — the source lines of the deck files, read once per file (see deck_impl.h deck_line_get): the
 * integer literals that libconfig 1.5 wraps to 32 bits are re-read from their line (deck_parse.c), and a deck of
 * many such keys used to read its file again up to the line of each. */
#include <stdlib.h>
#include <string.h>
#include "deck_impl.h"
#include "out_file.h"

struct deck_texts {
    struct deck_text {
        char *file, *buf;
        size_t *off; /* off[k]: start of line k+1; off[nlines] = the end */
        unsigned nlines;
    } *t;
    int n;
};

static struct deck_text *deck_text_load(deck_texts *tx, const char *file) {
    for (int i = 0; i < tx->n; i++)
        if (strcmp(tx->t[i].file, file) == 0) return tx->t[i].buf ? &tx->t[i] : NULL;
    tx->t = qf_realloc(tx->t, (size_t)(tx->n + 1) * sizeof *tx->t);
    struct deck_text *d = &tx->t[tx->n++];
    memset(d, 0, sizeof *d);
    d->file = qf_strdup(file);
    qf_err e = {0};
    size_t len = 0;
    d->buf = qf_in_slurp("deck", file, QF_MAX_DECK_BYTES, &len, &e); /* NULL: no literal; libconfig's value stands */
    if (!d->buf) return NULL;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += d->buf[i] == '\n';
    d->off = qf_malloc((lines + 1) * sizeof *d->off);
    d->off[0] = 0;
    for (size_t i = 0, k = 1; i < len; i++)
        if (d->buf[i] == '\n') d->off[k++] = i + 1;
    d->off[lines] = len + 1; /* as if a '\n' ended the last line */
    d->nlines = (unsigned)lines;
    return d;
}

int deck_line_get(const deck_ctx *c, const char *file, unsigned line, char *out, size_t cap) {
    if (!c->texts || line == 0) return -1;
    struct deck_text *d = deck_text_load(c->texts, file);
    if (!d || line > d->nlines) return -1;
    size_t a = d->off[line - 1], b = d->off[line] - 1; /* without its '\n' */
    if (b - a + 1 > cap) return -1;
    memcpy(out, d->buf + a, b - a);
    out[b - a] = 0;
    return 0;
}

deck_texts *deck_lines_new(void) { return qf_calloc(1, sizeof(deck_texts)); }

void deck_lines_free(deck_texts *tx) {
    if (!tx) return;
    for (int i = 0; i < tx->n; i++) free(tx->t[i].file), free(tx->t[i].buf), free(tx->t[i].off);
    free(tx->t);
    free(tx);
}
