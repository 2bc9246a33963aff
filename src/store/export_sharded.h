/* export_sharded.h — `checkpoint.export_hf = true`: each checkpoint also writes an HF directory
 * (checkpoint.dir/step-NNNNNNNN-hf) straight from the ZeRO engine's sharded state, without gathering the model on
 * one rank, one GPU or one host.
 *
 * The safetensors layout is known before any data moves (the header lists every tensor's dtype, shape and byte
 * range), so the files are opened collectively with MPI-IO and every rank writes, unit by unit, the bytes of the
 * part of each tensor that lies in its shard of the flat parameter space (the fp32 master weights, rounded to the
 * model's dtype), at their offsets; rank 0 writes the headers, config.json, generation_config.json, the index and
 * the tokenizer files (src/store/export_tokenizer.c, found through the checkpoint's deck). Written as step-N-hf.tmp and
 * renamed; HF directories whose checkpoint was pruned are removed. The result equals `qwen-ft export --from
 * step-N.h5` tensor for tensor. */
#ifndef QF_EXPORT_SHARDED_H
#define QF_EXPORT_SHARDED_H
#include "zero/zero.h"

/* Collective over z->comm->world. ckpt: the checkpoint file just published (for its deck's tokenizer). */
int qf_export_hf_sharded(qf_zero *z, const char *ckpt_dir, const char *ckpt, int64_t step, qf_err *e);

#endif
