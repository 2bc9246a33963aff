/* dataset.c — the packed dataset file (HDF5); see dataset.h and docs/formats.md ("Packed dataset").
 *
 * Files are opened and created with the default (sec2) driver: the packed dataset is read independently by
 * every rank and written by rank 0 alone, so MPI-IO buys nothing here. Datasets are chunked (1M elements) and
 * not compressed: the loader reads T-token ranges at random places, and with a filter every such read would
 * decompress a whole chunk. HDF5's automatic error printing is switched off around every call we make; each
 * failure is reported once, through qf_err, naming the file and what is wrong. Static helpers are dataset_* and
 * h5_* (ds_ is src/ds_config.c's DeepSpeed prefix). */
#include "dataset.h"
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "h5_impl.h"
#include "out_file.h"

#define DATASET_FORMAT "qwen-ft-packed"
#define DATASET_FORMAT_VERSION 1
#define DATASET_CHUNK ((int64_t)1 << 20) /* elements per chunk, and per staged write */

/* ---- HDF5 helpers (quiet mode and h5_close_id: h5_impl.h) ---------------------------------------------------- */

/* A short human name of an HDF5 datatype ("uint32", "int64", "float32", "string", ...). */
static void h5_type_name(hid_t t, char *buf, size_t cap) {
    H5T_class_t c = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    switch (c) {
    case H5T_INTEGER:
        snprintf(buf, cap, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", sz * 8);
        break;
    case H5T_FLOAT: snprintf(buf, cap, "float%zu", sz * 8); break;
    case H5T_STRING: snprintf(buf, cap, "string"); break;
    case H5T_ENUM: snprintf(buf, cap, "enum (%zu bytes)", sz); break;
    case H5T_COMPOUND: snprintf(buf, cap, "compound"); break;
    default: snprintf(buf, cap, "HDF5 type class %d", (int)c); break;
    }
}

/* Reads a scalar integer attribute of obj. *present = 0 when absent (then returns 0, *v untouched);
 * returns -1 (with a reason in why) when present but not a single integer. */
static int h5_attr_i64(hid_t obj, const char *name, int64_t *v, int *present, char *why, size_t cap) {
    *present = 0;
    if (H5Aexists(obj, name) <= 0) return 0;
    *present = 1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return snprintf(why, cap, "cannot be opened"), -1;
    hid_t t = H5Aget_type(a), s = H5Aget_space(a);
    int rc = -1;
    char tn[64];
    h5_type_name(t, tn, sizeof tn);
    if (H5Tget_class(t) != H5T_INTEGER)
        snprintf(why, cap, "is %s, expected an integer", tn);
    else if (H5Sget_simple_extent_npoints(s) != 1)
        snprintf(why, cap, "has %lld values, expected one", (long long)H5Sget_simple_extent_npoints(s));
    else if (H5Aread(a, H5T_NATIVE_INT64, v) < 0)
        snprintf(why, cap, "cannot be read");
    else
        rc = 0;
    H5Sclose(s);
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

/* Reads a scalar string attribute (fixed or variable length) into buf[cap] (truncating). Same convention as
 * h5_attr_i64. */
static int h5_attr_str(hid_t obj, const char *name, char *buf, size_t cap, int *present, char *why, size_t wcap) {
    *present = 0;
    if (H5Aexists(obj, name) <= 0) return 0;
    *present = 1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return snprintf(why, wcap, "cannot be opened"), -1;
    hid_t t = H5Aget_type(a), s = H5Aget_space(a), mt = -1;
    int rc = -1;
    char tn[64];
    h5_type_name(t, tn, sizeof tn);
    if (H5Tget_class(t) != H5T_STRING) {
        snprintf(why, wcap, "is %s, expected a string", tn);
    } else if (H5Sget_simple_extent_npoints(s) != 1) {
        snprintf(why, wcap, "has %lld values, expected one string", (long long)H5Sget_simple_extent_npoints(s));
    } else if (H5Tis_variable_str(t) > 0) {
        mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, H5Tget_cset(t)); /* HDF5 does not convert between ASCII and UTF-8 */
        char *p = NULL;
        if (H5Aread(a, mt, &p) < 0) {
            snprintf(why, wcap, "cannot be read");
        } else {
            snprintf(buf, cap, "%s", p ? p : "");
            if (p) H5free_memory(p);
            rc = 0;
        }
    } else {
        size_t sz = H5Tget_size(t);
        char *tmp = qf_calloc(sz + 1, 1);
        mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, sz + 1);
        H5Tset_strpad(mt, H5T_STR_NULLTERM);
        H5Tset_cset(mt, H5Tget_cset(t));
        if (H5Aread(a, mt, tmp) < 0) {
            snprintf(why, wcap, "cannot be read");
        } else {
            tmp[sz] = 0;
            snprintf(buf, cap, "%s", tmp);
            rc = 0;
        }
        free(tmp);
    }
    if (mt >= 0) H5Tclose(mt);
    H5Sclose(s);
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

static herr_t h5_attr_write_i64(hid_t obj, const char *name, int64_t v) {
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT64, &v);
    if (a >= 0) H5Aclose(a);
    H5Sclose(s);
    return r;
}

