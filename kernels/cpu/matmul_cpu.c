/* matmul_cpu.c — linear layers y = x W^T + b and their backward, on three cache-blocked GEMM shapes.
 *
 * All three shapes share one register-blocked micro-kernel: a 4 x 16 tile of outputs kept in vector registers
 * while the contracted index k runs 0..K-1 in order (c[r][j] += a[r,k] * b[k,j]), built for the default build's
 * vectors and for AVX2, and an 8 x 16 tile for AVX-512 (chosen at run time; all round identically; 1024 x 896 x
 * 4864 on 2 cores: 43 GFLOP/s before session 17, 73 with AVX2, 104 with AVX-512).
 * Edge tiles use a scalar kernel with the same order, so every output element is the same sequential sum
 * wherever it falls and however many threads run: results are bitwise reproducible. */
#include "cpu_impl.h"
#include "ops.h"
#include "util.h"
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* GCC: off already under -std=c11 */
#endif

#define MR 4   /* rows of the register tile */
#define NR 16  /* columns of the register tile: two 8-float vectors */
#define MC 64  /* rows of a cache tile (nt, nn) */
#define KC 256 /* k-chunk: packed panel rows (nt, nn); rows of dout/x streamed through cache per pass (tn) */

/* An 8-float vector (GCC/Clang vector extension): one AVX register, or two SSE registers in the default build.
 * Loads and stores go through an unaligned, may_alias variant of the type. */
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define LD8(p) (*(const v8u *)(p))
#define ST8(p, v) (*(v8u *)(p) = (v))
/* x in every lane: a broadcast load (written as (v8){0} + x it cost a scalar add per use on the FP ports). The two
 * differ only for x = -0.0, and the sum only where it is -0.0 so far, which a sum from +0 never is (x + -x rounds
 * to +0); the scalar edge kernel takes x as it is, so now every kernel does. */
#define BC8(x) ((v8){(x), (x), (x), (x), (x), (x), (x), (x)})

/* c[r][j] += sum_k a[r*ars + k*aks] * b[k*bks + j], r < MR, j < NR, k = 0..K-1 in order. Separate multiply and
 * add (no FMA: -std=c11 implies -ffp-contract=off, and the AVX2 variant does not enable FMA), so the SSE and
 * AVX2 variants and the scalar edge kernel round identically. */
static inline __attribute__((always_inline)) void kern_body(int K, const float *restrict a, ptrdiff_t ars,
                                                             ptrdiff_t aks, const float *restrict b, ptrdiff_t bks,
                                                             float c[MR][NR]) {
    v8 c00 = LD8(c[0]), c01 = LD8(c[0] + 8), c10 = LD8(c[1]), c11 = LD8(c[1] + 8);
    v8 c20 = LD8(c[2]), c21 = LD8(c[2] + 8), c30 = LD8(c[3]), c31 = LD8(c[3] + 8);
    for (int k = 0; k < K; k++) {
        const float *restrict bk = b + (ptrdiff_t)k * bks;
        const float *restrict ak = a + (ptrdiff_t)k * aks;
        const v8 b0 = LD8(bk), b1 = LD8(bk + 8);
        const v8 a0 = BC8(ak[0]), a1 = BC8(ak[ars]), a2 = BC8(ak[2 * ars]), a3 = BC8(ak[3 * ars]);
        c00 += a0 * b0;
        c01 += a0 * b1;
        c10 += a1 * b0;
        c11 += a1 * b1;
        c20 += a2 * b0;
        c21 += a2 * b1;
        c30 += a3 * b0;
        c31 += a3 * b1;
    }
    ST8(c[0], c00), ST8(c[0] + 8, c01), ST8(c[1], c10), ST8(c[1] + 8, c11);
    ST8(c[2], c20), ST8(c[2] + 8, c21), ST8(c[3], c30), ST8(c[3] + 8, c31);
}

typedef void (*kern_fn)(int K, const float *a, ptrdiff_t ars, ptrdiff_t aks, const float *b, ptrdiff_t bks,
                        float c[MR][NR]);
