/* serve_http.c — the HTTP side of qwen-ft serve (serve.h): routing, authorization, validation, tokenization,
 * TGI and OpenAI reply shapes, server-sent events, client disconnects, metrics and the graceful shutdown. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include "generate/gen_prompts.h"
#include "serve.h"
#include "serve_engine.h"
#include "serve_logprobs.h"
#include "serve_req.h"
#include "serve_tools.h"

typedef struct http_job http_job;

typedef struct serve_ctx {
    const qf_serve_opts *o;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *sock;
    struct event *notify_ev, *sig_term, *sig_int, *tick;
    qf_engine eng;
    qf_serve_metrics met;
    qf_json_vocab jv;        /* the tokens' bytes for response_format json_object (serve_json.h) */
    qf_serve_limits lim;
    http_job *active;        /* generation requests in flight */
    int draining, cancelled;
    int writing;             /* generation replies not yet written out (the drain waits for them) */
    double drain_deadline;
    unsigned long next_id;
    int nblocks;
    int have_met;
} serve_ctx;

struct http_job {
    qf_serve_job job;
    qf_serve_req req;
    serve_ctx *c;
    struct evhttp_request *evreq; /* NULL once the client is gone (the lead's; the other choices' stay NULL) */
    http_job *lead;               /* the request's choice 0 (itself there): its evreq, id and req serve every choice */
    http_job **ch;                /* the lead's: [nch] the request's choices (OpenAI's n; best_of's candidates),
                                   * ch[0] = the lead */
    int nch, nret, index;         /* nret: the choices returned (nch but with best_of); index: this choice's */
    const char *endpoint;
    char id[48];
    long created;
    int nsent;                    /* tokens reported (stream) */
    size_t text_sent;             /* bytes of visible text streamed */
    int head_sent;                /* OpenAI chat stream: the role chunk */
    int lp_sent;                  /* OpenAI stream: tokens whose logprobs went out */
    size_t lp_chars;              /* completions stream: characters of text before token lp_sent (text_offset) */
    http_job *prev, *next;
};

/* ---- replies ------------------------------------------------------------------------------------------------- */

static void http_json(serve_ctx *c, struct evhttp_request *r, const char *endpoint, int status, json_t *body,
                      const char *extra_key, const char *extra_val) {
    char *s = body ? json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(body);
    if (!s) { /* a value jansson refused (never expected: every string passes the UTF-8 repair first) */
        s = strdup("{\"error\":\"internal error: the reply could not be encoded\",\"error_type\":\"internal\"}");
        status = 500;
    }
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, s, strlen(s));
    free(s);
    struct evkeyvalq *h = evhttp_request_get_output_headers(r);
    evhttp_add_header(h, "Content-Type", "application/json");
    if (extra_key) evhttp_add_header(h, extra_key, extra_val);
    evhttp_send_reply(r, status, status == 200 ? "OK" : status == 400 ? "Bad Request" : status == 401 ? "Unauthorized"
                                 : status == 404 ? "Not Found" : status == 405 ? "Method Not Allowed"
                                 : status == 413 ? "Payload Too Large" : status == 500 ? "Internal Server Error"
                                 : "Service Unavailable", b);
    evbuffer_free(b);
    qf_metrics_request(&c->met, endpoint, status);
}

/* an error in the API's shape: TGI {"error", "error_type"}, OpenAI {"error": {"message", "type", "param", "code"}} */
static void http_error(serve_ctx *c, struct evhttp_request *r, const char *endpoint, qf_api api, int status,
                       const char *field, const char *msg) {
    const char *type = status == 400 ? "validation" : status == 401 ? "authentication" : status == 413 ? "payload"
                     : status == 503 ? "overloaded" : "not_found";
    json_t *o;
    if (api == QF_API_COMPLETIONS || api == QF_API_CHAT)
        o = json_pack("{s:{s:s,s:s,s:s?,s:n}}", "error", "message", msg, "type",
                      status == 400 || status == 413 ? "invalid_request_error" : type, "param",
                      field && field[0] ? field : NULL, "code");
    else
        o = json_pack("{s:s,s:s,s:s?}", "error", msg, "error_type", type, "field", field && field[0] ? field : NULL);
    http_json(c, r, endpoint, status, o, status == 503 ? "Retry-After" : NULL, "1");
}

/* ---- the text of a job --------------------------------------------------------------------------------------- */

static int http_is_stop_id(const serve_ctx *c, int32_t t) {
    for (int i = 0; i < c->o->nstop_ids; i++)
        if (c->o->stop_ids[i] == t) return 1;
    return 0;
}

/* the bytes of ids[n] (malloc'd, *len); an id the tokenizer lacks (a model wider than its tokenizer) reads as
 * U+FFFD */
static char *http_decode(const qf_tokenizer *tok, const int32_t *ids, int n, size_t *len) {
    qf_err de = {0};
    char *t = n > 0 ? qf_tok_decode(tok, ids, (size_t)n, len, &de) : NULL;
    if (t) return t;
    size_t cap = 64, k = 0;
    t = qf_malloc(cap);
    for (int i = 0; i < n; i++) {
        size_t l = 0;
        qf_err e1 = {0};
        char *p = qf_tok_decode(tok, ids + i, 1, &l, &e1);
        const char *src = p ? p : "\xEF\xBF\xBD";
        if (!p) l = 3;
        while (k + l + 1 > cap) t = qf_realloc(t, cap *= 2);
        memcpy(t + k, src, l);
        k += l;
        free(p);
    }
    t[k] = 0;
    *len = k;
    return t;
}

/* the visible text of the first n generated tokens (malloc'd bytes, *len): without a closing stop id (TGI and
 * OpenAI skip special tokens), for OpenAI cut before a stop string; when !final, held back where a stop string
 * or a UTF-8 sequence could still be completing */
static char *http_visible(const http_job *hj, int n, int final, size_t *len) {
    const serve_ctx *c = hj->c;
    const qf_serve_job *j = &hj->job;
    int k = n;
    if (k > 0 && http_is_stop_id(c, j->ids[j->plen + k - 1])) k--;
    char *t;
    if (j->ignore_eos) { /* stop ids anywhere in the reply: their text left out (special tokens skipped) */
        int32_t *v = qf_malloc((size_t)(k > 0 ? k : 1) * sizeof *v);
        int m = 0;
        for (int i = 0; i < k; i++)
            if (!http_is_stop_id(c, j->ids[j->plen + i])) v[m++] = j->ids[j->plen + i];
        t = http_decode(c->o->tok, v, m, len);
        free(v);
    } else {
        t = http_decode(c->o->tok, j->ids + j->plen, k, len);
    }
    int openai = hj->req.api == QF_API_COMPLETIONS || hj->req.api == QF_API_CHAT;
    size_t cut = *len, hold = 0;
    for (int s = 0; s < hj->req.nstop; s++) {
        size_t sl = strlen(hj->req.stop[s]);
        if (sl - 1 > hold) hold = sl - 1;
        if (!openai) continue;
        for (size_t i = 0; i + sl <= *len; i++)
            if (!memcmp(t + i, hj->req.stop[s], sl)) {
                if (i < cut) cut = i;
                break;
            }
    }
    if (cut < *len) final = 1; /* the stop string is in: what precedes it is final */
    *len = cut;
    if (!final) {
        if (openai) *len = *len > hold ? *len - hold : 0;
        *len = qf_serve_utf8_complete(t, *len);
    }
    return t;
}

