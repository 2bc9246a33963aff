/* serve_req.c — see serve_req.h. */
#include "serve_req.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util.h"

static int req_bad(qf_serve_refusal *w, int status, const char *field, const char *fmt, ...) {
    w->status = status;
    snprintf(w->field, sizeof w->field, "%s", field);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof w->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *req_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* the number v into *x (integers and reals) */
static int req_num(json_t *v, const char *f, double *x, qf_serve_refusal *w) {
    if (!json_is_number(v)) return req_bad(w, 400, f, "%s is %s, expected a number", f, req_type(v));
    *x = json_number_value(v);
    if (!isfinite(*x)) return req_bad(w, 400, f, "%s is not finite", f);
    return 0;
}

static int req_int(json_t *v, const char *f, long long lo, long long hi, long long *x, qf_serve_refusal *w) {
    if (!json_is_integer(v)) return req_bad(w, 400, f, "%s is %s, expected an integer", f, req_type(v));
    *x = json_integer_value(v);
    if (*x < lo || *x > hi) return req_bad(w, 400, f, "%s = %lld is outside [%lld, %lld]", f, *x, lo, hi);
    return 0;
}

static int req_bool(json_t *v, const char *f, int *x, qf_serve_refusal *w) {
    if (!json_is_boolean(v)) return req_bad(w, 400, f, "%s is %s, expected a boolean", f, req_type(v));
    *x = json_is_true(v);
    return 0;
}

/* stop: a string or an array of up to QF_SERVE_MAX_STOPS non-empty strings (a string alone: OpenAI) */
static int req_stop(json_t *v, const char *f, int allow_string, qf_serve_req *r, qf_serve_refusal *w) {
    json_t *one[1] = {v};
    size_t n = 1;
    if (json_is_null(v)) return 0;
    if (json_is_array(v)) n = json_array_size(v);
    else if (!allow_string || !json_is_string(v))
        return req_bad(w, 400, f, "%s is %s, expected %s", f, req_type(v),
                       allow_string ? "a string or an array of strings" : "an array of strings");
    if (n > QF_SERVE_MAX_STOPS) return req_bad(w, 400, f, "%s has %zu sequences; at most %d", f, n, QF_SERVE_MAX_STOPS);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
        if (!json_is_string(s)) return req_bad(w, 400, f, "%s[%zu] is %s, expected a string", f, i, req_type(s));
        if (json_string_length(s) == 0) return req_bad(w, 400, f, "%s[%zu] is empty", f, i);
        r->stop[r->nstop] = qf_malloc(json_string_length(s) + 1);
        memcpy(r->stop[r->nstop], json_string_value(s), json_string_length(s) + 1);
        r->nstop++;
    }
    return 0;
}

/* 1 when key is one of names (NULL-terminated) */
static int req_known(const char *key, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(key, *names)) return 1;
    return 0;
}

/* fields refused when given with anything but their neutral value (null, or the value in `ok`) */
static int req_neutral(json_t *v, const char *f, qf_serve_refusal *w) {
    if (json_is_null(v) || json_is_false(v)) return 0;
    return req_bad(w, 400, f, "%s is not supported by qwen-ft serve (give null or leave it out)", f);
}

/* ---- TGI ----------------------------------------------------------------------------------------------------- */

