/* dataset_pwrite.c — collective writes of a packed dataset (dataset_pwrite.h). Writes use collective MPI-IO
 * transfers; a rank without data selects nothing but still takes part. */
#include "dataset_pwrite.h"
#include <errno.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dataset.h"
#include "h5_impl.h"
#include "out_file.h"

struct qf_dsp {
    MPI_Comm comm;
    int rank;
    char *path, *tmp;
    hid_t file, dtok, dmask, doff, dxpl;
    int64_t n_tokens, n_docs;
    int publish; /* qf_dsp_finish renames tmp to path (0: the caller's temporary, left for it) */
    int slot;    /* rank 0: tmp in the exit-path tracker (out_file.h) */
};

/* 0 on every rank when ok is 1 on every rank */
static int dsp_agree(MPI_Comm comm, int ok) {
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
    return all ? 0 : -1;
}

static int dsp_open(qf_dsp *w, int64_t n_tokens, int64_t n_docs, qf_dsp **out, qf_err *e);

int qf_dsp_create(const char *path, MPI_Comm comm, int64_t n_tokens, int64_t n_docs, qf_dsp **out, qf_err *e) {
    *out = NULL;
    qf_dsp *w = qf_calloc(1, sizeof *w);
    w->comm = comm;
    MPI_Comm_rank(comm, &w->rank);
    w->path = qf_strdup(path);
    w->tmp = qf_calloc(QF_OUT_PATH_MAX + 32, 1);
    if (w->rank == 0 && qf_out_tmpname(path, w->tmp, QF_OUT_PATH_MAX + 32) != 0) w->tmp[0] = 0;
    MPI_Bcast(w->tmp, QF_OUT_PATH_MAX + 32, MPI_CHAR, 0, comm); /* one file, one name on every rank */
    w->publish = 1;
    w->slot = w->rank == 0 && w->tmp[0] ? qf_tmp_track(w->tmp) : -1;
    return dsp_open(w, n_tokens, n_docs, out, e);
}

int qf_dsp_create_tmp(const char *path, const char *tmp, MPI_Comm comm, int64_t n_tokens, int64_t n_docs,
                      qf_dsp **out, qf_err *e) {
    *out = NULL;
    qf_dsp *w = qf_calloc(1, sizeof *w);
    w->comm = comm;
    MPI_Comm_rank(comm, &w->rank);
    w->path = qf_strdup(path);
    w->tmp = qf_strdup(tmp);
    w->slot = -1; /* the caller tracks it */
    return dsp_open(w, n_tokens, n_docs, out, e);
}

static int dsp_open(qf_dsp *w, int64_t n_tokens, int64_t n_docs, qf_dsp **out, qf_err *e) {
    MPI_Comm comm = w->comm;
    w->file = w->dtok = w->dmask = w->doff = w->dxpl = -1;
    w->n_tokens = n_tokens;
    w->n_docs = n_docs;
    h5_quiet q;
    h5_quiet_begin(&q);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    int ok = fapl >= 0 && H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) >= 0;
    if (ok && w->tmp[0]) w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    ok = w->file >= 0;
    if (ok) {
        w->dtok = (hid_t)qf_dataset_h5_create_1d(w->file, "/tokens", 4, n_tokens);
        w->dmask = (hid_t)qf_dataset_h5_create_1d(w->file, "/loss_mask", 1, n_tokens);
        w->doff = (hid_t)qf_dataset_h5_create_1d(w->file, "/doc_offsets", 8, n_docs + 1);
        w->dxpl = H5Pcreate(H5P_DATASET_XFER);
        ok = w->dtok >= 0 && w->dmask >= 0 && w->doff >= 0 && w->dxpl >= 0 &&
             H5Pset_dxpl_mpio(w->dxpl, H5FD_MPIO_COLLECTIVE) >= 0;
    }
    h5_quiet_end(&q);
    if (dsp_agree(comm, ok)) {
        qf_err_set(e, QF_EXIT_INPUT, "%s: cannot create an HDF5 file (no directory, no permission, disk full?)",
                   w->tmp);
        qf_dsp_abort(w);
        return QF_EXIT_INPUT;
    }
    *out = w;
    return 0;
}

