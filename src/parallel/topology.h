/* topology.h — the hardware a run stands on, for the run header and `qwen-ft report` (docs/hpc.md, "Topology"):
 * nodes and ranks per node, the GPUs of each node (NVML through dlopen, else the NVIDIA functions of the PCI bus in
 * sysfs), the CUDA runtime's view when the CUDA backend is compiled in, P2P and NVLink between GPUs, PCIe
 * generation and width, InfiniBand ports; and the NCCL environment policy that follows from it (RTX 40xx boxes:
 * no P2P, no InfiniBand -> NCCL_P2P_DISABLE=1, NCCL_IB_DISABLE=1 before NCCL starts; a user's own setting wins).
 * Nothing here needs a GPU: without one the report says "no GPU visible". */
#ifndef QF_TOPOLOGY_H
#define QF_TOPOLOGY_H
#include <stddef.h>
#include <stdio.h>
#include "comm.h"

#define QF_TOPO_MAX_GPUS 16

typedef struct qf_topo_gpu {
    char name[96];          /* "NVIDIA H200"; sysfs only: "NVIDIA PCI device 10de:2335" */
    char bus_id[32];        /* "0000:41:00.0" */
    int pcie_gen, pcie_width;         /* current link (may be lower while idle); 0 = unknown */
    int pcie_gen_max, pcie_width_max; /* what the link can do; 0 = unknown */
    int nvlinks;            /* active NVLink links; -1 = unknown (no NVML) */
} qf_topo_gpu;

/* What a node leader finds on its node; every rank of the node gets a copy. */
typedef struct qf_topo_node {
    char host[64];
    int ranks;              /* ranks on this node */
    int first_rank;         /* the node leader's world rank */
    int gpus;               /* GPUs installed (independent of CUDA_VISIBLE_DEVICES) */
    qf_topo_gpu gpu[QF_TOPO_MAX_GPUS]; /* the first QF_TOPO_MAX_GPUS of them */
    char gpu_source[64];    /* "NVML, driver 550.54.15" | "sysfs PCI scan (no NVML)" | "none" */
    int p2p;                /* 1: every pair of GPUs can use P2P; 0: some pair cannot; -1: unknown or < 2 GPUs */
    int p2p_pairs, pairs;   /* P2P-capable pairs of all pairs (when known) */
    char p2p_source[96];    /* how p2p was decided */
    int ib_active;          /* active InfiniBand ports (link layer InfiniBand) */
    int ib_ports;           /* all ports under /sys/class/infiniband (RoCE included) */
    char ib[256];           /* "mlx5_0/1 InfiniBand ACTIVE 200 Gb/sec (4X HDR), ..." */
} qf_topo_node;

typedef struct qf_topology {
    qf_topo_node node;      /* this rank's node */
    int visible_gpus;       /* GPUs this rank sees: CUDA runtime (CUDA backend), else CUDA_VISIBLE_DEVICES */
    char visible_source[32];
    /* agreed over all ranks */
    int world_size, n_nodes;
    int ranks_per_node_min, ranks_per_node_max;
    int node_gpus_min, node_gpus_max;
    int nodes_without_p2p;  /* nodes with >= 2 GPUs of which some pair lacks P2P */
    int nodes_without_ib;   /* nodes without an active InfiniBand port */
    int hiding_ranks;       /* ranks that see fewer GPUs than their node has */
    int hiding_example_rank, hiding_example_seen, hiding_example_node_gpus;
    int oversubscribed_nodes; /* nodes with GPUs but more ranks than GPUs */
    /* rank 0 only */
    char *nodes_text;       /* "host1 (ranks 0-7, 8 GPUs), host2 (...)" (malloc'd) */
} qf_topology;

/* Collective over c->world (every rank): each node leader inspects its node, the result is shared on the node and
 * summarised on rank 0. Never fails: what cannot be found is reported as unknown. */
void qf_topology_detect(qf_topology *t, const qf_comm *c);
void qf_topology_free(qf_topology *t);

/* The NCCL environment policy (call on every rank before any NCCL communicator exists): when some node's GPUs
 * lack P2P, NCCL_P2P_DISABLE=1, and when they also have no InfiniBand, NCCL_IB_DISABLE=1 — unless the variable is
 * already set (the user's value wins and is kept). With apply = 0 nothing is set (`qwen-ft report`: what a run
 * would do). Writes one line (no newline) into msg saying what was done and why; returns the number of
 * variables set (or that would be set). */
int qf_topology_nccl_env(const qf_topology *t, int apply, char *msg, size_t cap);

/* Rank 0: the topology lines of the run header (verbose = 0) or of `qwen-ft report` (verbose = 1: one line per
 * GPU), then `nccl_line` when not NULL, then the warnings (hidden GPUs, oversubscription). */
void qf_topology_print(const qf_topology *t, FILE *f, int verbose, const char *nccl_line);

/* PCIe generation from a sysfs link speed ("16.0 GT/s PCIe" -> 4); 0 when unknown. Exposed for the unit test. */
int qf_topology_pcie_gen(const char *speed);
/* Number of devices a CUDA_VISIBLE_DEVICES value names (NULL = unset -> -1: all). Exposed for the unit test. */
int qf_topology_count_visible(const char *cuda_visible_devices);

#endif
