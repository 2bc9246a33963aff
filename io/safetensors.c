/* safetensors.c — memory-mapped HF safetensors (single file or sharded with an index). See safetensors.h.
 *
 * File layout: u64 little-endian N, then N bytes of JSON header {name: {"dtype", "shape", "data_offsets":
 * [begin, end]}, "__metadata__": {...}}, then the data region; offsets are relative to the data region (byte 8+N).
 * Tensors of any known dtype are accepted when opening (their byte size is checked); only F32, BF16 and F16 can
 * be read (qf_st_check says so with a clear message). Tensors are kept sorted by name for qf_st_find. */
#include "safetensors.h"
#include "out_file.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Byte size of a safetensors dtype, 0 if unknown. */
static int dtype_size(const char *d) {
    static const struct {
        const char *name;
        int size;
    } tab[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"U64", 8}, {"I32", 4}, {"U32", 4},
               {"I16", 2}, {"U16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(tab[i].name, d) == 0) return tab[i].size;
    return 0;
}

static int dtype_readable(const char *d) { return !strcmp(d, "F32") || !strcmp(d, "BF16") || !strcmp(d, "F16"); }

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const qf_st_tensor *)a)->name, ((const qf_st_tensor *)b)->name);
}

void qf_st_close(qf_st *st) {
    for (int i = 0; i < st->nfiles; i++) {
        if (st->maps && st->maps[i] && st->map_len[i]) munmap(st->maps[i], st->map_len[i]);
        if (st->files) free(st->files[i]);
    }
    for (int i = 0; i < st->ntensors; i++) free(st->t[i].name);
    free(st->files);
    free(st->maps);
    free(st->map_len);
    free(st->t);
    memset(st, 0, sizeof *st);
}

/* JSON integer (or an integral real) as int64; -1 if not. */
static int json_i64(const json_t *j, int64_t *v) {
    if (json_is_integer(j)) {
        *v = (int64_t)json_integer_value(j);
        return 0;
    }
    if (json_is_real(j)) {
        double d = json_real_value(j);
        if (d == (double)(int64_t)d) {
            *v = (int64_t)d;
            return 0;
        }
    }
    return -1;
}

static int cmp_by_data(const void *a, const void *b) {
    const qf_st_tensor *x = *(const qf_st_tensor *const *)a, *y = *(const qf_st_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

/* No two tensors of file fi share a byte (a writer bug or a crafted file would alias two parameters). */
static int st_check_overlap(const qf_st *st, int fi, const char *path, qf_err *e) {
    const qf_st_tensor **v = qf_malloc((size_t)(st->ntensors ? st->ntensors : 1) * sizeof *v);
    int n = 0, rc = 0;
    for (int i = 0; i < st->ntensors; i++)
        if (st->t[i].file == fi && st->t[i].nbytes > 0) v[n++] = &st->t[i];
    qsort(v, (size_t)n, sizeof *v, cmp_by_data);
    for (int i = 1; i < n && !rc; i++)
        if (v[i - 1]->data + v[i - 1]->nbytes > v[i]->data)
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: tensors %s and %s overlap in the data (data_offsets share bytes)",
                            path, v[i - 1]->name, v[i]->name);
    free(v);
    return rc;
}

/* Maps path read-only into *map[*len]; an error naming the file when it cannot be opened or is shorter than the
 * 8-byte header length. */
static int st_map_file(const char *path, void **map, size_t *len, qf_err *e) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* O_NONBLOCK: a FIFO is refused below, not waited on */
    if (fd < 0) return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return qf_in_regular("safetensors file", path, e); /* names its kind: a directory, FIFO, device */
    }
    *len = (size_t)sb.st_size;
    if (*len < 8) {
        close(fd);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: not a safetensors file (%zu bytes, shorter than the 8-byte header "
                          "length)", path, *len);
    }
    *map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (*map == MAP_FAILED) return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot map: %s", path, strerror(err));
    return 0;
}

/* Records mapped file path as st's next file (qf_st_close unmaps it); returns its index. */
static int st_push_file(qf_st *st, const char *path, void *map, size_t len) {
    int fi = st->nfiles++;
    st->files = qf_realloc(st->files, (size_t)st->nfiles * sizeof *st->files);
    st->maps = qf_realloc(st->maps, (size_t)st->nfiles * sizeof *st->maps);
    st->map_len = qf_realloc(st->map_len, (size_t)st->nfiles * sizeof *st->map_len);
    st->files[fi] = qf_strdup(path);
    st->maps[fi] = map;
    st->map_len[fi] = len;
    return fi;
}

