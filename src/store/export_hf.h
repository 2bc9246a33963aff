/* export_hf.h — HF directories (export_hf.c): `qwen-ft export` from a file on one process, and the pieces that
 * `checkpoint.export_hf` (export_sharded.c, from the ZeRO shards in memory, collectively) shares with it. */
#ifndef QF_EXPORT_HF_H
#define QF_EXPORT_HF_H
#include <stdint.h>
#include "hf.h"
#include "model_config.h"
#include "util.h"

#define QF_EXPORT_SHARD_BYTES ((int64_t)5 << 30) /* default --max-shard-size: 5 GiB */

/* config.json as transformers writes it for Qwen2ForCausalLM / Qwen3ForCausalLM; dtype "bf16" | "fp16" | "fp32" */
int qf_export_write_config(const char *dir, const qf_model_config *c, const char *dtype, qf_err *e);
/* Cuts specs[n] (in order) into safetensors files of at most shard_bytes (a larger tensor gets a file of its
 * own): file s holds specs [starts[s], starts[s+1]) (starts has n + 1 entries). Returns the number of files. */
int qf_export_plan(const qf_param_spec *specs, int n, int64_t esize, int64_t shard_bytes, int *starts);
/* The name of file s of nfiles: model.safetensors, or model-0000s-of-0000n.safetensors */
void qf_export_file_name(int s, int nfiles, char *out, size_t cap);
/* Writes the HF directory out (which must not exist, or be empty) from the model or checkpoint from (an HDF5
 * model, a checkpoint file or directory): tensors in dtype_arg (NULL: the model's own dtype), the tokenizer tok_arg
 * (NULL: the one the model recorded), safetensors files of at most shard_bytes. 0 or an exit code in e. */
int qf_export_hf_file(const char *from, const char *out, const char *dtype_arg, const char *tok_arg,
                      int64_t shard_bytes, qf_err *e);
/* Removes a directory of plain files (a failed or stale HF directory): its entries, then itself; best effort. */
void qf_export_remove_dir(const char *dir);

#endif
