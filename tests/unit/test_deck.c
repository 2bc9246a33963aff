/* test_deck.c — the input deck: defaults, parsing, @include, --set, "auto", the batch rule, printing, and the
 * error messages (exit code 2 naming file, line and key). Temporary decks go to /tmp/qf-test-deck-PID. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "deck/deck.h"
#include "deck/deck_keys.h"
#include "model_config.h"
#include "qf_test.h"

static char g_dir[256];

/* A relative path of a deck in g_dir (or a folder in it) as loaded: relative to the deck's directory
 * (src/deck/deck_paths.c), i.e. "G_DIR[/SUB]/rel"; rel itself when the deck has no directory. */
static int path_is(const char *got, const char *rel) {
    size_t n = strlen(g_dir), r = strlen(rel), gl = strlen(got);
    if (!strcmp(got, rel)) return 1;
    return strncmp(got, g_dir, n) == 0 && gl > r && got[gl - r - 1] == '/' && strcmp(got + gl - r, rel) == 0;
}

#define CHECK_NEAR(a, b) CHECK(fabs((double)(a) - (double)(b)) <= 1e-12 * fmax(1.0, fabs((double)(b))))

/* Writes text to g_dir/name (creating g_dir/sub if name has it) and returns the full path in a static-free buffer. */
static void write_deck(const char *name, const char *text, char *path, size_t n) {
    snprintf(path, n, "%s/%s", g_dir, name);
    qf_test_write_text(path, text);
}

static int load(const char *path, int nset, char **sets, int world, qf_deck *d, qf_err *e) {
    memset(e, 0, sizeof *e);
    return qf_deck_load(path, nset, sets, world, d, e);
}

/* Writes text to g_dir/name (path gets the full path) and loads it with nset --set strings on world ranks into d:
 * a check that it loads; label names the deck in the messages. */
static void load_ok(const char *label, const char *name, const char *text, int nset, char **sets, int world, qf_deck *d,
                    char *path, size_t n) {
    qf_err e;
    write_deck(name, text, path, n);
    CHECK(load(path, nset, sets, world, d, &e) == 0, "%s", label);
    if (e.code) fprintf(stderr, "%s: %s\n", label, e.msg);
}

/* Loads and expects exit code 2 with every needle (NULL-terminated) in the message. */
static void expect_fail(const char *label, const char *path, int nset, char **sets, int world, ...) {
    qf_deck d;
    qf_err e;
    int rc = load(path, nset, sets, world, &d, &e), ok = rc == QF_EXIT_INPUT && e.code == QF_EXIT_INPUT;
    va_list ap;
    va_start(ap, world);
    qf_test_expect_msg(label, 40, ok, rc, e.msg, ap);
    va_end(ap);
}

/* An error deck: line 1 names a model, then the given lines; returns its path. */
static void bad_deck(const char *name, const char *lines, char *path, size_t n) {
    char text[4096];
    snprintf(text, sizeof text, "model = { preset = \"qwen2.5-0.5b\"; };\n%s", lines);
    write_deck(name, text, path, n);
}

/* ------------------------------------------------------------------------------------------ tests */

static void test_table(void) {
    int n;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    qf_deck d;
    CHECK(n >= 70);
    for (int i = 0; i < n; i++) {
        memset(&d, 0, sizeof d);
        CHECK(qf_deck_keys_apply_text(&k[i], &d, k[i].def) == 0);
        if (k[i].autov) CHECK(qf_deck_keys_apply_text(&k[i], &d, k[i].autov) == 0);
        CHECK(k[i].help && k[i].ds && qf_deck_keys_find(k[i].path) == i);
    }
    CHECK(qf_deck_keys_is_group("zero_optimization.offload_optimizer"));
    CHECK(!qf_deck_keys_is_group("zero_optimization.stage"));
    CHECK(strcmp(qf_deck_keys_suggest("zero_optimization.stag"), "zero_optimization.stage") == 0);
    CHECK(strcmp(qf_deck_keys_suggest("step_per_print"), "steps_per_print") == 0);
    CHECK(qf_deck_keys_suggest("completely_unrelated_thing") == NULL);
}