static json_t *http_str(const char *s, size_t n) {
    size_t m;
    char *clean = qf_serve_utf8_lossy(s, n, &m);
    json_t *v = json_stringn(clean, m);
    free(clean);
    return v;
}

static const char *http_finish_tgi(qf_job_finish f) {
    return f == QF_JOB_EOS ? "eos_token" : f == QF_JOB_STOP_SEQ ? "stop_sequence" : "length";
}
static const char *http_finish_oai(qf_job_finish f) { return f == QF_JOB_LENGTH ? "length" : "stop"; }

static int http_special(const void *c, int32_t id) { return http_is_stop_id(c, id); }

/* OpenAI's logprobs of generated tokens [from, to) (null where the request asked for none); completions count
 * text_offset on from hj->lp_chars */
static json_t *http_oai_logprobs(http_job *hj, int from, int to) {
    if (!hj->req.logprobs) return json_null();
    const qf_tokenizer *tok = hj->c->o->tok;
    if (hj->req.api == QF_API_COMPLETIONS)
        return qf_logprobs_completion(tok, &hj->job, hj->req.ids_as_text, from, to, &hj->lp_chars);
    json_t *content = json_array();
    qf_logprobs_chat_add(content, tok, &hj->job, hj->req.ids_as_text, from, to);
    return json_pack("{s:o,s:n}", "content", content, "refusal");
}

/* TGI's token object for generated token i */
static json_t *http_tgi_token(const http_job *hj, int i, const char *text, size_t tlen) {
    const qf_serve_job *j = &hj->job;
    int32_t id = j->ids[j->plen + i];
    return json_pack("{s:i,s:o,s:f,s:b}", "id", (json_int_t)id, "text", http_str(text, tlen), "logprob",
                     (double)j->logprob[i], "special", http_is_stop_id(hj->c, id));
}

/* TGI's details object (non-streaming: with every token) */
static json_t *http_tgi_details(const http_job *hj, int with_tokens) {
    const qf_serve_job *j = &hj->job;
    json_t *d = json_pack("{s:s,s:i,s:o}", "finish_reason", http_finish_tgi(j->finish), "generated_tokens",
                          (json_int_t)j->nout, "seed", hj->req.has_seed || !j->sample.greedy
                                                           ? json_integer((json_int_t)j->seed) : json_null());
    if (with_tokens) {
        json_t *toks = json_array();
        for (int i = 0; i < j->nout; i++) {
            size_t len = 0;
            char *t = http_decode(hj->c->o->tok, j->ids + j->plen + i, 1, &len);
            json_array_append_new(toks, http_tgi_token(hj, i, t, len));
            free(t);
        }
        json_object_set_new(d, "prefill", j->prompt_lp ? qf_logprobs_tgi_prefill(hj->c->o->tok, j) : json_array());
        json_object_set_new(d, "tokens", toks);
        if (j->top_n > 0) { /* TGI: only when top_n_tokens was asked */
            json_t *top = json_array();
            for (int i = 0; i < j->nout; i++)
                json_array_append_new(top, qf_logprobs_tgi_top(hj->c->o->tok, j, i, http_special, hj->c));
            json_object_set_new(d, "top_tokens", top);
        }
    }
    return d;
}

/* the request's usage (hj: its lead): the prompt once, the tokens of every choice */
static json_t *http_usage(const http_job *hj) {
    json_int_t gen = 0;
    for (int k = 0; k < hj->nch; k++) gen += hj->ch[k]->job.nout;
    return json_pack("{s:i,s:i,s:i}", "prompt_tokens", (json_int_t)hj->job.plen, "completion_tokens", gen,
                     "total_tokens", (json_int_t)hj->job.plen + gen);
}

/* the prompt's text as the reply echoes it (malloc'd, *len): the request's string, or its token ids decoded */
static char *http_prompt_text(const http_job *hj, size_t *len) {
    if (hj->req.text) {
        char *t = qf_malloc(hj->req.text_len + 1);
        memcpy(t, hj->req.text, hj->req.text_len + 1);
        *len = hj->req.text_len;
        return t;
    }
    return http_decode(hj->c->o->tok, hj->job.ids, hj->job.plen, len);
}

/* completions with echo: the prompt's logprobs object (text_offset from 0; hj->lp_chars then counts on from the
 * prompt's characters), null where no logprobs were asked */
static json_t *http_echo_logprobs(http_job *hj) {
    if (!hj->req.logprobs) return json_null();
    hj->lp_chars = 0;
    return qf_logprobs_completion_prompt(hj->c->o->tok, &hj->job, hj->req.ids_as_text, &hj->lp_chars);
}

/* the tool calls parsed from choice ch's text t[len] (serve_tools.h; the request's tools and tool_choice allow
 * them), as OpenAI's tool_calls (streams: each with its index); NULL: none. *content: the content before them. */
static json_t *http_tool_calls(const http_job *ch, const char *t, size_t len, int stream, size_t *content) {
    json_t *calls = NULL;
    const int n = ch->req.tool_calls ? qf_tools_parse(t, len, content, &calls) : 0;
    if (n == 0) return NULL;
    json_t *out = json_array();
    for (int k = 0; k < (ch->req.tool_calls == 1 ? 1 : n); k++) { /* parallel_tool_calls false: the first */
        json_t *c = json_array_get(calls, (size_t)k);
        char id[96];
        snprintf(id, sizeof id, "call-%s-%d-%d", ch->id, ch->index, k);
        json_t *tc = json_pack("{s:s,s:s,s:{s:O,s:O}}", "id", id, "type", "function", "function", "name",
                               json_object_get(c, "name"), "arguments", json_object_get(c, "arguments"));
        if (stream) json_object_set_new(tc, "index", json_integer(k));
        json_array_append_new(out, tc);
    }
    json_decref(calls);
    return out;
}

/* a chat reply's finish_reason: "tool_calls" where it called tools and was not cut by max_tokens */
static const char *http_finish_chat(const http_job *ch, const json_t *calls) {
    return calls && ch->job.finish != QF_JOB_LENGTH ? "tool_calls" : http_finish_oai(ch->job.finish);
}

