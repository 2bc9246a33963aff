/* decode_bench.c — where a decoding step's time goes on the GPU, through the op table (the [serve] issue's decode
 * target: a step that reads the weights once near the memory-bandwidth limit).
 *
 * For a model shape (default Qwen2.5-7B: C 3584, F 18944, H 28, KV 4, D 128, V 152064; bf16):
 *  1. each linear layer's matmul_fwd at M = 1, 2, 8, 32, 128 rows: microseconds and the weights' GB/s; and gate with
 *     up, q with k and v, each as one GEMM of their rows together against the separate calls (what joining them
 *     would give the unfused layers that many sequences run);
 *  2. attention_paged for M sequences of CTX cached positions (blocks of 16);
 *  3. the pointwise ops at M rows (launch-bound at decode sizes);
 *  4. the layer stack (28 layers of the model's op sequence, no head) queued back to back without a host sync, and
 *     the same with the head: the eager step the model runs, against the sum of its parts;
 *  5. where the decoding fast path takes the rows (ops.h decode_qkv, decode_mlp: M <= 2 at these shapes), its
 *     parts and its step (6 launches a layer);
 *  6. with --cuda-graphs on (the default): the same whole steps (layers + head) replayed as one CUDA graph each
 *     (ops.h graph_run, as qwen-ft serve runs its decode step), next to the queued ones: what the launch gaps cost.
 *     Then serve's step queued one ahead (--decode-ahead): the next step's tokens fed from the picks on the device,
 *     the picks read while the next step runs: what the host's round trip between steps costs, against the above.
 *  7. with --prefill P[,P...]: a prompt chunk of P tokens of one sequence from position 0 (serve's first call of a
 *     prompt): each linear layer's matmul_fwd at M = P (TFLOP/s), attention_paged over the chunk (with the append)
 *     against attention_fwd on the same q, k, v (the training kernel: causal, contiguous), and the call (28 layers
 *     at M = P, the head on the last row) queued back to back: the first token's GPU time.
 * Timing: the best of 5 rounds of REPS calls between syncs (the host queues ahead, as in the model).
 * Usage: decode_bench [CTX] [--cuda-graphs on|off] [--prefill P[,P...]] (CTX default 512). Exits 77 without a GPU, 2 on a bad argument. */
#include "bench_dev.h"
#include "ops.h"
#include "util.h"
#include "model/backend.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dbench {
    const qf_ops *g;
    int C, F, H, KV, D, V, L, M, ctx, bs, maxb;
    int joined; /* run_layer joins q|k|v and gate|up as the paged model does for calls over two tokens */
    void *w[10], *x, *y, *big, *res, *q, *k, *v, *att, *kp, *vp, *gate, *up, *swi, *ln, *normw, *bias, *gu, *bqkv;
    float *rstd;
    int32_t *pos, *seq, *btab, *tok, *hbtab;
} dbench;

enum { W_Q, W_KV, W_O, W_GU, W_D, W_HEAD, W_V, W_UP, W_GU2, W_QKV }; /* v and up: weights of their own (distinct
                                                                      * bytes); gate+up [2F, C], q+k+v [HD+2KD, C] */

/* n values in [-amp, amp) on the backend, each buffer its own stream */
static void *dev_fill(const qf_ops *g, size_t n, float amp) { return bench_dev_rand(g, n, amp, n); }

static double best_of(dbench *b, void (*fn)(dbench *, int), int arg, int reps) {
    double best = 1e30;
    fn(b, arg); /* warm: plans, caches */
    for (int r = 0; r < 5; r++) {
        b->g->sync();
        const double t0 = qf_now();
        for (int i = 0; i < reps; i++) fn(b, arg);
        b->g->sync();
        const double t = (qf_now() - t0) / reps;
        if (t < best) best = t;
    }
    return best;
}

static int lin_in[6], lin_out[6]; /* set from the shape in main */
static const char *const lin_name[6] = {"q", "k|v", "o", "gate|up", "down", "head"};

static void run_matmul(dbench *b, int i) { b->g->matmul_fwd(b->big, b->x, b->w[i], NULL, b->M, lin_in[i], lin_out[i], 0); }
/* the same rows through one GEMM of gate and up together ([2F, C]: i = 0) or of q, k and v together (i = 1): what
 * joining them would give where cuBLASLt runs (M > 2; the weights adjacent as one matrix) */
