/* kernel_trace.c — every kernel and copy a CUDA program runs, with its GPU start and end: a CUPTI activity tracer
 * that the CUDA driver loads into any process through CUDA_INJECTION64_PATH (the GPU machine has no nsys), so that
 * the timeline of `qwen-ft generate`, `serve` or `train` can be read without changing the program:
 *
 *   CUDA_INJECTION64_PATH=build-cuda/libqf_kernel_trace.so QF_TRACE_OUT=trace.csv qwen-ft generate ...
 *   python3 bench/trace_summary.py trace.csv [--step-kernel NAME] ...
 *
 * One CSV line per activity: kind (K kernel, C copy, S memset), start and end in ns (the GPU's clock), stream,
 * graph node id (0 outside a CUDA graph), grid and block size, and the kernel's mangled name (copies: bytes and
 * direction). Kernels are traced as concurrent-kernel activities, which keeps concurrent and programmatically
 * dependent kernels overlapping as they run (the serialising kernel mode would not). The records are written as
 * CUPTI hands back its buffers and at exit (a flush). Built (libqf_kernel_trace.so) where the CUDA toolkit
 * has CUPTI (CMake's CUDA::cupti); bench/, not part of qwen-ft itself.
 *
 * The callbacks CUPTI calls carry no user pointer, so the output file (and its lock: CUPTI may hand buffers back
 * from its own thread) is this library's one piece of state. */
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define KT_BUF_BYTES ((size_t)8 << 20)

static FILE *kt_out; /* the CSV (QF_TRACE_OUT, default kernel_trace.csv); set once in InitializeInjection */
static pthread_mutex_t kt_lock = PTHREAD_MUTEX_INITIALIZER; /* kt_out's writers */

#define KT_CHECK(call)                                                                                               \
    do {                                                                                                             \
        CUptiResult kt_rc = (call);                                                                                  \
        if (kt_rc != CUPTI_SUCCESS) {                                                                                \
            const char *kt_msg = "?";                                                                                \
            cuptiGetResultString(kt_rc, &kt_msg);                                                                    \
            fprintf(stderr, "kernel_trace: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, kt_msg);                     \
            return 0;                                                                                                \
        }                                                                                                            \
    } while (0)

static void CUPTIAPI kt_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, KT_BUF_BYTES);
    *size = *buffer ? KT_BUF_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

static const char *kt_copy_kind(uint8_t k) {
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    default: return "other";
    }
}

static void CUPTIAPI kt_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&kt_lock);
    while (kt_out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            fprintf(kt_out, "K,%llu,%llu,%u,%llu,%d,%d,%s\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->streamId, (unsigned long long)k->graphNodeId,
                    k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ, k->name ? k->name : "?");
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *c = (const CUpti_ActivityMemcpy6 *)rec;
            fprintf(kt_out, "C,%llu,%llu,%u,%llu,0,0,copy %s %llu bytes\n", (unsigned long long)c->start,
                    (unsigned long long)c->end, c->streamId, (unsigned long long)c->graphNodeId,
                    kt_copy_kind(c->copyKind), (unsigned long long)c->bytes);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *s = (const CUpti_ActivityMemset4 *)rec;
            fprintf(kt_out, "S,%llu,%llu,%u,%llu,0,0,memset %llu bytes\n", (unsigned long long)s->start,
                    (unsigned long long)s->end, s->streamId, (unsigned long long)s->graphNodeId,
                    (unsigned long long)s->bytes);
        }
    }
    pthread_mutex_unlock(&kt_lock);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
        fprintf(stderr, "kernel_trace: %zu records dropped\n", dropped);
    free(buffer);
}

static void kt_at_exit(void) {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&kt_lock);
    if (kt_out) fclose(kt_out), kt_out = NULL;
    pthread_mutex_unlock(&kt_lock);
}

/* called by the CUDA driver when it loads this library (CUDA_INJECTION64_PATH); nonzero: loaded */
int InitializeInjection(void);
int InitializeInjection(void) {
    const char *path = getenv("QF_TRACE_OUT");
    if (!path || !*path) path = "kernel_trace.csv";
    kt_out = fopen(path, "w");
    if (!kt_out) {
        fprintf(stderr, "kernel_trace: cannot write %s\n", path);
        return 0;
    }
    fprintf(kt_out, "kind,start_ns,end_ns,stream,graph_node,grid,block,name\n");
    KT_CHECK(cuptiActivityRegisterCallbacks(kt_buffer_requested, kt_buffer_completed));
    KT_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    KT_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
    KT_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
    /* the buffers handed back every 500 ms too, not only when full or at exit: a run that ends without exit()'s
     * handlers (a signal, _exit) keeps what was traced up to then */
    KT_CHECK(cuptiActivityFlushPeriod(500));
    atexit(kt_at_exit);
    fprintf(stderr, "kernel_trace: tracing kernels and copies into %s\n", path);
    return 1;
}
