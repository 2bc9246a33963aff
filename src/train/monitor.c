/* monitor.c — see monitor.h. */
#include "monitor.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "util/host_mem.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static double wall_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void qf_monitor_init(qf_monitor *m, const qf_ops *ops) {
    memset(m, 0, sizeof *m);
    m->peak_gbs[0] = m->peak_gbs[1] = -1;
    m->params = qf_watch_defaults();
    m->gpu = !strncmp(ops->name, "cuda", 4);
#ifdef QWENFT_HAVE_CUDA
    if (m->gpu) {
        qf_gpu_util_open_current(&m->nvml); /* stays closed without NVML: utilisation unknown */
        qf_cuda_copy_peak(&m->peak_gbs[QF_COPY_H2D], &m->peak_gbs[QF_COPY_D2H]);
    }
#endif
}

void qf_monitor_begin(qf_monitor *m, const qf_ops *ops, qf_comm *c) {
    m->wall0 = wall_now();
    m->wait0 = c->wait_s;
    m->stall0 = qf_comm_gpu_stall_s(c);
    ops->copy_bytes(m->bytes0);
}

static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

void qf_monitor_end(qf_monitor *m, const qf_ops *ops, qf_comm *c, double step_s, double offload_wait_s,
                    qf_monitor_step *s) {
    memset(s, 0, sizeof *s);
    s->util_min = s->util_mean = -1;
    s->stall = s->stall_max = -1;
    double stall = qf_comm_gpu_stall_s(c); /* -1: no NCCL on this rank */
    s->host_used = -1;
    uint64_t b[2];
    ops->copy_bytes(b);
    s->pcie[0] = b[0] - m->bytes0[0];
    s->pcie[1] = b[1] - m->bytes0[1];
    s->pcie_gbs = step_s > 0 ? (double)(s->pcie[0] + s->pcie[1]) / step_s / 1e9 : 0;
    enum { K = 3 }; /* per rank: utilisation, exposed share, stall share (< 0: unknown) */
    double mine[K] = {m->gpu ? qf_gpu_util_read(&m->nvml, m->wall0) : -1,
                      step_s > 0 ? clamp01((c->wait_s - m->wait0 + offload_wait_s) / step_s) : 0,
                      stall >= 0 && m->stall0 >= 0 && step_s > 0 ? clamp01((stall - m->stall0) / step_s) : -1};
    if (c->node_id != 0) return; /* only rank 0's node is reported */
    double all_local[K * 64], *all = c->local_rank == 0 && c->local_size > 64
                                         ? qf_malloc((size_t)c->local_size * K * sizeof(double)) : all_local;
    MPI_Gather(mine, K, MPI_DOUBLE, all, K, MPI_DOUBLE, 0, c->node);
    if (c->local_rank == 0) {
        double usum = 0, esum = 0, ssum = 0;
        int sranks = 0;
        for (int i = 0; i < c->local_size; i++) {
            double u = all[K * i], e = all[K * i + 1], st = all[K * i + 2];
            if (u >= 0) {
                s->util_min = s->util_ranks == 0 || u < s->util_min ? u : s->util_min;
                usum += u;
                s->util_ranks++;
            }
            esum += e;
            if (e > s->exposed_max) s->exposed_max = e;
            if (st >= 0) {
                ssum += st;
                sranks++;
                if (st > s->stall_max) s->stall_max = st;
            }
        }
        if (s->util_ranks) s->util_mean = usum / s->util_ranks;
        s->exposed = esum / c->local_size;
        if (sranks) s->stall = ssum / sranks;
        int64_t used = qf_mem_node_used(NULL);
        if (used >= 0) {
            s->host_used = (double)used;
            qf_watch_ring_push(&m->host_used, s->host_used);
        }
        s->host_change = qf_watch_ring_change(&m->host_used);
        s->host_window = m->host_used.n > 1 ? m->host_used.n - 1 : 0;
        s->events = qf_watch_step(&m->watch, &m->params, s->util_mean, &m->host_used);
        s->util_source = m->nvml.last_source;
    }
    if (all != all_local) free(all);
}

static void add_or_null(qf_metrics_rec *rec, const char *key, double v, int known) {
    if (known) qf_metrics_add_num(rec, key, v);
    else qf_metrics_add_null(rec, key);
}

