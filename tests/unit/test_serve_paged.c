/* test_serve_paged.c — the paged KV cache of qwen-ft serve on the CPU table:
 *   - attention_paged over shuffled block tables of ragged calls (prompt chunks and decoding tokens of several
 *     sequences, GQA, block sizes 1, 16 and 7) equals, bit for bit, each sequence's tokens alone in generate's
 *     layout (one block of all its positions: the property serve's greedy == generate rests on);
 *   - the block pool (src/serve/serve_kv.c): a slot takes exactly the blocks of its budget, distinct ones; a take
 *     the pool cannot satisfy takes nothing; blocks given back are taken again;
 *   - its prefix cache: a prompt shares the registered blocks it starts with (never the block of its last prompt
 *     token), by their whole chain (the same tokens after another first block share nothing), held blocks are never
 *     evicted, released ones are kept until a take needs them (oldest release first), a block whose parent left the
 *     cache no longer matches, and with the cache off nothing is shared;
 *   - speculation's proposals and drafts (src/serve/serve_spec.c): the longest match first, its latest occurrence,
 *     each draft after the drafts before it; against a plain restatement on random sequences. */
#include <math.h>
#include "ops.h"
#include "qf_test.h"
#include "serve/serve_kv.h"
#include "serve/serve_spec.h"
#include "util.h"

static float *rnd(size_t n, unsigned *s) {
    float *x = qf_malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) *s = *s * 1664525u + 1013904223u, x[i] = (float)((*s >> 8) / 16777216.0 - 0.5);
    return x;
}

