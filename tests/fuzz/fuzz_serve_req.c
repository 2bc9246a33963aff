/* fuzz_serve_req.c — the request parser of `qwen-ft serve` (src/serve/serve_req.c): any body, under each of the
 * four generation endpoints' shapes (the first byte picks one), is a request or a refusal with a 4xx status and a
 * message, never a crash, a leak or a request that breaks the limits it was parsed under (prompts as token ids on
 * completions only, the logprobs' alternatives and the choices within their bounds, the penalties, biases, min-p,
 * typical-p and truncation within theirs and on their own API). */
#include <string.h>
#include "fuzz_common.h"
#include "serve/serve_req.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n == 0) return 0;
    qf_api api = (qf_api)(data[0] % QF_API_N);
    qf_serve_limits lim = {.max_new = 255, .tgi_default_new = 100, .completion_default_new = 16};
    qf_serve_req r;
    qf_serve_refusal why;
    int rc = qf_serve_req_parse(api, (const char *)data + 1, n - 1, &lim, &r, &why);
    if (rc) {
        if (why.status < 400 || why.status > 499 || !why.msg[0]) abort();
        return 0;
    }
    int chat = api == QF_API_CHAT, ids = r.prompt_ids != NULL;
    if (ids && (api != QF_API_COMPLETIONS || r.text || r.nprompt_ids < 1)) abort(); /* token ids: completions only */
    for (int i = 0; i < r.nprompt_ids; i++)
        if (r.prompt_ids[i] < 0) abort();
    if (chat ? !r.chat || r.text : !ids && (!r.text || r.text_len == 0)) abort();
    if (r.top_n < 0 || r.top_n > QF_SAMPLE_TOP_MAX || r.n < 0 || r.n > QF_SERVE_MAX_N) abort();
    if ((api == QF_API_TGI || api == QF_API_TGI_STREAM) && (r.top_n > QF_SERVE_TGI_TOP_N || r.n || r.logprobs)) abort();
    if (r.echo && api != QF_API_COMPLETIONS) abort(); /* echo: completions only (chat refuses it) */
    if (r.prompt_top < -1 || r.prompt_top > QF_SAMPLE_TOP_MAX ||
        (r.prompt_top >= 0 && (r.stream || api <= QF_API_TGI_STREAM)))
        abort(); /* vLLM's prompt_logprobs: OpenAI's APIs, never streamed */
    if (r.input_details && (api == QF_API_TGI_STREAM || r.stream || api == QF_API_COMPLETIONS || chat)) abort();
    /* best_of: completions (at least n, never streamed beyond n) and TGI (sampled, without a seed, not streamed) */
    if (r.best_of < 0 || r.best_of > QF_SERVE_MAX_N || (chat && r.best_of > 1) ||
        (r.best_of && r.best_of < (r.n ? r.n : 1)) || (r.stream && r.best_of > (r.n ? r.n : 1)) ||
        (api <= QF_API_TGI_STREAM && r.best_of > 1 && (r.sample.greedy || r.has_seed)))
        abort();
    if (r.max_new > lim.max_new || (r.max_new < 1 && r.max_new != -1 && !(r.max_new == 0 && r.echo)) ||
        r.default_new < 0)
        abort();
    if (r.nstop < 0 || r.nstop > QF_SERVE_MAX_STOPS) abort();
    if (!(r.sample.temperature > 0) || !(r.sample.top_p > 0 && r.sample.top_p <= 1) || r.sample.top_k < 0 ||
        !(r.sample.repetition_penalty > 0))
        abort();
    /* the penalties and biases within their ranges; each only through its own API */
    const qf_sample_opts *o = &r.sample;
    const int tgi = api <= QF_API_TGI_STREAM;
    if (!(o->frequency_penalty >= -2 && o->frequency_penalty <= 2) || !(o->presence_penalty >= -2 &&
        o->presence_penalty <= 2) || !(o->share_penalty >= -2 && o->share_penalty <= 2) ||
        !(o->min_p >= 0 && o->min_p <= 1) || !(o->typical_p == 0 || (o->typical_p > 0 && o->typical_p < 1)) ||
        r.truncate < 0 || o->nbias < 0 || o->nbias > QF_SERVE_MAX_BIAS || (o->nbias && o->bias_id != r.bias_id))
        abort();
    if (tgi ? o->frequency_penalty || o->presence_penalty || o->min_p || o->nbias
            : o->share_penalty || o->typical_p || r.truncate)
        abort();
    if (o->typical_p && o->greedy) abort(); /* TGI: typical_p samples */
    if (r.json && tgi) abort();            /* response_format: OpenAI's */
    if ((tgi && (r.ignore_eos || r.min_tokens)) || r.min_tokens < 0 || r.min_tokens > lim.max_new) abort();
    if (r.tool_calls < 0 || r.tool_calls > 2 || (r.tool_calls && !chat)) abort(); /* tools: chat's */
    for (int i = 0; i < o->nbias; i++)
        if (o->bias_id[i] < 0 || !(o->bias[i] >= -100 && o->bias[i] <= 100)) abort();
    qf_serve_req_free(&r);
    return 0;
}
