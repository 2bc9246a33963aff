/* decode_units.h — the weights a generate rank holds, served to the model through its unit hooks (model.h).
 *
 * Resident: each held unit is one backend buffer, loaded once. Streamed (`generate --stream-weights`, or chosen
 * when the layers do not fit --gpu-memory-limit-gb): the decoder layers stay in (page-locked) host memory in the
 * act dtype and pass through two device slots: when the model announces layer u (unit_will_use), u's copy is
 * waited for and the next layer (the first again after the last, for the next call) starts copying into the
 * other slot on the backend's copy engine, overlapping layer u's compute. The embedding and the final unit stay
 * resident. Device memory is then two layers instead of L/W, at the price of a host->device copy of every layer
 * per call (prefill chunk or decoding step), so it pays with large batches. */
#ifndef QF_DECODE_UNITS_H
#define QF_DECODE_UNITS_H
#include <stdint.h>
#include "model/model.h"

typedef struct qf_decode_units {
    qf_model *m;
    void **buf;         /* [nunits] resident units (backend memory), NULL if not held or streamed */
    int stream, first, last; /* streaming: layer units first..last (inclusive) */
    void **host;        /* [nunits] host act copies of the streamed units */
    int *pinned;        /* [nunits] host[u] is page-locked */
    void *slot[2];
    int slot_unit[2], slot_ticket[2]; /* unit in the slot (-1 none); pending copy ticket (-1 none) */
} qf_decode_units;

/* Loads the units this rank needs (layers [l0, l1), the embedding when first_rank or (tied) last_rank, the final
 * unit when last_rank) from the model source and installs the hooks on m. 0 or an exit code. */
int qf_decode_units_load(qf_decode_units *d, qf_model *m, const char *from, int l0, int l1, int first_rank,
                         int last_rank, int stream, qf_err *e);
void qf_decode_units_free(qf_decode_units *d);

#endif
