/* serve_engine.h — the engine of `qwen-ft serve`: one thread owns the model and runs its steps; HTTP threads submit
 * jobs into a bounded queue and read their tokens back.
 *
 * Continuous batching: between two model calls the engine drops finished and cancelled sequences (their KV blocks
 * go back to the free list), gives the running sequences the blocks their next call writes, and admits queued jobs
 * in arrival order while a slot (--max-batch) and the blocks of the job's prompt are free with a watermark (1% of
 * the pool, at least one block) left behind. When a running sequence's next block is not to be had, the sequence
 * admitted last is preempted (vLLM's recompute): its blocks go back (their full rows registered in the prefix
 * cache), it goes back to the front of the queue with its tokens so far, and when it is admitted again the prompt
 * and those tokens are prefilled anew (from the cache where it still holds them) and it decodes on; the oldest
 * always runs, a sequence alone always fits the pool, so every sequence finishes. With --preemption off a job takes
 * its whole budget's blocks (prompt + max_new) at admission and is never preempted. One call then carries one token
 * of every decoding sequence followed by prompt chunks of the sequences still in prefill, at most `chunk` prompt
 * tokens a call, so a long prompt is spread over several calls and never stalls the running sequences for more
 * than one chunk; a call with no decoding sequence (nothing to stall) takes up to chunk + max_batch prompt tokens.
 * With --prefix-cache on a job's prompt starts where the cached blocks it shares end (serve_kv.h): its prefill
 * skips them; the blocks of a prompt are registered when its last chunk is in a call.
 * The call is one ragged batch through the model's paged mode (model.h) and the op table's
 * attention_paged; each token's arithmetic does not depend on the tokens beside it on the CPU table, so a
 * greedy continuation equals `qwen-ft generate`'s whatever the traffic. Sampling is generate's (sample.h), each
 * job on its own stream qf_rng_seed2(seed, 0): the stream of generate's first prompt.
 *
 * Decoding one call ahead (--decode-ahead on, one rank): when every row of a call is picked greedily on the backend,
 * the engine queues the next call before it reads this one's picks: the next call's decoding rows are this call's
 * head rows in the same order, their tokens this call's picks, copied on the backend (model/paged_ahead.h), and the
 * host reads the picks, updates the jobs and answers the clients while the GPU runs the next call. A job that ends
 * with the picks read (EOS, a stop string, a cancel) has one row computed for nothing in the call already queued;
 * its result is dropped. The flight lands first (the engine reads its picks before it builds the call) when a row
 * of it has left, a prompt would need its logits on the host, or every row ends with it by length.
 *
 * Speculative decoding (--speculate N > 0; decoding ahead is then off): a decoding sequence gets up to N draft
 * tokens after its own row in the call (serve_spec.h: the chain of proposals, each the token that followed the latest
 * earlier occurrence of the last few tokens before it), at the next positions, each a head row. Its own row's pick is
 * its next token as always; draft i's row's pick is taken too while draft i is the pick before it (the model saw at
 * that row the very tokens it would have been fed), so a call may give a sequence up to N + 1 tokens and greedy
 * replies are those of decoding one token a call. A sampled sequence's token i is drawn from its own stream
 * qf_rng_seed2(seed, QF_SPEC_STREAM + i) with its position's proposal first (sample.h qf_sample_pick_first: taken
 * with its probability, else a token drawn from the rest): the distribution is the model's, and the draw depends
 * neither on the drafts fed nor on the traffic, so a seeded request gives the same tokens at any --speculate N > 0
 * (not those of --speculate 0, whose draws follow generate's one stream). The drafts are bounded by the head rows
 * the running sequences leave (--max-batch), by the tokens the sequence may still generate, and by the blocks free
 * beyond the watermark: a draft never preempts a sequence or evicts a cached block. A rejected draft's row in the
 * cache lies past the sequence's last position, so no query reads it before the next call writes that position
 * again. */
