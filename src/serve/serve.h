/* serve.h — `qwen-ft serve`: an HTTP server with TGI's and OpenAI's APIs over the engine (serve_engine.h).
 *
 * Threads: the calling thread runs libevent's evhttp loop (parsing, validation, tokenization, replies, SSE);
 * the engine thread owns the model. They meet in the engine's bounded queue (503 + Retry-After when full) and in
 * each job's token buffer; the engine wakes the loop after every step (an event made active across threads).
 * docs/serve.md describes the endpoints, fields, limits, errors and metrics. */
#ifndef QF_SERVE_H
#define QF_SERVE_H
#include <mpi.h>
#include <stddef.h>
#include "chat_template.h"
#include "model_config.h"
#include "ops.h"
#include "tokenizer.h"
#include "util.h"

typedef struct qf_serve_opts {
    const char *model, *model_id, *host, *api_key;
    int port;              /* 0: any free port (printed) */
    int max_batch, max_input, max_total, max_queue, chunk, block_size;
    int max_batch_total;   /* --max-batch-total-tokens: the KV pool's positions at most (0: planned) */
    double gpu_limit_gb;   /* 0: no budget (the pool holds max_batch full requests) */
    double grace_s;        /* SIGTERM/SIGINT: running requests get this long to finish */
    size_t max_body;       /* bytes of a request body */
    const qf_model_config *cfg;
    const qf_ops *ops;
    const qf_tokenizer *tok;
    const qf_chat_template *tmpl; /* NULL: chat requests are refused (tmpl_why says why) */
    const char *tmpl_why, *system;
    const int32_t *stop_ids;
    int nstop_ids;
    const char *dtype, *version; /* for /info */
    /* the layer split (generate's, decode.h): rank `rank` of `world` in comm holds decoder layers [l0, l1); rank 0
     * serves HTTP and runs the scheduler, every rank runs its layers of each step */
    MPI_Comm comm;
    int rank, world, l0, l1;
    int cuda_graphs;       /* --cuda-graphs: 1 on (decoding steps as CUDA graphs where the backend has them), 0 off */
    int decode_ahead;      /* --decode-ahead: 1 on (the next call queued before this one's picks are read), 0 off */
    int prefix_cache;      /* --prefix-cache: 1 on (prompts share the cached KV blocks they start with), 0 off */
    int preempt;           /* --preemption: 1 on (blocks as requests grow; the newest preempted when short), 0 off */
    int speculate;         /* --speculate N: draft tokens a call for each request (n-gram; 0: none) */
} qf_serve_opts;

/* Collective over o->comm. Serves until SIGTERM or SIGINT (rank 0; the other ranks follow its steps until it
 * stops); 0 (a clean shutdown) or an exit code with e filled (e->msg empty on a rank whose failure was another
 * rank's: that rank prints it). */
int qf_serve_run(const qf_serve_opts *o, qf_err *e);

/* This rank's KV pool: blocks of block_size positions for max_batch requests of max_total positions, fewer when
 * max_batch_total positions (> 0) are fewer, or when the budget (bytes, 0 = none) minus this rank's weights (its
 * layers [l0, l1), the embedding on the first rank, the head on the last) and activations holds fewer; at least one
 * whole request. 0, or exit 2 with e saying what
 * does not fit. qf_serve_run takes the smallest over the ranks. */
int qf_serve_plan_blocks(const qf_serve_opts *o, int *nblocks, double *kv_gib, qf_err *e);

/* UTF-8 helpers of the replies (serve_text.c): s[n] with every ill-formed sequence as U+FFFD (malloc'd, *outlen);
 * the length of the longest prefix of s[n] that does not end inside a UTF-8 sequence. */
char *qf_serve_utf8_lossy(const char *s, size_t n, size_t *outlen);
size_t qf_serve_utf8_complete(const char *s, size_t n);

#endif
