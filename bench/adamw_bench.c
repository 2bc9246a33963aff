/* adamw_bench.c — the offload host AdamW (qf_cpu_adamw_act) in G parameters/s, for comparison with DeepSpeed's
 * cpu_adam on the same cores (bench/adamw_bench_ds.py). One pass = widen the act gradients, AdamW on fp32
 * master/m/v, round the parameters to act in place: what one offloaded optimizer step does per parameter.
 *   adamw_bench [N_MILLION=512] [THREADS=all] [DTYPE=bf16|fp16|fp32] [REPEATS=5]
 * Prints one JSON line: {"impl": "qwen-ft", "dtype": ..., "threads": ..., "n": ..., "gparams_per_s": best,
 * "bytes_per_param": what one pass moves (fp32 master, m, v read and written; the gradient read; the parameter
 * written), "gb_per_s": best x bytes_per_param, "host_gb_per_s": the host memory bandwidth that bounds the pass,
 * measured the same way (a += s b over two of the same fp32 arrays, same threads, best of REPEATS: 12 bytes per
 * element, each array read before it is written, as the pass's, so no write-allocate traffic goes uncounted)}. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops.h"
#include "util.h"

int main(int argc, char **argv) {
    size_t n = (size_t)((argc > 1 ? atof(argv[1]) : 512.0) * 1e6);
    int threads = argc > 2 ? atoi(argv[2]) : omp_get_max_threads();
    const char *dts = argc > 3 ? argv[3] : "bf16";
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    int dt = !strcmp(dts, "fp32") ? QF_DT_F32 : !strcmp(dts, "fp16") ? QF_DT_F16 : QF_DT_BF16;
    size_t ab = dt == QF_DT_F32 ? 4 : 2;
    if (!n || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: adamw_bench [N_MILLION] [THREADS] [bf16|fp16|fp32] [REPEATS]\n");
        return 2;
    }
    float *p = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    unsigned char *g = malloc(n * ab);
    if (!p || !m || !v || !g) {
        fprintf(stderr, "adamw_bench: out of memory for %zu parameters\n", n);
        return 3;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) { /* first touch by the threads that will run the update */
        p[i] = 0.01f * (float)(i % 1000);
        m[i] = 0;
        v[i] = 0;
        if (dt == QF_DT_F32) ((float *)g)[i] = 1e-3f;
        else ((uint16_t *)g)[i] = dt == QF_DT_BF16 ? qf_f32_to_bf16(1e-3f) : qf_f32_to_f16(1e-3f);
    }
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = qf_now();
        qf_cpu_adamw_act(p, g, g, dt, m, v, n, 1.0f, 1e-5f, 0.9f, 0.999f, 1e-8f, 0.01f, r + 1, threads);
        double dt_s = qf_now() - t0, rate = (double)n / dt_s / 1e9;
        if (rate > best) best = rate;
        for (size_t i = 0; i < n; i += 4096) { /* the pass rounded parameters into g: put gradients back */
            if (dt == QF_DT_F32) ((float *)g)[i] = 1e-3f;
            else ((uint16_t *)g)[i] = dt == QF_DT_BF16 ? qf_f32_to_bf16(1e-3f) : qf_f32_to_f16(1e-3f);
        }
    }
    double triad = 0;
    for (int r = 0; r < reps; r++) { /* m += s v: 12 bytes per element */
        double t0 = qf_now();
#pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < n; i++) m[i] += 0.5f * v[i];
        double rate = 12.0 * (double)n / (qf_now() - t0) / 1e9;
        if (rate > triad) triad = rate;
    }
    const double bpp = 12.0 + 12.0 + (double)ab + (double)ab; /* master, m, v in and out; gradient in, param out */
    printf("{\"impl\": \"qwen-ft qf_cpu_adamw_act\", \"dtype\": \"%s\", \"threads\": %d, \"n\": %zu, "
           "\"gparams_per_s\": %.3f, \"bytes_per_param\": %.0f, \"gb_per_s\": %.1f, \"host_gb_per_s\": %.1f}\n",
           dts, threads, n, best, bpp, best * bpp, triad);
    free(p), free(m), free(v), free(g);
    return 0;
}
