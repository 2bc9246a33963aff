/* json_out.h — the one way qwen-ft writes JSON (metrics.jsonl, eval, generate --json, estimate --json,
 * report --json): jansson objects, printed one per line. JSON has no NaN or infinity: a non-finite number is
 * written as null and its key is listed in the object's "nonfinite" array, so that a reader can tell a missing
 * value from a diverged one. Memory is always in GiB (2^30 bytes), in keys ending in _gib. */
#ifndef QF_JSON_OUT_H
#define QF_JSON_OUT_H
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#define QF_GIB(bytes) ((double)(bytes) / 1073741824.0)

/* o[key] = v, or null with key appended to o["nonfinite"] when v is NaN or infinite. */
void qf_json_set_num(json_t *o, const char *key, double v);
/* Prints o as one line ("key": value, insertion order, 12 significant digits) and a newline, flushes f, and
 * releases o. 0, or -1 when the write failed. */
int qf_json_print(json_t *o, FILE *f);

#endif