static void kern_full_default(int K, const float *a, ptrdiff_t ars, ptrdiff_t aks, const float *b, ptrdiff_t bks,
                              float c[MR][NR]) {
    kern_body(K, a, ars, aks, b, bks, c);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void kern_full_avx2(int K, const float *a, ptrdiff_t ars, ptrdiff_t aks,
                                                            const float *b, ptrdiff_t bks, float c[MR][NR]) {
    kern_body(K, a, ars, aks, b, bks, c);
}
#endif
/* An 8 x 16 tile, one 16-float vector per row: with AVX-512 the 8 rows give the 8 independent sums per k that the
 * 4 x 16 tile gets from two 8-float halves, at twice the lanes; each element's sum is the same (k in order, a
 * separate multiply and add). */
typedef void (*kern8_fn)(int K, const float *a, ptrdiff_t ars, ptrdiff_t aks, const float *b, ptrdiff_t bks,
                         float c[2 * MR][NR]);
#if defined(__x86_64__) && defined(__GNUC__)
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4), may_alias));
#define LD16(p) (*(const v16u *)(p))
#define ST16(p, v) (*(v16u *)(p) = (v))
#define BC16(x) ((v16){(x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x), (x)})
__attribute__((target("avx512f"))) static void kern8_avx512(int K, const float *a, ptrdiff_t ars, ptrdiff_t aks,
                                                             const float *b, ptrdiff_t bks, float c[2 * MR][NR]) {
    v16 c0 = LD16(c[0]), c1 = LD16(c[1]), c2 = LD16(c[2]), c3 = LD16(c[3]);
    v16 c4 = LD16(c[4]), c5 = LD16(c[5]), c6 = LD16(c[6]), c7 = LD16(c[7]);
    for (int k = 0; k < K; k++) {
        const v16 bk = LD16(b + (ptrdiff_t)k * bks);
        const float *ak = a + (ptrdiff_t)k * aks;
        c0 += BC16(ak[0]) * bk;
        c1 += BC16(ak[ars]) * bk;
        c2 += BC16(ak[2 * ars]) * bk;
        c3 += BC16(ak[3 * ars]) * bk;
        c4 += BC16(ak[4 * ars]) * bk;
        c5 += BC16(ak[5 * ars]) * bk;
        c6 += BC16(ak[6 * ars]) * bk;
        c7 += BC16(ak[7 * ars]) * bk;
    }
    ST16(c[0], c0), ST16(c[1], c1), ST16(c[2], c2), ST16(c[3], c3);
    ST16(c[4], c4), ST16(c[5], c5), ST16(c[6], c6), ST16(c[7], c7);
}
#endif

/* the kernels of an instruction set (cpu_gemm_best_isa): 0 the default build's vectors, 1 AVX2 (and the AVX
 * few-row path, gemv_rows), 2 AVX-512 (8-row tiles where 8 rows are left); every choice gives the same bits */
typedef struct {
    kern_fn full;
    kern8_fn full8; /* NULL: 4-row tiles only */
    int gemv;       /* gemv_rows for up to GEMV_MAX_ROWS rows of cpu_gemm_nt */
} gemm_isa;
static gemm_isa isa_kernels(int isa) {
    gemm_isa g = {kern_full_default, NULL, 0};
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= 1) g.full = kern_full_avx2, g.gemv = 1;
    if (isa >= 2) g.full8 = kern8_avx512;
#else
    (void)isa;
#endif
    return g;
}
int cpu_gemm_best_isa(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2")) return 1;
#endif
    return 0;
}

/* Same as kern_body for an mr x nr edge tile (mr <= MR, nr <= NR): same summation order per element. */
static void kern_edge(int mr, int nr, int K, const float *a, ptrdiff_t ars, ptrdiff_t aks, const float *b,
                      ptrdiff_t bks, float c[MR][NR]) {
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) {
            float s = c[r][j];
            for (int k = 0; k < K; k++) s += a[r * ars + (ptrdiff_t)k * aks] * b[(ptrdiff_t)k * bks + j];
            c[r][j] = s;
        }
}

static inline void kern(kern_fn full, int mr, int nr, int K, const float *a, ptrdiff_t ars, ptrdiff_t aks,
                        const float *b, ptrdiff_t bks, float c[MR][NR]) {
    if (mr == MR && nr == NR)
        full(K, a, ars, aks, b, bks, c);
    else
        kern_edge(mr, nr, K, a, ars, aks, b, bks, c);
}

static inline int imin(int a, int b) { return a < b ? a : b; }

