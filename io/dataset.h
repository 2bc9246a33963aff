/* dataset.h — the packed dataset file (HDF5), docs/formats.md:
 *   /tokens       uint32 [n_tokens]   all documents concatenated, in input order
 *   /loss_mask    uint8  [n_tokens]   1 = this token is a training target
 *   /doc_offsets  uint64 [n_docs+1]   document d is tokens [doc_offsets[d], doc_offsets[d+1])
 *   root attrs: format = "qwen-ft-packed", format_version = 1, vocab_size, eos_token_id, pad_token_id,
 *               tokenizer (identity string, "" for pre-tokenized input), n_docs, n_tokens, source (input files)
 * Readers open the file once, keep doc_offsets in memory and read token ranges as hyperslabs. */
#ifndef QF_DATASET_H
#define QF_DATASET_H
#include <stdint.h>
#include "util.h"

typedef struct qf_dataset {
    char path[1024];
    int64_t h5file;           /* hid_t */
    int64_t h5tokens, h5mask; /* hid_t of /tokens and /loss_mask, open while the file is */
    int64_t n_tokens, n_docs;
    uint64_t *doc_offsets;    /* [n_docs+1] */
    int64_t vocab_size;
    int64_t eos_token_id, pad_token_id;
    char tokenizer[256];
    int64_t max_token;        /* largest token id in /tokens (stored as attr max_token_id) */
} qf_dataset;

/* Opens and validates (format attr, dataset presence and sizes, offsets monotone and ending at n_tokens):
 * any defect is exit 2 naming the file and what is wrong. */
int qf_dataset_open(const char *path, qf_dataset *ds, qf_err *e);
/* (Validation also checks: /tokens is 32-bit unsigned, /loss_mask 8-bit integer of the same length,
 * /doc_offsets 64-bit integer starting at 0, format_version = 1, n_docs/n_tokens attrs (when present) match,
 * and no token id >= vocab_size when vocab_size > 0, using the max_token_id attr, or a scan of /tokens when
 * the attr is absent. Optional attrs default to: vocab_size 0 (unknown), eos/pad -1 (unknown), tokenizer "".
 * Reads are independent: every rank may open the same file. Not thread-safe against other HDF5 calls.) */
void qf_dataset_close(qf_dataset *ds);
/* What a scan of tokens [begin, end) found: the largest id and its first position (-1, -1 when the range is
 * empty), and the first loss_mask value other than 0 or 1 (bad_mask_at = -1 when none). */
typedef struct qf_dataset_scan_result {
    int64_t max_token, max_at;
    int64_t bad_mask_at;
    int bad_mask_value;
} qf_dataset_scan_result;
/* Reads /tokens and /loss_mask over [begin, end) in bounded pieces (the stored max_token_id is a claim; this is
 * the check of it: src/train/run.c splits the file across ranks and compares). */
int qf_dataset_scan(const qf_dataset *ds, int64_t begin, int64_t end, qf_dataset_scan_result *r, qf_err *e);
/* Reads tokens [off, off+n) and their loss mask (either output may be NULL). */
int qf_dataset_read(const qf_dataset *ds, int64_t off, int64_t n, uint32_t *tokens, uint8_t *mask, qf_err *e);

/* In-memory builder used by prepare and tests */
typedef struct qf_dataset_builder {
    uint32_t *tokens; uint8_t *mask; uint64_t *offsets;
    int64_t n_tokens, cap_tokens, n_docs, cap_docs;
    int64_t max_token;        /* -1 while empty */
} qf_dataset_builder;
void qf_dsb_init(qf_dataset_builder *b);
/* Appends one document of n tokens; mask NULL means every token is a target (all ones). */
void qf_dsb_add_doc(qf_dataset_builder *b, const uint32_t *tok, const uint8_t *mask, int64_t n);
void qf_dsb_free(qf_dataset_builder *b);
/* Writes the builder's documents (or the subset listed in docs[0..ndocs), in that order, when docs != NULL)
 * to path atomically (path.tmp, then rename). */
int qf_dataset_write(const char *path, const qf_dataset_builder *b, const int64_t *docs, int64_t ndocs,
                     int64_t vocab_size, int64_t eos_id, int64_t pad_id, const char *tokenizer, const char *source,
                     qf_err *e);

/* The pieces of a dataset file that the collective writer (dataset_pwrite.h) shares with qf_dataset_write, so
 * that both make the same file: a 1-D dataset of elem_bytes (4: uint32, 1: uint8, 8: uint64) integers chunked by
 * min(n, 2^20) (returns the hid_t, < 0 on failure), and the root attributes. Collective on a parallel file. */
int64_t qf_dataset_h5_create_1d(int64_t file, const char *name, int elem_bytes, int64_t n);
int qf_dataset_h5_attrs(int64_t file, int64_t n_docs, int64_t n_tokens, int64_t vocab_size, int64_t max_token,
                        int64_t eos_id, int64_t pad_id, const char *tokenizer, const char *source);

#endif
