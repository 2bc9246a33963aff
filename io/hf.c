/* hf.c — HF Qwen model directories: config.json, canonical parameter names, tensor mapping, import to HDF5.
 * See hf.h.
 *
 * Config (transformers' Qwen2Config / Qwen3Config defaults where a key is absent):
 *   Qwen2ForCausalLM / model_type "qwen2": q/k/v biases always, head_dim = hidden/heads unless given.
 *   Qwen3ForCausalLM / model_type "qwen3": q_norm/k_norm, attention_bias (default false), head_dim (default 128,
 *     as Qwen3Config).
 *   QWenLMHeadModel / model_type "qwen" (Qwen v1): kv_channels = head_dim, intermediate_size is twice the FFN
 *     width, rotary_emb_base, layer_norm_epsilon, max_position_embeddings (else seq_length); q/k/v biases; separate
 *     lm_head.
 * Anything that would change the math and is not implemented (RoPE scaling, sliding-window layers, another
 * activation, extra biases) is rejected naming the key rather than silently ignored.
 *
 * Qwen v1 tensors under canonical names:
 *   transformer.wte.weight [V,C]                -> model.embed_tokens.weight
 *   transformer.h.{i}.ln_1.weight [C]           -> model.layers.{i}.input_layernorm.weight
 *   transformer.h.{i}.attn.c_attn.weight [3HD,C] rows [0,HD) q, [HD,2HD) k, [2HD,3HD) v  (.bias [3HD] likewise)
 *   transformer.h.{i}.attn.c_proj.weight [C,HD] -> o_proj
 *   transformer.h.{i}.ln_2.weight [C]           -> post_attention_layernorm
 *   transformer.h.{i}.mlp.w2 / w1 / c_proj      -> gate_proj [F,C] / up_proj [F,C] / down_proj [C,F]
 *   transformer.ln_f.weight [C]                 -> model.norm.weight
 *   lm_head.weight [V,C]                        -> lm_head.weight */
#include "hf.h"
#include "tokenizer.h"
#include "hf_files.h"
#include <limits.h>

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5io.h"
#include "out_file.h"

/* ---- config.json ------------------------------------------------------------------------------------------- */

typedef struct cfg_ctx {
    const char *path; /* dir/config.json */
    json_t *root;
    qf_err *e;
} cfg_ctx;

/* Integer key: *out = value; absent or null -> def (or an error when required). Integral reals accepted. */
static int cfg_int(cfg_ctx *c, const char *key, int required, int64_t def, int64_t lo, int64_t hi, int64_t *out) {
    json_t *j = json_object_get(c->root, key);
    if (!j || json_is_null(j)) {
        if (required) return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"%s\" is missing", c->path, key);
        *out = def;
        return 0;
    }
    int64_t v = 0;
    if (json_is_integer(j)) v = (int64_t)json_integer_value(j);
    else if (json_is_real(j) && json_real_value(j) == floor(json_real_value(j)) && fabs(json_real_value(j)) < 9e15)
        v = (int64_t)json_real_value(j);
    else return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"%s\" must be an integer", c->path, key);
    if (v < lo || v > hi)
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"%s\" = %lld is out of range [%lld, %lld]", c->path, key,
                          (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

static int cfg_dim(cfg_ctx *c, const char *key, int required, int64_t def, int *out) {
    int64_t v = 0;
    if (cfg_int(c, key, required, def, 1, INT32_MAX, &v)) return c->e->code;
    *out = (int)v;
    return 0;
}

/* Positive number key (from object o, named key in messages as name). */
static int cfg_num_in(cfg_ctx *c, json_t *o, const char *key, const char *name, double def, double *out) {
    json_t *j = json_object_get(o, key);
    if (!j || json_is_null(j)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(j)) return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"%s\" must be a number", c->path, name);
    double v = json_number_value(j);
    if (!(v > 0) || !isfinite(v))
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"%s\" = %g must be positive", c->path, name, v);
    *out = v;
    return 0;
}

static int cfg_bool(cfg_ctx *c, const char *key, int def, int *out) {
    json_t *j = json_object_get(c->root, key);
    if (!j || json_is_null(j)) *out = def;
    else if (json_is_boolean(j)) *out = json_is_true(j);
    else if (json_is_integer(j) && (json_integer_value(j) == 0 || json_integer_value(j) == 1))
        *out = (int)json_integer_value(j);
    else return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"%s\" must be true or false", c->path, key);
    return 0;
}

/* Token id: integer, null/absent -> -1, a list -> its first element. */
static int cfg_token(cfg_ctx *c, const char *key, int *out) {
    json_t *j = json_object_get(c->root, key);
    if (json_is_array(j)) j = json_array_size(j) ? json_array_get(j, 0) : NULL;
    if (!j || json_is_null(j)) {
        *out = -1;
        return 0;
    }
    if (!json_is_integer(j) || json_integer_value(j) < 0 || json_integer_value(j) > INT32_MAX)
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"%s\" must be a token id (or null)", c->path, key);
    *out = (int)json_integer_value(j);
    return 0;
}

