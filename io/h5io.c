/* h5io.c — HDF5 model and checkpoint files through parallel HDF5 (MPI-IO). See h5io.h.
 *
 * Storage types:
 *   fp32  H5T_IEEE_F32LE
 *   fp16  IEEE half: a copy of F32LE narrowed to sign 15, exponent 10..14 (bias 15), mantissa 0..9 (what h5py
 *         writes for numpy float16)
 *   bf16  a copy of F32LE narrowed to sign 15, exponent 7..14 (bias 127), mantissa 0..6: a real HDF5 float that
 *         h5dump and h5py read as floating point.
 * 16-bit data is moved raw (memory type = file type, so no HDF5 conversion runs and collective I/O stays
 * collective) and converted here with util.h's round-to-nearest-even conversions.
 *
 * Flat ranges: [off, off+n) of the row-major flattening of an n-D dataset is selected as the union
 * (H5S_SELECT_OR) of at most 2*ndim-1 rectangular blocks (3 for a 2-D tensor: partial first row, whole middle
 * rows, partial last row). Selected elements are transferred in row-major file order, which is the flat order.
 *
 * HDF5's own error stack printing is switched off inside every call here (and restored on return: h5_impl.h's quiet
 * mode): failures are reported through qf_err naming the file and the dataset or attribute, with HDF5's innermost
 * message appended. */
#include "h5io.h"

#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "h5_impl.h"

/* Elements moved per H5Dwrite/H5Dread call: keeps every MPI-IO request under 2 GiB and bounds the
 * conversion buffer (64 Mi elements = 256 MiB of fp32). */
#ifndef QF_H5_CHUNK /* (tiny values are compiled in only to test the multi-round path) */
#define QF_H5_CHUNK ((int64_t)1 << 26)
#endif

struct qf_h5 {
    hid_t file;
    hid_t t_bf16; /* file/memory type of bf16 */
    hid_t t_f16;  /* file/memory type of fp16 */
    hid_t dxpl_coll;
    MPI_Comm comm;
    int writable;
    int fail_writes; /* fault injection: this rank's dataset writes report failure (qf_h5_fail_writes) */
    char path[1024];
};

/* Collective agreement on a failure: every rank of the file's communicator learns whether any rank failed, so
 * that all leave the sequence of collective HDF5 calls at the same point (a rank that stopped alone would leave
 * the others waiting in the next collective for ever). */
static int agree(const qf_h5 *f, int bad) {
    int rank = 0, size = 1;
    MPI_Comm_rank(f->comm, &rank);
    MPI_Comm_size(f->comm, &size);
    int first = bad ? rank : INT_MAX;
    if (size > 1) MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, f->comm);
    return first == INT_MAX ? -1 : first; /* the lowest failing rank, -1 when none */
}

void qf_h5_fail_writes(qf_h5 *f) { f->fail_writes = 1; }

hid_t qf_h5_hid(const qf_h5 *f) { return f->file; }
MPI_Comm qf_h5_comm_of(const qf_h5 *f) { return f->comm; }
const char *qf_h5_path_of(const qf_h5 *f) { return f->path; }

/* ---- error stack ---------------------------------------------------------------------------------------- */

typedef struct h5_errbuf {
    char msg[256];
} h5_errbuf;

static herr_t walk_cb(unsigned n, const H5E_error2_t *err, void *data) {
    h5_errbuf *b = data;
    if (b->msg[0] == 0 && err->desc && err->desc[0]) snprintf(b->msg, sizeof b->msg, "%s", err->desc);
    return 0;
}

/* The innermost HDF5 error description of the current stack ("" if none), as " (HDF5: ...)". */
static void h5_detail(char *out, size_t cap) {
    h5_errbuf b;
    b.msg[0] = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &b);
    if (b.msg[0]) snprintf(out, cap, " (HDF5: %s)", b.msg);
    else if (cap) out[0] = 0;
}

/* ---- types ------------------------------------------------------------------------------------------------ */

/* A 2-byte float type: sign bit 15, exponent [mpos+msize, 15), mantissa [0, msize), with the given bias. */
static hid_t make_f16_type(size_t esize, size_t msize, size_t ebias) {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0) return -1;
    if (H5Tset_fields(t, 15, msize, esize, 0, msize) < 0 || H5Tset_size(t, 2) < 0 || H5Tset_precision(t, 16) < 0 ||
        H5Tset_offset(t, 0) < 0 || H5Tset_ebias(t, ebias) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

static hid_t file_type(const qf_h5 *f, qf_dtype dt) {
    switch (dt) {
    case QF_DT_BF16: return f->t_bf16;
    case QF_DT_F16: return f->t_f16;
    case QF_DT_F32: return H5T_IEEE_F32LE;
    }
    return -1;
}

/* Classifies a stored type: returns 0 and *dt, or -1 if it is no float type we store. */
static int classify_type(hid_t t, qf_dtype *dt) {
    if (H5Tget_class(t) != H5T_FLOAT) return -1;
    size_t sz = H5Tget_size(t);
    size_t spos, epos, esize, mpos, msize;
    if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) return -1;
    size_t ebias = H5Tget_ebias(t);
    if (sz == 4 && esize == 8 && msize == 23) {
        *dt = QF_DT_F32;
        return 0;
    }
    if (sz == 2 && spos == 15 && esize == 8 && msize == 7 && mpos == 0 && ebias == 127) {
        *dt = QF_DT_BF16;
        return 0;
    }
    if (sz == 2 && spos == 15 && esize == 5 && msize == 10 && mpos == 0 && ebias == 15) {
        *dt = QF_DT_F16;
        return 0;
    }
    return -1;
}

