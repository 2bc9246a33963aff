/* joined_cpu.c — the joined projections' entries (ops.h qkv_rope, swiglu_joined) on the CPU table: the rows of the
 * joined matmul's output split into the buffers the unjoined ops would have written, then those ops themselves
 * (rope_fwd, the SwiGLU of swiglu_fwd), so the values are theirs bit for bit. (The CPU GEMM sums every output
 * element in the same order whatever the matrix's height, so a joined matmul's rows are the unjoined ones too.) */
#include "cpu_impl.h"
#include "ops.h"
#include <math.h>
#include <string.h>

/* qkv [N, (H + 2 KV) D] -> q [N, H D], k [N, KV D] (RoPE at pos), v [N, KV D] */
void cpu_qkv_rope(void *q_, void *k_, void *v_, const void *qkv_, const int32_t *pos, int N, int H, int KV, int D,
                  double theta) {
    float *q = q_, *k = k_, *v = v_;
    const float *qkv = qkv_;
    const size_t HD = (size_t)H * D, KD = (size_t)KV * D, W = HD + 2 * KD;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *r = qkv + (size_t)n * W;
        memcpy(q + (size_t)n * HD, r, HD * sizeof(float));
        memcpy(k + (size_t)n * KD, r + HD, KD * sizeof(float));
        memcpy(v + (size_t)n * KD, r + HD + KD, KD * sizeof(float));
    }
    cpu_rope_fwd(q, pos, N, H, D, theta);
    cpu_rope_fwd(k, pos, N, KV, D, theta);
}

/* out [N, F] = silu(gu[:, :F]) * gu[:, F:], as cpu_swiglu_fwd */
void cpu_swiglu_joined(void *out_, const void *gu_, int N, int F) {
    float *out = out_;
    const float *gu = gu_;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *gate = gu + (size_t)n * 2 * F, *up = gate + F;
        float *o = out + (size_t)n * F;
        for (int f = 0; f < F; f++) {
            const float g = gate[f];
            o[f] = g / (1.0f + expf(-g)) * up[f];
        }
    }
}
