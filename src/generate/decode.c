/* decode.c — see decode.h. */
#include "decode.h"
#include <stdlib.h>
#include <string.h>
#include "decode_units.h"
#include "model/model.h"
#include "model/paged_ahead.h"
#include "util/rng.h"

#define QF_DECODE_CHUNK_TOKENS 4096 /* tokens of one prefill call (all rows together) */

int qf_decode_chunk(int B, int maxn) {
    int t = QF_DECODE_CHUNK_TOKENS / (B > 0 ? B : 1);
    if (t < 1) t = 1;
    return t < maxn ? t : maxn;
}

void qf_decode_split(int L, int W, int r, int *l0, int *l1) {
    *l0 = (int)((int64_t)r * L / W);
    *l1 = (int)((int64_t)(r + 1) * L / W);
}

/* every rank's error: the first rank's code and message with the highest code (collective) */
static int decode_agree(MPI_Comm comm, qf_err *e) {
    int mine = e->code, worst = 0, rank;
    MPI_Comm_rank(comm, &rank);
    MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, comm);
    if (!worst) return 0;
    int who = mine == worst ? rank : 1 << 30, first;
    MPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, comm);
    MPI_Bcast(e->msg, (int)sizeof e->msg, MPI_CHAR, first, comm);
    e->code = worst;
    return worst;
}

/* the prompts of rank 0 on every rank: lengths, then the ids */
static void decode_bcast_prompts(const qf_gen_prompts *in, qf_gen_prompts *out, MPI_Comm comm) {
    int rank, B = in ? in->n : 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Bcast(&B, 1, MPI_INT, 0, comm);
    memset(out, 0, sizeof *out);
    out->v = qf_calloc((size_t)B, sizeof *out->v);
    out->n = out->cap = B;
    for (int b = 0; b < B; b++) {
        out->v[b].n = rank == 0 ? in->v[b].n : 0;
        MPI_Bcast(&out->v[b].n, 1, MPI_INT, 0, comm);
        out->v[b].ids = qf_malloc((size_t)out->v[b].n * sizeof(int32_t));
        if (rank == 0) memcpy(out->v[b].ids, in->v[b].ids, (size_t)out->v[b].n * sizeof(int32_t));
        MPI_Bcast(out->v[b].ids, out->v[b].n, MPI_INT32_T, 0, comm);
    }
}

/* the per-row state on rank 0 */
typedef struct decode_rows {
    int B, max_new;
    int32_t **ids;   /* [B][prompt + max_new]: prompt, then generated (for the penalty) */
    int *plen, *n, *done, *finish;
    float *logits;   /* [B, V] the latest logits of every row (NULL when the device picks) */
    int32_t *picks;  /* [B] the device's greedy picks (decode_picks_on_device; NULL otherwise) */
    qf_rng *rng;
    qf_sampler smp;
} decode_rows;

/* 1 when needle[k] occurs in hay[n] */
static int decode_contains(const char *hay, size_t n, const char *needle, size_t k) {
    for (size_t i = 0; k <= n && i + k <= n; i++)
        if (!memcmp(hay + i, needle, k)) return 1;
    return 0;
}

/* 1 when row b's decoded tail contains a stop string (each token decodes to >= 1 byte, so the last k tokens
 * cover any stop string of k bytes that the newest token completed) */
static int decode_stop_string(const qf_decode_opts *o, const decode_rows *r, int b) {
    for (int s = 0; s < o->nstop_strs; s++) {
        size_t k = strlen(o->stop_strs[s]);
        int n = r->n[b], take = (int)(k < (size_t)n ? k : (size_t)n);
        qf_err de = {0};
        size_t len = 0;
        char *text = qf_tok_decode(o->tok, r->ids[b] + r->plen[b] + n - take, (size_t)take, &len, &de);
        int hit = text && k > 0 && decode_contains(text, len, o->stop_strs[s], k);
        free(text);
        if (hit) return 1;
    }
    return 0;
}

