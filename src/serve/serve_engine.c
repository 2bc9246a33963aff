/* serve_engine.c — see serve_engine.h. */
#include "serve_engine.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* ---- the queue and the batch (under g->mu) ------------------------------------------------------------------ */

int qf_engine_submit(qf_engine *g, qf_serve_job *const *jobs, int n) {
    pthread_mutex_lock(&g->mu);
    int full = g->qn + n > g->o.max_queue || g->quit;
    for (int i = 0; i < n && !full; i++) {
        qf_serve_job *job = jobs[i];
        job->next = NULL;
        if (g->qtail) g->qtail->next = job;
        else g->qhead = job;
        g->qtail = job;
        g->qn++;
    }
    if (!full) {
        pthread_mutex_lock(&g->o.met->mu);
        g->o.met->queue_depth = g->qn;
        pthread_mutex_unlock(&g->o.met->mu);
        pthread_cond_signal(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return full ? -1 : 0;
}

void qf_engine_cancel(qf_engine *g, qf_serve_job *job) {
    pthread_mutex_lock(&g->mu);
    job->cancel = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void qf_engine_cancel_all(qf_engine *g) {
    pthread_mutex_lock(&g->mu);
    for (qf_serve_job *j = g->qhead; j; j = j->next) j->cancel = 1;
    for (int s = 0; s < g->o.max_batch; s++)
        if (g->slot[s]) g->slot[s]->cancel = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int qf_engine_load(qf_engine *g) {
    pthread_mutex_lock(&g->mu);
    int n = g->qn + g->nrunning;
    pthread_mutex_unlock(&g->mu);
    return n;
}

/* the job in slot s leaves the batch: its blocks go back, the rows its calls wrote stay cached (a conversation's next
 * turn, a preempted job's return); the number of those rows */
static int engine_vacate(qf_engine *g, int s) {
    qf_serve_job *j = g->slot[s];
    /* the prompt's rows so far, and after the prompt the generated tokens fed back (all but the last pick's) */
    const int written = j->prefilled < j->pfill ? j->prefilled : j->plen + (j->nout > 1 ? j->nout - 1 : 0);
    qf_kv_register(&g->kv, s, j->ids, written);
    qf_kv_give(&g->kv, s);
    g->btab_dirty = g->btab_stale = 1;
    g->slot[s] = NULL;
    g->nrunning--;
    for (int k = 0; k < 2; k++) /* its rows in calls queued ahead: their picks are dropped */
        for (int r = 0; r < g->fl[k].n; r++)
            if (g->fl[k].row_slot[r] == s) g->fl[k].row_slot[r] = -1;
    return written;
}

/* a running job leaves the batch */
static void engine_leave(qf_engine *g, int s, qf_job_finish why) {
    qf_serve_job *j = g->slot[s];
    if (j->finish == QF_JOB_RUNNING) j->finish = why;
    j->released = 1;
    engine_vacate(g, s);
}

/* the running job in slot s is preempted: back to the front of the queue with its tokens so far (a pick of it in a
 * call queued ahead is dropped: it was greedy, the recomputed row gives it again) */
static void engine_preempt(qf_engine *g, int s) {
    qf_serve_job *j = g->slot[s];
    const int written = engine_vacate(g, s);
    if (written > j->computed) j->computed = written;
    j->admitted = 0, j->prefilled = 0, j->slot = -1, j->npre++;
    j->next = g->qhead;
    g->qhead = j;
    if (!g->qtail) g->qtail = j;
    g->qn++;
    pthread_mutex_lock(&g->o.met->mu);
    g->o.met->preemptions++;
    pthread_mutex_unlock(&g->o.met->mu);
}

/* preemption on: each running job, oldest first, gets the blocks of the positions its next call writes (decoding:
 * plen + nout - 1, and plen + nout in a call chained on the one in flight: serve_engine.h); when the pool lacks one,
 * the newest running job is preempted (the job itself when it is the newest); 1 when any was */
static int engine_grow(qf_engine *g) {
    int changed = 0;
    for (;;) {
        int s = -1, need = 0; /* the oldest job short of blocks, and the positions it needs */
        for (int t = 0; t < g->o.max_batch; t++) {
            const qf_serve_job *j = g->slot[t];
            if (!j || j->prefilled < j->pfill) continue; /* a prefill holds its positions from admission */
            const int want = j->plen + j->nout + (g->ahead ? 1 : 0), cap = j->plen + j->max_new;
            const int n = want < cap ? want : cap;
            if (qf_kv_blocks_for(&g->kv, n) > g->kv.nheld[t] && (s < 0 || j->admit_no < g->slot[s]->admit_no))
                s = t, need = n;
        }
        if (s < 0) return changed;
        if (!qf_kv_grow(&g->kv, s, need)) {
            g->btab_dirty = g->btab_stale = 1;
            continue;
        }
        int v = s; /* the newest running job */
        for (int t = 0; t < g->o.max_batch; t++)
            if (g->slot[t] && g->slot[t]->admit_no > g->slot[v]->admit_no) v = t;
        engine_preempt(g, v);
        changed = 1;
    }
}

/* the queue, batch and KV gauges of /metrics (under g->mu): set wherever they change, before the HTTP thread is
 * woken, so a client that got its reply reads them already updated */
static void engine_gauges(qf_engine *g) {
    pthread_mutex_lock(&g->o.met->mu);
    g->o.met->queue_depth = g->qn;
    g->o.met->batch_size = g->nrunning;
    g->o.met->kv_used = qf_kv_held(&g->kv);
    g->o.met->kv_cached = g->kv.nidle;
    pthread_mutex_unlock(&g->o.met->mu);
}

/* drops cancelled jobs (queued and running) and admits queued ones that fit; 1 when anything changed */
static int engine_schedule(qf_engine *g) {
    int changed = 0;
    for (int s = 0; s < g->o.max_batch; s++)
        if (g->slot[s] && g->slot[s]->cancel) engine_leave(g, s, QF_JOB_CANCELLED), changed = 1;
    for (qf_serve_job **pp = &g->qhead; *pp;) {
        qf_serve_job *j = *pp;
        if (!j->cancel) {
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        j->finish = QF_JOB_CANCELLED;
        j->released = 1;
        g->qn--;
        changed = 1;
    }
    g->qtail = NULL;
    for (qf_serve_job *j = g->qhead; j; j = j->next) g->qtail = j;
    if (g->o.preempt) changed |= engine_grow(g);
    while (g->qhead && g->nrunning < g->o.max_batch) { /* FIFO: the head waits for room, nobody overtakes it */
        qf_serve_job *j = g->qhead;
        /* a choice after its sibling (same prompt): it waits until the sibling's prompt blocks are registered (its
         * last chunk is in a call) and then shares them, instead of prefilling the prompt alongside */
        const qf_serve_job *a = j->after;
        if (a && g->o.prefix_cache && !j->prompt_lp && (j->plen - 1) / g->o.block_size > 0 && !a->released &&
            (!a->admitted || a->prefilled < a->plen))
            break;
        int s = 0;
        while (g->slot[s]) s++;
        int cached = 0; /* prompt positions whose KV the prefix cache already holds (none where the prompt's own
                         * log-probabilities are asked: every position is computed; a one-token match shares 0) */
        const int pfill = j->plen + j->nout; /* after a preemption its tokens so far are prefilled too */
        const int ntok = g->o.preempt ? pfill : j->plen + j->max_new; /* preemption off: the whole budget */
        const int keep = g->o.preempt && g->nrunning ? g->watermark : 0;
        if (qf_kv_admit(&g->kv, s, j->ids, j->prompt_lp ? 1 : pfill, ntok, keep, &cached)) break;
        g->qhead = j->next;
        if (!g->qhead) g->qtail = NULL;
        g->qn--;
        j->slot = s, j->prefilled = cached, j->pfill = pfill, j->admitted = 1, j->admit_no = g->admits++;
        if (cached && !j->npre) {
            pthread_mutex_lock(&g->o.met->mu);
            g->o.met->prefix_hit_tokens += (uint64_t)cached;
            pthread_mutex_unlock(&g->o.met->mu);
        }
        g->btab_dirty = g->btab_stale = 1;
        if (!j->npre) qf_rng_seed2(&j->rng, j->seed, 0); /* a preempted job's stream goes on */
        g->slot[s] = j;
        g->nrunning++;
        changed = 1;
    }
    engine_gauges(g);
    return changed;
}

/* ---- one step ------------------------------------------------------------------------------------------------ */

/* 1 when job j's text, over its last tokens, contains one of its stop strings (each token decodes to >= 1 byte, so
 * the last k tokens cover a k-byte stop string the newest token completed) */
static int engine_stop_string(const qf_engine *g, const qf_serve_job *j) {
    for (int s = 0; s < j->nstop && g->o.tok; s++) {
        size_t k = strlen(j->stop[s]), len = 0;
        int take = (int)(k < (size_t)j->nout ? k : (size_t)j->nout);
        qf_err de = {0};
        char *text = qf_tok_decode(g->o.tok, j->ids + j->plen + j->nout - take, (size_t)take, &len, &de);
        int hit = 0;
        for (size_t i = 0; text && i + k <= len && !hit; i++) hit = !memcmp(text + i, j->stop[s], k);
        free(text);
        if (hit) return 1;
    }
    return 0;
}

/* 1 when job j's next token is its raw logits' argmax (greedy, nothing changing the logits: sample.h) and it wants
 * no top_logprobs: the backend picks it */
static int engine_device_pick(const qf_serve_job *j) {
    return !qf_sample_on_host(&j->sample) && j->top_n == 0 && !j->json && j->nout >= j->min_new;
}

/* the next token of the job in slot s from its logits row, or (lg NULL) the backend's pick t with its log-softmax
 * lp; the job leaves when it is done (under g->mu) */
static void engine_pick(qf_engine *g, int s, float *lg, int32_t t, float lp, double now) {
    qf_serve_job *j = g->slot[s];
    int64_t V = g->o.cfg->vocab_size;
    if (lg) {
        const int lp_too = j->want_logprob || j->top_n > 0;
        if (lp_too) memcpy(g->raw, lg, (size_t)V * sizeof(float)); /* the pick changes lg in place */
        if (j->json) qf_json_mask(g->o.json_vocab, &j->js, lg); /* logprobs stay the raw logits' */
        /* min_tokens: no stop id yet (but a complete JSON object allows nothing else: it ends the reply) */
        const int masked = j->nout < j->min_new && !(j->json && qf_json_done(&j->js));
        for (int i = 0; i < g->o.nstop_ids && masked; i++) lg[g->o.stop_ids[i]] = -INFINITY;
        const size_t n = (size_t)(j->plen + j->nout), np = (size_t)j->plen; /* the penalties' tokens, the prompt's */
        if (g->o.speculate && !j->sample.greedy) { /* drawn with its position's proposal first (serve_engine.h) */
            qf_rng r;
            qf_rng_seed2(&r, j->seed, QF_SPEC_STREAM + (uint64_t)j->nout);
            t = qf_sample_pick_first(&g->smp, &j->sample, lg, j->ids, n, np, &r, qf_spec_next(j->ids, (int)n, NULL, 0));
        } else {
            t = qf_sample_pick_first(&g->smp, &j->sample, lg, j->ids, n, np, &j->rng, -1);
        }
        const size_t at = (size_t)j->nout * (size_t)j->top_n;
        lp = lp_too ? qf_sample_logprobs(g->raw, V, t, j->top_n, j->top_n ? j->top_id + at : NULL,
                                         j->top_n ? j->top_lp + at : NULL)
                    : NAN;
    }
    if (j->json && g->o.json_vocab->kind[t] == 0) { /* the recognizer follows the reply (a stop token ends it) */
        const qf_json_vocab *jv = g->o.json_vocab;
        QF_CHECK(qf_json_feed(&j->js, jv->bytes + jv->off[t], (size_t)(jv->off[t + 1] - jv->off[t])) == 0);
    }
    j->logprob[j->nout] = j->want_logprob ? lp : NAN;
    j->ids[j->plen + j->nout++] = t;
    pthread_mutex_lock(&g->o.met->mu);
    g->o.met->generation_tokens++;
    if (j->nout == 1) qf_hist_observe(&g->o.met->ttft, now - j->t_arrive), j->t_first = now;
    else qf_hist_observe(&g->o.met->tpot, now - j->t_last);
    j->t_last = now;
    pthread_mutex_unlock(&g->o.met->mu);
    qf_job_finish why = QF_JOB_RUNNING;
    for (int i = 0; i < g->o.nstop_ids && !j->ignore_eos; i++)
        if (t == g->o.stop_ids[i]) why = QF_JOB_EOS;
    if (!why && j->nstop && engine_stop_string(g, j)) why = QF_JOB_STOP_SEQ;
    if (!why && j->nout == j->max_new) why = QF_JOB_LENGTH;
    if (why) {
        pthread_mutex_lock(&g->o.met->mu);
        qf_hist_observe(&g->o.met->e2e, now - j->t_arrive);
        pthread_mutex_unlock(&g->o.met->mu);
        engine_leave(g, s, why);
    }
}

/* the call queued ahead in slot k lands: its picks read (waiting for the GPU), each live row's job takes its token,
 * those done leave */
static void engine_land(qf_engine *g, int k) {
    qf_engine_flight *f = &g->fl[k];
    qf_paged_picks_read(&g->picks, k, g->pick, f->lp ? g->pick_lp : NULL);
    if (g->fly == k) g->fly = -1;
    const double now = qf_now();
    pthread_mutex_lock(&g->mu);
    for (int r = 0; r < f->n; r++)
        if (f->row_slot[r] >= 0) engine_pick(g, f->row_slot[r], NULL, g->pick[r], f->lp ? g->pick_lp[r] : NAN, now);
    f->n = 0;
    engine_gauges(g); /* jobs that finished have left the batch */
    pthread_mutex_unlock(&g->mu);
}

/* 1 when the next call can be built on the call in flight (its picks unread): every row of the flight still has its
 * job, every prompt in prefill is picked on the backend (its first token needs no logits on the host), and the call
 * has work beyond rows whose jobs all end by length with the picks in flight */
static int engine_can_chain(const qf_engine *g) {
    const qf_engine_flight *f = &g->fl[g->fly];
    int all_end = 1, prefill = 0, decoding = 0;
    for (int r = 0; r < f->n; r++) {
        if (f->row_slot[r] < 0) return 0;
        const qf_serve_job *j = g->slot[f->row_slot[r]];
        all_end &= j->nout + 1 >= j->max_new;
    }
    for (int s = 0; s < g->o.max_batch; s++) {
        const qf_serve_job *j = g->slot[s];
        if (!j) continue;
        if (j->prefilled < j->pfill) {
            if (!engine_device_pick(j) || j->prompt_lp) return 0;
            prefill = 1;
        } else {
            decoding++;
        }
    }
    QF_CHECK(decoding == f->n); /* every decoding job had its head row in the flight */
    return prefill || !all_end;
}

/* the prompt log-probabilities of the call just run (qf_split_call computed them on the head's rank) into their
 * jobs. Outside g->mu: only this thread writes plp / prank / ptop_* and releases jobs, and it does so before the
 * call's picks (a job may leave with them); the HTTP side reads them once the job is released. */
static void engine_prompt_lp(qf_engine *g, int npl) {
    for (int k = 0; k < npl; k++) {
        qf_serve_job *j = g->slot[g->pl_slot[k]];
        const int t = g->pl_at[k], n = j->ptop_n;
        j->plp[t] = g->pl_lp[k], j->prank[t] = g->pl_rank[k];
        if (n) {
            memcpy(j->ptop_id + (size_t)t * n, g->pl_tid + (size_t)k * QF_SAMPLE_TOP_MAX, (size_t)n * sizeof(int32_t));
            memcpy(j->ptop_lp + (size_t)t * n, g->pl_tlp + (size_t)k * QF_SAMPLE_TOP_MAX, (size_t)n * sizeof(float));
        }
    }
}

/* speculation (serve_engine.h): the drafts of the sequence in slot s as head rows after its own row, at
 * most *spare of them (the head rows the running sequences leave); their KV positions taken from the free blocks
 * beyond the watermark only; the drafts fed */
static int engine_drafts(qf_engine *g, int s, int *N, int *nrows, int *spare) {
    qf_serve_job *j = g->slot[s];
    const int n = j->plen + j->nout, bs = g->o.block_size; /* its row is at position n - 1, the drafts from n */
    int maxd = g->o.speculate < *spare ? g->o.speculate : *spare;
    if (maxd > j->max_new - j->nout - 1) maxd = j->max_new - j->nout - 1; /* the last draft's pick still fits */
    const int avail = g->kv.nfree - (g->o.preempt ? g->watermark : 0); /* free blocks it may take */
    const int room = (g->kv.nheld[s] + (avail > 0 ? avail : 0)) * bs - n; /* positions from n it may write */
    if (maxd > room) maxd = room;
    const int k = maxd > 0 ? qf_spec_drafts(j->ids, n, maxd, g->draft) : 0;
    if (k == 0) return 0;
    if (qf_kv_blocks_for(&g->kv, n + k) > g->kv.nheld[s]) {
        QF_CHECK(qf_kv_grow(&g->kv, s, n + k) == 0); /* free blocks: nothing evicted */
        g->btab_dirty = g->btab_stale = 1;
    }
    for (int i = 0; i < k; i++) {
        g->tok[*N] = g->draft[i], g->seq[*N] = s, g->pos[*N] = n + i;
        g->rows[*nrows] = *N, g->row_slot[*nrows] = s, g->row_draft[(*nrows)++] = g->draft[i], (*N)++;
    }
    *spare -= k;
    return k;
}

/* one model call over the running batch: every decoding sequence's newest token, then prompt chunks; 1 if run */
static int engine_step(qf_engine *g) {
    if (g->fly >= 0 && !engine_can_chain(g)) engine_land(g, g->fly);
    const int chain = g->fly >= 0;
    int N = 0, nrows = 0, budget = g->o.chunk, npl = 0, nend = 0, ndraft = 0, naccept = 0;
    int32_t *end_slot = g->pl_slot + g->Ntok; /* [max_batch] jobs of max_new 0 whose prompt is in after this call */
    int64_t V = g->o.cfg->vocab_size;
    if (chain) { /* decoding: the flight's rows in its order, each at its pick's position (the token comes on the backend) */
        const qf_engine_flight *f = &g->fl[g->fly];
        for (int r = 0; r < f->n; r++) {
            const int s = f->row_slot[r];
            const qf_serve_job *j = g->slot[s];
            g->tok[N] = 0, g->seq[N] = s, g->pos[N] = j->plen + j->nout;
            g->rows[nrows] = N, g->row_draft[nrows] = -1, g->row_slot[nrows++] = s, N++;
        }
    } else {
        int spare = g->o.max_batch - g->nrunning; /* head rows beyond one a running job: room for drafts */
        for (int s = 0; s < g->o.max_batch; s++) { /* decoding: one token each (and its drafts) */
            qf_serve_job *j = g->slot[s];
            if (!j || j->prefilled < j->pfill) continue;
            g->tok[N] = j->ids[j->plen + j->nout - 1], g->seq[N] = s, g->pos[N] = j->plen + j->nout - 1;
            g->rows[nrows] = N, g->row_draft[nrows] = -1, g->row_slot[nrows++] = s, N++;
            if (g->o.speculate && spare > 0) ndraft += engine_drafts(g, s, &N, &nrows, &spare);
        }
    }
    /* no sequence is decoding, so none can be stalled: the prompts take the whole call (chunk + max_batch tokens,
     * the room the decoding rows would have had): a prompt of up to that many tokens reaches its first token in
     * one call instead of two */
    if (N == 0) budget = g->Ntok;
    int64_t prompt_tok = 0, recomputed = 0;
    /* prefill: chunks in slot order, first those of prompts begun in earlier calls, then fresh ones: the model runs
     * the call's tail of prompt chunks on the table's prompt attention where it has one (model/paged_prompt.h), and
     * a continued chunk too short for it would cut the fresh ones off that tail if it came after them */
    for (int fresh = 0; fresh < 2; fresh++) {
        for (int s = 0; s < g->o.max_batch && budget > 0 && N < g->Ntok; s++) {
            qf_serve_job *j = g->slot[s];
            if (!j || j->prefilled >= j->pfill || (j->prefilled == 0) != fresh) continue;
            int k = j->pfill - j->prefilled;
            if (k > budget) k = budget;
            if (k > g->Ntok - N) k = g->Ntok - N;
            for (int i = 0; i < k; i++) {
                g->tok[N + i] = j->ids[j->prefilled + i], g->seq[N + i] = s, g->pos[N + i] = j->prefilled + i;
                /* its logits give prompt token t's logprob (computed once: not again after a preemption) */
                if (j->prompt_lp && j->prefilled + i + 1 < j->plen && j->prefilled + i >= j->computed) {
                    const int t = j->prefilled + i + 1;
                    g->pl_row[npl] = N + i, g->pl_slot[npl] = s, g->pl_at[npl] = t;
                    g->pl_tgt[npl] = j->ids[t], g->pl_topn[npl++] = j->ptop_n;
                }
            }
            /* prompt positions computed the first time; after a preemption the rows computed before again */
            const int lo = j->prefilled > j->computed ? j->prefilled : j->computed;
            const int hi = j->prefilled + k < j->plen ? j->prefilled + k : j->plen;
            prompt_tok += hi > lo ? hi - lo : 0;
            const int rhi = j->prefilled + k < j->computed ? j->prefilled + k : j->computed;
            recomputed += rhi > j->prefilled ? rhi - j->prefilled : 0;
            j->prefilled += k;
            N += k, budget -= k;
            if (j->prefilled == j->pfill) { /* the prompt's blocks are written once this call has run: calls after it
                                            * (every later admission's) may share them */
                if (j->max_new > 0) g->rows[nrows] = N - 1, g->row_draft[nrows] = -1, g->row_slot[nrows++] = s;
                else end_slot[nend++] = s; /* nothing to generate (echo's scoring): it leaves after the call */
                qf_kv_register(&g->kv, s, j->ids, j->pfill);
            }
        }
    }
    if (N == 0) return 0;
    /* greedy rows without a penalty are picked on the backend: only their ids (and log-softmax) cross to the host */
    int device = 1, want_lp = 0;
    for (int r = 0; r < nrows; r++) {
        const qf_serve_job *j = g->slot[g->row_slot[r]];
        device &= engine_device_pick(j);
        want_lp |= j->want_logprob;
    }
    const int mode = device ? (want_lp ? 2 : 1) : 0;
    QF_CHECK(!chain || mode); /* engine_can_chain: every row of a chained call is picked on the backend */
    /* queued ahead: this call's picks go to the slot the flight does not hold, read after the next call is queued */
    const int ahead = g->ahead && mode && nrows > 0 && npl == 0 && nend == 0; /* prompt rows: their head after the
                                                                               * call's; max_new 0: leaves now */
    const int k = chain ? 1 - g->fly : 0, prev = g->fly;
    g->call_feed = chain ? g->fl[prev].n : 0;
    g->call_ahead = ahead ? k : -1;
    if (g->o.world > 1) qf_split_send(g, 1, N, nrows, mode, npl); /* the other ranks' layers (serve_split.c) */
    qf_split_call(g, N, nrows, mode, npl);
    engine_prompt_lp(g, npl);
    pthread_mutex_lock(&g->mu);
    g->steps++, g->steps_ahead += chain;
    pthread_mutex_lock(&g->o.met->mu);
    g->o.met->prompt_tokens += (uint64_t)prompt_tok;
    g->o.met->recomputed_tokens += (uint64_t)recomputed;
    g->o.met->spec_draft_tokens += (uint64_t)ndraft;
    g->o.met->steps++;
    pthread_mutex_unlock(&g->o.met->mu);
    if (ahead) { /* in flight; the call before it (if any) lands now, while the GPU runs this one */
        g->fl[k].n = nrows, g->fl[k].lp = mode == 2;
        memcpy(g->fl[k].row_slot, g->row_slot, (size_t)nrows * sizeof *g->row_slot);
        g->fly = k;
        pthread_mutex_unlock(&g->mu);
        if (chain) engine_land(g, prev);
        return 1;
    }
    double now = qf_now();
    for (int e = 0; e < nend; e++) {
        pthread_mutex_lock(&g->o.met->mu);
        qf_hist_observe(&g->o.met->e2e, now - g->slot[end_slot[e]]->t_arrive);
        pthread_mutex_unlock(&g->o.met->mu);
        engine_leave(g, end_slot[e], QF_JOB_LENGTH);
    }
    for (int r = 0; r < nrows; r++) {
        const int s = g->row_slot[r];
        const qf_serve_job *j = g->slot[s];
        if (g->row_draft[r] >= 0) { /* a draft: its pick counts while the draft is the pick before it */
            if (j && g->row_draft[r - 1] != -2 && g->row_draft[r] == j->ids[j->plen + j->nout - 1]) naccept++;
            else {
                g->row_draft[r] = -2; /* rejected: so are the sequence's drafts after it */
                continue;
            }
        }
        engine_pick(g, s, device ? NULL : g->logits + (size_t)r * V, device ? g->pick[r] : 0,
                    device && want_lp ? g->pick_lp[r] : NAN, now);
    }
    if (ndraft) {
        pthread_mutex_lock(&g->o.met->mu);
        g->o.met->spec_accepted_tokens += (uint64_t)naccept;
        pthread_mutex_unlock(&g->o.met->mu);
    }
    engine_gauges(g); /* jobs that finished in this step have left the batch */
    pthread_mutex_unlock(&g->mu);
    return nrows > 0;
}

static void *engine_main(void *arg) {
    qf_engine *g = arg;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        int changed = engine_schedule(g);
        if (g->fly >= 0 && g->nrunning == 0) { /* every row of the flight has left (cancelled): read it, idle after */
            pthread_mutex_unlock(&g->mu);
            engine_land(g, g->fly);
            continue;
        }
        while (!g->quit && g->nrunning == 0 && g->qn == 0) {
            pthread_cond_wait(&g->cv, &g->mu);
            changed |= engine_schedule(g);
        }
        /* a queued job always fits an empty pool (serve_http.c refuses budgets over maxb blocks) */
        QF_CHECK(g->nrunning > 0 || g->qn == 0);
        int quit = g->quit && g->nrunning == 0 && g->qn == 0;
        pthread_mutex_unlock(&g->mu);
        if (changed && g->o.notify) g->o.notify(g->o.notify_ctx);
        if (quit) break;
        engine_step(g);
        if (g->o.notify) g->o.notify(g->o.notify_ctx);
    }
    if (g->o.world > 1) qf_split_send(g, 0, 0, 0, 0, 0); /* the other ranks stop following */
    return NULL;
}

/* ---- set-up -------------------------------------------------------------------------------------------------- */

int qf_engine_init(qf_engine *g, const qf_engine_opts *o, qf_err *e) {
    memset(g, 0, sizeof *g);
    g->o = *o;
    const int L = o->cfg->num_layers, maxb = (o->max_total + o->block_size - 1) / o->block_size;
    if (g->o.world < 1) g->o.world = 1, g->o.rank = 0;
    if (g->o.world == 1) g->o.l0 = 0, g->o.l1 = L;
    const int first = g->o.rank == 0, last = g->o.rank == g->o.world - 1;
    g->Ntok = o->chunk + o->max_batch;
    g->inited = 1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (qf_model_create(&g->m, o->cfg, o->ops, QF_MODEL_JOINED, e)) return e->code;
    g->have_model = 1;
    if (qf_decode_units_load(&g->du, &g->m, o->model, g->o.l0, g->o.l1, first, last, 0, e)) return e->code;
    if (qf_model_alloc_paged(&g->m, g->Ntok, o->max_batch, o->nblocks, o->block_size, maxb, g->o.l0, g->o.l1, last,
                             e))
        return e->code;
    if (first) {
        qf_kv_init(&g->kv, o->nblocks, o->block_size, maxb, o->max_batch, o->prefix_cache);
        qf_sampler_init(&g->smp, o->cfg->vocab_size);
        g->btab = g->kv.btab;
    } else {
        g->btab = qf_calloc((size_t)o->max_batch * maxb, sizeof *g->btab);
    }
    g->btab_dirty = g->btab_stale = 1;
    g->watermark = o->nblocks / 100 > 1 ? o->nblocks / 100 : 1; /* vLLM's 1% */
    g->fly = -1, g->call_ahead = -1;
    if (!o->decode_ahead) g->ahead_why = "off (--decode-ahead off)";
    else if (o->speculate) g->ahead_why = "off (--speculate: a sequence's rows of the next call depend on its picks)";
    else if (g->o.world > 1) g->ahead_why = "off (the layers split over ranks: the picks come from the last rank)";
    else g->ahead = 1, g->ahead_why = "on";
    if (g->ahead) {
        if (qf_paged_picks_init(&g->picks, o->ops, o->max_batch, e)) return e->code;
        for (int k = 0; k < 2; k++) g->fl[k].row_slot = qf_malloc((size_t)o->max_batch * sizeof(int32_t));
    }
    if (g->o.world > 1) g->stage = qf_malloc((size_t)g->Ntok * o->cfg->hidden_size * o->ops->act_bytes);
    g->slot = qf_calloc((size_t)o->max_batch, sizeof *g->slot);
    g->tok = qf_malloc((size_t)g->Ntok * sizeof(int32_t));
    g->seq = qf_malloc((size_t)g->Ntok * sizeof(int32_t));
    g->pos = qf_malloc((size_t)g->Ntok * sizeof(int32_t));
    g->rows = qf_malloc((size_t)o->max_batch * sizeof(int32_t));
    g->row_slot = qf_malloc((size_t)o->max_batch * sizeof(int32_t));
    g->row_draft = qf_malloc((size_t)o->max_batch * sizeof(int32_t));
    if (first || last) g->logits = qf_malloc((size_t)o->max_batch * o->cfg->vocab_size * sizeof(float));
    g->raw = qf_malloc((size_t)o->cfg->vocab_size * sizeof(float));
    g->pick = qf_malloc((size_t)o->max_batch * sizeof(int32_t));
    g->pick_lp = qf_malloc((size_t)o->max_batch * sizeof(float));
    g->pl_row = qf_malloc((size_t)g->Ntok * sizeof(int32_t));
    g->pl_slot = qf_malloc(((size_t)g->Ntok + (size_t)o->max_batch) * sizeof(int32_t)); /* + engine_step's end_slot */
    g->pl_at = qf_malloc((size_t)g->Ntok * sizeof(int32_t));
    g->pl_tgt = qf_malloc((size_t)g->Ntok * sizeof(int32_t));
    g->pl_topn = qf_malloc((size_t)g->Ntok * sizeof(int32_t));
    g->pl_lp = qf_malloc((size_t)g->Ntok * sizeof(float));
    g->pl_rank = qf_malloc((size_t)g->Ntok * sizeof(int32_t));
    g->pl_tid = qf_malloc((size_t)g->Ntok * QF_SAMPLE_TOP_MAX * sizeof(int32_t));
    g->pl_tlp = qf_malloc((size_t)g->Ntok * QF_SAMPLE_TOP_MAX * sizeof(float));
    /* graphs need every buffer in place: resident weights (no streamed layers), no profiler marks, a GPU table */
    g->graphs = 0;
    if (!o->cuda_graphs) g->graphs_why = "off (--cuda-graphs off)";
    else if (!o->ops->graph_run || !strncmp(o->ops->name, "cpu", 3)) g->graphs_why = "off (the CPU backend)";
    else if (g->du.stream) g->graphs_why = "off (layers streamed from host memory)";
    else if (g->m.prof) g->graphs_why = "off (the profiler is on)";
    else g->graphs = 1, g->graphs_why = "on (decode step)";
    return 0;
}

const char *qf_engine_graphs(const qf_engine *g) { return g->graphs_why ? g->graphs_why : "off"; }
const char *qf_engine_ahead(const qf_engine *g) { return g->ahead_why ? g->ahead_why : "off"; }

void qf_engine_counts(qf_engine *g, uint64_t *steps, uint64_t *ahead) {
    pthread_mutex_lock(&g->mu);
    *steps = g->steps, *ahead = g->steps_ahead;
    pthread_mutex_unlock(&g->mu);
}

int qf_engine_start(qf_engine *g, qf_err *e) {
    QF_CHECK(g->inited && g->o.rank == 0);
    if (pthread_create(&g->thread, NULL, engine_main, g)) {
        if (g->o.world > 1) qf_split_send(g, 0, 0, 0, 0, 0); /* the other ranks are following: let them go */
        return qf_err_set(e, QF_EXIT_RUNTIME, "serve: cannot start the engine thread");
    }
    g->started = 1;
    return 0;
}

void qf_engine_follow(qf_engine *g) {
    QF_CHECK(g->inited && g->o.rank > 0);
    int N, nrows, mode, npl;
    while (qf_split_recv(g, &N, &nrows, &mode, &npl)) qf_split_call(g, N, nrows, mode, npl);
}

void qf_engine_stop(qf_engine *g) {
    if (g->started) {
        pthread_mutex_lock(&g->mu);
        g->quit = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->thread, NULL);
    }
    if (g->inited) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
    }
    qf_paged_picks_free(&g->picks); /* (a copy still in flight is waited for) */
    free(g->fl[0].row_slot);
    free(g->fl[1].row_slot);
    if (g->btab != g->kv.btab) free(g->btab);
    free(g->stage);
    qf_decode_units_free(&g->du);
    if (g->have_model) qf_model_free(&g->m);
    if (g->kv.nblocks) qf_kv_free(&g->kv);
    if (g->smp.V) qf_sampler_free(&g->smp);
    free(g->slot);
    free(g->tok);
    free(g->seq);
    free(g->pos);
    free(g->rows);
    free(g->row_slot);
    free(g->row_draft);
    free(g->logits);
    free(g->raw);
    free(g->pick);
    free(g->pick_lp);
    free(g->plogits);
    free(g->pl_row), free(g->pl_slot), free(g->pl_at), free(g->pl_tgt), free(g->pl_topn);
    free(g->pl_lp), free(g->pl_rank), free(g->pl_tid), free(g->pl_tlp);
    memset(g, 0, sizeof *g);
}
