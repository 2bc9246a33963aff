/* deck_check.c — what is decided once every setting is in: "auto" values that depend on other keys, the checks
 * across keys (precision, ZeRO and offload, scheduler, run length, optimizer), the model the deck names, and the
 * batch rule train_batch_size = micro x accumulation x ranks. Each failure names the file, line and key (exit 2). */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include "deck_impl.h"
#include "model_config.h"

/* ================================================================ cross-key resolution and checks */

static void deck_resolve_autos(deck_ctx *c) {
    qf_deck *d = c->d;
    for (int i = 0; i < c->nkeys; i++)
        if (c->autos[i] && (c->keys[i].flags & QF_KF_AUTO_LR)) qf_deck_keys_store_float(&c->keys[i], d, d->lr);
    if (!c->src[deck_idx("zero_optimization.overlap_comm")]) d->overlap_comm = d->zero_stage == 3; /* DeepSpeed */
    /* the global seed seeds what has no seed of its own (HF: `seed`, and `data_seed` defaults to it) */
    if (c->src[deck_idx("seed")] && !c->src[deck_idx("model.init_seed")]) d->model_init_seed = d->seed;
    if (c->src[deck_idx("seed")] && !c->src[deck_idx("data.seed")]) d->data_seed = d->seed;
}

static int deck_check_precision(const deck_ctx *c) {
    if (c->d->bf16 && c->d->fp16)
        return deck_fail(c, deck_src(c, "fp16.enabled"), "fp16.enabled",
                         "bf16.enabled and fp16.enabled are both true; enable at most one (neither = fp32)");
    if (c->d->fp8 && !c->d->bf16)
        return deck_fail(c, deck_src(c, "fp8.enabled"), "fp8.enabled",
                         "fp8 training needs bf16.enabled = true (the fp8 GEMMs take and give bf16 tensors; %s)",
                         c->d->fp16 ? "fp16 with its loss scaling does not combine with fp8's own scales"
                                    : "fp32 runs have no fp8 path");
    return 0;
}

static int deck_check_zero(const deck_ctx *c) {
    const qf_deck *d = c->d;
    /* "auto" values (stage -1, device "auto", ratio -1): the planner keeps to these rules (src/plan/plan.c) */
    if (d->offload_optimizer == QF_OFFLOAD_CPU && d->zero_stage == 0)
        return deck_fail(c, deck_src(c, "zero_optimization.offload_optimizer.device"),
                         "zero_optimization.offload_optimizer.device",
                         "optimizer offload needs zero_optimization.stage >= 1, got stage %d", d->zero_stage);
    if (d->offload_optimizer == QF_OFFLOAD_NONE && d->offload_optimizer_ratio >= 0 && d->offload_optimizer_ratio < 1)
        return deck_fail(c, deck_src(c, "zero_optimization.offload_optimizer.ratio"),
                         "zero_optimization.offload_optimizer.ratio",
                         "%g (the host's share of the optimizer) needs zero_optimization.offload_optimizer.device = "
                         "\"cpu\", got \"%s\"", d->offload_optimizer_ratio,
                         c->keys[deck_idx("zero_optimization.offload_optimizer.device")].choices[d->offload_optimizer]);
    if (d->offload_optimizer_gradients == QF_GRADS_HOST &&
        (d->offload_optimizer == QF_OFFLOAD_NONE || (d->zero_stage >= 0 && d->zero_stage < 2) ||
         (d->offload_optimizer_ratio >= 0 && d->offload_optimizer_ratio < 1)))
        return deck_fail(c, deck_src(c, "zero_optimization.offload_optimizer.gradients"),
                         "zero_optimization.offload_optimizer.gradients",
                         "\"host\" needs zero_optimization.offload_optimizer.device = \"cpu\", stage >= 2 and "
                         "offload_optimizer.ratio = 1 (got device \"%s\", stage %d, ratio %g)",
                         c->keys[deck_idx("zero_optimization.offload_optimizer.device")].choices[d->offload_optimizer],
                         d->zero_stage, d->offload_optimizer_ratio);
    if (d->offload_param == QF_OFFLOAD_CPU && d->zero_stage >= 0 && d->zero_stage != 3)
        return deck_fail(c, deck_src(c, "zero_optimization.offload_param.device"),
                         "zero_optimization.offload_param.device",
                         "parameter offload needs zero_optimization.stage 3, got stage %d", d->zero_stage);
    return 0;
}

static void deck_sched_names(const char *const *names, unsigned mask, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int t = 1; t <= QF_SCHED_LINEAR; t++)
        if (mask & QF_SCHED_BIT(t)) {
            snprintf(buf + len, n - len, "%s%s", len ? ", " : "", names[t]);
            len = strlen(buf);
        }
}