static void run_matmul_joined(dbench *b, int i) {
    const int out = i == 0 ? 2 * b->F : (b->H + 2 * b->KV) * b->D;
    b->g->matmul_fwd(b->big, b->x, b->w[i == 0 ? W_GU2 : W_QKV], NULL, b->M, b->C, out, 0);
}
static void run_paged(dbench *b, int unused) {
    (void)unused;
    b->g->attention_paged(b->att, b->q, b->k, b->v, b->kp, b->vp, b->seq, b->pos, b->btab, b->M, b->maxb, b->bs, b->H,
                          b->KV, b->D, b->ctx + 1);
}
static void run_rmsnorm(dbench *b, int unused) {
    (void)unused;
    b->g->rmsnorm_fwd(b->ln, b->rstd, b->res, b->normw, b->M, b->C, 1e-6f);
}
static void run_rope(dbench *b, int unused) {
    (void)unused;
    b->g->rope_fwd(b->q, b->pos, b->M, b->H, b->D, 1e6);
}
static void run_swiglu(dbench *b, int unused) {
    (void)unused;
    b->g->swiglu_fwd(b->swi, b->gate, b->up, b->M, b->F);
}
/* one layer as model.c's layer_forward queues it (b->joined: as it does in paged mode, QF_MODEL_JOINED) */
static void run_layer(dbench *b) {
    const qf_ops *g = b->g;
    int M = b->M, C = b->C, F = b->F, HD = b->H * b->D, KD = b->KV * b->D;
    g->rmsnorm_fwd(b->ln, b->rstd, b->res, b->normw, M, C, 1e-6f);
    if (b->joined) {
        g->matmul_fwd(b->gu, b->ln, b->w[W_QKV], b->bqkv, M, C, HD + 2 * KD, 0);
        g->qkv_rope(b->q, b->k, b->v, b->gu, b->pos, M, b->H, b->KV, b->D, 1e6);
    } else {
        g->matmul_fwd(b->q, b->ln, b->w[W_Q], b->bias, M, C, HD, 0);
        g->matmul_fwd(b->k, b->ln, b->w[W_KV], b->bias, M, C, KD, 0);
        g->matmul_fwd(b->v, b->ln, b->w[W_V], b->bias, M, C, KD, 0);
        g->rope_fwd(b->q, b->pos, M, b->H, b->D, 1e6);
        g->rope_fwd(b->k, b->pos, M, b->KV, b->D, 1e6);
    }
    run_paged(b, 0);
    g->matmul_fwd_add(b->y, b->att, b->w[W_O], b->res, M, HD, C);
    g->rmsnorm_fwd(b->ln, b->rstd, b->y, b->normw, M, C, 1e-6f);
    if (b->joined) {
        g->matmul_fwd(b->gu, b->ln, b->w[W_GU2], NULL, M, C, 2 * F, 0);
        g->swiglu_joined(b->swi, b->gu, M, F);
    } else {
        g->matmul_fwd(b->gate, b->ln, b->w[W_GU], NULL, M, C, F, 0);
        g->matmul_fwd(b->up, b->ln, b->w[W_UP], NULL, M, C, F, 0);
        g->swiglu_fwd(b->swi, b->gate, b->up, M, F);
    }
    g->matmul_fwd_add(b->res, b->swi, b->w[W_D], b->y, M, F, C);
}
/* the decoding fast path's layer (model.c layer_forward_decode): 6 launches */
static qf_decode_qkv fast_qkv(dbench *b) {
    return (qf_decode_qkv){.q = b->q, .kpool = b->kp, .vpool = b->vp, .x = b->res, .ln_w = b->normw, .wq = b->w[W_Q],
                           .bq = b->bias, .wk = b->w[W_KV], .bk = b->bias, .wv = b->w[W_V], .bv = b->bias,
                           .seq = b->seq, .pos = b->pos, .btab = b->btab, .ln = b->ln, .k = b->k, .v = b->v,
                           .rstd = b->rstd, .N = b->M, .C = b->C, .H = b->H, .KV = b->KV, .D = b->D, .maxb = b->maxb,
                           .bs = b->bs, .eps = 1e-6f, .theta = 1e6};
}
static qf_decode_mlp fast_mlp(dbench *b) {
    return (qf_decode_mlp){.out = b->swi, .x = b->y, .ln_w = b->normw, .wg = b->w[W_GU], .wu = b->w[W_UP],
                           .ln = b->ln, .gate = b->gate, .up = b->up, .rstd = b->rstd, .N = b->M, .C = b->C,
                           .F = b->F, .eps = 1e-6f};
}
static void run_fast_qkv(dbench *b, int unused) {
    (void)unused;
    qf_decode_qkv a = fast_qkv(b);
    QF_CHECK(b->g->decode_qkv(&a));
}
static void run_fast_mlp(dbench *b, int unused) {
    (void)unused;
    qf_decode_mlp a = fast_mlp(b);
    QF_CHECK(b->g->decode_mlp(&a));
}
static void run_paged_only(dbench *b, int unused) {
    (void)unused;
    b->g->attention_paged(b->att, b->q, NULL, NULL, b->kp, b->vp, b->seq, b->pos, b->btab, b->M, b->maxb, b->bs, b->H,
                          b->KV, b->D, b->ctx + 1);
}
static void run_layer_fast(dbench *b) {
    const qf_ops *g = b->g;
    run_fast_qkv(b, 0);
    run_paged_only(b, 0);
    g->matmul_fwd_add(b->y, b->att, b->w[W_O], b->res, b->M, b->H * b->D, b->C);
    run_fast_mlp(b, 0);
    g->matmul_fwd_add(b->res, b->swi, b->w[W_D], b->y, b->M, b->F, b->C);
}
static void run_stack_fast(dbench *b, int head) {
    for (int l = 0; l < b->L; l++) run_layer_fast(b);
    if (head) {
        b->g->rmsnorm_fwd(b->ln, b->rstd, b->res, b->normw, b->M, b->C, 1e-6f);
        b->g->matmul_fwd(b->big, b->ln, b->w[W_HEAD], NULL, b->M, b->C, b->V, 0);
    }
}
static void run_stack(dbench *b, int head) {
    for (int l = 0; l < b->L; l++) run_layer(b);
    if (head) b->g->matmul_fwd(b->big, b->ln, b->w[W_HEAD], NULL, b->M, b->C, b->V, 0);
}

