// attention_generic.cu — the generic attention kernels: the fp32 table, and the 16-bit tables wherever the
// tensor-core kernels do not apply (head_dim other than 64 / 128, tensors not 16-byte aligned); any head_dim <= 256.
// One warp per query row (forward, dQ) or per key row (dK/dV), an online softmax over 32-key chunks, fp32
// throughout; T = float, bf16 or f16 only changes the loads and the rounding on store. Also the backward's
// delta = rowsum(dout * out), which the tensor-core path shares. Deterministic: no atomics.
#include "attention_impl.cuh"
#include <math.h>

#define GEN_DMAX 256
#define GEN_WARPS 4
#define GEN_DPL (GEN_DMAX / 32) // dims per lane

template <typename T>
__device__ __forceinline__ float dot_sm_g(const float *a_sm, const T *b, int D) { // a in shared, b in global
    float s = 0.0f;
    for (int d = 0; d < D; d++) s += a_sm[d] * tof<T>(b[d]);
    return s;
}
// acc (dims lane + 32 j) += sum over jj < cnt of w_jj * row t0 + jj of x (row stride `stride`), w_jj: lane jj's w
template <typename T>
__device__ __forceinline__ void acc_rows(float (&acc)[GEN_DPL], float w, const T *x, size_t stride, int t0, int cnt,
                                         int lane, int D) {
    for (int jj = 0; jj < cnt; jj++) {
        const float wj = __shfl_sync(0xffffffffu, w, jj);
        const T *xr = x + (size_t)(t0 + jj) * stride;
#pragma unroll
        for (int j = 0; j < GEN_DPL; j++) {
            const int d = lane + 32 * j;
            if (d < D) acc[j] += wj * tof<T>(xr[d]);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(GEN_WARPS * 32)
    attn_fwd_generic(T *out, float *lse, const T *q, const T *k, const T *v, const int32_t *seg, int B, int Tn, int H,
                     int KV, int D, float scale) {
    __shared__ float qs[GEN_WARPS][GEN_DMAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long row = (long)blockIdx.x * GEN_WARPS + warp; // (b, h, t), t fastest
    if (row >= (long)B * H * Tn) return;
    const int t = (int)(row % Tn), h = (int)(row / Tn % H), b = (int)(row / Tn / H), g = h / (H / KV);
    const int s0 = seg[(size_t)b * Tn + t];
    const T *qr = q + ((size_t)b * Tn + t) * H * D + (size_t)h * D;
    for (int d = lane; d < D; d += 32) qs[warp][d] = tof<T>(qr[d]);
    __syncwarp();
    const size_t kst = (size_t)KV * D;
    const T *kb = k + (size_t)b * Tn * kst + (size_t)g * D, *vb = v + (size_t)b * Tn * kst + (size_t)g * D;
    float m = -INFINITY, l = 0.0f, acc[GEN_DPL];
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) acc[j] = 0.0f;
    for (int base = s0; base <= t; base += 32) {
        const int s = base + lane;
        const bool valid = s <= t;
        const float sc = valid ? dot_sm_g<T>(qs[warp], kb + (size_t)s * kst, D) * scale : -INFINITY;
        const float mnew = fmaxf(m, warp_max(sc)); // finite: lane 0 is valid
        const float p = valid ? expf(sc - mnew) : 0.0f;
        const float alpha = expf(m - mnew);
        l = l * alpha + warp_sum(p);
#pragma unroll
        for (int j = 0; j < GEN_DPL; j++) acc[j] *= alpha;
        acc_rows<T>(acc, p, vb, kst, base, min(32, t - base + 1), lane, D);
        m = mnew;
    }
    T *orow = out + ((size_t)b * Tn + t) * H * D + (size_t)h * D;
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) {
        const int d = lane + 32 * j;
        if (d < D) orow[d] = fromf<T>(acc[j] / l);
    }
    if (lane == 0) lse[((size_t)b * H + h) * Tn + t] = m + logf(l);
}

// delta[b, h, t] = sum_d dout * out (fp32), one warp per (token, head) row
template <typename T>
__global__ void attn_delta_kernel(float *delta, const T *dout, const T *out, int B, int Tn, int H, int D) {
    const long r = (long)blockIdx.x * 8 + (threadIdx.x >> 5); // ((b*T + t)*H + h)
    const int lane = threadIdx.x & 31;
    if (r >= (long)B * Tn * H) return;
    const T *g = dout + (size_t)r * D, *o = out + (size_t)r * D;
    float s = 0.0f;
    for (int d = lane; d < D; d += 32) s += tof<T>(g[d]) * tof<T>(o[d]);
    s = warp_sum(s);
    if (lane == 0) {
        const int h = (int)(r % H), t = (int)(r / H % Tn), b = (int)(r / H / Tn);
        delta[((size_t)b * H + h) * Tn + t] = s;
    }
}

template <typename T>
__global__ void __launch_bounds__(GEN_WARPS * 32)
    attn_dq_generic(T *dq, const T *dout, const float *lse, const float *delta, const T *q, const T *k, const T *v,
                    const int32_t *seg, int B, int Tn, int H, int KV, int D, float scale) {
    __shared__ float qs[GEN_WARPS][GEN_DMAX], gs[GEN_WARPS][GEN_DMAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long row = (long)blockIdx.x * GEN_WARPS + warp;
    if (row >= (long)B * H * Tn) return;
    const int t = (int)(row % Tn), h = (int)(row / Tn % H), b = (int)(row / Tn / H), g = h / (H / KV);
    const int s0 = seg[(size_t)b * Tn + t];
    const size_t qi = ((size_t)b * Tn + t) * H * D + (size_t)h * D;
    for (int d = lane; d < D; d += 32) qs[warp][d] = tof<T>(q[qi + d]), gs[warp][d] = tof<T>(dout[qi + d]);
    __syncwarp();
    const float L = lse[((size_t)b * H + h) * Tn + t], dl = delta[((size_t)b * H + h) * Tn + t];
    const size_t kst = (size_t)KV * D;
    const T *kb = k + (size_t)b * Tn * kst + (size_t)g * D, *vb = v + (size_t)b * Tn * kst + (size_t)g * D;
    float acc[GEN_DPL];
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) acc[j] = 0.0f;
    for (int base = s0; base <= t; base += 32) {
        const int s = base + lane;
        float ds = 0.0f;
        if (s <= t) {
            const float p = expf(dot_sm_g<T>(qs[warp], kb + (size_t)s * kst, D) * scale - L);
            ds = p * (dot_sm_g<T>(gs[warp], vb + (size_t)s * kst, D) - dl);
        }
        acc_rows<T>(acc, ds, kb, kst, base, min(32, t - base + 1), lane, D);
    }
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) {
        const int d = lane + 32 * j;
        if (d < D) dq[qi + d] = fromf<T>(acc[j] * scale);
    }
}

template <typename T>
__global__ void __launch_bounds__(GEN_WARPS * 32)
    attn_dkdv_generic(T *dk, T *dv, const T *dout, const float *lse, const float *delta, const T *q, const T *k,
                      const T *v, const int32_t *seg, int B, int Tn, int H, int KV, int D, float scale) {
    __shared__ float ks[GEN_WARPS][GEN_DMAX], vs[GEN_WARPS][GEN_DMAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long row = (long)blockIdx.x * GEN_WARPS + warp; // (b, g, s), s fastest
    if (row >= (long)B * KV * Tn) return;
    const int s = (int)(row % Tn), g = (int)(row / Tn % KV), b = (int)(row / Tn / KV), rep = H / KV;
    const size_t kst = (size_t)KV * D, qst = (size_t)H * D;
    const size_t ki = ((size_t)b * Tn + s) * kst + (size_t)g * D;
    for (int d = lane; d < D; d += 32) ks[warp][d] = tof<T>(k[ki + d]), vs[warp][d] = tof<T>(v[ki + d]);
    __syncwarp();
    const int32_t *sb = seg + (size_t)b * Tn;
    float ak[GEN_DPL], av[GEN_DPL];
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) ak[j] = av[j] = 0.0f;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        const float *Lh = lse + ((size_t)b * H + h) * Tn, *Dh = delta + ((size_t)b * H + h) * Tn;
        for (int base = s;; base += 32) {
            const int t = base + lane;
            const bool valid = t < Tn && sb[t] <= s; // a prefix of the lanes (seg_start non-decreasing)
            const unsigned ball = __ballot_sync(0xffffffffu, valid);
            if (!ball) break;
            float p = 0.0f, ds = 0.0f;
            if (valid) {
                const T *qr = q + ((size_t)b * Tn + t) * qst + (size_t)h * D, *gr = dout + ((size_t)b * Tn + t) * qst + (size_t)h * D;
                float qk = 0.0f, gv = 0.0f;
                for (int d = 0; d < D; d++) qk += tof<T>(qr[d]) * ks[warp][d], gv += tof<T>(gr[d]) * vs[warp][d];
                p = expf(qk * scale - Lh[t]);
                ds = p * (gv - Dh[t]);
            }
            const int cnt = __popc(ball);
            for (int jj = 0; jj < cnt; jj++) {
                const float pj = __shfl_sync(0xffffffffu, p, jj), dsj = __shfl_sync(0xffffffffu, ds, jj);
                const size_t ti = ((size_t)b * Tn + base + jj) * qst + (size_t)h * D;
#pragma unroll
                for (int j = 0; j < GEN_DPL; j++) {
                    const int d = lane + 32 * j;
                    if (d < D) av[j] += pj * tof<T>(dout[ti + d]), ak[j] += dsj * tof<T>(q[ti + d]);
                }
            }
            if (ball != 0xffffffffu) break;
        }
    }
#pragma unroll
    for (int j = 0; j < GEN_DPL; j++) {
        const int d = lane + 32 * j;
        if (d < D) dk[ki + d] = fromf<T>(ak[j] * scale), dv[ki + d] = fromf<T>(av[j]);
    }
}

