/* dataset_pwrite.h — the packed dataset (dataset.h) written collectively by every rank of a communicator
 * (parallel HDF5 over MPI-IO): the sizes are agreed first, then each rank writes its ranges of /tokens,
 * /loss_mask and /doc_offsets. The file is the one qf_dataset_write makes (same datasets, chunking and attributes),
 * written as PATH.tmp-PID-RANDOM (rank 0's name, kernels/base/out_file.h) and renamed by rank 0 once every rank has
 * closed it. Every call is collective; a rank with nothing to write passes n = 0. */
#ifndef QF_DATASET_PWRITE_H
#define QF_DATASET_PWRITE_H
#include <mpi.h>
#include <stdint.h>
#include "util.h"

typedef struct qf_dsp qf_dsp;

int qf_dsp_create(const char *path, MPI_Comm comm, int64_t n_tokens, int64_t n_docs, qf_dsp **out, qf_err *e);
/* The same into the caller's temporary tmp (the same name on every rank), which qf_dsp_finish leaves in place for
 * the caller to publish (qf_out_commit: several outputs published together) and qf_dsp_abort removes. */
int qf_dsp_create_tmp(const char *path, const char *tmp, MPI_Comm comm, int64_t n_tokens, int64_t n_docs,
                      qf_dsp **out, qf_err *e);
/* tokens and masks [off, off+n) */
int qf_dsp_write_tokens(qf_dsp *w, int64_t off, int64_t n, const uint32_t *tok, const uint8_t *mask, qf_err *e);
/* doc_offsets [off, off+n) */
int qf_dsp_write_offsets(qf_dsp *w, int64_t off, int64_t n, const uint64_t *v, qf_err *e);
/* Attributes (every rank passes the same values), close, rename. Frees w; on failure nothing is left. */
int qf_dsp_finish(qf_dsp *w, int64_t vocab_size, int64_t max_token, int64_t eos_id, int64_t pad_id,
                  const char *tokenizer, const char *source, qf_err *e);
/* Closes and removes PATH.tmp (after an error on any rank). Frees w. */
void qf_dsp_abort(qf_dsp *w);

#endif