static int req_tgi_params(json_t *p, const qf_serve_limits *lim, qf_serve_req *r, qf_serve_refusal *w) {
    static const char *const neutral[] = {"grammar", "watermark", "adapter_id", NULL};
    int do_sample = 0, warped = 0;
    const char *key;
    json_t *v;
    char f[64];
    json_object_foreach(p, key, v) {
        snprintf(f, sizeof f, "parameters.%.40s", key);
        double x;
        long long i;
        if (!strcmp(key, "max_new_tokens")) {
            if (json_is_null(v)) continue;
            if (req_int(v, f, 1, lim->max_new, &i, w)) return -1;
            r->max_new = (int)i;
        } else if (!strcmp(key, "temperature")) {
            if (json_is_null(v)) continue;
            if (req_num(v, f, &x, w)) return -1;
            if (x <= 0) return req_bad(w, 400, f, "%s = %g must be strictly positive", f, x);
            r->sample.temperature = x, warped |= x != 1.0;
        } else if (!strcmp(key, "top_p")) {
            if (json_is_null(v)) continue;
            if (req_num(v, f, &x, w)) return -1;
            if (x <= 0 || x > 1) return req_bad(w, 400, f, "%s = %g must be in (0, 1]", f, x);
            r->sample.top_p = x, warped |= x < 1.0;
        } else if (!strcmp(key, "top_k")) {
            if (json_is_null(v)) continue;
            if (req_int(v, f, 1, 1 << 30, &i, w)) return -1;
            r->sample.top_k = (int)i, warped = 1;
        } else if (!strcmp(key, "repetition_penalty")) {
            if (json_is_null(v)) continue;
            if (req_num(v, f, &x, w)) return -1;
            if (x <= 0) return req_bad(w, 400, f, "%s = %g must be strictly positive", f, x);
            r->sample.repetition_penalty = x;
        } else if (!strcmp(key, "frequency_penalty")) { /* TGI's: over the ids' shares of all tokens */
            if (json_is_null(v)) continue;
            if (req_num(v, f, &x, w)) return -1;
            if (x < -2 || x > 2) return req_bad(w, 400, f, "%s = %g is outside [-2, 2]", f, x);
            r->sample.share_penalty = x;
        } else if (!strcmp(key, "typical_p")) {
            if (json_is_null(v)) continue;
            if (req_num(v, f, &x, w)) return -1;
            if (x <= 0 || x >= 1) return req_bad(w, 400, f, "%s = %g must be in (0, 1)", f, x);
            r->sample.typical_p = x, warped = 1;
        } else if (!strcmp(key, "truncate")) { /* the prompt's last N tokens (serve_http.c cuts it) */
            if (json_is_null(v)) continue;
            if (req_int(v, f, 1, 1 << 30, &i, w)) return -1;
            r->truncate = (int)i;
        } else if (!strcmp(key, "do_sample")) {
            if (req_bool(v, f, &do_sample, w)) return -1;
        } else if (!strcmp(key, "seed")) {
            if (json_is_null(v)) continue;
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return req_bad(w, 400, f, "%s is %s, expected an integer >= 0", f, req_type(v));
            r->seed = (uint64_t)json_integer_value(v), r->has_seed = 1;
        } else if (!strcmp(key, "stop")) {
            if (req_stop(v, f, 0, r, w)) return -1;
        } else if (!strcmp(key, "details")) {
            if (req_bool(v, f, &r->details, w)) return -1;
        } else if (!strcmp(key, "decoder_input_details")) {
            if (req_bool(v, f, &r->input_details, w)) return -1;
        } else if (!strcmp(key, "top_n_tokens")) {
            if (json_is_null(v)) continue;
            if (req_int(v, f, 0, QF_SERVE_TGI_TOP_N, &i, w)) return -1;
            r->top_n = (int)i;
        } else if (!strcmp(key, "return_full_text")) {
            if (!json_is_null(v) && req_bool(v, f, &r->return_full_text, w)) return -1;
        } else if (!strcmp(key, "best_of")) {
            if (json_is_null(v)) continue;
            if (req_int(v, f, 1, QF_SERVE_MAX_N, &i, w)) return -1;
            r->best_of = (int)i;
        } else if (req_known(key, neutral)) {
            if (req_neutral(v, f, w)) return -1;
        } else {
            return req_bad(w, 400, f, "unknown field %s", f);
        }
    }
    r->sample.greedy = !(do_sample || warped); /* TGI: sampling when do_sample or any warper is set */
    if (r->best_of > 1 && r->sample.greedy) /* TGI's rules: the candidates differ by their draws */
        return req_bad(w, 400, "parameters.best_of", "parameters.best_of = %d needs sampling (do_sample, or a "
                       "temperature, top_k, top_p or typical_p)", r->best_of);
    if (r->best_of > 1 && r->has_seed)
        return req_bad(w, 400, "parameters.seed", "parameters.seed must not be set when parameters.best_of > 1 "
                       "(each candidate draws from its own seed)");
    return 0;
}

