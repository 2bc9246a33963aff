/* gen_prompts.c — see gen_prompts.h. */
#include "gen_prompts.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "out_file.h"
#include "prepare/prep.h"

static void gen_push(qf_gen_prompts *p, int32_t *ids, int n) {
    if (p->n == p->cap) p->v = qf_realloc(p->v, (size_t)(p->cap = p->cap ? 2 * p->cap : 8) * sizeof *p->v);
    p->v[p->n++] = (qf_gen_prompt){ids, n};
}

void qf_gen_prompts_free(qf_gen_prompts *p) {
    for (int i = 0; i < p->n; i++) free(p->v[i].ids);
    free(p->v);
    memset(p, 0, sizeof *p);
}

int qf_gen_prompt_chat(const qf_gen_src *src, json_t *rec, qf_gen_prompts *out, char *why, size_t cap) {
    if (!src->tok)
        return snprintf(why, cap, "a chat prompt needs a tokenizer: pass --tokenizer (tokenizer.json, qwen.tiktoken "
                                  "or an HF model directory)"), 1;
    if (!src->tmpl) return snprintf(why, cap, "a chat prompt: %s", src->tmpl_why), 1;
    prep_conv c = {0};
    const char *key;
    int bad = prep_conv_parse(rec, &c, &key, why, cap) != PREP_OK;
    if (!bad && src->system && (c.n == 0 || c.msg[0].role != QF_MSG_SYSTEM)) {
        prep_conv_push(&c, (qf_chat_msg){0});
        memmove(c.msg + 1, c.msg, (c.n - 1) * sizeof *c.msg);
        c.msg[0] = (qf_chat_msg){QF_MSG_SYSTEM, src->system, strlen(src->system), NULL, 0, NULL};
    }
    qf_chat_doc d = {0};
    qf_err e = {0};
    if (!bad) {
        qf_chat_conv cv = {c.msg, c.n, c.tools, src->no_thinking};
        bad = qf_tmpl_render(src->tmpl, &cv, 1, QF_CHAT_MASK_ASSISTANT, &d, &e) != 0;
        if (bad) snprintf(why, cap, "%s: %s", key, e.msg);
    }
    if (!bad) {
        int32_t *ids = qf_malloc((d.ids.n ? d.ids.n : 1) * sizeof *ids);
        memcpy(ids, d.ids.v, d.ids.n * sizeof *ids);
        gen_push(out, ids, (int)d.ids.n);
    }
    qf_chat_doc_free(&d);
    prep_conv_free(&c);
    return bad;
}

/* text -> ids, or with chat a user turn; why[cap] on failure */
static int gen_text(const qf_gen_src *src, const char *text, size_t len, qf_gen_prompts *out, char *why, size_t cap) {
    if (src->chat) {
        json_t *rec = json_pack("{s:[{s:s,s:s%}]}", "messages", "role", "user", "content", text, len);
        int rc = qf_gen_prompt_chat(src, rec, out, why, cap);
        json_decref(rec);
        return rc;
    }
    if (!src->tok)
        return snprintf(why, cap, "a text prompt needs a tokenizer: pass --tokenizer (tokenizer.json, qwen.tiktoken "
                                  "or an HF model directory)"), 1;
    qf_ids a = {0};
    qf_err te = {0};
    if (qf_tok_encode(src->tok, text, len, &a, &te)) {
        free(a.v);
        return snprintf(why, cap, "%s", te.msg), 1;
    }
    if (a.n == 0) {
        free(a.v);
        return snprintf(why, cap, "encodes to no tokens"), 1;
    }
    gen_push(out, a.v, (int)a.n);
    return 0;
}

int qf_gen_prompt_text(const qf_gen_src *src, const char *text, qf_gen_prompts *out, const char *what, qf_err *e) {
    char why[2200];
    if (gen_text(src, text, strlen(text), out, why, sizeof why))
        return qf_err_set(e, QF_EXIT_INPUT, "generate: %s: %s", what, why);
    return 0;
}

int qf_gen_prompt_idlist(const char *list, qf_gen_prompts *out, qf_err *e) {
    int cap = 16, n = 0;
    int32_t *ids = qf_malloc((size_t)cap * sizeof *ids);
    for (const char *s = list; *s;) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX || errno) {
            free(ids);
            return qf_err_set(e, QF_EXIT_INPUT, "generate: --prompt-ids: '%s' is not a list of token ids", list);
        }
        if (n == cap) ids = qf_realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
        ids[n++] = (int32_t)v;
        if (*end && *end != ',') {
            free(ids);
            return qf_err_set(e, QF_EXIT_INPUT, "generate: --prompt-ids: unexpected '%c'", *end);
        }
        s = *end == ',' ? end + 1 : end;
    }
    if (n == 0) {
        free(ids);
        return qf_err_set(e, QF_EXIT_INPUT, "generate: --prompt-ids is empty");
    }
    gen_push(out, ids, n);
    return 0;
}

