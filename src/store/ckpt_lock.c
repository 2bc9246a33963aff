/* ckpt_lock.c — see ckpt_lock.h. fcntl (POSIX record) locks, not flock: they also work on NFS through lockd and on
 * Lustre/GPFS; they belong to the process, and closing any descriptor of the file drops them, so nothing else in
 * qwen-ft opens the lock file. */
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
    char p[sizeof l->dir + 8];
    snprintf(p, sizeof p, "%s/lock", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot open the lock file: %s", p, strerror(errno));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_SETLK, &fl) != 0) {
        int err = errno;
        char holder[256] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        long pid = fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK ? (long)who.l_pid : -1;
        close(fd);
        if (err == EACCES || err == EAGAIN)
            return qf_err_set(e, QF_EXIT_INPUT, "checkpoint.dir %s is in use by another run (lock file %s: %s%s; "
                              "fcntl lock held by pid %ld): two runs on one directory would publish each other's "
                              "checkpoints; give this run another checkpoint.dir or stop the other one",
                              dir, p, holder[0] ? "" : "holder unknown", holder, pid);
        return qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot lock: %s (a file system without POSIX locks?)", p,
                          strerror(err));
    }
    char host[128] = "?", line[256];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int len = snprintf(line, sizeof line, "host %s pid %ld since %s\n", host, (long)getpid(), ts);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        int err = errno;
        close(fd);
        return qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot write the lock file: %s", p, strerror(err));
    }
    l->fd = fd;
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
    close(l->fd);
    l->fd = -1;
}
