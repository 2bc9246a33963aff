// attention_cudnn.cu — the attention_fwd / attention_bwd op-table slots through cuDNN 9's fused flash attention
// (its "SDPA" pattern), built with the cuDNN backend (graph) API directly; no cudnn-frontend.
//
// The graph is the operation pattern cuDNN's fused attention engines recognise:
//   forward : S = Q K^T (fp32) -> * scale -> [padding mask] -> causal mask -> softmax (max, sub, exp, sum, log:
//             Stats = logsumexp of the scaled scores, natural log, exactly the op table's lse) -> O = P V
//   backward: softmax_sum = rowsum(dO * O); S recomputed, P = exp(S - Stats); dV = P^T dO; dP = dO V^T;
//             dS = P (dP - softmax_sum) * scale; dK = dS^T Q; dQ = dS K (through an fp32 accumulator).
//             GQA: dK/dV over all query heads, reduced over each group.
// Packed documents: every segment (the part of one document in a row; ops.h's seg_start) becomes one cuDNN
// "sequence" in the THD (ragged) layout: ragged offsets point into the [B*T, H, D] tensors as they are, a padding
// mask gives each sequence its length, the causal mask is top-left aligned within each sequence. Rows that all hold
// one document (and T % 128 == 0) use the plain BSHD graph without padding mask (the fastest engine).
// The segment layout must be known on the host to size the graph (number of sequences, longest one): each call
// computes it on the device from seg_start and the host reads three integers back through host-mapped memory (so
// the host waits once per call for the GPU to reach that point; the mma path never waits). A caller that knows when seg_start changes may switch that read-back off:
// qf_cuda_attention_segment_cache(1), then qf_cuda_attention_segments_changed(seg) after each new upload. Sequence count and maximum length are bucketed to powers of two so that plans are
// reused; the stats (logsumexp) of the ragged graph live in a [seqs, H, max_len] buffer and are scattered into / out
// of the op table's lse[B, H, T] by two small kernels.
// Plans are built once per (direction, dtype, layout, shape) and cached; a shape cuDNN rejects is remembered, said
// once on stderr, and runs on the mma.sync kernels (attention_mma.cu). Workspaces and fp32 accumulators come from
// the backend's stream-ordered allocator (the table's alloc/free: cudaMallocAsync pool, zero-filled).
// cuDNN's backward accumulates dQ with fp32 atomics: unlike the mma path it is not bitwise deterministic.
//
// Path choice (qfc_attention_path): env QWENFT_ATTN = auto (default) | cudnn | mma, or the test hook
// qf_cuda_set_attention_path(0 auto | 1 mma | 2 cudnn). auto = cuDNN on sm_90 and newer when the build has it,
// mma.sync elsewhere (sm_80 / sm_89, where it is the tuned path) and whenever cuDNN is absent or rejects a shape.
#include "attention_impl.cuh"
#include <initializer_list>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PATH_AUTO = 0, PATH_MMA = 1, PATH_CUDNN = 2 };
static int g_path = -1;                       // -1: not yet read from the environment
static const char *g_last_path = "none";      // what the last attention call ran (tests, benchmark)

static int attention_path() {
    if (g_path < 0) {
        const char *e = getenv("QWENFT_ATTN");
        g_path = PATH_AUTO;
        if (e && !strcmp(e, "mma")) g_path = PATH_MMA;
        else if (e && !strcmp(e, "cudnn")) g_path = PATH_CUDNN;
        else if (e && *e && strcmp(e, "auto"))
            fprintf(stderr, "qwen-ft: QWENFT_ATTN=%s not understood (auto | cudnn | mma): using auto\n", e);
    }
    return g_path;
}
extern "C" void qf_cuda_set_attention_path(int p) { g_path = p >= 0 && p <= 2 ? p : PATH_AUTO; }
extern "C" const char *qf_cuda_attention_last_path(void) { return g_last_path; }
void qfc_attention_note_path(const char *p) { g_last_path = p; }

// one line for a run header: which attention path this process takes, e.g. "cudnn 9.14 fused (QWENFT_ATTN=auto,
// sm_90)" or "mma.sync (QWENFT_ATTN=mma)"; shapes cuDNN rejects are said on stderr when they first occur
extern "C" int qf_cuda_have_cudnn(void);
static int cudnn_version_or_0();
extern "C" void qf_cuda_attention_describe(char *buf, int cap) {
    const int p = attention_path(), v = cudnn_version_or_0();
    int major = 0, minor = 0;
    cudaDeviceProp pr;
    if (cudaGetDeviceProperties(&pr, qfc().device) == cudaSuccess) major = pr.major, minor = pr.minor;
    const char *set = p == PATH_MMA ? "mma" : p == PATH_CUDNN ? "cudnn" : "auto";
    const bool cudnn = v && p != PATH_MMA && (p == PATH_CUDNN || major >= 9);
    if (cudnn)
        snprintf(buf, (size_t)cap, "cudnn %d.%d fused, mma.sync fallback (QWENFT_ATTN=%s, sm_%d%d)", v / 10000,
                 v / 100 % 100, set, major, minor);
    else
        snprintf(buf, (size_t)cap, "mma.sync (QWENFT_ATTN=%s, sm_%d%d%s)", set, major, minor,
                 v ? "" : ", built without cuDNN");
}

#ifndef QWENFT_HAVE_CUDNN
static int cudnn_version_or_0() { return 0; }
extern "C" int qf_cuda_have_cudnn(void) { return 0; }
extern "C" void qf_cuda_attention_segment_cache(int) {}
extern "C" void qf_cuda_attention_segments_changed(const void *) {}
bool qfc_cudnn_attention_fwd(int, void *, float *, const void *, const void *, const void *, const int32_t *, int, int,
                             int, int, int) {
    return false;
}
bool qfc_cudnn_attention_bwd(int, void *, void *, void *, const void *, const void *, const float *, const void *,
                             const void *, const void *, const int32_t *, int, int, int, int, int) {
    return false;
}
#else
#include <cudnn.h>
#include <vector>

extern "C" int qf_cuda_have_cudnn(void) { return 1; }
static int cudnn_version_or_0() { return (int)cudnnGetVersion(); }

