/* model_io.c — model sources: an HF directory, an HDF5 model (qwen-ft import), a checkpoint file, or a
 * checkpoint directory (its `latest`). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "checkpoint.h"
#include "h5io.h"
#include "model/model.h"
#include "model_io.h"

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Resolves `from` to an HF dir (returns 1) or an HDF5 file (returns 2) in resolved; errors exit 2. */
static int source_resolve(const char *from, char *resolved, size_t cap, qf_err *e) {
    if (!qf_exists(from)) return qf_err_set(e, QF_EXIT_INPUT, "model.from: %s does not exist", from), -1;
    if (is_dir(from)) {
        if (qf_hf_is_dir(from)) {
            snprintf(resolved, cap, "%s", from);
            return 1;
        }
        int r = qf_ckpt_find_latest(from, resolved, cap, e);
        if (r < 0) return -1;
        if (r == 0)
            return qf_err_set(e, QF_EXIT_INPUT,
                              "model.from: %s is neither an HF model directory (config.json) nor a checkpoint "
                              "directory (latest)",
                              from),
                   -1;
        return 2;
    }
    snprintf(resolved, cap, "%s", from);
    return 2;
}

int qf_model_source_config(const char *from, qf_model_config *c, char *resolved, size_t cap, qf_err *e) {
    int kind = source_resolve(from, resolved, cap, e);
    if (kind < 0) return e->code;
    if (kind == 1) return qf_hf_read_config(resolved, c, e);
    qf_h5 *f = NULL;
    if (qf_h5_open(resolved, MPI_COMM_SELF, 0, &f, e)) return e->code;
    qf_h5_read_config(f, c, e);
    qf_err ce = {0};
    qf_h5_close(f, &ce);
    return e->code;
}

int qf_model_load_range(const qf_model *m, const char *from, int64_t b, int64_t en, float *out, qf_err *e) {
    char path[QF_PATH_MAX + 64];
    int kind = source_resolve(from, path, sizeof path, e);
    if (kind < 0) return e->code;
    qf_hf hf;
    qf_h5 *f = NULL;
    const char *group = "params";
    if (kind == 1) {
        if (qf_hf_open(path, &hf, e)) return e->code;
    } else {
        if (qf_h5_open(path, MPI_COMM_SELF, 0, &f, e)) return e->code;
        /* a checkpoint's fp32 master weights are the exact parameters; a model file has only /params */
        if (qf_h5_has(f, "master", NULL)) group = "master";
        for (int i = 0; i < m->nspecs && !e->code; i++) /* the shape, not only the element count */
            qf_h5_check_shape(f, group, m->specs[i].name, m->specs[i].ndim, m->specs[i].shape, e);
    }
    for (int i = 0; i < m->nspecs && !e->code; i++) {
        int64_t pb = m->offset[i], pe = pb + m->specs[i].numel;
        int64_t lo = pb > b ? pb : b, hi = pe < en ? pe : en;
        if (lo >= hi) continue;
        if (kind == 1) qf_hf_read_param_range(&hf, m->specs[i].name, lo - pb, hi - lo, out + (lo - b), e);
        else qf_h5_read_f32(f, group, m->specs[i].name, lo - pb, hi - lo, out + (lo - b), e);
    }
    if (kind == 1) {
        qf_hf_close(&hf);
    } else {
        qf_err ce = {0};
        qf_h5_close(f, &ce);
    }
    return e->code;
}

int qf_model_load(qf_model *m, const char *from, qf_err *e) {
    int64_t n = m->n_params;
    float *host = qf_malloc((size_t)n * 4);
    if (qf_model_load_range(m, from, 0, n, host, e) == 0) {
        const qf_ops *o = m->ops;
        float *dev = o->alloc((size_t)n * 4);
        QF_CHECK(dev);
        o->copy_h2d(dev, host, (size_t)n * 4);
        o->act_from_f32(m->params, dev, (size_t)n);
        o->free(dev);
    }
    free(host);
    return e->code;
}