/* ---- paths ------------------------------------------------------------------------------------------------ */

/* "group/name" as an absolute HDF5 path ("/" + group + "/" + name, without doubled slashes). */
static int join_path(char *out, size_t cap, const char *group, const char *name) {
    const char *g = group ? group : "/";
    while (*g == '/') g++;
    size_t gl = strlen(g);
    while (gl > 0 && g[gl - 1] == '/') gl--;
    int n;
    if (name && name[0]) {
        if (gl) n = snprintf(out, cap, "/%.*s/%s", (int)gl, g, name);
        else n = snprintf(out, cap, "/%s", name);
    } else {
        n = snprintf(out, cap, "/%.*s", (int)gl, g);
    }
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

/* 1 if every component of the absolute path p exists as a link. */
static int path_exists(hid_t file, const char *p) {
    if (strcmp(p, "/") == 0) return 1;
    char buf[1024];
    size_t n = strlen(p);
    if (n >= sizeof buf) return 0;
    memcpy(buf, p, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (H5Lexists(file, buf, H5P_DEFAULT) <= 0) return 0;
            buf[i] = c;
        }
    }
    return 1;
}

/* Opens group path (creating it and its parents when create != 0). */
static hid_t open_group(qf_h5 *f, const char *gpath, int create) {
    if (strcmp(gpath, "/") == 0) return H5Gopen2(f->file, "/", H5P_DEFAULT);
    if (path_exists(f->file, gpath)) return H5Gopen2(f->file, gpath, H5P_DEFAULT);
    if (!create) return -1;
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t g = H5Gcreate2(f->file, gpath, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Pclose(lcpl);
    return g;
}

/* ---- open / create / close ----------------------------------------------------------------------------------- */

static qf_h5 *h5_new(const char *path, MPI_Comm comm) {
    qf_h5 *f = qf_calloc(1, sizeof *f);
    f->file = -1;
    f->comm = comm;
    snprintf(f->path, sizeof f->path, "%s", path);
    f->t_bf16 = make_f16_type(8, 7, 127);
    f->t_f16 = make_f16_type(5, 10, 15);
    f->dxpl_coll = H5Pcreate(H5P_DATASET_XFER);
    QF_CHECK(f->t_bf16 >= 0 && f->t_f16 >= 0 && f->dxpl_coll >= 0);
    QF_CHECK(H5Pset_dxpl_mpio(f->dxpl_coll, H5FD_MPIO_COLLECTIVE) >= 0);
    return f;
}

static void h5_free(qf_h5 *f) {
    if (!f) return;
    if (f->file >= 0) H5Fclose(f->file);
    H5Tclose(f->t_bf16);
    H5Tclose(f->t_f16);
    H5Pclose(f->dxpl_coll);
    free(f);
}

static hid_t make_fapl(MPI_Comm comm) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return -1;
    if (H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) < 0) {
        H5Pclose(fapl);
        return -1;
    }
    return fapl;
}

/* A new handle on path through MPI-IO: created (truncating) when create != 0, else opened read-write when
 * write != 0, read-only otherwise. NULL when HDF5 refuses, with its detail (" (HDF5: ...)") in det[cap]. Quiet
 * mode is the caller's. */
static qf_h5 *h5_file_open(const char *path, MPI_Comm comm, int create, int write, char *det, size_t cap) {
    qf_h5 *f = h5_new(path, comm);
    f->writable = create || write;
    hid_t fapl = make_fapl(comm);
    if (fapl >= 0)
        f->file = create ? H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl)
                         : H5Fopen(path, write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl);
    if (f->file < 0) h5_detail(det, cap);
    h5_close_id(&fapl, H5Pclose);
    if (f->file >= 0) return f;
    h5_free(f);
    return NULL;
}

int qf_h5_create(const char *path, MPI_Comm comm, qf_h5 **out, qf_err *e) {
    h5_quiet q;
    h5_quiet_begin(&q);
    char d[300];
    *out = h5_file_open(path, comm, 1, 1, d, sizeof d);
    h5_quiet_end(&q);
    if (!*out)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot create HDF5 file (missing directory or no permission?)%s",
                          path, d);
    return 0;
}

int qf_h5_open(const char *path, MPI_Comm comm, int write, qf_h5 **out, qf_err *e) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return qf_err_set(e, QF_EXIT_INPUT, "%s: not a regular file", path);
    h5_quiet q;
    h5_quiet_begin(&q);
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        h5_quiet_end(&q);
        if (is == 0) return qf_err_set(e, QF_EXIT_INPUT, "%s: not an HDF5 file", path);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot read (not an HDF5 file?)", path);
    }
    char d[300];
    *out = h5_file_open(path, comm, 0, write, d, sizeof d);
    h5_quiet_end(&q);
    if (!*out) return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot open HDF5 file (truncated or damaged?)%s", path, d);
    return 0;
}

