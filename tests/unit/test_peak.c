/* test_peak.c — the GPU peak table behind MFU (src/util/peak.c): NVML / CUDA device names map to SPEC's dense
 * bf16/fp16 peaks, the more specific name winning (L40S over L40, H100 PCIe over H100), unknown names to 0. */
#include <string.h>
#include "util/peak.h"
#include "qf_test.h"

static void expect(const char *name, double flops, const char *row) {
    const char *m = NULL;
    double f = qf_peak_gpu_flops(name, &m);
    CHECK(f == flops, "%s: %g, want %g", name, f, flops);
    CHECK(row ? m && !strcmp(m, row) : m == NULL, "%s: matched %s, want %s", name, m ? m : "(none)", row ? row : "(none)");
}

int main(void) {
    expect("NVIDIA H200", 989e12, "H200");
    expect("NVIDIA H100 80GB HBM3", 989e12, "H100");
    expect("NVIDIA H100 PCIe", 756e12, "H100 PCIe");
    expect("NVIDIA A100-SXM4-80GB", 312e12, "A100");
    expect("NVIDIA L40S", 362e12, "L40S");
    expect("NVIDIA L40", 181e12, "L40");
    expect("NVIDIA GeForce RTX 4090", 165e12, "RTX 4090");
    expect("NVIDIA GeForce RTX 3090", 35.6e12, "RTX 3090");
    expect("NVIDIA PCI device 10de:2335", 0, NULL); /* sysfs only: no name, no peak */
    expect("", 0, NULL);
    CHECK(qf_peak_gpu_flops(NULL, NULL) == 0, "NULL name");
    printf("test_peak: %d checks, %d failed\n", qf_test_checks, qf_test_failures);
    return qf_test_failures != 0;
}
