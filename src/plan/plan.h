/* plan.h — the layout planner: every ZeRO stage x offload x micro batch x recomputation (and recompute_layers
 * where a partial mix is what fits) for a deck, each with its memory (qf_estimate, the estimate's own formulas)
 * and its predicted time per step (the speed model, speed.c, on measured rates: calibrate.c), ranked by tokens/s
 * (qwen-ft plan; the "auto" deck keys; docs/zero.md "How auto plans"). */
#ifndef QF_PLAN_H
#define QF_PLAN_H
#include <stddef.h>
#include <stdint.h>
#include "deck/deck.h"
#include "model_config.h"
#include "ops.h"
#include "estimate.h"

/* Rates of this machine for this model shape (calibrate.c measures them; a JSON cache keeps them). */
typedef struct qf_plan_rates {
    /* one decoder layer's forward + backward per micro-batch, per recomputation mode (qf_ackpt 0..3):
     * t = layer_fixed[mode] + layer_per_row[mode] * B (seconds; B rows of the deck's seq_len) */
    double layer_fixed[4], layer_per_row[4];
    double fwd_share;          /* the forward's share of a layer's time without recomputation (timed) */
    double matmul_flops;       /* achieved matmul FLOP/s of the layer (the head and embedding run at it) */
    double dev_adam;           /* elements/s of the device AdamW (the op table's) */
    double host_adam;          /* elements/s of the host AdamW (qf_cpu_adamw_act on the offload's threads) */
    double host_add;           /* elements/s of the host gradient accumulation (qf_cpu_act_add: the shard on the host) */
    double host_sumsq;         /* elements/s of the host sum of squares over it (qf_cpu_act_sumsq: the norm) */
    double h2d, d2h;           /* pinned copy bytes/s each way (0 = no copies: CPU ranks) */
    double net;                /* collective bus bytes/s between ranks of a node (not measured: a table value) */
    double net_inter;          /* between nodes */
    int seq_len;               /* what the layer times are for */
    int cpu;                   /* CPU ranks: device memory is host memory, no PCIe */
    double calib_s;            /* how long the calibration took (0: from the cache) */
    char source[256];          /* "measured ..." | "cache FILE" */
} qf_plan_rates;

/* one candidate layout */
typedef struct qf_plan {
    int stage, offload;        /* offload: 0 none, 1 optimizer, 2 optimizer+param */
    double ratio;              /* offload_optimizer.ratio */
    int micro, accum;
    int ackpt, rec_layers;     /* qf_ackpt; rec_layers < 0 = all layers */
    int grads_host;            /* offload_optimizer.gradients resolved to host */
    qf_mem_estimate mem;
    int64_t device_need;       /* device bytes with the margin */
    int64_t host_node_need;    /* host bytes of the node (CPU ranks: the device's too), with the margin */
    int64_t footprint;         /* what ties are broken by: device bytes (CPU ranks: the node's host bytes) */
    int tie;                   /* the ranking's tie (qf_plan_search): 0 for the fastest plan and those within 2% of it */
    int fits, fits_device, fits_host;
    /* predicted seconds per optimizer step, and its parts */
    double t_step, t_compute, t_comm, t_pcie, t_adam;
    double tok_s;              /* tokens/s of all ranks */
} qf_plan;

/* What the planner may vary: a dimension the deck fixed stays as the deck has it. */
typedef struct qf_plan_space {
    int stage, ratio, micro;   /* 1 = vary */
    unsigned offload_mask;     /* bits 1 << k of the offload choices to try (0 none, 1 optimizer, 2 +param); 0 = the deck's */
    unsigned ackpt_mask;       /* bits 1 << mode (qf_ackpt) to try; 0 = the deck's */
    int rec_auto;              /* 1: the fewest recomputed layers that fit (recompute_layers "auto") */
    int64_t train_batch;       /* > 0: micro x accum x ranks = it (DeepSpeed's batch rule); 0: micro free */
    int max_micro;             /* micro batch cap when free (default 64) */
} qf_plan_space;

typedef struct qf_plan_machine {
    int world, ranks_per_node, nodes;
    int64_t act_bytes;         /* 2 (bf16/fp16 GPU) or 4 (CPU ranks, fp32) */
    int64_t gpu_budget;        /* bytes per GPU (the device or gpu_memory_limit_gb); 0 = CPU ranks */
    int64_t host_budget;       /* bytes of the node's host memory the ranks may use (MemAvailable) */
} qf_plan_machine;

