/* estimate.c — see estimate.h. n = parameters, S = largest shard ceil(n/W), ab = bytes per act element:
 *   parameters   stage 0-2: ab*n   stage 3: gathered units (the prefetch window, simulated over the units), plus
 *                ab*S with offload_optimizer (training without it rounds the pieces from the device master)
 *                offload_param: only the gathered units on the device; ab*n once per node in host shared memory
 *   gradients    stage 0-1: ab*n   stage 2-3: ab*S + unit gradient buffers in flight (also with offload);
 *                offload_optimizer.gradients = host: the buffers in flight and QF_ZHG_INFLIGHT pieces downloading
 *   optimizer    12 bytes (fp32 master, m, v) per element of the optimizer range: n at stage 0, S otherwise;
 *                offload_optimizer: on the host, plus, without offload_param, the step's host act buffer of the
 *                range (gradients down, parameters up: zero_offload.c; with offload_param the node copy is it)
 *   activations  what the model allocates for one micro-batch (qf_model_act_bytes)
 *   fp8          fp8.enabled on GPUs: kernels/cuda/matmul_fp8.cu's buffers, each grown to the largest layer and
 *                rounded up to 2 MiB: q(x) [N, max IN], q(W) [max OUT x IN], q(dy) and q(dy)^T [N, max OUT] (bytes),
 *                7 fp32 scale/amax vectors of the largest dimension; fp8.save_inputs (tensorwise): q(x)^T of each
 *                fp8 linear layer input (ln1 of q, att of o, ln2 of gate/up, swi of down: N x IN bytes) of every
 *                layer without recomputation; rowwise: a bf16 buffer of the largest accumulating GEMM output (dW
 *                [max OUT x IN], dx or y [N, max]), where the row and column scales are applied after the GEMM */
#include "estimate.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "hf.h"
#include "model/model.h"
#include "zero/zero.h"

static int64_t fp8_bytes(const qf_model_config *c, const qf_deck *d) {
    const int64_t N = (int64_t)d->train_micro_batch_size_per_gpu * d->seq_len, C = c->hidden_size;
    const int64_t F = c->intermediate_size, HD = (int64_t)c->num_heads * c->head_dim;
    const int64_t KD = (int64_t)c->num_kv_heads * c->head_dim;
    const int64_t mx_in = C > HD ? (C > F ? C : F) : (HD > F ? HD : F); /* inputs: C (q/k/v, gate/up), HD, F */
    const int64_t mx_out = mx_in > KD ? mx_in : KD;                     /* outputs: HD, KD, C, F */
    const int64_t mw = C * (HD > F ? (HD > KD ? HD : KD) : (F > KD ? F : KD));
    const int64_t mib2 = 2 << 20;
#define QF_UP2(x) (((x) + mib2 - 1) / mib2 * mib2)
    int64_t v = N > mx_out ? N : mx_out;
    v = (v + 1023) / 1024 * 1024;
    int64_t saved = 0;
    if (d->fp8_save_inputs && d->fp8_recipe != QF_FP8R_ROWWISE) {
        const int64_t mn = QF_FP8_MIN_DIM;
        const int64_t per = (C >= mn && HD >= mn ? QF_UP2(N * C) : 0) + (HD >= mn && C >= mn ? QF_UP2(N * HD) : 0) +
                            (C >= mn && F >= mn ? QF_UP2(N * C) : 0) + (F >= mn && C >= mn ? QF_UP2(N * F) : 0);
        const int L = c->num_layers;
        int kept = L; /* layers that keep their activations (model.c layer_mode: the first recompute_layers recompute) */
        if (d->activation_checkpointing != QF_ACKPT_NONE)
            kept = d->recompute_layers < 0 || d->recompute_layers >= L ? 0 : L - d->recompute_layers;
        saved = per * kept;
    }
    /* rowwise: the unit-scale GEMM's output before its scales when it accumulates (dW, or dx / y with beta = 1), bf16
     * (matmul_fp8.cu fp8_gemm_outer_after: cuBLASLt has no outer-vector fp8 kernel on sm_89/sm_90; counted always) */
    int64_t tmp = 0;
    if (d->fp8_recipe == QF_FP8R_ROWWISE) {
        tmp = mw > N * mx_in ? mw : N * mx_in;
        tmp = QF_UP2(2 * (tmp > N * mx_out ? tmp : N * mx_out));
    }
    return QF_UP2(N * mx_in) + QF_UP2(mw) + 2 * QF_UP2(N * mx_out) + 7 * 4 * v + saved + tmp;
#undef QF_UP2
}

/* unit sizes in the model's layout: 0 = embedding, 1..L = layers, L+1 = final norm (+ untied head) */
static int64_t *unit_sizes(const qf_model_config *c, int *nunits) {
    qf_param_spec *specs = NULL;
    int ns = qf_param_specs(c, &specs), L = c->num_layers;
    int64_t *u = calloc((size_t)L + 2, sizeof *u);
    for (int i = 0; i < ns; i++) u[specs[i].layer >= 0 ? specs[i].layer + 1 : (i == 0 ? 0 : L + 1)] += specs[i].numel;
    free(specs);
    *nunits = L + 2;
    return u;
}

