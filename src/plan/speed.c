/* speed.c — the speed model of one layout (plan.h; docs/zero.md "How auto plans"). Per optimizer step of A
 * micro-batches of B rows:
 *   compute   A x [ sum over layers of t_mode(B) + head ]: t_mode(B) = fixed[mode] + per_row[mode] x B, the
 *             timed forward + backward of one decoder layer in its recomputation mode (the deck's mode in the first
 *             recompute_layers layers, none in the rest); head = 6 V C B T / matmul FLOP/s (embedding and head)
 *   comm      ring collectives of f = (W-1)/W of the act bytes N = ab x n, at the node's (or between nodes) rate,
 *             as the engine issues them (src/zero/zero.c):
 *               stage 0      all-reduce 2 f N at qf_zero_reduce, after the last backward: exposed
 *               stage 1      the same all-reduce, then the updated shards all-gathered (f N): exposed
 *               stage 2      a reduce-scatter f N per micro-batch, unit by unit in the backward (hidden behind the
 *                            backward with overlap_comm, exposed without), then the all-gather f N: exposed
 *               stage 3      all-gathers 2 f N per micro-batch prefetched ahead of the compute, reduce-scatter f N
 *                            per micro-batch as at stage 2: hidden behind the micro-batch's compute up to its length
 *   pcie      offload_param: the gathered units come from the node's host copy, 2 ab n per micro-batch H2D,
 *             prefetched: what exceeds the micro-batch's compute is exposed. Gradient shard on the host: ab S per
 *             micro-batch D2H during the backward (exposed beyond the backward); micro-batches 2..A add theirs
 *             into it on a host thread of its own (src/zero/zero_hgrad.c: the pieces go down slot by slot through
 *             a staging ring and are added as they land, while the GPU runs the rest of the backward and the next
 *             micro-batch's forward; the trainer waits only with two pieces still in flight):
 *             acc = max(ab S / d2h, S / host_add) per micro-batch, exposed where it outlasts the micro-batch,
 *             (A - 1) max(0, acc - micro), plus the last micro-batch's last piece, added after the backward (the
 *             embedding's piece, min(S, V C) elements at acc's rate; CPU ranks: (A - 1) acc, their backward runs
 *             on the same cores); the norm then sums the shard on the host once, S / host_sumsq (with A = 1 the
 *             device sums each piece before its download)
 *   optimizer device share 12-byte AdamW at the device rate (exposed); host share h (ratio x range): gradients
 *             down ab h (not with the shard already on the host), AdamW h / (host rate / ranks of the node: the
 *             host AdamW is memory-bound and the node's ranks share its bandwidth), parameters up ab h (not with
 *             offload_param: the next gathers read the node copy), pipelined chunk by chunk: P = max(AdamW, copies).
 *             The engine overlaps P with the next forward (zero_offload.c: stage 0 or 3, or one rank; with
 *             offload_param one node): exposed = max(0, P - forward), else P.
 *   host floor (GPU ranks, gradient shard on the host, A > 1): the host AdamW and the adds share the node's memory
 *             bandwidth: step >= P + (A - 1) (S / (host_add / G)) 4/3 (the downloads' writes beside the add's three
 *             passes) + S / host_sumsq; what it adds counts as PCIe.
 *   tokens/s = A B W T / step. */
#include "plan.h"
#include <stdio.h>
#include <string.h>
#include "model/model.h"

static double dmax(double a, double b) { return a > b ? a : b; }
static double dmin(double a, double b) { return a < b ? a : b; }

/* one layer's matmul weights: q, o (C x H D), k, v (C x KV D), gate, up, down (C x F) */
static double layer_matmul(const qf_model_config *c) {
    const double C = c->hidden_size, F = c->intermediate_size, H = c->num_heads, KV = c->num_kv_heads,
                 D = c->head_dim;
    return C * H * D * 2 + C * KV * D * 2 + 3 * C * F;
}

