/* ckpt_lock.h — one run per checkpoint.dir (docs/reliability.md). Rank 0 holds an fcntl write lock on
 * checkpoint.dir/lock for the whole run; the file names the holder ("host pid start-time"), so a second run on
 * the same directory stops at once (exit 2) saying who holds it. The lock dies with its process (kill -9
 * included): a lock file left behind by a dead run does not block the next one. */
#ifndef QF_CKPT_LOCK_H
#define QF_CKPT_LOCK_H
#include "out_file.h"
#include "parallel/comm.h"
#include "util.h"

typedef struct qf_ckpt_lock {
    int fd;          /* rank 0: the locked file; -1 elsewhere or when not held */
    qf_lock lk;      /* rank 0: the lock (kernels/base/out_file.h) */
    int made_dir;    /* rank 0 created checkpoint.dir for it (removed again if the run leaves it empty) */
    char dir[1100];
} qf_ckpt_lock;

/* Collective: rank 0 creates dir when missing and takes the lock; every rank returns the same code (0, or exit 2
 * "in use by host H pid P", or exit 3 when the directory cannot be made). */
int qf_ckpt_lock_take(qf_ckpt_lock *l, const char *dir, qf_comm *c, qf_err *e);
/* Releases the lock (rank 0); removes the lock file and the directory only when the run created the directory
 * and nothing else was written to it. */
void qf_ckpt_lock_release(qf_ckpt_lock *l);

#endif
