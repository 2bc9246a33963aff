/* train.c — the training loop: global batches -> micro-batches -> ZeRO reduce -> clip -> AdamW; evaluation,
 * early stopping, checkpoints, metrics.jsonl and the progress line. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include "loss_scale.h"
#include "eval.h"
#include "header.h"
#include "train.h"
#include "store/export_sharded.h"
#include "sched.h"
#include "model/backend.h"
#include "plan/estimate.h"
#include "util/json_out.h"
#include "util/host_mem.h"
#include "util/metrics.h"

/* Loads this rank's micro-batches of the global batch at the state's data position. Rank r takes rows
 * [r*micro*ga, (r+1)*micro*ga) of the batch, micro-batch j the j-th micro of those. */
static int64_t load_batch(qf_run *r) {
    const qf_deck *d = &r->deck;
    int mb = d->train_micro_batch_size_per_gpu, ga = d->gradient_accumulation_steps;
    int64_t n = 0;
    for (int j = 0; j < ga; j++) {
        int64_t row0 = r->st.data_row + ((int64_t)r->comm.rank * ga + j) * mb;
        qf_err e = {0};
        if (qf_loader_rows(&r->train_ld, r->st.data_epoch, row0, &r->rows[j], &e)) QF_FATAL("data: %s", e.msg);
        n += r->rows[j].n_targets;
    }
    return n;
}

static void advance_data(qf_run *r) {
    r->st.data_row += r->deck.train_batch_size;
    if (r->st.data_row + r->deck.train_batch_size > r->train_ld.rows_per_epoch) {
        r->st.data_epoch++;
        r->st.data_row = 0;
    }
}

/* The documents of this step's global batch, on rank 0's stderr (for non-finite reports). */
static void report_docs(qf_run *r, int64_t step) {
    enum { MAXD = 32 };
    int64_t mine[MAXD];
    int n = 0;
    for (int j = 0; j < r->deck.gradient_accumulation_steps; j++) {
        const qf_rows *rw = &r->rows[j];
        for (int t = 0; t < rw->B * rw->T && n < MAXD; t++) {
            int64_t doc = rw->doc[t];
            int seen = doc < 0;
            for (int k = 0; k < n && !seen; k++) seen = mine[k] == doc;
            if (!seen) mine[n++] = doc;
        }
    }
    for (int k = n; k < MAXD; k++) mine[k] = -1;
    int W = r->comm.world_size;
    int64_t *all = r->comm.rank == 0 ? qf_malloc((size_t)W * MAXD * sizeof(int64_t)) : NULL;
    MPI_Gather(mine, MAXD, MPI_INT64_T, all, MAXD, MPI_INT64_T, 0, r->comm.world);
    if (r->comm.rank == 0) {
        fprintf(stderr, "qwen-ft: step %lld: non-finite loss or gradient norm; documents of the batch (0-based, in %s):",
                (long long)step, r->deck.data_train);
        for (int i = 0; i < W * MAXD; i++)
            if (all[i] >= 0) fprintf(stderr, " %lld", (long long)all[i]);
        fprintf(stderr, "\n");
        free(all);
    }
}

static double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

static void fmt_eta(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e8) s = 0;
    long long t = (long long)s;
    snprintf(buf, n, "%02lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
}

static void log_eval(qf_run *r, int64_t step, qf_eval_result ev) {
    if (r->comm.rank != 0) return;
    printf("eval  step %lld | valid_loss %.6f | valid_ppl %.4f | tokens %lld\n", (long long)step, ev.loss, ev.ppl,
           (long long)ev.tokens);
    fflush(stdout);
    if (r->metrics) {
        qf_metrics_rec m;
        qf_metrics_begin(&m, "eval");
        qf_metrics_add_int(&m, "step", step);
        qf_metrics_add_num(&m, "valid_loss", ev.loss);
        qf_metrics_add_num(&m, "valid_ppl", ev.ppl);
        qf_metrics_add_int(&m, "valid_tokens", ev.tokens);
        qf_metrics_write(&m, r->metrics);
        qf_flush_or_die(r->metrics, "log.dir/metrics.jsonl");
    }
    qf_tb_eval(r->tb, step, ev.loss, ev.ppl);
}