void qf_plan_rates_default(const qf_model_config *c, int T, int cpu, qf_plan_rates *r) {
    memset(r, 0, sizeof *r);
    /* H200 bf16 (docs/performance.md: Qwen2.5-7B seq 4096 10,840 tok/s = ~475 TFLOP/s by SPEC's count; host AdamW
     * 4.67 G params/s on 16 threads); CPU ranks: a few cores of fp32 */
    r->matmul_flops = cpu ? 5e10 : 4.75e14;
    const double C = c->hidden_size, F = c->intermediate_size, H = c->num_heads, D = c->head_dim;
    const double pl = layer_matmul(c);
    const double none = (double)T * (6 * pl + 12 * H * D * T) / r->matmul_flops;
    r->layer_per_row[QF_ACKPT_NONE] = none;
    r->layer_per_row[QF_ACKPT_FULL] = none + (double)T * (2 * pl + 4 * H * D * T) / r->matmul_flops;
    r->layer_per_row[QF_ACKPT_SELECTIVE] = none + (double)T * 4 * C * F / r->matmul_flops;
    r->layer_per_row[QF_ACKPT_POINTWISE] = none * 1.03;
    r->fwd_share = 1.0 / 3.0;
    r->dev_adam = cpu ? 2e8 : 2e10;
    r->host_adam = cpu ? 2e8 : 4.67e9;
    r->host_add = cpu ? 5e8 : 8e9;     /* bf16 on 16 threads: about 6 bytes an element at the host's bandwidth */
    r->host_sumsq = cpu ? 1e9 : 16e9;
    r->h2d = r->d2h = cpu ? 0 : 25e9;
    r->net = cpu ? 5e9 : 1.5e11;
    r->net_inter = cpu ? 1e9 : 1.25e10;
    r->seq_len = T;
    r->cpu = cpu;
    snprintf(r->source, sizeof r->source, "table rates (%s; not measured on this machine)",
             cpu ? "CPU ranks" : "H200-class GPU, PCIe 25 GB/s");
}

