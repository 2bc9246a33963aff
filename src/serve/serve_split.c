/* serve_split.c — a serve step through the layer split (serve_engine.h): generate's split (decode.h), driven by
 * rank 0's scheduler one call at a time.
 *
 * Per call, rank 0 broadcasts a header {cmd, N, nrows, mode, tables changed} and the call's arrays: tokens,
 * sequences and positions [N], the head's rows [nrows], and the block tables [max_batch * maxb] only when an
 * admission or a leave changed them. Every rank then runs its layers on the ragged batch: rank r > 0 receives the
 * residual stream [N, C] (act, through host memory) from rank r-1 and sends its result to rank r+1; the last rank
 * runs the head and sends rank 0 the greedy picks (and their log-softmax) or the [nrows, V] fp32 logits, then the
 * prompt rows' log-probabilities (the call's prompt_lp rows, their target ids and top-n broadcast with it). Every
 * rank computes what one rank would, so the split changes no token (tests/cli/mpi_serve_ranks.sh). Only rank 0's
 * engine thread calls MPI on rank 0 (MPI_THREAD_SERIALIZED, main.c); a rank that dies stops them all (QF_FATAL ->
 * MPI_Abort). */
#include <limits.h>
#include "serve_engine.h"

enum { SPLIT_TAG_RES = 11, SPLIT_TAG_PICK = 12, SPLIT_TAG_LP = 13, SPLIT_TAG_LOGITS = 14, SPLIT_TAG_PLP = 15 };

static size_t split_btab_len(const qf_engine *g) {
    return (size_t)g->o.max_batch * (size_t)((g->o.max_total + g->o.block_size - 1) / g->o.block_size);
}

/* the call's prompt rows, their target ids and top-n (rank 0 -> every rank) */
static void split_bcast_pl(qf_engine *g, int npl) {
    MPI_Bcast(g->pl_row, npl, MPI_INT32_T, 0, g->o.comm);
    MPI_Bcast(g->pl_tgt, npl, MPI_INT32_T, 0, g->o.comm);
    MPI_Bcast(g->pl_topn, npl, MPI_INT32_T, 0, g->o.comm);
}

void qf_split_send(qf_engine *g, int cmd, int N, int nrows, int mode, int npl) {
    int hdr[6] = {cmd, N, nrows, mode, g->btab_dirty, npl};
    MPI_Bcast(hdr, 6, MPI_INT, 0, g->o.comm);
    if (!cmd) return;
    MPI_Bcast(g->tok, N, MPI_INT32_T, 0, g->o.comm);
    MPI_Bcast(g->seq, N, MPI_INT32_T, 0, g->o.comm);
    MPI_Bcast(g->pos, N, MPI_INT32_T, 0, g->o.comm);
    if (nrows) MPI_Bcast(g->rows, nrows, MPI_INT32_T, 0, g->o.comm);
    if (g->btab_dirty) MPI_Bcast(g->btab, (int)split_btab_len(g), MPI_INT32_T, 0, g->o.comm);
    if (npl) split_bcast_pl(g, npl);
    g->btab_dirty = 0;
}

int qf_split_recv(qf_engine *g, int *N, int *nrows, int *mode, int *npl) {
    int hdr[6];
    MPI_Bcast(hdr, 6, MPI_INT, 0, g->o.comm);
    if (!hdr[0]) return 0;
    *N = hdr[1], *nrows = hdr[2], *mode = hdr[3], *npl = hdr[5];
    QF_CHECK(*N >= 1 && *N <= g->Ntok && *nrows >= 0 && *nrows <= g->o.max_batch && *npl >= 0 && *npl <= *N);
    MPI_Bcast(g->tok, *N, MPI_INT32_T, 0, g->o.comm);
    MPI_Bcast(g->seq, *N, MPI_INT32_T, 0, g->o.comm);
    MPI_Bcast(g->pos, *N, MPI_INT32_T, 0, g->o.comm);
    if (*nrows) MPI_Bcast(g->rows, *nrows, MPI_INT32_T, 0, g->o.comm);
    if (hdr[4]) MPI_Bcast(g->btab, (int)split_btab_len(g), MPI_INT32_T, 0, g->o.comm), g->btab_stale = 1;
    if (*npl) split_bcast_pl(g, *npl);
    return 1;
}

