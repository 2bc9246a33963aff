/* deck.h — the resolved input deck (libconfig), DeepSpeed's names and defaults.
 * Every key is declared once in deck_keys.c with type, default, help and DeepSpeed equivalent; docs/deck.md
 * documents them all. */
#ifndef QF_DECK_H
#define QF_DECK_H
#include <stdint.h>
#include "util.h"

#define QF_PATH_MAX 1024
#define QF_DECK_KEYS_MAX 192 /* entries of the key table (deck_keys.c asserts it) */
#define QF_DECK_PATH_KEYS 6  /* model.from, data.train, data.valid, checkpoint.dir, log.dir, tensorboard.output_path */

/* Where a key's value came from (qf_deck.origin, per key of the table), and what happened to it. */
enum {
    QF_ORIGIN_DEFAULT = 0,
    QF_ORIGIN_DECK = 1,             /* the deck file (or an @include) */
    QF_ORIGIN_SET = 2,              /* --set */
    QF_ORIGIN_DS = 3,               /* the DeepSpeed JSON named by `deepspeed` */
    QF_ORIGIN_HF = 4,               /* not given anywhere: the HF Trainer's default (deck_hf_defaults.c) */
    QF_ORIGIN_MASK = 0x0f,
    QF_ORIGIN_AUTO = 0x10,          /* given as "auto" */
    QF_ORIGIN_DS_OVERRIDDEN = 0x20  /* the JSON gave it too; the deck or --set won */
};

typedef enum { QF_SCHED_NONE = 0, QF_SCHED_WARMUP_LR, QF_SCHED_WARMUP_DECAY_LR, QF_SCHED_WARMUP_COSINE_LR,
               QF_SCHED_LINEAR /* the HF Trainer's lr_scheduler_type "linear" */ } qf_sched_type;
typedef enum { QF_WARMUP_LOG = 0, QF_WARMUP_LINEAR } qf_warmup_type;
/* QF_OFFLOAD_AUTO / QF_ACKPT_AUTO / zero_stage, offload_optimizer_ratio -1 / recompute_layers -2: "auto", the
 * layout planner decides at the start of a run (src/plan/plan.h; qf_deck_plan_autos says which) */
typedef enum { QF_OFFLOAD_NONE = 0, QF_OFFLOAD_CPU, QF_OFFLOAD_AUTO } qf_offload_device;
/* where the reduced gradient shard lives with offload_optimizer (auto: the run decides by its memory plan) */
typedef enum { QF_GRADS_AUTO = 0, QF_GRADS_DEVICE, QF_GRADS_HOST } qf_grads_home;
typedef enum { QF_NONFINITE_SKIP = 0, QF_NONFINITE_STOP } qf_nonfinite_action;
typedef enum { QF_ACKPT_NONE = 0, QF_ACKPT_FULL, QF_ACKPT_SELECTIVE, QF_ACKPT_POINTWISE, QF_ACKPT_AUTO } qf_ackpt;
#define QF_RECOMPUTE_AUTO (-2)
typedef enum { QF_FP8R_TENSORWISE = 0, QF_FP8R_ROWWISE } qf_fp8_recipe; /* fp8.recipe */

