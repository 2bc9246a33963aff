/* test_deck_ds.c — `deepspeed = "ds_config.json"`: the guide configs of inputs/ds/ (with "auto", 2e8-style
 * integers, nested offload sections) resolve to the same deck as their libconfig translation (`qwen-ft deck
 * --from-ds`, run through $QWENFT); the deck's entries win and say so; every key's fate; the JSON's errors name
 * file, line and key. Temporary files go to /tmp/qf-test-ds-PID. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "deck/deck.h"
#include "deck/deck_keys.h"
#include "qf_test.h"

static char g_dir[256];

/* A relative path of a deck in g_dir (or a folder in it) as loaded: relative to the deck's directory
 * (src/deck/deck_paths.c), i.e. "G_DIR[/SUB]/rel"; rel itself when the deck has no directory. */
static int path_is(const char *got, const char *rel) {
    size_t n = strlen(g_dir), r = strlen(rel), gl = strlen(got);
    if (!strcmp(got, rel)) return 1;
    return strncmp(got, g_dir, n) == 0 && gl > r && got[gl - r - 1] == '/' && strcmp(got + gl - r, rel) == 0;
}

static void write_file(const char *name, const char *text, char *path, size_t n) {
    snprintf(path, n, "%s/%s", g_dir, name);
    qf_test_write_text(path, text);
}

static int load(const char *path, int nset, char **sets, qf_deck *d, qf_err *e) {
    memset(e, 0, sizeof *e);
    return qf_deck_load(path, nset, sets, 8, d, e);
}

/* What print writes of d, as a string (the caller frees it). */
static char *print_to_string(const qf_deck *d, void (*print)(const qf_deck *, FILE *)) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    print(d, f);
    fclose(f);
    return buf;
}

/* The resolved deck as text, without its first line (which names the deck file). */
static char *printed(const qf_deck *d) {
    char *buf = print_to_string(d, qf_deck_print);
    size_t first = strcspn(buf, "\n") + 1; /* the first line and its newline */
    memmove(buf, buf + first, strlen(buf + first) + 1);
    return buf;
}

static char *sources(const qf_deck *d) { return print_to_string(d, qf_deck_print_sources); }

static int origin(const qf_deck *d, const char *key) { return d->origin[qf_deck_keys_find(key)]; }

static void expect_fail(const char *label, const char *json, ...) {
    char jp[512], dp[512];
    qf_deck d;
    qf_err e;
    va_list ap;
    write_file("bad.json", json, jp, sizeof jp);
    write_file("bad.cfg", "model = { preset = \"qwen3-0.6b\"; };\ndeepspeed = \"bad.json\";\n", dp, sizeof dp);
    int rc = load(dp, 0, NULL, &d, &e), ok = rc == QF_EXIT_INPUT;
    va_start(ap, json);
    qf_test_expect_msg(label, 36, ok, rc, e.msg, ap);
    va_end(ap);
}

