/* cmd_report.c — `qwen-ft report`: its option table; the report itself is parallel/report.c. */
#include <stddef.h>
#include "commands.h"
#include "parallel/report.h"

typedef struct report_opts {
    int json;
} report_opts;

static const qf_opt REPORT_OPTS[] = {
    {.name = "json", .type = QF_OPT_FLAG, .off = offsetof(report_opts, json),
     .help = "print one JSON object (versions, ranks, nodes, GPUs, NCCL settings) instead of the text"},
    {.name = "set", .type = QF_OPT_IGNORED, .meta = "KEY=VALUE", .help = "report reads no deck"},
};

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
