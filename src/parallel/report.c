/* report.c — what this machine and build are: versions, ranks and nodes, the launcher, the topology and the NCCL
 * settings a run would use. The text lines open every run header (train/header.c) and make `qwen-ft report`;
 * `qwen-ft report --json` prints the same as one JSON object. */
#include <hdf5.h>
#include <jansson.h>
#include <libconfig.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "report.h"
#include "topology.h"
#include "qf_git.h"
#include "qf_version.h"
#include "util/json_out.h"

void qf_report_versions(FILE *f) {
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    mpi[strcspn(mpi, "\n,")] = 0;
    unsigned maj, min, rel;
    H5get_libversion(&maj, &min, &rel);
    fprintf(f, "qwen-ft %s | MPI: %s | HDF5 %u.%u.%u (parallel) | libconfig %d.%d.%d | jansson %s\n", QWENFT_VERSION,
            mpi, maj, min, rel, LIBCONFIG_VER_MAJOR, LIBCONFIG_VER_MINOR, LIBCONFIG_VER_REVISION, JANSSON_VERSION);
}

void qf_report_ranks(FILE *f, const qf_comm *c) {
    fprintf(f, "topology: %d rank%s on %d node%s (%d per node on rank 0's node %s); backend %s\n", c->world_size,
            c->world_size == 1 ? "" : "s", c->n_nodes, c->n_nodes == 1 ? "" : "s", c->local_size, c->hostname,
            c->ops->name);
}

/* the launcher as the environment tells it */
void qf_report_launcher(FILE *f) {
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

static json_t *versions_json(void) {
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING], buf[64];
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    mpi[strcspn(mpi, "\n,")] = 0;
    unsigned maj, min, rel;
    H5get_libversion(&maj, &min, &rel);
    json_t *v = json_pack("{s:s, s:s, s:s, s:s, s:s}", "qwen_ft", QWENFT_VERSION, "source", QWENFT_GIT_DESCRIBE,
                          "build_type", QWENFT_BUILD_TYPE, "cuda_backend", QWENFT_CUDA_STATE, "mpi", mpi);
    snprintf(buf, sizeof buf, "%u.%u.%u", maj, min, rel);
    json_object_set_new(v, "hdf5", json_string(buf));
    snprintf(buf, sizeof buf, "%d.%d.%d", LIBCONFIG_VER_MAJOR, LIBCONFIG_VER_MINOR, LIBCONFIG_VER_REVISION);
    json_object_set_new(v, "libconfig", json_string(buf));
    json_object_set_new(v, "jansson", json_string(JANSSON_VERSION));
#ifdef QWENFT_HAVE_CUDA
    char cv[256];
    qf_cuda_versions(cv, sizeof cv);
    json_object_set_new(v, "cuda", json_string(cv));
#endif
    return v;
}

/* rank 0's node as topology.h describes it; -1 (unknown) as null */
static json_t *node_json(const qf_topo_node *n) {
    json_t *gpus = json_array();
    for (int i = 0; i < n->gpus && i < QF_TOPO_MAX_GPUS; i++) {
        const qf_topo_gpu *g = &n->gpu[i];
        json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i}", "name", g->name, "bus_id", g->bus_id, "pcie_gen",
                              g->pcie_gen, "pcie_width", g->pcie_width, "pcie_gen_max", g->pcie_gen_max,
                              "pcie_width_max", g->pcie_width_max);
        json_object_set_new(o, "nvlinks", g->nvlinks < 0 ? json_null() : json_integer(g->nvlinks));
        json_array_append_new(gpus, o);
    }
    json_t *o = json_pack("{s:s, s:i, s:i, s:o, s:s}", "host", n->host, "ranks", n->ranks, "gpus_installed", n->gpus,
                          "gpus", gpus, "gpu_source", n->gpu_source);
    json_object_set_new(o, "p2p", n->p2p < 0 ? json_null() : json_boolean(n->p2p));
    json_object_set_new(o, "p2p_source", json_string(n->p2p_source));
    json_object_set_new(o, "infiniband_active_ports", json_integer(n->ib_active));
    json_object_set_new(o, "infiniband", json_string(n->ib));
    return o;
}

static void report_json(FILE *f, const qf_comm *c, const qf_topology *t, const char *nccl_line) {
    json_t *o = json_object();
    json_object_set_new(o, "versions", versions_json());
    json_object_set_new(o, "ranks", json_integer(c->world_size));
    json_object_set_new(o, "nodes", json_integer(c->n_nodes));
    json_object_set_new(o, "backend", json_string(c->ops->name));
    json_object_set_new(o, "launcher", json_string(getenv("SLURM_JOB_ID")          ? "slurm"
                                                   : getenv("OMPI_COMM_WORLD_SIZE") ? "mpirun"
                                                                                    : "none"));
    json_object_set_new(o, "node", node_json(&t->node));
    json_object_set_new(o, "visible_gpus", json_integer(t->visible_gpus));
    json_t *env = json_object();
    extern char **environ;
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, "NCCL_", 5)) {
            size_t k = strcspn(*e, "=");
            char key[128];
            snprintf(key, sizeof key, "%.*s", (int)k, *e);
            json_object_set_new(env, key, json_string((*e)[k] ? *e + k + 1 : ""));
        }
    json_object_set_new(o, "nccl_environment", env);
    json_object_set_new(o, "nccl_policy", json_string(nccl_line));
    qf_json_print(o, f);
}

int qf_report(int json) {
    qf_comm c;
    qf_comm_init(&c, qf_ops_cpu(), 0);
    qf_topology t;
    qf_topology_detect(&t, &c);
    char nccl[512];
    qf_topology_nccl_env(&t, 0, nccl, sizeof nccl);
    if (c.rank == 0 && json) {
        report_json(stdout, &c, &t, nccl);
    } else if (c.rank == 0) {
        qf_report_versions(stdout);
        qf_report_ranks(stdout, &c);
        qf_report_launcher(stdout);
        qf_topology_print(&t, stdout, 1, nccl);
        print_nccl_env(stdout);
#ifdef QWENFT_HAVE_CUDA
        char v[256];
        qf_cuda_versions(v, sizeof v);
        printf("CUDA backend: compiled in (%s); %d GPU(s) visible to rank 0\n", v, qf_cuda_device_count());
#else
        printf("CUDA backend: not compiled in (CPU ranks only)\n");
#endif
    }
    qf_topology_free(&t);
    qf_comm_free(&c);
    return 0;
}