static int req_tgi(json_t *o, const qf_serve_limits *lim, qf_serve_req *r, qf_serve_refusal *w) {
    const char *key;
    json_t *v, *in = NULL, *params = NULL;
    json_object_foreach(o, key, v) {
        if (!strcmp(key, "inputs")) in = v;
        else if (!strcmp(key, "parameters")) params = v;
        else if (!strcmp(key, "stream")) {
            if (req_bool(v, "stream", &r->stream, w)) return -1;
        } else return req_bad(w, 400, key, "unknown field %s (expected inputs, parameters, stream)", key);
    }
    if (!in) return req_bad(w, 400, "inputs", "inputs is missing");
    if (!json_is_string(in)) return req_bad(w, 400, "inputs", "inputs is %s, expected a string", req_type(in));
    if (json_string_length(in) == 0) return req_bad(w, 400, "inputs", "inputs is empty");
    r->text_len = json_string_length(in);
    r->text = qf_malloc(r->text_len + 1);
    memcpy(r->text, json_string_value(in), r->text_len + 1);
    r->max_new = -1;
    r->default_new = lim->tgi_default_new;
    if (params && !json_is_null(params)) {
        if (!json_is_object(params))
            return req_bad(w, 400, "parameters", "parameters is %s, expected an object", req_type(params));
        if (req_tgi_params(params, lim, r, w)) return -1;
    }
    if (r->api == QF_API_TGI_STREAM) r->stream = 1;
    if (r->stream && r->best_of > 1) /* TGI's rule: the best is known once every candidate is done */
        return req_bad(w, 400, "parameters.best_of", "parameters.best_of > 1 is not supported when streaming tokens");
    if (r->stream && r->input_details) /* TGI's rule: the prefill's details are in a whole reply only */
        return req_bad(w, 400, "parameters.decoder_input_details",
                       "parameters.decoder_input_details is not supported when streaming tokens");
    return 0;
}

/* ---- OpenAI -------------------------------------------------------------------------------------------------- */

/* a prompt as token ids: a non-empty array of integers >= 0 (the vocabulary's bound is the caller's: serve_http.c) */
static int req_prompt_ids(json_t *a, qf_serve_req *r, qf_serve_refusal *w) {
    const size_t n = json_array_size(a);
    if (n == 0) return req_bad(w, 400, "prompt", "prompt is an empty array");
    if (n > (1u << 24)) return req_bad(w, 400, "prompt", "prompt has %zu token ids", n);
    r->prompt_ids = qf_malloc(n * sizeof *r->prompt_ids);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(a, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            return req_bad(w, 400, "prompt", "prompt[%zu] is %s, expected a token id (an integer >= 0)", i,
                           json_is_integer(x) ? "negative or too large" : req_type(x));
        r->prompt_ids[i] = (int32_t)json_integer_value(x);
    }
    r->nprompt_ids = (int)n;
    return 0;
}

/* OpenAI's logit_bias: {"token id": bias in [-100, 100], ...}, at most QF_SERVE_MAX_BIAS entries (the vocabulary's
 * bound is the caller's: serve_http.c) */
