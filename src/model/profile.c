/* profile.c — see profile.h. */
#include "profile.h"
#include <stdio.h>
#include <string.h>
#include "util.h"

static qf_profile *active; /* the run context's profile while the wrapped table is in use (profile.h) */

static const char *const ph_name[QF_PH_N] = {"data", "forward", "backward", "reduce", "norm", "update"};
static const char *const op_name[QF_OP_N] = {"gemm", "attention", "pointwise", "head", "recompute", "optimizer"};
static const char *const entry_name[QF_OPE_N] = {
    "embedding_fwd", "embedding_bwd", "rmsnorm_fwd", "rmsnorm_bwd", "matmul_fwd", "matmul_bwd", "matmul_fwd_add",
    "rope_fwd", "rope_bwd", "attention_fwd", "attention_bwd", "swiglu_fwd", "swiglu_bwd", "add_inplace", "copy_d2d",
    "classifier", "adamw"};

/* one op: synchronise, run, synchronise, charge its class; a forward op (fwd = 1) run inside the backward counts as
 * recompute, a backward op never does */
#define TIMED_OP(cls, fwd, ent, call)                                                                               \
    do {                                                                                                            \
        qf_profile *p_ = active;                                                                                    \
        p_->real->sync();                                                                                           \
        double t0_ = qf_now();                                                                                      \
        call;                                                                                                       \
        p_->real->sync();                                                                                           \
        double dt_ = qf_now() - t0_;                                                                                \
        p_->op[(fwd) && p_->recomputing && (cls) != QF_OP_HEAD ? QF_OP_RECOMPUTE : (cls)] += dt_;                   \
        p_->entry[ent] += dt_;                                                                                      \
        p_->calls[ent]++;                                                                                           \
    } while (0)
#define TIMED(cls, ent, call) TIMED_OP(cls, 1, ent, call)
#define TIMED_BWD(cls, ent, call) TIMED_OP(cls, 0, ent, call)
#define R (active->real)