/* elements [off, off+n) of d from buf (n = 0: this rank selects nothing) */
static int dsp_range(qf_dsp *w, hid_t d, hid_t memtype, int64_t off, int64_t n, const void *buf) {
    hid_t fs = H5Dget_space(d);
    hsize_t start = (hsize_t)off, count = (hsize_t)n, one = 1;
    herr_t r;
    hid_t ms;
    if (n > 0) {
        r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
        ms = H5Screate_simple(1, &count, NULL);
    } else {
        r = H5Sselect_none(fs);
        ms = H5Screate_simple(1, &one, NULL);
        H5Sselect_none(ms);
    }
    if (r >= 0) r = H5Dwrite(d, memtype, ms, fs, w->dxpl, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return r < 0 ? -1 : 0;
}

int qf_dsp_write_tokens(qf_dsp *w, int64_t off, int64_t n, const uint32_t *tok, const uint8_t *mask, qf_err *e) {
    h5_quiet q;
    h5_quiet_begin(&q);
    int ok = dsp_range(w, w->dtok, H5T_NATIVE_UINT32, off, n, tok) == 0;
    ok &= dsp_range(w, w->dmask, H5T_NATIVE_UINT8, off, n, mask) == 0;
    h5_quiet_end(&q);
    if (dsp_agree(w->comm, ok))
        return qf_err_set(e, QF_EXIT_INPUT, "%s: writing /tokens failed (disk full?)", w->tmp);
    return 0;
}

int qf_dsp_write_offsets(qf_dsp *w, int64_t off, int64_t n, const uint64_t *v, qf_err *e) {
    h5_quiet q;
    h5_quiet_begin(&q);
    int ok = dsp_range(w, w->doff, H5T_NATIVE_UINT64, off, n, v) == 0;
    h5_quiet_end(&q);
    if (dsp_agree(w->comm, ok))
        return qf_err_set(e, QF_EXIT_INPUT, "%s: writing /doc_offsets failed (disk full?)", w->tmp);
    return 0;
}

static void dsp_close(qf_dsp *w, int *ok) {
    hid_t *ids[] = {&w->dtok, &w->dmask, &w->doff};
    for (int i = 0; i < 3; i++)
        if (h5_close_id(ids[i], H5Dclose) < 0) *ok = 0;
    h5_close_id(&w->dxpl, H5Pclose);
    if (h5_close_id(&w->file, H5Fclose) < 0) *ok = 0;
}

static void dsp_free(qf_dsp *w) {
    qf_tmp_untrack(w->slot);
    free(w->path);
    free(w->tmp);
    free(w);
}

int qf_dsp_finish(qf_dsp *w, int64_t vocab_size, int64_t max_token, int64_t eos_id, int64_t pad_id,
                  const char *tokenizer, const char *source, qf_err *e) {
    h5_quiet q;
    h5_quiet_begin(&q);
    int ok = qf_dataset_h5_attrs(w->file, w->n_docs, w->n_tokens, vocab_size, max_token, eos_id, pad_id, tokenizer,
                                 source) == 0;
    dsp_close(w, &ok);
    h5_quiet_end(&q);
    int rc = 0;
    if (dsp_agree(w->comm, ok)) {
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: writing the attributes or closing failed (disk full?)", w->tmp);
    } else {
        int renamed = 1;
        qf_err pe = {0};
        if (w->publish && w->rank == 0 && qf_out_publish(w->tmp, w->path, &pe) != 0) renamed = 0;
        MPI_Bcast(&renamed, 1, MPI_INT, 0, w->comm);
        if (!renamed) rc = qf_err_set(e, QF_EXIT_RUNTIME, "%s", w->rank == 0 ? pe.msg : "rank 0 could not publish it");
    }
    if (rc && w->rank == 0) unlink(w->tmp);
    dsp_free(w);
    return rc;
}

void qf_dsp_abort(qf_dsp *w) {
    if (!w) return;
    int ok = 1;
    h5_quiet q;
    h5_quiet_begin(&q);
    dsp_close(w, &ok);
    h5_quiet_end(&q);
    MPI_Barrier(w->comm);
    if (w->rank == 0) unlink(w->tmp);
    dsp_free(w);
}