template <typename T>
void attention_delta(float *delta, const T *dout, const T *out, int B, int Tn, int H, int D) {
    const long drows = (long)B * Tn * H;
    attn_delta_kernel<T><<<(unsigned)((drows + 7) / 8), 256, 0, qfc_stream()>>>(delta, dout, out, B, Tn, H, D);
    CHECK_LAUNCH();
}

template <typename T>
void attention_generic_fwd(T *out, float *lse, const T *q, const T *k, const T *v, const int32_t *seg, int B, int Tn,
                           int H, int KV, int D, float scale) {
    QF_CHECK(D <= GEN_DMAX);
    const long rows = (long)B * H * Tn;
    attn_fwd_generic<T><<<(unsigned)((rows + GEN_WARPS - 1) / GEN_WARPS), GEN_WARPS * 32, 0, qfc_stream()>>>(
        out, lse, q, k, v, seg, B, Tn, H, KV, D, scale);
    CHECK_LAUNCH();
}

template <typename T>
void attention_generic_bwd(T *dq, T *dk, T *dv, const T *dout, const float *lse, const float *delta, const T *q,
                           const T *k, const T *v, const int32_t *seg, int B, int Tn, int H, int KV, int D,
                           float scale) {
    QF_CHECK(D <= GEN_DMAX);
    cudaStream_t st = qfc_stream();
    const long qrows = (long)B * H * Tn, krows = (long)B * KV * Tn;
    attn_dkdv_generic<T><<<(unsigned)((krows + GEN_WARPS - 1) / GEN_WARPS), GEN_WARPS * 32, 0, st>>>(
        dk, dv, dout, lse, delta, q, k, v, seg, B, Tn, H, KV, D, scale);
    CHECK_LAUNCH();
    attn_dq_generic<T><<<(unsigned)((qrows + GEN_WARPS - 1) / GEN_WARPS), GEN_WARPS * 32, 0, st>>>(
        dq, dout, lse, delta, q, k, v, seg, B, Tn, H, KV, D, scale);
    CHECK_LAUNCH();
}

#define INST(T)                                                                                                      \
    template void attention_delta<T>(float *, const T *, const T *, int, int, int, int);                             \
    template void attention_generic_fwd<T>(T *, float *, const T *, const T *, const T *, const int32_t *, int, int, \
                                           int, int, int, float);                                                    \
    template void attention_generic_bwd<T>(T *, T *, T *, const T *, const float *, const float *, const T *,        \
                                           const T *, const T *, const int32_t *, int, int, int, int, int, float);
INST(float)
INST(bf16)
INST(f16)
