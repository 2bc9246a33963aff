/* run.c — building a run context from the command line and the deck (see run.h). */
#include "run.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "model/backend.h"
#include "plan/estimate.h"
#include "util/host_mem.h"
#include "h5io.h"
#include "loss_scale.h"
#include "model_config.h"
#include "util/peak.h"
#include "store/model_io.h"
#include "store/model_tok.h"

/* ---- model config: model.from, else a preset and/or explicit dimensions (qf_deck_model_config) ----------- */

static int check_same(const qf_deck *d, const char *key, int64_t given, int64_t from, qf_err *e) {
    if (given > 0 && given != from)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'model.%s' = %lld contradicts model.from (%s has %lld)", d->path,
                          key, (long long)given, d->model_from, (long long)from);
    return 0;
}

static int check_flag(const qf_deck *d, const char *key, int given, int from, qf_err *e) {
    if (given >= 0 && given != from)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'model.%s' = %s contradicts model.from (%s has %s)", d->path, key,
                          given ? "true" : "false", d->model_from, from ? "true" : "false");
    return 0;
}

static int resolve_model(qf_run *r, qf_err *e) {
    qf_deck *d = &r->deck;
    qf_model_config c;
    memset(&c, 0, sizeof c);
    if (d->model_from[0]) {
        if (qf_model_source_config(d->model_from, &c, r->source, sizeof r->source, e)) return e->code;
        char pm[256];
        if (qf_deck_preset_matches(d, &c, pm, sizeof pm))
            return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'model.preset' does not match model.from %s: %s",
                              qf_deck_path_where(d, "model.from"), d->model_from, pm);
        /* explicit dimensions next to model.from must agree with it */
        if (check_same(d, "vocab_size", d->model_vocab_size, c.vocab_size, e) ||
            check_same(d, "hidden_size", d->model_hidden_size, c.hidden_size, e) ||
            check_same(d, "intermediate_size", d->model_intermediate_size, c.intermediate_size, e) ||
            check_same(d, "num_hidden_layers", d->model_num_hidden_layers, c.num_layers, e) ||
            check_same(d, "num_attention_heads", d->model_num_attention_heads, c.num_heads, e) ||
            check_same(d, "num_key_value_heads", d->model_num_key_value_heads, c.num_kv_heads, e) ||
            check_same(d, "head_dim", d->model_head_dim, c.head_dim, e) ||
            check_flag(d, "tie_word_embeddings", d->model_tie_word_embeddings, c.tie_word_embeddings, e) ||
            check_flag(d, "attention_bias", d->model_attention_bias, c.attention_bias, e) ||
            check_flag(d, "qk_norm", d->model_qk_norm, c.qk_norm, e))
            return e->code;
        /* and so must the math settings (they would otherwise be dropped without a word) */
        if (d->model_arch[0] && strcmp(d->model_arch, c.arch) != 0)
            return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'model.arch' = \"%s\" contradicts model.from (%s has \"%s\")",
                              d->path, d->model_arch, d->model_from, c.arch);
        if (d->model_rope_theta > 0 && d->model_rope_theta != c.rope_theta)
            return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'model.rope_theta' = %g contradicts model.from (%s has %g)",
                              d->path, d->model_rope_theta, d->model_from, c.rope_theta);
        if (d->model_rms_norm_eps > 0 && d->model_rms_norm_eps != c.rms_norm_eps)
            return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'model.rms_norm_eps' = %g contradicts model.from (%s has %g)",
                              d->path, d->model_rms_norm_eps, d->model_from, c.rms_norm_eps);
    } else {
        char msg[512];
        if (qf_deck_model_config(d, &c, msg, sizeof msg) != 0)
            return qf_err_set(e, QF_EXIT_INPUT, "%s: model: %s", d->path, msg);
        snprintf(r->source, sizeof r->source, "%s (random init, seed %llu)",
                 d->model_preset[0] ? d->model_preset : "explicit dimensions", (unsigned long long)d->model_init_seed);
    }
    if (qf_model_create(&r->model, &c, r->ops, 0, e)) return e->code;
    return 0;
}

/* ---- data ------------------------------------------------------------------------------------------------- */

