/* cmd_generate.c — `qwen-ft generate --model M [--tokenizer T] (--prompt-ids 1,2,3 | --prompt TEXT)
 * --max-new-tokens N [--greedy | --temperature t --top-p p --top-k k --seed s] [--json]`: a continuation with a KV
 * cache, the smoke test of a fine-tuned model. Each token (prompt tokens too) runs one decode step: its q/k/v, RoPE
 * at its position, k/v appended to the layer's cache, one query attending the cache (the op table's
 * attention_decode), MLP, head. Runs on the CPU op table (fp32) on rank 0. Greedy by default; sampling is seeded
 * and reproducible.
 * The tokenizer is --tokenizer, or else the model directory when it holds tokenizer.json or qwen.tiktoken (an HF
 * directory); --prompt TEXT needs one (exit 2 otherwise). It encodes the prompt as it is (special tokens such as
 * <|im_start|> in the text are recognised, so a ChatML prompt is written out in full) and decodes the new tokens.
 * Generation stops after the model's eos_token_id and, with a tokenizer, after its <|endoftext|> or <|im_end|>; the
 * stop token is part of the output. */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tokenizer.h"
#include "commands.h"
#include "json_out.h"
#include "model.h"
#include "rng.h"

typedef struct gen_opts {
    const char *model, *prompt_ids, *prompt, *tokenizer;
    int max_new, greedy, top_k, json;
    double temperature, top_p;
    uint64_t seed;
} gen_opts;

typedef struct gen_state {
    qf_model m;
    const qf_ops *o;
    int tmax;
    float **kc, **vc;                          /* [L] caches [tmax, KV*D] */
    float *x, *ln, *q, *qr, *k, *kr, *v, *att, *gate, *up, *swi, *rstd, *logits;
    int32_t *tok, *pos;
} gen_state;

static const float *Pp(const gen_state *g, int i) { return (const float *)g->m.params + g->m.offset[i]; }

/* one token through the model at position pos; logits of the next token in g->logits */
static void decode_step(gen_state *g, int token, int pos) {
    const qf_model_config *c = &g->m.cfg;
    const qf_ops *o = g->o;
    int C = c->hidden_size, F = c->intermediate_size, H = c->num_heads, KV = c->num_kv_heads, D = c->head_dim;
    float eps = (float)c->rms_norm_eps;
    g->tok[0] = token;
    g->pos[0] = pos;
    o->embedding_fwd(g->x, g->tok, Pp(g, g->m.ix_embed), 1, C);
    for (int l = 0; l < c->num_layers; l++) {
        const qf_layer_ix *x = &g->m.lix[l];
        o->rmsnorm_fwd(g->ln, g->rstd, g->x, Pp(g, x->ln1), 1, C, eps);
        float *q = c->qk_norm ? g->qr : g->q, *k = c->qk_norm ? g->kr : g->k;
        o->matmul_fwd(q, g->ln, Pp(g, x->qw), x->qb >= 0 ? Pp(g, x->qb) : NULL, 1, C, H * D, 0);
        o->matmul_fwd(k, g->ln, Pp(g, x->kw), x->kb >= 0 ? Pp(g, x->kb) : NULL, 1, C, KV * D, 0);
        o->matmul_fwd(g->v, g->ln, Pp(g, x->vw), x->vb >= 0 ? Pp(g, x->vb) : NULL, 1, C, KV * D, 0);
        if (c->qk_norm) {
            o->rmsnorm_fwd(g->q, g->rstd, g->qr, Pp(g, x->qn), H, D, eps);
            o->rmsnorm_fwd(g->k, g->rstd, g->kr, Pp(g, x->kn), KV, D, eps);
        }
        o->rope_fwd(g->q, g->pos, 1, H, D, c->rope_theta);
        o->rope_fwd(g->k, g->pos, 1, KV, D, c->rope_theta);
        memcpy(g->kc[l] + (size_t)pos * KV * D, g->k, (size_t)KV * D * sizeof(float));
        memcpy(g->vc[l] + (size_t)pos * KV * D, g->v, (size_t)KV * D * sizeof(float));
        o->attention_decode(g->att, g->q, g->kc[l], g->vc[l], pos, H, KV, D);
        o->matmul_fwd(g->x, g->att, Pp(g, x->ow), NULL, 1, H * D, C, 1);
        o->rmsnorm_fwd(g->ln, g->rstd, g->x, Pp(g, x->ln2), 1, C, eps);
        o->matmul_fwd(g->gate, g->ln, Pp(g, x->gate), NULL, 1, C, F, 0);
        o->matmul_fwd(g->up, g->ln, Pp(g, x->up), NULL, 1, C, F, 0);
        o->swiglu_fwd(g->swi, g->gate, g->up, 1, F);
        o->matmul_fwd(g->x, g->swi, Pp(g, x->down), NULL, 1, F, C, 1);
    }
    o->rmsnorm_fwd(g->ln, g->rstd, g->x, Pp(g, g->m.ix_norm), 1, C, eps);
    o->matmul_fwd(g->logits, g->ln, Pp(g, g->m.ix_head), NULL, 1, C, (int)c->vocab_size, 0);
}

