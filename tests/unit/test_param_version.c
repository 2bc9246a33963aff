/* test_param_version.c — the parameters' version (zero.h qf_zero_param_version) and the model's weight tags (ops.h
 * fp8_weight), on the CPU backend with one rank, ZeRO stages 0 and 3 (stage 3 hands the model gathered unit buffers
 * that are reused: a pointer is no identity, the tag's parameter index is). A copy of the CPU table with an
 * fp8_weight entry records the tags and checks, in every matmul, that the call was tagged, with the spec index of
 * the very weight it was given (its pointer is that parameter's in the unit buffer the engine served) and the
 * engine's current version; then:
 *   - every linear layer of the decoder (7 per layer) is tagged in the forward and again in the backward;
 *   - the engine forgets the table's saved scales when it starts and when it is freed (fp8_weight(-1, 0));
 *   - the version goes up at every entry point that may change parameter values, before any value changes:
 *     qf_zero_set_params, qf_zero_params_commit, qf_zero_opt_set of the master (not of the moments),
 *     qf_zero_update (the optimizer step) and qf_zero_discard_grads; it stays put across what only reads them
 *     (forward, backward, reduce, norm, qf_zero_get_params);
 *   - the forward of a step after an optimizer step tags with the new version, and the gradients of a step leave
 *     it unchanged (two micro-batches of one step see one version);
 *   - the model's promises that a matmul reads the previous matmul's x (ops.h fp8_same_x: k and v after q, up after
 *     gate, forward and backward: 3 per layer each way) name the very x pointer of the previous call, of the same
 *     kind (forward or backward); also with each recomputation mode, whose recomputed forward tags and promises
 *     as the forward does;
 *   - fp8.save_inputs' requests (ops.h fp8_saved_x): without recomputation and with a backward, the forward saves
 *     4 inputs per layer (q's ln1, o's att, gate's ln2, down's swi) and the backward's 7 matmuls each name the key
 *     whose saved x is exactly their x; never in a forward-only step or a recomputed layer. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model.h"
#include "parallel/comm.h"
#include "qf_test.h"
#include "zero/zero.h"

static qf_ops tab;                /* the CPU table plus the recording fp8_weight */
static const qf_model *g_m;       /* the model under test */
static const qf_zero *g_z;        /* its engine */
static int tag_set, tag_id, n_forget, n_tagged, n_untagged, n_wrong;
static int same_set, n_same, n_same_wrong, prev_kind; /* fp8_same_x promises */
static const void *prev_x;
static int sv_mode, sv_key, n_saves, n_uses, n_sv_wrong; /* fp8_saved_x requests */
static const void *sv_x[64];
static uint64_t tag_ver, last_ver;

static void rec_fp8_weight(int id, uint64_t version) {
    if (id < 0) {
        n_forget++;
        tag_set = 0;
        return;
    }
    tag_set = 1, tag_id = id, tag_ver = version;
}
static void rec_same_x(void) { same_set = 1; }
static void rec_saved_x(int key, int mode) { sv_key = key, sv_mode = mode; }
/* a matmul of kind (1 forward, 2 backward) on x: the pending fp8_saved_x request against what was saved */
static void check_saved(int kind, const void *x) {
    if (sv_mode) {
        if (sv_mode != kind || sv_key < 0 || sv_key >= 64) {
            n_sv_wrong++;
        } else if (kind == 1) {
            sv_x[sv_key] = x, n_saves++;
        } else {
            n_uses++;
            if (sv_x[sv_key] != x) {
                n_sv_wrong++;
                fprintf(stderr, "fp8_saved_x: key %d's saved x %p, the backward's x %p\n", sv_key, sv_x[sv_key], x);
            }
        }
    }
    sv_mode = 0;
}
/* a matmul of kind (1 forward, 2 backward) on x: the pending promise (if any) against the previous call */
static void check_same(int kind, const void *x) {
    if (same_set) {
        n_same++;
        if (x != prev_x || kind != prev_kind) {
            n_same_wrong++;
            fprintf(stderr, "wrong fp8_same_x promise: x %p kind %d after x %p kind %d\n", x, kind, prev_x, prev_kind);
        }
    }
    same_set = 0, prev_x = x, prev_kind = kind;
}
/* the weight pointer w of an OUT x IN matmul against the pending tag; consumes it */
static void check_tag(const void *w, int IN, int OUT) {
    if (!tag_set) {
        n_untagged++;
        return;
    }
    tag_set = 0;
    n_tagged++;
    last_ver = tag_ver;
    const qf_model *m = g_m;
    int ok = tag_id >= 0 && tag_id < m->nspecs && m->specs[tag_id].numel == (int64_t)IN * OUT &&
             tag_ver == qf_zero_param_version(g_z);
    if (ok) { /* the tagged parameter's address in the unit buffer the engine serves now */
        const int u = m->spec_unit[tag_id];
        const char *base = m->hooks.unit_params(m->hooks.ctx, u);
        ok = (const char *)w == base + (size_t)(m->offset[tag_id] - m->unit_off[u]) * sizeof(float);
    }
    if (!ok) {
        n_wrong++;
        fprintf(stderr, "mistagged matmul: %d x %d, tag %d (%s) version %llu, engine version %llu\n", OUT, IN, tag_id,
                tag_id >= 0 && tag_id < m->nspecs ? m->specs[tag_id].name : "?", (unsigned long long)tag_ver,
                (unsigned long long)qf_zero_param_version(g_z));
    }
}
static void w_fwd(void *out, const void *x, const void *w, const void *b, int N, int IN, int OUT, int acc) {
    check_same(1, x), check_saved(1, x), check_tag(w, IN, OUT);
    qf_ops_cpu()->matmul_fwd(out, x, w, b, N, IN, OUT, acc);
}
static void w_bwd(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w, int N, int IN, int OUT,
                  int acc) {
    check_same(2, x), check_saved(2, x), check_tag(w, IN, OUT);
    qf_ops_cpu()->matmul_bwd(dx, dw, db, dout, x, w, N, IN, OUT, acc);
}
static void w_fwd_add(void *out, const void *x, const void *w, const void *res, int N, int IN, int OUT) {
    check_same(1, x), check_saved(1, x), check_tag(w, IN, OUT);
    qf_ops_cpu()->matmul_fwd_add(out, x, w, res, N, IN, OUT);
}