int qf_h5_close(qf_h5 *f, qf_err *e) {
    if (!f) return 0;
    h5_quiet q;
    h5_quiet_begin(&q);
    int rc = 0;
    char d[300] = "";
    if (f->writable && H5Fflush(f->file, H5F_SCOPE_GLOBAL) < 0) {
        h5_detail(d, sizeof d);
        rc = qf_err_set(e, QF_EXIT_RUNTIME, "%s: flushing the HDF5 file failed%s", f->path, d);
    }
    if (H5Fclose(f->file) < 0 && rc == 0) {
        h5_detail(d, sizeof d);
        rc = qf_err_set(e, QF_EXIT_RUNTIME, "%s: closing the HDF5 file failed%s", f->path, d);
    }
    f->file = -1;
    h5_free(f);
    h5_quiet_end(&q);
    return rc;
}

const char *qf_h5_path(const qf_h5 *f) { return f->path; }

/* ---- flat-range selections ------------------------------------------------------------------------------- */

/* Adds to space the blocks covering flat elements [a, b) of the sub-array dims[k..ndim) at the fixed leading
 * coordinates prefix[0..k). *first says whether the next block starts the selection (SET) or joins it (OR). */
static herr_t select_flat_rec(hid_t space, int ndim, const hsize_t *dims, int k, hsize_t *start, hsize_t a,
                              hsize_t b, int *first) {
    if (a >= b) return 0;
    hsize_t inner = 1; /* elements per index of dimension k */
    for (int i = k + 1; i < ndim; i++) inner *= dims[i];
    hsize_t i0 = a / inner, i1 = b / inner; /* b exclusive */
    hsize_t ra = a % inner, rb = b % inner;
    if (i0 == i1) { /* within one slice of dimension k */
        start[k] = i0;
        return select_flat_rec(space, ndim, dims, k + 1, start, ra, rb, first);
    }
    if (ra != 0) { /* partial head slice */
        start[k] = i0;
        if (select_flat_rec(space, ndim, dims, k + 1, start, ra, inner, first) < 0) return -1;
        i0++;
    }
    if (i1 > i0) { /* whole slices [i0, i1) */
        hsize_t st[32], cnt[32];
        for (int i = 0; i < ndim; i++) {
            st[i] = i < k ? start[i] : 0;
            cnt[i] = i < k ? 1 : dims[i];
        }
        st[k] = i0;
        cnt[k] = i1 - i0;
        if (H5Sselect_hyperslab(space, *first ? H5S_SELECT_SET : H5S_SELECT_OR, st, NULL, cnt, NULL) < 0) return -1;
        *first = 0;
    }
    if (rb != 0) { /* partial tail slice */
        start[k] = i1;
        if (select_flat_rec(space, ndim, dims, k + 1, start, 0, rb, first) < 0) return -1;
    }
    return 0;
}

/* Selects flat [off, off+n) of space (n = 0 -> none). */
static herr_t select_flat(hid_t space, int64_t off, int64_t n) {
    if (n == 0) return H5Sselect_none(space);
    int nd = H5Sget_simple_extent_ndims(space);
    if (nd < 0 || nd > 32) return -1;
    hsize_t dims[32], start[32];
    H5Sget_simple_extent_dims(space, dims, NULL);
    if (nd == 0) return H5Sselect_all(space); /* scalar: one element */
    int first = 1;
    return select_flat_rec(space, nd, dims, 0, start, (hsize_t)off, (hsize_t)(off + n), &first);
}

static int64_t space_numel(hid_t space) {
    hssize_t np = H5Sget_simple_extent_npoints(space);
    return (int64_t)np;
}

/* Memory space of n elements, all selected (n = 0: one element, none selected). */
static hid_t mem_space(int64_t n) {
    hsize_t d = (hsize_t)(n > 0 ? n : 1);
    hid_t m = H5Screate_simple(1, &d, NULL);
    if (m >= 0 && n == 0) H5Sselect_none(m);
    return m;
}

/* ---- datasets ------------------------------------------------------------------------------------------------ */

/* 1 if group/name (name NULL: the group itself) exists in f and, when key is not NULL, has attribute key; 0
 * otherwise, and for a path too long. HDF5 is quiet meanwhile. */
static int link_exists(qf_h5 *f, const char *group, const char *name, const char *key) {
    char p[1024];
    if (join_path(p, sizeof p, group, name) < 0) return 0;
    h5_quiet q;
    h5_quiet_begin(&q);
    int r = path_exists(f->file, p);
    if (r && key) {
        hid_t o = H5Oopen(f->file, p, H5P_DEFAULT);
        r = o >= 0 && H5Aexists(o, key) > 0;
        h5_close_id(&o, H5Oclose);
    }
    h5_quiet_end(&q);
    return r;
}

int qf_h5_has(qf_h5 *f, const char *group, const char *name) { return link_exists(f, group, name, NULL); }

/* A dataset or attribute opened for reading (dset_open, attr_open): the item id with its close function, its
 * datatype t and dataspace s, and for an attribute the object obj it is on (-1 where not open). HDF5 is quiet from
 * the open to item_close. */
typedef struct h5_item {
    h5_quiet q;
    hid_t obj, id, t, s;
    herr_t (*close)(hid_t); /* H5Dclose or H5Aclose */
} h5_item;

/* Switches HDF5 quiet and marks every id of *h not open. */
static void item_begin(h5_item *h, herr_t (*close)(hid_t)) {
    h5_quiet_begin(&h->q);
    h->obj = h->id = h->t = h->s = -1;
    h->close = close;
}

/* Closes what the open opened, restores HDF5's error printing and returns rc. */
static int item_close(h5_item *h, int rc) {
    h5_close_id(&h->t, H5Tclose);
    h5_close_id(&h->s, H5Sclose);
    h5_close_id(&h->id, h->close);
    h5_close_id(&h->obj, H5Oclose);
    h5_quiet_end(&h->q);
    return rc;
}

