/* test_deck_audit.c — no deck key is a silent no-op. Every key of the table has a fate (deck_keys.h), and the fate
 * is checked: a key that acts must be read by the engine (a member access `->field` / `.field` in src/, io/ or
 * kernels/ outside the deck layer, comments and strings stripped); a key with no effect must say why and must not be
 * read (else it acts and should say so); an alias must stand for a key that acts; a key that acts while the deck is
 * resolved must have a behavioural case below. Reads the sources under $SRC. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "deck/deck.h"
#include "deck/deck_keys.h"

static int g_fail, g_checks;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        g_checks++;                                                          \
        if (!(cond)) {                                                       \
            g_fail++;                                                        \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
        }                                                                    \
    } while (0)

/* The deck layer: files that parse, resolve, print or translate the deck. A read there is not the engine's. */
static const char *const k_deck_layer[] = {"deck.c", "deck_parse.c", "deck_set.c", "deck_check.c", "deck_msg.c",
                                           "deck_print.c", "deck_keys.c", "deck_sources.c", "ds_config.c", "cmd_deck.c",
                                           "header.c", "deck.h", "deck_impl.h", "deck_keys.h", "ds_config.h", NULL};

/* ---- the engine's sources, comments and string literals blanked ---- */

static char *g_code;
static size_t g_len;

static void blank(char *t) {
    for (char *p = t; *p;) {
        if (p[0] == '/' && p[1] == '*') {
            for (; *p && !(p[0] == '*' && p[1] == '/'); p++) *p = ' ';
            if (*p) p[0] = p[1] = ' ', p += 2;
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') *p++ = ' ';
        } else if (*p == '"' || *p == '\'') {
            char q = *p;
            for (*p++ = ' '; *p && *p != q; p++) {
                if (*p == '\\' && p[1]) *p++ = ' ';
                *p = ' ';
            }
            if (*p) *p++ = ' ';
        } else {
            p++;
        }
    }
}

static int in_deck_layer(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (int i = 0; k_deck_layer[i]; i++)
        if (strcmp(base, k_deck_layer[i]) == 0) return 1;
    return 0;
}

static void add_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *t = malloc((size_t)n + 1);
    size_t got = fread(t, 1, (size_t)n, f);
    t[got] = 0;
    fclose(f);
    blank(t);
    g_code = realloc(g_code, g_len + got + 2);
    memcpy(g_code + g_len, t, got);
    g_len += got;
    g_code[g_len++] = '\n';
    g_code[g_len] = 0;
    free(t);
}

static int load_sources(const char *src) {
    g_code = calloc(1, 1);
    g_len = 0;
    static const char *const pats[] = {"src/*/*.c",       "src/*/*.h",        "io/*.c",
                                       "io/*.h",          "kernels/*.h",      "kernels/base/*.h",
                                       "kernels/cpu/*.c", "kernels/cuda/*.cu", "kernels/cuda/*.cuh", NULL};
    char pat[1024];
    int files = 0;
    for (int i = 0; pats[i]; i++) {
        glob_t g;
        snprintf(pat, sizeof pat, "%s/%s", src, pats[i]);
        if (glob(pat, 0, NULL, &g) != 0) continue;
        for (size_t j = 0; j < g.gl_pathc; j++)
            if (!in_deck_layer(g.gl_pathv[j])) add_file(g.gl_pathv[j]), files++;
        globfree(&g);
    }
    return files;
}

/* 1 if the engine reads the field: "->field" or ".field" not followed by an identifier character. */
static int engine_reads(const char *field) {
    size_t n = strlen(field);
    for (const char *p = strstr(g_code, field); p; p = strstr(p + 1, field)) {
        if (isalnum((unsigned char)p[n]) || p[n] == '_') continue;
        if (p - g_code >= 1 && p[-1] == '.') return 1;
        if (p - g_code >= 2 && p[-1] == '>' && p[-2] == '-') return 1;
    }
    return 0;
}

/* ---- keys that act while the deck is resolved: one behavioural case each ---- */

static char g_dir[256];

static int load_text(const char *name, const char *text, qf_deck *d, qf_err *e) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    memset(e, 0, sizeof *e);
    return qf_deck_load(path, 0, NULL, 1, d, e);
}

#define MODEL "model = { preset = \"qwen3-0.6b\"; num_hidden_layers = 2; };\n"

static int case_seed(void) {
    qf_deck a, b, c;
    qf_err e;
    int ok = load_text("s0.cfg", MODEL, &a, &e) == 0 && load_text("s1.cfg", MODEL "seed = 5;\n", &b, &e) == 0;
    ok = ok && load_text("s3.cfg", "model = { preset = \"qwen3-0.6b\"; init_seed = 9; };\ndata = { seed = 8; };\nseed = 5;\n",
                         &c, &e) == 0;
    /* seed seeds the init and the shuffle when they are not set, and only then */
    return ok && a.model_init_seed == 1234 && a.data_seed == 42 && b.model_init_seed == 5 && b.data_seed == 5 &&
           c.model_init_seed == 9 && c.data_seed == 8;
}