/* "dtype" (transformers 5) or "torch_dtype"; v1's bf16/fp16/fp32 flags as a fallback; default fp32. */
static int cfg_dtype(cfg_ctx *c, char *out) {
    const char *key = json_object_get(c->root, "dtype") ? "dtype" : "torch_dtype";
    json_t *j = json_object_get(c->root, key);
    if (!j || json_is_null(j)) {
        const char *flags[3][2] = {{"bf16", "bf16"}, {"fp16", "fp16"}, {"fp32", "fp32"}};
        snprintf(out, 8, "fp32");
        for (int i = 0; i < 3; i++)
            if (json_is_true(json_object_get(c->root, flags[i][0]))) {
                snprintf(out, 8, "%s", flags[i][1]);
                break;
            }
        return 0;
    }
    const char *s = json_is_string(j) ? json_string_value(j) : "";
    if (strncmp(s, "torch.", 6) == 0) s += 6;
    if (strcmp(s, "bfloat16") == 0) snprintf(out, 8, "bf16");
    else if (strcmp(s, "float16") == 0) snprintf(out, 8, "fp16");
    else if (strcmp(s, "float32") == 0) snprintf(out, 8, "fp32");
    else
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"%s\" = %s%s%s: expected \"bfloat16\", \"float16\" or "
                          "\"float32\"", c->path, key, json_is_string(j) ? "\"" : "", json_is_string(j) ? s : "(not a "
                          "string)", json_is_string(j) ? "\"" : "");
    return 0;
}

/* A RoPE dict (rope_parameters or rope_scaling) must be plain RoPE: rope_type/type absent or "default". */
static int cfg_rope_plain(cfg_ctx *c, json_t *o, const char *key) {
    if (!o || json_is_null(o)) return 0;
    if (!json_is_object(o)) return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"%s\" must be an object", c->path, key);
    json_t *t = json_object_get(o, "rope_type");
    const char *tk = "rope_type";
    if (!t) {
        t = json_object_get(o, "type");
        tk = "type";
    }
    if (t && !json_is_null(t) && !(json_is_string(t) && strcmp(json_string_value(t), "default") == 0))
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"%s.%s\" = %s is not supported (only plain RoPE, "
                          "rope_type \"default\")", c->path, key, tk, json_is_string(t) ? json_string_value(t) : "?");
    return 0;
}

/* Qwen2 / Qwen3 config. */
static int cfg_qwen23(cfg_ctx *c, int qwen3, qf_model_config *m) {
    int64_t v = 0;
    if (cfg_int(c, "vocab_size", 1, 0, 1, INT32_MAX, &v)) return c->e->code;
    m->vocab_size = v;
    if (cfg_dim(c, "hidden_size", 1, 0, &m->hidden_size) || cfg_dim(c, "intermediate_size", 1, 0, &m->intermediate_size) ||
        cfg_dim(c, "num_hidden_layers", 1, 0, &m->num_layers) ||
        cfg_dim(c, "num_attention_heads", 1, 0, &m->num_heads) ||
        cfg_dim(c, "num_key_value_heads", 0, m->num_heads, &m->num_kv_heads))
        return c->e->code;
    int def_hd = qwen3 ? 128 : (m->hidden_size % m->num_heads == 0 ? m->hidden_size / m->num_heads : 0);
    if (!qwen3 && def_hd == 0 && !json_object_get(c->root, "head_dim"))
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"hidden_size\" = %d is not a multiple of "
                          "num_attention_heads = %d (and no head_dim given)", c->path, m->hidden_size, m->num_heads);
    if (cfg_dim(c, "head_dim", 0, def_hd, &m->head_dim)) return c->e->code;
    if (cfg_bool(c, "tie_word_embeddings", 0, &m->tie_word_embeddings)) return c->e->code;
    if (qwen3) {
        if (cfg_bool(c, "attention_bias", 0, &m->attention_bias)) return c->e->code;
        m->qk_norm = 1;
    } else {
        m->attention_bias = 1; /* Qwen2Attention: q/k/v always biased */
        m->qk_norm = 0;
    }
    /* RoPE: rope_parameters.rope_theta (transformers 5) or rope_theta; no scaling */
    json_t *rp = json_object_get(c->root, "rope_parameters");
    if (cfg_rope_plain(c, rp, "rope_parameters") || cfg_rope_plain(c, json_object_get(c->root, "rope_scaling"),
                                                                   "rope_scaling"))
        return c->e->code;
    double theta = 0;
    if (json_is_object(rp) && json_object_get(rp, "rope_theta")) {
        if (cfg_num_in(c, rp, "rope_theta", "rope_parameters.rope_theta", 10000.0, &theta)) return c->e->code;
    } else if (cfg_num_in(c, c->root, "rope_theta", "rope_theta", 10000.0, &theta)) {
        return c->e->code;
    }
    m->rope_theta = theta;
    json_t *prf = json_is_object(rp) ? json_object_get(rp, "partial_rotary_factor") : NULL;
    if (!prf) prf = json_object_get(c->root, "partial_rotary_factor");
    if (prf && !json_is_null(prf) && !(json_is_number(prf) && json_number_value(prf) == 1.0))
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"partial_rotary_factor\" is not supported (must be 1)",
                          c->path);
    if (cfg_num_in(c, c->root, "rms_norm_eps", "rms_norm_eps", 1e-6, &m->rms_norm_eps)) return c->e->code;
    if (cfg_dim(c, "max_position_embeddings", 0, 32768, &m->max_position_embeddings)) return c->e->code;
    /* sliding-window layers change the attention mask: not implemented */
    int sw = 0;
    if (cfg_bool(c, "use_sliding_window", 0, &sw)) return c->e->code;
    if (sw) {
        int64_t mwl = 0;
        if (cfg_int(c, "max_window_layers", 0, 28, 0, INT32_MAX, &mwl)) return c->e->code;
        if (mwl < m->num_layers)
            return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"use_sliding_window\" = true (sliding-window attention "
                              "from layer %lld) is not supported", c->path, (long long)mwl);
    }
    json_t *lt = json_object_get(c->root, "layer_types");
    if (json_is_array(lt)) {
        size_t i;
        json_t *x;
        json_array_foreach(lt, i, x) {
            if (!json_is_string(x) || strcmp(json_string_value(x), "full_attention") != 0)
                return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"layer_types[%zu]\" = %s is not supported (only "
                                  "\"full_attention\")", c->path, i, json_is_string(x) ? json_string_value(x) : "?");
        }
    }
    return 0;
}

