/* model_io.c — model sources: an HF directory, an HDF5 model (qwen-ft import), a checkpoint file, or a
 * checkpoint directory (its `latest`). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "checkpoint.h"
#include "h5io.h"
#include "model.h"

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

int qf_model_load(qf_model *m, const char *from, qf_err *e) {
    char path[QF_PATH_MAX + 64];
    int kind = source_resolve(from, path, sizeof path, e);
    if (kind < 0) return e->code;
    int64_t n = m->n_params;
    float *host = qf_malloc((size_t)n * 4);
    if (kind == 1) {
        qf_hf hf;
        if (qf_hf_open(path, &hf, e) == 0) {
            for (int i = 0; i < m->nspecs && !e->code; i++) qf_hf_read_param(&hf, m->specs[i].name, host + m->offset[i], e);
            qf_hf_close(&hf);
        }
    } else {
        qf_h5 *f = NULL;
        if (qf_h5_open(path, MPI_COMM_SELF, 0, &f, e) == 0) {
            /* a checkpoint's fp32 master weights are the exact parameters; a model file has only /params */
            const char *g = qf_h5_has(f, "master", NULL) ? "master" : "params";
            for (int i = 0; i < m->nspecs && !e->code; i++)
                qf_h5_read_f32(f, g, m->specs[i].name, 0, m->specs[i].numel, host + m->offset[i], e);
            qf_err ce = {0};
            qf_h5_close(f, &ce);
        }
    }
    if (!e->code) {
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
