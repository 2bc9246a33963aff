// matmul_cuda.cu — linear layers on cuBLASLt: bf16, fp16 (or fp32) operands, fp32 compute (CUBLAS_COMPUTE_32F, fp32
// alpha/beta; no TF32 for the fp32 table), bias fused with CUBLASLT_EPILOGUE_BIAS, accumulation through beta = 1.
//
// Row-major tensors are handed to column-major cuBLASLt as their transposes: out[M,N] row-major is out^T [N,M]
// column-major, so out = a b^T becomes out^T = b a^T, etc. (see the three gemm_* below).
// Problems are cached (descriptors + the heuristic's algorithm, keyed by shape, layout, dtype, epilogue and pointer
// alignment) in the backend context, so a training step makes no heuristic queries after its first.
// QWENFT_GEMM_TUNE=N (a bench hook, docs/testing.md): a plan's first call outside a graph capture times the
// heuristic's first N algorithms on that call's operands (the output written to a scratch buffer) and keeps the
// fastest, one line each on stderr; the default keeps the heuristic's first. A tuned run may pick another algorithm
// from run to run (timing noise between near-equal ones), so its sums may differ in the last bit between runs.
// db (column sums of dout) is a deterministic reduction kernel (norm_cuda.cu), not an epilogue: it must ADD into
// db, and BGRADB would overwrite it.
#include "cuda_common.cuh"
#include <string.h>

struct qf_lt_plan {
    int used;
    cudaDataType_t dt;
    cublasOperation_t ta, tb;
    int m, n, k;
    int64_t lda, ldb, ldc;
    cublasLtEpilogue_t epi;
    uint32_t al_a, al_b, al_c;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t A, B, C;
    cublasLtMatmulAlgo_t algo;
    int tuned; // QWENFT_GEMM_TUNE: the algorithm was timed against the heuristic's others
};
#define QF_LT_PLANS 128

static uint32_t ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && a % al) al >>= 1;
    return al;
}

static void plan_destroy(qf_lt_plan *p) {
    if (!p->used) return;
    cublasLtMatmulDescDestroy(p->op);
    cublasLtMatrixLayoutDestroy(p->A);
    cublasLtMatrixLayoutDestroy(p->B);
    cublasLtMatrixLayoutDestroy(p->C);
    p->used = 0;
}
void qfc_matmul_destroy_plans() {
    qf_cuda_ctx &c = qfc();
    for (int i = 0; c.plans && i < c.nplans; i++) plan_destroy(&c.plans[i]);
}

// the heuristic's first `want` algorithms for p's problem (the workspace and the operands' alignments); how many.
// Candidates beyond the first (QWENFT_GEMM_TUNE) may split k only with the partial sums kept in fp32: with every
// candidate offered, test_ops_cuda's classifier dx came out 1.5x over its bf16 tolerance (H100, session 17),
// likely from a split-k algorithm that adds its parts in the output type (bf16, in place or in the workspace).
static int plan_heuristic(const qf_lt_plan *p, cublasLtMatmulHeuristicResult_t *res, int want) {
    qf_cuda_ctx &c = qfc();
    cublasLtMatmulPreference_t pref;
    CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = c.lt_ws_bytes;
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->al_a, sizeof p->al_a));
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->al_b, sizeof p->al_b));
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->al_c, sizeof p->al_c));
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->al_c, sizeof p->al_c));
    if (want > 1) {
        const uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red));
    }
    int nres = 0;
    CHECK_CUBLAS(cublasLtMatmulAlgoGetHeuristic(c.lt, p->op, p->A, p->B, p->C, p->C, pref, want, res, &nres));
    cublasLtMatmulPreferenceDestroy(pref);
    return nres;
}

static qf_lt_plan *get_plan(cudaDataType_t dt, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            int64_t lda, int64_t ldb, int64_t ldc, cublasLtEpilogue_t epi, uint32_t al_a, uint32_t al_b,
                            uint32_t al_c) {
    qf_cuda_ctx &c = qfc();
    if (!c.plans) {
        c.plans = (qf_lt_plan *)qf_calloc(QF_LT_PLANS, sizeof(qf_lt_plan));
        c.nplans = QF_LT_PLANS;
    }
    for (int i = 0; i < c.nplans; i++) {
        qf_lt_plan *p = &c.plans[i];
        if (p->used && p->dt == dt && p->ta == ta && p->tb == tb && p->m == m && p->n == n && p->k == k &&
            p->lda == lda && p->ldb == ldb && p->ldc == ldc && p->epi == epi && p->al_a == al_a && p->al_b == al_b &&
            p->al_c == al_c)
            return p;
    }
    qf_lt_plan *p = &c.plans[c.plan_next];
    c.plan_next = (c.plan_next + 1) % c.nplans;
    plan_destroy(p);
    p->dt = dt, p->ta = ta, p->tb = tb, p->m = m, p->n = n, p->k = k, p->lda = lda, p->ldb = ldb, p->ldc = ldc;
    p->epi = epi, p->al_a = al_a, p->al_b = al_b, p->al_c = al_c;
    CHECK_CUBLAS(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->A, dt, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->B, dt, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->C, dt, m, n, ldc));
    cublasLtMatmulHeuristicResult_t res;
    const int nres = plan_heuristic(p, &res, 1);
    if (nres < 1)
        QF_FATAL("cuBLASLt has no algorithm for m=%d n=%d k=%d (dtype %d, trans %d/%d, ld %lld/%lld/%lld, epilogue %d, "
                 "alignment %u/%u/%u)",
                 m, n, k, (int)dt, (int)ta, (int)tb, (long long)lda, (long long)ldb, (long long)ldc, (int)epi, al_a,
                 al_b, al_c);
    p->algo = res.algo;
    p->tuned = 0;
    p->used = 1;
    return p;
}

