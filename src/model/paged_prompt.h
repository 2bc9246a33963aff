/* paged_prompt.h — the paged model's prompt path (model.h's paged mode, used by model.c): in a ragged call of
 * decoding tokens and prompt chunks, the tail of prompt chunks is attended like attention_fwd (tensor
 * cores on the GPU: Qwen2.5-7B, a 600-token prompt, 41 us a layer against 237 for attention_paged) instead of
 * attention_paged, which stays for the rest (the decoding tokens: one query each): the table's attention_prompt,
 * attention_fwd's arithmetic without cuDNN (ops.h).
 *
 * The tail is found on the host from the call's seq/pos (qf_paged_prompt_plan): walking back from the call's end over
 * runs (one sequence, consecutive positions p .. p+c-1), a run joins while it is a prompt from position 0, or a
 * continued prompt of at least QF_PROMPT_RUN_MIN tokens whose cached prefix is at most QF_PROMPT_PREFIX_MAX times
 * its length; the tail must hold at least QF_PROMPT_TAIL_MIN tokens. The table needs kv_append_paged and
 * attention_prompt (ops.h: the CUDA tables; the CPU table has neither, so there every token takes attention_paged).
 *   - Tail of whole prompts from position 0 only: each one is a segment of one packed row in place (attention_prompt's
 *     seg_start), q, k, v and out the call's own rows.
 *   - Else packed: segment i holds run i's whole sequence, positions 0 .. p+c-1: its q rows are p copies of the run's
 *     first q row (queries whose results are dropped) and then the run's c rows, its k, v rows are gathered from the
 *     pools after the call's k, v were written (embedding_fwd as a row gather), and the run's c outputs are gathered
 *     back into the call's rows. The dropped queries cost at most QF_PROMPT_PREFIX_MAX/2 + 1 times the needed
 *     work, on tensor cores that run it 30-40 times faster than attention_paged.
 * QWENFT_PAGED_PROMPT=off (a bench hook) turns the path off: every token through attention_paged. */
#ifndef QF_MODEL_PAGED_PROMPT_H
#define QF_MODEL_PAGED_PROMPT_H
#include <stdint.h>
#include "model_config.h"
#include "ops.h"
#include "util.h"

/* QF_PROMPT_TAIL_MIN: fewer prompt tokens than this at a call's end go through attention_paged with the rest (a
 * decoding step's one-token prompts among them: their graphs stay the decoding step's) */
enum { QF_PROMPT_RUN_MIN = 32, QF_PROMPT_PREFIX_MAX = 8, QF_PROMPT_TAIL_MIN = 64 };

typedef struct qf_paged_prompt {
    int from;                 /* this call: tokens [from, N) take the path; N: none */
    int P;                    /* this call's packed rows (0: whole prompts from position 0, attended in place) */
    int cap, Tcap, off;       /* packed rows at most (2 Tcap); tokens a call at most; QWENFT_PAGED_PROMPT=off */
    int32_t *d_seg, *d_qidx, *d_kvidx, *d_oidx; /* backend [cap] segment starts, q rows, pool rows; [Tcap] out rows */
    int32_t *h_seg, *h_qidx, *h_kvidx, *h_oidx; /* their host staging */
    int32_t *h_btab;          /* [max_seqs * maxb] the block tables as last copied up (the pool rows of the gather) */
    int max_seqs, maxb, bs;
    void *q, *k, *v, *out;    /* act [cap, H*D], [cap, KV*D] x 2, [cap, H*D] */
    float *lse;               /* [cap, H]: attention_prompt's, unused */
} qf_paged_prompt;

/* What qf_paged_prompt_alloc allocates on the backend, for act elements of ab bytes. */
int64_t qf_paged_prompt_bytes(const qf_model_config *c, int Tcap, int64_t ab);
/* Buffers for calls of up to Tcap tokens; 0 or an exit code (e). Nothing allocated where o lacks kv_append_paged or
 * attention_prompt (the path never runs). */
int qf_paged_prompt_alloc(qf_paged_prompt *pp, const qf_ops *o, const qf_model_config *c, int Tcap, int max_seqs,
                          int maxb, int bs, qf_err *e);
void qf_paged_prompt_free(qf_paged_prompt *pp, const qf_ops *o);
/* The call's tail and its maps (host arrays seq, pos [N]; btab the block tables when they changed, else NULL),
 * copied up. */
void qf_paged_prompt_plan(qf_paged_prompt *pp, const qf_ops *o, const int32_t *seq, const int32_t *pos, int N,
                          const int32_t *btab);
/* One layer's attention of the tail: k, v [N, KV, D] of tokens [from, N) into the pools, att [N, H, D] rows
 * [from, N) written from q. The caller ran attention_paged on tokens [0, from) (it writes their k, v) before. */
void qf_paged_prompt_attend(const qf_paged_prompt *pp, const qf_ops *o, void *att, const void *q, const void *k,
                            const void *v, void *kpool, void *vpool, const int32_t *d_seq, const int32_t *d_pos,
                            const int32_t *d_btab, int N, int H, int KV, int D);

#endif
