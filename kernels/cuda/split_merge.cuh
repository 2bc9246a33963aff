// split_merge.cuh — the end of a split attention block (decode_attention_cuda.cu's split kernel and
// decode_attn_mma_cuda.cu's tensor-core form): the last of an item's ns split blocks to finish merges the splits'
// partial sums into the output. Device code only.
#pragma once
#include "cuda_common.cuh"
#include <math.h>

// Heads h0..h0+ng of token tok (an item: one block per split s < ns) whose blocks each wrote their unnormalised sum
// to part [N*H, nsplit, D] and their max and exp-sum (natural-log units) to mlo [N*H, nsplit, 2]: the block that
// counts itself last on c (the item's counter, zero between calls; reset here) computes out = sum_s e^(m_s - M) acc_s
// / sum_s e^(m_s - M) l_s per head, s in split order (the other blocks' partials read past L1: they were written on
// other SMs). wgt: shared memory for ng * ns floats, free once the block's own sums are written; every thread of the
// block calls it.
template <typename T>
__device__ __forceinline__ void split_merge_last(T *out, const float *part, const float *mlo, int *c, int ns, int tok,
                                                 int H, int h0, int ng, int D, int nsplit, float *wgt) {
    __shared__ int last;
    const int tid = threadIdx.x, nt = blockDim.x, warp = tid / 32, lane = tid % 32;
    __threadfence(); // this block's partials visible to the device before it counts itself
    __syncthreads();
    if (tid == 0) {
        last = atomicAdd(c, 1) == ns - 1; // ns - 1 blocks before it
        if (last) *c = 0;                 // every block of the item has counted: ready for the next call
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    // per head, the splits' weights e^(m_s - M) / L into shared memory, a warp per head; then each thread merges 4
    // dimensions of a head over the splits with 16-byte loads
    const int D4 = D / 4;
    for (int g = warp; g < ng; g += nt / 32) {
        const float *mh = mlo + ((size_t)tok * H + h0 + g) * nsplit * 2;
        float M = -INFINITY;
        for (int j = lane; j < ns; j += 32) M = fmaxf(M, __ldcg(mh + 2 * j));
        M = warp_max(M);
        float L = 0.0f;
        for (int j = lane; j < ns; j += 32) L += __ldcg(mh + 2 * j + 1) * expf(__ldcg(mh + 2 * j) - M);
        L = warp_sum(L);
        for (int j = lane; j < ns; j += 32) wgt[g * ns + j] = expf(__ldcg(mh + 2 * j) - M) / L;
    }
    __syncthreads();
    for (int e = tid; e < ng * D4; e += nt) {
        const int g = e / D4, d4 = e % D4;
        const size_t oh = (size_t)tok * H + h0 + g;
        const float4 *pp = reinterpret_cast<const float4 *>(part + oh * nsplit * D) + d4;
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
        for (int j = 0; j < ns; j++) {
            const float w = wgt[g * ns + j];
            const float4 v = __ldcg(pp + (size_t)j * D4);
            a.x += w * v.x, a.y += w * v.y, a.z += w * v.z, a.w += w * v.w;
        }
        T *o = out + oh * D + (size_t)d4 * 4;
        o[0] = fromf<T>(a.x), o[1] = fromf<T>(a.y), o[2] = fromf<T>(a.z), o[3] = fromf<T>(a.w);
    }
}