static int req_logit_bias(json_t *v, qf_serve_req *r, qf_serve_refusal *w) {
    if (!json_is_object(v)) return req_bad(w, 400, "logit_bias", "logit_bias is %s, expected an object", req_type(v));
    const size_t n = json_object_size(v);
    if (n > QF_SERVE_MAX_BIAS)
        return req_bad(w, 400, "logit_bias", "logit_bias has %zu entries, at most %d", n, QF_SERVE_MAX_BIAS);
    r->bias_id = qf_malloc((n ? n : 1) * sizeof *r->bias_id);
    r->bias = qf_malloc((n ? n : 1) * sizeof *r->bias);
    const char *k;
    json_t *b;
    int m = 0;
    json_object_foreach(v, k, b) {
        char *end = NULL;
        errno = 0;
        const long long id = strtoll(k, &end, 10);
        if (!*k || *end || errno || id < 0 || id > INT32_MAX || !(*k >= '0' && *k <= '9'))
            return req_bad(w, 400, "logit_bias", "logit_bias key \"%.40s\" is not a token id (an integer >= 0)", k);
        double x;
        if (req_num(b, "logit_bias", &x, w)) return -1;
        if (x < -100 || x > 100)
            return req_bad(w, 400, "logit_bias", "logit_bias[\"%.40s\"] = %g is outside [-100, 100]", k, x);
        r->bias_id[m] = (int32_t)id, r->bias[m++] = (float)x;
    }
    r->sample.nbias = m, r->sample.bias_id = r->bias_id, r->sample.bias = r->bias;
    return 0;
}

/* OpenAI's response_format: {"type": "text"} or {"type": "json_object"} (serve_json.h); json_schema is refused */
static int req_response_format(json_t *v, qf_serve_req *r, qf_serve_refusal *w) {
    if (!json_is_object(v))
        return req_bad(w, 400, "response_format", "response_format is %s, expected an object", req_type(v));
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) {
        if (strcmp(key, "type"))
            return req_bad(w, 400, "response_format", "unknown field response_format.%.40s (expected type)", key);
    }
    json_t *t = json_object_get(v, "type");
    const char *ty = json_string_value(t);
    if (!ty) return req_bad(w, 400, "response_format", "response_format.type is %s, expected \"text\" or "
                            "\"json_object\"", t ? req_type(t) : "missing");
    if (!strcmp(ty, "json_object")) r->json = 1;
    else if (!strcmp(ty, "json_schema"))
        return req_bad(w, 400, "response_format", "response_format.type json_schema is not supported by qwen-ft "
                       "serve (json_object is: any JSON object)");
    else if (strcmp(ty, "text"))
        return req_bad(w, 400, "response_format", "response_format.type \"%.40s\": expected \"text\" or "
                       "\"json_object\"", ty);
    return 0;
}

