/* serve_logprobs.c — see serve_logprobs.h. */
#include "serve_logprobs.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "serve.h"

/* the bytes of token id alone (malloc'd, *len); an id the tokenizer lacks reads as U+FFFD */
static char *lp_bytes(const qf_tokenizer *tok, int32_t id, size_t *len) {
    qf_err e = {0};
    char *t = qf_tok_decode(tok, &id, 1, len, &e);
    if (t) return t;
    *len = 3;
    t = qf_malloc(4);
    memcpy(t, "\xEF\xBF\xBD", 4);
    return t;
}

/* a JSON number for a log-probability: OpenAI's -9999.0 where it is -inf (or not a number) */
static json_t *lp_num(float lp) { return json_real(isfinite(lp) ? (double)lp : -9999.0); }

/* token id's "token" string: its text, lossy UTF-8, or "token_id:ID" */
static json_t *lp_token(const char *b, size_t n, int32_t id, int ids_as_text) {
    if (ids_as_text) {
        char s[32];
        snprintf(s, sizeof s, "token_id:%d", (int)id);
        return json_string(s);
    }
    size_t m;
    char *clean = qf_serve_utf8_lossy(b, n, &m);
    json_t *v = json_stringn(clean, m);
    free(clean);
    return v;
}

static json_t *lp_byte_list(const char *b, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

/* {"token", "logprob", "bytes"} of id */
static json_t *lp_entry(const qf_tokenizer *tok, int32_t id, float lp, int ids_as_text) {
    size_t n;
    char *b = lp_bytes(tok, id, &n);
    json_t *o = json_pack("{s:o,s:o,s:o}", "token", lp_token(b, n, id, ids_as_text), "logprob", lp_num(lp), "bytes",
                          lp_byte_list(b, n));
    free(b);
    return o;
}

void qf_logprobs_chat_add(json_t *content, const qf_tokenizer *tok, const qf_serve_job *j, int ids_as_text,
                          int from, int to) {
    for (int i = from; i < to; i++) {
        json_t *e = lp_entry(tok, j->ids[j->plen + i], j->logprob[i], ids_as_text), *top = json_array();
        for (int k = 0; k < j->top_n; k++) {
            const size_t at = (size_t)i * (size_t)j->top_n + (size_t)k;
            json_array_append_new(top, lp_entry(tok, j->top_id[at], j->top_lp[at], ids_as_text));
        }
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(content, e);
    }
}

/* d[token's text] = lp unless the key is there (two ids of one text: the likelier, set first, is kept); the key
 * by its length: a token's text may hold a NUL */
static void lp_dict_add(json_t *d, const json_t *token, float lp) {
    const char *k = json_string_value(token);
    const size_t n = json_string_length(token);
    if (!json_object_getn(d, k, n)) json_object_setn_new(d, k, n, lp_num(lp));
}

/* characters of b[n] as UTF-8 text reads them (bytes that do not continue a sequence) */
static size_t lp_chars(const char *b, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)b[i] & 0xC0) != 0x80;
    return c;
}

/* one token of a completions object: id with logprob lp (null where !has_lp), its top_n alternatives (id[k],
 * lp[k]; the dict null where !has_lp), text_offset *chars (advanced by the token's characters) */
static void lp_completion_add(json_t *o, const qf_tokenizer *tok, int ids_as_text, int32_t id, int has_lp, float lp,
                              const int32_t *top_id, const float *top_lp, int top_n, size_t *chars) {
    size_t n;
    char *b = lp_bytes(tok, id, &n);
    json_t *t = lp_token(b, n, id, ids_as_text);
    json_array_append(json_object_get(o, "tokens"), t);
    json_array_append_new(json_object_get(o, "token_logprobs"), has_lp ? lp_num(lp) : json_null());
    json_array_append_new(json_object_get(o, "text_offset"), json_integer((json_int_t)*chars));
    *chars += lp_chars(b, n);
    free(b);
    json_t *d = has_lp ? json_object() : json_null(); /* the top_n most likely, then the chosen one where it is not */
    for (int k = 0; has_lp && k < top_n; k++) {
        size_t m;
        char *bk = lp_bytes(tok, top_id[k], &m);
        json_t *tk = lp_token(bk, m, top_id[k], ids_as_text);
        lp_dict_add(d, tk, top_lp[k]);
        json_decref(tk);
        free(bk);
    }
    if (has_lp) lp_dict_add(d, t, lp);
    json_decref(t);
    json_array_append_new(json_object_get(o, "top_logprobs"), d);
}

