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
    s->cnt = qf_calloc((size_t)V, sizeof *s->cnt);
    s->cand = qf_malloc((size_t)V * (sizeof(double) + 8));
}

void qf_sampler_free(qf_sampler *s) {
    free(s->val);
    free(s->idx);
    free(s->p);
    free(s->seen);
    free(s->cnt);
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

/* the additive penalties of ids[n] (each id once): logits[t] -= per * c_t / den + once, c_t the id's count among
 * them (OpenAI's frequency and presence penalties over the generated tokens: den 1; TGI's frequency penalty over all
 * tokens: den n, once 0), one rounding to float */
static void sample_additive(qf_sampler *s, float *logits, const int32_t *ids, size_t n, double per, double den,
                            double once) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < s->V) s->cnt[ids[i]]++;
    for (size_t i = 0; i < n; i++) {
        const int32_t t = ids[i];
        if (t < 0 || t >= s->V || !s->cnt[t]) continue;
        logits[t] = (float)((double)logits[t] - per * (double)s->cnt[t] / den - once);
        s->cnt[t] = 0; /* applied: its later occurrences skip it */
    }
}

/* keeps the candidates (idx, p)[0 .. *n) for which keep[i] holds, in order; returns their weight */
static double sample_keep(qf_sampler *s, int64_t *n, const uint8_t *keep) {
    int64_t m = 0;
    double sum = 0;
    for (int64_t i = 0; i < *n; i++)
        if (keep[i]) s->idx[m] = s->idx[i], s->p[m] = s->p[i], sum += s->p[m++];
    *n = m;
    return sum;
}

/* (shifted score, id) pairs of typical decoding, by score then id */
typedef struct sample_typ {
    double d;
    int64_t i;
} sample_typ;
static int sample_typ_cmp(const void *a, const void *b) {
    const sample_typ *x = a, *y = b;
    if (x->d != y->d) return x->d < y->d ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* HF TypicalLogitsWarper over the candidates (weights p, sum): with q = p / sum and H = -sum q log q, the candidates
 * ordered by |-log q - H|; the first m whose cumulative q stays below mass, and the next one, are kept with every
 * candidate of a score no larger than that one's (at least one); returns the kept weight */
static double sample_typical(qf_sampler *s, int64_t *n, double sum, double mass) {
    sample_typ *c = s->cand;
    double H = 0;
    for (int64_t i = 0; i < *n; i++) {
        const double q = s->p[i] / sum;
        if (q > 0) H -= q * log(q);
    }
    for (int64_t i = 0; i < *n; i++) {
        const double q = s->p[i] / sum;
        c[i] = (sample_typ){q > 0 ? fabs(-log(q) - H) : INFINITY, i};
    }
    qsort(c, (size_t)*n, sizeof *c, sample_typ_cmp);
    int64_t last = 0;
    double acc = 0;
    for (int64_t k = 0; k < *n; k++) {
        acc += s->p[c[k].i] / sum;
        if (acc < mass) last = k + 1;
        else break;
    }
    if (last > *n - 1) last = *n - 1;
    const double th = c[last].d;
    const int64_t n0 = *n;
    uint8_t *keep = s->seen; /* zeros between uses ([V]) */
    for (int64_t k = 0; k < n0; k++) keep[c[k].i] = c[k].d <= th;
    const double kept = sample_keep(s, n, keep);
    memset(keep, 0, (size_t)n0);
    return kept;
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
    return qf_sample_pick_first(s, o, logits, seen, nseen, 0, rng, -1);
}

int qf_sample_on_host(const qf_sample_opts *o) {
    const double pen = o->repetition_penalty;
    return !o->greedy || (pen != 1.0 && pen > 0) || o->nbias > 0 || o->frequency_penalty != 0 ||
           o->presence_penalty != 0 || o->share_penalty != 0;
}

int32_t qf_sample_pick_first(qf_sampler *s, const qf_sample_opts *o, float *logits, const int32_t *seen, size_t nseen,
                             size_t nprompt, qf_rng *rng, int32_t first) {
    const int64_t V = s->V;
    for (int i = 0; i < o->nbias; i++) /* OpenAI's logit_bias, before everything */
        if (o->bias_id[i] >= 0 && o->bias_id[i] < V) logits[o->bias_id[i]] += o->bias[i];
    if (o->repetition_penalty != 1.0 && o->repetition_penalty > 0)
        sample_penalize(s, logits, seen, nseen, o->repetition_penalty);
    if ((o->frequency_penalty != 0 || o->presence_penalty != 0) && nseen > nprompt)
        sample_additive(s, logits, seen + nprompt, nseen - nprompt, o->frequency_penalty, 1.0, o->presence_penalty);
    if (o->share_penalty != 0 && nseen > 0)
        sample_additive(s, logits, seen, nseen, o->share_penalty, (double)nseen, 0.0);
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
    if (o->min_p > 0) { /* vLLM / HF min-p: the weights are relative to the largest (1, the argmax's: kept) */
        uint8_t *k = s->seen;
        for (int64_t i = 0; i < n; i++) k[i] = s->p[i] >= o->min_p;
        const int64_t n0 = n;
        sum = sample_keep(s, &n, k);
        memset(k, 0, (size_t)n0);
    }
    if (o->typical_p > 0 && o->typical_p < 1) sum = sample_typical(s, &n, sum, o->typical_p);
    double u = qf_rng_uniform(rng) * sum, acc = 0;
    int64_t f = -1; /* first's place among the candidates: its slice [0, p_first) of the mass comes before theirs */
    for (int64_t i = 0; i < n && first >= 0 && f < 0; i++)
        if (s->idx[i] == first) f = i;
    if (f >= 0) {
        if (u < s->p[f]) return first;
        acc = s->p[f];
    }
    int64_t last = f >= 0 && s->p[f] > 0 ? f : -1; /* the last candidate of positive weight: u past the sum's
                                                    * rounding never lands on one of none (a masked id) */
    for (int64_t i = 0; i < n; i++) {
        if (i == f) continue;
        acc += s->p[i];
        if (s->p[i] > 0) last = i;
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
