/* test_loader.c — src/model/loader.c against the packing semantics of loader.h / docs/formats.md ("Packing"):
 * the hand-computed example of docs/formats.md, a long document split across rows, loss_mask zeros, padding
 * and rows past the end, shuffling (order changes with the epoch, every token covered once), statelessness
 * (same (epoch, row) gives the same row whatever was read before), and a brute-force reference that
 * materialises the whole stream, on random datasets with empty documents. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dataset.h"
#include "model/loader.h"
#include "util/rng.h"
#include "qf_test.h"


static char dir[256];

/* Writes the builder to dir/name and opens it. */
static void make_ds(const char *name, qf_dataset_builder *b, int64_t eos, int64_t pad, qf_dataset *ds) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    qf_err e = {0};
    if (qf_dataset_write(path, b, NULL, 0, 0, eos, pad, "", "test", &e) ||
        qf_dataset_open(path, ds, &e)) {
        fprintf(stderr, "cannot make %s: %s\n", path, e.msg);
        exit(1);
    }
}

static int eq32(const int32_t *a, const int32_t *b, int n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }
static int eq64(const int64_t *a, const int64_t *b, int n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

/* The builder b written as dir/name with the given eos and pad ids: the last two tokens of its row 2 at T = 4
 * (padding, for the 10 tokens of the worked example below) in pad[2]. */
static void padding_of(const char *name, qf_dataset_builder *b, int64_t eos, int64_t pad_id, int32_t pad[2]) {
    qf_dataset ds;
    qf_loader l;
    qf_rows r;
    qf_err e = {0};
    make_ds(name, b, eos, pad_id, &ds);
    qf_loader_init(&l, &ds, 4, 0, 42);
    qf_rows_alloc(&r, 1, 4);
    qf_loader_rows(&l, 0, 2, &r, &e);
    pad[0] = r.tokens[2], pad[1] = r.tokens[3];
    qf_rows_free(&r);
    qf_loader_free(&l);
    qf_dataset_close(&ds);
}

/* docs of lengths 3, 5, 2 and T = 4 (the worked example of docs/formats.md) */
static void test_worked_example(void) {
    qf_dataset_builder b;
    qf_dsb_init(&b);
    const uint32_t d0[3] = {10, 11, 12}, d1[5] = {20, 21, 22, 23, 24}, d2[2] = {30, 31};
    const uint8_t m1[5] = {1, 1, 0, 1, 1}; /* token 22 is not a target */
    qf_dsb_add_doc(&b, d0, NULL, 3);
    qf_dsb_add_doc(&b, d1, m1, 5);
    qf_dsb_add_doc(&b, d2, NULL, 2);
    qf_dataset ds;
    make_ds("example.h5", &b, 151643, 9, &ds);
    qf_loader l;
    qf_loader_init(&l, &ds, 4, 0, 42);
    CHECK(l.rows_per_epoch == 3, "rows_per_epoch = ceil(10/4) = 3, got %lld", (long long)l.rows_per_epoch);
    qf_rows r;
    qf_rows_alloc(&r, 4, 4); /* rows 0..3: the last is past the end */
    qf_err e = {0};
    int rc = qf_loader_rows(&l, 0, 0, &r, &e);
    CHECK(rc == 0, "rows: %s", e.msg);
    /* stream: 10 11 12 20 | 21 22 23 24 | 30 31 P P | P P P P */
    const int32_t tokens[16] = {10, 11, 12, 20, 21, 22, 23, 24, 30, 31, 9, 9, 9, 9, 9, 9};
    const int32_t seg[16] = {0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 2, 3, 0, 1, 2, 3};
    const int32_t pos[16] = {0, 1, 2, 0, 0, 1, 2, 3, 0, 1, 0, 0, 0, 0, 0, 0};
    const int64_t doc[16] = {0, 0, 0, 1, 1, 1, 1, 1, 2, 2, -1, -1, -1, -1, -1, -1};
    /* row 0: 12 -> 20 crosses documents; row 1: 21 -> 22 has mask 0, 24 is the row's last position */
    const int32_t tgt[16] = {11, 12, -1, -1, -1, 23, 24, -1, 31, -1, -1, -1, -1, -1, -1, -1};
    CHECK(eq32(r.tokens, tokens, 16), "tokens");
    CHECK(eq32(r.seg_start, seg, 16), "seg_start");
    CHECK(eq32(r.pos, pos, 16), "pos");
    CHECK(eq64(r.doc, doc, 16), "doc");
    CHECK(eq32(r.targets, tgt, 16), "targets");
    CHECK(r.n_targets == 5, "n_targets = 5, got %lld", (long long)r.n_targets);
    for (int i = 0; i < 16; i++)
        if (r.targets[i] != tgt[i] || r.tokens[i] != tokens[i] || r.seg_start[i] != seg[i])
            fprintf(stderr, "  [%d] token %d/%d seg %d/%d target %d/%d\n", i, r.tokens[i], tokens[i], r.seg_start[i],
                    seg[i], r.targets[i], tgt[i]);

    /* rows far past the end: all padding, no targets */
    rc = qf_loader_rows(&l, 0, 1000, &r, &e);
    int pad_ok = rc == 0 && r.n_targets == 0;
    for (int i = 0; i < 16; i++)
        pad_ok &= r.tokens[i] == 9 && r.targets[i] == -1 && r.doc[i] == -1 && r.seg_start[i] == i % 4 && r.pos[i] == 0;
    CHECK(pad_ok, "rows past the end are empty");
    qf_rows_free(&r);
    qf_loader_free(&l);
    qf_dataset_close(&ds);

    /* pad id unknown: eos; both unknown: 0 */
    int32_t pad[2];
    padding_of("example_nopad.h5", &b, 7, -1, pad);
    CHECK(pad[0] == 7 && pad[1] == 7, "pad falls back to eos: %d", pad[1]);
    padding_of("example_noids.h5", &b, -1, -1, pad);
    CHECK(pad[0] == 0 && pad[1] == 0, "pad falls back to 0: %d", pad[1]);
    qf_dsb_free(&b);
}

/* one document of 10 tokens, T = 4: three segments with positions restarting, no target across rows */
static void test_long_document(void) {
    qf_dataset_builder b;
    qf_dsb_init(&b);
    uint32_t t[10];
    uint8_t m[10];
    for (int i = 0; i < 10; i++) t[i] = 100 + i, m[i] = i != 6; /* token 106 not a target */
    qf_dsb_add_doc(&b, t, m, 10);
    qf_dataset ds;
    make_ds("long.h5", &b, 0, 0, &ds);
    qf_loader l;
    qf_loader_init(&l, &ds, 4, 1, 5); /* shuffle of one document is trivial */
    qf_rows r;
    qf_rows_alloc(&r, 3, 4);
    qf_err e = {0};
    CHECK(qf_loader_rows(&l, 3, 0, &r, &e) == 0, "rows: %s", e.msg);
    const int32_t tok[12] = {100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 0, 0};
    const int32_t pos[12] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 0, 0};
    const int32_t seg[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3};
    const int32_t tgt[12] = {101, 102, 103, -1, 105, -1, 107, -1, 109, -1, -1, -1};
    CHECK(eq32(r.tokens, tok, 12) && eq32(r.pos, pos, 12) && eq32(r.seg_start, seg, 12), "split document layout");
    CHECK(eq32(r.targets, tgt, 12), "split document targets");
    CHECK(r.n_targets == 6, "n_targets %lld", (long long)r.n_targets);
    qf_rows_free(&r);
    qf_loader_free(&l);
    qf_dataset_close(&ds);
    qf_dsb_free(&b);
}

