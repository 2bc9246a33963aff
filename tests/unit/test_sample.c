/* test_sample.c — src/generate/sample.c against direct restatements of transformers' logits processors: greedy
 * argmax;
 * repetition penalty (each distinct seen id once, l/p or l*p); top-k keeps ties with the k-th largest; top-p keeps
 * the smallest most-likely prefix reaching p; the empirical distribution of many draws matches the renormalised
 * softmax; top-k 1 and a tiny top-p are greedy; and at Qwen's vocabulary (152k) top-p without top-k takes
 * milliseconds per token (it sorted by insertion before: seconds); a served token's logprobs (the log-softmax under the
 * raw logits and the n most likely ids, ties in id order) against a long-double restatement and a sort; the pick
 * with a proposal first (speculative sampling) keeps the distribution; serve's logit_bias, OpenAI's and TGI's
 * frequency and presence penalties, min-p and typical decoding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "generate/sample.h"
#include "qf_test.h"

/* the small cases' logits: ids 1 and 3 tied at the top, then 5, 0, 4, 7, 6, 2 */
static const float BASE8[8] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.0f, -1.0f, 0.0f};

/* greedy, top-k, temperature, top-p, repetition penalty; the rest off */
#define OPTS(g, k, t, p, r) \
    ((qf_sample_opts){.greedy = (g), .top_k = (k), .temperature = (t), .top_p = (p), .repetition_penalty = (r)})


/* draws n samples of logits (copied each time) and returns the counts per id */
static void histogram(qf_sampler *s, const qf_sample_opts *o, const float *logits, int V, int n, int *count) {
    float *l = malloc((size_t)V * sizeof *l);
    qf_rng rng;
    qf_rng_seed(&rng, 5);
    memset(count, 0, (size_t)V * sizeof *count);
    for (int i = 0; i < n; i++) {
        memcpy(l, logits, (size_t)V * sizeof *l);
        count[qf_sample_pick(s, o, l, NULL, 0, &rng)]++;
    }
    free(l);
}

static void test_small(void) {
    enum { V = 8 };
    const float *base = BASE8;
    qf_sampler s;
    qf_sampler_init(&s, V);
    float l[V];
    qf_rng rng;
    qf_rng_seed(&rng, 1);
    qf_sample_opts greedy = OPTS(1, 0, 1.0, 1.0, 1.0);
    memcpy(l, base, sizeof l);
    CHECK(qf_sample_pick(&s, &greedy, l, NULL, 0, &rng) == 1, "greedy: first of the tied maxima (id 1)");
    /* penalty 2 on ids 1, 1, 6: 3 -> 1.5 (once, not twice), -1 -> -2 */
    qf_sample_opts pen = OPTS(1, 0, 1.0, 1.0, 2.0);
    int32_t seen[] = {1, 1, 6};
    memcpy(l, base, sizeof l);
    int t = qf_sample_pick(&s, &pen, l, seen, 3, &rng);
    CHECK(t == 3 && l[1] == 1.5f && l[6] == -2.0f && l[3] == 3.0f, "penalty: id %d, l1 %g l6 %g", t, l[1], l[6]);
    /* top-k 3: the k-th largest is 2.0 (ids 1, 3, 5); top-k 2 keeps the tie at 3.0 only */
    int count[V];
    qf_sample_opts k3 = OPTS(0, 3, 1.0, 1.0, 1.0);
    histogram(&s, &k3, base, V, 20000, count);
    CHECK(count[0] == 0 && count[2] == 0 && count[4] == 0 && count[6] == 0 && count[7] == 0 && count[5] > 0,
          "top-k 3 drew outside {1, 3, 5}");
    double z = 2 * exp(3.0) + exp(2.0);
    CHECK(fabs(count[5] / 20000.0 - exp(2.0) / z) < 0.015, "top-k 3: p(5) = %g, want %g", count[5] / 20000.0,
          exp(2.0) / z);
    /* top-p: probabilities of base at T = 1; the two 3.0s hold 2e^3/Z (~0.75): p 0.6 keeps them only, p 0.8 adds 5 */
    qf_sample_opts p6 = OPTS(0, 0, 1.0, 0.6, 1.0), p7 = OPTS(0, 0, 1.0, 0.8, 1.0);
    histogram(&s, &p6, base, V, 5000, count);
    CHECK(count[1] + count[3] == 5000 && count[1] > 2200 && count[3] > 2200, "top-p 0.6: %d %d", count[1], count[3]);
    histogram(&s, &p7, base, V, 5000, count);
    CHECK(count[1] + count[3] + count[5] == 5000 && count[5] > 0, "top-p 0.8 must add id 5: %d", count[5]);
    /* full softmax at T = 0.5: the empirical distribution matches exp(2 l) / Z */
    qf_sample_opts t5 = OPTS(0, 0, 0.5, 1.0, 1.0);
    histogram(&s, &t5, base, V, 40000, count);
    double zz = 0;
    for (int i = 0; i < V; i++) zz += exp(2.0 * base[i]);
    for (int i = 0; i < V; i++)
        CHECK(fabs(count[i] / 40000.0 - exp(2.0 * base[i]) / zz) < 0.01, "T 0.5: id %d p %g want %g", i,
              count[i] / 40000.0, exp(2.0 * base[i]) / zz);
    /* top-k 1 and a tiny top-p are the argmax (the first of ties for top-p: sorted by weight, then id) */
    qf_sample_opts k1 = OPTS(0, 1, 1.0, 1.0, 1.0), tiny = OPTS(0, 0, 1.0, 1e-9, 1.0);
    const float uniq[V] = {0.1f, 0.2f, 4.0f, 0.3f, 0.0f, -1.0f, 3.9f, 2.0f};
    histogram(&s, &k1, uniq, V, 200, count);
    CHECK(count[2] == 200, "top-k 1 != argmax");
    histogram(&s, &tiny, base, V, 200, count);
    CHECK(count[1] == 200, "top-p 1e-9 != the first argmax");
    qf_sampler_free(&s);
}