/* an OpenAI choice of a whole reply (completions' echo: the prompt's text and logprobs before the completion's) */
static json_t *http_oai_choice(http_job *ch) {
    size_t len;
    char *t = http_visible(ch, ch->job.nout, 1, &len);
    if (ch->req.api == QF_API_CHAT) {
        size_t cl = 0;
        json_t *calls = http_tool_calls(ch, t, len, 0, &cl);
        json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                                !calls ? http_str(t, len) : cl ? http_str(t, cl) : json_null());
        const char *fin = http_finish_chat(ch, calls);
        if (calls) json_object_set_new(msg, "tool_calls", calls);
        json_t *o = json_pack("{s:i,s:o,s:o,s:s}", "index", (json_int_t)ch->index, "message", msg, "logprobs",
                              http_oai_logprobs(ch, 0, ch->job.nout), "finish_reason", fin);
        free(t);
        return o;
    }
    json_t *lp = ch->req.echo ? http_echo_logprobs(ch) : json_null();
    if (ch->req.echo) {
        size_t pl;
        char *p = http_prompt_text(ch, &pl);
        p = qf_realloc(p, pl + len + 1);
        memcpy(p + pl, t, len);
        free(t);
        t = p, len += pl;
    }
    json_t *gen = http_oai_logprobs(ch, 0, ch->job.nout); /* after the prompt's: text_offset counts on from it */
    if (json_is_object(lp)) qf_logprobs_completion_join(lp, gen);
    else json_decref(lp), lp = gen;
    json_t *o = json_pack("{s:i,s:o,s:o,s:s}", "index", (json_int_t)ch->index, "text", http_str(t, len), "logprobs",
                          lp, "finish_reason", http_finish_oai(ch->job.finish));
    free(t);
    return o;
}

/* TGI's generated_text of choice ch (the prompt's text before it with return_full_text) */
static json_t *http_tgi_text(const http_job *ch) {
    size_t len;
    char *t = http_visible(ch, ch->job.nout, 1, &len);
    json_t *txt;
    if (ch->req.return_full_text) {
        char *full = qf_malloc(ch->req.text_len + len + 1);
        memcpy(full, ch->req.text, ch->req.text_len);
        memcpy(full + ch->req.text_len, t, len);
        txt = http_str(full, ch->req.text_len + len);
        free(full);
    } else {
        txt = http_str(t, len);
    }
    free(t);
    return txt;
}

/* the mean log-probability of a choice's generated tokens (best_of's measure: OpenAI's "highest log probability per
 * token"; 0 without tokens) */
static double http_mean_logprob(const http_job *ch) {
    double s = 0.0;
    for (int i = 0; i < ch->job.nout; i++) s += ch->job.logprob[i];
    return ch->job.nout ? s / ch->job.nout : 0.0;
}

/* order[nch]: the request's choices best first by http_mean_logprob (ties: the lower index) where best_of asked for
 * more candidates than it returns, else in index order */
static void http_choice_order(const http_job *hj, int *order) {
    for (int k = 0; k < hj->nch; k++) order[k] = k;
    if (hj->nret == hj->nch) return;
    for (int k = 1; k < hj->nch; k++) { /* insertion sort: at most QF_SERVE_MAX_N */
        const int x = order[k];
        const double mx = http_mean_logprob(hj->ch[x]);
        int i = k;
        for (; i > 0 && http_mean_logprob(hj->ch[order[i - 1]]) < mx; i--) order[i] = order[i - 1];
        order[i] = x;
    }
}

/* the whole reply of a finished non-streaming request (every choice; with best_of the best) */
static void http_reply_full(http_job *hj) {
    serve_ctx *c = hj->c;
    json_t *o;
    int order[QF_SERVE_MAX_N];
    http_choice_order(hj, order);
    if (hj->req.api == QF_API_TGI) {
        const http_job *best = hj->ch[order[0]];
        o = json_pack("{s:o}", "generated_text", http_tgi_text(best));
        if (hj->req.details) {
            json_t *d = http_tgi_details(best, 1);
            if (hj->nch > 1) { /* TGI's best_of: the other candidates, best first */
                json_t *others = json_array();
                for (int k = 1; k < hj->nch; k++) {
                    json_t *x = http_tgi_details(hj->ch[order[k]], 1);
                    json_object_set_new(x, "generated_text", http_tgi_text(hj->ch[order[k]]));
                    json_array_append_new(others, x);
                }
                json_object_set_new(d, "best_of_sequences", others);
            }
            json_object_set_new(o, "details", d);
        }
    } else {
        json_t *choices = json_array();
        const int vp = hj->req.prompt_top; /* vLLM's prompt_logprobs (-1: not asked): completions' in each choice,
                                            * chat's once beside the choices */
        for (int k = 0; k < hj->nret; k++) { /* with best_of: the nret best, indexed 0.. in that order */
            http_job *cj = hj->ch[order[k]];
            cj->index = k;
            json_t *ch = http_oai_choice(cj);
            if (vp >= 0 && hj->req.api == QF_API_COMPLETIONS)
                json_object_set_new(ch, "prompt_logprobs", qf_logprobs_vllm_prompt(c->o->tok, &cj->job, vp,
                                                                                   hj->req.ids_as_text));
            json_array_append_new(choices, ch);
        }
        o = json_pack("{s:s,s:s,s:i,s:s,s:o,s:o}", "id", hj->id, "object",
                      hj->req.api == QF_API_COMPLETIONS ? "text_completion" : "chat.completion", "created",
                      (json_int_t)hj->created, "model", c->o->model_id, "choices", choices, "usage", http_usage(hj));
        if (vp >= 0 && hj->req.api == QF_API_CHAT)
            json_object_set_new(o, "prompt_logprobs", qf_logprobs_vllm_prompt(c->o->tok, &hj->job, vp,
                                                                              hj->req.ids_as_text));
    }
    http_json(c, hj->evreq, hj->endpoint, 200, o, NULL, NULL);
}

/* one event; o NULL: the closing [DONE] (OpenAI) */
static void http_sse(struct evhttp_request *r, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(b, "data: %s\n\n", s ? s : o ? "{\"error\":\"internal error\"}" : "[DONE]");
    free(s);
    evhttp_send_reply_chunk(r, b);
    evbuffer_free(b);
}

/* an OpenAI stream chunk with one choice: text (completion) or delta (chat), with the logprobs of the tokens
 * generated since the last chunk that carried them (upto: the tokens generated; -1: none in this chunk) */