void qf_monitor_record(const qf_monitor *m, const qf_monitor_step *s, qf_metrics_rec *rec) {
    add_or_null(rec, "gpu_util_min", s->util_min, s->util_ranks > 0);
    add_or_null(rec, "gpu_util_mean", s->util_mean, s->util_ranks > 0);
    add_or_null(rec, "host_mem_used_gib", s->host_used / GIB, s->host_used >= 0);
    add_or_null(rec, "host_mem_change_gib", s->host_change / GIB, s->host_used >= 0);
    qf_metrics_add_int(rec, "host_mem_window_steps", s->host_window);
    qf_metrics_add_int(rec, "pcie_h2d_bytes", (int64_t)s->pcie[QF_COPY_H2D]);
    qf_metrics_add_int(rec, "pcie_d2h_bytes", (int64_t)s->pcie[QF_COPY_D2H]);
    qf_metrics_add_num(rec, "pcie_gbs", s->pcie_gbs);
    add_or_null(rec, "pcie_peak_h2d_gbs", m->peak_gbs[QF_COPY_H2D], m->peak_gbs[QF_COPY_H2D] > 0);
    add_or_null(rec, "pcie_peak_d2h_gbs", m->peak_gbs[QF_COPY_D2H], m->peak_gbs[QF_COPY_D2H] > 0);
    qf_metrics_add_num(rec, "comm_exposed", s->exposed);
    qf_metrics_add_num(rec, "comm_exposed_max", s->exposed_max);
    add_or_null(rec, "comm_stall_gpu", s->stall, s->stall >= 0);
    add_or_null(rec, "comm_stall_gpu_max", s->stall_max, s->stall >= 0);
}

void qf_monitor_progress(const qf_monitor *m, const qf_monitor_step *s, char *buf, size_t cap) {
    char util[48] = "n/a", host[64] = "n/a", peak[24] = "n/a";
    if (s->util_ranks > 0) snprintf(util, sizeof util, "%.0f%% (min %.0f%%)", 100 * s->util_mean, 100 * s->util_min);
    if (s->host_used >= 0)
        snprintf(host, sizeof host, "%.2f GiB (%+.2f/%d)", s->host_used / GIB, s->host_change / GIB, s->host_window);
    double p = m->peak_gbs[QF_COPY_H2D] > m->peak_gbs[QF_COPY_D2H] ? m->peak_gbs[QF_COPY_H2D] : m->peak_gbs[QF_COPY_D2H];
    if (p > 0) snprintf(peak, sizeof peak, "%.1f", p);
    char stall[40] = "";
    if (s->stall >= 0) snprintf(stall, sizeof stall, " (GPU stalled %.0f%%)", 100 * s->stall);
    snprintf(buf, cap, " | GPU %s | host %s | PCIe %.2f GB/s of %s | comm %.0f%%%s", util, host, s->pcie_gbs, peak,
             100 * s->exposed, stall);
}

void qf_monitor_describe(const qf_monitor *m, char *buf, size_t cap) {
    if (!m->gpu) {
        snprintf(buf, cap, "CPU ranks: GPU utilisation n/a, no PCIe copies");
        return;
    }
    char link[96] = "link rate not measured (no memory for the pinned test buffers)";
    if (m->peak_gbs[QF_COPY_H2D] > 0 && m->peak_gbs[QF_COPY_D2H] > 0)
        snprintf(link, sizeof link, "link %.1f GB/s host -> device, %.1f back (pinned copies)", m->peak_gbs[QF_COPY_H2D],
                 m->peak_gbs[QF_COPY_D2H]);
    snprintf(buf, cap, "GPU utilisation %s; %s",
             m->nvml.lib ? "from NVML" : "n/a (libnvidia-ml.so.1 not loaded, or this GPU not found in it)", link);
}

void qf_monitor_warn(qf_monitor *m, const qf_monitor_step *s, int64_t step, FILE *f) {
    const qf_watch_params *p = &m->params;
    if (s->util_source && !m->source_said) {
        m->source_said = 1;
        fprintf(f, "monitor: step %lld: rank 0's GPU utilisation %s\n", (long long)step,
                s->util_source == 1 ? "averages NVML's samples in the step (nvmlDeviceGetSamples)"
                                    : "is NVML's last sampling period (nvmlDeviceGetUtilizationRates): no sample fell "
                                      "in the step");
        fflush(f);
    }
    if (s->events & QF_WATCH_UTIL_LOW)
        fprintf(f, "warning: step %lld: mean GPU utilisation of the node has been under %.0f%% for %d steps (now %.0f%%, "
                   "min %.0f%%): the GPUs wait (offload, communication, data); see docs/hpc.md, \"Monitoring a run\"\n",
                (long long)step, 100 * p->util_min, m->watch.low_run, 100 * s->util_mean, 100 * s->util_min);
    if (s->events & QF_WATCH_UTIL_OK)
        fprintf(f, "note: step %lld: mean GPU utilisation is back at %.0f%%\n", (long long)step, 100 * s->util_mean);
    if (s->events & QF_WATCH_MEM_GROWS)
        fprintf(f, "warning: step %lld: the node's used host memory grew step over step through the last %d steps, "
                   "by %.2f GiB to %.2f GiB: memory allocated per step and kept (a leak) ends with the OOM killer\n",
                (long long)step, s->host_window, s->host_change / GIB, s->host_used / GIB);
    if (s->events & QF_WATCH_MEM_FLAT)
        fprintf(f, "note: step %lld: the node's used host memory has stopped growing (%+.2f GiB over the last %d steps)\n",
                (long long)step, s->host_change / GIB, s->host_window);
    if (s->events) fflush(f);
}

void qf_monitor_free(qf_monitor *m) { qf_gpu_util_close(&m->nvml); }
