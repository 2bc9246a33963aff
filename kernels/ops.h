/* ops.h — the op table: every compute kernel the model, optimizer and loss need, behind one struct of
 * function pointers with two implementations:
 *   kernels/cpu/   fp32, OpenMP — the readable reference and test oracle (qf_ops_cpu()).
 *   kernels/cuda/  bf16 (or fp16, fp32) storage / fp32 accumulation, cuBLASLt (qf_ops_cuda() and friends).
 *
 * Conventions
 *   - "act" tensors (activations, parameters as the model sees them, their gradients) are void*: float on the
 *     CPU backend, the backend's compute dtype elsewhere. Tensors typed float* are fp32 on every backend
 *     (statistics, losses, master weights, Adam moments).
 *   - Shapes in comments, row-major, last index fastest. N = number of tokens (micro-batch rows x seq_len),
 *     C = hidden size, H = query heads, KV = key/value heads, D = head_dim, F = intermediate size, V = vocab.
 *   - Backward kernels WRITE activation gradients (d_in) and ACCUMULATE (+=) parameter gradients (dw, db),
 *     so gradient accumulation over micro-batches needs no extra pass.
 *   - Linear layers follow torch: y = x W^T + b with W [OUT, IN].
 *   - Packed rows: seg_start[n] is the index within its row of the first token of token n's segment
 *     (segment = the part of one document that lies in the row); pos[n] = t - seg_start[n] is the RoPE
 *     position. Token t of a row attends to tokens s with seg_start[t] <= s <= t.
 *   - No MPI, no files. Every pointer is backend memory (host memory for the CPU backend) unless it says host.
 */
#ifndef QF_OPS_H
#define QF_OPS_H
#include <stddef.h>
#include <stdint.h>
#include "dtype.h"

/* The decoding fast path's arguments (qf_ops decode_qkv, decode_mlp; qwen-ft serve's paged calls of one or two
 * tokens). Shapes as the model's: x [N, C] the residual stream, ln_w [C] the norm's weight; wq [H*D, C], bq [H*D];
 * wk, wv [KV*D, C], bk, bv [KV*D] (biases may be NULL); wg, wu [F, C]; seq, pos, btab as attention_paged's. The
 * scratch members are the unfused sequence's buffers, which a table may use or leave untouched. */
typedef struct qf_decode_qkv {
    void *q;                                 /* out [N, H, D]: the rotated queries */
    void *kpool, *vpool;                     /* [nblocks, bs, KV, D]: the rotated k and v land at the tokens' slots */
    const void *x, *ln_w;
    const void *wq, *bq, *wk, *bk, *wv, *bv;
    const int32_t *seq, *pos, *btab;
    void *ln, *k, *v;                        /* scratch [N, C], [N, KV*D], [N, KV*D] */
    float *rstd;                             /* scratch [N] */
    int N, C, H, KV, D, maxb, bs;
    float eps;
    double theta;
} qf_decode_qkv;
typedef struct qf_decode_mlp {
    void *out;                               /* out [N, F] = silu(ln Wg^T) * (ln Wu^T), ln = RMSNorm(x) */
    const void *x, *ln_w, *wg, *wu;
    void *ln, *gate, *up;                    /* scratch [N, C], [N, F], [N, F] */
    float *rstd;                             /* scratch [N] */
    int N, C, F;
    float eps;
} qf_decode_mlp;

