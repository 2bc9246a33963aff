/* loader.h — packs documents into rows of seq_len tokens, deterministically from (seed, epoch, row index).
 *
 * Semantics (docs/formats.md, "Packing"): for epoch e the documents are taken in input order, or in a seeded
 * permutation of it when shuffle is on (the permutation depends only on seed and e); their tokens are
 * concatenated into one stream which is cut into rows of T tokens (the last row of an epoch padded with
 * pad_token_id, mask 0). A document that spans a row boundary is split: each row-part is its own segment, with
 * positions restarting at 0. Within a row, token t attends to tokens of its segment up to t; position t predicts
 * token t+1 when t+1 is in the same segment and loss_mask[t+1] = 1; otherwise the target is -1 (not trained).
 *
 * The loader is stateless given (epoch, row): any rank reads any part of any global batch; resuming needs only
 * the step. */
#ifndef QF_LOADER_H
#define QF_LOADER_H
#include <stdint.h>
#include "dataset.h"

typedef struct qf_loader {
    const qf_dataset *ds;
    int T;
    int shuffle;
    uint64_t seed;
    int64_t rows_per_epoch;     /* ceil(n_tokens / T) */
    /* cache of the current epoch's order */
    int64_t cached_epoch;
    int64_t *order;             /* [n_docs] document order of cached_epoch */
    uint64_t *cum;              /* [n_docs+1] stream offset of order[i] */
} qf_loader;

/* Rows of a micro-batch, ready for the model. All arrays [B*T]. */
typedef struct qf_rows {
    int B, T;
    int32_t *tokens;     /* input token ids (pad where padded) */
    int32_t *targets;    /* next token to predict, or -1 */
    int32_t *seg_start;  /* index within the row of the segment's first token */
    int32_t *pos;        /* t - seg_start */
    int64_t *doc;        /* global document index of each token, -1 for padding */
    int64_t n_targets;   /* number of targets != -1 */
} qf_rows;

void qf_loader_init(qf_loader *l, const qf_dataset *ds, int T, int shuffle, uint64_t seed);
void qf_loader_free(qf_loader *l);
void qf_rows_alloc(qf_rows *r, int B, int T);
void qf_rows_free(qf_rows *r);
/* Fills r with rows [row0, row0+r->B) of epoch `epoch` (rows past rows_per_epoch are empty: all padding,
 * no targets). */
int qf_loader_rows(qf_loader *l, int64_t epoch, int64_t row0, qf_rows *r, qf_err *e);

#endif
