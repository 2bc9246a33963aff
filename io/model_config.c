/* model_config.c — presets with the published HF config.json values, consistency check, parameter counts.
 *
 * Presets take hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
 * head_dim, vocab_size, tie_word_embeddings, rope_theta, rms_norm_eps, max_position_embeddings, bos/eos ids from
 * the base models' config.json on the Hugging Face Hub (Qwen/Qwen-7B, Qwen/Qwen1.5-7B, Qwen/Qwen2.5-7B,
 * Qwen/Qwen3-8B, ...). Qwen v1 configs store intermediate_size = 2F and rotary_emb_base / layer_norm_epsilon;
 * the preset holds the real FFN width F. */
#include "model_config.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct qf_preset {
    const char *name;
    qf_model_config c;
} qf_preset;

#define QF_QWEN_EOT 151643 /* <|endoftext|> */
#define QF_QWEN_IM_END 151645 /* <|im_end|> */

/* Qwen v1 (QWenLMHeadModel): MHA, c_attn bias, rotary_emb_base 10000, no bos in config.json. */
#define QWEN1(V, C, F, L, H, MAXPOS)                                                                     \
    {.arch = "qwen2", .family = "qwen", .vocab_size = (V), .hidden_size = (C), .intermediate_size = (F), \
     .num_layers = (L), .num_heads = (H), .num_kv_heads = (H), .head_dim = (C) / (H),                    \
     .tie_word_embeddings = 0, .attention_bias = 1, .qk_norm = 0, .rope_theta = 10000.0,                 \
     .rms_norm_eps = 1e-6, .max_position_embeddings = (MAXPOS), .initializer_range = 0.02,               \
     .bos_token_id = -1, .eos_token_id = QF_QWEN_EOT, .pad_token_id = -1, .dtype = "bf16"}

/* Qwen1.5 / Qwen2 / Qwen2.5 (Qwen2ForCausalLM): q/k/v bias, head_dim = C / H. */
#define QWEN2(V, C, F, L, H, KV, TIE, ROPE, EPS, MAXPOS)                                                  \
    {.arch = "qwen2", .family = "qwen2", .vocab_size = (V), .hidden_size = (C), .intermediate_size = (F), \
     .num_layers = (L), .num_heads = (H), .num_kv_heads = (KV), .head_dim = (C) / (H),                    \
     .tie_word_embeddings = (TIE), .attention_bias = 1, .qk_norm = 0, .rope_theta = (ROPE),               \
     .rms_norm_eps = (EPS), .max_position_embeddings = (MAXPOS), .initializer_range = 0.02,               \
     .bos_token_id = QF_QWEN_EOT, .eos_token_id = QF_QWEN_EOT, .pad_token_id = -1, .dtype = "bf16"}

/* Qwen3 dense (Qwen3ForCausalLM): no bias, q/k RMSNorm, head_dim 128. */
#define QWEN3(C, F, L, H, KV, TIE)                                                                          \
    {.arch = "qwen3", .family = "qwen3", .vocab_size = 151936, .hidden_size = (C), .intermediate_size = (F), \
     .num_layers = (L), .num_heads = (H), .num_kv_heads = (KV), .head_dim = 128,                            \
     .tie_word_embeddings = (TIE), .attention_bias = 0, .qk_norm = 1, .rope_theta = 1000000.0,              \
     .rms_norm_eps = 1e-6, .max_position_embeddings = 40960, .initializer_range = 0.02,                     \
     .bos_token_id = QF_QWEN_EOT, .eos_token_id = QF_QWEN_IM_END, .pad_token_id = -1, .dtype = "bf16"}

static const qf_preset k_presets[] = {
    {"qwen-7b", QWEN1(151936, 4096, 11008, 32, 32, 8192)},
    {"qwen-14b", QWEN1(152064, 5120, 13696, 40, 40, 8192)},
    {"qwen1.5-7b", QWEN2(151936, 4096, 11008, 32, 32, 32, 0, 1e6, 1e-6, 32768)},
    {"qwen1.5-14b", QWEN2(152064, 5120, 13696, 40, 40, 40, 0, 1e6, 1e-6, 32768)},
    {"qwen2.5-0.5b", QWEN2(151936, 896, 4864, 24, 14, 2, 1, 1e6, 1e-6, 32768)},
    {"qwen2.5-1.5b", QWEN2(151936, 1536, 8960, 28, 12, 2, 1, 1e6, 1e-6, 131072)},
    {"qwen2.5-3b", QWEN2(151936, 2048, 11008, 36, 16, 2, 1, 1e6, 1e-6, 32768)},
    {"qwen2.5-7b", QWEN2(152064, 3584, 18944, 28, 28, 4, 0, 1e6, 1e-6, 131072)},
    {"qwen2.5-14b", QWEN2(152064, 5120, 13824, 48, 40, 8, 0, 1e6, 1e-5, 131072)},
    {"qwen2.5-32b", QWEN2(152064, 5120, 27648, 64, 40, 8, 0, 1e6, 1e-5, 131072)},
    {"qwen2.5-72b", QWEN2(152064, 8192, 29568, 80, 64, 8, 0, 1e6, 1e-5, 131072)},
    {"qwen3-0.6b", QWEN3(1024, 3072, 28, 16, 8, 1)},
    {"qwen3-1.7b", QWEN3(2048, 6144, 28, 16, 8, 1)},
    {"qwen3-4b", QWEN3(2560, 9728, 36, 32, 8, 1)},
    {"qwen3-8b", QWEN3(4096, 12288, 36, 32, 8, 0)},
    {"qwen3-14b", QWEN3(5120, 17408, 40, 40, 8, 0)},
    {"qwen3-32b", QWEN3(5120, 25600, 64, 64, 8, 0)},
};

