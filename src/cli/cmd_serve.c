/* cmd_serve.c — `qwen-ft serve`: the model behind TGI's and OpenAI's HTTP APIs with continuous batching over a
 * paged KV cache (src/serve/). Options and the set-up live here: the model config, the tokenizer and its chat
 * template (the one prepare and generate --chat render with), the backend, the stop ids; serve/serve_http.c runs
 * the server, serve/serve_engine.c the batch. Under mpirun/srun the layers split over the ranks as generate's
 * (serve/serve_split.c): rank 0 serves HTTP and schedules, every rank runs its layers of each step. */
#include <stddef.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "chat_template.h"
#include "tokenizer.h"
#include "commands.h"
#include "options.h"
#include "qf_version.h"
#include "generate/decode.h"
#include "generate/gen_prompts.h"
#include "model/backend.h"
#include "serve/serve.h"
#include "serve/serve_spec.h"

typedef struct serve_args {
    const char *model, *tokenizer, *host, *api_key, *template_name, *system, *dtype, *model_id, *cuda_graphs;
    const char *decode_ahead, *prefix_cache, *preemption;
    int port, max_batch, max_input, max_total, max_queue, chunk, max_body_kb, max_batch_total, speculate;
    double gpu_limit_gb, grace_s;
} serve_args;