/* greedy argmax, or temperature / top-k / top-p sampling */
static int pick(const gen_opts *op, const float *logits, int64_t V, qf_rng *rng, double *probs, int *idx) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (op->greedy) return (int)best;
    double mx = logits[best], sum = 0;
    for (int64_t i = 0; i < V; i++) {
        probs[i] = exp(((double)logits[i] - mx) / op->temperature);
        idx[i] = (int)i;
    }
    /* sort indices by probability, descending (insertion into a top-k prefix is enough for small k; V log V
     * for the rest) */
    for (int64_t i = 1; i < V; i++) { /* simple, V is at most ~152k and this runs once per token */
        int t = idx[i];
        int64_t j = i - 1;
        if (op->top_k > 0 && i >= op->top_k && probs[t] <= probs[idx[op->top_k - 1]]) continue;
        while (j >= 0 && probs[idx[j]] < probs[t]) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = t;
    }
    int64_t n = op->top_k > 0 && op->top_k < V ? op->top_k : V;
    for (int64_t i = 0; i < n; i++) sum += probs[idx[i]];
    if (op->top_p > 0 && op->top_p < 1) { /* smallest prefix with mass >= top_p */
        double acc = 0;
        int64_t keep = 0;
        while (keep < n && acc < op->top_p * sum) acc += probs[idx[keep++]];
        n = keep;
        sum = acc;
    }
    double u = qf_rng_uniform(rng) * sum, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += probs[idx[i]];
        if (u < acc) return idx[i];
    }
    return idx[n - 1];
}

/* 1 if path is a directory holding tokenizer.json or qwen.tiktoken */
static int gen_dir_has_tokenizer(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    static const char *const names[] = {"tokenizer.json", "qwen.tiktoken"};
    char p[QF_PATH_MAX + 32];
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        if (qf_exists(p)) return 1;
    }
    return 0;
}

/* The tokenizer: --tokenizer, or the model directory's; *out stays NULL when there is none. Without --prompt a
 * model directory's tokenizer that does not load only costs the text output (a warning). */
static int gen_tokenizer(const gen_opts *op, qf_tokenizer **out, qf_err *e) {
    *out = NULL;
    const char *path = op->tokenizer;
    if (!path && gen_dir_has_tokenizer(op->model)) path = op->model;
    if (!path) {
        if (op->prompt)
            return qf_err_set(e, QF_EXIT_INPUT, "generate: --prompt TEXT needs a tokenizer: pass --tokenizer "
                                                "(tokenizer.json, qwen.tiktoken or an HF model directory); %s holds "
                                                "none", op->model);
        return 0;
    }
    qf_err le = {0};
    if (qf_tok_load(path, out, &le) == 0) return 0;
    *out = NULL;
    if (op->tokenizer || op->prompt) return qf_err_set(e, le.code, "generate: tokenizer %s: %s", path, le.msg);
    fprintf(stderr, "qwen-ft generate: warning: the tokenizer of %s does not load (%s); printing ids only\n", path,
            le.msg);
    return 0;
}

/* --prompt-ids "1,2,3" -> ids[n] (malloc'd) */
static int gen_parse_ids(const char *list, int **ids, int *n, qf_err *e) {
    int cap = 16;
    *n = 0;
    *ids = qf_malloc((size_t)cap * sizeof(int));
    for (const char *s = list; *s;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX)
            return qf_err_set(e, QF_EXIT_INPUT, "generate: --prompt-ids: '%s' is not a list of token ids", list);
        if (*n == cap) *ids = qf_realloc(*ids, (size_t)(cap *= 2) * sizeof(int));
        (*ids)[(*n)++] = (int)v;
        if (*end && *end != ',') return qf_err_set(e, QF_EXIT_INPUT, "generate: --prompt-ids: unexpected '%c'", *end);
        s = *end == ',' ? end + 1 : end;
    }
    if (*n == 0) return qf_err_set(e, QF_EXIT_INPUT, "generate: --prompt-ids is empty");
    return 0;
}