// QWENFT_GEMM_TUNE=N: time the heuristic's first N algorithms on this call's operands, D written to scratch (C read
// as the call reads it; the bias pointer already set), 1 untimed + 3 timed calls each; keep the fastest. Left for a
// later call inside a graph capture; the heuristic's first kept when the scratch does not fit.
static void plan_tune(qf_lt_plan *p, const void *A, const void *B, const void *Cin, float beta, size_t elt) {
    qf_cuda_ctx &c = qfc();
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    CHECK_CUDA(cudaStreamIsCapturing(c.stream, &cs));
    if (cs != cudaStreamCaptureStatusNone) return;
    p->tuned = 1;
    enum { TUNE_MAX = 32 };
    cublasLtMatmulHeuristicResult_t res[TUNE_MAX];
    const int nres = plan_heuristic(p, res, c.gemm_tune < TUNE_MAX ? c.gemm_tune : TUNE_MAX);
    void *D = nres > 1 ? cu_alloc((size_t)p->ldc * (size_t)p->n * elt) : NULL;
    if (!D) return;
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    const float alpha = 1.0f;
    float first = -1.0f, best = 0.0f;
    int pick = -1;
    for (int i = 0; i < nres; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        cublasStatus_t st = cublasLtMatmul(c.lt, p->op, &alpha, A, p->A, B, p->B, &beta, Cin, p->C, D, p->C,
                                           &res[i].algo, c.lt_ws, c.lt_ws_bytes, c.stream);
        if (st != CUBLAS_STATUS_SUCCESS) continue; // offered, then refused at the call: not a candidate
        CHECK_CUDA(cudaEventRecord(e0, c.stream));
        for (int r = 0; r < 3; r++)
            CHECK_CUBLAS(cublasLtMatmul(c.lt, p->op, &alpha, A, p->A, B, p->B, &beta, Cin, p->C, D, p->C,
                                        &res[i].algo, c.lt_ws, c.lt_ws_bytes, c.stream));
        CHECK_CUDA(cudaEventRecord(e1, c.stream));
        CHECK_CUDA(cudaEventSynchronize(e1));
        float ms = 0.0f;
        CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        const float us = ms * 1000.0f / 3.0f;
        if (i == 0) first = us;
        if (pick < 0 || us < best) best = us, pick = i;
    }
    CHECK_CUDA(cudaEventDestroy(e0));
    CHECK_CUDA(cudaEventDestroy(e1));
    cu_free(D);
    if (pick < 0) return;
    p->algo = res[pick].algo;
    fprintf(stderr,
            "qwen-ft: QWENFT_GEMM_TUNE: m=%d n=%d k=%d (trans %d/%d, dtype %d, epilogue %d, beta %g): the heuristic's "
            "first %.1f us, fastest #%d of %d %.1f us (%.1f TFLOP/s)\n",
            p->m, p->n, p->k, (int)p->ta, (int)p->tb, (int)p->dt, (int)p->epi, (double)beta, (double)first, pick + 1,
            nres, (double)best, 2.0 * p->m * p->n * p->k / (best * 1e-6) / 1e12);
}

// column-major D[m,n] = op(A) op(B) (+ bias[m]) + beta Cin (Cin = D unless given; same layout as D)
template <typename T>
static void lt_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T *A, int64_t lda,
                    const T *B, int64_t ldb, T *D, int64_t ldc, const T *bias, float beta, const T *Cin = NULL) {
    if (m <= 0 || n <= 0) return;
    QF_CHECK(k > 0);
    qf_cuda_ctx &c = qfc();
    const cudaDataType_t dt = qf_cuda_dtype<T>::value;
    const cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (!Cin) Cin = D;
    const uint32_t al_d = ptr_align(D) < ptr_align(Cin) ? ptr_align(D) : ptr_align(Cin);
    qf_lt_plan *p = get_plan(dt, ta, tb, m, n, k, lda, ldb, ldc, epi, ptr_align(A), ptr_align(B), al_d);
    if (bias) CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (c.gemm_tune && !p->tuned) plan_tune(p, A, B, Cin, beta, sizeof(T));
    const float alpha = 1.0f;
    CHECK_CUBLAS(cublasLtMatmul(c.lt, p->op, &alpha, A, p->A, B, p->B, &beta, Cin, p->C, D, p->C, &p->algo, c.lt_ws,
                                c.lt_ws_bytes, c.stream));
}

