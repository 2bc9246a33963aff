/* sample.c — see sample.h. */
#include "sample.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util.h"

void qf_sampler_init(qf_sampler *s, int64_t V) {
    s->V = V;
    s->val = qf_malloc((size_t)V * sizeof *s->val);
    s->idx = qf_malloc((size_t)V * sizeof *s->idx);
    s->p = qf_malloc((size_t)V * sizeof *s->p);
    s->seen = qf_calloc((size_t)V, 1);
    s->cand = qf_malloc((size_t)V * (sizeof(double) + 8));
}

void qf_sampler_free(qf_sampler *s) {
    free(s->val);
    free(s->idx);
    free(s->p);
    free(s->seen);
    free(s->cand);
    memset(s, 0, sizeof *s);
}

/* HF RepetitionPenaltyLogitsProcessor: each distinct seen id once */
static void sample_penalize(qf_sampler *s, float *logits, const int32_t *seen, size_t nseen, double pen) {
    for (size_t i = 0; i < nseen; i++) {
        int32_t t = seen[i];
        if (t < 0 || t >= s->V || s->seen[t]) continue;
        s->seen[t] = 1;
        logits[t] = logits[t] > 0 ? (float)(logits[t] / pen) : (float)(logits[t] * pen);
    }
    for (size_t i = 0; i < nseen; i++)
        if (seen[i] >= 0 && seen[i] < s->V) s->seen[seen[i]] = 0;
}

/* the k-th largest of a[n] (1 <= k <= n), a reordered: iterative quickselect, median-of-three pivots */
static float sample_kth_largest(float *a, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1, want = k - 1; /* descending order: position k-1 */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        float x = a[lo], y = a[mid], z = a[hi];
        float piv = (x > y) ? ((y > z) ? y : (x > z ? z : x)) : ((x > z) ? x : (y > z ? z : y));
        int64_t i = lo, j = hi;
        while (i <= j) { /* Hoare partition, descending */
            while (a[i] > piv) i++;
            while (a[j] < piv) j--;
            if (i <= j) {
                float t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return a[want];
    }
    return a[want];
}

/* qsort order of candidates: larger weight first, then smaller id (deterministic on ties) */
typedef struct sample_cand {
    double p;
    int32_t id;
} sample_cand;
static int sample_cmp(const void *a, const void *b) {
    const sample_cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t qf_sample_pick(qf_sampler *s, const qf_sample_opts *o, float *logits, const int32_t *seen, size_t nseen,
                       qf_rng *rng) {
    return qf_sample_pick_first(s, o, logits, seen, nseen, rng, -1);
}

int32_t qf_sample_pick_first(qf_sampler *s, const qf_sample_opts *o, float *logits, const int32_t *seen, size_t nseen,
                             qf_rng *rng, int32_t first) {
    const int64_t V = s->V;
    if (o->repetition_penalty != 1.0 && o->repetition_penalty > 0)
        sample_penalize(s, logits, seen, nseen, o->repetition_penalty);
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (o->greedy) return (int32_t)best;
    /* candidates: all ids, or those with logit >= the k-th largest */
    int64_t n = 0;
    if (o->top_k > 0 && o->top_k < V) {
        memcpy(s->val, logits, (size_t)V * sizeof *s->val);
        float th = sample_kth_largest(s->val, V, o->top_k);
        for (int64_t i = 0; i < V; i++)
            if (logits[i] >= th) s->idx[n++] = (int32_t)i;
    } else {
        for (int64_t i = 0; i < V; i++) s->idx[n++] = (int32_t)i;
    }
    /* softmax weights of logits / temperature, relative to the maximum */
    double mx = logits[best], sum = 0;
    for (int64_t i = 0; i < n; i++) sum += s->p[i] = exp(((double)logits[s->idx[i]] - mx) / o->temperature);
    if (o->top_p > 0 && o->top_p < 1) { /* sort once, keep the smallest prefix with mass >= top_p */
        /* only tokens of weight >= th can be in the prefix once those alone reach the mass: lower th by 16x
         * until they do (a few O(n) passes), then sort just them */
        double need = o->top_p * sum, th = 1.0 / 16, mass = 0;
        for (;;) {
            mass = 0;
            for (int64_t i = 0; i < n; i++)
                if (s->p[i] >= th) mass += s->p[i];
            if (mass >= need || th < 1e-300) break;
            th /= 16;
        }
        if (mass < need) th = 0;
        sample_cand *c = s->cand;
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++)
            if (s->p[i] >= th) c[m++] = (sample_cand){s->p[i], s->idx[i]};
        n = m;
        qsort(c, (size_t)n, sizeof *c, sample_cmp);
        double acc = 0;
        int64_t keep = 0;
        while (keep < n && acc < o->top_p * sum) acc += c[keep++].p;
        for (int64_t i = 0; i < keep; i++) s->p[i] = c[i].p, s->idx[i] = c[i].id;
        n = keep;
        sum = acc;
    }
    double u = qf_rng_uniform(rng) * sum, acc = 0;
    int64_t f = -1; /* first's place among the candidates: its slice [0, p_first) of the mass comes before theirs */
    for (int64_t i = 0; i < n && first >= 0 && f < 0; i++)
        if (s->idx[i] == first) f = i;
    if (f >= 0) {
        if (u < s->p[f]) return first;
        acc = s->p[f];
    }
    int64_t last = -1;
    for (int64_t i = 0; i < n; i++) {
        if (i == f) continue;
        acc += s->p[i], last = i;
        if (u < acc) return s->idx[i];
    }
    return s->idx[last >= 0 ? last : n - 1];
}

float qf_sample_logprobs(const float *logits, int64_t V, int32_t chosen, int n, int32_t *top_id, float *top_lp) {
    float mx = -INFINITY;
    for (int64_t v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    double sum = 0; /* as the backends' argmax_rows form the pick's logprob */
    for (int64_t v = 0; v < V; v++) sum += expf(logits[v] - mx);
    const double lse = log(sum);
    int k = 0; /* top_id[0..k) kept, by logit descending; a later id enters only when strictly above (ties: lower id) */
    for (int64_t v = 0; v < V && n > 0; v++) {
        const float l = logits[v];
        if (k == n && l <= logits[top_id[n - 1]]) continue;
        int i = k < n ? k++ : n - 1;
        while (i > 0 && logits[top_id[i - 1]] < l) top_id[i] = top_id[i - 1], i--;
        top_id[i] = (int32_t)v;
    }
    for (int i = 0; i < k; i++) top_lp[i] = (float)((double)(logits[top_id[i]] - mx) - lse);
    return (float)((double)(logits[chosen] - mx) - lse);
}