/* The one check of a dataset against the model (docs/reliability.md): the file's own validation (qf_dataset_open),
 * then every id the loader will put into a row: eos/pad (padding) and, by a scan of /tokens split across the
 * ranks, every token, which also checks the stored max_token_id and that /loss_mask holds only 0 and 1. Every rank
 * reaches every collective here, whatever it found. */
static int open_data(qf_run *r, const char *path, qf_dataset *ds, const char *key, qf_err *e) {
    qf_dataset_open(path, ds, e);
    if (qf_comm_any(&r->comm, e->code != 0))
        return e->code ? e->code : qf_err_set(e, QF_EXIT_INPUT, "%s (%s): cannot be opened on another rank", path, key);
    /* the ids of the data mean the tokens of the tokenizer it was made with: it must be the model's */
    char mtok[256];
    qf_model_source_tok_identity(r->deck.model_from, mtok, sizeof mtok); /* store/model_tok.h */
    if (ds->tokenizer[0] && mtok[0] && strcmp(ds->tokenizer, mtok) != 0)
        return qf_err_set(e, QF_EXIT_INPUT, "%s (%s): made with the tokenizer %s (attribute `tokenizer`), but the model "
                          "%s records %s: its ids would mean other tokens; prepare the data with the model's tokenizer",
                          path, key, ds->tokenizer, r->deck.model_from, mtok);
    int64_t V = r->model.cfg.vocab_size;
    const char *ids[2] = {"eos_token_id", "pad_token_id"};
    int64_t idv[2] = {ds->eos_token_id, ds->pad_token_id};
    for (int i = 0; i < 2; i++)
        if (idv[i] >= V)
            return qf_err_set(e, QF_EXIT_INPUT,
                              "%s (%s): attribute %s = %lld is outside the model's vocabulary (%lld); padding uses it "
                              "(make the dataset with `qwen-ft prepare --eos-id E --pad-id P`, both below %lld)",
                              path, key, ids[i], (long long)idv[i], (long long)V, (long long)V);
    if (ds->n_tokens == 0) return qf_err_set(e, QF_EXIT_INPUT, "%s (%s): no tokens", path, key);
    int64_t W = r->comm.world_size, k = r->comm.rank, q = ds->n_tokens / W, rem = ds->n_tokens % W;
    int64_t b = q * k + (k < rem ? k : rem), en = b + q + (k < rem ? 1 : 0);
    qf_dataset_scan_result s;
    qf_dataset_scan(ds, b, en, &s, e);
    int64_t mx[2] = {e->code != 0, s.max_token}, mn[2];
    MPI_Allreduce(MPI_IN_PLACE, mx, 2, MPI_INT64_T, MPI_MAX, r->comm.world);
    if (mx[0]) return e->code ? e->code : qf_err_set(e, QF_EXIT_INPUT, "%s (%s): reading failed on another rank", path, key);
    mn[0] = s.max_token == mx[1] ? s.max_at : INT64_MAX;
    mn[1] = s.bad_mask_at >= 0 ? s.bad_mask_at : INT64_MAX;
    MPI_Allreduce(MPI_IN_PLACE, mn, 2, MPI_INT64_T, MPI_MIN, r->comm.world);
    int64_t badv = mn[1] != INT64_MAX && s.bad_mask_at == mn[1] ? s.bad_mask_value : 0;
    MPI_Allreduce(MPI_IN_PLACE, &badv, 1, MPI_INT64_T, MPI_MAX, r->comm.world);
    if (mx[1] >= V)
        return qf_err_set(e, QF_EXIT_INPUT, "%s (%s): token id %lld at /tokens[%lld] is outside the model's vocabulary "
                          "(%lld)", path, key, (long long)mx[1], (long long)mn[0], (long long)V);
    if (mx[1] != ds->max_token)
        return qf_err_set(e, QF_EXIT_INPUT, "%s (%s): attribute max_token_id = %lld, but the largest id in /tokens is "
                          "%lld (at [%lld]): the file was changed after it was made", path, key,
                          (long long)ds->max_token, (long long)mx[1], (long long)mn[0]);
    if (mn[1] != INT64_MAX)
        return qf_err_set(e, QF_EXIT_INPUT, "%s (%s): /loss_mask[%lld] = %lld (0 or 1 expected)", path, key,
                          (long long)mn[1], (long long)badv);
    return 0;
}

