/* test_model_fd.c — finite-difference check of the whole model's gradient on the CPU backend: for a tiny Qwen3
 * (q/k norm, GQA, head_dim != hidden/heads, tied head) and a tiny Qwen2 (biases, untied head), on packed rows
 * with two documents and masked targets, the backward's gradient of the mean loss agrees with central
 * differences of the forward, for sampled elements of EVERY parameter tensor. The forward is fp32; differences
 * use h = 1e-2 on a loss summed in double; the tolerance is 5e-3 relative to the largest sampled gradient of
 * the tensor (observed worst 1.2e-3: float rounding of the loss; the op-level checks in test_ops_cpu are tighter). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model.h"

static int fails;

static void fill_rows(qf_rows *r, int V) {
    /* row 0: documents of 5 and 11 tokens; row 1: one document of 16; some targets masked */
    for (int b = 0; b < r->B; b++)
        for (int t = 0; t < r->T; t++) {
            int i = b * r->T + t;
            int seg = (b == 0 && t >= 5) ? 5 : 0;
            r->tokens[i] = (7 * i + 3 * b + 1) % V;
            r->seg_start[i] = seg;
            r->pos[i] = t - seg;
            r->doc[i] = b == 0 ? (t >= 5) : 2;
            int last_of_seg = t + 1 >= r->T || (b == 0 && t == 4);
            r->targets[i] = last_of_seg || (i % 7 == 3) ? -1 : (7 * (i + 1) + 3 * b + 1) % V;
        }
    r->n_targets = 0;
    for (int i = 0; i < r->B * r->T; i++) r->n_targets += r->targets[i] >= 0;
}

static double mean_loss(qf_model *m, const qf_rows *r) { return qf_model_step(m, r, 1.0f, 0) / (double)r->n_targets; }

static void check_model(const char *name, qf_model_config *c) {
    qf_err e = {0};
    qf_model m;
    if (qf_model_create(&m, c, qf_ops_cpu(), QF_MODEL_PARAMS | QF_MODEL_GRADS, &e) ||
        qf_model_alloc_acts(&m, 2, 16, 0, -1, &e))
        QF_FATAL("%s", e.msg);
    qf_model_init_random(&m, 11);
    float *p = m.params, *g = m.grads;
    /* perturb norms and biases away from 1 / 0 so that their gradients are generic */
    for (int i = 0; i < m.nspecs; i++)
        if (m.specs[i].ndim == 1)
            for (int64_t j = 0; j < m.specs[i].numel; j++) p[m.offset[i] + j] += 0.1f * (float)sin(1.3 * (double)j + i);
    qf_rows r;
    qf_rows_alloc(&r, 2, 16);
    fill_rows(&r, (int)c->vocab_size);
    memset(g, 0, (size_t)m.n_params * 4);
    qf_model_step(&m, &r, 1.0f / (float)r.n_targets, 1);
    const float h = 1e-2f;
    int tensors = 0;
    for (int i = 0; i < m.nspecs; i++) {
        double worst = 0, gmax = 0;
        int64_t n = m.specs[i].numel, step = n > 12 ? n / 12 : 1;
        for (int64_t j = 0; j < n; j += step) {
            float *x = &p[m.offset[i] + j], x0 = *x;
            *x = x0 + h;
            double lp = mean_loss(&m, &r);
            *x = x0 - h;
            double lm = mean_loss(&m, &r);
            *x = x0;
            double fd = (lp - lm) / (2.0 * h), an = g[m.offset[i] + j];
            worst = fmax(worst, fabs(fd - an));
            gmax = fmax(gmax, fmax(fabs(fd), fabs(an)));
        }
        double rel = gmax > 0 ? worst / gmax : worst;
        int ok = rel <= 5e-3 || worst < 1e-6;
        fails += !ok;
        tensors++;
        if (!ok || i < 3 || getenv("QF_VERBOSE")) printf("  %-48s max |fd - analytic| %.2e (rel %.2e) %s\n", m.specs[i].name, worst, rel, ok ? "ok" : "FAIL");
    }
    printf("%s: %d parameter tensors checked\n", name, tensors);
    qf_rows_free(&r);
    qf_model_free(&m);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    qf_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.arch, sizeof c.arch, "qwen3");
    c.vocab_size = 40;
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 8;
    c.qk_norm = 1;
    c.tie_word_embeddings = 1;
    c.rope_theta = 10000;
    c.rms_norm_eps = 1e-6;
    c.max_position_embeddings = 64;
    c.initializer_range = 0.2;
    c.bos_token_id = c.eos_token_id = c.pad_token_id = -1;
    snprintf(c.dtype, sizeof c.dtype, "fp32");
    check_model("qwen3 (q/k norm, GQA, head_dim 8 != 16/4, tied)", &c);
    snprintf(c.arch, sizeof c.arch, "qwen2");
    c.qk_norm = 0;
    c.attention_bias = 1;
    c.tie_word_embeddings = 0;
    c.head_dim = 4;
    check_model("qwen2 (q/k/v bias, GQA, untied head)", &c);
    printf("%s (%d tensors failed)\n", fails ? "FAIL" : "PASS", fails);
    MPI_Finalize();
    return fails != 0;
}
