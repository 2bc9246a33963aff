/* serve_metrics.c — see serve_metrics.h. */
#include "serve_metrics.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util.h"

static const double MET_LE[QF_MET_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const char *const MET_STATUS[6] = {"2xx", "400", "401", "404", "413", "503"};

void qf_metrics_init(qf_serve_metrics *m, int kv_total, int max_batch) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->kv_total = kv_total;
    m->max_batch = max_batch;
}

void qf_metrics_destroy(qf_serve_metrics *m) { pthread_mutex_destroy(&m->mu); }

void qf_metrics_request(qf_serve_metrics *m, const char *endpoint, int status) {
    int c = status < 300 ? 0 : status == 400 ? 1 : status == 401 ? 2 : status == 413 ? 4 : status >= 500 ? 5 : 3;
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < QF_MET_ENDPOINTS && m->endpoint[i] && strcmp(m->endpoint[i], endpoint)) i++;
    if (i == QF_MET_ENDPOINTS) i = QF_MET_ENDPOINTS - 1; /* endpoints are a fixed set; the last slot is "other" */
    if (!m->endpoint[i]) m->endpoint[i] = endpoint;
    m->requests[i][c]++;
    pthread_mutex_unlock(&m->mu);
}

void qf_hist_observe(qf_hist *h, double s) {
    int b = 0;
    while (b < QF_MET_BUCKETS && s > MET_LE[b]) b++;
    h->count[b]++;
    h->sum += s;
    h->n++;
}

typedef struct met_buf {
    char *s;
    size_t n, cap;
} met_buf;

static void met_put(met_buf *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        b->cap = 2 * b->cap + (size_t)(k > 0 ? k : 256);
        b->s = qf_realloc(b->s, b->cap);
    }
}

static void met_hist(met_buf *b, const char *name, const char *help, const qf_hist *h) {
    met_put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < QF_MET_BUCKETS; i++) {
        cum += h->count[i];
        met_put(b, "%s_bucket{le=\"%g\"} %llu\n", name, MET_LE[i], (unsigned long long)cum);
    }
    cum += h->count[QF_MET_BUCKETS];
    met_put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, (unsigned long long)cum, name,
            h->sum, name, (unsigned long long)h->n);
}

char *qf_metrics_text(qf_serve_metrics *m, size_t *len) {
    met_buf b = {qf_malloc(4096), 0, 4096};
    pthread_mutex_lock(&m->mu);
    met_put(&b, "# HELP qwenft_requests_total HTTP requests answered, by endpoint and status\n"
                "# TYPE qwenft_requests_total counter\n");
    for (int i = 0; i < QF_MET_ENDPOINTS && m->endpoint[i]; i++)
        for (int c = 0; c < 6; c++)
            met_put(&b, "qwenft_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n", m->endpoint[i], MET_STATUS[c],
                    (unsigned long long)m->requests[i][c]);
    met_put(&b, "# HELP qwenft_queue_depth requests waiting to join the batch\n# TYPE qwenft_queue_depth gauge\n"
                "qwenft_queue_depth %d\n", m->queue_depth);
    met_put(&b, "# HELP qwenft_batch_size sequences in the running batch\n# TYPE qwenft_batch_size gauge\n"
                "qwenft_batch_size %d\n", m->batch_size);
    met_put(&b, "# HELP qwenft_batch_size_max --max-batch\n# TYPE qwenft_batch_size_max gauge\nqwenft_batch_size_max %d\n",
            m->max_batch);
    met_put(&b, "# HELP qwenft_prompt_tokens_total prompt tokens prefilled\n# TYPE qwenft_prompt_tokens_total counter\n"
                "qwenft_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    met_put(&b, "# HELP qwenft_generation_tokens_total tokens generated\n"
                "# TYPE qwenft_generation_tokens_total counter\nqwenft_generation_tokens_total %llu\n",
            (unsigned long long)m->generation_tokens);
    met_put(&b, "# HELP qwenft_engine_steps_total model calls of the engine\n# TYPE qwenft_engine_steps_total counter\n"
                "qwenft_engine_steps_total %llu\n", (unsigned long long)m->steps);
    met_put(&b, "# HELP qwenft_kv_blocks_used KV cache blocks held by running sequences\n"
                "# TYPE qwenft_kv_blocks_used gauge\nqwenft_kv_blocks_used %d\n", m->kv_used);
    met_put(&b, "# HELP qwenft_kv_blocks_cached KV cache blocks of finished prompts kept for reuse (--prefix-cache)\n"
                "# TYPE qwenft_kv_blocks_cached gauge\nqwenft_kv_blocks_cached %d\n", m->kv_cached);
    met_put(&b, "# HELP qwenft_kv_blocks_total KV cache blocks in the pool\n# TYPE qwenft_kv_blocks_total gauge\n"
                "qwenft_kv_blocks_total %d\n", m->kv_total);
    met_put(&b, "# HELP qwenft_prefix_cache_hit_tokens_total prompt tokens whose KV came from the prefix cache (not "
                "prefilled)\n# TYPE qwenft_prefix_cache_hit_tokens_total counter\nqwenft_prefix_cache_hit_tokens_total "
                "%llu\n", (unsigned long long)m->prefix_hit_tokens);
    met_put(&b, "# HELP qwenft_preemptions_total running sequences preempted for the KV blocks of older ones "
                "(--preemption)\n# TYPE qwenft_preemptions_total counter\nqwenft_preemptions_total %llu\n",
            (unsigned long long)m->preemptions);
    met_put(&b, "# HELP qwenft_recomputed_tokens_total positions prefilled again after a preemption\n"
                "# TYPE qwenft_recomputed_tokens_total counter\nqwenft_recomputed_tokens_total %llu\n",
            (unsigned long long)m->recomputed_tokens);
    met_put(&b, "# HELP qwenft_spec_draft_tokens_total draft tokens fed to the model (--speculate)\n"
                "# TYPE qwenft_spec_draft_tokens_total counter\nqwenft_spec_draft_tokens_total %llu\n",
            (unsigned long long)m->spec_draft_tokens);
    met_put(&b, "# HELP qwenft_spec_accepted_tokens_total draft tokens the model's picks confirmed (each gave one more "
                "token in its call)\n# TYPE qwenft_spec_accepted_tokens_total counter\n"
                "qwenft_spec_accepted_tokens_total %llu\n",
            (unsigned long long)m->spec_accepted_tokens);
    met_hist(&b, "qwenft_time_to_first_token_seconds", "from the request's arrival to its first generated token",
             &m->ttft);
    met_hist(&b, "qwenft_time_per_output_token_seconds", "between successive generated tokens of a request", &m->tpot);
    met_hist(&b, "qwenft_request_duration_seconds", "from arrival to the last token (generation requests)", &m->e2e);
    pthread_mutex_unlock(&m->mu);
    *len = b.n;
    return b.s;
}
