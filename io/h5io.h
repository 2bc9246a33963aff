/* h5io.h — HDF5 model and checkpoint files (parallel HDF5 via MPI-IO; one rank is just a communicator of 1).
 *
 * Layout (docs/formats.md):
 *   /                 attrs: format = "qwen-ft-model" | "qwen-ft-checkpoint", format_version = 1, and the model
 *                     config (arch, family, vocab_size, hidden_size, ..., dtype) as attributes
 *   /params/<name>    one dataset per parameter, HF names ("model.layers.0.self_attn.q_proj.weight"), full shape,
 *                     stored as bf16 (an HDF5 float type: sign 15, exponent 7..14, mantissa 0..6), fp16 or fp32
 *   /master, /adam_m, /adam_v /<name>   (checkpoints) fp32, same shapes
 *   /state            (checkpoints) attrs written by the trainer
 *
 * Flat ranges: every read/write names a contiguous range [off, off+n) of the parameter's FLATTENED elements, so
 * a ZeRO shard (a flat range of the parameter space) is written and read as a hyperslab selection (the union of
 * at most three rectangular blocks for a 2-D tensor); n may be 0 on a rank that holds none of it.
 * All create/write calls are collective over the file's communicator; reads are independent. */
#ifndef QF_H5IO_H
#define QF_H5IO_H
#include <mpi.h>
#include <stdint.h>
#include "dtype.h"
#include "model_config.h"
#include "util.h"


typedef struct qf_h5 qf_h5; /* an open file */

/* Creates (truncating) path for writing, collectively over comm. */
int qf_h5_create(const char *path, MPI_Comm comm, qf_h5 **out, qf_err *e);
/* Opens an existing file; write != 0 for read-write. Checks it is HDF5, naming path in errors (exit 2). */
int qf_h5_open(const char *path, MPI_Comm comm, int write, qf_h5 **out, qf_err *e);
/* Closes; returns 0 or an error (a failed flush is an error). */
int qf_h5_close(qf_h5 *f, qf_err *e);

/* Model config as root attributes. read validates (missing/invalid attribute -> exit 2 naming file and attr). */
int qf_h5_write_config(qf_h5 *f, const qf_model_config *c, qf_err *e);
int qf_h5_read_config(qf_h5 *f, qf_model_config *c, qf_err *e);

/* Creates dataset "group/name" (groups made as needed) of the given shape and file dtype and writes the flat
 * range [off, off+n) from fp32 host data (converted). Collective: every rank calls with the same name, shape, dtype. */
int qf_h5_write_f32(qf_h5 *f, const char *group, const char *name, int ndim, const int64_t *shape, qf_dtype dt,
                    int64_t off, int64_t n, const float *data, qf_err *e);
/* Reads the flat range [off, off+n) of "group/name" converted to fp32. Missing dataset, wrong size -> exit 2
 * naming the file and dataset. */
int qf_h5_read_f32(qf_h5 *f, const char *group, const char *name, int64_t off, int64_t n, float *data, qf_err *e);
/* Shape of "group/name": returns 0 and fills ndim, shape[<=4], dtype; or exit-2 error if missing. */
int qf_h5_shape(qf_h5 *f, const char *group, const char *name, int *ndim, int64_t *shape, qf_dtype *dt, qf_err *e);
/* Checks that "group/name" has exactly the shape [shape[0..ndim)) (not only as many elements): exit 2 naming the
 * file, the dataset, both shapes. */
int qf_h5_check_shape(qf_h5 *f, const char *group, const char *name, int ndim, const int64_t *shape, qf_err *e);
/* 1 if "group/name" (or "group" when name is NULL) exists. */
int qf_h5_has(qf_h5 *f, const char *group, const char *name);

/* Scalar/string/blob attributes on a group ("/" for root; created if missing). Collective for writes. */
int qf_h5_attr_write_i64(qf_h5 *f, const char *group, const char *key, int64_t v, qf_err *e);
int qf_h5_attr_write_f64(qf_h5 *f, const char *group, const char *key, double v, qf_err *e);
int qf_h5_attr_write_str(qf_h5 *f, const char *group, const char *key, const char *v, qf_err *e);
int qf_h5_attr_write_blob(qf_h5 *f, const char *group, const char *key, const void *p, size_t n, qf_err *e);
int qf_h5_attr_read_i64(qf_h5 *f, const char *group, const char *key, int64_t *v, qf_err *e);
int qf_h5_attr_read_f64(qf_h5 *f, const char *group, const char *key, double *v, qf_err *e);
int qf_h5_attr_read_str(qf_h5 *f, const char *group, const char *key, char *v, size_t cap, qf_err *e);
int qf_h5_attr_read_blob(qf_h5 *f, const char *group, const char *key, void *p, size_t n, qf_err *e);
/* 1 if the attribute exists */
int qf_h5_attr_has(qf_h5 *f, const char *group, const char *key);

const char *qf_h5_path(const qf_h5 *f);
/* Fault injection (docs/testing.md, kind h5write): from now on this rank's dataset writes report failure after
 * doing their collective part, as a full disk on this rank would. */
void qf_h5_fail_writes(qf_h5 *f);

#endif
