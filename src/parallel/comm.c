/* comm.c — MPI implementation of comm.h for host (CPU backend) buffers. Large counts are sent in chunks below
 * INT_MAX elements so any model size works with MPI's int counts. */
#include "comm.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 1 between MPI_Init and MPI_Finalize: MPI calls are allowed */
static int comm_mpi_live(void) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    return up && !down;
}

void qf_comm_fatal(const char *where_and_msg) {
    int rank = 0;
    if (!comm_mpi_live()) return; /* qf_fatal_at prints and exits */
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "qwen-ft: rank %d: %s\n", rank, where_and_msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, QF_EXIT_RUNTIME);
}

int qf_comm_on_rank0(int (*work)(const void *arg), const void *arg) {
    int live = comm_mpi_live(), rank = 0;
    if (live) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int rc = rank == 0 ? work(arg) : 0;
    fflush(stdout);
    fflush(stderr);
    if (live) MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return rc;
}
#include "util.h"

#ifdef QWENFT_HAVE_CUDA
/* comm_nccl.c: the same collectives on GPU buffers */
void qf_nccl_allreduce_act(qf_comm *c, void *buf, size_t n);
void qf_nccl_allgather_act(qf_comm *c, void *buf, const int64_t *counts, const int64_t *displs, int64_t bucket);
/* reduce 0: qf_comm_iallgatherv_act, 1: qf_comm_ireduce_scatterv_act */
void qf_nccl_pieces_act(qf_comm *c, const void *send, void *recv, const int *counts, const int *displs, int reduce,
                        qf_comm_req *r);
void qf_nccl_wait(qf_comm *c, qf_comm_req *r);
void qf_nccl_stall_collect(qf_comm *c);
void qf_nccl_free(qf_comm *c);
#define NCCL_ON(c) ((c)->nccl != NULL)
#else
#define NCCL_ON(c) 0
#endif

#define QF_MPI_CHUNK ((int64_t)1 << 30)

void qf_comm_init(qf_comm *c, const qf_ops *ops, int ranks_per_node) {
    memset(c, 0, sizeof *c);
    c->ops = ops;
    c->world = MPI_COMM_WORLD;
    MPI_Comm_rank(c->world, &c->rank);
    MPI_Comm_size(c->world, &c->world_size);
    gethostname(c->hostname, sizeof c->hostname - 1);
    MPI_Comm shared;
    MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &shared);
    if (ranks_per_node > 0) {
        int lr;
        MPI_Comm_rank(shared, &lr);
        MPI_Comm_split(shared, lr / ranks_per_node, c->rank, &c->node);
        MPI_Comm_free(&shared);
    } else {
        c->node = shared;
    }
    MPI_Comm_rank(c->node, &c->local_rank);
    MPI_Comm_size(c->node, &c->local_size);
    MPI_Comm_split(c->world, c->local_rank == 0 ? 0 : MPI_UNDEFINED, c->rank, &c->leaders);
    int leader = c->local_rank == 0, n = 0;
    MPI_Allreduce(&leader, &n, 1, MPI_INT, MPI_SUM, c->world);
    c->n_nodes = n;
    int id = 0;
    if (c->leaders != MPI_COMM_NULL) MPI_Comm_rank(c->leaders, &id);
    MPI_Bcast(&id, 1, MPI_INT, 0, c->node);
    c->node_id = id;
}

void qf_comm_free(qf_comm *c) {
#ifdef QWENFT_HAVE_CUDA
    if (c->nccl) qf_nccl_free(c);
#endif
    if (c->leaders != MPI_COMM_NULL) MPI_Comm_free(&c->leaders);
    if (c->node != MPI_COMM_NULL) MPI_Comm_free(&c->node);
}

static MPI_Datatype act_type(const qf_comm *c) {
    QF_CHECK(c->ops->act_bytes == 4);
    return MPI_FLOAT;
}

/* the two non-blocking ZeRO collectives: all-gather (reduce 0) or reduce-scatter (reduce 1) of a unit's pieces */
static void comm_pieces_act(qf_comm *c, const void *send, void *recv, const int *counts, const int *displs,
                            int reduce, qf_comm_req *r) {
#ifdef QWENFT_HAVE_CUDA
    if (NCCL_ON(c)) {
        qf_nccl_pieces_act(c, send, recv, counts, displs, reduce, r);
        return;
    }
#endif
    r->kind = 1;
    if (reduce) /* MPI_Ireduce_scatter takes the pieces in rank order, which is how units are cut (displs ascending) */
        MPI_Ireduce_scatter(send, recv, counts, act_type(c), MPI_SUM, c->world, &r->mpi);
    else
        MPI_Iallgatherv(send ? send : MPI_IN_PLACE, counts[c->rank], act_type(c), recv, counts, displs, act_type(c),
                        c->world, &r->mpi);
}

