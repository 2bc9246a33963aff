// matmul_fp8.cu — the fp8 linear layers (the fp8 tables' matmul_fwd / matmul_bwd, ops.h): bf16 tensors in and out,
// the three GEMMs of a layer on cuBLASLt's fp8 tensor-core kernels (sm_89 Ada, sm_90 Hopper and newer).
//
// cuBLASLt runs fp8 only as "TN" (column-major A transposed, B not), i.e. row-major out[M,Nc] = a[M,K] b[Nc,K]^T
// with K contiguous in both operands, and wants M, Nc, K multiples of 16 and 16-byte aligned pointers. So:
//   forward  y[N,OUT]  = x[N,IN] W[OUT,IN]^T            a = q(x),    b = q(W)     (as they lie)
//   dgrad    dx[N,IN]  = dy[N,OUT] W                    a = q(dy),   b = q(W)^T [IN,OUT]
//   wgrad    dW[OUT,IN] += dy^T x                       a = q(dy)^T [OUT,N], b = q(x)^T [IN,N]
// The transposes are made by the quantizer (fp8_quant.cu) while it casts: dy is read once for both q(dy) and
// q(dy)^T; the bf16 operands are never transposed. Outputs are bf16 (dW accumulates into the bf16 gradients with
// beta = 1, dx and y as the bf16 table does), accumulation fp32 inside the GEMM: the forward with cuBLASLt's fast
// fp8 accumulation, the backward GEMMs without it (torchao's and Transformer Engine's choice: gradients keep the
// periodic promotion to fp32).
//
// Recipes (docs/deck.md `fp8.recipe`):
//   tensorwise  one scale per tensor, current scaling (fp8.cuh); x, W in e4m3, dy in e5m2 (Transformer Engine's
//               HYBRID format: the gradient's wide range, the activations' precision); scalar cuBLASLt scales.
//   rowwise     one scale per row of each GEMM operand along its K dimension, all e4m3, power-of-two scales
//               (torchao's "rowwise"): cuBLASLt's outer-vector mode (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
//               a scale per row of op(A) and per column of op(B)); x and dy are quantized per token for the
//               forward/dgrad and per channel (over the tokens) for the wgrad, W per output row for the forward and
//               per input column for the dgrad.
// Quantization traffic: a weight's amax is taken once per parameter version (the model's fp8_weight tag, ops.h; with
// fp8.amax_history_len > 0 not at all after the first use: the cast records it, fp8.cuh), and a call the model marks
// as reading the previous call's x (fp8_same_x: k/v after q on ln1, up after gate on ln2) takes that call's fp8 copy
// of x and its scale (buf[0], sc[0]) instead of casting x again.
// A layer whose N, IN or OUT is not a multiple of 16, or whose output is not 16-byte aligned, runs that GEMM in
// bf16 (cu_matmul_* / cu_gemm_*: the bf16 table's own); so does a layer with IN or OUT under QF_FP8_MIN_DIM: its
// quantization passes (x and dy are read and written once more per GEMM) cost more than the fp8 GEMM saves
// (Qwen2.5-7B's k/v, 3584 -> 512 at 4096 tokens, measured on an H200: fp8 313 against bf16 617 TFLOP/s forward +
// backward; q/o 3584 -> 3584: 811 against 753). qf_cuda_fp8_counts() counts both kinds.
// Buffers (the backend's stream-ordered allocations, counted in its memory): the fp8 copies of the operands, grown to
// the largest layer (7B at 4096 tokens: about 4 x 78 MB), plus scale vectors.
#include "fp8_state.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void grow(void **p, size_t *cap, size_t need) {
    if (need <= *cap) return;
    need = qf_align_up(need, 2u << 20);
    if (*p) cu_free(*p); // stream-ordered: kernels queued before still see the old buffer
    *cap = 0;          // consistent if the run recovers from the failure below (util.h qf_oom_rescue)
    *p = cu_alloc(need);
    if (!*p && qf_oom_rescue("the fp8 buffers", need)) *p = cu_alloc_rescue(need, 0);
    if (!*p)
        QF_FATAL("out of GPU memory for the fp8 buffers (%zu bytes more; gpu_memory_limit_gb or the model's size)",
                 need);
    *cap = need;
}
static void grow_vectors(qf_fp8_state *st, size_t n) {
    if (n < 8) n = 8;
    if (n <= st->vcap) return;
    n = qf_align_up(n, 1024);
    if (st->sc) cu_free(st->sc);
    if (st->am) cu_free(st->am);
    st->vcap = 0; // consistent if the run recovers from the failure below (util.h qf_oom_rescue)
    st->sc = (float *)cu_alloc(4 * n * sizeof(float));
    if (!st->sc && qf_oom_rescue("the fp8 scale vectors", 4 * n * sizeof(float)))
        st->sc = (float *)cu_alloc_rescue(4 * n * sizeof(float), 0);
    st->am = (unsigned *)cu_alloc(3 * n * sizeof(unsigned));
    if (!st->am && qf_oom_rescue("the fp8 scale vectors", 3 * n * sizeof(unsigned)))
        st->am = (unsigned *)cu_alloc_rescue(3 * n * sizeof(unsigned), 0);
    if (!st->sc || !st->am) QF_FATAL("out of GPU memory for the fp8 scale vectors");
    st->vcap = n;
}

