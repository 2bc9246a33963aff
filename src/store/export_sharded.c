/* export_sharded.c — see export_sharded.h. */
#include "export_sharded.h"
#include <dirent.h>
#include <jansson.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "h5io.h"
#include "export_hf.h"
#include "export_tokenizer.h"
#include "out_file.h"

/* fp32 master weights [lo, lo+n) of this rank's shard to host */
static void sharded_master(qf_zero *z, int64_t lo, int64_t n, float *out) {
    if (z->with_opt) qf_zero_opt_get(z, 0, lo, n, out); /* wherever the master lives: GPU, host, or split */
    else qf_zero_get_params(z, lo, lo + n, out);
}

/* fp32 -> the file dtype, little-endian bytes */
static void sharded_convert(const float *in, int64_t n, qf_dtype dt, unsigned char *out) {
    if (dt == QF_DT_F32) {
        memcpy(out, in, (size_t)n * 4);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = dt == QF_DT_BF16 ? qf_f32_to_bf16(in[i]) : qf_f32_to_f16(in[i]);
        out[2 * i] = (unsigned char)(h & 0xff);
        out[2 * i + 1] = (unsigned char)(h >> 8);
    }
}

/* the safetensors header of specs [a, b): JSON padded with spaces to a multiple of 8 (malloc'd, *len bytes) */
static char *sharded_header(const qf_model *m, int a, int b, const char *st_dtype, int64_t esize, int64_t *data_off,
                            size_t *len) {
    json_t *h = json_object();
    int64_t off = 0;
    for (int i = a; i < b; i++) {
        const qf_param_spec *s = &m->specs[i];
        json_t *shape = json_array();
        for (int d = 0; d < s->ndim; d++) json_array_append_new(shape, json_integer(s->shape[d]));
        json_object_set_new(h, s->name, json_pack("{s:s,s:o,s:[I,I]}", "dtype", st_dtype, "shape", shape,
                                                  "data_offsets", (json_int_t)off, (json_int_t)(off + s->numel * esize)));
        data_off[i - a] = off;
        off += s->numel * esize;
    }
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *js = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    size_t n = strlen(js), pad = (8 - n % 8) % 8;
    js = qf_realloc(js, n + pad + 1);
    memset(js + n, ' ', pad);
    js[n + pad] = 0;
    *len = n + pad;
    return js;
}

