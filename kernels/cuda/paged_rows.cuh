// paged_rows.cuh — where the cached positions of a paged KV cache live (ops.h attention_paged): token tok of the
// call is sequence seq[tok]'s position pos[tok]; position p of that sequence is pool row
// btab[seq * maxb + p / bs] * bs + p % bs. Shared by the split attention (decode_attention_cuda.cu) and the cluster
// form (decode_attn_cluster_cuda.cu).
#pragma once
#include <stdint.h>

struct rows_paged {
    const int32_t *seq, *pos, *btab;
    int maxb, bs;
    __device__ __forceinline__ int last(int tok) const { return pos[tok]; }
    // the lowest position that the call's N tokens write in tok's sequence (every thread of the block: a min over
    // the call's tokens; red: 32 ints of shared memory)
    __device__ __forceinline__ int first_written(int tok, int N, int *red) const {
        const int sq = seq[tok];
        int m = pos[tok];
        for (int i = threadIdx.x; i < N; i += blockDim.x)
            if (seq[i] == sq) m = min(m, pos[i]);
        m = __reduce_min_sync(0xffffffffu, m);
        __syncthreads();
        if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
        __syncthreads();
        for (int w = 0; w < (int)blockDim.x / 32; w++) m = min(m, red[w]);
        return m;
    }
    __device__ __forceinline__ int row(int tok, int p) const {
        return btab[(size_t)seq[tok] * maxb + p / bs] * bs + p % bs;
    }
};