/* Evaluates and updates the early-stopping state; returns 1 when patience is exhausted. */
static int eval_and_check(qf_run *r, int64_t step) {
    qf_eval_result ev = qf_eval_run(r);
    log_eval(r, step, ev);
    const qf_deck *d = &r->deck;
    if (ev.loss < r->st.best_valid - d->early_stopping_threshold) {
        r->st.best_valid = ev.loss;
        r->st.bad_evals = 0;
        r->best_step = step; /* checkpoint.keep_best: keep_best_if_due checkpoints it */
    } else {
        r->st.bad_evals++;
    }
    return d->early_stopping_patience > 0 && r->st.bad_evals >= d->early_stopping_patience;
}

static int save(qf_run *r) {
    qf_err e = {0};
    double t0 = qf_now();
    qf_zero_sync(&r->zero); /* an overlapped offload step completes first */
    char path[QF_PATH_MAX + 64];
    qf_ckpt_path(r->deck.checkpoint_dir, r->st.step, path, sizeof path);
    /* checkpoint.export_hf: the HF directory of the checkpoint just published, from the shards in memory */
    if (qf_ckpt_save(r->deck.checkpoint_dir, &r->zero, &r->st, r->deck_text, r->deck.checkpoint_keep, &r->carry, &e) ||
        (r->deck.checkpoint_export_hf &&
         qf_export_hf_sharded(&r->zero, r->deck.checkpoint_dir, path, r->st.step, &e))) {
        if (r->comm.rank == 0) fprintf(stderr, "qwen-ft: %s\n", e.msg);
        return e.code;
    }
    if (r->comm.rank == 0) {
        printf("checkpoint: %s (%.1f s)\n", path, qf_now() - t0);
        fflush(stdout);
    }
    return 0;
}