/* The prompt rows' log-probabilities (after the call's layers; the head is on the last rank): the head again over
 * the npl rows in pl_row, max_batch at a time (qf_model_paged_logits), each row's log-softmax of its target, its
 * rank and its pl_topn most likely, rows in parallel; then to rank 0 (W > 1). The caller is outside the engine's
 * mutex (O(V) passes a row: a long prompt's would stall the HTTP thread). */
static void split_prompt_lp(qf_engine *g, int npl) {
    const int W = g->o.world, r = g->o.rank, K = QF_SAMPLE_TOP_MAX;
    const int64_t V = g->o.cfg->vocab_size;
    if (r == W - 1) {
        if (!g->plogits) g->plogits = qf_malloc((size_t)g->o.max_batch * (size_t)V * sizeof(float));
        for (int b = 0; b < npl; b += g->o.max_batch) {
            const int n = npl - b < g->o.max_batch ? npl - b : g->o.max_batch;
            qf_model_paged_logits(&g->m, g->pl_row + b, n, g->plogits);
#pragma omp parallel for schedule(static)
            for (int i = 0; i < n; i++) {
                const int k = b + i, tgt = g->pl_tgt[k], tn = g->pl_topn[k];
                const float *lg = g->plogits + (size_t)i * V;
                g->pl_lp[k] = qf_sample_logprobs(lg, V, tgt, tn, tn ? g->pl_tid + (size_t)k * K : NULL,
                                                 tn ? g->pl_tlp + (size_t)k * K : NULL);
                int32_t rank = 1; /* the ids ahead of it: a larger logit, or the same one at a lower id */
                const float x = lg[tgt];
                for (int64_t v = 0; v < V; v++) rank += lg[v] > x || (lg[v] == x && v < tgt);
                g->pl_rank[k] = rank;
            }
        }
        if (W > 1) {
            MPI_Send(g->pl_lp, npl, MPI_FLOAT, 0, SPLIT_TAG_PLP, g->o.comm);
            MPI_Send(g->pl_rank, npl, MPI_INT32_T, 0, SPLIT_TAG_PLP, g->o.comm);
            MPI_Send(g->pl_tid, npl * K, MPI_INT32_T, 0, SPLIT_TAG_PLP, g->o.comm);
            MPI_Send(g->pl_tlp, npl * K, MPI_FLOAT, 0, SPLIT_TAG_PLP, g->o.comm);
        }
    } else if (r == 0) { /* the same order, one tag: MPI keeps a sender's messages of one tag in order */
        MPI_Recv(g->pl_lp, npl, MPI_FLOAT, W - 1, SPLIT_TAG_PLP, g->o.comm, MPI_STATUS_IGNORE);
        MPI_Recv(g->pl_rank, npl, MPI_INT32_T, W - 1, SPLIT_TAG_PLP, g->o.comm, MPI_STATUS_IGNORE);
        MPI_Recv(g->pl_tid, npl * K, MPI_INT32_T, W - 1, SPLIT_TAG_PLP, g->o.comm, MPI_STATUS_IGNORE);
        MPI_Recv(g->pl_tlp, npl * K, MPI_FLOAT, W - 1, SPLIT_TAG_PLP, g->o.comm, MPI_STATUS_IGNORE);
    }
}

/* the head rows' picks or logits (the last rank) -> rank 0 */
static void split_picks(qf_engine *g, int nrows, int mode);

