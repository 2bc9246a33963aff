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
// A block first requests its warps' first weight chunks (streaming loads), then normalises the M input rows into
// shared memory (256 threads, as rmsnorm_fwd's block-per-row form), and its warps stream the rest of their rows
// against them: the weight stream is in flight while the rows are normalised. Both are programmatic dependent
// launches (cuda_common.cuh): before qf_pdl_wait they only ask L2 for weight lines (q/k/v's whole rows, gate/up's
// first chunks) while the kernel before them still runs; every load into registers comes after it.
//
// Values: the unfused sequence's, operation for operation — the norm as norm_cuda.cu's block-per-row form (the same
// chunks per thread, double sums, block256_sum_d; x * rstd rounded to T, times the weight, rounded to T), each dot
// as gemv_cuda.cu's (lane-strided 8-element chunks in order, fp32, the same warp reduction), bias then one rounding
// to T, RoPE as norm_cuda.cu's vectorised form (inv_freq by a double power, the fp32 angle's sincosf) on the rounded
// values, SwiGLU as elementwise_cuda.cu's on the rounded gate and up: the unfused path's bits (test_paged_cuda).
// Taken where gemv_cuda.cu's GEMV would be (M x C x sizeof(T) <= 16 KiB, M <= 2, C % 8 == 0, 16-byte aligned rows),
// for head dims that the vectorised RoPE takes (D % 16 == 0, D <= 512); else the caller runs the unfused ops.
#include "cuda_common.cuh"
#include "ops.h"
#include <math.h>

static const int DF_WARPS = 8;
static const size_t DF_X_BYTES = (size_t)16 << 10;

// The block's M input rows normalised into shared memory, xs[M][C] (fp32 holding the T values rmsnorm_fwd would
// store): each row's sum of squares exactly as rmsnorm_fwd_kernel's block-per-row form (256 threads' chunks,
// block256_sum_d), so the rstd is the unfused one's bit for bit on every table. A block of 128 threads (W = 4)
// takes the chunks of threads t and t + 128 in turn and sums them as block256_sum_d would (df_sum256_from128).
__device__ __forceinline__ double df_sum256_from128(double lo, double hi, double *sh) {
    // block256_sum_d's order: the warp sums of threads 0-255 (warps 0-7), then sh[0] + ... + sh[7] in turn
    lo = warp_sum_d(lo), hi = warp_sum_d(hi);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads(); // sh may still be read by the previous call
    if (l == 0) sh[w] = lo, sh[w + 4] = hi;
    __syncthreads();
    double r = 0.0;
#pragma unroll
    for (int i = 0; i < 8; i++) r += sh[i];
    return r;
}
template <typename T, int M, int NT>
__device__ __forceinline__ void df_norm_rows(float *xs, const T *x, const T *g, int C, float eps) {
    __shared__ double sh[8];
    for (int m = 0; m < M; m++) {
        const T *xr = x + (size_t)m * C;
        double ss = 0.0;
        if (NT == 256) {
            for (int c = threadIdx.x * 8; c < C; c += 256 * 8) {
                float f[8];
                ld8<T>(f, xr, (size_t)c, (size_t)C, true);
#pragma unroll
                for (int e = 0; e < 8; e++) ss += (double)f[e] * (double)f[e];
            }
            ss = block256_sum_d(ss, sh);
        } else { // NT == 128: thread t sums the chunks of threads t and t + 128 of the 256-thread form, apart
            double hi = 0.0;
            for (int c = threadIdx.x * 8; c < C; c += 256 * 8) {
                float f[8];
                ld8<T>(f, xr, (size_t)c, (size_t)C, true);
#pragma unroll
                for (int e = 0; e < 8; e++) ss += (double)f[e] * (double)f[e];
                if (c + 128 * 8 < C) {
                    ld8<T>(f, xr, (size_t)(c + 128 * 8), (size_t)C, true);
#pragma unroll
                    for (int e = 0; e < 8; e++) hi += (double)f[e] * (double)f[e];
                }
            }
            ss = df_sum256_from128(ss, hi, sh);
        }
        const float var = (float)(ss / C);
        const float r = 1.0f / sqrtf(var + eps);
        for (int c = threadIdx.x * 8; c < C; c += NT * 8) {
            float f[8], gw[8];
            ld8<T>(f, xr, (size_t)c, (size_t)C, true);
            ld8<T>(gw, g, (size_t)c, (size_t)C, true);
#pragma unroll
            for (int e = 0; e < 8; e++) xs[(size_t)m * C + c + e] = round_to<T>(__fmul_rn(gw[e], round_to<T>(__fmul_rn(f[e], r))));
        }
    }
    __syncthreads();
}

