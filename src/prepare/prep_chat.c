/* prep_chat.c — the record kinds of `qwen-ft prepare` that need the tokenizer (docs/formats.md, "Making one"):
 *   {"text": "..."}                                     -> tok(text) + eos; every token is a target
 *   {"conversations": [{"from": R, "value": V}, ...]}   -> ChatML as Qwen's finetune.py (io/chatml.h)
 *   {"messages": [{"role": R, "content": V}, ...]}      -> the same
 * Roles: system; user or human; assistant or gpt (either form accepts every name). A system turn may only come
 * first; it replaces --system for its record. Anything else malformed is PREP_BAD with a reason naming the key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "prep.h"

#define PREP_NEED_TOKENIZER                                                                                  \
    "needs a tokenizer: pass --tokenizer (tokenizer.json, qwen.tiktoken, or an HF model directory holding one)"

static const struct {
    const char *name;
    int role;
} prep_roles[] = {
    {"system", PREP_ROLE_SYSTEM},      {"user", QF_CHAT_USER}, {"human", QF_CHAT_USER},
    {"assistant", QF_CHAT_ASSISTANT}, {"gpt", QF_CHAT_ASSISTANT},
};

/* copies ids (and mask; NULL = all ones) into doc */
static void prep_doc_set(prep_doc *doc, const int32_t *ids, const uint8_t *mask, size_t n) {
    prep_doc_reserve(doc, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        doc->tok[i] = (uint32_t)ids[i];
        doc->mask[i] = mask ? mask[i] : 1;
    }
    doc->n = (int64_t)n;
}

int prep_text_value(const prep_opts *o, const char *key, const char *text, size_t len, prep_doc *doc, char *why,
                    size_t cap) {
    if (!o->tok && !o->check) return snprintf(why, cap, "a plain-text record " PREP_NEED_TOKENIZER), PREP_FATAL;
    prep_content_begin(doc);
    prep_content_text(doc, 't', text, len);
    if (!o->tok) { /* --check without a tokenizer: the record's structure only */
        doc->n = 0;
        return PREP_OK;
    }
    qf_ids ids = {0};
    qf_err e = {0};
    if (qf_tok_encode(o->tok, text, len, &ids, &e)) {
        free(ids.v);
        return snprintf(why, cap, "%s: %s", key, e.msg), PREP_BAD;
    }
    qf_ids_push(&ids, (int32_t)o->eos_id);
    prep_doc_set(doc, ids.v, NULL, ids.n);
    free(ids.v);
    return PREP_OK;
}

int prep_text(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap) {
    json_t *t = prep_get(rec, "text");
    if (!t || !json_is_string(t))
        return snprintf(why, cap, "text is %s, expected a string", t ? prep_json_type(t) : "null"), PREP_BAD;
    return prep_text_value(o, "text", json_string_value(t), json_string_length(t), doc, why, cap);
}

/* 1 if s[n] is empty or only ASCII whitespace */
static int prep_blank_text(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' && s[i] != '\f' && s[i] != '\v') return 0;
    return 1;
}

int prep_chat_render(const prep_opts *o, const char *key, const char *system, size_t sys_len,
                     const qf_chat_turn *turns, size_t n, prep_doc *doc, char *why, size_t cap) {
    if (!o->tok && !o->check) return snprintf(why, cap, "a conversation record " PREP_NEED_TOKENIZER), PREP_FATAL;
    if (o->tok && !o->chatml) return snprintf(why, cap, "a conversation record: %s", o->chatml_why), PREP_FATAL;
    if (!system) system = o->system, sys_len = strlen(o->system);
    /* the turns rendered: finetune.py drops one leading assistant turn */
    size_t first = n > 0 && turns[0].role == QF_CHAT_ASSISTANT ? 1 : 0;
    if (!o->tok) { /* --check without a tokenizer: the structure only (the rule of qf_chatml_render) */
        if (n == first)
            return snprintf(why, cap, "%s: no user or assistant turn to train on (a leading assistant turn is "
                                      "dropped, as Qwen's finetune.py does)", key),
                   PREP_BAD;
        doc->n = 0;
    } else {
        qf_chat_doc d = {0};
        qf_err e = {0};
        int bad = qf_chatml_render(o->chatml, o->tok, system, sys_len, turns, n, o->mask, &d, &e);
        if (bad)
            snprintf(why, cap, "%s: %s", key, e.msg);
        else
            prep_doc_set(doc, d.ids.v, d.mask, d.ids.n);
        qf_chat_doc_free(&d);
        if (bad) return PREP_BAD;
    }
    prep_content_begin(doc);
    prep_content_text(doc, 's', system, sys_len);
    doc->turns = (int64_t)(n - first);
    doc->empty_turns = 0;
    for (size_t i = first; i < n; i++) {
        prep_content_text(doc, turns[i].role == QF_CHAT_USER ? 'u' : 'a', turns[i].text, turns[i].len);
        doc->empty_turns += prep_blank_text(turns[i].text, turns[i].len);
    }
    doc->unanswered = n > first && turns[n - 1].role == QF_CHAT_USER;
    return PREP_OK;
}