// fatal on failure, naming file and line, with cuDNN's own last message
#define CHECK_CUDNN(call)                                                                                        \
    do {                                                                                                         \
        cudnnStatus_t qf_s_ = (call);                                                                            \
        if (qf_s_ != CUDNN_STATUS_SUCCESS) {                                                                     \
            char qf_m_[1024];                                                                                    \
            cudnnGetLastErrorString(qf_m_, sizeof qf_m_);                                                        \
            qf_fatal_at(__FILE__, __LINE__, "cuDNN error %d (%s) in %s: %s", (int)qf_s_, cudnnGetErrorString(qf_s_), \
                        #call, qf_m_);                                                                           \
        }                                                                                                        \
    } while (0)

// ---- device helpers: the segment layout ------------------------------------------------------------------------
// meta[0] = number of segments, meta[1] = longest, meta[2] = tokens whose seg_start is not their segment's start
// (malformed input: the caller falls back). starts[i] = global token index of segment i's first token (row-major
// order), lens[i] its length, seqidx[n] the segment of token n.
// hmeta: host-mapped pinned copy of meta[0..2], then hmeta[3] = seqno once they are visible (the host spins on it)
__global__ void seg_meta_kernel(const int32_t *__restrict__ seg, int B, int T, int *meta, int *starts, int *lens,
                                int *seqidx, volatile int *hmeta, int seqno) {
    __shared__ int wsum[32];
    __shared__ int base_sh, max_sh, bad_sh;
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, nw = blockDim.x >> 5;
    const long N = (long)B * T;
    if (tid == 0) base_sh = 0, max_sh = 0, bad_sh = 0;
    __syncthreads();
    for (long c = 0; c < N; c += blockDim.x) {
        const long n = c + tid;
        const int t = n < N ? (int)(n % T) : 0;
        const int flag = n < N && (t == 0 || seg[n] == t);
        int x = flag; // inclusive warp scan
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
        }
        if (lane == 31) wsum[wid] = x;
        __syncthreads();
        if (wid == 0) {
            int w = lane < nw ? wsum[lane] : 0;
            for (int o = 1; o < 32; o <<= 1) {
                const int y = __shfl_up_sync(0xffffffffu, w, o);
                if (lane >= o) w += y;
            }
            wsum[lane] = w; // inclusive over warps
        }
        __syncthreads();
        const int incl = x + (wid ? wsum[wid - 1] : 0), base = base_sh;
        if (n < N) {
            seqidx[n] = base + incl - 1;
            if (flag) starts[base + incl - 1] = (int)n;
        }
        __syncthreads();
        if (tid == 0) base_sh = base + wsum[nw - 1];
        __syncthreads();
    }
    const int nseq = base_sh;
    for (int i = tid; i < nseq; i += blockDim.x) {
        const int s = starts[i], row_end = (s / T + 1) * T;
        const int e = i + 1 < nseq && starts[i + 1] < row_end ? starts[i + 1] : row_end;
        lens[i] = e - s;
        atomicMax(&max_sh, e - s);
    }
    __syncthreads();
    for (long n = tid; n < N; n += blockDim.x) // every token's seg_start must be its segment's first token
        if ((long)seg[n] != (long)(starts[seqidx[n]] - (n / T) * T)) atomicAdd(&bad_sh, 1);
    __syncthreads();
    if (tid == 0) {
        meta[0] = nseq, meta[1] = max_sh, meta[2] = bad_sh;
        hmeta[0] = nseq, hmeta[1] = max_sh, hmeta[2] = bad_sh;
        __threadfence_system();
        hmeta[3] = seqno;
    }
}

// seq lengths and ragged offsets (in elements) for nb >= nseq sequences; the unused ones are empty, at the end
__global__ void seg_fill_kernel(const int *meta, const int *starts, const int *lens, int nb, long N, int HD, int KVD,
                                int32_t *seqlen, int64_t *off_q, int64_t *off_k) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, nseq = meta[0];
    if (i < nb) seqlen[i] = i < nseq ? lens[i] : 0;
    if (i <= nb) {
        const long st = i < nseq ? starts[i] : N;
        off_q[i] = (int64_t)st * HD, off_k[i] = (int64_t)st * KVD;
    }
}
// lse[b, h, t] <-> stats[seq, h, local] (dir 0: stats -> lse, 1: lse -> stats)
__global__ void stats_lse_kernel(float *lse, float *stats, const int *starts, const int *seqidx, long N, int T, int H,
                                 int S, int dir) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x; // (n, h), h fastest
    if (i >= N * H) return;
    const long n = i / H;
    const int h = (int)(i % H), q = seqidx[n], local = (int)(n - starts[q]);
    const long b = n / T, t = n % T;
    float *l = lse + (b * H + h) * T + t, *s = stats + ((long)q * H + h) * S + local;
    if (dir == 0) *l = *s;
    else *s = *l;
}

// ---- graph building --------------------------------------------------------------------------------------------
namespace {

struct Graph {
    std::vector<cudnnBackendDescriptor_t> descs; // everything created, destroyed with the plan
    std::vector<cudnnBackendDescriptor_t> ops;
    bool ok = true;
    char err[1400] = "";
    int64_t next_virtual = 1000;

