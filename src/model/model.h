/* model.h — the Qwen decoder (Qwen2 / Qwen3 dense; Qwen v1 and 1.5 map onto Qwen2) on flat buffers.
 *
 * Parameters live in ONE flat buffer in the order of qf_param_specs() (io/hf.h). The buffer is cut into units,
 * each contiguous: unit 0 = embedding, units 1..L = decoder layers, unit L+1 = final norm (+ lm_head when untied).
 * A unit is what ZeRO all-gathers, reduce-scatters, offloads and checkpoints as one piece; the model reaches a
 * unit's parameters and gradients only through the hooks below, so ZeRO-3 can hand it a gathered buffer.
 * Activations (N = B*T tokens) are allocated once. Per layer, a recomputation mode (qf_ackpt): NONE keeps every
 * activation; FULL keeps only the residual stream at the layer input and recomputes the layer just before its
 * backward; SELECTIVE keeps everything but the MLP intermediates (gate, up, silu(gate)*up: 3 N F per layer, the
 * largest part) and recomputes those two matmuls; POINTWISE keeps every GEMM output and recomputes only the two
 * RMSNorm outputs and silu(gate)*up (2 N C + N F per layer; no matmul, a few percent of a layer's time). The deck's
 * mode applies to the first rec_layers layers (all when < 0); the others keep everything. Recomputation is
 * deterministic: every mode gives the same values, bit for bit. */
#ifndef QF_MODEL_H
#define QF_MODEL_H
#include <stdint.h>
#include "hf.h"
#include "ops.h"
#include "deck/deck.h"
#include "loader.h"
#include "paged_prompt.h"
#include "mem_trial.h"
#include "model_config.h"
#include "profile.h"

/* Where the model finds unit u's parameters / gradients (base of the unit, act dtype). Default: the flat buffers. */
typedef struct qf_model_hooks {
    void *ctx;
    void *(*unit_params)(void *ctx, int unit);
    void *(*unit_grads)(void *ctx, int unit);
    /* called when the backward will no longer touch unit u's gradients of this micro-batch */
    void (*unit_grads_done)(void *ctx, int unit);
    /* called before the forward / backward first needs unit u's parameters (prefetch point) */
    void (*unit_will_use)(void *ctx, int unit, int backward);
    /* the parameters' version: changes whenever any parameter value may have changed (the engine's optimizer step,
     * loads, ...); NULL or 0: unknown. Before each linear layer the model names its weight and this version to the
     * op table (ops.h fp8_weight), which may then reuse what it derived from the same weight at the same version. */
    uint64_t (*param_version)(void *ctx);
} qf_model_hooks;

typedef struct qf_layer_ix { /* indices into specs, -1 when absent */
    int ln1, qw, qb, kw, kb, vw, vb, qn, kn, ow, ln2, gate, up, down;
} qf_layer_ix;

typedef struct qf_layer_acts {
    void *ln1;      /* [N,C] */
    float *rstd1;   /* [N] */
    void *q, *k, *v;/* [N,H*D], [N,KV*D], [N,KV*D]: after bias, q/k-norm and RoPE */
    void *qraw, *kraw; /* [N,H*D], [N,KV*D] before q/k-norm (qk_norm only) */
    float *rstdq, *rstdk; /* [N*H], [N*KV] */
    void *att;      /* [N,H*D] */
    float *lse;     /* [B,H,T] */
    void *mid;      /* [N,C] residual after attention */
    void *ln2;      /* [N,C] */
    float *rstd2;   /* [N] */
    void *gate, *up, *swi; /* [N,F] */
} qf_layer_acts;