static void test_defaults(void) {
    qf_deck d;
    qf_deck_defaults(&d);
    CHECK(d.zero_stage == 0 && d.reduce_bucket_size == 500000000 && d.allgather_bucket_size == 500000000);
    CHECK(d.stage3_prefetch_bucket_size == 50000000 && d.stage3_param_persistence_threshold == 100000);
    CHECK(d.stage3_max_live_parameters == 1000000000 && d.stage3_max_reuse_distance == 1000000000);
    CHECK(!d.overlap_comm && d.contiguous_gradients && d.reduce_scatter);
    CHECK(d.offload_optimizer == QF_OFFLOAD_NONE && d.offload_param == QF_OFFLOAD_NONE);
    CHECK(d.fp16_initial_scale_power == 16 && d.fp16_loss_scale_window == 1000 && d.fp16_hysteresis == 2);
    CHECK(d.fp16_min_loss_scale == 1 && d.fp16_loss_scale == 0 && !d.fp16_consecutive_hysteresis);
    CHECK(!d.bf16 && !d.fp16 && d.gradient_clipping == 0 && d.steps_per_print == 10);
    CHECK(d.sched == QF_SCHED_NONE && d.warmup_min_lr == 0 && d.warmup_max_lr == 0.001);
    CHECK(d.warmup_num_steps == 1000 && d.warmup_type == QF_WARMUP_LOG && d.total_num_steps == 0);
    CHECK(d.warmup_min_ratio == 0 && d.cos_min_ratio == 0.0001);
    CHECK(strcmp(d.optimizer_type, "AdamW") == 0 && d.lr == 1e-3 && d.beta1 == 0.9 && d.beta2 == 0.999);
    CHECK(d.eps == 1e-8 && d.weight_decay == 0.01 && d.adam_w_mode == 1);
    CHECK(d.seq_len == 2048 && d.shuffle == 1 && d.data_seed == 42 && d.seed == 42 && d.model_init_seed == 1234);
    CHECK(d.train_batch_size == 1 && d.train_micro_batch_size_per_gpu == 1 && d.gradient_accumulation_steps == 1);
    CHECK(d.max_steps == 0 && d.epochs == 1 && d.activation_checkpointing == QF_ACKPT_NONE);
    CHECK(strcmp(d.checkpoint_dir, "ckpt") == 0 && d.checkpoint_keep == 3 && d.checkpoint_every_steps == 0);
    CHECK(strcmp(d.log_dir, "logs") == 0 && !d.tensorboard && !d.wall_clock_breakdown);
    CHECK(d.on_nonfinite == QF_NONFINITE_STOP && d.max_hours == 0 && d.ranks_per_node == 0);
    CHECK(d.model_from[0] == 0 && d.model_preset[0] == 0 && d.model_tie_word_embeddings == -1);
    CHECK(d.model_attention_bias == -1 && d.model_qk_norm == -1 && d.model_hidden_size == 0);
}

static const char *k_full =
    "# the SPEC sketch, and more\n"
    "model = { from = \"qwen14b.h5\"; init_seed = 7; };\n"
    "activation_checkpointing = true;\n"
    "data = { train = \"train.h5\"; valid = \"valid.h5\"; seq_len = 512; shuffle = false; seed = 43; };\n"
    "train_batch_size = 32; train_micro_batch_size_per_gpu = 2; gradient_accumulation_steps = 4;\n"
    "max_steps = 10000;\n"
    "gradient_clipping = 1.0;\n"
    "seed = 5;\n"
    "optimizer = { type = \"adamw\"; params = { lr = 2e-5; betas = [0.9, 0.95]; eps = 1e-8; weight_decay = 0.1; }; };\n"
    "scheduler = { type = \"WarmupDecayLR\"; params = { warmup_min_lr = 1e-6; warmup_max_lr = 2e-5;\n"
    "  warmup_num_steps = 500; total_num_steps = 10000; warmup_type = \"linear\"; }; };\n"
    "bf16 = { enabled = true; };\n"
    "fp16 = { enabled = false; loss_scale_window = 500; hysteresis = 3; initial_scale_power = 12; };\n"
    "zero_optimization = { stage = 3; offload_optimizer = { device = \"cpu\"; pin_memory = true; };\n"
    "  offload_param = { device = \"cpu\"; }; overlap_comm = false; contiguous_gradients = true;\n"
    "  reduce_bucket_size = 1e6; stage3_prefetch_bucket_size = 0.9e6; stage3_param_persistence_threshold = 1e4;\n"
    "  stage3_max_live_parameters = 3000000000; stage3_max_reuse_distance = 5000000000L; };\n"
    "checkpoint = { dir = \"ck\"; every_steps = 500; keep = 2; };\n"
    "eval = { every_steps = 100; early_stopping_patience = 3; early_stopping_threshold = 0.01; max_batches = 8; };\n"
    "log = { dir = \"lg\"; steps_per_print = 50; wall_clock_breakdown = true; tensorboard = true; };\n"
    "on_nonfinite = \"skip\"; max_hours = 11.5; gpu_memory_limit_gb = 20; peak_tflops = 165;\n"
    "topology = { ranks_per_node = 2; };\n";