#ifndef QF_SERVE_ENGINE_H
#define QF_SERVE_ENGINE_H
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include "generate/decode_units.h"
#include "generate/sample.h"
#include "model/model.h"
#include "model/paged_ahead.h"
#include "model_config.h"
#include "serve_kv.h"
#include "serve_metrics.h"
#include "serve_json.h"
#include "serve_spec.h"
#include "serve_req.h"
#include "tokenizer.h"
#include "util/rng.h"

/* why a job ended */
typedef enum { QF_JOB_RUNNING = 0, QF_JOB_LENGTH, QF_JOB_EOS, QF_JOB_STOP_SEQ, QF_JOB_CANCELLED } qf_job_finish;

typedef struct qf_serve_job {
    /* set before qf_engine_submit, read-only after */
    int32_t *ids;             /* [plen + max_new]: the prompt, then the generated tokens */
    int plen, max_new;
    qf_sample_opts sample;
    uint64_t seed;
    char *const *stop;        /* stop strings */
    int nstop;
    double t_arrive;          /* qf_now() at arrival */
    int want_logprob;         /* fill logprob (TGI details and streams): an O(V) pass with exp per token */
    int top_n;                /* 0..QF_SAMPLE_TOP_MAX: fill top_id/top_lp (OpenAI top_logprobs; logits on the host) */
    int json;                 /* response_format json_object: each pick under the JSON mask (serve_json.h) */
    int ignore_eos;           /* a stop id does not end the job (vLLM's ignore_eos) */
    int min_new;              /* the stop ids are masked while fewer tokens than this are generated (min_tokens) */
    const struct qf_serve_job *after; /* a sibling choice queued before it with the same prompt (OpenAI's n): with
                                       * the prefix cache on, admitted once that one's prompt is in the cache */
    int prompt_lp;            /* fill plp (and ptop_* when top_n > 0): the prompt's own log-probabilities (OpenAI
                               * completions' echo, TGI's decoder_input_details); the prompt is then prefilled
                               * whole (no prefix cache) and its calls run the head over every prompt row */
    int ptop_n;               /* 0..QF_SAMPLE_TOP_MAX alternatives a prompt token (echo: top_n; vLLM's
                               * prompt_logprobs: its own) */
    float *plp;               /* [plen] log-softmax of prompt token t given tokens [0, t) (t = 0: NAN) */
    int32_t *prank;           /* [plen] its rank under those logits (1: the most likely; ties: lower id first) */
    int32_t *ptop_id;         /* [plen][ptop_n] the most likely ids at prompt position t (row 0 unused) */
    float *ptop_lp;           /* [plen][ptop_n] their log-softmax */
    /* the engine's, under the engine's mutex */
    int nout;                 /* generated so far: ids[plen .. plen+nout) */
    qf_json_state js;         /* json: the recognizer after the generated tokens */
    float *logprob;           /* [max_new] log-softmax of each generated token under the raw logits (want_logprob) */
    int32_t *top_id;          /* [max_new][top_n] each step's most likely ids, most likely first (top_n > 0) */
    float *top_lp;            /* [max_new][top_n] their log-softmax under the raw logits */
    qf_job_finish finish;
    int released;             /* 1: the engine is done with the job (finished, cancelled or never admitted) */
    int admitted;
    double t_first, t_last;
    /* the HTTP side's, under the engine's mutex */
    int cancel;
    /* engine-private */
    int slot, prefilled;      /* positions in the cache */
    int pfill;                /* positions to prefill before decoding: plen, or after a preemption plen + nout (the
                               * tokens generated so far are recomputed with the prompt; the last one's logits give
                               * the next token) */
    int computed;             /* positions computed before the last preemption (recomputed ones are counted apart) */
    int npre;                 /* times preempted */
    uint64_t admit_no;        /* admission order: the newest running sequence is preempted first */
    qf_rng rng;
    struct qf_serve_job *next;
} qf_serve_job;

