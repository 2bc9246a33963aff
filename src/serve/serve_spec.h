/* serve_spec.h — the draft tokens of qwen-ft serve's speculative decoding (--speculate N; TGI's n-gram speculation,
 * vLLM's prompt-lookup): the tokens that followed the latest earlier occurrence of the sequence's last few tokens.
 * The engine feeds them as extra rows of a greedy sequence's next call and keeps the longest prefix the model's own
 * picks confirm (serve_engine.h), so the drafts change how many calls a reply takes, never its tokens. */
#ifndef QF_SERVE_SPEC_H
#define QF_SERVE_SPEC_H
#include <stdint.h>

/* The longest match first: for g = QF_SPEC_NGRAM down to 1, the latest i + g < n with ids[i .. i+g) equal to the last
 * g tokens ids[n-g .. n) (an earlier occurrence: it ends before the sequence does); the first g that has one gives
 * out[0 .. k) = ids[i+g .. i+g+k), k = min(maxd, n - i - g) (what followed, up to the sequence's end). Returns k
 * (0: no occurrence, n < 2 or maxd <= 0). O(n * QF_SPEC_NGRAM) a call. */
enum { QF_SPEC_NGRAM = 3, QF_SPEC_MAX = 16 };
int qf_spec_ngram(const int32_t *ids, int n, int maxd, int32_t *out);

#endif
