/* h5_impl.h — the HDF5 helpers io/h5io.c, io/dataset.c and io/dataset_pwrite.c share (not for callers outside
 * io/: use h5io.h, dataset.h). io/'s private headers end in _impl.h: this one and tok_impl.h.
 *
 * Quiet mode: HDF5 prints its error stack on stderr by default; qwen-ft reports every failure once, through
 * qf_err, so each call into HDF5 runs between h5_quiet_begin and h5_quiet_end, which save and restore the
 * caller's automatic error handler (nesting is fine: the inner pair restores "quiet"). */
#ifndef QF_H5_IMPL_H
#define QF_H5_IMPL_H
#include <hdf5.h>

/* The automatic error handler of the default stack, as saved by h5_quiet_begin. */
typedef struct h5_quiet {
    H5E_auto2_t fn;
    void *data;
} h5_quiet;

/* Saves the current handler in *q and switches automatic error printing off. */
static inline void h5_quiet_begin(h5_quiet *q) {
    H5Eget_auto2(H5E_DEFAULT, &q->fn, &q->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

/* Restores the handler saved in *q. */
static inline void h5_quiet_end(const h5_quiet *q) { H5Eset_auto2(H5E_DEFAULT, q->fn, q->data); }

/* Closes *id with its close function (H5Dclose, H5Sclose, ...) when it is open (>= 0), and marks it closed (-1).
 * Returns the close function's result, 0 when there was nothing to close. */
static inline herr_t h5_close_id(hid_t *id, herr_t (*close)(hid_t)) {
    herr_t r = *id >= 0 ? close(*id) : 0;
    *id = -1;
    return r;
}

/* The parts of an open qf_h5 (h5io.c) that other io/ files reach: the HDF5 file id, its communicator, its path. */
#include <mpi.h>
struct qf_h5;
hid_t qf_h5_hid(const struct qf_h5 *f);
MPI_Comm qf_h5_comm_of(const struct qf_h5 *f);
const char *qf_h5_path_of(const struct qf_h5 *f);

#endif
