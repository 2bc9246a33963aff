// fp8_quant.cu — bf16 -> fp8 (e4m3 / e5m2) quantizers for the fp8 linear layers (fp8.cuh): amax reductions, the
// row-major cast, the cast + transpose (one pass writing both layouts, for the backward's TN GEMMs) and the fused
// per-row cast of the rowwise recipe. Scales live in device memory only: nothing here syncs the stream.
#include "fp8.cuh"
#include <cuda_fp8.h>
#include <float.h>

static __device__ __forceinline__ float fp8_max(int fmt) { return fmt == QF_FP8_E4M3 ? 448.0f : 57344.0f; }

// the quantization scale of a tensor (or row, or column) of amax a: see fp8.cuh
static __device__ __forceinline__ float fp8_scale_of(float a, int fmt, int pow2) {
    if (!(a <= FLT_MAX)) return __int_as_float(0x7fc00000); // Inf or NaN in the data: NaN out, never saturated away
    float s = fp8_max(fmt) / fmaxf(a, 1e-12f);
    if (pow2) s = exp2f(floorf(log2f(s)));
    return s;
}

static __device__ __forceinline__ uint8_t q1(float v, int fmt) {
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, fmt == QF_FP8_E4M3 ? __NV_E4M3 : __NV_E5M2);
}
// 8 values -> 8 fp8 bytes, packed little-endian into a uint2
static __device__ __forceinline__ uint2 q8(const float (&f)[8], float s, int fmt) {
    const __nv_fp8_interpretation_t it = fmt == QF_FP8_E4M3 ? __NV_E4M3 : __NV_E5M2;
    uint32_t w[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(f[4 * h] * s, f[4 * h + 1] * s), __NV_SATFINITE, it);
        const uint32_t hi =
            __nv_cvt_float2_to_fp8x2(make_float2(f[4 * h + 2] * s, f[4 * h + 3] * s), __NV_SATFINITE, it);
        w[h] = (lo & 0xffffu) | (hi << 16);
    }
    return make_uint2(w[0], w[1]);
}

// |NaN| is kept as NaN by fmaxf only if both are NaN; track NaN explicitly so an amax sees it
static __device__ __forceinline__ float absmax8_nan(const float (&f)[8], float m) {
#pragma unroll
    for (int j = 0; j < 8; j++) m = (f[j] != f[j]) ? __int_as_float(0x7fc00000) : (m != m ? m : fmaxf(m, fabsf(f[j])));
    return m;
}
// the word atomicMax sees: NaN as the largest pattern (0x7fc00000 > every finite and Inf pattern)
static __device__ __forceinline__ unsigned amax_word(float m) { return m != m ? 0x7fc00000u : __float_as_uint(m); }
// *record = max(*record, w), the atomic skipped when *record is already as large (most blocks of a cast: one word
// that every block of the grid would otherwise hit)
static __device__ __forceinline__ void record_max(unsigned *record, unsigned w) {
    if (w > *(volatile unsigned *)record) atomicMax(record, w);
}

static __device__ __forceinline__ float block_max(float m, float *sh) {
    // warp_max drops NaN (fmaxf); carry it as the top word instead
    unsigned w = amax_word(m);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w = max(w, __shfl_xor_sync(0xffffffffu, w, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    unsigned *shw = reinterpret_cast<unsigned *>(sh);
    if (lane == 0) shw[warp] = w;
    __syncthreads();
    w = 0;
    for (int i = 0; i < nw; i++) w = max(w, shw[i]);
    __syncthreads();
    return __uint_as_float(w);
}

// ---- tensor amax -------------------------------------------------------------------------------------------------
// Grid-stride, four 16-byte loads in flight per thread before any of them is reduced (one load at a time leaves a
// streaming read latency-bound: a few MB in flight is what HBM3 needs to run near its bandwidth).
__global__ void fp8_amax_kernel(const bf16 *x, size_t n, bool vec, unsigned *amax) {
    __shared__ float sh[32];
    float m = 0.0f;
    const size_t stride = (size_t)gridDim.x * blockDim.x * 8;
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (vec)
        for (; i + 3 * stride + 8 <= n; i += 4 * stride) {
            uint4 u[4];
#pragma unroll
            for (int k = 0; k < 4; k++) u[k] = *reinterpret_cast<const uint4 *>(x + i + k * stride);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u[k]);
                float f[8];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float2 t = __bfloat1622float2(h[j]);
                    f[2 * j] = t.x, f[2 * j + 1] = t.y;
                }
                m = absmax8_nan(f, m);
            }
        }
    for (; i < n; i += stride) {
        float f[8];
        ld8<bf16>(f, x, i, n, vec);
        m = absmax8_nan(f, m);
    }
    m = block_max(m, sh);
    if (threadIdx.x == 0) atomicMax(amax, amax_word(m));
}

