/* ckpt_best.c — the best checkpoint (checkpoint.keep_best) and picking a checkpoint by step: `best` is a pointer file
 * beside `latest` (one line, the file name), written to best.tmp-PID-RANDOM and renamed; qf_ckpt_prune never removes the
 * file it names. qf_ckpt_resolve serves `train --resume-from` and `export --step`. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "checkpoint.h"
#include "out_file.h"
#include "parallel/comm.h"

int qf_ckpt_mark_best(const char *dir, int64_t step, int keep, qf_comm *c, qf_err *e) {
    int bad = 0;
    if (c->rank == 0) {
        char tmp[QF_PATH_MAX + 64], fin[QF_PATH_MAX + 32], file[QF_PATH_MAX + 64];
        qf_ckpt_path(dir, step, file, sizeof file);
        snprintf(fin, sizeof fin, "%s/best", dir);
        if (qf_out_tmpname(fin, tmp, sizeof tmp) != 0) snprintf(tmp, sizeof tmp, "%s.tmp-%ld", fin, (long)getpid());
        FILE *fp = qf_exists(file) ? fopen(tmp, "w") : NULL;
        bad = !fp || fprintf(fp, "%s\n", strrchr(file, '/') + 1) < 0;
        if (fp) bad |= fclose(fp) != 0;
        bad = bad || rename(tmp, fin) != 0;
        if (bad) unlink(tmp);
        else qf_ckpt_prune(dir, keep);
    }
    if (qf_comm_any(c, bad)) return qf_err_set(e, QF_EXIT_RUNTIME, "checkpoint: cannot name step %lld as %s/best",
                                               (long long)step, dir);
    return 0;
}

/* "step-00000004.h5, step-00000008.h5 (best)" into buf: what dir holds, for a message */
static void ckpt_list(const char *dir, char *buf, size_t n) {
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t len = 0;
    buf[0] = 0;
    while (d && (de = readdir(d)) && len + 40 < n) {
        long long st;
        char tail[8];
        if (sscanf(de->d_name, "step-%lld.h%2s", &st, tail) == 2 && !strcmp(tail, "5") && !strstr(de->d_name, ".tmp")) {
            snprintf(buf + len, n - len, "%s%s", len ? ", " : "", de->d_name);
            len = strlen(buf);
        }
    }
    if (d) closedir(d);
    if (!buf[0]) snprintf(buf, n, "none");
}

static int ckpt_pointer(const char *dir, const char *name, char *path, size_t cap, qf_err *e) {
    char pf[QF_PATH_MAX + 32], file[512] = "", list[1024];
    snprintf(pf, sizeof pf, "%s/%s", dir, name);
    FILE *fp = fopen(pf, "r");
    if (fp && !fgets(file, sizeof file, fp)) file[0] = 0;
    if (fp) fclose(fp);
    file[strcspn(file, "\r\n")] = 0;
    if (!file[0]) {
        ckpt_list(dir, list, sizeof list);
        return qf_err_set(e, QF_EXIT_INPUT, "%s: no %s checkpoint%s (checkpoints there: %s)", dir, name,
                          !strcmp(name, "best") ? " (checkpoint.keep_best = true names one at each better evaluation)"
                                                : "", list);
    }
    snprintf(path, cap, "%s/%s", dir, file);
    if (!qf_exists(path)) return qf_err_set(e, QF_EXIT_INPUT, "%s names %s, which does not exist", pf, path);
    return 0;
}

int qf_ckpt_resolve(const char *dir, const char *spec, char *path, size_t cap, qf_err *e) {
    char list[1024], *end;
    if (!strcmp(spec, "best") || !strcmp(spec, "latest")) return ckpt_pointer(dir, spec, path, cap, e);
    const char *num = !strncmp(spec, "step-", 5) ? spec + 5 : spec;
    long long step = strtoll(num, &end, 10);
    if (end == num || (*end && strcmp(end, ".h5")) || step < 0)
        return qf_err_set(e, QF_EXIT_INPUT, "'%s': expected best, latest, step-N or N", spec);
    qf_ckpt_path(dir, step, path, cap);
    if (qf_exists(path)) return 0;
    ckpt_list(dir, list, sizeof list);
    return qf_err_set(e, QF_EXIT_INPUT, "%s: no checkpoint of step %lld (%s does not exist; checkpoints there: %s)", dir,
                      step, path, list);
}