static void check_full(const qf_deck *d) {
    CHECK(path_is(d->model_from, "qwen14b.h5") && d->model_init_seed == 7);
    CHECK(d->activation_checkpointing == QF_ACKPT_FULL);
    CHECK(path_is(d->data_train, "train.h5") && path_is(d->data_valid, "valid.h5"));
    CHECK(d->seq_len == 512 && !d->shuffle && d->data_seed == 43 && d->seed == 5);
    CHECK(d->train_batch_size == 32 && d->train_micro_batch_size_per_gpu == 2 && d->gradient_accumulation_steps == 4);
    CHECK(d->max_steps == 10000 && d->gradient_clipping == 1.0);
    CHECK(strcmp(d->optimizer_type, "AdamW") == 0 && d->lr == 2e-5 && d->beta2 == 0.95 && d->weight_decay == 0.1);
    CHECK(d->sched == QF_SCHED_WARMUP_DECAY_LR && d->warmup_min_lr == 1e-6 && d->warmup_max_lr == 2e-5);
    CHECK(d->warmup_num_steps == 500 && d->total_num_steps == 10000 && d->warmup_type == QF_WARMUP_LINEAR);
    CHECK(d->bf16 && !d->fp16 && d->fp16_loss_scale_window == 500 && d->fp16_hysteresis == 3);
    CHECK(d->fp16_initial_scale_power == 12);
    CHECK(d->zero_stage == 3 && d->offload_optimizer == QF_OFFLOAD_CPU && d->offload_optimizer_pin_memory);
    CHECK(d->offload_param == QF_OFFLOAD_CPU && !d->offload_param_pin_memory && !d->overlap_comm);
    CHECK(d->reduce_bucket_size == 1000000 && d->stage3_prefetch_bucket_size == 900000);
    CHECK(d->stage3_param_persistence_threshold == 10000 && d->stage3_max_live_parameters == 3000000000LL);
    CHECK(d->stage3_max_reuse_distance == 5000000000LL);
    CHECK(path_is(d->checkpoint_dir, "ck") && d->checkpoint_every_steps == 500 && d->checkpoint_keep == 2);
    CHECK(d->eval_every_steps == 100 && d->early_stopping_patience == 3 && d->eval_max_batches == 8);
    CHECK(d->early_stopping_threshold == 0.01);
    CHECK(path_is(d->log_dir, "lg") && d->steps_per_print == 50 && d->wall_clock_breakdown && d->tensorboard);
    CHECK(d->on_nonfinite == QF_NONFINITE_SKIP && d->max_hours == 11.5 && d->gpu_memory_limit_gb == 20);
    CHECK(d->peak_tflops == 165 && d->ranks_per_node == 2);
}

static void test_full_deck(void) {
    char path[512];
    qf_deck d;
    load_ok("full deck", "full.cfg", k_full, 0, NULL, 4, &d, path, sizeof path);
    CHECK(strcmp(d.path, path) == 0);
    check_full(&d);
}

/* Every key holds the same value in a and b. */
static int same_deck(const qf_deck *a, const qf_deck *b) {
    int n, same = 1;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    for (int i = 0; i < n; i++) {
        double x1, x2, y1, y2;
        int eq;
        if (k[i].fate == QF_FATE_NO_EFFECT) continue; /* not in the printed deck: the header lists them */
        switch (k[i].type) {
        case QF_KT_STRING: eq = strcmp(qf_deck_keys_get_string(&k[i], a), qf_deck_keys_get_string(&k[i], b)) == 0; break;
        case QF_KT_FLOAT: eq = qf_deck_keys_get_float(&k[i], a) == qf_deck_keys_get_float(&k[i], b); break;
        case QF_KT_FLOAT_PAIR:
            qf_deck_keys_get_pair(&k[i], a, &x1, &y1);
            qf_deck_keys_get_pair(&k[i], b, &x2, &y2);
            eq = x1 == x2 && y1 == y2;
            break;
        default: eq = qf_deck_keys_get_int(&k[i], a) == qf_deck_keys_get_int(&k[i], b);
        }
        if (!eq) fprintf(stderr, "round trip differs at %s\n", k[i].path);
        same &= eq;
    }
    return same;
}

static void round_trip(const char *label, const qf_deck *d, int world) {
    char path[512];
    qf_deck r;
    qf_err e;
    snprintf(path, sizeof path, "%s/%s", g_dir, label);
    FILE *f = fopen(path, "w");
    qf_deck_print(d, f);
    fclose(f);
    CHECK(load(path, 0, NULL, world, &r, &e) == 0);
    if (e.code) fprintf(stderr, "%s: %s\n", label, e.msg);
    CHECK(same_deck(d, &r));
}

static void test_print(void) {
    char path[512];
    qf_deck d;
    qf_err e;
    write_deck("full2.cfg", k_full, path, sizeof path);
    CHECK(load(path, 0, NULL, 4, &d, &e) == 0);
    round_trip("printed-full.cfg", &d, 4);
    load_ok(
        "cos", "cos.cfg",
        "model = { preset = \"qwen3-0.6b\"; num_hidden_layers = 2; };\n"
        "scheduler = { type = \"WarmupCosineLR\"; params = { total_num_steps = \"auto\"; cos_min_ratio = 0.1; }; };\n"
        "zero_optimization = { reduce_bucket_size = \"auto\"; stage3_prefetch_bucket_size = 1e12; };\n"
        "activation_checkpointing = \"selective\";\n",
        0, NULL, 2, &d, path, sizeof path);
    round_trip("printed-cos.cfg", &d, 2);
}

static char *slurp(const char *path);

static void test_markdown(void) {
    char path[512], *text;
    int n;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    snprintf(path, sizeof path, "%s/keys.md", g_dir);
    FILE *f = fopen(path, "w");
    qf_deck_print_keys_markdown(f);
    fclose(f);
    CHECK((text = slurp(path)) != NULL);
    if (!text) return;
    for (int i = 0; i < n; i++) {
        char cell[256];
        snprintf(cell, sizeof cell, "| `%s` |", k[i].path);
        CHECK(strstr(text, cell) != NULL);
    }
    free(text);
}