/* t->shape [t->ndim] and t->numel from the JSON array js; -1 when a dimension is not an integer in 0..2^40 or
 * the product exceeds 2^44 (checked before multiplying). */
static int st_parse_shape(const json_t *js, qf_st_tensor *t) {
    t->ndim = (int)json_array_size(js);
    t->numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        int64_t d;
        if (json_i64(json_array_get(js, (size_t)i), &d) < 0 || d < 0 || d > ((int64_t)1 << 40) ||
            (d > 0 && t->numel > (((int64_t)1 << 44) / d)))
            return -1;
        t->shape[i] = d;
        t->numel *= d;
    }
    return 0;
}

/* Header entry key: val into *t (all but name and file): dtype, shape, and data_offsets within the data region
 * data[dlen], whose byte count must match shape and dtype when the dtype is known. */
static int st_parse_tensor(const char *path, const char *key, const json_t *val, const uint8_t *data,
                           uint64_t dlen, qf_st_tensor *t, qf_err *e) {
    json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
           *jo = json_object_get(val, "data_offsets");
    if (!json_is_object(val) || !json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) ||
        json_array_size(jo) != 2)
        return qf_err_set(e, QF_EXIT_INPUT,
                          "%s: tensor %s: header entry needs \"dtype\" (string), \"shape\" (array) and "
                          "\"data_offsets\" ([begin, end])", path, key);
    memset(t, 0, sizeof *t);
    const char *ds = json_string_value(jd);
    snprintf(t->dtype, sizeof t->dtype, "%s", ds);
    if (strlen(ds) >= sizeof t->dtype) snprintf(t->dtype, sizeof t->dtype, "?");
    size_t nd = json_array_size(js);
    if (nd > 8) return qf_err_set(e, QF_EXIT_INPUT, "%s: tensor %s has %zu dimensions (at most 8)", path, key, nd);
    if (st_parse_shape(js, t) < 0)
        return qf_err_set(e, QF_EXIT_INPUT,
                          "%s: tensor %s: bad shape (each dimension an integer in 0..2^40, at most 2^44 elements in "
                          "all)", path, key);
    int64_t begin, end;
    if (json_i64(json_array_get(jo, 0), &begin) < 0 || json_i64(json_array_get(jo, 1), &end) < 0 || begin < 0 ||
        end < begin)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: tensor %s: bad data_offsets", path, key);
    if ((uint64_t)end > dlen)
        return qf_err_set(e, QF_EXIT_INPUT,
                          "%s: tensor %s: data_offsets [%lld, %lld] run past the end of the data (%llu bytes): "
                          "truncated file?", path, key, (long long)begin, (long long)end, (unsigned long long)dlen);
    int es = dtype_size(t->dtype);
    if (es && end - begin != t->numel * es)
        return qf_err_set(e, QF_EXIT_INPUT,
                          "%s: tensor %s: %lld bytes in data_offsets but shape and dtype %s need %lld", path, key,
                          (long long)(end - begin), t->dtype, (long long)(t->numel * es));
    t->data = data + begin;
    t->nbytes = end - begin;
    return 0;
}

/* Maps path and appends its tensors to st (file index = st->nfiles). */
static int st_add_file(qf_st *st, const char *path, qf_err *e) {
    void *map = NULL;
    size_t len = 0;
    int rc = st_map_file(path, &map, &len, e);
    if (rc) return rc;
    int fi = st_push_file(st, path, map, len);
    const uint8_t *b = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | b[i];
    if (hlen > len - 8)
        return qf_err_set(e, QF_EXIT_INPUT,
                          "%s: header length %llu runs past the end of the file (%zu bytes): not a safetensors file "
                          "or truncated", path, (unsigned long long)hlen, len);
    const uint8_t *data = b + 8 + hlen;
    uint64_t dlen = len - 8 - hlen;
    json_error_t je;
    json_t *root = json_loadb((const char *)b + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) return qf_err_set(e, QF_EXIT_INPUT, "%s: header is not valid JSON (%s, at byte %d of the header)", path,
                                 je.text, je.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: header is not a JSON object", path);
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) continue;
        qf_st_tensor t;
        if ((rc = st_parse_tensor(path, key, val, data, dlen, &t, e))) break;
        t.name = qf_strdup(key);
        t.file = fi;
        st->t = qf_realloc(st->t, (size_t)(st->ntensors + 1) * sizeof *st->t);
        st->t[st->ntensors++] = t;
    }
    json_decref(root);
    return rc ? rc : st_check_overlap(st, fi, path, e);
}