static void w_embedding_fwd(void *out, const int32_t *tokens, const void *wte, int N, int C) {
    TIMED(QF_OP_POINTWISE, QF_OPE_EMBEDDING_FWD, R->embedding_fwd(out, tokens, wte, N, C));
}
static void w_embedding_bwd(void *dwte, const void *dout, const int32_t *tokens, int N, int C, int V) {
    TIMED_BWD(QF_OP_POINTWISE, QF_OPE_EMBEDDING_BWD, R->embedding_bwd(dwte, dout, tokens, N, C, V));
}
static void w_rmsnorm_fwd(void *out, float *rstd, const void *x, const void *w, int N, int C, float eps) {
    TIMED(QF_OP_POINTWISE, QF_OPE_RMSNORM_FWD, R->rmsnorm_fwd(out, rstd, x, w, N, C, eps));
}
static void w_rmsnorm_bwd(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd, int N,
                          int C, int acc) {
    TIMED_BWD(QF_OP_POINTWISE, QF_OPE_RMSNORM_BWD, R->rmsnorm_bwd(dx, dw, dout, x, w, rstd, N, C, acc));
}
static void w_matmul_fwd(void *out, const void *x, const void *w, const void *b, int N, int IN, int OUT, int acc) {
    TIMED(QF_OP_GEMM, QF_OPE_MATMUL_FWD, R->matmul_fwd(out, x, w, b, N, IN, OUT, acc));
}
static void w_matmul_bwd(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w, int N, int IN,
                         int OUT, int acc) {
    TIMED_BWD(QF_OP_GEMM, QF_OPE_MATMUL_BWD, R->matmul_bwd(dx, dw, db, dout, x, w, N, IN, OUT, acc));
}
static void w_matmul_fwd_add(void *out, const void *x, const void *w, const void *res, int N, int IN, int OUT) {
    TIMED(QF_OP_GEMM, QF_OPE_MATMUL_FWD_ADD, R->matmul_fwd_add(out, x, w, res, N, IN, OUT));
}
static void w_rope_fwd(void *x, const int32_t *pos, int N, int nh, int D, double theta) {
    TIMED(QF_OP_POINTWISE, QF_OPE_ROPE_FWD, R->rope_fwd(x, pos, N, nh, D, theta));
}
static void w_rope_bwd(void *dx, const int32_t *pos, int N, int nh, int D, double theta) {
    TIMED_BWD(QF_OP_POINTWISE, QF_OPE_ROPE_BWD, R->rope_bwd(dx, pos, N, nh, D, theta));
}
static void w_attention_fwd(void *out, float *lse, const void *q, const void *k, const void *v, const int32_t *seg,
                            int B, int T, int H, int KV, int D) {
    TIMED(QF_OP_ATTENTION, QF_OPE_ATTENTION_FWD, R->attention_fwd(out, lse, q, k, v, seg, B, T, H, KV, D));
}
static void w_attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse,
                            const void *q, const void *k, const void *v, const int32_t *seg, int B, int T, int H,
                            int KV, int D) {
    TIMED_BWD(QF_OP_ATTENTION, QF_OPE_ATTENTION_BWD,
              R->attention_bwd(dq, dk, dv, dout, out, lse, q, k, v, seg, B, T, H, KV, D));
}
static void w_swiglu_fwd(void *out, const void *gate, const void *up, int N, int F) {
    TIMED(QF_OP_POINTWISE, QF_OPE_SWIGLU_FWD, R->swiglu_fwd(out, gate, up, N, F));
}
static void w_swiglu_bwd(void *dgate, void *dup, const void *dout, const void *gate, const void *up, int N, int F) {
    TIMED_BWD(QF_OP_POINTWISE, QF_OPE_SWIGLU_BWD, R->swiglu_bwd(dgate, dup, dout, gate, up, N, F));
}
static void w_add_inplace(void *y, const void *x, size_t n) {
    TIMED(QF_OP_POINTWISE, QF_OPE_ADD_INPLACE, R->add_inplace(y, x, n));
}
static void w_copy_d2d(void *dst, const void *src, size_t bytes) {
    TIMED(QF_OP_POINTWISE, QF_OPE_COPY_D2D, R->copy_d2d(dst, src, bytes));
}
static void w_classifier(double *loss_sum, void *dx, void *dw, const void *x, const void *w, const int32_t *targets,
                         int N, int C, int V, float grad_scale) {
    TIMED(QF_OP_HEAD, QF_OPE_CLASSIFIER, R->classifier(loss_sum, dx, dw, x, w, targets, N, C, V, grad_scale));
}
static void w_adamw(float *p, void *p_act, const void *g, float *m, float *v, size_t n, float gscale, float lr,
                    float beta1, float beta2, float eps, float wd, int t) {
    TIMED_BWD(QF_OP_OPTIMIZER, QF_OPE_ADAMW, R->adamw(p, p_act, g, m, v, n, gscale, lr, beta1, beta2, eps, wd, t));
}

/* the timed entries sync the host: no CUDA graphs under the profiler (the work runs eagerly); body NULL (forget the
 * graphs) still reaches the real table */
static int w_graph_run(uint64_t key, uint64_t family, void (*body)(void *arg), void *arg) {
    if (!body) return active && active->real->graph_run ? active->real->graph_run(key, family, NULL, NULL) : 0;
    body(arg);
    return 0;
}

