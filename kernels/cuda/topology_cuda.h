/* topology_cuda.h — what the CUDA runtime says about the GPUs this process sees, for src/parallel/topology.c (the run
 * header, `qwen-ft report` and the NCCL environment policy). Plain C interface; implemented in topology_cuda.cu.
 * Every function degrades to "nothing" (0 devices, -1) when there is no driver or no GPU. */
#ifndef QF_TOPOLOGY_CUDA_H
#define QF_TOPOLOGY_CUDA_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct qf_cuda_gpu {
    char name[96];        /* "NVIDIA H200" */
    char bus_id[32];      /* "0000:41:00.0" (lower case, as sysfs and NVML print it) */
    int cc_major, cc_minor;
    double mem_gb;        /* total device memory, 1e9 bytes */
} qf_cuda_gpu;

/* Devices visible to this process (CUDA_VISIBLE_DEVICES applies); 0 without a driver or GPU. */
int qf_cuda_topo_count(void);
/* Fills *g for visible device dev; 0 on success, -1 on error. */
int qf_cuda_topo_gpu(int dev, qf_cuda_gpu *g);
/* Peer access between visible devices a and b (cudaDeviceGetP2PAttribute): returns 1 when access is supported,
 * 0 when not, -1 on error; *perf_rank (relative performance, lower = better, e.g. NVLink) and *atomics (native
 * atomics over the link) are filled when not NULL. */
int qf_cuda_topo_p2p(int a, int b, int *perf_rank, int *atomics);

#ifdef __cplusplus
}
#endif
#endif
