/* prep_chat.c — the record kinds of `qwen-ft prepare` that need the tokenizer (docs/formats.md, "Making one"):
 *   {"text": "..."}                                     -> tok(text) + eos; every token is a target
 *   {"conversations": [{"from": R, "value": V}, ...], "system"?, "tools"?}   (ShareGPT, LLaMA-Factory's too)
 *   {"messages": [{"role": R, "content": V, "reasoning_content"?, "tool_calls"?}, ...], "tools"?}
 *                                                       -> a conversation (prep_conv) under the chat template
 *                                                          (io/chat_template.h), whose document prep_chat_render
 *                                                          makes for every chat-like record
 * Roles: system; user or human; assistant or gpt; tool or observation; function_call (ShareGPT: the call as JSON).
 * A system turn replaces --system for its record. Anything malformed is PREP_BAD with a reason naming the key. */
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

void prep_conv_push(prep_conv *c, qf_chat_msg m) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->msg = qf_realloc(c->msg, c->cap * sizeof *c->msg);
    }
    c->msg[c->n++] = m;
}

void prep_conv_free(prep_conv *c) {
    free(c->msg);
    json_decref(c->hold);
    memset(c, 0, sizeof *c);
}

int prep_chat_render(const prep_opts *o, const char *key, const prep_conv *c, prep_doc *doc, char *why, size_t cap) {
    if (!o->tok && !o->check) return snprintf(why, cap, "a conversation record " PREP_NEED_TOKENIZER), PREP_FATAL;
    if (o->tok && !o->tmpl) return snprintf(why, cap, "a conversation record: %s", o->tmpl_why), PREP_FATAL;
    int qwen1 = !o->tmpl || o->tmpl->id == QF_TMPL_QWEN1;
    if (qwen1 || o->tmpl->id == QF_TMPL_CHATML)
        for (size_t i = 1; i < c->n; i++)
            if (c->msg[i].role == QF_MSG_SYSTEM)
                return snprintf(why, cap, "%s[%zu].%s: a system turn may only come first (template %s)", key, i,
                                strcmp(key, "messages") ? "from" : "role", qwen1 ? "qwen1" : "chatml"), PREP_BAD;
    /* --system when the conversation has none (qwen1's own default is --system's default) */
    const char *sys = o->system ? o->system : qwen1 ? "You are a helpful assistant." : NULL;
    int has_sys = c->n > 0 && c->msg[0].role == QF_MSG_SYSTEM;
    qf_chat_msg *msgs = qf_malloc((c->n + 1) * sizeof *msgs);
    size_t n = 0;
    if (!has_sys && sys) msgs[n++] = (qf_chat_msg){QF_MSG_SYSTEM, sys, strlen(sys), NULL, 0, NULL};
    memcpy(msgs + n, c->msg, c->n * sizeof *msgs);
    n += c->n;
    /* qwen1 (finetune.py) drops one leading assistant turn */
    size_t s0 = n > 0 && msgs[0].role == QF_MSG_SYSTEM ? 1 : 0;
    size_t first = s0 + (qwen1 && n > s0 && msgs[s0].role == QF_MSG_ASSISTANT ? 1 : 0);
    int rc = PREP_OK;
    if (!o->tok) { /* --check without a tokenizer: the structure only (the rule of qf_chatml_render) */
        if (n == first) {
            snprintf(why, cap, "%s: no user or assistant turn to train on (a leading assistant turn is "
                               "dropped, as Qwen's finetune.py does)", key);
            rc = PREP_BAD;
        }
        doc->n = 0;
    } else {
        qf_chat_doc d = {0};
        qf_err e = {0};
        qf_chat_conv cv = {msgs, n, c->tools, 0}; /* training text: no generation prompt */
        qf_chat_mask mode = o->mask_given ? o->mask : qwen1 ? QF_CHAT_MASK_QWEN : QF_CHAT_MASK_ASSISTANT;
        if (qf_tmpl_render(o->tmpl, &cv, 0, mode, &d, &e)) {
            snprintf(why, cap, "%s: %s", key, e.msg);
            rc = PREP_BAD;
        } else {
            prep_doc_set(doc, d.ids.v, d.mask, d.ids.n);
            if ((int64_t)d.n_turn_end > doc->cap_turn_end) {
                doc->cap_turn_end = (int64_t)d.n_turn_end;
                doc->turn_end = qf_realloc(doc->turn_end, d.n_turn_end * sizeof *doc->turn_end);
            }
            for (size_t i = 0; i < d.n_turn_end; i++) doc->turn_end[i] = (int64_t)d.turn_end[i];
            doc->n_turn_end = (int64_t)d.n_turn_end;
        }
        qf_chat_doc_free(&d);
    }
    if (rc == PREP_OK) {
        prep_content_begin(doc);
        if (s0) prep_content_text(doc, 's', msgs[0].text, msgs[0].len);
        else prep_content_text(doc, 's', "", 0);
        doc->turns = (int64_t)(n - first);
        doc->empty_turns = 0;
        for (size_t i = first; i < n; i++) {
            const qf_chat_msg *m = &msgs[i];
            char tag = m->role == QF_MSG_USER ? 'u' : m->role == QF_MSG_ASSISTANT ? 'a' : m->role == QF_MSG_TOOL ? 'o' : 's';
            if (m->reasoning) prep_content_text(doc, 'r', m->reasoning, m->rlen);
            prep_content_text(doc, tag, m->text, m->len);
            if (m->tool_calls) {
                char *js = json_dumps(m->tool_calls, JSON_COMPACT);
                if (js) prep_content_text(doc, 'c', js, strlen(js));
                free(js);
            }
            doc->empty_turns += prep_blank_text(m->text, m->len) && !m->tool_calls;
        }
        if (c->tools) {
            char *js = json_dumps(c->tools, JSON_COMPACT);
            if (js) prep_content_text(doc, 'T', js, strlen(js));
            free(js);
        }
        doc->unanswered = n > first && msgs[n - 1].role != QF_MSG_ASSISTANT;
    }
    free(msgs);
    return rc;
}