/* nseq sequences of prompt lengths plen: call 0 takes chunk tokens of each, later calls a token each */
static void paged_vs_alone(int nseq, const int *plen, int chunk, int calls, int H, int KV, int D, int bs) {
    const qf_ops *o = qf_ops_cpu();
    unsigned seed = 12345u + (unsigned)(nseq * 7 + bs);
    int S = 0;
    for (int s = 0; s < nseq; s++) S = plen[s] + calls > S ? plen[s] + calls : S;
    int maxb = (S + bs - 1) / bs, nblocks = nseq * maxb + 5;
    size_t row = (size_t)KV * D;
    int32_t *btab = qf_malloc((size_t)nseq * maxb * 4), *perm = qf_malloc((size_t)nblocks * 4);
    for (int i = 0; i < nblocks; i++) perm[i] = i;
    for (int i = nblocks - 1; i > 0; i--) {
        seed = seed * 1664525u + 1013904223u;
        int j = (int)(seed % (unsigned)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    memcpy(btab, perm, (size_t)nseq * maxb * 4);
    float *kp = calloc((size_t)nblocks * bs * row, 4), *vp = calloc((size_t)nblocks * bs * row, 4);
    float *kc = calloc((size_t)nseq * S * row, 4), *vc = calloc((size_t)nseq * S * row, 4);
    int *done = calloc((size_t)nseq, sizeof *done), cap = nseq * (chunk + 1), exact = 1;
    int32_t *seq = qf_malloc((size_t)cap * 4), *pos = qf_malloc((size_t)cap * 4);
    for (int call = 0; call < calls; call++) {
        int N = 0, first[64], cnt[64];
        for (int s = 0; s < nseq; s++) {
            int k = done[s] < plen[s] ? (plen[s] - done[s] < chunk ? plen[s] - done[s] : chunk) : 1;
            first[s] = N, cnt[s] = k;
            for (int i = 0; i < k; i++) seq[N] = s, pos[N] = done[s] + i, N++;
        }
        float *q = rnd((size_t)N * H * D, &seed), *k = rnd((size_t)N * row, &seed), *v = rnd((size_t)N * row, &seed);
        float *out = qf_malloc((size_t)N * H * D * 4);
        int max_len = 1;
        for (int n = 0; n < N; n++) max_len = pos[n] + 1 > max_len ? pos[n] + 1 : max_len;
        o->attention_paged(out, q, k, v, kp, vp, seq, pos, btab, N, maxb, bs, H, KV, D, max_len);
        for (int s = 0; s < nseq; s++) { /* the same tokens, one sequence alone, in one block of S positions */
            size_t qo = (size_t)first[s] * H * D, ko = (size_t)first[s] * row, nq = (size_t)cnt[s] * H * D;
            float *ref = qf_malloc(nq * 4);
            int32_t *aseq = qf_calloc((size_t)cnt[s], 4), *apos = qf_malloc((size_t)cnt[s] * 4), one = 0;
            for (int i = 0; i < cnt[s]; i++) apos[i] = done[s] + i;
            int alen = done[s] + cnt[s];
            o->attention_paged(ref, q + qo, k + ko, v + ko, kc + (size_t)s * S * row, vc + (size_t)s * S * row, aseq,
                               apos, &one, cnt[s], 1, S, H, KV, D, alen);
            exact &= !memcmp(ref, out + qo, nq * 4);
            free(ref), free(aseq), free(apos);
        }
        for (int s = 0; s < nseq; s++) done[s] += cnt[s];
        free(q), free(k), free(v), free(out);
    }
    CHECK(exact, "attention_paged of a ragged call != each sequence alone in one block (%d seqs, H %d KV %d D %d, "
                 "blocks of %d)", nseq, H, KV, D, bs);
    free(btab), free(perm), free(kp), free(vp), free(kc), free(vc), free(done), free(seq), free(pos);
}

static void kv_pool(void) {
    qf_kv_pool p;
    qf_kv_init(&p, 10, 16, 4, 3, 0);
    CHECK(qf_kv_blocks_for(&p, 1) == 1 && qf_kv_blocks_for(&p, 16) == 1 && qf_kv_blocks_for(&p, 17) == 2);
    CHECK(qf_kv_take(&p, 0, 64) == 0 && p.nheld[0] == 4 && p.nfree == 6);
    CHECK(qf_kv_take(&p, 1, 50) == 0 && p.nheld[1] == 4 && p.nfree == 2);
    CHECK(qf_kv_take(&p, 2, 40) == -1 && p.nheld[2] == 0 && p.nfree == 2, "a take beyond the pool takes nothing");
    int seen[10] = {0}, dup = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 4; i++) dup |= seen[p.btab[s * 4 + i]]++;
    CHECK(!dup, "two slots share a block");
    qf_kv_give(&p, 0);
    CHECK(p.nfree == 6 && p.nheld[0] == 0);
    CHECK(qf_kv_take(&p, 2, 40) == 0 && p.nheld[2] == 3 && p.nfree == 3, "blocks given back are taken again");
    qf_kv_give(&p, 1), qf_kv_give(&p, 2);
    CHECK(p.nfree == 10);
    qf_kv_free(&p);
}

/* the pool's blocks are each held, free or idle (cached, held by nobody), and each slot's are distinct */
static int kv_consistent(const qf_kv_pool *p) {
    int ok = qf_kv_held(p) + p->nfree + p->nidle == p->nblocks;
    for (int s = 0; s < p->nslots; s++)
        for (int i = 0; i < p->nheld[s]; i++)
            for (int k = 0; k < i; k++) ok &= p->btab[s * p->maxb + i] != p->btab[s * p->maxb + k];
    return ok;
}

static void kv_prefix(void) {
    qf_kv_pool p;
    qf_kv_init(&p, 12, 4, 12, 4, 1); /* blocks of 4 positions */
    int32_t A[14], B[15], D[14];
    for (int i = 0; i < 14; i++) A[i] = 100 + i, D[i] = A[i];
    D[1] = 7; /* another first block, the same tokens after it */
    for (int i = 0; i < 13; i++) B[i] = A[i];
    B[13] = 99, B[14] = 98;
    int c = -1;
    CHECK(qf_kv_take_prefix(&p, 0, A, 14, 20, &c) == 0 && c == 0 && p.nheld[0] == 5, "an empty cache shares nothing");
    qf_kv_register(&p, 0, A, 14); /* its 3 full blocks (positions 0-11) */
    CHECK(qf_kv_take_prefix(&p, 1, B, 15, 20, &c) == 0 && c == 12 && p.nheld[1] == 5, "B shares A's 3 full blocks");
    int same = 1;
    for (int i = 0; i < 3; i++) same &= p.btab[p.maxb + i] == p.btab[i] && p.ref[p.btab[i]] == 2;
    CHECK(same && p.btab[p.maxb + 3] != p.btab[3], "the shared blocks are A's, held twice; the rest B's own");
    CHECK(qf_kv_take_prefix(&p, 2, A, 12, 12, &c) == 0 && c == 8 && p.nheld[2] == 3,
          "a prompt of exactly 3 blocks shares 2: its last token's block is its own");
    qf_kv_give(&p, 2);
    CHECK(qf_kv_take_prefix(&p, 2, D, 14, 14, &c) == 0 && c == 0, "the same later blocks after another first: none");
    qf_kv_give(&p, 2);
    CHECK(kv_consistent(&p) && qf_kv_held(&p) == 7 && p.nfree == 5 && p.nidle == 0);
    qf_kv_give(&p, 0); /* A leaves: its shared blocks stay held by B, its own 2 go back */
    CHECK(kv_consistent(&p) && qf_kv_held(&p) == 5 && p.nidle == 0 && p.nfree == 7);
    qf_kv_give(&p, 1); /* B leaves: A's 3 registered blocks stay cached */
    CHECK(kv_consistent(&p) && qf_kv_held(&p) == 0 && p.nidle == 3 && p.nfree == 9);
    CHECK(qf_kv_take_prefix(&p, 0, B, 15, 15, &c) == 0 && c == 12 && p.nidle == 0, "released blocks are shared again");
    qf_kv_give(&p, 0);
    /* a take of the whole pool evicts them; then nothing is shared */
    CHECK(qf_kv_take(&p, 3, 48) == 0 && p.nidle == 0 && p.nfree == 0 && kv_consistent(&p));
    qf_kv_give(&p, 3);
    CHECK(qf_kv_take_prefix(&p, 0, B, 15, 15, &c) == 0 && c == 0, "evicted blocks match no more");
    qf_kv_register(&p, 0, B, 15);
    const int first = p.btab[0], second = p.btab[1];
    qf_kv_give(&p, 0);
    /* B's 3 registered blocks are released in table order (the first is the oldest) beside 9 free ones: a take of 10
     * evicts the first, so B's chain no longer matches at all, though its second and third are still cached */
    CHECK(p.nidle == 3 && p.nfree == 9 && p.cached[first] && p.cached[second]);
    CHECK(qf_kv_take(&p, 3, 40) == 0 && p.nidle == 2 && !p.cached[first] && p.cached[second],
          "the tenth block is the oldest released one");
    qf_kv_give(&p, 3);
    CHECK(qf_kv_take_prefix(&p, 0, B, 15, 16, &c) == 0 && c == 0, "the chain's first block left: nothing matches");
    qf_kv_register(&p, 0, B, 15); /* B's chain again in new blocks: the stale second and third give way */
    CHECK(!p.cached[second] && kv_consistent(&p));
    qf_kv_give(&p, 0);
    CHECK(qf_kv_take_prefix(&p, 0, B, 15, 16, &c) == 0 && c == 12 && kv_consistent(&p),
          "registered again, the chain matches whole");
    qf_kv_give(&p, 0);
    CHECK(kv_consistent(&p) && qf_kv_held(&p) == 0);
    qf_kv_free(&p);
    qf_kv_init(&p, 12, 4, 8, 4, 0);
    CHECK(qf_kv_take_prefix(&p, 0, A, 14, 20, &c) == 0 && c == 0);
    qf_kv_register(&p, 0, A, 14);
    qf_kv_give(&p, 0);
    CHECK(qf_kv_take_prefix(&p, 0, A, 14, 20, &c) == 0 && c == 0 && p.nidle == 0, "with the cache off nothing is kept");
    qf_kv_free(&p);
}

/* preemption's calls: an admission that leaves a watermark behind, a slot growing block by block, the pool refusing
 * growth with nothing taken, and a preempted slot's registered rows shared again when it comes back */
static void kv_grow(void) {
    qf_kv_pool p;
    qf_kv_init(&p, 8, 4, 8, 3, 1);
    int32_t A[20];
    for (int i = 0; i < 20; i++) A[i] = 300 + i;
    int c = -1;
    CHECK(qf_kv_admit(&p, 0, A, 9, 9, 5, &c) == 0 && p.nheld[0] == 3 && c == 0, "9 positions: 3 blocks, 5 left");
    CHECK(qf_kv_admit(&p, 1, A + 10, 5, 5, 7, &c) == -1 && p.nheld[1] == 0 && p.nfree == 5,
          "an admission that would leave fewer than the watermark: nothing taken");
    CHECK(qf_kv_admit(&p, 1, A + 10, 5, 5, 3, &c) == 0 && p.nheld[1] == 2 && p.nfree == 3, "5 positions, 3 kept");
    const int32_t first = p.btab[0];
    CHECK(qf_kv_grow(&p, 0, 12) == 0 && p.nheld[0] == 3 && p.nfree == 3, "growing within the blocks held: none taken");
    CHECK(qf_kv_grow(&p, 0, 13) == 0 && p.nheld[0] == 4 && p.nfree == 2 && p.btab[0] == first,
          "one position more: one more block, the table's start unchanged");
    CHECK(qf_kv_grow(&p, 0, 28) == -1 && p.nheld[0] == 4 && p.nfree == 2, "beyond the pool: refused, nothing taken");
    CHECK(qf_kv_grow(&p, 0, 20) == 0 && p.nheld[0] == 5 && p.nfree == 1 && kv_consistent(&p), "to 20 positions");
    /* slot 1 preempted: its full block registered and given back, then admitted again sharing it */
    qf_kv_register(&p, 1, A + 10, 4);
    qf_kv_give(&p, 1);
    CHECK(p.nfree == 2 && p.nidle == 1 && kv_consistent(&p), "preempted: one block free, its full one cached");
    CHECK(qf_kv_admit(&p, 1, A + 10, 6, 6, 1, &c) == 0 && c == 4 && p.nheld[1] == 2 && p.nidle == 0 && p.nfree == 1,
          "back with 6 positions: the cached block shared, one fresh block");
    CHECK(kv_consistent(&p), "consistent after growth and preemption");
    qf_kv_free(&p);
}

/* speculation's proposals (serve_spec.h) against a plain restatement: for g = 3, 2, 1 (g < L), the latest i with
 * a[i .. i+g) == a[L-g .. L) and i + g < L, the token a[i+g] */
static int32_t spec_ref(const int32_t *a, int L) {
    for (int g = L - 1 < QF_SPEC_NGRAM ? L - 1 : QF_SPEC_NGRAM; g >= 1; g--)
        for (int i = L - g - 1; i >= 0; i--)
            if (!memcmp(a + i, a + L - g, (size_t)g * sizeof *a)) return a[i + g];
    return -1;
}

static int spec_is(const int32_t *ids, int n, int maxd, const int32_t *want, int k) {
    int32_t out[QF_SPEC_MAX] = {0};
    const int got = qf_spec_drafts(ids, n, maxd, out);
    return got == k && (k == 0 || !memcmp(out, want, (size_t)k * sizeof *out));
}

static void spec_drafts(void) {
    const int32_t none[] = {1, 2, 3, 4}, rep[] = {5, 6, 7, 5, 6, 7}, late[] = {1, 2, 9, 1, 2, 8, 1, 2};
    const int32_t longest[] = {7, 1, 2, 3, 9, 2, 3, 4, 1, 2, 3}, two[] = {4, 4};
    CHECK(spec_is(none, 4, 4, NULL, 0), "no earlier occurrence: no draft");
    CHECK(spec_is(none, 1, 4, NULL, 0) && spec_is(rep, 6, 0, NULL, 0), "one token, or maxd 0: no draft");
    CHECK(spec_is(rep, 6, 4, (const int32_t[]){5, 6, 7, 5}, 4), "a cycle: each draft after the drafts before it");
    CHECK(spec_is(rep, 6, 2, (const int32_t[]){5, 6}, 2), "at most maxd");
    CHECK(spec_is(late, 8, 2, (const int32_t[]){8, 1}, 2), "the latest earlier occurrence, not the first");
    CHECK(spec_is(longest, 11, 2, (const int32_t[]){9, 2}, 2), "the 3-token match before a later 2- or 1-token one");
    CHECK(spec_is(two, 2, 5, (const int32_t[]){4, 4, 4, 4, 4}, 5), "a repeated token: itself");
    /* random sequences over small alphabets: qf_spec_next == the restatement, split anywhere between ids and ext,
     * and the drafts == the restatement's chain */
    unsigned seed = 99;
    int bad = 0;
    for (int trial = 0; trial < 3000; trial++) {
        int32_t a[64 + QF_SPEC_MAX];
        const int L = 1 + trial % 60, A = 2 + trial % 5;
        for (int i = 0; i < L; i++) seed = seed * 1664525u + 1013904223u, a[i] = (int32_t)((seed >> 16) % (unsigned)A);
        const int n = (int)((seed >> 8) % (unsigned)(L + 1));
        bad += qf_spec_next(a, n, a + n, L - n) != spec_ref(a, L);
        int32_t out[QF_SPEC_MAX];
        const int k = qf_spec_drafts(a, L, QF_SPEC_MAX, out);
        int want = 0;
        for (; want < QF_SPEC_MAX; want++) {
            const int32_t t = spec_ref(a, L + want);
            if (t < 0) break;
            a[L + want] = t;
        }
        bad += k != want || (k && memcmp(out, a + L, (size_t)k * sizeof *out));
    }
    CHECK(bad == 0, "%d of 3000 random sequences: proposals or drafts differ from the restatement", bad);
}

int main(void) {
    const int a[] = {9, 1, 40}, b[] = {100, 3, 17, 64, 5};
    paged_vs_alone(3, a, 8, 5, 4, 4, 16, 16);
    paged_vs_alone(5, b, 32, 4, 8, 2, 32, 16);
    paged_vs_alone(5, b, 13, 6, 6, 2, 24, 7);
    paged_vs_alone(3, a, 4, 3, 4, 1, 8, 1);
    kv_pool();
    kv_prefix();
    kv_grow();
    spec_drafts();
    printf("test_serve_paged: %d checks, %d failed\n", qf_test_checks, qf_test_failures);
    return qf_test_failures != 0;
}