static int deck_check_sched(const deck_ctx *c) {
    const qf_deck *d = c->d;
    char types[128];
    const char *const *names = c->keys[deck_idx("scheduler.type")].choices;
    if (d->sched == QF_SCHED_NONE) {
        /* "none" given: the parameters are listed as having no effect (run header); no type at all: refused */
        if (deck_src(c, "scheduler.type")) return 0;
        for (int i = 0; i < c->nkeys; i++)
            if (c->keys[i].sched_mask && c->src[i])
                return deck_fail(c, c->src[i], c->keys[i].path,
                                 "given without scheduler.type, so the learning rate would stay constant: set "
                                 "scheduler.type (WarmupLR, WarmupDecayLR, WarmupCosineLR), or \"none\" to keep "
                                 "the lr constant (the header then lists the parameters as having no effect)");
        return 0;
    }
    for (int i = 0; i < c->nkeys; i++) {
        const qf_deck_key *k = &c->keys[i];
        if (!k->sched_mask || !c->src[i] || (k->sched_mask & QF_SCHED_BIT(d->sched))) continue;
        deck_sched_names(names, k->sched_mask, types, sizeof types);
        return deck_fail(c, c->src[i], k->path, "scheduler.type \"%s\" does not take it (only %s do)",
                         names[d->sched], types);
    }
    if ((d->sched == QF_SCHED_WARMUP_DECAY_LR || d->sched == QF_SCHED_WARMUP_COSINE_LR) &&
        !c->src[deck_idx("scheduler.params.total_num_steps")])
        return deck_fail(c, deck_src(c, "scheduler.type"), "scheduler.params.total_num_steps",
                         "required by scheduler.type \"%s\" (a step count, or \"auto\" for the run's total steps)",
                         names[d->sched]);
    return 0;
}

static int deck_check_run(const deck_ctx *c) {
    const qf_deck *d = c->d;
    config_setting_t *ms = deck_src(c, "max_steps");
    char where[DECK_WHERE_MAX];
    if (ms && deck_src(c, "epochs")) {
        deck_where(c, ms, where, sizeof where);
        return deck_fail(c, deck_src(c, "epochs"), "epochs",
                         "give max_steps or epochs, not both (max_steps is set at %s)", where);
    }
    if (deck_src(c, "optimizer.params.adam_w_mode") && strcmp(d->optimizer_type, "AdamW") == 0 &&
        !qf_deck_keys_get_int(&c->keys[deck_idx("optimizer.params.adam_w_mode")], d))
        return deck_fail(c, deck_src(c, "optimizer.params.adam_w_mode"), "optimizer.params.adam_w_mode",
                         "false contradicts optimizer.type \"AdamW\" (use type \"Adam\" for classic Adam with L2)");
    if (deck_src(c, "recompute_layers") && d->recompute_layers >= 0 && d->activation_checkpointing == QF_ACKPT_NONE)
        return deck_fail(c, deck_src(c, "recompute_layers"), "recompute_layers",
                         "has no effect without activation_checkpointing (\"full\", \"selective\" or \"pointwise\")");
    return 0;
}

/* ================================================================ the model the deck names */

static const char *const k_required_dims[] = {"model.vocab_size", "model.hidden_size", "model.intermediate_size",
                                              "model.num_hidden_layers", "model.num_attention_heads", NULL};

void qf_deck_resolve_auto(qf_deck *d, int64_t hidden) {
    if (d->reduce_bucket_size < 0) d->reduce_bucket_size = hidden * hidden;
    if (d->stage3_prefetch_bucket_size < 0) d->stage3_prefetch_bucket_size = (int64_t)(0.9 * (double)(hidden * hidden));
    if (d->stage3_param_persistence_threshold < 0) d->stage3_param_persistence_threshold = 10 * hidden;
}

static void deck_preset_list(char *buf, size_t n) {
    const char *const *names = qf_preset_names();
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; names[i] && len + 1 < n; i++) {
        snprintf(buf + len, n - len, "%s%s", i ? ", " : "", names[i]);
        len = strlen(buf);
    }
}

static int deck_check_preset(const deck_ctx *c) {
    qf_model_config m;
    char list[1024];
    const char *name = c->d->model_preset, *sug;
    if (qf_preset_lookup(name, &m) == 0) return 0;
    sug = qf_deck_keys_suggest_in(name, qf_preset_names());
    deck_preset_list(list, sizeof list);
    if (sug)
        return deck_fail(c, deck_src(c, "model.preset"), "model.preset",
                         "unknown preset \"%s\" (did you mean \"%s\"?); presets: %s", name, sug, list);
    return deck_fail(c, deck_src(c, "model.preset"), "model.preset", "unknown preset \"%s\"; presets: %s", name, list);
}

