/* checkpoint.c — see checkpoint.h. */
#include "checkpoint.h"
#include "out_file.h"
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "h5io.h"
#include "hf_files.h"

static const char *const STATE_I64[] = {"step", "sched_step", "data_epoch", "data_row", "tokens_seen",
                                        "skipped", "ls_cur_iter", "ls_last_overflow", "ls_hysteresis",
                                        "bad_evals", "adam_t"};

static int64_t *state_i64(qf_train_state *s, qf_zero *z, int i) {
    int64_t *f[] = {&s->step, &s->sched_step, &s->data_epoch, &s->data_row, &s->tokens_seen, &s->skipped,
                    &s->ls_cur_iter, &s->ls_last_overflow, &s->ls_hysteresis, &s->bad_evals, &z->adam_t};
    return f[i];
}

static int write_tensors(qf_h5 *f, qf_zero *z, qf_err *e) {
    qf_model *m = z->m;
    /* every rank writes the part of each parameter inside its shard of the flat space (which it holds at every
     * stage: parameters always, optimizer state too since its optimizer range contains its shard), one parameter
     * at a time so the host buffer stays one tensor */
    int64_t pb = z->shard_begin, pe = z->shard_end, big = 1;
    for (int i = 0; i < m->nspecs; i++) big = m->specs[i].numel > big ? m->specs[i].numel : big;
    if (big > pe - pb) big = pe - pb > 0 ? pe - pb : 1;
    float *buf = qf_malloc((size_t)big * 4 + 4);
    qf_dtype dt = QF_DT_F32;
    if (qf_dtype_parse(m->cfg.dtype, &dt) != 0) dt = QF_DT_BF16;
    const char *groups[] = {"master", "adam_m", "adam_v"};
    for (int i = 0; i < m->nspecs && !e->code; i++) {
        const qf_param_spec *s = &m->specs[i];
        int64_t b = m->offset[i], en = b + s->numel;
        int64_t lo = b > pb ? b : pb, hi = en < pe ? en : pe;
        int64_t n = hi > lo ? hi - lo : 0, off = n ? lo - b : 0;
        if (n) qf_zero_get_params(z, lo, hi, buf);
        if (qf_h5_write_f32(f, "params", s->name, s->ndim, s->shape, dt, off, n, buf, e)) break;
        for (int g = 0; g < 3 && !e->code; g++) {
            qf_zero_opt_get(z, g, lo, n, buf);
            qf_h5_write_f32(f, groups[g], s->name, s->ndim, s->shape, QF_DT_F32, off, n, buf, e);
        }
    }
    free(buf);
    return e->code;
}

static int write_state(qf_h5 *f, qf_zero *z, qf_train_state *s, const char *deck_text, qf_err *e) {
    for (size_t i = 0; i < sizeof STATE_I64 / sizeof STATE_I64[0]; i++)
        if (qf_h5_attr_write_i64(f, "state", STATE_I64[i], *state_i64(s, z, (int)i), e)) return e->code;
    if (qf_h5_attr_write_f64(f, "state", "loss_scale", s->loss_scale, e)) return e->code;
    if (qf_h5_attr_write_f64(f, "state", "best_valid", s->best_valid, e)) return e->code;
    if (qf_h5_attr_write_blob(f, "state", "rng", s->rng, sizeof s->rng, e)) return e->code;
    if (qf_h5_attr_write_i64(f, "state", "world_size", z->comm->world_size, e)) return e->code;
    if (qf_h5_attr_write_i64(f, "state", "zero_stage", z->stage, e)) return e->code;
    if (qf_h5_attr_write_str(f, "state", "deck", deck_text ? deck_text : "", e)) return e->code;
    return 0;
}

/* The file the `best` pointer names (checkpoint.keep_best, ckpt_best.c), "" when none: never pruned (nor are the
 * checkpoints after the one `latest` names). */
static void best_name(const char *dir, char *name, size_t cap) {
    char bf[QF_PATH_MAX + 32];
    snprintf(bf, sizeof bf, "%s/best", dir);
    FILE *fp = fopen(bf, "r");
    name[0] = 0;
    if (fp && !fgets(name, (int)cap, fp)) name[0] = 0;
    if (fp) fclose(fp);
    name[strcspn(name, "\r\n")] = 0;
}

void qf_ckpt_prune(const char *dir, int keep);
static void prune(const char *dir, int keep) { qf_ckpt_prune(dir, keep); }

