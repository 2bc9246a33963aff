/* prep_parallel.c — `qwen-ft prepare` across N ranks (prep_run.h, docs/formats.md "At scale"):
 *   the plan: all input bytes, in input order, cut into N contiguous ranges of (nearly) equal size; a plain file
 *     is cut at line starts (a line belongs to the range holding its first byte), a compressed file belongs whole
 *     to the rank whose range holds its first byte;
 *   the reading pass: each rank tokenizes its ranges in order, appending tokens and masks to two spill files and
 *     24 bytes per document to memory; line numbers, the first error and the broken lines are agreed afterwards
 *     (rank 0 adds the lines that the ranks before hold of the same file);
 *   the write: each side's documents are counted, their places in the file follow from an exclusive scan, and
 *     every rank writes its tokens and offsets in rounds of PREP_STAGE elements with collective HDF5 writes.
 * With one rank this is the same code: its output does not depend on N. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "dataset_pwrite.h"
#include "out_file.h"
#include "prep_run.h"

#define PREP_STAGE ((int64_t)1 << 20) /* elements per collective write round */
#define PREP_PROGRESS_RECORDS 64     /* records between progress checks */

int prep_inputs_plan(const prep_opts *o, prep_plan *p, qf_err *e) {
    memset(p, 0, sizeof *p);
    char **paths;
    int n;
    if (qf_jsonl_expand(o->in, o->n_in, &paths, &n, e)) return e->code;
    p->in = qf_calloc((size_t)n, sizeof *p->in);
    p->n_in = n;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        p->in[i].path = paths[i];
        struct stat sb = {0};
        if (stat(paths[i], &sb) != 0 || access(paths[i], R_OK) != 0)
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: cannot open: %s", paths[i], strerror(errno));
        else if (S_ISDIR(sb.st_mode))
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: is a directory, expected a JSONL file", paths[i]);
        else if (!S_ISREG(sb.st_mode)) /* the byte ranges need the size: write a pipe's data to a file first */
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: is not a regular file (a pipe or a device); prepare splits its "
                            "inputs by size, so give it a file (compressed files are read directly)", paths[i]);
        else if (qf_jsonl_kind_of(paths[i], &p->in[i].kind, e))
            rc = e->code;
        else {
            qf_jsonl *r;
            qf_err oe = {0};
            if (qf_jsonl_open(paths[i], 0, -1, &r, &oe) == 0) p->in[i].array = qf_jsonl_is_array(r);
            qf_jsonl_close(r); /* a file that does not open says so when it is read */
        }
        p->in[i].size = (int64_t)sb.st_size;
        p->total_bytes += p->in[i].size;
    }
    for (int i = rc ? 0 : n; i < n; i++)
        if (!p->in[i].path) free(paths[i]);
    free(paths);
    if (rc) return rc;
    /* this rank's share [lo, hi) of all bytes */
    int64_t T = p->total_bytes, N = o->size, r = o->rank;
    int64_t lo = T / N * r + T % N * r / N, hi = T / N * (r + 1) + T % N * (r + 1) / N;
    p->mine = qf_calloc((size_t)(n ? n : 1), sizeof *p->mine);
    int64_t g0 = 0;
    for (int i = 0; i < n; i++) {
        int64_t g1 = g0 + p->in[i].size;
        if (p->in[i].kind == QF_JSONL_PLAIN && !p->in[i].array) {
            int64_t s = lo > g0 ? lo : g0, t = hi < g1 ? hi : g1;
            if (s < t) {
                p->mine[p->n_mine++] = (prep_range){i, s - g0, t == g1 ? -1 : t - g0};
                p->my_bytes += t - s;
            }
        } else if (p->in[i].size > 0 && g0 >= lo && g0 < hi) {
            p->mine[p->n_mine++] = (prep_range){i, 0, -1};
            p->my_bytes += p->in[i].size;
        }
        g0 = g1;
    }
    return 0;
}

void prep_plan_free(prep_plan *p) {
    for (int i = 0; i < p->n_in; i++) free(p->in[i].path);
    free(p->in);
    free(p->mine);
    memset(p, 0, sizeof *p);
}

