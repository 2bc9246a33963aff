/* hf.h — HF model directories (config.json + safetensors) of the Qwen family, and the canonical parameter names.
 *
 * Canonical names are Qwen2/Qwen3 HF names:
 *   model.embed_tokens.weight [V,C]
 *   model.layers.{i}.input_layernorm.weight [C]
 *   model.layers.{i}.self_attn.q_proj.weight [H*D,C]  .bias [H*D]   (bias only with attention_bias)
 *   model.layers.{i}.self_attn.k_proj.weight [KV*D,C] .bias [KV*D]
 *   model.layers.{i}.self_attn.v_proj.weight [KV*D,C] .bias [KV*D]
 *   model.layers.{i}.self_attn.q_norm.weight [D]  k_norm.weight [D]   (Qwen3 only)
 *   model.layers.{i}.self_attn.o_proj.weight [C,H*D]
 *   model.layers.{i}.post_attention_layernorm.weight [C]
 *   model.layers.{i}.mlp.gate_proj.weight [F,C]  up_proj.weight [F,C]  down_proj.weight [C,F]
 *   model.norm.weight [C]
 *   lm_head.weight [V,C]   (absent when tie_word_embeddings)
 * Qwen v1 checkpoints ("transformer.h.{i}.attn.c_attn" fused q,k,v; mlp.w2 = gate, mlp.w1 = up, mlp.c_proj = down;
 * ln_1, ln_2, ln_f, wte) are served under the same canonical names. */
#ifndef QF_HF_H
#define QF_HF_H
#include "model_config.h"
#include "util.h"
#include "safetensors.h"

typedef struct qf_hf {
    char dir[1024];
    qf_model_config cfg;
    qf_st st;
} qf_hf;

/* Parses dir/config.json (Qwen2ForCausalLM, Qwen3ForCausalLM, QWenLMHeadModel; rope_theta or
 * rope_parameters.rope_theta; torch_dtype or dtype; v1's kv_channels, halved intermediate_size, rotary_emb_base,
 * layer_norm_epsilon) into *c. Errors name the file and key (exit 2). */
int qf_hf_read_config(const char *dir, qf_model_config *c, qf_err *e);
/* Config + safetensors; checks every canonical tensor exists with the right shape (exit 2 naming it). */
int qf_hf_open(const char *dir, qf_hf *hf, qf_err *e);
void qf_hf_close(qf_hf *hf);
/* Reads canonical parameter `name` as fp32 into out (numel elements). */
int qf_hf_read_param(const qf_hf *hf, const char *name, float *out, qf_err *e);
/* Reads elements [off, off+n) of the flattened canonical parameter `name` as fp32 (import moves big tensors in
 * pieces with it). */
int qf_hf_read_param_range(const qf_hf *hf, const char *name, int64_t off, int64_t n, float *out, qf_err *e);
/* 1 if dir looks like an HF model directory (has config.json). */
int qf_hf_is_dir(const char *dir);

/* The canonical parameter list of a config, in the flat layout order the model uses (see src/model/model.h):
 * embed, then per layer [input_layernorm, q.w, q.b, k.w, k.b, v.w, v.b, q_norm, k_norm, o.w,
 * post_attention_layernorm, gate, up, down], then norm, then lm_head (if untied). */
typedef struct qf_param_spec {
    char name[96];
    int ndim;
    int64_t shape[2];
    int64_t numel;
    int layer;   /* -1 outside the decoder layers */
    int decay;   /* 1 for 2-D weights (weight decay applies) */
} qf_param_spec;
/* Returns the count; fills specs (caller frees) */
int qf_param_specs(const qf_model_config *c, qf_param_spec **specs);

/* `qwen-ft import --from HF_DIR --out M.h5 [--dtype bf16|fp16|fp32]`: writes the HDF5 model atomically
 * (temporary name + rename). */
int qf_hf_import(const char *dir, const char *out_h5, const char *dtype_or_null, qf_err *e);

#endif
