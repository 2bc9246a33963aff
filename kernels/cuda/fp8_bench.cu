// fp8_bench.cu — timings of the fp8 cast kernels (fp8_quant.cu) for `test_fp8_cuda --bench` (ops.h
// qf_cuda_fp8_bench_casts): effective bandwidth, the bytes a kernel must read and write over its time, to set beside
// the GPU's memory bandwidth (H200: about 4.8 TB/s peak, ~4 TB/s reachable by a streaming kernel).
#include "fp8.cuh"

// mean seconds of one run of f over reps runs (after 2 warm-up runs), on the compute stream
template <typename F> static double time_it(F f, int reps) {
    cudaStream_t s = qfc_stream();
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    f(), f();
    CHECK_CUDA(cudaEventRecord(a, s));
    for (int i = 0; i < reps; i++) f();
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    CHECK_CUDA(cudaEventDestroy(a));
    CHECK_CUDA(cudaEventDestroy(b));
    return ms * 1e-3 / (reps > 0 ? reps : 1);
}

extern "C" void qf_cuda_fp8_bench_casts(const void *x_, int R, int C, int reps, double gbs[5]) {
    const bf16 *x = (const bf16 *)x_;
    const size_t n = (size_t)R * C;
    uint8_t *q = (uint8_t *)cu_alloc(n), *qT = (uint8_t *)cu_alloc(n);
    unsigned *am = (unsigned *)cu_alloc(64 * sizeof(unsigned));
    float *inv = (float *)cu_alloc(64 * sizeof(float));
    QF_CHECK(q && qT && am && inv);
    cu_zero(am, 64 * sizeof(unsigned));
    fp8_amax(x, n, am); // a real scale for the casts (am[0]); am[16]: the recording target
    const double rd = 2.0 * n, w1 = (double)n;
    gbs[0] = rd / time_it([&] { fp8_amax(x, n, am + 32); }, reps) / 1e9;
    gbs[1] = (rd + w1) / time_it([&] { fp8_quant(q, x, n, am, inv, QF_FP8_E4M3, 0, NULL); }, reps) / 1e9;
    gbs[2] = (rd + w1) / time_it([&] { fp8_quant(q, x, n, am, inv, QF_FP8_E4M3, 0, am + 16); }, reps) / 1e9;
    gbs[3] = (rd + 2 * w1) / time_it([&] { fp8_quant_t(q, qT, x, R, C, am, 0, inv, QF_FP8_E5M2, 0, NULL); }, reps) /
             1e9;
    gbs[4] = (rd + w1) / time_it([&] { fp8_quant_t(NULL, qT, x, R, C, am, 0, inv, QF_FP8_E4M3, 0, NULL); }, reps) /
             1e9;
    cu_free(q), cu_free(qT), cu_free(am), cu_free(inv);
}
