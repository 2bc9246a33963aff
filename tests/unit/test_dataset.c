/* test_dataset.c — io/dataset.c and src/cli/cmd_prepare.c: builder -> atomic write -> open -> read round trips
 * (whole and subset), every malformed-file case reported as exit 2 naming the file, and the prepare command
 * end to end (pre-tokenized records with labels / loss_mask, bad lines, --skip-bad, the validation split, text
 * records needing the tokenizer). */
#include <hdf5.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dataset.h"
#include "cli/commands.h"
#include "qf_test.h"


static char dir[256];

static const char *tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

/* ---- round trip ---------------------------------------------------------------------------------------------- */

static void test_round_trip(void) {
    char path[512], tmp[600];
    tmp_path(path, sizeof path, "rt.h5");
    qf_dataset_builder b;
    qf_dsb_init(&b);
    const uint32_t d0[3] = {10, 11, 12}, d1[5] = {20, 21, 22, 23, 24}, d2[2] = {30, 70000};
    const uint8_t m1[5] = {0, 0, 1, 1, 1};
    qf_dsb_add_doc(&b, d0, NULL, 3);
    qf_dsb_add_doc(&b, d1, m1, 5);
    qf_dsb_add_doc(&b, d2, NULL, 2);
    CHECK(b.n_docs == 3 && b.n_tokens == 10 && b.max_token == 70000, "builder counts");
    qf_err e = {0};
    int rc = qf_dataset_write(path, &b, NULL, 0, 151936, 151643, 151643, "", "a.jsonl\nb.jsonl", &e);
    CHECK(rc == 0, "write: %s", e.msg);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "no .tmp left behind");

    qf_dataset ds;
    rc = qf_dataset_open(path, &ds, &e);
    CHECK(rc == 0, "open: %s", e.msg);
    if (rc == 0) {
        CHECK(ds.n_docs == 3 && ds.n_tokens == 10, "n_docs %lld n_tokens %lld", (long long)ds.n_docs,
              (long long)ds.n_tokens);
        const uint64_t want_off[4] = {0, 3, 8, 10};
        CHECK(memcmp(ds.doc_offsets, want_off, sizeof want_off) == 0, "doc_offsets");
        CHECK(ds.vocab_size == 151936 && ds.eos_token_id == 151643 && ds.pad_token_id == 151643, "ids");
        CHECK(ds.max_token == 70000, "max_token %lld", (long long)ds.max_token);
        CHECK(strcmp(ds.tokenizer, "") == 0, "tokenizer attr");
        uint32_t t[10];
        uint8_t m[10];
        rc = qf_dataset_read(&ds, 0, 10, t, m, &e);
        CHECK(rc == 0, "read: %s", e.msg);
        const uint32_t wt[10] = {10, 11, 12, 20, 21, 22, 23, 24, 30, 70000};
        const uint8_t wm[10] = {1, 1, 1, 0, 0, 1, 1, 1, 1, 1};
        CHECK(memcmp(t, wt, sizeof t) == 0, "tokens");
        CHECK(memcmp(m, wm, sizeof m) == 0, "mask");
        uint32_t t2[3];
        rc = qf_dataset_read(&ds, 4, 3, t2, NULL, &e);
        CHECK(rc == 0 && t2[0] == 21 && t2[2] == 23, "partial read without mask");
        qf_err e2 = {0};
        rc = qf_dataset_read(&ds, 8, 3, t2, NULL, &e2);
        CHECK(rc != 0 && strstr(e2.msg, "outside"), "read past the end is refused: %s", e2.msg);
        qf_dataset_close(&ds);
    }

    /* subset in a given order */
    tmp_path(path, sizeof path, "rt_subset.h5");
    const int64_t docs[2] = {2, 0};
    memset(&e, 0, sizeof e);
    rc = qf_dataset_write(path, &b, docs, 2, 0, 5, 7, "tok-id", "x", &e);
    CHECK(rc == 0, "subset write: %s", e.msg);
    rc = qf_dataset_open(path, &ds, &e);
    CHECK(rc == 0, "subset open: %s", e.msg);
    if (rc == 0) {
        uint32_t t[5];
        qf_dataset_read(&ds, 0, 5, t, NULL, &e);
        const uint32_t wt[5] = {30, 70000, 10, 11, 12};
        CHECK(ds.n_docs == 2 && ds.n_tokens == 5 && memcmp(t, wt, sizeof t) == 0, "subset contents");
        CHECK(ds.doc_offsets[1] == 2 && ds.doc_offsets[2] == 5, "subset offsets");
        CHECK(ds.vocab_size == 0 && ds.eos_token_id == 5 && ds.pad_token_id == 7, "subset attrs");
        CHECK(strcmp(ds.tokenizer, "tok-id") == 0, "tokenizer identity '%s'", ds.tokenizer);
        qf_dataset_close(&ds);
    }

    /* a large document crosses the 1M-element staging buffer */
    tmp_path(path, sizeof path, "rt_big.h5");
    qf_dataset_builder big;
    qf_dsb_init(&big);
    const int64_t nb = (1 << 20) + 12345;
    uint32_t *bt = malloc(nb * sizeof *bt);
    for (int64_t i = 0; i < nb; i++) bt[i] = (uint32_t)(i % 50000);
    qf_dsb_add_doc(&big, bt, NULL, 100);
    qf_dsb_add_doc(&big, bt, NULL, nb);
    memset(&e, 0, sizeof e);
    const int64_t bd[2] = {1, 0};
    rc = qf_dataset_write(path, &big, bd, 2, 50000, 0, 0, "", "", &e);
    CHECK(rc == 0, "big write: %s", e.msg);
    if (qf_dataset_open(path, &ds, &e) == 0) {
        uint32_t *rt = malloc((nb + 100) * sizeof *rt);
        qf_dataset_read(&ds, 0, nb + 100, rt, NULL, &e);
        int ok = 1;
        for (int64_t i = 0; i < nb; i++) ok &= rt[i] == bt[i];
        for (int64_t i = 0; i < 100; i++) ok &= rt[nb + i] == bt[i];
        CHECK(ok && ds.n_tokens == nb + 100 && ds.max_token == 49999, "big round trip");
        free(rt);
        qf_dataset_close(&ds);
    } else {
        CHECK(0, "big open: %s", e.msg);
    }
    free(bt);
    qf_dsb_free(&big);

    /* unwritable destination: exit 2 naming it, nothing left */
    tmp_path(path, sizeof path, "no_such_dir/x.h5");
    memset(&e, 0, sizeof e);
    rc = qf_dataset_write(path, &b, NULL, 0, 0, 0, 0, "", "", &e);
    CHECK(rc == 2 && e.code == 2 && strstr(e.msg, "no_such_dir/x.h5"), "unwritable: rc %d: %s", rc, e.msg);
    CHECK(access(path, F_OK) != 0, "no file at an unwritable path");
    qf_dsb_free(&b);
}