static char *deck_to_text(const qf_deck *d) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return qf_strdup("");
    qf_deck_print(d, f);
    fclose(f);
    return buf;
}

/* an allocation of a planned layout failed after all, outside the set-up's trial: the message names the next plan
 * to try */
static int plan_failed(qf_run *r, qf_err *e) {
    if (r->planned && e->code == QF_EXIT_RUNTIME) {
        char next[256] = "";
        int i = r->plan_at + 1 < r->nplans && r->plans[r->plan_at + 1].fits ? r->plan_at + 1 : -1;
        if (i >= 0) qf_run_plan_describe(r, i, next, sizeof next);
        size_t n = strlen(e->msg);
        snprintf(e->msg + n, sizeof e->msg - n, " (the \"auto\" layout plan did not fit after all%s%s%s)",
                 next[0] ? "; the next plan: " : "", next,
                 next[0] ? ": set those keys in the deck, or lower gpu_memory_limit_gb" : "");
    }
    return e->code;
}

/* The layout-dependent part of the set-up: the gradient home, the micro-batch rows, the activations and the ZeRO
 * engine (model state, optimizer state, offload buffers). Under a plan its allocations run as a trial
 * (model/mem_trial.h): one that fails is recorded in r->trial and the set-up goes on without memory, to be
 * freed by engine_down when the ranks agree that a plan ran out (engine_agree). */
static int engine_up(qf_run *r, int mode, qf_err *e) {
    qf_deck *d = &r->deck;
    qf_plan_grads_home(d, &r->model.cfg, r->comm.world_size, r->comm.local_size, (int64_t)r->ops->act_bytes,
                       (int64_t)qf_backend_device_budget(r->ops, d), r->grads_why, sizeof r->grads_why);
    int ga = mode == QF_RUN_TRAIN ? d->gradient_accumulation_steps : 1;
    r->nrows = ga;
    r->rows = qf_calloc((size_t)ga, sizeof *r->rows);
    for (int i = 0; i < ga; i++) qf_rows_alloc(&r->rows[i], d->train_micro_batch_size_per_gpu, d->seq_len);
    char why[256];
    if (qf_model_check_batch(d->train_micro_batch_size_per_gpu, d->seq_len, why, sizeof why))
        return qf_err_set(e, QF_EXIT_INPUT, "%s: %s", d->path, why);
    if (d->recompute_layers > r->model.cfg.num_layers)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'recompute_layers' = %d: the model has %d layers", d->path,
                          d->recompute_layers, r->model.cfg.num_layers);
    /* the trial; the fault hook (docs/testing.md) refuses what passes half the memory this layout is predicted
     * to take on this rank: a card half as large as the plan thought */
    qf_mem_trial *t = &r->trial;
    memset(t, 0, sizeof *t);
    t->on = r->planned;
    const int attempt = r->plan_falls;
    if ((r->oom_rank == -1 || r->oom_rank == r->comm.rank) && attempt < r->oom_plans) {
        int64_t want = 0;
        if (r->planned) want = qf_run_plan_bytes(r);
        else {
            qf_mem_estimate m;
            qf_estimate(&r->model.cfg, d, r->comm.world_size, r->comm.local_size, (int64_t)r->ops->act_bytes, &m);
            want = m.params + m.grads + m.optimizer + m.host_per_rank + m.activations;
        }
        t->refuse_past = want / 2 > 0 ? want / 2 : 1;
    }
    r->model.trial = t->on || t->refuse_past ? t : NULL;
    r->trial_base = qf_backend_current_bytes(r->ops);
    if (qf_model_alloc_acts(&r->model, d->train_micro_batch_size_per_gpu, d->seq_len, d->activation_checkpointing,
                            d->recompute_layers, e) ||
        qf_zero_init(&r->zero, &r->model, &r->comm, d, mode == QF_RUN_TRAIN, e))
        return plan_failed(r, e);
    /* the steps' transient buffers (stages 2-3: the gathered units and unit gradients in flight, which the plan
     * counts; they come from the engine's pool during a step): taken once and given back, so that a layout whose
     * in-flight peak does not fit falls back here, before any step */
    const qf_mem_estimate *pm = r->planned ? &r->plans[r->plan_at].mem : NULL;
    if (pm && t->on && !t->failed && pm->params_live + pm->grads_live > 0) {
        size_t live = (size_t)(pm->params_live + pm->grads_live);
        void *p = qf_mem_trial_alloc(t, r->ops, live, "the steps' unit buffers (gathered parameters and unit "
                                     "gradients in flight)");
        if (p) {
            r->ops->free(p);
            t->held -= (int64_t)live;
        }
    }
    return 0;
}