/* Reads a whole file (NULL if it cannot). */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *text = calloc((size_t)len + 1, 1);
    if (fread(text, 1, (size_t)len, f) != (size_t)len) text[0] = 0;
    fclose(f);
    return text;
}

/* docs/deck.md must contain the key table exactly as the code generates it. */
static void test_docs_table(void) {
    char doc[1024], path[512];
    const char *src = getenv("SRC");
    snprintf(doc, sizeof doc, "%s/docs/deck.md", src && *src ? src : ".");
    char *text = slurp(doc);
    if (!text) {
        printf("test_deck: %s not found, docs table check skipped (set SRC)\n", doc);
        return;
    }
    snprintf(path, sizeof path, "%s/keys-now.md", g_dir);
    FILE *f = fopen(path, "w");
    qf_deck_print_keys_markdown(f);
    fclose(f);
    char *table = slurp(path);
    CHECK(table && strstr(text, table) != NULL);
    if (table && !strstr(text, table))
        fprintf(stderr, "docs/deck.md: the key table differs from qf_deck_print_keys_markdown(); regenerate it\n");
    free(table);
    free(text);
}

/* The ds_config.json translation of docs/deck.md loads. */
static void test_ds_translation(void) {
    char path[512];
    char s1[] = "train_micro_batch_size_per_gpu=4", s2[] = "optimizer.params.lr=2e-5", s3[] = "bf16.enabled=true";
    char *sets[] = {s1, s2, s3};
    qf_deck d;
    load_ok("ds translation", "ds.cfg",
            "model = { from = \"qwen2.5-7b.h5\"; };\n"
            "data = { train = \"train.h5\"; valid = \"valid.h5\"; seq_len = 4096; };\n"
            "epochs = 3;\n"
            "bf16 = { enabled = \"auto\"; };\n"
            "optimizer = { type = \"AdamW\";\n"
            "  params = { lr = \"auto\"; betas = \"auto\"; eps = \"auto\"; weight_decay = \"auto\"; }; };\n"
            "scheduler = { type = \"WarmupDecayLR\";\n"
            "  params = { warmup_min_lr = \"auto\"; warmup_max_lr = \"auto\"; warmup_num_steps = \"auto\"; "
            "total_num_steps = \"auto\"; }; };\n"
            "zero_optimization = {\n  stage = 3;\n"
            "  offload_optimizer = { device = \"cpu\"; pin_memory = true; };\n"
            "  offload_param = { device = \"cpu\"; pin_memory = true; };\n"
            "  overlap_comm = true;\n  contiguous_gradients = true;\n"
            "  reduce_bucket_size = \"auto\";\n  stage3_prefetch_bucket_size = \"auto\";\n"
            "  stage3_param_persistence_threshold = \"auto\";\n"
            "  stage3_max_live_parameters = 1e9;\n  stage3_max_reuse_distance = 1e9;\n};\n"
            "gradient_accumulation_steps = \"auto\";\ngradient_clipping = \"auto\";\n"
            "train_batch_size = \"auto\";\ntrain_micro_batch_size_per_gpu = \"auto\";\n"
            "log = { steps_per_print = 2000; wall_clock_breakdown = false; };\n",
            3, sets, 8, &d, path, sizeof path);
    CHECK(d.train_batch_size == 32 && d.train_micro_batch_size_per_gpu == 4 && d.gradient_accumulation_steps == 1);
    CHECK(d.lr == 2e-5 && d.warmup_max_lr == 2e-5 && d.bf16 && d.zero_stage == 3 && d.total_num_steps == -1);
    CHECK(d.steps_per_print == 2000 && d.epochs == 3 && d.stage3_max_live_parameters == 1000000000);
    CHECK(qf_deck_keys_find("zero_optimization.sub_group_size") >= 0); /* accepted; no effect (test_deck_ds.c) */
}

static void test_include(void) {
    char path[512], sub[300];
    qf_deck d;
    snprintf(sub, sizeof sub, "%s/sub", g_dir);
    mkdir(sub, 0755);
    write_deck("sub/base.cfg", "zero_optimization = { stage = 2; };\noptimizer = { params = { lr = 3e-4; }; };\n",
               path, sizeof path);
    load_ok("include", "sub/main.cfg",
            "model = { preset = \"qwen2.5-0.5b\"; };\n@include \"base.cfg\"\nmax_steps = 7;\n", 0, NULL, 1, &d, path,
            sizeof path);
    CHECK(d.zero_stage == 2 && d.lr == 3e-4 && d.max_steps == 7);
    /* an error in the included file names the included file and its line */
    write_deck("sub/base2.cfg", "log = { dir = \"x\";\n  steps_per_prnt = 5; };\n", path, sizeof path);
    write_deck("sub/main2.cfg", "model = { preset = \"qwen2.5-0.5b\"; };\n@include \"base2.cfg\"\n", path, sizeof path);
    expect_fail("include error", path, 0, NULL, 1, "sub/base2.cfg:2", "log.steps_per_prnt", "log.steps_per_print",
                NULL);
    write_deck("sub/main3.cfg", "@include \"nothere.cfg\"\n", path, sizeof path);
    expect_fail("missing include", path, 0, NULL, 1, "main3.cfg:1", "include", NULL);
}

