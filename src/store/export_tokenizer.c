/* export_tokenizer.c — see export_tokenizer.h. */
#include "export_tokenizer.h"
#include <jansson.h>
#include <libconfig.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "h5io.h"
#include "hf_files.h"
#include "out_file.h"
#include <dirent.h>
#include <unistd.h>
#include "checkpoint.h"

#define EXPORT_TOK_DEPTH 4 /* model.from chains followed at most this deep */

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* expected identities and a candidate directory gathered along the source chain */
typedef struct tok_trail {
    char cand[QF_PATH_MAX];            /* a directory holding the tokenizer ("" = none yet) */
    char cand_from[QF_PATH_MAX + 32];  /* what pointed at it */
    char want[4][256], want_from[4][QF_PATH_MAX + 32];
    int nwant;
    char tmpdir[64];                   /* carried files written out (removed by qf_export_tok_free) */
    int slot;                          /* its tracker slot (kernels/base/out_file.h) */
    char *tmpl;                        /* the training data's chat template (its chat_template.jinja); NULL none */
    size_t tmpl_len;
    char tmpl_name[32];                /* its attribute chat_template ("" none) */
    char tmpl_from[QF_PATH_MAX + 32];
    char *ck_tmpl;                     /* the exported checkpoint's carried chat_template.jinja (its run put the
                                        * training data's there, src/train/run_carry.c); NULL none */
    size_t ck_tmpl_len;
    char ck_from[QF_PATH_MAX + 32];
    char gencfg[QF_PATH_MAX + 32];     /* the first generation_config.json found ("" = none) */
} tok_trail;

/* Removes the private directory of carried files (plain files only). */
static void tok_remove_tmpdir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[QF_PATH_MAX + 300];
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* Files a qwen-ft HDF5 file carries (io/hf_files.h): written into a private directory, which becomes the
 * candidate when it holds a tokenizer and there is none yet; its generation_config.json is kept. */
static void trail_carried(tok_trail *tr, qf_h5 *f, const char *path) {
    qf_hf_files hf;
    qf_err e = {0};
    if (qf_hf_files_read(f, &hf, &e) || hf.n == 0) return;
    int tok = qf_hf_files_has_tokenizer(&hf) && !tr->cand[0];
    int gen = qf_hf_files_get(&hf, "generation_config.json", NULL) && !tr->gencfg[0];
    if (!tok && !gen) {
        qf_hf_files_free(&hf);
        return;
    }
    if (!tr->tmpdir[0]) {
        char dir[64];
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/qwen-ft-carried-XXXXXX", tmp && tmp[0] && strlen(tmp) < 36 ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            qf_hf_files_free(&hf);
            return;
        }
        snprintf(tr->tmpdir, sizeof tr->tmpdir, "%s", dir);
        tr->slot = qf_tmp_track_dir(dir); /* a signal or a fatal error removes it too (out_file.h) */
    }
    /* the tokenizer files, or generation_config.json alone: one directory holds what each came from */
    for (int i = 0; i < hf.n; i++) {
        int is_gen = !strcmp(hf.name[i], "generation_config.json");
        if (is_gen ? !gen : !tok) continue;
        qf_hf_files one = {.n = 1};
        memcpy(one.name[0], hf.name[i], sizeof one.name[0]);
        one.data[0] = hf.data[i];
        one.size[0] = hf.size[i];
        if (qf_hf_files_save(&one, tr->tmpdir, NULL, &e)) {
            qf_hf_files_free(&hf);
            return;
        }
    }
    if (tok) {
        snprintf(tr->cand, sizeof tr->cand, "%s", tr->tmpdir);
        snprintf(tr->cand_from, sizeof tr->cand_from, "carried by %s", path);
    }
    if (gen) snprintf(tr->gencfg, sizeof tr->gencfg, "%s/generation_config.json", tr->tmpdir);
    qf_hf_files_free(&hf);
}

