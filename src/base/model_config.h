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

/* Fills *out with the named preset ("qwen2.5-7b", "qwen3-0.6b", ...); returns 0, or -1 if unknown. */
int qf_preset_lookup(const char *name, qf_model_config *out);
/* NULL-terminated list of preset names. */
const char *const *qf_preset_names(void);
/* Checks consistency (heads divide, dims positive). Returns 0 or fills msg (size n) and returns -1. */
int qf_model_config_check(const qf_model_config *c, char *msg, int n);
/* Number of parameters (tied head counted once), and of matmul weights as SPEC's MFU formula counts them. */
int64_t qf_model_num_params(const qf_model_config *c);
int64_t qf_model_num_matmul_params(const qf_model_config *c);

#endif