/* frees what engine_up allocated (the model keeps its layout; the rows, activations and engine go) */
static void engine_down(qf_run *r) {
    if (r->zero.m) qf_zero_free(&r->zero);
    qf_model_free_acts(&r->model);
    for (int i = 0; i < r->nrows; i++) qf_rows_free(&r->rows[i]);
    free(r->rows);
    r->rows = NULL;
    r->nrows = 0;
}

#define FALLBACKS_TEXT_(n) #n
#define FALLBACKS_TEXT_X(n) FALLBACKS_TEXT_(n)
#define FALLBACKS_TEXT FALLBACKS_TEXT_X(QF_RUN_PLAN_FALLBACKS)

/* what ran out, on which rank: the lowest rank whose set-up failed tells every rank */
typedef struct {
    int rank, host;
    long long bytes;
    char where[96];
} oom_report;

/* Every rank after engine_up (rc its code): 0 when the set-up holds everywhere (the trial ends: later failures
 * are fatal as ever); 1 when a plan ran out of memory on some rank and the next plan is applied (the caller runs
 * engine_up again); else an exit code (e set on the ranks that failed, which say why: qf_run_setup). One collective
 * path for all ranks whatever each saw: no rank is left in a collective alone. */
static int engine_agree(qf_run *r, int rc, qf_err *e) {
    const int W = r->comm.world_size;
    int mx = rc, first = r->trial.failed ? r->comm.rank : W; /* the worst code; the lowest rank that ran out */
    MPI_Allreduce(MPI_IN_PLACE, &mx, 1, MPI_INT, MPI_MAX, r->comm.world);
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, r->comm.world);
    if (mx) return mx;
    if (first == W) {
        r->model.trial = NULL;
        /* an allocation that fails in the first step falls back too (train.c first_step_oom); one that fails
         * later, or on a helper thread, stays fatal: its message names the next plan */
        int ni = r->plan_at + 1 < r->nplans && r->plans[r->plan_at + 1].fits ? r->plan_at + 1 : -1;
        if (ni >= 0) {
            char next[256];
            qf_run_plan_describe(r, ni, next, sizeof next);
            snprintf(r->oom_hint, sizeof r->oom_hint, " (the \"auto\" layout plan did not fit after all; the next "
                     "plan: %s: set those keys in the deck, or lower gpu_memory_limit_gb)", next);
            r->zero.oom_hint = r->oom_hint;
        }
        return 0;
    }
    oom_report o = {.rank = first, .host = r->trial.host, .bytes = (long long)r->trial.bytes};
    snprintf(o.where, sizeof o.where, "%s", r->trial.where);
    MPI_Bcast(&o, (int)sizeof o, MPI_BYTE, first, r->comm.world);
    /* everything the set-up took goes back: the backend's count returns to what it held before (CUDA) */
    engine_down(r);
    r->model.trial = NULL;
    long long leak = (long long)qf_backend_current_bytes(r->ops) - (long long)r->trial_base;
    MPI_Allreduce(MPI_IN_PLACE, &leak, 1, MPI_LONG_LONG, MPI_MAX, r->comm.world);
    char was[256], next[256] = "", line[1024];
    qf_run_plan_describe(r, r->plan_at, was, sizeof was);
    const char *kind = o.host ? "host" : strcmp(r->ops->name, "cpu") ? "device" : "device (the CPU backend's host)";
    int ni = leak > 0 ? -1 : qf_run_plan_next(r, o.host);
    if (ni >= 0) qf_run_plan_describe(r, ni, next, sizeof next);
    snprintf(line, sizeof line, "layout plan: %s ran out of %s memory on rank %d at %s (%lld bytes requested); %s%s",
             was, kind, o.rank, o.where, o.bytes, ni >= 0 ? "falling back to the next plan: " : "", next);
    /* the plans tried, for the message when none is left */
    size_t n = strlen(r->plan_tried);
    snprintf(r->plan_tried + n, sizeof r->plan_tried - n, "%s%s (%s memory at %s, %lld bytes)", n ? "; " : "", was,
             o.host ? "host" : "device", o.where, o.bytes);
    if (ni < 0) {
        if (leak > 0)
            return qf_err_set(e, QF_EXIT_RUNTIME, "layout plan: %s ran out of %s memory on rank %d at %s (%lld bytes "
                              "requested), and %lld bytes of its set-up stayed on the backend: no fallback",
                              was, kind, o.rank, o.where, o.bytes, leak);
        return qf_err_set(e, QF_EXIT_RUNTIME, "layout plan: every plan tried ran out of memory: %s; %s (qwen-ft plan "
                          "%s lists the ranking): lower gpu_memory_limit_gb, free host memory, or set the layout keys "
                          "by hand", r->plan_tried, r->plan_falls >= QF_RUN_PLAN_FALLBACKS
                              ? "no more fallbacks (a run takes at most " FALLBACKS_TEXT ")"
                              : "no plan that fits and needs less of that memory is left",
                          r->deck.path);
    }
    if (r->comm.rank == 0) {
        fprintf(stderr, "qwen-ft: %s\n", line);
        fflush(stderr);
    }
    return 1 + qf_run_plan_fallback(r, ni, line);
}