/* 1 if the line holds only whitespace */
static int prep_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n' && s[i] != '\f' && s[i] != '\v') return 0;
    return 1;
}

/* the first error of a rank, as gathered on rank 0 */
typedef struct prep_error {
    int rc;   /* exit code, 0 = none */
    int kind; /* PREP_BAD (then --skip-bad would skip it) or PREP_FATAL */
    int file; /* -1: not about a line (why says everything) */
    int64_t line;
    char why[600];
} prep_error;

static void prep_meta_push(prep_pass *p, prep_doc *doc) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 4096;
        p->meta = qf_realloc(p->meta, (size_t)p->cap * sizeof *p->meta);
    }
    prep_content_id(doc, p->meta[p->n].id);
    p->meta[p->n].ntok = doc->n;
    p->n++;
}

static char *prep_spill_name(const char *base, int rank, const char *ext) {
    size_t n = strlen(base) + 64;
    char *s = qf_malloc(n);
    snprintf(s, n, "%s.spill-r%d.%s", base, rank, ext);
    return s;
}

/* Reads one range; returns 0, or fills err (and returns its rc) on an error that stops this rank. */
static int prep_read_range(const prep_opts *o, const prep_plan *plan, const prep_range *rg, FILE *ftok, FILE *fmask,
                           prep_pass *p, int64_t *lines, prep_broken *mine, int *n_mine, prep_error *err,
                           prep_progress *pr, int64_t *bytes_done) {
    qf_jsonl *r;
    qf_err e = {0};
    if (qf_jsonl_open(plan->in[rg->file].path, rg->start, rg->end, &r, &e)) {
        *err = (prep_error){e.code, PREP_FATAL, -1, 0, ""};
        snprintf(err->why, sizeof err->why, "%.590s", e.msg);
        return err->rc;
    }
    prep_doc doc = {0};
    char why[512];
    const char *line;
    size_t len;
    int64_t lineno, nrec = 0;
    int got;
    while ((got = qf_jsonl_next(r, &line, &len, &lineno, &e)) == 1 || got == -2) {
        lines[rg->file]++;
        p->sum.lines++;
        int kind;
        if (got == -2) { /* a line over QF_JSONL_MAX_LINE: a bad line like any other */
            snprintf(why, sizeof why, "%.500s", e.msg);
            e = (qf_err){0};
            kind = PREP_BAD;
        } else {
            if (prep_blank(line, len)) continue;
            while (len > 0 && line[len - 1] == '\r') len--; /* so that jansson's column is on this line */
            kind = prep_record(o, line, len, &doc, why, sizeof why);
        }
        if (kind == PREP_DROP) {
            p->sum.dropped_long++;
            p->sum.truncated_tokens += doc.cut;
        } else if (kind == PREP_OK) {
            prep_summary_add(&p->sum, o, &doc);
            prep_meta_push(p, &doc); /* also under --check: the ids count the duplicates */
            if (ftok) {
                fwrite(doc.tok, sizeof *doc.tok, (size_t)doc.n, ftok);
                fwrite(doc.mask, 1, (size_t)doc.n, fmask);
            }
        } else if (kind == PREP_BAD && (o->skip_bad || o->check)) {
            p->sum.broken++;
            if (*n_mine < PREP_SHOW_BROKEN) {
                prep_broken *b = &mine[(*n_mine)++];
                b->file = rg->file;
                b->line = lineno;
                snprintf(b->why, sizeof b->why, "%.390s", why);
            }
        } else {
            *err = (prep_error){QF_EXIT_INPUT, kind, rg->file, lineno, ""};
            snprintf(err->why, sizeof err->why, "%.590s", why);
            break;
        }
        if (++nrec % PREP_PROGRESS_RECORDS == 0)
            prep_progress_update(pr, *bytes_done + qf_jsonl_consumed(r), p->sum.docs + p->sum.broken);
    }
    if (got == -1) { /* reading cannot go on (-2, a skipped over-long line, is handled above) */
        *err = (prep_error){e.code, PREP_FATAL, rg->file, lineno, ""};
        snprintf(err->why, sizeof err->why, "%.590s", e.msg);
    }
    *bytes_done += qf_jsonl_consumed(r);
    qf_jsonl_close(r);
    free(doc.tok);
    free(doc.mask);
    free(doc.turn_end);
    return err->rc;
}

