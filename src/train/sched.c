/* sched.c — see sched.h. The formulas are DeepSpeed's:
 *   warmup gamma(k) = log(k+1) / log(W)   (warmup_type "log")  or  k / W  ("linear"), for k < W
 *   WarmupLR:       lr = min + (max - min) * (k < W ? gamma(k) : 1)
 *   WarmupDecayLR:  lr = min + (max - min) * (k < W ? gamma(k) : max(0, (T - k) / max(1, T - W)))
 *   WarmupCosineLR: ratio = k < W ? r0 + (1 - r0) * gamma(k)
 *                          : max(0, c + (1 - c) * (1 + cos(pi * p)) / 2), p = min(1, (k - W + 1) / max(1, T - W));
 *                   lr = base_lr * ratio
 *   linear (HF):    lr = base_lr * (k < Wl ? k / Wl : max(0, (T - k) / max(1, T - Wl))), Wl = warmup_num_steps unclamped
 * where W = max(2, warmup_num_steps) (DeepSpeed clamps it so in every schedule), T = total_num_steps, r0 = warmup_min_ratio, c = cos_min_ratio. */
#include "sched.h"
#include <math.h>
#include <stdio.h>

static double warmup_gamma(const qf_deck *d, int64_t k, int64_t W) {
    if (d->warmup_type == QF_WARMUP_LINEAR) return (double)k / (double)W;
    return log((double)k + 1.0) / log((double)W);
}

double qf_sched_lr(const qf_deck *d, int64_t k, int64_t total_steps) {
    int64_t W = d->warmup_num_steps < 2 ? 2 : d->warmup_num_steps;
    int64_t T = d->total_num_steps > 0 ? d->total_num_steps : total_steps;
    switch (d->sched) {
    case QF_SCHED_NONE:
        return d->lr;
    case QF_SCHED_WARMUP_LR: {
        double g = k < W ? warmup_gamma(d, k, W) : 1.0;
        return d->warmup_min_lr + (d->warmup_max_lr - d->warmup_min_lr) * g;
    }
    case QF_SCHED_WARMUP_DECAY_LR: {
        double g;
        if (k < W) g = warmup_gamma(d, k, W);
        else {
            double den = (double)(T - W) < 1.0 ? 1.0 : (double)(T - W);
            g = (double)(T - k) / den;
            if (g < 0) g = 0;
        }
        return d->warmup_min_lr + (d->warmup_max_lr - d->warmup_min_lr) * g;
    }
    case QF_SCHED_LINEAR: {
        int64_t Wl = d->warmup_num_steps;
        if (k < Wl) return d->lr * (double)k / (double)Wl;
        double den = (double)(T - Wl) < 1.0 ? 1.0 : (double)(T - Wl), g = (double)(T - k) / den;
        return d->lr * (g < 0 ? 0 : g);
    }
    case QF_SCHED_WARMUP_COSINE_LR: {
        double ratio;
        if (k < W) ratio = d->warmup_min_ratio + (1.0 - d->warmup_min_ratio) * warmup_gamma(d, k, W);
        else {
            double real_T = (double)(T - W) < 1.0 ? 1.0 : (double)(T - W);
            double p = (double)(k - W + 1) / real_T;
            if (p > 1.0) p = 1.0; /* past total_num_steps the ratio stays at cos_min_ratio */
            ratio = (1.0 + cos(M_PI * p)) / 2.0;
            ratio = d->cos_min_ratio + (1.0 - d->cos_min_ratio) * ratio;
            if (ratio < 0) ratio = 0;
        }
        return d->lr * ratio;
    }
    }
    return d->lr;
}

int qf_sched_ends_early(const qf_deck *d, int64_t total_steps, char *msg, size_t n) {
    int decays = d->sched == QF_SCHED_WARMUP_DECAY_LR || d->sched == QF_SCHED_WARMUP_COSINE_LR || d->sched == QF_SCHED_LINEAR;
    if (!decays || d->total_num_steps <= 0 || d->total_num_steps >= total_steps) return 0;
    double last = qf_sched_lr(d, total_steps - 1, total_steps);
    snprintf(msg, n, "warning: scheduler.params.total_num_steps = %lld ends the schedule before the run's %lld steps: "
             "steps %lld..%lld train at lr %g%s (set total_num_steps = \"auto\" for the run's length, or a larger "
             "value)", (long long)d->total_num_steps, (long long)total_steps, (long long)d->total_num_steps + 1,
             (long long)total_steps, last, last == 0 ? ", i.e. do not train" : "");
    return 1;
}
