/* prep_outputs.c — the output rule (kernels/base/out_file.h) for `qwen-ft prepare`: rank 0 checks --out and
 * --valid-out against every input (the expanded globs and the tokenizer file: device and inode, so symlinks and
 * ./x spellings are caught), locks both, and names their temporaries; every rank gets the names, writes into
 * them collectively, and rank 0 publishes both at the end or removes both. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "prep_outputs.h"

int prep_outputs_begin(const prep_opts *o, const prep_plan *plan, const char *valid_path, prep_outputs *po,
                       MPI_Comm comm) {
    memset(po, 0, sizeof *po);
    po->out.lock.fd = po->valid.lock.fd = -1;
    po->out.slot = po->valid.slot = -1;
    po->has_valid = valid_path != NULL;
    qf_err e = {0};
    int rc = 0;
    if (o->rank == 0) {
        const char **in = qf_calloc((size_t)plan->n_in + 1, sizeof *in);
        int n = 0;
        for (int i = 0; i < plan->n_in; i++) in[n++] = plan->in[i].path;
        if (o->tokenizer) in[n++] = o->tokenizer;
        rc = qf_out_begin(&po->out, "--out", o->out, in, n, &e);
        if (rc == 0 && valid_path) {
            rc = qf_out_begin(&po->valid, "--valid-out", valid_path, in, n, &e);
            struct stat a, b; /* one file under two spellings: the same lock file, which this process holds twice */
            if (rc == 0 && fstat(po->out.lock.fd, &a) == 0 && fstat(po->valid.lock.fd, &b) == 0 &&
                a.st_dev == b.st_dev && a.st_ino == b.st_ino)
                rc = qf_err_set(&e, QF_EXIT_INPUT, "--valid-out %s is the same file as --out %s", valid_path, o->out);
            if (rc) qf_out_abort(&po->out);
        }
        free(in);
        if (rc) fprintf(stderr, "qwen-ft prepare: %s\n", e.msg);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm);
    if (rc) {
        if (o->rank == 0) prep_outputs_abort(po, o);
        return rc;
    }
    MPI_Bcast(po->out.tmp, (int)sizeof po->out.tmp, MPI_CHAR, 0, comm);
    MPI_Bcast(po->valid.tmp, (int)sizeof po->valid.tmp, MPI_CHAR, 0, comm);
    po->active = 1;
    return 0;
}

int prep_outputs_commit(prep_outputs *po, const prep_opts *o, int with_valid, MPI_Comm comm) {
    int rc = 0;
    if (o->rank == 0) {
        qf_err e = {0};
        if (with_valid) rc = qf_out_commit(&po->valid, &e);
        else if (po->has_valid) qf_out_abort(&po->valid); /* nothing went to it */
        if (rc == 0) rc = qf_out_commit(&po->out, &e);
        else qf_out_abort(&po->out);
        if (rc) fprintf(stderr, "qwen-ft prepare: %s\n", e.msg);
    }
    po->active = 0;
    MPI_Bcast(&rc, 1, MPI_INT, 0, comm);
    return rc;
}

void prep_outputs_abort(prep_outputs *po, const prep_opts *o) {
    if (o->rank == 0) {
        qf_out_abort(&po->out);
        if (po->has_valid) qf_out_abort(&po->valid);
    }
    po->active = 0;
}