static void test_set(void) {
    char path[512];
    char s1[] = "zero_optimization.stage=2", s2[] = "optimizer.params.lr = 3e-5", s3[] = "model.preset=qwen2.5-1.5b";
    char s4[] = "optimizer.params.betas=[0.8, 0.9]", s5[] = "data.train=/data/x 1.h5", s6[] = "bf16.enabled=true";
    char s7[] = "scheduler.params.total_num_steps=auto", s8[] = "scheduler.type=\"WarmupCosineLR\"";
    char s9[] = "zero_optimization.stage3_max_live_parameters=6000000000", s10[] = "data.valid=2024";
    char *sets[] = {s1, s2, s3, s4, s5, s6, s7, s8, s9, s10};
    qf_deck d;
    qf_err e;
    load_ok("set", "set.cfg", "model = { preset = \"qwen2.5-0.5b\"; };\nzero_optimization = { stage = 3; };\n", 10,
            sets, 1, &d, path, sizeof path);
    CHECK(d.zero_stage == 2 && d.lr == 3e-5 && strcmp(d.model_preset, "qwen2.5-1.5b") == 0);
    CHECK(d.beta1 == 0.8 && d.beta2 == 0.9 && strcmp(d.data_train, "/data/x 1.h5") == 0 && d.bf16 == 1);
    CHECK(d.sched == QF_SCHED_WARMUP_COSINE_LR && d.total_num_steps == -1);
    CHECK(d.stage3_max_live_parameters == 6000000000LL && strcmp(d.data_valid, "2024") == 0);
    /* --set alone, without a deck file */
    char t1[] = "train_micro_batch_size_per_gpu=3";
    char *only[] = {t1};
    CHECK(load(NULL, 1, only, 2, &d, &e) == 0);
    CHECK(d.train_micro_batch_size_per_gpu == 3 && d.train_batch_size == 6 && d.gradient_accumulation_steps == 1);
}

static void test_numbers(void) {
    char path[512];
    qf_deck d;
    load_ok("numbers", "num.cfg",
            "zero_optimization = { reduce_bucket_size = 2e8; allgather_bucket_size = 5000000000; };\n"
            "gradient_clipping = 1; optimizer = { params = { lr = 0; }; };\n"
            "eval = { max_batches = 0x10; };\n"
            "data = { seq_len = 5.12e2; seed = 1; }; seed = 5;\n"
            "model = { preset = \"qwen2.5-0.5b\"; init_seed = 7000000000; };\n",
            0, NULL, 1, &d, path, sizeof path);
    CHECK(d.reduce_bucket_size == 200000000 && d.allgather_bucket_size == 5000000000LL && d.seq_len == 512);
    CHECK(d.gradient_clipping == 1.0 && d.lr == 0 && d.eval_max_batches == 16);
    CHECK(d.data_seed == 1 && d.seed == 5 && d.model_init_seed == 7000000000ULL);
}

static void test_auto(void) {
    char path[512];
    qf_deck d;
    qf_err e;
    load_ok("auto", "auto.cfg",
            "model = { preset = \"qwen2.5-0.5b\"; };\n"
            "train_batch_size = \"auto\"; train_micro_batch_size_per_gpu = 4; gradient_accumulation_steps = \"auto\";\n"
            "gradient_clipping = \"auto\";\n"
            "optimizer = { type = \"AdamW\"; params = { lr = \"auto\"; betas = \"auto\"; eps = \"auto\"; "
            "weight_decay = \"auto\"; }; };\n"
            "scheduler = { type = \"WarmupDecayLR\"; params = { warmup_min_lr = \"auto\"; warmup_max_lr = \"auto\";\n"
            "  warmup_num_steps = \"auto\"; total_num_steps = \"auto\"; }; };\n"
            "bf16 = { enabled = \"auto\"; }; fp16 = { enabled = \"auto\"; };\n"
            "zero_optimization = { stage = 3; reduce_bucket_size = \"auto\"; stage3_prefetch_bucket_size = \"auto\";\n"
            "  stage3_param_persistence_threshold = \"auto\"; };\n",
            0, NULL, 2, &d, path, sizeof path);
    CHECK(d.train_micro_batch_size_per_gpu == 4 && d.gradient_accumulation_steps == 1 && d.train_batch_size == 8);
    CHECK(d.gradient_clipping == 1.0 && d.lr == 5e-5 && d.beta1 == 0.9 && d.beta2 == 0.999 && d.eps == 1e-8);
    CHECK(d.weight_decay == 0.0 && d.warmup_min_lr == 0 && d.warmup_max_lr == 5e-5 && d.warmup_num_steps == 0);
    CHECK(d.total_num_steps == -1 && !d.bf16 && !d.fp16);
    CHECK(d.reduce_bucket_size == -1 && d.stage3_prefetch_bucket_size == -1 && d.stage3_param_persistence_threshold == -1);
    CHECK(d.overlap_comm == 1); /* DeepSpeed: overlap_comm defaults to true at stage 3 */
    /* warmup_max_lr "auto" follows the deck's lr */
    write_deck("auto2.cfg",
               "model = { preset = \"qwen2.5-0.5b\"; };\n"
               "scheduler = { type = \"WarmupLR\"; params = { warmup_max_lr = \"auto\"; }; };\n"
               "optimizer = { params = { lr = 2e-5; }; };\n",
               path, sizeof path);
    CHECK(load(path, 0, NULL, 1, &d, &e) == 0 && d.warmup_max_lr == 2e-5);
}

