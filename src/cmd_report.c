/* cmd_report.c — `qwen-ft report`: its option table and its JSON form; the text form is in header.c (it shares
 * the run header's printers). */
#include <hdf5.h>
#include <libconfig.h>
#include <mpi.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "commands.h"
#include "json_out.h"
#include "qf_git.h"
#include "qf_version.h"
#include "run.h"

typedef struct report_opts {
    int json;
} report_opts;

static const qf_opt REPORT_OPTS[] = {
    {.name = "json", .type = QF_OPT_FLAG, .off = offsetof(report_opts, json),
     .help = "print one JSON object (versions, ranks, nodes, GPUs, NCCL settings) instead of the text"},
    {.name = "set", .type = QF_OPT_IGNORED, .meta = "KEY=VALUE", .help = "report reads no deck"},
};

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

void qf_report_json(FILE *f, const qf_comm *c, const qf_topology *t, const char *nccl_line) {
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

static int report_main(const void *opts) { return qf_report(((const report_opts *)opts)->json); }

const qf_cmd qf_cmd_report = {
    .name = "report",
    .synopsis = "[--json]   (or: srun --mpi=pmix qwen-ft report, mpirun -np N qwen-ft report)",
    .summary = "versions (CUDA, NCCL, MPI, HDF5, libconfig), GPUs, topology, the NCCL settings a run would use",
    .about = "Ranks and nodes, the GPUs of each node (NVLink, PCIe, P2P), InfiniBand, and the NCCL settings a run\n"
             "would use (docs/hpc.md).",
    .opts = REPORT_OPTS,
    .nopts = QF_NOPTS(REPORT_OPTS),
    .size = sizeof(report_opts),
    .run = report_main,
};