/* 1 when the next token is the raw logits' argmax (greedy, no repetition penalty: sample.h): the backend picks it */
static int decode_picks_on_device(const qf_decode_opts *o) { return !qf_sample_on_host(&o->sample); }

/* rank 0: the next token of every unfinished row (the device's picks, or sampled from the logits); marks finished
 * rows */
static void decode_pick(const qf_decode_opts *o, decode_rows *r, int32_t *next) {
    int64_t V = o->cfg->vocab_size;
    for (int b = 0; b < r->B; b++) {
        if (r->done[b]) {
            next[b] = r->ids[b][r->plen[b] + r->n[b] - 1];
            continue;
        }
        int32_t t = r->picks ? r->picks[b]
                             : qf_sample_pick(&r->smp, &o->sample, r->logits + (size_t)b * V, r->ids[b],
                                              (size_t)(r->plen[b] + r->n[b]), &r->rng[b]);
        r->ids[b][r->plen[b] + r->n[b]++] = t;
        next[b] = t;
        if (o->on_token) o->on_token(o->on_token_ctx, b, t);
        for (int i = 0; i < o->nstop_ids; i++)
            if (t == o->stop_ids[i]) r->done[b] = 1, r->finish[b] = QF_FINISH_STOP_ID;
        if (!r->done[b] && o->nstop_strs && o->tok && decode_stop_string(o, r, b))
            r->done[b] = 1, r->finish[b] = QF_FINISH_STOP_STRING;
        if (r->n[b] == r->max_new) r->done[b] = 1;
    }
}

/* one call through the split: Tq tokens per row at start[b]; for rows with last[b] >= 0, the last rank's logits (or,
 * picks != NULL, its greedy picks) land in logits[b] (picks[b]) on rank 0 */
typedef struct decode_ctx {
    qf_model *m;
    MPI_Comm comm;
    int rank, W, l0, l1, B;
    void *stage;     /* host staging of the residual [B*Tcap, C] act */
    float *lg;       /* [B, V] host logits from the last rank, in row order of the call's head rows */
    int32_t *seq, *pos; /* [B*Tcap] a call's tokens: their row (= sequence) and position */
    int32_t *rows, *rowb, *pick; /* [B] the head's rows (token indices), their row b, the device's picks */
    int32_t *btab;   /* [B] block table: row b's cache is block b (one block of S positions) */
    int btab_sent;   /* the device has the block table */
    int graphs;      /* decoding steps as CUDA graphs */
    const char *graphs_why; /* qf_decode_out.graphs */
    int ahead;       /* decoding steps queued one ahead (one rank, greedy picks on the device; paged_ahead.h) */
    const char *ahead_why; /* qf_decode_out.ahead */
    qf_paged_picks pp;
} decode_ctx;

/* feed >= 0: the call's tokens are the picks in that slot of paged_ahead.h (tokens unread); ahead >= 0: its picks go to
 * that slot, read later (decode_land), not into picks (one rank only) */
