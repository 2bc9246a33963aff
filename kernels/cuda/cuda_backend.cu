// cuda_backend.cu — the CUDA backend's translation unit. The bf16 op table, cuBLASLt and NCCL land with the
// [cuda] issue; until then this unit proves the build finds and links CUDA, cuBLASLt and NCCL, and reports the
// devices it sees (qwen-ft report).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <cstdio>

extern "C" int qf_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

extern "C" void qf_cuda_versions(char *buf, int cap) {
    int rt = 0, nccl = 0;
    cudaRuntimeGetVersion(&rt);
    ncclGetVersion(&nccl);
    size_t lt = cublasLtGetVersion();
    snprintf(buf, (size_t)cap, "CUDA runtime %d.%d | cuBLASLt %zu | NCCL %d", rt / 1000, (rt % 1000) / 10, lt, nccl);
}