/* --prompt TEXT -> ids[n] (malloc'd) */
static int gen_encode(const qf_tokenizer *t, const char *text, int **ids, int *n, qf_err *e) {
    qf_ids a = {0};
    qf_err te = {0};
    *n = 0;
    *ids = NULL;
    if (qf_tok_encode(t, text, strlen(text), &a, &te)) {
        free(a.v);
        return qf_err_set(e, te.code ? te.code : QF_EXIT_INPUT, "generate: --prompt: %s", te.msg);
    }
    if (a.n == 0) {
        free(a.v);
        return qf_err_set(e, QF_EXIT_INPUT, "generate: --prompt encodes to no tokens");
    }
    *ids = qf_malloc(a.n * sizeof(int));
    for (size_t i = 0; i < a.n; i++) (*ids)[i] = a.v[i];
    *n = (int)a.n;
    free(a.v);
    return 0;
}

/* s with every ill-formed UTF-8 subsequence replaced by U+FFFD, one per maximal subpart (as Python's
 * decode(errors="replace") and Rust's from_utf8_lossy do); malloc'd */
static char *gen_utf8_lossy(const char *s, size_t n, size_t *outlen) {
    const unsigned char *u = (const unsigned char *)s;
    char *o = qf_malloc(3 * n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned b = u[i];
        size_t len = 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (b < 0x80) len = 1;
        else if (b >= 0xC2 && b <= 0xDF) len = 2;
        else if (b >= 0xE0 && b <= 0xEF) len = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
        else if (b >= 0xF0 && b <= 0xF4) len = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
        size_t j = 1; /* bytes of a valid prefix */
        while (len > 1 && j < len && i + j < n && u[i + j] >= (j == 1 ? lo : 0x80) && u[i + j] <= (j == 1 ? hi : 0xBF))
            j++;
        if (len > 0 && j == len) {
            memcpy(o + k, s + i, len);
            k += len;
            i += len;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i += j;
        }
    }
    o[k] = 0;
    *outlen = k;
    return o;
}

/* prints the new ids: {"ids": [...], "text": ...} with --json, otherwise their text (or the ids without a
 * tokenizer) */
static void gen_print(const gen_opts *op, const qf_tokenizer *t, const int *out, int nout) {
    char *text = NULL;
    size_t tlen = 0;
    if (t) {
        int32_t *v = qf_malloc((size_t)(nout + 1) * sizeof *v);
        for (int i = 0; i < nout; i++) v[i] = out[i];
        qf_err de = {0};
        text = qf_tok_decode(t, v, (size_t)nout, &tlen, &de);
        if (!text) fprintf(stderr, "qwen-ft generate: warning: cannot decode the output: %s\n", de.msg);
        free(v);
    }
    if (op->json) {
        json_t *o = json_object(), *ids = json_array();
        for (int i = 0; i < nout; i++) json_array_append_new(ids, json_integer(out[i]));
        json_object_set_new(o, "ids", ids);
        json_t *str = NULL;
        if (text) {
            size_t len;
            char *clean = gen_utf8_lossy(text, tlen, &len);
            str = json_stringn(clean, len);
            free(clean);
        }
        json_object_set_new(o, "text", str ? str : json_null());
        qf_json_print(o, stdout);
    } else if (text) {
        fwrite(text, 1, tlen, stdout); /* the bytes as decoded, NULs included */
        printf("\n");
    } else {
        for (int i = 0; i < nout; i++) printf("%s%d", i ? " " : "", out[i]);
        printf("\n");
    }
    free(text);
}