// out[M,N] = a[M,K] b[N,K]^T (+ bias) (+ out):  out^T = b a^T  (A = b: K x N col-major, transposed; B = a: K x M)
template <typename T> void cu_gemm_nt(T *out, const T *a, const T *b, const T *bias, int M, int N, int K, int accumulate) {
    lt_gemm<T>(CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, b, K, a, K, out, N, bias, accumulate ? 1.0f : 0.0f);
}
// out[M,N] = a[M,K] b[K,N] (+ out):  out^T = b^T a^T  (A = b: N x K col-major; B = a: K x M col-major)
template <typename T> void cu_gemm_nn(T *out, const T *a, const T *b, int M, int N, int K, int accumulate) {
    lt_gemm<T>(CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, b, N, a, K, out, N, (const T *)NULL, accumulate ? 1.0f : 0.0f);
}
// out[M,N] += a[K,M]^T b[K,N]:  out^T = b^T a  (A = b: N x K col-major; B = a: M x K col-major, transposed)
template <typename T> void cu_gemm_tn(T *out, const T *a, const T *b, int M, int N, int K) {
    lt_gemm<T>(CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, b, N, a, M, out, N, (const T *)NULL, 1.0f);
}

// out[n, o] += b[o]: for a bias the epilogue cannot take (cuBLASLt wants it 16-byte aligned; model biases are
// views into the flat parameter buffer at any element offset)
template <typename T> __global__ void add_bias_kernel(T *out, const T *b, int N, int OUT) {
    const size_t total = (size_t)N * OUT;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        out[i] = fromf<T>(tof<T>(out[i]) + tof<T>(b[i % OUT]));
}

template <typename T>
void cu_matmul_fwd(void *out, const void *x, const void *w, const void *b, int N, int IN, int OUT, int accumulate) {
    if (N <= 0 || OUT <= 0) return;
    if (cu_gemv<T>((T *)out, (const T *)x, (const T *)w, (const T *)b, (const T *)NULL, N, IN, OUT, accumulate))
        return; // decoding sizes (gemv_cuda.cu)
    if (b && !qf_ptr_aligned(b, 16)) {
        cu_gemm_nt<T>((T *)out, (const T *)x, (const T *)w, (const T *)NULL, N, OUT, IN, accumulate);
        const size_t total = (size_t)N * OUT;
        add_bias_kernel<T><<<qf_blocks(total, 256, (unsigned)qfc().num_sms * 8u), 256, 0, qfc_stream()>>>(
            (T *)out, (const T *)b, N, OUT);
        CHECK_LAUNCH();
        return;
    }
    cu_gemm_nt<T>((T *)out, (const T *)x, (const T *)w, (const T *)b, N, OUT, IN, accumulate);
}

// out = res + x w^T: cuBLASLt reads C = res and writes D = out (no copy of the residual stream)
template <typename T>
void cu_matmul_fwd_add(void *out, const void *x, const void *w, const void *res, int N, int IN, int OUT) {
    if (N <= 0 || OUT <= 0) return;
    if (cu_gemv<T>((T *)out, (const T *)x, (const T *)w, (const T *)NULL, (const T *)res, N, IN, OUT, 0)) return;
    lt_gemm<T>(CUBLAS_OP_T, CUBLAS_OP_N, OUT, N, IN, (const T *)w, IN, (const T *)x, IN, (T *)out, OUT,
               (const T *)NULL, 1.0f, (const T *)res);
}

template <typename T>
void cu_matmul_bwd(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w, int N, int IN, int OUT,
                   int accumulate_dx) {
    if (N <= 0) return;
    // parameter gradients first, so that dx may share memory with x (stream order)
    if (dw) cu_gemm_tn<T>((T *)dw, (const T *)dout, (const T *)x, OUT, IN, N);
    if (db) cu_colsum_add<T>((T *)db, (const T *)dout, N, OUT);
    if (dx) cu_gemm_nn<T>((T *)dx, (const T *)dout, (const T *)w, N, IN, OUT, accumulate_dx);
}

#define INST(T)                                                                                                      \
    template void cu_gemm_nt<T>(T *, const T *, const T *, const T *, int, int, int, int);                          \
    template void cu_gemm_nn<T>(T *, const T *, const T *, int, int, int, int);                                     \
    template void cu_gemm_tn<T>(T *, const T *, const T *, int, int, int);                                          \
    template void cu_matmul_fwd<T>(void *, const void *, const void *, const void *, int, int, int, int);          \
    template void cu_matmul_fwd_add<T>(void *, const void *, const void *, const void *, int, int, int);           \
    template void cu_matmul_bwd<T>(void *, void *, void *, const void *, const void *, const void *, int, int, int, \
                                   int);
INST(float)
INST(bf16)
INST(f16)
