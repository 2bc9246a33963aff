/* test_hf.c — io/hf.c: tiny HF directories (config.json + model.safetensors written with qf_st_write) for
 * Qwen2 (biases, GQA, untied), Qwen2 tied, Qwen3 (q/k norm, head_dim != hidden/heads, rope_parameters) and
 * Qwen v1 (fused c_attn, w1/w2, kv_channels, doubled intermediate_size, rotary_emb_base): parsed config,
 * canonical parameter order, tensor mapping (v1 q/k/v split, w2 -> gate), import to HDF5 and read back, and the
 * exit-2 errors (config keys, missing tensor, wrong shape). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "h5io.h"
#include "hf.h"
#include "qf_test.h"


static char root[256];

/* ---- building HF directories ---------------------------------------------------------------------------------- */

typedef struct tensor_list {
    int n;
    qf_st_out t[64];
    float *data[64];
    char names[64][96];
} tensor_list;

/* Deterministic values, exactly representable in bf16: tensor k, element i. */
static float tval(int k, int64_t i) { return (float)(((i * 7 + k * 31) % 53) - 26) * 0.0625f; }

static void add(tensor_list *l, const char *name, int64_t r, int64_t c) {
    int k = l->n++;
    snprintf(l->names[k], sizeof l->names[k], "%s", name);
    l->t[k].name = l->names[k];
    l->t[k].ndim = c ? 2 : 1;
    l->t[k].shape[0] = r;
    l->t[k].shape[1] = c;
    int64_t n = c ? r * c : r;
    l->data[k] = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) l->data[k][i] = tval(k, i);
    l->t[k].data = l->data[k];
}

static const float *find_data(const tensor_list *l, const char *name) {
    for (int k = 0; k < l->n; k++)
        if (!strcmp(l->names[k], name)) return l->data[k];
    return NULL;
}

static void free_list(tensor_list *l) {
    for (int k = 0; k < l->n; k++) free(l->data[k]);
    l->n = 0;
}

