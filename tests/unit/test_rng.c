/* test_rng.c — src/util/rng.c: reference values of splitmix64 and xoshiro256** (Vigna's reference outputs), our
 * seeding and derived values (cross-checked against an independent Python transcription), determinism,
 * distribution sanity, unbiased bounded integers, and permutations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/rng.h"
#include "qf_test.h"


static void test_reference_values(void) {
    /* splitmix64 from x = 0 (published reference outputs) */
    const uint64_t sm[4] = {0xE220A8397B1DCDAFull, 0x6E789E6AA1B965F4ull, 0x06C45D188009454Full,
                            0xF88BB8A8724C81ECull};
    uint64_t x = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t v = qf_rng_splitmix64(&x);
        CHECK(v == sm[i], "splitmix64 output %d = %016llx, want %016llx", i, (unsigned long long)v,
              (unsigned long long)sm[i]);
    }
    /* qf_rng_seed(0) is exactly those four words */
    qf_rng r;
    qf_rng_seed(&r, 0);
    for (int i = 0; i < 4; i++) CHECK(r.s[i] == sm[i], "seed(0) state word %d", i);
    /* xoshiro256** from state {1,2,3,4} (reference outputs) */
    r.s[0] = 1, r.s[1] = 2, r.s[2] = 3, r.s[3] = 4;
    const uint64_t xo[6] = {11520ull, 0ull, 1509978240ull, 1215971899390074240ull, 1216172134540287360ull,
                            607988272756665600ull};
    for (int i = 0; i < 6; i++) {
        uint64_t v = qf_rng_next_u64(&r);
        CHECK(v == xo[i], "xoshiro256** output %d = %llu, want %llu", i, (unsigned long long)v,
              (unsigned long long)xo[i]);
    }
    /* seed(42): first outputs (independent Python transcription of rng.h) */
    qf_rng_seed(&r, 42);
    const uint64_t s42[3] = {0x15780b2e0c2ec716ull, 0x6104d9866d113a7eull, 0xae17533239e499a1ull};
    for (int i = 0; i < 3; i++) {
        uint64_t v = qf_rng_next_u64(&r);
        CHECK(v == s42[i], "seed(42) output %d = %016llx", i, (unsigned long long)v);
    }
    qf_rng_seed(&r, 7);
    double u = qf_rng_uniform(&r);
    CHECK(u == 0.7005764821796896, "uniform after seed(7) = %.17g", u);
    qf_rng_seed(&r, 7);
    double z = qf_rng_normal(&r);
    CHECK(fabs(z - -0.2790239910251981) < 1e-15, "normal after seed(7) = %.17g", z);
}

static void test_determinism(void) {
    qf_rng a, b, c;
    qf_rng_seed(&a, 12345);
    qf_rng_seed(&b, 12345);
    qf_rng_seed(&c, 12346);
    int same_ab = 1, same_ac = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = qf_rng_next_u64(&a), y = qf_rng_next_u64(&b), w = qf_rng_next_u64(&c);
        same_ab &= x == y;
        same_ac += x == w;
    }
    CHECK(same_ab, "same seed gives the same sequence");
    CHECK(same_ac == 0, "seeds 12345 and 12346 share %d outputs", same_ac);
    /* streams: (seed, 0) and (seed, 1) differ; (seed, s) repeats */
    qf_rng s0, s1, s0b;
    qf_rng_seed2(&s0, 9, 0);
    qf_rng_seed2(&s1, 9, 1);
    qf_rng_seed2(&s0b, 9, 0);
    uint64_t v0 = qf_rng_next_u64(&s0), v1 = qf_rng_next_u64(&s1), v0b = qf_rng_next_u64(&s0b);
    CHECK(v0 != v1, "streams 0 and 1 differ");
    CHECK(v0 == v0b, "stream 0 repeats");
    /* normal: two outputs per call, no hidden state: copying the struct replays it */
    qf_rng n1;
    qf_rng_seed(&n1, 5);
    qf_rng n2 = n1;
    double z1 = qf_rng_normal(&n1), z2 = qf_rng_normal(&n2);
    CHECK(z1 == z2, "normal replays from a copied state");
    qf_rng u1;
    qf_rng_seed(&u1, 5);
    qf_rng_next_u64(&u1);
    qf_rng_next_u64(&u1);
    CHECK(memcmp(&u1, &n1, sizeof u1) == 0, "normal consumes exactly two outputs");
}

