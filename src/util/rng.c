/* rng.c — xoshiro256** with splitmix64 seeding; see rng.h. */
#include "rng.h"
#include <math.h>

uint64_t qf_rng_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void qf_rng_seed(qf_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = qf_rng_splitmix64(&x);
    /* splitmix64 is a bijection of its counter, so four consecutive outputs are never all zero; guard anyway */
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0) r->s[0] = 1;
}

void qf_rng_seed2(qf_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = stream ^ 0xD1B54A32D192ED03ull;
    uint64_t h = qf_rng_splitmix64(&x); /* hash of the stream id */
    qf_rng_seed(r, seed ^ h);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t qf_rng_next_u64(qf_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double qf_rng_uniform(qf_rng *r) {
    return (double)(qf_rng_next_u64(r) >> 11) * 0x1.0p-53;
}

uint64_t qf_rng_below(qf_rng *r, uint64_t n) {
    if (n <= 1) return 0;
    /* 2^64 mod n: the draws below it form the incomplete block; the rest is a whole number of blocks of n */
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t x = qf_rng_next_u64(r);
        if (x >= threshold) return x % n;
    }
}

double qf_rng_normal(qf_rng *r) {
    double u1 = qf_rng_uniform(r); /* [0,1) */
    double u2 = qf_rng_uniform(r);
    double rad = sqrt(-2.0 * log(1.0 - u1)); /* 1-u1 in (0,1]: log is finite */
    return rad * cos(6.283185307179586476925286766559 * u2);
}

void qf_rng_permutation(uint64_t seed, int64_t epoch, int64_t n, int64_t *out) {
    qf_rng r;
    qf_rng_seed2(&r, seed, (uint64_t)epoch);
    for (int64_t i = 0; i < n; i++) out[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)qf_rng_below(&r, (uint64_t)i + 1);
        int64_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}