void fp8_amax(const bf16 *x, size_t n, unsigned *amax) {
    if (!n) return;
    const bool vec = qf_ptr_aligned(x, 16);
    fp8_amax_kernel<<<qf_blocks((n + 7) / 8, 256, (unsigned)qfc().num_sms * 4u), 256, 0, qfc_stream()>>>(x, n, vec,
                                                                                                         amax);
    CHECK_LAUNCH();
}

// ---- column amax: block = 32 x 8 threads, 256 columns (8 per thread) x a chunk of rows ---------------------------
#define QF_COLAMAX_ROWS 256
__global__ void fp8_amax_cols_kernel(const bf16 *x, int R, int C, bool vec, unsigned *amax) {
    __shared__ unsigned sh[8][256];
    const int c0 = (blockIdx.x * 32 + threadIdx.x) * 8;
    const int r0 = blockIdx.y * QF_COLAMAX_ROWS, r1 = min(R, r0 + QF_COLAMAX_ROWS);
    float m[8];
#pragma unroll
    for (int j = 0; j < 8; j++) m[j] = 0.0f;
    if (c0 < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            float f[8];
            ld8<bf16>(f, x + (size_t)r * C, c0, C, vec);
#pragma unroll
            for (int j = 0; j < 8; j++)
                m[j] = (f[j] != f[j] || m[j] != m[j]) ? __int_as_float(0x7fc00000) : fmaxf(m[j], fabsf(f[j]));
        }
#pragma unroll
    for (int j = 0; j < 8; j++) sh[threadIdx.y][threadIdx.x * 8 + j] = amax_word(m[j]);
    __syncthreads();
    const int t = threadIdx.y * 32 + threadIdx.x; // 256 threads, one column each
    const int c = blockIdx.x * 256 + t;
    if (c < C) {
        unsigned w = 0;
#pragma unroll
        for (int y = 0; y < 8; y++) w = max(w, sh[y][t]);
        atomicMax(amax + c, w);
    }
}

void fp8_amax_cols(const bf16 *x, int R, int C, unsigned *amax) {
    if (R <= 0 || C <= 0) return;
    const bool vec = qf_ptr_aligned(x, 16) && C % 8 == 0;
    dim3 grid((unsigned)((C + 255) / 256), (unsigned)((R + QF_COLAMAX_ROWS - 1) / QF_COLAMAX_ROWS));
    fp8_amax_cols_kernel<<<grid, dim3(32, 8), 0, qfc_stream()>>>(x, R, C, vec, amax);
    CHECK_LAUNCH();
}

// ---- row-major cast with one scale -------------------------------------------------------------------------------
// RECORD: the block's amax of what it cast goes to *record (atomicMax), for a weight's amax history (fp8.cuh)
template <bool RECORD>
__global__ void fp8_quant_kernel(uint8_t *out, const bf16 *x, size_t n, bool vec, const unsigned *amax, float *inv,
                                 int fmt, int pow2, unsigned *record) {
    __shared__ float sh[32];
    const float s = fp8_scale_of(__uint_as_float(*amax), fmt, pow2);
    if (blockIdx.x == 0 && threadIdx.x == 0) *inv = 1.0f / s;
    float m = 0.0f;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; i < n;
         i += (size_t)gridDim.x * blockDim.x * 8) {
        float f[8];
        ld8<bf16>(f, x, i, n, vec);
        if (RECORD) m = absmax8_nan(f, m); // ld8 reads past n as 0
        if (vec && i + 8 <= n) {
            *reinterpret_cast<uint2 *>(out + i) = q8(f, s, fmt);
        } else {
            for (int j = 0; j < 8 && i + j < n; j++) out[i + j] = q1(f[j] * s, fmt);
        }
    }
    if (RECORD) {
        m = block_max(m, sh);
        if (threadIdx.x == 0) record_max(record, amax_word(m));
    }
}