/* what a serve step adds around the layers (src/model/model.c paged_begin, paged_head; serve_engine.c): the
 * host's positions, sequences, block tables (128 sequences x maxb) and tokens copied up, the embedding, the layers,
 * the final norm and head, and the greedy pick read back (argmax_rows syncs) */
static void run_serve_step(dbench *b, int fast) {
    const qf_ops *g = b->g;
    int32_t hp[128], hs[128], ht[128];
    for (int i = 0; i < b->M; i++) hp[i] = b->ctx, hs[i] = i, ht[i] = i;
    g->copy_h2d(b->pos, hp, (size_t)b->M * 4), g->copy_h2d(b->seq, hs, (size_t)b->M * 4);
    g->copy_h2d(b->btab, b->hbtab, (size_t)128 * b->maxb * 4);
    g->copy_h2d(b->tok, ht, (size_t)b->M * 4);
    g->embedding_fwd(b->res, b->tok, b->w[W_HEAD], b->M, b->C);
    if (fast) run_stack_fast(b, 1);
    else run_stack(b, 1);
    int32_t ids[128];
    g->argmax_rows(ids, NULL, b->big, b->M, b->V);
}
/* the whole step as one graph (ops.h graph_run: the first call of a key eager, the second captured, then replays) */
typedef struct gstep {
    dbench *b;
    int fast, embed;
} gstep;
static void step_body(void *p) {
    gstep *s = p;
    if (s->embed) s->b->g->embedding_fwd(s->b->res, s->b->tok, s->b->w[W_HEAD], s->b->M, s->b->C);
    if (s->fast) run_stack_fast(s->b, 1);
    else run_stack(s->b, 1);
}
static uint64_t step_key(const dbench *b, int fast, int embed) {
    return 0xdec0de0000ull + (uint64_t)b->M * 8 + (uint64_t)fast * 2 + (uint64_t)embed * 4 + ((uint64_t)b->joined << 19) +
           ((uint64_t)b->ctx << 20);
}
static void run_stack_graph(dbench *b, int fast) {
    gstep s = {b, fast, 0};
    b->g->graph_run(step_key(b, fast, 0), 0, step_body, &s);
}
/* run_serve_step with the embedding, layers and head as one graph (the copies up and the argmax outside it) */
static void run_serve_step_graph(dbench *b, int fast) {
    const qf_ops *g = b->g;
    int32_t hp[128], hs[128], ht[128];
    for (int i = 0; i < b->M; i++) hp[i] = b->ctx, hs[i] = i, ht[i] = i;
    g->copy_h2d(b->pos, hp, (size_t)b->M * 4), g->copy_h2d(b->seq, hs, (size_t)b->M * 4);
    g->copy_h2d(b->tok, ht, (size_t)b->M * 4); /* the tables did not change: serve copies them only when they do */
    gstep s = {b, fast, 1};
    g->graph_run(step_key(b, fast, 1), 0, step_body, &s);
    int32_t ids[128];
    g->argmax_rows(ids, NULL, b->big, b->M, b->V);
}
/* serve's decode step one ahead (--decode-ahead, src/model/paged_ahead.h): K serve steps with the graph, each queued
 * before the previous step's picks are read; the picks stay on the device (argmax_rows_dev, two slots), feed the
 * next step's tokens (copy_d2d) and come back through page-locked memory (copy_start); seconds a step */
