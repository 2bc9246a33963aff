/* zero.h — the ZeRO engine (DeepSpeed semantics) over the model's flat parameter space.
 *
 * The flat space [0, n_params) is partitioned into world_size contiguous shards of any sizes (rank r owns
 * [r*n/W, (r+1)*n/W)); units (model.h) are the pieces that move.
 *   stage 0: full parameters, full gradients (all-reduced), full fp32 master + Adam moments on every rank
 *   stage 1: + master and moments sharded; updated parameter shards all-gathered
 *   stage 2: + gradients sharded: each unit's gradients are reduce-scattered as soon as its backward is done
 *            (non-blocking with overlap_comm) into this rank's shard, then the unit buffer is freed
 *   stage 3: + parameters sharded: a unit is all-gathered just before use (prefetching the next ones while
 *            fewer than stage3_prefetch_bucket_size elements are in flight, within stage3_max_live_parameters),
 *            freed after; units smaller than stage3_param_persistence_threshold stay gathered. Training with the
 *            master weights on the device keeps no bf16 shard: each rank's piece of a unit is rounded from its fp32
 *            master straight into the gather buffer (the same values, 2 bytes per parameter less).
 * offload_optimizer = cpu: master and moments live in host memory and AdamW runs there (SIMD, on host threads);
 *   the gradients stay on the device (stages 2-3: this rank's shard) and stream down chunk by chunk at the update,
 *   double-buffered through page-locked buffers so the copies overlap the host AdamW; the updated parameters go
 *   back up the same way (or, with offload_param, straight into the node's host copy).
 * offload_param = cpu (stage 3): ONE copy of the parameters per node in MPI-3 shared memory
 *   (MPI_Win_allocate_shared); units are copied from it on use; after the update every rank writes its shard
 *   into the node copy and the node leaders exchange the shards of other nodes.
 * Per optimizer step the trainer calls: qf_zero_zero_grads -> micro-batches (qf_model_step; the engine's hooks
 * serve parameters and take gradients) -> qf_zero_reduce -> qf_zero_grad_norm -> qf_zero_update. */
#ifndef QF_ZERO_H
#define QF_ZERO_H
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include "parallel/comm.h"
#include "deck/deck.h"
#include "model/model.h"

/* offload streams the optimizer range through staging buffers of this many elements */
#define QF_ZERO_OFFLOAD_CHUNK ((int64_t)1 << 24)

#define QF_ZERO_POOL 8 /* transient unit buffers kept for reuse */

typedef struct qf_zero_pending { /* a non-blocking reduce-scatter of one unit's gradients */
    qf_comm_req req;
    void *send, *recv;
    int64_t lo, n;  /* flat range received by this rank */
    int64_t n_send; /* elements of the unit sent */
    int unit;
} qf_zero_pending;

/* offload_optimizer.gradients = host (zero_hgrad.c): the reduced gradient shard lives in host memory. Each unit's
 * reduced piece leaves the device as its reduce-scatter completes (copy engine). The first contribution of a step
 * is copied straight to its place; later ones (accumulation, a unit handed back twice) go down in slots of a pinned
 * staging ring, and a host thread of their own adds each slot into the shard as it lands (qf_cpu_act_add on the
 * offload's team), so that neither the trainer's thread nor the GPU's queue waits for the host's adds: only a
 * piece arriving while QF_ZHG_INFLIGHT received pieces (their device buffers, back to the pool once downloaded
 * and added) are still in flight waits, for the oldest. The ring holds two of the rank's largest pieces (at most
 * QF_ZHG_RING_MAX slots: a larger piece waits for slots to come free as it goes down). The host shard is the
 * offload step's hbuf (no second copy): its own buffer without offload_param; the node copy's range with
 * offload_param and one micro-batch per step (a unit's parameters are not read again in the step once every rank
 * has reduced it; a skipped step rounds them back from the master); a buffer of its own with offload_param and
 * accumulation. */