static json_t *http_oai_chunk(http_job *hj, json_t *piece, const char *finish, int upto) {
    int chat = hj->req.api == QF_API_CHAT;
    json_t *choice = json_pack("{s:i}", "index", (json_int_t)hj->index);
    json_object_set_new(choice, chat ? "delta" : "text", piece);
    if (upto > hj->lp_sent) {
        json_object_set_new(choice, "logprobs", http_oai_logprobs(hj, hj->lp_sent, upto));
        hj->lp_sent = upto;
    } else {
        json_object_set_new(choice, "logprobs", json_null());
    }
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *o = json_pack("{s:s,s:s,s:i,s:s,s:[o]}", "id", hj->id, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)hj->created,
                          "model", hj->c->o->model_id, "choices", choice);
    if (hj->req.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* streams what is new of choice hj (n tokens generated; final: its job is over) on its request's connection */
static void http_stream(http_job *hj, int n, int final) {
    struct evhttp_request *r = hj->lead->evreq;
    size_t len;
    char *t = http_visible(hj, n, final, &len);
    QF_CHECK(hj->text_sent <= len); /* the visible text only grows: decoding concatenates each id's bytes */
    int chat = hj->req.api == QF_API_CHAT;
    if (hj->req.api == QF_API_TGI || hj->req.api == QF_API_TGI_STREAM) { /* one event per token */
        for (int i = hj->nsent; i < n; i++) {
            int last = final && i == n - 1;
            size_t upto = last ? len : 0;
            if (!last) { /* the text of tokens [0, i]: what is stable so far, for the last one of this batch */
                char *ti = http_visible(hj, i + 1, 0, &upto);
                free(ti);
                if (upto < hj->text_sent) upto = hj->text_sent;
            }
            if (upto > len) upto = len;
            json_t *ev = json_pack("{s:i,s:o,s:o}", "index", (json_int_t)i + 1, "token",
                                   http_tgi_token(hj, i, t + hj->text_sent, upto - hj->text_sent), "top_tokens",
                                   hj->job.top_n > 0 ? qf_logprobs_tgi_top(hj->c->o->tok, &hj->job, i, http_special,
                                                                           hj->c)
                                                     : json_null());
            hj->text_sent = upto;
            json_object_set_new(ev, "generated_text", last ? http_str(t, len) : json_null());
            json_object_set_new(ev, "details", last ? http_tgi_details(hj, 0) : json_null());
            http_sse(r, ev);
        }
    } else {
        if (chat && !hj->head_sent) {
            http_sse(r, http_oai_chunk(hj, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL, -1));
            hj->head_sent = 1;
        }
        if (!chat && hj->req.echo && !hj->head_sent) { /* completions' echo: the prompt (and its logprobs) first */
            size_t pl;
            char *p = http_prompt_text(hj, &pl);
            json_t *ck = http_oai_chunk(hj, http_str(p, pl), NULL, -1);
            json_object_set_new(json_array_get(json_object_get(ck, "choices"), 0), "logprobs", http_echo_logprobs(hj));
            http_sse(r, ck);
            free(p);
            hj->head_sent = 1;
        }
        /* a chat with tools: the text that may begin a tool-call block is held back until the reply is over; then
         * its calls go out in one delta (and the text before them was the content), or the rest as content */
        json_t *calls = NULL;
        size_t show = len, cl = 0;
        if (chat && hj->req.tool_calls) {
            if (!final) show = qf_tools_content_safe(t, len);
            else if ((calls = http_tool_calls(hj, t, len, 1, &cl))) show = hj->text_sent;
        }
        if (show > hj->text_sent) {
            json_t *p = http_str(t + hj->text_sent, show - hj->text_sent);
            http_sse(r, http_oai_chunk(hj, chat ? json_pack("{s:o}", "content", p) : p, NULL, n));
            hj->text_sent = show;
        }
        const char *fin = chat ? http_finish_chat(hj, calls) : http_finish_oai(hj->job.finish);
        if (calls) http_sse(r, http_oai_chunk(hj, json_pack("{s:o}", "tool_calls", calls), NULL, n));
        if (final) http_sse(r, http_oai_chunk(hj, chat ? json_object() : json_string(""), fin, n));
    }
    hj->nsent = n;
    free(t);
}

/* an OpenAI stream's end, once every choice is over (hj: the lead): the usage chunk where asked, then [DONE] */
static void http_stream_end(http_job *hj) {
    struct evhttp_request *r = hj->evreq;
    if (hj->req.api != QF_API_COMPLETIONS && hj->req.api != QF_API_CHAT) return;
    if (hj->req.include_usage)
        http_sse(r, json_pack("{s:s,s:s,s:i,s:s,s:[],s:o}", "id", hj->id, "object",
                              hj->req.api == QF_API_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                              (json_int_t)hj->created, "model", hj->c->o->model_id, "choices", "usage",
                              http_usage(hj)));
    http_sse(r, NULL);
}

/* ---- job life ------------------------------------------------------------------------------------------------ */

/* one choice's buffers (its req is the lead's, freed with the lead) */
static void http_choice_free(http_job *ch) {
    free(ch->job.ids);
    free(ch->job.logprob);
    free(ch->job.top_id);
    free(ch->job.top_lp);
    free(ch->job.plp), free(ch->job.prank), free(ch->job.ptop_id), free(ch->job.ptop_lp);
    if (ch != ch->lead) free(ch);
}

/* a request's choices, then its lead (never submitted or unlinked: next/prev unset) */
static void http_job_free(http_job *hj) {
    for (int k = hj->nch - 1; k >= 0; k--) http_choice_free(hj->ch[k]);
    free(hj->ch);
    qf_serve_req_free(&hj->req);
    free(hj);
}

static void http_job_unlink_free(http_job *hj) {
    serve_ctx *c = hj->c;
    if (hj->prev) hj->prev->next = hj->next;
    else c->active = hj->next;
    if (hj->next) hj->next->prev = hj->prev;
    http_job_free(hj);
}

static void http_on_complete(struct evhttp_request *r, void *arg) {
    serve_ctx *c = arg;
    (void)r;
    c->writing--; /* its last byte is written */
}

static void http_on_close(struct evhttp_connection *con, void *arg) {
    http_job *hj = arg;
    (void)con;
    evhttp_request_set_on_complete_cb(hj->evreq, NULL, NULL);
    hj->c->writing--;
    hj->evreq = NULL; /* libevent frees the request */
    for (int k = 0; k < hj->nch; k++) qf_engine_cancel(&hj->c->eng, &hj->ch[k]->job);
}

/* the client's part of a job is over: no more callbacks on its connection */
static void http_detach(http_job *hj) {
    if (!hj->evreq) return;
    struct evhttp_connection *con = evhttp_request_get_connection(hj->evreq);
    if (con) evhttp_connection_set_closecb(con, NULL, NULL);
}

/* 1 when the peer of a request waiting for its whole reply has hung up (evhttp does not read a connection while
 * its request is being answered, so a closed socket shows only here, as an EOF that a peek sees) */
static int http_peer_gone(struct evhttp_request *r) {
    struct evhttp_connection *con = evhttp_request_get_connection(r);
    struct bufferevent *bev = con ? evhttp_connection_get_bufferevent(con) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0) return 0;
    char b;
    ssize_t k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* after every engine step: stream new tokens, finish the replies of released jobs */
static void http_on_notify(evutil_socket_t fd, short what, void *arg) {
    serve_ctx *c = arg;
    (void)fd, (void)what;
    for (http_job *hj = c->active, *nx; hj; hj = nx) {
        nx = hj->next;
        int all = 1, cancelled = 0; /* every choice released; any of them cancelled */
        for (int k = 0; k < hj->nch; k++) {
            http_job *ch = hj->ch[k];
            pthread_mutex_lock(&c->eng.mu);
            int n = ch->job.nout, released = ch->job.released;
            qf_job_finish fin = ch->job.finish;
            pthread_mutex_unlock(&c->eng.mu);
            all &= released, cancelled |= released && fin == QF_JOB_CANCELLED;
            if (hj->evreq && hj->req.stream && n > ch->nsent && !(released && fin == QF_JOB_CANCELLED))
                http_stream(ch, n, released);
        }
        if (hj->evreq && !hj->req.stream && !all && http_peer_gone(hj->evreq)) {
            evhttp_connection_free(evhttp_request_get_connection(hj->evreq)); /* -> http_on_close: cancelled */
            continue;
        }
        if (!all) continue;
        if (hj->evreq) {
            struct evhttp_request *r = hj->evreq;
            http_detach(hj);
            if (cancelled) {
                if (hj->req.stream) {
                    json_t *ev = json_pack("{s:s,s:s}", "error", "the server is shutting down", "error_type",
                                           "overloaded");
                    http_sse(r, ev);
                    evhttp_send_reply_end(r);
                    qf_metrics_request(&c->met, hj->endpoint, 503);
                } else {
                    http_error(c, r, hj->endpoint, hj->req.api, 503, "", "the server is shutting down");
                }
            } else if (hj->req.stream) {
                for (int k = 0; k < hj->nch; k++) /* a choice that ended without a token: its final chunk */
                    if (hj->ch[k]->nsent == 0 && hj->ch[k]->job.nout == 0) http_stream(hj->ch[k], 0, 1);
                http_stream_end(hj);
                evhttp_send_reply_end(r);
                qf_metrics_request(&c->met, hj->endpoint, 200);
            } else {
                http_reply_full(hj);
            }
        }
        http_job_unlink_free(hj);
    }
}

static void http_notify(void *arg) {
    serve_ctx *c = arg;
    event_active(c->notify_ev, EV_READ, 0);
}

/* ---- requests ------------------------------------------------------------------------------------------------ */

/* the body of r (NUL-terminated copy, malloc'd) */
static char *http_body(struct evhttp_request *r, size_t *n) {
    struct evbuffer *in = evhttp_request_get_input_buffer(r);
    *n = evbuffer_get_length(in);
    char *s = qf_malloc(*n + 1);
    evbuffer_copyout(in, s, *n);
    s[*n] = 0;
    return s;
}

static const char *http_field(qf_api api, const char *which) {
    int oai = api == QF_API_COMPLETIONS || api == QF_API_CHAT;
    if (!strcmp(which, "input")) return api == QF_API_CHAT ? "messages" : oai ? "prompt" : "inputs";
    return oai ? "max_tokens" : "parameters.max_new_tokens";
}

/* whether request r reports its prompt's log-probabilities */
static int http_prompt_lp(const qf_serve_req *r) {
    return (r->api == QF_API_COMPLETIONS && r->echo && r->logprobs) ||
           (r->api == QF_API_TGI && r->details && r->input_details && !r->stream) || r->prompt_top >= 0;
}

/* choice ch's job over prompt[plen]: up to max_new tokens, drawing from seed where it samples */
static void http_choice_init(http_job *ch, const int32_t *prompt, int plen, int max_new, uint64_t seed) {
    qf_serve_job *j = &ch->job;
    const qf_api api = ch->req.api;
    j->plen = plen, j->max_new = max_new;
    j->ids = qf_malloc((size_t)(plen + max_new) * sizeof *j->ids);
    memcpy(j->ids, prompt, (size_t)plen * sizeof *j->ids);
    j->logprob = qf_malloc((size_t)max_new * sizeof *j->logprob);
    j->sample = ch->req.sample;
    j->seed = seed;
    j->stop = ch->req.stop, j->nstop = ch->req.nstop;
    j->json = ch->req.json;
    j->ignore_eos = ch->req.ignore_eos, j->min_new = ch->req.min_tokens < max_new ? ch->req.min_tokens : max_new;
    qf_json_start(&j->js);
    j->t_arrive = qf_now();
    const int tgi = api == QF_API_TGI || api == QF_API_TGI_STREAM;
    /* TGI reports logprobs (and top_n_tokens' alternatives) in details and streams; OpenAI where logprobs asks;
     * best_of ranks its candidates by them */
    const int asked = tgi ? (api == QF_API_TGI && ch->req.details) || ch->req.stream : ch->req.logprobs;
    j->want_logprob = asked || ch->req.best_of > (ch->req.n > 1 ? ch->req.n : 1);
    j->top_n = asked ? ch->req.top_n : 0;
    if (j->top_n > 0) {
        j->top_id = qf_malloc((size_t)max_new * (size_t)j->top_n * sizeof *j->top_id);
        j->top_lp = qf_malloc((size_t)max_new * (size_t)j->top_n * sizeof *j->top_lp);
    }
    /* the prompt's own log-probabilities: OpenAI completions' echo with logprobs, TGI's decoder_input_details, vLLM's
     * prompt_logprobs */
    j->prompt_lp = http_prompt_lp(&ch->req);
    if (j->prompt_lp) { /* the alternatives: echo's top_n, vLLM's prompt_logprobs, the larger where both */
        j->ptop_n = ch->req.prompt_top > j->top_n ? ch->req.prompt_top : j->top_n;
        j->plp = qf_malloc((size_t)plen * sizeof *j->plp);
        j->prank = qf_calloc((size_t)plen, sizeof *j->prank);
        for (int t = 0; t < plen; t++) j->plp[t] = NAN;
        if (j->ptop_n > 0) {
            j->ptop_id = qf_calloc((size_t)plen * (size_t)j->ptop_n, sizeof *j->ptop_id);
            j->ptop_lp = qf_calloc((size_t)plen * (size_t)j->ptop_n, sizeof *j->ptop_lp);
        }
    }
}

static void http_generate(serve_ctx *c, struct evhttp_request *r, qf_api api, const char *endpoint) {
    const qf_serve_opts *o = c->o;
    size_t n;
    char *body = http_body(r, &n);
    http_job *hj = qf_calloc(1, sizeof *hj);
    qf_serve_refusal why;
    int rc = qf_serve_req_parse(api, body, n, &c->lim, &hj->req, &why);
    free(body);
    if (rc) {
        http_error(c, r, endpoint, api, why.status, why.field, why.msg);
        free(hj);
        return;
    }
    /* the prompt's ids */
    qf_gen_prompts P = {0};
    char msg[2400];
    msg[0] = 0;
    if (api == QF_API_CHAT) {
        qf_gen_src src = {.tok = o->tok, .tmpl = o->tmpl, .tmpl_why = o->tmpl_why, .system = o->system,
                          .no_thinking = hj->req.no_thinking};
        if (qf_gen_prompt_chat(&src, hj->req.chat, &P, msg, sizeof msg) == 0) msg[0] = 0;
        else if (!msg[0]) snprintf(msg, sizeof msg, "cannot render the conversation");
    } else if (hj->req.prompt_ids) { /* completions: token ids as given (checked against the vocabulary below) */
        P.v = qf_calloc(1, sizeof *P.v), P.v[0].ids = hj->req.prompt_ids, P.v[0].n = hj->req.nprompt_ids;
        P.n = P.cap = 1, hj->req.prompt_ids = NULL;
    } else {
        qf_ids a = {0};
        qf_err te = {0};
        if (qf_tok_encode(o->tok, hj->req.text, hj->req.text_len, &a, &te)) snprintf(msg, sizeof msg, "%s", te.msg);
        else if (a.n == 0) snprintf(msg, sizeof msg, "encodes to no tokens");
        else P.v = qf_calloc(1, sizeof *P.v), P.v[0].ids = a.v, P.v[0].n = (int)a.n, P.n = P.cap = 1, a.v = NULL;
        free(a.v);
    }
    const char *fin = http_field(api, "input"), *fnew = http_field(api, "new");
    if (msg[0]) {
        char m2[2600];
        snprintf(m2, sizeof m2, "%s: %s", fin, msg);
        http_error(c, r, endpoint, api, 400, fin, m2);
        qf_gen_prompts_free(&P);
        qf_serve_req_free(&hj->req);
        free(hj);
        return;
    }
    if (hj->req.truncate > 0 && P.v[0].n > hj->req.truncate) { /* TGI's truncate: the prompt's last N tokens */
        const int cut = P.v[0].n - hj->req.truncate;
        memmove(P.v[0].ids, P.v[0].ids + cut, (size_t)hj->req.truncate * sizeof *P.v[0].ids);
        P.v[0].n = hj->req.truncate;
    }
    int plen = P.v[0].n, max_new = hj->req.max_new;
    if (max_new < 0) { /* not given: the API's default, at most the room the prompt leaves */
        max_new = o->max_total - plen;
        if (hj->req.default_new > 0 && hj->req.default_new < max_new) max_new = hj->req.default_new;
    }
    char m2[512] = "";
    const char *bad = NULL;
    for (int i = 0; i < plen && !bad; i++)
        if (P.v[0].ids[i] >= o->cfg->vocab_size)
            bad = fin, snprintf(m2, sizeof m2, "%s: token %d is outside the model's vocabulary (%lld)", fin,
                                P.v[0].ids[i], (long long)o->cfg->vocab_size);
    for (int i = 0; i < hj->req.sample.nbias && !bad; i++)
        if (hj->req.bias_id[i] >= o->cfg->vocab_size)
            bad = "logit_bias", snprintf(m2, sizeof m2, "logit_bias: token %d is outside the model's vocabulary (%lld)",
                                         hj->req.bias_id[i], (long long)o->cfg->vocab_size);
    if (!bad && hj->req.truncate > o->max_input)
        bad = "parameters.truncate", snprintf(m2, sizeof m2, "parameters.truncate = %d exceeds --max-input-tokens %d",
                                              hj->req.truncate, o->max_input);
    if (!bad && plen > o->max_input)
        bad = fin, snprintf(m2, sizeof m2, "%s: %d tokens exceed --max-input-tokens %d", fin, plen, o->max_input);
    else if (!bad && (max_new < (hj->req.echo ? 0 : 1) || plen + max_new > o->max_total))
        bad = fnew, snprintf(m2, sizeof m2, "%s: %d prompt tokens + %d new tokens exceed --max-total-tokens %d", fnew,
                             plen, max_new, o->max_total);
    if (bad) {
        http_error(c, r, endpoint, api, 400, bad, m2);
        qf_gen_prompts_free(&P);
        qf_serve_req_free(&hj->req);
        free(hj);
        return;
    }
    if (c->draining) {
        http_error(c, r, endpoint, api, 503, "", "the server is shutting down");
        qf_gen_prompts_free(&P);
        qf_serve_req_free(&hj->req);
        free(hj);
        return;
    }
    /* the choices (OpenAI's n; one elsewhere; best_of's candidates where more): each a job of its own over the same
     * prompt, seeds seed + index (as vLLM's), the lead's req shared */
    const int nret = hj->req.n > 1 ? hj->req.n : 1, nch = hj->req.best_of > nret ? hj->req.best_of : nret;
    if (nch > o->max_queue) {
        snprintf(m2, sizeof m2, "%s = %d choices exceed --max-queue %d", nch > nret ? "best_of" : "n", nch,
                 o->max_queue);
        http_error(c, r, endpoint, api, 400, nch > nret ? (api == QF_API_TGI ? "parameters.best_of" : "best_of") : "n",
                   m2);
        qf_gen_prompts_free(&P);
        qf_serve_req_free(&hj->req);
        free(hj);
        return;
    }
    hj->c = c, hj->evreq = r, hj->endpoint = endpoint, hj->created = (long)time(NULL), hj->lead = hj;
    snprintf(hj->id, sizeof hj->id, "%s-%lu", api == QF_API_CHAT ? "chatcmpl" : "cmpl", ++c->next_id);
    const uint64_t seed = hj->req.has_seed ? hj->req.seed : (uint64_t)time(NULL) * 6364136223846793005ull + c->next_id;
    hj->nch = nch, hj->nret = nret;
    hj->ch = qf_calloc((size_t)nch, sizeof *hj->ch);
    qf_serve_job **jobs = qf_calloc((size_t)nch, sizeof *jobs);
    for (int k = 0; k < nch; k++) {
        http_job *ch = hj->ch[k] = k ? qf_calloc(1, sizeof *ch) : hj;
        if (k) ch->req = hj->req, ch->c = c, ch->endpoint = endpoint, ch->created = hj->created, ch->lead = hj;
        if (k) memcpy(ch->id, hj->id, sizeof ch->id);
        ch->index = k;
        http_choice_init(ch, P.v[0].ids, plen, max_new, seed + (uint64_t)k);
        ch->job.after = k ? &hj->job : NULL; /* the prefix cache: the others share the lead's prompt blocks */
        jobs[k] = &ch->job;
    }
    qf_gen_prompts_free(&P);
    if (qf_engine_submit(&c->eng, jobs, nch)) {
        http_error(c, r, endpoint, api, 503, "", "the queue is full (--max-queue); retry later");
        free(jobs);
        http_job_free(hj);
        return;
    }
    free(jobs);
    hj->next = c->active;
    if (c->active) c->active->prev = hj;
    c->active = hj;
    evhttp_connection_set_closecb(evhttp_request_get_connection(r), http_on_close, hj);
    evhttp_request_set_on_complete_cb(r, http_on_complete, c);
    c->writing++;
    if (hj->req.stream) {
        struct evkeyvalq *h = evhttp_request_get_output_headers(r);
        evhttp_add_header(h, "Content-Type", "text/event-stream");
        evhttp_add_header(h, "Cache-Control", "no-cache");
        evhttp_send_reply_start(r, 200, "OK");
    }
}

static void http_info(serve_ctx *c, struct evhttp_request *r) {
    const qf_serve_opts *o = c->o;
    json_t *v = json_pack("{s:s,s:n,s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:s,s:n}", "model_id", o->model_id,
                          "model_sha", "model_dtype", o->dtype, "model_device_type", o->ops->name, "max_concurrent_requests",
                          (json_int_t)(o->max_queue + o->max_batch), "max_best_of", QF_SERVE_MAX_N, "max_stop_sequences",
                          QF_SERVE_MAX_STOPS, "max_input_tokens", (json_int_t)o->max_input, "max_input_length",
                          (json_int_t)o->max_input, "max_total_tokens", (json_int_t)o->max_total, "max_batch_size",
                          (json_int_t)o->max_batch, "max_batch_total_tokens",
                          (json_int_t)((int64_t)c->nblocks * o->block_size), "max_client_batch_size", 1, "router",
                          "qwen-ft", "version", o->version, "sha");
    http_json(c, r, "/info", 200, v, NULL, NULL);
}

static void http_models(serve_ctx *c, struct evhttp_request *r) {
    json_t *v = json_pack("{s:s,s:[{s:s,s:s,s:i,s:s,s:i}]}", "object", "list", "data", "id", c->o->model_id, "object",
                          "model", "created", (json_int_t)time(NULL), "owned_by", "qwen-ft", "max_model_len",
                          (json_int_t)c->o->max_total);
    http_json(c, r, "/v1/models", 200, v, NULL, NULL);
}

static int http_authorized(serve_ctx *c, struct evhttp_request *r) {
    if (!c->o->api_key) return 1;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(r), "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    const char *k = h + 7, *want = c->o->api_key;
    size_t a = strlen(k), b = strlen(want);
    unsigned diff = a != b;
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned)(k[i] ^ want[i]);
    return diff == 0;
}