typedef struct qf_deck {
    char path[QF_PATH_MAX];         /* the deck file */

    /* model */
    char model_from[QF_PATH_MAX];   /* model.from: HDF5 model, checkpoint dir, or HF dir ("" = none) */
    char model_preset[64];          /* model.preset ("" = none) */
    /* explicit dimensions (model.*); 0 / -1 = not given (then from preset / file) */
    char model_arch[16];            /* model.arch "qwen2" | "qwen3" | "" */
    int64_t model_vocab_size;
    int model_hidden_size, model_intermediate_size, model_num_hidden_layers, model_num_attention_heads;
    int model_num_key_value_heads, model_head_dim;
    int model_tie_word_embeddings;  /* -1 not given */
    int model_attention_bias;       /* -1 not given */
    int model_qk_norm;              /* -1 not given */
    double model_rope_theta, model_rms_norm_eps; /* 0 = not given */
    int model_max_position_embeddings;
    double model_initializer_range; /* 0 = not given (0.02) */
    uint64_t model_init_seed;       /* model.init_seed, default 1234 */

    qf_ackpt activation_checkpointing; /* bool, or "full" | "selective" | "pointwise" | "none" */
    int recompute_layers;           /* layers (the first ones) activation_checkpointing applies to; -1 = all */
    /* DeepSpeed's activation_checkpointing group (accepted, no effect here: deck_keys.c says why) */
    int ac_partition_activations, ac_cpu_checkpointing, ac_contiguous_memory_optimization;
    int ac_synchronize_checkpoint_boundary, ac_profile;
    int64_t ac_number_checkpoints;

    /* data */
    char data_train[QF_PATH_MAX];
    char data_valid[QF_PATH_MAX];
    int seq_len;                    /* data.seq_len (default 2048) */
    int shuffle;                    /* data.shuffle (true) */
    uint64_t data_seed;             /* data.seed (42) */

    /* batch (resolved by the batch rule against the data-parallel world size) */
    int64_t train_batch_size;
    int train_micro_batch_size_per_gpu;
    int gradient_accumulation_steps;

    int64_t max_steps;              /* 0 = use epochs */
    double epochs;                  /* default 1 when max_steps is 0 */
    double gradient_clipping;       /* 0 = off (DeepSpeed default) */
    uint64_t seed;                  /* seed (global, default 42): the default of model.init_seed and data.seed */
    int prescale_gradients;         /* accepted, no effect here */
    double gradient_predivide_factor; /* accepted, no effect here */
    int zero_allow_untested_optimizer; /* accepted, no effect here */
    char communication_data_type[16];  /* accepted, no effect here */

    /* optimizer (AdamW / Adam with adam_w_mode) */
    char optimizer_type[16];
    double lr, beta1, beta2, eps, weight_decay;
    int adam_w_mode;                /* 1 = decoupled (AdamW) */

    /* scheduler */
    qf_sched_type sched;
    double warmup_min_lr, warmup_max_lr;
    int64_t warmup_num_steps, total_num_steps;
    qf_warmup_type warmup_type;
    double warmup_min_ratio, cos_min_ratio; /* WarmupCosineLR */

    /* precision */
    int bf16, fp16;
    double fp16_loss_scale;         /* 0 = dynamic */
    int fp16_initial_scale_power;   /* 16 */
    int fp16_loss_scale_window;     /* 1000 */
    int fp16_hysteresis;            /* 2 */
    int fp16_consecutive_hysteresis;/* false */
    double fp16_min_loss_scale;     /* 1 */
    int fp16_auto_cast;             /* accepted, no effect here */
    int fp8;                        /* fp8.enabled: the decoder's linear layers' GEMMs in fp8 (GPU, bf16 runs) */
    qf_fp8_recipe fp8_recipe;       /* fp8.recipe: "tensorwise" | "rowwise" */
    int fp8_amax_history_len;       /* fp8.amax_history_len: 0 current scaling of the weights, n delayed (last n amaxes) */
    int fp8_save_inputs;            /* fp8.save_inputs: the forward keeps each fp8 layer input's q(x)^T for the wgrad */

    /* ZeRO */
    int zero_stage;
    qf_offload_device offload_optimizer, offload_param;
    int offload_optimizer_pin_memory, offload_param_pin_memory;
    double offload_optimizer_ratio; /* share of the optimizer state and step on the host (ZeRO-Offload++) */
    qf_grads_home offload_optimizer_gradients; /* resolved from auto by the run (train/run.c) before the engine starts */
    int overlap_comm, contiguous_gradients, reduce_scatter;
    int64_t reduce_bucket_size, allgather_bucket_size;
    int64_t stage3_prefetch_bucket_size, stage3_param_persistence_threshold, stage3_max_live_parameters;
    int64_t stage3_max_reuse_distance;
    /* DeepSpeed ZeRO keys accepted with no effect here (deck_keys.c says why for each) */
    int allgather_partitions, round_robin_gradients, stage3_gather_16bit_weights_on_model_save;
    int64_t sub_group_size;
    int64_t offload_optimizer_buffer_count, offload_param_buffer_count, offload_param_buffer_size;
    int64_t offload_param_max_in_cpu;
    int offload_optimizer_fast_init, offload_optimizer_pipeline_read, offload_optimizer_pipeline_write;
    char offload_optimizer_nvme_path[QF_PATH_MAX], offload_param_nvme_path[QF_PATH_MAX];
    int stage3_gather_fp16_weights_on_model_save; /* its older name */
    int memory_efficient_linear, ignore_unused_parameters, load_from_fp32_weights, zero_force_ds_cpu_optimizer;
    int memory_breakdown, sparse_gradients;           /* accepted, no effect here */
    int checkpoint_tag_validation, checkpoint_load_universal, checkpoint_use_node_local_storage; /* likewise */

    /* checkpoint */
    char checkpoint_dir[QF_PATH_MAX]; /* "ckpt" */
    int64_t checkpoint_every_steps;   /* 0 = only at the end */
    int checkpoint_keep;              /* 3 */
    int checkpoint_at_end;            /* true: every run ends with a checkpoint */
    int checkpoint_export_hf;         /* false: each checkpoint also writes step-N-hf (src/store/export_sharded.c) */
    int checkpoint_keep_best;         /* false: the best-validation checkpoint is kept outside the rotation */

    /* eval */
    int64_t eval_every_steps;         /* 0 = only at the end */
    int early_stopping_patience;      /* 0 = off */
    double early_stopping_threshold;  /* minimum improvement */
    int64_t eval_max_batches;         /* 0 = whole valid set */

    /* log */
    char log_dir[QF_PATH_MAX];        /* "logs" */
    int steps_per_print;              /* 10 */
    int wall_clock_breakdown;
    int tensorboard;                  /* log.tensorboard (false) = tensorboard.enabled */
    char tensorboard_output_path[QF_PATH_MAX]; /* tensorboard.output_path ("" = log.dir) */
    char tensorboard_job_name[128];   /* tensorboard.job_name ("" = none) */
    int csv_monitor_enabled;          /* accepted, no effect here */
    char csv_monitor_output_path[QF_PATH_MAX], csv_monitor_job_name[128];
    int flops_profiler_enabled, flops_profiler_module_depth, flops_profiler_top_modules, flops_profiler_detailed;
    int64_t flops_profiler_profile_step;
    char flops_profiler_output_file[QF_PATH_MAX];

    qf_nonfinite_action on_nonfinite; /* "skip" | "stop" (default "stop") */
    double max_hours;                 /* 0 = no limit */
    double gpu_memory_limit_gb;       /* 0 = no limit */
    double peak_tflops;               /* TFLOP/s per rank for MFU; 0 = the GPU table by device name (src/util/peak.c);
                                       * CPU ranks, and GPUs the table lacks, then have none: MFU n/a (null) */
    int ranks_per_node;               /* topology.ranks_per_node: 0 = real nodes */

    char deepspeed[QF_PATH_MAX];      /* `deepspeed`: the DeepSpeed JSON config read under the deck ("" = none) */
    char deepspeed_path[2 * QF_PATH_MAX + 8]; /* ... as opened (relative to the deck's directory) */
    unsigned char origin[QF_DECK_KEYS_MAX]; /* per key of the table: QF_ORIGIN_* */
    char path_where[QF_DECK_PATH_KEYS + 1][QF_PATH_MAX + 64]; /* "FILE:LINE" of each path key, and of model.preset
                                                               * (deck_paths.c) */
} qf_deck;