/* Reference: materialise the epoch's stream and cut row `row` out of it. */
static void ref_row(const qf_dataset_builder *b, int shuffle, uint64_t seed, int64_t epoch, int T, int64_t row,
                    int32_t pad, int32_t *tok, int32_t *tgt, int32_t *seg, int32_t *pos, int64_t *doc) {
    int64_t n = b->n_docs;
    int64_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (shuffle)
        qf_rng_permutation(seed, epoch, n, order);
    else
        for (int64_t i = 0; i < n; i++) order[i] = i;
    int64_t N = b->n_tokens;
    int32_t *st = malloc((size_t)(N ? N : 1) * sizeof *st);
    uint8_t *sm = malloc((size_t)(N ? N : 1));
    int64_t *sd = malloc((size_t)(N ? N : 1) * sizeof *sd);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        for (uint64_t j = b->offsets[order[i]]; j < b->offsets[order[i] + 1]; j++, k++)
            st[k] = (int32_t)b->tokens[j], sm[k] = b->mask[j], sd[k] = order[i];
    uint8_t *mk = calloc((size_t)T, 1);
    for (int t = 0; t < T; t++) {
        int64_t p = row * T + t;
        if (p < N) {
            tok[t] = st[p], doc[t] = sd[p], mk[t] = sm[p];
            seg[t] = (t > 0 && doc[t - 1] == doc[t]) ? seg[t - 1] : t;
        } else {
            tok[t] = pad, doc[t] = -1, seg[t] = t;
        }
        pos[t] = t - seg[t];
    }
    for (int t = 0; t < T; t++)
        tgt[t] = (t + 1 < T && doc[t] >= 0 && doc[t + 1] == doc[t] && mk[t + 1]) ? tok[t + 1] : -1;
    free(mk);
    free(order);
    free(st);
    free(sm);
    free(sd);
}

