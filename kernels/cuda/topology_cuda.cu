// topology_cuda.cu — CUDA runtime queries behind topology_cuda.h: device names, PCI bus ids and peer (P2P)
// attributes. No kernels, no allocations; nothing here creates a context beyond what the runtime does to answer.
#include "topology_cuda.h"
#include <cuda_runtime.h>
#include <cctype>
#include <cstdio>
#include <cstring>

extern "C" int qf_cuda_topo_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no driver / no device" error
        return 0;
    }
    return n;
}

extern "C" int qf_cuda_topo_gpu(int dev, qf_cuda_gpu *g) {
    std::memset(g, 0, sizeof *g);
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    std::snprintf(g->name, sizeof g->name, "%.*s", (int)sizeof g->name - 1, p.name);
    g->cc_major = p.major;
    g->cc_minor = p.minor;
    g->mem_gb = (double)p.totalGlobalMem / 1e9;
    if (cudaDeviceGetPCIBusId(g->bus_id, (int)sizeof g->bus_id, dev) != cudaSuccess) {
        cudaGetLastError();
        g->bus_id[0] = 0;
    }
    for (char *c = g->bus_id; *c; c++) *c = (char)std::tolower((unsigned char)*c);
    return 0;
}

extern "C" int qf_cuda_topo_p2p(int a, int b, int *perf_rank, int *atomics) {
    int access = 0, rank = 0, atom = 0;
    if (cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, a, b) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    if (cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, a, b) != cudaSuccess) {
        cudaGetLastError();
        rank = -1;
    }
    if (cudaDeviceGetP2PAttribute(&atom, cudaDevP2PAttrNativeAtomicSupported, a, b) != cudaSuccess) {
        cudaGetLastError();
        atom = -1;
    }
    if (perf_rank) *perf_rank = rank;
    if (atomics) *atomics = atom;
    return access != 0;
}