/* margins: the backend's scratch and workspaces (a few hundred MiB) over what the plan counts, and the host's */
#define QF_PLAN_DEV_MARGIN(b) ((int64_t)1 << 29 > (b) / 33 ? (int64_t)1 << 29 : (b) / 33)
#define QF_PLAN_HOST_MARGIN(b) ((int64_t)2 << 30 > (b) / 10 ? (int64_t)2 << 30 : (b) / 10)

/* Fills p (the layout already set: stage .. rec_layers) with its memory and predicted speed. */
void qf_plan_eval(const qf_model_config *c, const qf_deck *d, const qf_plan_machine *mc, const qf_plan_rates *r,
                  qf_plan *p);
/* Ranks v[n] in place (qf_plan_search's order): the fastest plan that fits and every plan within 2% of it (the rates
 * measure no finer) form tie 0, ordered simplest first (no offload, the lower stage, the larger micro-batch, then
 * the smaller footprint); then tie 1 from the fastest of the rest, and so on; then the plans that do not fit
 * (tie -1), the smaller footprint first. A tie is counted from its fastest plan, not pair by pair ("within 2% of
 * each other" chains, and a sort by it has no single order). */
void qf_plan_rank(qf_plan *v, int n);
/* Every candidate in the space, ranked: fitting plans by tokens/s first, then the others by device need.
 * Returns the count (*out malloc'd). */
int qf_plan_search(const qf_model_config *c, const qf_deck *d, const qf_plan_space *sp, const qf_plan_machine *mc,
                   const qf_plan_rates *r, qf_plan **out);
/* What the deck leaves to the planner ("auto" values; the micro batch where train_batch_size is given, the micro
 * batch is "auto" and gradient_accumulation_steps is not given). Returns 1 if anything. all = 1: every dimension
 * (qwen-ft plan), the deck's fixed values aside. */
int qf_plan_space_from_deck(const qf_deck *d, int all, qf_plan_space *sp);
/* The deck with its "auto" values at their defaults (none, stage 0, ratio 1, all layers): for the memory of a deck
 * nobody planned (estimate's rows). */
void qf_plan_autos_default(qf_deck *d);
/* The deck with plan p applied (stage, offload, ratio, micro, accumulation, recomputation, gradient home). */
void qf_plan_apply(const qf_plan *p, qf_deck *d);
/* "stage 3 + optimizer+param offload, micro 2 x accum 4, selective in 12 of 28 layers" */
void qf_plan_describe(const qf_plan *p, int num_layers, char *buf, size_t n);
/* Why plan b ranks below plan a ("0.83x the tokens/s: host AdamW 1.2 s exposed") or does not fit. */
void qf_plan_why_lost(const qf_plan *a, const qf_plan *b, const qf_plan_machine *mc, char *buf, size_t n);

/* The speed model of one layout (speed.c); fills p->t_* and p->tok_s. */
void qf_plan_speed(const qf_model_config *c, const qf_deck *d, const qf_plan_machine *mc, const qf_plan_rates *r,
                   qf_plan *p);
/* Table rates (no measurement) for a described machine: qwen-ft plan without a device of that kind. */
void qf_plan_rates_default(const qf_model_config *c, int seq_len, int cpu, qf_plan_rates *r);

/* Seconds the calibration of model c at seq_len would take at the table rates (CPU ranks: a large model's layer is
 * slow to time; callers take table rates past a limit). */
double qf_plan_calibration_cost(const qf_model_config *c, int seq_len, int cpu);

/* Measures the rates on this rank's backend for model c at seq_len (calibrate.c): one decoder layer's forward and
 * backward at micro-batch 1 and 2 per recomputation mode, the device and host AdamW, the pinned copies. With
 * cache_dir (may be NULL or ""), the rates are read from / written to cache_dir/qwenft-plan-rates.json, keyed by
 * the device, the host, the model's dimensions, the dtype, seq_len and host_threads (the host AdamW's team the
 * rates are timed with: qf_zero_host_threads for one rank of the node; 0: OpenMP's default); a different key
 * measures again and rewrites the file. 0 or an exit code. */
int qf_plan_calibrate(const qf_ops *ops, const char *device_info, const qf_model_config *c, int seq_len,
                      int host_threads, const char *cache_dir, qf_plan_rates *r, qf_err *e);
/* Reads the rates of a calibration cache file (another machine's: `qwen-ft plan --rates`), whatever its device, host
 * and thread count, into r (its other fields as qf_plan_rates_default left them); the file must be for model c's
 * dimensions. 0, or QF_EXIT_INPUT with a message naming the file and the field. */
int qf_plan_rates_load(const char *path, const qf_model_config *c, qf_plan_rates *r, qf_err *e);
#endif
