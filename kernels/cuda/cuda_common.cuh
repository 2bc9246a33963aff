// cuda_common.cuh — shared by the CUDA backend's translation units (kernels/cuda/*.cu): error macros, the one
// backend context object, scratch memory, element-type helpers and the internal (templated) op functions.
//
// Element types: every op is a template on T = __nv_bfloat16 (the "cuda" table: bf16 storage, fp32 math),
// T = __half (the "cuda-f16" table: IEEE fp16 storage, fp32 math, for fp16 training with dynamic loss scaling) or
// T = float (the "cuda-f32" table: the same kernels in fp32, for exact comparisons with the CPU table).
// Conversions to a 16-bit T round to nearest even; fp16 overflows to +-inf beyond 65504 (which the trainer's
// overflow check then sees), bf16 keeps fp32's range.
//
// Global state: exactly one mutable object, the backend context (qf_cuda_ctx, a single static struct in
// cuda_backend.cu reached through qfc()). It is created by the first qf_ops_cuda*() call, on
// the device current at that time, and lives until the process ends. The op tables themselves are constant.
// The backend is single-threaded like the CPU table: one host thread issues the ops, all on one compute stream.
#ifndef QF_CUDA_COMMON_CUH
#define QF_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifndef QWENFT_HAVE_CUDA
#define QWENFT_HAVE_CUDA 1 /* the qfcuda target does not get qfcore's definition; ops.h needs it */
#endif
extern "C" {
#include "ops.h"
#include "util.h"
}

typedef __nv_bfloat16 bf16;
typedef __half f16;

// the cuBLASLt data type of an element type
template <typename T> struct qf_cuda_dtype;
template <> struct qf_cuda_dtype<float> { static constexpr cudaDataType_t value = CUDA_R_32F; };
template <> struct qf_cuda_dtype<bf16> { static constexpr cudaDataType_t value = CUDA_R_16BF; };
template <> struct qf_cuda_dtype<f16> { static constexpr cudaDataType_t value = CUDA_R_16F; };

