/* cmd_generate.c — `qwen-ft generate`: continuations of one prompt or a batch of prompts with a KV cache, the smoke
 * test of a fine-tuned model. Options, prompts and output live here; prompts become ids in src/generate/gen_prompts.c, the
 * decoding loop (batched prefill, one token per row per step, layers split across ranks) is src/generate/decode.c over
 * src/model/model.c's paged mode (as serve's), sampling is src/generate/sample.c.
 * Each rank computes on its backend (the GPU of its local rank in a CUDA build, bf16 by default; CPU ranks in
 * fp32). With N ranks the decoder layers are split across them; rank 0 reads the prompts, samples and prints.
 * The tokenizer is --tokenizer, or else the model directory's tokenizer.json / qwen.tiktoken. Generation stops
 * after the model's eos_token_id, the tokenizer's <|endoftext|> and <|im_end|>, any --stop-id, or once the text
 * contains a --stop string; the stopping token is part of the output ids. */
#include <errno.h>
#include <stddef.h>
#include <jansson.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "chat_template.h"
#include "tokenizer.h"
#include "model/backend.h"
#include "commands.h"
#include "options.h"
#include "generate/decode.h"
#include "plan/estimate_generate.h"
#include "generate/gen_prompts.h"
#include "model/model.h"

#define GEN_MAX_STOPS 32

typedef struct gen_opts {
    const char *model, *prompt_ids, *prompt, *prompts, *tokenizer, *system, *dtype, *template_name;
    int max_new, greedy, top_k, json, chat, timing, stream, ignore_eos, no_thinking, cuda_graphs, decode_ahead;
    double temperature, top_p, repetition_penalty, gpu_limit_gb;
    uint64_t seed;
    const char *stop_strs[GEN_MAX_STOPS];
    int nstop_strs;
    int32_t stop_ids[GEN_MAX_STOPS];
    int nstop_ids;
} gen_opts;

/* ---- options ------------------------------------------------------------------------------------------------- */

/* prints "qwen-ft generate: ..." to err (NULL: say nothing, on ranks other than 0) and returns exit 2 */
#define gen_bad(err, ...) qf_opts_bad((err), "generate", "", __VA_ARGS__)

/* The command line as the option table fills it (options.h); gen_opts_from turns it into gen_opts. */
typedef struct gen_args {
    const char *model, *prompt_ids, *prompt, *prompts, *tokenizer, *system, *dtype, *template_name, *thinking;
    const char *cuda_graphs, *decode_ahead;
    int max_new, greedy, top_k, json, chat, timing, stream, ignore_eos;
    double temperature, top_p, repetition_penalty, gpu_limit_gb;
    uint64_t seed;
    qf_strlist stop, stop_id;
} gen_args;