static int open_metrics(qf_run *r) {
    if (r->comm.rank != 0) return 0;
    if (qf_mkdirs(r->deck.log_dir) != 0) {
        fprintf(stderr, "qwen-ft: %s: key 'log.dir': cannot create %s\n", r->deck.path, r->deck.log_dir);
        return QF_EXIT_INPUT;
    }
    char p[QF_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/metrics.jsonl", r->deck.log_dir);
    r->metrics = fopen(p, "a"); /* a resumed run appends */
    if (!r->metrics) {
        fprintf(stderr, "qwen-ft: cannot open %s for appending\n", p);
        return QF_EXIT_INPUT;
    }
    if (r->deck.tensorboard) {
        qf_err e = {0};
        const qf_deck *d = &r->deck; /* DeepSpeed's tensorboard.output_path/job_name, else log.dir */
        char tbdir[sizeof d->tensorboard_output_path + sizeof d->tensorboard_job_name + 1];
        snprintf(tbdir, sizeof tbdir, "%s%s%s", d->tensorboard_output_path[0] ? d->tensorboard_output_path : d->log_dir,
                 d->tensorboard_job_name[0] ? "/" : "", d->tensorboard_job_name);
        r->tb = qf_tb_open(tbdir, &e);
        if (!r->tb) {
            fprintf(stderr, "qwen-ft: %s: key 'log.tensorboard': %s\n", r->deck.path, e.msg);
            return QF_EXIT_INPUT;
        }
    }
    return 0;
}

/* One optimizer step, as the logs see it. */
typedef struct {
    int64_t step;           /* 1-based step taken */
    int64_t targets;        /* target tokens of the global batch */
    double loss, norm, lr;  /* mean loss over the targets, unscaled gradient norm, the step's learning rate */
    int skipped;            /* no update: a non-finite step */
    double dt, tok_s, mfu;  /* seconds, tokens per second, MFU (< 0: no peak known) */
    double mem_gib, gpu_gib; /* peak host memory; the backend's peak (0 on CPU ranks) */
    double adamw_s, adamw_wait_s; /* offload_optimizer: rank 0's host AdamW pass that ended in the step, its waits */
    double grad_wait_s;     /* gradients on the host: rank 0's waits for the host gradient accumulation */
    qf_monitor_step mon;    /* GPU utilisation, node host memory, PCIe, exposed communication (monitor.h) */
} train_step;

/* The loop's clocks: the ETA's origin, and what stopping before max_hours needs (docs/hpc.md). */
typedef struct {
    double t_start;     /* the loop's start */
    int64_t first_step; /* the state's step then (a resumed run's) */
    double step_max_s;  /* the longest step so far */
    double ckpt_h;      /* the last checkpoint's write time in hours; before the first, an estimate */
    int64_t saved_step; /* the step this loop last checkpointed, -1: none */
} train_clock;

static train_clock clock_start(const qf_run *r) {
    train_clock k = {.t_start = qf_now(), .first_step = r->st.step, .saved_step = -1};
    k.ckpt_h = qf_signals_ckpt_estimate_hours((double)r->model.n_params * (double)(r->ops->act_bytes + 12));
    return k;
}

/* QWENFT_INJECT_FAULT="rank:K:oomstep": the first K layout plans' first step runs out of memory after its first
 * micro-batch (the test hook of the fallback below: docs/testing.md) */
static void inject_step_oom(qf_run *r) {
    if (!r->first_step || !r->planned || r->plan_falls >= r->oomstep_plans) return;
    if (r->oomstep_rank != -1 && r->oomstep_rank != r->comm.rank) return;
    if (qf_oom_rescue("the first micro-batch's end (injected: QWENFT_INJECT_FAULT oomstep)", 0)) return;
    QF_FATAL("out of memory in the first step (injected by QWENFT_INJECT_FAULT)%s", r->oom_hint);
}

/* Loads the step's batch and runs its micro-batches forward and backward with the gradients scaled by
 * loss_scale / targets, then reduces them over the ranks. Sets s->targets; returns this rank's loss sum. */
static double accumulate_grads(qf_run *r, train_step *s) {
    qf_profile *prof = r->model.prof;
    qf_profile_step_begin(prof);
    int64_t local_targets = load_batch(r);
    s->targets = qf_comm_sum_i64(&r->comm, local_targets);
    qf_profile_lap(prof, QF_PH_DATA);
    float grad_scale = s->targets ? (float)(r->st.loss_scale / (double)s->targets) : 0.0f;
    qf_zero_zero_grads(&r->zero);
    double loss_sum = 0;
    for (int j = 0; j < r->deck.gradient_accumulation_steps; j++) {
        loss_sum += qf_model_step(&r->model, &r->rows[j], grad_scale, 1);
        qf_profile_lap(prof, QF_PH_BACKWARD);
        if (j == 0) inject_step_oom(r);
    }
    qf_zero_reduce(&r->zero);
    qf_profile_lap(prof, QF_PH_REDUCE);
    return loss_sum;
}

/* QWENFT_INJECT_FAULT: NaN gradients, or a crash, on one rank at one step */
static void inject_fault(qf_run *r, int64_t step) {
    if (r->comm.rank != r->fault_rank || step != r->fault_step) return;
    if (!strcmp(r->fault_kind, "nan")) qf_zero_poison_grads(&r->zero);
    else QF_FATAL("injected failure at step %lld (QWENFT_INJECT_FAULT)", (long long)step);
}

/* The gradient norm, the mean loss and the step's learning rate; returns 1 on every rank when the norm or the
 * loss is not finite on any. */
static int measure_step(qf_run *r, train_step *s, double loss_sum) {
    s->norm = qf_zero_grad_norm(&r->zero, 1.0 / r->st.loss_scale);
    s->loss = s->targets ? qf_comm_sum_f64(&r->comm, loss_sum) / (double)s->targets : 0.0;
    /* every rank must take the same branch (a local NaN would otherwise desynchronise the collectives) */
    int nonfinite = qf_comm_any(&r->comm, !isfinite(s->norm) || !isfinite(s->loss));
    qf_profile_lap(r->model.prof, QF_PH_NORM);
    s->lr = qf_sched_lr(&r->deck, r->st.sched_step, r->total_steps);
    return nonfinite;
}

/* AdamW at lr on the unscaled gradients, clipped to gradient_clipping; the scheduler (and fp16's scale) move on. */
static void clip_and_update(qf_run *r, double norm, double lr) {
    const qf_deck *d = &r->deck;
    float gscale = (float)(1.0 / r->st.loss_scale);
    if (d->gradient_clipping > 0) {
        double coef = d->gradient_clipping / (norm + 1e-6);
        if (coef < 1.0) gscale = (float)((double)gscale * coef);
    }
    qf_zero_update(&r->zero, lr, gscale);
    r->st.sched_step++;
    if (d->fp16) qf_loss_scale_update(d, &r->st, 0);
}

/* on_nonfinite = "stop": the last good state's checkpoint, then the run's exit code */
static int stop_nonfinite(qf_run *r) {
    if (r->comm.rank == 0)
        fprintf(stderr, "qwen-ft: stopping (on_nonfinite = \"stop\"); checkpointing the last good state (step %lld)\n",
                (long long)r->st.step);
    save(r);
    return QF_EXIT_RUNTIME;
}

/* Updates, or skips a non-finite step: fp16 lowers the loss scale (DeepSpeed: the scheduler holds); otherwise
 * the batch's documents are reported and on_nonfinite says skip or stop. Non-zero: the run ends with it. */
static int update_or_skip(qf_run *r, train_step *s, int nonfinite) {
    const qf_deck *d = &r->deck;
    s->skipped = 0;
    if (nonfinite) qf_zero_discard_grads(&r->zero); /* the node copy holds parameters again before anything reads it */
    if (nonfinite && d->fp16) {
        s->skipped = 1;
        qf_loss_scale_update(d, &r->st, 1);
    } else if (nonfinite) {
        report_docs(r, s->step);
        if (d->on_nonfinite == QF_NONFINITE_STOP) return stop_nonfinite(r);
        s->skipped = 1;
    } else {
        clip_and_update(r, s->norm, s->lr);
    }
    return 0;
}

/* After the update: the offload's timings into the profile, the state's counters and data position, the step's
 * speed and the memory peaks. */
static void end_step(qf_run *r, train_step *s, double t0) {
    qf_profile *prof = r->model.prof;
    qf_profile_lap(prof, QF_PH_UPDATE);
    if (prof) { /* the offloaded host AdamW finished during this step's window, and what the trainer waited */
        prof->offload_adamw = r->zero.off.adam_s;
        prof->offload_wait = r->zero.off.wait_s;
    }
    double offload_wait_s = r->zero.off.wait_s;
    s->adamw_s = r->zero.off.adam_s;
    s->adamw_wait_s = offload_wait_s;
    r->zero.off.adam_s = r->zero.off.wait_s = 0;
    s->grad_wait_s = r->zero.hg.wait_s;
    r->zero.hg.wait_s = 0;
    r->st.skipped += s->skipped;
    r->st.step = s->step;
    r->st.tokens_seen += s->skipped ? 0 : s->targets;
    advance_data(r);
    s->dt = qf_now() - t0;
    s->tok_s = (double)r->deck.train_batch_size * r->deck.seq_len / s->dt;
    /* no peak (CPU ranks without peak_tflops): n/a, null in metrics.jsonl */
    s->mfu = r->peak_flops > 0 ? s->tok_s * r->flops_per_token / (r->peak_flops * r->comm.world_size) : -1;
    s->mem_gib = QF_GIB(qf_mem_peak());
    s->gpu_gib = QF_GIB(qf_backend_peak_bytes(r->ops));
    qf_monitor_end(&r->mon, r->ops, &r->comm, s->dt, offload_wait_s, &s->mon);
}

/* One step: micro-batches, reduce, norm, update or skip. Fills *s; non-zero: the run ends with that code. */
static int take_step(qf_run *r, train_step *s) {
    double t0 = qf_now();
    qf_monitor_begin(&r->mon, r->ops, &r->comm);
    s->step = r->st.step + 1;
    double loss_sum = accumulate_grads(r, s);
    inject_fault(r, s->step);
    int nonfinite = measure_step(r, s, loss_sum);
    int rc = update_or_skip(r, s, nonfinite);
    if (rc) return rc;
    end_step(r, s, t0);
    return 0;
}

/* rank 0: the step's "train" line of metrics.jsonl */
static void write_train_record(qf_run *r, const train_step *s) {
    qf_metrics_rec m;
    qf_metrics_begin(&m, "train");
    qf_metrics_add_int(&m, "step", s->step);
    qf_metrics_add_num(&m, "loss", s->loss);
    qf_metrics_add_num(&m, "lr", s->lr);
    qf_metrics_add_num(&m, "grad_norm", s->norm);
    qf_metrics_add_int(&m, "tokens", s->targets);
    qf_metrics_add_num(&m, "tokens_per_s", s->tok_s);
    if (s->mfu >= 0) qf_metrics_add_num(&m, "mfu", s->mfu);
    else qf_metrics_add_null(&m, "mfu");
    qf_metrics_add_bool(&m, "skipped", s->skipped);
    qf_metrics_add_num(&m, "loss_scale", r->st.loss_scale);
    qf_metrics_add_int(&m, "epoch", r->st.data_epoch);
    qf_metrics_add_num(&m, "step_time_s", s->dt);
    qf_metrics_add_num(&m, "peak_host_mem_gib", s->mem_gib);
    qf_metrics_add_num(&m, "peak_gpu_mem_gib", s->gpu_gib);
    if (r->deck.offload_optimizer == QF_OFFLOAD_CPU) { /* the speed model's host term, as it ran (docs/zero.md) */
        qf_metrics_add_num(&m, "host_adamw_s", s->adamw_s);
        qf_metrics_add_num(&m, "host_adamw_wait_s", s->adamw_wait_s);
        if (r->zero.hgrads) qf_metrics_add_num(&m, "host_grad_wait_s", s->grad_wait_s);
    }
    qf_monitor_record(&r->mon, &s->mon, &m);
    if (r->model.prof) /* log.wall_clock_breakdown */
        json_object_set_new(m.o, "breakdown", qf_profile_json(r->model.prof));
    qf_metrics_write(&m, r->metrics);
    qf_flush_or_die(r->metrics, "log.dir/metrics.jsonl");
}

/* rank 0: the progress line, every steps_per_print steps, at the last step and at this run's first */
static void print_progress(const qf_run *r, const train_step *s, const train_clock *k) {
    int64_t step = s->step;
    if (!(step % r->deck.steps_per_print == 0 || step == r->total_steps || step == k->first_step + 1)) return;
    char eta[32];
    double per = (qf_now() - k->t_start) / (double)(step - k->first_step);
    fmt_eta(per * (double)(r->total_steps - step), eta, sizeof eta);
    char mfu_s[16] = "n/a";
    if (s->mfu >= 0) snprintf(mfu_s, sizeof mfu_s, "%.1f%%", 100 * s->mfu);
    double mem_gib = s->gpu_gib > 0 ? s->gpu_gib : s->mem_gib; /* the device's peak on GPU ranks */
    char mon[192];
    qf_monitor_progress(&r->mon, &s->mon, mon, sizeof mon);
    printf("step %lld/%lld | loss %.4f | lr %.3e | grad_norm %.4f | %.0f tok/s | MFU %s | mem %.2f GiB | ETA %s%s%s\n",
           (long long)step, (long long)r->total_steps, s->loss, s->lr, s->norm, s->tok_s, mfu_s, mem_gib, eta, mon,
           s->skipped ? " | skipped" : "");
    qf_profile_print(r->model.prof, stdout);
    fflush(stdout);
}

/* The step into metrics.jsonl, TensorBoard and the progress line. */
static void log_step(qf_run *r, const train_step *s, const train_clock *k) {
    int rank0 = r->comm.rank == 0;
    if (rank0 && r->metrics) write_train_record(r, s);
    if (s->gpu_gib > 0) qf_tb_scalar(r->tb, "perf/peak_gpu_mem_gib", s->step, s->gpu_gib);
    qf_tb_train_step(r->tb, s->step, s->loss, s->lr, s->norm, r->st.loss_scale, s->tok_s, s->mfu >= 0 ? s->mfu : NAN,
                     s->mem_gib); /* flushes */
    if (rank0) print_progress(r, s, k);
    if (rank0) qf_monitor_warn(&r->mon, &s->mon, s->step, stdout);
}

/* eval_every_steps (not at the last step: the end evaluates); returns 1 when early stopping ends the run */
static int eval_if_due(qf_run *r, int64_t step) {
    const qf_deck *d = &r->deck;
    if (!(r->have_valid && d->eval_every_steps > 0 && step % d->eval_every_steps == 0 && step < r->total_steps))
        return 0;
    int stop_early = eval_and_check(r, step);
    if (stop_early && r->comm.rank == 0)
        printf("early stopping: valid_loss did not improve for %d evaluations\n", d->early_stopping_patience);
    return stop_early;
}

/* checkpoint_every_steps (not at the last step, nor when early stopping: the end checkpoints), timed for the
 * max_hours margin. 0 or the exit code of a failed save. */
static int checkpoint_if_due(qf_run *r, int64_t step, int stop_early, train_clock *k) {
    const qf_deck *d = &r->deck;
    if (!(d->checkpoint_every_steps > 0 && step % d->checkpoint_every_steps == 0 && step < r->total_steps &&
          !stop_early && k->saved_step != step))
        return 0;
    double t_ck = qf_now();
    int rc = save(r);
    if (rc) return rc;
    k->ckpt_h = (qf_now() - t_ck) / 3600.0;
    k->saved_step = step;
    return 0;
}

/* checkpoint.keep_best: the evaluation at step improved valid_loss: a checkpoint of the step (unless this step just
 * wrote one), named as checkpoint.dir/best, kept outside the rotation. 0 or the exit code of a failed save. */
static int keep_best_if_due(qf_run *r, int64_t step, train_clock *k) {
    if (!r->deck.checkpoint_keep_best || r->best_step != step) return 0;
    int rc = k->saved_step == step ? 0 : save(r);
    if (rc) return rc;
    k->saved_step = step;
    qf_err e = {0};
    if (qf_ckpt_mark_best(r->deck.checkpoint_dir, step, r->deck.checkpoint_keep, &r->comm, &e)) {
        if (r->comm.rank == 0) fprintf(stderr, "qwen-ft: %s\n", e.msg);
        return e.code;
    }
    if (r->comm.rank == 0) {
        printf("best: step %lld (valid_loss %.6g) is checkpoint.dir/best\n", (long long)step, r->st.best_valid);
        fflush(stdout);
    }
    return 0;
}

/* Every rank agreed to stop (a signal or max_hours): a checkpoint unless this step just wrote one. */
static int stop_and_save(qf_run *r, int stop, const train_clock *k) {
    const qf_train_state *st = &r->st;
    int rank0 = r->comm.rank == 0;
    char why[256];
    qf_signals_describe(r->sig, stop, r->deck.max_hours, why, sizeof why);
    if (rank0) {
        printf("stopping at step %lld/%lld: %s; writing a checkpoint\n", (long long)st->step, (long long)r->total_steps,
               why);
        fflush(stdout);
    }
    int rc = k->saved_step == st->step ? 0 : save(r);
    if (!rc && rank0) {
        printf("stopped: checkpoint at step %lld of %lld; run the same command (or requeue the job) to resume\n",
               (long long)st->step, (long long)r->total_steps);
        fflush(stdout);
    }
    return rc;
}

#define TRAIN_REPLAN (-1) /* train_loop, train_once: the first step ran out of memory; run again with the next plan */

/* Several ranks, after the first step of a planned run: whether a rank's step ran out of memory and went on in
 * rescue memory (first_step_oom); if so, every rank learns what and where from the lowest such rank (1) */
static int step_oom_agree(qf_run *r) {
    const int W = r->comm.world_size;
    int first = r->oom_rescued ? r->comm.rank : W;
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, r->comm.world);
    if (first == W) return 0;
    struct {
        char what[sizeof r->oom_what];
        unsigned long long bytes;
    } o;
    memset(&o, 0, sizeof o);
    snprintf(o.what, sizeof o.what, "%s", r->oom_what);
    o.bytes = r->oom_bytes;
    MPI_Bcast(&o, (int)sizeof o, MPI_BYTE, first, r->comm.world);
    snprintf(r->oom_what, sizeof r->oom_what, "%s", o.what);
    r->oom_bytes = (size_t)o.bytes;
    r->oom_at_rank = first;
    return 1;
}

