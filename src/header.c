/* header.c — the run header (versions, topology, model, resolved deck, memory plan) and `qwen-ft report`. */
#include <hdf5.h>
#include <jansson.h>
#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "commands.h"
#include "estimate.h"
#include "qf_version.h"
#include "run.h"
#include "topology.h"

static void print_versions(FILE *f) {
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    mpi[strcspn(mpi, "\n,")] = 0;
    unsigned maj, min, rel;
    H5get_libversion(&maj, &min, &rel);
    fprintf(f, "qwen-ft %s | MPI: %s | HDF5 %u.%u.%u (parallel) | libconfig %d.%d.%d | jansson %s\n", QWENFT_VERSION,
            mpi, maj, min, rel, LIBCONFIG_VER_MAJOR, LIBCONFIG_VER_MINOR, LIBCONFIG_VER_REVISION, JANSSON_VERSION);
}

static void print_topology(FILE *f, const qf_comm *c) {
    fprintf(f, "topology: %d rank%s on %d node%s (%d per node on rank 0's node %s); backend %s\n", c->world_size,
            c->world_size == 1 ? "" : "s", c->n_nodes, c->n_nodes == 1 ? "" : "s", c->local_size, c->hostname,
            c->ops->name);
}

/* the launcher as the environment tells it */
static void print_launcher(FILE *f) {
    const char *job = getenv("SLURM_JOB_ID");
    if (job) {
        const char *step = getenv("SLURM_STEP_ID"), *nt = getenv("SLURM_STEP_NUM_TASKS"), *nn = getenv("SLURM_STEP_NUM_NODES");
        const char *gpn = getenv("SLURM_GPUS_PER_NODE"), *part = getenv("SLURM_JOB_PARTITION");
        fprintf(f, "launcher: Slurm job %s%s%s%s%s%s%s%s%s%s%s\n", job, step ? " step " : "", step ? step : "",
                nt ? ", " : "", nt ? nt : "", nt ? " tasks" : "", nn ? " on " : "", nn ? nn : "", nn ? " node(s)" : "",
                gpn ? ", gpus-per-node " : "", gpn ? gpn : "");
        if (part) fprintf(f, "launcher: partition %s\n", part);
    } else if (getenv("OMPI_COMM_WORLD_SIZE")) {
        fprintf(f, "launcher: mpirun (Open MPI)\n");
    }
}

/* NCCL_* variables in this process's environment (the user's, or set by the topology policy) */
static void print_nccl_env(FILE *f) {
    extern char **environ;
    int n = 0;
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, "NCCL_", 5)) fprintf(f, "%s%s", n++ ? " " : "NCCL environment: ", *e);
    fprintf(f, n ? "\n" : "NCCL environment: no NCCL_* variable set\n");
}

static double gb(double b) { return b / 1e9; }

