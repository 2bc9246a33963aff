/* test_safetensors.c — io/safetensors.c: qf_st_write then read back (F32 exact, BF16/F16 rounded as util.h),
 * header layout (8-byte padded, spaces), sharded sets with an index, and every malformation as an exit-2 error
 * naming the file: empty file, header length past the end, invalid JSON, data_offsets past the end, size
 * mismatch vs shape, unknown dtype read, a shard named by the index that is missing. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors.h"
#include "qf_test.h"


static char dir[256];

/* A safetensors file from a header string and n data bytes (header length written as given + padding). */
static void write_raw(const char *path, const char *hdr, size_t ndata) {
    size_t hl = strlen(hdr);
    unsigned char *b = calloc(8 + hl + ndata + 1, 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    for (size_t i = 0; i < ndata; i++) b[8 + hl + i] = (unsigned char)i;
    qf_test_write(path, b, 8 + hl + ndata);
    free(b);
}

static float val(int i) { return (float)((i * 13) % 29 - 14) * 0.25f + (i % 3 ? 0.001f * (float)i : 0.f); }

static void test_roundtrip(void) {
    float a[6 * 5], b[7], c[1];
    for (int i = 0; i < 30; i++) a[i] = val(i);
    for (int i = 0; i < 7; i++) b[i] = val(100 + i);
    c[0] = 3.5f;
    qf_st_out outs[3] = {{"model.w", 2, {6, 5}, a}, {"a.bias", 1, {7}, b}, {"scalar", 0, {0}, c}};
    const char *dts[3] = {"F32", "BF16", "F16"};
    for (int d = 0; d < 3; d++) {
        char path[512];
        snprintf(path, sizeof path, "%s/rt_%s.safetensors", dir, dts[d]);
        qf_err e = {0};
        CHECK(qf_st_write(path, outs, 3, dts[d], &e) == 0, "%s", e.msg);
        char tmp[520];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        CHECK(access(tmp, F_OK) != 0, "no temporary left behind");
        /* header: 8-byte length, multiple of 8, JSON padded with spaces */
        FILE *fp = fopen(path, "rb");
        unsigned char h8[8];
        CHECK(fread(h8, 1, 8, fp) == 8, "read header length");
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = (hl << 8) | h8[i];
        char *hdr = calloc(hl + 1, 1);
        CHECK(fread(hdr, 1, hl, fp) == hl, "read header");
        fclose(fp);
        CHECK(hl % 8 == 0 && hdr[0] == '{', "header length %llu", (unsigned long long)hl);
        CHECK(strstr(hdr, "\"data_offsets\"") && strstr(hdr, dts[d]), "header: %s", hdr);
        free(hdr);

        qf_st st;
        CHECK(qf_st_open_file(path, &st, &e) == 0, "%s", e.msg);
        if (e.code) continue;
        CHECK(st.ntensors == 3 && st.nfiles == 1, "ntensors %d", st.ntensors);
        const qf_st_tensor *t = qf_st_find(&st, "model.w");
        CHECK(t && t->ndim == 2 && t->shape[0] == 6 && t->shape[1] == 5 && t->numel == 30 &&
                  !strcmp(t->dtype, dts[d]),
              "model.w meta");
        CHECK(qf_st_find(&st, "nope") == NULL && qf_st_find(&st, "a.bias") && qf_st_find(&st, "scalar"), "find");
        if (t) {
            CHECK(qf_st_check(&st, t, &e) == 0, "%s", e.msg);
            float out[30];
            qf_st_read_f32(t, 0, 30, out);
            int bad = 0;
            for (int i = 0; i < 30; i++) {
                float want = d == 0 ? a[i] : d == 1 ? qf_bf16_to_f32(qf_f32_to_bf16(a[i])) : qf_f16_to_f32(qf_f32_to_f16(a[i]));
                bad += memcmp(&out[i], &want, 4) != 0;
            }
            CHECK(bad == 0, "%s values: %d wrong", dts[d], bad);
            qf_st_read_f32(t, 7, 11, out); /* a sub-range */
            bad = 0;
            for (int i = 0; i < 11; i++) {
                float want = d == 0 ? a[7 + i]
                             : d == 1 ? qf_bf16_to_f32(qf_f32_to_bf16(a[7 + i]))
                                      : qf_f16_to_f32(qf_f32_to_f16(a[7 + i]));
                bad += memcmp(&out[i], &want, 4) != 0;
            }
            CHECK(bad == 0, "%s sub-range", dts[d]);
        }
        t = qf_st_find(&st, "scalar");
        if (t) {
            float o;
            qf_st_read_f32(t, 0, 1, &o);
            CHECK(t->ndim == 0 && t->numel == 1 && o == 3.5f, "scalar");
        }
        qf_st_close(&st);
    }
    qf_err e = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/bad_dtype.safetensors", dir);
    CHECK(qf_st_write(path, outs, 1, "F64", &e) == QF_EXIT_INPUT, "write with F64 refused");
}

static void expect_error(const char *what, const char *path, const char *needle) {
    qf_st st;
    qf_err e = {0};
    int rc = qf_st_open_file(path, &st, &e);
    CHECK(rc == QF_EXIT_INPUT, "%s: rc %d", what, rc);
    CHECK(strstr(e.msg, path) != NULL, "%s: message names the file: %s", what, e.msg);
    if (needle) CHECK(strstr(e.msg, needle) != NULL, "%s: message mentions %s: %s", what, needle, e.msg);
    if (rc == 0) qf_st_close(&st);
}

static void test_malformed(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/empty.safetensors", dir);
    qf_test_write(path, "", 0);
    expect_error("empty file", path, NULL);

    snprintf(path, sizeof path, "%s/short.safetensors", dir);
    qf_test_write(path, "\x10\0\0", 3);
    expect_error("3-byte file", path, NULL);

    snprintf(path, sizeof path, "%s/hlen.safetensors", dir);
    {
        unsigned char b[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
        qf_test_write(path, b, 10);
    }
    expect_error("header length past the end", path, "header length");

    /* one bad header each, written by write_raw with nbytes of data: the file, the header, nbytes, the check's label
     * and what the message must mention besides the file (NULL: nothing more) */
    static const struct {
        const char *file, *header;
        size_t nbytes;
        const char *what, *needle;
    } cases[] = {
        {"json.safetensors", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]", 4, "invalid JSON",
         "JSON"},
        {"notobj.safetensors", "[1, 2, 3]", 0, "header not an object", NULL},
        {"entry.safetensors", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "entry without data_offsets", "a"},
        {"past.safetensors", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}", 12,
         "data_offsets past the end", "data_offsets"},
        {"size.safetensors", "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 16]}}", 16,
         "size mismatch vs shape", "a"},
        {"neg.safetensors", "{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4,
         "negative dimension", "shape"},
        {"rev.safetensors", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8,
         "end before begin", "data_offsets"},
        /* refused: two tensors sharing bytes (issue 14 D15) */
        {"overlap.safetensors",
         "{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, \"y\": {\"dtype\": \"F32\", "
         "\"shape\": [1], \"data_offsets\": [4, 8]}}",
         8, "overlapping tensors", "overlap"},
        /* refused: a shape whose product overflows (checked before multiplying, issue 14 D6) */
        {"bigshape.safetensors",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1099511627776, 1099511627776, 16], \"data_offsets\": "
         "[0, 4]}}",
         4, "shape product overflow", "2^44"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
        write_raw(path, cases[i].header, cases[i].nbytes);
        expect_error(cases[i].what, path, cases[i].needle);
    }

    /* accepted: __metadata__, an unreadable dtype (rejected only when read) */
    snprintf(path, sizeof path, "%s/ok.safetensors", dir);
    write_raw(path,
              "{\"__metadata__\": {\"format\": \"pt\"}, \"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": "
              "[0, 8]}, \"y\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}, \"i\": {\"dtype\": "
              "\"I64\", \"shape\": [1], \"data_offsets\": [12, 20]}, \"q\": {\"dtype\": \"Q4X\", \"shape\": [3], "
              "\"data_offsets\": [20, 22]}}",
              22);
    qf_st st;
    qf_err e = {0};
    CHECK(qf_st_open_file(path, &st, &e) == 0, "metadata/odd dtypes accepted: %s", e.msg);
    if (e.code == 0) {
        CHECK(st.ntensors == 4, "4 tensors (metadata skipped): %d", st.ntensors);
        const qf_st_tensor *x = qf_st_find(&st, "x"), *y = qf_st_find(&st, "y"), *i = qf_st_find(&st, "i"),
                           *q = qf_st_find(&st, "q");
        CHECK(x && y && i && q, "found");
        if (x && y) {
            float xv[2], yv;
            qf_st_read_f32(x, 0, 2, xv);
            qf_st_read_f32(y, 0, 1, &yv);
            unsigned char want[4] = {8, 9, 10, 11};
            CHECK(memcmp(&yv, want, 4) == 0, "y reads its own bytes [8, 12)");
        }
        if (i) {
            qf_err e2 = {0};
            CHECK(qf_st_check(&st, i, &e2) == QF_EXIT_INPUT, "I64 read refused");
            CHECK(strstr(e2.msg, path) && strstr(e2.msg, "I64") && strstr(e2.msg, "tensor i"), "message: %s", e2.msg);
        }
        if (q) {
            qf_err e2 = {0};
            CHECK(qf_st_check(&st, q, &e2) == QF_EXIT_INPUT && strstr(e2.msg, path), "unknown dtype read: %s", e2.msg);
        }
        qf_st_close(&st);
    }
    snprintf(path, sizeof path, "%s/missing.safetensors", dir);
    expect_error("missing file", path, NULL);
}