typedef struct qf_ops {
    const char *name;        /* "cpu" | "cuda" | "cuda-f32" | "cuda-f16" */
    size_t act_bytes;        /* bytes of one act element (4 on cpu) */
    qf_dtype act_dtype;      /* QF_DT_F32 | QF_DT_BF16 | QF_DT_F16: what an act element is */

    /* memory */
    void *(*alloc)(size_t bytes);                          /* zero-filled; NULL on failure */
    void (*free)(void *p);
    void (*copy_h2d)(void *dst, const void *src_host, size_t bytes);
    void (*copy_d2h)(void *dst_host, const void *src, size_t bytes);
    void (*copy_d2d)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *p, size_t bytes);
    void (*sync)(void);
    /* act <-> fp32 (host-visible conversions go through these + copies) */
    void (*act_from_f32)(void *dst, const float *src, size_t n);   /* dst act[n] = src fp32[n] (backend mem) */
    void (*act_to_f32)(float *dst, const void *src, size_t n);

    /* out[N,C] = wte[tokens[n], :]; tokens in [0,V) */
    void (*embedding_fwd)(void *out, const int32_t *tokens, const void *wte, int N, int C);
    /* dwte[V,C] += scatter of dout[N,C] by tokens (deterministic order) */
    void (*embedding_bwd)(void *dwte, const void *dout, const int32_t *tokens, int N, int C, int V);

    /* RMSNorm over the last dim (fp32 math as HF): out = w * x / sqrt(mean(x^2) + eps); rstd[N] saved.
     * x[N,C], w[C], out[N,C]. */
    void (*rmsnorm_fwd)(void *out, float *rstd, const void *x, const void *w, int N, int C, float eps);
    /* dx[N,C] = d/dx (WRITE, or ADD when accumulate != 0: the residual stream); dw[C] += */
    void (*rmsnorm_bwd)(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                        int N, int C, int accumulate);

    /* out[N,OUT] = x[N,IN] W[OUT,IN]^T (+ b[OUT] if b != NULL) (+ out if accumulate) */
    void (*matmul_fwd)(void *out, const void *x, const void *w, const void *b, int N, int IN, int OUT, int accumulate);
    /* dx[N,IN] = dout W (WRITE, or ADD when accumulate_dx) if dx != NULL; dw[OUT,IN] += dout^T x if dw != NULL;
     * db[OUT] += sum_n dout if db != NULL */
    void (*matmul_bwd)(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w,
                       int N, int IN, int OUT, int accumulate_dx);
    /* out[N,OUT] = res[N,OUT] + x[N,IN] W[OUT,IN]^T: a residual add in the GEMM (res may be out); the same values as
     * copying res into out and calling matmul_fwd with accumulate, without the copy */
    void (*matmul_fwd_add)(void *out, const void *x, const void *w, const void *res, int N, int IN, int OUT);

    /* RoPE, rotate-half (HF): for i < D/2, a = pos*theta^(-2i/D):
     *   y[i] = x[i] cos a - x[i+D/2] sin a ; y[i+D/2] = x[i+D/2] cos a + x[i] sin a.
     * In place on x[N, nh, D] (row stride nh*D). bwd applies the inverse rotation to dx in place. */
    void (*rope_fwd)(void *x, const int32_t *pos, int N, int nh, int D, double theta);
    void (*rope_bwd)(void *dx, const int32_t *pos, int N, int nh, int D, double theta);

    /* Causal, segment-aware attention with GQA (query head h uses kv head h / (H/KV)), scale 1/sqrt(D).
     * q[B*T, H, D], k,v[B*T, KV, D] (row stride H*D and KV*D), out[B*T, H, D], lse[B, H, T] (log-sum-exp of
     * the scaled scores, saved for the backward). seg_start[B*T] as above. Never needs a T x T buffer. */
    void (*attention_fwd)(void *out, float *lse, const void *q, const void *k, const void *v,
                          const int32_t *seg_start, int B, int T, int H, int KV, int D);
    /* dq WRITE; dk, dv WRITE (shapes as q, k, v) */
    void (*attention_bwd)(void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse,
                          const void *q, const void *k, const void *v, const int32_t *seg_start,
                          int B, int T, int H, int KV, int D);

    /* SwiGLU: out[N,F] = silu(gate) * up */
    void (*swiglu_fwd)(void *out, const void *gate, const void *up, int N, int F);
    /* dgate, dup WRITE */
    void (*swiglu_bwd)(void *dgate, void *dup, const void *dout, const void *gate, const void *up, int N, int F);

    /* elementwise y[n] += x[n] (residual adds) */
    void (*add_inplace)(void *y, const void *x, size_t n);

    /* Fused lm_head + cross-entropy: logits = x[N,C] W[V,C]^T computed in chunks of tokens, never all at once.
     * targets[N]: token id, or -1 for "not trained". Returns (via loss_sum, host double) the sum over trained
     * tokens of -log softmax(logits)[target] (fp32 math, double accumulation).
     * If dx != NULL: dx[N,C] = grad_scale * dL/dx (WRITE) and dw[V,C] += grad_scale * dL/dW, where L is the
     * SUM of token losses (so grad_scale = 1/total trained tokens of the global batch gives the mean). */
    void (*classifier)(double *loss_sum, void *dx, void *dw, const void *x, const void *w, const int32_t *targets,
                       int N, int C, int V, float grad_scale);

    /* fp32 flat-buffer ops used by the optimizer / ZeRO engine (all on backend memory) */
    /* returns sum of squares of g[n] (as double, on host) */
    double (*sumsq)(const void *g, size_t n);
    /* the same sum, bit for bit, written to out (backend memory, one double) in stream order, the host not waiting:
     * the offload's host gradient path takes each piece's sum before its download and reads them all with one
     * copy_d2h after the backward (src/zero/zero_hgrad.c) */
    void (*sumsq_to)(double *out, const void *g, size_t n);
    /* g[n] *= s (act) */
    void (*scale)(void *g, float s, size_t n);
    /* 1 if any of g[n] is inf or nan */
    int (*nonfinite)(const void *g, size_t n);
    /* AdamW on fp32 master p, moments m, v, with gradient g (act dtype, multiplied by gscale first);
     * t = 1-based step for bias correction; decoupled decay: p -= lr*wd*p; then p -= lr*mhat/(sqrt(vhat)+eps).
     * If p_act != NULL also writes the updated params in act dtype there. */
    void (*adamw)(float *p, void *p_act, const void *g, float *m, float *v, size_t n, float gscale,
                  float lr, float beta1, float beta2, float eps, float wd, int t);

    /* Attention against a paged KV cache for a ragged batch (qwen-ft serve and generate; decode_attention_cpu.c
     * / _cuda.cu). N new tokens of any number of sequences: token n belongs to sequence seq[n] and sits at position
     * pos[n] of it. The caches kpool, vpool [nblocks, bs, KV, D] are cut into blocks of bs positions; position p of
     * sequence s lives in block btab[s*maxb + p/bs], slot p%bs. First writes k, v [N, KV, D] there, then query n,
     * q[N, H, D], attends positions 0 .. pos[n] of its sequence (causal, GQA, scale 1/sqrt(D)); out[N, H, D] WRITE.
     * seq, pos, btab are backend memory; max_len (host) bounds every pos[n] + 1 (<= maxb * bs): the GPU sizes its
     * split of the positions by it. k = v = NULL: the tokens' k and v are in the pools already (decode_qkv wrote
     * them), only the attention runs. On the CPU table each query is one softmax in position order, so a token's
     * result does not depend on the tokens beside it in the call (serve's greedy replies equal generate's). */
    void (*attention_paged)(void *out, const void *q, const void *k, const void *v, void *kpool, void *vpool,
                            const int32_t *seq, const int32_t *pos, const int32_t *btab, int N, int maxb, int bs,
                            int H, int KV, int D, int max_len);

    /* Asynchronous copies (offload): copy_start queues a copy of `bytes` (dir QF_COPY_H2D: dst backend, src host;
     * QF_COPY_D2H: dst host, src backend) on the backend's copy engine, ordered after everything queued on the
     * compute stream so far, and returns a ticket. copy_finish(ticket, host_wait): host_wait = 0 makes the compute
     * stream wait for the copy (work queued afterwards sees the data; the host goes on), 1 blocks the caller until
     * the copy is done (host buffers may then be read or reused). Every ticket is finished exactly once, at most
     * QF_COPY_TICKETS outstanding. Host buffers should be page-locked (pin_memory) for the copy to overlap.
     * dir | QF_COPY_AFTER_PREV orders the copy only after the previous copy of its direction (no new order on the
     * compute stream): the next piece of a source that an earlier copy was already ordered after, so that work
     * queued since does not hold it back. The CPU table copies at once and returns 0. */
    int (*copy_start)(void *dst, const void *src, size_t bytes, int dir);
    void (*copy_finish)(int ticket, int host_wait);
    /* Blocks the calling host thread until the copy of `ticket` is done, without finishing the ticket (the thread
     * that started it still calls copy_finish): the one call another host thread (the offload AdamW) may make. */
    void (*copy_wait)(int ticket);

    /* A side stream for work that may overlap what is queued after it (the GPU-resident ZeRO engine's optimizer
     * step overlapping the next forward unit by unit, src/zero/zero.c): between side_begin() and side_end() every op
     * runs on the side stream, after everything queued on the compute stream before side_begin; side_mark() (inside)
     * returns a mark of the side work issued so far; side_wait(mark) (outside) makes the compute stream wait for it,
     * the host not waiting. Work on the compute stream that reads or writes what the side work touches waits for
     * its mark first; a mark stays valid for the next QF_SIDE_MARKS marks. Inside a CUDA graph capture side_begin
     * spoils the capture and the ops stay on the capturing stream (marks -1, waits on them no-ops). The CPU table
     * runs every op at once: marks 0, waits no-ops. */
    void (*side_begin)(void);
    int (*side_mark)(void);
    void (*side_end)(void);
    void (*side_wait)(int mark);

    /* NVTX ranges around units, collectives, copies and the optimizer, so nsys timelines read naturally; no-ops
     * on the CPU table. Pushes and pops nest per host thread. */
    void (*range_push)(const char *name);
    void (*range_pop)(void);

    /* Bytes copied between host and device since the backend started, per direction: bytes[QF_COPY_H2D],
     * bytes[QF_COPY_D2H], counted in copy_h2d, copy_d2h and copy_start (what crosses PCIe for the backend's own
     * copies; NCCL's traffic is not in it). The training monitor's PCIe figure (src/train/monitor.c). The CPU
     * table moves nothing: 0 and 0. */
    void (*copy_bytes)(uint64_t bytes[2]);

    /* Greedy decoding without copying logits to the host (qwen-ft serve): out_host[r] = the index of the largest of
     * row r of x[n, V] (act dtype), the first one on ties, as the host argmax over the rows' fp32 values (exact
     * widenings of act) picks it; NaNs never win (the CPU table's row whose first value is NaN picks 0, as
     * generate/sample.c does). logprob_host (NULL: not wanted): each pick's log-softmax, -log sum_v exp(x_v - max)
     * (the CPU table sums in double in index order, as serve's host path; the GPU's order differs in the last
     * bits). Returns with the outputs filled (one sync). */
    void (*argmax_rows)(int32_t *out_host, float *logprob_host, const void *x, int n, int V);

    /* The decoding fast path (qwen-ft serve: a paged call of a few tokens through a layer without q/k norms), each
     * the unfused ops' result in fewer passes over the weights:
     *   decode_qkv: ln = rmsnorm_fwd(x, ln_w); q, k, v = matmul_fwd(ln, wq|wk|wv, bq|bk|bv); rope_fwd on q and k
     *               (pos, theta); k and v written into the pools as attention_paged's first step writes them (then
     *               call attention_paged with k = v = NULL);
     *   decode_mlp: out = swiglu_fwd(matmul_fwd(ln, wg), matmul_fwd(ln, wu)), ln = rmsnorm_fwd(x, ln_w).
     * Each returns 1 when it ran and 0, having done nothing, where the table does not take those shapes (the caller
     * runs the unfused ops). The values are the unfused sequence's: bit for bit on the CPU table (it runs that
     * sequence) and on the CUDA bf16 / fp16 tables (kernels/cuda/decode_fused_cuda.cu: the same roundings in the
     * same order; tested bit for bit on bf16 and fp16, fp32 within 1e-6). */
    int (*decode_qkv)(const qf_decode_qkv *a);
    int (*decode_mlp)(const qf_decode_mlp *a);

    /* fp8 tables only (NULL elsewhere: the caller checks): the W of the next matmul_fwd / matmul_fwd_add /
     * matmul_bwd call (that call consumes the tag) is parameter `id` of the model's specs at parameter version
     * `version`, a number the owner of the parameters (the ZeRO engine) changes whenever any parameter value may
     * have changed (0: unknown, nothing reused). The table then takes W's amax once per (id, version) and reuses it
     * for every later call with the same pair (the backward, a recomputed forward, the next micro-batch: the same
     * scale, the same results bit for bit), however W's buffer moves (ZeRO-3 reuses gathered buffers: a pointer is
     * no identity); with an amax history (qf_cuda_fp8_set_amax_history) a new version's scale comes from the
     * history. id < 0: forget every saved scale and history (a new owner's versions start again). */
    void (*fp8_weight)(int id, uint64_t version);
    /* fp8 tables only (NULL elsewhere): the x of the next matmul_fwd / matmul_bwd is the x of the previous matmul
     * call, of the same kind (forward after forward, backward after backward), and unchanged since: the table may
     * use that call's fp8 copy of x (its cast and scale) instead of quantizing x again. The table checks what it can
     * (the same pointer, N and IN; the previous call left such a copy and nothing reallocated it; that call's output
     * did not overlap x) and otherwise quantizes as usual; that x was not written in between is the caller's word.
     * The model gives it for k and v after q (ln1) and up after gate (ln2), in the forward and the backward. */
    void (*fp8_same_x)(void);
    /* fp8 tables only (NULL elsewhere), effective with fp8.save_inputs (qf_cuda_fp8_set_save_inputs): mode 1, the
     * next matmul_fwd keeps its input's quantized transpose q(x)^T (and scale) under `key` for the backward; mode 2,
     * the next matmul_bwd's x is the x the forward saved under `key`, unchanged since (the caller's word; the table
     * checks the pointer, N and IN): its wgrad takes the saved copy instead of quantizing x again. */
    void (*fp8_saved_x)(int key, int mode);

    /* CUDA graphs (qwen-ft serve's decode step; kernels/cuda/graph_cuda.cu): runs the GPU work that body(arg) queues,
     * as one graph replay where the table can. `key` names everything the work depends on that is not in device
     * memory (shapes, pointers, host scalars): two calls with the same key must queue the same launches with the same
     * arguments; values that change between calls (tokens, positions, tables) live in device buffers filled before the
     * call. The CUDA tables run body eagerly the first time a key is seen (the warm-up: scratch and cuBLASLt plans
     * settle), capture it the second time, then replay the graph (at most 64 cached, least recently used evicted); a
     * graph is recaptured when the backend's scratch or split counters grew since its capture, and graphs are off for
     * the rest of the run (one line on stderr, the work runs eagerly) when a capture or instantiation fails. body
     * must not copy to or from the host, sync, allocate or free. Returns 1 when a graph ran (captured or replayed),
     * 0 when body ran eagerly. body = NULL: forget every cached graph and key (their owner frees the buffers they
     * point into; qf_model_free). The CPU table (and tables that cannot: fp8) just call body(arg) and return 0.
     * `family` (0: none) names the keys whose work differs only in kernel arguments (a decode step whose attention
     * bound moved on): a new key whose family has a graph cached is captured at once (no warm-up) and that graph's
     * exec updated in place (cudaGraphExecUpdate) instead of a new one instantiated; where the update is refused
     * (another launch sequence) the new graph is instantiated as any other. */
    int (*graph_run)(uint64_t key, uint64_t family, void (*body)(void *arg), void *arg);

    /* attention_paged's first step alone: k, v [N, KV, D] into the pools at each token's slot (arguments as
     * attention_paged's). Optional: a table sets it (with attention_prompt) where its tensor-core attention is much
     * faster than attention_paged over a prompt chunk, and the paged model then runs a call's tail of prompt chunks
     * (src/model/paged_prompt.h) as kv_append_paged + attention_prompt. The CUDA tables set it (Qwen2.5-7B, 600
     * prompt tokens: the mma.sync kernel 41 us a layer against 237 for attention_paged); the CPU table leaves it
     * NULL: there one attention_paged for every token keeps each token's arithmetic independent of
     * how a prompt is cut into calls (serve's greedy replies equal generate's, bit for bit). */
    void (*kv_append_paged)(void *kpool, void *vpool, const void *k, const void *v, const int32_t *seq,
                            const int32_t *pos, const int32_t *btab, int N, int maxb, int bs, int KV, int D);
    /* attention_fwd for the paged model's prompts (with kv_append_paged, optional as it is): the same arithmetic
     * contract, for calls whose segments change every call. The CUDA tables run the mma.sync (or generic) kernels,
     * never cuDNN's, which waits for a read-back of the segment layout and builds a plan per new shape bucket. */
    void (*attention_prompt)(void *out, float *lse, const void *q, const void *k, const void *v,
                             const int32_t *seg_start, int B, int T, int H, int KV, int D);

    /* argmax_rows without the read-back (decoding one call ahead, src/model/paged_ahead.h): ids[n] (backend int32)
     * and logprob[n] (backend fp32; NULL: none) = the values argmax_rows returns, queued on the compute stream (no
     * copy to the host, no sync), so the next call can take the picks as its tokens (copy_d2d) before the host
     * reads them (copy_start). On the CPU table it is argmax_rows. */
    void (*argmax_rows_dev)(int32_t *ids, float *logprob, const void *x, int n, int V);

    /* The joined projections of the paged model's calls of more than two tokens (src/model/model.c, a model laid
     * out with QF_MODEL_JOINED: each layer's wq, wk, wv one [(H + 2 KV) D, C] matrix, their biases one vector, and
     * wg, wu one [2F, C]), so that one matmul_fwd reads each set of weights in one pass instead of three or two:
     *   qkv_rope: qkv [N, (H + 2 KV) D] (each row q | k | v) into q [N, H D] and k [N, KV D] rotated as rope_fwd
     *             rotates them (pos, theta) and v [N, KV D] as it is;
     *   swiglu_joined: out [N, F] = swiglu_fwd(gate, up) of gu [N, 2F] (each row gate | up).
     * The values are those of the unjoined ops (the same arithmetic, bit for bit). Optional: NULL keeps the
     * model on three and two matmuls. */
    void (*qkv_rope)(void *q, void *k, void *v, const void *qkv, const int32_t *pos, int N, int H, int KV, int D,
                     double theta);
    void (*swiglu_joined)(void *out, const void *gu, int N, int F);
} qf_ops;
enum { QF_COPY_H2D = 0, QF_COPY_D2H = 1, QF_COPY_AFTER_PREV = 2, QF_COPY_TICKETS = 256, QF_SIDE_MARKS = 1024 };

