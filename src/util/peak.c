/* peak.c — see peak.h. Dense (no sparsity) tensor-core figures from the vendors' data sheets, fp32 accumulation
 * (GeForce cards run fp16/bf16 with fp32 accumulate at half their fp16-accumulate rate). */
#include "peak.h"
#include <string.h>

typedef struct peak_row {
    const char *pattern; /* substring of the device name; the first match wins, so specific names come first */
    double flops;
} peak_row;

static const peak_row PEAKS[] = {
    {"H200 NVL", 835e12}, {"H200", 989e12}, {"GH200", 989e12}, {"H100 NVL", 835e12}, {"H100 PCIe", 756e12},
    {"H100", 989e12},     {"A100", 312e12}, {"L40S", 362e12},  {"L40", 181e12},      {"L4", 121e12},
    {"A10", 125e12},      {"RTX 4090", 165e12}, {"RTX 3090", 35.6e12},
};

double qf_peak_gpu_flops(const char *name, const char **matched) {
    for (size_t i = 0; name && i < sizeof PEAKS / sizeof PEAKS[0]; i++)
        if (strstr(name, PEAKS[i].pattern)) {
            if (matched) *matched = PEAKS[i].pattern;
            return PEAKS[i].flops;
        }
    if (matched) *matched = NULL;
    return 0;
}
