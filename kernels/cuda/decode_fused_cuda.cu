// decode_fused_cuda.cu — the decoding fast path (ops.h decode_qkv, decode_mlp): a serve call of one or two new
// tokens reads each layer's weights once, and at that size the layer's time is its weight bytes plus the gaps
// between its launches (Qwen2.5-7B, H200, one row: rmsnorm 3.4 us, q 7.2, k 6.2, v 6.2, two RoPEs, the k/v append,
// then rmsnorm, gate 38.3, up 38.3, swiglu: 15 launches a layer, where k and v alone move 3.7 MB each in 6.2 us).
//
//   decode_qkv_kernel: RMSNorm + q/k/v GEMV + bias + RoPE + the k/v write into the paged pools, one launch. A warp
//     owns a RoPE pair of output features (i, i + D/2) of one head of q, k or v: it streams both weight rows in
//     16-byte loads and dots them with the normalised input rows; q's pair is rotated and stored, k's rotated and
//     written at the token's pool slot, v's written there as is.
//   decode_mlp_kernel: RMSNorm + gate/up GEMV + SwiGLU, one launch: a warp owns feature j of gate and of up.
// The input rows are normalised by every warp as it reads them (their sum of squares in a first pass over the row,
// from L1/L2: M x C elements shared by every warp of the SM), so no block-wide barrier precedes the weight stream.
//
// Values: the unfused sequence's, operation for operation — the norm as norm_cuda.cu's (double sum of squares,
// x * rstd rounded to T, times the weight, rounded to T), each dot as gemv_cuda.cu's (lane-strided 8-element
// chunks, fp32, the same warp reduction), bias then one rounding to T, RoPE as norm_cuda.cu's vectorised form
// (inv_freq by a double power, the fp32 angle's sincosf) on the rounded values, SwiGLU as elementwise_cuda.cu's on
// the rounded gate and up. So on the bf16 and fp16 tables the fast path gives the unfused path's bits (the sum of
// squares of bf16 values is exact in double whatever its order); on fp32 the rstd may differ in its last bit.
// Taken where gemv_cuda.cu's GEMV would be (M x C x sizeof(T) <= 16 KiB, C % 8 == 0, 16-byte aligned rows), for
// head dims that norm_cuda.cu's vectorised RoPE takes (D % 16 == 0, D <= 512); else the caller runs the unfused ops.
#include "cuda_common.cuh"
#include "ops.h"
#include <math.h>

static const int DF_WARPS = 8;
static const size_t DF_X_BYTES = (size_t)16 << 10;

// rstd of row x[0..C) (every lane gets it), as rmsnorm_fwd_kernel computes it
template <typename T> __device__ __forceinline__ float df_rstd(const T *x, int C, float eps, int lane) {
    double ss = 0.0;
    for (int c = lane * 8; c < C; c += 32 * 8) {
        float f[8];
        ld8<T>(f, x, (size_t)c, (size_t)C, true);
#pragma unroll
        for (int e = 0; e < 8; e++) ss += (double)f[e] * (double)f[e];
    }
    ss = warp_sum_d(ss);
    const float var = (float)(ss / C);
    return 1.0f / sqrtf(var + eps);
}

// the normalised chunk x[c..c+8) of a row: the value rmsnorm_fwd stores, read back
template <typename T>
__device__ __forceinline__ void df_norm8(float (&f)[8], const T *x, const T *g, int c, int C, float r) {
    float gw[8];
    ld8<T>(f, x, (size_t)c, (size_t)C, true);
    ld8<T>(gw, g, (size_t)c, (size_t)C, true);
#pragma unroll
    for (int e = 0; e < 8; e++) f[e] = round_to<T>(__fmul_rn(gw[e], round_to<T>(__fmul_rn(f[e], r))));
}

// 8 weights at p[i..i+8) (p 16-byte aligned, i % 8 == 0) read once: streaming loads (evict-first), so that the
// weight stream does not push the input rows, which every warp re-reads, out of L1
template <typename T> __device__ __forceinline__ void ld8w(float (&f)[8], const T *p, size_t i);
template <> __device__ __forceinline__ void ld8w<float>(float (&f)[8], const float *p, size_t i) {
    const float4 a = __ldcs(reinterpret_cast<const float4 *>(p + i)), b = __ldcs(reinterpret_cast<const float4 *>(p + i + 4));
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
template <typename T> __device__ __forceinline__ void ld8w_16(float (&f)[8], const T *p, size_t i) {
    const uint4 u = __ldcs(reinterpret_cast<const uint4 *>(p + i));
    const T *h = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] = tof<T>(h[j]);
}
template <> __device__ __forceinline__ void ld8w<bf16>(float (&f)[8], const bf16 *p, size_t i) { ld8w_16<bf16>(f, p, i); }
template <> __device__ __forceinline__ void ld8w<f16>(float (&f)[8], const f16 *p, size_t i) { ld8w_16<f16>(f, p, i); }