/* Variable-length UTF-8 string: h5py reads it as str, h5dump prints it plainly. */
static herr_t h5_attr_write_str(hid_t obj, const char *name, const char *v) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    const char *p = v ? v : "";
    herr_t r = a < 0 ? -1 : H5Awrite(a, t, &p);
    if (a >= 0) H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    return r;
}

/* Reads or writes elements [off, off+n) of a 1-D dataset. */
static herr_t h5_range_io(hid_t d, int write, hid_t memtype, int64_t off, int64_t n, void *buf) {
    if (n == 0) return 0;
    hid_t fs = H5Dget_space(d);
    if (fs < 0) return -1;
    hsize_t start = (hsize_t)off, count = (hsize_t)n;
    herr_t r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    hid_t ms = H5Screate_simple(1, &count, NULL);
    if (r >= 0 && ms >= 0)
        r = write ? H5Dwrite(d, memtype, ms, fs, H5P_DEFAULT, buf) : H5Dread(d, memtype, ms, fs, H5P_DEFAULT, buf);
    else
        r = -1;
    if (ms >= 0) H5Sclose(ms);
    H5Sclose(fs);
    return r;
}

/* Opens 1-D dataset `name`, checks its integer type (size bytes; want_unsigned: 1 = must be unsigned,
 * 0 = either sign); returns the id and its length, or -1 with an error naming the file. *is_signed gets the sign. */
static hid_t dataset_open_1d(const char *path, hid_t fid, const char *name, size_t size, int want_unsigned,
                             const char *want, int64_t *len, int *is_signed, qf_err *e) {
    if (H5Lexists(fid, name, H5P_DEFAULT) <= 0) {
        qf_err_set(e, QF_EXIT_INPUT, "%s: not a packed dataset: missing dataset %s", path, name);
        return -1;
    }
    hid_t d = H5Dopen2(fid, name, H5P_DEFAULT);
    if (d < 0) {
        qf_err_set(e, QF_EXIT_INPUT, "%s: %s is not a readable dataset", path, name);
        return -1;
    }
    /* Chunk cache: the loader reads short ranges at random places. An unfiltered chunk that does not fit the
     * cache is read directly (only the selected bytes), so with no filter the cache is switched off; with the
     * default 1 MiB cache every read of a new 1 MiB /loss_mask chunk would read the whole chunk. Filtered
     * (compressed) chunks, as in hand-made files, keep a cache large enough for a few chunks. */
    hid_t dcpl = H5Dget_create_plist(d);
    int nfilters = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED ? H5Pget_nfilters(dcpl) : -1;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (nfilters >= 0) {
        /* reopen with the cache settings: they are taken when the dataset is first opened, so close it first */
        hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
        H5Pset_chunk_cache(dapl, 521, nfilters ? (size_t)64 << 20 : 0, 0.75);
        H5Dclose(d);
        d = H5Dopen2(fid, name, dapl);
        H5Pclose(dapl);
        if (d < 0) {
            qf_err_set(e, QF_EXIT_INPUT, "%s: %s is not a readable dataset", path, name);
            return -1;
        }
    }
    hid_t t = H5Dget_type(d), s = H5Dget_space(d);
    char tn[64];
    h5_type_name(t, tn, sizeof tn);
    int ok = H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == size &&
             (!want_unsigned || H5Tget_sign(t) == H5T_SGN_NONE);
    if (is_signed) *is_signed = H5Tget_class(t) == H5T_INTEGER && H5Tget_sign(t) != H5T_SGN_NONE;
    int nd = H5Sget_simple_extent_ndims(s);
    hsize_t dim = 0;
    if (nd == 1) H5Sget_simple_extent_dims(s, &dim, NULL);
    H5Sclose(s);
    H5Tclose(t);
    if (!ok) {
        qf_err_set(e, QF_EXIT_INPUT, "%s: dataset %s has dtype %s, expected %s", path, name, tn, want);
        H5Dclose(d);
        return -1;
    }
    if (nd != 1) {
        qf_err_set(e, QF_EXIT_INPUT, "%s: dataset %s has %d dimensions, expected 1", path, name, nd);
        H5Dclose(d);
        return -1;
    }
    *len = (int64_t)dim;
    return d;
}

