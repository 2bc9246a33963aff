/* metrics.h — one line of log.dir/metrics.jsonl (docs/hpc.md lists the keys). Every record starts with
 * "type" ("train" for an optimizer step, "eval" for an evaluation) and "time" (UTC, ISO 8601 with
 * milliseconds); numbers go through json_out.h (non-finite: null + "nonfinite"). A caller adds its keys in the
 * order they should appear:
 *     qf_metrics_rec m;
 *     qf_metrics_begin(&m, "train");
 *     qf_metrics_add_int(&m, "step", step);
 *     qf_metrics_add_num(&m, "loss", loss);
 *     qf_metrics_write(&m, r->metrics);   // one line, flushed; m is released (a NULL file only releases it)
 */
#ifndef QF_METRICS_H
#define QF_METRICS_H
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

typedef struct qf_metrics_rec {
    json_t *o;
} qf_metrics_rec;

void qf_metrics_begin(qf_metrics_rec *m, const char *type);
void qf_metrics_add_num(qf_metrics_rec *m, const char *key, double v);
void qf_metrics_add_int(qf_metrics_rec *m, const char *key, int64_t v);
void qf_metrics_add_bool(qf_metrics_rec *m, const char *key, int v);
void qf_metrics_add_str(qf_metrics_rec *m, const char *key, const char *v);
/* key: null, not flagged (a value that does not apply: mfu without a peak) */
void qf_metrics_add_null(qf_metrics_rec *m, const char *key);
/* 0, or -1 when the line could not be written. */
int qf_metrics_write(qf_metrics_rec *m, FILE *f);

/* "2026-12-01T09:10:11.123Z": the wall clock now, UTC. */
void qf_metrics_utc_now(char *buf, size_t cap);

#endif
