/* rng.h — the project's one random number generator: xoshiro256** seeded through splitmix64.
 *
 * Portable and deterministic: the same seed gives the same sequence on every platform, compiler and rank, so
 * shuffles, initialisation and sampling reproduce bit for bit, and a checkpoint can store the 4-word state.
 * No global state: the caller owns each qf_rng (one per purpose; derive independent streams with qf_rng_seed2).
 *
 * References: Blackman & Vigna, "Scrambled linear pseudorandom number generators" (xoshiro256**, splitmix64),
 * https://prng.di.unimi.it/ */
#ifndef QF_RNG_H
#define QF_RNG_H
#include <stdint.h>

typedef struct qf_rng {
    uint64_t s[4]; /* xoshiro256** state; never all zero */
} qf_rng;

/* One splitmix64 step: advances *x and returns the next output (used for seeding and hashing). */
uint64_t qf_rng_splitmix64(uint64_t *x);

/* Seeds r from a 64-bit seed: the state is the next 4 splitmix64 outputs starting from x = seed. */
void qf_rng_seed(qf_rng *r, uint64_t seed);
/* Seeds an independent stream (e.g. seed and epoch, seed and rank): the seed is mixed with the stream id
 * through splitmix64 first, so (seed, 0) and (seed, 1) are unrelated sequences. */
void qf_rng_seed2(qf_rng *r, uint64_t seed, uint64_t stream);

/* Next 64 random bits. */
uint64_t qf_rng_next_u64(qf_rng *r);
/* Uniform double in [0, 1): the top 53 bits of the next output times 2^-53. */
double qf_rng_uniform(qf_rng *r);
/* Unbiased integer in [0, n) for n >= 1 (rejection sampling: draws that fall into the incomplete last
 * block of 2^64 are redrawn). n = 0 returns 0. */
uint64_t qf_rng_below(qf_rng *r, uint64_t n);
/* Standard normal N(0, 1) by Box-Muller; each call consumes exactly two outputs (u1, u2) and returns
 * sqrt(-2 ln(1 - u1)) * cos(2 pi u2), so the sequence depends only on the state (no cached second value). */
double qf_rng_normal(qf_rng *r);

/* out[0..n) = a permutation of 0..n-1 drawn by Fisher-Yates with an rng seeded by qf_rng_seed2(seed, epoch).
 * Depends only on (seed, epoch, n). */
void qf_rng_permutation(uint64_t seed, int64_t epoch, int64_t n, int64_t *out);

#endif
