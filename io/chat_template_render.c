/* chat_template_render.c — the text of a conversation under the chatml, qwen2.5 and qwen3 templates, byte for byte
 * what their Jinja renders (chat_template.h), with the mask bits of every byte (chat_template_impl.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat_template_impl.h"

#define QWEN25_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
#define QWEN25_BASE_SYSTEM "You are a helpful assistant." /* the Qwen2.5 base models' template */
#define CHATML_SYSTEM "You are a helpful assistant."
#define TOOLS_HEAD                                                                                                   \
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "      \
    "function signatures within <tools></tools> XML tags:\n<tools>"
#define TOOLS_TAIL                                                                                                   \
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "         \
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "                  \
    "<args-json-object>}\n</tool_call>"

static const char *const role_names[] = {"system", "user", "assistant", "tool"};

/* <|im_start|> (a target under the qwen mask) */
static void tb_start(qf_tb *b) { qf_tb_lit(b, "<|im_start|>", QF_TB_Q); }
/* <|im_end|> and its newline; extra: the mask bits of <|im_end|> beyond the qwen mask's */
static void tb_end(qf_tb *b, uint8_t extra) {
    qf_tb_lit(b, "<|im_end|>", QF_TB_Q | extra);
    qf_tb_lit(b, "\n", QF_TB_Q);
}

/* the tools block of the system turn: head, each tool as JSON on its own line, tail */
static void tb_tools(qf_tb *b, const json_t *tools) {
    qf_tb_lit(b, TOOLS_HEAD, 0);
    char *js = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        n = 0;
        qf_tmpl_tojson(json_array_get(tools, i), &js, &n, &cap);
        qf_tb_lit(b, "\n", 0);
        qf_tb_content(b, js, n, 0);
    }
    free(js);
    qf_tb_lit(b, TOOLS_TAIL, 0);
}

/* one tool call as both templates write it; qwen3 writes a string `arguments` as it is, qwen2.5 through tojson */
static int tb_tool_call(qf_tb *b, json_t *tc, size_t i, size_t k, int raw_string_args, uint8_t m, char *why,
                        size_t cap) {
    json_t *f = json_object_get(tc, "function");
    if (f) tc = f;
    json_t *name = json_object_get(tc, "name"), *args = json_object_get(tc, "arguments");
    if (!json_is_object(tc) || !json_is_string(name) || !args)
        return snprintf(why, cap, "messages[%zu].tool_calls[%zu]: expected {\"name\": string, \"arguments\": ...} "
                                  "(or inside \"function\")", i, k), -1;
    qf_tb_lit(b, "<tool_call>\n{\"name\": \"", m);
    qf_tb_content(b, json_string_value(name), json_string_length(name), m);
    qf_tb_lit(b, "\", \"arguments\": ", m);
    if (raw_string_args && json_is_string(args)) {
        qf_tb_content(b, json_string_value(args), json_string_length(args), m);
    } else {
        char *js = NULL;
        size_t n = 0, jc = 0;
        qf_tmpl_tojson(args, &js, &n, &jc);
        qf_tb_content(b, js, n, m);
        free(js);
    }
    qf_tb_lit(b, "}\n</tool_call>", m);
    return 0;
}

/* a tool result: consecutive tool messages share one user turn */
static void tb_tool_msg(qf_tb *b, const qf_chat_conv *c, size_t i) {
    if (i == 0 || c->msg[i - 1].role != QF_MSG_TOOL) tb_start(b), qf_tb_lit(b, "user", 0);
    qf_tb_lit(b, "\n<tool_response>\n", 0);
    qf_tb_content(b, c->msg[i].text, c->msg[i].len, 0);
    qf_tb_lit(b, "\n</tool_response>", 0);
    if (i + 1 == c->n || c->msg[i + 1].role != QF_MSG_TOOL) tb_end(b, 0);
}