/* ---- malformed files ----------------------------------------------------------------------------------------- */

typedef struct raw_spec {
    const char *format;        /* NULL: no format attr */
    int64_t version;
    int tokens_int64;          /* /tokens stored as int64 instead of uint32 */
    int omit_tokens, omit_offsets;
    const uint64_t *offsets;
    int n_off;
    int64_t vocab_size;        /* < 0: no attr */
    int64_t max_token_attr;    /* < -1: no attr */
} raw_spec;

/* Writes a file with tokens {1,2,3,4,5} (mask ones) and the given defects, directly with HDF5. */
static void write_raw(const char *path, const raw_spec *s) {
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 5;
    uint32_t tok[5] = {1, 2, 3, 4, 5};
    int64_t tok64[5] = {1, 2, 3, 4, 5};
    uint8_t mask[5] = {1, 1, 1, 1, 1};
    hid_t sp = H5Screate_simple(1, &n, NULL);
    if (!s->omit_tokens) {
        hid_t d = H5Dcreate2(f, "tokens", s->tokens_int64 ? H5T_STD_I64LE : H5T_STD_U32LE, sp, H5P_DEFAULT,
                             H5P_DEFAULT, H5P_DEFAULT);
        if (s->tokens_int64)
            H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok64);
        else
            H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok);
        H5Dclose(d);
    }
    hid_t d = H5Dcreate2(f, "loss_mask", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, mask);
    H5Dclose(d);
    H5Sclose(sp);
    if (!s->omit_offsets) {
        hsize_t no = (hsize_t)s->n_off;
        hid_t so = H5Screate_simple(1, &no, NULL);
        d = H5Dcreate2(f, "doc_offsets", H5T_STD_U64LE, so, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, s->offsets);
        H5Dclose(d);
        H5Sclose(so);
    }
    hid_t sc = H5Screate(H5S_SCALAR);
    if (s->format) {
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, strlen(s->format) + 1); /* fixed-length, as some writers do */
        hid_t a = H5Acreate2(f, "format", t, sc, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, t, s->format);
        H5Aclose(a);
        H5Tclose(t);
    }
    hid_t a = H5Acreate2(f, "format_version", H5T_STD_I64LE, sc, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &s->version);
    H5Aclose(a);
    if (s->vocab_size >= 0) {
        a = H5Acreate2(f, "vocab_size", H5T_STD_I64LE, sc, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, H5T_NATIVE_INT64, &s->vocab_size);
        H5Aclose(a);
    }
    if (s->max_token_attr >= -1) {
        a = H5Acreate2(f, "max_token_id", H5T_STD_I64LE, sc, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, H5T_NATIVE_INT64, &s->max_token_attr);
        H5Aclose(a);
    }
    H5Sclose(sc);
    H5Fclose(f);
}

