/* attn_bench.c — attention forward + backward TFLOP/s per path and shape, through the op table's slots.
 *
 * Paths: mma (the mma.sync kernels) and cudnn (cuDNN's fused attention), forced with the backend's test hook (the
 * same switch as env QWENFT_ATTN=mma|cudnn). Shapes: seq 4096, causal, Qwen head counts (GQA), one document per row
 * (cuDNN's dense graph) and 4 packed documents per row (its ragged graph), head_dim 128 and 64.
 * FLOPs as ../shared/bench/README.md counts them: 4 * D * H per attended (query, key) pair forward (QK^T and PV; a
 * causal row of one document attends half the full square), backward = 2.5 x forward.
 * Usage: attn_bench [bf16|fp16] (default bf16). Prints one line per path and shape; the first call of each (plan
 * build for cuDNN) is timed apart. */
#include "bench_dev.h"
#include "ops.h"
#include "util.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qf_cuda_set_attention_path(int p); /* 0 auto, 1 mma, 2 cudnn */
const char *qf_cuda_attention_last_path(void);
int qf_cuda_have_cudnn(void);
void qf_cuda_attention_segment_cache(int on);

typedef struct {
    const qf_ops *g;
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse;
    int32_t *seg;
    int B, T, H, KV, D;
} att;
static void fwd(att *a) { a->g->attention_fwd(a->o, a->lse, a->q, a->k, a->v, a->seg, a->B, a->T, a->H, a->KV, a->D); }
static void bwd(att *a) {
    a->g->attention_bwd(a->dq, a->dk, a->dv, a->dout, a->o, a->lse, a->q, a->k, a->v, a->seg, a->B, a->T, a->H, a->KV,
                        a->D);
}
static double time_it(att *a, void (*fn)(att *), int reps) {
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        a->g->sync();
        const double t0 = qf_now();
        for (int i = 0; i < reps; i++) fn(a);
        a->g->sync();
        const double t = (qf_now() - t0) / reps;
        if (t < best) best = t;
    }
    return best;
}

static void bench(const qf_ops *g, const char *model, int path, int B, int T, int H, int KV, int D, int docs) {
    att a = {.g = g, .B = B, .T = T, .H = H, .KV = KV, .D = D};
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D;
    a.q = bench_dev_rand(g, nq, 1, 1), a.k = bench_dev_rand(g, nk, 1, 2), a.v = bench_dev_rand(g, nk, 1, 3);
    a.dout = bench_dev_rand(g, nq, 0.1, 4);
    a.o = g->alloc(nq * 2), a.dq = g->alloc(nq * 2), a.dk = g->alloc(nk * 2), a.dv = g->alloc(nk * 2);
    a.lse = g->alloc((size_t)B * H * T * 4);
    int32_t *seg = qf_malloc((size_t)B * T * 4);
    double pairs = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int len = T / docs;
            seg[b * T + t] = (t / len) * len;
            pairs += t - seg[b * T + t] + 1;
        }
    a.seg = g->alloc((size_t)B * T * 4);
    g->copy_h2d(a.seg, seg, (size_t)B * T * 4);
    qf_cuda_set_attention_path(path);
    double t0 = qf_now();
    fwd(&a);
    g->sync();
    const double first_f = qf_now() - t0;
    const char *ran_f = qf_cuda_attention_last_path();
    t0 = qf_now();
    bwd(&a);
    g->sync();
    const double first_b = qf_now() - t0;
    const char *ran_b = qf_cuda_attention_last_path();
    const double ff = 4.0 * D * H * pairs, fb = 2.5 * ff;
    const double tf = time_it(&a, fwd, 10), tb = time_it(&a, bwd, 10);
    /* cuDNN: again without the per-call read-back of the segment layout (the caller promises seg is unchanged) */
    double tfc = tf, tbc = tb;
    if (path == 2) {
        qf_cuda_attention_segment_cache(1);
        tfc = time_it(&a, fwd, 10), tbc = time_it(&a, bwd, 10);
        qf_cuda_attention_segment_cache(0);
    }
    printf("%-4s %-5s %-12s B=%d T=%d H=%2d KV=%d D=%3d docs=%d  fwd %6.3f ms %5.1f  bwd %6.3f ms %5.1f  "
           "fwd+bwd %5.1f TFLOP/s | no read-back: fwd %5.1f bwd %5.1f fwd+bwd %5.1f  (ran %s/%s; first calls "
           "%.0f/%.0f ms)\n",
           g->act_dtype == QF_DT_F16 ? "fp16" : "bf16", path == 1 ? "mma" : "cudnn", model, B, T, H, KV, D, docs,
           tf * 1e3, ff / tf / 1e12, tb * 1e3, fb / tb / 1e12, (ff + fb) / (tf + tb) / 1e12, ff / tfc / 1e12,
           fb / tbc / 1e12, (ff + fb) / (tfc + tbc) / 1e12, ran_f, ran_b, first_f * 1e3, first_b * 1e3);
    fflush(stdout);
    g->free(a.q), g->free(a.k), g->free(a.v), g->free(a.dout), g->free(a.o), g->free(a.dq), g->free(a.dk);
    g->free(a.dv), g->free(a.lse), g->free(a.seg);
    free(seg);
}

int main(int argc, char **argv) {
    const int f16 = argc > 1 && !strcmp(argv[1], "fp16");
    if (qf_cuda_device_count() <= 0 || !qf_ops_cuda()) {
        printf("attn_bench: no GPU\n");
        return 77;
    }
    const qf_ops *g = f16 ? qf_ops_cuda_f16() : qf_ops_cuda();
    char ver[256];
    qf_cuda_versions(ver, sizeof ver);
    printf("attn_bench: %s; %s table; cuDNN path %s; causal, FLOPs = 4 D H x attended pairs fwd, 2.5x bwd\n", ver,
           g->name, qf_cuda_have_cudnn() ? "built" : "not built");
    static const struct {
        const char *model;
        int B, H, KV, D;
    } shapes[] = {
        {"qwen2.5-7b", 1, 28, 4, 128},
        {"qwen2.5-1.5b", 2, 12, 2, 128},
        {"qwen3-8b", 1, 32, 8, 128},
        {"qwen2.5-0.5b", 4, 14, 2, 64},
        {"qwen2.5-0.5b", 1, 14, 2, 64},
    };
    for (int path = 2; path >= 1; path--) {
        if (path == 2 && !qf_cuda_have_cudnn()) continue;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int docs = 1; docs <= 4; docs += 3)
                bench(g, shapes[i].model, path, shapes[i].B, 4096, shapes[i].H, shapes[i].KV, shapes[i].D, docs);
    }
    printf("peak device bytes held by the backend: %.2f GiB\n", qf_cuda_peak_bytes() / 1073741824.0);
    return 0;
}