#define QF_ZHG_INFLIGHT 2
#define QF_ZHG_RING_MAX 64
enum { QF_ZHG_PSQ_NONE, QF_ZHG_PSQ_HOST, QF_ZHG_PSQ_DEV }; /* summed at the norm; psq[u]; psq_dev[u] */
typedef struct qf_zhg_slot {            /* one staging download, added by the accumulation thread */
    char *dst;                          /* host act [n]: its place in g */
    int64_t n;
    int ticket;
} qf_zhg_slot;
typedef struct qf_zero_hgrad {
    void *g;                            /* host act [shard] */
    int own, alias_node;                /* g allocated here; g is the node copy's range */
    int pinned_g, pinned_stage;         /* page-locked here (pin_memory) */
    unsigned char *filled;              /* [nunits] the unit's piece holds this step's gradients */
    double *psq;                        /* [nunits] the piece's sum of squares (host), when psq_ok says so */
    unsigned char *psq_ok;              /* [nunits] QF_ZHG_PSQ_*: where the piece's final sum of squares is */
    double *psq_dev;                    /* backend [nunits] 16-bit types: each piece's sum, queued before its download */
    int ticket[QF_ZHG_INFLIGHT];        /* first contributions' downloads in flight, oldest first */
    void *dbuf[QF_ZHG_INFLIGHT];
    int64_t dn[QF_ZHG_INFLIGHT];
    int nq;
    void *stage;                        /* pinned host act [nslots][stage_n]: the staging ring */
    int64_t stage_n;
    int nslots;
    qf_zhg_slot *slot;                  /* [nslots] download j in slot j % nslots */
    int64_t issued, finished;           /* downloads queued; those added whose tickets are finished (trainer) */
    struct {                            /* accumulating pieces in flight, oldest first (their device buffers) */
        void *recv;                     /* backend act [n] */
        int64_t n, end;                 /* elements; the download number after its last */
    } acc[QF_ZHG_INFLIGHT];
    int nacc;
    pthread_t th;                       /* the accumulation thread (started by qf_zhg_init) */
    pthread_mutex_t mu;
    pthread_cond_t work, done;          /* a download queued; a slot added */
    int64_t added;                      /* downloads added (under mu) */
    int stop, started;
    double wait_s;                      /* the trainer's waits for the accumulation thread (metrics host_grad_wait_s) */
} qf_zero_hgrad;

/* offload_optimizer: the step's host AdamW (src/zero/zero_offload.c). The gradients of the optimizer range come down
 * into hbuf (host act [opt range]) on the copy engine, a host thread runs the fused AdamW over them chunk by chunk
 * in the order the next forward needs the units and rounds the updated parameters into hbuf in place, publishing
 * its progress; with `overlap` the trainer goes on meanwhile and every unit waits only for its own parameters. */
#define QF_ZOFF_MAX_CHUNKS 40
typedef struct qf_zero_offload {
    void *hbuf;                         /* host act [opt range]: the node copy's range (offload_param) or own, pinned */
    int own_hbuf;                       /* hbuf was allocated here (not the node copy) */
    int overlap;                        /* the step overlaps the next forward (else it completes inside update) */
    int threads;                        /* host AdamW threads */
    int kept_core;                      /* a core of the rank's share is kept for the trainer's thread */
    int64_t chunk;                      /* elements per gradient download / progress step */
    int nchunks, reaped, running;
    int ticket[QF_ZOFF_MAX_CHUNKS];
    _Atomic int64_t *prog;              /* this rank's progress: version*(n+1) + flat index updated so far */
    _Atomic int64_t *node_prog;         /* offload_param: [local_size] every node rank's progress (shared window) */
    MPI_Win prog_win;
    int64_t *uver;                      /* [nunits] no offload_param: version of the unit's device parameters */
    int *node_world;                    /* offload_param: [local_size] world rank of each node rank */
    int64_t version;                    /* steps started by this process (0: none) */
    double lr;                          /* the step in flight */
    float gscale;
    const void *gsrc;                   /* host gradients of the step (NULL: downloaded into hbuf) */
    double adam_s, wait_s;              /* breakdown: the host AdamW thread's time; the trainer's waits for it */
    pthread_t th;                       /* the host AdamW thread of the step in flight */
} qf_zero_offload;