/* Switches HDF5 quiet and opens dataset p of f into *h. Returns 0, or the code of an exit-2 error naming the file
 * and dataset; item_close ends both cases. */
static int dset_open(qf_h5 *f, const char *p, h5_item *h, qf_err *e) {
    item_begin(h, H5Dclose);
    if (!path_exists(f->file, p)) return qf_err_set(e, QF_EXIT_INPUT, "%s: dataset %s not found", f->path, p);
    h->id = H5Dopen2(f->file, p, H5P_DEFAULT);
    if (h->id < 0) {
        char det[300];
        h5_detail(det, sizeof det);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: %s is not a readable dataset%s", f->path, p, det);
    }
    h->s = H5Dget_space(h->id);
    h->t = H5Dget_type(h->id);
    return 0;
}

/* The element type of open dataset p into *dt, or the code of an exit-2 error when it is none we store. */
static int dset_dtype(const qf_h5 *f, const char *p, const h5_item *h, qf_dtype *dt, qf_err *e) {
    if (classify_type(h->t, dt) == 0) return 0;
    return qf_err_set(e, QF_EXIT_INPUT, "%s: dataset %s has an unsupported type (expected bf16, fp16 or fp32 float)",
                      f->path, p);
}

int qf_h5_shape(qf_h5 *f, const char *group, const char *name, int *ndim, int64_t *shape, qf_dtype *dt, qf_err *e) {
    char p[1024];
    if (join_path(p, sizeof p, group, name) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: dataset name too long", f->path);
    h5_item h;
    int rc = dset_open(f, p, &h, e);
    if (rc) return item_close(&h, rc);
    int nd = H5Sget_simple_extent_ndims(h.s);
    if (nd < 0 || nd > 4)
        return item_close(&h, qf_err_set(e, QF_EXIT_INPUT, "%s: dataset %s has %d dimensions (at most 4 supported)",
                                         f->path, p, nd));
    hsize_t dims[4];
    H5Sget_simple_extent_dims(h.s, dims, NULL);
    *ndim = nd;
    for (int i = 0; i < nd; i++) shape[i] = (int64_t)dims[i];
    qf_dtype got;
    rc = dset_dtype(f, p, &h, &got, e);
    if (!rc && dt) *dt = got;
    return item_close(&h, rc);
}

static void shape_str(char *buf, size_t cap, int nd, const int64_t *s) {
    int k = snprintf(buf, cap, "[");
    for (int i = 0; i < nd && k > 0 && (size_t)k < cap; i++)
        k += snprintf(buf + k, cap - (size_t)k, "%s%lld", i ? "," : "", (long long)s[i]);
    if (k > 0 && (size_t)k < cap) snprintf(buf + k, cap - (size_t)k, "]");
}

int qf_h5_check_shape(qf_h5 *f, const char *group, const char *name, int ndim, const int64_t *shape, qf_err *e) {
    int nd = 0;
    int64_t have[4] = {0};
    if (qf_h5_shape(f, group, name, &nd, have, NULL, e)) return e->code;
    int same = nd == ndim;
    for (int i = 0; same && i < nd; i++) same = have[i] == shape[i];
    if (same) return 0;
    char a[96], b[96];
    shape_str(a, sizeof a, nd, have);
    shape_str(b, sizeof b, ndim, shape);
    return qf_err_set(e, QF_EXIT_INPUT, "%s: dataset /%s/%s has shape %s, the model needs %s", f->path, group, name, a,
                      b);
}

/* dims[ndim] of a write's dataset from shape; an error naming the dataset when the rank or a dimension is bad or
 * [off, off+n) is outside its elements. */
static int write_check_range(const qf_h5 *f, const char *p, int ndim, const int64_t *shape, int64_t off, int64_t n,
                             hsize_t *dims, qf_err *e) {
    if (ndim < 0 || ndim > 32) return qf_err_set(e, QF_EXIT_INPUT, "%s: %s: bad rank %d", f->path, p, ndim);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return qf_err_set(e, QF_EXIT_INPUT, "%s: %s: negative dimension", f->path, p);
        dims[i] = (hsize_t)shape[i];
        numel *= shape[i];
    }
    if (off < 0 || n < 0 || off + n > numel)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: %s: range [%lld, %lld) outside its %lld elements", f->path, p,
                          (long long)off, (long long)(off + n), (long long)numel);
    return 0;
}

/* Opens existing dataset p into *d (a later range of it) when it has dims[ndim] and file type ft; an error
 * otherwise (*d may then be open: the caller closes it). */
static int dset_reuse(const qf_h5 *f, const char *p, int ndim, const hsize_t *dims, hid_t ft, hid_t *d, qf_err *e) {
    *d = H5Dopen2(f->file, p, H5P_DEFAULT);
    if (*d < 0) {
        char det[300] = "";
        h5_detail(det, sizeof det);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: %s exists and is not a dataset%s", f->path, p, det);
    }
    hid_t s = H5Dget_space(*d), t = H5Dget_type(*d);
    int same = H5Sget_simple_extent_ndims(s) == ndim && H5Tequal(t, ft) > 0;
    if (same) {
        hsize_t have[32];
        H5Sget_simple_extent_dims(s, have, NULL);
        for (int i = 0; i < ndim; i++) same &= have[i] == dims[i];
    }
    H5Sclose(s);
    H5Tclose(t);
    if (!same) return qf_err_set(e, QF_EXIT_INPUT, "%s: dataset %s exists with another shape or type", f->path, p);
    return 0;
}

