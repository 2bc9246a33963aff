/* prep_build.c — the whole of `qwen-ft prepare` once its options are complete: the tokenizer (loaded once per
 * rank) and the ids it decides, then the phases of prep_run.h on every rank (read, split, summary, write) and the
 * atomic publication of the dataset(s). The output does not depend on the number of ranks. */
#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dataset.h"
#include "hf_files.h"
#include "prep.h"
#include "prep_outputs.h"
#include "prep_run.h"
#include "util.h"

#define PREP_DEFAULT_EOS 151643 /* <|endoftext|> of the Qwen tokenizers */

/* A value the tokenizer contradicts (--vocab-size, --eos-id, --pad-id): the message as a bad option value reads
 * (src/cli/options.c's qf_opts_bad), exit 2. */
static int prep_bad_value(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "qwen-ft prepare: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (qwen-ft prepare --help lists the options)\n");
    va_end(ap);
    return QF_EXIT_INPUT;
}

/* 0 if the directory that will hold path is writable (message printed by rank 0 otherwise). */
static int prep_check_writable(const prep_opts *o, const char *path) {
    char *dir = qf_strdup(path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    int rc = 0;
    if (access(dir, W_OK) != 0) {
        if (o->rank == 0) fprintf(stderr, "qwen-ft prepare: %s: cannot write into %s: %s\n", path, dir, strerror(errno));
        rc = QF_EXIT_INPUT;
    }
    free(dir);
    return rc;
}

/* OUT with .h5 replaced by .valid.h5, or --valid-out */
static char *prep_valid_path(const prep_opts *o) {
    if (o->valid_out) return qf_strdup(o->valid_out);
    size_t n = strlen(o->out);
    char *v = qf_malloc(n + 16);
    memcpy(v, o->out, n + 1);
    if (n >= 3 && !strcmp(o->out + n - 3, ".h5")) v[n - 3] = 0;
    strcat(v, ".valid.h5");
    return v;
}

/* the `source` attribute: the input files, one per line */
static char *prep_source(const prep_plan *plan) {
    size_t n = 1;
    for (int i = 0; i < plan->n_in; i++) n += strlen(plan->in[i].path) + 1;
    char *s = qf_calloc(n, 1);
    for (int i = 0; i < plan->n_in; i++) {
        if (i) strcat(s, "\n");
        strcat(s, plan->in[i].path);
    }
    return s;
}

/* Root attributes chat_template (the name) and chat_template_sha256 (of the text carried as chat_template.jinja;
 * "" when the text is not known) of the dataset at path (docs/formats.md). */
static int prep_record_template(const prep_opts *o, const char *path, qf_err *e) {
    char hex[65] = "";
    if (o->tmpl_text) qf_tmpl_sha256(o->tmpl_text, o->tmpl_len, hex);
    qf_h5 *f = NULL;
    if (qf_h5_open(path, MPI_COMM_SELF, 1, &f, e)) return e->code;
    qf_h5_attr_write_str(f, "/", "chat_template", qf_tmpl_name(o->tmpl_id), e);
    if (!e->code) qf_h5_attr_write_str(f, "/", "chat_template_sha256", hex, e);
    qf_err ce = {0};
    if (qf_h5_close(f, &ce) && !e->code) *e = ce;
    return e->code;
}

/* --tokenizer T: T's tokenizer files (not its generation_config.json) carried in the dataset written at path, so
 * that a checkpoint trained on it, and its export, have them (io/hf_files.h). Rank 0 writes; every rank returns
 * the same code. */
static int prep_carry_tokenizer(const prep_opts *o, const char *path, MPI_Comm comm) {
    int rc = 0;
    if (!o->tokenizer) return 0;
    if (o->rank == 0) {
        qf_hf_files hf;
        qf_err e = {0};
        struct stat st;
        int is_dir = stat(o->tokenizer, &st) == 0 && S_ISDIR(st.st_mode);
        rc = qf_hf_files_from_dir(o->tokenizer, &hf, &e);
        if (!rc && is_dir) { /* a model directory's generation_config.json is the model's, not the data's */
            for (int i = 0; i < hf.n; i++)
                if (!strcmp(hf.name[i], "generation_config.json")) {
                    free(hf.data[i]);
                    hf.data[i] = hf.data[--hf.n];
                    hf.size[i] = hf.size[hf.n];
                    memcpy(hf.name[i], hf.name[hf.n], sizeof hf.name[i]);
                }
        }
        /* the template the conversations were rendered with, as chat_template.jinja (the directory's own is
         * replaced: transformers would take it over tokenizer_config.json's) */
        for (int i = 0; !rc && i < hf.n; i++)
            if (!strcmp(hf.name[i], "chat_template.jinja")) {
                free(hf.data[i]);
                hf.data[i] = hf.data[--hf.n];
                hf.size[i] = hf.size[hf.n];
                memcpy(hf.name[i], hf.name[hf.n], sizeof hf.name[i]);
                break;
            }
        if (!rc && o->tmpl_text && hf.n < QF_HF_FILES_MAX) {
            int k = hf.n++;
            snprintf(hf.name[k], sizeof hf.name[k], "chat_template.jinja");
            hf.data[k] = qf_malloc(o->tmpl_len ? o->tmpl_len : 1);
            memcpy(hf.data[k], o->tmpl_text, o->tmpl_len);
            hf.size[k] = o->tmpl_len;
        }
        if (!rc) rc = qf_hf_files_add_to_path(path, &hf, &e);
        if (!rc) rc = prep_record_template(o, path, &e);
        if (rc) fprintf(stderr, "qwen-ft prepare: %s\n", e.msg);
        qf_hf_files_free(&hf);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm);
    return rc;
}

/* Reads every input (this rank's share) and writes the dataset(s); o is complete (tokenizer loaded, ids
 * resolved). Collective; every rank returns the same code. */
static int prep_build(const prep_opts *o) {
    MPI_Comm comm = MPI_COMM_WORLD;
    double t0 = qf_now();
    char *valid_path = !o->check && o->valid_fraction > 0 ? prep_valid_path(o) : NULL;
    if (valid_path && !strcmp(valid_path, o->out)) {
        if (o->rank == 0) fprintf(stderr, "qwen-ft prepare: --valid-out %s is the same file as --out\n", valid_path);
        free(valid_path);
        return QF_EXIT_INPUT;
    }
    if (!o->check && (prep_check_writable(o, o->out) || (valid_path && prep_check_writable(o, valid_path)))) {
        free(valid_path);
        return QF_EXIT_INPUT;
    }
    prep_plan plan;
    qf_err e = {0};
    if (prep_inputs_plan(o, &plan, &e)) {
        if (o->rank == 0) fprintf(stderr, "qwen-ft prepare: %s\n", e.msg);
        prep_plan_free(&plan);
        free(valid_path);
        return e.code;
    }
    /* the output rule (prep_outputs.h): checked against the inputs and locked before anything is read */
    prep_outputs po;
    if (!o->check && prep_outputs_begin(o, &plan, valid_path, &po, comm) != 0) {
        prep_plan_free(&plan);
        free(valid_path);
        return QF_EXIT_INPUT;
    }
    char *source = prep_source(&plan);
    prep_pass pass;
    int rc = prep_read_pass(o, &plan, o->check ? NULL : po.out.tmp, &pass, comm);
    int64_t docs = pass.sum.docs; /* rank 0's total */
    MPI_Bcast(&docs, 1, MPI_INT64_T, 0, comm);
    if (rc == 0 && docs == 0 && !o->check) {
        if (o->rank == 0)
            fprintf(stderr, "qwen-ft prepare: no documents in the input (%lld lines skipped); nothing written\n",
                    (long long)pass.sum.broken);
        rc = QF_EXIT_INPUT;
    }
    uint8_t *flags = NULL;
    prep_dup_stats dup;
    memset(&dup, 0, sizeof dup);
    if (rc == 0) {
        flags = qf_malloc((size_t)(pass.n ? pass.n : 1));
        prep_split_decide(o, &pass, flags, &dup, comm);
        if (o->rank == 0 && o->valid_fraction > 0 && dup.valid_disabled)
            fprintf(stderr, "qwen-ft prepare: warning: %lld distinct record(s): no validation file written\n",
                    (long long)(dup.train_docs - dup.dup_records + (o->dedup ? dup.dropped : 0)));
    }
    if (rc == 0 && !o->check) {
        int with_valid = valid_path && dup.valid_docs > 0;
        if (with_valid) rc = prep_write_side(o, &pass, flags, 1, valid_path, po.valid.tmp, source, comm);
        if (rc == 0) rc = prep_write_side(o, &pass, flags, 0, o->out, po.out.tmp, source, comm);
        if (rc == 0) rc = prep_carry_tokenizer(o, po.out.tmp, comm);
        if (rc == 0 && with_valid) rc = prep_carry_tokenizer(o, po.valid.tmp, comm);
        if (rc == 0) rc = prep_outputs_commit(&po, o, with_valid, comm); /* both, or neither: no half result */
        if (rc == 0 && o->rank == 0) {
            printf("prepare: wrote %s: %lld documents, %lld tokens\n", o->out, (long long)dup.train_docs,
                   (long long)dup.train_tokens);
            if (with_valid)
                printf("prepare: wrote %s: %lld documents, %lld tokens (validation, content hash, seed %llu)\n",
                       valid_path, (long long)dup.valid_docs, (long long)dup.valid_tokens,
                       (unsigned long long)o->seed);
        }
    }
    if (rc == 0 && o->rank == 0) {
        prep_summary_print(stdout, o, &plan, &pass, &dup, qf_now() - t0);
        if (!o->check) {
            const prep_summary *s = &pass.sum;
            printf("prepare: done: %lld documents, %lld tokens, %lld trained tokens, skipped %lld bad line%s",
                   (long long)s->docs, (long long)s->tokens, (long long)s->trained, (long long)s->broken,
                   s->broken == 1 ? "" : "s");
            for (int i = 0; i < pass.n_broken_shown; i++)
                printf("%s%s:%lld", i ? ", " : " (", plan.in[pass.broken[i].file].path, (long long)pass.broken[i].line);
            if (s->broken > pass.n_broken_shown) printf(", ...");
            printf("%s; %d rank%s, %.1f s\n", pass.n_broken_shown ? ")" : "", o->size, o->size == 1 ? "" : "s",
                   qf_now() - t0);
        }
        fflush(stdout);
    }
    /* --check: broken lines are an error unless --skip-bad */
    if (rc == 0 && o->check && !o->skip_bad) {
        int64_t broken = pass.sum.broken;
        MPI_Bcast(&broken, 1, MPI_INT64_T, 0, comm);
        if (broken) {
            if (o->rank == 0)
                fprintf(stderr, "qwen-ft prepare: --check: %lld broken line%s (--skip-bad accepts them)\n",
                        (long long)broken, broken == 1 ? "" : "s");
            rc = QF_EXIT_INPUT;
        }
    }
    if (!o->check && po.active) prep_outputs_abort(&po, o);
    free(flags);
    prep_pass_free(&pass);
    prep_plan_free(&plan);
    free(source);
    free(valid_path);
    return rc;
}

/* Resolves the defaults that depend on the tokenizer: vocab size, eos and pad ids. 0 or exit 2 (printed). */
static int prep_resolve_ids(prep_opts *o) {
    if (o->tok) {
        int64_t tv = qf_tok_vocab_size(o->tok);
        if (o->vocab_size == 0)
            o->vocab_size = tv;
        else if (o->vocab_size < tv)
            return o->rank ? QF_EXIT_INPUT : prep_bad_value("--vocab-size %lld is smaller than the vocabulary of the tokenizer %s (%lld ids)",
                                  (long long)o->vocab_size, o->tokenizer, (long long)tv);
        if (o->eos_id < 0) o->eos_id = qf_tok_special(o->tok, "<|endoftext|>");
        if (o->eos_id < 0)
            return o->rank ? QF_EXIT_INPUT : prep_bad_value("the tokenizer %s has no <|endoftext|>: pass --eos-id", o->tokenizer);
    }
    if (o->eos_id < 0) o->eos_id = PREP_DEFAULT_EOS;
    if (o->pad_id < 0) o->pad_id = o->eos_id;
    if (o->vocab_size > 0 && o->eos_id >= o->vocab_size)
        return o->rank ? QF_EXIT_INPUT : prep_bad_value("the eos id %lld is >= the vocabulary size %lld (--eos-id, --vocab-size)",
                              (long long)o->eos_id, (long long)o->vocab_size);
    if (o->vocab_size > 0 && o->pad_id >= o->vocab_size)
        return o->rank ? QF_EXIT_INPUT : prep_bad_value("the pad id %lld is >= the vocabulary size %lld (--pad-id, --vocab-size)",
                              (long long)o->pad_id, (long long)o->vocab_size);
    return 0;
}

/* The chat template of conversations (--template, else the tokenizer directory's, else qwen1) into *id; 0 or exit 2
 * (printed by rank 0). Rank 0 says which template was taken. */
/* The text the dataset records for template id (o->tmpl_text): the tokenizer directory's own when it is that
 * template, qwen-ft's ChatML for chatml and qwen1 otherwise, else none (a warning: an export then keeps the
 * tokenizer's own template, which does not render as the data was). */
static void prep_template_text(prep_opts *o, qf_tmpl_id id) {
    char where[4200];
    char *text = NULL;
    size_t len = 0;
    qf_err e = {0};
    qf_tmpl_id own;
    if (qf_tmpl_find(o->tokenizer, &text, &len, where, sizeof where, &e) == 0 && text &&
        qf_tmpl_recognise(text, len, &own) == 0 && own == id) {
        o->tmpl_text = text, o->tmpl_len = len;
        return;
    }
    free(text);
    if (id == QF_TMPL_CHATML || id == QF_TMPL_QWEN1) {
        o->tmpl_text = qf_strdup(qf_tmpl_chatml_text());
        o->tmpl_len = strlen(o->tmpl_text);
        return;
    }
    if (o->rank == 0)
        fprintf(stderr, "qwen-ft prepare: warning: --template %s: %s has no %s chat template beside it, so the dataset "
                        "records the name only; an export keeps the tokenizer's own template, and "
                        "apply_chat_template of it will not give the ids trained on\n",
                qf_tmpl_name(id), o->tokenizer, qf_tmpl_name(id));
}

static int prep_pick_template(prep_opts *o, qf_tmpl_id *id) {
    char where[4200];
    int found = 0;
    qf_err e = {0};
    int is_auto = !o->template_name || !strcmp(o->template_name, "auto");
    if (!is_auto) {
        qf_tmpl_by_name(o->template_name, id); /* checked with the options */
        if (o->rank == 0) printf("prepare: chat template %s (--template)\n", qf_tmpl_name(*id));
        prep_template_text(o, *id);
        return 0;
    }
    if (qf_tmpl_detect(o->tokenizer, id, &found, where, sizeof where, &e)) {
        if (o->rank == 0) fprintf(stderr, "qwen-ft prepare: --tokenizer %s: %s\n", o->tokenizer, e.msg);
        return e.code;
    }
    if (!found && o->template_name) {
        if (o->rank == 0)
            fprintf(stderr, "qwen-ft prepare: --template auto: %s has no chat template (tokenizer_config.json "
                            "\"chat_template\" or chat_template.jinja beside the tokenizer); pass --template NAME "
                            "(%s)\n", o->tokenizer, qf_tmpl_names());
        return QF_EXIT_INPUT;
    }
    if (!found) *id = QF_TMPL_QWEN1;
    if (o->rank == 0) {
        if (found) printf("prepare: chat template %s (recognised in %s)\n", qf_tmpl_name(*id), where);
        else printf("prepare: chat template qwen1 (Qwen v1 finetune.py; the tokenizer has no chat template beside it)\n");
    }
    prep_template_text(o, *id);
    return 0;
}

/* Loads the tokenizer (once per rank) and its chat template, resolves the ids, builds; frees what it loaded. */
int prep_run(prep_opts *o) {
    qf_tokenizer *tok = NULL;
    qf_chat_template tm;
    memset(&tm, 0, sizeof tm);
    qf_err e = {0};
    if (o->tokenizer) {
        if (qf_tok_load(o->tokenizer, &tok, &e)) {
            if (o->rank == 0) fprintf(stderr, "qwen-ft prepare: --tokenizer %s: %s\n", o->tokenizer, e.msg);
            return e.code;
        }
        o->tok = tok;
        qf_tmpl_id id;
        int rc = prep_pick_template(o, &id);
        o->tmpl_id = id;
        if (rc) {
            free(o->tmpl_text);
            o->tmpl_text = NULL;
            qf_tok_free(tok);
            o->tok = NULL;
            return rc;
        }
        /* a tokenizer without the ChatML tokens still serves text records; conversations then say why not */
        if (qf_tmpl_init(&tm, id, tok, &e) == 0)
            o->tmpl = &tm;
        else
            snprintf(o->tmpl_why, sizeof o->tmpl_why, "%.400s", e.msg);
    }
    int rc = prep_resolve_ids(o);
    if (rc == 0) rc = prep_build(o);
    qf_tmpl_free(&tm);
    if (tok) qf_tok_free(tok);
    free(o->tmpl_text);
    o->tmpl_text = NULL;
    o->tok = NULL;
    o->tmpl = NULL;
    return rc;
}
