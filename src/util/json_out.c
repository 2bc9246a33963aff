/* json_out.c — see json_out.h. */
#include "json_out.h"
#include <math.h>

void qf_json_set_num(json_t *o, const char *key, double v) {
    if (isfinite(v)) {
        json_object_set_new(o, key, json_real(v));
        return;
    }
    json_object_set_new(o, key, json_null());
    json_t *bad = json_object_get(o, "nonfinite");
    if (!bad) {
        bad = json_array();
        json_object_set_new(o, "nonfinite", bad);
    }
    json_array_append_new(bad, json_string(key));
}

int qf_json_print(json_t *o, FILE *f) {
    json_t *bad = json_object_get(o, "nonfinite");
    if (bad) { /* the flag goes last, after the keys it names */
        json_incref(bad);
        json_object_del(o, "nonfinite");
        json_object_set_new(o, "nonfinite", bad);
    }
    int rc = json_dumpf(o, f, JSON_INDENT(0) | JSON_REAL_PRECISION(12)) == 0 && fputc('\n', f) != EOF ? 0 : -1;
    if (fflush(f) != 0) rc = -1;
    json_decref(o);
    return rc;
}
