/* test_graph_cuda.c — CUDA graphs of the CUDA tables (ops.h graph_run, kernels/cuda/graph_cuda.cu) and serve's
 * decode step through them (src/model/model.c qf_model_paged_run):
 *   - replay semantics on a body of one add_inplace: the first call runs it eagerly, the second captures and runs
 *     it, later calls replay it (y = y0 + k x after k calls, exactly), the counters say so; body NULL forgets the
 *     graphs (the next call is a warm-up again);
 *   - two keys of one family (ops.h graph_run): the second updates the first's graph in place (no warm-up, no new
 *     instantiation) and the first takes it back the same way; the results are those of the calls run eagerly;
 *   - a body that copies from the host inside the capture (what must not be captured) turns graphs off with one
 *     line, and its work still runs (eagerly): the result is right; qf_cuda_graph_reset turns them back on;
 *   - two models with the same parameters (tests/paged_run_common.h), A eager, B through graphs, over a prompt call
 *     and decoding steps with changing tokens and positions under one key, a crossing of the attention bound's
 *     step (paged_len 64 -> 128: a new key of the same family, the graph updated), a sequence leaving (N 2 -> 1: a new capture), and the
 *     backend's scratch grown between two steps (qf_cuda_scratch_reserve: the graph is recaptured): every call's
 *     logits and final residual and, at the end, every KV pool are the same bits; B ran graphs on most steps;
 *   - on bf16 (a small model and Qwen2.5-7B's layer shapes: C 3584, F 18944, H 28, KV 4, D 128, one layer), fp16
 *     and fp32 (small).
 * Exit: 0 passed, 1 a check failed, 77 "no GPU: skipped". */
#define QF_GPU_TEST_SEED 0x9E3779B97F4A7C15ull
#include "qf_gpu_test.h"
#include "paged_run_common.h"

typedef struct add_arg {
    const qf_ops *g;
    void *y, *x;
    size_t n;
} add_arg;
static void add_body(void *p) {
    add_arg *a = p;
    a->g->add_inplace(a->y, a->x, a->n);
}
static void *spoil_host;
static void spoil_body(void *p) { /* a copy from the host inside the body: graphs must refuse it */
    add_arg *a = p;
    a->g->copy_h2d(a->y, spoil_host, a->n * a->g->act_bytes);
    a->g->add_inplace(a->y, a->x, a->n);
}

static void replay_semantics(const qf_ops *g) {
    const size_t n = 1000;
    float *h = qf_malloc(n * sizeof(float)), *y0 = qf_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = (float)(i % 7), y0[i] = (float)(i % 5) * 0.5f;
    add_arg a = {g, up(g, y0, n), up(g, h, n), n};
    qf_cuda_graph_reset();
    int ran[6];
    for (int k = 0; k < 6; k++) ran[k] = g->graph_run(1001, 0, add_body, &a);
    float *y = down_new(g, a.y, n);
    double err = 0;
    for (size_t i = 0; i < n; i++) err = fmax(err, fabs(y[i] - (y0[i] + 6.0f * h[i])));
    qf_cuda_graph_stat st;
    qf_cuda_graph_stats(&st);
    char lab[64];
    snprintf(lab, sizeof lab, "%-9s", g->name);
    qf_gpu_report(lab, 60, "graph_run x6 of y += x: y = y0 + 6 x", err, 0);
    qf_gpu_report_bool(lab, check_name("warm-up eager (%d), then captured and replayed (%d %d %d %d %d)", ran[0],
                                       ran[1], ran[2], ran[3], ran[4], ran[5]),
                       !ran[0] && ran[1] && ran[2] && ran[3] && ran[4] && ran[5]);
    qf_gpu_report_bool(lab, check_name("counters: %llu warm-up, %llu capture, %llu replays, %d cached",
                                       (unsigned long long)st.warmups, (unsigned long long)st.captures,
                                       (unsigned long long)st.replays, st.cached),
                       st.warmups == 1 && st.captures == 1 && st.replays == 4 && st.cached == 1 && !st.off);
    qf_gpu_report_bool(lab, check_name("host time: %.3f ms warming up, %.3f ms capturing", 1e3 * st.warmup_s,
                                       1e3 * st.capture_s),
                       st.warmup_s > 0 && st.capture_s > 0 && st.capture_s < 10.0);
    g->graph_run(0, 0, NULL, NULL);
    qf_cuda_graph_stats(&st);
    qf_gpu_report_bool(lab, "graph_run(body NULL) forgets the graphs", st.cached == 0 && !g->graph_run(1001, 0, add_body, &a));
    free(y);
    /* a spoiled capture: off for the run, the work done eagerly (the host copy holds y0 in the table's act type,
     * as copy_h2d takes it) */
    void *y0act = qf_malloc(n * g->act_bytes), *y0dev = up(g, y0, n);
    g->copy_d2h(y0act, y0dev, n * g->act_bytes);
    g->free(y0dev);
    spoil_host = y0act;
    qf_cuda_graph_reset();
    g->graph_run(1002, 0, spoil_body, &a); /* warm-up: y = y0 + x */
    const int r2 = g->graph_run(1002, 0, spoil_body, &a); /* capture: refused, then eager: y = y0 + x again */
    qf_cuda_graph_stats(&st);
    y = down_new(g, a.y, n);
    err = 0;
    for (size_t i = 0; i < n; i++) err = fmax(err, fabs(y[i] - (y0[i] + h[i])));
    qf_gpu_report(lab, 60, "a body that copies from the host: still runs (eagerly)", err, 0);
    qf_gpu_report_bool(lab, "  ... and turns graphs off (not captured)", !r2 && st.off && st.captures == 0);
    qf_gpu_report_bool(lab, "  ... and while off graph_run runs bodies eagerly", !g->graph_run(1001, 0, add_body, &a));
    qf_cuda_graph_reset();
    qf_cuda_graph_stats(&st);
    qf_gpu_report_bool(lab, "qf_cuda_graph_reset turns them on again", !st.off && st.cached == 0);
    g->free(a.y), g->free(a.x);
    free(y), free(h), free(y0), free(y0act);
}