static const char *const k_preset_names[] = {
    "qwen-7b",     "qwen-14b",    "qwen1.5-7b",  "qwen1.5-14b", "qwen2.5-0.5b", "qwen2.5-1.5b",
    "qwen2.5-3b",  "qwen2.5-7b",  "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b",  "qwen3-0.6b",
    "qwen3-1.7b",  "qwen3-4b",    "qwen3-8b",    "qwen3-14b",   "qwen3-32b",    NULL,
};

_Static_assert(sizeof k_preset_names / sizeof k_preset_names[0] == sizeof k_presets / sizeof k_presets[0] + 1,
               "every preset has a name in k_preset_names");

int qf_preset_lookup(const char *name, qf_model_config *out) {
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
        if (strcmp(k_presets[i].name, name) == 0) {
            *out = k_presets[i].c;
            return 0;
        }
    return -1;
}

const char *const *qf_preset_names(void) { return k_preset_names; }

static int mc_fail(char *msg, int n, const char *what) {
    if (msg && n > 0) snprintf(msg, (size_t)n, "%s", what);
    return -1;
}

/* "key = v exceeds the limit" when v > max */
static int mc_limit(const char *key, int64_t v, int64_t max, char *msg, int n) {
    if (v <= max) return 0;
    if (msg && n > 0)
        snprintf(msg, (size_t)n, "%s = %lld exceeds the limit %lld (docs/reliability.md)", key, (long long)v,
                 (long long)max);
    return -1;
}

static int mc_check_dims(const qf_model_config *c, char *msg, int n) {
    char buf[256];
    if (c->vocab_size <= 0) return mc_fail(msg, n, "vocab_size must be positive");
    if (c->hidden_size <= 0) return mc_fail(msg, n, "hidden_size must be positive");
    if (c->intermediate_size <= 0) return mc_fail(msg, n, "intermediate_size must be positive");
    if (c->num_layers <= 0) return mc_fail(msg, n, "num_hidden_layers must be positive");
    if (c->num_heads <= 0 || c->num_kv_heads <= 0) return mc_fail(msg, n, "attention head counts must be positive");
    if (mc_limit("vocab_size", c->vocab_size, QF_MAX_VOCAB, msg, n) ||
        mc_limit("hidden_size", c->hidden_size, QF_MAX_HIDDEN, msg, n) ||
        mc_limit("intermediate_size", c->intermediate_size, QF_MAX_FFN, msg, n) ||
        mc_limit("num_hidden_layers", c->num_layers, QF_MAX_LAYERS, msg, n) ||
        mc_limit("num_attention_heads", c->num_heads, QF_MAX_HEADS, msg, n) ||
        mc_limit("num_key_value_heads", c->num_kv_heads, QF_MAX_HEADS, msg, n) ||
        mc_limit("head_dim", c->head_dim, QF_MAX_HEAD_DIM, msg, n) ||
        mc_limit("max_position_embeddings", c->max_position_embeddings, QF_MAX_POSITIONS, msg, n))
        return -1;
    if (c->num_heads % c->num_kv_heads != 0) {
        snprintf(buf, sizeof buf, "num_key_value_heads %d does not divide num_attention_heads %d", c->num_kv_heads,
                 c->num_heads);
        return mc_fail(msg, n, buf);
    }
    if (c->head_dim <= 0 || c->head_dim % 2 != 0) {
        snprintf(buf, sizeof buf, "head_dim %d must be positive and even (rotary embedding)", c->head_dim);
        return mc_fail(msg, n, buf);
    }
    if (c->max_position_embeddings <= 0) return mc_fail(msg, n, "max_position_embeddings must be positive");
    /* within the limits above this cannot overflow: at most about 2^49 */
    if (mc_limit("the parameter count", qf_model_num_params(c), QF_MAX_PARAMS, msg, n)) return -1;
    return 0;
}

static int mc_is01(int v) { return v == 0 || v == 1; }

