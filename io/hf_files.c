/* hf_files.c — see hf_files.h. */
#include "hf_files.h"
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "h5_impl.h"

static const char *const k_names[] = {"tokenizer.json",          "qwen.tiktoken",     "tokenizer_config.json",
                                      "vocab.json",              "merges.txt",        "special_tokens_map.json",
                                      "added_tokens.json",       "chat_template.jinja", "generation_config.json",
                                      NULL};

const char *const *qf_hf_files_names(void) { return k_names; }

static void hf_add(qf_hf_files *hf, const char *name, unsigned char *data, size_t n) {
    QF_CHECK(hf->n < QF_HF_FILES_MAX);
    snprintf(hf->name[hf->n], sizeof hf->name[0], "%s", name);
    hf->data[hf->n] = data;
    hf->size[hf->n++] = n;
}

static int hf_slurp(const char *path, unsigned char **out, size_t *n, qf_err *e) {
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        if (f) fclose(f);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot read: %s", path, strerror(errno));
    }
    if ((size_t)st.st_size > QF_HF_FILE_LIMIT) {
        fclose(f);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: %lld bytes, more than the %zu MiB carried in HDF5 files", path,
                          (long long)st.st_size, QF_HF_FILE_LIMIT >> 20);
    }
    *out = qf_malloc((size_t)st.st_size + 1);
    *n = fread(*out, 1, (size_t)st.st_size, f);
    int bad = ferror(f) || *n != (size_t)st.st_size;
    fclose(f);
    if (bad) {
        free(*out);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: read failed", path);
    }
    return 0;
}

int qf_hf_files_from_dir(const char *dir, qf_hf_files *hf, qf_err *e) {
    char d[1024], p[1100];
    struct stat st;
    int file_given = stat(dir, &st) == 0 && S_ISREG(st.st_mode);
    memset(hf, 0, sizeof *hf);
    snprintf(d, sizeof d, "%s", dir);
    if (file_given) {
        char *slash = strrchr(d, '/');
        if (slash) *slash = 0;
        else snprintf(d, sizeof d, ".");
    }
    for (int i = 0; k_names[i]; i++) {
        if (file_given && !strcmp(k_names[i], "generation_config.json")) continue;
        snprintf(p, sizeof p, "%s/%s", d, k_names[i]);
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        unsigned char *b = NULL;
        size_t n = 0;
        if (hf_slurp(p, &b, &n, e)) {
            qf_hf_files_free(hf);
            return e->code;
        }
        hf_add(hf, k_names[i], b, n);
    }
    return 0;
}

