/* deck_keys.c — the deck key table (see deck_keys.h) and typed access to the fields it describes. */
#include "deck_keys.h"
#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OFF(f) .off = offsetof(qf_deck, f), .field = #f
#define STR(f) .off = offsetof(qf_deck, f), .size = sizeof(((qf_deck *)0)->f), .field = #f
#define NOEFF(w) .fate = QF_FATE_NO_EFFECT, .why = (w)
#define ALIAS(a) .fate = QF_FATE_ALIAS, .alias = (a)
#define NVME_ONLY NOEFF("NVMe offload only; device \"nvme\" is not supported and the host offload needs no buffer pool")
#define RANGE(lo, hi) .min = (lo), .max = (hi)
#define NOMAX 9.2e18 /* "no upper limit" for integer keys (below INT64_MAX) */
#define POS_INT RANGE(1, INT_MAX)
#define NONNEG_INT RANGE(0, INT_MAX)
#define POS_I64 RANGE(1, NOMAX)
#define NONNEG_I64 RANGE(0, NOMAX)
#define NONNEG_F RANGE(0, DBL_MAX)
#define POS_F RANGE(0, DBL_MAX), .flags = QF_KF_GT_MIN
#define SEED RANGE(0, NOMAX)
#define SB(t) QF_SCHED_BIT(t)
#define S_LR SB(QF_SCHED_WARMUP_LR)
#define S_DECAY SB(QF_SCHED_WARMUP_DECAY_LR)
#define S_COS SB(QF_SCHED_WARMUP_COSINE_LR)
#define S_LIN SB(QF_SCHED_LINEAR)