/* Qwen v1 (QWenLMHeadModel) config. */
static int cfg_qwen1(cfg_ctx *c, qf_model_config *m) {
    int64_t v = 0;
    if (cfg_int(c, "vocab_size", 1, 0, 1, INT32_MAX, &v)) return c->e->code;
    m->vocab_size = v;
    int f2 = 0;
    if (cfg_dim(c, "hidden_size", 1, 0, &m->hidden_size) || cfg_dim(c, "intermediate_size", 1, 0, &f2) ||
        cfg_dim(c, "num_hidden_layers", 1, 0, &m->num_layers) ||
        cfg_dim(c, "num_attention_heads", 1, 0, &m->num_heads))
        return c->e->code;
    if (f2 % 2 != 0)
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"intermediate_size\" = %d must be even (Qwen v1 stores twice "
                          "the FFN width)", c->path, f2);
    m->intermediate_size = f2 / 2;
    m->num_kv_heads = m->num_heads;
    if (m->hidden_size % m->num_heads != 0 && !json_object_get(c->root, "kv_channels"))
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"kv_channels\" is missing", c->path);
    if (cfg_dim(c, "kv_channels", 0, m->hidden_size / m->num_heads, &m->head_dim)) return c->e->code;
    if ((int64_t)m->head_dim * m->num_heads != m->hidden_size)
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"kv_channels\" = %d: Qwen v1 needs kv_channels x "
                          "num_attention_heads = hidden_size (%d)", c->path, m->head_dim, m->hidden_size);
    m->attention_bias = 1;
    m->qk_norm = 0;
    m->tie_word_embeddings = 0;
    int tie = 0;
    if (cfg_bool(c, "tie_word_embeddings", 0, &tie)) return c->e->code;
    if (tie) return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"tie_word_embeddings\" = true is not supported for Qwen "
                               "v1 (QWenLMHeadModel has its own lm_head)", c->path);
    int no_bias = 1;
    if (cfg_bool(c, "no_bias", 1, &no_bias)) return c->e->code;
    if (!no_bias)
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"no_bias\" = false (biases on c_proj and the MLP) is not "
                          "supported", c->path);
    json_t *pct = json_object_get(c->root, "rotary_pct");
    if (pct && !json_is_null(pct) && !(json_is_number(pct) && json_number_value(pct) == 1.0))
        return qf_err_set(c->e, QF_EXIT_INPUT, "%s: key \"rotary_pct\" must be 1.0 (partial RoPE is not supported)",
                          c->path);
    if (cfg_num_in(c, c->root, "rotary_emb_base", "rotary_emb_base", 10000.0, &m->rope_theta) ||
        cfg_num_in(c, c->root, "layer_norm_epsilon", "layer_norm_epsilon", 1e-6, &m->rms_norm_eps))
        return c->e->code;
    /* QWenConfig has both: max_position_embeddings (what a Qwen2 config.json names the same; Qwen-7B 32768, Qwen-14B
     * 8192) and seq_length (the training context, for its dynamic-NTK and logn scaling); the former is the field, the
     * latter stands in for configs that lack it (QWenConfig's default 8192 without either) */
    const char *mp = json_object_get(c->root, "max_position_embeddings") ? "max_position_embeddings" : "seq_length";
    if (cfg_dim(c, mp, 0, 8192, &m->max_position_embeddings)) return c->e->code;
    return 0;
}

