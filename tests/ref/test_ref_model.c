/* test_ref_model.c — the CPU model against HF transformers goldens (tests/reference/fixtures/<case>/
 * golden.safetensors, made by tests/reference/make_goldens.py): for the first global batch (4 packed rows of 16)
 * the loader's targets equal the golden's exactly; logits, the mean loss and EVERY parameter gradient agree to
 * 1e-4 relative (max |ours - golden| / max |golden| per tensor). */
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dataset.h"
#include "hf.h"
#include "model/loader.h"
#include "model/model.h"
#include "safetensors.h"
#include "store/model_io.h"

#define TOL 1e-4

static int fails;

static double rel_err(const float *a, const float *b, int64_t n) {
    double md = 0, mb = 0;
    for (int64_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mb = fmax(mb, fabs((double)b[i]));
    }
    return mb > 0 ? md / mb : md;
}

static void check(const char *cs, const char *what, double err) {
    int ok = err <= TOL;
    if (!ok) fails++;
    printf("  %-58s rel err %.2e %s\n", what, err, ok ? "ok" : "FAIL");
    (void)cs;
}

/* pre-tokenized JSONL -> packed dataset file */
static void jsonl_to_dataset(const char *jsonl, const char *out, int64_t vocab) {
    FILE *f = fopen(jsonl, "r");
    QF_CHECK(f);
    qf_dataset_builder b;
    qf_dsb_init(&b);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!o) continue;
        json_t *ids = json_object_get(o, "input_ids"), *lab = json_object_get(o, "labels"),
               *msk = json_object_get(o, "loss_mask");
        size_t n = json_array_size(ids);
        uint32_t *t = malloc(n * 4);
        uint8_t *m = malloc(n);
        for (size_t i = 0; i < n; i++) {
            t[i] = (uint32_t)json_integer_value(json_array_get(ids, i));
            m[i] = lab ? json_integer_value(json_array_get(lab, i)) != -100
                       : (msk ? (uint8_t)json_integer_value(json_array_get(msk, i)) : 1);
        }
        qf_dsb_add_doc(&b, t, m, (int64_t)n);
        free(t);
        free(m);
        json_decref(o);
    }
    free(line);
    fclose(f);
    qf_err e = {0};
    if (qf_dataset_write(out, &b, NULL, 0, vocab, vocab - 1, 0, "", jsonl, &e)) QF_FATAL("%s", e.msg);
    qf_dsb_free(&b);
}

static void run_case(const char *src, const char *cs) {
    char dir[1024], p[1200];
    snprintf(dir, sizeof dir, "%s/tests/reference/fixtures/%s", src, cs);
    printf("case %s\n", cs);
    qf_err e = {0};
    qf_model_config cfg;
    snprintf(p, sizeof p, "%s/hf", dir);
    if (qf_hf_read_config(p, &cfg, &e)) QF_FATAL("%s", e.msg);
    qf_model m;
    if (qf_model_create(&m, &cfg, qf_ops_cpu(), QF_MODEL_PARAMS | QF_MODEL_GRADS, &e) || qf_model_alloc_acts(&m, 4, 16, 0, -1, &e) ||
        qf_model_load(&m, p, &e))
        QF_FATAL("%s", e.msg);
    char ds_path[256];
    snprintf(ds_path, sizeof ds_path, "/tmp/qf-ref-%d-%s.h5", (int)getpid(), cs);
    snprintf(p, sizeof p, "%s/train.jsonl", dir);
    jsonl_to_dataset(p, ds_path, cfg.vocab_size);
    qf_dataset ds;
    if (qf_dataset_open(ds_path, &ds, &e)) QF_FATAL("%s", e.msg);
    qf_loader ld;
    qf_loader_init(&ld, &ds, 16, 0, 42);
    qf_rows rows;
    qf_rows_alloc(&rows, 4, 16);
    if (qf_loader_rows(&ld, 0, 0, &rows, &e)) QF_FATAL("%s", e.msg);

    qf_st st;
    snprintf(p, sizeof p, "%s/golden.safetensors", dir);
    if (qf_st_open_file(p, &st, &e)) QF_FATAL("%s", e.msg);
    int64_t N = 64, V = cfg.vocab_size;
    /* targets: the loader's packing equals the reference's */
    const qf_st_tensor *gt = qf_st_find(&st, "targets");
    QF_CHECK(gt && gt->numel == N);
    float *tg = malloc(N * 4);
    qf_st_read_f32(gt, 0, N, tg);
    int tmis = 0;
    for (int64_t i = 0; i < N; i++) tmis += (int)tg[i] != rows.targets[i];
    printf("  %-58s %d mismatches %s\n", "targets (packing, masks, segment boundaries)", tmis, tmis ? "FAIL" : "ok");
    fails += tmis != 0;
    /* logits */
    float *lg = malloc(N * V * 4), *gl = malloc(N * V * 4);
    qf_model_logits(&m, &rows, lg);
    const qf_st_tensor *glt = qf_st_find(&st, "logits");
    QF_CHECK(glt && glt->numel == N * V);
    qf_st_read_f32(glt, 0, N * V, gl);
    check(cs, "logits [4,16,V]", rel_err(lg, gl, N * V));
    /* loss and every gradient */
    memset(m.grads, 0, (size_t)m.n_params * 4);
    double loss = qf_model_step(&m, &rows, 1.0f / (float)rows.n_targets, 1) / (double)rows.n_targets;
    float gloss;
    qf_st_read_f32(qf_st_find(&st, "loss"), 0, 1, &gloss);
    check(cs, "loss (mean over trained targets)", fabs(loss - gloss) / fabs(gloss));
    int ngrads = 0;
    for (int i = 0; i < m.nspecs; i++) {
        char name[160];
        snprintf(name, sizeof name, "grad.%s", m.specs[i].name);
        const qf_st_tensor *g = qf_st_find(&st, name);
        if (!g || g->numel != m.specs[i].numel) {
            printf("  missing golden %s\n", name);
            fails++;
            continue;
        }
        float *want = malloc(g->numel * 4);
        qf_st_read_f32(g, 0, g->numel, want);
        check(cs, name, rel_err((float *)m.grads + m.offset[i], want, g->numel));
        free(want);
        ngrads++;
    }
    printf("  %d parameter gradients compared\n", ngrads);
    if (ngrads < 10) fails++;
    free(tg);
    free(lg);
    free(gl);
    qf_st_close(&st);
    qf_rows_free(&rows);
    qf_loader_free(&ld);
    qf_dataset_close(&ds);
    unlink(ds_path);
    qf_model_free(&m);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const char *src = getenv("SRC") ? getenv("SRC") : ".";
    const char *cases[] = {"qwen2_gqa_untied", "qwen2_tied", "qwen3_qknorm", "qwen_v1"};
    for (int i = 0; i < 4; i++) run_case(src, cases[i]);
    printf("%s (%d failures)\n", fails ? "FAIL" : "PASS", fails);
    MPI_Finalize();
    return fails != 0;
}
