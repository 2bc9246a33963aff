/* peak.h — the peak a run's MFU is measured against (SPEC "MFU"): the dense bf16/fp16 tensor FLOP/s of the GPU,
 * found by its NVML / CUDA name, or the deck's peak_tflops when it sets one. CPU ranks have no table entry: their
 * MFU is "n/a" (null in metrics.jsonl) unless the deck sets peak_tflops. */
#ifndef QF_PEAK_H
#define QF_PEAK_H

/* Dense bf16 (or fp16) tensor FLOP/s with fp32 accumulation of the GPU called name ("NVIDIA H200", "NVIDIA
 * GeForce RTX 4090", ...), 0 when the table does not know it. *matched, when not NULL, gets the table's name. */
double qf_peak_gpu_flops(const char *name, const char **matched);

#endif