int qf_hf_read_config(const char *dir, qf_model_config *out, qf_err *e) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    if (access(path, F_OK) == 0 && qf_in_regular("HF config", path, e)) return e->code; /* a FIFO would block */
    json_t *root = json_load_file(path, JSON_DECODE_ANY, &je);
    if (!root) {
        if (access(path, F_OK) != 0) return qf_err_set(e, QF_EXIT_INPUT, "%s: not found (not an HF model directory)", path);
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%d:%d: invalid JSON: %s", path, je.line, je.column, je.text);
    }
    cfg_ctx c = {path, root, e};
    qf_model_config m;
    memset(&m, 0, sizeof m);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: not a JSON object", path);
        goto done;
    }
    /* which model: architectures first, then model_type */
    int kind = -1; /* 1 = qwen v1, 2 = qwen2, 3 = qwen3 */
    json_t *arch = json_object_get(root, "architectures");
    if (json_is_array(arch)) {
        size_t i;
        json_t *x;
        json_array_foreach(arch, i, x) {
            const char *s = json_is_string(x) ? json_string_value(x) : "";
            if (strcmp(s, "Qwen2ForCausalLM") == 0) kind = 2;
            else if (strcmp(s, "Qwen3ForCausalLM") == 0) kind = 3;
            else if (strcmp(s, "QWenLMHeadModel") == 0) kind = 1;
            if (kind > 0) break;
        }
    }
    json_t *mt = json_object_get(root, "model_type");
    if (kind < 0 && json_is_string(mt)) {
        const char *s = json_string_value(mt);
        if (strcmp(s, "qwen2") == 0) kind = 2;
        else if (strcmp(s, "qwen3") == 0) kind = 3;
        else if (strcmp(s, "qwen") == 0) kind = 1;
    }
    if (kind < 0) {
        const char *a0 = json_is_array(arch) && json_is_string(json_array_get(arch, 0))
                             ? json_string_value(json_array_get(arch, 0))
                             : json_is_string(mt) ? json_string_value(mt) : "(none)";
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: key \"architectures\": %s is not supported (Qwen2ForCausalLM, "
                        "Qwen3ForCausalLM or QWenLMHeadModel; model_type qwen2, qwen3 or qwen)", path, a0);
        goto done;
    }
    json_t *act = json_object_get(root, "hidden_act");
    if (act && !json_is_null(act) && !(json_is_string(act) && strcmp(json_string_value(act), "silu") == 0)) {
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: key \"hidden_act\" = %s is not supported (silu)", path,
                        json_is_string(act) ? json_string_value(act) : "?");
        goto done;
    }
    snprintf(m.arch, sizeof m.arch, "%s", kind == 3 ? "qwen3" : "qwen2");
    snprintf(m.family, sizeof m.family, "%s", kind == 1 ? "qwen" : kind == 2 ? "qwen2" : "qwen3");
    if ((rc = kind == 1 ? cfg_qwen1(&c, &m) : cfg_qwen23(&c, kind == 3, &m))) goto done;
    if (m.num_heads % m.num_kv_heads != 0) {
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: key \"num_key_value_heads\" = %d does not divide num_attention_heads = %d",
                        path, m.num_kv_heads, m.num_heads);
        goto done;
    }
    json_t *ir = json_object_get(root, "initializer_range");
    m.initializer_range = 0.02;
    if (ir && !json_is_null(ir)) {
        if (!json_is_number(ir) || json_number_value(ir) < 0) {
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: key \"initializer_range\" must be a non-negative number", path);
            goto done;
        }
        m.initializer_range = json_number_value(ir);
    }
    if ((rc = cfg_token(&c, "bos_token_id", &m.bos_token_id)) || (rc = cfg_token(&c, "eos_token_id", &m.eos_token_id)) ||
        (rc = cfg_token(&c, "pad_token_id", &m.pad_token_id)) || (rc = cfg_dtype(&c, m.dtype)))
        goto done;
    char why[256];
    if (qf_model_config_check(&m, why, sizeof why) != 0) { /* the limits, before any size is formed from it */
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: %s", path, why);
        goto done;
    }
    *out = m;
