/* serve_spec.c — see serve_spec.h. */
#include "serve_spec.h"

int32_t qf_spec_next(const int32_t *ids, int n, const int32_t *ext, int m) {
    const int L = n + m;
    if (L < 2) return -1;
#define AT(i) ((i) < n ? ids[i] : ext[(i) - n])
    const int32_t t1 = AT(L - 1), t2 = L >= 2 ? AT(L - 2) : -1, t3 = L >= 3 ? AT(L - 3) : -1;
    int best = 0, at = -1; /* the longest match so far (its g) and where its occurrence ends (latest first) */
    for (int e = L - 2; e >= 0 && best < QF_SPEC_NGRAM; e--) { /* an occurrence ending at e < L - 1 */
        if (AT(e) != t1) continue;
        int g = 1;
        if (e >= 1 && L >= 3 && AT(e - 1) == t2) g = 2;
        if (g == 2 && e >= 2 && L >= 4 && AT(e - 2) == t3) g = 3;
        if (g > best) best = g, at = e; /* the latest occurrence of each length is met first */
    }
    return at >= 0 ? AT(at + 1) : -1;
#undef AT
}

int qf_spec_drafts(const int32_t *ids, int n, int maxd, int32_t *out) {
    int k = 0;
    while (k < maxd && k < QF_SPEC_MAX) {
        const int32_t t = qf_spec_next(ids, n, out, k);
        if (t < 0) break;
        out[k++] = t;
    }
    return k;
}