/* a plain turn: <|im_start|>ROLE\nCONTENT<|im_end|>\n, the content a target for the assistant */
static void tb_plain(qf_tb *b, const qf_chat_msg *m) {
    uint8_t a = m->role == QF_MSG_ASSISTANT ? QF_TB_A | QF_TB_Q : 0;
    tb_start(b);
    qf_tb_lit(b, role_names[m->role], 0);
    qf_tb_lit(b, "\n", 0);
    qf_tb_content(b, m->text, m->len, a);
    tb_end(b, a & QF_TB_A);
    if (a) qf_tb_turn_end(b);
}

static int render_chatml(const qf_chat_conv *c, qf_tb *b, char *why, size_t cap) {
    for (size_t i = 0; i < c->n; i++) {
        if (i == 0 && c->msg[0].role != QF_MSG_SYSTEM) {
            tb_start(b);
            qf_tb_lit(b, "system\n" CHATML_SYSTEM, 0);
            tb_end(b, 0);
        }
        tb_plain(b, &c->msg[i]);
    }
    (void)why, (void)cap;
    return 0;
}

static int has_calls(const qf_chat_msg *m) { return m->tool_calls && json_array_size(m->tool_calls) > 0; }

static int render_qwen25(const qf_chat_conv *c, const char *default_system, qf_tb *b, char *why, size_t cap) {
    int sys0 = c->n > 0 && c->msg[0].role == QF_MSG_SYSTEM;
    tb_start(b);
    qf_tb_lit(b, "system\n", 0);
    if (sys0) qf_tb_content(b, c->msg[0].text, c->msg[0].len, 0);
    else qf_tb_lit(b, default_system, 0);
    if (c->tools) qf_tb_lit(b, "\n\n", 0), tb_tools(b, c->tools);
    tb_end(b, 0);
    for (size_t i = sys0 ? 1 : 0; i < c->n; i++) {
        const qf_chat_msg *m = &c->msg[i];
        if (m->role == QF_MSG_TOOL) {
            tb_tool_msg(b, c, i);
        } else if (m->role != QF_MSG_ASSISTANT || !has_calls(m)) {
            tb_plain(b, m);
        } else {
            uint8_t a = QF_TB_A | QF_TB_Q;
            tb_start(b);
            qf_tb_lit(b, "assistant", 0);
            /* the newline after the role is the header's (what add_generation_prompt ends with), not a target */
            if (m->len) qf_tb_lit(b, "\n", 0), qf_tb_content(b, m->text, m->len, a);
            for (size_t k = 0; k < json_array_size(m->tool_calls); k++) {
                qf_tb_lit(b, "\n", k == 0 && !m->len ? 0 : a);
                if (tb_tool_call(b, json_array_get(m->tool_calls, k), i, k, 0, a, why, cap)) return -1;
            }
            tb_end(b, QF_TB_A);
            qf_tb_turn_end(b);
        }
    }
    return 0;
}

/* s[n] without leading (lead) / trailing (trail) newlines */
static void strip_nl(const char **s, size_t *n, int lead, int trail) {
    while (lead && *n && **s == '\n') (*s)++, (*n)--;
    while (trail && *n && (*s)[*n - 1] == '\n') (*n)--;
}

/* the first (last = 0) or last occurrence of pat in s[n], or NULL */
static const char *find(const char *s, size_t n, const char *pat, int last) {
    size_t k = strlen(pat);
    const char *hit = NULL;
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, pat, k)) {
            hit = s + i;
            if (!last) break;
        }
    return hit;
}

static int is_tool_response(const qf_chat_msg *m) {
    static const char a[] = "<tool_response>", z[] = "</tool_response>";
    return m->len >= sizeof a - 1 && !memcmp(m->text, a, sizeof a - 1) && m->len >= sizeof z - 1 &&
           !memcmp(m->text + m->len - (sizeof z - 1), z, sizeof z - 1);
}