static void trail_want(tok_trail *tr, const char *ident, const char *from) {
    if (!ident[0] || tr->nwant == 4) return;
    snprintf(tr->want[tr->nwant], sizeof tr->want[0], "%s", ident);
    snprintf(tr->want_from[tr->nwant++], sizeof tr->want_from[0], "%s", from);
}

static int dir_has_tokenizer(const char *dir) {
    char p[QF_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (qf_exists(p)) return 1;
    snprintf(p, sizeof p, "%s/qwen.tiktoken", dir);
    return qf_exists(p);
}

/* the identity a packed dataset records ("" when unreadable) */
static void dataset_identity(const char *path, char *out, size_t cap) {
    out[0] = 0;
    qf_h5 *f = NULL;
    qf_err e = {0};
    if (qf_h5_open(path, MPI_COMM_SELF, 0, &f, &e)) return;
    if (qf_h5_attr_has(f, "/", "tokenizer") && qf_h5_attr_read_str(f, "/", "tokenizer", out, cap, &e)) out[0] = 0;
    qf_h5_close(f, &e);
}

static void trail_source(tok_trail *tr, const char *from, int depth);

/* the chat template a packed dataset was rendered with (prepare: attribute chat_template, carried
 * chat_template.jinja), the first one found */
static void trail_data_template(tok_trail *tr, const char *path) {
    if (tr->tmpl || tr->tmpl_name[0]) return;
    qf_h5 *f = NULL;
    qf_err e = {0};
    if (qf_h5_open(path, MPI_COMM_SELF, 0, &f, &e)) return;
    if (qf_h5_attr_has(f, "/", "chat_template") &&
        qf_h5_attr_read_str(f, "/", "chat_template", tr->tmpl_name, sizeof tr->tmpl_name, &e))
        tr->tmpl_name[0] = 0;
    qf_hf_files hf;
    if (qf_hf_files_read(f, &hf, &e) == 0) {
        size_t n = 0;
        const unsigned char *t = qf_hf_files_get(&hf, "chat_template.jinja", &n);
        if (t) {
            tr->tmpl = qf_malloc(n + 1);
            memcpy(tr->tmpl, t, n);
            tr->tmpl[n] = 0;
            tr->tmpl_len = n;
        }
        qf_hf_files_free(&hf);
    }
    qf_h5_close(f, &e);
    if (tr->tmpl || tr->tmpl_name[0]) snprintf(tr->tmpl_from, sizeof tr->tmpl_from, "the training data %s", path);
}

/* an HDF5 model or checkpoint file: its own record, then its deck's model.from and data.train */
static void trail_h5(tok_trail *tr, const char *path, int depth) {
    qf_h5 *f = NULL;
    qf_err e = {0};
    if (qf_h5_open(path, MPI_COMM_SELF, 0, &f, &e)) return;
    char ident[256] = "", dir[QF_PATH_MAX] = "";
    if (qf_h5_attr_has(f, "/", "tokenizer") && qf_h5_attr_read_str(f, "/", "tokenizer", ident, sizeof ident, &e) == 0)
        trail_want(tr, ident, path);
    trail_carried(tr, f, path);
    if (depth == 0 && !tr->ck_tmpl && qf_h5_has(f, "state", NULL)) { /* the checkpoint exported */
        qf_hf_files hf;
        if (qf_hf_files_read(f, &hf, &e) == 0) {
            size_t n = 0;
            const unsigned char *t = qf_hf_files_get(&hf, "chat_template.jinja", &n);
            if (t) {
                tr->ck_tmpl = qf_malloc(n + 1);
                memcpy(tr->ck_tmpl, t, n);
                tr->ck_tmpl[n] = 0;
                tr->ck_tmpl_len = n;
                snprintf(tr->ck_from, sizeof tr->ck_from, "carried by %.1000s: its training data's", path);
            }
            qf_hf_files_free(&hf);
        }
        e.code = 0;
    }
    if (qf_h5_attr_has(f, "/", "tokenizer_dir") && qf_h5_attr_read_str(f, "/", "tokenizer_dir", dir, sizeof dir, &e) == 0 &&
        dir[0] && !tr->cand[0] && dir_has_tokenizer(dir)) {
        snprintf(tr->cand, sizeof tr->cand, "%s", dir);
        snprintf(tr->cand_from, sizeof tr->cand_from, "recorded by %s", path);
    }
    char *deck = NULL;
    if (qf_h5_has(f, "state", NULL) && qf_h5_attr_has(f, "state", "deck")) {
        size_t cap = 1 << 20;
        deck = qf_malloc(cap);
        if (qf_h5_attr_read_str(f, "state", "deck", deck, cap, &e)) deck[0] = 0;
    }
    qf_h5_close(f, &e);
    if (!deck) return;
    config_t cfg;
    config_init(&cfg);
    const char *mf = NULL, *dt = NULL;
    if (config_read_string(&cfg, deck) == CONFIG_TRUE) {
        if (config_lookup_string(&cfg, "data.train", &dt) == CONFIG_TRUE && dt[0] && qf_exists(dt)) {
            char id[256], from[QF_PATH_MAX + 32];
            dataset_identity(dt, id, sizeof id);
            snprintf(from, sizeof from, "the training data %s", dt);
            trail_want(tr, id, from);
            trail_data_template(tr, dt);
        }
        if (config_lookup_string(&cfg, "model.from", &mf) == CONFIG_TRUE && mf[0]) trail_source(tr, mf, depth + 1);
    }
    config_destroy(&cfg);
    free(deck);
}

/* a model source: an HF directory (its tokenizer), a checkpoint directory (its latest) or an HDF5 file */
static void trail_source(tok_trail *tr, const char *from, int depth) {
    if (depth > EXPORT_TOK_DEPTH || !qf_exists(from)) return;
    if (is_dir(from)) {
        char g[QF_PATH_MAX + 32];
        snprintf(g, sizeof g, "%s/generation_config.json", from);
        if (!tr->gencfg[0] && qf_exists(g)) snprintf(tr->gencfg, sizeof tr->gencfg, "%s", g);
        if (dir_has_tokenizer(from) && !tr->cand[0]) {
            if (!realpath(from, tr->cand)) snprintf(tr->cand, sizeof tr->cand, "%s", from);
            snprintf(tr->cand_from, sizeof tr->cand_from, "the model's HF directory %s", from);
        }
        char latest[QF_PATH_MAX + 64];
        qf_err e = {0};
        if (qf_ckpt_find_latest(from, latest, sizeof latest, &e) == 1) trail_h5(tr, latest, depth);
        return;
    }
    trail_h5(tr, from, depth);
}

/* "; chat template NAME (where from)" appended to t->origin: the template qf_export_tok_write will write */
static void tok_describe_template(qf_export_tok *t) {
    char *own = NULL, where[QF_PATH_MAX + 64];
    size_t own_len = 0;
    qf_err e = {0};
    if (!t->tmpl) qf_tmpl_find(t->dir, &own, &own_len, where, sizeof where, &e);
    const char *text = t->tmpl ? t->tmpl : own;
    size_t len = t->tmpl ? t->tmpl_len : own_len;
    qf_tmpl_id id;
    const char *name = !text ? "chatml" : qf_tmpl_recognise(text, len, &id) == 0 ? qf_tmpl_name(id) : "not one qwen-ft knows";
    char from[QF_PATH_MAX + 64];
    if (t->tmpl) snprintf(from, sizeof from, "%s", t->tmpl_from);
    else if (own && t->tmpdir[0] && !strcmp(t->dir, t->tmpdir) && strstr(where, "/chat_template.jinja"))
        snprintf(from, sizeof from, "carried as chat_template.jinja: the training data's");
    else if (own) snprintf(from, sizeof from, "the tokenizer's own");
    else snprintf(from, sizeof from, "qwen-ft's ChatML: the tokenizer has none");
    size_t n = strlen(t->origin);
    snprintf(t->origin + n, sizeof t->origin - n, "; chat template %s (%s)", name, from);
    if (!t->tmpl && t->tmpl_name[0])
        fprintf(stderr, "qwen-ft export: warning: %s was rendered with the chat template %s, whose text it does not "
                        "carry (prepare --template %s over a tokenizer without it): the export keeps %s chat template, "
                        "under which apply_chat_template does not give the ids trained on\n",
                t->tmpl_from + strlen("the training data "), t->tmpl_name, t->tmpl_name,
                own ? "the tokenizer's own" : "qwen-ft's ChatML");
    free(own);
}

static int tok_find(const char *src, const char *tok_arg, qf_export_tok *t, qf_err *e) {
    tok_trail tr;
    memset(&tr, 0, sizeof tr);
    tr.slot = -1;
    trail_source(&tr, src, 0);
    snprintf(t->tmpdir, sizeof t->tmpdir, "%s", tr.tmpdir);
    t->tmp_slot = tr.slot;
    if (!tr.tmpl && !tr.tmpl_name[0] && tr.ck_tmpl) { /* the data is not found: the checkpoint still carries it */
        tr.tmpl = tr.ck_tmpl, tr.tmpl_len = tr.ck_tmpl_len, tr.ck_tmpl = NULL;
        snprintf(tr.tmpl_from, sizeof tr.tmpl_from, "%s", tr.ck_from);
    }
    free(tr.ck_tmpl);
    tr.ck_tmpl = NULL;
    t->tmpl = tr.tmpl, t->tmpl_len = tr.tmpl_len;
    snprintf(t->tmpl_name, sizeof t->tmpl_name, "%s", tr.tmpl_name);
    snprintf(t->tmpl_from, sizeof t->tmpl_from, "%s", tr.tmpl_from);
    snprintf(t->gencfg, sizeof t->gencfg, "%s", tr.gencfg);
    const char *path = tok_arg ? tok_arg : tr.cand[0] ? tr.cand : NULL;
    if (!path) {
        /* the model or its data was made with a tokenizer: an export without it would not serve as trained */
        if (tr.nwant)
            return qf_err_set(e, QF_EXIT_INPUT, "export: %s records the tokenizer %s, but no file carries it and its "
                              "directory is gone: pass --tokenizer DIR with that tokenizer", tr.want_from[0], tr.want[0]);
        snprintf(t->origin, sizeof t->origin, "none recorded for %s: pass --tokenizer to include one", src);
        return 0;
    }
    qf_err le = {0};
    if (qf_tok_load(path, &t->tok, &le)) return qf_err_set(e, le.code, "export: tokenizer %s: %s", path, le.msg);
    const char *have = qf_tok_identity(t->tok);
    for (int i = 0; i < tr.nwant; i++)
        if (strcmp(have, tr.want[i]))
            return qf_err_set(e, QF_EXIT_INPUT, "export: the tokenizer %s (%s) is not the one %s records (%s)%s", path,
                              have, tr.want_from[i], tr.want[i], tok_arg ? "" : ": pass --tokenizer with the right one");
    /* the file that was loaded: a directory's tokenizer.json, else its qwen.tiktoken (io/tokenizer.c's order) */
    if (is_dir(path)) {
        snprintf(t->dir, sizeof t->dir, "%s", path);
        snprintf(t->file, sizeof t->file, "%s/tokenizer.json", path);
        if (!qf_exists(t->file)) snprintf(t->file, sizeof t->file, "%s/qwen.tiktoken", path);
    } else {
        snprintf(t->file, sizeof t->file, "%s", path);
        snprintf(t->dir, sizeof t->dir, "%s", path);
        char *slash = strrchr(t->dir, '/');
        if (slash) *slash = 0;
        else snprintf(t->dir, sizeof t->dir, ".");
    }
    const char *shown = t->file; /* a carried file is named as the model knows it, not by the private copy */
    if (tr.tmpdir[0] && !strcmp(path, tr.tmpdir)) shown = strrchr(t->file, '/') + 1;
    snprintf(t->origin, sizeof t->origin, "%s (%s%s)", shown, tok_arg ? "--tokenizer" : tr.cand_from,
             tr.nwant ? ", identity checked" : "");
    tok_describe_template(t);
    return 0;
}

int qf_export_tok_find(const char *src, const char *tok_arg, qf_export_tok *t, qf_err *e) {
    memset(t, 0, sizeof *t);
    int rc = tok_find(src, tok_arg, t, e);
    if (rc) qf_export_tok_free(t);
    return rc;
}

void qf_export_tok_free(qf_export_tok *t) {
    if (t->tok) qf_tok_free(t->tok);
    if (t->tmpdir[0]) {
        tok_remove_tmpdir(t->tmpdir);
        qf_tmp_untrack(t->tmp_slot);
    }
    free(t->tmpl);
    memset(t, 0, sizeof *t);
}

static int copy_file(const char *from, const char *to, qf_err *e) {
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    int ok = a && b;
    char buf[1 << 16];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
    if (a && ferror(a)) ok = 0;
    if (a) fclose(a);
    if (b && fclose(b)) ok = 0;
    return ok ? 0 : qf_err_set(e, QF_EXIT_INPUT, "export: cannot copy %s to %s", from, to);
}

int qf_export_tok_write(const qf_export_tok *t, const char *out_dir, const qf_model_config *c, qf_err *e) {
    if (!t->tok) return 0;
    static const char *const companions[] = {"tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                                             "merges.txt", "added_tokens.json", "tokenization_qwen.py"};
    char from[QF_PATH_MAX + 64], to[QF_PATH_MAX + 64];
    int tiktoken = !strncmp(qf_tok_identity(t->tok), "qwen.tiktoken", 13);
    snprintf(to, sizeof to, "%s/%s", out_dir, tiktoken ? "qwen.tiktoken" : "tokenizer.json");
    if (copy_file(t->file, to, e)) return e->code;
    if (tiktoken) { /* Qwen v1: its tokenizer class is remote code; the equivalent tokenizer.json needs none */
        snprintf(to, sizeof to, "%s/tokenizer.json", out_dir);
        if (qf_tok_write_hf_json(t->tok, to, e)) return e->code;
    }
    int have_cfg = 0;
    for (size_t i = 0; i < sizeof companions / sizeof *companions && !tiktoken; i++) {
        snprintf(from, sizeof from, "%s/%s", t->dir, companions[i]);
        if (!qf_exists(from)) continue;
        snprintf(to, sizeof to, "%s/%s", out_dir, companions[i]);
        if (copy_file(from, to, e)) return e->code;
        have_cfg |= i == 0;
    }
    /* the chat template, into tokenizer_config.json (no chat_template.jinja is written: transformers would take
     * it over the config's): the training data's, else the tokenizer's own, else qwen-ft's ChatML */
    char *own = NULL, where[QF_PATH_MAX + 64];
    size_t own_len = 0;
    qf_err fe = {0};
    if (!t->tmpl && qf_tmpl_find(t->dir, &own, &own_len, where, sizeof where, &fe)) return qf_err_set(e, fe.code, "export: %s", fe.msg);
    const char *text = t->tmpl ? t->tmpl : own;
    int chatml_ok = qf_tok_special(t->tok, "<|im_end|>") >= 0 && qf_tok_special(t->tok, "<|im_start|>") >= 0;
    if (!text && chatml_ok) text = qf_tmpl_chatml_text();
    if (have_cfg) {
        snprintf(to, sizeof to, "%s/tokenizer_config.json", out_dir);
        json_error_t je;
        json_t *o = json_load_file(to, 0, &je);
        if (!o) o = json_load_file(to, JSON_DECODE_INT_AS_REAL, &je); /* a model_max_length beyond 64 bits (1e30) */
        int rc = 0;
        if (!o || !json_is_object(o)) rc = qf_err_set(e, QF_EXIT_INPUT, "export: %s/tokenizer_config.json: %s", t->dir, o ? "not a JSON object" : je.text);
        else if (text) {
            json_object_set_new(o, "chat_template", json_string(text));
            if (json_dump_file(o, to, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) rc = qf_err_set(e, QF_EXIT_INPUT, "%s: cannot write", to);
        }
        json_decref(o);
        free(own);
        return rc;
    }
    int32_t eot = qf_tok_special(t->tok, "<|endoftext|>"), imend = qf_tok_special(t->tok, "<|im_end|>");
    json_t *o = json_object();
    json_object_set_new(o, "tokenizer_class", json_string("Qwen2Tokenizer"));
    json_object_set_new(o, "model_max_length", json_integer(c->max_position_embeddings > 0 ? c->max_position_embeddings : 32768));
    json_object_set_new(o, "add_bos_token", json_false());
    json_object_set_new(o, "add_prefix_space", json_false());
    json_object_set_new(o, "clean_up_tokenization_spaces", json_false());
    json_object_set_new(o, "errors", json_string("replace"));
    json_object_set_new(o, "bos_token", json_null());
    if (imend >= 0) json_object_set_new(o, "eos_token", json_string("<|im_end|>"));
    else if (eot >= 0) json_object_set_new(o, "eos_token", json_string("<|endoftext|>"));
    if (eot >= 0) json_object_set_new(o, "pad_token", json_string("<|endoftext|>"));
    if (text) json_object_set_new(o, "chat_template", json_string(text));
    snprintf(to, sizeof to, "%s/tokenizer_config.json", out_dir);
    int rc = json_dump_file(o, to, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    free(own);
    return rc ? qf_err_set(e, QF_EXIT_INPUT, "%s: cannot write", to) : 0;
}

int qf_export_gencfg_write(const char *out_dir, const qf_model_config *c, const qf_export_tok *t, qf_err *e) {
    const qf_tokenizer *tok = t ? t->tok : NULL;
    if (t && t->gencfg[0]) { /* the model's own (import carried it): sampling settings and eos list as they were */
        char to[QF_PATH_MAX + 64];
        snprintf(to, sizeof to, "%s/generation_config.json", out_dir);
        return copy_file(t->gencfg, to, e);
    }
    int32_t eot = tok ? qf_tok_special(tok, "<|endoftext|>") : -1, imend = tok ? qf_tok_special(tok, "<|im_end|>") : -1;
    int64_t eos[3];
    int n = 0;
    int64_t cand[3] = {c->eos_token_id, imend, eot};
    for (int i = 0; i < 3; i++) {
        int dup = cand[i] < 0 || cand[i] >= c->vocab_size;
        for (int j = 0; j < n; j++) dup |= eos[j] == cand[i];
        if (!dup) eos[n++] = cand[i];
    }
    json_t *o = json_object();
    if (c->bos_token_id >= 0 && c->bos_token_id < c->vocab_size)
        json_object_set_new(o, "bos_token_id", json_integer(c->bos_token_id));
    if (n == 1) json_object_set_new(o, "eos_token_id", json_integer(eos[0]));
    else if (n > 1) {
        json_t *a = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(eos[i]));
        json_object_set_new(o, "eos_token_id", a);
    }
    int64_t pad = c->pad_token_id >= 0 ? c->pad_token_id : eot >= 0 && eot < c->vocab_size ? eot : -1;
    if (pad >= 0) json_object_set_new(o, "pad_token_id", json_integer(pad));
    json_object_set_new(o, "do_sample", json_false());
    char to[QF_PATH_MAX + 64];
    snprintf(to, sizeof to, "%s/generation_config.json", out_dir);
    int rc = json_dump_file(o, to, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    return rc ? qf_err_set(e, QF_EXIT_INPUT, "%s: cannot write", to) : 0;
}
