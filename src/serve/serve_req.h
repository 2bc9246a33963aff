/* serve_req.h — one HTTP request body of `qwen-ft serve` as a validated generation request: TGI's /generate and
 * /generate_stream ({"inputs", "parameters": {...}, "stream"?}) and OpenAI's /v1/completions and
 * /v1/chat/completions ({"model", "prompt" | "messages", "max_tokens", ...}).
 *
 * Parsing is pure (no tokenizer, no model): bytes in, a request or a refusal naming the field out, so the fuzz
 * target (tests/fuzz/fuzz_serve_req.c) reaches all of it. Limits that need the tokenizer (prompt length in
 * tokens) are checked by the caller (serve_http.c) after encoding. */
#ifndef QF_SERVE_REQ_H
#define QF_SERVE_REQ_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "generate/sample.h"

#define QF_SERVE_MAX_STOPS 4 /* stop sequences per request (TGI's max_stop_sequences default; OpenAI's limit) */
#define QF_SERVE_TGI_TOP_N 5 /* TGI's top_n_tokens at most (its --max-top-n-tokens default) */
#define QF_SERVE_MAX_N 16    /* OpenAI's n (choices a request) at most */
#define QF_SERVE_MAX_BIAS 1024 /* logit_bias entries a request at most */

typedef enum { QF_API_TGI = 0, QF_API_TGI_STREAM, QF_API_COMPLETIONS, QF_API_CHAT, QF_API_N } qf_api;

/* What the server allows; the defaults of TGI's max_new_tokens and OpenAI completions' max_tokens when absent
 * (chat: all the room left), each at most the room the prompt leaves. */
typedef struct qf_serve_limits {
    int max_new;  /* the most new tokens a request may ask for (max_total - 1) */
    int tgi_default_new, completion_default_new;
} qf_serve_limits;

typedef struct qf_serve_req {
    qf_api api;
    int stream;
    char *text;                /* TGI inputs / OpenAI prompt (malloc'd, may hold NULs: text_len); NULL: prompt_ids */
    size_t text_len;
    int32_t *prompt_ids;       /* completions' prompt as token ids ([int] or [[int]]; malloc'd) instead of text */
    int nprompt_ids;
    json_t *chat;              /* chat: {"messages": [...], "tools"?} for prepare's parser (owned) */
    int max_new;               /* -1: not given: default_new, at most the room left (0: all the room left) */
    int n;                     /* OpenAI's choices (1 .. QF_SERVE_MAX_N; 0: not given, one) */
    int best_of;               /* candidates generated, the best n (TGI: 1) returned: completions' and TGI's best_of
                                * (1 .. QF_SERVE_MAX_N; 0: not given, n) */
    int default_new;
    qf_sample_opts sample;
    uint64_t seed;
    int has_seed;
    char *stop[QF_SERVE_MAX_STOPS];
    int nstop;
    int details, return_full_text, include_usage;
    int logprobs;              /* OpenAI: logprobs asked (chat logprobs true; completions logprobs an integer) */
    int top_n;                 /* 0..QF_SAMPLE_TOP_MAX alternatives a token: chat top_logprobs, completions logprobs,
                                * TGI top_n_tokens (at most QF_SERVE_TGI_TOP_N) */
    int ids_as_text;           /* vLLM's return_tokens_as_token_ids: logprobs' tokens as "token_id:ID" */
    int echo;                  /* completions: the prompt before the completion (with its logprobs where asked) */
    int input_details;         /* TGI's decoder_input_details: details.prefill with the prompt tokens' logprobs */
    int prompt_top;            /* vLLM's prompt_logprobs: -1 not asked, else 0..QF_SAMPLE_TOP_MAX alternatives */
    int no_thinking;           /* chat: chat_template_kwargs.enable_thinking = false (vLLM's field; Qwen3 templates) */
    int truncate;              /* TGI's truncate: only the prompt's last N tokens (0: the whole prompt) */
    int json;                  /* OpenAI's response_format json_object: the reply is constrained to a JSON object */
    int ignore_eos;            /* vLLM's: an end-of-text token does not end the reply (its text is left out) */
    int min_tokens;            /* vLLM's: the end-of-text tokens are masked until that many tokens are generated */
    int tool_calls;            /* chat with tools (tool_choice not "none"): the reply's tool-call blocks become
                                * message.tool_calls (serve_tools.h); 1 the first only (parallel_tool_calls false),
                                * 2 all; 0 a plain reply */
    int32_t *bias_id;          /* OpenAI's logit_bias: ids and biases (malloc'd; sample.bias_id / bias point here) */
    float *bias;
    char model[256];           /* OpenAI "model" as given */
} qf_serve_req;

/* The refusal: HTTP status (400, 413, 422), the field at fault ("" when the body as a whole) and a message. */
typedef struct qf_serve_refusal {
    int status;
    char field[64];
    char msg[512];
} qf_serve_refusal;

/* body[n] -> r (zeroed first). 0, or -1 with why filled (r freed). */
int qf_serve_req_parse(qf_api api, const char *body, size_t n, const qf_serve_limits *lim, qf_serve_req *r,
                       qf_serve_refusal *why);
void qf_serve_req_free(qf_serve_req *r);

#endif
