/* ckpt_lock.c — see ckpt_lock.h. The lock itself is the base layer's (kernels/base/out_file.h, shared with every
 * output): fcntl (POSIX record) locks, not flock: they also work on NFS through lockd and on Lustre/GPFS; they
 * belong to the process, and closing any descriptor of the file drops them, so nothing else in qwen-ft opens the
 * lock file. */
#include "ckpt_lock.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int lock_rank0(qf_ckpt_lock *l, const char *dir, qf_err *e) {
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (qf_mkdirs(dir) != 0)
            return qf_err_set(e, QF_EXIT_RUNTIME, "checkpoint.dir %s: cannot create it: %s", dir, strerror(errno));
        l->made_dir = 1;
    } else if (!S_ISDIR(sb.st_mode)) {
        return qf_err_set(e, QF_EXIT_INPUT, "checkpoint.dir %s is not a directory", dir);
    }
    char p[sizeof l->dir + 8], holder[400];
    snprintf(p, sizeof p, "%s/lock", dir);
    int busy = qf_lock_try(&l->lk, p, 0, holder, sizeof holder, e); /* kernels/base/out_file.h */
    if (busy == 1)
        return qf_err_set(e, QF_EXIT_INPUT, "checkpoint.dir %s is in use by another run (lock file %s: %s): two runs "
                          "on one directory would publish each other's checkpoints; give this run another "
                          "checkpoint.dir or stop the other one", dir, p, holder);
    if (busy) return busy;
    l->fd = l->lk.fd;
    return 0;
}

int qf_ckpt_lock_take(qf_ckpt_lock *l, const char *dir, qf_comm *c, qf_err *e) {
    memset(l, 0, sizeof *l);
    l->fd = -1;
    snprintf(l->dir, sizeof l->dir, "%s", dir);
    int code = 0;
    if (c->rank == 0) code = lock_rank0(l, dir, e);
    qf_comm_bcast(c, &code, sizeof code, 0);
    if (code && c->rank != 0) qf_err_set(e, code, "checkpoint.dir %s: rank 0 could not lock it", dir);
    return code;
}

void qf_ckpt_lock_release(qf_ckpt_lock *l) {
    if (l->fd < 0) return;
    if (l->made_dir) { /* nothing but the lock in it: leave no trace of a run that wrote nothing */
        char p[sizeof l->dir + 8];
        snprintf(p, sizeof p, "%s/lock", l->dir);
        unlink(p);
        (void)rmdir(l->dir); /* fails, and keeps the directory, when checkpoints are in it */
    }
    qf_lock_release(&l->lk);
    l->fd = -1;
}