void qf_ckpt_prune(const char *dir, int keep) {
    char best[512], latest[512];
    long long newest = -1;
    if (keep <= 0) return;
    best_name(dir, best, sizeof best);
    /* checkpoints after the one `latest` names are another future (a run resumed from an older step, train
     * --resume-from): not rotated, overwritten when this run reaches their step */
    char lp[QF_PATH_MAX + 32];
    snprintf(lp, sizeof lp, "%s/latest", dir);
    FILE *lf = fopen(lp, "r");
    if (lf && fgets(latest, sizeof latest, lf) && sscanf(latest, "step-%lld.h5", &newest) != 1) newest = -1;
    if (lf) fclose(lf);
    DIR *dp = opendir(dir);
    if (!dp) return;
    int64_t steps[4096];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)) && n < 4096) {
        long long st;
        char tail[8];
        size_t len = strlen(de->d_name);
        if (len > 7 && strstr(de->d_name, ".h5.tmp") && !strncmp(de->d_name, "step-", 5)) {
            char p[QF_PATH_MAX + 300]; /* a write cut short by a crash: never published, and with the directory
                                        * locked by this run no other run is writing it: safe to remove */
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
            continue;
        }
        if (!strncmp(de->d_name, "latest.tmp", 10) || !strncmp(de->d_name, "best.tmp", 8)) { /* likewise a pointer
                                                                                              * update cut short */
            char p[QF_PATH_MAX + 300];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
            continue;
        }
        if (sscanf(de->d_name, "step-%lld.h%2s", &st, tail) == 2 && strcmp(tail, "5") == 0 &&
            strstr(de->d_name, ".tmp") == NULL && strcmp(de->d_name, best) != 0 && (newest < 0 || st <= newest))
            steps[n++] = st;
    }
    closedir(dp);
    for (int i = 0; i < n; i++) { /* keep the `keep` largest */
        int larger = 0;
        for (int j = 0; j < n; j++) larger += steps[j] > steps[i];
        if (larger >= keep) {
            char p[QF_PATH_MAX + 64];
            snprintf(p, sizeof p, "%s/step-%08lld.h5", dir, (long long)steps[i]);
            unlink(p);
        }
    }
}

/* QWENFT_INJECT_FAULT="RANK:STEP:h5write" (docs/testing.md): rank RANK's dataset writes of the checkpoint of
 * step STEP fail, as on a full disk. */
static int fault_h5write(int rank, int64_t step) {
    const char *f = getenv("QWENFT_INJECT_FAULT");
    int r = -1;
    long long st = -1;
    char kind[16] = {0};
    return f && sscanf(f, "%d:%lld:%15s", &r, &st, kind) == 3 && r == rank && st == step && !strcmp(kind, "h5write");
}

void qf_ckpt_path(const char *dir, int64_t step, char *out, size_t cap) {
    snprintf(out, cap, "%s/step-%08lld.h5", dir, (long long)step);
}