typedef struct qf_model {
    qf_model_config cfg;
    const qf_ops *ops;
    int nspecs;
    qf_param_spec *specs;
    int64_t *offset;          /* [nspecs] element offset of each parameter in the flat buffer */
    int nunits;               /* L + 2 */
    int64_t *unit_off;        /* [nunits+1] flat range of each unit */
    int *spec_unit;           /* [nspecs] */
    qf_layer_ix *lix;         /* [L] */
    int ix_embed, ix_norm, ix_head; /* ix_head = ix_embed when tied */
    int64_t n_params;
    int joined_qkv, joined_gu; /* QF_MODEL_JOINED: paged calls join the q, k, v / the gate, up matmuls */
    void *params, *grads;     /* act [n_params]; grads may be NULL (eval-only) */
    qf_model_hooks hooks;

    /* activations for micro-batches of B rows of T tokens */
    int B, T, ackpt;          /* ackpt: qf_ackpt (deck.h), the deck's mode */
    int save_x;               /* this forward has a backward: fp8 tables may keep the layer inputs' fp8 copies */
    int *lmode;               /* [L] each layer's mode (training; NULL in paged mode) */
    void **acts; int nacts, cap_acts; /* every activation buffer, freed together */
    qf_profile *prof;         /* log.wall_clock_breakdown: phase marks and recomputation (NULL: off) */
    void **res;               /* [L+1] each [N,C]: input of layer l; res[L] = final residual */
    qf_layer_acts *la;        /* [L] (parts shared between layers aliased), or [1] scratch in paged mode */
    void *lnf; float *rstdf;  /* [N,C], [N] */
    void *dres, *dq, *dk, *dv, *datt, *dgate, *dup, *dswi, *dln; /* backward scratch */
    int32_t *d_tokens, *d_targets, *d_seg, *d_pos; /* [N] backend copies of the batch */
    size_t act_bytes;         /* bytes of activations + scratch */
    qf_mem_trial *trial;      /* a layout plan's set-up (mem_trial.h): failed allocations recorded (NULL: fatal) */

    /* The cached layers of the paged mode (qf_model_alloc_paged; S = 0 in training mode). The same layer_forward
     * runs, with attention_paged against the caches instead of attention_fwd; res[l] aliases resbuf[l % 2]. */
    int S, Tcap;              /* cache positions (all blocks); most tokens in one call */
    void **kc, **vc;          /* [L] each [S, KV, D]; NULL for layers this rank does not hold */
    void *resbuf[2];          /* [Tcap, C] each */
    void *dec_x, *dec_logits; /* [max_seqs, C]: the head's rows (gathered when not consecutive); [max_seqs, V] act */
    float *dec_logits_f32;    /* [max_seqs, V] */
    /* Paged mode (qf_model_alloc_paged, qwen-ft serve): one ragged row of T tokens of many sequences; kc/vc[l] are
     * block pools [nblocks, block_size, KV, D] (allocated as one row of S = nblocks * block_size positions). */
    int paged, block_size, max_seqs, maxb; /* maxb: block-table entries per sequence */
    int paged_len;                         /* this call: 1 + its largest position, rounded up to a multiple of
                                            * paged_step (at most maxb * block_size): attention's bound */
    int paged_step;                        /* QF_PAGED_LEN_STEP, or QWENFT_PAGED_LEN_STEP (a bench hook) */
    int32_t *d_seq, *d_btab;  /* [Tcap] sequence of each token; [max_seqs, maxb] block tables */
    qf_paged_prompt prompt;   /* the call's tail of prompt chunks on attention_fwd (paged_prompt.h; from = T: none) */
} qf_model;

/* Lays out parameters for cfg; flags: QF_MODEL_PARAMS / QF_MODEL_GRADS allocate flat parameter / gradient buffers
 * on the backend (tests and simple tools); the ZeRO engine passes 0 and serves units through the hooks. */
#define QF_MODEL_PARAMS 1
#define QF_MODEL_GRADS 2
/* QF_MODEL_JOINED (inference: qwen-ft serve and generate): each layer's q, k, v weights laid out adjacent, their
 * biases after them (training's order is q weight, q bias, k weight, ...), so that the paged model's calls project
 * q, k and v with one matmul_fwd and gate and up with another (ops.h qkv_rope, swiglu_joined; joined_qkv and
 * joined_gu say where the layout and the config allow it). Parameters are reached by name and offset everywhere, so
 * loading, export and random init are the same in either layout. */
#define QF_MODEL_JOINED 4
int qf_model_create(qf_model *m, const qf_model_config *cfg, const qf_ops *ops, int flags, qf_err *e);
/* Allocates activations for micro-batches of B x T, recomputation ackpt in the first rec_layers layers (< 0: all). */
int qf_model_alloc_acts(qf_model *m, int B, int T, int ackpt, int rec_layers, qf_err *e);
/* Frees what qf_model_alloc_acts allocated (training mode), so that it can run again (a layout plan's fallback). */
void qf_model_free_acts(qf_model *m);
/* What qf_model_alloc_acts allocates, for ab bytes per act element (estimate, memory plan). */
int64_t qf_model_act_bytes(const qf_model_config *c, int B, int T, int ackpt, int rec_layers, int64_t ab);
void qf_model_free(qf_model *m);

/* HF initialisation: every 2-D weight ~ N(0, initializer_range), biases 0, norm weights 1. Counter-based
 * (element j of parameter i depends only on seed, i, j), so any rank computes any range [b, e) of the flat
 * parameter space on its own, identically for every world size: out[e-b] (host fp32). */
void qf_model_init_random_range(const qf_model *m, uint64_t seed, int64_t b, int64_t e, float *out);
/* The same into the model's own flat buffer (QF_MODEL_PARAMS). Reading parameters from files is
 * store/model_io.h. */
void qf_model_init_random(qf_model *m, uint64_t seed);

/* Forward of one micro-batch; returns the summed token loss over its targets. When backward != 0, also runs the
 * backward and ACCUMULATES into the gradients d(sum loss)/dθ * grad_scale. */
