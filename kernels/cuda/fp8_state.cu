// fp8_state.cu — the fp8 tables' state in the CUDA context (fp8_state.cuh), created at its first use: what the
// GEMMs (matmul_fp8.cu) and the scale reuse (fp8_reuse.cu) share, so that neither calls the other for it.
#include "fp8_state.cuh"
#include <stdlib.h>

qf_fp8_state *fp8_state() {
    qf_cuda_ctx &c = qfc();
    if (!c.fp8) {
        c.fp8 = (qf_fp8_state *)qf_calloc(1, sizeof(qf_fp8_state));
        const char *e = getenv("QWENFT_FP8_MIN_DIM"); // test hook (docs/testing.md): tiny models all in fp8
        c.fp8->min_dim = e && *e ? atoi(e) : QF_FP8_MIN_DIM;
    }
    return c.fp8;
}