typedef struct qf_engine_opts {
    const char *model;
    const qf_model_config *cfg;
    const qf_ops *ops;
    int max_batch, max_total, max_queue, chunk, block_size, nblocks;
    const int32_t *stop_ids;  /* eos and friends: a job stops after one (kept in its ids) */
    int nstop_ids;
    const qf_tokenizer *tok;  /* for stop strings */
    qf_serve_metrics *met;
    void (*notify)(void *ctx);/* called from the engine thread after a step that changed any job */
    void *notify_ctx;
    /* the layer split (serve.h): this rank holds layers [l0, l1) of world ranks in comm */
    MPI_Comm comm;
    int rank, world, l0, l1;
    int cuda_graphs;          /* --cuda-graphs on: decoding steps as CUDA graphs where the backend has them */
    int decode_ahead;         /* --decode-ahead on: queue the next call before reading this one's picks (one rank) */
    int prefix_cache;         /* --prefix-cache on: prompts share the cached KV blocks they start with (serve_kv.h) */
    int preempt;              /* --preemption on: blocks taken as sequences grow, the newest preempted when short */
    int speculate;            /* --speculate N: up to N draft tokens a call for each decoding sequence (0: none) */
    qf_json_vocab *json_vocab;/* the tokens' bytes for JSON-constrained jobs (rank 0; the engine thread's alone) */
} qf_engine_opts;

/* a call queued ahead whose picks the host has not read yet (qf_engine.fl) */
typedef struct qf_engine_flight {
    int n;                    /* its head rows (0: none) */
    int lp;                   /* their log-softmax comes too */
    int32_t *row_slot;        /* [max_batch] each row's slot; -1 once the row's job left */
} qf_engine_flight;

typedef struct qf_engine {
    qf_engine_opts o;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started, quit;
    qf_serve_job *qhead, *qtail; /* FIFO */
    int qn;
    qf_serve_job **slot;         /* [max_batch] running jobs (NULL: free) */
    int nrunning;
    qf_model m;
    int have_model;
    qf_decode_units du;
    qf_kv_pool kv;
    qf_sampler smp;
    /* one call's host arrays */
    int Ntok;
    int32_t *tok, *seq, *pos, *rows, *row_slot;
    int32_t *row_draft;          /* [max_batch] a head row's draft token (speculation), -1: the sequence's own row
                                  * (-2 once a draft is rejected, while its call's picks are taken) */
    int32_t draft[QF_SPEC_MAX];  /* one sequence's drafts (serve_spec.h) */
    float *logits, *raw;
    int32_t *pick;               /* [max_batch] greedy picks made on the backend (no logits copied) */
    float *pick_lp;              /* [max_batch] their log-softmax */
    float *plogits;              /* [max_batch, V] prompt rows' logits (prompt_lp jobs; allocated at first use) */
    int32_t *pl_row;             /* [Ntok] a call's prompt rows whose next token is in the prompt (prompt_lp) */
    int32_t *pl_slot, *pl_at;    /* [Ntok] their slot and the prompt position t they predict (rank 0) */
    int32_t *pl_tgt, *pl_topn;   /* [Ntok] the prompt token each predicts and the alternatives wanted (every rank) */
    float *pl_lp, *pl_tlp;       /* [Ntok], [Ntok, QF_SAMPLE_TOP_MAX] the rows' results (the head's rank, then rank 0):
                                  * the token's log-softmax, the alternatives' */
    int32_t *pl_rank, *pl_tid;   /* [Ntok], [Ntok, QF_SAMPLE_TOP_MAX] the token's rank, the alternatives' ids */
    /* the layer split (serve_split.c) */
    int32_t *btab;               /* [max_batch * maxb] the block tables the call uses (rank 0: the pool's) */
    int btab_dirty;              /* rank 0: the tables changed since the ranks last got them */
    int btab_stale;              /* every rank: the tables changed since they were last copied to the backend */
    int graphs;                  /* decoding steps run as CUDA graphs (qf_engine_graphs says why or why not) */
    const char *graphs_why;
    void *stage;                 /* host staging of the residual stream [Ntok, C] (act) between ranks */
    /* decoding one call ahead (serve_engine.h): the picks' slots (paged_ahead.h), the calls whose picks are in them,
     * the slot of the call in flight (-1: none), and for qf_split_call: the rows fed from that slot's picks and the
     * slot this call's picks go to (-1: read at once into pick / pick_lp / logits) */
    int ahead;
    const char *ahead_why;
    qf_paged_picks picks;
    qf_engine_flight fl[2];
    int fly, call_feed, call_ahead;
    uint64_t steps, steps_ahead; /* model calls, and those queued before the previous one's picks were read (g->mu) */
    uint64_t admits;             /* admissions so far (qf_serve_job.admit_no) */
    int watermark;               /* preemption on: blocks an admission leaves free for the running sequences' growth */
    int inited;
} qf_engine;