/* ---- open / validate ----------------------------------------------------------------------------------------- */

/* The root attributes format = DATASET_FORMAT and format_version = DATASET_FORMAT_VERSION. */
static int dataset_check_format(const char *path, hid_t fid, qf_err *e) {
    char why[256], fmt[64];
    int present;
    if (h5_attr_str(fid, "format", fmt, sizeof fmt, &present, why, sizeof why) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: root attribute format %s", path, why);
    if (!present)
        return qf_err_set(e, QF_EXIT_INPUT,
                          "%s: not a qwen-ft packed dataset: missing root attribute format (expected \"%s\"; "
                          "make one with `qwen-ft prepare`)", path, DATASET_FORMAT);
    if (strcmp(fmt, DATASET_FORMAT) != 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: root attribute format is \"%s\", expected \"%s\"", path, fmt,
                          DATASET_FORMAT);
    int64_t ver = 0;
    if (h5_attr_i64(fid, "format_version", &ver, &present, why, sizeof why) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: root attribute format_version %s", path, why);
    if (!present) return qf_err_set(e, QF_EXIT_INPUT, "%s: missing root attribute format_version", path);
    if (ver != DATASET_FORMAT_VERSION)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: format_version %lld is not supported (this qwen-ft reads %d)",
                          path, (long long)ver, DATASET_FORMAT_VERSION);
    return 0;
}

/* doc_offsets o[noff] (read as int64 when the dataset is signed): none negative, o[0] = 0, monotone, ending at
 * ntok. */
static int dataset_check_offsets(const char *path, const uint64_t *o, int64_t noff, int off_signed, int64_t ntok,
                                 qf_err *e) {
    if (off_signed)
        for (int64_t i = 0; i < noff; i++)
            if ((int64_t)o[i] < 0)
                return qf_err_set(e, QF_EXIT_INPUT, "%s: /doc_offsets[%lld] = %lld is negative", path, (long long)i,
                                  (long long)(int64_t)o[i]);
    if (o[0] != 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: /doc_offsets[0] = %llu, must be 0", path, (unsigned long long)o[0]);
    for (int64_t i = 1; i < noff; i++)
        if (o[i] < o[i - 1])
            return qf_err_set(e, QF_EXIT_INPUT,
                              "%s: /doc_offsets is not monotone: doc_offsets[%lld] = %llu < doc_offsets[%lld] = %llu",
                              path, (long long)i, (unsigned long long)o[i], (long long)(i - 1),
                              (unsigned long long)o[i - 1]);
    if (o[noff - 1] != (uint64_t)ntok)
        return qf_err_set(e, QF_EXIT_INPUT,
                          "%s: /doc_offsets ends at %llu but /tokens has %lld tokens (the last offset must equal "
                          "n_tokens)", path, (unsigned long long)o[noff - 1], (long long)ntok);
    return 0;
}

/* Opens /tokens and /loss_mask (kept open in ds), checks their types and lengths, and reads and checks
 * /doc_offsets into ds->doc_offsets [n_docs+1]; sets n_tokens and n_docs. */
static int dataset_open_arrays(qf_dataset *ds, hid_t fid, qf_err *e) {
    const char *path = ds->path;
    int64_t ntok = 0, nmask = 0, noff = 0;
    int off_signed = 0;
    hid_t dt = dataset_open_1d(path, fid, "/tokens", 4, 1, "uint32", &ntok, NULL, e);
    if (dt < 0) return e->code;
    ds->h5tokens = dt;
    hid_t dm = dataset_open_1d(path, fid, "/loss_mask", 1, 0, "uint8", &nmask, NULL, e);
    if (dm < 0) return e->code;
    ds->h5mask = dm;
    if (nmask != ntok)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: /loss_mask has %lld elements but /tokens has %lld", path,
                          (long long)nmask, (long long)ntok);
    hid_t doff = dataset_open_1d(path, fid, "/doc_offsets", 8, 0, "uint64", &noff, &off_signed, e);
    if (doff < 0) return e->code;
    if (noff < 1) {
        H5Dclose(doff);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: /doc_offsets is empty (it holds n_docs+1 offsets, first 0)", path);
    }
    ds->n_tokens = ntok;
    ds->n_docs = noff - 1;
    ds->doc_offsets = qf_malloc((size_t)noff * sizeof(uint64_t));
    herr_t r = h5_range_io(doff, 0, off_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64, 0, noff, ds->doc_offsets);
    H5Dclose(doff);
    if (r < 0) return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot read /doc_offsets (file damaged?)", path);
    return dataset_check_offsets(path, ds->doc_offsets, noff, off_signed, ntok, e);
}

/* The root attributes n_tokens and n_docs, when stored, agree with the datasets. */
static int dataset_check_counts(const qf_dataset *ds, hid_t fid, qf_err *e) {
    const char *path = ds->path;
    char why[256];
    int present;
    int64_t v = 0;
    if (h5_attr_i64(fid, "n_tokens", &v, &present, why, sizeof why) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: root attribute n_tokens %s", path, why);
    if (present && v != ds->n_tokens)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute n_tokens = %lld but /tokens has %lld", path,
                          (long long)v, (long long)ds->n_tokens);
    if (h5_attr_i64(fid, "n_docs", &v, &present, why, sizeof why) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: root attribute n_docs %s", path, why);
    if (present && v != ds->n_docs)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute n_docs = %lld but /doc_offsets describes %lld documents",
                          path, (long long)v, (long long)ds->n_docs);
    return 0;
}

/* The optional identity attributes vocab_size (default 0), eos_token_id, pad_token_id (default -1) and
 * tokenizer (default ""). */
static int dataset_read_identity(qf_dataset *ds, hid_t fid, qf_err *e) {
    const char *path = ds->path;
    char why[256];
    int present;
    ds->vocab_size = 0;
    if (h5_attr_i64(fid, "vocab_size", &ds->vocab_size, &present, why, sizeof why) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: root attribute vocab_size %s", path, why);
    if (ds->vocab_size < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: vocab_size = %lld is negative (0 means unknown)", path,
                          (long long)ds->vocab_size);
    ds->eos_token_id = ds->pad_token_id = -1;
    if (h5_attr_i64(fid, "eos_token_id", &ds->eos_token_id, &present, why, sizeof why) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: root attribute eos_token_id %s", path, why);
    if (h5_attr_i64(fid, "pad_token_id", &ds->pad_token_id, &present, why, sizeof why) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: root attribute pad_token_id %s", path, why);
    if (h5_attr_str(fid, "tokenizer", ds->tokenizer, sizeof ds->tokenizer, &present, why, sizeof why) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: root attribute tokenizer %s", path, why);
    return 0;
}

/* ds->max_token: the stored max_token_id, or a scan of /tokens when the file was made without it. */
static int dataset_read_max_token(qf_dataset *ds, hid_t fid, qf_err *e) {
    const char *path = ds->path;
    char why[256];
    int present;
    if (h5_attr_i64(fid, "max_token_id", &ds->max_token, &present, why, sizeof why) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: root attribute max_token_id %s", path, why);
    if (present) return 0;
    int64_t ntok = ds->n_tokens, mx = -1;
    uint32_t *buf = qf_malloc((size_t)(ntok < DATASET_CHUNK ? (ntok ? ntok : 1) : DATASET_CHUNK) * sizeof *buf);
    for (int64_t off = 0; off < ntok; off += DATASET_CHUNK) {
        int64_t n = ntok - off < DATASET_CHUNK ? ntok - off : DATASET_CHUNK;
        if (h5_range_io((hid_t)ds->h5tokens, 0, H5T_NATIVE_UINT32, off, n, buf) < 0) {
            free(buf);
            return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot read /tokens (file damaged?)", path);
        }
        for (int64_t i = 0; i < n; i++)
            if ((int64_t)buf[i] > mx) mx = buf[i];
    }
    free(buf);
    ds->max_token = mx;
    return 0;
}

/* The token ids (max_token, eos, pad) fit their types and vocab_size. */
static int dataset_check_ids(const qf_dataset *ds, qf_err *e) {
    const char *path = ds->path;
    if (ds->vocab_size > 0 && ds->max_token >= ds->vocab_size)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: token id %lld >= vocab_size %lld (max_token_id)", path,
                          (long long)ds->max_token, (long long)ds->vocab_size);
    /* ids are int32 wherever they are used (the loader's rows, the model's embedding) */
    if (ds->eos_token_id < -1 || ds->eos_token_id > INT32_MAX)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: eos_token_id = %lld is not a token id (0..%d, or -1 = unknown)", path,
                          (long long)ds->eos_token_id, INT32_MAX);
    if (ds->pad_token_id < -1 || ds->pad_token_id > INT32_MAX)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: pad_token_id = %lld is not a token id (0..%d, or -1 = unknown)", path,
                          (long long)ds->pad_token_id, INT32_MAX);
    if (ds->max_token < -1 || ds->max_token > UINT32_MAX)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: max_token_id = %lld is not a uint32 token id", path,
                          (long long)ds->max_token);
    if (ds->eos_token_id >= 0 && ds->vocab_size > 0 && ds->eos_token_id >= ds->vocab_size)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: eos_token_id %lld >= vocab_size %lld", path,
                          (long long)ds->eos_token_id, (long long)ds->vocab_size);
    if (ds->pad_token_id >= 0 && ds->vocab_size > 0 && ds->pad_token_id >= ds->vocab_size)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: pad_token_id %lld >= vocab_size %lld", path,
                          (long long)ds->pad_token_id, (long long)ds->vocab_size);
    return 0;
}

