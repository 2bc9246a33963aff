/* comm.c — MPI implementation of comm.h for host (CPU backend) buffers. Large counts are sent in chunks below
 * INT_MAX elements so any model size works with MPI's int counts. */
#include "comm.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "util.h"

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
    if (c->leaders != MPI_COMM_NULL) MPI_Comm_free(&c->leaders);
    if (c->node != MPI_COMM_NULL) MPI_Comm_free(&c->node);
}

static MPI_Datatype act_type(const qf_comm *c) {
    QF_CHECK(c->ops->act_bytes == 4);
    return MPI_FLOAT;
}

void qf_comm_allreduce_act(qf_comm *c, void *buf, size_t n) {
    if (c->world_size == 1) return;
    char *p = buf;
    for (size_t o = 0; o < n; o += QF_MPI_CHUNK) {
        size_t k = n - o < (size_t)QF_MPI_CHUNK ? n - o : (size_t)QF_MPI_CHUNK;
        MPI_Allreduce(MPI_IN_PLACE, p + o * c->ops->act_bytes, (int)k, act_type(c), MPI_SUM, c->world);
    }
}

void qf_comm_reduce_scatter_act(qf_comm *c, const void *send, void *recv, const int64_t *counts,
                                const int64_t *displs) {
    int W = c->world_size;
    size_t eb = c->ops->act_bytes;
    if (W == 1) {
        if (recv != (const char *)send + displs[0] * eb) memcpy(recv, (const char *)send + displs[0] * eb, counts[0] * eb);
        return;
    }
    /* Reduce each rank's block to its owner, in chunks (fixed order: deterministic for a given world size). */
    for (int r = 0; r < W; r++) {
        for (int64_t o = 0; o < counts[r]; o += QF_MPI_CHUNK) {
            int64_t k = counts[r] - o < QF_MPI_CHUNK ? counts[r] - o : QF_MPI_CHUNK;
            const char *s = (const char *)send + (displs[r] + o) * eb;
            char *d = (char *)recv + o * eb;
            MPI_Reduce(s, r == c->rank ? d : NULL, (int)k, act_type(c), MPI_SUM, r, c->world);
        }
    }
}

void qf_comm_allgather_act(qf_comm *c, void *buf, const int64_t *counts, const int64_t *displs) {
    int W = c->world_size;
    if (W == 1) return;
    size_t eb = c->ops->act_bytes;
    for (int r = 0; r < W; r++)
        for (int64_t o = 0; o < counts[r]; o += QF_MPI_CHUNK) {
            int64_t k = counts[r] - o < QF_MPI_CHUNK ? counts[r] - o : QF_MPI_CHUNK;
            MPI_Bcast((char *)buf + (displs[r] + o) * eb, (int)k, act_type(c), r, c->world);
        }
}

double qf_comm_sum_f64(qf_comm *c, double v) {
    double r = v;
    if (c->world_size > 1) MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_SUM, c->world);
    return r;
}
int64_t qf_comm_sum_i64(qf_comm *c, int64_t v) {
    int64_t r = v;
    if (c->world_size > 1) MPI_Allreduce(&v, &r, 1, MPI_INT64_T, MPI_SUM, c->world);
    return r;
}
double qf_comm_max_f64(qf_comm *c, double v) {
    double r = v;
    if (c->world_size > 1) MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_MAX, c->world);
    return r;
}
int qf_comm_any(qf_comm *c, int flag) {
    int r = flag;
    if (c->world_size > 1) MPI_Allreduce(&flag, &r, 1, MPI_INT, MPI_LOR, c->world);
    return r;
}
void qf_comm_bcast(qf_comm *c, void *p, size_t bytes, int root) {
    if (c->world_size > 1) MPI_Bcast(p, (int)bytes, MPI_BYTE, root, c->world);
}