const qf_ops *qf_ops_cpu(void);
/* *out = the CPU table with kv_append_paged and attention_prompt set: the paged model's prompt path on the host
 * (tests) */
void qf_ops_cpu_with_prompt(qf_ops *out);

/* The host AdamW of optimizer offload (kernels/cpu; host memory on every backend): the table's adamw with the
 * gradients g[n] in act dtype act_dtype (QF_DT_*) widened on the fly and the updated parameters rounded to act
 * into pact[n] (NULL: none; may alias g), in one pass of `threads` OpenMP threads (<= 0: the default). The same
 * float operations as qf_ops_cpu()->adamw after act_to_f32, so the results are bitwise those of that sequence. */
void qf_cpu_adamw_act(float *p, void *pact, const void *g, int act_dtype, float *m, float *v, size_t n, float gscale,
                      float lr, float beta1, float beta2, float eps, float wd, int t, int threads);
/* Flat act buffers in host memory (kernels/cpu/host_act_cpu.c; the offload engine's host gradients): sum of
 * squares (as the CPU table's sumsq: the same chunks, so fp32 results are the same bits), y[n] += x[n] (fp32 math,
 * rounded to act to nearest even), fp32 -> act, and one element set to NaN (fault injection). threads <= 0: the
 * default. */
double qf_cpu_act_sumsq(const void *g, int act_dtype, size_t n, int threads);
void qf_cpu_act_add(void *y, const void *x, int act_dtype, size_t n, int threads);
void qf_cpu_act_from_f32(void *dst, const float *src, int act_dtype, size_t n, int threads);
void qf_cpu_act_set_nan(void *p, int act_dtype, size_t i);
/* fp8 tables (below): a linear layer with fewer input or output features runs in bf16 (kernels/cuda/matmul_fp8.cu) */
enum { QF_FP8_MIN_DIM = 1024 };