// acc1[m] = xn[m] . w1, acc2[m] = xn[m] . w2 for the M rows (gemv_kernel's order), every lane holding the sums
template <typename T, int M>
__device__ __forceinline__ void df_dot2(float (&acc1)[M], float (&acc2)[M], const T *x, const T *g,
                                        const float (&r)[M], const T *w1, const T *w2, int C, int lane) {
#pragma unroll
    for (int m = 0; m < M; m++) acc1[m] = 0.0f, acc2[m] = 0.0f;
#pragma unroll 4
    for (int k = lane * 8; k < C; k += 32 * 8) {
        float a[8], b[8];
        ld8w<T>(a, w1, (size_t)k);
        ld8w<T>(b, w2, (size_t)k);
#pragma unroll
        for (int m = 0; m < M; m++) {
            float xf[8];
            df_norm8<T>(xf, x + (size_t)m * C, g, k, C, r[m]);
#pragma unroll
            for (int e = 0; e < 8; e++) acc1[m] += a[e] * xf[e];
#pragma unroll
            for (int e = 0; e < 8; e++) acc2[m] += b[e] * xf[e];
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++) acc1[m] = warp_sum(acc1[m]), acc2[m] = warp_sum(acc2[m]);
}

struct df_qkv_args {
    void *q, *kp, *vp;
    const void *x, *g, *w[3], *b[3];
    const int32_t *seq, *pos, *btab;
    int C, H, KV, D, maxb, bs;
    float eps;
    double theta;
};

// one warp per (head of q | k | v, i < D/2): outputs i and i + D/2 of that head for the M tokens
template <typename T, int M> __global__ void __launch_bounds__(DF_WARPS * 32) decode_qkv_kernel(df_qkv_args a) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, half = a.D / 2;
    const int p = blockIdx.x * DF_WARPS + warp, hh = p / half, i = p % half;
    if (hh >= a.H + 2 * a.KV) return;
    const int part = hh < a.H ? 0 : hh < a.H + a.KV ? 1 : 2, head = hh - (part == 0 ? 0 : part == 1 ? a.H : a.H + a.KV);
    const T *x = (const T *)a.x, *g = (const T *)a.g, *w = (const T *)a.w[part], *bias = (const T *)a.b[part];
    const int o1 = head * a.D + i, o2 = o1 + half;
    float r[M];
#pragma unroll
    for (int m = 0; m < M; m++) r[m] = df_rstd<T>(x + (size_t)m * a.C, a.C, a.eps, lane);
    float acc1[M], acc2[M];
    df_dot2<T, M>(acc1, acc2, x, g, r, w + (size_t)o1 * a.C, w + (size_t)o2 * a.C, a.C, lane);
    if (lane >= M) return;
    float u = 0.0f, v = 0.0f; // lane m stores token m
#pragma unroll
    for (int m = 0; m < M; m++)
        if (m == lane) u = acc1[m], v = acc2[m];
    if (bias) u += tof<T>(bias[o1]), v += tof<T>(bias[o2]);
    u = round_to<T>(u), v = round_to<T>(v); // the projection's stored values
    const int n = lane, ps = a.pos[n];
    if (part < 2) { // RoPE as rope8_kernel (dir > 0)
        const float inv = (float)(1.0 / pow(a.theta, (double)((float)(2 * i) / (float)a.D)));
        float s, c;
        sincosf(__fmul_rn((float)ps, inv), &s, &c);
        const float y1 = __fsub_rn(__fmul_rn(u, c), __fmul_rn(v, s)), y2 = __fadd_rn(__fmul_rn(v, c), __fmul_rn(u, s));
        u = y1, v = y2;
    }
    if (part == 0) {
        T *q = (T *)a.q + ((size_t)n * a.H + head) * a.D;
        q[i] = fromf<T>(u), q[i + half] = fromf<T>(v);
        return;
    }
    const int32_t *blk = a.btab + (size_t)a.seq[n] * a.maxb;
    const size_t row = (size_t)blk[ps / a.bs] * a.bs + ps % a.bs;
    T *dst = (T *)(part == 1 ? a.kp : a.vp) + (row * a.KV + head) * a.D;
    dst[i] = fromf<T>(u), dst[i + half] = fromf<T>(v);
}