void qf_run_header(qf_run *r, FILE *f, const char *what) {
    const qf_model_config *c = &r->model.cfg;
    const qf_deck *d = &r->deck;
    print_versions(f);
    print_topology(f, &r->comm);
#ifdef QF_RUN_HAS_TOPOLOGY
    print_launcher(f);
    qf_topology_print(&r->topo, f, 0, r->nccl_line);
#endif
    fprintf(f, "%s: deck %s\n", what, d->path);
    fprintf(f, "model: %s (%s) V=%lld C=%d F=%d L=%d H=%d KV=%d D=%d tied=%d bias=%d qk_norm=%d theta=%g | %.3f M "
               "params\n",
            c->arch, c->family, (long long)c->vocab_size, c->hidden_size, c->intermediate_size, c->num_layers,
            c->num_heads, c->num_kv_heads, c->head_dim, c->tie_word_embeddings, c->attention_bias, c->qk_norm,
            c->rope_theta, (double)r->model.n_params / 1e6);
    fprintf(f, "parameters from: %s%s\n", r->source[0] ? r->source : d->model_from, r->resumed ? " (resuming)" : "");
    if (r->resumed)
        fprintf(f, "resuming at step %lld (data epoch %lld, row %lld)\n", (long long)r->st.step,
                (long long)r->st.data_epoch, (long long)r->st.data_row);
    const int act = r->ops->act_dtype;
    fprintf(f, "precision: the %s backend %s%s\n", r->ops->name,
            act == QF_ACT_BF16  ? "stores bf16 parameters and activations, accumulates in fp32 (fp32 master weights)"
            : act == QF_ACT_F16 ? "stores fp16 parameters and activations, accumulates in fp32 (fp32 master weights, "
                                  "dynamic loss scaling)"
                                : "computes in fp32",
            (d->bf16 || d->fp16) && !strcmp(r->ops->name, "cpu") ? " (bf16/fp16 apply on GPUs; fp16 loss scaling still runs)" : "");
    if (d->offload_optimizer == QF_OFFLOAD_CPU) { /* the host AdamW runs on this rank's OpenMP threads */
        int threads = r->zero.off.threads;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        fprintf(f, "offload: host AdamW on %d thread(s) per rank (%ld cores online, %d ranks on this node; "
                   "OMP_NUM_THREADS overrides), %s\n", threads, cores, r->comm.local_size,
                r->zero.off.overlap ? "overlapped with the next forward unit by unit"
                                    : "completed inside each step (QWENFT_OFFLOAD_OVERLAP=0, or updated shards travel "
                                      "by MPI: stages 1-2 on several ranks, parameter offload across nodes)");
        if (threads == 1 && cores >= 2L * r->comm.local_size)
            fprintf(f, "warning: each rank has one host thread for the offloaded optimizer (bound to one core?): with "
                       "mpirun use --bind-to none -x OMP_NUM_THREADS=%ld, with srun --cpus-per-task\n",
                    cores / r->comm.local_size);
    }
    if (r->have_train)
        fprintf(f, "data: %s: %lld docs, %lld tokens -> %lld rows of %d per epoch, %lld steps per epoch; %lld steps\n",
                d->data_train, (long long)r->train_ds.n_docs, (long long)r->train_ds.n_tokens,
                (long long)r->train_ld.rows_per_epoch, d->seq_len, (long long)r->steps_per_epoch,
                (long long)r->total_steps);
    if (r->have_valid)
        fprintf(f, "valid: %s: %lld docs, %lld tokens\n", d->data_valid, (long long)r->valid_ds.n_docs,
                (long long)r->valid_ds.n_tokens);
    /* the memory plan: the estimate's formulas (docs/zero.md) for this deck, ranks and backend */
    qf_mem_estimate est;
    qf_estimate(&r->model.cfg, d, r->comm.world_size, r->comm.local_size, (int64_t)r->ops->act_bytes, &est);
    fprintf(f, "memory plan per rank (ZeRO stage %d): parameters %.3f GB, gradients %.3f GB, optimizer %.3f GB "
               "(+ %.3f GB on the host), activations %.3f GB; host per node %.3f GB\n",
            d->zero_stage, gb((double)est.params), gb((double)est.grads), gb((double)est.optimizer),
            gb((double)est.host_per_rank), gb((double)est.activations), gb((double)est.host_per_node));
    fprintf(f, "---- resolved deck ----\n");
    qf_deck_print(d, f);
    fprintf(f, "-----------------------\n");
    fflush(f);
}

int qf_cmd_report(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: qwen-ft report  (or: srun --mpi=pmix qwen-ft report, mpirun -np N qwen-ft report)\n"
                   "Versions (CUDA, NCCL, MPI, HDF5, libconfig), ranks and nodes, the GPUs of each node (NVLink, PCIe,\n"
                   "P2P), InfiniBand, and the NCCL settings a run would use (docs/hpc.md).\n");
            return 0;
        } else {
            fprintf(stderr, "qwen-ft report: unexpected argument '%s'\n", argv[i]);
            return QF_EXIT_INPUT;
        }
    qf_comm c;
    qf_comm_init(&c, qf_ops_cpu(), 0);
    qf_topology t;
    qf_topology_detect(&t, &c);
    char nccl[512];
    qf_topology_nccl_env(&t, 0, nccl, sizeof nccl);
    if (c.rank == 0) {
        print_versions(stdout);
        print_topology(stdout, &c);
        print_launcher(stdout);
        qf_topology_print(&t, stdout, 1, nccl);
        print_nccl_env(stdout);
#ifdef QWENFT_HAVE_CUDA
        char v[256];
        qf_cuda_versions(v, sizeof v);
        printf("CUDA backend: compiled in (%s); %d GPU(s) visible to rank 0; training uses CPU ranks until the "
               "[cuda] op table lands\n", v, qf_cuda_device_count());
#else
        printf("CUDA backend: not compiled in (CPU ranks only)\n");
#endif
    }
    qf_topology_free(&t);
    qf_comm_free(&c);
    return 0;
}