void qf_split_call(qf_engine *g, int N, int nrows, int mode, int npl) {
    const qf_ops *o = g->o.ops;
    const int W = g->o.world, r = g->o.rank, last = r == W - 1;
    const size_t rbytes = (size_t)N * g->o.cfg->hidden_size * o->act_bytes;
    QF_CHECK(rbytes <= INT_MAX);
    /* a decoding step: every token is a head row, in order (every rank sees the same rows): one CUDA graph per
     * shape (qf_model_paged_run) */
    int decode = g->graphs && nrows == N;
    for (int i = 0; decode && i < nrows; i++) decode = g->rows[i] == i;
    /* the inputs: small copies staged through pinned memory, the tables only when they changed */
    qf_model_paged_inputs(&g->m, r == 0 ? g->tok : NULL, g->seq, g->pos, N, g->btab_stale ? g->btab : NULL);
    g->btab_stale = 0;
    /* decoding one call ahead (one rank): the first rows' tokens are the picks of the call in flight */
    QF_CHECK(W == 1 || (!g->call_feed && g->call_ahead < 0));
    if (g->call_feed) qf_paged_picks_feed(&g->picks, &g->m, g->fly, g->call_feed);
    if (r > 0) {
        MPI_Recv(g->stage, (int)rbytes, MPI_BYTE, r - 1, SPLIT_TAG_RES, g->o.comm, MPI_STATUS_IGNORE);
        o->copy_h2d(qf_model_decode_residual(&g->m, g->o.l0), g->stage, rbytes);
    }
    /* embedding (rank 0), this rank's layers, the head (the last rank): eager, or one graph launch */
    qf_model_paged_run(&g->m, r == 0, g->o.l0, g->o.l1, g->rows, last ? nrows : 0, decode);
    if (!last) {
        o->copy_d2h(g->stage, qf_model_decode_residual(&g->m, g->o.l1), rbytes);
        MPI_Send(g->stage, (int)rbytes, MPI_BYTE, r + 1, SPLIT_TAG_RES, g->o.comm);
    }
    if (nrows) split_picks(g, nrows, mode);
    if (npl) split_prompt_lp(g, npl);
}

static void split_picks(qf_engine *g, int nrows, int mode) {
    const int W = g->o.world, r = g->o.rank, last = r == W - 1;
    const int64_t V = g->o.cfg->vocab_size;
    QF_CHECK((size_t)nrows * V <= INT_MAX);
    if (last && g->call_ahead >= 0) { /* read after the next call is queued (serve_engine.c engine_land) */
        qf_paged_picks_start(&g->picks, &g->m, g->call_ahead, nrows, mode == 2);
        return;
    }
    if (last) {
        if (mode) qf_model_paged_pick(&g->m, nrows, g->pick, mode == 2 ? g->pick_lp : NULL);
        else qf_model_paged_read_logits(&g->m, nrows, g->logits);
        if (W > 1) {
            if (mode) MPI_Send(g->pick, nrows, MPI_INT32_T, 0, SPLIT_TAG_PICK, g->o.comm);
            if (mode == 2) MPI_Send(g->pick_lp, nrows, MPI_FLOAT, 0, SPLIT_TAG_LP, g->o.comm);
            if (!mode) MPI_Send(g->logits, (int)(nrows * V), MPI_FLOAT, 0, SPLIT_TAG_LOGITS, g->o.comm);
        }
    } else if (r == 0) {
        if (mode) MPI_Recv(g->pick, nrows, MPI_INT32_T, W - 1, SPLIT_TAG_PICK, g->o.comm, MPI_STATUS_IGNORE);
        if (mode == 2) MPI_Recv(g->pick_lp, nrows, MPI_FLOAT, W - 1, SPLIT_TAG_LP, g->o.comm, MPI_STATUS_IGNORE);
        if (!mode)
            MPI_Recv(g->logits, (int)(nrows * V), MPI_FLOAT, W - 1, SPLIT_TAG_LOGITS, g->o.comm, MPI_STATUS_IGNORE);
    }
}
