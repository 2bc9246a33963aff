/* test_serve_tools.c — the tool calls of a chat reply (src/serve/serve_tools.c): hermes blocks parsed into
 * {name, arguments as compact JSON} with the content before them; a reply with none, an unclosed or malformed
 * block, a block without a name or with extra fields, or text after a block stays plain; the bytes of a streaming
 * reply that are content for sure stop before "<tool_call>" or a tail that could begin it. */
#include <string.h>
#include "qf_test.h"
#include "serve/serve_tools.h"

static int parse(const char *t, size_t *cl, json_t **calls) { return qf_tools_parse(t, strlen(t), cl, calls); }

static void parsing(void) {
    size_t cl = 99;
    json_t *c = NULL;
    CHECK(parse("Hello there.", &cl, &c) == 0 && !c, "no block: plain");
    const char *one = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                      "\"n\": [1, 2]}}\n</tool_call>";
    CHECK(parse(one, &cl, &c) == 1 && cl == 13, "one call, content 13 bytes (%zu)", cl);
    const char *name = json_string_value(json_object_get(json_array_get(c, 0), "name"));
    const char *args = json_string_value(json_object_get(json_array_get(c, 0), "arguments"));
    CHECK(name && !strcmp(name, "get_weather") && args && !strcmp(args, "{\"city\":\"Paris\",\"n\":[1,2]}"),
          "the call: %s %s", name ? name : "-", args ? args : "-");
    json_decref(c);
    const char *two = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
                      "\"b\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>\n";
    CHECK(parse(two, &cl, &c) == 2 && cl == 0, "two calls, no content");
    args = json_string_value(json_object_get(json_array_get(c, 1), "arguments"));
    CHECK(args && !strcmp(args, "{\"x\": 1}"), "arguments given as a string: kept as is (%s)", args ? args : "-");
    json_decref(c);
    static const char *const plain[] = {
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}", /* unclosed */
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}\n</tool_call>",  /* malformed JSON */
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                  /* no name */
        "<tool_call>\n{\"name\": \"\", \"arguments\": {}}\n</tool_call>",  /* an empty name */
        "<tool_call>\n{\"name\": \"a\", \"arguments\": 5}\n</tool_call>",  /* arguments neither object nor string */
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}, \"x\": 1}\n</tool_call>",  /* another field */
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call> and then some text",
        "<tool_call>\n[1]\n</tool_call>",
    };
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) {
        c = NULL;
        CHECK(parse(plain[i], &cl, &c) == 0 && !c, "plain %zu: %s", i, plain[i]);
    }
}

static void streaming(void) {
    static const struct { const char *t; size_t safe; } s[] = {
        {"Hello", 5}, {"Hello <", 6}, {"Hello <tool", 6}, {"Hello <tool_cal", 6}, {"Hello <tool_call>", 6},
        {"Hello <tool_call>\n{\"na", 6}, {"a <b", 4}, {"x <toolbox", 10}, {"", 0}, {"<", 0},
    };
    for (size_t i = 0; i < sizeof s / sizeof *s; i++)
        CHECK(qf_tools_content_safe(s[i].t, strlen(s[i].t)) == s[i].safe, "content_safe(%s) = %zu, want %zu", s[i].t,
              qf_tools_content_safe(s[i].t, strlen(s[i].t)), s[i].safe);
}

int main(void) {
    parsing();
    streaming();
    printf("test_serve_tools: %d checks, %d failed\n", qf_test_checks, qf_test_failures);
    return qf_test_failures != 0;
}
