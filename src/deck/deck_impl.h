/* deck_impl.h — the inside of qf_deck_load, shared by its parts (not for callers: use deck.h).
 *   deck.c        qf_deck_load: the context, the order of work; qf_deck_defaults
 *   deck_parse.c  reading the deck file and the DeepSpeed JSON, walking the settings, each key's value as its type
 *                 and range allow (unknown keys, keys given twice, integer literals beyond 32 bits)
 *   deck_set.c    --set overrides, applied to the libconfig tree before it is walked
 *   deck_check.c  "auto" that depends on other keys, the checks across keys, the model, the batch rule
 *   deck_msg.c    where a setting is ("FILE:LINE", "--set '...'") and the messages (exit code 2, file, line, key)
 *   deck_print.c  the resolved deck as libconfig text, the markdown key table (qf_deck_print*)
 * Calls go one way: deck.c -> deck_parse.c, deck_set.c, deck_check.c; those and deck_print.c -> deck_msg.c. */
#ifndef QF_DECK_IMPL_H
#define QF_DECK_IMPL_H
#include <libconfig.h>
#include <stddef.h>
#include "deck.h"
#include "deck_keys.h"
#include "ds_config.h"

#define DECK_FILE_MAX (2 * QF_PATH_MAX + 8)
#define DECK_WHERE_MAX (DECK_FILE_MAX + 64)
#define DECK_KEY_MAX 512
#define DECK_INT_NOMAX 9.2e18

typedef struct deck_texts deck_texts; /* deck_lines.c */

typedef struct deck_ctx {
    config_t cfg;
    const char *path;          /* the deck file, or "--set" when there is none */
    int has_file;
    char dir[QF_PATH_MAX];     /* include directory: the deck's */
    const qf_deck_key *keys;
    int nkeys;
    config_setting_t **src;    /* per key: the setting that gave it, or NULL */
    unsigned char *autos;      /* per key: given as "auto" */
    unsigned char *layer;      /* per key: QF_ORIGIN_* of the setting in src */
    int *written;              /* per key: the key as written (an alias of it, or itself) */
    int cur_layer;             /* QF_ORIGIN_DS while the DeepSpeed JSON is walked, else QF_ORIGIN_DECK */
    char **hooks;              /* "where" texts of settings that are not in the deck file (--set, the JSON) */
    int nhooks;
    qf_ds_config ds;           /* the DeepSpeed JSON (`deepspeed`), as settings */
    int has_ds;
    int default_micro;         /* the micro batch when the batch rule has none (0 = 1; deck_hf_defaults.c) */
    qf_deck *d;
    qf_err *e;
    deck_texts *texts;         /* the deck files' lines, each file read once (deck_lines.c) */
} deck_ctx;

/* Line `line` (from 1) of file, without its newline, into out (cap bytes); -1 when unreadable or longer. */
int deck_line_get(const deck_ctx *c, const char *file, unsigned line, char *out, size_t cap);
deck_texts *deck_lines_new(void);
void deck_lines_free(deck_texts *tx);

/* ---- the context's record of a key ---- */

static inline int deck_idx(const char *path) {
    int ki = qf_deck_keys_find(path);
    QF_CHECK(ki >= 0);
    return ki;
}

static inline config_setting_t *deck_src(const deck_ctx *c, const char *path) { return c->src[deck_idx(path)]; }

/* Given in the deck (or --set), and not as an "auto" that means "not given". */
static inline int deck_given(const deck_ctx *c, const char *path) {
    int ki = deck_idx(path);
    return c->src[ki] && !(c->autos[ki] && (c->keys[ki].flags & QF_KF_AUTO_UNSET));
}

/* ---- deck_parse.c ---- */

/* Reads the deck file into c->cfg (its @include relative to its directory, which c->dir becomes). */
int deck_read(deck_ctx *c, const char *path);
/* `deepspeed = "ds_config.json";`: reads the JSON and walks its settings (before the deck's, so that those win). */
int deck_load_ds(deck_ctx *c);
/* Takes every setting of group g (path prefix `prefix`) into c->d, recursively. */
int deck_walk(deck_ctx *c, config_setting_t *g, const char *prefix);

/* ---- deck_set.c ---- */

/* One "key.path=value" override into c->cfg. */
int deck_apply_set(deck_ctx *c, char *set);

/* ---- deck_check.c ---- */

/* After the walk: resolves "auto" that depends on other keys, checks across keys and the model, then the batch
 * rule for dp_world data-parallel ranks. */
int deck_resolve(deck_ctx *c, int dp_world);

/* ---- deck_hf_defaults.c ---- */

/* Before the checks: with `deepspeed`, the HF Trainer's defaults for an optimizer, scheduler and micro batch that
 * nothing gives (marked QF_ORIGIN_HF); for every deck, scheduler "linear" without warmup_num_steps warms up 0 steps. */
int deck_hf_defaults(deck_ctx *c);

/* ---- deck_paths.c ---- */

/* Makes the deck's relative paths relative to its directory; records where each path key came from. */
int deck_resolve_paths(deck_ctx *c);

/* ---- deck_msg.c ---- */

/* The path of file (a setting's source file; NULL: the deck) as the user knows it: relative to the deck's dir. */
void deck_file_of(const deck_ctx *c, const char *file, char *buf, size_t n);
/* "FILE:LINE", or "--set 'a.b=v'" for a setting an override created; the deck's path for NULL. */
void deck_where(const deck_ctx *c, const config_setting_t *s, char *buf, size_t n);
/* Sets c->e to "WHERE: key 'KEY': MSG" with QF_EXIT_INPUT and returns that code. */
__attribute__((format(printf, 4, 5)))
int deck_fail(const deck_ctx *c, const config_setting_t *s, const char *key, const char *fmt, ...);
/* The value of a setting, in words, for "got ...". */
void deck_got(const config_setting_t *s, char *buf, size_t n);
/* "expected WHAT THE KEY ACCEPTS, got ..." (got: the setting's value in words when NULL). */
int deck_bad(const deck_ctx *c, const qf_deck_key *k, const config_setting_t *s, const char *got);
int deck_bad_num(const deck_ctx *c, const qf_deck_key *k, const config_setting_t *s, double v);
/* A string that is none of the key's choices (with a "did you mean"). */
int deck_bad_choice(const deck_ctx *c, const qf_deck_key *k, const config_setting_t *s);
/* The key's range (" in 0..3", " >= 1", " in [0, 1)"; "" for none) and choices ("\"none\", \"cpu\""), as text. */
void deck_range_text(const qf_deck_key *k, char *buf, size_t n);
void deck_choices_text(const qf_deck_key *k, char *buf, size_t n);

#endif