static const qf_opt SERVE_OPTS[] = {
    {.name = "model", .short_name = 'm', .type = QF_OPT_STR, .off = offsetof(serve_args, model), .meta = "M",
     .required = 1, .help = "HDF5 model, checkpoint (file or directory) or HF directory; preset:NAME (randomly "
                            "initialised: benchmarks)"},
    {.name = "tokenizer", .type = QF_OPT_STR, .off = offsetof(serve_args, tokenizer), .meta = "T",
     .help = "tokenizer.json, qwen.tiktoken or a directory holding one (default: the model directory's)"},
    {.name = "template", .type = QF_OPT_STR, .off = offsetof(serve_args, template_name), .meta = "auto|NAME",
     .help = "chat template of /v1/chat/completions, as prepare's --template (default: the tokenizer directory's "
             "own when it has one, else qwen1)"},
    {.name = "system", .type = QF_OPT_STR, .off = offsetof(serve_args, system), .meta = "TEXT",
     .help = "system prompt of chat requests without one (default: the template's own)"},
    {.name = "host", .type = QF_OPT_STR, .off = offsetof(serve_args, host), .def = "127.0.0.1", .meta = "ADDR",
     .help = "address to listen on (0.0.0.0: every interface)"},
    {.name = "port", .type = QF_OPT_INT, .off = offsetof(serve_args, port), .def = "8080", .meta = "P", .lo = 0,
     .hi = 65535, .help = "TCP port (0: any free port, printed on stderr)"},
    {.name = "api-key", .type = QF_OPT_STR, .off = offsetof(serve_args, api_key), .meta = "K",
     .help = "every endpoint but /health needs the header 'Authorization: Bearer K' (401 otherwise)"},
    {.name = "model-id", .type = QF_OPT_STR, .off = offsetof(serve_args, model_id), .meta = "NAME",
     .help = "the model's name in /info, /v1/models and replies (default: --model as given)"},
    {.name = "max-batch", .type = QF_OPT_INT, .off = offsetof(serve_args, max_batch), .def = "32", .meta = "N",
     .lo = 1, .hi = 4096, .help = "sequences in the running batch at most"},
    {.name = "max-input-tokens", .type = QF_OPT_INT, .off = offsetof(serve_args, max_input), .def = "0",
     .meta = "N", .lo = 0, .hi = 16777216,
     .help = "prompt tokens of a request at most (0: --max-total-tokens - 1); longer prompts are 400"},
    {.name = "max-total-tokens", .type = QF_OPT_INT, .off = offsetof(serve_args, max_total), .def = "0",
     .meta = "N", .lo = 0, .hi = 16777216,
     .help = "prompt + new tokens of a request at most (0: min(4096, the model's context))"},
    {.name = "max-batch-total-tokens", .type = QF_OPT_INT, .off = offsetof(serve_args, max_batch_total),
     .def = "0", .meta = "N", .lo = 0, .hi = 1 << 30,
     .help = "positions the KV cache holds over the whole batch (TGI's option; 0: --max-batch full requests, fewer "
             "where --gpu-memory-limit-gb leaves less); at least one request's --max-total-tokens and one call's "
             "--prefill-chunk + --max-batch"},
    {.name = "max-queue", .type = QF_OPT_INT, .off = offsetof(serve_args, max_queue), .def = "256", .meta = "N",
     .lo = 1, .hi = 1 << 20, .help = "requests waiting for the batch at most; more are 503 with Retry-After"},
    {.name = "prefill-chunk", .type = QF_OPT_INT, .off = offsetof(serve_args, chunk), .def = "2048", .meta = "N",
     .lo = 1, .hi = 1 << 20, .help = "prompt tokens per engine step at most while sequences are decoding (long prompts are spread "
                                   "over steps); a step with none decoding takes up to N + --max-batch"},
    {.name = "max-body-kb", .type = QF_OPT_INT, .off = offsetof(serve_args, max_body_kb), .def = "1024",
     .meta = "KB", .lo = 1, .hi = 1 << 20, .help = "request bodies over KB KiB are 413"},
    {.name = "gpu-memory-limit-gb", .type = QF_OPT_DOUBLE, .off = offsetof(serve_args, gpu_limit_gb), .def = "0",
     .meta = "G", .lo = 0, .hi = 1e6,
     .help = "memory budget of the backend (weights + activations + KV cache); the KV pool is what is left, at "
             "most --max-batch full requests (0: exactly that)"},
    {.name = "dtype", .type = QF_OPT_CHOICE, .off = offsetof(serve_args, dtype), .def = "bf16",
     .choices = "bf16|fp16|fp32", .help = "compute dtype on a GPU (the CPU computes in fp32)"},
    {.name = "cuda-graphs", .type = QF_OPT_CHOICE, .off = offsetof(serve_args, cuda_graphs), .def = "on",
     .choices = "on|off", .help = "on: each decoding step (every token a sequence's next) runs as one CUDA graph "
                                  "per shape instead of a launch per kernel (141 at Qwen2.5-7B; GPU only; the same "
                                  "tokens bit for bit)"},
    {.name = "decode-ahead", .type = QF_OPT_CHOICE, .off = offsetof(serve_args, decode_ahead), .def = "on",
     .choices = "on|off", .help = "on: when every row of a step is picked greedily on the backend, the next step is "
                                   "queued before this one's tokens are read, so the GPU does not wait for the host "
                                   "between steps (one rank)"},
    {.name = "prefix-cache", .type = QF_OPT_CHOICE, .off = offsetof(serve_args, prefix_cache), .def = "on",
     .choices = "on|off", .help = "on: the KV blocks of prompts already prefilled (and of the replies fed back) stay "
                                   "cached until the pool needs them, and a prompt that starts with the same tokens "
                                   "shares them instead of prefilling them again (the same tokens bit for bit on the "
                                   "CPU)"},
    {.name = "preemption", .type = QF_OPT_CHOICE, .off = offsetof(serve_args, preemption), .def = "on",
     .choices = "on|off", .help = "on: a request takes the KV blocks of its prompt when it joins the batch and more as "
                                   "it grows; when the pool runs short the request admitted last gives its blocks "
                                   "back and is recomputed later (vLLM's policy; more requests run at once); off: "
                                   "a request takes its whole budget's blocks (prompt + max_new_tokens) when it "
                                   "joins and is never preempted"},
    {.name = "speculate", .type = QF_OPT_INT, .off = offsetof(serve_args, speculate), .def = "0", .meta = "N",
     .lo = 0, .hi = QF_SPEC_MAX,
     .help = "speculative decoding: up to N draft tokens a call for each request, what followed the latest earlier "
             "occurrence of the sequence's last tokens (TGI's n-gram speculation), kept while the model's own picks "
             "confirm them: greedy replies the same tokens in fewer calls, sampled ones the same distribution (a "
             "seeded request's tokens then differ from --speculate 0's); decode ahead is off then; 0: none"},
    {.name = "shutdown-grace", .type = QF_OPT_DOUBLE, .off = offsetof(serve_args, grace_s), .def = "30",
     .meta = "S", .lo = 0, .hi = 86400,
     .help = "after SIGTERM/SIGINT, running requests get S seconds to finish before they are cancelled"},
};