static void decode_call(decode_ctx *c, const int32_t *tokens, const int32_t *start, int Tq, const int32_t *last,
                        int want, float *logits, int32_t *picks, int feed, int ahead) {
    qf_model *m = c->m;
    const qf_ops *o = m->ops;
    const int B = c->B, C = m->cfg.hidden_size, N = B * Tq, lastr = c->rank == c->W - 1;
    int64_t V = m->cfg.vocab_size;
    size_t rbytes = (size_t)N * C * o->act_bytes;
    QF_CHECK(rbytes <= (size_t)INT32_MAX);
    int nrows = 0, identity = 1;
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < Tq; i++) c->seq[b * Tq + i] = b, c->pos[b * Tq + i] = start[b] + i;
        if (want && last[b] >= 0) {
            identity &= b * Tq + last[b] == nrows;
            c->rows[nrows] = b * Tq + last[b], c->rowb[nrows++] = b;
        }
    }
    qf_model_paged_inputs(m, c->rank == 0 && feed < 0 ? tokens : NULL, c->seq, c->pos, N, c->btab_sent ? NULL : c->btab);
    c->btab_sent = 1;
    QF_CHECK(c->W == 1 || (feed < 0 && ahead < 0));
    if (feed >= 0) qf_paged_picks_feed(&c->pp, m, feed, N);
    if (c->rank > 0) {
        MPI_Recv(c->stage, (int)rbytes, MPI_BYTE, c->rank - 1, 1, c->comm, MPI_STATUS_IGNORE);
        o->copy_h2d(qf_model_decode_residual(m, c->l0), c->stage, rbytes);
    }
    /* a decoding step (every token a head row, in order) as one CUDA graph per shape */
    qf_model_paged_run(m, c->rank == 0, c->l0, c->l1, c->rows, lastr ? nrows : 0, c->graphs && identity && nrows == N);
    if (!lastr) {
        o->copy_d2h(c->stage, qf_model_decode_residual(m, c->l1), rbytes);
        MPI_Send(c->stage, (int)rbytes, MPI_BYTE, c->rank + 1, 1, c->comm);
    }
    if (!nrows) return;
    QF_CHECK((size_t)nrows * V <= (size_t)INT32_MAX);
    if (ahead >= 0) { /* a decoding step: every row's token a head row, in row order (decode_land maps them back) */
        QF_CHECK(picks && nrows == B && identity);
        qf_paged_picks_start(&c->pp, m, ahead, nrows, 0);
        return;
    }
    if (lastr) {
        if (picks) qf_model_paged_pick(m, nrows, c->pick, NULL);
        else qf_model_paged_read_logits(m, nrows, c->lg);
        if (c->W > 1 && picks) MPI_Send(c->pick, nrows, MPI_INT32_T, 0, 2, c->comm);
        if (c->W > 1 && !picks) MPI_Send(c->lg, (int)(nrows * V), MPI_FLOAT, 0, 2, c->comm);
    }
    if (c->rank == 0) {
        if (c->W > 1 && picks) MPI_Recv(c->pick, nrows, MPI_INT32_T, c->W - 1, 2, c->comm, MPI_STATUS_IGNORE);
        if (c->W > 1 && !picks)
            MPI_Recv(c->lg, (int)(nrows * V), MPI_FLOAT, c->W - 1, 2, c->comm, MPI_STATUS_IGNORE);
        for (int k = 0; k < nrows; k++) {
            if (picks) picks[c->rowb[k]] = c->pick[k];
            else memcpy(logits + (size_t)c->rowb[k] * V, c->lg + (size_t)k * V, (size_t)V * sizeof(float));
        }
    }
}

/* the longest prompt */
static int decode_max_len(const qf_gen_prompts *P) {
    int maxn = 0;
    for (int b = 0; b < P->n; b++) maxn = P->v[b].n > maxn ? P->v[b].n : maxn;
    return maxn;
}

/* This rank's model: created, its layers' units loaded and the decode activations (B rows, Tcap positions a call,
 * a cache of S) allocated; c->m is set once the model exists. Errors in e (not yet agreed over the ranks). */
static void decode_load(const qf_decode_opts *o, decode_ctx *c, qf_model *m, qf_decode_units *du, int B, int Tcap,
                        int S, qf_err *e) {
    int first = c->rank == 0, lastr = c->rank == c->W - 1;
    if (qf_model_create(m, o->cfg, o->ops, QF_MODEL_JOINED, e) != 0) return;
    c->m = m;
    if (qf_decode_units_load(du, m, o->model, c->l0, c->l1, first, lastr, o->stream, e) == 0)
        qf_model_alloc_paged(m, B * Tcap, B, B, S, 1, c->l0, c->l1, lastr, e);
    /* graphs need every buffer in place: resident weights, no profiler marks, a GPU table (as serve_engine.c) */
    c->graphs = 0;
    if (!o->cuda_graphs) c->graphs_why = "off (--cuda-graphs off)";
    else if (!o->ops->graph_run || !strncmp(o->ops->name, "cpu", 3)) c->graphs_why = "off (the CPU backend)";
    else if (du->stream) c->graphs_why = "off (layers streamed from host memory)";
    else if (m->prof) c->graphs_why = "off (the profiler is on)";
    else c->graphs = 1, c->graphs_why = "on (decode step)";
    c->ahead = 0;
    if (!o->decode_ahead) c->ahead_why = "off (--decode-ahead off)";
    else if (c->W > 1) c->ahead_why = "off (the layers split over ranks)";
    else if (!decode_picks_on_device(o)) c->ahead_why = "off (sampling or a repetition penalty: the host picks)";
    else if (B >= 1 && !e->code && qf_paged_picks_init(&c->pp, o->ops, B, e) == 0) c->ahead = 1, c->ahead_why = "on";
}