static cudaDataType_t fp8_dt(int fmt) { return fmt == QF_FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

static void plan_free(qf_fp8_plan *p) {
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->A) cublasLtMatrixLayoutDestroy(p->A);
    if (p->B) cublasLtMatrixLayoutDestroy(p->B);
    if (p->C) cublasLtMatrixLayoutDestroy(p->C);
    memset(p, 0, sizeof *p);
}

// The cached cuBLASLt problem: column-major D[m,n] (bf16) = op(A)[m,k] op(B)[k,n], A (fmt fa) stored k x m and
// transposed, B (fmt fb) stored k x n; scalar or outer-vector scales; optional bf16 bias epilogue. NULL when cuBLASLt
// has no kernel for it (or does not know an attribute).
static qf_fp8_plan *fp8_plan(int fa, int fb, int m, int n, int k, int outer, int bias, int fast) {
    qf_fp8_state *st = fp8_state();
    for (int i = 0; i < QF_FP8_PLANS; i++) {
        qf_fp8_plan *p = &st->plans[i];
        if (p->used && p->fa == fa && p->fb == fb && p->m == m && p->n == n && p->k == k && p->outer == outer &&
            p->bias == bias && p->fast == fast)
            return p;
    }
    qf_cuda_ctx &c = qfc();
    qf_fp8_plan *p = &st->plans[st->plan_next];
    st->plan_next = (st->plan_next + 1) % QF_FP8_PLANS;
    plan_free(p);
    p->fa = fa, p->fb = fb, p->m = m, p->n = n, p->k = k, p->outer = outer, p->bias = bias, p->fast = fast;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    const int8_t fast8 = (int8_t)fast;
    bool ok = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
#define QF_SET(attr, v)                                                                                                \
    (ok = ok && cublasLtMatmulDescSetAttribute(p->op, attr, &(v), sizeof(v)) == CUBLAS_STATUS_SUCCESS)
    QF_SET(CUBLASLT_MATMUL_DESC_TRANSA, ta);
    QF_SET(CUBLASLT_MATMUL_DESC_TRANSB, tb);
    QF_SET(CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
    QF_SET(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast8);
    if (bias) {
        const int32_t bdt = CUDA_R_16BF;
        QF_SET(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bdt);
    }
    if (outer) {
#if CUBLAS_VER_MAJOR > 12 || (CUBLAS_VER_MAJOR == 12 && CUBLAS_VER_MINOR >= 9)
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        QF_SET(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
        QF_SET(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
#else
        ok = false; // outer-vector scales came with cuBLAS 12.9: the rowwise probe then refuses the recipe
#endif
    }
#undef QF_SET
    ok = ok && cublasLtMatrixLayoutCreate(&p->A, fp8_dt(fa), k, m, k) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatrixLayoutCreate(&p->B, fp8_dt(fb), k, n, k) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatrixLayoutCreate(&p->C, CUDA_R_16BF, m, n, m) == CUBLAS_STATUS_SUCCESS;
    int nres = 0;
    cublasLtMatmulHeuristicResult_t res;
    if (ok) {
        cublasLtMatmulPreference_t pref;
        CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
        const uint64_t ws = c.lt_ws_bytes;
        const uint32_t al = 16;
        CHECK_CUBLAS(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        CHECK_CUBLAS(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
        CHECK_CUBLAS(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
        CHECK_CUBLAS(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
        CHECK_CUBLAS(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
        if (cublasLtMatmulAlgoGetHeuristic(c.lt, p->op, p->A, p->B, p->C, p->C, pref, 1, &res, &nres) !=
            CUBLAS_STATUS_SUCCESS)
            nres = 0;
        cublasLtMatmulPreferenceDestroy(pref);
    }
    if (!ok || nres < 1) {
        plan_free(p);
        return NULL;
    }
    p->algo = res.algo;
    p->used = 1;
    return p;
}

// one cuBLASLt call of plan p: D = (sa-scaled B ...) see fp8_gemm; the status, not checked
static cublasStatus_t fp8_run(qf_fp8_plan *p, bf16 *out, const uint8_t *a8, const float *sa, const uint8_t *b8,
                              const float *sb, const bf16 *bias, float beta) {
    qf_cuda_ctx &c = qfc();
    // cuBLASLt's A is our b, its B our a
    cublasStatus_t s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa);
    if (s == CUBLAS_STATUS_SUCCESS && p->bias)
        s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    const float alpha = 1.0f;
    return cublasLtMatmul(c.lt, p->op, &alpha, b8, p->A, a8, p->B, &beta, out, p->C, out, p->C, &p->algo, c.lt_ws,
                          c.lt_ws_bytes, c.stream);
}

// out[n, o] += b[o] (a bias the epilogue did not take)
__global__ void fp8_bias_kernel(bf16 *out, const bf16 *b, size_t total, int OUT) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(__bfloat162float(out[i]) + __bfloat162float(b[i % OUT]));
}
static void bias_add(bf16 *out, const bf16 *b, int M, int Nc) {
    const size_t total = (size_t)M * Nc;
    fp8_bias_kernel<<<qf_blocks(total, 256, (unsigned)qfc().num_sms * 8u), 256, 0, qfc_stream()>>>(out, b, total, Nc);
    CHECK_LAUNCH();
}

// The outer-vector scales applied after a unit-scale GEMM: y[m, n] = r[m, n] sa[m] sb[n] (+ bias[n]) (+ y[m, n] when
// acc; r = y when not), 8 elements a thread (Nc % 16 == 0). The rowwise recipe's scales are powers of two, so
// r sa sb is exact and the values are those of a GEMM that scales inside (one rounding of the fp32 sum to bf16);
// with acc, the sum with y is a second rounding (cuBLASLt's beta = 1 rounds once).
__global__ void fp8_scale_rows_kernel(bf16 *y, const bf16 *r, const float *sa, const float *sb, const bf16 *bias,
                                      int M, int Nc, int acc) {
    const size_t total = (size_t)M * Nc;
    for (size_t e = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; e < total;
         e += (size_t)gridDim.x * blockDim.x * 8) {
        const int m = (int)(e / Nc), n = (int)(e % Nc);
        float f[8], o[8];
        ld8<bf16>(f, r, e, total, true);
        if (acc) ld8<bf16>(o, y, e, total, true);
        const float s = sa[m];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float v = f[j] * (s * sb[n + j]);
            if (bias) v = __fadd_rn(v, __bfloat162float(bias[n + j]));
            f[j] = acc ? __fadd_rn(o[j], v) : v;
        }
        st8<bf16>(y, f, e, total, true);
    }
}
static __global__ void fp8_unit_kernel(float *p) { *p = 1.0f; }

// an outer-vector GEMM that cuBLASLt has no kernel for (cuBLASLt 13.1 offers none on sm_90, measured on an H200):
// the GEMM with unit scalar scales into out (or, accumulating, into tmp), then
// fp8_scale_rows_kernel. 0, or -1 when there is no unit-scale kernel either.
static int fp8_gemm_outer_after(bf16 *out, const uint8_t *a8, int fa, const float *sa, const uint8_t *b8, int fb,
                                const float *sb, const bf16 *bias, int M, int Nc, int K, int accumulate, int fast) {
    qf_fp8_state *st = fp8_state();
    if (!st->unit) {
        st->unit = (float *)cu_alloc(64);
        if (!st->unit) QF_FATAL("out of GPU memory for the fp8 unit scale");
        fp8_unit_kernel<<<1, 1, 0, qfc_stream()>>>(st->unit);
        CHECK_LAUNCH();
    }
    for (int v = 0; v < 2; v++) { // with fast accumulation where asked, then without
        const int use_fast = fast && v == 0;
        if (v == 1 && !fast) break;
        qf_fp8_plan *p = fp8_plan(fb, fa, Nc, M, K, 0, 0, use_fast);
        if (!p || p->refused) continue;
        bf16 *r = out;
        if (accumulate) {
            grow((void **)&st->tmp, &st->tmp_cap, (size_t)M * Nc * sizeof(bf16));
            r = st->tmp;
        }
        const cublasStatus_t s = fp8_run(p, r, a8, st->unit, b8, st->unit, NULL, 0.0f);
        if (s == CUBLAS_STATUS_NOT_SUPPORTED) {
            p->refused = 1;
            continue;
        }
        if (s != CUBLAS_STATUS_SUCCESS)
            QF_FATAL("cuBLASLt fp8 GEMM %d x %d x %d (formats %d/%d, unit scales) failed: %s", M, Nc, K, fa, fb,
                     cublasLtGetStatusString(s));
        const size_t total = (size_t)M * Nc;
        fp8_scale_rows_kernel<<<qf_blocks((total + 7) / 8, 256, (unsigned)qfc().num_sms * 8u), 256, 0,
                                qfc_stream()>>>(out, r, sa, sb, bias, M, Nc, accumulate);
        CHECK_LAUNCH();
        st->n_outer_after++;
        return 0;
    }
    return -1;
}

// out[M,Nc] (bf16) = (a8[M,K] scaled by sa) (b8[Nc,K] scaled by sb)^T (+ bias[Nc]) (+ out when accumulate).
// Scales: outer = 0: sa, sb point to one float each; outer = 1: sa[M], sb[Nc] (by cuBLASLt's outer-vector mode, or
// where it has none by fp8_gemm_outer_after). 0, or -1 when cuBLASLt has no fp8 kernel for the problem (the caller
// runs it in bf16); quiet (fp8_gemm warns).
static int fp8_gemm_try(bf16 *out, const uint8_t *a8, int fa, const float *sa, const uint8_t *b8, int fb,
                        const float *sb, int outer, const bf16 *bias, int M, int Nc, int K, int accumulate, int fast) {
    qf_fp8_state *st = fp8_state();
    // the wanted variant first, then without the bias epilogue (a kernel adds it), then without fast accumulation;
    // a variant the heuristic offers but the matmul call refuses (NOT_SUPPORTED, seen with the bias epilogue on
    // sm_90 and cuBLASLt 13.1) is marked and the next one tried
    for (int v = 0; v < 4 && !(outer && st->outer_none); v++) {
        const int use_bias = bias && !(v & 1), use_fast = fast && !(v & 2);
        if ((v & 1) && !bias) continue;
        if ((v & 2) && !fast) continue;
        qf_fp8_plan *p = fp8_plan(fb, fa, Nc, M, K, outer, use_bias, use_fast);
        if (!p || p->refused) continue;
        const bf16 *eb = use_bias ? bias : NULL;
        cublasStatus_t s = CUBLAS_STATUS_NOT_SUPPORTED;
        if (!accumulate || !p->no_beta) s = fp8_run(p, out, a8, sa, b8, sb, eb, accumulate ? 1.0f : 0.0f);
        if (s != CUBLAS_STATUS_SUCCESS && accumulate) { // no beta = 1 for this kernel: compute apart, then add
            if (!p->no_beta && !st->warned_beta++)
                fprintf(stderr,
                        "qwen-ft: warning: cuBLASLt refuses to accumulate (beta = 1) into a %d x %d fp8 GEMM "
                        "(status %d); accumulating in a separate pass\n",
                        M, Nc, (int)s);
            p->no_beta = 1;
            grow((void **)&st->tmp, &st->tmp_cap, (size_t)M * Nc * sizeof(bf16));
            s = fp8_run(p, st->tmp, a8, sa, b8, sb, eb, 0.0f);
            if (s == CUBLAS_STATUS_SUCCESS) cu_add_inplace<bf16>(out, st->tmp, (size_t)M * Nc);
        }
        if (s == CUBLAS_STATUS_NOT_SUPPORTED) {
            p->refused = 1;
            continue;
        }
        if (s != CUBLAS_STATUS_SUCCESS)
            QF_FATAL("cuBLASLt fp8 GEMM %d x %d x %d (formats %d/%d, %s scales, bias %d) failed: %s", M, Nc, K, fa, fb,
                     outer ? "outer-vector" : "scalar", eb != NULL, cublasLtGetStatusString(s));
        if (bias && !use_bias) bias_add(out, bias, M, Nc);
        return 0;
    }
    if (outer) return fp8_gemm_outer_after(out, a8, fa, sa, b8, fb, sb, bias, M, Nc, K, accumulate, fast);
    return -1;
}
static int fp8_gemm(bf16 *out, const uint8_t *a8, int fa, const float *sa, const uint8_t *b8, int fb, const float *sb,
                    int outer, const bf16 *bias, int M, int Nc, int K, int accumulate, int fast) {
    qf_fp8_state *st = fp8_state();
    if (!fp8_gemm_try(out, a8, fa, sa, b8, fb, sb, outer, bias, M, Nc, K, accumulate, fast)) {
        st->n_fp8++;
        return 0;
    }
    if (!st->warned_algo++)
        fprintf(stderr,
                "qwen-ft: warning: cuBLASLt has no fp8 kernel for a %d x %d x %d GEMM (%s scales); such GEMMs run in "
                "bf16\n",
                M, Nc, K, outer ? "outer-vector" : "scalar");
    return -1;
}

static int dims_ok(const qf_fp8_state *st, int N, int IN, int OUT) {
    return N % 16 == 0 && IN % 16 == 0 && OUT % 16 == 0 && IN >= st->min_dim && OUT >= st->min_dim;
}
static uint8_t *buf(qf_fp8_state *st, int i, size_t bytes) {
    grow((void **)&st->buf[i], &st->cap[i], bytes);
    return st->buf[i];
}

template <int RECIPE>
void cu_matmul_fp8_fwd(void *out_, const void *x_, const void *w_, const void *b_, int N, int IN, int OUT,
                       int accumulate) {
    qf_fp8_state *st = fp8_state();
    const qf_fp8_call call = fp8_call_take(st);
    const int wid = call.wid, promised = call.promised, smode = call.smode, skey = call.skey;
    const uint64_t wver = call.wver;
    const qf_fp8_xcopy &xprev = call.xprev;
    if (N <= 0 || OUT <= 0) return;
    bf16 *out = (bf16 *)out_;
    const bf16 *x = (const bf16 *)x_, *w = (const bf16 *)w_, *b = (const bf16 *)b_;
    if (!dims_ok(st, N, IN, OUT) || !qf_ptr_aligned(out, 16)) {
        cu_matmul_fwd<bf16>(out_, x_, w_, b_, N, IN, OUT, accumulate);
        st->n_bf16++;
        return;
    }
    const bf16 *eb = b && qf_ptr_aligned(b, 16) ? b : NULL; // the epilogue wants an aligned bias
    grow_vectors(st, (size_t)(N > OUT ? N : OUT));
    uint8_t *x8 = buf(st, 0, (size_t)N * IN), *w8 = buf(st, 1, (size_t)OUT * IN);
    float *sx, *sw;
    int rc;
    if (RECIPE == QF_FP8_TENSORWISE) {
        sx = st->sc, sw = st->sc + 16;
        const int reuse = fp8_xcopy_fits(st, &xprev, promised, 1, x, N, IN); // q(x) and its scale as they lie
        if (!reuse) {
            CHECK_CUDA(cudaMemsetAsync(st->am, 0, sizeof(unsigned), qfc_stream()));
            fp8_amax(x, (size_t)N * IN, st->am);
            st->n_amax++;
        }
        unsigned *rec, *aw = fp8_weight_amax(st, wid, wver, w, (size_t)OUT * IN, st->am + 1, &rec);
        // fp8.save_inputs: q(x) and the backward's q(x)^T in one pass (the same fp8 values either way)
        uint8_t *xT8 = smode == 1 && !reuse ? fp8_saved_buf(st, skey, (size_t)N * IN) : NULL;
        if (xT8)
            fp8_quant_t(x8, xT8, x, N, IN, st->am, 0, sx, QF_FP8_E4M3, 0, NULL);
        else if (!reuse)
            fp8_quant(x8, x, (size_t)N * IN, st->am, sx, QF_FP8_E4M3, 0, NULL);
        if (xT8) fp8_saved_done(st, skey, x, N, IN, sx);
        fp8_quant(w8, w, (size_t)OUT * IN, aw, sw, QF_FP8_E4M3, 0, rec);
        fp8_xcopy_keep(st, 1, x, N, IN, out, (size_t)N * OUT * sizeof(bf16));
        rc = fp8_gemm(out, x8, QF_FP8_E4M3, sx, w8, QF_FP8_E4M3, sw, 0, eb, N, OUT, IN, accumulate, 1);
    } else {
        sx = st->sc, sw = st->sc + st->vcap;
        fp8_quant_rows(x8, x, N, IN, sx, QF_FP8_E4M3, 1);
        fp8_quant_rows(w8, w, OUT, IN, sw, QF_FP8_E4M3, 1);
        rc = fp8_gemm(out, x8, QF_FP8_E4M3, sx, w8, QF_FP8_E4M3, sw, 1, eb, N, OUT, IN, accumulate, 1);
    }
    if (rc < 0) {
        cu_matmul_fwd<bf16>(out_, x_, w_, b_, N, IN, OUT, accumulate);
        st->n_bf16++;
        return;
    }
    if (b && !eb) bias_add(out, b, N, OUT);
}

// out = res + x w^T in fp8: the residual copied into out, then the accumulating GEMM (cuBLASLt's fp8 kernels take
// beta = 1 on D; a separate C operand is one more layout to probe for one copy of [N, OUT] bf16 saved)
template <int RECIPE>
void cu_matmul_fp8_fwd_add(void *out, const void *x, const void *w, const void *res, int N, int IN, int OUT) {
    if (N <= 0 || OUT <= 0) {
        qf_fp8_state *st = fp8_state();
        st->tag_set = 0, st->same_x = 0, st->xc.kind = 0, st->save_mode = 0; // the requests were this call's
        return;
    }
    if (res != out) cu_copy_d2d(out, res, (size_t)N * OUT * sizeof(bf16));
    cu_matmul_fp8_fwd<RECIPE>(out, x, w, NULL, N, IN, OUT, 1);
}

template <int RECIPE>
void cu_matmul_fp8_bwd(void *dx_, void *dw_, void *db_, const void *dout_, const void *x_, const void *w_, int N,
                       int IN, int OUT, int accumulate_dx) {
    qf_fp8_state *st = fp8_state();
    const qf_fp8_call call = fp8_call_take(st);
    const int wid = call.wid, promised = call.promised, smode = call.smode, skey = call.skey;
    const uint64_t wver = call.wver;
    const qf_fp8_xcopy &xprev = call.xprev;
    if (N <= 0) return;
    if (!dims_ok(st, N, IN, OUT)) {
        cu_matmul_bwd<bf16>(dx_, dw_, db_, dout_, x_, w_, N, IN, OUT, accumulate_dx);
        st->n_bf16 += (dx_ != NULL) + (dw_ != NULL);
        return;
    }
    bf16 *dx = (bf16 *)dx_, *dw = (bf16 *)dw_, *db = (bf16 *)db_;
    const bf16 *dy = (const bf16 *)dout_, *x = (const bf16 *)x_, *w = (const bf16 *)w_;
    const int do_dw = dw && qf_ptr_aligned(dw, 16), do_dx = dx && qf_ptr_aligned(dx, 16);
    const size_t ny = (size_t)N * OUT;
    grow_vectors(st, (size_t)(N > OUT ? (N > IN ? N : IN) : (OUT > IN ? OUT : IN)));
    uint8_t *g8 = do_dx ? buf(st, 2, ny) : NULL, *gT8 = do_dw ? buf(st, 3, ny) : NULL;
    const size_t V = st->vcap;
    const int tw = RECIPE == QF_FP8_TENSORWISE;
    const int fg = tw ? QF_FP8_E5M2 : QF_FP8_E4M3, pow2 = !tw;
    // scale slots: tensorwise sc[0] x, sc[1] W, sc[2] dy; rowwise sc[0..V) dy rows, [V..2V) dy columns,
    // [2V..3V) x columns, [3V..4V) W columns; amax words likewise (am[0..V) dy, [V..2V) x, [2V..3V) W)
    float *s_g = st->sc + (tw ? 32 : 0), *s_gT = tw ? s_g : st->sc + V, *s_x = st->sc + (tw ? 0 : 2 * V),
          *s_w = st->sc + (tw ? 16 : 3 * V);
    unsigned *a_g = st->am + (tw ? 2 : 0), *a_x = st->am + (tw ? 0 : V), *a_w = st->am + (tw ? 1 : 2 * V);
    if (do_dw || do_dx) CHECK_CUDA(cudaMemsetAsync(st->am, 0, (tw ? 3 : 3 * V) * sizeof(unsigned), qfc_stream()));
    if (tw) {
        if (do_dw || do_dx) {
            fp8_amax(dy, ny, a_g);
            st->n_amax++;
            fp8_quant_t(g8, gT8, dy, N, OUT, a_g, 0, s_g, fg, 0, NULL); // q(dy) and q(dy)^T in one pass
        }
    } else {
        if (do_dx) fp8_quant_rows(g8, dy, N, OUT, s_g, fg, 1);
        if (do_dw) {
            fp8_amax_cols(dy, N, OUT, a_g);
            fp8_quant_t(NULL, gT8, dy, N, OUT, a_g, 1, s_gT, fg, 1, NULL);
        }
    }
    // wgrad first, so that dx may share memory with x (stream order)
    if (dw) {
        int rc = -1;
        if (do_dw) {
            uint8_t *xT8 = buf(st, 0, (size_t)N * IN);
            const uint8_t *sx8 = NULL;
            const float *ssx = NULL;
            if (tw && smode == 2) sx8 = fp8_saved_get(st, skey, x, N, IN, &ssx); // the forward's q(x)^T
            if (sx8) {
                xT8 = (uint8_t *)sx8, s_x = (float *)ssx;
            } else if (tw) {
                if (!fp8_xcopy_fits(st, &xprev, promised, 2, x, N, IN)) { // else q(x)^T and its scale as they lie
                    fp8_amax(x, (size_t)N * IN, a_x), st->n_amax++;
                    fp8_quant_t(NULL, xT8, x, N, IN, a_x, 0, s_x, QF_FP8_E4M3, 0, NULL);
                }
                fp8_xcopy_keep(st, 2, x, N, IN, dx, (size_t)N * IN * sizeof(bf16)); // dx (any path) may alias x
            } else {
                fp8_amax_cols(x, N, IN, a_x);
                fp8_quant_t(NULL, xT8, x, N, IN, a_x, 1, s_x, QF_FP8_E4M3, pow2, NULL);
            }
            rc = fp8_gemm(dw, gT8, fg, s_gT, xT8, QF_FP8_E4M3, s_x, !tw, NULL, OUT, IN, N, 1, 0);
        }
        if (rc < 0) {
            cu_gemm_tn<bf16>(dw, dy, x, OUT, IN, N);
            st->n_bf16++;
        }
    }
    if (db) cu_colsum_add<bf16>(db, dy, N, OUT);
    if (dx) {
        int rc = -1;
        if (do_dx) {
            uint8_t *wT8 = buf(st, 1, (size_t)OUT * IN);
            unsigned *rec = NULL;
            if (tw)
                a_w = fp8_weight_amax(st, wid, wver, w, (size_t)OUT * IN, a_w, &rec);
            else
                fp8_amax_cols(w, OUT, IN, a_w);
            fp8_quant_t(NULL, wT8, w, OUT, IN, a_w, !tw, s_w, QF_FP8_E4M3, pow2, rec);
            rc = fp8_gemm(dx, g8, fg, s_g, wT8, QF_FP8_E4M3, s_w, !tw, NULL, N, IN, OUT, accumulate_dx, 0);
        }
        if (rc < 0) {
            cu_gemm_nn<bf16>(dx, dy, w, N, IN, OUT, accumulate_dx);
            st->n_bf16++;
        }
    }
}

template void cu_matmul_fp8_fwd<QF_FP8_TENSORWISE>(void *, const void *, const void *, const void *, int, int, int,
                                                   int);
template void cu_matmul_fp8_fwd<QF_FP8_ROWWISE>(void *, const void *, const void *, const void *, int, int, int, int);
template void cu_matmul_fp8_fwd_add<QF_FP8_TENSORWISE>(void *, const void *, const void *, const void *, int, int, int);
template void cu_matmul_fp8_fwd_add<QF_FP8_ROWWISE>(void *, const void *, const void *, const void *, int, int, int);
template void cu_matmul_fp8_bwd<QF_FP8_TENSORWISE>(void *, void *, void *, const void *, const void *, const void *,
                                                   int, int, int, int);
template void cu_matmul_fp8_bwd<QF_FP8_ROWWISE>(void *, void *, void *, const void *, const void *, const void *, int,
                                                int, int, int);

// A 64 x 64 x 64 GEMM of ones in the recipe's formats and scale mode, run and read back: cuBLASLt's heuristic can
// offer a kernel that the library then refuses at run time, so the probe runs it (once, at table creation).
int qfc_fp8_probe(int recipe, char *why, int cap) {
    qf_cuda_ctx &c = qfc();
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, c.device));
    const int cc = prop.major * 10 + prop.minor;
    if (cc < 89) {
        snprintf(why, (size_t)cap,
                 "GPU %d (%s) has compute capability %d.%d; fp8 tensor cores need 8.9 (Ada) or 9.0 "
                 "(Hopper) and newer",
                 c.device, prop.name, prop.major, prop.minor);
        return 0;
    }
    const int tw = recipe == QF_FP8_TENSORWISE, n = 64;
    const int fa = tw ? QF_FP8_E5M2 : QF_FP8_E4M3; // the dgrad's pair: e5m2 gradient x e4m3 weight (tensorwise)
    qf_fp8_plan *p = fp8_plan(QF_FP8_E4M3, fa, n, n, n, !tw, 0, 0);
    const char *mode = tw ? "per-tensor (scalar) scales" : "per-row (outer-vector) scales";
    qf_fp8_state *st = fp8_state();
    if (!p && !tw) { // no outer-vector kernel (cuBLASLt 13.1 on sm_90): the unit-scale GEMM + scale_rows form
        st->outer_none = 1;
        mode = "per-row scales applied after a unit-scale GEMM";
        p = fp8_plan(QF_FP8_E4M3, fa, n, n, n, 0, 0, 0);
    }
    if (!p) {
        snprintf(why, (size_t)cap, "cuBLASLt %zu offers no fp8 GEMM with %s on %s (sm_%d)", cublasLtGetVersion(), mode,
                 prop.name, cc);
        return 0;
    }
    uint8_t *a8 = (uint8_t *)cu_alloc(n * n), *b8 = (uint8_t *)cu_alloc(n * n);
    float *sv = (float *)cu_alloc(2 * n * sizeof(float));
    bf16 *out = (bf16 *)cu_alloc(n * n * sizeof(bf16));
    QF_CHECK(a8 && b8 && sv && out);
    CHECK_CUDA(cudaMemsetAsync(a8, fa == QF_FP8_E4M3 ? 0x38 : 0x3c, n * n, c.stream)); // 1.0
    CHECK_CUDA(cudaMemsetAsync(b8, 0x38, n * n, c.stream));
    float ones[2 * 64];
    for (int i = 0; i < 2 * n; i++) ones[i] = i < n ? 0.5f : 0.25f;
    CHECK_CUDA(cudaMemcpyAsync(sv, ones, sizeof ones, cudaMemcpyHostToDevice, c.stream));
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (st->outer_none && !tw) // the form the rowwise GEMMs will take (fp8_gemm_outer_after)
        s = fp8_gemm_try(out, a8, fa, sv, b8, QF_FP8_E4M3, sv + n, 1, NULL, n, n, n, 0, 0) ? CUBLAS_STATUS_NOT_SUPPORTED
                                                                                           : CUBLAS_STATUS_SUCCESS;
    else
        s = fp8_run(p, out, a8, sv, b8, sv + n, NULL, 0.0f);
    uint16_t h[64 * 64];
    int good = 0;
    if (s == CUBLAS_STATUS_SUCCESS) {
        CHECK_CUDA(cudaMemcpyAsync(h, out, sizeof h, cudaMemcpyDeviceToHost, c.stream));
        CHECK_CUDA(cudaStreamSynchronize(c.stream));
        good = 1; // 64 x 1 x 1 x 0.5 x 0.25 = 8 = bf16 0x4100 everywhere
        for (int i = 0; i < n * n; i++) good &= h[i] == 0x4100;
    } else {
        CHECK_CUDA(cudaStreamSynchronize(c.stream));
    }
    cu_free(a8), cu_free(b8), cu_free(sv), cu_free(out);
    if (!good) {
        snprintf(why, (size_t)cap, "cuBLASLt %zu on %s (sm_%d): its fp8 GEMM with %s %s", cublasLtGetVersion(),
                 prop.name, cc, mode, s != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(s) : "gave wrong results");
        return 0;
    }
    // a table that runs: why[] says how, where it is not the plain way (the run header's backend line shows it)
    if (st->outer_none && !tw)
        snprintf(why, (size_t)cap, "per-row scales applied after a unit-scale GEMM: cuBLASLt %zu has no outer-vector "
                 "fp8 kernel on sm_%d", cublasLtGetVersion(), cc);
    else
        why[0] = 0;
    return 1;
}

extern "C" void qf_cuda_fp8_set_min_dim(int d) { fp8_state()->min_dim = d; }
extern "C" int qf_cuda_fp8_min_dim(void) { return fp8_state()->min_dim; }

extern "C" void qf_cuda_fp8_stats(qf_cuda_fp8_stat *s) {
    qf_cuda_ctx &c = qfc();
    memset(s, 0, sizeof *s);
    if (!c.fp8) return;
    s->gemm_fp8 = c.fp8->n_fp8, s->gemm_bf16 = c.fp8->n_bf16;
    s->amax_passes = c.fp8->n_amax, s->weight_amax_passes = c.fp8->n_amax_w;
    s->weight_reused = c.fp8->n_w_reused, s->weight_delayed = c.fp8->n_w_delayed;
    s->x_reused = c.fp8->n_x_reused;
    s->x_saved = c.fp8->n_x_saved, s->x_saved_used = c.fp8->n_x_saved_used;
    s->outer_after = c.fp8->n_outer_after;
}
extern "C" void qf_cuda_fp8_counts(uint64_t counts[2]) {
    qf_cuda_ctx &c = qfc();
    counts[0] = c.fp8 ? c.fp8->n_fp8 : 0;
    counts[1] = c.fp8 ? c.fp8->n_bf16 : 0;
}
