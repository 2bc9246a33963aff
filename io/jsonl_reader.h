/* jsonl_reader.h — streaming lines of a JSONL input (or the records of a JSON array file): plain, gzip (zlib) or zstd (libzstd), told apart by their
 * first bytes (1f 8b = gzip, 28 b5 2f fd = zstd), whatever the file's name. Memory is bounded: one input block,
 * one decoded block and one line of at most QF_JSONL_MAX_LINE bytes.
 *
 * A plain file can be read as a byte range [start, end): the reader then returns exactly the lines whose first
 * byte lies in the range (a line that starts before `start` belongs to the previous range), so that ranges that
 * tile a file return every line once. A compressed file is read whole (start must be 0).
 * Line numbers count from 1 at the range's first line; the caller adds the lines of the ranges before it. */
#ifndef QF_JSONL_READER_H
#define QF_JSONL_READER_H
#include <stddef.h>
#include <stdint.h>
#include "util.h"

/* The longest line accepted (bytes, newline excluded); a longer line is an error naming FILE:LINE. */
#define QF_JSONL_MAX_LINE QF_MAX_LINE_BYTES /* util.h: 16 MiB, the one line limit (docs/reliability.md) */
/* Bytes read from the file, and decoded, per block. */
#define QF_JSONL_BLOCK ((size_t)1 << 20)

typedef enum { QF_JSONL_PLAIN = 0, QF_JSONL_GZIP, QF_JSONL_ZSTD } qf_jsonl_kind;

typedef struct qf_jsonl qf_jsonl;

/* The compression of path from its first bytes; -1 (with e set, exit 2) when it cannot be read. */
int qf_jsonl_kind_of(const char *path, qf_jsonl_kind *kind, qf_err *e);
/* "plain", "gzip", "zstd" */
const char *qf_jsonl_kind_name(qf_jsonl_kind k);

/* Opens path for the lines starting in [start, end) (end < 0: to the end of the file). */
int qf_jsonl_open(const char *path, int64_t start, int64_t end, qf_jsonl **out, qf_err *e);
/* The next line (without its newline; the bytes stay valid until the next call): 1, or 0 at the end of the range,
 * or -1 with e set (read or decompression error, truncated input: reading cannot go on), or -2 with e set for a
 * line over QF_JSONL_MAX_LINE, which is skipped (the next call returns the line after it). The message of an
 * error does not name the file: the caller names FILE:LINE (*lineno is set). */
int qf_jsonl_next(qf_jsonl *r, const char **line, size_t *len, int64_t *lineno, qf_err *e);
/* 1 when the file (read from byte 0) is one JSON array of records ('[' first, after a byte-order mark and
 * whitespace; compressed or not): qf_jsonl_next then returns its elements one by one, streamed in bounded memory
 * (each at most QF_JSONL_MAX_LINE bytes), with the line each starts on; a broken array (a missing ',' or ']',
 * data after it) is an error (-1) naming the line. Such a file is read whole (by one rank). */
int qf_jsonl_is_array(const qf_jsonl *r);
/* Bytes of the file consumed so far (compressed bytes for a compressed file), for progress. */
int64_t qf_jsonl_consumed(const qf_jsonl *r);
void qf_jsonl_close(qf_jsonl *r);

/* Expands each pattern (a file name, or a glob(3) pattern with * ? [...]) into paths[*n], in the order given and,
 * within one pattern, sorted; a pattern that matches nothing is an error (exit 2). The caller frees with
 * qf_jsonl_paths_free. */
int qf_jsonl_expand(const char *const *patterns, int npat, char ***paths, int *n, qf_err *e);
void qf_jsonl_paths_free(char **paths, int n);

#endif