/* sd/name written as a safetensors file of the n tensors s, stored as dtype (a check) */
static void write_shard(const char *sd, const char *name, const qf_st_out *s, int n, const char *dtype) {
    char path[512];
    qf_err e = {0};
    snprintf(path, sizeof path, "%s/%s", sd, name);
    CHECK(qf_st_write(path, s, n, dtype, &e) == 0, "%s", e.msg);
}

/* sd/model.safetensors.index.json holding json */
static void write_index(const char *sd, const char *json) {
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", sd);
    qf_test_write_text(path, json);
}

static void test_sharded(void) {
    char sd[400], path[512];
    snprintf(sd, sizeof sd, "%s/sharded", dir);
    qf_mkdirs(sd);
    float a[4] = {1, 2, 3, 4}, b[3] = {5, 6, 7}, c[2] = {8, 9};
    qf_st_out s1[2] = {{"a", 2, {2, 2}, a}, {"b", 1, {3}, b}}, s2[1] = {{"c", 1, {2}, c}};
    qf_err e = {0};
    write_shard(sd, "model-00001-of-00002.safetensors", s1, 2, "F32");
    write_shard(sd, "model-00002-of-00002.safetensors", s2, 1, "BF16");
    const char *idx = "{\"metadata\": {\"total_size\": 32}, \"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
                      "\"c\": \"model-00002-of-00002.safetensors\", \"b\": \"model-00001-of-00002.safetensors\"}}";
    write_index(sd, idx);
    qf_st st;
    CHECK(qf_st_open_dir(sd, &st, &e) == 0, "%s", e.msg);
    if (e.code == 0) {
        CHECK(st.nfiles == 2 && st.ntensors == 3, "files %d tensors %d", st.nfiles, st.ntensors);
        const qf_st_tensor *t = qf_st_find(&st, "c");
        float o[2] = {0, 0};
        if (t) qf_st_read_f32(t, 0, 2, o);
        CHECK(t && o[0] == 8 && o[1] == 9 && strstr(st.files[t->file], "00002"), "c from shard 2");
        t = qf_st_find(&st, "a");
        float oa[4] = {0};
        if (t) qf_st_read_f32(t, 0, 4, oa);
        CHECK(t && oa[3] == 4, "a from shard 1");
        qf_st_close(&st);
    }
    /* the index names a shard that is missing */
    char sd2[400];
    snprintf(sd2, sizeof sd2, "%s/sharded_missing", dir);
    qf_mkdirs(sd2);
    write_shard(sd2, "model-00001-of-00002.safetensors", s1, 2, "F32");
    write_index(sd2, idx);
    qf_err e2 = {0};
    CHECK(qf_st_open_dir(sd2, &st, &e2) == QF_EXIT_INPUT, "missing shard");
    CHECK(strstr(e2.msg, "model-00002-of-00002.safetensors") && strstr(e2.msg, sd2), "message names the shard: %s",
          e2.msg);
    /* the index maps a tensor to the wrong shard */
    write_shard(sd2, "model-00002-of-00002.safetensors", s2, 1, "F32");
    write_index(sd2, "{\"weight_map\": {\"a\": \"model-00002-of-00002.safetensors\", \"c\": "
                     "\"model-00002-of-00002.safetensors\", \"b\": \"model-00001-of-00002.safetensors\"}}");
    memset(&e2, 0, sizeof e2);
    CHECK(qf_st_open_dir(sd2, &st, &e2) == QF_EXIT_INPUT && strstr(e2.msg, "tensor a"), "wrong shard: %s", e2.msg);
    /* invalid index JSON */
    write_index(sd2, "{\"weight_map\": ");
    memset(&e2, 0, sizeof e2);
    CHECK(qf_st_open_dir(sd2, &st, &e2) == QF_EXIT_INPUT && strstr(e2.msg, "index.json"), "bad index: %s", e2.msg);
    /* a directory with neither */
    memset(&e2, 0, sizeof e2);
    CHECK(qf_st_open_dir(dir, &st, &e2) == QF_EXIT_INPUT && strstr(e2.msg, dir), "empty dir: %s", e2.msg);
    /* single-file directory */
    snprintf(path, sizeof path, "%s/single", dir);
    qf_mkdirs(path);
    write_shard(path, "model.safetensors", s1, 2, "F16");
    CHECK(qf_st_open_dir(path, &st, &e) == 0 && st.ntensors == 2, "single file dir: %s", e.msg);
    if (e.code == 0) qf_st_close(&st);
}

int main(void) {
    MPI_Init(NULL, NULL);
    snprintf(dir, sizeof dir, "/tmp/qf_test_st_%d", (int)getpid());
    qf_mkdirs(dir);
    test_roundtrip();
    test_malformed();
    test_sharded();
    int rc = qf_test_verdict("test_safetensors", qf_test_failures, dir);
    MPI_Finalize();
    return rc;
}