static const qf_opt GEN_OPTS[] = {
    {.name = "model", .short_name = 'm', .type = QF_OPT_STR, .off = offsetof(gen_args, model), .meta = "M",
     .required = 1, .help = "HDF5 model, checkpoint (file or directory) or HF directory; preset:NAME (a published "
                            "architecture, randomly initialised: benchmarks)"},
    {.name = "tokenizer", .type = QF_OPT_STR, .off = offsetof(gen_args, tokenizer), .meta = "T",
     .help = "tokenizer.json, qwen.tiktoken or a directory holding one (default: the model directory when it "
             "holds one)"},
    {.name = "prompt", .short_name = 'p', .type = QF_OPT_STR, .off = offsetof(gen_args, prompt), .meta = "TEXT",
     .help = "text prompt, encoded as it is (special tokens in it are recognised)"},
    {.name = "prompt-ids", .type = QF_OPT_STR, .off = offsetof(gen_args, prompt_ids), .meta = "LIST",
     .help = "comma-separated token ids"},
    {.name = "prompts", .type = QF_OPT_STR, .off = offsetof(gen_args, prompts), .meta = "F.jsonl",
     .help = "many prompts decoded as one batch, one record per line: {\"prompt\": TEXT}, {\"messages\": [{\"role\": "
             "..., \"content\": ...}]} (ChatML) or {\"prompt_ids\": [...]}"},
    {.name = "chat", .type = QF_OPT_FLAG, .off = offsetof(gen_args, chat),
     .help = "wrap TEXT prompts as a user turn under the chat template, ending as its add_generation_prompt does "
             "(<|im_start|>assistant); the reply's closing <|im_end|> is left out of the text"},
    {.name = "template", .type = QF_OPT_STR, .off = offsetof(gen_args, template_name), .meta = "auto|NAME",
     .help = "chat template of chat prompts, as prepare's --template: auto = the tokenizer directory's own "
             "(recognised by content), else qwen1, chatml, qwen2.5, qwen2.5-base or qwen3; default: auto when the tokenizer "
             "directory has one, else qwen1"},
    {.name = "enable-thinking", .type = QF_OPT_CHOICE, .off = offsetof(gen_args, thinking), .def = "true",
     .choices = "true|false",
     .help = "false: chat prompts end as Qwen3's template ends them under apply_chat_template(..., "
             "enable_thinking=False), with an empty think block after the assistant's header, so the model answers "
             "without reasoning; a --prompts record's own \"enable_thinking\" decides for it; only the qwen3 template "
             "has this switch (under the others false has no effect, as in transformers, and generate says so)"},
    {.name = "system", .type = QF_OPT_STR, .off = offsetof(gen_args, system), .meta = "TEXT",
     .help = "system prompt of chat prompts without one (default: the template's own; qwen1's \"You are a "
             "helpful assistant.\")"},
    {.name = "max-new-tokens", .short_name = 'n', .type = QF_OPT_INT, .off = offsetof(gen_args, max_new), .def = "32",
     .meta = "N", .lo = 1, .hi = 16777216, .help = "at most N new tokens per prompt (prompt + N <= the model's context)"},
    {.name = "greedy", .type = QF_OPT_FLAG, .off = offsetof(gen_args, greedy),
     .help = "argmax decoding (the default unless a sampling option is given)"},
    {.name = "temperature", .type = QF_OPT_DOUBLE, .off = offsetof(gen_args, temperature), .def = "1", .meta = "T",
     .lo = 0, .hi = 1e6, .open = QF_OPT_OPEN_LO, .help = "sample from softmax(logits / T)"},
    {.name = "top-k", .type = QF_OPT_INT, .off = offsetof(gen_args, top_k), .def = "0", .meta = "K", .lo = 0,
     .hi = 2147483647.0, .help = "sample among the K most likely tokens (0 = all)"},
    {.name = "top-p", .type = QF_OPT_DOUBLE, .off = offsetof(gen_args, top_p), .def = "1", .meta = "P", .lo = 0,
     .hi = 1, .open = QF_OPT_OPEN_LO, .help = "sample among the most likely tokens whose mass reaches P (1 = all)"},
    {.name = "seed", .type = QF_OPT_U64, .off = offsetof(gen_args, seed), .def = "0", .meta = "S",
     .help = "sampling seed; prompt i draws from its own stream of S"},
    {.name = "repetition-penalty", .type = QF_OPT_DOUBLE, .off = offsetof(gen_args, repetition_penalty), .def = "1",
     .meta = "R", .lo = 0, .hi = 1e6, .open = QF_OPT_OPEN_LO,
     .help = "divide positive / multiply negative logits of seen tokens by R"},
    {.name = "stop", .type = QF_OPT_LIST, .off = offsetof(gen_args, stop), .meta = "STR",
     .help = "stop a prompt once its text contains STR (repeatable; needs a tokenizer)"},
    {.name = "stop-id", .type = QF_OPT_LIST, .off = offsetof(gen_args, stop_id), .meta = "ID",
     .help = "stop after token ID (repeatable; also ID,ID,...); the model's eos, <|endoftext|> and <|im_end|> "
             "always stop"},
    {.name = "json", .type = QF_OPT_FLAG, .off = offsetof(gen_args, json),
     .help = "one line per prompt, in input order: {\"ids\": [...], \"text\": ..., \"finish\": ...} (text null "
             "without a tokenizer); otherwise the text, streamed for a single prompt"},
    {.name = "dtype", .type = QF_OPT_CHOICE, .off = offsetof(gen_args, dtype), .def = "bf16", .choices = "bf16|fp16|fp32",
     .help = "compute dtype on GPUs (CPU ranks always compute in fp32)"},
    {.name = "gpu-memory-limit-gb", .type = QF_OPT_DOUBLE, .off = offsetof(gen_args, gpu_limit_gb), .def = "0",
     .meta = "G", .lo = 0, .hi = 1e6,
     .help = "device memory per rank (as the deck's gpu_memory_limit_gb; 0 = the GPU's); when the rank's layers do "
             "not fit, they stream from host memory"},
    {.name = "stream-weights", .type = QF_OPT_FLAG, .off = offsetof(gen_args, stream),
     .help = "keep the decoder layers in host memory and stream them through two device slots"},
    {.name = "cuda-graphs", .type = QF_OPT_CHOICE, .off = offsetof(gen_args, cuda_graphs), .def = "on",
     .choices = "on|off", .help = "on: each decoding step runs as one CUDA graph per shape instead of a launch per "
                                  "kernel (GPU, resident weights; the same tokens bit for bit), as serve's"},
    {.name = "decode-ahead", .type = QF_OPT_CHOICE, .off = offsetof(gen_args, decode_ahead), .def = "on",
     .choices = "on|off", .help = "on: with one rank and greedy decoding, each step is queued before the previous "
                                   "step's tokens are read, so the GPU does not wait for the host (the same tokens)"},
    {.name = "timing", .type = QF_OPT_FLAG, .off = offsetof(gen_args, timing),
     .help = "time to first token and decode tokens/s on stderr"},
    {.name = "ignore-eos", .type = QF_OPT_FLAG, .off = offsetof(gen_args, ignore_eos),
     .help = "only --stop-id and --stop stop a prompt (benchmarks: exactly N new tokens)"},
    {.name = "set", .type = QF_OPT_IGNORED, .meta = "KEY=VALUE", .help = "generate reads no deck"},
};