/* Qwen2.5's vocabulary: top-p alone sorts once per token */
static void test_speed(void) {
    const int V = 151936, n = 10;
    qf_sampler s;
    qf_sampler_init(&s, V);
    float *base = malloc((size_t)V * sizeof *base), *l = malloc((size_t)V * sizeof *l);
    qf_rng rng;
    qf_rng_seed(&rng, 2);
    for (int i = 0; i < V; i++) base[i] = (float)(4.0 * qf_rng_normal(&rng));
    qf_sample_opts p = OPTS(0, 0, 0.7, 0.9, 1.1), k = OPTS(0, 50, 0.7, 0.9, 1.1);
    int32_t seen[64];
    for (int i = 0; i < 64; i++) seen[i] = i * 97;
    for (int which = 0; which < 2; which++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int i = 0; i < n; i++) {
            memcpy(l, base, (size_t)V * sizeof *l);
            int t = qf_sample_pick(&s, which ? &k : &p, l, seen, 64, &rng);
            CHECK(t >= 0 && t < V, "id %d", t);
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        double ms = ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6) / n;
        printf("V = %d, %s: %.2f ms per token\n", V, which ? "top-k 50 + top-p 0.9" : "top-p 0.9 alone", ms);
        CHECK(ms < 500, "%.1f ms per token (the insertion sort took seconds)", ms);
    }
    free(base);
    free(l);
    qf_sampler_free(&s);
}

/* qf_sample_logprobs against the log-softmax written out in long double and a full sort: the chosen id's value,
 * the n most likely in order with ties in id order, n = 0 and n = V; and the raw logits (not the penalised ones) */
