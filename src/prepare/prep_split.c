/* prep_split.c — content ids, the leakage-safe validation split and exact duplicates (docs/formats.md,
 * "Splits and duplicates").
 *
 * Content id: SHA-256 (nettle) of the record's normalised content, first 16 bytes. The content is the sequence of
 * its pieces, each written as a tag byte, the piece, and the byte 0xFF (which UTF-8 never holds):
 *   chat-like records (conversations, messages, Alpaca, --map): 's' + the system prompt in effect, then per
 *     rendered turn 'u' or 'a' + its text;  plain text: 't' + the text;
 *   text is normalised: leading and trailing ASCII whitespace dropped, every inner run of ASCII whitespace one
 *     space (case, Unicode and punctuation untouched);
 *   pre-tokenized records: 'i' + per token its id (4 bytes little-endian) and its mask byte.
 * So the same conversation as ShareGPT, messages or Alpaca, with other key order, spacing or extra keys, has one id.
 *
 * Split: u = splitmix64(first 8 bytes of the id, little-endian, XOR splitmix64(seed)); the record is a validation
 * record when (u >> 11) * 2^-53 < fraction. Identical contents therefore always fall on the same side, whatever
 * the input order and the number of ranks. When no record falls under the fraction, the content with the smallest
 * u goes to validation (all its records).
 *
 * Duplicates: every rank sends (id, global index, side) of its records to the rank owning the id (bytes 8..15 of
 * the id modulo the rank count); the owner sorts them, marks every record but the first of a content as a
 * duplicate, counts, and sends the marks back. */
#include <stdlib.h>
#include <string.h>
#include "prep_run.h"

#define PREP_CONTENT_BUF 4096

void prep_content_begin(prep_doc *d) { sha256_init(&d->content); }

static int prep_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

void prep_content_text(prep_doc *d, char tag, const char *s, size_t n) {
    uint8_t buf[PREP_CONTENT_BUF];
    size_t k = 0;
    buf[k++] = (uint8_t)tag;
    int started = 0, space = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (prep_ws(c)) {
            space = started;
            continue;
        }
        if (k + 2 > sizeof buf) {
            sha256_update(&d->content, k, buf);
            k = 0;
        }
        if (space) buf[k++] = ' ';
        buf[k++] = c;
        started = 1;
        space = 0;
    }
    buf[k++] = 0xFF;
    sha256_update(&d->content, k, buf);
}

void prep_content_ids(prep_doc *d, const uint32_t *ids, const uint8_t *mask, int64_t n) {
    uint8_t buf[PREP_CONTENT_BUF];
    size_t k = 0;
    buf[k++] = 'i';
    for (int64_t i = 0; i < n; i++) {
        if (k + 5 > sizeof buf) {
            sha256_update(&d->content, k, buf);
            k = 0;
        }
        uint32_t v = ids[i];
        buf[k++] = (uint8_t)v, buf[k++] = (uint8_t)(v >> 8), buf[k++] = (uint8_t)(v >> 16), buf[k++] = (uint8_t)(v >> 24);
        buf[k++] = mask[i];
    }
    sha256_update(&d->content, k, buf);
}

void prep_content_id(prep_doc *d, uint8_t id[16]) { sha256_digest(&d->content, 16, id); }

static uint64_t prep_load64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t prep_splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t prep_split_u(const uint8_t id[16], uint64_t seed) {
    return prep_splitmix64(prep_load64(id) ^ prep_splitmix64(seed));
}

int prep_split_valid(const uint8_t id[16], uint64_t seed, double fraction) {
    return fraction > 0 && (double)(prep_split_u(id, seed) >> 11) * 0x1p-53 < fraction;
}

/* what a rank sends the owner of an id */
typedef struct prep_entry {
    uint8_t id[16];
    int64_t gidx; /* document index in the whole input */
    uint32_t pos; /* index in the owner's receive buffer (set by the owner) */
    uint8_t valid;
    uint8_t pad[3];
} prep_entry;