/* Every check of dataset.h's qf_dataset_open, in the order a reader meets the file: identity, arrays, counts,
 * optional attributes, token range. The first failure is the error. */
static int dataset_validate(qf_dataset *ds, qf_err *e) {
    hid_t fid = (hid_t)ds->h5file;
    int rc = dataset_check_format(ds->path, fid, e);
    if (!rc) rc = dataset_open_arrays(ds, fid, e);
    if (!rc) rc = dataset_check_counts(ds, fid, e);
    if (!rc) rc = dataset_read_identity(ds, fid, e);
    if (!rc) rc = dataset_read_max_token(ds, fid, e);
    if (!rc) rc = dataset_check_ids(ds, e);
    return rc;
}

int qf_dataset_open(const char *path, qf_dataset *ds, qf_err *e) {
    memset(ds, 0, sizeof *ds);
    ds->h5file = ds->h5tokens = ds->h5mask = -1;
    if (strlen(path) >= sizeof ds->path)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: path too long (at most %zu characters)", path, sizeof ds->path - 1);
    snprintf(ds->path, sizeof ds->path, "%s", path);
    if (!qf_exists(path)) return qf_err_set(e, QF_EXIT_INPUT, "%s: no such file (packed dataset)", path);
    if (access(path, R_OK) != 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot read: %s", path, strerror(errno));
    h5_quiet q;
    h5_quiet_begin(&q);
    int rc = 0;
    if (H5Fis_hdf5(path) <= 0) {
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: not an HDF5 file (a packed dataset is made by `qwen-ft prepare`)",
                        path);
    } else {
        hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (fid < 0)
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: cannot open as HDF5 (damaged, or locked by a writer?)", path);
        else {
            ds->h5file = fid;
            rc = dataset_validate(ds, e);
        }
    }
    h5_quiet_end(&q);
    if (rc) qf_dataset_close(ds);
    return rc;
}