/* rank 0: every row's prompt copied ahead of room for max_new tokens, its sampler state and its seeded stream */
static void decode_rows_init(decode_rows *r, const qf_decode_opts *o, const qf_gen_prompts *P) {
    int B = r->B;
    int64_t V = o->cfg->vocab_size;
    r->ids = qf_calloc((size_t)B, sizeof *r->ids);
    r->plen = qf_calloc((size_t)B, sizeof(int));
    r->n = qf_calloc((size_t)B, sizeof(int));
    r->done = qf_calloc((size_t)B, sizeof(int));
    r->finish = qf_calloc((size_t)B, sizeof(int));
    r->rng = qf_calloc((size_t)B, sizeof *r->rng);
    if (decode_picks_on_device(o)) r->picks = qf_calloc((size_t)B, sizeof *r->picks);
    else r->logits = qf_malloc((size_t)B * V * sizeof(float));
    qf_sampler_init(&r->smp, V);
    for (int b = 0; b < B; b++) {
        r->plen[b] = P->v[b].n;
        r->ids[b] = qf_malloc((size_t)(P->v[b].n + o->max_new) * sizeof(int32_t));
        memcpy(r->ids[b], P->v[b].ids, (size_t)P->v[b].n * sizeof(int32_t));
        qf_rng_seed2(&r->rng[b], o->seed, (uint64_t)b);
    }
}

/* rank 0: the generated tokens into out (which takes n and finish), the rest of the rows freed */
static void decode_rows_out(decode_rows *r, qf_decode_out *out) {
    int B = r->B;
    out->B = B;
    out->ids = qf_calloc((size_t)B, sizeof *out->ids);
    out->n = r->n;
    out->finish = r->finish;
    for (int b = 0; b < B; b++) {
        out->ids[b] = qf_malloc((size_t)(r->n[b] + 1) * sizeof(int32_t));
        memcpy(out->ids[b], r->ids[b] + r->plen[b], (size_t)r->n[b] * sizeof(int32_t));
        free(r->ids[b]);
    }
}

static void decode_rows_free(decode_rows *r) {
    free(r->ids);
    free(r->plen);
    free(r->done);
    free(r->rng);
    free(r->logits);
    free(r->picks);
    qf_sampler_free(&r->smp);
}

/* one call's input: tok [B*Tq], start [B] (the first position), last [B] (the position whose logits are wanted,
 * -1: none) */
typedef struct decode_feed {
    int32_t *tok, *start, *last;
} decode_feed;

static decode_feed decode_feed_alloc(int B, int Tcap) {
    decode_feed f;
    f.tok = qf_malloc((size_t)B * Tcap * sizeof *f.tok);
    f.start = qf_malloc((size_t)B * sizeof *f.start);
    f.last = qf_malloc((size_t)B * sizeof *f.last);
    return f;
}

static void decode_feed_free(decode_feed *f) {
    free(f->tok);
    free(f->start);
    free(f->last);
}

/* prefill: chunks of Tcap positions; a row past its prompt computes padding that no later query reads
 * (its decoding steps overwrite those cache positions before attending them) */