/* Each guide config, next to a deck that names only the model and data, equals its translation. */
static void test_guides(const char *src, const char *qwenft) {
    static const char *const guides[] = {"ds_config_zero2", "ds_config_zero3", "ds_config_zero3_offload", NULL};
    for (int i = 0; guides[i]; i++) {
        char deck[512], text[2048], tr[512], cmd[2048];
        qf_deck a, b;
        qf_err e;
        snprintf(text, sizeof text,
                 "model = { preset = \"qwen2.5-14b\"; };\ndata = { train = \"train.h5\"; };\n"
                 "deepspeed = \"%s/inputs/ds/%s.json\";\n", src, guides[i]);
        write_file("guide.cfg", text, deck, sizeof deck);
        CHECK(load(deck, 0, NULL, &a, &e) == 0);
        if (e.code) fprintf(stderr, "%s: %s\n", guides[i], e.msg);
        snprintf(tr, sizeof tr, "%s/%s.cfg", g_dir, guides[i]);
        snprintf(cmd, sizeof cmd,
                 "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 '%s' deck --from-ds '%s/inputs/ds/%s.json' "
                 "--model x.h5 --train train.h5 > '%s'",
                 qwenft, src, guides[i], tr);
        CHECK(system(cmd) == 0);
        /* the translation names model.from; the deck with the JSON a preset: make them name the same model */
        char s1[] = "model.preset=qwen2.5-14b", s2[] = "model.from=", *sets[] = {s2, s1};
        CHECK(load(tr, 2, sets, &b, &e) == 0);
        if (e.code) fprintf(stderr, "%s translated: %s\n", guides[i], e.msg);
        char *pa = printed(&a), *pb = printed(&b);
        CHECK(strcmp(pa, pb) == 0);
        if (strcmp(pa, pb)) fprintf(stderr, "%s:\n--- with deepspeed:\n%s\n--- translated:\n%s\n", guides[i], pa, pb);
        free(pa);
        free(pb);
        /* what the guides' "auto" becomes: the HF Trainer's defaults, and hidden_size-based buckets */
        CHECK(a.lr == 5e-5 && a.warmup_max_lr == 5e-5 && a.warmup_min_lr == 0 && a.warmup_num_steps == 0);
        CHECK(a.beta1 == 0.9 && a.beta2 == 0.999 && a.eps == 1e-8 && a.weight_decay == 0);
        CHECK(a.gradient_clipping == 1.0 && !a.bf16 && !a.fp16 && a.sched == QF_SCHED_WARMUP_LR);
        CHECK(a.train_micro_batch_size_per_gpu == 8 && a.gradient_accumulation_steps == 1 && a.train_batch_size == 64);
        CHECK(a.steps_per_print == 100 && !a.wall_clock_breakdown);
        qf_deck_resolve_auto(&a, 5120);
        if (i == 0) {
            CHECK(a.zero_stage == 2 && a.reduce_bucket_size == 200000000 && a.allgather_bucket_size == 200000000);
            CHECK(a.overlap_comm && a.offload_optimizer == QF_OFFLOAD_NONE);
        } else {
            CHECK(a.zero_stage == 3 && a.reduce_bucket_size == 5120LL * 5120);
            CHECK(a.stage3_prefetch_bucket_size == (int64_t)(0.9 * 5120 * 5120));
            CHECK(a.stage3_param_persistence_threshold == 51200 && a.stage3_max_live_parameters == 1000000000);
            CHECK(a.offload_optimizer == (i == 2 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE));
            CHECK(a.offload_param == (i == 2 ? QF_OFFLOAD_CPU : QF_OFFLOAD_NONE));
        }
        /* every key the JSON gives is from it, and each no-effect one is listed with its reason */
        char *s = sources(&a);
        CHECK(strstr(s, "deck keys from the DeepSpeed config ") && strstr(s, "steps_per_print, wall_clock_breakdown"));
        CHECK(strstr(s, "accepted, no effect here: fp16.loss_scale_window (fp16.enabled is false)"));
        CHECK(strstr(s, "accepted, no effect here: zero_optimization.contiguous_gradients ("));
        if (i == 0) CHECK(strstr(s, "accepted, no effect here: zero_optimization.allgather_partitions ("));
        else CHECK(strstr(s, "accepted, no effect here: zero_optimization.sub_group_size (") &&
                   strstr(s, "accepted, no effect here: zero_optimization.stage3_max_reuse_distance (") &&
                   strstr(s, "accepted, no effect here: zero_optimization.stage3_gather_16bit_weights_on_model_save ("));
        if (i == 1) CHECK(strstr(s, "zero_optimization.offload_param.pin_memory (offload_param.device is \"none\")"));
        CHECK(origin(&a, "zero_optimization.stage") == QF_ORIGIN_DS && origin(&a, "steps_per_print") == QF_ORIGIN_DS);
        CHECK(origin(&a, "optimizer.params.lr") == (QF_ORIGIN_DS | QF_ORIGIN_AUTO));
        CHECK(origin(&a, "model.preset") == QF_ORIGIN_DECK && origin(&a, "max_steps") == QF_ORIGIN_DEFAULT);
        free(s);
    }
}