/* the role table entry of name, or -2 */
int prep_role_of(const char *name) {
    for (size_t i = 0; i < sizeof prep_roles / sizeof *prep_roles; i++)
        if (!strcmp(name, prep_roles[i].name)) return prep_roles[i].role;
    return -2;
}

int prep_chat(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap) {
    int sharegpt = prep_get(rec, "conversations") != NULL;
    const char *key = sharegpt ? "conversations" : "messages";
    const char *rkey = sharegpt ? "from" : "role", *vkey = sharegpt ? "value" : "content";
    json_t *c = prep_get(rec, key);
    if (!c || !json_is_array(c))
        return snprintf(why, cap, "%s is %s, expected an array of turns", key, c ? prep_json_type(c) : "null"),
               PREP_BAD;
    if (!o->tok && !o->check) return snprintf(why, cap, "a conversation record " PREP_NEED_TOKENIZER), PREP_FATAL;
    if (o->tok && !o->chatml) return snprintf(why, cap, "a conversation record: %s", o->chatml_why), PREP_FATAL;
    size_t n = json_array_size(c);
    if (n == 0) return snprintf(why, cap, "%s is empty", key), PREP_BAD;
    qf_chat_turn *turns = qf_malloc(n * sizeof *turns);
    size_t nt = 0;
    const char *system = o->system;
    size_t sys_len = strlen(system);
    int rc = PREP_OK;
    for (size_t i = 0; i < n && rc == PREP_OK; i++) {
        json_t *turn = json_array_get(c, i), *r = NULL, *v = NULL;
        int role = -2;
        if (!json_is_object(turn)) {
            snprintf(why, cap, "%s[%zu] is %s, expected an object {\"%s\": ..., \"%s\": ...}", key, i,
                     prep_json_type(turn), rkey, vkey);
            rc = PREP_BAD;
        } else if (!(r = prep_get(turn, rkey)) || !json_is_string(r)) {
            snprintf(why, cap, "%s[%zu].%s is %s, expected a role string (%s uses %s/%s)", key, i, rkey,
                     r ? prep_json_type(r) : "missing", key, rkey, vkey);
            rc = PREP_BAD;
        } else if ((role = prep_role_of(json_string_value(r))) == -2) {
            snprintf(why, cap, "%s[%zu].%s: unknown role \"%.64s\" (expected system, user, human, assistant or gpt)",
                     key, i, rkey, json_string_value(r));
            rc = PREP_BAD;
        } else if (!(v = prep_get(turn, vkey)) || !json_is_string(v)) {
            snprintf(why, cap, "%s[%zu].%s is %s, expected a string", key, i, vkey, v ? prep_json_type(v) : "missing");
            rc = PREP_BAD;
        } else if (role == PREP_ROLE_SYSTEM && i > 0) {
            snprintf(why, cap, "%s[%zu].%s: a system turn may only come first", key, i, rkey);
            rc = PREP_BAD;
        } else if (role == PREP_ROLE_SYSTEM) {
            system = json_string_value(v);
            sys_len = json_string_length(v);
        } else {
            turns[nt++] = (qf_chat_turn){(qf_chat_role)role, json_string_value(v), json_string_length(v)};
        }
    }
    if (rc == PREP_OK)
        rc = prep_chat_render(o, key, system, sys_len, turns, nt, doc, why, cap);
    free(turns);
    return rc;
}