static void http_route(struct evhttp_request *r, void *arg) {
    serve_ctx *c = arg;
    static const struct { const char *path; int post; int api; } routes[] = {
        {"/generate", 1, QF_API_TGI}, {"/generate_stream", 1, QF_API_TGI_STREAM},
        {"/v1/completions", 1, QF_API_COMPLETIONS}, {"/v1/chat/completions", 1, QF_API_CHAT},
        {"/health", 0, -1}, {"/info", 0, -2}, {"/v1/models", 0, -3}, {"/metrics", 0, -4}};
    const char *uri = evhttp_request_get_uri(r);
    struct evhttp_uri *u = evhttp_uri_parse(uri);
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    char p[128];
    snprintf(p, sizeof p, "%s", path && path[0] ? path : "/");
    evhttp_uri_free(u);
    size_t pl = strlen(p);
    if (pl > 1 && p[pl - 1] == '/') p[pl - 1] = 0;
    int i = 0, nr = (int)(sizeof routes / sizeof routes[0]);
    while (i < nr && strcmp(routes[i].path, p)) i++;
    if (i == nr) {
        http_error(c, r, "other", QF_API_TGI, 404, "", "no such endpoint");
        return;
    }
    const char *ep = routes[i].path;
    int api = routes[i].api;
    qf_api eapi = api >= 0 ? (qf_api)api : QF_API_TGI;
    enum evhttp_cmd_type m = evhttp_request_get_command(r);
    if (routes[i].post ? m != EVHTTP_REQ_POST : (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_HEAD)) {
        http_json(c, r, ep, 405, json_pack("{s:s,s:s}", "error", routes[i].post ? "use POST" : "use GET", "error_type",
                                           "method"), "Allow", routes[i].post ? "POST" : "GET, HEAD");
        return;
    }
    if (api != -1 && !http_authorized(c, r)) {
        http_error(c, r, ep, eapi, 401, "", "missing or wrong Authorization: Bearer key (--api-key)");
        return;
    }
    if (api >= 0) {
        http_generate(c, r, (qf_api)api, ep);
    } else if (api == -1) {
        struct evbuffer *b = evbuffer_new();
        evhttp_send_reply(r, c->draining ? 503 : 200, c->draining ? "Service Unavailable" : "OK", b);
        evbuffer_free(b);
        qf_metrics_request(&c->met, ep, c->draining ? 503 : 200);
    } else if (api == -2) {
        http_info(c, r);
    } else if (api == -3) {
        http_models(c, r);
    } else {
        size_t len;
        char *t = qf_metrics_text(&c->met, &len);
        struct evbuffer *b = evbuffer_new();
        evbuffer_add(b, t, len);
        free(t);
        evhttp_add_header(evhttp_request_get_output_headers(r), "Content-Type", "text/plain; version=0.0.4");
        evhttp_send_reply(r, 200, "OK", b);
        evbuffer_free(b);
        qf_metrics_request(&c->met, ep, 200);
    }
}

