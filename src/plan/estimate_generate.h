/* estimate_generate.h — device memory of `qwen-ft generate` (src/generate/decode.c) per rank, for `qwen-ft estimate`:
 * weights of the units a rank holds under the layer split, its layers' KV caches for B rows of S positions, the
 * activations of one prefill call and the logits (qf_model_paged_bytes), and which mode applies for a device of
 * a given size: the model on one device, the layers split across the ranks, the layers streamed from host memory
 * (src/generate/decode_units.h), or none of them. */
#ifndef QF_ESTIMATE_GENERATE_H
#define QF_ESTIMATE_GENERATE_H
#include <stdint.h>
#include "model_config.h"

typedef struct qf_gen_estimate {
    int64_t one_rank;     /* bytes on one device holding the whole model */
    int64_t split_worst;  /* bytes on the fullest rank of the W-rank layer split */
    int64_t stream_worst; /* the same with the layers streamed from host memory (two layer slots on the device) */
    int64_t weights, kv;  /* of one_rank: the weights, the KV caches */
} qf_gen_estimate;

/* B rows of S positions (prompt + new tokens), ab bytes per act element, W ranks */
void qf_estimate_generate(const qf_model_config *c, int B, int S, int W, int64_t ab, qf_gen_estimate *out);

#endif