/* QWENFT_GRAPH_UPDATE (a bench hook, on unless 0): a new key of a cached family updates that family's graph */
static int graph_update_on(void) {
    const char *e = getenv("QWENFT_GRAPH_UPDATE");
    return !e || strcmp(e, "0");
}

/* a family of keys (kernel arguments differ): a new key updates the cached exec in place, no warm-up; the old key is
 * then the family's again by another update */
static void family_update(const qf_ops *g) {
    const size_t n = 1000;
    float *h = qf_malloc(n * sizeof(float)), *y0 = qf_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = (float)(i % 3), y0[i] = (float)(i % 11) * 0.25f;
    add_arg a1 = {g, up(g, y0, n), up(g, h, n), n}, a2 = a1;
    a2.y = up(g, y0, n);
    qf_cuda_graph_reset();
    int r[6];
    r[0] = g->graph_run(3001, 77, add_body, &a1); /* warm-up: y1 = y0 + x */
    r[1] = g->graph_run(3001, 77, add_body, &a1); /* captured: y1 = y0 + 2x */
    r[2] = g->graph_run(3002, 77, add_body, &a2); /* updated: y2 = y0 + x */
    r[3] = g->graph_run(3002, 77, add_body, &a2); /* replayed: y2 = y0 + 2x */
    r[4] = g->graph_run(3001, 77, add_body, &a1); /* updated back: y1 = y0 + 3x */
    r[5] = g->graph_run(3001, 77, add_body, &a1); /* replayed: y1 = y0 + 4x */
    qf_cuda_graph_stat st;
    qf_cuda_graph_stats(&st);
    float *y1 = down_new(g, a1.y, n), *y2 = down_new(g, a2.y, n);
    const int upd = graph_update_on();
    double err = 0;
    for (size_t i = 0; i < n; i++)
        err = fmax(err, fmax(fabs(y1[i] - (y0[i] + 4.0f * h[i])), fabs(y2[i] - (y0[i] + 2.0f * h[i]))));
    char lab[64];
    snprintf(lab, sizeof lab, "%-9s", g->name);
    qf_gpu_report(lab, 60, "two keys of one family, 6 calls: y1 = y0 + 4 x, y2 = y0 + 2 x", err, 0);
    qf_gpu_report_bool(lab, check_name("graphs ran %d %d %d %d %d %d; %llu warm-ups, %llu captured, %llu updated, "
                                       "%d cached", r[0], r[1], r[2], r[3], r[4], r[5],
                                       (unsigned long long)st.warmups, (unsigned long long)st.captures,
                                       (unsigned long long)st.updated, st.cached),
                       upd ? !r[0] && r[1] && r[2] && r[3] && r[4] && r[5] && st.warmups == 1 && st.captures == 1 &&
                                 st.updated == 2 && st.replays == 2 && st.cached == 1
                           : !r[0] && r[1] && !r[2] && r[3] && r[4] && r[5] && st.warmups == 2 &&
                                 st.captures == 2 && st.updated == 0 && st.cached == 2);
    g->free(a1.y), g->free(a2.y), g->free(a1.x);
    free(y1), free(y2), free(h), free(y0);
}