/* ---- shutdown ------------------------------------------------------------------------------------------------ */

static void http_tick(evutil_socket_t fd, short what, void *arg) {
    serve_ctx *c = arg;
    (void)fd, (void)what;
    if (!c->active && c->writing <= 0) {
        event_base_loopexit(c->base, NULL);
        return;
    }
    double now = qf_now();
    if (now > c->drain_deadline && !c->cancelled) {
        fprintf(stderr, "qwen-ft serve: grace period over: cancelling the requests still running\n");
        qf_engine_cancel_all(&c->eng);
        c->cancelled = 1;
    }
    if (now > c->drain_deadline + 10) event_base_loopexit(c->base, NULL); /* clients that never read */
}

static void http_on_signal(evutil_socket_t sig, short what, void *arg) {
    serve_ctx *c = arg;
    (void)what;
    if (c->draining) { /* a second signal: no more grace */
        c->drain_deadline = 0;
        return;
    }
    c->draining = 1;
    c->drain_deadline = qf_now() + c->o->grace_s;
    int n = 0;
    for (http_job *hj = c->active; hj; hj = hj->next) n++;
    fprintf(stderr, "qwen-ft serve: %s: no new requests; %d in flight get %g s to finish\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT", n, c->o->grace_s);
    if (c->sock) evhttp_del_accept_socket(c->http, c->sock), c->sock = NULL;
    struct timeval tv = {0, 50000};
    event_add(c->tick, &tv);
}

