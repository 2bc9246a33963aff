/* export_hf.c — an HF directory that transformers and vLLM load: config.json, generation_config.json,
 * model.safetensors (or shards of at most --max-shard-size, default 5 GiB, with model.safetensors.index.json) and
 * the model's tokenizer files (export_tokenizer.c: the tokenizer recorded at import / by the training data,
 * identity checked). qf_export_hf_file writes one from a model or checkpoint file on one process (`qwen-ft
 * export`); export_sharded.c writes one collectively from the ZeRO shards in memory (`checkpoint.export_hf`), with
 * the same config, shard plan and file names. Checkpoints export their fp32 master weights; Qwen v1 models export
 * in the Qwen2 layout (transformers loads it natively; v1's own format needs remote code). */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export_hf.h"
#include "export_tokenizer.h"
#include "h5io.h"
#include "model/model.h"
#include "safetensors.h"
#include "model_io.h"
#include "out_file.h"

/* config.json as transformers writes it for Qwen2ForCausalLM / Qwen3ForCausalLM */
int qf_export_write_config(const char *dir, const qf_model_config *c, const char *dtype, qf_err *e) {
    int q3 = !strcmp(c->arch, "qwen3");
    json_t *o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", q3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM"));
    json_object_set_new(o, "model_type", json_string(q3 ? "qwen3" : "qwen2"));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(o, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->num_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->num_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->num_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_position_embeddings));
    json_object_set_new(o, "rms_norm_eps", json_real(c->rms_norm_eps));
    json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(o, "initializer_range", json_real(c->initializer_range > 0 ? c->initializer_range : 0.02));
    json_object_set_new(o, "use_cache", json_true());
    json_object_set_new(o, "use_sliding_window", json_false());
    if (q3) json_object_set_new(o, "attention_bias", json_boolean(c->attention_bias));
    const char *td = !strcmp(dtype, "bf16") ? "bfloat16" : !strcmp(dtype, "fp16") ? "float16" : "float32";
    json_object_set_new(o, "torch_dtype", json_string(td)); /* older readers (vLLM, transformers 4) */
    json_object_set_new(o, "dtype", json_string(td));       /* transformers 5 */
    if (c->bos_token_id >= 0) json_object_set_new(o, "bos_token_id", json_integer(c->bos_token_id));
    if (c->eos_token_id >= 0) json_object_set_new(o, "eos_token_id", json_integer(c->eos_token_id));
    if (c->pad_token_id >= 0) json_object_set_new(o, "pad_token_id", json_integer(c->pad_token_id));
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    return rc ? qf_err_set(e, QF_EXIT_INPUT, "%s: cannot write", path) : 0;
}

int qf_export_plan(const qf_param_spec *specs, int n, int64_t esize, int64_t shard_bytes, int *starts) {
    int nshards = 0;
    int64_t acc = 0;
    for (int i = 0; i < n; i++) {
        int64_t b = specs[i].numel * esize;
        if (i == 0 || acc + b > shard_bytes) {
            starts[nshards++] = i;
            acc = 0;
        }
        acc += b;
    }
    starts[nshards] = n;
    return nshards;
}

void qf_export_file_name(int s, int nfiles, char *out, size_t cap) {
    if (nfiles == 1) snprintf(out, cap, "model.safetensors");
    else snprintf(out, cap, "model-%05d-of-%05d.safetensors", s + 1, nfiles);
}

void qf_export_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[QF_PATH_MAX + 300];
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    rmdir(dir);
}

/* tensors [first, last) of the spec list into one safetensors file */
static int write_shard(const char *path, const qf_model *m, const char *from, int first, int last, const char *st_dtype,
                       qf_err *e) {
    qf_st_out *outs = qf_calloc((size_t)(last - first), sizeof *outs);
    float **bufs = qf_calloc((size_t)(last - first), sizeof *bufs);
    for (int i = first; i < last && !e->code; i++) {
        const qf_param_spec *s = &m->specs[i];
        bufs[i - first] = qf_malloc((size_t)s->numel * 4);
        qf_model_load_range(m, from, m->offset[i], m->offset[i] + s->numel, bufs[i - first], e);
        outs[i - first].name = s->name;
        outs[i - first].ndim = s->ndim;
        for (int dd = 0; dd < s->ndim; dd++) outs[i - first].shape[dd] = s->shape[dd];
        outs[i - first].data = bufs[i - first];
    }
    if (!e->code) qf_st_write(path, outs, last - first, st_dtype, e);
    for (int i = 0; i < last - first; i++) free(bufs[i]);
    free(bufs);
    free(outs);
    return e->code;
}

/* QWENFT_INJECT_FAULT="0:S:stall" (docs/testing.md): after writing shard S the export waits 60 s, so that a test can
 * signal it while its temporary directory is half written */
static void fault_stall(int shard) {
    const char *f = getenv("QWENFT_INJECT_FAULT");
    int r = -1, s = -1;
    char kind[16] = {0};
    if (f && sscanf(f, "%d:%d:%15s", &r, &s, kind) == 3 && r == 0 && s == shard && !strcmp(kind, "stall")) sleep(60);
}

