/* header.h — the run header (header.c). */
#ifndef QF_HEADER_H
#define QF_HEADER_H
#include <stdio.h>
#include "run.h"

/* Prints the run header of a train or eval run (what: "train" | "eval"): versions, topology, model, precision,
 * data, the memory plan and the resolved deck with where each key came from. Rank 0. */
void qf_run_header(qf_run *r, FILE *f, const char *what);
#endif