// 8 weights as 16 bytes, read once: streaming loads (evict-first)
template <typename T> struct df_w16 {
    uint4 a, b; // T = float: 8 floats in two 16-byte words (b unused for 16-bit T)
};
template <typename T> __device__ __forceinline__ void df_ldw(df_w16<T> &w, const T *p, size_t i) {
    w.a = __ldcs(reinterpret_cast<const uint4 *>(p + i));
    if (sizeof(T) == 4) w.b = __ldcs(reinterpret_cast<const uint4 *>(p + i + 4));
}
template <typename T> __device__ __forceinline__ void df_unpack(float (&f)[8], const df_w16<T> &w) {
    if (sizeof(T) == 4) {
        const float *u = reinterpret_cast<const float *>(&w.a), *v = reinterpret_cast<const float *>(&w.b);
#pragma unroll
        for (int j = 0; j < 4; j++) f[j] = u[j], f[4 + j] = v[j];
    } else {
        const T *h = reinterpret_cast<const T *>(&w.a);
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = tof<T>(h[j]);
    }
}

// Two weight rows w1, w2 [C] against the M normalised rows xs: acc1[m] = xs[m] . w1, acc2[m] = xs[m] . w2, summed
// as gemv_kernel sums (lane-strided 8-element chunks in order, fp32, warp_sum), every lane holding the sums. The
// first DF_PF chunks of both rows are requested before the block's normalisation (df_begin), so the weight stream
// is in flight while the rows are normalised; each chunk consumed requests the one DF_PF ahead.
static const int DF_PF = 4;
template <typename T> struct df_pipe {
    df_w16<T> a[DF_PF], b[DF_PF];
};
template <typename T>
__device__ __forceinline__ void df_begin(df_pipe<T> &p, const T *w1, const T *w2, int C, int lane, bool on) {
#pragma unroll
    for (int i = 0; i < DF_PF; i++) {
        const int k = lane * 8 + i * 256;
        if (on && k < C) df_ldw<T>(p.a[i], w1, (size_t)k), df_ldw<T>(p.b[i], w2, (size_t)k);
    }
}
// the first n elements (of C) of both rows asked of L2 (a hint: no register, nothing read that could change), before
// qf_pdl_wait, so that the rows are in flight while the kernel before this one ends
template <typename T>
__device__ __forceinline__ void df_prefetch_l2(const T *w1, const T *w2, int n, int C, int lane) {
    const int line = 128 / (int)sizeof(T), end = n < C ? n : C;
    for (int k = lane * line; k < end; k += 32 * line) qf_prefetch_l2(w1 + k), qf_prefetch_l2(w2 + k);
}
template <typename T, int M>
__device__ __forceinline__ void df_dot2(float (&acc1)[M], float (&acc2)[M], df_pipe<T> &p, const float *xs,
                                        const T *w1, const T *w2, int C, int lane) {
#pragma unroll
    for (int m = 0; m < M; m++) acc1[m] = 0.0f, acc2[m] = 0.0f;
    for (int k0 = lane * 8; k0 < C; k0 += DF_PF * 256) {
#pragma unroll
        for (int i = 0; i < DF_PF; i++) {
            const int k = k0 + i * 256;
            if (k >= C) break;
            float a[8], b[8];
            df_unpack<T>(a, p.a[i]);
            df_unpack<T>(b, p.b[i]);
            const int kn = k + DF_PF * 256;
            if (kn < C) df_ldw<T>(p.a[i], w1, (size_t)kn), df_ldw<T>(p.b[i], w2, (size_t)kn);
#pragma unroll
            for (int m = 0; m < M; m++) {
                const float4 x0 = *reinterpret_cast<const float4 *>(xs + (size_t)m * C + k);
                const float4 x1 = *reinterpret_cast<const float4 *>(xs + (size_t)m * C + k + 4);
                const float xf[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
                for (int e = 0; e < 8; e++) acc1[m] += a[e] * xf[e];
#pragma unroll
                for (int e = 0; e < 8; e++) acc2[m] += b[e] * xf[e];
            }
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

// one warp per (head of q | k | v, i < D/2): outputs i and i + D/2 of that head for the M tokens; W warps a block,
// at least MINB blocks resident per SM (the block shapes of QWENFT_DECODE_QKV, cu_decode_qkv)
template <typename T, int M, int W, int MINB>
__global__ void __launch_bounds__(W * 32, MINB) decode_qkv_kernel(df_qkv_args a) {
    extern __shared__ float df_xs[]; // [M][C]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, half = a.D / 2;
    const int p = blockIdx.x * W + warp, hh = p / half, i = p % half;
    const bool on = hh < a.H + 2 * a.KV; // the last block's spare warps still take part in the normalisation
    const int part = hh < a.H ? 0 : hh < a.H + a.KV ? 1 : 2, head = hh - (part == 0 ? 0 : part == 1 ? a.H : a.H + a.KV);
    const T *w = (const T *)a.w[part], *bias = (const T *)a.b[part];
    const int o1 = head * a.D + i, o2 = o1 + half;
    const T *w1 = w + (size_t)o1 * a.C, *w2 = w + (size_t)o2 * a.C;
    qf_pdl_trigger();
    if (on) df_prefetch_l2<T>(w1, w2, a.C, a.C, lane); // the whole rows: q/k/v's 33 MB (7B) fit L2
    qf_pdl_wait(); // x is the previous kernel's output (and streamed weights may have just landed: loads after it)
    df_pipe<T> pipe;
    df_begin<T>(pipe, w1, w2, a.C, lane, on);
    df_norm_rows<T, M, W * 32>(df_xs, (const T *)a.x, (const T *)a.g, a.C, a.eps);
    if (!on) return;
    float acc1[M], acc2[M];
    df_dot2<T, M>(acc1, acc2, pipe, df_xs, w1, w2, a.C, lane);
    if (lane >= M) return;
    float u = 0.0f, v = 0.0f; // lane m stores token m
#pragma unroll
    for (int m = 0; m < M; m++)
        if (m == lane) u = acc1[m], v = acc2[m];
    if (bias) u += tof<T>(bias[o1]), v += tof<T>(bias[o2]);
    u = round_to<T>(u), v = round_to<T>(v); // the projection's stored values
    const int n = lane, ps = a.pos[n];
    if (part < 2) { // RoPE as rope8_kernel (dir > 0)
        float s, c;
        sincosf(__fmul_rn((float)ps, qf_rope_inv_at(i, a.D, a.theta)), &s, &c);
        qf_rope_rot(u, v, c, s, 1);
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
    extern __shared__ float df_xs[]; // [M][C]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, j = blockIdx.x * DF_WARPS + warp;
    const bool on = j < F;
    const T *w1 = wg + (size_t)(on ? j : 0) * C, *w2 = wu + (size_t)(on ? j : 0) * C;
    qf_pdl_trigger();
    if (on) df_prefetch_l2<T>(w1, w2, DF_PF * 256, C, lane); // the first chunks: gate/up are far larger than L2
    qf_pdl_wait();
    df_pipe<T> pipe;
    df_begin<T>(pipe, w1, w2, C, lane, on);
    df_norm_rows<T, M, DF_WARPS * 32>(df_xs, x, g, C, eps);
    if (!on) return;
    float ag[M], au[M];
    df_dot2<T, M>(ag, au, pipe, df_xs, w1, w2, C, lane);
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
    const size_t pairs = (size_t)(d->H + 2 * d->KV) * half, smem = sizeof(float) * (size_t)d->N * d->C;
    // the block shape (QWENFT_DECODE_QKV, a bench hook: cuda_context.cu): 8 warps with 3 resident per SM (the
    // default, "occ3": at most 85 registers, Qwen2.5-7B's 288 blocks in one wave; 10.7 us at batch 1 on an H200),
    // 8 warps unbounded ("8w": 93 registers, 2 blocks per SM, a second wave of 24; 14.8 us), or 4 warps ("w4": 576
    // blocks of 128 threads, 5 resident per SM; 11.9 us)
    const int form = qfc().decode_qkv_form, w = form == 2 ? 4 : 8;
    const unsigned grid = (unsigned)((pairs + w - 1) / w);
    if (form == 2 && d->N == 1) qfc_launch_pdl(decode_qkv_kernel<T, 1, 4, 5>, grid, 4 * 32, smem, a);
    else if (form == 2) qfc_launch_pdl(decode_qkv_kernel<T, 2, 4, 5>, grid, 4 * 32, smem, a);
    else if (form == 1 && d->N == 1) qfc_launch_pdl(decode_qkv_kernel<T, 1, 8, 3>, grid, 8 * 32, smem, a);
    else if (form == 1) qfc_launch_pdl(decode_qkv_kernel<T, 2, 8, 3>, grid, 8 * 32, smem, a);
    else if (d->N == 1) qfc_launch_pdl(decode_qkv_kernel<T, 1, 8, 1>, grid, 8 * 32, smem, a);
    else qfc_launch_pdl(decode_qkv_kernel<T, 2, 8, 1>, grid, 8 * 32, smem, a);
    CHECK_LAUNCH();
    return 1;
}

template <typename T> int cu_decode_mlp(const qf_decode_mlp *d) {
    if (!df_rows_ok<T>(d->N, d->C, d->x) || !qf_ptr_aligned(d->ln_w, 16) || !qf_ptr_aligned(d->wg, 16) ||
        !qf_ptr_aligned(d->wu, 16))
        return 0;
    const unsigned grid = (unsigned)((d->F + DF_WARPS - 1) / DF_WARPS);
    const size_t smem = sizeof(float) * (size_t)d->N * d->C;
    T *out = (T *)d->out;
    const T *x = (const T *)d->x, *g = (const T *)d->ln_w, *wg = (const T *)d->wg, *wu = (const T *)d->wu;
    if (d->N == 1)
        qfc_launch_pdl(decode_mlp_kernel<T, 1>, grid, DF_WARPS * 32, smem, out, x, g, wg, wu, d->C, d->F, d->eps);
    else
        qfc_launch_pdl(decode_mlp_kernel<T, 2>, grid, DF_WARPS * 32, smem, out, x, g, wg, wu, d->C, d->F, d->eps);
    CHECK_LAUNCH();
    return 1;
}

template int cu_decode_qkv<float>(const qf_decode_qkv *);
template int cu_decode_qkv<bf16>(const qf_decode_qkv *);
template int cu_decode_qkv<f16>(const qf_decode_qkv *);
template int cu_decode_mlp<float>(const qf_decode_mlp *);
template int cu_decode_mlp<bf16>(const qf_decode_mlp *);
template int cu_decode_mlp<f16>(const qf_decode_mlp *);