int qf_ckpt_save(const char *dir, qf_zero *z, const qf_train_state *sc, const char *deck_text, int keep,
                 const qf_hf_files *carry, qf_err *e) {
    qf_comm *c = z->comm;
    qf_train_state s = *sc;
    char final[QF_PATH_MAX + 64], tmp[QF_PATH_MAX + 100];
    qf_ckpt_path(dir, s.step, final, sizeof final);
    /* a temporary name of this run's own, FINAL.tmp-PID-RANDOM as every output's (kernels/base/out_file.h): rank
     * 0 makes it and every rank opens the same name; never another run's file, even one whose pid this run has
     * again in a fresh container or on another node of a shared file system */
    int bad = 0;
    if (c->rank == 0 && qf_out_tmpname(final, tmp, sizeof tmp) != 0) bad = 1;
    qf_comm_bcast(c, tmp, sizeof tmp, 0);
    if (qf_comm_any(c, bad)) return qf_err_set(e, QF_EXIT_INPUT, "checkpoint: the path %s is too long", final);
    if (c->rank == 0 && qf_mkdirs(dir) != 0) bad = 1;
    if (qf_comm_any(c, bad)) return qf_err_set(e, QF_EXIT_RUNTIME, "checkpoint: cannot create directory %s", dir);
    int slot = c->rank == 0 ? qf_tmp_track(tmp) : -1; /* removed on every exit path (kernels/base/out_file.h) */
    qf_h5 *f = NULL;
    if (qf_h5_create(tmp, c->world, &f, e) == 0) {
        if (fault_h5write(c->rank, s.step)) qf_h5_fail_writes(f);
        qf_h5_attr_write_str(f, "/", "format", "qwen-ft-checkpoint", e);
        qf_h5_attr_write_i64(f, "/", "format_version", 1, e);
        if (!e->code) qf_h5_write_config(f, &z->m->cfg, e);
        if (!e->code) write_tensors(f, z, e);
        if (!e->code) write_state(f, z, &s, deck_text, e);
        if (!e->code) qf_hf_files_write(f, carry, e);
        qf_err ce = {0};
        qf_h5_close(f, &ce);
        if (!e->code && ce.code) *e = ce;
    }
    int failed = qf_comm_any(c, e->code != 0);
    if (failed) {
        if (c->rank == 0) unlink(tmp);
        qf_tmp_untrack(slot);
        return e->code ? e->code : qf_err_set(e, QF_EXIT_RUNTIME, "checkpoint %s failed on another rank", final);
    }
    if (c->rank == 0) {
        char lt[QF_PATH_MAX + 64], lf[QF_PATH_MAX + 32];
        snprintf(lf, sizeof lf, "%s/latest", dir);
        if (qf_out_tmpname(lf, lt, sizeof lt) != 0) snprintf(lt, sizeof lt, "%s.tmp-%ld", lf, (long)getpid());
        FILE *fp = NULL;
        qf_err pe = {0};
        bad = qf_out_publish(tmp, final, &pe) != 0; /* fsync, rename, fsync the directory */
        if (!bad && (fp = fopen(lt, "w")) != NULL) {
            const char *base = strrchr(final, '/') + 1;
            bad = fprintf(fp, "%s\n", base) < 0;
            bad |= fclose(fp) != 0;
            bad |= rename(lt, lf) != 0;
        } else {
            bad = 1;
        }
        if (!bad) prune(dir, keep);
    }
    qf_tmp_untrack(slot);
    if (qf_comm_any(c, bad)) return qf_err_set(e, QF_EXIT_RUNTIME, "checkpoint: cannot publish %s", final);
    return 0;
}

int qf_ckpt_find_latest(const char *dir, char *path, size_t cap, qf_err *e) {
    char lf[QF_PATH_MAX + 32];
    snprintf(lf, sizeof lf, "%s/latest", dir);
    FILE *fp = fopen(lf, "r");
    if (!fp) return 0;
    char name[512] = {0};
    int ok = fgets(name, sizeof name, fp) != NULL;
    fclose(fp);
    name[strcspn(name, "\r\n")] = 0;
    if (!ok || !name[0]) return qf_err_set(e, QF_EXIT_INPUT, "%s: empty checkpoint pointer", lf), -1;
    snprintf(path, cap, "%s/%s", dir, name);
    if (!qf_exists(path)) return qf_err_set(e, QF_EXIT_INPUT, "%s names %s, which does not exist", lf, path), -1;
    return 1;
}

/* The /state a run resumes from is input like any other: every counter within [lo, 2^40] (QF_CKPT_MAX_COUNT; a
 * million steps a day for three thousand years), the scheduler, Adam and skip counts not past the step. */
#define QF_CKPT_MAX_COUNT ((int64_t)1 << 40)
static int state_check(const char *path, const qf_train_state *s, const qf_zero *z, qf_err *e) {
    for (size_t i = 0; i < sizeof STATE_I64 / sizeof STATE_I64[0]; i++) {
        int64_t v = *state_i64((qf_train_state *)s, (qf_zero *)z, (int)i);
        int64_t lo = !strcmp(STATE_I64[i], "ls_last_overflow") ? -1 : 0;
        if (v < lo || v > QF_CKPT_MAX_COUNT)
            return qf_err_set(e, QF_EXIT_INPUT, "%s: /state attribute %s = %lld is outside [%lld, 2^40]", path,
                              STATE_I64[i], (long long)v, (long long)lo);
    }
    const char *after = s->sched_step > s->step ? "sched_step" : s->skipped > s->step ? "skipped"
                        : z->adam_t > s->step ? "adam_t" : NULL;
    if (after)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: /state attribute %s is larger than step = %lld", path, after,
                          (long long)s->step);
    if (!(s->loss_scale > 0) || !isfinite(s->loss_scale))
        return qf_err_set(e, QF_EXIT_INPUT, "%s: /state attribute loss_scale = %g must be positive and finite", path,
                          s->loss_scale);
    if (isnan(s->best_valid) || s->best_valid < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: /state attribute best_valid = %g is not a loss", path, s->best_valid);
    return 0;
}