static void batch_case(const char *lines, int world, int64_t tb, int m, int a) {
    char path[512], text[1024];
    qf_deck d;
    qf_err e;
    snprintf(text, sizeof text, "model = { preset = \"qwen2.5-0.5b\"; };\n%s\n", lines);
    write_deck("batch.cfg", text, path, sizeof path);
    CHECK(load(path, 0, NULL, world, &d, &e) == 0);
    if (e.code) fprintf(stderr, "batch %s: %s\n", lines, e.msg);
    CHECK(d.train_batch_size == tb && d.train_micro_batch_size_per_gpu == m && d.gradient_accumulation_steps == a);
}

static void test_batch(void) {
    char path[512];
    batch_case("train_batch_size = 32; train_micro_batch_size_per_gpu = 2;", 4, 32, 2, 4);
    batch_case("train_batch_size = 32; gradient_accumulation_steps = 2;", 4, 32, 4, 2);
    batch_case("train_micro_batch_size_per_gpu = 2; gradient_accumulation_steps = 3;", 4, 24, 2, 3);
    batch_case("train_batch_size = 32;", 4, 32, 8, 1);
    batch_case("train_micro_batch_size_per_gpu = 3;", 4, 12, 3, 1);
    batch_case("gradient_accumulation_steps = 5;", 2, 10, 1, 5);
    batch_case("train_batch_size = 32; train_micro_batch_size_per_gpu = 2; gradient_accumulation_steps = 4;", 4, 32,
               2, 4);
    batch_case("", 8, 8, 1, 1);
    bad_deck("batch-bad.cfg",
             "train_batch_size = 32;\ntrain_micro_batch_size_per_gpu = 2;\ngradient_accumulation_steps = 3;\n", path,
             sizeof path);
    expect_fail("inconsistent batch", path, 0, NULL, 4, "batch-bad.cfg:2", "train_batch_size", "32", "2", "3",
                "4 data-parallel ranks", NULL);
    bad_deck("batch-div.cfg", "train_batch_size = 30;\ntrain_micro_batch_size_per_gpu = 4;\n", path, sizeof path);
    expect_fail("indivisible batch", path, 0, NULL, 4, "batch-div.cfg:2", "train_batch_size", "30", NULL);
    bad_deck("batch-div2.cfg", "train_batch_size = 6;\n", path, sizeof path);
    expect_fail("indivisible batch (only tb)", path, 0, NULL, 4, "batch-div2.cfg:2", "train_batch_size", NULL);
}

static void test_model(void) {
    char path[512];
    qf_deck d;
    qf_err e;
    qf_model_config m;
    char msg[256];
    load_ok("dims", "dims.cfg",
            "model = { arch = \"qwen3\"; vocab_size = 1000; hidden_size = 64; intermediate_size = 128;\n"
            "  num_hidden_layers = 2; num_attention_heads = 4; num_key_value_heads = 2; head_dim = 16;\n"
            "  tie_word_embeddings = true; };\n",
            0, NULL, 1, &d, path, sizeof path);
    CHECK(qf_deck_model_config(&d, &m, msg, sizeof msg) == 0);
    CHECK(strcmp(m.arch, "qwen3") == 0 && m.qk_norm == 1 && m.attention_bias == 0 && m.head_dim == 16);
    CHECK(m.num_kv_heads == 2 && m.tie_word_embeddings == 1 && m.vocab_size == 1000);
    write_deck("preset-over.cfg", "model = { preset = \"qwen2.5-7b\"; num_hidden_layers = 2; };\n", path, sizeof path);
    CHECK(load(path, 0, NULL, 1, &d, &e) == 0);
    CHECK(qf_deck_model_config(&d, &m, msg, sizeof msg) == 0);
    CHECK(m.num_layers == 2 && m.hidden_size == 3584 && m.num_kv_heads == 4 && m.head_dim == 128);
    write_deck("adam.cfg",
               "model = { preset = \"qwen2.5-0.5b\"; };\n"
               "optimizer = { type = \"Adam\"; params = { adam_w_mode = false; }; };\n",
               path, sizeof path);
    CHECK(load(path, 0, NULL, 1, &d, &e) == 0 && d.adam_w_mode == 0 && strcmp(d.optimizer_type, "Adam") == 0);
}

