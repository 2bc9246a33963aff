/* step_watch.c — see step_watch.h. */
#include "step_watch.h"

void qf_watch_ring_push(qf_watch_ring *r, double v) {
    r->v[r->next] = v;
    r->next = (r->next + 1) % QF_WATCH_WINDOW;
    if (r->n < QF_WATCH_WINDOW) r->n++;
}

double qf_watch_ring_at(const qf_watch_ring *r, int i) {
    int oldest = r->n < QF_WATCH_WINDOW ? 0 : r->next;
    return r->v[(oldest + i) % QF_WATCH_WINDOW];
}

double qf_watch_ring_change(const qf_watch_ring *r) {
    return r->n < 2 ? 0.0 : qf_watch_ring_at(r, r->n - 1) - qf_watch_ring_at(r, 0);
}

int qf_watch_ring_growing(const qf_watch_ring *r, double growth, double tolerance) {
    if (r->n < QF_WATCH_WINDOW) return 0;
    for (int i = 1; i < r->n; i++)
        if (qf_watch_ring_at(r, i) < qf_watch_ring_at(r, i - 1) - tolerance) return 0;
    double newest = qf_watch_ring_at(r, r->n - 1);
    return newest - qf_watch_ring_at(r, 0) > growth && newest - qf_watch_ring_at(r, r->n / 2) > growth / 2;
}

qf_watch_params qf_watch_defaults(void) {
    qf_watch_params p = {.skip_steps = 5, .low_steps = 20, .util_min = 0.90,
                         .mem_growth = 256.0 * 1048576.0, .mem_tolerance = 16.0 * 1048576.0};
    return p;
}

unsigned qf_watch_step(qf_watch *w, const qf_watch_params *p, double util_mean, const qf_watch_ring *mem) {
    unsigned ev = 0;
    w->steps++;
    if (w->steps <= p->skip_steps) return 0;
    if (util_mean >= 0) {
        if (util_mean < p->util_min) {
            w->low_run++;
            if (w->low_run >= p->low_steps && !w->util_warned) {
                w->util_warned = 1;
                ev |= QF_WATCH_UTIL_LOW;
            }
        } else {
            w->low_run = 0;
            if (w->util_warned) {
                w->util_warned = 0;
                ev |= QF_WATCH_UTIL_OK;
            }
        }
    }
    if (!w->mem_warned && qf_watch_ring_growing(mem, p->mem_growth, p->mem_tolerance)) {
        w->mem_warned = 1;
        ev |= QF_WATCH_MEM_GROWS;
    } else if (w->mem_warned && qf_watch_ring_change(mem) < p->mem_growth / 2) { /* hysteresis: no flapping */
        w->mem_warned = 0;
        ev |= QF_WATCH_MEM_FLAT;
    }
    return ev;
}
