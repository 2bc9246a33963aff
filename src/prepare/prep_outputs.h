/* prep_outputs.h — --out and --valid-out under the output rule (kernels/base/out_file.h); see prep_outputs.c. */
#ifndef QF_PREP_OUTPUTS_H
#define QF_PREP_OUTPUTS_H
#include <mpi.h>
#include "out_file.h"
#include "prep_run.h"

typedef struct prep_outputs {
    qf_out out, valid; /* rank 0 holds the locks; every rank knows the tmp names */
    int has_valid, active;
} prep_outputs;

/* Collective, before any input is read: checks and locks o->out (and valid_path when not NULL) on rank 0 and
 * shares the temporary names. 0 or exit 2/3 on every rank (message printed by rank 0). */
int prep_outputs_begin(const prep_opts *o, const prep_plan *plan, const char *valid_path, prep_outputs *po,
                       MPI_Comm comm);
/* Collective: rank 0 publishes the validation file (with_valid) and the dataset; 0 or exit 3 on every rank. */
int prep_outputs_commit(prep_outputs *po, const prep_opts *o, int with_valid, MPI_Comm comm);
/* Removes the temporaries and releases the locks (rank 0); not collective. */
void prep_outputs_abort(prep_outputs *po, const prep_opts *o);

#endif