void qf_dataset_close(qf_dataset *ds) {
    h5_quiet q;
    h5_quiet_begin(&q);
    hid_t id = (hid_t)ds->h5tokens;
    h5_close_id(&id, H5Dclose);
    id = (hid_t)ds->h5mask;
    h5_close_id(&id, H5Dclose);
    id = (hid_t)ds->h5file;
    h5_close_id(&id, H5Fclose);
    h5_quiet_end(&q);
    ds->h5tokens = ds->h5mask = ds->h5file = -1;
    free(ds->doc_offsets);
    ds->doc_offsets = NULL;
}

int qf_dataset_read(const qf_dataset *ds, int64_t off, int64_t n, uint32_t *tokens, uint8_t *mask, qf_err *e) {
    if (off < 0 || n < 0 || off > ds->n_tokens - n)
        return qf_err_set(e, QF_EXIT_RUNTIME, "%s: read of tokens [%lld, %lld) outside [0, %lld)", ds->path,
                          (long long)off, (long long)(off + n), (long long)ds->n_tokens);
    if (n == 0) return 0;
    h5_quiet q;
    h5_quiet_begin(&q);
    int rc = 0;
    if (tokens && h5_range_io((hid_t)ds->h5tokens, 0, H5T_NATIVE_UINT32, off, n, tokens) < 0)
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: cannot read /tokens [%lld, %lld) (file damaged?)", ds->path,
                        (long long)off, (long long)(off + n));
    else if (mask && h5_range_io((hid_t)ds->h5mask, 0, H5T_NATIVE_UINT8, off, n, mask) < 0)
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: cannot read /loss_mask [%lld, %lld) (file damaged?)", ds->path,
                        (long long)off, (long long)(off + n));
    h5_quiet_end(&q);
    return rc;
}