/* *stopped = 1 when a signal or max_hours ended the run early (after its checkpoint); TRAIN_REPLAN when the first
 * step ran out of memory on some rank (several ranks: step_oom_agree) */
static int train_loop(qf_run *r, int *stopped) {
    qf_train_state *st = &r->st;
    train_clock k = clock_start(r);
    int stop_early = 0, stop = QF_STOP_NONE;
    while (st->step < r->total_steps && !stop_early) {
        train_step s;
        int rc = take_step(r, &s);
        if (r->first_step) { /* the first step's out-of-memory fallback ends with it (qf_train_command) */
            r->first_step = 0;
            r->oom_jmp = NULL;
            r->oom_armed = 0;
            qf_oom_set_hook(NULL, NULL);
            if (r->planned && r->comm.world_size > 1 && step_oom_agree(r)) return TRAIN_REPLAN;
        }
        if (rc) return rc;
        log_step(r, &s, &k);
        stop_early = eval_if_due(r, s.step);
        if ((rc = keep_best_if_due(r, s.step, &k)) || (rc = checkpoint_if_due(r, s.step, stop_early, &k))) return rc;
        if (s.dt > k.step_max_s) k.step_max_s = s.dt;
        if (!stop_early && st->step < r->total_steps &&
            (stop = qf_signals_stop_requested(r->sig, &r->comm, qf_signals_elapsed_hours(r->sig), r->deck.max_hours,
                                              k.step_max_s / 3600.0, k.ckpt_h)))
            break;
    }
    if (stop) {
        *stopped = 1;
        return stop_and_save(r, stop, &k);
    }
    /* the end: evaluation (unless it just ran) and a checkpoint (unless checkpoint.at_end = false) */
    if (r->have_valid && !stop_early) eval_and_check(r, st->step);
    int rc = keep_best_if_due(r, st->step, &k);
    if (rc) return rc;
    return r->deck.checkpoint_at_end && k.saved_step != st->step ? save(r) : 0;
}