/* Creates dataset p [dims[ndim]] of file type ft into *d, with its intermediate groups, allocated at once and
 * never filled (every element is written by some rank). */
static int dset_create(const qf_h5 *f, const char *p, int ndim, const hsize_t *dims, hid_t ft, hid_t *d, qf_err *e) {
    char det[300] = "";
    hid_t s = H5Screate_simple(ndim, dims, NULL);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    *d = H5Dcreate2(f->file, p, ft, s, lcpl, dcpl, H5P_DEFAULT);
    if (*d < 0) h5_detail(det, sizeof det);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    H5Sclose(s);
    if (*d < 0) return qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot create dataset %s%s", f->path, p, det);
    return 0;
}

/* data[m] in the memory type of dt: the bf16 or fp16 conversion in buf[m], or data itself for fp32. */
static const void *write_convert(qf_dtype dt, const float *data, int64_t m, uint16_t *buf) {
    if (dt == QF_DT_BF16) {
        for (int64_t i = 0; i < m; i++) buf[i] = qf_f32_to_bf16(data[i]);
        return buf;
    }
    if (dt == QF_DT_F16) {
        for (int64_t i = 0; i < m; i++) buf[i] = qf_f32_to_f16(data[i]);
        return buf;
    }
    return data;
}

/* One collective H5Dwrite of src[m] (file type ft) to flat range [at, at+m) of d (dataspace fs). < 0 on failure,
 * with the reason in det[cap]. */
static herr_t write_round(const qf_h5 *f, hid_t d, hid_t fs, hid_t ft, const void *src, int64_t at, int64_t m,
                          char *det, size_t cap) {
    float dummy = 0; /* a non-NULL buffer for ranks that write nothing */
    hid_t ms = mem_space(m);
    herr_t st = select_flat(fs, at, m);
    if (st >= 0) st = H5Dwrite(d, ft, ms, fs, f->dxpl_coll, m ? src : (const void *)&dummy);
    H5Sclose(ms);
    if (st >= 0 && f->fail_writes) {
        st = -1;
        snprintf(det, cap, " (injected fault: h5write)");
    } else if (st < 0) {
        h5_detail(det, cap);
        if (!det[0]) snprintf(det, cap, " (no space left on the device, a quota, or an I/O error)");
    }
    return st;
}

/* data[n] to flat range [off, off+n) of dataset p (open as d) in collective rounds of at most QF_H5_CHUNK
 * elements per rank; every rank does the same number, and every rank stops at a round that failed on any. */