int prep_read_pass(const prep_opts *o, const prep_plan *plan, const char *spill_base, prep_pass *p, MPI_Comm comm) {
    memset(p, 0, sizeof *p);
    prep_summary_init(&p->sum);
    int rank = o->rank, size = o->size;
    prep_error err = {0};
    FILE *ftok = NULL, *fmask = NULL;
    if (spill_base) {
        p->spill_tok = prep_spill_name(spill_base, rank, "tok");
        p->spill_mask = prep_spill_name(spill_base, rank, "mask");
        ftok = fopen(p->spill_tok, "wb");
        fmask = fopen(p->spill_mask, "wb");
        p->spill_slot[0] = ftok ? qf_tmp_track(p->spill_tok) : -1; /* removed on every exit path */
        p->spill_slot[1] = fmask ? qf_tmp_track(p->spill_mask) : -1;
        if (!ftok || !fmask) {
            err = (prep_error){QF_EXIT_INPUT, PREP_FATAL, -1, 0, ""};
            snprintf(err.why, sizeof err.why, "%s: cannot write a spill file: %s", p->spill_tok, strerror(errno));
        }
    }
    int64_t *lines = qf_calloc((size_t)plan->n_in + 1, sizeof *lines);
    prep_broken *mine = qf_calloc(PREP_SHOW_BROKEN, sizeof *mine);
    int n_mine = 0;
    prep_progress pr;
    prep_progress_start(&pr, o, plan->my_bytes);
    int64_t bytes_done = 0;
    for (int i = 0; i < plan->n_mine && err.rc == 0; i++)
        prep_read_range(o, plan, &plan->mine[i], ftok, fmask, p, lines, mine, &n_mine, &err, &pr, &bytes_done);
    prep_progress_end(&pr);
    int spill_bad = 0;
    if (ftok) spill_bad |= fclose(ftok) != 0;
    if (fmask) spill_bad |= fclose(fmask) != 0;
    if (spill_bad && err.rc == 0) {
        err = (prep_error){QF_EXIT_INPUT, PREP_FATAL, -1, 0, ""};
        snprintf(err.why, sizeof err.why, "%s: writing a spill file failed (disk full?)", p->spill_tok);
    }

    /* agree: line numbers, the first error, the first broken lines */
    int nf = plan->n_in;
    int64_t *all_lines = rank == 0 ? qf_calloc((size_t)size * (size_t)(nf + 1), sizeof *all_lines) : NULL;
    prep_error *all_err = rank == 0 ? qf_calloc((size_t)size, sizeof *all_err) : NULL;
    prep_broken *all_broken = rank == 0 ? qf_calloc((size_t)size * PREP_SHOW_BROKEN, sizeof *all_broken) : NULL;
    int *all_nb = rank == 0 ? qf_calloc((size_t)size, sizeof *all_nb) : NULL;
    MPI_Gather(lines, nf + 1, MPI_INT64_T, all_lines, nf + 1, MPI_INT64_T, 0, comm);
    MPI_Gather(&err, (int)sizeof err, MPI_BYTE, all_err, (int)sizeof err, MPI_BYTE, 0, comm);
    MPI_Gather(mine, (int)(PREP_SHOW_BROKEN * sizeof *mine), MPI_BYTE, all_broken,
               (int)(PREP_SHOW_BROKEN * sizeof *mine), MPI_BYTE, 0, comm);
    MPI_Gather(&n_mine, 1, MPI_INT, all_nb, 1, MPI_INT, 0, comm);
    int rc = 0;
    if (rank == 0) {
        int64_t *before = qf_calloc((size_t)nf + 1, sizeof *before); /* lines of each file on ranks < r */
        for (int r = 0; r < size && rc == 0; r++) {
            for (int k = 0; k < all_nb[r] && p->n_broken_shown < PREP_SHOW_BROKEN; k++) {
                prep_broken b = all_broken[(size_t)r * PREP_SHOW_BROKEN + (size_t)k];
                b.line += before[b.file];
                p->broken[p->n_broken_shown++] = b;
            }
            prep_error *x = &all_err[r];
            if (x->rc) {
                rc = x->rc;
                if (x->file >= 0)
                    fprintf(stderr, "qwen-ft prepare: %s:%lld: %s\n", plan->in[x->file].path,
                            (long long)(x->line + before[x->file]), x->why);
                else
                    fprintf(stderr, "qwen-ft prepare: %s\n", x->why);
                if (x->kind == PREP_BAD) fprintf(stderr, "qwen-ft prepare: (--skip-bad skips such lines)\n");
            }
            for (int f = 0; f < nf; f++) before[f] += all_lines[(size_t)r * (size_t)(nf + 1) + (size_t)f];
        }
        if (rc == 0)
            for (int i = 0; i < p->n_broken_shown; i++)
                fprintf(stderr, "qwen-ft prepare: %s %s:%lld: %s\n", o->check ? "broken" : "skipping",
                        plan->in[p->broken[i].file].path, (long long)p->broken[i].line, p->broken[i].why);
        free(before);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm);
    prep_summary_reduce(&p->sum, comm);
    free(lines), free(mine), free(all_lines), free(all_err), free(all_broken), free(all_nb);
    return rc;
}