static double serve_ahead(dbench *b, int K) {
    const qf_ops *g = b->g;
    int32_t *dev[2] = {g->alloc(128 * 4), g->alloc(128 * 4)};
    int32_t *host = aligned_alloc(4096, 4096); /* two slots of 128 ids */
    QF_CHECK(dev[0] && dev[1] && host);
    const char *why = NULL;
    const int pinned = qf_backend_pin(g, host, 4096, &why);
    int32_t hp[128], hs[128], ht[128], ids[128];
    for (int i = 0; i < b->M; i++) hp[i] = b->ctx, hs[i] = i, ht[i] = i;
    int ticket[2] = {-1, -1};
    g->sync();
    const double t0 = qf_now();
    for (int s = 0; s < K; s++) {
        const int k = s & 1;
        g->copy_h2d(b->pos, hp, (size_t)b->M * 4), g->copy_h2d(b->seq, hs, (size_t)b->M * 4);
        if (s == 0) g->copy_h2d(b->tok, ht, (size_t)b->M * 4);
        else g->copy_d2d(b->tok, dev[1 - k], (size_t)b->M * 4); /* the previous step's picks, on the device */
        gstep st = {b, 1, 1};
        g->graph_run(step_key(b, 1, 1), 0, step_body, &st);
        g->argmax_rows_dev(dev[k], NULL, b->big, b->M, b->V);
        ticket[k] = g->copy_start(host + 128 * k, dev[k], (size_t)b->M * 4, QF_COPY_D2H);
        if (s > 0) { /* the previous step's picks, read while this one runs */
            g->copy_finish(ticket[1 - k], 1);
            memcpy(ids, host + 128 * (1 - k), (size_t)b->M * 4);
        }
    }
    g->copy_finish(ticket[(K - 1) & 1], 1);
    const double t = (qf_now() - t0) / K;
    if (pinned) qf_backend_unpin(g, host);
    free(host);
    g->free(dev[0]), g->free(dev[1]);
    return t;
}
static void run_argmax(dbench *b, int unused) {
    (void)unused;
    int32_t ids[128];
    b->g->argmax_rows(ids, NULL, b->big, b->M, b->V);
}