/* Every rank: loads this rank's layers [l0, l1) (and the embedding on rank 0, the head on the last rank) on its
 * backend and sizes the paged caches; 0 or an exit code (e). Not collective: the caller agrees on the result. */
int qf_engine_init(qf_engine *g, const qf_engine_opts *o, qf_err *e);
/* "on (decode step)" or "off (why)": whether the steps whose every token is a row of the head (decoding) run as
 * one CUDA graph each (ops.h graph_run; qf_model_paged_run), for the start-up log */
const char *qf_engine_graphs(const qf_engine *g);
/* "on" or "off (why)": whether calls are queued one ahead (serve_engine.h), for the start-up log */
const char *qf_engine_ahead(const qf_engine *g);
/* the model calls run so far, and how many of them were queued ahead (any thread) */
void qf_engine_counts(qf_engine *g, uint64_t *steps, uint64_t *ahead);
/* Rank 0, after qf_engine_init: starts the engine thread (the scheduler; it runs every step through the split). */
int qf_engine_start(qf_engine *g, qf_err *e);
/* The other ranks, after qf_engine_init: run rank 0's steps (their layers of each call) until it stops. */
void qf_engine_follow(qf_engine *g);
/* Queues jobs[n] (one request's choices) together: 0, or -1 when the queue has no room for all n beside its
 * max_queue (nothing queued). */
int qf_engine_submit(qf_engine *g, qf_serve_job *const *jobs, int n);
/* Asks the engine to drop job at its next step (it is released then). */
void qf_engine_cancel(qf_engine *g, qf_serve_job *job);
/* Cancels every queued and running job. */
void qf_engine_cancel_all(qf_engine *g);
/* jobs queued + running */
int qf_engine_load(qf_engine *g);
/* Stops the thread (after the jobs in hand are released; rank 0 then stops the other ranks) and frees
 * everything. */
void qf_engine_stop(qf_engine *g);

/* serve_split.c: one model call of the step through the ranks. Rank 0 (W > 1) first sends the call (cmd 1) or the
 * end (cmd 0) to the others; qf_split_recv is their side (1: a call, in g's arrays; 0: the end). Then every rank
 * runs qf_split_call: its layers, the residual from the rank before and to the rank after, and on the last rank the
 * head of rows[0..nrows): the greedy picks (mode 1; 2: with their log-softmax) or the logits (mode 0), which reach
 * rank 0's g->pick / pick_lp / logits; then, for the npl prompt rows pl_row (prompt_lp jobs), the head again over
 * them and each row's log-softmax of pl_tgt, its rank and its pl_topn most likely (g->pl_lp, pl_rank, pl_tid,
 * pl_tlp), which reach rank 0 too. */
void qf_split_send(qf_engine *g, int cmd, int N, int nrows, int mode, int npl);
int qf_split_recv(qf_engine *g, int *N, int *nrows, int *mode, int *npl);
void qf_split_call(qf_engine *g, int N, int nrows, int mode, int npl);


#endif
