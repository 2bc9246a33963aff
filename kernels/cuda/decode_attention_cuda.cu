// decode_attention_cuda.cu — attention against a KV cache (ops.h attention_decode) for the bf16, fp16 and fp32
// tables: generate's prefill (Tq > 1) and decoding (Tq = 1) on the GPU; and its paged form (ops.h attention_paged:
// serve's ragged batches over a block KV pool), the same two kernels with the cache row of position j found
// through the sequence's block table.
//
// Two kernels on the compute stream:
//   kv_append:   k, v [B*Tq, KV, D] -> caches [B, S, KV, D] at positions start[b] + i (grid-stride, 8 per thread
//                when D % 8 == 0 and everything is 16-byte aligned);
//   decode_attn: one block per (row b, new token i, query head h); its 8 warps take cache positions j = warp,
//                warp + 8, ... <= t = start[b] + i; a warp's 32 lanes split the head dimension (D <= 256, so a
//                lane holds at most 8 accumulators), compute q.k_j with a warp reduction and keep an online
//                softmax (running max, sum, weighted v); the warps' partial results merge through shared memory.
//                fp32 math throughout, scale 1/sqrt(D) folded into q, one rounding to T on store. The query reads
//                its GQA kv head h / (H/KV); the cache rows it reads are contiguous in D (coalesced).
// Memory-bound by design: each step reads the cache once per query head (GQA heads of one kv head share it
// through L2). Not split over positions: at batch 1 and long contexts a split-K ("flash-decoding") variant would
// use more SMs (docs/performance.md).
#include "cuda_common.cuh"
#include <math.h>

static const int DA_WARPS = 8;
static const int DA_MAX_D = 256;

