/* tensorboard.h — a TensorBoard event-file writer in C, no TensorFlow needed (`tensorboard --logdir LOG_DIR`).
 *
 * The file is a TFRecord stream: each record is uint64 length (little-endian), masked CRC-32C of those 8 bytes,
 * the data, masked CRC-32C of the data. Each record's data is a serialized tensorflow.Event protobuf (encoded
 * here by hand): wall_time (field 1, double), step (2, int64), and either file_version (3, "brain.Event:2", the
 * first record) or summary (5) = Summary { value (1) { tag (1, string), simple_value (2, float) } }. */
#ifndef QF_TENSORBOARD_H
#define QF_TENSORBOARD_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "util.h"

typedef struct qf_tb {
    FILE *f;
    char path[4096];
} qf_tb;

/* Creates dir (mkdir -p) and dir/events.out.tfevents.<unix time>.<host>.<pid>, writes the file_version record.
 * Returns a writer, or NULL with e filled (exit code 2: the directory or file cannot be created). */
qf_tb *qf_tb_open(const char *dir, qf_err *e);
/* One scalar; a NULL writer is a no-op (so callers need not test). Non-finite values are written as they are
 * (TensorBoard shows NaN/Inf). */
void qf_tb_scalar(qf_tb *tb, const char *tag, int64_t step, double value);
void qf_tb_flush(qf_tb *tb);
void qf_tb_close(qf_tb *tb);

/* The scalars of one optimizer step / one evaluation, under the tags docs/hpc.md lists (train/loss, train/lr,
 * train/grad_norm, train/loss_scale, perf/tokens_per_s, perf/mfu, perf/peak_host_mem_gib; eval/valid_loss,
 * eval/valid_ppl); flushed, so that a running TensorBoard sees them at once. */
void qf_tb_train_step(qf_tb *tb, int64_t step, double loss, double lr, double grad_norm, double loss_scale,
                      double tokens_per_s, double mfu, double mem_gib);
void qf_tb_eval(qf_tb *tb, int64_t step, double valid_loss, double valid_ppl);

/* Exposed for the unit test: CRC-32C (Castagnoli) and TFRecord's masking of it. */
uint32_t qf_crc32c(const void *data, size_t n);
uint32_t qf_tb_masked_crc(const void *data, size_t n);

#endif