static int prep_entry_cmp(const void *a, const void *b) {
    const prep_entry *x = a, *y = b;
    int c = memcmp(x->id, y->id, 16);
    if (c) return c;
    return x->gidx < y->gidx ? -1 : x->gidx > y->gidx;
}

/* 1. the side of every record; the lowest hash goes to valid when none fell under the fraction */
static void prep_sides(const prep_opts *o, const prep_pass *p, uint8_t *flags, prep_dup_stats *st, MPI_Comm comm) {
    int64_t n = p->n, nv = 0;
    int split = o->valid_fraction > 0;
    for (int64_t i = 0; i < n; i++) {
        flags[i] = split && prep_split_valid(p->meta[i].id, o->seed, o->valid_fraction) ? PREP_F_VALID : 0;
        nv += flags[i] & PREP_F_VALID;
    }
    int64_t g[2] = {nv, n}, gsum[2];
    MPI_Allreduce(g, gsum, 2, MPI_INT64_T, MPI_SUM, comm);
    if (!split || gsum[0] > 0 || gsum[1] == 0) return;
    uint64_t umin = UINT64_MAX, gmin;
    for (int64_t i = 0; i < n; i++) {
        uint64_t u = prep_split_u(p->meta[i].id, o->seed);
        if (u < umin) umin = u;
    }
    MPI_Allreduce(&umin, &gmin, 1, MPI_UINT64_T, MPI_MIN, comm);
    for (int64_t i = 0; i < n; i++)
        if (prep_split_u(p->meta[i].id, o->seed) == gmin) flags[i] |= PREP_F_VALID;
    st->valid_forced = 1;
}

/* 2. duplicates: (id, global index, side) to the rank owning the id, marks back. c[0..4] += dup_records,
 * dup_contents, dup_train, dup_valid, cross (this rank's share as owner). */
static void prep_dups(const prep_pass *p, uint8_t *flags, int64_t c[5], MPI_Comm comm) {
    int size, rank;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    int64_t n = p->n, base = 0;
    MPI_Exscan(&n, &base, 1, MPI_INT64_T, MPI_SUM, comm);
    if (rank == 0) base = 0; /* MPI_Exscan leaves rank 0's result undefined */
    int *scount = qf_calloc((size_t)size, sizeof *scount), *rcount = qf_calloc((size_t)size, sizeof *rcount);
    int *sdisp = qf_calloc((size_t)size + 1, sizeof *sdisp), *rdisp = qf_calloc((size_t)size + 1, sizeof *rdisp);
    for (int64_t i = 0; i < n; i++) scount[prep_load64(p->meta[i].id + 8) % (uint64_t)size]++;
    MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, comm);
    for (int r = 0; r < size; r++) sdisp[r + 1] = sdisp[r] + scount[r], rdisp[r + 1] = rdisp[r] + rcount[r];
    prep_entry *send = qf_malloc((size_t)(n ? n : 1) * sizeof *send);
    int64_t *order = qf_malloc((size_t)(n ? n : 1) * sizeof *order);
    int *fill = qf_calloc((size_t)size, sizeof *fill);
    for (int64_t i = 0; i < n; i++) {
        int r = (int)(prep_load64(p->meta[i].id + 8) % (uint64_t)size);
        int64_t k = sdisp[r] + fill[r]++;
        memset(&send[k], 0, sizeof send[k]);
        memcpy(send[k].id, p->meta[i].id, 16);
        send[k].gidx = base + i;
        send[k].valid = flags[i] & PREP_F_VALID;
        order[k] = i;
    }
    int64_t nr = rdisp[size];
    prep_entry *recv = qf_malloc((size_t)(nr ? nr : 1) * sizeof *recv);
    int *sb = qf_malloc((size_t)size * sizeof *sb), *sbd = qf_malloc((size_t)size * sizeof *sbd);
    int *rb = qf_malloc((size_t)size * sizeof *rb), *rbd = qf_malloc((size_t)size * sizeof *rbd);
    for (int r = 0; r < size; r++) {
        sb[r] = scount[r] * (int)sizeof(prep_entry), sbd[r] = sdisp[r] * (int)sizeof(prep_entry);
        rb[r] = rcount[r] * (int)sizeof(prep_entry), rbd[r] = rdisp[r] * (int)sizeof(prep_entry);
    }
    MPI_Alltoallv(send, sb, sbd, MPI_BYTE, recv, rb, rbd, MPI_BYTE, comm);
    for (int64_t k = 0; k < nr; k++) recv[k].pos = (uint32_t)k;
    qsort(recv, (size_t)nr, sizeof *recv, prep_entry_cmp);
    uint8_t *mark = qf_calloc((size_t)(nr ? nr : 1), 1), *back = qf_calloc((size_t)(n ? n : 1), 1);
    for (int64_t a = 0; a < nr;) {
        int64_t b = a + 1;
        while (b < nr && !memcmp(recv[b].id, recv[a].id, 16)) b++;
        int sides = 0;
        for (int64_t k = a; k < b; k++) {
            sides |= recv[k].valid ? 2 : 1;
            if (k > a) { /* not the first record of its content */
                mark[recv[k].pos] = 1;
                c[0]++;
                c[recv[k].valid ? 3 : 2]++;
            }
        }
        c[1] += b - a > 1;
        c[4] += sides == 3;
        a = b;
    }
    MPI_Alltoallv(mark, rcount, rdisp, MPI_BYTE, back, scount, sdisp, MPI_BYTE, comm);
    for (int64_t k = 0; k < n; k++)
        if (back[k]) flags[order[k]] |= PREP_F_DUP;
    free(scount), free(rcount), free(sdisp), free(rdisp), free(send), free(order), free(fill), free(recv);
    free(sb), free(sbd), free(rb), free(rbd), free(mark), free(back);
}

