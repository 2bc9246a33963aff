/* paged_ahead.h — decoding one call ahead (serve's engine): the greedy picks of a paged call's head rows stay on the
 * backend, where the next call takes them as its first tokens before the host has read them, and reach the host
 * through pinned memory while that next call runs. The host queues call k + 1 while the GPU still runs call k, so
 * the GPU does not wait between steps for the host's round trip (read the picks, update the jobs, copy the next
 * call's inputs up, launch).
 *
 * Two slots: call k's picks live in slot k % 2 until the host has read them (qf_paged_picks_read), by which time
 * call k + 1 (slot (k + 1) % 2) is queued: queue call k + 2 only after reading call k. Everything is ordered on the
 * backend's compute stream, so a call's picks are written before the next call's copy reads them, whatever the
 * host does in between. On the CPU table every step runs at once and the same code path gives the same tokens as
 * reading each call's picks before the next (serve's greedy replies equal generate's). */
#ifndef QF_PAGED_AHEAD_H
#define QF_PAGED_AHEAD_H
#include "model.h"

typedef struct qf_paged_picks {
    const qf_ops *ops;
    int cap;              /* rows per slot (the head's max_seqs) */
    int32_t *dev[2];      /* [2 cap] backend: a call's picks [n], then (lp) their log-softmax [n] as fp32 */
    int32_t *host[2];     /* [2 cap] host (page-locked on a GPU): their copy */
    int ticket[2];        /* the copy in flight (ops.h copy_start), -1: none */
    int n[2], lp[2];      /* its rows, and whether the log-softmax came too */
    int pinned;           /* the host buffers are page-locked (so the copies are asynchronous) */
} qf_paged_picks;

/* Backend and host buffers for cap rows a slot; 0 or an exit code (e: out of memory). */
int qf_paged_picks_init(qf_paged_picks *p, const qf_ops *ops, int cap, qf_err *e);
/* Frees them (a copy still in flight is waited for first). */
void qf_paged_picks_free(qf_paged_picks *p);
/* Queues the greedy picks of the last paged call's head rows [n] (qf_model_paged_run with nrows >= n) into slot s,
 * with their log-softmax when lp != 0, and their copy to the host. Slot s must have been read since its last start. */
void qf_paged_picks_start(qf_paged_picks *p, qf_model *m, int s, int n, int lp);
/* Queues: the current paged call's tokens [0, n) = slot s's picks (after qf_model_paged_inputs, before
 * qf_model_paged_run; n <= the rows slot s was started with). */
void qf_paged_picks_feed(qf_paged_picks *p, qf_model *m, int s, int n);
/* Waits for slot s's copy: ids[n] and (lp: NULL when not wanted; slot started with lp != 0) lp[n] on the host. */
void qf_paged_picks_read(qf_paged_picks *p, int s, int32_t *ids, float *lp);
/* 1 while slot s was started and not read yet */
static inline int qf_paged_picks_busy(const qf_paged_picks *p, int s) { return p->ticket[s] >= 0; }

#endif
