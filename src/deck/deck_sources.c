/* deck_sources.c — the run header's account of a deck: where each given key came from (the deck, --set, the
 * DeepSpeed JSON of `deepspeed`), which JSON values the deck overrode, and every given key that has no effect
 * here, with the reason. A key never goes unmentioned: it acts (and is in the resolved deck), or it is listed. */
#include <stdio.h>
#include <string.h>
#include "deck.h"
#include "deck_keys.h"

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* Keys that act in general but not in this deck, because another key switches their feature off. */
static const char *sources_switched_off(const qf_deck *d, const qf_deck_key *k) {
    const char *p = k->path;
    if (starts(p, "fp16.") && strcmp(p, "fp16.enabled") != 0 && !d->fp16) return "fp16.enabled is false";
    if (starts(p, "fp8.") && strcmp(p, "fp8.enabled") != 0 && !d->fp8) return "fp8.enabled is false";
    if (strcmp(p, "fp8.amax_history_len") == 0 && d->fp8_recipe == QF_FP8R_ROWWISE)
        return "fp8.recipe is \"rowwise\": its per-row scales are current";
    if (strcmp(p, "fp8.save_inputs") == 0 && d->fp8_recipe == QF_FP8R_ROWWISE)
        return "fp8.recipe is \"rowwise\": tensorwise only";
    if (k->sched_mask && d->sched == QF_SCHED_NONE) return "scheduler.type is \"none\": the lr stays constant";
    if (starts(p, "zero_optimization.stage3_") && d->zero_stage < 3) return "stage 3 only";
    if (strcmp(p, "zero_optimization.offload_optimizer.pin_memory") == 0 && d->offload_optimizer == QF_OFFLOAD_NONE)
        return "offload_optimizer.device is \"none\"";
    if (strcmp(p, "zero_optimization.offload_param.pin_memory") == 0 && d->offload_param == QF_OFFLOAD_NONE)
        return "offload_param.device is \"none\"";
    if ((strcmp(p, "zero_optimization.overlap_comm") == 0 || strcmp(p, "zero_optimization.reduce_bucket_size") == 0) &&
        d->zero_stage < 2)
        return "stages 2-3 only; stages 0-1 all-reduce the whole gradient once per step";
    if (strcmp(p, "zero_optimization.allgather_bucket_size") == 0 && (d->zero_stage == 0 || d->zero_stage == 3))
        return "stages 1-2 only";
    if (starts(p, "tensorboard.") && !d->tensorboard) return "tensorboard.enabled is false";
    return NULL;
}

const char *qf_deck_key_moot(const qf_deck *d, int ki) {
    int n;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    if (ki < 0 || ki >= n) return NULL;
    if (k[ki].fate == QF_FATE_NO_EFFECT) return k[ki].why;
    if (k[ki].fate == QF_FATE_ALIAS) {
        int ti = qf_deck_keys_find(k[ki].alias);
        return ti >= 0 ? qf_deck_key_moot(d, ti) : NULL;
    }
    return sources_switched_off(d, &k[ki]);
}

/* One line "LABEL: key, key ("auto"), ..." of the keys whose origin matches; nothing when there are none. */
static void sources_line(const qf_deck *d, FILE *f, const char *label, int origin, int overridden) {
    int n, count = 0;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    for (int i = 0; i < n; i++) {
        int o = d->origin[i];
        if (!o || (o & QF_ORIGIN_MASK) != origin || (overridden && !(o & QF_ORIGIN_DS_OVERRIDDEN))) continue;
        fprintf(f, "%s%s%s", count++ ? ", " : label, k[i].path, (o & QF_ORIGIN_AUTO) ? " (\"auto\")" : "");
    }
    if (count) fputc('\n', f);
}

/* The keys of the optimizer, the schedule and the batch that nothing gave: the HF Trainer's defaults (origin
 * QF_ORIGIN_HF, decks with `deepspeed`) or the table's (origin 0). */
static const char *const k_run_keys[] = {"optimizer.type", "optimizer.params.lr", "optimizer.params.betas",
                                          "optimizer.params.eps", "optimizer.params.weight_decay", "scheduler.type",
                                          "scheduler.params.warmup_num_steps", "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps", NULL};

static int sources_defaulted(const qf_deck *d, const char *path, int hf) {
    int ki = qf_deck_keys_find(path), tb = qf_deck_keys_find("train_batch_size");
    if (d->origin[ki] != (hf ? QF_ORIGIN_HF : QF_ORIGIN_DEFAULT)) return 0;
    if (!strcmp(path, "scheduler.params.warmup_num_steps")) return hf; /* the table's 1000 shows under its type */
    if (!strcmp(path, "train_micro_batch_size_per_gpu") || !strcmp(path, "gradient_accumulation_steps"))
        return hf || d->origin[tb] == QF_ORIGIN_DEFAULT; /* else the batch rule derived it */
    return 1;
}

void qf_deck_print_defaults(const qf_deck *d, FILE *f) {
    for (int hf = 1; hf >= 0; hf--) {
        int count = 0;
        for (int i = 0; k_run_keys[i]; i++) {
            if (!sources_defaulted(d, k_run_keys[i], hf)) continue;
            if (!count++) {
                if (hf) fprintf(f, "HF Trainer defaults (no optimizer, scheduler or batch in the deck, --set or %s; "
                                   "docs/deck.md, \"From DeepSpeed\"): ", d->deepspeed_path);
                else fputs("defaults (not in the deck; docs/deck.md): ", f);
            } else {
                fputs(", ", f);
            }
            fprintf(f, "%s = ", k_run_keys[i]);
            qf_deck_print_value(d, qf_deck_keys_find(k_run_keys[i]), f);
        }
        if (count && hf && d->sched == QF_SCHED_LINEAR)
            fputs(" (linear decay of the lr to 0 at the run's last step)", f);
        if (count) fputc('\n', f);
    }
}

void qf_deck_print_sources(const qf_deck *d, FILE *f) {
    int n;
    char label[2 * QF_PATH_MAX + 64];
    const qf_deck_key *k = qf_deck_keys_table(&n);
    if (d->deepspeed[0]) {
        snprintf(label, sizeof label, "deck keys from the DeepSpeed config %s: ", d->deepspeed_path);
        sources_line(d, f, label, QF_ORIGIN_DS, 0);
    }
    sources_line(d, f, "deck keys from the deck: ", QF_ORIGIN_DECK, 0);
    sources_line(d, f, "deck keys from --set: ", QF_ORIGIN_SET, 0);
    if (d->deepspeed[0]) {
        snprintf(label, sizeof label, "the deck overrides %s for: ", d->deepspeed_path);
        sources_line(d, f, label, QF_ORIGIN_DECK, 1);
        snprintf(label, sizeof label, "--set overrides %s for: ", d->deepspeed_path);
        sources_line(d, f, label, QF_ORIGIN_SET, 1);
    }
    qf_deck_print_defaults(d, f);
    for (int i = 0; i < n; i++) {
        const char *why = (d->origin[i] & QF_ORIGIN_MASK) && (d->origin[i] & QF_ORIGIN_MASK) != QF_ORIGIN_HF
                              ? qf_deck_key_moot(d, i) : NULL;
        if (why) fprintf(f, "accepted, no effect here: %s (%s)\n", k[i].path, why);
    }
}