/* Writes dir/config.json and dir/model.safetensors. */
static void make_dir(const char *dir, const char *config, const tensor_list *l, const char *dtype) {
    qf_mkdirs(dir);
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    qf_test_write_text(p, config);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    qf_err e = {0};
    if (qf_st_write(p, l->t, l->n, dtype, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
}

/* make_dir, then the directory opened into hf: 0, or -1 after a failed check. */
static int make_open(const char *dir, const char *config, const tensor_list *l, const char *dtype, qf_hf *hf) {
    make_dir(dir, config, l, dtype);
    qf_err e = {0};
    CHECK(qf_hf_open(dir, hf, &e) == 0, "%s", e.msg);
    return e.code ? -1 : 0;
}

/* Canonical Qwen2/3 tensors. */
static void qwen23_tensors(tensor_list *l, int V, int C, int F, int L, int H, int KV, int D, int bias, int qkn,
                           int head) {
    char n[96];
    add(l, "model.embed_tokens.weight", V, C);
    for (int i = 0; i < L; i++) {
#define A(s, r, c)                                                \
    do {                                                          \
        snprintf(n, sizeof n, "model.layers.%d.%s", i, s);        \
        add(l, n, r, c);                                          \
    } while (0)
        A("input_layernorm.weight", C, 0);
        A("self_attn.q_proj.weight", H * D, C);
        A("self_attn.k_proj.weight", KV * D, C);
        A("self_attn.v_proj.weight", KV * D, C);
        if (bias) {
            A("self_attn.q_proj.bias", H * D, 0);
            A("self_attn.k_proj.bias", KV * D, 0);
            A("self_attn.v_proj.bias", KV * D, 0);
        }
        if (qkn) {
            A("self_attn.q_norm.weight", D, 0);
            A("self_attn.k_norm.weight", D, 0);
        }
        A("self_attn.o_proj.weight", C, H * D);
        A("post_attention_layernorm.weight", C, 0);
        A("mlp.gate_proj.weight", F, C);
        A("mlp.up_proj.weight", F, C);
        A("mlp.down_proj.weight", C, F);
#undef A
    }
    add(l, "model.norm.weight", C, 0);
    if (head) add(l, "lm_head.weight", V, C);
}

static const char *QWEN2_CFG =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", \"vocab_size\": 50, \"hidden_size\": 16,"
    " \"intermediate_size\": 24, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"hidden_act\": \"silu\", \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0,"
    " \"rope_scaling\": null, \"tie_word_embeddings\": %s, \"torch_dtype\": \"float32\", \"bos_token_id\": 3,"
    " \"eos_token_id\": 4, \"use_sliding_window\": false, \"sliding_window\": 128, \"max_window_layers\": 1,"
    " \"initializer_range\": 0.01}";

static const char *QWEN3_CFG =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"vocab_size\": 40, \"hidden_size\": 16,"
    " \"intermediate_size\": 20, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 8, \"attention_bias\": false, \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-06,"
    " \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"default\"}, \"tie_word_embeddings\": true,"
    " \"dtype\": \"bfloat16\", \"bos_token_id\": null, \"eos_token_id\": [7, 8], \"pad_token_id\": 9,"
    " \"layer_types\": [\"full_attention\", \"full_attention\"]}";

static const char *QWEN1_CFG =
    "{\"architectures\": [\"QWenLMHeadModel\"], \"model_type\": \"qwen\", \"vocab_size\": 30, \"hidden_size\": 16,"
    " \"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"kv_channels\": 4,"
    " \"rotary_emb_base\": 20000, \"rotary_pct\": 1.0, \"layer_norm_epsilon\": 1e-05, \"seq_length\": 64,"
    " \"max_position_embeddings\": 32, \"no_bias\": true, \"tie_word_embeddings\": false, \"bf16\": true,"
    " \"use_dynamic_ntk\": true, \"use_logn_attn\": true, \"torch_dtype\": \"bfloat16\"}";

/* ---- tests ---------------------------------------------------------------------------------------------------- */

/* Every canonical parameter read through qf_hf_read_param equals the expected source data. */
static void check_params(const qf_hf *hf, const tensor_list *l, const char *what) {
    qf_param_spec *sp;
    int n = qf_param_specs(&hf->cfg, &sp);
    for (int i = 0; i < n; i++) {
        const float *want = find_data(l, sp[i].name);
        CHECK(want != NULL, "%s: %s not in the source list", what, sp[i].name);
        if (!want) continue;
        float *got = malloc((size_t)sp[i].numel * sizeof *got);
        qf_err e = {0};
        CHECK(qf_hf_read_param(hf, sp[i].name, got, &e) == 0, "%s", e.msg);
        CHECK(memcmp(got, want, (size_t)sp[i].numel * sizeof *got) == 0, "%s: %s differs", what, sp[i].name);
        free(got);
    }
    free(sp);
}

/* Imports dir and checks the HDF5 holds the config and exactly the canonical parameters. */
static void check_import(const char *dir, const qf_hf *hf, const char *dtype, const char *what) {
    char out[512], tmp[520];
    snprintf(out, sizeof out, "%s/model.h5", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    qf_err e = {0};
    CHECK(qf_hf_import(dir, out, dtype, &e) == 0, "%s: import: %s", what, e.msg);
    CHECK(access(tmp, F_OK) != 0, "%s: temporary removed", what);
    qf_h5 *f;
    CHECK(qf_h5_open(out, MPI_COMM_SELF, 0, &f, &e) == 0, "%s", e.msg);
    if (e.code) return;
    char s[64];
    int64_t v;
    CHECK(qf_h5_attr_read_str(f, "/", "format", s, sizeof s, &e) == 0 && !strcmp(s, "qwen-ft-model"), "format");
    CHECK(qf_h5_attr_read_i64(f, "/", "format_version", &v, &e) == 0 && v == 1, "format_version");
    qf_model_config c;
    CHECK(qf_h5_read_config(f, &c, &e) == 0, "%s", e.msg);
    qf_model_config w = hf->cfg;
    snprintf(w.dtype, sizeof w.dtype, "%s", dtype ? dtype : hf->cfg.dtype);
    CHECK(!memcmp(&c, &w, sizeof c) ||
              (!strcmp(c.arch, w.arch) && !strcmp(c.family, w.family) && !strcmp(c.dtype, w.dtype) &&
               c.vocab_size == w.vocab_size && c.hidden_size == w.hidden_size && c.head_dim == w.head_dim &&
               c.intermediate_size == w.intermediate_size && c.num_layers == w.num_layers &&
               c.num_heads == w.num_heads && c.num_kv_heads == w.num_kv_heads && c.qk_norm == w.qk_norm &&
               c.attention_bias == w.attention_bias && c.tie_word_embeddings == w.tie_word_embeddings &&
               c.rope_theta == w.rope_theta && c.rms_norm_eps == w.rms_norm_eps &&
               c.max_position_embeddings == w.max_position_embeddings && c.eos_token_id == w.eos_token_id &&
               c.bos_token_id == w.bos_token_id && c.pad_token_id == w.pad_token_id),
          "%s: config in the HDF5 file", what);
    qf_param_spec *sp;
    int n = qf_param_specs(&hf->cfg, &sp);
    qf_dtype dt;
    CHECK(qf_dtype_parse(w.dtype, &dt) == 0, "dtype");
    for (int i = 0; i < n; i++) {
        float *a = malloc((size_t)sp[i].numel * sizeof *a), *b = malloc((size_t)sp[i].numel * sizeof *b);
        CHECK(qf_hf_read_param(hf, sp[i].name, a, &e) == 0, "%s", e.msg);
        CHECK(qf_h5_read_f32(f, "/params", sp[i].name, 0, sp[i].numel, b, &e) == 0, "%s", e.msg);
        int bad = 0;
        for (int64_t k = 0; k < sp[i].numel; k++) bad += a[k] != b[k]; /* test values are exact in bf16 */
        CHECK(bad == 0, "%s: /params/%s differs in %d elements", what, sp[i].name, bad);
        int nd;
        int64_t sh[4];
        qf_dtype got;
        CHECK(qf_h5_shape(f, "/params", sp[i].name, &nd, sh, &got, &e) == 0 && nd == sp[i].ndim &&
                  sh[0] == sp[i].shape[0] && (nd == 1 || sh[1] == sp[i].shape[1]) && got == dt,
              "%s: shape/dtype of %s", what, sp[i].name);
        free(a);
        free(b);
    }
    CHECK(qf_h5_has(f, "/params", "lm_head.weight") == !hf->cfg.tie_word_embeddings, "%s: lm_head stored iff untied",
          what);
    free(sp);
    CHECK(qf_h5_close(f, &e) == 0, "%s", e.msg);
}

static void test_qwen2(void) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/qwen2", root);
    tensor_list l = {0};
    qwen23_tensors(&l, 50, 16, 24, 2, 4, 2, 4, 1, 0, 1);
    char cfg[2048];
    snprintf(cfg, sizeof cfg, QWEN2_CFG, "false");
    qf_hf hf;
    if (make_open(dir, cfg, &l, "F32", &hf)) return;
    qf_err e = {0};
    const qf_model_config *c = &hf.cfg;
    CHECK(!strcmp(c->arch, "qwen2") && !strcmp(c->family, "qwen2"), "arch %s family %s", c->arch, c->family);
    CHECK(c->vocab_size == 50 && c->hidden_size == 16 && c->intermediate_size == 24 && c->num_layers == 2 &&
              c->num_heads == 4 && c->num_kv_heads == 2 && c->head_dim == 4,
          "dims");
    CHECK(c->attention_bias == 1 && c->qk_norm == 0 && c->tie_word_embeddings == 0, "flags");
    CHECK(c->rope_theta == 1e6 && c->rms_norm_eps == 1e-5 && c->max_position_embeddings == 128 &&
              c->initializer_range == 0.01,
          "numbers");
    CHECK(c->bos_token_id == 3 && c->eos_token_id == 4 && c->pad_token_id == -1, "tokens");
    CHECK(!strcmp(c->dtype, "fp32"), "dtype %s", c->dtype);
    /* canonical order */
    qf_param_spec *sp;
    int n = qf_param_specs(c, &sp);
    CHECK(n == 1 + 2 * 12 + 2, "count %d", n);
    const char *l0[] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
                        "self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight",
                        "self_attn.v_proj.bias", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
    CHECK(!strcmp(sp[0].name, "model.embed_tokens.weight") && sp[0].layer == -1 && sp[0].decay == 1, "embed first");
    for (int i = 0; i < 12; i++) {
        char want[96];
        snprintf(want, sizeof want, "model.layers.0.%s", l0[i]);
        CHECK(!strcmp(sp[1 + i].name, want) && sp[1 + i].layer == 0, "spec %d = %s, want %s", 1 + i, sp[1 + i].name,
              want);
        CHECK(sp[1 + i].decay == (sp[1 + i].ndim == 2), "decay of %s", sp[1 + i].name);
    }
    CHECK(n >= 2 && !strcmp(sp[n - 2].name, "model.norm.weight") && !strcmp(sp[n - 1].name, "lm_head.weight"),
          "tail");
    CHECK(sp[2].ndim == 2 && sp[2].shape[0] == 16 && sp[2].shape[1] == 16 && sp[4].shape[0] == 8 &&
              sp[4].shape[1] == 16 && sp[5].ndim == 1 && sp[5].shape[0] == 8,
          "shapes");
    free(sp);
    check_params(&hf, &l, "qwen2");
    /* a range read */
    float part[10];
    CHECK(qf_hf_read_param_range(&hf, "model.layers.1.mlp.down_proj.weight", 20, 10, part, &e) == 0, "%s", e.msg);
    CHECK(!memcmp(part, find_data(&l, "model.layers.1.mlp.down_proj.weight") + 20, sizeof part), "range read");
    qf_err e2 = {0};
    CHECK(qf_hf_read_param(&hf, "model.layers.2.mlp.up_proj.weight", part, &e2) == QF_EXIT_INPUT, "layer out of range");
    check_import(dir, &hf, NULL, "qwen2");
    check_import(dir, &hf, "bf16", "qwen2 as bf16");
    qf_hf_close(&hf);

    /* untied but lm_head missing -> error naming it */
    tensor_list l2 = {0};
    qwen23_tensors(&l2, 50, 16, 24, 2, 4, 2, 4, 1, 0, 0);
    snprintf(dir, sizeof dir, "%s/qwen2_nohead", root);
    make_dir(dir, cfg, &l2, "F32");
    memset(&e2, 0, sizeof e2);
    CHECK(qf_hf_open(dir, &hf, &e2) == QF_EXIT_INPUT && strstr(e2.msg, "lm_head.weight"), "missing lm_head: %s",
          e2.msg);
    /* import of a broken directory leaves nothing behind */
    char out[512], tmp[520];
    snprintf(out, sizeof out, "%s/model.h5", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    memset(&e2, 0, sizeof e2);
    CHECK(qf_hf_import(dir, out, NULL, &e2) == QF_EXIT_INPUT, "import of a broken dir");
    CHECK(access(out, F_OK) != 0 && access(tmp, F_OK) != 0, "no output left");

    /* tied: lm_head absent */
    snprintf(dir, sizeof dir, "%s/qwen2_tied", root);
    snprintf(cfg, sizeof cfg, QWEN2_CFG, "true");
    if (!make_open(dir, cfg, &l2, "BF16", &hf)) {
        CHECK(hf.cfg.tie_word_embeddings == 1 && !strcmp(hf.cfg.dtype, "bf16"), "tied, stored as bf16 (%s)",
              hf.cfg.dtype);
        n = qf_param_specs(&hf.cfg, &sp);
        CHECK(n == 1 + 2 * 12 + 1 && !strcmp(sp[n - 1].name, "model.norm.weight"), "no lm_head spec");
        free(sp);
        check_params(&hf, &l2, "qwen2 tied");
        check_import(dir, &hf, NULL, "qwen2 tied");
        qf_hf_close(&hf);
    }
    /* tied with an lm_head present: ignored */
    snprintf(dir, sizeof dir, "%s/qwen2_tied_head", root);
    if (!make_open(dir, cfg, &l, "F32", &hf)) {
        check_import(dir, &hf, NULL, "qwen2 tied with lm_head");
        qf_hf_close(&hf);
    }
    /* a tensor of the wrong shape -> error naming it, with both shapes */
    tensor_list l3 = {0};
    qwen23_tensors(&l3, 50, 16, 24, 2, 4, 2, 4, 1, 0, 1);
    l3.t[3].shape[0] = 4; /* model.layers.0.self_attn.k_proj.weight [8,16] -> [4,16] (data is larger: fine) */
    snprintf(dir, sizeof dir, "%s/qwen2_shape", root);
    snprintf(cfg, sizeof cfg, QWEN2_CFG, "false");
    make_dir(dir, cfg, &l3, "F32");
    memset(&e2, 0, sizeof e2);
    CHECK(qf_hf_open(dir, &hf, &e2) == QF_EXIT_INPUT && strstr(e2.msg, "model.layers.0.self_attn.k_proj.weight") &&
              strstr(e2.msg, "[4,16]") && strstr(e2.msg, "[8,16]"),
          "wrong shape: %s", e2.msg);
    /* a missing tensor */
    tensor_list l4 = {0};
    qwen23_tensors(&l4, 50, 16, 24, 2, 4, 2, 4, 0, 0, 1); /* no biases */
    snprintf(dir, sizeof dir, "%s/qwen2_nobias", root);
    make_dir(dir, cfg, &l4, "F32");
    memset(&e2, 0, sizeof e2);
    CHECK(qf_hf_open(dir, &hf, &e2) == QF_EXIT_INPUT && strstr(e2.msg, "model.layers.0.self_attn.q_proj.bias"),
          "missing tensor: %s", e2.msg);
    free_list(&l);
    free_list(&l2);
    free_list(&l3);
    free_list(&l4);
}

static void test_qwen3(void) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/qwen3", root);
    tensor_list l = {0};
    qwen23_tensors(&l, 40, 16, 20, 2, 4, 2, 8, 0, 1, 0);
    qf_hf hf;
    if (make_open(dir, QWEN3_CFG, &l, "BF16", &hf)) return;
    const qf_model_config *c = &hf.cfg;
    CHECK(!strcmp(c->arch, "qwen3") && !strcmp(c->family, "qwen3"), "arch");
    CHECK(c->head_dim == 8 && c->num_heads == 4 && c->num_kv_heads == 2 && c->hidden_size == 16, "head_dim");
    CHECK(c->qk_norm == 1 && c->attention_bias == 0 && c->tie_word_embeddings == 1, "flags");
    CHECK(c->rope_theta == 500000.0 && c->max_position_embeddings == 256, "rope_parameters.rope_theta %g",
          c->rope_theta);
    CHECK(c->bos_token_id == -1 && c->eos_token_id == 7 && c->pad_token_id == 9, "tokens");
    CHECK(!strcmp(c->dtype, "bf16") && c->initializer_range == 0.02, "dtype, default initializer_range");
    qf_param_spec *sp;
    int n = qf_param_specs(c, &sp);
    CHECK(n == 1 + 2 * 11 + 1, "count %d", n);
    CHECK(!strcmp(sp[5].name, "model.layers.0.self_attn.q_norm.weight") &&
              !strcmp(sp[6].name, "model.layers.0.self_attn.k_norm.weight") && sp[5].shape[0] == 8 &&
              sp[5].decay == 0,
          "q_norm/k_norm after v: %s %s", sp[5].name, sp[6].name);
    CHECK(sp[2].shape[0] == 32 && sp[2].shape[1] == 16 && sp[7].shape[0] == 16 && sp[7].shape[1] == 32,
          "q [H*D,C], o [C,H*D]");
    free(sp);
    check_params(&hf, &l, "qwen3");
    check_import(dir, &hf, NULL, "qwen3");
    check_import(dir, &hf, "fp32", "qwen3 as fp32");
    qf_hf_close(&hf);
    free_list(&l);
}

static void test_qwen1(void) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/qwen1", root);
    const int V = 30, C = 16, F = 24, L = 2;
    tensor_list l = {0};
    char n[96];
    add(&l, "transformer.wte.weight", V, C);
    for (int i = 0; i < L; i++) {
#define A(s, r, c)                                          \
    do {                                                    \
        snprintf(n, sizeof n, "transformer.h.%d.%s", i, s); \
        add(&l, n, r, c);                                   \
    } while (0)
        A("ln_1.weight", C, 0);
        A("attn.c_attn.weight", 3 * C, C);
        A("attn.c_attn.bias", 3 * C, 0);
        A("attn.c_proj.weight", C, C);
        A("ln_2.weight", C, 0);
        A("mlp.w1.weight", F, C);
        A("mlp.w2.weight", F, C);
        A("mlp.c_proj.weight", C, F);
#undef A
    }
    add(&l, "transformer.ln_f.weight", C, 0);
    add(&l, "lm_head.weight", V, C);
    qf_hf hf;
    if (make_open(dir, QWEN1_CFG, &l, "BF16", &hf)) return;
    qf_err e = {0};
    const qf_model_config *c = &hf.cfg;
    CHECK(!strcmp(c->arch, "qwen2") && !strcmp(c->family, "qwen"), "arch %s family %s", c->arch, c->family);
    CHECK(c->intermediate_size == 24 && c->head_dim == 4 && c->num_kv_heads == 4 && c->num_heads == 4, "dims");
    CHECK(c->rope_theta == 20000 && c->rms_norm_eps == 1e-5 && c->max_position_embeddings == 32,
          "v1 numbers (max_position_embeddings is the v1 field of that name, not seq_length)");
    CHECK(c->attention_bias == 1 && c->qk_norm == 0 && c->tie_word_embeddings == 0, "v1 flags");
    CHECK(c->bos_token_id == -1 && c->eos_token_id == -1 && !strcmp(c->dtype, "bf16"), "v1 tokens/dtype");
    /* the mapping */
    float *buf = malloc((size_t)3 * C * C * sizeof *buf);
    for (int i = 0; i < L; i++) {
        char cn[96], sn[96];
        const char *qkv[3] = {"q", "k", "v"};
        snprintf(sn, sizeof sn, "transformer.h.%d.attn.c_attn.weight", i);
        const float *w = find_data(&l, sn);
        snprintf(sn, sizeof sn, "transformer.h.%d.attn.c_attn.bias", i);
        const float *bsrc = find_data(&l, sn);
        for (int j = 0; j < 3; j++) {
            snprintf(cn, sizeof cn, "model.layers.%d.self_attn.%s_proj.weight", i, qkv[j]);
            CHECK(qf_hf_read_param(&hf, cn, buf, &e) == 0, "%s", e.msg);
            CHECK(!memcmp(buf, w + (size_t)j * C * C, (size_t)C * C * sizeof *buf), "%s = c_attn rows [%d,%d)", cn,
                  j * C, (j + 1) * C);
            snprintf(cn, sizeof cn, "model.layers.%d.self_attn.%s_proj.bias", i, qkv[j]);
            CHECK(qf_hf_read_param(&hf, cn, buf, &e) == 0, "%s", e.msg);
            CHECK(!memcmp(buf, bsrc + (size_t)j * C, (size_t)C * sizeof *buf), "%s = c_attn.bias [%d,%d)", cn, j * C,
                  (j + 1) * C);
        }
        const char *pairs[][2] = {{"mlp.gate_proj.weight", "mlp.w2.weight"}, {"mlp.up_proj.weight", "mlp.w1.weight"},
                                  {"mlp.down_proj.weight", "mlp.c_proj.weight"},
                                  {"self_attn.o_proj.weight", "attn.c_proj.weight"},
                                  {"input_layernorm.weight", "ln_1.weight"},
                                  {"post_attention_layernorm.weight", "ln_2.weight"}};
        for (int p = 0; p < 6; p++) {
            snprintf(cn, sizeof cn, "model.layers.%d.%s", i, pairs[p][0]);
            snprintf(sn, sizeof sn, "transformer.h.%d.%s", i, pairs[p][1]);
            const qf_st_tensor *t = qf_st_find(&hf.st, sn);
            CHECK(t && qf_hf_read_param(&hf, cn, buf, &e) == 0, "%s: %s", cn, e.msg);
            if (t) CHECK(!memcmp(buf, find_data(&l, sn), (size_t)t->numel * sizeof *buf), "%s = %s", cn, sn);
        }
    }
    CHECK(qf_hf_read_param(&hf, "model.norm.weight", buf, &e) == 0 &&
              !memcmp(buf, find_data(&l, "transformer.ln_f.weight"), C * sizeof *buf),
          "norm = ln_f");
    free(buf);
    check_import(dir, &hf, NULL, "qwen v1");
    qf_hf_close(&hf);

    /* a wrong fused shape names the source tensor */
    l.t[2].shape[0] = 3 * C - 3; /* transformer.h.0.attn.c_attn.weight */
    snprintf(dir, sizeof dir, "%s/qwen1_bad", root);
    make_dir(dir, QWEN1_CFG, &l, "F32");
    qf_err e2 = {0};
    CHECK(qf_hf_open(dir, &hf, &e2) == QF_EXIT_INPUT && strstr(e2.msg, "transformer.h.0.attn.c_attn.weight") &&
              strstr(e2.msg, "[48,16]"),
          "v1 wrong shape: %s", e2.msg);
    free_list(&l);
}

/* Writes a config with one substitution and expects qf_hf_read_config to fail naming config.json and key. */
static void expect_config_error(const char *name, const char *config, const char *key) {
    char dir[400], path[512];
    snprintf(dir, sizeof dir, "%s/cfg_%s", root, name);
    qf_mkdirs(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    qf_test_write_text(path, config);
    qf_model_config c;
    qf_err e = {0};
    int rc = qf_hf_read_config(dir, &c, &e);
    CHECK(rc == QF_EXIT_INPUT, "%s: rc %d", name, rc);
    CHECK(strstr(e.msg, path) && strstr(e.msg, key), "%s: message names %s and %s: %s", name, path, key, e.msg);
}

/* QWEN2_CFG/QWEN3_CFG with text `from` replaced by `to`. */
static void subst(char *out, size_t cap, const char *base, const char *from, const char *to) {
    char tmp[2048];
    const char *fmt = strstr(base, "%s");
    if (fmt) snprintf(tmp, sizeof tmp, "%.*sfalse%s", (int)(fmt - base), base, fmt + 2); /* QWEN2_CFG's one %s */
    else snprintf(tmp, sizeof tmp, "%s", base);
    const char *p = strstr(tmp, from);
    if (!p) {
        fprintf(stderr, "subst: %s not found\n", from);
        exit(1);
    }
    snprintf(out, cap, "%.*s%s%s", (int)(p - tmp), tmp, to, p + strlen(from));
}

static void test_config_errors(void) {
    char c[2048];
    /* each case: one substitution in a valid config.json, and the key the error must name */
    const struct {
        const char *base, *from, *to, *name, *key;
    } cases[] = {
        {QWEN2_CFG, "\"hidden_size\": 16,", "", "no_hidden", "hidden_size"},
        {QWEN2_CFG, "\"torch_dtype\": \"float32\"", "\"torch_dtype\": \"bfloat17\"", "bad_dtype", "torch_dtype"},
        {QWEN3_CFG, "\"dtype\": \"bfloat16\"", "\"dtype\": \"int8\"", "bad_dtype5", "dtype"},
        {QWEN3_CFG, "\"rope_type\": \"default\"", "\"rope_type\": \"yarn\", \"factor\": 4.0", "rope_type", "rope_type"},
        {QWEN2_CFG, "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}",
         "rope_scaling", "rope_scaling"},
        {QWEN2_CFG, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", "kv_divide", "num_key_value_heads"},
        {QWEN2_CFG, "\"vocab_size\": 50", "\"vocab_size\": \"fifty\"", "vocab_type", "vocab_size"},
        {QWEN2_CFG, "Qwen2ForCausalLM\"], \"model_type\": \"qwen2\"", "LlamaForCausalLM\"], \"model_type\": \"llama\"",
         "arch", "architectures"},
        {QWEN2_CFG, "\"use_sliding_window\": false", "\"use_sliding_window\": true", "sliding", "use_sliding_window"},
        {QWEN1_CFG, "\"intermediate_size\": 48", "\"intermediate_size\": 47", "v1_odd_ffn", "intermediate_size"},
        {QWEN2_CFG, "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": -1", "eps", "rms_norm_eps"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        subst(c, sizeof c, cases[i].base, cases[i].from, cases[i].to);
        expect_config_error(cases[i].name, c, cases[i].key);
    }
    expect_config_error("json", "{\"architectures\": [\"Qwen2ForCausalLM\"", "JSON");
    /* missing config.json altogether */
    qf_model_config m;
    qf_err e = {0};
    char d[400];
    snprintf(d, sizeof d, "%s/no_such_model", root);
    CHECK(qf_hf_read_config(d, &m, &e) == QF_EXIT_INPUT && strstr(e.msg, "config.json"), "no config: %s", e.msg);
    CHECK(qf_hf_is_dir(d) == 0, "is_dir false");
    snprintf(d, sizeof d, "%s/qwen2", root);
    CHECK(qf_hf_is_dir(d) == 1, "is_dir true");
    /* model_type alone is enough; defaults as transformers' */
    snprintf(d, sizeof d, "%s/cfg_model_type", root);
    qf_mkdirs(d);
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", d);
    qf_test_write_text(p, "{\"model_type\": \"qwen3\", \"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 4,"
                  " \"num_hidden_layers\": 1, \"num_attention_heads\": 2}");
    memset(&e, 0, sizeof e);
    CHECK(qf_hf_read_config(d, &m, &e) == 0, "%s", e.msg);
    CHECK(!strcmp(m.arch, "qwen3") && m.num_kv_heads == 2 && m.head_dim == 128 && m.rope_theta == 10000.0 &&
              m.rms_norm_eps == 1e-6 && m.max_position_embeddings == 32768 && m.tie_word_embeddings == 0 &&
              !strcmp(m.dtype, "fp32") && m.eos_token_id == -1,
          "defaults (Qwen3Config: head_dim 128)");
}

int main(void) {
    MPI_Init(NULL, NULL);
    snprintf(root, sizeof root, "/tmp/qf_test_hf_%d", (int)getpid());
    qf_mkdirs(root);
    test_qwen2();
    test_qwen3();
    test_qwen1();
    test_config_errors();
    int rc = qf_test_verdict("test_hf", qf_test_failures, root);
    MPI_Finalize();
    return rc;
}