static void test_errors(void) {
    char path[512];
    qf_deck d;
    char set_bad[] = "zero_optimization.stag=2", set_type[] = "zero_optimization.stage=three";
    char set_ratio[] = "zero_optimization.offload_optimizer.ratio=0.5", set_model[] = "model.preset=qwen2.5-0.5b";
    char *sets1[] = {set_bad}, *sets2[] = {set_type}, *sets3[] = {set_model, set_ratio};

    bad_deck("e-unknown.cfg", "train_batch_size = 4;\nzero_optimization = { stag = 2; };\n", path, sizeof path);
    expect_fail("unknown key", path, 0, NULL, 1, "e-unknown.cfg:3", "unknown key 'zero_optimization.stag'",
                "did you mean 'zero_optimization.stage'", NULL);
    bad_deck("e-type.cfg", "bf16 = {\n  enabled = \"yes\"; };\n", path, sizeof path);
    expect_fail("wrong type", path, 0, NULL, 1, "e-type.cfg:3", "key 'bf16.enabled'", "expected true or false",
                "\"yes\"", NULL);
    bad_deck("e-frac.cfg", "gradient_accumulation_steps = 2.5;\n", path, sizeof path);
    expect_fail("2.5 for an int", path, 0, NULL, 1, "e-frac.cfg:2", "key 'gradient_accumulation_steps'",
                "expected an integer", "2.5", NULL);
    bad_deck("e-enum.cfg", "zero_optimization = { stage = 2;\n  offload_optimizer = { device = \"nvme\"; }; };\n",
             path, sizeof path);
    expect_fail("bad enum", path, 0, NULL, 1, "e-enum.cfg:3", "key 'zero_optimization.offload_optimizer.device'",
                "\"none\", \"cpu\"", "\"nvme\"", NULL);
    bad_deck("e-prec.cfg", "bf16 = { enabled = true; };\nfp16 = { enabled = true; };\n", path, sizeof path);
    expect_fail("bf16 + fp16", path, 0, NULL, 1, "e-prec.cfg:3", "key 'fp16.enabled'", "bf16", NULL);
    bad_deck("e-stage.cfg", "zero_optimization = { stage = 4; };\n", path, sizeof path);
    expect_fail("stage 4", path, 0, NULL, 1, "e-stage.cfg:2", "key 'zero_optimization.stage'", "0..3", "got 4", NULL);
    bad_deck("e-syntax.cfg", "gradient_clipping = 1.0;\nmax_steps = = 10;\n", path, sizeof path);
    expect_fail("syntax error", path, 0, NULL, 1, "e-syntax.cfg:3", "syntax error", NULL);
    snprintf(path, sizeof path, "%s/does-not-exist.cfg", g_dir);
    expect_fail("missing file", path, 0, NULL, 1, "does-not-exist.cfg", NULL);
    bad_deck("e-set.cfg", "max_steps = 10;\n", path, sizeof path);
    expect_fail("unknown --set key", path, 1, sets1, 1, "--set", "'zero_optimization.stag'",
                "did you mean 'zero_optimization.stage'", NULL);
    expect_fail("--set wrong type", path, 1, sets2, 1, "--set 'zero_optimization.stage=three'",
                "key 'zero_optimization.stage'", "\"three\"", NULL);
    bad_deck("e-decay.cfg", "optimizer = { params = { lr = 1e-4; }; };\nscheduler = { type = \"WarmupDecayLR\";\n"
             "  params = { warmup_num_steps = 10; }; };\n", path, sizeof path);
    expect_fail("WarmupDecayLR without total_num_steps", path, 0, NULL, 1, "e-decay.cfg:3",
                "key 'scheduler.params.total_num_steps'", "WarmupDecayLR", NULL);
    bad_deck("e-sched.cfg", "scheduler = { type = \"WarmupDecay\"; };\n", path, sizeof path);
    expect_fail("unknown scheduler", path, 0, NULL, 1, "e-sched.cfg:2", "key 'scheduler.type'",
                "did you mean \"WarmupDecayLR\"", NULL);
    bad_deck("e-cos.cfg", "scheduler = { type = \"WarmupCosineLR\"; params = { total_num_steps = 100;\n"
             "  warmup_max_lr = 1e-3; }; };\n", path, sizeof path);
    expect_fail("WarmupCosineLR with warmup_max_lr", path, 0, NULL, 1, "e-cos.cfg:3",
                "key 'scheduler.params.warmup_max_lr'", "WarmupCosineLR", NULL);
    bad_deck("e-steps.cfg", "max_steps = 100;\nepochs = 2;\n", path, sizeof path);
    expect_fail("max_steps and epochs", path, 0, NULL, 1, "e-steps.cfg:3", "key 'epochs'", "max_steps", NULL);
    bad_deck("e-opt.cfg", "optimizer = { type = \"SGD\"; };\n", path, sizeof path);
    expect_fail("optimizer type", path, 0, NULL, 1, "e-opt.cfg:2", "key 'optimizer.type'", "\"AdamW\"", NULL);
    bad_deck("e-seq.cfg", "data = { seq_len = 1; };\n", path, sizeof path);
    expect_fail("seq_len 1", path, 0, NULL, 1, "e-seq.cfg:2", "key 'data.seq_len'", ">= 2", NULL);
    write_deck("e-nomodel.cfg", "max_steps = 1;\n", path, sizeof path);
    expect_fail("no model", path, 0, NULL, 1, "e-nomodel.cfg", "model.from", "model.preset", NULL);
    write_deck("e-preset.cfg", "max_steps = 1;\nmodel = { preset = \"qwen2.5-7B\"; };\n", path, sizeof path);
    expect_fail("unknown preset", path, 0, NULL, 1, "e-preset.cfg:2", "key 'model.preset'", "\"qwen2.5-7b\"", NULL);
    bad_deck("e-ds.cfg", "steps_per_print = 10;\nlog = { steps_per_print = 5; };\n", path, sizeof path);
    expect_fail("DeepSpeed and qwen-ft name of one key", path, 0, NULL, 1, "e-ds.cfg:3", "'log.steps_per_print'",
                "given twice", "'steps_per_print' at", NULL);
    bad_deck("e-pipe.cfg", "pipeline = { stages = 2; };\n", path, sizeof path);
    expect_fail("DeepSpeed feature qwen-ft lacks", path, 0, NULL, 1, "e-pipe.cfg:2", "'pipeline'",
                "pipeline parallelism", "remove the key", NULL);
    bad_deck("e-sched.cfg", "scheduler = { params = { warmup_num_steps = 10; }; };\n", path, sizeof path);
    expect_fail("scheduler params without a type", path, 0, NULL, 1, "e-sched.cfg:2",
                "'scheduler.params.warmup_num_steps'", "without scheduler.type", NULL);
    bad_deck("e-offp.cfg", "zero_optimization = { stage = 2; offload_param = { device = \"cpu\"; }; };\n", path,
             sizeof path);
    expect_fail("offload_param below stage 3", path, 0, NULL, 1, "e-offp.cfg:2",
                "key 'zero_optimization.offload_param.device'",
                "parameter offload needs zero_optimization.stage 3, got stage 2", NULL);
    bad_deck("e-ratio.cfg", "zero_optimization = { stage = 2;\n  offload_optimizer = { ratio = 0.4; }; };\n", path,
             sizeof path);
    expect_fail("offload_optimizer.ratio without the offload", path, 0, NULL, 1, "e-ratio.cfg:3",
                "key 'zero_optimization.offload_optimizer.ratio'",
                "0.4 (the host's share of the optimizer) needs zero_optimization.offload_optimizer.device = \"cpu\", "
                "got \"none\"", NULL);
    expect_fail("offload_optimizer.ratio without the offload (--set)", NULL, 2, sets3, 1,
                "--set 'zero_optimization.offload_optimizer.ratio=0.5': "
                "key 'zero_optimization.offload_optimizer.ratio'", "device = \"cpu\"", NULL);
    load_ok("ratio with the offload", "ratio.cfg",
            "model = { preset = \"qwen2.5-0.5b\"; };\n"
            "zero_optimization = { stage = 2; offload_optimizer = { device = \"cpu\"; ratio = 0.4; }; };\n",
            0, NULL, 1, &d, path, sizeof path);
    CHECK(d.offload_optimizer_ratio == 0.4);
    bad_deck("e-group.cfg", "bf16 = true;\n", path, sizeof path);
    expect_fail("scalar for a group", path, 0, NULL, 1, "e-group.cfg:2", "key 'bf16'", "group", NULL);
    bad_deck("e-adamw.cfg", "optimizer = { type = \"AdamW\"; params = { adam_w_mode = false; }; };\n", path,
             sizeof path);
    expect_fail("AdamW with adam_w_mode false", path, 0, NULL, 1, "e-adamw.cfg:2",
                "key 'optimizer.params.adam_w_mode'", NULL);
    bad_deck("e-auto.cfg", "seed = \"auto\";\n", path, sizeof path);
    expect_fail("auto where not allowed", path, 0, NULL, 1, "e-auto.cfg:2", "key 'seed'", "\"auto\"", NULL);
    bad_deck("e-big.cfg", "data = { seq_len = 4294969344; };\n", path, sizeof path);
    expect_fail("int literal beyond 32 bits", path, 0, NULL, 1, "e-big.cfg:2", "key 'data.seq_len'", "4294969344",
                NULL);
    bad_deck("e-betas.cfg", "optimizer = { params = { betas = [0.9, 1.5]; }; };\n", path, sizeof path);
    expect_fail("beta out of range", path, 0, NULL, 1, "e-betas.cfg:2", "key 'optimizer.params.betas'", "1.5", NULL);
    write_deck("e-dims.cfg", "model = { hidden_size = 64;\n  num_attention_heads = 4; };\n", path, sizeof path);
    expect_fail("incomplete dimensions", path, 0, NULL, 1, "e-dims.cfg:1", "model.vocab_size", NULL);
}

static void cleanup(void) { qf_test_remove_dir(g_dir); }

int main(void) {
    if (qf_test_mkdir_pid(g_dir, sizeof g_dir, "/tmp/qf-test-deck")) return 1;
    test_table();
    test_defaults();
    test_full_deck();
    test_print();
    test_markdown();
    test_docs_table();
    test_ds_translation();
    test_include();
    test_set();
    test_numbers();
    test_auto();
    test_batch();
    test_model();
    test_errors();
    if (!qf_test_failures) cleanup();
    printf("test_deck: %d checks, %d failed%s\n", qf_test_checks, qf_test_failures, qf_test_failures ? " (decks kept in " : "");
    if (qf_test_failures) printf("%s)\n", g_dir);
    return qf_test_failures ? 1 : 0;
}
