/* signals.h — stopping cleanly on SIGUSR1 / SIGTERM / SIGINT and before a wall-time limit (docs/hpc.md).
 *
 * A handler only records which signal arrived, in a flag inside the qf_signals the caller owns. At each step
 * boundary every rank calls qf_signals_stop_requested(), which agrees on a stop across ranks with one
 * MPI_Allreduce(MAX): a signal that reached any rank, or the `max_hours` limit drawing near on any rank. The
 * trainer then writes a checkpoint and exits 0, so that a requeued or resubmitted job resumes from it. */
#ifndef QF_SIGNALS_H
#define QF_SIGNALS_H
#include <signal.h>
#include "parallel/comm.h"

/* reasons returned by qf_signals_stop_requested */
enum { QF_STOP_NONE = 0, QF_STOP_SIGNAL = 1, QF_STOP_MAX_HOURS = 2 };

typedef struct qf_signals {
    volatile sig_atomic_t flag;   /* written by the handler: the number of the last signal caught, 0 = none */
    int installed;
    int signo;                    /* after a QF_STOP_SIGNAL: the signal the ranks agreed on (highest number) */
    double t_start;               /* qf_now() at install: the wall-time origin of max_hours */
    struct sigaction old_usr1, old_term, old_int;
} qf_signals;

/* Installs the handlers for SIGUSR1, SIGTERM and SIGINT (SA_RESTART) and starts the max_hours clock. One qf_signals
 * may be installed at a time; it must stay alive until qf_signals_restore. A second SIGINT while a stop is
 * pending ends the process as SIGINT does by default (so that Ctrl-C twice still works). */
void qf_signals_install(qf_signals *s);
/* Puts back the previous dispositions. */
void qf_signals_restore(qf_signals *s);

/* Blocks SIGUSR1, SIGTERM and SIGINT in the calling thread and the threads it creates afterwards (main() calls it
 * before MPI_Init for `train`): a stop signal that arrives while MPI starts then waits, pending, instead of killing
 * the rank; qf_signals_install unblocks them once its handlers are in place, and the pending signal is handled. */
void qf_signals_hold(void);

/* Collective over c->world, at a step boundary (every rank, same call sequence). Returns QF_STOP_SIGNAL when a
 * signal reached any rank (s->signo says which), else QF_STOP_MAX_HOURS when max_hours > 0 and
 *     elapsed_hours + 2 x est_step_hours + est_ckpt_hours > max_hours
 * on any rank (two more steps would not leave time for the final checkpoint), else QF_STOP_NONE. Every rank
 * gets the same answer. */
int qf_signals_stop_requested(qf_signals *s, qf_comm *c, double elapsed_hours, double max_hours,
                              double est_step_hours, double est_ckpt_hours);

/* Hours since qf_signals_install. */
double qf_signals_elapsed_hours(const qf_signals *s);

/* A first guess of a checkpoint's write time (hours) before one has been timed: bytes at 500 MB/s. */
double qf_signals_ckpt_estimate_hours(double bytes);

/* One line (no newline) saying why the run stops, e.g. "SIGUSR1 received" or "max_hours = 2 reached (...)". */
void qf_signals_describe(const qf_signals *s, int reason, double max_hours, char *buf, size_t cap);

#endif
