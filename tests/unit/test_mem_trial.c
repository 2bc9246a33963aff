/* test_mem_trial.c — the allocations of a layout plan's set-up (model/mem_trial.h), on the CPU backend: a trial
 * records the first failure (bytes, host or backend memory, which buffer) and, once failed, takes no more memory;
 * the test hook's limit refuses exactly the allocation that would pass it; a model's activations set up under a
 * trial that runs out leave the trial failed at "activations" without stopping, and qf_model_free_acts takes
 * them down so that the same model allocates them again, to the byte of qf_model_act_bytes (the fallback's path). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model.h"
#include "qf_test.h"

static void check_trial(void) {
    const qf_ops *o = qf_ops_cpu();
    /* no trial: plain allocations */
    void *p = qf_mem_trial_alloc(NULL, o, 64, "x");
    CHECK(p != NULL);
    o->free(p);
    /* the hook's limit: 100 bytes */
    qf_mem_trial t = {.on = 1, .refuse_past = 100};
    void *a = qf_mem_trial_alloc(&t, o, 60, "first");
    CHECK(a != NULL && t.held == 60 && !t.failed);
    void *b = qf_mem_trial_alloc(&t, o, 40, "second"); /* held 100: not past the limit */
    CHECK(b != NULL && t.held == 100 && !t.failed);
    void *c = qf_mem_trial_alloc(&t, NULL, 1, "host one"); /* 101: refused, host memory */
    CHECK(c == NULL && t.failed && t.host == 1 && t.bytes == 1 && !strcmp(t.where, "host one"), "%s", t.where);
    CHECK(qf_mem_trial_failed(&t));
    /* failed: no more memory taken, the first failure stays the one reported */
    t.refuse_past = 0;
    void *d = qf_mem_trial_alloc(&t, o, 8, "later");
    CHECK(d == NULL && !strcmp(t.where, "host one") && t.held == 100);
    o->free(a);
    o->free(b);
    /* not on (a layout set by hand): the hook still refuses, the caller's error stands (no failed state kept) */
    qf_mem_trial h = {.on = 0, .refuse_past = 10};
    CHECK(qf_mem_trial_alloc(&h, o, 11, "hand") == NULL && h.failed && !qf_mem_trial_failed(&h));
}

static void check_model(void) {
    qf_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.arch, sizeof c.arch, "qwen3");
    c.vocab_size = 40;
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_layers = 3;
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
    qf_model m;
    qf_err e = {0};
    CHECK(qf_model_create(&m, &c, qf_ops_cpu(), 0, &e) == 0, "%s", e.msg);
    const int B = 2, T = 16;
    int64_t want = qf_model_act_bytes(&c, B, T, QF_ACKPT_NONE, -1, 4);
    qf_mem_trial t = {.on = 1, .refuse_past = want / 2};
    m.trial = &t;
    CHECK(qf_model_alloc_acts(&m, B, T, QF_ACKPT_NONE, -1, &e) == 0, "%s", e.msg);
    CHECK(t.failed && !t.host && !strcmp(t.where, "activations") && t.held <= want / 2, "%s held %lld",
          t.where, (long long)t.held);
    qf_model_free_acts(&m);
    CHECK(m.nacts == 0 && m.act_bytes == 0 && m.res == NULL && m.d_tokens == NULL);
    /* the next plan: selective recomputation, no trial limit */
    qf_mem_trial t2 = {.on = 1};
    m.trial = &t2;
    CHECK(qf_model_alloc_acts(&m, B, T, QF_ACKPT_SELECTIVE, -1, &e) == 0, "%s", e.msg);
    int64_t sel = qf_model_act_bytes(&c, B, T, QF_ACKPT_SELECTIVE, -1, 4);
    CHECK(!t2.failed && (int64_t)m.act_bytes == sel && t2.held == sel, "act_bytes %zu, held %lld, want %lld",
          m.act_bytes, (long long)t2.held, (long long)sel);
    m.trial = NULL;
    qf_model_free(&m);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    check_trial();
    check_model();
    int rc = qf_test_end("test_mem_trial", NULL);
    MPI_Finalize();
    return rc;
}