static int setup(qf_run *r, const qf_run_args *a, int mode, qf_err *e) {
    if (qf_deck_load(a->deck, a->sets.n, (char *const *)a->sets.v, r->comm.world_size, &r->deck, e)) return e->code;
    qf_deck *d = &r->deck;
    if (!d->adam_w_mode)
        return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'optimizer.params.adam_w_mode' = false (Adam with L2 decay) is not "
                                            "supported; qwen-ft implements AdamW",
                          d->path);
    r->rss_base = qf_mem_rss();
    qf_comm_free(&r->comm);
    qf_comm_init(&r->comm, r->ops, d->ranks_per_node);
    if (qf_backend_select(d, r->comm.local_rank, &r->ops, r->backend_info, sizeof r->backend_info, e)) return e->code;
    r->comm.ops = r->ops;
    r->alloc_mark = qf_backend_alloc_mark(r->ops); /* what a first step left by longjmp leaves is freed back to it */
    /* GPU buffers travel by NCCL, also on one rank (ZeRO-3's gathers are collectives of one then) */
    if (strcmp(r->ops->name, "cpu") && qf_comm_init_nccl(&r->comm, e)) return e->code;
    if (qf_run_check_path(d, "model.from", d->model_from, e) || resolve_model(r, e)) return e->code;
    qf_deck_resolve_auto(d, r->model.cfg.hidden_size);
    if (qf_run_plan_layout(r, e)) return e->code;
    if (mode == QF_RUN_TRAIN) {
        if (!d->data_train[0]) return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'data.train' is required to train", d->path);
        if (qf_run_check_path(d, "data.train", d->data_train, e) ||
            open_data(r, d->data_train, &r->train_ds, "data.train", e))
            return e->code;
        r->have_train = 1;
        qf_loader_init(&r->train_ld, &r->train_ds, d->seq_len, d->shuffle, d->data_seed);
        r->steps_per_epoch = r->train_ld.rows_per_epoch / d->train_batch_size;
        if (r->steps_per_epoch == 0)
            return qf_err_set(e, QF_EXIT_INPUT,
                              "%s: %s packs into %lld rows of seq_len %d, fewer than train_batch_size = %lld",
                              d->path, d->data_train, (long long)r->train_ld.rows_per_epoch, d->seq_len,
                              (long long)d->train_batch_size);
        r->total_steps = d->max_steps > 0 ? d->max_steps
                                          : (int64_t)ceil((d->epochs > 0 ? d->epochs : 1.0) * (double)r->steps_per_epoch);
    }
    if (d->data_valid[0]) {
        if (qf_run_check_path(d, "data.valid", d->data_valid, e) ||
            open_data(r, d->data_valid, &r->valid_ds, "data.valid", e))
            return e->code;
        r->have_valid = 1;
        qf_loader_init(&r->valid_ld, &r->valid_ds, d->seq_len, 0, d->data_seed);
    } else if (mode == QF_RUN_EVAL) {
        return qf_err_set(e, QF_EXIT_INPUT, "%s: key 'data.valid' is required by eval", d->path);
    }
    /* the layout's memory: under a plan, a set-up that runs out of memory on any rank falls back to the next plan
     * (before anything is loaded or written: the run is the one started with that plan by hand) */
    for (;;) {
        int rc = engine_up(r, mode, e);
        if (!r->planned) {
            if (rc) return rc;
            break;
        }
        rc = engine_agree(r, rc, e);
        if (rc == 0) break;
        if (rc != 1) return rc;
    }

    /* parameters: a checkpoint in checkpoint.dir wins (resume), else model.from, else random init */
    char ck[QF_PATH_MAX + 64];
    /* one run per checkpoint.dir: taken before `latest` is read, held until qf_run_free */
    if (mode == QF_RUN_TRAIN && qf_ckpt_lock_take(&r->lock, d->checkpoint_dir, &r->comm, e)) return e->code;
    int found = a->resume_from ? qf_ckpt_resolve(d->checkpoint_dir, a->resume_from, ck, sizeof ck, e) == 0
                               : qf_ckpt_find_latest(d->checkpoint_dir, ck, sizeof ck, e);
    if (a->resume_from && !found) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        e->code = 0; /* the first error stands in qf_err: this one says which option it was */
        return qf_err_set(e, QF_EXIT_INPUT, "train --resume-from %s: %s", a->resume_from, why);
    }
    if (found < 0) return e->code;
    qf_loss_scale_init(d, &r->st);
    r->st.best_valid = INFINITY;
    if (found) {
        if (qf_ckpt_load(ck, &r->zero, &r->st, e)) return e->code;
        snprintf(r->source, sizeof r->source, "%s", ck);
        r->resumed = 1;
    } else {
        /* model.from or random init: each rank reads / computes only the range it holds, in bounded pieces */
        int64_t b, en;
        qf_zero_load_range(&r->zero, &b, &en);
        int64_t piece = en - b < QF_ZERO_IO_CHUNK ? en - b : QF_ZERO_IO_CHUNK;
        float *host = qf_malloc((size_t)piece * 4 + 4);
        for (int64_t cb = b; cb < en && !e->code; cb += QF_ZERO_IO_CHUNK) {
            int64_t ce = en < cb + QF_ZERO_IO_CHUNK ? en : cb + QF_ZERO_IO_CHUNK;
            if (d->model_from[0]) qf_model_load_range(&r->model, d->model_from, cb, ce, host, e);
            else qf_model_init_random_range(&r->model, d->model_init_seed, cb, ce, host);
            if (!e->code) qf_zero_set_params(&r->zero, cb, ce, host);
        }
        free(host);
        int bad = qf_comm_any(&r->comm, e->code != 0);
        if (bad) return e->code ? e->code : qf_err_set(e, QF_EXIT_INPUT, "loading %s failed on another rank", d->model_from);
        qf_zero_params_commit(&r->zero);
    }
    r->deck_text = deck_to_text(d);
    if (mode == QF_RUN_TRAIN) qf_run_carry_files(r);
    /* MFU: SPEC's flops per token against the deck's peak_tflops, else the GPU table (src/util/peak.c); CPU ranks have
     * no peak: MFU is n/a */
    const qf_model_config *c = &r->model.cfg;
    r->flops_per_token = 6.0 * (double)qf_model_num_matmul_params(c) +
                         12.0 * c->num_layers * c->num_heads * c->head_dim * (double)d->seq_len;
    r->peak_flops = d->peak_tflops * 1e12;
    if (r->peak_flops == 0 && strcmp(r->ops->name, "cpu") && r->topo.node.gpus > 0)
        r->peak_flops = qf_peak_gpu_flops(r->topo.node.gpu[r->comm.local_rank % r->topo.node.gpus].name, NULL);
    return 0;
}

