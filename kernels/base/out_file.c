/* out_file.c — see out_file.h. fcntl (POSIX record) locks as src/store/ckpt_lock.c has always used: they work on
 * NFS through lockd and on Lustre/GPFS, and die with their process (kill -9 included). */
#include "out_file.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- kinds of files -------------------------------------------------------------------------------------------- */

static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

int qf_out_check(const char *what, const char *path, int dir_ok, const char *const *inputs, int n, qf_err *e) {
    struct stat so;
    if (stat(path, &so) != 0) {
        struct stat sl; /* a dangling symlink: the rename would replace the link, not write where it points */
        if (lstat(path, &sl) == 0 && S_ISLNK(sl.st_mode))
            return qf_err_set(e, QF_EXIT_INPUT, "%s %s: a symbolic link to a missing file; give the path itself", what,
                              path);
        return 0; /* a new file */
    }
    if (!S_ISREG(so.st_mode) && !(dir_ok && S_ISDIR(so.st_mode)))
        return qf_err_set(e, QF_EXIT_INPUT, "%s %s: exists and is %s, not a regular file: it would be replaced; give "
                          "a file path", what, path, file_kind(so.st_mode));
    for (int i = 0; i < n; i++) {
        struct stat si;
        if (!inputs[i] || stat(inputs[i], &si) != 0) continue;
        if (si.st_dev == so.st_dev && si.st_ino == so.st_ino)
            return qf_err_set(e, QF_EXIT_INPUT, "%s %s is the same file as the input %s: writing it would destroy the "
                              "input; give another output path", what, path, inputs[i]);
    }
    return 0;
}

int qf_out_tmpname(const char *path, char *buf, size_t cap) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r = (uint32_t)ts.tv_nsec ^ ((uint32_t)ts.tv_sec << 7) ^ (uint32_t)(uintptr_t)buf;
    }
    int k = snprintf(buf, cap, "%s.tmp-%ld-%08x", path, (long)getpid(), (unsigned)r);
    return k < 0 || (size_t)k >= cap ? -1 : 0;
}

/* ---- temporaries removed on every exit path -------------------------------------------------------------------- */

#define TMP_SLOTS 32
static char tmp_paths[TMP_SLOTS][QF_OUT_PATH_MAX + 32];
static volatile sig_atomic_t tmp_used[TMP_SLOTS]; /* 1: a file, 2: a directory of plain files */
static int tmp_installed;

/* A directory's entries, then the directory, with system calls only (open, getdents64, unlinkat, rmdir: all
 * async-signal-safe, unlike opendir's allocation), as a signal handler may call it. */
static void tmp_remove_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        char buf[4096] __attribute__((aligned(8)));
        for (int pass = 0; pass < 64; pass++) { /* unlinking while listing: list again until nothing is left */
            long n, removed = 0;
            while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
                for (long off = 0; off < n;) {
                    struct tmp_dirent {
                        uint64_t ino;
                        int64_t off;
                        unsigned short reclen;
                        unsigned char type;
                        char name[];
                    } *d = (struct tmp_dirent *)(buf + off);
                    if (!(d->name[0] == '.' && (!d->name[1] || (d->name[1] == '.' && !d->name[2]))))
                        removed += unlinkat(fd, d->name, 0) == 0;
                    off += d->reclen;
                }
            if (!removed || lseek(fd, 0, SEEK_SET) != 0) break;
        }
        close(fd);
    }
    rmdir(path);
}

void qf_tmp_remove_all(void) {
    for (int i = 0; i < TMP_SLOTS; i++)
        if (tmp_used[i]) {
            if (tmp_used[i] == 2) tmp_remove_dir(tmp_paths[i]);
            else unlink(tmp_paths[i]);
            tmp_used[i] = 0;
        }
}