/* ---- the server ---------------------------------------------------------------------------------------------- */

/* the ranks agree on rc (the largest code); a rank whose own rc is 0 gets an empty message: the failure is another
 * rank's, which prints it */
static int serve_agree(const qf_serve_opts *o, int rc, qf_err *e) {
    if (o->world <= 1) return rc;
    int all = rc;
    MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, o->comm);
    if (all && !rc) e->code = all, e->msg[0] = 0;
    return all;
}

static qf_engine_opts serve_engine_opts(const qf_serve_opts *o, int nblocks) {
    return (qf_engine_opts){.model = o->model, .cfg = o->cfg, .ops = o->ops, .max_batch = o->max_batch,
                            .max_total = o->max_total, .max_queue = o->max_queue, .chunk = o->chunk,
                            .block_size = o->block_size, .nblocks = nblocks, .stop_ids = o->stop_ids,
                            .nstop_ids = o->nstop_ids, .tok = o->tok, .comm = o->comm, .rank = o->rank,
                            .world = o->world, .l0 = o->l0, .l1 = o->l1, .cuda_graphs = o->cuda_graphs,
                            .decode_ahead = o->decode_ahead, .prefix_cache = o->prefix_cache,
                            .preempt = o->preempt, .speculate = o->speculate};
}

/* ranks > 0: their layers of every step until rank 0 stops */
static int serve_follow(const qf_serve_opts *o, int nblocks, qf_err *e) {
    /* mpirun forwards SIGTERM/SIGINT to every rank: these ranks stop when rank 0, having drained, says so */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    qf_engine g;
    qf_engine_opts eo = serve_engine_opts(o, nblocks);
    int rc = serve_agree(o, qf_engine_init(&g, &eo, e), e);
    if (!rc) qf_engine_follow(&g);
    qf_engine_stop(&g);
    return rc;
}

