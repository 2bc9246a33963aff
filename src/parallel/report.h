/* report.h — versions, ranks, launcher, topology and NCCL settings, as text or JSON (report.c). */
#ifndef QF_REPORT_H
#define QF_REPORT_H
#include <stdio.h>
#include "comm.h"

/* One line each: the versions of qwen-ft and its libraries; ranks, nodes and backend; the launcher (Slurm job,
 * mpirun) when the environment names one. */
void qf_report_versions(FILE *f);
void qf_report_ranks(FILE *f, const qf_comm *c);
void qf_report_launcher(FILE *f);
/* `qwen-ft report`: detects the topology over every rank; rank 0 prints the text, or with json one JSON object.
 * Returns 0. */
int qf_report(int json);
#endif