static int write_rounds(const qf_h5 *f, const char *p, hid_t d, hid_t ft, qf_dtype dt, int64_t off, int64_t n,
                        const float *data, qf_err *e) {
    int64_t rounds = (n + QF_H5_CHUNK - 1) / QF_H5_CHUNK, maxr = 0;
    MPI_Allreduce(&rounds, &maxr, 1, MPI_INT64_T, MPI_MAX, f->comm);
    uint16_t *buf = NULL;
    if (dt != QF_DT_F32) buf = qf_malloc((size_t)(n < QF_H5_CHUNK ? n : QF_H5_CHUNK) * sizeof(uint16_t));
    hid_t fs = H5Dget_space(d);
    char det[300] = "";
    int rc = 0;
    for (int64_t r = 0; r < maxr; r++) {
        int64_t a = r * QF_H5_CHUNK < n ? r * QF_H5_CHUNK : n;
        int64_t m = n - a < QF_H5_CHUNK ? n - a : QF_H5_CHUNK;
        herr_t st = write_round(f, d, fs, ft, write_convert(dt, data + a, m, buf), off + a, m, det, sizeof det);
        if (st < 0) rc = qf_err_set(e, QF_EXIT_RUNTIME, "%s: writing dataset %s failed%s", f->path, p, det);
        int who = agree(f, st < 0);
        if (who >= 0) {
            if (!rc) rc = qf_err_set(e, QF_EXIT_RUNTIME, "%s: writing dataset %s failed on rank %d", f->path, p, who);
            break;
        }
    }
    free(buf);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

int qf_h5_write_f32(qf_h5 *f, const char *group, const char *name, int ndim, const int64_t *shape, qf_dtype dt,
                    int64_t off, int64_t n, const float *data, qf_err *e) {
    char p[1024];
    if (join_path(p, sizeof p, group, name) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: dataset name too long", f->path);
    hsize_t dims[32];
    int rc = write_check_range(f, p, ndim, shape, off, n, dims, e);
    if (rc) return rc;
    hid_t ft = file_type(f, dt);
    h5_quiet q;
    h5_quiet_begin(&q);
    hid_t d = -1;
    /* create, or reuse an existing dataset of the same shape and type (a later range of it) */
    rc = path_exists(f->file, p) ? dset_reuse(f, p, ndim, dims, ft, &d, e) : dset_create(f, p, ndim, dims, ft, &d, e);
    int who = agree(f, rc != 0);
    if (who >= 0) {
        if (!rc) rc = qf_err_set(e, QF_EXIT_RUNTIME, "%s: creating dataset %s failed on rank %d", f->path, p, who);
    } else {
        rc = write_rounds(f, p, d, ft, dt, off, n, data, e);
    }
    if (d >= 0) H5Dclose(d);
    h5_quiet_end(&q);
    return rc;
}

int qf_h5_read_f32(qf_h5 *f, const char *group, const char *name, int64_t off, int64_t n, float *data, qf_err *e) {
    char p[1024];
    if (join_path(p, sizeof p, group, name) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: dataset name too long", f->path);
    h5_item h;
    uint16_t *buf = NULL;
    char det[300] = "";
    int rc = dset_open(f, p, &h, e);
    if (rc) goto done;
    int64_t numel = space_numel(h.s);
    qf_dtype dt;
    if ((rc = dset_dtype(f, p, &h, &dt, e))) goto done;
    if (off < 0 || n < 0 || off + n > numel) {
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: dataset %s has %lld elements, range [%lld, %lld) requested", f->path,
                        p, (long long)numel, (long long)off, (long long)(off + n));
        goto done;
    }
    if (dt != QF_DT_F32) buf = qf_malloc((size_t)(n < QF_H5_CHUNK ? n : QF_H5_CHUNK) * sizeof(uint16_t));
    hid_t mt = dt == QF_DT_F32 ? H5T_NATIVE_FLOAT : file_type(f, dt);
    for (int64_t a = 0; a < n; a += QF_H5_CHUNK) { /* reads are independent: n = 0 reads nothing */
        int64_t m = n - a < QF_H5_CHUNK ? n - a : QF_H5_CHUNK;
        hid_t ms = mem_space(m);
        herr_t st = select_flat(h.s, off + a, m);
        if (st >= 0) st = H5Dread(h.id, mt, ms, h.s, H5P_DEFAULT, dt == QF_DT_F32 ? (void *)(data + a) : (void *)buf);
        H5Sclose(ms);
        if (st < 0) {
            h5_detail(det, sizeof det);
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: reading dataset %s failed (truncated or damaged file?)%s", f->path,
                            p, det);
            goto done;
        }
        if (dt == QF_DT_BF16)
            for (int64_t i = 0; i < m; i++) data[a + i] = qf_bf16_to_f32(buf[i]);
        else if (dt == QF_DT_F16)
            for (int64_t i = 0; i < m; i++) data[a + i] = qf_f16_to_f32(buf[i]);
    }
done:
    free(buf);
    return item_close(&h, rc);
}

/* ---- attributes ---------------------------------------------------------------------------------------------- */

/* Writes attribute key of type t / space s with data on group (created if missing); replaces an existing one. */
static int attr_write(qf_h5 *f, const char *group, const char *key, hid_t t, hid_t s, const void *v, qf_err *e) {
    char gp[1024];
    if (join_path(gp, sizeof gp, group, NULL) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: group name too long", f->path);
    h5_quiet q;
    h5_quiet_begin(&q);
    int rc = 0;
    char det[300] = "";
    hid_t g = open_group(f, gp, 1), a = -1;
    if (g < 0) {
        h5_detail(det, sizeof det);
        rc = qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot create group %s%s", f->path, gp, det);
        goto done;
    }
    if (H5Aexists(g, key) > 0) H5Adelete(g, key);
    a = H5Acreate2(g, key, t, s, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, t, v) < 0) {
        h5_detail(det, sizeof det);
        rc = qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot write attribute %s of %s%s", f->path, key, gp, det);
    }
done:
    if (a >= 0) H5Aclose(a);
    if (g >= 0) H5Gclose(g);
    h5_quiet_end(&q);
    int who = f->writable ? agree(f, rc != 0) : -1;
    if (who >= 0 && !rc)
        rc = qf_err_set(e, QF_EXIT_RUNTIME, "%s: writing attribute %s of %s failed on rank %d", f->path, key, gp, who);
    return rc;
}

/* attr_write of one element of type t at v (a scalar dataspace). */
static int attr_write_scalar(qf_h5 *f, const char *group, const char *key, hid_t t, const void *v, qf_err *e) {
    hid_t s = H5Screate(H5S_SCALAR);
    int rc = attr_write(f, group, key, t, s, v, e);
    H5Sclose(s);
    return rc;
}

int qf_h5_attr_write_i64(qf_h5 *f, const char *group, const char *key, int64_t v, qf_err *e) {
    return attr_write_scalar(f, group, key, H5T_STD_I64LE, &v, e);
}

int qf_h5_attr_write_f64(qf_h5 *f, const char *group, const char *key, double v, qf_err *e) {
    return attr_write_scalar(f, group, key, H5T_IEEE_F64LE, &v, e);
}

int qf_h5_attr_write_str(qf_h5 *f, const char *group, const char *key, const char *v, qf_err *e) {
    size_t n = strlen(v);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, n > 0 ? n : 1);
    H5Tset_strpad(t, H5T_STR_NULLPAD);
    H5Tset_cset(t, H5T_CSET_UTF8);
    char one[1] = {0};
    int rc = attr_write_scalar(f, group, key, t, n > 0 ? v : one, e);
    H5Tclose(t);
    return rc;
}

int qf_h5_attr_write_blob(qf_h5 *f, const char *group, const char *key, const void *p, size_t n, qf_err *e) {
    hsize_t d = n;
    hid_t s = n > 0 ? H5Screate_simple(1, &d, NULL) : H5Screate(H5S_NULL);
    unsigned char dummy = 0;
    int rc = attr_write(f, group, key, H5T_STD_U8LE, s, n > 0 ? p : &dummy, e);
    H5Sclose(s);
    return rc;
}

int qf_h5_attr_has(qf_h5 *f, const char *group, const char *key) { return link_exists(f, group, NULL, key); }