int qf_serve_run(const qf_serve_opts *o, qf_err *e) {
    /* the KV pool: the smallest that every rank's budget holds */
    int nblocks = 0;
    double kv_gib = 0;
    int rc = qf_serve_plan_blocks(o, &nblocks, &kv_gib, e);
    if (o->world > 1) {
        int least = nblocks;
        MPI_Allreduce(&nblocks, &least, 1, MPI_INT, MPI_MIN, o->comm);
        if (nblocks > 0) kv_gib = kv_gib * least / nblocks;
        nblocks = least;
    }
    if ((rc = serve_agree(o, rc, e))) return rc;
    if (o->rank > 0) return serve_follow(o, nblocks, e);
    serve_ctx *c = qf_calloc(1, sizeof *c);
    c->o = o;
    c->nblocks = nblocks;
    c->lim = (qf_serve_limits){.max_new = o->max_total - 1, .tgi_default_new = 100, .completion_default_new = 16};
    signal(SIGPIPE, SIG_IGN);
    evthread_use_pthreads();
    c->base = event_base_new();
    c->http = c->base ? evhttp_new(c->base) : NULL;
    int port = o->port;
    if (!c->http) rc = qf_err_set(e, QF_EXIT_RUNTIME, "serve: cannot create the HTTP server (libevent)");
    if (!rc) {
        evhttp_set_max_body_size(c->http, (ev_ssize_t)o->max_body);
        evhttp_set_max_headers_size(c->http, 64 * 1024);
        evhttp_set_timeout(c->http, 600);
        evhttp_set_allowed_methods(c->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                                EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
        evhttp_set_gencb(c->http, http_route, c);
        c->sock = evhttp_bind_socket_with_handle(c->http, o->host, (ev_uint16_t)o->port);
        if (!c->sock)
            rc = qf_err_set(e, QF_EXIT_INPUT, "serve: cannot listen on %s:%d: %s", o->host, o->port, strerror(errno));
    }
    if (!rc) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getsockname(evhttp_bound_socket_get_fd(c->sock), (struct sockaddr *)&ss, &sl) == 0)
            port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                  : ((struct sockaddr_in *)&ss)->sin_port);
        qf_metrics_init(&c->met, c->nblocks, o->max_batch);
        c->have_met = 1;
    }
    if (!rc) rc = qf_json_vocab_init(&c->jv, o->tok, o->cfg->vocab_size, o->stop_ids, o->nstop_ids, e);
    qf_engine_opts eo = serve_engine_opts(o, c->nblocks);
    eo.met = &c->met, eo.notify = http_notify, eo.notify_ctx = c, eo.json_vocab = &c->jv;
    if (!rc) rc = qf_engine_init(&c->eng, &eo, e);
    rc = serve_agree(o, rc, e); /* every rank loaded its layers (or none serves) */
    if (!rc) {
        c->notify_ev = event_new(c->base, -1, EV_PERSIST, http_on_notify, c);
        c->sig_term = evsignal_new(c->base, SIGTERM, http_on_signal, c);
        c->sig_int = evsignal_new(c->base, SIGINT, http_on_signal, c);
        c->tick = event_new(c->base, -1, EV_PERSIST, http_tick, c);
        event_add(c->sig_term, NULL);
        event_add(c->sig_int, NULL);
        rc = qf_engine_start(&c->eng, e);
    }
    if (!rc) {
        fprintf(stderr, "qwen-ft serve: %s on %s: %d KV blocks of %d positions (%.3f GiB%s), batch <= %d, queue <= %d\n",
                o->model_id, o->ops->name, c->nblocks, o->block_size, kv_gib, o->world > 1 ? " on rank 0" : "",
                o->max_batch, o->max_queue);
        if (o->world > 1)
            fprintf(stderr, "qwen-ft serve: the layers split over %d ranks (generate's split; rank 0 serves HTTP "
                            "and schedules, rank %d runs the head)\n", o->world, o->world - 1);
        fprintf(stderr, "qwen-ft serve: cuda graphs: %s\n", qf_engine_graphs(&c->eng));
        fprintf(stderr, "qwen-ft serve: decode ahead: %s\n", qf_engine_ahead(&c->eng));
        fprintf(stderr, "qwen-ft serve: prefix cache: %s\n",
                o->prefix_cache ? "on (a prompt shares the cached KV blocks it starts with; --prefix-cache off)"
                                : "off (--prefix-cache off)");
        fprintf(stderr, "qwen-ft serve: preemption: %s\n",
                o->preempt ? "on (blocks taken as requests grow; when short, the request admitted last is recomputed "
                             "later; --preemption off)"
                           : "off (each request holds its whole budget's blocks from admission; --preemption off)");
        if (o->speculate)
            fprintf(stderr, "qwen-ft serve: speculation: up to %d draft tokens a call for each request (what "
                            "followed the latest earlier occurrence of its last 3, 2 or 1 tokens; --speculate 0 "
                            "off)\n", o->speculate);
        else fprintf(stderr, "qwen-ft serve: speculation: off (--speculate N)\n");
        fprintf(stderr, "qwen-ft serve: listening on http://%s:%d\n", o->host, port);
        fflush(stderr);
        event_base_dispatch(c->base);
        fprintf(stderr, "qwen-ft serve: stopped\n");
        uint64_t calls = 0, ahead = 0;
        qf_engine_counts(&c->eng, &calls, &ahead);
        fprintf(stderr, "qwen-ft serve: %llu model calls, %llu of them queued before the previous call's picks were "
                        "read (decode ahead)\n", (unsigned long long)calls, (unsigned long long)ahead);
        pthread_mutex_lock(&c->met.mu);
        const unsigned long long hit = c->met.prefix_hit_tokens, pre = c->met.prompt_tokens;
        const unsigned long long npre = c->met.preemptions, rec = c->met.recomputed_tokens;
        const unsigned long long nd = c->met.spec_draft_tokens, na = c->met.spec_accepted_tokens;
        pthread_mutex_unlock(&c->met.mu);
        fprintf(stderr, "qwen-ft serve: prompt tokens: %llu prefilled, %llu taken from the prefix cache; %llu "
                        "preemptions, %llu positions recomputed\n", pre, hit, npre, rec);
        if (o->speculate)
            fprintf(stderr, "qwen-ft serve: speculation: %llu draft tokens fed, %llu accepted (%.1f%%)\n", nd, na,
                    nd ? 100.0 * (double)na / (double)nd : 0.0);
#ifdef QWENFT_HAVE_CUDA
        if (c->eng.graphs) { /* rank 0's (every rank runs the same steps) */
            qf_cuda_graph_stat st;
            qf_cuda_graph_stats(&st);
            fprintf(stderr, "qwen-ft serve: cuda graphs: %llu warm-ups, %llu captured, %llu updated for a new bound, "
                            "%llu replays, %llu recaptured after a buffer grew, %llu evicted%s; host time %.1f ms in "
                            "warm-ups, %.1f ms capturing\n",
                    (unsigned long long)st.warmups, (unsigned long long)st.captures,
                    (unsigned long long)st.updated, (unsigned long long)st.replays,
                    (unsigned long long)st.regrown, (unsigned long long)st.evicted, st.off ? "; turned off" : "",
                    1e3 * st.warmup_s, 1e3 * st.capture_s);
        }
#endif
    }
    if (c->eng.inited) qf_engine_cancel_all(&c->eng);
    qf_engine_stop(&c->eng);
    while (c->active) http_job_unlink_free(c->active);
    if (c->notify_ev) event_free(c->notify_ev);
    if (c->sig_term) event_free(c->sig_term);
    if (c->sig_int) event_free(c->sig_int);
    if (c->tick) event_free(c->tick);
    if (c->http) evhttp_free(c->http);
    if (c->base) event_base_free(c->base);
    if (c->have_met) qf_metrics_destroy(&c->met);
    if (c->jv.V) qf_json_vocab_free(&c->jv);
    free(c);
    return rc;
}