static int run(const gen_opts *op, qf_err *e) {
    if (op->prompt && op->prompt_ids)
        return qf_err_set(e, QF_EXIT_INPUT, "generate: give --prompt TEXT or --prompt-ids, not both");
    qf_tokenizer *tok = NULL;
    if (gen_tokenizer(op, &tok, e)) return e->code;
    int *ids = NULL, n = 0;
    if (op->prompt ? gen_encode(tok, op->prompt, &ids, &n, e) : gen_parse_ids(op->prompt_ids, &ids, &n, e)) {
        free(ids);
        if (tok) qf_tok_free(tok);
        return e->code;
    }
    /* stop tokens: the model's eos (below), the tokenizer's <|endoftext|> and <|im_end|> */
    int32_t stop[3] = {-1, -1, -1};
    if (tok) stop[1] = qf_tok_special(tok, "<|endoftext|>"), stop[2] = qf_tok_special(tok, "<|im_end|>");
    gen_state g;
    memset(&g, 0, sizeof g);
    qf_model_config c;
    char resolved[QF_PATH_MAX + 64];
    qf_model_source_config(op->model, &c, resolved, sizeof resolved, e);
    g.o = qf_ops_cpu();
    if (!e->code) qf_model_create(&g.m, &c, g.o, QF_MODEL_PARAMS, e);
    if (!e->code) qf_model_load(&g.m, op->model, e);
    for (int i = 0; i < n && !e->code; i++)
        if (ids[i] >= c.vocab_size)
            qf_err_set(e, QF_EXIT_INPUT, "generate: prompt token %d is outside the model's vocabulary (%lld)%s", ids[i],
                       (long long)c.vocab_size, op->prompt ? ": the tokenizer does not belong to this model" : "");
    if (e->code) {
        free(ids);
        qf_model_free(&g.m);
        if (tok) qf_tok_free(tok);
        return e->code;
    }
    stop[0] = c.eos_token_id >= 0 ? (int32_t)c.eos_token_id : -1;
    int C = c.hidden_size, F = c.intermediate_size, HD = c.num_heads * c.head_dim, KD = c.num_kv_heads * c.head_dim;
    int64_t V = c.vocab_size;
    g.tmax = n + op->max_new;
    g.kc = qf_calloc((size_t)c.num_layers, sizeof(float *));
    g.vc = qf_calloc((size_t)c.num_layers, sizeof(float *));
    for (int l = 0; l < c.num_layers; l++) {
        g.kc[l] = qf_malloc((size_t)g.tmax * KD * sizeof(float));
        g.vc[l] = qf_malloc((size_t)g.tmax * KD * sizeof(float));
    }
    float **bufs[] = {&g.x, &g.ln, &g.q, &g.qr, &g.k, &g.kr, &g.v, &g.att, &g.gate, &g.up, &g.swi, &g.rstd, &g.logits};
    size_t lens[] = {C, C, HD, HD, KD, KD, KD, HD, F, F, F, c.num_heads + 1, V};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) *bufs[i] = qf_calloc(lens[i], sizeof(float));
    g.tok = qf_calloc(1, sizeof(int32_t));
    g.pos = qf_calloc(1, sizeof(int32_t));
    double *probs = qf_malloc((size_t)V * sizeof(double));
    int *idx = qf_malloc((size_t)V * sizeof(int));
    qf_rng rng;
    qf_rng_seed(&rng, op->seed);
    int *out = qf_malloc((size_t)(op->max_new + 1) * sizeof(int)), nout = 0;
    for (int i = 0; i < n; i++) decode_step(&g, ids[i], i);
    for (int s = 0; s < op->max_new; s++) {
        int t = pick(op, g.logits, V, &rng, probs, idx);
        out[nout++] = t;
        if (t == stop[0] || t == stop[1] || t == stop[2]) break;
        if (s + 1 < op->max_new) decode_step(&g, t, n + s);
    }
    gen_print(op, tok, out, nout);
    if (tok) qf_tok_free(tok);
    free(out);
    free(probs);
    free(idx);
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) free(*bufs[i]);
    for (int l = 0; l < c.num_layers; l++) {
        free(g.kc[l]);
        free(g.vc[l]);
    }
    free(g.kc);
    free(g.vc);
    free(g.tok);
    free(g.pos);
    free(ids);
    qf_model_free(&g.m);
    return 0;
}