    void fail(const char *file, int line, const char *what, cudnnStatus_t s) {
        if (!ok) return;
        ok = false;
        char m[1024];
        cudnnGetLastErrorString(m, sizeof m);
        snprintf(err, sizeof err, "%s:%d: %s -> %d (%s): %s", file, line, what, (int)s, cudnnGetErrorString(s), m);
    }
};
#define GTRY(g, call)                                                                                            \
    do {                                                                                                         \
        if ((g).ok) {                                                                                            \
            cudnnStatus_t qf_s_ = (call);                                                                        \
            if (qf_s_ != CUDNN_STATUS_SUCCESS) (g).fail(__FILE__, __LINE__, #call, qf_s_);                       \
        }                                                                                                        \
    } while (0)

static cudnnBackendDescriptor_t make(Graph &g, cudnnBackendDescriptorType_t t) {
    cudnnBackendDescriptor_t d = nullptr;
    GTRY(g, cudnnBackendCreateDescriptor(t, &d));
    if (d) g.descs.push_back(d);
    return d;
}
#define SETA(g, d, attr, type, n, ptr) GTRY(g, cudnnBackendSetAttribute(d, attr, type, n, ptr))

struct Dims {
    int64_t d[4], s[4];
};
static Dims dims(int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0, int64_t s1, int64_t s2, int64_t s3) {
    return Dims{{d0, d1, d2, d3}, {s0, s1, s2, s3}};
}

struct Ten {
    cudnnBackendDescriptor_t d;
    int64_t uid;
    Dims dm;
    cudnnDataType_t dt;
};
// uid < 0: virtual (a fresh uid is taken)
static Ten tensor(Graph &g, int64_t uid, cudnnDataType_t dt, Dims dm, bool by_value = false,
                  cudnnBackendDescriptor_t ragged = nullptr) {
    const bool virt = uid < 0;
    Ten t{nullptr, virt ? g.next_virtual++ : uid, dm, dt};
    if (!g.ok) return t;
    t.d = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t align = 16;
    SETA(g, t.d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    SETA(g, t.d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dm.d);
    SETA(g, t.d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, dm.s);
    SETA(g, t.d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid);
    SETA(g, t.d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (virt) {
        bool v = true;
        SETA(g, t.d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    if (by_value) {
        bool v = true;
        SETA(g, t.d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    if (ragged) SETA(g, t.d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ragged);
    GTRY(g, cudnnBackendFinalize(t.d));
    return t;
}
static Ten vtensor(Graph &g, cudnnDataType_t dt, Dims dm) { return tensor(g, -1, dt, dm); }
static Dims scalar_dims() { return dims(1, 1, 1, 1, 1, 1, 1, 1); }

// y = op(x [, b [, t]]); math precision `prec`; axis >= 0 for GEN_INDEX
static void pointwise(Graph &g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, const Ten &x, const Ten *b,
                      const Ten *t, const Ten &y, int64_t axis = -1) {
    if (!g.ok) return;
    cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    SETA(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    SETA(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) SETA(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    GTRY(g, cudnnBackendFinalize(pw));
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    SETA(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    SETA(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.d);
    if (b) SETA(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->d);
    if (t) SETA(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t->d);
    SETA(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.d);
    GTRY(g, cudnnBackendFinalize(op));
    g.ops.push_back(op);
}
// c = a b (batched over the first two dims); optional m/n/k overrides (sequence lengths), padding value
static void matmul(Graph &g, const Ten &a, const Ten &b, const Ten &c, const Ten *mo, const Ten *no, const Ten *ko,
                   bool padding) {
    if (!g.ok) return;
    cudnnBackendDescriptor_t mm = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    SETA(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    if (padding) {
        double pv = 0.0;
        SETA(g, mm, CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &pv);
    }
    GTRY(g, cudnnBackendFinalize(mm));
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    SETA(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a.d);
    SETA(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b.d);
    SETA(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c.d);
    SETA(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    if (mo) SETA(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mo->d);
    if (no) SETA(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &no->d);
    if (ko) SETA(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ko->d);
    GTRY(g, cudnnBackendFinalize(op));
    g.ops.push_back(op);
}
static void reduction(Graph &g, cudnnReduceTensorOp_t mode, const Ten &x, const Ten &y) {
    if (!g.ok) return;
    cudnnBackendDescriptor_t rd = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    SETA(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    SETA(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    GTRY(g, cudnnBackendFinalize(rd));
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    SETA(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.d);
    SETA(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.d);
    SETA(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    GTRY(g, cudnnBackendFinalize(op));
    g.ops.push_back(op);
}
static void reshape(Graph &g, const Ten &x, const Ten &y) {
    if (!g.ok) return;
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    SETA(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.d);
    SETA(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.d);
    GTRY(g, cudnnBackendFinalize(op));
    g.ops.push_back(op);
}

// tensor uids of the graphs (the variant pack's keys)
enum : int64_t {
    U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SCALE, U_ONE, U_NEGINF1, U_NEGINF2, U_SEQQ, U_SEQKV,
    U_OFFQ, U_OFFK, U_OFFV, U_OFFO, U_OFFDO, U_OFFDQ, U_OFFDK, U_OFFDV, U_SSUM, U_DQACC
};

struct Shape {
    int bwd, dt, ragged; // dt: 0 bf16, 1 fp16
    int64_t b, s, H, KV, D;
    bool operator==(const Shape &o) const {
        return bwd == o.bwd && dt == o.dt && ragged == o.ragged && b == o.b && s == o.s && H == o.H && KV == o.KV &&
               D == o.D;
    }
};
struct Plan {
    Shape key;
    bool ok;
    cudnnBackendDescriptor_t plan;
    int64_t ws;
    std::vector<cudnnBackendDescriptor_t> descs;
    unsigned long used;
};

// The tensors both directions share: Q/O-like [b, H, s, D] over the token-major buffers, K/V-like [b, KV, s, D]
struct Common {
    Ten seqq, seqkv, offq, offk, offv, offo;
    bool ragged;
};
static Dims qdims(const Shape &k, int64_t heads) { // BSHD buffers: (b, h, s, d) with token stride heads*D
    return dims(k.b, heads, k.s, k.D, k.s * heads * k.D, k.D, heads * k.D, 1);
}
static Dims kt_dims(const Shape &k) { // K^T / V^T view: (b, KV, D, s)
    return dims(k.b, k.KV, k.D, k.s, k.s * k.KV * k.D, k.D, 1, k.KV * k.D);
}
static Dims score_dims(const Shape &k) { return dims(k.b, k.H, k.s, k.s, k.H * k.s * k.s, k.s * k.s, k.s, 1); }
static Dims row_dims(const Shape &k) { return dims(k.b, k.H, k.s, 1, k.H * k.s, k.s, 1, 1); }

static Ten ragged_off(Graph &g, int64_t uid, const Shape &k) {
    return tensor(g, uid, CUDNN_DATA_INT64, dims(k.b + 1, 1, 1, 1, 1, 1, 1, 1));
}
// scores -> * scale -> [padding mask] -> causal mask: returns the masked scores
static Ten scale_and_mask(Graph &g, const Shape &k, const Common &c, const Ten &s0, const Ten &scale) {
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, I = CUDNN_DATA_INT32, BO = CUDNN_DATA_BOOLEAN;
    const Dims sd = score_dims(k);
    Ten s1 = vtensor(g, F, sd);
    pointwise(g, CUDNN_POINTWISE_MUL, F, s0, &scale, nullptr, s1);
    Ten cur = s1;
    if (c.ragged) { // padding mask: row < seq_len_q && col < seq_len_kv
        Ten row = vtensor(g, I, sd), col = vtensor(g, I, sd), rm = vtensor(g, BO, sd), cm = vtensor(g, BO, sd),
            m = vtensor(g, BO, sd), ninf = tensor(g, U_NEGINF1, F, scalar_dims(), true), out = vtensor(g, F, sd);
        pointwise(g, CUDNN_POINTWISE_GEN_INDEX, I, cur, nullptr, nullptr, row, 2);
        pointwise(g, CUDNN_POINTWISE_GEN_INDEX, I, cur, nullptr, nullptr, col, 3);
        pointwise(g, CUDNN_POINTWISE_CMP_LT, BO, row, &c.seqq, nullptr, rm);
        pointwise(g, CUDNN_POINTWISE_CMP_LT, BO, col, &c.seqkv, nullptr, cm);
        pointwise(g, CUDNN_POINTWISE_LOGICAL_AND, BO, rm, &cm, nullptr, m);
        pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, F, cur, &ninf, &m, out);
        cur = out;
    }
    return cur;
}
static Ten causal_mask(Graph &g, const Shape &k, const Ten &x) { // keep row >= col (top-left diagonal)
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, I = CUDNN_DATA_INT32, BO = CUDNN_DATA_BOOLEAN;
    const Dims sd = score_dims(k);
    Ten row = vtensor(g, I, sd), col = vtensor(g, I, sd), keep = vtensor(g, BO, sd),
        ninf = tensor(g, U_NEGINF2, F, scalar_dims(), true), out = vtensor(g, F, sd);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, F, x, nullptr, nullptr, row, 2);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, F, x, nullptr, nullptr, col, 3);
    pointwise(g, CUDNN_POINTWISE_CMP_GE, BO, row, &col, nullptr, keep);
    pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, F, x, &ninf, &keep, out);
    return out;
}
static Common common(Graph &g, const Shape &k) {
    Common c{};
    c.ragged = k.ragged;
    if (k.ragged) {
        c.seqq = tensor(g, U_SEQQ, CUDNN_DATA_INT32, dims(k.b, 1, 1, 1, 1, 1, 1, 1));
        c.seqkv = tensor(g, U_SEQKV, CUDNN_DATA_INT32, dims(k.b, 1, 1, 1, 1, 1, 1, 1));
        c.offq = ragged_off(g, U_OFFQ, k), c.offk = ragged_off(g, U_OFFK, k), c.offv = ragged_off(g, U_OFFV, k);
        c.offo = ragged_off(g, U_OFFO, k);
    }
    return c;
}

static void build_fwd(Graph &g, const Shape &k) {
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, E = k.dt ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    Common c = common(g, k);
    auto R = [&](const Ten &t) { return k.ragged ? t.d : (cudnnBackendDescriptor_t) nullptr; };
    Ten q = tensor(g, U_Q, E, qdims(k, k.H), false, R(c.offq));
    Ten kt = tensor(g, U_K, E, kt_dims(k), false, R(c.offk));
    Ten v = tensor(g, U_V, E, qdims(k, k.KV), false, R(c.offv));
    Ten o = tensor(g, U_O, E, qdims(k, k.H), false, R(c.offo));
    Ten stats = tensor(g, U_STATS, F, row_dims(k));
    const Dims sd = score_dims(k), rd = row_dims(k);
    Ten s0 = vtensor(g, F, sd);
    matmul(g, q, kt, s0, k.ragged ? &c.seqq : nullptr, k.ragged ? &c.seqkv : nullptr, nullptr, k.ragged);
    Ten scale = tensor(g, U_SCALE, F, scalar_dims(), true);
    Ten sm = causal_mask(g, k, scale_and_mask(g, k, c, s0, scale));
    Ten mx = vtensor(g, F, rd), sub = vtensor(g, F, sd), ex = vtensor(g, F, sd), sum = vtensor(g, F, rd),
        lg = vtensor(g, F, rd), p = vtensor(g, E, sd);
    reduction(g, CUDNN_REDUCE_TENSOR_MAX, sm, mx);
    pointwise(g, CUDNN_POINTWISE_SUB, F, sm, &mx, nullptr, sub);
    pointwise(g, CUDNN_POINTWISE_EXP, F, sub, nullptr, nullptr, ex);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, ex, sum);
    pointwise(g, CUDNN_POINTWISE_LOG, F, sum, nullptr, nullptr, lg);
    pointwise(g, CUDNN_POINTWISE_ADD, F, mx, &lg, nullptr, stats);
    pointwise(g, CUDNN_POINTWISE_DIV, F, ex, &sum, nullptr, p);
    matmul(g, p, v, o, k.ragged ? &c.seqq : nullptr, nullptr, k.ragged ? &c.seqkv : nullptr, false);
}

static void build_bwd(Graph &g, const Shape &k) {
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, E = k.dt ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    Common c = common(g, k);
    Ten offdo{}, offdq{}, offdk{}, offdv{};
    if (k.ragged) {
        offdo = ragged_off(g, U_OFFDO, k), offdq = ragged_off(g, U_OFFDQ, k), offdk = ragged_off(g, U_OFFDK, k);
        offdv = ragged_off(g, U_OFFDV, k);
    }
    auto R = [&](const Ten &t) { return k.ragged ? t.d : (cudnnBackendDescriptor_t) nullptr; };
    const Ten *sq = k.ragged ? &c.seqq : nullptr, *skv = k.ragged ? &c.seqkv : nullptr;
    Ten q = tensor(g, U_Q, E, qdims(k, k.H), false, R(c.offq));
    Ten kt = tensor(g, U_K, E, kt_dims(k), false, R(c.offk));
    Ten vt = tensor(g, U_V, E, kt_dims(k), false, R(c.offv));
    Ten o = tensor(g, U_O, E, qdims(k, k.H), false, R(c.offo));
    Ten dO = tensor(g, U_DO, E, qdims(k, k.H), false, R(offdo));
    Ten stats = tensor(g, U_STATS, F, row_dims(k));
    Ten dq = tensor(g, U_DQ, E, qdims(k, k.H), false, R(offdq));
    Ten dk = tensor(g, U_DK, E, qdims(k, k.KV), false, R(offdk));
    Ten dv = tensor(g, U_DV, E, qdims(k, k.KV), false, R(offdv));
    const Dims sd = score_dims(k), rd = row_dims(k);
    const int64_t b = k.b, H = k.H, s = k.s, D = k.D;
    // softmax_sum = rowsum(dO * O) * 1 (fp32, in the workspace)
    Ten t1 = vtensor(g, F, dims(b, H, s, D, H * s * D, s * D, H * D, 1)), t2 = vtensor(g, F, rd);
    Ten one = tensor(g, U_ONE, F, scalar_dims(), true), ssum = tensor(g, U_SSUM, F, rd);
    pointwise(g, CUDNN_POINTWISE_MUL, F, dO, &o, nullptr, t1);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, t1, t2);
    pointwise(g, CUDNN_POINTWISE_MUL, F, t2, &one, nullptr, ssum);
    // P = exp(mask(S * scale) - stats)
    Ten s0 = vtensor(g, F, sd);
    matmul(g, q, kt, s0, sq, skv, nullptr, false);
    Ten scale = tensor(g, U_SCALE, F, scalar_dims(), true);
    Ten s1 = scale_and_mask(g, k, c, s0, scale);
    Ten s2 = vtensor(g, F, sd);
    pointwise(g, CUDNN_POINTWISE_SUB, F, s1, &stats, nullptr, s2);
    Ten s3 = causal_mask(g, k, s2);
    Ten p = vtensor(g, F, sd);
    pointwise(g, CUDNN_POINTWISE_EXP, F, s3, nullptr, nullptr, p);
    const Dims td = dims(b, H, s, s, H * s * s, s * s, 1, s); // transposed score view
    Ten pt = vtensor(g, E, td);
    reshape(g, p, pt);
    const bool gqa = k.H != k.KV;
    const Dims full = dims(b, H, s, D, H * s * D, s * D, D, 1);
    if (gqa) {
        Ten dvf = vtensor(g, E, full);
        matmul(g, pt, dO, dvf, skv, nullptr, sq, false);
        reduction(g, CUDNN_REDUCE_TENSOR_ADD, dvf, dv);
    } else {
        matmul(g, pt, dO, dv, skv, nullptr, sq, false);
    }
    // dS = P (dO V^T - softmax_sum) * scale
    Ten dp = vtensor(g, F, sd), dp1 = vtensor(g, F, sd), dp2 = vtensor(g, F, sd), ds = vtensor(g, F, sd);
    matmul(g, dO, vt, dp, sq, skv, nullptr, false);
    pointwise(g, CUDNN_POINTWISE_SUB, F, dp, &ssum, nullptr, dp1);
    pointwise(g, CUDNN_POINTWISE_MUL, F, dp1, &p, nullptr, dp2);
    pointwise(g, CUDNN_POINTWISE_MUL, F, dp2, &scale, nullptr, ds);
    Ten dst = vtensor(g, E, td);
    reshape(g, ds, dst);
    if (gqa) {
        Ten dkf = vtensor(g, E, full);
        matmul(g, dst, q, dkf, skv, nullptr, sq, false);
        reduction(g, CUDNN_REDUCE_TENSOR_ADD, dkf, dk);
    } else {
        matmul(g, dst, q, dk, skv, nullptr, sq, false);
    }
    // dQ = dS K through an fp32 accumulator
    Ten kk = tensor(g, -1, E, qdims(k, k.KV), false, R(c.offk));
    reshape(g, kt, kk);
    Ten dqacc = k.ragged ? tensor(g, U_DQACC, F, qdims(k, k.H), false, offdq.d)
                         : tensor(g, U_DQACC, F, dims(b, H, s, D, H * s * D, s * D, D, 1));
    matmul(g, ds, kk, dqacc, sq, nullptr, skv, false);
    pointwise(g, CUDNN_POINTWISE_IDENTITY, F, dqacc, nullptr, nullptr, dq);
}

struct State {
    bool init = false, broken = false;
    cudnnHandle_t h = nullptr;
    std::vector<Plan> plans;
    unsigned long tick = 0;
    int *meta_dev = nullptr, *meta_host = nullptr, *meta_map = nullptr; // meta_map: meta_host as the device sees it
    int seqno = 0;
    void *idx_buf = nullptr; // starts, lens, seqidx (ints), seqlen (int32), offsets (int64)
    size_t idx_bytes = 0;
};
static State S;

static bool state_init() {
    if (S.init) return !S.broken;
    S.init = true;
    cudnnStatus_t st = cudnnCreate(&S.h);
    if (st != CUDNN_STATUS_SUCCESS) {
        char m[512];
        cudnnGetLastErrorString(m, sizeof m);
        fprintf(stderr, "qwen-ft: cuDNN %zu: cudnnCreate failed (%s: %s): attention runs on the mma.sync kernels\n",
                cudnnGetVersion(), cudnnGetErrorString(st), m);
        S.broken = true;
        return false;
    }
    CHECK_CUDNN(cudnnSetStream(S.h, qfc_stream()));
    CHECK_CUDA(cudaHostAlloc((void **)&S.meta_host, 64, cudaHostAllocMapped));
    CHECK_CUDA(cudaHostGetDevicePointer((void **)&S.meta_map, S.meta_host, 0));
    memset(S.meta_host, 0, 64);
    qfc_device_malloc((void **)&S.meta_dev, 64);
    fprintf(stderr, "qwen-ft: attention: cuDNN %zu fused attention (compiled against %d)\n", cudnnGetVersion(),
            CUDNN_VERSION);
    return true;
}

static Plan *get_plan(const Shape &k) {
    for (auto &p : S.plans)
        if (p.key == k) {
            p.used = ++S.tick;
            return &p;
        }
    Graph g;
    if (k.bwd) build_bwd(g, k);
    else build_fwd(g, k);
    cudnnBackendDescriptor_t og = nullptr, heur = nullptr, plan = nullptr;
    int64_t ws = 0;
    if (g.ok) {
        og = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        SETA(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)g.ops.size(), g.ops.data());
        SETA(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &S.h);
        GTRY(g, cudnnBackendFinalize(og));
    }
    char tried[1600] = "";
    for (int mode_i = 0; mode_i < 2 && g.ok && !plan; mode_i++) {
        cudnnBackendHeurMode_t mode = mode_i ? CUDNN_HEUR_MODE_FALLBACK : CUDNN_HEUR_MODE_A;
        heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        SETA(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og);
        SETA(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        GTRY(g, cudnnBackendFinalize(heur));
        int64_t n = 0;
        GTRY(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                                         nullptr));
        if (!g.ok) break;
        std::vector<cudnnBackendDescriptor_t> cfgs((size_t)n);
        for (int64_t i = 0; i < n; i++) cfgs[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        int64_t got = 0;
        if (n) GTRY(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n,
                                                &got, cfgs.data()));
        for (int64_t i = 0; i < got && g.ok && !plan; i++) {
            cudnnBackendDescriptor_t p = nullptr;
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p) != CUDNN_STATUS_SUCCESS)
                continue;
            cudnnStatus_t s1 = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &S.h);
            cudnnStatus_t s2 = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
            cudnnStatus_t s3 = s1 || s2 ? CUDNN_STATUS_BAD_PARAM : cudnnBackendFinalize(p);
            if (s3 == CUDNN_STATUS_SUCCESS &&
                cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, nullptr,
                                         &ws) == CUDNN_STATUS_SUCCESS) {
                plan = p;
                g.descs.push_back(p);
            } else {
                char m[256];
                cudnnGetLastErrorString(m, sizeof m);
                size_t l = strlen(tried);
                snprintf(tried + l, sizeof tried - l, " [%s cfg %ld: %s %.120s]", mode_i ? "fallback" : "A", (long)i,
                         cudnnGetErrorString(s3), m);
                cudnnBackendDestroyDescriptor(p);
            }
        }
        if (!got && g.ok) {
            char m[256];
            cudnnGetLastErrorString(m, sizeof m);
            size_t l = strlen(tried);
            snprintf(tried + l, sizeof tried - l, " [heuristics %s: no engine: %.160s]", mode_i ? "fallback" : "A", m);
        }
    }
    Plan P{k, plan != nullptr, plan, ws, g.descs, ++S.tick};
    if (!P.ok) {
        fprintf(stderr,
                "qwen-ft: attention: cuDNN rejected the %s graph (%s, %s, b=%ld s=%ld H=%ld KV=%ld D=%ld): %s%s; this "
                "shape runs on the mma.sync kernels\n",
                k.bwd ? "backward" : "forward", k.dt ? "fp16" : "bf16", k.ragged ? "ragged" : "dense", (long)k.b,
                (long)k.s, (long)k.H, (long)k.KV, (long)k.D, g.ok ? "no engine config finalized:" : g.err, tried);
        for (auto d : P.descs) cudnnBackendDestroyDescriptor(d);
        P.descs.clear();
    }
    if (S.plans.size() >= 128) { // evict the least recently used (packed data visits a few dozen buckets)
        size_t lru = 0;
        for (size_t i = 1; i < S.plans.size(); i++)
            if (S.plans[i].used < S.plans[lru].used) lru = i;
        for (auto d : S.plans[lru].descs) cudnnBackendDestroyDescriptor(d);
        S.plans.erase(S.plans.begin() + (long)lru);
    }
    S.plans.push_back(P);
    return &S.plans.back();
}

// A prepared call: plan, buffers, finalized variant pack (built before the layout read-back returns, so that only
// cudnnBackendExecute is left for after it). Lives in the caller's frame: the by-value scalars are read from here.
struct Call {
    Plan *p = nullptr;
    char *buf = nullptr;
    cudnnBackendDescriptor_t vp = nullptr;
    float scale = 0.0f, ninf = -INFINITY, one = 1.0f;
    float *stats = nullptr;
    int64_t nb = 0, s = 0;
    bool ragged = false;
};
static void release(Call &c) {
    if (c.vp) cudnnBackendDestroyDescriptor(c.vp);
    if (c.buf) cu_free(c.buf);
    c.vp = nullptr, c.buf = nullptr, c.p = nullptr;
}
static void say_exec_failure(Plan *p, const char *err) {
    const Shape &k = p->key;
    fprintf(stderr,
            "qwen-ft: attention: cuDNN could not execute the %s plan (%s, %s, b=%ld s=%ld H=%ld KV=%ld D=%ld): %s; "
            "this shape runs on the mma.sync kernels\n",
            k.bwd ? "backward" : "forward", k.dt ? "fp16" : "bf16", k.ragged ? "ragged" : "dense", (long)k.b,
            (long)k.s, (long)k.H, (long)k.KV, (long)k.D, err);
    p->ok = false;
}
static bool build_vp(Call &c, const std::vector<int64_t> &uids, const std::vector<void *> &ptrs) {
    Graph g; // only for its error capture
    GTRY(g, cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &c.vp));
    SETA(g, c.vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)uids.size(), uids.data());
    SETA(g, c.vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, (int64_t)ptrs.size(), ptrs.data());
    void *ws = c.buf;
    SETA(g, c.vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    GTRY(g, cudnnBackendFinalize(c.vp));
    if (!g.ok) say_exec_failure(c.p, g.err);
    return g.ok;
}
// false (said once, the plan then marked rejected) when cuDNN refuses to run it: the caller falls back
static bool execute(Call &c) {
    Graph g;
    CHECK_CUDNN(cudnnSetStream(S.h, qfc_stream()));
    GTRY(g, cudnnBackendExecute(S.h, c.p->plan, c.vp));
    if (!g.ok) say_exec_failure(c.p, g.err);
    return g.ok;
}

static int64_t pow2_at_least(int64_t x, int64_t lo) {
    int64_t p = lo;
    while (p < x) p <<= 1;
    return p;
}

// The segment layout of this call: fills Layout and, for the ragged graph, the device arrays.
struct Layout {
    bool ragged, bad;
    int nseq, maxlen;
    int64_t nb, s;
    int *starts, *lens, *seqidx;
    int32_t *seqlen;
    int64_t *offq, *offk;
};
// Segment cache (off by default): with qf_cuda_attention_segment_cache(1) the layout of the last (seg, B, T, H, KV,
// D) is reused without the read-back until qf_cuda_attention_segments_changed() says seg_start's contents changed
// (the caller's promise; the benchmark uses it to time the kernels alone).
static struct {
    bool on, valid;
    const int32_t *seg;
    int B, T, H, KV, D;
    Layout L;
} g_segcache;
// the last layout seen for a (seg, B, T, H, KV, D): the guess under which the next call prepares before it syncs
static struct {
    bool valid;
    const int32_t *seg;
    int B, T, H, KV, D;
    bool ragged;
    int64_t nb, s;
} g_guess;

// meta kernel + read-back queued (no sync); the device arrays are this call's
static Layout layout_launch(const int32_t *seg, int B, int T) {
    Layout L{};
    const long N = (long)B * T;
    const size_t ints = qf_align_up((size_t)(2 * N + 2) * 4 + (size_t)N * 4, 256); // starts, lens, seqidx
    const size_t need = ints + qf_align_up((size_t)(N + 2) * 4, 256) + 2 * qf_align_up((size_t)(N + 2) * 8, 256);
    if (need > S.idx_bytes) {
        qfc_device_free(S.idx_buf, S.idx_bytes);
        qfc_device_malloc(&S.idx_buf, need);
        S.idx_bytes = need;
    }
    char *p = (char *)S.idx_buf;
    L.starts = (int *)p, L.lens = L.starts + N + 1, L.seqidx = L.lens + N + 1;
    L.seqlen = (int32_t *)(p + ints);
    L.offq = (int64_t *)(p + ints + qf_align_up((size_t)(N + 2) * 4, 256));
    L.offk = (int64_t *)((char *)L.offq + qf_align_up((size_t)(N + 2) * 8, 256));
    cudaStream_t st = qfc_stream();
    S.seqno = S.seqno == 0x7fffffff ? 1 : S.seqno + 1;
    seg_meta_kernel<<<1, 1024, 0, st>>>(seg, B, T, S.meta_dev, L.starts, L.lens, L.seqidx, S.meta_map, S.seqno);
    CHECK_LAUNCH();
    return L;
}
static void layout_finish(Layout &L, int B, int T) {
    // wait for the meta kernel's mapped write (not for a stream sync + copy: fewer microseconds of idle GPU after it)
    volatile int *hm = S.meta_host;
    for (unsigned long i = 1; hm[3] != S.seqno; i++)
        if (i % 4096 == 0) { // the stream finished without the write, or failed: say so
            const cudaError_t e = cudaStreamQuery(qfc_stream());
            if (e == cudaErrorNotReady) continue;
            CHECK_CUDA(e);
            if (hm[3] != S.seqno) qf_fatal_at(__FILE__, __LINE__, "attention: segment layout read-back lost");
        }
    L.nseq = hm[0], L.maxlen = hm[1], L.bad = hm[2] != 0;
    L.ragged = !(L.nseq == B && T % 128 == 0);
    L.nb = L.ragged ? pow2_at_least(L.nseq, 1) : B;
    L.s = L.ragged ? pow2_at_least(L.maxlen, 64) : T;
}
// sequence lengths and ragged offsets for nb sequences (the ragged graph)
static void layout_fill(const Layout &L, int64_t nb, int B, int T, int H, int KV, int D) {
    seg_fill_kernel<<<(unsigned)((nb + 1 + 255) / 256), 256, 0, qfc_stream()>>>(
        S.meta_dev, L.starts, L.lens, (int)nb, (long)B * T, H * D, KV * D, L.seqlen, L.offq, L.offk);
    CHECK_LAUNCH();
}

// The call's flow, both directions: queue the layout read-back; prepare under the last layout seen (plan, buffers,
// variant pack) while the stream drains; sync; prepare again only if the guess was wrong; execute.
// prep(Call &, const Layout &, ragged, nb, s) fills c (false: cuDNN cannot take it); post(Call &, Layout &) after.
template <class Prep, class Post>
static bool run_call(const int32_t *seg, int B, int T, int H, int KV, int D, Prep prep, Post post) {
    auto &sc = g_segcache;
    const bool cached = sc.on && sc.valid && sc.seg == seg && sc.B == B && sc.T == T && sc.H == H && sc.KV == KV &&
                        sc.D == D;
    Layout L{};
    Call c;
    bool prepared = false;
    if (cached) {
        L = sc.L;
    } else {
        L = layout_launch(seg, B, T);
        auto &gs = g_guess;
        if (gs.valid && gs.seg == seg && gs.B == B && gs.T == T && gs.H == H && gs.KV == KV && gs.D == D) {
            if (gs.ragged) layout_fill(L, gs.nb, B, T, H, KV, D);
            c.ragged = gs.ragged, c.nb = gs.nb, c.s = gs.s;
            prepared = prep(c, L);
            if (!prepared) release(c);
        }
        layout_finish(L, B, T);
        if (L.bad) {
            release(c);
            return false;
        }
        g_guess = {true, seg, B, T, H, KV, D, L.ragged, L.nb, L.s};
        sc.valid = sc.on, sc.seg = seg, sc.B = B, sc.T = T, sc.H = H, sc.KV = KV, sc.D = D, sc.L = L;
        if (prepared && (c.ragged != L.ragged || c.nb != L.nb || c.s != L.s)) {
            release(c);
            prepared = false;
        }
        if (!prepared && L.ragged) layout_fill(L, L.nb, B, T, H, KV, D);
    }
    if (!prepared) {
        c = Call{};
        c.ragged = L.ragged, c.nb = L.nb, c.s = L.s;
        if (!prep(c, L)) {
            release(c);
            return false;
        }
    }
    const bool ran = execute(c);
    if (ran) post(c, L);
    release(c);
    if (ran) qfc_attention_note_path(L.ragged ? "cudnn-ragged" : "cudnn-dense");
    return ran;
}

static bool wanted(int D, std::initializer_list<const void *> ptrs) {
    const int p = attention_path();
    if (p == PATH_MMA) return false;
    if (p == PATH_AUTO) {
        cudaDeviceProp pr;
        static int major = -1;
        if (major < 0) {
            CHECK_CUDA(cudaGetDeviceProperties(&pr, qfc().device));
            major = pr.major;
        }
        if (major < 9) return false; // sm_80 / sm_89: the mma.sync kernels are the tuned path
    }
    if (D % 8 != 0 || D > 256) return false;
    for (const void *q : ptrs)
        if (!qf_ptr_aligned(q, 16)) return false;
    return state_init();
}

} // namespace

extern "C" void qf_cuda_attention_segment_cache(int on) { g_segcache.on = on != 0, g_segcache.valid = false; }
extern "C" void qf_cuda_attention_segments_changed(const void *seg) {
    if (!seg || seg == g_segcache.seg) g_segcache.valid = false;
}

// dt: 0 bf16, 1 fp16. Returns true when cuDNN did the work.
bool qfc_cudnn_attention_fwd(int dt, void *out, float *lse, const void *q, const void *k, const void *v,
                             const int32_t *seg, int B, int T, int H, int KV, int D) {
    if (!wanted(D, {out, q, k, v})) return false;
    const long N = (long)B * T;
    auto prep = [&](Call &c, const Layout &L) -> bool {
        c.p = get_plan(Shape{0, dt, c.ragged, c.nb, c.s, H, KV, D});
        if (!c.p->ok) return false;
        const size_t wsb = qf_align_up((size_t)c.p->ws, 256);
        const size_t stb = c.ragged ? (size_t)c.nb * H * c.s * 4 : 0;
        c.buf = (char *)cu_alloc(wsb + stb + 256);
        if (!c.buf) return false;
        c.stats = c.ragged ? (float *)(c.buf + wsb) : lse;
        c.scale = (float)(1.0 / sqrt((double)D));
        std::vector<int64_t> u = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEGINF2};
        std::vector<void *> ptr = {(void *)q, (void *)k, (void *)v, out, c.stats, &c.scale, &c.ninf};
        if (c.ragged) {
            u.insert(u.end(), {U_NEGINF1, U_SEQQ, U_SEQKV, U_OFFQ, U_OFFK, U_OFFV, U_OFFO});
            ptr.insert(ptr.end(), {&c.ninf, L.seqlen, L.seqlen, L.offq, L.offk, L.offk, L.offq});
        }
        return build_vp(c, u, ptr);
    };
    auto post = [&](Call &c, const Layout &L) {
        if (!c.ragged) return;
        stats_lse_kernel<<<qf_blocks((size_t)N * H, 256, 1u << 30), 256, 0, qfc_stream()>>>(
            lse, c.stats, L.starts, L.seqidx, N, T, H, (int)c.s, 0);
        CHECK_LAUNCH();
    };
    return run_call(seg, B, T, H, KV, D, prep, post);
}

bool qfc_cudnn_attention_bwd(int dt, void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse,
                             const void *q, const void *k, const void *v, const int32_t *seg, int B, int T, int H,
                             int KV, int D) {
    if (!wanted(D, {dq, dk, dv, dout, out, q, k, v})) return false;
    const long N = (long)B * T;
    auto prep = [&](Call &c, const Layout &L) -> bool {
        c.p = get_plan(Shape{1, dt, c.ragged, c.nb, c.s, H, KV, D});
        if (!c.p->ok) return false;
        const size_t wsb = qf_align_up((size_t)c.p->ws, 256);
        const size_t rows = (size_t)c.nb * H * c.s;                        // [b, H, s] fp32 row vectors
        const size_t stb = c.ragged ? qf_align_up(rows * 4, 256) : 0;      // stats in the graph's layout
        const size_t ssb = qf_align_up(rows * 4, 256);                     // softmax_sum
        const size_t acb = c.ragged ? (size_t)N * H * D * 4 : rows * D * 4; // dQ accumulator (zeroed by alloc)
        c.buf = (char *)cu_alloc(wsb + stb + ssb + acb);
        if (!c.buf) return false;
        c.stats = c.ragged ? (float *)(c.buf + wsb) : (float *)lse;
        float *ssum = (float *)(c.buf + wsb + stb), *acc = (float *)(c.buf + wsb + stb + ssb);
        if (c.ragged) { // rows past a sequence's end stay 0 (alloc zero-fills): exp(-inf - 0) = 0 there
            stats_lse_kernel<<<qf_blocks((size_t)N * H, 256, 1u << 30), 256, 0, qfc_stream()>>>(
                (float *)lse, c.stats, L.starts, L.seqidx, N, T, H, (int)c.s, 1);
            CHECK_LAUNCH();
        }
        c.scale = (float)(1.0 / sqrt((double)D));
        std::vector<int64_t> u = {U_Q, U_K, U_V, U_O, U_DO, U_STATS, U_DQ, U_DK, U_DV, U_SCALE, U_ONE, U_NEGINF2,
                                  U_SSUM, U_DQACC};
        std::vector<void *> ptr = {(void *)q, (void *)k, (void *)v, (void *)out, (void *)dout, c.stats, dq, dk, dv,
                                   &c.scale, &c.one, &c.ninf, ssum, acc};
        if (c.ragged) {
            u.insert(u.end(), {U_NEGINF1, U_SEQQ, U_SEQKV, U_OFFQ, U_OFFK, U_OFFV, U_OFFO, U_OFFDO, U_OFFDQ, U_OFFDK,
                               U_OFFDV});
            ptr.insert(ptr.end(), {&c.ninf, L.seqlen, L.seqlen, L.offq, L.offk, L.offk, L.offq, L.offq, L.offq,
                                   L.offk, L.offk});
        }
        return build_vp(c, u, ptr);
    };
    auto post = [&](Call &, const Layout &) {};
    return run_call(seg, B, T, H, KV, D, prep, post);
}
#endif // QWENFT_HAVE_CUDNN