/* The first step's out-of-memory hook (util.h qf_oom_set_hook), set while the first step of a planned run runs:
 * notes what ran out (the first failure), then on one rank leaves the step by longjmp to train_once's setjmp; on
 * several ranks, where the others may be inside a collective this rank would leave, lets the caller take rescue
 * memory (model/backend.h qf_backend_alloc_rescue) so that the step ends on every rank and the ranks agree after
 * it (step_oom_agree). A helper thread's failure stays fatal (0), its message naming the next plan (zero.h
 * oom_hint). */
static int first_step_oom(void *arg, const char *what, size_t bytes) {
    qf_run *r = arg;
    if (!r->oom_armed || !pthread_equal(pthread_self(), r->oom_thread)) return 0;
    if (!r->oom_what[0]) {
        snprintf(r->oom_what, sizeof r->oom_what, "%s", what);
        r->oom_bytes = bytes;
        r->oom_at_rank = r->comm.rank;
    }
    if (r->oom_jmp) {
        jmp_buf *jb = r->oom_jmp;
        r->oom_jmp = NULL;
        r->oom_armed = 0;
        qf_oom_set_hook(NULL, NULL);
        longjmp(*jb, 1);
    }
    r->oom_rescued = 1;
    return 1;
}

/* After the first step ran out of memory: the step's queued work ends, and rp says what the next run needs to
 * know (the plan that failed, where, the fallbacks so far) */
