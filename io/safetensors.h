/* safetensors.h — read-only access to HF safetensors (a single model.safetensors or a sharded set with
 * model.safetensors.index.json), memory-mapped. Header parsed with jansson; every malformation (short file,
 * header length past the end, bad JSON, unknown dtype, offsets outside the data, shape/size mismatch) is an
 * exit-2 error naming the file and, where it applies, the tensor. */
#ifndef QF_SAFETENSORS_H
#define QF_SAFETENSORS_H
#include <stdint.h>
#include "util.h"

typedef struct qf_st_tensor {
    char *name;
    char dtype[8];       /* "F32" | "BF16" | "F16" (others rejected when read) */
    int ndim;
    int64_t shape[8];
    int64_t numel;
    int file;            /* index into qf_st.files */
    const uint8_t *data; /* mapped bytes */
    int64_t nbytes;      /* end - begin of its data_offsets (no two tensors of a file overlap) */
} qf_st_tensor;

typedef struct qf_st {
    int nfiles;
    char **files;
    void **maps;
    size_t *map_len;
    int ntensors;
    qf_st_tensor *t;
} qf_st;

/* Opens dir/model.safetensors.index.json (and its shards) if present, else dir/model.safetensors. */
int qf_st_open_dir(const char *dir, qf_st *st, qf_err *e);
/* Opens one .safetensors file. */
int qf_st_open_file(const char *path, qf_st *st, qf_err *e);
void qf_st_close(qf_st *st);
/* Tensor by name, or NULL. */
const qf_st_tensor *qf_st_find(const qf_st *st, const char *name);
/* 0 if t can be read (dtype F32, BF16 or F16); else an exit-2 error naming the file, tensor and dtype. */
int qf_st_check(const qf_st *st, const qf_st_tensor *t, qf_err *e);
/* Copies elements [off, off+n) of the flattened tensor as fp32 (t must pass qf_st_check). */
void qf_st_read_f32(const qf_st_tensor *t, int64_t off, int64_t n, float *out);

/* Writes a single-file safetensors with the given tensors (fp32 sources converted to dtype "F32"|"BF16"|"F16"),
 * atomically (temporary name + rename). Used by export and by the tests. metadata may be NULL. */
typedef struct qf_st_out {
    const char *name;
    int ndim;
    int64_t shape[8];
    const float *data;
} qf_st_out;
int qf_st_write(const char *path, const qf_st_out *tensors, int n, const char *dtype, qf_err *e);

#endif
