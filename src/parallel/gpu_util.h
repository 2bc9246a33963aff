/* gpu_util.h — how busy this rank's GPU was over a window of time, from NVML (loaded with
 * dlopen("libnvidia-ml.so.1") as in topology.c: no build dependency on the driver; without it, or on CPU ranks,
 * nothing is known). The figure is NVML's GPU utilisation: the share of time in which a kernel was running, sampled
 * by the driver. qf_gpu_util_read averages the driver's samples that fall in the window (nvmlDeviceGetSamples,
 * NVML_GPU_UTILIZATION_SAMPLES); when none fall in it (a window shorter than the driver's sampling period), it
 * takes nvmlDeviceGetUtilizationRates, the driver's last period. */
#ifndef QF_GPU_UTIL_H
#define QF_GPU_UTIL_H

/* one NVML sample (nvmlSample_t: a CPU timestamp in microseconds and an 8-byte value whose type the call says) */
typedef struct qf_nvml_sample {
    unsigned long long ts_us;
    union {
        double d;
        unsigned int u;
        unsigned long ul;
        unsigned long long ull;
        long long sll;
        int si;
    } v;
} qf_nvml_sample;

typedef struct qf_gpu_util {
    void *lib;              /* NULL: nothing is known */
    void *dev;              /* nvmlDevice_t */
    int (*shutdown)(void);
    int (*samples)(void *dev, int type, unsigned long long after_us, int *value_type, unsigned *count,
                   qf_nvml_sample *out);
    int (*rates)(void *dev, unsigned *gpu_and_memory);
    qf_nvml_sample *buf;    /* room for cap samples */
    unsigned cap;
    int last_source;        /* what the last read used: 1 the samples, 2 the rates, 0 nothing */
} qf_gpu_util;

/* Opens NVML for the GPU at PCI bus id `bus_id` ("0000:41:00.0"); 0, or -1 (no NVML, no such GPU: u stays
 * closed and every read says -1). */
int qf_gpu_util_open(qf_gpu_util *u, const char *bus_id);
/* The same for the GPU this thread's CUDA device is (the CUDA build); -1 without one. */
int qf_gpu_util_open_current(qf_gpu_util *u);
/* The GPU's utilisation as a fraction in [0, 1] over the time since `since_unix_s` (wall clock, seconds since the
 * epoch, as NVML's timestamps); -1 when unknown. */
double qf_gpu_util_read(qf_gpu_util *u, double since_unix_s);
void qf_gpu_util_close(qf_gpu_util *u);

/* The mean of the samples with a timestamp after after_us, as a fraction (NVML's values are percentages) of value
 * type value_type (NVML's nvmlValueType_t: 0 double, 1 unsigned int, 2 unsigned long, 3 unsigned long long,
 * 4 signed long long, 5 signed int); -1 when none is after it. Exposed for the unit test. */
double qf_gpu_util_mean(const qf_nvml_sample *s, unsigned n, int value_type, unsigned long long after_us);

#endif
