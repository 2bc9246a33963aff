// cuda_context.cu — the CUDA backend's one context (cuda_common.cuh: qf_cuda_ctx): the device, the compute
// stream, the cuBLASLt handle and workspace, memory (the stream-ordered pool, accounting, the byte limit, the
// scratch buffer) and the op table's memory and copy entries. It calls no kernel family; the families and the op
// tables (cuda_backend.cu) call it.
//
// Memory: alloc() = cudaMallocAsync from the device's pool on the compute stream, zero-filled by cudaMemsetAsync,
// refused (NULL) when the byte limit (qf_cuda_set_memory_limit, the deck's gpu_memory_limit_gb) would be exceeded;
// current and peak bytes count every buffer the backend holds (alloc()'s, scratch, workspace). free() =
// cudaFreeAsync on the compute stream: no device-wide sync, the memory is reused in stream order (callers that
// used a buffer on another stream make the compute stream wait for that use first, as comm_nccl's waits do). Copies
// are stream-ordered: copy_h2d of up to 4 MiB is staged through a pinned ring (no stream sync; the host source may
// be reused on return); larger ones are cudaMemcpyAsync from the caller's buffer (pageable memory is staged by CUDA
// before the call returns; a pinned source is synchronised, so the same "reusable on return" holds). copy_d2h
// returns with the data in place (it syncs the stream).
#include "cuda_common.cuh"
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <cstring>

static qf_cuda_ctx g_ctx; // THE backend context (the only mutable global of kernels/cuda)

extern "C" int qf_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" void qf_cuda_versions(char *buf, int cap) {
    int rt = 0, nccl = 0;
    cudaRuntimeGetVersion(&rt);
    ncclGetVersion(&nccl);
    size_t lt = cublasLtGetVersion();
    snprintf(buf, (size_t)cap, "CUDA runtime %d.%d | cuBLASLt %zu | NCCL %d", rt / 1000, (rt % 1000) / 10, lt, nccl);
}

// ---- accounting -------------------------------------------------------------------------------------------------
static void account(size_t add, size_t sub) {
    g_ctx.cur = g_ctx.cur + add - sub;
    if (g_ctx.cur > g_ctx.peak) g_ctx.peak = g_ctx.cur;
}

void qfc_device_malloc(void **p, size_t bytes) {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); // out of memory is not sticky
        *p = NULL;
        // the first step's rescue (util.h qf_oom_rescue): managed memory, which cudaFree takes back as well
        if (qf_oom_rescue("the CUDA backend's scratch", bytes) && cudaMallocManaged(p, bytes ? bytes : 1) == cudaSuccess) {
            account(bytes, 0);
            return;
        }
        (void)cudaGetLastError();
        qf_fatal_at(__FILE__, __LINE__, "CUDA backend: cudaMalloc of %zu bytes for an internal buffer failed: %s",
                    bytes, cudaGetErrorString(e));
    }
    account(bytes, 0);
}
void qfc_device_free(void *p, size_t bytes) {
    if (!p) return;
    CHECK_CUDA(cudaFree(p));
    account(0, bytes);
}

static size_t amap_slot(const void *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)(h & (cap - 1));
}
static void amap_put(void *p, size_t n, uint64_t seq, int managed = 0);
static void amap_grow(void) {
    qf_cuda_alloc_entry *old = g_ctx.amap;
    size_t oldcap = g_ctx.amap_cap;
    g_ctx.amap_cap = oldcap ? oldcap * 2 : 1024;
    g_ctx.amap = (qf_cuda_alloc_entry *)qf_calloc(g_ctx.amap_cap, sizeof(qf_cuda_alloc_entry));
    g_ctx.amap_used = 0;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].p) amap_put(old[i].p, old[i].n, old[i].seq, old[i].managed);
    free(old);
}
static void amap_put(void *p, size_t n, uint64_t seq, int managed) {
    if ((g_ctx.amap_used + 1) * 2 > g_ctx.amap_cap) amap_grow();
    size_t i = amap_slot(p, g_ctx.amap_cap);
    while (g_ctx.amap[i].p) i = (i + 1) & (g_ctx.amap_cap - 1);
    g_ctx.amap[i].p = p;
    g_ctx.amap[i].n = n;
    g_ctx.amap[i].seq = seq;
    g_ctx.amap[i].managed = managed;
    g_ctx.amap_used++;
}
// removes p, returns its size (fatal if unknown: a pointer this backend did not allocate); *managed: cu_alloc_rescue's
static size_t amap_take(void *p, int *managed = NULL) {
    if (!g_ctx.amap_cap) QF_FATAL("CUDA backend: free of a pointer it did not allocate (%p)", p);
    size_t i = amap_slot(p, g_ctx.amap_cap);
    while (g_ctx.amap[i].p && g_ctx.amap[i].p != p) i = (i + 1) & (g_ctx.amap_cap - 1);
    if (!g_ctx.amap[i].p) QF_FATAL("CUDA backend: free of a pointer it did not allocate (%p)", p);
    const size_t n = g_ctx.amap[i].n;
    if (managed) *managed = g_ctx.amap[i].managed;
    // backward-shift deletion keeps the probe chains intact
    size_t j = i;
    for (;;) {
        g_ctx.amap[i].p = NULL;
        for (;;) {
            j = (j + 1) & (g_ctx.amap_cap - 1);
            if (!g_ctx.amap[j].p) {
                g_ctx.amap_used--;
                return n;
            }
            const size_t k = amap_slot(g_ctx.amap[j].p, g_ctx.amap_cap);
            // move j into i unless k lies cyclically in (i, j]
            if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
            break;
        }
        g_ctx.amap[i] = g_ctx.amap[j];
        i = j;
    }
}