done:
    json_decref(root);
    return rc;
}

int qf_hf_is_dir(const char *dir) {
    char path[1200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/config.json", dir);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* ---- canonical parameters ------------------------------------------------------------------------------------- */

enum {
    P_EMBED, P_LN1, P_QW, P_QB, P_KW, P_KB, P_VW, P_VB, P_QN, P_KN, P_OW, P_LN2, P_GATE, P_UP, P_DOWN, P_NORM, P_HEAD
};

static const char *const layer_suffix[] = {
    [P_LN1] = "input_layernorm.weight",  [P_QW] = "self_attn.q_proj.weight", [P_QB] = "self_attn.q_proj.bias",
    [P_KW] = "self_attn.k_proj.weight",  [P_KB] = "self_attn.k_proj.bias",   [P_VW] = "self_attn.v_proj.weight",
    [P_VB] = "self_attn.v_proj.bias",    [P_QN] = "self_attn.q_norm.weight", [P_KN] = "self_attn.k_norm.weight",
    [P_OW] = "self_attn.o_proj.weight",  [P_LN2] = "post_attention_layernorm.weight",
    [P_GATE] = "mlp.gate_proj.weight",   [P_UP] = "mlp.up_proj.weight",      [P_DOWN] = "mlp.down_proj.weight",
};

static int kind_present(const qf_model_config *c, int k) {
    switch (k) {
    case P_QB: case P_KB: case P_VB: return c->attention_bias != 0;
    case P_QN: case P_KN: return c->qk_norm != 0;
    case P_HEAD: return !c->tie_word_embeddings;
    default: return 1;
    }
}

/* Fills name/shape/numel/layer/decay of kind k in layer l. */
static void kind_spec(const qf_model_config *c, int k, int l, qf_param_spec *s) {
    int64_t C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size, D = c->head_dim;
    int64_t HD = (int64_t)c->num_heads * D, KD = (int64_t)c->num_kv_heads * D;
    memset(s, 0, sizeof *s);
    s->layer = -1;
    if (k == P_EMBED) snprintf(s->name, sizeof s->name, "model.embed_tokens.weight");
    else if (k == P_NORM) snprintf(s->name, sizeof s->name, "model.norm.weight");
    else if (k == P_HEAD) snprintf(s->name, sizeof s->name, "lm_head.weight");
    else {
        snprintf(s->name, sizeof s->name, "model.layers.%d.%s", l, layer_suffix[k]);
        s->layer = l;
    }
    int64_t r = 0, cc = 0; /* [r, cc] for 2-D, [r] for 1-D (cc = 0) */
    switch (k) {
    case P_EMBED: case P_HEAD: r = V, cc = C; break;
    case P_LN1: case P_LN2: case P_NORM: r = C; break;
    case P_QW: r = HD, cc = C; break;
    case P_QB: r = HD; break;
    case P_KW: case P_VW: r = KD, cc = C; break;
    case P_KB: case P_VB: r = KD; break;
    case P_QN: case P_KN: r = D; break;
    case P_OW: r = C, cc = HD; break;
    case P_GATE: case P_UP: r = F, cc = C; break;
    case P_DOWN: r = C, cc = F; break;
    }
    s->shape[0] = r;
    s->ndim = cc ? 2 : 1;
    if (cc) s->shape[1] = cc;
    s->numel = cc ? r * cc : r;
    s->decay = s->ndim == 2;
}

int qf_param_specs(const qf_model_config *c, qf_param_spec **specs) {
    char why[256];
    if (qf_model_config_check(c, why, sizeof why) != 0) QF_FATAL("qf_param_specs of an unchecked config: %s", why);
    int cap = 3 + c->num_layers * (P_DOWN - P_LN1 + 1), n = 0;
    qf_param_spec *s = qf_calloc((size_t)cap, sizeof *s);
    kind_spec(c, P_EMBED, -1, &s[n++]);
    for (int l = 0; l < c->num_layers; l++)
        for (int k = P_LN1; k <= P_DOWN; k++)
            if (kind_present(c, k)) kind_spec(c, k, l, &s[n++]);
    kind_spec(c, P_NORM, -1, &s[n++]);
    if (kind_present(c, P_HEAD)) kind_spec(c, P_HEAD, -1, &s[n++]);
    *specs = s;
    return n;
}

/* Parses a canonical name into (kind, layer); -1 if it is none of this config's parameters. */
static int parse_name(const qf_model_config *c, const char *name, int *kind, int *layer) {
    *layer = -1;
    if (strcmp(name, "model.embed_tokens.weight") == 0) *kind = P_EMBED;
    else if (strcmp(name, "model.norm.weight") == 0) *kind = P_NORM;
    else if (strcmp(name, "lm_head.weight") == 0) *kind = P_HEAD;
    else {
        const char *pre = "model.layers.";
        size_t pl = strlen(pre);
        if (strncmp(name, pre, pl) != 0) return -1;
        char *end;
        long l = strtol(name + pl, &end, 10);
        if (end == name + pl || *end != '.' || l < 0 || l >= c->num_layers) return -1;
        *kind = -1;
        for (int k = P_LN1; k <= P_DOWN; k++)
            if (strcmp(end + 1, layer_suffix[k]) == 0) *kind = k;
        if (*kind < 0) return -1;
        *layer = (int)l;
    }
    return kind_present(c, *kind) ? 0 : -1;
}

/* ---- tensors --------------------------------------------------------------------------------------------------- */

/* Where a canonical parameter lives in the checkpoint: tensor src (of shape sshape) from flat element off. */
typedef struct hf_src {
    char src[160];
    int ndim;
    int64_t sshape[2];
    int64_t off;
    const qf_st_tensor *t;
} hf_src;

static int hf_resolve(const qf_hf *hf, int k, int l, hf_src *s, qf_err *e) {
    const qf_model_config *c = &hf->cfg;
    qf_param_spec sp;
    kind_spec(c, k, l, &sp);
    memset(s, 0, sizeof *s);
    s->ndim = sp.ndim;
    s->sshape[0] = sp.shape[0];
    s->sshape[1] = sp.shape[1];
    if (strcmp(c->family, "qwen") != 0) {
        snprintf(s->src, sizeof s->src, "%s", sp.name);
    } else {
        int64_t C = c->hidden_size, HD = (int64_t)c->num_heads * c->head_dim;
        const char *suf = NULL;
        switch (k) {
        case P_EMBED: snprintf(s->src, sizeof s->src, "transformer.wte.weight"); break;
        case P_NORM: snprintf(s->src, sizeof s->src, "transformer.ln_f.weight"); break;
        case P_HEAD: snprintf(s->src, sizeof s->src, "lm_head.weight"); break;
        case P_LN1: suf = "ln_1.weight"; break;
        case P_LN2: suf = "ln_2.weight"; break;
        case P_QW: case P_KW: case P_VW: /* c_attn.weight [3HD, C]: q, k, v row blocks */
            suf = "attn.c_attn.weight";
            s->sshape[0] = 3 * HD;
            s->sshape[1] = C;
            s->off = (k == P_QW ? 0 : k == P_KW ? 1 : 2) * HD * C;
            break;
        case P_QB: case P_KB: case P_VB: /* c_attn.bias [3HD] */
            suf = "attn.c_attn.bias";
            s->sshape[0] = 3 * HD;
            s->off = (k == P_QB ? 0 : k == P_KB ? 1 : 2) * HD;
            break;
        case P_OW: suf = "attn.c_proj.weight"; break;
        case P_GATE: suf = "mlp.w2.weight"; break;
        case P_UP: suf = "mlp.w1.weight"; break;
        case P_DOWN: suf = "mlp.c_proj.weight"; break;
        default: return qf_err_set(e, QF_EXIT_INPUT, "%s: Qwen v1 checkpoints have no %s", hf->dir, sp.name);
        }
        if (suf) snprintf(s->src, sizeof s->src, "transformer.h.%d.%s", l, suf);
    }
    s->t = qf_st_find(&hf->st, s->src);
    if (!s->t)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: tensor %s is missing from the safetensors%s%s", hf->dir, s->src,
                          strcmp(s->src, sp.name) ? " (for " : "", strcmp(s->src, sp.name) ? sp.name : "");
    int same = s->t->ndim == s->ndim;
    for (int i = 0; same && i < s->ndim; i++) same = s->t->shape[i] == s->sshape[i];
    if (!same) {
        char want[64], got[160];
        int n = 0;
        n += snprintf(want + n, sizeof want - (size_t)n, "[");
        for (int i = 0; i < s->ndim; i++) n += snprintf(want + n, sizeof want - (size_t)n, "%s%lld", i ? "," : "",
                                                        (long long)s->sshape[i]);
        snprintf(want + n, sizeof want - (size_t)n, "]");
        n = snprintf(got, sizeof got, "[");
        for (int i = 0; i < s->t->ndim && n < (int)sizeof got - 24; i++)
            n += snprintf(got + n, sizeof got - (size_t)n, "%s%lld", i ? "," : "", (long long)s->t->shape[i]);
        snprintf(got + n, sizeof got - (size_t)n, "]");
        return qf_err_set(e, QF_EXIT_INPUT, "%s: tensor %s has shape %s, config.json implies %s", hf->st.files[s->t->file],
                          s->src, got, want);
    }
    return qf_st_check(&hf->st, s->t, e);
}

void qf_hf_close(qf_hf *hf) { qf_st_close(&hf->st); }

int qf_hf_open(const char *dir, qf_hf *hf, qf_err *e) {
    memset(hf, 0, sizeof *hf);
    snprintf(hf->dir, sizeof hf->dir, "%s", dir);
    if (qf_hf_read_config(dir, &hf->cfg, e)) return e->code;
    if (qf_st_open_dir(dir, &hf->st, e)) return e->code;
    qf_param_spec *sp;
    int n = qf_param_specs(&hf->cfg, &sp);
    int rc = 0;
    char *used = qf_calloc((size_t)(hf->st.ntensors ? hf->st.ntensors : 1), 1);
    for (int i = 0; i < n && !rc; i++) {
        int k, l;
        hf_src s;
        QF_CHECK(parse_name(&hf->cfg, sp[i].name, &k, &l) == 0);
        rc = hf_resolve(hf, k, l, &s, e);
        if (!rc) used[s.t - hf->st.t] = 1;
        if (!rc && k == P_EMBED) /* the storage dtype is what the tensors really are */
            snprintf(hf->cfg.dtype, sizeof hf->cfg.dtype, "%s",
                     strcmp(s.t->dtype, "BF16") == 0 ? "bf16" : strcmp(s.t->dtype, "F16") == 0 ? "fp16" : "fp32");
    }
    /* a tensor the model does not use is refused, not ignored: it means another architecture or a config.json
     * that does not describe these weights. Ignorable: RoPE caches, and the copy of a tied head. */
    for (int i = 0; i < hf->st.ntensors && !rc; i++) {
        const char *nm = hf->st.t[i].name;
        size_t ln = strlen(nm);
        int cache = ln >= 19 && strcmp(nm + ln - 19, "rotary_emb.inv_freq") == 0;
        int tied_head = hf->cfg.tie_word_embeddings && strcmp(nm, "lm_head.weight") == 0;
        if (!used[i] && !cache && !tied_head)
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: tensor %s is not a parameter of the model config.json describes "
                            "(%d layers, %s); unknown tensors are refused, not ignored", hf->st.files[hf->st.t[i].file],
                            nm, hf->cfg.num_layers, hf->cfg.arch);
    }
    free(used);
    free(sp);
    if (rc) qf_hf_close(hf);
    return rc;
}

