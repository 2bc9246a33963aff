/* test_presets.c — the published Qwen configs: parameter counts equal the HF models', every preset is consistent. */
#include <stdio.h>
#include <string.h>
#include "model_config.h"

static int g_fail;

static void expect_params(const char *name, int64_t want) {
    qf_model_config c;
    if (qf_preset_lookup(name, &c) != 0) {
        fprintf(stderr, "FAIL: preset %s missing\n", name);
        g_fail++;
        return;
    }
    int64_t got = qf_model_num_params(&c);
    if (got != want) {
        fprintf(stderr, "FAIL: %s has %lld parameters, HF has %lld\n", name, (long long)got, (long long)want);
        g_fail++;
    }
}

/* Matmul weights: every projection and lm_head once; not the input embedding, biases or norms. */
static void check_matmul(const char *name) {
    qf_model_config c;
    qf_preset_lookup(name, &c);
    int64_t C = c.hidden_size, V = c.vocab_size, D = c.head_dim;
    int64_t per_layer = C * c.num_heads * D * 2 + C * c.num_kv_heads * D * 2 + 3 * C * c.intermediate_size;
    int64_t want = c.num_layers * per_layer + V * C;
    if (qf_model_num_matmul_params(&c) != want) {
        fprintf(stderr, "FAIL: %s matmul params %lld != %lld\n", name, (long long)qf_model_num_matmul_params(&c),
                (long long)want);
        g_fail++;
    }
    /* = total, less the input embedding when untied (tied: it counts once, as lm_head), less biases and norms */
    int64_t rest = qf_model_num_params(&c) - (c.tie_word_embeddings ? 0 : V * C) - qf_model_num_matmul_params(&c);
    if (rest < 0 || rest > qf_model_num_params(&c) / 100) {
        fprintf(stderr, "FAIL: %s: total - matmul = %lld (biases and norms)\n", name, (long long)rest);
        g_fail++;
    }
}

static void check_all(void) {
    const char *const *names = qf_preset_names();
    int n = 0;
    char msg[256];
    for (; names[n]; n++) {
        qf_model_config c;
        if (qf_preset_lookup(names[n], &c) != 0 || qf_model_config_check(&c, msg, sizeof msg) != 0) {
            fprintf(stderr, "FAIL: preset %s: %s\n", names[n], msg);
            g_fail++;
            continue;
        }
        check_matmul(names[n]);
        int q3 = strncmp(names[n], "qwen3", 5) == 0;
        if (q3 != (c.qk_norm && !c.attention_bias && c.head_dim == 128 && strcmp(c.arch, "qwen3") == 0)) {
            fprintf(stderr, "FAIL: preset %s: Qwen3 traits wrong\n", names[n]);
            g_fail++;
        }
    }
    if (n != 17) {
        fprintf(stderr, "FAIL: %d presets, expected 17\n", n);
        g_fail++;
    }
    qf_model_config c;
    if (qf_preset_lookup("qwen9-1b", &c) != -1) g_fail++;
}

static void check_rejects(void) {
    qf_model_config c;
    char msg[256];
    qf_preset_lookup("qwen2.5-7b", &c);
    c.num_kv_heads = 5;
    if (qf_model_config_check(&c, msg, sizeof msg) == 0) fprintf(stderr, "FAIL: kv 5 accepted\n"), g_fail++;
    qf_preset_lookup("qwen3-0.6b", &c);
    c.attention_bias = 1;
    if (qf_model_config_check(&c, msg, sizeof msg) == 0) fprintf(stderr, "FAIL: qwen3 bias accepted\n"), g_fail++;
    qf_preset_lookup("qwen-14b", &c);
    if (strcmp(c.family, "qwen") || c.num_kv_heads != 40 || c.intermediate_size != 13696 || c.vocab_size != 152064)
        fprintf(stderr, "FAIL: qwen-14b\n"), g_fail++;
}

int main(void) {
    expect_params("qwen2.5-0.5b", 494032768);
    expect_params("qwen2.5-1.5b", 1543714304);
    expect_params("qwen2.5-7b", 7615616512);
    expect_params("qwen2.5-14b", 14770033664);
    expect_params("qwen3-0.6b", 596049920);  /* HF Qwen3-0.6B (tied) */
    expect_params("qwen3-8b", 8190735360);   /* HF Qwen3-8B */
    check_all();
    check_rejects();
    printf("test_presets: %s\n", g_fail ? "FAILED" : "ok");
    return g_fail ? 1 : 0;
}