/* {"prompt_ids": [...]} -> ids; why[cap] on failure */
static int gen_ids_record(json_t *a, qf_gen_prompts *out, char *why, size_t cap) {
    if (!json_is_array(a) || json_array_size(a) == 0)
        return snprintf(why, cap, "prompt_ids is %s, expected a non-empty array of token ids",
                        json_is_array(a) ? "empty" : prep_json_type(a)), 1;
    size_t n = json_array_size(a);
    int32_t *ids = qf_malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (x < 0 || x > INT32_MAX) {
            free(ids);
            return snprintf(why, cap, "prompt_ids[%zu] is not a token id (an integer >= 0)", i), 1;
        }
        ids[i] = (int32_t)x;
    }
    gen_push(out, ids, (int)n);
    return 0;
}

int qf_gen_prompts_read(const char *path, const qf_gen_src *src, qf_gen_prompts *out, qf_err *e) {
    qf_err oe = {0};
    FILE *f = qf_in_open("prompts file", path, 0, &oe); /* a FIFO or directory: refused, not waited on */
    if (!f) return qf_err_set(e, QF_EXIT_INPUT, "generate: --prompts %s", oe.msg);
    char *line = NULL, why[2200];
    size_t lcap = 0;
    ssize_t len;
    long lineno = 0;
    int before = out->n;
    while (!e->code && (len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        size_t k = (size_t)len;
        while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r' || line[k - 1] == ' ' || line[k - 1] == '\t')) k--;
        if (k == 0) continue; /* blank lines are allowed */
        json_error_t je;
        json_t *rec = json_loadb(line, k, JSON_REJECT_DUPLICATES, &je);
        int bad = 0;
        if (!rec) bad = snprintf(why, sizeof why, "not valid JSON (column %d): %s", je.column, je.text) > 0;
        else if (!json_is_object(rec)) bad = snprintf(why, sizeof why, "%s, expected an object", prep_json_type(rec)) > 0;
        else if (prep_get(rec, "enable_thinking") && !json_is_boolean(prep_get(rec, "enable_thinking")))
            bad = snprintf(why, sizeof why, "enable_thinking is %s, expected true or false",
                           prep_json_type(prep_get(rec, "enable_thinking"))) > 0;
        else {
            qf_gen_src rs = *src; /* the record's own enable_thinking, else --enable-thinking */
            if (prep_get(rec, "enable_thinking")) rs.no_thinking = json_is_false(prep_get(rec, "enable_thinking"));
            json_t *p = prep_get(rec, "prompt"), *ids = prep_get(rec, "prompt_ids");
            int chat = prep_get(rec, "messages") || prep_get(rec, "conversations");
            if ((p != NULL) + (ids != NULL) + chat != 1)
                bad = snprintf(why, sizeof why, "expected exactly one of \"prompt\", \"messages\" (or "
                                                "\"conversations\") and \"prompt_ids\"") > 0;
            else if (p && !json_is_string(p))
                bad = snprintf(why, sizeof why, "prompt is %s, expected a string", prep_json_type(p)) > 0;
            else if (p) bad = gen_text(&rs, json_string_value(p), json_string_length(p), out, why, sizeof why);
            else if (ids) bad = gen_ids_record(ids, out, why, sizeof why);
            else bad = qf_gen_prompt_chat(&rs, rec, out, why, sizeof why);
        }
        json_decref(rec);
        if (bad) qf_err_set(e, QF_EXIT_INPUT, "%s:%ld: %s", path, lineno, why);
    }
    free(line);
    fclose(f);
    if (!e->code && out->n == before) qf_err_set(e, QF_EXIT_INPUT, "generate: --prompts %s holds no prompt", path);
    return e->code;
}

int qf_gen_template(const char *path, const char *name, const qf_tokenizer *tok, qf_chat_template *tm, qf_err *e) {
    qf_tmpl_id id = QF_TMPL_QWEN1;
    int found = 0;
    char where[4200];
    if (name && strcmp(name, "auto")) {
        if (qf_tmpl_by_name(name, &id))
            return qf_err_set(e, QF_EXIT_INPUT, "--template %s: unknown (auto, or one of %s)", name, qf_tmpl_names());
    } else if (qf_tmpl_detect(path, &id, &found, where, sizeof where, e)) {
        return e->code;
    } else if (!found && name) {
        return qf_err_set(e, QF_EXIT_INPUT, "--template auto: %s has no chat template beside its tokenizer; pass "
                          "--template NAME (%s)", path, qf_tmpl_names());
    }
    return qf_tmpl_init(tm, id, tok, e);
}