/* Sorts the tensors and rejects a name present twice (in two shards). */
static int st_finish(qf_st *st, qf_err *e) {
    if (st->ntensors > 1) qsort(st->t, (size_t)st->ntensors, sizeof *st->t, cmp_tensor);
    for (int i = 1; i < st->ntensors; i++)
        if (strcmp(st->t[i].name, st->t[i - 1].name) == 0)
            return qf_err_set(e, QF_EXIT_INPUT, "tensor %s appears in both %s and %s", st->t[i].name,
                              st->files[st->t[i - 1].file], st->files[st->t[i].file]);
    return 0;
}

int qf_st_open_file(const char *path, qf_st *st, qf_err *e) {
    memset(st, 0, sizeof *st);
    if (st_add_file(st, path, e) || st_finish(st, e)) {
        qf_st_close(st);
        return e->code;
    }
    return 0;
}

int qf_st_open_dir(const char *dir, qf_st *st, qf_err *e) {
    memset(st, 0, sizeof *st);
    char ipath[4096];
    snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir);
    if (access(ipath, F_OK) != 0) {
        char p[4096];
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        if (access(p, F_OK) != 0)
            return qf_err_set(e, QF_EXIT_INPUT, "%s: neither model.safetensors nor model.safetensors.index.json found",
                              dir);
        return qf_st_open_file(p, st, e);
    }
    json_error_t je;
    if (qf_in_regular("safetensors index", ipath, e)) return e->code; /* a FIFO would block */
    json_t *root = json_load_file(ipath, 0, &je);
    if (!root)
        return qf_err_set(e, QF_EXIT_INPUT, "%s:%d: invalid JSON: %s", ipath, je.line, je.text);
    json_t *wm = json_object_get(root, "weight_map");
    int rc = 0;
    if (!json_is_object(wm)) {
        rc = qf_err_set(e, QF_EXIT_INPUT, "%s: key weight_map missing or not an object", ipath);
        goto done;
    }
    const char *key;
    json_t *val;
    /* open each shard once, in order of first mention */
    json_object_foreach(wm, key, val) {
        if (!json_is_string(val)) {
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: weight_map[\"%s\"] is not a file name", ipath, key);
            goto done;
        }
        const char *shard = json_string_value(val);
        if (strchr(shard, '/') || strcmp(shard, "..") == 0 || shard[0] == 0) {
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: weight_map[\"%s\"] = \"%s\" is not a file name in %s", ipath, key,
                            shard, dir);
            goto done;
        }
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, shard);
        int seen = 0;
        for (int i = 0; i < st->nfiles && !seen; i++) seen = strcmp(st->files[i], p) == 0;
        if (seen) continue;
        if (access(p, F_OK) != 0) {
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: shard %s (named in %s for tensor %s) is missing", p, shard, ipath,
                            key);
            goto done;
        }
        if ((rc = st_add_file(st, p, e))) goto done;
    }
    if ((rc = st_finish(st, e))) goto done;
    /* every mapped name must really be in its shard */
    json_object_foreach(wm, key, val) {
        const qf_st_tensor *t = qf_st_find(st, key);
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, json_string_value(val));
        if (!t || strcmp(st->files[t->file], p) != 0) {
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: tensor %s is not in %s as %s says", p, key, json_string_value(val),
                            ipath);
            goto done;
        }
    }
done:
    json_decref(root);
    if (rc) qf_st_close(st);
    return rc;
}