/* the largest set of gathered units the engine keeps (zero.c hk_will_use), in either direction of travel */
static int64_t live_window(const int64_t *u, int U, const qf_deck *d, int tied) {
    int64_t persist = 0, worst = 0;
    for (int v = 0; v < U; v++)
        if (u[v] < d->stage3_param_persistence_threshold) persist += u[v];
    for (int dir = -1; dir <= 1; dir += 2)
        for (int s = 0; s < U; s++) {
            int64_t live = u[s] < d->stage3_param_persistence_threshold ? 0 : u[s];
            int64_t inflight = 0, win = u[s];
            for (int v = s + dir; v >= 0 && v < U; v += dir) {
                if (u[v] < d->stage3_param_persistence_threshold) continue;
                if (inflight >= d->stage3_prefetch_bucket_size || win + u[v] > d->stage3_max_live_parameters) break;
                inflight += u[v];
                win += u[v];
                live += u[v];
            }
            /* tied embeddings: the head gathers unit 0 on demand while the last unit is live */
            if (tied && s == U - 1 && u[0] >= d->stage3_param_persistence_threshold) live += u[0];
            if (live > worst) worst = live;
        }
    return worst + persist;
}

int qf_estimate_grads_on_host(const qf_deck *d) {
    return d->offload_optimizer_gradients == QF_GRADS_HOST && d->offload_optimizer == QF_OFFLOAD_CPU &&
           d->zero_stage >= 2 && d->offload_optimizer_ratio >= 1;
}

void qf_estimate(const qf_model_config *c, const qf_deck *d, int W, int G, int64_t ab, qf_mem_estimate *o) {
    memset(o, 0, sizeof *o);
    int64_t n = qf_model_num_params(c), S = (n + W - 1) / W;
    int U = 0;
    int64_t *u = unit_sizes(c, &U), umax = 0;
    for (int v = 0; v < U; v++) umax = u[v] > umax ? u[v] : umax;
    int stage = d->zero_stage, off_opt = d->offload_optimizer == QF_OFFLOAD_CPU,
        off_par = d->offload_param == QF_OFFLOAD_CPU && stage == 3;
    if (stage < 3) {
        o->params = ab * n;
    } else {
        o->params_live = ab * live_window(u, U, d, c->tie_word_embeddings);
        o->params = (off_par || !off_opt ? 0 : ab * S) + o->params_live;
    }
    if (stage < 2) {
        o->grads = ab * n;
    } else {
        /* unit gradient buffers (zero.c hk_grads / hk_grads_done): with overlap_comm a unit's reduce-scatter is
         * left in flight until more than reduce_bucket_size elements wait, so up to max(bucket, umax) + umax
         * elements of sent buffers are alive; without it, one unit. Each in-flight reduce-scatter also holds the
         * rank's received piece (its shard's part of the unit: all in-flight pieces together at most S). The tied head keeps unit 0's buffer for the whole
         * backward, and the last unit (final norm) is alive while the first layer is reduced. */
        int64_t sends = umax;
        if (d->overlap_comm) sends = (d->reduce_bucket_size > umax ? d->reduce_bucket_size : umax) + umax;
        if (sends > n) sends = n;
        int64_t live = sends + (sends < S ? sends : S) + (c->tie_word_embeddings ? u[0] : 0) + u[U - 1];
        o->grads_live = ab * live;
        /* offload_optimizer.gradients = host (zero_hgrad.c): no device shard; up to QF_ZHG_INFLIGHT received
         * pieces wait for their download */
        if (qf_estimate_grads_on_host(d)) o->grads = o->grads_live + ab * QF_ZHG_INFLIGHT * (umax < S ? umax : S);
        else o->grads = ab * S + o->grads_live;
    }
    /* offload_optimizer.ratio: the host's share of the range (zero.c rounds it the same way) */
    int64_t opt = stage == 0 ? n : S;
    int64_t hopt = off_opt ? opt - (int64_t)llround((1.0 - d->offload_optimizer_ratio) * (double)opt) : 0;
    int64_t dopt = opt - hopt, chunk = dopt < QF_ZERO_OFFLOAD_CHUNK ? dopt : QF_ZERO_OFFLOAD_CHUNK;
    if (off_par && dopt > 0) o->params += ab * chunk; /* the device staging chunk of updated parameters */
    o->optimizer = 12 * dopt;
    if (off_opt) o->host_per_rank = 12 * hopt + (off_par ? 0 : ab * hopt);
    /* host gradients: the step's host buffer is the shard (no second copy), except with offload_param and
     * accumulation (a buffer of its own); the accumulation's staging ring (zero_hgrad.c qf_zhg_init): slots of
     * min(piece, QF_ZERO_OFFLOAD_CHUNK) elements for two of the largest pieces, 2 to QF_ZHG_RING_MAX of them */
    if (qf_estimate_grads_on_host(d)) {
        if (off_par && d->gradient_accumulation_steps > 1) o->host_per_rank += ab * S;
        const int64_t pmax = umax < S ? umax : S, sn = pmax < QF_ZERO_OFFLOAD_CHUNK ? pmax : QF_ZERO_OFFLOAD_CHUNK;
        int64_t slots = sn > 0 ? (2 * pmax + sn - 1) / sn : 2;
        slots = slots < 2 ? 2 : slots > QF_ZHG_RING_MAX ? QF_ZHG_RING_MAX : slots;
        o->host_per_rank += ab * sn * slots;
    }
    o->activations = qf_model_act_bytes(c, d->train_micro_batch_size_per_gpu, d->seq_len,
                                        d->activation_checkpointing, d->recompute_layers, ab);
    o->fp8 = d->fp8 && ab == 2 ? fp8_bytes(c, d) : 0;
    o->device_total = o->params + o->grads + o->optimizer + o->activations + o->fp8;
    o->host_per_node = o->host_per_rank * G + (off_par ? ab * n : 0);
    free(u);
}