static void fault_parse(qf_run *r) {
    const char *f = getenv("QWENFT_INJECT_FAULT");
    r->fault_rank = -1;
    r->oom_rank = -2;
    r->oomstep_rank = -2;
    long long step = 0;
    int rank = -1;
    char kind[8] = {0};
    /* h5write is the checkpoint writer's own fault (src/store/checkpoint.c): not one for the train loop */
    if (f && sscanf(f, "%d:%lld:%7s", &rank, &step, kind) == 3 && !strcmp(kind, "oomstep")) {
        /* the first step's: the first `step` layouts tried run out of memory in it on rank `rank` (train.c) */
        r->oomstep_rank = rank;
        r->oomstep_plans = (int)step;
    } else if (f && sscanf(f, "%d:%lld:%7s", &rank, &step, kind) == 3 && !strcmp(kind, "oom")) {
        /* the set-up's: the first `step` layouts tried run out of memory on rank `rank` (-1: every rank) */
        r->oom_rank = rank;
        r->oom_plans = (int)step;
    } else if (f && sscanf(f, "%d:%lld:%7s", &rank, &step, kind) == 3 && strcmp(kind, "h5write") != 0) {
        r->fault_rank = rank;
        r->fault_step = step;
        memcpy(r->fault_kind, kind, sizeof kind);
    }
}