#ifdef QWENFT_HAVE_CUDA
/* kernels/cuda: devices visible to this process, and "CUDA runtime x.y | cuBLASLt n | NCCL n" */
int qf_cuda_device_count(void);
void qf_cuda_versions(char *buf, int cap);
/* The CUDA op tables, on the device current at the first call (cudaSetDevice first); NULL when no usable GPU.
 *   qf_ops_cuda():     act = bf16 (act_bytes 2), fp32 accumulation, cuBLASLt GEMMs, tensor-core attention.
 *   qf_ops_cuda_f32(): act = fp32, the same kernels in fp32 (GEMMs without TF32): for exact comparisons.
 *   qf_ops_cuda_f16(): act = IEEE fp16 (act_bytes 2), fp32 accumulation, the same kernels (fp16 cuBLASLt GEMMs,
 *                      tensor-core attention): the fp16.enabled table. Values beyond 65504 become inf; the caller
 *                      keeps fp32 master weights and applies DeepSpeed's dynamic loss scaling (src/train/loss_scale.c).
 * All share one context: one compute stream (every op and copy is ordered on it; nothing syncs the device on the
 * hot path), one cuBLASLt handle. copy_d2h and the ops returning host values (sumsq, nonfinite, classifier's
 * loss_sum) sync the stream; sync() = stream sync. copy_h2d's host source may be reused on return. alloc/free
 * are stream-ordered (cudaMallocAsync/cudaFreeAsync on the compute stream, from a pool that keeps its memory). */