// ---- errors: print file and line, then QF_FATAL's handler (stops every rank) ------------------------------------
// While graph_run captures (graph_cuda.cu) an error is recorded instead (qfc_capture_absorb: 1): the capture is then
// thrown away and the same work runs eagerly, where a real error stops the run as usual.
int qfc_capture_absorb(const char *file, int line, const char *what);
#define CHECK_CUDA(call)                                                                                         \
    do {                                                                                                         \
        cudaError_t qf_e_ = (call);                                                                              \
        if (qf_e_ != cudaSuccess && !qfc_capture_absorb(__FILE__, __LINE__, cudaGetErrorName(qf_e_)))            \
            qf_fatal_at(__FILE__, __LINE__, "CUDA error %s (%s) in %s", cudaGetErrorName(qf_e_),                 \
                        cudaGetErrorString(qf_e_), #call);                                                       \
    } while (0)
#define CHECK_CUBLAS(call)                                                                                       \
    do {                                                                                                         \
        cublasStatus_t qf_s_ = (call);                                                                           \
        if (qf_s_ != CUBLAS_STATUS_SUCCESS && !qfc_capture_absorb(__FILE__, __LINE__, cublasLtGetStatusString(qf_s_))) \
            qf_fatal_at(__FILE__, __LINE__, "cuBLAS error %d (%s) in %s", (int)qf_s_,                            \
                        cublasLtGetStatusString(qf_s_), #call);                                                  \
    } while (0)
// after every kernel launch: launch-configuration errors (asynchronous faults surface at the next checked call)
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

// ---- the backend context ------------------------------------------------------------------------------------------
struct qf_lt_plan; // matmul_cuda.cu: one cached cuBLASLt problem (descriptors + algorithm)
struct qf_graph_cache; // graph_cuda.cu: graph_run's keys and instantiated graphs
struct qf_fp8_state; // matmul_fp8.cu: the fp8 linear layers' buffers, scales and plans

struct qf_cuda_alloc_entry {
    void *p;
    size_t n;
    uint64_t seq; // the table's alloc(): its number (qf_cuda_alloc_mark); 0: the backend's own (cu_alloc)
    int managed;  // cu_alloc_rescue's managed memory (freed by cudaFree, not into the stream-ordered pool)
};

struct qf_cuda_ctx {
    int state; // 0 not yet initialised, 1 ready, -1 no usable GPU
    int device, num_sms;
    size_t smem_optin;         // max dynamic shared memory per block
    int pdl;                   // programmatic dependent launch available (sm_90+): qfc_launch_pdl
    int decode_qkv_form;       // QWENFT_DECODE_QKV (bench hook): 0 8w (8 warps), 1 occ3 (the default: 3 blocks per SM), 2 w4
    int gemv_l1;               // QWENFT_GEMV=l1 (bench hook, docs/testing.md): one-row GEMVs on gemv_cuda.cu's L1 form
    int gemv_pf;               // QWENFT_GEMV_PF=8: the one-row shared-memory GEMV with 8 loads in flight per row (else 4)
    int gemm_tune;             // QWENFT_GEMM_TUNE=N (bench hook, matmul_cuda.cu): time the heuristic's first N algorithms
                               // of each cuBLASLt plan at its first call and keep the fastest; 0: the heuristic's first
    int decode_attn_split;     // QWENFT_DECODE_ATTN_SPLIT=S: the split attention's cache positions per split (a
                               // multiple of 32, 32-512; a bench hook), 0: sized for about two blocks per SM
    int decode_attn_mlp;       // the split attention's form: 4 (the default, "pre") the earlier calls' k and v rows
                               // in shared memory before the programmatic wait, the pool rows looked up before it, q
                               // in 16-byte loads; 3 ("rows") as 4, k and v loaded after the wait; 2 ("inflight",
                               // the default until session 23) as 3, the pool rows after the wait too; 1 ("early")
                               // as 2, v beside k; 0 ("plain") each load waited for (QWENFT_DECODE_ATTN, a bench hook);
                               // 5 ("cluster"): as 4, and calls of up to decode_attn_cluster_n tokens on the cluster
                               // form (decode_attn_cluster_cuda.cu) where it applies; 6 (the default, "mma"): as 5,
                               // and the other calls on the tensor-core form (decode_attn_mma_cuda.cu) where it applies
    int decode_attn_cluster_n; // QWENFT_DECODE_ATTN_CLUSTER_N (1-64, default 4)
    long attn_cluster_launches; // the cluster form's launches so far (the GPU tests check that it ran)
    long attn_mma_launches;     // the tensor-core form's (decode_attn_mma_cuda.cu) launches so far
    size_t attn_mma_smem[2];    // its shared-memory opt-in set so far [bf16, f16]
    size_t attn_cluster_smem[2][2][3]; // its shared-memory opt-in set so far, per kernel instance [8, 16 CTAs a
                                       // cluster][bf16, f16][GS 1, 2, 4]
    int attn_cluster_ranks;    // QWENFT_ATTN_CLUSTER_RANKS (a bench hook): 0 (default: 16 CTAs a cluster where 8's
                               // slices pass 40 KiB and the call's clusters of 16 fit at once, else 8), or 8 or 16
    int attn_cluster16;        // 0 not yet checked, else the clusters of 16 that fit at once (-1: none run here)
    long attn_cluster16_launches; // the cluster form's launches in clusters of 16 so far
    int graph_update;          // QWENFT_GRAPH_UPDATE=0 (a bench hook) turns off graph_run's family updates
    cudaStream_t stream;       // the one compute stream (qf_cuda_stream())
    cublasLtHandle_t lt;       // one cuBLASLt handle
    void *lt_ws;               // its workspace
    size_t lt_ws_bytes;        // 32 MiB
    void *scratch;             // growable device scratch, used by one op at a time (stream-ordered)
    size_t scratch_bytes;
    void *small_dev;           // 4 KiB device buffer: flags, reduction results
    void *small_host;          // 4 KiB pinned host buffer: the same, read back
    // pinned staging ring for small host->device copies (no stream sync, source reusable on return)
    enum { STAGE_SLOTS = 8 };
    void *stage[STAGE_SLOTS];
    cudaEvent_t stage_ev[STAGE_SLOTS];
    size_t stage_bytes;
    int stage_next;
    // memory accounting: everything this backend cudaMallocs (alloc() and its own buffers)
    size_t limit, cur, peak;
    cudaMemPool_t pool;        // the device's default pool: alloc()/free() are stream-ordered on `stream`
    // asynchronous copies (copy_cuda.cu): their own stream, an ordering event, a ring of completion events
    cudaStream_t copy_stream;      // host -> device copies (copy_start)
    cudaStream_t copy_stream_d2h;  // device -> host copies: their own queue, so both directions of the link run at once
    cudaEvent_t copy_order, copy_ev[QF_COPY_TICKETS];
    int copy_busy[QF_COPY_TICKETS];
    int copy_next;
    // the side stream (side_cuda.cu): created at the first side_begin; while side_on, `stream` is the side stream
    // and main_stream the compute stream; side_ev is a ring of QF_SIDE_MARKS mark events
    cudaStream_t side_stream, main_stream;
    cudaEvent_t side_fork, *side_ev;
    int side_on, side_skip, side_next;
    uint64_t moved[2];         // bytes copied host -> device [QF_COPY_H2D] and back [QF_COPY_D2H] (ops.h copy_bytes)
    qf_cuda_alloc_entry *amap; // open-addressing table of alloc() pointers -> sizes
    size_t amap_cap, amap_used;
    uint64_t alloc_seq;        // the table's alloc() calls so far (qf_cuda_alloc_mark)
    // cuBLASLt plan cache (matmul_cuda.cu)
    qf_lt_plan *plans;
    int nplans, plan_next;
    qf_fp8_state *fp8;         // fp8 linear layers (matmul_fp8.cu), created by the first fp8 table
    int *split_cnt;            // the decode attention's per-item split counters, zero between calls
    size_t split_cnt_n;
    // CUDA graphs (graph_cuda.cu). gen counts the growths of scratch and split_cnt: a graph captured at another
    // generation holds pointers to freed buffers and is recaptured. While capturing, errors are recorded
    // (capture_err: the first, file:line and name) and ops that must not be captured (copies to or from the host,
    // syncs, alloc, free) say so in capture_spoil; buffers replaced during a capture wait in retired[] until it ends.
    uint64_t gen;
    int capturing;
    char capture_err[160];
    const char *capture_spoil;
    enum { RETIRED_MAX = 8 };
    void *retired[RETIRED_MAX];
    size_t retired_bytes[RETIRED_MAX];
    int nretired;
    qf_graph_cache *graphs;
};

qf_cuda_ctx &qfc();                       // the context (initialised)
// cuda_context.cu: the context's first use sets up device, stream, cuBLASLt, pool, and calls first() once; 1 when a
// usable GPU (sm_80+) is there, else 0 (and stays 0)
int qfc_context_init(void (*first)(void));
// the op table's memory and copy entries (cuda_context.cu), on the compute stream
void *cu_alloc(size_t bytes);
void *cu_alloc_table(size_t bytes); // the tables' alloc(): cu_alloc, numbered (qf_cuda_free_since)
// the first step's rescue (util.h qf_oom_rescue): managed memory past the device's (or gpu_memory_limit_gb's) end,
// zero-filled, freed by cu_free; NULL when even that fails. numbered: for the tables' alloc() (qf_cuda_free_since
// may take it back); 0 for the backend's own state (the fp8 buffers), which outlives the run: its managed pages
// move back to the device as the next run touches them
void *cu_alloc_rescue(size_t bytes, int numbered);
void cu_free(void *p);
void cu_copy_h2d(void *dst, const void *src, size_t bytes);
void cu_copy_d2h(void *dst, const void *src, size_t bytes);
void cu_copy_d2d(void *dst, const void *src, size_t bytes);
void cu_zero(void *p, size_t bytes);
void cu_sync(void);
void *qfc_scratch(size_t bytes);          // device scratch of at least `bytes` (256-aligned); valid until the next call
int *qfc_split_counters(size_t n);        // n zeroed ints that kernels leave zeroed (grown, never shrunk)
// graph_cuda.cu: an op that must not run inside a captured body (`what`: "copy_h2d", ...) marks the capture spoiled
// (graphs turn off, the body reruns eagerly); 1 when a capture is under way
int qfc_capture_spoiled(const char *what);
void qfc_retired_free(void); // frees the buffers replaced during the capture that just ended
int cu_graph_run(uint64_t key, uint64_t family, void (*body)(void *arg), void *arg);
int cu_graph_eager(uint64_t key, uint64_t family, void (*body)(void *arg), void *arg); // tables without graphs (fp8)
static inline cudaStream_t qfc_stream() { return qfc().stream; }
void qfc_device_malloc(void **p, size_t bytes); // internal buffers: cudaMalloc + accounting, fatal on failure
void qfc_device_free(void *p, size_t bytes);
void qfc_copy_init();                     // the copy stream and its events (copy_cuda.cu)
int cu_copy_start(void *dst, const void *src, size_t bytes, int dir);
void cu_copy_wait(int ticket);
// side_cuda.cu: the side stream (ops.h side_begin .. side_wait)
void cu_side_begin(void);
int cu_side_mark(void);
void cu_side_end(void);
void cu_side_wait(int mark);
void cu_range_push(const char *name);
void cu_range_pop();
void cu_copy_finish(int ticket, int host_wait);
void cu_copy_bytes(uint64_t bytes[2]);     // the ctx's moved[] (cuda_context.cu)
void qfc_attention_init();                // raises the dynamic shared-memory limits of the attention kernels
void qfc_matmul_destroy_plans();

static inline size_t qf_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
static inline int qf_ptr_aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }
static inline unsigned qf_blocks(size_t work, unsigned per_block, unsigned cap) {
    size_t b = (work + per_block - 1) / per_block;
    if (b < 1) b = 1;
    return (unsigned)(b < cap ? b : cap);
}

// ---- element helpers -------------------------------------------------------------------------------------------
template <typename T> __device__ __forceinline__ float tof(T x);
template <> __device__ __forceinline__ float tof<float>(float x) { return x; }
template <> __device__ __forceinline__ float tof<bf16>(bf16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float tof<f16>(f16 x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T fromf(float x);
template <> __device__ __forceinline__ float fromf<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 fromf<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ f16 fromf<f16>(float x) { return __float2half_rn(x); }
// x rounded to T and back (the value a T tensor would hold)
template <typename T> __device__ __forceinline__ float round_to(float x) { return tof<T>(fromf<T>(x)); }

// RoPE's pieces shared by every CUDA RoPE (rope_kernel and rope8_kernel in norm_cuda.cu, qkv_rope8_kernel in
// joined_cuda.cu, decode_qkv in decode_fused_cuda.cu), so all rotate alike bit for bit: the inverse frequency of
// i < D/2 as the double power rounded to float (the CPU table's); qf_rope_inv fills inv[0..D/2) with them (shared
// memory, every thread of the block; a __syncthreads before use); the rotation of a pair (u, v) by the angle's cos c
// and sin s in place (dir > 0: forward); qf_rope_cs8 / qf_rope_rot8: 8 pairs, cos/sin by sincosf of the fp32 angle.
__device__ __forceinline__ float qf_rope_inv_at(int i, int D, double theta) {
    return (float)(1.0 / pow(theta, (double)((float)(2 * i) / (float)D)));
}
__device__ __forceinline__ void qf_rope_inv(float *inv, int D, double theta) {
    for (int i = threadIdx.x; i < D / 2; i += blockDim.x) inv[i] = qf_rope_inv_at(i, D, theta);
}
__device__ __forceinline__ void qf_rope_rot(float &u, float &v, float c, float s, int dir) {
    float y1, y2;
    if (dir > 0) {
        y1 = __fsub_rn(__fmul_rn(u, c), __fmul_rn(v, s));
        y2 = __fadd_rn(__fmul_rn(v, c), __fmul_rn(u, s));
    } else {
        y1 = __fadd_rn(__fmul_rn(u, c), __fmul_rn(v, s));
        y2 = __fsub_rn(__fmul_rn(v, c), __fmul_rn(u, s));
    }
    u = y1, v = y2;
}
__device__ __forceinline__ void qf_rope_cs8(float (&c)[8], float (&s)[8], int32_t p, const float *inv) {
#pragma unroll
    for (int e = 0; e < 8; e++) sincosf(__fmul_rn((float)p, inv[e]), &s[e], &c[e]);
}
__device__ __forceinline__ void qf_rope_rot8(float (&u)[8], float (&v)[8], const float (&c)[8], const float (&s)[8],
                                             int dir) {
#pragma unroll
    for (int e = 0; e < 8; e++) qf_rope_rot(u[e], v[e], c[e], s[e], dir);
}

// 8 consecutive elements at p[i..i+8), with vector loads when `vec` (p 16-byte aligned, i % 8 == 0) and the
// group is full; elements at or past n read as 0 and are not written.
template <typename T> __device__ __forceinline__ void ld8(float (&f)[8], const T *p, size_t i, size_t n, bool vec);
template <> __device__ __forceinline__ void ld8<float>(float (&f)[8], const float *p, size_t i, size_t n, bool vec) {
    if (vec && i + 8 <= n) {
        const float4 a = *reinterpret_cast<const float4 *>(p + i), b = *reinterpret_cast<const float4 *>(p + i + 4);
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = i + j < n ? p[i + j] : 0.0f;
    }
}
// the 8 values of a 16-byte word of a 16-bit type (ld8's vector path; kernels that load the words themselves)
template <typename T> __device__ __forceinline__ void unpack8(float (&f)[8], const uint4 &u);
template <> __device__ __forceinline__ void unpack8<bf16>(float (&f)[8], const uint4 &u) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 t = __bfloat1622float2(h[j]);
        f[2 * j] = t.x, f[2 * j + 1] = t.y;
    }
}
template <> __device__ __forceinline__ void unpack8<f16>(float (&f)[8], const uint4 &u) {
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 t = __half22float2(h[j]);
        f[2 * j] = t.x, f[2 * j + 1] = t.y;
    }
}
template <> __device__ __forceinline__ void ld8<bf16>(float (&f)[8], const bf16 *p, size_t i, size_t n, bool vec) {
    if (vec && i + 8 <= n) {
        unpack8<bf16>(f, *reinterpret_cast<const uint4 *>(p + i));
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = i + j < n ? __bfloat162float(p[i + j]) : 0.0f;
    }
}
template <> __device__ __forceinline__ void ld8<f16>(float (&f)[8], const f16 *p, size_t i, size_t n, bool vec) {
    if (vec && i + 8 <= n) {
        unpack8<f16>(f, *reinterpret_cast<const uint4 *>(p + i));
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = i + j < n ? __half2float(p[i + j]) : 0.0f;
    }
}
template <typename T> __device__ __forceinline__ void st8(T *p, const float (&f)[8], size_t i, size_t n, bool vec);
template <> __device__ __forceinline__ void st8<float>(float *p, const float (&f)[8], size_t i, size_t n, bool vec) {
    if (vec && i + 8 <= n) {
        *reinterpret_cast<float4 *>(p + i) = make_float4(f[0], f[1], f[2], f[3]);
        *reinterpret_cast<float4 *>(p + i + 4) = make_float4(f[4], f[5], f[6], f[7]);
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (i + j < n) p[i + j] = f[j];
    }
}
template <> __device__ __forceinline__ void st8<bf16>(bf16 *p, const float (&f)[8], size_t i, size_t n, bool vec) {
    if (vec && i + 8 <= n) {
        uint4 u;
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
        for (int j = 0; j < 4; j++) h[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
        *reinterpret_cast<uint4 *>(p + i) = u;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (i + j < n) p[i + j] = __float2bfloat16_rn(f[j]);
    }
}
template <> __device__ __forceinline__ void st8<f16>(f16 *p, const float (&f)[8], size_t i, size_t n, bool vec) {
    if (vec && i + 8 <= n) {
        uint4 u;
        __half2 *h = reinterpret_cast<__half2 *>(&u);
#pragma unroll
        for (int j = 0; j < 4; j++) h[j] = __floats2half2_rn(f[2 * j], f[2 * j + 1]);
        *reinterpret_cast<uint4 *>(p + i) = u;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (i + j < n) p[i + j] = __float2half_rn(f[j]);
    }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// ---- programmatic dependent launch (sm_90+) ---------------------------------------------------------------------
// A kernel launched by qfc_launch_pdl may start while the kernel before it on the stream is still running: before
// qf_pdl_wait() it may only hint (qf_prefetch_l2: weights it will read) and must write nothing (its loads come
// after the wait: a weight may be a slot that a copy queued before it is still filling); qf_pdl_wait() returns once the preceding kernel has completed and its writes are visible. A kernel
// that calls qf_pdl_trigger() early lets the next such kernel be scheduled onto the SMs its own blocks leave (the
// launch gap and the tail overlap the next kernel's weight prefetch). Both are no-ops before sm_90 and for kernels
// launched without the attribute.
__device__ __forceinline__ void qf_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void qf_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// a hint that p's 128-byte line is wanted soon: into L2, no register written
__device__ __forceinline__ void qf_prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
template <typename... KArgs, typename... Args>
static inline void qfc_launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = qfc_stream();
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at, cfg.numAttrs = qfc().pdl ? 1 : 0;
    CHECK_CUDA(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}

// fixed-order sum over a block of 256 threads (8 warps), result in every thread; sh: 8 doubles of shared memory
__device__ __forceinline__ double block256_sum_d(double v, double *sh) {
    v = warp_sum_d(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads(); // sh may still be read by the previous call
    if (l == 0) sh[w] = v;
    __syncthreads();
    double r = 0.0;
#pragma unroll
    for (int i = 0; i < 8; i++) r += sh[i];
    return r;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// one warp (every lane) over the n scores p: their max m and, with each p[j] replaced by e^(p[j] - m), the exp-sum l
// (an attention row's softmax before its normalisation; n = 0: m = -inf, l = 0)
__device__ __forceinline__ float2 warp_exp_row(float *p, int n) {
    const int lane = threadIdx.x % 32;
    float m = -INFINITY;
    for (int j = lane; j < n; j += 32) m = fmaxf(m, p[j]);
    m = warp_max(m);
    float l = 0.0f;
    for (int j = lane; j < n; j += 32) {
        const float e = expf(p[j] - m);
        p[j] = e;
        l += e;
    }
    return make_float2(m, warp_sum(l));
}

// ---- internal op functions (signatures as in ops.h; T = element type of "act") ----------------------------------
// elementwise_cuda.cu
template <typename T> void cu_act_from_f32(void *dst, const float *src, size_t n);
template <typename T> void cu_act_to_f32(float *dst, const void *src, size_t n);
template <typename T> void cu_embedding_fwd(void *out, const int32_t *tokens, const void *wte, int N, int C);
template <typename T> void cu_embedding_bwd(void *dwte, const void *dout, const int32_t *tokens, int N, int C, int V);
template <typename T> void cu_swiglu_fwd(void *out, const void *gate, const void *up, int N, int F);
// joined_cuda.cu (ops.h qkv_rope, swiglu_joined)
template <typename T>
void cu_qkv_rope(void *q, void *k, void *v, const void *qkv, const int32_t *pos, int N, int H, int KV, int D,
                 double theta);
template <typename T> void cu_swiglu_joined(void *out, const void *gu, int N, int F);
template <typename T>
void cu_swiglu_bwd(void *dgate, void *dup, const void *dout, const void *gate, const void *up, int N, int F);
template <typename T> void cu_add_inplace(void *y, const void *x, size_t n);
template <typename T> double cu_sumsq(const void *g, size_t n);
template <typename T> void cu_sumsq_to(double *out, const void *g, size_t n);
template <typename T> void cu_scale(void *g, float s, size_t n);
template <typename T> int cu_nonfinite(const void *g, size_t n);
// gemv_cuda.cu: out[N, OUT] = x w^T (+ bias) (+ res | + out) at decoding sizes (N <= 8); false: not taken
template <typename T>
bool cu_gemv(T *out, const T *x, const T *w, const T *bias, const T *res, int N, int IN, int OUT, int accumulate);
template <typename T> void cu_argmax_rows(int32_t *out_host, float *logprob_host, const void *x, int n, int V);
template <typename T> void cu_argmax_rows_dev(int32_t *ids, float *logprob, const void *x, int n, int V);
template <typename T>
void cu_adamw(float *p, void *p_act, const void *g, float *m, float *v, size_t n, float gscale, float lr, float beta1,
              float beta2, float eps, float wd, int t);
// norm_cuda.cu
template <typename T> void cu_rmsnorm_fwd(void *out, float *rstd, const void *x, const void *w, int N, int C, float eps);
template <typename T>
void cu_rmsnorm_bwd(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd, int N, int C,
                    int accumulate);
template <typename T> void cu_rope_fwd(void *x, const int32_t *pos, int N, int nh, int D, double theta);
template <typename T> void cu_rope_bwd(void *dx, const int32_t *pos, int N, int nh, int D, double theta);
// column sums: db[c] += sum_n a[n, c] (deterministic: fixed row chunks, summed in order)
template <typename T> void cu_colsum_add(T *db, const T *a, int N, int C);
// matmul_cuda.cu
template <typename T>
void cu_matmul_fwd(void *out, const void *x, const void *w, const void *b, int N, int IN, int OUT, int accumulate);
template <typename T>
void cu_matmul_fwd_add(void *out, const void *x, const void *w, const void *res, int N, int IN, int OUT);
template <typename T>
void cu_matmul_bwd(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w, int N, int IN, int OUT,
                   int accumulate_dx);
// The three GEMM shapes of a linear layer, row-major (cuBLASLt underneath; fp32 accumulation):
//   gemm_nt: out[M,N] = a[M,K] b[N,K]^T (+ bias[N]) (+ out if accumulate)
//   gemm_nn: out[M,N] = a[M,K] b[K,N]            (+ out if accumulate)
//   gemm_tn: out[M,N] += a[K,M]^T b[K,N]
template <typename T> void cu_gemm_nt(T *out, const T *a, const T *b, const T *bias, int M, int N, int K, int accumulate);
template <typename T> void cu_gemm_nn(T *out, const T *a, const T *b, int M, int N, int K, int accumulate);
template <typename T> void cu_gemm_tn(T *out, const T *a, const T *b, int M, int N, int K);
// attention_cuda.cu
template <typename T>
void cu_attention_fwd(void *out, float *lse, const void *q, const void *k, const void *v, const int32_t *seg_start,
                      int B, int T_, int H, int KV, int D);
template <typename T>
void cu_attention_prompt(void *out, float *lse, const void *q, const void *k, const void *v, const int32_t *seg_start,
                         int B, int T_, int H, int KV, int D);
template <typename T>
void cu_attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse, const void *q,
                      const void *k, const void *v, const int32_t *seg_start, int B, int T_, int H, int KV, int D);
// classifier_cuda.cu
template <typename T>
void cu_classifier(double *loss_sum, void *dx, void *dw, const void *x, const void *w, const int32_t *targets, int N,
                   int C, int V, float grad_scale);

#endif
