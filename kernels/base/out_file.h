/* out_file.h — the output rule of every command that writes (docs/reliability.md, "Outputs"): an output is
 * published whole or not at all, never over one of the command's inputs, never by two writers at once.
 *
 *   check    an output that exists must be a regular file (a directory where the output is one) and must not be
 *            the same file (device and inode, through symlinks) as any input: exit 2 before anything is read;
 *   lock     an fcntl write lock on PATH.lock, held from the check to the publication: a second writer of the
 *            same output stops at once (exit 2) naming the holder ("host H pid P since T");
 *   write    into PATH.tmp-PID-RANDOM, in the output's folder (so the rename cannot cross file systems), tracked
 *            so that every exit path removes it: normal exit, QF_FATAL, and SIGINT/SIGTERM/SIGHUP where they kill;
 *   publish  fsync, rename over PATH, fsync the folder; only then is the lock released.
 * The tracker is the base layer's second piece of process-wide state (beside the fatal hook): a signal handler and
 * an atexit handler see only globals. It is written by the main thread only. */
#ifndef QF_OUT_FILE_H
#define QF_OUT_FILE_H
#include <stddef.h>
#include "util.h"

#define QF_OUT_PATH_MAX 4096

/* Exit 2 when path exists and is neither a regular file nor (dir_ok) a directory, or when it is the same file as
 * one of inputs[0..n-1] (inputs that do not exist are skipped). what names the output in the message ("--out"). */
int qf_out_check(const char *what, const char *path, int dir_ok, const char *const *inputs, int n, qf_err *e);

/* "PATH.tmp-PID-XXXXXXXX" (8 random hex digits) into buf; -1 when it does not fit. */
int qf_out_tmpname(const char *path, char *buf, size_t cap);

/* Temporaries removed on every exit path. track: the slot (-1 when all 32 are taken: then the caller removes it
 * itself); untrack: the file was published or removed. remove_all is async-signal-safe. */
int qf_tmp_track(const char *path);
/* The same for a temporary directory of plain files (an export's HF_DIR.tmp-PID-RANDOM): its files, then itself. */
int qf_tmp_track_dir(const char *path);
void qf_tmp_untrack(int slot);
void qf_tmp_remove_all(void);

/* fsync tmp, rename it over path, fsync path's folder. 0, or exit 3 with the error set (tmp is left to the caller). */
int qf_out_publish(const char *tmp, const char *path, qf_err *e);

/* An advisory fcntl write lock on a lock file, removed again on release when remove is set (the taker re-checks
 * that the file it locked is still the one at the path, so that removal cannot let two holders in). */
typedef struct qf_lock {
    int fd; /* -1: not held */
    int remove;
    int slot; /* with remove: the lock file's slot in the temporaries' tracker (removed on a signal too) */
    char path[QF_OUT_PATH_MAX + 8];
} qf_lock;
/* 0: held. 1: another process holds it; holder says who ("host H pid P since T; fcntl lock of pid N"). Exit 3 with
 * the error set when the lock file cannot be made or locked (a file system without POSIX locks). */
int qf_lock_try(qf_lock *l, const char *lockfile, int remove, char *holder, size_t cap, qf_err *e);
void qf_lock_release(qf_lock *l);

/* The whole rule for one output file. */
typedef struct qf_out {
    char path[QF_OUT_PATH_MAX], tmp[QF_OUT_PATH_MAX + 32];
    qf_lock lock;
    int slot;
} qf_out;
/* check + lock + temporary name (tracked; not created: the writer creates o->tmp). 0 or exit 2/3 with e set. */
int qf_out_begin(qf_out *o, const char *what, const char *path, const char *const *inputs, int n, qf_err *e);
/* publish o->tmp as o->path and release; on failure the temporary is removed. */
int qf_out_commit(qf_out *o, qf_err *e);
/* removes the temporary (if any) and releases; safe to call twice and after commit. */
void qf_out_abort(qf_out *o);

/* Opens path for reading only when it is a regular file no larger than max bytes (0: no limit): a directory, FIFO
 * or device is refused before anything is read (a FIFO would block, a directory reads as garbage). NULL with exit
 * 2 set naming what and path. */
FILE *qf_in_open(const char *what, const char *path, size_t max, qf_err *e);
/* The whole regular file (NUL-terminated, *len bytes), under the same rules. NULL with e set. */
char *qf_in_slurp(const char *what, const char *path, size_t max, size_t *len, qf_err *e);
/* 0 when path is a regular file (stat follows symlinks); exit 2 naming its kind otherwise, or why stat failed. */
int qf_in_regular(const char *what, const char *path, qf_err *e);

#endif
