/* model_config.h — the Qwen architecture family as one config struct, presets for the published models. */
#ifndef QF_MODEL_CONFIG_H
#define QF_MODEL_CONFIG_H
#include <stdint.h>

typedef struct qf_model_config {
    char arch[16];        /* "qwen2" (Qwen v1, 1.5, 2, 2.5 map here) | "qwen3" */
    char family[16];      /* what it came from: "qwen" (v1) | "qwen2" | "qwen3" | "preset" */
    int64_t vocab_size;
    int hidden_size;      /* C */
    int intermediate_size;/* F (the real FFN width; Qwen v1 configs store 2F) */
    int num_layers;       /* L */
    int num_heads;        /* H */
    int num_kv_heads;     /* KV, H % KV == 0 */
    int head_dim;         /* D (may differ from C/H in Qwen3) */
    int tie_word_embeddings;
    int attention_bias;   /* q/k/v biases (Qwen v1/1.5/2/2.5: 1, Qwen3: 0) */
    int qk_norm;          /* per-head RMSNorm of q and k before RoPE (Qwen3) */
    double rope_theta;
    double rms_norm_eps;
    int max_position_embeddings;
    double initializer_range;
    int bos_token_id, eos_token_id, pad_token_id; /* -1 when unknown */
    char dtype[8];        /* storage dtype of the source: "bf16" | "fp16" | "fp32" */
} qf_model_config;

/* Limits on the dimensions (docs/reliability.md). Every size the program forms from them (tensor element
 * counts, parameter totals, per-layer activation sizes) then fits an int64 with room to spare, and each is well
 * above the largest Qwen model (Qwen2.5-72B: vocabulary 152064, hidden 8192, FFN 29568, 80 layers, 64 heads). */
#define QF_MAX_VOCAB ((int64_t)1 << 24)      /* 16,777,216 */
#define QF_MAX_HIDDEN (1 << 16)              /* 65,536 */
#define QF_MAX_FFN (1 << 20)                 /* 1,048,576 */
#define QF_MAX_LAYERS 1024
#define QF_MAX_HEADS 1024                    /* attention and key/value heads */
#define QF_MAX_HEAD_DIM 1024
#define QF_MAX_POSITIONS (1 << 24)           /* max_position_embeddings */
#define QF_MAX_PARAMS ((int64_t)1 << 40)     /* 1.1e12 parameters */
#define QF_MAX_BATCH_TOKENS ((int64_t)1 << 31) /* train_micro_batch_size_per_gpu x seq_len */

/* Fills *out with the named preset ("qwen2.5-7b", "qwen3-0.6b", ...); returns 0, or -1 if unknown. */
int qf_preset_lookup(const char *name, qf_model_config *out);
/* NULL-terminated list of preset names. */
const char *const *qf_preset_names(void);
/* Checks consistency (heads divide, dims positive, every dimension within the QF_MAX_* limits, finite rope_theta
 * and rms_norm_eps). Returns 0 or fills msg (size n, naming the key and the limit) and returns -1. Every source
 * of a config (deck, config.json, HDF5 attributes) passes through it before any size is formed. */
int qf_model_config_check(const qf_model_config *c, char *msg, int n);
/* Compares the fields that define the model's math (arch, every dimension, tie/bias/qk_norm, rope_theta,
 * rms_norm_eps): 0 when equal, else -1 with "KEY = A here, B there" in msg for the first difference. */
int qf_model_config_diff(const qf_model_config *a, const qf_model_config *b, char *msg, int n);
/* Checks that a micro-batch of B rows of T tokens stays within QF_MAX_BATCH_TOKENS (so activation sizes cannot
 * overflow). Returns 0 or fills msg and returns -1. */
int qf_model_check_batch(int64_t B, int64_t T, char *msg, int n);
/* Number of parameters (tied head counted once), and of matmul weights as SPEC's MFU formula counts them. */
int64_t qf_model_num_params(const qf_model_config *c);
int64_t qf_model_num_matmul_params(const qf_model_config *c);

#endif