static void test_logprobs(void) {
    enum { V = 9 };
    const float l[V] = {0.5f, 2.0f, -1.0f, 2.0f, 3.5f, -7.0f, 0.5f, 1.0f, 2.0f};
    long double mx = 3.5L, sum = 0;
    for (int v = 0; v < V; v++) sum += expl((long double)l[v] - mx);
    int32_t id[V];
    float lp[V];
    for (int chosen = 0; chosen < V; chosen++) {
        const float got = qf_sample_logprobs(l, V, chosen, 0, NULL, NULL);
        const long double want = (long double)l[chosen] - mx - logl(sum);
        CHECK(fabsl((long double)got - want) < 1e-6L, "id %d: %.9g, want %.9Lg", chosen, got, want);
    }
    qf_sample_logprobs(l, V, 2, 5, id, lp); /* 3.5 (4), then the tied 2.0s in id order (1, 3, 8), then 1.0 (7) */
    const int32_t want5[5] = {4, 1, 3, 8, 7};
    for (int k = 0; k < 5; k++) {
        CHECK(id[k] == want5[k], "top %d: id %d, want %d", k, id[k], want5[k]);
        const long double w = (long double)l[want5[k]] - mx - logl(sum);
        CHECK(fabsl((long double)lp[k] - w) < 1e-6L, "top %d: %.9g, want %.9Lg", k, lp[k], w);
    }
    qf_sample_logprobs(l, V, 0, V, id, lp); /* n = V: every id, by logit descending, ties by id */
    const int32_t all[V] = {4, 1, 3, 8, 7, 0, 6, 2, 5};
    int same = 1;
    for (int k = 0; k < V; k++) same &= id[k] == all[k];
    CHECK(same, "n = V: the full order");
    /* at Qwen's vocabulary: the 20 most likely of a random row equal a sort's */
    const int64_t BV = 151936;
    float *big = malloc((size_t)BV * sizeof *big);
    qf_rng rng;
    qf_rng_seed(&rng, 11);
    for (int64_t v = 0; v < BV; v++) big[v] = (float)(qf_rng_uniform(&rng) * 20 - 10);
    int32_t tid[QF_SAMPLE_TOP_MAX];
    float tlp[QF_SAMPLE_TOP_MAX];
    qf_sample_logprobs(big, BV, 0, QF_SAMPLE_TOP_MAX, tid, tlp);
    int order = 1;
    for (int k = 0; k < QF_SAMPLE_TOP_MAX; k++) {
        int64_t above = 0; /* ids strictly above this one, or tied with a lower id: exactly k */
        for (int64_t v = 0; v < BV; v++) above += big[v] > big[tid[k]] || (big[v] == big[tid[k]] && v < tid[k]);
        order &= above == k;
    }
    CHECK(order, "V = %lld: the 20 most likely in order", (long long)BV);
    free(big);
}

/* qf_sample_pick_first: with first = -1 the very draws of qf_sample_pick (the same rng, bit for bit); with a first
 * id the same distribution (the restated probabilities within sampling error over 200,000 draws, under temperature,
 * top-k and top-p, with first inside and outside the kept candidates), and first picked exactly when the draw's u
 * falls below its probability (Leviathan et al.'s acceptance of a proposal of probability 1) */
static void test_first(void) {
    enum { V = 8, N = 200000 };
    const float *base = BASE8;
    qf_sampler s;
    qf_sampler_init(&s, V);
    float l[V];
    const qf_sample_opts opts[] = {OPTS(0, 0, 1.0, 1.0, 1.0), OPTS(0, 0, 0.7, 1.0, 1.0), OPTS(0, 3, 1.0, 1.0, 1.0),
                                   OPTS(0, 0, 1.3, 0.8, 1.0)};
    int same = 1;
    for (int c = 0; c < 4; c++) {
        qf_rng a, b;
        qf_rng_seed(&a, 17), qf_rng_seed(&b, 17);
        for (int i = 0; i < 2000; i++) {
            float l2[V];
            memcpy(l, base, sizeof l), memcpy(l2, base, sizeof l2);
            same &= qf_sample_pick(&s, &opts[c], l, NULL, 0, &a) == qf_sample_pick_first(&s, &opts[c], l2, NULL, 0, 0,
                                                                                         &b, -1);
        }
    }
    CHECK(same, "first = -1: not qf_sample_pick's draws");
    for (int c = 0; c < 4; c++) {
        const qf_sample_opts *o = &opts[c];
        /* the restated distribution: softmax(base / T) over the candidates top-k / top-p keep */
        double p[V], z = 0;
        int keep[V];
        for (int v = 0; v < V; v++) keep[v] = 1, p[v] = exp(base[v] / o->temperature);
        if (o->top_k) { /* {1, 3, 5} at k 3 */
            for (int v = 0; v < V; v++) keep[v] = base[v] >= 2.0f;
        }
        if (o->top_p < 1) { /* by weight: 1, 3 (tied), 5, 0, ...: the smallest prefix reaching top_p */
            const int order[V] = {1, 3, 5, 0, 4, 7, 6, 2};
            double all = 0, acc = 0;
            for (int v = 0; v < V; v++) all += p[v];
            for (int v = 0; v < V; v++) keep[v] = 0;
            for (int i = 0; i < V && acc < o->top_p * all; i++) keep[order[i]] = 1, acc += p[order[i]];
        }
        for (int v = 0; v < V; v++) z += keep[v] ? p[v] : 0;
        for (int first = 0; first < V; first += 3) { /* 0, 3, 6: kept or not, depending on the case */
            int count[V] = {0}, hit = 0;
            qf_rng rng;
            qf_rng_seed(&rng, 23 + (uint64_t)c);
            for (int i = 0; i < N; i++) {
                qf_rng peek = rng;
                const double u = qf_rng_uniform(&peek); /* the draw's u: first iff u < p(first) */
                memcpy(l, base, sizeof l);
                const int t = qf_sample_pick_first(&s, o, l, NULL, 0, 0, &rng, first);
                count[t]++;
                hit += (t == first) != (keep[first] && u < p[first] / z);
            }
            double worst = 0;
            for (int v = 0; v < V; v++) {
                const double want = keep[v] ? p[v] / z : 0, got = (double)count[v] / N;
                const double sd = sqrt(want * (1 - want) / N) + 1e-12;
                if (fabs(got - want) / sd > worst) worst = fabs(got - want) / sd;
                if (!keep[v] && count[v]) worst = 1e9;
            }
            CHECK(worst < 5.0, "case %d, first %d: an id's frequency %.1f standard errors off", c, first, worst);
            CHECK(hit == 0, "case %d, first %d: %d draws took first against u < p(first)", c, first, hit);
        }
    }
    qf_sampler_free(&s);
}

