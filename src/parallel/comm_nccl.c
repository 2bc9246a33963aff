/* comm_nccl.c — comm.h's act collectives on GPU buffers with NCCL (built with the CUDA backend).
 * One communicator over MPI_COMM_WORLD, bootstrapped with an id from rank 0 broadcast over MPI. Collectives run on
 * their own stream: an event on the compute stream orders them after the kernels that produced the data, and
 * qf_comm_wait makes the compute stream wait on an event recorded after them — no host synchronisation. Uneven
 * ZeRO pieces are grouped broadcasts (all-gather) and reductions (reduce-scatter) in one ncclGroup. Each wait is
 * timed on the compute stream (an event before it, one after: the time between is how long the stream stood still
 * for the collective), for the monitor's gpu_stall_s. */
#include "comm.h"
#include "util.h"

#ifdef QWENFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>

void *qf_cuda_stream(void); /* kernels/cuda: the backend's compute stream */

#define CHECK_NCCL(x)                                                                                       \
    do {                                                                                                    \
        ncclResult_t r_ = (x);                                                                              \
        if (r_ != ncclSuccess) qf_fatal_at(__FILE__, __LINE__, "NCCL: %s: %s", #x, ncclGetErrorString(r_)); \
    } while (0)
#define CHECK_CUDART(x)                                                                                          \
    do {                                                                                                         \
        cudaError_t r_ = (x);                                                                                    \
        if (r_ != cudaSuccess) qf_fatal_at(__FILE__, __LINE__, "CUDA: %s: %s", #x, cudaGetErrorString(r_));       \
    } while (0)

static ncclDataType_t act_nccl(const qf_comm *c) {
    switch (c->ops->act_dtype) {
    case QF_DT_F16: return ncclFloat16;
    case QF_DT_BF16: return ncclBfloat16;
    default: return ncclFloat;
    }
}
static ncclComm_t NC(const qf_comm *c) { return (ncclComm_t)c->nccl; }
static cudaStream_t CS(const qf_comm *c) { return (cudaStream_t)c->nccl_stream; }
static cudaStream_t KS(const qf_comm *c) { return (cudaStream_t)c->compute_stream; }

/* the timed pairs of waits not read yet: a ring, events created on first use and reused */
enum { STALL_PAIRS = 4096 };
typedef struct {
    cudaEvent_t a[STALL_PAIRS], b[STALL_PAIRS]; /* before and after the wait, on the compute stream */
    int head, n;
} stall_ring;

/* reads the oldest pairs the stream has passed into c->gpu_stall_s; block: the oldest one at least */
static void stall_read(qf_comm *c, int block) {
    stall_ring *s = c->stall;
    while (s->n > 0) {
        int i = s->head;
        if (block) {
            CHECK_CUDART(cudaEventSynchronize(s->b[i]));
            block = 0;
        } else {
            cudaError_t q = cudaEventQuery(s->b[i]);
            if (q == cudaErrorNotReady) break;
            CHECK_CUDART(q);
        }
        float ms = 0;
        CHECK_CUDART(cudaEventElapsedTime(&ms, s->a[i], s->b[i]));
        c->gpu_stall_s += ms * 1e-3;
        s->head = (i + 1) % STALL_PAIRS;
        s->n--;
    }
}

void qf_nccl_stall_collect(qf_comm *c) { stall_read(c, 0); }

int qf_comm_init_nccl(qf_comm *c, qf_err *e) {
    ncclUniqueId id;
    if (c->rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, c->world);
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, c->world_size, id, c->rank);
    int bad = r != ncclSuccess, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_LOR, c->world);
    if (any)
        return qf_err_set(e, QF_EXIT_RUNTIME, "rank %d: NCCL communicator: %s", c->rank,
                          bad ? ncclGetErrorString(r) : "failed on another rank");
    cudaStream_t s;
    CHECK_CUDART(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    c->nccl = comm;
    c->nccl_stream = s;
    c->compute_stream = qf_cuda_stream();
    c->stall = calloc(1, sizeof(stall_ring));
    if (!c->stall) QF_FATAL("out of memory");
    return 0;
}

void qf_nccl_free(qf_comm *c) {
    stall_ring *s = c->stall;
    for (int i = 0; s && i < STALL_PAIRS; i++) { /* created on first use, in order */
        if (!s->a[i]) break;
        cudaEventDestroy(s->a[i]);
        cudaEventDestroy(s->b[i]);
    }
    free(s);
    c->stall = NULL;
    ncclCommDestroy(NC(c));
    cudaStreamDestroy(CS(c));
    c->nccl = NULL;
}

/* the NCCL stream waits for everything queued on the compute stream so far */
static void after_compute(qf_comm *c) {
    cudaEvent_t ev;
    CHECK_CUDART(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CHECK_CUDART(cudaEventRecord(ev, KS(c)));
    CHECK_CUDART(cudaStreamWaitEvent(CS(c), ev, 0));
    CHECK_CUDART(cudaEventDestroy(ev));
}
static void finish(qf_comm *c, qf_comm_req *r) {
    cudaEvent_t ev;
    CHECK_CUDART(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CHECK_CUDART(cudaEventRecord(ev, CS(c)));
    r->kind = 2;
    r->event = ev;
}

void qf_nccl_wait(qf_comm *c, qf_comm_req *r) {
    cudaEvent_t ev = (cudaEvent_t)r->event;
    stall_ring *s = c->stall;
    if (s->n == STALL_PAIRS) stall_read(c, 1); /* full: the oldest pair, long passed, makes room */
    int i = (s->head + s->n) % STALL_PAIRS;
    if (!s->a[i]) { /* timing events (no cudaEventDisableTiming) */
        CHECK_CUDART(cudaEventCreate(&s->a[i]));
        CHECK_CUDART(cudaEventCreate(&s->b[i]));
    }
    CHECK_CUDART(cudaEventRecord(s->a[i], KS(c)));
    CHECK_CUDART(cudaStreamWaitEvent(KS(c), ev, 0));
    CHECK_CUDART(cudaEventRecord(s->b[i], KS(c)));
    s->n++;
    CHECK_CUDART(cudaEventDestroy(ev));
    r->event = NULL;
}

void qf_nccl_allreduce_act(qf_comm *c, void *buf, size_t n) {
    qf_comm_req r;
    after_compute(c);
    CHECK_NCCL(ncclAllReduce(buf, buf, n, act_nccl(c), ncclSum, NC(c), CS(c)));
    finish(c, &r);
    qf_nccl_wait(c, &r);
}

void qf_nccl_allgather_act(qf_comm *c, void *buf, const int64_t *counts, const int64_t *displs, int64_t bucket) {
    qf_comm_req r;
    size_t eb = c->ops->act_bytes;
    after_compute(c);
    for (int k = 0; k < c->world_size; k++)
        for (int64_t o = 0; o < counts[k]; o += bucket) { /* one group per bucket: bounded message sizes */
            int64_t n = counts[k] - o < bucket ? counts[k] - o : bucket;
            char *p = (char *)buf + (size_t)(displs[k] + o) * eb;
            CHECK_NCCL(ncclBroadcast(p, p, (size_t)n, act_nccl(c), k, NC(c), CS(c)));
        }
    finish(c, &r);
    qf_nccl_wait(c, &r);
}

/* comm.c's qf_comm_iallgatherv_act (reduce 0) and qf_comm_ireduce_scatterv_act (reduce 1): one ncclGroup over the
 * unit's per-rank pieces [displs[k], displs[k] + counts[k]), rank k the root of piece k. All-gather: rank k
 * broadcasts its piece (from send, or in place at recv when send is NULL) into everyone's recv. Reduce-scatter:
 * every rank's piece k of send is summed into rank k's recv. */
void qf_nccl_pieces_act(qf_comm *c, const void *send, void *recv, const int *counts, const int *displs, int reduce,
                        qf_comm_req *r) {
    size_t eb = c->ops->act_bytes;
    after_compute(c);
    CHECK_NCCL(ncclGroupStart());
    for (int k = 0; k < c->world_size; k++) {
        if (!counts[k]) continue;
        if (reduce) {
            const char *src = (const char *)send + (size_t)displs[k] * eb;
            CHECK_NCCL(ncclReduce(src, k == c->rank ? recv : (void *)src, (size_t)counts[k], act_nccl(c), ncclSum,
                                  k, NC(c), CS(c)));
        } else {
            char *dst = (char *)recv + (size_t)displs[k] * eb;
            const void *src = k == c->rank && send ? send : dst; /* send NULL: in place */
            CHECK_NCCL(ncclBroadcast(src, dst, (size_t)counts[k], act_nccl(c), k, NC(c), CS(c)));
        }
    }
    CHECK_NCCL(ncclGroupEnd());
    finish(c, r);
}

#else
int qf_comm_init_nccl(qf_comm *c, qf_err *e) {
    (void)c;
    return qf_err_set(e, QF_EXIT_RUNTIME, "this qwen-ft was built without CUDA/NCCL");
}
#endif