/* The deck's entries win over the JSON's, "auto" then follows the deck, and the header says so. */
static void test_deck_wins(void) {
    char jp[512], dp[512], sub[300];
    qf_deck d;
    qf_err e;
    snprintf(sub, sizeof sub, "%s/sub", g_dir);
    mkdir(sub, 0755);
    write_file("sub/z.json",
               "{\n  \"optimizer\": { \"type\": \"AdamW\", \"params\": { \"lr\": \"auto\", \"weight_decay\": 0.2 } },\n"
               "  \"scheduler\": { \"type\": \"WarmupDecayLR\",\n"
               "    \"params\": { \"warmup_max_lr\": \"auto\", \"total_num_steps\": \"auto\" } },\n"
               "  \"zero_optimization\": { \"stage\": 3, \"stage3_max_live_parameters\": 3e9 },\n"
               "  \"steps_per_print\": 7,\n  \"tensorboard\": { \"enabled\": true, \"output_path\": \"tb\" },\n"
               "  \"seed\": 1\n}\n",
               jp, sizeof jp);
    /* seed is not a DeepSpeed key: refused in the JSON, with its line */
    write_file("sub/w.cfg", "model = { preset = \"qwen3-0.6b\"; };\ndeepspeed = \"z.json\";\n", dp, sizeof dp);
    CHECK(load(dp, 0, NULL, &d, &e) == QF_EXIT_INPUT && strstr(e.msg, "sub/z.json:8: key 'seed'") &&
          strstr(e.msg, "not a DeepSpeed config key"));
    write_file("sub/z.json",
               "{\n  \"optimizer\": { \"type\": \"AdamW\", \"params\": { \"lr\": \"auto\", \"weight_decay\": 0.2 } },\n"
               "  \"scheduler\": { \"type\": \"WarmupDecayLR\",\n"
               "    \"params\": { \"warmup_max_lr\": \"auto\", \"total_num_steps\": \"auto\" } },\n"
               "  \"zero_optimization\": { \"stage\": 3, \"stage3_max_live_parameters\": 3e9 },\n"
               "  \"steps_per_print\": 7,\n  \"tensorboard\": { \"enabled\": true, \"output_path\": \"tb\" }\n}\n",
               jp, sizeof jp);
    /* the path is relative to the deck's directory; the deck overrides lr and the stage, --set the weight decay */
    write_file("sub/w.cfg",
               "model = { preset = \"qwen3-0.6b\"; };\ndeepspeed = \"z.json\";\noptimizer = { params = { lr = 3e-4; }; };\n"
               "zero_optimization = { stage = 1; };\nlog = { steps_per_print = 9; };\n",
               dp, sizeof dp);
    char s1[] = "optimizer.params.weight_decay=0.05", *sets[] = {s1};
    CHECK(load(dp, 1, sets, &d, &e) == 0);
    if (e.code) fprintf(stderr, "deck wins: %s\n", e.msg);
    CHECK(d.lr == 3e-4 && d.warmup_max_lr == 3e-4 && d.weight_decay == 0.05 && d.zero_stage == 1);
    CHECK(d.stage3_max_live_parameters == 3000000000LL && d.steps_per_print == 9 && d.tensorboard);
    CHECK(path_is(d.tensorboard_output_path, "tb") && d.total_num_steps == -1);
    CHECK(origin(&d, "optimizer.params.lr") == (QF_ORIGIN_DECK | QF_ORIGIN_DS_OVERRIDDEN));
    CHECK(origin(&d, "optimizer.params.weight_decay") == (QF_ORIGIN_SET | QF_ORIGIN_DS_OVERRIDDEN));
    CHECK(origin(&d, "log.steps_per_print") == (QF_ORIGIN_DECK | QF_ORIGIN_DS_OVERRIDDEN));
    CHECK(origin(&d, "steps_per_print") == QF_ORIGIN_DEFAULT);
    CHECK(origin(&d, "scheduler.params.warmup_max_lr") == (QF_ORIGIN_DS | QF_ORIGIN_AUTO));
    char *s = sources(&d);
    CHECK(strstr(s, "the deck overrides ") && strstr(s, "sub/z.json for: optimizer.params.lr, zero_optimization.stage, "
                                                        "log.steps_per_print"));
    CHECK(strstr(s, "--set overrides ") && strstr(s, "for: optimizer.params.weight_decay"));
    CHECK(strstr(s, "accepted, no effect here: zero_optimization.stage3_max_live_parameters (stage 3 only)"));
    free(s);
    /* printed, the resolved deck is self-contained: it names no deepspeed file and loads to the same deck */
    char *p = printed(&d);
    CHECK(!strstr(p, "deepspeed") && strstr(p, "lr = 0.0003;"));
    free(p);
}

/* qwen-ft's activation_checkpointing switch and DeepSpeed's group of that name: the JSON may hold the group next to
 * the deck's switch; --set may not silently replace one with the other. */