// ---- initialisation -------------------------------------------------------------------------------------------
int qfc_context_init(void (*first)(void)) {
    if (g_ctx.state) return g_ctx.state > 0;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        g_ctx.state = -1;
        return 0;
    }
    CHECK_CUDA(cudaGetDevice(&g_ctx.device));
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, g_ctx.device));
    if (prop.major < 8) { // bf16 tensor cores and cp.async need sm_80+
        fprintf(stderr, "qwen-ft: CUDA device %d (%s, sm_%d%d) is older than sm_80: CUDA backend unavailable\n",
                g_ctx.device, prop.name, prop.major, prop.minor);
        g_ctx.state = -1;
        return 0;
    }
    g_ctx.num_sms = prop.multiProcessorCount;
    g_ctx.smem_optin = prop.sharedMemPerBlockOptin;
    g_ctx.pdl = prop.major >= 9; // programmatic dependent launch (Hopper and newer)
    {
        const char *gv = getenv("QWENFT_GEMV");
        g_ctx.gemv_l1 = gv && !strcmp(gv, "l1");
        const char *dq = getenv("QWENFT_DECODE_QKV");
        g_ctx.decode_qkv_form = dq && !strcmp(dq, "8w") ? 0 : dq && !strcmp(dq, "w4") ? 2 : 1; // default occ3
        const char *gp = getenv("QWENFT_GEMV_PF");
        g_ctx.gemv_pf = gp && !strcmp(gp, "8") ? 8 : 4;
        const char *gt = getenv("QWENFT_GEMM_TUNE");
        const int gtv = gt && *gt ? atoi(gt) : 0; // empty: off
        if (gt && *gt && (gtv < 2 || gtv > 32))
            QF_FATAL("QWENFT_GEMM_TUNE=%s: the number of algorithms to time per GEMM shape, 2 to 32, expected", gt);
        g_ctx.gemm_tune = gtv;
        const char *ds = getenv("QWENFT_DECODE_ATTN_SPLIT");
        const int dsv = ds ? atoi(ds) : 0;
        if (ds && (dsv < 32 || dsv > 512 || dsv % 32))
            QF_FATAL("QWENFT_DECODE_ATTN_SPLIT=%s: a multiple of 32 from 32 to 512 expected", ds);
        g_ctx.decode_attn_split = dsv;
        const char *da = getenv("QWENFT_DECODE_ATTN");
        // default 6 ("mma"): as 5, and the calls the cluster form does not take on the tensor-core form
        // (decode_attn_mma_cuda.cu) where it applies; 5 ("cluster"): calls of up to QWENFT_DECODE_ATTN_CLUSTER_N
        // tokens on the cluster form (decode_attn_cluster_cuda.cu) where it applies, the others as 4; 4 ("pre"):
        // the earlier calls' k and v rows copied into shared memory before the programmatic wait, the pool rows
        // looked up before it, q in 16-byte loads; "rows": as pre, the k and v rows loaded after the wait;
        // "inflight": as rows, the pool rows after the wait too (the default until session 23); "early": in flight,
        // v beside k; "plain": neither
        if (da && strcmp(da, "plain") && strcmp(da, "early") && strcmp(da, "inflight") && strcmp(da, "rows") &&
            strcmp(da, "pre") && strcmp(da, "cluster") && strcmp(da, "mma"))
            QF_FATAL("QWENFT_DECODE_ATTN=%s: plain, early, inflight, rows, pre, cluster or mma expected", da);
        g_ctx.decode_attn_mlp = da && !strcmp(da, "plain")      ? 0
                                : da && !strcmp(da, "early")    ? 1
                                : da && !strcmp(da, "inflight") ? 2
                                : da && !strcmp(da, "rows")     ? 3
                                : da && !strcmp(da, "pre")      ? 4
                                : da && !strcmp(da, "cluster")  ? 5
                                                                : 6;
        const char *cn = getenv("QWENFT_DECODE_ATTN_CLUSTER_N");
        const int cnv = cn ? atoi(cn) : 4;
        if (cn && (cnv < 1 || cnv > 64))
            QF_FATAL("QWENFT_DECODE_ATTN_CLUSTER_N=%s: the most tokens a call the cluster attention takes, 1 to 64, "
                     "expected", cn);
        g_ctx.decode_attn_cluster_n = cnv;
        const char *cr = getenv("QWENFT_ATTN_CLUSTER_RANKS");
        if (cr && strcmp(cr, "8") && strcmp(cr, "16")) QF_FATAL("QWENFT_ATTN_CLUSTER_RANKS=%s: 8 or 16 expected", cr);
        g_ctx.attn_cluster_ranks = !cr ? 0 : !strcmp(cr, "16") ? 16 : 8;
        const char *gu = getenv("QWENFT_GRAPH_UPDATE");
        if (gu && strcmp(gu, "0") && strcmp(gu, "1")) QF_FATAL("QWENFT_GRAPH_UPDATE=%s: 0 or 1 expected", gu);
        g_ctx.graph_update = !gu || !strcmp(gu, "1");
    }
    CHECK_CUDA(cudaStreamCreateWithFlags(&g_ctx.stream, cudaStreamNonBlocking));
    CHECK_CUDA(cudaDeviceGetDefaultMemPool(&g_ctx.pool, g_ctx.device));
    uint64_t keep = UINT64_MAX; // never hand pool memory back at sync points
    CHECK_CUDA(cudaMemPoolSetAttribute(g_ctx.pool, cudaMemPoolAttrReleaseThreshold, &keep));
    CHECK_CUBLAS(cublasLtCreate(&g_ctx.lt));
    g_ctx.lt_ws_bytes = 32u << 20;
    qfc_device_malloc(&g_ctx.lt_ws, g_ctx.lt_ws_bytes);
    qfc_device_malloc(&g_ctx.small_dev, 4096);
    CHECK_CUDA(cudaMallocHost(&g_ctx.small_host, 4096));
    g_ctx.stage_bytes = 4u << 20;
    for (int i = 0; i < qf_cuda_ctx::STAGE_SLOTS; i++) {
        CHECK_CUDA(cudaMallocHost(&g_ctx.stage[i], g_ctx.stage_bytes));
        CHECK_CUDA(cudaEventCreateWithFlags(&g_ctx.stage_ev[i], cudaEventDisableTiming));
    }
    g_ctx.state = 1;
    first(); // the kernel families' own set-up (cuda_backend.cu), once
    return 1;
}