/* Opens path and expects exit 2 with a message naming the file and containing `what`. */
static void expect_bad(const char *path, const char *what, const char *label) {
    qf_dataset ds;
    qf_err e = {0};
    int rc = qf_dataset_open(path, &ds, &e);
    CHECK(rc == 2 && e.code == 2, "%s: rc %d (want 2): %s", label, rc, e.msg);
    CHECK(strstr(e.msg, path) != NULL, "%s: message names the file: %s", label, e.msg);
    CHECK(strstr(e.msg, what) != NULL, "%s: message mentions '%s': %s", label, what, e.msg);
    if (rc == 0) qf_dataset_close(&ds);
}

static void test_malformed(void) {
    char path[512];
    const uint64_t good[3] = {0, 2, 5};
    raw_spec base = {.format = "qwen-ft-packed", .version = 1, .offsets = good, .n_off = 3, .vocab_size = -1,
                     .max_token_attr = -2};

    /* the base spec itself is valid (fixed-length format string, no max_token_id: scanned) */
    tmp_path(path, sizeof path, "raw_ok.h5");
    write_raw(path, &base);
    qf_dataset ds;
    qf_err e = {0};
    int rc = qf_dataset_open(path, &ds, &e);
    CHECK(rc == 0, "hand-made valid file opens: %s", e.msg);
    if (rc == 0) {
        CHECK(ds.max_token == 5 && ds.n_docs == 2 && ds.vocab_size == 0 && ds.eos_token_id == -1,
              "scanned max %lld, defaults", (long long)ds.max_token);
        qf_dataset_close(&ds);
    }

    tmp_path(path, sizeof path, "missing.h5");
    expect_bad(path, "no such file", "missing file");

    tmp_path(path, sizeof path, "text.h5");
    qf_test_write_text(path, "this is not HDF5\n");
    expect_bad(path, "not an HDF5 file", "text file");

    /* one defect each: the file, the words the message must hold, the check's label, and the spec written */
    const uint64_t nonmono[4] = {0, 3, 2, 5}, short_end[3] = {0, 2, 4}, bad_start[3] = {1, 2, 5};
    const char *fmt = base.format;
    const struct {
        const char *file, *what, *label;
        raw_spec s; /* format, version, tokens_int64, omit_tokens, omit_offsets, offsets, n_off, vocab_size,
                       max_token_attr */
    } cases[] = {
        {"no_tokens.h5", "missing dataset /tokens", "missing /tokens", {fmt, 1, 0, 1, 0, good, 3, -1, -2}},
        {"no_offsets.h5", "missing dataset /doc_offsets", "missing /doc_offsets", {fmt, 1, 0, 0, 1, good, 3, -1, -2}},
        {"int64_tokens.h5", "dtype int64, expected uint32", "wrong dtype", {fmt, 1, 1, 0, 0, good, 3, -1, -2}},
        {"nonmono.h5", "not monotone", "non-monotone offsets", {fmt, 1, 0, 0, 0, nonmono, 4, -1, -2}},
        {"short_end.h5", "ends at 4 but /tokens has 5", "offsets not ending at n_tokens",
         {fmt, 1, 0, 0, 0, short_end, 3, -1, -2}},
        {"bad_start.h5", "must be 0", "offsets not starting at 0", {fmt, 1, 0, 0, 0, bad_start, 3, -1, -2}},
        {"bad_format.h5", "format is \"something-else\"", "wrong format attr",
         {"something-else", 1, 0, 0, 0, good, 3, -1, -2}},
        {"no_format.h5", "missing root attribute format", "missing format attr", {NULL, 1, 0, 0, 0, good, 3, -1, -2}},
        {"v2.h5", "format_version 2", "future version", {fmt, 2, 0, 0, 0, good, 3, -1, -2}},
        {"vocab_attr.h5", "token id 5 >= vocab_size 5", "token >= vocab (attr)", {fmt, 1, 0, 0, 0, good, 3, 5, 5}},
        /* no max_token_id attr: found by the scan */
        {"vocab_scan.h5", "token id 5 >= vocab_size 4", "token >= vocab (scan)", {fmt, 1, 0, 0, 0, good, 3, 4, -2}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tmp_path(path, sizeof path, cases[i].file);
        write_raw(path, &cases[i].s);
        expect_bad(path, cases[i].what, cases[i].label);
    }
}

/* ---- prepare ------------------------------------------------------------------------------------------------- */

static int run_prepare(const char *a0, ...) {
    char *argv[32];
    int argc = 0;
    argv[argc++] = "prepare";
    va_list ap;
    va_start(ap, a0);
    for (const char *a = a0; a && argc < 31; a = va_arg(ap, const char *)) argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    fflush(stdout);
    return qf_opts_run(&qf_cmd_prepare, argc, argv);
}

static void test_prepare(void) {
    char in[512], out[512], bad[512], text[512], vout[512], vvalid[512], tmp[600], many[512];
    tmp_path(in, sizeof in, "good.jsonl");
    qf_test_write_text(in, "{\"input_ids\": [1, 2, 3], \"labels\": [-100, 2, 3]}\n"
                   "\n"
                   "   \n"
                   "{\"input_ids\": [4, 5, 6, 7], \"loss_mask\": [1, 0, 1, 1]}\r\n"
                   "{\"input_ids\": [8, 9]}\n");
    tmp_path(out, sizeof out, "good.h5");
    int rc = run_prepare("--in", in, "--out", out, "--vocab-size", "100", "--eos-id", "0", NULL);
    CHECK(rc == 0, "prepare good: rc %d", rc);
    qf_dataset ds;
    qf_err e = {0};
    rc = qf_dataset_open(out, &ds, &e);
    CHECK(rc == 0, "open prepared: %s", e.msg);
    if (rc == 0) {
        uint32_t t[9];
        uint8_t m[9];
        qf_dataset_read(&ds, 0, 9, t, m, &e);
        const uint32_t wt[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
        const uint8_t wm[9] = {0, 1, 1, 1, 0, 1, 1, 1, 1};
        CHECK(ds.n_docs == 3 && ds.n_tokens == 9, "docs %lld tokens %lld", (long long)ds.n_docs,
              (long long)ds.n_tokens);
        CHECK(memcmp(t, wt, sizeof t) == 0 && memcmp(m, wm, sizeof m) == 0, "tokens and masks");
        CHECK(ds.vocab_size == 100 && ds.eos_token_id == 0 && ds.pad_token_id == 0 && ds.max_token == 9,
              "attrs vocab %lld eos %lld pad %lld max %lld", (long long)ds.vocab_size, (long long)ds.eos_token_id,
              (long long)ds.pad_token_id, (long long)ds.max_token);
        qf_dataset_close(&ds);
    }

    /* one broken line among good ones: exit 2, no output; --skip-bad: exit 0 and the rest */
    tmp_path(bad, sizeof bad, "bad.jsonl");
    qf_test_write_text(bad, "{\"input_ids\": [1, 2]}\n{\"input_ids\": [3]}\n{\"input_ids\": [4, \n{\"input_ids\": [5]}\n");
    tmp_path(out, sizeof out, "bad.h5");
    rc = run_prepare("--in", bad, "--out", out, NULL);
    CHECK(rc == 2, "invalid JSON: rc %d", rc);
    CHECK(access(out, F_OK) != 0, "no output after an error");
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    CHECK(access(tmp, F_OK) != 0, "no tmp after an error");
    rc = run_prepare("--in", bad, "--out", out, "--skip-bad", NULL);
    CHECK(rc == 0, "--skip-bad: rc %d", rc);
    if (qf_dataset_open(out, &ds, &e) == 0) {
        CHECK(ds.n_docs == 3 && ds.n_tokens == 4, "skip-bad keeps 3 docs: %lld", (long long)ds.n_docs);
        qf_dataset_close(&ds);
    }

    /* each kind of bad record is exit 2 */
    static const char *const bad_records[] = {
        "{\"input_ids\": []}",                              /* empty */
        "{\"input_ids\": [1, -2]}",                         /* negative */
        "{\"input_ids\": [1, 4294967296]}",                 /* >= 2^32 */
        "{\"input_ids\": [1, 2.5]}",                        /* not an integer */
        "{\"input_ids\": [1, \"a\"]}",                      /* not an integer */
        "{\"input_ids\": [1, 2], \"labels\": [1]}",         /* length mismatch */
        "{\"input_ids\": [1, 2], \"labels\": [1, 3]}",      /* label neither -100 nor the token */
        "{\"input_ids\": [1, 2], \"loss_mask\": [1, 2]}",   /* mask not 0/1 */
        "{\"ids\": [1, 2]}",                                /* missing input_ids */
        "[1, 2]",                                           /* not an object */
        "{\"input_ids\": [1, 200]}",                        /* >= --vocab-size */
    };
    for (size_t k = 0; k < sizeof bad_records / sizeof *bad_records; k++) {
        char line[256];
        snprintf(line, sizeof line, "{\"input_ids\": [7]}\n%s\n", bad_records[k]);
        tmp_path(text, sizeof text, "rec.jsonl");
        qf_test_write_text(text, line);
        tmp_path(out, sizeof out, "rec.h5");
        rc = run_prepare("--in", text, "--out", out, "--vocab-size", "100", "--eos-id", "0", NULL);
        CHECK(rc == 2 && access(out, F_OK) != 0, "bad record %s: rc %d", bad_records[k], rc);
    }

    /* text record: needs the tokenizer; --skip-bad does not hide that */
    tmp_path(text, sizeof text, "text.jsonl");
    qf_test_write_text(text, "{\"text\": \"hello\"}\n");
    tmp_path(out, sizeof out, "textrec.h5");
    rc = run_prepare("--in", text, "--out", out, NULL);
    CHECK(rc == 2 && access(out, F_OK) != 0, "text record: rc %d", rc);
    rc = run_prepare("--in", text, "--out", out, "--skip-bad", NULL);
    CHECK(rc == 2, "text record with --skip-bad: rc %d", rc);

    /* validation split: 8 docs, 0.25 -> 2 valid, 6 train, disjoint, both in input order */
    tmp_path(many, sizeof many, "many.jsonl");
    qf_test_write_text(many, "{\"input_ids\": [0]}\n{\"input_ids\": [1]}\n{\"input_ids\": [2]}\n{\"input_ids\": [3]}\n"
                     "{\"input_ids\": [4]}\n{\"input_ids\": [5]}\n{\"input_ids\": [6]}\n{\"input_ids\": [7]}\n");
    tmp_path(vout, sizeof vout, "split.h5");
    tmp_path(vvalid, sizeof vvalid, "split.valid.h5");
    rc = run_prepare("--in", many, "--out", vout, "--valid-fraction", "0.25", "--seed", "3", NULL);
    CHECK(rc == 0, "split: rc %d", rc);
    qf_dataset tr, va;
    if (qf_dataset_open(vout, &tr, &e) == 0 && qf_dataset_open(vvalid, &va, &e) == 0) {
        CHECK(tr.n_docs == 6 && va.n_docs == 2, "split sizes %lld + %lld", (long long)tr.n_docs,
              (long long)va.n_docs);
        uint32_t a[8] = {0}, b2[8] = {0};
        qf_dataset_read(&tr, 0, tr.n_tokens, a, NULL, &e);
        qf_dataset_read(&va, 0, va.n_tokens, b2, NULL, &e);
        int seen[8] = {0}, ordered = 1;
        for (int i = 0; i < tr.n_tokens; i++) seen[a[i]]++, ordered &= i == 0 || a[i] > a[i - 1];
        for (int i = 0; i < va.n_tokens; i++) seen[b2[i]]++, ordered &= i == 0 || b2[i] > b2[i - 1];
        int all = 1;
        for (int i = 0; i < 8; i++) all &= seen[i] == 1;
        CHECK(all, "every document in exactly one file");
        CHECK(ordered, "input order kept in both files");
        qf_dataset_close(&tr);
        qf_dataset_close(&va);
    } else {
        CHECK(0, "split files open: %s", e.msg);
    }

    /* usage errors */
    CHECK(run_prepare("--out", out, NULL) == 2, "missing --in");
    CHECK(run_prepare("--in", many, NULL) == 2, "missing --out");
    CHECK(run_prepare("--in", many, "--out", out, "--bogus", NULL) == 2, "unknown option");
    CHECK(run_prepare("--in", many, "--out", out, "--valid-fraction", "1.5", NULL) == 2, "fraction >= 1");
    CHECK(run_prepare("--help", NULL) == 0, "--help");
    tmp_path(text, sizeof text, "does_not_exist.jsonl");
    CHECK(run_prepare("--in", text, "--out", out, NULL) == 2, "missing input file");
    tmp_path(out, sizeof out, "no_dir/out.h5");
    CHECK(run_prepare("--in", many, "--out", out, NULL) == 2, "unwritable output");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (qf_test_mkdtemp(dir, sizeof dir, "/tmp/qf_test_dataset.XXXXXX")) return 1;
    test_round_trip();
    test_malformed();
    test_prepare();
    int rc = qf_test_end("test_dataset", dir);
    MPI_Finalize();
    return rc;
}
