/* decode.h — the KV-cache decoding loop of `qwen-ft generate`: many prompts as one batch, prefill in chunks, then
 * one token per row per step, on any op table (CPU fp32, CUDA bf16/fp16/fp32), with the layers split across the
 * ranks of a communicator.
 *
 * Layer split: with W ranks, rank r holds decoder layers [r*L/W, (r+1)*L/W) with their KV caches; rank 0 also the
 * embedding, rank W-1 the final norm and lm_head (and the embedding again when tied). Each call of Tq tokens per
 * row runs rank 0 -> 1 -> ... -> W-1: a rank receives the residual stream [B*Tq, C] from the rank before it (MPI,
 * through host memory), runs its layers and sends the result on; the last rank sends the [B, V] logits to rank 0,
 * which samples, checks the stop conditions and broadcasts the next tokens. Every rank computes exactly what one
 * rank would, so the split changes no result. Weights are loaded per unit from the model source (each rank reads
 * only its own layers), resident on the device or streamed from host memory (src/generate/decode_units.h).
 *
 * The calls run through the model's paged mode (model.h), as serve's do: row b is sequence b, its cache one block of
 * S positions (block table b -> b), so generate takes serve's decoding path — the fused q/k/v and MLP kernels at one
 * or two rows, a decoding step as one CUDA graph (cuda_graphs), and greedy rows without a repetition penalty
 * picked on the device (only the ids cross to the host); with one rank, those picks feed the next step on the device,
 * which is queued before the host reads them (decode_ahead). */
#ifndef QF_DECODE_H
#define QF_DECODE_H
#include <mpi.h>
#include <stdint.h>
#include "tokenizer.h"
#include "ops.h"
#include "gen_prompts.h"
#include "model_config.h"
#include "sample.h"

/* Why a row stopped */
enum { QF_FINISH_LENGTH = 0, QF_FINISH_STOP_ID = 1, QF_FINISH_STOP_STRING = 2 };

/* Called on rank 0 for every accepted token of row b (streaming). */
typedef void (*qf_decode_token_fn)(void *ctx, int row, int32_t id);

typedef struct qf_decode_opts {
    const char *model;           /* model source (HF dir, HDF5 model, checkpoint file or directory) */
    const qf_model_config *cfg;  /* its config */
    const qf_ops *ops;           /* this rank's op table */
    int max_new;                 /* new tokens per row at most */
    qf_sample_opts sample;
    uint64_t seed;               /* row i samples from the stream qf_rng_seed2(seed, i) */
    int stream;                  /* 1: decoder layers stream from host memory (src/generate/decode_units.h) */
    int cuda_graphs;             /* 1: decoding steps as one CUDA graph each where the table has graphs (not streamed) */
    int decode_ahead;            /* 1: with one rank and greedy picks on the device, each decoding step is queued
                                  * before the host reads the previous step's picks (model/paged_ahead.h) */
    /* rank 0 only: */
    const int32_t *stop_ids;     /* a row stops after generating one of these (kept in its output) */
    int nstop_ids;
    const char *const *stop_strs;/* ... or once its decoded text contains one of these (needs tok) */
    int nstop_strs;
    const qf_tokenizer *tok;
    qf_decode_token_fn on_token;
    void *on_token_ctx;
} qf_decode_opts;

typedef struct qf_decode_out { /* rank 0: per prompt */
    int32_t **ids;               /* [B][n[b]] the new tokens */
    int *n, *finish;             /* [B] */
    int B;
    double prefill_s, decode_s;  /* wall time of the prefill and of the decoding steps */
    const char *graphs;          /* "on (decode step)" or "off (why)": the decoding steps as CUDA graphs (static) */
    const char *ahead;           /* "on" or "off (why)": the decoding steps queued one ahead (static) */
} qf_decode_out;

/* Tokens per row of one prefill call, for B rows of prompts of up to maxn tokens (a budget of 4096 tokens). */
int qf_decode_chunk(int B, int maxn);
/* The layers [l0, l1) rank r of W holds. */
void qf_decode_split(int L, int W, int r, int *l0, int *l1);

/* Collective over comm. prompts: significant on rank 0 (broadcast inside). 0 or an exit code (e filled on every
 * rank; allocation failures are exit 3). */
int qf_decode_run(const qf_decode_opts *o, const qf_gen_prompts *prompts, MPI_Comm comm, qf_decode_out *out,
                  qf_err *e);
void qf_decode_out_free(qf_decode_out *out);

#endif