/* gen_opts from the parsed command line, with the checks across options; 0 or exit 2 (printed by rank 0). */
static int gen_opts_from(const gen_args *a, const void *given, int rank, gen_opts *op) {
    const qf_cmd *cmd = &qf_cmd_generate;
    FILE *err = rank == 0 ? stderr : NULL;
    *op = (gen_opts){.model = a->model, .prompt_ids = a->prompt_ids, .prompt = a->prompt, .prompts = a->prompts,
                     .tokenizer = a->tokenizer, .system = a->system, .template_name = a->template_name, .dtype = a->dtype, .max_new = a->max_new,
                     .greedy = 1, .top_k = a->top_k, .json = a->json, .chat = a->chat, .timing = a->timing,
                     .stream = a->stream, .ignore_eos = a->ignore_eos, .temperature = a->temperature,
                     .top_p = a->top_p, .repetition_penalty = a->repetition_penalty, .gpu_limit_gb = a->gpu_limit_gb,
                     .seed = a->seed, .no_thinking = a->thinking && !strcmp(a->thinking, "false"),
                     .cuda_graphs = strcmp(a->cuda_graphs, "off") != 0,
                     .decode_ahead = strcmp(a->decode_ahead, "off") != 0};
    qf_tmpl_id tid;
    if (a->template_name && strcmp(a->template_name, "auto") && qf_tmpl_by_name(a->template_name, &tid))
        return gen_bad(err, "--template %s: unknown (auto, or one of %s)", a->template_name, qf_tmpl_names());
    const char *sampling[] = {"temperature", "top-k", "top-p", "seed"};
    const char *sampled = NULL;
    for (int i = 0; i < 4; i++)
        if (qf_opts_given(cmd, given, sampling[i])) sampled = sampling[i];
    if (sampled && a->greedy) return gen_bad(err, "--greedy contradicts --%s (a sampling option)", sampled);
    if (sampled) op->greedy = 0;
    for (int i = 0; i < a->stop.n; i++) {
        const char *v = a->stop.v[i];
        if (!v[0]) return gen_bad(err, "--stop '': an empty stop string");
        if (op->nstop_strs == GEN_MAX_STOPS) return gen_bad(err, "--stop %s: %d --stop strings at most", v, GEN_MAX_STOPS);
        op->stop_strs[op->nstop_strs++] = v;
    }
    for (int i = 0; i < a->stop_id.n; i++) {
        const char *val = a->stop_id.v[i];
        for (const char *s = val; *s;) {
            char *end;
            errno = 0;
            long v = strtol(s, &end, 10);
            if (end == s || v < 0 || v > INT32_MAX || errno || (*end && *end != ',') || op->nstop_ids == GEN_MAX_STOPS)
                return gen_bad(err, "--stop-id %s: expected token ids (%d at most)", val, GEN_MAX_STOPS);
            op->stop_ids[op->nstop_ids++] = (int32_t)v, s = *end ? end + 1 : end;
        }
    }
    int nsrc = (op->prompt != NULL) + (op->prompt_ids != NULL) + (op->prompts != NULL);
    if (nsrc != 1)
        return gen_bad(err, "give one of --prompt TEXT, --prompt-ids and --prompts%s", nsrc ? ", not several" : "");
    return 0;
}