int qf_dataset_scan(const qf_dataset *ds, int64_t begin, int64_t end, qf_dataset_scan_result *r, qf_err *e) {
    r->max_token = r->max_at = r->bad_mask_at = -1;
    r->bad_mask_value = 0;
    if (begin < 0 || end > ds->n_tokens || begin > end)
        return qf_err_set(e, QF_EXIT_RUNTIME, "%s: scan of tokens [%lld, %lld) outside [0, %lld)", ds->path,
                          (long long)begin, (long long)end, (long long)ds->n_tokens);
    int64_t cap = end - begin < DATASET_CHUNK ? (end - begin ? end - begin : 1) : DATASET_CHUNK;
    uint32_t *tok = qf_malloc((size_t)cap * sizeof *tok);
    uint8_t *mask = qf_malloc((size_t)cap);
    int rc = 0;
    for (int64_t off = begin; off < end && !rc; off += DATASET_CHUNK) {
        int64_t n = end - off < DATASET_CHUNK ? end - off : DATASET_CHUNK;
        if ((rc = qf_dataset_read(ds, off, n, tok, mask, e))) break;
        for (int64_t i = 0; i < n; i++) {
            if ((int64_t)tok[i] > r->max_token) {
                r->max_token = tok[i];
                r->max_at = off + i;
            }
            if (mask[i] > 1 && r->bad_mask_at < 0) {
                r->bad_mask_at = off + i;
                r->bad_mask_value = mask[i];
            }
        }
    }
    free(tok);
    free(mask);
    return rc;
}

/* ---- builder ------------------------------------------------------------------------------------------------- */

void qf_dsb_init(qf_dataset_builder *b) {
    memset(b, 0, sizeof *b);
    b->cap_docs = 1024;
    b->offsets = qf_malloc((size_t)(b->cap_docs + 1) * sizeof *b->offsets);
    b->offsets[0] = 0;
    b->max_token = -1;
}

void qf_dsb_add_doc(qf_dataset_builder *b, const uint32_t *tok, const uint8_t *mask, int64_t n) {
    QF_CHECK(n >= 0);
    if (b->n_tokens + n > b->cap_tokens) {
        int64_t cap = b->cap_tokens ? b->cap_tokens : 4096;
        while (cap < b->n_tokens + n) cap *= 2;
        b->tokens = qf_realloc(b->tokens, (size_t)cap * sizeof *b->tokens);
        b->mask = qf_realloc(b->mask, (size_t)cap * sizeof *b->mask);
        b->cap_tokens = cap;
    }
    if (b->n_docs + 1 > b->cap_docs) {
        b->cap_docs *= 2;
        b->offsets = qf_realloc(b->offsets, (size_t)(b->cap_docs + 1) * sizeof *b->offsets);
    }
    memcpy(b->tokens + b->n_tokens, tok, (size_t)n * sizeof *tok);
    if (mask)
        memcpy(b->mask + b->n_tokens, mask, (size_t)n);
    else
        memset(b->mask + b->n_tokens, 1, (size_t)n);
    for (int64_t i = 0; i < n; i++)
        if ((int64_t)tok[i] > b->max_token) b->max_token = tok[i];
    b->n_tokens += n;
    b->n_docs++;
    b->offsets[b->n_docs] = (uint64_t)b->n_tokens;
}

