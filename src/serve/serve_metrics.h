/* serve_metrics.h — `GET /metrics` of qwen-ft serve in Prometheus' text format (version 0.0.4): requests by endpoint
 * and status, queue depth, running batch size, prompt and generated tokens, time to first token and time per output
 * token histograms, KV blocks used, cached for reuse and total, prompt tokens taken from the prefix cache,
 * preemptions and the positions they had recomputed, speculation's draft tokens fed and accepted. Updated by the
 * HTTP thread and the engine thread under one mutex. */
#ifndef QF_SERVE_METRICS_H
#define QF_SERVE_METRICS_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define QF_MET_ENDPOINTS 12
#define QF_MET_BUCKETS 14

typedef struct qf_hist {
    uint64_t count[QF_MET_BUCKETS + 1]; /* per bucket (le), the last +Inf */
    double sum;
    uint64_t n;
} qf_hist;

typedef struct qf_serve_metrics {
    pthread_mutex_t mu;
    const char *endpoint[QF_MET_ENDPOINTS];
    uint64_t requests[QF_MET_ENDPOINTS][6]; /* by status class: 2xx, 400, 401, 404/405, 413, 503 (and 5xx) */
    int queue_depth, batch_size, kv_used, kv_cached, kv_total, max_batch;
    uint64_t prompt_tokens, generation_tokens, steps, prefix_hit_tokens, preemptions, recomputed_tokens;
    uint64_t spec_draft_tokens, spec_accepted_tokens; /* --speculate: drafts fed, drafts whose pick was taken */
    qf_hist ttft, tpot, e2e;
} qf_serve_metrics;

void qf_metrics_init(qf_serve_metrics *m, int kv_total, int max_batch);
void qf_metrics_destroy(qf_serve_metrics *m);
void qf_metrics_request(qf_serve_metrics *m, const char *endpoint, int status);
/* latency observations in seconds (caller holds m->mu) */
void qf_hist_observe(qf_hist *h, double s);
/* the whole text (malloc'd) */
char *qf_metrics_text(qf_serve_metrics *m, size_t *len);

#endif