const qf_ops *qf_ops_cuda(void);
const qf_ops *qf_ops_cuda_f32(void);
const qf_ops *qf_ops_cuda_f16(void);
/* qf_ops_cuda_fp8(recipe, why, cap): the qf_ops_cuda() table (bf16 act) whose matmul_fwd / matmul_bwd run their
 * GEMMs on fp8 tensor cores (kernels/cuda/matmul_fp8.cu): operands quantized with current scaling (each tensor's, or
 * with QF_FP8_ROWWISE each row's, own amax; a weight tagged by fp8_weight: its amax once per parameter version, or
 * with an amax history delayed), bf16 in and out, fp32 accumulation. A call whose N, IN or
 * OUT is not a multiple of 16 runs in bf16. NULL, with the reason in why[cap], when this GPU (compute capability
 * < 8.9) or the installed cuBLASLt cannot run the recipe; the first call probes it with a small GEMM. The model
 * calls matmul_* for the decoder's linear layers only: the lm_head and loss (classifier) stay bf16. */
enum { QF_FP8_TENSORWISE = 0, QF_FP8_ROWWISE = 1 };
const qf_ops *qf_ops_cuda_fp8(int recipe, char *why, int cap);
/* GEMMs the fp8 tables ran in fp8 (counts[0]) and in bf16 (counts[1]: dimensions or alignment fp8 cannot take,
 * or a layer narrower than QF_FP8_MIN_DIM in IN or OUT, where quantizing costs more than fp8 saves) */