void prep_pass_free(prep_pass *p) {
    if (p->spill_tok) unlink(p->spill_tok);
    if (p->spill_mask) unlink(p->spill_mask);
    if (p->spill_tok) qf_tmp_untrack(p->spill_slot[0]), qf_tmp_untrack(p->spill_slot[1]);
    free(p->spill_tok);
    free(p->spill_mask);
    free(p->meta);
    memset(p, 0, sizeof *p);
}

/* ---- the write ----------------------------------------------------------------------------------------------- */

static int prep_kept(const prep_opts *o, uint8_t f, int valid) {
    return (f & PREP_F_VALID) == (valid ? PREP_F_VALID : 0) && !(o->dedup && (f & PREP_F_DUP));
}

/* reads the next k tokens of the kept documents of one side from the spill files */
typedef struct prep_cursor {
    FILE *ftok, *fmask;
    int64_t doc, rem; /* current document, its tokens not yet read (0: move on) */
} prep_cursor;

static void prep_cursor_read(prep_cursor *c, const prep_opts *o, const prep_pass *p, const uint8_t *flags, int valid,
                             int64_t k, uint32_t *tok, uint8_t *mask) {
    while (k > 0) {
        while (c->rem == 0) {
            c->doc++;
            QF_CHECK(c->doc < p->n);
            int64_t nt = p->meta[c->doc].ntok;
            if (prep_kept(o, flags[c->doc], valid)) {
                c->rem = nt;
            } else if (nt > 0 && (fseeko(c->ftok, (off_t)(nt * 4), SEEK_CUR) || fseeko(c->fmask, (off_t)nt, SEEK_CUR))) {
                QF_FATAL("%s: cannot seek in a spill file: %s", p->spill_tok, strerror(errno));
            }
        }
        int64_t m = c->rem < k ? c->rem : k;
        if (fread(tok, 4, (size_t)m, c->ftok) != (size_t)m || fread(mask, 1, (size_t)m, c->fmask) != (size_t)m)
            QF_FATAL("%s: cannot read a spill file back", p->spill_tok);
        tok += m, mask += m, k -= m, c->rem -= m;
    }
}