/* Switches HDF5 quiet and opens attribute key of object group into *h. Returns 0, or the code of an exit-2 error
 * naming the file and attribute; item_close ends both cases. */
static int attr_open(qf_h5 *f, const char *group, const char *key, h5_item *h, qf_err *e) {
    item_begin(h, H5Aclose);
    char gp[1024];
    if (join_path(gp, sizeof gp, group, NULL) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: group name too long", f->path);
    if (!path_exists(f->file, gp) || (h->obj = H5Oopen(f->file, gp, H5P_DEFAULT)) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute %s: group %s not found", f->path, key, gp);
    if (H5Aexists(h->obj, key) <= 0) {
        if (strcmp(gp, "/") == 0) return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute %s not found", f->path, key);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute %s not found on %s", f->path, key, gp);
    }
    h->id = H5Aopen(h->obj, key, H5P_DEFAULT);
    if (h->id < 0) return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute %s of %s cannot be opened", f->path, key, gp);
    h->t = H5Aget_type(h->id);
    h->s = H5Aget_space(h->id);
    return 0;
}

/* The exit-2 error of an attribute that is there but cannot be read. */
static int attr_unreadable(const qf_h5 *f, const char *key, qf_err *e) {
    return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute %s cannot be read", f->path, key);
}

/* Copies the string sv into v[cap], or sets the exit-2 error of an attribute string longer than cap-1. */
static int attr_copy_str(const qf_h5 *f, const char *key, const char *sv, char *v, size_t cap, qf_err *e) {
    size_t n = strlen(sv);
    if (n >= cap)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute %s is longer than %zu characters", f->path, key, cap - 1);
    memcpy(v, sv, n + 1);
    return 0;
}

/* Reads a one-element numeric attribute as memory type mt (class checked against want: H5T_INTEGER accepts
 * integers only, H5T_FLOAT accepts integers and floats). */
static int attr_read_num(qf_h5 *f, const char *group, const char *key, hid_t mt, H5T_class_t want, void *v,
                         qf_err *e) {
    h5_item h;
    int rc = attr_open(f, group, key, &h, e);
    if (rc) return item_close(&h, rc);
    H5T_class_t c = H5Tget_class(h.t);
    int ok = c == H5T_INTEGER || (want == H5T_FLOAT && c == H5T_FLOAT);
    if (!ok || H5Sget_simple_extent_npoints(h.s) != 1)
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: attribute %s is not a single %s", f->path, key,
                        want == H5T_INTEGER ? "integer" : "number");
    else if (H5Aread(h.id, mt, v) < 0)
        rc = attr_unreadable(f, key, e);
    return item_close(&h, rc);
}

int qf_h5_attr_read_i64(qf_h5 *f, const char *group, const char *key, int64_t *v, qf_err *e) {
    return attr_read_num(f, group, key, H5T_NATIVE_INT64, H5T_INTEGER, v, e);
}

int qf_h5_attr_read_f64(qf_h5 *f, const char *group, const char *key, double *v, qf_err *e) {
    return attr_read_num(f, group, key, H5T_NATIVE_DOUBLE, H5T_FLOAT, v, e);
}

int qf_h5_attr_read_str(qf_h5 *f, const char *group, const char *key, char *v, size_t cap, qf_err *e) {
    h5_item h;
    int rc = attr_open(f, group, key, &h, e);
    if (rc) return item_close(&h, rc);
    if (H5Tget_class(h.t) != H5T_STRING || H5Sget_simple_extent_npoints(h.s) != 1)
        return item_close(&h, qf_err_set(e, QF_EXIT_INPUT, "%s: attribute %s is not a string", f->path, key));
    hid_t mt = H5Tcopy(H5T_C_S1);
    if (H5Tis_variable_str(h.t) > 0) { /* as h5py writes str attributes */
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, H5Tget_cset(h.t)); /* HDF5 does not convert between character sets */
        char *sv = NULL;
        if (H5Aread(h.id, mt, &sv) < 0 || !sv) {
            rc = attr_unreadable(f, key, e);
        } else {
            rc = attr_copy_str(f, key, sv, v, cap, e);
            H5free_memory(sv);
        }
    } else {
        size_t n = H5Tget_size(h.t);
        H5Tset_size(mt, n);
        H5Tset_strpad(mt, H5T_STR_NULLPAD);
        H5Tset_cset(mt, H5Tget_cset(h.t));
        char *tmp = qf_calloc(n + 1, 1);
        rc = H5Aread(h.id, mt, tmp) < 0 ? attr_unreadable(f, key, e) : attr_copy_str(f, key, tmp, v, cap, e);
        free(tmp);
    }
    h5_close_id(&mt, H5Tclose);
    return item_close(&h, rc);
}

int qf_h5_attr_read_blob(qf_h5 *f, const char *group, const char *key, void *p, size_t n, qf_err *e) {
    h5_item h;
    int rc = attr_open(f, group, key, &h, e);
    if (rc) return item_close(&h, rc);
    H5S_class_t sc = H5Sget_simple_extent_type(h.s);
    hssize_t np = sc == H5S_NULL ? 0 : H5Sget_simple_extent_npoints(h.s);
    if (H5Tget_class(h.t) != H5T_INTEGER || H5Tget_size(h.t) != 1 || np != (hssize_t)n)
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: attribute %s is not a %zu-byte blob (found %lld elements of %zu bytes)",
                        f->path, key, n, (long long)np, H5Tget_size(h.t));
    else if (n > 0 && H5Aread(h.id, H5T_NATIVE_UCHAR, p) < 0)
        rc = attr_unreadable(f, key, e);
    return item_close(&h, rc);
}