int qf_ckpt_load(const char *path, qf_zero *z, qf_train_state *s, qf_err *e) {
    qf_model *m = z->m;
    qf_h5 *f = NULL;
    if (qf_h5_open(path, z->comm->world, 0, &f, e)) return e->code;
    int have_opt = qf_h5_has(f, "master", NULL);
    /* the checkpoint must hold this model: its config and every tensor's shape (not only the element count) */
    qf_model_config cc;
    char why[256];
    if (qf_h5_read_config(f, &cc, e) == 0 && qf_model_config_diff(&m->cfg, &cc, why, sizeof why) != 0)
        qf_err_set(e, QF_EXIT_INPUT, "%s: the checkpoint was written for another model: %s (here = the deck's model, "
                   "there = the checkpoint; resume with the deck it was trained with, or another checkpoint.dir)",
                   path, why);
    const char *allg[] = {"master", "adam_m", "adam_v", "params"};
    for (int g = have_opt ? 0 : 3; g < 4 && !e->code; g++)
        for (int i = 0; i < m->nspecs && !e->code; i++)
            qf_h5_check_shape(f, allg[g], m->specs[i].name, m->specs[i].ndim, m->specs[i].shape, e);
    /* parameters (from the fp32 master copy when there is one) for the range this rank holds, in pieces */
    int64_t b, en;
    qf_zero_load_range(z, &b, &en);
    int64_t piece = en - b < QF_ZERO_IO_CHUNK ? en - b : QF_ZERO_IO_CHUNK;
    float *host = qf_malloc((size_t)piece * 4 + 4);
    const char *pgroup = have_opt ? "master" : "params";
    for (int64_t cb = b; cb < en && !e->code; cb += QF_ZERO_IO_CHUNK) {
        int64_t ce = en < cb + QF_ZERO_IO_CHUNK ? en : cb + QF_ZERO_IO_CHUNK;
        for (int i = 0; i < m->nspecs && !e->code; i++) {
            int64_t pb = m->offset[i], pe = pb + m->specs[i].numel;
            int64_t lo = pb > cb ? pb : cb, hi = pe < ce ? pe : ce;
            if (hi > lo) qf_h5_read_f32(f, pgroup, m->specs[i].name, lo - pb, hi - lo, host + (lo - cb), e);
        }
        if (!e->code) qf_zero_set_params(z, cb, ce, host);
    }
    free(host);
    int bad = qf_comm_any(z->comm, e->code != 0);
    if (!bad) qf_zero_params_commit(z);
    /* Adam moments of this rank's optimizer range, piece by piece */
    int64_t ob = z->opt_begin, oe = z->opt_end;
    float *buf = qf_malloc((size_t)(oe - ob < QF_ZERO_IO_CHUNK ? oe - ob : QF_ZERO_IO_CHUNK) * 4 + 4);
    const char *groups[] = {"adam_m", "adam_v"};
    for (int g = 0; g < 2 && have_opt && !bad && !e->code; g++)
        for (int i = 0; i < m->nspecs && !e->code; i++) {
            int64_t pb = m->offset[i], pe = pb + m->specs[i].numel;
            int64_t lo0 = pb > ob ? pb : ob, hi0 = pe < oe ? pe : oe;
            for (int64_t lo = lo0; lo < hi0 && !e->code; lo += QF_ZERO_IO_CHUNK) {
                int64_t hi = hi0 < lo + QF_ZERO_IO_CHUNK ? hi0 : lo + QF_ZERO_IO_CHUNK;
                if (qf_h5_read_f32(f, groups[g], m->specs[i].name, lo - pb, hi - lo, buf, e) == 0)
                    qf_zero_opt_set(z, g + 1, lo, hi - lo, buf);
            }
        }
    free(buf);
    for (size_t i = 0; i < sizeof STATE_I64 / sizeof STATE_I64[0] && !e->code; i++)
        qf_h5_attr_read_i64(f, "state", STATE_I64[i], state_i64(s, z, (int)i), e);
    if (!e->code) qf_h5_attr_read_f64(f, "state", "loss_scale", &s->loss_scale, e);
    if (!e->code) qf_h5_attr_read_f64(f, "state", "best_valid", &s->best_valid, e);
    if (!e->code) qf_h5_attr_read_blob(f, "state", "rng", s->rng, sizeof s->rng, e);
    if (!e->code) state_check(path, s, z, e);
    qf_err ce = {0};
    qf_h5_close(f, &ce);
    if (bad && !e->code) qf_err_set(e, QF_EXIT_INPUT, "%s: reading the checkpoint failed on another rank", path);
    return e->code;
}
