/* train.h — the train and eval commands (train.c), run on every rank; they return the exit code. */
#ifndef QF_TRAIN_H
#define QF_TRAIN_H
#include "run.h"

int qf_train_command(const qf_run_args *a);
int qf_eval_command(const qf_run_args *a);
#endif