int prep_write_side(const prep_opts *o, const prep_pass *p, const uint8_t *flags, int valid, const char *path,
                    const char *tmp, const char *source, MPI_Comm comm) {
    int64_t loc[2] = {0, 0}; /* documents, tokens */
    for (int64_t i = 0; i < p->n; i++)
        if (prep_kept(o, flags[i], valid)) loc[0]++, loc[1] += p->meta[i].ntok;
    int64_t base[2] = {0, 0}, tot[2];
    MPI_Exscan(loc, base, 2, MPI_INT64_T, MPI_SUM, comm);
    if (o->rank == 0) base[0] = base[1] = 0;
    MPI_Allreduce(loc, tot, 2, MPI_INT64_T, MPI_SUM, comm);
    qf_err e = {0};
    qf_dsp *w;
    if (qf_dsp_create_tmp(path, tmp, comm, tot[1], tot[0], &w, &e)) {
        if (o->rank == 0) fprintf(stderr, "qwen-ft prepare: %s\n", e.msg);
        return e.code;
    }
    int64_t stage = loc[1] < PREP_STAGE ? (loc[1] ? loc[1] : 1) : PREP_STAGE;
    uint32_t *tok = qf_malloc((size_t)stage * sizeof *tok);
    uint8_t *mask = qf_malloc((size_t)stage);
    prep_cursor c = {fopen(p->spill_tok, "rb"), fopen(p->spill_mask, "rb"), -1, 0};
    if (!c.ftok || !c.fmask) QF_FATAL("%s: cannot open a spill file again: %s", p->spill_tok, strerror(errno));
    int64_t my_rounds = (loc[1] + PREP_STAGE - 1) / PREP_STAGE, rounds;
    MPI_Allreduce(&my_rounds, &rounds, 1, MPI_INT64_T, MPI_MAX, comm);
    int64_t max_token = -1;
    int rc = 0;
    for (int64_t r = 0; r < rounds && rc == 0; r++) {
        int64_t k = loc[1] - r * PREP_STAGE;
        k = k < 0 ? 0 : k > PREP_STAGE ? PREP_STAGE : k;
        prep_cursor_read(&c, o, p, flags, valid, k, tok, mask);
        for (int64_t i = 0; i < k; i++)
            if ((int64_t)tok[i] > max_token) max_token = tok[i];
        rc = qf_dsp_write_tokens(w, base[1] + r * PREP_STAGE, k, tok, mask, &e);
    }
    fclose(c.ftok);
    fclose(c.fmask);
    free(tok);
    free(mask);
    /* doc_offsets: my documents' starts; the last rank adds the end */
    int64_t noff = loc[0] + (o->rank == o->size - 1 ? 1 : 0);
    int64_t ostage = noff < PREP_STAGE ? (noff ? noff : 1) : PREP_STAGE;
    uint64_t *off = qf_malloc((size_t)ostage * sizeof *off);
    my_rounds = (noff + PREP_STAGE - 1) / PREP_STAGE;
    MPI_Allreduce(&my_rounds, &rounds, 1, MPI_INT64_T, MPI_MAX, comm);
    int64_t d = 0, at = base[1], emitted = 0;
    for (int64_t r = 0; r < rounds && rc == 0; r++) {
        int64_t k = 0;
        while (k < ostage && emitted < noff) {
            if (emitted == loc[0]) { /* the end (last rank) */
                off[k++] = (uint64_t)at;
                emitted++;
                break;
            }
            while (!prep_kept(o, flags[d], valid)) d++;
            off[k++] = (uint64_t)at;
            at += p->meta[d].ntok;
            d++;
            emitted++;
        }
        rc = qf_dsp_write_offsets(w, base[0] + r * PREP_STAGE, k, off, &e);
    }
    free(off);
    int64_t gmax;
    MPI_Allreduce(&max_token, &gmax, 1, MPI_INT64_T, MPI_MAX, comm);
    if (rc == 0) {
        const char *tok_id = o->tok ? qf_tok_identity(o->tok) : ""; /* "": pre-tokenized input, no tokenizer */
        rc = qf_dsp_finish(w, o->vocab_size, gmax, o->eos_id, o->pad_id, tok_id, source, &e);
    } else {
        qf_dsp_abort(w);
    }
    if (rc && o->rank == 0) fprintf(stderr, "qwen-ft prepare: %s\n", e.msg);
    return rc;
}