const qf_ops *qf_profile_wrap(qf_profile *p, const qf_ops *ops) {
    memset(p, 0, sizeof *p);
    p->on = 1;
    p->real = ops;
    p->wrapped = *ops;
    qf_ops *w = &p->wrapped;
    w->embedding_fwd = w_embedding_fwd, w->embedding_bwd = w_embedding_bwd;
    w->rmsnorm_fwd = w_rmsnorm_fwd, w->rmsnorm_bwd = w_rmsnorm_bwd;
    w->matmul_fwd = w_matmul_fwd, w->matmul_bwd = w_matmul_bwd, w->matmul_fwd_add = w_matmul_fwd_add;
    w->rope_fwd = w_rope_fwd, w->rope_bwd = w_rope_bwd;
    w->attention_fwd = w_attention_fwd, w->attention_bwd = w_attention_bwd;
    w->swiglu_fwd = w_swiglu_fwd, w->swiglu_bwd = w_swiglu_bwd;
    w->add_inplace = w_add_inplace;
    w->copy_d2d = w_copy_d2d;
    w->classifier = w_classifier;
    w->adamw = w_adamw;
    w->graph_run = w_graph_run;
    active = p;
    return w;
}

void qf_profile_unwrap(qf_profile *p) {
    if (active == p) active = NULL;
    p->on = 0;
}

void qf_profile_step_begin(qf_profile *p) {
    if (!p || !p->on) return;
    memset(p->phase, 0, sizeof p->phase);
    memset(p->op, 0, sizeof p->op);
    memset(p->entry, 0, sizeof p->entry);
    memset(p->calls, 0, sizeof p->calls);
    p->offload_adamw = p->offload_wait = 0;
    p->real->sync();
    p->mark = qf_now();
}

void qf_profile_lap(qf_profile *p, int ph) {
    if (!p || !p->on) return;
    p->real->sync();
    double t = qf_now();
    p->phase[ph] += t - p->mark;
    p->mark = t;
}

/* forward + backward time no op accounts for */
static double waiting(const qf_profile *p) {
    double ops = 0;
    for (int i = 0; i < QF_OP_N; i++)
        if (i != QF_OP_OPTIMIZER) ops += p->op[i];
    double w = p->phase[QF_PH_FORWARD] + p->phase[QF_PH_BACKWARD] - ops;
    return w > 0 ? w : 0;
}

void qf_profile_print(const qf_profile *p, FILE *f) {
    if (!p || !p->on) return;
    double total = 0;
    for (int i = 0; i < QF_PH_N; i++) total += p->phase[i];
    fprintf(f, "time (s/step, %.3f):", total);
    for (int i = 0; i < QF_PH_N; i++) fprintf(f, " %s %.4f", ph_name[i], p->phase[i]);
    fprintf(f, " | ops:");
    for (int i = 0; i < QF_OP_N; i++) fprintf(f, " %s %.4f", op_name[i], p->op[i]);
    fprintf(f, " waiting %.4f", waiting(p));
    if (p->offload_adamw > 0 || p->offload_wait > 0)
        fprintf(f, " | offload: host adamw %.4f, waited %.4f", p->offload_adamw, p->offload_wait);
    fprintf(f, "\n");
}

json_t *qf_profile_json(const qf_profile *p) {
    json_t *o = json_object();
    char key[32];
    for (int i = 0; i < QF_PH_N; i++) {
        snprintf(key, sizeof key, "%s_s", ph_name[i]);
        json_object_set_new(o, key, json_real(p->phase[i]));
    }
    for (int i = 0; i < QF_OP_N; i++) {
        snprintf(key, sizeof key, "op_%s_s", op_name[i]);
        json_object_set_new(o, key, json_real(p->op[i]));
    }
    json_t *ent = json_object(); /* per op-table entry: seconds and calls this step */
    for (int i = 0; i < QF_OPE_N; i++)
        if (p->calls[i])
            json_object_set_new(ent, entry_name[i], json_pack("{s:f,s:i}", "s", p->entry[i], "calls", p->calls[i]));
    json_object_set_new(o, "ops", ent);
    json_object_set_new(o, "waiting_s", json_real(waiting(p)));
    json_object_set_new(o, "offload_adamw_s", json_real(p->offload_adamw));
    json_object_set_new(o, "offload_wait_s", json_real(p->offload_wait));
    return o;
}