void qf_comm_iallgatherv_act(qf_comm *c, const void *send, void *recv, const int *counts, const int *displs,
                             qf_comm_req *r) {
    comm_pieces_act(c, send, recv, counts, displs, 0, r);
}

void qf_comm_ireduce_scatterv_act(qf_comm *c, const void *send, void *recv, const int *counts, const int *displs,
                                  qf_comm_req *r) {
    comm_pieces_act(c, send, recv, counts, displs, 1, r);
}

void qf_comm_wait(qf_comm *c, qf_comm_req *r) {
    double t0 = qf_now();
    if (r->kind == 1) MPI_Wait(&r->mpi, MPI_STATUS_IGNORE);
#ifdef QWENFT_HAVE_CUDA
    else if (r->kind == 2) qf_nccl_wait(c, r);
#endif
    r->kind = 0;
    c->wait_s += qf_now() - t0;
}

int qf_comm_pending(const qf_comm_req *r) { return r->kind != 0; }

double qf_comm_gpu_stall_s(qf_comm *c) {
#ifdef QWENFT_HAVE_CUDA
    if (NCCL_ON(c)) {
        qf_nccl_stall_collect(c);
        return c->gpu_stall_s;
    }
#endif
    (void)c;
    return -1;
}

void qf_comm_allreduce_act(qf_comm *c, void *buf, size_t n) {
    if (c->world_size == 1) return;
    double t0 = qf_now();
#ifdef QWENFT_HAVE_CUDA
    if (NCCL_ON(c)) {
        qf_nccl_allreduce_act(c, buf, n);
        c->wait_s += qf_now() - t0;
        return;
    }
#endif
    char *p = buf;
    for (size_t o = 0; o < n; o += QF_MPI_CHUNK) {
        size_t k = n - o < (size_t)QF_MPI_CHUNK ? n - o : (size_t)QF_MPI_CHUNK;
        MPI_Allreduce(MPI_IN_PLACE, p + o * c->ops->act_bytes, (int)k, act_type(c), MPI_SUM, c->world);
    }
    c->wait_s += qf_now() - t0;
}

void qf_comm_allgather_act(qf_comm *c, void *buf, const int64_t *counts, const int64_t *displs, int64_t bucket) {
    int W = c->world_size;
    if (W == 1) return;
    if (bucket <= 0 || bucket > QF_MPI_CHUNK) bucket = QF_MPI_CHUNK;
    double t0 = qf_now();
#ifdef QWENFT_HAVE_CUDA
    if (NCCL_ON(c)) {
        qf_nccl_allgather_act(c, buf, counts, displs, bucket);
        c->wait_s += qf_now() - t0;
        return;
    }
#endif
    size_t eb = c->ops->act_bytes;
    for (int r = 0; r < W; r++)
        for (int64_t o = 0; o < counts[r]; o += bucket) {
            int64_t k = counts[r] - o < bucket ? counts[r] - o : bucket;
            MPI_Bcast((char *)buf + (displs[r] + o) * eb, (int)k, act_type(c), r, c->world);
        }
    c->wait_s += qf_now() - t0;
}

/* one value reduced over all ranks, in place (nothing to do on one rank) */
static void comm_allreduce1(qf_comm *c, void *v, MPI_Datatype type, MPI_Op op) {
    if (c->world_size == 1) return;
    double t0 = qf_now();
    MPI_Allreduce(MPI_IN_PLACE, v, 1, type, op, c->world);
    c->wait_s += qf_now() - t0;
}
double qf_comm_sum_f64(qf_comm *c, double v) {
    comm_allreduce1(c, &v, MPI_DOUBLE, MPI_SUM);
    return v;
}
int64_t qf_comm_sum_i64(qf_comm *c, int64_t v) {
    comm_allreduce1(c, &v, MPI_INT64_T, MPI_SUM);
    return v;
}
double qf_comm_max_f64(qf_comm *c, double v) {
    comm_allreduce1(c, &v, MPI_DOUBLE, MPI_MAX);
    return v;
}
int qf_comm_any(qf_comm *c, int flag) {
    comm_allreduce1(c, &flag, MPI_INT, MPI_LOR);
    return flag;
}
void qf_comm_bcast(qf_comm *c, void *p, size_t bytes, int root) {
    if (c->world_size == 1) return;
    double t0 = qf_now();
    MPI_Bcast(p, (int)bytes, MPI_BYTE, root, c->world);
    c->wait_s += qf_now() - t0;
}
