// fp8_state.cuh — the fp8 linear layers' state (the backend context's qf_fp8_state: buffers, scales, cuBLASLt plans,
// counters) and the reuse of quantization work across calls (fp8_reuse.cu): a weight's amax per parameter version
// and its amax history (ops.h fp8_weight), an input shared with the previous call (fp8_same_x) and the forward's
// saved q(x)^T (fp8_saved_x). Included by matmul_fp8.cu and fp8_reuse.cu only.
#ifndef QF_FP8_STATE_CUH
#define QF_FP8_STATE_CUH
#include "fp8.cuh"

struct qf_fp8_plan {
    int used, fa, fb, m, n, k, outer, bias, fast, no_beta;
    int refused; // cuBLASLt's heuristic offered it, the matmul call said NOT_SUPPORTED: never used again
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t A, B, C;
    cublasLtMatmulAlgo_t algo;
};
#define QF_FP8_PLANS 64

// a weight's saved scale (ops.h fp8_weight): the parameter version its amax was taken at, its size, its history
struct qf_fp8_wslot {
    uint64_t version; // 0: none saved
    size_t numel;
    int count, pos; // history entries filled (<= hist), the entry this version records into
};

// the fp8 copy of an x that a call left in buf[0] with its inverse scale in sc[0] (tensorwise), for the next call
// the model promises the same x (ops.h fp8_same_x): kind 1 the forward's q(x), 2 the backward's q(x)^T
struct qf_fp8_xcopy {
    int kind, N, IN;
    const void *x;
    const uint8_t *buf;
    const float *sc;
};

// fp8.save_inputs: the forward's q(x)^T of one linear layer input (the model's key), kept for the backward's wgrad
struct qf_fp8_saved {
    uint8_t *buf;
    size_t cap;
    const void *x;
    int N, IN, valid, refused; // refused: no memory for it (not asked again)
};

struct qf_fp8_state {
    uint8_t *buf[4]; // 0: q(x) / q(x)^T, 1: q(W) / q(W)^T, 2: q(dy), 3: q(dy)^T
    size_t cap[4];
    bf16 *tmp; // a GEMM's output when cuBLASLt refuses beta = 1 for it (then added to the output)
    size_t tmp_cap;
    float *sc;    // 4 scale slots of vcap floats (inverse scales, what cuBLASLt multiplies by); tensorwise's three
                  // scalars at sc + 16 i, each 64-byte aligned as the probe's that ran (the first GPU run had them
                  // 4 bytes apart and cuBLASLt 13.1 refused every GEMM with NOT_SUPPORTED: the suspected cause)
    unsigned *am; // 3 amax slots of vcap words
    size_t vcap;
    qf_fp8_plan plans[QF_FP8_PLANS];
    int plan_next;
    unsigned long long n_fp8, n_bf16;
    unsigned long long n_amax, n_amax_w, n_w_reused, n_w_delayed; // qf_cuda_fp8_stats
    // weights: the next matmul's tag (fp8_weight) and each parameter id's saved amax: wam[id * (hist + 1)] is the
    // amax word its scale comes from at w[id].version, followed by its history of hist words (fp8.cuh)
    int tag_set, tag_id;
    uint64_t tag_ver;
    qf_fp8_wslot *w;
    int wcap;
    unsigned *wam;
    int hist; // fp8.amax_history_len (qf_cuda_fp8_set_amax_history)
    int same_x; // the next call's x is the previous call's (fp8_same_x)
    qf_fp8_xcopy xc;
    unsigned long long n_x_reused;
    // fp8.save_inputs (qf_cuda_fp8_set_save_inputs): the pending request (fp8_saved_x), the saved copies by key and
    // their inverse scales (svsc + 16 key: 64-byte aligned, as cuBLASLt's scalar scales want them)
    int save_on, save_key, save_mode;
    qf_fp8_saved *sv;
    int svcap;
    float *svsc;
    unsigned long long n_x_saved, n_x_saved_used;
    int warned_save;
    int min_dim; // IN and OUT at least this for fp8 (QF_FP8_MIN_DIM; tests lower it: qf_cuda_fp8_set_min_dim)
    int outer_none; // the probe found no outer-vector fp8 kernel: rowwise GEMMs go to the unit-scale form at once
    float *unit; // a device 1.0f: the scalar scales of an outer-vector GEMM run as a unit-scale GEMM + scale_rows
    unsigned long long n_outer_after; // outer-vector GEMMs whose scales a kernel applied after cuBLASLt's GEMM
    int warned_beta, warned_algo;
};

// the context's fp8 state, created at its first use (fp8_state.cu)
qf_fp8_state *fp8_state();

// ---- fp8_reuse.cu ---------------------------------------------------------------------------------------------------
// the tag of this call's W (and none for the next call): *id < 0 or *ver == 0 when untagged
void fp8_tag_take(qf_fp8_state *st, int *id, uint64_t *ver);
// The amax word (device) of W's scale in this call, numel = OUT * IN. Untagged: an amax pass into scratch. Tagged
// with the version saved for it: the saved word (no pass). A new version: an amax pass into its slot, or with a
// history (and one entry at least) the history's max, *record then naming the entry the cast records this version's
// amax into (else NULL).
unsigned *fp8_weight_amax(qf_fp8_state *st, int id, uint64_t ver, const bf16 *w, size_t numel, unsigned *scratch,
                          unsigned **record);
// At a call's start: the promise (fp8_same_x) and the copy the previous call left (then none)
qf_fp8_xcopy fp8_xcopy_take(qf_fp8_state *st, int *promised);
// after the buffers are sized: 1 when the previous copy is this call's x of this kind, its buffers not reallocated
int fp8_xcopy_fits(qf_fp8_state *st, const qf_fp8_xcopy *prev, int promised, int kind, const void *x, int N, int IN);
// buf[0] and sc[0] hold x's fp8 copy of this kind, unless [out, out + out_bytes) overlaps x
void fp8_xcopy_keep(qf_fp8_state *st, int kind, const void *x, int N, int IN, const void *out, size_t out_bytes);
// fp8.save_inputs: the pending request (mode 0 none or off, 1 save, 2 use; a save request invalidates the key)
int fp8_saved_take(qf_fp8_state *st, int *key);
// everything the model said about the matmul call now starting (each take above, once): W's tag, the shared-x
// promise with the previous call's copy, the save_inputs request
struct qf_fp8_call {
    int wid;
    uint64_t wver;
    int promised;
    qf_fp8_xcopy xprev;
    int smode, skey;
};
static inline qf_fp8_call fp8_call_take(qf_fp8_state *st) {
    qf_fp8_call c;
    fp8_tag_take(st, &c.wid, &c.wver);
    c.xprev = fp8_xcopy_take(st, &c.promised);
    c.smode = fp8_saved_take(st, &c.skey);
    return c;
}
// key's buffer for this forward's q(x)^T [IN, N], or NULL without memory (then quantized again in the backward)
uint8_t *fp8_saved_buf(qf_fp8_state *st, int key, size_t bytes);
// the forward saved x's q(x)^T under key, its inverse scale in sc (a device float)
void fp8_saved_done(qf_fp8_state *st, int key, const void *x, int N, int IN, const float *sc);
// the saved q(x)^T of key when it is this x's (else NULL), *sc its scale
const uint8_t *fp8_saved_get(qf_fp8_state *st, int key, const void *x, int N, int IN, const float **sc);

#endif