int qf_hf_files_write(qf_h5 *f, const qf_hf_files *hf, qf_err *e) {
    if (!hf || hf->n == 0) return 0;
    int rank = 0, bad = 0;
    MPI_Comm_rank(qf_h5_comm_of(f), &rank);
    h5_quiet q;
    h5_quiet_begin(&q);
    hid_t file = qf_h5_hid(f), g = -1;
    if (H5Lexists(file, QF_HF_FILES_GROUP, H5P_DEFAULT) > 0) H5Ldelete(file, QF_HF_FILES_GROUP, H5P_DEFAULT);
    g = H5Gcreate2(file, QF_HF_FILES_GROUP, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    bad = g < 0;
    for (int i = 0; i < hf->n && !bad; i++) {
        hsize_t n = hf->size[i] ? hf->size[i] : 0;
        hid_t sp = H5Screate_simple(1, &n, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
        hid_t ds = H5Dcreate2(g, hf->name[i], H5T_STD_U8LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        bad = ds < 0;
        if (!bad && rank == 0 && n > 0) bad = H5Dwrite(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, hf->data[i]) < 0;
        if (ds >= 0) H5Dclose(ds);
        H5Pclose(dcpl);
        H5Sclose(sp);
    }
    if (g >= 0) H5Gclose(g);
    h5_quiet_end(&q);
    int any = bad;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, qf_h5_comm_of(f));
    return any ? qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot write /%s (the tokenizer and generation files)",
                            qf_h5_path_of(f), QF_HF_FILES_GROUP)
               : 0;
}

int qf_hf_files_read(qf_h5 *f, qf_hf_files *hf, qf_err *e) {
    memset(hf, 0, sizeof *hf);
    h5_quiet q;
    h5_quiet_begin(&q);
    hid_t file = qf_h5_hid(f);
    int rc = 0;
    if (H5Lexists(file, QF_HF_FILES_GROUP, H5P_DEFAULT) > 0) {
        hid_t g = H5Gopen2(file, QF_HF_FILES_GROUP, H5P_DEFAULT);
        for (int i = 0; g >= 0 && k_names[i] && !rc; i++) {
            if (H5Lexists(g, k_names[i], H5P_DEFAULT) <= 0) continue;
            hid_t ds = H5Dopen2(g, k_names[i], H5P_DEFAULT), sp = ds >= 0 ? H5Dget_space(ds) : -1;
            hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
            if (n < 0 || (size_t)n > QF_HF_FILE_LIMIT) {
                rc = qf_err_set(e, QF_EXIT_INPUT, "%s: /%s/%s is not a readable byte array", qf_h5_path_of(f),
                                QF_HF_FILES_GROUP, k_names[i]);
            } else {
                unsigned char *b = qf_malloc((size_t)n + 1);
                if (n > 0 && H5Dread(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) < 0) {
                    free(b);
                    rc = qf_err_set(e, QF_EXIT_INPUT, "%s: cannot read /%s/%s", qf_h5_path_of(f), QF_HF_FILES_GROUP,
                                    k_names[i]);
                } else {
                    hf_add(hf, k_names[i], b, (size_t)n);
                }
            }
            if (sp >= 0) H5Sclose(sp);
            if (ds >= 0) H5Dclose(ds);
        }
        if (g >= 0) H5Gclose(g);
    }
    h5_quiet_end(&q);
    if (rc) qf_hf_files_free(hf);
    return rc;
}

int qf_hf_files_read_path(const char *path, qf_hf_files *hf) {
    qf_h5 *f = NULL;
    qf_err e = {0};
    struct stat st;
    memset(hf, 0, sizeof *hf);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || qf_h5_open(path, MPI_COMM_SELF, 0, &f, &e)) return 0;
    if (qf_hf_files_read(f, hf, &e)) memset(hf, 0, sizeof *hf);
    qf_h5_close(f, &e);
    return 0;
}

int qf_hf_files_add_to_path(const char *path, const qf_hf_files *hf, qf_err *e) {
    qf_h5 *f = NULL;
    if (!hf || hf->n == 0) return 0;
    if (qf_h5_open(path, MPI_COMM_SELF, 1, &f, e)) return e->code;
    int rc = qf_hf_files_write(f, hf, e);
    qf_err ce = {0};
    if (qf_h5_close(f, &ce) && !rc) rc = qf_err_set(e, ce.code, "%s", ce.msg);
    return rc;
}

const unsigned char *qf_hf_files_get(const qf_hf_files *hf, const char *name, size_t *n) {
    for (int i = 0; hf && i < hf->n; i++)
        if (!strcmp(hf->name[i], name)) {
            if (n) *n = hf->size[i];
            return hf->data[i];
        }
    return NULL;
}

int qf_hf_files_has_tokenizer(const qf_hf_files *hf) {
    return qf_hf_files_get(hf, "tokenizer.json", NULL) || qf_hf_files_get(hf, "qwen.tiktoken", NULL);
}

int qf_hf_files_save(const qf_hf_files *hf, const char *dir, const char *skip, qf_err *e) {
    char p[1100];
    for (int i = 0; hf && i < hf->n; i++) {
        if (skip && !strcmp(hf->name[i], skip)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, hf->name[i]);
        FILE *f = fopen(p, "wb");
        int ok = f && fwrite(hf->data[i], 1, hf->size[i], f) == hf->size[i];
        if (f && fclose(f)) ok = 0;
        if (!ok) return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot write: %s", p, strerror(errno));
    }
    return 0;
}

void qf_hf_files_copy(qf_hf_files *dst, const qf_hf_files *src) {
    memset(dst, 0, sizeof *dst);
    for (int i = 0; src && i < src->n; i++) {
        unsigned char *b = qf_malloc(src->size[i] + 1);
        memcpy(b, src->data[i], src->size[i]);
        hf_add(dst, src->name[i], b, src->size[i]);
    }
}

void qf_hf_files_free(qf_hf_files *hf) {
    for (int i = 0; i < hf->n; i++) free(hf->data[i]);
    memset(hf, 0, sizeof *hf);
}
