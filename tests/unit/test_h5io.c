/* test_h5io.c — io/h5io.c: flat-range hyperslab writes/reads (across row boundaries, empty ranges, whole
 * datasets, any world size: each rank writes its own shard collectively), bf16/fp16/fp32 storage, attributes,
 * the model config round trip, and the exit-2 errors (missing file, text file, truncated HDF5, missing dataset
 * or attribute, out-of-range read). Runs as a singleton or under mpirun -np N. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "h5io.h"
#include "qf_test.h"


static int rank, nranks;
static char dir[256]; /* per-run scratch directory */

/* Values exactly representable in bf16 (and fp16): small integers times 1/8. */
static float exact_val(int64_t i) { return (float)((i * 37) % 41 - 20) * 0.125f; }
/* Values needing rounding. */
static float rough_val(int64_t i) { return sinf((float)i * 0.731f) * 3.3f + 1e-3f * (float)i; }

/* This rank's part [*a, *b) of [0, n) split into nranks contiguous pieces (rank 0 may get an empty one). */
static void my_part(int64_t n, int64_t *a, int64_t *b) {
    /* deliberately uneven: the last rank gets the remainder, rank 0 gets nothing when nranks > 1 */
    if (nranks == 1) {
        *a = 0, *b = n;
        return;
    }
    int64_t per = n / (nranks - 1);
    if (rank == 0) {
        *a = *b = 0;
        return;
    }
    *a = (rank - 1) * per;
    *b = rank == nranks - 1 ? n : *a + per;
}

/* Creates dir/name collectively (path, of 512 bytes, gets its name): the file, or NULL after a failed check. */
static qf_h5 *create_scratch(const char *name, char *path, qf_err *e) {
    qf_h5 *f = NULL;
    snprintf(path, 512, "%s/%s", dir, name);
    CHECK(qf_h5_create(path, MPI_COMM_WORLD, &f, e) == 0, "%s", e->msg);
    return f;
}