static void test_distributions(void) {
    qf_rng r;
    qf_rng_seed(&r, 2024);
    const int N = 200000;
    double sum = 0, sum2 = 0, nsum = 0, nsum2 = 0;
    double umin = 1, umax = 0;
    for (int i = 0; i < N; i++) {
        double u = qf_rng_uniform(&r);
        umin = u < umin ? u : umin;
        umax = u > umax ? u : umax;
        sum += u;
        sum2 += u * u;
        double z = qf_rng_normal(&r);
        CHECK(isfinite(z), "normal is finite");
        nsum += z;
        nsum2 += z * z;
    }
    CHECK(umin >= 0 && umax < 1, "uniform in [0,1): min %g max %g", umin, umax);
    double mean = sum / N, var = sum2 / N - mean * mean;
    CHECK(fabs(mean - 0.5) < 0.005, "uniform mean %g", mean);
    CHECK(fabs(var - 1.0 / 12) < 0.002, "uniform variance %g", var);
    double nmean = nsum / N, nvar = nsum2 / N - nmean * nmean;
    CHECK(fabs(nmean) < 0.01, "normal mean %g", nmean);
    CHECK(fabs(nvar - 1) < 0.02, "normal variance %g", nvar);

    /* bounded integers: range and a chi-square test on n = 7 */
    CHECK(qf_rng_below(&r, 1) == 0 && qf_rng_below(&r, 0) == 0, "below(1) and below(0) are 0");
    long cnt[7] = {0};
    const int M = 70000;
    for (int i = 0; i < M; i++) {
        uint64_t v = qf_rng_below(&r, 7);
        CHECK(v < 7, "below(7) = %llu", (unsigned long long)v);
        if (v < 7) cnt[v]++;
    }
    double chi = 0;
    for (int k = 0; k < 7; k++) chi += (cnt[k] - M / 7.0) * (cnt[k] - M / 7.0) / (M / 7.0);
    CHECK(chi < 22.5, "below(7) chi-square %g (6 dof, p = 0.001 at 22.46)", chi);
    /* a bound near 2^64 (most draws of the incomplete block are rejected): still in range */
    uint64_t big = (1ull << 63) + 12345;
    for (int i = 0; i < 1000; i++) CHECK(qf_rng_below(&r, big) < big, "below(2^63+12345) in range");
}

static int is_perm(const int64_t *p, int64_t n) {
    char *seen = calloc((size_t)n + 1, 1);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        if (p[i] < 0 || p[i] >= n || seen[p[i]]) ok = 0;
        else seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_permutation(void) {
    const int64_t want0[10] = {5, 3, 7, 2, 0, 6, 9, 1, 8, 4}; /* Python transcription of rng.h */
    const int64_t want1[10] = {3, 8, 0, 9, 6, 2, 4, 5, 7, 1};
    int64_t p[10];
    qf_rng_permutation(42, 0, 10, p);
    CHECK(memcmp(p, want0, sizeof p) == 0, "permutation(42, 0, 10) = %lld %lld %lld ...", (long long)p[0],
          (long long)p[1], (long long)p[2]);
    qf_rng_permutation(42, 1, 10, p);
    CHECK(memcmp(p, want1, sizeof p) == 0, "permutation(42, 1, 10) = %lld %lld %lld ...", (long long)p[0],
          (long long)p[1], (long long)p[2]);

    int64_t e0 = 0, e1 = 0;
    qf_rng_permutation(1, 0, 0, &e0); /* n = 0: writes nothing */
    qf_rng_permutation(1, 0, 1, &e1);
    CHECK(e1 == 0, "permutation of 1 is [0]");

    const int64_t n = 1000;
    int64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c),
            *d = malloc(n * sizeof *d);
    qf_rng_permutation(7, 3, n, a);
    qf_rng_permutation(7, 3, n, b);
    qf_rng_permutation(7, 4, n, c);
    qf_rng_permutation(8, 3, n, d);
    CHECK(is_perm(a, n) && is_perm(c, n) && is_perm(d, n), "outputs are permutations of 0..n-1");
    CHECK(memcmp(a, b, n * sizeof *a) == 0, "same (seed, epoch) gives the same permutation");
    CHECK(memcmp(a, c, n * sizeof *a) != 0, "the permutation depends on the epoch");
    CHECK(memcmp(a, d, n * sizeof *a) != 0, "the permutation depends on the seed");
    int fixed = 0;
    for (int64_t i = 0; i < n; i++) fixed += a[i] == i;
    CHECK(fixed < 10, "a shuffle, not the identity (%d fixed points)", fixed);

    /* unbiased: over many permutations of 3, all 6 orders appear about equally often */
    long orders[6] = {0};
    const int R = 60000;
    for (int k = 0; k < R; k++) {
        int64_t q[3];
        qf_rng_permutation(99, k, 3, q);
        int code = (int)(q[0] * 2 + (q[1] > q[2]));
        orders[code]++;
    }
    double chi = 0;
    for (int k = 0; k < 6; k++) chi += (orders[k] - R / 6.0) * (orders[k] - R / 6.0) / (R / 6.0);
    CHECK(chi < 20.5, "orders of 3 chi-square %g (5 dof, p = 0.001 at 20.5)", chi);
    free(a);
    free(b);
    free(c);
    free(d);
}

int main(void) {
    test_reference_values();
    test_determinism();
    test_distributions();
    test_permutation();
    return qf_test_end("test_rng", NULL);
}