static int req_openai(json_t *o, const qf_serve_limits *lim, qf_serve_req *r, qf_serve_refusal *w) {
    static const char *const neutral[] = {"tools_choice", "suffix", NULL};
    static const char *const ignored[] = {"user", "metadata", "store", "service_tier", NULL};
    int chat = r->api == QF_API_CHAT, have_temp = 0, top_given = 0;
    double temp = 1.0;
    json_t *v, *prompt = NULL, *messages = NULL, *tools = NULL;
    int tool_none = 0, parallel = 1;
    const char *key;
    r->max_new = -1;
    json_object_foreach(o, key, v) {
        double x;
        long long i;
        if (!strcmp(key, "model")) {
            if (!json_is_string(v)) return req_bad(w, 400, key, "model is %s, expected a string", req_type(v));
            snprintf(r->model, sizeof r->model, "%s", json_string_value(v));
        } else if (!chat && !strcmp(key, "prompt")) prompt = v;
        else if (chat && !strcmp(key, "messages")) messages = v;
        else if (chat && !strcmp(key, "tools")) tools = v;
        else if (!strcmp(key, "max_tokens") || (chat && !strcmp(key, "max_completion_tokens"))) {
            if (json_is_null(v)) continue;
            if (req_int(v, key, chat ? 1 : 0, lim->max_new, &i, w)) return -1; /* 0: echo's scoring (below) */
            r->max_new = (int)i;
        } else if (!strcmp(key, "temperature")) {
            if (json_is_null(v)) continue;
            if (req_num(v, key, &x, w)) return -1;
            if (x < 0 || x > 2) return req_bad(w, 400, key, "temperature = %g is outside [0, 2]", x);
            temp = x, have_temp = 1;
        } else if (!strcmp(key, "top_p")) {
            if (json_is_null(v)) continue;
            if (req_num(v, key, &x, w)) return -1;
            if (x <= 0 || x > 1) return req_bad(w, 400, key, "top_p = %g must be in (0, 1]", x);
            r->sample.top_p = x;
        } else if (!strcmp(key, "top_k")) { /* vLLM's extension: -1 or 0 = off */
            if (json_is_null(v)) continue;
            if (req_int(v, key, -1, 1 << 30, &i, w)) return -1;
            r->sample.top_k = i > 0 ? (int)i : 0;
        } else if (!strcmp(key, "repetition_penalty")) {
            if (json_is_null(v)) continue;
            if (req_num(v, key, &x, w)) return -1;
            if (x <= 0) return req_bad(w, 400, key, "repetition_penalty = %g must be strictly positive", x);
            r->sample.repetition_penalty = x;
        } else if (!strcmp(key, "presence_penalty") || !strcmp(key, "frequency_penalty")) {
            if (json_is_null(v)) continue;
            if (req_num(v, key, &x, w)) return -1;
            if (x < -2 || x > 2) return req_bad(w, 400, key, "%s = %g is outside [-2, 2]", key, x);
            if (key[0] == 'p') r->sample.presence_penalty = x;
            else r->sample.frequency_penalty = x;
        } else if (!strcmp(key, "ignore_eos")) { /* vLLM's: an end-of-text token does not end the reply */
            if (!json_is_null(v) && req_bool(v, key, &r->ignore_eos, w)) return -1;
        } else if (!strcmp(key, "min_tokens")) { /* vLLM's: no end-of-text token before that many */
            if (json_is_null(v)) continue;
            if (req_int(v, key, 0, lim->max_new, &i, w)) return -1;
            r->min_tokens = (int)i;
        } else if (!strcmp(key, "min_p")) { /* vLLM's */
            if (json_is_null(v)) continue;
            if (req_num(v, key, &x, w)) return -1;
            if (x < 0 || x > 1) return req_bad(w, 400, key, "min_p = %g is outside [0, 1]", x);
            r->sample.min_p = x;
        } else if (!strcmp(key, "logit_bias")) {
            if (json_is_null(v)) continue;
            if (req_logit_bias(v, r, w)) return -1;
        } else if (chat && !strcmp(key, "tool_choice")) { /* auto (the calls parsed) or none (a plain reply) */
            if (json_is_null(v)) continue;
            const char *tc = json_string_value(v);
            if (!tc || (strcmp(tc, "auto") && strcmp(tc, "none")))
                return req_bad(w, 400, key, "tool_choice %s is not supported (\"auto\" or \"none\": a reply is not "
                               "forced to call a tool)", tc ? tc : req_type(v));
            tool_none = !strcmp(tc, "none");
        } else if (chat && !strcmp(key, "parallel_tool_calls")) {
            if (!json_is_null(v) && req_bool(v, key, &parallel, w)) return -1;
        } else if (!strcmp(key, "response_format")) {
            if (json_is_null(v)) continue;
            if (req_response_format(v, r, w)) return -1;
        } else if (!strcmp(key, "n")) {
            if (json_is_null(v)) continue;
            if (req_int(v, key, 1, QF_SERVE_MAX_N, &i, w)) return -1;
            r->n = (int)i;
        } else if (!strcmp(key, "best_of")) { /* completions: the best n of best_of; chat: OpenAI has none */
            if (json_is_null(v)) continue;
            if (req_int(v, key, 1, chat ? 1 : QF_SERVE_MAX_N, &i, w)) return -1;
            r->best_of = (int)i;
        } else if (chat && !strcmp(key, "logprobs")) {
            if (!json_is_null(v) && req_bool(v, key, &r->logprobs, w)) return -1;
        } else if (chat && !strcmp(key, "top_logprobs")) {
            if (json_is_null(v)) continue;
            if (req_int(v, key, 0, QF_SAMPLE_TOP_MAX, &i, w)) return -1;
            r->top_n = (int)i, top_given = 1;
        } else if (!chat && !strcmp(key, "logprobs")) { /* completions: the alternatives a token (0: the token's own) */
            if (json_is_null(v)) continue;
            if (json_is_boolean(v))
                return req_bad(w, 400, key, "logprobs is a boolean; /v1/completions takes an integer in [0, %d] "
                                            "(true/false is /v1/chat/completions' form)", QF_SAMPLE_TOP_MAX);
            if (req_int(v, key, 0, QF_SAMPLE_TOP_MAX, &i, w)) return -1;
            r->logprobs = 1, r->top_n = (int)i;
        } else if (!strcmp(key, "prompt_logprobs")) { /* vLLM's: the prompt's tokens with their alternatives */
            if (json_is_null(v)) continue;
            if (req_int(v, key, 0, QF_SAMPLE_TOP_MAX, &i, w)) return -1;
            r->prompt_top = (int)i;
        } else if (!strcmp(key, "return_tokens_as_token_ids")) { /* vLLM's */
            if (!json_is_null(v) && req_bool(v, key, &r->ids_as_text, w)) return -1;
        } else if (!strcmp(key, "echo")) {
            if (!json_is_null(v) && req_bool(v, key, &r->echo, w)) return -1;
            if (chat && r->echo) /* vLLM's chat echo (the last message again) */
                return req_bad(w, 400, key, "echo is not supported by /v1/chat/completions");
        } else if (!strcmp(key, "stream")) {
            if (!json_is_null(v) && req_bool(v, key, &r->stream, w)) return -1;
        } else if (!strcmp(key, "stream_options")) {
            if (json_is_null(v)) continue;
            if (!json_is_object(v)) return req_bad(w, 400, key, "stream_options is %s, expected an object", req_type(v));
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2) {
                if (strcmp(k2, "include_usage"))
                    return req_bad(w, 400, "stream_options", "unknown field stream_options.%.40s", k2);
                if (req_bool(v2, "stream_options.include_usage", &r->include_usage, w)) return -1;
            }
        } else if (chat && !strcmp(key, "chat_template_kwargs")) { /* vLLM's: the template's switches */
            if (json_is_null(v)) continue;
            if (!json_is_object(v))
                return req_bad(w, 400, key, "chat_template_kwargs is %s, expected an object", req_type(v));
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2) {
                int on = 1;
                if (strcmp(k2, "enable_thinking"))
                    return req_bad(w, 400, "chat_template_kwargs",
                                   "unknown field chat_template_kwargs.%.40s (expected enable_thinking)", k2);
                if (req_bool(v2, "chat_template_kwargs.enable_thinking", &on, w)) return -1;
                r->no_thinking = !on;
            }
        } else if (!strcmp(key, "stop")) {
            if (req_stop(v, key, 1, r, w)) return -1;
        } else if (!strcmp(key, "seed")) {
            if (json_is_null(v)) continue;
            if (!json_is_integer(v)) return req_bad(w, 400, key, "seed is %s, expected an integer", req_type(v));
            r->seed = (uint64_t)json_integer_value(v), r->has_seed = 1;
        } else if (req_known(key, neutral)) {
            if (req_neutral(v, key, w)) return -1;
        } else if (!req_known(key, ignored)) {
            return req_bad(w, 400, key, "unknown field %s", key);
        }
    }
    if (r->best_of && r->best_of < (r->n ? r->n : 1))
        return req_bad(w, 400, "best_of", "best_of = %d is less than n = %d (the n best of best_of are returned)",
                       r->best_of, r->n ? r->n : 1);
    if (r->stream && r->best_of > (r->n ? r->n : 1)) /* OpenAI's rule: the best are known once all are done */
        return req_bad(w, 400, "best_of", "best_of > n is not supported with stream: true");
    if (r->stream && r->prompt_top >= 0) /* vLLM's rule */
        return req_bad(w, 400, "prompt_logprobs", "prompt_logprobs is not available with stream: true");
    if (!chat && r->max_new == 0 && !r->echo)
        return req_bad(w, 400, "max_tokens", "max_tokens = 0 needs echo: true (the prompt scored, nothing generated)");
    if (chat && top_given && r->top_n > 0 && !r->logprobs)
        return req_bad(w, 400, "top_logprobs", "top_logprobs needs logprobs: true");
    if (!chat) {
        if (!prompt) return req_bad(w, 400, "prompt", "prompt is missing");
        if (json_is_array(prompt) && json_array_size(prompt) == 1 && !json_is_integer(json_array_get(prompt, 0)))
            prompt = json_array_get(prompt, 0); /* [TEXT] or [[ID, ...]] */
        else if (json_is_array(prompt) && json_array_size(prompt) > 0 && !json_is_integer(json_array_get(prompt, 0)))
            return req_bad(w, 400, "prompt", "prompt is an array of %zu prompts; qwen-ft serve takes one per request",
                           json_array_size(prompt));
        if (json_is_array(prompt)) {
            if (req_prompt_ids(prompt, r, w)) return -1;
            r->default_new = lim->completion_default_new;
        } else if (!json_is_string(prompt))
            return req_bad(w, 400, "prompt", "prompt is %s, expected a string or token ids", req_type(prompt));
        else if (json_string_length(prompt) == 0) return req_bad(w, 400, "prompt", "prompt is empty");
        else {
            r->text_len = json_string_length(prompt);
            r->text = qf_malloc(r->text_len + 1);
            memcpy(r->text, json_string_value(prompt), r->text_len + 1);
            r->default_new = lim->completion_default_new;
        }
    } else {
        if (!messages) return req_bad(w, 400, "messages", "messages is missing");
        if (!json_is_array(messages) || json_array_size(messages) == 0)
            return req_bad(w, 400, "messages", "messages is %s, expected a non-empty array",
                           json_is_array(messages) ? "empty" : req_type(messages));
        r->chat = json_object();
        json_object_set(r->chat, "messages", messages);
        if (tools && !json_is_null(tools)) json_object_set(r->chat, "tools", tools);
        r->tool_calls = json_is_array(tools) && json_array_size(tools) > 0 && !tool_none ? (parallel ? 2 : 1) : 0;
    }
    r->sample.temperature = have_temp && temp > 0 ? temp : 1.0;
    r->sample.greedy = have_temp && temp == 0; /* OpenAI: temperature 0 is argmax; the default (1) samples */
    return 0;
}