static void run_stage(int stage, qf_comm *comm) {
    qf_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.arch, sizeof c.arch, "qwen2");
    c.vocab_size = 40, c.hidden_size = 16, c.intermediate_size = 24, c.num_layers = 2;
    c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 4, c.attention_bias = 1, c.tie_word_embeddings = 1;
    c.rope_theta = 10000, c.rms_norm_eps = 1e-6, c.max_position_embeddings = 64, c.initializer_range = 0.2;
    c.bos_token_id = c.eos_token_id = c.pad_token_id = -1;
    snprintf(c.dtype, sizeof c.dtype, "fp32");
    qf_deck d;
    qf_deck_defaults(&d);
    d.zero_stage = stage;
    qf_model m;
    qf_zero z;
    qf_err e = {0};
    CHECK(qf_model_create(&m, &c, &tab, 0, &e) == 0, "%s", e.msg);
    const int B = 1, T = 8, L = c.num_layers;
    CHECK(qf_model_alloc_acts(&m, B, T, QF_ACKPT_NONE, -1, &e) == 0, "%s", e.msg);
    g_m = &m, g_z = &z;
    const int forgets0 = n_forget;
    CHECK(qf_zero_init(&z, &m, comm, &d, 1, &e) == 0, "%s", e.msg);
    CHECK(n_forget == forgets0 + 1, "stage %d: qf_zero_init did not forget the saved scales", stage);
    CHECK(qf_zero_param_version(&z) == 1 && m.hooks.param_version != NULL);
    /* load: set_params and commit each bump */
    int64_t b, en;
    qf_zero_load_range(&z, &b, &en);
    float *host = qf_malloc((size_t)(en - b) * sizeof(float));
    qf_model_init_random_range(&m, 5, b, en, host);
    uint64_t v = qf_zero_param_version(&z);
    qf_zero_set_params(&z, b, en, host);
    CHECK(qf_zero_param_version(&z) > v, "stage %d: set_params kept the version", stage);
    v = qf_zero_param_version(&z);
    qf_zero_params_commit(&z);
    CHECK(qf_zero_param_version(&z) > v, "stage %d: params_commit kept the version", stage);
    /* a step of two micro-batches: one version throughout, every linear layer tagged in forward and backward */
    qf_rows r;
    qf_rows_alloc(&r, B, T);
    for (int t = 0; t < T; t++) {
        r.tokens[t] = (t * 7 + 3) % (int)c.vocab_size, r.targets[t] = (t * 5 + 1) % (int)c.vocab_size;
        r.seg_start[t] = 0, r.pos[t] = t;
    }
    r.n_targets = T;
    v = qf_zero_param_version(&z);
    qf_zero_zero_grads(&z);
    n_tagged = n_untagged = n_wrong = n_same = n_same_wrong = n_saves = n_uses = n_sv_wrong = 0;
    for (int mb = 0; mb < 2; mb++) qf_model_step(&m, &r, 1.0f / (2 * T), 1);
    CHECK(n_saves == 2 * 4 * L && n_uses == 2 * 7 * L && n_sv_wrong == 0,
          "stage %d: fp8_saved_x: %d saves (want %d), %d uses (want %d), %d wrong", stage, n_saves, 2 * 4 * L, n_uses,
          2 * 7 * L, n_sv_wrong);
    CHECK(n_same == 2 * 6 * L && n_same_wrong == 0, "stage %d: %d fp8_same_x promises (want %d), %d wrong", stage,
          n_same, 2 * 6 * L, n_same_wrong);
    CHECK(n_tagged == 2 * 14 * L && n_untagged == 0 && n_wrong == 0,
          "stage %d: %d tagged matmuls (want %d), %d untagged, %d mistagged", stage, n_tagged, 2 * 14 * L, n_untagged,
          n_wrong);
    CHECK(last_ver == v, "stage %d: the step's matmuls carried version %llu, the engine's is %llu", stage,
          (unsigned long long)last_ver, (unsigned long long)v);
    qf_zero_reduce(&z);
    (void)qf_zero_grad_norm(&z, 1.0);
    float probe[4];
    qf_zero_get_params(&z, b, b + 4, probe);
    CHECK(qf_zero_param_version(&z) == v, "stage %d: the forward, backward, reduce, norm or get_params changed the version",
          stage);
    qf_zero_update(&z, 1e-2, 1.0f);
    const uint64_t v1 = qf_zero_param_version(&z);
    CHECK(v1 > v, "stage %d: the optimizer step kept the version", stage);
    /* the next step's forward tags with the new version */
    qf_zero_zero_grads(&z);
    n_tagged = n_wrong = n_saves = n_uses = n_sv_wrong = 0;
    (void)qf_model_step(&m, &r, 1.0f / T, 0);
    CHECK(n_saves == 0 && n_uses == 0 && n_sv_wrong == 0, "stage %d: a forward-only step asked to save inputs", stage);
    CHECK(n_tagged == 7 * L && n_wrong == 0 && last_ver == v1, "stage %d: forward after the update: %d tagged, %d wrong, "
          "version %llu (want %llu)", stage, n_tagged, n_wrong, (unsigned long long)last_ver, (unsigned long long)v1);
    /* the other writers of parameter values */
    const int64_t lo = z.opt_begin;
    float buf[4];
    qf_zero_opt_get(&z, 1, lo, 4, buf);
    qf_zero_opt_set(&z, 1, lo, 4, buf); /* a moment: parameters unchanged */
    CHECK(qf_zero_param_version(&z) == v1, "stage %d: setting adam_m changed the version", stage);
    qf_zero_opt_get(&z, 0, lo, 4, buf);
    qf_zero_opt_set(&z, 0, lo, 4, buf); /* the master */
    const uint64_t v2 = qf_zero_param_version(&z);
    CHECK(v2 > v1, "stage %d: setting the master weights kept the version", stage);
    qf_zero_discard_grads(&z);
    CHECK(qf_zero_param_version(&z) > v2, "stage %d: discard_grads kept the version", stage);
    /* recomputation: the recomputed forward tags and promises too (FULL: 7 more matmuls per layer, SELECTIVE: 2) */
    const int modes[3] = {QF_ACKPT_FULL, QF_ACKPT_SELECTIVE, QF_ACKPT_POINTWISE}, extra[3] = {7, 2, 0},
              extra_same[3] = {3, 1, 0};
    for (int k = 0; k < 3; k++) {
        qf_model_free_acts(&m);
        CHECK(qf_model_alloc_acts(&m, B, T, modes[k], -1, &e) == 0, "%s", e.msg);
        qf_zero_zero_grads(&z);
        n_tagged = n_untagged = n_wrong = n_same = n_same_wrong = n_saves = n_uses = n_sv_wrong = 0;
        (void)qf_model_step(&m, &r, 1.0f / T, 1);
        CHECK(n_saves == 0 && n_uses == 0 && n_sv_wrong == 0,
              "stage %d, recomputation mode %d: fp8_saved_x requests in recomputed layers (%d, %d)", stage, modes[k],
              n_saves, n_uses);
        CHECK(n_tagged == (14 + extra[k]) * L && n_untagged == 0 && n_wrong == 0 && n_same == (6 + extra_same[k]) * L &&
                  n_same_wrong == 0,
              "stage %d, recomputation mode %d: %d tagged (want %d), %d untagged, %d wrong; %d promises (want %d), "
              "%d wrong", stage, modes[k], n_tagged, (14 + extra[k]) * L, n_untagged, n_wrong, n_same,
              (6 + extra_same[k]) * L, n_same_wrong);
        qf_zero_reduce(&z);
    }
    const int forgets1 = n_forget;
    qf_zero_free(&z);
    CHECK(n_forget == forgets1 + 1 && m.hooks.param_version == NULL, "stage %d: qf_zero_free did not forget", stage);
    free(host);
    qf_rows_free(&r);
    qf_model_free(&m);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    tab = *qf_ops_cpu();
    CHECK(tab.fp8_weight == NULL, "the CPU table has no fp8_weight");
    tab.fp8_weight = rec_fp8_weight;
    CHECK(tab.fp8_same_x == NULL, "the CPU table has no fp8_same_x");
    tab.fp8_same_x = rec_same_x;
    CHECK(tab.fp8_saved_x == NULL, "the CPU table has no fp8_saved_x");
    tab.fp8_saved_x = rec_saved_x;
    tab.matmul_fwd = w_fwd, tab.matmul_bwd = w_bwd, tab.matmul_fwd_add = w_fwd_add;
    qf_comm comm;
    qf_comm_init(&comm, &tab, 1);
    run_stage(0, &comm);
    run_stage(3, &comm);
    qf_comm_free(&comm);
    int rc = qf_test_end("test_param_version", NULL);
    MPI_Finalize();
    return rc;
}