/* ---- tokenizer and prompts (rank 0) --------------------------------------------------------------------------- */

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

/* The tokenizer: --tokenizer, or the model directory's; *out stays NULL when there is none. Without text input a
 * model directory's tokenizer that does not load only costs the text output (a warning). */
static int gen_tokenizer(const gen_opts *op, qf_tokenizer **out, qf_err *e) {
    *out = NULL;
    const char *path = op->tokenizer;
    if (!path && gen_dir_has_tokenizer(op->model)) path = op->model;
    int needs = op->prompt || op->chat || op->nstop_strs;
    if (!path) {
        if (op->prompt)
            return qf_err_set(e, QF_EXIT_INPUT, "generate: --prompt TEXT needs a tokenizer: pass --tokenizer "
                                                "(tokenizer.json, qwen.tiktoken or an HF model directory); %s holds "
                                                "none", op->model);
        if (needs)
            return qf_err_set(e, QF_EXIT_INPUT, "generate: %s needs a tokenizer: pass --tokenizer (tokenizer.json, "
                                                "qwen.tiktoken or an HF model directory); %s holds none",
                              op->chat ? "--chat" : "--stop", op->model);
        return 0;
    }
    qf_err le = {0};
    if (qf_tok_load(path, out, &le) == 0) return 0;
    *out = NULL;
    if (op->tokenizer || needs) return qf_err_set(e, le.code, "generate: tokenizer %s: %s", path, le.msg);
    fprintf(stderr, "qwen-ft generate: warning: the tokenizer of %s does not load (%s); printing ids only\n", path,
            le.msg);
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

/* ---- output (rank 0) ------------------------------------------------------------------------------------------ */

typedef struct gen_stream {
    const gen_opts *op;
    const qf_tokenizer *tok;
    const int32_t *stops;
    int nstops, on; /* on: stream row 0's text as it is produced */
} gen_stream;

static int gen_is_stop(const int32_t *stops, int n, int32_t t) {
    for (int i = 0; i < n; i++)
        if (stops[i] == t) return 1;
    return 0;
}

/* the text of row's ids, without a closing stop token under --chat (malloc'd, NULL without a tokenizer) */
static char *gen_text(const gen_stream *g, const int32_t *ids, int n, size_t *len) {
    if (!g->tok) return NULL;
    if (g->op->chat && n > 0 && gen_is_stop(g->stops, g->nstops, ids[n - 1])) n--;
    qf_err de = {0};
    char *text = qf_tok_decode(g->tok, ids, (size_t)n, len, &de);
    if (!text) fprintf(stderr, "qwen-ft generate: warning: cannot decode the output: %s\n", de.msg);
    return text;
}

static void gen_on_token(void *ctx, int row, int32_t id) {
    gen_stream *g = ctx;
    if (!g->on || row != 0 || (g->op->chat && gen_is_stop(g->stops, g->nstops, id))) return;
    size_t len = 0;
    qf_err de = {0};
    char *t = qf_tok_decode(g->tok, &id, 1, &len, &de); /* decoding concatenates each id's bytes */
    if (t) fwrite(t, 1, len, stdout);
    fflush(stdout);
    free(t);
}

static void gen_print(const gen_stream *g, const qf_decode_out *out) {
    static const char *const why[] = {"length", "stop", "stop"};
    for (int b = 0; b < out->B; b++) {
        size_t tlen = 0;
        char *text = gen_text(g, out->ids[b], out->n[b], &tlen);
        if (g->op->json) {
            json_t *o = json_object(), *ids = json_array();
            for (int i = 0; i < out->n[b]; i++) json_array_append_new(ids, json_integer(out->ids[b][i]));
            json_object_set_new(o, "ids", ids);
            if (text) {
                size_t len;
                char *clean = gen_utf8_lossy(text, tlen, &len);
                json_object_set_new(o, "text", json_stringn(clean, len));
                free(clean);
            } else {
                json_object_set_new(o, "text", json_null());
            }
            json_object_set_new(o, "finish", json_string(why[out->finish[b]]));
            char *js = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
            printf("%s\n", js);
            free(js);
            json_decref(o);
        } else if (g->on) {
            printf("\n"); /* the text was streamed */
        } else if (text) {
            fwrite(text, 1, tlen, stdout); /* the bytes as decoded, NULs included */
            printf("\n");
        } else {
            for (int i = 0; i < out->n[b]; i++) printf("%s%d", i ? " " : "", out->ids[b][i]);
            printf("\n");
        }
        free(text);
    }
    fflush(stdout);
}

/* ---- the command ---------------------------------------------------------------------------------------------- */

/* The chat template of tok (gen_prompts.h qf_gen_template); 0 or exit 2 with e set. */
static int gen_template(const gen_opts *op, const qf_tokenizer *tok, qf_chat_template *tm, qf_err *e) {
    return qf_gen_template(op->tokenizer ? op->tokenizer : op->model, op->template_name, tok, tm, e);
}

/* rank 0: tokenizer, prompts, checks against the model config */
static int gen_prepare(const gen_opts *op, int world, const qf_model_config *c, qf_tokenizer **tok,
                       qf_gen_prompts *P, int32_t *stops, int *nstops, qf_err *e) {
    if (gen_tokenizer(op, tok, e)) return e->code;
    qf_chat_template tm;
    memset(&tm, 0, sizeof tm);
    qf_err ce = {0};
    int have_tm = *tok && gen_template(op, *tok, &tm, &ce) == 0;
    qf_gen_src src = {*tok, have_tm ? &tm : NULL, ce.msg, op->system, op->chat, op->no_thinking};
    if (op->no_thinking && have_tm && tm.id != QF_TMPL_QWEN3)
        fprintf(stderr, "qwen-ft generate: warning: --enable-thinking false has no effect under the chat template %s "
                        "(only qwen3 has the switch)\n", qf_tmpl_name(tm.id));
    if (op->chat && *tok && !have_tm) qf_err_set(e, QF_EXIT_INPUT, "generate: --chat: %s", ce.msg);
    else if (op->prompt) qf_gen_prompt_text(&src, op->prompt, P, "--prompt", e);
    else if (op->prompt_ids) qf_gen_prompt_idlist(op->prompt_ids, P, e);
    else qf_gen_prompts_read(op->prompts, &src, P, e);
    qf_tmpl_free(&tm);
    if (e->code) return e->code;
    int maxn = 0;
    for (int b = 0; b < P->n && !e->code; b++) {
        maxn = P->v[b].n > maxn ? P->v[b].n : maxn;
        for (int i = 0; i < P->v[b].n && !e->code; i++)
            if (P->v[b].ids[i] >= c->vocab_size)
                qf_err_set(e, QF_EXIT_INPUT, "generate: prompt %d: token %d is outside the model's vocabulary (%lld)%s",
                           b + 1, P->v[b].ids[i], (long long)c->vocab_size,
                           op->prompt_ids ? "" : ": the tokenizer does not belong to this model");
    }
    if (e->code) return e->code;
    if (c->max_position_embeddings > 0 && (int64_t)maxn + op->max_new > c->max_position_embeddings)
        return qf_err_set(e, QF_EXIT_INPUT, "generate: --max-new-tokens %d: the longest prompt (%d tokens) + %d new "
                                            "tokens exceeds the model's context (max_position_embeddings = %lld)",
                          op->max_new, maxn, op->max_new, (long long)c->max_position_embeddings);
    if (world > c->num_layers)
        return qf_err_set(e, QF_EXIT_INPUT, "generate: %d ranks for %d decoder layers: the layer split needs at most "
                                            "one rank per layer", world, c->num_layers);
    *nstops = 0;
    if (c->eos_token_id >= 0 && !op->ignore_eos) stops[(*nstops)++] = (int32_t)c->eos_token_id;
    if (*tok && !op->ignore_eos) {
        int32_t a = qf_tok_special(*tok, "<|endoftext|>"), b = qf_tok_special(*tok, "<|im_end|>");
        if (a >= 0) stops[(*nstops)++] = a;
        if (b >= 0) stops[(*nstops)++] = b;
    }
    for (int i = 0; i < op->nstop_ids; i++) stops[(*nstops)++] = op->stop_ids[i];
    return 0;
}

/* every rank's op table: the GPU of its local rank in op->dtype, else the CPU */
static int gen_agree(int rc, qf_err *e) {
    int worst = 0;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (worst && !rc) e->code = worst, snprintf(e->msg, sizeof e->msg, "another rank failed");
    return worst;
}

static int generate_main(const void *args) {
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    gen_opts op;
    int rc = gen_opts_from(args, args, rank, &op);
    if (rc) return rc;
    qf_err e = {0};
    qf_model_config c;
    char resolved[QF_PATH_MAX + 64];
    qf_tokenizer *tok = NULL;
    qf_gen_prompts P = {0};
    int32_t stops[GEN_MAX_STOPS + 3];
    int nstops = 0;
    qf_cli_model_config("generate", op.model, &c, resolved, sizeof resolved, &e);
    if (!e.code && rank == 0)
        gen_prepare(&op, world, &c, &tok, &P, stops, &nstops, &e);
    rc = e.code;
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    const qf_ops *ops = NULL;
    char info[256];
    if (!rc && qf_cli_backend(op.dtype, op.gpu_limit_gb, &ops, info, sizeof info, &e) == 0 && op.timing)
        fprintf(stderr, "qwen-ft generate: rank %d: %s\n", rank, info);
    if (!rc) rc = gen_agree(e.code, &e);
    if (!rc && rank == 0 && !op.stream && op.gpu_limit_gb > 0) { /* the layers stream when they do not fit */
        int maxn = 0;
        for (int b = 0; b < P.n; b++) maxn = P.v[b].n > maxn ? P.v[b].n : maxn;
        qf_gen_estimate ge;
        qf_estimate_generate(&c, P.n, maxn + op.max_new, world, (int64_t)ops->act_bytes, &ge);
        if ((double)ge.split_worst > op.gpu_limit_gb * 1073741824.0) {
            op.stream = 1;
            fprintf(stderr, "qwen-ft generate: %.2f GiB per rank exceed --gpu-memory-limit-gb %g: the decoder layers "
                            "stream from host memory (%.2f GiB per rank)\n", ge.split_worst / 1073741824.0,
                    op.gpu_limit_gb, ge.stream_worst / 1073741824.0);
        }
    }
    if (!rc) MPI_Bcast(&op.stream, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!rc) {
        gen_stream gs = {&op, tok, stops, nstops, 0};
        gs.on = rank == 0 && !op.json && tok && P.n == 1;
        qf_decode_opts d = {.model = op.model, .cfg = &c, .ops = ops, .max_new = op.max_new,
                            .sample = {.greedy = op.greedy, .top_k = op.top_k, .temperature = op.temperature,
                                       .top_p = op.top_p, .repetition_penalty = op.repetition_penalty},
                            .seed = op.seed, .stream = op.stream, .cuda_graphs = op.cuda_graphs,
                            .decode_ahead = op.decode_ahead, .stop_ids = stops, .nstop_ids = nstops, .stop_strs = op.stop_strs,
                            .nstop_strs = op.nstop_strs, .tok = tok, .on_token = gen_on_token, .on_token_ctx = &gs};
        qf_decode_out out;
        rc = qf_decode_run(&d, &P, MPI_COMM_WORLD, &out, &e);
        if (!rc && rank == 0) {
            gen_print(&gs, &out);
            if (op.timing) {
                int64_t ptok = 0, ntok = 0;
                for (int b = 0; b < P.n; b++) ptok += P.v[b].n, ntok += out.n[b];
                fprintf(stderr, "qwen-ft generate: %d prompt%s (%lld tokens) on %d rank%s (%s): first token after "
                                "%.3f s; %lld new tokens in %.3f s of decoding (%.1f tokens/s); cuda graphs %s; decode "
                                "ahead %s\n",
                        P.n, P.n == 1 ? "" : "s", (long long)ptok, world, world == 1 ? "" : "s", ops->name,
                        out.prefill_s, (long long)ntok, out.decode_s,
                        out.decode_s > 0 ? (double)(ntok - P.n) / out.decode_s : 0.0, out.graphs ? out.graphs : "off",
                        out.ahead ? out.ahead : "off");
            }
        }
        if (rank == 0 && !rc) qf_decode_out_free(&out);
    }
    if (rc && rank == 0) fprintf(stderr, "qwen-ft: %s\n", e.msg);
    if (tok) qf_tok_free(tok);
    qf_gen_prompts_free(&P);
    return rc;
}

const qf_cmd qf_cmd_generate = {
    .name = "generate",
    .synopsis = "--model=M [--tokenizer=T] (--prompt=TEXT | --prompt-ids=1,2,3 | --prompts=F.jsonl) [--max-new-tokens=N] "
                "[--greedy | --temperature=T [--top-k=K] [--top-p=P] [--seed=S]] [--chat] [--json] [OPTION]...",
    .summary = "greedy / sampled continuations with a KV cache (smoke test of a fine-tuned model)",
    .about = "Under mpirun/srun with N ranks the decoder layers are split across the ranks (one GPU each); rank 0\n"
             "reads the prompts, samples and prints. Generation stops after the model's eos token, <|endoftext|>,\n"
             "<|im_end|>, any --stop-id, or once the text contains a --stop string.",
    .opts = GEN_OPTS,
    .nopts = QF_NOPTS(GEN_OPTS),
    .size = sizeof(gen_args),
    .run = generate_main,
};
