/* chat_template.h — conversations -> token ids + training mask under one of the chat templates Qwen models ship,
 * the one rendering that `prepare` (training data), `generate --chat` and a server's chat endpoint share.
 *
 * Templates (qf_tmpl_id), by name:
 *   qwen1    Qwen v1's finetune.py `preprocess` (io/chatml.h): every piece tokenized on its own, default system
 *            "You are a helpful assistant.", a leading assistant turn dropped; the default without a template.
 *   chatml   the plain ChatML template of Qwen1.5 / Qwen2 instruct models and of qwen-ft's own exports: a system
 *            turn "You are a helpful assistant." when the first message is not one; role names as given.
 *   qwen2.5  Qwen2.5's template: default system "You are Qwen, created by Alibaba Cloud. You are a helpful
 *            assistant.", tools in the system turn, assistant tool calls as <tool_call> blocks, tool results as
 *            <tool_response> blocks in a user turn.
 *   qwen2.5-base  the template of the Qwen2.5 base models (Qwen2.5-0.5B ...): qwen2.5's with the default system
 *            "You are a helpful assistant.".
 *   qwen3    Qwen3's template: no default system; the tools, tool calls and tool results as qwen2.5; assistant turns
 *            after the last user query carry a <think> block of their reasoning (reasoning_content, or the
 *            <think>...</think> part of the content), and the last turn an empty one when it has no reasoning;
 *            earlier assistant turns lose their reasoning.
 * Except for qwen1 the ids are those of transformers' `apply_chat_template(messages, tools=tools)` with the
 * template's text: the whole rendered text is tokenized at once (each piece of content first normalized as the
 * tokenizer normalizes, so that token byte offsets are exact). A chat template file is recognised by its content
 * (qf_tmpl_detect: the SHA-256 of its text without whitespace), never executed.
 *
 * Masks (qf_chat_mask of chatml.h): QF_CHAT_MASK_ASSISTANT marks what the model generates in an assistant turn:
 * every token overlapping the text after "<|im_start|>assistant\n" (the header that add_generation_prompt ends
 * with) through its <|im_end|> (think block and tool calls included), as an assistant-only mask of a
 * `{% generation %}` template would; QF_CHAT_MASK_QWEN adds every <|im_start|>, <|im_end|> and the newline
 * after it (finetune.py's labels). */
#ifndef QF_CHAT_TEMPLATE_H
#define QF_CHAT_TEMPLATE_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "chatml.h"
#include "tokenizer.h"
#include "util.h"

typedef enum { QF_TMPL_QWEN1, QF_TMPL_CHATML, QF_TMPL_QWEN25, QF_TMPL_QWEN3, QF_TMPL_QWEN25_BASE, QF_TMPL_COUNT } qf_tmpl_id;
typedef enum { QF_MSG_SYSTEM, QF_MSG_USER, QF_MSG_ASSISTANT, QF_MSG_TOOL } qf_msg_role;

/* One message; the strings are UTF-8 of the given lengths and stay owned by the caller. */
typedef struct qf_chat_msg {
    qf_msg_role role;
    const char *text; /* content ("" allowed) */
    size_t len;
    const char *reasoning; /* reasoning_content, NULL when absent */
    size_t rlen;
    json_t *tool_calls; /* an array of {"type"?, "function": {"name", "arguments"}} or {"name", "arguments"}; NULL */
} qf_chat_msg;

typedef struct qf_chat_conv {
    const qf_chat_msg *msg;
    size_t n;
    json_t *tools; /* an array of tool definitions, NULL: none */
    int no_thinking; /* transformers' apply_chat_template(..., enable_thinking=False): under qwen3 the generation
                      * prompt ends with an empty think block "<think>\n\n</think>\n\n" (the model answers
                      * without reasoning); the other templates have no such switch and ignore it, as theirs do */
} qf_chat_conv;

typedef struct qf_chat_template {
    qf_tmpl_id id;
    const qf_tokenizer *tok;
    qf_chatml cm; /* the ChatML pieces (qwen1 renders with them; all check the tokens exist) */
} qf_chat_template;

const char *qf_tmpl_name(qf_tmpl_id id);
/* The template of a name ("qwen1", "chatml", "qwen2.5", "qwen3", "qwen2.5-base"; aliases: finetune, qwen, qwen2,
 * qwen1.5): 0, or -1 for an unknown name. */
int qf_tmpl_by_name(const char *name, qf_tmpl_id *id);
/* "qwen1, chatml, qwen2.5, qwen3, qwen2.5-base": for messages */
const char *qf_tmpl_names(void);
/* Recognises the Jinja text of a chat template: 0 with *id, or -1 (unknown). */
int qf_tmpl_recognise(const char *text, size_t len, qf_tmpl_id *id);
/* The chat template beside a tokenizer (qf_tmpl_find's text: chat_template.jinja, else tokenizer_config.json's
 * "chat_template", a string or the "default" of a list of {"name", "template"}), recognised by its content.
 * *found = 0 when there is none (then 0 is returned and *id untouched); an unreadable file or an unknown template
 * is exit 2 naming the file and listing the known names. where[cap] names the file read. */
int qf_tmpl_detect(const char *path, qf_tmpl_id *id, int *found, char *where, size_t cap, qf_err *e);

/* The text of the chat template beside a tokenizer (path: a directory or a file in one), in transformers' order:
 * chat_template.jinja, else tokenizer_config.json's "chat_template" (a string, or the "default" of a list). 0 with
 * *text malloc'd (NUL-terminated, *len bytes) and where[cap] naming the file, or *text = NULL when there is none;
 * exit 2 naming the file when it cannot be read. */
int qf_tmpl_find(const char *path, char **text, size_t *len, char *where, size_t cap, qf_err *e);
/* The SHA-256 (hex) of the exact text: the identity a dataset records (attribute chat_template_sha256). */
void qf_tmpl_sha256(const char *text, size_t len, char hex[65]);
/* qwen-ft's ChatML template text: what the chatml and qwen1 templates render (default system "You are a helpful
 * assistant."), recorded for them where the tokenizer has no text of its own, and written by export. */
const char *qf_tmpl_chatml_text(void);

/* Exit 2 when the tokenizer lacks <|im_start|> / <|im_end|> (chatml.h's checks). */
int qf_tmpl_init(qf_chat_template *t, qf_tmpl_id id, const qf_tokenizer *tok, qf_err *e);
void qf_tmpl_free(qf_chat_template *t);

/* Renders c into out (reset first; out->turn_end: chatml.h). add_generation_prompt: end with the assistant's header as the template's
 * add_generation_prompt does (for generation; with c->no_thinking, Qwen3's empty think block after it). Exit 2 with the reason (naming messages[i] and the key) for what
 * the template cannot render: a system message that is not first (qwen1, chatml), tool messages, tool calls or
 * tools under qwen1/chatml, reasoning under a template that drops it, no turn left (qwen1), text the tokenizer
 * rejects. */
int qf_tmpl_render(const qf_chat_template *t, const qf_chat_conv *c, int add_generation_prompt, qf_chat_mask mode,
                   qf_chat_doc *out, qf_err *e);

/* JSON as Python's json.dumps(v, ensure_ascii=False) writes it (transformers' `tojson` filter), appended to
 * *s (*n bytes, *cap allocated). */
void qf_tmpl_tojson(const json_t *v, char **s, size_t *n, size_t *cap);

#endif