void qf_dsb_free(qf_dataset_builder *b) {
    free(b->tokens);
    free(b->mask);
    free(b->offsets);
    memset(b, 0, sizeof *b);
}

/* ---- write --------------------------------------------------------------------------------------------------- */

/* Tokens and masks are copied into a staging buffer of DATASET_CHUNK elements and written one full buffer at a
 * time, so a subset of scattered documents costs one H5Dwrite per million tokens, not one per document. */
typedef struct dataset_stage {
    hid_t dtok, dmask;
    uint32_t *tok; /* [cap] */
    uint8_t *mask; /* [cap] */
    int64_t fill, cap, written;
    int64_t max_token;
} dataset_stage;

static int dataset_stage_flush(dataset_stage *s) {
    if (s->fill == 0) return 0;
    if (h5_range_io(s->dtok, 1, H5T_NATIVE_UINT32, s->written, s->fill, s->tok) < 0) return -1;
    if (h5_range_io(s->dmask, 1, H5T_NATIVE_UINT8, s->written, s->fill, s->mask) < 0) return -1;
    s->written += s->fill;
    s->fill = 0;
    return 0;
}

static int dataset_stage_add(dataset_stage *s, const uint32_t *t, const uint8_t *m, int64_t n) {
    while (n > 0) {
        int64_t k = s->cap - s->fill < n ? s->cap - s->fill : n;
        memcpy(s->tok + s->fill, t, (size_t)k * sizeof *t);
        memcpy(s->mask + s->fill, m, (size_t)k);
        for (int64_t i = 0; i < k; i++)
            if ((int64_t)t[i] > s->max_token) s->max_token = t[i];
        s->fill += k;
        t += k;
        m += k;
        n -= k;
        if (s->fill == s->cap && dataset_stage_flush(s) < 0) return -1;
    }
    return 0;
}