// one warp per feature j: out[m, j] = silu(gate) * up of the rounded gate and up of token m
template <typename T, int M>
__global__ void __launch_bounds__(DF_WARPS * 32)
    decode_mlp_kernel(T *out, const T *x, const T *g, const T *wg, const T *wu, int C, int F, float eps) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, j = blockIdx.x * DF_WARPS + warp;
    if (j >= F) return;
    float r[M];
#pragma unroll
    for (int m = 0; m < M; m++) r[m] = df_rstd<T>(x + (size_t)m * C, C, eps, lane);
    float ag[M], au[M];
    df_dot2<T, M>(ag, au, x, g, r, wg + (size_t)j * C, wu + (size_t)j * C, C, lane);
    if (lane >= M) return;
    float gv = 0.0f, uv = 0.0f;
#pragma unroll
    for (int m = 0; m < M; m++)
        if (m == lane) gv = ag[m], uv = au[m];
    gv = round_to<T>(gv), uv = round_to<T>(uv);
    out[(size_t)lane * F + j] = fromf<T>(gv / (1.0f + expf(-gv)) * uv);
}

template <typename T> static bool df_rows_ok(int N, int C, const void *x) {
    return N >= 1 && N <= 2 && C % 8 == 0 && (size_t)N * C * sizeof(T) <= DF_X_BYTES && qf_ptr_aligned(x, 16);
}

template <typename T> int cu_decode_qkv(const qf_decode_qkv *d) {
    const int half = d->D / 2;
    if (!df_rows_ok<T>(d->N, d->C, d->x) || d->D % 16 || d->D > 512 || !qf_ptr_aligned(d->ln_w, 16) ||
        !qf_ptr_aligned(d->wq, 16) || !qf_ptr_aligned(d->wk, 16) || !qf_ptr_aligned(d->wv, 16))
        return 0;
    df_qkv_args a = {d->q, d->kpool, d->vpool, d->x, d->ln_w, {d->wq, d->wk, d->wv}, {d->bq, d->bk, d->bv},
                     d->seq, d->pos, d->btab, d->C, d->H, d->KV, d->D, d->maxb, d->bs, d->eps, d->theta};
    const unsigned grid = (unsigned)(((size_t)(d->H + 2 * d->KV) * half + DF_WARPS - 1) / DF_WARPS);
    if (d->N == 1)
        decode_qkv_kernel<T, 1><<<grid, DF_WARPS * 32, 0, qfc_stream()>>>(a);
    else
        decode_qkv_kernel<T, 2><<<grid, DF_WARPS * 32, 0, qfc_stream()>>>(a);
    CHECK_LAUNCH();
    return 1;
}

template <typename T> int cu_decode_mlp(const qf_decode_mlp *d) {
    if (!df_rows_ok<T>(d->N, d->C, d->x) || !qf_ptr_aligned(d->ln_w, 16) || !qf_ptr_aligned(d->wg, 16) ||
        !qf_ptr_aligned(d->wu, 16))
        return 0;
    const unsigned grid = (unsigned)((d->F + DF_WARPS - 1) / DF_WARPS);
    if (d->N == 1)
        decode_mlp_kernel<T, 1><<<grid, DF_WARPS * 32, 0, qfc_stream()>>>(
            (T *)d->out, (const T *)d->x, (const T *)d->ln_w, (const T *)d->wg, (const T *)d->wu, d->C, d->F, d->eps);
    else
        decode_mlp_kernel<T, 2><<<grid, DF_WARPS * 32, 0, qfc_stream()>>>(
            (T *)d->out, (const T *)d->x, (const T *)d->ln_w, (const T *)d->wg, (const T *)d->wu, d->C, d->F, d->eps);
    CHECK_LAUNCH();
    return 1;
}

template int cu_decode_qkv<float>(const qf_decode_qkv *);
template int cu_decode_qkv<bf16>(const qf_decode_qkv *);
template int cu_decode_qkv<f16>(const qf_decode_qkv *);
template int cu_decode_mlp<float>(const qf_decode_mlp *);
template int cu_decode_mlp<bf16>(const qf_decode_mlp *);
template int cu_decode_mlp<f16>(const qf_decode_mlp *);