void qf_cuda_fp8_counts(uint64_t counts[2]);
/* the narrowest IN / OUT the fp8 tables take in fp8: QF_FP8_MIN_DIM, or env QWENFT_FP8_MIN_DIM (a test hook,
 * docs/testing.md); set_min_dim: the same hook for the GPU tests */
void qf_cuda_fp8_set_min_dim(int d);
int qf_cuda_fp8_min_dim(void);
/* The CUDA split attention's (attention_paged) form for 16-bit tables at head_dim 128: 2 (QWENFT_DECODE_ATTN=inflight)
 * its cache loads issued ahead of their use, the v loads after the scores; 1 (QWENFT_DECODE_ATTN=early) a decoding
 * split's v rows loaded beside its k rows; 0 (QWENFT_DECODE_ATTN=plain) each load waited for in turn; 3
 * (QWENFT_DECODE_ATTN=rows) as 2, the split's pool rows looked up before the programmatic wait and q loaded 16 bytes
 * a thread; 4 (the default from session 23 to 26; QWENFT_DECODE_ATTN=pre) as 3, the k and v rows of earlier calls copied
 * into shared memory before the wait (calls of up to 64 tokens, splits of up to 64 positions; others run as 3)
 * (bench hooks, docs/testing.md);
 * the same values bit for bit. set: the same switch for the GPU tests (after the table's first use) */
