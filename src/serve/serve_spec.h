/* serve_spec.h — the proposals of qwen-ft serve's speculative decoding (--speculate N; TGI's n-gram speculation,
 * vLLM's prompt lookup): after a sequence's tokens, the token that followed the latest earlier occurrence of its
 * last few tokens. The engine feeds a sequence's next proposals as draft rows of its next call and keeps those the
 * model's own picks confirm (serve_engine.h), so the drafts change how many calls a reply takes, never its tokens.
 * A proposal is a function of the tokens before it alone: the drafts of a call are the chain of proposals, each
 * after the tokens and the drafts before it, so a sampled sequence's pick at any position can be drawn with that
 * position's proposal first (sample.h qf_sample_pick_first) whether or not its draft row was fed. */
#ifndef QF_SERVE_SPEC_H
#define QF_SERVE_SPEC_H
#include <stdint.h>

enum { QF_SPEC_NGRAM = 3, QF_SPEC_MAX = 16 };
/* a sampled sequence's generated token i is drawn from qf_rng_seed2(seed, QF_SPEC_STREAM + i) under --speculate */
#define QF_SPEC_STREAM 0x5350454300000000ull
/* The proposal after the L = n + m tokens ids[0 .. n) ++ ext[0 .. m) (ext may be NULL when m = 0): for the longest
 * g <= QF_SPEC_NGRAM (g < L) such that the last g tokens occurred before (ending before the last token), the token
 * after their latest earlier occurrence; -1 where no g has one (or L < 2). One backward scan, O(L). */
int32_t qf_spec_next(const int32_t *ids, int n, const int32_t *ext, int m);
/* out[0 .. k) = the chain of proposals: out[i] = qf_spec_next(ids, n, out, i), up to maxd (<= QF_SPEC_MAX) or the
 * first -1; returns k. */
int qf_spec_drafts(const int32_t *ids, int n, int maxd, int32_t *out);

#endif
