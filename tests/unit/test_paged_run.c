/* test_paged_run.c — serve's paged call as one unit of GPU work (src/model/model.c qf_model_paged_inputs,
 * qf_model_paged_run, qf_model_paged_pick / _read_logits) on the CPU table:
 *   - the CPU table's graph_run runs the body once per call and returns 0 (no graphs on the host), body NULL is a
 *     no-op;
 *   - the attention's bound: 1 + the largest position rounded up to a multiple of QF_PAGED_LEN_STEP, at most the
 *     tables' reach;
 *   - two models with the same parameters, one asking for graphs and laid out as serve lays it out
 *     (QF_MODEL_JOINED: the q, k, v and the gate, up matmuls of calls over two tokens joined), agree bit for bit
 *     over a prompt call and decoding steps whose batch shrinks from 3 (tests/paged_run_common.h), the block tables
 *     copied once;
 *   - the same without the CPU table's decoding fast path, so that every call runs the joined matmuls in B;
 *   - qf_model_paged_pick equals the argmax of qf_model_paged_read_logits, and qf_model_paged_argmax (the head
 *     run again) gives the same picks;
 *   - decoding one call ahead (src/model/paged_ahead.h): the picks left in a slot, read later, equal
 *     qf_model_paged_pick's, with their log-softmax; the slot is busy until read; feeding the slot's picks makes
 *     them the next call's tokens on the backend (and that call's picks equal those of a call given the same
 *     tokens from the host).
 * The CUDA side (graphs captured and replayed) is tests/gpu/test_graph_cuda.c. */
#include "model/paged_ahead.h"
#include "paged_run_common.h"
#include "qf_test.h"

static int n_body;
static void count_body(void *arg) { n_body += *(int *)arg; }