/* serve's additions: logit_bias first; the repetition penalty, then OpenAI's frequency and presence penalties over
 * the generated tokens (nprompt) and TGI's over every token's share, each id once; min-p and typical decoding (a
 * restatement of transformers' TypicalLogitsWarper) by the frequencies of 200,000 draws; which picks need the host */
static void test_serve_params(void) {
    enum { V = 8, N = 200000 };
    const float *base = BASE8;
    qf_sampler s;
    qf_sampler_init(&s, V);
    float l[V];
    qf_rng rng;
    qf_rng_seed(&rng, 3);
    qf_sample_opts o = OPTS(1, 0, 1.0, 1.0, 1.0);
    const int32_t bid[2] = {2, 7};
    const float bv[2] = {6.0f, -100.0f};
    o.nbias = 2, o.bias_id = bid, o.bias = bv;
    memcpy(l, base, sizeof l);
    int t = qf_sample_pick(&s, &o, l, NULL, 0, &rng);
    CHECK(t == 2 && l[2] == 4.0f && l[7] == -100.0f, "logit_bias: pick %d, l2 %g, l7 %g", t, l[2], l[7]);
    /* prompt {1, 1}, generated {3, 3, 5}: frequency 0.5 and presence 0.25 on 3 (twice) and 5 (once), not on 1 */
    const int32_t seen[5] = {1, 1, 3, 3, 5};
    o = OPTS(1, 0, 1.0, 1.0, 1.0), o.frequency_penalty = 0.5, o.presence_penalty = 0.25;
    memcpy(l, base, sizeof l);
    t = qf_sample_pick_first(&s, &o, l, seen, 5, 2, &rng, -1);
    CHECK(t == 1 && l[1] == 3.0f && l[3] == 1.75f && l[5] == 1.25f, "OpenAI penalties: pick %d, l1 %g l3 %g l5 %g", t,
          l[1], l[3], l[5]);
    /* TGI's frequency penalty 1: each id's share of all 5 tokens (1: 2/5, 3: 2/5, 5: 1/5) */
    o = OPTS(1, 0, 1.0, 1.0, 1.0), o.share_penalty = 1.0;
    memcpy(l, base, sizeof l);
    t = qf_sample_pick_first(&s, &o, l, seen, 5, 2, &rng, -1);
    CHECK(t == 1 && l[1] == (float)(3.0 - 0.4) && l[3] == (float)(3.0 - 0.4) && l[5] == (float)(2.0 - 0.2),
          "TGI frequency penalty: pick %d, l1 %g l3 %g l5 %g", t, l[1], l[3], l[5]);
    /* the repetition penalty first (3 -> 1.5 for every seen id), then the frequency penalty on the generated 3s */
    o = OPTS(1, 0, 1.0, 1.0, 2.0), o.frequency_penalty = 0.5;
    memcpy(l, base, sizeof l);
    t = qf_sample_pick_first(&s, &o, l, seen, 5, 2, &rng, -1);
    CHECK(t == 1 && l[1] == 1.5f && l[3] == 0.5f && l[5] == 0.5f, "repetition then frequency: pick %d, l1 %g l3 %g",
          t, l[1], l[3]);
    CHECK(!qf_sample_on_host(&(qf_sample_opts){.greedy = 1, .repetition_penalty = 1.0}), "plain greedy: on device");
    const qf_sample_opts host[] = {{.greedy = 0, .repetition_penalty = 1.0}, {.greedy = 1, .repetition_penalty = 1.2},
                                   {.greedy = 1, .repetition_penalty = 1.0, .nbias = 1},
                                   {.greedy = 1, .repetition_penalty = 1.0, .presence_penalty = 0.1},
                                   {.greedy = 1, .repetition_penalty = 1.0, .frequency_penalty = -0.1},
                                   {.greedy = 1, .repetition_penalty = 1.0, .share_penalty = 0.3}};
    int on_host = 1;
    for (int i = 0; i < 6; i++) on_host &= qf_sample_on_host(&host[i]);
    CHECK(on_host, "sampling, or greedy with a penalty or a bias: on the host");
    /* min-p and typical decoding: the kept set of a restatement, then the frequencies */
    for (int c = 0; c < 4; c++) {
        const double T = c == 3 ? 0.8 : 1.0;
        o = OPTS(0, 0, T, 1.0, 1.0);
        if (c == 0) o.min_p = 0.3;
        else o.typical_p = c == 1 ? 0.5 : 0.9;
        double p[V], z = 0, H = 0;
        int keep[V];
        for (int v = 0; v < V; v++) z += p[v] = exp((base[v] - 3.0) / T);
        for (int v = 0; v < V; v++) p[v] /= z, H -= p[v] * log(p[v]), keep[v] = 1;
        if (c == 0) {
            for (int v = 0; v < V; v++) keep[v] = p[v] >= 0.3 * p[1];
        } else { /* transformers: sort by |-log p - H|, the first whose cumulative mass reaches typical_p and those
                  * before it, with every id of a score no larger */
            double d[V], sd[V];
            for (int v = 0; v < V; v++) d[v] = sd[v] = fabs(-log(p[v]) - H);
            int ord[V];
            for (int v = 0; v < V; v++) ord[v] = v;
            for (int a = 0; a < V; a++)
                for (int b = a + 1; b < V; b++)
                    if (d[ord[b]] < d[ord[a]]) { int x = ord[a]; ord[a] = ord[b], ord[b] = x; }
            int last = 0;
            double acc = 0;
            for (int k = 0; k < V; k++) acc += p[ord[k]], last += acc < o.typical_p;
            if (last > V - 1) last = V - 1;
            for (int v = 0; v < V; v++) keep[v] = sd[v] <= d[ord[last]];
        }
        double kz = 0;
        for (int v = 0; v < V; v++) kz += keep[v] ? p[v] : 0;
        int count[V];
        histogram(&s, &o, base, V, N, count);
        double worst = 0;
        int nkeep = 0;
        for (int v = 0; v < V; v++) {
            const double want = keep[v] ? p[v] / kz : 0, got = (double)count[v] / N;
            nkeep += keep[v];
            if (!keep[v] && count[v]) worst = 1e9;
            else if (keep[v] && fabs(got - want) / sqrt(want * (1 - want) / N + 1e-12) > worst)
                worst = fabs(got - want) / sqrt(want * (1 - want) / N + 1e-12);
        }
        CHECK(worst < 5.0 && nkeep >= 1 && nkeep < V, "%s: %d ids kept, frequencies %.1f standard errors off",
              c == 0 ? "min_p 0.3" : "typical_p", nkeep, worst);
    }
    qf_sampler_free(&s);
}

int main(void) {
    test_small();
    test_first();
    test_serve_params();
    test_logprobs();
    test_speed();
    if (qf_test_failures) fprintf(stderr, "test_sample: %d qf_test_failures\n", qf_test_failures);
    else printf("test_sample: all checks passed\n");
    return qf_test_failures ? 1 : 0;
}