/* the serve decode step: A eager, B graphs (see the header comment) */
static void decode_steps(const qf_ops *g, const char *shape, const qf_model_config *c) {
    char lab[96];
    snprintf(lab, sizeof lab, "%-9s %s", g->name, shape);
    qf_cuda_graph_reset();
    qf_err e = {0};
    pr_state s;
    const int plen[2] = {58, 30}; /* sequence 0 decodes through positions 58..: the bound 64 -> 128 at step 6 */
    const int flags[2] = {QF_MODEL_JOINED, QF_MODEL_JOINED}; /* as serve lays the model out */
    if (pr_init(&s, g, c, 2, plen, 256, flags, &e)) {
        qf_gpu_report_bool(lab, check_name("set-up: %s", e.msg), 0);
        return;
    }
    qf_gpu_report_bool(lab, check_name("prompt call (ragged rows: eager both) %s", s.bad[0] ? s.bad : "equal"), !s.bad[0]);
    qf_cuda_graph_stat st[20];
    const int upd = graph_update_on();
    for (int step = 0; step < 20; step++) {
        if (step == 4) qf_cuda_scratch_reserve(qf_cuda_current_bytes() / 8 + ((size_t)64 << 20)); /* grows it */
        if (step == 10) s.active[1] = 0; /* N 2 -> 1 */
        pr_decode(&s);
        qf_cuda_graph_stats(&st[step]);
    }
    pr_compare_pools(&s);
    qf_gpu_report_bool(lab, check_name("20 decoding steps, graphs vs eager: %s", s.bad[0] ? s.bad : "the same bits"),
                       !s.bad[0]);
    /* keys: N 2 bound 64 (steps 0-5), N 2 bound 128 (6-9), N 1 bound 128 (10-19) */
    qf_gpu_report_bool(lab, check_name("step 0 warm-up, step 1 captured, 2-3 replayed (%llu/%llu/%llu)",
                                       (unsigned long long)st[0].warmups, (unsigned long long)st[1].captures,
                                       (unsigned long long)st[3].replays),
                       st[0].warmups == 1 && st[0].captures == 0 && st[1].captures == 1 && st[3].replays == 2);
    qf_gpu_report_bool(lab, check_name("scratch grown before step 4: recaptured there (recaptures %llu, captures %llu)",
                                       (unsigned long long)st[4].regrown, (unsigned long long)st[4].captures),
                       st[4].regrown == 1 && st[4].captures == 2 && st[5].replays == st[4].replays + 1);
    if (upd)
        qf_gpu_report_bool(lab, check_name("bound 64 -> 128 at step 6: the family's graph updated (updates %llu, "
                                           "warm-ups %llu, captures %llu)", (unsigned long long)st[6].updated,
                                           (unsigned long long)st[6].warmups, (unsigned long long)st[6].captures),
                           st[6].updated == 1 && st[6].warmups == 1 && st[6].captures == 2 && st[7].replays == st[5].replays + 1);
    else
        qf_gpu_report_bool(lab, check_name("bound 64 -> 128 at step 6: a new key (warm-ups %llu, capture at 7: %llu)",
                                           (unsigned long long)st[6].warmups, (unsigned long long)st[7].captures),
                           st[6].warmups == 2 && st[7].captures == 3);
    qf_gpu_report_bool(lab, check_name("N 2 -> 1 at step 10: a new family (warm-ups %llu, capture at 11: %llu)",
                                       (unsigned long long)st[10].warmups, (unsigned long long)st[11].captures),
                       st[10].warmups == (uint64_t)(3 - upd) && st[11].captures == (uint64_t)(4 - upd));
    qf_gpu_report_bool(lab, check_name("graphs ran on %d of 20 steps, %llu replays, off %d", s.graph_steps,
                                       (unsigned long long)st[19].replays, st[19].off),
                       s.graph_steps == 17 + upd && st[19].replays == 13 + (uint64_t)upd && !st[19].off);
    pr_free(&s);
}

int main(void) {
    if (qf_cuda_device_count() <= 0 || !qf_ops_cuda()) {
        printf("test_graph_cuda: no GPU: skipped\n");
        return 77;
    }
    const qf_ops *gs[3] = {qf_ops_cuda(), qf_ops_cuda_f16(), qf_ops_cuda_f32()};
    qf_model_config small, big;
    pr_config(&small, 512, 1024, 3, 8, 2, 64, 1000);
    pr_config(&big, 3584, 18944, 1, 28, 4, 128, 4096); /* Qwen2.5-7B's layer, a short vocabulary */
    for (int i = 0; i < 3; i++) {
        replay_semantics(gs[i]);
        family_update(gs[i]);
        decode_steps(gs[i], "small", &small);
    }
    decode_steps(gs[0], "7B layer", &big);
    printf("test_graph_cuda: %d checks, %d failed\n", n_checks, n_fail);
    return n_fail ? 1 : 0;
}
