/* serve_spec.c — see serve_spec.h. */
#include "serve_spec.h"
#include <string.h>

int qf_spec_ngram(const int32_t *ids, int n, int maxd, int32_t *out) {
    if (n < 2 || maxd <= 0) return 0;
    for (int g = n - 1 < QF_SPEC_NGRAM ? n - 1 : QF_SPEC_NGRAM; g >= 1; g--) {
        const int32_t *tail = ids + n - g;
        for (int i = n - g - 1; i >= 0; i--) { /* latest first: the most recent context repeats most often */
            if (memcmp(ids + i, tail, (size_t)g * sizeof *ids)) continue;
            const int from = i + g, k = n - from < maxd ? n - from : maxd;
            memcpy(out, ids + from, (size_t)k * sizeof *ids);
            return k;
        }
    }
    return 0;
}