/* ---- a few rows against b[N,K]^T (decoding: one token per sequence) --------------------------------------------
 * gemm_packed's panels cost a copy of every weight, and rows past the last full MR-row tile take the scalar edge
 * kernel, so one row ran at a fifth of the memory bandwidth (Qwen2.5-0.5B, fp32, 2 cores: 2.6 tokens/s against
 * 11.6 now; docs/performance.md "CPU ranks"). gemv_rows reads b once, in blocks of 8 of its rows:
 * each 8 x 8 block (rows n0..n0+7, columns k..k+7) is transposed in registers, so that lane j carries output
 * n0 + j and takes its k terms in order, a separate multiply and add each: every output element is the same
 * sequential sum as in gemm_packed (acc from 0, k = 0..K-1, then + bias, then + out), so a row gives the same bits
 * whether it is decoded alone or in a batch of any size. AVX (x86-64) only; elsewhere gemm_packed. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QF_GEMV_ROWS 1
#define GEMV_MAX_ROWS 64 /* more rows: gemm_packed (its copy of b amortised over the rows; here every 8-row block
                          * of b re-reads all of a) */
/* r[i] = row i of an 8 x 8 block -> r[k] = column k */
__attribute__((target("avx"), always_inline)) static inline void tr8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}
/* out[m, n] = y or out + y, y = acc (+ bias[n]): gemm_packed's epilogue */
static inline void gemv_store(float *out, float y, const float *bias, int n, int accumulate) {
    if (bias) y += bias[n];
    *out = accumulate ? *out + y : y;
}
/* outputs n0..n0+7 of rows m < M: lane j of acc[m] carries output n0 + j, its k = 0..K-1 terms in order */
__attribute__((target("avx"))) static void gemv_block(float *out, const float *a, const float *b, const float *bias,
                                                      int M, int N, int K, int n0, int accumulate) {
    __m256 acc[GEMV_MAX_ROWS];
    for (int m = 0; m < M; m++) acc[m] = _mm256_setzero_ps();
    const float *b0 = b + (size_t)n0 * K;
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(b0 + (size_t)i * K + k);
        tr8(r);
        for (int m = 0; m < M; m++) {
            const float *am = a + (size_t)m * K + k;
            __m256 c = acc[m];
            for (int kk = 0; kk < 8; kk++) c = _mm256_add_ps(c, _mm256_mul_ps(_mm256_set1_ps(am[kk]), r[kk]));
            acc[m] = c;
        }
    }
    for (; k < K; k++) {
        const __m256 t = _mm256_setr_ps(b0[k], b0[(size_t)K + k], b0[2 * (size_t)K + k], b0[3 * (size_t)K + k],
                                        b0[4 * (size_t)K + k], b0[5 * (size_t)K + k], b0[6 * (size_t)K + k],
                                        b0[7 * (size_t)K + k]);
        for (int m = 0; m < M; m++) acc[m] = _mm256_add_ps(acc[m], _mm256_mul_ps(_mm256_set1_ps(a[(size_t)m * K + k]), t));
    }
    float y[8];
    for (int m = 0; m < M; m++) {
        _mm256_storeu_ps(y, acc[m]);
        for (int j = 0; j < 8; j++) gemv_store(out + (size_t)m * N + n0 + j, y[j], bias, n0 + j, accumulate);
    }
}
/* out[M,N] (M <= GEMV_MAX_ROWS) = a[M,K] b[N,K]^T (+ bias) (+ out) */
static void gemv_rows(float *out, const float *a, const float *b, const float *bias, int M, int N, int K,
                      int accumulate) {
    const int nblk = N / 8;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblk; blk++) gemv_block(out, a, b, bias, M, N, K, blk * 8, accumulate);
    for (int n = nblk * 8; n < N; n++) /* the last N % 8 outputs: the same order, one at a time */
        for (int m = 0; m < M; m++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += a[(size_t)m * K + k] * b[(size_t)n * K + k];
            gemv_store(out + (size_t)m * N + n, s, bias, n, accumulate);
        }
}
#endif