template <typename T>
__global__ void kv_append_kernel(T *kc, T *vc, const T *k, const T *v, const int32_t *start, int B, int Tq, int S,
                                 int KVD, bool vec) {
    const size_t n = (size_t)B * Tq * KVD;
    for (size_t e = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; e < n;
         e += (size_t)gridDim.x * blockDim.x * 8) {
        const size_t row = e / KVD, col = e % KVD; // row = b*Tq + i
        const int b = (int)(row / Tq), i = (int)(row % Tq);
        const size_t dst = ((size_t)b * S + start[b] + i) * KVD + col;
        if (vec) { // KVD % 8 == 0: the 8 elements stay in one row
            float f[8];
            ld8<T>(f, k, e, n, true);
            st8<T>(kc, f, dst, dst + 8, true);
            ld8<T>(f, v, e, n, true);
            st8<T>(vc, f, dst, dst + 8, true);
        } else {
            for (int j = 0; j < 8 && e + j < n; j++) {
                const size_t r2 = (e + j) / KVD, c2 = (e + j) % KVD;
                const int b2 = (int)(r2 / Tq), i2 = (int)(r2 % Tq);
                const size_t d2 = ((size_t)b2 * S + start[b2] + i2) * KVD + c2;
                kc[d2] = k[e + j];
                vc[d2] = v[e + j];
            }
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(DA_WARPS * 32)
    decode_attn_kernel(T *out, const T *q, const T *kc, const T *vc, const int32_t *start, int Tq, int S, int H,
                       int KV, int D, float scale) {
    extern __shared__ float da_smem[]; // q[D] | m[W] | l[W] | acc[W][D]
    float *qs = da_smem, *wm = qs + D, *wl = wm + DA_WARPS, *wacc = wl + DA_WARPS;
    const int item = blockIdx.x; // ((b*Tq) + i)*H + h
    const int h = item % H, bi = item / H, i = bi % Tq, b = bi / Tq, kh = h / (H / KV);
    const int t = start[b] + i;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const T *qh = q + (size_t)item * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = tof<T>(qh[d]) * scale;
    __syncthreads();
    const size_t prow = (size_t)KV * D; // one cache position
    const T *kb = kc + (size_t)b * S * prow + (size_t)kh * D, *vb = vc + (size_t)b * S * prow + (size_t)kh * D;
    float m = -INFINITY, l = 0.0f, acc[DA_MAX_D / 32];
#pragma unroll
    for (int c = 0; c < DA_MAX_D / 32; c++) acc[c] = 0.0f;
    for (int j = warp; j <= t; j += DA_WARPS) {
        const T *kj = kb + (size_t)j * prow, *vj = vb + (size_t)j * prow;
        float s = 0.0f;
#pragma unroll
        for (int c = 0; c < DA_MAX_D / 32; c++) {
            const int d = lane + 32 * c;
            if (d < D) s += qs[d] * tof<T>(kj[d]);
        }
        s = warp_sum(s);
        const float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
#pragma unroll
        for (int c = 0; c < DA_MAX_D / 32; c++) {
            const int d = lane + 32 * c;
            if (d < D) acc[c] = acc[c] * corr + p * tof<T>(vj[d]);
        }
        m = mn;
    }
    if (lane == 0) wm[warp] = m, wl[warp] = l;
#pragma unroll
    for (int c = 0; c < DA_MAX_D / 32; c++) {
        const int d = lane + 32 * c;
        if (d < D) wacc[warp * D + d] = acc[c];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < DA_WARPS; w++) M = fmaxf(M, wm[w]);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float L = 0.0f, A = 0.0f;
        for (int w = 0; w < DA_WARPS; w++) {
            if (wm[w] == -INFINITY) continue; // a warp that had no position
            const float c = expf(wm[w] - M);
            L += wl[w] * c;
            A += wacc[w * D + d] * c;
        }
        out[(size_t)item * D + d] = fromf<T>(A / L);
    }
}

template <typename T>
void cu_attention_decode(void *out, const void *q, const void *k, const void *v, void *kcache, void *vcache,
                         const int32_t *start, int B, int Tq, int S, int H, int KV, int D) {
    if (D > DA_MAX_D || KV <= 0 || H % KV != 0 || Tq < 1)
        qf_fatal_at(__FILE__, __LINE__, "attention_decode: unsupported shape H %d KV %d D %d Tq %d (D <= %d)", H, KV, D,
                    Tq, DA_MAX_D);
    const int KVD = KV * D;
    const size_t n = (size_t)B * Tq * KVD;
    const bool vec = KVD % 8 == 0 && qf_ptr_aligned(k, 16) && qf_ptr_aligned(v, 16) && qf_ptr_aligned(kcache, 16) &&
                     qf_ptr_aligned(vcache, 16);
    kv_append_kernel<T><<<qf_blocks((n + 7) / 8, 256, (unsigned)qfc().num_sms * 8u), 256, 0, qfc_stream()>>>(
        (T *)kcache, (T *)vcache, (const T *)k, (const T *)v, start, B, Tq, S, KVD, vec);
    CHECK_LAUNCH();
    const size_t smem = sizeof(float) * ((size_t)D + 2 * DA_WARPS + (size_t)DA_WARPS * D);
    decode_attn_kernel<T><<<(unsigned)((size_t)B * Tq * H), DA_WARPS * 32, smem, qfc_stream()>>>(
        (T *)out, (const T *)q, (const T *)kcache, (const T *)vcache, start, Tq, S, H, KV, D,
        (float)(1.0 / sqrt((double)D)));
    CHECK_LAUNCH();
}

// ---- paged (attention_paged) ----------------------------------------------------------------------------------

// the pool row of position p of the sequence whose block table is blk
__device__ __forceinline__ size_t pg_row(const int32_t *blk, int p, int bs) { return (size_t)blk[p / bs] * bs + p % bs; }

template <typename T>
__global__ void kv_append_paged_kernel(T *kp, T *vp, const T *k, const T *v, const int32_t *seq, const int32_t *pos,
                                       const int32_t *btab, int N, int maxb, int bs, int KVD) {
    const size_t n = (size_t)N * KVD;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const int tok = (int)(e / KVD);
        const size_t col = e % KVD, dst = pg_row(btab + (size_t)seq[tok] * maxb, pos[tok], bs) * KVD + col;
        kp[dst] = k[e];
        vp[dst] = v[e];
    }
}

template <typename T>
__global__ void __launch_bounds__(DA_WARPS * 32)
    paged_attn_kernel(T *out, const T *q, const T *kp, const T *vp, const int32_t *seq, const int32_t *pos,
                      const int32_t *btab, int maxb, int bs, int H, int KV, int D, float scale) {
    extern __shared__ float da_smem[]; // q[D] | m[W] | l[W] | acc[W][D]
    float *qs = da_smem, *wm = qs + D, *wl = wm + DA_WARPS, *wacc = wl + DA_WARPS;
    const int item = blockIdx.x; // tok*H + h
    const int h = item % H, tok = item / H, kh = h / (H / KV);
    const int t = pos[tok];
    const int32_t *blk = btab + (size_t)seq[tok] * maxb;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const T *qh = q + (size_t)item * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = tof<T>(qh[d]) * scale;
    __syncthreads();
    const size_t prow = (size_t)KV * D;
    float m = -INFINITY, l = 0.0f, acc[DA_MAX_D / 32];
#pragma unroll
    for (int c = 0; c < DA_MAX_D / 32; c++) acc[c] = 0.0f;
    for (int j = warp; j <= t; j += DA_WARPS) {
        const size_t r = pg_row(blk, j, bs) * prow + (size_t)kh * D;
        const T *kj = kp + r, *vj = vp + r;
        float s = 0.0f;
#pragma unroll
        for (int c = 0; c < DA_MAX_D / 32; c++) {
            const int d = lane + 32 * c;
            if (d < D) s += qs[d] * tof<T>(kj[d]);
        }
        s = warp_sum(s);
        const float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
#pragma unroll
        for (int c = 0; c < DA_MAX_D / 32; c++) {
            const int d = lane + 32 * c;
            if (d < D) acc[c] = acc[c] * corr + p * tof<T>(vj[d]);
        }
        m = mn;
    }
    if (lane == 0) wm[warp] = m, wl[warp] = l;
#pragma unroll
    for (int c = 0; c < DA_MAX_D / 32; c++) {
        const int d = lane + 32 * c;
        if (d < D) wacc[warp * D + d] = acc[c];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < DA_WARPS; w++) M = fmaxf(M, wm[w]);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float L = 0.0f, A = 0.0f;
        for (int w = 0; w < DA_WARPS; w++) {
            if (wm[w] == -INFINITY) continue;
            const float c = expf(wm[w] - M);
            L += wl[w] * c;
            A += wacc[w * D + d] * c;
        }
        out[(size_t)item * D + d] = fromf<T>(A / L);
    }
}