static int case_optimizer_type(void) {
    qf_deck a, b;
    qf_err e;
    /* "AdamW" forces decoupled decay (false is refused); "Adam" follows adam_w_mode */
    int adamw = load_text("o1.cfg", MODEL "optimizer = { type = \"AdamW\"; params = { adam_w_mode = false; }; };\n", &a, &e);
    int adam = load_text("o2.cfg", MODEL "optimizer = { type = \"Adam\"; params = { adam_w_mode = false; }; };\n", &b, &e);
    return adamw == QF_EXIT_INPUT && adam == 0 && b.adam_w_mode == 0;
}

static int case_deepspeed(void) {
    qf_deck a;
    qf_err e;
    char json[512];
    snprintf(json, sizeof json, "%s/z.json", g_dir);
    FILE *f = fopen(json, "w");
    fputs("{ \"zero_optimization\": { \"stage\": 2 }, \"steps_per_print\": 7 }\n", f);
    fclose(f);
    return load_text("d.cfg", MODEL "deepspeed = \"z.json\";\n", &a, &e) == 0 && a.zero_stage == 2 &&
           a.steps_per_print == 7;
}

static const struct {
    const char *path;
    int (*check)(void);
} k_cases[] = {{"seed", case_seed}, {"optimizer.type", case_optimizer_type}, {"deepspeed", case_deepspeed}};

static int (*case_of(const char *path))(void) {
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
        if (strcmp(k_cases[i].path, path) == 0) return k_cases[i].check;
    return NULL;
}

int main(void) {
    const char *src = getenv("SRC");
    int n, acts = 0, noeff = 0, alias = 0, deck = 0;
    const qf_deck_key *k = qf_deck_keys_table(&n);
    if (!src || !*src) src = ".";
    int files = load_sources(src);
    CHECK(files >= 20, "found only %d source files under %s (set SRC)", files, src);
    snprintf(g_dir, sizeof g_dir, "/tmp/qf-test-audit-%d", (int)getpid());
    mkdir(g_dir, 0755);
    for (int i = 0; i < n; i++) {
        const char *p = k[i].path;
        CHECK(k[i].field && *k[i].field, "%s: no field name", p);
        switch (k[i].fate) {
        case QF_FATE_ACTS:
            acts++;
            CHECK(engine_reads(k[i].field), "%s: accepted, said to act, but no engine code reads qf_deck.%s: make it act "
                                            "or give it QF_FATE_NO_EFFECT with the reason", p, k[i].field);
            break;
        case QF_FATE_NO_EFFECT:
            noeff++;
            CHECK(k[i].why && strlen(k[i].why) > 10, "%s: no effect, but no reason", p);
            CHECK(!engine_reads(k[i].field), "%s: said to have no effect, but the engine reads qf_deck.%s", p,
                  k[i].field);
            break;
        case QF_FATE_ALIAS: {
            alias++;
            int t = k[i].alias ? qf_deck_keys_find(k[i].alias) : -1;
            CHECK(t >= 0 && k[t].fate == QF_FATE_ACTS, "%s: alias of '%s', which is not a key that acts", p,
                  k[i].alias ? k[i].alias : "(none)");
            if (t >= 0) CHECK(k[t].off == k[i].off && k[t].type == k[i].type, "%s: not the field of %s", p, k[t].path);
            break;
        }
        case QF_FATE_DECK: {
            deck++;
            int (*check)(void) = case_of(p);
            CHECK(k[i].why && *k[i].why, "%s: acts in the deck, but does not say how", p);
            CHECK(check != NULL, "%s: acts in the deck, but test_deck_audit.c has no case for it", p);
            if (check) CHECK(check(), "%s: the behavioural case failed (%s)", p, k[i].why);
            break;
        }
        }
    }
    /* the reads the audit relies on are really found (a broken scan would pass every NO_EFFECT key) */
    CHECK(engine_reads("zero_stage") && engine_reads("stage3_max_live_parameters"), "the source scan finds nothing");
    CHECK(!engine_reads("stage3_max_reuse_distance"), "stage3_max_reuse_distance is read: reclassify it");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (!g_fail && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    printf("test_deck_audit: %d keys (%d act, %d in the deck, %d aliases, %d no effect), %d checks, %d failed\n", n,
           acts, deck, alias, noeff, g_checks, g_fail);
    return g_fail ? 1 : 0;
}
