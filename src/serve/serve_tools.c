/* serve_tools.c — see serve_tools.h. */
#include "serve_tools.h"
#include <stdlib.h>
#include <string.h>

static const char *tools_find(const char *t, size_t n, const char *s) {
    const size_t k = strlen(s);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(t + i, s, k)) return t + i;
    return NULL;
}

static int tools_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* one block's inside: {"name": string, "arguments": object or string} -> {"name", "arguments": compact JSON} */
static json_t *tools_call(const char *t, size_t n) {
    json_error_t je;
    json_t *o = json_loadb(t, n, 0, &je);
    json_t *name = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
    json_t *call = NULL;
    if (json_is_object(o) && json_is_string(name) && json_string_length(name) > 0 &&
        (json_is_object(args) || json_is_string(args)) && json_object_size(o) == 2) {
        char *a = json_is_string(args) ? strdup(json_string_value(args)) : json_dumps(args, JSON_COMPACT);
        if (a) call = json_pack("{s:O,s:s}", "name", name, "arguments", a);
        free(a);
    }
    json_decref(o);
    return call;
}

int qf_tools_parse(const char *t, size_t n, size_t *content_len, json_t **calls) {
    *calls = NULL;
    const char *first = tools_find(t, n, QF_TOOL_OPEN);
    if (!first) return 0;
    json_t *a = json_array();
    const char *p = first, *end = t + n;
    const size_t ko = strlen(QF_TOOL_OPEN), kc = strlen(QF_TOOL_CLOSE);
    for (;;) {
        while (p < end && tools_ws(*p)) p++;
        if (p == end) break;
        if ((size_t)(end - p) < ko || memcmp(p, QF_TOOL_OPEN, ko)) goto plain; /* text after a block */
        const char *in = p + ko, *close = tools_find(in, (size_t)(end - in), QF_TOOL_CLOSE);
        if (!close) goto plain; /* an unclosed block (cut by max_tokens) */
        json_t *c = tools_call(in, (size_t)(close - in));
        if (!c) goto plain;
        json_array_append_new(a, c);
        p = close + kc;
    }
    size_t k = (size_t)(first - t);
    while (k > 0 && tools_ws(t[k - 1])) k--;
    *content_len = k;
    *calls = a;
    return (int)json_array_size(a);
plain:
    json_decref(a);
    return 0;
}

size_t qf_tools_content_safe(const char *t, size_t n) {
    const char *first = tools_find(t, n, QF_TOOL_OPEN);
    if (first) return (size_t)(first - t);
    const size_t ko = strlen(QF_TOOL_OPEN);
    for (size_t k = ko - 1; k > 0; k--) /* the longest tail that could begin "<tool_call>" */
        if (k <= n && !memcmp(t + n - k, QF_TOOL_OPEN, k)) return n - k;
    return n;
}
