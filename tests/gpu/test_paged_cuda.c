/* test_paged_cuda.c — the CUDA attention_paged (kernels/cuda/decode_attention_cuda.cu, qwen-ft serve) against the
 * CPU one (kernels/cpu/decode_attention_cpu.c) in the bf16, fp32 and fp16 tables: ragged calls that mix prompt
 * chunks of some sequences with single decoding tokens of others, block tables that are shuffled permutations of
 * the pool (blocks of 16 positions), GQA 1, 4, 7 and 18 (three groups of query heads per kv head), head_dim 64, 128 and 80, a sequence of 1500 positions.
 * Outputs on the max norm (fp32 1e-5, bf16 1e-2, fp16 1.25e-3: one rounding of the output); the pools bit for bit (a copy).
 * On the 16-bit tables at head_dim 128, the split attention's other forms (of QWENFT_DECODE_ATTN: plain; early, the
 * loads in flight with a decoding split's v rows loaded beside its k rows; the default, with them after the scores;
 * rows, the default with the pool rows looked up before the programmatic wait and q in 16-byte loads) give the same
 * values as the pre form (0 difference); the cluster form (the default for calls of a few decoding tokens within
 * 1024 positions, kernels/cuda/decode_attn_cluster_cuda.cu; GQA 5-8, 1-1002 positions, prompt chunks beside
 * decoding tokens) is checked against the CPU, and that it ran on exactly the calls it takes; so is the tensor-core
 * form (the default for the other calls at up to 16 query heads a kv head, kernels/cuda/decode_attn_mma_cuda.cu).
 * Then the decoding fast path (decode_qkv, decode_mlp) against the same table's unfused ops (run_fast), and the
 * joined projections' entries (qkv_rope, swiglu_joined) against the unjoined ops, bit for bit (run_joined).
 * Exit: 0 passed, 1 a check failed, 77 "no GPU: skipped". */
#define QF_GPU_TEST_SEED 0x2545F4914F6CDD1Dull
#include "qf_gpu_test.h"

/* nseq sequences with prompts plen[s]; call 0 prefills chunk tokens of each, later calls decode one token each
 * (sequences still prefilling take another chunk) */