/* one safetensors file of specs [a, b): rank 0 the header, every rank its shard's bytes */
static int sharded_file(qf_zero *z, const char *path, int a, int b, qf_dtype dt, const char *st_dtype, qf_err *e) {
    qf_model *m = z->m;
    qf_comm *c = z->comm;
    int64_t esize = dt == QF_DT_F32 ? 4 : 2;
    int64_t *doff = qf_calloc((size_t)(b - a), sizeof *doff);
    size_t hlen = 0;
    char *hdr = sharded_header(m, a, b, st_dtype, esize, doff, &hlen);
    MPI_File fh;
    int rc = MPI_File_open(c->world, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) {
        free(hdr), free(doff);
        return qf_err_set(e, QF_EXIT_RUNTIME, "checkpoint.export_hf: cannot create %s", path);
    }
    MPI_File_set_size(fh, 0); /* collective: a leftover file of the same name is truncated */
    int bad = 0;
    if (c->rank == 0) {
        unsigned char le[8];
        for (int k = 0; k < 8; k++) le[k] = (unsigned char)((uint64_t)hlen >> (8 * k));
        bad |= MPI_File_write_at(fh, 0, le, 8, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS;
        bad |= MPI_File_write_at(fh, 8, hdr, (int)hlen, MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS;
    }
    const int64_t base = 8 + (int64_t)hlen, chunk = QF_ZERO_IO_CHUNK / 4;
    float *buf = qf_malloc((size_t)chunk * 4);
    unsigned char *bytes = qf_malloc((size_t)chunk * 4);
    for (int i = a; i < b && !bad; i++) { /* unit by unit: the tensors in the flat order */
        int64_t pb = m->offset[i], pe = pb + m->specs[i].numel;
        int64_t lo0 = pb > z->shard_begin ? pb : z->shard_begin, hi0 = pe < z->shard_end ? pe : z->shard_end;
        for (int64_t lo = lo0; lo < hi0 && !bad; lo += chunk) {
            int64_t n = hi0 - lo < chunk ? hi0 - lo : chunk;
            sharded_master(z, lo, n, buf);
            sharded_convert(buf, n, dt, bytes);
            MPI_Offset at = (MPI_Offset)(base + doff[i - a] + (lo - pb) * esize);
            bad |= MPI_File_write_at(fh, at, bytes, (int)(n * esize), MPI_BYTE, MPI_STATUS_IGNORE) != MPI_SUCCESS;
        }
    }
    free(buf), free(bytes), free(hdr), free(doff);
    bad |= MPI_File_close(&fh) != MPI_SUCCESS;
    if (qf_comm_any(c, bad)) return qf_err_set(e, QF_EXIT_RUNTIME, "checkpoint.export_hf: writing %s failed", path);
    return 0;
}

/* removes step-N-hf directories whose step-N.h5 is gone (checkpoint.keep pruned it) */
static void sharded_prune(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        long long st;
        char tail[8] = "";
        if (sscanf(de->d_name, "step-%lld-h%2s", &st, tail) != 2 || strcmp(tail, "f")) continue;
        char ck[QF_PATH_MAX + 64], hf[QF_PATH_MAX + 300];
        snprintf(ck, sizeof ck, "%s/step-%08lld.h5", dir, st);
        snprintf(hf, sizeof hf, "%s/%s", dir, de->d_name);
        if (!qf_exists(ck)) qf_export_remove_dir(hf);
    }
    if (d) closedir(d);
}

/* rank 0: config.json, generation_config.json, the index, the tokenizer (a tokenizer problem only warns: the
 * checkpoint itself is safe) */
static int sharded_meta(qf_zero *z, const char *tmp, const char *ckpt, const char *dtype, int nfiles, const int *starts,
                        qf_err *e) {
    qf_model *m = z->m;
    if (qf_export_write_config(tmp, &m->cfg, dtype, e)) return e->code;
    qf_export_tok tk;
    qf_err te = {0};
    if (qf_export_tok_find(ckpt, NULL, &tk, &te)) {
        fprintf(stderr, "qwen-ft: warning: checkpoint.export_hf: no tokenizer files: %s\n", te.msg);
        memset(&tk, 0, sizeof tk);
    }
    if (qf_export_gencfg_write(tmp, &m->cfg, &tk, e) == 0 && tk.tok) qf_export_tok_write(&tk, tmp, &m->cfg, e);
    qf_export_tok_free(&tk);
    if (e->code || nfiles == 1) return e->code;
    int64_t esize = !strcmp(dtype, "fp32") ? 4 : 2, total = 0;
    json_t *wmap = json_object();
    for (int s = 0; s < nfiles; s++) {
        char name[64];
        qf_export_file_name(s, nfiles, name, sizeof name);
        for (int i = starts[s]; i < starts[s + 1]; i++) {
            json_object_set_new(wmap, m->specs[i].name, json_string(name));
            total += m->specs[i].numel * esize;
        }
    }
    json_t *idx = json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", wmap);
    char path[QF_PATH_MAX + 200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", tmp);
    int rc = json_dump_file(idx, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(idx);
    return rc ? qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot write", path) : 0;
}

int qf_export_hf_sharded(qf_zero *z, const char *ckpt_dir, const char *ckpt, int64_t step, qf_err *e) {
    qf_model *m = z->m;
    qf_comm *c = z->comm;
    double t0 = qf_now();
    qf_dtype dt = QF_DT_BF16;
    if (qf_dtype_parse(m->cfg.dtype, &dt) != 0) dt = QF_DT_BF16;
    const char *dtype = qf_dtype_name(dt), *st_dtype = dt == QF_DT_BF16 ? "BF16" : dt == QF_DT_F16 ? "F16" : "F32";
    char final[QF_PATH_MAX + 64], tmp[QF_PATH_MAX + 80];
    snprintf(final, sizeof final, "%s/step-%08lld-hf", ckpt_dir, (long long)step);
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    int bad = 0;
    if (c->rank == 0) {
        qf_export_remove_dir(tmp);
        bad = qf_mkdirs(tmp) != 0;
    }
    if (qf_comm_any(c, bad)) return qf_err_set(e, QF_EXIT_RUNTIME, "checkpoint.export_hf: cannot create %s", tmp);
    int slot = c->rank == 0 ? qf_tmp_track_dir(tmp) : -1; /* a fatal error on the way removes it (out_file.h) */
    int *starts = qf_calloc((size_t)m->nspecs + 1, sizeof *starts);
    int nfiles = qf_export_plan(m->specs, m->nspecs, dt == QF_DT_F32 ? 4 : 2, QF_EXPORT_SHARD_BYTES, starts);
    for (int s = 0; s < nfiles && !e->code; s++) {
        char name[64], path[QF_PATH_MAX + 160];
        qf_export_file_name(s, nfiles, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", tmp, name);
        sharded_file(z, path, starts[s], starts[s + 1], dt, st_dtype, e);
    }
    if (!e->code && c->rank == 0) sharded_meta(z, tmp, ckpt, dtype, nfiles, starts, e);
    free(starts);
    bad = e->code != 0;
    if (!bad && c->rank == 0) {
        qf_export_remove_dir(final); /* a directory of the same step from an earlier run */
        bad = rename(tmp, final) != 0;
        if (!bad) sharded_prune(ckpt_dir);
    }
    int failed = qf_comm_any(c, bad);
    qf_tmp_untrack(slot);
    if (failed) {
        if (c->rank == 0) qf_export_remove_dir(tmp);
        return e->code ? e->code : qf_err_set(e, QF_EXIT_RUNTIME, "checkpoint.export_hf: %s failed", final);
    }
    if (c->rank == 0) {
        printf("checkpoint: %s (HF, %s, %d file%s, written by %d rank%s from their shards, %.1f s)\n", final, st_dtype,
               nfiles, nfiles == 1 ? "" : "s", c->world_size, c->world_size == 1 ? "" : "s", qf_now() - t0);
        fflush(stdout);
    }
    return 0;
}