static void step_oom_replan(qf_run *r, qf_replan *rp) {
    r->ops->sync();
    char was[256];
    qf_run_plan_describe(r, r->plan_at, was, sizeof was);
    const char *kind = strcmp(r->ops->name, "cpu") ? "device" : "device (the CPU backend's host)";
    rp->falls = r->plan_falls + 1;
    rp->device_need = r->plans[r->plan_at].device_need;
    snprintf(rp->line, sizeof rp->line, "layout plan: %s ran out of %s memory on rank %d in its first step at %s "
             "(%zu bytes requested)", was, kind, r->oom_at_rank, r->oom_what, r->oom_bytes);
    snprintf(rp->log, sizeof rp->log, "%s", r->plan_log ? r->plan_log : "");
    size_t n = strlen(r->plan_tried);
    snprintf(r->plan_tried + n, sizeof r->plan_tried - n, "%s%s (device memory in the first step at %s, %zu bytes)",
             n ? "; " : "", was, r->oom_what, r->oom_bytes);
    snprintf(rp->tried, sizeof rp->tried, "%s", r->plan_tried);
}

static int train_once(const qf_run_args *a, qf_signals *sig, qf_replan *rp) {
    qf_run r;
    jmp_buf jb;
    volatile int rc = qf_run_setup(&r, a, QF_RUN_TRAIN);
    int stopped = 0;
    r.sig = sig;
    if (!rc) rc = open_metrics(&r);
    if (!rc && r.deck.wall_clock_breakdown) { /* the model computes through the timing wrappers (profile.h) */
        r.model.ops = qf_profile_wrap(&r.prof, r.ops);
        r.model.prof = &r.prof;
    }
    rc = qf_comm_sum_i64(&r.comm, rc) ? (rc ? rc : QF_EXIT_INPUT) : 0;
    if (!rc) {
        qf_monitor_init(&r.mon, r.ops); /* GPU ranks: NVML, and their link's copy rate measured once */
        qf_mem_estimate est;
        qf_estimate(&r.model.cfg, &r.deck, r.comm.world_size, r.comm.local_size, (int64_t)r.ops->act_bytes, &est);
        if (r.comm.rank == 0) {
            qf_run_header(&r, stdout, "train");
            if (r.peak_flops > 0) printf("backend: %s; MFU against %.0f TFLOP/s\n", r.backend_info, r.peak_flops / 1e12);
            else printf("backend: %s; MFU n/a (no peak for this device: set peak_tflops)\n", r.backend_info);
            char mon[256];
            qf_monitor_describe(&r.mon, mon, sizeof mon);
            printf("monitor (rank 0): %s\n", mon);
        }
        if (r.planned) { /* the first step's fallback: first_step_oom */
            if (r.comm.world_size == 1) {
                if (setjmp(jb)) {
                    step_oom_replan(&r, rp);
                    rc = TRAIN_REPLAN;
                    goto out;
                }
                r.oom_jmp = &jb;
            }
            r.oom_armed = 1;
            r.oom_thread = pthread_self();
            qf_oom_set_hook(first_step_oom, &r);
        }
        rc = train_loop(&r, &stopped);
        if (rc == TRAIN_REPLAN) { /* several ranks: the step ended in rescue memory on some rank */
            step_oom_replan(&r, rp);
            goto out;
        }
        if (!rc && r.comm.rank == 0 && !stopped) {
            /* what this rank really held: the engine's own count of model state, and resident-set growth */
            printf("memory: rank 0 model state peak %.1f MiB (estimate %.1f; sharded part %.1f, estimate %.1f), "
                   "activations %.1f MiB (estimate %.1f), resident growth %.1f MiB\n",
                   mib(r.zero.peak_state_bytes), mib(est.params + est.grads + est.optimizer + est.host_per_rank),
                   mib(r.zero.sharded_state_bytes),
                   mib(est.params + est.grads + est.optimizer + est.host_per_rank - est.params_live - est.grads_live),
                   mib((int64_t)r.model.act_bytes), mib(est.activations), mib(qf_mem_peak() - r.rss_base));
            if (r.zero.stage == 3) /* gathers the GPU waited for vs. those started ahead (hk_will_use's window) */
                printf("zero: rank 0 unit gathers %lld, of them prefetched %lld\n",
                       (long long)(r.zero.gathers + r.zero.prefetches), (long long)r.zero.prefetches);
            printf("done: %lld steps\n", (long long)r.st.step);
        }
    }
out:
    qf_profile_unwrap(&r.prof);
    qf_monitor_free(&r.mon);
    const qf_ops *ops = r.ops;
    const uint64_t mark = r.alloc_mark;
    qf_run_free(&r);
    /* what the step held only on its stack (the engine's buffers in flight) goes back too (GPU tables) */
    if (rc == TRAIN_REPLAN) qf_backend_free_since(ops, mark);
    return rc;
}