/* the same bad input on every rank: said once, by rank 0 (stderr NULL elsewhere: qf_opts_bad writes nothing) */
#define serve_bad(...) qf_opts_bad(rank == 0 ? stderr : NULL, "serve", "", __VA_ARGS__)

/* the tokenizer: --tokenizer or the model directory's; required */
static int serve_tokenizer(const serve_args *a, qf_tokenizer **tok, const char **path, qf_err *e) {
    *path = a->tokenizer ? a->tokenizer : a->model;
    if (qf_tok_load(*path, tok, e) == 0) return 0;
    char why[sizeof e->msg];
    snprintf(why, sizeof why, "%s", e->msg);
    return qf_err_set(e, QF_EXIT_INPUT, "serve: %s: %s%s", a->tokenizer ? "--tokenizer" : "--model", why,
                      a->tokenizer ? "" : " (serve needs a tokenizer: pass --tokenizer)");
}

static int serve_main(const void *args) {
    const serve_args *a = args;
    int world = 1, rank = 0, threads = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Query_thread(&threads);
    if (world > 1 && threads < MPI_THREAD_SERIALIZED) { /* rank 0's engine thread calls MPI */
        if (rank == 0)
            fprintf(stderr, "qwen-ft serve: %d ranks need MPI_THREAD_SERIALIZED; this MPI gives level %d: run serve "
                            "on one rank\n", world, threads);
        return QF_EXIT_RUNTIME;
    }
    qf_err e = {0};
    qf_model_config c;
    char resolved[QF_PATH_MAX + 64];
    qf_cli_model_config("serve", a->model, &c, resolved, sizeof resolved, &e);
    if (e.code) {
        if (rank == 0) fprintf(stderr, "qwen-ft: %s\n", e.msg);
        return e.code;
    }
    int64_t ctx = c.max_position_embeddings > 0 ? c.max_position_embeddings : 4096;
    int max_total = a->max_total ? a->max_total : (int)(ctx < 4096 ? ctx : 4096);
    if (max_total < 2) return serve_bad("--max-total-tokens %d: at least 2 (one prompt token, one new)", max_total);
    if (c.max_position_embeddings > 0 && max_total > c.max_position_embeddings)
        return serve_bad("--max-total-tokens %d exceeds the model's context (max_position_embeddings = %lld)",
                         max_total, (long long)c.max_position_embeddings);
    if (a->max_batch_total && a->max_batch_total < max_total)
        return serve_bad("--max-batch-total-tokens %d is below one request's --max-total-tokens %d", a->max_batch_total,
                         max_total);
    if (a->max_batch_total && a->max_batch_total < a->chunk + a->max_batch) /* the pool holds one call's tokens */
        return serve_bad("--max-batch-total-tokens %d is below one model call's tokens, --prefill-chunk %d + "
                         "--max-batch %d", a->max_batch_total, a->chunk, a->max_batch);
    int max_input = a->max_input ? a->max_input : max_total - 1;
    if (max_input >= max_total)
        return serve_bad("--max-input-tokens %d must be below --max-total-tokens %d (room for one new token)",
                         max_input, max_total);
    qf_tokenizer *tok = NULL;
    const char *tpath;
    if (serve_tokenizer(a, &tok, &tpath, &e)) {
        if (rank == 0) fprintf(stderr, "qwen-ft: %s\n", e.msg);
        return e.code;
    }
    qf_chat_template tm;
    memset(&tm, 0, sizeof tm);
    qf_err ce = {0};
    int have_tm = qf_gen_template(tpath, a->template_name, tok, &tm, &ce) == 0;
    if (!have_tm && a->template_name) {
        if (rank == 0) fprintf(stderr, "qwen-ft serve: %s\n", ce.msg);
        qf_tok_free(tok);
        return QF_EXIT_INPUT;
    }
    int32_t stops[3];
    int nstops = 0;
    if (c.eos_token_id >= 0) stops[nstops++] = (int32_t)c.eos_token_id;
    int32_t s1 = qf_tok_special(tok, "<|endoftext|>"), s2 = qf_tok_special(tok, "<|im_end|>");
    if (s1 >= 0 && s1 != (nstops ? stops[0] : -1)) stops[nstops++] = s1;
    if (s2 >= 0 && s2 != (nstops ? stops[0] : -1)) stops[nstops++] = s2;
    const qf_ops *ops = NULL;
    char info[256];
    int rc = qf_cli_backend(a->dtype, a->gpu_limit_gb, &ops, info, sizeof info, &e);
    if (!rc) {
        int l0 = 0, l1 = c.num_layers;
        qf_decode_split(c.num_layers, world, rank, &l0, &l1);
        if (world > 1)
            fprintf(stderr, "qwen-ft serve: rank %d of %d (pid %ld): layers [%d, %d) on %s\n", rank, world,
                    (long)getpid(), l0, l1, info);
        else fprintf(stderr, "qwen-ft serve: %s\n", info);
        qf_serve_opts o = {.model = a->model, .model_id = a->model_id ? a->model_id : a->model, .host = a->host,
                           .api_key = a->api_key, .port = a->port, .max_batch = a->max_batch, .max_input = max_input,
                           .max_total = max_total, .max_batch_total = a->max_batch_total, .max_queue = a->max_queue,
                           .chunk = a->chunk, .block_size = 16,
                           .gpu_limit_gb = a->gpu_limit_gb, .grace_s = a->grace_s,
                           .max_body = (size_t)a->max_body_kb * 1024, .cfg = &c, .ops = ops, .tok = tok,
                           .tmpl = have_tm ? &tm : NULL, .tmpl_why = ce.msg, .system = a->system, .stop_ids = stops,
                           .nstop_ids = nstops, .dtype = ops->act_bytes == 4 ? "float32" : a->dtype,
                           .version = QWENFT_VERSION, .comm = MPI_COMM_WORLD, .rank = rank, .world = world,
                           .l0 = l0, .l1 = l1, .cuda_graphs = strcmp(a->cuda_graphs, "off") != 0,
                           .decode_ahead = strcmp(a->decode_ahead, "off") != 0,
                           .prefix_cache = strcmp(a->prefix_cache, "off") != 0,
                           .preempt = strcmp(a->preemption, "off") != 0, .speculate = a->speculate};
        rc = qf_serve_run(&o, &e);
    }
    if (rc && e.msg[0] && world > 1) fprintf(stderr, "qwen-ft: rank %d: %s\n", rank, e.msg);
    else if (rc && e.msg[0]) fprintf(stderr, "qwen-ft: %s\n", e.msg);
    if (have_tm) qf_tmpl_free(&tm);
    qf_tok_free(tok);
    return rc;
}

const qf_cmd qf_cmd_serve = {
    .name = "serve",
    .synopsis = "--model=M [--tokenizer=T] [--host=127.0.0.1] [--port=8080] [--api-key=K] [--max-batch=N] "
                "[--max-input-tokens=N] [--max-total-tokens=N] [--max-queue=N] [--gpu-memory-limit-gb=G] [OPTION]...",
    .summary = "HTTP server: TGI and OpenAI APIs, continuous batching over a paged KV cache",
    .about = "Endpoints: POST /generate, /generate_stream (TGI), /v1/completions, /v1/chat/completions (OpenAI,\n"
             "stream true/false); GET /health, /info, /v1/models, /metrics (Prometheus). One engine thread runs\n"
             "the model; requests join and leave the batch between steps. On the GPU when there is one, else\n"
             "the CPU; under mpirun/srun the layers split over the ranks as generate's (rank 0 serves HTTP).\n"
             "SIGTERM/SIGINT: stop accepting, let running requests finish (--shutdown-grace), exit 0.\n"
             "docs/serve.md has the fields, limits, errors and metrics.",
    .opts = SERVE_OPTS,
    .nopts = QF_NOPTS(SERVE_OPTS),
    .size = sizeof(serve_args),
    .run = serve_main,
};