int qf_hf_read_param_range(const qf_hf *hf, const char *name, int64_t off, int64_t n, float *out, qf_err *e) {
    int k, l;
    if (parse_name(&hf->cfg, name, &k, &l) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: %s is not a parameter of this model", hf->dir, name);
    hf_src s;
    if (hf_resolve(hf, k, l, &s, e)) return e->code;
    qf_param_spec sp;
    kind_spec(&hf->cfg, k, l, &sp);
    if (off < 0 || n < 0 || off + n > sp.numel)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: %s: range [%lld, %lld) outside its %lld elements", hf->dir, name,
                          (long long)off, (long long)(off + n), (long long)sp.numel);
    qf_st_read_f32(s.t, s.off + off, n, out);
    return 0;
}

int qf_hf_read_param(const qf_hf *hf, const char *name, float *out, qf_err *e) {
    int k, l;
    if (parse_name(&hf->cfg, name, &k, &l) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: %s is not a parameter of this model", hf->dir, name);
    qf_param_spec sp;
    kind_spec(&hf->cfg, k, l, &sp);
    return qf_hf_read_param_range(hf, name, 0, sp.numel, out, e);
}

/* ---- import ------------------------------------------------------------------------------------------------------- */

/* The directory's tokenizer files and generation_config.json, carried in the model (io/hf_files.h). */
static int hf_carry_files(qf_h5 *f, const char *dir, qf_err *e) {
    qf_hf_files hf;
    if (qf_hf_files_from_dir(dir, &hf, e)) return e->code;
    int rc = qf_hf_files_write(f, &hf, e);
    if (!rc && hf.n) printf("import: carries %d file%s of %s (tokenizer, generation_config.json)\n", hf.n,
                            hf.n == 1 ? "" : "s", dir);
    qf_hf_files_free(&hf);
    return rc;
}

/* The HF directory's tokenizer, recorded for export (docs/formats.md): root attributes `tokenizer` (its identity,
 * "" when the directory holds none that loads) and `tokenizer_dir` (the directory's absolute path). */
static int hf_record_tokenizer(qf_h5 *f, const char *dir, qf_err *e) {
    char abs[PATH_MAX] = "";
    const char *ident = "";
    qf_tokenizer *t = NULL;
    qf_err te = {0};
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/tokenizer.json", dir);
    int has = qf_exists(probe);
    snprintf(probe, sizeof probe, "%s/qwen.tiktoken", dir);
    has |= qf_exists(probe);
    if (has && qf_tok_load(dir, &t, &te) == 0) {
        ident = qf_tok_identity(t);
        if (!realpath(dir, abs)) snprintf(abs, sizeof abs, "%s", dir);
    } else if (has) {
        printf("import: the tokenizer of %s is not recorded: %s\n", dir, te.msg);
    }
    int rc = qf_h5_attr_write_str(f, "/", "tokenizer", ident, e) || qf_h5_attr_write_str(f, "/", "tokenizer_dir", abs, e);
    if (t) qf_tok_free(t);
    return rc ? e->code : hf_carry_files(f, dir, e);
}

int qf_hf_import(const char *dir, const char *out_h5, const char *dtype_or_null, qf_err *e) {
    qf_hf hf;
    if (qf_hf_open(dir, &hf, e)) return e->code;
    qf_dtype dt;
    const char *dts = dtype_or_null ? dtype_or_null : hf.cfg.dtype;
    if (qf_dtype_parse(dts, &dt) < 0) {
        qf_hf_close(&hf);
        return qf_err_set(e, QF_EXIT_INPUT, "--dtype %s: expected bf16, fp16 or fp32", dts);
    }
    qf_model_config cfg = hf.cfg;
    snprintf(cfg.dtype, sizeof cfg.dtype, "%s", qf_dtype_name(dt));

    /* the output rule (kernels/base/out_file.h): never over one of the files read, one writer, a temporary */
    const char **in = qf_calloc((size_t)hf.st.nfiles + 4, sizeof *in);
    char cfgp[1100], tokj[1100], tokt[1100];
    snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
    snprintf(tokj, sizeof tokj, "%s/tokenizer.json", dir);
    snprintf(tokt, sizeof tokt, "%s/qwen.tiktoken", dir);
    int nin = 0;
    for (int i = 0; i < hf.st.nfiles; i++) in[nin++] = hf.st.files[i];
    in[nin++] = cfgp, in[nin++] = tokj, in[nin++] = tokt;
    qf_out out;
    int orc = qf_out_begin(&out, "--out", out_h5, in, nin, e);
    free(in);
    if (orc) {
        qf_hf_close(&hf);
        return orc;
    }
    const char *tmp = out.tmp;
    qf_h5 *f = NULL;
    qf_param_spec *sp = NULL;
    float *buf = NULL;
    int rc = qf_h5_create(tmp, MPI_COMM_SELF, &f, e);
    if (rc) goto fail;
    if ((rc = qf_h5_attr_write_str(f, "/", "format", "qwen-ft-model", e)) ||
        (rc = qf_h5_attr_write_i64(f, "/", "format_version", 1, e)) || (rc = qf_h5_write_config(f, &cfg, e)) ||
        (rc = hf_record_tokenizer(f, dir, e)))
        goto fail;
    int n = qf_param_specs(&cfg, &sp);
    const int64_t CH = (int64_t)1 << 26; /* elements per piece: bounds host memory for big embeddings */
    int64_t total = 0, done_el = 0;
    for (int i = 0; i < n; i++) total += sp[i].numel;
    buf = qf_malloc((size_t)(total < CH ? total : CH) * sizeof *buf);
    printf("import: %s -> %s: %d tensors, %.3g M parameters, %s (%s %s)\n", dir, out_h5, n, (double)total / 1e6,
           qf_dtype_name(dt), cfg.family, cfg.arch);
    fflush(stdout);
    double t0 = qf_now(), last = t0;
    for (int i = 0; i < n; i++) {
        for (int64_t a = 0; a < sp[i].numel; a += CH) {
            int64_t m = sp[i].numel - a < CH ? sp[i].numel - a : CH;
            if ((rc = qf_hf_read_param_range(&hf, sp[i].name, a, m, buf, e))) goto fail;
            if ((rc = qf_h5_write_f32(f, "/params", sp[i].name, sp[i].ndim, sp[i].shape, dt, a, m, buf, e))) goto fail;
            done_el += m;
        }
        double now = qf_now();
        if (i + 1 == n || now - last >= 5.0) {
            printf("import: %d/%d tensors, %.0f%% of parameters, %.1f s\n", i + 1, n, 100.0 * (double)done_el /
                   (double)(total ? total : 1), now - t0);
            fflush(stdout);
            last = now;
        }
    }
    rc = qf_h5_close(f, e);
    f = NULL;
    if (rc) goto fail;
    if ((rc = qf_out_commit(&out, e)) != 0) goto fail;
    free(buf);
    free(sp);
    qf_hf_close(&hf);
    return 0;
fail:
    if (f) {
        qf_err ignore = {0};
        qf_h5_close(f, &ignore);
    }
    qf_out_abort(&out);
    free(buf);
    free(sp);
    qf_hf_close(&hf);
    return rc ? rc : e->code;
}