/* Loads and validates path (with @include), applies the --set overrides (each "key.path=value"), resolves "auto"
 * and the batch rule for dp_world data-parallel ranks. Returns 0, or QF_EXIT_INPUT with e->msg naming file, line
 * and key (and a "did you mean" for unknown keys). */
int qf_deck_load(const char *path, int nset, char *const *sets, int dp_world, qf_deck *d, qf_err *e);

/* Same, with defaults only (no file): for commands that only need --set values. */
void qf_deck_defaults(qf_deck *d);

/* Fills the "auto" (-1) bucket sizes the way the HF Trainer does once the model's hidden size is known:
 * reduce_bucket_size = h^2, stage3_prefetch_bucket_size = 0.9 h^2, stage3_param_persistence_threshold = 10 h. */
void qf_deck_resolve_auto(qf_deck *d, int64_t hidden);

/* Paths (deck_paths.c): a relative path of the deck, its JSON or its @include is relative to the deck's directory
 * (resolved while the deck loads), one given with --set to the working directory. qf_deck_path_where: where the
 * path key came from ("run.cfg:7", "--set 'data.train=x'", "run.cfg (default of checkpoint.dir)"), for messages. */
const char *const *qf_deck_path_keys(void);
const char *qf_deck_path_where(const qf_deck *d, const char *key);

/* Writes the resolved deck as libconfig text (the run header shows it; checkpoints store it). */
void qf_deck_print(const qf_deck *d, FILE *f);
/* The value of key ki (index in the key table) as deck text. */
void qf_deck_print_value(const qf_deck *d, int ki, FILE *f);
/* s as a libconfig string literal: in double quotes, with '"' and '\\' escaped. */
void qf_deck_print_string(const char *s, FILE *f);

/* The run header's account of the deck: which keys came from the deck, --set and the DeepSpeed JSON, which the
 * deck overrode, and every given key that has no effect here, with the reason (deck_sources.c). */
void qf_deck_print_sources(const qf_deck *d, FILE *f);
/* Why the key (table index ki) has no effect in this deck, or NULL when it acts: a key accepted for DeepSpeed
 * decks that qwen-ft's design makes moot, or a key that another key switches off (fp16.* without fp16). */
const char *qf_deck_key_moot(const qf_deck *d, int ki);
/* The header's line(s) of the optimizer, scheduler and batch keys that nothing gave: "HF Trainer defaults ..." (decks
 * with `deepspeed`, deck_hf_defaults.c) and "defaults ..." (the key table's); nothing when every one is given. */
void qf_deck_print_defaults(const qf_deck *d, FILE *f);

/* For the docs and --help: prints every key with type, default, meaning, DeepSpeed equivalent as markdown. */
void qf_deck_print_keys_markdown(FILE *f);

/* The architecture a deck describes without a model file: model.preset overlaid with the explicit model.*
 * dimensions, or the explicit dimensions alone (defaults in docs/deck.md, "Model"). Returns 0 and fills *out, or -1
 * with msg (size n) when the deck names no preset and no complete set of dimensions, or the result is
 * inconsistent. qf_deck_load already ran it for such decks. */
struct qf_model_config;
int qf_deck_model_config(const qf_deck *d, struct qf_model_config *out, char *msg, int n);
/* model.preset beside model.from names the architecture the file must have (so that `estimate` plans before the
 * weights exist): 0 when there is no preset or the file's config (f) has the preset's architecture and dimensions,
 * -1 with msg naming the first difference. */
int qf_deck_preset_matches(const qf_deck *d, const struct qf_model_config *f, char *msg, int n);

#endif
