/* serve_logprobs.h — the log-probabilities a reply reports for its generated tokens, in each API's shape, from what
 * the engine kept (qf_serve_job.logprob, .top_id, .top_lp: the log-softmax under the raw logits):
 *   chat (OpenAI):        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
 *                         "bytes"}]}], "refusal": null}
 *   completions (OpenAI): {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{TOKEN: LOGPROB}],
 *                         "text_offset": [...]} (each dict: the top_n most likely and the chosen token; with echo
 *                         the prompt's tokens first, the first one's logprob and dict null)
 *   TGI prefill:          [{"id", "text", "logprob"}] of the prompt's tokens (decoder_input_details)
 *   vLLM prompt_logprobs: [null, {"ID": {"logprob", "rank", "decoded_token"}}] of the prompt's tokens
 *   TGI top_tokens:       [{"id", "text", "logprob", "special"}] for one token, most likely first.
 * A token's text is its bytes decoded alone (a piece of a UTF-8 sequence reads as U+FFFD; "bytes" holds them as
 * they are), or "token_id:ID" under vLLM's return_tokens_as_token_ids. */
#ifndef QF_SERVE_LOGPROBS_H
#define QF_SERVE_LOGPROBS_H
#include <jansson.h>
#include <stddef.h>
#include "serve_engine.h"
#include "tokenizer.h"

/* chat's entries of generated tokens [from, to) appended to content (an array) */
void qf_logprobs_chat_add(json_t *content, const qf_tokenizer *tok, const qf_serve_job *j, int ids_as_text,
                          int from, int to);
/* completions' object of tokens [from, to); *chars: the characters of the completion's text before token from
 * (text_offset's origin), advanced past token to - 1 */
json_t *qf_logprobs_completion(const qf_tokenizer *tok, const qf_serve_job *j, int ids_as_text, int from, int to,
                               size_t *chars);
/* completions' object of the prompt's tokens (OpenAI's echo: j->plp and ptop_*, the first token's logprob and dict
 * null); *chars as above, from the prompt's start */
json_t *qf_logprobs_completion_prompt(const qf_tokenizer *tok, const qf_serve_job *j, int ids_as_text,
                                      size_t *chars);
/* appends completions object b's arrays to a's (b consumed) */
void qf_logprobs_completion_join(json_t *a, json_t *b);
/* vLLM's prompt_logprobs: [null, {"ID": {"logprob", "rank", "decoded_token"}}, ...], each dict the n most likely
 * (ranks 1..n) and the prompt token with its rank */
json_t *qf_logprobs_vllm_prompt(const qf_tokenizer *tok, const qf_serve_job *j, int n, int ids_as_text);
/* TGI's details.prefill: [{"id", "text", "logprob"}] of the prompt's tokens (decoder_input_details; the first
 * token's logprob null) */
json_t *qf_logprobs_tgi_prefill(const qf_tokenizer *tok, const qf_serve_job *j);
/* TGI's top_tokens of generated token i; is_special(ctx, id): TGI's "special" flag */
json_t *qf_logprobs_tgi_top(const qf_tokenizer *tok, const qf_serve_job *j, int i,
                            int (*is_special)(const void *, int32_t), const void *ctx);

#endif