void qf_cuda_set_decode_attn_mlp(int form);
int qf_cuda_decode_attn_mlp(void);
/* 5 (the default until session 33; QWENFT_DECODE_ATTN=cluster) is form 4 for every call but those of up to
 * qf_cuda_decode_attn_cluster_n() tokens (QWENFT_DECODE_ATTN_CLUSTER_N, default 4) on 16-bit tables at head_dim 128
 * with at most 1024 positions on sm_90+: those run the cluster form (kernels/cuda/decode_attn_cluster_cuda.cu; not
 * bit for bit the split forms' values). launches: the cluster form's so far (the GPU tests check where it ran) */
int qf_cuda_decode_attn_cluster_n(void);
long qf_cuda_attn_cluster_launches(void);
/* 6 (the default; QWENFT_DECODE_ATTN=mma) is form 5, with the calls the cluster form does not take on the tensor-core
 * form (kernels/cuda/decode_attn_mma_cuda.cu) on 16-bit tables at head_dim 128 with at most 16 query heads a kv head
 * (not bit for bit the split forms' values). launches: its launches so far */
long qf_cuda_attn_mma_launches(void);
int qf_cuda_attn_cluster_available(void); /* the device has thread-block clusters (sm_90+) */
/* the cluster form's launches in clusters of 16 CTAs so far (the default where clusters of 8 would take over 40 KiB
 * of shared memory a CTA and the call's clusters of 16 fit on the device at once; QWENFT_ATTN_CLUSTER_RANKS=8|16 for
 * every call), and how many fit at once (0: none run here) */
long qf_cuda_attn_cluster16_launches(void);
int qf_cuda_attn_cluster16_fit(void);
/* What the fp8 tables did (tensorwise), since the backend started: GEMMs in fp8 / in bf16 (qf_cuda_fp8_counts),
 * tensor amax passes (activations, gradients and weights), the weights' share of them, weight casts that took a
 * saved scale (the same parameter version: no pass) or a new version's scale from the amax history (no pass), and
 * calls whose x was the previous call's (fp8_same_x). */
typedef struct qf_cuda_fp8_stat {
    uint64_t gemm_fp8, gemm_bf16, amax_passes, weight_amax_passes, weight_reused, weight_delayed;
    uint64_t x_reused; /* calls that took the previous call's fp8 x (fp8_same_x): no amax pass, no cast of x */
    uint64_t x_saved, x_saved_used; /* fp8.save_inputs: forwards that saved q(x)^T, wgrads that used one */
    uint64_t outer_after; /* rowwise GEMMs run as a unit-scale GEMM + a kernel applying the row and column scales
                           * (no outer-vector fp8 kernel in this cuBLASLt for this GPU) */
} qf_cuda_fp8_stat;
void qf_cuda_fp8_stats(qf_cuda_fp8_stat *s);
/* fp8.amax_history_len: 0 current scaling of the weights (their own amax at each new parameter version), n > 0
 * delayed scaling from the max of each weight's last n amaxes (kernels/cuda/fp8.cuh); a change forgets every saved
 * scale. Activations and gradients are always current-scaled. */