static void test_ranges(void) {
    char path[512];
    qf_err e = {0};
    qf_h5 *f = create_scratch("ranges.h5", path, &e);
    if (!f) return;
    int64_t shape2[2] = {5, 7}, shape3[3] = {3, 4, 5}, shape1[1] = {11};
    float src[60];
    for (int i = 0; i < 60; i++) src[i] = exact_val(i);
    const qf_dtype dts[3] = {QF_DT_F32, QF_DT_BF16, QF_DT_F16};
    for (int d = 0; d < 3; d++) {
        char name[64];
        int64_t a, b;
        /* 2-D [5,7], written by ranks in pieces */
        snprintf(name, sizeof name, "w2_%s", qf_dtype_name(dts[d]));
        my_part(35, &a, &b);
        CHECK(qf_h5_write_f32(f, "/params", name, 2, shape2, dts[d], a, b - a, src + a, &e) == 0, "%s", e.msg);
        /* 3-D [3,4,5] */
        snprintf(name, sizeof name, "w3_%s", qf_dtype_name(dts[d]));
        my_part(60, &a, &b);
        CHECK(qf_h5_write_f32(f, "params/sub", name, 3, shape3, dts[d], a, b - a, src + a, &e) == 0, "%s", e.msg);
        /* 1-D [11], everything by every rank's own call: only the last rank writes, others n = 0 */
        snprintf(name, sizeof name, "b_%s", qf_dtype_name(dts[d]));
        int last = rank == nranks - 1;
        CHECK(qf_h5_write_f32(f, "/params", name, 1, shape1, dts[d], 0, last ? 11 : 0, src, &e) == 0, "%s", e.msg);
    }
    /* a dataset written in two collective calls (second range reuses the dataset) */
    {
        int64_t a, b;
        my_part(35, &a, &b);
        int64_t mid = a + (b - a) / 2;
        CHECK(qf_h5_write_f32(f, "/twice", "x", 2, shape2, QF_DT_F32, a, mid - a, src + a, &e) == 0, "%s", e.msg);
        CHECK(qf_h5_write_f32(f, "/twice", "x", 2, shape2, QF_DT_F32, mid, b - mid, src + mid, &e) == 0, "%s", e.msg);
        /* same name, another shape: refused */
        qf_err e2 = {0};
        int64_t other[2] = {7, 5};
        CHECK(qf_h5_write_f32(f, "/twice", "x", 2, other, QF_DT_F32, 0, 0, src, &e2) == QF_EXIT_INPUT, "reshape");
    }
    CHECK(qf_h5_close(f, &e) == 0, "%s", e.msg);

    CHECK(qf_h5_open(path, MPI_COMM_WORLD, 0, &f, &e) == 0, "%s", e.msg);
    if (!f) return;
    for (int d = 0; d < 3; d++) {
        char name[64];
        float out[60];
        /* ranges across row boundaries: [3,20) of [5,7] covers a partial row, 1 full row, a partial row */
        snprintf(name, sizeof name, "w2_%s", qf_dtype_name(dts[d]));
        const int64_t rg[][2] = {{3, 20}, {0, 0}, {0, 35}, {7, 14}, {6, 8}, {34, 35}, {0, 1}, {13, 29}};
        for (size_t r = 0; r < sizeof rg / sizeof rg[0]; r++) {
            int64_t o = rg[r][0], n = rg[r][1] - rg[r][0];
            for (int i = 0; i < 60; i++) out[i] = -999.f;
            CHECK(qf_h5_read_f32(f, "/params", name, o, n, out, &e) == 0, "%s", e.msg);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) bad += out[i] != src[o + i];
            CHECK(bad == 0 && (n == 60 || out[n] == -999.f), "%s range [%lld,%lld): %d wrong", name, (long long)o,
                  (long long)(o + n), bad);
        }
        int nd;
        int64_t sh[4];
        qf_dtype got;
        CHECK(qf_h5_shape(f, "/params", name, &nd, sh, &got, &e) == 0, "%s", e.msg);
        CHECK(nd == 2 && sh[0] == 5 && sh[1] == 7 && got == dts[d], "shape/dtype of %s", name);
        /* 3-D: every sub-range of a few lengths */
        snprintf(name, sizeof name, "w3_%s", qf_dtype_name(dts[d]));
        int bad = 0;
        for (int64_t o = 0; o < 60; o += 3)
            for (int64_t n = 0; o + n <= 60; n += 7) {
                if (qf_h5_read_f32(f, "/params/sub", name, o, n, out, &e)) {
                    bad++;
                    break;
                }
                for (int64_t i = 0; i < n; i++) bad += out[i] != src[o + i];
            }
        CHECK(bad == 0, "3-D ranges of %s: %d wrong (%s)", name, bad, e.msg);
        CHECK(qf_h5_shape(f, "/params/sub", name, &nd, sh, &got, &e) == 0 && nd == 3 && sh[2] == 5, "3-D shape");
        snprintf(name, sizeof name, "b_%s", qf_dtype_name(dts[d]));
        CHECK(qf_h5_read_f32(f, "/params", name, 0, 11, out, &e) == 0, "%s", e.msg);
        bad = 0;
        for (int i = 0; i < 11; i++) bad += out[i] != src[i];
        CHECK(bad == 0, "1-D %s", name);
    }
    float out[35];
    CHECK(qf_h5_read_f32(f, "/twice", "x", 0, 35, out, &e) == 0, "%s", e.msg);
    int bad = 0;
    for (int i = 0; i < 35; i++) bad += out[i] != src[i];
    CHECK(bad == 0, "two-call dataset");
    CHECK(qf_h5_has(f, "/params", "w2_bf16") == 1, "has");
    CHECK(qf_h5_has(f, "params", "nope") == 0, "has missing");
    CHECK(qf_h5_has(f, "/params/sub", NULL) == 1, "has group");
    CHECK(qf_h5_has(f, "/nogroup/deeper", "x") == 0, "has missing group");
    /* errors: missing dataset, range past the end */
    qf_err e2 = {0};
    CHECK(qf_h5_read_f32(f, "/params", "missing_ds", 0, 1, out, &e2) == QF_EXIT_INPUT, "missing dataset");
    CHECK(strstr(e2.msg, path) && strstr(e2.msg, "missing_ds"), "message names file and dataset: %s", e2.msg);
    memset(&e2, 0, sizeof e2);
    CHECK(qf_h5_read_f32(f, "/params", "w2_fp32", 30, 6, out, &e2) == QF_EXIT_INPUT, "range past end");
    CHECK(strstr(e2.msg, path) && strstr(e2.msg, "w2_fp32"), "message: %s", e2.msg);
    memset(&e2, 0, sizeof e2);
    int nd;
    int64_t sh[4];
    CHECK(qf_h5_shape(f, "/params", "nope", &nd, sh, NULL, &e2) == QF_EXIT_INPUT && strstr(e2.msg, path), "shape of "
          "missing: %s", e2.msg);
    CHECK(qf_h5_close(f, &e) == 0, "%s", e.msg);
}

