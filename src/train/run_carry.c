/* run_carry.c — the tokenizer files and generation_config.json a run carries into every checkpoint
 * (io/hf_files.h): the tokenizer files from the first of the checkpoint resumed, model.from (an HDF5 model or
 * checkpoint, a checkpoint directory's latest, an HF directory) and data.train that holds a tokenizer, and
 * generation_config.json from the first of them that holds one, and data.train's chat_template.jinja (the template
 * its conversations were rendered with) over any other. Every rank reads them (a few MB) so that every
 * rank passes the same set to the collective checkpoint write. */
#include <string.h>
#include <sys/stat.h>
#include "run.h"
#include "hf_files.h"

static int carry_is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void carry_source(const char *from, qf_hf_files *out) {
    qf_err e = {0};
    if (!from || !from[0]) return;
    if (carry_is_dir(from)) {
        char latest[QF_PATH_MAX + 64];
        if (qf_ckpt_find_latest(from, latest, sizeof latest, &e) == 1) qf_hf_files_read_path(latest, out);
        else if (qf_hf_files_from_dir(from, out, &e)) memset(out, 0, sizeof *out);
        return;
    }
    qf_hf_files_read_path(from, out);
}

static int carry_is_tok(const char *name) { return strcmp(name, "generation_config.json") != 0; }

/* The chat template the training data was rendered with (its carried chat_template.jinja, prepare) replaces the
 * one of the tokenizer files taken above: every checkpoint, and so every export, serves as the data trained. */
static void carry_data_template(qf_run *r) {
    qf_hf_files hf;
    memset(&hf, 0, sizeof hf);
    carry_source(r->deck.data_train, &hf);
    size_t n = 0;
    const unsigned char *t = qf_hf_files_get(&hf, "chat_template.jinja", &n);
    if (t) {
        int k = 0;
        while (k < r->carry.n && strcmp(r->carry.name[k], "chat_template.jinja")) k++;
        if (k < r->carry.n) free(r->carry.data[k]);
        else if (r->carry.n < QF_HF_FILES_MAX) snprintf(r->carry.name[r->carry.n++], sizeof r->carry.name[0], "chat_template.jinja");
        else k = -1;
        if (k >= 0) {
            r->carry.data[k] = qf_malloc(n ? n : 1);
            memcpy(r->carry.data[k], t, n);
            r->carry.size[k] = n;
        }
    }
    qf_hf_files_free(&hf);
}

void qf_run_carry_files(qf_run *r) {
    const char *src[3] = {r->resumed ? r->source : NULL, r->deck.model_from, r->deck.data_train};
    int have_tok = 0, have_gen = 0;
    memset(&r->carry, 0, sizeof r->carry);
    for (int s = 0; s < 3 && !(have_tok && have_gen); s++) {
        qf_hf_files hf;
        memset(&hf, 0, sizeof hf);
        carry_source(src[s], &hf);
        int tok = qf_hf_files_has_tokenizer(&hf), gen = qf_hf_files_get(&hf, "generation_config.json", NULL) != NULL;
        for (int i = 0; i < hf.n; i++) {
            int is_tok = carry_is_tok(hf.name[i]);
            if ((is_tok && (have_tok || !tok)) || (!is_tok && have_gen) || r->carry.n == QF_HF_FILES_MAX) continue;
            int k = r->carry.n++;
            memcpy(r->carry.name[k], hf.name[i], sizeof r->carry.name[k]);
            r->carry.data[k] = hf.data[i];
            r->carry.size[k] = hf.size[i];
            hf.data[i] = NULL;
        }
        have_tok |= tok;
        have_gen |= gen;
        for (int i = 0; i < hf.n; i++) free(hf.data[i]);
    }
    carry_data_template(r);
}