void fp8_quant(uint8_t *out, const bf16 *x, size_t n, const unsigned *amax, float *inv, int fmt, int pow2,
               unsigned *record) {
    if (!n) return;
    const bool vec = qf_ptr_aligned(x, 16) && qf_ptr_aligned(out, 8);
    const unsigned blocks = qf_blocks((n + 7) / 8, 256, (unsigned)qfc().num_sms * 8u);
    if (record)
        fp8_quant_kernel<true><<<blocks, 256, 0, qfc_stream()>>>(out, x, n, vec, amax, inv, fmt, pow2, record);
    else
        fp8_quant_kernel<false><<<blocks, 256, 0, qfc_stream()>>>(out, x, n, vec, amax, inv, fmt, pow2, NULL);
    CHECK_LAUNCH();
}

// ---- cast + transpose: 64 x 64 tiles, 256 threads (8 per tile row of 64 columns, 32 rows per pass) ---------------
// Reads 16 bytes of bf16 per thread, writes the row-major copy 8 bytes per thread, stages the fp8 tile in shared
// memory (rows padded to 68 bytes against bank conflicts) and writes the transpose 8 bytes per thread.
#define QF_QT_TILE 64
#define QF_QT_PAD 68
template <bool RECORD>
__global__ void fp8_quant_t_kernel(uint8_t *out, uint8_t *outT, const bf16 *x, int R, int C, bool vec,
                                   const unsigned *amax, int per_col, float *inv, int fmt, int pow2,
                                   unsigned *record) {
    __shared__ __align__(16) uint8_t tile[QF_QT_TILE][QF_QT_PAD];
    __shared__ float sh[32];
    float m = 0.0f;
    const int r0 = blockIdx.y * QF_QT_TILE, c0 = blockIdx.x * QF_QT_TILE;
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3; // 8 x 32
    const int c = c0 + tx * 8;                             // this thread's 8 columns in the load phase
    float sc[8];
    if (per_col) {
#pragma unroll
        for (int j = 0; j < 8; j++) sc[j] = c + j < C ? fp8_scale_of(__uint_as_float(amax[c + j]), fmt, pow2) : 1.0f;
        if (blockIdx.y == 0 && ty == 0)
            for (int j = 0; j < 8 && c + j < C; j++) inv[c + j] = 1.0f / sc[j];
    } else {
        const float s = fp8_scale_of(__uint_as_float(amax[0]), fmt, pow2);
#pragma unroll
        for (int j = 0; j < 8; j++) sc[j] = s;
        if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) inv[0] = 1.0f / s;
    }
#pragma unroll
    for (int p = 0; p < 2; p++) {
        const int rr = ty + 32 * p, r = r0 + rr;
        uint2 q = make_uint2(0u, 0u);
        if (r < R && c < C) {
            float f[8];
            ld8<bf16>(f, x + (size_t)r * C, c, C, vec);
            if (RECORD) m = absmax8_nan(f, m); // C % 8 == 0: all 8 are x's
            uint8_t b[8];
#pragma unroll
            for (int j = 0; j < 8; j++) b[j] = q1(f[j] * sc[j], fmt);
            q.x = b[0] | (b[1] << 8) | (b[2] << 16) | ((uint32_t)b[3] << 24);
            q.y = b[4] | (b[5] << 8) | (b[6] << 16) | ((uint32_t)b[7] << 24);
            if (out) *reinterpret_cast<uint2 *>(out + (size_t)r * C + c) = q; // C % 8 == 0: aligned, whole
        }
        *reinterpret_cast<uint32_t *>(&tile[rr][tx * 8]) = q.x;
        *reinterpret_cast<uint32_t *>(&tile[rr][tx * 8 + 4]) = q.y;
    }
    if (RECORD) { // every thread of the block gets here (block_max syncs)
        m = block_max(m, sh);
        if (threadIdx.x == 0) record_max(record, amax_word(m));
    }
    if (!outT) return;
    __syncthreads();
    // transpose phase: output row (column of x) cc = c0 + ty + 32 p, its 8 bytes at rows r0 + tx*8 .. +8
#pragma unroll
    for (int p = 0; p < 2; p++) {
        const int cl = ty + 32 * p, cc = c0 + cl, r = r0 + tx * 8;
        if (cc >= C || r >= R) continue;
        uint8_t b[8];
#pragma unroll
        for (int j = 0; j < 8; j++) b[j] = tile[tx * 8 + j][cl];
        uint8_t *dst = outT + (size_t)cc * R + r;
        if (r + 8 <= R && (R % 8) == 0) {
            uint2 q;
            q.x = b[0] | (b[1] << 8) | (b[2] << 16) | ((uint32_t)b[3] << 24);
            q.y = b[4] | (b[5] << 8) | (b[6] << 16) | ((uint32_t)b[7] << 24);
            *reinterpret_cast<uint2 *>(dst) = q;
        } else {
            for (int j = 0; j < 8 && r + j < R; j++) dst[j] = b[j];
        }
    }
}