static const qf_opt GEN_OPTS[] = {
    {.name = "model", .short_name = 'm', .type = QF_OPT_STR, .off = offsetof(gen_opts, model), .meta = "M",
     .required = 1, .help = "HDF5 model, checkpoint (file or directory) or HF directory"},
    {.name = "tokenizer", .type = QF_OPT_STR, .off = offsetof(gen_opts, tokenizer), .meta = "T",
     .help = "tokenizer.json, qwen.tiktoken or a directory holding one (default: the model directory when it "
             "holds one)"},
    {.name = "prompt", .short_name = 'p', .type = QF_OPT_STR, .off = offsetof(gen_opts, prompt), .meta = "TEXT",
     .help = "text prompt, taken as it is and encoded by the tokenizer; special tokens in it are recognised, so a "
             "chat prompt is written in ChatML (bash: --prompt $'<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>"
             "assistant\\n')"},
    {.name = "prompt-ids", .type = QF_OPT_STR, .off = offsetof(gen_opts, prompt_ids), .meta = "LIST",
     .help = "comma-separated token ids"},
    {.name = "max-new-tokens", .short_name = 'n', .type = QF_OPT_INT, .off = offsetof(gen_opts, max_new), .def = "32",
     .meta = "N", .lo = 1, .hi = 16777216,
     .help = "at most N new tokens; generation stops after the model's eos token and the tokenizer's "
             "<|endoftext|> and <|im_end|>"},
    {.name = "greedy", .type = QF_OPT_FLAG, .off = offsetof(gen_opts, greedy),
     .help = "the most likely token at each step (the default unless a sampling option is given)"},
    {.name = "temperature", .type = QF_OPT_DOUBLE, .off = offsetof(gen_opts, temperature), .def = "1", .meta = "T",
     .lo = 0, .hi = INFINITY, .open = QF_OPT_OPEN_LO, .help = "sample with this temperature"},
    {.name = "top-k", .type = QF_OPT_INT, .off = offsetof(gen_opts, top_k), .def = "0", .meta = "K", .lo = 0,
     .hi = 1e9, .help = "sample among the K most likely tokens (0: all)"},
    {.name = "top-p", .type = QF_OPT_DOUBLE, .off = offsetof(gen_opts, top_p), .def = "1", .meta = "P", .lo = 0,
     .hi = 1, .open = QF_OPT_OPEN_LO, .help = "sample from the smallest set of tokens whose probability reaches P"},
    {.name = "seed", .type = QF_OPT_U64, .off = offsetof(gen_opts, seed), .def = "0", .meta = "S",
     .help = "seed of the sampler (same seed, same tokens)"},
    {.name = "json", .type = QF_OPT_FLAG, .off = offsetof(gen_opts, json),
     .help = "print {\"ids\": [...], \"text\": ...}: the new ids and their decoded text (null without a "
             "tokenizer); otherwise the text, or the ids without a tokenizer"},
    {.name = "set", .type = QF_OPT_IGNORED, .meta = "KEY=VALUE", .help = "generate reads no deck"},
};

static int generate_main(const void *opts) {
    gen_opts op = *(const gen_opts *)opts;
    const char *sampling[] = {"temperature", "top-k", "top-p", "seed"};
    const char *sampled = NULL;
    for (int i = 0; i < 4; i++)
        if (qf_opts_given(&qf_cmd_generate, opts, sampling[i])) sampled = sampling[i];
    if (sampled && op.greedy) {
        fprintf(stderr, "qwen-ft generate: --greedy contradicts --%s (a sampling option)\n", sampled);
        return QF_EXIT_INPUT;
    }
    if (!op.prompt_ids && !op.prompt) {
        fprintf(stderr, "qwen-ft generate: needs --prompt TEXT or --prompt-ids LIST\n");
        return QF_EXIT_INPUT;
    }
    op.greedy = !sampled;
    qf_err e = {0};
    if (run(&op, &e)) fprintf(stderr, "qwen-ft: %s\n", e.msg);
    return e.code;
}

const qf_cmd qf_cmd_generate = {
    .name = "generate",
    .synopsis = "--model=M [--tokenizer=T] (--prompt=TEXT | --prompt-ids=1,2,3) [--max-new-tokens=N] "
                "[--greedy | --temperature=T [--top-k=K] [--top-p=P] [--seed=S]] [--json]",
    .summary = "a continuation with a KV cache: the smoke test of a fine-tuned model",
    .about = "Each token (prompt tokens too) runs one decode step on the CPU op table (fp32) on rank 0. Greedy by\n"
             "default; sampling is seeded and reproducible. The stop token is part of the output.",
    .opts = GEN_OPTS,
    .nopts = QF_NOPTS(GEN_OPTS),
    .size = sizeof(gen_opts),
    .run = generate_main,
    .rank0 = 1,
};