/* out[M,N] = a[M,K] B (+ bias) (+ out), B = b[N,K]^T (b_trans) or b[K,N].
 * Tiles of MC rows x a group of up to GP panels of NR columns, parallel (static) over tiles. Inside a tile, k runs
 * in chunks of KC: the chunk of B is packed k-major into P[panel][KC][NR] (zero-padded past N, so the
 * micro-kernel streams it from cache, without strided or TLB-unfriendly reads), the KC columns of a are reused
 * across the group's panels, and the partial sums stay in acc[panel][MC][NR] between chunks, so each element is
 * still one sequential sum over k. The group size only trades parallelism for reuse of a: results are the same. */
#define GP 8
static void gemm_packed(const gemm_isa *g, float *out, const float *a, const float *b, const float *bias, int M, int N,
                        int K, int accumulate, int b_trans) {
    if (M <= 0 || N <= 0) return;
    const int npan = (N + NR - 1) / NR, nmc = (M + MC - 1) / MC;
    const int nth = omp_get_max_threads();
    int gp = GP;
    while (gp > 1 && (long)nmc * ((npan + gp - 1) / gp) < 2L * nth) gp /= 2;
    const int ngr = (npan + gp - 1) / gp;
    const long ntiles = (long)nmc * ngr;
#pragma omp parallel
    {
        float *P = qf_malloc((size_t)GP * KC * NR * sizeof(float));
        float *acc = qf_malloc((size_t)GP * MC * NR * sizeof(float));
        /* row-chunk-major: a thread's consecutive tiles read the same rows of a */
#pragma omp for schedule(static)
        for (long tile = 0; tile < ntiles; tile++) {
            const int mc = (int)(tile / ngr), p0 = (int)(tile % ngr) * gp, np = imin(gp, npan - p0);
            const int mb = mc * MC, m1 = imin(M, mb + MC);
            memset(acc, 0, (size_t)np * MC * NR * sizeof(float));
            for (int k0 = 0; k0 < K; k0 += KC) {
                const int kc = imin(KC, K - k0);
                for (int pi = 0; pi < np; pi++) {
                    const int n0 = (p0 + pi) * NR, nr = imin(NR, N - n0);
                    float *Pp = P + (size_t)pi * KC * NR;
                    if (b_trans) {
                        for (int j = 0; j < NR; j++) {
                            const float *br = b + (size_t)(n0 + j) * K + k0;
                            for (int k = 0; k < kc; k++) Pp[(size_t)k * NR + j] = j < nr ? br[k] : 0.0f;
                        }
                    } else {
                        for (int k = 0; k < kc; k++) {
                            const float *br = b + (size_t)(k0 + k) * N + n0;
                            for (int j = 0; j < NR; j++) Pp[(size_t)k * NR + j] = j < nr ? br[j] : 0.0f;
                        }
                    }
                }
                for (int m0 = mb, step; m0 < m1; m0 += step) {
                    /* the packed panels are NR wide even at the edge: only rows need the edge kernel */
                    const int mr = imin(MR, m1 - m0);
                    step = g->full8 && m1 - m0 >= 2 * MR ? 2 * MR : MR;
                    const float *am = a + (size_t)m0 * K + k0;
                    for (int pi = 0; pi < np; pi++) {
                        float(*c)[NR] = (float(*)[NR])(acc + ((size_t)pi * MC + (m0 - mb)) * NR);
                        if (step == 2 * MR)
                            g->full8(kc, am, K, 1, P + (size_t)pi * KC * NR, NR, c);
                        else if (mr == MR)
                            g->full(kc, am, K, 1, P + (size_t)pi * KC * NR, NR, c);
                        else
                            kern_edge(mr, NR, kc, am, K, 1, P + (size_t)pi * KC * NR, NR, c);
                    }
                }
            }
            for (int pi = 0; pi < np; pi++) {
                const int n0 = (p0 + pi) * NR, nr = imin(NR, N - n0);
                for (int m = mb; m < m1; m++) {
                    const float *cr = acc + ((size_t)pi * MC + (m - mb)) * NR;
                    float *o = out + (size_t)m * N + n0;
                    for (int j = 0; j < nr; j++) {
                        float y = cr[j];
                        if (bias) y += bias[n0 + j];
                        o[j] = accumulate ? o[j] + y : y;
                    }
                }
            }
        }
        free(acc);
        free(P);
    }
}