static int deck_check_dims(const deck_ctx *c) {
    const config_setting_t *first = NULL;
    const char *missing = NULL;
    for (int i = 0; k_required_dims[i]; i++) {
        if (!first) first = deck_src(c, k_required_dims[i]);
        if (!missing && !deck_src(c, k_required_dims[i])) missing = k_required_dims[i];
    }
    if (!first)
        return deck_fail(c, config_lookup(&c->cfg, "model"), "model.from",
                         "no model given: set model.from (HDF5 model, checkpoint or HF directory), model.preset "
                         "(random init), or the model dimensions (model.vocab_size, model.hidden_size, ...)");
    if (missing)
        return deck_fail(c, first, missing, "explicit model dimensions (no model.from or model.preset) need it too");
    return 0;
}

static int deck_check_model(const deck_ctx *c) {
    const qf_deck *d = c->d;
    qf_model_config m;
    char msg[512];
    int rc;
    /* both: the preset names model.from's architecture (checked against the file where the file is read) */
    if (d->model_from[0] && d->model_preset[0]) return deck_check_preset(c);
    if (d->model_from[0] || (!c->has_file && !d->model_preset[0] && !deck_src(c, "model.hidden_size"))) return 0;
    if (d->model_preset[0] && (rc = deck_check_preset(c)) != 0) return rc;
    if (!d->model_preset[0] && (rc = deck_check_dims(c)) != 0) return rc;
    if (qf_deck_model_config(d, &m, msg, sizeof msg) != 0)
        return deck_fail(c, config_lookup(&c->cfg, "model"), d->model_preset[0] ? "model.preset" : "model.hidden_size",
                         "the model is inconsistent: %s", msg);
    return 0;
}

/* ================================================================ the batch rule */

static void deck_batch_num(int64_t v, char *buf, size_t n) {
    if (v > 0) snprintf(buf, n, "%lld", (long long)v);
    else snprintf(buf, n, "(not given)");
}

static int deck_batch_fail(const deck_ctx *c, int64_t tb, int64_t m, int64_t a, int w, const char *why) {
    const char *key = deck_given(c, "train_batch_size") ? "train_batch_size" : "train_micro_batch_size_per_gpu";
    char sb[32], sm[32], sa[32];
    deck_batch_num(tb, sb, sizeof sb);
    deck_batch_num(m, sm, sizeof sm);
    deck_batch_num(a, sa, sizeof sa);
    return deck_fail(c, deck_src(c, key), key,
                     "%s: train_batch_size %s, train_micro_batch_size_per_gpu %s, gradient_accumulation_steps %s, "
                     "%d data-parallel ranks (rule: train_batch_size = micro x accumulation x ranks)",
                     why, sb, sm, sa, w);
}

static int deck_batch(deck_ctx *c, int w) {
    qf_deck *d = c->d;
    int gb = deck_given(c, "train_batch_size"), gm = deck_given(c, "train_micro_batch_size_per_gpu");
    int ga = deck_given(c, "gradient_accumulation_steps");
    int64_t tb = d->train_batch_size;
    int64_t m = gm ? d->train_micro_batch_size_per_gpu : c->default_micro ? c->default_micro : 1;
    int64_t a = ga ? d->gradient_accumulation_steps : 1;
    if ((double)m * (double)a * w > DECK_INT_NOMAX) return deck_batch_fail(c, tb, m, a, w, "too large");
    if (!gb) tb = m * a * w;
    else if (gm && ga && tb != m * a * w) return deck_batch_fail(c, tb, m, a, w, "inconsistent");
    else if (!gm && tb % (a * w) != 0)
        return deck_batch_fail(c, tb, 0, a, w, "train_batch_size is not a multiple of accumulation x ranks");
    else if (!gm) m = tb / (a * w);
    else if (!ga && tb % (m * w) != 0)
        return deck_batch_fail(c, tb, m, 0, w, "train_batch_size is not a multiple of micro x ranks");
    else if (!ga) a = tb / (m * w);
    if (m > INT_MAX || a > INT_MAX) return deck_batch_fail(c, tb, m, a, w, "too large");
    d->train_batch_size = tb;
    d->train_micro_batch_size_per_gpu = (int)m;
    d->gradient_accumulation_steps = (int)a;
    return 0;
}

/* ================================================================ all of it, in order */

int deck_resolve(deck_ctx *c, int dp_world) {
    int rc;
    if ((rc = deck_hf_defaults(c)) || (rc = deck_resolve_paths(c))) return rc;
    deck_resolve_autos(c);
    if ((rc = deck_check_precision(c)) || (rc = deck_check_zero(c)) || (rc = deck_check_sched(c)) ||
        (rc = deck_check_run(c)) || (rc = deck_check_model(c)))
        return rc;
    if (strcmp(c->d->optimizer_type, "AdamW") == 0) c->d->adam_w_mode = 1; /* as DeepSpeed: AdamW is decoupled */
    return deck_batch(c, dp_world > 0 ? dp_world : 1);
}
