// fp8.cuh — the fp8 linear layers' internals (fp8_quant.cu: quantizers; matmul_fp8.cu: cuBLASLt fp8 GEMMs and the
// fp8 op entries). Included by those two files and by cuda_backend.cu (the fp8 tables).
//
// Quantization ("current" scaling, as torchao's Float8Linear and Transformer Engine's Float8CurrentScaling): a tensor's
// scale comes from its own amax in the same call, s = FMAX / max(amax, 1e-12) (FMAX = 448 for e4m3, 57344 for e5m2;
// rowwise rounds s down to a power of two, so the dequantization is exact), q = fp8(x * s) rounded to nearest even and
// saturated to +-FMAX, and the GEMM multiplies by inv = 1/s. An Inf or NaN anywhere in the tensor makes s NaN, so the
// whole output is NaN and the trainer's non-finite check sees it (saturation would otherwise hide an Inf).
// amax words are the bit patterns of non-negative floats: atomicMax on them orders as the floats do. The caller zeroes
// them (cudaMemsetAsync) before the amax kernels.
//
// Weights (matmul_fp8.cu, ops.h fp8_weight): the model names the parameter and its version before each matmul, so a
// weight's amax is taken once per parameter version and reused by every later cast of the same version (the
// backward, a recomputed forward, the next micro-batch): the same amax, the same scale, the same fp8 bits. With an
// amax history (delayed scaling, fp8.amax_history_len = H > 0) a new version's scale comes from the largest of the
// weight's last H amaxes (slot[0] = max(slot[1 .. H])), and the cast itself records this version's amax into the
// history (atomicMax as it casts: one read of W per cast, no amax pass); a value above the history's amax
// saturates to +-FMAX. A weight's first use (empty history) takes a normal amax pass.
#ifndef QF_FP8_CUH
#define QF_FP8_CUH
#include "cuda_common.cuh"

enum { QF_FP8_E4M3 = 0, QF_FP8_E5M2 = 1 };

// *amax = max(*amax, max_i |x[i]|), x[n]
void fp8_amax(const bf16 *x, size_t n, unsigned *amax);
// amax[c] = max(amax[c], max_r |x[r, c]|), x[R, C]
void fp8_amax_cols(const bf16 *x, int R, int C, unsigned *amax);
// out[n] = q(x[n]) with the one scale of *amax; *inv = 1/s; record (NULL: none): *record = max(*record, amax of x)
void fp8_quant(uint8_t *out, const bf16 *x, size_t n, const unsigned *amax, float *inv, int fmt, int pow2,
               unsigned *record);
// x[R, C] -> out[R, C] (row-major copy; NULL: none) and outT[C, R] (the transpose; NULL: none) in one pass.
// per_col = 0: one scale from amax[0], inv[0] = 1/s; per_col = 1 (only with out == NULL): column c's scale from
// amax[c], inv[c] = 1/s_c (the rows of outT). C % 8 == 0. record (NULL: none; per_col = 0 only) as fp8_quant's.
void fp8_quant_t(uint8_t *out, uint8_t *outT, const bf16 *x, int R, int C, const unsigned *amax, int per_col,
                 float *inv, int fmt, int pow2, unsigned *record);
// a weight's history slot (slot[0] the amax of its scale, slot[1 .. H] its last H amaxes), on a new version:
// after_pass = 1: slot[0] came from an amax pass, it becomes history entry pos; after_pass = 0: slot[0] = the
// history's max, entry pos zeroed for the cast to record into
void fp8_hist_step(unsigned *slot, int H, int pos, int after_pass);
// x[R, C] -> out[R, C] with one scale per row from the row's own amax (one fused pass per row); inv[R] = 1/s_r
void fp8_quant_rows(uint8_t *out, const bf16 *x, int R, int C, float *inv, int fmt, int pow2);

// the fp8 op entries (ops.h matmul_fwd / matmul_bwd / matmul_fwd_add signatures) of the recipe (QF_FP8_TENSORWISE | QF_FP8_ROWWISE)
template <int RECIPE>
void cu_matmul_fp8_fwd(void *out, const void *x, const void *w, const void *b, int N, int IN, int OUT, int accumulate);
template <int RECIPE>
void cu_matmul_fp8_fwd_add(void *out, const void *x, const void *w, const void *res, int N, int IN, int OUT);
template <int RECIPE>
void cu_matmul_fp8_bwd(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w, int N, int IN,
                       int OUT, int accumulate_dx);
// ops.h fp8_weight (matmul_fp8.cu)
void cu_fp8_weight(int id, uint64_t version);
// ops.h fp8_same_x (matmul_fp8.cu)
void cu_fp8_same_x(void);
// ops.h fp8_saved_x (matmul_fp8.cu)
void cu_fp8_saved_x(int key, int mode);
// 1 when this GPU and cuBLASLt run the recipe's fp8 GEMMs, else 0 with the reason in why
int qfc_fp8_probe(int recipe, char *why, int cap);

#endif