int main(void) {
    const qf_ops *o = qf_ops_cpu();
    int inc = 1;
    CHECK(o->graph_run != NULL, "the CPU table has graph_run");
    for (int i = 0; i < 3; i++) CHECK(o->graph_run(42, 0, count_body, &inc) == 0, "graph_run returns 0 on the CPU");
    CHECK(n_body == 3, "graph_run ran the body %d times for 3 calls", n_body);
    CHECK(o->graph_run(0, 0, NULL, NULL) == 0 && n_body == 3, "graph_run(body NULL) does nothing");

    qf_model_config c;
    pr_config(&c, 64, 128, 2, 4, 2, 16, 97);
    qf_err e = {0};
    pr_state s;
    const int plen[3] = {5, 62, 17};
    const int flags[2] = {0, QF_MODEL_JOINED}; /* B as serve lays it out: joined q|k|v and gate|up matmuls */
    CHECK(pr_init(&s, o, &c, 3, plen, 200, flags, &e) == 0, "set-up: %s", e.msg);
    CHECK(!s.A.joined_qkv && !s.A.joined_gu && s.B.joined_qkv && s.B.joined_gu, "B's layout joins, A's does not");
    CHECK(s.B.offset[s.B.lix[1].kw] == s.B.offset[s.B.lix[1].qw] + 64 * 64 &&
              s.B.offset[s.B.lix[1].qb] == s.B.offset[s.B.lix[1].vw] + 32 * 64 &&
              s.A.offset[s.A.lix[1].qb] == s.A.offset[s.A.lix[1].qw] + 64 * 64,
          "B: layer 1's k weight after its q weight, its biases after the v weight; A: the q bias after the q weight");
    CHECK(!s.bad[0], "%s", s.bad);
    /* the bound: maxb 13 blocks of 16 = 208 positions */
    const int32_t tok[2] = {1, 2}, seq[2] = {0, 1};
    const int32_t p1[2] = {0, 63}, p2[2] = {64, 3}, p3[2] = {207, 0};
    qf_model_paged_inputs(&s.A, tok, seq, p1, 2, NULL);
    CHECK(s.A.paged_len == 64, "largest position 63: bound %d, want 64", s.A.paged_len);
    qf_model_paged_inputs(&s.A, tok, seq, p2, 2, NULL);
    CHECK(s.A.paged_len == 128, "largest position 64: bound %d, want 128", s.A.paged_len);
    qf_model_paged_inputs(&s.A, tok, seq, p3, 2, NULL);
    CHECK(s.A.paged_len == 208, "largest position 207: bound %d, want the reach 208", s.A.paged_len);
    for (int step = 0; step < 12; step++) {
        if (step == 4) s.active[1] = 0; /* the 62-token sequence (crossing 64 at step 2) leaves */
        if (step == 8) s.active[0] = 0;
        pr_decode(&s);
    }
    CHECK(!s.bad[0], "%s", s.bad);
    CHECK(s.steps == 12 && s.graph_steps == 0, "12 steps, %d of them graphs on the CPU", s.graph_steps);
    pr_compare_pools(&s);
    CHECK(!s.bad[0], "%s", s.bad);
    /* the picks of the last step (one row: sequence 2) */
    int32_t id = -1, id2 = -1, row = 0;
    qf_model_paged_pick(&s.B, 1, &id, NULL);
    qf_model_paged_read_logits(&s.B, 1, s.lb);
    int32_t best = 0;
    for (int v = 1; v < s.V; v++)
        if (s.lb[v] > s.lb[best]) best = v;
    CHECK(id == best, "paged_pick %d, argmax of the logits %d", id, best);
    qf_model_paged_argmax(&s.B, &row, 1, &id2, NULL);
    CHECK(id2 == id, "paged_argmax %d, paged_pick %d", id2, id);
    /* one call ahead: slot 1's picks (with the log-softmax) read later == paged_pick's */
    qf_paged_picks pp;
    CHECK(qf_paged_picks_init(&pp, o, 3, &e) == 0, "picks: %s", e.msg);
    float lp = 0, lp1 = 0;
    qf_model_paged_pick(&s.B, 1, &id, &lp);
    CHECK(!qf_paged_picks_busy(&pp, 0) && !qf_paged_picks_busy(&pp, 1), "both slots free at first");
    qf_paged_picks_start(&pp, &s.B, 1, 1, 1);
    CHECK(qf_paged_picks_busy(&pp, 1) && !qf_paged_picks_busy(&pp, 0), "slot 1 busy once started");
    /* the next call: sequence 2's next position, its token fed from slot 1 (the host's token array says 0) */
    int32_t t0 = 0, sq = 2, ps = s.len[2];
    qf_model_paged_inputs(&s.B, &t0, &sq, &ps, 1, NULL);
    qf_paged_picks_feed(&pp, &s.B, 1, 1);
    CHECK(s.B.d_tokens[0] == id, "fed token %d, the pick %d", s.B.d_tokens[0], id);
    qf_model_paged_run(&s.B, 1, 0, c.num_layers, &row, 1, 0);
    qf_paged_picks_start(&pp, &s.B, 0, 1, 0);
    int32_t got = -1, next = -1;
    qf_paged_picks_read(&pp, 1, &got, &lp1);
    CHECK(got == id && lp1 == lp, "slot 1 read later: %d (%g), paged_pick %d (%g)", got, lp1, id, lp);
    CHECK(!qf_paged_picks_busy(&pp, 1) && qf_paged_picks_busy(&pp, 0), "slot 1 free once read, slot 0 busy");
    qf_paged_picks_read(&pp, 0, &next, NULL);
    /* the same call with the token from the host, on model A (the same parameters and caches so far) */
    qf_model_paged_inputs(&s.A, &id, &sq, &ps, 1, NULL);
    qf_model_paged_run(&s.A, 1, 0, c.num_layers, &row, 1, 0);
    int32_t want = -1;
    qf_model_paged_pick(&s.A, 1, &want, NULL);
    CHECK(next == want, "the call fed on the backend picked %d, fed from the host %d", next, want);
    qf_paged_picks_free(&pp);
    pr_free(&s);

    /* the joined matmuls where the CPU table runs them: without its decoding fast path (decode_qkv, decode_mlp)
     * every paged call goes through layer_forward, so each of these calls (a prompt call of 84 tokens, then steps of
     * 3, 2 and 1 tokens) runs the joined q|k|v and gate|up matmuls in B and the unjoined ones in A: the same bits */
    qf_ops nofast = *o;
    nofast.decode_qkv = NULL, nofast.decode_mlp = NULL;
    CHECK(pr_init(&s, &nofast, &c, 3, plen, 200, flags, &e) == 0, "set-up: %s", e.msg);
    CHECK(!s.bad[0], "joined, no fast path: %s", s.bad);
    for (int step = 0; step < 6; step++) {
        if (step == 2) s.active[1] = 0;
        if (step == 4) s.active[0] = 0;
        pr_decode(&s);
    }
    pr_compare_pools(&s);
    CHECK(!s.bad[0], "joined, no fast path: %s", s.bad);
    pr_free(&s);
    printf("test_paged_run: %d checks, %d failed\n", qf_test_checks, qf_test_failures);
    return qf_test_failures != 0;
}