template <typename T>
void cu_attention_paged(void *out, const void *q, const void *k, const void *v, void *kpool, void *vpool,
                        const int32_t *seq, const int32_t *pos, const int32_t *btab, int N, int maxb, int bs, int H,
                        int KV, int D) {
    if (D > DA_MAX_D || KV <= 0 || H % KV != 0 || N < 1 || bs < 1)
        qf_fatal_at(__FILE__, __LINE__, "attention_paged: unsupported shape H %d KV %d D %d N %d bs %d (D <= %d)", H,
                    KV, D, N, bs, DA_MAX_D);
    const int KVD = KV * D;
    const size_t n = (size_t)N * KVD;
    kv_append_paged_kernel<T><<<qf_blocks(n, 256, (unsigned)qfc().num_sms * 8u), 256, 0, qfc_stream()>>>(
        (T *)kpool, (T *)vpool, (const T *)k, (const T *)v, seq, pos, btab, N, maxb, bs, KVD);
    CHECK_LAUNCH();
    const size_t smem = sizeof(float) * ((size_t)D + 2 * DA_WARPS + (size_t)DA_WARPS * D);
    paged_attn_kernel<T><<<(unsigned)((size_t)N * H), DA_WARPS * 32, smem, qfc_stream()>>>(
        (T *)out, (const T *)q, (const T *)kpool, (const T *)vpool, seq, pos, btab, maxb, bs, H, KV, D,
        (float)(1.0 / sqrt((double)D)));
    CHECK_LAUNCH();
}

#define QF_DECODE_INSTANTIATE(T)                                                                                     \
    template void cu_attention_decode<T>(void *, const void *, const void *, const void *, void *, void *,           \
                                         const int32_t *, int, int, int, int, int, int);                      \
    template void cu_attention_paged<T>(void *, const void *, const void *, const void *, void *, void *,            \
                                        const int32_t *, const int32_t *, const int32_t *, int, int, int, int, int,  \
                                        int);
QF_DECODE_INSTANTIATE(float)
QF_DECODE_INSTANTIATE(bf16)
QF_DECODE_INSTANTIATE(f16)