/* OUT.lock, held while the export writes: 0, or exit 2 naming the holder (3 when it cannot be taken) */
static int export_lock(qf_lock *l, const char *out, qf_err *e) {
    char lf[QF_PATH_MAX + 16], who[400];
    snprintf(lf, sizeof lf, "%s.lock", out);
    int busy = qf_lock_try(l, lf, 1, who, sizeof who, e);
    if (busy == 1)
        return qf_err_set(e, QF_EXIT_INPUT, "export: --out %s is being written by another export (lock file %s: %s)",
                          out, lf, who);
    return busy;
}

int qf_export_hf_file(const char *from, const char *out, const char *dtype_arg, const char *tok_arg,
                      int64_t shard_bytes, qf_err *e) {
    qf_model_config c;
    char resolved[QF_PATH_MAX + 64];
    if (qf_model_source_config(from, &c, resolved, sizeof resolved, e)) return e->code;
    const char *dtype = dtype_arg ? dtype_arg : (c.dtype[0] ? c.dtype : "bf16");
    qf_dtype dt;
    if (qf_dtype_parse(dtype, &dt) != 0)
        return qf_err_set(e, QF_EXIT_INPUT, "export: --dtype %s: expected bf16, fp16 or fp32", dtype);
    const char *st_dtype = dt == QF_DT_BF16 ? "BF16" : dt == QF_DT_F16 ? "F16" : "F32";
    int64_t esize = dt == QF_DT_F32 ? 4 : 2;
    struct stat sb;
    const char *in[1] = {resolved}; /* the output rule (kernels/base/out_file.h): a directory or nothing there */
    if (qf_out_check("export: --out", out, 1, in, 1, e)) return e->code;
    if (stat(out, &sb) == 0) {
        DIR *d = opendir(out);
        int n = 0;
        struct dirent *de;
        while (d && (de = readdir(d))) n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
        if (d) closedir(d);
        if (n) return qf_err_set(e, QF_EXIT_INPUT, "export: --out %s exists and is not empty", out);
    }
    qf_export_tok tk;
    if (qf_export_tok_find(resolved, tok_arg, &tk, e)) return e->code;
    qf_model m;
    if (qf_model_create(&m, &c, qf_ops_cpu(), 0, e)) {
        qf_export_tok_free(&tk);
        return e->code;
    }
    char tmp[QF_PATH_MAX + 64];
    qf_lock olk = {.fd = -1}; /* one exporter per --out: the second says who holds it */
    if (qf_out_tmpname(out, tmp, sizeof tmp) != 0 || export_lock(&olk, out, e) || qf_mkdirs(tmp) != 0) {
        qf_model_free(&m);
        qf_export_tok_free(&tk);
        qf_lock_release(&olk);
        return e->code ? e->code : qf_err_set(e, QF_EXIT_INPUT, "export: cannot create %s", tmp);
    }
    int slot = qf_tmp_track_dir(tmp); /* removed on every exit path, SIGINT/SIGTERM/SIGHUP included (out_file.h) */
    int *starts = qf_calloc((size_t)m.nspecs + 1, sizeof(int));
    int nshards = qf_export_plan(m.specs, m.nspecs, esize, shard_bytes, starts);
    json_t *wmap = json_object();
    for (int s = 0; s < nshards && !e->code; s++) {
        char name[64], path[QF_PATH_MAX + 160];
        qf_export_file_name(s, nshards, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", tmp, name);
        printf("export: %s (%d tensors)\n", name, starts[s + 1] - starts[s]);
        fflush(stdout);
        if (write_shard(path, &m, from, starts[s], starts[s + 1], st_dtype, e) == 0)
            for (int i = starts[s]; i < starts[s + 1]; i++) json_object_set_new(wmap, m.specs[i].name, json_string(name));
        fault_stall(s + 1);
    }
    if (!e->code && nshards > 1) {
        int64_t total = 0;
        for (int i = 0; i < m.nspecs; i++) total += m.specs[i].numel * esize;
        json_t *idx = json_pack("{s:{s:I},s:O}", "metadata", "total_size", (json_int_t)total, "weight_map", wmap);
        char path[QF_PATH_MAX + 160];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", tmp);
        if (json_dump_file(idx, path, JSON_INDENT(2) | JSON_SORT_KEYS)) qf_err_set(e, QF_EXIT_INPUT, "%s: cannot write", path);
        json_decref(idx);
    }
    json_decref(wmap);
    if (!e->code) qf_export_write_config(tmp, &c, dtype, e);
    if (!e->code) qf_export_gencfg_write(tmp, &c, &tk, e);
    if (!e->code) qf_export_tok_write(&tk, tmp, &c, e);
    if (!e->code) {
        rmdir(out); /* an empty directory may be there */
        if (rename(tmp, out) != 0) qf_err_set(e, QF_EXIT_INPUT, "export: cannot rename %s to %s", tmp, out);
    }
    if (e->code) qf_export_remove_dir(tmp);
    qf_tmp_untrack(slot);
    if (!e->code) printf("export: wrote %s (%s, %d file%s, %s); tokenizer: %s\n", out, c.arch, nshards, nshards == 1 ? "" : "s",
                st_dtype, tk.origin);
    qf_lock_release(&olk);
    qf_export_tok_free(&tk);
    free(starts);
    qf_model_free(&m);
    return e->code;
}