qf_cuda_ctx &qfc() {
    if (g_ctx.state != 1) QF_FATAL("CUDA backend used before qf_ops_cuda() found a GPU");
    return g_ctx;
}

// ---- graph capture (graph_cuda.cu runs it; the context keeps its state) ----------------------------------------
int qfc_capture_absorb(const char *file, int line, const char *what) {
    if (!g_ctx.capturing) return 0;
    if (!g_ctx.capture_err[0]) snprintf(g_ctx.capture_err, sizeof g_ctx.capture_err, "%s at %s:%d", what, file, line);
    (void)cudaGetLastError();
    return 1;
}
int qfc_capture_spoiled(const char *what) {
    if (!g_ctx.capturing) return 0;
    if (!g_ctx.capture_spoil) g_ctx.capture_spoil = what;
    return 1;
}
// a buffer the context replaces: freed now (cudaFree waits for the kernels still using it), or, during a capture
// (whose nodes may point at it and run only at the launch after it), once the capture's graph has run
static void release(void *p, size_t bytes) {
    if (!p) return;
    if (g_ctx.capturing && g_ctx.nretired < qf_cuda_ctx::RETIRED_MAX) {
        g_ctx.retired[g_ctx.nretired] = p, g_ctx.retired_bytes[g_ctx.nretired++] = bytes;
        return;
    }
    if (g_ctx.capturing) qfc_capture_spoiled("more buffers replaced during a capture than it can keep");
    qfc_device_free(p, bytes);
}
void qfc_retired_free(void) {
    for (int i = 0; i < g_ctx.nretired; i++) qfc_device_free(g_ctx.retired[i], g_ctx.retired_bytes[i]);
    g_ctx.nretired = 0;
}

