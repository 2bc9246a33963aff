/* test_sched.c — qf_sched_lr against tests/reference/fixtures/schedules.json: DeepSpeed's WarmupLR,
 * WarmupDecayLR and WarmupCosineLR formulas ported in tests/reference/make_goldens.py, for k = 0..24. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "deck/deck.h"
#include "train/sched.h"

static double num(json_t *o, const char *k, double dflt) {
    json_t *v = json_object_get(o, k);
    return v ? json_number_value(v) : dflt;
}

int main(void) {
    const char *src = getenv("SRC") ? getenv("SRC") : ".";
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/reference/fixtures/schedules.json", src);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        fprintf(stderr, "cannot read %s: %s\n", path, err.text);
        return 1;
    }
    json_t *scheds = json_object_get(root, "schedules");
    int fails = 0, checked = 0;
    size_t i;
    json_t *s;
    json_array_foreach(scheds, i, s) {
        qf_deck d;
        qf_deck_defaults(&d);
        const char *type = json_string_value(json_object_get(s, "type"));
        json_t *p = json_object_get(s, "params");
        d.lr = num(s, "optimizer_lr", 1e-3);
        d.sched = !strcmp(type, "WarmupLR")        ? QF_SCHED_WARMUP_LR
                  : !strcmp(type, "WarmupDecayLR") ? QF_SCHED_WARMUP_DECAY_LR
                                                   : QF_SCHED_WARMUP_COSINE_LR;
        d.warmup_min_lr = num(p, "warmup_min_lr", 0.0);
        d.warmup_max_lr = num(p, "warmup_max_lr", 0.001);
        d.warmup_num_steps = (int64_t)num(p, "warmup_num_steps", 1000);
        d.total_num_steps = (int64_t)num(p, "total_num_steps", 0);
        d.warmup_min_ratio = num(p, "warmup_min_ratio", 0.0);
        d.cos_min_ratio = num(p, "cos_min_ratio", 0.0001);
        json_t *wt = json_object_get(p, "warmup_type");
        d.warmup_type = wt && !strcmp(json_string_value(wt), "linear") ? QF_WARMUP_LINEAR : QF_WARMUP_LOG;
        json_t *lrs = json_object_get(s, "lr");
        double worst = 0;
        for (size_t k = 0; k < json_array_size(lrs); k++) {
            double want = json_number_value(json_array_get(lrs, k));
            double got = qf_sched_lr(&d, (int64_t)k, d.total_num_steps);
            double rel = fabs(got - want) / fmax(fabs(want), 1e-300);
            if (want == 0) rel = fabs(got);
            if (rel > worst) worst = rel;
            checked++;
            if (rel > 1e-12) {
                fprintf(stderr, "FAIL %s k=%zu: want %.17g got %.17g\n", json_string_value(json_object_get(s, "name")),
                        k, want, got);
                fails++;
            }
        }
        printf("%-28s %-15s max rel err %.2e\n", json_string_value(json_object_get(s, "name")), type, worst);
    }
    json_decref(root);
    /* "linear": transformers' get_linear_schedule_with_warmup, lr * (k < W ? k / W : max(0, (T - k) / (T - W))),
     * values worked by hand for W = 0 and W = 2 of T = 10 (no DeepSpeed clamp of W to 2) */
    static const struct { int64_t W; int64_t k; double want; } lin[] = {
        {0, 0, 1.0}, {0, 1, 0.9}, {0, 5, 0.5}, {0, 9, 0.1}, {0, 10, 0.0}, {0, 12, 0.0},
        {2, 0, 0.0}, {2, 1, 0.5}, {2, 2, 1.0}, {2, 6, 0.5}, {2, 10, 0.0}};
    for (size_t j = 0; j < sizeof lin / sizeof lin[0]; j++) {
        qf_deck d;
        qf_deck_defaults(&d);
        d.sched = QF_SCHED_LINEAR;
        d.lr = 1.0;
        d.warmup_num_steps = lin[j].W;
        d.total_num_steps = 0; /* the run's total */
        double got = qf_sched_lr(&d, lin[j].k, 10);
        checked++;
        if (fabs(got - lin[j].want) > 1e-15) {
            fprintf(stderr, "FAIL linear W=%lld k=%lld: want %g got %.17g\n", (long long)lin[j].W, (long long)lin[j].k,
                    lin[j].want, got);
            fails++;
        }
    }
    if (checked < 100) {
        fprintf(stderr, "FAIL: only %d values checked\n", checked);
        return 1;
    }
    printf("%s: %d lr values checked\n", fails ? "FAIL" : "PASS", checked);
    return fails != 0;
}