double qf_model_step(qf_model *m, const qf_rows *r, float grad_scale, int backward);
/* Logits of a micro-batch to host memory [B*T, V] (tests). */
void qf_model_logits(qf_model *m, const qf_rows *r, float *out);

/* Residual stream at the input of layer l (l = L: the output of the last layer), [N, C] act, backend memory, of the
 * paged call in hand: where a layer-split rank receives its input and sends its output. */
void *qf_model_decode_residual(qf_model *m, int l);
/* Layers [l0, l1) of the current paged call: residual(l0) -> residual(l1), k/v written to their caches. */
void qf_model_decode_layers(qf_model *m, int l0, int l1);

/* ---- Paged KV-cache mode (qwen-ft serve and generate: src/serve/serve_engine.c, src/generate/decode.c) ----
 * Calls of up to Ntok tokens of up to max_seqs sequences in any mix (prefill chunks and decoding tokens), over a
 * pool of nblocks blocks of block_size positions per cached layer [l0, l1); a sequence addresses at most maxb
 * blocks. head != 0: the classifier for up to max_seqs rows a call. */
int qf_model_alloc_paged(qf_model *m, int Ntok, int max_seqs, int nblocks, int block_size, int maxb, int l0, int l1,
                         int head, qf_err *e);
/* What qf_model_alloc_paged allocates (the pools included; the prompt path's buffers counted whether or not the
 * table runs that path: at most 2 x Ntok packed rows of q, k, v and output, an over-count on the CPU table). */
int64_t qf_model_paged_bytes(const qf_model_config *c, int Ntok, int max_seqs, int nblocks, int block_size, int maxb,
                             int nlayers, int head, int64_t ab);
/* Starts a call of N <= Ntok tokens (host arrays): token n is tokens[n] of sequence seq[n] (< max_seqs) at position
 * pos[n]; btab[max_seqs * maxb] the block tables (entries of sequences in the call must cover their positions).
 * embed != 0: embeds the tokens into the residual of layer 0. Then qf_model_decode_layers. */
void qf_model_paged_begin(qf_model *m, const int32_t *tokens, const int32_t *seq, const int32_t *pos, int N,
                          const int32_t *btab, int embed);
/* The attention bound's granularity: calls whose largest positions round to the same multiple share one graph */
enum { QF_PAGED_LEN_STEP = 64 };
/* qf_model_paged_begin's copies alone (no kernel): tokens (NULL: not copied; only the embedding reads them), seq,
 * pos [N] and, when btab != NULL, the block tables (NULL: the device copy is still current). Small copies are
 * staged through pinned memory on the compute stream (ops.h copy_h2d): the host does not wait for them. */
void qf_model_paged_inputs(qf_model *m, const int32_t *tokens, const int32_t *seq, const int32_t *pos, int N,
                           const int32_t *btab);
/* The GPU work of the call set up by qf_model_paged_inputs: the embedding (embed != 0), layers [l0, l1) and, when
 * nrows > 0, the final norm and lm_head over rows[0..nrows) into the backend's logits (read them with
 * qf_model_paged_pick or qf_model_paged_read_logits). graph != 0: as one CUDA graph per shape (ops.h graph_run; key:
 * N, the layers, embed, nrows and rows[0], the bucketed paged_len), where the table has graphs, the profiler is off
 * and the rows follow each other (rows[i] = rows[0] + i); the caller vouches that the unit hooks only hand out
 * resident buffers (no copies, no syncs: decode_units without streaming). The values are the eager ones bit for
 * bit. 1 when a graph ran. */
int qf_model_paged_run(qf_model *m, int embed, int l0, int l1, const int32_t *rows, int nrows, int graph);
/* After qf_model_paged_run with nrows >= n: the greedy picks (as qf_model_paged_argmax), or the logits [n, V] fp32 */
void qf_model_paged_pick(qf_model *m, int n, int32_t *ids, float *logprob);
void qf_model_paged_read_logits(qf_model *m, int n, float *out);
/* Final norm and lm_head on the call's tokens rows[0..n) (n <= max_seqs): out[n, V] host fp32. */
void qf_model_paged_logits(qf_model *m, const int32_t *rows, int n, float *out);
/* The same head, greedy: ids[n] (host) = each row's argmax on the backend (ops.h argmax_rows), with no logits
 * copied to the host; equals the argmax of qf_model_paged_logits' rows. logprob[n] (NULL: none): the picks'
 * log-softmax. */
void qf_model_paged_argmax(qf_model *m, const int32_t *rows, int n, int32_t *ids, float *logprob);

/* Element range of parameter i within the flat buffer, its pointer given the unit base. */
static inline int64_t qf_model_param_off(const qf_model *m, int i) { return m->offset[i]; }

#endif