void *qfc_scratch(size_t bytes) {
    bytes = qf_align_up(bytes ? bytes : 1, 1u << 20);
    if (bytes > g_ctx.scratch_bytes) {
        release(g_ctx.scratch, g_ctx.scratch_bytes);
        g_ctx.scratch = NULL;
        g_ctx.scratch_bytes = 0;
        qfc_device_malloc(&g_ctx.scratch, bytes);
        g_ctx.scratch_bytes = bytes;
        g_ctx.gen++; // graphs captured before hold the old pointer
    }
    return g_ctx.scratch;
}
extern "C" void qf_cuda_scratch_reserve(size_t bytes) {
    if (g_ctx.state == 1) (void)qfc_scratch(bytes);
}

int *qfc_split_counters(size_t n) {
    if (n > g_ctx.split_cnt_n) {
        const size_t m = qf_align_up(n, 1024);
        release(g_ctx.split_cnt, g_ctx.split_cnt_n * sizeof(int));
        g_ctx.gen++;
        g_ctx.split_cnt = NULL;
        g_ctx.split_cnt_n = 0;
        qfc_device_malloc((void **)&g_ctx.split_cnt, m * sizeof(int));
        if (g_ctx.capturing) // zero now, not in the graph: a capture may be thrown away unrun
            CHECK_CUDA(cudaMemset(g_ctx.split_cnt, 0, m * sizeof(int)));
        else
            CHECK_CUDA(cudaMemsetAsync(g_ctx.split_cnt, 0, m * sizeof(int), g_ctx.stream));
        g_ctx.split_cnt_n = m;
    }
    return g_ctx.split_cnt;
}

// ---- public knobs ---------------------------------------------------------------------------------------------
extern "C" void qf_cuda_set_memory_limit(size_t bytes) { g_ctx.limit = bytes; }
extern "C" size_t qf_cuda_peak_bytes(void) { return g_ctx.peak; }
extern "C" size_t qf_cuda_current_bytes(void) { return g_ctx.cur; }
extern "C" void *qf_cuda_stream(void) { return g_ctx.state == 1 ? (void *)g_ctx.stream : NULL; }

