/* model_io.h — model sources (model_io.c): an HF directory, an HDF5 model (qwen-ft import), a checkpoint file,
 * or a checkpoint directory (its `latest`). */
#ifndef QF_MODEL_IO_H
#define QF_MODEL_IO_H
#include <stddef.h>
#include <stdint.h>
#include "model/model.h"
#include "model_config.h"
#include "util.h"

/* Reads the flat range [b, e) of the parameters from `from` (HF dir, HDF5 model, checkpoint file or directory;
 * a checkpoint's fp32 /master when present) into out[e-b] (host fp32). */
int qf_model_load_range(const qf_model *m, const char *from, int64_t b, int64_t e, float *out, qf_err *err);
/* The same into the model's own flat buffer (QF_MODEL_PARAMS). */
int qf_model_load(qf_model *m, const char *from, qf_err *e);
/* Reads the config a model source (HF dir, HDF5 model/checkpoint, checkpoint dir) declares. */
int qf_model_source_config(const char *from, qf_model_config *c, char *resolved, size_t cap, qf_err *e);
#endif