/* ---- 7. a prompt chunk of P tokens (--prefill) ---- */
static void run_attn_fwd(dbench *b, int unused) {
    (void)unused;
    b->g->attention_fwd(b->att, b->rstd, b->q, b->k, b->v, b->tok, 1, b->M, b->H, b->KV, b->D);
}
/* the call serve makes for a prompt chunk: the layers at M rows, the final norm and the head on the last row */
static void run_prefill(dbench *b, int unused) {
    (void)unused;
    for (int l = 0; l < b->L; l++) run_layer(b);
    b->g->rmsnorm_fwd(b->ln, b->rstd, b->res, b->normw, 1, b->C, 1e-6f);
    b->g->matmul_fwd(b->big, b->ln, b->w[W_HEAD], NULL, 1, b->C, b->V, 0);
}
static void prefill_section(const dbench *base, int P) {
    dbench b = *base; /* the weights shared; activations, pools and tables of P rows */
    const qf_ops *g = b.g;
    const int HD = b.H * b.D, KD = b.KV * b.D;
    b.M = P, b.ctx = P - 1, b.maxb = (P + b.bs - 1) / b.bs;
    void *bufs[32];
    int nb = 0;
#define PB(x) (bufs[nb++] = (x))
    b.x = PB(dev_fill(g, (size_t)P * b.F, 1)), b.y = PB(g->alloc((size_t)P * b.F * 2));
    b.res = PB(dev_fill(g, (size_t)P * b.C, 1)), b.q = PB(dev_fill(g, (size_t)P * HD, 1));
    b.k = PB(dev_fill(g, (size_t)P * KD, 1)), b.v = PB(dev_fill(g, (size_t)P * KD, 1));
    b.att = PB(g->alloc((size_t)P * HD * 2)), b.ln = PB(g->alloc((size_t)P * b.C * 2));
    b.gate = PB(dev_fill(g, (size_t)P * b.F, 1)), b.up = PB(dev_fill(g, (size_t)P * b.F, 1));
    b.swi = PB(g->alloc((size_t)P * b.F * 2)), b.big = PB(g->alloc(((size_t)P * b.F > (size_t)b.V ? (size_t)P * b.F : (size_t)b.V) * 2)); /* [P, F] or the head's [1, V] */
    b.rstd = PB(g->alloc((size_t)P * b.H * 4)); /* attention_fwd's lse [P, H] too */
    b.kp = PB(dev_fill(g, (size_t)b.maxb * b.bs * KD, 1)), b.vp = PB(dev_fill(g, (size_t)b.maxb * b.bs * KD, 1));
    int32_t *h = qf_malloc((size_t)(P > b.maxb ? P : b.maxb) * 4);
    for (int i = 0; i < b.maxb; i++) h[i] = i;
    b.btab = PB(g->alloc((size_t)b.maxb * 4));
    g->copy_h2d(b.btab, h, (size_t)b.maxb * 4);
    for (int i = 0; i < P; i++) h[i] = 0; /* one sequence; attention_fwd's seg_start: one segment from 0 */
    b.seq = PB(g->alloc((size_t)P * 4)), b.tok = PB(g->alloc((size_t)P * 4));
    g->copy_h2d(b.seq, h, (size_t)P * 4), g->copy_h2d(b.tok, h, (size_t)P * 4);
    for (int i = 0; i < P; i++) h[i] = i;
    b.pos = PB(g->alloc((size_t)P * 4));
    g->copy_h2d(b.pos, h, (size_t)P * 4);
    free(h);
#undef PB
    printf("prefill: one sequence, a chunk of P = %d tokens from position 0\n", P);
    double flop = 0;
    for (int i = 0; i < 5; i++) {
        const double t = best_of(&b, run_matmul, i, 10);
        const double f = 2.0 * P * lin_in[i] * lin_out[i];
        printf("  matmul %-8s [%d x %d]  %8.1f us  %5.0f TFLOP/s\n", lin_name[i], lin_out[i], lin_in[i], t * 1e6,
               f / t / 1e12);
        flop += f * (i == W_KV || i == W_GU ? 2 : 1);
    }
    const double ta = best_of(&b, run_paged, 0, 10), tf = best_of(&b, run_attn_fwd, 0, 10);
    const double af = 4.0 * b.H * b.D * ((double)P * (P + 1) / 2); /* causal: q.k and p.v */
    printf("  attention over the chunk: attention_paged %.1f us (%.0f TFLOP/s), attention_fwd %.1f us (%.0f TFLOP/s)\n",
           ta * 1e6, af / ta / 1e12, tf * 1e6, af / tf / 1e12);
    flop = (flop + af) * b.L + 2.0 * b.C * b.V;
    const double tp = best_of(&b, run_prefill, 0, 2);
    printf("  the call (28 layers at M = %d, the head on the last row): %.2f ms = %.0f tokens/s, %.0f TFLOP/s\n", P,
           tp * 1e3, P / tp, flop / tp / 1e12);
    fflush(stdout);
    g->sync();
    for (int i = 0; i < nb; i++) g->free(bufs[i]);
}

