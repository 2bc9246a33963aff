/* header.c — the run header: versions and topology (parallel/report.c), model, precision, data, the memory plan
 * and the resolved deck. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "plan/estimate.h"
#include "header.h"
#include "sched.h"
#include "parallel/report.h"
#include "parallel/topology.h"

static double gb(double b) { return b / 1073741824.0; } /* GiB, as everywhere */

void qf_run_header(qf_run *r, FILE *f, const char *what) {
    const qf_model_config *c = &r->model.cfg;
    const qf_deck *d = &r->deck;
    qf_report_versions(f);
    qf_report_ranks(f, &r->comm);
#ifdef QF_RUN_HAS_TOPOLOGY
    qf_report_launcher(f);
    qf_topology_print(&r->topo, f, 0, r->nccl_line);
#endif
    fprintf(f, "%s: deck %s\n", what, d->path);
    fprintf(f, "model: %s (%s) V=%lld C=%d F=%d L=%d H=%d KV=%d D=%d tied=%d bias=%d qk_norm=%d theta=%g | %.3f M "
               "params\n",
            c->arch, c->family, (long long)c->vocab_size, c->hidden_size, c->intermediate_size, c->num_layers,
            c->num_heads, c->num_kv_heads, c->head_dim, c->tie_word_embeddings, c->attention_bias, c->qk_norm,
            c->rope_theta, (double)r->model.n_params / 1e6);
    fprintf(f, "parameters from: %s%s\n", r->source[0] ? r->source : d->model_from, r->resumed ? " (resuming)" : "");
    if (r->resumed)
        fprintf(f, "resuming at step %lld (data epoch %lld, row %lld)\n", (long long)r->st.step,
                (long long)r->st.data_epoch, (long long)r->st.data_row);
    const int act = r->ops->act_dtype;
    fprintf(f, "precision: the %s backend %s%s\n", r->ops->name,
            act == QF_DT_BF16  ? "stores bf16 parameters and activations, accumulates in fp32 (fp32 master weights)"
            : act == QF_DT_F16 ? "stores fp16 parameters and activations, accumulates in fp32 (fp32 master weights, "
                                  "dynamic loss scaling)"
                                : "computes in fp32",
            (d->bf16 || d->fp16) && !strcmp(r->ops->name, "cpu") ? " (bf16/fp16 apply on GPUs; fp16 loss scaling still runs)" : "");
    if (d->fp8 && !strncmp(r->ops->name, "cuda-fp8", 8)) {
        int mind = QF_FP8_MIN_DIM;
#ifdef QWENFT_HAVE_CUDA
        mind = qf_cuda_fp8_min_dim();
#endif
        const qf_model_config *c = &r->model.cfg;
        const int C = c->hidden_size, F = c->intermediate_size, HD = c->num_heads * c->head_dim,
                  KD = c->num_kv_heads * c->head_dim;
        const struct { const char *name; int in, out; } lin[] = {{"q", C, HD}, {"k/v", C, KD}, {"o", HD, C},
                                                                 {"gate/up", C, F}, {"down", F, C}};
        char fp8s[64] = "", bf16s[64] = "";
        for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
            char *dst = lin[i].in >= mind && lin[i].out >= mind ? fp8s : bf16s;
            snprintf(dst + strlen(dst), 64 - strlen(dst), "%s%s", dst[0] ? ", " : "", lin[i].name);
        }
        const int rw = d->fp8_recipe == QF_FP8R_ROWWISE;
        int hist = rw ? 0 : d->fp8_amax_history_len;
#ifdef QWENFT_HAVE_CUDA
        hist = qf_cuda_fp8_amax_history(); /* what the table runs with (backend.c set it from the deck) */
#endif
        char scaling[200];
        if (rw)
            snprintf(scaling, sizeof scaling, "current scaling");
        else if (hist)
            snprintf(scaling, sizeof scaling,
                     "scaling: weights delayed (fp8.amax_history_len = %d: the max of each weight's last %d amaxes, "
                     "recorded by its cast), activations and gradients current", hist, hist);
        else
            snprintf(scaling, sizeof scaling,
                     "scaling: current (fp8.amax_history_len = 0; each weight's amax once per parameter version)");
        fprintf(f, "precision: fp8.enabled: the decoder's linear layers %s run their GEMMs on fp8 tensor cores, recipe "
                   "%s, %s",
                fp8s[0] ? fp8s : "(none)",
                rw ? "rowwise (per-row scales, all e4m3)" : "tensorwise (per-tensor scales, e4m3 forward, e5m2 gradients)",
                scaling);
        if (bf16s[0])
            fprintf(f, "; %s stay bf16 (in or out under %d features: quantizing costs more than fp8 saves)", bf16s,
                    mind);
        int save = !rw && d->fp8_save_inputs;
#ifdef QWENFT_HAVE_CUDA
        save = qf_cuda_fp8_save_inputs();
#endif
        if (save)
            fprintf(f, "; fp8.save_inputs: the forward keeps each fp8 layer input's q(x)^T for the wgrad (layers "
                       "without recomputation)");
        fprintf(f, "; lm_head, loss, norms, attention and the optimizer stay as above; checkpoints and exports are "
                   "unchanged\n");
    }
    if (d->offload_optimizer != QF_OFFLOAD_CPU && r->zero.with_opt)
        fprintf(f, "optimizer: AdamW on the %s backend, %s%s%s\n", r->ops->name,
                r->zero.side ? "overlapped with the next forward unit by unit (QWENFT_UPDATE_OVERLAP=1: each unit's "
                               "update waited for at its first use)"
                             : "completed inside each step (",
                r->zero.side ? "" : r->zero.side_off_why, r->zero.side ? "" : ")");
    if (d->offload_optimizer == QF_OFFLOAD_CPU) { /* the host AdamW runs on this rank's OpenMP threads */
        int threads = r->zero.off.threads;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        fprintf(f, "offload: host AdamW on %d thread(s) per rank (%ld cores online, %d ranks on this node%s; "
                   "OMP_NUM_THREADS overrides), %s\n", threads, cores, r->comm.local_size,
                r->zero.off.kept_core ? ", one core of the rank's share kept for the trainer's thread" : "",
                r->zero.off.overlap ? "overlapped with the next forward unit by unit"
                                    : "completed inside each step (QWENFT_OFFLOAD_OVERLAP=0, or updated shards travel "
                                      "by MPI: stages 1-2 on several ranks, parameter offload across nodes)");
        if (d->zero_stage >= 2)
            fprintf(f, "offload: the reduced gradient shard lives %s (offload_optimizer.gradients; %s)\n",
                    r->zero.hgrads ? (r->zero.hg.alias_node ? "in host memory, in the node copy's range until the step"
                                      : r->zero.hg.own ? "in host memory, a pinned buffer of its own"
                                                       : "in host memory, in the step's host buffer")
                                   : "on the device until the step",
                    r->grads_why);
        if (threads == 1 && cores >= 2L * r->comm.local_size)
            fprintf(f, "warning: each rank has one host thread for the offloaded optimizer (bound to one core?): with "
                       "mpirun use --bind-to none -x OMP_NUM_THREADS=%ld, with srun --cpus-per-task\n",
                    cores / r->comm.local_size);
    }
    if (r->have_train)
        fprintf(f, "data: %s: %lld docs, %lld tokens -> %lld rows of %d per epoch, %lld steps per epoch; %lld steps\n",
                d->data_train, (long long)r->train_ds.n_docs, (long long)r->train_ds.n_tokens,
                (long long)r->train_ld.rows_per_epoch, d->seq_len, (long long)r->steps_per_epoch,
                (long long)r->total_steps);
    if (r->have_valid)
        fprintf(f, "valid: %s: %lld docs, %lld tokens\n", d->data_valid, (long long)r->valid_ds.n_docs,
                (long long)r->valid_ds.n_tokens);
    if (d->activation_checkpointing != QF_ACKPT_NONE) {
        static const char *const names[] = {"none", "full", "selective", "pointwise"};
        int L = r->model.cfg.num_layers, k = d->recompute_layers < 0 ? L : d->recompute_layers;
        if (k == 0)
            fprintf(f, "recomputation: none (recompute_layers = 0: every layer keeps all its activations)\n");
        else
            fprintf(f, "recomputation: %s in layers 0-%d (%d of %d)%s\n", names[d->activation_checkpointing], k - 1, k,
                    L, k < L ? "; the others keep all their activations" : "");
    }
    if (r->plan_text) fputs(r->plan_text, f); /* the "auto" layout keys: the planner's choice (run_plan.c) */
    /* the memory plan: the estimate's formulas (docs/zero.md) for this deck, ranks and backend */
    qf_mem_estimate est;
    qf_estimate(&r->model.cfg, d, r->comm.world_size, r->comm.local_size, (int64_t)r->ops->act_bytes, &est);
    fprintf(f, "memory plan per rank (ZeRO stage %d): parameters %.3f GiB, gradients %.3f GiB, "
               "optimizer %.3f GiB (+ %.3f GiB on the host), activations %.3f GiB; host per node %.3f GiB\n",
            d->zero_stage, gb((double)est.params), gb((double)est.grads), gb((double)est.optimizer),
            gb((double)est.host_per_rank), gb((double)est.activations), gb((double)est.host_per_node));
    fprintf(f, "---- resolved deck ----\n");
    qf_deck_print(d, f);
    fprintf(f, "-----------------------\n");
    qf_deck_print_sources(d, f); /* where the keys came from; what is accepted but has no effect here */
    char warn[512];
    if (r->have_train && qf_sched_ends_early(d, r->total_steps, warn, sizeof warn)) fprintf(f, "%s\n", warn);
    fflush(f);
}
