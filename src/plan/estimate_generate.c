/* estimate_generate.c — see estimate_generate.h. Unit layout as src/model/model.c: 0 = embedding, 1..L = layers,
 * L+1 = final norm (+ untied lm_head); rank r of W holds layers qf_decode_split(L, W, r), rank 0 the embedding,
 * rank W-1 the final unit and (tied) the embedding again. */
#include "estimate_generate.h"
#include <stdlib.h>
#include "generate/decode.h"
#include "hf.h"
#include "model/model.h"

void qf_estimate_generate(const qf_model_config *c, int B, int S, int W, int64_t ab, qf_gen_estimate *out) {
    qf_param_spec *specs = NULL;
    int ns = qf_param_specs(c, &specs), L = c->num_layers;
    int64_t *u = calloc((size_t)L + 2, sizeof *u);
    for (int i = 0; i < ns; i++) u[specs[i].layer >= 0 ? specs[i].layer + 1 : (i == 0 ? 0 : L + 1)] += specs[i].numel;
    free(specs);
    int maxn = S > 1 ? S / 2 : 1; /* a prefill call's size: prompts of about half the context */
    int Tcap = qf_decode_chunk(B, maxn);
    out->weights = 0;
    for (int i = 0; i < L + 2; i++) out->weights += ab * u[i];
    out->kv = ab * 2 * (int64_t)L * B * S * c->num_kv_heads * c->head_dim;
    /* generate's calls run through the paged mode: B sequences, each one block of S positions (decode.h) */
    out->one_rank = out->weights + qf_model_paged_bytes(c, B * Tcap, B, B, S, 1, L, 1, ab);
    out->split_worst = out->stream_worst = 0;
    int64_t biggest = 0;
    for (int l = 1; l <= L; l++) biggest = u[l] > biggest ? u[l] : biggest;
    int w = W < 1 ? 1 : W > L ? L : W;
    for (int r = 0; r < w; r++) {
        int l0, l1;
        qf_decode_split(L, w, r, &l0, &l1);
        int64_t b = 0, fixed = 0;
        for (int l = l0; l < l1; l++) b += ab * u[l + 1];
        if (r == 0 || (r == w - 1 && c->tie_word_embeddings)) fixed += ab * u[0];
        if (r == w - 1) fixed += ab * u[L + 1];
        fixed += qf_model_paged_bytes(c, B * Tcap, B, B, S, 1, l1 - l0, r == w - 1, ab);
        int64_t st = fixed + ab * (l1 - l0 > 1 ? 2 : 1) * biggest;
        if (fixed + b > out->split_worst) out->split_worst = fixed + b;
        if (st > out->stream_worst) out->stream_worst = st;
    }
    free(u);
}