static int render_qwen3(const qf_chat_conv *c, int gen, qf_tb *b, char *why, size_t cap) {
    int sys0 = c->n > 0 && c->msg[0].role == QF_MSG_SYSTEM;
    if (c->tools) {
        tb_start(b);
        qf_tb_lit(b, "system\n", 0);
        if (sys0) qf_tb_content(b, c->msg[0].text, c->msg[0].len, 0), qf_tb_lit(b, "\n\n", 0);
        tb_tools(b, c->tools);
        tb_end(b, 0);
    } else if (sys0) {
        tb_start(b);
        qf_tb_lit(b, "system\n", 0);
        qf_tb_content(b, c->msg[0].text, c->msg[0].len, 0);
        tb_end(b, 0);
    }
    /* the last user query: the last user message that is not a wrapped tool response */
    size_t last_query = c->n ? c->n - 1 : 0;
    for (size_t j = c->n; j-- > 0;)
        if (c->msg[j].role == QF_MSG_USER && !is_tool_response(&c->msg[j])) {
            last_query = j;
            break;
        }
    for (size_t i = sys0 ? 1 : 0; i < c->n; i++) {
        const qf_chat_msg *m = &c->msg[i];
        if (m->role == QF_MSG_USER || m->role == QF_MSG_SYSTEM) {
            tb_plain(b, m);
            continue;
        }
        if (m->role == QF_MSG_TOOL) {
            tb_tool_msg(b, c, i);
            continue;
        }
        const char *content = m->text, *rs = "";
        size_t clen = m->len, rlen = 0;
        if (m->reasoning) {
            rs = m->reasoning, rlen = m->rlen;
        } else if (find(content, clen, "</think>", 0)) {
            const char *first = find(content, clen, "</think>", 0), *lastc = find(content, clen, "</think>", 1);
            rs = content, rlen = (size_t)(first - content);
            strip_nl(&rs, &rlen, 0, 1);
            const char *open = find(rs, rlen, "<think>", 1);
            if (open) rlen -= (size_t)(open + 7 - rs), rs = open + 7;
            strip_nl(&rs, &rlen, 1, 0);
            clen -= (size_t)(lastc + 8 - content), content = lastc + 8;
            strip_nl(&content, &clen, 1, 0);
        }
        uint8_t a = QF_TB_A | QF_TB_Q;
        tb_start(b);
        qf_tb_lit(b, "assistant\n", 0);
        if (i > last_query && (i + 1 == c->n || rlen > 0)) {
            strip_nl(&rs, &rlen, 1, 1);
            strip_nl(&content, &clen, 1, 0);
            qf_tb_lit(b, "<think>\n", a);
            qf_tb_content(b, rs, rlen, a);
            qf_tb_lit(b, "\n</think>\n\n", a);
        }
        qf_tb_content(b, content, clen, a);
        if (m->tool_calls)
            for (size_t k = 0; k < json_array_size(m->tool_calls); k++) {
                if (k > 0 || clen > 0) qf_tb_lit(b, "\n", a);
                if (tb_tool_call(b, json_array_get(m->tool_calls, k), i, k, 1, a, why, cap)) return -1;
            }
        tb_end(b, QF_TB_A);
        qf_tb_turn_end(b);
    }
    (void)gen;
    return 0;
}

int qf_tmpl_text(qf_tmpl_id id, const qf_chat_conv *c, int gen, qf_tb *b, char *why, size_t cap) {
    int rc = id == QF_TMPL_CHATML ? render_chatml(c, b, why, cap)
             : id == QF_TMPL_QWEN25 ? render_qwen25(c, QWEN25_SYSTEM, b, why, cap)
             : id == QF_TMPL_QWEN25_BASE ? render_qwen25(c, QWEN25_BASE_SYSTEM, b, why, cap)
                                    : render_qwen3(c, gen, b, why, cap);
    if (rc == 0 && gen) tb_start(b), qf_tb_lit(b, "assistant\n", 0);
    /* Qwen3's {%- if enable_thinking is defined and enable_thinking is false %}: part of the prompt, not generated */
    if (rc == 0 && gen && id == QF_TMPL_QWEN3 && c->no_thinking) qf_tb_lit(b, "<think>\n\n</think>\n\n", 0);
    return rc;
}