static int mc_check_kind(const qf_model_config *c, char *msg, int n) {
    int q2 = strcmp(c->arch, "qwen2") == 0, q3 = strcmp(c->arch, "qwen3") == 0;
    if (!q2 && !q3) return mc_fail(msg, n, "arch must be \"qwen2\" or \"qwen3\"");
    if (!mc_is01(c->tie_word_embeddings) || !mc_is01(c->attention_bias) || !mc_is01(c->qk_norm))
        return mc_fail(msg, n, "tie_word_embeddings, attention_bias and qk_norm must be 0 or 1");
    if (q2 && c->qk_norm) return mc_fail(msg, n, "qk_norm needs arch \"qwen3\"");
    if (q3 && c->attention_bias) return mc_fail(msg, n, "attention_bias is not supported with arch \"qwen3\"");
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta)) return mc_fail(msg, n, "rope_theta must be positive and finite");
    if (!(c->rms_norm_eps > 0) || !isfinite(c->rms_norm_eps))
        return mc_fail(msg, n, "rms_norm_eps must be positive and finite");
    if (!(c->initializer_range >= 0) || !isfinite(c->initializer_range))
        return mc_fail(msg, n, "initializer_range must be finite and not negative");
    if (strcmp(c->dtype, "bf16") && strcmp(c->dtype, "fp16") && strcmp(c->dtype, "fp32"))
        return mc_fail(msg, n, "dtype must be \"bf16\", \"fp16\" or \"fp32\"");
    return 0;
}

int qf_model_config_check(const qf_model_config *c, char *msg, int n) {
    if (mc_check_dims(c, msg, n) != 0) return -1;
    return mc_check_kind(c, msg, n);
}

int qf_model_config_diff(const qf_model_config *a, const qf_model_config *b, char *msg, int n) {
    if (strcmp(a->arch, b->arch) != 0) {
        snprintf(msg, (size_t)n, "arch = \"%s\" here, \"%s\" there", a->arch, b->arch);
        return -1;
    }
    const char *ik[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "head_dim", "tie_word_embeddings", "attention_bias", "qk_norm"};
    int64_t iv[2][10];
    const qf_model_config *c[2] = {a, b};
    for (int j = 0; j < 2; j++) {
        int64_t v[10] = {c[j]->vocab_size, c[j]->hidden_size, c[j]->intermediate_size, c[j]->num_layers,
                         c[j]->num_heads, c[j]->num_kv_heads, c[j]->head_dim, c[j]->tie_word_embeddings,
                         c[j]->attention_bias, c[j]->qk_norm};
        memcpy(iv[j], v, sizeof v);
    }
    for (int i = 0; i < 10; i++)
        if (iv[0][i] != iv[1][i]) {
            snprintf(msg, (size_t)n, "%s = %lld here, %lld there", ik[i], (long long)iv[0][i], (long long)iv[1][i]);
            return -1;
        }
    if (a->rope_theta != b->rope_theta) {
        snprintf(msg, (size_t)n, "rope_theta = %.17g here, %.17g there", a->rope_theta, b->rope_theta);
        return -1;
    }
    if (a->rms_norm_eps != b->rms_norm_eps) {
        snprintf(msg, (size_t)n, "rms_norm_eps = %.17g here, %.17g there", a->rms_norm_eps, b->rms_norm_eps);
        return -1;
    }
    return 0;
}

int qf_model_check_batch(int64_t B, int64_t T, char *msg, int n) {
    if (B > 0 && T > 0 && B <= QF_MAX_BATCH_TOKENS / T) return 0;
    if (msg && n > 0)
        snprintf(msg, (size_t)n, "train_micro_batch_size_per_gpu x data.seq_len = %lld x %lld exceeds the limit of "
                 "%lld tokens per micro-batch (docs/reliability.md)", (long long)B, (long long)T,
                 (long long)QF_MAX_BATCH_TOKENS);
    return -1;
}

/* Matmul weights of one decoder layer: q, k, v, o projections and the three SwiGLU projections. */
static int64_t mc_layer_matmul(const qf_model_config *c) {
    int64_t C = c->hidden_size, F = c->intermediate_size, D = c->head_dim;
    int64_t q = C * c->num_heads * D, kv = C * c->num_kv_heads * D;
    return 2 * q + 2 * kv + 3 * C * F;
}

/* Non-matmul parameters of one layer: q/k/v biases, q/k norms, the two RMSNorm weights. */
static int64_t mc_layer_other(const qf_model_config *c) {
    int64_t D = c->head_dim, n = 2 * (int64_t)c->hidden_size;
    if (c->attention_bias) n += (int64_t)(c->num_heads + 2 * c->num_kv_heads) * D;
    if (c->qk_norm) n += 2 * D;
    return n;
}

int64_t qf_model_num_params(const qf_model_config *c) {
    int64_t emb = c->vocab_size * c->hidden_size;
    int64_t layers = c->num_layers * (mc_layer_matmul(c) + mc_layer_other(c));
    return emb + layers + c->hidden_size + (c->tie_word_embeddings ? 0 : emb);
}

/* SPEC MFU: every matmul weight including lm_head (once, tied or not), not the input-embedding lookup; biases and
 * norm weights are not matmul weights. */
int64_t qf_model_num_matmul_params(const qf_model_config *c) {
    return c->num_layers * mc_layer_matmul(c) + c->vocab_size * c->hidden_size;
}