enum { QF_FP8_HISTORY_MAX = 1024 };
void qf_cuda_fp8_set_amax_history(int n);
int qf_cuda_fp8_amax_history(void);
/* fp8.save_inputs: on, the forward keeps each fp8 linear layer's q(x)^T for the wgrad when the model asks
 * (fp8_saved_x; N x IN bytes per layer input, allocated at first use); off frees them */
void qf_cuda_fp8_set_save_inputs(int on);
int qf_cuda_fp8_save_inputs(void);
/* test_fp8_cuda --bench: GB/s (bytes read + written per second) of the fp8 cast kernels on a bf16 x[R, C] on the
 * device, reps timed runs each after a warm-up: gbs[0] fp8_amax, [1] fp8_quant, [2] fp8_quant recording the amax
 * (the history's cast), [3] fp8_quant_t with both layouts (dy's), [4] fp8_quant_t transposed only (x^T, W^T). */
void qf_cuda_fp8_bench_casts(const void *x, int R, int C, int reps, double gbs[5]);
/* alloc() returns NULL once the backend's device bytes would exceed `bytes` (gpu_memory_limit_gb; 0 = no limit).
 * current/peak count every buffer the backend holds: alloc()'s, its scratch and the cuBLASLt workspace. */
void qf_cuda_set_memory_limit(size_t bytes);
size_t qf_cuda_current_bytes(void);
size_t qf_cuda_peak_bytes(void);
/* The tables' alloc() calls are numbered: qf_cuda_alloc_mark() is the last number so far, and
 * qf_cuda_free_since(mark) frees (after a device sync) every buffer of a later alloc() still held, returning their
 * bytes: what a run's step left behind when it was left by longjmp (src/train/train.c). The backend's own
 * buffers (scratch, workspace, fp8 state) are not numbered and stay. */
uint64_t qf_cuda_alloc_mark(void);
/* the first step's rescue (kernels/base/util.h qf_oom_rescue): n zero bytes of managed memory, numbered, freed by
 * the tables' free(); NULL when even that fails */
void *qf_cuda_alloc_rescue(size_t bytes);
size_t qf_cuda_free_since(uint64_t mark);
/* which attention path the CUDA tables take (cuDNN fused or mma.sync, and why), for the run header */
void qf_cuda_attention_describe(char *buf, int cap);
/* What graph_run did since the backend started (or the last qf_cuda_graph_reset): calls that ran eagerly as a key's
 * warm-up, captures, replays, graphs dropped because the scratch or split counters grew after their capture
 * (recaptured), graphs evicted (least recently used), graphs cached now; off: 1 once a failure turned graphs off;
 * warmup_s, capture_s: host seconds spent in the warm-ups' eager bodies and in capturing and instantiating (with the
 * first launch): what a new key costs a decoding step over a replay. */
typedef struct qf_cuda_graph_stat {
    uint64_t warmups, captures, replays, regrown, evicted;
    uint64_t updated; /* new keys taken by updating their family's graph (no warm-up, no instantiation) */
    int cached, off;
    double warmup_s, capture_s;
} qf_cuda_graph_stat;
void qf_cuda_graph_stats(qf_cuda_graph_stat *s);
/* forgets every cached graph and key, zeroes the counters and turns graphs back on (tests, decode_bench) */
void qf_cuda_graph_reset(void);
/* grows the backend's scratch buffer to at least `bytes` (a test hook: graphs captured before are recaptured) */
void qf_cuda_scratch_reserve(size_t bytes);
/* the compute stream (a cudaStream_t), for NCCL and for events; NULL before qf_ops_cuda() succeeded */
void *qf_cuda_stream(void);
/* The pinned host <-> device copy rate of this GPU's link in GB/s (1e9 bytes/s) each way: one timed copy of
 * 256 MiB (64 or 16 MiB when that much cannot be allocated) each way on a stream of its own, after a warm-up;
 * not counted in copy_bytes. 0, or -1 (both -1) when no buffer could be had. After qf_ops_cuda*() succeeded. */
int qf_cuda_copy_peak(double *h2d_gbs, double *d2h_gbs);
#endif

#endif