typedef struct qf_zero {
    qf_model *m;
    qf_comm *comm;
    const qf_deck *d;
    const qf_ops *ops;
    int stage, offload_opt, offload_param, with_opt;
    int64_t n;                          /* parameters */
    int64_t *shard_count, *shard_displ; /* [world] partition of the flat space */
    int64_t shard_begin, shard_end;     /* this rank's shard */
    int64_t opt_begin, opt_end;         /* range whose optimizer state this rank keeps (stage 0: all) */

    /* parameters */
    void *pfull;                        /* stages 0-2: act [n] */
    void *pshard;                       /* stage 3 without param offload, unless pfrom_master: act [shard] */
    int pfrom_master;                   /* stage 3 training, master on the device: pieces rounded from master */
    MPI_Win pwin;                       /* offload_param: node-shared act [n] (host) */
    void *pnode;
    int *leader_of;                     /* [world] index in comm->leaders of each rank's node leader */
    int **ucount, **udispl;             /* [nunits][world] each rank's piece of each unit (MPI counts) */
    void **ucache;                      /* stage 3: gathered unit buffers [nunits] */
    qf_comm_req *ureq;                  /* [nunits] pending prefetch */
    int *uticket;                       /* [nunits] offload_param: pending host->device copy ticket, or -1 */
    int *upersist;                      /* [nunits] kept gathered */
    int64_t live;                       /* gathered elements (non-persistent) */
    int64_t gathers, prefetches;        /* counters (tests, wall_clock_breakdown) */

    /* gradients */
    void *gfull;                        /* stages 0-1: act [n] */
    void *gshard;                       /* stages 2-3: act [shard], accumulated over micro-batches */
    void **gunit;                       /* stages 2-3: [nunits] per-unit gradient buffers during the backward */
    qf_zero_pending *pend;
    int npend;
    void *pool[QF_ZERO_POOL];           /* transient unit buffers waiting for reuse */
    size_t pool_bytes[QF_ZERO_POOL];
    int npool;

    /* optimizer (fp32): [opt_begin, opt_dev_end) on the backend, [opt_dev_end, opt_end) on the host. Without
     * offload_optimizer all of it is on the backend; with it, offload_optimizer.ratio of it (from the end) is on
     * the host (ratio 1: all; DeepSpeed's ZeRO-Offload++ ratio) */
    int64_t opt_dev_end;
    float *master, *adam_m, *adam_v;    /* backend [opt_dev_end - opt_begin] */
    float *hmaster, *hadam_m, *hadam_v; /* host [opt_end - opt_dev_end] */
    qf_zero_offload off;                /* offload_optimizer: the host step */
    void *pstage;                       /* offload_param without offload_optimizer: device act chunk */
    int64_t adam_t;
    int64_t peak_state_bytes;           /* high-water mark of the state this rank holds (params+grads+optimizer) */
    int64_t cur_state_bytes;
    int64_t sharded_state_bytes;
    void *pinned[2];                    /* host buffers page-locked for pin_memory (GPU ranks): hbuf, pnode */
    int pin_warned;
    int grads_stale;                    /* the gradient buffer is zeroed at its first use in the step (grads_ready) */
    int hgrads;                         /* the gradient shard lives on the host (offload_optimizer.gradients) */
    qf_zero_hgrad hg;
    /* the AdamW on the backend (no offload_optimizer) overlapped with the next forward (ops.h side stream): each
     * unit's update is a mark; the forward's first use of unit u waits for umark[u], everything else that touches
     * the parameters, the optimizer state or the gradients waits for the last (zi_side_join) */
    int side;                           /* the overlap is on (QWENFT_UPDATE_OVERLAP, the layout: zero.c init_options) */
    const char *side_off_why;           /* why not (the run header), or NULL */
    int side_pending;                   /* an update's marks may still be unwaited */
    int side_last;                      /* the last unit's mark */
    int *umark;                         /* [nunits] unit u's mark, or -1 once waited */
    const char *oom_hint;               /* appended to a later out-of-memory error (the run's next layout plan), or NULL */
    uint64_t param_version;             /* the model's hook param_version: bumped by every entry point that may change
                                         * parameter values (qf_zero_param_version) */
} qf_zero;