int main(int argc, char **argv) {
    if (qf_cuda_device_count() <= 0 || !qf_ops_cuda()) {
        printf("decode_bench: no GPU\n");
        return 77;
    }
    int ctx = 512, graphs = 1, npre = 0, pre[8];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cuda-graphs") && i + 1 < argc && (!strcmp(argv[i + 1], "on") || !strcmp(argv[i + 1], "off"))) {
            graphs = !strcmp(argv[++i], "on");
        } else if (!strncmp(argv[i], "--cuda-graphs=", 14) && (!strcmp(argv[i] + 14, "on") || !strcmp(argv[i] + 14, "off"))) {
            graphs = !strcmp(argv[i] + 14, "on");
        } else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) {
            char *p = argv[++i], *end;
            for (;;) {
                const long v = strtol(p, &end, 10);
                if (end == p || v < 1 || v > 32768 || npre == 8 || (*end && *end != ',')) {
                    fprintf(stderr, "decode_bench: bad --prefill '%s' (up to 8 chunk sizes 1-32768, comma-separated)\n", argv[i]);
                    return 2;
                }
                pre[npre++] = (int)v;
                if (!*end) break;
                p = end + 1;
            }
        } else if (argv[i][0] != '-' && atoi(argv[i]) >= 1 && atoi(argv[i]) <= 1 << 20) {
            ctx = atoi(argv[i]);
        } else {
            fprintf(stderr, "decode_bench: bad argument '%s' (usage: decode_bench [CTX] [--cuda-graphs on|off] [--prefill P[,P...]])\n", argv[i]);
            return 2;
        }
    }
    dbench b = {.g = qf_ops_cuda(), .C = 3584, .F = 18944, .H = 28, .KV = 4, .D = 128, .V = 152064, .L = 28,
                .ctx = ctx, .bs = 16};
    const qf_ops *g = b.g;
    const int Mmax = 128;
    char ver[256];
    qf_cuda_versions(ver, sizeof ver);
    printf("decode_bench: %s; Qwen2.5-7B shapes, bf16, %d cached positions per sequence; cuda graphs %s\n", ver, b.ctx,
           graphs ? "on" : "off");
    int HD = b.H * b.D, KD = b.KV * b.D;
    int ins[6] = {b.C, b.C, HD, b.C, b.F, b.C}, outs[6] = {HD, KD, b.C, b.F, b.C, b.V};
    memcpy(lin_in, ins, sizeof ins), memcpy(lin_out, outs, sizeof outs);
    for (int i = 0; i < 6; i++) b.w[i] = dev_fill(g, (size_t)lin_in[i] * lin_out[i], 0.02f);
    b.w[W_V] = dev_fill(g, (size_t)b.C * KD, 0.02f), b.w[W_UP] = dev_fill(g, (size_t)b.C * b.F, 0.02f);
    b.w[W_GU2] = dev_fill(g, (size_t)b.C * 2 * b.F, 0.02f), b.w[W_QKV] = dev_fill(g, (size_t)b.C * (HD + 2 * KD), 0.02f);
    b.x = dev_fill(g, (size_t)Mmax * b.F, 1), b.y = g->alloc((size_t)Mmax * b.F * 2);
    b.big = g->alloc((size_t)Mmax * b.V * 2), b.res = dev_fill(g, (size_t)Mmax * b.C, 1);
    b.q = dev_fill(g, (size_t)Mmax * HD, 1), b.k = dev_fill(g, (size_t)Mmax * KD, 1), b.v = dev_fill(g, (size_t)Mmax * KD, 1);
    b.att = g->alloc((size_t)Mmax * HD * 2), b.ln = g->alloc((size_t)Mmax * b.C * 2);
    b.gate = dev_fill(g, (size_t)Mmax * b.F, 1), b.up = dev_fill(g, (size_t)Mmax * b.F, 1);
    b.swi = g->alloc((size_t)Mmax * b.F * 2), b.normw = dev_fill(g, (size_t)b.C, 1);
    b.bias = dev_fill(g, (size_t)HD, 0.1f), b.rstd = g->alloc((size_t)Mmax * 4);
    b.gu = g->alloc((size_t)Mmax * 2 * b.F * 2), b.bqkv = dev_fill(g, (size_t)HD + 2 * KD, 0.1f);
    b.maxb = (b.ctx + 1 + b.bs - 1) / b.bs;
    const size_t pool = (size_t)Mmax * b.maxb * b.bs * KD;
    b.kp = dev_fill(g, pool, 1), b.vp = dev_fill(g, pool, 1);
    int32_t *h = qf_malloc((size_t)Mmax * b.maxb * 4);
    for (int i = 0; i < Mmax * b.maxb; i++) h[i] = i; /* sequence s owns blocks s*maxb .. */
    b.btab = g->alloc((size_t)Mmax * b.maxb * 4);
    g->copy_h2d(b.btab, h, (size_t)Mmax * b.maxb * 4);
    b.hbtab = qf_malloc((size_t)Mmax * b.maxb * 4);
    memcpy(b.hbtab, h, (size_t)Mmax * b.maxb * 4);
    b.tok = g->alloc((size_t)Mmax * 4);
    for (int i = 0; i < Mmax; i++) h[i] = i;
    b.seq = g->alloc((size_t)Mmax * 4);
    g->copy_h2d(b.seq, h, (size_t)Mmax * 4);
    for (int i = 0; i < Mmax; i++) h[i] = b.ctx; /* the new token's position: ctx cached before it */
    b.pos = g->alloc((size_t)Mmax * 4);
    g->copy_h2d(b.pos, h, (size_t)Mmax * 4);
    free(h);
    static const int Ms[] = {1, 2, 8, 32, 128};
    double layer_bytes = 0;
    for (int i = 0; i < 5; i++) layer_bytes += (double)lin_in[i] * lin_out[i] * 2 * (i == W_KV || i == W_GU ? 2 : 1);
    const double step_bytes = layer_bytes * b.L + (double)b.C * b.V * 2;
    printf("weights read per step: %.2f GB (layers %.2f, head %.2f)\n", step_bytes / 1e9, layer_bytes * b.L / 1e9,
           (double)b.C * b.V * 2 / 1e9);
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
        b.M = Ms[mi];
        printf("M = %d\n", b.M);
        double sum = 0, tm[6];
        for (int i = 0; i < 6; i++) {
            const double t = tm[i] = best_of(&b, run_matmul, i, 50);
            const double gbs = (double)lin_in[i] * lin_out[i] * 2 / t / 1e9;
            printf("  matmul %-8s [%d x %d]  %8.1f us  %7.0f GB/s\n", lin_name[i], lin_out[i], lin_in[i], t * 1e6, gbs);
            sum += t * (i == W_HEAD ? 1.0 / b.L : (i == W_KV || i == W_GU ? 2 : 1));
        }
        const double tgu = best_of(&b, run_matmul_joined, 0, 50), tqkv = best_of(&b, run_matmul_joined, 1, 50);
        printf("  joined: gate+up as one [%d x %d] %.1f us (%.0f GB/s; apart %.1f us), q+k+v as one [%d x %d] %.1f us "
               "(%.0f GB/s; apart %.1f us)\n",
               2 * b.F, b.C, tgu * 1e6, 4.0 * b.F * b.C / tgu / 1e9, 2 * tm[W_GU] * 1e6, HD + 2 * KD, b.C, tqkv * 1e6,
               2.0 * (HD + 2 * KD) * b.C / tqkv / 1e9, (tm[W_Q] + 2 * tm[W_KV]) * 1e6);
        const double ta = best_of(&b, run_paged, 0, 50), tn = best_of(&b, run_rmsnorm, 0, 100);
        const double tr = best_of(&b, run_rope, 0, 100), ts = best_of(&b, run_swiglu, 0, 100);
        const double kvb = (double)b.M * (b.ctx + 1) * KD * 2 * 2;
        printf("  attention_paged %8.1f us (%5.0f GB/s of cache)  rmsnorm %.1f us  rope %.1f us  swiglu %.1f us\n",
               ta * 1e6, kvb / ta / 1e9, tn * 1e6, tr * 1e6, ts * 1e6);
        sum = sum * b.L + (ta + 2 * tn + 2 * tr + ts) * b.L;
        const double stack = best_of(&b, run_stack, 1, 3);
        printf("  step (28 layers + head): sum of parts %.2f ms; queued back to back %.2f ms = %.0f tok/s per "
               "sequence, %.0f tok/s; weights at %.0f GB/s\n",
               sum * 1e3, stack * 1e3, 1 / stack, b.M / stack, step_bytes / stack / 1e9);
        if (graphs) {
            const double gst = best_of(&b, run_stack_graph, 0, 3);
            printf("  step as one CUDA graph: %.2f ms = %.0f tok/s per sequence (queued %.2f ms: %.3f ms of launch "
                   "gaps)\n", gst * 1e3, 1 / gst, stack * 1e3, (stack - gst) * 1e3);
        }
        if (b.M > 2 && g->qkv_rope && g->swiglu_joined) { /* the paged model's layers for calls over two tokens */
            b.joined = 1;
            const double js = best_of(&b, run_stack, 1, 3), jg = graphs ? best_of(&b, run_stack_graph, 0, 3) : js;
            b.joined = 0;
            printf("  joined q|k|v and gate|up (serve's layers over two tokens): step queued %.2f ms, as one CUDA "
                   "graph %.2f ms = %.0f tok/s per sequence, %.0f tok/s; weights at %.0f GB/s\n",
                   js * 1e3, jg * 1e3, 1 / jg, b.M / jg, step_bytes / jg / 1e9);
        }
        qf_decode_qkv qa = fast_qkv(&b);
        qf_decode_mlp ma = fast_mlp(&b);
        if (g->decode_qkv(&qa) && g->decode_mlp(&ma)) { /* the fast path takes these rows */
            const double fq = best_of(&b, run_fast_qkv, 0, 100), fm = best_of(&b, run_fast_mlp, 0, 50);
            const double fa = best_of(&b, run_paged_only, 0, 100);
            const double fast = best_of(&b, run_stack_fast, 1, 3);
            const double ss = best_of(&b, run_serve_step, 1, 3), am = best_of(&b, run_argmax, 0, 20);
            printf("  serve step (copies up, embedding, fast layers, head, argmax read back): %.2f ms = %.0f tok/s "
                   "per sequence; argmax_rows alone %.1f us\n", ss * 1e3, 1 / ss, am * 1e6);
            printf("  fast path: decode_qkv %.1f us (%.0f GB/s), attention (no append) %.1f us, decode_mlp %.1f us "
                   "(%.0f GB/s); step %.2f ms = %.0f tok/s per sequence, %.0f tok/s; weights at %.0f GB/s\n",
                   fq * 1e6, (double)(HD + 2 * KD) * b.C * 2 / fq / 1e9, fa * 1e6, fm * 1e6,
                   2.0 * b.F * b.C * 2 / fm / 1e9, fast * 1e3, 1 / fast, b.M / fast, step_bytes / fast / 1e9);
            if (graphs) {
                const double gf = best_of(&b, run_stack_graph, 1, 3), gs = best_of(&b, run_serve_step_graph, 1, 3);
                qf_cuda_graph_stat st;
                qf_cuda_graph_stats(&st);
                printf("  fast path as one CUDA graph: step %.2f ms = %.0f tok/s per sequence (queued %.2f ms: %.3f ms "
                       "of launch gaps); serve step with the graph %.2f ms = %.0f tok/s (queued %.2f ms); graphs: "
                       "%llu captured, %llu replays%s\n",
                       gf * 1e3, 1 / gf, fast * 1e3, (fast - gf) * 1e3, gs * 1e3, 1 / gs, ss * 1e3,
                       (unsigned long long)st.captures, (unsigned long long)st.replays, st.off ? " (turned off)" : "");
                double ah = 1e30;
                for (int r = 0; r < 3; r++) { /* the best of 3 rounds of 64 steps */
                    const double t = serve_ahead(&b, 64);
                    ah = t < ah ? t : ah;
                }
                printf("  serve step with the graph, queued one ahead (the picks fed on the device, read through "
                       "pinned memory): %.2f ms = %.0f tok/s per sequence\n", ah * 1e3, 1 / ah);
            }
        }
        fflush(stdout);
    }
    for (int i = 0; i < npre; i++) prefill_section(&b, pre[i]);
    return 0;
}