/* the role table entry of name, or -2 */
int prep_role_of(const char *name) {
    for (size_t i = 0; i < sizeof prep_roles / sizeof *prep_roles; i++)
        if (!strcmp(name, prep_roles[i].name)) return prep_roles[i].role;
    return -2;
}

/* roles of a conversation turn: prep_roles, and the tool roles (OpenAI's tool, ShareGPT's observation and
 * function_call); -2 unknown; *call = 1 for function_call (the value is the call as JSON) */
static int prep_turn_role(const char *name, int *call) {
    *call = 0;
    if (!strcmp(name, "tool") || !strcmp(name, "observation")) return QF_MSG_TOOL;
    if (!strcmp(name, "function_call")) return *call = 1, QF_MSG_ASSISTANT;
    int r = prep_role_of(name);
    return r == PREP_ROLE_SYSTEM ? QF_MSG_SYSTEM : r == QF_CHAT_USER ? QF_MSG_USER : r == QF_CHAT_ASSISTANT ? QF_MSG_ASSISTANT : -2;
}

/* x, kept alive by c->hold */
static json_t *prep_hold(prep_conv *c, json_t *x) {
    if (!c->hold) c->hold = json_array();
    json_array_append_new(c->hold, x);
    return x;
}

/* v, or the JSON that the string v holds (kept in c->hold); NULL with why on a bad string */
static json_t *prep_json_or_string(prep_conv *c, json_t *v, const char *what, char *why, size_t cap) {
    if (!json_is_string(v)) return v;
    json_error_t je;
    json_t *x = json_loadb(json_string_value(v), json_string_length(v), JSON_REJECT_DUPLICATES, &je);
    if (!x) return snprintf(why, cap, "%s is a string that is not JSON (%s)", what, je.text), NULL;
    return prep_hold(c, x);
}