static void test_ackpt_group(void) {
    char jp[512], dp[512];
    qf_deck d;
    qf_err e;
    char s1[] = "activation_checkpointing.cpu_checkpointing=true", s2[] = "activation_checkpointing=true";
    write_file("ac.json", "{ \"activation_checkpointing\": { \"partition_activations\": true } }\n", jp, sizeof jp);
    write_file("ac.cfg", "model = { preset = \"qwen3-0.6b\"; };\ndeepspeed = \"ac.json\";\nactivation_checkpointing = true;\n",
               dp, sizeof dp);
    CHECK(load(dp, 0, NULL, &d, &e) == 0 && d.activation_checkpointing == QF_ACKPT_FULL && d.ac_partition_activations);
    CHECK(load(dp, 1, (char *[]){s1}, &d, &e) == QF_EXIT_INPUT && strstr(e.msg, "sets 'activation_checkpointing' as a value"));
    write_file("ac2.cfg", "model = { preset = \"qwen3-0.6b\"; };\nactivation_checkpointing = { profile = true; };\n", dp,
               sizeof dp);
    CHECK(load(dp, 0, NULL, &d, &e) == 0 && d.activation_checkpointing == QF_ACKPT_NONE && d.ac_profile);
    CHECK(load(dp, 1, (char *[]){s2}, &d, &e) == QF_EXIT_INPUT && strstr(e.msg, "has a group 'activation_checkpointing'"));
}

static void test_errors(void) {
    expect_fail("syntax error", "{\n  \"zero_optimization\": {\n    \"stage\": 2,\n  }\n}\n", "bad.json:4:",
                "not valid JSON", "(key 'deepspeed' at ", "bad.cfg:2)", NULL);
    expect_fail("wrong type", "{\n  \"bf16\": { \"enabled\": \"yes\" }\n}\n", "bad.json:2: key 'bf16.enabled'",
                "true or false", NULL);
    expect_fail("out of range", "{\n  \"zero_optimization\": {\n    \"stage\": 4\n  }\n}\n",
                "bad.json:3: key 'zero_optimization.stage'", "0..3", NULL);
    expect_fail("fraction for an integer", "{\n\n  \"train_micro_batch_size_per_gpu\": 2.5\n}\n",
                "bad.json:3: key 'train_micro_batch_size_per_gpu'", NULL);
    expect_fail("unknown key", "{ \"zero_optimization\": {\n  \"stage3_prefetch_bucket\": 5 } }\n",
                "bad.json:2: unknown key 'zero_optimization.stage3_prefetch_bucket'",
                "did you mean 'zero_optimization.stage3_prefetch_bucket_size'", NULL);
    expect_fail("refused feature", "{\n  \"wandb\": { \"enabled\": true }\n}\n", "bad.json:2: key 'wandb'",
                "Weights & Biases", NULL);
    expect_fail("null", "{\n  \"gradient_clipping\": null\n}\n", "bad.json:2: key 'gradient_clipping'", "null", NULL);
    expect_fail("duplicate", "{\n  \"steps_per_print\": 1,\n  \"steps_per_print\": 2\n}\n", "bad.json:3:",
                "duplicate", NULL);
    expect_fail("qwen-ft key in the JSON", "{\n  \"data\": { \"seq_len\": 64 }\n}\n", "bad.json:2: key 'data.seq_len'",
                "not a DeepSpeed config key", NULL);
    expect_fail("not an object", "[1, 2]\n", "bad.json:1:", "JSON object", NULL);
    expect_fail("cross-key check names the JSON",
                "{\n  \"zero_optimization\": { \"stage\": 1,\n    \"offload_param\": { \"device\": \"cpu\" } }\n}\n",
                "bad.json:3: key 'zero_optimization.offload_param.device'", "stage 3", NULL);
    char dp[512];
    qf_deck d;
    qf_err e;
    write_file("nofile.cfg", "model = { preset = \"qwen3-0.6b\"; };\ndeepspeed = \"missing.json\";\n", dp, sizeof dp);
    CHECK(load(dp, 0, NULL, &d, &e) == QF_EXIT_INPUT && strstr(e.msg, "missing.json: cannot open the DeepSpeed config") &&
          strstr(e.msg, "nofile.cfg:2"));
}

/* The no-effect lines of a header account (the "accepted, no effect here" lines), for comparing two decks. */
static char *noeffect_lines(const char *s) {
    char *out = calloc(1, strlen(s) + 1);
    size_t len = 0;
    for (const char *p = strstr(s, "accepted, no effect here: "); p; p = strstr(p + 1, "accepted, no effect here: ")) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
        memcpy(out + len, p, n);
        len += n;
    }
    return out;
}

/* Every DeepSpeed key issue 12 lists is accepted, in the JSON and in the libconfig deck under the same path, and
 * acts or is listed as having no effect here. */