/* bf16/fp16 rounding: what comes back is exactly util.h's round-to-nearest-even of the source. */
static void test_rounding(void) {
    char path[512];
    qf_err e = {0};
    enum { N = 1000 };
    float src[N], out[N];
    for (int i = 0; i < N; i++) src[i] = rough_val(i);
    src[0] = 1.0f + 1.0f / 256.0f;        /* bf16 tie: rounds to even (1.0) */
    src[1] = 1.0f + 3.0f / 256.0f;        /* bf16 tie: rounds to even (1 + 1/64) */
    src[2] = -0.0f;
    src[3] = 3.0e38f;
    src[4] = 1e-40f; /* fp32 subnormal */
    int64_t shape[2] = {40, 25};
    qf_h5 *f = create_scratch("round.h5", path, &e);
    if (!f) return;
    int64_t a = 0, b = N;
    my_part(N, &a, &b);
    CHECK(qf_h5_write_f32(f, "/", "bf", 2, shape, QF_DT_BF16, a, b - a, src + a, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_write_f32(f, "/", "hf", 2, shape, QF_DT_F16, a, b - a, src + a, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_write_f32(f, "/", "f", 2, shape, QF_DT_F32, a, b - a, src + a, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_close(f, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_open(path, MPI_COMM_WORLD, 0, &f, &e) == 0, "%s", e.msg);
    if (!f) return;
    int bad = 0;
    CHECK(qf_h5_read_f32(f, "/", "bf", 0, N, out, &e) == 0, "%s", e.msg);
    for (int i = 0; i < N; i++) bad += memcmp(&out[i], &(float){qf_bf16_to_f32(qf_f32_to_bf16(src[i]))}, 4) != 0;
    CHECK(bad == 0, "bf16 rounding: %d differ", bad);
    CHECK(out[0] == 1.0f && out[1] == 1.0f + 1.0f / 64.0f, "bf16 ties to even: %.9g %.9g", out[0], out[1]);
    CHECK(signbit(out[2]), "-0 keeps its sign");
    bad = 0;
    CHECK(qf_h5_read_f32(f, "/", "hf", 0, N, out, &e) == 0, "%s", e.msg);
    for (int i = 0; i < N; i++) bad += memcmp(&out[i], &(float){qf_f16_to_f32(qf_f32_to_f16(src[i]))}, 4) != 0;
    CHECK(bad == 0, "fp16 rounding: %d differ", bad);
    bad = 0;
    CHECK(qf_h5_read_f32(f, "/", "f", 0, N, out, &e) == 0, "%s", e.msg);
    for (int i = 0; i < N; i++) bad += memcmp(&out[i], &src[i], 4) != 0;
    CHECK(bad == 0, "fp32 exact: %d differ", bad);
    CHECK(qf_h5_close(f, &e) == 0, "%s", e.msg);
}

static void test_attrs_config(void) {
    char path[512];
    qf_err e = {0};
    qf_h5 *f = create_scratch("attrs.h5", path, &e);
    if (!f) return;
    qf_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.arch, sizeof c.arch, "qwen3");
    snprintf(c.family, sizeof c.family, "qwen3");
    snprintf(c.dtype, sizeof c.dtype, "bf16");
    c.vocab_size = 151936;
    c.hidden_size = 1024;
    c.intermediate_size = 3072;
    c.num_layers = 28;
    c.num_heads = 16;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.tie_word_embeddings = 1;
    c.attention_bias = 0;
    c.qk_norm = 1;
    c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6;
    c.max_position_embeddings = 40960;
    c.initializer_range = 0.02;
    c.bos_token_id = -1;
    c.eos_token_id = 151645;
    c.pad_token_id = 151643;
    CHECK(qf_h5_write_config(f, &c, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_attr_write_str(f, "/", "format", "qwen-ft-model", &e) == 0, "%s", e.msg);
    CHECK(qf_h5_attr_write_i64(f, "/", "format_version", 1, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_attr_write_i64(f, "/state", "step", 1234567890123LL, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_attr_write_f64(f, "/state", "loss_scale", 65536.5, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_attr_write_f64(f, "/state", "loss_scale", 32768.0, &e) == 0, "overwrite: %s", e.msg);
    CHECK(qf_h5_attr_write_str(f, "/state", "empty", "", &e) == 0, "%s", e.msg);
    unsigned char blob[300];
    for (int i = 0; i < 300; i++) blob[i] = (unsigned char)(i * 7);
    CHECK(qf_h5_attr_write_blob(f, "/state/rng", "state", blob, sizeof blob, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_attr_write_blob(f, "/state/rng", "none", blob, 0, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_close(f, &e) == 0, "%s", e.msg);

    CHECK(qf_h5_open(path, MPI_COMM_WORLD, 0, &f, &e) == 0, "%s", e.msg);
    if (!f) return;
    qf_model_config r;
    memset(&r, 0x55, sizeof r);
    CHECK(qf_h5_read_config(f, &r, &e) == 0, "%s", e.msg);
    CHECK(!strcmp(r.arch, c.arch) && !strcmp(r.family, c.family) && !strcmp(r.dtype, c.dtype), "config strings");
    CHECK(r.vocab_size == c.vocab_size && r.hidden_size == c.hidden_size &&
              r.intermediate_size == c.intermediate_size && r.num_layers == c.num_layers &&
              r.num_heads == c.num_heads && r.num_kv_heads == c.num_kv_heads && r.head_dim == c.head_dim &&
              r.tie_word_embeddings == c.tie_word_embeddings && r.attention_bias == c.attention_bias &&
              r.qk_norm == c.qk_norm && r.rope_theta == c.rope_theta && r.rms_norm_eps == c.rms_norm_eps &&
              r.max_position_embeddings == c.max_position_embeddings &&
              r.initializer_range == c.initializer_range && r.bos_token_id == c.bos_token_id &&
              r.eos_token_id == c.eos_token_id && r.pad_token_id == c.pad_token_id,
          "config numbers");
    char s[64];
    int64_t i64;
    double f64;
    CHECK(qf_h5_attr_read_str(f, "/", "format", s, sizeof s, &e) == 0 && !strcmp(s, "qwen-ft-model"), "format");
    CHECK(qf_h5_attr_read_i64(f, "/", "format_version", &i64, &e) == 0 && i64 == 1, "format_version");
    CHECK(qf_h5_attr_read_i64(f, "/state", "step", &i64, &e) == 0 && i64 == 1234567890123LL, "step");
    CHECK(qf_h5_attr_read_f64(f, "/state", "loss_scale", &f64, &e) == 0 && f64 == 32768.0, "loss_scale");
    CHECK(qf_h5_attr_read_f64(f, "/state", "step", &f64, &e) == 0 && f64 == 1234567890123.0, "int as f64");
    CHECK(qf_h5_attr_read_str(f, "/state", "empty", s, sizeof s, &e) == 0 && s[0] == 0, "empty string");
    unsigned char back[300];
    CHECK(qf_h5_attr_read_blob(f, "/state/rng", "state", back, sizeof back, &e) == 0 && !memcmp(back, blob, 300),
          "blob");
    CHECK(qf_h5_attr_read_blob(f, "/state/rng", "none", back, 0, &e) == 0, "empty blob: %s", e.msg);
    CHECK(qf_h5_attr_has(f, "/", "format") && !qf_h5_attr_has(f, "/", "nope") && !qf_h5_attr_has(f, "/x", "y"),
          "attr_has");
    /* errors */
    qf_err e2 = {0};
    CHECK(qf_h5_attr_read_i64(f, "/", "missing_attr", &i64, &e2) == QF_EXIT_INPUT, "missing attr");
    CHECK(strstr(e2.msg, path) && strstr(e2.msg, "missing_attr"), "message: %s", e2.msg);
    memset(&e2, 0, sizeof e2);
    CHECK(qf_h5_attr_read_blob(f, "/state/rng", "state", back, 299, &e2) == QF_EXIT_INPUT, "blob wrong size");
    CHECK(strstr(e2.msg, path) && strstr(e2.msg, "state"), "message: %s", e2.msg);
    memset(&e2, 0, sizeof e2);
    CHECK(qf_h5_attr_read_i64(f, "/", "format", &i64, &e2) == QF_EXIT_INPUT, "string read as int");
    memset(&e2, 0, sizeof e2);
    CHECK(qf_h5_attr_read_i64(f, "/state", "loss_scale", &i64, &e2) == QF_EXIT_INPUT, "float read as int");
    memset(&e2, 0, sizeof e2);
    CHECK(qf_h5_attr_read_str(f, "/", "format", s, 5, &e2) == QF_EXIT_INPUT, "string too long for buffer");
    CHECK(qf_h5_close(f, &e) == 0, "%s", e.msg);

    /* a file without the config: read_config names the missing attribute */
    f = create_scratch("noconf.h5", path, &e);
    if (!f) return;
    CHECK(qf_h5_attr_write_str(f, "/", "arch", "qwen2", &e) == 0, "%s", e.msg);
    CHECK(qf_h5_close(f, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_open(path, MPI_COMM_WORLD, 0, &f, &e) == 0, "%s", e.msg);
    if (!f) return;
    memset(&e2, 0, sizeof e2);
    CHECK(qf_h5_read_config(f, &r, &e2) == QF_EXIT_INPUT, "config missing");
    CHECK(strstr(e2.msg, path) && strstr(e2.msg, "family"), "message names file and attribute: %s", e2.msg);
    CHECK(qf_h5_close(f, &e) == 0, "%s", e.msg);
}

static void test_bad_files(void) {
    qf_err e = {0};
    qf_h5 *f = NULL;
    char path[512];
    /* missing */
    snprintf(path, sizeof path, "%s/does_not_exist.h5", dir);
    CHECK(qf_h5_open(path, MPI_COMM_WORLD, 0, &f, &e) == QF_EXIT_INPUT && !f, "missing file");
    CHECK(strstr(e.msg, path) != NULL, "message names the path: %s", e.msg);
    /* a text file named x.h5 */
    snprintf(path, sizeof path, "%s/x.h5", dir);
    if (rank == 0) {
        FILE *fp = fopen(path, "w");
        fputs("this is not HDF5\n", fp);
        fclose(fp);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    memset(&e, 0, sizeof e);
    CHECK(qf_h5_open(path, MPI_COMM_WORLD, 0, &f, &e) == QF_EXIT_INPUT && !f, "text file");
    CHECK(strstr(e.msg, path) && strstr(e.msg, "not an HDF5"), "message: %s", e.msg);
    /* a truncated HDF5 file: the first part of a real one */
    char good[512];
    snprintf(path, sizeof path, "%s/truncated.h5", dir);
    f = create_scratch("full.h5", good, &e);
    if (!f) return;
    enum { N = 20000 };
    float *big = calloc(N, sizeof *big);
    int64_t shape[1] = {N};
    for (int i = 0; i < N; i++) big[i] = (float)i;
    CHECK(qf_h5_write_f32(f, "/params", "big", 1, shape, QF_DT_F32, 0, rank == 0 ? N : 0, big, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_attr_write_i64(f, "/", "format_version", 1, &e) == 0, "%s", e.msg);
    CHECK(qf_h5_close(f, &e) == 0, "%s", e.msg);
    if (rank == 0) {
        FILE *in = fopen(good, "rb"), *out = fopen(path, "wb");
        char *buf = malloc(1 << 20);
        size_t n = fread(buf, 1, 1 << 20, in);
        fwrite(buf, 1, n / 2, out);
        fclose(in);
        fclose(out);
        free(buf);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    memset(&e, 0, sizeof e);
    int rc = qf_h5_open(path, MPI_COMM_WORLD, 0, &f, &e);
    if (rc == 0) { /* if the library let it open, reading must fail */
        rc = qf_h5_read_f32(f, "/params", "big", 0, N, big, &e);
        qf_err ig = {0};
        qf_h5_close(f, &ig);
    }
    CHECK(rc == QF_EXIT_INPUT && strstr(e.msg, path), "truncated file: rc %d: %s", rc, e.msg);
    if (rank == 0) printf("  truncated file reports: %s\n", e.msg);
    free(big);
    /* cannot create in a missing directory */
    snprintf(path, sizeof path, "%s/no/such/dir/m.h5", dir);
    memset(&e, 0, sizeof e);
    CHECK(qf_h5_create(path, MPI_COMM_WORLD, &f, &e) == QF_EXIT_INPUT && strstr(e.msg, path), "create: %s", e.msg);
}

static void test_dtype_names(void) {
    qf_dtype t;
    CHECK(qf_dtype_parse("bf16", &t) == 0 && t == QF_DT_BF16, "bf16");
    CHECK(qf_dtype_parse("fp16", &t) == 0 && t == QF_DT_F16, "fp16");
    CHECK(qf_dtype_parse("fp32", &t) == 0 && t == QF_DT_F32, "fp32");
    CHECK(qf_dtype_parse("float", &t) == -1, "unknown");
    CHECK(!strcmp(qf_dtype_name(QF_DT_BF16), "bf16") && !strcmp(qf_dtype_name(QF_DT_F32), "fp32"), "names");
}

int main(void) {
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/qf_test_h5io_%d", (int)getpid());
        qf_mkdirs(dir);
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    test_dtype_names();
    test_ranges();
    test_rounding();
    test_attrs_config();
    test_bad_files();
    /* every call closed what it opened (error paths included) */
    ssize_t open_ids = H5Fget_obj_count((hid_t)H5F_OBJ_ALL, H5F_OBJ_ALL);
    CHECK(open_ids == 0, "%zd HDF5 objects still open", open_ids);
    int all = 0;
    MPI_Allreduce(&qf_test_failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        char label[64];
        snprintf(label, sizeof label, "test_h5io (%d rank%s)", nranks, nranks > 1 ? "s" : "");
        qf_test_verdict(label, all, dir);
    }
    MPI_Finalize();
    return all ? 1 : 0;
}
