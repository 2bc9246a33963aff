/* estimate.h — memory per rank and per node for a model under a ZeRO stage and offload choice, before any
 * allocation (qwen-ft estimate, the run header's memory plan). The formulas follow the ZeRO engine's
 * allocations one for one (docs/zero.md, "Memory"); the mpi tests check a CPU run's engine count against them. */
#ifndef QF_ESTIMATE_H
#define QF_ESTIMATE_H
#include <stdint.h>
#include "deck/deck.h"
#include "model_config.h"

typedef struct qf_mem_estimate {
    /* per rank, on the compute device (host memory for CPU ranks) */
    int64_t params, grads, optimizer, activations;
    int64_t params_live, grads_live; /* of which: gathered units / unit gradient buffers in flight (stage 2-3) */
    int64_t fp8;          /* fp8.enabled: the fp8 operand copies of the largest linear layer (in device_total) */
    int64_t device_total;
    /* host memory */
    int64_t host_per_rank;   /* offloaded optimizer state and fp32 gradient shard */
    int64_t host_per_node;   /* host_per_rank x ranks per node + the node-shared parameter copy */
} qf_mem_estimate;

/* world ranks, ranks_per_node, act_bytes (4 on CPU ranks / fp32, 2 for bf16 and fp16 on GPUs); the deck
 * provides stage, offload, buckets, micro batch, seq_len and activation checkpointing. */
void qf_estimate(const qf_model_config *c, const qf_deck *d, int world, int ranks_per_node, int64_t act_bytes,
                 qf_mem_estimate *out);

/* whether the deck puts the gradient shard in host memory (offload_optimizer.gradients = host, resolved) */
int qf_estimate_grads_on_host(const qf_deck *d);

/* offload_optimizer.gradients = auto, resolved for this run (src/plan/grads_home.c): "host" where the plan with
 * the shard on the device and half a GiB of margin exceeds budget_bytes (the GPU's memory, or gpu_memory_limit_gb; 0 =
 * no device budget: CPU ranks keep it "device", their device memory is host memory), else "device". Writes the
 * reason (for the run header) into why. A value the deck set stays. */
void qf_plan_grads_home(qf_deck *d, const qf_model_config *c, int world, int ranks_per_node, int64_t act_bytes,
                        int64_t budget_bytes, char *why, size_t n);
#endif