int qf_run_setup(qf_run *r, const qf_run_args *a, int mode) {
    memset(r, 0, sizeof *r);
    r->lock.fd = -1;
    r->best_step = -1;
    r->replan = a->replan;
    r->first_step = 1;
    fault_parse(r);
    r->ops = qf_ops_cpu();
    qf_comm_init(&r->comm, r->ops, 0);
    /* the hardware, and NCCL's environment set from it before any communicator exists (docs/hpc.md) */
    qf_topology_detect(&r->topo, &r->comm);
    qf_topology_nccl_env(&r->topo, 1, r->nccl_line, sizeof r->nccl_line);
    qf_err e = {0};
    setup(r, a, mode, &e);
    /* every rank reaches here; agree on failure so that no rank is left waiting */
    int code = e.code;
    MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (code) {
        /* rank 0 speaks for everyone when it saw the error itself; otherwise the ranks that did say so */
        int root_code = e.code;
        MPI_Bcast(&root_code, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (e.code && r->comm.rank == 0) fprintf(stderr, "qwen-ft: %s\n", e.msg);
        else if (e.code && !root_code) fprintf(stderr, "qwen-ft: rank %d: %s\n", r->comm.rank, e.msg);
        return code;
    }
    return 0;
}

void qf_run_free(qf_run *r) {
    /* every rank has said what it had to say before any rank exits: a rank leaving first with a non-zero code makes
     * the launcher kill the others, and a message still on its way would be lost */
    fflush(stdout);
    if (r->comm.world_size > 1) MPI_Barrier(r->comm.world);
    if (r->metrics) fclose(r->metrics);
    qf_hf_files_free(&r->carry);
    qf_tb_close(r->tb);
    qf_topology_free(&r->topo);
    if (r->rows) {
        for (int i = 0; i < r->nrows; i++) qf_rows_free(&r->rows[i]);
        free(r->rows);
    }
    if (r->zero.m) qf_zero_free(&r->zero);
    qf_model_free(&r->model);
    if (r->have_train) {
        qf_loader_free(&r->train_ld);
        qf_dataset_close(&r->train_ds);
    }
    if (r->have_valid) {
        qf_loader_free(&r->valid_ld);
        qf_dataset_close(&r->valid_ds);
    }
    free(r->deck_text);
    free(r->plan_text);
    free(r->plans);
    free(r->plan_log);
    qf_ckpt_lock_release(&r->lock);
    qf_comm_free(&r->comm);
}
