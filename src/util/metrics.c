/* metrics.c — see metrics.h. */
#include "metrics.h"
#include <time.h>
#include "json_out.h"

void qf_metrics_utc_now(char *buf, size_t cap) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%03ldZ", day, ts.tv_nsec / 1000000);
}

void qf_metrics_begin(qf_metrics_rec *m, const char *type) {
    char now[48];
    qf_metrics_utc_now(now, sizeof now);
    m->o = json_object();
    json_object_set_new(m->o, "type", json_string(type));
    json_object_set_new(m->o, "time", json_string(now));
}

void qf_metrics_add_num(qf_metrics_rec *m, const char *key, double v) { qf_json_set_num(m->o, key, v); }
void qf_metrics_add_int(qf_metrics_rec *m, const char *key, int64_t v) {
    json_object_set_new(m->o, key, json_integer((json_int_t)v));
}
void qf_metrics_add_bool(qf_metrics_rec *m, const char *key, int v) { json_object_set_new(m->o, key, json_boolean(v)); }
void qf_metrics_add_str(qf_metrics_rec *m, const char *key, const char *v) {
    json_object_set_new(m->o, key, json_string(v));
}

void qf_metrics_add_null(qf_metrics_rec *m, const char *key) { json_object_set_new(m->o, key, json_null()); }

int qf_metrics_write(qf_metrics_rec *m, FILE *f) {
    int rc = 0;
    if (f) rc = qf_json_print(m->o, f);
    else json_decref(m->o);
    m->o = NULL;
    return rc;
}