int qf_serve_req_parse(qf_api api, const char *body, size_t n, const qf_serve_limits *lim, qf_serve_req *r,
                       qf_serve_refusal *why) {
    memset(r, 0, sizeof *r);
    memset(why, 0, sizeof *why);
    r->api = api;
    r->prompt_top = -1;
    r->sample = (qf_sample_opts){.greedy = 1, .top_k = 0, .temperature = 1.0, .top_p = 1.0, .repetition_penalty = 1.0};
    json_error_t je;
    json_t *o = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
    int rc;
    if (!o) rc = req_bad(why, 400, "", "the body is not valid JSON (line %d, column %d): %s", je.line, je.column, je.text);
    else if (!json_is_object(o)) rc = req_bad(why, 400, "", "the body is %s, expected a JSON object", req_type(o));
    else if (api == QF_API_TGI || api == QF_API_TGI_STREAM) rc = req_tgi(o, lim, r, why);
    else rc = req_openai(o, lim, r, why);
    json_decref(o);
    if (rc) qf_serve_req_free(r);
    return rc;
}

void qf_serve_req_free(qf_serve_req *r) {
    free(r->text);
    free(r->bias_id);
    free(r->bias);
    free(r->prompt_ids);
    json_decref(r->chat);
    for (int i = 0; i < r->nstop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}
