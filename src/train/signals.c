/* signals.c — see signals.h. */
#include "signals.h"
#include <stdio.h>
#include <string.h>
#include "util.h"

/* The one piece of global state in qwen-ft, and why: a POSIX signal handler receives only the signal number, so
 * the only way for it to reach the flag of the qf_signals the caller installed is a static pointer. It is written
 * only by qf_signals_install (before the handlers exist) and qf_signals_restore (after they are gone); the
 * handler only reads it and stores into a volatile sig_atomic_t, which is async-signal-safe. */
static volatile sig_atomic_t *qf_signal_flag;

static void on_signal(int sig) {
    volatile sig_atomic_t *f = qf_signal_flag;
    if (!f) return;
    if (sig == SIGINT && *f != 0) {
        /* a second Ctrl-C: stop now, as SIGINT does by default (signal and raise are async-signal-safe) */
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return;
    }
    *f = sig;
}

void qf_signals_install(qf_signals *s) {
    memset(s, 0, sizeof *s);
    QF_CHECK(qf_signal_flag == NULL); /* one installed qf_signals at a time */
    s->t_start = qf_now();
    qf_signal_flag = &s->flag;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* MPI, HDF5 and stdio calls that a signal interrupts resume instead of failing */
    sigaction(SIGUSR1, &sa, &s->old_usr1);
    sigaction(SIGTERM, &sa, &s->old_term);
    sigaction(SIGINT, &sa, &s->old_int);
    s->installed = 1;
    sigset_t set; /* a signal held since before MPI_Init (qf_signals_hold) reaches the handler now */
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

void qf_signals_hold(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

void qf_signals_restore(qf_signals *s) {
    if (!s->installed) return;
    sigaction(SIGUSR1, &s->old_usr1, NULL);
    sigaction(SIGTERM, &s->old_term, NULL);
    sigaction(SIGINT, &s->old_int, NULL);
    qf_signal_flag = NULL;
    s->installed = 0;
}

double qf_signals_elapsed_hours(const qf_signals *s) { return (qf_now() - s->t_start) / 3600.0; }

double qf_signals_ckpt_estimate_hours(double bytes) { return bytes / 500e6 / 3600.0; }

int qf_signals_stop_requested(qf_signals *s, qf_comm *c, double elapsed_hours, double max_hours,
                              double est_step_hours, double est_ckpt_hours) {
    int v[2];
    v[0] = (int)s->flag;
    v[1] = max_hours > 0 && elapsed_hours + 2.0 * est_step_hours + est_ckpt_hours > max_hours;
    if (c->world_size > 1) MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MAX, c->world);
    if (v[0]) {
        s->signo = v[0];
        return QF_STOP_SIGNAL;
    }
    return v[1] ? QF_STOP_MAX_HOURS : QF_STOP_NONE;
}

static const char *sig_name(int sig) {
    switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
    }
}

void qf_signals_describe(const qf_signals *s, int reason, double max_hours, char *buf, size_t cap) {
    if (reason == QF_STOP_SIGNAL)
        snprintf(buf, cap, "%s received", sig_name(s->signo));
    else if (reason == QF_STOP_MAX_HOURS)
        snprintf(buf, cap, "max_hours = %g reached (%.3f h elapsed; two more steps and a checkpoint would not fit)",
                 max_hours, qf_signals_elapsed_hours(s));
    else
        snprintf(buf, cap, "no stop requested");
}