static void decode_prefill(decode_ctx *c, const qf_gen_prompts *P, int maxn, int Tcap, decode_feed *f,
                           float *logits, int32_t *picks) {
    int B = P->n;
    for (int c0 = 0; c0 < maxn; c0 += Tcap) {
        int Tq = maxn - c0 < Tcap ? maxn - c0 : Tcap, any = 0;
        for (int b = 0; b < B; b++) {
            const qf_gen_prompt *p = &P->v[b];
            for (int i = 0; i < Tq; i++) f->tok[b * Tq + i] = c0 + i < p->n ? p->ids[c0 + i] : p->ids[p->n - 1];
            f->start[b] = c0;
            f->last[b] = p->n - 1 >= c0 && p->n - 1 < c0 + Tq ? p->n - 1 - c0 : -1;
            any |= f->last[b] >= 0;
        }
        decode_call(c, f->tok, f->start, Tq, f->last, any, logits, picks, -1, -1);
    }
}

/* the picks of the step queued ahead in slot k, into r->picks (rows in order) */
static void decode_land(decode_ctx *c, decode_rows *r, int k) {
    qf_paged_picks_read(&c->pp, k, r->picks, NULL);
}

static int decode_all_done(const decode_rows *r) {
    int all = 1;
    for (int b = 0; b < r->B; b++) all &= r->done[b];
    return all;
}

/* decoding one step ahead (one rank, greedy on the device): step s + 1 is queued, its tokens the picks of step s
 * on the device, before the host reads step s's picks, streams them and checks the stops; a step queued before
 * every row had ended is read and dropped. Rows that ended earlier compute on their picks instead of their last
 * token: rows are independent sequences and none reads another's cache, so every row's tokens are decode_steps'. */
static void decode_steps_ahead(const qf_decode_opts *o, decode_ctx *c, const qf_gen_prompts *P, decode_rows *r,
                               decode_feed *f) {
    const int B = P->n;
    decode_pick(o, r, f->tok); /* token 0 of each row: the prefill's picks (read at once) */
    if (decode_all_done(r) || o->max_new == 1) return;
    int prev = -1; /* the slot of the step in flight */
    for (int s = 0; s + 1 < o->max_new; s++) {
        /* step s: token s of each row at position plen + s (from the host at s = 0, else step s - 1's picks on the
         * device) -> token s + 1 */
        const int k = prev < 0 ? 0 : 1 - prev;
        for (int b = 0; b < B; b++) f->start[b] = P->v[b].n + s, f->last[b] = 0;
        decode_call(c, f->tok, f->start, 1, f->last, 1, NULL, r->picks, prev, k);
        const int landed = prev;
        prev = k;
        if (landed >= 0) { /* token s of each row, while the GPU runs step s */
            decode_land(c, r, landed);
            decode_pick(o, r, f->tok);
            if (decode_all_done(r)) break;
        }
    }
    decode_land(c, r, prev); /* token max_new - 1, or a step queued before every row ended: no row takes it */
    decode_pick(o, r, f->tok);
}

/* decoding: one token per row per step; rank 0 picks, everyone gets the tokens */
static void decode_steps(const qf_decode_opts *o, decode_ctx *c, const qf_gen_prompts *P, decode_rows *r,
                         decode_feed *f, int32_t *picks) {
    int B = P->n;
    if (c->ahead) {
        decode_steps_ahead(o, c, P, r, f);
        return;
    }
    for (int s = 0; s < o->max_new; s++) {
        int alldone = 0;
        if (c->rank == 0) {
            decode_pick(o, r, f->tok);
            alldone = 1;
            for (int b = 0; b < B; b++) alldone &= r->done[b];
        }
        MPI_Bcast(&alldone, 1, MPI_INT, 0, c->comm);
        if (alldone || s + 1 == o->max_new) break;
        MPI_Bcast(f->tok, B, MPI_INT32_T, 0, c->comm);
        for (int b = 0; b < B; b++) f->start[b] = P->v[b].n + s, f->last[b] = 0;
        decode_call(c, f->tok, f->start, 1, f->last, 1, r->logits, picks, -1, -1);
    }
}