static void test_listed_keys(const char *qwenft) {
    char jp[512], dp[512], tr[512], cmd[2048];
    qf_deck a, b;
    qf_err e;
    int n, listed = 0;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    write_file("all.json",
               "{\n  \"steps_per_print\": 5,\n  \"wall_clock_breakdown\": true,\n"
               "  \"zero_optimization\": { \"stage\": 3, \"allgather_partitions\": true, \"sub_group_size\": 1e9,\n"
               "    \"round_robin_gradients\": true, \"stage3_gather_16bit_weights_on_model_save\": true,\n"
               "    \"offload_optimizer\": { \"device\": \"cpu\", \"buffer_count\": 4, \"fast_init\": false,\n"
               "                           \"pipeline_read\": false, \"pipeline_write\": false },\n"
               "    \"offload_param\": { \"device\": \"cpu\", \"buffer_count\": 5, \"buffer_size\": 1e8, \"max_in_cpu\": 1e9 },\n"
               "    \"contiguous_gradients\": true, \"reduce_scatter\": false, \"stage3_max_reuse_distance\": 1e9 },\n"
               "  \"communication_data_type\": \"fp32\", \"prescale_gradients\": false, \"gradient_predivide_factor\": 1.0,\n"
               "  \"zero_allow_untested_optimizer\": true,\n  \"fp16\": { \"enabled\": true, \"auto_cast\": false },\n"
               "  \"activation_checkpointing\": { \"partition_activations\": false, \"cpu_checkpointing\": false,\n"
               "    \"contiguous_memory_optimization\": false, \"number_checkpoints\": 4 },\n"
               "  \"tensorboard\": { \"enabled\": true, \"output_path\": \"tb\", \"job_name\": \"run1\" },\n"
               "  \"csv_monitor\": { \"enabled\": true, \"output_path\": \"csv\", \"job_name\": \"run1\" },\n"
               "  \"flops_profiler\": { \"enabled\": true, \"profile_step\": 1, \"module_depth\": -1, \"top_modules\": 1,\n"
               "                      \"detailed\": true, \"output_file\": \"prof.txt\" }\n}\n",
               jp, sizeof jp);
    write_file("all.cfg", "model = { preset = \"qwen3-0.6b\"; };\ndeepspeed = \"all.json\";\n", dp, sizeof dp);
    CHECK(load(dp, 0, NULL, &a, &e) == 0);
    if (e.code) fprintf(stderr, "listed keys: %s\n", e.msg);
    CHECK(a.steps_per_print == 5 && a.wall_clock_breakdown && a.tensorboard && a.fp16 && a.zero_stage == 3);
    CHECK(path_is(a.tensorboard_output_path, "tb") && !strcmp(a.tensorboard_job_name, "run1"));
    CHECK(a.activation_checkpointing == QF_ACKPT_NONE); /* DeepSpeed's group does not switch recomputation on */
    char *s = sources(&a);
    for (int i = 0; i < n; i++) {
        char want[512];
        if (k[i].fate != QF_FATE_NO_EFFECT || !a.origin[i]) continue;
        snprintf(want, sizeof want, "accepted, no effect here: %s (%s)\n", k[i].path, k[i].why);
        CHECK(strstr(s, want) != NULL);
        listed++;
    }
    CHECK(listed >= 27);
    /* the same keys in a libconfig deck, under the same paths */
    snprintf(tr, sizeof tr, "%s/all-tr.cfg", g_dir);
    snprintf(cmd, sizeof cmd,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 '%s' deck --from-ds '%s' --model x.h5 > '%s'",
             qwenft, jp, tr);
    CHECK(system(cmd) == 0);
    char s1[] = "model.preset=qwen3-0.6b", s2[] = "model.from=", *sets[] = {s2, s1};
    CHECK(load(tr, 2, sets, &b, &e) == 0);
    if (e.code) fprintf(stderr, "listed keys, translated: %s\n", e.msg);
    char *pa = printed(&a), *pb = printed(&b), *sb = sources(&b), *na = noeffect_lines(s), *nb = noeffect_lines(sb);
    CHECK(strcmp(pa, pb) == 0 && strcmp(na, nb) == 0 && strlen(na) > 0);
    free(pa), free(pb), free(s), free(sb), free(na), free(nb);
}

int main(void) {
    const char *src = getenv("SRC"), *qwenft = getenv("QWENFT");
    if (qf_test_mkdir_pid(g_dir, sizeof g_dir, "/tmp/qf-test-ds")) return 1;
    test_deck_wins();
    test_errors();
    test_ackpt_group();
    if (src && *src && qwenft && *qwenft) test_guides(src, qwenft), test_listed_keys(qwenft);
    else printf("test_deck_ds: SRC or QWENFT not set: the guide configs were not checked\n");
    if (!qf_test_failures) qf_test_remove_dir(g_dir);
    printf("test_deck_ds: %d checks, %d failed\n", qf_test_checks, qf_test_failures);
    return qf_test_failures ? 1 : 0;
}
