/* gen_prompts.h — the prompts of `qwen-ft generate` as token ids: --prompt TEXT, --prompt-ids LIST, and
 * --prompts FILE.jsonl with one record per line:
 *   {"prompt": TEXT}                       encoded as it is (special tokens in the text recognised), or with
 *                                          --chat wrapped as a ChatML user turn
 *   {"messages": [{"role", "content"}...], "tools"?} (also {"conversations": [{"from", "value"}...]}), rendered
 *                                          under the chat template as `qwen-ft prepare` renders conversations
 *                                          (io/chat_template.h, the same code); "enable_thinking": false as
 *                                          transformers' kwarg (Qwen3: an empty think block opens the reply)
 *   {"prompt_ids": [1, 2, 3]}              ids as they are
 * A chat prompt ends as the template's add_generation_prompt ends it ("<|im_start|>assistant\n"), so the model
 * writes the assistant's turn; the system prompt is the conversation's own system turn, else `system`, else the
 * template's default. */
#ifndef QF_GEN_PROMPTS_H
#define QF_GEN_PROMPTS_H
#include <stdint.h>
#include "chat_template.h"
#include "tokenizer.h"
#include "util.h"

typedef struct qf_gen_prompt {
    int32_t *ids;
    int n;
} qf_gen_prompt;

typedef struct qf_gen_prompts {
    qf_gen_prompt *v;
    int n, cap;
} qf_gen_prompts;

/* How text prompts become ids. tok NULL: only id prompts are possible; tmpl NULL: no chat (tmpl_why says why, e.g.
 * the tokenizer lacks <|im_start|>). */
typedef struct qf_gen_src {
    const qf_tokenizer *tok;
    const qf_chat_template *tmpl;
    const char *tmpl_why;
    const char *system; /* NULL: the template's default */
    int chat; /* --chat: {"prompt"} and --prompt TEXT become a user turn */
    int no_thinking; /* --enable-thinking false: qf_chat_conv.no_thinking of every chat prompt (a record's own
                      * "enable_thinking": true|false decides for it) */
} qf_gen_src;

/* Appends --prompt TEXT (what = "--prompt" in messages). */
int qf_gen_prompt_text(const qf_gen_src *src, const char *text, qf_gen_prompts *out, const char *what, qf_err *e);
/* Appends --prompt-ids "1,2,3". */
int qf_gen_prompt_idlist(const char *list, qf_gen_prompts *out, qf_err *e);
/* Appends a conversation record ({"messages": [...], "tools"?} or {"conversations": ...}) rendered under src->tmpl
 * as prepare renders it, ending with the assistant's header (add_generation_prompt); 0, or 1 with why[cap] naming
 * the key at fault (qwen-ft serve's chat requests come here too). */
int qf_gen_prompt_chat(const qf_gen_src *src, json_t *rec, qf_gen_prompts *out, char *why, size_t cap);
/* Appends every record of a JSONL file; a bad line is exit 2 naming FILE:LINE and the key. */
int qf_gen_prompts_read(const char *path, const qf_gen_src *src, qf_gen_prompts *out, qf_err *e);
void qf_gen_prompts_free(qf_gen_prompts *p);
/* The chat template for tok: name (a template's name; "auto" or NULL: the one beside the tokenizer at path,
 * recognised by content; NULL and none found: qwen1; "auto" and none found: exit 2). 0 or exit 2 with e set. */
int qf_gen_template(const char *path, const char *name, const qf_tokenizer *tok, qf_chat_template *tm, qf_err *e);

#endif