/* ---- model config ---------------------------------------------------------------------------------------------- */

/* Root attribute names are the qf_model_config field names. */
int qf_h5_write_config(qf_h5 *f, const qf_model_config *c, qf_err *e) {
    int rc = 0;
#define WI(k, v) \
    if (!rc) rc = qf_h5_attr_write_i64(f, "/", k, (int64_t)(v), e)
#define WF(k, v) \
    if (!rc) rc = qf_h5_attr_write_f64(f, "/", k, (v), e)
#define WS(k, v) \
    if (!rc) rc = qf_h5_attr_write_str(f, "/", k, (v), e)
    WS("arch", c->arch);
    WS("family", c->family);
    WI("vocab_size", c->vocab_size);
    WI("hidden_size", c->hidden_size);
    WI("intermediate_size", c->intermediate_size);
    WI("num_layers", c->num_layers);
    WI("num_heads", c->num_heads);
    WI("num_kv_heads", c->num_kv_heads);
    WI("head_dim", c->head_dim);
    WI("tie_word_embeddings", c->tie_word_embeddings);
    WI("attention_bias", c->attention_bias);
    WI("qk_norm", c->qk_norm);
    WF("rope_theta", c->rope_theta);
    WF("rms_norm_eps", c->rms_norm_eps);
    WI("max_position_embeddings", c->max_position_embeddings);
    WF("initializer_range", c->initializer_range);
    WI("bos_token_id", c->bos_token_id);
    WI("eos_token_id", c->eos_token_id);
    WI("pad_token_id", c->pad_token_id);
    WS("dtype", c->dtype);
#undef WI
#undef WF
#undef WS
    return rc;
}

/* Reads an integer attribute into an int within [lo, hi]. */
static int read_int_attr(qf_h5 *f, const char *key, int64_t lo, int64_t hi, int64_t *out, qf_err *e) {
    int64_t v = 0;
    if (qf_h5_attr_read_i64(f, "/", key, &v, e)) return e->code;
    if (v < lo || v > hi)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute %s = %lld is out of range [%lld, %lld]", f->path, key,
                          (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

int qf_h5_read_config(qf_h5 *f, qf_model_config *c, qf_err *e) {
    qf_model_config r;
    memset(&r, 0, sizeof r);
    int64_t v = 0;
    if (qf_h5_attr_read_str(f, "/", "arch", r.arch, sizeof r.arch, e)) return e->code;
    if (strcmp(r.arch, "qwen2") != 0 && strcmp(r.arch, "qwen3") != 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute arch = \"%s\" (expected \"qwen2\" or \"qwen3\")", f->path,
                          r.arch);
    if (qf_h5_attr_read_str(f, "/", "family", r.family, sizeof r.family, e)) return e->code;
#define RI(k, field, lo, hi)                                  \
    do {                                                      \
        if (read_int_attr(f, k, lo, hi, &v, e)) return e->code; \
        r.field = v;                                          \
    } while (0)
    RI("vocab_size", vocab_size, 1, INT32_MAX);
    RI("hidden_size", hidden_size, 1, INT32_MAX);
    RI("intermediate_size", intermediate_size, 1, INT32_MAX);
    RI("num_layers", num_layers, 1, INT32_MAX);
    RI("num_heads", num_heads, 1, INT32_MAX);
    RI("num_kv_heads", num_kv_heads, 1, INT32_MAX);
    RI("head_dim", head_dim, 1, INT32_MAX);
    RI("tie_word_embeddings", tie_word_embeddings, 0, 1);
    RI("attention_bias", attention_bias, 0, 1);
    RI("qk_norm", qk_norm, 0, 1);
    RI("max_position_embeddings", max_position_embeddings, 1, INT32_MAX);
    RI("bos_token_id", bos_token_id, -1, INT32_MAX);
    RI("eos_token_id", eos_token_id, -1, INT32_MAX);
    RI("pad_token_id", pad_token_id, -1, INT32_MAX);
#undef RI
    if (r.num_heads % r.num_kv_heads != 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute num_kv_heads = %d does not divide num_heads = %d", f->path,
                          r.num_kv_heads, r.num_heads);
    if (qf_h5_attr_read_f64(f, "/", "rope_theta", &r.rope_theta, e)) return e->code;
    if (!(r.rope_theta > 0))
        return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute rope_theta must be positive", f->path);
    if (qf_h5_attr_read_f64(f, "/", "rms_norm_eps", &r.rms_norm_eps, e)) return e->code;
    if (!(r.rms_norm_eps > 0))
        return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute rms_norm_eps must be positive", f->path);
    if (qf_h5_attr_read_f64(f, "/", "initializer_range", &r.initializer_range, e)) return e->code;
    if (qf_h5_attr_read_str(f, "/", "dtype", r.dtype, sizeof r.dtype, e)) return e->code;
    qf_dtype dt;
    if (qf_dtype_parse(r.dtype, &dt) < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: attribute dtype = \"%s\" (expected bf16, fp16 or fp32)", f->path,
                          r.dtype);
    char why[256];
    if (qf_model_config_check(&r, why, sizeof why) != 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: model config attributes: %s", f->path, why);
    *c = r;
    return 0;
}
