/* qf_h5poke.c — a test helper that damages HDF5 files the way a hand-made or edited file can be damaged, so that
 * tests/cli/*_hardening_*.sh can feed them to qwen-ft (no h5py needed):
 *   qf_h5poke FILE attr NAME INT          sets root attribute NAME (or /GROUP/NAME) to an int64 (created or replaced)
 *   qf_h5poke FILE attrf NAME FLOAT       sets root attribute NAME to a float64
 *   qf_h5poke FILE u32 DSET INDEX VALUE   writes element INDEX of a 1-D uint32 dataset (/tokens)
 *   qf_h5poke FILE u8 DSET INDEX VALUE    writes element INDEX of a 1-D uint8 dataset (/loss_mask)
 *   qf_h5poke FILE reshape DSET D0 D1     rewrites a float dataset with the same elements under shape [D0, D1]
 *   qf_h5poke FILE unlink PATH            removes a group or dataset (/hf_files: a file that carries no tokenizer)
 * Exit 0 on success, 1 otherwise. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NAME is a root attribute, or "/group/attr" for one on a group */
static int set_attr(hid_t f, const char *path, hid_t ft, hid_t mt, const void *v) {
    char grp[512] = "/";
    const char *name = path, *slash = strrchr(path, '/');
    if (slash && slash != path) {
        snprintf(grp, sizeof grp, "%.*s", (int)(slash - path), path);
        name = slash + 1;
    } else if (slash) {
        name = slash + 1;
    }
    hid_t root = H5Gopen2(f, grp, H5P_DEFAULT);
    if (root < 0) return 1;
    if (H5Aexists(root, name) > 0) H5Adelete(root, name);
    hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(root, name, ft, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, mt, v) < 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(s);
    H5Gclose(root);
    return rc;
}

static int poke(hid_t f, const char *dset, hid_t mt, long long index, const void *v) {
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    if (d < 0) return 1;
    hid_t fs = H5Dget_space(d);
    hsize_t start = (hsize_t)index, one = 1;
    hid_t ms = H5Screate_simple(1, &one, NULL);
    int rc = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &one, NULL) < 0 ||
             H5Dwrite(d, mt, ms, fs, H5P_DEFAULT, v) < 0;
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(d);
    return rc;
}

static int reshape(hid_t f, const char *dset, hsize_t d0, hsize_t d1) {
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    if (d < 0) return 1;
    hid_t t = H5Dget_type(d), s = H5Dget_space(d);
    hssize_t n = H5Sget_simple_extent_npoints(s);
    if (n != (hssize_t)(d0 * d1)) return fprintf(stderr, "qf_h5poke: %lld elements, not %llu x %llu\n", (long long)n,
                                                 (unsigned long long)d0, (unsigned long long)d1), 1;
    size_t sz = H5Tget_size(t);
    void *buf = malloc((size_t)n * sz);
    int rc = H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0;
    H5Sclose(s);
    H5Dclose(d);
    rc = rc || H5Ldelete(f, dset, H5P_DEFAULT) < 0;
    hsize_t dims[2] = {d0, d1};
    hid_t ns = H5Screate_simple(2, dims, NULL);
    hid_t nd = rc ? -1 : H5Dcreate2(f, dset, t, ns, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    rc = rc || nd < 0 || H5Dwrite(nd, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0;
    if (nd >= 0) H5Dclose(nd);
    H5Sclose(ns);
    H5Tclose(t);
    free(buf);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: qf_h5poke FILE attr|attrf|u32|u8|reshape|unlink ...\n");
        return 1;
    }
    hid_t f = H5Fopen(argv[1], H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return 1;
    const char *op = argv[2];
    int rc = 1;
    if (!strcmp(op, "unlink") && argc == 4) {
        rc = H5Ldelete(f, argv[3], H5P_DEFAULT) < 0;
    } else if (argc < 5) {
        rc = 1;
    } else if (!strcmp(op, "attr")) {
        long long v = strtoll(argv[4], NULL, 0);
        rc = set_attr(f, argv[3], H5T_STD_I64LE, H5T_NATIVE_LLONG, &v);
    } else if (!strcmp(op, "attrf")) {
        double v = strtod(argv[4], NULL);
        rc = set_attr(f, argv[3], H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
    } else if (!strcmp(op, "u32") && argc == 6) {
        unsigned v = (unsigned)strtoul(argv[5], NULL, 0);
        rc = poke(f, argv[3], H5T_NATIVE_UINT, strtoll(argv[4], NULL, 0), &v);
    } else if (!strcmp(op, "u8") && argc == 6) {
        unsigned char v = (unsigned char)strtoul(argv[5], NULL, 0);
        rc = poke(f, argv[3], H5T_NATIVE_UCHAR, strtoll(argv[4], NULL, 0), &v);
    } else if (!strcmp(op, "reshape") && argc == 6) {
        rc = reshape(f, argv[3], strtoull(argv[4], NULL, 0), strtoull(argv[5], NULL, 0));
    }
    if (H5Fclose(f) < 0) rc = 1;
    if (rc) fprintf(stderr, "qf_h5poke: %s %s failed\n", argv[1], op);
    return rc;
}