int qf_train_command(const qf_run_args *a) {
    qf_signals sig; /* installed first: a signal while loading stops at the first step boundary */
    qf_signals_install(&sig);
    qf_run_args again = *a;
    qf_replan rp;
    memset(&rp, 0, sizeof rp);
    int rc;
    while ((rc = train_once(&again, &sig, &rp)) == TRAIN_REPLAN) again.replan = &rp;
    qf_signals_restore(&sig);
    return rc;
}

int qf_eval_command(const qf_run_args *a) {
    qf_run r;
    int rc = qf_run_setup(&r, a, QF_RUN_EVAL);
    if (!rc) {
        if (r.comm.rank == 0 && a->verbose) qf_run_header(&r, stderr, "eval");
        else if (r.comm.rank == 0) /* one line; the JSON on stdout is the result */
            fprintf(stderr, "eval: %s: parameters from %s; valid %s (%lld tokens); --verbose for the run header\n",
                    r.deck.path, r.source[0] ? r.source : r.deck.model_from[0] ? r.deck.model_from : "random init",
                    r.deck.data_valid, (long long)r.valid_ds.n_tokens);
        qf_eval_result ev = qf_eval_run(&r);
        if (r.comm.rank == 0) { /* SPEC: {"valid_loss": x, "valid_ppl": y, "tokens": n} */
            json_t *o = json_object();
            qf_json_set_num(o, "valid_loss", ev.loss);
            qf_json_set_num(o, "valid_ppl", ev.ppl);
            json_object_set_new(o, "tokens", json_integer((json_int_t)ev.tokens));
            qf_json_print(o, stdout);
        }
    }
    qf_run_free(&r);
    return rc;
}
