/* sample.h — the next token from a row of logits, as transformers' generate picks it: repetition penalty, then
 * greedy argmax, or temperature -> top-k -> top-p -> a draw from the renormalised softmax. Served requests add
 * OpenAI's logit_bias (first), frequency and presence penalties and TGI's frequency penalty (after the repetition
 * penalty, before the argmax), and min-p and typical decoding (after top-p, as transformers' warpers order them).
 *
 * Cost per token over a vocabulary of V: O(V) for greedy, temperature-only and top-k (the k-th largest logit by
 * quickselect, no sort); top-p sorts once, and only the tokens above a weight threshold that already holds the
 * mass (found in a few O(V) passes): O(V + m log m), m << V in practice (2 ms at V = 152k).
 * No global state: the caller owns the scratch and the rng. */
#ifndef QF_SAMPLE_H
#define QF_SAMPLE_H
#include <stddef.h>
#include <stdint.h>
#include "util/rng.h"

typedef struct qf_sample_opts {
    int greedy;                /* 1: argmax (after the repetition penalty) */
    int top_k;                 /* 0 = off; keeps every token whose logit >= the k-th largest (HF: ties kept) */
    double temperature;        /* > 0; logits / temperature before top-k / top-p */
    double top_p;              /* (0, 1]; 1 = off; the smallest prefix (by probability) whose mass reaches top_p */
    double repetition_penalty; /* 1 = off; > 0: a seen token's logit l becomes l / p (l > 0) or l * p (HF) */
    /* serve's (zero: off) */
    double frequency_penalty;  /* OpenAI / vLLM: l -= f * (the id's count among the generated tokens) */
    double presence_penalty;   /* OpenAI / vLLM: l -= p for every id generated at least once */
    double share_penalty;      /* TGI's frequency_penalty: l -= f * (the id's count / all tokens, prompt included) */
    double min_p;              /* (0, 1]: drop ids less likely than min_p times the likeliest (vLLM, HF MinP) */
    double typical_p;          /* (0, 1): typical decoding's mass (HF TypicalLogitsWarper, TGI's typical_p) */
    int nbias;                 /* OpenAI's logit_bias: bias[i] added to logit bias_id[i] before anything else */
    const int32_t *bias_id;
    const float *bias;
} qf_sample_opts;

typedef struct qf_sampler {
    int64_t V;
    float *val;   /* [V] scratch */
    int32_t *idx; /* [V] candidate ids */
    double *p;    /* [V] their weights */
    uint8_t *seen;/* [V] marks for the repetition penalty (zeros between uses) */
    int32_t *cnt; /* [V] counts for the additive penalties (zeros between uses) */
    void *cand;   /* [V] (weight, id) pairs for the top-p sort */
} qf_sampler;

void qf_sampler_init(qf_sampler *s, int64_t V);
void qf_sampler_free(qf_sampler *s);
/* The next token from logits[V] (modified: the penalties and temperature are applied in place). seen[nseen]: the
 * ids the penalties apply to (prompt + generated so far; duplicates count once for the repetition penalty); here
 * all of them count as generated for OpenAI's penalties (qf_sample_pick_first: the first nprompt are the prompt).
 * rng: used only when sampling. */
int32_t qf_sample_pick(qf_sampler *s, const qf_sample_opts *o, float *logits, const int32_t *seen, size_t nseen,
                       qf_rng *rng);

/* The same distribution drawn with `first` (an id; -1: none, then exactly qf_sample_pick) ahead of the other
 * candidates: one uniform u from rng (as qf_sample_pick), and `first` is the pick exactly when u falls in its slice
 * [0, p(first)) (never when top-k / top-p left it out). Speculative sampling with a proposal of probability 1
 * (serve's n-gram drafts; Leviathan et al. 2023): the proposal is accepted with probability p(first), else a token
 * is drawn from p without it, so the pick's distribution is p whatever `first` is, and whether the proposal is
 * taken is decided in the same draw that would pick another token. */
int32_t qf_sample_pick_first(qf_sampler *s, const qf_sample_opts *o, float *logits, const int32_t *seen, size_t nseen,
                             size_t nprompt, qf_rng *rng, int32_t first);
/* 1 when o's pick needs the logits on the host: sampling, or greedy with anything that changes the logits before
 * the argmax (a penalty, a bias); 0: the argmax of the raw logits (a backend may pick it) */
int qf_sample_on_host(const qf_sample_opts *o);

/* A served token's log-probabilities, under the raw logits[V] (before any penalty or temperature: what OpenAI's and
 * TGI's logprobs report): returns the log-softmax at `chosen`; top_id/top_lp[n] (n <= QF_SAMPLE_TOP_MAX and
 * <= V; n = 0: none) get the n most likely ids, most likely first, ties in id order, with theirs. One pass with an
 * exp per id, plus an insertion into the n kept for the few ids that beat the n-th. */
enum { QF_SAMPLE_TOP_MAX = 20 };
float qf_sample_logprobs(const float *logits, int64_t V, int32_t chosen, int n, int32_t *top_id, float *top_lp);

#endif