/* The host AdamW's team of a rank (offload_optimizer = cpu; also the planner's calibration): OMP_NUM_THREADS when
 * set, else the rank's share of the cores it may run on (all of them when a launcher bound the rank to its own;
 * otherwise the node's cores over local_size ranks). A GPU rank with a share of 8 cores or more keeps one of them
 * for the trainer's thread, which queues the overlapped next forward's kernels and copies while the team runs
 * (docs/zero.md; bench/host_threads.sh: Qwen2.5-7B on an H100 with 16 cores, 15 threads gave 1.05x the tokens/s of
 * 16, on two layouts). *kept (may be NULL): 1 where a core was kept so. */
int qf_zero_host_threads(int local_size, int gpu, int *kept);
/* The rule of qf_zero_host_threads without OMP_NUM_THREADS, for a rank that may run on `cores` of the node's `online`
 * cores. */
int qf_zero_team_size(int cores, long online, int local_size, int gpu, int *kept);
/* with_optimizer = 0 (eval): parameters only, no gradients, master or moments */
int qf_zero_init(qf_zero *z, qf_model *m, qf_comm *c, const qf_deck *d, int with_optimizer, qf_err *e);
void qf_zero_free(qf_zero *z);

/* Parameters from host fp32 values of the flat range [b, e), a piece of qf_zero_load_range's range (call it
 * piece by piece to bound host memory); also sets the master weights inside it. Then, on every rank,
 * qf_zero_params_commit (collective: the node exchange of parameter offload). */
void qf_zero_set_params(qf_zero *z, int64_t b, int64_t e, const float *host);
void qf_zero_params_commit(qf_zero *z);
/* pieces of this many elements bound the host buffers of loading and checkpointing (256 MiB of fp32) */
#define QF_ZERO_IO_CHUNK ((int64_t)1 << 26)
/* The flat range this rank must be given by qf_zero_set_params: all of it, or its shard at stage 3. */
void qf_zero_load_range(const qf_zero *z, int64_t *b, int64_t *e);
/* fp32 host copy of the parameters [b, e), which must lie inside what this rank holds (its shard always does). */
void qf_zero_get_params(qf_zero *z, int64_t b, int64_t e, float *host);

void qf_zero_zero_grads(qf_zero *z);
/* a skipped (non-finite) step, on every rank: what held gradients in place of parameters gets its parameters back
 * (collective on the node with parameter offload) */
void qf_zero_discard_grads(qf_zero *z);
/* completes the gradient reduction of the step (all-reduce at stages 0-1; pending reduce-scatters at 2-3) */
void qf_zero_reduce(qf_zero *z);
/* global L2 norm of the reduced gradients, times unscale */
double qf_zero_grad_norm(qf_zero *z, double unscale);
/* AdamW on this rank's optimizer range with gradients times gscale and learning rate lr; parameters refreshed
 * everywhere (all-gather / node exchange) */
void qf_zero_update(qf_zero *z, double lr, float gscale);

/* fp32 host copy of optimizer state `which` (0 master, 1 adam_m, 2 adam_v) for flat elements [lo, lo+n) of the
 * optimizer range, wherever they live; qf_zero_opt_set writes them. (Checkpoints.) */
void qf_zero_opt_get(qf_zero *z, int which, int64_t lo, int64_t n, float *out);
void qf_zero_opt_set(qf_zero *z, int which, int64_t lo, int64_t n, const float *in);

/* Completes an optimizer step still in flight (offload_optimizer with overlap): its host AdamW, uploads and node
 * exchange. Every qf_zero_* entry point that reads or writes the optimizer state does it first; the trainer calls it
 * before checkpoints. */
void qf_zero_sync(qf_zero *z);

/* Test hook: makes this rank's first reduced gradient element NaN (non-finite / fp16 overflow tests). */
void qf_zero_poison_grads(qf_zero *z);

/* The parameters' version (model.h hooks.param_version; the fp8 tables key their saved weight scales by it): 1 after
 * qf_zero_init, then one more at every call that may change parameter values, before any of them changes —
 * qf_zero_set_params, qf_zero_params_commit, qf_zero_opt_set of the master weights, qf_zero_update (also when its
 * host AdamW overlaps the next forward: every unit waits for its own update) and qf_zero_discard_grads. */
uint64_t qf_zero_param_version(const qf_zero *z);

/* Bytes of model state (parameters, gradients, master, moments) this rank holds now, by the engine's count. */
int64_t qf_zero_state_bytes(const qf_zero *z);

#endif