const qf_st_tensor *qf_st_find(const qf_st *st, const char *name) {
    int lo = 0, hi = st->ntensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(st->t[mid].name, name);
        if (c == 0) return &st->t[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

int qf_st_check(const qf_st *st, const qf_st_tensor *t, qf_err *e) {
    if (dtype_readable(t->dtype)) return 0;
    return qf_err_set(e, QF_EXIT_INPUT, "%s: tensor %s has dtype %s; only F32, BF16 and F16 tensors can be read",
                      st->files[t->file], t->name, t->dtype);
}

void qf_st_read_f32(const qf_st_tensor *t, int64_t off, int64_t n, float *out) {
    QF_CHECK(off >= 0 && n >= 0 && off + n <= t->numel);
    if (strcmp(t->dtype, "F32") == 0) {
        memcpy(out, t->data + off * 4, (size_t)n * 4); /* data may be unaligned */
    } else if (strcmp(t->dtype, "BF16") == 0) {
        const uint8_t *p = t->data + off * 2;
        for (int64_t i = 0; i < n; i++) out[i] = qf_bf16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
    } else if (strcmp(t->dtype, "F16") == 0) {
        const uint8_t *p = t->data + off * 2;
        for (int64_t i = 0; i < n; i++) out[i] = qf_f16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
    } else {
        QF_FATAL("qf_st_read_f32: tensor %s has dtype %s (callers check with qf_st_check)", t->name, t->dtype);
    }
}

/* ---- writing ---------------------------------------------------------------------------------------------- */

static int write_all(FILE *fp, const void *p, size_t n) { return fwrite(p, 1, n, fp) == n ? 0 : -1; }

int qf_st_write(const char *path, const qf_st_out *tensors, int n, const char *dtype, qf_err *e) {
    int es = dtype_size(dtype);
    if (!dtype_readable(dtype))
        return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot write dtype %s (F32, BF16 or F16)", path, dtype);
    json_t *root = json_object();
    int64_t pos = 0;
    for (int i = 0; i < n; i++) {
        const qf_st_out *t = &tensors[i];
        int64_t numel = 1;
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++) {
            json_array_append_new(shape, json_integer(t->shape[d]));
            numel *= t->shape[d];
        }
        json_t *ent = json_object();
        json_object_set_new(ent, "dtype", json_string(dtype));
        json_object_set_new(ent, "shape", shape);
        json_object_set_new(ent, "data_offsets", json_pack("[II]", (json_int_t)pos, (json_int_t)(pos + numel * es)));
        if (json_object_get(root, t->name)) {
            json_decref(ent);
            json_decref(root);
            return qf_err_set(e, QF_EXIT_INPUT, "%s: tensor %s given twice", path, t->name);
        }
        json_object_set_new(root, t->name, ent);
        pos += numel * es;
    }
    char *hdr = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    QF_CHECK(hdr != NULL);
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;

    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        int err = errno;
        free(hdr);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot create: %s", tmp, strerror(err));
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int bad = write_all(fp, len8, 8) || write_all(fp, hdr, hl);
    for (size_t i = hl; i < padded && !bad; i++) bad = fputc(' ', fp) == EOF;
    free(hdr);
    enum { CH = 1 << 16 };
    uint8_t *buf = qf_malloc((size_t)CH * 4);
    for (int i = 0; i < n && !bad; i++) {
        const qf_st_out *t = &tensors[i];
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        for (int64_t a = 0; a < numel && !bad; a += CH) {
            int64_t m = numel - a < CH ? numel - a : CH;
            for (int64_t k = 0; k < m; k++) {
                float v = t->data[a + k];
                if (es == 4) {
                    uint32_t u;
                    memcpy(&u, &v, 4);
                    for (int b = 0; b < 4; b++) buf[4 * k + b] = (uint8_t)(u >> (8 * b));
                } else {
                    uint16_t h = strcmp(dtype, "BF16") == 0 ? qf_f32_to_bf16(v) : qf_f32_to_f16(v);
                    buf[2 * k] = (uint8_t)h;
                    buf[2 * k + 1] = (uint8_t)(h >> 8);
                }
            }
            bad = write_all(fp, buf, (size_t)(m * es));
        }
    }
    free(buf);
    if (fflush(fp) != 0 || fsync(fileno(fp)) != 0) bad = 1;
    int err = errno;
    if (fclose(fp) != 0) bad = 1;
    if (bad) {
        unlink(tmp);
        return qf_err_set(e, QF_EXIT_RUNTIME, "%s: write failed: %s", tmp, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        return qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot rename into place: %s", path, strerror(err));
    }
    return 0;
}