void qf_plan_speed(const qf_model_config *c, const qf_deck *d, const qf_plan_machine *mc, const qf_plan_rates *r,
                   qf_plan *p) {
    const int L = c->num_layers, B = p->micro, A = p->accum, W = mc->world, T = d->seq_len;
    const int K = p->ackpt == QF_ACKPT_NONE ? 0 : p->rec_layers < 0 || p->rec_layers > L ? L : p->rec_layers;
    /* the layer times are for r->seq_len; another length scales them by its FLOPs (attention grows as T^2) */
    const double C = c->hidden_size, H = c->num_heads, D = c->head_dim;
    double scale = 1.0;
    if (r->seq_len > 0 && r->seq_len != T) {
        const double pl = layer_matmul(c);
        scale = ((double)T * (6 * pl + 12 * H * D * T)) / ((double)r->seq_len * (6 * pl + 12 * H * D * r->seq_len));
    }
    double lay_none = r->layer_fixed[0] + r->layer_per_row[0] * B * scale;
    double lay_mode = K ? r->layer_fixed[p->ackpt] + r->layer_per_row[p->ackpt] * B * scale : 0;
    double head = 6.0 * (double)c->vocab_size * C * B * T / r->matmul_flops;
    double micro = (L - K) * lay_none + K * lay_mode + head;
    double fwd = r->fwd_share * L * lay_none + head / 3;
    double bwd = micro - fwd;
    const int64_t n = qf_model_num_params(c), S = (n + W - 1) / W, ab = mc->act_bytes;
    const double N = (double)ab * (double)n, f = W > 1 ? (double)(W - 1) / W : 0;
    const double net = mc->nodes > 1 ? r->net_inter : r->net;
    double comm = 0, hidden_micro = 0, pcie_micro = 0;
    if (W > 1 && net > 0) {
        if (p->stage <= 1) comm += 2 * f * N / net;
        if (p->stage == 1 || p->stage == 2) comm += f * N / net;
        if (p->stage >= 2) {
            double rs = f * N / net;
            if (d->overlap_comm) hidden_micro += rs;
            else comm += A * rs;
        }
        if (p->stage == 3) hidden_micro += 2 * f * N / net;
    }
    /* PCIe, per micro-batch */
    const int offp = p->offload == 2 && p->stage == 3;
    double copy_micro = 0;
    if (r->h2d > 0) {
        if (offp) copy_micro += 2 * N / r->h2d;
        if (p->grads_host) pcie_micro = dmax(0, (double)ab * S / r->d2h - bwd);
    }
    double hacc = 0; /* the host accumulation of micro-batches 2..A and the norm's pass over the host shard */
    if (p->grads_host && A > 1) {
        const double down = r->d2h > 0 ? (double)ab * S / r->d2h : 0;
        const double acc = dmax(down, r->host_add > 0 ? (double)S / r->host_add : 0);
        const double last = S > 0 ? acc * dmin((double)S, (double)c->vocab_size * C) / (double)S : 0;
        /* CPU ranks: the "device" is the trainer's own cores, so nothing of the add hides under the backward */
        const double behind = r->cpu ? acc : dmax(0, acc - micro);
        hacc = (A - 1) * behind + last + (r->host_sumsq > 0 ? (double)S / r->host_sumsq : 0);
    }
    double exposed_micro = dmax(0, hidden_micro + copy_micro - micro) + pcie_micro;
    /* optimizer */
    const int64_t opt = p->stage == 0 ? n : S;
    const double h = p->offload ? (double)opt * p->ratio : 0, dv = (double)opt - h;
    double t_dev = dv / r->dev_adam, P = 0;
    if (h > 0) {
        const int G = mc->ranks_per_node > 0 ? mc->ranks_per_node : 1;
        double adam = h / (r->host_adam / G), copies = 0;
        if (r->h2d > 0) {
            if (!p->grads_host) copies += ab * h / r->d2h;
            if (!offp) copies += ab * h / r->h2d;
        }
        P = dmax(adam, copies);
    }
    const int overlap = offp ? mc->nodes == 1 : (p->stage == 0 || p->stage == 3 || W == 1);
    double host_exposed = overlap ? dmax(0, P - fwd) : P;
    p->t_compute = A * micro;
    p->t_comm = comm + A * dmax(0, hidden_micro - micro);
    p->t_pcie = A * exposed_micro - A * dmax(0, hidden_micro - micro);
    if (p->t_pcie < 0) p->t_pcie = 0;
    p->t_pcie += hacc;
    p->t_adam = t_dev + host_exposed;
    p->t_step = p->t_compute + p->t_comm + p->t_pcie + p->t_adam;
    /* the host's floor (GPU ranks, gradient shard on the host, accumulation): the host AdamW pass and the adds of
     * micro-batches 2..A share the node's memory bandwidth, so they follow each other rather than overlap, and the
     * downloads land in the same memory (ab of the add's 3 ab bytes an element more): the step is at least
     * P + (A - 1) S / (host_add / G) x 4/3 + the norm's pass over the shard. What it adds counts as PCIe. */
    if (p->grads_host && A > 1 && !r->cpu && r->host_add > 0) {
        const int G = mc->ranks_per_node > 0 ? mc->ranks_per_node : 1;
        const double add = (double)S / (r->host_add / G) * 4.0 / 3.0;
        const double floor = P + (A - 1) * add + (r->host_sumsq > 0 ? (double)S / r->host_sumsq : 0);
        if (floor > p->t_step) {
            p->t_pcie += floor - p->t_step;
            p->t_step = floor;
        }
    }
    p->tok_s = p->t_step > 0 ? (double)A * B * W * T / p->t_step : 0;
}

double qf_plan_calibration_cost(const qf_model_config *c, int T, int cpu) {
    qf_plan_rates r;
    qf_plan_rates_default(c, T, cpu, &r);
    double per = 0;
    for (int m = 0; m < 4; m++) per += r.layer_per_row[m];
    return 3.0 * 3.0 * per + 3.0 * 2.0 * r.layer_per_row[0] * (1.0 / 3.0); /* 3 passes x (1 + 2 rows), the forward */
}
