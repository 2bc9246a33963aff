/* loader.c — packing documents into rows of T tokens; see loader.h and docs/formats.md ("Packing").
 *
 * The epoch's stream is never materialised: the loader keeps the epoch's document order and the cumulative
 * stream offsets cum[i] (O(n_docs) memory), finds the document under a row's first token by binary search and
 * reads only that row's token ranges from the file. */
#include "loader.h"
#include <stdlib.h>
#include <string.h>
#include "util/rng.h"

void qf_loader_init(qf_loader *l, const qf_dataset *ds, int T, int shuffle, uint64_t seed) {
    QF_CHECK(T > 0);
    memset(l, 0, sizeof *l);
    l->ds = ds;
    l->T = T;
    l->shuffle = shuffle ? 1 : 0;
    l->seed = seed;
    l->rows_per_epoch = (ds->n_tokens + T - 1) / T;
    l->cached_epoch = -1;
    l->order = qf_malloc((size_t)(ds->n_docs ? ds->n_docs : 1) * sizeof *l->order);
    l->cum = qf_malloc((size_t)(ds->n_docs + 1) * sizeof *l->cum);
}

void qf_loader_free(qf_loader *l) {
    free(l->order);
    free(l->cum);
    l->order = NULL;
    l->cum = NULL;
    l->cached_epoch = -1;
}

void qf_rows_alloc(qf_rows *r, int B, int T) {
    QF_CHECK(B > 0 && T > 0);
    size_t n = (size_t)B * (size_t)T;
    r->B = B;
    r->T = T;
    r->tokens = qf_malloc(n * sizeof *r->tokens);
    r->targets = qf_malloc(n * sizeof *r->targets);
    r->seg_start = qf_malloc(n * sizeof *r->seg_start);
    r->pos = qf_malloc(n * sizeof *r->pos);
    r->doc = qf_malloc(n * sizeof *r->doc);
    r->n_targets = 0;
}

void qf_rows_free(qf_rows *r) {
    free(r->tokens);
    free(r->targets);
    free(r->seg_start);
    free(r->pos);
    free(r->doc);
    memset(r, 0, sizeof *r);
}

/* Makes order/cum describe epoch `epoch` (a no-op when already cached). */
static void loader_set_epoch(qf_loader *l, int64_t epoch) {
    if (l->cached_epoch == epoch) return;
    const qf_dataset *ds = l->ds;
    int64_t n = ds->n_docs;
    if (l->shuffle)
        qf_rng_permutation(l->seed, epoch, n, l->order);
    else
        for (int64_t i = 0; i < n; i++) l->order[i] = i;
    l->cum[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t d = l->order[i];
        l->cum[i + 1] = l->cum[i] + (ds->doc_offsets[d + 1] - ds->doc_offsets[d]);
    }
    l->cached_epoch = epoch;
}

/* Index i of the epoch's document holding stream position p: cum[i] <= p < cum[i+1] (zero-length documents
 * are never returned: the last i with cum[i] <= p has cum[i+1] > p). Requires 0 <= p < n_tokens. */
static int64_t loader_find(const qf_loader *l, uint64_t p) {
    int64_t lo = 0, hi = l->ds->n_docs; /* invariant: cum[lo] <= p < cum[hi] */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (l->cum[mid] <= p)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static int32_t loader_pad_id(const qf_dataset *ds) {
    if (ds->pad_token_id >= 0) return (int32_t)ds->pad_token_id;
    if (ds->eos_token_id >= 0) return (int32_t)ds->eos_token_id;
    return 0;
}

/* Fills one row (arrays of T starting at the row's first element); mask is scratch [T]; tok scratch [T]. */
static int loader_row(qf_loader *l, int64_t row, int32_t *tokens, int32_t *targets, int32_t *seg_start,
                      int32_t *pos, int64_t *doc, uint32_t *tok, uint8_t *mask, int64_t *n_targets, qf_err *e) {
    const qf_dataset *ds = l->ds;
    const int T = l->T;
    int32_t pad = loader_pad_id(ds);
    /* padding everywhere first: pad id, no document, own segment, no target */
    for (int t = 0; t < T; t++) {
        tokens[t] = pad;
        targets[t] = -1;
        seg_start[t] = t;
        pos[t] = 0;
        doc[t] = -1;
        mask[t] = 0;
    }
    if (row >= l->rows_per_epoch) return 0;
    uint64_t start = (uint64_t)row * (uint64_t)T;
    uint64_t end = start + (uint64_t)T;
    if (end > (uint64_t)ds->n_tokens) end = (uint64_t)ds->n_tokens;
    for (int64_t i = loader_find(l, start); i < ds->n_docs && l->cum[i] < end; i++) {
        uint64_t a = l->cum[i] > start ? l->cum[i] : start; /* stream range of this segment */
        uint64_t b = l->cum[i + 1] < end ? l->cum[i + 1] : end;
        if (b <= a) continue; /* zero-length document */
        int64_t d = l->order[i];
        int s0 = (int)(a - start), n = (int)(b - a);
        int64_t foff = (int64_t)(ds->doc_offsets[d] + (a - l->cum[i]));
        int rc = qf_dataset_read(ds, foff, n, tok + s0, mask + s0, e);
        if (rc) return rc;
        for (int k = 0; k < n; k++) {
            int t = s0 + k;
            if (tok[t] > (uint32_t)INT32_MAX)
                return qf_err_set(e, QF_EXIT_INPUT, "%s: token id %u at %lld does not fit an int32", ds->path,
                                  tok[t], (long long)(foff + k));
            tokens[t] = (int32_t)tok[t];
            seg_start[t] = s0;
            pos[t] = k;
            doc[t] = d;
        }
    }
    for (int t = 0; t + 1 < T; t++)
        if (doc[t] >= 0 && seg_start[t + 1] == seg_start[t] && mask[t + 1]) {
            targets[t] = tokens[t + 1];
            (*n_targets)++;
        }
    return 0;
}

int qf_loader_rows(qf_loader *l, int64_t epoch, int64_t row0, qf_rows *r, qf_err *e) {
    if (epoch < 0 || row0 < 0)
        return qf_err_set(e, QF_EXIT_RUNTIME, "loader: negative epoch %lld or row %lld", (long long)epoch,
                          (long long)row0);
    QF_CHECK(r->T == l->T);
    loader_set_epoch(l, epoch);
    const int T = l->T;
    uint32_t *tok = qf_malloc((size_t)T * sizeof *tok);
    uint8_t *mask = qf_malloc((size_t)T);
    r->n_targets = 0;
    int rc = 0;
    for (int b = 0; b < r->B && rc == 0; b++) {
        size_t o = (size_t)b * (size_t)T;
        rc = loader_row(l, row0 + b, r->tokens + o, r->targets + o, r->seg_start + o, r->pos + o, r->doc + o, tok,
                        mask, &r->n_targets, e);
    }
    free(tok);
    free(mask);
    return rc;
}