static void test_against_reference(void) {
    qf_rng g;
    qf_rng_seed(&g, 77);
    for (int trial = 0; trial < 6; trial++) {
        qf_dataset_builder b;
        qf_dsb_init(&b);
        int ndocs = 1 + (int)qf_rng_below(&g, 40);
        for (int d = 0; d < ndocs; d++) {
            int len = (int)qf_rng_below(&g, 25); /* includes empty documents */
            uint32_t t[32];
            uint8_t m[32];
            for (int i = 0; i < len; i++) t[i] = (uint32_t)(d * 100 + i), m[i] = qf_rng_below(&g, 4) != 0;
            qf_dsb_add_doc(&b, t, m, len);
        }
        char name[64];
        snprintf(name, sizeof name, "ref%d.h5", trial);
        qf_dataset ds;
        make_ds(name, &b, 3, 5, &ds);
        static const int Ts[4] = {1, 3, 8, 17};
        for (int ti = 0; ti < 4; ti++) {
            int T = Ts[ti];
            for (int shuffle = 0; shuffle < 2; shuffle++) {
                qf_loader l;
                qf_loader_init(&l, &ds, T, shuffle, 1234);
                const int B = 3;
                qf_rows r;
                qf_rows_alloc(&r, B, T);
                int32_t tok[17], tgt[17], seg[17], pos[17];
                int64_t doc[17];
                int bad = 0;
                for (int64_t epoch = 0; epoch < 3; epoch++)
                    for (int64_t row0 = 0; row0 < l.rows_per_epoch + 2; row0 += B) {
                        qf_err e = {0};
                        if (qf_loader_rows(&l, epoch, row0, &r, &e)) {
                            bad++;
                            continue;
                        }
                        for (int bb = 0; bb < B; bb++) {
                            ref_row(&b, shuffle, 1234, epoch, T, row0 + bb, 5, tok, tgt, seg, pos, doc);
                            size_t o = (size_t)bb * T;
                            bad += !eq32(r.tokens + o, tok, T) || !eq32(r.targets + o, tgt, T) ||
                                   !eq32(r.seg_start + o, seg, T) || !eq32(r.pos + o, pos, T) ||
                                   !eq64(r.doc + o, doc, T);
                        }
                    }
                CHECK(bad == 0, "trial %d T %d shuffle %d: %d rows differ from the reference", trial, T, shuffle, bad);
                qf_rows_free(&r);
                qf_loader_free(&l);
            }
        }
        qf_dataset_close(&ds);
        qf_dsb_free(&b);
    }
}

/* 50 documents of lengths 1..12: shuffling reorders by epoch, covers every token once, and rows are a pure
 * function of (epoch, row). */