static void run_case(const qf_ops *g, int nseq, const int *plen, int chunk, int calls, int H, int KV, int D) {
    const qf_ops *c = qf_ops_cpu();
    const double tol = g->act_dtype == QF_DT_F32 ? 1e-5 : g->act_dtype == QF_DT_F16 ? 1.25e-3 : 1e-2;
    const int bs = 16;
    int maxlen = 0;
    for (int s = 0; s < nseq; s++) maxlen = plen[s] + calls > maxlen ? plen[s] + calls : maxlen;
    int maxb = (maxlen + bs - 1) / bs, nblocks = nseq * maxb + 3;
    int32_t *btab = qf_malloc((size_t)nseq * maxb * 4), *perm = qf_malloc((size_t)nblocks * 4);
    for (int i = 0; i < nblocks; i++) perm[i] = i;
    for (int i = nblocks - 1; i > 0; i--) { /* a fixed shuffle */
        int j = (int)((i * 2654435761u) % (unsigned)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int i = 0; i < nseq * maxb; i++) btab[i] = perm[i];
    size_t pool = (size_t)nblocks * bs * KV * D;
    float *kp = calloc(pool, 4), *vp = calloc(pool, 4);
    void *dk = up(g, kp, pool), *dv = up(g, vp, pool);
    int32_t *gb = g->alloc((size_t)nseq * maxb * 4);
    g->copy_h2d(gb, btab, (size_t)nseq * maxb * 4);
    int *done = calloc((size_t)nseq, sizeof *done), cap = nseq * (chunk + 1);
    int32_t *seq = qf_malloc((size_t)cap * 4), *pos = qf_malloc((size_t)cap * 4);
    char what[160];
    for (int call = 0; call < calls; call++) {
        int N = 0;
        for (int s = 0; s < nseq; s++) {
            int k = done[s] < plen[s] ? (plen[s] - done[s] < chunk ? plen[s] - done[s] : chunk) : 1;
            for (int i = 0; i < k; i++) seq[N] = s, pos[N] = done[s] + i, N++;
            done[s] += k;
        }
        size_t nq = (size_t)N * H * D, nk = (size_t)N * KV * D;
        float *q = frand(nq, 1), *k = frand(nk, 1), *v = frand(nk, 1), *out = qf_malloc(nq * 4);
        void *gq = up(g, q, nq), *gk = up(g, k, nk), *gv = up(g, v, nk), *go = g->alloc(nq * g->act_bytes + 16);
        int32_t *gsq = g->alloc((size_t)N * 4), *gps = g->alloc((size_t)N * 4);
        g->copy_h2d(gsq, seq, (size_t)N * 4);
        g->copy_h2d(gps, pos, (size_t)N * 4);
        int max_len = 1; /* the exact bound, or (odd calls) the pool's: the split sizing must not matter */
        for (int n = 0; n < N; n++) max_len = pos[n] + 1 > max_len ? pos[n] + 1 : max_len;
        if (call % 2) max_len = maxb * bs;
        c->attention_paged(out, q, k, v, kp, vp, seq, pos, btab, N, maxb, bs, H, KV, D, max_len);
        /* the cluster form (the default for calls of up to qf_cuda_decode_attn_cluster_n() tokens) takes this call? */
        const int cl_takes = g->act_bytes == 2 && D == 128 && qf_cuda_attn_cluster_available() &&
                             N <= qf_cuda_decode_attn_cluster_n() && max_len <= 1024;
        /* the tensor-core form (the default for the others) takes it? */
        const int mma_takes =
            g->act_bytes == 2 && D == 128 && H / KV <= 16 && !(cl_takes && qf_cuda_decode_attn_mlp() >= 5);
        const long launches = qf_cuda_attn_cluster_launches(), mma_launches = qf_cuda_attn_mma_launches();
        g->attention_paged(go, gq, gk, gv, dk, dv, gsq, gps, gb, N, maxb, bs, H, KV, D, max_len);
        const int cl_ran = qf_cuda_attn_cluster_launches() > launches;
        const int mma_ran = qf_cuda_attn_mma_launches() > mma_launches;
        float *ho = down_new(g, go, nq), *hk = down_new(g, dk, pool), *hv = down_new(g, dv, pool);
        snprintf(what, sizeof what, "%d seqs, N %d, H %d KV %d D %d, call %d%s", nseq, N, H, KV, D, call,
                 cl_ran ? " (cluster form)" : mma_ran ? " (tensor-core form)" : "");
        qf_gpu_report(g->name, 64, what, relerr(ho, out, nq), tol);
        qf_gpu_report(g->name, 64, "  pools after that call", fmax(relerr(hk, kp, pool), relerr(hv, vp, pool)), 0);
        qf_gpu_report_bool(g->name, "  the cluster form ran where it applies, and only there",
                           cl_ran == (cl_takes && qf_cuda_decode_attn_mlp() >= 5));
        qf_gpu_report_bool(g->name, "  the tensor-core form ran where it applies, and only there",
                           mma_ran == (mma_takes && qf_cuda_decode_attn_mlp() == 6));
        if (g->act_bytes == 2 && D == 128) { /* the split attention's forms (QWENFT_DECODE_ATTN): the same values as
                                              * each other (the call appends the same k, v to the same rows again);
                                              * the cluster form: other sums, within the CPU check's tolerance */
            static const char *const form_name[7] = {"QWENFT_DECODE_ATTN=plain's form",
                                                     "QWENFT_DECODE_ATTN=early's form",
                                                     "QWENFT_DECODE_ATTN=inflight's form",
                                                     "QWENFT_DECODE_ATTN=rows' form", "QWENFT_DECODE_ATTN=pre's form",
                                                     "QWENFT_DECODE_ATTN=cluster's form",
                                                     "QWENFT_DECODE_ATTN=mma's form"};
            void *go2 = g->alloc(nq * g->act_bytes + 16);
            const int was = qf_cuda_decode_attn_mlp();
            float *hpre = ho; /* the pre form's values: the reference of the split forms */
            if (was != 4) {
                qf_cuda_set_decode_attn_mlp(4);
                g->attention_paged(go2, gq, gk, gv, dk, dv, gsq, gps, gb, N, maxb, bs, H, KV, D, max_len);
                qf_cuda_set_decode_attn_mlp(was);
                hpre = down_new(g, go2, nq);
                if (!cl_ran && !mma_ran)
                    qf_gpu_report(g->name, 64, "  the default: the pre form's values", relerr(ho, hpre, nq), 0);
            }
            for (int f = 0; f < 7; f++) { /* each other form: plain, early (v beside k), inflight (v after the scores),
                                           * rows (the pool rows before the wait, q in 16-byte loads), cluster, mma */
                if (f == was || f == 4) continue;
                qf_cuda_set_decode_attn_mlp(f);
                g->attention_paged(go2, gq, gk, gv, dk, dv, gsq, gps, gb, N, maxb, bs, H, KV, D, max_len);
                qf_cuda_set_decode_attn_mlp(was);
                float *h2 = down_new(g, go2, nq);
                char w2[96];
                snprintf(w2, sizeof w2, "  %s: the %s values", form_name[f], f < 5 ? "same" : "CPU's");
                qf_gpu_report(g->name, 64, w2, f < 5 ? relerr(h2, hpre, nq) : relerr(h2, out, nq), f < 5 ? 0 : tol);
                free(h2);
            }
            if (hpre != ho) free(hpre);
            g->free(go2);
        }
        free(q), free(k), free(v), free(out), free(ho), free(hk), free(hv);
        g->free(gq), g->free(gk), g->free(gv), g->free(go), g->free(gsq), g->free(gps);
    }
    g->free(dk), g->free(dv), g->free(gb);
    free(kp), free(vp), free(btab), free(perm), free(done), free(seq), free(pos);
}

/* The decoding fast path (ops.h decode_qkv, decode_mlp; kernels/cuda/decode_fused_cuda.cu) against the same table's
 * unfused ops for N tokens of N sequences at positions pos0 + n: q, the pools, the attention over them, and the MLP
 * product; bit for bit on bf16 and fp16, fp32 within 1e-6 (the norm's rstd may differ in its last bit). Also that
 * the table declines what it does not take (3 rows: the unfused path runs) and leaves the outputs alone. */
static void run_fast(const qf_ops *g, int N, int C, int H, int KV, int D, int F, int pos0, int bias) {
    const double tol = g->act_dtype == QF_DT_F32 ? 1e-6 : 0;
    const int HD = H * D, KD = KV * D, bs = 16, maxb = (pos0 + N + bs - 1) / bs + 1, nblocks = N * maxb;
    const size_t pool = (size_t)nblocks * bs * KD;
    const float sw = 1.0f / sqrtf((float)C);
    float *hx = frand((size_t)N * C, 2), *hln = frand((size_t)C, 1.5), *hw[5], *hb[3];
    const size_t wn[5] = {(size_t)HD * C, (size_t)KD * C, (size_t)KD * C, (size_t)F * C, (size_t)F * C};
    void *w[5], *b[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 5; i++) hw[i] = frand(wn[i], sw), w[i] = up(g, hw[i], wn[i]);
    for (int i = 0; i < 3; i++) {
        hb[i] = frand(i ? (size_t)KD : (size_t)HD, 0.5);
        if (bias) b[i] = up(g, hb[i], i ? (size_t)KD : (size_t)HD);
    }
    int32_t *seq = qf_malloc((size_t)N * 4), *pos = qf_malloc((size_t)N * 4), *bt = qf_malloc((size_t)N * maxb * 4);
    for (int n = 0; n < N; n++) seq[n] = n, pos[n] = pos0 + n;
    for (int i = 0; i < N * maxb; i++) bt[i] = (N * maxb - 1 - i); /* blocks in reverse */
    int32_t *dseq = g->alloc((size_t)N * 4), *dpos = g->alloc((size_t)N * 4), *dbt = g->alloc((size_t)N * maxb * 4);
    g->copy_h2d(dseq, seq, (size_t)N * 4), g->copy_h2d(dpos, pos, (size_t)N * 4);
    g->copy_h2d(dbt, bt, (size_t)N * maxb * 4);
    float *hk = frand(pool, 1), *hv = frand(pool, 1); /* the cache before: earlier positions' k/v */
    void *x = up(g, hx, (size_t)N * C), *lnw = up(g, hln, (size_t)C), *kp[2], *vp[2];
    for (int i = 0; i < 2; i++) kp[i] = up(g, hk, pool), vp[i] = up(g, hv, pool);
    const size_t ab = g->act_bytes;
    void *ln = g->alloc((size_t)N * C * ab), *q[2], *k = g->alloc((size_t)N * KD * ab), *v = g->alloc((size_t)N * KD * ab);
    void *att[2], *gate = g->alloc((size_t)N * F * ab), *upb = g->alloc((size_t)N * F * ab), *swi[2];
    float *rstd = g->alloc((size_t)N * 4);
    for (int i = 0; i < 2; i++) {
        q[i] = g->alloc((size_t)N * HD * ab), att[i] = g->alloc((size_t)N * HD * ab);
        swi[i] = g->alloc((size_t)N * F * ab);
    }
    const float eps = 1e-6f;
    const double theta = 1e6;
    /* unfused: the model's op sequence */
    g->rmsnorm_fwd(ln, rstd, x, lnw, N, C, eps);
    g->matmul_fwd(q[0], ln, w[0], b[0], N, C, HD, 0);
    g->matmul_fwd(k, ln, w[1], b[1], N, C, KD, 0);
    g->matmul_fwd(v, ln, w[2], b[2], N, C, KD, 0);
    g->rope_fwd(q[0], dpos, N, H, D, theta);
    g->rope_fwd(k, dpos, N, KV, D, theta);
    g->attention_paged(att[0], q[0], k, v, kp[0], vp[0], dseq, dpos, dbt, N, maxb, bs, H, KV, D, pos0 + N);
    g->rmsnorm_fwd(ln, rstd, x, lnw, N, C, eps);
    g->matmul_fwd(gate, ln, w[3], NULL, N, C, F, 0);
    g->matmul_fwd(upb, ln, w[4], NULL, N, C, F, 0);
    g->swiglu_fwd(swi[0], gate, upb, N, F);
    /* fast */
    qf_decode_qkv qa = {.q = q[1], .kpool = kp[1], .vpool = vp[1], .x = x, .ln_w = lnw, .wq = w[0], .bq = b[0],
                        .wk = w[1], .bk = b[1], .wv = w[2], .bv = b[2], .seq = dseq, .pos = dpos, .btab = dbt,
                        .ln = ln, .k = k, .v = v, .rstd = rstd, .N = N, .C = C, .H = H, .KV = KV, .D = D,
                        .maxb = maxb, .bs = bs, .eps = eps, .theta = theta};
    qf_decode_mlp ma = {.out = swi[1], .x = x, .ln_w = lnw, .wg = w[3], .wu = w[4], .ln = ln, .gate = gate,
                        .up = upb, .rstd = rstd, .N = N, .C = C, .F = F, .eps = eps};
    char lab[96];
    snprintf(lab, sizeof lab, "%-9s fast N %d C %d H %d KV %d D %d F %d pos %d%s", g->name, N, C, H, KV, D, F, pos0,
             bias ? "" : " no bias");
    const int ran_q = g->decode_qkv && g->decode_qkv(&qa), ran_m = g->decode_mlp && g->decode_mlp(&ma);
    qf_gpu_report_bool(lab, "  decode_qkv and decode_mlp take it", ran_q && ran_m);
    if (ran_q && ran_m) {
        g->attention_paged(att[1], q[1], NULL, NULL, kp[1], vp[1], dseq, dpos, dbt, N, maxb, bs, H, KV, D, pos0 + N);
        const size_t nq = (size_t)N * HD, nf = (size_t)N * F;
        float *a0 = down_new(g, q[0], nq), *a1 = down_new(g, q[1], nq);
        qf_gpu_report(lab, 40, "  q == unfused", relerr(a1, a0, nq), tol);
        free(a0), free(a1);
        a0 = down_new(g, kp[0], pool), a1 = down_new(g, kp[1], pool);
        float *b0 = down_new(g, vp[0], pool), *b1 = down_new(g, vp[1], pool);
        qf_gpu_report(lab, 40, "  k, v pools == unfused", fmax(relerr(a1, a0, pool), relerr(b1, b0, pool)), tol);
        free(a0), free(a1), free(b0), free(b1);
        a0 = down_new(g, att[0], nq), a1 = down_new(g, att[1], nq);
        qf_gpu_report(lab, 40, "  attention (k = v = NULL) == unfused", relerr(a1, a0, nq), tol);
        free(a0), free(a1);
        a0 = down_new(g, swi[0], nf), a1 = down_new(g, swi[1], nf);
        qf_gpu_report(lab, 40, "  mlp == unfused", relerr(a1, a0, nf), tol);
        free(a0), free(a1);
    }
    for (int i = 0; i < 5; i++) g->free(w[i]), free(hw[i]);
    for (int i = 0; i < 3; i++) g->free(b[i]), free(hb[i]);
    for (int i = 0; i < 2; i++) g->free(kp[i]), g->free(vp[i]), g->free(q[i]), g->free(att[i]), g->free(swi[i]);
    g->free(x), g->free(lnw), g->free(ln), g->free(k), g->free(v), g->free(gate), g->free(upb), g->free(rstd);
    g->free(dseq), g->free(dpos), g->free(dbt);
    free(hx), free(hln), free(hk), free(hv), free(seq), free(pos), free(bt);
}

/* 3 rows are beyond the fast path (the GEMV's 16 KiB rule at C 3584): declined, outputs untouched */
static void run_fast_declined(const qf_ops *g) {
    const int N = 3, C = 3584;
    float *z = calloc((size_t)N * C, sizeof(float));
    void *x = up(g, z, (size_t)N * C), *o = up(g, z, (size_t)N * C);
    qf_decode_mlp ma = {.out = o, .x = x, .ln_w = x, .wg = x, .wu = x, .N = N, .C = C, .F = 1, .eps = 1e-6f};
    qf_decode_qkv qa = {.q = o, .x = x, .ln_w = x, .wq = x, .wk = x, .wv = x, .N = N, .C = C, .H = 1, .KV = 1, .D = 64};
    char lab[64];
    snprintf(lab, sizeof lab, "%-9s", g->name);
    qf_gpu_report_bool(lab, "fast path declines 3 rows of 3584", !g->decode_qkv(&qa) && !g->decode_mlp(&ma));
    g->free(x), g->free(o), free(z);
}

/* the joined projections' entries (qkv_rope, swiglu_joined) against the unjoined ops on the same table, bit for bit:
 * q, k, v uploaded apart and rotated by rope_fwd; swiglu_fwd of gate and up uploaded apart */
static void run_joined(const qf_ops *g, int N, int H, int KV, int D, int F, int pos0) {
    const int HD = H * D, KD = KV * D, W = HD + 2 * KD;
    float *hqkv = frand((size_t)N * W, 2), *hgu = frand((size_t)N * 2 * F, 4);
    float *hq = qf_malloc((size_t)N * HD * 4), *hk = qf_malloc((size_t)N * KD * 4), *hv = qf_malloc((size_t)N * KD * 4);
    float *hg = qf_malloc((size_t)N * F * 4), *hu = qf_malloc((size_t)N * F * 4);
    int32_t *pos = qf_malloc((size_t)N * 4);
    for (int n = 0; n < N; n++) {
        pos[n] = pos0 + 3 * n;
        memcpy(hq + (size_t)n * HD, hqkv + (size_t)n * W, (size_t)HD * 4);
        memcpy(hk + (size_t)n * KD, hqkv + (size_t)n * W + HD, (size_t)KD * 4);
        memcpy(hv + (size_t)n * KD, hqkv + (size_t)n * W + HD + KD, (size_t)KD * 4);
        memcpy(hg + (size_t)n * F, hgu + (size_t)n * 2 * F, (size_t)F * 4);
        memcpy(hu + (size_t)n * F, hgu + (size_t)n * 2 * F + F, (size_t)F * 4);
    }
    int32_t *dpos = g->alloc((size_t)N * 4);
    g->copy_h2d(dpos, pos, (size_t)N * 4);
    void *qkv = up(g, hqkv, (size_t)N * W), *q0 = up(g, hq, (size_t)N * HD), *k0 = up(g, hk, (size_t)N * KD);
    void *v0 = up(g, hv, (size_t)N * KD), *q1 = g->alloc((size_t)N * HD * g->act_bytes);
    void *k1 = g->alloc((size_t)N * KD * g->act_bytes), *v1 = g->alloc((size_t)N * KD * g->act_bytes);
    g->rope_fwd(q0, dpos, N, H, D, 1e6);
    g->rope_fwd(k0, dpos, N, KV, D, 1e6);
    g->qkv_rope(q1, k1, v1, qkv, dpos, N, H, KV, D, 1e6);
    float *a0 = down_new(g, q0, (size_t)N * HD), *a1 = down_new(g, q1, (size_t)N * HD);
    float *b0 = down_new(g, k0, (size_t)N * KD), *b1 = down_new(g, k1, (size_t)N * KD);
    float *c0 = down_new(g, v0, (size_t)N * KD), *c1 = down_new(g, v1, (size_t)N * KD);
    char what[160], lab[64];
    snprintf(lab, sizeof lab, "%-9s", g->name);
    snprintf(what, sizeof what, "qkv_rope == copies + rope_fwd (N %d, H %d, KV %d, D %d)", N, H, KV, D);
    qf_gpu_report_bool(lab, what, !memcmp(a0, a1, (size_t)N * HD * 4) && !memcmp(b0, b1, (size_t)N * KD * 4) &&
                                      !memcmp(c0, c1, (size_t)N * KD * 4));
    void *gu = up(g, hgu, (size_t)N * 2 * F), *gg = up(g, hg, (size_t)N * F), *gup = up(g, hu, (size_t)N * F);
    void *o0 = g->alloc((size_t)N * F * g->act_bytes), *o1 = g->alloc((size_t)N * F * g->act_bytes);
    g->swiglu_fwd(o0, gg, gup, N, F);
    g->swiglu_joined(o1, gu, N, F);
    float *s0 = down_new(g, o0, (size_t)N * F), *s1 = down_new(g, o1, (size_t)N * F);
    snprintf(what, sizeof what, "swiglu_joined == swiglu_fwd (N %d, F %d)", N, F);
    qf_gpu_report_bool(lab, what, !memcmp(s0, s1, (size_t)N * F * 4));
    void *dev[] = {dpos, qkv, q0, k0, v0, q1, k1, v1, gu, gg, gup, o0, o1};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) g->free(dev[i]);
    float *host[] = {hqkv, hgu, hq, hk, hv, hg, hu, a0, a1, b0, b1, c0, c1, s0, s1};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    free(pos);
}

