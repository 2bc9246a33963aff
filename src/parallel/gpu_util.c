/* gpu_util.c — see gpu_util.h. */
#include "gpu_util.h"
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include "util.h"
#ifdef QWENFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "cuda/topology_cuda.h"
#endif

enum { NVML_OK = 0, NVML_INSUFFICIENT_SIZE = 7, NVML_GPU_UTILIZATION_SAMPLES = 1 };

double qf_gpu_util_mean(const qf_nvml_sample *s, unsigned n, int value_type, unsigned long long after_us) {
    double sum = 0;
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
        if (s[i].ts_us <= after_us) continue;
        double v;
        switch (value_type) {
        case 0: v = s[i].v.d; break;
        case 1: v = s[i].v.u; break;
        case 2: v = (double)s[i].v.ul; break;
        case 3: v = (double)s[i].v.ull; break;
        case 4: v = (double)s[i].v.sll; break;
        case 5: v = s[i].v.si; break;
        default: return -1;
        }
        sum += v;
        k++;
    }
    if (!k) return -1;
    double f = sum / k / 100.0;
    return f < 0 ? 0 : f > 1 ? 1 : f;
}

static void *nvml_sym(void *lib, const char *name) { return dlsym(lib, name); }
#define GPU_UTIL_LOAD(field, name)                         \
    do {                                                   \
        void *s_ = nvml_sym(u->lib, name);                 \
        memcpy(&u->field, &s_, sizeof u->field);           \
    } while (0)

int qf_gpu_util_open(qf_gpu_util *u, const char *bus_id) {
    memset(u, 0, sizeof *u);
    if (!bus_id || !bus_id[0]) return -1;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return -1;
    u->lib = lib;
    int (*init)(void) = NULL;
    int (*by_bus)(const char *, void **) = NULL;
    void *s = nvml_sym(lib, "nvmlInit_v2");
    memcpy(&init, &s, sizeof init);
    s = nvml_sym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    memcpy(&by_bus, &s, sizeof by_bus);
    GPU_UTIL_LOAD(shutdown, "nvmlShutdown");
    GPU_UTIL_LOAD(samples, "nvmlDeviceGetSamples");
    GPU_UTIL_LOAD(rates, "nvmlDeviceGetUtilizationRates");
    if (!init || !by_bus || (!u->samples && !u->rates) || init() != NVML_OK) {
        dlclose(lib);
        memset(u, 0, sizeof *u);
        return -1;
    }
    if (by_bus(bus_id, &u->dev) != NVML_OK) {
        qf_gpu_util_close(u);
        return -1;
    }
    return 0;
}

int qf_gpu_util_open_current(qf_gpu_util *u) {
    memset(u, 0, sizeof *u);
#ifdef QWENFT_HAVE_CUDA
    int dev = -1;
    qf_cuda_gpu g;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    if (qf_cuda_topo_gpu(dev, &g) != 0 || !g.bus_id[0]) return -1;
    return qf_gpu_util_open(u, g.bus_id);
#else
    return -1;
#endif
}

double qf_gpu_util_read(qf_gpu_util *u, double since_unix_s) {
    u->last_source = 0;
    if (!u->lib) return -1;
    unsigned long long after = since_unix_s > 0 ? (unsigned long long)(since_unix_s * 1e6) : 0;
    if (u->samples) {
        int type = 0;
        unsigned n = 0;
        /* how many samples the driver holds (it keeps a fixed ring), then room for them */
        if (u->samples(u->dev, NVML_GPU_UTILIZATION_SAMPLES, after, &type, &n, NULL) == NVML_OK && n > u->cap) {
            free(u->buf);
            u->buf = qf_malloc((size_t)n * sizeof *u->buf);
            u->cap = n;
        }
        n = u->cap;
        if (n && u->samples(u->dev, NVML_GPU_UTILIZATION_SAMPLES, after, &type, &n, u->buf) == NVML_OK) {
            double f = qf_gpu_util_mean(u->buf, n < u->cap ? n : u->cap, type, after);
            if (f >= 0) {
                u->last_source = 1;
                return f;
            }
        }
    }
    unsigned r[2] = {0, 0}; /* nvmlUtilization_t: gpu, memory (percent) */
    if (u->rates && u->rates(u->dev, r) == NVML_OK && r[0] <= 100) {
        u->last_source = 2;
        return r[0] / 100.0;
    }
    return -1;
}

void qf_gpu_util_close(qf_gpu_util *u) {
    if (u->lib) {
        if (u->shutdown) u->shutdown();
        dlclose(u->lib);
    }
    free(u->buf);
    memset(u, 0, sizeof *u);
}