static void test_shuffle_and_statelessness(void) {
    qf_dataset_builder b;
    qf_dsb_init(&b);
    for (int d = 0; d < 50; d++) {
        uint32_t t[12];
        int len = 1 + d % 12;
        for (int i = 0; i < len; i++) t[i] = (uint32_t)(1000 * d + i);
        qf_dsb_add_doc(&b, t, NULL, len);
    }
    qf_dataset ds;
    make_ds("shuffle.h5", &b, 0, 0, &ds);
    const int T = 8;
    qf_loader l;
    qf_loader_init(&l, &ds, T, 1, 42);
    int64_t R = l.rows_per_epoch;
    qf_rows all0, all1;
    qf_rows_alloc(&all0, (int)R, T);
    qf_rows_alloc(&all1, (int)R, T);
    qf_err e = {0};
    CHECK(qf_loader_rows(&l, 0, 0, &all0, &e) == 0 && qf_loader_rows(&l, 1, 0, &all1, &e) == 0, "%s", e.msg);
    /* coverage: every token of every document appears exactly once per epoch */
    for (int ep = 0; ep < 2; ep++) {
        qf_rows *a = ep ? &all1 : &all0;
        int *count = calloc(50 * 1000, sizeof *count);
        int ok = 1;
        for (int64_t i = 0; i < R * T; i++)
            if (a->doc[i] >= 0) {
                if (a->tokens[i] / 1000 != a->doc[i]) ok = 0;
                count[a->tokens[i]]++;
            }
        for (int d = 0; d < 50; d++)
            for (int i = 0; i < 1 + d % 12; i++) ok &= count[1000 * d + i] == 1;
        CHECK(ok, "epoch %d covers every token once", ep);
        free(count);
    }
    /* order: not input order, and different between epochs */
    int64_t first0 = all0.doc[0], first1 = all1.doc[0];
    int in_order = 1;
    for (int64_t i = 1; i < R * T; i++)
        if (all0.doc[i] >= 0 && all0.doc[i - 1] >= 0 && all0.doc[i] < all0.doc[i - 1]) in_order = 0;
    CHECK(!in_order, "shuffled epoch 0 is not in input order");
    CHECK(!eq64(all0.doc, all1.doc, (int)(R * T)), "epochs 0 and 1 differ (first docs %lld, %lld)",
          (long long)first0, (long long)first1);
    /* the epoch order is the seeded permutation */
    int64_t perm[50];
    qf_rng_permutation(42, 1, 50, perm);
    CHECK(all1.doc[0] == perm[0], "epoch 1 starts with permutation(42, 1)[0] = %lld, got %lld", (long long)perm[0],
          (long long)all1.doc[0]);

    /* statelessness: (epoch 1, row 5) after other reads, and from a fresh loader */
    qf_rows one, again, fresh;
    qf_rows_alloc(&one, 2, T);
    qf_rows_alloc(&again, 2, T);
    qf_rows_alloc(&fresh, 2, T);
    qf_loader_rows(&l, 1, 5, &one, &e);
    qf_rows junk;
    qf_rows_alloc(&junk, 3, T);
    qf_loader_rows(&l, 0, 2, &junk, &e);
    qf_loader_rows(&l, 7, 0, &junk, &e);
    qf_loader_rows(&l, 1, 9, &junk, &e);
    qf_loader_rows(&l, 1, 5, &again, &e);
    qf_loader l2;
    qf_loader_init(&l2, &ds, T, 1, 42);
    qf_loader_rows(&l2, 1, 5, &fresh, &e);
    int n = 2 * T;
    CHECK(eq32(one.tokens, again.tokens, n) && eq32(one.targets, again.targets, n) &&
              eq32(one.seg_start, again.seg_start, n) && eq64(one.doc, again.doc, n) && one.n_targets == again.n_targets,
          "same (epoch, row) after other reads");
    CHECK(eq32(one.tokens, fresh.tokens, n) && eq32(one.targets, fresh.targets, n) && eq64(one.doc, fresh.doc, n),
          "same (epoch, row) from a fresh loader");
    CHECK(eq32(one.tokens, all1.tokens + 5 * T, n) && eq32(one.targets, all1.targets + 5 * T, n),
          "a batch of rows equals the same rows read in a larger batch");
    /* a different seed gives a different order */
    qf_loader l3;
    qf_loader_init(&l3, &ds, T, 1, 43);
    qf_loader_rows(&l3, 1, 5, &fresh, &e);
    CHECK(!eq64(one.doc, fresh.doc, n), "the seed changes the order");

    /* negative indices are refused */
    qf_err e2 = {0};
    CHECK(qf_loader_rows(&l, -1, 0, &junk, &e2) != 0, "negative epoch refused");

    qf_rows_free(&one);
    qf_rows_free(&again);
    qf_rows_free(&fresh);
    qf_rows_free(&junk);
    qf_rows_free(&all0);
    qf_rows_free(&all1);
    qf_loader_free(&l);
    qf_loader_free(&l2);
    qf_loader_free(&l3);
    qf_dataset_close(&ds);
    qf_dsb_free(&b);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (qf_test_mkdtemp(dir, sizeof dir, "/tmp/qf_test_loader.XXXXXX")) return 1;
    test_worked_example();
    test_long_document();
    test_against_reference();
    test_shuffle_and_statelessness();
    int rc = qf_test_end("test_loader", dir);
    MPI_Finalize();
    return rc;
}