static const char *const k_arch[] = {"qwen2", "qwen3", NULL};
static const char *const k_ackpt[] = {"none", "full", "selective", "pointwise", "auto", NULL};
static const char *const k_opt[] = {"AdamW", "Adam", NULL};
static const char *const k_sched[] = {"none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "linear", NULL};
static const char *const k_warmup[] = {"log", "linear", NULL};
static const char *const k_offload[] = {"none", "cpu", "auto", NULL};
static const char *const k_grads[] = {"auto", "device", "host", NULL};
static const char *const k_nonfinite[] = {"skip", "stop", NULL};
static const char *const k_dtype[] = {"fp32", "fp16", "bf16", NULL};
static const char *const k_fp8_recipe[] = {"tensorwise", "rowwise", NULL};
static const char *const k_tagval[] = {"Ignore", "Warn", "Fail", NULL};

#define METRICS_WHY "per-step metrics go to log.dir/metrics.jsonl, one JSON object per step, which `qwen-ft plot` draws"
#define PROFILER_WHY "MFU and tokens/s are on every progress line and in metrics.jsonl; there is no per-module profiler"
#define HF_ONLY(x) "qwen-ft only (HF config.json `" x "`)"

static const qf_deck_key k_keys[] = {
    /* ---- model ---- */
    {.path = "model.from", .type = QF_KT_STRING, STR(model_from), .def = "", .flags = QF_KF_UNSET,
     .ds = "qwen-ft only (HF `model_name_or_path`)", .doc_default = "(none)",
     .help = "model to start from: an HDF5 model, a checkpoint directory (its latest) or an HF directory"},
    {.path = "model.preset", .type = QF_KT_STRING, STR(model_preset), .def = "", .flags = QF_KF_UNSET,
     .ds = "qwen-ft only", .doc_default = "(none)",
     .help = "published architecture, randomly initialized (`qwen2.5-7b`, `qwen3-0.6b`, ...; see below)"},
    {.path = "model.arch", .type = QF_KT_STRING, STR(model_arch), .def = "", .flags = QF_KF_UNSET,
     .choices = k_arch, .ds = HF_ONLY("model_type"), .doc_default = "(from preset/model; qwen2)",
     .help = "architecture for explicit dimensions or to override a preset"},
    {.path = "model.vocab_size", .type = QF_KT_INT64, OFF(model_vocab_size), .def = "0", RANGE(1, INT_MAX),
     .flags = QF_KF_UNSET, .ds = HF_ONLY("vocab_size"), .doc_default = "(from preset/model)",
     .help = "vocabulary size (explicit dimensions; overrides a preset)"},
    {.path = "model.hidden_size", .type = QF_KT_INT, OFF(model_hidden_size), .def = "0", POS_INT,
     .flags = QF_KF_UNSET, .ds = HF_ONLY("hidden_size"), .doc_default = "(from preset/model)",
     .help = "model width C"},
    {.path = "model.intermediate_size", .type = QF_KT_INT, OFF(model_intermediate_size), .def = "0", POS_INT,
     .flags = QF_KF_UNSET, .ds = HF_ONLY("intermediate_size"), .doc_default = "(from preset/model)",
     .help = "SwiGLU FFN width (the real width; Qwen v1 configs store twice it)"},
    {.path = "model.num_hidden_layers", .type = QF_KT_INT, OFF(model_num_hidden_layers), .def = "0", POS_INT,
     .flags = QF_KF_UNSET, .ds = HF_ONLY("num_hidden_layers"), .doc_default = "(from preset/model)",
     .help = "number of decoder layers"},
    {.path = "model.num_attention_heads", .type = QF_KT_INT, OFF(model_num_attention_heads), .def = "0", POS_INT,
     .flags = QF_KF_UNSET, .ds = HF_ONLY("num_attention_heads"), .doc_default = "(from preset/model)",
     .help = "query heads"},
    {.path = "model.num_key_value_heads", .type = QF_KT_INT, OFF(model_num_key_value_heads), .def = "0", POS_INT,
     .flags = QF_KF_UNSET, .ds = HF_ONLY("num_key_value_heads"), .doc_default = "(= num_attention_heads)",
     .help = "key/value heads (GQA); must divide num_attention_heads"},
    {.path = "model.head_dim", .type = QF_KT_INT, OFF(model_head_dim), .def = "0", POS_INT, .flags = QF_KF_UNSET,
     .ds = HF_ONLY("head_dim"), .doc_default = "(preset; qwen2: hidden_size / heads, qwen3: 128)",
     .help = "per-head dimension (Qwen3: 128)"},
    {.path = "model.tie_word_embeddings", .type = QF_KT_BOOL, OFF(model_tie_word_embeddings), .def = "-1",
     .flags = QF_KF_UNSET, .ds = HF_ONLY("tie_word_embeddings"), .doc_default = "(from preset/model; false)",
     .help = "lm_head shares the input embedding"},
    {.path = "model.attention_bias", .type = QF_KT_BOOL, OFF(model_attention_bias), .def = "-1",
     .flags = QF_KF_UNSET, .ds = HF_ONLY("attention_bias"), .doc_default = "(qwen2: true, qwen3: false)",
     .help = "q/k/v projection biases"},
    {.path = "model.qk_norm", .type = QF_KT_BOOL, OFF(model_qk_norm), .def = "-1", .flags = QF_KF_UNSET,
     .ds = "qwen-ft only (implied by HF `model_type` qwen3)", .doc_default = "(qwen3: true, qwen2: false)",
     .help = "per-head RMSNorm of q and k before RoPE"},
    {.path = "model.rope_theta", .type = QF_KT_FLOAT, OFF(model_rope_theta), .def = "0", RANGE(0, DBL_MAX),
     .flags = QF_KF_GT_MIN | QF_KF_UNSET,
     .ds = HF_ONLY("rope_theta"), .doc_default = "(from preset/model; 10000)", .help = "RoPE base"},
    {.path = "model.rms_norm_eps", .type = QF_KT_FLOAT, OFF(model_rms_norm_eps), .def = "0", RANGE(0, 1),
     .flags = QF_KF_GT_MIN | QF_KF_UNSET, .ds = HF_ONLY("rms_norm_eps"), .doc_default = "(from preset/model; 1e-6)",
     .help = "RMSNorm epsilon"},
    {.path = "model.max_position_embeddings", .type = QF_KT_INT, OFF(model_max_position_embeddings), .def = "0",
     POS_INT, .flags = QF_KF_UNSET, .ds = HF_ONLY("max_position_embeddings"),
     .doc_default = "(from preset/model; 32768)", .help = "longest sequence the model is meant for"},
    {.path = "model.initializer_range", .type = QF_KT_FLOAT, OFF(model_initializer_range), .def = "0",
     RANGE(0, 10), .flags = QF_KF_GT_MIN | QF_KF_UNSET, .ds = HF_ONLY("initializer_range"),
     .doc_default = "(0.02)", .help = "std of the normal init of a preset / explicit model"},
    {.path = "model.init_seed", .type = QF_KT_UINT64, OFF(model_init_seed), .def = "1234", SEED,
     .ds = "qwen-ft only", .help = "seed of the random init (preset / explicit dimensions)"},

    {.path = "activation_checkpointing", .type = QF_KT_ENUM, OFF(activation_checkpointing), .def = "none",
     .flags = QF_KF_BOOL_ENUM, .choices = k_ackpt, .autov = "auto", .doc_auto = "the layout planner's mode",
     .ds = "HF `gradient_checkpointing` (DeepSpeed's `activation_checkpointing` group only tunes partitioning)",
     .help = "recompute activations in the backward pass: true = \"full\" (the whole layer from its input), "
             "\"selective\" (only the MLP intermediates, the largest part: two of the layer's seven matmuls again), "
             "\"pointwise\" (keep every GEMM output, recompute only the two RMSNorms and SwiGLU: no matmul), "
             "false = \"none\"; recompute_layers limits it to the first layers; \"auto\": the layout planner picks the "
             "mode (and recompute_layers) at the start of the run (docs/zero.md, `qwen-ft plan`)"},
    {.path = "recompute_layers", .type = QF_KT_INT, OFF(recompute_layers), .def = "-1", RANGE(-1, INT_MAX),
     .flags = QF_KF_AUTO_SENTINEL, .autov = "-2", .doc_auto = "the layout planner's count",
     .ds = "qwen-ft only (Megatron's --recompute-num-layers)", .doc_default = "(all layers)",
     .help = "how many decoder layers, the first ones, activation_checkpointing recomputes; the others keep all "
             "their activations (memory between two modes; `qwen-ft estimate` shows it); needs "
             "activation_checkpointing, at most the model's layers; \"auto\": the planner's (with "
             "activation_checkpointing \"auto\", the default)"},
    /* DeepSpeed's activation_checkpointing group configures deepspeed.checkpointing, which HF models never call */
    {.path = "activation_checkpointing.partition_activations", .type = QF_KT_BOOL, OFF(ac_partition_activations),
     .def = "false", .ds = "`activation_checkpointing.partition_activations`",
     NOEFF("no model parallelism: there is nothing to partition activations across"),
     .help = "partition checkpointed activations across model-parallel ranks"},
    {.path = "activation_checkpointing.cpu_checkpointing", .type = QF_KT_BOOL, OFF(ac_cpu_checkpointing),
     .def = "false", .ds = "`activation_checkpointing.cpu_checkpointing`",
     NOEFF("DeepSpeed applies it only to models that call deepspeed.checkpointing, which HF models do not; "
           "qwen-ft keeps checkpointed layer inputs on the device"),
     .help = "move checkpointed activations to the host"},
    {.path = "activation_checkpointing.contiguous_memory_optimization", .type = QF_KT_BOOL,
     OFF(ac_contiguous_memory_optimization), .def = "false",
     .ds = "`activation_checkpointing.contiguous_memory_optimization`",
     NOEFF("checkpointed activations are already one contiguous allocation"),
     .help = "copy checkpointed activations into one contiguous buffer"},
    {.path = "activation_checkpointing.number_checkpoints", .type = QF_KT_INT64, OFF(ac_number_checkpoints),
     .def = "0", NONNEG_I64, .ds = "`activation_checkpointing.number_checkpoints`",
     NOEFF("qwen-ft's recomputation is per layer (activation_checkpointing's mode in the first recompute_layers "
           "layers)"),
     .help = "number of checkpoints (for contiguous_memory_optimization)"},
    {.path = "activation_checkpointing.synchronize_checkpoint_boundary", .type = QF_KT_BOOL,
     OFF(ac_synchronize_checkpoint_boundary), .def = "false",
     .ds = "`activation_checkpointing.synchronize_checkpoint_boundary`",
     NOEFF("a debugging aid of deepspeed.checkpointing; qwen-ft's recomputation needs no device synchronization"),
     .help = "synchronize the device at each checkpoint boundary"},
    {.path = "activation_checkpointing.profile", .type = QF_KT_BOOL, OFF(ac_profile), .def = "false",
     .ds = "`activation_checkpointing.profile`",
     NOEFF("a timing aid of deepspeed.checkpointing; log.wall_clock_breakdown times the step"),
     .help = "time the checkpointing forward and backward"},

    /* ---- data ---- */
    {.path = "data.train", .type = QF_KT_STRING, STR(data_train), .def = "", .flags = QF_KF_UNSET,
     .ds = "qwen-ft only", .doc_default = "(none)", .help = "packed training set (HDF5, `qwen-ft prepare`)"},
    {.path = "data.valid", .type = QF_KT_STRING, STR(data_valid), .def = "", .flags = QF_KF_UNSET,
     .ds = "qwen-ft only", .doc_default = "(none)", .help = "packed validation set (HDF5); none = no eval"},
    {.path = "data.seq_len", .type = QF_KT_INT, OFF(seq_len), .def = "2048", RANGE(2, INT_MAX),
     .ds = "qwen-ft only (HF `max_seq_length`)", .help = "tokens per row"},
    {.path = "data.shuffle", .type = QF_KT_BOOL, OFF(shuffle), .def = "true", .ds = "qwen-ft only",
     .help = "shuffle documents each epoch (seeded, deterministic)"},
    {.path = "data.seed", .type = QF_KT_UINT64, OFF(data_seed), .def = "42", SEED,
     .ds = "qwen-ft only (HF `data_seed`)", .help = "seed of the document shuffle"},

    /* ---- batch and length ---- */
    {.path = "train_batch_size", .type = QF_KT_INT64, OFF(train_batch_size), .def = "0", POS_I64,
     .flags = QF_KF_UNSET | QF_KF_AUTO_UNSET, .autov = "0", .ds = "`train_batch_size`",
     .doc_default = "(batch rule)", .doc_auto = "derived by the batch rule",
     .help = "rows per optimizer step, all ranks: micro x accumulation x data-parallel ranks"},
    {.path = "train_micro_batch_size_per_gpu", .type = QF_KT_INT, OFF(train_micro_batch_size_per_gpu),
     .def = "0", POS_INT, .flags = QF_KF_UNSET | QF_KF_AUTO_UNSET, .autov = "0",
     .ds = "`train_micro_batch_size_per_gpu`", .doc_default = "(batch rule; 1, with `deepspeed` 8)",
     .doc_auto = "8 (HF per_device_train_batch_size) unless train_batch_size gives it",
     .help = "rows per forward/backward on one rank"},
    {.path = "gradient_accumulation_steps", .type = QF_KT_INT, OFF(gradient_accumulation_steps), .def = "0",
     POS_INT, .flags = QF_KF_UNSET | QF_KF_AUTO_UNSET, .autov = "0", .ds = "`gradient_accumulation_steps`",
     .doc_default = "(batch rule; 1, with `deepspeed` 8)",
     .doc_auto = "8 (HF per_device_train_batch_size) unless train_batch_size gives it",
     .help = "micro-batches per optimizer step"},
    {.path = "max_steps", .type = QF_KT_INT64, OFF(max_steps), .def = "0", NONNEG_I64,
     .ds = "qwen-ft only (HF `max_steps`)", .help = "optimizer steps to run; 0 = run `epochs` epochs"},
    {.path = "epochs", .type = QF_KT_FLOAT, OFF(epochs), .def = "1", POS_F,
     .ds = "qwen-ft only (HF `num_train_epochs`)", .help = "passes over data.train when max_steps is 0"},
    {.path = "gradient_clipping", .type = QF_KT_FLOAT, OFF(gradient_clipping), .def = "0", NONNEG_F,
     .autov = "1.0", .ds = "`gradient_clipping`", .help = "global L2 gradient-norm limit; 0 = off"},
    {.path = "seed", .type = QF_KT_UINT64, OFF(seed), .def = "42", SEED, .ds = "qwen-ft only (HF `seed`)",
     .fate = QF_FATE_DECK, .why = "the value of model.init_seed and data.seed when they are not given",
     .help = "global seed: the random init (model.init_seed) and the data shuffle (data.seed) when not set"},
    {.path = "prescale_gradients", .type = QF_KT_BOOL, OFF(prescale_gradients), .def = "false",
     .ds = "`prescale_gradients`",
     NOEFF("the loss is divided by the global batch's token count before the backward, so gradients are always "
           "reduced already scaled"),
     .help = "scale gradients before the all-reduce, not after"},
    {.path = "gradient_predivide_factor", .type = QF_KT_FLOAT, OFF(gradient_predivide_factor), .def = "1.0",
     POS_F, .ds = "`gradient_predivide_factor`",
     NOEFF("it only splits the averaging around the reduction; qwen-ft scales by the global token count before it"),
     .help = "divide gradients by this before the reduction and by world / factor after"},
    {.path = "zero_allow_untested_optimizer", .type = QF_KT_BOOL, OFF(zero_allow_untested_optimizer),
     .def = "false", .ds = "`zero_allow_untested_optimizer`",
     NOEFF("the optimizer is qwen-ft's own AdamW, which every ZeRO stage supports"),
     .help = "allow a client optimizer DeepSpeed has not tested with ZeRO"},
    {.path = "memory_breakdown", .type = QF_KT_BOOL, OFF(memory_breakdown), .def = "false",
     .ds = "`memory_breakdown`",
     NOEFF("the header prints the memory plan and the run ends with what each rank really allocated"),
     .help = "print memory use at each step"},
    {.path = "sparse_gradients", .type = QF_KT_BOOL, OFF(sparse_gradients), .def = "false",
     .ds = "`sparse_gradients`", NOEFF("gradients are dense flat buffers, the embedding's included"),
     .help = "sparse gradients for embeddings"},
    {.path = "zero_force_ds_cpu_optimizer", .type = QF_KT_BOOL, OFF(zero_force_ds_cpu_optimizer), .def = "true",
     .ds = "`zero_force_ds_cpu_optimizer`",
     NOEFF("the offloaded update always runs qwen-ft's own host AdamW"),
     .help = "require DeepSpeed's CPU optimizer with optimizer offload"},
    {.path = "communication_data_type", .type = QF_KT_STRING, STR(communication_data_type), .def = "",
     .flags = QF_KF_UNSET, .choices = k_dtype, .ds = "`communication_data_type`", .doc_default = "(the training dtype)",
     NOEFF("gradients are reduced in the dtype the backend keeps them in: bf16 or fp16 on GPUs, fp32 on CPU ranks"),
     .help = "dtype of the gradient reduction"},

    /* ---- optimizer ---- */
    {.path = "optimizer.type", .type = QF_KT_STRING, STR(optimizer_type), .def = "AdamW", .choices = k_opt,
     .ds = "`optimizer.type`", .fate = QF_FATE_DECK,
     .why = "AdamW sets adam_w_mode = true; Adam follows adam_w_mode (false is refused: qwen-ft implements AdamW)",
     .help = "AdamW (decoupled weight decay), or Adam with `adam_w_mode`"},
    {.path = "optimizer.params.lr", .type = QF_KT_FLOAT, OFF(lr), .def = "1e-3", NONNEG_F, .autov = "5e-5",
     .ds = "`optimizer.params.lr`", .help = "learning rate (the scheduler, if any, overrides it per step)"},
    {.path = "optimizer.params.betas", .type = QF_KT_FLOAT_PAIR, OFF(beta1), .off2 = offsetof(qf_deck, beta2),
     .def = "[0.9, 0.999]", .autov = "[0.9, 0.999]", RANGE(0, 1), .flags = QF_KF_LT_MAX,
     .ds = "`optimizer.params.betas`", .help = "Adam beta1, beta2"},
    {.path = "optimizer.params.eps", .type = QF_KT_FLOAT, OFF(eps), .def = "1e-8", POS_F, .autov = "1e-8",
     .ds = "`optimizer.params.eps`", .help = "Adam epsilon"},
    {.path = "optimizer.params.weight_decay", .type = QF_KT_FLOAT, OFF(weight_decay), .def = "0.01", NONNEG_F,
     .autov = "0.0", .ds = "`optimizer.params.weight_decay`",
     .help = "weight decay of 2-D weights (never biases or norms)"},
    {.path = "optimizer.params.adam_w_mode", .type = QF_KT_BOOL, OFF(adam_w_mode), .def = "true",
     .ds = "`optimizer.params.adam_w_mode`",
     .help = "type Adam: true = decoupled decay (AdamW), false = classic Adam with L2 added to the gradient"},

    /* ---- scheduler ---- */
    {.path = "scheduler.type", .type = QF_KT_ENUM, OFF(sched), .def = "none", .flags = QF_KF_UNSET,
     .choices = k_sched, .ds = "`scheduler.type`", .doc_default = "(none: constant lr)",
     .help = "learning-rate schedule; \"linear\" (qwen-ft, the HF Trainer's default): linear warmup from 0 over "
             "warmup_num_steps, then linear decay of optimizer.params.lr to 0 at total_num_steps; \"none\" "
             "(qwen-ft) turns off a scheduler set elsewhere"},
    {.path = "scheduler.params.warmup_min_lr", .type = QF_KT_FLOAT, OFF(warmup_min_lr), .def = "0", NONNEG_F,
     .autov = "0", .sched_mask = S_LR | S_DECAY, .ds = "`scheduler.params.warmup_min_lr`",
     .help = "lr at step 0 (WarmupLR, WarmupDecayLR)"},
    {.path = "scheduler.params.warmup_max_lr", .type = QF_KT_FLOAT, OFF(warmup_max_lr), .def = "0.001",
     NONNEG_F, .flags = QF_KF_AUTO_LR, .autov = "0.001", .doc_auto = "optimizer.params.lr",
     .sched_mask = S_LR | S_DECAY, .ds = "`scheduler.params.warmup_max_lr`",
     .help = "lr at the end of warmup (WarmupLR, WarmupDecayLR)"},
    {.path = "scheduler.params.warmup_num_steps", .type = QF_KT_INT64, OFF(warmup_num_steps), .def = "1000",
     NONNEG_I64, .autov = "0", .sched_mask = S_LR | S_DECAY | S_COS | S_LIN,
     .ds = "`scheduler.params.warmup_num_steps`", .help = "warmup length in optimizer steps"},
    {.path = "scheduler.params.warmup_type", .type = QF_KT_ENUM, OFF(warmup_type), .def = "log",
     .choices = k_warmup, .sched_mask = S_LR | S_DECAY | S_COS, .ds = "`scheduler.params.warmup_type`",
     .help = "warmup curve"},
    {.path = "scheduler.params.total_num_steps", .type = QF_KT_INT64, OFF(total_num_steps), .def = "0",
     POS_I64, .flags = QF_KF_UNSET | QF_KF_AUTO_SENTINEL, .autov = "-1",
     .doc_auto = "-1: the trainer uses the run's total steps", .sched_mask = S_DECAY | S_COS | S_LIN,
     .doc_default = "(required)", .ds = "`scheduler.params.total_num_steps`",
     .help = "step where the decay ends (WarmupDecayLR, WarmupCosineLR; linear: the run's total steps when not given)"},
    {.path = "scheduler.params.warmup_min_ratio", .type = QF_KT_FLOAT, OFF(warmup_min_ratio), .def = "0",
     RANGE(0, 1), .sched_mask = S_COS, .ds = "`scheduler.params.warmup_min_ratio`",
     .help = "lr at step 0 as a fraction of optimizer lr (WarmupCosineLR)"},
    {.path = "scheduler.params.cos_min_ratio", .type = QF_KT_FLOAT, OFF(cos_min_ratio), .def = "0.0001",
     RANGE(0, 1), .sched_mask = S_COS, .ds = "`scheduler.params.cos_min_ratio`",
     .help = "final lr as a fraction of optimizer lr (WarmupCosineLR)"},

    /* ---- precision ---- */
    {.path = "bf16.enabled", .type = QF_KT_BOOL, OFF(bf16), .def = "false", .autov = "false",
     .ds = "`bf16.enabled`", .help = "bf16 parameters/activations, fp32 master weights and moments"},
    {.path = "fp16.enabled", .type = QF_KT_BOOL, OFF(fp16), .def = "false", .autov = "false",
     .ds = "`fp16.enabled`", .help = "fp16 with dynamic loss scaling"},
    {.path = "fp16.loss_scale", .type = QF_KT_FLOAT, OFF(fp16_loss_scale), .def = "0", NONNEG_F,
     .ds = "`fp16.loss_scale`", .help = "static loss scale; 0 = dynamic"},
    {.path = "fp16.initial_scale_power", .type = QF_KT_INT, OFF(fp16_initial_scale_power), .def = "16",
     RANGE(0, 64), .ds = "`fp16.initial_scale_power`", .help = "dynamic scaling starts at 2^power"},
    {.path = "fp16.loss_scale_window", .type = QF_KT_INT, OFF(fp16_loss_scale_window), .def = "1000", POS_INT,
     .ds = "`fp16.loss_scale_window`", .help = "overflow-free steps before the scale doubles"},
    {.path = "fp16.hysteresis", .type = QF_KT_INT, OFF(fp16_hysteresis), .def = "2", POS_INT,
     .ds = "`fp16.hysteresis`", .help = "overflows tolerated before the scale halves"},
    {.path = "fp16.consecutive_hysteresis", .type = QF_KT_BOOL, OFF(fp16_consecutive_hysteresis),
     .def = "false", .ds = "`fp16.consecutive_hysteresis`", .help = "refill hysteresis on every good step"},
    {.path = "fp16.min_loss_scale", .type = QF_KT_FLOAT, OFF(fp16_min_loss_scale), .def = "1", POS_F,
     .ds = "`fp16.min_loss_scale`", .help = "floor of the dynamic loss scale"},
    {.path = "fp16.auto_cast", .type = QF_KT_BOOL, OFF(fp16_auto_cast), .def = "false", .ds = "`fp16.auto_cast`",
     NOEFF("the fp16 op table computes in fp16 throughout; there is no autocast to switch"),
     .help = "cast the model's inputs to fp16"},
    {.path = "fp8.enabled", .type = QF_KT_BOOL, OFF(fp8), .def = "false",
     .ds = "qwen-ft only (torchao `convert_to_float8_training`, Transformer Engine `fp8_autocast`)",
     .help = "the decoder's linear layers (q/k/v/o, gate/up/down) compute their GEMMs in fp8 on the GPU's fp8 tensor "
             "cores (compute capability >= 8.9); needs bf16.enabled; lm_head, loss, norms, attention, master weights "
             "and checkpoints stay as they are"},
    {.path = "fp8.recipe", .type = QF_KT_ENUM, OFF(fp8_recipe), .def = "tensorwise", .choices = k_fp8_recipe,
     .ds = "qwen-ft only (torchao `Float8LinearConfig.from_recipe_name`)",
     .help = "\"tensorwise\": one scale per tensor, e4m3 forward and e5m2 gradients; \"rowwise\": one scale per row "
             "(per token, per channel), all e4m3, power-of-two scales (cuBLASLt's per-row kernels, or where it has none "
             "(Hopper with cuBLASLt 13.1), a kernel applying the scales after a unit-scale fp8 GEMM); "
             "both scale each tensor by its own amax (current scaling)"},
    {.path = "fp8.amax_history_len", .type = QF_KT_INT, OFF(fp8_amax_history_len), .def = "0", RANGE(0, 1024),
     .ds = "qwen-ft only (Transformer Engine `DelayedScaling(amax_history_len)`)",
     .help = "tensorwise weights: 0 = current scaling (each weight's own amax, taken once per optimizer step); "
             "n = delayed scaling, the scale from the max of the weight's last n amaxes, recorded by the cast itself "
             "(no amax pass; a value above it saturates); activations and gradients stay current-scaled"},
    {.path = "fp8.save_inputs", .type = QF_KT_BOOL, OFF(fp8_save_inputs), .def = "false",
     .ds = "qwen-ft only (Transformer Engine keeps the fp8 inputs for the backward)",
     .help = "tensorwise: the forward keeps each fp8 linear layer's quantized, transposed input for the weight "
             "gradient (tokens x in-features bytes per input of every layer without recomputation: ~3.4 GB at 7B and "
             "4096 tokens) instead of the backward quantizing it again; the same values either way"},

    /* ---- ZeRO ---- */
    {.path = "zero_optimization.stage", .type = QF_KT_INT, OFF(zero_stage), .def = "0", RANGE(0, 3),
     .flags = QF_KF_AUTO_SENTINEL, .autov = "-1", .doc_auto = "the layout planner's stage",
     .ds = "`zero_optimization.stage` (\"auto\": qwen-ft only)",
     .help = "0 DDP, 1 optimizer states, 2 + gradients, 3 + parameters sharded; \"auto\": the layout planner "
             "picks the fastest stage that fits at the start of the run (`qwen-ft plan`)"},
    {.path = "zero_optimization.offload_optimizer.device", .type = QF_KT_ENUM, OFF(offload_optimizer),
     .def = "none", .choices = k_offload, .autov = "auto", .doc_auto = "the layout planner's", .ds = "`zero_optimization.offload_optimizer.device`",
     .help = "keep optimizer states (and the step) on the host; stage >= 1; \"auto\": the layout planner decides"},
    {.path = "zero_optimization.offload_optimizer.pin_memory", .type = QF_KT_BOOL,
     OFF(offload_optimizer_pin_memory), .def = "false", .ds = "`zero_optimization.offload_optimizer.pin_memory`",
     .help = "page-locked host buffers for the optimizer offload"},
    {.path = "zero_optimization.offload_optimizer.ratio", .type = QF_KT_FLOAT, OFF(offload_optimizer_ratio),
     .def = "1", RANGE(0, 1), .flags = QF_KF_AUTO_SENTINEL, .autov = "-1", .doc_auto = "the layout planner's share",
     .ds = "`zero_optimization.offload_optimizer.ratio` (ZeRO-Offload++)",
     .help = "share of the optimizer states and step on the host (the end of each rank's range); the rest stays "
             "on the GPU and is updated there first, so the next forward starts at once (device = cpu or auto); "
             "\"auto\": the layout planner's choice of 1, 0.75, 0.5, 0.25"},
    {.path = "zero_optimization.offload_optimizer.gradients", .type = QF_KT_ENUM, OFF(offload_optimizer_gradients),
     .def = "auto", .choices = k_grads, .ds = "qwen-ft only (DeepSpeed streams gradients to the host with offload)",
     .help = "where the reduced gradient shard lives with offload_optimizer at stage 2-3: \"device\" (on the GPU "
             "until the step), \"host\" (each unit's reduced gradients stream to pinned host memory during the "
             "backward, so the GPU holds only the units in flight; needs ratio = 1), or \"auto\": host where the "
             "memory plan with the shard on the GPU exceeds the GPU (or gpu_memory_limit_gb), else device; the run "
             "header says which"},
    {.path = "zero_optimization.offload_optimizer.buffer_count", .type = QF_KT_INT64,
     OFF(offload_optimizer_buffer_count), .def = "4", NONNEG_I64,
     .ds = "`zero_optimization.offload_optimizer.buffer_count`", NVME_ONLY,
     .help = "buffers of the NVMe optimizer offload"},
    {.path = "zero_optimization.offload_optimizer.fast_init", .type = QF_KT_BOOL, OFF(offload_optimizer_fast_init),
     .def = "false", .ds = "`zero_optimization.offload_optimizer.fast_init`", NVME_ONLY,
     .help = "fast optimizer initialisation for NVMe offload"},
    {.path = "zero_optimization.offload_optimizer.pipeline_read", .type = QF_KT_BOOL,
     OFF(offload_optimizer_pipeline_read), .def = "false",
     .ds = "`zero_optimization.offload_optimizer.pipeline_read`", NVME_ONLY,
     .help = "overlap NVMe reads with the optimizer step"},
    {.path = "zero_optimization.offload_optimizer.pipeline_write", .type = QF_KT_BOOL,
     OFF(offload_optimizer_pipeline_write), .def = "false",
     .ds = "`zero_optimization.offload_optimizer.pipeline_write`", NVME_ONLY,
     .help = "overlap NVMe writes with the optimizer step"},
    {.path = "zero_optimization.offload_optimizer.nvme_path", .type = QF_KT_STRING,
     STR(offload_optimizer_nvme_path), .def = "", .flags = QF_KF_UNSET, .doc_default = "(none)",
     .ds = "`zero_optimization.offload_optimizer.nvme_path`", NVME_ONLY, .help = "NVMe directory of the optimizer offload"},
    {.path = "zero_optimization.offload_param.device", .type = QF_KT_ENUM, OFF(offload_param), .def = "none",
     .choices = k_offload, .autov = "auto", .doc_auto = "the layout planner's", .ds = "`zero_optimization.offload_param.device`",
     .help = "keep parameters on the host between uses; stage 3 only; \"auto\": the layout planner decides"},
    {.path = "zero_optimization.offload_param.pin_memory", .type = QF_KT_BOOL, OFF(offload_param_pin_memory),
     .def = "false", .ds = "`zero_optimization.offload_param.pin_memory`",
     .help = "page-locked host buffers for the parameter offload"},
    {.path = "zero_optimization.offload_param.buffer_count", .type = QF_KT_INT64, OFF(offload_param_buffer_count),
     .def = "5", NONNEG_I64, .ds = "`zero_optimization.offload_param.buffer_count`", NVME_ONLY,
     .help = "buffers of the NVMe parameter offload"},
    {.path = "zero_optimization.offload_param.buffer_size", .type = QF_KT_INT64, OFF(offload_param_buffer_size),
     .def = "1e8", NONNEG_I64, .ds = "`zero_optimization.offload_param.buffer_size`", NVME_ONLY,
     .help = "size of the NVMe parameter offload buffers"},
    {.path = "zero_optimization.offload_param.max_in_cpu", .type = QF_KT_INT64, OFF(offload_param_max_in_cpu),
     .def = "1e9", NONNEG_I64, .ds = "`zero_optimization.offload_param.max_in_cpu`", NVME_ONLY,
     .help = "parameter elements kept in host memory with NVMe offload"},
    {.path = "zero_optimization.offload_param.nvme_path", .type = QF_KT_STRING, STR(offload_param_nvme_path),
     .def = "", .flags = QF_KF_UNSET, .doc_default = "(none)", .ds = "`zero_optimization.offload_param.nvme_path`",
     NVME_ONLY, .help = "NVMe directory of the parameter offload"},
    {.path = "zero_optimization.overlap_comm", .type = QF_KT_BOOL, OFF(overlap_comm), .def = "false",
     .doc_default = "false (true at stage 3)", .ds = "`zero_optimization.overlap_comm`",
     .help = "overlap gradient reduction with the backward pass"},
    {.path = "zero_optimization.contiguous_gradients", .type = QF_KT_BOOL, OFF(contiguous_gradients),
     .def = "true", .ds = "`zero_optimization.contiguous_gradients`",
     NOEFF("gradients always live in flat, contiguous buffers, one per unit as it is reduced"),
     .help = "copy gradients into one contiguous buffer as they are produced"},
    {.path = "zero_optimization.reduce_scatter", .type = QF_KT_BOOL, OFF(reduce_scatter), .def = "true",
     .ds = "`zero_optimization.reduce_scatter`",
     NOEFF("stages 2-3 always reduce-scatter each unit into its owners' shards, the values an all-reduce would "
           "give; stages 0-1 always all-reduce"),
     .help = "reduce-scatter (not all-reduce) gradients at stage >= 2"},
    {.path = "zero_optimization.allgather_partitions", .type = QF_KT_BOOL, OFF(allgather_partitions),
     .def = "true", .ds = "`zero_optimization.allgather_partitions`",
     NOEFF("stages 1-2 always all-gather the updated partitions, never a broadcast per rank"),
     .help = "all-gather the updated partitions (not broadcast them)"},
    {.path = "zero_optimization.round_robin_gradients", .type = QF_KT_BOOL, OFF(round_robin_gradients),
     .def = "false", .ds = "`zero_optimization.round_robin_gradients`",
     NOEFF("with offload each rank moves only its own gradient shard to the host; there is nothing to spread"),
     .help = "spread the copy of offloaded gradients across ranks"},
    {.path = "zero_optimization.sub_group_size", .type = QF_KT_INT64, OFF(sub_group_size), .def = "1e9",
     POS_I64, .ds = "`zero_optimization.sub_group_size`",
     NOEFF("the update already runs per parameter segment of the shard, offloaded in chunks of 2^24 elements"),
     .help = "parameter elements per optimizer sub-group"},
    {.path = "zero_optimization.reduce_bucket_size", .type = QF_KT_INT64, OFF(reduce_bucket_size), .def = "5e8",
     POS_I64, .flags = QF_KF_AUTO_SENTINEL, .autov = "-1", .doc_auto = "-1: hidden_size^2 (trainer)",
     .ds = "`zero_optimization.reduce_bucket_size`", .help = "elements per gradient-reduction bucket"},
    {.path = "zero_optimization.allgather_bucket_size", .type = QF_KT_INT64, OFF(allgather_bucket_size),
     .def = "5e8", POS_I64, .ds = "`zero_optimization.allgather_bucket_size`",
     .help = "elements per parameter all-gather bucket (stages 1-2)"},
    {.path = "zero_optimization.stage3_prefetch_bucket_size", .type = QF_KT_INT64,
     OFF(stage3_prefetch_bucket_size), .def = "5e7", NONNEG_I64, .flags = QF_KF_AUTO_SENTINEL, .autov = "-1",
     .doc_auto = "-1: 0.9 x hidden_size^2 (trainer)", .ds = "`zero_optimization.stage3_prefetch_bucket_size`",
     .help = "elements of parameters fetched ahead (stage 3)"},
    {.path = "zero_optimization.stage3_param_persistence_threshold", .type = QF_KT_INT64,
     OFF(stage3_param_persistence_threshold), .def = "1e5", NONNEG_I64, .flags = QF_KF_AUTO_SENTINEL,
     .autov = "-1", .doc_auto = "-1: 10 x hidden_size (trainer)",
     .ds = "`zero_optimization.stage3_param_persistence_threshold`",
     .help = "parameters smaller than this stay unpartitioned (stage 3)"},
    {.path = "zero_optimization.stage3_max_live_parameters", .type = QF_KT_INT64,
     OFF(stage3_max_live_parameters), .def = "1e9", NONNEG_I64,
     .ds = "`zero_optimization.stage3_max_live_parameters`", .help = "most gathered parameter elements at once"},
    {.path = "zero_optimization.stage3_max_reuse_distance", .type = QF_KT_INT64,
     OFF(stage3_max_reuse_distance), .def = "1e9", NONNEG_I64,
     .ds = "`zero_optimization.stage3_max_reuse_distance`",
     NOEFF("a gathered unit stays while it is in the prefetch window and is freed when it leaves it; there is no "
           "reuse cache to bound"),
     .help = "keep a gathered parameter if it is reused within this many elements"},
    {.path = "zero_optimization.stage3_gather_16bit_weights_on_model_save", .type = QF_KT_BOOL,
     OFF(stage3_gather_16bit_weights_on_model_save), .def = "false",
     .ds = "`zero_optimization.stage3_gather_16bit_weights_on_model_save`",
     NOEFF("checkpoints always hold whole parameters, one dataset per parameter; `qwen-ft export` writes 16-bit "
           "HF weights"),
     .help = "gather the 16-bit weights when the model is saved"},
    {.path = "zero_optimization.stage3_gather_fp16_weights_on_model_save", .type = QF_KT_BOOL,
     OFF(stage3_gather_fp16_weights_on_model_save), .def = "false",
     .ds = "`zero_optimization.stage3_gather_fp16_weights_on_model_save`",
     NOEFF("the older name of stage3_gather_16bit_weights_on_model_save: checkpoints always hold whole parameters"),
     .help = "gather the 16-bit weights when the model is saved (older name)"},
    {.path = "zero_optimization.memory_efficient_linear", .type = QF_KT_BOOL, OFF(memory_efficient_linear),
     .def = "true", .ds = "`zero_optimization.memory_efficient_linear`",
     NOEFF("the linear layers keep no gathered weight for the backward; stage 3 gathers a unit again for its backward"),
     .help = "stage 3: a linear layer that does not keep its gathered weight for the backward"},
    {.path = "zero_optimization.ignore_unused_parameters", .type = QF_KT_BOOL, OFF(ignore_unused_parameters),
     .def = "true", .ds = "`zero_optimization.ignore_unused_parameters`",
     NOEFF("every parameter of a Qwen model gets a gradient every step"),
     .help = "do not fail on parameters without gradients"},
    {.path = "zero_optimization.load_from_fp32_weights", .type = QF_KT_BOOL, OFF(load_from_fp32_weights),
     .def = "true", .ds = "`zero_optimization.load_from_fp32_weights`",
     NOEFF("a resumed run always restores the checkpoint's fp32 master weights"),
     .help = "restore the fp32 master weights (not the 16-bit ones) when resuming"},

    /* ---- checkpoint, eval, log ---- */
    {.path = "checkpoint.dir", .type = QF_KT_STRING, STR(checkpoint_dir), .def = "ckpt",
     .ds = "qwen-ft only (HF `output_dir`)", .help = "checkpoint directory; train resumes from its latest"},
    {.path = "checkpoint.every_steps", .type = QF_KT_INT64, OFF(checkpoint_every_steps), .def = "0", NONNEG_I64,
     .ds = "qwen-ft only (HF `save_steps`)", .help = "checkpoint period in steps; 0 = only at the end"},
    {.path = "checkpoint.keep", .type = QF_KT_INT, OFF(checkpoint_keep), .def = "3", POS_INT,
     .ds = "qwen-ft only (HF `save_total_limit`)", .help = "checkpoints kept (older ones are deleted)"},
    {.path = "checkpoint.at_end", .type = QF_KT_BOOL, OFF(checkpoint_at_end), .def = "true",
     .ds = "qwen-ft only", .help = "write a checkpoint when the run ends (false only for throughput benchmarks)"},
    /* DeepSpeed's checkpoint section shares the group: its keys are DeepSpeed's, the ones above qwen-ft's */
    {.path = "checkpoint.tag_validation", .type = QF_KT_ENUM, OFF(checkpoint_tag_validation), .def = "Warn",
     .choices = k_tagval, .ds = "`checkpoint.tag_validation`",
     NOEFF("checkpoints carry no tags to compare across ranks: `latest` names the last complete one"),
     .help = "check that every rank saves under the same tag"},
    {.path = "checkpoint.load_universal", .type = QF_KT_BOOL, OFF(checkpoint_load_universal), .def = "false",
     .ds = "`checkpoint.load_universal`",
     NOEFF("every checkpoint resumes at any world size and ZeRO stage: it holds one dataset per parameter"),
     .help = "load a universal (world-size independent) checkpoint"},
    {.path = "checkpoint.use_node_local_storage", .type = QF_KT_BOOL, OFF(checkpoint_use_node_local_storage),
     .def = "false", .ds = "`checkpoint.use_node_local_storage`",
     NOEFF("every rank writes its hyperslabs into one shared file, collectively"),
     .help = "save each node's part on its local storage"},
    {.path = "checkpoint.export_hf", .type = QF_KT_BOOL, OFF(checkpoint_export_hf), .def = "false",
     .ds = "qwen-ft only (like `stage3_gather_16bit_weights_on_model_save`)",
     .help = "each checkpoint also writes an HF directory step-N-hf beside it, from the sharded state, collectively"},
    {.path = "checkpoint.keep_best", .type = QF_KT_BOOL, OFF(checkpoint_keep_best), .def = "false",
     .ds = "qwen-ft only (HF `load_best_model_at_end`, which keeps the best checkpoint beyond save_total_limit)",
     .help = "each evaluation that improves valid_loss (by more than eval.early_stopping_threshold) checkpoints its "
             "step and names it in checkpoint.dir/best, outside the checkpoint.keep rotation (train --resume-from "
             "best, export --step best)"},
    {.path = "eval.every_steps", .type = QF_KT_INT64, OFF(eval_every_steps), .def = "0", NONNEG_I64,
     .ds = "qwen-ft only (HF `eval_steps`)", .help = "validation period in steps; 0 = only at the end"},
    {.path = "eval.early_stopping_patience", .type = QF_KT_INT, OFF(early_stopping_patience), .def = "0",
     NONNEG_INT, .ds = "qwen-ft only (HF EarlyStoppingCallback)",
     .help = "stop after this many evals without improvement; 0 = off"},
    {.path = "eval.early_stopping_threshold", .type = QF_KT_FLOAT, OFF(early_stopping_threshold), .def = "0",
     NONNEG_F, .ds = "qwen-ft only (HF EarlyStoppingCallback)",
     .help = "smallest valid_loss decrease that counts as improvement"},
    {.path = "eval.max_batches", .type = QF_KT_INT64, OFF(eval_max_batches), .def = "0", NONNEG_I64,
     .ds = "qwen-ft only", .help = "validation batches per eval; 0 = the whole validation set"},
    {.path = "log.dir", .type = QF_KT_STRING, STR(log_dir), .def = "logs", .ds = "qwen-ft only",
     .help = "directory of metrics.jsonl (and TensorBoard events)"},
    {.path = "log.steps_per_print", .type = QF_KT_INT, OFF(steps_per_print), .def = "10", POS_INT,
     .ds = "`steps_per_print` (top level in DeepSpeed)", .help = "progress line period in steps"},
    {.path = "steps_per_print", .type = QF_KT_INT, OFF(steps_per_print), .def = "10", POS_INT,
     .ds = "`steps_per_print`", ALIAS("log.steps_per_print"), .help = "DeepSpeed's name of log.steps_per_print"},
    {.path = "log.wall_clock_breakdown", .type = QF_KT_BOOL, OFF(wall_clock_breakdown), .def = "false",
     .ds = "`wall_clock_breakdown` (top level in DeepSpeed)", .help = "per-step time by phase and op class (synchronises every op) on the progress output and in "
             "metrics.jsonl"},
    {.path = "wall_clock_breakdown", .type = QF_KT_BOOL, OFF(wall_clock_breakdown), .def = "false",
     .ds = "`wall_clock_breakdown`", ALIAS("log.wall_clock_breakdown"),
     .help = "DeepSpeed's name of log.wall_clock_breakdown"},
    {.path = "log.tensorboard", .type = QF_KT_BOOL, OFF(tensorboard), .def = "false",
     .ds = "`tensorboard.enabled`", .help = "also write TensorBoard event files (to log.dir unless tensorboard.output_path)"},
    {.path = "tensorboard.enabled", .type = QF_KT_BOOL, OFF(tensorboard), .def = "false",
     .ds = "`tensorboard.enabled`", ALIAS("log.tensorboard"), .help = "DeepSpeed's name of log.tensorboard"},
    {.path = "tensorboard.output_path", .type = QF_KT_STRING, STR(tensorboard_output_path), .def = "",
     .flags = QF_KF_UNSET, .ds = "`tensorboard.output_path`", .doc_default = "(log.dir)",
     .help = "directory of the TensorBoard events (then in output_path/job_name when job_name is set)"},
    {.path = "tensorboard.job_name", .type = QF_KT_STRING, STR(tensorboard_job_name), .def = "",
     .flags = QF_KF_UNSET, .ds = "`tensorboard.job_name`", .doc_default = "(none)",
     .help = "subdirectory of the TensorBoard events"},
    {.path = "csv_monitor.enabled", .type = QF_KT_BOOL, OFF(csv_monitor_enabled), .def = "false",
     .ds = "`csv_monitor.enabled`", NOEFF(METRICS_WHY), .help = "write metrics as CSV files"},
    {.path = "csv_monitor.output_path", .type = QF_KT_STRING, STR(csv_monitor_output_path), .def = "",
     .flags = QF_KF_UNSET, .doc_default = "(none)", .ds = "`csv_monitor.output_path`", NOEFF(METRICS_WHY),
     .help = "directory of the CSV files"},
    {.path = "csv_monitor.job_name", .type = QF_KT_STRING, STR(csv_monitor_job_name), .def = "",
     .flags = QF_KF_UNSET, .doc_default = "(none)", .ds = "`csv_monitor.job_name`", NOEFF(METRICS_WHY),
     .help = "subdirectory of the CSV files"},
    {.path = "flops_profiler.enabled", .type = QF_KT_BOOL, OFF(flops_profiler_enabled), .def = "false",
     .ds = "`flops_profiler.enabled`", NOEFF(PROFILER_WHY), .help = "profile FLOPs per module"},
    {.path = "flops_profiler.profile_step", .type = QF_KT_INT64, OFF(flops_profiler_profile_step), .def = "1",
     NONNEG_I64, .ds = "`flops_profiler.profile_step`", NOEFF(PROFILER_WHY), .help = "step to profile"},
    {.path = "flops_profiler.module_depth", .type = QF_KT_INT, OFF(flops_profiler_module_depth), .def = "-1",
     RANGE(-1, INT_MAX), .ds = "`flops_profiler.module_depth`", NOEFF(PROFILER_WHY),
     .help = "module depth of the profile"},
    {.path = "flops_profiler.top_modules", .type = QF_KT_INT, OFF(flops_profiler_top_modules), .def = "1",
     NONNEG_INT, .ds = "`flops_profiler.top_modules`", NOEFF(PROFILER_WHY), .help = "modules listed"},
    {.path = "flops_profiler.detailed", .type = QF_KT_BOOL, OFF(flops_profiler_detailed), .def = "true",
     .ds = "`flops_profiler.detailed`", NOEFF(PROFILER_WHY), .help = "detailed profile"},
    {.path = "flops_profiler.output_file", .type = QF_KT_STRING, STR(flops_profiler_output_file), .def = "",
     .flags = QF_KF_UNSET, .doc_default = "(stdout)", .ds = "`flops_profiler.output_file`", NOEFF(PROFILER_WHY),
     .help = "file of the profile"},

    /* ---- run control ---- */
    {.path = "on_nonfinite", .type = QF_KT_ENUM, OFF(on_nonfinite), .def = "stop", .choices = k_nonfinite,
     .ds = "qwen-ft only", .help = "a NaN/Inf loss or gradient (bf16/fp32): skip the step, or stop with exit 3"},
    {.path = "max_hours", .type = QF_KT_FLOAT, OFF(max_hours), .def = "0", NONNEG_F, .ds = "qwen-ft only",
     .help = "wall-time budget in hours: checkpoint and stop before it runs out (like GROMACS -maxh); 0 = no limit"},
    {.path = "gpu_memory_limit_gb", .type = QF_KT_FLOAT, OFF(gpu_memory_limit_gb), .def = "0", NONNEG_F,
     .ds = "qwen-ft only", .help = "plan memory as if each GPU had only this much; 0 = no limit"},
    {.path = "peak_tflops", .type = QF_KT_FLOAT, OFF(peak_tflops), .def = "0", NONNEG_F, .ds = "qwen-ft only",
     .help = "peak dense TFLOP/s per GPU for MFU; 0 = from the GPU table"},
    {.path = "topology.ranks_per_node", .type = QF_KT_INT, OFF(ranks_per_node), .def = "0", NONNEG_INT,
     .ds = "qwen-ft only", .help = "pretend nodes of this many ranks (testing); 0 = real nodes"},
    {.path = "deepspeed", .type = QF_KT_STRING, STR(deepspeed), .def = "", .flags = QF_KF_UNSET,
     .ds = "qwen-ft only (HF `--deepspeed`)", .doc_default = "(none)", .fate = QF_FATE_DECK,
     .why = "its keys are read under DeepSpeed's names; the deck's own entries win",
     .help = "a DeepSpeed JSON config to read as it is (path relative to the deck; docs/deck.md, \"From DeepSpeed\")"},
};

_Static_assert(sizeof k_keys / sizeof k_keys[0] <= QF_DECK_KEYS_MAX, "raise QF_DECK_KEYS_MAX");

/* DeepSpeed sections (and keys) for features qwen-ft does not have: refused, with what they are. */
static const struct {
    const char *path, *what;
} k_refused[] = {
    {"pipeline", "pipeline parallelism (qwen-ft is data parallel with ZeRO)"},
    {"moe", "mixture-of-experts layers (qwen-ft trains dense Qwen models)"},
    {"compression_training", "compression training (quantization, pruning)"},
    {"quantize_training", "quantization-aware training"},
    {"sparse_attention", "sparse attention"},
    {"wandb", "the Weights & Biases monitor (metrics go to log.dir/metrics.jsonl and TensorBoard)"},
    {"comet", "the Comet monitor (metrics go to log.dir/metrics.jsonl and TensorBoard)"},
    {"nebula", "Nebula checkpointing"},
    {"elasticity", "elastic training (checkpoints resume at any world size instead)"},
    {"autotuning", "the autotuner"},
    {"curriculum_learning", "curriculum learning"},
    {"data_efficiency", "data-efficiency sampling and routing"},
    {"amp", "NVIDIA Apex AMP (use bf16.enabled or fp16.enabled)"},
    {"aio", "NVMe offload I/O (offload goes to host memory)"},
    {"hybrid_engine", "the RLHF hybrid engine"},
    {"sequence_parallel_size", "sequence parallelism"},
    {"tensor_parallel", "tensor parallelism"},
    {"zero_optimization.zero_hpz_partition_size", "ZeRO++ hierarchical partitioning"},
    {"zero_optimization.zero_quantized_weights", "ZeRO++ quantized weights"},
    {"zero_optimization.zero_quantized_gradients", "ZeRO++ quantized gradients"},
    {"zero_optimization.mics_shard_size", "MiCS sharding"},
};

const char *qf_deck_keys_refused(const char *path) {
    for (size_t i = 0; i < sizeof k_refused / sizeof k_refused[0]; i++) {
        size_t n = strlen(k_refused[i].path);
        if (strncmp(path, k_refused[i].path, n) == 0 && (path[n] == 0 || path[n] == '.')) return k_refused[i].what;
    }
    return NULL;
}

int qf_deck_keys_is_ds(const qf_deck_key *k) {
    size_t n = strlen(k->path);
    return k->ds[0] == '`' && strncmp(k->ds + 1, k->path, n) == 0 && k->ds[n + 1] == '`';
}

_Static_assert(sizeof(qf_sched_type) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(qf_ackpt) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(qf_warmup_type) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(qf_offload_device) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(qf_nonfinite_action) == sizeof(int), "enum fields are stored as int");

const qf_deck_key *qf_deck_keys_table(int *n) {
    *n = (int)(sizeof k_keys / sizeof k_keys[0]);
    return k_keys;
}

int qf_deck_keys_find(const char *path) {
    int n;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    for (int i = 0; i < n; i++)
        if (strcmp(k[i].path, path) == 0) return i;
    return -1;
}

int qf_deck_keys_is_group(const char *path) {
    int n;
    size_t len = strlen(path);
    const qf_deck_key *k = qf_deck_keys_table(&n);
    for (int i = 0; i < n; i++)
        if (strncmp(k[i].path, path, len) == 0 && k[i].path[len] == '.') return 1;
    return 0;
}

static const char *keys_leaf(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

/* Close enough to suggest: within a third of the word's length, and at least floor edits. */
static int keys_limit(const char *word, int floor) {
    int lim = (int)strlen(word) / 3;
    return lim > floor ? lim : floor;
}

static int keys_same_parent(const char *a, const char *b) {
    size_t la = (size_t)(keys_leaf(a) - a), lb = (size_t)(keys_leaf(b) - b);
    return la == lb && strncmp(a, b, la) == 0;
}

/* "Did you mean" distance of key from the unknown path, or -1 when not close: 1 when the last component matches
 * exactly (a DeepSpeed top-level key that lives in a group here) or path is a group of key; the edit distance of
 * the last components within the same group; else the edit distance of the whole paths. */
static int keys_score(const char *path, const char *key) {
    size_t len = strlen(path);
    int dist;
    if (strcmp(keys_leaf(path), keys_leaf(key)) == 0) return 1;
    if (strncmp(key, path, len) == 0 && key[len] == '.') return 1;
    if (keys_same_parent(path, key)) {
        dist = qf_edit_distance(keys_leaf(path), keys_leaf(key));
        return dist <= keys_limit(keys_leaf(path), 2) ? dist : -1;
    }
    dist = qf_edit_distance(path, key);
    return dist <= keys_limit(path, 2) ? dist : -1;
}

const char *qf_deck_keys_suggest(const char *path) {
    int n, best = -1, bestd = 1 << 30;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    for (int i = 0; i < n; i++) {
        int dist = keys_score(path, k[i].path);
        if (dist >= 0 && dist < bestd) bestd = dist, best = i;
    }
    return best >= 0 ? k[best].path : NULL;
}

static void keys_lower(const char *s, char *out, size_t n) {
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++) out[i] = (char)tolower((unsigned char)s[i]);
    out[i] = 0;
}

const char *qf_deck_keys_suggest_in(const char *word, const char *const *names) {
    char w[128], c[128];
    const char *best = NULL;
    int bestd = 1 << 30;
    keys_lower(word, w, sizeof w);
    for (int i = 0; names && names[i]; i++) {
        keys_lower(names[i], c, sizeof c);
        int dist = qf_edit_distance(w, c);
        if (dist < bestd) bestd = dist, best = names[i];
    }
    return best && bestd <= keys_limit(word, 1) ? best : NULL;
}

int qf_deck_keys_choice(const qf_deck_key *k, const char *name) {
    for (int i = 0; k->choices && k->choices[i]; i++)
        if (strcasecmp(k->choices[i], name) == 0) return i;
    return -1;
}

/* ---- typed field access ---- */

static void *keys_field(const qf_deck_key *k, qf_deck *d) { return (char *)d + k->off; }
static const void *keys_cfield(const qf_deck_key *k, const qf_deck *d) { return (const char *)d + k->off; }

void qf_deck_keys_store_int(const qf_deck_key *k, qf_deck *d, int64_t v) {
    switch (k->type) {
    case QF_KT_INT64: *(int64_t *)keys_field(k, d) = v; break;
    case QF_KT_UINT64: *(uint64_t *)keys_field(k, d) = (uint64_t)v; break;
    case QF_KT_BOOL:
    case QF_KT_INT:
    case QF_KT_ENUM: *(int *)keys_field(k, d) = (int)v; break;
    default: QF_FATAL("deck key %s: not an integer key", k->path);
    }
}

void qf_deck_keys_store_float(const qf_deck_key *k, qf_deck *d, double v) {
    QF_CHECK(k->type == QF_KT_FLOAT);
    *(double *)keys_field(k, d) = v;
}

void qf_deck_keys_store_pair(const qf_deck_key *k, qf_deck *d, double a, double b) {
    QF_CHECK(k->type == QF_KT_FLOAT_PAIR);
    *(double *)keys_field(k, d) = a;
    *(double *)((char *)d + k->off2) = b;
}

int qf_deck_keys_store_string(const qf_deck_key *k, qf_deck *d, const char *s) {
    QF_CHECK(k->type == QF_KT_STRING);
    if (strlen(s) >= k->size) return -1;
    memcpy(keys_field(k, d), s, strlen(s) + 1);
    return 0;
}

int64_t qf_deck_keys_get_int(const qf_deck_key *k, const qf_deck *d) {
    switch (k->type) {
    case QF_KT_INT64: return *(const int64_t *)keys_cfield(k, d);
    case QF_KT_UINT64: return (int64_t) * (const uint64_t *)keys_cfield(k, d);
    case QF_KT_BOOL:
    case QF_KT_INT:
    case QF_KT_ENUM: return *(const int *)keys_cfield(k, d);
    default: QF_FATAL("deck key %s: not an integer key", k->path);
    }
}

double qf_deck_keys_get_float(const qf_deck_key *k, const qf_deck *d) {
    QF_CHECK(k->type == QF_KT_FLOAT);
    return *(const double *)keys_cfield(k, d);
}

void qf_deck_keys_get_pair(const qf_deck_key *k, const qf_deck *d, double *a, double *b) {
    QF_CHECK(k->type == QF_KT_FLOAT_PAIR);
    *a = *(const double *)keys_cfield(k, d);
    *b = *(const double *)((const char *)d + k->off2);
}

const char *qf_deck_keys_get_string(const qf_deck_key *k, const qf_deck *d) {
    QF_CHECK(k->type == QF_KT_STRING);
    return (const char *)keys_cfield(k, d);
}

/* ---- deck text (defaults, "auto" values) ---- */

static int keys_parse_number(const char *text, double *v) {
    char *end;
    *v = strtod(text, &end);
    return end != text && *end == 0 ? 0 : -1;
}

static int keys_text_int(const qf_deck_key *k, const char *text, int64_t *v) {
    double f;
    if (k->type == QF_KT_BOOL && strcmp(text, "true") == 0) return *v = 1, 0;
    if (k->type == QF_KT_BOOL && strcmp(text, "false") == 0) return *v = 0, 0;
    if (k->type == QF_KT_ENUM) {
        int i = qf_deck_keys_choice(k, text);
        if (i < 0 && (k->flags & QF_KF_BOOL_ENUM) && strcmp(text, "true") == 0) i = 1;
        if (i < 0 && (k->flags & QF_KF_BOOL_ENUM) && strcmp(text, "false") == 0) i = 0;
        if (i < 0) return -1;
        *v = i;
        return 0;
    }
    if (keys_parse_number(text, &f) != 0) return -1;
    *v = (int64_t)f;
    return 0;
}

int qf_deck_keys_apply_text(const qf_deck_key *k, qf_deck *d, const char *text) {
    double a, b;
    int64_t v;
    switch (k->type) {
    case QF_KT_FLOAT:
        if (keys_parse_number(text, &a) != 0) return -1;
        qf_deck_keys_store_float(k, d, a);
        return 0;
    case QF_KT_STRING: return qf_deck_keys_store_string(k, d, text);
    case QF_KT_FLOAT_PAIR:
        if (sscanf(text, " [ %lf , %lf ]", &a, &b) != 2) return -1;
        qf_deck_keys_store_pair(k, d, a, b);
        return 0;
    default:
        if (keys_text_int(k, text, &v) != 0) return -1;
        qf_deck_keys_store_int(k, d, v);
        return 0;
    }
}

int qf_deck_keys_equals_text(const qf_deck_key *k, const qf_deck *d, const char *text) {
    qf_deck *t = qf_calloc(1, sizeof *t);
    int eq = 0;
    if (qf_deck_keys_apply_text(k, t, text) == 0) {
        if (k->type == QF_KT_STRING)
            eq = strcmp(qf_deck_keys_get_string(k, d), qf_deck_keys_get_string(k, t)) == 0;
        else if (k->type == QF_KT_FLOAT)
            eq = qf_deck_keys_get_float(k, d) == qf_deck_keys_get_float(k, t);
        else if (k->type == QF_KT_FLOAT_PAIR) {
            double a, b, x, y;
            qf_deck_keys_get_pair(k, d, &a, &b);
            qf_deck_keys_get_pair(k, t, &x, &y);
            eq = a == x && b == y;
        } else
            eq = qf_deck_keys_get_int(k, d) == qf_deck_keys_get_int(k, t);
    }
    free(t);
    return eq;
}