int prep_conv_parse(json_t *rec, prep_conv *c, const char **keyp, char *why, size_t cap) {
    int sharegpt = prep_get(rec, "conversations") != NULL;
    const char *key = sharegpt ? "conversations" : "messages";
    const char *rkey = sharegpt ? "from" : "role", *vkey = sharegpt ? "value" : "content";
    *keyp = key;
    json_t *a = prep_get(rec, key);
    if (!a || !json_is_array(a))
        return snprintf(why, cap, "%s is %s, expected an array of turns", key, a ? prep_json_type(a) : "null"),
               PREP_BAD;
    size_t n = json_array_size(a);
    if (n == 0) return snprintf(why, cap, "%s is empty", key), PREP_BAD;
    json_t *tools = prep_get(rec, "tools");
    if (tools) {
        if (!(tools = prep_json_or_string(c, tools, "tools", why, cap))) return PREP_BAD;
        if (!json_is_array(tools))
            return snprintf(why, cap, "tools is %s, expected an array of tool definitions", prep_json_type(tools)),
                   PREP_BAD;
        c->tools = json_array_size(tools) ? tools : NULL;
    }
    json_t *top_sys = prep_get(rec, "system"); /* ShareGPT (LLaMA-Factory): the system prompt beside the turns */
    if (top_sys && !json_is_string(top_sys))
        return snprintf(why, cap, "system is %s, expected a string", prep_json_type(top_sys)), PREP_BAD;
    if (top_sys) prep_conv_push(c, (qf_chat_msg){QF_MSG_SYSTEM, json_string_value(top_sys), json_string_length(top_sys), NULL, 0, NULL});
    for (size_t i = 0; i < n; i++) {
        json_t *turn = json_array_get(a, i), *r = NULL, *v = NULL;
        int role, call;
        if (!json_is_object(turn))
            return snprintf(why, cap, "%s[%zu] is %s, expected an object {\"%s\": ..., \"%s\": ...}", key, i,
                            prep_json_type(turn), rkey, vkey), PREP_BAD;
        if (!(r = prep_get(turn, rkey)) || !json_is_string(r))
            return snprintf(why, cap, "%s[%zu].%s is %s, expected a role string (%s uses %s/%s)", key, i, rkey,
                            r ? prep_json_type(r) : "missing", key, rkey, vkey), PREP_BAD;
        if ((role = prep_turn_role(json_string_value(r), &call)) == -2)
            return snprintf(why, cap, "%s[%zu].%s: unknown role \"%.64s\" (expected system, user, human, assistant, "
                            "gpt, tool, observation or function_call)", key, i, rkey, json_string_value(r)), PREP_BAD;
        json_t *calls = sharegpt ? NULL : prep_get(turn, "tool_calls");
        v = prep_get(turn, vkey);
        if (calls && (!json_is_array(calls) || role != QF_MSG_ASSISTANT))
            return snprintf(why, cap, "%s[%zu].tool_calls: expected an array, in an assistant turn", key, i), PREP_BAD;
        if (call) { /* ShareGPT function_call: the value is {"name", "arguments"} (or a list of them) as JSON */
            char what[80];
            snprintf(what, sizeof what, "%s[%zu].%s", key, i, vkey);
            json_t *x = v ? prep_json_or_string(c, v, what, why, cap) : NULL;
            if (!x) return v ? PREP_BAD : (snprintf(why, cap, "%s is missing", what), PREP_BAD);
            if (json_is_object(x)) {
                json_t *one = prep_hold(c, json_array());
                json_array_append(one, x);
                x = one;
            }
            if (!json_is_array(x))
                return snprintf(why, cap, "%s: expected a function call {\"name\", \"arguments\"} as JSON", what), PREP_BAD;
            if (c->n > 0 && c->msg[c->n - 1].role == QF_MSG_ASSISTANT && !c->msg[c->n - 1].tool_calls) {
                c->msg[c->n - 1].tool_calls = x; /* gpt then function_call: one assistant turn with a call */
                continue;
            }
            prep_conv_push(c, (qf_chat_msg){QF_MSG_ASSISTANT, "", 0, NULL, 0, x});
            continue;
        }
        if (!v && calls) v = prep_hold(c, json_string(""));
        if (!v || !json_is_string(v))
            return snprintf(why, cap, "%s[%zu].%s is %s, expected a string", key, i, vkey, v ? prep_json_type(v) : "missing"),
                   PREP_BAD;
        json_t *rs = sharegpt ? NULL : prep_get(turn, "reasoning_content");
        if (rs && (!json_is_string(rs) || role != QF_MSG_ASSISTANT))
            return snprintf(why, cap, "%s[%zu].reasoning_content: expected a string, in an assistant turn", key, i),
                   PREP_BAD;
        if (role == QF_MSG_SYSTEM && top_sys)
            return snprintf(why, cap, "%s[%zu]: a system turn beside the record's \"system\": which one is meant?", key, i),
                   PREP_BAD;
        prep_conv_push(c, (qf_chat_msg){(qf_msg_role)role, json_string_value(v), json_string_length(v),
                                        rs ? json_string_value(rs) : NULL, rs ? json_string_length(rs) : 0,
                                        calls && json_array_size(calls) ? calls : NULL});
    }
    return PREP_OK;
}

int prep_chat(const prep_opts *o, json_t *rec, prep_doc *doc, char *why, size_t cap) {
    prep_conv c = {0};
    const char *key;
    int rc = prep_conv_parse(rec, &c, &key, why, cap);
    if (rc == PREP_OK) rc = prep_chat_render(o, key, &c, doc, why, cap);
    prep_conv_free(&c);
    return rc;
}
