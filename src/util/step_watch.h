/* step_watch.h — the pure part of the training monitor (src/train/monitor.c): the window of the node's host memory
 * over the last QF_WATCH_WINDOW steps, and the two warnings of the seed's guide (GPU utilisation that stays low,
 * host memory that grows step over step), each raised once and raised again only after it has cleared. No clock,
 * no MPI, no I/O: the unit test (tests/unit/test_step_watch.c) drives it with made-up figures. */
#ifndef QF_STEP_WATCH_H
#define QF_STEP_WATCH_H

#define QF_WATCH_WINDOW 100

/* The last QF_WATCH_WINDOW values pushed (oldest overwritten first). */
typedef struct qf_watch_ring {
    double v[QF_WATCH_WINDOW];
    int n;    /* values held, <= QF_WATCH_WINDOW */
    int next; /* where the next value goes */
} qf_watch_ring;

void qf_watch_ring_push(qf_watch_ring *r, double v);
/* value i of those held, 0 = the oldest, n - 1 = the newest */
double qf_watch_ring_at(const qf_watch_ring *r, int i);
/* newest - oldest (0 with fewer than two values) */
double qf_watch_ring_change(const qf_watch_ring *r);
/* 1 when the window is full and the values grow through it: no fall from one value to the next beyond
 * `tolerance`, newest - oldest above `growth`, and the newer half alone above growth / 2 (a jump early in the
 * window followed by a flat line is not growth) */
int qf_watch_ring_growing(const qf_watch_ring *r, double growth, double tolerance);

/* What the warnings look for. */
typedef struct qf_watch_params {
    int skip_steps;        /* the first steps of a run are not judged (5) */
    int low_steps;         /* utilisation under util_min for this many consecutive judged steps warns (20) */
    double util_min;       /* 0.90 */
    double mem_growth;     /* bytes over the window (qf_watch_ring_growing's growth) */
    double mem_tolerance;  /* bytes a step may fall and still count as growth (noise) */
} qf_watch_params;
/* The defaults above, with 256 MiB of growth and 16 MiB of tolerance. */
qf_watch_params qf_watch_defaults(void);

typedef struct qf_watch {
    int steps;        /* steps seen */
    int low_run;      /* consecutive judged steps under util_min */
    int util_warned;  /* the utilisation warning stands (cleared by a step at or above util_min) */
    int mem_warned;   /* the memory warning stands (cleared once the window's change is under mem_growth / 2) */
} qf_watch;

enum {
    QF_WATCH_UTIL_LOW = 1,  /* print the utilisation warning */
    QF_WATCH_UTIL_OK = 2,   /* it has cleared */
    QF_WATCH_MEM_GROWS = 4, /* print the host memory warning */
    QF_WATCH_MEM_FLAT = 8,  /* it has cleared */
};
/* One step: util_mean is the node's mean GPU utilisation as a fraction (< 0: unknown, e.g. CPU ranks: never
 * judged), mem the ring of the node's used host memory with this step's value already pushed. Returns the
 * QF_WATCH_* events to report (0: nothing new). */
unsigned qf_watch_step(qf_watch *w, const qf_watch_params *p, double util_mean, const qf_watch_ring *mem);

#endif