void prep_split_decide(const prep_opts *o, const prep_pass *p, uint8_t *flags, prep_dup_stats *st, MPI_Comm comm) {
    memset(st, 0, sizeof *st);
    prep_sides(o, p, flags, st, comm);
    int64_t c[6] = {0}; /* dup_records, dup_contents, dup_train, dup_valid, cross, dropped */
    prep_dups(p, flags, c, comm);
    /* 3. what is kept, per side */
    int64_t loc[4] = {0}; /* train docs, valid docs, train tokens, valid tokens */
    for (int64_t i = 0; i < p->n; i++) {
        if (o->dedup && (flags[i] & PREP_F_DUP)) {
            c[5]++;
            continue;
        }
        int v = flags[i] & PREP_F_VALID;
        loc[v]++;
        loc[2 + v] += p->meta[i].ntok;
    }
    int64_t cg[6], lg[4];
    MPI_Allreduce(c, cg, 6, MPI_INT64_T, MPI_SUM, comm);
    MPI_Allreduce(loc, lg, 4, MPI_INT64_T, MPI_SUM, comm);
    st->dup_records = cg[0], st->dup_contents = cg[1], st->dup_train = cg[2], st->dup_valid = cg[3];
    st->cross = cg[4], st->dropped = cg[5];
    st->train_docs = lg[0], st->valid_docs = lg[1], st->train_tokens = lg[2], st->valid_tokens = lg[3];
    if (o->valid_fraction > 0 && st->train_docs == 0) { /* every content fell on the valid side: no split */
        for (int64_t i = 0; i < p->n; i++) flags[i] &= (uint8_t)~PREP_F_VALID;
        st->train_docs += st->valid_docs, st->train_tokens += st->valid_tokens;
        st->valid_docs = st->valid_tokens = 0;
        st->dup_train += st->dup_valid, st->dup_valid = 0, st->cross = 0;
        st->valid_disabled = 1;
    }
}