void fp8_quant_t(uint8_t *out, uint8_t *outT, const bf16 *x, int R, int C, const unsigned *amax, int per_col,
                 float *inv, int fmt, int pow2, unsigned *record) {
    if (R <= 0 || C <= 0 || (!out && !outT)) return;
    QF_CHECK(C % 8 == 0 && !(per_col && out) && !(per_col && record));
    QF_CHECK(!out || qf_ptr_aligned(out, 8));
    QF_CHECK(!outT || qf_ptr_aligned(outT, 8));
    const bool vec = qf_ptr_aligned(x, 16);
    dim3 grid((unsigned)((C + QF_QT_TILE - 1) / QF_QT_TILE), (unsigned)((R + QF_QT_TILE - 1) / QF_QT_TILE));
    QF_CHECK(grid.y <= 65535u);
    if (record)
        fp8_quant_t_kernel<true>
            <<<grid, 256, 0, qfc_stream()>>>(out, outT, x, R, C, vec, amax, per_col, inv, fmt, pow2, record);
    else
        fp8_quant_t_kernel<false>
            <<<grid, 256, 0, qfc_stream()>>>(out, outT, x, R, C, vec, amax, per_col, inv, fmt, pow2, NULL);
    CHECK_LAUNCH();
}

// ---- per-row cast, one block per row: amax of the row, its scale, then the cast (the row is re-read from L1/L2) ---
__global__ void fp8_quant_rows_kernel(uint8_t *out, const bf16 *x, int C, bool vec, float *inv, int fmt, int pow2) {
    __shared__ float sh[32];
    const bf16 *xr = x + (size_t)blockIdx.x * C;
    uint8_t *orow = out + (size_t)blockIdx.x * C;
    float m = 0.0f;
    for (int i = threadIdx.x * 8; i < C; i += blockDim.x * 8) {
        float f[8];
        ld8<bf16>(f, xr, i, C, vec);
        m = absmax8_nan(f, m);
    }
    m = block_max(m, sh);
    const float s = fp8_scale_of(m, fmt, pow2);
    if (threadIdx.x == 0) inv[blockIdx.x] = 1.0f / s;
    for (int i = threadIdx.x * 8; i < C; i += blockDim.x * 8) {
        float f[8];
        ld8<bf16>(f, xr, i, C, vec);
        if (vec && i + 8 <= C)
            *reinterpret_cast<uint2 *>(orow + i) = q8(f, s, fmt);
        else
            for (int j = 0; j < 8 && i + j < C; j++) orow[i + j] = q1(f[j] * s, fmt);
    }
}

void fp8_quant_rows(uint8_t *out, const bf16 *x, int R, int C, float *inv, int fmt, int pow2) {
    if (R <= 0 || C <= 0) return;
    const bool vec = qf_ptr_aligned(x, 16) && qf_ptr_aligned(out, 8) && C % 8 == 0;
    const int threads = C >= 2048 ? 256 : 128;
    fp8_quant_rows_kernel<<<(unsigned)R, threads, 0, qfc_stream()>>>(out, x, C, vec, inv, fmt, pow2);
    CHECK_LAUNCH();
}

// ---- a weight's amax history (fp8.cuh fp8_hist_step): slot[0] the amax word of the scale, slot[1 .. H] the history -
__global__ void fp8_hist_kernel(unsigned *slot, int H, int pos, int after_pass) {
    if (after_pass) { // the amax pass wrote slot[0]: it is the history's first entry
        if (threadIdx.x == 0) slot[1 + pos] = slot[0];
        return;
    }
    unsigned m = 0;
    for (int i = threadIdx.x; i < H; i += 32) m = max(m, slot[1 + i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    __syncwarp();
    if (threadIdx.x == 0) {
        slot[0] = m;
        slot[1 + pos] = 0; // the oldest entry gives way to this version's amax (recorded by the cast)
    }
}

void fp8_hist_step(unsigned *slot, int H, int pos, int after_pass) {
    fp8_hist_kernel<<<1, 32, 0, qfc_stream()>>>(slot, H, pos, after_pass);
    CHECK_LAUNCH();
}
