/* prep_doc.c — the bottom of prepare's record functions: the growing document (tokens and mask) and the JSON
 * helpers their messages share. It calls nothing else of prepare. */
#include <jansson.h>
#include <stdint.h>
#include "prep.h"
#include "util.h"

void prep_doc_reserve(prep_doc *d, int64_t n) {
    if (n <= d->cap) return;
    int64_t cap = d->cap ? d->cap : 1024;
    while (cap < n) cap *= 2;
    d->tok = qf_realloc(d->tok, (size_t)cap * sizeof *d->tok);
    d->mask = qf_realloc(d->mask, (size_t)cap);
    d->cap = cap;
}

const char *prep_json_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* json_object_get, with JSON null counted as absent */
json_t *prep_get(json_t *rec, const char *key) {
    json_t *v = json_object_get(rec, key);
    return v && json_is_null(v) ? NULL : v;
}
