/* serve_tools.h — the tool calls in a chat reply of `qwen-ft serve` (OpenAI's message.tool_calls): Qwen2.5's and
 * Qwen3's templates have the model write each call as a block
 *     <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
 * (the hermes format vLLM's --tool-call-parser hermes reads). A reply parses when it has one or more such blocks,
 * each a JSON object with a string "name" and an object (or string) "arguments", and nothing but whitespace after
 * its first block except further blocks; the text before the first block is the message's content. Anything else
 * stays a plain reply. Pure: bytes in, jansson values out (the fuzz and unit tests reach all of it). */
#ifndef QF_SERVE_TOOLS_H
#define QF_SERVE_TOOLS_H
#include <jansson.h>
#include <stddef.h>

#define QF_TOOL_OPEN "<tool_call>"
#define QF_TOOL_CLOSE "</tool_call>"

/* t[n] as a reply with tool calls: the number of calls (0: a plain reply), *content_len the length of the content
 * before the first block (trailing whitespace cut), *calls a new array of {"name": string, "arguments": string (the
 * arguments object as compact JSON)} (NULL when 0) */
int qf_tools_parse(const char *t, size_t n, size_t *content_len, json_t **calls);
/* while a reply streams: the bytes of t[n] that are content for sure (before any "<tool_call>", and not a prefix of
 * one at its end) */
size_t qf_tools_content_safe(const char *t, size_t n);

#endif
