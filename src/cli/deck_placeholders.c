/* deck_placeholders.c — see deck_placeholders.h. The defaults printed are the ones deck_hf_defaults.c applies to a
 * deck that reads the JSON, so that the translation and the JSON resolve to one deck (tests/unit/test_deck_ds.c). */
#include "deck_placeholders.h"
#include <string.h>
#include <unistd.h>
#include "dataset.h"

static int has(const config_setting_t *root, const char *name) { return config_setting_get_member(root, name) != NULL; }

static int is_auto(const config_setting_t *root, const char *name) {
    const config_setting_t *s = config_setting_get_member(root, name);
    return s && config_setting_type(s) == CONFIG_TYPE_STRING && !strcmp(config_setting_get_string(s), "auto");
}

void qf_deck_put_placeholders(const char *json, const config_setting_t *root, const qf_deck *d, FILE *f) {
    int opt = !has(root, "optimizer"), sched = !has(root, "scheduler");
    int micro = !has(root, "train_micro_batch_size_per_gpu") && (!has(root, "train_batch_size") ||
                                                                  is_auto(root, "train_batch_size"));
    (void)d;
    if (opt || sched || micro)
        fprintf(f, "# ---- not in %s: the HF Trainer's defaults, which a deck with deepspeed = \"%s\" gets as well\n"
                   "# (docs/deck.md, \"From DeepSpeed\"); set them to what your TrainingArguments say\n", json, json);
    if (opt)
        fputs("optimizer = { type = \"AdamW\"; params = { lr = 5e-5; betas = [0.9, 0.999]; eps = 1e-8; "
              "weight_decay = 0.0; }; };  # TrainingArguments: learning_rate, adam_beta1/2, adam_epsilon, "
              "weight_decay\n", f);
    if (sched)
        fputs("scheduler = { type = \"linear\"; params = { warmup_num_steps = 0; }; };  # lr_scheduler_type "
              "\"linear\": decays the lr to 0 at the run's last step; warmup_steps\n", f);
    if (micro) fputs("train_micro_batch_size_per_gpu = 8;  # per_device_train_batch_size\n", f);
    fputs("# ---- the run's length (not a DeepSpeed key): qwen-ft's default is 1 epoch, the HF Trainer's 3\n"
          "# epochs = 3;  # or: max_steps = 1000;  (one of the two)\n", f);
}

void qf_deck_put_data(const char *train, const char *valid, const qf_deck *d, FILE *f) {
    qf_dataset ds;
    qf_err e = {0};
    int T = d->seq_len;
    long long rows = -1;
    if (!train && !valid) {
        fputs("# data = { train = \"train.h5\"; valid = \"valid.h5\"; seq_len = 2048; };  # required to train "
              "(qwen-ft prepare makes them)\n", f);
        return;
    }
    if (train && qf_dataset_open(train, &ds, &e) == 0) {
        while (T > 16 && (ds.n_tokens + T - 1) / T < d->train_batch_size) T /= 2;
        rows = (ds.n_tokens + T - 1) / T;
        qf_dataset_close(&ds);
    }
    fputs("data = {", f);
    if (train) fputs(" train = ", f), qf_deck_print_string(train, f), fputc(';', f);
    if (valid) fputs(" valid = ", f), qf_deck_print_string(valid, f), fputc(';', f);
    fprintf(f, " seq_len = %d; };", T);
    if (T != d->seq_len)
        fprintf(f, "  # seq_len %d would pack %s into fewer rows than one batch of %lld; at %d: %lld rows", d->seq_len,
                train, (long long)d->train_batch_size, T, rows);
    else if (rows < 0 && train)
        fprintf(f, "  # %s: not readable now (%s)", train, e.msg);
    fputc('\n', f);
}

const char *qf_deck_path_for_out(const char *out, const char *p, char *buf, size_t n) {
    char cwd[4096];
    if (!out || !p || p[0] == '/' || !strchr(out, '/') || !getcwd(cwd, sizeof cwd)) return p;
    snprintf(buf, n, "%s/%s", cwd, p);
    return buf;
}