// ---- memory ops -------------------------------------------------------------------------------------------------
// Stream-ordered pool (cudaMallocAsync on the compute stream, release threshold "never"): a freed buffer returns to
// the device's pool in stream order and the next request reuses it without a device-wide sync, so the ZeRO engine
// may allocate and free unit buffers every layer. Under memory pressure the pool is trimmed once and retried.
void *cu_alloc(size_t bytes) {
    const size_t n = qf_align_up(bytes ? bytes : 1, 256);
    if (g_ctx.limit && g_ctx.cur + n > g_ctx.limit) return NULL;
    void *p = NULL;
    if (qfc_capture_spoiled("alloc")) { // not into the graph: a plain allocation (the capture is thrown away)
        if (cudaMalloc(&p, n) != cudaSuccess || cudaMemset(p, 0, n) != cudaSuccess) {
            (void)cudaGetLastError();
            return NULL;
        }
        amap_put(p, n, 0);
        account(n, 0);
        return p;
    }
    cudaError_t e = cudaMallocAsync(&p, n, g_ctx.stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); // out of memory is not sticky
        CHECK_CUDA(cudaStreamSynchronize(g_ctx.stream));
        CHECK_CUDA(cudaMemPoolTrimTo(g_ctx.pool, 0));
        e = cudaMallocAsync(&p, n, g_ctx.stream);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fprintf(stderr, "qwen-ft: CUDA backend: cudaMallocAsync of %zu bytes failed with %.2f GiB held: %s\n", n,
                (double)g_ctx.cur / 1073741824.0, cudaGetErrorString(e));
        return NULL;
    }
    CHECK_CUDA(cudaMemsetAsync(p, 0, n, g_ctx.stream));
    amap_put(p, n, 0);
    account(n, 0);
    return p;
}
void *cu_alloc_table(size_t bytes) {
    void *p = cu_alloc(bytes);
    if (p) { // number it: qf_cuda_free_since may take it back
        size_t i = amap_slot(p, g_ctx.amap_cap);
        while (g_ctx.amap[i].p != p) i = (i + 1) & (g_ctx.amap_cap - 1);
        g_ctx.amap[i].seq = ++g_ctx.alloc_seq;
    }
    return p;
}
void *cu_alloc_rescue(size_t bytes, int numbered) {
    const size_t n = qf_align_up(bytes ? bytes : 1, 256);
    void *p = NULL;
    if (cudaMallocManaged(&p, n) != cudaSuccess || cudaMemset(p, 0, n) != cudaSuccess) {
        (void)cudaGetLastError();
        if (p) (void)cudaFree(p);
        return NULL;
    }
    amap_put(p, n, numbered ? ++g_ctx.alloc_seq : 0, 1);
    account(n, 0);
    return p;
}
extern "C" void *qf_cuda_alloc_rescue(size_t bytes) { return g_ctx.state == 1 ? cu_alloc_rescue(bytes, 1) : NULL; }
extern "C" uint64_t qf_cuda_alloc_mark(void) { return g_ctx.alloc_seq; }
extern "C" size_t qf_cuda_free_since(uint64_t mark) {
    if (g_ctx.state != 1 || !g_ctx.amap_cap) return 0;
    CHECK_CUDA(cudaDeviceSynchronize()); // nothing queued still uses them
    size_t n = 0, bytes = 0;
    void **gone = (void **)qf_malloc(g_ctx.amap_used * sizeof(void *) + 1);
    for (size_t i = 0; i < g_ctx.amap_cap; i++)
        if (g_ctx.amap[i].p && g_ctx.amap[i].seq > mark) gone[n++] = g_ctx.amap[i].p;
    for (size_t i = 0; i < n; i++) {
        const size_t b = amap_take(gone[i]);
        CHECK_CUDA(cudaFree(gone[i]));
        account(0, b);
        bytes += b;
    }
    free(gone);
    return bytes;
}
void cu_free(void *p) {
    if (!p) return;
    int managed = 0;
    const size_t n = amap_take(p, &managed);
    if (qfc_capture_spoiled("free")) { // after the capture (release keeps it; qfc_device_free accounts it)
        release(p, n);
        return;
    }
    if (managed) { // cu_alloc_rescue's: the kernels queued before end first (cudaFree waits for the device)
        CHECK_CUDA(cudaFree(p));
        account(0, n);
        return;
    }
    CHECK_CUDA(cudaFreeAsync(p, g_ctx.stream));
    account(0, n);
}
void cu_copy_h2d(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    if (qfc_capture_spoiled("copy_h2d")) { // captured, never run: the body reruns eagerly
        CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_ctx.stream));
        return;
    }
    g_ctx.moved[QF_COPY_H2D] += bytes;
    if (bytes <= g_ctx.stage_bytes) {
        const int s = g_ctx.stage_next;
        g_ctx.stage_next = (s + 1) % qf_cuda_ctx::STAGE_SLOTS;
        CHECK_CUDA(cudaEventSynchronize(g_ctx.stage_ev[s])); // the slot's previous copy is done (usually long ago)
        memcpy(g_ctx.stage[s], src, bytes);
        CHECK_CUDA(cudaMemcpyAsync(dst, g_ctx.stage[s], bytes, cudaMemcpyHostToDevice, g_ctx.stream));
        CHECK_CUDA(cudaEventRecord(g_ctx.stage_ev[s], g_ctx.stream));
        return;
    }
    cudaPointerAttributes at;
    int pinned = 0;
    if (cudaPointerGetAttributes(&at, src) == cudaSuccess) pinned = at.type == cudaMemoryTypeHost;
    else (void)cudaGetLastError();
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_ctx.stream));
    if (pinned) CHECK_CUDA(cudaStreamSynchronize(g_ctx.stream));
}
void cu_copy_d2h(void *dst, const void *src, size_t bytes) {
    if (!bytes || qfc_capture_spoiled("copy_d2h")) return;
    g_ctx.moved[QF_COPY_D2H] += bytes;
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_ctx.stream));
    CHECK_CUDA(cudaStreamSynchronize(g_ctx.stream));
}
void cu_copy_d2d(void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_ctx.stream));
}
void cu_zero(void *p, size_t bytes) {
    if (bytes) CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, g_ctx.stream));
}
void cu_sync(void) {
    if (!qfc_capture_spoiled("sync")) CHECK_CUDA(cudaStreamSynchronize(g_ctx.stream));
}
void cu_copy_bytes(uint64_t bytes[2]) {
    bytes[QF_COPY_H2D] = g_ctx.moved[QF_COPY_H2D];
    bytes[QF_COPY_D2H] = g_ctx.moved[QF_COPY_D2H];
}