static void tmp_on_signal(int sig) {
    qf_tmp_remove_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void tmp_at_exit(void) { qf_tmp_remove_all(); }

/* Signals that kill by default get a handler that removes the temporaries first; a handler someone else installed
 * (train's clean stop, src/train/signals.c) is left alone. */
static void tmp_install(void) {
    tmp_installed = 1;
    atexit(tmp_at_exit);
    qf_fatal_set_cleanup(qf_tmp_remove_all);
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = tmp_on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

static int tmp_track(const char *path, int kind) {
    if (!tmp_installed) tmp_install();
    if (strlen(path) >= sizeof tmp_paths[0]) return -1;
    for (int i = 0; i < TMP_SLOTS; i++)
        if (!tmp_used[i]) {
            memcpy(tmp_paths[i], path, strlen(path) + 1);
            tmp_used[i] = kind; /* last: a handler sees the slot only once its path is complete */
            return i;
        }
    return -1;
}

int qf_tmp_track(const char *path) { return tmp_track(path, 1); }
int qf_tmp_track_dir(const char *path) { return tmp_track(path, 2); }

void qf_tmp_untrack(int slot) {
    if (slot >= 0 && slot < TMP_SLOTS) tmp_used[slot] = 0;
}

/* ---- publication ----------------------------------------------------------------------------------------------- */

static void dir_of(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

static int fsync_path(const char *p, int dir) {
    int fd = open(p, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    if (rc != 0 && (errno == EINVAL || errno == EROFS)) rc = 0; /* a file system without fsync for it */
    close(fd);
    return rc;
}

int qf_out_publish(const char *tmp, const char *path, qf_err *e) {
    struct stat st;
    int is_dir = stat(tmp, &st) == 0 && S_ISDIR(st.st_mode);
    if (!is_dir && fsync_path(tmp, 0) != 0)
        return qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot flush %s to disk: %s (disk full or quota?)", path, tmp,
                          strerror(errno));
    if (rename(tmp, path) != 0)
        return qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
    char dir[QF_OUT_PATH_MAX];
    dir_of(path, dir, sizeof dir);
    (void)fsync_path(dir, 1); /* best effort: the data is in place; only its name's durability is at stake */
    return 0;
}

/* ---- advisory locks -------------------------------------------------------------------------------------------- */

int qf_lock_try(qf_lock *l, const char *lockfile, int remove, char *holder, size_t cap, qf_err *e) {
    memset(l, 0, sizeof *l);
    l->fd = -1;
    l->slot = -1;
    l->remove = remove;
    if (holder && cap) holder[0] = 0;
    if (strlen(lockfile) >= sizeof l->path)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: path too long for a lock file", lockfile);
    memcpy(l->path, lockfile, strlen(lockfile) + 1);
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd = open(lockfile, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) return qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot open the lock file: %s", lockfile, strerror(errno));
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        if (fcntl(fd, F_SETLK, &fl) != 0) {
            int err = errno;
            if (err != EACCES && err != EAGAIN) {
                close(fd);
                return qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot lock: %s (a file system without POSIX locks?)",
                                  lockfile, strerror(err));
            }
            char who[256] = "";
            /* the holder writes its line just after it locks: give it a moment to be readable */
            for (int tries = 0; tries < 20 && !who[0]; tries++) {
                ssize_t n = pread(fd, who, sizeof who - 1, 0);
                who[n > 0 ? n : 0] = 0;
                if (!who[0] || !strchr(who, '\n')) {
                    who[0] = 0;
                    struct timespec ts = {0, 5 * 1000 * 1000};
                    nanosleep(&ts, NULL);
                }
            }
            who[strcspn(who, "\n")] = 0;
            struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
            long pid = fcntl(fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK ? (long)q.l_pid : -1;
            close(fd);
            if (holder) snprintf(holder, cap, "%s; fcntl lock held by pid %ld", who[0] ? who : "holder unknown", pid);
            return 1;
        }
        /* the holder before us may have removed the file after we opened it: then our lock is on a dead inode */
        struct stat a, b;
        if (remove && (fstat(fd, &a) != 0 || stat(lockfile, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)) {
            close(fd);
            continue;
        }
        char host[128] = "?", line[320], ts[32];
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
        int len = snprintf(line, sizeof line, "host %s pid %ld since %s\n", host, (long)getpid(), ts);
        if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
            int err = errno;
            close(fd);
            return qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot write the lock file: %s", lockfile, strerror(err));
        }
        l->fd = fd;
        /* a lock file that goes with its release goes on a signal or a fatal error too (the holder dies then) */
        l->slot = remove ? qf_tmp_track(l->path) : -1;
        return 0;
    }
    return qf_err_set(e, QF_EXIT_RUNTIME, "%s: the lock file keeps being replaced", lockfile);
}

void qf_lock_release(qf_lock *l) {
    if (l->fd < 0) return;
    if (l->remove) unlink(l->path); /* while still holding it: see the re-check in qf_lock_try */
    if (l->remove) qf_tmp_untrack(l->slot);
    close(l->fd);
    l->fd = -1;
}

/* ---- the whole rule -------------------------------------------------------------------------------------------- */

int qf_out_begin(qf_out *o, const char *what, const char *path, const char *const *inputs, int n, qf_err *e) {
    memset(o, 0, sizeof *o);
    o->lock.fd = -1;
    o->slot = -1;
    if (strlen(path) >= sizeof o->path) return qf_err_set(e, QF_EXIT_INPUT, "%s %s: path too long", what, path);
    memcpy(o->path, path, strlen(path) + 1);
    if (qf_out_check(what, path, 0, inputs, n, e)) return e->code;
    char lockfile[QF_OUT_PATH_MAX + 8], holder[400];
    snprintf(lockfile, sizeof lockfile, "%s.lock", path);
    int busy = qf_lock_try(&o->lock, lockfile, 1, holder, sizeof holder, e);
    if (busy != 0 && busy != 1) return busy;
    if (busy == 1)
        return qf_err_set(e, QF_EXIT_INPUT, "%s %s is being written by another process (lock file %s: %s): two "
                          "writers of one output would publish a mix; wait for it or give another path", what, path,
                          lockfile, holder);
    if (qf_out_tmpname(path, o->tmp, sizeof o->tmp) != 0) {
        qf_lock_release(&o->lock);
        return qf_err_set(e, QF_EXIT_INPUT, "%s %s: path too long", what, path);
    }
    o->slot = qf_tmp_track(o->tmp);
    return 0;
}

int qf_out_commit(qf_out *o, qf_err *e) {
    int rc = qf_out_publish(o->tmp, o->path, e);
    if (rc) unlink(o->tmp);
    qf_tmp_untrack(o->slot);
    o->slot = -1;
    o->tmp[0] = 0;
    qf_lock_release(&o->lock);
    return rc;
}

void qf_out_abort(qf_out *o) {
    if (o->tmp[0]) unlink(o->tmp);
    o->tmp[0] = 0;
    qf_tmp_untrack(o->slot);
    o->slot = -1;
    qf_lock_release(&o->lock);
}

/* ---- readers: regular files only ------------------------------------------------------------------------------- */

FILE *qf_in_open(const char *what, const char *path, size_t max, qf_err *e) {
    /* O_NONBLOCK: opening a FIFO with no writer returns at once instead of blocking; cleared once it is a file */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        qf_err_set(e, QF_EXIT_INPUT, "%s: cannot open the %s: %s", path, what, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        qf_err_set(e, QF_EXIT_INPUT, "%s: the %s is %s, not a regular file", path, what, file_kind(st.st_mode));
        close(fd);
        return NULL;
    }
    if (max && (uint64_t)st.st_size > (uint64_t)max) {
        qf_err_set(e, QF_EXIT_INPUT, "%s: the %s is %lld bytes, more than the limit of %zu (docs/reliability.md)", path,
                   what, (long long)st.st_size, max);
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        qf_err_set(e, QF_EXIT_RUNTIME, "%s: cannot read the %s: %s", path, what, strerror(errno));
        close(fd);
    }
    return f;
}

char *qf_in_slurp(const char *what, const char *path, size_t max, size_t *len, qf_err *e) {
    FILE *f = qf_in_open(what, path, max, e);
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = qf_malloc(cap + 1);
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (max && n > max) { /* grew while we read it */
            free(buf);
            fclose(f);
            qf_err_set(e, QF_EXIT_INPUT, "%s: the %s is larger than the limit of %zu bytes (docs/reliability.md)", path,
                       what, max);
            return NULL;
        }
        if (n == cap) buf = qf_realloc(buf, (cap *= 2) + 1);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        qf_err_set(e, QF_EXIT_INPUT, "%s: read error in the %s", path, what);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int qf_in_regular(const char *what, const char *path, qf_err *e) {
    struct stat st;
    if (stat(path, &st) != 0) return qf_err_set(e, QF_EXIT_INPUT, "%s: cannot read the %s: %s", path, what, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return qf_err_set(e, QF_EXIT_INPUT, "%s: the %s is %s, not a regular file", path, what, file_kind(st.st_mode));
    return 0;
}