/* Creates a 1-D dataset of n elements of file type ft: chunked (min(n, DATASET_CHUNK)) unless empty. */
static hid_t dataset_create_1d(hid_t fid, const char *name, hid_t ft, int64_t n) {
    hsize_t dim = (hsize_t)n;
    hid_t s = H5Screate_simple(1, &dim, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (n > 0) {
        hsize_t chunk = (hsize_t)(n < DATASET_CHUNK ? n : DATASET_CHUNK);
        H5Pset_chunk(dcpl, 1, &chunk);
    }
    hid_t d = H5Dcreate2(fid, name, ft, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(s);
    return d;
}

int qf_dataset_h5_attrs(int64_t file, int64_t n_docs, int64_t n_tokens, int64_t vocab_size, int64_t max_token,
                        int64_t eos_id, int64_t pad_id, const char *tokenizer, const char *source) {
    hid_t fid = (hid_t)file;
    herr_t r = 0;
    r |= h5_attr_write_str(fid, "format", DATASET_FORMAT);
    r |= h5_attr_write_i64(fid, "format_version", DATASET_FORMAT_VERSION);
    r |= h5_attr_write_i64(fid, "n_docs", n_docs);
    r |= h5_attr_write_i64(fid, "n_tokens", n_tokens);
    r |= h5_attr_write_i64(fid, "vocab_size", vocab_size);
    r |= h5_attr_write_i64(fid, "max_token_id", max_token);
    r |= h5_attr_write_i64(fid, "eos_token_id", eos_id);
    r |= h5_attr_write_i64(fid, "pad_token_id", pad_id);
    r |= h5_attr_write_str(fid, "tokenizer", tokenizer ? tokenizer : "");
    r |= h5_attr_write_str(fid, "source", source ? source : "");
    return r < 0 ? -1 : 0;
}

int64_t qf_dataset_h5_create_1d(int64_t file, const char *name, int elem_bytes, int64_t n) {
    hid_t ft = elem_bytes == 4 ? H5T_STD_U32LE : elem_bytes == 1 ? H5T_STD_U8LE : H5T_STD_U64LE;
    return (int64_t)dataset_create_1d((hid_t)file, name, ft, n);
}

static int dataset_write_file(hid_t fid, const char *path, const qf_dataset_builder *b, const int64_t *docs,
                              int64_t nd, int64_t vocab_size, int64_t eos_id, int64_t pad_id, const char *tokenizer,
                              const char *source, qf_err *e) {
    /* output offsets [nd+1] */
    uint64_t *off = qf_malloc((size_t)(nd + 1) * sizeof *off);
    off[0] = 0;
    for (int64_t i = 0; i < nd; i++) {
        int64_t d = docs ? docs[i] : i;
        QF_CHECK(d >= 0 && d < b->n_docs);
        off[i + 1] = off[i] + (b->offsets[d + 1] - b->offsets[d]);
    }
    int64_t ntok = (int64_t)off[nd];
    dataset_stage s = {.dtok = -1, .dmask = -1, .cap = ntok < DATASET_CHUNK ? (ntok ? ntok : 1) : DATASET_CHUNK,
                       .max_token = -1};
    hid_t doff = -1;
    int rc = 0;
    s.dtok = dataset_create_1d(fid, "/tokens", H5T_STD_U32LE, ntok);
    s.dmask = dataset_create_1d(fid, "/loss_mask", H5T_STD_U8LE, ntok);
    doff = dataset_create_1d(fid, "/doc_offsets", H5T_STD_U64LE, nd + 1);
    if (s.dtok < 0 || s.dmask < 0 || doff < 0) {
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: cannot create the datasets (disk full?)", path);
        goto done;
    }
    s.tok = qf_malloc((size_t)s.cap * sizeof *s.tok);
    s.mask = qf_malloc((size_t)s.cap);
    for (int64_t i = 0; i < nd && rc == 0; i++) {
        int64_t d = docs ? docs[i] : i;
        int64_t o0 = (int64_t)b->offsets[d], n = (int64_t)(b->offsets[d + 1] - b->offsets[d]);
        if (dataset_stage_add(&s, b->tokens + o0, b->mask + o0, n) < 0)
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: writing /tokens failed (disk full?)", path);
    }
    if (rc == 0 && dataset_stage_flush(&s) < 0)
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: writing /tokens failed (disk full?)", path);
    if (rc == 0 && h5_range_io(doff, 1, H5T_NATIVE_UINT64, 0, nd + 1, off) < 0)
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: writing /doc_offsets failed (disk full?)", path);
    if (rc == 0 && qf_dataset_h5_attrs(fid, nd, ntok, vocab_size, s.max_token, eos_id, pad_id, tokenizer, source) < 0)
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: writing the attributes failed", path);
done:
    h5_close_id(&s.dtok, H5Dclose);
    h5_close_id(&s.dmask, H5Dclose);
    h5_close_id(&doff, H5Dclose);
    free(s.tok);
    free(s.mask);
    free(off);
    return rc;
}

int qf_dataset_write(const char *path, const qf_dataset_builder *b, const int64_t *docs, int64_t ndocs,
                     int64_t vocab_size, int64_t eos_id, int64_t pad_id, const char *tokenizer, const char *source,
                     qf_err *e) {
    char *tmp = qf_malloc(QF_OUT_PATH_MAX + 32);
    if (qf_out_tmpname(path, tmp, QF_OUT_PATH_MAX + 32) != 0) {
        free(tmp);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: path too long", path);
    }
    /* create the file ourselves first, for a precise reason when it cannot be (no directory, no permission) */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd < 0) {
        int rc = qf_err_set(e, QF_EXIT_INPUT, "%s: cannot write: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    int slot = qf_tmp_track(tmp); /* removed on every exit path (kernels/base/out_file.h) */
    close(fd);
    h5_quiet q;
    h5_quiet_begin(&q);
    int rc = 0;
    hid_t fid = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (fid < 0) {
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: cannot create an HDF5 file", tmp);
    } else {
        rc = dataset_write_file(fid, path, b, docs, docs ? ndocs : b->n_docs, vocab_size, eos_id, pad_id, tokenizer,
                                source, e);
        if (H5Fclose(fid) < 0 && rc == 0) rc = qf_err_set(e, QF_EXIT_INPUT, "%s: closing failed (disk full?)", tmp);
    }
    h5_quiet_end(&q);
    if (rc == 0) rc = qf_out_publish(tmp, path, e);
    if (rc) unlink(tmp);
    qf_tmp_untrack(slot);
    free(tmp);
    return rc;
}
