/* deck_hf_defaults.c — what a deck that reads a DeepSpeed JSON (`deepspeed = ...`) gets where neither the deck, --set
 * nor the JSON gives an optimizer, a scheduler or a batch size: the HF Trainer's defaults, as `--deepspeed` runs of
 * the Trainer get them (TrainingArguments: AdamW lr 5e-5, betas 0.9/0.999, eps 1e-8, weight_decay 0,
 * lr_scheduler_type "linear" with no warmup, per_device_train_batch_size 8). Each key so filled is marked
 * QF_ORIGIN_HF; the run header lists them (deck_sources.c). Decks without `deepspeed` keep the table's defaults
 * (DeepSpeed's: lr 1e-3 constant, micro batch 1), also listed in the header. docs/deck.md, "From DeepSpeed". */
#include <string.h>
#include "deck_impl.h"

/* 1 if the JSON (layer QF_ORIGIN_DS) gives some key under prefix. */
static int hf_json_gives(const deck_ctx *c, const char *prefix) {
    size_t n = strlen(prefix);
    for (int i = 0; i < c->nkeys; i++)
        if (c->src[i] && c->layer[i] == QF_ORIGIN_DS && strncmp(c->keys[i].path, prefix, n) == 0) return 1;
    return 0;
}

/* The HF default of a key that nothing gives. */
static void hf_set(deck_ctx *c, const char *path, const char *text) {
    int ki = deck_idx(path);
    if (c->src[ki]) return;
    QF_CHECK(qf_deck_keys_apply_text(&c->keys[ki], c->d, text) == 0);
    c->d->origin[ki] = QF_ORIGIN_HF;
}

int deck_hf_defaults(deck_ctx *c) {
    qf_deck *d = c->d;
    /* the HF linear schedule has no warmup unless asked for (DeepSpeed's 1000 steps belong to its Warmup* types) */
    if (d->sched == QF_SCHED_LINEAR && !c->src[deck_idx("scheduler.params.warmup_num_steps")])
        QF_CHECK(qf_deck_keys_apply_text(&c->keys[deck_idx("scheduler.params.warmup_num_steps")], d, "0") == 0);
    /* "auto" micro batch (the Trainer fills it with per_device_train_batch_size) in any deck, or none at all with
     * `deepspeed`, unless the batch rule derives it from train_batch_size */
    int mi = deck_idx("train_micro_batch_size_per_gpu");
    if (!deck_given(c, "train_micro_batch_size_per_gpu") && !deck_given(c, "train_batch_size") &&
        (c->has_ds || c->autos[mi])) {
        c->default_micro = 8;
        d->origin[mi] = QF_ORIGIN_HF;
        if (!deck_given(c, "gradient_accumulation_steps")) d->origin[deck_idx("gradient_accumulation_steps")] = QF_ORIGIN_HF;
    }
    if (!c->has_ds) return 0;
    /* the Trainer builds its own optimizer and schedule when the JSON has none, from TrainingArguments (which the
     * deck's keys stand for) */
    if (!hf_json_gives(c, "optimizer.")) {
        hf_set(c, "optimizer.type", "AdamW");
        hf_set(c, "optimizer.params.lr", "5e-5");
        hf_set(c, "optimizer.params.betas", "[0.9, 0.999]");
        hf_set(c, "optimizer.params.eps", "1e-8");
        hf_set(c, "optimizer.params.weight_decay", "0.0");
    }
    if (!hf_json_gives(c, "scheduler.") && !c->src[deck_idx("scheduler.type")]) {
        hf_set(c, "scheduler.type", "linear");
        hf_set(c, "scheduler.params.warmup_num_steps", "0");
    }
    return 0;
}
