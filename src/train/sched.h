/* sched.h — DeepSpeed's learning-rate schedules (deepspeed/runtime/lr_schedules.py): WarmupLR, WarmupDecayLR,
 * WarmupCosineLR. Optimizer step k (k = 0, 1, ...) uses qf_sched_lr(d, k). */
#ifndef QF_SCHED_H
#define QF_SCHED_H
#include <stdint.h>
#include "deck/deck.h"

/* Learning rate for scheduler step k. With no scheduler: the optimizer's lr. total_steps resolves an "auto"
 * (-1) total_num_steps. */
double qf_sched_lr(const qf_deck *d, int64_t k, int64_t total_steps);
/* 1 with a warning in msg when the schedule ends (an explicit total_num_steps of WarmupDecayLR, WarmupCosineLR or
 * linear) before the run's total_steps: the steps after it train at the schedule's final lr (0 for WarmupDecayLR
 * with warmup_min_lr 0, and for linear). 0 otherwise. */
int qf_sched_ends_early(const qf_deck *d, int64_t total_steps, char *msg, size_t n);

#endif