void cpu_gemm_nt_isa(int isa, float *out, const float *a, const float *b, const float *bias, int M, int N, int K,
                     int accumulate) {
    const gemm_isa g = isa_kernels(isa);
#ifdef QF_GEMV_ROWS
    if (g.gemv && M > 0 && M <= GEMV_MAX_ROWS && N > 0 && K > 0) {
        gemv_rows(out, a, b, bias, M, N, K, accumulate);
        return;
    }
#endif
    gemm_packed(&g, out, a, b, bias, M, N, K, accumulate, 1);
}

void cpu_gemm_nn_isa(int isa, float *out, const float *a, const float *b, int M, int N, int K, int accumulate) {
    const gemm_isa g = isa_kernels(isa);
    gemm_packed(&g, out, a, b, NULL, M, N, K, accumulate, 0);
}

void cpu_gemm_tn_isa(int isa, float *out, const float *a, const float *b, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return;
    const gemm_isa g = isa_kernels(isa);
    const int R = g.full8 ? 2 * MR : MR; /* rows per block */
    const int nmb = (M + R - 1) / R;
#pragma omp parallel
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int kc = imin(KC, K - k0);
        /* the same static partition of output rows every k-chunk: each out element has one owner thread and
         * receives its k terms in increasing order */
#pragma omp for schedule(static)
        for (int mb = 0; mb < nmb; mb++) {
            const int m0 = mb * R, mr = imin(R, M - m0);
            for (int n0 = 0; n0 < N; n0 += NR) {
                const int nr = imin(NR, N - n0);
                float c[2 * MR][NR] = {{0}};
                for (int r = 0; r < mr; r++)
                    for (int j = 0; j < nr; j++) c[r][j] = out[(size_t)(m0 + r) * N + n0 + j];
                const float *ak = a + (size_t)k0 * M + m0, *bk = b + (size_t)k0 * N + n0;
                if (mr == 2 * MR && nr == NR)
                    g.full8(kc, ak, 1, M, bk, N, c);
                else
                    for (int r0 = 0; r0 < mr; r0 += MR) kern(g.full, imin(MR, mr - r0), nr, kc, ak + r0, 1, M, bk, N, c + r0);
                for (int r = 0; r < mr; r++)
                    for (int j = 0; j < nr; j++) out[(size_t)(m0 + r) * N + n0 + j] = c[r][j];
            }
        }
    }
}

void cpu_gemm_nt(float *out, const float *a, const float *b, const float *bias, int M, int N, int K, int accumulate) {
    cpu_gemm_nt_isa(cpu_gemm_best_isa(), out, a, b, bias, M, N, K, accumulate);
}
void cpu_gemm_nn(float *out, const float *a, const float *b, int M, int N, int K, int accumulate) {
    cpu_gemm_nn_isa(cpu_gemm_best_isa(), out, a, b, M, N, K, accumulate);
}
void cpu_gemm_tn(float *out, const float *a, const float *b, int M, int N, int K) {
    cpu_gemm_tn_isa(cpu_gemm_best_isa(), out, a, b, M, N, K);
}

void cpu_matmul_fwd(void *out, const void *x, const void *w, const void *b, int N, int IN, int OUT, int accumulate) {
    cpu_gemm_nt(out, x, w, b, N, OUT, IN, accumulate);
}

void cpu_matmul_fwd_add(void *out, const void *x, const void *w, const void *res, int N, int IN, int OUT) {
    if (res != out) memcpy(out, res, (size_t)N * OUT * sizeof(float));
    cpu_gemm_nt(out, x, w, NULL, N, OUT, IN, 1);
}

void cpu_matmul_bwd(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w, int N, int IN,
                    int OUT, int accumulate_dx) {
    const float *g = dout;
    /* parameter gradients first, so that dx may share memory with x */
    if (dw) cpu_gemm_tn(dw, g, x, OUT, IN, N);
    if (db && OUT > 0) {
        const int nb = (OUT + 63) / 64;
#pragma omp parallel for schedule(static)
        for (int bi = 0; bi < nb; bi++) {
            const int o0 = bi * 64, o1 = imin(OUT, o0 + 64);
            float *d = db;
            for (int n = 0; n < N; n++) {
                const float *gr = g + (size_t)n * OUT;
                for (int o = o0; o < o1; o++) d[o] += gr[o];
            }
        }
    }
    if (dx) cpu_gemm_nn(dx, g, w, N, IN, OUT, accumulate_dx);
}
