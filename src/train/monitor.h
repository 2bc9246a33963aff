/* monitor.h — the seed's monitoring figures for every optimizer step (docs/hpc.md, "Monitoring a run"): GPU
 * utilisation of the node's ranks from NVML (min and mean), the node's used host memory and its change over the
 * last 100 steps, the host <-> device bytes of the step and their rate against the link's measured peak, the
 * share of the step the trainer's thread spent waiting for communication or the offloaded optimizer, and on GPU
 * ranks the share the compute stream stood waiting for NCCL; the warnings when the
 * utilisation stays under 90% or host memory grows step over step (util/step_watch.h decides, rank 0 prints).
 * Lives in the run context (run.h); no global state. */
#ifndef QF_MONITOR_H
#define QF_MONITOR_H
#include <stdint.h>
#include <stdio.h>
#include "ops.h"
#include "parallel/comm.h"
#include "parallel/gpu_util.h"
#include "util/metrics.h"
#include "util/step_watch.h"

typedef struct qf_monitor {
    int gpu;                 /* this rank computes with a CUDA table */
    qf_gpu_util nvml;        /* its GPU in NVML (closed when NVML is not there) */
    double peak_gbs[2];      /* pinned copy rate of its link per direction (QF_COPY_H2D, QF_COPY_D2H), GB/s;
                              * measured once by qf_monitor_init; < 0: unknown (CPU ranks) */
    /* at the start of the step (qf_monitor_begin) */
    double wall0;            /* wall clock, seconds since the epoch (NVML's sample timestamps) */
    double wait0;            /* comm->wait_s */
    double stall0;           /* qf_comm_gpu_stall_s (GPU ranks) */
    uint64_t bytes0[2];      /* ops->copy_bytes */
    /* rank 0: its node's used host memory over the last QF_WATCH_WINDOW steps, and the warnings' state */
    qf_watch_ring host_used;
    qf_watch watch;
    qf_watch_params params;
    int source_said;         /* rank 0 has said where its utilisation figure comes from */
} qf_monitor;

/* One step's figures (the node is rank 0's: those are the ones rank 0 writes). */
typedef struct qf_monitor_step {
    double util_min, util_mean; /* GPU utilisation over the node's GPU ranks, fractions; < 0: none known */
    int util_ranks;             /* how many of the node's ranks gave one */
    double host_used;           /* the node's used memory (MemTotal - MemAvailable), bytes; < 0 unknown */
    double host_change;         /* its change over the window below, bytes */
    int host_window;            /* steps the change spans (up to QF_WATCH_WINDOW - 1) */
    uint64_t pcie[2];           /* rank 0's host -> device and device -> host bytes in the step */
    double pcie_gbs;            /* (both) / step time, GB/s */
    double exposed, exposed_max; /* waiting share of the step: mean and max over the node's ranks, in [0, 1] */
    double stall, stall_max;    /* share of the step the compute stream stood waiting for NCCL, mean and max over
                                 * the node's GPU ranks, in [0, 1]; < 0: no GPU rank */
    unsigned events;            /* QF_WATCH_* warnings to print (rank 0) */
    int util_source;            /* rank 0's own figure: 1 NVML's samples in the step, 2 its utilisation rate, 0 none */
} qf_monitor_step;

/* Every rank, after the backend and the model state are set up: GPU ranks open NVML and measure their link. */
void qf_monitor_init(qf_monitor *m, const qf_ops *ops);
/* Every rank, at the start of an optimizer step. */
void qf_monitor_begin(qf_monitor *m, const qf_ops *ops, qf_comm *c);
/* Every rank, at the end of the step (step_s its seconds, offload_wait_s what the trainer waited for the offloaded
 * optimizer in it): the ranks of rank 0's node gather their figures on it (one MPI_Gather on the node
 * communicator); rank 0 fills *s, reads the node's host memory and judges the warnings. */
void qf_monitor_end(qf_monitor *m, const qf_ops *ops, qf_comm *c, double step_s, double offload_wait_s,
                    qf_monitor_step *s);
/* rank 0: the figures into a "train" record of metrics.jsonl (unknown ones as null) */
void qf_monitor_record(const qf_monitor *m, const qf_monitor_step *s, qf_metrics_rec *rec);
/* rank 0: " | GPU 97% (min 95%) | host 41.20 GiB (+0.02/99) | PCIe 3.10 GB/s of 25.0 | comm 12% (GPU stalled 4%)"
 * for the progress line ("GPU n/a", "of n/a" where unknown; no "GPU stalled" without NCCL) */
void qf_monitor_progress(const qf_monitor *m, const qf_monitor_step *s, char *buf, size_t cap);
/* What this rank knows for the run header: "GPU utilisation from NVML (the driver's samples); link 25.3 GB/s
 * host -> device, 24.9 back (pinned copies of 256 MiB)", or what is not known and why. */
void qf_monitor_describe(const qf_monitor *m, char *buf, size_t cap);
/* rank 0: the step's warnings (s->events) as "warning: ..." lines, and once, at the first step with a figure,
 * which NVML call rank 0's GPU utilisation came from */
void qf_monitor_warn(qf_monitor *m, const qf_monitor_step *s, int64_t step, FILE *f);
void qf_monitor_free(qf_monitor *m);

#endif