static json_t *lp_completion_new(void) {
    return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

json_t *qf_logprobs_completion(const qf_tokenizer *tok, const qf_serve_job *j, int ids_as_text, int from, int to,
                               size_t *chars) {
    json_t *o = lp_completion_new();
    for (int i = from; i < to; i++) {
        const size_t at = (size_t)i * (size_t)j->top_n;
        lp_completion_add(o, tok, ids_as_text, j->ids[j->plen + i], 1, j->logprob[i], j->top_n ? j->top_id + at : NULL,
                          j->top_n ? j->top_lp + at : NULL, j->top_n, chars);
    }
    return o;
}

json_t *qf_logprobs_completion_prompt(const qf_tokenizer *tok, const qf_serve_job *j, int ids_as_text,
                                      size_t *chars) {
    json_t *o = lp_completion_new();
    for (int t = 0; t < j->plen; t++) {
        const size_t at = (size_t)t * (size_t)j->ptop_n; /* the first top_n of its ptop_n (>= top_n) */
        lp_completion_add(o, tok, ids_as_text, j->ids[t], t > 0, j->plp[t], j->top_n ? j->ptop_id + at : NULL,
                          j->top_n ? j->ptop_lp + at : NULL, j->top_n, chars);
    }
    return o;
}

void qf_logprobs_completion_join(json_t *a, json_t *b) {
    static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    for (int k = 0; k < 4; k++) json_array_extend(json_object_get(a, keys[k]), json_object_get(b, keys[k]));
    json_decref(b);
}

/* vLLM's {"logprob", "rank", "decoded_token"} of id under key "ID" of d (kept where the key is there) */
static void lp_vllm_add(json_t *d, const qf_tokenizer *tok, int32_t id, float lp, int rank, int ids_as_text) {
    char key[24];
    snprintf(key, sizeof key, "%d", (int)id);
    if (json_object_get(d, key)) return;
    size_t n;
    char *b = lp_bytes(tok, id, &n);
    json_object_set_new(d, key, json_pack("{s:o,s:i,s:o}", "logprob", lp_num(lp), "rank", (json_int_t)rank,
                                          "decoded_token", lp_token(b, n, id, ids_as_text)));
    free(b);
}

json_t *qf_logprobs_vllm_prompt(const qf_tokenizer *tok, const qf_serve_job *j, int n, int ids_as_text) {
    json_t *a = json_array();
    json_array_append_new(a, json_null());
    for (int t = 1; t < j->plen; t++) {
        json_t *d = json_object();
        const size_t at = (size_t)t * (size_t)j->ptop_n;
        for (int k = 0; k < n; k++) lp_vllm_add(d, tok, j->ptop_id[at + k], j->ptop_lp[at + k], k + 1, ids_as_text);
        lp_vllm_add(d, tok, j->ids[t], j->plp[t], j->prank[t], ids_as_text);
        json_array_append_new(a, d);
    }
    return a;
}

json_t *qf_logprobs_tgi_prefill(const qf_tokenizer *tok, const qf_serve_job *j) {
    json_t *a = json_array();
    for (int t = 0; t < j->plen; t++) {
        size_t n;
        char *b = lp_bytes(tok, j->ids[t], &n);
        json_array_append_new(a, json_pack("{s:i,s:o,s:o}", "id", (json_int_t)j->ids[t], "text", lp_token(b, n, 0, 0),
                                           "logprob", t > 0 ? lp_num(j->plp[t]) : json_null()));
        free(b);
    }
    return a;
}

json_t *qf_logprobs_tgi_top(const qf_tokenizer *tok, const qf_serve_job *j, int i,
                            int (*is_special)(const void *, int32_t), const void *ctx) {
    json_t *a = json_array();
    for (int k = 0; k < j->top_n; k++) {
        const size_t at = (size_t)i * (size_t)j->top_n + (size_t)k;
        const int32_t id = j->top_id[at];
        size_t n;
        char *b = lp_bytes(tok, id, &n);
        json_array_append_new(a, json_pack("{s:i,s:o,s:o,s:b}", "id", (json_int_t)id, "text", lp_token(b, n, id, 0),
                                           "logprob", lp_num(j->top_lp[at]), "special", is_special(ctx, id)));
        free(b);
    }
    return a;
}