int main(void) {
    if (qf_cuda_device_count() <= 0 || !qf_ops_cuda()) {
        printf("test_paged_cuda: no GPU: skipped\n");
        return 77;
    }
    const qf_ops *gs[3] = {qf_ops_cuda(), qf_ops_cuda_f32(), qf_ops_cuda_f16()};
    const int a[] = {9, 1, 40}, b[] = {100, 3, 17, 64, 5}, l[] = {1500, 7};
    const int d3[] = {1, 255, 1000}, d1[] = {511}, d7[] = {900}, d4[] = {17, 300, 64, 700}, tiny[] = {5},
              rag[] = {3, 40};
    int d32[32];
    for (int s = 0; s < 32; s++) d32[s] = 17 + 5 * s;
    for (int i = 0; i < 3; i++) {
        run_case(gs[i], 3, a, 8, 4, 4, 4, 64);
        run_case(gs[i], 3, a, 8, 3, 18, 1, 64); /* GQA 18: three head groups per kv head */
        run_case(gs[i], 5, b, 32, 5, 8, 2, 128);
        run_case(gs[i], 5, b, 16, 3, 14, 2, 80);
        run_case(gs[i], 2, l, 512, 4, 28, 4, 128);
        /* decoding calls of 1-4 tokens within 1024 positions (the cluster form's calls): Qwen2.5-7B's heads (GQA 7),
         * 14B's (GQA 5), 1.5B's (GQA 6), 64 heads over 8 (GQA 8) at 6-8 positions (most CTAs' slices empty), and
         * prompt chunks of 2 tokens beside decoding tokens (the call's own rows at several positions) */
        run_case(gs[i], 3, d3, 1000, 3, 28, 4, 128);
        run_case(gs[i], 1, d1, 512, 3, 40, 8, 128);
        run_case(gs[i], 4, d4, 700, 3, 12, 2, 128);
        run_case(gs[i], 1, tiny, 8, 4, 64, 8, 128);
        run_case(gs[i], 2, rag, 2, 6, 28, 4, 128);
        /* one decoding token of Qwen2.5-7B's heads past 900 positions: clusters of 16 by default (8's slices would
         * take 60 KiB a CTA) */
        run_case(gs[i], 1, d7, 1024, 3, 28, 4, 128);
        /* 32 decoding sequences of 17-174 positions (the cluster form's only under QWENFT_DECODE_ATTN_CLUSTER_N >= 32) */
        run_case(gs[i], 32, d32, 1024, 3, 28, 4, 128);
        run_fast(gs[i], 1, 512, 8, 2, 64, 1024, 37, 1);
        run_fast(gs[i], 2, 256, 4, 4, 128, 512, 600, 0);
        run_fast(gs[i], 1, 3584, 28, 4, 128, 18944, 511, 1); /* Qwen2.5-7B's shapes */
        run_fast_declined(gs[i]);
        run_joined(gs[i], 32, 28, 4, 128, 18944, 0);  /* Qwen2.5-7B's shapes, 32 decoding rows */
        run_joined(gs[i], 600, 28, 4, 128, 18944, 5); /* a prompt chunk */
        run_joined(gs[i], 5, 3, 1, 20, 37, 900);      /* D/2 = 10 and F % 8 = 5: the scalar forms */
    }
    {   /* clusters of 16 CTAs: by default on the calls whose 8-CTA slices would take over 40 KiB of shared memory a
         * CTA and whose clusters of 16 all fit at once (Qwen2.5-7B's one token past 900 positions: 8 of them), 8 on
         * the others (511 positions; or 4 tokens over 2 kv heads: 16 clusters, more than an H100 holds);
         * QWENFT_ATTN_CLUSTER_RANKS=16 (test_paged_cuda_cluster16) on every call, =8 on none */
        const char *r = getenv("QWENFT_ATTN_CLUSTER_RANKS");
        const int forced = r ? atoi(r) : 0, fit = qf_cuda_attn_cluster16_fit();
        const long n16 = qf_cuda_attn_cluster16_launches(), all = qf_cuda_attn_cluster_launches();
        char what[160];
        snprintf(what, sizeof what, "clusters of 16 (%d fit at once here): %ld of the cluster form's %ld launches", fit,
                 n16, all);
        if (qf_cuda_attn_cluster_available() && all > 0)
            qf_gpu_report_bool("cuda", what,
                               forced == 8    ? n16 == 0
                               : forced == 16 ? fit > 0 && n16 == all
                                              : fit == 0 ? n16 == 0 : n16 > 0 && n16 < all);
    }
    printf("test_paged_cuda: %d checks, %d failed\n", n_checks, n_fail);
    return n_fail ? 1 : 0;
}