/* With every rank's model loaded: the buffers, prefill, decoding, and on rank 0 the output and its timings. */
static void decode_generate(const qf_decode_opts *o, const qf_gen_prompts *P, decode_ctx *c, int Tcap,
                            qf_decode_out *out) {
    int B = P->n, maxn = decode_max_len(P), first = c->rank == 0, lastr = c->rank == c->W - 1;
    int64_t V = o->cfg->vocab_size;
    const int on_device = decode_picks_on_device(o);
    c->stage = qf_malloc((size_t)B * Tcap * o->cfg->hidden_size * o->ops->act_bytes);
    c->lg = (first || lastr) && !on_device ? qf_malloc((size_t)B * V * sizeof(float)) : NULL;
    c->seq = qf_malloc((size_t)B * Tcap * sizeof *c->seq);
    c->pos = qf_malloc((size_t)B * Tcap * sizeof *c->pos);
    c->rows = qf_malloc((size_t)B * sizeof *c->rows);
    c->rowb = qf_malloc((size_t)B * sizeof *c->rowb);
    c->pick = qf_malloc((size_t)B * sizeof *c->pick);
    decode_rows r = {.B = B, .max_new = o->max_new};
    if (first) decode_rows_init(&r, o, P);
    /* every rank passes a picks array when the device picks (only rank 0's receives them) */
    int32_t *picks = first ? r.picks : on_device ? c->pick : NULL;
    decode_feed f = decode_feed_alloc(B, Tcap);
    double t0 = MPI_Wtime();
    decode_prefill(c, P, maxn, Tcap, &f, r.logits, picks);
    double t1 = MPI_Wtime();
    decode_steps(o, c, P, &r, &f, picks);
    double t2 = MPI_Wtime();
    if (first) {
        decode_rows_out(&r, out);
        out->graphs = c->graphs_why;
        out->ahead = c->ahead_why;
        out->prefill_s = t1 - t0;
        out->decode_s = t2 - t1;
        decode_rows_free(&r);
    }
    decode_feed_free(&f);
    free(c->stage);
    free(c->lg);
    free(c->seq), free(c->pos), free(c->rows), free(c->rowb), free(c->pick);
}

int qf_decode_run(const qf_decode_opts *o, const qf_gen_prompts *prompts_in, MPI_Comm comm, qf_decode_out *out,
                  qf_err *e) {
    decode_ctx c = {.comm = comm};
    MPI_Comm_rank(comm, &c.rank);
    MPI_Comm_size(comm, &c.W);
    memset(out, 0, sizeof *out);
    qf_gen_prompts P;
    decode_bcast_prompts(c.rank == 0 ? prompts_in : NULL, &P, comm);
    int B = P.n, maxn = decode_max_len(&P);
    int S = maxn + o->max_new, Tcap = qf_decode_chunk(B, maxn);
    qf_decode_split(o->cfg->num_layers, c.W, c.rank, &c.l0, &c.l1);
    qf_model m;
    qf_decode_units du = {0};
    c.B = B;
    c.btab = qf_malloc((size_t)(B > 0 ? B : 1) * sizeof *c.btab);
    for (int b = 0; b < B; b++) c.btab[b] = b;
    decode_load(o, &c, &m, &du, B, Tcap, S, e);
    if (!decode_agree(comm, e)) decode_generate(o, &P, &c, Tcap, out);
    qf_paged_picks_free(&c.pp);
    qf_decode_units_free(&du);
    if (c.m) qf_model_free(&m);
    qf_gen_prompts_free(&P);
    free(c.btab);
    return e->code;
}

void qf_decode_out_free(qf_decode_out *out) {
    for (int b = 0; b < out->B; b++) free(out->ids[b]);
    free(out->ids);
    free(out->n);
    free(out->finish);
    memset(out, 0, sizeof *out);
}
