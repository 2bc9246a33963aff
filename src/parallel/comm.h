/* comm.h — collectives the ZeRO engine and trainer use, independent of where buffers live. The CPU backend runs
 * them with MPI on host memory; the CUDA backend ([cuda]) backs the act-buffer ones with NCCL on its streams.
 * Topology (ranks, nodes, node leaders) is discovered once at start. */
#ifndef QF_COMM_H
#define QF_COMM_H
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include "ops.h"
#include "util.h"

typedef struct qf_comm {
    MPI_Comm world;      /* all ranks (data parallel) */
    MPI_Comm node;       /* ranks of this node (MPI_COMM_TYPE_SHARED, or groups of topology.ranks_per_node) */
    MPI_Comm leaders;    /* node leaders (local rank 0); MPI_COMM_NULL elsewhere */
    int rank, world_size;
    int local_rank, local_size;
    int node_id, n_nodes;
    char hostname[256];
    const qf_ops *ops;
    /* GPU ranks: NCCL communicator over the same ranks, its stream and the backend's compute stream */
    void *nccl, *nccl_stream, *compute_stream;
    /* seconds the calling (trainer) thread spent inside the collectives and waits below, blocked on the other
     * ranks or on the network: the monitor's exposed communication (src/train/monitor.c reads it per step). On
     * GPU ranks the NCCL calls only queue work, so this is what the host waited, not the device. */
    double wait_s;
    /* GPU ranks: seconds the compute stream stood still in the waits for NCCL collectives (qf_comm_wait and the
     * blocking ones): comm_nccl.c records a timed event before each wait and one after, and reads the pairs the
     * stream has passed (qf_comm_gpu_stall_s) */
    double gpu_stall_s;
    void *stall;         /* comm_nccl.c: the pairs not read yet */
} qf_comm;

/* A collective in flight. MPI: a request; NCCL: an event recorded on the NCCL stream after the collective. */
typedef struct qf_comm_req {
    int kind;            /* 0 none, 1 MPI, 2 NCCL */
    MPI_Request mpi;
    void *event;
} qf_comm_req;

/* Splits MPI_COMM_WORLD; ranks_per_node > 0 groups every k consecutive ranks of one machine as a "node"
 * (testing the multi-node paths on one machine). */
void qf_comm_init(qf_comm *c, const qf_ops *ops, int ranks_per_node);
/* The base layer's fatal hook (util.h) for an MPI program: prints "qwen-ft: rank R: file:line: msg" and calls
 * MPI_Abort (exit code 3) while MPI is up. main.c installs it right after MPI_Init. */
void qf_comm_fatal(const char *where_and_msg);
/* work(arg) on rank 0 of MPI_COMM_WORLD (or in a process without MPI); every rank returns its exit code. */
int qf_comm_on_rank0(int (*work)(const void *arg), const void *arg);
void qf_comm_free(qf_comm *c);
/* GPU ranks: bootstraps NCCL over MPI (unique id from rank 0); the act collectives then run on GPU buffers.
 * Returns 0, or an exit code with e filled (NCCL errors are runtime failures, 3). */
int qf_comm_init_nccl(qf_comm *c, qf_err *e);

/* act buffers (backend memory), element counts */
void qf_comm_allreduce_act(qf_comm *c, void *buf, size_t n);
/* every rank's range [displs[r], displs[r]+counts[r]) of buf is sent to all (in place), in pieces of at most
 * bucket elements (allgather_bucket_size; <= 0: no limit) */
void qf_comm_allgather_act(qf_comm *c, void *buf, const int64_t *counts, const int64_t *displs, int64_t bucket);
/* Non-blocking pieces of ZeRO (MPI int counts, per rank, relative to the unit):
 *   all-gather: every rank contributes send[counts[me]] (send NULL: already in place at recv[displs[me]]);
 *   recv[displs[r] ..] receives rank r's piece
 *   reduce-scatter: send holds the whole unit (rank r's piece at displs[r]); recv[counts[me]] gets the sum
 * The request completes with qf_comm_wait (GPU: the compute stream waits for the collective, no host sync). */
void qf_comm_iallgatherv_act(qf_comm *c, const void *send, void *recv, const int *counts, const int *displs,
                             qf_comm_req *r);
void qf_comm_ireduce_scatterv_act(qf_comm *c, const void *send, void *recv, const int *counts, const int *displs,
                                  qf_comm_req *r);
void qf_comm_wait(qf_comm *c, qf_comm_req *r);
int qf_comm_pending(const qf_comm_req *r);
/* gpu_stall_s after reading every pair the compute stream has passed (so far; later ones count at a later call);
 * -1 without NCCL (CPU ranks) */
double qf_comm_gpu_stall_s(qf_comm *c);

/* host scalars */
double qf_comm_sum_f64(qf_comm *c, double v);
int64_t qf_comm_sum_i64(qf_comm *c, int64_t v);
double qf_comm_max_f64(qf_comm *c, double v);
int qf_comm_any(qf_comm *c, int flag);
void qf_comm_bcast(qf_comm *c, void *p, size_t bytes, int root);

#endif
