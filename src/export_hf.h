/* export_hf.h — the pieces of an HF directory that `qwen-ft export` (src/cmd_export.c, from a file, on rank 0) and
 * `checkpoint.export_hf` (src/export_sharded.c, from the ZeRO shards in memory, collectively) share. */
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
/* Removes a directory of plain files (a failed or stale HF directory): its entries, then itself; best effort. */
void qf_export_remove_dir(const char *dir);

#endif
